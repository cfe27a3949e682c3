/* Transformer kernels: softmax, log_softmax, rmsnorm, layernorm (alone and
 * after a residual add), rope,
 * scaled dot-product attention, and the decode-time primitives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"

static tf_status float_only(const char *fn, tf_op_kind kind, const tf_tensor *x) {
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: %s does not accept dtype %s", fn, tf_op_name(kind), tf_dtype_name(x->dtype));
    return TF_OK;
}

/* ---- row ops ---- */

static tf_status check_vector(const char *fn, const char *what, const tf_tensor *v, int64_t d) {
    if (v && (v->ndim != 1 || v->shape[0] != d)) {
        char x[256];
        return tf__error(TF_ERR_SHAPE, "%s: %s %s must be [%lld], the last axis of x", fn, what,
                         tf__shape_str(v->ndim, v->shape, x, sizeof x), (long long)d);
    }
    return TF_OK;
}

/* A norm's weight and bias (either may be NULL) after the inputs so far,
 * and the flags that say which came. */
static uint32_t append_norm_inputs(const tf_tensor **in, int *n, const tf_tensor *weight, const tf_tensor *bias) {
    uint32_t flags = 0;
    if (weight) {
        in[(*n)++] = weight;
        flags |= TF_ROW_WEIGHT;
    }
    if (bias) {
        in[(*n)++] = bias;
        flags |= TF_ROW_BIAS;
    }
    return flags;
}

static tf_status row_op(const char *fn, tf_op_kind kind, const tf_tensor *x, int axis, const tf_tensor *weight,
                        const tf_tensor *bias, double eps, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_status s = float_only(fn, kind, x);
    if (s != TF_OK) return s;
    if (x->ndim == 0) return tf__error(TF_ERR_SHAPE, "%s: needs at least 1 dimension", fn);
    int ax = axis < 0 ? axis + x->ndim : axis;
    if (ax < 0 || ax >= x->ndim)
        return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, x->ndim);
    TF__GRAD(fn, out, row_op(fn, kind, x, axis, weight, bias, eps, out),
             (ga_.rule = TF__GRAD_ROW, ga_.op = kind, ga_.p.axis = ax, ga_.p.eps = eps), x, weight, bias);
    int64_t d = x->shape[x->ndim - 1];
    s = check_vector(fn, "weight", weight, d);
    if (s == TF_OK) s = check_vector(fn, "bias", bias, d);
    if (s == TF_OK && !(eps >= 0)) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: eps %g must be >= 0", fn, eps);
    if (s != TF_OK) return s;
    const tf_tensor *in[3] = {x, NULL, NULL};
    int n = 1;
    uint32_t flags = append_norm_inputs(in, &n, weight, bias);
    tf_dtype want[3] = {x->dtype, x->dtype, x->dtype};
    tf_op_call c;
    s = tf__op_begin(&c, fn, kind, n, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < n; i++) tf__desc_into(&c.op.inputs[i], c.in[i]);
    c.op.params.axis = ax;
    c.op.params.eps = eps;
    c.op.params.flags = flags;
    return tf__op_end(&c, TF_OK, x->dtype, x->ndim, x->shape, out);
}

tf_status tf_softmax(const tf_tensor *x, int axis, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_softmax", out, tf_softmax(x, axis, out), &x);
    return row_op("tf_softmax", TF_OP_SOFTMAX, x, axis, NULL, NULL, 0, out);
}

tf_status tf_log_softmax(const tf_tensor *x, int axis, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_log_softmax", out, tf_log_softmax(x, axis, out), &x);
    return row_op("tf_log_softmax", TF_OP_LOG_SOFTMAX, x, axis, NULL, NULL, 0, out);
}

tf_status tf_rmsnorm(const tf_tensor *x, const tf_tensor *weight, double eps, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_rmsnorm", out, tf_rmsnorm(x, weight, eps, out), &x, &weight);
    return row_op("tf_rmsnorm", TF_OP_RMSNORM, x, -1, weight, NULL, eps, out);
}

tf_status tf_rmsnorm_grad(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *grad_out, double eps,
                         tf_tensor **out) {
    static const char fn[] = "tf_rmsnorm_grad";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !grad_out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or grad_out is NULL", fn);
    tf_status s = float_only(fn, TF_OP_RMSNORM_GRAD, x);
    if (s != TF_OK) return s;
    if (x->ndim == 0) return tf__error(TF_ERR_SHAPE, "%s: needs at least 1 dimension", fn);
    char a[256], b[256];
    if (!tf__same_shape(x->ndim, x->shape, grad_out->ndim, grad_out->shape))
        return tf__error(TF_ERR_SHAPE, "%s: grad_out is %s and x %s: they must match", fn,
                         tf__shape_str(grad_out->ndim, grad_out->shape, a, sizeof a),
                         tf__shape_str(x->ndim, x->shape, b, sizeof b));
    s = check_vector(fn, "weight", weight, x->shape[x->ndim - 1]);
    if (s == TF_OK && !(eps >= 0)) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: eps %g must be >= 0", fn, eps);
    if (s != TF_OK) return s;
    const tf_tensor *in[3] = {x, grad_out, weight};
    const int n = weight ? 3 : 2;
    tf_dtype want[3] = {x->dtype, x->dtype, x->dtype};
    tf_op_call c;
    s = tf__op_begin(&c, fn, TF_OP_RMSNORM_GRAD, n, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < n; i++) tf__desc_into(&c.op.inputs[i], c.in[i]);
    c.op.params.axis = x->ndim - 1;
    c.op.params.eps = eps;
    c.op.params.flags = weight ? TF_ROW_WEIGHT : 0;
    return tf__op_end(&c, TF_OK, x->dtype, x->ndim, x->shape, out);
}

tf_status tf_layernorm(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *bias, double eps, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_layernorm", out, tf_layernorm(x, weight, bias, eps, out), &x, &weight, &bias);
    return row_op("tf_layernorm", TF_OP_LAYERNORM, x, -1, weight, bias, eps, out);
}

/* ---- a residual add and a norm in one pass ---- */

static tf_status check_residual(const char *fn, const tf_tensor *x, const tf_tensor *r) {
    char a[256], b[256];
    if (r->dtype != x->dtype)
        return tf__error(TF_ERR_DTYPE, "%s: the residual is %s and x %s: give both one dtype", fn,
                         tf_dtype_name(r->dtype), tf_dtype_name(x->dtype));
    bool fits = r->ndim <= x->ndim;
    for (int i = 0; fits && i < r->ndim; i++) {
        int64_t want = x->shape[x->ndim - r->ndim + i];
        fits = r->shape[i] == want || r->shape[i] == 1;
    }
    if (!fits)
        return tf__error(TF_ERR_SHAPE, "%s: the residual %s does not broadcast to x %s", fn,
                         tf__shape_str(r->ndim, r->shape, a, sizeof a), tf__shape_str(x->ndim, x->shape, b, sizeof b));
    return TF_OK;
}

static bool same_shape(const tf_tensor *a, const tf_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* ADD_RMSNORM / ADD_LAYERNORM: the inputs x, r (as a view of x's shape),
 * then the weight and bias as row_op's. */
/* The fused op as its parts, for autograd to record each (the fused
 * kernel has no rule of its own; the sum is rounded to the dtype, as the
 * fused kernels round it). */
static tf_status add_then_norm(tf_op_kind kind, const tf_tensor *x, const tf_tensor *r, const tf_tensor *weight,
                               const tf_tensor *bias, double eps, tf_tensor **out) {
    tf_tensor *sum = NULL;
    tf_status s = tf_add(x, r, &sum);
    if (s == TF_OK)
        s = kind == TF_OP_ADD_RMSNORM ? tf_rmsnorm(sum, weight, eps, out) : tf_layernorm(sum, weight, bias, eps, out);
    tf_tensor_release(sum);
    return s;
}

static tf_status add_norm_op(const char *fn, tf_op_kind kind, const tf_tensor *x, const tf_tensor *r,
                             const tf_tensor *weight, const tf_tensor *bias, double eps, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !r) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or the residual is NULL", fn);
    tf_status s = float_only(fn, kind, x);
    if (s == TF_OK && x->ndim == 0) s = tf__error(TF_ERR_SHAPE, "%s: needs at least 1 dimension", fn);
    if (s == TF_OK) s = check_residual(fn, x, r);
    int64_t d = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (s == TF_OK) s = check_vector(fn, "weight", weight, d);
    if (s == TF_OK) s = check_vector(fn, "bias", bias, d);
    if (s == TF_OK && !(eps >= 0)) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: eps %g must be >= 0", fn, eps);
    if (s != TF_OK) return s;
    const tf_tensor *parts[4] = {x, r, weight, bias};
    if (tf__grad_wanted(4, parts)) return tf__in(fn, add_then_norm(kind, x, r, weight, bias, eps, out));
    tf_tensor *wide = NULL;                 /* r broadcast to x's shape (stride 0 where it repeats) */
    if (!same_shape(r, x) && (s = tf_expand(r, x->ndim, x->shape, &wide)) != TF_OK) return tf__in(fn, s);
    const tf_tensor *in[4] = {x, wide ? wide : r, NULL, NULL};
    int n = 2;
    uint32_t flags = append_norm_inputs(in, &n, weight, bias);
    tf_dtype want[4] = {x->dtype, x->dtype, x->dtype, x->dtype};
    tf_op_call c;
    s = tf__op_begin(&c, fn, kind, n, in, want, NULL);
    tf_tensor_release(wide);
    if (s != TF_OK) return s;
    for (int i = 0; i < n; i++) tf__desc_into(&c.op.inputs[i], c.in[i]);
    c.op.params.axis = x->ndim - 1;
    c.op.params.eps = eps;
    c.op.params.flags = flags;
    return tf__op_end(&c, TF_OK, x->dtype, x->ndim, x->shape, out);
}

tf_status tf_add_rmsnorm(const tf_tensor *x, const tf_tensor *residual, const tf_tensor *weight, double eps,
                         tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_add_rmsnorm", out, tf_add_rmsnorm(x, residual, weight, eps, out), &x,
                 &residual, &weight);
    return add_norm_op("tf_add_rmsnorm", TF_OP_ADD_RMSNORM, x, residual, weight, NULL, eps, out);
}

tf_status tf_add_layernorm(const tf_tensor *x, const tf_tensor *residual, const tf_tensor *weight,
                           const tf_tensor *bias, double eps, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_add_layernorm", out, tf_add_layernorm(x, residual, weight, bias, eps, out), &x,
                 &residual, &weight, &bias);
    return add_norm_op("tf_add_layernorm", TF_OP_ADD_LAYERNORM, x, residual, weight, bias, eps, out);
}

/* ---- rope ---- */

tf_status tf_rope(const tf_tensor *x, const tf_tensor *positions, int seq_axis, int64_t rotary_dims, double theta,
                  tf_rope_mode mode, tf_tensor **out) {
    static const char fn[] = "tf_rope";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !positions) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_status s = float_only(fn, TF_OP_ROPE, x);
    if (s != TF_OK) return s;
    if (x->ndim < 2) return tf__error(TF_ERR_SHAPE, "%s: x needs a sequence axis and a last axis, got %d-d", fn, x->ndim);
    int ax = seq_axis < 0 ? seq_axis + x->ndim : seq_axis;
    if (ax < 0 || ax >= x->ndim - 1)
        return tf__error(TF_ERR_AXIS, "%s: seq_axis %d must name an axis before the last of a %d-d tensor", fn, seq_axis,
                         x->ndim);
    int64_t d = x->shape[x->ndim - 1], rot = rotary_dims == 0 ? d : rotary_dims;
    if (rot < 0 || rot > d || rot % 2)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: rotary_dims %lld must be even and at most %lld", fn,
                         (long long)rotary_dims, (long long)d);
    if (!(theta > 0) || mode < TF_ROPE_INTERLEAVED || mode > TF_ROPE_HALF_SPLIT)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: theta %g must be > 0 and mode 0 or 1", fn, theta);
    if (positions->dtype != TF_I32 && positions->dtype != TF_I64)
        return tf__error(TF_ERR_DTYPE, "%s: positions must be i32 or i64, not %s", fn, tf_dtype_name(positions->dtype));
    if (positions->ndim != 1 || positions->shape[0] != x->shape[ax])
        return tf__error(TF_ERR_SHAPE, "%s: positions must be [%lld], one per index of axis %d", fn,
                         (long long)x->shape[ax], ax);
    TF__GRAD(fn, out, tf_rope(x, positions, seq_axis, rotary_dims, theta, mode, out),
             (ga_.rule = TF__GRAD_ROPE, ga_.op = TF_OP_ROPE, ga_.p.axis = ax, ga_.p.rotary_dims = rot,
              ga_.p.theta = theta, ga_.p.flags = mode == TF_ROPE_HALF_SPLIT ? TF_ROPE_NEOX : 0), x, positions);
    const tf_tensor *in[2] = {x, positions};
    tf_dtype want[2] = {x->dtype, TF_KEEP_DTYPE};
    tf_op_call c;
    s = tf__op_begin(&c, fn, TF_OP_ROPE, 2, in, want, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    tf__desc_into(&c.op.inputs[1], c.in[1]);
    c.op.params.axis = ax;
    c.op.params.rotary_dims = rot;
    c.op.params.theta = theta;
    c.op.params.flags = mode == TF_ROPE_HALF_SPLIT ? TF_ROPE_NEOX : 0;
    return tf__op_end(&c, TF_OK, x->dtype, x->ndim, x->shape, out);
}

/* ---- scaled dot-product attention ---- */

/* A bool mask as the additive one the op takes: 0 where true, -inf where false. */
static tf_status additive_mask(const tf_tensor *mask, tf_dtype dt, tf_tensor **out) {
    tf_device *dev = tf_tensor_device(mask);
    tf_tensor *zero = NULL, *minus_inf = NULL;
    tf_status s = tf_scalar(dev, dt, 0, &zero);
    if (s == TF_OK) s = tf_scalar(dev, dt, -INFINITY, &minus_inf);
    if (s == TF_OK) s = tf_where(mask, zero, minus_inf, out);
    tf_tensor_release(zero);
    tf_tensor_release(minus_inf);
    return s;
}

tf_status tf_key_padding_mask(const tf_tensor *keep, tf_tensor **out) {
    static const char fn[] = "tf_key_padding_mask";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!keep) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: keep is NULL", fn);
    if (keep->ndim != 2)
        return tf__error(TF_ERR_SHAPE, "%s: keep must be [batch, keys], not %d-d", fn, keep->ndim);
    tf_tensor *zero = NULL, *truth = NULL;
    tf_status s = TF_OK;
    if (keep->dtype == TF_BOOL) {
        truth = tf_tensor_retain((tf_tensor *)keep);
    } else {
        s = tf_scalar(tf_tensor_device(keep), keep->dtype, 0, &zero);
        if (s == TF_OK) s = tf_ne(keep, zero, &truth);
    }
    if (s == TF_OK) s = tf_reshape(truth, 4, (int64_t[]){keep->shape[0], 1, 1, keep->shape[1]}, out);
    tf_tensor_release(zero);
    tf_tensor_release(truth);
    return tf__in(fn, s);
}

/* q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], Hkv dividing Hq. */
static tf_status check_qkv(const char *fn, const tf_tensor *q, const tf_tensor *k, const tf_tensor *v) {
    char a[256], b[256], c[256];
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return tf__error(TF_ERR_SHAPE, "%s: q, k, v must be [B, H, L, D] (got %d-d, %d-d, %d-d)", fn, q->ndim, k->ndim, v->ndim);
    int64_t B = q->shape[0], Hq = q->shape[1], D = q->shape[3], Hkv = k->shape[1], Lk = k->shape[2];
    bool fits = k->shape[0] == B && v->shape[0] == B && k->shape[3] == D && v->shape[1] == Hkv && v->shape[2] == Lk &&
                Hkv > 0 && Hq % Hkv == 0;
    if (!fits)
        return tf__error(TF_ERR_SHAPE, "%s: q %s, k %s, v %s do not fit (B and D must match, kv heads must divide q heads)",
                         fn, tf__shape_str(4, q->shape, a, sizeof a), tf__shape_str(4, k->shape, b, sizeof b),
                         tf__shape_str(4, v->shape, c, sizeof c));
    return TF_OK;
}

tf_status tf_sdpa(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *mask, double scale,
                  bool causal, int64_t q_offset, tf_tensor **out) {
    static const char fn[] = "tf_sdpa";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_sdpa", out, tf_sdpa(q, k, v, mask, scale, causal, q_offset, out),
                 &q, &k, &v, &mask);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!q || !k || !v) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: q, k or v is NULL", fn);
    tf_status s = float_only(fn, TF_OP_SDPA, q);
    if (s != TF_OK) return s;
    s = check_qkv(fn, q, k, v);
    if (s != TF_OK) return s;
    char a[256], b[256];
    int64_t B = q->shape[0], Hq = q->shape[1], Lq = q->shape[2], D = q->shape[3];
    int64_t Lk = k->shape[2], Dv = v->shape[3];
    int64_t sshape[4] = {B, Hq, Lq, Lk}, oshape[4] = {B, Hq, Lq, Dv};
    if (mask && mask->dtype == TF_BOOL) {           /* true: attend (PyTorch's convention) */
        tf_tensor *additive = NULL;
        s = additive_mask(mask, q->dtype, &additive);
        if (s == TF_OK) s = tf_sdpa(q, k, v, additive, scale, causal, q_offset, out);
        tf_tensor_release(additive);
        return tf__in(fn, s);
    }
    if (mask) {
        if (!tf_dtype_is_float(mask->dtype))
            return tf__error(TF_ERR_DTYPE, "%s: the mask must be bool (true: attend) or additive float, not %s", fn,
                             tf_dtype_name(mask->dtype));
        bool ok = mask->ndim <= 4;
        for (int i = 0; ok && i < mask->ndim; i++) {
            int64_t m = mask->shape[i], want = sshape[4 - mask->ndim + i];
            ok = m == 1 || m == want;
        }
        if (!ok)
            return tf__error(TF_ERR_SHAPE, "%s: mask %s does not broadcast to the scores %s", fn,
                             tf__shape_str(mask->ndim, mask->shape, a, sizeof a), tf__shape_str(4, sshape, b, sizeof b));
    }
    TF__GRAD(fn, out, tf_sdpa(q, k, v, mask, scale, causal, q_offset, out),
             (ga_.rule = TF__GRAD_SDPA, ga_.op = TF_OP_SDPA, ga_.p.scale = scale > 0 ? scale : 1.0 / sqrt((double)(D > 0 ? D : 1)),
              ga_.p.flags = causal ? TF_SDPA_CAUSAL : 0,
              ga_.p.q_offset = q_offset < 0 ? Lk - Lq : q_offset > Lk ? Lk : q_offset), q, k, v, mask);
    const tf_tensor *in[4] = {q, k, v, mask};
    tf_dtype want[4] = {q->dtype, q->dtype, q->dtype, q->dtype};
    tf_op_call call;
    s = tf__op_begin(&call, fn, TF_OP_SDPA, mask ? 4 : 3, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < 3; i++) tf__desc_into(&call.op.inputs[i], call.in[i]);
    if (mask) {
        const tf_tensor *mt = call.in[3];
        tf_tensor_desc m = tf__desc(mt);
        for (int i = 3; i >= 0; i--) {           /* right-align, stride 0 on broadcast axes */
            int src = i - (4 - mt->ndim);
            bool real = src >= 0 && mt->shape[src] != 1;
            m.shape[i] = sshape[i];
            m.strides[i] = real ? mt->strides[src] : 0;
        }
        m.ndim = 4;
        call.op.inputs[3] = m;
        call.op.params.flags |= TF_SDPA_MASK;
    }
    call.op.params.scale = scale > 0 ? scale : 1.0 / sqrt((double)(D > 0 ? D : 1));
    if (causal) call.op.params.flags |= TF_SDPA_CAUSAL;
    /* Past Lk every key is visible: clamp, so kernels may add a query's index. */
    call.op.params.q_offset = q_offset < 0 ? Lk - Lq : q_offset > Lk ? Lk : q_offset;
    return tf__op_end(&call, TF_OK, q->dtype, 4, oshape, out);
}

/* ---- attention's gradients (the BACKWARD kernel family) ---- */

/* q, k, v and dO checked and on one device in q's dtype; the forward's
 * parameters as tf_sdpa sets them; the output of `shape`. */
static tf_status sdpa_grad_op(const char *fn, tf_op_kind kind, const tf_tensor *q, const tf_tensor *k,
                              const tf_tensor *v, const tf_tensor *dout, double scale, bool causal, int64_t q_offset,
                              tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!q || !k || !v || !dout) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: q, k, v or grad_out is NULL", fn);
    tf_status s = float_only(fn, kind, q);
    if (s == TF_OK) s = check_qkv(fn, q, k, v);
    if (s != TF_OK) return s;
    const int64_t B = q->shape[0], Hq = q->shape[1], Lq = q->shape[2], D = q->shape[3];
    const int64_t Hkv = k->shape[1], Lk = k->shape[2], Dv = v->shape[3];
    const int64_t oshape[4] = {B, Hq, Lq, Dv};
    char a[256], b[256];
    if (!tf__same_shape(dout->ndim, dout->shape, 4, oshape))
        return tf__error(TF_ERR_SHAPE, "%s: grad_out is %s, the forward's output would be %s", fn,
                         tf__shape_str(dout->ndim, dout->shape, a, sizeof a), tf__shape_str(4, oshape, b, sizeof b));
    const tf_tensor *in[4] = {q, k, v, dout};
    tf_dtype want[4] = {q->dtype, q->dtype, q->dtype, q->dtype};
    tf_op_call call;
    s = tf__op_begin(&call, fn, kind, 4, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < 4; i++) tf__desc_into(&call.op.inputs[i], call.in[i]);
    call.op.params.scale = scale > 0 ? scale : 1.0 / sqrt((double)(D > 0 ? D : 1));
    if (causal) call.op.params.flags |= TF_SDPA_CAUSAL;
    call.op.params.q_offset = q_offset < 0 ? Lk - Lq : q_offset > Lk ? Lk : q_offset;
    const int64_t kvshape[4] = {B, Hkv, Lk, D + Dv};
    return tf__op_end(&call, TF_OK, q->dtype, 4, kind == TF_OP_SDPA_GRAD_Q ? q->shape : kvshape, out);
}

tf_status tf_sdpa_grad_q(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *grad_out,
                         double scale, bool causal, int64_t q_offset, tf_tensor **out) {
    return sdpa_grad_op("tf_sdpa_grad_q", TF_OP_SDPA_GRAD_Q, q, k, v, grad_out, scale, causal, q_offset, out);
}

tf_status tf_sdpa_grad_kv(const tf_tensor *q, const tf_tensor *k, const tf_tensor *v, const tf_tensor *grad_out,
                          double scale, bool causal, int64_t q_offset, tf_tensor **out) {
    return sdpa_grad_op("tf_sdpa_grad_kv", TF_OP_SDPA_GRAD_KV, q, k, v, grad_out, scale, causal, q_offset, out);
}

/* ---- decode-time primitives: composites over matmul ---- */

tf_status tf_attention_scores(const tf_tensor *query, const tf_tensor *keys, double scale, tf_tensor **out) {
    static const char fn[] = "tf_attention_scores";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_attention_scores", out, tf_attention_scores(query, keys, scale, out),
                 &query, &keys);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!query || !keys) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_status s = float_only(fn, TF_OP_ATTENTION_SCORES, query);
    if (s != TF_OK) return s;
    if (query->ndim < 1 || keys->ndim != query->ndim + 1)
        return tf__error(TF_ERR_SHAPE, "%s: query [..., D] and keys [..., L, D] (got %d-d and %d-d)", fn, query->ndim,
                         keys->ndim);
    tf_tensor *col = NULL, *prod = NULL, *flat = NULL, *sc = NULL;
    s = tf_unsqueeze(query, -1, &col);                        /* [..., D, 1] */
    if (s == TF_OK) s = tf_matmul(keys, col, &prod);          /* [..., L, 1] */
    if (s == TF_OK) s = tf_squeeze(prod, -1, &flat);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(flat), tf_tensor_dtype(flat), scale, &sc);
    if (s == TF_OK) s = tf_mul(flat, sc, out);
    tf_tensor_release(col);
    tf_tensor_release(prod);
    tf_tensor_release(flat);
    tf_tensor_release(sc);
    return tf__in(fn, s);
}

tf_status tf_weighted_sum_rows(const tf_tensor *weights, const tf_tensor *values, tf_tensor **out) {
    static const char fn[] = "tf_weighted_sum_rows";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_weighted_sum_rows", out, tf_weighted_sum_rows(weights, values, out),
                 &weights, &values);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!weights || !values) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_status s = float_only(fn, TF_OP_WEIGHTED_SUM_ROWS, weights);
    if (s != TF_OK) return s;
    if (weights->ndim < 1 || values->ndim != weights->ndim + 1)
        return tf__error(TF_ERR_SHAPE, "%s: weights [..., L] and values [..., L, D] (got %d-d and %d-d)", fn,
                         weights->ndim, values->ndim);
    tf_tensor *row = NULL, *prod = NULL;
    s = tf_unsqueeze(weights, -2, &row);                      /* [..., 1, L] */
    if (s == TF_OK) s = tf_matmul(row, values, &prod);        /* [..., 1, D] */
    if (s == TF_OK) s = tf_squeeze(prod, -2, out);
    tf_tensor_release(row);
    tf_tensor_release(prod);
    return tf__in(fn, s);
}

/* ---- norms and masked means ---- */

tf_status tf_norm(const tf_tensor *x, double p, int axis, bool keepdim, tf_tensor **out) {
    static const char fn[] = "tf_norm";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_norm", out, tf_norm(x, p, axis, keepdim, out), &x);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x is NULL", fn);
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: needs a float dtype, not %s", fn, tf_dtype_name(x->dtype));
    if (!(p > 0))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: p must be positive (1, 2, INFINITY, ...), not %g", fn, p);
    tf_tensor *a = NULL, *t = NULL, *r = NULL, *e = NULL;
    tf_status s = TF_OK;
    if (p == 2) {                                        /* sqrt(sum x^2) */
        s = tf_mul(x, x, &t);
        if (s == TF_OK) s = tf_sum(t, axis, keepdim, &r);
        if (s == TF_OK) s = tf_sqrt(r, out);
    } else if (isinf(p)) {                               /* max |x| */
        s = tf_abs(x, &a);
        if (s == TF_OK) s = tf_max(a, axis, keepdim, out);
    } else if (p == 1) {                                 /* sum |x| */
        s = tf_abs(x, &a);
        if (s == TF_OK) s = tf_sum(a, axis, keepdim, out);
    } else {                                             /* (sum |x|^p)^(1/p) */
        s = tf_abs(x, &a);
        if (s == TF_OK) s = tf_scalar(tf_tensor_device(x), x->dtype, p, &e);
        if (s == TF_OK) s = tf_pow(a, e, &t);
        if (s == TF_OK) s = tf_sum(t, axis, keepdim, &r);
        tf_tensor_release(e);
        e = NULL;
        if (s == TF_OK) s = tf_scalar(tf_tensor_device(x), x->dtype, 1 / p, &e);
        if (s == TF_OK) s = tf_pow(r, e, out);
    }
    tf_tensor *temps[] = {a, t, r, e};
    for (int i = 0; i < 4; i++) tf_tensor_release(temps[i]);
    return tf__in(fn, s);
}

tf_status tf_normalize(const tf_tensor *x, double p, int axis, double eps, tf_tensor **out) {
    static const char fn[] = "tf_normalize";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_normalize", out, tf_normalize(x, p, axis, eps, out), &x);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x is NULL", fn);
    tf_tensor *n = NULL, *floor = NULL;
    tf_status s = tf_norm(x, p, axis, true, &n);
    if (s == TF_OK) s = tf_clamp(n, eps, NAN, &floor);   /* F.normalize: x / max(||x||, eps) */
    if (s == TF_OK) s = tf_div(x, floor, out);
    tf_tensor_release(n);
    tf_tensor_release(floor);
    return tf__in(fn, s);
}

/* mask [d0, ..., dk-1] over x's first k axes, as x's shape with 1s after. */
static tf_status mask_over(const char *fn, const tf_tensor *x, const tf_tensor *mask, tf_tensor **out) {
    if (mask->ndim > x->ndim)
        return tf__error(TF_ERR_SHAPE, "%s: the mask has %d axes, x only %d", fn, mask->ndim, x->ndim);
    int64_t shape[TF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        shape[i] = i < mask->ndim ? mask->shape[i] : 1;
        if (i < mask->ndim && shape[i] != x->shape[i] && shape[i] != 1) {
            char a[256], b[256];
            return tf__error(TF_ERR_SHAPE, "%s: mask %s does not cover x %s's leading axes", fn,
                             tf__shape_str(mask->ndim, mask->shape, a, sizeof a), tf__shape_str(x->ndim, x->shape, b, sizeof b));
        }
    }
    tf_tensor *m = NULL;
    tf_status s = tf_cast(mask, x->dtype, &m);          /* bool or 0/1 of any dtype: weights */
    if (s == TF_OK) s = tf_reshape(m, x->ndim, shape, out);
    tf_tensor_release(m);
    return s;
}

tf_status tf_masked_mean(const tf_tensor *x, const tf_tensor *mask, int axis, bool keepdim, tf_tensor **out) {
    static const char fn[] = "tf_masked_mean";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_masked_mean", out, tf_masked_mean(x, mask, axis, keepdim, out), &x);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !mask) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or mask is NULL", fn);
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: needs a float x, not %s", fn, tf_dtype_name(x->dtype));
    tf_tensor *m = NULL, *xm = NULL, *num = NULL, *den = NULL, *den_floor = NULL;
    tf_status s = mask_over(fn, x, mask, &m);
    if (s == TF_OK) s = tf_mul(x, m, &xm);
    if (s == TF_OK) s = tf_sum(xm, axis, keepdim, &num);
    if (s == TF_OK) s = tf_sum(m, axis, keepdim, &den);
    const double tiny = x->dtype == TF_F16 ? 0x1p-14 : 1e-9;      /* f16's smallest normal: 1e-9 is 0 there */
    if (s == TF_OK) s = tf_clamp(den, tiny, NAN, &den_floor);     /* all masked: 0, as sentence-transformers */
    if (s == TF_OK) s = tf_div(num, den_floor, out);
    tf_tensor *temps[] = {m, xm, num, den, den_floor};
    for (int i = 0; i < 5; i++) tf_tensor_release(temps[i]);
    return tf__in(fn, s);
}
