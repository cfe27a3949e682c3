/* A tiny llama-architecture GGUF (2 layers, width 8, 2 query heads over 1
 * key/value head, a byte-level BPE vocabulary of 264 tokens with ChatML's
 * control tokens) written with gguf_builder, for the hostile-file tests of
 * examples/llm and as a fuzz seed that reaches the forward pass. Options
 * leave keys or tensors out (the caller writes its own, hostile, version)
 * and spoil the weights in the ways the tests need. */
#ifndef TINY_LLAMA_H
#define TINY_LLAMA_H

#include <stdbool.h>

#include "gguf_builder.h"

enum { TINY_EMBD = 8, TINY_HEADS = 2, TINY_KV_HEADS = 1, TINY_FF = 16, TINY_LAYERS = 2, TINY_SPECIALS = 3,
       TINY_VOCAB = TINY_SPECIALS + 256 + 5 };

typedef struct tiny_llama_opts {
    const char *const *omit;    /* NULL-ended key and tensor names to leave out */
    int matrix_type;            /* ggml type of the 2-d weights: GB_F32 (default), GB_F16, GB_I8, GB_I32 */
    const float *norm_fill;     /* every norm weight this value (NaN, inf), else near 1 */
    bool bad_utf8_token;        /* the last normal token's text is 3 bytes of invalid UTF-8 */
    bool no_tokenizer;          /* write no tokenizer.* keys (the caller writes its own) */
    bool untied_output;         /* an output.weight of its own, and llama.vocab_size */
    int n_vocab;                /* rows of token_embd: 0 for TINY_VOCAB, the tokenizer's own */
    unsigned seed;
} tiny_llama_opts;

void tiny_llama(gguf_builder *b, const tiny_llama_opts *o);

#endif
