/* The decoder of every family the model library runs (llama, qwen2, qwen3,
 * gemma2, gemma3, phi3), from a GGUF file, on tensorframe's public API
 * only: one block builder reads a family's descriptor (llm_arch) and the
 * file's hyperparameters (llm_config) and never tests a family's name. */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

typedef enum llm_act { LLM_ACT_SILU, LLM_ACT_GELU_TANH } llm_act;

/* What sets one family's graph apart, as llama.cpp's src/models/<family>.cpp
 * builds it. Everything a file may or may not hold (biases, a fused QKV
 * matrix, an untied output) is found by looking, for every family. */
typedef struct llm_arch {
    const char *name;             /* general.architecture, and the prefix of its keys */
    tf_rope_mode rope_mode;       /* INTERLEAVED: llama's permuted q/k; HALF_SPLIT: NeoX */
    llm_act act;                  /* gate activation: act(gate) * up */
    bool qk_norm;                 /* per-head RMS norm of q and k before RoPE (attn_q_norm, attn_k_norm) */
    bool post_norms;              /* RMS norm of the attention and MLP outputs before each residual add */
    bool scale_embeddings;        /* rows of token_embd times sqrt(n_embd) */
    bool output_is_embeddings;    /* the output matrix is token_embd even when output.weight exists */
    bool attn_softcap;            /* reads attn_logit_softcapping: scores = c * tanh(scores / c) */
    double final_softcap_default; /* logits = c * tanh(logits / c) when the file names no c (0: none) */
    bool local_base_is_global;    /* local layers' RoPE base defaults to the global one, not 10^4 */
    int64_t swa_pattern;          /* with a window: layer l is local unless l % pattern == pattern - 1 */
    int64_t swa_window_default;   /* window when the file names none (0: local layers only when it does) */
    bool swa_ignored;             /* llama.cpp reads the window and attends globally anyway (phi3) */
    int64_t big_layers;           /* at this block count the attention scale is 1/sqrt(n_embd/n_head) (gemma 27B) */
} llm_arch;

/* The descriptor of general.architecture, or NULL. */
const llm_arch *llm_arch_find(const char *name, size_t len);
/* "llama, qwen2, ..." for messages. */
const char *llm_arch_names(void);

typedef struct llm_config {
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train, rope_dims;
    double rope_base, rope_base_local, rms_eps;
    double rope_scale;            /* global layers' linear RoPE scaling: angles times this (1: none) */
    double attn_scale;            /* multiplies q . k */
    double attn_softcap, final_softcap;   /* 0: none */
    int64_t n_swa;                /* the local layers' window: a query at p sees keys at p - n_swa < q <= p; 0: none */
} llm_config;

/* Projections that share their input: stacked by rows into one product
 * when they share a dtype; a file's quant mix can give them different
 * ones (Q4_K_M stores v in Q6_K or Q8_0 next to a Q4_K or Q5_0 q and k), and
 * then they stay apart and their outputs are concatenated. A file's own
 * fused matrix (phi3's attn_qkv, ffn_up holding gate and up) is one part. */
typedef struct llm_proj {
    tf_tensor *stacked;                            /* NULL when the parts' dtypes differ */
    tf_tensor *parts[3];                           /* the parts when they are not stacked */
    int n;
    tf_tensor *bias;                               /* [rows of all parts] or NULL */
} llm_proj;

typedef struct llm_layer {
    tf_tensor *attn_norm, *wo;                     /* projections are [out, in], as GGUF stores them */
    llm_proj qkv;                                  /* q, k and v: one product for three */
    tf_tensor *q_norm, *k_norm;                    /* [head_dim] or NULL */
    tf_tensor *attn_post_norm, *ffn_post_norm;     /* [n_embd] or NULL */
    tf_tensor *ffn_norm, *w_down;
    llm_proj gate_up;                              /* gate and up the same way */
    bool local;                                    /* attends within the sliding window, with rope_base_local */
    int dev;                                       /* index in llm_model.devs of the device it runs on */
} llm_layer;

typedef struct llm_model {
    const llm_arch *arch;
    llm_config cfg;
    tf_device *dev;                                /* devs[0]: the embeddings and the first layers */
    tf_device *devs[2];                            /* a split model's second device holds the other layers */
    int n_devs;
    tf_tensor *tok_embd, *out_norm, *output;       /* output is tok_embd when the embeddings are tied */
    tf_tensor *output_bias;                        /* [n_vocab] or NULL */
    float *rope_factors;                           /* rope_freqs.weight (Llama 3.1+): angle i divided by [i]; NULL: none */
    float *rope_long, *rope_short;                 /* LongRoPE (Phi-3 128k): the divisors past / within n_ctx_orig */
    int64_t n_ctx_orig;                            /* LongRoPE's original context: a cache longer takes rope_long */
    double rope_attn_factor;                       /* cos and sin scaled by it (LongRoPE's attention factor); 1: none */
    llm_layer *layers;
} llm_model;

/* The keys and values of every layer in n_ctx cells, shared by up to
 * n_seq sequences (64 at most), as llama.cpp's unified cache: k[l] and
 * v[l] are [1, n_head_kv, n_ctx, head_dim]; cell i holds the token at
 * position pos[i] of every sequence whose bit is set in seqs[i] (a prefix
 * copied to another sequence is shared, not copied). Cells [0, n_past)
 * have been written; a decode appends its tokens after them, and a query
 * attends the cells of its own sequence at or before its position. */
/* Prompt passes captured as graphs of one cache (llm_forward.c). */
typedef struct llm_graphs llm_graphs;
llm_graphs *llm_graphs_new(void);         /* NULL: TF_MODEL_GRAPHS=0 (or no memory): passes run eagerly */
void llm_graphs_free(llm_graphs *g);

typedef struct llm_cache {
    tf_tensor **k, **v;
    int64_t n_ctx, n_past, n_layer, n_seq;
    int64_t *pos;                                  /* -1: free */
    uint64_t *seqs;
    llm_graphs *graphs;                            /* they write k and v: they live and go with them */
} llm_cache;

/* A batch of tokens to decode together: entry i is token ids[i] at
 * position pos[i] of sequence seq[i]; its logits are returned when
 * logits[i]. pos, seq and logits may be NULL: sequence 0, the positions
 * after the ones it holds, logits of the last entry only. */
typedef struct llm_batch {
    const int32_t *ids;
    const int64_t *pos;
    const int32_t *seq;
    const bool *logits;
    int64_t n;
    bool hidden;          /* the chosen rows' final hidden states (after the output norm) instead of logits */
} llm_batch;

/* llm_model_load's dtype for the weights as the file stores them:
 * quantized matrices stay quantized (tf_matmul_quantized multiplies them). */
#define LLM_WEIGHTS_AS_STORED TF_DTYPE_COUNT

/* The configuration alone (no weights read): what a load would need. */
tf_status llm_model_config(const tf_gguf *f, const llm_arch **arch, llm_config *cfg);
/* Loads the weights onto dev as `dtype` (quantized blocks decoded to it), or
 * LLM_WEIGHTS_AS_STORED. Errors name the tensor or key at fault (llm_error()). */
tf_status llm_model_load(const tf_gguf *f, tf_device *dev, tf_dtype dtype, llm_model **out);
/* The same split across two devices: the embeddings and layers [0, n_first)
 * on first, the other layers and an untied output matrix on second. */
tf_status llm_model_load_split(const tf_gguf *f, tf_device *first, tf_device *second, int64_t n_first, tf_dtype dtype,
                               llm_model **out);
void llm_model_free(llm_model *m);

tf_status llm_cache_new(const llm_model *m, int64_t n_ctx, llm_cache **out);
tf_status llm_cache_new_seqs(const llm_model *m, int64_t n_ctx, int64_t n_seq, llm_cache **out);
void llm_cache_free(llm_cache *c);
/* The largest position sequence `seq` holds, or -1. */
int64_t llm_cache_seq_pos_max(const llm_cache *c, int32_t seq);
/* Forgets positions [p0, p1) of a sequence (p1 < 0: to the end; seq < 0:
 * of every sequence); cells no sequence holds are freed, and the trailing
 * free ones reused. */
tf_status llm_cache_seq_rm(llm_cache *c, int32_t seq, int64_t p0, int64_t p1);
/* Gives sequence dst the cells of src at positions [p0, p1) (shared). */
tf_status llm_cache_seq_cp(llm_cache *c, int32_t src, int32_t dst, int64_t p0, int64_t p1);

/* Runs ids[0..n) at positions n_past.. and appends them to the cache.
 * *logits (f32) is [n, n_vocab] when all_logits, else the last position's
 * [1, n_vocab]. TF_ERR_SIZE when the cache has no room left. */
tf_status llm_forward(const llm_model *m, llm_cache *c, const int32_t *ids, int64_t n, bool all_logits,
                      tf_tensor **logits);
/* Decodes a batch; *logits (f32) is [entries with logits, n_vocab], in
 * batch order. Bad entries (an id outside the vocabulary, a sequence
 * outside [0, n_seq), a position at or before one the sequence holds)
 * and a full cache are errors that leave the cache as it was. */
tf_status llm_decode(const llm_model *m, llm_cache *c, const llm_batch *b, tf_tensor **logits);


#endif
