/* Vision and training: conv2d and pooling (kernels), batch_norm and
 * cross_entropy (composites), and the in-place Adam/AdamW step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"

static tf_status need_float(const char *fn, const tf_tensor *x) {
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: needs a float tensor, not %s", fn, tf_dtype_name(x->dtype));
    return TF_OK;
}

/* Extent of one output axis of a sliding window; < 1 means too small (a
 * window whose reach overflows is larger than any input: 0). Pads are
 * checked to be below INT64_MAX / 4 by the callers. */
static int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    int64_t reach, span;
    if (tf__mul_overflows(dil, k - 1, &reach)) return 0;
    if (tf__add_overflows(in, 2 * pad, &span) || tf__add_overflows(span, -reach - 1, &span)) return 0;
    return span < 0 ? 0 : span / stride + 1;   /* floor division: C's truncation would give 1 for span -1 */
}

/* ---- conv2d ---- */

/* A window op's record for its gradient (the defaults already filled in). */
static int grad_window(tf__grad_args *a, tf__grad_rule rule, tf_op_kind op, const int64_t *kernel,
                       const int64_t *stride, const int64_t *padding, const int64_t *dilation, int64_t groups,
                       bool count_pad) {
    a->rule = rule;
    a->op = op;
    for (int i = 0; i < 2; i++) {
        a->p.kernel[i] = kernel ? kernel[i] : 0;
        a->p.stride[i] = stride[i];
        a->p.padding[i] = padding[i];
        a->p.dilation[i] = dilation[i];
    }
    a->p.groups = groups;
    a->p.flags = count_pad ? TF_POOL_COUNT_PAD : 0;
    return 0;
}

static tf_status check_pair(const char *fn, const char *what, const int64_t *v, int64_t min) {
    if (!strcmp(what, "padding") && (v[0] > INT64_MAX / 4 || v[1] > INT64_MAX / 4))   /* 2 * pad must fit */
        return tf__error(TF_ERR_SIZE, "%s: %s {%lld, %lld} is too large", fn, what, (long long)v[0], (long long)v[1]);
    if (v[0] < min || v[1] < min)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s {%lld, %lld} must be >= %lld", fn, what, (long long)v[0],
                         (long long)v[1], (long long)min);
    return TF_OK;
}

tf_status tf_conv2d(const tf_tensor *x, const tf_tensor *weight, const tf_tensor *bias, const int64_t stride_in[2],
                    const int64_t padding_in[2], const int64_t dilation_in[2], int64_t groups, tf_tensor **out) {
    static const char fn[] = "tf_conv2d";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_conv2d", out,
                 tf_conv2d(x, weight, bias, stride_in, padding_in, dilation_in, groups, out), &x, &weight, &bias);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !weight) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or weight is NULL", fn);
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    const int64_t *stride = stride_in ? stride_in : one, *padding = padding_in ? padding_in : zero,
                  *dilation = dilation_in ? dilation_in : one;
    TF__GRAD(fn, out, tf_conv2d(x, weight, bias, stride, padding, dilation, groups, out),
             grad_window(&ga_, TF__GRAD_CONV, TF_OP_CONV2D, NULL, stride, padding, dilation, groups, false),
             x, weight, bias);
    tf_status s = need_float(fn, x);
    if (s == TF_OK) s = check_pair(fn, "stride", stride, 1);
    if (s == TF_OK) s = check_pair(fn, "padding", padding, 0);
    if (s == TF_OK) s = check_pair(fn, "dilation", dilation, 1);
    if (s != TF_OK) return s;
    char a[256], b[256];
    if (x->ndim != 4 || weight->ndim != 4)
        return tf__error(TF_ERR_SHAPE, "%s: x must be [N, C, H, W] and weight [O, C/groups, kh, kw] (got %d-d and %d-d)",
                         fn, x->ndim, weight->ndim);
    int64_t N = x->shape[0], C = x->shape[1], O = weight->shape[0];
    if (groups < 1 || C % groups || O % groups || weight->shape[1] * groups != C)
        return tf__error(TF_ERR_SHAPE, "%s: x %s, weight %s and groups %lld do not fit (C and O must divide by groups, "
                         "weight's axis 1 must be C/groups)", fn, tf__shape_str(4, x->shape, a, sizeof a),
                         tf__shape_str(4, weight->shape, b, sizeof b), (long long)groups);
    if (bias && (bias->ndim != 1 || bias->shape[0] != O))
        return tf__error(TF_ERR_SHAPE, "%s: bias must be [%lld]", fn, (long long)O);
    int64_t Ho = window_out(x->shape[2], weight->shape[2], stride[0], padding[0], dilation[0]);
    int64_t Wo = window_out(x->shape[3], weight->shape[3], stride[1], padding[1], dilation[1]);
    if (Ho < 1 || Wo < 1)
        return tf__error(TF_ERR_SHAPE, "%s: input %s is too small for kernel %s with this padding and dilation", fn,
                         tf__shape_str(4, x->shape, a, sizeof a), tf__shape_str(4, weight->shape, b, sizeof b));
    const tf_tensor *in[3] = {x, weight, bias};
    int n = bias ? 3 : 2;
    tf_dtype want[3] = {x->dtype, x->dtype, x->dtype};
    tf_op_call c;
    s = tf__op_begin(&c, fn, TF_OP_CONV2D, n, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < n; i++) tf__desc_into(&c.op.inputs[i], c.in[i]);
    for (int i = 0; i < 2; i++) {
        c.op.params.stride[i] = stride[i];
        c.op.params.padding[i] = padding[i];
        c.op.params.dilation[i] = dilation[i];
    }
    c.op.params.groups = groups;
    c.op.params.flags = bias ? TF_CONV_BIAS : 0;
    int64_t oshape[4] = {N, O, Ho, Wo};
    return tf__op_end(&c, TF_OK, x->dtype, 4, oshape, out);
}

/* ---- pooling ---- */

static tf_status pool(const char *fn, tf_op_kind kind, const tf_tensor *x, const int64_t kernel[2],
                      const int64_t stride_in[2], const int64_t padding_in[2], const int64_t dilation_in[2],
                      bool count_pad, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !kernel) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or kernel is NULL", fn);
    static const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
    const int64_t *stride = stride_in ? stride_in : kernel, *padding = padding_in ? padding_in : zero,
                  *dilation = dilation_in ? dilation_in : one;
    TF__GRAD(fn, out, pool(fn, kind, x, kernel, stride, padding, dilation, count_pad, out),
             grad_window(&ga_, TF__GRAD_POOL, kind, kernel, stride, padding, dilation, 1, count_pad), x);
    tf_status s = need_float(fn, x);
    if (s == TF_OK) s = check_pair(fn, "kernel", kernel, 1);
    if (s == TF_OK) s = check_pair(fn, "stride", stride, 1);
    if (s == TF_OK) s = check_pair(fn, "padding", padding, 0);
    if (s == TF_OK) s = check_pair(fn, "dilation", dilation, 1);
    if (s != TF_OK) return s;
    if (x->ndim != 4) return tf__error(TF_ERR_SHAPE, "%s: x must be [N, C, H, W], got %d-d", fn, x->ndim);
    if (padding[0] * 2 > kernel[0] || padding[1] * 2 > kernel[1])
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: padding {%lld, %lld} must be at most half the kernel", fn,
                         (long long)padding[0], (long long)padding[1]);
    int64_t Ho = window_out(x->shape[2], kernel[0], stride[0], padding[0], dilation[0]);
    int64_t Wo = window_out(x->shape[3], kernel[1], stride[1], padding[1], dilation[1]);
    if (Ho < 1 || Wo < 1) {
        char a[256];
        return tf__error(TF_ERR_SHAPE, "%s: input %s is too small for kernel {%lld, %lld}", fn,
                         tf__shape_str(4, x->shape, a, sizeof a), (long long)kernel[0], (long long)kernel[1]);
    }
    tf_op_call c;
    s = tf__op_begin(&c, fn, kind, 1, &x, NULL, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    for (int i = 0; i < 2; i++) {
        c.op.params.kernel[i] = kernel[i];
        c.op.params.stride[i] = stride[i];
        c.op.params.padding[i] = padding[i];
        c.op.params.dilation[i] = dilation[i];
    }
    c.op.params.flags = count_pad ? TF_POOL_COUNT_PAD : 0;
    int64_t oshape[4] = {x->shape[0], x->shape[1], Ho, Wo};
    return tf__op_end(&c, TF_OK, x->dtype, 4, oshape, out);
}

tf_status tf_maxpool2d(const tf_tensor *x, const int64_t kernel[2], const int64_t stride[2], const int64_t padding[2],
                       const int64_t dilation[2], tf_tensor **out) {
    return pool("tf_maxpool2d", TF_OP_MAXPOOL2D, x, kernel, stride, padding, dilation, false, out);
}

tf_status tf_avgpool2d(const tf_tensor *x, const int64_t kernel[2], const int64_t stride[2], const int64_t padding[2],
                       bool count_include_pad, tf_tensor **out) {
    return pool("tf_avgpool2d", TF_OP_AVGPOOL2D, x, kernel, stride, padding, NULL, count_include_pad, out);
}

/* ---- the gradients of conv2d and max pooling, as ops ---- */

/* The forward's window parameters, checked as the forward checks them. */
static tf_status check_window_params(const char *fn, const int64_t *kernel, const int64_t *stride,
                                     const int64_t *padding, const int64_t *dilation) {
    tf_status s = kernel ? check_pair(fn, "kernel", kernel, 1) : TF_OK;
    if (s == TF_OK) s = check_pair(fn, "stride", stride, 1);
    if (s == TF_OK) s = check_pair(fn, "padding", padding, 0);
    if (s == TF_OK) s = check_pair(fn, "dilation", dilation, 1);
    return s;
}

/* dy must have the shape the forward gave: [N, O, Ho, Wo] for an input of
 * extent {H, W} under these window parameters. */
static tf_status check_grad_out(const char *fn, const tf_tensor *dy, int64_t N, int64_t O, int64_t H, int64_t W,
                                const int64_t *kernel, const int64_t *stride, const int64_t *padding,
                                const int64_t *dilation) {
    const int64_t want[4] = {N, O, window_out(H, kernel[0], stride[0], padding[0], dilation[0]),
                             window_out(W, kernel[1], stride[1], padding[1], dilation[1])};
    char a[256], b[256];
    if (want[2] < 1 || want[3] < 1)
        return tf__error(TF_ERR_SHAPE, "%s: an input of {%lld, %lld} is too small for the window", fn, (long long)H,
                         (long long)W);
    if (!tf__same_shape(dy->ndim, dy->shape, 4, want))
        return tf__error(TF_ERR_SHAPE, "%s: grad_out is %s, the forward's output would be %s", fn,
                         tf__shape_str(dy->ndim, dy->shape, a, sizeof a), tf__shape_str(4, want, b, sizeof b));
    return TF_OK;
}

static void window_params_into(tf_op_params *p, const int64_t *kernel, const int64_t *stride, const int64_t *padding,
                               const int64_t *dilation, int64_t groups) {
    for (int i = 0; i < 2; i++) {
        p->kernel[i] = kernel ? kernel[i] : 0;
        p->stride[i] = stride[i];
        p->padding[i] = padding[i];
        p->dilation[i] = dilation[i];
    }
    p->groups = groups;
}

/* The two inputs on one device in a's dtype, the op's parameters, the
 * output of `shape`. */
static tf_status window_grad_op(const char *fn, tf_op_kind kind, const tf_tensor *a, const tf_tensor *b,
                                const int64_t *kernel, const int64_t *stride, const int64_t *padding,
                                const int64_t *dilation, int64_t groups, const int64_t shape[4], tf_tensor **out) {
    const tf_tensor *in[2] = {a, b};
    tf_dtype want[2] = {a->dtype, a->dtype};
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 2, in, want, NULL);
    if (s != TF_OK) return s;
    for (int i = 0; i < 2; i++) tf__desc_into(&c.op.inputs[i], c.in[i]);
    window_params_into(&c.op.params, kernel, stride, padding, dilation, groups);
    return tf__op_end(&c, TF_OK, a->dtype, 4, shape, out);
}

static const int64_t *or_default(const int64_t *v, const int64_t *dflt) { return v ? v : dflt; }
static const int64_t ONES[2] = {1, 1}, ZEROS[2] = {0, 0};

tf_status tf_conv2d_grad_input(const tf_tensor *grad_out, const tf_tensor *weight, const int64_t input_shape[4],
                               const int64_t stride_in[2], const int64_t padding_in[2], const int64_t dilation_in[2],
                               int64_t groups, tf_tensor **out) {
    static const char fn[] = "tf_conv2d_grad_input";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!grad_out || !weight || !input_shape)
        return tf__error(TF_ERR_NULL_ARGUMENT, "%s: grad_out, weight or input_shape is NULL", fn);
    const int64_t *stride = or_default(stride_in, ONES), *padding = or_default(padding_in, ZEROS),
                  *dilation = or_default(dilation_in, ONES);
    tf_status s = need_float(fn, grad_out);
    if (s == TF_OK) s = check_window_params(fn, NULL, stride, padding, dilation);
    if (s != TF_OK) return s;
    char a[256];
    if (weight->ndim != 4)
        return tf__error(TF_ERR_SHAPE, "%s: weight must be [O, C/groups, kh, kw], got %d-d", fn, weight->ndim);
    for (int i = 0; i < 4; i++)
        if (input_shape[i] < 0)
            return tf__error(TF_ERR_SHAPE, "%s: input_shape %s has a negative extent", fn,
                             tf__shape_str(4, input_shape, a, sizeof a));
    const int64_t O = weight->shape[0], C = input_shape[1];
    if (groups < 1 || C % groups || O % groups || weight->shape[1] * groups != C)
        return tf__error(TF_ERR_SHAPE, "%s: input_shape %s, weight and groups %lld do not fit", fn,
                         tf__shape_str(4, input_shape, a, sizeof a), (long long)groups);
    const int64_t kernel[2] = {weight->shape[2], weight->shape[3]};
    s = check_grad_out(fn, grad_out, input_shape[0], O, input_shape[2], input_shape[3], kernel, stride, padding,
                       dilation);
    if (s != TF_OK) return s;
    return window_grad_op(fn, TF_OP_CONV2D_GRAD_INPUT, grad_out, weight, NULL, stride, padding, dilation, groups,
                          input_shape, out);
}

tf_status tf_conv2d_grad_weight(const tf_tensor *x, const tf_tensor *grad_out, const int64_t kernel[2],
                                const int64_t stride_in[2], const int64_t padding_in[2], const int64_t dilation_in[2],
                                int64_t groups, tf_tensor **out) {
    static const char fn[] = "tf_conv2d_grad_weight";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !grad_out || !kernel) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x, grad_out or kernel is NULL", fn);
    const int64_t *stride = or_default(stride_in, ONES), *padding = or_default(padding_in, ZEROS),
                  *dilation = or_default(dilation_in, ONES);
    tf_status s = need_float(fn, x);
    if (s == TF_OK) s = check_window_params(fn, kernel, stride, padding, dilation);
    if (s != TF_OK) return s;
    if (x->ndim != 4 || grad_out->ndim != 4)
        return tf__error(TF_ERR_SHAPE, "%s: x and grad_out must be [N, C, H, W] and [N, O, Ho, Wo] (got %d-d and %d-d)",
                         fn, x->ndim, grad_out->ndim);
    const int64_t C = x->shape[1], O = grad_out->shape[1];
    if (groups < 1 || C % groups || O % groups)
        return tf__error(TF_ERR_SHAPE, "%s: C %lld and O %lld must divide by groups %lld", fn, (long long)C,
                         (long long)O, (long long)groups);
    s = check_grad_out(fn, grad_out, x->shape[0], O, x->shape[2], x->shape[3], kernel, stride, padding, dilation);
    if (s != TF_OK) return s;
    const int64_t wshape[4] = {O, C / groups, kernel[0], kernel[1]};
    return window_grad_op(fn, TF_OP_CONV2D_GRAD_WEIGHT, x, grad_out, kernel, stride, padding, dilation, groups,
                          wshape, out);
}

tf_status tf_maxpool2d_grad(const tf_tensor *x, const tf_tensor *grad_out, const int64_t kernel[2],
                            const int64_t stride_in[2], const int64_t padding_in[2], const int64_t dilation_in[2],
                            tf_tensor **out) {
    static const char fn[] = "tf_maxpool2d_grad";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !grad_out || !kernel) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x, grad_out or kernel is NULL", fn);
    const int64_t *stride = or_default(stride_in, kernel), *padding = or_default(padding_in, ZEROS),
                  *dilation = or_default(dilation_in, ONES);
    tf_status s = need_float(fn, x);
    if (s == TF_OK) s = check_window_params(fn, kernel, stride, padding, dilation);
    if (s != TF_OK) return s;
    if (x->ndim != 4) return tf__error(TF_ERR_SHAPE, "%s: x must be [N, C, H, W], got %d-d", fn, x->ndim);
    if (padding[0] * 2 > kernel[0] || padding[1] * 2 > kernel[1])
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: padding {%lld, %lld} must be at most half the kernel", fn,
                         (long long)padding[0], (long long)padding[1]);
    s = check_grad_out(fn, grad_out, x->shape[0], x->shape[1], x->shape[2], x->shape[3], kernel, stride, padding,
                       dilation);
    if (s != TF_OK) return s;
    return window_grad_op(fn, TF_OP_MAXPOOL2D_GRAD, x, grad_out, kernel, stride, padding, dilation, 1, x->shape, out);
}

/* ---- batch_norm (composite) ---- */

/* A [C] tensor viewed as [1, C, 1, ...] to broadcast over x of ndim. */
static tf_status channel_view(const tf_tensor *v, int ndim, tf_tensor **out) {
    int64_t shape[TF_MAX_DIMS];
    for (int i = 0; i < ndim; i++) shape[i] = i == 1 ? v->shape[0] : 1;
    return tf_reshape(v, ndim, shape, out);
}

/* Per-channel mean and variance (with the correction given) of x [N, C, ...]. */
static tf_status channel_stats(const tf_tensor *x, int64_t correction, tf_tensor **mean, tf_tensor **var) {
    int perm[TF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i == 0 ? 1 : i == 1 ? 0 : i;
    int64_t flat[2] = {x->shape[1], -1};
    tf_tensor *t = NULL, *rows = NULL;
    tf_status s = tf_permute(x, perm, &t);
    if (s == TF_OK) s = tf_reshape(t, 2, flat, &rows);
    if (s == TF_OK && mean) s = tf_mean(rows, 1, false, mean);
    if (s == TF_OK && var) s = tf_var(rows, 1, correction, false, var);
    tf_tensor_release(t);
    tf_tensor_release(rows);
    return s;
}

/* (1 - momentum) * r + momentum * batch, as a new tensor: the running
 * statistics are written only once everything that can fail has run. */
static tf_status running_update(const tf_tensor *r, const tf_tensor *batch, double momentum, tf_tensor **out) {
    tf_tensor *a = NULL, *b = NULL, *ka = NULL, *kb = NULL;
    tf_status s = tf_scalar(tf_tensor_device(r), r->dtype, 1 - momentum, &ka);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(r), r->dtype, momentum, &kb);
    if (s == TF_OK) s = tf_mul(r, ka, &a);
    if (s == TF_OK) s = tf_mul(batch, kb, &b);
    if (s == TF_OK) s = tf_add(a, b, out);
    tf_tensor *all[] = {a, b, ka, kb};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    return s;
}

static tf_status check_channel_vector(const char *fn, const char *what, const tf_tensor *v, int64_t c, tf_device *dev) {
    if (!v) return TF_OK;
    if (v->ndim != 1 || v->shape[0] != c) return tf__error(TF_ERR_SHAPE, "%s: %s must be [%lld]", fn, what, (long long)c);
    if (dev && v->storage->dev != dev)
        return tf__error(TF_ERR_DEVICE_MISMATCH, "%s: %s is updated in place and must be on %s like x, not on %s", fn,
                         what, dev->name, v->storage->dev->name);
    return TF_OK;
}

tf_status tf_batch_norm(const tf_tensor *x, tf_tensor *running_mean, tf_tensor *running_var, const tf_tensor *weight,
                        const tf_tensor *bias, bool training, double momentum, double eps, tf_tensor **out) {
    static const char fn[] = "tf_batch_norm";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_batch_norm", out,
                 tf_batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, out), &x, &weight,
                 &bias);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x is NULL", fn);
    tf_status s = need_float(fn, x);
    if (s != TF_OK) return s;
    if (x->ndim < 2) return tf__error(TF_ERR_SHAPE, "%s: x must be [N, C, ...], got %d-d", fn, x->ndim);
    if (!training && (!running_mean || !running_var))
        return tf__error(TF_ERR_NULL_ARGUMENT, "%s: inference needs running_mean and running_var", fn);
    if (!(eps >= 0) || !(momentum >= 0 && momentum <= 1))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: eps %g must be >= 0 and momentum %g in [0, 1]", fn, eps, momentum);
    int64_t C = x->shape[1];
    if (training && C > 0 && tf_tensor_numel(x) == 0)
        return tf__error(TF_ERR_SHAPE, "%s: training needs at least one element per channel, x is %s", fn,
                         tf__shape_str(x->ndim, x->shape, (char[256]){0}, 256));
    tf_device *dev = training ? x->storage->dev : NULL;
    s = check_channel_vector(fn, "running_mean", running_mean, C, dev);
    if (s == TF_OK) s = check_channel_vector(fn, "running_var", running_var, C, dev);
    /* The running statistics are written in place: neither may overlap
     * itself (a broadcast view), the other, or x. */
    const tf_tensor *stats[2] = {running_mean, running_var};
    static const char *const stat_names[2] = {"running_mean", "running_var"};
    for (int i = 0; training && s == TF_OK && i < 2; i++) {
        if (!stats[i]) continue;
        if (tf__overlaps_itself(stats[i]))
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s overlaps itself (a broadcast or overlapping view)", fn,
                          stat_names[i]);
        else if (tf__overlap(stats[i], x))
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s overlaps x", fn, stat_names[i]);
        else if (i == 1 && stats[0] && tf__overlap(stats[1], stats[0]))
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: running_var overlaps running_mean", fn);
    }
    if (s == TF_OK) s = check_channel_vector(fn, "weight", weight, C, NULL);
    if (s == TF_OK) s = check_channel_vector(fn, "bias", bias, C, NULL);
    if (s != TF_OK) return s;
    tf_tensor *mean = NULL, *var = NULL, *var_u = NULL, *mv = NULL, *vv = NULL, *centered = NULL, *veps = NULL,
              *epsk = NULL, *inv = NULL, *y = NULL, *wv = NULL, *bv = NULL, *yw = NULL, *new_mean = NULL,
              *new_var = NULL, *result = NULL;
    if (training) {
        s = channel_stats(x, 0, &mean, &var);
        tf__grad_pause();                /* the running statistics are not differentiated (PyTorch's no_grad) */
        if (s == TF_OK && running_mean) s = running_update(running_mean, mean, momentum, &new_mean);
        if (s == TF_OK && running_var) s = channel_stats(x, 1, NULL, &var_u);
        if (s == TF_OK && running_var) s = running_update(running_var, var_u, momentum, &new_var);
        tf__grad_resume();
    } else {
        mean = tf_tensor_retain(running_mean);
        var = tf_tensor_retain(running_var);
    }
    if (s == TF_OK) s = channel_view(mean, x->ndim, &mv);
    if (s == TF_OK) s = channel_view(var, x->ndim, &vv);
    if (s == TF_OK) s = tf_sub(x, mv, &centered);
    if (s == TF_OK) s = tf_scalar(x->storage->dev, x->dtype, eps, &epsk);
    if (s == TF_OK) s = tf_add(vv, epsk, &veps);
    if (s == TF_OK) s = tf_rsqrt(veps, &inv);
    if (s == TF_OK) s = tf_mul(centered, inv, &y);
    if (s == TF_OK && weight) s = channel_view(weight, x->ndim, &wv);
    if (s == TF_OK && weight) s = tf_mul(y, wv, &yw);
    else if (s == TF_OK) yw = tf_tensor_retain(y);
    if (s == TF_OK && bias) s = channel_view(bias, x->ndim, &bv);
    if (s == TF_OK && bias) s = tf_add(yw, bv, &result);
    else if (s == TF_OK) result = tf_tensor_retain(yw);
    /* Last, the in-place part: same-device copies into the running statistics. */
    if (s == TF_OK && new_mean) s = tf__copy_into(fn, new_mean, running_mean);
    if (s == TF_OK && new_var) s = tf__copy_into(fn, new_var, running_var);
    if (s == TF_OK) *out = tf_tensor_retain(result);
    tf_tensor *all[] = {mean, var, var_u, mv, vv, centered, veps, epsk, inv, y, wv, bv, yw, new_mean, new_var, result};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    return tf__in(fn, s);
}

/* ---- cross_entropy (composite) ---- */

tf_status tf_cross_entropy(const tf_tensor *logits, const tf_tensor *target, int64_t ignore_index,
                           tf_reduction reduction, tf_tensor **out) {
    static const char fn[] = "tf_cross_entropy";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_cross_entropy", out,
                 tf_cross_entropy(logits, target, ignore_index, reduction, out), &logits);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!logits || !target) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: logits or target is NULL", fn);
    tf_status s = need_float(fn, logits);
    if (s != TF_OK) return s;
    if (target->dtype != TF_I32 && target->dtype != TF_I64)
        return tf__error(TF_ERR_DTYPE, "%s: targets are class indices (i32/i64), not %s", fn, tf_dtype_name(target->dtype));
    if (reduction < TF_REDUCTION_MEAN || reduction > TF_REDUCTION_NONE)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: unknown reduction %d", fn, (int)reduction);
    char a[256], b[256];
    bool fits = logits->ndim >= 2 && target->ndim == logits->ndim - 1;
    for (int i = 0, j = 0; fits && i < logits->ndim; i++)
        if (i != 1) fits = target->shape[j++] == logits->shape[i];
    if (!fits)
        return tf__error(TF_ERR_SHAPE, "%s: logits %s and target %s do not fit (target is logits without axis 1)", fn,
                         tf__shape_str(logits->ndim, logits->shape, a, sizeof a),
                         tf__shape_str(target->ndim, target->shape, b, sizeof b));
    int64_t C = logits->shape[1], M = tf_tensor_numel(target), rows_shape[2] = {M, C}, col_shape[2] = {M, 1};
    tf_tensor *moved = NULL, *rows = NULL, *t = NULL, *tflat = NULL, *ign = NULL, *valid = NULL, *zero = NULL,
              *safe = NULL, *col = NULL, *lsm = NULL, *picked = NULL, *flat = NULL, *neg = NULL, *zf = NULL,
              *loss = NULL, *total = NULL, *count = NULL, *countf = NULL;
    /* move classes last: [N, d..., C] -> [M, C] */
    int cperm[TF_MAX_DIMS];
    cperm[0] = 0;
    for (int i = 2; i < logits->ndim; i++) cperm[i - 1] = i;
    cperm[logits->ndim - 1] = 1;
    s = tf_permute(logits, cperm, &moved);
    if (s == TF_OK) s = tf_reshape(moved, 2, rows_shape, &rows);
    if (s == TF_OK) s = tf_tensor_to(target, tf_tensor_device(rows), &t);
    if (s == TF_OK) s = tf_reshape(t, 1, &M, &tflat);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(rows), TF_I64, (double)ignore_index, &ign);
    if (s == TF_OK) s = tf_ne(tflat, ign, &valid);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(rows), TF_I64, 0, &zero);
    if (s == TF_OK) s = tf_where(valid, tflat, zero, &safe);       /* ignored targets read class 0 */
    if (s == TF_OK) s = tf_reshape(safe, 2, col_shape, &col);
    if (s == TF_OK) s = tf_log_softmax(rows, 1, &lsm);
    if (s == TF_OK) s = tf_gather(lsm, 1, col, &picked);          /* checks 0 <= class < C */
    if (s == TF_OK) s = tf_reshape(picked, 1, &M, &flat);
    if (s == TF_OK) s = tf_neg(flat, &neg);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(rows), logits->dtype, 0, &zf);
    if (s == TF_OK) s = tf_where(valid, neg, zf, &loss);
    if (s == TF_OK && reduction == TF_REDUCTION_NONE) s = tf_reshape(loss, target->ndim, target->shape, out);
    if (s == TF_OK && reduction == TF_REDUCTION_SUM) s = tf_sum(loss, TF_ALL_AXES, false, out);
    if (s == TF_OK && reduction == TF_REDUCTION_MEAN) {
        s = tf_sum(loss, TF_ALL_AXES, false, &total);
        if (s == TF_OK) s = tf_sum(valid, TF_ALL_AXES, false, &count);
        if (s == TF_OK) s = tf_cast(count, logits->dtype, &countf);
        if (s == TF_OK) s = tf_div(total, countf, out);           /* all ignored: 0/0 = NaN */
    }
    if (s == TF_ERR_INDEX) tf__error(s, "%s: a target is outside [0, %lld) and is not ignore_index %lld", fn,
                                     (long long)C, (long long)ignore_index);
    tf_tensor *all[] = {moved, rows, t, tflat, ign, valid, zero, safe, col, lsm, picked, flat, neg, zf, loss, total,
                        count, countf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    return tf__in(fn, s);
}

/* ---- Adam / AdamW, in place ---- */

tf_status tf_adam_step(tf_tensor *param, const tf_tensor *grad, tf_tensor *m, tf_tensor *v, double lr, double beta1,
                       double beta2, double eps, double weight_decay, int64_t step, bool decoupled) {
    static const char fn[] = "tf_adam_step";
    if (!param || !grad || !m || !v) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: param, grad, m or v is NULL", fn);
    tf_status s = need_float(fn, param);
    if (s != TF_OK) return s;
    if (!(lr >= 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps >= 0) || !(weight_decay >= 0) ||
        step < 1)
        return tf__error(TF_ERR_INVALID_ARGUMENT,
                         "%s: needs lr >= 0, betas in [0, 1), eps >= 0, weight_decay >= 0, step >= 1 "
                         "(got %g, %g, %g, %g, %g, %lld)", fn, lr, beta1, beta2, eps, weight_decay, (long long)step);
    const tf_tensor *all[4] = {param, grad, m, v};
    static const char *const names[4] = {"param", "grad", "m", "v"};
    for (int i = 1; i < 4; i++) {
        if (all[i]->ndim != param->ndim || memcmp(all[i]->shape, param->shape, sizeof(int64_t) * (size_t)param->ndim)) {
            char a[256], b[256];
            return tf__error(TF_ERR_SHAPE, "%s: %s %s must have param's shape %s", fn, names[i],
                             tf__shape_str(all[i]->ndim, all[i]->shape, a, sizeof a),
                             tf__shape_str(param->ndim, param->shape, b, sizeof b));
        }
        if (all[i]->dtype != param->dtype)
            return tf__error(TF_ERR_DTYPE, "%s: %s is %s, param is %s", fn, names[i], tf_dtype_name(all[i]->dtype),
                             tf_dtype_name(param->dtype));
        if (i != 1 && all[i]->storage->dev != param->storage->dev)
            return tf__error(TF_ERR_DEVICE_MISMATCH, "%s: %s is updated in place and must be on %s like param", fn,
                             names[i], param->storage->dev->name);
    }
    /* param, m and v are written element by element: none may alias
     * another or itself (an expanded view), or the update reads values it
     * has already written. */
    static const char *const written[3] = {"param", "m", "v"};
    const tf_tensor *out[3] = {param, m, v};
    for (int i = 0; i < 3; i++) {
        if (tf__overlaps_itself(out[i]))
            return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s overlaps itself (a broadcast or overlapping view)", fn,
                             written[i]);
        for (int j = 0; j < i; j++)
            if (tf__overlap(out[i], out[j]))
                return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, written[i], written[j]);
    }
    for (int i = 0; i < 3 && s == TF_OK; i++) s = tf__grad_check_write(fn, out[i]);   /* versions bumped */
    if (s != TF_OK) return s;
    tf_tensor *g = NULL;
    s = tf__tensor_move(grad, param->storage->dev, &g);
    if (s != TF_OK)
        return tf__error_context(s, "%s: moving grad from %s to %s", fn, grad->storage->dev->name,
                                 param->storage->dev->name);
    tf_op op;
    tf__op_init(&op, TF_OP_ADAM, 4);
    tf__desc_into(&op.inputs[0], param);
    tf__desc_into(&op.inputs[1], g);
    tf__desc_into(&op.inputs[2], m);
    tf__desc_into(&op.inputs[3], v);
    tf__desc_into(&op.output, param);
    op.params.lr = lr;
    op.params.beta1 = beta1;
    op.params.beta2 = beta2;
    op.params.eps = eps;
    op.params.weight_decay = weight_decay;
    op.params.adam_step = step;
    op.params.flags = decoupled ? TF_ADAM_DECOUPLED : 0;
    s = tf_tensor_numel(param) ? tf__dispatch(fn, param->storage->dev, &op) : TF_OK;
    tf_tensor_release(g);
    return s;
}
