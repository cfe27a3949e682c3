/* Flat loops over the pool for what autograd and the shaping ops call
 * most, installed over the reference entries:
 *  - comparisons, logical and/or/not and where over f32 (and bool)
 *    operands that are contiguous or one value broadcast (a 0-d
 *    threshold, a scalar zero), loops the compiler vectorizes; any other
 *    strides row by row, typed;
 *  - copies within one dtype (any strides: transposes, slices, the
 *    contiguous copy of a view) by element size, bool and u8 cast to f32
 *    (masks and one-hots), and fills;
 *  - f32 sums and means over one axis that is not the last (the
 *    gradients of broadcast operands, a norm's weight);
 *  - Adam over contiguous f32 (the reference's double arithmetic).
 * Other layouts and dtypes keep the entries below (the reference's
 * strided, per-dtype loops).
 *
 * Why: autograd's rules are written with these (relu's gradient is
 * where(x > 0, g, 0); max-pooling's picks the first maximum with eq, and,
 * or, not), and the reference reads each element through a dtype switch
 * in double, about 20 times slower on a small CNN's activations. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_common.h"
#include "threadpool.h"

static tf_cpu_table below;

static tf_status run_below(const tf_op *op, tf_cpu_address_fn address) {
    return below.fn[op->kind][tf_cpu_table_dtype(op)](op, address);
}

typedef struct flat_job {
    tf_op_kind kind;
    tf_dtype dt;                         /* the inputs' (comparisons: f32, i32, i64) */
    uint8_t *o;                          /* bool out; where's out is f32 (of) */
    float *of;
    const void *in[3];
    bool step[3];                        /* unit stride (else the one value, stride 0) */
} flat_job;

/* Each operand contiguous or a single broadcast value; the output contiguous. */
static bool flat_operands(const tf_op *op, bool *step) {
    if (!tf_desc_is_contiguous(&op->output)) return false;
    for (int i = 0; i < op->n_inputs; i++) {
        const tf_tensor_desc *d = &op->inputs[i];
        bool zero = all_strides_zero(d);
        if (!zero && !(tf_desc_is_contiguous(d) && tf_desc_numel(d) == tf_desc_numel(&op->output))) return false;
        step[i] = !zero;
    }
    return true;
}

/* One loop per layout (both operands contiguous, or one a single value),
 * the strides known to the compiler so it vectorizes each. */
#define COMPARE_LOOP(T, EXPR)                                                                       \
    do {                                                                                            \
        const T *a = j->in[0], *b = j->in[1];                                                       \
        uint8_t *o = j->o;                                                                          \
        if (j->step[0] && j->step[1])                                                               \
            for (int64_t i = begin; i < end; i++) {                                                 \
                const T x = a[i], y = b[i];                                                         \
                o[i] = (uint8_t)(EXPR);                                                             \
            }                                                                                       \
        else if (j->step[0])                                                                        \
            for (int64_t i = begin; i < end; i++) {                                                 \
                const T x = a[i], y = b[0];                                                         \
                o[i] = (uint8_t)(EXPR);                                                             \
            }                                                                                       \
        else                                                                                        \
            for (int64_t i = begin; i < end; i++) {                                                 \
                const T x = a[i * j->step[0]], y = b[i * j->step[1]];                               \
                o[i] = (uint8_t)(EXPR);                                                             \
            }                                                                                       \
    } while (0)

/* The six comparisons of T through LOOP (IEEE for floats: false with NaN,
 * but !=). */
#define COMPARE_KINDS(LOOP, T)                                                                      \
    switch (kind) {                                                                                 \
    case TF_OP_EQ: LOOP(T, x == y); break;                                                          \
    case TF_OP_NE: LOOP(T, x != y); break;                                                          \
    case TF_OP_LT: LOOP(T, x < y); break;                                                           \
    case TF_OP_LE: LOOP(T, x <= y); break;                                                          \
    case TF_OP_GT: LOOP(T, x > y); break;                                                           \
    case TF_OP_GE: LOOP(T, x >= y); break;                                                          \
    case TF_OP_LOGICAL_AND: LOOP(uint8_t, (x != 0) & (y != 0)); break;                              \
    case TF_OP_LOGICAL_OR: LOOP(uint8_t, (x != 0) | (y != 0)); break;                               \
    default: break;                                                                                 \
    }

/* Integer comparisons come from autograd's one-hots (an index against a
 * range of classes: i64 [1024, 256] a step of train_gpt), which the
 * reference ran through its dtype switch at 2 ns an element. */
static void compare_chunk(void *ctx, int64_t begin, int64_t end) {
    const flat_job *j = ctx;
    const tf_op_kind kind = j->kind;
    switch (j->dt) {
    case TF_I64: COMPARE_KINDS(COMPARE_LOOP, int64_t) break;
    case TF_I32: COMPARE_KINDS(COMPARE_LOOP, int32_t) break;
    default: COMPARE_KINDS(COMPARE_LOOP, float) break;
    }
}

static void not_chunk(void *ctx, int64_t begin, int64_t end) {
    const flat_job *j = ctx;
    const uint8_t *a = j->in[0];
    const int64_t sa = j->step[0];
    for (int64_t i = begin; i < end; i++) j->o[i] = a[i * sa] == 0;
}

/* where's operands may also repeat along leading axes (a causal mask
 * [Lq, Lk] over [B, H, Lq, Lk]): element i reads i mod the operand's
 * period (its contiguous trailing block; 1 for a single value). */
typedef struct where_job {
    float *o;
    const uint8_t *c;
    const float *a, *b;
    int64_t period[3], numel;
} where_job;

/* Both values read before the choice, so it is a select and not a
 * branch (a mask of random signs mispredicts half of them: relu's
 * gradient ran 330 us over 65536 elements with the branch). Operands
 * whole or a single value loop without periods. */
static void where_chunk(void *ctx, int64_t begin, int64_t end) {
    const where_job *j = ctx;
    const int64_t n = j->numel;
    if ((j->period[0] == n || j->period[0] == 1) && (j->period[1] == n || j->period[1] == 1) &&
        (j->period[2] == n || j->period[2] == 1)) {
        const int64_t sc = j->period[0] == n, sa = j->period[1] == n, sb = j->period[2] == n;
        if (sc && sa && !sb) {               /* relu's gradient: where(x > 0, g, 0) */
            const float zero = j->b[0];
            const uint8_t *restrict c = j->c;
            const float *restrict a = j->a;
            float *restrict o = j->o;
            for (int64_t i = begin; i < end; i++) {
                const float v = a[i];
                o[i] = c[i] ? v : zero;
            }
            return;
        }
        for (int64_t i = begin; i < end; i++) {
            const float va = j->a[i * sa], vb = j->b[i * sb];
            j->o[i] = j->c[i * sc] ? va : vb;
        }
        return;
    }
    /* segments in which no operand wraps: a plain loop inside each (a
     * causal mask [Lq, Lk] over [B, H, Lq, Lk] is one segment a head) */
    int64_t rc = begin % j->period[0], ra = begin % j->period[1], rb = begin % j->period[2];
    const int64_t sc = j->period[0] > 1, sa = j->period[1] > 1, sb = j->period[2] > 1;
    for (int64_t i = begin; i < end;) {
        int64_t len = end - i;
        if (sc && j->period[0] - rc < len) len = j->period[0] - rc;
        if (sa && j->period[1] - ra < len) len = j->period[1] - ra;
        if (sb && j->period[2] - rb < len) len = j->period[2] - rb;
        const uint8_t *c = j->c + rc;
        const float *a = j->a + ra, *b = j->b + rb;
        float *o = j->o + i;
        for (int64_t t = 0; t < len; t++) {
            const float va = a[t * sa], vb = b[t * sb];
            o[t] = c[t * sc] ? va : vb;
        }
        i += len;
        rc = sc ? (rc + len) % j->period[0] : 0;
        ra = sa ? (ra + len) % j->period[1] : 0;
        rb = sb ? (rb + len) % j->period[2] : 0;
    }
}

/* The period of d as broadcast to out's shape: its trailing axes laid out
 * contiguously as out's, every axis before them of stride 0; 0 if d is
 * laid out otherwise. */
static int64_t repeat_period(const tf_tensor_desc *d, const tf_tensor_desc *out) {
    if (d->ndim != out->ndim) return 0;
    int64_t period = 1;
    int k = d->ndim - 1;
    for (; k >= 0 && d->shape[k] == out->shape[k] && (d->shape[k] == 1 || d->strides[k] == period); k--)
        period *= d->shape[k];
    for (; k >= 0; k--)
        if (d->strides[k] != 0 && out->shape[k] != 1) return 0;
    return period;
}

/* Any other strides (windows of a padded tensor, views): the same
 * arithmetic row by row over the pool, typed, without the reference's
 * per-element dtype switch. */
#define COMPARE_ROW(T, EXPR)                                                                        \
    for (int64_t i = 0; i < n; i++, o += s[0], a += s[1], b += s[2]) {                               \
        const T x = *(const T *)a, y = *(const T *)b;                                               \
        *(uint8_t *)o = (uint8_t)(EXPR);                                                            \
    }

static void compare_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    const flat_job *j = ctx;
    const tf_op_kind kind = j->kind;
    char *o = p[0];
    const char *a = p[1], *b = p[2];
    switch (j->dt) {
    case TF_I64: COMPARE_KINDS(COMPARE_ROW, int64_t) break;
    case TF_I32: COMPARE_KINDS(COMPARE_ROW, int32_t) break;
    default: COMPARE_KINDS(COMPARE_ROW, float) break;
    }
}

static void where_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    (void)ctx;
    char *o = p[0];
    const char *c = p[1], *a = p[2], *b = p[3];
    for (int64_t i = 0; i < n; i++, o += s[0], c += s[1], a += s[2], b += s[3])
        *(float *)o = *(const uint8_t *)c ? *(const float *)a : *(const float *)b;
}

/* Every operand with the output's axes (the core broadcasts them so). */
static bool same_axes(const tf_op *op) {
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].ndim != op->output.ndim) return false;
    return true;
}

static void strided_rows(const tf_op *op, tf_cpu_address_fn address, row_fn fn, const void *ctx) {
    operand ops[4];
    ops[0] = make_operand(&op->output, address);
    for (int i = 0; i < op->n_inputs; i++) ops[i + 1] = make_operand(&op->inputs[i], address);
    for_each_row_parallel(op->output.ndim, op->output.shape, op->n_inputs + 1, ops, fn, ctx);
}

static flat_job job_of(const tf_op *op, tf_cpu_address_fn address, const bool *step) {
    flat_job j = {.kind = op->kind};
    char *out = address(op->output.buffer) + op->output.offset;
    j.o = (uint8_t *)out;
    j.of = (float *)out;
    for (int i = 0; i < op->n_inputs; i++) {
        j.in[i] = address(op->inputs[i].buffer) + op->inputs[i].offset;
        j.step[i] = step[i];
    }
    return j;
}

static tf_status fast_compare(const tf_op *op, tf_cpu_address_fn address) {
    bool step[2] = {false, false};
    const bool logical = op->kind == TF_OP_LOGICAL_AND || op->kind == TF_OP_LOGICAL_OR;
    const tf_dtype dt = op->inputs[0].dtype;
    const bool typed = logical ? dt == TF_BOOL : dt == TF_F32 || dt == TF_I32 || dt == TF_I64;
    if (!typed || op->inputs[1].dtype != dt || op->output.dtype != TF_BOOL) return run_below(op, address);
    const bool flat = flat_operands(op, step);
    if (!flat && !same_axes(op)) return run_below(op, address);
    flat_job j = job_of(op, address, step);
    j.dt = dt;
    if (flat) tf_cpu_parallel_for(tf_desc_numel(&op->output), ELEMENT_GRAIN, compare_chunk, &j);
    else strided_rows(op, address, compare_row, &j);
    return TF_OK;
}

static tf_status fast_not(const tf_op *op, tf_cpu_address_fn address) {
    bool step[1];
    if (op->inputs[0].dtype != TF_BOOL || op->output.dtype != TF_BOOL || !flat_operands(op, step))
        return run_below(op, address);
    flat_job j = job_of(op, address, step);
    tf_cpu_parallel_for(tf_desc_numel(&op->output), ELEMENT_GRAIN, not_chunk, &j);
    return TF_OK;
}

static tf_status fast_where(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *O = &op->output;
    if (op->inputs[0].dtype != TF_BOOL || op->inputs[1].dtype != TF_F32 || op->inputs[2].dtype != TF_F32 ||
        O->dtype != TF_F32 || !tf_desc_numel(O))
        return run_below(op, address);
    if (!tf_desc_is_contiguous(O)) {
        if (!same_axes(op)) return run_below(op, address);
        strided_rows(op, address, where_row, NULL);
        return TF_OK;
    }
    where_job j = {.o = (float *)(address(O->buffer) + O->offset), .numel = tf_desc_numel(O)};
    const void *base[3];
    for (int i = 0; i < 3; i++) {
        j.period[i] = repeat_period(&op->inputs[i], O);
        if (!j.period[i] && !same_axes(op)) return run_below(op, address);
        if (!j.period[i]) {
            strided_rows(op, address, where_row, NULL);
            return TF_OK;
        }
        base[i] = address(op->inputs[i].buffer) + op->inputs[i].offset;
    }
    j.c = base[0];
    j.a = base[1];
    j.b = base[2];
    tf_cpu_parallel_for(tf_desc_numel(O), ELEMENT_GRAIN, where_chunk, &j);
    return TF_OK;
}

/* ---- copies within a dtype, fills ---- */

#define COPY_ROW(T)                                                                                   \
    static void copy_row_##T(const void *ctx, int64_t n, char **p, const int64_t *s) {                \
        (void)ctx;                                                                                    \
        char *o = p[0];                                                                               \
        const char *in = p[1];                                                                        \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                                \
            memcpy(o, in, (size_t)n * sizeof(T));                                                     \
            return;                                                                                   \
        }                                                                                             \
        for (int64_t i = 0; i < n; i++, o += s[0], in += s[1]) *(T *)o = *(const T *)in;              \
    }
COPY_ROW(uint8_t)
COPY_ROW(uint16_t)
COPY_ROW(uint32_t)
COPY_ROW(uint64_t)

/* bool or u8 to f32 (a mask or one-hot made a float: 0 or 1, u8 as is). */
static void bytes_to_f32_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    (void)ctx;
    char *o = p[0];
    const char *in = p[1];
    for (int64_t i = 0; i < n; i++, o += s[0], in += s[1]) *(float *)o = (float)*(const uint8_t *)in;
}

static tf_status fast_copy(const tf_op *op, tf_cpu_address_fn address) {
    const tf_dtype dt = op->output.dtype, from = op->inputs[0].dtype;
    if (dt == TF_F32 && (from == TF_BOOL || from == TF_U8)) {
        operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
        for_each_row_parallel(op->output.ndim, op->output.shape, 2, ops, bytes_to_f32_row, NULL);
        return TF_OK;
    }
    if (from != dt || tf_dtype_is_quantized(dt)) return run_below(op, address);
    row_fn fn;
    switch (elsize(dt)) {
    case 1: fn = copy_row_uint8_t; break;
    case 2: fn = copy_row_uint16_t; break;
    case 4: fn = copy_row_uint32_t; break;
    case 8: fn = copy_row_uint64_t; break;
    default: return run_below(op, address);          /* the complex dtypes: their own layer */
    }
    operand ops[2] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address)};
    for_each_row_parallel(op->output.ndim, op->output.shape, 2, ops, fn, NULL);
    return TF_OK;
}

typedef struct fill_job {
    char *o;
    size_t es;
    uint64_t pattern;                    /* the value's bytes, es of them */
} fill_job;

static void fill_chunk(void *ctx, int64_t begin, int64_t end) {
    const fill_job *j = ctx;
    switch (j->es) {
    case 1: memset(j->o + begin, (int)(uint8_t)j->pattern, (size_t)(end - begin)); break;
    case 2: for (int64_t i = begin; i < end; i++) ((uint16_t *)j->o)[i] = (uint16_t)j->pattern; break;
    case 4: for (int64_t i = begin; i < end; i++) ((uint32_t *)j->o)[i] = (uint32_t)j->pattern; break;
    default: for (int64_t i = begin; i < end; i++) ((uint64_t *)j->o)[i] = j->pattern; break;
    }
}

/* A contiguous fill: the value converted once (the reference's own
 * conversion, on one element), then its bytes repeated. */
static tf_status fast_fill(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *O = &op->output;
    const size_t es = elsize(O->dtype);
    if (!tf_desc_is_contiguous(O) || (es != 1 && es != 2 && es != 4 && es != 8) || tf_dtype_is_quantized(O->dtype) ||
        O->dtype == TF_C64)
        return run_below(op, address);
    fill_job j = {address(O->buffer) + O->offset, es, 0};
    char bytes[16] = {0};                /* room for any dtype store_f64 writes */
    store_f64(O->dtype, bytes, op->params.value);                     /* as the reference stores each element */
    memcpy(&j.pattern, bytes, sizeof j.pattern);
    tf_cpu_parallel_for(tf_desc_numel(O), ELEMENT_GRAIN, fill_chunk, &j);
    return TF_OK;
}

/* ---- sum and mean over one axis that is not the last, f32 ----
 * x viewed as [outer, len, inner]: each output element the sum down its
 * column, in double and in order (the reference's own sum), a block of
 * columns at a time so the loop runs along contiguous memory. The last
 * axis and all axes keep the SIMD layer's row sums. */

enum { SUM_COLUMNS = 256 };

typedef struct axis_sum_job {
    const float *x;
    float *o;
    int64_t len, inner, blocks;
    bool mean;
} axis_sum_job;

static void axis_sum_chunk(void *ctx, int64_t begin, int64_t end) {
    const axis_sum_job *j = ctx;
    double acc[SUM_COLUMNS];
    for (int64_t t = begin; t < end; t++) {
        const int64_t outer = t / j->blocks, c0 = (t % j->blocks) * SUM_COLUMNS;
        const int64_t width = j->inner - c0 < SUM_COLUMNS ? j->inner - c0 : SUM_COLUMNS;
        const float *col = j->x + outer * j->len * j->inner + c0;
        for (int64_t c = 0; c < width; c++) acc[c] = 0;
        for (int64_t l = 0; l < j->len; l++, col += j->inner)
            for (int64_t c = 0; c < width; c++) acc[c] += col[c];
        float *out = j->o + outer * j->inner + c0;
        for (int64_t c = 0; c < width; c++) out[c] = (float)(j->mean ? acc[c] / (double)j->len : acc[c]);
    }
}

static tf_status fast_axis_sum(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *I = &op->inputs[0], *O = &op->output;
    const int axis = op->params.axis;
    if (I->dtype != TF_F32 || O->dtype != TF_F32 || axis == TF_ALL_AXES || axis < 0 || axis >= I->ndim - 1 ||
        !tf_desc_is_contiguous(I) || !tf_desc_is_contiguous(O) || I->shape[axis] == 0 || !tf_desc_numel(O))
        return run_below(op, address);
    axis_sum_job j = {(const float *)(address(I->buffer) + I->offset), (float *)(address(O->buffer) + O->offset),
                      I->shape[axis], 1, 0, op->kind == TF_OP_MEAN};
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= I->shape[d];
    for (int d = axis + 1; d < I->ndim; d++) j.inner *= I->shape[d];
    j.blocks = (j.inner + SUM_COLUMNS - 1) / SUM_COLUMNS;
    const int64_t per_task = j.len * (j.inner < SUM_COLUMNS ? j.inner : SUM_COLUMNS);
    tf_cpu_parallel_for(outer * j.blocks, ELEMENT_GRAIN / (per_task + 1) + 1, axis_sum_chunk, &j);
    return TF_OK;
}

/* ---- Adam / AdamW over contiguous f32: the reference's arithmetic (in
 * double, element by element), without its per-element index walk ---- */

typedef struct adam_job {
    float *p, *m, *v, *o;
    const float *g;
    const tf_op_params *q;
    double c1, c2;
} adam_job;

static void adam_chunk(void *ctx, int64_t begin, int64_t end) {
    const adam_job *j = ctx;
    const tf_op_params *q = j->q;
    const bool decoupled = q->flags & TF_ADAM_DECOUPLED;
    for (int64_t i = begin; i < end; i++) {
        double pv = j->p[i], gv = j->g[i];
        if (decoupled) pv *= 1 - q->lr * q->weight_decay;
        else gv += q->weight_decay * pv;
        const double mv = q->beta1 * j->m[i] + (1 - q->beta1) * gv;
        const double vv = q->beta2 * j->v[i] + (1 - q->beta2) * gv * gv;
        pv -= q->lr * (mv / j->c1) / (sqrt(vv / j->c2) + q->eps);
        j->m[i] = (float)mv;
        j->v[i] = (float)vv;
        j->o[i] = (float)pv;
    }
}

static tf_status fast_adam(const tf_op *op, tf_cpu_address_fn address) {
    for (int i = 0; i < 4; i++)
        if (op->inputs[i].dtype != TF_F32 || !tf_desc_is_contiguous(&op->inputs[i])) return run_below(op, address);
    if (op->output.dtype != TF_F32 || !tf_desc_is_contiguous(&op->output)) return run_below(op, address);
    const tf_op_params *q = &op->params;
    float *ptr[5];
    for (int i = 0; i < 4; i++) ptr[i] = (float *)(address(op->inputs[i].buffer) + op->inputs[i].offset);
    ptr[4] = (float *)(address(op->output.buffer) + op->output.offset);
    adam_job j = {ptr[0], ptr[2], ptr[3], ptr[4], ptr[1], q, 1 - pow(q->beta1, (double)q->adam_step),
                  1 - pow(q->beta2, (double)q->adam_step)};
    tf_cpu_parallel_for(tf_desc_numel(&op->output), ELEMENT_GRAIN / 4, adam_chunk, &j);
    return TF_OK;
}

/* ---- rotary embedding over f32 rows with a unit stride ----
 * The reference rotates in double and finds each row's place by division
 * over every axis: 1.7 ns an element on a training step's [16, 4, 64, 16]
 * heads, more than their matmuls. Here the angles' cos and sin are a
 * float table [positions, half] (computed in double), rows are walked with
 * an odometer, and the pairs rotate in float in loops the compiler
 * vectorizes (half-split) or unrolls (interleaved). */

#define FLAT_ROPE_TABLE_MAX (1 << 16)   /* angles; more: the reference's per-row path */

typedef struct flat_rope_job {
    const tf_op *op;
    operand x, o;
    const float *cs;                     /* [npos][2 * half]: cos then sin */
    int64_t half, rot, last;
    int nd, ax;
    bool neox;
} flat_rope_job;

static void flat_rope_row(const flat_rope_job *j, const float *x, float *o, const float *c, const float *sn) {
    const int64_t h = j->half;
    if (j->neox) {
        for (int64_t i = 0; i < h; i++) o[i] = x[i] * c[i] - x[i + h] * sn[i];
        for (int64_t i = 0; i < h; i++) o[i + h] = x[i] * sn[i] + x[i + h] * c[i];
    } else {
        for (int64_t i = 0; i < h; i++) {
            const float a = x[2 * i], b = x[2 * i + 1];
            o[2 * i] = a * c[i] - b * sn[i];
            o[2 * i + 1] = a * sn[i] + b * c[i];
        }
    }
    for (int64_t e = j->rot; e < j->last; e++) o[e] = x[e];
}

static void flat_rope_rows(void *ctx, int64_t begin, int64_t end) {
    const flat_rope_job *j = ctx;
    const tf_tensor_desc *X = &j->op->inputs[0];
    const int outer = j->nd - 1;
    int64_t idx[TF_MAX_DIMS] = {0}, rest = begin;
    for (int d = outer - 1; d >= 0; d--) {       /* the first row's place, once */
        idx[d] = rest % X->shape[d];
        rest /= X->shape[d];
    }
    for (int64_t line = begin; line < end; line++) {
        const char *xp = j->x.base;
        char *op_ = j->o.base;
        for (int d = 0; d < outer; d++) {
            xp += idx[d] * j->x.stride[d];
            op_ += idx[d] * j->o.stride[d];
        }
        const float *cs = j->cs + idx[j->ax] * 2 * j->half;
        flat_rope_row(j, (const float *)xp, (float *)op_, cs, cs + j->half);
        for (int d = outer - 1; d >= 0; d--) {   /* the odometer */
            if (++idx[d] < X->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static int64_t position_at(const tf_tensor_desc *P, const operand *p, int64_t i) {
    const char *at = p->base + i * p->stride[0];
    return P->dtype == TF_I32 ? *(const int32_t *)at : *(const int64_t *)at;
}

static tf_status fast_rope(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *P = &op->inputs[1], *O = &op->output;
    const int nd = X->ndim, ax = op->params.axis;
    const int64_t half = op->params.rotary_dims / 2, npos = X->shape[ax];
    const bool rows = X->dtype == TF_F32 && O->dtype == TF_F32 && X->strides[nd - 1] == 1 && O->strides[nd - 1] == 1 &&
                      ax < nd - 1 && (P->dtype == TF_I32 || P->dtype == TF_I64);
    if (!rows || npos * half > FLAT_ROPE_TABLE_MAX || !tf_desc_numel(X) || !half) return run_below(op, address);
    operand x = make_operand(X, address), o = make_operand(O, address);
    if (x.base == o.base) return run_below(op, address);        /* in place: the reference reads pairs first */
    const size_t bytes = sizeof(float) * (size_t)(2 * npos * half) + sizeof(double) * (size_t)half;
    float *cs = tf_cpu_alloc(bytes);
    if (!cs) return tf_cpu_oom("rope", bytes);
    double *inv = (double *)(cs + 2 * npos * half + (2 * npos * half) % 2);   /* 8-byte aligned */
    for (int64_t i = 0; i < half; i++) inv[i] = pow(op->params.theta, -2.0 * (double)i / (double)op->params.rotary_dims);
    const operand p = make_operand(P, address);
    for (int64_t q = 0; q < npos; q++) {
        const double pos = (double)position_at(P, &p, q);
        for (int64_t i = 0; i < half; i++) {
            const double angle = pos * inv[i];
            cs[q * 2 * half + i] = (float)cos(angle);
            cs[q * 2 * half + half + i] = (float)sin(angle);
        }
    }
    flat_rope_job j = {op, x, o, cs, half, op->params.rotary_dims, X->shape[nd - 1], nd, ax,
                       (op->params.flags & TF_ROPE_NEOX) != 0};
    const int64_t lines = tf_desc_numel(O) / j.last;
    tf_cpu_parallel_for(lines, (1 << 14) / j.last + 1, flat_rope_rows, &j);
    tf_cpu_free(cs);
    return TF_OK;
}

/* ---- rmsnorm's gradient over contiguous f32 rows ----
 * The composed rule was 14 passes over x and dy (7 full-size muls); here
 * a row's two sums (in double, as the reference) and then dx in one
 * vectorized pass. */

typedef struct flat_norm_grad_job {
    const float *x, *dy, *w;
    float *o;
    int64_t d;
    double eps;
} flat_norm_grad_job;

static void flat_rmsnorm_grad_rows(void *ctx, int64_t begin, int64_t end) {
    const flat_norm_grad_job *j = ctx;
    const int64_t D = j->d;
    for (int64_t row = begin; row < end; row++) {
        const float *x = j->x + row * D, *g = j->dy + row * D;
        float *o = j->o + row * D;
        double ss4[4] = {0}, proj4[4] = {0};    /* four chains: a sum's latency, not its adds, bounds a row */
        int64_t e = 0;
        for (; e + 4 <= D; e += 4)
            for (int u = 0; u < 4; u++) {
                const double xv = x[e + u], gw = j->w ? (double)g[e + u] * j->w[e + u] : g[e + u];
                ss4[u] += xv * xv;
                proj4[u] += gw * xv;
            }
        for (; e < D; e++) {
            const double xv = x[e], gw = j->w ? (double)g[e] * j->w[e] : g[e];
            ss4[0] += xv * xv;
            proj4[0] += gw * xv;
        }
        const double ss = (ss4[0] + ss4[1]) + (ss4[2] + ss4[3]), proj = (proj4[0] + proj4[1]) + (proj4[2] + proj4[3]);
        const double r = 1 / sqrt(ss / (double)D + j->eps);
        const float rf = (float)r, k = (float)(r * r * r * proj / (double)D);
        if (j->w)
            for (e = 0; e < D; e++) o[e] = rf * (g[e] * j->w[e]) - x[e] * k;
        else
            for (e = 0; e < D; e++) o[e] = rf * g[e] - x[e] * k;
    }
}

static tf_status fast_rmsnorm_grad(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *G = &op->inputs[1], *O = &op->output;
    const bool has_w = op->params.flags & TF_ROW_WEIGHT;
    bool flat = X->dtype == TF_F32 && X->ndim >= 1 && tf_desc_is_contiguous(X) && tf_desc_is_contiguous(G) &&
                tf_desc_is_contiguous(O) && op->n_inputs == (has_w ? 3 : 2);
    if (flat && has_w) flat = op->inputs[2].strides[0] == 1 || op->inputs[2].shape[0] == 1;
    const int64_t D = X->ndim ? X->shape[X->ndim - 1] : 0;
    if (!flat || D == 0) return run_below(op, address);
    flat_norm_grad_job j = {(const float *)(address(X->buffer) + X->offset), (const float *)(address(G->buffer) + G->offset),
                            has_w ? (const float *)(address(op->inputs[2].buffer) + op->inputs[2].offset) : NULL,
                            (float *)(address(O->buffer) + O->offset), D, op->params.eps};
    tf_cpu_parallel_for(tf_desc_numel(X) / D, (1 << 14) / D + 1, flat_rmsnorm_grad_rows, &j);
    return TF_OK;
}

void tf_cpu_flat_install(tf_cpu_table *t) {
    below = *t;
    static const tf_op_kind compares[] = {TF_OP_EQ, TF_OP_NE, TF_OP_LT, TF_OP_LE, TF_OP_GT, TF_OP_GE};
    for (size_t i = 0; i < sizeof compares / sizeof *compares; i++)
        t->fn[compares[i]][TF_F32] = t->fn[compares[i]][TF_I32] = t->fn[compares[i]][TF_I64] = fast_compare;
    t->fn[TF_OP_LOGICAL_AND][TF_BOOL] = t->fn[TF_OP_LOGICAL_OR][TF_BOOL] = fast_compare;
    t->fn[TF_OP_LOGICAL_NOT][TF_BOOL] = fast_not;
    t->fn[TF_OP_WHERE][TF_F32] = fast_where;
    t->fn[TF_OP_SUM][TF_F32] = t->fn[TF_OP_MEAN][TF_F32] = fast_axis_sum;
    t->fn[TF_OP_ADAM][TF_F32] = fast_adam;
    t->fn[TF_OP_ROPE][TF_F32] = fast_rope;
    t->fn[TF_OP_RMSNORM_GRAD][TF_F32] = fast_rmsnorm_grad;
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (t->fn[TF_OP_COPY][dt]) t->fn[TF_OP_COPY][dt] = fast_copy;
        if (t->fn[TF_OP_FILL][dt]) t->fn[TF_OP_FILL][dt] = fast_fill;
    }
}
