/* The public ops: validation by the op table's rules, normalization into
 * the descriptor form backend.h promises, then dispatch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"
#include "formulas.h"

static tf_status dtype_not_accepted(const char *fn, tf_op_kind op, tf_dtype dt) {
    return tf__error(TF_ERR_DTYPE, "%s: %s does not accept dtype %s", fn, tf_op_name(op), tf_dtype_name(dt));
}

static bool accepts(tf_op_kind op, tf_dtype dt) { return (tf__op_table[op].accepts >> dt) & 1u; }

/* Output dtype of a binary op from its rule; TF_ERR_DTYPE if not accepted. */
static tf_status binary_dtype(const char *fn, tf_op_kind op, tf_dtype a, tf_dtype b, tf_dtype *out) {
    tf_status s = tf_promote_types(a, b, out);
    if (s != TF_OK) return tf__error(s, "%s: %s with %s: %s", fn, tf_dtype_name(a), tf_dtype_name(b),
                                     tf_dtype_is_quantized(a) || tf_dtype_is_quantized(b)
                                         ? "a quantized dtype takes part in tf_cast, tf_matmul_quantized and row "
                                           "selection only" : "invalid dtype");
    if (!accepts(op, *out)) return dtype_not_accepted(fn, op, *out);
    if (tf__op_table[op].dtype_rule == TF_DTRULE_PROMOTE_FLOAT && !tf_dtype_is_float(*out) &&
        !tf_dtype_is_complex(*out))
        *out = TF_F32;
    return TF_OK;
}

/* The dtypes that promote for a and b: a 0-d tensor beside a dimensioned
 * one counts only if its category is higher, and then alone (PyTorch). */
static void promoting_dtypes(const tf_tensor *a, const tf_tensor *b, tf_dtype *da, tf_dtype *db) {
    *da = a->dtype;
    *db = b->dtype;
    if ((a->ndim == 0) == (b->ndim == 0) || tf_dtype_is_quantized(a->dtype) || tf_dtype_is_quantized(b->dtype)) return;
    const tf_tensor *zero_d = a->ndim == 0 ? a : b, *dimensioned = a->ndim == 0 ? b : a;
    tf_dtype pick = tf__dtype_category(zero_d->dtype) > tf__dtype_category(dimensioned->dtype) ? zero_d->dtype : dimensioned->dtype;
    *da = *db = pick;
}

tf_status tf_result_type(const tf_tensor *a, const tf_tensor *b, tf_dtype *out) {
    static const char fn[] = "tf_result_type";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    if (!a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype da, db;
    promoting_dtypes(a, b, &da, &db);
    return tf__in(fn, tf_promote_types(da, db, out));
}

/* The dtype inputs are converted to before the kernel runs, and the
 * output's, for a binary op's rule. */
static tf_status binary_dtypes(const char *fn, tf_op_kind op, tf_dtype a, tf_dtype b, tf_dtype *compute,
                               tf_dtype *out) {
    tf_status s = binary_dtype(fn, op, a, b, compute);
    if (s != TF_OK) return s;
    switch (tf__op_table[op].dtype_rule) {
    case TF_DTRULE_COMPARE: *out = TF_BOOL; break;
    case TF_DTRULE_LOGICAL: *compute = *out = TF_BOOL; break;
    default: *out = *compute; break;
    }
    return TF_OK;
}

/* NumPy broadcasting of n shapes. */
static tf_status broadcast_n(const char *fn, int n_in, const tf_tensor *const *in, int *ndim, int64_t *shape) {
    int n = 0;
    for (int k = 0; k < n_in; k++) n = in[k]->ndim > n ? in[k]->ndim : n;
    for (int i = 0; i < n; i++) {
        shape[i] = 1;
        for (int k = 0; k < n_in; k++) {
            int ik = in[k]->ndim - n + i;
            int64_t dk = ik >= 0 ? in[k]->shape[ik] : 1;
            if (dk == 1 || dk == shape[i]) continue;
            if (shape[i] != 1) {
                char msg[800];
                size_t used = 0;
                for (int j = 0; j < n_in && used < sizeof msg; j++) {
                    char x[256];
                    used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", j ? (j == n_in - 1 ? " and " : ", ") : "",
                                             tf__shape_str(in[j]->ndim, in[j]->shape, x, sizeof x));
                }
                return tf__error(TF_ERR_SHAPE, "%s: shapes %s do not broadcast", fn, msg);
            }
            shape[i] = dk;
        }
    }
    *ndim = n;
    return TF_OK;
}

static tf_status broadcast_shapes(const char *fn, const tf_tensor *a, const tf_tensor *b, int *ndim, int64_t *shape) {
    const tf_tensor *in[2] = {a, b};
    return broadcast_n(fn, 2, in, ndim, shape);
}

/* Descriptor of t seen with the output's shape: left-padded, stride 0
 * along broadcast axes. */
static void broadcast_desc_into(tf_tensor_desc *d, const tf_tensor *t, int ndim, const int64_t *shape) {
    d->buffer = t->storage->buf;
    d->offset = (uint64_t)t->offset;
    d->dtype = t->dtype;
    int lead = ndim - t->ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        int src = i - lead;
        bool real = src >= 0 && t->shape[src] == shape[i] && t->shape[src] != 1;
        d->strides[i] = real ? t->strides[src] : 0;
        d->shape[i] = shape[i];
    }
    d->ndim = ndim;
}

/* ---- elementwise binary ---- */

/* The elementwise ops below return a new tensor through `out`, or, given
 * `into` (and a NULL out), write their result into that existing tensor. */
static tf_status elementwise_binary(const char *fn, tf_op_kind kind, const tf_tensor *a, const tf_tensor *b,
                                    tf_tensor *into, tf_tensor **out) {
    if (!out && !into) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    if (out) *out = NULL;
    if (!a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype dt, out_dt, da, db;
    int ndim = 0;
    int64_t shape[TF_MAX_DIMS];
    promoting_dtypes(a, b, &da, &db);
    tf_status s = binary_dtypes(fn, kind, da, db, &dt, &out_dt);
    if (s == TF_OK) s = broadcast_shapes(fn, a, b, &ndim, shape);
    if (s != TF_OK) return s;
    const tf_tensor *in[2] = {a, b};
    tf_dtype want[2] = {dt, dt};
    tf_op_call c;
    s = tf__op_begin(&c, fn, kind, 2, in, want, NULL);
    if (s != TF_OK) return s;
    c.into = into;
    broadcast_desc_into(&c.op.inputs[0], c.in[0], ndim, shape);
    broadcast_desc_into(&c.op.inputs[1], c.in[1], ndim, shape);
    return tf__op_end(&c, TF_OK, out_dt, ndim, shape, out);
}

static tf_status binary(const char *fn, tf_op_kind kind, const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    TF__GRAD(fn, out, binary(fn, kind, a, b, out), (ga_.rule = TF__GRAD_BINARY, ga_.op = kind), a, b);
    return elementwise_binary(fn, kind, a, b, NULL, out);
}

/* tf_add, tf_sub, ...: one per binary formula (src/ops/formulas.txt). */
#define TF__BINARY_FN(KIND, name)                                                                   \
    tf_status tf_##name(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {                  \
        return binary("tf_" #name, TF_OP_##KIND, a, b, out);                                         \
    }
#define TF__BINARY_F32_FN(KIND, name)                                                               \
    tf_status tf_##name(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {                  \
        TF__AUTOCAST(TF__AUTOCAST_F32, "tf_" #name, out, tf_##name(a, b, out), &a, &b);             \
        return binary("tf_" #name, TF_OP_##KIND, a, b, out);                                         \
    }
TF_FORMULA_BINARY_API(TF__BINARY_FN)
TF_FORMULA_BINARY_API_F32(TF__BINARY_F32_FN)
#undef TF__BINARY_FN
#undef TF__BINARY_F32_FN
tf_status tf_eq(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_eq", TF_OP_EQ, a, b, out); }
tf_status tf_ne(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_ne", TF_OP_NE, a, b, out); }
tf_status tf_lt(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_lt", TF_OP_LT, a, b, out); }
tf_status tf_le(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_le", TF_OP_LE, a, b, out); }
tf_status tf_gt(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_gt", TF_OP_GT, a, b, out); }
tf_status tf_ge(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) { return binary("tf_ge", TF_OP_GE, a, b, out); }
tf_status tf_logical_and(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    return binary("tf_logical_and", TF_OP_LOGICAL_AND, a, b, out);
}
tf_status tf_logical_or(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    return binary("tf_logical_or", TF_OP_LOGICAL_OR, a, b, out);
}

/* ---- matmul ---- */

typedef struct matmul_plan {
    int batch_ndim;
    int64_t batch[TF_MAX_DIMS];
    int64_t m, k, n;
    int out_ndim;                        /* user-visible result */
    int64_t out_shape[TF_MAX_DIMS];
} matmul_plan;

static tf_status plan_matmul(const char *fn, const tf_tensor *a, const tf_tensor *b, matmul_plan *p) {
    char x[256], y[256];
    if (a->ndim == 0 || b->ndim == 0)
        return tf__error(TF_ERR_SHAPE, "%s: operands must have at least 1 dimension (got %d-d and %d-d)", fn,
                         a->ndim, b->ndim);
    bool a_vec = a->ndim == 1, b_vec = b->ndim == 1;
    int64_t ka = a->shape[a->ndim - 1], kb = b_vec ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka != kb)
        return tf__error(TF_ERR_SHAPE, "%s: inner dimensions differ: %lld and %lld (shapes %s and %s)", fn,
                         (long long)ka, (long long)kb, tf__shape_str(a->ndim, a->shape, x, sizeof x),
                         tf__shape_str(b->ndim, b->shape, y, sizeof y));
    int ab = a_vec ? 0 : a->ndim - 2, bb = b_vec ? 0 : b->ndim - 2;
    p->batch_ndim = ab > bb ? ab : bb;
    for (int i = 0; i < p->batch_ndim; i++) {
        int ia = ab - p->batch_ndim + i, ib = bb - p->batch_ndim + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return tf__error(TF_ERR_SHAPE, "%s: batch dimensions of %s and %s do not broadcast", fn,
                             tf__shape_str(a->ndim, a->shape, x, sizeof x), tf__shape_str(b->ndim, b->shape, y, sizeof y));
        p->batch[i] = da == 1 ? db : da;
    }
    p->m = a_vec ? 1 : a->shape[a->ndim - 2];
    p->k = ka;
    p->n = b_vec ? 1 : b->shape[b->ndim - 1];
    p->out_ndim = 0;
    for (int i = 0; i < p->batch_ndim; i++) p->out_shape[p->out_ndim++] = p->batch[i];
    if (!a_vec) p->out_shape[p->out_ndim++] = p->m;
    if (!b_vec) p->out_shape[p->out_ndim++] = p->n;
    return TF_OK;
}

/* Descriptor of a matmul operand as [batch..., rows, cols]. A 1-D operand
 * becomes [1, K] (a) or [K, 1] (b). */
static tf_tensor_desc matmul_desc(const tf_tensor *t, const matmul_plan *p, bool is_a) {
    tf_tensor_desc d = tf__desc(t);
    int nb = p->batch_ndim, tb = t->ndim >= 2 ? t->ndim - 2 : 0;
    for (int i = 0; i < nb; i++) {
        int src = tb - nb + i;
        bool real = src >= 0 && t->shape[src] == p->batch[i] && t->shape[src] != 1;
        d.shape[i] = p->batch[i];
        d.strides[i] = real ? t->strides[src] : 0;
    }
    if (t->ndim == 1) {
        d.shape[nb] = is_a ? 1 : t->shape[0];
        d.strides[nb] = is_a ? 0 : t->strides[0];
        d.shape[nb + 1] = is_a ? t->shape[0] : 1;
        d.strides[nb + 1] = is_a ? t->strides[0] : 0;
    } else {
        d.shape[nb] = t->shape[t->ndim - 2];
        d.strides[nb] = t->strides[t->ndim - 2];
        d.shape[nb + 1] = t->shape[t->ndim - 1];
        d.strides[nb + 1] = t->strides[t->ndim - 1];
    }
    d.ndim = nb + 2;
    return d;
}

/* What GEMM_EPILOGUE adds after the product (NULL for the plain ops). */
typedef struct gemm_epilogue_args {
    int32_t activation;                  /* a unary op, or TF_NO_ACTIVATION */
    const tf_tensor *residual;           /* or NULL */
} gemm_epilogue_args;

static tf_status matmul_op(const char *fn, tf_op_kind kind, const tf_tensor *a, const tf_tensor *b,
                           const tf_tensor *c, double alpha, double beta, const gemm_epilogue_args *epi,
                           tf_tensor **out);

tf_status tf_matmul(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_matmul", out, tf_matmul(a, b, out), &a, &b);
    TF__GRAD("tf_matmul", out, tf_matmul(a, b, out), ga_.rule = TF__GRAD_MATMUL, a, b);
    return matmul_op("tf_matmul", TF_OP_MATMUL, a, b, NULL, 1, 0, NULL, out);
}

/* t (c or the residual) must broadcast to the product's full shape. */
static tf_status check_broadcasts_to(const char *fn, const char *what, const tf_tensor *t, int ndim,
                                     const int64_t *shape) {
    for (int i = 0; i < t->ndim; i++) {
        int d = ndim - t->ndim + i;
        if (t->ndim > ndim || (t->shape[i] != 1 && t->shape[i] != shape[d])) {
            char x[256], y[256];
            return tf__error(TF_ERR_SHAPE, "%s: %s %s does not broadcast to the product %s", fn, what,
                             tf__shape_str(t->ndim, t->shape, x, sizeof x), tf__shape_str(ndim, shape, y, sizeof y));
        }
    }
    return TF_OK;
}

static tf_status matmul_op(const char *fn, tf_op_kind kind, const tf_tensor *a, const tf_tensor *b,
                           const tf_tensor *c, double alpha, double beta, const gemm_epilogue_args *epi,
                           tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype dt;
    matmul_plan p;
    tf_status s = binary_dtype(fn, kind, a->dtype, b->dtype, &dt);
    if (s == TF_OK && c) s = binary_dtype(fn, kind, dt, c->dtype, &dt);
    const tf_tensor *r = epi ? epi->residual : NULL;
    if (s == TF_OK && r) s = binary_dtype(fn, kind, dt, r->dtype, &dt);
    if (s == TF_OK) s = plan_matmul(fn, a, b, &p);
    if (s != TF_OK) return s;
    int64_t full_shape[TF_MAX_DIMS];
    memcpy(full_shape, p.batch, sizeof full_shape);
    full_shape[p.batch_ndim] = p.m;
    full_shape[p.batch_ndim + 1] = p.n;
    int full_ndim = p.batch_ndim + 2;
    if (c && (s = check_broadcasts_to(fn, "c", c, full_ndim, full_shape)) != TF_OK) return s;
    if (r && (s = check_broadcasts_to(fn, "the residual", r, full_ndim, full_shape)) != TF_OK) return s;
    const tf_tensor *in[4] = {a, b, c ? c : r, r};
    tf_dtype want[4] = {dt, dt, dt, dt};
    int n = 2 + (c != NULL) + (r != NULL);
    tf_op_call call;
    tf_tensor *full = NULL;
    s = tf__op_begin(&call, fn, kind, n, in, want, NULL);
    if (s != TF_OK) return s;
    call.op.inputs[0] = matmul_desc(call.in[0], &p, true);
    call.op.inputs[1] = matmul_desc(call.in[1], &p, false);
    if (c) broadcast_desc_into(&call.op.inputs[2], call.in[2], full_ndim, full_shape);
    if (r) broadcast_desc_into(&call.op.inputs[n - 1], call.in[n - 1], full_ndim, full_shape);
    if (epi) {
        call.op.params.activation = epi->activation;
        call.op.params.flags = r ? TF_GEMM_RESIDUAL : 0;
    }
    call.op.params.alpha = alpha;
    call.op.params.beta = beta;
    s = tf__op_end(&call, TF_OK, dt, full_ndim, full_shape, &full);
    if (s != TF_OK) return s;
    int64_t strides[TF_MAX_DIMS];
    tf__contiguous_strides(p.out_ndim, p.out_shape, strides);
    s = tf__tensor_view(full, p.out_ndim, p.out_shape, strides, 0, out);
    tf_tensor_release(full);
    return tf__in(fn, s);
}

/* ---- products with a block-quantized weight ---- */

static tf_status check_quantized_product(const char *fn, const tf_tensor *x, const tf_tensor *w) {
    char a[256], b[256];
    if (!tf_dtype_is_quantized(w->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: the weight is %s, not a quantized dtype (tf_matmul takes it)", fn,
                         tf_dtype_name(w->dtype));
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: the activation is %s, not a float dtype", fn, tf_dtype_name(x->dtype));
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return tf__error(TF_ERR_SHAPE, "%s: x %s and w %s: w must be [N, K] and x [..., K]", fn,
                         tf__shape_str(x->ndim, x->shape, a, sizeof a), tf__shape_str(w->ndim, w->shape, b, sizeof b));
    return TF_OK;
}

/* x as rows [M, K] (a contiguous view or copy), M = the product of its
 * leading axes. */
static tf_status as_rows(const tf_tensor *x, tf_tensor **rows) {
    int64_t shape[2] = {tf_tensor_numel(x) / (x->shape[x->ndim - 1] ? x->shape[x->ndim - 1] : 1),
                        x->shape[x->ndim - 1]};
    tf_tensor *c = NULL;
    tf_status s = tf_contiguous(x, &c);
    if (s == TF_OK) s = tf_reshape(c, 2, shape, rows);
    tf_tensor_release(c);
    return s;
}

/* rows [M, K] times w [N, K] transposed, w read in its stored dtype (block-
 * quantized, or f16/bf16 under an f32 activation): f32 [M, N]. */
static tf_status kept_weight_product(const char *fn, const tf_tensor *rows, const tf_tensor *w, tf_tensor **out) {
    TF__GRAD(fn, out, kept_weight_product(fn, rows, w, out), ga_.rule = TF__GRAD_QMATMUL, rows, w);
    const tf_tensor *in[2] = {rows, w};
    const tf_dtype want[2] = {TF_F32, TF_KEEP_DTYPE};     /* kernels take f32 activations */
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, TF_OP_QMATMUL, 2, in, want, NULL);
    if (s != TF_OK) return s;
    int64_t shape[2] = {rows->shape[0], w->shape[0]};
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    tf__desc_into(&c.op.inputs[1], c.in[1]);
    return tf__op_end(&c, TF_OK, TF_F32, 2, shape, out);
}

tf_status tf_matmul_quantized(const tf_tensor *x, const tf_tensor *w, tf_tensor **out) {
    static const char fn[] = "tf_matmul_quantized";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !w) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_status s = check_quantized_product(fn, x, w);
    if (s != TF_OK) return s;
    tf_tensor *rows = NULL, *product = NULL;
    s = as_rows(x, &rows);
    if (s == TF_OK) s = kept_weight_product(fn, rows, w, &product);
    tf_tensor_release(rows);
    int64_t shape[TF_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = w->shape[0];
    tf_tensor *shaped = NULL;
    if (s == TF_OK) s = tf_reshape(product, x->ndim, shape, &shaped);
    tf_tensor_release(product);
    if (s == TF_OK && x->dtype != TF_F32) {
        s = tf_cast(shaped, x->dtype, out);
        tf_tensor_release(shaped);
    } else if (s == TF_OK) {
        *out = shaped;
    }
    return tf__in(fn, s);
}

/* A quantized operand of a GEMM that is not the plain weight, decoded. */
static tf_status decoded(const tf_tensor *t, tf_dtype other, tf_tensor **out) {
    *out = NULL;
    if (!tf_dtype_is_quantized(t->dtype)) return TF_OK;
    return tf_cast(t, tf_dtype_is_float(other) ? other : TF_F32, out);
}

tf_status tf_gemm(const tf_tensor *a, const tf_tensor *b, const tf_tensor *c, double alpha, double beta,
                  bool transpose_a, bool transpose_b, tf_tensor **out) {
    static const char fn[] = "tf_gemm";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_gemm", out, tf_gemm(a, b, c, alpha, beta, transpose_a, transpose_b, out),
                 &a, &b, &c);
    TF__GRAD(fn, out, tf_gemm(a, b, c, alpha, beta, transpose_a, transpose_b, out),
             (ga_.rule = TF__GRAD_GEMM, ga_.p.alpha = alpha, ga_.p.beta = beta, ga_.i[0] = transpose_a,
              ga_.i[1] = transpose_b), a, b, c);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (a->ndim < 2 || b->ndim < 2)
        return tf__error(TF_ERR_SHAPE, "%s: operands must be matrices (got %d-d and %d-d)", fn, a->ndim, b->ndim);
    if (tf_dtype_is_quantized(b->dtype) && !tf_dtype_is_quantized(a->dtype) && b->ndim == 2 && !transpose_a &&
        transpose_b && alpha == 1 && (!c || beta == 0))
        return tf__in(fn, tf_matmul_quantized(a, b, out));
    if (tf_dtype_is_quantized(a->dtype) || tf_dtype_is_quantized(b->dtype)) {
        tf_tensor *da = NULL, *db = NULL;
        tf_status s = decoded(a, b->dtype, &da);
        if (s == TF_OK) s = decoded(b, a->dtype, &db);
        if (s == TF_OK) s = tf_gemm(da ? da : a, db ? db : b, c, alpha, beta, transpose_a, transpose_b, out);
        tf_tensor_release(da);
        tf_tensor_release(db);
        return tf__in(fn, s);
    }
    tf_tensor *at = NULL, *bt = NULL;
    tf_status s = transpose_a ? tf_transpose(a, -1, -2, &at) : TF_OK;
    if (s == TF_OK) s = transpose_b ? tf_transpose(b, -1, -2, &bt) : TF_OK;
    if (s == TF_OK) s = matmul_op(fn, TF_OP_GEMM, at ? at : a, bt ? bt : b, c, alpha, beta, NULL, out);
    tf_tensor_release(at);
    tf_tensor_release(bt);
    return tf__in(fn, s);
}

static tf_status check_linear(const char *fn, const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias) {
    if (x->ndim < 1) return tf__error(TF_ERR_SHAPE, "%s: x must have at least one axis (its features)", fn);
    if (w->ndim != 2) return tf__error(TF_ERR_SHAPE, "%s: w must be [out_features, in_features], not %d-d", fn, w->ndim);
    const int64_t k = x->shape[x->ndim - 1], n = w->shape[0];
    if (w->shape[1] != k)
        return tf__error(TF_ERR_SHAPE, "%s: x has %lld features, w [%lld, %lld] takes %lld", fn, (long long)k,
                         (long long)n, (long long)w->shape[1], (long long)w->shape[1]);
    if (bias && (bias->ndim != 1 || bias->shape[0] != n))
        return tf__error(TF_ERR_SHAPE, "%s: bias must be [%lld] (w's out_features), not %d-d with %lld elements", fn,
                         (long long)n, bias->ndim, (long long)tf_tensor_numel(bias));
    return TF_OK;
}

/* y + bias after a product that could not take it: in place when the sum
 * keeps y's dtype (f32 y, a half or f32 bias), so no second [rows, n]
 * tensor is made; otherwise as a new tensor in *biased. */
static tf_status add_bias(tf_tensor *y, const tf_tensor *bias, tf_tensor **biased) {
    if (!y->ag && !bias->ag && y->dtype == TF_F32 && (bias->dtype == TF_F32 || bias->dtype == TF_BF16 || bias->dtype == TF_F16))
        return tf_binary_into(y, TF_OP_ADD, y, bias);
    return tf_add(y, bias, biased);
}

/* A linear layer's output shape (x's with its last axis n) and the rows its
 * leading axes fold into. */
static int64_t linear_rows(const tf_tensor *x, int64_t n, int64_t shape[TF_MAX_DIMS]) {
    int64_t rows = 1;
    for (int i = 0; i < x->ndim - 1; i++) rows *= x->shape[i];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = n;
    return rows;
}

/* A weight read as stored by QMATMUL: block-quantized, or half under f32 x. */
static bool kept_weight(const tf_tensor *x, const tf_tensor *w) {
    return tf_dtype_is_quantized(w->dtype) || (x->dtype == TF_F32 && (w->dtype == TF_BF16 || w->dtype == TF_F16));
}

tf_status tf_linear(const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias, tf_tensor **out) {
    static const char fn[] = "tf_linear";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_linear", out, tf_linear(x, w, bias, out), &x, &w, &bias);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !w) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or w is NULL", fn);
    tf_status s = check_linear(fn, x, w, bias);
    if (s != TF_OK) return s;
    /* One [rows, K] product whatever the leading axes: a batched GEMM over
     * them would multiply small matrices one by one. */
    const int64_t k = x->shape[x->ndim - 1], n = w->shape[0];
    int64_t shape[TF_MAX_DIMS], rows = linear_rows(x, n, shape);
    tf_tensor *x2 = NULL, *y = NULL, *biased = NULL;
    s = tf_reshape(x, 2, (int64_t[]){rows, k}, &x2);
    if (s == TF_OK && tf_dtype_is_quantized(w->dtype)) {
        s = tf_matmul_quantized(x2, w, &y);
        if (s == TF_OK && bias) s = add_bias(y, bias, &biased);
    } else if (s == TF_OK && x->dtype == TF_F32 && (w->dtype == TF_BF16 || w->dtype == TF_F16)) {
        /* Half-precision weights under f32 activations are read as stored
         * (the product tf_matmul_quantized runs): casting them to f32 on every
         * call would cost a full pass over the weight and its memory. */
        s = kept_weight_product(fn, x2, w, &y);
        if (s == TF_OK && bias) s = add_bias(y, bias, &biased);
    } else if (s == TF_OK) {
        s = tf_gemm(x2, w, bias, 1, bias ? 1 : 0, false, true, &y);   /* the bias rides the GEMM's epilogue */
    }
    if (s == TF_OK) s = tf_reshape(biased ? biased : y, x->ndim, shape, out);
    tf_tensor_release(x2);
    tf_tensor_release(y);
    tf_tensor_release(biased);
    return tf__in(fn, s);
}

/* A unary op tf_linear_fused takes after the product: the MATH family's
 * formulas without a parameter. */
static bool epilogue_activation(tf_op_kind a) {
    return a == TF_NO_ACTIVATION || ((unsigned)a < TF_OP_COUNT && tf_op_kernel_of(a) == TF_KERNEL_MATH &&
                                     a != TF_OP_CLAMP && a != TF_OP_LEAKY_RELU);
}

/* The residual as rows [rows, n] (or a row [n] broadcast to all of them). */
static tf_status residual_rows(const tf_tensor *r, int ndim, const int64_t *shape, int64_t rows, int64_t n,
                               tf_tensor **out) {
    if (r->ndim <= 1) {
        *out = tf_tensor_retain((tf_tensor *)r);
        return TF_OK;
    }
    bool same = r->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = r->shape[i] == shape[i];
    tf_tensor *full = NULL;
    tf_status s = same ? TF_OK : tf_expand(r, ndim, shape, &full);
    if (s == TF_OK) s = tf_reshape(full ? full : r, 2, (int64_t[]){rows, n}, out);
    tf_tensor_release(full);
    return s;
}

/* The parts of a fused layer run one by one: the weights that tf_linear
 * reads through tf_matmul_quantized take no epilogue. */
static tf_status unary(const char *fn, tf_op_kind kind, const tf_tensor *x, const tf_op_params *params,
                       tf_tensor **out);

static tf_status linear_then_epilogue(const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias,
                                      tf_op_kind activation, const tf_tensor *residual, tf_tensor **out) {
    tf_tensor *y = NULL, *act = NULL, *sum = NULL;
    tf_status s = tf_linear(x, w, bias, &y);
    /* Out of place, so that autograd can record each part. */
    if (s == TF_OK && activation != TF_NO_ACTIVATION) s = unary("tf_linear_fused", activation, y, NULL, &act);
    if (s == TF_OK && residual) s = tf_add(act ? act : y, residual, &sum);
    if (s == TF_OK) *out = sum ? sum : tf_tensor_retain(act ? act : y);
    tf_tensor_release(y);
    tf_tensor_release(act);
    if (s != TF_OK) tf_tensor_release(sum);
    return s;
}

/* A linear layer whose weight QMATMUL reads as stored, with its tail, as
 * one QMATMUL_EPILOGUE over f32 rows x2 [M, K]; the bias and the residual
 * rows r2 go in as f32 [M, N] (stride 0 where broadcast). */
static tf_status kept_weight_fused(const char *fn, const tf_tensor *x2, const tf_tensor *w, const tf_tensor *bias,
                                   tf_op_kind activation, const tf_tensor *r2, tf_tensor **out) {
    const tf_tensor *in[4] = {x2, w, NULL, NULL};
    const tf_dtype want[4] = {TF_F32, TF_KEEP_DTYPE, TF_F32, TF_F32};
    int n = 2;
    if (bias) in[n++] = bias;
    if (r2) in[n++] = r2;
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, TF_OP_QMATMUL_EPILOGUE, n, in, want, NULL);
    if (s != TF_OK) return s;
    int64_t shape[2] = {x2->shape[0], w->shape[0]};
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    tf__desc_into(&c.op.inputs[1], c.in[1]);
    for (int i = 2; i < n; i++) broadcast_desc_into(&c.op.inputs[i], c.in[i], 2, shape);
    c.op.params.activation = (int32_t)activation;
    c.op.params.flags = (bias ? TF_QMM_BIAS : 0u) | (r2 ? TF_GEMM_RESIDUAL : 0u);
    return tf__op_end(&c, TF_OK, TF_F32, 2, shape, out);
}

/* tf_linear_fused over a kept weight: an f32 result as one fused op;
 * other activations (cast to f32 and back around the product) and an f64
 * residual or bias (which promote the sum) as the parts. */
static tf_status kept_weight_linear_fused(const char *fn, const tf_tensor *x, const tf_tensor *w,
                                          const tf_tensor *bias, tf_op_kind activation, const tf_tensor *residual,
                                          tf_tensor **out) {
    bool f32_result = x->dtype == TF_F32 && (!residual || residual->dtype == TF_F32) &&
                      (!bias || bias->dtype == TF_F32 || bias->dtype == TF_F16 || bias->dtype == TF_BF16);
    if (!f32_result) return linear_then_epilogue(x, w, bias, activation, residual, out);   /* promotes as they do */
    const int64_t n = w->shape[0];
    int64_t shape[TF_MAX_DIMS], rows = linear_rows(x, n, shape);
    tf_tensor *x2 = NULL, *r2 = NULL, *y = NULL;
    tf_status s = as_rows(x, &x2);
    if (s == TF_OK && residual) s = residual_rows(residual, x->ndim, shape, rows, n, &r2);
    if (s == TF_OK) s = kept_weight_fused(fn, x2, w, bias, activation, r2, &y);
    if (s == TF_OK) s = tf_reshape(y, x->ndim, shape, out);
    tf_tensor_release(x2);
    tf_tensor_release(r2);
    tf_tensor_release(y);
    return s;
}

tf_status tf_linear_fused(const tf_tensor *x, const tf_tensor *w, const tf_tensor *bias, tf_op_kind activation,
                          const tf_tensor *residual, tf_tensor **out) {
    static const char fn[] = "tf_linear_fused";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_linear_fused", out, tf_linear_fused(x, w, bias, activation, residual, out),
                 &x, &w, &bias, &residual);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !w) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: x or w is NULL", fn);
    if (!epilogue_activation(activation))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: activation %d is not a unary op without parameters "
                         "(TF_OP_GELU, TF_OP_SILU, ...) or TF_NO_ACTIVATION", fn, (int)activation);
    tf_status s = check_linear(fn, x, w, bias);
    if (s != TF_OK) return s;
    const int64_t k = x->shape[x->ndim - 1], n = w->shape[0];
    int64_t shape[TF_MAX_DIMS], rows = linear_rows(x, n, shape);
    if (residual && (s = check_broadcasts_to(fn, "the residual", residual, x->ndim, shape)) != TF_OK) return s;
    const tf_tensor *parts[4] = {x, w, bias, residual};
    if (tf__grad_wanted(4, parts))       /* autograd records the parts: the fused kernels have no rule */
        return tf__in(fn, linear_then_epilogue(x, w, bias, activation, residual, out));
    if (kept_weight(x, w)) return tf__in(fn, kept_weight_linear_fused(fn, x, w, bias, activation, residual, out));
    tf_tensor *x2 = NULL, *wt = NULL, *r2 = NULL, *y = NULL;
    s = tf_reshape(x, 2, (int64_t[]){rows, k}, &x2);
    if (s == TF_OK) s = tf_transpose(w, 0, 1, &wt);
    if (s == TF_OK && residual) s = residual_rows(residual, x->ndim, shape, rows, n, &r2);
    gemm_epilogue_args epi = {activation, r2};
    if (s == TF_OK) s = matmul_op(fn, TF_OP_GEMM_EPILOGUE, x2, wt, bias, 1, bias ? 1 : 0, &epi, &y);
    if (s == TF_OK) s = tf_reshape(y, x->ndim, shape, out);
    tf_tensor_release(x2);
    tf_tensor_release(wt);
    tf_tensor_release(r2);
    tf_tensor_release(y);
    return tf__in(fn, s);
}

tf_status tf_gemv(const tf_tensor *a, const tf_tensor *x, tf_tensor **out) {
    static const char fn[] = "tf_gemv";
    TF__AUTOCAST(TF__AUTOCAST_LOWER, "tf_gemv", out, tf_gemv(a, x, out), &a, &x);
    if (out) *out = NULL;
    if (!a || !x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (a->ndim < 2 || x->ndim != 1)
        return tf__error(TF_ERR_SHAPE, "%s: needs a matrix and a vector (got %d-d and %d-d)", fn, a->ndim, x->ndim);
    TF__GRAD(fn, out, tf_gemv(a, x, out), ga_.rule = TF__GRAD_MATMUL, a, x);
    return matmul_op(fn, TF_OP_MATMUL, a, x, NULL, 1, 0, NULL, out);
}

tf_status tf_outer(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    static const char fn[] = "tf_outer";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (a->ndim != 1 || b->ndim != 1)
        return tf__error(TF_ERR_SHAPE, "%s: needs two vectors (got %d-d and %d-d)", fn, a->ndim, b->ndim);
    tf_tensor *col = NULL;
    tf_status s = tf_unsqueeze(a, 1, &col);
    if (s == TF_OK) s = binary(fn, TF_OP_MUL, col, b, out);
    tf_tensor_release(col);
    return tf__in(fn, s);
}

/* ---- reductions ---- */

static bool needs_elements(tf_op_kind k) {
    return k == TF_OP_MAX || k == TF_OP_MIN || k == TF_OP_ARGMAX || k == TF_OP_ARGMIN;
}

static tf_status reduce_p(const char *fn, tf_op_kind kind, const tf_tensor *t, int axis, bool keepdim,
                          const tf_op_params *params, tf_tensor **out);

static tf_status reduce(const char *fn, tf_op_kind kind, const tf_tensor *t, int axis, bool keepdim,
                        tf_tensor **out) {
    return reduce_p(fn, kind, t, axis, keepdim, NULL, out);
}

static tf_status reduce_p(const char *fn, tf_op_kind kind, const tf_tensor *t, int axis, bool keepdim,
                          const tf_op_params *params, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (!accepts(kind, t->dtype)) return dtype_not_accepted(fn, kind, t->dtype);
    bool all = axis == TF_ALL_AXES || (t->ndim == 0 && (axis == 0 || axis == -1));
    int ax = axis < 0 ? axis + t->ndim : axis;
    TF__GRAD(fn, out, reduce_p(fn, kind, t, axis, keepdim, params, out),
             (ga_.rule = TF__GRAD_REDUCE, ga_.op = kind, params ? (void)(ga_.p = *params) : (void)0,
              ga_.p.axis = all ? TF_ALL_AXES : ax, ga_.p.keepdim = keepdim), t);
    if (!all && (ax < 0 || ax >= t->ndim))
        return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, t->ndim);
    tf_dtype dt = t->dtype;
    if (tf__op_table[kind].dtype_rule == TF_DTRULE_SUM && !tf_dtype_is_float(dt) && !tf_dtype_is_complex(dt)) dt = TF_I64;
    if (tf__op_table[kind].dtype_rule == TF_DTRULE_INDEX) dt = TF_I64;
    int64_t kshape[TF_MAX_DIMS], rshape[TF_MAX_DIMS], count = 1, kept = 1;
    int rndim = 0;
    for (int i = 0; i < t->ndim; i++) {
        bool reduced = all || i == ax;
        kshape[i] = reduced ? 1 : t->shape[i];
        if (!reduced) rshape[rndim++] = t->shape[i];
        if (reduced) count *= t->shape[i];
        else kept *= t->shape[i];
    }
    if (needs_elements(kind) && count == 0 && kept > 0) {
        char x[256];
        return tf__error(TF_ERR_SHAPE, "%s: cannot reduce an empty %s of %s (%s has no identity)", fn,
                         all ? "tensor" : "axis", tf__shape_str(t->ndim, t->shape, x, sizeof x), tf_op_name(kind));
    }
    tf_op_call c;
    tf_tensor *o = NULL, *k;
    tf_status s = tf__op_begin(&c, fn, kind, 1, &t, NULL, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    if (params) c.op.params = *params;
    c.op.params.axis = all ? TF_ALL_AXES : ax;
    c.op.params.keepdim = keepdim;
    s = tf__op_end(&c, TF_OK, dt, t->ndim, kshape, &o);
    if (s != TF_OK || keepdim) {
        if (s == TF_OK) *out = o;
        return tf__in(fn, s);
    }
    int64_t strides[TF_MAX_DIMS];
    tf__contiguous_strides(rndim, rshape, strides);
    s = tf__tensor_view(o, rndim, rshape, strides, 0, &k);
    tf_tensor_release(o);
    if (s == TF_OK) *out = k;
    return tf__in(fn, s);
}

tf_status tf_sum(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_sum", out, tf_sum(t, axis, keepdim, out), &t);
    return reduce("tf_sum", TF_OP_SUM, t, axis, keepdim, out);
}

tf_status tf_mean(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_mean", out, tf_mean(t, axis, keepdim, out), &t);
    return reduce("tf_mean", TF_OP_MEAN, t, axis, keepdim, out);
}

tf_status tf_max(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    return reduce("tf_max", TF_OP_MAX, t, axis, keepdim, out);
}

tf_status tf_min(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    return reduce("tf_min", TF_OP_MIN, t, axis, keepdim, out);
}

tf_status tf_argmax(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    return reduce("tf_argmax", TF_OP_ARGMAX, t, axis, keepdim, out);
}

tf_status tf_argmin(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    return reduce("tf_argmin", TF_OP_ARGMIN, t, axis, keepdim, out);
}

tf_status tf_prod(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_prod", out, tf_prod(t, axis, keepdim, out), &t);
    return reduce("tf_prod", TF_OP_PROD, t, axis, keepdim, out);
}

/* var and std: the divisor N - correction must not overflow. */
static tf_status spread(const char *fn, tf_op_kind kind, const tf_tensor *t, int axis, int64_t correction,
                        bool keepdim, tf_tensor **out) {
    if (correction < 0) {
        if (out) *out = NULL;
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: correction %lld must be >= 0", fn, (long long)correction);
    }
    tf_op_params p = {.correction = correction};
    return reduce_p(fn, kind, t, axis, keepdim, &p, out);
}

tf_status tf_var(const tf_tensor *t, int axis, int64_t correction, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_var", out, tf_var(t, axis, correction, keepdim, out), &t);
    return spread("tf_var", TF_OP_VAR, t, axis, correction, keepdim, out);
}

tf_status tf_std(const tf_tensor *t, int axis, int64_t correction, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_std", out, tf_std(t, axis, correction, keepdim, out), &t);
    return spread("tf_std", TF_OP_STD, t, axis, correction, keepdim, out);
}

tf_status tf_logsumexp(const tf_tensor *t, int axis, bool keepdim, tf_tensor **out) {
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_logsumexp", out, tf_logsumexp(t, axis, keepdim, out), &t);
    return reduce("tf_logsumexp", TF_OP_LOGSUMEXP, t, axis, keepdim, out);
}

tf_status tf_cumsum(const tf_tensor *t, int axis, tf_tensor **out) {
    static const char fn[] = "tf_cumsum";
    TF__AUTOCAST(TF__AUTOCAST_F32, "tf_cumsum", out, tf_cumsum(t, axis, out), &t);
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (axis == TF_ALL_AXES)
        return tf__error(TF_ERR_AXIS, "%s: takes one axis, not TF_ALL_AXES (tf_reshape to 1-d first to sum along all)",
                         fn);
    int ax = axis < 0 ? axis + t->ndim : axis;
    if (t->ndim == 0 && (axis == 0 || axis == -1)) ax = 0;
    else if (ax < 0 || ax >= t->ndim)
        return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, t->ndim);
    TF__GRAD(fn, out, tf_cumsum(t, axis, out), (ga_.rule = TF__GRAD_SCAN, ga_.p.axis = ax), t);
    tf_dtype dt = tf_dtype_is_float(t->dtype) ? t->dtype : TF_I64;
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, TF_OP_CUMSUM, 1, &t, NULL, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    c.op.params.axis = t->ndim ? ax : TF_ALL_AXES;
    return tf__op_end(&c, TF_OK, dt, t->ndim, t->shape, out);
}

/* ---- sorting and searching ---- */

static tf_status sort_op(const char *fn, tf_op_kind kind, const tf_tensor *t, int axis, bool descending,
                         tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (!accepts(kind, t->dtype)) return dtype_not_accepted(fn, kind, t->dtype);
    if (axis == TF_ALL_AXES)
        return tf__error(TF_ERR_AXIS, "%s: takes one axis, not TF_ALL_AXES (tf_reshape to 1-d first)", fn);
    int ax = axis < 0 ? axis + t->ndim : axis;
    if (t->ndim == 0 && (axis == 0 || axis == -1)) ax = 0;
    else if (ax < 0 || ax >= t->ndim)
        return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, t->ndim);
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 1, &t, NULL, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    c.op.params.axis = t->ndim ? ax : TF_ALL_AXES;
    c.op.params.flags = descending ? TF_SORT_DESCENDING : 0u;
    return tf__op_end(&c, TF_OK, kind == TF_OP_ARGSORT ? TF_I64 : t->dtype, t->ndim, t->shape, out);
}

/* Recording autograd, sort is the gather of its argsort (the same stable
 * order), whose gradient puts each value's back where it came from. */
static tf_status sort_recorded(const tf_tensor *t, int axis, bool descending, tf_tensor **out) {
    tf_tensor *order = NULL;
    tf_status s = sort_op("tf_sort", TF_OP_ARGSORT, t, axis, descending, &order);
    if (s == TF_OK) s = t->ndim ? tf_gather(t, axis, order, out) : tf_copy(t, out);
    tf_tensor_release(order);
    return tf__in("tf_sort", s);
}

tf_status tf_sort(const tf_tensor *t, int axis, bool descending, tf_tensor **out) {
    if (t && out && tf__grad_wanted(1, &t)) return sort_recorded(t, axis, descending, out);
    return sort_op("tf_sort", TF_OP_SORT, t, axis, descending, out);
}

tf_status tf_argsort(const tf_tensor *t, int axis, bool descending, tf_tensor **out) {
    return sort_op("tf_argsort", TF_OP_ARGSORT, t, axis, descending, out);
}

tf_status tf_searchsorted(const tf_tensor *sorted, const tf_tensor *values, bool right, tf_tensor **out) {
    static const char fn[] = "tf_searchsorted";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!sorted || !values) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (sorted->ndim != 1)
        return tf__error(TF_ERR_SHAPE, "%s: the sorted input must be 1-d (got %d-d)", fn, sorted->ndim);
    tf_dtype common;
    tf_status s = binary_dtype(fn, TF_OP_SEARCHSORTED, sorted->dtype, values->dtype, &common);
    if (s != TF_OK) return s;
    const tf_tensor *in[2] = {sorted, values};
    const tf_dtype want[2] = {common, common};
    tf_op_call c;
    s = tf__op_begin(&c, fn, TF_OP_SEARCHSORTED, 2, in, want, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    tf__desc_into(&c.op.inputs[1], c.in[1]);
    c.op.params.flags = right ? TF_SEARCH_RIGHT : 0u;
    return tf__op_end(&c, TF_OK, TF_I64, values->ndim, values->shape, out);
}

/* ---- creation ops ---- */

static tf_status create(const char *fn, tf_op_kind kind, tf_device *dev, tf_dtype dt, int ndim,
                        const int64_t *shape, const tf_op_params *params, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: device is NULL", fn);
    tf_status s = tf__init();
    if (s == TF_OK) s = tf__check_shape(fn, dt, ndim, shape, NULL);
    if (s != TF_OK) return s;
    if (!accepts(kind, dt)) return dtype_not_accepted(fn, kind, dt);
    tf_op_call c;
    tf__op_begin(&c, fn, kind, 0, NULL, NULL, dev);
    c.op.params = *params;
    return tf__op_end(&c, TF_OK, dt, ndim, shape, out);
}

tf_status tf_full(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, double value, tf_tensor **out) {
    tf_op_params p = {.value = value};
    return create("tf_full", TF_OP_FILL, dev, dt, ndim, shape, &p, out);
}

tf_status tf_zeros(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out) {
    tf_op_params p = {.value = 0.0};
    return create("tf_zeros", TF_OP_FILL, dev, dt, ndim, shape, &p, out);
}

tf_status tf_ones(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out) {
    tf_op_params p = {.value = 1.0};
    return create("tf_ones", TF_OP_FILL, dev, dt, ndim, shape, &p, out);
}

tf_status tf_arange(tf_device *dev, tf_dtype dt, double start, double stop, double step, tf_tensor **out) {
    static const char fn[] = "tf_arange";
    if (out) *out = NULL;
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0.0)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: start %g, stop %g, step %g: need finite values and step != 0",
                         fn, start, stop, step);
    double count = ceil((stop - start) / step);
    if (count > 9.0e18) return tf__error(TF_ERR_SIZE, "%s: %g elements is too many", fn, count);
    int64_t n = count > 0 ? (int64_t)count : 0;
    tf_op_params p = {.value = start, .step = step};
    return create(fn, TF_OP_ARANGE, dev, dt, 1, &n, &p, out);
}

tf_status tf_rand(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, uint64_t seed, tf_tensor **out) {
    tf_op_params p = {.seed = seed};
    return create("tf_rand", TF_OP_RAND_UNIFORM, dev, dt, ndim, shape, &p, out);
}

tf_status tf_randn(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, uint64_t seed, tf_tensor **out) {
    tf_op_params p = {.seed = seed};
    return create("tf_randn", TF_OP_RAND_NORMAL, dev, dt, ndim, shape, &p, out);
}

/* ---- elementwise unary ---- */

static tf_status elementwise_unary(const char *fn, tf_op_kind kind, const tf_tensor *x, const tf_op_params *params,
                                   tf_tensor *into, tf_tensor **out) {
    if (!out && !into) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    if (out) *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (!accepts(kind, x->dtype)) return dtype_not_accepted(fn, kind, x->dtype);
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 1, &x, NULL, NULL);
    if (s != TF_OK) return s;
    c.into = into;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    if (params) c.op.params = *params;
    tf_dtype dt = tf__op_table[kind].dtype_rule == TF_DTRULE_REAL ? tf_dtype_to_real(x->dtype) : x->dtype;
    return tf__op_end(&c, TF_OK, dt, x->ndim, x->shape, out);
}

static tf_status unary(const char *fn, tf_op_kind kind, const tf_tensor *x, const tf_op_params *params,
                       tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    TF__GRAD(fn, out, unary(fn, kind, x, params, out),
             (ga_.rule = TF__GRAD_UNARY, ga_.op = kind, params ? (void)(ga_.p = *params) : (void)0), x);
    return elementwise_unary(fn, kind, x, params, NULL, out);
}

/* tf_neg, tf_exp, ...: one per unary formula without parameters. */
#define TF__UNARY_FN(KIND, name) \
    tf_status tf_##name(const tf_tensor *x, tf_tensor **out) { return unary("tf_" #name, TF_OP_##KIND, x, NULL, out); }
/* ... and those autocast runs in f32 */
#define TF__UNARY_F32_FN(KIND, name)                                              \
    tf_status tf_##name(const tf_tensor *x, tf_tensor **out) {                     \
        TF__AUTOCAST(TF__AUTOCAST_F32, "tf_" #name, out, tf_##name(x, out), &x);               \
        return unary("tf_" #name, TF_OP_##KIND, x, NULL, out);                     \
    }
TF_FORMULA_UNARY_API(TF__UNARY_FN)
TF_FORMULA_UNARY_API_F32(TF__UNARY_F32_FN)
#undef TF__UNARY_FN
#undef TF__UNARY_F32_FN

/* conj, real, imag: the ops of the complex dtypes; a real x is its own
 * conjugate and real part (a new reference) and has zero imaginary part. */
tf_status tf_conj(const tf_tensor *x, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_conj: out is NULL");
    if (x && !tf_dtype_is_complex(x->dtype) && x->dtype != TF_BOOL && !tf_dtype_is_quantized(x->dtype)) {
        *out = tf_tensor_retain((tf_tensor *)x);
        return TF_OK;
    }
    return unary("tf_conj", TF_OP_CONJ, x, NULL, out);
}

tf_status tf_real(const tf_tensor *x, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_real: out is NULL");
    if (x && !tf_dtype_is_complex(x->dtype) && x->dtype != TF_BOOL && !tf_dtype_is_quantized(x->dtype)) {
        *out = tf_tensor_retain((tf_tensor *)x);
        return TF_OK;
    }
    return unary("tf_real", TF_OP_REAL, x, NULL, out);
}

tf_status tf_imag(const tf_tensor *x, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_imag: out is NULL");
    if (x && !tf_dtype_is_complex(x->dtype) && x->dtype != TF_BOOL && !tf_dtype_is_quantized(x->dtype))
        return tf__in("tf_imag", tf_zeros(tf_tensor_device(x), x->dtype, x->ndim, x->shape, out));
    return unary("tf_imag", TF_OP_IMAG, x, NULL, out);
}

tf_status tf_leaky_relu(const tf_tensor *x, double negative_slope, tf_tensor **out) {
    tf_op_params p = {.alpha = negative_slope};
    return unary("tf_leaky_relu", TF_OP_LEAKY_RELU, x, &p, out);
}

tf_status tf_clamp(const tf_tensor *x, double lo, double hi, tf_tensor **out) {
    tf_op_params p = {.min_value = lo, .max_value = hi};
    return unary("tf_clamp", TF_OP_CLAMP, x, &p, out);
}

tf_status tf_scalar(tf_device *dev, tf_dtype dt, double value, tf_tensor **out) {
    tf_op_params p = {.value = value};
    return create("tf_scalar", TF_OP_FILL, dev, dt, 0, NULL, &p, out);
}

tf_status tf_eye(tf_device *dev, tf_dtype dt, int64_t n, int64_t m, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_eye: out is NULL");
    *out = NULL;
    int64_t shape[2] = {n, m};
    tf_status s = tf_zeros(dev, dt, 2, shape, out);     /* checks dev, dt and the shape */
    if (s != TF_OK) return tf__in("tf_eye", s);
    /* Write the ones element by element: n*m host bytes are never needed. */
    unsigned char one[8];
    tf_tensor *src = NULL;
    s = tf_ones(tf__cpu_device(), dt, 0, NULL, &src);
    if (s == TF_OK) s = tf_tensor_read(src, one, sizeof one);
    tf_tensor_release(src);
    size_t es = tf_dtype_size(dt);
    for (int64_t i = 0; s == TF_OK && i < (n < m ? n : m); i++)
        s = tf__upload((*out)->storage, (size_t)(i * m + i) * es, one, es);
    if (s != TF_OK) {
        tf_tensor_release(*out);
        *out = NULL;
    }
    return tf__in("tf_eye", s);
}

/* ---- ops with a bool result over one input ---- */

static tf_status unary_to_bool_into(const char *fn, tf_op_kind kind, const tf_tensor *x, tf_tensor *into,
                                    tf_tensor **out) {
    if (!out && !into) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    if (out) *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype want = tf__op_table[kind].dtype_rule == TF_DTRULE_LOGICAL ? TF_BOOL : TF_KEEP_DTYPE;
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 1, &x, &want, NULL);
    if (s != TF_OK) return s;
    c.into = into;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    return tf__op_end(&c, TF_OK, TF_BOOL, x->ndim, x->shape, out);
}

static tf_status unary_to_bool(const char *fn, tf_op_kind kind, const tf_tensor *x, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    return unary_to_bool_into(fn, kind, x, NULL, out);
}

tf_status tf_logical_not(const tf_tensor *x, tf_tensor **out) { return unary_to_bool("tf_logical_not", TF_OP_LOGICAL_NOT, x, out); }
tf_status tf_isnan(const tf_tensor *x, tf_tensor **out) { return unary_to_bool("tf_isnan", TF_OP_ISNAN, x, out); }
tf_status tf_isinf(const tf_tensor *x, tf_tensor **out) { return unary_to_bool("tf_isinf", TF_OP_ISINF, x, out); }

/* ---- where ---- */

static tf_status where_to(const char *fn, const tf_tensor *cond, const tf_tensor *a, const tf_tensor *b,
                          tf_tensor *into, tf_tensor **out) {
    if (!out && !into) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    if (out) *out = NULL;
    if (!cond || !a || !b) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype dt, da, db;
    int ndim = 0;
    int64_t shape[TF_MAX_DIMS];
    const tf_tensor *in[3] = {cond, a, b};
    promoting_dtypes(a, b, &da, &db);
    tf_status s = binary_dtype(fn, TF_OP_WHERE, da, db, &dt);
    if (s == TF_OK) s = broadcast_n(fn, 3, in, &ndim, shape);
    if (s != TF_OK) return s;
    tf_dtype want[3] = {TF_BOOL, dt, dt};
    tf_op_call c;
    s = tf__op_begin(&c, fn, TF_OP_WHERE, 3, in, want, NULL);
    if (s != TF_OK) return s;
    c.into = into;
    for (int i = 0; i < 3; i++) broadcast_desc_into(&c.op.inputs[i], c.in[i], ndim, shape);
    return tf__op_end(&c, TF_OK, dt, ndim, shape, out);
}

tf_status tf_where(const tf_tensor *cond, const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_where: out is NULL");
    TF__GRAD("tf_where", out, tf_where(cond, a, b, out), ga_.rule = TF__GRAD_WHERE, cond, a, b);
    return where_to("tf_where", cond, a, b, NULL, out);
}

/* ---- elementwise results into an existing tensor ---- */

/* dst must be a tensor no two indices share; the rest is checked once the
 * result's shape and dtype are known (tf__op_end). */
static tf_status into_target(const char *fn, const tf_tensor *dst) {
    if (!dst) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: dst is NULL", fn);
    if (tf__overlaps_itself(dst))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: dst maps several indices to one element (a broadcast view)", fn);
    return TF_OK;
}

static bool takes_parameters(tf_op_kind op) { return op == TF_OP_CLAMP || op == TF_OP_LEAKY_RELU; }

tf_status tf_unary_into(tf_tensor *dst, tf_op_kind op, const tf_tensor *x) {
    static const char fn[] = "tf_unary_into";
    tf_status s = into_target(fn, dst);
    if (s != TF_OK) return s;
    if ((unsigned)op >= TF_OP_COUNT || tf__op_table[op].shape_rule != TF_SHAPE_UNARY)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s is not an elementwise op of one input", fn, tf_op_name(op));
    if (takes_parameters(op))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s takes parameters (use tf_%s, then tf_copy_into)", fn,
                         tf_op_name(op), tf_op_name(op));
    if (tf_op_kernel_of(op) == TF_KERNEL_PREDICATE) return unary_to_bool_into(fn, op, x, dst, NULL);
    return elementwise_unary(fn, op, x, NULL, dst, NULL);
}

tf_status tf_binary_into(tf_tensor *dst, tf_op_kind op, const tf_tensor *a, const tf_tensor *b) {
    static const char fn[] = "tf_binary_into";
    tf_status s = into_target(fn, dst);
    if (s != TF_OK) return s;
    if ((unsigned)op >= TF_OP_COUNT || tf__op_table[op].shape_rule != TF_SHAPE_BROADCAST)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s is not an elementwise op of two inputs", fn,
                         tf_op_name(op));
    return elementwise_binary(fn, op, a, b, dst, NULL);
}

tf_status tf_where_into(tf_tensor *dst, const tf_tensor *cond, const tf_tensor *a, const tf_tensor *b) {
    static const char fn[] = "tf_where_into";
    tf_status s = into_target(fn, dst);
    return s != TF_OK ? s : where_to(fn, cond, a, b, dst, NULL);
}

/* ---- complex from parts ---- */

/* One part of a complex tensor's real view as a view of the complex shape. */
static tf_status part_view(const tf_tensor *as_real, int part, tf_tensor **out) {
    tf_tensor *col = NULL;
    tf_status s = tf_slice(as_real, -1, part, part + 1, 1, &col);
    if (s == TF_OK) s = tf_squeeze(col, -1, out);
    tf_tensor_release(col);
    return s;
}

tf_status tf_complex(const tf_tensor *re, const tf_tensor *im, tf_tensor **out) {
    static const char fn[] = "tf_complex";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!re || !im) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    tf_dtype part;
    tf_status s = tf_promote_types(re->dtype, im->dtype, &part);
    if (s != TF_OK) return tf__in(fn, s);
    if (tf_dtype_is_complex(part) || part == TF_BOOL)
        return tf__error(TF_ERR_DTYPE, "%s: takes real numeric parts, not %s and %s", fn, tf_dtype_name(re->dtype),
                         tf_dtype_name(im->dtype));
    int ndim = 0;
    int64_t shape[TF_MAX_DIMS];
    const tf_tensor *in[2] = {re, im};
    s = broadcast_n(fn, 2, in, &ndim, shape);
    if (s != TF_OK) return s;
    tf_tensor *z = NULL, *parts = NULL, *dst[2] = {NULL, NULL};
    s = tf_empty(tf_tensor_device(re), tf_dtype_to_complex(part), ndim, shape, &z);
    if (s == TF_OK) s = tf_view_as_real(z, &parts);
    for (int k = 0; k < 2 && s == TF_OK; k++) {
        s = part_view(parts, k, &dst[k]);
        if (s == TF_OK) s = tf_copy_into(dst[k], in[k]);
    }
    tf_tensor_release(dst[0]);
    tf_tensor_release(dst[1]);
    tf_tensor_release(parts);
    if (s != TF_OK) {
        tf_tensor_release(z);
        return tf__in(fn, s);
    }
    *out = z;
    return TF_OK;
}
