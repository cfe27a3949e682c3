/* The GPU runtime layer: what every GPU backend needs and no GPU backend
 * should write again. A backend embeds a tf_gpu_dev in its device struct
 * and hands the layer its driver calls; the layer supplies
 *  - the device lock, lost-device state and error reporting
 *    (tf_gpu_enter/leave, tf_gpu_fail): after a sticky driver error every
 *    later call on the device returns TF_ERR_DEVICE_LOST naming the first
 *    failure, and the other devices go on;
 *  - a caching allocator (tf_gpu_alloc/free, the shared block_cache.h):
 *    size classes, reuse in the order of the device's stream
 *    (every queued call of a device runs on the core's one stream for it,
 *    so a block freed after a launch may serve the next launch at once),
 *    the configuration of tf_alloc_conf, and one statistics definition
 *    for every backend;
 *  - staged transfers through two pinned buffers (tf_gpu_staged_upload and
 *    _download): the next chunk is copied while the other's DMA runs.
 * The launch planning of the portable kernels is plan.h beside this file. */
#ifndef TF_GPU_RUNTIME_H
#define TF_GPU_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <tensorframe/backend.h>

/* ---- the allocator ----
 * The shared caching allocator (src/backends/common/block_cache.h) over the
 * driver's allocation: 512-byte blocks and up. */

#include "block_cache.h"

/* The driver's own allocation: `capacity` bytes as a handle the backend's
 * kernels and copies understand (a device pointer, a cl_mem). raw_alloc
 * returns TF_ERR_OUT_OF_MEMORY, message set, when the device is full. */
typedef tf_block_ops tf_gpu_mem_ops;
typedef tf_block tf_gpu_block;
#define TF_GPU_GRANULE 512

/* ---- the device ---- */

typedef enum tf_gpu_error {
    TF_GPU_ERROR_OTHER,                  /* TF_ERR_BACKEND */
    TF_GPU_ERROR_OUT_OF_MEMORY,          /* TF_ERR_OUT_OF_MEMORY */
    TF_GPU_ERROR_STICKY                  /* the device is lost: TF_ERR_DEVICE_LOST from now on */
} tf_gpu_error;

typedef struct tf_gpu_dev {
    const tf_host_api *host;
    char name[32];                       /* "cuda:0", for messages */
    pthread_mutex_t lock;                /* allocator, submissions, staging */
    bool lost;
    char lost_reason[200];
    tf_block_cache alloc;
} tf_gpu_dev;

void tf_gpu_dev_init(tf_gpu_dev *d, const tf_host_api *host, const char *name, const tf_gpu_mem_ops *ops, void *ctx);
/* Frees every block, cached or still in use (a tensor alive at tf_shutdown
 * is no longer the backend's to keep); the caller has waited for the
 * device's work. */
void tf_gpu_dev_destroy(tf_gpu_dev *d);
/* Lock the device; TF_ERR_DEVICE_LOST (unlocked) once it is lost. */
tf_status tf_gpu_enter(tf_gpu_dev *d);
void tf_gpu_leave(tf_gpu_dev *d);
/* Report a failed driver call: "cuda:0: cudaMalloc failed: NAME (detail)",
 * and mark the device lost for a sticky error. Returns the status. */
tf_status tf_gpu_fail(tf_gpu_dev *d, tf_gpu_error kind, const char *what, const char *error_name, const char *detail);
/* A byte range inside a buffer, or TF_ERR_INVALID_ARGUMENT naming it. */
tf_status tf_gpu_check_range(tf_gpu_dev *d, const tf_gpu_block *b, size_t offset, size_t n);

/* The caller holds the device lock for these. */
tf_status tf_gpu_alloc(tf_gpu_dev *d, size_t nbytes, tf_gpu_block **out);
void tf_gpu_free(tf_gpu_dev *d, tf_gpu_block *b);
void tf_gpu_release_cache(tf_gpu_dev *d);
tf_status tf_gpu_alloc_configure(tf_gpu_dev *d, const tf_alloc_conf *conf);
/* These take the lock themselves. */
void tf_gpu_memory_stats(tf_gpu_dev *d, tf_memory_stats *out);
void tf_gpu_reset_peak_memory(tf_gpu_dev *d);

/* ---- what a GPU plugin hands the core ---- */

/* The registration, SDK 2, for `count` devices. */
void tf_gpu_fill_reg(tf_backend_reg *out, const char *name, const tf_backend_iface *iface,
                     const tf_backend_device *devices, int count, const char *note);
/* A backend's extras (get_proc_address) as a table; NULL if `name` is not in it. */
typedef struct tf_gpu_extra {
    const char *name;
    void *fn;
} tf_gpu_extra;
void *tf_gpu_find_extra(const tf_gpu_extra *extras, int n, const char *name);
/* The device index an extra was called with, checked against the count;
 * TF_ERR_INVALID_ARGUMENT naming the extra, or NULL_ARGUMENT for out. */
tf_status tf_gpu_check_index(const tf_host_api *host, const char *extra, int device, int count, const void *out);

/* Environment variables through the host's strict readers (SDK 2.5: the
 * value must mean what the variable means, else one warning and the
 * default). tf_gpu_env_init(host) at plugin init; under an older host
 * every variable reads as unset. */
void tf_gpu_env_init(const tf_host_api *host);
const char *tf_gpu_env_string(const char *name);          /* a path; NULL when unset */
bool tf_gpu_env_flag(const char *name, bool fallback);
int tf_gpu_env_choice(const char *name, const char *const *choices, int n);   /* index, or -1 */

/* ---- launch geometry ---- */

/* OpenCL's NDRange (`dims` 1 or 2, `global` work-items, `local` the group
 * or NULL for 256 x 1) as a CUDA/HIP grid: blocks of `local`, the grid
 * rounded up (every portable kernel bounds-checks). A second dimension past
 * 65535 groups is split over z; get_group_id(1) in opencl_compat.h puts it back
 * together. */
typedef enum tf_gpu_grid_result { TF_GPU_GRID_OK, TF_GPU_GRID_EMPTY, TF_GPU_GRID_TOO_BIG } tf_gpu_grid_result;
tf_gpu_grid_result tf_gpu_grid_of(int dims, const size_t *global, const size_t *local, unsigned grid[3],
                                  unsigned block[3]);

/* ---- staged transfers through pinned host memory ---- */

#define TF_GPU_STAGING_BYTES ((size_t)8 << 20)      /* per buffer; two per device */

/* The driver calls staging needs, queued on the call's stream. */
typedef struct tf_gpu_staging_ops {
    tf_status (*pinned_alloc)(void *ctx, size_t nbytes, void **ptr);
    void (*pinned_free)(void *ctx, void *ptr);
    tf_status (*copy_to_device)(void *ctx, void *dst_handle, size_t dst_offset, const void *src, size_t n);
    tf_status (*copy_to_host)(void *ctx, void *dst, const void *src_handle, size_t src_offset, size_t n);
    tf_status (*event_create)(void *ctx, void **event);
    void (*event_destroy)(void *ctx, void *event);
    tf_status (*event_record)(void *ctx, void *event);     /* after the work queued so far */
    tf_status (*event_wait_host)(void *ctx, void *event);  /* the host waits for it */
} tf_gpu_staging_ops;

typedef struct tf_gpu_staging {
    const tf_gpu_staging_ops *ops;
    void *ctx;
    size_t chunk;                        /* bytes per buffer */
    void *buf[2];                        /* pinned; NULL until first used */
    void *free_event[2];                 /* recorded after the copy that last used each */
    uint64_t staged_bytes;
} tf_gpu_staging;

void tf_gpu_staging_init(tf_gpu_staging *st, const tf_gpu_staging_ops *ops, void *ctx, size_t chunk);
/* Host -> device: returns once `src` has been read (the device copies stay
 * queued ahead of later work). */
tf_status tf_gpu_staged_upload(tf_gpu_staging *st, void *dst_handle, size_t dst_offset, const void *src, size_t n);
/* Device -> host: chunk i's DMA runs while chunk i-1 is copied out. */
tf_status tf_gpu_staged_download(tf_gpu_staging *st, void *dst, const void *src_handle, size_t src_offset, size_t n);
/* Frees the pinned buffers (the caller has waited for the device's work). */
void tf_gpu_staging_release(tf_gpu_staging *st);

#endif
