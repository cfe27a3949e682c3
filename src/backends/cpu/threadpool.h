/* A persistent thread pool for the CPU backend. */
#ifndef TF_CPU_THREADPOOL_H
#define TF_CPU_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/tensorframe.h"

typedef void (*tf_pool_task)(void *ctx, int64_t begin, int64_t end);

/* Run fn over [0, n) in chunks of at least `grain` items across the pool's
 * threads (the caller works too). Runs inline when n <= grain, with one
 * thread, inside another parallel region, or while another thread owns the
 * pool. Returns when every chunk is done. */
void tf_cpu_parallel_for(int64_t n, int64_t grain, tf_pool_task fn, void *ctx);
int tf_cpu_num_threads(void);
/* The most threads a region uses: the caller and 256 workers (the limit of
 * tf_set_num_threads and of TF_NUM_THREADS alike). */
#define TF_CPU_MAX_THREADS 257
/* True on a thread running a chunk of a parallel region. */
bool tf_cpu_in_parallel_region(void);
tf_status tf_cpu_set_num_threads(int n);
void tf_cpu_pool_shutdown(void);

#endif
