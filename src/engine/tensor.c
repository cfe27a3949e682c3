/* Tensors: storage, geometry, views, reading to the host and moving
 * between devices. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- storage ---- */

/* A storage record owning buf: one reference, the library generation it was
 * made in, and the host backend's free for after tf_shutdown. */
static void storage_init(tf_storage *s, tf_device *dev, tf_backend_buffer *buf, size_t nbytes) {
    atomic_init(&s->refs, 1);
    s->dev = dev;
    s->buf = buf;
    s->nbytes = nbytes;
    s->generation = tf__generation();
    bool host = tf__device_is_host(dev);
    s->host_free = host ? dev->bdev.iface->buffer_free : NULL;
    s->host_ctx = host ? dev->bdev.ctx : NULL;
    atomic_init(&s->version, 0);
}

/* malloc, not calloc: glibc's calloc skips the per-thread cache, and these
 * small records are made and freed on every op. */
static tf_status storage_new(const char *fn, tf_device *dev, size_t nbytes, tf_storage **out) {
    tf_storage *s = tf__malloc(sizeof *s);
    if (!s) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s%sout of host memory for a storage record", fn ? fn : "", fn ? ": " : "");
    tf_backend_buffer *buf = NULL;
    tf_status st = tf__buffer_alloc(dev, nbytes, &buf);
    if (st != TF_OK) {
        tf__free(s);
        if (!fn) return tf__error_context(st, "cannot allocate %zu bytes on %s", nbytes, dev->name);
        return tf__error_context(st, "%s: cannot allocate %zu bytes on %s", fn, nbytes, dev->name);
    }
    storage_init(s, dev, buf, nbytes);
    *out = s;
    return TF_OK;
}

/* After tf_shutdown the device is gone: host memory goes back through the
 * host backend's free (library code); a plugin's memory went with its
 * backend's shutdown, and the plugin may be unmapped: it is not called. */
static void storage_release(tf_storage *s) {
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->generation == tf__generation()) {
        tf__buffer_free(s->dev, s->buf);
    } else if (s->host_free) {
        release_hook *h = tf__buffer_take_release(s->buf);
        s->host_free(s->host_ctx, s->buf);
        tf__buffer_run_release(h);
    }
    tf__free(s);
}

tf_status tf__upload(tf_storage *s, size_t offset, const void *src, size_t n) {
    if (n == 0) return TF_OK;
    tf__hook_upload(s);
    return s->dev->bdev.iface->buffer_upload(s->dev->bdev.ctx, tf__stream_of(s->dev), s->buf, offset, src, n);
}

tf_status tf__download(tf_storage *s, size_t offset, void *dst, size_t n) {
    if (n == 0) return TF_OK;
    tf__hook_download(s);
    return s->dev->bdev.iface->buffer_download(s->dev->bdev.ctx, tf__stream_of(s->dev), s->buf, offset, dst, n);
}

/* ---- geometry ---- */

tf_status tf__check_shape(const char *fn, tf_dtype dt, int ndim, const int64_t *shape, int64_t *numel) {
    if (!tf__dtype_valid(dt)) return tf__error(TF_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    if (ndim < 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: ndim %d is negative", fn, ndim);
    if (ndim > TF_MAX_DIMS)
        return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: %d dimensions, at most %d allowed", fn, ndim, TF_MAX_DIMS);
    if (ndim > 0 && !shape) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: shape is NULL for ndim %d", fn, ndim);
    int64_t n = 1, limit = INT64_MAX / (int64_t)tf_dtype_size(dt);
    size_t block = tf_dtype_block_size(dt);
    if (block > 1 && (ndim == 0 || shape[ndim - 1] % (int64_t)block != 0)) {
        char buf[256];
        return tf__error(TF_ERR_SHAPE, "%s: shape %s of %s: the last axis must be a whole number of %zu-element "
                         "blocks", fn, tf__shape_str(ndim, shape, buf, sizeof buf), tf_dtype_name(dt), block);
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tf__error(TF_ERR_SIZE, "%s: extent %lld of axis %d is negative", fn, (long long)shape[i], i);
        if (shape[i] > 0 && n > limit / shape[i]) {
            char buf[256];
            return tf__error(TF_ERR_SIZE, "%s: shape %s of %s overflows the addressable size", fn,
                             tf__shape_str(ndim, shape, buf, sizeof buf), tf_dtype_name(dt));
        }
        n *= shape[i];
    }
    if (numel) *numel = n;
    return TF_OK;
}

/* Row-major strides. An empty tensor's may not fit (shape (0, 2^62, 8)):
 * they are never used to reach an element, so past the overflow they are 0. */
void tf__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        if (tf__mul_overflows(s, shape[i] > 0 ? shape[i] : 1, &s)) s = 0;
    }
}

static tf_tensor *tensor_new(tf_storage *s, tf_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                             int64_t offset) {
    tf_tensor *t = tf__malloc(sizeof *t);
    if (!t) return NULL;
    memset(t, 0, offsetof(tf_tensor, shape));
    atomic_init(&t->refs, 1);
    t->storage = s;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->strides[i] = strides[i];
    }
    for (int i = ndim; i < TF_ZEROED_AXES; i++) t->shape[i] = t->strides[i] = 0;   /* what 8-axis code saw */
    t->offset = offset;
    if (!tf__scope_adopt(t)) {
        tf__free(t);
        return NULL;
    }
    return t;
}

tf_status tf__tensor_alloc(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                           tf_tensor **out) {
    int64_t numel;
    tf_status st = tf__check_shape(fn ? fn : "tf_tensor_to", dt, ndim, shape, &numel);
    if (st != TF_OK) return st;
    tf_storage *s = NULL;
    st = storage_new(fn, dev, (size_t)tf__bytes_of(dt, numel), &s);
    if (st != TF_OK) return st;
    int64_t strides[TF_MAX_DIMS];
    tf__contiguous_strides(ndim, shape, strides);
    *out = tensor_new(s, dt, ndim, shape, strides, 0);
    if (!*out) {
        storage_release(s);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s%sout of host memory for a tensor record", fn ? fn : "", fn ? ": " : "");
    }
    return TF_OK;
}

tf_status tf__tensor_wrap(tf_device *dev, tf_backend_buffer *buf, size_t nbytes, tf_dtype dt, int ndim,
                          const int64_t *shape, const int64_t *strides, tf_tensor **out) {
    tf_storage *s = tf__malloc(sizeof *s);
    tf_tensor *t = s ? tensor_new(s, dt, ndim, shape, strides, 0) : NULL;
    if (!t) {
        tf__free(s);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "out of host memory for a tensor record");
    }
    storage_init(s, dev, buf, nbytes);
    *out = t;
    return TF_OK;
}

tf_status tf__check_block_layout(const char *fn, tf_dtype dt, int ndim, const int64_t *shape,
                                 const int64_t *strides) {
    int64_t block = (int64_t)tf_dtype_block_size(dt);
    if (block <= 1) return TF_OK;
    bool ok = ndim > 0 && shape[ndim - 1] % block == 0 && (strides[ndim - 1] == 1 || shape[ndim - 1] == 0);
    for (int i = 0; ok && i < ndim - 1; i++) ok = shape[i] <= 1 || strides[i] % block == 0;
    if (ok) return TF_OK;
    char buf[256];
    return tf__error(TF_ERR_DTYPE, "%s: a %s view of shape %s would split its %lld-element blocks (views of a "
                     "quantized tensor pick whole rows)", fn, tf_dtype_name(dt),
                     tf__shape_str(ndim, shape, buf, sizeof buf), (long long)block);
}

tf_status tf__tensor_view(const tf_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                          int64_t offset, tf_tensor **out) {
    tf_status s = tf__check_block_layout("view", t->dtype, ndim, shape, strides);
    if (s != TF_OK) return s;
    tf_tensor *v = tensor_new(t->storage, t->dtype, ndim, shape, strides, offset);
    if (!v) return tf__error(TF_ERR_OUT_OF_MEMORY, "out of host memory for a view");
    atomic_fetch_add(&t->storage->refs, 1);
    *out = v;
    return TF_OK;
}

/* In place: a descriptor is 536 bytes (TF_MAX_DIMS 32) and ops build
 * several per call, so none is returned by value on the hot paths. The
 * axes past ndim are left for dispatch to zero (tf__zero_short_axes), up
 * to what the op's kernels may read. */
void tf__desc_into(tf_tensor_desc *d, const tf_tensor *t) {
    d->buffer = t->storage->buf;
    d->offset = (uint64_t)t->offset;
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        d->shape[i] = t->shape[i];
        d->strides[i] = t->strides[i];
    }
}

tf_tensor_desc tf__desc(const tf_tensor *t) {
    tf_tensor_desc d;
    tf__desc_into(&d, t);
    return d;
}

/* ---- overlap ---- */

bool tf__overlaps_itself(const tf_tensor *t) {
    /* Axes by |stride|, smallest first: each must step past everything the
     * smaller ones reach, or two indices meet. */
    int64_t st[TF_MAX_DIMS], ex[TF_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return false;
        if (t->shape[i] == 1) continue;
        int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        int k = n++;
        while (k > 0 && st[k - 1] > s) {
            st[k] = st[k - 1];
            ex[k] = ex[k - 1];
            k--;
        }
        st[k] = s;
        ex[k] = t->shape[i];
    }
    int64_t reach = 0;                        /* the farthest element the smaller axes reach */
    for (int k = 0; k < n; k++) {
        if (st[k] <= reach) return true;
        reach += st[k] * (ex[k] - 1);
    }
    return false;
}

/* The byte range [lo, hi) a tensor touches in its storage. */
static void byte_range(const tf_tensor *t, int64_t *lo, int64_t *hi) {
    int64_t min = 0, max = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            *lo = *hi = t->offset;
            return;
        }
        int64_t span = (t->shape[i] - 1) * t->strides[i];
        if (span < 0) min += span;
        else max += span;
    }
    /* A quantized layout's spans are whole blocks; its last element ends one. */
    *lo = t->offset + tf__bytes_of(t->dtype, min);
    *hi = t->offset + tf__bytes_of(t->dtype, max + (int64_t)tf_dtype_block_size(t->dtype));
}

bool tf__overlap(const tf_tensor *a, const tf_tensor *b) {
    if (a->storage != b->storage) return false;
    int64_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi && alo < ahi && blo < bhi;
}

/* ---- properties and lifetime ---- */

tf_tensor *tf_tensor_retain(tf_tensor *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
    return t;
}

void tf_tensor_release(tf_tensor *t) {
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    tf__scope_forget(t);
    if (t->ag) tf__grad_meta_drop(t);
    storage_release(t->storage);
    tf__free(t);
}

tf_device *tf_tensor_device(const tf_tensor *t) { return t ? t->storage->dev : NULL; }
tf_dtype tf_tensor_dtype(const tf_tensor *t) { return t ? t->dtype : TF_DTYPE_COUNT; }
int tf_tensor_ndim(const tf_tensor *t) { return t ? t->ndim : -1; }
const int64_t *tf_tensor_shape(const tf_tensor *t) { return t ? t->shape : NULL; }
const int64_t *tf_tensor_strides(const tf_tensor *t) { return t ? t->strides : NULL; }
int64_t tf_tensor_offset(const tf_tensor *t) { return t ? t->offset : -1; }

int64_t tf_tensor_numel(const tf_tensor *t) {
    if (!t) return -1;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int64_t tf_tensor_nbytes(const tf_tensor *t) { return t ? tf__bytes_of(t->dtype, tf_tensor_numel(t)) : -1; }

bool tf_tensor_is_contiguous(const tf_tensor *t) {
    if (!t) return false;
    tf_tensor_desc d = tf__desc(t);
    return tf_tensor_numel(t) == 0 || tf_desc_is_contiguous(&d);
}

/* ---- creation ---- */

static tf_status check_device(const char *fn, tf_device *dev) {
    if (!dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: device is NULL", fn);
    return tf__init();
}

tf_status tf_empty(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_empty: out is NULL");
    *out = NULL;
    tf_status s = check_device("tf_empty", dev);
    return s != TF_OK ? s : tf__op_output("tf_empty", dev, dt, ndim, shape, out);
}

tf_status tf_tensor_from_data(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, const void *data,
                              tf_tensor **out) {
    static const char fn[] = "tf_tensor_from_data";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_status s = check_device(fn, dev);
    int64_t numel = 0;
    if (s == TF_OK) s = tf__check_shape(fn, dt, ndim, shape, &numel);
    if (s != TF_OK) return s;
    if (!data && numel > 0) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: data is NULL", fn);
    tf_tensor *t;
    s = tf__tensor_alloc(fn, dev, dt, ndim, shape, &t);
    if (s != TF_OK) return s;
    s = tf__upload(t->storage, 0, data, (size_t)tf__bytes_of(dt, numel));
    if (s != TF_OK) {
        tf_tensor_release(t);
        return s;
    }
    *out = t;
    return TF_OK;
}

/* ---- reading and moving ---- */

tf_status tf_tensor_read(const tf_tensor *t, void *dst, size_t dst_bytes) {
    if (!t || !dst) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_tensor_read: tensor or dst is NULL");
    size_t need = (size_t)tf__bytes_of(t->dtype, tf_tensor_numel(t));
    if (dst_bytes < need)
        return tf__error(TF_ERR_BUFFER_TOO_SMALL, "tf_tensor_read: tensor needs %zu bytes, dst has %zu", need,
                         dst_bytes);
    if (need == 0) return TF_OK;
    if (tf_tensor_is_contiguous(t)) return tf__download(t->storage, (size_t)t->offset, dst, need);
    tf_tensor *c;
    tf_status s = tf_contiguous(t, &c);
    if (s != TF_OK) return tf__in("tf_tensor_read", s);
    s = tf__download(c->storage, (size_t)c->offset, dst, need);
    tf_tensor_release(c);
    return tf__in("tf_tensor_read", s);
}

/* A contiguous copy of t on dev (t itself, retained, if it is there). The
 * message of a failure names no function: callers put their context first. */
tf_status tf__tensor_move(const tf_tensor *t, tf_device *dev, tf_tensor **out) {
    *out = NULL;
    if (t->storage->dev == dev) {
        *out = tf_tensor_retain((tf_tensor *)t);
        return TF_OK;
    }
    tf__hook_move(t->storage->dev, dev);
    tf_tensor *src, *dst = NULL;
    tf_status s = tf_contiguous(t, &src);
    if (s != TF_OK) return s;
    s = tf__tensor_alloc(NULL, dev, t->dtype, t->ndim, t->shape, &dst);
    size_t n = (size_t)tf__bytes_of(t->dtype, tf_tensor_numel(t));
    if (s == TF_OK && n > 0) {
        /* A peer copy between two devices of one backend that offers it;
         * otherwise stage through the host unless one side is host memory. */
        tf_device *sdev = src->storage->dev;
        const tf_device_iface *si = sdev->bdev.iface, *di = dev->bdev.iface;
        void *sp = si->buffer_host_ptr ? si->buffer_host_ptr(sdev->bdev.ctx, src->storage->buf) : NULL;
        void *dp = di->buffer_host_ptr ? di->buffer_host_ptr(dev->bdev.ctx, dst->storage->buf) : NULL;
        tf_status (*peer)(void *, tf_backend_stream *, tf_backend_buffer *, size_t, void *, tf_backend_buffer *, size_t,
                          size_t) = sdev->backend == dev->backend ? TF_DEVICE_SLOT(dev, buffer_copy_from_peer) : NULL;
        if (peer) {                          /* ordered on both streams by events */
            s = tf__stream_wait(dev, sdev);
            if (s == TF_OK)
                s = peer(dev->bdev.ctx, tf__stream_of(dev), dst->storage->buf, 0, sdev->bdev.ctx, src->storage->buf,
                         (size_t)src->offset, n);
            if (s == TF_OK) s = tf__stream_wait(sdev, dev);
        } else if (sp) {                     /* the source's queue may still be writing it */
            s = tf__host_sync(sdev);
            if (s == TF_OK) s = tf__upload(dst->storage, 0, (char *)sp + src->offset, n);
        } else if (dp) {
            s = tf__download(src->storage, (size_t)src->offset, dp, n);
        } else {
            void *tmp = tf__malloc(n);
            if (!tmp) s = tf__error(TF_ERR_OUT_OF_MEMORY, "no host memory to stage %zu bytes", n);
            if (s == TF_OK) s = tf__download(src->storage, (size_t)src->offset, tmp, n);
            if (s == TF_OK) s = tf__upload(dst->storage, 0, tmp, n);
            tf__free(tmp);
        }
    }
    tf_tensor_release(src);
    if (s != TF_OK) {
        tf_tensor_release(dst);
        return s;
    }
    *out = dst;
    return TF_OK;
}

tf_status tf_tensor_to(const tf_tensor *t, tf_device *dev, tf_tensor **out) {
    static const char fn[] = "tf_tensor_to";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t || !dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor or device is NULL", fn);
    TF__GRAD(fn, out, tf_tensor_to(t, dev, out), ga_.rule = TF__GRAD_CAST, t);
    tf_status s = tf__tensor_move(t, dev, out);
    if (s != TF_OK) tf__error_context(s, "%s: from %s to %s", fn, t->storage->dev->name, dev->name);
    return s;
}

/* ---- views ---- */

static int normalize_axis(int axis, int ndim) { return axis < 0 ? axis + ndim : axis; }

static tf_status axis_error(const char *fn, int axis, int ndim) {
    return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, ndim);
}

/* Strides for viewing t with `shape` without a copy (PyTorch's rule);
 * false if the memory layout does not allow it. */
static bool view_strides(const tf_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
    if (tf_tensor_numel(t) <= 1 || tf_tensor_is_contiguous(t)) {
        tf__contiguous_strides(ndim, shape, strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base = t->strides[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base = t->strides[d - 1];
                tensor_numel = view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

tf_status tf_view_dtype(const tf_tensor *t, tf_dtype dtype, tf_tensor **out) {
    static const char fn[] = "tf_view_dtype";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if ((unsigned)dtype >= TF_DTYPE_COUNT) return tf__error(TF_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dtype);
    if (t->dtype == TF_BOOL || dtype == TF_BOOL || tf_dtype_is_quantized(t->dtype) || tf_dtype_is_quantized(dtype) ||
        tf_dtype_size(t->dtype) != tf_dtype_size(dtype))
        return tf__error(TF_ERR_DTYPE, "%s: %s cannot be read as %s (views keep the element size; bool and "
                         "quantized dtypes are refused)", fn, tf_dtype_name(t->dtype), tf_dtype_name(dtype));
    tf_tensor *v = tensor_new(t->storage, dtype, t->ndim, t->shape, t->strides, t->offset);
    if (!v) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory for a view", fn);
    atomic_fetch_add(&t->storage->refs, 1);
    *out = v;
    return TF_OK;
}

tf_status tf_view_as_real(const tf_tensor *t, tf_tensor **out) {
    static const char fn[] = "tf_view_as_real";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (!tf_dtype_is_complex(t->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: takes a complex tensor, not %s", fn, tf_dtype_name(t->dtype));
    if (t->ndim == TF_MAX_DIMS)
        return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: a %d-d tensor has no room for the parts' axis", fn, t->ndim);
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = t->shape[i];
        strides[i] = t->strides[i] * 2;          /* in parts: two per element */
    }
    shape[t->ndim] = 2;
    strides[t->ndim] = 1;
    tf_tensor *v = tensor_new(t->storage, tf_dtype_to_real(t->dtype), t->ndim + 1, shape, strides, t->offset);
    if (!v) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory for a view", fn);
    atomic_fetch_add(&t->storage->refs, 1);
    *out = v;
    return TF_OK;
}

tf_status tf_view_as_complex(const tf_tensor *t, tf_tensor **out) {
    static const char fn[] = "tf_view_as_complex";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (t->dtype != TF_F32 && t->dtype != TF_F64)
        return tf__error(TF_ERR_DTYPE, "%s: takes an f32 or f64 tensor, not %s", fn, tf_dtype_name(t->dtype));
    int nd = t->ndim - 1;
    if (nd < 0 || t->shape[nd] != 2 || t->strides[nd] != 1)
        return tf__error(TF_ERR_SHAPE, "%s: the last axis must have extent 2 and stride 1 (the parts)", fn);
    int64_t strides[TF_MAX_DIMS];
    size_t part = tf_dtype_size(t->dtype);
    for (int i = 0; i < nd; i++) {
        if (t->strides[i] % 2 != 0)
            return tf__error(TF_ERR_SHAPE, "%s: axis %d's stride %lld is not a whole number of pairs", fn, i,
                             (long long)t->strides[i]);
        strides[i] = t->strides[i] / 2;
    }
    if ((uint64_t)t->offset % (2 * part) != 0)
        return tf__error(TF_ERR_SHAPE, "%s: the view does not start on a pair", fn);
    tf_tensor *v = tensor_new(t->storage, tf_dtype_to_complex(t->dtype), nd, t->shape, strides, t->offset);
    if (!v) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory for a view", fn);
    atomic_fetch_add(&t->storage->refs, 1);
    *out = v;
    return TF_OK;
}

tf_status tf_reshape(const tf_tensor *t, int ndim, const int64_t *shape_in, tf_tensor **out) {
    static const char fn[] = "tf_reshape";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    TF__GRAD(fn, out, tf_reshape(t, ndim, shape_in, out), ga_.rule = TF__GRAD_VIEW, t);
    if (ndim < 0 || ndim > TF_MAX_DIMS)
        return tf__error(ndim < 0 ? TF_ERR_INVALID_ARGUMENT : TF_ERR_TOO_MANY_DIMS, "%s: ndim %d not in [0, %d]",
                         fn, ndim, TF_MAX_DIMS);
    if (ndim > 0 && !shape_in) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: shape is NULL", fn);
    int64_t shape[TF_MAX_DIMS], known = 1, numel = tf_tensor_numel(t);
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1 && infer < 0) infer = i;
        else if (shape[i] < 0) return tf__error(TF_ERR_SIZE, "%s: extent %lld is invalid", fn, (long long)shape[i]);
        else if (shape[i] > 0 && known > INT64_MAX / shape[i])
            return tf__error(TF_ERR_SIZE, "%s: shape overflows", fn);
        else known *= shape[i];
    }
    char a[256], b[256];
    if (infer >= 0) {
        if (known == 0 || numel % known)
            return tf__error(TF_ERR_SHAPE, "%s: cannot infer the -1 extent of %s for %lld elements", fn,
                             tf__shape_str(ndim, shape_in, a, sizeof a), (long long)numel);
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return tf__error(TF_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", fn,
                         tf__shape_str(t->ndim, t->shape, a, sizeof a), (long long)numel,
                         tf__shape_str(ndim, shape, b, sizeof b));
    int64_t strides[TF_MAX_DIMS];
    if (view_strides(t, ndim, shape, strides)) return tf__in(fn, tf__tensor_view(t, ndim, shape, strides, t->offset, out));
    tf_tensor *c;
    tf_status s = tf_copy(t, &c);
    if (s != TF_OK) return tf__in(fn, s);
    tf__contiguous_strides(ndim, shape, strides);
    s = tf__tensor_view(c, ndim, shape, strides, c->offset, out);
    tf_tensor_release(c);
    return tf__in(fn, s);
}

/* A permutation's record for its gradient (axes normalized). */
static int grad_perm(tf__grad_args *a, int ndim, const int *perm) {
    a->rule = TF__GRAD_PERMUTE;
    for (int i = 0; i < ndim; i++) a->perm[i] = perm[i] < 0 ? perm[i] + ndim : perm[i];
    return 0;
}

tf_status tf_permute(const tf_tensor *t, const int *perm, tf_tensor **out) {
    static const char fn[] = "tf_permute";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t || (!perm && t->ndim > 0)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor or perm is NULL", fn);
    TF__GRAD(fn, out, tf_permute(t, perm, out), grad_perm(&ga_, t->ndim, perm), t);
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    bool used[TF_MAX_DIMS] = {false};
    for (int i = 0; i < t->ndim; i++) {
        int p = normalize_axis(perm[i], t->ndim);
        if (p < 0 || p >= t->ndim) return axis_error(fn, perm[i], t->ndim);
        if (used[p]) return tf__error(TF_ERR_AXIS, "%s: axis %d appears twice in the permutation", fn, p);
        used[p] = true;
        shape[i] = t->shape[p];
        strides[i] = t->strides[p];
    }
    return tf__in(fn, tf__tensor_view(t, t->ndim, shape, strides, t->offset, out));
}

tf_status tf_transpose(const tf_tensor *t, int d0, int d1, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_transpose: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_transpose: tensor is NULL");
    int a = normalize_axis(d0, t->ndim), b = normalize_axis(d1, t->ndim);
    if (a < 0 || a >= t->ndim) return axis_error("tf_transpose", d0, t->ndim);
    if (b < 0 || b >= t->ndim) return axis_error("tf_transpose", d1, t->ndim);
    int perm[TF_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return tf__in("tf_transpose", tf_permute(t, perm, out));
}

tf_status tf_slice(const tf_tensor *t, int axis, int64_t start, int64_t stop, int64_t step, tf_tensor **out) {
    static const char fn[] = "tf_slice";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    int ax = normalize_axis(axis, t->ndim);
    if (ax < 0 || ax >= t->ndim) return axis_error(fn, axis, t->ndim);
    if (step < 1) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: step %lld must be >= 1", fn, (long long)step);
    int64_t n = t->shape[ax];
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    start = start < 0 ? 0 : start > n ? n : start;
    stop = stop < 0 ? 0 : stop > n ? n : stop;
    int64_t len = stop > start ? (stop - start - 1) / step + 1 : 0;
    TF__GRAD(fn, out, tf_slice(t, ax, start, stop, step, out),
             (ga_.rule = TF__GRAD_SLICE, ga_.i[0] = ax, ga_.i[1] = start, ga_.i[2] = step), t);
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[ax] = len;
    /* With one element or none the step is never taken (and a huge step
     * times the stride need not fit); with more it does fit: (len-1) * step
     * stays inside the axis. */
    strides[ax] = len > 1 ? t->strides[ax] * step : t->strides[ax];
    int64_t first = len > 0 ? start * t->strides[ax] : 0;
    if (first % (int64_t)tf_dtype_block_size(t->dtype) != 0)
        return tf__error(TF_ERR_DTYPE, "%s: a slice from %lld of axis %d would split %s blocks", fn, (long long)start,
                         ax, tf_dtype_name(t->dtype));
    int64_t offset = t->offset + tf__bytes_of(t->dtype, first);
    return tf__in(fn, tf__tensor_view(t, t->ndim, shape, strides, offset, out));
}

tf_status tf_expand(const tf_tensor *t, int ndim, const int64_t *shape_in, tf_tensor **out) {
    static const char fn[] = "tf_expand";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t || (ndim > 0 && !shape_in)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor or shape is NULL", fn);
    TF__GRAD(fn, out, tf_expand(t, ndim, shape_in, out), ga_.rule = TF__GRAD_EXPAND, t);
    if (ndim > TF_MAX_DIMS) return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: %d dimensions", fn, ndim);
    if (ndim < 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: ndim %d is negative", fn, ndim);
    char a[256], b[256];
    if (ndim < t->ndim)
        return tf__error(TF_ERR_SHAPE, "%s: cannot expand %s to fewer dimensions %s", fn,
                         tf__shape_str(t->ndim, t->shape, a, sizeof a), tf__shape_str(ndim, shape_in, b, sizeof b));
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t src = i >= lead ? t->shape[i - lead] : 1;
        int64_t want = shape_in[i] == -1 && i >= lead ? src : shape_in[i];
        if (want < 0) return tf__error(TF_ERR_SIZE, "%s: extent %lld is invalid", fn, (long long)shape_in[i]);
        if (src != want && src != 1)
            return tf__error(TF_ERR_SHAPE, "%s: cannot broadcast %s to %s", fn,
                             tf__shape_str(t->ndim, t->shape, a, sizeof a), tf__shape_str(ndim, shape_in, b, sizeof b));
        shape[i] = want;
        strides[i] = (i >= lead && src == want) ? t->strides[i - lead] : 0;
    }
    int64_t numel = 1;                                  /* a view: its element count must fit */
    for (int i = 0; i < ndim; i++)
        if (tf__mul_overflows(numel, shape[i], &numel))
            return tf__error(TF_ERR_SIZE, "%s: shape %s has more elements than an int64 counts", fn,
                             tf__shape_str(ndim, shape, b, sizeof b));
    return tf__in(fn, tf__tensor_view(t, ndim, shape, strides, t->offset, out));
}

tf_status tf_squeeze(const tf_tensor *t, int axis, tf_tensor **out) {
    static const char fn[] = "tf_squeeze";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    TF__GRAD(fn, out, tf_squeeze(t, axis, out), ga_.rule = TF__GRAD_VIEW, t);
    int ax = axis == TF_ALL_AXES ? -1 : normalize_axis(axis, t->ndim);
    if (axis != TF_ALL_AXES && (ax < 0 || ax >= t->ndim)) return axis_error(fn, axis, t->ndim);
    if (ax >= 0 && t->shape[ax] != 1)
        return tf__error(TF_ERR_SHAPE, "%s: axis %d has extent %lld, not 1", fn, axis, (long long)t->shape[ax]);
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        bool drop = ax >= 0 ? i == ax : t->shape[i] == 1;
        if (drop) continue;
        shape[n] = t->shape[i];
        strides[n++] = t->strides[i];
    }
    return tf__in(fn, tf__tensor_view(t, n, shape, strides, t->offset, out));
}

tf_status tf_unsqueeze(const tf_tensor *t, int axis, tf_tensor **out) {
    static const char fn[] = "tf_unsqueeze";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    TF__GRAD(fn, out, tf_unsqueeze(t, axis, out), ga_.rule = TF__GRAD_VIEW, t);
    if (t->ndim >= TF_MAX_DIMS)
        return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: tensor already has %d dimensions", fn, TF_MAX_DIMS);
    int ax = normalize_axis(axis, t->ndim + 1);
    if (ax < 0 || ax > t->ndim) return axis_error(fn, axis, t->ndim + 1);
    int64_t shape[TF_MAX_DIMS], strides[TF_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == ax) {
            shape[i] = 1;
            strides[i] = j < t->ndim ? t->strides[j] * (t->shape[j] > 0 ? t->shape[j] : 1) : 1;
        } else {
            shape[i] = t->shape[j];
            strides[i] = t->strides[j++];
        }
    }
    return tf__in(fn, tf__tensor_view(t, t->ndim + 1, shape, strides, t->offset, out));
}

tf_status tf_contiguous(const tf_tensor *t, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_contiguous: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_contiguous: tensor is NULL");
    TF__GRAD("tf_contiguous", out, tf_contiguous(t, out), ga_.rule = TF__GRAD_VIEW, t);
    if (tf_tensor_is_contiguous(t)) {
        *out = tf_tensor_retain((tf_tensor *)t);
        return TF_OK;
    }
    return tf__copy_cast("tf_contiguous", t, t->dtype, out);
}

tf_status tf_copy(const tf_tensor *t, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_copy: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_copy: tensor is NULL");
    TF__GRAD("tf_copy", out, tf_copy(t, out), ga_.rule = TF__GRAD_CAST, t);
    return tf__copy_cast("tf_copy", t, t->dtype, out);
}

tf_status tf_cast(const tf_tensor *t, tf_dtype dt, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_cast: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_cast: tensor is NULL");
    if (!tf__dtype_valid(dt)) return tf__error(TF_ERR_DTYPE, "tf_cast: invalid dtype %d", (int)dt);
    TF__GRAD("tf_cast", out, tf_cast(t, dt, out), ga_.rule = TF__GRAD_CAST, t);
    bool from_q = tf_dtype_is_quantized(t->dtype), to_q = tf_dtype_is_quantized(dt);
    if ((to_q && !from_q && !tf_dtype_is_float(t->dtype)) || (from_q && !to_q && !tf_dtype_is_float(dt)))
        return tf__error(TF_ERR_DTYPE, "tf_cast: %s to %s: quantized dtypes convert to and from float dtypes only",
                         tf_dtype_name(t->dtype), tf_dtype_name(dt));
    return tf__copy_cast("tf_cast", t, dt, out);
}

/* src made ready to be copied into dst: on dst's device, broadcast to its
 * shape, and in storage of its own when it shares bytes with dst (so no
 * element is read after it was overwritten). *ready is a new reference. */
static tf_status copy_source(const char *fn, tf_tensor *dst, const tf_tensor *src, tf_tensor **ready) {
    tf_tensor *moved = NULL, *expanded = NULL;
    tf_status s = tf_tensor_to(src, dst->storage->dev, &moved);
    if (s == TF_OK) s = tf_expand(moved, dst->ndim, dst->shape, &expanded);
    tf_tensor_release(moved);
    if (s == TF_OK && expanded->storage == dst->storage && tf__overlap(expanded, dst)) {
        tf_tensor *separate = NULL;
        s = tf_copy(expanded, &separate);
        tf_tensor_release(expanded);
        expanded = separate;
    }
    if (s != TF_OK) {
        tf_tensor_release(expanded);
        return tf__in(fn, s);
    }
    *ready = expanded;
    return TF_OK;
}

tf_status tf_copy_into(tf_tensor *dst, const tf_tensor *src) {
    static const char fn[] = "tf_copy_into";
    if (!dst || !src) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (tf__overlaps_itself(dst))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: dst maps several indices to one element (a broadcast view)", fn);
    if (tf__grad_wanted(1, &src))
        return tf__error(TF_ERR_UNSUPPORTED, "%s: src requires a gradient, which a write into dst would not carry "
                         "(turn grad mode off, or tf_detach src)", fn);
    tf_status s = tf__grad_check_write(fn, dst);
    if (s != TF_OK) return s;
    tf_tensor *ready = NULL;
    s = copy_source(fn, dst, src, &ready);
    if (s != TF_OK) return s;
    s = tf__copy_into(fn, ready, dst);
    tf_tensor_release(ready);
    return tf__in(fn, s);
}
