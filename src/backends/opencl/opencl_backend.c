/* The OpenCL backend, built as the plugin libtensorframe-opencl.so.
 *
 * Every device of every platform becomes opencl:N with its own context and
 * in-order queue. Buffers live on the device; ops enqueue and return; reads
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
#include <tensorframe/opencl.h>

#define MAX_CL_DEVICES 32

enum {
    K_BINARY, K_MATMUL, K_REDUCE_PARTIAL, K_REDUCE_FINAL, K_COPY_FROM, K_ARANGE, K_RAND, K_UNARY, K_COMPARE,
    K_BOOL_UNARY, K_WHERE, K_REDUCE_FULL, K_CUMSUM, K_INDEX_PICK, K_TRIANGLE, K_ROW_OP, K_ROPE, K_SDPA, K_CONV2D,
    K_POOL2D, K_ADAM, K_COUNT
};
static const char *const kernel_names[K_COUNT] = {"binary", "matmul", "reduce_partial", "reduce_final", "copy_from",
                                                  "arange", "rand", "unary", "compare", "bool_unary", "where_select",
                                                  "reduce_full", "cumsum", "index_pick", "triangle", "row_op",
                                                  "rope", "sdpa", "conv2d", "pool2d", "adam"};

/* Mirrors `conv_geom` in kernels.cl. */
typedef struct cl_conv_geom {
    cl_long N, C, H, W, O, Ho, Wo, cg, kh, kw, groups;
    cl_long stride[2], pad[2], dil[2];
    cl_long xs[4], ws[4], os[4], bs;
    cl_long x_off, w_off, o_off, b_off;
} cl_conv_geom;

/* Mirrors `attn_geom` in kernels.cl. */
typedef struct cl_attn_geom {
    cl_long B, Hq, Lq, D, Hkv, Lk, Dv, q_off;
    cl_long st[5][4];
    cl_long off[5];
} cl_attn_geom;
#define MAX_DV 256

/* Mirrors `geom` in kernels.cl. */
typedef struct cl_geom {
    cl_long shape[8];
    cl_long stride[4][8];
    cl_long offset[4];
    cl_int ndim;
    cl_int contiguous;
} cl_geom;

typedef struct cl_buf {
    cl_mem mem;
    size_t nbytes;
} cl_buf;

typedef enum { PROGRAM_NONE, PROGRAM_READY, PROGRAM_FAILED } program_state;

typedef struct cl_dev {
    int index;
    cl_platform_id platform;
    cl_device_id id;
    cl_context context;
    cl_command_queue queue;
    char name[256], vendor[128], version[128], driver[128], platform_name[128];
    cl_device_type type;
    uint64_t global_mem;
    bool fp64, fp16, unified, amd_free_query;
    int rwg, ts;                          /* reduce work-group size, matmul tile */
    _Atomic uint64_t allocated;           /* bytes of our live buffers */
    pthread_mutex_t lock;                 /* program builds and kernel argument setting */
    program_state state[TF_DTYPE_COUNT];
    char build_error[TF_DTYPE_COUNT][2048];
    cl_program program[TF_DTYPE_COUNT];
    cl_kernel kernel[TF_DTYPE_COUNT][K_COUNT];
    tf_opencl_stats stats;
} cl_dev;

static const tf_host_api *host;
static cl_dev devs[MAX_CL_DEVICES];
static tf_backend_device bdevs[MAX_CL_DEVICES];
static int n_devs;
static char note[512];
static char extra_build_options[512];

/* ---- dtype facts, from the header-only list (plugins never link the core) ---- */

static size_t elsize(tf_dtype dt) {
    static const size_t sizes[TF_DTYPE_COUNT] = {
#define TF__SZ(E, n, sz, fl, in) sz,
        TF_DTYPE_LIST(TF__SZ)
#undef TF__SZ
    };
    return (unsigned)dt < TF_DTYPE_COUNT ? sizes[dt] : 0;
}

static const char *dt_name(tf_dtype dt) {
    static const char *const names[TF_DTYPE_COUNT] = {
#define TF__NAME(E, n, sz, fl, in) #n,
        TF_DTYPE_LIST(TF__NAME)
#undef TF__NAME
    };
    return (unsigned)dt < TF_DTYPE_COUNT ? names[dt] : "?";
}

static bool dt_is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }

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

static tf_status status_of(cl_int e) {
    switch (e) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: case CL_OUT_OF_RESOURCES: case CL_OUT_OF_HOST_MEMORY:
        return TF_ERR_OUT_OF_MEMORY;
    case CL_DEVICE_NOT_AVAILABLE: return TF_ERR_DEVICE_LOST;
    default: return TF_ERR_BACKEND;
    }
}

/* Report a failed OpenCL call: "opencl:0: clEnqueueNDRangeKernel(binary) failed: CL_OUT_OF_RESOURCES". */
static tf_status cl_fail(const cl_dev *d, cl_int e, const char *what) {
    return host->set_error(status_of(e), "opencl:%d: %s failed: %s (%d)", d ? d->index : -1, what,
                           cl_error_name(e), (int)e);
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
    uint64_t used = atomic_load(&d->allocated);
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
    uint32_t dts = (1u << TF_DTYPE_COUNT) - 1u;
    if (!d->fp64) dts &= ~(1u << TF_F64);
    info->caps.dtypes = dts;
    info->caps.async = true;
    info->caps.pinned_host_memory = false;
    info->caps.unified_memory = d->unified;
    info->caps.emulated = (d->type & CL_DEVICE_TYPE_CPU) != 0;   /* PoCL and the like */
    return TF_OK;
}

/* ---- buffers ---- */

static tf_status cl_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    cl_dev *d = ctx;
    cl_buf *b = malloc(sizeof *b);
    if (!b) return host->set_error(TF_ERR_OUT_OF_MEMORY, "opencl:%d: out of host memory", d->index);
    cl_int e = CL_SUCCESS;
    if (nbytes > d->global_mem) e = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    else b->mem = clCreateBuffer(d->context, CL_MEM_READ_WRITE, nbytes ? nbytes : 4, NULL, &e);
    if (e != CL_SUCCESS) {
        free(b);
        return cl_fail(d, e, "clCreateBuffer");
    }
    b->nbytes = nbytes;
    atomic_fetch_add(&d->allocated, nbytes);
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}

static void cl_buffer_free(void *ctx, tf_backend_buffer *buf) {
    cl_dev *d = ctx;
    cl_buf *b = (cl_buf *)buf;
    if (!b) return;
    clReleaseMemObject(b->mem);      /* the runtime keeps it until queued work is done */
    atomic_fetch_sub(&d->allocated, b->nbytes);
    free(b);
}

static tf_status check_range(cl_dev *d, const cl_buf *b, size_t off, size_t n) {
    if (off > b->nbytes || n > b->nbytes - off)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "opencl:%d: %zu bytes at %zu outside a buffer of %zu",
                               d->index, n, off, b->nbytes);
    return TF_OK;
}

static tf_status cl_upload(void *ctx, tf_backend_buffer *dst, size_t off, const void *src, size_t n) {
    cl_dev *d = ctx;
    cl_buf *b = (cl_buf *)dst;
    tf_status s = check_range(d, b, off, n);
    if (s != TF_OK || !n) return s;
    cl_int e = clEnqueueWriteBuffer(d->queue, b->mem, CL_TRUE, off, n, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueWriteBuffer");
}

static tf_status cl_download(void *ctx, tf_backend_buffer *src, size_t off, void *dst, size_t n) {
    cl_dev *d = ctx;
    cl_buf *b = (cl_buf *)src;
    tf_status s = check_range(d, b, off, n);
    if (s != TF_OK || !n) return s;
    cl_int e = clEnqueueReadBuffer(d->queue, b->mem, CL_TRUE, off, n, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueReadBuffer");
}

static tf_status cl_copy(void *ctx, tf_backend_buffer *dst, size_t doff, tf_backend_buffer *src, size_t soff,
                         size_t n) {
    cl_dev *d = ctx;
    cl_buf *db = (cl_buf *)dst, *sb = (cl_buf *)src;
    tf_status s = check_range(d, db, doff, n);
    if (s == TF_OK) s = check_range(d, sb, soff, n);
    if (s != TF_OK || !n) return s;
    cl_int e = clEnqueueCopyBuffer(d->queue, sb->mem, db->mem, soff, doff, n, 0, NULL, NULL);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueCopyBuffer");
}

static tf_status cl_synchronize(void *ctx) {
    cl_dev *d = ctx;
    cl_int e = clFinish(d->queue);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clFinish");
}

/* ---- programs: built per (device, dtype), cached on disk ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void cache_dir(char *out, size_t n) {
    const char *env = getenv("TF_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env) snprintf(out, n, "%s/opencl", env);
    else if (xdg && *xdg) snprintf(out, n, "%s/tensorframe/opencl", xdg);
    else if (home && *home) snprintf(out, n, "%s/.cache/tensorframe/opencl", home);
    else snprintf(out, n, "/tmp/tensorframe-cache/opencl");
}

static void mkdir_p(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0755);
        *p = '/';
    }
    mkdir(tmp, 0755);
}

/* The cache key covers everything that changes the binary. */
static void cache_path(const cl_dev *d, const char *options, char *out, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, kernels_cl, kernels_cl_len);
    h = fnv1a(h, options, strlen(options));
    h = fnv1a(h, d->name, strlen(d->name));
    h = fnv1a(h, d->driver, strlen(d->driver));
    h = fnv1a(h, d->version, strlen(d->version));
    h = fnv1a(h, d->platform_name, strlen(d->platform_name));
    char dir[900];
    cache_dir(dir, sizeof dir);
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
        mkdir_p(dir);
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
    const char *src = kernels_cl;
    size_t len = kernels_cl_len;
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

/* The program for dtype dt, built (or loaded) on first use. Caller holds d->lock. */
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
    for (int k = 0; k < K_COUNT; k++) {
        cl_int e;
        d->kernel[dt][k] = clCreateKernel(p, kernel_names[k], &e);   /* some dtypes lack some kernels */
        if (e != CL_SUCCESS) d->kernel[dt][k] = NULL;
    }
    d->state[dt] = PROGRAM_READY;
    return TF_OK;
}

/* ---- ops ---- */


static cl_mem mem_of(const tf_tensor_desc *t) { return ((cl_buf *)t->buffer)->mem; }
static cl_long elem_offset(const tf_tensor_desc *t) { return (cl_long)(t->offset / elsize(t->dtype)); }

/* Geometry over `shape` for up to four descriptors (NULL entries skipped). */
static cl_geom make_geom(int ndim, const int64_t *shape, const tf_tensor_desc *const *ops, int nops) {
    cl_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = ndim;
    g.contiguous = 1;
    for (int i = 0; i < ndim; i++) g.shape[i] = shape[i];
    for (int k = 0; k < nops; k++) {
        if (!ops[k]) continue;
        g.offset[k] = elem_offset(ops[k]);
        for (int i = 0; i < ndim; i++) g.stride[k][i] = ops[k]->strides[i];
        if (!tf_desc_is_contiguous(ops[k])) g.contiguous = 0;
    }
    return g;
}

typedef struct arg { size_t size; const void *value; } arg;
#define ARG(v) ((arg){sizeof(v), &(v)})

/* Set arguments and enqueue under the device lock (kernel objects are not
 * safe to configure from two threads at once). */
static tf_status launch(cl_dev *d, cl_kernel k, const char *name, int nargs, const arg *args, cl_uint dims,
                        const size_t *global, const size_t *local) {
    if (!k) return host->set_error(TF_ERR_BACKEND, "opencl:%d: kernel '%s' is missing from this dtype's program", d->index, name);
    for (int i = 0; i < nargs; i++) {
        cl_int e = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].value);
        if (e != CL_SUCCESS) return cl_fail(d, e, name);
    }
    cl_int e = clEnqueueNDRangeKernel(d->queue, k, dims, NULL, global, local, 0, NULL, NULL);
    if (e != CL_SUCCESS) return cl_fail(d, e, name);
    d->stats.kernels_launched++;
    return TF_OK;
}

static int binary_code(tf_op_kind k) {
    switch (k) {
    case TF_OP_ADD: return 0;
    case TF_OP_SUB: return 1;
    case TF_OP_MUL: return 2;
    case TF_OP_DIV: return 3;
    case TF_OP_MAXIMUM: return 4;
    case TF_OP_MINIMUM: return 5;
    case TF_OP_SWIGLU: return 7;
    default: return 6;
    }
}

static tf_status run_binary(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[3] = {o, &op->inputs[0], &op->inputs[1]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 3);
    cl_int code = binary_code(op->kind);
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), ma = mem_of(ops[1]), mb = mem_of(ops[2]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[o->dtype][K_BINARY], "binary", 6, args, 1, &global, NULL);
}

/* kernels.cl's apply_unary codes, in op table order from NEG */
_Static_assert(TF_OP_CLAMP - TF_OP_NEG == 22, "kernels.cl apply_unary codes follow the op table from NEG to CLAMP");
static int unary_code(tf_op_kind k) { return (int)k - (int)TF_OP_NEG; }

static bool is_unary(tf_op_kind k) { return k >= TF_OP_NEG && k <= TF_OP_CLAMP; }

static tf_status run_unary(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 2);
    cl_int code = unary_code(op->kind);
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mx = mem_of(ops[1]);
    size_t global = (size_t)n;
    cl_kernel k = d->kernel[o->dtype][K_UNARY];
    if (o->dtype == TF_F64) {
        cl_double alpha = op->params.alpha, lo = op->params.min_value, hi = op->params.max_value;
        arg args[] = {ARG(code), ARG(alpha), ARG(lo), ARG(hi), ARG(n), ARG(g), ARG(mo), ARG(mx)};
        return launch(d, k, "unary", 8, args, 1, &global, NULL);
    }
    cl_float alpha = (cl_float)op->params.alpha, lo = (cl_float)op->params.min_value, hi = (cl_float)op->params.max_value;
    arg args[] = {ARG(code), ARG(alpha), ARG(lo), ARG(hi), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    return launch(d, k, "unary", 8, args, 1, &global, NULL);
}

static bool is_compare(tf_op_kind k) { return k >= TF_OP_EQ && k <= TF_OP_LOGICAL_OR; }
_Static_assert(TF_OP_LOGICAL_OR - TF_OP_EQ == 7, "kernels.cl compare codes follow the op table from EQ to LOGICAL_OR");

static tf_status run_compare(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[3] = {o, &op->inputs[0], &op->inputs[1]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 3);
    cl_int code = (cl_int)(op->kind - TF_OP_EQ);
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), ma = mem_of(ops[1]), mb = mem_of(ops[2]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[ops[1]->dtype][K_COMPARE], "compare", 6, args, 1, &global, NULL);
}

static tf_status run_bool_unary(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 2);
    cl_int code = op->kind == TF_OP_LOGICAL_NOT ? 0 : op->kind == TF_OP_ISNAN ? 1 : 2;
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mx = mem_of(ops[1]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[ops[1]->dtype][K_BOOL_UNARY], "bool_unary", 5, args, 1, &global, NULL);
}

static tf_status run_where(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[4] = {o, &op->inputs[0], &op->inputs[1], &op->inputs[2]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 4);
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mc = mem_of(ops[1]), ma = mem_of(ops[2]), mb = mem_of(ops[3]);
    arg args[] = {ARG(n), ARG(g), ARG(mo), ARG(mc), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[o->dtype][K_WHERE], "where_select", 6, args, 1, &global, NULL);
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static tf_status run_matmul(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    const tf_tensor_desc *c = op->n_inputs > 2 ? &op->inputs[2] : o;   /* o stands in when there is no c */
    int nb = o->ndim - 2;
    const tf_tensor_desc *ops[4] = {a, b, o, c};
    cl_geom g = make_geom(nb, o->shape, ops, 4);
    cl_long M = o->shape[nb], N = o->shape[nb + 1], K = a->shape[nb + 1];
    cl_long4 ms = {{a->strides[nb], a->strides[nb + 1], b->strides[nb], b->strides[nb + 1]}};
    cl_long2 cs = {{c->strides[nb], c->strides[nb + 1]}};
    cl_int epilogue = op->kind == TF_OP_GEMM;
    double alpha = epilogue ? op->params.alpha : 1, beta = epilogue && op->n_inputs > 2 ? op->params.beta : 0;
    cl_double alpha_d = alpha, beta_d = beta;
    cl_float alpha_f = (cl_float)alpha, beta_f = (cl_float)beta;
    cl_mem mo = mem_of(o), ma = mem_of(a), mb = mem_of(b), mc = mem_of(c);
    size_t batch = 1;
    for (int i = 0; i < nb; i++) batch *= (size_t)o->shape[i];
    arg args[] = {ARG(M), ARG(N), ARG(K), ARG(ms), ARG(g), ARG(mo), ARG(ma), ARG(mb), ARG(epilogue),
                  d->fp64 ? ARG(alpha_d) : ARG(alpha_f), d->fp64 ? ARG(beta_d) : ARG(beta_f), ARG(mc), ARG(cs)};
    size_t ts = (size_t)d->ts, global[3] = {round_up((size_t)N, ts), round_up((size_t)M, ts), batch},
           local[3] = {ts, ts, 1};
    return launch(d, d->kernel[o->dtype][K_MATMUL], "matmul", 13, args, 3, global, local);
}

static tf_status run_reduce(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int64_t kshape[TF_MAX_DIMS], rshape[TF_MAX_DIMS];
    tf_tensor_desc kept = *in, red = *in;
    int nk = 0, nr = 0;
    for (int i = 0; i < in->ndim; i++) {
        bool reduced = op->params.axis == TF_ALL_AXES || i == op->params.axis;
        tf_tensor_desc *t = reduced ? &red : &kept;
        int *n = reduced ? &nr : &nk;
        t->strides[*n] = in->strides[i];
        (reduced ? rshape : kshape)[(*n)++] = in->shape[i];
    }
    kept.ndim = nk;
    red.ndim = nr;
    const tf_tensor_desc *kops[1] = {&kept}, *rops[1] = {&red};
    cl_geom go = make_geom(nk, kshape, kops, 1), gr = make_geom(nr, rshape, rops, 1);
    cl_long M = tf_desc_numel(o), R = 1;
    if (M == 0) return TF_OK;
    for (int i = 0; i < nr; i++) R *= rshape[i];
    if (op->kind != TF_OP_SUM && op->kind != TF_OP_MEAN) {
        static const int codes[] = {[TF_OP_MAX] = 2, [TF_OP_MIN] = 3, [TF_OP_ARGMAX] = 4, [TF_OP_ARGMIN] = 5,
                                    [TF_OP_PROD] = 6, [TF_OP_VAR] = 7, [TF_OP_STD] = 8, [TF_OP_LOGSUMEXP] = 9};
        cl_int code = codes[op->kind];
        cl_long correction = op->params.correction, off = elem_offset(o);
        cl_int out_long = o->dtype == TF_I64;
        cl_mem mi = mem_of(in), mo = mem_of(o);
        arg args[] = {ARG(code), ARG(R), ARG(correction), ARG(go), ARG(gr), ARG(mi), ARG(mo), ARG(off), ARG(out_long)};
        size_t global = (size_t)M * (size_t)d->rwg, local = (size_t)d->rwg;
        return launch(d, d->kernel[in->dtype][K_REDUCE_FULL], "reduce_full", 9, args, 1, &global, &local);
    }
    /* Enough groups per output to fill the device when there are few outputs. */
    cl_long G = M >= 64 || R <= (cl_long)d->rwg * 4 ? 1 : (R / ((cl_long)d->rwg * 4) < 64 ? R / ((cl_long)d->rwg * 4) : 64);
    if (G < 1) G = 1;
    size_t acc_size = dt_is_float(in->dtype) ? (in->dtype == TF_F64 ? 8 : 4) : 8;
    cl_int e;
    cl_mem partial = clCreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)(M * G) * acc_size, NULL, &e);
    if (e != CL_SUCCESS) return cl_fail(d, e, "clCreateBuffer(partial sums)");
    cl_mem mi = mem_of(in), mo = mem_of(o);
    arg pargs[] = {ARG(R), ARG(G), ARG(go), ARG(gr), ARG(mi), ARG(partial)};
    size_t global[2] = {(size_t)G * (size_t)d->rwg, (size_t)M}, local[2] = {(size_t)d->rwg, 1};
    tf_status s = launch(d, d->kernel[in->dtype][K_REDUCE_PARTIAL], "reduce_partial", 6, pargs, 2, global, local);
    if (s == TF_OK) {
        cl_int mean = op->kind == TF_OP_MEAN;
        cl_long off = elem_offset(o);
        arg fargs[] = {ARG(M), ARG(G), ARG(R), ARG(mean), ARG(partial), ARG(mo), ARG(off)};
        size_t gm = (size_t)M;
        s = launch(d, d->kernel[in->dtype][K_REDUCE_FINAL], "reduce_final", 7, fargs, 1, &gm, NULL);
    }
    clReleaseMemObject(partial);
    return s;
}

static tf_status run_cumsum(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int ax = op->params.axis == TF_ALL_AXES ? -1 : op->params.axis;
    int64_t lshape[TF_MAX_DIMS] = {0};
    for (int i = 0; i < in->ndim; i++) lshape[i] = i == ax ? 1 : in->shape[i];
    const tf_tensor_desc *ops[2] = {in, o};
    cl_geom g = make_geom(in->ndim, lshape, ops, 2);
    cl_long len = ax >= 0 ? in->shape[ax] : 1, is = ax >= 0 ? in->strides[ax] : 0, os = ax >= 0 ? o->strides[ax] : 0;
    cl_long lines = tf_desc_numel(o) / (len ? len : 1);
    if (len == 0 || lines == 0) return TF_OK;
    cl_int out_long = o->dtype == TF_I64;
    cl_mem mi = mem_of(in), mo = mem_of(o);
    arg args[] = {ARG(lines), ARG(len), ARG(g), ARG(is), ARG(os), ARG(mi), ARG(mo), ARG(out_long)};
    size_t global = (size_t)lines;
    return launch(d, d->kernel[in->dtype][K_CUMSUM], "cumsum", 8, args, 1, &global, NULL);
}

static tf_status run_index_pick(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *ix = &op->inputs[1], *o = &op->output;
    cl_geom g = make_geom(o->ndim, o->shape, (const tf_tensor_desc *const[]){x, ix, o}, 3);
    cl_int gather = op->kind == TF_OP_GATHER, axis = op->params.axis, index64 = ix->dtype == TF_I64;
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mx = mem_of(x), mi = mem_of(ix);
    arg args[] = {ARG(gather), ARG(axis), ARG(n), ARG(g), ARG(mo), ARG(mx), ARG(mi), ARG(index64)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[o->dtype][K_INDEX_PICK], "index_pick", 8, args, 1, &global, NULL);
}

static tf_status run_triangle(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 2);
    cl_int upper = op->kind == TF_OP_TRIU;
    cl_long k = op->params.diagonal, n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mx = mem_of(ops[1]);
    arg args[] = {ARG(upper), ARG(k), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[o->dtype][K_TRIANGLE], "triangle", 6, args, 1, &global, NULL);
}

/* wide_t arguments are double where the device has fp64, else float. */
typedef struct wide_arg { cl_double d; cl_float f; } wide_arg;
static wide_arg wide(double v) { return (wide_arg){v, (cl_float)v}; }
#define WIDE_ARG(dev, w) ((dev)->fp64 ? ARG((w).d) : ARG((w).f))

static tf_status run_row_op(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    int ax = op->params.axis, next = 1;
    bool has_w = op->params.flags & TF_ROW_WEIGHT, has_b = op->params.flags & TF_ROW_BIAS;
    const tf_tensor_desc *w = has_w ? &op->inputs[next++] : x, *b = has_b ? &op->inputs[next++] : x;
    int64_t lines_shape[TF_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++) lines_shape[i] = i == ax ? 1 : x->shape[i];
    cl_geom g = make_geom(x->ndim, lines_shape, (const tf_tensor_desc *const[]){x, o}, 2);
    cl_long len = x->shape[ax], xs = x->strides[ax], os = o->strides[ax], lines = tf_desc_numel(o) / (len ? len : 1);
    if (len == 0) return TF_OK;
    cl_int code = op->kind == TF_OP_SOFTMAX ? 0 : op->kind == TF_OP_LOG_SOFTMAX ? 1 : op->kind == TF_OP_RMSNORM ? 2 : 3;
    cl_int hw = has_w, hb = has_b;
    cl_long ws = has_w ? w->strides[0] : 0, bs = has_b ? b->strides[0] : 0, w_off = elem_offset(w), b_off = elem_offset(b);
    wide_arg eps = wide(op->params.eps);
    cl_mem mx = mem_of(x), mo = mem_of(o), mw = mem_of(w), mb = mem_of(b);
    arg args[] = {ARG(code), ARG(len), ARG(xs), ARG(os), WIDE_ARG(d, eps), ARG(hw), ARG(hb), ARG(g), ARG(mx), ARG(mo),
                  ARG(mw), ARG(w_off), ARG(ws), ARG(mb), ARG(b_off), ARG(bs)};
    size_t global = (size_t)lines * (size_t)d->rwg, local = (size_t)d->rwg;
    return launch(d, d->kernel[x->dtype][K_ROW_OP], "row_op", 16, args, 1, &global, &local);
}

static tf_status run_rope(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *p = &op->inputs[1], *o = &op->output;
    cl_geom g = make_geom(x->ndim, x->shape, (const tf_tensor_desc *const[]){x, o}, 2);
    cl_long n = tf_desc_numel(o), rot = op->params.rotary_dims, ps = p->strides[0], p_off = elem_offset(p);
    cl_int neox = (op->params.flags & TF_ROPE_NEOX) != 0, ax = op->params.axis, pos64 = p->dtype == TF_I64;
    wide_arg theta = wide(op->params.theta);
    cl_mem mx = mem_of(x), mo = mem_of(o), mp = mem_of(p);
    arg args[] = {ARG(n), ARG(neox), ARG(rot), WIDE_ARG(d, theta), ARG(ax), ARG(g), ARG(mx), ARG(mo), ARG(mp), ARG(p_off),
                  ARG(ps), ARG(pos64)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[x->dtype][K_ROPE], "rope", 12, args, 1, &global, NULL);
}

static tf_status run_sdpa(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *t[5] = {&op->inputs[0], &op->inputs[1], &op->inputs[2],
                                  (op->params.flags & TF_SDPA_MASK) ? &op->inputs[3] : &op->inputs[0], &op->output};
    cl_attn_geom a;
    memset(&a, 0, sizeof a);
    a.B = t[0]->shape[0];
    a.Hq = t[0]->shape[1];
    a.Lq = t[0]->shape[2];
    a.D = t[0]->shape[3];
    a.Hkv = t[1]->shape[1];
    a.Lk = t[1]->shape[2];
    a.Dv = t[2]->shape[3];
    a.q_off = op->params.q_offset;
    for (int k = 0; k < 5; k++) {
        a.off[k] = elem_offset(t[k]);
        for (int i = 0; i < 4; i++) a.st[k][i] = t[k]->strides[i];
    }
    cl_int causal = (op->params.flags & TF_SDPA_CAUSAL) != 0, has_mask = (op->params.flags & TF_SDPA_MASK) != 0;
    wide_arg scale = wide(op->params.scale);
    cl_mem mq = mem_of(t[0]), mk = mem_of(t[1]), mv = mem_of(t[2]), mm = mem_of(t[3]), mo = mem_of(t[4]);
    arg args[] = {WIDE_ARG(d, scale), ARG(causal), ARG(has_mask), ARG(a), ARG(mq), ARG(mk), ARG(mv), ARG(mm), ARG(mo)};
    size_t global = (size_t)(a.B * a.Hq * a.Lq);
    return launch(d, d->kernel[t[0]->dtype][K_SDPA], "sdpa", 9, args, 1, &global, NULL);
}

static cl_conv_geom conv_geom_of(const tf_op *op, const tf_tensor_desc *w, const tf_tensor_desc *b) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    cl_conv_geom g;
    memset(&g, 0, sizeof g);
    g.N = x->shape[0];
    g.C = x->shape[1];
    g.H = x->shape[2];
    g.W = x->shape[3];
    g.O = o->shape[1];
    g.Ho = o->shape[2];
    g.Wo = o->shape[3];
    g.groups = op->params.groups ? op->params.groups : 1;
    g.cg = w ? w->shape[1] : 1;
    g.kh = w ? w->shape[2] : op->params.kernel[0];
    g.kw = w ? w->shape[3] : op->params.kernel[1];
    for (int i = 0; i < 2; i++) {
        g.stride[i] = op->params.stride[i];
        g.pad[i] = op->params.padding[i];
        g.dil[i] = op->params.dilation[i] ? op->params.dilation[i] : 1;
    }
    for (int i = 0; i < 4; i++) {
        g.xs[i] = x->strides[i];
        g.os[i] = o->strides[i];
        g.ws[i] = w ? w->strides[i] : 0;
    }
    g.bs = b ? b->strides[0] : 0;
    g.x_off = elem_offset(x);
    g.o_off = elem_offset(o);
    g.w_off = w ? elem_offset(w) : 0;
    g.b_off = b ? elem_offset(b) : 0;
    return g;
}

static tf_status run_conv2d(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *w = &op->inputs[1], *o = &op->output;
    cl_int has_bias = (op->params.flags & TF_CONV_BIAS) != 0;
    const tf_tensor_desc *b = has_bias ? &op->inputs[2] : x;
    cl_conv_geom g = conv_geom_of(op, w, has_bias ? b : NULL);
    cl_mem mx = mem_of(x), mw = mem_of(w), mb = mem_of(b), mo = mem_of(o);
    arg args[] = {ARG(has_bias), ARG(g), ARG(mx), ARG(mw), ARG(mb), ARG(mo)};
    size_t global = (size_t)tf_desc_numel(o);
    return launch(d, d->kernel[o->dtype][K_CONV2D], "conv2d", 6, args, 1, &global, NULL);
}

static tf_status run_pool(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    cl_conv_geom g = conv_geom_of(op, NULL, NULL);
    cl_int is_max = op->kind == TF_OP_MAXPOOL2D, count_pad = (op->params.flags & TF_POOL_COUNT_PAD) != 0;
    cl_mem mx = mem_of(x), mo = mem_of(o);
    arg args[] = {ARG(is_max), ARG(count_pad), ARG(g), ARG(mx), ARG(mo)};
    size_t global = (size_t)tf_desc_numel(o);
    return launch(d, d->kernel[o->dtype][K_POOL2D], "pool2d", 5, args, 1, &global, NULL);
}

static tf_status run_adam(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *ops[4] = {&op->inputs[0], &op->inputs[1], &op->inputs[2], &op->inputs[3]};
    cl_geom g = make_geom(ops[0]->ndim, ops[0]->shape, ops, 4);
    const tf_op_params *q = &op->params;
    cl_long n = tf_desc_numel(ops[0]);
    wide_arg lr = wide(q->lr), b1 = wide(q->beta1), b2 = wide(q->beta2), eps = wide(q->eps), wd = wide(q->weight_decay),
             c1 = wide(1 - pow(q->beta1, (double)q->adam_step)), c2 = wide(1 - pow(q->beta2, (double)q->adam_step));
    cl_int decoupled = (q->flags & TF_ADAM_DECOUPLED) != 0;
    cl_mem mp = mem_of(ops[0]), mg = mem_of(ops[1]), mm = mem_of(ops[2]), mv = mem_of(ops[3]);
    arg args[] = {ARG(n), ARG(g), WIDE_ARG(d, lr), WIDE_ARG(d, b1), WIDE_ARG(d, b2), WIDE_ARG(d, eps), WIDE_ARG(d, wd),
                  WIDE_ARG(d, c1), WIDE_ARG(d, c2), ARG(decoupled), ARG(mp), ARG(mg), ARG(mm), ARG(mv)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[ops[0]->dtype][K_ADAM], "adam", 14, args, 1, &global, NULL);
}

static tf_status run_copy(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output, *ops[2] = {o, in};
    cl_geom g = make_geom(o->ndim, o->shape, ops, 2);
    cl_int src_dt = in->dtype;
    cl_long n = tf_desc_numel(o);
    cl_mem mo = mem_of(o), mi = mem_of(in);
    arg args[] = {ARG(src_dt), ARG(n), ARG(g), ARG(mo), ARG(mi)};
    size_t global = (size_t)n;
    return launch(d, d->kernel[o->dtype][K_COPY_FROM], "copy_from", 5, args, 1, &global, NULL);
}

/* The element `value` becomes in dtype dt, by the CPU reference's rules. */
static void encode_scalar(tf_dtype dt, double v, unsigned char *out) {
    double lo = 0, hi = 0;
    switch (dt) {
    case TF_F32: { float f = (float)v; memcpy(out, &f, 4); return; }
    case TF_F64: memcpy(out, &v, 8); return;
    case TF_F16: { uint16_t h = tf_f32_to_f16((float)v); memcpy(out, &h, 2); return; }
    case TF_BF16: { uint16_t h = tf_f32_to_bf16((float)v); memcpy(out, &h, 2); return; }
    case TF_BOOL: out[0] = v != 0; return;
    case TF_I8: lo = -128; hi = 127; break;
    case TF_U8: lo = 0; hi = 255; break;
    case TF_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    default: lo = -0x1p63; hi = 0x1p63; break;
    }
    int64_t x = isnan(v) ? 0 : v <= lo ? (int64_t)lo : v >= hi ? (dt == TF_I64 ? INT64_MAX : (int64_t)hi) : (int64_t)v;
    switch (dt) {
    case TF_I8: case TF_U8: out[0] = (unsigned char)x; break;
    case TF_I32: { int32_t y = (int32_t)x; memcpy(out, &y, 4); break; }
    default: memcpy(out, &x, 8); break;
    }
}

static tf_status run_fill(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    unsigned char pattern[8];
    encode_scalar(o->dtype, op->params.value, pattern);
    size_t es = elsize(o->dtype);
    cl_int e = clEnqueueFillBuffer(d->queue, mem_of(o), pattern, es, o->offset, (size_t)tf_desc_numel(o) * es, 0,
                                   NULL, NULL);
    return e == CL_SUCCESS ? TF_OK : cl_fail(d, e, "clEnqueueFillBuffer");
}

static tf_status run_creation(cl_dev *d, const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    cl_long n = tf_desc_numel(o), off = elem_offset(o);
    cl_mem mo = mem_of(o);
    size_t global = (size_t)n;
    if (op->kind == TF_OP_ARANGE) {
        if (d->fp64) {
            cl_double start = op->params.value, step = op->params.step;
            arg args[] = {ARG(n), ARG(start), ARG(step), ARG(mo), ARG(off)};
            return launch(d, d->kernel[o->dtype][K_ARANGE], "arange", 5, args, 1, &global, NULL);
        }
        cl_float start = (cl_float)op->params.value, step = (cl_float)op->params.step;
        arg args[] = {ARG(n), ARG(start), ARG(step), ARG(mo), ARG(off)};
        return launch(d, d->kernel[o->dtype][K_ARANGE], "arange", 5, args, 1, &global, NULL);
    }
    cl_int normal = op->kind == TF_OP_RAND_NORMAL;
    cl_ulong seed = op->params.seed;
    arg args[] = {ARG(normal), ARG(n), ARG(seed), ARG(mo), ARG(off)};
    return launch(d, d->kernel[o->dtype][K_RAND], "rand", 5, args, 1, &global, NULL);
}

static bool dtype_ok(const cl_dev *d, tf_dtype dt) { return dt != TF_F64 || d->fp64; }

static bool cl_supports(void *ctx, const tf_op *op) {
    cl_dev *d = ctx;
    if (!dtype_ok(d, op->output.dtype)) return false;
    for (int i = 0; i < op->n_inputs; i++)
        if (!dtype_ok(d, op->inputs[i].dtype)) return false;
    switch (op->kind) {
    case TF_OP_ADD: case TF_OP_SUB: case TF_OP_MUL: case TF_OP_DIV: case TF_OP_MAXIMUM: case TF_OP_MINIMUM:
    case TF_OP_POW: case TF_OP_MATMUL: case TF_OP_GEMM: case TF_OP_SUM: case TF_OP_MEAN: case TF_OP_COPY: case TF_OP_FILL:
    case TF_OP_ARANGE: case TF_OP_RAND_UNIFORM: case TF_OP_RAND_NORMAL:
        return true;
    case TF_OP_EQ: case TF_OP_NE: case TF_OP_LT: case TF_OP_LE: case TF_OP_GT: case TF_OP_GE:
    case TF_OP_LOGICAL_AND: case TF_OP_LOGICAL_OR: case TF_OP_LOGICAL_NOT: case TF_OP_ISNAN: case TF_OP_ISINF:
    case TF_OP_WHERE: case TF_OP_MAX: case TF_OP_MIN: case TF_OP_ARGMAX: case TF_OP_ARGMIN: case TF_OP_PROD:
    case TF_OP_VAR: case TF_OP_STD: case TF_OP_LOGSUMEXP: case TF_OP_CUMSUM: case TF_OP_TRIL: case TF_OP_TRIU:
        return true;
    case TF_OP_INDEX_SELECT: case TF_OP_GATHER:
        return op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64;
    case TF_OP_SOFTMAX: case TF_OP_LOG_SOFTMAX: case TF_OP_RMSNORM: case TF_OP_LAYERNORM: case TF_OP_ROPE:
    case TF_OP_SWIGLU:
        return dt_is_float(op->output.dtype);
    case TF_OP_SDPA: return dt_is_float(op->output.dtype) && op->inputs[2].shape[3] <= MAX_DV;
    case TF_OP_CONV2D: case TF_OP_MAXPOOL2D: case TF_OP_AVGPOOL2D: case TF_OP_ADAM: return dt_is_float(op->output.dtype);
    default:
        return is_unary(op->kind) && dt_is_float(op->output.dtype);
    }
}

/* The dtype whose program holds the op's kernel. */
static tf_dtype program_dtype(const tf_op *op) {
    bool by_input = op->kind == TF_OP_SUM || op->kind == TF_OP_MEAN || is_compare(op->kind) ||
                    op->kind == TF_OP_LOGICAL_NOT || op->kind == TF_OP_ISNAN || op->kind == TF_OP_ISINF ||
                    (op->kind >= TF_OP_MAX && op->kind <= TF_OP_CUMSUM);
    return by_input ? op->inputs[0].dtype : op->output.dtype;
}

static tf_status cl_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    (void)stream;
    cl_dev *d = ctx;
    if (op->kind == TF_OP_FILL) return run_fill(d, op);
    tf_dtype dt = program_dtype(op);
    pthread_mutex_lock(&d->lock);
    tf_status s = ensure_program(d, dt);
    if (s == TF_OK) {
        switch (op->kind) {
        case TF_OP_MATMUL: case TF_OP_GEMM: s = run_matmul(d, op); break;
        case TF_OP_SUM: case TF_OP_MEAN: case TF_OP_MAX: case TF_OP_MIN: case TF_OP_ARGMAX: case TF_OP_ARGMIN:
        case TF_OP_PROD: case TF_OP_VAR: case TF_OP_STD: case TF_OP_LOGSUMEXP:
            s = run_reduce(d, op);
            break;
        case TF_OP_CUMSUM: s = run_cumsum(d, op); break;
        case TF_OP_INDEX_SELECT: case TF_OP_GATHER: s = run_index_pick(d, op); break;
        case TF_OP_TRIL: case TF_OP_TRIU: s = run_triangle(d, op); break;
        case TF_OP_SOFTMAX: case TF_OP_LOG_SOFTMAX: case TF_OP_RMSNORM: case TF_OP_LAYERNORM: s = run_row_op(d, op); break;
        case TF_OP_ROPE: s = run_rope(d, op); break;
        case TF_OP_SDPA: s = run_sdpa(d, op); break;
        case TF_OP_CONV2D: s = run_conv2d(d, op); break;
        case TF_OP_MAXPOOL2D: case TF_OP_AVGPOOL2D: s = run_pool(d, op); break;
        case TF_OP_ADAM: s = run_adam(d, op); break;
        case TF_OP_COPY: s = run_copy(d, op); break;
        case TF_OP_ARANGE: case TF_OP_RAND_UNIFORM: case TF_OP_RAND_NORMAL: s = run_creation(d, op); break;
        case TF_OP_LOGICAL_NOT: case TF_OP_ISNAN: case TF_OP_ISINF: s = run_bool_unary(d, op); break;
        case TF_OP_WHERE: s = run_where(d, op); break;
        default:                                 /* binary ops, SWIGLU included */
            s = is_unary(op->kind) ? run_unary(d, op) : is_compare(op->kind) ? run_compare(d, op) : run_binary(d, op);
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    return s;
}

static const tf_device_iface cl_device_iface = {
    .abi_major = TF_BACKEND_ABI_MAJOR,
    .abi_minor = TF_BACKEND_ABI_MINOR,
    .get_info = cl_get_info,
    .buffer_alloc = cl_buffer_alloc,
    .buffer_free = cl_buffer_free,
    .buffer_upload = cl_upload,
    .buffer_download = cl_download,
    .buffer_copy = cl_copy,
    .supports = cl_supports,
    .run = cl_run,
    .synchronize = cl_synchronize,
};

/* ---- discovery ---- */

static int pow2_at_most(size_t n, int cap) {
    int p = 1;
    while ((size_t)(p * 2) <= n && p * 2 <= cap) p *= 2;
    return p;
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
    cl_int e;
    d->context = clCreateContext(NULL, 1, &id, NULL, NULL, &e);
    if (e != CL_SUCCESS) return false;
    d->queue = clCreateCommandQueue(d->context, id, 0, &e);
    if (e != CL_SUCCESS) {
        clReleaseContext(d->context);
        return false;
    }
    pthread_mutex_init(&d->lock, NULL);
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
    if (device < 0 || device >= n_devs || !out)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "tf_opencl_stats: no device %d", device);
    pthread_mutex_lock(&devs[device].lock);
    *out = devs[device].stats;
    pthread_mutex_unlock(&devs[device].lock);
    return TF_OK;
}

static tf_status set_build_options(const char *options) {
    snprintf(extra_build_options, sizeof extra_build_options, "%s", options ? options : "");
    for (int i = 0; i < n_devs; i++) {          /* failed builds get another try */
        pthread_mutex_lock(&devs[i].lock);
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++)
            if (devs[i].state[dt] == PROGRAM_FAILED) devs[i].state[dt] = PROGRAM_NONE;
        pthread_mutex_unlock(&devs[i].lock);
    }
    return TF_OK;
}

static void *cl_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    if (!strcmp(name, "tf_opencl_stats")) return (void *)(tf_opencl_stats_fn)get_stats;
    if (!strcmp(name, "tf_opencl_set_build_options")) return (void *)(tf_opencl_set_build_options_fn)set_build_options;
    return NULL;
}

static void cl_shutdown(void *ctx) {
    (void)ctx;
    for (int i = 0; i < n_devs; i++) {
        cl_dev *d = &devs[i];
        clFinish(d->queue);
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
            for (int k = 0; k < K_COUNT; k++)
                if (d->kernel[dt][k]) clReleaseKernel(d->kernel[dt][k]);
            if (d->program[dt]) clReleaseProgram(d->program[dt]);
        }
        clReleaseCommandQueue(d->queue);
        clReleaseContext(d->context);
        pthread_mutex_destroy(&d->lock);
    }
    n_devs = 0;
    extra_build_options[0] = 0;
}

static const tf_backend_iface cl_backend_iface = {
    .abi_major = TF_BACKEND_ABI_MAJOR,
    .abi_minor = TF_BACKEND_ABI_MINOR,
    .shutdown = cl_shutdown,
    .get_proc_address = cl_get_proc_address,
};

__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    n_devs = 0;
    note[0] = 0;
    discover();
    memset(out, 0, sizeof *out);
    out->abi_major = TF_BACKEND_ABI_MAJOR;
    out->abi_minor = TF_BACKEND_ABI_MINOR;
    out->name = "opencl";
    out->iface = &cl_backend_iface;
    out->device_count = n_devs;
    out->devices = bdevs;
    out->note = note;
    return TF_OK;
}
