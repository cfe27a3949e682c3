/* Convolution and pooling for the CPU backend, installed over the
 * reference loops (tf_cpu_conv_install, with the BLAS layer):
 *
 *  - conv2d (f32, f64): im2col and one GEMM per image and group through
 *    the BLAS the build found. Any input and weight strides (autograd's
 *    transposed and flipped views come here); the output contiguous, as
 *    ops make it. Images and groups spread over the pool; a single one
 *    spreads its GEMM instead. Planes of a few positions (4x4) take
 *    blocks of images side by side in one GEMM, as the gradients do.
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
    int32_t *gather;                     /* [kh kw, P]: each column's element in the padded plane [Hp, Wp]
                                            (small images: gather_table), or NULL */
    int64_t Hp, Wp;
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

/* Small images (the digits CNN's 4x4 and 8x8 maps) unfold through a
 * table: each channel is copied once into a zero-bordered plane
 * [Hp, Wp] on the stack, and column q of kernel offset r reads element
 * gather[r P + q] of it (always inside: no bounds, no select). Their rows
 * are a few elements, and im2col's per-row copies cost more than the
 * GEMM (55% of the 4x4 maps' convolution). */
#define GATHER_TABLE_MAX 16384           /* entries of the table, kh kw P */
#define PADDED_MAX 4096                  /* elements of a padded plane */

static int32_t *gather_table(conv_job *j) {
    const tf_op_params *p = j->p;
    const int64_t entries = j->kh * j->kw * j->P;
    j->Hp = j->H + 2 * p->padding[0];
    j->Wp = j->Wd + 2 * p->padding[1];
    if (entries > GATHER_TABLE_MAX || j->Hp * j->Wp > PADDED_MAX) return NULL;
    int32_t *t = tf_cpu_alloc(sizeof(int32_t) * (size_t)(entries ? entries : 1));
    if (!t) return NULL;                 /* the row copies need no table */
    for (int64_t i = 0; i < j->kh; i++)
        for (int64_t jj = 0; jj < j->kw; jj++)
            for (int64_t y = 0; y < j->Ho; y++)
                for (int64_t x = 0; x < j->Wo; x++)
                    t[((i * j->kw + jj) * j->Ho + y) * j->Wo + x] =
                        (int32_t)((y * p->stride[0] + i * p->dilation[0]) * j->Wp + x * p->stride[1] + jj * p->dilation[1]);
    return t;
}

#define IM2COL_GATHERED(T)                                                                                 \
    static void pad_plane_##T(const conv_job *j, const char *plane, T *pp) {                              \
        const tf_op_params *p = j->p;                                                                      \
        memset(pp, 0, sizeof(T) * (size_t)(j->Hp * j->Wp));                                                \
        for (int64_t y = 0; y < j->H; y++) {                                                               \
            T *dst = pp + (y + p->padding[0]) * j->Wp + p->padding[1];                                     \
            const char *src = plane + y * j->xs[2];                                                        \
            for (int64_t x = 0; x < j->Wd; x++) dst[x] = *(const T *)(src + x * j->xs[3]);                 \
        }                                                                                                  \
    }                                                                                                      \
    static void im2col_gathered_##T(const conv_job *j, int64_t n, int64_t g, T *col, int64_t ld) {         \
        const int64_t kk = j->kh * j->kw, P = j->P;                                                        \
        T pp[PADDED_MAX];                                                                                  \
        for (int64_t c = 0; c < j->cg; c++) {                                                              \
            pad_plane_##T(j, j->x + n * j->xs[0] + (g * j->cg + c) * j->xs[1], pp);                        \
            for (int64_t r = 0; r < kk; r++) {                                                             \
                const int32_t *at = j->gather + r * P;                                                     \
                T *dst = col + (c * kk + r) * ld;                                                          \
                for (int64_t q = 0; q < P; q++) dst[q] = pp[at[q]];                                        \
            }                                                                                              \
        }                                                                                                  \
    }
IM2COL_GATHERED(float)
IM2COL_GATHERED(double)

/* col [K, P] (rows ld apart): row (c, i, j) holds input channel c at
 * kernel offset (i, j) for every output position, zero where that falls in
 * the padding; the inside part of a line is one memcpy when it is
 * contiguous in the input. */
#define IM2COL(T)                                                                                          \
    static void im2col_##T(const conv_job *j, int64_t n, int64_t g, T *col, int64_t ld) {                  \
        const tf_op_params *p = j->p;                                                                      \
        if (j->gather) {                                                                                   \
            im2col_gathered_##T(j, n, g, col, ld);                                                         \
            return;                                                                                        \
        }                                                                                                  \
        const bool dense = p->stride[1] == 1 && j->xs[3] == (int64_t)sizeof(T);                            \
        for (int64_t c = 0; c < j->cg; c++) {                                                              \
            const char *plane = j->x + n * j->xs[0] + (g * j->cg + c) * j->xs[1];                          \
            for (int64_t i = 0; i < j->kh; i++)                                                            \
                for (int64_t jj = 0; jj < j->kw; jj++) {                                                   \
                    T *row = col + ((c * j->kh + i) * j->kw + jj) * ld;                                    \
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
    if (j->f64) im2col_double(j, n, g, col, j->P);
    else im2col_float(j, n, g, col, j->P);
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
    size_t got;
    void *col = tf_cpu_scratch_take(j->es * (size_t)(j->K * j->P > 0 ? j->K * j->P : 1), &got);
    if (!col) {
        atomic_store(&j->out_of_memory, true);
        return;
    }
    for (int64_t t = begin; t < end; t++) conv_one(j, t / j->G, t % j->G, col);
    tf_cpu_scratch_give(col, got);
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

#define BLOCKED_FORWARD_P 32              /* positions of a plane under which the forward takes blocks */
static tf_status conv2d_in_blocks(const conv_job *c);

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
    j.gather = gather_table(&j);
    /* One image a GEMM. Blocks of small images side by side in one wider
     * GEMM measured slower on the digits CNN's first layer (8x8 maps, one
     * input channel; AVX2, 2 threads: the copy out of the block and the
     * larger column buffer cost more than OpenBLAS saved); planes under
     * BLOCKED_FORWARD_P positions (its second layer's 4x4) take blocks. */
    const int64_t tasks = j.N * j.G;
    if (j.gather && j.P < BLOCKED_FORWARD_P && tasks > 1) {
        tf_status s = conv2d_in_blocks(&j);
        tf_cpu_free(packed);
        tf_cpu_free(j.gather);
        return s;
    }
    j.pooled_gemm = tasks < tf_cpu_num_threads();
    if (j.pooled_gemm) conv_chunk(&j, 0, tasks);
    else tf_cpu_parallel_for(tasks, 1, conv_chunk, &j);
    tf_cpu_free(packed);
    tf_cpu_free(j.gather);
    return atomic_load(&j.out_of_memory) ? tf_cpu_oom("conv2d", j.es * (size_t)(j.K * j.P)) : TF_OK;
}

/* ---- the gradients of conv2d (f32, f64) ----
 *
 * Both as GEMMs over a block of images side by side, so the product's
 * inner or outer length is images x positions rather than one image's
 * (the digits CNN's 4x4 maps would give GEMMs 16 wide): with dY_g the
 * block's [og, B P] gradient rows of group g and cols its unfolded input
 * [K, B P],
 *   dW_g  = dY_g cols^T         (accumulated over blocks)
 *   cols  = W_g^T dY_g, folded back into dX (col2im: the sum over every
 *           window an input element falls in). */

#define GRAD_BLOCK_ELEMENTS (1 << 20)    /* the columns of a block: 4 MB of f32 */

typedef struct conv_grad_job {
    conv_job c;                          /* the geometry; c.x the input (dW) */
    const char *dy;
    int64_t dys[4];                      /* bytes */
    char *dx;                            /* dX: the output, contiguous */
    char *cols, *rows;                   /* [K, ld] and [og, ld] of the block */
    int64_t first, ld, g;                /* the block's first image, its width B P, the group */
    size_t cols_bytes, rows_bytes;       /* the scratch blocks' sizes */
} conv_grad_job;

/* dY's rows of image n, group g, into the block's [og, ld] at column (n - first) P. */
static void gather_dy(const conv_grad_job *j, int64_t n) {
    const conv_job *c = &j->c;
    const size_t es = c->es;
    const bool planes = j->dys[3] == (int64_t)es && j->dys[2] == c->Wo * (int64_t)es;
    for (int64_t o = 0; o < c->og; o++) {
        const char *src = j->dy + n * j->dys[0] + (j->g * c->og + o) * j->dys[1];
        char *dst = j->rows + ((size_t)(o * j->ld + (n - j->first) * c->P)) * es;
        if (planes) {
            memcpy(dst, src, es * (size_t)c->P);
            continue;
        }
        for (int64_t y = 0; y < c->Ho; y++)
            for (int64_t x = 0; x < c->Wo; x++, dst += es) memcpy(dst, src + y * j->dys[2] + x * j->dys[3], es);
    }
}

/* The block's columns of image n added back into dX's channels of group g
 * (zeroed first: the group's channels of an image are this task's alone);
 * small images go through col2im_run instead. */
#define COL2IM(T)                                                                                          \
    static void col2im_##T(const conv_grad_job *j, int64_t n) {                                            \
        const conv_job *c = &j->c;                                                                         \
        const tf_op_params *p = c->p;                                                                      \
        const int64_t HW = c->H * c->Wd;                                                                   \
        T *planes = (T *)j->dx + (n * c->G * c->cg + j->g * c->cg) * HW;                                   \
        const T *col = (const T *)j->cols + (n - j->first) * c->P;                                         \
        memset(planes, 0, sizeof(T) * (size_t)(c->cg * HW));                                              \
        for (int64_t ch = 0; ch < c->cg; ch++)                                                             \
            for (int64_t i = 0; i < c->kh; i++)                                                            \
                for (int64_t jj = 0; jj < c->kw; jj++) {                                                   \
                    const T *row = col + ((ch * c->kh + i) * c->kw + jj) * j->ld;                          \
                    int64_t lo, hi;                                                                        \
                    valid_columns(c, jj, &lo, &hi);                                                        \
                    const int64_t off = jj * p->dilation[1] - p->padding[1], s = p->stride[1];             \
                    for (int64_t y = 0; y < c->Ho; y++) {                                                  \
                        const int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];          \
                        if (yi < 0 || yi >= c->H) continue;                                                \
                        T *dst = planes + ch * HW + yi * c->Wd + off;                                      \
                        const T *src = row + y * c->Wo;                                                    \
                        for (int64_t x = lo; x < hi; x++) dst[x * s] += src[x];                            \
                    }                                                                                      \
                }                                                                                          \
    }
COL2IM(float)
COL2IM(double)

/* Small images in a block, a run of them at a time: their padded planes
 * side by side on the stack, and each (channel, offset) row of the block
 * walked once from left to right over the run. Image by image, each
 * image touched one cache line on each of K rows 4 KB or more apart, a
 * new page every access, which no prefetcher follows: col2im was 36% of
 * conv2d_grad_input's samples on the digits CNN, nearly all of it waiting
 * on those loads. Folding back with a column stride of 1, an output row's
 * columns are side by side in the plane: a loop the vectorizer takes (the
 * table's element adds ran 3.5 cycles each; conv2d_grad_input on the
 * digits' 4x4 maps about 240 -> 215 us). Unfolding keeps the table: the
 * same row loop measured slower there (4 elements a row: the vector
 * loop's checks cost more than the gathers). */
static int64_t images_per_run(const conv_job *c) {
    const int64_t per = c->Hp * c->Wp, run = PADDED_MAX / (per > 0 ? per : 1);
    return run < 1 ? 1 : run;
}

#define RUNS_GATHERED(T)                                                                                   \
    static void im2col_run_##T(const conv_grad_job *j, int64_t n0, int64_t n1) {                           \
        const conv_job *c = &j->c;                                                                         \
        const int64_t kk = c->kh * c->kw, P = c->P, plane = c->Hp * c->Wp;                                 \
        T pp[PADDED_MAX];                                                                                  \
        for (int64_t ch = 0; ch < c->cg; ch++) {                                                           \
            for (int64_t n = n0; n < n1; n++)                                                              \
                pad_plane_##T(c, c->x + n * c->xs[0] + (j->g * c->cg + ch) * c->xs[1], pp + (n - n0) * plane); \
            for (int64_t r = 0; r < kk; r++) {                                                             \
                const int32_t *at = c->gather + r * P;                                                     \
                T *dst = (T *)j->cols + (ch * kk + r) * j->ld + (n0 - j->first) * P;                       \
                for (int64_t n = 0; n < n1 - n0; n++, dst += P) {                                          \
                    const T *src = pp + n * plane;                                                         \
                    for (int64_t q = 0; q < P; q++) dst[q] = src[at[q]];                                   \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
    /* the inverse: sums over every window, then each plane's inside into dX */                            \
    static void col2im_run_##T(const conv_grad_job *j, int64_t n0, int64_t n1) {                           \
        const conv_job *c = &j->c;                                                                         \
        const tf_op_params *p = c->p;                                                                      \
        const int64_t kk = c->kh * c->kw, P = c->P, plane = c->Hp * c->Wp, HW = c->H * c->Wd;              \
        const bool unit = p->stride[1] == 1;                                                               \
        T pp[PADDED_MAX];                                                                                  \
        for (int64_t ch = 0; ch < c->cg; ch++) {                                                           \
            memset(pp, 0, sizeof(T) * (size_t)((n1 - n0) * plane));                                        \
            for (int64_t r = 0; r < kk; r++) {                                                             \
                const int32_t *at = c->gather + r * P;                                                     \
                const T *src = (const T *)j->cols + (ch * kk + r) * j->ld + (n0 - j->first) * P;           \
                for (int64_t n = 0; n < n1 - n0; n++, src += P) {                                          \
                    T *dst = pp + n * plane;                                                               \
                    if (unit)                                                                              \
                        for (int64_t y = 0; y < c->Ho; y++) {                                              \
                            T *restrict to = dst + at[y * c->Wo];                                          \
                            const T *restrict from = src + y * c->Wo;                                      \
                            for (int64_t x = 0; x < c->Wo; x++) to[x] += from[x];                          \
                        }                                                                                  \
                    else                                                                                   \
                        for (int64_t q = 0; q < P; q++) dst[at[q]] += src[q];                              \
                }                                                                                          \
            }                                                                                              \
            for (int64_t n = n0; n < n1; n++) {                                                            \
                T *out = (T *)j->dx + ((n * c->G + j->g) * c->cg + ch) * HW;                               \
                const T *in = pp + (n - n0) * plane + p->padding[0] * c->Wp + p->padding[1];               \
                for (int64_t y = 0; y < c->H; y++) memcpy(out + y * c->Wd, in + y * c->Wp, sizeof(T) * (size_t)c->Wd); \
            }                                                                                              \
        }                                                                                                  \
    }
RUNS_GATHERED(float)
RUNS_GATHERED(double)

/* Images [begin, end) of the block, in runs when their planes are small. */
static void each_run(const conv_grad_job *j, int64_t begin, int64_t end,
                     void (*run)(const conv_grad_job *, int64_t, int64_t)) {
    const int64_t step = images_per_run(&j->c);
    for (int64_t n = j->first + begin; n < j->first + end; n += step)
        run(j, n, n + step < j->first + end ? n + step : j->first + end);
}

static void gather_images(void *ctx, int64_t begin, int64_t end) {
    conv_grad_job *j = ctx;
    for (int64_t n = j->first + begin; n < j->first + end; n++) gather_dy(j, n);
    if (!j->cols) return;
    if (j->c.gather) {
        each_run(j, begin, end, j->c.f64 ? im2col_run_double : im2col_run_float);
        return;
    }
    for (int64_t n = j->first + begin; n < j->first + end; n++) {
        char *col = j->cols + (size_t)((n - j->first) * j->c.P) * j->c.es;
        if (j->c.f64) im2col_double(&j->c, n, j->g, (double *)col, j->ld);
        else im2col_float(&j->c, n, j->g, (float *)col, j->ld);
    }
}

static void col2im_images(void *ctx, int64_t begin, int64_t end) {
    conv_grad_job *j = ctx;
    if (j->c.gather) {
        each_run(j, begin, end, j->c.f64 ? col2im_run_double : col2im_run_float);
        return;
    }
    for (int64_t n = j->first + begin; n < j->first + end; n++) {
        if (j->c.f64) col2im_double(j, n);
        else col2im_float(j, n);
    }
}

/* The geometry shared by both gradients: the forward's input extent, dY's
 * and the weight's, from the op's operands. */
static void grad_geometry(conv_grad_job *j, const tf_op *op, const tf_tensor_desc *X, const tf_tensor_desc *DY,
                          const int64_t *wshape, tf_cpu_address_fn address) {
    conv_job *c = &j->c;
    const tf_dtype dt = op->output.dtype;
    c->p = &op->params;
    c->f64 = dt == TF_F64;
    c->es = c->f64 ? sizeof(double) : sizeof(float);
    c->N = X->shape[0], c->H = X->shape[2], c->Wd = X->shape[3];
    c->OC = wshape[0], c->G = op->params.groups, c->cg = wshape[1], c->og = c->OC / c->G;
    c->kh = wshape[2], c->kw = wshape[3], c->K = c->cg * c->kh * c->kw;
    c->Ho = DY->shape[2], c->Wo = DY->shape[3], c->P = c->Ho * c->Wo;
    j->dy = address(DY->buffer) + DY->offset;
    for (int d = 0; d < 4; d++) j->dys[d] = DY->strides[d] * (int64_t)c->es;
}

static int64_t images_per_block(const conv_job *c) {
    const int64_t per = c->K * c->P > 0 ? c->K * c->P : 1, b = GRAD_BLOCK_ELEMENTS / per;
    return b < 1 ? 1 : b > c->N ? c->N : b;
}

/* The block buffers: columns [K, B P] (when asked) and dY rows [og, B P],
 * scratch kept between calls. */
static tf_status grad_buffers(conv_grad_job *j, int64_t block, bool with_cols, const char *what) {
    const conv_job *c = &j->c;
    j->ld = block * c->P;
    const size_t cols = with_cols ? (size_t)(c->K * j->ld) : 0, rows = (size_t)(c->og * j->ld);
    j->cols = with_cols ? tf_cpu_scratch_take(c->es * (cols ? cols : 1), &j->cols_bytes) : NULL;
    j->rows = tf_cpu_scratch_take(c->es * (rows ? rows : 1), &j->rows_bytes);
    if ((with_cols && !j->cols) || !j->rows) {
        tf_cpu_scratch_give(j->cols, j->cols_bytes);
        tf_cpu_scratch_give(j->rows, j->rows_bytes);
        return tf_cpu_oom(what, c->es * (cols + rows));
    }
    return TF_OK;
}

static void grad_buffers_give(conv_grad_job *j, char *cols) {
    tf_cpu_scratch_give(cols, j->cols_bytes);
    tf_cpu_scratch_give(j->rows, j->rows_bytes);
}

/* The forward over blocks of small images: cols [K, B P] unfolded in runs,
 * one GEMM og x B P x K a group and block into the rows [og, B P], then
 * each image's rows copied out with the bias. A GEMM an image would be
 * P = 16 wide on 4x4 planes, where OpenBLAS's narrow edge kernels and its
 * per-call cost dominate. */
static void unfold_images(void *ctx, int64_t begin, int64_t end) {
    const conv_grad_job *j = ctx;
    each_run(j, begin, end, j->c.f64 ? im2col_run_double : im2col_run_float);
}

#define COPY_OUT(T)                                                                                        \
    static void copy_out_##T(const conv_grad_job *j, int64_t n) {                                          \
        const conv_job *c = &j->c;                                                                         \
        for (int64_t o = 0; o < c->og; o++) {                                                              \
            const int64_t oc = j->g * c->og + o;                                                           \
            const T bias = c->bias ? *(const T *)(c->bias + oc * c->bias_stride) : 0;                      \
            const T *src = (const T *)j->rows + o * j->ld + (n - j->first) * c->P;                         \
            T *dst = (T *)c->o + (n * c->OC + oc) * c->P;                                                  \
            for (int64_t q = 0; q < c->P; q++) dst[q] = src[q] + bias;                                     \
        }                                                                                                  \
    }
COPY_OUT(float)
COPY_OUT(double)

static void copy_out_images(void *ctx, int64_t begin, int64_t end) {
    const conv_grad_job *j = ctx;
    for (int64_t n = j->first + begin; n < j->first + end; n++) {
        if (j->c.f64) copy_out_double(j, n);
        else copy_out_float(j, n);
    }
}

static tf_status conv2d_in_blocks(const conv_job *c) {
    conv_grad_job j = {0};
    memcpy(&j.c, c, sizeof *c);
    const int64_t block = images_per_block(c);
    tf_status s = grad_buffers(&j, block, true, "conv2d");
    if (s != TF_OK) return s;
    for (j.g = 0; j.g < c->G; j.g++)
        for (j.first = 0; j.first < c->N; j.first += block) {
            const int64_t count = c->N - j.first < block ? c->N - j.first : block, width = count * c->P;
            tf_cpu_parallel_for(count, 1, unfold_images, &j);
            const char *wg = c->w + (size_t)(j.g * c->og * c->K) * c->es;
            tf_cpu_blas_gemm_pooled(c->f64, false, false, c->og, width, c->K, 1, wg, c->K, j.cols, j.ld, 0, j.rows,
                                    j.ld);
            tf_cpu_parallel_for(count, 1, copy_out_images, &j);
        }
    grad_buffers_give(&j, j.cols);
    return TF_OK;
}

static tf_status fast_conv_grad_weight(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *DY = &op->inputs[1], *O = &op->output;
    const tf_dtype dt = O->dtype;
    if ((dt != TF_F32 && dt != TF_F64) || !tf_desc_is_contiguous(O) || !tf_desc_numel(O)) return run_below(op, address);
    conv_grad_job j = {0};
    grad_geometry(&j, op, X, DY, O->shape, address);
    conv_job *c = &j.c;
    c->x = address(X->buffer) + X->offset;
    for (int d = 0; d < 4; d++) c->xs[d] = X->strides[d] * (int64_t)c->es;
    char *dw = address(O->buffer) + O->offset;
    if (c->N == 0 || c->P == 0) {                /* no terms: zeros */
        memset(dw, 0, c->es * (size_t)tf_desc_numel(O));
        return TF_OK;
    }
    c->gather = gather_table(c);
    const int64_t block = images_per_block(c);
    tf_status s = grad_buffers(&j, block, true, "conv2d_grad_weight");
    if (s != TF_OK) {
        tf_cpu_free(c->gather);
        return s;
    }
    for (j.g = 0; j.g < c->G; j.g++)
        for (j.first = 0; j.first < c->N; j.first += block) {
            const int64_t count = c->N - j.first < block ? c->N - j.first : block, width = count * c->P;
            tf_cpu_parallel_for(count, 1, gather_images, &j);
            char *dwg = dw + (size_t)(j.g * c->og * c->K) * c->es;
            tf_cpu_blas_gemm_pooled(c->f64, false, true, c->og, c->K, width, 1, j.rows, j.ld, j.cols, j.ld,
                                    j.first ? 1 : 0, dwg, c->K);
        }
    grad_buffers_give(&j, j.cols);
    tf_cpu_free(c->gather);
    return TF_OK;
}

static tf_status fast_conv_grad_input(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *DY = &op->inputs[0], *W = &op->inputs[1], *O = &op->output;
    const tf_dtype dt = O->dtype;
    if ((dt != TF_F32 && dt != TF_F64) || !tf_desc_is_contiguous(O) || !tf_desc_numel(O)) return run_below(op, address);
    conv_grad_job j = {0};
    grad_geometry(&j, op, O, DY, W->shape, address);
    conv_job *c = &j.c;
    j.dx = address(O->buffer) + O->offset;
    if (c->P == 0) {
        memset(j.dx, 0, c->es * (size_t)tf_desc_numel(O));
        return TF_OK;
    }
    void *packed = pack_weight(W, address(W->buffer) + W->offset, c->es);
    if (!packed) return tf_cpu_oom("conv2d_grad_input", c->es * (size_t)tf_desc_numel(W));
    const int64_t block = images_per_block(c);
    tf_status s = grad_buffers(&j, block, true, "conv2d_grad_input");
    if (s != TF_OK) {
        tf_cpu_free(packed);
        return s;
    }
    c->xs[3] = (int64_t)c->es;             /* dX contiguous: its plane's strides for the table */
    c->xs[2] = c->Wd * c->xs[3];
    c->gather = gather_table(c);
    char *cols = j.cols;
    for (j.g = 0; j.g < c->G; j.g++)
        for (j.first = 0; j.first < c->N; j.first += block) {
            const int64_t count = c->N - j.first < block ? c->N - j.first : block, width = count * c->P;
            j.cols = NULL;                       /* gather dY's rows only */
            tf_cpu_parallel_for(count, 1, gather_images, &j);
            j.cols = cols;
            const char *wg = (const char *)packed + (size_t)(j.g * c->og * c->K) * c->es;
            tf_cpu_blas_gemm_pooled(c->f64, true, false, c->K, width, c->og, 1, wg, c->K, j.rows, j.ld, 0, j.cols,
                                    j.ld);
            tf_cpu_parallel_for(count, 1, col2im_images, &j);
        }
    grad_buffers_give(&j, cols);
    tf_cpu_free(packed);
    tf_cpu_free(c->gather);
    return TF_OK;
}

/* ---- pooling, f32 ---- */

typedef struct pool_job {
    const tf_op *op;
    operand x, o;
    int64_t C;
} pool_job;

#define POOL_CHUNK 64                    /* windows of a row pooled side by side */

/* Whether a k0 x k1 window whose rows are `row` bytes apart holds a NaN. */
static bool window_nan(const char *w, int64_t k0, int64_t k1, int64_t row) {
    for (int64_t i = 0; i < k0; i++)
        for (int64_t k = 0; k < k1; k++)
            if (((const float *)(w + i * row))[k] != ((const float *)(w + i * row))[k]) return true;
    return false;
}

/* The first NaN of a k0 x k1 window whose rows are `row` bytes apart. */
static float first_nan(const char *w, int64_t k0, int64_t k1, int64_t row) {
    for (int64_t i = 0; i < k0; i++)
        for (int64_t k = 0; k < k1; k++) {
            const float v = ((const float *)(w + i * row))[k];
            if (v != v) return v;
        }
    return NAN;
}

/* n windows of a row side by side, one accumulator each (acc), and
 * chk[x] the sum of v - v over the window: NaN where it holds a NaN or an
 * infinity, so the values need no branch (random data mispredicts half of
 * them) and no chain runs through every element. */
static void max_chunk(const char *top, int64_t row, int64_t s1, int64_t k0, int64_t k1, int64_t n,
                      float *restrict acc, float *restrict chk) {
    for (int64_t x = 0; x < n; x++) acc[x] = -INFINITY, chk[x] = 0;
    for (int64_t i = 0; i < k0; i++)
        for (int64_t k = 0; k < k1; k++) {
            const float *restrict src = (const float *)(top + i * row) + k;
            for (int64_t x = 0; x < n; x++) {
                const float v = src[x * s1];
                chk[x] += v - v;
                acc[x] = v > acc[x] ? v : acc[x];
            }
        }
}

static void sum_chunk(const char *top, int64_t row, int64_t s1, int64_t k0, int64_t k1, int64_t n,
                      float *restrict acc, float *restrict chk) {
    for (int64_t x = 0; x < n; x++) acc[x] = 0, chk[x] = 0;
    for (int64_t i = 0; i < k0; i++)
        for (int64_t k = 0; k < k1; k++) {
            const float *restrict src = (const float *)(top + i * row) + k;
            for (int64_t x = 0; x < n; x++) {
                const float v = src[x * s1];
                chk[x] += v - v;
                acc[x] += v;
            }
        }
}

/* The commonest window, 2x2: four loads and three selects per output, no
 * loop inside a window and no chain between windows (a window at a time
 * through the general loops ran 8 ns each). v - v summed is NaN where the
 * window holds a NaN or an infinity: those windows are looked at again. */
static void max2x2_row(const char *top, int64_t row, int64_t s1, int64_t Wo, float *o) {
    const float *r0 = (const float *)top, *r1 = (const float *)(top + row);
    for (int64_t x = 0; x < Wo; x++) {
        const float a = r0[x * s1], b = r0[x * s1 + 1], c = r1[x * s1], d = r1[x * s1 + 1];
        const float chk = (a - a) + (b - b) + (c - c) + (d - d);
        float m = b > a ? b : a;
        m = c > m ? c : m;
        m = d > m ? d : m;
        const char *w = top + x * s1 * 4;
        o[x] = chk != chk && window_nan(w, 2, 2, row) ? first_nan(w, 2, 2, row) : m;
    }
}

/* Stride 2, the usual 2x2 pooling: the windows sit side by side, and a
 * pass without branches (one the vectorizer takes: 4 windows a vector)
 * leaves each window's check for a second look at the rare NaN or
 * infinity. max2x2_row went a window at a time through a select chain. */
static void max2x2_s2_row(const char *top, int64_t row, int64_t Wo, float *restrict o) {
    const float *restrict r0 = (const float *)top, *restrict r1 = (const float *)(top + row);
    float chk[POOL_CHUNK];
    for (int64_t x0 = 0; x0 < Wo; x0 += POOL_CHUNK) {
        const int64_t n = Wo - x0 < POOL_CHUNK ? Wo - x0 : POOL_CHUNK;
        const float *restrict a0 = r0 + 2 * x0, *restrict a1 = r1 + 2 * x0;
        float *restrict out = o + x0;
        int odd = 0;                     /* a NaN or an infinity somewhere: an OR the vectorizer keeps */
        for (int64_t x = 0; x < n; x++) {
            const float a = a0[2 * x], b = a0[2 * x + 1], c = a1[2 * x], d = a1[2 * x + 1];
            chk[x] = (a - a) + (b - b) + (c - c) + (d - d);
            odd |= chk[x] != chk[x];
            float m = b > a ? b : a;
            m = c > m ? c : m;
            out[x] = d > m ? d : m;
        }
        for (int64_t x = 0; odd && x < n; x++) {
            const char *w = top + (x0 + x) * 8;
            if (chk[x] != chk[x] && window_nan(w, 2, 2, row)) out[x] = first_nan(w, 2, 2, row);
        }
    }
}

/* Its gradient where the windows tile the plane (stride 2, even H and W):
 * every element of dX is written once, g where its window's first maximum
 * (first NaN) sits and 0 elsewhere, so no zeroing pass and no scatter;
 * selects only, which the vectorizer takes (4 windows a vector). */
static void max2x2_s2_grad_row(const char *top, int64_t row, int64_t Wo, const float *restrict g,
                               float *restrict dx0, float *restrict dx1) {
    const float *restrict r0 = (const float *)top, *restrict r1 = (const float *)(top + row);
    for (int64_t x = 0; x < Wo; x++) {
        const float a = r0[2 * x], b = r0[2 * x + 1], c = r1[2 * x], d = r1[2 * x + 1];
        /* which of a, b, c, d (0-3) is the first maximum, then the first
         * NaN over it; kept in float: selects on ints the vectorizer
         * refused ("control flow in loop") */
        const float mab = b > a ? b : a, mabc = c > mab ? c : mab;
        float at = b > a ? 1.f : 0.f;
        at = c > mab ? 2.f : at;
        at = d > mabc ? 3.f : at;
        float nan_at = d != d ? 3.f : 4.f;
        nan_at = c != c ? 2.f : nan_at;
        nan_at = b != b ? 1.f : nan_at;
        nan_at = a != a ? 0.f : nan_at;
        at = nan_at < 4.f ? nan_at : at;
        const float v = g[x];
        dx0[2 * x] = at == 0.f ? v : 0.f;
        dx0[2 * x + 1] = at == 1.f ? v : 0.f;
        dx1[2 * x] = at == 2.f ? v : 0.f;
        dx1[2 * x + 1] = at == 3.f ? v : 0.f;
    }
}

/* Its gradient: each window's g to its first maximum (row-major, as the
 * general loop), added (windows overlap when the stride is 1). */
static void max2x2_grad_row(const char *top, int64_t row, int64_t s1, int64_t Wo, const char *g, int64_t gs,
                            float *dx, int64_t W) {
    const float *r0 = (const float *)top, *r1 = (const float *)(top + row);
    for (int64_t x = 0; x < Wo; x++) {
        const float a = r0[x * s1], b = r0[x * s1 + 1], c = r1[x * s1], d = r1[x * s1 + 1];
        float m = a;
        int64_t at = 0;
        at = b > m ? 1 : at, m = b > m ? b : m;
        at = c > m ? W : at, m = c > m ? c : m;
        at = d > m ? W + 1 : at;
        const float chk = (a - a) + (b - b) + (c - c) + (d - d);     /* NaN: a NaN or an infinity */
        if (chk != chk && (a != a || b != b || c != c || d != d)) at = a != a ? 0 : b != b ? 1 : c != c ? W : W + 1;
        dx[x * s1 + at] += *(const float *)(g + x * gs);
    }
}

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
    const int64_t Ho = O->shape[2], Wo = O->shape[3], k0 = p->kernel[0], k1 = p->kernel[1], s1 = p->stride[1];
    const int64_t row = j->x.stride[2];
    const float area = (float)(k0 * k1);
    if (is_max && k0 == 2 && k1 == 2) {
        for (int64_t y = 0; y < Ho; y++) {
            const char *top = in + y * p->stride[0] * row;
            float *o = (float *)(out + y * j->o.stride[2]);
            if (s1 == 2) max2x2_s2_row(top, row, Wo, o);
            else max2x2_row(top, row, s1, Wo, o);
        }
        return true;
    }
    /* A chunk of a row's windows at once, one accumulator each: the
     * chains run side by side (one window's 2x2 chain alone is four
     * dependent maxes), and no branch tests the values (random data
     * mispredicts half of them). A NaN is noted on the way and the
     * chunk's windows found again for it (the first one met). */
    float acc[POOL_CHUNK], chk[POOL_CHUNK];
    for (int64_t y = 0; y < Ho; y++) {
        float *o = (float *)(out + y * j->o.stride[2]);
        const char *top = in + y * p->stride[0] * row;
        for (int64_t x0 = 0; x0 < Wo; x0 += POOL_CHUNK) {
            const int64_t n = Wo - x0 < POOL_CHUNK ? Wo - x0 : POOL_CHUNK;
            if (is_max) max_chunk(top + x0 * s1 * 4, row, s1, k0, k1, n, acc, chk);
            else sum_chunk(top + x0 * s1 * 4, row, s1, k0, k1, n, acc, chk);
            for (int64_t x = 0; x < n; x++) {
                const char *w = top + (x0 + x) * s1 * 4;
                /* chk is NaN where the window holds a NaN or an infinity */
                o[x0 + x] = chk[x] != chk[x] && window_nan(w, k0, k1, row) ? first_nan(w, k0, k1, row)
                            : is_max                                        ? acc[x]
                                                                            : acc[x] / area;
            }
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

/* 2x2 max pooling with stride 2 whose windows tile x, x and the output
 * contiguous: every plane's row pairs are one sequence, W floats apart,
 * so a task takes row pairs, not planes. The digits CNN's 4x4 planes hold
 * 2 row pairs of 2 windows each: plane by plane, 2048 planes a call spent
 * 40 ns apiece around their 4 windows (82 us a call). */
typedef struct row_pairs {
    const char *x, *g;                   /* g: dY (the gradient), contiguous */
    char *out;                           /* y, or dX */
    int64_t W, Wo;
} row_pairs;

static bool tiled_2x2(const tf_op *op, const tf_tensor_desc *X, const tf_tensor_desc *small) {
    const tf_op_params *p = &op->params;
    return p->kernel[0] == 2 && p->kernel[1] == 2 && p->stride[0] == 2 && p->stride[1] == 2 && !p->padding[0] &&
           !p->padding[1] && p->dilation[0] == 1 && p->dilation[1] == 1 && X->shape[2] == 2 * small->shape[2] &&
           X->shape[3] == 2 * small->shape[3] && tf_desc_is_contiguous(X) && tf_desc_is_contiguous(small);
}

static void max_row_pairs(void *ctx, int64_t begin, int64_t end) {
    const row_pairs *r = ctx;
    const int64_t row = r->W * 4;
    for (int64_t i = begin; i < end; i++) max2x2_s2_row(r->x + i * 2 * row, row, r->Wo, (float *)r->out + i * r->Wo);
}

static void max_grad_row_pairs(void *ctx, int64_t begin, int64_t end) {
    const row_pairs *r = ctx;
    float *dx = (float *)r->out;
    for (int64_t i = begin; i < end; i++)
        max2x2_s2_grad_row(r->x + i * 2 * r->W * 4, r->W * 4, r->Wo, (const float *)r->g + i * r->Wo,
                           dx + i * 2 * r->W, dx + (i * 2 + 1) * r->W);
}

static void tiled_2x2_run(tf_cpu_address_fn address, const tf_tensor_desc *X, const tf_tensor_desc *G,
                          const tf_tensor_desc *O, tf_pool_task task) {
    const tf_tensor_desc *small = G ? G : O;
    row_pairs r = {address(X->buffer) + X->offset, G ? address(G->buffer) + G->offset : NULL,
                   address(O->buffer) + O->offset, X->shape[3], small->shape[3]};
    const int64_t pairs = small->shape[0] * small->shape[1] * small->shape[2];
    tf_cpu_parallel_for(pairs, (1 << 14) / (4 * r.Wo + 1) + 1, task, &r);
}

static tf_status fast_pool(const tf_op *op, tf_cpu_address_fn address) {
    if (op->output.dtype != TF_F32) return run_below(op, address);
    if (op->kind == TF_OP_MAXPOOL2D && tiled_2x2(op, &op->inputs[0], &op->output)) {
        tiled_2x2_run(address, &op->inputs[0], NULL, &op->output, max_row_pairs);
        return TF_OK;
    }
    pool_job j = {op, make_operand(&op->inputs[0], address), make_operand(&op->output, address), op->output.shape[1]};
    const int64_t planes = op->output.shape[0] * op->output.shape[1];
    const int64_t per_plane = op->output.shape[2] * op->output.shape[3] * op->params.kernel[0] * op->params.kernel[1];
    tf_cpu_parallel_for(planes, (1 << 14) / (per_plane + 1) + 1, pool_planes, &j);
    return TF_OK;
}

/* ---- max pooling's gradient, f32 ----
 * Plane by plane: the plane of dX zeroed, then each window's dY added at
 * the window's first maximum (first NaN; first element inside when all
 * are -inf), the reference's choice. */

typedef struct pool_grad_job {
    const tf_op *op;
    operand x, dy;
    float *dx;                           /* contiguous */
} pool_grad_job;

/* The position in the plane of a window's first NaN. */
static int64_t first_nan_at(const pool_grad_job *j, const char *in, const tf_op_params *p, int64_t y, int64_t x,
                            int64_t H, int64_t W) {
    for (int64_t i = 0; i < p->kernel[0]; i++) {
        const int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
        for (int64_t k = 0; yi >= 0 && yi < H && k < p->kernel[1]; k++) {
            const int64_t xi = x * p->stride[1] - p->padding[1] + k * p->dilation[1];
            if (xi < 0 || xi >= W) continue;
            const float v = *(const float *)(in + yi * j->x.stride[2] + xi * j->x.stride[3]);
            if (v != v) return yi * W + xi;
        }
    }
    return -1;
}

static void pool_grad_planes(void *ctx, int64_t begin, int64_t end) {
    const pool_grad_job *j = ctx;
    const tf_tensor_desc *X = &j->op->inputs[0], *DY = &j->op->inputs[1];
    const tf_op_params *p = &j->op->params;
    const int64_t C = X->shape[1], H = X->shape[2], W = X->shape[3], Ho = DY->shape[2], Wo = DY->shape[3];
    const bool plain2x2 = p->kernel[0] == 2 && p->kernel[1] == 2 && !p->padding[0] && !p->padding[1] &&
                          p->dilation[0] == 1 && p->dilation[1] == 1 && j->x.stride[3] == 4;
    for (int64_t t = begin; t < end; t++) {
        const int64_t n = t / C, c = t % C;
        const char *in = j->x.base + n * j->x.stride[0] + c * j->x.stride[1];
        const char *g = j->dy.base + n * j->dy.stride[0] + c * j->dy.stride[1];
        float *out = j->dx + t * H * W;
        memset(out, 0, sizeof(float) * (size_t)(H * W));
        if (plain2x2) {
            for (int64_t y = 0; y < Ho; y++)
                max2x2_grad_row(in + y * p->stride[0] * j->x.stride[2], j->x.stride[2], p->stride[1], Wo,
                                g + y * j->dy.stride[2], j->dy.stride[3], out + y * p->stride[0] * W, W);
            continue;
        }
        for (int64_t y = 0; y < Ho; y++)
            for (int64_t x = 0; x < Wo; x++) {
                /* the first element inside, then the first greater one
                 * (selects, not branches: random data mispredicts them);
                 * a NaN noted, its position found after */
                float best = -INFINITY;
                int64_t at = -1;
                bool nan = false;
                for (int64_t i = 0; i < p->kernel[0]; i++) {
                    const int64_t yi = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                    if (yi < 0 || yi >= H) continue;
                    for (int64_t k = 0; k < p->kernel[1]; k++) {
                        const int64_t xi = x * p->stride[1] - p->padding[1] + k * p->dilation[1];
                        if (xi < 0 || xi >= W) continue;
                        const float v = *(const float *)(in + yi * j->x.stride[2] + xi * j->x.stride[3]);
                        const bool take = v > best || at < 0;
                        nan |= v != v;
                        best = take ? v : best;
                        at = take ? yi * W + xi : at;
                    }
                }
                if (nan) at = first_nan_at(j, in, p, y, x, H, W);
                if (at >= 0) out[at] += *(const float *)(g + y * j->dy.stride[2] + x * j->dy.stride[3]);
            }
    }
}

static tf_status fast_pool_grad(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *O = &op->output;
    if (O->dtype != TF_F32 || !tf_desc_is_contiguous(O)) return run_below(op, address);
    if (tiled_2x2(op, &op->inputs[0], &op->inputs[1])) {
        tiled_2x2_run(address, &op->inputs[0], &op->inputs[1], O, max_grad_row_pairs);
        return TF_OK;
    }
    pool_grad_job j = {op, make_operand(&op->inputs[0], address), make_operand(&op->inputs[1], address),
                       (float *)(address(O->buffer) + O->offset)};
    const int64_t planes = O->shape[0] * O->shape[1], per_plane = O->shape[2] * O->shape[3] + 1;
    tf_cpu_parallel_for(planes, (1 << 14) / per_plane + 1, pool_grad_planes, &j);
    return TF_OK;
}

void tf_cpu_conv_install(tf_cpu_table *t) {
    below = *t;
    t->fn[TF_OP_CONV2D][TF_F32] = fast_conv2d;
    t->fn[TF_OP_CONV2D][TF_F64] = fast_conv2d;
    t->fn[TF_OP_CONV2D_GRAD_INPUT][TF_F32] = fast_conv_grad_input;
    t->fn[TF_OP_CONV2D_GRAD_INPUT][TF_F64] = fast_conv_grad_input;
    t->fn[TF_OP_CONV2D_GRAD_WEIGHT][TF_F32] = fast_conv_grad_weight;
    t->fn[TF_OP_CONV2D_GRAD_WEIGHT][TF_F64] = fast_conv_grad_weight;
    t->fn[TF_OP_MAXPOOL2D_GRAD][TF_F32] = fast_pool_grad;
    t->fn[TF_OP_MAXPOOL2D][TF_F32] = fast_pool;
    t->fn[TF_OP_AVGPOOL2D][TF_F32] = fast_pool;
}
