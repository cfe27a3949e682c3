/* The CUDA plugin's choice of its own kernels (src/backends/cuda/fast_plan.c),
 * tested without a GPU: which ops and layouts they take, the geometry for a
 * row's length, the splits of decode attention and of reductions. The
 * kernels themselves run in conformance on a GPU (scripts/cuda-check.sh).
 * Plain C, so it builds on the GPU machine too. */
#include <stdio.h>
#include <string.h>

#include "fast_plan.h"

#include "expect.h"

/* Fake device addresses: a tensor's offset on a 256-aligned base. */
static uintptr_t fake_addr(const tf_tensor_desc *t) { return (uintptr_t)0x10000000u + (uintptr_t)t->offset; }

static tf_tensor_desc contiguous(tf_dtype dt, int ndim, const int64_t *shape) {
    tf_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.ndim = ndim;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        d.shape[i] = shape[i];
        d.strides[i] = st;
        st *= shape[i];
    }
    return d;
}

static tf_op row_op(tf_op_kind kind, tf_dtype dt, int64_t rows, int64_t len) {
    tf_op op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    op.kind = kind;
    op.n_inputs = 1;
    int64_t shape[2] = {rows, len};
    op.inputs[0] = contiguous(dt, 2, shape);
    op.output = op.inputs[0];
    op.params.axis = 1;
    op.params.eps = 1e-5;
    return op;
}

static void test_row_geometry(void) {
    static const struct {
        tf_dtype dt;
        int64_t len;
        int32_t threads, chunks, vec;
    } cases[] = {
        {TF_F32, 8, 32, 1, 4},       {TF_F32, 128, 32, 1, 4},       {TF_F32, 129, 32, 8, 1},
        {TF_F32, 1000, 32, 8, 4},    {TF_F32, 1024, 32, 8, 4},      {TF_F32, 4096, 256, 4, 4},
        {TF_F32, 20000, 1024, 8, 4}, {TF_F32, 1031, 256, 8, 1},     {TF_BF16, 4096, 256, 2, 8},
        {TF_F16, 8, 32, 1, 8},       {TF_BF16, 65536, 1024, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tf_op op = row_op(TF_OP_SOFTMAX, cases[i].dt, 3, cases[i].len);
        tf_cuda_row_args a;
        bool taken = tf_cuda_plan_row(&op, fake_addr, &a);
        EXPECT(taken && a.threads_per_row == cases[i].threads && a.chunks == cases[i].chunks && a.vec == cases[i].vec &&
                   a.rows == 3 && a.len == cases[i].len,
               "%s len %lld: taken %d, %d threads x %d loads x %d (want %d x %d x %d)", tf_dtype_name(cases[i].dt),
               (long long)cases[i].len, taken, a.threads_per_row, a.chunks, a.vec, cases[i].threads, cases[i].chunks,
               cases[i].vec);
    }
}

static void test_row_refusals(void) {
    tf_cuda_row_args a;
    tf_op op = row_op(TF_OP_SOFTMAX, TF_F32, 3, 8193);   /* odd: 1024 x 8 scalar loads hold 8192 */
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "f32 rows of 8193 (no 16-byte loads) are too long");
    op = row_op(TF_OP_SOFTMAX, TF_F32, 3, 32769);
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "rows of 32769 are too long");
    op = row_op(TF_OP_SOFTMAX, TF_F64, 3, 64);
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "f64 stays on the portable kernels");
    op = row_op(TF_OP_SOFTMAX, TF_F32, 3, 64);
    op.params.axis = 0;
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "softmax over axis 0 is not the row kernel's");
    op = row_op(TF_OP_SOFTMAX, TF_F32, 3, 64);
    op.inputs[0].strides[0] = 128;
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "rows with gaps are not contiguous");
    op = row_op(TF_OP_ADD, TF_F32, 3, 64);
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "add is not a row op");
    op = row_op(TF_OP_SOFTMAX, TF_F32, 0, 64);
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "no rows: nothing to launch");
    /* Offsets that break 16-byte alignment, or a strided weight: scalar loads. */
    op = row_op(TF_OP_RMSNORM, TF_F32, 3, 64);
    op.inputs[0].offset = 4;
    EXPECT(tf_cuda_plan_row(&op, fake_addr, &a) && a.vec == 1, "a misaligned x gives vec %d", a.vec);
    op = row_op(TF_OP_RMSNORM, TF_F32, 3, 64);
    int64_t len = 128;
    op.n_inputs = 2;
    op.params.flags = TF_ROW_WEIGHT;
    op.inputs[1] = contiguous(TF_F32, 1, &len);
    op.inputs[1].shape[0] = 64;
    op.inputs[1].strides[0] = 2;
    EXPECT(tf_cuda_plan_row(&op, fake_addr, &a) && a.vec == 1 && a.has_w && a.ws == 2, "a strided weight: vec %d",
           a.vec);
    op.inputs[1].strides[0] = 1;
    EXPECT(tf_cuda_plan_row(&op, fake_addr, &a) && a.vec == 4 && a.ws == 1, "a unit-stride weight: vec %d", a.vec);
    op.inputs[1].dtype = TF_F16;
    EXPECT(!tf_cuda_plan_row(&op, fake_addr, &a), "a weight of another dtype");
}

static tf_op reduce_op(tf_op_kind kind, tf_dtype dt, int ndim, const int64_t *shape, int axis) {
    tf_op op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    op.kind = kind;
    op.n_inputs = 1;
    op.inputs[0] = contiguous(dt, ndim, shape);
    int64_t rows = 1;
    for (int i = 0; axis != TF_ALL_AXES && i < ndim - 1; i++) rows *= shape[i];
    op.output = contiguous(kind == TF_OP_ARGMAX || kind == TF_OP_ARGMIN ? TF_I64 : dt, 1, &rows);
    op.params.axis = axis;
    return op;
}

static void test_reduce(void) {
    tf_cuda_reduce_args a;
    int64_t big = (int64_t)256 << 20, rows[2] = {65536, 4096}, odd = 20011;
    tf_op op = reduce_op(TF_OP_SUM, TF_F32, 1, &big, TF_ALL_AXES);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.rows == 1 && a.parts == 132 * 8 && a.vec == 4 &&
               tf_cuda_reduce_scratch_bytes(&a) == 132 * 8 * sizeof(tf_cuda_reduce_part),
           "256M: %lld parts", (long long)a.parts);
    op = reduce_op(TF_OP_ARGMAX, TF_F32, 2, rows, 1);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.rows == 65536 && a.parts == 1 &&
               tf_cuda_reduce_scratch_bytes(&a) == 0,
           "65536 rows: %lld parts", (long long)a.parts);
    op = reduce_op(TF_OP_MAX, TF_BF16, 1, &odd, TF_ALL_AXES);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.vec == 1 && a.parts == (odd + 1023) / 1024,
           "20011 bf16: vec %d, %lld parts (one round of loads each)", a.vec, (long long)a.parts);
    op = reduce_op(TF_OP_ARGMAX, TF_F32, 2, rows, 1);
    op.output.dtype = TF_I32;
    EXPECT(!tf_cuda_plan_reduce(&op, 132, fake_addr, &a), "argmax must give i64");
    op = reduce_op(TF_OP_SUM, TF_I32, 2, rows, 1);
    EXPECT(!tf_cuda_plan_reduce(&op, 132, fake_addr, &a), "integer sums stay on the portable kernels");
    op = reduce_op(TF_OP_SUM, TF_F32, 2, rows, 0);
    EXPECT(!tf_cuda_plan_reduce(&op, 132, fake_addr, &a), "axis 0 into an output of the wrong size");
    int64_t pooled[3] = {64, 40, 384}, outputs = 64 * 384;
    op = reduce_op(TF_OP_SUM, TF_F32, 3, pooled, 1);     /* all-MiniLM-L6-v2's mean pooling */
    op.output = contiguous(TF_F32, 1, &outputs);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.inner == 384 && a.len == 40 && a.rows == 64 * 384 &&
               a.parts == 1 && tf_cuda_reduce_scratch_bytes(&a) == 0,
           "a middle axis: inner %lld, len %lld, rows %lld", (long long)a.inner, (long long)a.len, (long long)a.rows);
    op = reduce_op(TF_OP_ARGMIN, TF_F32, 2, rows, 0);
    outputs = 4096;
    op.output = contiguous(TF_I64, 1, &outputs);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.inner == 4096 && a.len == 65536, "axis 0 of two");
    op = reduce_op(TF_OP_SUM, TF_F32, 2, rows, 1);
    EXPECT(tf_cuda_plan_reduce(&op, 132, fake_addr, &a) && a.inner == 1, "the last axis: inner 1");
    op = reduce_op(TF_OP_PROD, TF_F32, 2, rows, 1);
    EXPECT(!tf_cuda_plan_reduce(&op, 132, fake_addr, &a), "prod is not taken");
}

static tf_op attn_op(tf_dtype dt, int64_t B, int64_t Hq, int64_t Lq, int64_t Hkv, int64_t Lk, int64_t D) {
    tf_op op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    op.kind = TF_OP_SDPA;
    op.n_inputs = 3;
    int64_t q[4] = {B, Hq, Lq, D}, kv[4] = {B, Hkv, Lk, D};
    op.inputs[0] = contiguous(dt, 4, q);
    op.inputs[1] = contiguous(dt, 4, kv);
    op.inputs[2] = contiguous(dt, 4, kv);
    op.output = contiguous(dt, 4, q);
    op.params.scale = 0.125;
    op.params.q_offset = Lk - Lq;
    op.params.flags = TF_SDPA_CAUSAL;
    return op;
}

static void test_attention(void) {
    tf_cuda_attn_args a;
    tf_op op = attn_op(TF_BF16, 8, 32, 4096, 32, 4096, 128);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_FLASH && a.head_dim == 128 &&
               a.causal && tf_cuda_attn_scratch_bytes(&a) == 0 && a.qs[2] == 128 && a.ks[1] == 4096 * 128,
           "prefill: kind %d", a.kind);
    EXPECT(a.scale_log2 > 0.1803f && a.scale_log2 < 0.1804f, "scale * log2(e) = %g", a.scale_log2);
    op = attn_op(TF_F16, 8, 32, 1, 32, 4096, 128);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE && a.splits == 16 &&
               a.chunk == 256 && tf_cuda_attn_scratch_bytes(&a) == (size_t)(256 * 16 * 130 * 4),
           "decode 256 rows: %lld splits of %lld", (long long)a.splits, (long long)a.chunk);
    op = attn_op(TF_F16, 1, 9, 1, 3, 300, 64);       /* SmolLM2's heads, a short cache */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE && a.splits == 2 &&
               a.splits * a.chunk >= 300,
           "decode 9 rows, 300 keys: %lld splits of %lld", (long long)a.splits, (long long)a.chunk);
    op = attn_op(TF_F16, 1, 9, TF_CUDA_DECODE_MAX_Q + 1, 3, 300, 64);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_FLASH, "17 queries: flash");
    op = attn_op(TF_F32, 1, 9, 512, 3, 512, 64);      /* SmolLM2's prompt in f32: a query row at a time */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE && a.splits == 1 &&
               a.chunk == 512 && a.type == TF_CUDA_F32 && tf_cuda_attn_scratch_bytes(&a) == 0,
           "f32 prefill: one block a query row");
    op = attn_op(TF_F32, 64, 12, 40, 12, 40, 32);     /* all-MiniLM-L6-v2: head size 32, 40 keys */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_SMALL && a.head_dim == 32 &&
               tf_cuda_attn_scratch_bytes(&a) == 0 && tf_cuda_attn_small_smem(40, 32) <= TF_CUDA_SMALL_SMEM,
           "f32 with few keys: the small kernel");
    op = attn_op(TF_F32, 1, 9, 42, 3, 42, 64);        /* SmolLM2's 42-token prompt */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_SMALL, "a short f32 prompt");
    op = attn_op(TF_F32, 1, 9, 1, 3, 42, 64);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE, "one f32 query: split-KV");
    op = attn_op(TF_F32, 1, 4, 100, 4, 100, 128);     /* 100 keys of 128 need 103 KB */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE &&
               tf_cuda_attn_small_smem(100, 128) > TF_CUDA_SMALL_SMEM,
           "keys past the small kernel's shared memory");
    op = attn_op(TF_F32, 1, 32, 4096, 32, 4096, 64);  /* 131072 rows: more than a grid's y holds */
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE,
           "f32 with more rows than the grid holds");
    op = attn_op(TF_F32, 1, 4, 64, 4, 64, 96);
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "f32 head size 96 is not built");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 32);
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "bf16 head size 32 (prefill) is not built");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 96);
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "head size 96 is not built");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 64);
    op.inputs[1].strides[3] = 2;
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "k strided along the head");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 64);
    op.inputs[0].offset = 2;
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "q not on 16 bytes");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 64);
    op.inputs[2].strides[2] = 68;                     /* rows 136 bytes apart: not a multiple of 16 */
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "v rows not 16 bytes apart");
    op = attn_op(TF_BF16, 1, 4, 64, 4, 64, 64);
    op.n_inputs = 4;
    op.params.flags |= TF_SDPA_MASK;
    int64_t ms[4] = {1, 1, 64, 64};
    op.inputs[3] = contiguous(TF_BF16, 4, ms);
    op.inputs[3].strides[0] = op.inputs[3].strides[1] = 0;
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.has_mask && a.ms[0] == 0 && a.ms[2] == 64 &&
               a.ms[3] == 1,
           "a broadcast mask");
    op.inputs[3].dtype = TF_F32;
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "a mask of another dtype");
    op = attn_op(TF_BF16, 1, 6, 64, 4, 64, 64);
    EXPECT(!tf_cuda_plan_attention(&op, 132, fake_addr, &a), "kv heads that do not divide the q heads");
}

/* The prefill kernel a device gets: Hopper's (sm_90a code) on compute 9.0
 * only; the mma.sync kernel elsewhere; a required one stays required. */
static void test_flash_choice(void) {
    tf_cuda_attn_args a;
    tf_op op = attn_op(TF_BF16, 8, 32, 4096, 32, 4096, 128);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.flash_impl == TF_CUDA_FLASH_AUTO,
           "no TF_CUDA_FLASH: auto");
    tf_cuda_plan_flash_device(&a, 9, 0);
    EXPECT(a.flash_impl == TF_CUDA_FLASH_AUTO, "compute 9.0 keeps auto (the Hopper kernel)");
    static const int others[][2] = {{8, 0}, {8, 9}, {10, 0}, {12, 0}, {9, 1}};
    for (int i = 0; i < 5; i++) {
        a.flash_impl = TF_CUDA_FLASH_AUTO;
        tf_cuda_plan_flash_device(&a, others[i][0], others[i][1]);
        EXPECT(a.flash_impl == TF_CUDA_FLASH_MMA, "compute %d.%d: the mma.sync kernel", others[i][0], others[i][1]);
    }
    for (int impl = TF_CUDA_FLASH_HOPPER; impl <= TF_CUDA_FLASH_HOPPER_PINGPONG; impl++) {
        a.flash_impl = impl;
        tf_cuda_plan_flash_device(&a, 9, 0);
        EXPECT(a.flash_impl == impl, "a required Hopper kernel (%d) on 9.0", impl);
        tf_cuda_plan_flash_device(&a, 8, 0);
        EXPECT(a.flash_impl == TF_CUDA_FLASH_UNAVAILABLE, "a required Hopper kernel (%d) on 8.0: unavailable", impl);
    }
    op = attn_op(TF_F16, 8, 32, 1, 32, 4096, 128);
    EXPECT(tf_cuda_plan_attention(&op, 132, fake_addr, &a) && a.kind == TF_CUDA_ATTN_DECODE, "decode");
    tf_cuda_plan_flash_device(&a, 8, 0);
    EXPECT(a.flash_impl == TF_CUDA_FLASH_AUTO, "decode: no prefill kernel to choose");
}

/* out = a @ b + c for [batch, M, K] @ [K, N]: c as the core hands it over,
 * broadcast to [batch, M, N] with the given strides. */
static tf_op gemm_op(tf_dtype dt, double beta, int64_t cs0, int64_t cs1, int64_t cs2) {
    tf_op op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    op.kind = TF_OP_GEMM;
    op.n_inputs = 3;
    int64_t as[3] = {2, 5, 7}, bs[3] = {2, 7, 3}, os[3] = {2, 5, 3};
    op.inputs[0] = contiguous(dt, 3, as);
    op.inputs[1] = contiguous(dt, 3, bs);
    op.inputs[1].strides[0] = 0;
    op.output = contiguous(dt, 3, os);
    op.inputs[2] = op.output;
    op.inputs[2].strides[0] = cs0;
    op.inputs[2].strides[1] = cs1;
    op.inputs[2].strides[2] = cs2;
    op.params.alpha = 0.5;
    op.params.beta = beta;
    return op;
}

static void test_gemm_bias(void) {
    tf_op op = gemm_op(TF_BF16, 1, 0, 0, 1);
    EXPECT(tf_cuda_plan_gemm_bias(&op), "a bias row, beta 1");
    op = gemm_op(TF_F32, 1, 0, 0, 1);
    EXPECT(tf_cuda_plan_gemm_bias(&op), "f32 bias");
    op = gemm_op(TF_F64, 1, 0, 0, 1);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "f64: no cuBLASLt bias epilogue");
    op = gemm_op(TF_F32, 0.5, 0, 0, 1);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "beta 0.5 would scale the bias");
    op = gemm_op(TF_F32, 1, 0, 1, 0);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "a column (one value a row) is not a bias");
    op = gemm_op(TF_F32, 1, 3, 0, 1);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "a bias per batch");
    op = gemm_op(TF_F32, 1, 15, 3, 1);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "a full c");
    op = gemm_op(TF_F32, 1, 0, 0, 2);
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "a strided bias");
    op = gemm_op(TF_F32, 1, 0, 0, 1);
    op.inputs[2].dtype = TF_F16;
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "a bias of another dtype");
    op = gemm_op(TF_F32, 1, 0, 0, 1);
    op.n_inputs = 2;
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "no c");
    op = gemm_op(TF_F32, 1, 0, 0, 1);
    op.kind = TF_OP_MATMUL;
    EXPECT(!tf_cuda_plan_gemm_bias(&op), "matmul has no c");
    op = gemm_op(TF_F32, 1, 0, 0, 1);
    op.output.shape[0] = 1;
    op.inputs[2].strides[0] = 15;                     /* one batch: its stride does not matter */
    EXPECT(tf_cuda_plan_gemm_bias(&op), "a single batch");
}

int main(void) {
    test_row_geometry();
    test_row_refusals();
    test_reduce();
    test_attention();
    test_flash_choice();
    test_gemm_bias();
    printf("test_fast_plan: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
