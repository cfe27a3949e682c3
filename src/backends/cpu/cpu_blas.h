/* GEMM for the CPU backend: a CBLAS library when the build found one
 * (OpenBLAS by default, BLIS accepted), run single-threaded per call while
 * tensorframe's pool splits the work. */
#ifndef TF_CPU_BLAS_H
#define TF_CPU_BLAS_H

#include <stdbool.h>
#include <stdint.h>

/* One row-major GEMM: C[m,n] = A[m,k] @ B[k,n], with row strides lda/ldb/ldc
 * and A or B optionally transposed in memory. f64 when is_f64, else f32.
 * False if no BLAS was built in. */
bool tf_cpu_blas_gemm(bool is_f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* y[rows] = alpha * M[rows, cols] @ x + beta * y, M row-major with row
 * stride ldm, or M's transpose when trans (then M is [cols, rows] in
 * memory); x's elements incx apart. False if no BLAS was built in. */
bool tf_cpu_blas_gemv(bool is_f64, bool trans, int64_t rows, int64_t cols, double alpha, const void *m, int64_t ldm,
                      const void *x, int64_t incx, double beta, void *y);
/* tf_cpu_blas_gemm sliced over the CPU backend's pool, one single-threaded
 * library call per slice (cpu_blas_kernels.c); the library's own threads
 * stay asleep. Called outside a parallel region it uses every thread. */
void tf_cpu_blas_gemm_pooled(bool is_f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                             int64_t ldc);
bool tf_cpu_have_blas(void);
/* GEMM calls made through the library so far (the tf_cpu_blas_calls extra). */
uint64_t tf_cpu_blas_calls(void);
const char *tf_cpu_blas_name(void);

#endif
