/* Attention's gradients in f32 (sdpa_grad_q, sdpa_grad_kv; f16 and bf16
 * through f32 copies), over the reference loops (tf_cpu_attn_grad_install,
 * with the SIMD table).
 *
 * FlashAttention's backward, on a CPU: the scores are not kept from the
 * forward but recomputed for a block of up to 64 queries against the keys
 * it sees, in the SIMD table's head products (tf_fast_kernels.attn_scores,
 * attn_values): P = softmax(scale Q K^T), dP = dO V^T,
 * dS = P (dP - rowsum(P dP)). sdpa_grad_q's task is a query block, whose dQ
 * is scale dS K; sdpa_grad_kv's task is a kv head, summing dV += P^T dO and
 * dK += scale dS^T Q over its query heads' blocks. Nothing leaves a task's
 * scratch but its rows of the output, so the tasks run in parallel. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "fast_kernels.h"
#include "threadpool.h"

#define GRAD_BQ 64                       /* queries per block */

static tf_cpu_table below;               /* the table as it was before this layer */

static tf_status run_below(const tf_op *op, tf_cpu_address_fn address) {
    return below.fn[op->kind][tf_cpu_table_dtype(op)](op, address);
}

typedef struct grad_job {
    const tf_op *op;
    const tf_fast_kernels *k;
    const float *q, *kk, *v, *g;         /* g: dO */
    float *out;
    int64_t B, Hq, Lq, D, Hkv, Lk, Dv, group, qblocks, ldk;
    int64_t qs[4], ks[4], vs[4], gs[4], os[4];
    float scale;
    bool causal;
    _Atomic bool out_of_memory;
} grad_job;

/* A task's scratch, floats: the keys and values transposed and padded to
 * whole vectors (kt [D, ldk], vt [Dv, ldk]), a block's P and dS [BQ, ldk],
 * their transposes [ldk, BQ], one product [max(ldk, BQ), max(D, Dv)], and
 * sdpa_grad_kv's sums [Lk, D + Dv]. */
typedef struct grad_scratch {
    float *kt, *vt, *p, *ds, *pt, *prod, *acc;
    void *block;
    size_t bytes;
} grad_scratch;

static bool scratch_take(const grad_job *j, bool with_acc, grad_scratch *s) {
    const size_t ldk = (size_t)j->ldk, wide = (size_t)(j->D > j->Dv ? j->D : j->Dv);
    const size_t tall = ldk > GRAD_BQ ? ldk : GRAD_BQ;
    const size_t sizes[7] = {(size_t)j->D * ldk, (size_t)j->Dv * ldk, GRAD_BQ * ldk, GRAD_BQ * ldk,
                             ldk * GRAD_BQ, tall * wide, with_acc ? (size_t)j->Lk * (size_t)(j->D + j->Dv) : 0};
    size_t total = 0;
    for (int i = 0; i < 7; i++) total += (sizes[i] + 15) / 16 * 16;
    s->block = tf_cpu_scratch_take(sizeof(float) * (total ? total : 1), &s->bytes);
    if (!s->block) return false;
    float *at = s->block, **parts[7] = {&s->kt, &s->vt, &s->p, &s->ds, &s->pt, &s->prod, &s->acc};
    for (int i = 0; i < 7; i++) {
        *parts[i] = at;
        at += (sizes[i] + 15) / 16 * 16;
    }
    return true;
}

/* kt [rows, ldk] = src^T for src [Lk, rows] (row stride ld), zeros past Lk. */
static void transpose_padded(const float *src, int64_t ld, int64_t Lk, int64_t rows, int64_t ldk, float *kt) {
    for (int64_t e = 0; e < rows; e++) {
        float *row = kt + e * ldk;
        for (int64_t c = 0; c < Lk; c++) row[c] = src[c * ld + e];
        for (int64_t c = Lk; c < ldk; c++) row[c] = 0;
    }
}

/* A row's softmax in place over n entries where the SIMD one declines (a
 * NaN, or nothing visible): NaN propagates, as the forward's does. */
static void softmax_row_scalar(int64_t n, float *s) {
    float mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < n; c++)
        if (s[c] != s[c] || s[c] > mx) mx = mx != mx ? mx : s[c];
    for (int64_t c = 0; c < n; c++) sum += (s[c] = expf(s[c] - mx));
    for (int64_t c = 0; c < n; c++) s[c] /= sum;
}

/* P and dS [rows, ldk] of the query block at i0 of head h: *cols is how
 * many keys the block sees (the rest of each row is zero). */
static void block_probs(const grad_job *j, const grad_scratch *s, int64_t b, int64_t h, int64_t i0, int64_t rows,
                        int64_t *cols_out) {
    const float *qp = j->q + b * j->qs[0] + h * j->qs[1] + i0 * j->qs[2];
    const float *gp = j->g + b * j->gs[0] + h * j->gs[1] + i0 * j->gs[2];
    int64_t cols = j->causal ? j->op->params.q_offset + i0 + rows : j->Lk;
    cols = cols < 0 ? 0 : cols > j->Lk ? j->Lk : cols;
    *cols_out = cols;
    if (!cols) return;
    const int64_t ld = j->ldk, lanes = j->k->lanes, padded = (cols + lanes - 1) / lanes * lanes;
    j->k->attn_scores(rows, cols, j->D, qp, j->qs[2], s->kt, ld, j->scale, s->p, ld);
    j->k->attn_scores(rows, cols, j->Dv, gp, j->gs[2], s->vt, ld, 1.0f, s->ds, ld);   /* dP */
    for (int64_t r = 0; r < rows; r++) {
        float *p = s->p + r * ld, *ds = s->ds + r * ld;
        int64_t visible = cols;
        if (j->causal) {
            const int64_t last = j->op->params.q_offset + i0 + r;
            visible = last < 0 ? 0 : last + 1 < cols ? last + 1 : cols;
        }
        /* the row's softmax over whole vectors: the keys it does not see as -inf */
        for (int64_t c = visible; c < padded; c++) p[c] = -INFINITY;
        if (!visible || !j->k->softmax_row(padded, p, p, false)) softmax_row_scalar(visible, p);
        float delta = 0;
        for (int64_t c = 0; c < visible; c++) delta += p[c] * ds[c];
        for (int64_t c = 0; c < visible; c++) ds[c] = p[c] * (ds[c] - delta);
        for (int64_t c = visible; c < padded; c++) p[c] = ds[c] = 0;
    }
}

/* sdpa_grad_q: tasks are (b, h, query block); dQ = scale dS K. */
static void grad_q_blocks(void *ctx, int64_t begin, int64_t end) {
    grad_job *j = ctx;
    grad_scratch s;
    if (!scratch_take(j, false, &s)) {
        atomic_store(&j->out_of_memory, true);
        return;
    }
    int64_t last_kv = -1;
    for (int64_t t = begin; t < end; t++) {
        const int64_t qb = t % j->qblocks, h = (t / j->qblocks) % j->Hq, b = t / (j->qblocks * j->Hq);
        const int64_t i0 = qb * GRAD_BQ, rows = j->Lq - i0 < GRAD_BQ ? j->Lq - i0 : GRAD_BQ, kh = h / j->group;
        const float *kp = j->kk + b * j->ks[0] + kh * j->ks[1], *vp = j->v + b * j->vs[0] + kh * j->vs[1];
        if (b * j->Hkv + kh != last_kv) {        /* the same kv head's blocks share its transposes */
            transpose_padded(kp, j->ks[2], j->Lk, j->D, j->ldk, s.kt);
            transpose_padded(vp, j->vs[2], j->Lk, j->Dv, j->ldk, s.vt);
            last_kv = b * j->Hkv + kh;
        }
        int64_t cols;
        block_probs(j, &s, b, h, i0, rows, &cols);
        if (cols) j->k->attn_values(rows, cols, j->D, s.ds, j->ldk, kp, j->ks[2], s.prod, j->D);
        else memset(s.prod, 0, sizeof(float) * (size_t)(rows * j->D));
        for (int64_t r = 0; r < rows; r++) {
            float *o = j->out + b * j->os[0] + h * j->os[1] + (i0 + r) * j->os[2];
            for (int64_t e = 0; e < j->D; e++) o[e] = s.prod[r * j->D + e] * j->scale;
        }
    }
    tf_cpu_scratch_give(s.block, s.bytes);
}

/* dst [cols, rows] = src^T for src [rows, ld]. */
static void transpose_block(const float *src, int64_t ld, int64_t rows, int64_t cols, float *dst) {
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) dst[c * rows + r] = src[r * ld + c];
}

/* acc [cols, W] columns [at, at + n) += scale * prod [cols, n]. */
static void add_columns(float *acc, int64_t W, int64_t at, const float *prod, int64_t cols, int64_t n, float scale) {
    for (int64_t c = 0; c < cols; c++)
        for (int64_t e = 0; e < n; e++) acc[c * W + at + e] += scale * prod[c * n + e];
}

/* sdpa_grad_kv: tasks are (b, kv head); its query heads' blocks summed. */
static void grad_kv_heads(void *ctx, int64_t begin, int64_t end) {
    grad_job *j = ctx;
    grad_scratch s;
    if (!scratch_take(j, true, &s)) {
        atomic_store(&j->out_of_memory, true);
        return;
    }
    const int64_t W = j->D + j->Dv;
    for (int64_t t = begin; t < end; t++) {
        const int64_t kh = t % j->Hkv, b = t / j->Hkv;
        transpose_padded(j->kk + b * j->ks[0] + kh * j->ks[1], j->ks[2], j->Lk, j->D, j->ldk, s.kt);
        transpose_padded(j->v + b * j->vs[0] + kh * j->vs[1], j->vs[2], j->Lk, j->Dv, j->ldk, s.vt);
        memset(s.acc, 0, sizeof(float) * (size_t)(j->Lk * W));
        for (int64_t h = kh * j->group; h < (kh + 1) * j->group; h++)
            for (int64_t i0 = 0; i0 < j->Lq; i0 += GRAD_BQ) {
                const int64_t rows = j->Lq - i0 < GRAD_BQ ? j->Lq - i0 : GRAD_BQ;
                int64_t cols;
                block_probs(j, &s, b, h, i0, rows, &cols);
                if (!cols) continue;
                const float *qp = j->q + b * j->qs[0] + h * j->qs[1] + i0 * j->qs[2];
                const float *gp = j->g + b * j->gs[0] + h * j->gs[1] + i0 * j->gs[2];
                transpose_block(s.p, j->ldk, rows, cols, s.pt);            /* dV += P^T dO */
                j->k->attn_values(cols, rows, j->Dv, s.pt, rows, gp, j->gs[2], s.prod, j->Dv);
                add_columns(s.acc, W, j->D, s.prod, cols, j->Dv, 1.0f);
                transpose_block(s.ds, j->ldk, rows, cols, s.pt);           /* dK += scale dS^T Q */
                j->k->attn_values(cols, rows, j->D, s.pt, rows, qp, j->qs[2], s.prod, j->D);
                add_columns(s.acc, W, 0, s.prod, cols, j->D, j->scale);
            }
        for (int64_t c = 0; c < j->Lk; c++) {
            float *o = j->out + b * j->os[0] + kh * j->os[1] + c * j->os[2];
            memcpy(o, s.acc + c * W, sizeof(float) * (size_t)W);
        }
    }
    tf_cpu_scratch_give(s.block, s.bytes);
}

/* An operand as the products read it: f32 rows with a unit stride, in
 * place when it is one, else a contiguous f32 copy (f16 and bf16 widened,
 * as the BLAS layer's half GEMMs do: their reference loops in double ran
 * a training step's attention gradients 30 times slower). */
typedef struct f32_view {
    float *p;
    int64_t s[4];
    float *owned;                        /* the copy, or NULL */
} f32_view;

static bool in_place(const tf_tensor_desc *d) { return d->dtype == TF_F32 && d->strides[3] == 1; }

static bool view_of(const tf_tensor_desc *d, tf_cpu_address_fn address, bool fill, f32_view *v) {
    v->owned = NULL;
    if (in_place(d)) {
        v->p = (float *)(address(d->buffer) + d->offset);
        memcpy(v->s, d->strides, sizeof v->s);
        return true;
    }
    const int64_t n = tf_desc_numel(d);
    v->p = v->owned = tf_cpu_alloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!v->owned) return false;
    v->s[3] = 1;
    for (int i = 2; i >= 0; i--) v->s[i] = v->s[i + 1] * d->shape[i + 1];
    if (!fill || !n) return true;
    const operand o = make_operand(d, address);
    int64_t idx[4] = {0}, at = 0;
    do {
        const char *row = o.base + idx[0] * o.stride[0] + idx[1] * o.stride[1] + idx[2] * o.stride[2];
        for (int64_t e = 0; e < d->shape[3]; e++) v->p[at++] = (float)load_f64(d->dtype, row + e * o.stride[3]);
    } while (next_index(3, d->shape, idx));
    return true;
}

/* The result narrowed into the output where it was computed in a copy. */
static void store_view(const tf_tensor_desc *d, tf_cpu_address_fn address, const f32_view *v) {
    const int64_t n = tf_desc_numel(d);
    if (!v->owned || !n) return;
    const operand o = make_operand(d, address);
    int64_t idx[4] = {0}, at = 0;
    do {
        char *row = o.base + idx[0] * o.stride[0] + idx[1] * o.stride[1] + idx[2] * o.stride[2];
        for (int64_t e = 0; e < d->shape[3]; e++) store_f64(d->dtype, row + e * o.stride[3], v->p[at++]);
    } while (next_index(3, d->shape, idx));
}

/* f32, f16 or bf16 throughout, 4-d; f64 keeps the reference's double. */
static bool takes(const tf_op *op) {
    const tf_dtype dt = op->output.dtype;
    if (op->n_inputs != 4 || op->output.ndim != 4 || (dt != TF_F32 && dt != TF_F16 && dt != TF_BF16)) return false;
    for (int i = 0; i < 4; i++)
        if (op->inputs[i].dtype != dt || op->inputs[i].ndim != 4) return false;
    return true;
}

static void run_job(grad_job *j, const f32_view *in, const f32_view *out) {
    const tf_op *op = j->op;
    const tf_tensor_desc *Q = &op->inputs[0], *K = &op->inputs[1], *V = &op->inputs[2];
    j->q = in[0].p;
    j->kk = in[1].p;
    j->v = in[2].p;
    j->g = in[3].p;
    j->out = out->p;
    j->B = Q->shape[0];
    j->Hq = Q->shape[1];
    j->Lq = Q->shape[2];
    j->D = Q->shape[3];
    j->Hkv = K->shape[1];
    j->Lk = K->shape[2];
    j->Dv = V->shape[3];
    j->group = j->Hq / j->Hkv;
    j->qblocks = (j->Lq + GRAD_BQ - 1) / GRAD_BQ;
    j->ldk = (j->Lk + j->k->lanes - 1) / j->k->lanes * j->k->lanes;
    memcpy(j->qs, in[0].s, sizeof j->qs);
    memcpy(j->ks, in[1].s, sizeof j->ks);
    memcpy(j->vs, in[2].s, sizeof j->vs);
    memcpy(j->gs, in[3].s, sizeof j->gs);
    memcpy(j->os, out->s, sizeof j->os);
    j->scale = (float)op->params.scale;
    j->causal = op->params.flags & TF_SDPA_CAUSAL;
    if (op->kind == TF_OP_SDPA_GRAD_Q) tf_cpu_parallel_for(j->B * j->Hq * j->qblocks, 1, grad_q_blocks, j);
    else tf_cpu_parallel_for(j->B * j->Hkv, 1, grad_kv_heads, j);
}

static tf_status fast_sdpa_grad(const tf_op *op, tf_cpu_address_fn address) {
    const tf_fast_kernels *k = tf_fast();
    /* a negative q_offset (fewer keys than queries) leaves rows that see no
     * key: NaN everywhere, as the reference gives */
    if (!k || !takes(op) || (op->params.flags & TF_SDPA_CAUSAL && op->params.q_offset < 0)) return run_below(op, address);
    grad_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.k = k;
    f32_view in[4], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) ok = view_of(&op->inputs[i], address, true, &in[i]);
    if (ok) ok = view_of(&op->output, address, false, &out);
    if (ok) run_job(&j, in, &out);
    ok = ok && !atomic_load(&j.out_of_memory);
    if (ok) store_view(&op->output, address, &out);
    for (int i = 0; i < 4; i++) tf_cpu_free(in[i].owned);
    tf_cpu_free(out.owned);
    return ok ? TF_OK : tf_cpu_oom("sdpa_grad", sizeof(float) * (size_t)tf_desc_numel(&op->inputs[0]));
}

void tf_cpu_attn_grad_install(tf_cpu_table *t) {
    below = *t;
    static const tf_dtype dts[] = {TF_F32, TF_F16, TF_BF16};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
        t->fn[TF_OP_SDPA_GRAD_Q][dts[i]] = t->fn[TF_OP_SDPA_GRAD_KV][dts[i]] = fast_sdpa_grad;
}
