/* The WebGPU plugin (libtensorframe-webgpu.so): one backend for Vulkan,
 * Metal and D3D12 through the standard WebGPU C API, implemented by
 * wgpu-native, which is loaded at run time (wgpu_api.c).
 *
 * This file discovers the adapters, opens a device on each with the
 * adapter's own limits, and keeps tensors on it: buffers from the shared
 * caching allocator, uploads through the queue, downloads through a mapped
 * staging buffer, device-to-device copies, synchronization. Ops run in the
 * WGSL kernels of wgsl_kernels.c (docs/ARCHITECTURE.md, "The WebGPU
 * backend"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensorframe/backend.h>

#include "gpu_runtime.h"
#include "vendor.h"
#include "webgpu_internal.h"

#define MAX_WG_DEVICES 16
#define STAGING_CHUNK ((size_t)64 << 20)     /* downloads are mapped in pieces of at most this */


const tf_host_api *tf_wg_host;
tf_wgpu_api tf_wg;
#define host tf_wg_host
#define wg tf_wg
static WGPUInstance instance;
static wg_dev devs[MAX_WG_DEVICES];
static tf_backend_device bdevs[MAX_WG_DEVICES];
static int n_devs;
static char note[1024];

static void copy_view(char *out, size_t n, WGPUStringView v) {
    size_t len = v.data ? (v.length == WGPU_STRLEN ? strlen(v.data) : v.length) : 0;
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), v.data ? v.data : "");
}

static const char *backend_name(WGPUBackendType t) {
    switch (t) {
    case WGPUBackendType_Vulkan: return "Vulkan";
    case WGPUBackendType_Metal: return "Metal";
    case WGPUBackendType_D3D12: return "D3D12";
    case WGPUBackendType_D3D11: return "D3D11";
    case WGPUBackendType_OpenGL: return "OpenGL";
    case WGPUBackendType_OpenGLES: return "OpenGLES";
    default: return "other";
    }
}

/* ---- waiting for callbacks ----
 * Callbacks are requested in AllowProcessEvents mode: they run inside
 * wgpuInstanceProcessEvents or wgpuDevicePoll on this thread, never on a
 * driver thread, so the flags they set need no atomics. */

typedef struct wait_flag {
    bool done;
    int status;                          /* the callback's status or error type */
    char message[200];
} wait_flag;

static void wait_for(wg_dev *d, wait_flag *f) {
    while (!f->done) {
        wg.DevicePoll(d->device, true, NULL);
        wg.InstanceProcessEvents(instance);
    }
}

static void on_pop_scope(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView message, void *u1,
                         void *u2) {
    (void)u2;
    wait_flag *f = u1;
    f->status = status == WGPUPopErrorScopeStatus_Success ? (int)type : (int)WGPUErrorType_Unknown;
    copy_view(f->message, sizeof f->message, message);
    f->done = true;
}

/* The error the work since push_scope raised (WGPUErrorType_NoError if none). */
WGPUErrorType tf_wg_pop_scope(wg_dev *d, char *message, size_t n) {
    wait_flag f = {0};
    WGPUPopErrorScopeCallbackInfo cb = WGPU_POP_ERROR_SCOPE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = on_pop_scope;
    cb.userdata1 = &f;
    wg.DevicePopErrorScope(d->device, cb);
    wait_for(d, &f);
    snprintf(message, n, "%s", f.message);
    return (WGPUErrorType)f.status;
}

/* ---- buffers ---- */

static tf_status raw_alloc(void *ctx, size_t capacity, void **handle) {
    wg_dev *d = ctx;
    if (capacity > d->limits.maxBufferSize) {
        char detail[160];
        snprintf(detail, sizeof detail, "%zu bytes is over the device's maxBufferSize of %" PRIu64, capacity,
                 (uint64_t)d->limits.maxBufferSize);
        return tf_gpu_fail(&d->gd, TF_GPU_ERROR_OUT_OF_MEMORY, "wgpuDeviceCreateBuffer", "too large", detail);
    }
    WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
    desc.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    desc.size = capacity;
    wg.DevicePushErrorScope(d->device, WGPUErrorFilter_OutOfMemory);
    wg.DevicePushErrorScope(d->device, WGPUErrorFilter_Validation);
    WGPUBuffer b = wg.DeviceCreateBuffer(d->device, &desc);
    char msg[200];
    WGPUErrorType invalid = tf_wg_pop_scope(d, msg, sizeof msg), oom = tf_wg_pop_scope(d, msg, sizeof msg);
    if (!b || invalid != WGPUErrorType_NoError || oom != WGPUErrorType_NoError) {
        if (b) wg.BufferRelease(b);
        bool out_of_memory = !b || oom != WGPUErrorType_NoError;
        return tf_gpu_fail(&d->gd, out_of_memory ? TF_GPU_ERROR_OUT_OF_MEMORY : TF_GPU_ERROR_OTHER,
                           "wgpuDeviceCreateBuffer", out_of_memory ? "out of memory" : "validation error", msg);
    }
    *handle = b;
    return TF_OK;
}

static void raw_free(void *ctx, void *handle) {
    (void)ctx;
    wg.BufferRelease((WGPUBuffer)handle);        /* wgpu keeps it until submitted work is done */
}

static const tf_gpu_mem_ops mem_ops = {raw_alloc, raw_free};

static tf_status wg_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_gpu_alloc(&d->gd, nbytes, (tf_gpu_block **)out);
    tf_gpu_leave(&d->gd);
    return s;
}

static void wg_buffer_free(void *ctx, tf_backend_buffer *buf) {
    wg_dev *d = ctx;
    if (!buf) return;
    pthread_mutex_lock(&d->gd.lock);             /* a lost device still takes its blocks back */
    tf_gpu_free(&d->gd, (tf_gpu_block *)buf);
    pthread_mutex_unlock(&d->gd.lock);
}

static tf_status wg_memory_stats(void *ctx, tf_memory_stats *out) {
    tf_gpu_memory_stats(&((wg_dev *)ctx)->gd, out);
    return TF_OK;
}

static void wg_empty_cache(void *ctx) {
    wg_dev *d = ctx;
    pthread_mutex_lock(&d->gd.lock);
    tf_gpu_release_cache(&d->gd);
    pthread_mutex_unlock(&d->gd.lock);
}

static tf_status wg_alloc_configure(void *ctx, const tf_alloc_conf *conf) {
    wg_dev *d = ctx;
    pthread_mutex_lock(&d->gd.lock);
    tf_status s = tf_gpu_alloc_configure(&d->gd, conf);
    pthread_mutex_unlock(&d->gd.lock);
    return s;
}

static void wg_reset_peak_memory(void *ctx) { tf_gpu_reset_peak_memory(&((wg_dev *)ctx)->gd); }

static WGPUBuffer handle_of(tf_backend_buffer *b) { return (WGPUBuffer)((tf_gpu_block *)b)->handle; }

/* WebGPU copies and writes move whole 4-byte words at 4-byte offsets: an
 * unaligned range is widened to the words that cover it. Size classes are
 * multiples of 4, so the widened range stays inside the buffer. */
static size_t word_floor(size_t x) { return x & ~(size_t)3; }
static size_t word_ceil(size_t x) { return (x + 3) & ~(size_t)3; }

static void submit_copy(wg_dev *d, WGPUBuffer src, size_t soff, WGPUBuffer dst, size_t doff, size_t n) {
    WGPUCommandEncoder enc = wg.DeviceCreateCommandEncoder(d->device, NULL);
    wg.CommandEncoderCopyBufferToBuffer(enc, src, soff, dst, doff, n);
    WGPUCommandBuffer cmd = wg.CommandEncoderFinish(enc, NULL);
    wg.QueueSubmit(d->queue, 1, &cmd);
    wg.CommandBufferRelease(cmd);
    wg.CommandEncoderRelease(enc);
}

static void on_mapped(WGPUMapAsyncStatus status, WGPUStringView message, void *u1, void *u2) {
    (void)u2;
    wait_flag *f = u1;
    f->status = status;
    copy_view(f->message, sizeof f->message, message);
    f->done = true;
}

/* Words [off, off + n) of b (both multiples of 4) into dst, through a
 * mapped staging buffer, after everything queued before. */
static tf_status read_words(wg_dev *d, WGPUBuffer b, size_t off, void *dst, size_t n) {
    for (size_t done = 0; done < n;) {
        size_t chunk = n - done < STAGING_CHUNK ? n - done : STAGING_CHUNK;
        WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
        desc.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst;
        desc.size = chunk;
        WGPUBuffer staging = wg.DeviceCreateBuffer(d->device, &desc);
        if (!staging) return tf_gpu_fail(&d->gd, TF_GPU_ERROR_OUT_OF_MEMORY, "a staging buffer", "out of memory", "");
        submit_copy(d, b, off + done, staging, 0, chunk);
        wait_flag f = {0};
        WGPUBufferMapCallbackInfo cb = WGPU_BUFFER_MAP_CALLBACK_INFO_INIT;
        cb.mode = WGPUCallbackMode_AllowProcessEvents;
        cb.callback = on_mapped;
        cb.userdata1 = &f;
        wg.BufferMapAsync(staging, WGPUMapMode_Read, 0, chunk, cb);
        wait_for(d, &f);
        const void *p = f.status == WGPUMapAsyncStatus_Success ? wg.BufferGetConstMappedRange(staging, 0, chunk) : NULL;
        if (p) memcpy((char *)dst + done, p, chunk);
        if (f.status == WGPUMapAsyncStatus_Success) wg.BufferUnmap(staging);
        wg.BufferRelease(staging);
        if (!p) return tf_gpu_fail(&d->gd, TF_GPU_ERROR_STICKY, "wgpuBufferMapAsync", "map failed", f.message);
        done += chunk;
    }
    return TF_OK;
}

static tf_status read_range(wg_dev *d, WGPUBuffer b, size_t off, void *dst, size_t n) {
    size_t a0 = word_floor(off), a1 = word_ceil(off + n);
    if (a0 == off && a1 == off + n) return read_words(d, b, off, dst, n);
    unsigned char *tmp = malloc(a1 - a0);
    if (!tmp) return host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to read %zu bytes", d->gd.name, n);
    tf_status s = read_words(d, b, a0, tmp, a1 - a0);
    if (s == TF_OK) memcpy(dst, tmp + (off - a0), n);
    free(tmp);
    return s;
}

/* src into [off, off + n) of b; the bytes around an unaligned range are
 * read first and written back as they were. */
static tf_status write_range(wg_dev *d, WGPUBuffer b, size_t off, const void *src, size_t n) {
    size_t a0 = word_floor(off), a1 = word_ceil(off + n);
    if (a0 == off && a1 == off + n) {
        wg.QueueWriteBuffer(d->queue, b, off, src, n);   /* copies src before it returns */
        return TF_OK;
    }
    unsigned char *tmp = malloc(a1 - a0);
    if (!tmp) return host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to write %zu bytes", d->gd.name, n);
    tf_status s = read_words(d, b, a0, tmp, a1 - a0);
    if (s == TF_OK) {
        memcpy(tmp + (off - a0), src, n);
        wg.QueueWriteBuffer(d->queue, b, a0, tmp, a1 - a0);
    }
    free(tmp);
    return s;
}

/* One device queue per device, in order; the stream slots are NULL. */
static tf_status wg_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                           size_t n) {
    (void)stream;
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_gpu_check_range(&d->gd, (tf_gpu_block *)dst, off, n);
    if (s == TF_OK && n) s = write_range(d, handle_of(dst), off, src, n);
    tf_gpu_leave(&d->gd);
    return s;
}

static tf_status wg_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                             size_t n) {
    (void)stream;
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_gpu_check_range(&d->gd, (tf_gpu_block *)src, off, n);
    if (s == TF_OK && n) s = read_range(d, handle_of(src), off, dst, n);
    tf_gpu_leave(&d->gd);
    return s;
}

static tf_status wg_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                         tf_backend_buffer *src, size_t soff, size_t n) {
    (void)stream;
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_gpu_check_range(&d->gd, (tf_gpu_block *)dst, doff, n);
    if (s == TF_OK) s = tf_gpu_check_range(&d->gd, (tf_gpu_block *)src, soff, n);
    if (s == TF_OK && n && (doff | soff | n) % 4 == 0) {
        submit_copy(d, handle_of(src), soff, handle_of(dst), doff, n);
    } else if (s == TF_OK && n) {                /* unaligned: through the host */
        void *tmp = malloc(n);
        s = tmp ? read_range(d, handle_of(src), soff, tmp, n)
                : host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to copy %zu bytes", d->gd.name, n);
        if (s == TF_OK) s = write_range(d, handle_of(dst), doff, tmp, n);
        free(tmp);
    }
    tf_gpu_leave(&d->gd);
    return s;
}

static tf_status wg_synchronize(void *ctx, tf_backend_stream *stream) {
    (void)stream;
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    wg.DevicePoll(d->device, true, NULL);        /* returns when the queue is empty */
    tf_gpu_leave(&d->gd);
    return TF_OK;
}

/* ---- ops: the WGSL kernels (wgsl_kernels.c) ---- */

static bool wg_supports(void *ctx, const tf_op *op) { return tf_wg_supports(ctx, op); }

static tf_status wg_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    (void)stream;
    wg_dev *d = ctx;
    tf_status s = tf_gpu_enter(&d->gd);
    if (s != TF_OK) return s;
    s = tf_wg_run(d, op);
    tf_gpu_leave(&d->gd);
    return s;
}

/* ---- what the device is ---- */

static uint64_t host_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* WebGPU's limits; the API reports no compute units, clock or caches. */
static void fill_limits(const wg_dev *d, tf_backend_device_info *info) {
    tf_device_limits *l = &info->limits;
    const WGPULimits *w = &d->limits;
    l->max_buffer_bytes = w->maxBufferSize;
    l->max_binding_bytes = w->maxStorageBufferBindingSize;
    l->max_work_group_size = w->maxComputeInvocationsPerWorkgroup;
    l->max_work_group_dims[0] = w->maxComputeWorkgroupSizeX;
    l->max_work_group_dims[1] = w->maxComputeWorkgroupSizeY;
    l->max_work_group_dims[2] = w->maxComputeWorkgroupSizeZ;
    l->shared_memory_bytes = w->maxComputeWorkgroupStorageSize;
    l->subgroup_size = d->subgroup_size;
    info->hints.alignment = w->minStorageBufferOffsetAlignment;
    info->hints.work_group_size = WG_SIZE;                      /* what the WGSL kernels are written for */
    info->hints.vector_width_f32 = 4;                           /* vec4<f32>, WGSL's widest */
    info->hints.async_helps = true;
}

static tf_status wg_get_info(void *ctx, tf_backend_device_info *info) {
    wg_dev *d = ctx;
    snprintf(info->description, sizeof info->description,
             "%.80s via %s (driver %.50s; max binding %" PRIu64 " MiB, max buffer %" PRIu64
             " MiB, workgroup %u%s)",
             d->adapter_name, d->backend_api, d->driver, (uint64_t)d->limits.maxStorageBufferBindingSize >> 20,
             (uint64_t)d->limits.maxBufferSize >> 20, d->limits.maxComputeInvocationsPerWorkgroup,
             d->shader_f16 ? ", shader-f16" : "");
    bool cpu = d->adapter_type == WGPUAdapterType_CPU;
    info->type = cpu ? TF_DEVICE_TYPE_CPU
                 : d->adapter_type == WGPUAdapterType_IntegratedGPU ? TF_DEVICE_TYPE_INTEGRATED_GPU
                                                                    : TF_DEVICE_TYPE_GPU;
    /* WebGPU does not report memory: a CPU adapter has the host's; for a GPU
     * it is left unknown (0) rather than guessed. */
    uint64_t total = cpu ? host_memory() : 0;
    tf_memory_stats ms;
    tf_gpu_memory_stats(&d->gd, &ms);
    info->memory_total = total;
    info->memory_free = total > ms.reserved ? total - ms.reserved : 0;
    /* The dtypes WGSL computes with: no f64 and no i64 (WGSL has no 64-bit
     * types); the block-quantized ones decode, encode and multiply in WGSL. */
    uint32_t dts = 1u << TF_F32 | 1u << TF_F16 | 1u << TF_BF16 | 1u << TF_I8 | 1u << TF_I32 | 1u << TF_U8 | 1u << TF_BOOL;
#define TF__QCAP(E, ...) dts |= 1u << TF_##E;
    TF_QDTYPE_LIST(TF__QCAP)
#undef TF__QCAP
    info->caps.dtypes = dts;
    info->caps.async = true;
    info->caps.pinned_host_memory = false;
    info->caps.unified_memory = cpu || d->adapter_type == WGPUAdapterType_IntegratedGPU;
    info->caps.emulated = cpu;                   /* lavapipe, SwiftShader, WARP */
    if (TF_HAS_FIELD(info, tf_backend_device_info, hints)) fill_limits(d, info);
    return TF_OK;
}

static const tf_device_iface wg_device_iface = {
    TF_STRUCT_INIT(tf_device_iface),
    .get_info = wg_get_info,
    .buffer_alloc = wg_buffer_alloc,
    .buffer_free = wg_buffer_free,
    .buffer_upload = wg_upload,
    .buffer_download = wg_download,
    .buffer_copy = wg_copy,
    .supports = wg_supports,
    .run = wg_run,
    .synchronize = wg_synchronize,
    .memory_stats = wg_memory_stats,
    .empty_cache = wg_empty_cache,
    .alloc_configure = wg_alloc_configure,
    .reset_peak_memory = wg_reset_peak_memory,
};

/* ---- discovery ---- */

typedef struct device_request {
    bool done;
    WGPUDevice device;
    char message[200];
} device_request;

static void on_device(WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView message, void *u1, void *u2) {
    (void)u2;
    device_request *r = u1;
    r->device = status == WGPURequestDeviceStatus_Success ? device : NULL;
    copy_view(r->message, sizeof r->message, message);
    r->done = true;
}

/* A lost device (driver reset, removal) fails every later call with
 * TF_ERR_DEVICE_LOST naming the reason. Not at our own release. */
static void on_lost(WGPUDevice const *device, WGPUDeviceLostReason reason, WGPUStringView message, void *u1, void *u2) {
    (void)device;
    (void)u2;
    wg_dev *d = u1;
    if (reason == WGPUDeviceLostReason_Destroyed || reason == WGPUDeviceLostReason_CallbackCancelled) return;
    char msg[200];
    copy_view(msg, sizeof msg, message);
    tf_gpu_fail(&d->gd, TF_GPU_ERROR_STICKY, "the WebGPU device", "lost", msg);
}

/* An error no scope caught: a launch's validation error (a bug of ours).
 * Recorded for the launch to report; wgpu-native's default would abort. */
static void on_uncaptured(WGPUDevice const *device, WGPUErrorType type, WGPUStringView message, void *u1, void *u2) {
    (void)device;
    (void)type;
    (void)u2;
    wg_dev *d = u1;
    d->uncaptured = true;
    copy_view(d->uncaptured_message, sizeof d->uncaptured_message, message);
}

static bool open_device(wg_dev *d, WGPUAdapter adapter, int index) {
    memset(d, 0, sizeof *d);
    d->index = index;
    d->adapter = adapter;
    WGPUAdapterInfo info = WGPU_ADAPTER_INFO_INIT;
    if (wg.AdapterGetInfo(adapter, &info) != WGPUStatus_Success) return false;
    copy_view(d->adapter_name, sizeof d->adapter_name, info.device);
    copy_view(d->driver, sizeof d->driver, info.description);
    snprintf(d->backend_api, sizeof d->backend_api, "%s", backend_name(info.backendType));
    d->adapter_type = info.adapterType;
    d->subgroup_size = info.subgroupMinSize;
    wg.AdapterInfoFreeMembers(info);
    d->limits = (WGPULimits)WGPU_LIMITS_INIT;
    if (wg.AdapterGetLimits(adapter, &d->limits) != WGPUStatus_Success) return false;
    d->shader_f16 = wg.AdapterHasFeature(adapter, WGPUFeatureName_ShaderF16);
    /* The adapter's real limits, not WebGPU's defaults (128 MiB bindings,
     * 256 MiB buffers): the device gets everything the adapter has. */
    WGPUDeviceDescriptor desc = WGPU_DEVICE_DESCRIPTOR_INIT;
    WGPUFeatureName f16 = WGPUFeatureName_ShaderF16;
    desc.requiredLimits = &d->limits;
    desc.requiredFeatureCount = d->shader_f16 ? 1 : 0;
    desc.requiredFeatures = &f16;
    desc.deviceLostCallbackInfo.mode = WGPUCallbackMode_AllowProcessEvents;
    desc.deviceLostCallbackInfo.callback = on_lost;
    desc.deviceLostCallbackInfo.userdata1 = d;
    desc.uncapturedErrorCallbackInfo.callback = on_uncaptured;
    desc.uncapturedErrorCallbackInfo.userdata1 = d;
    device_request r = {0};
    WGPURequestDeviceCallbackInfo cb = WGPU_REQUEST_DEVICE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = on_device;
    cb.userdata1 = &r;
    wg.AdapterRequestDevice(adapter, &desc, cb);
    for (int i = 0; !r.done && i < 100000; i++) wg.InstanceProcessEvents(instance);
    if (!r.device) return false;
    d->device = r.device;
    d->queue = wg.DeviceGetQueue(d->device);
    if (!tf_wg_kernels_init(d)) {
        wg.QueueRelease(d->queue);
        wg.DeviceRelease(d->device);
        return false;
    }
    char name[32];
    snprintf(name, sizeof name, "webgpu:%d", index);
    tf_gpu_dev_init(&d->gd, host, name, &mem_ops, d);
    return true;
}

/* Vulkan, Metal and D3D12 adapters (wgpu's "primary" backends): its OpenGL
 * backend lacks storage-buffer limits worth having and is skipped. */
static void discover(void) {
    WGPUInstanceEnumerateAdapterOptions opts = {NULL, WGPUInstanceBackend_Primary};
    size_t n = wg.InstanceEnumerateAdapters(instance, &opts, NULL);
    if (n == 0) {
        snprintf(note, sizeof note, "wgpu-native (%.300s) found no Vulkan, Metal or D3D12 adapter", wg.path);
        return;
    }
    WGPUAdapter adapters[MAX_WG_DEVICES * 2];
    if (n > MAX_WG_DEVICES * 2) n = MAX_WG_DEVICES * 2;
    wg.InstanceEnumerateAdapters(instance, &opts, adapters);
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (n_devs < MAX_WG_DEVICES && open_device(&devs[n_devs], adapters[i], n_devs)) {
            bdevs[n_devs] = (tf_backend_device){&wg_device_iface, &devs[n_devs]};
            n_devs++;
        } else {
            wg.AdapterRelease(adapters[i]);
            failed++;
        }
    }
    uint32_t v = wg.GetVersion();
    snprintf(note, sizeof note, "wgpu-native %u.%u.%u.%u from %.300s%s",
             v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff, wg.path,
             failed ? "; an adapter refused a device" : "");
}

static void wg_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        wg_dev *d = &devs[i];
        wg.DevicePoll(d->device, true, NULL);
        tf_gpu_dev_destroy(&d->gd);
        tf_wg_kernels_release(d);
        wg.QueueRelease(d->queue);
        wg.DeviceRelease(d->device);
        wg.AdapterRelease(d->adapter);
    }
    n_devs = 0;
    if (instance) wg.InstanceRelease(instance);
    instance = NULL;
}

static const tf_backend_iface wg_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = wg_shutdown,
};

/* Keep the Vulkan loader, its drivers and layers mapped once they are
 * loaded: they hold allocations for the life of the process, and the
 * loader unloads them when wgpu releases its instance at tf_shutdown, which
 * would leave those allocations pointing into unmapped code (unreadable to
 * LeakSanitizer's suppressions, and a reload would start the stack anew). */
static int pin_vulkan_stack(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name;
    if (base && (!strncmp(base, "libvulkan", 9) || !strncmp(base, "libVkLayer", 10)))
        tf_gpu_keep_loaded(info->dlpi_name);
    return 0;
}

/* The folder this plugin was loaded from. */
static void plugin_dir(char *out, size_t n) {
    Dl_info info;
    if (dladdr((void *)plugin_dir, &info) && info.dli_fname) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", info.dli_fname);
        snprintf(out, n, "%s", dirname(copy));
    } else {
        snprintf(out, n, ".");
    }
}

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    tf_gpu_env_init(h);
    n_devs = 0;
    note[0] = 0;
    char dir[512];
    plugin_dir(dir, sizeof dir);
    if (tf_wgpu_load(&wg, dir, note, sizeof note)) {
        /* Only the primary backends: wgpu's OpenGL one would probe EGL
         * (and complain on stderr) on machines without a display. */
        WGPUInstanceExtras extras = {0};
        extras.chain.sType = (WGPUSType)WGPUSType_InstanceExtras;
        extras.backends = WGPUInstanceBackend_Primary;
        WGPUInstanceDescriptor desc = WGPU_INSTANCE_DESCRIPTOR_INIT;
        desc.nextInChain = &extras.chain;
        /* Mesa's implicit device-select Vulkan layer orders GPUs for a
         * display server and, where there is none (no XDG_RUNTIME_DIR),
         * prints "error: XDG_RUNTIME_DIR is invalid" for each probe. We
         * pick adapters ourselves, so the layer is switched off (its own
         * NODEVICE_SELECT) while our instance is made and its adapters
         * enumerated, and the environment is put back as it was after. */
        /* the desktop's variables, not tensorframe's: read as the layer reads them */
        bool quiet_layer = !getenv("XDG_RUNTIME_DIR") && !getenv("NODEVICE_SELECT");
        if (quiet_layer) setenv("NODEVICE_SELECT", "1", 0);
        instance = wg.CreateInstance(&desc);
        if (instance) discover();
        else snprintf(note, sizeof note, "wgpuCreateInstance failed (%.300s)", wg.path);
        if (quiet_layer) unsetenv("NODEVICE_SELECT");
        dl_iterate_phdr(pin_vulkan_stack, NULL);
    }
    tf_gpu_fill_reg(out, "webgpu", &wg_backend_iface, bdevs, n_devs, note);
    return TF_OK;
}
