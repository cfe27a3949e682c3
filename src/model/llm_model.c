/* Reading a decoder from a GGUF file: its configuration, checked for what
 * every value means, and its weights; see llm_model.h. */
#include "llm_model.h"

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

/* An integer key in [1, 2^24]; fallback when absent (< 0: required). */
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

/* The architecture's descriptor from general.architecture. */
static tf_status read_arch(const tf_gguf *f, const llm_arch **arch) {
    int64_t ka = tf_gguf_find_key(f, "general.architecture");
    const char *name;
    size_t len;
    if (ka < 0 || tf_gguf_get_string(f, ka, 0, &name, &len) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "model: the file names no general.architecture");
    if (!(*arch = llm_arch_find(name, len)))
        return llm_fail(TF_ERR_UNSUPPORTED, "model: architecture '%.*s' is not one the library runs (%s)",
                        (int)(len < 64 ? len : 64), name, llm_arch_names());
    return TF_OK;
}

/* RoPE scaling: none, or linear (angles times 1/factor, llama.cpp's
 * freq_scale). YaRN and LongRoPE change more than the angles and are
 * refused rather than run at the wrong ones. */
static tf_status read_rope_scaling(const tf_gguf *f, const char *arch, double *scale) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int64_t k = tf_gguf_find_key(f, key);
    const char *type = "linear";
    size_t len = 6;
    *scale = 1.0;
    if (k >= 0 && tf_gguf_get_string(f, k, 0, &type, &len) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "model: %s is not a string", key);
    if (len == 4 && !memcmp(type, "none", 4)) return TF_OK;
    double factor;
    tf_status s = config_float(f, arch, "rope.scaling.factor", 1.0, 0.0, 1e6, &factor);
    if (s == TF_OK && factor == 1.0) s = config_float(f, arch, "rope.scale_linear", 1.0, 0.0, 1e6, &factor);   /* the old key */
    if (s != TF_OK) return s;
    if (!(len == 6 && !memcmp(type, "linear", 6)) && factor != 1.0)
        return llm_fail(TF_ERR_UNSUPPORTED, "model: RoPE scaling '%.*s' (factor %g) is not supported; linear is",
                        (int)(len < 32 ? len : 32), type, factor);
    *scale = 1.0 / factor;
    return TF_OK;
}

static tf_status read_sizes(const tf_gguf *f, const char *a, llm_config *c) {
    tf_status s = config_int(f, a, "block_count", -1, &c->n_layer);
    /* At least six tensors a block (fused QKV and gate/up): a count the
     * file cannot hold is refused before anything is allocated per block. */
    if (s == TF_OK && c->n_layer > tf_gguf_tensor_count(f) / 6)
        return llm_fail(TF_ERR_FORMAT, "model: %s.block_count is %lld but the file holds %lld tensors (6 or more a block)",
                        a, (long long)c->n_layer, (long long)tf_gguf_tensor_count(f));
    if (s == TF_OK) s = config_int(f, a, "embedding_length", -1, &c->n_embd);
    if (s == TF_OK) s = config_int(f, a, "feed_forward_length", -1, &c->n_ff);
    if (s == TF_OK) s = config_int(f, a, "attention.head_count", -1, &c->n_head);
    if (s == TF_OK) s = config_int(f, a, "attention.head_count_kv", c->n_head, &c->n_head_kv);
    if (s == TF_OK) s = config_int(f, a, "context_length", 2048, &c->n_ctx_train);
    if (s != TF_OK) return s;
    if (c->n_head % c->n_head_kv)
        return llm_fail(TF_ERR_FORMAT, "model: %lld key heads do not divide %lld heads", (long long)c->n_head_kv,
                        (long long)c->n_head);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length", a);
    if (tf_gguf_find_key(f, key) < 0 && c->n_embd % c->n_head)
        return llm_fail(TF_ERR_FORMAT, "model: %lld heads do not divide width %lld", (long long)c->n_head,
                        (long long)c->n_embd);
    s = config_int(f, a, "attention.key_length", c->n_embd / c->n_head, &c->head_dim);
    int64_t value_dim = 0;
    if (s == TF_OK) s = config_int(f, a, "attention.value_length", c->head_dim, &value_dim);
    if (s == TF_OK && value_dim != c->head_dim)
        return llm_fail(TF_ERR_UNSUPPORTED, "model: key heads of %lld and value heads of %lld differ",
                        (long long)c->head_dim, (long long)value_dim);
    if (s == TF_OK) s = config_int(f, a, "rope.dimension_count", c->head_dim, &c->rope_dims);
    if (s == TF_OK && (c->rope_dims > c->head_dim || c->rope_dims % 2))
        return llm_fail(TF_ERR_FORMAT, "model: rope.dimension_count %lld does not fit head size %lld",
                        (long long)c->rope_dims, (long long)c->head_dim);
    return s;
}

/* Which layers are local: a bool array, or a period (layer l is global
 * when l % period == period - 1; a period of 0 makes every layer local). */
static tf_status read_local_layers(const tf_gguf *f, const llm_arch *arch, const llm_config *c, llm_layer *layers) {
    if (c->n_swa == 0) return TF_OK;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch->name);
    int64_t k = tf_gguf_find_key(f, key), period = arch->swa_pattern;
    if (k >= 0 && tf_gguf_key_type(f, k) == TF_GGUF_ARRAY) {
        if (tf_gguf_array_type(f, k) != TF_GGUF_BOOL || tf_gguf_array_length(f, k) != c->n_layer)
            return llm_fail(TF_ERR_FORMAT, "model: %s is not %lld bools", key, (long long)c->n_layer);
        for (int64_t l = 0; l < c->n_layer; l++) {
            int64_t v = 0;
            if (tf_gguf_get_int(f, k, l, &v) != TF_OK) return llm_fail(TF_ERR_FORMAT, "model: %s[%lld]", key, (long long)l);
            layers[l].local = v != 0;
        }
        return TF_OK;
    }
    if (k >= 0 && (!is_integer_type(tf_gguf_key_type(f, k)) || tf_gguf_get_int(f, k, 0, &period) != TF_OK ||
                   period < 0 || period > (1 << 24)))
        return llm_fail(TF_ERR_FORMAT, "model: %s is not a layer period", key);
    for (int64_t l = 0; l < c->n_layer; l++) layers[l].local = period == 0 || l % period < period - 1;
    return TF_OK;
}

static tf_status read_attention(const tf_gguf *f, const llm_arch *arch, llm_config *c) {
    const char *a = arch->name;
    /* Real bases run from 10^4 to a few 10^9 (long-context Llama 3s); an
     * epsilon is a small guard against a zero mean square, never near 1. */
    tf_status s = config_float(f, a, "rope.freq_base", 10000.0, 1.0, 1e12, &c->rope_base);
    if (s == TF_OK)
        s = config_float(f, a, "rope.freq_base_swa", arch->local_base_is_global ? c->rope_base : 10000.0, 1.0, 1e12,
                         &c->rope_base_local);
    if (s == TF_OK) s = read_rope_scaling(f, a, &c->rope_scale);
    if (s == TF_OK) s = config_float(f, a, "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 0.1, &c->rms_eps);
    /* Soft caps bound scores and logits to (-c, c): a few tens in practice. */
    if (s == TF_OK && arch->attn_softcap)
        s = config_float(f, a, "attn_logit_softcapping", 50.0, 0.0, 1e6, &c->attn_softcap);
    if (s == TF_OK) {
        char key[128];
        snprintf(key, sizeof key, "%s.final_logit_softcapping", a);
        c->final_softcap = arch->final_softcap_default;
        if (tf_gguf_find_key(f, key) >= 0) s = config_float(f, a, "final_logit_softcapping", 0, 0.0, 1e6, &c->final_softcap);
    }
    c->n_swa = 0;
    if (s == TF_OK && arch->swa_pattern > 0 && !arch->swa_ignored) {
        char key[128];
        snprintf(key, sizeof key, "%s.attention.sliding_window", a);
        if (tf_gguf_find_key(f, key) >= 0 || arch->swa_window_default > 0)
            s = config_int(f, a, "attention.sliding_window", arch->swa_window_default, &c->n_swa);
    }
    /* Gemma's largest models scale by the width per head, not the head size. */
    c->attn_scale = 1.0 / sqrt((double)(arch->big_layers && c->n_layer == arch->big_layers ? c->n_embd / c->n_head
                                                                                            : c->head_dim));
    return s;
}

tf_status llm_model_config(const tf_gguf *f, const llm_arch **arch, llm_config *c) {
    *c = (llm_config){0};
    tf_status s = read_arch(f, arch);
    if (s == TF_OK) s = read_sizes(f, (*arch)->name, c);
    if (s == TF_OK) s = read_attention(f, *arch, c);
    if (s != TF_OK) return s;
    int64_t embd = tf_gguf_find_tensor(f, "token_embd.weight");
    tf_gguf_tensor info;
    if (embd < 0 || tf_gguf_tensor_info(f, embd, &info) != TF_OK || info.ndim != 2)
        return llm_fail(TF_ERR_FORMAT, "model: no 2-d token_embd.weight");
    c->n_vocab = info.shape[0];
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", (*arch)->name);
    int64_t declared = 0;                /* optional; present, it says how many rows the embeddings have */
    if (tf_gguf_find_key(f, key) >= 0 && (s = config_int(f, (*arch)->name, "vocab_size", -1, &declared)) == TF_OK &&
        declared != c->n_vocab)
        s = llm_fail(TF_ERR_FORMAT, "model: %s is %lld but token_embd.weight has %lld rows", key, (long long)declared,
                     (long long)c->n_vocab);
    return s;
}

/* ---- weights ------------------------------------------------------------ */

/* ggml's float and block-quantized types: the rest (I8 ... I64) hold no weights. */
static bool is_weight_type(int block_type) {
    return block_type >= 0 && block_type != 24 && block_type != 25 && block_type != 26 && block_type != 27;
}

/* One load's state: which of the file's tensors it has read, so that a
 * tensor the model does not use is found (see check_every_tensor_used). */
typedef struct loader {
    const tf_gguf *f;
    tf_device *dev;
    tf_dtype dtype;
    bool *used;
} loader;

/* Loads `name` and checks its shape (outermost first); norms and biases,
 * tiny and read once per row, are f32. */
static tf_status load_weight(loader *ld, const char *name, int ndim, const int64_t *shape, tf_tensor **out) {
    *out = NULL;
    int64_t i = tf_gguf_find_tensor(ld->f, name);
    if (i < 0) return llm_fail(TF_ERR_FORMAT, "model: the file has no tensor %s", name);
    tf_gguf_tensor info;
    tf_status s = tf_gguf_tensor_info(ld->f, i, &info);
    if (s != TF_OK) return llm_fail(s, "model: %s: %s", name, tf_last_error());
    bool same = info.ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = info.shape[d] == shape[d];
    if (!same) return llm_fail(TF_ERR_SHAPE, "model: %s has an unexpected shape", name);
    if (!is_weight_type(info.block_type))
        return llm_fail(TF_ERR_DTYPE, "model: %s is stored as %s; weights are floating-point or block-quantized",
                        name, info.block_type_name);
    tf_dtype dt = ndim == 1 ? TF_F32 : ld->dtype;
    s = dt == LLM_WEIGHTS_AS_STORED ? tf_gguf_load(ld->f, name, ld->dev, out) : tf_gguf_load_as(ld->f, name, ld->dev, dt, out);
    if (s != TF_OK) return llm_fail(s, "model: loading %s: %s", name, tf_last_error());
    ld->used[i] = true;
    return TF_OK;
}

/* A vector's values are all finite (they are few: the check reads them). */
static tf_status check_finite_vector(const char *name, const tf_tensor *w) {
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
        return llm_fail(TF_ERR_FORMAT, "model: %s holds %g at element %lld; norm weights and biases are finite", name,
                        (double)value, (long long)bad);
    return TF_OK;
}

/* A norm or bias vector of width n as f32, checked finite. */
static tf_status load_vector(loader *ld, const char *name, int64_t n, tf_tensor **out) {
    tf_status s = load_weight(ld, name, 1, &n, out);
    if (s == TF_OK && (s = check_finite_vector(name, *out)) != TF_OK) {
        tf_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

static bool has_tensor(const loader *ld, const char *name) { return tf_gguf_find_tensor(ld->f, name) >= 0; }

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
    if (!same || n == 1) {
        for (int i = 0; i < n; i++) out->parts[i] = tf_tensor_retain(parts[i]);
        if (n == 1) out->stacked = tf_tensor_retain(parts[0]);
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
    tf_tensor_release(p->bias);
}

/* "blk.<l>.<suffix>" */
static const char *block_name(char *buf, size_t size, int64_t l, const char *suffix) {
    snprintf(buf, size, "blk.%lld.%s", (long long)l, suffix);
    return buf;
}

/* q, k and v: the file's fused attn_qkv, or three matrices stacked; their
 * biases, when the file has them (Qwen2), as one vector. */
static tf_status load_qkv(loader *ld, const llm_config *c, int64_t l, llm_proj *p) {
    const int64_t e = c->n_embd, qd = c->n_head * c->head_dim, kv = c->n_head_kv * c->head_dim;
    char name[96];
    tf_status s;
    if (has_tensor(ld, block_name(name, sizeof name, l, "attn_qkv.weight"))) {
        tf_tensor *w = NULL;
        s = load_weight(ld, name, 2, (int64_t[]){qd + 2 * kv, e}, &w);
        if (s == TF_OK) s = stack_rows(ld->dev, &w, 1, p);
        tf_tensor_release(w);
        if (s == TF_OK && has_tensor(ld, block_name(name, sizeof name, l, "attn_qkv.bias")))
            s = load_vector(ld, name, qd + 2 * kv, &p->bias);
        return s;
    }
    static const char *const mats[3] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
    static const char *const biases[3] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
    const int64_t rows[3] = {qd, kv, kv};
    tf_tensor *w[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL};
    s = TF_OK;
    for (int i = 0; s == TF_OK && i < 3; i++) s = load_weight(ld, block_name(name, sizeof name, l, mats[i]), 2, (int64_t[]){rows[i], e}, &w[i]);
    if (s == TF_OK) s = stack_rows(ld->dev, w, 3, p);
    int n_bias = 0;
    for (int i = 0; i < 3; i++) n_bias += has_tensor(ld, block_name(name, sizeof name, l, biases[i]));
    if (s == TF_OK && n_bias != 0 && n_bias != 3)
        s = llm_fail(TF_ERR_FORMAT, "model: block %lld has biases for some of q, k and v but not all", (long long)l);
    for (int i = 0; s == TF_OK && n_bias == 3 && i < 3; i++)
        s = load_vector(ld, block_name(name, sizeof name, l, biases[i]), rows[i], &b[i]);
    if (s == TF_OK && n_bias == 3 && (s = tf_concat(3, (const tf_tensor *const *)b, 0, &p->bias)) != TF_OK)
        s = llm_fail(s, "model: joining block %lld's biases: %s", (long long)l, tf_last_error());
    for (int i = 0; i < 3; i++) {
        tf_tensor_release(w[i]);
        tf_tensor_release(b[i]);
    }
    return s;
}

/* gate and up: two matrices stacked, or the file's ffn_up holding both
 * (phi3: gate rows first, as ggml's swiglu reads them). */
static tf_status load_gate_up(loader *ld, const llm_config *c, int64_t l, llm_proj *p) {
    const int64_t e = c->n_embd, ff = c->n_ff;
    char name[96];
    tf_tensor *w[2] = {NULL, NULL};
    tf_status s;
    if (!has_tensor(ld, block_name(name, sizeof name, l, "ffn_gate.weight"))) {
        s = load_weight(ld, block_name(name, sizeof name, l, "ffn_up.weight"), 2, (int64_t[]){2 * ff, e}, &w[0]);
        if (s == TF_OK) s = stack_rows(ld->dev, w, 1, p);
    } else {
        s = load_weight(ld, name, 2, (int64_t[]){ff, e}, &w[0]);
        if (s == TF_OK) s = load_weight(ld, block_name(name, sizeof name, l, "ffn_up.weight"), 2, (int64_t[]){ff, e}, &w[1]);
        if (s == TF_OK) s = stack_rows(ld->dev, w, 2, p);
    }
    tf_tensor_release(w[0]);
    tf_tensor_release(w[1]);
    return s;
}

static tf_status load_layer(loader *ld, const llm_arch *arch, const llm_config *c, int64_t l, llm_layer *L);

/* Layers [0, n_first) on devs[0], the rest on devs[1]. */
static tf_status load_layers(loader *ld, llm_model *m, int64_t n_first) {
    tf_status s = TF_OK;
    for (int64_t l = 0; s == TF_OK && l < m->cfg.n_layer; l++) {
        m->layers[l].dev = l < n_first ? 0 : 1;
        ld->dev = m->devs[m->layers[l].dev];
        s = load_layer(ld, m->arch, &m->cfg, l, &m->layers[l]);
    }
    ld->dev = m->devs[0];
    return s;
}

static tf_status load_layer(loader *ld, const llm_arch *arch, const llm_config *c, int64_t l, llm_layer *L) {
    const int64_t e = c->n_embd, qd = c->n_head * c->head_dim;
    char name[96];
    tf_status s = load_vector(ld, block_name(name, sizeof name, l, "attn_norm.weight"), e, &L->attn_norm);
    if (s == TF_OK) s = load_qkv(ld, c, l, &L->qkv);
    if (s == TF_OK && arch->qk_norm) s = load_vector(ld, block_name(name, sizeof name, l, "attn_q_norm.weight"), c->head_dim, &L->q_norm);
    if (s == TF_OK && arch->qk_norm) s = load_vector(ld, block_name(name, sizeof name, l, "attn_k_norm.weight"), c->head_dim, &L->k_norm);
    if (s == TF_OK) s = load_weight(ld, block_name(name, sizeof name, l, "attn_output.weight"), 2, (int64_t[]){e, qd}, &L->wo);
    if (s == TF_OK && arch->post_norms)
        s = load_vector(ld, block_name(name, sizeof name, l, "post_attention_norm.weight"), e, &L->attn_post_norm);
    if (s == TF_OK) s = load_vector(ld, block_name(name, sizeof name, l, "ffn_norm.weight"), e, &L->ffn_norm);
    if (s == TF_OK) s = load_gate_up(ld, c, l, &L->gate_up);
    if (s == TF_OK) s = load_weight(ld, block_name(name, sizeof name, l, "ffn_down.weight"), 2, (int64_t[]){e, c->n_ff}, &L->w_down);
    if (s == TF_OK && arch->post_norms)
        s = load_vector(ld, block_name(name, sizeof name, l, "post_ffw_norm.weight"), e, &L->ffn_post_norm);
    return s;
}

static void free_layer(llm_layer *L) {
    tf_tensor *all[] = {L->attn_norm, L->wo, L->q_norm, L->k_norm, L->attn_post_norm, L->ffn_norm, L->w_down, L->ffn_post_norm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
    free_proj(&L->qkv);
    free_proj(&L->gate_up);
}

/* A tensor the architecture does not use means the file is another model
 * (more blocks than block_count says, a rope_freqs this library would
 * ignore): refused, as llama.cpp refuses a tensor count it did not expect,
 * rather than run a different model than the file holds. */
static tf_status check_every_tensor_used(const loader *ld, const char *arch, int64_t n_layer) {
    int64_t n = tf_gguf_tensor_count(ld->f);
    for (int64_t i = 0; i < n; i++) {
        if (ld->used[i]) continue;
        tf_gguf_tensor info;
        const char *name = tf_gguf_tensor_info(ld->f, i, &info) == TF_OK ? info.name : "?";
        return llm_fail(TF_ERR_FORMAT, "model: the file holds %s, which a %s model of %lld blocks does not use", name,
                        arch, (long long)n_layer);
    }
    return TF_OK;
}

/* RoPE divisors, one per rotated pair, read to the host (the angle
 * tables are made there): Llama 3.1's rope_freqs, LongRoPE's long and
 * short factors. Positive and finite. */
static tf_status load_rope_divisors(loader *ld, const char *name, int64_t n, float **out) {
    tf_tensor *t = NULL;
    tf_status s = load_vector(ld, name, n, &t);
    if (s == TF_OK && !(*out = malloc((size_t)n * sizeof **out))) s = llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    if (s == TF_OK && (s = tf_tensor_read(t, *out, (size_t)n * sizeof(float))) != TF_OK)
        s = llm_fail(s, "model: reading %s: %s", name, tf_last_error());
    for (int64_t i = 0; s == TF_OK && i < n; i++)
        if (!((*out)[i] > 0))
            s = llm_fail(TF_ERR_FORMAT, "model: %s holds %g at %lld; divisors are positive", name, (double)(*out)[i],
                         (long long)i);
    tf_tensor_release(t);
    return s;
}

/* Llama 3.1's rope_freqs, or Phi-3's LongRoPE: long and short divisors,
 * the original context that chooses between them, and the factor cos and
 * sin are scaled by. */
static tf_status load_rope_factors(loader *ld, llm_model *m) {
    const int64_t n = m->cfg.rope_dims / 2;
    const char *a = m->arch->name;
    tf_status s = TF_OK;
    m->rope_attn_factor = 1.0;
    if (has_tensor(ld, "rope_freqs.weight")) s = load_rope_divisors(ld, "rope_freqs.weight", n, &m->rope_factors);
    bool longrope = has_tensor(ld, "rope_factors_long.weight") || has_tensor(ld, "rope_factors_short.weight");
    if (s == TF_OK && longrope) s = load_rope_divisors(ld, "rope_factors_long.weight", n, &m->rope_long);
    if (s == TF_OK && longrope) s = load_rope_divisors(ld, "rope_factors_short.weight", n, &m->rope_short);
    if (s == TF_OK && longrope && m->rope_factors)
        s = llm_fail(TF_ERR_FORMAT, "model: the file holds both rope_freqs and LongRoPE factors");
    if (s == TF_OK && longrope)
        s = config_int(ld->f, a, "rope.scaling.original_context_length", m->cfg.n_ctx_train, &m->n_ctx_orig);
    if (s == TF_OK) s = config_float(ld->f, a, "rope.scaling.attn_factor", 1.0, 0.0, 16.0, &m->rope_attn_factor);
    return s;
}

/* The head (output norm, matrix, bias) runs where the last layer does,
 * unless the output is the embedding matrix: then where that is. */
static tf_status load_weights(loader *ld, llm_model *m, int64_t n_first) {
    const llm_config *c = &m->cfg;
    bool tied = !has_tensor(ld, "output.weight") || m->arch->output_is_embeddings;
    tf_device *head = tied ? m->devs[0] : m->devs[n_first < c->n_layer];
    tf_status s = load_weight(ld, "token_embd.weight", 2, (int64_t[]){c->n_vocab, c->n_embd}, &m->tok_embd);
    ld->dev = head;
    if (s == TF_OK) s = load_vector(ld, "output_norm.weight", c->n_embd, &m->out_norm);
    if (s == TF_OK && !tied) s = load_weight(ld, "output.weight", 2, (int64_t[]){c->n_vocab, c->n_embd}, &m->output);
    else if (s == TF_OK)
        m->output = tf_tensor_retain(m->tok_embd);
    if (s == TF_OK && has_tensor(ld, "output.bias")) s = load_vector(ld, "output.bias", c->n_vocab, &m->output_bias);
    ld->dev = m->devs[0];
    if (s == TF_OK) s = load_rope_factors(ld, m);
    if (s == TF_OK && !(m->layers = calloc((size_t)c->n_layer, sizeof *m->layers)))
        s = llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    if (s == TF_OK) s = read_local_layers(ld->f, m->arch, c, m->layers);
    if (s == TF_OK) s = load_layers(ld, m, n_first);
    if (s == TF_OK) s = check_every_tensor_used(ld, m->arch->name, c->n_layer);
    return s;
}

tf_status llm_model_load_split(const tf_gguf *f, tf_device *first, tf_device *second, int64_t n_first, tf_dtype dtype,
                               llm_model **out) {
    *out = NULL;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    m->dev = m->devs[0] = first;
    m->devs[1] = second ? second : first;
    m->n_devs = second && second != first ? 2 : 1;
    tf_status s = llm_model_config(f, &m->arch, &m->cfg);
    if (s == TF_OK && (n_first < 0 || n_first > m->cfg.n_layer)) n_first = m->cfg.n_layer;
    loader ld = {.f = f, .dev = first, .dtype = dtype};
    if (s == TF_OK && !(ld.used = calloc((size_t)tf_gguf_tensor_count(f) + 1, sizeof *ld.used)))
        s = llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    if (s == TF_OK) s = load_weights(&ld, m, m->n_devs == 2 ? n_first : m->cfg.n_layer);
    free(ld.used);
    if (s != TF_OK) {
        llm_model_free(m);
        return s;
    }
    *out = m;
    return TF_OK;
}

tf_status llm_model_load(const tf_gguf *f, tf_device *dev, tf_dtype dtype, llm_model **out) {
    return llm_model_load_split(f, dev, NULL, -1, dtype, out);
}

void llm_model_free(llm_model *m) {
    if (!m) return;
    for (int64_t l = 0; m->layers && l < m->cfg.n_layer; l++) free_layer(&m->layers[l]);
    free(m->layers);
    tf_tensor_release(m->tok_embd);
    tf_tensor_release(m->out_norm);
    tf_tensor_release(m->output);
    tf_tensor_release(m->output_bias);
    free(m->rope_factors);
    free(m->rope_long);
    free(m->rope_short);
    free(m);
}

/* ---- the KV cache -------------------------------------------------------- */

tf_status llm_cache_new_seqs(const llm_model *m, int64_t n_ctx, int64_t n_seq, llm_cache **out) {
    *out = NULL;
    const llm_config *c = &m->cfg;
    if (n_ctx <= 0 || n_ctx > (1 << 24) || n_seq <= 0 || n_seq > 64)
        return llm_fail(TF_ERR_INVALID_ARGUMENT, "cache: %lld cells for %lld sequences (1..2^24 cells, 1..64 sequences)",
                        (long long)n_ctx, (long long)n_seq);
    llm_cache *kv = calloc(1, sizeof *kv);
    if (!kv || !(kv->k = calloc((size_t)c->n_layer, sizeof *kv->k)) || !(kv->v = calloc((size_t)c->n_layer, sizeof *kv->v)) ||
        !(kv->pos = malloc((size_t)n_ctx * sizeof *kv->pos)) || !(kv->seqs = calloc((size_t)n_ctx, sizeof *kv->seqs))) {
        llm_cache_free(kv);
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "cache: out of memory");
    }
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->n_layer = c->n_layer;
    for (int64_t i = 0; i < n_ctx; i++) kv->pos[i] = -1;
    int64_t shape[4] = {1, c->n_head_kv, n_ctx, c->head_dim};
    tf_status s = TF_OK;
    for (int64_t l = 0; s == TF_OK && l < c->n_layer; l++) {
        tf_device *dev = m->devs[m->layers[l].dev];      /* each layer's cache beside its weights */
        s = tf_zeros(dev, TF_F32, 4, shape, &kv->k[l]);
        if (s == TF_OK) s = tf_zeros(dev, TF_F32, 4, shape, &kv->v[l]);
    }
    if (s != TF_OK) {
        llm_cache_free(kv);
        return llm_fail(s, "cache: %s", tf_last_error());
    }
    kv->graphs = llm_graphs_new();
    *out = kv;
    return TF_OK;
}

tf_status llm_cache_new(const llm_model *m, int64_t n_ctx, llm_cache **out) { return llm_cache_new_seqs(m, n_ctx, 1, out); }

void llm_cache_free(llm_cache *c) {
    if (!c) return;
    llm_graphs_free(c->graphs);
    for (int64_t l = 0; l < c->n_layer; l++) {
        if (c->k) tf_tensor_release(c->k[l]);
        if (c->v) tf_tensor_release(c->v[l]);
    }
    free(c->k);
    free(c->v);
    free(c->pos);
    free(c->seqs);
    free(c);
}

int64_t llm_cache_seq_pos_max(const llm_cache *c, int32_t seq) {
    int64_t best = -1;
    if (seq < 0 || seq >= c->n_seq) return -1;
    for (int64_t i = 0; i < c->n_past; i++)
        if ((c->seqs[i] >> seq & 1) && c->pos[i] > best) best = c->pos[i];
    return best;
}

static tf_status check_seq(const llm_cache *c, int32_t seq, bool any_allowed) {
    if ((any_allowed && seq == -1) || (seq >= 0 && seq < c->n_seq)) return TF_OK;
    return llm_fail(TF_ERR_INVALID_ARGUMENT, "cache: sequence %d is outside [0, %lld)", seq, (long long)c->n_seq);
}

tf_status llm_cache_seq_rm(llm_cache *c, int32_t seq, int64_t p0, int64_t p1) {
    tf_status s = check_seq(c, seq, true);
    if (s != TF_OK) return s;
    if (p1 < 0) p1 = INT64_MAX;
    uint64_t bits = seq < 0 ? ~0ull : 1ull << seq;
    for (int64_t i = 0; i < c->n_past; i++) {
        if (c->pos[i] < p0 || c->pos[i] >= p1) continue;
        c->seqs[i] &= ~bits;
        if (!c->seqs[i]) c->pos[i] = -1;
    }
    while (c->n_past > 0 && c->pos[c->n_past - 1] < 0) c->n_past--;   /* trailing free cells are reused */
    return TF_OK;
}

tf_status llm_cache_seq_cp(llm_cache *c, int32_t src, int32_t dst, int64_t p0, int64_t p1) {
    tf_status s = check_seq(c, src, false);
    if (s == TF_OK) s = check_seq(c, dst, false);
    if (s != TF_OK) return s;
    if (p1 < 0) p1 = INT64_MAX;
    for (int64_t i = 0; i < c->n_past; i++)
        if ((c->seqs[i] >> src & 1) && c->pos[i] >= p0 && c->pos[i] < p1) c->seqs[i] |= 1ull << dst;
    return TF_OK;
}
