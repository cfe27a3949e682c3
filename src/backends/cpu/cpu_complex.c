/* The complex dtypes' kernels (c64, c128): every op the op table lets them
 * take, any strides, computed in C99's double complex and rounded once to
 * the output. glibc's cexp, clog, csqrt, ... follow C's Annex G for
 * infinities and NaN, which is what the array API's special cases for
 * complex inputs spell out; products and quotients use GCC's Annex G
 * multiply and divide (no -fcx-limited-range). These are the reference and
 * the only complex kernels: other backends decline complex ops and the core
 * runs them here. */
#include <complex.h>

#include "cpu_common.h"

typedef double complex zdouble;

/* re + i im exactly (infinities and NaN kept apart; re + im * I is not):
 * C11's CMPLX, which clang's headers here lack. */
static inline zdouble zmake(double re, double im) {
    union { zdouble z; double part[2]; } u;
    u.part[0] = re;
    u.part[1] = im;
    return u.z;
}

/* ---- element access: any dtype as a complex value and back ---- */

static inline zdouble load_z(tf_dtype dt, const char *p) {
    if (dt == TF_C64) return zmake(LD_f32(p), LD_f32(p + 4));
    if (dt == TF_C128) return zmake(LD_f64(p), LD_f64(p + 8));
    return zmake(load_f64(dt, p), 0.0);
}

/* To a real dtype: the real part (NumPy's and PyTorch's cast), to bool:
 * whether either part is nonzero. */
static inline void store_z(tf_dtype dt, char *p, zdouble z) {
    switch (dt) {
    case TF_C64: ST_f32(p, creal(z)); ST_f32(p + 4, cimag(z)); break;
    case TF_C128: ST_f64(p, creal(z)); ST_f64(p + 8, cimag(z)); break;
    case TF_BOOL: *(uint8_t *)p = creal(z) != 0.0 || cimag(z) != 0.0; break;
    default: store_f64(dt, p, creal(z)); break;
    }
}

static inline bool z_isnan(zdouble z) { return isnan(creal(z)) || isnan(cimag(z)); }
static inline bool z_isinf(zdouble z) { return isinf(creal(z)) || isinf(cimag(z)); }
static inline bool z_true(zdouble z) { return creal(z) != 0.0 || cimag(z) != 0.0; }

/* ---- unary math ---- */

/* log(1 + z) without losing small z: the modulus through log1p. */
static zdouble z_log1p(zdouble z) {
    double x = creal(z), y = cimag(z);
    if (!isfinite(x) || !isfinite(y) || fabs(x) > 0.5 || fabs(y) > 0.5) return clog(1.0 + z);
    return zmake(0.5 * log1p(x * (2.0 + x) + y * y), atan2(y, 1.0 + x));
}

/* exp(z) - 1 without losing small z: expm1(x) cos y - 2 sin^2(y/2). */
static zdouble z_expm1(zdouble z) {
    double x = creal(z), y = cimag(z);
    if (!isfinite(x) || !isfinite(y)) return cexp(z) - 1.0;
    if (x == 0.0 && y == 0.0) return zmake(0.0, y);       /* +0 for either zero (the array API's case) */
    double h = sin(0.5 * y);
    return zmake(expm1(x) * cos(y) - 2.0 * h * h, exp(x) * sin(y));
}

/* z / |z|, 0 at 0 (the array API's sign); NaN parts give NaN, the rest
 * follows division (an infinite part gives NaN parts, as inf / inf). */
static zdouble z_sign(zdouble z) {
    if (z_isnan(z)) return zmake(NAN, NAN);
    double m = cabs(z);
    if (m == 0.0) return zmake(0.0, 0.0);
    return zmake(creal(z) / m, cimag(z) / m);
}

static zdouble z_unary(tf_op_kind k, zdouble z) {
    switch (k) {
    case TF_OP_COPY: return z;
    case TF_OP_NEG: return zmake(-creal(z), -cimag(z));
    case TF_OP_CONJ: return conj(z);
    case TF_OP_ABS: return zmake(cabs(z), 0.0);
    case TF_OP_REAL: return zmake(creal(z), 0.0);
    case TF_OP_IMAG: return zmake(cimag(z), 0.0);
    case TF_OP_SIGN: return z_sign(z);
    case TF_OP_EXP: return cexp(z);
    case TF_OP_LOG: return clog(z);
    case TF_OP_LOG1P: return z_log1p(z);
    case TF_OP_EXPM1: return z_expm1(z);
    case TF_OP_SQRT: return csqrt(z);
    case TF_OP_SIN: return csin(z);
    case TF_OP_COS: return ccos(z);
    case TF_OP_TANH:                                 /* +-1 + 0i with y's sign at x = +-inf (the array API's */
        if (isinf(creal(z)) && isfinite(cimag(z)))   /* case; C's sign is sin(2y)'s) */
            return zmake(copysign(1.0, creal(z)), copysign(0.0, cimag(z)));
        return ctanh(z);
    case TF_OP_ASIN: return casin(z);
    case TF_OP_ACOS: return cacos(z);
    case TF_OP_ATAN: return catan(z);
    case TF_OP_ASINH: return casinh(z);
    case TF_OP_ACOSH: return cacosh(z);
    case TF_OP_ATANH: return catanh(z);
    case TF_OP_ROUND: return zmake(rint(creal(z)), rint(cimag(z)));
    default: return zmake(NAN, NAN);
    }
}

static bool unary_complex(tf_op_kind k) {
    switch (k) {
    case TF_OP_NEG: case TF_OP_CONJ: case TF_OP_ABS: case TF_OP_REAL: case TF_OP_IMAG: case TF_OP_SIGN:
    case TF_OP_EXP: case TF_OP_LOG: case TF_OP_LOG1P: case TF_OP_EXPM1: case TF_OP_SQRT: case TF_OP_SIN:
    case TF_OP_COS: case TF_OP_TANH: case TF_OP_ASIN: case TF_OP_ACOS: case TF_OP_ATAN: case TF_OP_ASINH:
    case TF_OP_ACOSH: case TF_OP_ATANH: case TF_OP_ROUND:
        return true;
    default: return false;
    }
}

/* ---- elementwise loops: output then inputs, as for_each_row lays them ---- */

typedef struct ew_ctx {
    const tf_op *op;
} ew_ctx;

static void unary_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const tf_op *op = ((const ew_ctx *)ctxv)->op;
    tf_dtype to = op->output.dtype, from = op->inputs[0].dtype;
    char *o = p[0];
    const char *x = p[1];
    for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) store_z(to, o, z_unary(op->kind, load_z(from, x)));
}

static bool predicate(tf_op_kind k, zdouble z) {
    switch (k) {
    case TF_OP_ISNAN: return z_isnan(z);
    case TF_OP_ISINF: return z_isinf(z);
    default: return !z_true(z);                      /* logical_not */
    }
}

static void predicate_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const tf_op *op = ((const ew_ctx *)ctxv)->op;
    tf_dtype from = op->inputs[0].dtype;
    char *o = p[0];
    const char *x = p[1];
    for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) *(uint8_t *)o = predicate(op->kind, load_z(from, x));
}

static zdouble z_binary(tf_op_kind k, zdouble a, zdouble b) {
    switch (k) {
    case TF_OP_ADD: return a + b;
    case TF_OP_SUB: return a - b;
    case TF_OP_MUL: return a * b;                    /* Annex G: __muldc3 */
    case TF_OP_DIV: return a / b;                    /* Annex G: __divdc3 */
    case TF_OP_POW: return cpow(a, b);
    default: return zmake(NAN, NAN);
    }
}

static bool binary_complex(tf_op_kind k) {
    return k == TF_OP_ADD || k == TF_OP_SUB || k == TF_OP_MUL || k == TF_OP_DIV || k == TF_OP_POW;
}

static void binary_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const tf_op *op = ((const ew_ctx *)ctxv)->op;
    tf_dtype to = op->output.dtype, da = op->inputs[0].dtype, db = op->inputs[1].dtype;
    char *o = p[0];
    const char *a = p[1], *b = p[2];
    for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2])
        store_z(to, o, z_binary(op->kind, load_z(da, a), load_z(db, b)));
}

static bool compare(tf_op_kind k, zdouble a, zdouble b) {
    switch (k) {
    case TF_OP_EQ: return creal(a) == creal(b) && cimag(a) == cimag(b);
    case TF_OP_NE: return !(creal(a) == creal(b) && cimag(a) == cimag(b));
    case TF_OP_LOGICAL_AND: return z_true(a) && z_true(b);
    default: return z_true(a) || z_true(b);          /* logical_or */
    }
}

static void compare_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const tf_op *op = ((const ew_ctx *)ctxv)->op;
    tf_dtype da = op->inputs[0].dtype, db = op->inputs[1].dtype;
    char *o = p[0];
    const char *a = p[1], *b = p[2];
    for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2])
        *(uint8_t *)o = compare(op->kind, load_z(da, a), load_z(db, b));
}

static tf_status run_elementwise(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[TF_OP_MAX_INPUTS + 1];
    ops[0] = make_operand(&op->output, address);
    for (int i = 0; i < op->n_inputs; i++) ops[i + 1] = make_operand(&op->inputs[i], address);
    ew_ctx ctx = {op};
    row_fn fn;
    switch (tf_op_kernel_of(op->kind)) {
    case TF_KERNEL_ARITH: fn = binary_row; break;
    case TF_KERNEL_COMPARE: fn = compare_row; break;
    case TF_KERNEL_PREDICATE: fn = predicate_row; break;
    default: fn = unary_row; break;                  /* MATH, COPY (a cast is the identity's store) */
    }
    for_each_row_parallel(op->output.ndim, op->output.shape, op->n_inputs + 1, ops, fn, &ctx);
    return TF_OK;
}

/* COPY: the identity, stored into the output's dtype (store_z casts). */
static tf_status run_copy(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
    ew_ctx ctx = {op};
    for_each_row_parallel(op->output.ndim, op->output.shape, 2, ops, unary_row, &ctx);
    return TF_OK;
}

/* ---- reductions: sum, prod, mean ---- */

/* Every input element once, its output element found by dropping the
 * reduced coordinates (the output is keepdim-shaped: extent 1 there). */
static tf_status run_reduce(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    operand x = make_operand(X, address), o = make_operand(O, address);
    int64_t n_out = tf_desc_numel(O), n_in = tf_desc_numel(X);
    zdouble *acc = tf_cpu_alloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *acc);
    if (!acc) return tf_cpu_oom("complex reduction", (size_t)n_out * sizeof *acc);
    zdouble init = op->kind == TF_OP_PROD ? 1.0 : 0.0;
    for (int64_t i = 0; i < n_out; i++) acc[i] = init;
    int64_t idx[TF_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n_in; i++) {
        const char *xp = x.base;
        int64_t oi = 0;
        for (int d = 0; d < X->ndim; d++) {
            xp += idx[d] * x.stride[d];
            oi = oi * O->shape[d] + (O->shape[d] == 1 ? 0 : idx[d]);
        }
        zdouble v = load_z(X->dtype, xp);
        acc[oi] = op->kind == TF_OP_PROD ? acc[oi] * v : acc[oi] + v;
        next_index(X->ndim, X->shape, idx);
    }
    double count = n_out ? (double)n_in / (double)n_out : 0.0;
    memset(idx, 0, sizeof idx);
    for (int64_t i = 0; i < n_out; i++) {
        char *op_ = o.base;
        for (int d = 0; d < O->ndim; d++) op_ += idx[d] * o.stride[d];
        store_z(O->dtype, op_, op->kind == TF_OP_MEAN ? acc[i] / count : acc[i]);
        next_index(O->ndim, O->shape, idx);
    }
    tf_cpu_free(acc);
    return TF_OK;
}

/* ---- matmul and gemm: i-k-j over each matrix of the batch ---- */

typedef struct zmm {
    const tf_op *op;
    operand a, b, c, o;
    int nb;                                          /* batch axes */
    int64_t m, k, n;
    bool gemm, has_c;
    zdouble alpha, beta;
} zmm;

static void zmm_matrix(const zmm *g, const char *a, const char *b, const char *c, char *o, zdouble *acc) {
    int nb = g->nb;
    tf_dtype at = g->op->inputs[0].dtype, bt = g->op->inputs[1].dtype, ot = g->op->output.dtype;
    for (int64_t i = 0; i < g->m; i++) {
        for (int64_t j = 0; j < g->n; j++) acc[j] = 0;
        for (int64_t kk = 0; kk < g->k; kk++) {
            zdouble av = load_z(at, a + i * g->a.stride[nb] + kk * g->a.stride[nb + 1]);
            const char *brow = b + kk * g->b.stride[nb];
            for (int64_t j = 0; j < g->n; j++) acc[j] += av * load_z(bt, brow + j * g->b.stride[nb + 1]);
        }
        for (int64_t j = 0; j < g->n; j++) {
            zdouble v = acc[j];
            if (g->gemm) {
                v *= g->alpha;
                if (g->has_c)
                    v += g->beta * load_z(g->op->inputs[2].dtype, c + i * g->c.stride[nb] + j * g->c.stride[nb + 1]);
            }
            store_z(ot, o + i * g->o.stride[nb] + j * g->o.stride[nb + 1], v);
        }
    }
}

static tf_status run_matmul(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *O = &op->output;
    zmm g = {.op = op, .a = make_operand(&op->inputs[0], address), .b = make_operand(&op->inputs[1], address),
             .o = make_operand(O, address), .nb = O->ndim - 2};
    g.m = O->shape[g.nb];
    g.k = op->inputs[0].shape[g.nb + 1];
    g.n = O->shape[g.nb + 1];
    g.gemm = op->kind == TF_OP_GEMM;
    g.has_c = g.gemm && op->n_inputs > 2 && op->params.beta != 0;
    g.c = g.has_c ? make_operand(&op->inputs[2], address) : g.o;
    g.alpha = op->params.alpha;
    g.beta = op->params.beta;
    zdouble *acc = tf_cpu_alloc((size_t)(g.n > 0 ? g.n : 1) * sizeof *acc);
    if (!acc) return tf_cpu_oom("complex matmul", (size_t)(g.n > 0 ? g.n : 1) * sizeof *acc);
    for (int d = 0; d < O->ndim; d++)
        if (O->shape[d] == 0) g.m = 0;               /* nothing to write */
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        int64_t ao = 0, bo = 0, co = 0, oo = 0;
        for (int d = 0; d < g.nb; d++) {
            ao += idx[d] * g.a.stride[d];
            bo += idx[d] * g.b.stride[d];
            co += idx[d] * g.c.stride[d];
            oo += idx[d] * g.o.stride[d];
        }
        if (g.m) zmm_matrix(&g, g.a.base + ao, g.b.base + bo, g.c.base + co, g.o.base + oo, acc);
    } while (g.m && g.nb > 0 && next_index(g.nb, O->shape, idx));
    tf_cpu_free(acc);
    return TF_OK;
}

/* ---- the table's complex entries ---- */

bool tf_cpu_complex_supports(const tf_op *op) {
    tf_dtype out = op->output.dtype, in = op->n_inputs ? op->inputs[0].dtype : out;
    tf_op_kind k = op->kind;
    switch (tf_op_kernel_of(k)) {
    case TF_KERNEL_ARITH: return binary_complex(k) && is_complex(out) && in == out && op->inputs[1].dtype == out;
    case TF_KERNEL_COMPARE:
        return (k == TF_OP_EQ || k == TF_OP_NE || k == TF_OP_LOGICAL_AND || k == TF_OP_LOGICAL_OR) &&
               op->inputs[1].dtype == in && out == TF_BOOL;
    case TF_KERNEL_PREDICATE: return out == TF_BOOL;
    case TF_KERNEL_MATH:
        if (!unary_complex(k) || !is_complex(in)) return false;
        return k == TF_OP_ABS || k == TF_OP_REAL || k == TF_OP_IMAG ? out == tf_dtype_to_real(in) : out == in;
    case TF_KERNEL_MATMUL:
        if (k != TF_OP_MATMUL && k != TF_OP_GEMM) return false;
        for (int i = 0; i < op->n_inputs; i++)
            if (op->inputs[i].dtype != out) return false;
        return is_complex(out);
    case TF_KERNEL_REDUCE: return (k == TF_OP_SUM || k == TF_OP_PROD || k == TF_OP_MEAN) && out == in;
    case TF_KERNEL_COPY: return !tf_dtype_is_quantized(in) && !tf_dtype_is_quantized(out);
    case TF_KERNEL_SELECT:
        return op->inputs[0].dtype == TF_BOOL && op->inputs[1].dtype == out && op->inputs[2].dtype == out;
    case TF_KERNEL_PICK: return out == in && (op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64);
    case TF_KERNEL_TRIANGLE: return out == in && op->output.ndim >= 2;
    case TF_KERNEL_FILL: return true;
    default: return false;
    }
}

/* Entries keyed by the complex dtype (tf_cpu_table_dtype: a complex input
 * keys its op). where, picks, triangles and fills keep the reference's
 * whole-element kernels, which move elsize bytes whatever the dtype. */
void tf_cpu_complex_install(tf_cpu_table *t) {
    static const tf_dtype cdts[] = {TF_C64, TF_C128};
    for (int k = 0; k < TF_OP_COUNT; k++)
        for (size_t i = 0; i < sizeof cdts / sizeof *cdts; i++) {
            tf_dtype dt = cdts[i];
            tf_cpu_kernel fn = NULL;
            switch (tf_op_kernel_of((tf_op_kind)k)) {
            case TF_KERNEL_ARITH: fn = binary_complex((tf_op_kind)k) ? run_elementwise : NULL; break;
            case TF_KERNEL_COMPARE: case TF_KERNEL_PREDICATE: fn = run_elementwise; break;
            case TF_KERNEL_MATH: fn = unary_complex((tf_op_kind)k) ? run_elementwise : NULL; break;
            case TF_KERNEL_MATMUL: fn = k == TF_OP_MATMUL || k == TF_OP_GEMM ? run_matmul : NULL; break;
            case TF_KERNEL_REDUCE: fn = k == TF_OP_SUM || k == TF_OP_PROD || k == TF_OP_MEAN ? run_reduce : NULL; break;
            case TF_KERNEL_COPY: fn = run_copy; break;
            case TF_KERNEL_SELECT: case TF_KERNEL_PICK: case TF_KERNEL_TRIANGLE: case TF_KERNEL_FILL:
                fn = t->fn[k][dt];
                break;
            default: break;
            }
            t->fn[k][dt] = fn;
        }
}
