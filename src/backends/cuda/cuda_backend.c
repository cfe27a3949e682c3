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
 * portable kernels (../portable/kernels.cl, compiled by nvcc through
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>

#include "plan.h"

#define MAX_CUDA_DEVICES 16
#define STAGING_BYTES ((size_t)8 << 20)     /* per buffer; two per device */
#define N_CLASSES 224

/* The portable kernels, one table per dtype program (kernels_<dtype>.cu). */
#define TF__TABLE(E, n, sz, fl, in) extern const void *const tf_cuda_kernels_##n[TF_PK_KERNEL_COUNT];
TF_DTYPE_LIST(TF__TABLE)
#undef TF__TABLE
static const void *const *const kernel_tables[TF_DTYPE_COUNT] = {
#define TF__ROW(E, n, sz, fl, in) [TF_##E] = tf_cuda_kernels_##n,
    TF_DTYPE_LIST(TF__ROW)
#undef TF__ROW
};

typedef struct cuda_buf {
    void *ptr;
    size_t capacity;
    int cls;
    struct cuda_buf *next;              /* in a free list */
} cuda_buf;

typedef struct cuda_dev {
    int index;                          /* CUDA ordinal */
    char name[256];
    int cc_major, cc_minor, sm_count;
    bool integrated;
    uint64_t total_mem;
    cudaStream_t stream;                /* used when the core passes no stream */
    cudaStream_t current;               /* the stream of the call in progress (set under the lock) */
    cublasHandle_t blas;                /* made on the first GEMM */
    pthread_mutex_t lock;               /* the allocator, staging, cuBLAS, submission */
    cuda_buf *free_list[N_CLASSES];
    tf_memory_stats mem;
    void *staging[2];                   /* pinned; NULL until first used */
    cudaEvent_t staging_free[2];        /* recorded after the copy that last used each */
    bool lost;
    char lost_reason[200];
    tf_cuda_stats stats;
} cuda_dev;

static const tf_host_api *host;
static cuda_dev devs[MAX_CUDA_DEVICES];
static tf_backend_device bdevs[MAX_CUDA_DEVICES];
static int n_devs;
static char note[512];
static bool use_tf32;

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
    tf_status s = e == cudaErrorMemoryAllocation ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    if (d && sticky(e)) {
        d->lost = true;
        d->stats.lost = true;
        snprintf(d->lost_reason, sizeof d->lost_reason, "%s failed with %s", what, cudaGetErrorName(e));
        s = TF_ERR_DEVICE_LOST;
    }
    return host->set_error(s, "cuda:%d: %s failed: %s (%s)", d ? d->index : -1, what, cudaGetErrorName(e),
                           cudaGetErrorString(e));
}

static tf_status blas_fail(cuda_dev *d, cublasStatus_t e, const char *what) {
    tf_status s = e == CUBLAS_STATUS_ALLOC_FAILED ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    if (e == CUBLAS_STATUS_EXECUTION_FAILED) {   /* usually a sticky error underneath */
        cudaError_t ce = cudaGetLastError();
        if (sticky(ce)) return cuda_fail(d, ce, what);
    }
    return host->set_error(s, "cuda:%d: %s failed: %s", d->index, what, cublasGetStatusName(e));
}

#define CU(d, call, what)                                  \
    do {                                                   \
        cudaError_t e_ = (call);                           \
        if (e_ != cudaSuccess) return cuda_fail(d, e_, what); \
    } while (0)

/* Lock the device and make it current on this thread; fails once lost. */
static tf_status enter(cuda_dev *d) {
    pthread_mutex_lock(&d->lock);
    if (d->lost) {
        pthread_mutex_unlock(&d->lock);
        return host->set_error(TF_ERR_DEVICE_LOST, "cuda:%d is lost (%s); restart the process to use it again",
                               d->index, d->lost_reason);
    }
    cudaError_t e = cudaSetDevice(d->index);
    if (e != cudaSuccess) {
        tf_status s = cuda_fail(d, e, "cudaSetDevice");
        pthread_mutex_unlock(&d->lock);
        return s;
    }
    return TF_OK;
}

static void leave(cuda_dev *d) { pthread_mutex_unlock(&d->lock); }

/* enter(), and make `stream` (NULL: the device's own) the one this call
 * queues its work on. */
static tf_status enter_on(cuda_dev *d, tf_backend_stream *stream) {
    tf_status s = enter(d);
    if (s == TF_OK) d->current = stream ? (cudaStream_t)stream : d->stream;
    return s;
}

/* ---- caching allocator: size classes (four per power of two), stream-ordered reuse ---- */

static int size_class(size_t n, size_t *capacity) {
    if (n <= 512) {
        *capacity = 512;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^e < n <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 2);
    size_t c = (n + step - 1) / step * step;                    /* c / step in 5..8 */
    *capacity = c;
    return 1 + (e - 9) * 4 + (int)(c / step - 5);
}

static void release_cache(cuda_dev *d) {            /* caller holds the lock, device current */
    for (int c = 0; c < N_CLASSES; c++)
        while (d->free_list[c]) {
            cuda_buf *b = d->free_list[c];
            d->free_list[c] = b->next;
            d->mem.reserved -= b->capacity;
            cudaFree(b->ptr);                       /* synchronizes: nothing queued still uses it */
            free(b);
        }
}

static tf_status block_alloc(cuda_dev *d, size_t nbytes, cuda_buf **out) {
    size_t cap;
    int cls = size_class(nbytes, &cap);
    cuda_buf *b = d->free_list[cls];
    if (b) {
        d->free_list[cls] = b->next;
        d->mem.cache_hits++;
    } else {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, cap);
        if (e == cudaErrorMemoryAllocation) {       /* give the cache back and try once more */
            cudaGetLastError();
            release_cache(d);
            e = cudaMalloc(&p, cap);
        }
        if (e != cudaSuccess) {
            tf_status s = cuda_fail(d, e, "cudaMalloc");
            if (s == TF_ERR_OUT_OF_MEMORY)
                host->set_error(s, "cuda:%d: out of device memory for %zu bytes (%s, after releasing the cache)", d->index,
                                nbytes, cudaGetErrorName(e));
            return s;
        }
        b = malloc(sizeof *b);
        if (!b) {
            cudaFree(p);
            return host->set_error(TF_ERR_OUT_OF_MEMORY, "cuda:%d: out of host memory", d->index);
        }
        b->ptr = p;
        b->capacity = cap;
        b->cls = cls;
        d->mem.cache_misses++;
        d->mem.reserved += cap;
    }
    b->next = NULL;
    d->mem.allocated += b->capacity;
    if (d->mem.allocated > d->mem.peak_allocated) d->mem.peak_allocated = d->mem.allocated;
    *out = b;
    return TF_OK;
}

static void block_free(cuda_dev *d, cuda_buf *b) {
    d->mem.allocated -= b->capacity;
    b->next = d->free_list[b->cls];
    d->free_list[b->cls] = b;
}

/* ---- device info ---- */

static tf_status cu_get_info(void *ctx, tf_backend_device_info *info) {
    cuda_dev *d = ctx;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    snprintf(info->description, sizeof info->description,
             "%.120s (compute %d.%d, %d SMs; driver %d.%d, runtime %d.%d)%s", d->name, d->cc_major, d->cc_minor,
             d->sm_count, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, d->lost ? " LOST" : "");
    info->type = d->integrated ? TF_DEVICE_TYPE_INTEGRATED_GPU : TF_DEVICE_TYPE_GPU;
    info->memory_total = d->total_mem;
    info->memory_free = 0;
    if (enter(d) == TF_OK) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
            /* our cached blocks are free to us too */
            uint64_t cached = d->mem.reserved - d->mem.allocated;
            info->memory_free = (uint64_t)free_b + cached;
        }
        leave(d);
    }
    info->caps.dtypes = (1u << TF_DTYPE_COUNT) - 1u;
    info->caps.async = true;
    info->caps.pinned_host_memory = true;
    info->caps.unified_memory = d->integrated;
    info->caps.emulated = false;
    info->caps.tensor_cores = d->cc_major >= 7;
    return TF_OK;
}

/* ---- buffers and transfers ---- */

static tf_status cu_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cuda_buf *b = NULL;
    s = block_alloc(d, nbytes, &b);
    leave(d);
    if (s == TF_OK) *out = (tf_backend_buffer *)b;
    return s;
}

static void cu_buffer_free(void *ctx, tf_backend_buffer *buf) {
    cuda_dev *d = ctx;
    if (!buf) return;
    pthread_mutex_lock(&d->lock);               /* a lost device still takes its blocks back */
    block_free(d, (cuda_buf *)buf);
    pthread_mutex_unlock(&d->lock);
}

static tf_status check_range(cuda_dev *d, const cuda_buf *b, size_t off, size_t n) {
    if (off > b->capacity || n > b->capacity - off)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "cuda:%d: %zu bytes at %zu outside a buffer of %zu", d->index, n,
                               off, b->capacity);
    return TF_OK;
}

static tf_status ensure_staging(cuda_dev *d) {
    for (int i = 0; i < 2; i++) {
        if (d->staging[i]) continue;
        CU(d, cudaHostAlloc(&d->staging[i], STAGING_BYTES, cudaHostAllocDefault), "cudaHostAlloc(staging)");
        CU(d, cudaEventCreateWithFlags(&d->staging_free[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    return TF_OK;
}

/* Host -> device through the two pinned buffers: the next chunk is copied
 * into one while the other's DMA runs. Returns once the caller's memory has
 * been read; the device copies stay queued ahead of later work. */
static tf_status staged_upload(cuda_dev *d, char *dst, const char *src, size_t n) {
    tf_status s = ensure_staging(d);
    if (s != TF_OK) return s;
    for (size_t done = 0, i = 0; done < n; i++) {
        int slot = (int)(i % 2);
        size_t c = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
        CU(d, cudaEventSynchronize(d->staging_free[slot]), "cudaEventSynchronize(staging)");
        memcpy(d->staging[slot], src + done, c);
        CU(d, cudaMemcpyAsync(dst + done, d->staging[slot], c, cudaMemcpyHostToDevice, d->current), "cudaMemcpyAsync(upload)");
        CU(d, cudaEventRecord(d->staging_free[slot], d->current), "cudaEventRecord");
        done += c;
    }
    d->stats.staged_bytes += n;
    return TF_OK;
}

/* Device -> host: chunk i's DMA runs while chunk i-1 is copied out. */
static tf_status staged_download(cuda_dev *d, char *dst, const char *src, size_t n) {
    tf_status s = ensure_staging(d);
    if (s != TF_OK) return s;
    size_t prev_off = 0, prev_len = 0;
    int prev_slot = 0;
    for (size_t done = 0, i = 0; done < n || prev_len; i++) {
        int slot = (int)(i % 2);
        size_t c = n - done < STAGING_BYTES ? n - done : STAGING_BYTES;
        if (c) {
            CU(d, cudaMemcpyAsync(d->staging[slot], src + done, c, cudaMemcpyDeviceToHost, d->current),
               "cudaMemcpyAsync(download)");
            CU(d, cudaEventRecord(d->staging_free[slot], d->current), "cudaEventRecord");
        }
        if (prev_len) {
            CU(d, cudaEventSynchronize(d->staging_free[prev_slot]), "cudaEventSynchronize(download)");
            memcpy(dst + prev_off, d->staging[prev_slot], prev_len);
        }
        prev_off = done;
        prev_len = c;
        prev_slot = slot;
        done += c;
    }
    d->stats.staged_bytes += n;
    return TF_OK;
}

static tf_status cu_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                           size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *b = (cuda_buf *)dst;
    tf_status s = check_range(d, b, off, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    s = staged_upload(d, (char *)b->ptr + off, src, n);
    leave(d);
    return s;
}

static tf_status cu_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                             size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *b = (cuda_buf *)src;
    tf_status s = check_range(d, b, off, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    s = staged_download(d, dst, (const char *)b->ptr + off, n);
    leave(d);
    return s;
}

static tf_status cu_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                         tf_backend_buffer *src, size_t soff, size_t n) {
    cuda_dev *d = ctx;
    cuda_buf *db = (cuda_buf *)dst, *sb = (cuda_buf *)src;
    tf_status s = check_range(d, db, doff, n);
    if (s == TF_OK) s = check_range(d, sb, soff, n);
    if (s != TF_OK || !n) return s;
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    cudaError_t e = cudaMemcpyAsync((char *)db->ptr + doff, (const char *)sb->ptr + soff, n, cudaMemcpyDeviceToDevice,
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
    tf_status s = check_range(d, db, doff, n);
    if (s == TF_OK) s = check_range(sd, sb, soff, n);
    if (s != TF_OK || !n) return s;
    if (d == sd) return cu_copy(ctx, stream, dst, doff, src, soff, n);
    if ((s = enter_on(d, stream)) != TF_OK) return s;
    cudaError_t e = cudaMemcpyPeerAsync((char *)db->ptr + doff, d->index, (const char *)sb->ptr + soff, sd->index, n,
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
    if (s == TF_OK) *out = (tf_backend_stream *)st;
    return s;
}

static void cu_stream_destroy(void *ctx, tf_backend_stream *stream) {
    cuda_dev *d = ctx;
    if (enter(d) != TF_OK) return;            /* a lost device's streams die with its context */
    cudaStreamSynchronize((cudaStream_t)stream);
    cudaStreamDestroy((cudaStream_t)stream);
    leave(d);
}

static tf_status cu_event_create(void *ctx, tf_backend_event **out) {
    cuda_dev *d = ctx;
    tf_status s = enter(d);
    if (s != TF_OK) return s;
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
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

static tf_status cu_memory_stats(void *ctx, tf_memory_stats *out) {
    cuda_dev *d = ctx;
    pthread_mutex_lock(&d->lock);
    *out = d->mem;
    pthread_mutex_unlock(&d->lock);
    return TF_OK;
}

static void cu_empty_cache(void *ctx) {
    cuda_dev *d = ctx;
    if (enter(d) != TF_OK) return;
    release_cache(d);
    leave(d);
}

/* ---- the portable kernels through cudaLaunchKernel ---- */

static void *mem_of(const tf_tensor_desc *t) { return ((cuda_buf *)t->buffer)->ptr; }

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

/* Scratch from the caching allocator; freeing it right after the launch is
 * safe because the next use of the block is later on the same stream. The
 * kernel gets the device pointer, the allocator the block back. */
static tf_status cu_scratch_alloc(void *ctx, size_t nbytes, void **handle, void **token) {
    cuda_buf *b = NULL;
    tf_status s = block_alloc(ctx, nbytes, &b);
    if (s == TF_OK) {
        *handle = b->ptr;
        *token = b;
    }
    return s;
}

static void cu_scratch_free(void *ctx, void *token) { block_free(ctx, token); }

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
    cublasStatus_t e = cublasCreate(&d->blas);
    if (e != CUBLAS_STATUS_SUCCESS) return blas_fail(d, e, "cublasCreate");
    return TF_OK;
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
    cublasComputeType_t compute = dt == TF_F64 ? CUBLAS_COMPUTE_64F
                                  : dt == TF_F32 && use_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    float af = (float)alpha, bf = (float)beta;
    const void *pal = dt == TF_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pbe = dt == TF_F64 ? (const void *)&beta : (const void *)&bf;
    cublasStatus_t e = cublasSetStream(d->blas, d->current);
    if (e != CUBLAS_STATUS_SUCCESS) {
        *s = blas_fail(d, e, "cublasSetStream");
        return true;
    }
    e = cublasGemmStridedBatchedEx(
        d->blas, mb.trans ? CUBLAS_OP_T : CUBLAS_OP_N, ma.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, pal,
        pb, type, (int)mb.ld, (long long)mb.batch_stride, pa, type, (int)ma.ld, (long long)ma.batch_stride, pbe, po, type,
        (int)N, (long long)(M * N), (int)batch, compute, CUBLAS_GEMM_DEFAULT);
    *s = e == CUBLAS_STATUS_SUCCESS ? TF_OK : blas_fail(d, e, "cublasGemmStridedBatchedEx");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* ---- ops ---- */

static bool cu_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    return tf_pk_supports(op, true);
}

static tf_status cu_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    cuda_dev *d = ctx;
    tf_pk_target tg = {d, host, true, 256, 16, mem_of, cu_launch, cu_scratch_alloc, cu_scratch_free};
    tf_status s = enter_on(d, stream);
    if (s != TF_OK) return s;
    if (!((op->kind == TF_OP_MATMUL || op->kind == TF_OP_GEMM) && try_cublas(d, &tg, op, &s))) s = tf_pk_run(&tg, op);
    leave(d);
    return s;
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
    .buffer_copy_from_peer = cu_copy_from_peer,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_destroy = cu_event_destroy,
};

/* ---- discovery ---- */

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
    if (cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking) != cudaSuccess) return false;
    pthread_mutex_init(&d->lock, NULL);
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
        snprintf(note, sizeof note, "no CUDA device (cudaGetDeviceCount: %s: %s)",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorName(e), e == cudaSuccess ? "none found" : cudaGetErrorString(e));
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
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    snprintf(note, sizeof note, "%d device(s)%s; CUDA runtime %d.%d, cuBLAS for GEMM%s", n_devs,
             failed ? " (some failed to open)" : "", runtime / 1000, runtime % 1000 / 10, use_tf32 ? " (TF32 on)" : "");
}

/* ---- extras ---- */

static tf_status get_stats(int device, tf_cuda_stats *out) {
    if (device < 0 || device >= n_devs || !out)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "tf_cuda_stats: no device cuda:%d", device);
    pthread_mutex_lock(&devs[device].lock);
    *out = devs[device].stats;
    pthread_mutex_unlock(&devs[device].lock);
    return TF_OK;
}

static tf_status set_tf32(bool enabled) {
    use_tf32 = enabled;
    return TF_OK;
}

static void *cu_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    if (!strcmp(name, "tf_cuda_stats")) return (void *)(tf_cuda_stats_fn)get_stats;
    if (!strcmp(name, "tf_cuda_set_tf32")) return (void *)(tf_cuda_set_tf32_fn)set_tf32;
    return NULL;
}

static void cu_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cuda_dev *d = &devs[i];
        if (!d->lost && cudaSetDevice(d->index) == cudaSuccess) {
            cudaStreamSynchronize(d->stream);
            release_cache(d);
            for (int k = 0; k < 2; k++)
                if (d->staging[k]) {
                    cudaFreeHost(d->staging[k]);
                    cudaEventDestroy(d->staging_free[k]);
                }
            if (d->blas) cublasDestroy(d->blas);
            cudaStreamDestroy(d->stream);
        }
        pthread_mutex_destroy(&d->lock);
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
    discover();
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->abi_major = TF_BACKEND_ABI_MAJOR;
    out->abi_minor = TF_BACKEND_ABI_MINOR;
    out->name = "cuda";
    out->iface = &cu_backend_iface;
    out->device_count = n_devs;
    out->devices = bdevs;
    out->note = note;
    return TF_OK;
}
