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

/* ---- many rows: C = A @ B from a packed panel of 32 columns ----
 * The panel holds B's values in k pairs, the layout vdpbf16ps reads: for
 * pair p, 64 values, column j's (B[2p][j], B[2p+1][j]) at 2j (columns 0-15
 * in the first vector, 16-31 in the second). A row's pair (a[2p], a[2p+1])
 * is broadcast as one 32-bit value, so each instruction adds two products
 * into 16 columns. Tiles of 12 rows x 32 columns keep 24 accumulators in
 * registers (of 32), and the panel (128 bytes per pair: 48 KiB at k = 384)
 * stays in L1/L2 while every row tile passes over it. */

void tf_fast_gemm_bf16_panel(int64_t m, int64_t nc, int64_t pairs, const uint32_t *a, int64_t lda, const uint16_t *panel,
                             float *c, int64_t ldc);

#define PANEL_MR 12

static inline __attribute__((always_inline)) void panel_tile(const int mr, int64_t pairs, const uint32_t *a, int64_t lda,
                                                             const uint16_t *panel, float *c, int64_t ldc,
                                                             __mmask16 m0, __mmask16 m1) {
    __m512 acc[PANEL_MR][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * 64), b1 = (__m512bh)_mm512_loadu_si512(panel + p * 64 + 32);
        for (int i = 0; i < mr; i++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[i * lda + p]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
    for (int i = 0; i < mr; i++) {
        _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
        _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
    }
}

/* C[0:m, 0:nc] (nc <= 32) from rows of a given as pairs (lda in pairs). */
void tf_fast_gemm_bf16_panel(int64_t m, int64_t nc, int64_t pairs, const uint32_t *a, int64_t lda, const uint16_t *panel,
                             float *c, int64_t ldc) {
    __mmask16 m0 = nc >= 16 ? 0xFFFF : (__mmask16)((1u << nc) - 1);
    __mmask16 m1 = nc >= 32 ? 0xFFFF : nc > 16 ? (__mmask16)((1u << (nc - 16)) - 1) : 0;
    int64_t i = 0;
    for (; i + PANEL_MR <= m; i += PANEL_MR) panel_tile(PANEL_MR, pairs, a + i * lda, lda, panel, c + i * ldc, ldc, m0, m1);
    int64_t left = m - i;                        /* the last rows: tiles of 8, 4, 2, 1 */
    if (left >= 8) { panel_tile(8, pairs, a + i * lda, lda, panel, c + i * ldc, ldc, m0, m1); i += 8; left -= 8; }
    if (left >= 4) { panel_tile(4, pairs, a + i * lda, lda, panel, c + i * ldc, ldc, m0, m1); i += 4; left -= 4; }
    if (left >= 2) { panel_tile(2, pairs, a + i * lda, lda, panel, c + i * ldc, ldc, m0, m1); i += 2; left -= 2; }
    if (left >= 1) panel_tile(1, pairs, a + i * lda, lda, panel, c + i * ldc, ldc, m0, m1);
}

/* ---- a [n, k] weight's rows into a panel: a transpose of 32-bit pairs ----
 * Row c of W (k even) is already its pairs, word p = (w[2p], w[2p+1]); the
 * panel wants word p of rows 0-31 side by side. 16 x 16 blocks of words
 * are transposed in registers (32-bit, then 64-bit unpacks within 128-bit
 * lanes, then lane shuffles), so each word moves once, in vectors. */

void tf_fast_bf16_pack_panel_rows(const uint16_t *w, int64_t ldw, int64_t nc, int64_t pairs, uint16_t *panel);

static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {           /* u[i + j], lane L: column 4L + j of rows i..i+3 */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
    }
}

/* Rows [0, nc) (nc <= 32) of W (row stride ldw elements, k = 2 * pairs)
 * into the panel layout of tf_fast_gemm_bf16_panel; rows past nc are 0. */
void tf_fast_bf16_pack_panel_rows(const uint16_t *w, int64_t ldw, int64_t nc, int64_t pairs, uint16_t *panel) {
    uint32_t *words = (uint32_t *)panel;
    for (int64_t cb = 0; cb < 32; cb += 16)
        for (int64_t pb = 0; pb < pairs; pb += 16) {
            int64_t np = pairs - pb < 16 ? pairs - pb : 16;
            __mmask16 m = (__mmask16)((1u << np) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = cb + i < nc ? _mm512_maskz_loadu_epi32(m, w + (cb + i) * ldw + 2 * pb) : _mm512_setzero_si512();
            transpose16(r);
            for (int q = 0; q < np; q++) _mm512_storeu_si512(words + (pb + q) * 32 + cb, r[q]);
        }
}
