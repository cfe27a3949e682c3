/* The device code of the CUDA plugin (libtensorframe-cuda.so) and, compiled
 * with TF_HIP, of the ROCm/HIP plugin (libtensorframe-rocm.so): see
 * native_dev.h for how the two share it.
 *
 * Every device becomes cuda:N (rocm:N), N the runtime's ordinal. Each has one
 * non-blocking stream: ops enqueue on it and return; reads, moves and
 * tf_device_synchronize wait for it. Memory comes from a caching allocator
 * per device (size classes, stream-ordered reuse: every op of a device is on
 * its one stream, so a block freed after a launch can serve the next launch
 * at once). Host transfers go through two pinned staging buffers per device,
 * pipelined. Float GEMM goes to the vendor's BLAS (cuBLAS; rocBLAS where
 * installed); every other op runs the vendor's own kernels where it has them
 * (CUDA) or the portable kernels (../gpu_common/kernels.cl, compiled by nvcc
 * or hipcc through opencl_compat.h).
 *
 * Without a runtime, driver or GPU the plugin loads, reports zero devices and
 * the reason, and the rest of tensorframe works. A sticky error (illegal
 * address, launch failure, ...) marks the device lost: its calls then return
 * TF_ERR_DEVICE_LOST instead of crashing.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native_dev.h"

const tf_host_api *tf_cu_host;
static cuda_dev devs[MAX_CUDA_DEVICES];
static tf_backend_device bdevs[MAX_CUDA_DEVICES];
static int n_devs;
static char note[1024];

/* ---- errors ---- */

/* Report a failed call: "cuda:0: cudaMalloc failed: cudaErrorMemoryAllocation (out of memory)".
 * A sticky error marks the device lost. */
tf_status tf_cu_fail(cuda_dev *d, cudaError_t e, const char *what) {
    cudaGetLastError();                 /* clear a non-sticky error so later calls start clean */
    if (!d)
        return tf_cu_host->set_error(TF_ERR_BACKEND, TF_VENDOR_NAME ": %s failed: %s (%s)", what, cudaGetErrorName(e),
                                     cudaGetErrorString(e));
    tf_gpu_error kind = tf_vendor_sticky(e) ? TF_GPU_ERROR_STICKY
                        : e == cudaErrorMemoryAllocation ? TF_GPU_ERROR_OUT_OF_MEMORY : TF_GPU_ERROR_OTHER;
    if (kind == TF_GPU_ERROR_STICKY) d->stats.lost = true;
    return tf_gpu_fail(&d->gd, kind, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Lock the device and make it current on this thread; fails once lost. */
static tf_status enter(cuda_dev *d) {
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess) {
        s = tf_cu_fail(d, e, TF_RT "SetDevice");
        tf_gpu_leave(&d->gd);
    }
    return s;
}

static void leave(cuda_dev *d) { tf_gpu_leave(&d->gd); }

/* enter(), and make `stream` (NULL: the device's own) the one this call
 * queues its work on. */
static tf_status enter_on(cuda_dev *d, tf_backend_stream *stream) {
    tf_status s = enter(d);
    if (s == TF_OK) d->current = stream ? (cudaStream_t)stream : d->stream;
    return s;
}

/* ---- the driver calls the shared allocator and staging use ---- */

static tf_status raw_alloc(void *ctx, size_t capacity, void **handle) {
    cudaError_t e = cudaMalloc(handle, capacity);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "Malloc");
}

static void raw_free(void *ctx, void *handle) {
    (void)ctx;
    cudaFree(handle);                           /* synchronizes: nothing queued still uses it */
}

static const tf_gpu_mem_ops mem_ops = {raw_alloc, raw_free};

static tf_status pinned_alloc(void *ctx, size_t n, void **ptr) {
    cudaError_t e = cudaHostAlloc(ptr, n, cudaHostAllocDefault);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "HostAlloc(staging)");
}

static void pinned_free(void *ctx, void *ptr) {
    (void)ctx;
    cudaFreeHost(ptr);
}

static tf_status copy_to_device(void *ctx, void *dst, size_t off, const void *src, size_t n) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaMemcpyAsync((char *)dst + off, src, n, cudaMemcpyHostToDevice, d->current);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "MemcpyAsync(upload)");
}

static tf_status copy_to_host(void *ctx, void *dst, const void *src, size_t off, size_t n) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaMemcpyAsync(dst, (const char *)src + off, n, cudaMemcpyDeviceToHost, d->current);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "MemcpyAsync(download)");
}

static tf_status staging_event_create(void *ctx, void **event) {
    cudaError_t e = cudaEventCreateWithFlags((cudaEvent_t *)event, cudaEventDisableTiming);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "EventCreateWithFlags(staging)");
}

static void staging_event_destroy(void *ctx, void *event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}

static tf_status staging_event_record(void *ctx, void *event) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, d->current);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "EventRecord(staging)");
}

static tf_status staging_event_wait_host(void *ctx, void *event) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "EventSynchronize(staging)");
}

static const tf_gpu_staging_ops staging_ops = {pinned_alloc,         pinned_free,          copy_to_device,
                                               copy_to_host,         staging_event_create, staging_event_destroy,
                                               staging_event_record, staging_event_wait_host};

/* ---- device info ---- */

static tf_status cu_get_info(void *ctx, tf_backend_device_info *info) {
    cuda_dev *d = ctx;
    tf_vendor_describe(d, info->description, sizeof info->description);
    info->type = d->integrated ? TF_DEVICE_TYPE_INTEGRATED_GPU : TF_DEVICE_TYPE_GPU;
    info->memory_total = d->total_mem;
    info->memory_free = 0;
    if (enter(d) == TF_OK) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
            /* our cached blocks are free to us too */
            info->memory_free = (uint64_t)free_b + d->gd.alloc.stats.cached;
        }
        leave(d);
    }
    info->caps.dtypes = (1u << TF_DTYPE_COUNT) - 1u;   /* quantized ones too: plan.c decodes, encodes, multiplies */
    info->caps.dtypes &= ~(1u << TF_C64 | 1u << TF_C128);   /* stored; their ops run on the CPU */
    info->caps.async = true;
    info->caps.pinned_host_memory = true;
    info->caps.unified_memory = d->integrated;
    info->caps.emulated = false;
    info->caps.tensor_cores = d->matrix_units;
    if (TF_HAS_FIELD(info, tf_backend_device_info, hints)) {
        info->limits = d->limits;
        info->hints.alignment = 256;                 /* the runtime's allocations; the staging buffers are pinned */
        info->hints.work_group_size = 256;           /* the portable kernels' block */
        info->hints.vector_width_f32 = 4;            /* float4 loads */
        info->hints.async_helps = true;
    }
    return TF_OK;
}

/* ---- buffers and transfers ---- */

static tf_status cu_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cuda_buf *b = NULL;
    s = tf_gpu_alloc(&d->gd, nbytes, &b);
    leave(d);
    if (s == TF_OK) *out = (tf_backend_buffer *)b;
    return s;
}

static void cu_buffer_free(void *ctx, tf_backend_buffer *buf) {
    cuda_dev *d = ctx;
    if (!buf) return;
    pthread_mutex_lock(&d->gd.lock);            /* a lost device still takes its blocks back */
    tf_gpu_free(&d->gd, (cuda_buf *)buf);
    pthread_mutex_unlock(&d->gd.lock);
}

static tf_status cu_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                           size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *b = (cuda_buf *)dst;
    tf_status s = tf_gpu_check_range(&d->gd, b, off, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    s = tf_gpu_staged_upload(&d->staging, b->handle, off, src, n);
    leave(d);
    return s;
}

static tf_status cu_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                             size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *b = (cuda_buf *)src;
    tf_status s = tf_gpu_check_range(&d->gd, b, off, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    s = tf_gpu_staged_download(&d->staging, dst, b->handle, off, n);
    leave(d);
    return s;
}

static tf_status cu_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                         tf_backend_buffer *src, size_t soff, size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *db = (cuda_buf *)dst, *sb = (cuda_buf *)src;
    tf_status s = tf_gpu_check_range(&d->gd, db, doff, n);
    if (s == TF_OK) s = tf_gpu_check_range(&d->gd, sb, soff, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    cudaError_t e = cudaMemcpyAsync((char *)db->handle + doff, (const char *)sb->handle + soff, n, cudaMemcpyDeviceToDevice,
                                    d->current);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "MemcpyAsync(device to device)");
    leave(d);
    return s;
}

/* From a buffer of another CUDA device: a peer copy (NVLink or PCIe, the
 * driver stages it where peer access is off) on this device's stream; the
 * core orders the source device's stream around it with events. */
static tf_status cu_copy_from_peer(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                                   void *src_ctx, tf_backend_buffer *src, size_t soff, size_t n) {
    cuda_dev *d = ctx, *sd = src_ctx;
    cuda_buf *db = (cuda_buf *)dst, *sb = (cuda_buf *)src;
    tf_status s = tf_gpu_check_range(&d->gd, db, doff, n);
    if (s == TF_OK) s = tf_gpu_check_range(&sd->gd, sb, soff, n);
    if (s != TF_OK || !n) return s;
    if (d == sd) return cu_copy(ctx, stream, dst, doff, src, soff, n);
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    cudaError_t e = cudaMemcpyPeerAsync((char *)db->handle + doff, d->index, (const char *)sb->handle + soff, sd->index, n,
                                        d->current);
    if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "MemcpyPeerAsync");
    else d->stats.peer_copies++;
    leave(d);
    return s;
}

static tf_status cu_synchronize(void *ctx, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaStreamSynchronize(d->current);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "StreamSynchronize");
    leave(d);
    return s;
}

/* The device pointer, for DLPack (kDLCUDA) and NCCL. */
static tf_status cu_buffer_native(void *ctx, tf_backend_buffer *buf, void **ptr, int32_t *type, int32_t *id) {
    cuda_dev *d = ctx;
    *ptr = ((cuda_buf *)buf)->handle;
    *type = 2;                                       /* kDLCUDA */
    *id = d->index;
    return TF_OK;
}

/* ---- streams and events ---- */

static tf_status cu_stream_native(void *ctx, tf_backend_stream *stream, void **out) {
    cuda_dev *d = ctx;
    *out = stream ? (void *)stream : (void *)d->stream;
    return TF_OK;
}

static tf_status cu_stream_create(void *ctx, tf_backend_stream **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cudaStream_t st = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "StreamCreateWithFlags");
    leave(d);
    if (s == TF_OK) {
        atomic_fetch_add(&d->made_streams, 1);
        *out = (tf_backend_stream *)st;
    }
    return s;
}

static void cu_stream_destroy(void *ctx, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    if (enter(d) != TF_OK) return;            /* a lost device's streams die with its context */
    cudaStreamSynchronize((cudaStream_t)stream);
    cudaStreamDestroy((cudaStream_t)stream);
    atomic_fetch_sub(&d->made_streams, 1);
    leave(d);
}

static tf_status cu_event_create(void *ctx, tf_backend_event **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);   /* timed: tf_event_elapsed_ms */
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "EventCreateWithFlags");
    leave(d);
    if (s == TF_OK) *out = (tf_backend_event *)ev;
    return s;
}

static tf_status cu_event_record(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, d->current);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "EventRecord");
    leave(d);
    return s;
}

/* The event may be another device's (a peer copy's ordering). */
static tf_status cu_event_wait(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaStreamWaitEvent(d->current, (cudaEvent_t)event, 0);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, TF_RT "StreamWaitEvent");
    leave(d);
    return s;
}

static void cu_event_destroy(void *ctx, tf_backend_event *event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);        /* released once its work completes */
}

static tf_status cu_event_query(void *ctx, tf_backend_event *event, bool *done) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady) {
        cudaGetLastError();                      /* not an error: clear it */
        return TF_OK;
    }
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "EventQuery");
}

static tf_status cu_event_synchronize(void *ctx, tf_backend_event *event) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "EventSynchronize");
}

static tf_status cu_event_elapsed_ms(void *ctx, tf_backend_event *start, tf_backend_event *end, double *ms) {
    float f = 0;
    cudaError_t e = cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end);
    if (e != cudaSuccess) return tf_cu_fail(ctx, e, TF_RT "EventElapsedTime");
    *ms = f;
    return TF_OK;
}

/* Straight cudaMemcpyAsync on the stream: from pinned memory (tf_host_alloc)
 * the copy engine reads the caller's buffer itself; from pageable memory
 * CUDA stages it and the call returns once the source is read. */
static tf_status cu_copy_async(cuda_dev *d, tf_backend_stream *stream, cuda_buf *b, size_t off, void *host_ptr,
                               size_t n, bool upload) {
    tf_status s = tf_gpu_check_range(&d->gd, b, off, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    char *dev_ptr = (char *)b->handle + off;
    cudaError_t e = upload ? cudaMemcpyAsync(dev_ptr, host_ptr, n, cudaMemcpyHostToDevice, d->current)
                           : cudaMemcpyAsync(host_ptr, dev_ptr, n, cudaMemcpyDeviceToHost, d->current);
    if (e != cudaSuccess) s = tf_cu_fail(d, e, upload ? TF_RT "MemcpyAsync(write_async)" : TF_RT "MemcpyAsync(read_async)");
    leave(d);
    return s;
}

static tf_status cu_upload_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off,
                                 const void *src, size_t n) {
    return cu_copy_async(ctx, stream, (cuda_buf *)dst, off, (void *)src, n, true);
}

static tf_status cu_download_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                                   size_t n) {
    return cu_copy_async(ctx, stream, (cuda_buf *)src, off, dst, n, false);
}

/* Page-locked and portable: every device's copy engines can read it. */
static tf_status cu_host_alloc(void *ctx, size_t n, void **out) {
    cudaError_t e = cudaHostAlloc(out, n ? n : 1, cudaHostAllocPortable);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(ctx, e, TF_RT "HostAlloc");
}

static void cu_host_free(void *ctx, void *p) {
    (void)ctx;
    cudaFreeHost(p);
}

static tf_status cu_memory_stats(void *ctx, tf_memory_stats *out) {
    cuda_dev *d = ctx;
    tf_gpu_memory_stats(&d->gd, out);
    return TF_OK;
}

static void cu_empty_cache(void *ctx) {
    cuda_dev *d = ctx;
    if (enter(d) != TF_OK) return;
    if (d->widened) tf_gpu_free(&d->gd, d->widened);
    d->widened = NULL;
    tf_gpu_release_cache(&d->gd);
    leave(d);
}

static tf_status cu_alloc_configure(void *ctx, const tf_alloc_conf *conf) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    s = tf_gpu_alloc_configure(&d->gd, conf);
    leave(d);
    return s;
}

static void cu_reset_peak_memory(void *ctx) { tf_gpu_reset_peak_memory(&((cuda_dev *)ctx)->gd); }

/* ---- the portable kernels through cudaLaunchKernel ---- */

void *tf_cu_mem_of(const tf_tensor_desc *t) { return ((cuda_buf *)t->buffer)->handle; }

char *tf_cu_first(const tf_tensor_desc *t) { return (char *)tf_cu_mem_of(t) + t->offset; }

/* OpenCL's NDRange as a grid (tf_gpu_grid_of), launched by the vendor. */
static tf_status cu_launch(void *ctx, tf_dtype program, tf_pk_kernel kernel, int nargs, const tf_pk_arg *args, int dims,
                           const size_t *global, const size_t *local) {
    cuda_dev *d = ctx;
    const char *name = tf_pk_kernel_names[kernel];
    void *argv[24];
    if (nargs > 24) return tf_cu_host->set_error(TF_ERR_BACKEND, "%s: %s: too many arguments", d->gd.name, name);
    for (int i = 0; i < nargs; i++) argv[i] = (void *)args[i].value;
    unsigned grid[3], block[3];
    switch (tf_gpu_grid_of(dims, global, local, grid, block)) {
    case TF_GPU_GRID_EMPTY: return TF_OK;           /* nothing to do */
    case TF_GPU_GRID_TOO_BIG:
        return tf_cu_host->set_error(TF_ERR_UNSUPPORTED, "%s: %s: %zu x %zu work-items exceed the grid limits",
                                     d->gd.name, name, global[0], dims > 1 ? global[1] : (size_t)1);
    default: break;
    }
    tf_status s = tf_vendor_launch(d, program, kernel, argv, grid, block);
    if (s == TF_OK) d->stats.kernels_launched++;
    return s;
}

/* A block of scratch back to the allocator after its launch: safe because
 * its next user is later on the same stream; but a captured launch runs
 * again at every graph launch, so during a capture the graph keeps it. */
void tf_cu_release_block(cuda_dev *d, cuda_buf *b) {
    if (d->capture.on) {
        if (d->capture.n_held == d->capture.cap_held) {
            int cap = d->capture.cap_held ? 2 * d->capture.cap_held : 8;
            cuda_buf **more = tf_cu_host->alloc((size_t)cap * sizeof *more);
            if (more && d->capture.n_held) memcpy(more, d->capture.held, (size_t)d->capture.n_held * sizeof *more);
            if (more) tf_cu_host->free(d->capture.held);
            if (!more) {
                d->capture.failed = true;       /* the capture is dropped, so no launch reads b again */
                tf_gpu_free(&d->gd, b);
                return;
            }
            d->capture.held = more;
            d->capture.cap_held = cap;
        }
        d->capture.held[d->capture.n_held++] = b;
        return;
    }
    tf_gpu_free(&d->gd, b);
}

/* Scratch from the caching allocator, given back by release_block. The
 * kernel gets the device pointer, the allocator the block back. */
static tf_status cu_scratch_alloc(void *ctx, size_t nbytes, void **handle, void **token) {
    ((cuda_dev *)ctx)->shared_scratch = true;
    cuda_buf *b = NULL;
    tf_status s = tf_gpu_alloc(&((cuda_dev *)ctx)->gd, nbytes, &b);
    if (s == TF_OK) {
        *handle = b->handle;
        *token = b;
    }
    return s;
}

static void cu_scratch_free(void *ctx, void *token) { tf_cu_release_block(ctx, token); }

static bool cu_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    return tf_pk_supports(op, true) || (tf_pk_dims_fit(op) && tf_vendor_epilogue_supported(op));
}

/* A quantized product of this many activation rows or more runs as two
 * steps on the device: the weight decoded to f32 scratch by the portable
 * decode kernel, then the vendor's GEMM against it. Below, the portable
 * qgemv (up to 8 rows) reads the quantized weight once for all rows, which
 * is what decode needs. Above, the portable tiles run on the CUDA cores
 * with the decode in their inner loop: on an H200, SmolLM2's 512-token
 * prompt spent 480 us on one [512,576] x [3072,576]^T Q4_1 product, where
 * the decode writes 7 MB (a few us) and cuBLAS's SGEMM needs ~40 us. */
#define WIDEN_FROM_ROWS 9

/* nbytes of scratch for a widened weight: the device's kept block (grown
 * if too small: the old one goes back to the cache, which is safe since
 * its readers are earlier on the stream), or during a capture a block of
 * its own that the graph holds. */
static tf_status widened_scratch(cuda_dev *d, size_t nbytes, cuda_buf **out) {
    if (d->capture.on) return tf_gpu_alloc(&d->gd, nbytes, out);
    if (d->widened && d->widened->capacity >= nbytes) {
        *out = d->widened;
        return TF_OK;
    }
    if (d->widened) {
        tf_gpu_free(&d->gd, d->widened);
        d->widened = NULL;
    }
    tf_status s = tf_gpu_alloc(&d->gd, nbytes, out);
    if (s == TF_OK) d->widened = *out;
    return s;
}

/* True if op is such a product and ran widened (*s holds the result);
 * false to run it as it comes (a refused scratch block included: the
 * tiles need none). */
static bool run_widened_qmatmul(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, tf_status *s) {
    const tf_tensor_desc *x = &op->inputs[0], *w = &op->inputs[1];
    static int enabled = -1;                    /* TF_GPU_WIDEN_QMATMUL=0: the tiles always (to compare) */
    if (enabled < 0) enabled = tf_gpu_env_flag("TF_GPU_WIDEN_QMATMUL", true);
    if (!enabled || op->kind != TF_OP_QMATMUL || tf_pk_block_elems(w->dtype) == 0 || x->shape[0] < WIDEN_FROM_ROWS)
        return false;
    const int64_t n = w->shape[0], k = w->shape[1];
    cuda_buf *scratch = NULL;
    if (widened_scratch(d, (size_t)(n * k) * sizeof(float), &scratch) != TF_OK) return false;
    d->shared_scratch = true;
    tf_op part;
    memset(&part, 0, sizeof part);
    part.struct_size = sizeof part;
    part.kind = TF_OP_COPY;
    part.n_inputs = 1;
    part.inputs[0] = *w;
    part.output = (tf_tensor_desc){(tf_backend_buffer *)scratch, 0, TF_F32, 2, {n, k}, {k, 1}};
    *s = tf_pk_run(tg, &part);
    if (*s == TF_OK) {
        part.kind = TF_OP_GEMM;
        part.n_inputs = 2;
        part.inputs[0] = *x;
        part.inputs[1] = (tf_tensor_desc){(tf_backend_buffer *)scratch, 0, TF_F32, 2, {k, n}, {1, k}};   /* w^T */
        part.output = op->output;
        part.params.alpha = 1;
        part.params.beta = 0;
        if (!tf_vendor_gemm(d, tg, &part, s)) *s = tf_pk_run(tg, &part);
    }
    if (scratch != d->widened) tf_cu_release_block(d, scratch);
    return true;
}

static tf_status cu_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    cuda_dev *d = ctx;
    tf_pk_target tg = {d, tf_cu_host, true, 256, 16, tf_cu_mem_of, cu_launch, cu_scratch_alloc, cu_scratch_free, false, NULL};
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    d->shared_scratch = false;
    bool taken = true;
    if (op->kind == TF_OP_GEMM_EPILOGUE) s = tf_vendor_gemm_epilogue(d, &tg, op);
    else taken = (op->kind == TF_OP_MATMUL || op->kind == TF_OP_GEMM) ? tf_vendor_gemm(d, &tg, op, &s)
                 : op->kind == TF_OP_QMATMUL                          ? run_widened_qmatmul(d, &tg, op, &s)
                                                                     : tf_vendor_fast(d, op, &s);
    if (!taken) s = tf_pk_run(&tg, op);
    /* Scratch goes back to the allocator right after the launch and cuBLAS
     * has one workspace: with made streams, another stream could take them
     * while this op runs, so the op's stream finishes first (until each
     * stream has workspaces of its own). */
    if (d->capture.on) d->capture.shared |= d->shared_scratch;      /* nothing runs now: no wait */
    else if (s == TF_OK && d->shared_scratch && atomic_load(&d->made_streams)) {
        cudaError_t e = cudaStreamSynchronize(d->current);
        if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "StreamSynchronize(scratch)");
    }
    leave(d);
    return s;
}

/* ---- native graphs (SDK 2.3): the recorded ops as one CUDA graph ---- */

/* What graph_capture_end hands the core: the instantiated graph and the
 * scratch its launches use. */
typedef struct cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cuda_buf **held;
    int n_held;
    bool shared;                       /* uses cuBLAS's workspace or shared scratch */
} cuda_graph;

static void drop_capture_blocks(cuda_dev *d, cuda_buf **held, int n) {
    for (int i = 0; i < n; i++) tf_gpu_free(&d->gd, held[i]);
    tf_cu_host->free(held);
}

/* Thread-local capture mode: the runs between begin and end must come from
 * this thread (the core's capture is), and another thread's calls that
 * would break a capture are not refused on its account. */
static tf_status cu_graph_capture_begin(void *ctx, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    if (d->capture.on) {
        leave(d);
        return tf_cu_host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: a capture is already in progress", d->gd.name);
    }
    cudaError_t e = cudaStreamBeginCapture(d->current, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "StreamBeginCapture");
    else {
        memset(&d->capture, 0, sizeof d->capture);
        d->capture.on = true;
        d->capture.stream = d->current;
    }
    leave(d);
    return s;
}

static tf_status cu_graph_capture_end(void *ctx, tf_backend_stream *stream, tf_backend_graph **out) {
    cuda_dev *d = ctx;
    *out = NULL;
    (void)stream;                                /* the capture's own stream */
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    if (!d->capture.on) {
        leave(d);
        return tf_cu_host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: no capture in progress", d->gd.name);
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(d->capture.stream, &graph);   /* ends it even when invalidated */
    bool failed = d->capture.failed;
    cuda_buf **held = d->capture.held;
    int n_held = d->capture.n_held;
    bool shared = d->capture.shared;
    memset(&d->capture, 0, sizeof d->capture);
    if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "StreamEndCapture");
    else if (failed)
        s = tf_cu_host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to hold the graph's scratch", d->gd.name);
    if (s == TF_OK) {
        e = cudaGraphInstantiate(&exec, graph, 0);
        if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "GraphInstantiate");
    }
    cuda_graph *g = s == TF_OK ? tf_cu_host->alloc(sizeof *g) : NULL;
    if (s == TF_OK && !g) s = tf_cu_host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for a graph", d->gd.name);
    if (s != TF_OK) {
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        drop_capture_blocks(d, held, n_held);
        leave(d);
        return s;
    }
    *g = (cuda_graph){graph, exec, held, n_held, shared};
    leave(d);
    *out = (tf_backend_graph *)g;
    return TF_OK;
}

static tf_status cu_graph_launch(void *ctx, tf_backend_stream *stream, tf_backend_graph *graph) {
    cuda_dev *d = ctx;
    cuda_graph *g = (cuda_graph *)graph;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaGraphLaunch(g->exec, d->current);
    if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "GraphLaunch");
    /* as cu_run: another stream must not take the workspace while it runs */
    if (s == TF_OK && g->shared && atomic_load(&d->made_streams)) {
        e = cudaStreamSynchronize(d->current);
        if (e != cudaSuccess) s = tf_cu_fail(d, e, TF_RT "StreamSynchronize(graph scratch)");
    }
    if (s == TF_OK) d->stats.graph_launches++;
    leave(d);
    return s;
}

static void cu_graph_destroy(void *ctx, tf_backend_graph *graph) {
    cuda_dev *d = ctx;
    cuda_graph *g = (cuda_graph *)graph;
    if (!g || enter(d) != TF_OK) return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    /* a launch still queued reads the scratch: the allocator's next user is
     * later on the stream, but this graph may have been launched on another */
    cudaDeviceSynchronize();
    drop_capture_blocks(d, g->held, g->n_held);
    leave(d);
    tf_cu_host->free(g);
}

static const tf_device_iface cu_device_iface = {
    TF_STRUCT_INIT(tf_device_iface),
    .get_info = cu_get_info,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .buffer_upload = cu_upload,
    .buffer_download = cu_download,
    .buffer_copy = cu_copy,
    .supports = cu_supports,
    .run = cu_run,
    .synchronize = cu_synchronize,
    .memory_stats = cu_memory_stats,
    .empty_cache = cu_empty_cache,
    .alloc_configure = cu_alloc_configure,
    .reset_peak_memory = cu_reset_peak_memory,
    .buffer_copy_from_peer = cu_copy_from_peer,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_destroy = cu_event_destroy,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .event_elapsed_ms = cu_event_elapsed_ms,
    .buffer_upload_async = cu_upload_async,
    .buffer_download_async = cu_download_async,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .graph_capture_begin = cu_graph_capture_begin,
    .graph_capture_end = cu_graph_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
    .buffer_native = cu_buffer_native,
    .stream_native = cu_stream_native,
};

/* ---- discovery ---- */

static bool open_device(cuda_dev *d, int ordinal) {
    memset(d, 0, sizeof *d);
    d->index = ordinal;
    tf_gpu_props p;
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess || cudaSetDevice(ordinal) != cudaSuccess) return false;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    d->sm_count = p.multiProcessorCount;
    d->integrated = p.integrated != 0;
    d->total_mem = p.totalGlobalMem;
    tf_vendor_read_limits(d, &p);
    char name[32];
    snprintf(name, sizeof name, TF_VENDOR_NAME ":%d", ordinal);
    snprintf(d->gd.name, sizeof d->gd.name, "%s", name);       /* for messages before tf_gpu_dev_init */
    if (!tf_vendor_open_device(d, &p)) return false;
    if (cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking) != cudaSuccess) {
        tf_vendor_close_device(d);
        return false;
    }
    d->current = d->stream;
    tf_gpu_dev_init(&d->gd, tf_cu_host, name, &mem_ops, d);
    tf_gpu_staging_init(&d->staging, &staging_ops, d, TF_GPU_STAGING_BYTES);
    return true;
}

/* Peer access between every pair that has it, so peer copies take the direct path. */
static void enable_peer_access(void) {
    for (int i = 0; i < n_devs; i++)
        for (int j = 0; j < n_devs; j++) {
            int can = 0;
            if (i == j || cudaDeviceCanAccessPeer(&can, devs[i].index, devs[j].index) != cudaSuccess || !can) continue;
            cudaSetDevice(devs[i].index);
            if (cudaDeviceEnablePeerAccess(devs[j].index, 0) != cudaSuccess) cudaGetLastError();
        }
}

static void discover(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        tf_vendor_no_device_note(note, sizeof note, e);
        cudaGetLastError();
        return;
    }
    int failed = 0;
    for (int i = 0; i < count && n_devs < MAX_CUDA_DEVICES; i++) {
        if (open_device(&devs[n_devs], i)) {
            bdevs[n_devs] = (tf_backend_device){&cu_device_iface, &devs[n_devs]};
            n_devs++;
        } else {
            failed++;
            cudaGetLastError();
        }
    }
    enable_peer_access();
    tf_vendor_discovered(n_devs);
    tf_vendor_note(note, sizeof note, n_devs, failed);
}

/* ---- extras ---- */

static tf_status get_stats(int device, tf_vendor_stats *out) {
    tf_status s = tf_gpu_check_index(tf_cu_host, "tf_" TF_VENDOR_NAME "_stats", device, n_devs, out);
    if (s != TF_OK) return s;
    pthread_mutex_lock(&devs[device].gd.lock);
    *out = devs[device].stats;
    out->staged_bytes = devs[device].staging.staged_bytes;
    pthread_mutex_unlock(&devs[device].gd.lock);
    return TF_OK;
}

#ifdef TF_CUDA_TEST_HOOKS
/* Test-only builds (-DTF_CUDA_TEST_HOOKS=ON): run a kernel that writes
 * through a bad pointer, so tests/cuda/test_cuda_gpu.c can see a sticky
 * error mark the device lost and the process go on. */
int tf_cuda_debug_fault_launch(void *stream);
static tf_status debug_fault(int device) {
    tf_status s = tf_gpu_check_index(tf_cu_host, "tf_cuda_debug_fault", device, n_devs, &devs[0]);
    if (s != TF_OK || (s = enter(&devs[device])) != TF_OK) return s;
    cuda_dev *d = &devs[device];
    int e = tf_cuda_debug_fault_launch(d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    s = e == cudaSuccess ? TF_OK : tf_cu_fail(d, (cudaError_t)e, "tf_cuda_debug_fault");
    leave(d);
    return s;
}
#endif

static void *cu_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    if (!strcmp(name, "tf_" TF_VENDOR_NAME "_stats")) return (void *)get_stats;
#ifdef TF_CUDA_TEST_HOOKS
    if (!strcmp(name, "tf_cuda_debug_fault")) return (void *)debug_fault;
#endif
    return tf_vendor_extra(name);
}

/* A lost device's context refuses most calls: it is not waited for, but
 * everything is still handed back (a runtime that can release it then
 * does, and nothing the plugin holds outlives it). */
static void cu_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cuda_dev *d = &devs[i];
        bool current = cudaSetDevice(d->index) == cudaSuccess;
        if (!d->gd.lost && current) cudaStreamSynchronize(d->stream);
        tf_gpu_staging_release(&d->staging);
        tf_vendor_close_device(d);
        cudaStreamDestroy(d->stream);
        cudaGetLastError();                   /* a lost device's errors end with it */
        d->widened = NULL;                    /* a live block: the allocator's destroy frees it */
        tf_gpu_dev_destroy(&d->gd);
    }
    n_devs = 0;
}

static const tf_backend_iface cu_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = cu_shutdown,
    .get_proc_address = cu_get_proc_address,
};

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    tf_cu_host = h;
    tf_gpu_env_init(h);
    n_devs = 0;
    note[0] = 0;
    if (tf_vendor_init(note, sizeof note)) discover();
    tf_gpu_fill_reg(out, TF_VENDOR_NAME, &cu_backend_iface, bdevs, n_devs, note);
    return TF_OK;
}
