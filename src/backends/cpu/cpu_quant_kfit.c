/* The K-quants' encoders (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) as ggml encodes
 * without an importance matrix (ggml_quantize_chunk: the bytes
 * llama-quantize writes), so a tensor cast here and the file llama.cpp
 * makes from the same floats are the same bytes (gguf_dequant checks that
 * against libggml's own output, tests/gguf/fixtures/ggml_encode.npz).
 *
 * Each block is fitted in two steps. First every sub-block (16 or 32
 * elements) gets its own f32 scale (and min) by a small search: the
 * unsigned formats (Q2_K, Q4_K, Q5_K) a least-squares fit of scale and min
 * over a sweep of candidate step counts, the signed ones (Q3_K, Q6_K) the
 * scale that best explains the elements in a weighted least-squares sense.
 * Then the sub-block scales are rounded against one f16 block scale (the
 * largest maps to the top code) and every element is rounded again
 * against its rounded scale; a sub-block whose rounded scale is zero keeps
 * the codes of its search.
 *
 * Bit-exactness needs ggml's f32 operations in ggml's order: every sum
 * below accumulates left to right, products group as written, and rounding
 * is ggml's nearest_int (half to even through the f32 mantissa). The file
 * must not be built with FMA contraction (no -mfma here). */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "cpu_quant.h"

#define ALL_ZERO 1e-15f   /* a sub-block below this is all zero */

static int nearest(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = tf_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static float f16_of(const uint8_t *p) { return tf_cpu_q_f16(p); }

/* ---- sub-block fits ---- */

/* x ~ scale * L - m with L in 0..nmax and m >= 0 (returned in *neg_min),
 * weights w; the
 * error measured as |diff| (mad) or diff^2. Starts from the range's step,
 * then tries nstep + 1 step counts nmax + rmin + rdelta * i, keeping the
 * least error. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep, bool mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp(nearest(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    uint8_t trial[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp(nearest(iscale * (x[i] - min)), 0, nmax);
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0)) continue;                 /* (a NaN skips, as there) */
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * trial[i] + this_min - x[i];
            diff = mad ? fabsf(diff) : diff * diff;
            error += w[i] * diff;
        }
        if (error < best_error) {
            memcpy(L, trial, (size_t)n);
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* The element of largest magnitude, its sign kept (the first such); 0
 * when every element is below ALL_ZERO. */
static float extreme(const float *x, int n) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    return amax < ALL_ZERO ? 0.f : max;
}

/* Q3_K's sub-block fit: levels -nmax..nmax-1 (stored + nmax), weights x^2;
 * from the extreme element's step, up to 5 passes that move single
 * levels where that raises sumlx^2 / suml2 (the weighted fit's quality). */
static float fit_signed_refine(int n, int nmax, const float *x, int8_t *L) {
    const float max = extreme(x, n);
    if (max == 0) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int l = clamp(nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (l == L[i]) continue;
            slx += w * x[i] * l;
            sl2 += w * l * l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)l;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q6_K's sub-block fit: levels -nmax..nmax-1 (stored + nmax), weights x^2;
 * the extreme element's step and 18 steps around it (nmax +- 0.1 i), the
 * one with the best sumlx^2 / suml2 kept. */
static void levels_at(int n, int nmax, const float *x, float iscale, float *sumlx, float *suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
    }
}

static float fit_signed_sweep(int n, int nmax, const float *x, int8_t *L) {
    const float max = extreme(x, n);
    if (max == 0) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx, suml2;
    for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clamp(nearest(iscale * x[i]), -nmax, nmax - 1));
    levels_at(n, nmax, x, iscale, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        levels_at(n, nmax, x, iscale, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clamp(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ---- packing (the layouts of cpu_quant_ext.c's header) ---- */

/* 2-bit codes of 256 elements: element e in byte 32 (e / 128) + e % 32 at bit 2 ((e % 128) / 32). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    memset(qs, 0, 64);
    for (int e = 0; e < 256; e++) qs[32 * (e / 128) + e % 32] |= (uint8_t)((L[e] & 3) << (2 * ((e % 128) / 32)));
}

/* 4-bit codes of 256 elements, sub-blocks 2j and 2j + 1 sharing 32 bytes. */
static void pack_nibbles(const uint8_t *L, uint8_t *qs) {
    memset(qs, 0, 128);
    for (int e = 0; e < 256; e++) qs[32 * (e / 64) + e % 32] |= (uint8_t)((L[e] & 15) << (4 * ((e / 32) % 2)));
}

/* ---- the encoders ---- */

/* The sub-blocks' f32 scales (and mins) rounded to `bits` against a block
 * scale that maps the largest to the top code. */
static float block_step(float max_value, float top) { return max_value > 0 ? top / max_value : 0.f; }

void tf_cpu_q2_k_encode(const float *x, uint8_t *b) {
    uint8_t L[256];
    float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    memset(b, 0, 84);
    if (max_scale > 0) {
        const float iscale = block_step(max_scale, 15.f);
        for (int j = 0; j < 16; j++) b[j] = (uint8_t)nearest(iscale * scales[j]);
        put_f16(b + 80, max_scale / 15.f);
    }
    if (max_min > 0) {
        const float iscale = block_step(max_min, 15.f);
        for (int j = 0; j < 16; j++) b[j] |= (uint8_t)(nearest(iscale * mins[j]) << 4);
        put_f16(b + 82, max_min / 15.f);
    }
    for (int j = 0; j < 16; j++) {
        const float d = f16_of(b + 80) * (b[j] & 0xF);
        if (!d) continue;
        const float dm = f16_of(b + 82) * (b[j] >> 4);
        for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clamp(nearest((x[16 * j + l] + dm) / d), 0, 3);
    }
    pack_2bit(L, b + 16);
}

void tf_cpu_q3_k_encode(const float *x, uint8_t *b) {
    int8_t L[256];
    float scales[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_signed_refine(16, 4, x + 16 * j, L + 16 * j);
        if (fabsf(scales[j]) > amax) {
            amax = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    memset(b, 0, 110);
    uint8_t *s = b + 96;
    if (max_scale) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) {
            const int l = clamp((int8_t)nearest(iscale * scales[j]), -32, 31) + 32;
            s[j % 8] |= (uint8_t)((l & 0xF) << (4 * (j / 8)));
            s[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        put_f16(b + 108, 1 / iscale);
    }
    for (int j = 0; j < 16; j++) {
        const float d = f16_of(b + 108) * tf_cpu_q3k_scale(s, j);
        if (!d) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clamp(nearest(x[16 * j + l] / d), -4, 3) + 4);
    }
    uint8_t low[256];
    for (int e = 0; e < 256; e++) {
        if (L[e] > 3) b[e % 32] |= (uint8_t)(1 << (e / 32));    /* the high bit: level >= 0 */
        low[e] = (uint8_t)(L[e] & 3);
    }
    pack_2bit(low, b + 32);
}

/* Q4_K and Q5_K: per 32 a scale and a min by fit_scale_min, weighted by
 * rms(x) + |x|, both rounded to 6 bits against f16 d and dmin. */
static void k_scale_min_encode(const float *x, int nmax, float rmin, int nstep, uint8_t *dd, uint8_t *scales,
                               uint8_t *L) {
    float w[32], sc[8], mn[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep, false);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    const float inv_scale = block_step(max_scale, 63.f), inv_min = block_step(max_min, 63.f);
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = (uint8_t)nearest(inv_scale * sc[j]), lm = (uint8_t)nearest(inv_min * mn[j]);
        tf_cpu_q4k_put_scale_min(scales, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    put_f16(dd, max_scale / 63.f);
    put_f16(dd + 2, max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int s, m;
        tf_cpu_q4k_scale_min(scales, j, &s, &m);
        const float d = f16_of(dd) * s;
        if (!d) continue;
        const float dm = f16_of(dd + 2) * m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clamp(nearest((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void tf_cpu_q4_k_encode(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_scale_min_encode(x, 15, -1.f, 20, b, b + 4, L);
    pack_nibbles(L, b + 16);
}

void tf_cpu_q5_k_encode(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_scale_min_encode(x, 31, -0.5f, 15, b, b + 4, L);
    uint8_t *qh = b + 16;
    memset(qh, 0, 32);
    for (int e = 0; e < 256; e++) qh[e % 32] |= (uint8_t)((L[e] >> 4) << (e / 32));
    pack_nibbles(L, b + 48);
}

void tf_cpu_q6_k_encode(const float *x, uint8_t *b) {
    int8_t L[256];
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = fit_signed_sweep(16, 32, x + 16 * j, L + 16 * j);
        if (fabsf(scales[j]) > max_abs) {
            max_abs = fabsf(scales[j]);
            max_scale = scales[j];
        }
    }
    memset(b, 0, 210);
    if (max_abs < ALL_ZERO) return;                 /* d = 0: every element decodes to 0 */
    const float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    int8_t *sc = (int8_t *)(b + 192);
    for (int j = 0; j < 16; j++) {
        const int v = nearest(iscale * scales[j]);
        sc[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; j++) {
        const float d = f16_of(b + 208) * sc[j];
        if (!d) continue;
        for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clamp(nearest(x[16 * j + l] / d), -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int e = 0; e < 256; e++) {
        const int r = e / 32, c = e % 32, q = (uint8_t)L[e];
        ql[64 * (r / 4) + 32 * (r % 2) + c] |= (uint8_t)((q & 0x0F) << (4 * ((r % 4) / 2)));
        qh[32 * (r / 4) + c] |= (uint8_t)((q >> 4) << (2 * (r % 4)));
    }
}
