/* The CPU reference kernels: plain C, every dtype the op table accepts,
 * any strides. Each works on an N-d odometer that walks every axis but the
 * last and hands rows to a typed inner loop, NumPy ufunc style; f16/bf16 are
 * computed in f32 (f64 for the transformer and vision ops), integer
 * arithmetic wraps. They fill the kernel table first (tf_cpu_ref_install);
 * the SIMD and BLAS layers override entries, and TF_CPU_KERNELS=reference
 * leaves the table as this file fills it. They are the correctness
 * reference for every other backend and the fallback for ops a backend
 * lacks. */
#include <stdatomic.h>

#include "cpu_common.h"
#include "formulas.h"

/* ---- elementwise binary and unary: the formulas of src/ops/formulas.txt ---- */

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

/* The bitwise int forms: shift counts outside [0, 63] give 0 (left) or
 * the sign (right); a left shift goes through uint64 (no signed overflow). */
static int64_t int_and(int64_t x, int64_t y) { return x & y; }
static int64_t int_or(int64_t x, int64_t y) { return x | y; }
static int64_t int_xor(int64_t x, int64_t y) { return x ^ y; }
static int64_t int_shl(int64_t x, int64_t y) { return y < 0 || y > 63 ? 0 : (int64_t)((uint64_t)x << y); }
static int64_t int_shr(int64_t x, int64_t y) { return y < 0 || y > 63 ? (x < 0 ? -1 : 0) : x >> y; }

/* b_NAME_f / _d / _i and u_NAME_f / _d, one per formula (generated). */
#include "formulas_ref.inc"

#define DEF_BIN(NAME, DT, CT, FN)                                                \
    static void bin_##NAME##_##DT(int64_t n, char **p, const int64_t *s) {     \
        char *o = p[0];                                                         \
        const char *a = p[1], *b = p[2];                                        \
        for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2]) {     \
            CT x = (CT)LD_##DT(a), y = (CT)LD_##DT(b);                          \
            ST_##DT(o, FN(x, y));                                               \
        }                                                                       \
    }
/* f16 and bf16 compute in f32, integers in int64 (wrapping). */
#define DEF_FLOAT_BINS(E, NAME)                                                          \
    DEF_BIN(NAME, f32, float, b_##NAME##_f) DEF_BIN(NAME, f64, double, b_##NAME##_d)     \
    DEF_BIN(NAME, f16, float, b_##NAME##_f) DEF_BIN(NAME, bf16, float, b_##NAME##_f)
#define DEF_INT_BINS(E, NAME)                                                              \
    DEF_BIN(NAME, i8, int64_t, b_##NAME##_i) DEF_BIN(NAME, i32, int64_t, b_##NAME##_i)     \
    DEF_BIN(NAME, i64, int64_t, b_##NAME##_i) DEF_BIN(NAME, u8, int64_t, b_##NAME##_i)
TF_FORMULA_BINARY(DEF_FLOAT_BINS)
TF_FORMULA_BINARY_INT(DEF_INT_BINS)

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

#define FLOAT_ROW(OP) \
    [TF_F32] = bin_##OP##_f32, [TF_F64] = bin_##OP##_f64, [TF_F16] = bin_##OP##_f16, [TF_BF16] = bin_##OP##_bf16
#define INT_ROW(OP) [TF_I8] = bin_##OP##_i8, [TF_I32] = bin_##OP##_i32, [TF_I64] = bin_##OP##_i64, [TF_U8] = bin_##OP##_u8

#define FLOAT_ONLY_ROW(E, NAME) [TF_OP_##E] = {FLOAT_ROW(NAME)},
#define FLOAT_INT_ROW(E, NAME) [TF_OP_##E] = {FLOAT_ROW(NAME), INT_ROW(NAME)},
static const binary_loop binary_loops[TF_OP_COUNT][TF_DTYPE_COUNT] = {
    TF_FORMULA_BINARY_FLOAT_ONLY(FLOAT_ONLY_ROW)
    TF_FORMULA_BINARY_INT(FLOAT_INT_ROW)
    [TF_OP_EQ] = CMP_ROW(eq), [TF_OP_NE] = CMP_ROW(ne), [TF_OP_LT] = CMP_ROW(lt),
    [TF_OP_LE] = CMP_ROW(le), [TF_OP_GT] = CMP_ROW(gt), [TF_OP_GE] = CMP_ROW(ge),
    [TF_OP_LOGICAL_AND] = {[TF_BOOL] = cmp_and_b8},
    [TF_OP_LOGICAL_OR] = {[TF_BOOL] = cmp_or_b8},
};


typedef struct binary_ctx { binary_loop loop; } binary_ctx;

static void binary_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    ((const binary_ctx *)ctx)->loop(n, p, s);
}

binary_loop tf_cpu_binary_loop(tf_op_kind kind, tf_dtype dt) { return binary_loops[kind][dt]; }

static tf_status run_binary(const tf_op *op, tf_cpu_address_fn address) {
    operand ops[3] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address),
                      make_operand(&op->inputs[1], address)};
    binary_ctx ctx = {binary_loops[op->kind][op->inputs[0].dtype]};
    for_each_row_parallel(op->output.ndim, op->output.shape, 3, ops, binary_row, &ctx);
    return TF_OK;
}

/* ---- elementwise unary (floats): u_NAME_f / u_NAME_d from formulas_ref.inc ---- */

typedef float (*unary_f)(float, const tf_op_params *);
typedef double (*unary_d)(double, const tf_op_params *);

#define UNARY_ROW(E, NAME) [TF_OP_##E] = {u_##NAME##_f, u_##NAME##_d},
static const struct { unary_f f; unary_d d; } unary_fns[TF_OP_COUNT] = {TF_FORMULA_UNARY(UNARY_ROW)};

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
    /* index_select of whole rows (an embedding's lookup): the last axis,
     * contiguous on both sides, moves as one block per pick */
    int last = O->ndim - 1;
    bool rows = op->kind == TF_OP_INDEX_SELECT && O->ndim >= 2 && ax != last && x.stride[last] == (int64_t)es &&
                o.stride[last] == (int64_t)es;
    int walk = rows ? last : O->ndim;                 /* the axes walked one index at a time */
    size_t block = rows ? es * (size_t)O->shape[last] : es;
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        const char *ip = ix.base;
        if (op->kind == TF_OP_INDEX_SELECT) ip += idx[ax] * ix.stride[0];
        else
            for (int d = 0; d < O->ndim; d++) ip += idx[d] * ix.stride[d];
        int64_t pick = load_index(I, ip);
        const char *xp = x.base;
        char *op_ = o.base;
        for (int d = 0; d < walk; d++) {
            xp += (d == ax ? pick : idx[d]) * x.stride[d];
            op_ += idx[d] * o.stride[d];
        }
        memcpy(op_, xp, block);
    } while (walk > 0 && next_index(walk, O->shape, idx));
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

/* ---- row ops: softmax, log_softmax, rmsnorm, layernorm, and the norms
 * after a residual add (in double) ---- */

/* ADD_NORM's sum x + r into the output line, rounded to the dtype there
 * (as tf_add would store it); the norm then reads it back. */
static void add_residual_line(const row_job *j, int64_t line, const char *xp, char *op_) {
    const char *rp = row_residual_at(j, line);
    for (int64_t i = 0; i < j->len; i++)
        store_f64(j->dt, op_ + i * j->os, load_f64(j->dt, xp + i * j->xs) + load_f64(j->dt, rp + i * j->rs));
}

/* One line, in double: the reference (and the fallback for rows with NaN). */
void tf_cpu_row_reference(const row_job *j, int64_t line, const char *xp, char *op_) {
    tf_dtype dt = j->dt;
    int64_t len = j->len, xs = j->xs, os = j->os;
    tf_op_kind kind = j->op->kind;
    if (j->has_r) {                         /* the norm reads the sum in place: each value before it is written */
        add_residual_line(j, line, xp, op_);
        xp = op_;
        xs = os;
    }
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
    bool center = j->center;
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
    for (int64_t line = begin; line < end; line++) {
        const char *xp;
        char *op_;
        row_line_at(j, line, &xp, &op_);
        tf_cpu_row_reference(j, line, xp, op_);
    }
}

bool tf_cpu_row_setup(const tf_op *op, tf_cpu_address_fn address, row_job *j, int64_t *lines_out) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    memset(j, 0, sizeof *j);
    j->op = op;
    j->x = make_operand(X, address);
    j->o = make_operand(O, address);
    int next = 1, ax = op->params.axis;
    j->has_r = op->kind == TF_OP_ADD_RMSNORM || op->kind == TF_OP_ADD_LAYERNORM;
    j->center = op->kind == TF_OP_LAYERNORM || op->kind == TF_OP_ADD_LAYERNORM;
    if (j->has_r) j->r = make_operand(&op->inputs[next++], address);
    j->has_w = op->params.flags & TF_ROW_WEIGHT;
    j->has_b = op->params.flags & TF_ROW_BIAS;
    if (j->has_w) j->w = make_operand(&op->inputs[next++], address);
    if (j->has_b) j->b = make_operand(&op->inputs[next++], address);
    j->dt = X->dtype;
    j->len = X->shape[ax];
    j->xs = j->x.stride[ax];
    j->os = j->o.stride[ax];
    j->rs = j->has_r ? j->r.stride[ax] : 0;
    j->ndim = X->ndim;
    int64_t lines = 1;
    for (int d = 0; d < X->ndim; d++) {
        j->lines[d] = d == ax ? 1 : X->shape[d];
        lines *= j->lines[d];
    }
    *lines_out = lines;
    return tf_desc_numel(O) != 0 && j->len != 0;
}

static tf_status run_row(const tf_op *op, tf_cpu_address_fn address) {
    row_job j;
    int64_t lines;
    if (tf_cpu_row_setup(op, address, &j, &lines)) tf_cpu_parallel_for(lines, ELEMENT_GRAIN / j.len + 1, row_lines, &j);
    return TF_OK;
}

/* ---- rotary position embedding ---- */

/* The angles pos * theta^(-2i/rot) of every position, as cos and sin in
 * double, computed once per call ([npos][2 * half]) and shared by every
 * head, then the rows rotated in parallel, in double as before. (One
 * sincos per row and a single thread made RoPE 6% of a SmolLM2 prompt.)
 * A positions axis too long for the table (over 2^20 angles) takes the
 * angles per row instead, on one thread (one row buffer). */
#define ROPE_TABLE_MAX (1 << 20)

typedef struct rope_job {
    const tf_op *op;
    operand x, p, o;
    const double *inv, *table;           /* table: NULL when computed per row into `own` */
    double *own;
    int64_t half, rot, last, xs, os;
    int nd, ax;
    bool neox;
} rope_job;

static void rope_angles(const rope_job *j, double pos, double *cs) {
    for (int64_t i = 0; i < j->half; i++) {
        const double angle = pos * j->inv[i];
        cs[i] = cos(angle);
        cs[j->half + i] = sin(angle);
    }
}

/* One contiguous f32 row, pair by pair (a, b) -> (a c - b s, a s + b c), in
 * double as the general loop; pairs are (i, i + half) or (2i, 2i + 1). */
static void rope_row_f32(const rope_job *j, const float *x, float *o, const double *cs, const double *sn) {
    const int64_t h = j->half;
    if (j->neox)
        for (int64_t i = 0; i < h; i++) {
            const double a = x[i], b = x[i + h];
            o[i] = (float)(a * cs[i] - b * sn[i]);
            o[i + h] = (float)(a * sn[i] + b * cs[i]);
        }
    else
        for (int64_t i = 0; i < h; i++) {
            const double a = x[2 * i], b = x[2 * i + 1];
            o[2 * i] = (float)(a * cs[i] - b * sn[i]);
            o[2 * i + 1] = (float)(a * sn[i] + b * cs[i]);
        }
    for (int64_t e = j->rot; e < j->last; e++) o[e] = x[e];
}

static void rope_rows(void *ctx, int64_t begin, int64_t end) {
    const rope_job *j = ctx;
    const tf_tensor_desc *X = &j->op->inputs[0], *P = &j->op->inputs[1];
    const tf_dtype dt = X->dtype;
    for (int64_t line = begin; line < end; line++) {
        const char *xp = j->x.base;
        char *op_ = j->o.base;
        int64_t rest = line, at_ax = 0;
        for (int d = j->nd - 2; d >= 0; d--) {
            const int64_t i = rest % X->shape[d];
            rest /= X->shape[d];
            xp += i * j->x.stride[d];
            op_ += i * j->o.stride[d];
            if (d == j->ax) at_ax = i;
        }
        const double *cs = j->table ? j->table + at_ax * 2 * j->half : j->own;
        if (!j->table) rope_angles(j, (double)load_index(P, j->p.base + at_ax * j->p.stride[0]), j->own);
        const double *sn = cs + j->half;
        if (dt == TF_F32 && j->xs == 4 && j->os == 4 && (const char *)op_ != xp) {   /* the common case: pairs */
            rope_row_f32(j, (const float *)xp, (float *)op_, cs, sn);
            continue;
        }
        for (int64_t e = 0; e < j->last; e++) {
            double v = load_f64(dt, xp + e * j->xs);
            if (e < j->rot) {
                const int64_t i = j->neox ? e % j->half : e / 2,
                              partner = j->neox ? (e < j->half ? e + j->half : e - j->half) : e ^ 1;
                const bool first = j->neox ? e < j->half : (e % 2) == 0;
                const double u = load_f64(dt, xp + partner * j->xs);
                v = first ? v * cs[i] - u * sn[i] : u * sn[i] + v * cs[i];
            }
            store_f64(dt, op_ + e * j->os, v);
        }
    }
}

static tf_status run_rope(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *P = &op->inputs[1], *O = &op->output;
    rope_job j = {.op = op, .x = make_operand(X, address), .p = make_operand(P, address), .o = make_operand(O, address)};
    j.nd = X->ndim;
    j.ax = op->params.axis;
    j.rot = op->params.rotary_dims;
    j.half = j.rot / 2;
    j.last = X->shape[j.nd - 1];
    j.neox = op->params.flags & TF_ROPE_NEOX;
    j.xs = j.x.stride[j.nd - 1];
    j.os = j.o.stride[j.nd - 1];
    if (tf_desc_numel(X) == 0) return TF_OK;
    const int64_t npos = X->shape[j.ax];
    const bool tabled = npos * j.half <= ROPE_TABLE_MAX;
    const size_t doubles = (size_t)(j.half + 2 * (tabled ? npos : 1) * j.half + 1);
    double *mem = tf_cpu_alloc(sizeof(double) * doubles);
    if (!mem) return tf_cpu_oom("rope", sizeof(double) * doubles);
    double *inv = mem;
    for (int64_t i = 0; i < j.half; i++) inv[i] = pow(op->params.theta, -2.0 * (double)i / (double)j.rot);
    j.inv = inv;
    if (tabled) {
        double *table = mem + j.half;
        for (int64_t q = 0; q < npos; q++)
            rope_angles(&j, (double)load_index(P, j.p.base + q * j.p.stride[0]), table + q * 2 * j.half);
        j.table = table;
    } else {
        j.own = mem + j.half;
    }
    const int64_t lines = tf_desc_numel(O) / j.last;
    if (tabled) tf_cpu_parallel_for(lines, ELEMENT_GRAIN / j.last + 1, rope_rows, &j);
    else rope_rows(&j, 0, lines);
    tf_cpu_free(mem);
    return TF_OK;
}

/* ---- scaled dot-product attention (two passes over the keys, in double) ---- */

static tf_status run_sdpa(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *Q = &op->inputs[0], *K = &op->inputs[1], *V = &op->inputs[2], *O = &op->output;
    bool has_mask = op->params.flags & TF_SDPA_MASK, causal = op->params.flags & TF_SDPA_CAUSAL;
    operand q = make_operand(Q, address), k = make_operand(K, address), v = make_operand(V, address),
            o = make_operand(O, address), m = has_mask ? make_operand(&op->inputs[3], address) : o;
    int64_t B = Q->shape[0], Hq = Q->shape[1], Lq = Q->shape[2], D = Q->shape[3], Lk = K->shape[2], Dv = V->shape[3];
    int64_t group = Hq / K->shape[1];
    tf_dtype dt = Q->dtype, mdt = has_mask ? op->inputs[3].dtype : dt;
    double *scores = tf_cpu_alloc(sizeof(double) * (size_t)(Lk > 0 ? Lk : 1)), *acc = tf_cpu_alloc(sizeof(double) * (size_t)(Dv > 0 ? Dv : 1));
    if (!scores || !acc) {
        tf_cpu_free(scores);
        tf_cpu_free(acc);
        return tf_cpu_oom("sdpa", sizeof(double) * (size_t)(Lk + Dv));
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
    tf_cpu_free(scores);
    tf_cpu_free(acc);
    return TF_OK;
}

/* ---- attention's gradients: the forward recomputed in double ---- */

typedef struct attn_grad_ref {
    operand q, k, v, dout;
    tf_dtype dt;
    int64_t Hq, Lq, D, Lk, Dv, group;
    double scale;
    int64_t q_offset;
    bool causal;
} attn_grad_ref;

/* For query head h of batch b: P [Lq, Lk] = softmax(scale q k^T, causal)
 * and dS = P * (dP - rowsum(P * dP)) with dP = dO v^T. */
static void attn_grad_probs(const attn_grad_ref *r, int64_t b, int64_t h, double *P, double *dS) {
    const char *qb = r->q.base + b * r->q.stride[0] + h * r->q.stride[1];
    const char *kb = r->k.base + b * r->k.stride[0] + (h / r->group) * r->k.stride[1];
    const char *vb = r->v.base + b * r->v.stride[0] + (h / r->group) * r->v.stride[1];
    const char *gb = r->dout.base + b * r->dout.stride[0] + h * r->dout.stride[1];
    for (int64_t i = 0; i < r->Lq; i++) {
        double *p = P + i * r->Lk, *ds = dS + i * r->Lk, mx = -INFINITY, sum = 0, delta = 0;
        for (int64_t j = 0; j < r->Lk; j++) {
            double sc = -INFINITY;
            if (!r->causal || j <= r->q_offset + i) {
                sc = 0;
                for (int64_t d = 0; d < r->D; d++)
                    sc += load_f64(r->dt, qb + i * r->q.stride[2] + d * r->q.stride[3]) *
                          load_f64(r->dt, kb + j * r->k.stride[2] + d * r->k.stride[3]);
                sc *= r->scale;
            }
            p[j] = sc;
            if (isnan(sc) || sc > mx) mx = isnan(mx) ? mx : sc;
        }
        for (int64_t j = 0; j < r->Lk; j++) sum += (p[j] = exp(p[j] - mx));
        for (int64_t j = 0; j < r->Lk; j++) {
            p[j] /= sum;
            double dp = 0;
            for (int64_t e = 0; e < r->Dv; e++)
                dp += load_f64(r->dt, gb + i * r->dout.stride[2] + e * r->dout.stride[3]) *
                      load_f64(r->dt, vb + j * r->v.stride[2] + e * r->v.stride[3]);
            ds[j] = dp;
            delta += p[j] * dp;
        }
        for (int64_t j = 0; j < r->Lk; j++) ds[j] = p[j] * (ds[j] - delta);
    }
}

static attn_grad_ref attn_grad_setup(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *Q = &op->inputs[0], *K = &op->inputs[1], *V = &op->inputs[2];
    attn_grad_ref r = {make_operand(Q, address), make_operand(K, address), make_operand(V, address),
                       make_operand(&op->inputs[3], address), Q->dtype, Q->shape[1], Q->shape[2], Q->shape[3],
                       K->shape[2], V->shape[3], Q->shape[1] / K->shape[1], op->params.scale, op->params.q_offset,
                       (op->params.flags & TF_SDPA_CAUSAL) != 0};
    return r;
}

/* dQ = scale dS k, per query head. */
static tf_status run_sdpa_grad_q(const tf_op *op, tf_cpu_address_fn address) {
    if (op->n_inputs != 4 || op->inputs[0].ndim != 4 || op->inputs[1].ndim != 4 || op->output.ndim != 4)
        return TF_ERR_SHAPE;
    attn_grad_ref r = attn_grad_setup(op, address);
    operand o = make_operand(&op->output, address);
    size_t n = (size_t)(r.Lq * r.Lk > 0 ? r.Lq * r.Lk : 1);
    double *P = tf_cpu_alloc(sizeof(double) * n), *dS = tf_cpu_alloc(sizeof(double) * n);
    if (!P || !dS) {
        tf_cpu_free(P);
        tf_cpu_free(dS);
        return tf_cpu_oom("sdpa_grad_q", 2 * sizeof(double) * n);
    }
    for (int64_t b = 0; b < op->output.shape[0]; b++)
        for (int64_t h = 0; h < r.Hq; h++) {
            attn_grad_probs(&r, b, h, P, dS);
            const char *kb = r.k.base + b * r.k.stride[0] + (h / r.group) * r.k.stride[1];
            for (int64_t i = 0; i < r.Lq; i++)
                for (int64_t d = 0; d < r.D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < r.Lk; j++)
                        acc += dS[i * r.Lk + j] * load_f64(r.dt, kb + j * r.k.stride[2] + d * r.k.stride[3]);
                    store_f64(r.dt, o.base + b * o.stride[0] + h * o.stride[1] + i * o.stride[2] + d * o.stride[3],
                              acc * r.scale);
                }
        }
    tf_cpu_free(P);
    tf_cpu_free(dS);
    return TF_OK;
}

/* [dK | dV] per kv head: dK = scale dS^T q and dV = P^T dO, summed over the
 * query heads of its group. */
static tf_status run_sdpa_grad_kv(const tf_op *op, tf_cpu_address_fn address) {
    if (op->n_inputs != 4 || op->inputs[0].ndim != 4 || op->inputs[1].ndim != 4 || op->output.ndim != 4)
        return TF_ERR_SHAPE;
    attn_grad_ref r = attn_grad_setup(op, address);
    operand o = make_operand(&op->output, address);
    const int64_t W = r.D + r.Dv;
    size_t n = (size_t)(r.Lq * r.Lk > 0 ? r.Lq * r.Lk : 1), nacc = (size_t)(r.Lk * W > 0 ? r.Lk * W : 1);
    double *P = tf_cpu_alloc(sizeof(double) * n), *dS = tf_cpu_alloc(sizeof(double) * n),
           *acc = tf_cpu_alloc(sizeof(double) * nacc);
    if (!P || !dS || !acc) {
        tf_cpu_free(P);
        tf_cpu_free(dS);
        tf_cpu_free(acc);
        return tf_cpu_oom("sdpa_grad_kv", sizeof(double) * (2 * n + nacc));
    }
    for (int64_t b = 0; b < op->output.shape[0]; b++)
        for (int64_t kh = 0; kh < op->output.shape[1]; kh++) {
            memset(acc, 0, sizeof(double) * nacc);
            for (int64_t h = kh * r.group; h < (kh + 1) * r.group; h++) {
                attn_grad_probs(&r, b, h, P, dS);
                const char *qb = r.q.base + b * r.q.stride[0] + h * r.q.stride[1];
                const char *gb = r.dout.base + b * r.dout.stride[0] + h * r.dout.stride[1];
                for (int64_t i = 0; i < r.Lq; i++)
                    for (int64_t j = 0; j < r.Lk; j++) {
                        double ds = dS[i * r.Lk + j] * r.scale, p = P[i * r.Lk + j];
                        for (int64_t d = 0; d < r.D; d++)
                            acc[j * W + d] += ds * load_f64(r.dt, qb + i * r.q.stride[2] + d * r.q.stride[3]);
                        for (int64_t e = 0; e < r.Dv; e++)
                            acc[j * W + r.D + e] +=
                                p * load_f64(r.dt, gb + i * r.dout.stride[2] + e * r.dout.stride[3]);
                    }
            }
            for (int64_t j = 0; j < r.Lk; j++)
                for (int64_t e = 0; e < W; e++)
                    store_f64(r.dt, o.base + b * o.stride[0] + kh * o.stride[1] + j * o.stride[2] + e * o.stride[3],
                              acc[j * W + e]);
        }
    tf_cpu_free(P);
    tf_cpu_free(dS);
    tf_cpu_free(acc);
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

/* ---- the gradients of conv2d and max pooling (NCHW, in double) ---- */

/* Position (yi, xi) of window offset (i, j) for output (y, x). */
static int64_t window_pos(const tf_op_params *p, int a, int64_t o, int64_t i) {
    return o * p->stride[a] - p->padding[a] + i * p->dilation[a];
}

/* A contiguous double [N, C, H, W] accumulator stored into the output. */
static void store_nchw(const double *acc, const tf_tensor_desc *O, const operand *o) {
    const int64_t *sh = O->shape;
    for (int64_t n = 0, k = 0; n < sh[0]; n++)
        for (int64_t c = 0; c < sh[1]; c++)
            for (int64_t y = 0; y < sh[2]; y++)
                for (int64_t x = 0; x < sh[3]; x++, k++)
                    store_f64(O->dtype, o->base + n * o->stride[0] + c * o->stride[1] + y * o->stride[2] + x * o->stride[3],
                              acc[k]);
}

/* dx [N, C, H, W] = sum over outputs of dy times the weight: scattered
 * into a double accumulator, stored once. */
static tf_status run_conv_grad_input(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *DY = &op->inputs[0], *W = &op->inputs[1], *O = &op->output;
    if (op->inputs[0].ndim != 4 || op->inputs[1].ndim != 4 || op->output.ndim != 4) return TF_ERR_SHAPE;
    operand dy = make_operand(DY, address), w = make_operand(W, address), o = make_operand(O, address);
    const tf_op_params *p = &op->params;
    const int64_t N = O->shape[0], C = O->shape[1], H = O->shape[2], Wd = O->shape[3], OC = DY->shape[1],
                  Ho = DY->shape[2], Wo = DY->shape[3], cg = W->shape[1], kh = W->shape[2], kw = W->shape[3],
                  og = OC / p->groups, n_out = tf_desc_numel(O);
    double *acc = tf_cpu_alloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
    if (!acc) return tf_cpu_oom("conv2d_grad_input", sizeof(double) * (size_t)n_out);
    memset(acc, 0, sizeof(double) * (size_t)n_out);
    tf_dtype dt = O->dtype;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < OC; oc++)
            for (int64_t y = 0; y < Ho; y++)
                for (int64_t x = 0; x < Wo; x++) {
                    double g = load_f64(dt, dy.base + n * dy.stride[0] + oc * dy.stride[1] + y * dy.stride[2] +
                                                x * dy.stride[3]);
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t yi = window_pos(p, 0, y, i);
                            if (yi < 0 || yi >= H) continue;
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t xi = window_pos(p, 1, x, j);
                                if (xi < 0 || xi >= Wd) continue;
                                acc[((n * C + (oc / og) * cg + c) * H + yi) * Wd + xi] +=
                                    g * load_f64(dt, w.base + oc * w.stride[0] + c * w.stride[1] + i * w.stride[2] +
                                                         j * w.stride[3]);
                            }
                        }
                }
    store_nchw(acc, O, &o);
    tf_cpu_free(acc);
    return TF_OK;
}

/* dW [OC, cg, kh, kw]: each element the sum over images and outputs of
 * dy times the input it met. */
static tf_status run_conv_grad_weight(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *DY = &op->inputs[1], *O = &op->output;
    if (op->inputs[0].ndim != 4 || op->inputs[1].ndim != 4 || op->output.ndim != 4) return TF_ERR_SHAPE;
    operand x = make_operand(X, address), dy = make_operand(DY, address), o = make_operand(O, address);
    const tf_op_params *p = &op->params;
    const int64_t N = X->shape[0], H = X->shape[2], Wd = X->shape[3], Ho = DY->shape[2], Wo = DY->shape[3],
                  cg = O->shape[1], og = O->shape[0] / p->groups;
    tf_dtype dt = O->dtype;
    for (int64_t oc = 0; oc < O->shape[0]; oc++)
        for (int64_t c = 0; c < cg; c++)
            for (int64_t i = 0; i < O->shape[2]; i++)
                for (int64_t j = 0; j < O->shape[3]; j++) {
                    const int64_t cin = (oc / og) * cg + c;
                    double acc = 0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t y = 0; y < Ho; y++) {
                            int64_t yi = window_pos(p, 0, y, i);
                            if (yi < 0 || yi >= H) continue;
                            for (int64_t xo = 0; xo < Wo; xo++) {
                                int64_t xi = window_pos(p, 1, xo, j);
                                if (xi < 0 || xi >= Wd) continue;
                                acc += load_f64(dt, dy.base + n * dy.stride[0] + oc * dy.stride[1] + y * dy.stride[2] +
                                                        xo * dy.stride[3]) *
                                       load_f64(dt, x.base + n * x.stride[0] + cin * x.stride[1] + yi * x.stride[2] +
                                                        xi * x.stride[3]);
                            }
                        }
                    store_f64(dt, o.base + oc * o.stride[0] + c * o.stride[1] + i * o.stride[2] + j * o.stride[3], acc);
                }
    return TF_OK;
}

/* dx: each window's dy to the first element equal to its maximum, the
 * first NaN where there is one (the forward's choice, PyTorch's), or the
 * first element inside when every one is -inf. */
static tf_status run_maxpool_grad(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *DY = &op->inputs[1], *O = &op->output;
    if (op->inputs[0].ndim != 4 || op->inputs[1].ndim != 4 || op->output.ndim != 4) return TF_ERR_SHAPE;
    operand x = make_operand(X, address), dy = make_operand(DY, address), o = make_operand(O, address);
    const tf_op_params *p = &op->params;
    const int64_t C = X->shape[1], H = X->shape[2], Wd = X->shape[3], n_out = tf_desc_numel(O);
    tf_dtype dt = O->dtype;
    double *acc = tf_cpu_alloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
    if (!acc) return tf_cpu_oom("maxpool2d_grad", sizeof(double) * (size_t)n_out);
    memset(acc, 0, sizeof(double) * (size_t)n_out);
    int64_t idx[4] = {0};
    if (tf_desc_numel(DY)) do {
            const char *plane = x.base + idx[0] * x.stride[0] + idx[1] * x.stride[1];
            double best = -INFINITY;
            int64_t at = -1;
            for (int64_t i = 0; i < p->kernel[0]; i++)
                for (int64_t j = 0; j < p->kernel[1]; j++) {
                    int64_t yi = window_pos(p, 0, idx[2], i), xi = window_pos(p, 1, idx[3], j);
                    if (yi < 0 || yi >= H || xi < 0 || xi >= Wd) continue;
                    double v = load_f64(dt, plane + yi * x.stride[2] + xi * x.stride[3]);
                    if (at < 0 || (!isnan(best) && (isnan(v) || v > best))) {
                        best = v;
                        at = yi * Wd + xi;
                    }
                }
            if (at >= 0)
                acc[(idx[0] * C + idx[1]) * H * Wd + at] +=
                    load_f64(dt, dy.base + idx[0] * dy.stride[0] + idx[1] * dy.stride[1] + idx[2] * dy.stride[2] +
                                     idx[3] * dy.stride[3]);
        } while (next_index(4, DY->shape, idx));
    store_nchw(acc, O, &o);
    tf_cpu_free(acc);
    return TF_OK;
}

/* rmsnorm's dx a row at a time, in double: r = 1/sqrt(mean(x^2) + eps),
 * gw = dy w, dx = r gw - x r^3 mean(gw x). */
static tf_status run_rmsnorm_grad(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    const bool has_w = op->params.flags & TF_ROW_WEIGHT;
    if (op->n_inputs != (has_w ? 3 : 2) || X->ndim < 1) return TF_ERR_SHAPE;
    operand x = make_operand(X, address), dy = make_operand(&op->inputs[1], address), o = make_operand(O, address),
            w = has_w ? make_operand(&op->inputs[2], address) : o;
    const int nd = X->ndim;
    const int64_t D = X->shape[nd - 1];
    const tf_dtype dt = X->dtype;
    if (tf_desc_numel(X) == 0) return TF_OK;
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        const char *xr = x.base, *gr = dy.base;
        char *orow = o.base;
        for (int d = 0; d < nd - 1; d++) {
            xr += idx[d] * x.stride[d];
            gr += idx[d] * dy.stride[d];
            orow += idx[d] * o.stride[d];
        }
        double ss = 0, proj = 0;
        for (int64_t e = 0; e < D; e++) {
            const double xv = load_f64(dt, xr + e * x.stride[nd - 1]);
            const double gw = load_f64(dt, gr + e * dy.stride[nd - 1]) * (has_w ? load_f64(dt, w.base + e * w.stride[0]) : 1);
            ss += xv * xv;
            proj += gw * xv;
        }
        const double r = 1 / sqrt(ss / (double)D + op->params.eps), k = r * r * r * proj / (double)D;
        for (int64_t e = 0; e < D; e++) {
            const double xv = load_f64(dt, xr + e * x.stride[nd - 1]);
            const double gw = load_f64(dt, gr + e * dy.stride[nd - 1]) * (has_w ? load_f64(dt, w.base + e * w.stride[0]) : 1);
            store_f64(dt, orow + e * o.stride[nd - 1], r * gw - xv * k);
        }
    } while (next_index(nd - 1, X->shape, idx));
    return TF_OK;
}

static tf_cpu_kernel backward_kernel(tf_op_kind k) {
    switch (k) {
    case TF_OP_CONV2D_GRAD_INPUT: return run_conv_grad_input;
    case TF_OP_CONV2D_GRAD_WEIGHT: return run_conv_grad_weight;
    case TF_OP_MAXPOOL2D_GRAD: return run_maxpool_grad;
    case TF_OP_SDPA_GRAD_Q: return run_sdpa_grad_q;
    case TF_OP_SDPA_GRAD_KV: return run_sdpa_grad_kv;
    case TF_OP_RMSNORM_GRAD: return run_rmsnorm_grad;
    default: return NULL;
    }
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

/* Float products the reference loops ran (the tf_cpu_reference_gemm_calls
 * extra): a test holds the fast layers to every layout they take. */
static _Atomic uint64_t float_gemm_calls;

uint64_t tf_cpu_reference_gemm_calls(void) { return atomic_load(&float_gemm_calls); }

static tf_status run_matmul(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    if (O->dtype == TF_F32 || O->dtype == TF_F64 || O->dtype == TF_F16 || O->dtype == TF_BF16)
        atomic_fetch_add(&float_gemm_calls, 1);
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
    void *acc = tf_cpu_alloc((size_t)(g.n > 0 ? g.n : 1) * sizeof(double));
    if (!acc) return tf_cpu_oom("matmul", (size_t)(g.n > 0 ? g.n : 1) * sizeof(double));
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
    tf_cpu_free(acc);
    return TF_OK;
}

/* GEMM_EPILOGUE: the GEMM's loops into the output, then the activation and
 * the residual element by element in double. */
static tf_status run_gemm_epilogue(const tf_op *op, tf_cpu_address_fn address) {
    bool residual = op->params.flags & TF_GEMM_RESIDUAL;
    int32_t act = op->params.activation;
    tf_op gemm = *op;
    gemm.kind = TF_OP_GEMM;
    gemm.n_inputs -= residual;
    tf_status s = run_matmul(&gemm, address);
    if (s != TF_OK) return s;
    const tf_tensor_desc *O = &op->output, *R = residual ? &op->inputs[op->n_inputs - 1] : O;
    operand o = make_operand(O, address), r = make_operand(R, address);
    int64_t idx[TF_MAX_DIMS] = {0}, n = tf_desc_numel(O);
    for (int64_t i = 0; i < n; i++) {
        int64_t oo = 0, ro = 0;
        for (int64_t d = O->ndim - 1, rest = i; d >= 0; d--) {
            idx[d] = rest % O->shape[d];
            rest /= O->shape[d];
            oo += idx[d] * o.stride[d];
            ro += idx[d] * r.stride[d];
        }
        double v = load_f64(O->dtype, o.base + oo);
        if (act != (int32_t)TF_NO_ACTIVATION) v = unary_fns[act].d(v, &op->params);
        if (residual) v += load_f64(R->dtype, r.base + ro);
        store_f64(O->dtype, o.base + oo, v);
    }
    return TF_OK;
}

bool tf_cpu_unary_formula(int32_t op) { return (unsigned)op < TF_OP_COUNT && unary_fns[op].d; }

float tf_cpu_unary_f32(int32_t op, float x) {
    tf_op_params p;
    memset(&p, 0, sizeof p);
    return unary_fns[op].f ? unary_fns[op].f(x, &p) : x;
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

static tf_status run_reduce(const tf_op *op, tf_cpu_address_fn address) {
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

/* ---- the table, as the reference fills it ---- */

static bool unary_float(tf_op_kind k) { return unary_fns[k].f != NULL; }

void tf_cpu_ref_install(tf_cpu_table *t) {
    memset(t, 0, sizeof *t);
    for (int k = 0; k < TF_OP_COUNT; k++)
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
            tf_cpu_kernel fn = NULL;
            switch (tf_op_kernel_of((tf_op_kind)k)) {
            case TF_KERNEL_ARITH: case TF_KERNEL_COMPARE: fn = binary_loops[k][dt] ? run_binary : NULL; break;
            case TF_KERNEL_MATH: fn = unary_float((tf_op_kind)k) && is_float((tf_dtype)dt) ? run_unary : NULL; break;
            case TF_KERNEL_PREDICATE: fn = run_bool_unary; break;
            case TF_KERNEL_SELECT: fn = run_where; break;
            case TF_KERNEL_MATMUL:
                if (k == TF_OP_GEMM_EPILOGUE) fn = is_float((tf_dtype)dt) ? run_gemm_epilogue : NULL;
                else if (k == TF_OP_QMATMUL_EPILOGUE) fn = NULL;        /* cpu_quant.c's, in every mode */
                else fn = matmul_fns[dt] ? run_matmul : NULL;
                break;
            case TF_KERNEL_REDUCE: fn = run_reduce; break;
            case TF_KERNEL_SCAN: fn = run_cumsum; break;
            case TF_KERNEL_PICK: fn = run_indexed; break;
            case TF_KERNEL_TRIANGLE: fn = run_triangle; break;
            case TF_KERNEL_COPY: fn = run_copy; break;
            case TF_KERNEL_FILL: case TF_KERNEL_ARANGE: case TF_KERNEL_RANDOM: fn = run_create; break;
            case TF_KERNEL_ROW: case TF_KERNEL_ADD_NORM: fn = is_float((tf_dtype)dt) ? run_row : NULL; break;
            case TF_KERNEL_ROPE: fn = is_float((tf_dtype)dt) ? run_rope : NULL; break;
            case TF_KERNEL_ATTENTION: fn = is_float((tf_dtype)dt) ? run_sdpa : NULL; break;
            case TF_KERNEL_CONV: fn = is_float((tf_dtype)dt) ? run_conv2d : NULL; break;
            case TF_KERNEL_POOL: fn = is_float((tf_dtype)dt) ? run_pool : NULL; break;
            case TF_KERNEL_OPTIMIZER: fn = is_float((tf_dtype)dt) ? run_adam : NULL; break;
            case TF_KERNEL_BACKWARD: fn = is_float((tf_dtype)dt) ? backward_kernel((tf_op_kind)k) : NULL; break;
            case TF_KERNEL_SORT: fn = tf_dtype_is_quantized((tf_dtype)dt) ? NULL : tf_cpu_sort_kernel((tf_op_kind)k); break;
            case TF_KERNEL_NONE: break;
            }
            t->fn[k][dt] = fn;
        }
}
