/* The CUDA backend, built as the plugin libtensorframe-cuda.so.
 *
 * Every CUDA device becomes cuda:N (N = the CUDA ordinal). Each has one
 * non-blocking stream: ops enqueue on it and return; reads, moves and
 * tf_device_synchronize wait for it. Memory comes from a caching allocator
 * per device (size classes, stream-ordered reuse: every op of a device is on
 * its one stream, so a block freed after a launch can serve the next launch
 * at once). Host transfers go through two pinned staging buffers per device,
 * pipelined. Float GEMM goes to cuBLAS (f16/bf16 on tensor cores with f32
 * accumulation, f32 with TF32 only when asked); every other op runs the
 * portable kernels (../gpu_common/kernels.cl, compiled by nvcc through
 * cuda_compat.h for sm_80 and sm_90 plus PTX).
 *
 * Without a driver or a GPU the plugin loads, reports zero devices and the
 * reason (cudaGetDeviceCount's error), and the rest of tensorframe works.
 * A sticky CUDA error (illegal address, launch failure, ...) marks the
 * device lost: its calls then return TF_ERR_DEVICE_LOST instead of crashing.
 */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>

#include "cublas_table.h"
#include "lt_gemm.h"
#include "fast_plan.h"
#include "gpu_runtime.h"
#include "plan.h"

#define MAX_CUDA_DEVICES 16

/* The portable kernels, one table per dtype program (kernels_<dtype>.cu). */
#define TF__TABLE(E, n, sz, fl, in) extern const void *const tf_cuda_kernels_##n[TF_PK_KERNEL_COUNT];
TF_DTYPE_LIST(TF__TABLE)
#undef TF__TABLE
static const void *const *const kernel_tables[TF_DTYPE_COUNT] = {
#define TF__ROW(E, n, sz, fl, in) [TF_##E] = tf_cuda_kernels_##n,
    TF_DTYPE_LIST(TF__ROW)
#undef TF__ROW
};

/* A buffer is a block of the shared allocator; its handle is the device pointer. */
typedef tf_gpu_block cuda_buf;

typedef struct cuda_dev {
    tf_gpu_dev gd;                      /* lock, lost state, allocator (gpu_runtime.h) */
    tf_gpu_staging staging;             /* two pinned buffers, pipelined */
    int index;                          /* CUDA ordinal */
    char name[256];
    int cc_major, cc_minor, sm_count;
    bool integrated;
    uint64_t total_mem;
    tf_device_limits limits;            /* from cudaDeviceProp at discovery */
    cudaStream_t stream;                /* used when the core passes no stream */
    cudaStream_t current;               /* the stream of the call in progress (set under the lock) */
    _Atomic int made_streams;           /* streams tf_stream_create made, alive */
    bool shared_scratch;                /* the op in progress used scratch or cuBLAS's workspace */
    struct {                            /* a stream capture for a native graph (SDK 2.3) in progress */
        bool on, failed, shared;        /* failed: a block could not be held; shared: as shared_scratch */
        cudaStream_t stream;
        cuda_buf **held;                /* scratch the captured launches use: the graph's until destroyed */
        int n_held, cap_held;
    } capture;
    cublasHandle_t blas;                /* made on the first GEMM */
    cublasLtHandle_t lt;                /* made on the first GEMM with a bias */
    tf_lt_cache lt_cache;
    tf_cuda_stats stats;
} cuda_dev;

static const tf_host_api *host;
static cuda_dev devs[MAX_CUDA_DEVICES];
static tf_backend_device bdevs[MAX_CUDA_DEVICES];
static int n_devs;
static char note[1024];
static bool use_tf32;
static tf_cublas blas_lib;               /* resolved at plugin init; GEMM falls back without it */

/* ---- errors ---- */

/* Errors after which the CUDA context is unusable until the process ends. */
static bool sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchTimeout: case cudaErrorAssert: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorLaunchFailure: case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable: case cudaErrorContained:
        return true;
    default:
        return false;
    }
}

/* Report a failed CUDA call: "cuda:0: cudaMalloc failed: cudaErrorMemoryAllocation (out of memory)".
 * A sticky error marks the device lost. */
static tf_status cuda_fail(cuda_dev *d, cudaError_t e, const char *what) {
    cudaGetLastError();                 /* clear a non-sticky error so later calls start clean */
    if (!d) return host->set_error(TF_ERR_BACKEND, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    tf_gpu_error kind = sticky(e) ? TF_GPU_ERROR_STICKY
                        : e == cudaErrorMemoryAllocation ? TF_GPU_ERROR_OUT_OF_MEMORY : TF_GPU_ERROR_OTHER;
    if (kind == TF_GPU_ERROR_STICKY) d->stats.lost = true;
    return tf_gpu_fail(&d->gd, kind, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static tf_status blas_fail(cuda_dev *d, cublasStatus_t e, const char *what) {
    tf_status s = e == CUBLAS_STATUS_ALLOC_FAILED ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    if (e == CUBLAS_STATUS_EXECUTION_FAILED) {   /* usually a sticky error underneath */
        cudaError_t ce = cudaGetLastError();
        if (sticky(ce)) return cuda_fail(d, ce, what);
    }
    return host->set_error(s, "%s: %s failed: %s", d->gd.name, what, blas_lib.cublasGetStatusName(e));
}

#define CU(d, call, what)                                  \
    do {                                                   \
        cudaError_t e_ = (call);                           \
        if (e_ != cudaSuccess) return cuda_fail(d, e_, what); \
    } while (0)

/* Lock the device and make it current on this thread; fails once lost. */
static tf_status enter(cuda_dev *d) {
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess) {
        s = cuda_fail(d, e, "cudaSetDevice");
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
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaMalloc");
}

static void raw_free(void *ctx, void *handle) {
    (void)ctx;
    cudaFree(handle);                           /* synchronizes: nothing queued still uses it */
}

static const tf_gpu_mem_ops mem_ops = {raw_alloc, raw_free};

static tf_status pinned_alloc(void *ctx, size_t n, void **ptr) {
    cudaError_t e = cudaHostAlloc(ptr, n, cudaHostAllocDefault);
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaHostAlloc(staging)");
}

static void pinned_free(void *ctx, void *ptr) {
    (void)ctx;
    cudaFreeHost(ptr);
}

static tf_status copy_to_device(void *ctx, void *dst, size_t off, const void *src, size_t n) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaMemcpyAsync((char *)dst + off, src, n, cudaMemcpyHostToDevice, d->current);
    return e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaMemcpyAsync(upload)");
}

static tf_status copy_to_host(void *ctx, void *dst, const void *src, size_t off, size_t n) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaMemcpyAsync(dst, (const char *)src + off, n, cudaMemcpyDeviceToHost, d->current);
    return e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaMemcpyAsync(download)");
}

static tf_status staging_event_create(void *ctx, void **event) {
    cudaError_t e = cudaEventCreateWithFlags((cudaEvent_t *)event, cudaEventDisableTiming);
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaEventCreateWithFlags(staging)");
}

static void staging_event_destroy(void *ctx, void *event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}

static tf_status staging_event_record(void *ctx, void *event) {
    cuda_dev *d = ctx;
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, d->current);
    return e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaEventRecord(staging)");
}

static tf_status staging_event_wait_host(void *ctx, void *event) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaEventSynchronize(staging)");
}

static const tf_gpu_staging_ops staging_ops = {pinned_alloc,         pinned_free,          copy_to_device,
                                               copy_to_host,         staging_event_create, staging_event_destroy,
                                               staging_event_record, staging_event_wait_host};

/* ---- device info ---- */

static tf_status cu_get_info(void *ctx, tf_backend_device_info *info) {
    cuda_dev *d = ctx;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    snprintf(info->description, sizeof info->description,
             "%.120s (compute %d.%d, %d SMs; driver %d.%d, runtime %d.%d)%s", d->name, d->cc_major, d->cc_minor,
             d->sm_count, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, d->gd.lost ? " LOST" : "");
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
    info->caps.async = true;
    info->caps.pinned_host_memory = true;
    info->caps.unified_memory = d->integrated;
    info->caps.emulated = false;
    info->caps.tensor_cores = d->cc_major >= 7;
    if (TF_HAS_FIELD(info, tf_backend_device_info, hints)) {
        info->limits = d->limits;
        info->hints.alignment = 256;                 /* cudaMalloc's; the staging buffers are pinned */
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
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaMemcpyAsync(device to device)");
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
    if (e != cudaSuccess) s = cuda_fail(d, e, "cudaMemcpyPeerAsync");
    else d->stats.peer_copies++;
    leave(d);
    return s;
}

static tf_status cu_synchronize(void *ctx, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaStreamSynchronize(d->current);
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaStreamSynchronize");
    leave(d);
    return s;
}

/* ---- streams and events ---- */

static tf_status cu_stream_create(void *ctx, tf_backend_stream **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cudaStream_t st = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaStreamCreateWithFlags");
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
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaEventCreateWithFlags");
    leave(d);
    if (s == TF_OK) *out = (tf_backend_event *)ev;
    return s;
}

static tf_status cu_event_record(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaEventRecord((cudaEvent_t)event, d->current);
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaEventRecord");
    leave(d);
    return s;
}

/* The event may be another device's (a peer copy's ordering). */
static tf_status cu_event_wait(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    cudaError_t e = cudaStreamWaitEvent(d->current, (cudaEvent_t)event, 0);
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, e, "cudaStreamWaitEvent");
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
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaEventQuery");
}

static tf_status cu_event_synchronize(void *ctx, tf_backend_event *event) {
    cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaEventSynchronize");
}

static tf_status cu_event_elapsed_ms(void *ctx, tf_backend_event *start, tf_backend_event *end, double *ms) {
    float f = 0;
    cudaError_t e = cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end);
    if (e != cudaSuccess) return cuda_fail(ctx, e, "cudaEventElapsedTime");
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
    if (e != cudaSuccess) s = cuda_fail(d, e, upload ? "cudaMemcpyAsync(write_async)" : "cudaMemcpyAsync(read_async)");
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
    return e == cudaSuccess ? TF_OK : cuda_fail(ctx, e, "cudaHostAlloc");
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

static void *mem_of(const tf_tensor_desc *t) { return ((cuda_buf *)t->buffer)->handle; }

static unsigned blocks_of(size_t items, size_t per_block) { return (unsigned)((items + per_block - 1) / per_block); }

/* OpenCL's NDRange as a CUDA grid. A second dimension past 65535 groups is
 * split over z; cuda_compat.h's get_group_id(1) puts it back together and
 * the kernels bounds-check the groups past the end. */
static tf_status cu_launch(void *ctx, tf_dtype program, tf_pk_kernel kernel, int nargs, const tf_pk_arg *args, int dims,
                           const size_t *global, const size_t *local) {
    cuda_dev *d = ctx;
    const char *name = tf_pk_kernel_names[kernel];
    const void *fn = kernel_tables[program] ? kernel_tables[program][kernel] : NULL;
    if (!fn)
        return host->set_error(TF_ERR_BACKEND, "cuda:%d: kernel '%s' is not built for %d", d->index, name, (int)program);
    void *argv[24];
    if (nargs > 24) return host->set_error(TF_ERR_BACKEND, "cuda:%d: %s: too many arguments", d->index, name);
    for (int i = 0; i < nargs; i++) argv[i] = (void *)args[i].value;
    dim3 block = {1, 1, 1}, grid = {1, 1, 1};
    block.x = local ? (unsigned)local[0] : 256;
    size_t gx = (global[0] + block.x - 1) / block.x, gy = 1;
    if (dims > 1) {
        block.y = local ? (unsigned)local[1] : 1;
        gy = (global[1] + block.y - 1) / block.y;
    }
    if (gx == 0 || gy == 0) return TF_OK;       /* nothing to do */
    if (gx > (size_t)INT_MAX || gy > (size_t)65535 * 65535)
        return host->set_error(TF_ERR_UNSUPPORTED, "cuda:%d: %s: %zu x %zu work-groups exceed the grid limits", d->index,
                               name, gx, gy);
    grid.x = (unsigned)gx;
    grid.y = (unsigned)(gy > 65535 ? 65535 : gy);
    grid.z = (unsigned)((gy + grid.y - 1) / grid.y);
    cudaError_t e = cudaLaunchKernel(fn, grid, block, argv, 0, d->current);
    if (e != cudaSuccess) return cuda_fail(d, e, name);
    d->stats.kernels_launched++;
    return TF_OK;
}

/* A block of scratch back to the allocator after its launch: safe because
 * its next user is later on the same stream; but a captured launch runs
 * again at every graph launch, so during a capture the graph keeps it. */
static void release_block(cuda_dev *d, cuda_buf *b) {
    if (d->capture.on) {
        if (d->capture.n_held == d->capture.cap_held) {
            int cap = d->capture.cap_held ? 2 * d->capture.cap_held : 8;
            cuda_buf **more = host->alloc((size_t)cap * sizeof *more);
            if (more && d->capture.n_held) memcpy(more, d->capture.held, (size_t)d->capture.n_held * sizeof *more);
            if (more) host->free(d->capture.held);
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

static void cu_scratch_free(void *ctx, void *token) { release_block(ctx, token); }

/* ---- GEMM through cuBLAS ---- */

/* A row-major [rows, cols] operand as cuBLAS's column-major world sees it,
 * with one stride across the (flattened) batch dimensions. */
typedef struct blas_mat { bool trans; int64_t ld, batch_stride; } blas_mat;

static bool blas_mat_of(const tf_tensor_desc *t, const int64_t *batch_shape, int nb, int64_t rows, int64_t cols,
                        blas_mat *m) {
    int64_t rs = t->strides[nb], cs = t->strides[nb + 1];
    if (cs == 1 && (rs >= cols || rows == 1)) {
        m->trans = false;
        m->ld = rows == 1 ? (cols > 0 ? cols : 1) : rs;
    } else if (rs == 1 && (cs >= rows || cols == 1)) {
        m->trans = true;
        m->ld = cols == 1 ? (rows > 0 ? rows : 1) : cs;
    } else {
        return false;
    }
    int64_t s = -1, span = 1;
    for (int i = nb - 1; i >= 0; i--) {
        if (batch_shape[i] == 1) continue;
        if (s < 0) s = t->strides[i];
        else if (t->strides[i] != s * span) return false;
        span *= batch_shape[i];
    }
    m->batch_stride = s < 0 ? 0 : s;
    return true;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static tf_status ensure_blas(cuda_dev *d) {
    if (d->blas) return TF_OK;
    cublasStatus_t e = blas_lib.cublasCreate_v2(&d->blas);
    if (e != CUBLAS_STATUS_SUCCESS) return blas_fail(d, e, "cublasCreate");
    return TF_OK;
}

/* TF_CUDA_LT=0 keeps bias GEMMs on the copy-then-GEMM path (to compare). */
static bool lt_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("TF_CUDA_LT");
        enabled = !(v && !strcmp(v, "0"));
    }
    return enabled;
}

/* g through cuBLASLt with the bias in its epilogue: true if it ran (*s holds
 * the result), false to take the cuBLAS path instead (no cuBLASLt, no
 * algorithm for g, or no room for the workspace; nothing was written). */
static bool try_lt_bias(cuda_dev *d, const tf_lt_gemm *g, tf_status *s) {
    if (!blas_lib.lt_loaded || !lt_enabled()) return false;
    if (!d->lt && blas_lib.cublasLtCreate(&d->lt) != CUBLAS_STATUS_SUCCESS) {
        d->lt = NULL;
        return false;
    }
    cuda_buf *ws = NULL;
    if (tf_gpu_alloc(&d->gd, TF_LT_WORKSPACE, &ws) != TF_OK) return false;
    d->shared_scratch = true;
    cublasStatus_t e = tf_lt_gemm_run(&blas_lib, d->lt, &d->lt_cache, g, ws->handle, TF_LT_WORKSPACE, d->current);
    release_block(d, ws);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    *s = e == CUBLAS_STATUS_SUCCESS ? TF_OK : blas_fail(d, e, "cublasLtMatmul(bias epilogue)");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* out = alpha * a @ b (+ beta * c): true if cuBLAS took it (*s holds the
 * result), false to leave it to the portable matmul kernel. Row-major
 * C = A B is column-major C^T = B^T A^T: cuBLAS gets b first. */
static bool try_cublas(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, tf_status *s) {
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    tf_dtype dt = o->dtype;
    cudaDataType_t type;
    switch (dt) {
    case TF_F32: type = CUDA_R_32F; break;
    case TF_F64: type = CUDA_R_64F; break;
    case TF_F16: type = CUDA_R_16F; break;
    case TF_BF16: type = CUDA_R_16BF; break;
    default: return false;
    }
    if (!blas_lib.loaded) return false;          /* the portable matmul kernel instead */
    int nb = o->ndim - 2;
    int64_t M = o->shape[nb], N = o->shape[nb + 1], K = a->shape[nb + 1], batch = 1;
    for (int i = 0; i < nb; i++) batch *= o->shape[i];
    blas_mat ma, mb;
    if (!tf_desc_is_contiguous(o) || M == 0 || N == 0 || K == 0 || batch == 0 ||
        !blas_mat_of(a, o->shape, nb, M, K, &ma) || !blas_mat_of(b, o->shape, nb, K, N, &mb) || !fits_int(M) ||
        !fits_int(N) || !fits_int(K) || !fits_int(ma.ld) || !fits_int(mb.ld) || !fits_int(batch))
        return false;
    bool gemm = op->kind == TF_OP_GEMM, with_c = gemm && op->n_inputs > 2 && op->params.beta != 0;
    double alpha = gemm ? op->params.alpha : 1, beta = with_c ? op->params.beta : 0;
    cublasComputeType_t compute = dt == TF_F64 ? CUBLAS_COMPUTE_64F
                                  : dt == TF_F32 && use_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (with_c && tf_cuda_plan_gemm_bias(op)) {
        tf_lt_gemm g = {type, compute, mb.trans, ma.trans, N, M, K, mb.ld, ma.ld, N, mb.batch_stride, ma.batch_stride,
                        M * N, (int32_t)batch, (float)alpha, (const char *)mem_of(b) + b->offset,
                        (const char *)mem_of(a) + a->offset, (const char *)mem_of(&op->inputs[2]) + op->inputs[2].offset,
                        (char *)mem_of(o) + o->offset};
        if (try_lt_bias(d, &g, s)) return true;
    }
    if ((*s = ensure_blas(d)) != TF_OK) return true;
    if (with_c) {                                /* out = c (broadcast), then beta * out + alpha * a@b */
        tf_op copy;
        memset(&copy, 0, sizeof copy);
        copy.struct_size = sizeof copy;
        copy.kind = TF_OP_COPY;
        copy.n_inputs = 1;
        copy.inputs[0] = op->inputs[2];
        copy.output = *o;
        if ((*s = tf_pk_run(tg, &copy)) != TF_OK) return true;
    }
    const char *pa = (const char *)mem_of(a) + a->offset, *pb = (const char *)mem_of(b) + b->offset;
    char *po = (char *)mem_of(o) + o->offset;
    float af = (float)alpha, bf = (float)beta;
    const void *pal = dt == TF_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pbe = dt == TF_F64 ? (const void *)&beta : (const void *)&bf;
    d->shared_scratch = true;                    /* the handle's workspace serves every stream */
    cublasStatus_t e = blas_lib.cublasSetStream_v2(d->blas, d->current);
    if (e != CUBLAS_STATUS_SUCCESS) {
        *s = blas_fail(d, e, "cublasSetStream");
        return true;
    }
    e = blas_lib.cublasGemmStridedBatchedEx(
        d->blas, mb.trans ? CUBLAS_OP_T : CUBLAS_OP_N, ma.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, pal,
        pb, type, (int)mb.ld, (long long)mb.batch_stride, pa, type, (int)ma.ld, (long long)ma.batch_stride, pbe, po, type,
        (int)N, (long long)(M * N), (int)batch, compute, CUBLAS_GEMM_DEFAULT);
    *s = e == CUBLAS_STATUS_SUCCESS ? TF_OK : blas_fail(d, e, "cublasGemmStridedBatchedEx");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* ---- ops ---- */

/* ---- the plugin's own kernels (fast_kernels.cu; fast_plan.c says which ops) ---- */

static uintptr_t addr_of(const tf_tensor_desc *t) { return (uintptr_t)mem_of(t) + (uintptr_t)t->offset; }

/* TF_CUDA_PORTABLE_ONLY=1 keeps every op on the portable kernels (to compare). */
static bool fast_kernels_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("TF_CUDA_PORTABLE_ONLY");
        enabled = !(v && *v && strcmp(v, "0") != 0);
    }
    return enabled;
}

/* A fast kernel that may need device scratch: nbytes of it (0: none) go in
 * *slot for the launch, and back to the allocator right after it, which is
 * safe because the block's next user is later on the same stream. */
static tf_status launch_with_scratch(cuda_dev *d, size_t nbytes, void **slot, int (*launch)(const void *, void *),
                                     const void *args, const char *what) {
    cuda_buf *scratch = NULL;
    if (nbytes) {
        d->shared_scratch = true;
        tf_status s = tf_gpu_alloc(&d->gd, nbytes, &scratch);
        if (s != TF_OK) return s;
        *slot = scratch->handle;
    }
    int e = launch(args, d->current);
    if (scratch) release_block(d, scratch);
    return e == cudaSuccess ? TF_OK : cuda_fail(d, (cudaError_t)e, what);
}

static int launch_row(const void *a, void *stream) { return tf_cuda_row_launch(a, stream); }
static int launch_reduce(const void *a, void *stream) { return tf_cuda_reduce_launch(a, stream); }
static int launch_attention(const void *a, void *stream) { return tf_cuda_attn_launch(a, stream); }

/* True if one of the plugin's kernels took op (*s holds the result). */
static bool try_fast(cuda_dev *d, const tf_op *op, tf_status *s) {
    if (!fast_kernels_enabled()) return false;
    tf_cuda_row_args row;
    tf_cuda_attn_args attn;
    tf_cuda_reduce_args red;
    if (tf_cuda_plan_row(op, addr_of, &row)) {
        *s = launch_with_scratch(d, 0, NULL, launch_row, &row, "row kernel");
    } else if (tf_cuda_plan_reduce(op, d->sm_count, addr_of, &red)) {
        *s = launch_with_scratch(d, tf_cuda_reduce_scratch_bytes(&red), (void **)&red.partial, launch_reduce, &red,
                                 "reduction kernel");
    } else if (tf_cuda_plan_attention(op, d->sm_count, addr_of, &attn)) {
        *s = launch_with_scratch(d, tf_cuda_attn_scratch_bytes(&attn), (void **)&attn.partial, launch_attention, &attn,
                                 "attention kernel");
    } else {
        return false;
    }
    if (*s == TF_OK) d->stats.kernels_launched++;
    return true;
}

static bool cu_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    return tf_pk_supports(op, true);
}

static tf_status cu_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    cuda_dev *d = ctx;
    tf_pk_target tg = {d, host, true, 256, 16, mem_of, cu_launch, cu_scratch_alloc, cu_scratch_free, false, NULL};
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    d->shared_scratch = false;
    bool taken = (op->kind == TF_OP_MATMUL || op->kind == TF_OP_GEMM) ? try_cublas(d, &tg, op, &s) : try_fast(d, op, &s);
    if (!taken) s = tf_pk_run(&tg, op);
    /* Scratch goes back to the allocator right after the launch and cuBLAS
     * has one workspace: with made streams, another stream could take them
     * while this op runs, so the op's stream finishes first (until each
     * stream has workspaces of its own). */
    if (d->capture.on) d->capture.shared |= d->shared_scratch;      /* nothing runs now: no wait */
    else if (s == TF_OK && d->shared_scratch && atomic_load(&d->made_streams)) {
        cudaError_t e = cudaStreamSynchronize(d->current);
        if (e != cudaSuccess) s = cuda_fail(d, e, "cudaStreamSynchronize(scratch)");
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
    host->free(held);
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
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: a capture is already in progress", d->gd.name);
    }
    cudaError_t e = cudaStreamBeginCapture(d->current, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) s = cuda_fail(d, e, "cudaStreamBeginCapture");
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
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: no capture in progress", d->gd.name);
    }
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(d->capture.stream, &graph);   /* ends it even when invalidated */
    bool failed = d->capture.failed;
    cuda_buf **held = d->capture.held;
    int n_held = d->capture.n_held;
    bool shared = d->capture.shared;
    memset(&d->capture, 0, sizeof d->capture);
    if (e != cudaSuccess) s = cuda_fail(d, e, "cudaStreamEndCapture");
    else if (failed)
        s = host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to hold the graph's scratch", d->gd.name);
    if (s == TF_OK) {
        e = cudaGraphInstantiate(&exec, graph, 0);
        if (e != cudaSuccess) s = cuda_fail(d, e, "cudaGraphInstantiate");
    }
    cuda_graph *g = s == TF_OK ? host->alloc(sizeof *g) : NULL;
    if (s == TF_OK && !g) s = host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for a graph", d->gd.name);
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
    if (e != cudaSuccess) s = cuda_fail(d, e, "cudaGraphLaunch");
    /* as cu_run: another stream must not take the workspace while it runs */
    if (s == TF_OK && g->shared && atomic_load(&d->made_streams)) {
        e = cudaStreamSynchronize(d->current);
        if (e != cudaSuccess) s = cuda_fail(d, e, "cudaStreamSynchronize(graph scratch)");
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
    host->free(g);
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
};

/* ---- discovery ---- */

static void read_limits(cuda_dev *d, const struct cudaDeviceProp *p) {
    tf_device_limits *l = &d->limits;
    l->max_buffer_bytes = l->max_binding_bytes = p->totalGlobalMem;
    l->compute_units = (uint32_t)p->multiProcessorCount;
    l->max_work_group_size = (uint32_t)p->maxThreadsPerBlock;
    for (int i = 0; i < 3; i++) l->max_work_group_dims[i] = (uint32_t)p->maxThreadsDim[i];
    l->subgroup_size = (uint32_t)p->warpSize;
    l->shared_memory_bytes = p->sharedMemPerBlockOptin ? p->sharedMemPerBlockOptin : p->sharedMemPerBlock;
    l->cache_bytes[1] = (uint64_t)p->l2CacheSize;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d->index) == cudaSuccess) l->clock_mhz = (uint32_t)(khz / 1000);
}

static bool open_device(cuda_dev *d, int ordinal) {
    memset(d, 0, sizeof *d);
    d->index = ordinal;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess || cudaSetDevice(ordinal) != cudaSuccess) return false;
    snprintf(d->name, sizeof d->name, "%s", p.name);
    d->cc_major = p.major;
    d->cc_minor = p.minor;
    d->sm_count = p.multiProcessorCount;
    d->integrated = p.integrated != 0;
    d->total_mem = p.totalGlobalMem;
    d->stats.compute_capability = p.major * 10 + p.minor;
    read_limits(d, &p);
    if (cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking) != cudaSuccess) return false;
    d->current = d->stream;
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", ordinal);
    tf_gpu_dev_init(&d->gd, host, name, &mem_ops, d);
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
        char driver[200] = "";
        bool have_driver = tf_cuda_driver_present(driver, sizeof driver);
        snprintf(note, sizeof note, "no CUDA device (cudaGetDeviceCount: %s: %s%s%.200s)%s%.200s",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorName(e), e == cudaSuccess ? "none found" : cudaGetErrorString(e),
                 have_driver ? "" : "; the NVIDIA driver is not installed: ", driver,
                 blas_lib.loaded ? "; cuBLAS loaded" : blas_lib.why[0] ? "; cuBLAS not loaded: " : "", blas_lib.why);
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
    /* cuBLAS only where there is a GPU: ~150 MB and ~65 ms a machine without
     * one need not pay. */
    if (n_devs > 0 && !blas_lib.loaded && !blas_lib.why[0])
        tf_cublas_load(&blas_lib, TF_CUBLAS_SONAME, TF_CUBLAS_TOOLKIT_PATH);
    if (blas_lib.loaded && !blas_lib.lt_loaded) tf_cublaslt_load(&blas_lib, TF_CUBLASLT_SONAME, TF_CUBLASLT_TOOLKIT_PATH);
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    snprintf(note, sizeof note, "%d device(s)%s; CUDA runtime %d.%d, %s%s%.300s%s%.300s", n_devs,
             failed ? " (some failed to open)" : "", runtime / 1000, runtime % 1000 / 10,
             blas_lib.loaded ? "cuBLAS for GEMM" : "GEMM on the portable kernel, cuBLAS not loaded: ",
             use_tf32 && blas_lib.loaded ? " (TF32 on)" : "", blas_lib.why,
             !blas_lib.loaded ? "" : blas_lib.lt_loaded ? ", cuBLASLt for bias epilogues" : "; cuBLASLt not loaded: ",
             blas_lib.lt_why);
}

/* ---- extras ---- */

static tf_status get_stats(int device, tf_cuda_stats *out) {
    tf_status s = tf_gpu_check_index(host, "tf_cuda_stats", device, n_devs, out);
    if (s != TF_OK) return s;
    pthread_mutex_lock(&devs[device].gd.lock);
    *out = devs[device].stats;
    out->staged_bytes = devs[device].staging.staged_bytes;
    pthread_mutex_unlock(&devs[device].gd.lock);
    return TF_OK;
}

static tf_status set_tf32(bool enabled) {
    use_tf32 = enabled;
    return TF_OK;
}

#ifdef TF_CUDA_TEST_HOOKS
/* Test-only builds (-DTF_CUDA_TEST_HOOKS=ON): run a kernel that writes
 * through a bad pointer, so tests/cuda/test_cuda_gpu.c can see a sticky
 * error mark the device lost and the process go on. */
static tf_status debug_fault(int device) {
    tf_status s = tf_gpu_check_index(host, "tf_cuda_debug_fault", device, n_devs, &devs[0]);
    if (s != TF_OK || (s = enter(&devs[device])) != TF_OK) return s;
    cuda_dev *d = &devs[device];
    int e = tf_cuda_debug_fault_launch(d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->stream);
    s = e == cudaSuccess ? TF_OK : cuda_fail(d, (cudaError_t)e, "tf_cuda_debug_fault");
    leave(d);
    return s;
}
#endif

static const tf_gpu_extra extras[] = {
    {"tf_cuda_stats", (void *)(tf_cuda_stats_fn)get_stats},
    {"tf_cuda_set_tf32", (void *)(tf_cuda_set_tf32_fn)set_tf32},
#ifdef TF_CUDA_TEST_HOOKS
    {"tf_cuda_debug_fault", (void *)debug_fault},
#endif
};

static void *cu_get_proc_address(void *ctx, const char *name) {
    return tf_gpu_find_extra(extras, (int)(sizeof extras / sizeof *extras), name);
}

static void cu_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cuda_dev *d = &devs[i];
        if (!d->gd.lost && cudaSetDevice(d->index) == cudaSuccess) {
            cudaStreamSynchronize(d->stream);
            tf_gpu_staging_release(&d->staging);
            if (d->blas) blas_lib.cublasDestroy_v2(d->blas);
            if (d->lt) blas_lib.cublasLtDestroy(d->lt);
            cudaStreamDestroy(d->stream);
        }
        tf_gpu_dev_destroy(&d->gd);           /* a lost device's memory goes with its context */
    }
    n_devs = 0;
}

static const tf_backend_iface cu_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = cu_shutdown,
    .get_proc_address = cu_get_proc_address,
};

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    n_devs = 0;
    note[0] = 0;
    const char *tf32 = getenv("TF_CUDA_TF32");
    use_tf32 = tf32 && !strcmp(tf32, "1");
    memset(&blas_lib, 0, sizeof blas_lib);
    const char *chosen = getenv("TF_CUBLAS_LIB");    /* a cuBLAS named by the user is checked up front */
    if (chosen && *chosen) tf_cublas_load(&blas_lib, TF_CUBLAS_SONAME, TF_CUBLAS_TOOLKIT_PATH);
    discover();
    tf_gpu_fill_reg(out, "cuda", &cu_backend_iface, bdevs, n_devs, note);
    return TF_OK;
}
