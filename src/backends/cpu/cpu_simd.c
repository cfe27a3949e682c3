/* The SIMD layer: entries of the kernel table that the fast kernels
 * (fast_kernels.inc, chosen by CPUID) do better, installed over whatever
 * the table held (tf_cpu_simd_install). Each override takes the layouts its
 * kernel fits and hands every other case to the entry it replaced. */
#include "cpu_blas.h"
#include "cpu_common.h"
#include "formulas.h"

static tf_cpu_table below;              /* the table as it was before this layer */

static tf_status run_below(const tf_op *op, tf_cpu_address_fn address) {
    return below.fn[op->kind][tf_cpu_table_dtype(op)](op, address);
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

/* The op itself when the fast binary kernel has it (the binary formulas
 * with a SIMD body; they switch on the op's value), else -1. */
static int fast_binary_code(tf_op_kind kind) {
#define FAST_BINARY_CASE(E, NAME) case TF_OP_##E:
    switch (kind) {
    TF_FORMULA_SIMD_BINARY(FAST_BINARY_CASE)
        return (int)kind;
    default: return -1;
    }
#undef FAST_BINARY_CASE
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

static bool binary_contiguous(const tf_op *op, tf_cpu_address_fn address) {
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

/* A broadcast row (bias add, per-row scale) stays vectorized when its
 * innermost strides are unit or zero; other rows take the reference loop. */
typedef struct binary_ctx {
    binary_loop loop;
    const tf_fast_kernels *fast;
    int fast_op;
} binary_ctx;

static void binary_row(const void *ctx, int64_t n, char **p, const int64_t *s) {
    const binary_ctx *c = ctx;
    if (s[0] == 4 && (s[1] == 4 || s[1] == 0) && (s[2] == 4 || s[2] == 0)) {
        c->fast->binary(c->fast_op, n, (float *)p[0], (const float *)p[1], s[1] != 0, (const float *)p[2], s[2] != 0);
        return;
    }
    c->loop(n, p, s);
}

static tf_status simd_binary(const tf_op *op, tf_cpu_address_fn address) {
    if (binary_contiguous(op, address)) return TF_OK;
    int code = fast_binary_code(op->kind);
    if (code < 0 || op->output.dtype != TF_F32) return run_below(op, address);
    operand ops[3] = {make_operand(&op->output, address), make_operand(&op->inputs[0], address),
                      make_operand(&op->inputs[1], address)};
    binary_ctx ctx = {tf_cpu_binary_loop(op->kind, TF_F32), tf_fast(), code};
    for_each_row_parallel(op->output.ndim, op->output.shape, 3, ops, binary_row, &ctx);
    return TF_OK;
}

/* ---- row ops in f32: a line in one pass (a row with NaN: the reference);
 * ADD_NORM adds the residual into the output line, then norms it there ---- */

static void fast_row_lines(void *ctx, int64_t begin, int64_t end) {
    const row_job *j = ctx;
    tf_op_kind kind = j->op->kind;
    for (int64_t line = begin; line < end; line++) {
        const char *xp;
        char *op_;
        row_line_at(j, line, &xp, &op_);
        const float *w = j->has_w ? (const float *)j->w.base : NULL, *b = j->has_b ? (const float *)j->b.base : NULL;
        if (kind == TF_OP_SOFTMAX || kind == TF_OP_LOG_SOFTMAX) {
            if (j->k->softmax_row(j->len, (float *)op_, (const float *)xp, kind == TF_OP_LOG_SOFTMAX)) continue;
            tf_cpu_row_reference(j, line, xp, op_);
            continue;
        }
        if (j->has_r) {                  /* the sum into the output line, still in cache for the norm */
            const float *rp = (const float *)row_residual_at(j, line);
            j->k->binary(j->add_code, j->len, (float *)op_, (const float *)xp, true, rp, j->rs != 0);
            xp = op_;
        }
        j->k->norm_row(j->len, (float *)op_, (const float *)xp, w, b, (float)j->op->params.eps, j->center);
    }
}

static tf_status simd_row(const tf_op *op, tf_cpu_address_fn address) {
    row_job j;
    int64_t lines;
    if (!tf_cpu_row_setup(op, address, &j, &lines)) return TF_OK;
    j.k = tf_fast();
    j.add_code = fast_binary_code(TF_OP_ADD);
    bool fits = j.dt == TF_F32 && j.xs == 4 && j.os == 4 && (!j.has_w || j.w.stride[0] == 4) &&
                (!j.has_b || j.b.stride[0] == 4) && (!j.has_r || j.rs == 4 || j.rs == 0);
    if (!fits) return run_below(op, address);
    tf_cpu_parallel_for(lines, ELEMENT_GRAIN / j.len + 1, fast_row_lines, &j);
    return TF_OK;
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

/* A GEMM that is a plain product (alpha 1, no c) runs as a matmul: a
 * linear layer's x @ W^T at decode time is the common case. */
static bool plain_product(const tf_op *op) {
    return op->kind == TF_OP_MATMUL ||
           (op->kind == TF_OP_GEMM && op->params.alpha == 1.0 && (op->n_inputs < 3 || op->params.beta == 0.0));
}

static bool run_matmul_skinny(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    const tf_fast_kernels *k = tf_fast();
    if (!k || !plain_product(op) || O->dtype != TF_F32 || O->ndim != 2 || !tf_desc_is_contiguous(O)) return false;
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
        float *bt = tf_cpu_alloc(sizeof(float) * (size_t)(n * kk));
        if (!bt) return false;
        for (int64_t x = 0; x < n; x++)
            for (int64_t y = 0; y < kk; y++) bt[x * kk + y] = j.b[y * B->strides[0] + x * B->strides[1]];
        j.bt = bt;
        tf_cpu_parallel_for(m, (1 << 18) / (kk * n + 1) + 1, skinny_n_chunk, &j);
        tf_cpu_free(bt);
        return true;
    }
    return false;
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
    if (!k || (dt != TF_F16 && dt != TF_BF16) || !plain_product(op) || O->ndim != 2) return false;
    int64_t m = O->shape[0], n = O->shape[1], kk = A->shape[1];
    bool rows = B->strides[0] == 1 && n > 1, row_major = B->strides[1] == 1;
    if (m > SKINNY || m * n == 0 || kk < 64 || !(rows || row_major)) return false;
    skinny_half_job j = {k, m, n, kk, A->strides[0], rows ? B->strides[1] : B->strides[0], NULL,
                         (const uint16_t *)(address(A->buffer) + A->offset),
                         (const uint16_t *)(address(B->buffer) + B->offset), dt == TF_BF16, rows, false, NULL};
    j.dp = rows && j.bf16 && k->gemm_rows_bf16_dp && A->strides[1] == 1;
    float *a32 = j.dp ? NULL : tf_cpu_alloc(sizeof(float) * (size_t)(m * kk)), *c = tf_cpu_alloc(sizeof(float) * (size_t)(m * n));
    if ((!j.dp && !a32) || !c) {
        tf_cpu_free(a32);
        tf_cpu_free(c);
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
    tf_cpu_free(a32);
    tf_cpu_free(c);
    return true;
}

/* ---- a linear layer, x @ W^T (+ a bias row): our kernels read W as
 * stored (dot products, for a few rows) or copy it panel by panel into L1
 * (outer products, for more), per call. The library's sgemm is not used:
 * it repacks the whole weight and the activations on every call, as costly
 * as the product for a few rows, and for many rows it is no faster than the
 * panel kernel (measured on Zen 4, AVX2: 320 x 384 x 384 in 1.02 against
 * 1.04 ms on one thread, 0.52 against 0.55 ms on two). ---- */

#define LINEAR_COLUMNS 96                /* columns per task (tiles of 2 or 3): their W rows stay in L2 */
#define LINEAR_ROWS 384                  /* rows per task of the panel kernel: their k block stays in L2 */
/* Columns per task of the panel kernel (two panels): more tasks than 96
 * gives let a thread that the machine slowed hand work to the other
 * (MiniLM 8 x 40: 58.5 against 61.6 ms, median of six runs' best passes;
 * 16 columns was no better). Each task packs its own panels, so smaller
 * tasks pack nothing twice. */
#define LINEAR_PANEL_COLUMNS 32
/* Rows from which the panel kernel beats the dot products: each call packs
 * all of W, which costs about as much as multiplying it by a few dozen rows
 * (MiniLM f32 on Zen 4, 2 threads, a pass of one sentence: 16 tokens 2.9 ms
 * with dot products against 4.1 with panels, 32: 4.6 / 5.2, 48: 6.2 / 6.3,
 * 64: 7.8 / 7.6, 96: 11.4 / 9.8). */
#define LINEAR_PACKED_ROWS 48

typedef struct linear_job {
    const tf_fast_kernels *k;
    int64_t m, n, kk, lda, ldw, columns, column_blocks;
    int wkind;
    const float *a, *bias;
    const void *w;
    const tf_cpu_epilogue *epi;          /* or NULL */
    float *c;
} linear_job;

static void linear_dot_chunk(void *ctx, int64_t begin, int64_t end) {
    const linear_job *j = ctx;
    int64_t j0 = begin * j->columns, j1 = end * j->columns < j->n ? end * j->columns : j->n;
    j->k->linear(j->m, j0, j1, j->kk, j->a, j->lda, j->w, j->ldw, j->wkind, j->bias, j->c, j->n);
    if (j->epi) tf_cpu_epilogue_block(j->epi, j->c + j0, j->n, 0, j->m, j0, j1 - j0);
}

/* Tasks of the panel kernel: row block (task / column_blocks) by column
 * block, row blocks outer so a thread's consecutive tasks share rows. */
static void linear_packed_chunk(void *ctx, int64_t begin, int64_t end) {
    const linear_job *j = ctx;
    while (begin < end) {
        int64_t rb = begin / j->column_blocks, cb = begin % j->column_blocks;
        int64_t last = end < (rb + 1) * j->column_blocks ? end : (rb + 1) * j->column_blocks;
        int64_t i0 = rb * LINEAR_ROWS, rows = j->m - i0 < LINEAR_ROWS ? j->m - i0 : LINEAR_ROWS;
        int64_t c0 = cb * j->columns, c1 = (last - rb * j->column_blocks) * j->columns;
        c1 = c1 < j->n ? c1 : j->n;
        j->k->linear_packed(rows, c0, c1, j->kk, j->a + i0 * j->lda, j->lda, j->w, j->ldw, j->wkind, j->bias,
                            j->c + i0 * j->n, j->n);
        if (j->epi) tf_cpu_epilogue_block(j->epi, j->c + i0 * j->n + c0, j->n, i0, rows, c0, c1 - c0);
        begin = last;
    }
}

void tf_cpu_run_linear(const tf_fast_kernels *k, int64_t m, int64_t n, int64_t kk, const float *a, int64_t lda,
                       const void *w, int64_t ldw, int wkind, const float *bias, const tf_cpu_epilogue *epi,
                       float *c) {
    bool packed = m >= LINEAR_PACKED_ROWS;
    int64_t columns = packed ? LINEAR_PANEL_COLUMNS : LINEAR_COLUMNS;
    int64_t column_blocks = (n + columns - 1) / columns;
    linear_job j = {k, m, n, kk, lda, ldw, columns, column_blocks, wkind, a, bias, w, epi, c};
    int64_t grain = (1 << 18) / (m * kk * columns + 1) + 1;
    if (!packed) {
        tf_cpu_parallel_for(column_blocks, grain, linear_dot_chunk, &j);
        return;
    }
    int64_t row_blocks = (m + LINEAR_ROWS - 1) / LINEAR_ROWS;
    tf_cpu_parallel_for(row_blocks * column_blocks, grain, linear_packed_chunk, &j);
}

/* The bias of a GEMM that is x @ W^T + b: c broadcast along the rows, beta 1. */
static const float *bias_row(const tf_op *op, tf_cpu_address_fn address, bool *ok) {
    *ok = true;
    if (!gemm_reads_c(op)) return NULL;
    const tf_tensor_desc *C = &op->inputs[2];
    *ok = op->params.beta == 1.0 && C->dtype == TF_F32 && C->ndim == 2 && C->strides[0] == 0 &&
          (C->strides[1] == 1 || C->shape[1] == 1);
    return *ok ? (const float *)(address(C->buffer) + C->offset) : NULL;
}

static bool run_linear(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *A = &op->inputs[0], *B = &op->inputs[1], *O = &op->output;
    const tf_fast_kernels *k = tf_fast();
    if (!k || O->dtype != TF_F32 || A->dtype != TF_F32 || B->dtype != TF_F32 || O->ndim != 2 ||
        !tf_desc_is_contiguous(O) || (op->kind != TF_OP_MATMUL && op->params.alpha != 1.0))
        return false;
    int64_t m = O->shape[0], n = O->shape[1], kk = A->shape[1];
    if (m * n == 0 || kk < 16 || A->strides[1] != 1 || B->strides[0] != 1 || n < 2) return false;
    bool ok;
    const float *bias = bias_row(op, address, &ok);
    if (!ok) return false;
    if (bias && op->inputs[2].shape[1] == 1 && n > 1) return false;   /* one value for every column: not a bias row */
    tf_cpu_epilogue epi;
    if (op->kind == TF_OP_GEMM_EPILOGUE) epi = tf_cpu_epilogue_of(op, address);
    tf_cpu_run_linear(k, m, n, kk, (const float *)(address(A->buffer) + A->offset), A->strides[0],
                      address(B->buffer) + B->offset, B->strides[1], TF_FAST_W_F32, bias,
                      op->kind == TF_OP_GEMM_EPILOGUE ? &epi : NULL, (float *)(address(O->buffer) + O->offset));
    return true;
}

/* ---- GEMM_EPILOGUE's tail: activation, then residual, on f32 values ---- */

tf_cpu_epilogue tf_cpu_epilogue_of(const tf_op *op, tf_cpu_address_fn address) {
    tf_cpu_epilogue e = {NULL, 0, op->params.activation, (op->params.flags & TF_GEMM_RESIDUAL) != 0, op->output.dtype,
                         NULL, 0, 0};
    if (op->kind == TF_OP_QMATMUL_EPILOGUE && (op->params.flags & TF_QMM_BIAS)) {
        operand b = make_operand(&op->inputs[2], address);   /* f32 [M, N], row stride 0 */
        e.bias = b.base;
        e.bias_s = b.stride[1];
    }
    if (e.has_residual) {
        const tf_tensor_desc *R = &op->inputs[op->n_inputs - 1];
        operand r = make_operand(R, address);
        e.dt = R->dtype;
        e.r = r.base;
        e.rs_m = r.stride[0];
        e.rs_n = r.stride[1];
    }
    return e;
}

static void add_residual(const tf_cpu_epilogue *e, float *row, int64_t i, int64_t j0, int64_t cols) {
    const char *rp = e->r + i * e->rs_m + j0 * e->rs_n;
    if (e->dt == TF_F32 && e->rs_n == 4) {
        const float *rf = (const float *)rp;
        for (int64_t x = 0; x < cols; x++) row[x] += rf[x];
        return;
    }
    if (e->dt == TF_F32) {
        for (int64_t x = 0; x < cols; x++) row[x] += *(const float *)(rp + x * e->rs_n);
        return;
    }
    float block[HALF_BLOCK];                 /* f16/bf16: widened a block at a time */
    for (int64_t x0 = 0; x0 < cols; x0 += HALF_BLOCK) {
        int64_t w = cols - x0 < HALF_BLOCK ? cols - x0 : HALF_BLOCK;
        widen_job wr = {e->dt, rp + x0 * e->rs_n, 0, e->rs_n, w, block};
        widen_rows(&wr, 0, 1);
        for (int64_t x = 0; x < w; x++) row[x0 + x] += block[x];
    }
}

void tf_cpu_epilogue_block(const tf_cpu_epilogue *e, float *c, int64_t ldc, int64_t i0, int64_t rows, int64_t j0,
                           int64_t cols) {
    const tf_fast_kernels *k = tf_fast();
    for (int64_t r = 0; r < rows; r++) {
        float *row = c + r * ldc;
        if (e->bias) {
            const char *bp = e->bias + j0 * e->bias_s;
            if (e->bias_s == 4 && k)
                k->binary(TF_OP_ADD, cols, row, row, 1, (const float *)bp, 1);
            else
                for (int64_t x = 0; x < cols; x++) row[x] += *(const float *)(bp + x * e->bias_s);
        }
        if (e->activation != (int32_t)TF_NO_ACTIVATION && !(k && k->unary(e->activation, cols, row, row, 0, 0, 0)))
            for (int64_t x = 0; x < cols; x++) row[x] = tf_cpu_unary_f32(e->activation, row[x]);
        if (e->has_residual) add_residual(e, row, i0 + r, j0, cols);
    }
}

typedef struct epilogue_job {
    const tf_cpu_epilogue *e;
    tf_dtype dt;
    char *o;
    int64_t os_m, os_n, n;               /* strides in bytes */
} epilogue_job;

static void epilogue_rows(void *ctx, int64_t begin, int64_t end) {
    const epilogue_job *j = ctx;
    float block[HALF_BLOCK];
    for (int64_t i = begin; i < end; i++)
        for (int64_t x0 = 0; x0 < j->n; x0 += HALF_BLOCK) {
            int64_t w = j->n - x0 < HALF_BLOCK ? j->n - x0 : HALF_BLOCK;
            char *o = j->o + i * j->os_m + x0 * j->os_n;
            if (j->dt == TF_F32 && j->os_n == 4) {            /* in place */
                tf_cpu_epilogue_block(j->e, (float *)o, 0, i, 1, x0, w);
                continue;
            }
            widen_job wo = {j->dt, o, 0, j->os_n, w, block};
            if (j->dt == TF_F32) for (int64_t x = 0; x < w; x++) block[x] = *(float *)(o + x * j->os_n);
            else widen_rows(&wo, 0, 1);
            tf_cpu_epilogue_block(j->e, block, 0, i, 1, x0, w);
            if (j->dt == TF_F32) for (int64_t x = 0; x < w; x++) *(float *)(o + x * j->os_n) = block[x];
            else narrow_rows(&wo, 0, 1);
        }
}

void tf_cpu_epilogue_output(const tf_cpu_epilogue *e, const tf_tensor_desc *O, tf_cpu_address_fn address) {
    operand o = make_operand(O, address);
    epilogue_job j = {e, O->dtype, o.base, o.stride[0], o.stride[1], O->shape[1]};
    tf_cpu_parallel_for(O->shape[0], ELEMENT_GRAIN / (O->shape[1] + 1) + 1, epilogue_rows, &j);
}

static tf_status simd_matmul(const tf_op *op, tf_cpu_address_fn address) {
    tf_op folded;
    if (fold_broadcast_batch(op, &folded)) op = &folded;
    if (op->kind == TF_OP_GEMM_EPILOGUE)         /* the linear kernel finishes its tiles; else the BLAS layer */
        return run_linear(op, address) ? TF_OK : run_below(op, address);
    if (run_linear(op, address) || run_matmul_skinny(op, address) || run_matmul_skinny_half(op, address)) return TF_OK;
    return run_below(op, address);
}

/* ---- gelu: the vector erf (the reference calls libm's erff per element) ---- */

/* ---- unary formulas with a SIMD body, contiguous operands ---- */

typedef struct unary_job {
    const tf_fast_kernels *k;
    const tf_op *op;
    void *o;
    const void *x;
} unary_job;

static void unary_chunk(void *ctx, int64_t begin, int64_t end) {
    const unary_job *j = ctx;
    const tf_op_params *p = &j->op->params;
    float alpha = (float)p->alpha, lo = (float)p->min_value, hi = (float)p->max_value;
    tf_dtype dt = j->op->output.dtype;
    if (dt == TF_F32) {
        j->k->unary(j->op->kind, end - begin, (float *)j->o + begin, (const float *)j->x + begin, alpha, lo, hi);
        return;
    }
    float block[HALF_BLOCK];                 /* f16/bf16: widened, computed in f32, rounded once */
    for (int64_t i = begin; i < end; i += HALF_BLOCK) {
        int64_t n = end - i < HALF_BLOCK ? end - i : HALF_BLOCK;
        j->k->widen(n, (const uint16_t *)j->x + i, block, dt == TF_BF16);
        j->k->unary(j->op->kind, n, block, block, alpha, lo, hi);
        j->k->narrow(n, block, (uint16_t *)j->o + i, dt == TF_BF16);
    }
}

static tf_status simd_unary(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *O = &op->output;
    if (X->dtype != O->dtype || !tf_desc_is_contiguous(X) || !tf_desc_is_contiguous(O)) return run_below(op, address);
    unary_job j = {tf_fast(), op, address(O->buffer) + O->offset, address(X->buffer) + X->offset};
    tf_cpu_parallel_for(tf_desc_numel(O), ELEMENT_GRAIN, unary_chunk, &j);
    return TF_OK;
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

static tf_status simd_reduce(const tf_op *op, tf_cpu_address_fn address) {
    return run_reduce_fast(op, address) ? TF_OK : run_below(op, address);
}

void tf_cpu_simd_install(tf_cpu_table *t) {
    below = *t;
    static const tf_dtype floats[] = {TF_F32, TF_F16, TF_BF16};
#define INSTALL(E, NAME, FN)                                                                         \
    for (size_t d = 0; d < sizeof floats / sizeof *floats; d++) t->fn[TF_OP_##E][floats[d]] = FN;
#define INSTALL_BINARY(E, NAME) INSTALL(E, NAME, simd_binary)
#define INSTALL_UNARY(E, NAME) INSTALL(E, NAME, simd_unary)
    TF_FORMULA_SIMD_BINARY(INSTALL_BINARY)
    TF_FORMULA_SIMD_UNARY(INSTALL_UNARY)
#undef INSTALL_UNARY
#undef INSTALL_BINARY
#undef INSTALL
    static const tf_op_kind rows[] = {TF_OP_SOFTMAX,   TF_OP_LOG_SOFTMAX,  TF_OP_RMSNORM,
                                      TF_OP_LAYERNORM, TF_OP_ADD_RMSNORM, TF_OP_ADD_LAYERNORM};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) t->fn[rows[i]][TF_F32] = simd_row;
    for (size_t d = 0; d < sizeof floats / sizeof *floats; d++)
        t->fn[TF_OP_MATMUL][floats[d]] = t->fn[TF_OP_GEMM][floats[d]] = t->fn[TF_OP_GEMM_EPILOGUE][floats[d]] =
            simd_matmul;
    t->fn[TF_OP_SUM][TF_F32] = t->fn[TF_OP_MEAN][TF_F32] = simd_reduce;
}
