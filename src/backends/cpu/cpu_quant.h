/* Block-quantized dtypes on the CPU: ggml's block layouts decoded and
 * encoded (cpu_quant.c), and the integer dot products of a quantized weight
 * row with an activation row rounded to 8 bits (scalar here; AVX512-VNNI and
 * AVX2 in fast_qdot.inc, chosen by CPUID). */
#ifndef TF_CPU_QUANT_H
#define TF_CPU_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/tensorframe.h"

#define TF_Q8_BLOCK 32       /* activation rows are rounded per 32 elements */

/* Activation rows rounded to 8 bits, llama.cpp's way: per 32-element block
 * a scale d = max|x| / 127 and q = round(x / d), so x ~ d * q; the sums of
 * q per 16 elements carry the weights' offsets (Q4_0's -8, Q4_1's min,
 * Q4_K's min, Q6_K's -32) out of the inner loop. */
typedef struct tf_q8_rows {
    const int8_t *q;         /* [m, k] */
    const float *d;          /* [m, k / 32] */
    const int32_t *s;        /* [m, k / 16] */
    const float *ds;         /* [m, k / 32]: d times the block's sum of q, for the offsets */
    int64_t k;
} tf_q8_rows;

/* Dot products c[i, j] = x_i . w_j for rows i in [0, m) and weight rows j in
 * [j0, j1); w row j starts at w + j * ldw (bytes), c row i at c + i * ldc. */
typedef void (*tf_qdot_fn)(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x,
                           const uint8_t *w, int64_t ldw, float *c, int64_t ldc);

void tf_cpu_qdot_scalar(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                        int64_t ldw, float *c, int64_t ldc);

/* One activation row of k elements rounded into q, d, s and ds (tf_q8_rows' layout). */
typedef void (*tf_q8_round_fn)(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);

/* Many activation rows against weight rows [j0, j1) through a panel
 * buffer of tf_cpu_qgemm_panel_bytes(k) bytes (fast_qgemm.inc). */
typedef void (*tf_qgemm_fn)(tf_dtype wt, int64_t m, int64_t j0, int64_t j1, const tf_q8_rows *x, const uint8_t *w,
                            int64_t ldw, float *c, int64_t ldc, void *panel);
size_t tf_cpu_qgemm_panel_bytes(int64_t k);

/* The integer GEMM over weights packed once (cpu_packs.c keeps them):
 * weight rows in groups of 16, group_bytes(k) bytes each; pack writes
 * groups [g0, g1) of the n rows, packed multiplies every activation row by
 * them. The same arithmetic as tf_qgemm_fn's, so the same bits. */
typedef size_t (*tf_qgemm_group_bytes_fn)(int64_t k);
typedef void (*tf_qgemm_pack_fn)(tf_dtype wt, const uint8_t *w, int64_t ldw, int64_t n, int64_t k, int64_t g0,
                                 int64_t g1, void *out);
typedef void (*tf_qgemm_packed_fn)(tf_dtype wt, int64_t m, int64_t g0, int64_t g1, int64_t n, const tf_q8_rows *x,
                                   const void *packed, float *c, int64_t ldc);

typedef struct tf_qdot_kernels {
    tf_qdot_fn dot;
    tf_q8_round_fn round;        /* the same bytes as the scalar rounding */
    tf_qgemm_fn gemm;            /* NULL: many rows decode panels for the BLAS GEMM instead */
    tf_qgemm_group_bytes_fn group_bytes;   /* with pack and packed: NULL where gemm is */
    tf_qgemm_pack_fn pack;
    tf_qgemm_packed_fn packed;
} tf_qdot_kernels;

/* The SIMD kernels (AVX512-VNNI, else AVX2); NULL members where the CPU (or
 * the build) has neither. */
tf_qdot_kernels tf_cpu_qdot_fast(void);
/* The rounding the products use (the "tf_cpu_q8_round_row" extra). */
void tf_cpu_q8_round_row(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);

/* The f16 at p, as f32. */
float tf_cpu_q_f16(const uint8_t *p);
/* The 6-bit scale and min of Q4_K's sub-block j. */
void tf_cpu_q4k_scale_min(const uint8_t *scales, int j, int *sc, int *m);
/* Its inverse, into zeroed scale bytes (Q4_K's and Q5_K's encoders). */
void tf_cpu_q4k_put_scale_min(uint8_t *scales, int j, int sc, int m);

/* The formats of cpu_quant_ext.c (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL,
 * IQ4_XS): one block decoded / encoded. False for another dtype. */
typedef void (*tf_cpu_block_decode)(const uint8_t *block, float *y);
typedef void (*tf_cpu_block_encode)(const float *x, uint8_t *block);
bool tf_cpu_quant_ext_codec(tf_dtype wt, tf_cpu_block_decode *decode, tf_cpu_block_encode *encode);
/* The K-quants' encoders, ggml's without an importance matrix (cpu_quant_kfit.c). */
void tf_cpu_q2_k_encode(const float *x, uint8_t *block);
void tf_cpu_q3_k_encode(const float *x, uint8_t *block);
void tf_cpu_q4_k_encode(const float *x, uint8_t *block);
void tf_cpu_q5_k_encode(const float *x, uint8_t *block);
void tf_cpu_q6_k_encode(const float *x, uint8_t *block);
/* One block of any quantized dtype as x = sc[g] * v[e] - mn[g] (g = e / 16):
 * integer levels v in int8 and per-16 f32 scales and offsets. */
void tf_cpu_quant_levels(tf_dtype wt, const uint8_t *block, int8_t *v, float *sc, float *mn);
/* The scalar x . w of one weight row of those formats (k elements). */
float tf_cpu_qdot_row_ext(tf_dtype wt, const uint8_t *w, const int8_t *q, const float *d, const int32_t *s, int64_t k);
/* IQ4_NL's and IQ4_XS's codebook; Q3_K's signed 6-bit scale of group g
 * (0..15) from its 12 scale bytes; IQ4_XS's of sub-block ib from the block. */
extern const int8_t tf_cpu_iq4_values[16];
int tf_cpu_q3k_scale(const uint8_t *scales, int g);
int tf_cpu_iq4xs_scale(const uint8_t *block, int ib);

/* One row of n elements (whole blocks) of quantized dtype wt decoded to f32
 * / encoded from f32. */
void tf_cpu_dequantize_row(tf_dtype wt, const uint8_t *src, int64_t n, float *dst);
void tf_cpu_quantize_row(tf_dtype wt, const float *src, int64_t n, uint8_t *dst);

void tf_cpu_quant_install(void *table);

#endif
