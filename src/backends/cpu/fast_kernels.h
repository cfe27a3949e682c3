/* Fast f32 kernels for contiguous data, chosen at run time by CPUID
 * (AVX-512, AVX2+FMA, or a generic vector build), overriding the reference
 * kernels entry by entry. TF_CPU_KERNELS=reference turns them off;
 * TF_CPU_ISA=avx512|avx2|generic caps the ISA (for testing). */
#ifndef TF_FAST_KERNELS_H
#define TF_FAST_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/ops.h"   /* binary kernels take the op's own value: TF_OP_ADD, ... */

/* What the environment allows, read strictly (tf_host()->env_choice):
 * TF_CPU_KERNELS=reference (or fast, the default) and TF_CPU_ISA's cap. */
enum { TF_CPU_ISA_ALL, TF_CPU_ISA_AVX512, TF_CPU_ISA_AVXVNNI, TF_CPU_ISA_AVX2, TF_CPU_ISA_GENERIC };
bool tf_cpu_reference_kernels(void);
int tf_cpu_isa_cap(void);

/* The weight's storage in tf_fast_kernels.linear. */
enum { TF_FAST_W_F32, TF_FAST_W_F16, TF_FAST_W_BF16 };

typedef struct tf_fast_kernels {
    const char *name;
    int lanes;                           /* f32 lanes of a vector */
    /* o = a op b over n elements; sa/sb 1 = contiguous, 0 = a repeated scalar */
    void (*binary)(int op, int64_t n, float *o, const float *a, int sa, const float *b, int sb);
    double (*sum)(int64_t n, const float *x);
    /* false if the row holds a NaN or is all -inf: use the reference */
    bool (*softmax_row)(int64_t n, float *o, const float *x, bool log_softmax);
    void (*norm_row)(int64_t n, float *o, const float *x, const float *w, const float *b, float eps, bool center);
    /* x = exp(x - shift) in place (-inf gives 0); returns the sum */
    float (*exp_shift_sum)(int64_t n, float *x, float shift);
    /* Skinny GEMM, row-major: columns [j0, j1) of C[m, n] = A @ B for m <= 8
     * (B's rows read once), and rows [i0, i1) for n <= 8 with bt = B^T [n, k]. */
    void (*gemm_small_m)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda, const float *b,
                         int64_t ldb, float *c, int64_t ldc);
    void (*gemm_small_n)(int64_t i0, int64_t i1, int64_t n, int64_t k, const float *a, int64_t lda, const float *bt,
                         float *c, int64_t ldc);
    /* Columns [j0, j1) of C = A @ W^T for m <= 8, W row-major [n, k] (a linear
     * layer's weight): dot products along k. */
    void (*gemm_rows)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda, const float *w,
                      int64_t ldw, float *c, int64_t ldc);
    /* f16 (bf16 false) or bf16 <-> f32 over n contiguous elements; rounding
     * to nearest even as tf_f32_to_f16 / tf_f32_to_bf16. */
    void (*widen)(int64_t n, const uint16_t *src, float *dst, bool bf16);
    void (*narrow)(int64_t n, const float *src, uint16_t *dst, bool bf16);
    /* Half-precision skinny GEMM into f32 c, f32 accumulation, a already f32:
     * columns [j0, j1) of A @ B with B row-major (ldb), and of A @ W^T with W
     * row-major [n, k] (a linear layer's weight). */
    void (*gemm_small_m_half)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda,
                              const uint16_t *b, int64_t ldb, bool bf16, float *c, int64_t ldc);
    void (*gemm_rows_half)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda,
                           const uint16_t *w, int64_t ldw, bool bf16, float *c, int64_t ldc);
    /* A @ W^T for bf16 A and W with AVX512-BF16 dot products (vdpbf16ps: pairs
     * multiplied exactly, summed in f32); NULL where the CPU lacks them. */
    void (*gemm_rows_bf16_dp)(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t *a, int64_t lda,
                              const uint16_t *w, int64_t ldw, float *c, int64_t ldc);
    /* bf16 products of many rows with AVX512-BF16 (NULL where the CPU lacks
     * it): C[0:m, 0:nc] (f32, nc <= 32) = A @ B, A's rows as k/2 pairs of
     * bf16 packed in 32 bits (lda in pairs), B as a panel of 32 columns in
     * the pair layout tf_bf16_pack_panel (cpu_blas_kernels.c) writes. */
    void (*gemm_bf16_panel)(int64_t m, int64_t nc, int64_t pairs, const uint32_t *a, int64_t lda, const uint16_t *panel,
                            float *c, int64_t ldc);
    /* Rows [0, nc) (nc <= 32) of a bf16 [n, k] weight (k = 2 * pairs, row
     * stride ldw) into that panel layout, transposed in registers. */
    void (*bf16_pack_panel_rows)(const uint16_t *w, int64_t ldw, int64_t nc, int64_t pairs, uint16_t *panel);
    /* A linear layer: c[i, j] = bias[j] (0 when bias is NULL) + dot(a row i,
     * w row j) for every row i < m and columns [j0, j1); W row-major [n, k]
     * stored as wkind (TF_FAST_W_*), a f32, f32 accumulation. */
    void (*linear)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda, const void *w,
                   int64_t ldw, int wkind, const float *bias, float *c, int64_t ldc);
    /* The same product for many rows (from a few dozen): W copied panel by
     * panel into L1 and multiplied as outer products. */
    void (*linear_packed)(int64_t m, int64_t j0, int64_t j1, int64_t k, const float *a, int64_t lda, const void *w,
                          int64_t ldw, int wkind, const float *bias, float *c, int64_t ldc);
    /* o = op(x) over n elements for the unary formulas with a SIMD body
     * (TF_FORMULA_SIMD_UNARY), with leaky_relu's alpha and clamp's lo, hi;
     * o may be x. false (nothing written) for any other op. */
    bool (*unary)(int op, int64_t n, float *o, const float *x, float alpha, float lo, float hi);
    /* One head of attention over a short sequence, without a library call:
     * s[r, 0:cols rounded up to lanes] = scale * q_r . kt[:, c] with the keys
     * transposed and zero-padded (kt [d, ldkt]); and o = p @ v for p
     * [rows, cols], v [cols, dv] (row strides ldp, ldv, ldo). */
    void (*attn_scores)(int64_t rows, int64_t cols, int64_t d, const float *q, int64_t ldq, const float *kt,
                        int64_t ldkt, float scale, float *s, int64_t lds);
    void (*attn_values)(int64_t rows, int64_t cols, int64_t dv, const float *p, int64_t ldp, const float *v,
                        int64_t ldv, float *o, int64_t ldo);
} tf_fast_kernels;

/* The table for this CPU, or NULL when fast kernels are off. */
const tf_fast_kernels *tf_fast(void);

#endif
