/* Block-quantized dtypes on the CPU: ggml's layouts decoded, encoded, and
 * multiplied.
 *
 * Decoding follows the `gguf` package's NumPy reference operation for
 * operation (each product rounded to f32 before the add, no fused
 * multiply-add: this file builds with -std=c11, which keeps contraction
 * off), so the results are bit-identical to it; tests/gguf/check_dequant.py
 * checks every tensor of a real model file. Layouts (ggml-common.h):
 *   Q4_0  32 elements: f16 d, 16 bytes of nibbles; x = d * (q - 8)
 *   Q4_1  32: f16 d, f16 m, 16 bytes of nibbles;   x = d * q + m
 *   Q8_0  32: f16 d, 32 int8;                       x = d * q
 *   Q4_K 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8
 *             sub-blocks of 32, 128 bytes of nibbles; x = (d*sc) * q - dmin*m
 *   Q6_K 256: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8
 *             scales (one per 16), f16 d; x = (d*scale) * (q - 32)
 * In the 4-bit formats a byte's low nibble is an element of the first half
 * of its group and its high nibble the element 16 (or 32) places later.
 *
 * Encoding follows ggml's reference quantizers, which llama-quantize uses
 * without an importance matrix: rounding to nearest with the block's range
 * for Q4_0, Q4_1 and Q8_0; the K-quants' error-minimising searches in
 * cpu_quant_kfit.c. A tensor cast here and a file made there from the same
 * floats hold the same bytes.
 *
 * The product of a float activation and a quantized weight rounds each
 * activation row to 8 bits per 32 elements once (tf_q8_rows) and takes
 * integer dot products per block, as llama.cpp does: for one row of
 * activations (token generation) the weight is read once, at a quarter to
 * an eighth of f32's bytes. Many rows (a prompt) go through the integer
 * GEMM of fast_qgemm.inc where the CPU has AVX512-VNNI or AVX-VNNI (8 weight rows
 * repacked to a lane each, so the f32 scaling is shared by 8 rows); on
 * other CPUs panels of the weight are decoded to f32 for the BLAS GEMM,
 * which beats byte unpacking when each block's scaling is paid per row. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#if defined(TF_HAVE_QDOT_SIMD)
#include <cpuid.h>
#endif

#include "cpu_blas.h"
#include "cpu_common.h"
#include "cpu_quant.h"
#include "cpu_packs.h"
#include "fast_kernels.h"      /* tf_cpu_reference_kernels, tf_cpu_isa_cap */
#include "tensorframe/backend.h"

/* ---- decoding ---- */

float tf_cpu_q_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return tf_f16_to_f32(h);
}
#define f16_at tf_cpu_q_f16

static void q4_0_block(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((b[2 + j] & 0x0F) - 8);
        y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    }
}

static void q4_1_block(const uint8_t *b, float *y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(b[4 + j] & 0x0F) + m;
        y[j + 16] = d * (float)(b[4 + j] >> 4) + m;
    }
}

static void q8_0_block(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* ggml's get_scale_min_k4: sub-blocks 0-3 keep their 6 bits in the low
 * bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 split theirs between a
 * nibble of bytes 8-11 and the top two bits of bytes 0-7. */
void tf_cpu_q4k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* tf_cpu_q4k_scale_min's inverse: sub-block j's scale and min (0..63) into
 * the 12 bytes at s (zeroed beforehand; sub-blocks in order). */
void tf_cpu_q4k_put_scale_min(uint8_t *s, int j, int sc, int m) {
    if (j < 4) {
        s[j] |= (uint8_t)sc;
        s[j + 4] |= (uint8_t)m;
    } else {
        s[j + 4] = (uint8_t)((sc & 0x0F) | (m & 0x0F) << 4);
        s[j - 4] |= (uint8_t)((sc >> 4) << 6);
        s[j] |= (uint8_t)((m >> 4) << 6);
    }
}

static void q4_k_block(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        tf_cpu_q4k_scale_min(scales, j, &sc, &m);
        const float ds = d * (float)sc, dm = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int l = 0; l < 32; l++) {
            const float p = ds * (float)((q[l] >> shift) & 0x0F);
            y[32 * j + l] = p - dm;
        }
    }
}

static void q6_k_block(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int r = 0; r < 8; r++) {            /* rows of 32: halves of 128, four rows each */
        const uint8_t *lo = ql + 64 * (r / 4) + 32 * (r % 2), *hi = qh + 32 * (r / 4);
        const int lo_shift = 4 * ((r % 4) / 2), hi_shift = 2 * (r % 4);
        for (int c = 0; c < 32; c++) {
            const int q = (((lo[c] >> lo_shift) & 0x0F) | (((hi[c] >> hi_shift) & 3) << 4)) - 32;
            const int e = 32 * r + c;
            const float ds = d * (float)scales[e / 16];
            y[e] = ds * (float)q;
        }
    }
}

typedef struct block_codec {
    void (*decode)(const uint8_t *block, float *y);
    void (*encode)(const float *x, uint8_t *block);
} block_codec;

static void put_f16(uint8_t *p, float v) {
    uint16_t h = tf_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* ---- encoding ---- */

/* The element of largest magnitude, its sign kept. */
static float signed_absmax(const float *x, int n) {
    float best = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            best = x[i];
        }
    return best;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void q4_0_encode(const float *x, uint8_t *b) {
    const float d = signed_absmax(x, 32) / -8, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        int lo = clampi((int)(x[j] * id + 8.5f), 0, 15), hi = clampi((int)(x[j + 16] * id + 8.5f), 0, 15);
        b[2 + j] = (uint8_t)(lo | hi << 4);
    }
}

static void q4_1_encode(const float *x, uint8_t *b) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    const float d = (hi - lo) / 15, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, lo);
    for (int j = 0; j < 16; j++) {
        int a = clampi((int)((x[j] - lo) * id + 0.5f), 0, 15), c = clampi((int)((x[j + 16] - lo) * id + 0.5f), 0, 15);
        b[4 + j] = (uint8_t)(a | c << 4);
    }
}

static void q8_0_encode(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)clampi((int)roundf(x[j] * id), -127, 127);
}

static block_codec codec_of(tf_dtype wt) {
    static const block_codec codecs[] = {
        [TF_Q4_0 - TF_Q4_0] = {q4_0_block, q4_0_encode}, [TF_Q4_1 - TF_Q4_0] = {q4_1_block, q4_1_encode},
        [TF_Q8_0 - TF_Q4_0] = {q8_0_block, q8_0_encode}, [TF_Q4_K - TF_Q4_0] = {q4_k_block, tf_cpu_q4_k_encode},
        [TF_Q6_K - TF_Q4_0] = {q6_k_block, tf_cpu_q6_k_encode},
    };
    block_codec c;
    if (tf_cpu_quant_ext_codec(wt, &c.decode, &c.encode)) return c;
    return codecs[wt - TF_Q4_0];
}

void tf_cpu_dequantize_row(tf_dtype wt, const uint8_t *src, int64_t n, float *dst) {
    const block_codec c = codec_of(wt);
    const int64_t block = (int64_t)tf_dtype_block_size(wt), bytes = (int64_t)tf_dtype_size(wt);
    for (int64_t i = 0; i < n / block; i++) c.decode(src + i * bytes, dst + i * block);
}

void tf_cpu_quantize_row(tf_dtype wt, const float *src, int64_t n, uint8_t *dst) {
    const block_codec c = codec_of(wt);
    const int64_t block = (int64_t)tf_dtype_block_size(wt), bytes = (int64_t)tf_dtype_size(wt);
    for (int64_t i = 0; i < n / block; i++) c.encode(src + i * block, dst + i * bytes);
}

/* ---- activations to 8 bits ---- */

/* A block holding a NaN or an infinity cannot be rounded to 8 bits (the
 * max would skip a NaN and the codes lose it): its scale becomes NaN and its
 * codes 0, so every product it enters is NaN, as the f32 product would be. */
static void q8_non_finite_block(int64_t b, int8_t *q, float *d, int32_t *s, float *ds) {
    memset(q + b * TF_Q8_BLOCK, 0, TF_Q8_BLOCK);
    s[2 * b] = s[2 * b + 1] = 0;
    d[b] = ds[b] = NAN;
}

static void q8_round_row(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds) {
    for (int64_t b = 0; b < k / TF_Q8_BLOCK; b++) {
        const float *xb = x + b * TF_Q8_BLOCK;
        float amax = 0;                            /* no libm calls: this runs per block of every row */
        bool finite = true;
        for (int j = 0; j < TF_Q8_BLOCK; j++) {
            const float a = xb[j] < 0 ? -xb[j] : xb[j];
            amax = a > amax ? a : amax;
            finite &= a < INFINITY;                /* false for inf and NaN */
        }
        if (!finite) {
            q8_non_finite_block(b, q, d, s, ds);
            continue;
        }
        const float db = amax / 127, id = db != 0 ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int h = 0; h < 2; h++) {
            int32_t sum = 0;
            for (int j = 16 * h; j < 16 * h + 16; j++) {
                const float t = xb[j] * id;              /* |t| <= 127: half away from zero, as roundf */
                const int v = (int)(t + (t < 0 ? -0.5f : 0.5f));
                q[b * TF_Q8_BLOCK + j] = (int8_t)v;
                sum += v;
            }
            s[2 * b + h] = sum;
        }
        ds[b] = db * (float)(s[2 * b] + s[2 * b + 1]);
    }
}

/* ---- scalar dot products (the reference the VNNI ones are tested against) ---- */

static int32_t idot(const uint8_t *u, const int8_t *q, int n) {
    int32_t acc = 0;
    for (int i = 0; i < n; i++) acc += (int32_t)u[i] * q[i];
    return acc;
}

/* One weight row . one activation row. u holds a block's unsigned codes in
 * element order. */
static float qdot_row(tf_dtype wt, const uint8_t *w, const int8_t *q, const float *d, const int32_t *s, int64_t k) {
    if (wt > TF_Q6_K) return tf_cpu_qdot_row_ext(wt, w, q, d, s, k);   /* cpu_quant_ext.c's formats */
    float acc = 0;
    uint8_t u[256];
    for (int64_t b0 = 0; b0 < k; b0 += (int64_t)tf_dtype_block_size(wt)) {
        const int64_t xb = b0 / TF_Q8_BLOCK;      /* the first activation block */
        switch (wt) {
        case TF_Q4_0: case TF_Q4_1: {
            const uint8_t *qs = w + (wt == TF_Q4_0 ? 2 : 4);
            for (int j = 0; j < 16; j++) {
                u[j] = qs[j] & 0x0F;
                u[j + 16] = qs[j] >> 4;
            }
            const float dw = tf_cpu_q_f16(w), sum = (float)(s[2 * xb] + s[2 * xb + 1]);
            const int32_t dot = idot(u, q + b0, 32);
            acc += wt == TF_Q4_0 ? dw * d[xb] * (float)(dot - 8 * (int32_t)sum)
                                 : dw * d[xb] * (float)dot + tf_cpu_q_f16(w + 2) * d[xb] * sum;
            w += wt == TF_Q4_0 ? 18 : 20;
            break;
        }
        case TF_Q8_0: {
            int32_t dot = 0;
            for (int j = 0; j < 32; j++) dot += (int32_t)(int8_t)w[2 + j] * q[b0 + j];
            acc += tf_cpu_q_f16(w) * d[xb] * (float)dot;
            w += 34;
            break;
        }
        case TF_Q4_K: {
            const float dw = tf_cpu_q_f16(w), dmin = tf_cpu_q_f16(w + 2);
            for (int j = 0; j < 8; j++) {
                int sc, m;
                tf_cpu_q4k_scale_min(w + 4, j, &sc, &m);
                const uint8_t *qs = w + 16 + 32 * (j / 2);
                for (int l = 0; l < 32; l++) u[l] = (qs[l] >> (4 * (j % 2))) & 0x0F;
                const int64_t x = xb + j;
                acc += dw * (float)sc * d[x] * (float)idot(u, q + 32 * x, 32) -
                       dmin * (float)m * d[x] * (float)(s[2 * x] + s[2 * x + 1]);
            }
            w += 144;
            break;
        }
        case TF_Q6_K: {
            const float dw = tf_cpu_q_f16(w + 208);
            const int8_t *sc = (const int8_t *)(w + 192);
            for (int r = 0; r < 8; r++) {
                const uint8_t *lo = w + 64 * (r / 4) + 32 * (r % 2), *hi = w + 128 + 32 * (r / 4);
                for (int c = 0; c < 32; c++)
                    u[c] = (uint8_t)(((lo[c] >> (4 * ((r % 4) / 2))) & 0x0F) | ((hi[c] >> (2 * (r % 4))) & 3) << 4);
                const int64_t x = xb + r;
                for (int h = 0; h < 2; h++) {
                    const int32_t dot = idot(u + 16 * h, q + 32 * x + 16 * h, 16) - 32 * s[2 * x + h];
                    acc += dw * (float)sc[2 * r + h] * d[x] * (float)dot;
                }
            }
            w += 210;
            break;
        }
        default: return NAN;
        }
    }
    return acc;
}

void tf_cpu_qdot_scalar(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                        int64_t ldw, float *c, int64_t ldc) {
    const int64_t k = x->k;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t i = 0; i < m; i++)
            c[i * ldc + j] = qdot_row(wt, w + j * ldw, x->q + i * k, x->d + i * (k / 32), x->s + i * (k / 16), k);
}

#if defined(TF_HAVE_QDOT_SIMD)
void tf_cpu_qdot_vnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                           int64_t ldw, float *c, int64_t ldc);
void tf_cpu_qdot_avx2_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                           int64_t ldw, float *c, int64_t ldc);
void tf_cpu_q8_round_vnni_impl(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);
void tf_cpu_q8_round_avx2_impl(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);
void tf_cpu_qgemm_vnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                            int64_t ldw, float *c, int64_t ldc, void *panel);
void tf_cpu_qdot_avxvnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                              int64_t ldw, float *c, int64_t ldc);
void tf_cpu_q8_round_avxvnni_impl(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);
void tf_cpu_qgemm_avxvnni_impl(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                               int64_t ldw, float *c, int64_t ldc, void *panel);
#define PACKED_DECLS(isa)                                                                                          \
    size_t tf_cpu_qgemm_group_bytes_##isa##_impl(int64_t k);                                                       \
    void tf_cpu_qgemm_pack_##isa##_impl(tf_dtype wt, const uint8_t *w, int64_t ldw, int64_t n, int64_t k,          \
                                        int64_t g0, int64_t g1, void *out);                                        \
    void tf_cpu_qgemm_packed_##isa##_impl(tf_dtype wt, int64_t m, int64_t g0, int64_t g1, int64_t n,               \
                                          const tf_q8_rows *x, const void *packed, float *c, int64_t ldc);
PACKED_DECLS(vnni)
PACKED_DECLS(avxvnni)
#endif

#if defined(TF_HAVE_QDOT_SIMD)
/* AVX-VNNI (the VEX vpdpbusd): CPUID leaf 7, sub-leaf 1, EAX bit 4 (not a
 * name every compiler's __builtin_cpu_supports knows). */
static bool have_avx_vnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}
#endif

/* The widest SIMD dot products the CPU has: AVX512-VNNI, else AVX-VNNI,
 * else AVX2; NULL without any, or when the environment asks for the
 * reference kernels (TF_CPU_KERNELS=reference) or caps the ISA
 * (TF_CPU_ISA=avxvnni keeps AVX-VNNI, avx2 AVX2, generic neither). */
tf_qdot_kernels tf_cpu_qdot_fast(void) {
#if defined(TF_HAVE_QDOT_SIMD)
    static _Atomic int chosen = -1;      /* 0 none, 1 avx2, 2 avx512-vnni, 3 avx-vnni */
    int c = chosen;
    if (c < 0) {
        const int cap = tf_cpu_isa_cap();
        bool reference = tf_cpu_reference_kernels(), generic = cap == TF_CPU_ISA_GENERIC;
        __builtin_cpu_init();
        /* F16C is not a feature name Clang's builtin knows; every AVX2 CPU has it (Intel since Ivy Bridge, AMD since Piledriver) */
        bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        bool vnni512 = avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("avx512bw") && cap <= TF_CPU_ISA_AVX512;
        bool vnni256 = avx2 && have_avx_vnni() && cap <= TF_CPU_ISA_AVXVNNI;
        c = reference || generic ? 0 : vnni512 ? 2 : vnni256 ? 3 : avx2 ? 1 : 0;
        chosen = c;                      /* every thread computes the same answer */
    }
    if (c == 2)
        return (tf_qdot_kernels){tf_cpu_qdot_vnni_impl, tf_cpu_q8_round_vnni_impl, tf_cpu_qgemm_vnni_impl,
                                 tf_cpu_qgemm_group_bytes_vnni_impl, tf_cpu_qgemm_pack_vnni_impl,
                                 tf_cpu_qgemm_packed_vnni_impl};
    if (c == 3)
        return (tf_qdot_kernels){tf_cpu_qdot_avxvnni_impl, tf_cpu_q8_round_avxvnni_impl, tf_cpu_qgemm_avxvnni_impl,
                                 tf_cpu_qgemm_group_bytes_avxvnni_impl, tf_cpu_qgemm_pack_avxvnni_impl,
                                 tf_cpu_qgemm_packed_avxvnni_impl};
    if (c == 1) return (tf_qdot_kernels){tf_cpu_qdot_avx2_impl, tf_cpu_q8_round_avx2_impl, NULL, NULL, NULL, NULL};
#endif
    return (tf_qdot_kernels){NULL, NULL, NULL, NULL, NULL, NULL};
}

/* Does TF_CPU_QDOT=scalar ask for the reference products (tests; read per
 * call, so a test can switch)? They then take every row count, so a
 * many-row product compares with the integer GEMM's arithmetic. */
static bool scalar_requested(void) {
    static const char *const modes[] = {"simd", "scalar"};
    return tf_host()->env_choice("TF_CPU_QDOT", modes, 2) == 1;
}

/* The kernels the products use: the SIMD ones where the CPU has them,
 * else (or when asked) the scalar ones. */
static tf_qdot_kernels qdot_kernels(void) {
    tf_qdot_kernels fast = tf_cpu_qdot_fast();
    if (!fast.dot || scalar_requested()) return (tf_qdot_kernels){tf_cpu_qdot_scalar, q8_round_row, NULL, NULL, NULL, NULL};
    return fast;
}

void tf_cpu_q8_round_row(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds) {
    qdot_kernels().round(x, k, q, d, s, ds);
}

/* ---- kernels ---- */

static tf_cpu_table below;               /* the entries this layer wraps */

/* Bytes of `elems` elements of a quantized dtype (a whole number of blocks). */
static int64_t block_bytes(tf_dtype dt, int64_t elems) {
    return elems / (int64_t)tf_dtype_block_size(dt) * (int64_t)tf_dtype_size(dt);
}

/* Byte offset of row r (all axes but the last) of a descriptor. */
static int64_t row_offset(const tf_tensor_desc *d, int64_t r) {
    int64_t elems = 0;
    for (int i = d->ndim - 2; i >= 0; i--) {
        elems += r % d->shape[i] * d->strides[i];
        r /= d->shape[i];
    }
    return (int64_t)d->offset +
           (tf_dtype_is_quantized(d->dtype) ? block_bytes(d->dtype, elems) : elems * (int64_t)elsize(d->dtype));
}

typedef struct copy_job {
    const tf_tensor_desc *in, *out;
    const char *src;
    char *dst;
    int64_t k;
} copy_job;

/* A row as f32 (from any float dtype with its stride, or decoded). */
static void read_row(const tf_tensor_desc *d, const char *p, int64_t k, float *row) {
    if (tf_dtype_is_quantized(d->dtype)) {
        tf_cpu_dequantize_row(d->dtype, (const uint8_t *)p, k, row);
        return;
    }
    const int64_t step = d->ndim ? d->strides[d->ndim - 1] * (int64_t)elsize(d->dtype) : 0;
    for (int64_t i = 0; i < k; i++) row[i] = (float)load_f64(d->dtype, p + i * step);
}

static void write_row(const tf_tensor_desc *d, char *p, int64_t k, const float *row) {
    if (tf_dtype_is_quantized(d->dtype)) {
        tf_cpu_quantize_row(d->dtype, row, k, (uint8_t *)p);
        return;
    }
    const int64_t step = d->strides[d->ndim - 1] * (int64_t)elsize(d->dtype);
    if (d->dtype == TF_F32 && step == 4) {
        memcpy(p, row, sizeof(float) * (size_t)k);
        return;
    }
    for (int64_t i = 0; i < k; i++) store_f64(d->dtype, p + i * step, row[i]);
}

/* Byte offset of column c (a whole number of blocks for a quantized row). */
static int64_t column_offset(const tf_tensor_desc *d, int64_t c) {
    if (tf_dtype_is_quantized(d->dtype)) return block_bytes(d->dtype, c);
    return c * d->strides[d->ndim - 1] * (int64_t)elsize(d->dtype);
}

static void copy_rows(void *ctx, int64_t begin, int64_t end) {
    const copy_job *j = ctx;
    float row[4096];
    for (int64_t r = begin; r < end; r++) {
        const char *src = j->src + row_offset(j->in, r);
        char *dst = j->dst + row_offset(j->out, r);
        if (j->in->dtype == j->out->dtype) {                  /* whole blocks as they are */
            memcpy(dst, src, (size_t)block_bytes(j->in->dtype, j->k));
            continue;
        }
        for (int64_t c = 0; c < j->k; c += 4096) {            /* 4096 = 16 blocks of 256 */
            const int64_t n = j->k - c < 4096 ? j->k - c : 4096;
            read_row(j->in, src + column_offset(j->in, c), n, row);
            write_row(j->out, dst + column_offset(j->out, c), n, row);
        }
    }
}

/* Copies with a quantized side go row by row (a row: the last axis). */
static tf_status quant_copy(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *in = &op->inputs[0], *out = &op->output;
    if (!tf_dtype_is_quantized(in->dtype) && !tf_dtype_is_quantized(out->dtype)) return below.fn[TF_OP_COPY][out->dtype](op, address);
    if (out->ndim == 0 || in->ndim != out->ndim) return TF_ERR_UNSUPPORTED;
    const int64_t k = out->shape[out->ndim - 1];
    copy_job j = {in, out, address(in->buffer), address(out->buffer), k};
    const int64_t rows = k ? tf_desc_numel(out) / k : 0;
    tf_cpu_parallel_for(rows, (1 << 14) / (k + 1) + 1, copy_rows, &j);
    return TF_OK;
}

static int64_t load_index(const tf_tensor_desc *d, const char *base, int64_t i) {
    const char *p = base + d->offset + i * d->strides[0] * (int64_t)elsize(d->dtype);
    return d->dtype == TF_I32 ? (int64_t) * (const int32_t *)p : *(const int64_t *)p;
}

/* index_select of whole quantized rows along an axis before the last. */
static tf_status quant_index_select(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *x = &op->inputs[0], *ix = &op->inputs[1], *out = &op->output;
    const int ax = op->params.axis;
    if (ax >= x->ndim - 1) return TF_ERR_UNSUPPORTED;
    const char *src = address(x->buffer), *ib = address(ix->buffer);
    char *dst = address(out->buffer);
    const int64_t k = out->shape[out->ndim - 1], rows = k ? tf_desc_numel(out) / k : 0;
    const size_t row_bytes = (size_t)block_bytes(x->dtype, k);
    for (int64_t r = 0; r < rows; r++) {
        int64_t rest = r, elems = 0;
        for (int i = out->ndim - 2; i >= 0; i--) {
            int64_t at = rest % out->shape[i];
            rest /= out->shape[i];
            if (i == ax) at = load_index(ix, ib, at);
            elems += at * x->strides[i];
        }
        const int64_t from = (int64_t)x->offset + block_bytes(x->dtype, elems);
        memcpy(dst + row_offset(out, r), src + from, row_bytes);
    }
    return TF_OK;
}

typedef struct qmatmul_job {
    tf_dtype wt;
    tf_qdot_fn dot;
    tf_qgemm_fn gemm;
    tf_q8_rows x;
    const float *xf;                     /* the f32 rows, for the panel path */
    int64_t m, n, k, ldx, ldw, ldc;
    const uint8_t *w;
    float *c;
    _Atomic bool failed;                 /* a task could not get its panel: the op fails */
} qmatmul_job;

static void qmatmul_columns(void *ctx, int64_t begin, int64_t end) {
    qmatmul_job *j = ctx;
    j->dot(j->wt, j->m, begin, end, &j->x, j->w, j->ldw, j->c, j->ldc);
}

#define PANEL 64                          /* weight rows decoded at a time for many activation rows */

/* Many rows through the integer GEMM: weight rows in groups of 8 (the
 * kernel's panel), a panel buffer per task. */
static void qgemm_groups(void *ctx, int64_t begin, int64_t end) {
    qmatmul_job *j = ctx;
    void *panel = tf_cpu_alloc(tf_cpu_qgemm_panel_bytes(j->k));
    if (!panel) {
        atomic_store(&j->failed, true);
        return;
    }
    const int64_t j1 = 8 * end < j->n ? 8 * end : j->n;
    j->gemm(j->wt, j->m, 8 * begin, j1, &j->x, j->w, j->ldw, j->c, j->ldc, panel);
    tf_cpu_free(panel);
}

/* ---- weights packed once (cpu_packs.c) ----
 * A product of a few activation rows spends a large share of its time
 * repacking its weight (40% at 10 rows, Q8_0, K = 384; a MiniLM pass of
 * 16 tokens 1.07 -> 0.87 ms with the pack kept, of 32 tokens 1.84 -> 1.74):
 * up to this many rows the packed weight is kept and reused, within the
 * packs' budget. Above it the repack is a few percent and the memory is
 * not spent for it. */
#define PACKED_MAX_ROWS 64

typedef struct pack_job {
    const qmatmul_job *j;
    tf_qgemm_pack_fn pack;
    void *out;
} pack_job;

static void pack_groups(void *ctx, int64_t begin, int64_t end) {
    pack_job *p = ctx;
    p->pack(p->j->wt, p->j->w, p->j->ldw, p->j->n, p->j->k, begin, end, p->out);
}

static void fill_pack(void *ctx, void *out) {
    pack_job *p = ctx;
    p->out = out;
    tf_cpu_parallel_for((p->j->n + 15) / 16, 1, pack_groups, p);
}

typedef struct packed_job {
    const qmatmul_job *j;
    tf_qgemm_packed_fn packed;
    const void *data;
} packed_job;

static void packed_groups(void *ctx, int64_t begin, int64_t end) {
    packed_job *p = ctx;
    const qmatmul_job *j = p->j;
    p->packed(j->wt, j->m, begin, end, j->n, &j->x, p->data, j->c, j->ldc);
}

/* The product through the weight's kept pack: true when one was had (the
 * product is done), false to repack per call. */
static bool packed_product(const qmatmul_job *j, const tf_qdot_kernels *use, const tf_tensor_desc *W) {
    if (!use->packed || j->m > PACKED_MAX_ROWS) return false;
    tf_cpu_pack_key key = {W->offset, j->wt, j->n, j->k, j->ldw};
    pack_job pj = {j, use->pack, NULL};
    const void *data = tf_cpu_pack_get(W->buffer, &key, (size_t)((j->n + 15) / 16) * use->group_bytes(j->k), fill_pack, &pj);
    if (!data) return false;
    packed_job p = {j, use->packed, data};
    tf_cpu_parallel_for((j->n + 15) / 16, 1, packed_groups, &p);
    return true;
}

static void qmatmul_panels(void *ctx, int64_t begin, int64_t end) {
    qmatmul_job *j = ctx;
    float *panel = tf_cpu_alloc(sizeof(float) * PANEL * (size_t)j->k);
    if (!panel) {
        atomic_store(&j->failed, true);
        return;
    }
    for (int64_t p = begin; p < end; p++) {
        const int64_t n0 = p * PANEL, rows = j->n - n0 < PANEL ? j->n - n0 : PANEL;
        for (int64_t r = 0; r < rows; r++)
            tf_cpu_dequantize_row(j->wt, j->w + (n0 + r) * j->ldw, j->k, panel + r * j->k);
        tf_cpu_blas_gemm(false, false, true, j->m, rows, j->k, 1.0, j->xf, j->ldx, panel, j->k, 0.0, j->c + n0, j->ldc);
    }
    tf_cpu_free(panel);
}

/* Rows of activations from which the many-row product (the integer GEMM,
 * or decoded panels for the BLAS GEMM) beats row-at-a-time dot products
 * (measured on Zen 4 for the panels: the dot products win for a handful of
 * rows, where each weight byte feeds few multiplies; the GEMM's repack of
 * each weight costs what about 60 rows of its products do, 0.5 ns a weight). */
#define PANEL_ROWS 12
/* The integer GEMM's 16-row vpdpbusd tiles beat the dot products from a
 * handful of activation rows: a one-sentence MiniLM pass (Q8_0, Zen 5, 2
 * threads, ms) of 4 / 6 / 8 tokens took 0.66 / 0.95 / 1.30 through the
 * dot products and 0.71 / 0.70 / 0.82 through the GEMM. */
#define QGEMM_ROWS 5

/* f32 x [M, K] times an f16/bf16 weight [N, K] transposed (tf_linear's
 * half-precision weights): the fast linear kernels widen W as they read it
 * (in registers for a few rows, into an L1 panel for more), so no f32 copy
 * of the weight is made; without them, or with a W that is not row-major, a
 * plain loop. */
static tf_status half_weight_matmul(const tf_op *op, tf_cpu_address_fn address, const tf_cpu_epilogue *epi) {
    const tf_tensor_desc *X = &op->inputs[0], *Wd = &op->inputs[1], *C = &op->output;
    int64_t m = C->shape[0], n = C->shape[1], k = X->shape[1];
    const float *x = (const float *)(address(X->buffer) + X->offset);
    const uint16_t *w = (const uint16_t *)(address(Wd->buffer) + Wd->offset);
    float *c = (float *)(address(C->buffer) + C->offset);
    bool bf16 = Wd->dtype == TF_BF16;
    const tf_fast_kernels *fast = tf_fast();
    bool plain = X->strides[1] == 1 && Wd->strides[1] == 1 && C->strides[1] == 1 && C->strides[0] == n && k > 0;
    /* bf16 weights on AVX512-BF16: x rounded to bf16, as the op allows
     * (within the 8-bit rounding a device may apply): twice f32's rate */
    tf_status s = TF_OK;
    if (plain && bf16 && tf_cpu_bf16_linear(m, n, k, x, X->strides[0], w, Wd->strides[0], c, &s)) {
        if (s == TF_OK && epi) tf_cpu_epilogue_output(epi, C, address);
        return s;
    }
    if (fast && plain) {                     /* the tail on each tile, in cache */
        tf_cpu_run_linear(fast, m, n, k, x, X->strides[0], w, Wd->strides[0], bf16 ? TF_FAST_W_BF16 : TF_FAST_W_F16,
                          NULL, epi, c);
        return TF_OK;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0;
            for (int64_t q = 0; q < k; q++) {
                uint16_t h = w[j * Wd->strides[0] + q * Wd->strides[1]];
                acc += x[i * X->strides[0] + q * X->strides[1]] * (bf16 ? tf_bf16_to_f32(h) : tf_f16_to_f32(h));
            }
            c[i * C->strides[0] + j * C->strides[1]] = acc;
        }
    if (epi) tf_cpu_epilogue_output(epi, C, address);
    return TF_OK;
}

static tf_status quant_matmul(const tf_op *op, tf_cpu_address_fn address) {
    const tf_tensor_desc *X = &op->inputs[0], *Wd = &op->inputs[1], *C = &op->output;
    if (Wd->dtype == TF_F16 || Wd->dtype == TF_BF16) return half_weight_matmul(op, address, NULL);
    qmatmul_job j = {.wt = Wd->dtype, .m = X->shape[0], .k = X->shape[1], .n = Wd->shape[0]};
    j.ldx = X->strides[0];
    j.ldw = block_bytes(j.wt, Wd->strides[0]);
    j.ldc = C->strides[0];
    j.xf = (const float *)(address(X->buffer) + X->offset);
    j.w = (const uint8_t *)address(Wd->buffer) + Wd->offset;
    j.c = (float *)(address(C->buffer) + C->offset);
    if (X->strides[1] != 1 || j.k % TF_Q8_BLOCK) return TF_ERR_UNSUPPORTED;
    const tf_qdot_kernels use = qdot_kernels();
    const bool many = j.m >= (use.gemm ? QGEMM_ROWS : PANEL_ROWS);
    if (many && !use.gemm && tf_cpu_have_blas() && !scalar_requested()) {
        tf_cpu_parallel_for((j.n + PANEL - 1) / PANEL, 1, qmatmul_panels, &j);
        return atomic_load(&j.failed) ? tf_cpu_oom("qmatmul", sizeof(float) * PANEL * (size_t)j.k) : TF_OK;
    }
    const size_t qbytes = (size_t)(j.m * j.k), dbytes = sizeof(float) * (size_t)(j.m * j.k / 32),
                 sbytes = sizeof(int32_t) * (size_t)(j.m * j.k / 16);
    char *scratch = tf_cpu_alloc(2 * dbytes + sbytes + qbytes + 64);
    if (!scratch) return tf_cpu_oom("qmatmul", 2 * dbytes + sbytes + qbytes);
    float *d = (float *)scratch, *ds = (float *)(scratch + dbytes);
    int32_t *s = (int32_t *)(scratch + 2 * dbytes);
    int8_t *q = (int8_t *)(scratch + 2 * dbytes + sbytes);
    for (int64_t i = 0; i < j.m; i++)
        use.round(j.xf + i * j.ldx, j.k, q + i * j.k, d + i * (j.k / 32), s + i * (j.k / 16), ds + i * (j.k / 32));
    j.x = (tf_q8_rows){q, d, s, ds, j.k};
    j.dot = use.dot;
    j.gemm = use.gemm;
    if (many && use.gemm && packed_product(&j, &use, Wd)) {
        tf_cpu_free(scratch);
        return TF_OK;
    }
    if (many && use.gemm) {                   /* 8-row groups, a few per task */
        tf_cpu_parallel_for((j.n + 7) / 8, 1, qgemm_groups, &j);
        tf_cpu_free(scratch);
        return atomic_load(&j.failed) ? tf_cpu_oom("qmatmul", tf_cpu_qgemm_panel_bytes(j.k)) : TF_OK;
    }
    tf_cpu_parallel_for(j.n, 1 + (1 << 15) / (j.k * j.m + 1), qmatmul_columns, &j);
    tf_cpu_free(scratch);
    return TF_OK;
}

/* QMATMUL_EPILOGUE: the product as QMATMUL's, then the bias, activation
 * and residual on the f32 output (f16/bf16 weights through the linear
 * kernel: on each tile as it is finished). The product's sums and the tail's
 * formulas are the separate ops', so a fused graph gives their bits. */
static tf_status quant_matmul_epilogue(const tf_op *op, tf_cpu_address_fn address) {
    tf_op product = *op;
    product.kind = TF_OP_QMATMUL;
    product.n_inputs = 2;
    product.params.flags = 0;
    product.params.activation = 0;
    tf_cpu_epilogue epi = tf_cpu_epilogue_of(op, address);
    const tf_dtype wt = op->inputs[1].dtype;
    if (wt == TF_F16 || wt == TF_BF16) return half_weight_matmul(&product, address, &epi);
    tf_status s = quant_matmul(&product, address);
    if (s == TF_OK) tf_cpu_epilogue_output(&epi, &op->output, address);
    return s;
}

void tf_cpu_quant_install(void *table) {
    tf_cpu_table *t = table;
    below = *t;
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (tf_dtype_is_quantized((tf_dtype)dt)) {
            t->fn[TF_OP_COPY][dt] = quant_copy;
            t->fn[TF_OP_INDEX_SELECT][dt] = quant_index_select;
        } else if (is_float((tf_dtype)dt) && t->fn[TF_OP_COPY][dt]) {
            t->fn[TF_OP_COPY][dt] = quant_copy;              /* decodes, or hands the copy down */
        }
    }
    t->fn[TF_OP_QMATMUL][TF_F32] = quant_matmul;
    t->fn[TF_OP_QMATMUL_EPILOGUE][TF_F32] = quant_matmul_epilogue;
}
