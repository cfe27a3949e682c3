/* A @ W^T for bf16 operands with AVX512-BF16 dot products (vdpbf16ps):
 * each instruction multiplies 32 bf16 pairs exactly and adds them into 16 f32
 * lanes. Built with -mavx512bf16 (CMakeLists.txt) and installed in the fast
 * table only when CPUID reports AVX512_BF16 (fast_select.c). */
#include <immintrin.h>
#include <stdint.h>

#include "fast_kernels.h"

void tf_fast_gemm_rows_bf16_dp(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t *a, int64_t lda,
                               const uint16_t *w, int64_t ldw, float *c, int64_t ldc);

static inline __m512bh load_bf16(const uint16_t *p, int64_t left) {
    if (left >= 32) return (__m512bh)_mm512_loadu_si512(p);
    return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1ull << left) - 1), p);   /* zeros add nothing */
}

void tf_fast_gemm_rows_bf16_dp(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t *a, int64_t lda,
                               const uint16_t *w, int64_t ldw, float *c, int64_t ldc) {
    for (int64_t j = j0; j < j1; j++) {
        const uint16_t *wr = w + j * ldw;
        for (int64_t i0 = 0; i0 < m; i0 += 4) {          /* four rows of a share each chunk of w */
            int64_t mi = m - i0 < 4 ? m - i0 : 4;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int64_t kk = 0; kk < k; kk += 32) {
                __m512bh wv = load_bf16(wr + kk, k - kk);
                for (int64_t i = 0; i < mi; i++) acc[i] = _mm512_dpbf16_ps(acc[i], load_bf16(a + (i0 + i) * lda + kk, k - kk), wv);
            }
            for (int64_t i = 0; i < mi; i++) c[(i0 + i) * ldc + j] = _mm512_reduce_add_ps(acc[i]);
        }
    }
}
