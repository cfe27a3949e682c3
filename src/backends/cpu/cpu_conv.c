/* Convolution and pooling for the CPU backend, installed over the
 * reference loops (tf_cpu_conv_install, with the BLAS layer):
 *
 *  - conv2d (f32, f64): im2col and one GEMM per image and group through
 *    the BLAS the build found. Any input and weight strides (autograd's
 *    transposed and flipped views come here); the output contiguous, as
 *    ops make it. Images and groups spread over the pool; a single one
 *    spreads its GEMM instead.
 *  - max and average pooling (f32): the reference's semantics (NaN
 *    propagates from the first one met, padding counted or not) in float,
 *    plane by plane over the pool.
 *
 * Why by hand: the reference conv reads each element through a dtype
 * switch in double (about 1 GFLOP/s); im2col + GEMM is the layout BLAS is
 * fast at, and a small CNN's whole step is a few of these. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_common.h"
#include "threadpool.h"

static tf_cpu_table below;               /* the table as it was before this layer */

static tf_status run_below(const tf_op *op, tf_cpu_address_fn address) {
    return below.fn[op->kind][tf_cpu_table_dtype(op)](op, address);
}

/* ---- conv2d ---- */

typedef struct conv_job {
    const tf_op_params *p;
    bool f64;
    size_t es;                           /* element size */
    const char *x, *w, *bias;            /* w packed [OC, K] */
    char *o;
    int64_t xs[4], bias_stride;          /* bytes */
    int64_t N, H, Wd, OC, Ho, Wo, G, cg, og, kh, kw, K, P;
    bool pooled_gemm;                    /* one image and group: the GEMM takes the pool */
    _Atomic bool out_of_memory;
} conv_job;

/* Output columns x in [lo, hi) read inside the input for kernel column jj
 * (the rest fall in the padding). */
static void valid_columns(const conv_job *j, int64_t jj, int64_t *lo, int64_t *hi) {
    const tf_op_params *p = j->p;
    const int64_t s = p->stride[1], off = jj * p->dilation[1] - p->padding[1];   /* xi = x s + off */
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s, b = j->Wd - off <= 0 ? 0 : (j->Wd - off + s - 1) / s;
    *lo = a < j->Wo ? a : j->Wo;
    *hi = b < *lo ? *lo : b > j->Wo ? j->Wo : b;
}

/* col [K, P]: row (c, i, j) holds input channel c at kernel offset (i, j)
 * for every output position, zero where that falls in the padding; the
 * inside part of a line is one memcpy when it is contiguous in the input. */
#define IM2COL(T)                                                                                          \
    static void im2col_##T(const conv_job *j, int64_t n, int64_t g, T *col) {                              \
        const tf_op_params *p = j->p;                                                                      \
        const bool dense = p->stride[1] == 1 && j->xs[3] == (int64_t)sizeof(T);                            \
        for (int64_t c = 0; c < j->cg; c++) {                                                              \
            const char *plane = j->x + n * j->xs[0] + (g * j->cg + c) * j->xs[1];                          \
            for (int64_t i = 0; i < j->kh; i++)                                                            \
                for (int64_t jj = 0; jj < j->kw; jj++) {                                                   \
                    T *row = col + ((c * j->kh + i) * j->kw + jj) * j->P;                                  \
                    int64_t lo, hi;                                                                        \
                    valid_columns(j, jj, &lo, &hi);                                                        \
                    const int64_t off = jj * p->dilation[1] - p->padding[1];                               \
                    for (int64_t y = 0; y < j->Ho; y++) {                                                  \
                        int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];                \
                        T *dst = row + y * j->Wo;                                                          \
                        if (yi < 0 || yi >= j->H) {                                                        \
                            memset(dst, 0, sizeof(T) * (size_t)j->Wo);                                     \
                            continue;                                                                      \
                        }                                                                                  \
                        const char *src = plane + yi * j->xs[2];                                           \
                        for (int64_t x = 0; x < lo; x++) dst[x] = 0;                                       \
                        if (dense && hi > lo)                                                              \
                            memcpy(dst + lo, src + (lo + off) * j->xs[3], sizeof(T) * (size_t)(hi - lo));  \
                        else                                                                               \
                            for (int64_t x = lo; x < hi; x++)                                              \
                                dst[x] = *(const T *)(src + (x * p->stride[1] + off) * j->xs[3]);          \
                        for (int64_t x = hi; x < j->Wo; x++) dst[x] = 0;                                   \
                    }                                                                                      \
                }                                                                                          \
        }                                                                                                  \
    }
IM2COL(float)
IM2COL(double)

/* out [og, P] of image n, group g: its columns, the bias in each row,
 * then += W_g col, straight into the output. */
static void conv_one(conv_job *j, int64_t n, int64_t g, void *col) {
    const int64_t es = (int64_t)j->es;
    if (j->f64) im2col_double(j, n, g, col);
    else im2col_float(j, n, g, col);
    char *out = j->o + (n * j->OC + g * j->og) * j->P * es;
    for (int64_t r = 0; j->bias && r < j->og; r++) {
        const char *bias = j->bias + (g * j->og + r) * j->bias_stride;
        for (int64_t q = 0; q < j->P; q++) {
            if (j->f64) ((double *)out)[r * j->P + q] = *(const double *)bias;
            else ((float *)out)[r * j->P + q] = *(const float *)bias;
        }
    }
    const char *wg = j->w + g * j->og * j->K * es;
    const double beta = j->bias ? 1 : 0;
    if (j->pooled_gemm)
        tf_cpu_blas_gemm_pooled(j->f64, false, false, j->og, j->P, j->K, 1, wg, j->K, col, j->P, beta, out, j->P);
    else
        tf_cpu_blas_gemm(j->f64, false, false, j->og, j->P, j->K, 1, wg, j->K, col, j->P, beta, out, j->P);
}

static void conv_chunk(void *ctx, int64_t begin, int64_t end) {
    conv_job *j = ctx;
    void *col = tf_cpu_alloc(j->es * (size_t)(j->K * j->P > 0 ? j->K * j->P : 1));
    if (!col) {
        atomic_store(&j->out_of_memory, true);
        return;
    }
    for (int64_t t = begin; t < end; t++) conv_one(j, t / j->G, t % j->G, col);
    tf_cpu_free(col);
}

/* The weight [OC, cg, kh, kw] packed row-major as [OC, K], whatever its strides. */
static void *pack_weight(const tf_tensor_desc *W, const char *base, size_t es) {
    int64_t n = tf_desc_numel(W), idx[4] = {0};
    char *packed = tf_cpu_alloc(es * (size_t)(n ? n : 1)), *dst = packed;
    if (!packed || !n) return packed;
    do {
        const char *src = base;
        for (int d = 0; d < 3; d++) src += idx[d] * W->strides[d] * (int64_t)es;
        const int64_t step = W->strides[3] * (int64_t)es;          /* a row of the kernel at a time */
        for (int64_t k = 0; k < W->shape[3]; k++, src += step, dst += es) {
            if (es == sizeof(double)) *(double *)dst = *(const double *)src;
            else *(float *)dst = *(const float *)src;
        }
    } while (next_index(3, W->shape, idx));
    return packed;
}

static tf_status fast_conv2d(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *W = &op->inputs[1], *O = &op->output;
    tf_dtype dt = O->dtype;
    if ((dt != TF_F32 && dt != TF_F64) || !tf_desc_is_contiguous(O) || !tf_desc_numel(O)) return run_below(op, address);
    const tf_op_params *p = &op->params;
    conv_job j = {.p = p, .f64 = dt == TF_F64, .es = dt == TF_F64 ? sizeof(double) : sizeof(float)};
    j.x = address(X->buffer) + X->offset;          /* offsets are in bytes, strides in elements */
    j.o = address(O->buffer) + O->offset;
    for (int d = 0; d < 4; d++) j.xs[d] = X->strides[d] * (int64_t)j.es;
    if (p->flags & TF_CONV_BIAS) {
        const tf_tensor_desc *B = &op->inputs[2];
        j.bias = address(B->buffer) + B->offset;
        j.bias_stride = B->strides[0] * (int64_t)j.es;
    }
    j.H = X->shape[2], j.Wd = X->shape[3], j.OC = O->shape[1], j.Ho = O->shape[2], j.Wo = O->shape[3];
    j.G = p->groups, j.cg = W->shape[1], j.og = j.OC / j.G, j.kh = W->shape[2], j.kw = W->shape[3];
    j.K = j.cg * j.kh * j.kw, j.P = j.Ho * j.Wo;
    void *packed = pack_weight(W, address(W->buffer) + W->offset, j.es);
    if (!packed) return tf_cpu_oom("conv2d", j.es * (size_t)tf_desc_numel(W));
    j.w = packed;
    j.N = O->shape[0];
    /* One image a GEMM. Blocks of small images side by side in one wider
     * GEMM measured slower on the digits CNN's step (AVX2, 2 threads: the
     * copy out of the block and the larger column buffer cost more than
     * OpenBLAS saved). */
    const int64_t tasks = j.N * j.G;
    j.pooled_gemm = tasks < tf_cpu_num_threads();
    if (j.pooled_gemm) conv_chunk(&j, 0, tasks);
    else tf_cpu_parallel_for(tasks, 1, conv_chunk, &j);
    tf_cpu_free(packed);
    return atomic_load(&j.out_of_memory) ? tf_cpu_oom("conv2d", j.es * (size_t)(j.K * j.P)) : TF_OK;
}

/* ---- pooling, f32 ---- */

typedef struct pool_job {
    const tf_op *op;
    operand x, o;
    int64_t C;
} pool_job;

/* The common window: no padding, no dilation, rows contiguous: every read
 * inside, no bounds to test. NaN propagates as the reference's (the first
 * one met). */
static bool pool_plane_plain(const pool_job *j, const char *in, char *out) {
    const tf_tensor_desc *O = &j->op->output;
    const tf_op_params *p = &j->op->params;
    if (p->padding[0] || p->padding[1] || p->dilation[0] != 1 || p->dilation[1] != 1 || j->x.stride[3] != 4 ||
        j->o.stride[3] != 4)
        return false;
    const bool is_max = j->op->kind == TF_OP_MAXPOOL2D;
    const int64_t Ho = O->shape[2], Wo = O->shape[3], k0 = p->kernel[0], k1 = p->kernel[1];
    const float area = (float)(k0 * k1);
    for (int64_t y = 0; y < Ho; y++) {
        float *o = (float *)(out + y * j->o.stride[2]);
        for (int64_t x = 0; x < Wo; x++) {
            const char *w = in + y * p->stride[0] * j->x.stride[2] + x * p->stride[1] * 4;
            float acc = is_max ? -INFINITY : 0;
            bool nan = false;
            for (int64_t i = 0; i < k0 && !nan; i++) {
                const float *r = (const float *)(w + i * j->x.stride[2]);
                for (int64_t k = 0; k < k1; k++) {
                    const float v = r[k];
                    if (v != v) {
                        acc = v;
                        nan = true;
                        break;
                    }
                    if (!is_max) acc += v;
                    else if (v > acc) acc = v;
                }
            }
            o[x] = is_max || nan ? acc : acc / area;
        }
    }
    return true;
}

static void pool_planes(void *ctx, int64_t begin, int64_t end) {
    const pool_job *j = ctx;
    const tf_tensor_desc *X = &j->op->inputs[0], *O = &j->op->output;
    const tf_op_params *p = &j->op->params;
    const bool is_max = j->op->kind == TF_OP_MAXPOOL2D, count_pad = p->flags & TF_POOL_COUNT_PAD;
    const int64_t H = X->shape[2], W = X->shape[3], Ho = O->shape[2], Wo = O->shape[3];
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / j->C, c = t % j->C;
        const char *in = j->x.base + n * j->x.stride[0] + c * j->x.stride[1];
        char *out = j->o.base + n * j->o.stride[0] + c * j->o.stride[1];
        if (pool_plane_plain(j, in, out)) continue;
        for (int64_t y = 0; y < Ho; y++)
            for (int64_t x = 0; x < Wo; x++) {
                float acc = is_max ? -INFINITY : 0;
                int64_t counted = 0;
                for (int64_t i = 0; i < p->kernel[0]; i++) {
                    const int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                    for (int64_t k = 0; k < p->kernel[1]; k++) {
                        const int64_t xi = x * p->stride[1] - p->padding[1] + k * p->dilation[1];
                        const bool inside = yi >= 0 && yi < H && xi >= 0 && xi < W;
                        if (!is_max && (inside || count_pad) && yi < H + p->padding[0] && xi < W + p->padding[1])
                            counted++;
                        if (!inside) continue;
                        const float v = *(const float *)(in + yi * j->x.stride[2] + xi * j->x.stride[3]);
                        if (!is_max) acc += v;
                        else if (isnan(v) || v > acc) acc = isnan(acc) ? acc : v;
                    }
                }
                if (!is_max) acc = counted ? acc / (float)counted : NAN;
                *(float *)(out + y * j->o.stride[2] + x * j->o.stride[3]) = acc;
            }
    }
}

static tf_status fast_pool(const tf_op *op, tf_cpu_address_fn address) {
    if (op->output.dtype != TF_F32) return run_below(op, address);
    pool_job j = {op, make_operand(&op->inputs[0], address), make_operand(&op->output, address), op->output.shape[1]};
    const int64_t planes = op->output.shape[0] * op->output.shape[1];
    const int64_t per_plane = op->output.shape[2] * op->output.shape[3] * op->params.kernel[0] * op->params.kernel[1];
    tf_cpu_parallel_for(planes, (1 << 14) / (per_plane + 1) + 1, pool_planes, &j);
    return TF_OK;
}

void tf_cpu_conv_install(tf_cpu_table *t) {
    below = *t;
    t->fn[TF_OP_CONV2D][TF_F32] = fast_conv2d;
    t->fn[TF_OP_CONV2D][TF_F64] = fast_conv2d;
    t->fn[TF_OP_MAXPOOL2D][TF_F32] = fast_pool;
    t->fn[TF_OP_AVGPOOL2D][TF_F32] = fast_pool;
}
