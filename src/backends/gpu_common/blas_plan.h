/* Which products a GPU's BLAS library (cuBLAS, rocBLAS) takes, and how: a
 * row-major out = alpha * a @ b (+ beta * c) over flattened batch axes as one
 * column-major strided-batched call, C^T = B^T A^T. Plain C, shared by the
 * CUDA and ROCm plugins and tested without a GPU (tests/rocm/test_rocm_host.c). */
#ifndef TF_BLAS_PLAN_H
#define TF_BLAS_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include <tensorframe/backend.h>

/* One operand as the column-major library sees it: transposed or not, its
 * leading dimension, one stride across the (flattened) batch. */
typedef struct tf_blas_operand {
    bool trans;
    int64_t ld, batch_stride;
} tf_blas_operand;

typedef struct tf_blas_plan {
    int64_t M, N, K, batch;             /* out is [batch..., M, N] */
    tf_blas_operand a, b;
    bool with_c;                        /* GEMM with beta != 0: c is copied into out first */
    double alpha, beta;
} tf_blas_plan;

/* True (and *p filled in) when op - MATMUL or GEMM of f32, f64, f16 or bf16
 * into a contiguous output - is one such call with every size in int range;
 * false to leave it to the portable matmul kernel. */
bool tf_blas_plan_of(const tf_op *op, tf_blas_plan *p);

/* alpha and beta as the library reads them through pointers: p's doubles
 * for f64 compute, floats (held here) otherwise. Valid while p and s live. */
typedef struct tf_blas_scalars {
    float alpha_f, beta_f;
    const void *alpha, *beta;
} tf_blas_scalars;
void tf_blas_scalars_of(const tf_blas_plan *p, bool f64_compute, tf_blas_scalars *s);

#endif
