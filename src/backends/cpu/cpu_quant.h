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

typedef struct tf_qdot_kernels {
    tf_qdot_fn dot;
    tf_q8_round_fn round;        /* the same bytes as the scalar rounding */
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

/* One row of n elements (whole blocks) of quantized dtype wt decoded to f32
 * / encoded from f32. */
void tf_cpu_dequantize_row(tf_dtype wt, const uint8_t *src, int64_t n, float *dst);
void tf_cpu_quantize_row(tf_dtype wt, const float *src, int64_t n, uint8_t *dst);

void tf_cpu_quant_install(void *table);

#endif
