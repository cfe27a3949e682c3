/* The autotuning cache the GPU backends share: where a kernel has choices
 * (a split reduction's group count, for now), the candidates are timed on
 * first use of a shape bucket and the winner is kept in a file under
 * TF_CACHE_DIR, as PyTorch's TunableOp keeps its CSV.
 *
 * File: <cache>/tune/<backend>-<device hash>.csv. Its first line names the
 * library version, the device, the driver and the kernel source's hash; a
 * file whose first line differs is discarded whole (a new driver or new
 * kernels may change every answer). Then one line per key:
 *   reduce_split,f32,M=1,R=65536,16,123.4        (choice, microseconds)
 *
 * TF_AUTOTUNE=1 turns it on (look up, tune what is missing, save); unset or
 * 0 keeps the built-in heuristics and touches no file. */
#ifndef TF_GPU_TUNE_H
#define TF_GPU_TUNE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "tensorframe/backend.h"

typedef struct tf_tune_entry {
    char key[96];
    int64_t choice;
    double us;
} tf_tune_entry;

typedef struct tf_tune_cache {
    pthread_mutex_t lock;
    const tf_host_api *host;
    char path[1024];
    char header[768];
    bool loaded;
    tf_tune_entry *entries;
    int n, cap;
    tf_autotune_stats stats;
} tf_tune_cache;

/* The cache folder for `sub` ("opencl", "tune"): TF_CACHE_DIR, else
 * XDG_CACHE_HOME/tensorframe, else ~/.cache/tensorframe; and mkdir -p. */
void tf_gpu_cache_dir(char *out, size_t n, const char *sub);
void tf_gpu_make_dirs(const char *path);

/* Is TF_AUTOTUNE=1 (read at each call: tests flip it)? */
bool tf_tune_enabled(void);
void tf_tune_init(tf_tune_cache *c, const tf_host_api *host, const char *backend, const char *device,
                  const char *driver, uint64_t source_hash);
void tf_tune_destroy(tf_tune_cache *c);

/* Time each candidate (one warm-up and `reps` timed runs of run(closure,
 * candidate), each followed by sync(ctx)) unless `key` is in the cache;
 * store and save the winner. Returns the choice to use; `fallback` when
 * tuning fails. */
int64_t tf_tune_choose(tf_tune_cache *c, const char *key, const int64_t *candidates, int n_candidates,
                       int64_t fallback, tf_status (*run)(const void *closure, int64_t choice), const void *closure,
                       tf_status (*sync)(void *ctx), void *ctx);

#endif
