/* The CBLAS bridge. OpenBLAS and BLIS keep thread pools of their own; they
 * are told to use one thread, so the CPU backend's pool is the only one and
 * a parallel region may call GEMM from every thread. */
#include "cpu_blas.h"

#ifdef TF_HAVE_CBLAS
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>

/* Library-specific thread controls, present or not. */
void openblas_set_num_threads(int n) __attribute__((weak));
void bli_thread_set_num_threads(long n) __attribute__((weak));

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t calls;

uint64_t tf_cpu_blas_calls(void) { return atomic_load(&calls); }

static void single_threaded(void) {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    if (bli_thread_set_num_threads) bli_thread_set_num_threads(1);
}

bool tf_cpu_blas_gemm(bool is_f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    pthread_once(&once, single_threaded);
    atomic_fetch_add(&calls, 1);
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if (is_f64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b, (int)ldb, (float)beta, c,
                    (int)ldc);
    return true;
}

bool tf_cpu_blas_gemv(bool is_f64, bool trans, int64_t rows, int64_t cols, double alpha, const void *m, int64_t ldm,
                      const void *x, int64_t incx, double beta, void *y) {
    pthread_once(&once, single_threaded);
    atomic_fetch_add(&calls, 1);
    /* CBLAS names the matrix as stored: [rows, cols], or [cols, rows] transposed. */
    enum CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
    int sm = (int)(trans ? cols : rows), sn = (int)(trans ? rows : cols);
    if (is_f64)
        cblas_dgemv(CblasRowMajor, t, sm, sn, alpha, m, (int)ldm, x, (int)incx, beta, y, 1);
    else
        cblas_sgemv(CblasRowMajor, t, sm, sn, (float)alpha, m, (int)ldm, x, (int)incx, (float)beta, y, 1);
    return true;
}

bool tf_cpu_have_blas(void) { return true; }
const char *tf_cpu_blas_name(void) { return TF_CBLAS_NAME; }
#else
bool tf_cpu_blas_gemm(bool is_f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    (void)is_f64; (void)trans_a; (void)trans_b; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)lda;
    (void)b; (void)ldb; (void)beta; (void)c; (void)ldc;
    return false;
}

bool tf_cpu_blas_gemv(bool is_f64, bool trans, int64_t rows, int64_t cols, double alpha, const void *m, int64_t ldm,
                      const void *x, int64_t incx, double beta, void *y) {
    (void)is_f64; (void)trans; (void)rows; (void)cols; (void)alpha; (void)m; (void)ldm; (void)x; (void)incx;
    (void)beta; (void)y;
    return false;
}

bool tf_cpu_have_blas(void) { return false; }
uint64_t tf_cpu_blas_calls(void) { return 0; }
const char *tf_cpu_blas_name(void) { return "none"; }
#endif
