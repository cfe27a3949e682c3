/* Extras of the OpenCL backend, reached through
 *   tf_backend_proc_address("opencl", "tf_opencl_stats")
 * (NULL when the plugin is not loaded). */
#ifndef TENSORFRAME_OPENCL_H
#define TENSORFRAME_OPENCL_H

#include <stdint.h>

#include "tensorframe/tensorframe.h"

typedef struct tf_opencl_stats {
    uint64_t builds;            /* programs compiled from source */
    uint64_t cache_hits;        /* programs loaded from the on-disk cache */
    uint64_t kernels_launched;
} tf_opencl_stats;

/* Statistics of device opencl:<device>. */
typedef tf_status (*tf_opencl_stats_fn)(int device, tf_opencl_stats *out);
/* What device opencl:<device>'s autotuner did (TF_AUTOTUNE=1). */
typedef tf_status (*tf_opencl_autotune_stats_fn)(int device, tf_autotune_stats *out);
/* Extra compiler options for programs built from now on (testing and tuning). */
typedef tf_status (*tf_opencl_set_build_options_fn)(const char *options);

#endif
