/* BERT-family sentence encoders (all-MiniLM-L6-v2 and its kin): token,
 * position and segment embeddings, a layer norm, then blocks of
 * post-norm self-attention and a GELU MLP with biases, pooled (mean over
 * the real tokens, or the first token) and L2-normalized, as
 * sentence-transformers computes them. Read from a Hugging Face
 * model.safetensors with its config.json, or from a GGUF of llama.cpp's
 * `bert` architecture (its tensor names and bert.* keys). On the public
 * API only, on any device. */
#ifndef LLM_ENCODER_H
#define LLM_ENCODER_H

#include <stdbool.h>
#include <stdint.h>

#include <tensorframe/tensorframe.h>

#define LLM_ENCODER_MAX_LAYERS 64

typedef struct llm_encoder_layer {
    tf_tensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln1_w, *ln1_b;
    tf_tensor *wqkv, *bqkv;              /* Q, K, V stacked [3 * hidden, hidden] (then wq..bv are NULL) */
    tf_tensor *w_up, *b_up, *w_down, *b_down, *ln2_w, *ln2_b;
} llm_encoder_layer;

typedef enum llm_pooling { LLM_POOL_MEAN = 1, LLM_POOL_CLS = 2 } llm_pooling;

struct llm_encoder_graphs;               /* one captured pass per input shape (encoder.c) */

typedef struct llm_encoder {
    tf_device *dev;
    struct llm_encoder_graphs *graphs;    /* NULL: every pass op by op (TF_MODEL_GRAPHS=0) */
    int64_t hidden, heads, n_layers, max_positions, n_vocab;
    double eps;
    llm_pooling pooling;                  /* the file's (GGUF bert.pooling_type; mean for sentence-transformers) */
    tf_tensor *word, *position, *token_type, *ln_w, *ln_b;
    llm_encoder_layer layer[LLM_ENCODER_MAX_LAYERS];
} llm_encoder;

/* From model.safetensors (names with or without "bert.") and the
 * config.json beside it; matrices as `weights` (f32 or bf16). */
tf_status llm_encoder_load_safetensors(const char *path, tf_device *dev, tf_dtype weights, llm_encoder **out);
/* From a GGUF of architecture bert; matrices as stored, or decoded to
 * `weights` when it is a float dtype (TF_DTYPE_COUNT: as stored). */
tf_status llm_encoder_load_gguf(const tf_gguf *f, tf_device *dev, tf_dtype weights, llm_encoder **out);
void llm_encoder_free(llm_encoder *m);
/* ids [batch, len] (0-padded), lengths[b] real tokens in row b: the
 * pooled embeddings [batch, hidden], f32, unit length when normalize. */
tf_status llm_encoder_forward(const llm_encoder *m, int64_t batch, int64_t len, const int32_t *ids,
                              const int64_t *lengths, llm_pooling pooling, bool normalize, tf_tensor **out);

#endif
