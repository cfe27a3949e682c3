/* The CUDA plugin's own kernels (fast_kernels.cu): which ops they take and
 * with what geometry. The choice is plain C, apart from the kernels, so CI
 * tests it without a GPU (tests/cuda/test_fast_plan.c); an op they do not
 * take runs the portable kernels as before.
 *
 * - Row ops (softmax, log_softmax, rmsnorm, layernorm) over the last axis of
 *   contiguous f32/f16/bf16 rows: one pass per row. The row is read once
 *   into registers, reduced there, and written once; a warp takes a row of up
 *   to 32 x 8 vectors, a block of 256 or 1024 threads a longer one, and 128-bit
 *   loads are used where the rows and the weights allow them.
 * - Reductions over everything, the last axis or a middle one (see tf_cuda_reduce_args).
 * - Attention (sdpa) in f16/bf16 with head size 64 or 128 (q, k, v and out
 *   with unit stride along the head): prefill by a flash-attention kernel
 *   (tiles in shared memory, tensor-core MMA, online softmax in registers);
 *   decode (at most TF_CUDA_DECODE_MAX_Q queries) by a split-KV kernel whose
 *   partial results a second kernel combines.
 */
#ifndef TF_CUDA_FAST_PLAN_H
#define TF_CUDA_FAST_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/backend.h>

typedef enum tf_cuda_ftype { TF_CUDA_F32, TF_CUDA_F16, TF_CUDA_BF16 } tf_cuda_ftype;

/* A tensor's first element as a device address (the buffer's plus offset). */
typedef uintptr_t (*tf_cuda_addr_fn)(const tf_tensor_desc *t);

typedef struct tf_cuda_row_args {
    int32_t op;                 /* TF_OP_SOFTMAX, _LOG_SOFTMAX, _RMSNORM or _LAYERNORM */
    int32_t type;               /* tf_cuda_ftype */
    int32_t threads_per_row;    /* 32: a warp per row (4 rows a block); 256 or 1024: a block per row */
    int32_t chunks;             /* loads per thread: 1, 2, 4 or 8 */
    int32_t vec;                /* elements per load: 16 bytes' worth, or 1 */
    int32_t has_w, has_b;
    int64_t rows, len, ws, bs;  /* ws, bs: the weight's and bias's element strides */
    float eps;
    const void *x, *w, *b;
    void *out;
} tf_cuda_row_args;

/* True (and *a filled in) if the row kernel takes op. */
bool tf_cuda_plan_row(const tf_op *op, tf_cuda_addr_fn addr, tf_cuda_row_args *a);

/* FLASH: the tensor-core prefill kernels (f16, bf16); DECODE: a query row a
 * block with split-KV (every dtype; f32's prefill too); SMALL: f32 with few
 * keys, a block per (query tile, head) with the head's keys and values in
 * shared memory (an encoder's 40-token sentences). */
typedef enum tf_cuda_attn_kind { TF_CUDA_ATTN_FLASH = 1, TF_CUDA_ATTN_DECODE = 2, TF_CUDA_ATTN_SMALL = 3 } tf_cuda_attn_kind;

#define TF_CUDA_SMALL_ROWS 16       /* SMALL: query rows a block (4 warps, 4 rows each) */
#define TF_CUDA_SMALL_SMEM 49152    /* SMALL: shared memory at most (no opt-in needed) */
/* SMALL's shared memory for Lk keys of head size D: K with rows padded by
 * one float (no bank conflicts when lanes take keys), V, and a row of
 * scores and a query row for each of the 4 warps. */
size_t tf_cuda_attn_small_smem(int64_t Lk, int64_t D);

/* Which prefill kernel (TF_CUDA_FLASH): on a compute-9.0 device the Hopper
 * kernel (flash_hopper.cu: TMA, wgmma, warp-specialized) where it can
 * address the tensors, else the mma.sync kernel; "mma" always the latter;
 * "hopper" (the default schedule), "hopper-serial", "hopper-overlap" and
 * "hopper-pingpong" (flash_hopper.cu's schedules) require the Hopper kernel
 * and fail the op where it cannot run (tests and measurements only). */
typedef enum tf_cuda_flash_impl {
    TF_CUDA_FLASH_AUTO = 0,
    TF_CUDA_FLASH_MMA = 1,
    TF_CUDA_FLASH_HOPPER = 2,
    TF_CUDA_FLASH_HOPPER_SERIAL = 3,
    TF_CUDA_FLASH_HOPPER_OVERLAP = 4,
    TF_CUDA_FLASH_HOPPER_PINGPONG = 5,
    TF_CUDA_FLASH_UNAVAILABLE = 6   /* a Hopper kernel required off Hopper: the launch fails */
} tf_cuda_flash_impl;

#define TF_CUDA_DECODE_MAX_Q 16     /* up to this many queries, decode's split-KV kernel */

typedef struct tf_cuda_attn_args {
    int32_t kind;               /* tf_cuda_attn_kind */
    int32_t type;               /* TF_CUDA_F16 or TF_CUDA_BF16 */
    int32_t head_dim;           /* 64 or 128, q's and v's */
    int32_t warps;              /* flash: warps a block (16 query rows each), the mma.sync kernel */
    int32_t flash_impl;         /* flash: tf_cuda_flash_impl */
    int32_t causal, has_mask;
    int64_t B, Hq, Hkv, Lq, Lk, q_off;
    int64_t qs[3], ks[3], vs[3], os[3];   /* element strides along b, h, l (unit along d) */
    int64_t ms[4];                        /* the mask's along b, h, i, j (0 where broadcast) */
    float scale_log2;           /* the score scale times log2(e): the kernels use exp2 */
    int64_t splits, chunk;      /* decode: key ranges of `chunk` keys, one block each */
    const void *q, *k, *v, *mask;
    void *out;
    float *partial;             /* decode with splits > 1: [B, Hq * Lq, splits, head_dim + 2] */
} tf_cuda_attn_args;

/* True (and *a filled in) if an attention kernel takes op; sm_count sizes
 * decode's split. Then tf_cuda_attn_scratch_bytes(a) bytes of device
 * scratch go in a->partial (0: none needed). */
bool tf_cuda_plan_attention(const tf_op *op, int sm_count, tf_cuda_addr_fn addr, tf_cuda_attn_args *a);
/* The prefill kernel for a device of compute capability major.minor: the
 * Hopper kernel's sm_90a code runs on 9.0 only, so elsewhere AUTO becomes
 * MMA and a required Hopper kernel UNAVAILABLE, whose launch fails
 * (cudaErrorNotSupported) rather than running the empty stub the other
 * architectures carry. */
void tf_cuda_plan_flash_device(tf_cuda_attn_args *a, int cc_major, int cc_minor);
size_t tf_cuda_attn_scratch_bytes(const tf_cuda_attn_args *a);

/* Reductions (sum, mean, max, min, argmax, argmin) of contiguous f32/f16/bf16
 * tensors over everything or over the last axis: `parts` blocks a row, each
 * reading 16-byte vectors grid-stride; with parts > 1 a second kernel merges
 * the parts' results (tf_cuda_reduce_part) per row. Sums accumulate in
 * double; NaN and ties follow the portable kernels (NaN sticky for max and
 * min, the first NaN wins argmax/argmin, ties keep the smaller index). */
typedef struct tf_cuda_reduce_part { double sum; float value; int32_t pad; int64_t index; } tf_cuda_reduce_part;

typedef struct tf_cuda_reduce_args {
    int32_t op;                 /* TF_OP_SUM, _MEAN, _MAX, _MIN, _ARGMAX or _ARGMIN */
    int32_t type;               /* tf_cuda_ftype of the input */
    int32_t vec;                /* elements per load: 16 bytes' worth, or 1 */
    int64_t rows, len, parts;   /* rows: outputs; len: elements folded into each */
    int64_t inner;              /* 1: along the last axis (or all); else x is [rows / inner, len, inner]:
                                   a middle axis, one thread an output (reduce_cols_kernel) */
    const void *x;
    void *out;                  /* the input's dtype; i64 for argmax/argmin */
    tf_cuda_reduce_part *partial;   /* [rows, parts] when parts > 1 */
} tf_cuda_reduce_args;

bool tf_cuda_plan_reduce(const tf_op *op, int sm_count, tf_cuda_addr_fn addr, tf_cuda_reduce_args *a);
size_t tf_cuda_reduce_scratch_bytes(const tf_cuda_reduce_args *a);

/* A GEMM whose c is a bias: f32/f16/bf16, beta == 1, and c one row of N
 * values broadcast over M and every batch (stride 0 there, unit stride
 * along N). cuBLASLt adds such a c in the GEMM's epilogue
 * (CUBLASLT_EPILOGUE_BIAS) instead of copying it into out first and reading
 * it back (lt_gemm.c). */
bool tf_cuda_plan_gemm_bias(const tf_op *op);

/* The launchers (fast_kernels.cu): a cudaError_t, 0 on success. */
int tf_cuda_row_launch(const tf_cuda_row_args *a, void *stream);
int tf_cuda_reduce_launch(const tf_cuda_reduce_args *a, void *stream);
int tf_cuda_attn_launch(const tf_cuda_attn_args *a, void *stream);
/* flash_hopper.cu: -1 if the Hopper kernel does not take a (then the
 * mma.sync kernel runs), else a cudaError_t. */
int tf_cuda_flash_hopper_launch(const tf_cuda_attn_args *a, void *stream);
#ifdef TF_CUDA_TEST_HOOKS
int tf_cuda_debug_fault_launch(void *stream);   /* a kernel that writes through a bad pointer */
#endif

#endif
