/* The block formats the mixes people download add to the first five
 * (cpu_quant.c): Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS, decoded,
 * encoded and multiplied on the CPU.
 *
 * Layouts (ggml-common.h; every f16 at an even byte):
 *   Q5_0    32: f16 d, u32 qh, 16 bytes of nibbles; x = d * (q - 16)
 *   Q5_1    32: f16 d, f16 m, u32 qh, 16 bytes;     x = d * q + m
 *               (q = nibble | bit e of qh << 4; element e < 16 is byte e's
 *               low nibble, element e + 16 its high one)
 *   Q2_K   256: 16 bytes of 4-bit scale | 4-bit min << 4 (one per 16), 64
 *               bytes of 2-bit q, f16 d, f16 dmin; x = (d*sc) * q - dmin*m
 *   Q3_K   256: 32 bytes of high bits, 64 bytes of 2-bit low bits, 12 bytes
 *               of 6-bit signed scales (one per 16), f16 d;
 *               x = (d*sc) * (low - (high bit clear ? 4 : 0))
 *   Q5_K   256: f16 d, f16 dmin, Q4_K's 12 scale bytes, 32 bytes of high
 *               bits, 128 of nibbles; x = (d*sc) * q - dmin*m per 32
 *   IQ4_NL  32: f16 d, 16 bytes of nibbles; x = d * kv[nibble]
 *   IQ4_XS 256: f16 d, u16 high scale bits, 4 bytes of low scale nibbles,
 *               128 of nibbles; x = (d*(sc - 32)) * kv[nibble] per 32
 * In Q2_K and Q3_K the 2-bit codes of element e sit in byte 32*(e/128) +
 * e%32 at bit 2*((e%128)/32); Q3_K's high bit of e is bit e/32 of byte e%32
 * (Q5_K's the same with 32-element sub-blocks).
 *
 * Decoding follows the `gguf` package's NumPy operations one for one (each
 * product rounded to f32 before the add), so it is bit-identical to it.
 * Encoding: Q5_0, Q5_1, IQ4_NL and IQ4_XS as ggml_quantize_chunk does
 * without an importance matrix (the bytes llama-quantize writes; for the
 * Q5s that is quantize_row_*_ref, which the gguf package also follows);
 * the K-quants' likewise, in cpu_quant_kfit.c. */
#include <math.h>
#include <string.h>

#include "cpu_common.h"
#include "cpu_quant.h"

const int8_t tf_cpu_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static float f16_at(const uint8_t *p) { return tf_cpu_q_f16(p); }

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = tf_f32_to_f16(v);
    memcpy(p, &h, 2);
}


static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- the codes of a block as signed levels and per-16 scales ----
 * Every format (the first five too) is x = sc[g] * v[e] - mn[g] for the
 * 16-element group g of element e, with an integer level v in int8: the
 * scalar products of the later formats read them through this one view
 * (the integer GEMM's repack reads the bits with vector code instead,
 * fast_qgemm.inc). */

int tf_cpu_q3k_scale(const uint8_t *s, int g) {
    const int low = (s[g % 8] >> (4 * (g / 8))) & 0x0F, high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (low | high << 4) - 32;
}

int tf_cpu_iq4xs_scale(const uint8_t *b, int ib) {
    const int low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F, high = (b[2 + ib / 4] >> (2 * (ib % 4))) & 3;
    return (low | high << 4) - 32;
}

/* Q5_0 and Q5_1's 5-bit code of element e (0..31). */
static int q5_code(const uint8_t *qs, uint32_t qh, int e) {
    const int nib = e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4;
    return nib | (int)((qh >> e) & 1) << 4;
}

/* Q2_K and Q3_K's 2-bit code of element e. */
static int q2_code(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static int q3_level(const uint8_t *b, int e) {
    const int high = (b[e % 32] >> (e / 32)) & 1;
    return q2_code(b + 32, e) - (high ? 0 : 4);
}

static int q5k_code(const uint8_t *b, int e) {
    const int j = e / 32, l = e % 32;
    return ((b[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F) | ((b[16 + l] >> j) & 1) << 4;
}

static int iq4_index(const uint8_t *qs, int e) { return e % 32 < 16 ? qs[16 * (e / 32) + e % 32] & 0x0F : qs[16 * (e / 32) + e % 32 - 16] >> 4; }

void tf_cpu_quant_levels(tf_dtype wt, const uint8_t *b, int8_t *v, float *sc, float *mn) {
    switch (wt) {
    case TF_Q4_0: case TF_Q4_1: case TF_IQ4_NL: {       /* nibble j low is element j, high element j + 16 */
        const uint8_t *qs = b + (wt == TF_Q4_1 ? 4 : 2);
        for (int j = 0; j < 16; j++) {
            const int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
            v[j] = (int8_t)(wt == TF_IQ4_NL ? tf_cpu_iq4_values[lo] : wt == TF_Q4_0 ? lo - 8 : lo);
            v[j + 16] = (int8_t)(wt == TF_IQ4_NL ? tf_cpu_iq4_values[hi] : wt == TF_Q4_0 ? hi - 8 : hi);
        }
        sc[0] = sc[1] = f16_at(b);
        mn[0] = mn[1] = wt == TF_Q4_1 ? -f16_at(b + 2) : 0.0f;
        return;
    }
    case TF_Q8_0:
        for (int e = 0; e < 32; e++) v[e] = (int8_t)b[2 + e];
        sc[0] = sc[1] = f16_at(b);
        mn[0] = mn[1] = 0;
        return;
    case TF_Q4_K: {
        const float d = f16_at(b), dmin = f16_at(b + 2);
        for (int j = 0; j < 8; j++) {
            int s, m;
            tf_cpu_q4k_scale_min(b + 4, j, &s, &m);
            for (int l = 0; l < 32; l++) v[32 * j + l] = (int8_t)((b[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F);
            sc[2 * j] = sc[2 * j + 1] = d * (float)s;
            mn[2 * j] = mn[2 * j + 1] = dmin * (float)m;
        }
        return;
    }
    case TF_Q6_K: {
        const float d = f16_at(b + 208);
        for (int e = 0; e < 256; e++) {
            const int r = e / 32, c = e % 32;
            const int lo = (b[64 * (r / 4) + 32 * (r % 2) + c] >> (4 * ((r % 4) / 2))) & 0x0F;
            const int hi = (b[128 + 32 * (r / 4) + c] >> (2 * (r % 4))) & 3;
            v[e] = (int8_t)((lo | hi << 4) - 32);
        }
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)(int8_t)b[192 + g];
            mn[g] = 0;
        }
        return;
    }
    case TF_Q5_0: case TF_Q5_1: {
        const bool one = wt == TF_Q5_1;
        const uint32_t qh = u32_at(b + (one ? 4 : 2));
        for (int e = 0; e < 32; e++) v[e] = (int8_t)(q5_code(b + (one ? 8 : 6), qh, e) - (one ? 0 : 16));
        sc[0] = sc[1] = f16_at(b);
        mn[0] = mn[1] = one ? -f16_at(b + 2) : 0.0f;
        return;
    }
    case TF_Q2_K: {
        const float d = f16_at(b + 80), dmin = f16_at(b + 82);
        for (int e = 0; e < 256; e++) v[e] = (int8_t)q2_code(b + 16, e);
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)(b[g] & 0x0F);
            mn[g] = dmin * (float)(b[g] >> 4);
        }
        return;
    }
    case TF_Q3_K: {
        const float d = f16_at(b + 108);
        for (int e = 0; e < 256; e++) v[e] = (int8_t)q3_level(b, e);
        for (int g = 0; g < 16; g++) {
            sc[g] = d * (float)tf_cpu_q3k_scale(b + 96, g);
            mn[g] = 0;
        }
        return;
    }
    case TF_Q5_K: {
        const float d = f16_at(b), dmin = f16_at(b + 2);
        for (int e = 0; e < 256; e++) v[e] = (int8_t)q5k_code(b, e);
        for (int j = 0; j < 8; j++) {
            int s, m;
            tf_cpu_q4k_scale_min(b + 4, j, &s, &m);
            sc[2 * j] = sc[2 * j + 1] = d * (float)s;
            mn[2 * j] = mn[2 * j + 1] = dmin * (float)m;
        }
        return;
    }
    default: {                                            /* IQ4_XS */
        const float d = f16_at(b);
        for (int e = 0; e < 256; e++) v[e] = tf_cpu_iq4_values[iq4_index(b + 8, e)];
        for (int ib = 0; ib < 8; ib++) {
            sc[2 * ib] = sc[2 * ib + 1] = d * (float)tf_cpu_iq4xs_scale(b, ib);
            mn[2 * ib] = mn[2 * ib + 1] = 0;
        }
        return;
    }
    }
}

/* ---- decoding, in the gguf package's order of operations ---- */

static void q5_0_block(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const uint32_t qh = u32_at(b + 2);
    for (int e = 0; e < 32; e++) y[e] = d * (float)(q5_code(b + 6, qh, e) - 16);
}

static void q5_1_block(const uint8_t *b, float *y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    for (int e = 0; e < 32; e++) {
        const float p = d * (float)q5_code(b + 8, qh, e);
        y[e] = p + m;
    }
}

static void q2_k_block(const uint8_t *b, float *y) {
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int e = 0; e < 256; e++) {
        const float dl = d * (float)(b[e / 16] & 0x0F), ml = dmin * (float)(b[e / 16] >> 4);
        const float p = dl * (float)q2_code(b + 16, e);
        y[e] = p - ml;
    }
}

static void q3_k_block(const uint8_t *b, float *y) {
    const float d = f16_at(b + 108);
    for (int e = 0; e < 256; e++) {
        const float dl = d * (float)tf_cpu_q3k_scale(b + 96, e / 16);
        y[e] = dl * (float)q3_level(b, e);
    }
}

static void q5_k_block(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    for (int j = 0; j < 8; j++) {
        int s, m;
        tf_cpu_q4k_scale_min(b + 4, j, &s, &m);
        const float ds = d * (float)s, dm = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            const float p = ds * (float)q5k_code(b, 32 * j + l);
            y[32 * j + l] = p - dm;
        }
    }
}

static void iq4_nl_block(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    for (int e = 0; e < 32; e++) y[e] = d * (float)tf_cpu_iq4_values[iq4_index(b + 2, e)];
}

static void iq4_xs_block(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        const float dl = d * (float)tf_cpu_iq4xs_scale(b, ib);
        for (int l = 0; l < 32; l++) y[32 * ib + l] = dl * (float)tf_cpu_iq4_values[iq4_index(b + 8, 32 * ib + l)];
    }
}

/* ---- encoding ---- */

/* The element of largest magnitude, its sign kept (the first such). */
static float signed_absmax(const float *x, int n) {
    float best = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            best = x[i];
        }
    return best;
}

static void put_q5(uint8_t *qh_at, uint8_t *qs, const int *q) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
        qh |= (uint32_t)((q[j] >> 4) & 1) << j | (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int i = 0; i < 4; i++) qh_at[i] = (uint8_t)(qh >> (8 * i));
}

/* quantize_row_q5_0_ref: the extreme element maps to -16. */
static void q5_0_encode(const float *x, uint8_t *b) {
    const float d = signed_absmax(x, 32) / -16, id = d != 0 ? 1.0f / d : 0.0f;
    int q[32];
    for (int e = 0; e < 32; e++) {
        const int t = (int)(int8_t)(x[e] * id + 16.5f);   /* ggml truncates through int8 */
        q[e] = (uint8_t)(t < 31 ? t : 31);
    }
    put_f16(b, d);
    put_q5(b + 2, b + 6, q);
}

/* quantize_row_q5_1_ref: the range over 31 steps from the minimum. */
static void q5_1_encode(const float *x, uint8_t *b) {
    float lo = x[0], hi = x[0];
    for (int e = 1; e < 32; e++) {
        lo = x[e] < lo ? x[e] : lo;
        hi = x[e] > hi ? x[e] : hi;
    }
    const float d = (hi - lo) / 31, id = d != 0 ? 1.0f / d : 0.0f;
    int q[32];
    for (int e = 0; e < 32; e++) {
        const int t = (int)(uint8_t)((x[e] - lo) * id + 0.5f);
        q[e] = t < 31 ? t : 31;
    }
    put_f16(b, d);
    put_f16(b + 2, lo);
    put_q5(b + 4, b + 8, q);
}

/* The codebook index nearest v (ties to the upper one), as ggml's
 * best_index_int8: a binary search over the sorted values. */
static int iq4_nearest(float v) {
    const int8_t *kv = tf_cpu_iq4_values;
    if (v <= kv[0]) return 0;
    if (v >= kv[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < kv[mid]) hi = mid;
        else lo = mid;
    }
    return v - kv[hi - 1] < kv[hi] - v ? hi - 1 : hi;
}

/* ggml's nearest_int: round half to even through the f32 mantissa. */
static int nearest_int(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* Sum of w q x and of w q q over a sub-block for the codes that scale
 * `id` picks (ggml weighs each element by x^2 without an importance
 * matrix). */
static void iq4_fit(const float *x, float id, uint8_t *codes, float *sumqx, float *sumq2) {
    float qx = 0, q2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = iq4_nearest(id * x[j]);
        if (codes) codes[j] = (uint8_t)l;
        const float q = tf_cpu_iq4_values[l], w = x[j] * x[j];
        qx += w * q * x[j];
        q2 += w * q * q;
    }
    *sumqx = qx;
    *sumq2 = q2;
}

/* quantize_row_iq4_nl_impl's search for one sub-block of 32: the scale
 * mapping the extreme element to the codebook's end, refitted by least
 * squares, then (ntry > 0) 2 ntry + 1 nearby scales tried. Returns the
 * scale, 0 for a sub-block of zeros. */
static float iq4_sub_block_scale(const float *x, int ntry, uint8_t *codes) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < 1e-15f) {
        memset(codes, 8, 32);               /* ggml leaves them as they were; here the code nearest 0 */
        return 0;
    }
    const float kv0 = tf_cpu_iq4_values[0];
    float sumqx, sumq2;
    iq4_fit(x, 1 / (ntry > 0 ? -max / kv0 : max / kv0), codes, &sumqx, &sumq2);
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.f, best = d * sumqx;
    for (int t = -ntry; t <= ntry; t++) {
        iq4_fit(x, ((float)t + kv0) / max, NULL, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void pack_iq4(const uint8_t *codes, int n, uint8_t *qs) {
    for (int i = 0; i < n / 32; i++)
        for (int j = 0; j < 16; j++) qs[16 * i + j] = (uint8_t)(codes[32 * i + j] | codes[32 * i + 16 + j] << 4);
}

/* IQ4_NL as llama-quantize writes it (ggml_quantize_chunk without an
 * importance matrix: quantize_iq4_nl, 7 tries each way, the codes refitted
 * to the f32 scale found). quantize_row_iq4_nl_ref, which ggml uses for
 * activations, makes no tries; the files are what users bring. */
static void iq4_nl_encode(const float *x, uint8_t *b) {
    uint8_t codes[32];
    const float d = iq4_sub_block_scale(x, 7, codes), id = d != 0 ? 1 / d : 0.f;
    for (int j = 0; j < 32; j++) codes[j] = (uint8_t)iq4_nearest(id * x[j]);
    put_f16(b, d);
    pack_iq4(codes, 32, b + 2);
}

/* IQ4_XS as llama-quantize writes it (quantize_iq4_xs, which
 * quantize_row_iq4_xs_ref also is): eight sub-block scales (7 tries each each way),
 * rounded to 6 signed bits against d = -(the largest) / 32; codes refitted
 * to the rounded scales. */
static void iq4_xs_encode(const float *x, uint8_t *b) {
    uint8_t codes[256];
    float scales[8], max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        scales[ib] = iq4_sub_block_scale(x + 32 * ib, 7, codes + 32 * ib);
        if (fabsf(scales[ib]) > amax_scale) {
            amax_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    const float d = -max_scale / 32, id = d != 0 ? 1 / d : 0.f;
    uint16_t high = 0;
    put_f16(b, d);
    for (int ib = 0; ib < 8; ib++) {
        int l = clampi(nearest_int(id * scales[ib]), -32, 31);
        const float dl = d * (float)l, idl = dl != 0 ? 1 / dl : 0.f;
        for (int j = 0; j < 32; j++) codes[32 * ib + j] = (uint8_t)iq4_nearest(idl * x[32 * ib + j]);
        l += 32;
        if (ib % 2 == 0) b[4 + ib / 2] = (uint8_t)(l & 0x0F);
        else b[4 + ib / 2] |= (uint8_t)((l & 0x0F) << 4);
        high |= (uint16_t)((l >> 4) << (2 * ib));
    }
    b[2] = (uint8_t)high;
    b[3] = (uint8_t)(high >> 8);
    pack_iq4(codes, 256, b + 8);
}

bool tf_cpu_quant_ext_codec(tf_dtype wt, tf_cpu_block_decode *decode, tf_cpu_block_encode *encode) {
    switch (wt) {
    case TF_Q5_0: *decode = q5_0_block, *encode = q5_0_encode; return true;
    case TF_Q5_1: *decode = q5_1_block, *encode = q5_1_encode; return true;
    case TF_Q2_K: *decode = q2_k_block, *encode = tf_cpu_q2_k_encode; return true;
    case TF_Q3_K: *decode = q3_k_block, *encode = tf_cpu_q3_k_encode; return true;
    case TF_Q5_K: *decode = q5_k_block, *encode = tf_cpu_q5_k_encode; return true;
    case TF_IQ4_NL: *decode = iq4_nl_block, *encode = iq4_nl_encode; return true;
    case TF_IQ4_XS: *decode = iq4_xs_block, *encode = iq4_xs_encode; return true;
    default: return false;
    }
}

/* ---- scalar products: the reference the SIMD ones are tested against ---- */

static int32_t idot16(const int8_t *v, const int8_t *q) {
    int32_t acc = 0;
    for (int i = 0; i < 16; i++) acc += (int32_t)v[i] * q[i];
    return acc;
}

/* x . w for one weight row of these formats: per 16 elements
 * d_x * (sc * (v . q) - mn * sum q). */
float tf_cpu_qdot_row_ext(tf_dtype wt, const uint8_t *w, const int8_t *q, const float *d, const int32_t *s, int64_t k) {
    const int64_t block = (int64_t)tf_dtype_block_size(wt), bytes = (int64_t)tf_dtype_size(wt);
    int8_t v[256];
    float sc[16], mn[16], acc = 0;
    for (int64_t b = 0; b < k / block; b++, w += bytes) {
        tf_cpu_quant_levels(wt, w, v, sc, mn);
        for (int g = 0; g < block / 16; g++) {
            const int64_t at = b * block + 16 * g;
            const float dx = d[at / 32];
            acc += dx * sc[g] * (float)idot16(v + 16 * g, q + at) - dx * mn[g] * (float)s[at / 16];
        }
    }
    return acc;
}
