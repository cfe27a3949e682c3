/* ggml's quantized block formats (as GGUF files store them) decoded to f32.
 *
 * The arithmetic follows the `gguf` package's NumPy reference operation for
 * operation (each product rounded to f32 before the add, no fused
 * multiply-add: the core builds with -std=c11, which keeps contraction off),
 * so the results are bit-identical to it; tests/gguf/check_dequant.py checks
 * every tensor of a real model file. Layouts (ggml-common.h):
 *   Q4_0  32 elements: f16 d, 16 bytes of nibbles; x = d * (q - 8)
 *   Q4_1  32: f16 d, f16 m, 16 bytes of nibbles;   x = d * q + m
 *   Q8_0  32: f16 d, 32 int8;                       x = d * q
 *   Q4_K 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8
 *             sub-blocks of 32, 128 bytes of nibbles; x = (d*sc) * q - dmin*m
 *   Q6_K 256: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8
 *             scales (one per 16), f16 d; x = (d*scale) * (q - 32)
 * In the 4-bit formats a byte's low nibble is an element of the first half
 * of its group and its high nibble the element 16 (or 32) places later. */
#include "core.h"

#include <string.h>

#include <tensorframe/numerics.h>

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return tf_f16_to_f32(h);
}

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

/* The 6-bit scale and min of Q4_K's sub-block j (ggml's get_scale_min_k4). */
static void q4_k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void q4_k_block(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        q4_k_scale_min(scales, j, &sc, &m);
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

typedef struct quant_format { uint32_t type, block, bytes; void (*decode)(const uint8_t *, float *); } quant_format;

static const quant_format formats[] = {
    {TF__GGML_Q4_0, 32, 18, q4_0_block},  {TF__GGML_Q4_1, 32, 20, q4_1_block},   {TF__GGML_Q8_0, 32, 34, q8_0_block},
    {TF__GGML_Q4_K, 256, 144, q4_k_block}, {TF__GGML_Q6_K, 256, 210, q6_k_block},
};

static const quant_format *format_of(uint32_t type) {
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (formats[i].type == type) return &formats[i];
    return NULL;
}

bool tf__dequantize_known(uint32_t ggml_type) { return format_of(ggml_type) != NULL; }

void tf__dequantize(uint32_t ggml_type, const void *blocks, int64_t n, float *out) {
    const quant_format *f = format_of(ggml_type);
    const uint8_t *b = blocks;
    for (int64_t i = 0; i < n / f->block; i++) f->decode(b + i * f->bytes, out + i * f->block);
}
