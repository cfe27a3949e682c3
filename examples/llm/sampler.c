/* See sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

void llm_sampler_seed(llm_sampler *s, uint64_t seed) { s->state = seed; }

/* SplitMix64: small, fast and statistically sound for sampling. */
static double uniform01(llm_sampler *s) {
    uint64_t z = (s->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return (int32_t)best;
}

typedef struct candidate {
    float logit;
    int32_t id;
} candidate;

static int larger_first(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int32_t llm_sample(llm_sampler *s, const float *logits, int64_t n) {
    if (n <= 0) return -1;
    if (s->temperature <= 0) return argmax(logits, n);
    candidate *c = malloc((size_t)n * sizeof *c);
    if (!c) return argmax(logits, n);     /* no memory to sort: greedy is still an answer */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(logits[i])) c[m++] = (candidate){logits[i], (int32_t)i};
    qsort(c, (size_t)m, sizeof *c, larger_first);
    if (s->top_k > 0 && s->top_k < m) m = s->top_k;
    double total = 0;
    double *p = malloc((size_t)(m ? m : 1) * sizeof *p);
    if (!p || m == 0) {              /* nothing finite (or no memory): the largest wins */
        int32_t id = m ? c[0].id : argmax(logits, n);
        free(c);
        free(p);
        return id;
    }
    for (int64_t i = 0; i < m; i++) total += p[i] = exp(((double)c[i].logit - c[0].logit) / s->temperature);
    if (s->top_p < 1) {          /* the smallest head whose mass reaches top_p */
        double mass = 0;
        for (int64_t i = 0; i < m; i++) {
            mass += p[i] / total;
            if (mass >= s->top_p) {
                m = i + 1;
                break;
            }
        }
        total = 0;
        for (int64_t i = 0; i < m; i++) total += p[i];
    }
    double r = uniform01(s) * total;
    int32_t id = c[m - 1].id;
    for (int64_t i = 0; i < m; i++) {
        if (r < p[i]) {
            id = c[i].id;
            break;
        }
        r -= p[i];
    }
    free(c);
    free(p);
    return id;
}
