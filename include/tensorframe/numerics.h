/* tensorframe — header-only numerics every backend must agree on:
 * f16/bf16 conversion (round to nearest even, NaN kept quiet), the
 * Philox4x32-10 counter-based generator and the mapping from its words to
 * uniform and normal values. Backends reproduce these exactly so that the
 * same seed gives the same tensor on every device.
 */
#ifndef TENSORFRAME_NUMERICS_H
#define TENSORFRAME_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t tf_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float tf_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float tf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return tf_bits_f32(sign | 0x7f800000u | (man << 13));   /* inf / nan */
    if (exp == 0) {
        if (man == 0) return tf_bits_f32(sign);
        float v = (float)man * (1.0f / 16777216.0f);                       /* 2^-24 */
        return sign ? -v : v;
    }
    return tf_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t tf_f32_to_f16(float f) {
    uint32_t u = tf_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                        /* below 2^-14: subnormal */
        float v = tf_bits_f32(a) * 16777216.0f;                  /* exact scale by 2^24 */
        uint32_t m = (uint32_t)v;                                 /* v < 1024 */
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;    /* may carry into exponent: fine */
    return (uint16_t)(sign | h);
}

static inline float tf_bf16_to_f32(uint16_t b) { return tf_bits_f32((uint32_t)b << 16); }

static inline uint16_t tf_f32_to_bf16(float f) {
    uint32_t u = tf_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);   /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* A double to float rounded toward zero, with the last bit set when
 * inexact ("round to odd"): rounding that float again to f16 or bf16 gives
 * the double rounded once, correctly (f32 holds more than twice their bits
 * plus two). Plain (float)v first would round twice: a double just past a
 * tie of f16 could land on the tie and then round to even the wrong way. */
static inline float tf_f64_to_f32_odd(double v) {
    float f = (float)v;
    if ((double)f == v || f != f) return f;
    uint32_t b = tf_f32_bits(f);
    double af = f < 0 ? -(double)f : (double)f, av = v < 0 ? -v : v;
    if (af > av) b -= 1u;                                        /* rounded away from zero: step back */
    return tf_bits_f32(b | 1u);
}

static inline uint16_t tf_f64_to_f16(double v) { return tf_f32_to_f16(tf_f64_to_f32_odd(v)); }
static inline uint16_t tf_f64_to_bf16(double v) { return tf_f32_to_bf16(tf_f64_to_f32_odd(v)); }

/* Philox4x32-10 (Salmon et al., SC'11). */
typedef struct tf_philox_out { uint32_t w[4]; } tf_philox_out;

static inline tf_philox_out tf_philox4x32_10(uint64_t counter, uint64_t key) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    tf_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* Element i of a random tensor uses counter i: uniform in [0, 1) with 53
 * random bits; the float32 form keeps 24 so it never rounds up to 1. */
static inline double tf_rand_uniform_f64(uint64_t seed, uint64_t i) {
    tf_philox_out r = tf_philox4x32_10(i, seed);
    uint64_t bits = ((uint64_t)r.w[0] << 21) ^ (uint64_t)(r.w[1] >> 11);
    return (double)(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* Uniform in [0, 1) on a grid of 2^-bits (bits <= 32), so that a dtype with
 * `bits` significant bits (f32 24, f16 11, bf16 8) holds it exactly and it
 * never rounds up to 1. */
static inline double tf_rand_uniform_bits(uint64_t seed, uint64_t i, int bits) {
    tf_philox_out r = tf_philox4x32_10(i, seed);
    return (double)(r.w[0] >> (32 - bits)) * ldexp(1.0, -bits);
}

/* Box-Muller on words 2 and 3, computed in double. */
static inline double tf_rand_normal_f64(uint64_t seed, uint64_t i) {
    tf_philox_out r = tf_philox4x32_10(i, seed);
    double u1 = ((double)r.w[2] + 1.0) * (1.0 / 4294967296.0);   /* (0, 1] */
    double u2 = (double)r.w[3] * (1.0 / 4294967296.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif /* TENSORFRAME_NUMERICS_H */
