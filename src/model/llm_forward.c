/* The forward pass of every family, built from its descriptor; see
 * llm_model.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm_model.h"
#include "tokenizer.h"   /* llm_fail */

/* ---- the forward pass ------------------------------------------------------ */

/* Temporaries of one forward, released together at its end. */
typedef struct scratch {
    tf_tensor *t[128];       /* a layer makes 30 to 60 */
    int n;
} scratch;

static void keep(scratch *s, tf_tensor *t) {
    if (s->n == 128) abort();  /* a broken invariant of this file, not bad input */
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

/* x @ w^T + r (r NULL: the plain product) as one fused node where the
 * device has it (tf_linear_fused: the residual added as the product's
 * tiles or rows are finished, no tensor for the bare product and no add
 * op); only the weights tf_gemm reads as stored, so the rest of the pass
 * is unchanged. */
static tf_status linear_plus(scratch *s, const tf_tensor *x, const tf_tensor *w, const tf_tensor *r, tf_tensor **out) {
    if (!r || !tf_dtype_is_quantized(tf_tensor_dtype(w))) {
        tf_status st = linear(s, x, w, out);
        if (st != TF_OK || !r) return st;
        tf_tensor *bare = *out;
        TRY(tf_add(r, bare, out));
        keep(s, *out);
        return TF_OK;
    }
    TRY(tf_linear_fused(x, w, NULL, TF_NO_ACTIVATION, r, out));
    keep(s, *out);
    return TF_OK;
}

/* x times a projection group's parts, side by side: [n, rows of all parts]. */
static tf_status linear_group(scratch *s, const tf_tensor *x, const llm_proj *p, tf_tensor **out) {
    tf_tensor *y;
    if (p->stacked) {
        tf_status st = linear(s, x, p->stacked, &y);
        if (st != TF_OK) return st;
    } else {
        tf_tensor *each[3];
        for (int i = 0; i < p->n; i++) {
            tf_status st = linear(s, x, p->parts[i], &each[i]);
            if (st != TF_OK) return st;
        }
        TRY(tf_concat(p->n, (const tf_tensor *const *)each, 1, &y));
        keep(s, y);
    }
    *out = y;
    if (p->bias) {
        TRY(tf_add(y, p->bias, out));
        keep(s, *out);
    }
    return TF_OK;
}

/* x times a scalar. */
static tf_status scale_by(scratch *s, const tf_tensor *x, double v, tf_tensor **out) {
    tf_tensor *k;
    TRY(tf_scalar(tf_tensor_device(x), tf_tensor_dtype(x), v, &k));
    keep(s, k);
    TRY(tf_mul(x, k, out));
    keep(s, *out);
    return TF_OK;
}

/* c * tanh(x / c): Gemma 2's bound on attention scores and logits. */
static tf_status softcap(scratch *s, const tf_tensor *x, double c, tf_tensor **out) {
    tf_tensor *a, *t;
    tf_status st;
    if ((st = scale_by(s, x, 1.0 / c, &a))) return st;
    TRY(tf_tanh(a, &t));
    keep(s, t);
    return scale_by(s, t, c, out);
}

/* [n, heads*dim] -> [1, heads, n, dim]: normed per head when the family
 * says (q/k norms), rotated by position when rope. */
/* What every layer of one decode shares: the tokens' positions, the cells
 * they are written to, and who sees whom. On the common path (one
 * sequence whose cells are its positions in order, as a plain generation
 * leaves them) attention is causal from `first` and needs no mask but the
 * window's; otherwise the masks say, per token and cell, whether the cell
 * is of the token's sequence and at or before its position. */
typedef struct plan {
    tf_tensor *pos;              /* [n] i64 */
    int64_t first, n_keys;       /* the batch's cells are [first, first + n); queries see [0, n_keys) */
    bool causal;                 /* the common path: causal from `first` */
    tf_tensor *mask[2];          /* additive [1, 1, n, n_keys]: global and local layers; NULL: none */
    tf_tensor *cos[2], *sin[2];  /* [n, 1, rope_dims/2] angle tables where tf_rope's angles do not serve; NULL: tf_rope */
} plan;

/* x [n, heads, d] rotated by angle tables [n, 1, rotary/2]: pairs
 * (i, i + rotary/2) for NeoX, (2i, 2i+1) for llama's interleaved layout;
 * dims past the rotary ones pass through. */
static tf_status rope_by_table(scratch *s, const llm_model *m, const tf_tensor *x, const tf_tensor *cs,
                               const tf_tensor *sn, tf_tensor **out) {
    const int64_t n = tf_tensor_shape(x)[0], h = tf_tensor_shape(x)[1], d = tf_tensor_shape(x)[2];
    const int64_t r = m->cfg.rope_dims, half = r / 2;
    bool neox = m->arch->rope_mode == TF_ROPE_HALF_SPLIT;
    tf_tensor *src = (tf_tensor *)x, *a, *b, *ac, *bs, *as, *bc, *ya, *yb, *rot, *pass;
    if (!neox) {                                   /* [n, h, r/2, 2]: the pairs side by side */
        tf_tensor *head;
        TRY(tf_slice(x, 2, 0, r, 1, &head));
        keep(s, head);
        TRY(tf_reshape(head, 4, (int64_t[]){n, h, half, 2}, &src));
        keep(s, src);
    }
    int axis = neox ? 2 : 3;
    TRY(tf_slice(src, axis, 0, neox ? half : 1, 1, &a));
    keep(s, a);
    TRY(tf_slice(src, axis, neox ? half : 1, neox ? r : 2, 1, &b));
    keep(s, b);
    const tf_tensor *c4 = cs, *s4 = sn;
    if (!neox) {                                   /* the tables as [n, 1, r/2, 1] */
        tf_tensor *cr, *sr;
        TRY(tf_unsqueeze(cs, 3, &cr));
        keep(s, cr);
        TRY(tf_unsqueeze(sn, 3, &sr));
        keep(s, sr);
        c4 = cr;
        s4 = sr;
    }
    TRY(tf_mul(a, c4, &ac));
    keep(s, ac);
    TRY(tf_mul(b, s4, &bs));
    keep(s, bs);
    TRY(tf_mul(a, s4, &as));
    keep(s, as);
    TRY(tf_mul(b, c4, &bc));
    keep(s, bc);
    TRY(tf_sub(ac, bs, &ya));
    keep(s, ya);
    TRY(tf_add(as, bc, &yb));
    keep(s, yb);
    TRY(tf_concat(2, (const tf_tensor *const[]){ya, yb}, axis, &rot));
    keep(s, rot);
    if (!neox) {
        tf_tensor *flat;
        TRY(tf_reshape(rot, 3, (int64_t[]){n, h, r}, &flat));
        keep(s, flat);
        rot = flat;
    }
    if (r == d) {
        *out = rot;
        return TF_OK;
    }
    TRY(tf_slice(x, 2, r, d, 1, &pass));
    keep(s, pass);
    TRY(tf_concat(2, (const tf_tensor *const[]){rot, pass}, 2, out));
    keep(s, *out);
    return TF_OK;
}

static tf_status to_heads(scratch *s, const llm_model *m, const llm_layer *L, const tf_tensor *x, int64_t heads,
                          const tf_tensor *norm, const plan *p, bool rope, tf_tensor **out) {
    const llm_config *c = &m->cfg;
    tf_tensor *split, *normed, *rotated, *heads_first;
    int64_t n = tf_tensor_shape(x)[0];
    TRY(tf_reshape(x, 3, (int64_t[]){n, heads, c->head_dim}, &split));
    keep(s, split);
    normed = split;
    if (norm) {
        TRY(tf_rmsnorm(split, norm, c->rms_eps, &normed));
        keep(s, normed);
    }
    rotated = normed;
    int kind = L->local && c->n_swa > 0;
    if (rope && p->cos[kind]) {
        tf_status st = rope_by_table(s, m, normed, p->cos[kind], p->sin[kind], &rotated);
        if (st != TF_OK) return st;
    } else if (rope) {
        double base = L->local ? c->rope_base_local : c->rope_base;
        TRY(tf_rope(normed, p->pos, 0, c->rope_dims, base, m->arch->rope_mode, &rotated));
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


static void plan_free(plan *p) {
    tf_tensor_release(p->pos);
    for (int i = 0; i < 2; i++) {
        tf_tensor_release(p->mask[i]);
        tf_tensor_release(p->cos[i]);
        tf_tensor_release(p->sin[i]);
    }
}

/* The angles pos * scale * base^(-2i/d) / factor_i as cos and sin tables
 * [n, 1, d/2], for scaled RoPE (linear scaling, Llama 3.1's divisors),
 * which the rotation op does not take. f64 here, rounded once. */
static tf_status rope_tables(const llm_model *m, tf_device *dev, const int64_t *pos, int64_t n, double base,
                             double scale, const float *divisors, tf_tensor **cos_out, tf_tensor **sin_out) {
    const int64_t half = m->cfg.rope_dims / 2;
    const double mscale = m->rope_attn_factor;
    float *c = malloc((size_t)(2 * n * half) * sizeof *c);
    if (!c) return llm_fail(TF_ERR_OUT_OF_MEMORY, "forward: out of memory");
    float *sn = c + n * half;
    for (int64_t i = 0; i < half; i++) {
        double freq = scale * pow(base, -2.0 * (double)i / (double)m->cfg.rope_dims) / (divisors ? divisors[i] : 1.0);
        for (int64_t r = 0; r < n; r++) {
            double a = (double)pos[r] * freq;
            c[r * half + i] = (float)(mscale * cos(a));
            sn[r * half + i] = (float)(mscale * sin(a));
        }
    }
    int64_t shape[3] = {n, 1, half};
    tf_status st = tf_tensor_from_data(dev, TF_F32, 3, shape, c, cos_out);
    if (st == TF_OK) st = tf_tensor_from_data(dev, TF_F32, 3, shape, sn, sin_out);
    free(c);
    return st == TF_OK ? TF_OK : llm_fail(st, "forward: RoPE tables: %s", tf_last_error());
}

/* The cells seen by batch entry i: of its sequence, at or before its
 * position, and within `window` of it (window > 0). */
static tf_status build_mask(tf_device *dev, const llm_cache *kv, const llm_batch *b, const int64_t *pos,
                            const int32_t *seq, int64_t window, tf_tensor **out) {
    const int64_t n = b->n, keys = kv->n_past + n;
    float *v = malloc((size_t)(n * keys) * sizeof *v);
    if (!v) return llm_fail(TF_ERR_OUT_OF_MEMORY, "forward: out of memory");
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < keys; j++) {
            bool cached = j < kv->n_past;
            int64_t cell_pos = cached ? kv->pos[j] : pos[j - kv->n_past];
            bool same_seq = cached ? (kv->seqs[j] >> seq[i] & 1) != 0 : seq[j - kv->n_past] == seq[i];
            bool seen = cell_pos >= 0 && same_seq && cell_pos <= pos[i] && (window <= 0 || pos[i] - cell_pos < window);
            v[i * keys + j] = seen ? 0.0f : -INFINITY;
        }
    tf_status st = tf_tensor_from_data(dev, TF_F32, 4, (int64_t[]){1, 1, n, keys}, v, out);
    free(v);
    return st == TF_OK ? TF_OK : llm_fail(st, "forward: mask: %s", tf_last_error());
}

/* The common path: one sequence, its cells its positions in order, the
 * batch its next positions. */
static bool is_plain_run(const llm_cache *kv, const llm_batch *b, const int64_t *pos, const int32_t *seq) {
    for (int64_t j = 0; j < kv->n_past; j++)
        if (kv->pos[j] != j || kv->seqs[j] != 1ull) return false;
    for (int64_t i = 0; i < b->n; i++)
        if (seq[i] != 0 || pos[i] != kv->n_past + i) return false;
    return true;
}

/* The plan's tensors on one device (a split model has a plan on each). */
static tf_status plan_new(const llm_model *m, tf_device *dev, const llm_cache *kv, const llm_batch *b, const int64_t *pos,
                          const int32_t *seq, plan *p) {
    const llm_config *c = &m->cfg;
    *p = (plan){.first = kv->n_past, .n_keys = kv->n_past + b->n};
    p->causal = is_plain_run(kv, b, pos, seq);
    tf_status st = tf_tensor_from_data(dev, TF_I64, 1, (int64_t[]){b->n}, pos, &p->pos);
    if (st != TF_OK) return llm_fail(st, "forward: positions: %s", tf_last_error());
    /* Soft-capped scores are masked by hand, so they need the causal mask too. */
    if (!p->causal || c->attn_softcap > 0) st = build_mask(dev, kv, b, pos, seq, 0, &p->mask[0]);
    bool window_hides = false;
    for (int64_t i = 0; i < b->n && c->n_swa > 0; i++) window_hides = window_hides || pos[i] >= c->n_swa;
    if (st == TF_OK && window_hides) st = build_mask(dev, kv, b, pos, seq, c->n_swa, &p->mask[1]);
    else if (st == TF_OK && p->mask[0]) p->mask[1] = tf_tensor_retain(p->mask[0]);
    /* Scaled RoPE: global layers scale, local ones (Gemma 3) do not; the
     * divisors are Llama 3.1's, or LongRoPE's long ones for a cache longer
     * than the original context (llama.cpp: n_ctx per sequence, all of it
     * in a unified cache as ours). */
    const float *div = m->rope_factors;
    if (!div && m->rope_long) div = kv->n_ctx > m->n_ctx_orig ? m->rope_long : m->rope_short;
    bool scaled = c->rope_scale != 1.0 || div || m->rope_attn_factor != 1.0;
    if (st == TF_OK && scaled)
        st = rope_tables(m, dev, pos, b->n, c->rope_base, c->rope_scale, div, &p->cos[0], &p->sin[0]);
    if (st == TF_OK && (div || m->rope_attn_factor != 1.0) && c->n_swa > 0)
        st = rope_tables(m, dev, pos, b->n, c->rope_base_local, 1.0, div, &p->cos[1], &p->sin[1]);
    return st;
}

/* Attention with soft-capped scores, op by op: the heads that share a key
 * head are stacked as rows, so one batched product per key head serves
 * them. q [1, Hq, n, D], k and v [1, Hkv, L, D] -> [1, Hq, n, D]. */
static tf_status capped_attention(scratch *s, const llm_model *m, const tf_tensor *q, const tf_tensor *k,
                                  const tf_tensor *v, const tf_tensor *mask, tf_tensor **out) {
    const llm_config *c = &m->cfg;
    const int64_t n = tf_tensor_shape(q)[2], keys = tf_tensor_shape(k)[2], g = c->n_head / c->n_head_kv;
    const int64_t hkv = c->n_head_kv, d = c->head_dim;
    tf_tensor *q3, *k3, *kt, *v3, *scores, *scaled, *capped, *grouped, *masked, *flat, *p, *o;
    tf_status st;
    TRY(tf_reshape(q, 3, (int64_t[]){hkv, g * n, d}, &q3));
    keep(s, q3);
    TRY(tf_reshape(k, 3, (int64_t[]){hkv, keys, d}, &k3));
    keep(s, k3);
    TRY(tf_transpose(k3, 1, 2, &kt));
    keep(s, kt);
    TRY(tf_reshape(v, 3, (int64_t[]){hkv, keys, d}, &v3));
    keep(s, v3);
    TRY(tf_matmul(q3, kt, &scores));
    keep(s, scores);
    if ((st = scale_by(s, scores, c->attn_scale, &scaled)) || (st = softcap(s, scaled, c->attn_softcap, &capped)))
        return st;
    TRY(tf_reshape(capped, 4, (int64_t[]){hkv, g, n, keys}, &grouped));   /* the mask broadcasts over heads */
    keep(s, grouped);
    TRY(tf_add(grouped, mask, &masked));
    keep(s, masked);
    TRY(tf_reshape(masked, 3, (int64_t[]){hkv, g * n, keys}, &flat));
    keep(s, flat);
    TRY(tf_softmax(flat, -1, &p));
    keep(s, p);
    TRY(tf_matmul(p, v3, &o));
    keep(s, o);
    TRY(tf_reshape(o, 4, (int64_t[]){1, c->n_head, n, d}, out));
    keep(s, *out);
    return TF_OK;
}

/* Attention over the cells in view, masked as the plan says. [1, Hq, n, D]. */
static tf_status attend(scratch *s, const llm_model *m, const llm_layer *L, const plan *p, const tf_tensor *qh,
                        const tf_tensor *k_all, const tf_tensor *v_all, tf_tensor **out) {
    const llm_config *c = &m->cfg;
    const tf_tensor *mask = p->mask[L->local && c->n_swa > 0];
    if (c->attn_softcap > 0) return capped_attention(s, m, qh, k_all, v_all, mask, out);
    TRY(tf_sdpa(qh, k_all, v_all, mask, c->attn_scale, p->causal, p->first, out));
    keep(s, *out);
    return TF_OK;
}

static tf_status attention(scratch *s, const llm_model *m, const llm_layer *L, tf_tensor *kc, tf_tensor *vc,
                           const tf_tensor *h, const plan *p, const tf_tensor *residual, tf_tensor **out) {
    const llm_config *c = &m->cfg;
    int64_t n = tf_tensor_shape(h)[0];
    const int64_t qd = c->n_head * c->head_dim, kvw = c->n_head_kv * c->head_dim;
    tf_tensor *qkv, *q, *k, *v, *qh, *kh, *vh, *k_all, *v_all, *a, *a_rows, *a_flat;
    tf_status st;
    if ((st = linear_group(s, h, &L->qkv, &qkv))) return st;
    TRY(tf_slice(qkv, 1, 0, qd, 1, &q));                 /* column views of [n, q | k | v] */
    keep(s, q);
    TRY(tf_slice(qkv, 1, qd, qd + kvw, 1, &k));
    keep(s, k);
    TRY(tf_slice(qkv, 1, qd + kvw, qd + 2 * kvw, 1, &v));
    keep(s, v);
    if ((st = to_heads(s, m, L, q, c->n_head, L->q_norm, p, true, &qh)) ||
        (st = to_heads(s, m, L, k, c->n_head_kv, L->k_norm, p, true, &kh)) ||
        (st = to_heads(s, m, L, v, c->n_head_kv, NULL, p, false, &vh)))
        return st;
    if ((st = append_kv(s, kc, kh, p->first, n, &k_all)) || (st = append_kv(s, vc, vh, p->first, n, &v_all))) return st;
    if ((st = attend(s, m, L, p, qh, k_all, v_all, &a))) return st;
    TRY(tf_permute(a, (int[]){0, 2, 1, 3}, &a_rows));
    keep(s, a_rows);
    TRY(tf_reshape(a_rows, 2, (int64_t[]){n, qd}, &a_flat));
    keep(s, a_flat);
    return linear_plus(s, a_flat, L->wo, residual, out);
}

static tf_status mlp(scratch *s, const llm_model *m, const llm_layer *L, const tf_tensor *h, const tf_tensor *residual,
                     tf_tensor **out) {
    tf_tensor *gu, *g, *u, *act, *gated;
    tf_status st;
    if ((st = linear_group(s, h, &L->gate_up, &gu))) return st;
    int64_t ff = tf_tensor_shape(gu)[1] / 2;
    TRY(tf_slice(gu, 1, 0, ff, 1, &g));                 /* [n, gate | up] */
    keep(s, g);
    TRY(tf_slice(gu, 1, ff, 2 * ff, 1, &u));
    keep(s, u);
    if (m->arch->act == LLM_ACT_SILU) {
        TRY(tf_swiglu(g, u, &act));
        keep(s, act);
    } else {
        TRY(tf_gelu_tanh(g, &gated));
        keep(s, gated);
        TRY(tf_mul(gated, u, &act));
        keep(s, act);
    }
    return linear_plus(s, act, L->w_down, residual, out);
}

/* A sublayer's output, normed again before the residual add when the
 * family has post-norms (Gemma 2/3). */
static tf_status post_norm(scratch *s, const llm_model *m, const tf_tensor *norm, tf_tensor *o, tf_tensor **out) {
    *out = o;
    if (!norm) return TF_OK;
    TRY(tf_rmsnorm(o, norm, m->cfg.rms_eps, out));
    keep(s, *out);
    return TF_OK;
}

/* One decoder layer: x + attention(norm(x)), then that + mlp(norm(that)). */
static tf_status block(scratch *s, const llm_model *m, const llm_layer *L, llm_cache *kv, int64_t l, const plan *p,
                       const tf_tensor *x, tf_tensor **out) {
    tf_tensor *h, *o, *po, *sum;
    TRY(tf_rmsnorm(x, L->attn_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    /* without a post-norm (Gemma's) the residual joins the projection */
    tf_status st = attention(s, m, L, kv->k[l], kv->v[l], h, p, L->attn_post_norm ? NULL : x, &o);
    if (st != TF_OK) return st;
    if (L->attn_post_norm) {
        if ((st = post_norm(s, m, L->attn_post_norm, o, &po)) != TF_OK) return st;
        TRY(tf_add(x, po, &sum));
        keep(s, sum);
    } else {
        sum = o;
    }
    TRY(tf_rmsnorm(sum, L->ffn_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    if ((st = mlp(s, m, L, h, L->ffn_post_norm ? NULL : sum, &o)) != TF_OK) return st;
    if (!L->ffn_post_norm) {
        *out = tf_tensor_retain(o);          /* the caller's: the scratch drops its own reference */
        return TF_OK;
    }
    if ((st = post_norm(s, m, L->ffn_post_norm, o, &po)) != TF_OK) return st;
    TRY(tf_add(sum, po, out));
    return TF_OK;
}

/* The batch's ids as a tensor on the model's device, checked. */
static tf_status ids_tensor(const llm_model *m, const int32_t *ids, int64_t n, tf_tensor **out) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.n_vocab)
            return llm_fail(TF_ERR_INDEX, "forward: token %lld is outside the vocabulary", (long long)ids[i]);
    TRY(tf_tensor_from_data(m->dev, TF_I32, 1, &n, ids, out));
    return TF_OK;
}

static tf_status embed(const llm_model *m, const tf_tensor *idt, tf_tensor **x) {
    tf_status s = tf_embedding(m->tok_embd, idt, x);
    if (s != TF_OK) return llm_fail(s, "forward: embedding: %s", tf_last_error());
    if (tf_tensor_dtype(*x) != TF_F32) {      /* activations run in f32 */
        tf_tensor *f;
        s = tf_cast(*x, TF_F32, &f);
        tf_tensor_release(*x);
        *x = f;
        if (s != TF_OK) return llm_fail(s, "forward: %s", tf_last_error());
    }
    if (m->arch->scale_embeddings) {          /* Gemma: by sqrt(width), rounded to f32 as ggml does */
        tf_tensor *k = NULL, *scaled = NULL;
        s = tf_scalar(m->dev, TF_F32, (double)sqrtf((float)m->cfg.n_embd), &k);
        if (s == TF_OK) s = tf_mul(*x, k, &scaled);
        tf_tensor_release(k);
        tf_tensor_release(*x);
        *x = scaled;
        if (s != TF_OK) return llm_fail(s, "forward: scaling the embeddings: %s", tf_last_error());
    }
    return TF_OK;
}

/* The rows of x whose entries want logits: all, the last, or a gather. */
static tf_status wanted_rows(scratch *s, tf_tensor *x, const llm_batch *b, tf_tensor **out) {
    int64_t n = tf_tensor_shape(x)[0], wanted = 0, only = -1;
    *out = x;
    if (!b->logits) {
        if (n == 1) return TF_OK;
        TRY(tf_slice(x, 0, n - 1, n, 1, out));
        keep(s, *out);
        return TF_OK;
    }
    for (int64_t i = 0; i < n; i++)
        if (b->logits[i]) wanted++, only = i;
    if (wanted == n) return TF_OK;
    if (wanted == 1) {
        TRY(tf_slice(x, 0, only, only + 1, 1, out));
        keep(s, *out);
        return TF_OK;
    }
    int32_t *rows = malloc((size_t)wanted * sizeof *rows);
    if (!rows) return llm_fail(TF_ERR_OUT_OF_MEMORY, "forward: out of memory");
    for (int64_t i = 0, k = 0; i < n; i++)
        if (b->logits[i]) rows[k++] = (int32_t)i;
    tf_tensor *idx;
    tf_status st = tf_tensor_from_data(tf_tensor_device(x), TF_I32, 1, &wanted, rows, &idx);
    free(rows);
    if (st != TF_OK) return llm_fail(st, "forward: %s", tf_last_error());
    keep(s, idx);
    TRY(tf_embedding(x, idx, out));          /* a row gather */
    keep(s, *out);
    return TF_OK;
}

static tf_status head(scratch *s, const llm_model *m, tf_tensor *x, const llm_batch *b, tf_tensor **logits) {
    tf_tensor *last, *h;
    tf_status st0 = wanted_rows(s, x, b, &last);
    if (st0 != TF_OK) return st0;
    TRY(tf_rmsnorm(last, m->out_norm, m->cfg.rms_eps, &h));
    keep(s, h);
    if (b->hidden) {
        *logits = tf_tensor_retain(h);
        return TF_OK;
    }
    tf_tensor *y, *biased;
    TRY(tf_gemm(h, m->output, NULL, 1.0, 0.0, false, true, &y));
    keep(s, y);
    biased = y;
    if (m->output_bias) {
        TRY(tf_add(y, m->output_bias, &biased));
        keep(s, biased);
    }
    tf_tensor *capped = biased;
    tf_status st;
    if (m->cfg.final_softcap > 0 && (st = softcap(s, biased, m->cfg.final_softcap, &capped)) != TF_OK) return st;
    *logits = tf_tensor_retain(capped);
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

/* Every entry checked before anything is written: ids in the vocabulary,
 * sequences in range, each sequence's positions after the ones it holds
 * and increasing through the batch. Fills in defaults for NULL arrays. */
static tf_status check_batch(const llm_model *m, const llm_cache *kv, const llm_batch *b, int64_t *pos, int32_t *seq) {
    if (b->n <= 0) return llm_fail(TF_ERR_INVALID_ARGUMENT, "decode: no tokens");
    if (b->n > kv->n_ctx - kv->n_past)
        return llm_fail(TF_ERR_SIZE, "decode: %lld tokens do not fit the %lld cells left in the cache", (long long)b->n,
                        (long long)(kv->n_ctx - kv->n_past));
    int64_t *last = malloc((size_t)kv->n_seq * sizeof *last);
    if (!last) return llm_fail(TF_ERR_OUT_OF_MEMORY, "decode: out of memory");
    for (int32_t q = 0; q < kv->n_seq; q++) last[q] = llm_cache_seq_pos_max(kv, q);
    tf_status st = TF_OK;
    for (int64_t i = 0; st == TF_OK && i < b->n; i++) {
        seq[i] = b->seq ? b->seq[i] : 0;
        if (b->ids[i] < 0 || b->ids[i] >= m->cfg.n_vocab)
            st = llm_fail(TF_ERR_INDEX, "decode: token %lld is outside the vocabulary", (long long)b->ids[i]);
        else if (seq[i] < 0 || seq[i] >= kv->n_seq)
            st = llm_fail(TF_ERR_INVALID_ARGUMENT, "decode: entry %lld's sequence %d is outside [0, %lld)", (long long)i,
                          seq[i], (long long)kv->n_seq);
        else {
            pos[i] = b->pos ? b->pos[i] : last[seq[i]] + 1;
            if (pos[i] <= last[seq[i]] || pos[i] > (1ll << 30))
                st = llm_fail(TF_ERR_INVALID_ARGUMENT, "decode: entry %lld's position %lld is not after %lld, the last "
                              "of sequence %d", (long long)i, (long long)pos[i], (long long)last[seq[i]], seq[i]);
            else
                last[seq[i]] = pos[i];
        }
    }
    free(last);
    return st;
}

/* x on dev: itself, or a copy moved there (a split model's boundary). */
static tf_status move_to(tf_tensor **x, tf_device *dev) {
    if (tf_tensor_device(*x) == dev) return TF_OK;
    tf_tensor *moved = NULL;
    tf_status s = tf_tensor_to(*x, dev, &moved);
    tf_tensor_release(*x);
    *x = moved;
    return s == TF_OK ? TF_OK : llm_fail(s, "forward: moving activations to %s: %s", tf_device_name(dev), tf_last_error());
}

/* Embedding, layers and head from the ids tensor, with the plans made:
 * what a prompt graph captures. */
static tf_status pass(const llm_model *m, llm_cache *kv, const llm_batch *b, const plan *plans, const tf_tensor *idt,
                      tf_tensor **logits) {
    scratch s = {.n = 0};
    tf_tensor *x = NULL;
    tf_status st = embed(m, idt, &x);
    for (int64_t l = 0; st == TF_OK && l < m->cfg.n_layer; l++) {
        const llm_layer *L = &m->layers[l];
        if ((st = move_to(&x, m->devs[L->dev])) != TF_OK) break;
        /* Each layer's temporaries go before the next starts. */
        tf_tensor *next = NULL;
        st = block(&s, m, L, kv, l, &plans[L->dev], x, &next);
        drop_all(&s);
        tf_tensor_release(x);
        x = next;
    }
    if (st == TF_OK) st = move_to(&x, tf_tensor_device(m->output));
    if (st == TF_OK) st = head(&s, m, x, b, logits);
    drop_all(&s);
    tf_tensor_release(x);
    return st;
}

static tf_status eager_pass(const llm_model *m, llm_cache *kv, const llm_batch *b, const int64_t *pos,
                            const int32_t *seq, tf_tensor **logits) {
    plan plans[2] = {{0}, {0}};
    tf_tensor *idt = NULL;
    tf_status st = TF_OK;
    for (int d = 0; st == TF_OK && d < m->n_devs; d++) st = plan_new(m, m->devs[d], kv, b, pos, seq, &plans[d]);
    if (st == TF_OK) st = ids_tensor(m, b->ids, b->n, &idt);
    if (st == TF_OK) st = pass(m, kv, b, plans, idt, logits);
    tf_tensor_release(idt);
    plan_free(&plans[0]);
    plan_free(&plans[1]);
    return st;
}

/* ---- prompt passes as captured graphs ----
 * A prompt of n tokens after n_past cached ones, on the plain path (one
 * sequence in order, logits of the last token), is captured once per
 * (n, n_past) into a graph of the cache and replayed after that: the
 * fusion pass rewrites it (a float product and its residual add become
 * one GEMM_EPILOGUE), and a replay skips the per-op dispatch. Its masks
 * and RoPE tables depend on (n, n_past) alone, so they are kept with the
 * graph; only the ids are written before a replay. The capture reuses
 * its temporaries' buffers, so a graph holds about one layer's worth.
 * LLM_GRAPHS shapes per cache, the least recently used dropped first;
 * TF_MODEL_GRAPHS=0 keeps every pass eager. A single token (a generation
 * step: n_past differs each time) stays eager. */
#define LLM_GRAPHS 4

typedef struct prompt_graph {
    int64_t n, n_past;
    uint64_t used;
    tf_graph *graph;
    tf_tensor *ids, *logits;             /* the graph's input and output */
    plan p;
} prompt_graph;

struct llm_graphs {
    uint64_t passes;
    bool refused;                        /* a capture could not be replayed: this cache's passes stay eager */
    prompt_graph slot[LLM_GRAPHS];
};

static void drop_prompt_graph(prompt_graph *e) {
    tf_graph_destroy(e->graph);
    tf_tensor_release(e->ids);
    tf_tensor_release(e->logits);
    plan_free(&e->p);
    memset(e, 0, sizeof *e);
}

llm_graphs *llm_graphs_new(void) {
    const char *env = getenv("TF_MODEL_GRAPHS");
    static const char *const off[] = {"0", "false", "off", "no"};
    for (size_t i = 0; env && i < sizeof off / sizeof *off; i++)
        if (!strcmp(env, off[i])) return NULL;
    return calloc(1, sizeof(llm_graphs));       /* NULL without memory: every pass eager */
}

void llm_graphs_free(llm_graphs *g) {
    if (!g) return;
    for (int i = 0; i < LLM_GRAPHS; i++) drop_prompt_graph(&g->slot[i]);
    free(g);
}

/* Does this batch take the graph path? */
static bool graph_wanted(const llm_model *m, const llm_cache *kv, const llm_batch *b, const int64_t *pos,
                         const int32_t *seq) {
    return kv->graphs && !kv->graphs->refused && b->n >= 2 && !b->logits && !b->hidden && m->n_devs == 1 &&
           m->devs[0] == m->dev && tf_tensor_device(m->output) == m->dev && is_plain_run(kv, b, pos, seq);
}

static prompt_graph *slot_for(llm_graphs *c, int64_t n, int64_t n_past, bool *found) {
    prompt_graph *oldest = &c->slot[0];
    for (int i = 0; i < LLM_GRAPHS; i++) {
        prompt_graph *e = &c->slot[i];
        if (e->graph && e->n == n && e->n_past == n_past) {
            *found = true;
            return e;
        }
        if (e->used < oldest->used) oldest = &c->slot[i];
    }
    *found = false;
    for (int i = 0; i < LLM_GRAPHS; i++)
        if (!c->slot[i].graph) return &c->slot[i];
    drop_prompt_graph(oldest);
    return oldest;
}

/* The pass captured into e (its first run gives this call's logits). A
 * capture the device cannot replay leaves e empty, and this cache's passes
 * eager from then on: the pass still ran. */
static tf_status capture_prompt(const llm_model *m, llm_cache *kv, const llm_batch *b, const int64_t *pos,
                                const int32_t *seq, prompt_graph *e, tf_tensor **logits) {
    *e = (prompt_graph){.n = b->n, .n_past = kv->n_past};
    tf_status st = plan_new(m, m->dev, kv, b, pos, seq, &e->p);
    if (st == TF_OK) st = ids_tensor(m, b->ids, b->n, &e->ids);
    if (st == TF_OK && (st = tf_graph_begin(m->dev)) != TF_OK) st = llm_fail(st, "forward: %s", tf_last_error());
    if (st != TF_OK) {
        drop_prompt_graph(e);
        return st;
    }
    st = pass(m, kv, b, &e->p, e->ids, &e->logits);    /* its errors are the model's already */
    tf_status ended = tf_graph_end(&e->graph);
    if (st == TF_OK && ended == TF_OK && (st = tf_copy(e->logits, logits)) != TF_OK)
        st = llm_fail(st, "forward: copying the logits out: %s", tf_last_error());
    else if (st == TF_OK && ended != TF_OK) *logits = tf_tensor_retain(e->logits);   /* no replays here: the result only */
    if (st == TF_OK && ended != TF_OK) kv->graphs->refused = true;
    if (st != TF_OK || ended != TF_OK) drop_prompt_graph(e);
    return st;
}

static tf_status replay_prompt(const llm_batch *b, prompt_graph *e, tf_tensor **logits) {
    tf_status st = tf_tensor_write(e->ids, b->ids, (size_t)b->n * sizeof *b->ids);
    if (st == TF_OK) st = tf_graph_replay(e->graph);
    if (st == TF_OK) st = tf_copy(e->logits, logits);
    return st == TF_OK ? TF_OK : llm_fail(st, "forward: replaying the prompt graph: %s", tf_last_error());
}

static tf_status graph_pass(const llm_model *m, llm_cache *kv, const llm_batch *b, const int64_t *pos,
                            const int32_t *seq, tf_tensor **logits) {
    llm_graphs *c = kv->graphs;
    bool found;
    prompt_graph *e = slot_for(c, b->n, kv->n_past, &found);
    c->passes++;
    tf_status st = found ? replay_prompt(b, e, logits) : capture_prompt(m, kv, b, pos, seq, e, logits);
    if (e->graph) e->used = c->passes;
    return st;
}

static tf_status run_layers(const llm_model *m, llm_cache *kv, const llm_batch *b, const int64_t *pos,
                            const int32_t *seq, tf_tensor **logits) {
    tf_status st = graph_wanted(m, kv, b, pos, seq) ? graph_pass(m, kv, b, pos, seq, logits)
                                                    : eager_pass(m, kv, b, pos, seq, logits);
    if (st == TF_OK && (st = check_finite_logits(*logits)) != TF_OK) {
        tf_tensor_release(*logits);
        *logits = NULL;
    }
    return st;
}

tf_status llm_decode(const llm_model *m, llm_cache *kv, const llm_batch *b, tf_tensor **logits) {
    *logits = NULL;
    if (!b || !b->ids) return llm_fail(TF_ERR_INVALID_ARGUMENT, "decode: no batch");
    int64_t *pos = b->n > 0 ? malloc((size_t)b->n * sizeof *pos) : NULL;
    int32_t *seq = b->n > 0 ? malloc((size_t)b->n * sizeof *seq) : NULL;
    tf_status st = b->n > 0 && (!pos || !seq) ? llm_fail(TF_ERR_OUT_OF_MEMORY, "decode: out of memory") : TF_OK;
    if (st == TF_OK) st = check_batch(m, kv, b, pos, seq);
    if (st == TF_OK) st = run_layers(m, kv, b, pos, seq, logits);
    /* The cells are the batch's only once it ran: a failure leaves the
     * cache's bookkeeping as it was (the rows written past n_past are
     * unreachable). */
    for (int64_t i = 0; st == TF_OK && i < b->n; i++) {
        kv->pos[kv->n_past + i] = pos[i];
        kv->seqs[kv->n_past + i] = 1ull << seq[i];
    }
    if (st == TF_OK) kv->n_past += b->n;
    free(pos);
    free(seq);
    return st;
}

tf_status llm_forward(const llm_model *m, llm_cache *kv, const int32_t *ids, int64_t n, bool all_logits,
                      tf_tensor **logits) {
    bool *want = NULL;
    if (all_logits && n > 0) {
        if (!(want = malloc((size_t)n * sizeof *want))) return llm_fail(TF_ERR_OUT_OF_MEMORY, "forward: out of memory");
        for (int64_t i = 0; i < n; i++) want[i] = true;
    }
    llm_batch b = {.ids = ids, .logits = want, .n = n};
    tf_status st = llm_decode(m, kv, &b, logits);
    free(want);
    return st;
}
