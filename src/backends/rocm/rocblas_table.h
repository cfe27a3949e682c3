/* rocBLAS, loaded at run time where it is installed (Debian has neither
 * rocBLAS nor hipBLAS, so its declarations are written here from rocBLAS's
 * public C API, rocblas-types.h and rocblas-functions.h: the values of its
 * enums are its ABI). Without it the plugin multiplies with the portable
 * tiled matmul kernel, so every op is always there.
 *
 * The soname is the one of the ROCm release whose HIP runtime the plugin
 * loads (ROCm 5: librocblas.so.0 with libamdhip64.so.5): a rocBLAS built on
 * another HIP would bring a second runtime into the process. */
#ifndef TF_ROCBLAS_TABLE_H
#define TF_ROCBLAS_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "hip_runtime_table.h"

typedef struct _rocblas_handle *rocblas_handle;
typedef int32_t rocblas_int;
typedef int64_t rocblas_stride;
typedef enum rocblas_operation_ { rocblas_operation_none = 111, rocblas_operation_transpose = 112 } rocblas_operation;
typedef enum rocblas_datatype_ {
    rocblas_datatype_f16_r = 150,
    rocblas_datatype_f32_r = 151,
    rocblas_datatype_f64_r = 152,
    rocblas_datatype_bf16_r = 168
} rocblas_datatype;
typedef enum rocblas_status_ {
    rocblas_status_success = 0,
    rocblas_status_not_implemented = 2,
    rocblas_status_invalid_size = 4,
    rocblas_status_memory_error = 5,
} rocblas_status;
typedef enum rocblas_gemm_algo_ { rocblas_gemm_algo_standard = 0 } rocblas_gemm_algo;

#define TF_ROCBLAS_SONAME "librocblas.so.0"

typedef struct tf_rocblas {
    bool loaded;
    char why[300];
    rocblas_status (*rocblas_create_handle)(rocblas_handle *handle);
    rocblas_status (*rocblas_destroy_handle)(rocblas_handle handle);
    rocblas_status (*rocblas_set_stream)(rocblas_handle handle, hipStream_t stream);
    const char *(*rocblas_status_to_string)(rocblas_status status);
    rocblas_status (*rocblas_gemm_strided_batched_ex)(
        rocblas_handle handle, rocblas_operation trans_a, rocblas_operation trans_b, rocblas_int m, rocblas_int n,
        rocblas_int k, const void *alpha, const void *a, rocblas_datatype a_type, rocblas_int lda,
        rocblas_stride stride_a, const void *b, rocblas_datatype b_type, rocblas_int ldb, rocblas_stride stride_b,
        const void *beta, const void *c, rocblas_datatype c_type, rocblas_int ldc, rocblas_stride stride_c, void *d,
        rocblas_datatype d_type, rocblas_int ldd, rocblas_stride stride_d, rocblas_int batch_count,
        rocblas_datatype compute_type, rocblas_gemm_algo algo, int32_t solution_index, uint32_t flags);
} tf_rocblas;

/* Open `chosen` (TF_ROCBLAS_LIB) or the soname and resolve every symbol;
 * t->loaded, or t->why names what is missing. */
void tf_rocblas_load(tf_rocblas *t, const char *chosen);

#endif
