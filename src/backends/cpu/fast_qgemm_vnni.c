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

static size_t one_panel_bytes(int64_t k) { return (size_t)k * NR + 2 * sizeof(float) * (size_t)(k / 16) * NR + 64; }

size_t tf_cpu_qgemm_panel_bytes(int64_t k) { return 2 * one_panel_bytes(k); }   /* two panels: 16 weight rows */

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

/* Up to MR activation rows from i0 against NP panels (16 weight rows for
 * two: each broadcast activation quad feeds NP vpdpbusd, so the broadcasts
 * and the per-block f32 step's activation scales are shared); columns
 * j0 .. j0 + nr, nr <= NP * NR. */
static inline __attribute__((always_inline)) void tile(const qpanel *p, int np, bool per32, int64_t k,
                                                        const tf_q8_rows *x, int64_t i0, int mr, float *c, int64_t ldc,
                                                        int64_t j0, int nr) {
    __m256 acc[2][MR];
    const int8_t *q[MR];
    const float *d[MR], *ds[MR];
    const int32_t *s[MR];
    for (int i = 0; i < MR; i++) {
        acc[0][i] = acc[1][i] = _mm256_setzero_ps();
        const int64_t row = i0 + (i < mr ? i : 0);
        q[i] = x->q + row * k;
        d[i] = x->d + row * (k / 32);
        ds[i] = x->ds + row * (k / 32);
        s[i] = x->s + row * (k / 16);
    }
    const int halves = per32 ? 1 : 2, quads = 8 / halves;   /* an f32 step per 32 elements, or per 16 */
    for (int64_t kb = 0; kb < k / 32; kb++) {
        for (int h = 0; h < halves; h++) {
            __m256i dot[2][MR];
            for (int t = 0; t < np; t++)
                for (int i = 0; i < mr; i++) dot[t][i] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = quads * h; j < quads * h + quads; j++) {
                __m256i wv[2];
                for (int t = 0; t < np; t++) wv[t] = _mm256_loadu_si256((const __m256i *)(p[t].codes + (kb * 8 + j) * 32));
                for (int i = 0; i < mr; i++) {
                    const __m256i xq = quad_of(q[i] + 32 * kb + 4 * j);
                    for (int t = 0; t < np; t++) dot[t][i] = _mm256_dpbusd_epi32(dot[t][i], wv[t], xq);
                }
            }
            const int64_t g = per32 ? 2 * kb : 2 * kb + h;
            for (int i = 0; i < mr; i++) {
                const __m256 dx = _mm256_set1_ps(d[i][kb]);
                const __m256 dxs = per32 ? _mm256_set1_ps(ds[i][kb]) : _mm256_mul_ps(dx, _mm256_set1_ps((float)s[i][g]));
                for (int t = 0; t < np; t++) {
                    const __m256 sc = _mm256_loadu_ps(p[t].sc + g * NR), off = _mm256_loadu_ps(p[t].off + g * NR);
                    acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t][i]), _mm256_mul_ps(sc, dx), acc[t][i]);
                    acc[t][i] = _mm256_fnmadd_ps(off, dxs, acc[t][i]);
                }
            }
        }
    }
    for (int i = 0; i < mr; i++) {
        float out[2 * NR];
        for (int t = 0; t < np; t++) _mm256_storeu_ps(out + t * NR, acc[t][i]);
        memcpy(c + (i0 + i) * ldc + j0, out, sizeof(float) * (size_t)nr);
    }
}

/* Every activation row against the panels; np and per32 are constants in
 * each instantiation, so tile's loops unroll into registers. */
static inline __attribute__((always_inline)) void rows_against(const qpanel *p, int np, bool per32, int64_t m,
                                                                int64_t k, const tf_q8_rows *x, float *c, int64_t ldc,
                                                                int64_t j0, int nr) {
    int64_t i = 0;
    for (; i + MR <= m; i += MR) tile(p, np, per32, k, x, i, MR, c, ldc, j0, nr);
    for (; i < m; i++) tile(p, np, per32, k, x, i, 1, c, ldc, j0, nr);
}

static void rows_against_panels(const qpanel *p, int np, bool per32, int64_t m, int64_t k, const tf_q8_rows *x,
                                float *c, int64_t ldc, int64_t j0, int nr) {
    if (np == 2 && per32) rows_against(p, 2, true, m, k, x, c, ldc, j0, nr);
    else if (np == 2) rows_against(p, 2, false, m, k, x, c, ldc, j0, nr);
    else if (per32) rows_against(p, 1, true, m, k, x, c, ldc, j0, nr);
    else rows_against(p, 1, false, m, k, x, c, ldc, j0, nr);
}

/* c[i, j] = x_i . w_j for every activation row and weight rows [j0, j1),
 * eight at a time through `buf` (tf_cpu_qgemm_panel_bytes(k) bytes). */
void tf_cpu_qgemm_vnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                            int64_t ldw, float *c, int64_t ldc, void *buf) {
    const int64_t k = x->k;
    const qpanel p[2] = {panel_at(buf, k), panel_at((char *)buf + one_panel_bytes(k), k)};
    const bool per32 = scale_per_32(wt);
    for (int64_t j = j0; j < j1; j += 2 * NR) {
        const int nr = (int)(j1 - j < 2 * NR ? j1 - j : 2 * NR), np = nr > NR ? 2 : 1;
        for (int t = 0; t < np; t++) {
            const int rows = nr - t * NR < NR ? nr - t * NR : NR;
            repack(wt, w + (j + t * NR) * ldw, ldw, rows, k, (qpanel *)&p[t]);
        }
        rows_against_panels(p, np, per32, m, k, x, c, ldc, j, nr);
    }
}
