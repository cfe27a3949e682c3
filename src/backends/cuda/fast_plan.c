/* Which ops the CUDA plugin's own kernels take (see fast_plan.h). */
#include "fast_plan.h"
#include "gpu_runtime.h"   /* tf_gpu_env_choice */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool ftype_of(tf_dtype dt, tf_cuda_ftype *t, int *size) {
    switch (dt) {
    case TF_F32: *t = TF_CUDA_F32; *size = 4; return true;
    case TF_F16: *t = TF_CUDA_F16; *size = 2; return true;
    case TF_BF16: *t = TF_CUDA_BF16; *size = 2; return true;
    default: return false;
    }
}

static bool aligned16(uintptr_t p) { return p % 16 == 0; }

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- row ops ---- */

/* The smallest geometry that holds a row of len: a warp first (rows packed
 * four to a block), then a block of 256, then 1024 threads; false if even
 * 1024 threads x 8 loads of vec elements cannot hold it. */
static bool row_geometry(int64_t len, int vec, int32_t *threads, int32_t *chunks) {
    static const int32_t tpr[] = {32, 256, 1024};
    for (int i = 0; i < 3; i++)
        for (int32_t ch = 1; ch <= 8; ch *= 2)
            if ((int64_t)tpr[i] * ch * vec >= len) {
                *threads = tpr[i];
                *chunks = ch;
                return true;
            }
    return false;
}

bool tf_cuda_plan_row(const tf_op *op, tf_cuda_addr_fn addr, tf_cuda_row_args *a) {
    if (op->kind != TF_OP_SOFTMAX && op->kind != TF_OP_LOG_SOFTMAX && op->kind != TF_OP_RMSNORM &&
        op->kind != TF_OP_LAYERNORM)
        return false;
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    tf_cuda_ftype type;
    int size;
    if (!ftype_of(x->dtype, &type, &size) || o->dtype != x->dtype || x->ndim < 1 || op->params.axis != x->ndim - 1 ||
        !tf_desc_is_contiguous(x) || !tf_desc_is_contiguous(o))
        return false;
    memset(a, 0, sizeof *a);
    a->op = op->kind;
    a->type = type;
    a->len = x->shape[x->ndim - 1];
    a->rows = a->len > 0 ? tf_desc_numel(x) / a->len : 0;
    if (a->len <= 0 || a->rows <= 0 || a->rows > (int64_t)INT32_MAX * 4) return false;
    a->has_w = (op->params.flags & TF_ROW_WEIGHT) != 0;
    a->has_b = (op->params.flags & TF_ROW_BIAS) != 0;
    int next = 1;
    const tf_tensor_desc *w = a->has_w ? &op->inputs[next++] : NULL, *b = a->has_b ? &op->inputs[next++] : NULL;
    if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype)) return false;
    a->ws = w ? w->strides[0] : 0;
    a->bs = b ? b->strides[0] : 0;
    a->eps = (float)op->params.eps;
    a->x = (const void *)addr(x);
    a->out = (void *)addr(o);
    a->w = w ? (const void *)addr(w) : NULL;
    a->b = b ? (const void *)addr(b) : NULL;
    /* 128-bit loads need every row, weight and bias to start on 16 bytes. */
    int vec = 16 / size;
    bool wide = a->len % vec == 0 && aligned16((uintptr_t)a->x) && aligned16((uintptr_t)a->out) &&
                (!w || (a->ws == 1 && aligned16((uintptr_t)a->w))) && (!b || (a->bs == 1 && aligned16((uintptr_t)a->b)));
    a->vec = wide ? vec : 1;
    return row_geometry(a->len, a->vec, &a->threads_per_row, &a->chunks);
}

/* ---- reductions ---- */

#define REDUCE_THREADS 256       /* fast_kernels.cu's block */
#define REDUCE_UNROLL 4          /* loads a thread has in flight */

/* A middle axis of a contiguous x: [outer, len, inner] to [outer, inner],
 * one thread an output walking len elements inner apart (neighbouring
 * threads read neighbouring elements). all-MiniLM-L6-v2's mean pooling,
 * [64, 40, 384] over the tokens, took 0.58 ms on the portable kernel. */
static bool plan_reduce_middle(const tf_op *op, tf_cuda_addr_fn addr, tf_cuda_reduce_args *a) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < op->params.axis; i++) outer *= x->shape[i];
    for (int i = op->params.axis + 1; i < x->ndim; i++) inner *= x->shape[i];
    a->len = x->shape[op->params.axis];
    a->inner = inner;
    a->rows = outer * inner;
    a->parts = 1;
    a->vec = 1;
    if (a->len <= 0 || a->rows <= 0 || tf_desc_numel(o) != a->rows) return false;
    a->x = (const void *)addr(x);
    a->out = (void *)addr(o);
    return ceil_div(a->rows, REDUCE_THREADS) <= INT32_MAX;
}

bool tf_cuda_plan_reduce(const tf_op *op, int sm_count, tf_cuda_addr_fn addr, tf_cuda_reduce_args *a) {
    tf_op_kind k = op->kind;
    if (k != TF_OP_SUM && k != TF_OP_MEAN && k != TF_OP_MAX && k != TF_OP_MIN && k != TF_OP_ARGMAX && k != TF_OP_ARGMIN)
        return false;
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    tf_cuda_ftype type;
    int size;
    bool arg = k == TF_OP_ARGMAX || k == TF_OP_ARGMIN;
    if (!ftype_of(x->dtype, &type, &size) || o->dtype != (arg ? TF_I64 : x->dtype) || !tf_desc_is_contiguous(x) ||
        !tf_desc_is_contiguous(o))
        return false;
    bool all = op->params.axis == TF_ALL_AXES;
    if (!all && (x->ndim < 1 || op->params.axis < 0 || op->params.axis >= x->ndim)) return false;
    memset(a, 0, sizeof *a);
    a->op = k;
    a->type = type;
    a->inner = 1;
    int64_t n = tf_desc_numel(x);
    if (!all && op->params.axis != x->ndim - 1) return plan_reduce_middle(op, addr, a);
    a->len = all ? n : x->shape[x->ndim - 1];
    a->rows = all ? 1 : (a->len > 0 ? n / a->len : 0);
    if (a->len <= 0 || a->rows <= 0 || tf_desc_numel(o) != a->rows) return false;
    a->x = (const void *)addr(x);
    a->out = (void *)addr(o);
    a->vec = a->len % (16 / size) == 0 && aligned16((uintptr_t)a->x) ? 16 / size : 1;
    /* Parts a row: enough blocks for 8 a multiprocessor, none with less than
     * one round of loads. */
    int64_t want = (int64_t)(sm_count > 0 ? sm_count : 1) * 8;
    int64_t parts = a->rows >= want ? 1 : ceil_div(want, a->rows);
    int64_t most = ceil_div(a->len, (int64_t)REDUCE_THREADS * a->vec * REDUCE_UNROLL);
    a->parts = parts < most ? parts : most;
    if (a->parts < 1) a->parts = 1;
    return a->rows * a->parts <= INT32_MAX;
}

size_t tf_cuda_reduce_scratch_bytes(const tf_cuda_reduce_args *a) {
    return a->parts > 1 ? (size_t)(a->rows * a->parts) * sizeof(tf_cuda_reduce_part) : 0;
}

/* ---- attention ---- */

/* Unit stride along the head, the others and the start multiples of 8
 * elements (16 bytes): the kernels copy rows 16 bytes at a time. */
static bool rows_of16(const tf_tensor_desc *t, uintptr_t base, int64_t st[3]) {
    if (t->strides[3] != 1 || !aligned16(base)) return false;
    for (int i = 0; i < 3; i++) {
        if (t->strides[i] % 8 != 0) return false;
        st[i] = t->strides[i];
    }
    return true;
}

/* Decode: enough blocks to fill the GPU (32 a multiprocessor), each with
 * at least 256 keys. 32 rather than 8: on an H200 (8 x 32 heads, 4096 and
 * 32768 keys) 8 gave 0.184 and 1.145 ms, 16 0.162 and 1.089, 32 0.157 and
 * 1.065 (docs/PERFORMANCE.md): more blocks, more loads in flight. */
static void decode_split(tf_cuda_attn_args *a, int sm_count) {
    static const char *const per_sm[] = {"8", "16", "32"};   /* TF_CUDA_DECODE_BLOCKS: tuning experiments only */
    int choice = tf_gpu_env_choice("TF_CUDA_DECODE_BLOCKS", per_sm, 3);
    int64_t rows = a->B * a->Hq * a->Lq, want = (int64_t)(sm_count > 0 ? sm_count : 1) * (8 << (choice >= 0 ? choice : 2));
    int64_t splits = ceil_div(want, rows), most = ceil_div(a->Lk, 256);
    if (splits > most) splits = most;
    if (splits < 1) splits = 1;
    a->chunk = ceil_div(a->Lk > 0 ? a->Lk : 1, splits);
    a->splits = ceil_div(a->Lk > 0 ? a->Lk : 1, a->chunk);
}

size_t tf_cuda_attn_small_smem(int64_t Lk, int64_t D) {
    return ((size_t)Lk * (size_t)(D + 1) + (size_t)Lk * (size_t)D + 4 * (size_t)(Lk + D)) * sizeof(float);
}

/* TF_CUDA_ATTN_SMALL=0 sends f32 with few keys to the row-at-a-time kernel (to compare). */
static bool small_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = tf_gpu_env_flag("TF_CUDA_ATTN_SMALL", true);
    return enabled;
}

bool tf_cuda_plan_attention(const tf_op *op, int sm_count, tf_cuda_addr_fn addr, tf_cuda_attn_args *a) {
    if (op->kind != TF_OP_SDPA) return false;
    const tf_tensor_desc *q = &op->inputs[0], *k = &op->inputs[1], *v = &op->inputs[2], *o = &op->output;
    bool has_mask = (op->params.flags & TF_SDPA_MASK) != 0;
    const tf_tensor_desc *m = has_mask ? &op->inputs[3] : NULL;
    tf_cuda_ftype type;
    int size;
    if (!ftype_of(q->dtype, &type, &size)) return false;
    /* f32 runs a query row at a time whatever the queries (decode_kernel),
     * which also takes head size 32 (all-MiniLM-L6-v2's); the half types'
     * flash kernels take 64 and 128. */
    const bool f32 = type == TF_CUDA_F32;
    int64_t D = q->shape[3];
    if (!(D == 64 || D == 128 || (f32 && D == 32)) || v->shape[3] != D || o->dtype != q->dtype) return false;
    memset(a, 0, sizeof *a);
    a->type = type;
    a->head_dim = (int32_t)D;
    a->B = q->shape[0];
    a->Hq = q->shape[1];
    a->Lq = q->shape[2];
    a->Hkv = k->shape[1];
    a->Lk = k->shape[2];
    a->q_off = op->params.q_offset;
    a->causal = (op->params.flags & TF_SDPA_CAUSAL) != 0;
    a->has_mask = has_mask;
    if (a->B <= 0 || a->Hq <= 0 || a->Lq <= 0 || a->Hkv <= 0 || a->Hq % a->Hkv != 0 || a->B > 65535 || a->Hq > 65535)
        return false;
    a->q = (const void *)addr(q);
    a->k = (const void *)addr(k);
    a->v = (const void *)addr(v);
    a->out = (void *)addr(o);
    if (!rows_of16(q, (uintptr_t)a->q, a->qs) || !rows_of16(k, (uintptr_t)a->k, a->ks) ||
        !rows_of16(v, (uintptr_t)a->v, a->vs) || !rows_of16(o, (uintptr_t)a->out, a->os))
        return false;
    if (m) {
        if (m->dtype != q->dtype) return false;
        a->mask = (const void *)addr(m);
        for (int i = 0; i < 4; i++) a->ms[i] = m->strides[i];
    }
    a->scale_log2 = (float)(op->params.scale * 1.4426950408889634);
    if (f32 && a->Lq > 1 && a->Lk > 0 && tf_cuda_attn_small_smem(a->Lk, D) <= TF_CUDA_SMALL_SMEM && small_enabled()) {
        a->kind = TF_CUDA_ATTN_SMALL;
        a->splits = 1;
        a->chunk = a->Lk;
        return ceil_div(a->Lq, TF_CUDA_SMALL_ROWS) <= INT32_MAX;
    }
    if (a->Lq <= TF_CUDA_DECODE_MAX_Q || f32) {       /* rows past the grid's 65535 loop in the kernel */
        a->kind = TF_CUDA_ATTN_DECODE;
        decode_split(a, sm_count);
        return true;
    }
    a->kind = TF_CUDA_ATTN_FLASH;
    static const char *const warps[] = {"4", "8"};      /* TF_CUDA_FLASH_WARPS: tuning experiments only */
    a->warps = tf_gpu_env_choice("TF_CUDA_FLASH_WARPS", warps, 2) == 1 ? 8 : 4;
    static const char *const impls[] = {"auto",          "mma",           "hopper",
                                        "hopper-serial", "hopper-overlap", "hopper-pingpong"};   /* enum order */
    int impl = tf_gpu_env_choice("TF_CUDA_FLASH", impls, 6);
    a->flash_impl = impl < 0 ? TF_CUDA_FLASH_AUTO : impl;
    return ceil_div(a->Lq, 16 * a->warps) <= INT32_MAX;
}

void tf_cuda_plan_flash_device(tf_cuda_attn_args *a, int cc_major, int cc_minor) {
    if (a->kind != TF_CUDA_ATTN_FLASH || (cc_major == 9 && cc_minor == 0)) return;
    if (a->flash_impl == TF_CUDA_FLASH_AUTO) a->flash_impl = TF_CUDA_FLASH_MMA;
    else if (a->flash_impl >= TF_CUDA_FLASH_HOPPER) a->flash_impl = TF_CUDA_FLASH_UNAVAILABLE;
}

size_t tf_cuda_attn_scratch_bytes(const tf_cuda_attn_args *a) {
    if (a->kind != TF_CUDA_ATTN_DECODE || a->splits <= 1) return 0;
    return (size_t)(a->B * a->Hq * a->Lq * a->splits) * (size_t)(a->head_dim + 2) * sizeof(float);
}

/* ---- GEMM with a bias ---- */

bool tf_cuda_plan_gemm_bias(const tf_op *op) {
    if (op->kind != TF_OP_GEMM || op->n_inputs != 3 || op->params.beta != 1) return false;
    const tf_tensor_desc *c = &op->inputs[2], *o = &op->output;
    tf_cuda_ftype type;
    int size;
    if (!ftype_of(o->dtype, &type, &size) || c->dtype != o->dtype || c->ndim != o->ndim || o->ndim < 2) return false;
    int nb = o->ndim - 2;
    for (int i = 0; i < nb; i++)
        if (o->shape[i] != 1 && c->strides[i] != 0) return false;   /* one bias for every batch */
    if (o->shape[nb] != 1 && c->strides[nb] != 0) return false;     /* the same row for every m */
    return o->shape[nb + 1] == 1 || c->strides[nb + 1] == 1;
}
