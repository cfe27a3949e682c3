/* Choosing the next token from a row of logits: greedy (temperature 0), or
 * drawn from the softmax at a temperature after top-k and top-p (nucleus)
 * filtering, with a seeded generator so a run can be repeated exactly. */
#ifndef LLM_SAMPLER_H
#define LLM_SAMPLER_H

#include <stdint.h>

typedef struct llm_sampler {
    double temperature;   /* <= 0: greedy */
    int64_t top_k;        /* <= 0: no limit */
    double top_p;         /* >= 1: no limit */
    uint64_t state;       /* the generator's state; set from a seed by llm_sampler_seed */
} llm_sampler;

void llm_sampler_seed(llm_sampler *s, uint64_t seed);
/* The chosen id, or -1 when n <= 0 or no candidate is finite. */
int32_t llm_sample(llm_sampler *s, const float *logits, int64_t n);

#endif
