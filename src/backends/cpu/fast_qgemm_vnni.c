/* Many activation rows (a prompt) times a quantized weight with
 * AVX512-VNNI, every block format through one kernel.
 *
 * Eight weight rows at a time are repacked into a panel that gives each
 * row one int32 lane: for every 4 elements, the 8 rows' 4 codes side by
 * side (32 bytes), so one vpdpbusd multiplies 4 elements of 8 rows by the
 * same 4 activation codes (broadcast) and sums them into the rows' lanes.
 * A block of 32 elements is 8 of them into an int32 accumulator, then one
 * f32 step for the 8 rows: the rows' scales as a vector times the
 * activation block's scale. The float work is shared by 8 rows, where the
 * row-at-a-time dot products (fast_qdot.inc) pay it for each; the panel
 * (one byte a weight, 9 KiB for K = 1024) stays in L1 while every
 * activation row passes over it, four at a time.
 *
 * Codes are the formats' signed levels (tf_cpu_quant_levels) plus 128, as
 * unsigned bytes (vpdpbusd multiplies unsigned by signed, without
 * saturation); the 128 and the formats' mins come out through the
 * activation block sums: x = sc * (u - 128) - mn, so a 16-element group
 * contributes d_x (sc * (u . q) - (mn + 128 sc) * sum q). Formats with one
 * scale per 32 take one f32 step per block; Q2_K, Q3_K and Q6_K (a scale
 * per 16) take two. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_quant.h"

#define NR 8      /* weight rows per panel: one int32 lane each */
#define MR 4      /* activation rows per tile */

typedef struct qpanel {
    uint8_t *codes;     /* [K / 32][8 quads][NR rows][4 bytes] */
    float *sc, *off;    /* [K / 16][NR]: the group's scale, and mn + 128 sc */
} qpanel;

size_t tf_cpu_qgemm_panel_bytes(int64_t k) { return (size_t)k * NR + 2 * sizeof(float) * (size_t)(k / 16) * NR + 64; }

static qpanel panel_at(void *buf, int64_t k) {
    uint8_t *p = buf;
    qpanel q = {p, NULL, NULL};
    q.sc = (float *)(p + ((size_t)k * NR + 63) / 64 * 64);
    q.off = q.sc + (k / 16) * NR;
    return q;
}

/* Does the format have one scale per 32 elements (the two halves' equal)? */
static bool scale_per_32(tf_dtype wt) { return wt != TF_Q2_K && wt != TF_Q3_K && wt != TF_Q6_K; }

/* Weight rows [0, rows) (rows <= NR; the rest zero) into the panel. */
static void repack(tf_dtype wt, const uint8_t *w, int64_t ldw, int rows, int64_t k, qpanel *p) {
    const int64_t block = (int64_t)tf_dtype_block_size(wt), bytes = (int64_t)tf_dtype_size(wt);
    int8_t v[256];
    float sc[16], mn[16];
    for (int r = 0; r < NR; r++)
        for (int64_t b = 0; b < k / block; b++) {
            if (r < rows) {
                tf_cpu_quant_levels(wt, w + r * ldw + b * bytes, v, sc, mn);
            } else {
                memset(v, 0, sizeof v);
                memset(sc, 0, sizeof sc);
                memset(mn, 0, sizeof mn);
            }
            for (int64_t q = 0; q < block / 4; q++) {          /* 4 elements: signed to unsigned by the top bit */
                uint32_t four;
                memcpy(&four, v + 4 * q, 4);
                four ^= 0x80808080u;
                const int64_t quad = (b * block) / 4 + q;       /* 8 quads a 32-element block */
                memcpy(p->codes + (quad * NR + r) * 4, &four, 4);
            }
            for (int g = 0; g < block / 16; g++) {
                const int64_t at = (b * block / 16 + g) * NR + r;
                p->sc[at] = sc[g];
                p->off[at] = mn[g] + 128 * sc[g];
            }
        }
}

static inline __m256i quad_of(const int8_t *q) {
    int32_t four;
    memcpy(&four, q, 4);
    return _mm256_set1_epi32(four);
}

/* Up to MR activation rows from i0 against the panel; columns j0 .. j0 + nr. */
static inline __attribute__((always_inline)) void tile(const qpanel *p, bool per32, int64_t k, const tf_q8_rows *x,
                                                        int64_t i0, int mr, float *c, int64_t ldc, int64_t j0, int nr) {
    __m256 acc[MR];
    const int8_t *q[MR];
    const float *d[MR], *ds[MR];
    const int32_t *s[MR];
    for (int i = 0; i < MR; i++) {
        acc[i] = _mm256_setzero_ps();
        const int64_t row = i0 + (i < mr ? i : 0);
        q[i] = x->q + row * k;
        d[i] = x->d + row * (k / 32);
        ds[i] = x->ds + row * (k / 32);
        s[i] = x->s + row * (k / 16);
    }
    for (int64_t kb = 0; kb < k / 32; kb++) {
        const __m256i *wq = (const __m256i *)(p->codes + kb * 8 * 32);
        if (per32) {
            __m256i dot[MR];
            for (int i = 0; i < mr; i++) dot[i] = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                const __m256i wv = _mm256_loadu_si256(wq + j);
                for (int i = 0; i < mr; i++) dot[i] = _mm256_dpbusd_epi32(dot[i], wv, quad_of(q[i] + 32 * kb + 4 * j));
            }
            const __m256 sc = _mm256_loadu_ps(p->sc + 2 * kb * NR), off = _mm256_loadu_ps(p->off + 2 * kb * NR);
            for (int i = 0; i < mr; i++) {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(sc, _mm256_set1_ps(d[i][kb])), acc[i]);
                acc[i] = _mm256_fnmadd_ps(off, _mm256_set1_ps(ds[i][kb]), acc[i]);
            }
        } else {
            for (int h = 0; h < 2; h++) {
                __m256i dot[MR];
                for (int i = 0; i < mr; i++) dot[i] = _mm256_setzero_si256();
                for (int j = 4 * h; j < 4 * h + 4; j++) {
                    const __m256i wv = _mm256_loadu_si256(wq + j);
                    for (int i = 0; i < mr; i++) dot[i] = _mm256_dpbusd_epi32(dot[i], wv, quad_of(q[i] + 32 * kb + 4 * j));
                }
                const int64_t g = 2 * kb + h;
                const __m256 sc = _mm256_loadu_ps(p->sc + g * NR), off = _mm256_loadu_ps(p->off + g * NR);
                for (int i = 0; i < mr; i++) {
                    const __m256 dx = _mm256_set1_ps(d[i][kb]);
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(sc, dx), acc[i]);
                    acc[i] = _mm256_fnmadd_ps(off, _mm256_mul_ps(dx, _mm256_set1_ps((float)s[i][g])), acc[i]);
                }
            }
        }
    }
    for (int i = 0; i < mr; i++) {
        float out[NR];
        _mm256_storeu_ps(out, acc[i]);
        memcpy(c + (i0 + i) * ldc + j0, out, sizeof(float) * (size_t)nr);
    }
}

static void rows_against_panel(const qpanel *p, bool per32, int64_t m, int64_t k, const tf_q8_rows *x, float *c,
                               int64_t ldc, int64_t j0, int nr) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile(p, per32, k, x, i, MR, c, ldc, j0, nr);
    for (; i < m; i++) tile(p, per32, k, x, i, 1, c, ldc, j0, nr);
}

/* c[i, j] = x_i . w_j for every activation row and weight rows [j0, j1),
 * eight at a time through `buf` (tf_cpu_qgemm_panel_bytes(k) bytes). */
void tf_cpu_qgemm_vnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                            int64_t ldw, float *c, int64_t ldc, void *buf) {
    const int64_t k = x->k;
    qpanel p = panel_at(buf, k);
    const bool per32 = scale_per_32(wt);
    for (int64_t j = j0; j < j1; j += NR) {
        const int nr = (int)(j1 - j < NR ? j1 - j : NR);
        repack(wt, w + j * ldw, ldw, nr, k, &p);
        rows_against_panel(&p, per32, m, k, x, c, ldc, j, nr);
    }
}
