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
 * activation row passes over it, four at a time, two panels (16 weight
 * rows) per broadcast activation quad.
 *
 * Codes are unsigned bytes u (vpdpbusd multiplies unsigned by signed,
 * without saturation) with x = sc * u - off per 16 elements; the offsets
 * (mins, the levels' zero points) come out through the activation block
 * sums, so a 16-element group contributes d_x (sc * (u . q) - off * sum q)
 * (the repack below says what u, sc and off are per format). Formats with one
 * scale per 32 take one f32 step per block; Q2_K, Q3_K and Q6_K (a scale
 * per 16) take two. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_quant.h"
#include "fast_qcodes.h"

#define NR 8      /* weight rows per panel: one int32 lane each */
#define MR 4      /* activation rows per tile */

typedef struct qpanel {
    uint8_t *codes;     /* [K / 32][8 quads][NR rows][4 bytes] */
    float *sc, *off;    /* [K / 16][NR]: the group's scale and offset (x = sc u - off) */
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

/* ---- the panel repack ----
 * Each block's codes as unsigned bytes u, straight from the file's bits
 * (fast_qcodes.h), and per 16 elements a scale and an offset with
 * x = sc * u - off: Q4_0's offset is 8 d, Q4_1's -m, the K-quants' mins
 * and level offsets (Q3_K's 4 sc, Q6_K's 32 sc) likewise; the signed
 * formats (Q8_0, IQ4_NL, IQ4_XS) add 128 to their levels (vpdpbusd's
 * first operand is unsigned) and take 128 sc. Eight rows' 32 codes are
 * then transposed 4 bytes at a time into the panel's quads. (Decoding
 * through tf_cpu_quant_levels, one scalar level at a time, cost as much
 * as a third of the products at 512 activation rows.) */

/* Chunk c (32 elements) of a block as unsigned codes. */
static inline __attribute__((always_inline)) __m256i chunk_codes(tf_dtype wt, const uint8_t *w, int c) {
    const __m256i top = _mm256_set1_epi8((char)0x80);
    switch (wt) {
    case TF_Q4_0: return nibbles_16(w + 2);
    case TF_Q4_1: return nibbles_16(w + 4);
    case TF_Q5_0: return _mm256_or_si256(nibbles_16(w + 6), fifth_bits(load_u32(w + 2)));
    case TF_Q5_1: return _mm256_or_si256(nibbles_16(w + 8), fifth_bits(load_u32(w + 4)));
    case TF_Q8_0: return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + 2)), top);
    case TF_IQ4_NL: return _mm256_xor_si256(iq4_levels(w + 2), top);
    case TF_IQ4_XS: return _mm256_xor_si256(k_chunk(TF_IQ4_XS, w, c), top);
    default: return k_chunk(wt, w, c);
    }
}

/* A block's scales and offsets, per 16 elements (block / 16 of them). */
static inline __attribute__((always_inline)) void block_scales(tf_dtype wt, const uint8_t *w, float *sc, float *off) {
    uint8_t b[16];
    switch (wt) {
    case TF_Q4_0: case TF_Q5_0: case TF_Q8_0: case TF_IQ4_NL: {
        const float d = f16(w);
        sc[0] = sc[1] = d;
        off[0] = off[1] = d * (wt == TF_Q4_0 ? 8 : wt == TF_Q5_0 ? 16 : 128);
        return;
    }
    case TF_Q4_1: case TF_Q5_1:
        sc[0] = sc[1] = f16(w);
        off[0] = off[1] = -f16(w + 2);
        return;
    case TF_Q2_K: {
        const float d = f16(w + 80), dmin = f16(w + 82);
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)(w[g] & 15);
            off[g] = dmin * (float)(w[g] >> 4);
        }
        return;
    }
    case TF_Q3_K: {
        const float d = f16(w + 108);
        k3_scales(w + 96, b);
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)((int)b[g] - 32);
            off[g] = 4 * sc[g];
        }
        return;
    }
    case TF_Q6_K: {
        const float d = f16(w + 208);
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)(int8_t)w[192 + g];
            off[g] = 32 * sc[g];
        }
        return;
    }
    case TF_IQ4_XS: {
        const float d = f16(w);
        const int high = w[2] | w[3] << 8;
        for (int j = 0; j < 8; j++) {
            const int ls = ((w[4 + j / 2] >> (4 * (j % 2))) & 15) | ((high >> (2 * j)) & 3) << 4;
            sc[2 * j] = sc[2 * j + 1] = d * (float)(ls - 32);
            off[2 * j] = off[2 * j + 1] = 128 * sc[2 * j];
        }
        return;
    }
    default: {                                           /* Q4_K, Q5_K */
        const float d = f16(w), dmin = f16(w + 2);
        k4_scales_mins(w + 4, b);
        for (int j = 0; j < 8; j++) {
            sc[2 * j] = sc[2 * j + 1] = d * (float)b[j];
            off[2 * j] = off[2 * j + 1] = dmin * (float)b[8 + j];
        }
        return;
    }
    }
}

/* Row r's 8 quads in v[r] -> quad t of the 8 rows in v[t]. */
static inline void transpose_quads(__m256i v[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {                        /* rows 0-3, rows 4-7 */
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);       /* quads 0 | 4 */
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);       /* quads 1 | 5 */
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);   /* quads 2 | 6 */
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);   /* quads 3 | 7 */
    }
    for (int q = 0; q < 4; q++) {
        v[q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x20);
        v[q + 4] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x31);
    }
}

static inline __attribute__((always_inline)) void repack_as(tf_dtype wt, const uint8_t *w, int64_t ldw, int rows,
                                                             int64_t k, qpanel *p) {
    const int64_t block = (int64_t)tf_dtype_block_size(wt), bytes = (int64_t)tf_dtype_size(wt);
    const int chunks = (int)(block / 32), groups = (int)(block / 16);
    for (int64_t b = 0; b < k / block; b++) {
        for (int r = 0; r < NR; r++) {
            float sc[16] = {0}, off[16] = {0};
            if (r < rows) block_scales(wt, w + r * ldw + b * bytes, sc, off);
            for (int g = 0; g < groups; g++) {
                p->sc[(b * groups + g) * NR + r] = sc[g];
                p->off[(b * groups + g) * NR + r] = off[g];
            }
        }
        for (int c = 0; c < chunks; c++) {
            __m256i v[8];
            for (int r = 0; r < NR; r++)
                v[r] = r < rows ? chunk_codes(wt, w + r * ldw + b * bytes, c) : _mm256_setzero_si256();
            transpose_quads(v);
            uint8_t *to = p->codes + (b * chunks + c) * 8 * 32;
            for (int q = 0; q < 8; q++) _mm256_storeu_si256((__m256i *)(to + 32 * q), v[q]);
        }
    }
}

/* Weight rows [0, rows) (rows <= NR; the rest zero) into the panel. */
static void repack(tf_dtype wt, const uint8_t *w, int64_t ldw, int rows, int64_t k, qpanel *p) {
    switch (wt) {
    case TF_Q4_0: repack_as(TF_Q4_0, w, ldw, rows, k, p); return;
    case TF_Q4_1: repack_as(TF_Q4_1, w, ldw, rows, k, p); return;
    case TF_Q5_0: repack_as(TF_Q5_0, w, ldw, rows, k, p); return;
    case TF_Q5_1: repack_as(TF_Q5_1, w, ldw, rows, k, p); return;
    case TF_Q8_0: repack_as(TF_Q8_0, w, ldw, rows, k, p); return;
    case TF_IQ4_NL: repack_as(TF_IQ4_NL, w, ldw, rows, k, p); return;
    case TF_Q2_K: repack_as(TF_Q2_K, w, ldw, rows, k, p); return;
    case TF_Q3_K: repack_as(TF_Q3_K, w, ldw, rows, k, p); return;
    case TF_Q4_K: repack_as(TF_Q4_K, w, ldw, rows, k, p); return;
    case TF_Q5_K: repack_as(TF_Q5_K, w, ldw, rows, k, p); return;
    case TF_Q6_K: repack_as(TF_Q6_K, w, ldw, rows, k, p); return;
    default: repack_as(TF_IQ4_XS, w, ldw, rows, k, p); return;
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
