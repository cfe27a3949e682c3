/* DLPack 1.x in and out (tensorframe/dlpack.h). Exports hand out the
 * tensor's own memory (host memory, or device memory where the backend
 * gives its native address) with a reference held until the consumer's
 * deleter;
 * imports wrap the producer's memory in a CPU buffer whose release hook
 * (memory.c) calls the producer's deleter when the buffer is truly free. */
#define _DEFAULT_SOURCE   /* mincore */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats.h"
#include "tensorframe/dlpack.h"

/* ---- dtypes ---- */

static bool dl_dtype_of(tf_dtype dt, DLDataType *out) {
    switch (dt) {
    case TF_F32: *out = (DLDataType){kDLFloat, 32, 1}; return true;
    case TF_F64: *out = (DLDataType){kDLFloat, 64, 1}; return true;
    case TF_F16: *out = (DLDataType){kDLFloat, 16, 1}; return true;
    case TF_BF16: *out = (DLDataType){kDLBfloat, 16, 1}; return true;
    case TF_I8: *out = (DLDataType){kDLInt, 8, 1}; return true;
    case TF_I32: *out = (DLDataType){kDLInt, 32, 1}; return true;
    case TF_I64: *out = (DLDataType){kDLInt, 64, 1}; return true;
    case TF_U8: *out = (DLDataType){kDLUInt, 8, 1}; return true;
    case TF_BOOL: *out = (DLDataType){kDLBool, 8, 1}; return true;
    case TF_C64: *out = (DLDataType){kDLComplex, 64, 1}; return true;
    case TF_C128: *out = (DLDataType){kDLComplex, 128, 1}; return true;
    default: return false;                         /* the block-quantized dtypes */
    }
}

static bool tf_dtype_of_dl(DLDataType d, tf_dtype *out) {
    if (d.lanes != 1) return false;
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        DLDataType m;
        if (dl_dtype_of((tf_dtype)dt, &m) && m.code == d.code && m.bits == d.bits) {
            *out = (tf_dtype)dt;
            return true;
        }
    }
    return false;
}

/* ---- export ---- */

/* One allocation: the managed tensor, then its shape and strides. */
typedef struct exported {
    DLManagedTensorVersioned m;
    tf_tensor *t;                                  /* the reference the consumer holds */
    int64_t dims[2 * TF_MAX_DIMS];
} exported;

static void exported_delete(DLManagedTensorVersioned *self) {
    exported *e = (exported *)self;
    tf_tensor_release(e->t);
    tf__free(e);
}

/* Where t's storage lives: host memory (kDLCPU), or a device's memory as
 * its backend's native API addresses it (the buffer_native slot). */
static tf_status memory_of(const char *fn, const tf_tensor *t, char **base, DLDevice *where) {
    tf_device *dev = t->storage->dev;
    void *(*host_ptr)(void *, tf_backend_buffer *) = TF_DEVICE_SLOT(dev, buffer_host_ptr);
    tf_status (*native)(void *, tf_backend_buffer *, void **, int32_t *, int32_t *) =
        TF_DEVICE_SLOT(dev, buffer_native);
    *where = (DLDevice){kDLCPU, 0};
    if (tf__device_is_host(dev) && host_ptr) {
        *base = host_ptr(dev->bdev.ctx, t->storage->buf);
    } else if (native) {
        void *p = NULL;
        int32_t type = 0, id = 0;
        tf_status s = native(dev->bdev.ctx, t->storage->buf, &p, &type, &id);
        if (s != TF_OK) return tf__error_context(s, "%s", fn);
        *base = p;
        *where = (DLDevice){(DLDeviceType)type, id};
    }
    if (!*base && t->storage->nbytes)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: %s's memory cannot be handed out (neither host memory nor "
                         "addressable device memory); tf_tensor_to(t, cpu) first", fn, dev->name);
    return TF_OK;
}

tf_status tf_tensor_native_memory(const tf_tensor *t, void **data, DLDevice *device) {
    if (!data || !device) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_native_memory: data or device is NULL");
    *data = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_native_memory: tensor is NULL");
    char *base = NULL;
    tf_status s = memory_of("tf_tensor_native_memory", t, &base, device);
    if (s != TF_OK) return s;
    *data = base ? base + t->offset : NULL;
    return TF_OK;
}

tf_status tf_tensor_to_dlpack(const tf_tensor *t, DLManagedTensorVersioned **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_to_dlpack: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_to_dlpack: tensor is NULL");
    DLDataType dl;
    if (!dl_dtype_of(t->dtype, &dl))
        return tf__error(TF_ERR_DTYPE, "tf_tensor_to_dlpack: DLPack has no %s (a block-quantized dtype); "
                         "dequantize first", tf_dtype_name(t->dtype));
    tf_device *dev = t->storage->dev;
    DLDevice where;
    char *base = NULL;
    tf_status s = memory_of("tf_tensor_to_dlpack", t, &base, &where);
    if (s != TF_OK) return s;
    s = tf__device_synchronize_all(dev);            /* the consumer reads what queued work writes */
    if (s != TF_OK) return s;
    exported *e = tf__malloc(sizeof *e);
    if (!e) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_tensor_to_dlpack: out of host memory");
    memset(e, 0, sizeof *e);
    e->t = tf_tensor_retain((tf_tensor *)t);
    for (int i = 0; i < t->ndim; i++) {
        e->dims[i] = t->shape[i];
        e->dims[TF_MAX_DIMS + i] = t->strides[i];
    }
    e->m.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    e->m.manager_ctx = e;
    e->m.deleter = exported_delete;
    e->m.flags = 0;
    e->m.dl_tensor = (DLTensor){base ? base + t->offset : NULL, where, t->ndim, dl,
                                e->dims, e->dims + TF_MAX_DIMS, 0};
    *out = &e->m;
    return TF_OK;
}

/* ---- import ---- */

static void call_deleter(void *ctx) {
    DLManagedTensorVersioned *m = ctx;
    if (m->deleter) m->deleter(m);
}

/* The bytes from the first element to one past the last (0 when empty);
 * false if the span is larger than any object can be. */
static bool span_of(const DLTensor *d, size_t elsize, const int64_t *strides, size_t *bytes) {
    int64_t last = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) {
            *bytes = 0;
            return true;
        }
        int64_t step;
        if (tf__mul_overflows(d->shape[i] - 1, strides[i], &step) || last > INT64_MAX - step) return false;
        last += step;
    }
    if ((uint64_t)last + 1 > (uint64_t)PTRDIFF_MAX / elsize) return false;   /* no object is larger */
    *bytes = (size_t)(last + 1) * elsize;
    return true;
}

/* Is [p, p + n) this process's memory: a hostile offset or stride points
 * outside anything mapped. On Linux, msync(MS_ASYNC) over the span's pages
 * fails with ENOMEM if any of them is unmapped and otherwise does nothing
 * (a no-op since 2.6.19): every page checked in one 0.14 us call (mincore,
 * used before, cost 0.64 us a page probed and only probed the two ends).
 * Elsewhere mincore probes the pages of the first and last bytes. */
static bool bytes_mapped(const char *p, size_t n) {
#if defined(__unix__) || defined(__APPLE__)
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !n) return true;
    const uintptr_t mask = ~(uintptr_t)(page - 1);
    const uintptr_t first = (uintptr_t)p & mask, last = ((uintptr_t)p + n - 1) & mask;
#if defined(__linux__)
    return !(msync((void *)first, (size_t)(last - first) + (size_t)page, MS_ASYNC) != 0 && errno == ENOMEM);
#else
    unsigned char vec[1];
    const uintptr_t ends[2] = {first, last};
    for (int i = 0; i < 2; i++)
        if (mincore((void *)ends[i], (size_t)page, (void *)vec) != 0 && errno == ENOMEM) return false;
#endif
#endif
    return true;
}

static tf_status check_import(const DLManagedTensorVersioned *m, tf_dtype *dt, int64_t *strides) {
    const char *fn = "tf_tensor_from_dlpack";
    if (m->version.major != 1)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: DLPack %u.%u; tensorframe reads 1.x", fn, m->version.major,
                         m->version.minor);
    const DLTensor *d = &m->dl_tensor;
    DLDeviceType type = d->device.device_type;
    if (type != kDLCPU && type != kDLCUDAHost && type != kDLROCMHost)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: device type %d; tensorframe imports host memory (kDLCPU, "
                         "kDLCUDAHost, kDLROCMHost) - copy it to the host first", fn, (int)type);
    if (!tf_dtype_of_dl(d->dtype, dt))
        return tf__error(TF_ERR_DTYPE, "%s: dtype code %u, %u bits, %u lanes has no tensorframe dtype", fn,
                         d->dtype.code, d->dtype.bits, d->dtype.lanes);
    if (d->ndim < 0 || d->ndim > TF_MAX_DIMS)
        return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: %d dimensions, at most %d allowed", fn, d->ndim, TF_MAX_DIMS);
    if (d->ndim > 0 && !d->shape) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: shape is NULL", fn);
    int64_t numel;
    tf_status s = tf__check_shape(fn, *dt, d->ndim, d->shape, &numel);
    if (s != TF_OK) return s;
    if (d->strides) memcpy(strides, d->strides, sizeof(int64_t) * (size_t)d->ndim);
    else tf__contiguous_strides(d->ndim, d->shape, strides);
    for (int i = 0; i < d->ndim; i++)
        if (strides[i] < 0)
            return tf__error(TF_ERR_UNSUPPORTED, "%s: stride %lld on axis %d is negative; tensorframe views "
                             "step forward only", fn, (long long)strides[i], i);
    if (numel > 0 && !d->data) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: data is NULL", fn);
    return TF_OK;
}

/* Where the elements are: data + byte_offset, and `bytes` from there, all
 * inside this process's mapped memory without wrapping the address space. */
static tf_status check_memory(const DLTensor *d, size_t elsize, const int64_t *strides, size_t *bytes) {
    const char *fn = "tf_tensor_from_dlpack";
    if (!span_of(d, elsize, strides, bytes))
        return tf__error(TF_ERR_SIZE, "%s: the strides reach past the addressable size", fn);
    uintptr_t base = (uintptr_t)d->data;
    if (d->byte_offset > UINTPTR_MAX - base || *bytes > UINTPTR_MAX - (base + d->byte_offset))
        return tf__error(TF_ERR_SIZE, "%s: byte_offset %llu and %zu bytes of elements wrap the address space", fn,
                         (unsigned long long)d->byte_offset, *bytes);
    if (*bytes && !bytes_mapped((const char *)(base + d->byte_offset), *bytes))   /* integers: no pointer overflow */
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: byte_offset %llu and strides reach %zu bytes, past the "
                         "producer's memory (not mapped in this process)", fn, (unsigned long long)d->byte_offset,
                         *bytes);
    return TF_OK;
}

/* Element by element, byte by byte: a gather that reads misaligned memory
 * without loading a misaligned float. dst is contiguous. */
static void gather_bytes(char *dst, const char *src, int ndim, const int64_t *shape, const int64_t *strides,
                         size_t elsize, int64_t numel) {
    int64_t dense[TF_MAX_DIMS];
    tf__contiguous_strides(ndim, shape, dense);
    if (!memcmp(dense, strides, sizeof(int64_t) * (size_t)ndim)) {     /* row-major already: one copy */
        memcpy(dst, src, (size_t)numel * elsize);
        return;
    }
    int64_t idx[TF_MAX_DIMS] = {0};
    for (int64_t n = 0; n < numel; n++) {
        int64_t at = 0;
        for (int i = 0; i < ndim; i++) at += idx[i] * strides[i];
        memcpy(dst + (size_t)n * elsize, src + (size_t)at * elsize, elsize);
        for (int i = ndim - 1; i >= 0 && ++idx[i] == shape[i]; i--) idx[i] = 0;
    }
}

/* A contiguous copy of the producer's elements in tensorframe's memory. */
static tf_status import_copy(const DLTensor *d, tf_dtype dt, const int64_t *strides, tf_tensor **out) {
    tf_tensor *t = NULL;
    tf_status s = tf_empty(tf__cpu_device(), dt, d->ndim, d->shape, &t);
    if (s != TF_OK) return s;
    void *dst = NULL;
    DLDevice where;
    if ((s = tf_tensor_native_memory(t, &dst, &where)) != TF_OK) {
        tf_tensor_release(t);
        return s;
    }
    if (dst) gather_bytes(dst, (const char *)d->data + d->byte_offset, d->ndim, d->shape, strides, tf_dtype_size(dt),
                          tf_tensor_numel(t));
    *out = t;
    return TF_OK;
}

tf_status tf_tensor_from_dlpack(DLManagedTensorVersioned *m, tf_tensor **out) {
    const char *fn = "tf_tensor_from_dlpack";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: managed tensor is NULL", fn);
    tf_dtype dt = TF_F32;
    int64_t strides[TF_MAX_DIMS];
    size_t bytes;
    tf_status s = check_import(m, &dt, strides);
    if (s == TF_OK) s = check_memory(&m->dl_tensor, tf_dtype_size(dt), strides, &bytes);
    if (s != TF_OK) return s;
    const DLTensor *d = &m->dl_tensor;
    tf_device *cpu = tf__cpu_device();
    if (!cpu) return tf__error(TF_ERR_BACKEND, "%s: no CPU device", fn);
    char *first = d->data ? (char *)d->data + d->byte_offset : NULL;
    /* Read-only memory is copied (tensorframe could write through a view),
     * and so is memory misaligned for its dtype (kernels load whole
     * elements): the copy is tensorframe's, the producer's goes back now. */
    bool read_only = m->flags & DLPACK_FLAG_BITMASK_READ_ONLY;
    bool misaligned = (uintptr_t)first % tf_dtype_size(dt) != 0;
    if (read_only || misaligned) {
        tf_tensor *copy = NULL;
        if ((s = import_copy(d, dt, strides, &copy)) != TF_OK)
            return tf__error_context(s, "%s: copying a %s tensor", fn, read_only ? "read-only" : "misaligned");
        call_deleter(m);
        *out = copy;
        return TF_OK;
    }
    tf_backend_buffer *buf = NULL;
    s = cpu->bdev.iface->buffer_from_host_ptr(cpu->bdev.ctx, first, bytes, &buf);
    if (s != TF_OK) return tf__error_context(s, "%s", fn);
    /* The hook first: once the tensor exists, its release must reach it. */
    if ((s = tf__buffer_on_release(buf, call_deleter, m)) != TF_OK) {
        cpu->bdev.iface->buffer_free(cpu->bdev.ctx, buf);
        return tf__error_context(s, "%s", fn);
    }
    tf_tensor *t = NULL;
    s = tf__tensor_wrap(cpu, buf, bytes, dt, d->ndim, d->shape, strides, &t);
    if (s != TF_OK) {
        tf__free(tf__buffer_take_release(buf));   /* the caller keeps m: the hook must not run */
        cpu->bdev.iface->buffer_free(cpu->bdev.ctx, buf);
        return tf__error_context(s, "%s", fn);
    }
    *out = t;
    return TF_OK;
}

/* ---- DLPack 0.x: adapters over the versioned structures ---- */

/* A legacy export wraps a versioned one: the legacy deleter runs it. */
typedef struct legacy_export {
    DLManagedTensor m;
    DLManagedTensorVersioned *inner;
} legacy_export;

static void legacy_export_delete(DLManagedTensor *self) {
    legacy_export *e = (legacy_export *)self;
    e->inner->deleter(e->inner);
    tf__free(e);
}

tf_status tf_tensor_to_dlpack_legacy(const tf_tensor *t, DLManagedTensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_to_dlpack_legacy: out is NULL");
    *out = NULL;
    legacy_export *e = tf__malloc(sizeof *e);
    if (!e) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_tensor_to_dlpack_legacy: out of host memory");
    tf_status s = tf_tensor_to_dlpack(t, &e->inner);
    if (s != TF_OK) {
        tf__free(e);
        return tf__error_context(s, "tf_tensor_to_dlpack_legacy");
    }
    e->m = (DLManagedTensor){e->inner->dl_tensor, e, legacy_export_delete};
    *out = &e->m;
    return TF_OK;
}

/* A legacy import is seen through a versioned wrapper whose deleter runs
 * the producer's and frees the wrapper. */
static void legacy_import_delete(DLManagedTensorVersioned *self) {
    DLManagedTensor *legacy = self->manager_ctx;
    if (legacy->deleter) legacy->deleter(legacy);
    tf__free(self);
}

tf_status tf_tensor_from_dlpack_legacy(DLManagedTensor *managed, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_from_dlpack_legacy: out is NULL");
    *out = NULL;
    if (!managed) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_from_dlpack_legacy: managed tensor is NULL");
    DLManagedTensorVersioned *v = tf__malloc(sizeof *v);
    if (!v) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_tensor_from_dlpack_legacy: out of host memory");
    *v = (DLManagedTensorVersioned){{1, 0}, managed, legacy_import_delete, 0, managed->dl_tensor};
    tf_status s = tf_tensor_from_dlpack(v, out);
    if (s != TF_OK) {
        tf__free(v);                     /* refused: the producer's tensor stays the caller's */
        return tf__error_context(s, "tf_tensor_from_dlpack_legacy");
    }
    return TF_OK;
}
