/* The llama decoder on the public API; see model.h. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"   /* llm_fail */

/* ---- configuration ------------------------------------------------------ */

/* Every value read from the file is checked for what it means: its type
 * (an integer key is an integer, not a bool or a float; a number is a
 * float), then its range. */
static bool is_integer_type(tf_gguf_type t) {
    return t == TF_GGUF_U8 || t == TF_GGUF_I8 || t == TF_GGUF_U16 || t == TF_GGUF_I16 || t == TF_GGUF_U32 ||
           t == TF_GGUF_I32 || t == TF_GGUF_U64 || t == TF_GGUF_I64;
}

static tf_status config_int(const tf_gguf *f, const char *arch, const char *key, int64_t fallback, int64_t *v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t i = tf_gguf_find_key(f, full);
    if (i < 0) {
        if (fallback < 0) return llm_fail(TF_ERR_FORMAT, "model: the file has no %s", full);
        *v = fallback;
        return TF_OK;
    }
    if (!is_integer_type(tf_gguf_key_type(f, i)) || tf_gguf_get_int(f, i, 0, v) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "model: %s is not an integer", full);
    if (*v <= 0 || *v > (1 << 24)) return llm_fail(TF_ERR_FORMAT, "model: %s is not a usable count", full);
    return TF_OK;
}

/* A float key in (lo, hi], finite. */
static tf_status config_float(const tf_gguf *f, const char *arch, const char *key, double fallback, double lo,
                              double hi, double *v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    int64_t i = tf_gguf_find_key(f, full);
    *v = fallback;
    if (i < 0) return TF_OK;
    tf_gguf_type type = tf_gguf_key_type(f, i);
    if ((type != TF_GGUF_F32 && type != TF_GGUF_F64) || tf_gguf_get_float(f, i, 0, v) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "model: %s is not a floating-point number", full);
    if (!(*v > lo && *v <= hi))          /* NaN fails too */
        return llm_fail(TF_ERR_FORMAT, "model: %s is %g, outside (%g, %g]", full, *v, lo, hi);
    return TF_OK;
}

static tf_status read_config(const tf_gguf *f, llm_config *c) {
    int64_t ka = tf_gguf_find_key(f, "general.architecture");
    const char *arch;
    size_t len;
    if (ka < 0 || tf_gguf_get_string(f, ka, 0, &arch, &len) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "model: the file names no general.architecture");
    if (len != 5 || memcmp(arch, "llama", 5) != 0)
        return llm_fail(TF_ERR_UNSUPPORTED, "model: architecture '%.*s' is not llama", (int)len, arch);
    tf_status s = config_int(f, "llama", "block_count", -1, &c->n_layer);
    /* Nine tensors a block: a count the file cannot hold is refused before
     * anything is allocated per block. */
    if (s == TF_OK && c->n_layer > tf_gguf_tensor_count(f) / 9)
        return llm_fail(TF_ERR_FORMAT, "model: llama.block_count is %lld but the file holds %lld tensors (9 a block)",
                        (long long)c->n_layer, (long long)tf_gguf_tensor_count(f));
    if (s == TF_OK) s = config_int(f, "llama", "embedding_length", -1, &c->n_embd);
    if (s == TF_OK) s = config_int(f, "llama", "feed_forward_length", -1, &c->n_ff);
    if (s == TF_OK) s = config_int(f, "llama", "attention.head_count", -1, &c->n_head);
    if (s == TF_OK) s = config_int(f, "llama", "attention.head_count_kv", c->n_head, &c->n_head_kv);
    if (s == TF_OK) s = config_int(f, "llama", "context_length", 2048, &c->n_ctx_train);
    /* Real bases run from 10^4 to a few 10^9 (long-context Llama 3s); an
     * epsilon is a small guard against a zero mean square, never near 1. */
    if (s == TF_OK) s = config_float(f, "llama", "rope.freq_base", 10000.0, 1.0, 1e12, &c->rope_base);
    if (s == TF_OK)
        s = config_float(f, "llama", "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 0.1, &c->rms_eps);
    if (s != TF_OK) return s;
    if (c->n_embd % c->n_head || c->n_head % c->n_head_kv)
        return llm_fail(TF_ERR_FORMAT, "model: %lld heads (%lld for keys) do not divide width %lld", (long long)c->n_head,
                        (long long)c->n_head_kv, (long long)c->n_embd);
    c->head_dim = c->n_embd / c->n_head;
    s = config_int(f, "llama", "rope.dimension_count", c->head_dim, &c->rope_dims);
    if (s == TF_OK && (c->rope_dims > c->head_dim || c->rope_dims % 2))
        return llm_fail(TF_ERR_FORMAT, "model: rope.dimension_count %lld does not fit head size %lld",
                        (long long)c->rope_dims, (long long)c->head_dim);
    return s;
}

/* ---- weights ------------------------------------------------------------ */

/* ggml's float and block-quantized types: the rest (I8 ... I64) hold no weights. */
static bool is_weight_type(int block_type) {
    return block_type >= 0 && block_type != 24 && block_type != 25 && block_type != 26 && block_type != 27;
}

/* Loads `name` and checks its shape (outermost first). */
static tf_status load_weight(const tf_gguf *f, const char *name, tf_device *dev, tf_dtype dtype, int ndim,
                             const int64_t *shape, tf_tensor **out) {
    *out = NULL;
    int64_t i = tf_gguf_find_tensor(f, name);
    if (i < 0) return llm_fail(TF_ERR_FORMAT, "model: the file has no tensor %s", name);
    tf_gguf_tensor info;
    tf_status s = tf_gguf_tensor_info(f, i, &info);
    if (s != TF_OK) return llm_fail(s, "model: %s: %s", name, tf_last_error());
    bool same = info.ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = info.shape[d] == shape[d];
    if (!same) return llm_fail(TF_ERR_SHAPE, "model: %s has an unexpected shape", name);
    if (!is_weight_type(info.block_type))
        return llm_fail(TF_ERR_DTYPE, "model: %s is stored as %s; weights are floating-point or block-quantized",
                        name, info.block_type_name);
    s = dtype == LLM_WEIGHTS_AS_STORED ? tf_gguf_load(f, name, dev, out) : tf_gguf_load_as(f, name, dev, dtype, out);
    if (s != TF_OK) return llm_fail(s, "model: loading %s: %s", name, tf_last_error());
    return TF_OK;
}

/* A norm's weights are all finite (they are few: the check reads them). */
static tf_status check_finite_norm(const char *name, const tf_tensor *w) {
    int64_t n = tf_tensor_numel(w);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    tf_status s = tf_tensor_read(w, v, (size_t)n * sizeof *v);
    int64_t bad = -1;
    for (int64_t i = 0; s == TF_OK && i < n && bad < 0; i++)
        if (!isfinite(v[i])) bad = i;
    float value = bad >= 0 ? v[bad] : 0;
    free(v);
    if (s != TF_OK) return llm_fail(s, "model: reading %s: %s", name, tf_last_error());
    if (bad >= 0)
        return llm_fail(TF_ERR_FORMAT, "model: %s holds %g at element %lld; norm weights are finite", name,
                        (double)value, (long long)bad);
    return TF_OK;
}

/* A norm vector of width n as f32, checked finite. */
static tf_status load_norm(const tf_gguf *f, const char *name, tf_device *dev, int64_t n, tf_tensor **out) {
    tf_status s = load_weight(f, name, dev, TF_F32, 1, &n, out);
    if (s == TF_OK && (s = check_finite_norm(name, *out)) != TF_OK) {
        tf_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

/* Matrices [rows_i, K] of one dtype stacked into one [sum rows_i, K]
 * (quantized ones too: whole rows are copied). Products that share their
 * input then run as one: fewer dispatches, one 8-bit rounding of the input
 * instead of three, and work enough to split across threads. Of different
 * dtypes (a quant mix), the parts are kept as they are. */
static tf_status stack_rows(tf_device *dev, tf_tensor *const *parts, int n, llm_proj *out) {
    int64_t rows = 0, k = tf_tensor_shape(parts[0])[1];
    tf_dtype dt = tf_tensor_dtype(parts[0]);
    bool same = true;
    for (int i = 0; i < n; i++) {
        same = same && tf_tensor_dtype(parts[i]) == dt;
        rows += tf_tensor_shape(parts[i])[0];
    }
    out->n = n;
    if (!same) {
        for (int i = 0; i < n; i++) out->parts[i] = tf_tensor_retain(parts[i]);
        return TF_OK;
    }
    tf_status s = tf_empty(dev, dt, 2, (int64_t[]){rows, k}, &out->stacked);
    for (int i = 0, at = 0; s == TF_OK && i < n; i++) {
        tf_tensor *slot = NULL;
        int64_t r = tf_tensor_shape(parts[i])[0];
        s = tf_slice(out->stacked, 0, at, at + r, 1, &slot);
        if (s == TF_OK) s = tf_copy_into(slot, parts[i]);
        tf_tensor_release(slot);
        at += (int)r;
    }
    if (s != TF_OK) {
        tf_tensor_release(out->stacked);
        out->stacked = NULL;
        return llm_fail(s, "model: stacking projections: %s", tf_last_error());
    }
    return TF_OK;
}

static void free_proj(llm_proj *p) {
    tf_tensor_release(p->stacked);
    for (int i = 0; i < p->n; i++) tf_tensor_release(p->parts[i]);
}

static tf_status load_layer(const tf_gguf *f, const llm_config *c, int64_t l, tf_device *dev, tf_dtype dt, llm_layer *L) {
    const int64_t e = c->n_embd, kv = c->n_head_kv * c->head_dim, ff = c->n_ff;
    tf_tensor *wq = NULL, *wk = NULL, *wv = NULL, *w_gate = NULL, *w_up = NULL;
    const struct {
        const char *suffix;
        tf_tensor **dst;
        int ndim;
        int64_t shape[2];
    } parts[] = {
        {"attn_norm.weight", &L->attn_norm, 1, {e}},   {"attn_q.weight", &wq, 2, {e, e}},
        {"attn_k.weight", &wk, 2, {kv, e}},            {"attn_v.weight", &wv, 2, {kv, e}},
        {"attn_output.weight", &L->wo, 2, {e, e}},     {"ffn_norm.weight", &L->ffn_norm, 1, {e}},
        {"ffn_gate.weight", &w_gate, 2, {ff, e}},      {"ffn_up.weight", &w_up, 2, {ff, e}},
        {"ffn_down.weight", &L->w_down, 2, {e, ff}},
    };
    tf_status s = TF_OK;
    for (size_t i = 0; s == TF_OK && i < sizeof parts / sizeof parts[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, parts[i].suffix);
        bool norm = parts[i].ndim == 1;     /* norms stay f32: they are tiny and read once per row */
        s = norm ? load_norm(f, name, dev, parts[i].shape[0], parts[i].dst)
                 : load_weight(f, name, dev, dt, parts[i].ndim, parts[i].shape, parts[i].dst);
    }
    if (s == TF_OK) s = stack_rows(dev, (tf_tensor *[]){wq, wk, wv}, 3, &L->qkv);
    if (s == TF_OK) s = stack_rows(dev, (tf_tensor *[]){w_gate, w_up}, 2, &L->gate_up);
    tf_tensor *loose[] = {wq, wk, wv, w_gate, w_up};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) tf_tensor_release(loose[i]);
    return s;
}

static void free_layer(llm_layer *L) {
    tf_tensor *all[] = {L->attn_norm, L->wo, L->ffn_norm, L->w_down};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
    free_proj(&L->qkv);
    free_proj(&L->gate_up);
}

/* A tensor the architecture does not use means the file is another model
 * (more blocks than block_count says, a rope_freqs this runner would
 * ignore): refused, as llama.cpp refuses a tensor count it did not expect,
 * rather than run a different model than the file holds. */
static tf_status check_every_tensor_used(const tf_gguf *f, int64_t n_layer, bool own_output) {
    int64_t used = 9 * n_layer + 2 + own_output, n = tf_gguf_tensor_count(f);
    if (n == used) return TF_OK;
    for (int64_t i = 0; i < n; i++) {             /* name one: the first this runner does not load */
        tf_gguf_tensor info;
        if (tf_gguf_tensor_info(f, i, &info) != TF_OK) continue;
        long long block = -1;
        int end = 0;
        bool known = !strcmp(info.name, "token_embd.weight") || !strcmp(info.name, "output_norm.weight") ||
                     (own_output && !strcmp(info.name, "output.weight")) ||
                     (sscanf(info.name, "blk.%lld.%*[a-z_].weight%n", &block, &end) == 1 && end > 0 &&
                      info.name[end] == 0 && block >= 0 && block < n_layer);
        if (!known)
            return llm_fail(TF_ERR_FORMAT, "model: the file holds %s, which a llama model of %lld blocks does not use "
                            "(%lld tensors, %lld expected)", info.name, (long long)n_layer, (long long)n, (long long)used);
    }
    return llm_fail(TF_ERR_FORMAT, "model: the file holds %lld tensors, a llama model of %lld blocks %lld",
                    (long long)n, (long long)n_layer, (long long)used);
}

tf_status llm_model_load(const tf_gguf *f, tf_device *dev, tf_dtype dtype, llm_model **out) {
    *out = NULL;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    m->dev = dev;
    tf_status s = read_config(f, &m->cfg);
    llm_config *c = &m->cfg;
    if (s == TF_OK) {
        int64_t embd = tf_gguf_find_tensor(f, "token_embd.weight");
        tf_gguf_tensor info;
        if (embd < 0 || tf_gguf_tensor_info(f, embd, &info) != TF_OK || info.ndim != 2)
            s = llm_fail(TF_ERR_FORMAT, "model: no 2-d token_embd.weight");
        else
            c->n_vocab = info.shape[0];
    }
    int64_t declared = 0;                /* optional; present, it says how many rows the embeddings have */
    if (s == TF_OK && tf_gguf_find_key(f, "llama.vocab_size") >= 0 &&
        (s = config_int(f, "llama", "vocab_size", -1, &declared)) == TF_OK && declared != c->n_vocab)
        s = llm_fail(TF_ERR_FORMAT, "model: llama.vocab_size is %lld but token_embd.weight has %lld rows",
                     (long long)declared, (long long)c->n_vocab);
    if (s == TF_OK) s = load_weight(f, "token_embd.weight", dev, dtype, 2, (int64_t[]){c->n_vocab, c->n_embd}, &m->tok_embd);
    if (s == TF_OK) s = load_norm(f, "output_norm.weight", dev, c->n_embd, &m->out_norm);
    if (s == TF_OK && tf_gguf_find_tensor(f, "output.weight") >= 0)
        s = load_weight(f, "output.weight", dev, dtype, 2, (int64_t[]){c->n_vocab, c->n_embd}, &m->output);
    else if (s == TF_OK)
        m->output = tf_tensor_retain(m->tok_embd);
    if (s == TF_OK && !(m->layers = calloc((size_t)c->n_layer, sizeof *m->layers)))
        s = llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    for (int64_t l = 0; s == TF_OK && l < c->n_layer; l++) s = load_layer(f, c, l, dev, dtype, &m->layers[l]);
    if (s == TF_OK) s = check_every_tensor_used(f, c->n_layer, m->output != m->tok_embd);
    if (s != TF_OK) {
        llm_model_free(m);
        return s;
    }
    *out = m;
    return TF_OK;
}

void llm_model_free(llm_model *m) {
    if (!m) return;
    for (int64_t l = 0; m->layers && l < m->cfg.n_layer; l++) free_layer(&m->layers[l]);
    free(m->layers);
    tf_tensor_release(m->tok_embd);
    tf_tensor_release(m->out_norm);
    tf_tensor_release(m->output);
    free(m);
}

/* ---- the KV cache -------------------------------------------------------- */

tf_status llm_cache_new(const llm_model *m, int64_t n_ctx, llm_cache **out) {
    *out = NULL;
    const llm_config *c = &m->cfg;
    llm_cache *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->k = calloc((size_t)c->n_layer, sizeof *kv->k)) || !(kv->v = calloc((size_t)c->n_layer, sizeof *kv->v))) {
        llm_cache_free(kv);
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "cache: out of memory");
    }
    kv->n_ctx = n_ctx;
    kv->n_layer = c->n_layer;
    int64_t shape[4] = {1, c->n_head_kv, n_ctx, c->head_dim};
    tf_status s = TF_OK;
    for (int64_t l = 0; s == TF_OK && l < c->n_layer; l++) {
        s = tf_zeros(m->dev, TF_F32, 4, shape, &kv->k[l]);
        if (s == TF_OK) s = tf_zeros(m->dev, TF_F32, 4, shape, &kv->v[l]);
    }
    if (s != TF_OK) {
        llm_cache_free(kv);
        return llm_fail(s, "cache: %s", tf_last_error());
    }
    *out = kv;
    return TF_OK;
}

void llm_cache_free(llm_cache *c) {
    if (!c) return;
    for (int64_t l = 0; l < c->n_layer; l++) {
        if (c->k) tf_tensor_release(c->k[l]);
        if (c->v) tf_tensor_release(c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

/* ---- the forward pass ------------------------------------------------------ */

/* Temporaries of one forward, released together at its end. */
typedef struct scratch {
    tf_tensor *t[64];        /* a layer makes about 30 */
    int n;
} scratch;

static void keep(scratch *s, tf_tensor *t) {
    if (s->n == 64) abort();  /* a broken invariant of this file, not bad input */
    s->t[s->n++] = t;
}

static void drop_all(scratch *s) {
    while (s->n) tf_tensor_release(s->t[--s->n]);
}

#define TRY(call)                                                                       \
    do {                                                                                \
        tf_status s_ = (call);                                                          \
        if (s_ != TF_OK) return llm_fail(s_, "forward: %s: %s", #call, tf_last_error()); \
    } while (0)

/* x @ w^T for x [n, in] and w [out, in]. */
static tf_status linear(scratch *s, const tf_tensor *x, const tf_tensor *w, tf_tensor **out) {
    TRY(tf_gemm(x, w, NULL, 1.0, 0.0, false, true, out));
    keep(s, *out);
    return TF_OK;
}

/* x times a projection group's parts, side by side: [n, rows of all parts]. */
static tf_status linear_group(scratch *s, const tf_tensor *x, const llm_proj *p, tf_tensor **out) {
    if (p->stacked) return linear(s, x, p->stacked, out);
    tf_tensor *each[3];
    for (int i = 0; i < p->n; i++) {
        tf_status st = linear(s, x, p->parts[i], &each[i]);
        if (st != TF_OK) return st;
    }
    TRY(tf_concat(p->n, (const tf_tensor *const *)each, 1, out));
    keep(s, *out);
    return TF_OK;
}

/* [n, heads*dim] -> [1, heads, n, dim], rotated by position when rope. */
static tf_status to_heads(scratch *s, const llm_config *c, const tf_tensor *x, int64_t heads, const tf_tensor *pos,
                          bool rope, tf_tensor **out) {
    tf_tensor *split, *rotated, *heads_first;
    int64_t n = tf_tensor_shape(x)[0];
    TRY(tf_reshape(x, 3, (int64_t[]){n, heads, c->head_dim}, &split));
    keep(s, split);
    rotated = split;
    if (rope) {
        /* GGUF's llama q/k weights are permuted so that rotated pairs are adjacent. */
        TRY(tf_rope(split, pos, 0, c->rope_dims, c->rope_base, TF_ROPE_INTERLEAVED, &rotated));
        keep(s, rotated);
    }
    TRY(tf_permute(rotated, (int[]){1, 0, 2}, &heads_first));
    keep(s, heads_first);
    TRY(tf_unsqueeze(heads_first, 0, out));
    keep(s, *out);
    return TF_OK;
}

/* Writes new [1, kv_heads, n, dim] rows at [n_past, n_past+n) of the layer's
 * cache and gives the view of positions [0, n_past+n). */
static tf_status append_kv(scratch *s, tf_tensor *cache, const tf_tensor *rows, int64_t n_past, int64_t n,
                           tf_tensor **all) {
    tf_tensor *slot;
    TRY(tf_slice(cache, 2, n_past, n_past + n, 1, &slot));
    keep(s, slot);
    TRY(tf_copy_into(slot, rows));
    TRY(tf_slice(cache, 2, 0, n_past + n, 1, all));
    keep(s, *all);
    return TF_OK;
}

static tf_status attention(scratch *s, const llm_model *m, const llm_layer *L, tf_tensor *kc, tf_tensor *vc,
                           const tf_tensor *h, const tf_tensor *pos, int64_t n_past, tf_tensor **out) {
    const llm_config *c = &m->cfg;
    int64_t n = tf_tensor_shape(h)[0];
    const int64_t e = c->n_embd, kvw = c->n_head_kv * c->head_dim;
    tf_tensor *qkv, *q, *k, *v, *qh, *kh, *vh, *k_all, *v_all, *a, *a_rows, *a_flat;
    tf_status st;
    if ((st = linear_group(s, h, &L->qkv, &qkv))) return st;
    TRY(tf_slice(qkv, 1, 0, e, 1, &q));                 /* column views of [n, q | k | v] */
    keep(s, q);
    TRY(tf_slice(qkv, 1, e, e + kvw, 1, &k));
    keep(s, k);
    TRY(tf_slice(qkv, 1, e + kvw, e + 2 * kvw, 1, &v));
    keep(s, v);
    if ((st = to_heads(s, c, q, c->n_head, pos, true, &qh)) || (st = to_heads(s, c, k, c->n_head_kv, pos, true, &kh)) ||
        (st = to_heads(s, c, v, c->n_head_kv, pos, false, &vh)))
        return st;
    if ((st = append_kv(s, kc, kh, n_past, n, &k_all)) || (st = append_kv(s, vc, vh, n_past, n, &v_all))) return st;
    TRY(tf_sdpa(qh, k_all, v_all, NULL, 0.0, true, n_past, &a));       /* [1, heads, n, dim] */
    keep(s, a);
    TRY(tf_permute(a, (int[]){0, 2, 1, 3}, &a_rows));
    keep(s, a_rows);
    TRY(tf_reshape(a_rows, 2, (int64_t[]){n, c->n_embd}, &a_flat));
    keep(s, a_flat);
    return linear(s, a_flat, L->wo, out);
}

static tf_status mlp(scratch *s, const llm_layer *L, const tf_tensor *h, tf_tensor **out) {
    tf_tensor *gu, *g, *u, *act;
    tf_status st;
    if ((st = linear_group(s, h, &L->gate_up, &gu))) return st;
    int64_t ff = tf_tensor_shape(gu)[1] / 2;
    TRY(tf_slice(gu, 1, 0, ff, 1, &g));                 /* [n, gate | up] */
    keep(s, g);
    TRY(tf_slice(gu, 1, ff, 2 * ff, 1, &u));
    keep(s, u);
    TRY(tf_swiglu(g, u, &act));
    keep(s, act);
    return linear(s, act, L->w_down, out);
}

/* One decoder layer: x + attention(norm(x)), then that + mlp(norm(that)). */
static tf_status block(scratch *s, const llm_model *m, const llm_layer *L, llm_cache *kv, int64_t l,
                       const tf_tensor *pos, const tf_tensor *x, tf_tensor **out) {
    tf_tensor *h, *o, *sum;
    TRY(tf_rmsnorm(x, L->attn_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    tf_status st = attention(s, m, L, kv->k[l], kv->v[l], h, pos, kv->n_past, &o);
    if (st != TF_OK) return st;
    TRY(tf_add(x, o, &sum));
    keep(s, sum);
    TRY(tf_rmsnorm(sum, L->ffn_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    if ((st = mlp(s, L, h, &o)) != TF_OK) return st;
    TRY(tf_add(sum, o, out));
    return TF_OK;
}

static tf_status embed(const llm_model *m, const int32_t *ids, int64_t n, tf_tensor **x) {
    tf_tensor *idt;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.n_vocab)
            return llm_fail(TF_ERR_INDEX, "forward: token %lld is outside the vocabulary", (long long)ids[i]);
    TRY(tf_tensor_from_data(m->dev, TF_I32, 1, &n, ids, &idt));
    tf_status s = tf_embedding(m->tok_embd, idt, x);
    tf_tensor_release(idt);
    if (s != TF_OK) return llm_fail(s, "forward: embedding: %s", tf_last_error());
    if (tf_tensor_dtype(*x) != TF_F32) {      /* activations run in f32 */
        tf_tensor *f;
        s = tf_cast(*x, TF_F32, &f);
        tf_tensor_release(*x);
        *x = f;
        if (s != TF_OK) return llm_fail(s, "forward: %s", tf_last_error());
    }
    return TF_OK;
}

static tf_status head(scratch *s, const llm_model *m, tf_tensor *x, bool all_logits, tf_tensor **logits) {
    int64_t n = tf_tensor_shape(x)[0];
    tf_tensor *last = x, *h;
    if (!all_logits && n > 1) {
        TRY(tf_slice(x, 0, n - 1, n, 1, &last));
        keep(s, last);
    }
    TRY(tf_rmsnorm(last, m->out_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    TRY(tf_gemm(h, m->output, NULL, 1.0, 0.0, false, true, logits));
    return TF_OK;
}

/* Logits with a NaN or an infinity (from weights the loader does not read
 * one by one, or activations that overflowed) are an error, not a token:
 * sum(x - x) is 0 exactly when every element is finite. */
static tf_status check_finite_logits(const tf_tensor *logits) {
    tf_tensor *diff = NULL, *sum = NULL;
    float total = 0;
    tf_status s = tf_sub(logits, logits, &diff);
    if (s == TF_OK) s = tf_sum(diff, TF_ALL_AXES, false, &sum);
    if (s == TF_OK) s = tf_tensor_read(sum, &total, sizeof total);
    tf_tensor_release(diff);
    tf_tensor_release(sum);
    if (s != TF_OK) return llm_fail(s, "forward: checking the logits: %s", tf_last_error());
    if (total != 0)
        return llm_fail(TF_ERR_NOT_FINITE, "forward: the logits hold NaN or infinity (the model's weights or "
                        "activations are not finite)");
    return TF_OK;
}

tf_status llm_forward(const llm_model *m, llm_cache *kv, const int32_t *ids, int64_t n, bool all_logits,
                      tf_tensor **logits) {
    *logits = NULL;
    if (n <= 0) return llm_fail(TF_ERR_INVALID_ARGUMENT, "forward: no tokens");
    if (n > kv->n_ctx - kv->n_past)
        return llm_fail(TF_ERR_SIZE, "forward: %lld tokens do not fit the %lld positions left in the cache",
                        (long long)n, (long long)(kv->n_ctx - kv->n_past));
    scratch s = {.n = 0};
    tf_tensor *x, *pos;
    tf_status st = embed(m, ids, n, &x);
    if (st != TF_OK) return st;
    if ((st = tf_arange(m->dev, TF_I64, (double)kv->n_past, (double)(kv->n_past + n), 1.0, &pos)) != TF_OK) {
        tf_tensor_release(x);
        return llm_fail(st, "forward: positions: %s", tf_last_error());
    }
    for (int64_t l = 0; st == TF_OK && l < m->cfg.n_layer; l++) {
        /* Each layer's temporaries go before the next starts. */
        tf_tensor *next = NULL;
        st = block(&s, m, &m->layers[l], kv, l, pos, x, &next);
        drop_all(&s);
        tf_tensor_release(x);
        x = next;
    }
    if (st == TF_OK) st = head(&s, m, x, all_logits, logits);
    if (st == TF_OK && (st = check_finite_logits(*logits)) != TF_OK) {
        tf_tensor_release(*logits);
        *logits = NULL;
    }
    drop_all(&s);
    tf_tensor_release(x);
    tf_tensor_release(pos);
    if (st == TF_OK) kv->n_past += n;
    return st;
}
