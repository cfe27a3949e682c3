/* CPU reference kernels: plain C, every dtype the op table accepts, any
 * strides. They are the correctness reference for every other backend and
 * the fallback for ops a backend lacks. */
#ifndef TF_CPU_KERNELS_H
#define TF_CPU_KERNELS_H

#include "tensorframe/backend.h"

/* Maps a descriptor's buffer to its host address. */
typedef char *(*tf_cpu_address_fn)(tf_backend_buffer *buf);

bool tf_cpu_kernels_support(const tf_op *op);
tf_status tf_cpu_kernels_run(const tf_op *op, tf_cpu_address_fn address);

/* The kernel table: one entry per (op, dtype), the dtype being the one a
 * kernel is keyed by (tf_cpu_table_dtype: the input's for reductions,
 * scans, comparisons and predicates, else the output's). */
typedef tf_status (*tf_cpu_kernel)(const tf_op *op, tf_cpu_address_fn address);
typedef struct tf_cpu_table {
    tf_cpu_kernel fn[TF_OP_COUNT][TF_DTYPE_COUNT];
} tf_cpu_table;
tf_dtype tf_cpu_table_dtype(const tf_op *op);
/* Layers, in the order the table is built: the reference fills every entry
 * it has; BLAS and SIMD override entries (each keeps the table it found and
 * hands it the layouts it does not take). */
void tf_cpu_ref_install(tf_cpu_table *t);
/* sort, argsort, searchsorted (cpu_sort.c): every dtype but the quantized ones */
tf_cpu_kernel tf_cpu_sort_kernel(tf_op_kind kind);
void tf_cpu_blas_install(tf_cpu_table *t);
/* cpu_conv.c: conv2d (f32, f64) as im2col and BLAS GEMMs, pooling in f32. */
void tf_cpu_conv_install(tf_cpu_table *t);
/* cpu_flat.c: comparisons, logical ops and where over flat f32/bool operands;
 * same-dtype copies and fills by element size. */
void tf_cpu_flat_install(tf_cpu_table *t);
/* the complex dtypes' kernels (cpu_complex.c), installed last, and the
 * operand dtypes they take */
void tf_cpu_complex_install(tf_cpu_table *t);
bool tf_cpu_complex_supports(const tf_op *op);
void tf_cpu_simd_install(tf_cpu_table *t);
/* cpu_attn_grad.c: sdpa_grad_q and sdpa_grad_kv in f32 over the SIMD table's
 * head products, the scores recomputed block by block. */
void tf_cpu_attn_grad_install(tf_cpu_table *t);

/* Float GEMMs the reference loops ran (the tf_cpu_reference_gemm_calls extra). */
uint64_t tf_cpu_reference_gemm_calls(void);

/* The built-in backend's entry point (called by the core like a plugin's). */
tf_status tf__cpu_backend_init(const tf_host_api *host, tf_backend_reg *out);

#endif
