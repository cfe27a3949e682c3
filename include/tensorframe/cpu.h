/* Extras of the built-in CPU backend, through
 * tf_backend_proc_address("cpu", name). */
#ifndef TENSORFRAME_CPU_H
#define TENSORFRAME_CPU_H

#include <stddef.h>
#include <stdint.h>

/* "tf_cpu_blas_calls": GEMM calls the CPU backend has made through the CBLAS
 * library (OpenBLAS, BLIS) in this process; 0 when built without one. With
 * TF_CPU_KERNELS=reference it stays 0: every op runs the reference loops. */
typedef uint64_t (*tf_cpu_blas_calls_fn)(void);

/* "tf_cpu_reference_gemm_calls" (a tf_cpu_blas_calls_fn): float products
 * (tf_matmul, tf_gemm, tf_linear; f32, f64, f16, bf16) that ran the portable
 * reference loops rather than a fast kernel. Every layout of every float
 * dtype takes a fast kernel (docs/ARCHITECTURE.md); it counts only under
 * TF_CPU_KERNELS=reference, on a build without SIMD or BLAS, or when a
 * kernel's scratch could not be had. */

/* "tf_cpu_q8_round_row": how the CPU's products with a quantized weight
 * round one activation row of k floats (k a multiple of 32) before the
 * integer dot products, llama.cpp's Q8 way: per 32 elements a scale
 * d = max|x| / 127 and q = x / d rounded half away from zero; s gets the
 * sums of q per 16 elements (k / 16 of them), ds per 32 d times the
 * block's sum. The SIMD version where the CPU has AVX2, the scalar one with
 * TF_CPU_QDOT=scalar: both give the same bytes. */
typedef void (*tf_cpu_q8_round_row_fn)(const float *x, int64_t k, int8_t *q, float *d, int32_t *s, float *ds);

/* "tf_cpu_weight_pack_bytes": bytes the CPU backend keeps of quantized
 * weights repacked once for its integer GEMM (a product of a few
 * activation rows then skips the repack). A pack is kept while its
 * buffer's bytes stay as they were: never for memory handed out raw
 * (DLPack, a host pointer) nor after a write into the buffer; it goes with
 * the buffer. TF_CPU_WEIGHT_PACKS_MB caps it (default a sixteenth of RAM, at
 * most 256; 0 turns packing off). */
typedef size_t (*tf_cpu_weight_pack_bytes_fn)(void);

#endif
