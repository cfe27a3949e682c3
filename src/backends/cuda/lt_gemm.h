/* GEMM with a bias added in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS):
 * out = alpha * a @ b + bias in one pass over out, where the cuBLAS path
 * copies the broadcast bias into out and has the GEMM read it back.
 *
 * Only the bias fuses: tf_gemm is BLAS-shaped and no op carries an
 * activation, so the ReLU/GELU epilogues have nothing to take today.
 *
 * Everything is in cuBLAS's column-major terms (the caller swaps a and b,
 * as for cublasGemmStridedBatchedEx): D [m, n] = op(A) [m, k] @ op(B) [k, n]
 * + bias [m], batched with strides. The heuristic's choice is cached per
 * shape, layout and alignment (it costs tens of microseconds a call). */
#ifndef TF_CUDA_LT_GEMM_H
#define TF_CUDA_LT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "cublas_table.h"

typedef struct tf_lt_gemm {
    cudaDataType_t type;                 /* of A, B, D and the bias */
    cublasComputeType_t compute;
    bool trans_a, trans_b;
    int64_t m, n, k;
    int64_t lda, ldb, ldd;
    int64_t stride_a, stride_b, stride_d;  /* between batches (0: shared) */
    int32_t batch;
    float alpha;
    const void *a, *b, *bias;            /* bias NULL: none */
    void *d;
    cublasLtEpilogue_t epilogue;         /* BIAS, or an activation (RELU, GELU: its tanh form) with or without */
    const void *c;                       /* NULL, or a matrix laid out as d added before the epilogue (beta 1) */
} tf_lt_gemm;

#define TF_LT_CACHE 16

typedef struct tf_lt_cache_entry {
    tf_lt_gemm key;                      /* pointers reduced to their alignment */
    cublasLtMatmulAlgo_t algo;
    bool used;
} tf_lt_cache_entry;

typedef struct tf_lt_cache {
    tf_lt_cache_entry entries[TF_LT_CACHE];
    int next;                            /* the entry the next miss replaces */
} tf_lt_cache;

/* Workspace the heuristic may choose algorithms for (NVIDIA's advice for Hopper). */
#define TF_LT_WORKSPACE ((size_t)32 << 20)

/* Run g on stream; CUBLAS_STATUS_NOT_SUPPORTED when cuBLASLt has no
 * algorithm for it (the caller takes its other path). */
cublasStatus_t tf_lt_gemm_run(const tf_cublas *lib, cublasLtHandle_t h, tf_lt_cache *cache, const tf_lt_gemm *g,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream);

#endif
