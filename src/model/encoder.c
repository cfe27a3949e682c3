/* BERT-family encoders: see encoder.h. */
#include "encoder.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/check.h>

#include "tokenizer.h"   /* llm_fail */

static void start_graphs(llm_encoder *m);

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

static tf_status load_layer(const loader *L, int i, tf_dtype dt, llm_encoder_layer *l) {
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

/* ---- Q, K and V as one product ----
 * Their weights stacked [3 * hidden, hidden] with the biases: one linear
 * layer, its A packed and its threads woken once instead of three times,
 * and wider panels (the CPU's single-sentence passes are short of work per
 * product). Taken when the three share a dtype and have biases. The rows
 * are stacked as bytes (tf_concat does not take block-quantized dtypes,
 * whose rows are whole blocks); if stacking fails (memory) the layer keeps
 * its three products. */
static tf_status stack_rows(const tf_tensor *const parts[3], tf_tensor **out) {
    *out = NULL;
    int64_t bytes[3], total = 0, rows = 0;
    for (int i = 0; i < 3; i++) {
        bytes[i] = tf_tensor_nbytes(parts[i]);
        total += bytes[i];
        rows += tf_tensor_shape(parts[i])[0];
    }
    char *host = malloc((size_t)total + 1);
    if (!host) return TF_ERR_OUT_OF_MEMORY;
    tf_status s = TF_OK;
    for (int i = 0, at = 0; i < 3 && s == TF_OK; at += (int)bytes[i], i++)
        s = tf_tensor_read(parts[i], host + at, (size_t)bytes[i]);
    int nd = tf_tensor_ndim(parts[0]);
    int64_t shape[2] = {rows, nd == 2 ? tf_tensor_shape(parts[0])[1] : 0};
    if (s == TF_OK) s = tf_tensor_from_data(tf_tensor_device(parts[0]), tf_tensor_dtype(parts[0]), nd, shape, host, out);
    free(host);
    return s;
}

static void merge_qkv(llm_encoder *m) {
    for (int i = 0; i < m->n_layers; i++) {
        llm_encoder_layer *l = &m->layer[i];
        tf_dtype dt = tf_tensor_dtype(l->wq);
        if (tf_tensor_dtype(l->wk) != dt || tf_tensor_dtype(l->wv) != dt || !l->bq || !l->bk || !l->bv ||
            tf_tensor_dtype(l->bk) != tf_tensor_dtype(l->bq) || tf_tensor_dtype(l->bv) != tf_tensor_dtype(l->bq))
            continue;
        const tf_tensor *const ws[3] = {l->wq, l->wk, l->wv}, *const bs[3] = {l->bq, l->bk, l->bv};
        tf_tensor *w = NULL, *b = NULL;
        if (stack_rows(ws, &w) != TF_OK || stack_rows(bs, &b) != TF_OK) {
            tf_tensor_release(w);
            continue;
        }
        l->wqkv = w;
        l->bqkv = b;
        tf_tensor **parts[6] = {&l->wq, &l->bq, &l->wk, &l->bk, &l->wv, &l->bv};
        for (int k = 0; k < 6; k++) {
            tf_tensor_release(*parts[k]);
            *parts[k] = NULL;
        }
    }
}

/* An integer or number value of "key" in a small JSON object (config.json):
 * the first occurrence, NaN when absent. Enough for Hugging Face configs,
 * whose top-level keys these are. */
static double json_number(const char *json, const char *key) {
    char quoted[96];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *at = strstr(json, quoted);
    if (!at) return NAN;
    at += strlen(quoted);
    while (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r') at++;
    if (*at++ != ':') return NAN;
    char *end;
    double v = strtod(at, &end);
    return end == at ? NAN : v;
}

/* config.json beside the weights: heads and the norms' epsilon. */
static tf_status read_config_json(const char *weights_path, llm_encoder *m) {
    char path[4096];
    const char *slash = strrchr(weights_path, '/');
    int dir = slash ? (int)(slash - weights_path) : 1;
    snprintf(path, sizeof path, "%.*s/config.json", dir, slash ? weights_path : ".");
    FILE *f = fopen(path, "rb");
    if (!f) return llm_fail(TF_ERR_IO, "encoder: no config.json beside %s", weights_path);
    char *json = calloc(1, 1 << 16);
    size_t n = json ? fread(json, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (!json) return llm_fail(TF_ERR_OUT_OF_MEMORY, "encoder: out of memory");
    double heads = json_number(json, "num_attention_heads"), eps = json_number(json, "layer_norm_eps");
    free(json);
    if (n == 0 || !(heads >= 1 && heads <= 1024) || (double)(int64_t)heads != heads || m->hidden % (int64_t)heads)
        return llm_fail(TF_ERR_FORMAT, "encoder: %s: num_attention_heads %g does not divide width %lld", path, heads,
                        (long long)m->hidden);
    m->heads = (int64_t)heads;
    m->eps = eps > 0 && eps < 0.1 ? eps : 1e-12;
    return TF_OK;
}

tf_status llm_encoder_load_safetensors(const char *path, tf_device *dev, tf_dtype weights, llm_encoder **out) {
    *out = NULL;
    llm_encoder *m = calloc(1, sizeof *m);
    if (!m) return llm_fail(TF_ERR_OUT_OF_MEMORY, "encoder: out of memory");
    m->dev = dev;
    m->pooling = LLM_POOL_MEAN;
    tf_safetensors *f = NULL;
    tf_status s = tf_safetensors_open(path, &f);
    if (s != TF_OK) llm_fail(s, "encoder: %s", tf_last_error());
    loader L = {f, "", dev};
    if (s == TF_OK && tf_safetensors_find(f, "embeddings.word_embeddings.weight") < 0) L.prefix = "bert.";
    if (s == TF_OK) s = load(&L, "embeddings.word_embeddings.weight", TF_F32, &m->word);
    if (s == TF_OK) s = load(&L, "embeddings.position_embeddings.weight", TF_F32, &m->position);
    if (s == TF_OK) s = load(&L, "embeddings.token_type_embeddings.weight", TF_F32, &m->token_type);
    if (s == TF_OK) s = load_norm(&L, "embeddings.LayerNorm", &m->ln_w, &m->ln_b);
    if (s == TF_OK) {
        m->hidden = tf_tensor_shape(m->word)[1];
        m->n_vocab = tf_tensor_shape(m->word)[0];
        m->max_positions = tf_tensor_shape(m->position)[0];
        s = read_config_json(path, m);
    } else {
        llm_fail(s, "encoder: %s", tf_last_error());
    }
    for (int i = 0; s == TF_OK && i < LLM_ENCODER_MAX_LAYERS; i++) {
        char probe[128];
        snprintf(probe, sizeof probe, "%sencoder.layer.%d.attention.self.query.weight", L.prefix, i);
        if (tf_safetensors_find(f, probe) < 0) break;
        if ((s = load_layer(&L, i, weights, &m->layer[i])) != TF_OK) llm_fail(s, "encoder: layer %d: %s", i, tf_last_error());
        m->n_layers = i + 1;
    }
    tf_safetensors_close(f);
    if (s == TF_OK && m->n_layers == 0) s = llm_fail(TF_ERR_FORMAT, "encoder: %s holds no encoder layers", path);
    if (s != TF_OK) {
        llm_encoder_free(m);
        return s;
    }
    merge_qkv(m);
    start_graphs(m);
    *out = m;
    return TF_OK;
}

/* ---- from a GGUF of llama.cpp's bert architecture ---- */

typedef struct gguf_loader {
    const tf_gguf *f;
    tf_device *dev;
    tf_dtype dtype;
    int64_t used;
} gguf_loader;

static tf_status gguf_load(gguf_loader *L, const char *name, bool matrix, tf_tensor **out) {
    if (tf_gguf_find_tensor(L->f, name) < 0) return llm_fail(TF_ERR_FORMAT, "encoder: the file has no tensor %s", name);
    tf_status s = !matrix || L->dtype == TF_DTYPE_COUNT ? (matrix ? tf_gguf_load(L->f, name, L->dev, out)
                                                                  : tf_gguf_load_as(L->f, name, L->dev, TF_F32, out))
                                                        : tf_gguf_load_as(L->f, name, L->dev, L->dtype, out);
    if (s != TF_OK) return llm_fail(s, "encoder: %s: %s", name, tf_last_error());
    L->used++;
    return TF_OK;
}

static tf_status gguf_pair(gguf_loader *L, int i, const char *part, bool matrix, tf_tensor **w, tf_tensor **b) {
    char n[128];
    if (i >= 0) snprintf(n, sizeof n, "blk.%d.%s.weight", i, part);
    else snprintf(n, sizeof n, "%s.weight", part);
    TF_TRY(gguf_load(L, n, matrix, w));
    n[strlen(n) - 6] = 0;                       /* ".weight" -> ".bias" */
    strcat(n, "bias");
    return gguf_load(L, n, false, b);
}

static tf_status gguf_int(const tf_gguf *f, const char *key, int64_t lo, int64_t hi, int64_t *v) {
    int64_t k = tf_gguf_find_key(f, key);
    if (k < 0 || tf_gguf_get_int(f, k, 0, v) != TF_OK || *v < lo || *v > hi)
        return llm_fail(TF_ERR_FORMAT, "encoder: %s is absent or outside [%lld, %lld]", key, (long long)lo, (long long)hi);
    return TF_OK;
}

/* A model's shapes against its keys: the loads above check nothing. */
static tf_status check_shapes(const llm_encoder *m) {
    const int64_t e = m->hidden;
    bool ok = tf_tensor_shape(m->word)[1] == e && tf_tensor_shape(m->position)[1] == e &&
              tf_tensor_shape(m->token_type)[1] == e && tf_tensor_numel(m->ln_w) == e;
    for (int i = 0; ok && i < m->n_layers; i++) {
        const llm_encoder_layer *l = &m->layer[i];
        ok = tf_tensor_shape(l->wq)[0] == e && tf_tensor_shape(l->wq)[1] == e && tf_tensor_shape(l->wk)[1] == e &&
             tf_tensor_shape(l->wv)[1] == e && tf_tensor_shape(l->wo)[0] == e && tf_tensor_numel(l->bq) == e &&
             tf_tensor_shape(l->w_up)[1] == e && tf_tensor_shape(l->w_down)[0] == e &&
             tf_tensor_shape(l->w_down)[1] == tf_tensor_shape(l->w_up)[0] && tf_tensor_numel(l->ln2_w) == e;
    }
    return ok ? TF_OK : llm_fail(TF_ERR_SHAPE, "encoder: the tensors' shapes do not match width %lld", (long long)e);
}

tf_status llm_encoder_load_gguf(const tf_gguf *f, tf_device *dev, tf_dtype weights, llm_encoder **out) {
    *out = NULL;
    llm_encoder *m = calloc(1, sizeof *m);
    if (!m) return llm_fail(TF_ERR_OUT_OF_MEMORY, "encoder: out of memory");
    m->dev = dev;
    gguf_loader L = {f, dev, weights, 0};
    int64_t pooling = 1;
    tf_status s = gguf_int(f, "bert.block_count", 1, LLM_ENCODER_MAX_LAYERS, &m->n_layers);
    if (s == TF_OK) s = gguf_int(f, "bert.embedding_length", 1, 1 << 16, &m->hidden);
    if (s == TF_OK) s = gguf_int(f, "bert.attention.head_count", 1, 1024, &m->heads);
    if (s == TF_OK && m->hidden % m->heads) s = llm_fail(TF_ERR_FORMAT, "encoder: heads do not divide the width");
    if (s == TF_OK && tf_gguf_find_key(f, "bert.pooling_type") >= 0) s = gguf_int(f, "bert.pooling_type", 0, 4, &pooling);
    m->pooling = pooling == 2 ? LLM_POOL_CLS : LLM_POOL_MEAN;
    int64_t k = tf_gguf_find_key(f, "bert.attention.layer_norm_epsilon");
    m->eps = 1e-12;
    if (s == TF_OK && k >= 0 && (tf_gguf_get_float(f, k, 0, &m->eps) != TF_OK || !(m->eps > 0 && m->eps < 0.1)))
        s = llm_fail(TF_ERR_FORMAT, "encoder: bert.attention.layer_norm_epsilon is not in (0, 0.1)");
    if (s == TF_OK) s = gguf_load(&L, "token_embd.weight", false, &m->word);
    if (s == TF_OK) s = gguf_load(&L, "position_embd.weight", false, &m->position);
    if (s == TF_OK) s = gguf_load(&L, "token_types.weight", false, &m->token_type);
    if (s == TF_OK) s = gguf_pair(&L, -1, "token_embd_norm", false, &m->ln_w, &m->ln_b);
    for (int i = 0; s == TF_OK && i < m->n_layers; i++) {
        llm_encoder_layer *l = &m->layer[i];
        s = gguf_pair(&L, i, "attn_q", true, &l->wq, &l->bq);
        if (s == TF_OK) s = gguf_pair(&L, i, "attn_k", true, &l->wk, &l->bk);
        if (s == TF_OK) s = gguf_pair(&L, i, "attn_v", true, &l->wv, &l->bv);
        if (s == TF_OK) s = gguf_pair(&L, i, "attn_output", true, &l->wo, &l->bo);
        if (s == TF_OK) s = gguf_pair(&L, i, "attn_output_norm", false, &l->ln1_w, &l->ln1_b);
        if (s == TF_OK) s = gguf_pair(&L, i, "ffn_up", true, &l->w_up, &l->b_up);
        if (s == TF_OK) s = gguf_pair(&L, i, "ffn_down", true, &l->w_down, &l->b_down);
        if (s == TF_OK) s = gguf_pair(&L, i, "layer_output_norm", false, &l->ln2_w, &l->ln2_b);
    }
    if (s == TF_OK) {
        m->n_vocab = tf_tensor_shape(m->word)[0];
        m->max_positions = tf_tensor_shape(m->position)[0];
        s = check_shapes(m);
    }
    if (s == TF_OK && L.used != tf_gguf_tensor_count(f))
        s = llm_fail(TF_ERR_FORMAT, "encoder: the file holds %lld tensors, a bert model of %lld blocks %lld",
                     (long long)tf_gguf_tensor_count(f), (long long)m->n_layers, (long long)L.used);
    if (s != TF_OK) {
        llm_encoder_free(m);
        return s;
    }
    merge_qkv(m);
    start_graphs(m);
    *out = m;
    return TF_OK;
}

/* ---- the forward pass (every temporary in one scope) ---- */

/* x [B, L, hidden] -> [B, heads, L, hidden / heads] */
static tf_status split_heads(const llm_encoder *m, const tf_tensor *x, int64_t B, int64_t L, tf_tensor **out) {
    tf_tensor *r;
    TF_TRY(tf_reshape(x, 4, (int64_t[]){B, L, m->heads, m->hidden / m->heads}, &r));
    return tf_permute(r, (int[]){0, 2, 1, 3}, out);
}

static tf_status attention(const llm_encoder *m, const llm_encoder_layer *l, const tf_tensor *x, const tf_tensor *mask,
                           int64_t B, int64_t L, tf_tensor **out) {
    tf_tensor *q, *k, *v, *qh, *kh, *vh, *a, *at, *merged, *o;
    if (l->wqkv) {                                         /* one product, the heads sliced from its rows */
        const int64_t e = m->hidden;
        tf_tensor *qkv;
        TF_TRY(tf_linear(x, l->wqkv, l->bqkv, &qkv));
        TF_TRY(tf_slice(qkv, 2, 0, e, 1, &q));
        TF_TRY(tf_slice(qkv, 2, e, 2 * e, 1, &k));
        TF_TRY(tf_slice(qkv, 2, 2 * e, 3 * e, 1, &v));
    } else {
        TF_TRY(tf_linear(x, l->wq, l->bq, &q));
        TF_TRY(tf_linear(x, l->wk, l->bk, &k));
        TF_TRY(tf_linear(x, l->wv, l->bv, &v));
    }
    TF_TRY(split_heads(m, q, B, L, &qh));
    TF_TRY(split_heads(m, k, B, L, &kh));
    TF_TRY(split_heads(m, v, B, L, &vh));
    TF_TRY(tf_sdpa(qh, kh, vh, mask, 0, false, 0, &a));
    TF_TRY(tf_permute(a, (int[]){0, 2, 1, 3}, &at));
    TF_TRY(tf_reshape(at, 3, (int64_t[]){B, L, m->hidden}, &merged));
    TF_TRY(tf_linear(merged, l->wo, l->bo, &o));
    TF_TRY(tf_binary_into(o, TF_OP_ADD, o, x));             /* the residual, in place */
    return tf_layernorm(o, l->ln1_w, l->ln1_b, m->eps, out);
}

static tf_status feed_forward(const llm_encoder *m, const llm_encoder_layer *l, const tf_tensor *x, tf_tensor **out) {
    tf_tensor *up, *down;
    TF_TRY(tf_linear(x, l->w_up, l->b_up, &up));
    TF_TRY(tf_unary_into(up, TF_OP_GELU, up));
    TF_TRY(tf_linear(up, l->w_down, l->b_down, &down));
    TF_TRY(tf_binary_into(down, TF_OP_ADD, down, x));
    return tf_layernorm(down, l->ln2_w, l->ln2_b, m->eps, out);
}

/* The pass from its inputs on the device: ids [B, L] (i32) and keep [B, L]
 * (bool: the real tokens). Every op on tensors, nothing read back: a graph
 * captures it whole. */
static tf_status encode(const llm_encoder *m, int64_t B, int64_t L, const tf_tensor *id_t, const tf_tensor *keep_t,
                        llm_pooling pooling, bool normalize, tf_tensor **out) {
    tf_tensor *mask, *x, *pos, *type0, *h, *pooled;
    TF_TRY(tf_key_padding_mask(keep_t, &mask));
    TF_TRY(tf_embedding(m->word, id_t, &x));
    TF_TRY(tf_slice(m->position, 0, 0, L, 1, &pos));       /* [L, hidden] broadcasts over the batch */
    TF_TRY(tf_binary_into(x, TF_OP_ADD, x, pos));          /* x is the gather's own output */
    TF_TRY(tf_slice(m->token_type, 0, 0, 1, 1, &type0));   /* every token is segment 0 */
    TF_TRY(tf_add_layernorm(x, type0, m->ln_w, m->ln_b, m->eps, &h));   /* the segment row, then the norm: one pass */
    for (int i = 0; i < m->n_layers; i++) {
        tf_tensor *a, *f;
        TF_TRY(attention(m, &m->layer[i], h, mask, B, L, &a));
        TF_TRY(feed_forward(m, &m->layer[i], a, &f));
        h = f;
    }
    if (pooling == LLM_POOL_CLS) {
        tf_tensor *first;
        TF_TRY(tf_slice(h, 1, 0, 1, 1, &first));
        TF_TRY(tf_reshape(first, 2, (int64_t[]){B, m->hidden}, &pooled));
    } else {
        TF_TRY(tf_masked_mean(h, keep_t, 1, false, &pooled));
    }
    if (!normalize) return tf_contiguous(pooled, out);
    return tf_normalize(pooled, 2, -1, 1e-12, out);
}

/* ---- one captured graph per input shape ----
 * A pass of a shape seen before replays the graph captured the first time:
 * no validation, placement or allocation per op, and the graph's fusion
 * pass has merged each linear layer with its GELU or residual add. The
 * inputs are written into the graph's own input tensors; the result is
 * copied out (the next replay rewrites the graph's). Up to
 * ENCODER_GRAPHS shapes, the least recently used dropped first;
 * TF_MODEL_GRAPHS=0 runs every pass op by op. */

#define ENCODER_GRAPHS 4

typedef struct encoder_graph {
    int64_t batch, len;
    llm_pooling pooling;
    bool normalize;
    uint64_t used;                       /* the pass that last used it (LRU) */
    tf_graph *graph;
    tf_tensor *ids, *keep, *out;         /* the graph's inputs and output */
} encoder_graph;

struct llm_encoder_graphs {
    pthread_mutex_t lock;                /* one pass at a time replays the graphs */
    uint64_t passes;
    encoder_graph slot[ENCODER_GRAPHS];
};

static void drop_graph(encoder_graph *e) {
    tf_graph_destroy(e->graph);
    tf_tensor_release(e->ids);
    tf_tensor_release(e->keep);
    tf_tensor_release(e->out);
    memset(e, 0, sizeof *e);
}

static uint8_t *keep_mask(int64_t B, int64_t L, const int64_t *lengths) {
    uint8_t *keep = malloc((size_t)(B * L) + 1);
    if (!keep) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < L; j++) keep[b * L + j] = j < lengths[b];
    return keep;
}

/* The input tensors of a pass, filled. */
static tf_status make_inputs(const llm_encoder *m, int64_t B, int64_t L, const int32_t *ids, const int64_t *lengths,
                             tf_tensor **id_t, tf_tensor **keep_t) {
    *id_t = *keep_t = NULL;
    uint8_t *keep = keep_mask(B, L, lengths);
    if (!keep) return TF_ERR_OUT_OF_MEMORY;
    tf_status s = tf_tensor_from_data(m->dev, TF_BOOL, 2, (int64_t[]){B, L}, keep, keep_t);
    free(keep);
    if (s == TF_OK) s = tf_tensor_from_data(m->dev, TF_I32, 2, (int64_t[]){B, L}, ids, id_t);
    return s;
}

/* One pass op by op; *out outlives it. */
static tf_status encode_eager(const llm_encoder *m, int64_t B, int64_t L, const tf_tensor *id_t,
                              const tf_tensor *keep_t, llm_pooling pooling, bool normalize, tf_tensor **out) {
    tf_scope *scope;
    TF_TRY(tf_scope_begin(&scope));
    tf_tensor *e = NULL;
    tf_status s = encode(m, B, L, id_t, keep_t, pooling, normalize, &e);
    if (s == TF_OK) *out = tf_tensor_retain(e);            /* the one tensor that outlives the scope */
    tf_scope_end(scope);
    return s;
}

/* The pass captured into slot e (its first run computes the result). A
 * capture the device cannot replay leaves e empty: the pass still ran. */
static tf_status capture_pass(const llm_encoder *m, encoder_graph *e, int64_t B, int64_t L, tf_tensor *id_t,
                              tf_tensor *keep_t, llm_pooling pooling, bool normalize) {
    TF_TRY(tf_graph_begin(m->dev));
    tf_tensor *out = NULL;
    tf_status s = encode_eager(m, B, L, id_t, keep_t, pooling, normalize, &out);
    tf_graph *g = NULL;
    tf_status ended = tf_graph_end(&g);
    if (s != TF_OK) {
        tf_graph_destroy(g);
        tf_tensor_release(out);
        return s;
    }
    *e = (encoder_graph){B, L, pooling, normalize, 0, g, tf_tensor_retain(id_t), tf_tensor_retain(keep_t), out};
    if (ended != TF_OK) e->graph = NULL;                     /* replays not possible here: keep the result only */
    return TF_OK;
}

static encoder_graph *find_graph(struct llm_encoder_graphs *c, int64_t B, int64_t L, llm_pooling pooling,
                                 bool normalize) {
    for (int i = 0; i < ENCODER_GRAPHS; i++) {
        encoder_graph *e = &c->slot[i];
        if (e->graph && e->batch == B && e->len == L && e->pooling == pooling && e->normalize == normalize) return e;
    }
    return NULL;
}

static encoder_graph *free_slot(struct llm_encoder_graphs *c) {
    encoder_graph *oldest = &c->slot[0];
    for (int i = 0; i < ENCODER_GRAPHS; i++) {
        if (!c->slot[i].graph && !c->slot[i].out) return &c->slot[i];
        if (c->slot[i].used < oldest->used) oldest = &c->slot[i];
    }
    drop_graph(oldest);
    return oldest;
}

static tf_status replay_pass(encoder_graph *e, const int32_t *ids, const int64_t *lengths, tf_tensor **out) {
    uint8_t *keep = keep_mask(e->batch, e->len, lengths);
    if (!keep) return TF_ERR_OUT_OF_MEMORY;
    size_t n = (size_t)(e->batch * e->len);
    tf_status s = tf_tensor_write(e->keep, keep, n);
    free(keep);
    if (s == TF_OK) s = tf_tensor_write(e->ids, ids, n * sizeof(int32_t));
    if (s == TF_OK) s = tf_graph_replay(e->graph);
    if (s == TF_OK) s = tf_copy(e->out, out);
    return s;
}

/* Through the cache: a replay, or a capture that also gives this pass's result. */
static tf_status encode_cached(const llm_encoder *m, int64_t B, int64_t L, const int32_t *ids, const int64_t *lengths,
                               llm_pooling pooling, bool normalize, tf_tensor **out) {
    struct llm_encoder_graphs *c = m->graphs;
    pthread_mutex_lock(&c->lock);
    c->passes++;
    encoder_graph *e = find_graph(c, B, L, pooling, normalize);
    tf_status s;
    if (e) {
        e->used = c->passes;
        s = replay_pass(e, ids, lengths, out);
    } else {
        tf_tensor *id_t, *keep_t;
        s = make_inputs(m, B, L, ids, lengths, &id_t, &keep_t);
        e = free_slot(c);
        if (s == TF_OK) s = capture_pass(m, e, B, L, id_t, keep_t, pooling, normalize);
        if (s == TF_OK) s = tf_copy(e->out, out);
        if (s == TF_OK && !e->graph) drop_graph(e);
        e->used = c->passes;
        tf_tensor_release(id_t);
        tf_tensor_release(keep_t);
    }
    pthread_mutex_unlock(&c->lock);
    return s;
}

tf_status llm_encoder_forward(const llm_encoder *m, int64_t batch, int64_t len, const int32_t *ids,
                              const int64_t *lengths, llm_pooling pooling, bool normalize, tf_tensor **out) {
    *out = NULL;
    if (batch < 1 || len < 1 || len > m->max_positions)
        return llm_fail(TF_ERR_SHAPE, "encoder: %lld sequences of %lld tokens (1 to %lld positions)", (long long)batch,
                        (long long)len, (long long)m->max_positions);
    for (int64_t b = 0; b < batch; b++) {
        if (lengths[b] < 1 || lengths[b] > len)
            return llm_fail(TF_ERR_SHAPE, "encoder: sequence %lld has %lld tokens of %lld", (long long)b,
                            (long long)lengths[b], (long long)len);
        for (int64_t j = 0; j < lengths[b]; j++)
            if (ids[b * len + j] < 0 || ids[b * len + j] >= m->n_vocab)
                return llm_fail(TF_ERR_INDEX, "encoder: token %d is outside the vocabulary", ids[b * len + j]);
    }
    tf_status s;
    if (m->graphs) {
        s = encode_cached(m, batch, len, ids, lengths, pooling, normalize, out);
    } else {
        tf_tensor *id_t, *keep_t;
        s = make_inputs(m, batch, len, ids, lengths, &id_t, &keep_t);
        if (s == TF_OK) s = encode_eager(m, batch, len, id_t, keep_t, pooling, normalize, out);
        tf_tensor_release(id_t);
        tf_tensor_release(keep_t);
    }
    if (s != TF_OK) llm_fail(s, "encoder: %s", tf_last_error());
    return s;
}

/* The graph cache, unless TF_MODEL_GRAPHS=0 (or no memory: then op by op). */
static void start_graphs(llm_encoder *m) {
    const char *env = getenv("TF_MODEL_GRAPHS");
    static const char *const off[] = {"0", "false", "off", "no"};
    for (size_t i = 0; env && i < sizeof off / sizeof *off; i++)
        if (!strcmp(env, off[i])) return;
    m->graphs = calloc(1, sizeof *m->graphs);
    if (m->graphs) pthread_mutex_init(&m->graphs->lock, NULL);
}

void llm_encoder_free(llm_encoder *m) {
    if (!m) return;
    if (m->graphs) {
        for (int i = 0; i < ENCODER_GRAPHS; i++) drop_graph(&m->graphs->slot[i]);
        pthread_mutex_destroy(&m->graphs->lock);
        free(m->graphs);
    }
    tf_tensor *top[] = {m->word, m->position, m->token_type, m->ln_w, m->ln_b};
    for (int i = 0; i < 5; i++) tf_tensor_release(top[i]);
    for (int i = 0; i < LLM_ENCODER_MAX_LAYERS; i++) {
        tf_tensor **t = (tf_tensor **)&m->layer[i];
        for (size_t k = 0; k < sizeof(llm_encoder_layer) / sizeof(tf_tensor *); k++) tf_tensor_release(t[k]);
    }
    free(m);
}
