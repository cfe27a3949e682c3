/* Extras of the CUDA backend, reached through
 *   tf_backend_proc_address("cuda", "tf_cuda_stats")
 * (NULL when the plugin is not loaded). */
#ifndef TENSORFRAME_CUDA_H
#define TENSORFRAME_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/tensorframe.h"

typedef struct tf_cuda_stats {
    uint64_t kernels_launched;   /* portable kernels */
    uint64_t gemm_calls;         /* products handed to cuBLAS */
    uint64_t staged_bytes;       /* host transfers through the pinned staging buffers */
    uint64_t peer_copies;        /* tf_tensor_to between two CUDA devices */
    int compute_capability;      /* 90 for sm_90 */
    bool lost;                   /* a sticky CUDA error ended this device's session */
    uint64_t graph_launches;     /* captured graphs launched (tf_graph_replay of a native graph) */
} tf_cuda_stats;

/* Statistics of device cuda:<device>. */
typedef tf_status (*tf_cuda_stats_fn)(int device, tf_cuda_stats *out);
/* f32 GEMM on tensor cores with TF32 inputs (10-bit mantissa) from now on:
 * faster, less exact. Off by default; TF_CUDA_TF32=1 turns it on at load. */
typedef tf_status (*tf_cuda_set_tf32_fn)(bool enabled);

#endif
