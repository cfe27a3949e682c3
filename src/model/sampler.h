/* Choosing the next token from a row of logits, as llama.cpp's default
 * chain does: repetition penalties over the recent tokens, then top-k,
 * top-p (nucleus) and min-p filtering on the probabilities at temperature
 * 1, then the temperature, then a draw from a seeded generator so a run can
 * be repeated exactly. Temperature <= 0 is greedy (after the penalties). */
#ifndef LLM_SAMPLER_H
#define LLM_SAMPLER_H

#include <stdint.h>

#include <tensorframe/tensorframe.h>

typedef struct llm_sampler {
    double temperature;        /* <= 0: greedy */
    int64_t top_k;             /* <= 0: no limit */
    double top_p;              /* >= 1: no limit */
    double min_p;              /* <= 0: no limit; else drop p < min_p * max p */
    double repeat_penalty;     /* 1: none; a seen token's logit is divided (positive) or multiplied (negative) by it */
    double frequency_penalty;  /* subtracted once per time a token was seen */
    double presence_penalty;   /* subtracted once if a token was seen */
    int64_t penalty_last_n;    /* how many recent tokens the penalties look at (0: none) */
    uint64_t state;            /* the generator's state; set from a seed by llm_sampler_seed */
    int32_t *recent;           /* ring of the last penalty_last_n accepted tokens (llm_sampler_accept) */
    int64_t n_recent, next_recent;
} llm_sampler;

void llm_sampler_seed(llm_sampler *s, uint64_t seed);
/* Remembers a chosen token for the penalties. TF_ERR_OUT_OF_MEMORY leaves it as it was. */
tf_status llm_sampler_accept(llm_sampler *s, int32_t id);
void llm_sampler_reset(llm_sampler *s);       /* forgets the recent tokens and frees their ring */
/* The chosen id, or -1 when n <= 0 or no candidate is finite. */
int32_t llm_sample(llm_sampler *s, const float *logits, int64_t n);

#endif
