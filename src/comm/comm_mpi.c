/* Collectives over MPI (tensorframe/comm.h), on the public API only: a
 * tensor's host memory comes from its DLPack export (no copy for a
 * contiguous CPU tensor), other tensors are staged through a contiguous
 * CPU copy and written back with tf_copy_into. Errors go to
 * tf_last_error() through the host services (tf_host()->set_error). */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>                /* Open MPI: MPIX_Query_cuda_support */
#endif
#endif

#include "comm_nccl.h"
#include "tensorframe/backend.h"
#include "tensorframe/comm.h"
#include "tensorframe/dlpack.h"
#include "tensorframe/numerics.h"

/* A tensor's elements as contiguous host memory: its own when it is a
 * contiguous host tensor, else a staged CPU copy. */
typedef struct host_view {
    tf_tensor *staged;                   /* the CPU copy, or NULL */
    DLManagedTensorVersioned *export_;   /* keeps the memory while MPI uses it */
    void *data;
} host_view;

enum { AGREE_N = 4 + TF_MAX_DIMS };

/* How a tensor's data travels: its host memory (or a staged host copy)
 * through MPI; a CUDA tensor through NCCL; or its device memory through
 * an MPI that reads device memory itself (CUDA-aware). */
typedef enum route { ROUTE_HOST = 0, ROUTE_NCCL = 1, ROUTE_CUDA_MPI = 2 } route;

/* What a call that timed out leaves with MPI: a request that a late peer
 * may still complete, reading or writing the view's memory, which so
 * outlives the call (and the communicator, unless the request is done). */
typedef struct abandoned {
    MPI_Request req;
    host_view view;
} abandoned;

struct tf_comm {
    MPI_Comm comm;
    int rank, size;
    bool finalize;          /* made by tf_comm_init, which initialized MPI */
    double timeout_s;       /* how long a call waits for the others; 0: for ever */
    bool broken;            /* a call timed out: MPI's state is unknown */
    abandoned left;         /* what that call left with MPI */
    tf_stream *stream;      /* tf_comm_set_stream; NULL: blocking */
    tf_nccl *nccl;          /* made at the first collective of CUDA tensors */
    /* The agreement's buffers live here, not on the stack: a timed-out
     * agreement leaves them with MPI. */
    int64_t agree_in[2 * AGREE_N], agree_out[2 * AGREE_N];
    unsigned char nccl_id[1 + TF_NCCL_ID_BYTES];   /* rank 0's NCCL id, broadcast (the same reason) */
};

static int comms_that_finalize;

#define FAIL(s, ...) tf_host()->set_error((s), __VA_ARGS__)

static tf_status mpi_failed(int rc, const char *fn, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return FAIL(TF_ERR_BACKEND, "%s: %s failed: %s", fn, what, msg);
}

/* s with what failed before it: the library's message is copied first,
 * since set_error writes the buffer last_error reads. */
static tf_status failed_while(tf_status s, const char *fn, const char *what) {
    char cause[512];
    snprintf(cause, sizeof cause, "%s", tf_host()->last_error());
    return FAIL(s, "%s: %s: %s", fn, what, cause);
}

/* ---- communicators ---- */

enum { DEFAULT_TIMEOUT_S = 600 };     /* PyTorch's default for NCCL, too */

/* TF_COMM_TIMEOUT in seconds (0: wait for ever), within tf_comm_set_timeout's
 * limits, else the default. */
static double timeout_from_env(void) {
    double v;
    return tf_host()->env_number("TF_COMM_TIMEOUT", 0, 1e9, &v) ? v : DEFAULT_TIMEOUT_S;
}

static tf_status comm_from(MPI_Comm base, bool finalize, tf_comm **out) {
    tf_comm *c = tf_host()->alloc(sizeof *c);
    if (!c) return FAIL(TF_ERR_OUT_OF_MEMORY, "tf_comm_init: out of host memory");
    memset(c, 0, sizeof *c);
    c->timeout_s = timeout_from_env();
    c->left.req = MPI_REQUEST_NULL;
    int rc = MPI_Comm_dup(base, &c->comm);
    if (rc != MPI_SUCCESS) {
        tf_host()->free(c);
        return mpi_failed(rc, "tf_comm_init", "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);   /* errors come back as statuses */
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    c->finalize = finalize;
    comms_that_finalize += finalize;
    *out = c;
    return TF_OK;
}

tf_status tf_comm_init(tf_comm **out) {
    if (!out) return FAIL(TF_ERR_NULL_ARGUMENT, "tf_comm_init: out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return FAIL(TF_ERR_INVALID_ARGUMENT, "tf_comm_init: MPI was finalized already");
    bool ours = false;
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_failed(rc, "tf_comm_init", "MPI_Init_thread");
        ours = true;
    } else {
        ours = comms_that_finalize > 0;          /* MPI that an earlier tf_comm_init started */
    }
    return comm_from(MPI_COMM_WORLD, ours, out);
}

tf_status tf_comm_init_mpi(MPI_Comm comm, tf_comm **out) {
    if (!out) return FAIL(TF_ERR_NULL_ARGUMENT, "tf_comm_init_mpi: out is NULL");
    *out = NULL;
    if (comm == MPI_COMM_NULL) return FAIL(TF_ERR_INVALID_ARGUMENT, "tf_comm_init_mpi: MPI_COMM_NULL");
    return comm_from(comm, false, out);
}

static void host_view_release(host_view *v);

/* True when what a timed-out call left with MPI is done with (a late
 * peer finished it), its buffers released; false leaves them to MPI. */
static bool abandoned_settled(abandoned *a) {
    int done = 1;
    if (a->req != MPI_REQUEST_NULL && (MPI_Test(&a->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done))
        return false;
    host_view_release(&a->view);
    return true;
}

void tf_comm_destroy(tf_comm *c) {
    if (!c) return;
    /* After a timeout, MPI may still write into the abandoned buffers, and
     * an operation still pending on a freed communicator crashes Open MPI
     * 4.1's progress engine (MPI says it should complete): the buffers,
     * the communicator and MPI itself (MPI_Finalize would wait) are left
     * alone unless the abandoned request is done. */
    bool settled = !c->broken || abandoned_settled(&c->left);
    bool finalize = c->finalize && --comms_that_finalize == 0 && settled;
    if (!settled) return;
    tf__nccl_destroy(c->nccl, false);
    MPI_Comm_free(&c->comm);
    tf_host()->free(c);
    if (finalize) MPI_Finalize();
}

int tf_comm_rank(const tf_comm *c) { return c ? c->rank : -1; }
int tf_comm_size(const tf_comm *c) { return c ? c->size : -1; }

tf_status tf_comm_set_timeout(tf_comm *c, double seconds) {
    if (!c) return FAIL(TF_ERR_NULL_ARGUMENT, "tf_comm_set_timeout: communicator is NULL");
    if (!(seconds >= 0) || seconds > 1e9)
        return FAIL(TF_ERR_INVALID_ARGUMENT, "tf_comm_set_timeout: %g s; give seconds in [0, 1e9] (0: no limit)",
                    seconds);
    c->timeout_s = seconds;
    return TF_OK;
}

double tf_comm_timeout(const tf_comm *c) { return c ? c->timeout_s : -1; }

tf_status tf_comm_set_stream(tf_comm *c, tf_stream *stream) {
    if (!c) return FAIL(TF_ERR_NULL_ARGUMENT, "tf_comm_set_stream: communicator is NULL");
    c->stream = stream;
    return TF_OK;
}

int tf_comm_nccl_version(void) { return tf__nccl_version(); }

void tf_comm_abort(tf_comm *c, int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(c ? c->comm : MPI_COMM_WORLD, code);
    exit(code);                                  /* no MPI: this process is the job */
}

/* ---- waiting, with a limit ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static tf_status timed_out(const char *fn, const tf_comm *c, const char *what) {
    return FAIL(TF_ERR_TIMEOUT, "%s: rank %d waited %g s in %s for the other ranks: one of them died, hangs, or "
                "never made this call (the limit: TF_COMM_TIMEOUT, tf_comm_set_timeout)", fn, c->rank,
                c->timeout_s, what);
}

/* Wait for *req (MPI_Test in a loop, as MPI_Wait spins) until it is done
 * or the communicator's timeout passes. A timeout breaks the communicator
 * and keeps the request in c->left; the caller adds the buffers it holds
 * (abandon), for MPI may still use them. */
static tf_status await(const char *fn, tf_comm *c, MPI_Request *req, MPI_Status *st, const char *what) {
    double deadline = c->timeout_s > 0 ? now_s() + c->timeout_s : 0;
    for (unsigned spin = 1;; spin++) {
        int done = 0;
        int rc = MPI_Test(req, &done, st ? st : MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_failed(rc, fn, what);
        if (done) return TF_OK;
        if (deadline && spin % 64 == 0 && now_s() > deadline) {
            c->broken = true;
            c->left.req = *req;
            return timed_out(fn, c, what);
        }
    }
}

/* Hand the memory a timed-out call lent MPI to the communicator; returns s. */
static tf_status abandon(tf_comm *c, tf_status s, const host_view *v) {
    c->left.view = *v;
    return s;
}

/* ---- dtypes and reductions ---- */

/* f16 and bf16 travel as 16-bit words; their reductions are ours. */
static bool mpi_type_of(tf_dtype dt, MPI_Datatype *t) {
    switch (dt) {
    case TF_F32: *t = MPI_FLOAT; return true;
    case TF_F64: *t = MPI_DOUBLE; return true;
    case TF_I8: *t = MPI_INT8_T; return true;
    case TF_I32: *t = MPI_INT32_T; return true;
    case TF_I64: *t = MPI_INT64_T; return true;
    case TF_U8: case TF_BOOL: *t = MPI_UINT8_T; return true;
    case TF_F16: case TF_BF16: *t = MPI_UINT16_T; return true;
    default: return false;
    }
}

typedef float (*to_f32_fn)(uint16_t);
typedef uint16_t (*from_f32_fn)(float);

static void half_reduce(void *in, void *inout, int n, tf_reduce_op op, to_f32_fn to, from_f32_fn from) {
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < n; i++) {
        float x = to(a[i]), y = to(b[i]), r;
        if (op == TF_REDUCE_MAX) r = (x > y || x != x) ? x : y;      /* NaN propagates */
        else if (op == TF_REDUCE_MIN) r = (x < y || x != x) ? x : y;
        else r = x + y;
        b[i] = from(r);
    }
}

#define HALF_OP(name, op, to, from) \
    static void name(void *in, void *inout, int *n, MPI_Datatype *t) { (void)t; half_reduce(in, inout, *n, op, to, from); }
HALF_OP(f16_sum, TF_REDUCE_SUM, tf_f16_to_f32, tf_f32_to_f16)
HALF_OP(f16_max, TF_REDUCE_MAX, tf_f16_to_f32, tf_f32_to_f16)
HALF_OP(f16_min, TF_REDUCE_MIN, tf_f16_to_f32, tf_f32_to_f16)
HALF_OP(bf16_sum, TF_REDUCE_SUM, tf_bf16_to_f32, tf_f32_to_bf16)
HALF_OP(bf16_max, TF_REDUCE_MAX, tf_bf16_to_f32, tf_f32_to_bf16)
HALF_OP(bf16_min, TF_REDUCE_MIN, tf_bf16_to_f32, tf_f32_to_bf16)

static MPI_User_function *const half_ops[2][3] = {{f16_sum, f16_max, f16_min}, {bf16_sum, bf16_max, bf16_min}};

/* The MPI operation for op on dt; *made is set when the caller must free it. */
static tf_status mpi_op_of(const char *fn, tf_dtype dt, tf_reduce_op op, MPI_Op *out, bool *made) {
    *made = false;
    if (op < TF_REDUCE_SUM || op > TF_REDUCE_MEAN) return FAIL(TF_ERR_INVALID_ARGUMENT, "%s: reduce op %d", fn, op);
    if (op == TF_REDUCE_MEAN && !tf_dtype_is_float(dt))
        return FAIL(TF_ERR_DTYPE, "%s: mean of %s; mean takes float dtypes", fn, tf_dtype_name(dt));
    if (dt == TF_BOOL && op == TF_REDUCE_SUM)
        return FAIL(TF_ERR_DTYPE, "%s: sum of bool; use max (any) or min (all)", fn);
    int which = op == TF_REDUCE_MAX ? 1 : op == TF_REDUCE_MIN ? 2 : 0;
    if (dt == TF_F16 || dt == TF_BF16) {
        int rc = MPI_Op_create(half_ops[dt == TF_BF16][which], 1, out);
        if (rc != MPI_SUCCESS) return mpi_failed(rc, fn, "MPI_Op_create");
        *made = true;
        return TF_OK;
    }
    *out = which == 1 ? MPI_MAX : which == 2 ? MPI_MIN : MPI_SUM;
    return TF_OK;
}

/* x /= by with tensorframe's ops, where x's memory is the device's. */
static tf_status divide_on_device(const char *fn, tf_tensor *x, int by) {
    tf_tensor *k = NULL, *q = NULL;
    tf_status s = tf_scalar(tf_tensor_device(x), tf_tensor_dtype(x), (double)by, &k);
    if (s == TF_OK) s = tf_div(x, k, &q);
    if (s == TF_OK) s = tf_copy_into(x, q);
    tf_tensor_release(k);
    tf_tensor_release(q);
    return s == TF_OK ? TF_OK : failed_while(s, fn, "dividing for the mean");
}

/* Divide n elements by `by`, for mean. */
static void scale_down(void *p, tf_dtype dt, int64_t n, int by) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case TF_F32: ((float *)p)[i] /= (float)by; break;
        case TF_F64: ((double *)p)[i] /= by; break;
        case TF_F16: ((uint16_t *)p)[i] = tf_f32_to_f16(tf_f16_to_f32(((uint16_t *)p)[i]) / (float)by); break;
        case TF_BF16: ((uint16_t *)p)[i] = tf_f32_to_bf16(tf_bf16_to_f32(((uint16_t *)p)[i]) / (float)by); break;
        default: return;
        }
    }
}

/* ---- routes ---- */

static bool cuda_aware_mpi(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() == 1;
#else
    return false;
#endif
}

/* NCCL unless TF_COMM_NCCL=0 (then CUDA tensors take the MPI routes). */
static bool nccl_wanted(void) {
    return tf_host()->env_flag("TF_COMM_NCCL", true) && tf__nccl_usable();
}

/* A contiguous CUDA tensor: NCCL, else a CUDA-aware MPI, else staged;
 * everything else: host memory (staged when it is not host memory). */
static route route_of(const tf_tensor *x) {
    void *p = NULL;
    DLDevice d = {kDLCPU, 0};
    if (!x || !tf_tensor_is_contiguous(x)) return ROUTE_HOST;
    char saved[512];                                 /* a refused query must not leave its message */
    snprintf(saved, sizeof saved, "%s", tf_host()->last_error());
    tf_status s = tf_tensor_native_memory(x, &p, &d);
    tf_host()->set_error(TF_OK, "%s", saved);
    if (s != TF_OK || d.device_type != kDLCUDA) return ROUTE_HOST;
    if (nccl_wanted()) return ROUTE_NCCL;
    return cuda_aware_mpi() ? ROUTE_CUDA_MPI : ROUTE_HOST;
}

/* ---- the stream a call queues on ---- */

/* With tf_comm_set_stream, x's device's current stream is the
 * communicator's for the call (staging and write-back queue there);
 * stream_leave restores it. */
static tf_status stream_enter(const char *fn, tf_comm *c, const tf_tensor *x, tf_stream **prev) {
    *prev = NULL;
    if (!c->stream || !x) return TF_OK;
    tf_device *dev = tf_tensor_device(x);
    if (tf_stream_device(c->stream) != dev)
        return FAIL(TF_ERR_DEVICE_MISMATCH, "%s: the tensor is on %s, the communicator's stream on %s", fn,
                    tf_device_name(dev), tf_device_name(tf_stream_device(c->stream)));
    *prev = tf_stream_current(dev);
    return tf_stream_set_current(c->stream);
}

static void stream_leave(tf_stream *prev) {
    if (prev) tf_stream_set_current(prev);
}

/* ---- host memory for a tensor ---- */

/* x's own memory when it is contiguous host memory (a DLPack export as
 * kDLCPU; device memory is exported too, as kDLCUDA say, and let go). */
static bool export_host(const tf_tensor *x, DLManagedTensorVersioned **out) {
    *out = NULL;
    if (!tf_tensor_is_contiguous(x) || tf_tensor_to_dlpack(x, out) != TF_OK) return false;
    if ((*out)->dl_tensor.device.device_type == kDLCPU) return true;
    (*out)->deleter(*out);
    *out = NULL;
    return false;
}

/* x's device memory for a CUDA-aware MPI, once the work queued on it is done. */
static tf_status device_view_open(const char *fn, const tf_tensor *x, host_view *v) {
    DLDevice d;
    tf_status s = tf_stream_synchronize(tf_stream_current(tf_tensor_device(x)));
    if (s == TF_OK) s = tf_tensor_native_memory(x, &v->data, &d);
    return s == TF_OK ? TF_OK : failed_while(s, fn, "reaching the device memory");
}

static tf_status host_view_open(const char *fn, const tf_tensor *x, host_view *v) {
    memset(v, 0, sizeof *v);
    if (route_of(x) == ROUTE_CUDA_MPI) return device_view_open(fn, x, v);
    if (!export_host(x, &v->export_)) {
        tf_device *cpu = NULL;
        tf_status s = tf_device_get("cpu", &cpu);
        tf_tensor *moved = NULL;
        if (s == TF_OK) s = tf_tensor_to(x, cpu, &moved);
        if (s == TF_OK) {
            s = tf_contiguous(moved, &v->staged);
            tf_tensor_release(moved);
        }
        if (s == TF_OK) s = tf_tensor_to_dlpack(v->staged, &v->export_);
        if (s != TF_OK) {
            tf_tensor_release(v->staged);
            v->staged = NULL;
            return failed_while(s, fn, "staging the tensor in host memory");
        }
    }
    v->data = (char *)v->export_->dl_tensor.data + v->export_->dl_tensor.byte_offset;
    return TF_OK;
}

static void host_view_release(host_view *v) {
    if (v->export_) v->export_->deleter(v->export_);
    tf_tensor_release(v->staged);
    memset(v, 0, sizeof *v);
}

/* Write a staged result back into x (on its device); then let go. */
static tf_status host_view_close(const char *fn, host_view *v, tf_tensor *write_back) {
    tf_status s = TF_OK;
    if (v->staged && write_back) {
        s = tf_copy_into(write_back, v->staged);
        if (s != TF_OK) s = failed_while(s, fn, "writing the result back");
    }
    host_view_release(v);
    return s;
}

/* ---- agreement: every rank is ready, with the same dtype and shape ---- */

static void shape_text(const int64_t *shape, int ndim, char *out, size_t n) {
    size_t used = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (used < n) snprintf(out + used, n - used, "]");
}

/* The step before any data moves, taken by every rank whatever happened
 * before it: one all-reduce (MAX) of (v, -v) over (failed, dtype, ndim,
 * shape). A rank that failed locally (a bad argument, an allocation while
 * staging) returns its own error and makes the others return one too, so
 * no rank is left waiting in MPI; otherwise a rank whose descriptor
 * differs from another's makes all of them fail with TF_ERR_DTYPE or
 * TF_ERR_SHAPE. `local` is this rank's status so far. */
static tf_status agree(const char *fn, tf_comm *c, const tf_tensor *x, tf_status local) {
    enum { N = AGREE_N };
    int64_t mine[N] = {local != TF_OK, route_of(x), x ? (int64_t)tf_tensor_dtype(x) : -1, x ? tf_tensor_ndim(x) : -1};
    for (int i = 0; x && i < tf_tensor_ndim(x); i++) mine[4 + i] = tf_tensor_shape(x)[i];
    int64_t *both = c->agree_in, *seen = c->agree_out;
    for (int i = 0; i < N; i++) {
        both[i] = mine[i];
        both[N + i] = -mine[i];
    }
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(both, seen, 2 * N, MPI_INT64_T, MPI_MAX, c->comm, &req);
    tf_status waited = rc == MPI_SUCCESS ? await(fn, c, &req, NULL, "agreeing on shapes") : TF_OK;
    if (local != TF_OK) return local;
    if (rc != MPI_SUCCESS) return mpi_failed(rc, fn, "MPI_Iallreduce (agreeing on shapes)");
    if (waited != TF_OK) return waited;
    if (seen[0]) return FAIL(TF_ERR_BACKEND, "%s: another rank failed before the exchange (see its error); "
                             "nothing was sent", fn);
    if (seen[1] != -seen[N + 1])
        return FAIL(TF_ERR_DEVICE_MISMATCH, "%s: rank %d's tensor is on %s (%s) and another rank's takes another "
                    "route (NCCL, MPI on host memory, CUDA-aware MPI): put every rank's on the same kind of device",
                    fn, c->rank, tf_device_name(tf_tensor_device(x)),
                    route_of(x) == ROUTE_NCCL ? "NCCL" : route_of(x) == ROUTE_CUDA_MPI ? "CUDA-aware MPI" : "MPI");
    for (int i = 2; i < N; i++) {
        if (seen[i] == -seen[N + i]) continue;
        char text[160];
        shape_text(tf_tensor_shape(x), tf_tensor_ndim(x), text, sizeof text);
        return FAIL(i == 2 ? TF_ERR_DTYPE : TF_ERR_SHAPE, "%s: rank %d holds %s %s and another rank a different %s",
                    fn, c->rank, tf_dtype_name(tf_tensor_dtype(x)), text, i == 2 ? "dtype" : "shape");
    }
    return TF_OK;
}

static tf_status check_tensor(const char *fn, const tf_tensor *x, MPI_Datatype *t) {
    if (!x) return FAIL(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (!mpi_type_of(tf_tensor_dtype(x), t))
        return FAIL(TF_ERR_DTYPE, "%s: %s cannot travel (a block-quantized dtype)", fn,
                    tf_dtype_name(tf_tensor_dtype(x)));
    if (tf_tensor_numel(x) > INT32_MAX)
        return FAIL(TF_ERR_SIZE, "%s: %lld elements; MPI counts are int", fn, (long long)tf_tensor_numel(x));
    return TF_OK;
}

/* A NULL communicator, or one a timeout broke, does nothing. */
#define NEED_COMM(fn, c)                                                                          \
    do {                                                                                          \
        if (!(c)) return FAIL(TF_ERR_NULL_ARGUMENT, "%s: communicator is NULL", fn);             \
        if ((c)->broken)                                                                          \
            return FAIL(TF_ERR_BACKEND, "%s: this communicator timed out in an earlier call and "  \
                        "is unusable (destroy it; the job should end)", fn);                      \
    } while (0)

/* ---- collectives: local work, agreement, exchange, local work ----
 *
 * The agreement waits within the timeout, so a rank that died before the
 * call, hangs elsewhere or skips it is an error on the others. The data
 * then moves in MPI's blocking collective: Open MPI 4.1's nonblocking
 * forms, which a timeout there would need, ran at half the bandwidth
 * (64 MiB all-reduce on 2 ranks: 1.57 GB/s against 3.32). A rank that
 * dies in the middle of the transfer is left to the launcher (mpirun
 * ends the job when a rank dies). */

static tf_status all_reduce(const char *fn, tf_comm *c, tf_tensor *x, tf_reduce_op op) {
    MPI_Datatype type;
    MPI_Op mop = MPI_OP_NULL;
    bool made = false;
    host_view v = {0};
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK) s = mpi_op_of(fn, tf_tensor_dtype(x), op, &mop, &made);
    if (s == TF_OK) s = host_view_open(fn, x, &v);
    s = agree(fn, c, x, s);
    if (s == TF_OK) {
        int64_t n = tf_tensor_numel(x);
        int rc = MPI_Allreduce(MPI_IN_PLACE, v.data, (int)n, type, mop, c->comm);
        if (rc != MPI_SUCCESS) s = mpi_failed(rc, fn, "MPI_Allreduce");
        else if (op == TF_REDUCE_MEAN && v.export_) scale_down(v.data, tf_tensor_dtype(x), n, c->size);
        else if (op == TF_REDUCE_MEAN) s = divide_on_device(fn, x, c->size);   /* device memory (CUDA-aware) */
    }
    tf_status closed = host_view_close(fn, &v, s == TF_OK ? x : NULL);
    if (made) MPI_Op_free(&mop);
    return s == TF_OK ? closed : s;
}

tf_status tf_all_reduce_to(tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out) {
    const char *fn = "tf_all_reduce_to";
    NEED_COMM(fn, c);
    if (!out) return FAIL(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_tensor *y = NULL;
    tf_status s = x ? tf_copy(x, &y) : FAIL(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (s == TF_OK) s = tf_all_reduce(c, y, op);
    else s = agree(fn, c, x, s);                     /* the others must not wait for this rank */
    if (s != TF_OK) {
        tf_tensor_release(y);
        return s;
    }
    *out = y;
    return TF_OK;
}

/* An empty CPU tensor of x's dtype with the given shape, and its memory. */
static tf_status host_result(const char *fn, const tf_tensor *x, int ndim, const int64_t *shape, host_view *v,
                             tf_tensor **t) {
    tf_device *cpu = NULL;
    tf_status s = tf_device_get("cpu", &cpu);
    if (s == TF_OK) s = tf_empty(cpu, tf_tensor_dtype(x), ndim, shape, t);
    if (s == TF_OK) s = host_view_open(fn, *t, v);
    if (s != TF_OK) {
        tf_tensor_release(*t);
        *t = NULL;
    }
    return s;
}

/* The host result on x's device: moved there when x lives elsewhere. */
static tf_status to_device_of(const tf_tensor *x, tf_tensor *host, tf_tensor **out) {
    tf_device *dev = tf_tensor_device(x);
    if (dev == tf_tensor_device(host)) {
        *out = host;
        return TF_OK;
    }
    tf_status s = tf_tensor_to(host, dev, out);
    tf_tensor_release(host);
    return s;
}

/* What an all-gather and a reduce-scatter share: x's memory in, a new
 * host result of `shape` out, both opened before the agreement. */
typedef struct exchange {
    host_view in, res;
    tf_tensor *host;
} exchange;

static tf_status exchange_open(const char *fn, const tf_tensor *x, int ndim, const int64_t *shape, exchange *e) {
    memset(e, 0, sizeof *e);
    tf_status s = host_view_open(fn, x, &e->in);
    if (s == TF_OK) s = host_result(fn, x, ndim, shape, &e->res, &e->host);
    return s;
}

/* Close both views; on success the result moves to x's device as *out. */
static tf_status exchange_close(const char *fn, const tf_tensor *x, exchange *e, tf_status s, tf_tensor **out) {
    host_view_close(fn, &e->res, NULL);
    host_view_close(fn, &e->in, NULL);
    if (s == TF_OK) return to_device_of(x, e->host, out);
    tf_tensor_release(e->host);
    return s;
}

static tf_status all_gather(const char *fn, tf_comm *c, const tf_tensor *x, tf_tensor **out) {
    MPI_Datatype type;
    exchange e = {0};
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && tf_tensor_ndim(x) >= TF_MAX_DIMS)
        s = FAIL(TF_ERR_TOO_MANY_DIMS, "%s: the result would have %d dimensions", fn, tf_tensor_ndim(x) + 1);
    if (s == TF_OK) {
        int64_t shape[TF_MAX_DIMS] = {c->size};
        memcpy(shape + 1, tf_tensor_shape(x), sizeof(int64_t) * (size_t)tf_tensor_ndim(x));
        s = exchange_open(fn, x, tf_tensor_ndim(x) + 1, shape, &e);
    }
    s = agree(fn, c, x, s);
    if (s == TF_OK) {
        int n = (int)tf_tensor_numel(x);
        int rc = MPI_Allgather(e.in.data, n, type, e.res.data, n, type, c->comm);
        if (rc != MPI_SUCCESS) s = mpi_failed(rc, fn, "MPI_Allgather");
    }
    return exchange_close(fn, x, &e, s, out);
}

static tf_status reduce_scatter(const char *fn, tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out) {
    MPI_Datatype type;
    MPI_Op mop = MPI_OP_NULL;
    bool made = false;
    exchange e = {0};
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && (tf_tensor_ndim(x) == 0 || tf_tensor_shape(x)[0] % c->size))
        s = FAIL(TF_ERR_SHAPE, "%s: the first axis (%lld) must split evenly over %d ranks", fn,
                 tf_tensor_ndim(x) ? (long long)tf_tensor_shape(x)[0] : 0LL, c->size);
    if (s == TF_OK) s = mpi_op_of(fn, tf_tensor_dtype(x), op, &mop, &made);
    if (s == TF_OK) {
        int64_t shape[TF_MAX_DIMS];
        memcpy(shape, tf_tensor_shape(x), sizeof(int64_t) * (size_t)tf_tensor_ndim(x));
        shape[0] /= c->size;
        s = exchange_open(fn, x, tf_tensor_ndim(x), shape, &e);
    }
    s = agree(fn, c, x, s);
    if (s == TF_OK) {
        int64_t n = tf_tensor_numel(x) / c->size;
        int rc = MPI_Reduce_scatter_block(e.in.data, e.res.data, (int)n, type, mop, c->comm);
        if (rc != MPI_SUCCESS) s = mpi_failed(rc, fn, "MPI_Reduce_scatter_block");
        else if (op == TF_REDUCE_MEAN) scale_down(e.res.data, tf_tensor_dtype(x), n, c->size);
    }
    if (made) MPI_Op_free(&mop);
    return exchange_close(fn, x, &e, s, out);
}

static tf_status broadcast(const char *fn, tf_comm *c, tf_tensor *x, int root) {
    MPI_Datatype type;
    host_view v = {0};
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && (root < 0 || root >= c->size))
        s = FAIL(TF_ERR_INDEX, "%s: root %d of %d ranks", fn, root, c->size);
    if (s == TF_OK) s = host_view_open(fn, x, &v);
    s = agree(fn, c, x, s);
    if (s == TF_OK) {
        int rc = MPI_Bcast(v.data, (int)tf_tensor_numel(x), type, root, c->comm);
        if (rc != MPI_SUCCESS) s = mpi_failed(rc, fn, "MPI_Bcast");
    }
    tf_status closed = host_view_close(fn, &v, s == TF_OK && c->rank != root ? x : NULL);
    return s == TF_OK ? closed : s;
}

/* ---- NCCL: CUDA tensors ---- */

/* The CUDA device x lives on, and the address of its first element. */
static tf_status cuda_memory(const char *fn, const tf_tensor *x, void **p, int *ordinal) {
    DLDevice d;
    tf_status s = tf_tensor_native_memory(x, p, &d);
    if (s != TF_OK) return failed_while(s, fn, "reaching the device memory");
    *ordinal = d.device_id;
    return TF_OK;
}

/* A communicator's NCCL half is bound to the device of its first call. */
static tf_status nccl_bound_to(const char *fn, const tf_comm *c, int ordinal) {
    if (!c->nccl || tf__nccl_device(c->nccl) == ordinal) return TF_OK;
    return FAIL(TF_ERR_DEVICE_MISMATCH, "%s: this communicator's NCCL ranks are on cuda:%d, the tensor on cuda:%d "
                "(one communicator per device: tf_comm_init_mpi on a split communicator)", fn,
                tf__nccl_device(c->nccl), ordinal);
}

/* Made at the first NCCL call, after the agreement (every rank is here):
 * rank 0's unique id goes to the others over MPI, with a flag that says
 * whether it could make one. */
static tf_status nccl_ready(const char *fn, tf_comm *c, int ordinal) {
    if (c->nccl) return TF_OK;
    unsigned char *msg = c->nccl_id;
    memset(msg, 0, sizeof c->nccl_id);
    tf_status s = TF_OK;
    if (c->rank == 0) {
        s = tf__nccl_unique_id(msg + 1);
        msg[0] = s == TF_OK;
    }
    MPI_Request req;
    int rc = MPI_Ibcast(msg, (int)sizeof c->nccl_id, MPI_BYTE, 0, c->comm, &req);
    tf_status sent = rc != MPI_SUCCESS ? mpi_failed(rc, fn, "MPI_Ibcast (NCCL's id)")
                                       : await(fn, c, &req, NULL, "handing out NCCL's id");
    if (s != TF_OK) return s;
    if (sent != TF_OK) return sent;
    if (!msg[0]) return FAIL(TF_ERR_BACKEND, "%s: rank 0 could not make an NCCL id (see its error)", fn);
    s = tf__nccl_create(msg + 1, c->rank, c->size, ordinal, &c->nccl);
    return s == TF_OK ? TF_OK : failed_while(s, fn, "joining the NCCL communicator");
}

/* Queue the call on the communicator's stream (then return) or on the
 * device's current one (then wait, within the timeout: a timeout aborts
 * NCCL's communicator and breaks this one). */
static tf_status nccl_run(const char *fn, tf_comm *c, const tf_tensor *x, const tf_nccl_call *call) {
    tf_stream *st = c->stream ? c->stream : tf_stream_current(tf_tensor_device(x));
    void *queue = NULL;
    tf_status s = tf_stream_native_handle(st, &queue);
    if (s == TF_OK) s = tf__nccl_enqueue(c->nccl, call, queue);
    if (s == TF_OK && !c->stream) s = tf__nccl_wait(c->nccl, queue, c->timeout_s);
    if (s == TF_ERR_TIMEOUT) {
        tf__nccl_destroy(c->nccl, true);
        c->nccl = NULL;
        c->broken = true;
    }
    return s == TF_OK ? TF_OK : failed_while(s, fn, "NCCL");
}

/* What every NCCL collective does first: x's memory, the checks, the
 * agreement, the communicator. */
static tf_status nccl_begin(const char *fn, tf_comm *c, const tf_tensor *x, tf_status s, void **p) {
    int ordinal = -1;
    if (s == TF_OK) s = cuda_memory(fn, x, p, &ordinal);
    if (s == TF_OK) s = nccl_bound_to(fn, c, ordinal);
    s = agree(fn, c, x, s);
    if (s == TF_OK) s = nccl_ready(fn, c, ordinal);
    return s;
}

static tf_status nccl_all_reduce(const char *fn, tf_comm *c, tf_tensor *x, tf_reduce_op op) {
    MPI_Datatype type;
    void *p = NULL;
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && (op < TF_REDUCE_SUM || op > TF_REDUCE_MEAN)) s = FAIL(TF_ERR_INVALID_ARGUMENT, "%s: reduce op %d", fn, op);
    if (s == TF_OK && op == TF_REDUCE_MEAN && !tf_dtype_is_float(tf_tensor_dtype(x)))
        s = FAIL(TF_ERR_DTYPE, "%s: mean of %s; mean takes float dtypes", fn, tf_dtype_name(tf_tensor_dtype(x)));
    if (s == TF_OK && tf_tensor_dtype(x) == TF_BOOL && op == TF_REDUCE_SUM)
        s = FAIL(TF_ERR_DTYPE, "%s: sum of bool; use max (any) or min (all)", fn);
    if ((s = nccl_begin(fn, c, x, s, &p)) != TF_OK) return s;
    tf_nccl_call call = {TF_NCCL_ALL_REDUCE, p, p, (size_t)tf_tensor_numel(x), tf_tensor_dtype(x), op, 0};
    return nccl_run(fn, c, x, &call);
}

/* A new tensor on x's device for a gathered or scattered result. */
static tf_status nccl_result(const tf_tensor *x, int ndim, const int64_t *shape, tf_tensor **out, void **q) {
    DLDevice d;
    tf_status s = tf_empty(tf_tensor_device(x), tf_tensor_dtype(x), ndim, shape, out);
    if (s == TF_OK) s = tf_tensor_native_memory(*out, q, &d);
    return s;
}

static tf_status nccl_all_gather(const char *fn, tf_comm *c, const tf_tensor *x, tf_tensor **out) {
    MPI_Datatype type;
    void *p = NULL, *q = NULL;
    tf_tensor *y = NULL;
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && tf_tensor_ndim(x) >= TF_MAX_DIMS)
        s = FAIL(TF_ERR_TOO_MANY_DIMS, "%s: the result would have %d dimensions", fn, tf_tensor_ndim(x) + 1);
    if (s == TF_OK) {
        int64_t shape[TF_MAX_DIMS] = {c->size};
        memcpy(shape + 1, tf_tensor_shape(x), sizeof(int64_t) * (size_t)tf_tensor_ndim(x));
        s = nccl_result(x, tf_tensor_ndim(x) + 1, shape, &y, &q);
    }
    s = nccl_begin(fn, c, x, s, &p);
    if (s == TF_OK) {
        tf_nccl_call call = {TF_NCCL_ALL_GATHER, p, q, (size_t)tf_tensor_numel(x), tf_tensor_dtype(x), 0, 0};
        s = nccl_run(fn, c, x, &call);
    }
    if (s != TF_OK) tf_tensor_release(y);
    else *out = y;
    return s;
}

static tf_status nccl_reduce_scatter(const char *fn, tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out) {
    MPI_Datatype type;
    MPI_Op unused = MPI_OP_NULL;
    bool made = false;
    void *p = NULL, *q = NULL;
    tf_tensor *y = NULL;
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && (tf_tensor_ndim(x) == 0 || tf_tensor_shape(x)[0] % c->size))
        s = FAIL(TF_ERR_SHAPE, "%s: the first axis (%lld) must split evenly over %d ranks", fn,
                 tf_tensor_ndim(x) ? (long long)tf_tensor_shape(x)[0] : 0LL, c->size);
    if (s == TF_OK) s = mpi_op_of(fn, tf_tensor_dtype(x), op, &unused, &made);   /* the same checks */
    if (made) MPI_Op_free(&unused);
    if (s == TF_OK) {
        int64_t shape[TF_MAX_DIMS];
        memcpy(shape, tf_tensor_shape(x), sizeof(int64_t) * (size_t)tf_tensor_ndim(x));
        shape[0] /= c->size;
        s = nccl_result(x, tf_tensor_ndim(x), shape, &y, &q);
    }
    s = nccl_begin(fn, c, x, s, &p);
    if (s == TF_OK) {
        tf_nccl_call call = {TF_NCCL_REDUCE_SCATTER, p, q, (size_t)(tf_tensor_numel(x) / c->size),
                             tf_tensor_dtype(x), op, 0};
        s = nccl_run(fn, c, x, &call);
    }
    if (s != TF_OK) tf_tensor_release(y);
    else *out = y;
    return s;
}

static tf_status nccl_broadcast(const char *fn, tf_comm *c, tf_tensor *x, int root) {
    MPI_Datatype type;
    void *p = NULL;
    tf_status s = check_tensor(fn, x, &type);
    if (s == TF_OK && (root < 0 || root >= c->size)) s = FAIL(TF_ERR_INDEX, "%s: root %d of %d ranks", fn, root, c->size);
    if ((s = nccl_begin(fn, c, x, s, &p)) != TF_OK) return s;
    tf_nccl_call call = {TF_NCCL_BROADCAST, p, p, (size_t)tf_tensor_numel(x), tf_tensor_dtype(x), 0, root};
    return nccl_run(fn, c, x, &call);
}

/* ---- the collectives: the communicator's stream, then the route ---- */

tf_status tf_all_reduce(tf_comm *c, tf_tensor *x, tf_reduce_op op) {
    const char *fn = "tf_all_reduce";
    NEED_COMM(fn, c);
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    if (s != TF_OK) return agree(fn, c, x, s);
    s = route_of(x) == ROUTE_NCCL ? nccl_all_reduce(fn, c, x, op) : all_reduce(fn, c, x, op);
    stream_leave(prev);
    return s;
}

tf_status tf_all_gather(tf_comm *c, const tf_tensor *x, tf_tensor **out) {
    const char *fn = "tf_all_gather";
    NEED_COMM(fn, c);
    if (!out) return FAIL(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    if (s != TF_OK) return agree(fn, c, x, s);
    s = route_of(x) == ROUTE_NCCL ? nccl_all_gather(fn, c, x, out) : all_gather(fn, c, x, out);
    stream_leave(prev);
    return s;
}

tf_status tf_reduce_scatter(tf_comm *c, const tf_tensor *x, tf_reduce_op op, tf_tensor **out) {
    const char *fn = "tf_reduce_scatter";
    NEED_COMM(fn, c);
    if (!out) return FAIL(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    if (s != TF_OK) return agree(fn, c, x, s);
    s = route_of(x) == ROUTE_NCCL ? nccl_reduce_scatter(fn, c, x, op, out) : reduce_scatter(fn, c, x, op, out);
    stream_leave(prev);
    return s;
}

tf_status tf_broadcast(tf_comm *c, tf_tensor *x, int root) {
    const char *fn = "tf_broadcast";
    NEED_COMM(fn, c);
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    if (s != TF_OK) return agree(fn, c, x, s);
    s = route_of(x) == ROUTE_NCCL ? nccl_broadcast(fn, c, x, root) : broadcast(fn, c, x, root);
    stream_leave(prev);
    return s;
}

/* ---- point to point: a failed side still completes the message ---- */

static tf_status check_peer(const char *fn, const tf_comm *c, int peer) {
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return FAIL(TF_ERR_INDEX, "%s: rank %d (this is rank %d of %d)", fn, peer, c->rank, c->size);
    return TF_OK;
}

/* A sender that failed locally still sends: an empty message, which the
 * receiver reports (a count that does not match) instead of waiting. */
static tf_status send_msg(const char *fn, tf_comm *c, const tf_tensor *x, int dest, int tag, tf_status local) {
    tf_status s = check_peer(fn, c, dest);
    if (s != TF_OK) return s;                        /* no such peer: nobody waits */
    MPI_Datatype type = MPI_BYTE;
    host_view v = {0};
    s = local == TF_OK ? check_tensor(fn, x, &type) : local;
    if (s == TF_OK) s = host_view_open(fn, x, &v);
    int count = s == TF_OK ? (int)tf_tensor_numel(x) : 0;
    MPI_Request req;
    int rc = MPI_Isend(s == TF_OK ? v.data : NULL, count, type, dest, tag, c->comm, &req);
    tf_status sent = rc != MPI_SUCCESS ? mpi_failed(rc, fn, "MPI_Isend") : await(fn, c, &req, NULL, "MPI_Isend");
    if (sent == TF_ERR_TIMEOUT) return abandon(c, sent, &v);
    host_view_close(fn, &v, NULL);
    return s != TF_OK ? s : sent;
}

/* MPI_Probe within the timeout: MPI_ERR_PENDING when it passes. */
static int probe(const tf_comm *c, int source, int tag, MPI_Status *st) {
    double deadline = c->timeout_s > 0 ? now_s() + c->timeout_s : 0;
    for (unsigned spin = 1;; spin++) {
        int here = 0, rc = MPI_Iprobe(source, tag, c->comm, &here, st);
        if (rc != MPI_SUCCESS || here) return rc;
        if (deadline && spin % 64 == 0 && now_s() > deadline) return MPI_ERR_PENDING;
    }
}

/* The message's size is probed first, so a mismatch is reported; a
 * message this rank cannot take (a mismatch, or a local failure) is still
 * received - truncated to nothing - so the sender never blocks on it. */
static tf_status recv_msg(const char *fn, tf_comm *c, tf_tensor *x, int source, int tag, tf_status local) {
    tf_status s = check_peer(fn, c, source);
    if (s != TF_OK) return s;
    MPI_Datatype type = MPI_BYTE;
    host_view v = {0};
    s = local == TF_OK ? check_tensor(fn, x, &type) : local;
    if (s == TF_OK) s = host_view_open(fn, x, &v);
    MPI_Status st;
    int count = 0, rc = probe(c, source, tag, &st);
    if (rc == MPI_ERR_PENDING) {                     /* timed out: no message, nothing pending */
        host_view_close(fn, &v, NULL);
        return timed_out(fn, c, "waiting for the message");
    }
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, type, &count);
    if (s == TF_OK && rc != MPI_SUCCESS) s = mpi_failed(rc, fn, "MPI_Probe");
    if (s == TF_OK && count != tf_tensor_numel(x))
        s = FAIL(TF_ERR_SHAPE, "%s: rank %d sent %d elements of %s; this tensor holds %lld%s", fn, source, count,
                 tf_dtype_name(tf_tensor_dtype(x)), (long long)tf_tensor_numel(x),
                 count ? "" : " (a send that failed on its side sends nothing)");
    if (s == TF_OK) {
        MPI_Request req;
        rc = MPI_Irecv(v.data, count, type, source, tag, c->comm, &req);
        s = rc != MPI_SUCCESS ? mpi_failed(rc, fn, "MPI_Irecv") : await(fn, c, &req, NULL, "MPI_Irecv");
        if (s == TF_ERR_TIMEOUT) return abandon(c, s, &v);
    } else if (rc == MPI_SUCCESS) {
        char drain;                                  /* consume it: the next receive must not see it */
        MPI_Recv(&drain, 0, MPI_BYTE, source, tag, c->comm, MPI_STATUS_IGNORE);
    }
    tf_status closed = host_view_close(fn, &v, s == TF_OK ? x : NULL);
    return s == TF_OK ? closed : s;
}

/* Messages of CUDA tensors go through MPI too (staged, or device memory
 * where MPI is CUDA-aware): NCCL's send and receive could not tell a
 * receiver of the wrong size from a slow sender. */
tf_status tf_send(tf_comm *c, const tf_tensor *x, int dest, int tag) {
    const char *fn = "tf_send";
    NEED_COMM(fn, c);
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    s = send_msg(fn, c, x, dest, tag, s);
    stream_leave(prev);
    return s;
}

tf_status tf_recv(tf_comm *c, tf_tensor *x, int source, int tag) {
    const char *fn = "tf_recv";
    NEED_COMM(fn, c);
    tf_stream *prev;
    tf_status s = stream_enter(fn, c, x, &prev);
    s = recv_msg(fn, c, x, source, tag, s);
    stream_leave(prev);
    return s;
}
