/* CPU reference kernels. Each works on any strides: an N-d odometer walks
 * every axis but the last and hands rows to a typed inner loop, NumPy
 * ufunc style. f16/bf16 are computed in f32, integer arithmetic wraps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "fast_kernels.h"
#include "cpu_kernels.h"
#include "tensorframe/numerics.h"
#include "threadpool.h"

/* ---- typed element access ---- */

#define LD_f32(p) (*(const float *)(p))
#define LD_f64(p) (*(const double *)(p))
#define LD_f16(p) tf_f16_to_f32(*(const uint16_t *)(p))
#define LD_bf16(p) tf_bf16_to_f32(*(const uint16_t *)(p))
#define LD_i8(p) ((int64_t) * (const int8_t *)(p))
#define LD_i32(p) ((int64_t) * (const int32_t *)(p))
#define LD_i64(p) (*(const int64_t *)(p))
#define LD_u8(p) ((int64_t) * (const uint8_t *)(p))
#define LD_b8(p) ((int64_t)(*(const uint8_t *)(p) != 0))
#define ST_f32(p, v) (*(float *)(p) = (float)(v))
#define ST_f64(p, v) (*(double *)(p) = (double)(v))
#define ST_f16(p, v) (*(uint16_t *)(p) = tf_f32_to_f16((float)(v)))
#define ST_bf16(p, v) (*(uint16_t *)(p) = tf_f32_to_bf16((float)(v)))
/* Integer narrowing wraps (two's complement, as GCC and Clang define it). */
#define ST_i8(p, v) (*(int8_t *)(p) = (int8_t)(uint8_t)(uint64_t)(v))
#define ST_i32(p, v) (*(int32_t *)(p) = (int32_t)(uint32_t)(uint64_t)(v))
#define ST_i64(p, v) (*(int64_t *)(p) = (int64_t)(uint64_t)(v))
#define ST_u8(p, v) (*(uint8_t *)(p) = (uint8_t)(uint64_t)(v))

static size_t elsize(tf_dtype dt) {
    static const size_t sizes[TF_DTYPE_COUNT] = {
#define TF__SZ(E, n, sz, fl, in) sz,
        TF_DTYPE_LIST(TF__SZ)
#undef TF__SZ
    };
    return sizes[dt];
}

static bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }

/* Any dtype as double / as int64 (bool is 0 or 1). */
static double load_f64(tf_dtype dt, const char *p) {
    switch (dt) {
    case TF_F32: return LD_f32(p);
    case TF_F64: return LD_f64(p);
    case TF_F16: return LD_f16(p);
    case TF_BF16: return LD_bf16(p);
    case TF_I8: return (double)LD_i8(p);
    case TF_I32: return (double)LD_i32(p);
    case TF_I64: return (double)LD_i64(p);
    case TF_U8: return (double)LD_u8(p);
    case TF_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return 0.0;
    }
}

static int64_t load_i64(tf_dtype dt, const char *p) {
    switch (dt) {
    case TF_I8: return LD_i8(p);
    case TF_I32: return LD_i32(p);
    case TF_I64: return LD_i64(p);
    case TF_U8: return LD_u8(p);
    case TF_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: return (int64_t)load_f64(dt, p);
    }
}

/* Truncate toward zero and saturate; NaN becomes 0. */
static int64_t saturate(double v, int64_t min, int64_t max) {
    if (v != v) return 0;
    if (v <= (double)min) return min;
    if (v >= (double)max) return max;
    return (int64_t)v;
}

static void store_f64(tf_dtype dt, char *p, double v) {
    switch (dt) {
    case TF_F32: ST_f32(p, v); break;
    case TF_F64: ST_f64(p, v); break;
    case TF_F16: ST_f16(p, v); break;
    case TF_BF16: ST_bf16(p, v); break;
    case TF_I8: *(int8_t *)p = (int8_t)saturate(v, INT8_MIN, INT8_MAX); break;
    case TF_I32: *(int32_t *)p = (int32_t)saturate(v, INT32_MIN, INT32_MAX); break;
    case TF_I64: *(int64_t *)p = saturate(v, INT64_MIN, INT64_MAX); break;
    case TF_U8: *(uint8_t *)p = (uint8_t)saturate(v, 0, UINT8_MAX); break;
    case TF_BOOL: *(uint8_t *)p = v != 0.0; break;   /* NaN is true */
    default: break;
    }
}

static void store_i64(tf_dtype dt, char *p, int64_t v) {
    switch (dt) {
    case TF_I8: ST_i8(p, v); break;
    case TF_I32: ST_i32(p, v); break;
    case TF_I64: ST_i64(p, v); break;
    case TF_U8: ST_u8(p, v); break;
    case TF_BOOL: *(uint8_t *)p = v != 0; break;
    default: store_f64(dt, p, (double)v); break;
    }
}

/* ---- strided iteration ---- */

typedef struct operand {
    char *base;
    int64_t stride[TF_MAX_DIMS];         /* bytes */
} operand;

static operand make_operand(const tf_tensor_desc *d, tf_cpu_address_fn address) {
    operand o;
    o.base = address(d->buffer) + d->offset;
    for (int i = 0; i < d->ndim; i++) o.stride[i] = d->strides[i] * (int64_t)elsize(d->dtype);
    return o;
}

typedef void (*row_fn)(const void *ctx, int64_t n, char **p, const int64_t *s);

/* Advance an odometer over the first `ndim` axes; false when it wraps. */
static bool next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* Calls fn once per innermost row of `shape` for `nops` operands. */
static void for_each_row(int ndim, const int64_t *shape, int nops, const operand *ops, row_fn fn,
                         const void *ctx) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) return;
    char *p[TF_OP_MAX_INPUTS + 1];
    int64_t s[TF_OP_MAX_INPUTS + 1] = {0}, idx[TF_MAX_DIMS] = {0};
    int64_t inner = ndim ? shape[ndim - 1] : 1;
    for (int k = 0; k < nops; k++) s[k] = ndim ? ops[k].stride[ndim - 1] : 0;
    do {
        for (int k = 0; k < nops; k++) {
            p[k] = ops[k].base;
            for (int d = 0; d < ndim - 1; d++) p[k] += idx[d] * ops[k].stride[d];
        }
        fn(ctx, inner, p, s);
    } while (ndim > 1 && next_index(ndim - 1, shape, idx));
}

/* The same walk over rows [begin, end) of the outer index space. */
typedef struct rows_job {
    int ndim, nops;
    const int64_t *shape;
    const operand *ops;
    row_fn fn;
    const void *ctx;
} rows_job;

static void rows_chunk(void *jv, int64_t begin, int64_t end) {
    const rows_job *j = jv;
    char *p[TF_OP_MAX_INPUTS + 1];
    int64_t s[TF_OP_MAX_INPUTS + 1] = {0}, idx[TF_MAX_DIMS] = {0};
    int64_t inner = j->shape[j->ndim - 1];
    for (int k = 0; k < j->nops; k++) s[k] = j->ops[k].stride[j->ndim - 1];
    for (int64_t d = j->ndim - 2, rest = begin; d >= 0; d--) {
        idx[d] = rest % j->shape[d];
        rest /= j->shape[d];
    }
    for (int64_t r = begin; r < end; r++) {
        for (int k = 0; k < j->nops; k++) {
            p[k] = j->ops[k].base;
            for (int d = 0; d < j->ndim - 1; d++) p[k] += idx[d] * j->ops[k].stride[d];
        }
        j->fn(j->ctx, inner, p, s);
        next_index(j->ndim - 1, j->shape, idx);
    }
}

/* for_each_row, with rows spread over the pool when there is enough work. */
static void for_each_row_parallel(int ndim, const int64_t *shape, int nops, const operand *ops, row_fn fn,
                                  const void *ctx) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) return;
    for (int d = 0; d < ndim - 1; d++) rows *= shape[d];
    if (ndim < 2 || rows * inner < (1 << 16)) {
        for_each_row(ndim, shape, nops, ops, fn, ctx);
        return;
    }
    rows_job j = {ndim, nops, shape, ops, fn, ctx};
    tf_cpu_parallel_for(rows, (1 << 15) / inner + 1, rows_chunk, &j);
}

/* ---- elementwise binary ---- */

typedef void (*binary_loop)(int64_t n, char **p, const int64_t *s);

#define OP_ADD(x, y) ((x) + (y))
#define OP_SUB(x, y) ((x) - (y))
#define OP_MUL(x, y) ((x) * (y))
#define OP_DIV(x, y) ((x) / (y))
#define FOP_MAX(x, y) (isnan(x) || isnan(y) ? (x) + (y) : (x) > (y) ? (x) : (y))
#define FOP_MIN(x, y) (isnan(x) || isnan(y) ? (x) + (y) : (x) < (y) ? (x) : (y))
#define FOP_POW(x, y) _Generic((x), float: powf, default: pow)(x, y)
#define FOP_SWIGLU(x, y) ((x) / (1 + _Generic((x), float: expf, default: exp)(-(x))) * (y))
#define IOP_ADD(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define IOP_SUB(x, y) ((int64_t)((uint64_t)(x) - (uint64_t)(y)))
#define IOP_MUL(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
#define IOP_MAX(x, y) ((x) > (y) ? (x) : (y))
#define IOP_MIN(x, y) ((x) < (y) ? (x) : (y))
#define IOP_POW(x, y) int_pow(x, y)

/* Integer power by squaring, wrapping; negative exponents give 0 except
 * for bases 1 and -1 (what repeated division would round to). */
static int64_t int_pow(int64_t base, int64_t e) {
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

#define DEF_BIN(NAME, DT, CT, EXPR)                                              \
    static void bin_##NAME##_##DT(int64_t n, char **p, const int64_t *s) {     \
        char *o = p[0];                                                         \
        const char *a = p[1], *b = p[2];                                        \
        for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2]) {     \
            CT x = (CT)LD_##DT(a), y = (CT)LD_##DT(b);                          \
            ST_##DT(o, EXPR(x, y));                                             \
        }                                                                       \
    }
#define DEF_FLOAT_BINS(DT, CT)                                                   \
    DEF_BIN(add, DT, CT, OP_ADD) DEF_BIN(sub, DT, CT, OP_SUB) DEF_BIN(mul, DT, CT, OP_MUL) \
    DEF_BIN(div, DT, CT, OP_DIV) DEF_BIN(maximum, DT, CT, FOP_MAX) DEF_BIN(minimum, DT, CT, FOP_MIN) \
    DEF_BIN(pow, DT, CT, FOP_POW) DEF_BIN(swiglu, DT, CT, FOP_SWIGLU)
#define DEF_INT_BINS(DT)                                                         \
    DEF_BIN(add, DT, int64_t, IOP_ADD) DEF_BIN(sub, DT, int64_t, IOP_SUB) DEF_BIN(mul, DT, int64_t, IOP_MUL) \
    DEF_BIN(maximum, DT, int64_t, IOP_MAX) DEF_BIN(minimum, DT, int64_t, IOP_MIN) DEF_BIN(pow, DT, int64_t, IOP_POW)

/* Comparisons (and logic on bools): typed inputs, a bool output. */
#define DEF_CMP(NAME, DT, CT, EXPR)                                              \
    static void cmp_##NAME##_##DT(int64_t n, char **p, const int64_t *s) {     \
        char *o = p[0];                                                         \
        const char *a = p[1], *b = p[2];                                        \
        for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2]) {     \
            CT x = (CT)LD_##DT(a), y = (CT)LD_##DT(b);                          \
            *(uint8_t *)o = (uint8_t)(EXPR);                                    \
        }                                                                       \
    }
#define DEF_CMPS(DT, CT)                                                                     \
    DEF_CMP(eq, DT, CT, x == y) DEF_CMP(ne, DT, CT, x != y) DEF_CMP(lt, DT, CT, x < y)       \
    DEF_CMP(le, DT, CT, x <= y) DEF_CMP(gt, DT, CT, x > y) DEF_CMP(ge, DT, CT, x >= y)
DEF_CMPS(f32, float)
DEF_CMPS(f64, double)
DEF_CMPS(f16, float)
DEF_CMPS(bf16, float)
DEF_CMPS(i8, int64_t)
DEF_CMPS(i32, int64_t)
DEF_CMPS(i64, int64_t)
DEF_CMPS(u8, int64_t)
DEF_CMPS(b8, int64_t)
DEF_CMP(and, b8, int64_t, x && y)
DEF_CMP(or, b8, int64_t, x || y)

#define CMP_ROW(OP)                                                                                          \
    {[TF_F32] = cmp_##OP##_f32, [TF_F64] = cmp_##OP##_f64, [TF_F16] = cmp_##OP##_f16, [TF_BF16] = cmp_##OP##_bf16, \
     [TF_I8] = cmp_##OP##_i8,   [TF_I32] = cmp_##OP##_i32, [TF_I64] = cmp_##OP##_i64, [TF_U8] = cmp_##OP##_u8,     \
     [TF_BOOL] = cmp_##OP##_b8}

DEF_FLOAT_BINS(f32, float)
DEF_FLOAT_BINS(f64, double)
DEF_FLOAT_BINS(f16, float)
DEF_FLOAT_BINS(bf16, float)
DEF_INT_BINS(i8)
DEF_INT_BINS(i32)
DEF_INT_BINS(i64)
DEF_INT_BINS(u8)

#define FLOAT_ROW(OP) \
    [TF_F32] = bin_##OP##_f32, [TF_F64] = bin_##OP##_f64, [TF_F16] = bin_##OP##_f16, [TF_BF16] = bin_##OP##_bf16
#define INT_ROW(OP) [TF_I8] = bin_##OP##_i8, [TF_I32] = bin_##OP##_i32, [TF_I64] = bin_##OP##_i64, [TF_U8] = bin_##OP##_u8

static const binary_loop binary_loops[TF_OP_COUNT][TF_DTYPE_COUNT] = {
    [TF_OP_ADD] = {FLOAT_ROW(add), INT_ROW(add)},
    [TF_OP_SUB] = {FLOAT_ROW(sub), INT_ROW(sub)},
    [TF_OP_MUL] = {FLOAT_ROW(mul), INT_ROW(mul)},
    [TF_OP_DIV] = {FLOAT_ROW(div)},
    [TF_OP_MAXIMUM] = {FLOAT_ROW(maximum), INT_ROW(maximum)},
    [TF_OP_MINIMUM] = {FLOAT_ROW(minimum), INT_ROW(minimum)},
    [TF_OP_POW] = {FLOAT_ROW(pow), INT_ROW(pow)},
    [TF_OP_SWIGLU] = {FLOAT_ROW(swiglu)},
    [TF_OP_EQ] = CMP_ROW(eq), [TF_OP_NE] = CMP_ROW(ne), [TF_OP_LT] = CMP_ROW(lt),
    [TF_OP_LE] = CMP_ROW(le), [TF_OP_GT] = CMP_ROW(gt), [TF_OP_GE] = CMP_ROW(ge),
    [TF_OP_LOGICAL_AND] = {[TF_BOOL] = cmp_and_b8},
    [TF_OP_LOGICAL_OR] = {[TF_BOOL] = cmp_or_b8},
};

typedef struct binary_ctx {
    binary_loop loop;
    const tf_fast_kernels *fast;        /* f32 rows with unit or zero inner strides */
    int fast_op;
} binary_ctx;

/* A broadcast row (bias add, per-row scale) stays vectorized when its
 * innermost strides are unit or zero. */
static void binary_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    const binary_ctx *c = ctx;
    if (c->fast && s[0] == 4 && (s[1] == 4 || s[1] == 0) && (s[2] == 4 || s[2] == 0)) {
        c->fast->binary(c->fast_op, n, (float *)p[0], (const float *)p[1], s[1] != 0, (const float *)p[2], s[2] != 0);
        return;
    }
    c->loop(n, p, s);
}

/* ---- fast paths: f32, contiguous (or a broadcast scalar), spread over the pool ---- */

#define ELEMENT_GRAIN (1 << 16)          /* below this many elements one thread does the work */

static bool all_strides_zero(const tf_tensor_desc *d) {
    for (int i = 0; i < d->ndim; i++)
        if (d->strides[i] && d->shape[i] != 1) return false;
    return true;
}

typedef struct fast_binary_job {
    const tf_fast_kernels *k;
    int op;
    float *o;
    const float *a, *b;
    int sa, sb;
} fast_binary_job;

static void fast_binary_chunk(void *ctx, int64_t begin, int64_t end) {
    const fast_binary_job *j = ctx;
    j->k->binary(j->op, end - begin, j->o + begin, j->sa ? j->a + begin : j->a, j->sa, j->sb ? j->b + begin : j->b, j->sb);
}

/* The op itself when the fast binary kernel has it (they switch on the op's
 * value), else -1. */
static int fast_binary_code(tf_op_kind kind) {
    switch (kind) {
    case TF_OP_ADD: case TF_OP_SUB: case TF_OP_MUL: case TF_OP_DIV: case TF_OP_MAXIMUM: case TF_OP_MINIMUM:
    case TF_OP_SWIGLU:
        return (int)kind;
    default: return -1;
    }
}

/* f16/bf16: blocks widened to f32 on the stack, the f32 kernel, one
 * rounding back, so results equal the reference's (computed in f32). */
#define HALF_BLOCK 512

typedef struct half_binary_job {
    const tf_fast_kernels *k;
    int op;
    uint16_t *o;
    const uint16_t *a, *b;
    int sa, sb;
    bool bf16;
} half_binary_job;

static void half_binary_chunk(void *ctx, int64_t begin, int64_t end) {
    const half_binary_job *j = ctx;
    float a[HALF_BLOCK], b[HALF_BLOCK], o[HALF_BLOCK];
    if (!j->sa) j->k->widen(1, j->a, a, j->bf16);
    if (!j->sb) j->k->widen(1, j->b, b, j->bf16);
    for (int64_t i = begin; i < end; i += HALF_BLOCK) {
        int64_t n = end - i < HALF_BLOCK ? end - i : HALF_BLOCK;
        if (j->sa) j->k->widen(n, j->a + i, a, j->bf16);
        if (j->sb) j->k->widen(n, j->b + i, b, j->bf16);
        j->k->binary(j->op, n, o, a, j->sa, b, j->sb);
        j->k->narrow(n, o, j->o + i, j->bf16);
    }
}

static bool run_binary_fast(const tf_op *op, tf_cpu_address_fn address) {
    const tf_fast_kernels *k = tf_fast();
    const tf_tensor_desc *O = &op->output, *A = &op->inputs[0], *B = &op->inputs[1];
    int code = fast_binary_code(op->kind);
    tf_dtype dt = O->dtype;
    bool half = dt == TF_F16 || dt == TF_BF16;
    if (!k || code < 0 || (dt != TF_F32 && !half) || A->dtype != dt || B->dtype != dt) return false;
    bool ca = tf_desc_is_contiguous(A), cb = tf_desc_is_contiguous(B), za = all_strides_zero(A), zb = all_strides_zero(B);
    if (!tf_desc_is_contiguous(O) || !(ca || za) || !(cb || zb)) return false;
    if (half) {
        half_binary_job h = {k, code, (uint16_t *)(address(O->buffer) + O->offset),
                             (const uint16_t *)(address(A->buffer) + A->offset),
                             (const uint16_t *)(address(B->buffer) + B->offset), ca && !za, cb && !zb, dt == TF_BF16};
        tf_cpu_parallel_for(tf_desc_numel(O), ELEMENT_GRAIN, half_binary_chunk, &h);
        return true;
    }
    fast_binary_job j = {k, code, (float *)(address(O->buffer) + O->offset),
                         (const float *)(address(A->buffer) + A->offset), (const float *)(address(B->buffer) + B->offset),
                         ca && !za, cb && !zb};
    tf_cpu_parallel_for(tf_desc_numel(O), ELEMENT_GRAIN, fast_binary_chunk, &j);
    return true;
}

static tf_status run_binary(const tf_op *op, tf_cpu_address_fn address) {
    if (run_binary_fast(op, address)) return TF_OK;
    operand ops[3] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address),
                      make_operand(&op->inputs[1], address)};
    int code = fast_binary_code(op->kind);
    bool fast = code >= 0 && op->output.dtype == TF_F32;
    binary_ctx ctx = {binary_loops[op->kind][op->inputs[0].dtype], fast ? tf_fast() : NULL, code};
    for_each_row_parallel(op->output.ndim, op->output.shape, 3, ops, binary_row, &ctx);
    return TF_OK;
}

/* ---- elementwise unary (floats) ---- */

/* One scalar function per op, for float and for double. NaN propagates. */
#define SQRT1_2 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588
#define DEF_UNARY_FNS(CT, SUF, EXPF, LOGF, LOG1PF, EXPM1F, SQRTF, SINF, COSF, TANHF, ERFF, FLOORF, CEILF, RINTF) \
    static CT u_neg_##SUF(CT x, const tf_op_params *p) { (void)p; return -x; }                              \
    static CT u_abs_##SUF(CT x, const tf_op_params *p) { (void)p; return x < 0 ? -x : x == 0 ? (CT)0 : x; } \
    static CT u_sign_##SUF(CT x, const tf_op_params *p) { (void)p; return (CT)((x > 0) - (x < 0)); }         \
    static CT u_exp_##SUF(CT x, const tf_op_params *p) { (void)p; return EXPF(x); }                         \
    static CT u_log_##SUF(CT x, const tf_op_params *p) { (void)p; return LOGF(x); }                         \
    static CT u_log1p_##SUF(CT x, const tf_op_params *p) { (void)p; return LOG1PF(x); }                     \
    static CT u_expm1_##SUF(CT x, const tf_op_params *p) { (void)p; return EXPM1F(x); }                     \
    static CT u_sqrt_##SUF(CT x, const tf_op_params *p) { (void)p; return SQRTF(x); }                       \
    static CT u_rsqrt_##SUF(CT x, const tf_op_params *p) { (void)p; return (CT)1 / SQRTF(x); }              \
    static CT u_sin_##SUF(CT x, const tf_op_params *p) { (void)p; return SINF(x); }                         \
    static CT u_cos_##SUF(CT x, const tf_op_params *p) { (void)p; return COSF(x); }                         \
    static CT u_tanh_##SUF(CT x, const tf_op_params *p) { (void)p; return TANHF(x); }                       \
    static CT u_sigmoid_##SUF(CT x, const tf_op_params *p) { (void)p; return (CT)1 / ((CT)1 + EXPF(-x)); }  \
    static CT u_relu_##SUF(CT x, const tf_op_params *p) { (void)p; return x < 0 ? (CT)0 : x; }             \
    static CT u_leaky_relu_##SUF(CT x, const tf_op_params *p) { return x < 0 ? (CT)p->alpha * x : x; }     \
    static CT u_gelu_##SUF(CT x, const tf_op_params *p) {                                                   \
        (void)p; return (CT)0.5 * x * ((CT)1 + ERFF(x * (CT)SQRT1_2)); }                                    \
    static CT u_gelu_tanh_##SUF(CT x, const tf_op_params *p) {                                              \
        (void)p; return (CT)0.5 * x * ((CT)1 + TANHF((CT)SQRT_2_OVER_PI * (x + (CT)0.044715 * x * x * x))); } \
    static CT u_silu_##SUF(CT x, const tf_op_params *p) { (void)p; return x / ((CT)1 + EXPF(-x)); }         \
    static CT u_softplus_##SUF(CT x, const tf_op_params *p) { (void)p; return x > 20 ? x : LOG1PF(EXPF(x)); } \
    static CT u_floor_##SUF(CT x, const tf_op_params *p) { (void)p; return FLOORF(x); }                     \
    static CT u_ceil_##SUF(CT x, const tf_op_params *p) { (void)p; return CEILF(x); }                       \
    static CT u_round_##SUF(CT x, const tf_op_params *p) { (void)p; return RINTF(x); }                      \
    static CT u_clamp_##SUF(CT x, const tf_op_params *p) {                                                  \
        if (x != x) return x;                                                                               \
        if (p->min_value == p->min_value && x < (CT)p->min_value) x = (CT)p->min_value;                     \
        if (p->max_value == p->max_value && x > (CT)p->max_value) x = (CT)p->max_value;                     \
        return x; }

DEF_UNARY_FNS(float, f, expf, logf, log1pf, expm1f, sqrtf, sinf, cosf, tanhf, erff, floorf, ceilf, rintf)
DEF_UNARY_FNS(double, d, exp, log, log1p, expm1, sqrt, sin, cos, tanh, erf, floor, ceil, rint)

typedef float (*unary_f)(float, const tf_op_params *);
typedef double (*unary_d)(double, const tf_op_params *);

#define UNARY_ROW(NAME, KIND) [TF_OP_##KIND] = {u_##NAME##_f, u_##NAME##_d}
static const struct { unary_f f; unary_d d; } unary_fns[TF_OP_COUNT] = {
    UNARY_ROW(neg, NEG), UNARY_ROW(abs, ABS), UNARY_ROW(sign, SIGN), UNARY_ROW(exp, EXP), UNARY_ROW(log, LOG),
    UNARY_ROW(log1p, LOG1P), UNARY_ROW(expm1, EXPM1), UNARY_ROW(sqrt, SQRT), UNARY_ROW(rsqrt, RSQRT),
    UNARY_ROW(sin, SIN), UNARY_ROW(cos, COS), UNARY_ROW(tanh, TANH), UNARY_ROW(sigmoid, SIGMOID),
    UNARY_ROW(relu, RELU), UNARY_ROW(leaky_relu, LEAKY_RELU), UNARY_ROW(gelu, GELU),
    UNARY_ROW(gelu_tanh, GELU_TANH), UNARY_ROW(silu, SILU), UNARY_ROW(softplus, SOFTPLUS),
    UNARY_ROW(floor, FLOOR), UNARY_ROW(ceil, CEIL), UNARY_ROW(round, ROUND), UNARY_ROW(clamp, CLAMP),
};

typedef struct unary_ctx {
    tf_dtype dt;
    unary_f f;
    unary_d d;
    const tf_op_params *params;
} unary_ctx;

static void unary_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const unary_ctx *c = ctxv;
    char *o = p[0];
    const char *x = p[1];
    switch (c->dt) {
    case TF_F32: for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) ST_f32(o, c->f(LD_f32(x), c->params)); break;
    case TF_F64: for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) ST_f64(o, c->d(LD_f64(x), c->params)); break;
    case TF_F16: for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) ST_f16(o, c->f(LD_f16(x), c->params)); break;
    default: for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) ST_bf16(o, c->f(LD_bf16(x), c->params)); break;
    }
}

static tf_status run_unary(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
    unary_ctx ctx = {op->output.dtype, unary_fns[op->kind].f, unary_fns[op->kind].d, &op->params};
    for_each_row_parallel(op->output.ndim, op->output.shape, 2, ops, unary_row, &ctx);
    return TF_OK;
}

/* ---- bool-valued unary: logical_not, isnan, isinf ---- */

typedef struct bool_unary_ctx { tf_op_kind kind; tf_dtype dt; } bool_unary_ctx;

static void bool_unary_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const bool_unary_ctx *c = ctxv;
    char *o = p[0];
    const char *x = p[1];
    bool fl = is_float(c->dt);
    for (int64_t i = 0; i < n; i++, o += s[0], x += s[1]) {
        bool r;
        if (c->kind == TF_OP_LOGICAL_NOT) r = !*(const uint8_t *)x;
        else if (!fl) r = false;
        else if (c->kind == TF_OP_ISNAN) r = isnan(load_f64(c->dt, x));
        else r = isinf(load_f64(c->dt, x));
        *(uint8_t *)o = r;
    }
}

static tf_status run_bool_unary(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
    bool_unary_ctx ctx = {op->kind, op->inputs[0].dtype};
    for_each_row(op->output.ndim, op->output.shape, 2, ops, bool_unary_row, &ctx);
    return TF_OK;
}

/* ---- where: select whole elements, whatever the dtype ---- */

static void where_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    size_t es = *(const size_t *)ctxv;
    char *o = p[0];
    const char *c = p[1], *a = p[2], *b = p[3];
    for (int64_t i = 0; i < n; i++, o += s[0], c += s[1], a += s[2], b += s[3]) memcpy(o, *c ? a : b, es);
}

static tf_status run_where(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[4] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address),
                      make_operand(&op->inputs[1], address), make_operand(&op->inputs[2], address)};
    size_t es = elsize(op->output.dtype);
    for_each_row(op->output.ndim, op->output.shape, 4, ops, where_row, &es);
    return TF_OK;
}

/* ---- indexed picks and triangles: whole elements, any dtype ---- */

static int64_t load_index(const tf_tensor_desc *d, const char *p) {
    return d->dtype == TF_I64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

/* out[pos] = x[pos with the axis coordinate replaced by an index]: for
 * INDEX_SELECT the index at pos[axis], for GATHER the index at pos. */
static tf_status run_indexed(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *I = &op->inputs[1], *O = &op->output;
    operand x = make_operand(X, address), ix = make_operand(I, address), o = make_operand(O, address);
    int ax = op->params.axis;
    size_t es = elsize(O->dtype);
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        const char *ip = ix.base;
        if (op->kind == TF_OP_INDEX_SELECT) ip += idx[ax] * ix.stride[0];
        else
            for (int d = 0; d < O->ndim; d++) ip += idx[d] * ix.stride[d];
        int64_t pick = load_index(I, ip);
        const char *xp = x.base;
        char *op_ = o.base;
        for (int d = 0; d < O->ndim; d++) {
            xp += (d == ax ? pick : idx[d]) * x.stride[d];
            op_ += idx[d] * o.stride[d];
        }
        memcpy(op_, xp, es);
    } while (O->ndim > 0 && next_index(O->ndim, O->shape, idx));
    return TF_OK;
}

static tf_status run_triangle(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    operand x = make_operand(X, address), o = make_operand(O, address);
    size_t es = elsize(O->dtype);
    int nd = O->ndim;
    int64_t idx[TF_MAX_DIMS] = {0}, k = op->params.diagonal;
    do {
        const char *xp = x.base;
        char *op_ = o.base;
        for (int d = 0; d < nd; d++) {
            xp += idx[d] * x.stride[d];
            op_ += idx[d] * o.stride[d];
        }
        int64_t above = idx[nd - 1] - idx[nd - 2];             /* column - row */
        bool keep = op->kind == TF_OP_TRIL ? above <= k : above >= k;
        if (keep) memcpy(op_, xp, es);
        else memset(op_, 0, es);
    } while (next_index(nd, O->shape, idx));
    return TF_OK;
}

/* ---- row ops: softmax, log_softmax, rmsnorm, layernorm (in double) ---- */

typedef struct row_job {
    const tf_op *op;
    operand x, o, w, b;
    bool has_w, has_b, fast;
    int64_t len, xs, os;
    int ndim;
    int64_t lines[TF_MAX_DIMS];          /* x's shape with extent 1 along the axis */
    tf_dtype dt;
    const tf_fast_kernels *k;
} row_job;

/* One line, in double: the reference (and the fallback for rows with NaN). */
static void row_reference(const row_job *j, const char *xp, char *op_) {
    tf_dtype dt = j->dt;
    int64_t len = j->len, xs = j->xs, os = j->os;
    tf_op_kind kind = j->op->kind;
    if (kind == TF_OP_SOFTMAX || kind == TF_OP_LOG_SOFTMAX) {
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < len; i++) {
            double v = load_f64(dt, xp + i * xs);
            if (isnan(v) || v > m) m = isnan(m) ? m : v;
        }
        for (int64_t i = 0; i < len; i++) sum += exp(load_f64(dt, xp + i * xs) - m);
        for (int64_t i = 0; i < len; i++) {
            double v = load_f64(dt, xp + i * xs) - m;
            store_f64(dt, op_ + i * os, kind == TF_OP_SOFTMAX ? exp(v) / sum : v - log(sum));
        }
        return;
    }
    bool center = kind == TF_OP_LAYERNORM;
    double mean = 0, ss = 0;
    for (int64_t i = 0; i < len; i++) mean += load_f64(dt, xp + i * xs);
    mean /= (double)len;
    for (int64_t i = 0; i < len; i++) {
        double v = load_f64(dt, xp + i * xs) - (center ? mean : 0);
        ss += v * v;
    }
    double inv = 1.0 / sqrt(ss / (double)len + j->op->params.eps);
    for (int64_t i = 0; i < len; i++) {
        double v = (load_f64(dt, xp + i * xs) - (center ? mean : 0)) * inv;
        if (j->has_w) v *= load_f64(dt, j->w.base + i * j->w.stride[0]);
        if (j->has_b) v += load_f64(dt, j->b.base + i * j->b.stride[0]);
        store_f64(dt, op_ + i * os, v);
    }
}

static void row_lines(void *ctx, int64_t begin, int64_t end) {
    const row_job *j = ctx;
    tf_op_kind kind = j->op->kind;
    for (int64_t line = begin; line < end; line++) {
        const char *xp = j->x.base;
        char *op_ = j->o.base;
        for (int64_t d = j->ndim - 1, rest = line; d >= 0; d--) {
            int64_t c = rest % j->lines[d];
            rest /= j->lines[d];
            xp += c * j->x.stride[d];
            op_ += c * j->o.stride[d];
        }
        if (j->fast) {
            const float *w = j->has_w ? (const float *)j->w.base : NULL, *b = j->has_b ? (const float *)j->b.base : NULL;
            if (kind == TF_OP_SOFTMAX || kind == TF_OP_LOG_SOFTMAX) {
                if (j->k->softmax_row(j->len, (float *)op_, (const float *)xp, kind == TF_OP_LOG_SOFTMAX)) continue;
            } else {
                j->k->norm_row(j->len, (float *)op_, (const float *)xp, w, b, (float)j->op->params.eps,
                               kind == TF_OP_LAYERNORM);
                continue;
            }
        }
        row_reference(j, xp, op_);
    }
}

static tf_status run_row(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    row_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.x = make_operand(X, address);
    j.o = make_operand(O, address);
    int next = 1, ax = op->params.axis;
    j.has_w = op->params.flags & TF_ROW_WEIGHT;
    j.has_b = op->params.flags & TF_ROW_BIAS;
    if (j.has_w) j.w = make_operand(&op->inputs[next++], address);
    if (j.has_b) j.b = make_operand(&op->inputs[next++], address);
    j.dt = X->dtype;
    j.len = X->shape[ax];
    j.xs = j.x.stride[ax];
    j.os = j.o.stride[ax];
    j.ndim = X->ndim;
    int64_t lines = 1;
    for (int d = 0; d < X->ndim; d++) {
        j.lines[d] = d == ax ? 1 : X->shape[d];
        lines *= j.lines[d];
    }
    if (tf_desc_numel(O) == 0 || j.len == 0) return TF_OK;
    j.k = tf_fast();
    j.fast = j.k && j.dt == TF_F32 && j.xs == 4 && j.os == 4 && (!j.has_w || j.w.stride[0] == 4) &&
             (!j.has_b || j.b.stride[0] == 4);
    tf_cpu_parallel_for(lines, ELEMENT_GRAIN / j.len + 1, row_lines, &j);
    return TF_OK;
}

/* ---- rotary position embedding ---- */

static tf_status run_rope(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *P = &op->inputs[1], *O = &op->output;
    operand x = make_operand(X, address), p = make_operand(P, address), o = make_operand(O, address);
    int nd = X->ndim, ax = op->params.axis;
    int64_t rot = op->params.rotary_dims, half = rot / 2, idx[TF_MAX_DIMS] = {0};
    bool neox = op->params.flags & TF_ROPE_NEOX;
    tf_dtype dt = X->dtype;
    do {
        const char *xp = x.base;
        char *op_ = o.base;
        for (int d = 0; d < nd - 1; d++) {
            xp += idx[d] * x.stride[d];
            op_ += idx[d] * o.stride[d];
        }
        int64_t e = idx[nd - 1];
        double v = load_f64(dt, xp + e * x.stride[nd - 1]);
        if (e < rot) {
            int64_t i = neox ? e % half : e / 2, partner = neox ? (e < half ? e + half : e - half) : e ^ 1;
            bool first = neox ? e < half : (e % 2) == 0;
            double pos = (double)load_index(P, p.base + idx[ax] * p.stride[0]);
            double angle = pos * pow(op->params.theta, -2.0 * (double)i / (double)rot);
            double u = load_f64(dt, xp + partner * x.stride[nd - 1]);
            v = first ? v * cos(angle) - u * sin(angle) : u * sin(angle) + v * cos(angle);
        }
        store_f64(dt, op_ + e * o.stride[nd - 1], v);
    } while (next_index(nd, O->shape, idx));
    return TF_OK;
}

/* ---- attention, f32 with BLAS: blocked, online softmax, no scores matrix ---- */

#define ATTN_BQ 64                       /* queries per task */
#define ATTN_BK 256                      /* keys per block */

typedef struct attn_job {
    const tf_op *op;
    const tf_fast_kernels *k;
    const float *q, *kk, *v, *mask;
    float *out;
    int64_t B, Hq, Lq, D, Hkv, Lk, Dv, group, qblocks;
    int64_t qs[4], ks[4], vs[4], ms[4], os[4];   /* strides in elements */
    float scale;
    bool causal;
} attn_job;

static void attn_block(void *ctx, int64_t begin, int64_t end) {
    const attn_job *j = ctx;
    float *S = malloc(sizeof(float) * ATTN_BQ * ATTN_BK), *O = malloc(sizeof(float) * ATTN_BQ * (size_t)j->Dv);
    float m[ATTN_BQ], l[ATTN_BQ];
    bool nan_row[ATTN_BQ];
    if (!S || !O) {                              /* cannot happen in practice; leave poison-free NaN */
        free(S);
        free(O);
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        int64_t qb = t % j->qblocks, h = (t / j->qblocks) % j->Hq, b = t / (j->qblocks * j->Hq);
        int64_t i0 = qb * ATTN_BQ, rows = j->Lq - i0 < ATTN_BQ ? j->Lq - i0 : ATTN_BQ, kh = h / j->group;
        const float *qp = j->q + b * j->qs[0] + h * j->qs[1] + i0 * j->qs[2];
        const float *kp = j->kk + b * j->ks[0] + kh * j->ks[1], *vp = j->v + b * j->vs[0] + kh * j->vs[1];
        int64_t kv_end = j->causal ? j->op->params.q_offset + i0 + rows : j->Lk;
        if (kv_end > j->Lk) kv_end = j->Lk;
        for (int64_t r = 0; r < rows; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
            nan_row[r] = false;
        }
        memset(O, 0, sizeof(float) * (size_t)(rows * j->Dv));
        for (int64_t j0 = 0; j0 < kv_end; j0 += ATTN_BK) {
            int64_t cols = kv_end - j0 < ATTN_BK ? kv_end - j0 : ATTN_BK;
            /* S = scale * Q_blk K_blk^T */
            tf_cpu_blas_gemm(false, false, true, rows, cols, j->D, j->scale, qp, j->qs[2], kp + j0 * j->ks[2], j->ks[2],
                             0.0, S, cols);
            for (int64_t r = 0; r < rows; r++) {
                float *s = S + r * cols;
                if (j->mask) {
                    const float *mp = j->mask + b * j->ms[0] + h * j->ms[1] + (i0 + r) * j->ms[2] + j0 * j->ms[3];
                    for (int64_t c = 0; c < cols; c++) s[c] += mp[c * j->ms[3]];
                }
                if (j->causal)
                    for (int64_t c = 0; c < cols; c++)
                        if (j0 + c > j->op->params.q_offset + i0 + r) s[c] = -INFINITY;
                float mx = -INFINITY;
                for (int64_t c = 0; c < cols; c++) {
                    if (s[c] != s[c]) nan_row[r] = true;
                    mx = s[c] > mx ? s[c] : mx;
                }
                float m_new = mx > m[r] ? mx : m[r];
                if (m_new == -INFINITY) {        /* nothing visible yet in this row */
                    memset(s, 0, sizeof(float) * (size_t)cols);
                    continue;
                }
                float keep = expf(m[r] - m_new);
                l[r] = l[r] * keep + j->k->exp_shift_sum(cols, s, m_new);
                if (keep != 1.0f)
                    for (int64_t e = 0; e < j->Dv; e++) O[r * j->Dv + e] *= keep;
                m[r] = m_new;
            }
            /* O += P V_blk */
            tf_cpu_blas_gemm(false, false, false, rows, j->Dv, cols, 1.0, S, cols, vp + j0 * j->vs[2], j->vs[2], 1.0, O,
                             j->Dv);
        }
        for (int64_t r = 0; r < rows; r++) {
            float *op_ = j->out + b * j->os[0] + h * j->os[1] + (i0 + r) * j->os[2];
            for (int64_t e = 0; e < j->Dv; e++)
                op_[e * j->os[3]] = nan_row[r] ? NAN : O[r * j->Dv + e] / l[r];   /* l == 0: 0/0, NaN */
        }
    }
    free(S);
    free(O);
}

static bool run_sdpa_fast(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *Q = &op->inputs[0], *K = &op->inputs[1], *V = &op->inputs[2], *O = &op->output;
    bool has_mask = op->params.flags & TF_SDPA_MASK;
    const tf_fast_kernels *k = tf_fast();
    if (!k || !tf_cpu_have_blas() || Q->dtype != TF_F32 || (has_mask && op->inputs[3].dtype != TF_F32)) return false;
    if (Q->strides[3] != 1 || K->strides[3] != 1 || V->strides[3] != 1 || Q->strides[2] < Q->shape[3] ||
        K->strides[2] < K->shape[3] || V->strides[2] < V->shape[3])
        return false;                            /* BLAS needs rows with unit stride */
    attn_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.k = k;
    j.q = (const float *)(address(Q->buffer) + Q->offset);
    j.kk = (const float *)(address(K->buffer) + K->offset);
    j.v = (const float *)(address(V->buffer) + V->offset);
    j.out = (float *)(address(O->buffer) + O->offset);
    if (has_mask) j.mask = (const float *)(address(op->inputs[3].buffer) + op->inputs[3].offset);
    j.B = Q->shape[0];
    j.Hq = Q->shape[1];
    j.Lq = Q->shape[2];
    j.D = Q->shape[3];
    j.Hkv = K->shape[1];
    j.Lk = K->shape[2];
    j.Dv = V->shape[3];
    j.group = j.Hq / j.Hkv;
    j.qblocks = (j.Lq + ATTN_BQ - 1) / ATTN_BQ;
    for (int i = 0; i < 4; i++) {
        j.qs[i] = Q->strides[i];
        j.ks[i] = K->strides[i];
        j.vs[i] = V->strides[i];
        j.os[i] = O->strides[i];
        if (has_mask) j.ms[i] = op->inputs[3].strides[i];
    }
    j.scale = (float)op->params.scale;
    j.causal = op->params.flags & TF_SDPA_CAUSAL;
    tf_cpu_parallel_for(j.B * j.Hq * j.qblocks, 1, attn_block, &j);
    return true;
}

/* ---- scaled dot-product attention (two passes over the keys, in double) ---- */

static tf_status run_sdpa(const tf_op *op, tf_cpu_address_fn address) {
    if (run_sdpa_fast(op, address)) return TF_OK;
    const tf_tensor_desc *Q = &op->inputs[0], *K = &op->inputs[1], *V = &op->inputs[2], *O = &op->output;
    bool has_mask = op->params.flags & TF_SDPA_MASK, causal = op->params.flags & TF_SDPA_CAUSAL;
    operand q = make_operand(Q, address), k = make_operand(K, address), v = make_operand(V, address),
            o = make_operand(O, address), m = has_mask ? make_operand(&op->inputs[3], address) : o;
    int64_t B = Q->shape[0], Hq = Q->shape[1], Lq = Q->shape[2], D = Q->shape[3], Lk = K->shape[2], Dv = V->shape[3];
    int64_t group = Hq / K->shape[1];
    tf_dtype dt = Q->dtype, mdt = has_mask ? op->inputs[3].dtype : dt;
    double *scores = malloc(sizeof(double) * (size_t)(Lk > 0 ? Lk : 1)), *acc = malloc(sizeof(double) * (size_t)(Dv > 0 ? Dv : 1));
    if (!scores || !acc) {
        free(scores);
        free(acc);
        return TF_ERR_OUT_OF_MEMORY;
    }
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Lq; i++) {
                const char *qp = q.base + bi * q.stride[0] + h * q.stride[1] + i * q.stride[2];
                const char *kb = k.base + bi * k.stride[0] + (h / group) * k.stride[1];
                const char *vb = v.base + bi * v.stride[0] + (h / group) * v.stride[1];
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    double s = -INFINITY;
                    if (!causal || j <= op->params.q_offset + i) {
                        s = 0;
                        for (int64_t d = 0; d < D; d++)
                            s += load_f64(dt, qp + d * q.stride[3]) * load_f64(dt, kb + j * k.stride[2] + d * k.stride[3]);
                        s *= op->params.scale;
                        if (has_mask)
                            s += load_f64(mdt, m.base + bi * m.stride[0] + h * m.stride[1] + i * m.stride[2] + j * m.stride[3]);
                    }
                    scores[j] = s;
                    if (isnan(s) || s > mx) mx = isnan(mx) ? mx : s;
                }
                for (int64_t e = 0; e < Dv; e++) acc[e] = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    double pj = exp(scores[j] - mx);
                    sum += pj;
                    for (int64_t e = 0; e < Dv; e++) acc[e] += pj * load_f64(dt, vb + j * v.stride[2] + e * v.stride[3]);
                }
                char *op_ = o.base + bi * o.stride[0] + h * o.stride[1] + i * o.stride[2];
                for (int64_t e = 0; e < Dv; e++) store_f64(dt, op_ + e * o.stride[3], acc[e] / sum);   /* 0/0: NaN */
            }
    free(scores);
    free(acc);
    return TF_OK;
}

/* ---- conv2d and pooling (NCHW, in double) ---- */

static tf_status run_conv2d(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *W = &op->inputs[1], *O = &op->output;
    bool has_bias = op->params.flags & TF_CONV_BIAS;
    operand x = make_operand(X, address), w = make_operand(W, address), o = make_operand(O, address),
            b = has_bias ? make_operand(&op->inputs[2], address) : o;
    const tf_op_params *p = &op->params;
    int64_t N = O->shape[0], OC = O->shape[1], Ho = O->shape[2], Wo = O->shape[3], H = X->shape[2], Wd = X->shape[3];
    int64_t cg = W->shape[1], kh = W->shape[2], kw = W->shape[3], og = OC / p->groups;
    tf_dtype dt = X->dtype;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < OC; oc++)
            for (int64_t y = 0; y < Ho; y++)
                for (int64_t xo = 0; xo < Wo; xo++) {
                    double acc = has_bias ? load_f64(dt, b.base + oc * b.stride[0]) : 0;
                    int64_t c0 = (oc / og) * cg;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                            if (yi < 0 || yi >= H) continue;
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t xi = xo * p->stride[1] - p->padding[1] + j * p->dilation[1];
                                if (xi < 0 || xi >= Wd) continue;
                                acc += load_f64(dt, x.base + n * x.stride[0] + (c0 + c) * x.stride[1] + yi * x.stride[2] +
                                                        xi * x.stride[3]) *
                                       load_f64(dt, w.base + oc * w.stride[0] + c * w.stride[1] + i * w.stride[2] + j * w.stride[3]);
                            }
                        }
                    store_f64(dt, o.base + n * o.stride[0] + oc * o.stride[1] + y * o.stride[2] + xo * o.stride[3], acc);
                }
    return TF_OK;
}

static tf_status run_pool(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    operand x = make_operand(X, address), o = make_operand(O, address);
    const tf_op_params *p = &op->params;
    bool is_max = op->kind == TF_OP_MAXPOOL2D, count_pad = p->flags & TF_POOL_COUNT_PAD;
    int64_t H = X->shape[2], W = X->shape[3], idx[4] = {0};
    tf_dtype dt = X->dtype;
    do {
        const char *base = x.base + idx[0] * x.stride[0] + idx[1] * x.stride[1];
        double acc = is_max ? -INFINITY : 0;
        int64_t counted = 0;
        for (int64_t i = 0; i < p->kernel[0]; i++)
            for (int64_t j = 0; j < p->kernel[1]; j++) {
                int64_t yi = idx[2] * p->stride[0] - p->padding[0] + i * p->dilation[0];
                int64_t xi = idx[3] * p->stride[1] - p->padding[1] + j * p->dilation[1];
                bool inside = yi >= 0 && yi < H && xi >= 0 && xi < W;
                if (!is_max && (inside || count_pad) && yi < H + p->padding[0] && xi < W + p->padding[1]) counted++;
                if (!inside) continue;
                double v = load_f64(dt, base + yi * x.stride[2] + xi * x.stride[3]);
                if (!is_max) acc += v;
                else if (isnan(v) || v > acc) acc = isnan(acc) ? acc : v;
            }
        if (!is_max) acc = counted ? acc / (double)counted : NAN;
        store_f64(dt, o.base + idx[0] * o.stride[0] + idx[1] * o.stride[1] + idx[2] * o.stride[2] + idx[3] * o.stride[3], acc);
    } while (next_index(4, O->shape, idx));
    return TF_OK;
}

/* ---- Adam / AdamW, in place (inputs param, grad, m, v; output = param) ---- */

static tf_status run_adam(const tf_op *op, tf_cpu_address_fn address) {
    operand p = make_operand(&op->inputs[0], address), g = make_operand(&op->inputs[1], address),
            m = make_operand(&op->inputs[2], address), v = make_operand(&op->inputs[3], address),
            o = make_operand(&op->output, address);
    const tf_op_params *q = &op->params;
    const tf_tensor_desc *P = &op->inputs[0];
    tf_dtype dt = P->dtype;
    bool decoupled = q->flags & TF_ADAM_DECOUPLED;
    double c1 = 1 - pow(q->beta1, (double)q->adam_step), c2 = 1 - pow(q->beta2, (double)q->adam_step);
    int64_t idx[TF_MAX_DIMS] = {0};
    if (tf_desc_numel(P) == 0) return TF_OK;
    do {
        int64_t po = 0, go = 0, mo = 0, vo = 0, oo = 0;
        for (int d = 0; d < P->ndim; d++) {
            po += idx[d] * p.stride[d];
            go += idx[d] * g.stride[d];
            mo += idx[d] * m.stride[d];
            vo += idx[d] * v.stride[d];
            oo += idx[d] * o.stride[d];
        }
        double pv = load_f64(dt, p.base + po), gv = load_f64(dt, g.base + go);
        if (decoupled) pv *= 1 - q->lr * q->weight_decay;
        else gv += q->weight_decay * pv;
        double mv = q->beta1 * load_f64(dt, m.base + mo) + (1 - q->beta1) * gv;
        double vv = q->beta2 * load_f64(dt, v.base + vo) + (1 - q->beta2) * gv * gv;
        pv -= q->lr * (mv / c1) / (sqrt(vv / c2) + q->eps);
        store_f64(dt, m.base + mo, mv);
        store_f64(dt, v.base + vo, vv);
        store_f64(dt, o.base + oo, pv);
    } while (next_index(P->ndim, P->shape, idx));
    return TF_OK;
}

/* ---- matmul ---- */

typedef struct mm_geom {
    int64_t m, k, n;
    int64_t as_m, as_k, bs_k, bs_n, os_m, os_n;   /* bytes */
    /* GEMM epilogue: out = alpha * a@b + beta * c (c read only if beta != 0) */
    bool epilogue;
    double alpha, beta;
    int64_t cs_m, cs_n;
} mm_geom;

typedef void (*matmul_fn)(const mm_geom *g, char *o, const char *a, const char *b, const char *c, void *acc);

#define FMAC(acc, x, y) ((acc) + (x) * (y))
#define IMAC(acc, x, y) ((acc) + (uint64_t)(x) * (uint64_t)(y))

/* Row-by-row i-k-j loop: the j loop streams rows of b and the accumulator. */
#define DEF_MATMUL(DT, CT, ACCT, MAC)                                                      \
    static void matmul_##DT(const mm_geom *g, char *o, const char *a, const char *b, const char *c, void *accv) { \
        ACCT *acc = accv;                                                                  \
        for (int64_t i = 0; i < g->m; i++) {                                               \
            for (int64_t j = 0; j < g->n; j++) acc[j] = 0;                                 \
            for (int64_t k = 0; k < g->k; k++) {                                           \
                CT av = (CT)LD_##DT(a + i * g->as_m + k * g->as_k);                        \
                const char *brow = b + k * g->bs_k;                                        \
                for (int64_t j = 0; j < g->n; j++) acc[j] = MAC(acc[j], av, (CT)LD_##DT(brow + j * g->bs_n)); \
            }                                                                              \
            if (!g->epilogue) {                                                            \
                for (int64_t j = 0; j < g->n; j++) ST_##DT(o + i * g->os_m + j * g->os_n, acc[j]); \
                continue;                                                                  \
            }                                                                              \
            for (int64_t j = 0; j < g->n; j++) {                                           \
                CT v = (CT)(g->alpha * (CT)acc[j]);                                        \
                if (g->beta != 0) v += (CT)(g->beta * (CT)LD_##DT(c + i * g->cs_m + j * g->cs_n)); \
                ST_##DT(o + i * g->os_m + j * g->os_n, v);                                 \
            }                                                                              \
        }                                                                                  \
    }

DEF_MATMUL(f32, float, float, FMAC)
DEF_MATMUL(f64, double, double, FMAC)
DEF_MATMUL(f16, float, float, FMAC)
DEF_MATMUL(bf16, float, float, FMAC)
DEF_MATMUL(i8, int64_t, uint64_t, IMAC)
DEF_MATMUL(i32, int64_t, uint64_t, IMAC)
DEF_MATMUL(i64, int64_t, uint64_t, IMAC)
DEF_MATMUL(u8, int64_t, uint64_t, IMAC)

static const matmul_fn matmul_fns[TF_DTYPE_COUNT] = {
    [TF_F32] = matmul_f32, [TF_F64] = matmul_f64, [TF_F16] = matmul_f16, [TF_BF16] = matmul_bf16,
    [TF_I8] = matmul_i8,   [TF_I32] = matmul_i32, [TF_I64] = matmul_i64, [TF_U8] = matmul_u8,
};

/* ---- GEMM through BLAS: f32/f64 operands with a unit stride in one of their
 * last two axes, a contiguous output; row panels spread over the pool ---- */

typedef struct blas_job {
    bool f64, ta, tb, has_c;
    int64_t m, n, k, lda, ldb, es;
    double alpha, beta;
    const char *a, *b;
    char *o;
    operand c;                           /* GEMM's c, broadcast: copied into o first */
    int64_t cs_m, cs_n;
    tf_dtype dt;
} blas_job;

/* Rows [begin, end) of one batch entry. */
static void blas_rows(void *ctx, int64_t begin, int64_t end) {
    const blas_job *j = ctx;
    if (j->has_c)                        /* beta * c enters through BLAS's C */
        for (int64_t i = begin; i < end; i++)
            for (int64_t x = 0; x < j->n; x++) {
                double v = load_f64(j->dt, j->c.base + i * j->cs_m + x * j->cs_n);
                store_f64(j->dt, j->o + (i * j->n + x) * j->es, v);
            }
    const char *a = j->a + (j->ta ? begin : begin * j->lda) * j->es;
    tf_cpu_blas_gemm(j->f64, j->ta, j->tb, end - begin, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb,
                     j->has_c ? j->beta : 0.0, j->o + begin * j->n * j->es, j->n);
}

/* Leading dimension and transposition of a matrix operand, if BLAS can take it. */
static bool blas_layout(const tf_tensor_desc *d, int nb, int64_t rows, int64_t cols, bool *trans, int64_t *ld) {
    int64_t rs = d->strides[nb], cs = d->strides[nb + 1];
    if (cs == 1 && (rs >= cols || rows == 1) && rs > 0) {
        *trans = false;
        *ld = rows == 1 ? (cols > 0 ? cols : 1) : rs;
        return true;
    }
    if (rs == 1 && (cs >= rows || cols == 1) && cs > 0) {
        *trans = true;
        *ld = cols == 1 ? (rows > 0 ? rows : 1) : cs;
        return true;
    }
    return false;
}

/* ---- skinny f32 products (m or n <= 8): the library's sgemm is built for
 * big blocks; these stream the wide operand once, spread over the pool ---- */

#define SKINNY 8

typedef struct skinny_job {
    const tf_fast_kernels *k;
    int64_t m, n, kk, lda, ldb;
    const float *a, *b, *bt;
    float *c;
} skinny_job;

static void skinny_m_chunk(void *ctx, int64_t begin, int64_t end) {
    const skinny_job *j = ctx;
    int64_t j0 = begin * 64, j1 = end * 64 < j->n ? end * 64 : j->n;   /* each thread: a range of 64-column blocks */
    j->k->gemm_small_m(j->m, j0, j1, j->kk, j->a, j->lda, j->b, j->ldb, j->c, j->n);
}

static void skinny_n_chunk(void *ctx, int64_t begin, int64_t end) {
    const skinny_job *j = ctx;
    j->k->gemm_small_n(begin, end, j->n, j->kk, j->a, j->lda, j->bt, j->c, j->n);
}

/* A skinny product's n columns in blocks of 64, one contiguous range of
 * blocks per thread (each streams its part of the wide operand once), and
 * only as many threads as there is work to wake them for. */
static void for_column_blocks(int64_t m, int64_t n, int64_t kk, tf_pool_task chunk, void *ctx) {
    int64_t blocks = (n + 63) / 64, per_thread = (blocks + tf_cpu_num_threads() - 1) / tf_cpu_num_threads();
    int64_t grain = (1 << 18) / (kk * m * 64 + 1) + 1;
    tf_cpu_parallel_for(blocks, grain > per_thread ? grain : per_thread, chunk, ctx);
}

static void skinny_rows_chunk(void *ctx, int64_t begin, int64_t end) {
    const skinny_job *j = ctx;
    j->k->gemm_rows(j->m, begin * 64, end * 64 < j->n ? end * 64 : j->n, j->kk, j->a, j->lda, j->b, j->ldb, j->c, j->n);
}

static bool run_matmul_skinny(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    const tf_fast_kernels *k = tf_fast();
    if (!k || op->kind != TF_OP_MATMUL || O->dtype != TF_F32 || O->ndim != 2 || !tf_desc_is_contiguous(O)) return false;
    int64_t m = O->shape[0], n = O->shape[1], kk = A->shape[1];
    if ((m > SKINNY && n > SKINNY) || kk < 64) return false;
    skinny_job j = {k, m, n, kk, A->strides[0], B->strides[0],
                    (const float *)(address(A->buffer) + A->offset), (const float *)(address(B->buffer) + B->offset),
                    NULL, (float *)(address(O->buffer) + O->offset)};
    if (m <= SKINNY && A->strides[1] == 1 && B->strides[1] == 1) {
        for_column_blocks(m, n, kk, skinny_m_chunk, &j);
        return true;
    }
    if (m <= SKINNY && A->strides[1] == 1 && B->strides[0] == 1 && n > 1) {   /* A @ W^T: dot products */
        j.ldb = B->strides[1];
        for_column_blocks(m, n, kk, skinny_rows_chunk, &j);
        return true;
    }
    if (n <= SKINNY && A->strides[1] == 1) {                 /* B^T copied once: n x k */
        float *bt = malloc(sizeof(float) * (size_t)(n * kk));
        if (!bt) return false;
        for (int64_t x = 0; x < n; x++)
            for (int64_t y = 0; y < kk; y++) bt[x * kk + y] = j.b[y * B->strides[0] + x * B->strides[1]];
        j.bt = bt;
        tf_cpu_parallel_for(m, (1 << 18) / (kk * n + 1) + 1, skinny_n_chunk, &j);
        free(bt);
        return true;
    }
    return false;
}

static bool run_matmul_blas(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    tf_dtype dt = O->dtype;
    if ((dt != TF_F32 && dt != TF_F64) || !tf_cpu_have_blas() || !tf_desc_is_contiguous(O)) return false;
    int nb = O->ndim - 2;
    int64_t m = O->shape[nb], n = O->shape[nb + 1], k = A->shape[nb + 1];
    if (m * n * k == 0) return false;
    blas_job j;
    memset(&j, 0, sizeof j);
    if (!blas_layout(A, nb, m, k, &j.ta, &j.lda) || !blas_layout(B, nb, k, n, &j.tb, &j.ldb)) return false;
    operand a = make_operand(A, address), b = make_operand(B, address), o = make_operand(O, address);
    j.f64 = dt == TF_F64;
    j.m = m;
    j.n = n;
    j.k = k;
    j.es = (int64_t)elsize(dt);
    j.dt = dt;
    j.alpha = op->kind == TF_OP_GEMM ? op->params.alpha : 1.0;
    j.has_c = op->kind == TF_OP_GEMM && op->n_inputs > 2 && op->params.beta != 0;
    j.beta = op->params.beta;
    if (j.has_c) {
        j.c = make_operand(&op->inputs[2], address);
        j.cs_m = j.c.stride[nb];
        j.cs_n = j.c.stride[nb + 1];
    }
    int64_t idx[TF_MAX_DIMS] = {0}, grain = (int64_t)1 << 21;   /* multiply-adds per thread, at least */
    int64_t batch = tf_desc_numel(O) / (m * n > 0 ? m * n : 1);
    bool single = batch == 1 && !tf_cpu_in_parallel_region() && m * n * k >= grain;
    do {
        int64_t ao = 0, bo = 0, oo = 0;
        operand cb = j.c;
        for (int d = 0; d < nb; d++) {
            ao += idx[d] * a.stride[d];
            bo += idx[d] * b.stride[d];
            oo += idx[d] * o.stride[d];
            if (j.has_c) cb.base += idx[d] * j.c.stride[d];
        }
        blas_job bj = j;
        bj.a = a.base + ao;
        bj.b = b.base + bo;
        bj.o = o.base + oo;
        bj.c = cb;
        if (single) {                            /* one big GEMM: the library threads it */
            tf_cpu_blas_threads(tf_cpu_num_threads());
            blas_rows(&bj, 0, m);
            tf_cpu_blas_threads(1);
        } else {
            int64_t rows_per_grain = grain / (n * k) + 1;
            tf_cpu_parallel_for(m, rows_per_grain, blas_rows, &bj);
        }
    } while (nb > 0 && next_index(nb, O->shape, idx));
    return true;
}

/* ---- f16/bf16 matmul: f32 panels, sgemm (f32 accumulation), one rounding ---- */

typedef struct widen_job {
    tf_dtype dt;
    const char *src;
    int64_t rs, cs;                      /* source strides in bytes */
    int64_t cols;
    float *dst;                          /* rows x cols, row-major */
} widen_job;

static void widen_rows(void *ctx, int64_t begin, int64_t end) {
    const widen_job *j = ctx;
    const tf_fast_kernels *k = tf_fast();
    for (int64_t r = begin; r < end; r++)
        if (k && j->cs == 2) k->widen(j->cols, (const uint16_t *)(j->src + r * j->rs), j->dst + r * j->cols, j->dt == TF_BF16);
        else for (int64_t c = 0; c < j->cols; c++) {
            const char *p = j->src + r * j->rs + c * j->cs;
            j->dst[r * j->cols + c] = j->dt == TF_F16 ? LD_f16(p) : LD_bf16(p);
        }
}

static void narrow_rows(void *ctx, int64_t begin, int64_t end) {
    const widen_job *j = ctx;                    /* here src/dst swap roles: f32 -> dt */
    const tf_fast_kernels *k = tf_fast();
    for (int64_t r = begin; r < end; r++)
        if (k && j->cs == 2) k->narrow(j->cols, j->dst + r * j->cols, (uint16_t *)(j->src + r * j->rs), j->dt == TF_BF16);
        else for (int64_t c = 0; c < j->cols; c++) {
            char *p = (char *)j->src + r * j->rs + c * j->cs;
            float v = j->dst[r * j->cols + c];
            if (j->dt == TF_F16) ST_f16(p, v);
            else ST_bf16(p, v);
        }
}

static bool run_matmul_half(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    tf_dtype dt = O->dtype;
    if ((dt != TF_F16 && dt != TF_BF16) || op->kind != TF_OP_MATMUL || !tf_cpu_have_blas()) return false;
    int nb = O->ndim - 2;
    int64_t m = O->shape[nb], n = O->shape[nb + 1], k = A->shape[nb + 1];
    if (m * n * k < 64 * 64 * 64) return false;
    float *a32 = malloc(sizeof(float) * (size_t)(m * k)), *b32 = malloc(sizeof(float) * (size_t)(k * n)),
          *o32 = malloc(sizeof(float) * (size_t)(m * n));
    if (!a32 || !b32 || !o32) {
        free(a32);
        free(b32);
        free(o32);
        return false;                            /* the loops need no scratch */
    }
    operand a = make_operand(A, address), b = make_operand(B, address), o = make_operand(O, address);
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        int64_t ao = 0, bo = 0, oo = 0;
        for (int d = 0; d < nb; d++) {
            ao += idx[d] * a.stride[d];
            bo += idx[d] * b.stride[d];
            oo += idx[d] * o.stride[d];
        }
        widen_job wa = {dt, a.base + ao, a.stride[nb], a.stride[nb + 1], k, a32};
        widen_job wb = {dt, b.base + bo, b.stride[nb], b.stride[nb + 1], n, b32};
        tf_cpu_parallel_for(m, 4096 / (k + 1) + 1, widen_rows, &wa);
        tf_cpu_parallel_for(k, 4096 / (n + 1) + 1, widen_rows, &wb);
        tf_cpu_blas_threads(tf_cpu_num_threads());
        tf_cpu_blas_gemm(false, false, false, m, n, k, 1.0, a32, k, b32, n, 0.0, o32, n);
        tf_cpu_blas_threads(1);
        widen_job wo = {dt, o.base + oo, o.stride[nb], o.stride[nb + 1], n, o32};
        tf_cpu_parallel_for(m, 4096 / (n + 1) + 1, narrow_rows, &wo);
    } while (nb > 0 && next_index(nb, O->shape, idx));
    free(a32);
    free(b32);
    free(o32);
    return true;
}

/* Half-precision skinny products (decode: a few activation rows against a
 * weight matrix): the weights stream through once, widened in registers, no
 * f32 copy of them; bf16 x bf16 against a [n, k] weight uses AVX512-BF16 dot
 * products where the CPU has them. Accumulates in f32, rounds once. */
typedef struct skinny_half_job {
    const tf_fast_kernels *k;
    int64_t m, n, kk, lda, ldb;          /* ldb: B's row stride, or W's when rows */
    const float *a32;                    /* m x kk, widened */
    const uint16_t *a16, *b;             /* raw a (dot products), B or W */
    bool bf16, rows, dp;
    float *c;                            /* m x n f32 */
} skinny_half_job;

static void skinny_half_chunk(void *ctx, int64_t begin, int64_t end) {
    const skinny_half_job *j = ctx;
    int64_t j0 = begin * 64, j1 = end * 64 < j->n ? end * 64 : j->n;
    if (j->dp) j->k->gemm_rows_bf16_dp(j->m, j0, j1, j->kk, j->a16, j->lda, j->b, j->ldb, j->c, j->n);
    else if (j->rows) j->k->gemm_rows_half(j->m, j0, j1, j->kk, j->a32, j->kk, j->b, j->ldb, j->bf16, j->c, j->n);
    else j->k->gemm_small_m_half(j->m, j0, j1, j->kk, j->a32, j->kk, j->b, j->ldb, j->bf16, j->c, j->n);
}

static bool run_matmul_skinny_half(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    const tf_fast_kernels *k = tf_fast();
    tf_dtype dt = O->dtype;
    if (!k || (dt != TF_F16 && dt != TF_BF16) || op->kind != TF_OP_MATMUL || O->ndim != 2) return false;
    int64_t m = O->shape[0], n = O->shape[1], kk = A->shape[1];
    bool rows = B->strides[0] == 1 && n > 1, row_major = B->strides[1] == 1;
    if (m > SKINNY || m * n == 0 || kk < 64 || !(rows || row_major)) return false;
    skinny_half_job j = {k, m, n, kk, A->strides[0], rows ? B->strides[1] : B->strides[0], NULL,
                         (const uint16_t *)(address(A->buffer) + A->offset),
                         (const uint16_t *)(address(B->buffer) + B->offset), dt == TF_BF16, rows, false, NULL};
    j.dp = rows && j.bf16 && k->gemm_rows_bf16_dp && A->strides[1] == 1;
    float *a32 = j.dp ? NULL : malloc(sizeof(float) * (size_t)(m * kk)), *c = malloc(sizeof(float) * (size_t)(m * n));
    if ((!j.dp && !a32) || !c) {
        free(a32);
        free(c);
        return false;                            /* the reference loops need no scratch */
    }
    if (!j.dp) {
        operand a = make_operand(A, address);
        widen_job wa = {dt, a.base, a.stride[0], a.stride[1], kk, a32};
        widen_rows(&wa, 0, m);
    }
    j.a32 = a32;
    j.c = c;
    for_column_blocks(m, n, kk, skinny_half_chunk, &j);
    operand o = make_operand(O, address);
    widen_job wo = {dt, o.base, o.stride[0], o.stride[1], n, c};
    narrow_rows(&wo, 0, m);
    free(a32);
    free(c);
    return true;
}

static tf_status run_matmul(const tf_op *op, tf_cpu_address_fn address) {
    if (run_matmul_skinny(op, address) || run_matmul_skinny_half(op, address) || run_matmul_blas(op, address) ||
        run_matmul_half(op, address))
        return TF_OK;
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    operand a = make_operand(A, address), b = make_operand(B, address), o = make_operand(O, address);
    int nb = O->ndim - 2;
    mm_geom g = {O->shape[nb], A->shape[nb + 1], O->shape[nb + 1], a.stride[nb], a.stride[nb + 1],
                 b.stride[nb], b.stride[nb + 1], o.stride[nb], o.stride[nb + 1], false, 1, 0, 0, 0};
    bool has_c = op->kind == TF_OP_GEMM && op->n_inputs > 2;
    operand c = has_c ? make_operand(&op->inputs[2], address) : o;
    if (op->kind == TF_OP_GEMM) {
        g.epilogue = true;
        g.alpha = op->params.alpha;
        g.beta = has_c ? op->params.beta : 0;
        g.cs_m = c.stride[nb];
        g.cs_n = c.stride[nb + 1];
    }
    void *acc = malloc((size_t)(g.n > 0 ? g.n : 1) * sizeof(double));
    if (!acc) return TF_ERR_OUT_OF_MEMORY;
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        int64_t ao = 0, bo = 0, oo = 0, co = 0;
        for (int d = 0; d < nb; d++) {
            ao += idx[d] * a.stride[d];
            bo += idx[d] * b.stride[d];
            oo += idx[d] * o.stride[d];
            co += idx[d] * c.stride[d];
        }
        matmul_fns[O->dtype](&g, o.base + oo, a.base + ao, b.base + bo, c.base + co, acc);
    } while (nb > 0 && next_index(nb, O->shape, idx));
    free(acc);
    return TF_OK;
}

/* ---- reductions ---- */

typedef struct reduce_geom {
    int n;                                /* reduced axes */
    int64_t shape[TF_MAX_DIMS];
    int64_t stride[TF_MAX_DIMS];          /* bytes */
    int64_t count;
} reduce_geom;

/* Walks the reduced elements of one output in row-major order. */
typedef struct red_iter {
    const reduce_geom *r;
    const char *base;
    int64_t idx[TF_MAX_DIMS];
    bool done;
} red_iter;

static void red_begin(red_iter *it, const reduce_geom *r, const char *base) {
    memset(it, 0, sizeof *it);
    it->r = r;
    it->base = base;
    it->done = r->count == 0;
}

static const char *red_next(red_iter *it) {
    if (it->done) return NULL;
    const char *p = it->base;
    for (int d = 0; d < it->r->n; d++) p += it->idx[d] * it->r->stride[d];
    it->done = !next_index(it->r->n, it->r->shape, it->idx);
    return p;
}

/* One float output of a reduction, computed in double. */
static double reduce_float_one(const tf_op *op, const reduce_geom *r, tf_dtype dt, const char *base) {
    red_iter it;
    const char *p;
    tf_op_kind k = op->kind;
    if (k == TF_OP_ARGMAX || k == TF_OP_ARGMIN) {
        double best = 0;
        int64_t pos = 0, best_pos = -1;
        for (red_begin(&it, r, base); (p = red_next(&it)); pos++) {
            double v = load_f64(dt, p);
            if (best_pos >= 0 && isnan(best)) break;                 /* the first NaN wins */
            if (best_pos < 0 || isnan(v) || (k == TF_OP_ARGMAX ? v > best : v < best)) {
                best = v;
                best_pos = pos;
            }
        }
        return (double)best_pos;
    }
    if (k == TF_OP_MAX || k == TF_OP_MIN) {
        double best = 0;
        bool first = true;
        for (red_begin(&it, r, base); (p = red_next(&it));) {
            double v = load_f64(dt, p);
            if (first || isnan(v) || (k == TF_OP_MAX ? v > best : v < best)) best = isnan(best) && !first ? best : v;
            first = false;
        }
        return best;
    }
    if (k == TF_OP_PROD) {
        double acc = 1;
        for (red_begin(&it, r, base); (p = red_next(&it));) acc *= load_f64(dt, p);
        return acc;
    }
    double acc = 0;
    if (k == TF_OP_LOGSUMEXP) {
        double m = -INFINITY;
        for (red_begin(&it, r, base); (p = red_next(&it));) {
            double v = load_f64(dt, p);
            if (isnan(v) || v > m) m = isnan(m) ? m : v;
        }
        if (isnan(m) || isinf(m)) return m;                          /* NaN, +inf, or all -inf / empty */
        for (red_begin(&it, r, base); (p = red_next(&it));) acc += exp(load_f64(dt, p) - m);
        return m + log(acc);
    }
    for (red_begin(&it, r, base); (p = red_next(&it));) acc += load_f64(dt, p);
    if (k == TF_OP_SUM) return acc;
    double mean = r->count ? acc / (double)r->count : NAN;
    if (k == TF_OP_MEAN) return mean;
    double ss = 0;                                                   /* VAR, STD: two passes */
    for (red_begin(&it, r, base); (p = red_next(&it));) {
        double dv = load_f64(dt, p) - mean;
        ss += dv * dv;
    }
    double div = (double)(r->count - op->params.correction);
    double var = div > 0 ? ss / div : (ss == 0 || isnan(ss)) ? NAN : INFINITY;
    return k == TF_OP_STD ? sqrt(var) : var;
}

/* One integer (or bool) output, wrapping. */
static int64_t reduce_int_one(const tf_op *op, const reduce_geom *r, tf_dtype dt, const char *base) {
    red_iter it;
    const char *p;
    tf_op_kind k = op->kind;
    if (k == TF_OP_ARGMAX || k == TF_OP_ARGMIN || k == TF_OP_MAX || k == TF_OP_MIN) {
        bool want_max = k == TF_OP_ARGMAX || k == TF_OP_MAX;
        int64_t best = 0, pos = 0, best_pos = -1;
        for (red_begin(&it, r, base); (p = red_next(&it)); pos++) {
            int64_t v = load_i64(dt, p);
            if (best_pos < 0 || (want_max ? v > best : v < best)) {
                best = v;
                best_pos = pos;
            }
        }
        return (k == TF_OP_MAX || k == TF_OP_MIN) ? best : best_pos;
    }
    uint64_t acc = k == TF_OP_PROD ? 1 : 0;
    for (red_begin(&it, r, base); (p = red_next(&it));) {
        uint64_t v = (uint64_t)load_i64(dt, p);
        acc = k == TF_OP_PROD ? acc * v : acc + v;
    }
    return (int64_t)acc;
}

typedef struct fast_sum_job {
    const tf_fast_kernels *k;
    const float *x;
    int64_t row;                         /* elements per output (or per partial) */
    double *partial;
    float *out;                          /* per-row results, or NULL for partials */
    bool mean;
} fast_sum_job;

static void fast_sum_rows(void *ctx, int64_t begin, int64_t end) {
    const fast_sum_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        double s = j->k->sum(j->row, j->x + r * j->row);
        if (j->out) j->out[r] = (float)(j->mean ? s / (double)j->row : s);
        else j->partial[r] = s;
    }
}

/* f32 sum/mean of a contiguous input over all axes or the last axis. */
static bool run_reduce_fast(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *I = &op->inputs[0], *O = &op->output;
    const tf_fast_kernels *k = tf_fast();
    bool last = op->params.axis == I->ndim - 1 || (op->params.axis == TF_ALL_AXES && I->ndim <= 1);
    if (!k || (op->kind != TF_OP_SUM && op->kind != TF_OP_MEAN) || I->dtype != TF_F32 || !tf_desc_is_contiguous(I) ||
        !tf_desc_is_contiguous(O) || (op->params.axis != TF_ALL_AXES && !last))
        return false;
    int64_t n = tf_desc_numel(I);
    const float *x = (const float *)(address(I->buffer) + I->offset);
    float *out = (float *)(address(O->buffer) + O->offset);
    if (n == 0) return false;                               /* the reference knows empty means */
    if (last && op->params.axis != TF_ALL_AXES) {           /* one sum per row */
        int64_t row = I->shape[I->ndim - 1], rows = n / row;
        fast_sum_job j = {k, x, row, NULL, out, op->kind == TF_OP_MEAN};
        tf_cpu_parallel_for(rows, ELEMENT_GRAIN / row + 1, fast_sum_rows, &j);
        return true;
    }
    /* One contiguous range per thread (a read stream each), partial sums in
     * double combined in order; small inputs stay on one thread. */
    enum { MAX_PARTS = 64 };
    double partial[MAX_PARTS];
    int64_t parts = n < ELEMENT_GRAIN ? 1 : tf_cpu_num_threads();
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    int64_t chunk = (n / parts + 63) & ~(int64_t)63;
    if (chunk == 0) chunk = n;
    parts = n / chunk;
    fast_sum_job j = {k, x, chunk, partial, NULL, false};
    tf_cpu_parallel_for(parts, 1, fast_sum_rows, &j);
    double s = 0;
    for (int64_t p = 0; p < parts; p++) s += partial[p];
    if (parts * chunk < n) s += k->sum(n - parts * chunk, x + parts * chunk);
    out[0] = (float)(op->kind == TF_OP_MEAN ? s / (double)n : s);
    return true;
}

static tf_status run_reduce(const tf_op *op, tf_cpu_address_fn address) {
    if (run_reduce_fast(op, address)) return TF_OK;
    const tf_tensor_desc *I = &op->inputs[0], *O = &op->output;
    operand in = make_operand(I, address), out = make_operand(O, address);
    reduce_geom r = {0, {0}, {0}, 1};
    for (int d = 0; d < I->ndim; d++) {
        if (op->params.axis != TF_ALL_AXES && d != op->params.axis) continue;
        r.shape[r.n] = I->shape[d];
        r.stride[r.n++] = in.stride[d];
        r.count *= I->shape[d];
    }
    int64_t idx[TF_MAX_DIMS] = {0};
    for (int d = 0; d < O->ndim; d++)
        if (O->shape[d] == 0) return TF_OK;
    bool index_out = op->kind == TF_OP_ARGMAX || op->kind == TF_OP_ARGMIN;
    do {
        const char *ip = in.base;
        char *op_ = out.base;
        for (int d = 0; d < O->ndim; d++) {
            ip += idx[d] * in.stride[d];
            op_ += idx[d] * out.stride[d];
        }
        if (is_float(I->dtype) && !index_out) store_f64(O->dtype, op_, reduce_float_one(op, &r, I->dtype, ip));
        else if (is_float(I->dtype)) store_i64(O->dtype, op_, (int64_t)reduce_float_one(op, &r, I->dtype, ip));
        else store_i64(O->dtype, op_, reduce_int_one(op, &r, I->dtype, ip));
    } while (O->ndim > 0 && next_index(O->ndim, O->shape, idx));
    return TF_OK;
}

/* ---- cumsum ---- */

static tf_status run_cumsum(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *I = &op->inputs[0], *O = &op->output;
    operand in = make_operand(I, address), out = make_operand(O, address);
    if (tf_desc_numel(O) == 0) return TF_OK;
    int ax = op->params.axis == TF_ALL_AXES ? -1 : op->params.axis;
    int64_t len = ax >= 0 ? I->shape[ax] : 1, is = ax >= 0 ? in.stride[ax] : 0, os = ax >= 0 ? out.stride[ax] : 0;
    int64_t shape[TF_MAX_DIMS], idx[TF_MAX_DIMS] = {0};
    for (int d = 0; d < I->ndim; d++) shape[d] = d == ax ? 1 : I->shape[d];   /* lines: every index but the axis */
    bool fl = is_float(I->dtype);
    do {
        const char *ip = in.base;
        char *o = out.base;
        for (int d = 0; d < I->ndim; d++) {
            ip += idx[d] * in.stride[d];
            o += idx[d] * out.stride[d];
        }
        double facc = 0;
        uint64_t iacc = 0;
        for (int64_t j = 0; j < len; j++, ip += is, o += os) {
            if (fl) {
                facc += load_f64(I->dtype, ip);
                store_f64(O->dtype, o, facc);
            } else {
                iacc += (uint64_t)load_i64(I->dtype, ip);
                store_i64(O->dtype, o, (int64_t)iacc);
            }
        }
    } while (I->ndim > 0 && next_index(I->ndim, shape, idx));
    return TF_OK;
}

/* ---- copy / cast ---- */

typedef struct copy_ctx { tf_dtype src, dst; } copy_ctx;

static void copy_row(const void *ctxv, int64_t n, char **p, const int64_t *s) {
    const copy_ctx *c = ctxv;
    size_t es = elsize(c->dst);
    char *o = p[0];
    const char *in = p[1];
    if (c->src == c->dst && s[0] == (int64_t)es && s[1] == (int64_t)es) {
        memcpy(o, in, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++, o += s[0], in += s[1]) {
        if (c->src == c->dst) memcpy(o, in, es);
        else if (is_float(c->src)) store_f64(c->dst, o, load_f64(c->src, in));
        else store_i64(c->dst, o, load_i64(c->src, in));
    }
}

static tf_status run_copy(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
    copy_ctx ctx = {op->inputs[0].dtype, op->output.dtype};
    for_each_row_parallel(op->output.ndim, op->output.shape, 2, ops, copy_row, &ctx);
    return TF_OK;
}

/* ---- creation: fill, arange, random ---- */

static int uniform_bits(tf_dtype dt) { return dt == TF_F16 ? 11 : dt == TF_BF16 ? 8 : 24; }

static tf_status run_create(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *O = &op->output;
    char *base = address(O->buffer) + O->offset;
    int64_t n = tf_desc_numel(O), es = (int64_t)elsize(O->dtype);
    const tf_op_params *p = &op->params;
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (op->kind) {
        case TF_OP_FILL: v = p->value; break;
        case TF_OP_ARANGE: v = p->value + (double)i * p->step; break;
        case TF_OP_RAND_UNIFORM:
            v = O->dtype == TF_F64 ? tf_rand_uniform_f64(p->seed, (uint64_t)i)
                                   : tf_rand_uniform_bits(p->seed, (uint64_t)i, uniform_bits(O->dtype));
            break;
        default: v = tf_rand_normal_f64(p->seed, (uint64_t)i); break;
        }
        store_f64(O->dtype, base + i * es, v);
    }
    return TF_OK;
}

/* ---- entry points ---- */

static bool same_dtype_inputs(const tf_op *op) {
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].dtype != op->output.dtype) return false;
    return true;
}

bool tf_cpu_kernels_support(const tf_op *op) {
    tf_dtype out = op->output.dtype, in = op->n_inputs ? op->inputs[0].dtype : out;
    if ((unsigned)out >= TF_DTYPE_COUNT || (unsigned)in >= TF_DTYPE_COUNT) return false;
    switch (op->kind) {
    case TF_OP_ADD: case TF_OP_SUB: case TF_OP_MUL: case TF_OP_DIV:
    case TF_OP_MAXIMUM: case TF_OP_MINIMUM: case TF_OP_POW: case TF_OP_SWIGLU:
        return binary_loops[op->kind][out] && same_dtype_inputs(op);
    case TF_OP_EQ: case TF_OP_NE: case TF_OP_LT: case TF_OP_LE: case TF_OP_GT: case TF_OP_GE:
    case TF_OP_LOGICAL_AND: case TF_OP_LOGICAL_OR:
        return binary_loops[op->kind][in] && op->inputs[1].dtype == in && out == TF_BOOL;
    case TF_OP_LOGICAL_NOT: return in == TF_BOOL && out == TF_BOOL;
    case TF_OP_ISNAN: case TF_OP_ISINF: return out == TF_BOOL;
    case TF_OP_WHERE:
        return op->inputs[0].dtype == TF_BOOL && op->inputs[1].dtype == out && op->inputs[2].dtype == out;
    case TF_OP_MATMUL: case TF_OP_GEMM: return matmul_fns[out] && same_dtype_inputs(op);
    case TF_OP_SUM: case TF_OP_PROD: case TF_OP_CUMSUM: return is_float(in) ? out == in : out == TF_I64;
    case TF_OP_MEAN: case TF_OP_VAR: case TF_OP_STD: case TF_OP_LOGSUMEXP: return is_float(in) && out == in;
    case TF_OP_MAX: case TF_OP_MIN: return out == in;
    case TF_OP_ARGMAX: case TF_OP_ARGMIN: return out == TF_I64;
    case TF_OP_INDEX_SELECT: case TF_OP_GATHER:
        return out == in && (op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64);
    case TF_OP_TRIL: case TF_OP_TRIU: return out == in && op->output.ndim >= 2;
    case TF_OP_SOFTMAX: case TF_OP_LOG_SOFTMAX: case TF_OP_RMSNORM: case TF_OP_LAYERNORM: case TF_OP_SDPA:
        return is_float(out) && out == in;
    case TF_OP_ROPE: return is_float(out) && out == in && (op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64);
    case TF_OP_CONV2D: case TF_OP_MAXPOOL2D: case TF_OP_AVGPOOL2D: case TF_OP_ADAM:
        return is_float(out) && same_dtype_inputs(op);
    case TF_OP_COPY: case TF_OP_FILL: return true;
    case TF_OP_ARANGE: return out != TF_BOOL;
    case TF_OP_RAND_UNIFORM: case TF_OP_RAND_NORMAL: return is_float(out);
    default: return unary_fns[op->kind].f && is_float(out) && same_dtype_inputs(op);
    }
}

tf_status tf_cpu_kernels_run(const tf_op *op, tf_cpu_address_fn address) {
    switch (op->kind) {
    case TF_OP_ADD: case TF_OP_SUB: case TF_OP_MUL: case TF_OP_DIV:
    case TF_OP_MAXIMUM: case TF_OP_MINIMUM: case TF_OP_POW:
    case TF_OP_EQ: case TF_OP_NE: case TF_OP_LT: case TF_OP_LE: case TF_OP_GT: case TF_OP_GE:
    case TF_OP_LOGICAL_AND: case TF_OP_LOGICAL_OR: case TF_OP_SWIGLU:
        return run_binary(op, address);
    case TF_OP_LOGICAL_NOT: case TF_OP_ISNAN: case TF_OP_ISINF: return run_bool_unary(op, address);
    case TF_OP_WHERE: return run_where(op, address);
    case TF_OP_MATMUL: case TF_OP_GEMM: return run_matmul(op, address);
    case TF_OP_SUM: case TF_OP_MEAN: case TF_OP_MAX: case TF_OP_MIN: case TF_OP_ARGMAX: case TF_OP_ARGMIN:
    case TF_OP_PROD: case TF_OP_VAR: case TF_OP_STD: case TF_OP_LOGSUMEXP:
        return run_reduce(op, address);
    case TF_OP_CUMSUM: return run_cumsum(op, address);
    case TF_OP_INDEX_SELECT: case TF_OP_GATHER: return run_indexed(op, address);
    case TF_OP_TRIL: case TF_OP_TRIU: return run_triangle(op, address);
    case TF_OP_SOFTMAX: case TF_OP_LOG_SOFTMAX: case TF_OP_RMSNORM: case TF_OP_LAYERNORM: return run_row(op, address);
    case TF_OP_ROPE: return run_rope(op, address);
    case TF_OP_SDPA: return run_sdpa(op, address);
    case TF_OP_CONV2D: return run_conv2d(op, address);
    case TF_OP_MAXPOOL2D: case TF_OP_AVGPOOL2D: return run_pool(op, address);
    case TF_OP_ADAM: return run_adam(op, address);
    case TF_OP_COPY: return run_copy(op, address);
    case TF_OP_FILL: case TF_OP_ARANGE: case TF_OP_RAND_UNIFORM: case TF_OP_RAND_NORMAL:
        return run_create(op, address);
    default: return unary_fns[op->kind].f ? run_unary(op, address) : TF_ERR_UNSUPPORTED;
    }
}
