/* The engine's private declarations: errors, allocation, dtypes, the
 * registry, tensors and memory, streams, dispatch, graphs, the profiler and
 * scopes (src/engine). The op library (src/ops) and the file formats
 * (src/formats) build on them; the engine includes neither. Nothing here is
 * seen by backends: they meet the core only through
 * include/tensorframe/backend.h. */
#ifndef TF_ENGINE_H
#define TF_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "tensorframe/backend.h"
#include "tensorframe/tensorframe.h"

/* ---- errors (error.c) ---- */
/* Record the thread's detail message and return s. */
tf_status tf__error(tf_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
tf_status tf__verror(tf_status s, const char *fmt, va_list ap);
/* Forget the thread's last message (cheap: used on hot paths). */
void tf__clear_error(void);
/* Put "context: " before the thread's detail message (keeping it) and return s. */
tf_status tf__error_context(tf_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A public function's return: a failure whose message does not start with
 * "fn:" (it came from a function fn called) gets "fn: " put before it. */
tf_status tf__in(const char *fn, tf_status s);
void tf__log(tf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "[2,3,4]" into buf. */
const char *tf__shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- host allocations (alloc.c): counted, and failed on request in tests ---- */
bool tf__alloc_should_fail(void);
void *tf__malloc(size_t n);
void *tf__calloc(size_t count, size_t size);
void *tf__realloc(void *p, size_t n);
char *tf__strdup(const char *s);
void tf__free(void *p);

/* Room for `need` entries of `elem` bytes in *array (doubling from 8);
 * false, *array untouched, when the memory is not there. */
bool tf__grow(void **array, int *cap, int need, size_t elem);

/* ---- checked arithmetic: every size built from caller values goes through
 * these (true when the result does not fit; *r is then unspecified) ---- */
static inline bool tf__add_overflows(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline bool tf__mul_overflows(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }

/* Does t's layout map two index tuples to one element (a stride-0 axis of
 * extent > 1, or strides that interleave)? In-place ops refuse such outputs. */
bool tf__overlaps_itself(const tf_tensor *t);
/* Do two tensors' byte ranges in one storage intersect? */
bool tf__overlap(const tf_tensor *a, const tf_tensor *b);

/* ---- dtypes (dtype.c) ---- */
bool tf__dtype_valid(tf_dtype dt);
/* Bytes of n elements of dt (n a whole number of blocks for a quantized
 * dtype: the layout checks keep it so). */
int64_t tf__bytes_of(tf_dtype dt, int64_t n);
/* A dtype's kind for PyTorch's promotion and out= rules: bool 0 < integer 1 < float 2. */
int tf__dtype_category(tf_dtype dt);
/* A layout a block-quantized tensor may take: the last axis whole blocks
 * with stride 1, every other stride a whole number of blocks, the element
 * offset too. TF_OK for element dtypes; else TF_ERR_DTYPE naming fn. */
tf_status tf__check_block_layout(const char *fn, tf_dtype dt, int ndim, const int64_t *shape,
                                 const int64_t *strides);

/* ---- devices and registry (registry.c) ---- */
typedef struct tf_backend_entry tf_backend_entry;
typedef struct tf__deferred tf__deferred;

/* stream.c: a public stream; bs NULL is the device's default queue. */
struct tf_stream {
    tf_device *dev;
    tf_backend_stream *bs;
    uint32_t generation;
    tf_stream *next;                     /* in dev->streams */
};
struct tf_event {
    unsigned flags;
    tf_device *dev;                      /* recorded on last; NULL: never recorded */
    tf_backend_event *be;                /* dev's event; NULL where dev has none */
    uint64_t host_ns;                    /* no backend event: when the recorded work was done */
    uint32_t generation;
};

struct tf_device {
    char name[64];
    tf_backend_entry *backend;
    int index;                           /* within its backend */
    tf_backend_device bdev;
    tf_device_type type;
    bool emulated;
    bool async;                          /* caps.async: ops return before the work is done */
    int global_index;                    /* position in tf_device_at's order */
    tf_stream default_stream;            /* bs NULL: the backend's default queue */
    pthread_mutex_t streams_lock;        /* streams and deferred */
    tf_stream *streams;                  /* made by tf_stream_create, not yet destroyed */
    _Atomic int queues;                  /* of those, how many have a queue of their own */
    tf__deferred *deferred;              /* freed buffers waiting for the queues (stream.c) */
    _Atomic int n_deferred;
    tf_alloc_conf alloc_conf;            /* as last set (memory.c); limit_fraction kept as given */
    _Atomic uint64_t ops;
    _Atomic uint64_t fallbacks[TF_OP_COUNT];
    atomic_bool fallback_warned[TF_OP_COUNT];
};

/* Which initialization of the library this is: tf_shutdown ends one. A
 * storage from an earlier one outlived its device. */
uint32_t tf__generation(void);
/* Is dev the host backend's (built-in, never unloaded)? */
bool tf__device_is_host(const tf_device *dev);

/* Initialize once (thread safe); returns TF_OK or an init error. */
tf_status tf__init(void);
tf_device *tf__cpu_device(void);
/* Position of the device's backend in the priority list; lower is better,
 * INT32_MAX if the backend is not in the list. */
int tf__device_rank(const tf_device *d);
const char *tf__backend_name(const tf_device *d);

/* An optional slot of a device's or backend's table, or NULL when the
 * table (as its backend was built) does not hold it. */
#define TF_DEVICE_SLOT(d, f) (TF_HAS_FIELD((d)->bdev.iface, tf_device_iface, f) ? (d)->bdev.iface->f : NULL)

/* Order the destination's stream after the source's queued work (before a
 * peer copy), or the source's after the destination's (after it), with an
 * event: both devices of one backend. */
tf_status tf__stream_wait(tf_device *waiter, tf_device *signaler);

/* ---- streams (stream.c) ---- */
/* The calling thread's current queue on dev (NULL: the default): what every
 * backend call that queues work is given. */
tf_backend_stream *tf__stream_of(const tf_device *dev);
void tf__streams_init(tf_device *d);
/* At tf_shutdown, before the backend goes: made streams are destroyed. */
void tf__streams_release(tf_device *d);
/* Wait for every queue of d; the first error. */
tf_status tf__device_synchronize_all(tf_device *d);
/* Before the core reads or writes dev's host memory itself. */
tf_status tf__host_sync(tf_device *dev);
/* memory.c's free, when other queues may still use buf: true when it is
 * kept until they pass this point (false: free it now). */
bool tf__deferred_free(tf_device *d, tf_backend_buffer *buf);
/* Free what the queues have passed. */
void tf__deferred_sweep(tf_device *d);

/* The built-in CPU backend, registered like a plugin. */
tf_status tf__cpu_backend_init(const tf_host_api *host, tf_backend_reg *out);

/* ---- tensors (tensor.c) ---- */
typedef struct tf_storage {
    _Atomic int32_t refs;
    tf_device *dev;
    tf_backend_buffer *buf;
    size_t nbytes;
    /* Enough to free the buffer after tf_shutdown, when dev is gone: the
     * library generation it was made in, and the host backend's own free
     * (library code, still mapped). */
    uint32_t generation;
    void (*host_free)(void *dev_ctx, tf_backend_buffer *buf);
    void *host_ctx;
    _Atomic uint32_t version;            /* bumped by every in-place write (autograd.c checks saved tensors) */
} tf_storage;

struct tf_tensor {
    _Atomic int32_t refs;
    tf_storage *storage;
    tf_dtype dtype;
    int ndim;
    int64_t offset;                      /* bytes */
    tf_scope *scope;                     /* the scope that owns its first reference (scope.c), or NULL */
    size_t scope_slot;
    struct tf__grad_meta *ag;            /* autograd state (autograd.c), NULL unless it requires a gradient */
    /* last: entries past ndim are zero up to TF_ZEROED_AXES (tensor_new) */
    int64_t shape[TF_MAX_DIMS];
    int64_t strides[TF_MAX_DIMS];        /* elements */
};

/* ---- autograd (autograd.c records and walks; src/ops/grad_rules.c computes) ----
 * A tensor that requires a gradient carries a meta: a leaf (fn NULL) keeps
 * the gradient backward accumulates; an op's output holds the node that
 * made it. Nodes keep what their rule reads and edges to their inputs'
 * nodes or leaves. */
#define TF__GRAD_MAX_IN 5
typedef struct tf__grad_node tf__grad_node;
typedef struct tf__grad_meta {
    tf_tensor *grad;                     /* a leaf's accumulated gradient, or NULL */
    tf__grad_node *fn;                   /* the node that made it (retained), NULL for a leaf */
} tf__grad_meta;
/* What a node's rule needs besides its tensors: the op, its parameters. */
typedef enum {
    TF__GRAD_UNARY, TF__GRAD_BINARY, TF__GRAD_REDUCE, TF__GRAD_MATMUL, TF__GRAD_VIEW, TF__GRAD_PERMUTE,
    TF__GRAD_SLICE, TF__GRAD_EXPAND, TF__GRAD_CAST, TF__GRAD_ROW, TF__GRAD_WHERE, TF__GRAD_GATHER,
    TF__GRAD_INDEX_SELECT, TF__GRAD_GEMM, TF__GRAD_CONV, TF__GRAD_POOL, TF__GRAD_SDPA,
    TF__GRAD_ROPE, TF__GRAD_CONCAT, TF__GRAD_PAD, TF__GRAD_TILE, TF__GRAD_FLIP, TF__GRAD_SCAN,
    TF__GRAD_TRIANGLE, TF__GRAD_QMATMUL, TF__GRAD_LINALG, TF__GRAD_NONE
} tf__grad_rule;
/* TF__GRAD_LINALG's function, in i[0] (i[1]: cholesky's upper). */
enum { TF__GRAD_INV, TF__GRAD_SOLVE, TF__GRAD_DET, TF__GRAD_LOGDET, TF__GRAD_CHOLESKY };
typedef struct tf__grad_args {
    tf__grad_rule rule;
    tf_op_kind op;
    tf_op_params p;                      /* the op's parameters: axis, keepdim, alpha, bounds, correction, eps */
    int64_t i[4];                        /* slice: axis, start, step; gemm: transpose a, transpose b;
                                            concat: axis, the first input's extent; pad, tile, flip:
                                            the count of v's (or axes') entries; triangle: diagonal */
    union {
        int perm[TF_MAX_DIMS];           /* permute; flip: the axes */
        int64_t v[2 * TF_MAX_DIMS];      /* pad: the pads; tile: the repetitions per axis */
    };
} tf__grad_args;
typedef struct tf__grad_edge {
    bool needs;                          /* the input requires a gradient */
    tf__grad_node *fn;                   /* its node (retained), or NULL */
    tf_tensor *leaf;                     /* or the leaf itself (retained) */
    tf_tensor *saved;                    /* its value, where the rule reads it (retained) */
    uint32_t version;                    /* saved's storage version when recorded */
    tf_dtype dtype;
    tf_device *dev;
    int ndim;
    int64_t shape[TF_MAX_DIMS];
} tf__grad_edge;
struct tf__grad_node {
    _Atomic int32_t refs;
    const char *fn;                      /* the public function that recorded it */
    tf__grad_args a;
    int n_in;
    tf__grad_edge in[TF__GRAD_MAX_IN];
    tf_tensor *out;                      /* the output's value, where the rule reads it (an alias) */
    uint32_t out_version;
    bool released;                       /* backward ran without TF_BACKWARD_RETAIN_GRAPH */
    tf__grad_node *free_next;            /* while being freed (autograd.c) */
    /* during one tf_backward */
    uint64_t walk;
    int deps;
    tf_tensor *pending;
};
/* The thread records nodes (grad mode on, not paused, an input requiring a gradient). */
bool tf__grad_wanted(int n, const tf_tensor *const *in);
void tf__grad_pause(void);
void tf__grad_resume(void);
/* After the forward ran with recording paused: record a node for *out
 * (s TF_OK), or pass s on. A failure releases *out and NULLs it. */
tf_status tf__grad_finish(const char *fn, tf_status s, const tf__grad_args *a, int n, const tf_tensor *const *in,
                          tf_tensor **out);
/* A function without a gradient rule (qr, svd, eigh, the transforms):
 * when an input requires a gradient, *out gets a node that tf_backward
 * refuses by fn's name (a failure releases *out and NULLs it). */
tf_status tf__grad_no_rule(const char *fn, int n, const tf_tensor *const *in, tf_tensor **out);
void tf__grad_meta_drop(tf_tensor *t);
/* A node lets go of what its rule reads (tf_backward, when it has run it). */
void tf__grad_node_drop_saved(tf__grad_node *n);
bool tf__same_shape(int na, const int64_t *a, int nb, const int64_t *b);
/* A leaf's gradient replaced by g, whose first reference it takes (tf__keep). */
void tf__grad_replace(tf_tensor *t, tf_tensor *g);
/* An in-place write into dst: refused (grad mode on, dst requires a
 * gradient), else dst's storage version is bumped. */
tf_status tf__grad_check_write(const char *fn, const tf_tensor *dst);
/* grad_rules.c: the gradients of a node's inputs from its output's
 * gradient g (grads[i] NULL where an input needs none or gets zero). */
tf_status tf__grad_rule_run(const tf__grad_node *n, const tf_tensor *g, tf_tensor **grads);
/* Record in a public function fn that returns through out: when an input
 * requires a gradient, runs `call` (the function itself, so argument
 * errors come from it) with recording paused, then records a node whose
 * args `fill` sets (an expression on ga_, a zeroed tf__grad_args). Built
 * only when recording: the common path pays a thread-local test. */
#define TF__GRAD(fn, out, call, fill, ...)                                                      \
    do {                                                                                       \
        const tf_tensor *gin_[] = {__VA_ARGS__};                                               \
        enum { gn_ = (int)(sizeof gin_ / sizeof *gin_) };                                      \
        if ((out) && tf__grad_wanted(gn_, gin_)) {                                             \
            tf__grad_args ga_;                                                                 \
            memset(&ga_, 0, sizeof ga_);                                                       \
            (void)(fill);                                                                      \
            tf__grad_pause();                                                                  \
            tf_status gs_ = (call);                                                            \
            tf__grad_resume();                                                                 \
            return tf__grad_finish((fn), gs_, &ga_, gn_, gin_, (out));                         \
        }                                                                                      \
    } while (0)

/* scope.c: list a new tensor record in the thread's innermost open scope
 * (false: no memory for the list), and take a tensor released to zero off
 * its scope's list. */
bool tf__scope_adopt(tf_tensor *t);
void tf__scope_forget(tf_tensor *t);
/* A tensor the library made and keeps past the call (an optimizer's state,
 * a gradient): its first reference leaves any scope, so that the caller's
 * tf_scope_end does not release what the library still holds. */
static inline tf_tensor *tf__keep(tf_tensor *t) {
    if (t) tf__scope_forget(t);
    return t;
}
/* At tf_shutdown: every thread's open scopes end (their tensors released). */
void tf__scope_shutdown(void);

/* Validate dtype/ndim/shape and return the element count (checking that
 * numel * dtype size fits in int64). `fn` names the caller for messages. */
tf_status tf__check_shape(const char *fn, tf_dtype dt, int ndim, const int64_t *shape, int64_t *numel);
/* memory.c: a buffer from dev's backend (counted for fault injection,
 * recorded in the TF_ALLOC_TRACE file) and its return; the trace file is
 * closed at tf_shutdown (and reopened, truncated, by the next use). */
tf_status tf__buffer_alloc(tf_device *dev, size_t nbytes, tf_backend_buffer **out);
/* The same, never a capture's pooled buffer. */
tf_status tf__buffer_alloc_new(tf_device *dev, size_t nbytes, tf_backend_buffer **out);
void tf__buffer_free(tf_device *dev, tf_backend_buffer *buf);
/* The backend's free at once (the deferred frees end here). */
void tf__buffer_free_now(tf_device *dev, tf_backend_buffer *buf);
/* A buffer over memory tensorframe does not own (a DLPack import): `release`
 * runs once, when the buffer is truly freed. take/run split it for a free
 * that does not go through tf__buffer_free_now (after tf_shutdown). */
typedef struct release_hook release_hook;
tf_status tf__buffer_on_release(tf_backend_buffer *buf, void (*release)(void *ctx), void *ctx);
release_hook *tf__buffer_take_release(tf_backend_buffer *buf);
void tf__buffer_run_release(release_hook *h);
/* tensor.c: a tensor over buf (nbytes, from dev's buffer_from_host_ptr),
 * which it then owns. */
tf_status tf__tensor_wrap(tf_device *dev, tf_backend_buffer *buf, size_t nbytes, tf_dtype dt, int ndim,
                          const int64_t *shape, const int64_t *strides, tf_tensor **out);
void tf__alloc_trace_close(void);
/* At registration: the defaults, then TF_ALLOC_CONF's entries for d. */
void tf__alloc_conf_init(tf_device *d);
/* A contiguous copy of t on dev, or t retained if it is there; failures
 * name no function (the caller adds its context). */
tf_status tf__tensor_move(const tf_tensor *t, tf_device *dev, tf_tensor **out);
/* New contiguous tensor with uninitialized storage on dev (fn NULL: the
 * message of a failure names no function). */
tf_status tf__tensor_alloc(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                           tf_tensor **out);
/* New view sharing t's storage with the given geometry. */
tf_status tf__tensor_view(const tf_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t offset, tf_tensor **out);
void tf__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
tf_tensor_desc tf__desc(const tf_tensor *t);
/* The same, written into *d (the hot paths: no 536-byte copy). */
void tf__desc_into(tf_tensor_desc *d, const tf_tensor *t);
/* Axes past a tensor's or descriptor's ndim read as zero up to this many
 * (and, in a dispatched op, up to its widest descriptor): kernels read an
 * operand's strides over the output's axes (a 1-d index beside 2-d data),
 * as they did when every array was 8 long and zeroed whole. */
#define TF_ZEROED_AXES 8
/* env.c: environment variables read strictly. Each returns whether the
 * variable is set to a valid value (else it was unset, or ignored with one
 * warning naming it and its value). */
const char *tf__env_string(const char *name);                     /* NULL when unset or empty */
bool tf__env_int(const char *name, int64_t lo, int64_t hi, int64_t *out);
bool tf__env_number(const char *name, double lo, double hi, double *out);
int tf__env_choice(const char *name, const char *const *choices, int n);   /* the index, or -1 */
bool tf__env_flag(const char *name, bool fallback);                /* 0/1, false/true, off/on, no/yes */
void tf__env_warn(const char *name, const char *value, const char *expected);
/* dispatch.c: the byte range [lo, hi) of its buffer a descriptor touches. */
void tf__desc_extent(const tf_tensor_desc *d, uint64_t *lo, uint64_t *hi);
/* Copy host bytes into a tensor's storage / storage bytes to host. */
tf_status tf__upload(tf_storage *s, size_t offset, const void *src, size_t n);
tf_status tf__download(tf_storage *s, size_t offset, void *dst, size_t n);
/* ---- hooks (hooks.c): where graph capture and the profiler observe ---- */
/* Runs one op; *fell_back set when it ran on the CPU for its device. */
typedef tf_status (*tf__op_runner)(const char *fn, tf_device *dev, tf_op *op, bool *fell_back);
/* run(op), timed when profiling. */
tf_status tf__hook_run(const char *fn, tf_device *dev, tf_op *op, tf__op_runner run);
/* After an op dispatched with status s (a capture records it). */
void tf__hook_op_done(const char *fn, tf_device *dev, const tf_op *op, tf_status s);
/* True when work must go through ops, not raw buffer copies (a capture
 * records ops only). */
bool tf__hook_ops_only(void);
void tf__hook_alloc(tf_device *dev, tf_backend_buffer *buf, size_t nbytes);
/* Before a buffer is allocated: one an observer hands out again (a
 * capture's pool), or NULL. */
tf_backend_buffer *tf__hook_reuse(tf_device *dev, size_t nbytes);
/* Before a buffer is freed: true when an observer keeps it (a live graph's
 * ops still write it; the graph frees it when destroyed). */
bool tf__hook_free(tf_device *dev, tf_backend_buffer *buf);
void tf__hook_upload(tf_storage *s);
void tf__hook_download(const tf_storage *s);
void tf__hook_move(const tf_device *from, const tf_device *to);
/* Before index values are checked: true when an observer takes the check
 * over (a capture checks them at each replay, where they change). */
bool tf__hook_index_guard(const char *fn, const tf_tensor *index, int64_t extent);
/* At the first initialization (TF_PROFILE) and at tf_shutdown. */
void tf__hooks_start(void);
void tf__hooks_shutdown(void);
/* Run a recorded op as dispatch does, recording nothing; `native`: the
 * device ran it itself at capture (no supports() question again). */
tf_status tf__dispatch_recorded(const char *fn, tf_device *dev, tf_op *op, bool native);

/* The profiler's clock (stream.c's event times too), ns. */
uint64_t tf__profile_clock(void);
int tf__device_index(const tf_device *d);

/* ---- dispatch (dispatch.c) ---- */
/* Run a validated, normalized op on dev, falling back to the CPU if the
 * backend does not support it. Descriptors must point at dev's buffers. */
tf_status tf__dispatch(const char *fn, tf_device *dev, tf_op *op);
/* Choose the device for an op over n inputs per the mixed-device policy and
 * move inputs there; moved[i] is a new reference (or a retained input). On
 * failure nothing is held and every moved[i] is NULL. */
tf_status tf__place_inputs(const char *fn, int n, const tf_tensor *const *in, tf_device **dev,
                           tf_tensor **moved);

/* One op from placement to result, with one cleanup for every path:
 * tf__op_begin places the inputs on one device (mixed-device policy) and
 * converts input i to want[i] (TF_KEEP_DTYPE: as it is); the caller fills
 * c->op's input descriptors and parameters from c->in; tf__op_end allocates
 * the output, dispatches (unless `s` is already an error or the output is
 * empty) and releases what the call holds. The caller's tensors are never
 * released or written. With n == 0 (creation ops) the op runs on `dev`. */
#define TF_KEEP_DTYPE TF_DTYPE_COUNT
typedef struct tf_op_call {
    const char *fn;
    int n;
    tf_tensor *in[TF_OP_MAX_INPUTS];     /* placed and converted; owned by the call */
    tf_device *dev;
    tf_tensor *into;                     /* an existing tensor the result goes to (the _into forms), or NULL */
    bool grad;                           /* an input requires a gradient and no rule recorded the call */
    tf_op op;
} tf_op_call;
tf_status tf__op_begin(tf_op_call *c, const char *fn, tf_op_kind kind, int n, const tf_tensor *const *in,
                       const tf_dtype *want, tf_device *dev);
tf_status tf__op_end(tf_op_call *c, tf_status s, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out);
/* Allocate the output on dev (poisoned when debugging) for an op. */
tf_status tf__op_output(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                        tf_tensor **out);
/* A zeroed op of `kind` over n inputs, its struct_size set. */
void tf__op_init(tf_op *op, tf_op_kind kind, int n_inputs);
/* Whether dev runs `kind` over n inputs of dtype dt itself (no fallback). */
bool tf__device_runs(tf_device *dev, tf_op_kind kind, tf_dtype dt, int n);
/* The copy op: a contiguous dt copy of t on t's device. */
tf_status tf__copy_cast(const char *fn, const tf_tensor *t, tf_dtype dt, tf_tensor **out);
/* The copy op into an existing view `dst` (same shape, same device),
 * converting to dst's dtype. */
tf_status tf__copy_into(const char *fn, const tf_tensor *src, tf_tensor *dst);

/* ---- the op table ---- */
typedef enum {
    TF_SHAPE_BROADCAST, TF_SHAPE_MATMUL, TF_SHAPE_REDUCE, TF_SHAPE_SAME, TF_SHAPE_UNARY, TF_SHAPE_WHERE,
    TF_SHAPE_SCAN, TF_SHAPE_INDEXED, TF_SHAPE_TRIANGLE, TF_SHAPE_GEMM, TF_SHAPE_ROW, TF_SHAPE_ROPE,
    TF_SHAPE_ATTENTION, TF_SHAPE_CONV, TF_SHAPE_POOL, TF_SHAPE_OPTIMIZER, TF_SHAPE_COMPOSITE, TF_SHAPE_CREATE,
    TF_SHAPE_QMATMUL, TF_SHAPE_GEMM_EPILOGUE, TF_SHAPE_ADD_NORM, TF_SHAPE_QMATMUL_EPILOGUE,
    TF_SHAPE_SORT, TF_SHAPE_SEARCH, TF_SHAPE_CONV_GRAD, TF_SHAPE_POOL_GRAD, TF_SHAPE_ATTENTION_GRAD, TF_SHAPE_NORM_GRAD
} tf_shape_rule;
typedef enum {
    TF_DTRULE_PROMOTE, TF_DTRULE_PROMOTE_FLOAT, TF_DTRULE_SUM, TF_DTRULE_SAME, TF_DTRULE_CAST,
    TF_DTRULE_COMPARE, TF_DTRULE_LOGICAL, TF_DTRULE_BOOL, TF_DTRULE_INDEX, TF_DTRULE_FIRST, TF_DTRULE_REAL
} tf_dtype_rule;

typedef struct tf_op_info {
    const char *name;
    int arity;
    tf_shape_rule shape_rule;
    tf_dtype_rule dtype_rule;
    uint32_t accepts;                    /* dtype mask */
} tf_op_info;

extern const tf_op_info tf__op_table[TF_OP_COUNT];

#define TF_DTYPES_FLOAT ((1u << TF_F32) | (1u << TF_F64) | (1u << TF_F16) | (1u << TF_BF16))
#define TF_DTYPES_INTEGER ((1u << TF_I8) | (1u << TF_I32) | (1u << TF_I64) | (1u << TF_U8))
#define TF_DTYPES_NUMERIC (TF_DTYPES_FLOAT | TF_DTYPES_INTEGER)
#define TF_DTYPES_ALL (TF_DTYPES_NUMERIC | (1u << TF_BOOL))
#define TF_DTYPES_COMPLEX ((1u << TF_C64) | (1u << TF_C128))
#define TF_DTYPES_CFLOAT (TF_DTYPES_FLOAT | TF_DTYPES_COMPLEX)
#define TF_DTYPES_CNUMERIC (TF_DTYPES_NUMERIC | TF_DTYPES_COMPLEX)
#define TF_DTYPES_CALL (TF_DTYPES_ALL | TF_DTYPES_COMPLEX)
_Static_assert(TF_DTYPE_COUNT <= 32, "the op table's dtype masks are 32 bits");

#endif /* TF_ENGINE_H */
