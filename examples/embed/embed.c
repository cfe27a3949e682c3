/* all-MiniLM-L6-v2's forward pass: see embed.h. */
#include "embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/check.h>

/* ---- loading ---- */

typedef struct loader {
    const tf_safetensors *f;
    const char *prefix;                  /* "" or "bert." */
    tf_device *dev;
} loader;

static tf_status load(const loader *L, const char *name, tf_dtype dt, tf_tensor **out) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", L->prefix, name);
    return tf_safetensors_load_as(L->f, full, L->dev, dt, out);
}

/* weight (in the model's dtype) and bias (f32) of a linear layer */
static tf_status load_linear(const loader *L, const char *name, tf_dtype dt, tf_tensor **w, tf_tensor **b) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", name);
    TF_TRY(load(L, n, dt, w));
    snprintf(n, sizeof n, "%s.bias", name);
    return load(L, n, TF_F32, b);
}

static tf_status load_norm(const loader *L, const char *name, tf_tensor **w, tf_tensor **b) {
    return load_linear(L, name, TF_F32, w, b);
}

static tf_status load_layer(const loader *L, int i, tf_dtype dt, embed_layer *l) {
    char p[160], n[200];
    snprintf(p, sizeof p, "encoder.layer.%d.", i);
#define NAME(suffix) (snprintf(n, sizeof n, "%s%s", p, suffix), n)
    TF_TRY(load_linear(L, NAME("attention.self.query"), dt, &l->wq, &l->bq));
    TF_TRY(load_linear(L, NAME("attention.self.key"), dt, &l->wk, &l->bk));
    TF_TRY(load_linear(L, NAME("attention.self.value"), dt, &l->wv, &l->bv));
    TF_TRY(load_linear(L, NAME("attention.output.dense"), dt, &l->wo, &l->bo));
    TF_TRY(load_norm(L, NAME("attention.output.LayerNorm"), &l->ln1_w, &l->ln1_b));
    TF_TRY(load_linear(L, NAME("intermediate.dense"), dt, &l->w_up, &l->b_up));
    TF_TRY(load_linear(L, NAME("output.dense"), dt, &l->w_down, &l->b_down));
    TF_TRY(load_norm(L, NAME("output.LayerNorm"), &l->ln2_w, &l->ln2_b));
#undef NAME
    return TF_OK;
}

tf_status embed_model_load(const char *path, tf_device *dev, tf_dtype weights, embed_model **out) {
    *out = NULL;
    embed_model *m = calloc(1, sizeof *m);
    if (!m) return TF_ERR_OUT_OF_MEMORY;
    m->dev = dev;
    m->weights = weights;
    tf_safetensors *f = NULL;
    tf_status s = tf_safetensors_open(path, &f);
    loader L = {f, "", dev};
    if (s == TF_OK && tf_safetensors_find(f, "embeddings.word_embeddings.weight") < 0) L.prefix = "bert.";
    if (s == TF_OK) s = load(&L, "embeddings.word_embeddings.weight", TF_F32, &m->word);
    if (s == TF_OK) s = load(&L, "embeddings.position_embeddings.weight", TF_F32, &m->position);
    if (s == TF_OK) s = load(&L, "embeddings.token_type_embeddings.weight", TF_F32, &m->token_type);
    if (s == TF_OK) s = load_norm(&L, "embeddings.LayerNorm", &m->ln_w, &m->ln_b);
    if (s == TF_OK) {
        m->hidden = tf_tensor_shape(m->word)[1];
        m->max_positions = tf_tensor_shape(m->position)[0];
        m->heads = m->hidden / 32;                   /* MiniLM-L6-H384: 12 heads of 32 */
    }
    for (int i = 0; s == TF_OK && i < EMBED_MAX_LAYERS; i++) {
        char probe[128];
        snprintf(probe, sizeof probe, "%sencoder.layer.%d.attention.self.query.weight", L.prefix, i);
        if (tf_safetensors_find(f, probe) < 0) break;
        s = load_layer(&L, i, weights, &m->layer[i]);
        m->n_layers = i + 1;
    }
    tf_safetensors_close(f);
    if (s != TF_OK) {
        embed_model_free(m);
        return s;
    }
    *out = m;
    return TF_OK;
}

void embed_model_free(embed_model *m) {
    if (!m) return;
    tf_tensor *top[] = {m->word, m->position, m->token_type, m->ln_w, m->ln_b};
    for (int i = 0; i < 5; i++) tf_tensor_release(top[i]);
    for (int i = 0; i < EMBED_MAX_LAYERS; i++) {
        tf_tensor **t = (tf_tensor **)&m->layer[i];
        for (size_t k = 0; k < sizeof(embed_layer) / sizeof(tf_tensor *); k++) tf_tensor_release(t[k]);
    }
    free(m);
}

/* ---- the forward pass (every temporary in one scope) ---- */

/* x [B, L, hidden] -> [B, heads, L, hidden / heads] */
static tf_status split_heads(const embed_model *m, const tf_tensor *x, int64_t B, int64_t L, tf_tensor **out) {
    tf_tensor *r;
    TF_TRY(tf_reshape(x, 4, (int64_t[]){B, L, m->heads, m->hidden / m->heads}, &r));
    return tf_permute(r, (int[]){0, 2, 1, 3}, out);
}

static tf_status attention(const embed_model *m, const embed_layer *l, const tf_tensor *x, const tf_tensor *mask,
                           int64_t B, int64_t L, tf_tensor **out) {
    tf_tensor *q, *k, *v, *qh, *kh, *vh, *a, *at, *merged, *o;
    TF_TRY(tf_linear(x, l->wq, l->bq, &q));
    TF_TRY(tf_linear(x, l->wk, l->bk, &k));
    TF_TRY(tf_linear(x, l->wv, l->bv, &v));
    TF_TRY(split_heads(m, q, B, L, &qh));
    TF_TRY(split_heads(m, k, B, L, &kh));
    TF_TRY(split_heads(m, v, B, L, &vh));
    TF_TRY(tf_sdpa(qh, kh, vh, mask, 0, false, 0, &a));
    TF_TRY(tf_permute(a, (int[]){0, 2, 1, 3}, &at));
    TF_TRY(tf_reshape(at, 3, (int64_t[]){B, L, m->hidden}, &merged));
    TF_TRY(tf_linear(merged, l->wo, l->bo, &o));
    TF_TRY(tf_binary_into(o, TF_OP_ADD, o, x));             /* the residual, in place */
    return tf_layernorm(o, l->ln1_w, l->ln1_b, 1e-12, out);
}

static tf_status feed_forward(const embed_layer *l, const tf_tensor *x, tf_tensor **out) {
    tf_tensor *up, *down;
    TF_TRY(tf_linear(x, l->w_up, l->b_up, &up));
    TF_TRY(tf_unary_into(up, TF_OP_GELU, up));
    TF_TRY(tf_linear(up, l->w_down, l->b_down, &down));
    TF_TRY(tf_binary_into(down, TF_OP_ADD, down, x));
    return tf_layernorm(down, l->ln2_w, l->ln2_b, 1e-12, out);
}

static tf_status encode(const embed_model *m, int64_t B, int64_t L, const int32_t *ids, const int64_t *lengths,
                        tf_tensor **out) {
    uint8_t *keep = malloc((size_t)(B * L) + 1);
    if (!keep) return TF_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < L; j++) keep[b * L + j] = j < lengths[b];
    tf_tensor *id_t, *keep_t, *mask, *x, *pos, *type0, *h, *pooled;
    tf_status s = tf_tensor_from_data(m->dev, TF_BOOL, 2, (int64_t[]){B, L}, keep, &keep_t);
    free(keep);
    TF_TRY(s);
    TF_TRY(tf_tensor_from_data(m->dev, TF_I32, 2, (int64_t[]){B, L}, ids, &id_t));
    TF_TRY(tf_key_padding_mask(keep_t, &mask));
    TF_TRY(tf_embedding(m->word, id_t, &x));
    TF_TRY(tf_slice(m->position, 0, 0, L, 1, &pos));       /* [L, hidden] broadcasts over the batch */
    TF_TRY(tf_binary_into(x, TF_OP_ADD, x, pos));          /* x is the gather's own output */
    TF_TRY(tf_slice(m->token_type, 0, 0, 1, 1, &type0));   /* every token is segment 0 */
    TF_TRY(tf_binary_into(x, TF_OP_ADD, x, type0));
    TF_TRY(tf_layernorm(x, m->ln_w, m->ln_b, 1e-12, &h));
    for (int i = 0; i < m->n_layers; i++) {
        tf_tensor *a, *f;
        TF_TRY(attention(m, &m->layer[i], h, mask, B, L, &a));
        TF_TRY(feed_forward(&m->layer[i], a, &f));
        h = f;
    }
    TF_TRY(tf_masked_mean(h, keep_t, 1, false, &pooled));
    return tf_normalize(pooled, 2, -1, 1e-12, out);
}

tf_status embed_forward(const embed_model *m, int64_t batch, int64_t len, const int32_t *ids, const int64_t *lengths,
                        tf_tensor **out) {
    *out = NULL;
    if (batch < 1 || len < 1 || len > m->max_positions) return TF_ERR_SHAPE;
    tf_scope *scope;
    TF_TRY(tf_scope_begin(&scope));
    tf_tensor *e = NULL;
    tf_status s = encode(m, batch, len, ids, lengths, &e);
    if (s == TF_OK) *out = tf_tensor_retain(e);             /* the one tensor that outlives the scope */
    tf_scope_end(scope);
    return s;
}
