/* Autograd: every gradient rule against float64 central differences on
 * fresh random inputs, on every device (the analytic gradient in f32 on the
 * device, the numeric one in f64 on the CPU), and the tape's rules: leaves,
 * accumulation, retain_graph, no-grad, detach, in-place writes refused,
 * the version counter, ops without a rule named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"

#define MAXIN 4

typedef enum { ANY, POS, UNIT, GE1 } domain;

/* One case: inputs' shapes and domain, and the function of them. */
typedef struct gcase {
    const char *name;
    int n;
    int ndim[MAXIN];
    int64_t shape[MAXIN][4];
    domain dom[MAXIN];
    tf_status (*f)(tf_tensor *const *in, tf_tensor **out);
} gcase;

static bool real_device(const tf_device *d) {
    return strncmp(tf_device_name(d), "mybackend", 9) && strncmp(tf_device_name(d), "testplug", 8);
}

/* ---- the functions ---- */

#define UNARY(name, call) \
    static tf_status f_##name(tf_tensor *const *in, tf_tensor **out) { return call(in[0], out); }
#define BINARY(name, call) \
    static tf_status f_##name(tf_tensor *const *in, tf_tensor **out) { return call(in[0], in[1], out); }
UNARY(neg, tf_neg)
UNARY(exp, tf_exp)
UNARY(log, tf_log)
UNARY(log1p, tf_log1p)
UNARY(expm1, tf_expm1)
UNARY(sqrt, tf_sqrt)
UNARY(rsqrt, tf_rsqrt)
UNARY(sin, tf_sin)
UNARY(cos, tf_cos)
UNARY(tanh, tf_tanh)
UNARY(sigmoid, tf_sigmoid)
UNARY(relu, tf_relu)
UNARY(gelu, tf_gelu)
UNARY(gelu_tanh, tf_gelu_tanh)
UNARY(silu, tf_silu)
UNARY(softplus, tf_softplus)
UNARY(abs, tf_abs)
UNARY(asin, tf_asin)
UNARY(acos, tf_acos)
UNARY(atan, tf_atan)
UNARY(asinh, tf_asinh)
UNARY(acosh, tf_acosh)
UNARY(atanh, tf_atanh)
BINARY(add, tf_add)
BINARY(sub, tf_sub)
BINARY(mul, tf_mul)
BINARY(div, tf_div)
BINARY(pow, tf_pow)
BINARY(maximum, tf_maximum)
BINARY(minimum, tf_minimum)
BINARY(swiglu, tf_swiglu)
BINARY(atan2, tf_atan2)
BINARY(copysign, tf_copysign)
BINARY(matmul, tf_matmul)

static tf_status f_conv(tf_tensor *const *in, tf_tensor **out) {
    return tf_conv2d(in[0], in[1], in[2], (int64_t[]){1, 1}, (int64_t[]){1, 1}, NULL, 1, out);
}
static tf_status f_conv_strided(tf_tensor *const *in, tf_tensor **out) {
    return tf_conv2d(in[0], in[1], NULL, (int64_t[]){2, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 2, out);
}
static tf_status f_conv_strided_ungrouped(tf_tensor *const *in, tf_tensor **out) {
    return tf_conv2d(in[0], in[1], in[2], (int64_t[]){2, 3}, (int64_t[]){1, 2}, (int64_t[]){2, 1}, 1, out);
}
static tf_status f_conv_wide_padding(tf_tensor *const *in, tf_tensor **out) {
    return tf_conv2d(in[0], in[1], NULL, NULL, (int64_t[]){2, 3}, NULL, 1, out);
}
static tf_status f_maxpool(tf_tensor *const *in, tf_tensor **out) {
    return tf_maxpool2d(in[0], (int64_t[]){2, 2}, NULL, NULL, NULL, out);
}
static tf_status f_maxpool_padded(tf_tensor *const *in, tf_tensor **out) {
    return tf_maxpool2d(in[0], (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, NULL, out);
}
static tf_status f_avgpool(tf_tensor *const *in, tf_tensor **out) {
    return tf_avgpool2d(in[0], (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 1}, false, out);
}
static tf_status f_avgpool_count(tf_tensor *const *in, tf_tensor **out) {
    return tf_avgpool2d(in[0], (int64_t[]){2, 2}, (int64_t[]){1, 1}, (int64_t[]){1, 0}, true, out);
}

static tf_status f_leaky(tf_tensor *const *in, tf_tensor **out) { return tf_leaky_relu(in[0], 0.1, out); }
static tf_status f_clamp(tf_tensor *const *in, tf_tensor **out) { return tf_clamp(in[0], -0.5, 0.7, out); }
static tf_status f_sum_all(tf_tensor *const *in, tf_tensor **out) { return tf_sum(in[0], TF_ALL_AXES, false, out); }
static tf_status f_sum_keep(tf_tensor *const *in, tf_tensor **out) { return tf_sum(in[0], 1, true, out); }
static tf_status f_mean0(tf_tensor *const *in, tf_tensor **out) { return tf_mean(in[0], 0, false, out); }
static tf_status f_max1(tf_tensor *const *in, tf_tensor **out) { return tf_max(in[0], 1, false, out); }
static tf_status f_min_all(tf_tensor *const *in, tf_tensor **out) { return tf_min(in[0], TF_ALL_AXES, false, out); }
static tf_status f_prod1(tf_tensor *const *in, tf_tensor **out) { return tf_prod(in[0], 1, false, out); }
static tf_status f_var1(tf_tensor *const *in, tf_tensor **out) { return tf_var(in[0], 1, 1, false, out); }
static tf_status f_std0(tf_tensor *const *in, tf_tensor **out) { return tf_std(in[0], 0, 0, true, out); }
static tf_status f_lse1(tf_tensor *const *in, tf_tensor **out) { return tf_logsumexp(in[0], 1, false, out); }
static tf_status f_softmax(tf_tensor *const *in, tf_tensor **out) { return tf_softmax(in[0], 1, out); }
static tf_status f_log_softmax(tf_tensor *const *in, tf_tensor **out) { return tf_log_softmax(in[0], 0, out); }
static tf_status f_rmsnorm(tf_tensor *const *in, tf_tensor **out) { return tf_rmsnorm(in[0], in[1], 1e-5, out); }
static tf_status f_layernorm(tf_tensor *const *in, tf_tensor **out) {
    return tf_layernorm(in[0], in[1], in[2], 1e-5, out);
}
static tf_status f_linear(tf_tensor *const *in, tf_tensor **out) { return tf_linear(in[0], in[1], in[2], out); }
static tf_status f_gemm(tf_tensor *const *in, tf_tensor **out) {
    return tf_gemm(in[0], in[1], in[2], 0.7, 1.3, true, true, out);
}
static tf_status f_reshape(tf_tensor *const *in, tf_tensor **out) {
    return tf_reshape(in[0], 2, (int64_t[]){4, 6}, out);
}
static tf_status f_permute_mul(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *p = NULL;
    tf_status s = tf_permute(in[0], (int[]){2, 0, 1}, &p);
    if (s == TF_OK) s = tf_mul(p, p, out);
    tf_tensor_release(p);
    return s;
}
static tf_status f_slice(tf_tensor *const *in, tf_tensor **out) { return tf_slice(in[0], 1, 1, 6, 2, out); }
/* Slices of one tensor an op made (overlapping, one with a step) beside a
 * use of the whole: backward adds the slices' gradients into the window of
 * that tensor's pending gradient in place. */
static tf_status f_slices_of_one(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *y = NULL, *a = NULL, *b = NULL, *c = NULL;
    tf_status s = tf_mul(in[0], in[0], &y);
    if (s == TF_OK) s = tf_slice(y, 1, 0, 4, 1, &a);
    if (s == TF_OK) s = tf_slice(y, 1, 1, 6, 2, &b);
    if (s == TF_OK) s = tf_tanh(y, &c);
    if (s == TF_OK) s = tf_concat(3, (const tf_tensor *const[]){a, b, c}, 1, out);
    tf_tensor *all[] = {y, a, b, c};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    return s;
}
static tf_status f_expand(tf_tensor *const *in, tf_tensor **out) {
    return tf_expand(in[0], 3, (int64_t[]){2, 3, 4}, out);
}
static tf_status f_squeeze(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *u = NULL;
    tf_status s = tf_unsqueeze(in[0], 0, &u);
    if (s == TF_OK) s = tf_squeeze(u, 0, out);
    tf_tensor_release(u);
    return s;
}
static tf_status f_contiguous_t(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *t = NULL;
    tf_status s = tf_transpose(in[0], 0, 1, &t);
    if (s == TF_OK) s = tf_contiguous(t, out);
    tf_tensor_release(t);
    return s;
}
static tf_status f_cast(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *d = NULL, *e = NULL;
    tf_status s = tf_cast(in[0], TF_F64, &d);
    if (s == TF_OK) s = tf_exp(d, &e);
    if (s == TF_OK) s = tf_cast(e, tf_tensor_dtype(in[0]) == TF_F64 ? TF_F64 : TF_F32, out);
    tf_tensor_release(d);
    tf_tensor_release(e);
    return s;
}
static tf_status f_where(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *c = NULL;
    tf_status s = tf_gt(in[1], in[0], &c);         /* the condition itself takes no gradient */
    if (s == TF_OK) s = tf_where(c, in[0], in[1], out);
    tf_tensor_release(c);
    return s;
}
/* The same tensor used twice: gradients accumulate. */
static tf_status f_reuse(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *t = NULL;
    tf_status s = tf_tanh(in[0], &t);
    if (s == TF_OK) s = tf_mul(t, in[0], out);
    tf_tensor_release(t);
    return s;
}

static tf_tensor *ids_on(const tf_tensor *like, int ndim, const int64_t *shape, const int64_t *v) {
    tf_tensor *t = NULL;
    OK(tf_tensor_from_data(tf_tensor_device(like), TF_I64, ndim, shape, v, &t));
    return t;
}
static tf_status f_gather(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *idx = ids_on(in[0], 2, (int64_t[]){3, 2}, (int64_t[]){0, 3, 2, 2, 4, 1});
    tf_status s = tf_gather(in[0], 1, idx, out);
    tf_tensor_release(idx);
    return s;
}
static tf_status f_index_select(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *idx = ids_on(in[0], 1, (int64_t[]){4}, (int64_t[]){2, 0, 2, 3});
    tf_status s = tf_index_select(in[0], 1, idx, out);
    tf_tensor_release(idx);
    return s;
}
static tf_status f_embedding(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *idx = ids_on(in[0], 2, (int64_t[]){2, 3}, (int64_t[]){4, 1, 1, 0, 3, 4});
    tf_status s = tf_embedding(in[0], idx, out);
    tf_tensor_release(idx);
    return s;
}
static tf_status f_sdpa(tf_tensor *const *in, tf_tensor **out) {
    return tf_sdpa(in[0], in[1], in[2], NULL, 0, false, 0, out);
}
static tf_status f_sdpa_causal_gqa(tf_tensor *const *in, tf_tensor **out) {
    return tf_sdpa(in[0], in[1], in[2], NULL, 0.6, true, -1, out);
}
static tf_status f_sdpa_mask(tf_tensor *const *in, tf_tensor **out) {
    return tf_sdpa(in[0], in[1], in[2], in[3], 0, false, 0, out);
}
static tf_tensor *positions_on(const tf_tensor *like, int64_t n) {
    int64_t v[16];
    for (int64_t i = 0; i < n; i++) v[i] = 3 + 2 * i;
    return ids_on(like, 1, &n, v);
}
static tf_status f_rope(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *pos = positions_on(in[0], tf_tensor_shape(in[0])[2]);
    tf_status s = tf_rope(in[0], pos, 2, 0, 10000, TF_ROPE_INTERLEAVED, out);
    tf_tensor_release(pos);
    return s;
}
static tf_status f_rope_partial(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *pos = positions_on(in[0], tf_tensor_shape(in[0])[1]);
    tf_status s = tf_rope(in[0], pos, 1, 4, 500, TF_ROPE_HALF_SPLIT, out);
    tf_tensor_release(pos);
    return s;
}

static tf_status f_cross_entropy(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *t = ids_on(in[0], 1, (int64_t[]){4}, (int64_t[]){2, -100, 0, 4});
    tf_status s = tf_cross_entropy(in[0], t, -100, TF_REDUCTION_MEAN, out);
    tf_tensor_release(t);
    return s;
}
static tf_status f_batch_norm(tf_tensor *const *in, tf_tensor **out) {
    return tf_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5, out);
}

static tf_status f_concat3(tf_tensor *const *in, tf_tensor **out) {
    return tf_concat(3, (const tf_tensor *const[]){in[0], in[1], in[2]}, 1, out);
}
static tf_status f_stack(tf_tensor *const *in, tf_tensor **out) {
    return tf_stack(2, (const tf_tensor *const[]){in[0], in[1]}, 1, out);
}
static tf_status f_pad_crop(tf_tensor *const *in, tf_tensor **out) {
    return tf_pad(in[0], 2, (int64_t[]){1, 2, -1, 1}, 0.5, out);   /* last axis padded, first cropped then padded */
}
static tf_status f_tile(tf_tensor *const *in, tf_tensor **out) { return tf_tile(in[0], 2, (int64_t[]){2, 3}, out); }
static tf_status f_tile_wider(tf_tensor *const *in, tf_tensor **out) {
    return tf_tile(in[0], 3, (int64_t[]){2, 1, 2}, out);
}
static tf_status f_flip(tf_tensor *const *in, tf_tensor **out) { return tf_flip(in[0], 2, (int[]){0, -1}, out); }
static tf_status f_cumsum(tf_tensor *const *in, tf_tensor **out) { return tf_cumsum(in[0], 1, out); }
static tf_status f_tril(tf_tensor *const *in, tf_tensor **out) { return tf_tril(in[0], -1, out); }
static tf_status f_triu(tf_tensor *const *in, tf_tensor **out) { return tf_triu(in[0], 1, out); }
static tf_status f_sort(tf_tensor *const *in, tf_tensor **out) { return tf_sort(in[0], 1, true, out); }
static tf_status f_gemv(tf_tensor *const *in, tf_tensor **out) { return tf_gemv(in[0], in[1], out); }
static tf_status f_outer(tf_tensor *const *in, tf_tensor **out) { return tf_outer(in[0], in[1], out); }
static tf_status f_attention_scores(tf_tensor *const *in, tf_tensor **out) {
    return tf_attention_scores(in[0], in[1], 0.7, out);
}
static tf_status f_weighted_sum_rows(tf_tensor *const *in, tf_tensor **out) {
    return tf_weighted_sum_rows(in[0], in[1], out);
}
/* split's pieces, one of them empty, put back together in another order */
static tf_status f_split(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *parts[3] = {NULL, NULL, NULL};
    tf_status s = tf_split(in[0], 1, 3, (int64_t[]){2, 0, 3}, parts);
    if (s == TF_OK) s = tf_concat(3, (const tf_tensor *const[]){parts[2], parts[1], parts[0]}, 1, out);
    for (int i = 0; i < 3; i++) tf_tensor_release(parts[i]);
    return s;
}
static tf_status f_add_rmsnorm(tf_tensor *const *in, tf_tensor **out) {
    return tf_add_rmsnorm(in[0], in[1], in[2], 1e-5, out);
}
static tf_status f_add_layernorm(tf_tensor *const *in, tf_tensor **out) {
    return tf_add_layernorm(in[0], in[1], in[2], in[3], 1e-5, out);
}
static tf_status f_linear_fused(tf_tensor *const *in, tf_tensor **out) {
    return tf_linear_fused(in[0], in[1], in[2], TF_OP_GELU, in[3], out);
}

/* x + 3 I (x's last two axes square): well away from singular. */
static tf_status dominant(const tf_tensor *x, tf_tensor **out) {
    const int64_t n = tf_tensor_shape(x)[tf_tensor_ndim(x) - 1];
    tf_tensor *eye = NULL, *three = NULL, *e3 = NULL;
    tf_status s = tf_eye(tf_tensor_device(x), tf_tensor_dtype(x), n, n, &eye);
    if (s == TF_OK) s = tf_scalar(tf_tensor_device(x), tf_tensor_dtype(x), 3, &three);
    if (s == TF_OK) s = tf_mul(eye, three, &e3);
    if (s == TF_OK) s = tf_add(x, e3, out);
    tf_tensor_release(eye);
    tf_tensor_release(three);
    tf_tensor_release(e3);
    return s;
}
static tf_status f_inv(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *a = NULL;
    tf_status s = dominant(in[0], &a);
    if (s == TF_OK) s = tf_linalg_inv(a, out);
    tf_tensor_release(a);
    return s;
}
static tf_status f_solve(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *a = NULL;
    tf_status s = dominant(in[0], &a);
    if (s == TF_OK) s = tf_linalg_solve(a, in[1], out);
    tf_tensor_release(a);
    return s;
}
static tf_status f_det(tf_tensor *const *in, tf_tensor **out) { return tf_linalg_det(in[0], out); }
static tf_status f_logabsdet(tf_tensor *const *in, tf_tensor **out) {
    tf_tensor *a = NULL, *sign = NULL;
    tf_status s = dominant(in[0], &a);
    if (s == TF_OK) s = tf_linalg_slogdet(a, &sign, out);
    tf_tensor_release(a);
    tf_tensor_release(sign);
    return s;
}
/* cholesky of x x^T + 3 I: symmetric, so the symmetrized gradient is the
 * derivative central differences see. */
static tf_status cholesky_of_gram(tf_tensor *const *in, bool upper, tf_tensor **out) {
    tf_tensor *t = NULL, *gram = NULL, *a = NULL;
    tf_status s = tf_transpose(in[0], -1, -2, &t);
    if (s == TF_OK) s = tf_matmul(in[0], t, &gram);
    if (s == TF_OK) s = dominant(gram, &a);
    if (s == TF_OK) s = tf_linalg_cholesky(a, upper, out);
    tf_tensor_release(t);
    tf_tensor_release(gram);
    tf_tensor_release(a);
    return s;
}
static tf_status f_cholesky(tf_tensor *const *in, tf_tensor **out) { return cholesky_of_gram(in, false, out); }
static tf_status f_cholesky_upper(tf_tensor *const *in, tf_tensor **out) { return cholesky_of_gram(in, true, out); }

static const gcase cases[] = {
    {"neg", 1, {2}, {{3, 4}}, {ANY}, f_neg},
    {"exp", 1, {2}, {{3, 4}}, {ANY}, f_exp},
    {"log", 1, {2}, {{3, 4}}, {POS}, f_log},
    {"log1p", 1, {2}, {{3, 4}}, {POS}, f_log1p},
    {"expm1", 1, {2}, {{3, 4}}, {ANY}, f_expm1},
    {"sqrt", 1, {2}, {{3, 4}}, {POS}, f_sqrt},
    {"rsqrt", 1, {2}, {{3, 4}}, {POS}, f_rsqrt},
    {"sin", 1, {2}, {{3, 4}}, {ANY}, f_sin},
    {"cos", 1, {2}, {{3, 4}}, {ANY}, f_cos},
    {"tanh", 1, {2}, {{3, 4}}, {ANY}, f_tanh},
    {"sigmoid", 1, {2}, {{3, 4}}, {ANY}, f_sigmoid},
    {"relu", 1, {2}, {{3, 4}}, {ANY}, f_relu},
    {"leaky_relu", 1, {2}, {{3, 4}}, {ANY}, f_leaky},
    {"gelu", 1, {2}, {{3, 4}}, {ANY}, f_gelu},
    {"gelu_tanh", 1, {2}, {{3, 4}}, {ANY}, f_gelu_tanh},
    {"silu", 1, {2}, {{3, 4}}, {ANY}, f_silu},
    {"softplus", 1, {2}, {{3, 4}}, {ANY}, f_softplus},
    {"abs", 1, {2}, {{3, 4}}, {ANY}, f_abs},
    {"clamp", 1, {2}, {{3, 4}}, {ANY}, f_clamp},
    {"asin", 1, {2}, {{3, 4}}, {UNIT}, f_asin},
    {"acos", 1, {2}, {{3, 4}}, {UNIT}, f_acos},
    {"atan", 1, {2}, {{3, 4}}, {ANY}, f_atan},
    {"asinh", 1, {2}, {{3, 4}}, {ANY}, f_asinh},
    {"acosh", 1, {2}, {{3, 4}}, {GE1}, f_acosh},
    {"atanh", 1, {2}, {{3, 4}}, {UNIT}, f_atanh},
    {"add (broadcast)", 2, {2, 1}, {{3, 4}, {4}}, {ANY, ANY}, f_add},
    {"sub (broadcast)", 2, {3, 2}, {{2, 3, 4}, {3, 1}}, {ANY, ANY}, f_sub},
    {"mul (broadcast)", 2, {2, 2}, {{3, 4}, {3, 1}}, {ANY, ANY}, f_mul},
    {"div (broadcast)", 2, {2, 1}, {{3, 4}, {4}}, {ANY, POS}, f_div},
    {"pow", 2, {2, 2}, {{3, 4}, {3, 4}}, {POS, ANY}, f_pow},
    {"maximum", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, ANY}, f_maximum},
    {"minimum", 2, {2, 1}, {{3, 4}, {4}}, {ANY, ANY}, f_minimum},
    {"swiglu", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, ANY}, f_swiglu},
    {"atan2", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, POS}, f_atan2},
    {"sum all", 1, {2}, {{3, 4}}, {ANY}, f_sum_all},
    {"sum axis keepdim", 1, {3}, {{2, 3, 4}}, {ANY}, f_sum_keep},
    {"mean axis 0", 1, {2}, {{3, 4}}, {ANY}, f_mean0},
    {"max axis 1", 1, {2}, {{3, 4}}, {ANY}, f_max1},
    {"min all", 1, {2}, {{3, 4}}, {ANY}, f_min_all},
    {"prod axis 1", 1, {2}, {{3, 4}}, {POS}, f_prod1},
    {"var axis 1", 1, {2}, {{3, 5}}, {ANY}, f_var1},
    {"std axis 0", 1, {2}, {{4, 3}}, {ANY}, f_std0},
    {"logsumexp", 1, {2}, {{3, 4}}, {ANY}, f_lse1},
    {"matmul 2-d", 2, {2, 2}, {{3, 4}, {4, 5}}, {ANY, ANY}, f_matmul},
    {"matmul batched", 2, {4, 3}, {{2, 1, 3, 4}, {3, 4, 2}}, {ANY, ANY}, f_matmul},
    {"matmul vector-matrix", 2, {1, 2}, {{4}, {4, 3}}, {ANY, ANY}, f_matmul},
    {"matmul matrix-vector", 2, {2, 1}, {{3, 4}, {4}}, {ANY, ANY}, f_matmul},
    {"gemm transposed", 3, {2, 2, 2}, {{4, 3}, {5, 4}, {3, 5}}, {ANY, ANY, ANY}, f_gemm},
    {"linear", 3, {3, 2, 1}, {{2, 3, 4}, {5, 4}, {5}}, {ANY, ANY, ANY}, f_linear},
    {"reshape", 1, {3}, {{2, 3, 4}}, {ANY}, f_reshape},
    {"permute", 1, {3}, {{2, 3, 4}}, {ANY}, f_permute_mul},
    {"slice step 2", 1, {2}, {{3, 7}}, {ANY}, f_slice},
    {"slices of one tensor", 1, {2}, {{4, 6}}, {ANY}, f_slices_of_one},
    {"expand", 1, {2}, {{3, 1}}, {ANY}, f_expand},
    {"squeeze unsqueeze", 1, {2}, {{3, 4}}, {ANY}, f_squeeze},
    {"contiguous", 1, {2}, {{3, 4}}, {ANY}, f_contiguous_t},
    {"cast", 1, {2}, {{3, 4}}, {ANY}, f_cast},
    {"softmax", 1, {2}, {{3, 5}}, {ANY}, f_softmax},
    {"log_softmax", 1, {2}, {{4, 3}}, {ANY}, f_log_softmax},
    {"rmsnorm", 2, {2, 1}, {{3, 6}, {6}}, {ANY, ANY}, f_rmsnorm},
    {"layernorm", 3, {2, 1, 1}, {{3, 6}, {6}, {6}}, {ANY, ANY, ANY}, f_layernorm},
    {"where", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, ANY}, f_where},
    {"reuse", 1, {2}, {{3, 4}}, {ANY}, f_reuse},
    {"gather", 1, {2}, {{3, 5}}, {ANY}, f_gather},
    {"index_select", 1, {2}, {{3, 5}}, {ANY}, f_index_select},
    {"embedding", 1, {2}, {{5, 3}}, {ANY}, f_embedding},
    {"cross_entropy", 1, {2}, {{4, 5}}, {ANY}, f_cross_entropy},
    {"conv2d with bias", 3, {4, 4, 1}, {{2, 3, 5, 4}, {4, 3, 3, 3}, {4}}, {ANY, ANY, ANY}, f_conv},
    {"conv2d strided, dilated, groups", 2, {4, 4}, {{1, 4, 6, 7}, {4, 2, 2, 3}}, {ANY, ANY}, f_conv_strided},
    {"conv2d strided, dilated, floor", 3, {4, 4, 1}, {{2, 2, 8, 9}, {3, 2, 2, 3}, {3}}, {ANY, ANY, ANY},
     f_conv_strided_ungrouped},
    {"conv2d padding past the kernel", 2, {4, 4}, {{1, 2, 3, 3}, {2, 2, 2, 2}}, {ANY, ANY}, f_conv_wide_padding},
    {"maxpool2d", 1, {4}, {{2, 2, 4, 6}}, {ANY}, f_maxpool},
    {"maxpool2d padded", 1, {4}, {{1, 2, 5, 5}}, {ANY}, f_maxpool_padded},
    {"avgpool2d padding not counted", 1, {4}, {{1, 2, 5, 4}}, {ANY}, f_avgpool},
    {"avgpool2d padding counted", 1, {4}, {{1, 2, 3, 4}}, {ANY}, f_avgpool_count},
    {"sdpa", 3, {4, 4, 4}, {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}}, {ANY, ANY, ANY}, f_sdpa},
    {"sdpa causal, grouped heads", 3, {4, 4, 4}, {{2, 4, 3, 2}, {2, 2, 4, 2}, {2, 2, 4, 3}}, {ANY, ANY, ANY},
     f_sdpa_causal_gqa},
    {"sdpa with a float mask", 4, {4, 4, 4, 2}, {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}, {3, 5}},
     {ANY, ANY, ANY, ANY}, f_sdpa_mask},
    {"rope interleaved", 1, {4}, {{1, 2, 3, 6}}, {ANY}, f_rope},
    {"rope half-split, partial", 1, {3}, {{2, 3, 8}}, {ANY}, f_rope_partial},
    {"batch_norm", 3, {4, 1, 1}, {{4, 3, 2, 2}, {3}, {3}}, {ANY, ANY, ANY}, f_batch_norm},
    {"concat of three", 3, {2, 2, 2}, {{2, 3}, {2, 1}, {2, 2}}, {ANY, ANY, ANY}, f_concat3},
    {"stack", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, ANY}, f_stack},
    {"pad and crop", 1, {2}, {{3, 4}}, {ANY}, f_pad_crop},
    {"tile", 1, {2}, {{2, 3}}, {ANY}, f_tile},
    {"tile past the input's axes", 1, {1}, {{3}}, {ANY}, f_tile_wider},
    {"flip", 1, {2}, {{3, 4}}, {ANY}, f_flip},
    {"cumsum", 1, {2}, {{3, 4}}, {ANY}, f_cumsum},
    {"tril", 1, {3}, {{2, 3, 4}}, {ANY}, f_tril},
    {"triu", 1, {2}, {{4, 3}}, {ANY}, f_triu},
    {"sort descending", 1, {2}, {{3, 5}}, {ANY}, f_sort},
    {"copysign", 2, {2, 2}, {{3, 4}, {3, 4}}, {ANY, ANY}, f_copysign},
    {"gemv", 2, {2, 1}, {{3, 4}, {4}}, {ANY, ANY}, f_gemv},
    {"outer", 2, {1, 1}, {{4}, {3}}, {ANY, ANY}, f_outer},
    {"attention_scores", 2, {2, 3}, {{2, 4}, {2, 3, 4}}, {ANY, ANY}, f_attention_scores},
    {"weighted_sum_rows", 2, {2, 3}, {{2, 3}, {2, 3, 4}}, {ANY, ANY}, f_weighted_sum_rows},
    {"split", 1, {2}, {{3, 5}}, {ANY}, f_split},
    {"add_rmsnorm", 3, {2, 1, 1}, {{3, 6}, {6}, {6}}, {ANY, ANY, ANY}, f_add_rmsnorm},
    {"add_layernorm", 4, {2, 2, 1, 1}, {{3, 6}, {3, 6}, {6}, {6}}, {ANY, ANY, ANY, ANY}, f_add_layernorm},
    {"linear_fused gelu, residual", 4, {3, 2, 1, 1}, {{2, 3, 4}, {5, 4}, {5}, {5}}, {ANY, ANY, ANY, ANY},
     f_linear_fused},
    {"inv", 1, {3}, {{2, 3, 3}}, {ANY}, f_inv},
    {"solve", 2, {3, 3}, {{2, 3, 3}, {2, 3, 2}}, {ANY, ANY}, f_solve},
    {"det", 1, {3}, {{2, 3, 3}}, {ANY}, f_det},
    {"slogdet's log|det|", 1, {2}, {{4, 4}}, {ANY}, f_logabsdet},
    {"cholesky", 1, {3}, {{2, 3, 3}}, {ANY}, f_cholesky},
    {"cholesky upper", 1, {2}, {{3, 4}}, {ANY}, f_cholesky_upper},
};

/* ---- the check ---- */

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static double draw(domain d) {
    double u = (double)rand() / RAND_MAX;
    switch (d) {
    case POS: return 0.3 + 1.7 * u;
    case UNIT: return -0.8 + 1.6 * u;
    case GE1: return 1.2 + 2.0 * u;
    default: return -1.5 + 3.0 * u;
    }
}

/* Values apart from one another and from the kinks (0 for relu and abs,
 * clamp's bounds, ties of max): a central difference across a kink is not
 * a derivative. */
static void fill_inputs(const gcase *c, double **v) {
    for (int i = 0; i < c->n; i++) {
        int64_t n = numel_of(c->ndim[i], c->shape[i]);
        v[i] = malloc((size_t)n * sizeof **v);
        for (int64_t j = 0; j < n; j++) {
            double x;
            bool near;
            do {
                x = draw(c->dom[i]);
                near = fabs(x) < 0.05 || fabs(x + 0.5) < 0.05 || fabs(x - 0.7) < 0.05;
                for (int64_t k = 0; k < j && !near; k++) near = fabs(v[i][k] - x) < 0.002;
            } while (near);
            v[i][j] = x;
        }
    }
}

static tf_tensor *make(tf_device *d, tf_dtype dt, int ndim, const int64_t *shape, const double *v) {
    int64_t n = numel_of(ndim, shape);
    tf_tensor *t = NULL;
    if (dt == TF_F64) {
        OK(tf_tensor_from_data(d, TF_F64, ndim, shape, v, &t));
    } else {
        float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
        for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
        OK(tf_tensor_from_data(d, TF_F32, ndim, shape, f, &t));
        free(f);
    }
    return t;
}

static double *weights_for(int64_t n) {
    double *w = malloc((size_t)n * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = 0.5 + (double)((i * 7919) % 13) / 13.0;
    return w;
}

/* loss = sum(f(in) * w) in f64 on the CPU. */
static double loss_f64(const gcase *c, double **v) {
    tf_tensor *in[MAXIN] = {NULL}, *out = NULL, *w = NULL, *p = NULL, *l = NULL;
    for (int i = 0; i < c->n; i++) in[i] = make(cpu_device(), TF_F64, c->ndim[i], c->shape[i], v[i]);
    OK(c->f(in, &out));
    double *wv = weights_for(tf_tensor_numel(out));
    w = make(cpu_device(), TF_F64, tf_tensor_ndim(out), tf_tensor_shape(out), wv);
    OK(tf_mul(out, w, &p));
    OK(tf_sum(p, TF_ALL_AXES, false, &l));
    double r = 0;
    OK(tf_tensor_read(l, &r, sizeof r));
    tf_tensor *all[] = {out, w, p, l, in[0], in[1], in[2], in[3]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    free(wv);
    return r;
}

static int checked_elements;

static void check_case(tf_device *d, const gcase *c) {
    double *v[MAXIN] = {NULL};
    fill_inputs(c, v);
    tf_tensor *in[MAXIN] = {NULL}, *out = NULL, *w = NULL, *p = NULL, *loss = NULL;
    for (int i = 0; i < c->n; i++) {
        in[i] = make(d, TF_F32, c->ndim[i], c->shape[i], v[i]);
        OK(tf_set_requires_grad(in[i], true));
    }
    tf_status s = c->f(in, &out);
    if (s != TF_OK) fail_msg("%s on %s: forward failed: %s", c->name, tf_device_name(d), tf_last_error());
    double *wv = weights_for(tf_tensor_numel(out));
    w = make(d, TF_F32, tf_tensor_ndim(out), tf_tensor_shape(out), wv);
    OK(tf_mul(out, w, &p));
    OK(tf_sum(p, TF_ALL_AXES, false, &loss));
    assert_true(tf_requires_grad(loss));
    assert_false(tf_is_leaf(loss));
    s = tf_backward(loss, NULL, 0);
    if (s != TF_OK) fail_msg("%s on %s: backward failed: %s", c->name, tf_device_name(d), tf_last_error());
    for (int i = 0; i < c->n; i++) {
        int64_t n = numel_of(c->ndim[i], c->shape[i]);
        tf_tensor *g = tf_grad(in[i]);
        if (!g) fail_msg("%s on %s: input %d got no gradient", c->name, tf_device_name(d), i);
        expect_shape(g, c->ndim[i], c->shape[i]);
        float *got = malloc((size_t)n * sizeof *got);
        OK(tf_tensor_read(g, got, (size_t)n * sizeof *got));
        double err = 0, norm = 0;
        for (int64_t j = 0; j < n; j++) {
            double keep = v[i][j], h = 1e-6 * (1 + fabs(keep));
            v[i][j] = keep + h;
            double up = loss_f64(c, v);
            v[i][j] = keep - h;
            double down = loss_f64(c, v);
            v[i][j] = keep;
            double want = (up - down) / (2 * h);
            err += (got[j] - want) * (got[j] - want);
            norm += want * want;
            checked_elements++;
        }
        if (sqrt(err) > 2e-4 * (sqrt(norm) + 1e-3))
            fail_msg("%s on %s: input %d's gradient is off: |error| %.3g against |gradient| %.3g", c->name,
                     tf_device_name(d), i, sqrt(err), sqrt(norm));
        free(got);
    }
    tf_tensor *all[] = {out, w, p, loss, in[0], in[1], in[2], in[3]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    for (int i = 0; i < c->n; i++) free(v[i]);
    free(wv);
}

static void test_gradients_match_central_differences_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (!real_device(d)) continue;
        checked_elements = 0;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) check_case(d, &cases[c]);
        printf("%s: %zu gradient cases, %d elements checked\n", tf_device_name(d), sizeof cases / sizeof *cases,
               checked_elements);
    }
}

/* ---- the tape's rules ---- */

static tf_tensor *vec(const float *v, int64_t n) { return tensor_f32(cpu_device(), 1, &n, v); }

static void test_leaves_and_accumulation(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2, 3}, 3), *y = NULL, *l = NULL, *i = NULL;
    int64_t three = 3;
    OK(tf_tensor_from_data(cpu_device(), TF_I32, 1, &three, (int32_t[]){1, 2, 3}, &i));
    FAILS_WITH(TF_ERR_DTYPE, "only float tensors", tf_set_requires_grad(i, true));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "does not require a gradient", tf_backward(x, NULL, 0));
    OK(tf_set_requires_grad(x, true));
    assert_true(tf_is_leaf(x));
    OK(tf_mul(x, x, &y));
    FAILS_WITH(TF_ERR_SHAPE, "a seed gradient is needed", tf_backward(y, NULL, 0));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not a leaf", tf_set_requires_grad(y, false));
    OK(tf_sum(y, TF_ALL_AXES, false, &l));
    OK(tf_backward(l, NULL, TF_BACKWARD_RETAIN_GRAPH));
    expect_f32(tf_grad(x), (float[]){2, 4, 6}, 3);
    OK(tf_backward(l, NULL, 0));                   /* accumulates */
    expect_f32(tf_grad(x), (float[]){4, 8, 12}, 3);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "already walked", tf_backward(l, NULL, 0));
    expect_f32(tf_grad(x), (float[]){4, 8, 12}, 3);   /* a failed backward changes nothing */
    tf_zero_grad(x);
    assert_null(tf_grad(x));
    /* a seed for a non-scalar root */
    tf_tensor *seed = vec((float[]){1, 0, -1}, 3), *y2 = NULL;
    OK(tf_mul(x, x, &y2));
    OK(tf_backward(y2, seed, 0));
    expect_f32(tf_grad(x), (float[]){2, 0, -6}, 3);
    tf_tensor *all[] = {x, y, l, i, seed, y2};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

/* Leaves' gradients are memory of their own: an add gives both inputs the
 * same gradient and a sum a broadcast one, and a collective writes them in
 * place. */
static void test_leaf_gradients_own_their_memory(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2}, 2), *y = vec((float[]){3, 4}, 2), *z = NULL, *l = NULL;
    OK(tf_set_requires_grad(x, true));
    OK(tf_set_requires_grad(y, true));
    OK(tf_add(x, y, &z));
    OK(tf_sum(z, TF_ALL_AXES, false, &l));
    OK(tf_backward(l, NULL, 0));
    tf_tensor *gx = tf_grad(x), *gy = tf_grad(y);
    assert_true(tf_tensor_is_contiguous(gx));
    OK(tf_binary_into(gx, TF_OP_ADD, gx, gx));      /* in place, as tf_all_reduce writes */
    expect_f32(gy, (float[]){1, 1}, 2);
    tf_tensor *all[] = {x, y, z, l};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

static void test_no_grad_and_detach(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2}, 2), *y = NULL, *z = NULL, *dx = NULL;
    OK(tf_set_requires_grad(x, true));
    bool was = tf_set_grad_enabled(false);
    assert_true(was);
    assert_false(tf_grad_enabled());
    OK(tf_exp(x, &y));
    assert_false(tf_requires_grad(y));
    tf_set_grad_enabled(was);
    OK(tf_detach(x, &dx));
    assert_false(tf_requires_grad(dx));
    OK(tf_exp(dx, &z));
    assert_false(tf_requires_grad(z));
    tf_tensor *all[] = {x, y, z, dx};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

static void test_in_place_writes(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2}, 2), *c = vec((float[]){3, 4}, 2), *y = NULL, *l = NULL;
    OK(tf_set_requires_grad(x, true));
    /* into a leaf that requires a gradient: refused while recording */
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "requires a gradient", tf_binary_into(x, TF_OP_ADD, x, c));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "requires a gradient", tf_copy_into(x, c));
    /* a value that requires a gradient written into a plain tensor: refused */
    FAILS_WITH(TF_ERR_UNSUPPORTED, "requires a gradient", tf_copy_into(c, x));
    FAILS_WITH(TF_ERR_UNSUPPORTED, "requires a gradient", tf_binary_into(c, TF_OP_MUL, x, c));
    expect_f32(c, (float[]){3, 4}, 2);
    /* a saved factor changed after use: backward names the op */
    OK(tf_mul(x, c, &y));
    OK(tf_sum(y, TF_ALL_AXES, false, &l));
    OK(tf_binary_into(c, TF_OP_ADD, c, c));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "written in place", tf_backward(l, NULL, 0));
    assert_null(tf_grad(x));
    /* with grad mode off the leaf can be updated (an optimizer's step) */
    bool was = tf_set_grad_enabled(false);
    OK(tf_binary_into(x, TF_OP_ADD, x, x));
    tf_set_grad_enabled(was);
    expect_f32(x, (float[]){2, 4}, 2);
    tf_tensor *all[] = {x, c, y, l};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

/* The gradients of sum(linear(x, w) * c), w kept as stored (q8_0, or bf16
 * under f32 x) or decoded to f32 first. The kept product may run on 8-bit
 * rounded x (central differences would see its steps), so the decoded
 * layer is the reference: dx = c w, and for the bf16 weight (a float, so
 * a parameter) dw = c^T x. */
enum { KW_M = 3, KW_N = 5, KW_K = 64 };

static void kept_weight_grads(tf_device *d, tf_dtype wdt, bool decoded, float *dx, float *dw) {
    float xv[KW_M * KW_K], wv[KW_N * KW_K], cv[KW_M * KW_N];
    for (int i = 0; i < KW_M * KW_K; i++) xv[i] = (float)((i * 29) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < KW_N * KW_K; i++) wv[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
    for (int i = 0; i < KW_M * KW_N; i++) cv[i] = 0.25f + (float)(i % 7);
    tf_tensor *x = tensor_f32(d, 2, (int64_t[]){KW_M, KW_K}, xv), *w32 = tensor_f32(d, 2, (int64_t[]){KW_N, KW_K}, wv);
    tf_tensor *c = tensor_f32(d, 2, (int64_t[]){KW_M, KW_N}, cv), *kept = NULL, *w = NULL, *y = NULL, *p = NULL;
    tf_tensor *l = NULL, *g32 = NULL;
    OK(tf_cast(w32, wdt, &kept));
    if (decoded) OK(tf_cast(kept, TF_F32, &w));
    else w = tf_tensor_retain(kept);
    OK(tf_set_requires_grad(x, true));
    if (dw) OK(tf_set_requires_grad(w, true));
    OK(tf_linear(x, w, NULL, &y));
    OK(tf_mul(y, c, &p));
    OK(tf_sum(p, TF_ALL_AXES, false, &l));
    OK(tf_backward(l, NULL, 0));
    OK(tf_tensor_read(tf_grad(x), dx, sizeof(float) * KW_M * KW_K));
    if (dw) {
        OK(tf_cast(tf_grad(w), TF_F32, &g32));
        OK(tf_tensor_read(g32, dw, sizeof(float) * KW_N * KW_K));
    }
    tf_tensor *all[] = {x, w32, c, kept, w, y, p, l, g32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

static void expect_near_all(const char *what, tf_device *d, const float *got, const float *want, int n, float tol) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol * (1 + fabsf(want[i]))))
            fail_msg("%s on %s: element %d is %g, the decoded weight's gives %g", what, tf_device_name(d), i, got[i],
                     want[i]);
}

static void test_kept_weight_gradients(void **state) {
    (void)state;
    static float dx[KW_M * KW_K], ref_dx[KW_M * KW_K], dw[KW_N * KW_K], ref_dw[KW_N * KW_K];
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (!real_device(d)) continue;
        kept_weight_grads(d, TF_Q8_0, false, dx, NULL);
        kept_weight_grads(d, TF_Q8_0, true, ref_dx, NULL);
        expect_near_all("q8_0 weight: dx", d, dx, ref_dx, KW_M * KW_K, 1e-5f);
        kept_weight_grads(d, TF_BF16, false, dx, dw);
        kept_weight_grads(d, TF_BF16, true, ref_dx, ref_dw);
        expect_near_all("bf16 weight: dx", d, dx, ref_dx, KW_M * KW_K, 1e-5f);
        expect_near_all("bf16 weight: dw (rounded to bf16)", d, dw, ref_dw, KW_N * KW_K, 1e-2f);
    }
}

static void test_ops_without_a_rule_are_named(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2, 3}, 3), *y = NULL, *l = NULL;
    OK(tf_set_requires_grad(x, true));
    tf_tensor *z = NULL, *q = NULL, *r = NULL, *lq = NULL;
    OK(tf_cast(x, TF_C64, &z));                  /* the rules are real: complex values have none */
    assert_true(tf_requires_grad(z));
    OK(tf_real(z, &y));
    OK(tf_sum(y, TF_ALL_AXES, false, &l));
    FAILS_WITH(TF_ERR_UNSUPPORTED, "tf_real (real) has no gradient rule", tf_backward(l, NULL, 0));
    assert_null(tf_grad(x));
    tf_tensor *m = NULL;                         /* a function outside the op table, named alone */
    OK(tf_reshape(x, 2, (int64_t[]){3, 1}, &m));
    OK(tf_linalg_qr(m, false, &q, &r));
    assert_true(tf_requires_grad(q) && tf_requires_grad(r));
    OK(tf_sum(r, TF_ALL_AXES, false, &lq));
    FAILS_WITH(TF_ERR_UNSUPPORTED, "tf_backward: tf_linalg_qr has no gradient rule", tf_backward(lq, NULL, 0));
    assert_null(tf_grad(x));
    tf_tensor *all[] = {x, y, l, z, q, r, lq, m};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

/* The gradient ops of conv2d and max pooling check what they are given
 * as the forward does, and leave out NULL when they refuse. */
static void test_gradient_ops_check_their_input(void **state) {
    (void)state;
    tf_device *cpu = NULL;
    OK(tf_device_get("cpu", &cpu));
    const int64_t xs[4] = {2, 2, 6, 6}, ws[4] = {3, 2, 3, 3}, dys[4] = {2, 3, 4, 4}, wrong[4] = {2, 3, 5, 5};
    const int64_t k3[2] = {3, 3}, k2[2] = {2, 2}, pad2[2] = {2, 2};
    tf_tensor *x = NULL, *w = NULL, *dy = NULL, *bad = NULL, *ints = NULL, *out = NULL;
    OK(tf_randn(cpu, TF_F32, 4, xs, 1, &x));
    OK(tf_randn(cpu, TF_F32, 4, ws, 2, &w));
    OK(tf_randn(cpu, TF_F32, 4, dys, 3, &dy));
    OK(tf_randn(cpu, TF_F32, 4, wrong, 4, &bad));
    OK(tf_zeros(cpu, TF_I32, 4, dys, &ints));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "grad_out, weight or input_shape is NULL",
               tf_conv2d_grad_input(NULL, w, xs, NULL, NULL, NULL, 1, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_conv2d_grad_weight(x, dy, k3, NULL, NULL, NULL, 1, NULL));
    FAILS_WITH(TF_ERR_SHAPE, "grad_out is [2,3,5,5], the forward's output would be [2,3,4,4]",
               tf_conv2d_grad_input(bad, w, xs, NULL, NULL, NULL, 1, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_SHAPE, "the forward's output would be", tf_conv2d_grad_weight(x, bad, k3, NULL, NULL, NULL, 1, &out));
    FAILS_WITH(TF_ERR_SHAPE, "do not fit", tf_conv2d_grad_input(dy, w, xs, NULL, NULL, NULL, 2, &out));
    FAILS_WITH(TF_ERR_SHAPE, "must divide by groups", tf_conv2d_grad_weight(x, dy, k3, NULL, NULL, NULL, 2, &out));
    FAILS_WITH(TF_ERR_SHAPE, "negative extent",
               tf_conv2d_grad_input(dy, w, (int64_t[]){2, 2, -6, 6}, NULL, NULL, NULL, 1, &out));
    FAILS_WITH(TF_ERR_DTYPE, "needs a float tensor", tf_conv2d_grad_input(ints, w, xs, NULL, NULL, NULL, 1, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "stride {0, 1} must be >= 1",
               tf_conv2d_grad_weight(x, dy, k3, (int64_t[]){0, 1}, NULL, NULL, 1, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "padding {2, 2} must be at most half the kernel",
               tf_maxpool2d_grad(x, dy, k2, NULL, pad2, NULL, &out));
    FAILS_WITH(TF_ERR_SHAPE, "the forward's output would be [2,2,3,3]", tf_maxpool2d_grad(x, dy, k2, NULL, NULL, NULL, &out));
    assert_null(out);
    OK(tf_conv2d_grad_input(dy, w, xs, NULL, NULL, NULL, 1, &out));     /* and the good calls run */
    assert_int_equal(tf_tensor_shape(out)[2], 6);
    tf_tensor_release(out);
    out = NULL;
    /* attention's: q [1, 2, 3, 4], k and v [1, 1, 5, 4], dO [1, 2, 3, 4] */
    tf_tensor *q = NULL, *kv = NULL, *dout = NULL, *iq = NULL;
    OK(tf_randn(cpu, TF_F32, 4, (int64_t[]){1, 2, 3, 4}, 5, &q));
    OK(tf_randn(cpu, TF_F32, 4, (int64_t[]){1, 1, 5, 4}, 6, &kv));
    OK(tf_randn(cpu, TF_F32, 4, (int64_t[]){1, 2, 3, 4}, 7, &dout));
    OK(tf_zeros(cpu, TF_I32, 4, (int64_t[]){1, 2, 3, 4}, &iq));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "q, k, v or grad_out is NULL", tf_sdpa_grad_q(q, kv, kv, NULL, 0, true, -1, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_sdpa_grad_kv(q, kv, kv, dout, 0, true, -1, NULL));
    FAILS_WITH(TF_ERR_SHAPE, "grad_out is [1,1,5,4], the forward's output would be [1,2,3,4]",
               tf_sdpa_grad_kv(q, kv, kv, kv, 0, false, 0, &out));
    FAILS_WITH(TF_ERR_SHAPE, "do not fit", tf_sdpa_grad_q(kv, q, q, dout, 0, false, 0, &out));
    FAILS_WITH(TF_ERR_DTYPE, "tf_sdpa_grad_q", tf_sdpa_grad_q(iq, kv, kv, dout, 0, false, 0, &out));
    assert_null(out);
    OK(tf_sdpa_grad_kv(q, kv, kv, dout, 0, true, -1, &out));
    assert_int_equal(tf_tensor_shape(out)[3], 8);                         /* dK and dV side by side */
    tf_tensor_release(out);
    out = NULL;
    /* rmsnorm's: x and grad_out [1, 2, 3, 4], a weight [4] */
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "x or grad_out is NULL", tf_rmsnorm_grad(q, NULL, NULL, 1e-5, &out));
    FAILS_WITH(TF_ERR_SHAPE, "grad_out is [1,1,5,4] and x [1,2,3,4]: they must match",
               tf_rmsnorm_grad(q, NULL, kv, 1e-5, &out));
    FAILS_WITH(TF_ERR_SHAPE, "weight", tf_rmsnorm_grad(q, q, dout, 1e-5, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "eps -1 must be >= 0", tf_rmsnorm_grad(q, NULL, dout, -1, &out));
    assert_null(out);
    tf_tensor *all[] = {x, w, dy, bad, ints, q, kv, dout, iq};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

/* A long chain is let go without recursion, and its saved values go as
 * backward passes them. */
static void test_long_chain(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){0.5f}, 1), *y = tf_tensor_retain(x);
    OK(tf_set_requires_grad(x, true));
    for (int i = 0; i < 20000; i++) {
        tf_tensor *next = NULL;
        OK(tf_sin(y, &next));
        tf_tensor_release(y);
        y = next;
    }
    OK(tf_backward(y, NULL, 0));
    float g = 0;
    OK(tf_tensor_read(tf_grad(x), &g, sizeof g));
    double v = 0.5, want = 1;
    for (int i = 0; i < 20000; i++) {
        want *= cos(v);
        v = sin(v);
    }
    assert_true(fabs(g - want) <= 1e-3 * fabs(want) + 1e-9);
    tf_tensor_release(y);
    /* dropped without backward */
    y = tf_tensor_retain(x);
    for (int i = 0; i < 20000; i++) {
        tf_tensor *next = NULL;
        OK(tf_sin(y, &next));
        tf_tensor_release(y);
        y = next;
    }
    tf_tensor_release(y);
    tf_tensor_release(x);
}


/* ---- optimizers ---- */

/* One parameter of 4 on device d through 3 steps with given gradients,
 * against the update rules in double. */
static void run_optimizer(tf_device *d, const tf_optimizer_config *c) {
    double p[4] = {0.5, -1.0, 2.0, 0.25}, m[4] = {0}, v[4] = {0};
    float pf[4];
    for (int i = 0; i < 4; i++) pf[i] = (float)p[i];
    int64_t four = 4;
    tf_tensor *param = tensor_f32(d, 1, &four, pf);
    OK(tf_set_requires_grad(param, true));
    tf_optimizer *o = NULL;
    OK(tf_optimizer_create(c, 1, &param, &o));
    for (int t = 1; t <= 3; t++) {
        float gf[4];
        double g[4];
        for (int i = 0; i < 4; i++) gf[i] = (float)(g[i] = 0.3 * (i - 1.5) + 0.1 * t);
        tf_tensor *grad = tensor_f32(d, 1, &four, gf);
        OK(tf_set_grad(param, grad));
        tf_tensor_release(grad);
        OK(tf_optimizer_step(o));
        for (int i = 0; i < 4; i++) {
            double gi = g[i];
            if (c->kind == TF_OPTIMIZER_SGD) {
                gi += c->weight_decay * p[i];
                if (c->momentum) {
                    m[i] = t == 1 ? gi : c->momentum * m[i] + (1 - c->dampening) * gi;
                    gi = c->nesterov ? gi + c->momentum * m[i] : m[i];
                }
                p[i] -= c->lr * gi;
            } else {
                if (c->kind == TF_OPTIMIZER_ADAMW) p[i] *= 1 - c->lr * c->weight_decay;
                else gi += c->weight_decay * p[i];
                m[i] = c->beta1 * m[i] + (1 - c->beta1) * gi;
                v[i] = c->beta2 * v[i] + (1 - c->beta2) * gi * gi;
                double mh = m[i] / (1 - pow(c->beta1, t)), vh = v[i] / (1 - pow(c->beta2, t));
                p[i] -= c->lr * mh / (sqrt(vh) + c->eps);
            }
        }
    }
    float got[4];
    OK(tf_tensor_read(param, got, sizeof got));
    for (int i = 0; i < 4; i++)
        if (fabs(got[i] - p[i]) > 1e-5 * (1 + fabs(p[i])))
            fail_msg("%s, optimizer %d: parameter %d is %.7g, want %.7g", tf_device_name(d), (int)c->kind, i,
                     got[i], p[i]);
    assert_int_equal(tf_optimizer_steps(o), 3);
    tf_optimizer_zero_grad(o);
    assert_null(tf_grad(param));
    OK(tf_optimizer_step(o));                      /* no gradients: nothing moves */
    float again[4];
    OK(tf_tensor_read(param, again, sizeof again));
    assert_memory_equal(again, got, sizeof got);
    tf_optimizer_destroy(o);
    tf_tensor_release(param);
}

static void test_optimizers_follow_pytorch_rules_on_every_device(void **state) {
    (void)state;
    tf_optimizer_config sgd = tf_optimizer_defaults(TF_OPTIMIZER_SGD), momentum = sgd, nesterov = sgd;
    sgd.lr = 0.1;
    momentum.lr = 0.05, momentum.momentum = 0.9, momentum.dampening = 0.1, momentum.weight_decay = 0.01;
    nesterov.lr = 0.05, nesterov.momentum = 0.8, nesterov.nesterov = true, nesterov.weight_decay = 0.02;
    tf_optimizer_config adam = tf_optimizer_defaults(TF_OPTIMIZER_ADAM), adamw = tf_optimizer_defaults(TF_OPTIMIZER_ADAMW);
    adam.lr = 0.01, adam.weight_decay = 0.05;
    adamw.lr = 0.01;
    const tf_optimizer_config *all[] = {&sgd, &momentum, &nesterov, &adam, &adamw};
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (!real_device(d)) continue;
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) run_optimizer(d, all[i]);
    }
}

static void test_optimizer_errors(void **state) {
    (void)state;
    tf_tensor *x = vec((float[]){1, 2}, 2), *y = NULL;
    tf_optimizer *o = NULL;
    tf_optimizer_config c = tf_optimizer_defaults(TF_OPTIMIZER_SGD);
    tf_tensor *params[2] = {x, x};
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not a leaf that requires a gradient", tf_optimizer_create(&c, 1, &x, &o));
    OK(tf_set_requires_grad(x, true));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "repeats", tf_optimizer_create(&c, 2, params, &o));
    c.nesterov = true;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "Nesterov", tf_optimizer_create(&c, 1, &x, &o));
    c = tf_optimizer_defaults(TF_OPTIMIZER_ADAM);
    c.beta1 = 1;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "betas", tf_optimizer_create(&c, 1, &x, &o));
    OK(tf_exp(x, &y));
    params[1] = y;
    c = tf_optimizer_defaults(TF_OPTIMIZER_SGD);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "parameter 1 is not a leaf", tf_optimizer_create(&c, 2, params, &o));
    assert_null(o);
    tf_tensor_release(x);
    tf_tensor_release(y);
}

static void test_clip_grad_norm(void **state) {
    (void)state;
    tf_tensor *a = vec((float[]){3, 0}, 2), *b = vec((float[]){0}, 1), *ga = vec((float[]){3, 4}, 2),
              *gb = vec((float[]){12}, 1);
    OK(tf_set_requires_grad(a, true));
    OK(tf_set_requires_grad(b, true));
    OK(tf_set_grad(a, ga));
    OK(tf_set_grad(b, gb));
    tf_tensor *ps[2] = {a, b};
    double norm = 0;
    OK(tf_clip_grad_norm(2, ps, 100, &norm));      /* under the bound: unchanged */
    assert_true(fabs(norm - 13) < 1e-6);
    expect_f32(tf_grad(a), (float[]){3, 4}, 2);
    OK(tf_clip_grad_norm(2, ps, 1.3, &norm));
    float got[3];
    OK(tf_tensor_read(tf_grad(a), got, 2 * sizeof *got));
    OK(tf_tensor_read(tf_grad(b), got + 2, sizeof *got));
    const float want[3] = {0.3f, 0.4f, 1.2f};         /* scaled by 1.3 / (13 + 1e-6) */
    for (int i = 0; i < 3; i++) assert_true(fabsf(got[i] - want[i]) < 1e-6f);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "max_norm", tf_clip_grad_norm(2, ps, 0, &norm));
    tf_tensor *all[] = {a, b, ga, gb};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tf_tensor_release(all[k]);
}

/* The scaler's loop: scale, backward, step (skipped on inf), update. */
static void test_grad_scaler_step(void **state) {
    (void)state;
    tf_tensor *w = vec((float[]){1, -1}, 2), *x = vec((float[]){2, 3}, 2);
    OK(tf_set_requires_grad(w, true));
    tf_optimizer_config c = tf_optimizer_defaults(TF_OPTIMIZER_SGD);
    c.lr = 0.5;
    tf_optimizer *o = NULL;
    OK(tf_optimizer_create(&c, 1, &w, &o));
    tf_grad_scaler *s = NULL;
    OK(tf_grad_scaler_create(NULL, &s));
    for (int step = 0; step < 2; step++) {
        tf_tensor *p = NULL, *loss = NULL, *scaled = NULL;
        OK(tf_mul(w, x, &p));
        OK(tf_sum(p, TF_ALL_AXES, false, &loss));
        OK(tf_grad_scaler_scale(s, loss, &scaled));
        OK(tf_backward(scaled, NULL, 0));
        if (step == 1) {                          /* an overflowed gradient: the step is skipped */
            tf_tensor *inf = vec((float[]){INFINITY, 0}, 2);
            OK(tf_set_grad(w, inf));
            tf_tensor_release(inf);
        }
        bool stepped = false;
        OK(tf_grad_scaler_step(s, o, &stepped));
        assert_int_equal(stepped, step == 0);
        OK(tf_grad_scaler_update(s));
        tf_optimizer_zero_grad(o);
        tf_tensor_release(p);
        tf_tensor_release(loss);
        tf_tensor_release(scaled);
    }
    expect_f32(w, (float[]){0, -2.5f}, 2);          /* w - 0.5 x, once */
    tf_grad_scaler_destroy(s);
    tf_optimizer_destroy(o);
    tf_tensor_release(w);
    tf_tensor_release(x);
}

/* A two-layer network learns a fixed function: the loop users write. */
static void test_training_loop_learns(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (!real_device(d)) continue;
        int64_t xs[2] = {64, 3}, w1s[2] = {16, 3}, w2s[2] = {1, 16};
        tf_tensor *x = NULL, *w1 = NULL, *b1 = NULL, *w2 = NULL, *b2 = NULL, *target = NULL, *t0 = NULL;
        OK(tf_randn(d, TF_F32, 2, xs, 1, &x));
        OK(tf_randn(d, TF_F32, 2, w1s, 2, &t0));
        tf_tensor *scale = NULL;
        OK(tf_scalar(d, TF_F32, 0.5, &scale));
        OK(tf_mul(t0, scale, &w1));
        tf_tensor_release(t0);
        OK(tf_randn(d, TF_F32, 2, w2s, 3, &t0));
        OK(tf_mul(t0, scale, &w2));
        tf_tensor_release(t0);
        OK(tf_zeros(d, TF_F32, 1, (int64_t[]){16}, &b1));
        OK(tf_zeros(d, TF_F32, 1, (int64_t[]){1}, &b2));
        /* target = sin(x0) + x1 x2 */
        tf_tensor *c0 = NULL, *c1 = NULL, *c2 = NULL, *s0 = NULL, *p12 = NULL;
        OK(tf_slice(x, 1, 0, 1, 1, &c0));
        OK(tf_slice(x, 1, 1, 2, 1, &c1));
        OK(tf_slice(x, 1, 2, 3, 1, &c2));
        OK(tf_sin(c0, &s0));
        OK(tf_mul(c1, c2, &p12));
        OK(tf_add(s0, p12, &target));
        tf_tensor *params[4] = {w1, b1, w2, b2};
        for (int i = 0; i < 4; i++) OK(tf_set_requires_grad(params[i], true));
        tf_optimizer_config c = tf_optimizer_defaults(TF_OPTIMIZER_ADAM);
        c.lr = 0.02;
        tf_optimizer *o = NULL;
        OK(tf_optimizer_create(&c, 4, params, &o));
        float first = 0, last = 0;
        for (int step = 0; step < 200; step++) {
            tf_tensor *h = NULL, *a = NULL, *y = NULL, *diff = NULL, *sq = NULL, *loss = NULL;
            OK(tf_linear(x, w1, b1, &h));
            OK(tf_tanh(h, &a));
            OK(tf_linear(a, w2, b2, &y));
            OK(tf_sub(y, target, &diff));
            OK(tf_mul(diff, diff, &sq));
            OK(tf_mean(sq, TF_ALL_AXES, false, &loss));
            OK(tf_backward(loss, NULL, 0));
            OK(tf_optimizer_step(o));
            tf_optimizer_zero_grad(o);
            OK(tf_tensor_read(loss, step == 0 ? &first : &last, sizeof last));
            tf_tensor *all[] = {h, a, y, diff, sq, loss};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
        }
        if (!(last < 0.1f * first)) fail_msg("%s: the loss went from %g to %g", tf_device_name(d), first, last);
        tf_optimizer_destroy(o);
        tf_tensor *all[] = {x, w1, b1, w2, b2, target, scale, c0, c1, c2, s0, p12};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    }
}

/* What the library keeps (gradients, optimizer states, saved outputs)
 * outlives the scope the step ran in; the step's temporaries do not. */
static void test_state_outlives_scopes(void **state) {
    (void)state;
    tf_tensor *w = vec((float[]){1, 2, 3}, 3);
    OK(tf_set_requires_grad(w, true));
    tf_optimizer_config kinds[2] = {tf_optimizer_defaults(TF_OPTIMIZER_ADAM), tf_optimizer_defaults(TF_OPTIMIZER_SGD)};
    kinds[1].momentum = 0.9;
    for (int k = 0; k < 2; k++) {
        tf_optimizer *o = NULL;
        OK(tf_optimizer_create(&kinds[k], 1, &w, &o));
        tf_tensor *kept = NULL;
        for (int step = 0; step < 3; step++) {
            tf_scope *sc = NULL;
            OK(tf_scope_begin(&sc));
            tf_tensor *e = NULL, *l = NULL;
            OK(tf_exp(w, &e));                     /* exp saves its output */
            OK(tf_sum(e, TF_ALL_AXES, false, &l));
            if (step == 2) kept = tf_tensor_retain(l);
            else OK(tf_backward(l, NULL, 0));
            if (step < 2) OK(tf_optimizer_step(o));
            OK(tf_scope_end(sc));
            if (step < 2) assert_non_null(tf_grad(w));
            float g[3];
            if (step < 2) OK(tf_tensor_read(tf_grad(w), g, sizeof g));
            if (step < 2) tf_optimizer_zero_grad(o);
        }
        OK(tf_backward(kept, NULL, 0));            /* its graph outlived the scope too */
        assert_non_null(tf_grad(w));
        tf_tensor_release(kept);
        tf_optimizer_zero_grad(o);
        tf_optimizer_destroy(o);
    }
    tf_tensor_release(w);
}

int main(void) {
    const char *seed_text = getenv("TF_TEST_SEED");
    unsigned seed = seed_text ? (unsigned)strtoul(seed_text, NULL, 10) : (unsigned)time(NULL);
    printf("test_autograd: TF_TEST_SEED=%u\n", seed);
    srand(seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leaves_and_accumulation),
        cmocka_unit_test(test_leaf_gradients_own_their_memory),
        cmocka_unit_test(test_no_grad_and_detach),
        cmocka_unit_test(test_in_place_writes),
        cmocka_unit_test(test_ops_without_a_rule_are_named),
        cmocka_unit_test(test_kept_weight_gradients),
        cmocka_unit_test(test_gradient_ops_check_their_input),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_optimizers_follow_pytorch_rules_on_every_device),
        cmocka_unit_test(test_optimizer_errors),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_grad_scaler_step),
        cmocka_unit_test(test_training_loop_learns),
        cmocka_unit_test(test_state_outlives_scopes),
        cmocka_unit_test(test_gradients_match_central_differences_on_every_device),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
