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

/* The built-in backend's entry point (called by the core like a plugin's). */
tf_status tf__cpu_backend_init(const tf_host_api *host, tf_backend_reg *out);

#endif
