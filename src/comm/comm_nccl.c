/* NCCL behind comm_nccl.h. Loaded with dlopen (libnccl.so.2, or the file
 * TF_NCCL_LIBRARY names; the driver's libcuda.so.1), the entry points
 * typed from nccl.h and cuda.h, so a header change is a compile error
 * here and a machine without CUDA simply has no NCCL route. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorframe/backend.h"

#define FAIL(s, ...) tf_host()->set_error((s), __VA_ARGS__)

#ifndef TF_HAVE_NCCL

int tf__nccl_version(void) { return 0; }
bool tf__nccl_usable(void) { return false; }
const char *tf__nccl_why(void) { return "libtensorframe_mpi was built without NCCL (nccl.h was not found)"; }
tf_status tf__nccl_unique_id(unsigned char id[TF_NCCL_ID_BYTES]) {
    (void)id;
    return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
}
tf_status tf__nccl_create(const unsigned char id[TF_NCCL_ID_BYTES], int rank, int size, int ordinal, tf_nccl **out) {
    (void)id, (void)rank, (void)size, (void)ordinal, (void)out;
    return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
}
int tf__nccl_device(const tf_nccl *n) { (void)n; return -1; }
void tf__nccl_destroy(tf_nccl *n, bool abort) { (void)n, (void)abort; }
tf_status tf__nccl_enqueue(tf_nccl *n, const tf_nccl_call *call, void *stream) {
    (void)n, (void)call, (void)stream;
    return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
}
tf_status tf__nccl_wait(tf_nccl *n, void *stream, double timeout_s) {
    (void)n, (void)stream, (void)timeout_s;
    return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
}

#else

#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <time.h>

/* Every entry point used, typed from the headers. */
#define NCCL_CALLS(X)                                                                                    \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort)         \
    X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter) \
    X(ncclBroadcast) X(ncclSend) X(ncclRecv)
#define CUDA_CALLS(X) X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent) X(cuCtxSetCurrent) \
    X(cuStreamQuery)

static struct {
#define SLOT(f) __typeof__(f) *f;
    NCCL_CALLS(SLOT) CUDA_CALLS(SLOT)
#undef SLOT
    int version;
    char why[256];
} api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static bool resolve(void *lib, const char *name, void **slot) {
    *slot = dlsym(lib, name);
    if (!*slot) snprintf(api.why, sizeof api.why, "%s lacks %s", name[0] == 'n' ? "NCCL" : "libcuda", name);
    return *slot != NULL;
}

static void load(void) {
    const char *path = tf_host()->env_string("TF_NCCL_LIBRARY");
    void *nccl = dlopen(path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!nccl) {
        snprintf(api.why, sizeof api.why, "NCCL did not load (%s)", dlerror());
        return;
    }
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    bool ok = true;
#define NCCL_SYM(f) ok = ok && resolve(nccl, #f, (void **)&api.f);
#define CUDA_SYM(f) ok = ok && cuda && resolve(cuda, #f, (void **)&api.f);
    NCCL_CALLS(NCCL_SYM)
    if (ok && !cuda) {
        /* NCCL without a driver: it loads, but no collective can run */
        int v = 0;
        if (api.ncclGetVersion(&v) == ncclSuccess) api.version = v;
        snprintf(api.why, sizeof api.why, "NCCL %d loaded, but the CUDA driver (libcuda.so.1) did not", v);
        return;
    }
    CUDA_CALLS(CUDA_SYM)
#undef NCCL_SYM
#undef CUDA_SYM
    int v = 0;
    if (ok && api.ncclGetVersion(&v) == ncclSuccess) api.version = v;
    if (ok && api.cuInit(0) != CUDA_SUCCESS) snprintf(api.why, sizeof api.why, "cuInit failed: no usable GPU");
}

int tf__nccl_version(void) {
    pthread_once(&load_once, load);
    return api.version;
}

const char *tf__nccl_why(void) {
    pthread_once(&load_once, load);
    return api.why[0] ? api.why : "NCCL is loaded";
}

bool tf__nccl_usable(void) { return tf__nccl_version() > 0 && api.cuStreamQuery && !api.why[0]; }

static bool usable(void) { return tf__nccl_usable(); }

static tf_status nccl_failed(ncclResult_t r, const char *what) {
    return FAIL(r == ncclInvalidUsage || r == ncclInvalidArgument ? TF_ERR_INVALID_ARGUMENT : TF_ERR_BACKEND,
                "NCCL %s: %s", what, api.ncclGetErrorString(r));
}

struct tf_nccl {
    ncclComm_t comm;
    int ordinal;
    CUcontext ctx;                          /* the device's primary context, as the CUDA runtime uses */
};

/* Make n's device current for the NCCL calls; *prev restores it. */
static tf_status enter(const tf_nccl *n, CUcontext *prev) {
    if (api.cuCtxGetCurrent(prev) != CUDA_SUCCESS || api.cuCtxSetCurrent(n->ctx) != CUDA_SUCCESS)
        return FAIL(TF_ERR_BACKEND, "NCCL: cannot make cuda:%d current", n->ordinal);
    return TF_OK;
}

tf_status tf__nccl_unique_id(unsigned char id[TF_NCCL_ID_BYTES]) {
    if (!usable()) return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
    ncclUniqueId u;
    ncclResult_t r = api.ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_failed(r, "ncclGetUniqueId");
    memcpy(id, u.internal, TF_NCCL_ID_BYTES);
    return TF_OK;
}

tf_status tf__nccl_create(const unsigned char id[TF_NCCL_ID_BYTES], int rank, int size, int ordinal, tf_nccl **out) {
    if (!usable()) return FAIL(TF_ERR_UNSUPPORTED, "%s", tf__nccl_why());
    tf_nccl *n = tf_host()->alloc(sizeof *n);
    if (!n) return FAIL(TF_ERR_OUT_OF_MEMORY, "NCCL: out of host memory");
    memset(n, 0, sizeof *n);
    n->ordinal = ordinal;
    CUdevice dev;
    if (api.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS || api.cuDevicePrimaryCtxRetain(&n->ctx, dev) != CUDA_SUCCESS) {
        tf_host()->free(n);
        return FAIL(TF_ERR_BACKEND, "NCCL: no context for cuda:%d", ordinal);
    }
    CUcontext prev;
    tf_status s = enter(n, &prev);
    if (s == TF_OK) {
        ncclUniqueId u;
        memcpy(u.internal, id, TF_NCCL_ID_BYTES);
        ncclResult_t r = api.ncclCommInitRank(&n->comm, size, u, rank);
        if (r != ncclSuccess) s = nccl_failed(r, "ncclCommInitRank");
        api.cuCtxSetCurrent(prev);
    }
    if (s != TF_OK) {
        tf_host()->free(n);
        return s;
    }
    *out = n;
    return TF_OK;
}

int tf__nccl_device(const tf_nccl *n) { return n ? n->ordinal : -1; }

void tf__nccl_destroy(tf_nccl *n, bool abort) {
    if (!n) return;
    CUcontext prev;
    if (enter(n, &prev) == TF_OK) {
        (abort ? api.ncclCommAbort : api.ncclCommDestroy)(n->comm);
        api.cuCtxSetCurrent(prev);
    }
    tf_host()->free(n);
}

static bool nccl_type_of(tf_dtype dt, ncclDataType_t *t) {
    switch (dt) {
    case TF_F32: *t = ncclFloat32; return true;
    case TF_F64: *t = ncclFloat64; return true;
    case TF_F16: *t = ncclFloat16; return true;
    case TF_BF16: *t = ncclBfloat16; return true;
    case TF_I8: *t = ncclInt8; return true;
    case TF_I32: *t = ncclInt32; return true;
    case TF_I64: *t = ncclInt64; return true;
    case TF_U8: case TF_BOOL: *t = ncclUint8; return true;
    default: return false;
    }
}

static ncclRedOp_t nccl_op_of(tf_reduce_op op) {
    return op == TF_REDUCE_MAX ? ncclMax : op == TF_REDUCE_MIN ? ncclMin : op == TF_REDUCE_MEAN ? ncclAvg : ncclSum;
}

tf_status tf__nccl_enqueue(tf_nccl *n, const tf_nccl_call *c, void *stream) {
    ncclDataType_t t;
    if (!nccl_type_of(c->dtype, &t)) return FAIL(TF_ERR_DTYPE, "NCCL: %s cannot travel", tf_dtype_name(c->dtype));
    CUcontext prev;
    tf_status s = enter(n, &prev);
    if (s != TF_OK) return s;
    cudaStream_t st = (cudaStream_t)stream;
    ncclResult_t r = ncclSuccess;
    switch (c->kind) {
    case TF_NCCL_ALL_REDUCE: r = api.ncclAllReduce(c->send, c->recv, c->count, t, nccl_op_of(c->op), n->comm, st); break;
    case TF_NCCL_ALL_GATHER: r = api.ncclAllGather(c->send, c->recv, c->count, t, n->comm, st); break;
    case TF_NCCL_REDUCE_SCATTER:
        r = api.ncclReduceScatter(c->send, c->recv, c->count, t, nccl_op_of(c->op), n->comm, st);
        break;
    case TF_NCCL_BROADCAST: r = api.ncclBroadcast(c->send, c->recv, c->count, t, c->peer, n->comm, st); break;
    case TF_NCCL_SEND: r = api.ncclSend(c->send, c->count, t, c->peer, n->comm, st); break;
    case TF_NCCL_RECV: r = api.ncclRecv(c->recv, c->count, t, c->peer, n->comm, st); break;
    }
    api.cuCtxSetCurrent(prev);
    return r == ncclSuccess ? TF_OK : nccl_failed(r, "enqueue");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tf_status tf__nccl_wait(tf_nccl *n, void *stream, double timeout_s) {
    double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
    CUcontext prev;
    tf_status s = enter(n, &prev);
    if (s != TF_OK) return s;
    for (unsigned spin = 1;; spin++) {
        CUresult q = api.cuStreamQuery((CUstream)stream);
        if (q == CUDA_SUCCESS) break;
        if (q != CUDA_ERROR_NOT_READY) {
            s = FAIL(TF_ERR_BACKEND, "NCCL: the stream failed (CUDA error %d)", (int)q);
            break;
        }
        ncclResult_t async = ncclSuccess;
        if (spin % 1024 == 0 && api.ncclCommGetAsyncError(n->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            s = nccl_failed(async, "asynchronous error");
            break;
        }
        if (deadline && spin % 64 == 0 && now_s() > deadline) {
            s = FAIL(TF_ERR_TIMEOUT, "NCCL: the collective did not finish within %g s: another rank died, hangs, "
                     "or never made this call", timeout_s);
            break;
        }
    }
    api.cuCtxSetCurrent(prev);
    return s;
}

#endif
