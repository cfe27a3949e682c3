/* Core-private declarations. Nothing here is seen by backends: they meet
 * the core only through include/tensorframe/backend.h. */
#ifndef TF_CORE_H
#define TF_CORE_H

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
void tf__log(tf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "[2,3,4]" into buf. */
const char *tf__shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- dtypes (dtype.c) ---- */
bool tf__dtype_valid(tf_dtype dt);

/* ---- devices and registry (registry.c) ---- */
typedef struct tf_backend_entry tf_backend_entry;

struct tf_device {
    char name[64];
    tf_backend_entry *backend;
    int index;                           /* within its backend */
    tf_backend_device bdev;
    tf_device_type type;
    bool emulated;
    _Atomic uint64_t ops;
    _Atomic uint64_t fallbacks[TF_OP_COUNT];
    atomic_bool fallback_warned[TF_OP_COUNT];
};

/* Initialize once (thread safe); returns TF_OK or an init error. */
tf_status tf__init(void);
tf_device *tf__cpu_device(void);
/* Position of the device's backend in the priority list; lower is better,
 * INT32_MAX if the backend is not in the list. */
int tf__device_rank(const tf_device *d);
const char *tf__backend_name(const tf_device *d);

/* The built-in CPU backend, registered like a plugin. */
tf_status tf__cpu_backend_init(const tf_host_api *host, tf_backend_reg *out);

/* ---- tensors (tensor.c) ---- */
typedef struct tf_storage {
    _Atomic int32_t refs;
    tf_device *dev;
    tf_backend_buffer *buf;
    size_t nbytes;
} tf_storage;

struct tf_tensor {
    _Atomic int32_t refs;
    tf_storage *storage;
    tf_dtype dtype;
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t strides[TF_MAX_DIMS];        /* elements */
    int64_t offset;                      /* bytes */
};

/* Validate dtype/ndim/shape and return the element count (checking that
 * numel * dtype size fits in int64). `fn` names the caller for messages. */
tf_status tf__check_shape(const char *fn, tf_dtype dt, int ndim, const int64_t *shape, int64_t *numel);
/* New contiguous tensor with uninitialized storage on dev. */
tf_status tf__tensor_alloc(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                           tf_tensor **out);
/* New view sharing t's storage with the given geometry. */
tf_status tf__tensor_view(const tf_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t offset, tf_tensor **out);
void tf__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
tf_tensor_desc tf__desc(const tf_tensor *t);
/* Copy host bytes into a tensor's storage / storage bytes to host. */
tf_status tf__upload(tf_storage *s, size_t offset, const void *src, size_t n);
tf_status tf__download(tf_storage *s, size_t offset, void *dst, size_t n);

/* ---- dispatch (dispatch.c) ---- */
/* Run a validated, normalized op on dev, falling back to the CPU if the
 * backend does not support it. Descriptors must point at dev's buffers. */
tf_status tf__dispatch(const char *fn, tf_device *dev, tf_op *op);
/* Choose the device for an op over n inputs per the mixed-device policy and
 * move inputs there; moved[i] is a new reference (or a retained input). */
tf_status tf__place_inputs(const char *fn, int n, const tf_tensor *const *in, tf_device **dev,
                           tf_tensor **moved);
/* tf__place_inputs, then convert every input to dtype dt except those
 * marked in keep_dtype (may be NULL: convert all). On failure every ready[i]
 * is released and NULL. */
tf_status tf__prepare_inputs(const char *fn, int n, const tf_tensor *const *in, const bool *keep_dtype, tf_dtype dt,
                             tf_device **dev, tf_tensor **ready);
/* Allocate the output on dev (poisoned when debugging) for an op. */
tf_status tf__op_output(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                        tf_tensor **out);
/* The copy op: a contiguous dt copy of t on t's device. */
tf_status tf__copy_cast(const char *fn, const tf_tensor *t, tf_dtype dt, tf_tensor **out);
/* The copy op into an existing view `dst` (same shape, same device),
 * converting to dst's dtype. */
tf_status tf__copy_into(const char *fn, const tf_tensor *src, tf_tensor *dst);

/* ---- the op table ---- */
typedef enum {
    TF_SHAPE_BROADCAST, TF_SHAPE_MATMUL, TF_SHAPE_REDUCE, TF_SHAPE_SAME, TF_SHAPE_UNARY, TF_SHAPE_WHERE,
    TF_SHAPE_SCAN, TF_SHAPE_INDEXED, TF_SHAPE_TRIANGLE, TF_SHAPE_GEMM, TF_SHAPE_ROW, TF_SHAPE_ROPE,
    TF_SHAPE_ATTENTION, TF_SHAPE_CONV, TF_SHAPE_POOL, TF_SHAPE_OPTIMIZER, TF_SHAPE_COMPOSITE, TF_SHAPE_CREATE
} tf_shape_rule;
typedef enum {
    TF_DTRULE_PROMOTE, TF_DTRULE_PROMOTE_FLOAT, TF_DTRULE_SUM, TF_DTRULE_SAME, TF_DTRULE_CAST,
    TF_DTRULE_COMPARE, TF_DTRULE_LOGICAL, TF_DTRULE_BOOL, TF_DTRULE_INDEX, TF_DTRULE_FIRST
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
#define TF_DTYPES_NUMERIC (TF_DTYPES_FLOAT | (1u << TF_I8) | (1u << TF_I32) | (1u << TF_I64) | (1u << TF_U8))
#define TF_DTYPES_ALL (TF_DTYPES_NUMERIC | (1u << TF_BOOL))

#endif /* TF_CORE_H */
