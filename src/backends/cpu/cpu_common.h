/* What the CPU kernels share: typed element access, strided iteration
 * over the pool, and the job a row op is split into. Header-only (static
 * inline): the reference kernels (cpu_ref.c) and the layers that override
 * them (cpu_simd.c, cpu_blas_kernels.c) include it. */
#ifndef TF_CPU_COMMON_H
#define TF_CPU_COMMON_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "fast_kernels.h"
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

static inline size_t elsize(tf_dtype dt) {
    static const size_t sizes[TF_DTYPE_COUNT] = {
#define TF__SZ(E, n, sz, fl, in) [TF_##E] = sz,
        TF_DTYPE_LIST(TF__SZ)
#undef TF__SZ
#define TF__CSZ(E, n, sz, part) [TF_##E] = sz,
        TF_CDTYPE_LIST(TF__CSZ)
#undef TF__CSZ
    };
    return sizes[dt];
}

static inline bool is_complex(tf_dtype dt) { return dt == TF_C64 || dt == TF_C128; }

static inline bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }

/* Any dtype as double / as int64 (bool is 0 or 1). */
static inline double load_f64(tf_dtype dt, const char *p) {
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
    case TF_C64: return LD_f32(p);                 /* the real part (a cast to a real dtype) */
    case TF_C128: return LD_f64(p);
    default: return 0.0;
    }
}

static inline int64_t load_i64(tf_dtype dt, const char *p) {
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
static inline int64_t saturate(double v, int64_t min, int64_t max) {
    if (v != v) return 0;
    if (v <= (double)min) return min;
    if (v >= (double)max) return max;
    return (int64_t)v;
}

static inline void store_f64(tf_dtype dt, char *p, double v) {
    switch (dt) {
    case TF_F32: ST_f32(p, v); break;
    case TF_F64: ST_f64(p, v); break;
    case TF_F16: *(uint16_t *)p = tf_f64_to_f16(v); break;     /* rounded once, not via f32 */
    case TF_BF16: *(uint16_t *)p = tf_f64_to_bf16(v); break;
    case TF_I8: *(int8_t *)p = (int8_t)saturate(v, INT8_MIN, INT8_MAX); break;
    case TF_I32: *(int32_t *)p = (int32_t)saturate(v, INT32_MIN, INT32_MAX); break;
    case TF_I64: *(int64_t *)p = saturate(v, INT64_MIN, INT64_MAX); break;
    case TF_U8: *(uint8_t *)p = (uint8_t)saturate(v, 0, UINT8_MAX); break;
    case TF_BOOL: *(uint8_t *)p = v != 0.0; break;   /* NaN is true */
    case TF_C64: ST_f32(p, v); ST_f32(p + 4, 0.0); break;
    case TF_C128: ST_f64(p, v); ST_f64(p + 8, 0.0); break;
    default: break;
    }
}

static inline void store_i64(tf_dtype dt, char *p, int64_t v) {
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

static inline operand make_operand(const tf_tensor_desc *d, tf_cpu_address_fn address) {
    operand o;
    o.base = address(d->buffer) + d->offset;
    for (int i = 0; i < d->ndim; i++) o.stride[i] = d->strides[i] * (int64_t)elsize(d->dtype);
    return o;
}

typedef void (*row_fn)(const void *ctx, int64_t n, char **p, const int64_t *s);

/* Advance an odometer over the first `ndim` axes; false when it wraps. */
static inline bool next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* Calls fn once per innermost row of `shape` for `nops` operands. */
static inline void for_each_row(int ndim, const int64_t *shape, int nops, const operand *ops, row_fn fn,
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

static inline void rows_chunk(void *jv, int64_t begin, int64_t end) {
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
static inline void for_each_row_parallel(int ndim, const int64_t *shape, int nops, const operand *ops, row_fn fn,
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


/* Kernel scratch from the library's counted allocator (tf_host_api alloc),
 * so the fault-injection test reaches every kernel's failure path. */
void *tf_cpu_alloc(size_t nbytes);
/* The machine's RAM in bytes. */
uint64_t tf_cpu_physical_memory(void);
void tf_cpu_free(void *p);
/* Large scratch kept between calls (glibc maps and page-faults every
 * block past 128 KB afresh): take a block of at least nbytes (*got: its
 * size), give it back with that size. NULL when out of memory. */
void *tf_cpu_scratch_take(size_t nbytes, size_t *got);
void tf_cpu_scratch_give(void *p, size_t bytes);
/* A kernel out of scratch memory: TF_ERR_OUT_OF_MEMORY with a message. */
tf_status tf_cpu_oom(const char *kernel, size_t nbytes);

/* c [m, n] (f32, row-major) = x @ W^T for f32 x [m, k] (row stride lda)
 * and a bf16 W [n, k] (row stride ldw), x rounded to bf16 on the way
 * (vdpbf16ps: exact products, f32 sums; cpu_blas_kernels.c). False, with
 * nothing written, without AVX512-BF16 or for fewer than a dozen rows;
 * true when it took the product, *s then TF_OK or, without scratch,
 * TF_ERR_OUT_OF_MEMORY (another path would round differently). */
bool tf_cpu_bf16_linear(int64_t m, int64_t n, int64_t k, const float *x, int64_t lda, const uint16_t *w, int64_t ldw,
                        float *c, tf_status *s);

/* A linear layer's product c [m, n] = a @ W^T (+ bias) through the fast
 * kernel, column blocks over the pool (cpu_simd.c; the quantized-weight
 * product takes f16/bf16 weights through it too). */
/* What GEMM_EPILOGUE and QMATMUL_EPILOGUE do after the product, to f32
 * values: QMATMUL_EPILOGUE's bias, the activation, then the residual (of
 * the output's dtype, any strides). */
typedef struct tf_cpu_epilogue {
    const char *bias;                    /* f32 bias row (QMATMUL_EPILOGUE), or NULL */
    int64_t bias_s;                      /* its stride in bytes */
    int32_t activation;                  /* a unary op, or TF_NO_ACTIVATION */
    bool has_residual;
    tf_dtype dt;                         /* the residual's */
    const char *r;                       /* its element [0, 0] */
    int64_t rs_m, rs_n;                  /* its strides in bytes */
} tf_cpu_epilogue;

/* The epilogue of op (GEMM_EPILOGUE or QMATMUL_EPILOGUE, 2-D) as the
 * kernels apply it. */
tf_cpu_epilogue tf_cpu_epilogue_of(const tf_op *op, tf_cpu_address_fn address);
/* Rows [i0, i0 + rows) and columns [j0, j0 + cols) of the product, in f32
 * at c (row stride ldc), finished in place: activation, then residual.
 * (cpu_simd.c) */
void tf_cpu_epilogue_block(const tf_cpu_epilogue *e, float *c, int64_t ldc, int64_t i0, int64_t rows, int64_t j0,
                           int64_t cols);
/* The epilogue over a 2-D output as stored (f32, f16 or bf16), rows over the
 * pool: for products that wrote the output first. */
void tf_cpu_epilogue_output(const tf_cpu_epilogue *e, const tf_tensor_desc *O, tf_cpu_address_fn address);
/* unary op on one f32 value by the reference formula (cpu_ref.c): the
 * epilogue's path for activations without a SIMD body. */
float tf_cpu_unary_f32(int32_t op, float x);
/* Whether op is a unary formula the reference computes (cpu_ref.c). */
bool tf_cpu_unary_formula(int32_t op);

/* A linear layer's product c [m, n] = a @ W^T (+ bias) through the fast
 * kernel, column blocks over the pool (cpu_simd.c; the quantized-weight
 * product takes f16/bf16 weights through it too); epi (or NULL) finishes
 * each block while it is in cache. */
void tf_cpu_run_linear(const tf_fast_kernels *k, int64_t m, int64_t n, int64_t kk, const float *a, int64_t lda,
                       const void *w, int64_t ldw, int wkind, const float *bias, const tf_cpu_epilogue *epi, float *c);

#define ELEMENT_GRAIN (1 << 16)          /* below this many elements one thread does the work */

static inline bool all_strides_zero(const tf_tensor_desc *d) {
    for (int i = 0; i < d->ndim; i++)
        if (d->strides[i] && d->shape[i] != 1) return false;
    return true;
}

/* ---- row ops: the job (reference and SIMD lines share it) ---- */

typedef struct row_job {
    const tf_op *op;
    operand x, o, w, b, r;               /* r: ADD_NORM's residual */
    bool has_w, has_b, has_r, center, fast;   /* center: a layer norm (the mean taken out) */
    int64_t len, xs, os, rs;
    int add_code;                        /* the SIMD table's code for ADD (ADD_NORM's sum) */
    int ndim;
    int64_t lines[TF_MAX_DIMS];          /* x's shape with extent 1 along the axis */
    tf_dtype dt;
    const tf_fast_kernels *k;
} row_job;

/* The reference for one line (rows with NaN in the SIMD layer; for
 * ADD_NORM, line `line`'s sum is formed first), and a job set up for op;
 * false if there is nothing to do. (cpu_ref.c) */
void tf_cpu_row_reference(const row_job *j, int64_t line, const char *xp, char *op_);
bool tf_cpu_row_setup(const tf_op *op, tf_cpu_address_fn address, row_job *j, int64_t *lines);

/* The reference's typed loop over one row of a binary op (cpu_ref.c). */
typedef void (*binary_loop)(int64_t n, char **p, const int64_t *s);
binary_loop tf_cpu_binary_loop(tf_op_kind kind, tf_dtype dt);

/* The start of line `line` of a row job in x and in the output. */
static inline void row_line_at(const row_job *j, int64_t line, const char **xp, char **op_) {
    *xp = j->x.base;
    *op_ = j->o.base;
    for (int64_t d = j->ndim - 1, rest = line; d >= 0; d--) {
        int64_t c = rest % j->lines[d];
        rest /= j->lines[d];
        *xp += c * j->x.stride[d];
        *op_ += c * j->o.stride[d];
    }
}

/* The start of line `line` in ADD_NORM's residual. */
static inline const char *row_residual_at(const row_job *j, int64_t line) {
    const char *rp = j->r.base;
    for (int64_t d = j->ndim - 1, rest = line; d >= 0; d--) {
        rp += rest % j->lines[d] * j->r.stride[d];
        rest /= j->lines[d];
    }
    return rp;
}

/* Whether a product reads a c (GEMM's, or GEMM_EPILOGUE's before its
 * residual): given and beta != 0. */
static inline bool gemm_reads_c(const tf_op *op) {
    int before_residual = op->n_inputs - (op->kind == TF_OP_GEMM_EPILOGUE && (op->params.flags & TF_GEMM_RESIDUAL));
    return (op->kind == TF_OP_GEMM || op->kind == TF_OP_GEMM_EPILOGUE) && before_residual > 2 && op->params.beta != 0;
}

/* ---- a batched product whose b is broadcast over the batch (x [B, m, k]
 * @ W [k, n]) folded into one [B*m, k] product: one GEMM whose weight is
 * read once, not B small ones. True if it wrote the folded op into *f. ---- */

static inline bool rows_fold(const tf_tensor_desc *d, int nb, int64_t *row_stride) {
    int64_t s = d->strides[nb], extent = d->shape[nb];       /* rows so far, and their stride */
    for (int i = nb - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != s * extent) return false;
        extent *= d->shape[i];
    }
    *row_stride = s;
    return true;
}

static inline void as_matrix(tf_tensor_desc *d, int nb, int64_t rows, int64_t row_stride) {
    int64_t cols = d->shape[nb + 1], col_stride = d->strides[nb + 1];
    d->ndim = 2;
    d->shape[0] = rows;
    d->shape[1] = cols;
    d->strides[0] = row_stride;
    d->strides[1] = col_stride;
}

static inline bool fold_broadcast_batch(const tf_op *op, tf_op *f) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    int nb = O->ndim - 2;
    if (nb < 1 || A->ndim != O->ndim || B->ndim != O->ndim) return false;
    for (int i = 0; i < nb; i++)
        if (B->strides[i] != 0 && B->shape[i] != 1) return false;
    int64_t rows = O->shape[nb], as, os;
    for (int i = 0; i < nb; i++) rows *= O->shape[i];
    if (!rows_fold(A, nb, &as) || !rows_fold(O, nb, &os)) return false;
    int64_t extra_stride[TF_OP_MAX_INPUTS] = {0};             /* c and the residual, when given */
    for (int x = 2; x < op->n_inputs; x++) {
        const tf_tensor_desc *C = &op->inputs[x];
        bool row = true;                                      /* one row for all: a bias */
        for (int i = 0; i <= nb; i++) row &= C->strides[i] == 0 || C->shape[i] == 1;
        if (!row && !rows_fold(C, nb, &extra_stride[x])) return false;
    }
    *f = *op;
    as_matrix(&f->inputs[0], nb, rows, as);
    as_matrix(&f->inputs[1], nb, B->shape[nb], B->strides[nb]);
    as_matrix(&f->output, nb, rows, os);
    for (int x = 2; x < op->n_inputs; x++) as_matrix(&f->inputs[x], nb, rows, extra_stride[x]);
    return true;
}

/* ---- f16/bf16 rows widened to f32 and back (half matmul, both layers) ---- */

typedef struct widen_job {
    tf_dtype dt;
    const char *src;
    int64_t rs, cs;                      /* source strides in bytes */
    int64_t cols;
    float *dst;                          /* rows x cols, row-major */
} widen_job;

static inline void widen_rows(void *ctx, int64_t begin, int64_t end) {
    const widen_job *j = ctx;
    const tf_fast_kernels *k = tf_fast();
    for (int64_t r = begin; r < end; r++)
        if (k && j->cs == 2) k->widen(j->cols, (const uint16_t *)(j->src + r * j->rs), j->dst + r * j->cols, j->dt == TF_BF16);
        else for (int64_t c = 0; c < j->cols; c++) {
            const char *p = j->src + r * j->rs + c * j->cs;
            j->dst[r * j->cols + c] = j->dt == TF_F16 ? LD_f16(p) : LD_bf16(p);
        }
}

static inline void narrow_rows(void *ctx, int64_t begin, int64_t end) {
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

#endif
