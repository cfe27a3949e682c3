/* The OpenCL backend, built as the plugin libtensorframe-opencl.so.
 *
 * Every device of every platform becomes opencl:N with its own context and
 * in-order queue (made streams add queues on the same context). Buffers
 * live on the device; ops enqueue and return; reads
 * (blocking clEnqueueReadBuffer behind the queued work) and
 * tf_device_synchronize (clFinish) wait. Kernels come from kernels.cl,
 * embedded at build time, compiled per (device, dtype) on first use and
 * cached on disk so that later processes skip the compiler.
 */
#define CL_TARGET_OPENCL_VERSION 120
#define _POSIX_C_SOURCE 200809L
#include <CL/cl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tensorframe/backend.h>
#include <tensorframe/numerics.h>

#include "kernels_cl.h"        /* generated: kernels_cl[], kernels_cl_len */
#include "vendor.h"
#include "gpu_runtime.h"       /* lock, lost state, caching allocator */
#include "plan.h"              /* the portable kernels' host side */
#include "tune.h"              /* the autotuning cache */
#include <tensorframe/opencl.h>

#define MAX_CL_DEVICES 32

/* A buffer is a block of the shared caching allocator; its handle is the cl_mem. */
typedef tf_gpu_block cl_buf;

typedef enum { PROGRAM_NONE, PROGRAM_READY, PROGRAM_FAILED } program_state;

typedef struct cl_dev {
    tf_gpu_dev gd;                        /* lock (program builds, kernel arguments, the allocator), lost state */
    int index;
    cl_platform_id platform;
    cl_device_id id;
    cl_context context;
    cl_command_queue queue;               /* the default stream */
    cl_command_queue current;             /* the queue of the op being run (under gd.lock) */
    _Atomic int made_queues;              /* made streams alive: queues besides `queue` */
    char name[256], vendor[128], version[128], driver[128], platform_name[128];
    cl_device_type type;
    uint64_t global_mem;
    bool fp64, fp16, unified, amd_free_query;
    int rwg, ts;                          /* reduce work-group size, matmul tile */
    tf_device_limits limits;              /* read once at discovery */
    tf_device_hints hints;
    program_state state[TF_DTYPE_COUNT];
    char build_error[TF_DTYPE_COUNT][2048];
    cl_program program[TF_DTYPE_COUNT];
    cl_kernel kernel[TF_DTYPE_COUNT][TF_PK_KERNEL_COUNT];
    tf_opencl_stats stats;
    tf_tune_cache tune;                   /* TF_AUTOTUNE=1's answers for this device */
} cl_dev;

static const tf_host_api *host;
static cl_dev devs[MAX_CL_DEVICES];
static tf_backend_device bdevs[MAX_CL_DEVICES];
static int n_devs;
static char note[512];
static char extra_build_options[512];
/* kernels.cl with the op codes it switches on put before it (tf_pk_op_codes). */
static char *kernel_source;
static size_t kernel_source_len;

static bool make_kernel_source(void) {
    size_t codes = tf_pk_op_codes(NULL, 0);
    kernel_source = malloc(codes + kernels_cl_len + 1);
    if (!kernel_source) return false;
    tf_pk_op_codes(kernel_source, codes + 1);
    memcpy(kernel_source + codes, kernels_cl, kernels_cl_len);
    kernel_source_len = codes + kernels_cl_len;
    kernel_source[kernel_source_len] = 0;
    return true;
}

/* ---- dtype facts, from the header-only list (plugins never link the core) ---- */

static const char *dt_name(tf_dtype dt) {
    static const char *const names[TF_DTYPE_COUNT] = {
#define TF__NAME(E, n, sz, fl, in) #n,
        TF_DTYPE_LIST(TF__NAME)
#undef TF__NAME
    };
    return (unsigned)dt < TF_DTYPE_COUNT ? names[dt] : "?";
}


/* ---- errors ---- */

static const char *cl_error_name(cl_int e) {
    switch (e) {
#define E(x) case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_BUILD_PROGRAM_FAILURE) E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
        E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL)
        E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
        E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
        E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_OPERATION)
        E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) E(CL_INVALID_PLATFORM)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    }
    return "CL_UNKNOWN_ERROR";
}

static tf_gpu_error kind_of(cl_int e) {
    switch (e) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: case CL_OUT_OF_RESOURCES: case CL_OUT_OF_HOST_MEMORY:
        return TF_GPU_ERROR_OUT_OF_MEMORY;
    case CL_DEVICE_NOT_AVAILABLE: return TF_GPU_ERROR_STICKY;
    default: return TF_GPU_ERROR_OTHER;
    }
}

/* Report a failed OpenCL call: "opencl:0: clEnqueueNDRangeKernel(binary) failed: CL_OUT_OF_RESOURCES (-5)". */
static tf_status cl_fail(cl_dev *d, cl_int e, const char *what) {
    char code[16];
    snprintf(code, sizeof code, "%d", (int)e);
    return tf_gpu_fail(&d->gd, kind_of(e), what, cl_error_name(e), code);
}

/* ---- device info ---- */

static void device_string(cl_device_id id, cl_device_info what, char *out, size_t n) {
    out[0] = 0;
    if (clGetDeviceInfo(id, what, n, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[n - 1] = 0;
}

static bool has_extension(cl_device_id id, const char *ext) {
    size_t len = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len) return false;
    char *s = malloc(len + 1);
    bool found = false;
    if (s && clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, len, s, NULL) == CL_SUCCESS) {
        s[len] = 0;
        for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext)) {
            char after = p[strlen(ext)];
            found = (p == s || p[-1] == ' ') && (after == ' ' || after == 0);
        }
    }
    free(s);
    return found;
}

#ifndef CL_DEVICE_GLOBAL_FREE_MEMORY_AMD
#define CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039
#endif

/* Free memory: the driver's own figure where it has one (AMD), otherwise
 * the device's global memory less what tensorframe holds on it — OpenCL
 * has no portable query. */
static uint64_t free_memory(cl_dev *d) {
    if (d->amd_free_query) {
        size_t kb[2] = {0, 0};
        if (clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kb, kb, NULL) == CL_SUCCESS)
            return (uint64_t)kb[0] * 1024u;
    }
    tf_memory_stats ms;
    tf_gpu_memory_stats(&d->gd, &ms);
    uint64_t used = ms.allocated;
    return used < d->global_mem ? d->global_mem - used : 0;
}

static tf_status cl_get_info(void *ctx, tf_backend_device_info *info) {
    cl_dev *d = ctx;
    snprintf(info->description, sizeof info->description, "%.80s (%.40s; %.40s; driver %.30s; platform %.40s)", d->name, d->vendor,
             d->version, d->driver, d->platform_name);
    bool gpu = d->type & CL_DEVICE_TYPE_GPU;
    info->type = gpu ? (d->unified ? TF_DEVICE_TYPE_INTEGRATED_GPU : TF_DEVICE_TYPE_GPU)
                     : (d->type & CL_DEVICE_TYPE_CPU) ? TF_DEVICE_TYPE_CPU : TF_DEVICE_TYPE_ACCELERATOR;
    info->memory_total = d->global_mem;
    info->memory_free = free_memory(d);
    uint32_t dts = (1u << TF_DTYPE_COUNT) - 1u;   /* quantized ones too: plan.c decodes, encodes, multiplies */
    dts &= ~(1u << TF_C64 | 1u << TF_C128);       /* stored, but their ops run on the CPU (no complex kernels) */
    if (!d->fp64) dts &= ~(1u << TF_F64);
    info->caps.dtypes = dts;
    info->caps.async = true;
    info->caps.pinned_host_memory = false;
    info->caps.unified_memory = d->unified;
    info->caps.emulated = (d->type & CL_DEVICE_TYPE_CPU) != 0;   /* PoCL and the like */
    if (TF_HAS_FIELD(info, tf_backend_device_info, hints)) {
        info->limits = d->limits;
        info->hints = d->hints;
    }
    return TF_OK;
}

/* ---- buffers ---- */

/* The allocator's driver calls: cached blocks are reused in the order of
 * the device's one in-order queue. */
static tf_status raw_alloc(void *ctx, size_t capacity, void **handle) {
    cl_dev *d = ctx;
    cl_int e = CL_SUCCESS;
    cl_mem m = capacity > d->global_mem ? NULL : clCreateBuffer(d->context, CL_MEM_READ_WRITE, capacity, NULL, &e);
    if (!m && e == CL_SUCCESS) e = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    if (e != CL_SUCCESS) return cl_fail(d, e, "clCreateBuffer");
    *handle = m;
    return TF_OK;
}

static void raw_free(void *ctx, void *handle) {
    (void)ctx;
    clReleaseMemObject((cl_mem)handle);      /* the runtime keeps it until queued work is done */
}

static const tf_gpu_mem_ops mem_ops = {raw_alloc, raw_free};

static tf_status cl_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    cl_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_gpu_alloc(&d->gd, nbytes, (tf_gpu_block **)out);
    tf_gpu_leave(&d->gd);
    return s;
}

static void cl_buffer_free(void *ctx, tf_backend_buffer *buf) {
    cl_dev *d = ctx;
    if (!buf) return;
    pthread_mutex_lock(&d->gd.lock);         /* a lost device still takes its blocks back */
    tf_gpu_free(&d->gd, (tf_gpu_block *)buf);
    pthread_mutex_unlock(&d->gd.lock);
}

static tf_status cl_memory_stats(void *ctx, tf_memory_stats *out) {
    tf_gpu_memory_stats(&((cl_dev *)ctx)->gd, out);
    return TF_OK;
}

static void cl_empty_cache(void *ctx) {
    cl_dev *d = ctx;
    pthread_mutex_lock(&d->gd.lock);
    clFinish(d->queue);                      /* nothing queued may still use a block released here */
    tf_gpu_release_cache(&d->gd);
    pthread_mutex_unlock(&d->gd.lock);
}

static tf_status cl_alloc_configure(void *ctx, const tf_alloc_conf *conf) {
    cl_dev *d = ctx;
    pthread_mutex_lock(&d->gd.lock);
    clFinish(d->queue);                      /* as cl_empty_cache: the cache goes back first */
    tf_status s = tf_gpu_alloc_configure(&d->gd, conf);
    pthread_mutex_unlock(&d->gd.lock);
    return s;
}

static void cl_reset_peak_memory(void *ctx) { tf_gpu_reset_peak_memory(&((cl_dev *)ctx)->gd); }

static cl_mem mem_of_buffer(tf_backend_buffer *b) { return (cl_mem)((tf_gpu_block *)b)->handle; }

/* A stream is an in-order command queue: NULL is the device's own, a made
 * stream another on the same context. Events are markers. */
static cl_command_queue queue_of(cl_dev *d, tf_backend_stream *stream) {
    return stream ? (cl_command_queue)stream : d->queue;
}

static tf_status transfer(cl_dev *d, tf_backend_stream *stream, tf_backend_buffer *buf, size_t off, void *host_ptr,
                          size_t n, bool write, cl_bool blocking) {
    cl_buf *b = (cl_buf *)buf;
    tf_status s = tf_gpu_check_range(&d->gd, b, off, n);
    if (s != TF_OK || !n) return s;
    cl_command_queue q = queue_of(d, stream);
    cl_int e = write ? clEnqueueWriteBuffer(q, (cl_mem)b->handle, blocking, off, n, host_ptr, 0, NULL, NULL)
                     : clEnqueueReadBuffer(q, (cl_mem)b->handle, blocking, off, n, host_ptr, 0, NULL, NULL);
    if (e == CL_SUCCESS && !blocking) e = clFlush(q);       /* started, not just queued */
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, write ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer");
}

static tf_status cl_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                           size_t n) {
    return transfer(ctx, stream, dst, off, (void *)src, n, true, CL_TRUE);
}

static tf_status cl_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                             size_t n) {
    return transfer(ctx, stream, src, off, dst, n, false, CL_TRUE);
}

static tf_status cl_upload_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off,
                                 const void *src, size_t n) {
    return transfer(ctx, stream, dst, off, (void *)src, n, true, CL_FALSE);
}

static tf_status cl_download_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                                   size_t n) {
    return transfer(ctx, stream, src, off, dst, n, false, CL_FALSE);
}

static tf_status cl_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                         tf_backend_buffer *src, size_t soff, size_t n) {
    cl_dev *d = ctx;
    cl_buf *db = (cl_buf *)dst, *sb = (cl_buf *)src;
    tf_status s = tf_gpu_check_range(&d->gd, db, doff, n);
    if (s == TF_OK) s = tf_gpu_check_range(&d->gd, sb, soff, n);
    if (s != TF_OK || !n) return s;
    cl_int e = clEnqueueCopyBuffer(queue_of(d, stream), (cl_mem)sb->handle, (cl_mem)db->handle, soff, doff, n, 0, NULL,
                                   NULL);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueCopyBuffer");
}

static tf_status cl_synchronize(void *ctx, tf_backend_stream *stream) {
    cl_dev *d = ctx;
    cl_int e = clFinish(queue_of(d, stream));
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clFinish");
}

/* Queues profile their commands so that events can be timed. */
#define QUEUE_PROPERTIES CL_QUEUE_PROFILING_ENABLE

static tf_status cl_stream_create(void *ctx, tf_backend_stream **out) {
    cl_dev *d = ctx;
    cl_int e = CL_SUCCESS;
    cl_command_queue q = clCreateCommandQueue(d->context, d->id, QUEUE_PROPERTIES, &e);
    if (e != CL_SUCCESS) return cl_fail(d, e, "clCreateCommandQueue");
    atomic_fetch_add(&d->made_queues, 1);
    *out = (tf_backend_stream *)q;
    return TF_OK;
}

static void cl_stream_destroy(void *ctx, tf_backend_stream *stream) {
    cl_dev *d = ctx;
    clFinish((cl_command_queue)stream);
    clReleaseCommandQueue((cl_command_queue)stream);
    atomic_fetch_sub(&d->made_queues, 1);
}

/* The marker of the last record (NULL: never recorded) and its context:
 * another context's queue cannot wait for it on the device. */
typedef struct cl_ev {
    cl_event marker;
    cl_context context;
} cl_ev;

static tf_status cl_event_create(void *ctx, tf_backend_event **out) {
    cl_dev *d = ctx;
    cl_ev *ev = host->alloc(sizeof *ev);
    if (!ev) return host->set_error(TF_ERR_OUT_OF_MEMORY, "opencl:%d: no host memory for an event", d->index);
    *ev = (cl_ev){NULL, d->context};
    *out = (tf_backend_event *)ev;
    return TF_OK;
}

static void cl_event_destroy(void *ctx, tf_backend_event *event) {
    (void)ctx;
    cl_ev *ev = (cl_ev *)event;
    if (ev->marker) clReleaseEvent(ev->marker);
    host->free(ev);
}

static tf_status cl_event_record(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cl_dev *d = ctx;
    cl_ev *ev = (cl_ev *)event;
    cl_command_queue q = queue_of(d, stream);
    cl_event marker = NULL;
    cl_int e = clEnqueueMarkerWithWaitList(q, 0, NULL, &marker);
    if (e == CL_SUCCESS) e = clFlush(q);          /* a waiter on another queue needs it submitted */
    if (e != CL_SUCCESS) {
        if (marker) clReleaseEvent(marker);
        return cl_fail(d, e, "clEnqueueMarkerWithWaitList");
    }
    if (ev->marker) clReleaseEvent(ev->marker);
    ev->marker = marker;
    ev->context = d->context;
    return TF_OK;
}

static tf_status cl_event_wait(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    cl_dev *d = ctx;
    cl_ev *ev = (cl_ev *)event;
    if (!ev->marker) return TF_OK;
    cl_int e = ev->context == d->context
                   ? clEnqueueBarrierWithWaitList(queue_of(d, stream), 1, &ev->marker, NULL)
                   : clWaitForEvents(1, &ev->marker);   /* another device's context: the host waits */
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueBarrierWithWaitList");
}

static tf_status cl_event_query(void *ctx, tf_backend_event *event, bool *done) {
    cl_dev *d = ctx;
    cl_ev *ev = (cl_ev *)event;
    cl_int status = CL_COMPLETE;
    cl_int e = ev->marker ? clGetEventInfo(ev->marker, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL)
                          : CL_SUCCESS;
    if (e == CL_SUCCESS && status < 0) e = status;   /* the command failed */
    if (e != CL_SUCCESS) return cl_fail(d, e, "clGetEventInfo");
    *done = status == CL_COMPLETE;
    return TF_OK;
}

static tf_status cl_event_synchronize(void *ctx, tf_backend_event *event) {
    cl_dev *d = ctx;
    cl_ev *ev = (cl_ev *)event;
    cl_int e = ev->marker ? clWaitForEvents(1, &ev->marker) : CL_SUCCESS;
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clWaitForEvents");
}

static tf_status cl_event_elapsed_ms(void *ctx, tf_backend_event *start, tf_backend_event *end, double *ms) {
    cl_dev *d = ctx;
    cl_ev *a = (cl_ev *)start, *b = (cl_ev *)end;
    cl_ulong t0 = 0, t1 = 0;
    cl_int e = a->marker && b->marker ? CL_SUCCESS : CL_INVALID_EVENT;
    if (e == CL_SUCCESS) e = clGetEventProfilingInfo(a->marker, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (e == CL_SUCCESS) e = clGetEventProfilingInfo(b->marker, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (e != CL_SUCCESS)
        return host->set_error(TF_ERR_UNSUPPORTED, "opencl:%d: the driver gives no time for these events (%s)", d->index,
                               cl_error_name(e));
    *ms = ((double)t1 - (double)t0) / 1e6;
    return TF_OK;
}

/* ---- programs: built per (device, dtype), cached on disk ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The cache key covers everything that changes the binary. */
static void cache_path(const cl_dev *d, const char *options, char *out, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, kernel_source, kernel_source_len);
    h = fnv1a(h, options, strlen(options));
    h = fnv1a(h, d->name, strlen(d->name));
    h = fnv1a(h, d->driver, strlen(d->driver));
    h = fnv1a(h, d->version, strlen(d->version));
    h = fnv1a(h, d->platform_name, strlen(d->platform_name));
    char dir[900];
    tf_gpu_cache_dir(dir, sizeof dir, "opencl");
    snprintf(out, n, "%s/%016llx.bin", dir, (unsigned long long)h);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = n > 0 ? (size_t)n : 0;
    }
    fclose(f);
    return buf;
}

/* Write atomically: a half-written file is never seen by another process. */
static void write_cache(const cl_dev *d, cl_program p, const char *path) {
    size_t size = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || !size) return;
    unsigned char *bin = malloc(size);
    if (!bin) return;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
        char dir[1024], tmp[1100];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        tf_gpu_make_dirs(dir);
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(bin, 1, size, f) == size;
            ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, path) != 0) remove(tmp);
        }
    }
    (void)d;
    free(bin);
}

static cl_program program_from_cache(cl_dev *d, const char *path, const char *options) {
    size_t len = 0;
    unsigned char *bin = read_file(path, &len);
    if (!bin) return NULL;
    cl_int status = CL_SUCCESS, e = CL_SUCCESS;
    const unsigned char *bins[1] = {bin};
    cl_program p = clCreateProgramWithBinary(d->context, 1, &d->id, &len, bins, &status, &e);
    free(bin);
    if (e != CL_SUCCESS || status != CL_SUCCESS) return NULL;
    if (clBuildProgram(p, 1, &d->id, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);            /* stale or foreign binary: rebuild from source */
        return NULL;
    }
    return p;
}

static tf_status program_from_source(cl_dev *d, tf_dtype dt, const char *options, cl_program *out) {
    const char *src = kernel_source;
    size_t len = kernel_source_len;
    cl_int e;
    cl_program p = clCreateProgramWithSource(d->context, 1, &src, &len, &e);
    if (e != CL_SUCCESS) return cl_fail(d, e, "clCreateProgramWithSource");
    e = clBuildProgram(p, 1, &d->id, options, NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[1800] = "";
        clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = 0;
        clReleaseProgram(p);
        snprintf(d->build_error[dt], sizeof d->build_error[dt],
                 "opencl:%d: building the %s kernels failed (%s) with options '%s'; compiler log:\n%s", d->index,
                 dt_name(dt), cl_error_name(e), options, log);
        return host->set_error(TF_ERR_BACKEND, "%s", d->build_error[dt]);
    }
    *out = p;
    return TF_OK;
}

/* The program for dtype dt, built (or loaded) on first use. Caller holds the device lock. */
static tf_status ensure_program(cl_dev *d, tf_dtype dt) {
    if (d->state[dt] == PROGRAM_READY) return TF_OK;
    if (d->state[dt] == PROGRAM_FAILED) return host->set_error(TF_ERR_BACKEND, "%s", d->build_error[dt]);
    char options[768], path[1024];
    snprintf(options, sizeof options, "-DTF_DT=%d -DRWG=%d -DTS=%d%s %s", (int)dt, d->rwg, d->ts,
             d->fp64 ? " -DTF_HAS_FP64" : "", extra_build_options);
    cache_path(d, options, path, sizeof path);
    cl_program p = program_from_cache(d, path, options);
    if (p) {
        d->stats.cache_hits++;
    } else {
        tf_status s = program_from_source(d, dt, options, &p);
        if (s != TF_OK) {
            d->state[dt] = PROGRAM_FAILED;
            return s;
        }
        d->stats.builds++;
        write_cache(d, p, path);
    }
    d->program[dt] = p;
    for (int k = 0; k < TF_PK_KERNEL_COUNT; k++) {
        cl_int e;
        d->kernel[dt][k] = clCreateKernel(p, tf_pk_kernel_names[k], &e);   /* some dtypes lack some kernels */
        if (e != CL_SUCCESS) d->kernel[dt][k] = NULL;
    }
    d->state[dt] = PROGRAM_READY;
    return TF_OK;
}

/* ---- ops: the portable kernels, launched through OpenCL ---- */

static void *mem_of(const tf_tensor_desc *t) { return mem_of_buffer(t->buffer); }

/* Set arguments and enqueue; the caller holds the device lock (kernel
 * objects are not safe to configure from two threads at once). */
static tf_status cl_launch(void *ctx, tf_dtype program, tf_pk_kernel kernel, int nargs, const tf_pk_arg *args, int dims,
                           const size_t *global, const size_t *local) {
    cl_dev *d = ctx;
    cl_kernel k = d->kernel[program][kernel];
    const char *name = tf_pk_kernel_names[kernel];
    if (!k) return host->set_error(TF_ERR_BACKEND, "opencl:%d: kernel '%s' is missing from the %s program", d->index, name,
                                   dt_name(program));
    for (int i = 0; i < nargs; i++) {
        cl_int e = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].value);
        if (e != CL_SUCCESS) return cl_fail(d, e, name);
    }
    cl_int e = clEnqueueNDRangeKernel(d->current, k, (cl_uint)dims, NULL, global, local, 0, NULL, NULL);
    if (e != CL_SUCCESS) return cl_fail(d, e, name);
    d->stats.kernels_launched++;
    return TF_OK;
}

/* Scratch from the caching allocator (the caller holds the device lock);
 * freeing it right after the launches is safe while the device has one
 * queue: the block's next user is later on it. */
static tf_status cl_scratch_alloc(void *ctx, size_t nbytes, void **handle, void **token) {
    cl_dev *d = ctx;
    tf_gpu_block *b = NULL;
    tf_status s = tf_gpu_alloc(&d->gd, nbytes, &b);
    if (s == TF_OK) {
        *handle = b->handle;
        *token = b;
    }
    return s;
}

/* With made streams, another queue may take the block at once: the op's
 * queue finishes first (a cost only while made streams exist). */
static void cl_scratch_free(void *ctx, void *token) {
    cl_dev *d = ctx;
    if (atomic_load(&d->made_queues)) clFinish(d->current);
    tf_gpu_free(&d->gd, token);
}

static bool cl_supports(void *ctx, const tf_op *op) {
    cl_dev *d = ctx;
    return tf_pk_supports(op, d->fp64);
}

/* ---- autotuning ---- */

static tf_status cl_finish_current(void *ctx) {
    cl_dev *d = ctx;
    cl_int e = clFinish(d->current);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clFinish");
}

static int64_t pow2_bucket(int64_t v) {
    int64_t b = 1;
    while (b < v && b < ((int64_t)1 << 40)) b *= 2;
    return b;
}

/* A split SUM/MEAN's groups per output: 1 to 64 groups of RWG items, timed
 * per (dtype, outputs, reduced length) bucket when TF_AUTOTUNE=1. */
static int64_t cl_reduce_groups(void *ctx, const tf_op *op, int64_t M, int64_t R, int64_t heuristic,
                                tf_status (*run)(const void *, int64_t), const void *closure) {
    cl_dev *d = ctx;
    if (!tf_tune_enabled()) return heuristic;
    char key[96];
    snprintf(key, sizeof key, "reduce_split,%s,M=%lld,R=%lld", dt_name(op->inputs[0].dtype),
             (long long)pow2_bucket(M), (long long)pow2_bucket(R));
    static const int64_t options[] = {1, 2, 4, 8, 16, 32, 64};
    int64_t candidates[7];
    int n = 0;
    for (int i = 0; i < 7; i++)
        if (options[i] == 1 || options[i] * d->rwg <= R) candidates[n++] = options[i];
    return tf_tune_choose(&d->tune, key, candidates, n, heuristic, run, closure, cl_finish_current, d);
}

static tf_status cl_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    cl_dev *d = ctx;
    tf_pk_target tg = {d, host, d->fp64, d->rwg, d->ts, mem_of, cl_launch, cl_scratch_alloc, cl_scratch_free,
                       false, cl_reduce_groups};
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    d->current = queue_of(d, stream);
    s = ensure_program(d, tf_pk_program_dtype(op));
    if (s == TF_OK) s = tf_pk_run(&tg, op);
    tf_gpu_leave(&d->gd);
    return s;
}

static const tf_device_iface cl_device_iface = {
    TF_STRUCT_INIT(tf_device_iface),
    .get_info = cl_get_info,
    .buffer_alloc = cl_buffer_alloc,
    .buffer_free = cl_buffer_free,
    .buffer_upload = cl_upload,
    .buffer_download = cl_download,
    .buffer_copy = cl_copy,
    .supports = cl_supports,
    .run = cl_run,
    .synchronize = cl_synchronize,
    .stream_create = cl_stream_create,
    .stream_destroy = cl_stream_destroy,
    .event_create = cl_event_create,
    .event_record = cl_event_record,
    .event_wait = cl_event_wait,
    .event_destroy = cl_event_destroy,
    .event_query = cl_event_query,
    .event_synchronize = cl_event_synchronize,
    .event_elapsed_ms = cl_event_elapsed_ms,
    .buffer_upload_async = cl_upload_async,
    .buffer_download_async = cl_download_async,
    .memory_stats = cl_memory_stats,
    .empty_cache = cl_empty_cache,
    .alloc_configure = cl_alloc_configure,
    .reset_peak_memory = cl_reset_peak_memory,
};

/* ---- discovery ---- */

static int pow2_at_most(size_t n, int cap) {
    int p = 1;
    while ((size_t)(p * 2) <= n && p * 2 <= cap) p *= 2;
    return p;
}

/* A scalar of clGetDeviceInfo (size_t, cl_uint or cl_ulong), 0 if the
 * driver does not answer. */
static uint64_t device_value(cl_device_id id, cl_device_info what, size_t size) {
    union {
        size_t z;
        cl_uint u;
        cl_ulong l;
    } v = {0};
    if (clGetDeviceInfo(id, what, size, &v, NULL) != CL_SUCCESS) return 0;
    return size == sizeof(size_t) ? (uint64_t)v.z : size == sizeof(cl_uint) ? v.u : v.l;
}

/* OpenCL names no subgroup size for a device (only per kernel), and its
 * one cache query is the global memory cache: the last level. */
static void read_limits(cl_dev *d) {
    tf_device_limits *l = &d->limits;
    l->max_buffer_bytes = l->max_binding_bytes = device_value(d->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(cl_ulong));
    l->compute_units = (uint32_t)device_value(d->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cl_uint));
    l->max_work_group_size = (uint32_t)device_value(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t));
    size_t dims[3] = {0, 0, 0};
    if (clGetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof dims, dims, NULL) == CL_SUCCESS)
        for (int i = 0; i < 3; i++) l->max_work_group_dims[i] = (uint32_t)dims[i];
    l->shared_memory_bytes = device_value(d->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cl_ulong));
    l->cache_bytes[1] = device_value(d->id, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof(cl_ulong));
    l->clock_mhz = (uint32_t)device_value(d->id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof(cl_uint));
    d->hints.alignment = (uint32_t)(device_value(d->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(cl_uint)) / 8);
    d->hints.work_group_size = (uint32_t)d->rwg;                 /* what the reductions launch with */
    d->hints.vector_width_f32 = (uint32_t)device_value(d->id, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof(cl_uint));
    d->hints.async_helps = true;                                 /* ops queue and return */
}

static bool open_device(cl_dev *d, cl_platform_id platform, cl_device_id id, int index) {
    memset(d, 0, sizeof *d);
    d->index = index;
    d->platform = platform;
    d->id = id;
    device_string(id, CL_DEVICE_NAME, d->name, sizeof d->name);
    device_string(id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
    device_string(id, CL_DEVICE_VERSION, d->version, sizeof d->version);
    device_string(id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof d->platform_name, d->platform_name, NULL);
    d->platform_name[sizeof d->platform_name - 1] = 0;
    cl_ulong mem = 0;
    cl_bool unified = CL_FALSE;
    size_t max_wg = 1;
    clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
    clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    d->global_mem = mem;
    d->unified = unified;
    d->fp64 = has_extension(id, "cl_khr_fp64");
    d->fp16 = has_extension(id, "cl_khr_fp16");
    d->amd_free_query = has_extension(id, "cl_amd_device_attribute_query");
    d->rwg = pow2_at_most(max_wg, 256);
    d->ts = d->rwg >= 256 ? 16 : d->rwg >= 64 ? 8 : 4;
    read_limits(d);
    /* The kernels' answers depend on their source and the sizes built in. */
    int built[2] = {d->rwg, d->ts};
    uint64_t source = fnv1a(fnv1a(0xcbf29ce484222325ull, kernel_source, kernel_source_len), built, sizeof built);
    char driver[300];
    snprintf(driver, sizeof driver, "%s %s", d->platform_name, d->driver);
    tf_tune_init(&d->tune, host, "opencl", d->name, driver, source);
    cl_int e;
    d->context = clCreateContext(NULL, 1, &id, NULL, NULL, &e);
    if (e != CL_SUCCESS) return false;
    d->queue = d->current = clCreateCommandQueue(d->context, id, QUEUE_PROPERTIES, &e);
    if (e != CL_SUCCESS) {
        clReleaseContext(d->context);
        return false;
    }
    char name[32];
    snprintf(name, sizeof name, "opencl:%d", index);
    tf_gpu_dev_init(&d->gd, host, name, &mem_ops, d);
    return true;
}

static void discover(void) {
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(0, NULL, &np);
    if (e != CL_SUCCESS || np == 0) {
        snprintf(note, sizeof note, "no OpenCL platform (clGetPlatformIDs: %s)",
                 e == CL_SUCCESS ? "0 platforms" : cl_error_name(e));
        return;
    }
    cl_platform_id platforms[16];
    if (np > 16) np = 16;
    clGetPlatformIDs(np, platforms, NULL);
    int failed = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        cl_device_id ids[MAX_CL_DEVICES];
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_CL_DEVICES, ids, &nd) != CL_SUCCESS) continue;
        for (cl_uint i = 0; i < nd && n_devs < MAX_CL_DEVICES; i++) {
            if (open_device(&devs[n_devs], platforms[p], ids[i], n_devs)) {
                bdevs[n_devs] = (tf_backend_device){&cl_device_iface, &devs[n_devs]};
                n_devs++;
            } else {
                failed++;
            }
        }
    }
    if (n_devs == 0) snprintf(note, sizeof note, "%u OpenCL platform(s), no usable device%s", np, failed ? " (context creation failed)" : "");
    else snprintf(note, sizeof note, "%u platform(s); kernels cached in TF_CACHE_DIR or ~/.cache/tensorframe", np);
}

/* ---- extras (get_proc_address) ---- */

static tf_status get_stats(int device, tf_opencl_stats *out) {
    tf_status s = tf_gpu_check_index(host, "tf_opencl_stats", device, n_devs, out);
    if (s != TF_OK) return s;
    pthread_mutex_lock(&devs[device].gd.lock);
    *out = devs[device].stats;
    pthread_mutex_unlock(&devs[device].gd.lock);
    return TF_OK;
}

static tf_status set_build_options(const char *options) {
    snprintf(extra_build_options, sizeof extra_build_options, "%s", options ? options : "");
    for (int i = 0; i < n_devs; i++) {          /* failed builds get another try */
        pthread_mutex_lock(&devs[i].gd.lock);
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++)
            if (devs[i].state[dt] == PROGRAM_FAILED) devs[i].state[dt] = PROGRAM_NONE;
        pthread_mutex_unlock(&devs[i].gd.lock);
    }
    return TF_OK;
}

static tf_status get_autotune_stats(int device, tf_autotune_stats *out) {
    tf_status s = tf_gpu_check_index(host, "tf_opencl_autotune_stats", device, n_devs, out);
    if (s != TF_OK) return s;
    pthread_mutex_lock(&devs[device].tune.lock);
    *out = devs[device].tune.stats;
    pthread_mutex_unlock(&devs[device].tune.lock);
    return TF_OK;
}

static const tf_gpu_extra extras[] = {
    {"tf_opencl_stats", (void *)(tf_opencl_stats_fn)get_stats},
    {"tf_opencl_set_build_options", (void *)(tf_opencl_set_build_options_fn)set_build_options},
    {"tf_opencl_autotune_stats", (void *)(tf_opencl_autotune_stats_fn)get_autotune_stats},
};

static void *cl_get_proc_address(void *ctx, const char *name) {
    return tf_gpu_find_extra(extras, (int)(sizeof extras / sizeof *extras), name);
}

static void cl_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cl_dev *d = &devs[i];
        clFinish(d->queue);
        tf_gpu_dev_destroy(&d->gd);
        tf_tune_destroy(&d->tune);
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
            for (int k = 0; k < TF_PK_KERNEL_COUNT; k++)
                if (d->kernel[dt][k]) clReleaseKernel(d->kernel[dt][k]);
            if (d->program[dt]) clReleaseProgram(d->program[dt]);
        }
        clReleaseCommandQueue(d->queue);
        clReleaseContext(d->context);
    }
    n_devs = 0;
    extra_build_options[0] = 0;
    free(kernel_source);
    kernel_source = NULL;
}

static const tf_backend_iface cl_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = cl_shutdown,
    .get_proc_address = cl_get_proc_address,
};

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    tf_gpu_env_init(h);
    n_devs = 0;
    note[0] = 0;
    if (!make_kernel_source()) return h->set_error(TF_ERR_OUT_OF_MEMORY, "opencl: no memory for the kernel source");
    /* This plugin is unloaded at tf_shutdown; the ICD loader and the drivers
     * it opened stay (their threads and state outlive any one user). */
    tf_gpu_keep_loaded("libOpenCL.so.1");
    discover();
    tf_gpu_fill_reg(out, "opencl", &cl_backend_iface, bdevs, n_devs, note);
    return TF_OK;
}
