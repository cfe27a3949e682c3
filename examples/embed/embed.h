/* all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder, sentence-transformers'
 * pipeline: BERT, mean pooling over the attention mask, L2 normalization)
 * on tensorframe's public API, on any device. Token ids come from the
 * caller (the model's tokenizer.json; the tests' fixtures were made with
 * the `tokenizers` package). */
#ifndef EMBED_H
#define EMBED_H

#include <tensorframe/tensorframe.h>

#define EMBED_MAX_LAYERS 24

typedef struct embed_layer {
    tf_tensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln1_w, *ln1_b;
    tf_tensor *w_up, *b_up, *w_down, *b_down, *ln2_w, *ln2_b;
} embed_layer;

typedef struct embed_model {
    tf_device *dev;
    tf_dtype weights;                    /* the matrices' dtype (f32 or bf16); norms and activations stay f32 */
    int64_t hidden, heads, n_layers, max_positions;
    tf_tensor *word, *position, *token_type, *ln_w, *ln_b;
    embed_layer layer[EMBED_MAX_LAYERS];
} embed_model;

/* The model from model.safetensors (names with or without "bert."). */
tf_status embed_model_load(const char *path, tf_device *dev, tf_dtype weights, embed_model **out);
void embed_model_free(embed_model *m);
/* ids [batch, len] (0-padded), lengths[b] real tokens in row b: the
 * sentence embeddings [batch, hidden], f32, unit length. */
tf_status embed_forward(const embed_model *m, int64_t batch, int64_t len, const int32_t *ids, const int64_t *lengths,
                        tf_tensor **out);

#endif
