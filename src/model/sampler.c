/* See sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
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

tf_status llm_sampler_accept(llm_sampler *s, int32_t id) {
    if (s->penalty_last_n <= 0) return TF_OK;
    if (!s->recent) {
        if (s->penalty_last_n > (1 << 24)) s->penalty_last_n = 1 << 24;
        if (!(s->recent = malloc((size_t)s->penalty_last_n * sizeof *s->recent))) return TF_ERR_OUT_OF_MEMORY;
    }
    s->recent[s->next_recent] = id;
    s->next_recent = (s->next_recent + 1) % s->penalty_last_n;
    if (s->n_recent < s->penalty_last_n) s->n_recent++;
    return TF_OK;
}

void llm_sampler_reset(llm_sampler *s) {
    free(s->recent);
    s->recent = NULL;
    s->n_recent = s->next_recent = 0;
}

static bool has_penalties(const llm_sampler *s) {
    return s->n_recent > 0 && (s->repeat_penalty != 1 || s->frequency_penalty != 0 || s->presence_penalty != 0);
}

/* llama.cpp's penalties: a seen token's logit is divided by the repeat
 * penalty when positive (multiplied when negative), then lowered by the
 * frequency penalty per sighting and the presence penalty once. */
static void penalize(const llm_sampler *s, float *x, int64_t n) {
    for (int64_t i = 0; i < s->n_recent; i++) {
        int32_t id = s->recent[i];
        if (id < 0 || id >= n) continue;
        bool first = true;                        /* penalize each distinct token once, with its count */
        int64_t count = 0;
        for (int64_t j = 0; j < s->n_recent; j++) {
            if (s->recent[j] != id) continue;
            if (j < i) first = false;
            count++;
        }
        if (!first) continue;
        float v = x[id];
        v = v > 0 ? (float)(v / s->repeat_penalty) : (float)(v * s->repeat_penalty);
        x[id] = (float)(v - count * s->frequency_penalty - s->presence_penalty);
    }
}

/* The draw over candidates sorted by logit: top-k, top-p and min-p on the
 * probabilities at temperature 1, then the temperature. */
static int32_t draw(llm_sampler *s, candidate *c, int64_t m) {
    if (s->top_k > 0 && s->top_k < m) m = s->top_k;
    double *p = malloc((size_t)m * sizeof *p), total = 0;
    if (!p) return c[0].id;                 /* no memory: the largest is still an answer */
    for (int64_t i = 0; i < m; i++) total += p[i] = exp((double)c[i].logit - c[0].logit);
    if (s->top_p < 1) {                     /* the smallest head whose mass reaches top_p */
        double mass = 0;
        for (int64_t i = 0; i < m; i++)
            if ((mass += p[i] / total) >= s->top_p) {
                m = i + 1;
                break;
            }
    }
    if (s->min_p > 0)                       /* p[0] is the largest: relative to 1 */
        for (int64_t i = 1; i < m; i++)
            if (p[i] < s->min_p) {
                m = i;
                break;
            }
    total = 0;
    for (int64_t i = 0; i < m; i++) total += p[i] = exp(((double)c[i].logit - c[0].logit) / s->temperature);
    double r = uniform01(s) * total;
    int32_t id = c[m - 1].id;
    for (int64_t i = 0; i < m; i++) {
        if (r < p[i]) {
            id = c[i].id;
            break;
        }
        r -= p[i];
    }
    free(p);
    return id;
}

int32_t llm_sample(llm_sampler *s, const float *logits, int64_t n) {
    if (n <= 0) return -1;
    float *x = NULL;
    if (has_penalties(s) && (x = malloc((size_t)n * sizeof *x))) {
        for (int64_t i = 0; i < n; i++) x[i] = logits[i];
        penalize(s, x, n);
        logits = x;
    }
    int32_t id;
    candidate *c = s->temperature > 0 ? malloc((size_t)n * sizeof *c) : NULL;
    if (!c) {
        id = argmax(logits, n);             /* greedy, or no memory to sort */
    } else {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (isfinite(logits[i])) c[m++] = (candidate){logits[i], (int32_t)i};
        qsort(c, (size_t)m, sizeof *c, larger_first);
        id = m ? draw(s, c, m) : argmax(logits, n);
    }
    free(c);
    free(x);
    return id;
}
