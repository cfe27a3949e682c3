/* Extras of the ROCm/HIP backend, reached through
 *   tf_backend_proc_address("rocm", "tf_rocm_stats")
 * (NULL when the plugin is not loaded). */
#ifndef TENSORFRAME_ROCM_H
#define TENSORFRAME_ROCM_H

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/tensorframe.h"

typedef struct tf_rocm_stats {
    uint64_t kernels_launched;   /* portable kernels */
    uint64_t gemm_calls;         /* products handed to rocBLAS */
    uint64_t staged_bytes;       /* host transfers through the pinned staging buffers */
    uint64_t peer_copies;        /* tf_tensor_to between two ROCm devices */
    int gfx_version;             /* 9010 for gfx90a (major * 1000 + minor * 10 + stepping) */
    bool lost;                   /* a sticky HIP error ended this device's session */
    uint64_t graph_launches;     /* captured graphs launched (tf_graph_replay of a native graph) */
    int wave_size;               /* 64 on CDNA, 32 on RDNA: read from the device */
} tf_rocm_stats;

/* Statistics of device rocm:<device>. */
typedef tf_status (*tf_rocm_stats_fn)(int device, tf_rocm_stats *out);

#endif
