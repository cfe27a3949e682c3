/* The device code shared by the CUDA and the ROCm/HIP plugins.
 *
 * native_backend.c is written against the CUDA runtime API and compiled twice:
 * as itself for libtensorframe-cuda.so, and with TF_HIP defined for
 * libtensorframe-rocm.so, where ../rocm/hip_vendor.h maps every CUDA runtime
 * name it uses to the HIP runtime's, called through a symbol table resolved
 * at run time (the way ggml's HIP build reuses its CUDA sources through one
 * header of macros). What differs between the vendors - the BLAS library,
 * how a kernel is found and launched, the NVIDIA-only kernels, the device's
 * description, the extras - is behind the tf_vendor_* functions below,
 * written once per vendor: cuda_vendor.c and ../rocm/hip_vendor.c.
 */
#ifndef TF_NATIVE_DEV_H
#define TF_NATIVE_DEV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <tensorframe/backend.h>

#ifdef TF_HIP
#include "hip_vendor.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <tensorframe/cuda.h>

#include "cublas_table.h"
#include "lt_gemm.h"

#define TF_VENDOR_NAME "cuda"
#define TF_RT "cuda"                    /* the runtime API's prefix, in messages */
typedef struct cudaDeviceProp tf_gpu_props;
typedef tf_cuda_stats tf_vendor_stats;
/* What a CUDA device holds beyond the shared state. */
typedef struct tf_vendor_state {
    cublasHandle_t blas;                /* made on the first GEMM */
    cublasLtHandle_t lt;                /* made on the first GEMM with a bias */
    tf_lt_cache lt_cache;
} tf_vendor_state;
#endif

#include "gpu_runtime.h"
#include "plan.h"

#define MAX_CUDA_DEVICES 16

/* A buffer is a block of the shared allocator; its handle is the device pointer. */
typedef tf_gpu_block cuda_buf;

typedef struct cuda_dev {
    tf_gpu_dev gd;                      /* lock, lost state, allocator (gpu_runtime.h) */
    tf_gpu_staging staging;             /* two pinned buffers, pipelined */
    int index;                          /* the runtime's ordinal */
    char name[256];
    int cc_major, cc_minor, sm_count;   /* HIP: the gfx version's major and minor, compute units */
    bool integrated;
    bool matrix_units;                  /* tensor cores (NVIDIA), matrix cores (AMD) */
    uint64_t total_mem;
    tf_device_limits limits;            /* from the device's properties at discovery */
    cudaStream_t stream;                /* used when the core passes no stream */
    cudaStream_t current;               /* the stream of the call in progress (set under the lock) */
    _Atomic int made_streams;           /* streams tf_stream_create made, alive */
    bool shared_scratch;                /* the op in progress used scratch or the BLAS workspace */
    struct {                            /* a stream capture for a native graph (SDK 2.3) in progress */
        bool on, failed, shared;        /* failed: a block could not be held; shared: as shared_scratch */
        cudaStream_t stream;
        cuda_buf **held;                /* scratch the captured launches use: the graph's until destroyed */
        int n_held, cap_held;
    } capture;
    /* The f32 copy of a quantized weight in a product of many rows
     * (native_backend.c, run_widened_qmatmul): one block kept between
     * products and grown to the largest weight, since a block a product
     * of each weight's size came and went through the cache and, with the
     * cache trimmed to demand, was released and allocated again each time. */
    cuda_buf *widened;
    tf_vendor_state vendor;
    tf_vendor_stats stats;
} cuda_dev;

/* ---- what native_backend.c offers the vendor files ---- */

extern const tf_host_api *tf_cu_host;
/* Report a failed runtime call (a sticky error marks the device lost). */
tf_status tf_cu_fail(cuda_dev *d, cudaError_t e, const char *what);
/* Scratch back to the allocator after its launch (held while capturing). */
void tf_cu_release_block(cuda_dev *d, cuda_buf *b);
/* The device pointer of a tensor's buffer, and of its first element. */
void *tf_cu_mem_of(const tf_tensor_desc *t);
char *tf_cu_first(const tf_tensor_desc *t);

/* ---- what each vendor supplies ---- */

/* At plugin init, before discovery: false (and `why` set) when the runtime
 * cannot be used at all, which leaves the plugin with zero devices. */
bool tf_vendor_init(char *why, size_t n);
/* Errors after which the context is unusable until the process ends. */
bool tf_vendor_sticky(cudaError_t e);
/* Device facts beyond the shared ones, from its properties; false to skip the device. */
bool tf_vendor_open_device(cuda_dev *d, const tf_gpu_props *p);
void tf_vendor_close_device(cuda_dev *d);          /* at shutdown, device current, work done */
void tf_vendor_read_limits(cuda_dev *d, const tf_gpu_props *p);
void tf_vendor_describe(cuda_dev *d, char *out, size_t n);
/* Launch one of the portable kernels (`program` is its dtype's). */
tf_status tf_vendor_launch(cuda_dev *d, tf_dtype program, tf_pk_kernel kernel, void **argv, const unsigned grid[3],
                           const unsigned block[3]);
/* MATMUL/GEMM through the vendor's BLAS: true if taken (*s holds the result). */
bool tf_vendor_gemm(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, tf_status *s);
/* GEMM_EPILOGUE in one vendor call (cuBLASLt's epilogues): whether op has
 * that form here (supports() asks), and running it. */
bool tf_vendor_epilogue_supported(const tf_op *op);
tf_status tf_vendor_gemm_epilogue(cuda_dev *d, const tf_pk_target *tg, const tf_op *op);
/* The vendor's own kernels for op: true if taken (*s holds the result). */
bool tf_vendor_fast(cuda_dev *d, const tf_op *op, tf_status *s);
/* The registration note: `count` devices opened, `failed` not. */
void tf_vendor_note(char *out, size_t n, int count, int failed);
/* The note when the runtime reports no device (its error in e). */
void tf_vendor_no_device_note(char *out, size_t n, cudaError_t e);
/* Called once devices are open (loading the BLAS library, say). */
void tf_vendor_discovered(int count);
/* The vendor's extras beyond tf_<vendor>_stats (NULL if not one). */
void *tf_vendor_extra(const char *name);

#endif
