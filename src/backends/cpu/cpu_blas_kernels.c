/* The BLAS layer: GEMM through the CBLAS the build found (OpenBLAS by
 * default), f16/bf16 GEMM through f32 panels and sgemm, and blocked
 * attention over sgemm, installed over the reference entries
 * (tf_cpu_blas_install). Each override takes the layouts BLAS can and hands
 * every other case to the entry it replaced. */
#include <stdatomic.h>

#include "cpu_blas.h"
#include "cpu_common.h"

static tf_cpu_table below;              /* the table as it was before this layer */

static tf_status run_below(const tf_op *op, tf_cpu_address_fn address) {
    return below.fn[op->kind][tf_cpu_table_dtype(op)](op, address);
}

/* ---- attention, f32 with BLAS: blocked, online softmax, no scores matrix ---- */

#define ATTN_BQ 64                       /* queries per task */
#define ATTN_BK 256                      /* keys per block */
#define ATTN_SHORT 64                    /* keys up to which a head runs without library calls */

typedef struct attn_job {
    const tf_op *op;
    const tf_fast_kernels *k;
    const float *q, *kk, *v, *mask;
    float *out;
    int64_t B, Hq, Lq, D, Hkv, Lk, Dv, group, qblocks;
    int64_t qs[4], ks[4], vs[4], ms[4], os[4];   /* strides in elements */
    float scale;
    bool causal;
    _Atomic bool out_of_memory;          /* a task could not get its scratch */
} attn_job;

static void attn_block(void *ctx, int64_t begin, int64_t end) {
    attn_job *j = ctx;                           /* shared by the tasks: out_of_memory is written */
    float *S = tf_cpu_alloc(sizeof(float) * ATTN_BQ * ATTN_BK), *O = tf_cpu_alloc(sizeof(float) * ATTN_BQ * (size_t)j->Dv);
    /* a sentence encoder's few dozen queries and keys: the keys transposed for
     * SIMD products, no library call (a decode step keeps its GEMV, a
     * prompt's longer blocks the library's GEMM) */
    bool direct = j->Lk <= ATTN_SHORT && j->Lq > 1 && j->qs[3] == 1;
    float *KT = direct ? tf_cpu_alloc(sizeof(float) * ATTN_SHORT * (size_t)j->D) : NULL;
    float m[ATTN_BQ], l[ATTN_BQ];
    bool nan_row[ATTN_BQ];
    if (!S || !O || (direct && !KT)) {           /* the op fails: run_sdpa_fast reports it */
        tf_cpu_free(S);
        tf_cpu_free(O);
        tf_cpu_free(KT);
        atomic_store(&j->out_of_memory, true);
        return;
    }
    int64_t lanes = j->k->lanes;
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
            int64_t lds = direct ? (cols + lanes - 1) / lanes * lanes : cols;   /* S's row stride */
            /* S = scale * Q_blk K_blk^T (one query, a decode step: a GEMV, which packs nothing) */
            if (direct) {
                for (int64_t e = 0; e < j->D; e++) {
                    float *kt = KT + e * lds;
                    for (int64_t c = 0; c < cols; c++) kt[c] = kp[(j0 + c) * j->ks[2] + e];
                    for (int64_t c = cols; c < lds; c++) kt[c] = 0;
                }
                j->k->attn_scores(rows, cols, j->D, qp, j->qs[2], KT, lds, j->scale, S, lds);
            } else if (rows == 1)
                tf_cpu_blas_gemv(false, false, cols, j->D, j->scale, kp + j0 * j->ks[2], j->ks[2], qp, j->qs[3], 0.0, S);
            else
                tf_cpu_blas_gemm(false, false, true, rows, cols, j->D, j->scale, qp, j->qs[2], kp + j0 * j->ks[2],
                                 j->ks[2], 0.0, S, cols);
            for (int64_t r = 0; r < rows; r++) {
                float *s = S + r * lds;
                if (j->mask) {
                    const float *mp = j->mask + b * j->ms[0] + h * j->ms[1] + (i0 + r) * j->ms[2] + j0 * j->ms[3];
                    for (int64_t c = 0; c < cols; c++) s[c] += mp[c * j->ms[3]];
                }
                int64_t visible = cols;                  /* causal: the keys up to the query's position */
                if (j->causal) {
                    const int64_t last = j->op->params.q_offset + i0 + r - j0;   /* the last visible column */
                    visible = last < 0 ? 0 : last + 1 < cols ? last + 1 : cols;
                    for (int64_t c = visible; c < cols; c++) s[c] = -INFINITY;
                }
                /* the one block of a short sequence: the row's softmax in whole
                 * vectors (the columns past those seen as -inf), P normalized
                 * before P @ V (a row with NaN or nothing visible takes the
                 * general path below, which gives NaN) */
                if (direct && visible > 0) {
                    for (int64_t c = visible; c < lds; c++) s[c] = -INFINITY;
                    if (j->k->softmax_row(lds, s, s, false)) {
                        m[r] = 0;
                        l[r] = 1;
                        continue;
                    }
                }
                float mx = -INFINITY;
                bool nan = false;
                for (int64_t c = 0; c < visible; c++) {
                    nan |= s[c] != s[c];
                    mx = s[c] > mx ? s[c] : mx;
                }
                nan_row[r] = nan_row[r] || nan;
                float m_new = mx > m[r] ? mx : m[r];
                if (m_new == -INFINITY) {        /* nothing visible yet in this row */
                    memset(s, 0, sizeof(float) * (size_t)cols);
                    continue;
                }
                float keep = expf(m[r] - m_new);
                l[r] = l[r] * keep + j->k->exp_shift_sum(visible, s, m_new);
                if (visible < cols) memset(s + visible, 0, sizeof(float) * (size_t)(cols - visible));   /* exp(-inf) */
                if (keep != 1.0f)
                    for (int64_t e = 0; e < j->Dv; e++) O[r * j->Dv + e] *= keep;
                m[r] = m_new;
            }
            /* O += P V_blk (the one block of a short sequence: O = P V) */
            if (direct)
                j->k->attn_values(rows, cols, j->Dv, S, lds, vp + j0 * j->vs[2], j->vs[2], O, j->Dv);
            else if (rows == 1)
                tf_cpu_blas_gemv(false, true, j->Dv, cols, 1.0, vp + j0 * j->vs[2], j->vs[2], S, 1, 1.0, O);
            else
                tf_cpu_blas_gemm(false, false, false, rows, j->Dv, cols, 1.0, S, cols, vp + j0 * j->vs[2], j->vs[2], 1.0,
                                 O, j->Dv);
        }
        for (int64_t r = 0; r < rows; r++) {
            float *op_ = j->out + b * j->os[0] + h * j->os[1] + (i0 + r) * j->os[2];
            for (int64_t e = 0; e < j->Dv; e++)
                op_[e * j->os[3]] = nan_row[r] ? NAN : O[r * j->Dv + e] / l[r];   /* l == 0: 0/0, NaN */
        }
    }
    tf_cpu_free(S);
    tf_cpu_free(O);
    tf_cpu_free(KT);
}

/* True if it took the op; *s then says whether every task got its scratch. */
static bool run_sdpa_fast(const tf_op *op, tf_cpu_address_fn address, tf_status *s) {
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
    *s = atomic_load(&j.out_of_memory)
             ? tf_cpu_oom("attention", sizeof(float) * ATTN_BQ * (size_t)(ATTN_BK + j.Dv))
             : TF_OK;
    return true;
}

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

/* GEMM's c copied into rows [begin, end) of the output, where beta * c
 * enters through BLAS's C. */
static void fill_c_rows(void *ctx, int64_t begin, int64_t end) {
    const blas_job *j = ctx;
    if (!j->has_c) return;
    if (j->cs_m == 0 && j->cs_n == j->es)                   /* a bias row: copied whole */
        for (int64_t i = begin; i < end; i++) memcpy(j->o + i * j->n * j->es, j->c.base, (size_t)(j->n * j->es));
    else
        for (int64_t i = begin; i < end; i++)
            for (int64_t x = 0; x < j->n; x++) {
                double v = load_f64(j->dt, j->c.base + i * j->cs_m + x * j->cs_n);
                store_f64(j->dt, j->o + (i * j->n + x) * j->es, v);
            }
}

/* Rows [begin, end) of one batch entry. */
static void blas_rows(void *ctx, int64_t begin, int64_t end) {
    const blas_job *j = ctx;
    fill_c_rows(ctx, begin, end);
    const char *a = j->a + (j->ta ? begin : begin * j->lda) * j->es;
    tf_cpu_blas_gemm(j->f64, j->ta, j->tb, end - begin, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb,
                     j->has_c ? j->beta : 0.0, j->o + begin * j->n * j->es, j->n);
}

/* ---- one GEMM over the pool ----
 * The library runs single-threaded and each of the pool's threads takes a
 * slice of the output: columns when A is the smaller operand (each thread
 * packs all of A and its share of B), else rows. The library's own
 * threads are never woken: OpenBLAS's spin with sched_yield for about
 * 0.1 s after each threaded call, and on a machine with as many cores as
 * threads they take time from the pool's next op (10% of a sentence
 * encoder's time at 8 x 40 tokens was such yielding). */
typedef struct pooled_gemm {
    bool f64, ta, tb, by_columns;
    int64_t m, n, k, lda, ldb, ldc, es;
    double alpha, beta;
    const char *a, *b;
    char *c;
} pooled_gemm;

static void pooled_slice(void *ctx, int64_t begin, int64_t end) {
    const pooled_gemm *g = ctx;
    if (g->by_columns) {
        const char *b = g->b + (g->tb ? begin * g->ldb : begin) * g->es;
        tf_cpu_blas_gemm(g->f64, g->ta, g->tb, g->m, end - begin, g->k, g->alpha, g->a, g->lda, b, g->ldb, g->beta,
                         g->c + begin * g->es, g->ldc);
    } else {
        const char *a = g->a + (g->ta ? begin : begin * g->lda) * g->es;
        tf_cpu_blas_gemm(g->f64, g->ta, g->tb, end - begin, g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb, g->beta,
                         g->c + begin * g->ldc * g->es, g->ldc);
    }
}

void tf_cpu_blas_gemm_pooled(bool is_f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                             int64_t ldc) {
    pooled_gemm g = {is_f64, trans_a, trans_b, m <= n, m, n, k, lda, ldb, ldc, is_f64 ? 8 : 4, alpha, beta, a, b, c};
    int64_t extent = g.by_columns ? n : m, threads = tf_cpu_num_threads();
    int64_t per = (extent + threads - 1) / threads;
    per = (per + 15) / 16 * 16;                  /* whole register tiles of the library's kernels */
    tf_cpu_parallel_for(extent, per, pooled_slice, &g);
}

/* One output row (m == 1, the decode step of a language model): GEMV over
 * slices of the n outputs, one slice per thread. GEMM would pack all of B
 * for a single row of A, which costs as much as the product itself. */
typedef struct gemv_job {
    const blas_job *j;
    int64_t incx;
} gemv_job;

static void gemv_cols(void *ctx, int64_t begin, int64_t end) {
    const gemv_job *g = ctx;
    const blas_job *j = g->j;
    if (j->has_c)
        for (int64_t x = begin; x < end; x++) store_f64(j->dt, j->o + x * j->es, load_f64(j->dt, j->c.base + x * j->cs_n));
    /* outputs [begin, end) are rows [begin, end) of B^T: rows of B when it is
     * stored transposed ([n, k]), else columns of B ([k, n]) */
    const char *b = j->b + (j->tb ? begin * j->ldb : begin) * j->es;
    tf_cpu_blas_gemv(j->f64, !j->tb, end - begin, j->k, j->alpha, b, j->ldb, j->a, g->incx, j->has_c ? j->beta : 0.0,
                     j->o + begin * j->es);
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

/* A strided rows x cols matrix (strides in bytes) copied row-major into dst. */
static const char *pack_rows(size_t es, const char *src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, char *dst) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) memcpy(dst + (size_t)(r * cols + c) * es, src + r * rs + c * cs, es);
    return dst;
}

/* A product a fast path took but could not get scratch for: an error, not
 * the reference loops, whose sums run in another order (an allocation that
 * fails must not change a result's bits). */
static bool out_of_scratch(tf_status *s, const char *kernel, size_t bytes) {
    *s = tf_cpu_oom(kernel, bytes);
    return true;
}

/* True if it took the op; *s then says whether it got its scratch. */
static bool run_matmul_blas(const tf_op *op, tf_cpu_address_fn address, tf_status *s) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    tf_dtype dt = O->dtype;
    if ((dt != TF_F32 && dt != TF_F64) || !tf_cpu_have_blas() || !tf_desc_is_contiguous(O)) return false;
    int nb = O->ndim - 2;
    int64_t m = O->shape[nb], n = O->shape[nb + 1], k = A->shape[nb + 1];
    if (m * n * k == 0) return false;
    blas_job j;
    memset(&j, 0, sizeof j);
    /* An operand BLAS cannot take as laid out (no unit stride: a strided
     * slice) is packed row-major per batch entry. */
    bool pack_a = !blas_layout(A, nb, m, k, &j.ta, &j.lda), pack_b = !blas_layout(B, nb, k, n, &j.tb, &j.ldb);
    size_t es = elsize(dt);
    char *packed_a = pack_a ? tf_cpu_alloc(es * (size_t)(m * k)) : NULL;
    char *packed_b = pack_b ? tf_cpu_alloc(es * (size_t)(k * n)) : NULL;
    if ((pack_a && !packed_a) || (pack_b && !packed_b)) {
        tf_cpu_free(packed_a);
        tf_cpu_free(packed_b);
        return out_of_scratch(s, "gemm", es * (size_t)(pack_a ? m * k : k * n));
    }
    if (pack_a) j.ta = false, j.lda = k;
    if (pack_b) j.tb = false, j.ldb = n;
    operand a = make_operand(A, address), b = make_operand(B, address), o = make_operand(O, address);
    j.f64 = dt == TF_F64;
    j.m = m;
    j.n = n;
    j.k = k;
    j.es = (int64_t)elsize(dt);
    j.dt = dt;
    j.alpha = op->kind != TF_OP_MATMUL ? op->params.alpha : 1.0;
    j.has_c = gemm_reads_c(op);
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
        bj.a = pack_a ? pack_rows(es, a.base + ao, a.stride[nb], a.stride[nb + 1], m, k, packed_a) : a.base + ao;
        bj.b = pack_b ? pack_rows(es, b.base + bo, b.stride[nb], b.stride[nb + 1], k, n, packed_b) : b.base + bo;
        bj.o = o.base + oo;
        bj.c = cb;
        if (m == 1) {
            gemv_job g = {&bj, j.ta ? j.lda : 1};
            tf_cpu_parallel_for(n, grain / (k + 1) + 1, gemv_cols, &g);
        } else if (single) {                     /* one big GEMM: sliced over the pool */
            if (bj.has_c) tf_cpu_parallel_for(m, ((int64_t)1 << 16) / (n + 1) + 1, fill_c_rows, &bj);
            tf_cpu_blas_gemm_pooled(j.f64, j.ta, j.tb, m, n, k, j.alpha, bj.a, j.lda, bj.b, j.ldb,
                                    bj.has_c ? j.beta : 0.0, bj.o, n);
        } else {
            int64_t rows_per_grain = grain / (n * k) + 1;
            tf_cpu_parallel_for(m, rows_per_grain, blas_rows, &bj);
        }
    } while (nb > 0 && next_index(nb, O->shape, idx));
    tf_cpu_free(packed_a);
    tf_cpu_free(packed_b);
    return true;
}

/* ---- f16/bf16 products, every form: matmul, GEMM with alpha, beta and c,
 * any transposes and strides, batched. A is widened to f32 once per batch
 * entry; a B that is a weight stored as [n, k] rows (x @ W^T, a linear
 * layer) is read as stored by the linear kernels, which widen it panel by
 * panel in L1; any other B is widened once and goes through sgemm. The
 * epilogue (alpha, beta * c) runs in f32 on each row before the one
 * rounding to the output dtype. ---- */

typedef struct half_epilogue {
    tf_dtype dt;
    int64_t n;
    float alpha, beta;
    float *c32;                          /* the products, m x n, row-major */
    operand c;                           /* GEMM's c (when beta != 0) */
    int64_t cs_m, cs_n;                  /* its strides in bytes */
    bool has_c;
    const float *c_row;                  /* c as one row for every output row (a bias), widened; or NULL */
    const tf_cpu_epilogue *epi;          /* GEMM_EPILOGUE's tail (2-D), or NULL */
    char *o;
    int64_t os_m, os_n;                  /* the output's strides in bytes */
} half_epilogue;

static inline float load_half(tf_dtype dt, const char *p) { return dt == TF_F16 ? LD_f16(p) : LD_bf16(p); }

static void half_epilogue_rows(void *ctx, int64_t begin, int64_t end) {
    const half_epilogue *e = ctx;
    const tf_fast_kernels *k = tf_fast();
    const int64_t n = e->n;
    const float alpha = e->alpha, beta = e->beta, *restrict c_row = e->c_row;   /* locals: r may not alias them */
    for (int64_t i = begin; i < end; i++) {
        float *restrict r = e->c32 + i * n;
        if (alpha != 1.0f)
            for (int64_t x = 0; x < n; x++) r[x] *= alpha;
        if (c_row)                               /* a bias row, widened once */
            for (int64_t x = 0; x < n; x++) r[x] += beta * c_row[x];
        else if (e->has_c)
            for (int64_t x = 0; x < e->n; x++) r[x] += e->beta * load_half(e->dt, e->c.base + i * e->cs_m + x * e->cs_n);
        if (e->epi) tf_cpu_epilogue_block(e->epi, r, n, i, 1, 0, n);
        char *o = e->o + i * e->os_m;
        if (k && e->os_n == 2) {
            k->narrow(e->n, r, (uint16_t *)o, e->dt == TF_BF16);
            continue;
        }
        for (int64_t x = 0; x < e->n; x++) {
            if (e->dt == TF_F16) ST_f16(o + x * e->os_n, r[x]);
            else ST_bf16(o + x * e->os_n, r[x]);
        }
    }
}

/* B as a linear layer's weight: W = B^T stored as rows of k elements. */
static bool weight_rows(const tf_tensor_desc *B, int nb, int64_t k, int64_t n, int64_t *ldw) {
    *ldw = B->strides[nb + 1];
    return tf_fast() && n > 1 && B->strides[nb] == 1 && *ldw >= k;
}

/* ---- bf16 products of many rows on AVX512-BF16 (vdpbf16ps), from the
 * operands as stored: A's rows packed into bf16 pairs once, B packed panel
 * by panel (32 columns) by the task that multiplies it, from any layout (a
 * [n, k] weight or a [k, n] matrix). Twice f32's multiply rate, and half
 * its operand bytes. ---- */

#define BF16_PANEL 32                    /* columns per panel (two vectors of 16) */
#define BF16_PANEL_ROWS 12               /* fewer rows: the dot-product kernels, which pack nothing */

typedef struct bf16_job {
    const tf_fast_kernels *k;
    int64_t m, n, kk, pairs;
    const char *a, *b;                   /* as stored */
    int64_t as_m, as_k, bs_k, bs_n;      /* strides in bytes */
    const float *a32;                    /* or f32 rows (row stride as_m in elements), rounded to bf16 */
    uint32_t *a_pairs;                   /* m x pairs */
    uint16_t *panels;                    /* one per 32 columns, 64 x pairs each */
    float *c;                            /* m x n */
} bf16_job;

static inline uint16_t bf16_at(const char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static void bf16_pack_rows(void *ctx, int64_t begin, int64_t end) {
    bf16_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        uint32_t *dst = j->a_pairs + i * j->pairs;
        if (j->a32) {                            /* rounded in vectors: pairs are consecutive bf16s */
            uint16_t *halves = (uint16_t *)dst;
            j->k->narrow(j->kk, j->a32 + i * j->as_m, halves, true);
            if (j->kk % 2) halves[j->kk] = 0;    /* an odd k: a zero pad */
            continue;
        }
        const char *row = j->a + i * j->as_m;
        if (j->as_k == 2 && j->kk % 2 == 0) {    /* bf16 rows as stored are their pairs */
            memcpy(dst, row, sizeof(uint16_t) * (size_t)j->kk);
            continue;
        }
        for (int64_t p = 0; p < j->pairs; p++) {
            uint32_t lo = bf16_at(row + 2 * p * j->as_k);
            uint32_t hi = 2 * p + 1 < j->kk ? bf16_at(row + (2 * p + 1) * j->as_k) : 0;   /* an odd k: a zero pad */
            dst[p] = lo | hi << 16;
        }
    }
}

/* Columns [j0, j0 + nc) of B into the pair layout of tf_fast_gemm_bf16_panel. */
static void tf_bf16_pack_panel(const bf16_job *j, int64_t j0, int64_t nc, uint16_t *panel) {
    /* a [n, k] weight's rows are already pairs: transposed in registers (the
     * table has this whenever it has gemm_bf16_panel) */
    if (j->bs_k == 2 && j->kk % 2 == 0) {
        j->k->bf16_pack_panel_rows((const uint16_t *)(j->b + j0 * j->bs_n), j->bs_n / 2, nc, j->pairs, panel);
        return;
    }
    memset(panel, 0, sizeof(uint16_t) * 64 * (size_t)j->pairs);
    if (j->bs_n == 2) {                          /* a [k, n] matrix's rows: two of them interleave into a pair */
        uint32_t *words = (uint32_t *)panel;
        for (int64_t p = 0; p < j->pairs; p++) {
            const char *r0 = j->b + 2 * p * j->bs_k + j0 * 2, *r1 = r0 + j->bs_k;
            bool odd = 2 * p + 1 == j->kk;       /* the last row of an odd k pairs with zeros */
            for (int64_t c = 0; c < nc; c++) words[p * 32 + c] = bf16_at(r0 + 2 * c) | (odd ? 0u : (uint32_t)bf16_at(r1 + 2 * c) << 16);
        }
        return;
    }
    for (int64_t c = 0; c < nc; c++) {
        const char *col = j->b + (j0 + c) * j->bs_n;
        uint16_t *lane = panel + (c / 16) * 32 + (c % 16) * 2;
        for (int64_t x = 0; x < j->kk; x++) lane[(x / 2) * 64 + (x % 2)] = bf16_at(col + x * j->bs_k);
    }
}

static void bf16_panels(void *ctx, int64_t begin, int64_t end) {
    const bf16_job *j = ctx;
    for (int64_t t = begin; t < end; t++) {
        int64_t j0 = t * BF16_PANEL, nc = j->n - j0 < BF16_PANEL ? j->n - j0 : BF16_PANEL;
        uint16_t *panel = j->panels + t * 64 * j->pairs;
        tf_bf16_pack_panel(j, j0, nc, panel);
        j->k->gemm_bf16_panel(j->m, nc, j->pairs, j->a_pairs, j->pairs, panel, j->c + j0, j->n);
    }
}

/* Scratch of one bf16 product, in 32-bit words: A's pairs and B's panels. */
static size_t bf16_scratch_words(int64_t m, int64_t n, int64_t kk) {
    int64_t pairs = (kk + 1) / 2, panels = (n + BF16_PANEL - 1) / BF16_PANEL;
    return (size_t)(m * pairs + panels * 32 * pairs);
}

/* c (m x n f32) = A @ B for one batch entry, in scratch of bf16_scratch_words. */
static void bf16_product(const tf_fast_kernels *k, int64_t m, int64_t n, int64_t kk, const char *a, int64_t as_m,
                         int64_t as_k, const char *b, int64_t bs_k, int64_t bs_n, uint32_t *scratch, float *c) {
    int64_t pairs = (kk + 1) / 2;
    bf16_job j = {k, m, n, kk, pairs, a, b, as_m, as_k, bs_k, bs_n, NULL, scratch, (uint16_t *)(scratch + m * pairs), c};
    tf_cpu_parallel_for(m, 4096 / (kk + 1) + 1, bf16_pack_rows, &j);
    tf_cpu_parallel_for((n + BF16_PANEL - 1) / BF16_PANEL, 1, bf16_panels, &j);
}

/* True if it took the op; *s then says whether it got its scratch. */
static bool run_matmul_half(const tf_op *op, tf_cpu_address_fn address, tf_status *s) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    tf_dtype dt = O->dtype;
    if ((dt != TF_F16 && dt != TF_BF16) || (op->kind == TF_OP_GEMM_EPILOGUE && O->ndim != 2)) return false;
    int nb = O->ndim - 2;
    int64_t m = O->shape[nb], n = O->shape[nb + 1], k = A->shape[nb + 1], ldw;
    if (m * n * k == 0) return false;            /* the reference writes beta * c or zeros */
    const tf_fast_kernels *fk = tf_fast();
    bool dp = dt == TF_BF16 && fk && fk->gemm_bf16_panel && m >= BF16_PANEL_ROWS;
    bool rows = !dp && weight_rows(B, nb, k, n, &ldw);
    size_t es = sizeof(float);
    float *a32 = tf_cpu_alloc(dp ? sizeof(uint32_t) * bf16_scratch_words(m, n, k) : es * (size_t)(m * k));
    float *c32 = tf_cpu_alloc(es * (size_t)(m * n)), *b32 = rows || dp ? NULL : tf_cpu_alloc(es * (size_t)(k * n));
    if (!a32 || !c32 || (!rows && !dp && !b32)) {
        tf_cpu_free(a32);
        tf_cpu_free(b32);
        tf_cpu_free(c32);
        return out_of_scratch(s, "half-precision gemm", es * (size_t)(m * k + m * n + k * n));
    }
    operand a = make_operand(A, address), b = make_operand(B, address), o = make_operand(O, address);
    half_epilogue e = {dt, n, 1.0f, 0.0f, c32, {0}, 0, 0, false, NULL, NULL, NULL, o.stride[nb], o.stride[nb + 1]};
    tf_cpu_epilogue epi;
    if (op->kind == TF_OP_GEMM_EPILOGUE) {
        epi = tf_cpu_epilogue_of(op, address);
        e.epi = &epi;
    }
    if (op->kind != TF_OP_MATMUL) {
        e.alpha = (float)op->params.alpha;
        e.has_c = gemm_reads_c(op);
        e.beta = (float)op->params.beta;
    }
    operand c = e.has_c ? make_operand(&op->inputs[2], address) : o;
    e.cs_m = c.stride[nb];
    e.cs_n = c.stride[nb + 1];
    float *c_row = NULL;
    bool one_row = e.has_c && e.cs_m == 0;
    for (int d = 0; d < nb; d++) one_row &= c.stride[d] == 0 || O->shape[d] == 1;
    if (one_row && (c_row = tf_cpu_alloc(es * (size_t)n))) {   /* without it, each row reads c as stored */
        widen_job wc = {dt, c.base, 0, e.cs_n, n, c_row};
        widen_rows(&wc, 0, 1);
        e.c_row = c_row;
    }
    int64_t idx[TF_MAX_DIMS] = {0};
    do {
        int64_t ao = 0, bo = 0, oo = 0, co = 0;
        for (int d = 0; d < nb; d++) {
            ao += idx[d] * a.stride[d];
            bo += idx[d] * b.stride[d];
            oo += idx[d] * o.stride[d];
            co += idx[d] * c.stride[d];
        }
        if (dp) {
            bf16_product(fk, m, n, k, a.base + ao, a.stride[nb], a.stride[nb + 1], b.base + bo, b.stride[nb],
                         b.stride[nb + 1], (uint32_t *)a32, c32);
            e.o = o.base + oo;
            e.c.base = c.base + co;
            tf_cpu_parallel_for(m, 4096 / (n + 1) + 1, half_epilogue_rows, &e);
            continue;
        }
        widen_job wa = {dt, a.base + ao, a.stride[nb], a.stride[nb + 1], k, a32};
        tf_cpu_parallel_for(m, 4096 / (k + 1) + 1, widen_rows, &wa);
        if (rows) {
            tf_cpu_run_linear(tf_fast(), m, n, k, a32, k, b.base + bo, ldw, dt == TF_BF16 ? TF_FAST_W_BF16 : TF_FAST_W_F16,
                              NULL, NULL, c32);
        } else {
            widen_job wb = {dt, b.base + bo, b.stride[nb], b.stride[nb + 1], n, b32};
            tf_cpu_parallel_for(k, 4096 / (n + 1) + 1, widen_rows, &wb);
            tf_cpu_blas_gemm_pooled(false, false, false, m, n, k, 1.0, a32, k, b32, n, 0.0, c32, n);
        }
        e.o = o.base + oo;
        e.c.base = c.base + co;
        tf_cpu_parallel_for(m, 4096 / (n + 1) + 1, half_epilogue_rows, &e);
    } while (nb > 0 && next_index(nb, O->shape, idx));
    tf_cpu_free(a32);
    tf_cpu_free(b32);
    tf_cpu_free(c32);
    tf_cpu_free(c_row);
    return true;
}

bool tf_cpu_bf16_linear(int64_t m, int64_t n, int64_t kk, const float *x, int64_t lda, const uint16_t *w, int64_t ldw,
                        float *c, tf_status *s) {
    const tf_fast_kernels *k = tf_fast();
    if (!k || !k->gemm_bf16_panel || m < BF16_PANEL_ROWS || kk < 1) return false;
    uint32_t *scratch = tf_cpu_alloc(sizeof(uint32_t) * bf16_scratch_words(m, n, kk));
    if (!scratch) return out_of_scratch(s, "bf16 linear", sizeof(uint32_t) * bf16_scratch_words(m, n, kk));
    *s = TF_OK;
    int64_t pairs = (kk + 1) / 2;
    bf16_job j = {k, m, n, kk, pairs, NULL, (const char *)w, lda, 2, 2, 2 * ldw, x, scratch,
                  (uint16_t *)(scratch + m * pairs), c};
    tf_cpu_parallel_for(m, 4096 / (kk + 1) + 1, bf16_pack_rows, &j);
    tf_cpu_parallel_for((n + BF16_PANEL - 1) / BF16_PANEL, 1, bf16_panels, &j);
    tf_cpu_free(scratch);
    return true;
}

/* GEMM_EPILOGUE: f16/bf16 finish each row before rounding it; f32 runs
 * the GEMM through BLAS and finishes the output in one pass after it. */
static bool run_gemm_epilogue(const tf_op *op, tf_cpu_address_fn address, tf_status *s) {
    tf_dtype dt = op->output.dtype;
    if (op->output.ndim != 2) return false;
    if (dt == TF_F16 || dt == TF_BF16) return run_matmul_half(op, address, s);
    if (dt != TF_F32) return false;
    tf_op gemm = *op;
    gemm.kind = TF_OP_GEMM;
    gemm.n_inputs -= (op->params.flags & TF_GEMM_RESIDUAL) != 0;
    if (!run_matmul_blas(&gemm, address, s)) return false;
    if (*s != TF_OK) return true;
    tf_cpu_epilogue epi = tf_cpu_epilogue_of(op, address);
    tf_cpu_epilogue_output(&epi, &op->output, address);
    return true;
}

static tf_status blas_matmul(const tf_op *op, tf_cpu_address_fn address) {
    tf_op folded;
    if (fold_broadcast_batch(op, &folded)) op = &folded;
    tf_status s = TF_OK;
    if (op->kind == TF_OP_GEMM_EPILOGUE) return run_gemm_epilogue(op, address, &s) ? s : run_below(op, address);
    if (run_matmul_blas(op, address, &s) || run_matmul_half(op, address, &s)) return s;
    return run_below(op, address);
}

static tf_status blas_sdpa(const tf_op *op, tf_cpu_address_fn address) {
    tf_status s = TF_OK;
    return run_sdpa_fast(op, address, &s) ? s : run_below(op, address);
}

void tf_cpu_blas_install(tf_cpu_table *t) {
    below = *t;
    static const tf_dtype floats[] = {TF_F32, TF_F64, TF_F16, TF_BF16};
    for (size_t d = 0; d < sizeof floats / sizeof *floats; d++) {
        t->fn[TF_OP_MATMUL][floats[d]] = blas_matmul;
        t->fn[TF_OP_GEMM][floats[d]] = blas_matmul;
        t->fn[TF_OP_GEMM_EPILOGUE][floats[d]] = blas_matmul;
    }
    if (tf_fast()) t->fn[TF_OP_SDPA][TF_F32] = blas_sdpa;     /* its online softmax uses the SIMD exp */
}
