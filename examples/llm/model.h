/* A llama-architecture decoder (Llama, SmolLM, Mistral-style GQA models)
 * from a GGUF file, run entirely through tensorframe's public API on any
 * device: RMSNorm, rotary embeddings at the cache position, grouped-query
 * attention over a KV cache that grows in place, and the SwiGLU MLP. */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

typedef struct llm_config {
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train, rope_dims;
    double rope_base, rms_eps;
} llm_config;

/* Projections that share their input: stacked by rows into one product
 * when they share a dtype; a file's quant mix can give them different
 * ones (Q4_K_M stores v in Q6_K or Q8_0 next to a Q4_K or Q5_0 q and k), and
 * then they stay apart and their outputs are concatenated. */
typedef struct llm_proj {
    tf_tensor *stacked;                            /* NULL when the parts' dtypes differ */
    tf_tensor *parts[3];                           /* the parts when they are not stacked */
    int n;
} llm_proj;

typedef struct llm_layer {
    tf_tensor *attn_norm, *wo;                     /* projections are [out, in], as GGUF stores them */
    llm_proj qkv;                                  /* q, k and v: one product for three */
    tf_tensor *ffn_norm, *w_down;
    llm_proj gate_up;                              /* gate and up the same way */
} llm_layer;

typedef struct llm_model {
    llm_config cfg;
    tf_device *dev;
    tf_tensor *tok_embd, *out_norm, *output;       /* output is tok_embd when the embeddings are tied */
    llm_layer *layers;
} llm_model;

/* The keys and values of every layer for up to n_ctx positions:
 * k[l] and v[l] are [1, n_head_kv, n_ctx, head_dim]; positions [0, n_past)
 * hold the tokens seen so far, and each forward writes its own after them. */
typedef struct llm_cache {
    tf_tensor **k, **v;
    int64_t n_ctx, n_past, n_layer;
} llm_cache;

/* llm_model_load's dtype for the weights as the file stores them:
 * quantized matrices stay quantized (tf_matmul_quantized multiplies them). */
#define LLM_WEIGHTS_AS_STORED TF_DTYPE_COUNT

/* Loads the weights onto dev as `dtype` (quantized blocks decoded to it), or
 * LLM_WEIGHTS_AS_STORED. Errors name the tensor or key at fault (llm_error()). */
tf_status llm_model_load(const tf_gguf *f, tf_device *dev, tf_dtype dtype, llm_model **out);
void llm_model_free(llm_model *m);

tf_status llm_cache_new(const llm_model *m, int64_t n_ctx, llm_cache **out);
void llm_cache_free(llm_cache *c);

/* Runs ids[0..n) at positions n_past.. and appends them to the cache.
 * *logits (f32) is [n, n_vocab] when all_logits, else the last position's
 * [1, n_vocab]. TF_ERR_SIZE when the cache has no room left. */
tf_status llm_forward(const llm_model *m, llm_cache *c, const int32_t *ids, int64_t n, bool all_logits,
                      tf_tensor **logits);

#endif
