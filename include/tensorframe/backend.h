/* tensorframe backend SDK — what a compute backend implements.
 *
 * A backend is either a plugin (a shared object named libtensorframe-NAME.so
 * exporting TF_BACKEND_PLUGIN_ENTRY) or a set of structs registered
 * in-process with tf_backend_register(). Plugins never link against the
 * core: every service they need comes through tf_host_api.
 *
 * Versioning (SDK 2): the registration carries abi_major, which must equal
 * TF_BACKEND_ABI_MAJOR exactly, and abi_minor. Every struct that crosses
 * between the core and a backend starts with struct_size, set by whoever
 * fills it to the size it was compiled with (TF_STRUCT_INIT); fields and
 * slots are only ever appended, and a reader uses a field only where
 * TF_HAS_FIELD says the writer's struct holds it. So a plugin built against
 * an older header is read correctly by a newer core, and the other way
 * round. Slots marked (optional) may be NULL.
 *
 * Every slot is called by the core and exercised by the test suite
 * (tests/sdk: the example backend, loaded as a plugin, records the slots it
 * is called through, and a slot of this header that is never called fails).
 *
 * Streams: the core creates one stream per device (its current stream) with
 * stream_create when the device has the slot, and passes it to every call
 * that queues work: run, buffer_upload, buffer_download, buffer_copy,
 * buffer_copy_from_peer, synchronize. A device without stream_create gets
 * NULL and is synchronous or orders work itself. Events order work between
 * streams of one backend: tf_tensor_to between two devices of one backend
 * records an event on the source's stream and makes the destination's
 * stream wait for it before the peer copy, then the other way round, so
 * neither side reuses memory the copy still reads or writes.
 *
 * Op contract (what the core guarantees before calling run()):
 *  - The op was validated: dtypes accepted, shapes compatible, axis in range.
 *  - Every descriptor is on this device; strides are in elements and may be
 *    0 (broadcast) or arbitrary; offsets are in bytes.
 *  - BROADCAST ops: inputs have the output's ndim and shape (broadcast axes
 *    have stride 0) and one common dtype: the output's, except for the
 *    comparisons (EQ..GE: promoted inputs, bool output) and LOGICAL_AND/OR
 *    (bool inputs and output).
 *  - WHERE: inputs (cond: bool, a, b: the output's dtype) broadcast to the
 *    output's shape as above.
 *  - UNARY with a bool result: LOGICAL_NOT gets a bool input, ISNAN/ISINF
 *    any dtype.
 *  - UNARY: the input has the output's shape and dtype, any strides.
 *  - MATMUL: a [..., M, K], b [..., K, N], out [..., M, N], same ndim >= 2,
 *    batch axes already broadcast, one dtype. GEMM: the same, transposes
 *    already applied as strides, and when n_inputs == 3 a c broadcast to
 *    [..., M, N]; out = alpha * a@b + beta * c, c not read when beta == 0.
 *  - REDUCE: the output has the input's ndim with extent 1 on every reduced
 *    axis; params.axis is the axis, or TF_ALL_AXES. Output dtypes: SUM and
 *    PROD give i64 for integer/bool inputs, ARGMAX/ARGMIN i64 (the position
 *    in row-major order over the reduced axes), the others the input's.
 *    MAX/MIN/ARGMAX/ARGMIN never see an empty reduction (the core rejects it).
 *  - SCAN (CUMSUM): output shape = input shape, params.axis the axis.
 *  - INDEXED: inputs[1] holds i32 or i64 indices, already checked to be in
 *    range. INDEX_SELECT: index 1-D, output = input with the axis's extent
 *    replaced by the index count. GATHER: index has the input's ndim, output
 *    the index's shape; params.axis the axis.
 *  - TRIL/TRIU work on the last two axes, params.diagonal the offset.
 *  - ROW: inputs[0] is x (any strides, output shape); SOFTMAX/LOG_SOFTMAX
 *    work along params.axis, RMSNORM/LAYERNORM along the last axis, with a
 *    weight (then a bias) 1-D over it when params.flags says so, all of x's
 *    dtype. LAYERNORM uses the population variance.
 *  - QMATMUL_EPILOGUE: QMATMUL's x [M, K] f32 and w [N, K]; then with
 *    TF_QMM_BIAS a bias and with TF_GEMM_RESIDUAL a residual, each f32
 *    [M, N] (the bias with row stride 0); out [M, N] f32 = act(x @ w^T +
 *    bias) + r, act = params.activation (or TF_NO_ACTIVATION). A backend
 *    without it need not say so: the core runs QMATMUL into the output and
 *    the rest in place there.
 *  - ADD_NORM (ADD_RMSNORM, ADD_LAYERNORM): inputs[0] x (any strides, the
 *    output's shape), inputs[1] r of x's shape and dtype (stride 0 where
 *    broadcast), then weight and bias as ROW's; along the last axis
 *    (params.axis), out = norm(x + r) with the sum rounded to the dtype
 *    before the norm. A backend without it need not say so: the core runs
 *    the add into a scratch tensor and the norm from it on the same device.
 *  - ROPE: inputs[1] holds i32/i64 positions, 1-D over params.axis of x;
 *    pairs in the first params.rotary_dims of the last axis rotate by
 *    position * theta^(-2i/rotary_dims): (2i, 2i+1) by default (GPT-J),
 *    (i, i + rotary_dims/2) with TF_ROPE_NEOX.
 *  - SDPA: q [B, Hq, Lq, D], k [B, Hkv, Lk, D], v [B, Hkv, Lk, Dv], and with
 *    TF_SDPA_MASK an additive mask broadcast to [B, Hq, Lq, Lk] (stride 0
 *    axes); out [B, Hq, Lq, Dv]. Query head h reads kv head h / (Hq / Hkv).
 *    With TF_SDPA_CAUSAL query i sees keys j <= params.q_offset + i. A row
 *    with no visible key is NaN.
 *  - CONV2D: x [N, C, H, W], weight [O, C/groups, kh, kw], with TF_CONV_BIAS
 *    a bias [O]; out [N, O, Ho, Wo]; params stride, padding, dilation, groups.
 *  - MAXPOOL2D/AVGPOOL2D: x [N, C, H, W] -> [N, C, Ho, Wo]; params kernel,
 *    stride, padding (max: dilation; padding is -inf for max, zero for avg).
 *  - ADAM is in place: inputs param, grad, m, v of one shape and dtype; the
 *    output descriptor is the param's; param, m and v are written.
 *  - The output is contiguous, row-major, and does not alias an input,
 *    with two exceptions. COPY's output may be a strided, non-overlapping
 *    view into part of a tensor (concat and pad write through it): a
 *    backend must write only the elements the view names. And the output
 *    of an elementwise op (kernels ARITH, MATH, COMPARE, PREDICATE, SELECT)
 *    may be exactly one of its inputs, same buffer, offset and strides
 *    (tf_binary_into and friends, in place): a kernel must read an
 *    element's inputs before it writes that element.
 */
#ifndef TENSORFRAME_BACKEND_H
#define TENSORFRAME_BACKEND_H

#include <stdarg.h>
#include <stddef.h>

#include "tensorframe/tensorframe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TF_BACKEND_ABI_MAJOR 3      /* 3.0: TF_MAX_DIMS 8 -> 32 moved tf_op's fields */
#define TF_BACKEND_ABI_MINOR 0

/* struct_size handling: TF_STRUCT_INIT(T) starts an initializer of a T;
 * TF_HAS_FIELD(p, T, f) says whether the struct at p (of type T, filled by
 * the other side) is large enough to hold field f. */
#define TF_STRUCT_INIT(T) .struct_size = (uint32_t)sizeof(T)
#define TF_HAS_FIELD(p, T, f) ((p)->struct_size >= offsetof(T, f) + sizeof(((T *)0)->f))

#define TF_OP_MAX_INPUTS 4
/* The symbol every plugin exports. */
#define TF_BACKEND_PLUGIN_ENTRY "tf_backend_plugin_init"

/* A backend's own buffer object; the core only passes the pointer around. */
typedef struct tf_backend_buffer tf_backend_buffer;
/* Optional asynchronous objects; NULL stream means the device's default. */
typedef struct tf_backend_stream tf_backend_stream;
typedef struct tf_backend_event tf_backend_event;
typedef struct tf_backend_graph tf_backend_graph;     /* SDK 2.3: a native graph */

typedef struct tf_tensor_desc {
    tf_backend_buffer *buffer;
    uint64_t offset;                  /* bytes from the buffer's start */
    tf_dtype dtype;
    int32_t ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t strides[TF_MAX_DIMS];     /* elements; 0 = broadcast */
} tf_tensor_desc;

/* Op parameters; fields are appended as ops are added. */
typedef struct tf_op_params {
    int32_t axis;                     /* REDUCE: axis or TF_ALL_AXES */
    bool keepdim;                     /* REDUCE: informational; out is keepdim-shaped */
    double value;                     /* FILL: the value; ARANGE: start */
    double step;                      /* ARANGE: step */
    uint64_t seed;                    /* RAND_*: Philox key */
    double alpha;                     /* LEAKY_RELU: negative slope */
    double min_value, max_value;      /* CLAMP: bounds (NaN = none) */
    int64_t correction;               /* VAR, STD: divisor is max(0, N - correction) */
    int64_t diagonal;                 /* TRIL, TRIU: kept diagonal offset */
    double beta;                      /* GEMM: out = alpha * a@b + beta * c (alpha above) */
    double eps;                       /* RMSNORM, LAYERNORM, ADD_RMSNORM, ADD_LAYERNORM */
    uint32_t flags;                   /* ROW, ADD_NORM: TF_ROW_WEIGHT | TF_ROW_BIAS; ROPE: TF_ROPE_NEOX;
                                         SDPA: TF_SDPA_CAUSAL | TF_SDPA_MASK;
                                         GEMM_EPILOGUE: TF_GEMM_RESIDUAL;
                                         QMATMUL_EPILOGUE: TF_QMM_BIAS | TF_GEMM_RESIDUAL;
                                         SORT, ARGSORT: TF_SORT_DESCENDING; SEARCHSORTED: TF_SEARCH_RIGHT */
    int64_t rotary_dims;              /* ROPE: leading dims of the last axis rotated */
    double theta;                     /* ROPE: frequency base */
    double scale;                     /* SDPA: score scale */
    int64_t q_offset;                 /* SDPA: absolute position of the first query (causal) */
    int64_t kernel[2];                /* POOL: window (h, w) */
    int64_t stride[2];                /* CONV, POOL */
    int64_t padding[2];               /* CONV, POOL */
    int64_t dilation[2];              /* CONV, MAXPOOL2D */
    int64_t groups;                   /* CONV */
    double lr, beta1, beta2, weight_decay;   /* ADAM (eps above) */
    int64_t adam_step;                /* ADAM: the step number, from 1 */
    int32_t activation;               /* GEMM_EPILOGUE: a unary op applied after the GEMM, or
                                         TF_NO_ACTIVATION (SDK 2.6) */
} tf_op_params;

#define TF_ROW_WEIGHT 1u
#define TF_ROW_BIAS 2u
#define TF_ROPE_NEOX 1u
#define TF_SDPA_CAUSAL 1u
#define TF_SDPA_MASK 2u
#define TF_CONV_BIAS 1u
#define TF_POOL_COUNT_PAD 1u          /* AVGPOOL2D: padding counts in the divisor */
#define TF_ADAM_DECOUPLED 1u          /* ADAM: AdamW's decoupled weight decay */
#define TF_GEMM_RESIDUAL 1u           /* GEMM_EPILOGUE, QMATMUL_EPILOGUE: the last input is a residual added at the end */
#define TF_SORT_DESCENDING 1u        /* SORT, ARGSORT: largest first (NaN first), equal values kept in order */
#define TF_SEARCH_RIGHT 1u           /* SEARCHSORTED: the last position a value could go (NumPy's side='right') */
#define TF_QMM_BIAS 2u                /* QMATMUL_EPILOGUE: inputs[2] is a bias added before the activation */

typedef struct tf_op {
    uint32_t struct_size;             /* sizeof(tf_op) as the core was built */
    tf_op_kind kind;
    int32_t n_inputs;
    tf_tensor_desc inputs[TF_OP_MAX_INPUTS];
    tf_tensor_desc output;
    tf_op_params params;              /* last: it grows */
} tf_op;

/* Device-level description a backend reports. */
typedef struct tf_backend_device_info {
    uint32_t struct_size;             /* set by the core: write only the fields it holds */
    char description[256];            /* the driver's name for the device */
    tf_device_type type;
    uint64_t memory_total;            /* bytes, from the OS or driver */
    uint64_t memory_free;             /* bytes, read when called */
    tf_device_caps caps;
    /* (SDK 2.1) What the driver reports; leave 0 what it does not. */
    tf_device_limits limits;
    tf_device_hints hints;
} tf_backend_device_info;

typedef struct tf_device_iface {
    uint32_t struct_size;
    /* Fill info; memory_free is read fresh on each call. */
    tf_status (*get_info)(void *dev_ctx, tf_backend_device_info *info);
    /* Buffers. alloc of 0 bytes must succeed. */
    tf_status (*buffer_alloc)(void *dev_ctx, size_t nbytes, tf_backend_buffer **out);
    void (*buffer_free)(void *dev_ctx, tf_backend_buffer *buf);
    /* Host -> buffer, queued on `stream` after the work before it; returns
     * once `src` may be reused. */
    tf_status (*buffer_upload)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t dst_offset,
                               const void *src, size_t nbytes);
    /* Buffer -> host after the work queued on `stream`; returns once `dst`
     * holds the bytes. */
    tf_status (*buffer_download)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t src_offset,
                                 void *dst, size_t nbytes);
    /* Ops: can this device run this op (kind, dtypes, shapes, strides)? A
     * false answer sends the op to the CPU through the core. */
    bool (*supports)(void *dev_ctx, const tf_op *op);
    tf_status (*run)(void *dev_ctx, tf_backend_stream *stream, const tf_op *op);
    /* (optional) Host address of the buffer's first byte if it is host
     * memory (the core then reads and writes it in place). */
    void *(*buffer_host_ptr)(void *dev_ctx, tf_backend_buffer *buf);
    /* (optional) Host-memory backends: wrap caller-owned host memory as a
     * buffer without copying; buffer_free on it must not free the memory.
     * The core calls it on the host backend to run another device's op on
     * the CPU in that device's own memory. */
    tf_status (*buffer_from_host_ptr)(void *dev_ctx, void *ptr, size_t nbytes, tf_backend_buffer **out);
    /* (optional) Copy within the device, queued on `stream`: the core's
     * same-device copies (tf_copy, tf_contiguous of a contiguous range).
     * NULL makes the core run the copy op instead. */
    tf_status (*buffer_copy)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t dst_offset,
                             tf_backend_buffer *src, size_t src_offset, size_t nbytes);
    /* (optional) Copy from a buffer of another device of the same backend
     * (peer copy), queued on `stream` (this device's); the core orders the
     * source device's work around it with events. NULL makes the core stage
     * through the host. */
    tf_status (*buffer_copy_from_peer)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *dst,
                                       size_t dst_offset, void *src_dev_ctx, tf_backend_buffer *src,
                                       size_t src_offset, size_t nbytes);
    /* (optional) Wait for all work queued on `stream`; NULL means the device
     * is synchronous. */
    tf_status (*synchronize)(void *dev_ctx, tf_backend_stream *stream);
    /* (optional) Streams: tf_stream_create makes them (SDK 2.2: the core
     * no longer makes one at registration). Every slot that takes a stream
     * takes NULL too: the device's default queue. A backend without these
     * slots runs every stream on that queue. */
    tf_status (*stream_create)(void *dev_ctx, tf_backend_stream **out);
    void (*stream_destroy)(void *dev_ctx, tf_backend_stream *stream);
    /* (optional, with streams) Events: record marks the work queued on a
     * stream so far; wait makes later work on a stream (of this device or
     * another device of the same backend) wait for it. */
    tf_status (*event_create)(void *dev_ctx, tf_backend_event **out);
    tf_status (*event_record)(void *dev_ctx, tf_backend_event *event, tf_backend_stream *stream);
    tf_status (*event_wait)(void *dev_ctx, tf_backend_event *event, tf_backend_stream *stream);
    void (*event_destroy)(void *dev_ctx, tf_backend_event *event);
    /* (optional) The device allocator's statistics. */
    tf_status (*memory_stats)(void *dev_ctx, tf_memory_stats *out);
    /* (optional) Return cached, unused memory to the OS or driver. */
    void (*empty_cache)(void *dev_ctx);
    /* (optional, SDK 2.1) Configure the allocator. The core has checked the
     * values and turned limit_fraction into bytes in `limit` (0 there);
     * release_threshold 0 means the backend's own default. */
    tf_status (*alloc_configure)(void *dev_ctx, const tf_alloc_conf *conf);
    /* (optional, SDK 2.1) peak_allocated = allocated, peak_reserved = reserved. */
    void (*reset_peak_memory)(void *dev_ctx);
    /* (optional, SDK 2.2) Events: done or not without blocking, a host wait,
     * and the milliseconds between two done events of this device
     * (TF_ERR_UNSUPPORTED where its events keep no time). An event never
     * recorded is done. */
    tf_status (*event_query)(void *dev_ctx, tf_backend_event *event, bool *done);
    tf_status (*event_synchronize)(void *dev_ctx, tf_backend_event *event);
    tf_status (*event_elapsed_ms)(void *dev_ctx, tf_backend_event *start, tf_backend_event *end, double *ms);
    /* (optional, SDK 2.2) Copies queued on `stream` that return at once:
     * src must stay unchanged, and dst is not complete, until the stream has
     * passed them. NULL: the core calls buffer_upload/buffer_download. */
    tf_status (*buffer_upload_async)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *dst,
                                     size_t dst_offset, const void *src, size_t nbytes);
    tf_status (*buffer_download_async)(void *dev_ctx, tf_backend_stream *stream, tf_backend_buffer *src,
                                       size_t src_offset, void *dst, size_t nbytes);
    /* (optional, SDK 2.2) Page-locked host memory (tf_host_alloc). */
    tf_status (*host_alloc)(void *dev_ctx, size_t nbytes, void **out);
    void (*host_free)(void *dev_ctx, void *p);
    /* (optional, SDK 2.3; all four or none) Native graphs, as CUDA graphs:
     * at tf_graph_end the core calls graph_capture_begin(stream), then run()
     * once for each op the capture recorded, on that stream, then
     * graph_capture_end, which hands back an object that graph_launch runs
     * again on any stream: every launch those runs made, on the same
     * buffers, in order. The runs between begin and end need not execute
     * (the ops ran when they were recorded). Memory a run takes for itself
     * (scratch, workspaces) must stay with the graph until graph_destroy.
     * Any error from begin, a run or end drops the native graph (end must
     * then release what begin made and return the error) and the core
     * replays op by op; so a backend may refuse what it cannot capture. */
    tf_status (*graph_capture_begin)(void *dev_ctx, tf_backend_stream *stream);
    tf_status (*graph_capture_end)(void *dev_ctx, tf_backend_stream *stream, tf_backend_graph **out);
    tf_status (*graph_launch)(void *dev_ctx, tf_backend_stream *stream, tf_backend_graph *graph);
    void (*graph_destroy)(void *dev_ctx, tf_backend_graph *graph);
    /* (optional, SDK 2.4) The buffer as the native API addresses it, for
     * the DLPack export of device memory (tf_tensor_to_dlpack) and for
     * libraries that take raw device pointers (NCCL in libtensorframe_mpi):
     * the address of its first byte, and the DLPack device it lives on
     * (DLDeviceType: 2 kDLCUDA, 10 kDLROCM, 12 kDLExtDev; the ordinal). */
    tf_status (*buffer_native)(void *dev_ctx, tf_backend_buffer *buf, void **ptr, int32_t *dl_device_type,
                               int32_t *dl_device_id);
    /* (optional, SDK 2.4) The native queue behind `stream` (cudaStream_t,
     * hipStream_t); for NULL, the queue the device uses then. */
    tf_status (*stream_native)(void *dev_ctx, tf_backend_stream *stream, void **out);
} tf_device_iface;

typedef struct tf_backend_device {
    const tf_device_iface *iface;
    void *ctx;
} tf_backend_device;

typedef struct tf_backend_iface {
    uint32_t struct_size;
    /* Called once at tf_shutdown (or when the core rejects the backend). */
    void (*shutdown)(void *backend_ctx);
    /* (optional) Backend-specific extras by name; NULL if unknown. */
    void *(*get_proc_address)(void *backend_ctx, const char *name);
    /* (optional) Host threads the backend computes with. */
    tf_status (*set_num_threads)(void *backend_ctx, int n);
    int (*get_num_threads)(void *backend_ctx);
} tf_backend_iface;

/* What a backend hands the core. The core copies the struct; the device
 * array and strings must stay valid until shutdown() is called. */
typedef struct tf_backend_reg {
    uint32_t struct_size;
    uint32_t abi_major, abi_minor;
    const char *name;                 /* [a-z0-9_]+, unique: "opencl" */
    const tf_backend_iface *iface;
    void *ctx;
    int device_count;                 /* may be 0 */
    const tf_backend_device *devices;
    /* Why device_count is 0 (or anything else tf-info should show); may be NULL. */
    const char *note;
} tf_backend_reg;

/* Services the core offers plugins (so they never link the core). */
typedef enum tf_log_level { TF_LOG_DEBUG = 0, TF_LOG_INFO, TF_LOG_WARN, TF_LOG_ERROR } tf_log_level;

typedef struct tf_host_api {
    uint32_t struct_size;
    uint32_t abi_major, abi_minor;
    /* Messages go to stderr when at or above TF_LOG_LEVEL (default warn). */
    void (*log)(tf_log_level level, const char *fmt, ...);
    /* Set the calling thread's tf_last_error() detail; returns `s`. */
    tf_status (*set_error)(tf_status s, const char *fmt, ...);
    /* Host memory from the library's allocator: counted, and failed on
     * request by tf_debug_fail_allocation, so a backend that uses it has its
     * failure paths tested with the library's. alloc(0) returns a pointer. */
    void *(*alloc)(size_t nbytes);
    void (*free)(void *p);
    /* (SDK 2.1) The calling thread's message, as tf_last_error(). */
    const char *(*last_error)(void);
    /* (SDK 2.5) Environment variables, read as the core reads its own: a
     * value is taken only when all of it means what the variable means;
     * otherwise it is ignored with one warning naming the variable and the
     * value. Each returns whether a valid value was found (env_choice: its
     * index, or -1). Unset and empty are the same. Check the slots with
     * TF_HAS_FIELD before use: an older host lacks them. */
    bool (*env_int)(const char *name, int64_t lo, int64_t hi, int64_t *out);
    bool (*env_number)(const char *name, double lo, double hi, double *out);
    int (*env_choice)(const char *name, const char *const *choices, int n);
    bool (*env_flag)(const char *name, bool fallback);                 /* 0/1, false/true, off/on, no/yes */
    const char *(*env_string)(const char *name);                       /* a path or a list; NULL when unset */
} tf_host_api;

typedef tf_status (*tf_backend_plugin_init_fn)(const tf_host_api *host, tf_backend_reg *out);

/* Register a backend from inside the process. Its devices get names
 * "<name>:<i>" and take part in selection and fallback like any other.
 * TF_ERR_ABI_MISMATCH if reg->abi_major differs, TF_ERR_ALREADY_EXISTS if
 * the name is taken. Thread safe. */
TF_API tf_status tf_backend_register(const tf_backend_reg *reg);
/* A backend's extra by name through its get_proc_address (NULL if the
 * backend is unknown, has no such slot or no such extra). */
TF_API void *tf_backend_proc_address(const char *backend_name, const char *name);
/* Host services for in-process backends (the same table plugins receive). */
TF_API const tf_host_api *tf_host(void);

/* Helpers for backends: the element count and whether a descriptor is
 * contiguous row-major. Header-only so plugins need not link the core. */
static inline int64_t tf_desc_numel(const tf_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

static inline bool tf_desc_is_contiguous(const tf_tensor_desc *d) {
    int64_t expect = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != expect) return false;
        expect *= d->shape[i];
    }
    return true;
}

#ifdef __cplusplus
}
#endif
#endif /* TENSORFRAME_BACKEND_H */
