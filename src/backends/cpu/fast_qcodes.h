/* The block formats' codes as unsigned bytes in element order, 32 at a
 * time, and their packed scales as bytes: shared by the row dot products
 * (fast_qdot.inc) and the integer GEMM's panel repack (fast_qgemm.inc).
 * Each including file is built with the ISA flags it needs (AVX2 at least). */
#ifndef TF_FAST_QCODES_H
#define TF_FAST_QCODES_H
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_quant.h"

static inline float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __m256i nibbles_16(const uint8_t *p) {       /* 16 bytes -> 32 codes: low nibbles, then high */
    const __m128i v = _mm_loadu_si128((const __m128i *)p), mask = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

/* Byte e = 0x10 where bit e of `bits` is set: Q5_0's and Q5_1's fifth bits. */
static inline __m256i fifth_bits(uint32_t bits) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i mask = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), pick), mask);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, mask), _mm256_set1_epi8(0x10));
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The IQ4 codebook's levels for 32 nibble indices (low nibbles, then high). */
static inline __m256i iq4_levels(const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tf_cpu_iq4_values));
    return _mm256_shuffle_epi8(table, nibbles_16(qs));
}

/* The block's integer scales as bytes, by 32-bit word operations on its
 * packed scale bytes (the layouts of cpu_quant_ext.c): Q4_K's and Q5_K's 8
 * 6-bit scales then 8 mins; Q3_K's 16 6-bit scales, still offset by 32.
 * Built in a register: four 32-bit stores read back as one vector miss
 * store forwarding (a fifth of Q3_K's product time went to that stall). */
static inline __m128i k4_scales_mins_v(const uint8_t *sb) {
    uint32_t a, b, c;
    memcpy(&a, sb, 4);
    memcpy(&b, sb + 4, 4);
    memcpy(&c, sb + 8, 4);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    return _mm_setr_epi32((int)(a & low6),                                       /* scales 0-3 */
                          (int)((c & low4) | (((a >> 6) & low2) << 4)),          /* scales 4-7 */
                          (int)(b & low6),                                       /* mins 0-3 */
                          (int)(((c >> 4) & low4) | (((b >> 6) & low2) << 4)));  /* mins 4-7 */
}

static inline __m128i k3_scales_v(const uint8_t *sb) {
    uint32_t a, b, c;
    memcpy(&a, sb, 4);
    memcpy(&b, sb + 4, 4);
    memcpy(&c, sb + 8, 4);
    const uint32_t low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
    return _mm_setr_epi32((int)((a & low4) | ((c & low2) << 4)),                 /* groups 0-3 */
                          (int)((b & low4) | (((c >> 2) & low2) << 4)),          /* groups 4-7 */
                          (int)(((a >> 4) & low4) | (((c >> 4) & low2) << 4)),   /* groups 8-11 */
                          (int)(((b >> 4) & low4) | (((c >> 6) & low2) << 4)));  /* groups 12-15 */
}

static inline void k4_scales_mins(const uint8_t *sb, uint8_t out[16]) { _mm_storeu_si128((__m128i *)out, k4_scales_mins_v(sb)); }
static inline void k3_scales(const uint8_t *sb, uint8_t out[16]) { _mm_storeu_si128((__m128i *)out, k3_scales_v(sb)); }

/* IQ4_XS's 8 sub-block scales (6 bits, offset by 32) as int32 lanes:
 * the low nibbles are nibble j of the 32-bit word at byte 4, the high
 * pairs bits 2j of the 16-bit word at byte 2. */
static inline __m256i iq4xs_scales(const uint8_t *w) {
    const __m256i low = _mm256_srlv_epi32(_mm256_set1_epi32((int)load_u32(w + 4)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i high = _mm256_srlv_epi32(_mm256_set1_epi32(w[2] | w[3] << 8), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i ls = _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi32(15)),
                                       _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4));
    return _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
}

/* Chunk j's (elements 32 j ..) codes as unsigned bytes (IQ4_XS: signed levels). */
static inline __attribute__((always_inline)) __m256i k_chunk(tf_dtype wt, const uint8_t *w, int j) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    switch (wt) {
    case TF_Q2_K:
        return _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(w + 16 + 32 * (j / 4))), 2 * (j % 4)),
                                low2);
    case TF_Q3_K: {
        const __m256i lo =
            _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(w + 32 + 32 * (j / 4))), 2 * (j % 4)), low2);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)w), j), one);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
    }
    case TF_Q4_K:
        return _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(w + 16 + 32 * (j / 2))), 4 * (j % 2)),
                                low4);
    case TF_Q5_K: {
        const __m256i lo =
            _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(w + 48 + 32 * (j / 2))), 4 * (j % 2)), low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(w + 16)), j), one);
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    case TF_Q6_K: {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(w + 64 * (j / 4) + 32 * (j % 2)));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * (j / 4)));
        const __m256i l4 = _mm256_and_si256(_mm256_srli_epi16(lo, 4 * ((j % 4) / 2)), low4);
        const __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * (j % 4)), low2);
        return _mm256_or_si256(l4, _mm256_slli_epi16(h2, 4));
    }
    default:                                             /* IQ4_XS */
        return iq4_levels(w + 8 + 16 * j);
    }
}

#endif
