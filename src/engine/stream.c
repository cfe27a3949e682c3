/* Streams and events: the public objects over the backends' optional
 * stream and event slots, the calling thread's current stream per device,
 * the memory freed while other streams may still use it, pinned host
 * memory, and asynchronous reads and writes.
 *
 * A device whose backend makes no streams runs every tf_stream on its one
 * queue (bs == NULL); an event there is recorded by waiting for the device
 * on the host, so its "work" is done when record returns. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- the calling thread's current streams ---- */

/* Entries only for devices whose current stream is not the default; the
 * generation drops entries from before a tf_shutdown. */
#define MAX_CURRENT 16
typedef struct current_entry {
    tf_device *dev;
    tf_stream *stream;
    uint32_t generation;
} current_entry;
static _Thread_local current_entry current[MAX_CURRENT];
static _Thread_local int n_current;

static tf_stream *current_of(const tf_device *dev) {
    for (int i = 0; i < n_current; i++)
        if (current[i].dev == dev && current[i].generation == tf__generation()) return current[i].stream;
    return NULL;
}

tf_backend_stream *tf__stream_of(const tf_device *dev) {
    if (!n_current) return NULL;                 /* the usual case: one load */
    tf_stream *s = current_of(dev);
    return s ? s->bs : NULL;
}

static void forget_current(const tf_device *dev) {
    for (int i = 0; i < n_current; i++)
        if (current[i].dev == dev || current[i].generation != tf__generation()) current[i--] = current[--n_current];
}

tf_stream *tf_stream_current(tf_device *dev) {
    if (!dev) return NULL;
    tf_stream *s = current_of(dev);
    return s ? s : &dev->default_stream;
}

static tf_status check_stream(const char *fn, const tf_stream *s) {
    if (!s) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: stream is NULL", fn);
    if (s->generation != tf__generation())
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the stream is from before tf_shutdown", fn);
    return TF_OK;
}

tf_status tf_stream_set_current(tf_stream *s) {
    static const char fn[] = "tf_stream_set_current";
    tf_status st = check_stream(fn, s);
    if (st != TF_OK) return st;
    forget_current(s->dev);
    if (s == &s->dev->default_stream) return TF_OK;
    if (n_current == MAX_CURRENT)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: this thread already has %d devices on made streams", fn,
                         MAX_CURRENT);
    current[n_current++] = (current_entry){s->dev, s, s->generation};
    return TF_OK;
}

/* ---- streams ---- */

tf_stream *tf_stream_default(tf_device *dev) { return dev ? &dev->default_stream : NULL; }

tf_device *tf_stream_device(const tf_stream *s) { return s ? s->dev : NULL; }

void tf__streams_init(tf_device *d) {
    pthread_mutex_init(&d->streams_lock, NULL);
    d->default_stream = (tf_stream){.dev = d, .generation = tf__generation()};
}

tf_status tf_stream_create(tf_device *dev, tf_stream **out) {
    static const char fn[] = "tf_stream_create";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: device is NULL", fn);
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    tf_stream *st = tf__calloc(1, sizeof *st);
    if (!st) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    tf_status (*create)(void *, tf_backend_stream **) = TF_DEVICE_SLOT(dev, stream_create);
    if (create) {
        tf__clear_error();
        s = create(dev->bdev.ctx, &st->bs);
        if (s != TF_OK) {
            tf__free(st);
            return tf__error_context(s, "%s: on %s", fn, dev->name);
        }
    }
    st->dev = dev;
    st->generation = tf__generation();
    pthread_mutex_lock(&dev->streams_lock);
    st->next = dev->streams;
    dev->streams = st;
    if (st->bs) atomic_fetch_add(&dev->queues, 1);
    pthread_mutex_unlock(&dev->streams_lock);
    *out = st;
    return TF_OK;
}

/* Wait for one queue of dev (NULL: the default), returning and clearing
 * an error from its queued work. */
static tf_status sync_queue(tf_device *dev, tf_backend_stream *bs) {
    tf_status (*sync)(void *, tf_backend_stream *) = TF_DEVICE_SLOT(dev, synchronize);
    if (!sync) return TF_OK;
    tf__clear_error();
    tf_status s = sync(dev->bdev.ctx, bs);
    if (s != TF_OK && !*tf_last_error()) tf__error(s, "%s: queued work failed", dev->name);
    return s;
}

tf_status tf_stream_synchronize(tf_stream *s) {
    static const char fn[] = "tf_stream_synchronize";
    tf_status st = check_stream(fn, s);
    if (st == TF_OK) st = sync_queue(s->dev, s->bs);
    if (st == TF_OK) tf__deferred_sweep(s->dev);
    return tf__in(fn, st);
}

tf_status tf_stream_native_handle(tf_stream *s, void **out) {
    static const char fn[] = "tf_stream_native_handle";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_status st = check_stream(fn, s);
    if (st != TF_OK) return tf__in(fn, st);
    tf_status (*native)(void *, tf_backend_stream *, void **) = TF_DEVICE_SLOT(s->dev, stream_native);
    if (!native) return tf__error(TF_ERR_UNSUPPORTED, "%s: %s has no native queues", fn, s->dev->name);
    return tf__in(fn, native(s->dev->bdev.ctx, s->bs, out));
}

tf_status tf__device_synchronize_all(tf_device *d) {
    tf_status first = sync_queue(d, NULL);
    pthread_mutex_lock(&d->streams_lock);
    for (tf_stream *s = d->streams; s; s = s->next) {
        tf_status st = sync_queue(d, s->bs);
        if (first == TF_OK) first = st;
    }
    pthread_mutex_unlock(&d->streams_lock);
    tf__deferred_sweep(d);
    return first;
}

static void unlink_stream(tf_stream *s) {
    tf_device *d = s->dev;
    pthread_mutex_lock(&d->streams_lock);
    for (tf_stream **p = &d->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&d->streams_lock);
}

static void destroy_stream(tf_stream *s) {
    tf_device *d = s->dev;
    sync_queue(d, s->bs);
    unlink_stream(s);
    if (s->bs) {
        /* Frees deferred behind this queue wait on events it has passed. */
        tf__deferred_sweep(d);
        void (*destroy)(void *, tf_backend_stream *) = TF_DEVICE_SLOT(d, stream_destroy);
        if (destroy) destroy(d->bdev.ctx, s->bs);
        atomic_fetch_sub(&d->queues, 1);
    }
    tf__free(s);
}

void tf_stream_destroy(tf_stream *s) {
    if (!s || s->generation != tf__generation() || s == &s->dev->default_stream) return;
    if (current_of(s->dev) == s) forget_current(s->dev);
    destroy_stream(s);
}

/* At tf_shutdown: streams the caller left are waited for and destroyed,
 * and every deferred free is done. */
void tf__streams_release(tf_device *d) {
    while (d->streams) destroy_stream(d->streams);
    sync_queue(d, NULL);
    tf__deferred_sweep(d);
    pthread_mutex_destroy(&d->streams_lock);
}

/* ---- events ---- */

static bool has_events(const tf_device *d) {
    return TF_DEVICE_SLOT(d, event_create) && TF_DEVICE_SLOT(d, event_record) && TF_DEVICE_SLOT(d, event_destroy);
}

tf_status tf_event_create(unsigned flags, tf_event **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_event_create: out is NULL");
    *out = NULL;
    if (flags & ~TF_EVENT_TIMING) return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_event_create: unknown flags 0x%x", flags);
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    tf_event *e = tf__calloc(1, sizeof *e);
    if (!e) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_event_create: no host memory");
    e->flags = flags;
    *out = e;
    return TF_OK;
}

/* The backend event goes with its device; after tf_shutdown it went with
 * the backend. */
static void drop_backend_event(tf_event *e) {
    if (e->be && e->generation == tf__generation()) TF_DEVICE_SLOT(e->dev, event_destroy)(e->dev->bdev.ctx, e->be);
    e->be = NULL;
    e->dev = NULL;
}

void tf_event_destroy(tf_event *e) {
    if (!e) return;
    drop_backend_event(e);
    tf__free(e);
}

tf_status tf_event_record(tf_event *e, tf_stream *s) {
    static const char fn[] = "tf_event_record";
    if (!e) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: event is NULL", fn);
    if (!s) s = tf_stream_current(e->dev && e->generation == tf__generation() ? e->dev : tf__cpu_device());
    tf_status st = check_stream(fn, s);
    if (st != TF_OK) return st;
    tf_device *d = s->dev;
    if (e->dev != d || e->generation != tf__generation()) {
        drop_backend_event(e);
        e->dev = d;
        e->generation = tf__generation();
    }
    tf__clear_error();
    if (!has_events(d)) {                        /* one queue, no events: wait for it now */
        st = sync_queue(d, s->bs);
        e->host_ns = tf__profile_clock();
        return tf__in(fn, st);
    }
    if (!e->be) st = d->bdev.iface->event_create(d->bdev.ctx, &e->be);
    if (st == TF_OK) st = d->bdev.iface->event_record(d->bdev.ctx, e->be, s->bs);
    if (st != TF_OK) tf__error_context(st, "%s: on %s", fn, d->name);
    return st;
}

/* Has e's device a backend event to ask (else it was done at record)? */
static bool pending_event(const tf_event *e) {
    return e->dev && e->be && e->generation == tf__generation();
}

tf_status tf_event_synchronize(tf_event *e) {
    static const char fn[] = "tf_event_synchronize";
    if (!e) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: event is NULL", fn);
    if (!pending_event(e)) return TF_OK;
    tf_status (*sync)(void *, tf_backend_event *) = TF_DEVICE_SLOT(e->dev, event_synchronize);
    tf__clear_error();
    tf_status s = sync ? sync(e->dev->bdev.ctx, e->be) : tf__device_synchronize_all(e->dev);
    if (s != TF_OK) tf__error_context(s, "%s: on %s", fn, e->dev->name);
    return s;
}

tf_status tf_event_query(tf_event *e, bool *done) {
    static const char fn[] = "tf_event_query";
    if (!e || !done) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: event or done is NULL", fn);
    *done = true;
    if (!pending_event(e)) return TF_OK;
    tf_status (*query)(void *, tf_backend_event *, bool *) = TF_DEVICE_SLOT(e->dev, event_query);
    if (!query) return tf_event_synchronize(e);  /* no way to ask: waiting answers */
    tf__clear_error();
    tf_status s = query(e->dev->bdev.ctx, e->be, done);
    if (s != TF_OK) tf__error_context(s, "%s: on %s", fn, e->dev->name);
    return s;
}

tf_status tf_event_elapsed_ms(tf_event *start, tf_event *end, double *ms) {
    static const char fn[] = "tf_event_elapsed_ms";
    if (!start || !end || !ms) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: NULL argument", fn);
    if (!(start->flags & end->flags & TF_EVENT_TIMING))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: both events need TF_EVENT_TIMING", fn);
    if (!start->dev || !end->dev || start->generation != tf__generation() || end->generation != tf__generation())
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: both events must be recorded", fn);
    if (start->dev != end->dev)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: events on %s and %s (one device only)", fn, start->dev->name,
                         end->dev->name);
    bool a, b;
    tf_status s = tf_event_query(start, &a);
    if (s == TF_OK) s = tf_event_query(end, &b);
    if (s != TF_OK) return s;
    if (!a || !b) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the events' work is not done yet", fn);
    if (!start->be || !end->be) {
        *ms = ((double)end->host_ns - (double)start->host_ns) / 1e6;
        return TF_OK;
    }
    tf_status (*elapsed)(void *, tf_backend_event *, tf_backend_event *, double *) =
        TF_DEVICE_SLOT(start->dev, event_elapsed_ms);
    if (!elapsed) return tf__error(TF_ERR_UNSUPPORTED, "%s: %s's events keep no time", fn, start->dev->name);
    tf__clear_error();
    s = elapsed(start->dev->bdev.ctx, start->be, end->be, ms);
    if (s != TF_OK) tf__error_context(s, "%s: on %s", fn, start->dev->name);
    return s;
}

tf_status tf_stream_wait_event(tf_stream *s, tf_event *e) {
    static const char fn[] = "tf_stream_wait_event";
    tf_status st = check_stream(fn, s);
    if (st != TF_OK) return st;
    if (!e) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: event is NULL", fn);
    if (!pending_event(e)) return TF_OK;
    tf_status (*wait)(void *, tf_backend_event *, tf_backend_stream *) = TF_DEVICE_SLOT(s->dev, event_wait);
    if (!wait || e->dev->backend != s->dev->backend) return tf__in(fn, tf_event_synchronize(e));
    tf__clear_error();
    st = wait(s->dev->bdev.ctx, e->be, s->bs);
    if (st != TF_OK) tf__error_context(st, "%s: %s waiting for %s", fn, s->dev->name, e->dev->name);
    return st;
}

/* ---- memory freed while other queues may still use it ----
 * With made streams that have queues of their own, a freed buffer may
 * still be read or written by work queued on any of them; it goes back to
 * the allocator once an event recorded on each queue at the free is done. */

typedef struct tf__deferred {
    tf_backend_buffer *buf;
    struct tf__deferred *next;
    int n_events;
    tf_backend_event *events[];
} tf__deferred;

static bool deferred_done(tf_device *d, tf__deferred *f) {
    tf_status (*query)(void *, tf_backend_event *, bool *) = TF_DEVICE_SLOT(d, event_query);
    for (int i = 0; i < f->n_events; i++) {
        bool done = false;
        if (!query || query(d->bdev.ctx, f->events[i], &done) != TF_OK || !done) return false;
    }
    return true;
}

static void deferred_finish(tf_device *d, tf__deferred *f) {
    for (int i = 0; i < f->n_events; i++) d->bdev.iface->event_destroy(d->bdev.ctx, f->events[i]);
    tf__buffer_free_now(d, f->buf);
    tf__free(f);
}

void tf__deferred_sweep(tf_device *d) {
    if (!atomic_load_explicit(&d->n_deferred, memory_order_relaxed)) return;
    pthread_mutex_lock(&d->streams_lock);
    tf__deferred *done = NULL;
    for (tf__deferred **p = &d->deferred; *p;) {
        tf__deferred *f = *p;
        if (deferred_done(d, f)) {
            *p = f->next;
            f->next = done;
            done = f;
            atomic_fetch_sub(&d->n_deferred, 1);
        } else {
            p = &f->next;
        }
    }
    pthread_mutex_unlock(&d->streams_lock);
    while (done) {
        tf__deferred *next = done->next;
        deferred_finish(d, done);
        done = next;
    }
}

/* An event on each queue of d (the default first), recorded now; false
 * when one cannot be made (the caller then waits for the queues). */
static bool record_on_every_queue(tf_device *d, tf__deferred *f, int n) {
    tf_stream *s = d->streams;
    for (int i = 0; i < n; i++) {
        tf_backend_stream *bs = i == 0 ? NULL : s->bs;
        if (i > 0) s = s->next;
        tf_backend_event *e = NULL;
        if (d->bdev.iface->event_create(d->bdev.ctx, &e) != TF_OK) return false;
        f->events[f->n_events++] = e;
        if (d->bdev.iface->event_record(d->bdev.ctx, e, bs) != TF_OK) return false;
    }
    return true;
}

bool tf__deferred_free(tf_device *d, tf_backend_buffer *buf) {
    if (!atomic_load_explicit(&d->queues, memory_order_relaxed) || !has_events(d) ||
        !TF_DEVICE_SLOT(d, event_query))
        return false;
    pthread_mutex_lock(&d->streams_lock);
    int n = 1;
    for (tf_stream *s = d->streams; s; s = s->next) n++;
    tf__deferred *f = tf__malloc(sizeof *f + (size_t)n * sizeof f->events[0]);
    bool ok = f != NULL;
    if (ok) {
        f->buf = buf;
        f->n_events = 0;
        ok = record_on_every_queue(d, f, n);
    }
    if (ok) {
        f->next = d->deferred;
        d->deferred = f;
        atomic_fetch_add(&d->n_deferred, 1);
    }
    pthread_mutex_unlock(&d->streams_lock);
    if (ok) return true;
    /* No memory for the record: wait for every queue, then free now. */
    if (f) {
        for (int i = 0; i < f->n_events; i++) d->bdev.iface->event_destroy(d->bdev.ctx, f->events[i]);
        tf__free(f);
    }
    tf__device_synchronize_all(d);
    return false;
}

/* ---- pinned host memory ---- */

/* Live blocks in a list (they are few and long-lived), so that a pointer
 * that did not come from tf_host_alloc is refused, never dereferenced. */
typedef struct host_block {
    void *p;                     /* what the caller holds: 4096-aligned */
    void *base;                  /* what was allocated */
    tf_device *dev;              /* whose host_free frees it; NULL: malloc */
    uint32_t generation;
    struct host_block *next;
} host_block;
#define HOST_ALIGN 4096
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block *host_blocks;

static tf_device *pinning_device(void) {
    for (int i = 0; i < tf_device_count(); i++) {
        tf_device *d = tf_device_at(i);
        if (TF_DEVICE_SLOT(d, host_alloc) && TF_DEVICE_SLOT(d, host_free)) return d;
    }
    return NULL;
}

static void free_base(const host_block *h) {
    if (!h->dev) free(h->base);
    else if (h->generation == tf__generation()) h->dev->bdev.iface->host_free(h->dev->bdev.ctx, h->base);
    /* else: pinned memory went with its backend at tf_shutdown */
}

tf_status tf_host_alloc(size_t bytes, unsigned flags, void **out) {
    static const char fn[] = "tf_host_alloc";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (flags & ~TF_HOST_PINNED) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", fn, flags);
    if (bytes > SIZE_MAX - HOST_ALIGN) return tf__error(TF_ERR_SIZE, "%s: %zu bytes is too many", fn, bytes);
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    host_block *h = tf__calloc(1, sizeof *h);
    if (!h) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    size_t total = bytes + HOST_ALIGN;           /* room to align the start */
    h->dev = (flags & TF_HOST_PINNED) ? pinning_device() : NULL;
    h->generation = tf__generation();
    if (h->dev) {
        tf__clear_error();
        s = h->dev->bdev.iface->host_alloc(h->dev->bdev.ctx, total, &h->base);
        if (s != TF_OK) tf__error_context(s, "%s: %zu bytes on %s", fn, bytes, h->dev->name);
    } else {
        h->base = tf__alloc_should_fail() ? NULL : malloc(total);
        if (!h->base) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for %zu bytes", fn, bytes);
    }
    if (s != TF_OK) {
        tf__free(h);
        return s;
    }
    memset(h->base, 0, total);
    uintptr_t base = (uintptr_t)h->base;
    h->p = (char *)h->base + ((base + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN - base);
    pthread_mutex_lock(&host_lock);
    h->next = host_blocks;
    host_blocks = h;
    pthread_mutex_unlock(&host_lock);
    *out = h->p;
    return TF_OK;
}

bool tf_host_is_pinned(const void *p) {
    bool pinned = false;
    pthread_mutex_lock(&host_lock);
    for (host_block *h = host_blocks; h; h = h->next)
        if (h->p == p) pinned = h->dev != NULL;
    pthread_mutex_unlock(&host_lock);
    return pinned;
}

void tf_host_free(void *p) {
    if (!p) return;
    host_block *found = NULL;
    pthread_mutex_lock(&host_lock);
    for (host_block **h = &host_blocks; *h; h = &(*h)->next)
        if ((*h)->p == p) {
            found = *h;
            *h = found->next;
            break;
        }
    pthread_mutex_unlock(&host_lock);
    if (!found) {
        tf__log(TF_LOG_ERROR, "tf_host_free: %p did not come from tf_host_alloc; not freed", p);
        return;
    }
    free_base(found);
    tf__free(found);
}

/* ---- asynchronous reads and writes ---- */

static tf_status async_args(const char *fn, const tf_tensor *t, const void *host, size_t bytes, tf_stream **s) {
    if (!t || !host) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor or host pointer is NULL", fn);
    if (!*s) *s = tf_stream_current(t->storage->dev);
    tf_status st = check_stream(fn, *s);
    if (st != TF_OK) return st;
    if ((*s)->dev != t->storage->dev)
        return tf__error(TF_ERR_DEVICE_MISMATCH, "%s: the tensor is on %s, the stream on %s", fn,
                         t->storage->dev->name, (*s)->dev->name);
    if (!tf_tensor_is_contiguous(t))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the tensor is not contiguous (tf_contiguous first)", fn);
    size_t need = (size_t)tf__bytes_of(t->dtype, tf_tensor_numel(t));
    if (bytes != need)
        return tf__error(bytes < need ? TF_ERR_BUFFER_TOO_SMALL : TF_ERR_INVALID_ARGUMENT,
                         "%s: the tensor has %zu bytes, the host buffer %zu", fn, need, bytes);
    return TF_OK;
}

tf_status tf_tensor_read_async(const tf_tensor *t, void *dst, size_t dst_bytes, tf_stream *s) {
    static const char fn[] = "tf_tensor_read_async";
    tf_status st = async_args(fn, t, dst, dst_bytes, &s);
    if (st != TF_OK || !dst_bytes) return st;
    tf_device *d = s->dev;
    tf_status (*copy)(void *, tf_backend_stream *, tf_backend_buffer *, size_t, void *, size_t) =
        TF_DEVICE_SLOT(d, buffer_download_async);
    if (!copy) copy = d->bdev.iface->buffer_download;
    tf__clear_error();
    st = copy(d->bdev.ctx, s->bs, t->storage->buf, (size_t)t->offset, dst, dst_bytes);
    if (st != TF_OK) tf__error_context(st, "%s: from %s", fn, d->name);
    return st;
}

tf_status tf_tensor_write_async(tf_tensor *t, const void *src, size_t src_bytes, tf_stream *s) {
    static const char fn[] = "tf_tensor_write_async";
    tf_status st = async_args(fn, t, src, src_bytes, &s);
    if (st != TF_OK || !src_bytes) return st;
    tf_device *d = s->dev;
    tf_status (*copy)(void *, tf_backend_stream *, tf_backend_buffer *, size_t, const void *, size_t) =
        TF_DEVICE_SLOT(d, buffer_upload_async);
    if (!copy) copy = d->bdev.iface->buffer_upload;
    tf__clear_error();
    st = copy(d->bdev.ctx, s->bs, t->storage->buf, (size_t)t->offset, src, src_bytes);
    if (st != TF_OK) tf__error_context(st, "%s: to %s", fn, d->name);
    return st;
}

tf_status tf_tensor_write(tf_tensor *t, const void *src, size_t src_bytes) {
    static const char fn[] = "tf_tensor_write";
    tf_stream *s = NULL;
    tf_status st = async_args(fn, t, src, src_bytes, &s);
    if (st != TF_OK || !src_bytes) return st;
    return tf__in(fn, tf__upload(t->storage, (size_t)t->offset, src, src_bytes));
}

/* Before the core touches dev's host memory itself: the thread's current
 * stream there may still be writing it. */
tf_status tf__host_sync(tf_device *dev) {
    tf_backend_stream *bs = tf__stream_of(dev);
    return bs ? sync_queue(dev, bs) : TF_OK;
}
