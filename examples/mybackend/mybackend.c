/* mybackend: a complete tensorframe backend in one file, as a user would
 * write one. It owns its memory (a budgeted host allocator with canaries),
 * implements a subset of the ops in f32 — add, mul, sum, fill, copy — and
 * answers "unsupported" for the rest, which the core then runs on the CPU.
 * It fills every slot of the SDK (streams and events as tokens: it is
 * synchronous; native graphs as lists of the ops captured), and counts the
 * calls to each.
 *
 * Build it in-process (call mybackend_register) or as a plugin
 * (-DMYBACKEND_PLUGIN, exports tf_backend_plugin_init). With
 * -DMYBACKEND_OPAQUE it hides its host pointers, so the core must stage
 * data through upload/download as it would for a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mybackend.h"

#ifndef MYBACKEND_NAME
#define MYBACKEND_NAME "mybackend"
#endif
/* What this device offers: 1 GiB, or MYBACKEND_BUDGET_MB MiB (tests of
 * memory-aware loading give it less than a model needs). */
static uint64_t budget_bytes(void) {
    static _Atomic uint64_t budget;
    uint64_t b = atomic_load(&budget);
    if (b) return b;
    const char *env = getenv("MYBACKEND_BUDGET_MB");
    long long mb = env ? atoll(env) : 0;
    b = mb > 0 && mb < (1ll << 20) ? (uint64_t)mb << 20 : 1ull << 30;
    atomic_store(&budget, b);
    return b;
}
#define BUDGET_BYTES budget_bytes()
#define CANARY 0x6d796266u                 /* "mybf" */

typedef struct my_buffer {
    uint32_t canary;
    size_t nbytes;
    char *data;
    bool owned;                        /* false: caller memory (buffer_from_host_ptr) */
    struct my_buffer *prev, *next;     /* owned buffers still alive: shutdown frees them */
} my_buffer;

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static my_buffer *live_list;

static void track(my_buffer *b) {
    pthread_mutex_lock(&live_lock);
    b->prev = NULL;
    b->next = live_list;
    if (live_list) live_list->prev = b;
    live_list = b;
    pthread_mutex_unlock(&live_lock);
}

static void untrack(my_buffer *b) {
    pthread_mutex_lock(&live_lock);
    if (b->prev) b->prev->next = b->next;
    else live_list = b->next;
    if (b->next) b->next->prev = b->prev;
    pthread_mutex_unlock(&live_lock);
}

/* Every slot of the SDK this backend fills, counted when the core calls it:
 * the test suite checks that the core calls every slot backend.h documents
 * (MYBACKEND_SLOT_LOG=file writes the counts at shutdown). */
#define MY_SLOTS(X)                                                                                            \
    X(get_info) X(buffer_alloc) X(buffer_free) X(buffer_upload) X(buffer_download) X(supports) X(run)          \
    X(buffer_host_ptr) X(buffer_from_host_ptr) X(buffer_copy) X(buffer_copy_from_peer) X(synchronize)          \
    X(stream_create) X(stream_destroy) X(event_create) X(event_record) X(event_wait) X(event_destroy)          \
    X(event_query) X(event_synchronize) X(event_elapsed_ms) X(buffer_upload_async) X(buffer_download_async)     \
    X(host_alloc) X(host_free) X(graph_capture_begin) X(graph_capture_end) X(graph_launch) X(graph_destroy)    \
    X(buffer_native) X(stream_native)                                                                           \
    X(memory_stats) X(empty_cache) X(alloc_configure) X(reset_peak_memory) X(shutdown) X(get_proc_address) X(set_num_threads) X(get_num_threads)
enum {
#define MY_SLOT_ENUM(n) SLOT_##n,
    MY_SLOTS(MY_SLOT_ENUM)
#undef MY_SLOT_ENUM
    N_SLOTS
};
static const char *const slot_names[N_SLOTS] = {
#define MY_SLOT_NAME(n) #n,
    MY_SLOTS(MY_SLOT_NAME)
#undef MY_SLOT_NAME
};
static _Atomic uint64_t slot_calls[N_SLOTS];
#define CALLED(n) atomic_fetch_add(&slot_calls[SLOT_##n], 1)

/* Devices: MYBACKEND_DEVICES of them (1 to 4, default 1), sharing one
 * budget; a device's context is its index. Streams and events are tokens:
 * the device is synchronous, so work is in order when a call returns. */
#define MAX_MY_DEVICES 4
/* An event's time is when it was recorded: the device is synchronous, so
 * the work before it is done by then. */
typedef struct my_token { uint32_t canary; int device; uint64_t recorded_ns; } my_token;
#define TOKEN_CANARY 0x746f6b6eu           /* "tokn" */

static const tf_host_api *host;
static _Atomic uint64_t live_bytes, live_buffers, total_allocs, ops_run, injected, graph_launches;
static _Atomic uint64_t peak_bytes, limit_bytes;   /* limit 0: the budget alone */
static _Atomic int64_t fail_countdown;     /* > 0: the allocation that brings it to 0 fails */

/* Tests fail this backend's nth allocation (mybackend_fail_after). */
static bool injected_failure(void) {
    int64_t c = atomic_load(&fail_countdown);
    if (c <= 0 || atomic_fetch_sub(&fail_countdown, 1) != 1) return false;
    atomic_fetch_add(&injected, 1);
    return true;
}

/* ---- memory ---- */

static tf_status my_get_info(void *ctx, tf_backend_device_info *info) {
    (void)ctx;
    CALLED(get_info);
    snprintf(info->description, sizeof info->description, "example backend (%s), host memory, %llu MiB budget",
             MYBACKEND_NAME, (unsigned long long)(BUDGET_BYTES >> 20));
    info->type = TF_DEVICE_TYPE_CPU;
    info->memory_total = BUDGET_BYTES;
    info->memory_free = BUDGET_BYTES - atomic_load(&live_bytes);
    info->caps.dtypes = (1u << TF_DTYPE_COUNT) - 1u;   /* stores anything; computes f32 */
    return TF_OK;
}

static tf_status my_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    (void)ctx;
    CALLED(buffer_alloc);
    uint64_t live = atomic_load(&live_bytes), limit = atomic_load(&limit_bytes);
    if (nbytes > BUDGET_BYTES - live)
        return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": %zu bytes exceed the free budget", nbytes);
    if (limit && nbytes > limit - (live < limit ? live : limit))
        return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": %zu bytes requested, %llu in use, limit %llu",
                               nbytes, (unsigned long long)live, (unsigned long long)limit);
    my_buffer *b = injected_failure() ? NULL : malloc(sizeof *b);
    char *data = b && !injected_failure() ? malloc(nbytes ? nbytes : 1) : NULL;
    if (!data) {
        free(b);
        return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": malloc(%zu) failed", nbytes);
    }
    *b = (my_buffer){CANARY, nbytes, data, true, NULL, NULL};
    track(b);
    uint64_t now = atomic_fetch_add(&live_bytes, nbytes) + nbytes;
    for (uint64_t peak = atomic_load(&peak_bytes); now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now);) {
    }
    atomic_fetch_add(&live_buffers, 1);
    atomic_fetch_add(&total_allocs, 1);
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}

static void my_free(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    CALLED(buffer_free);
    my_buffer *b = (my_buffer *)buf;
    if (!b || b->canary != CANARY) {
        if (b) host->log(TF_LOG_ERROR, MYBACKEND_NAME ": freeing a buffer that is not ours");
        return;
    }
    b->canary = 0;
    if (b->owned) {
        untrack(b);
        atomic_fetch_sub(&live_bytes, b->nbytes);
        atomic_fetch_sub(&live_buffers, 1);
        free(b->data);
    }
    free(b);
}

#ifndef MYBACKEND_OPAQUE
static void *my_host_ptr(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    CALLED(buffer_host_ptr);
    return ((my_buffer *)buf)->data;
}

/* Caller memory as a buffer, not copied and not freed with it. */
static tf_status my_from_host_ptr(void *ctx, void *ptr, size_t nbytes, tf_backend_buffer **out) {
    (void)ctx;
    CALLED(buffer_from_host_ptr);
    my_buffer *b = malloc(sizeof *b);
    if (!b) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory for a buffer record");
    *b = (my_buffer){CANARY, nbytes, ptr, false, NULL, NULL};
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}
#endif

static tf_status check_range(const my_buffer *b, size_t off, size_t n) {
    if (b->canary != CANARY || off > b->nbytes || n > b->nbytes - off)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": %zu bytes at %zu outside buffer", n, off);
    return TF_OK;
}

static tf_status check_stream(const tf_backend_stream *stream) {
    const my_token *t = (const my_token *)stream;
    if (t && t->canary != TOKEN_CANARY) return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": not our stream");
    return TF_OK;
}

static tf_status my_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                           size_t n) {
    (void)ctx;
    CALLED(buffer_upload);
    if (check_stream(stream) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    my_buffer *b = (my_buffer *)dst;
    tf_status s = check_range(b, off, n);
    if (s == TF_OK && n) memcpy(b->data + off, src, n);
    return s;
}

static tf_status my_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                             size_t n) {
    (void)ctx;
    CALLED(buffer_download);
    if (check_stream(stream) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    my_buffer *b = (my_buffer *)src;
    tf_status s = check_range(b, off, n);
    if (s == TF_OK && n) memcpy(dst, b->data + off, n);
    return s;
}

/* Copies within a device or between two of its devices: one memory. */
static tf_status copy_bytes(tf_backend_buffer *dst, size_t doff, tf_backend_buffer *src, size_t soff, size_t n) {
    my_buffer *d = (my_buffer *)dst, *s = (my_buffer *)src;
    tf_status st = check_range(d, doff, n);
    if (st == TF_OK) st = check_range(s, soff, n);
    if (st == TF_OK && n) memmove(d->data + doff, s->data + soff, n);
    return st;
}

static tf_status my_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                         tf_backend_buffer *src, size_t soff, size_t n) {
    (void)ctx;
    CALLED(buffer_copy);
    return check_stream(stream) != TF_OK ? TF_ERR_INVALID_ARGUMENT : copy_bytes(dst, doff, src, soff, n);
}

static tf_status my_copy_from_peer(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                                   void *src_ctx, tf_backend_buffer *src, size_t soff, size_t n) {
    (void)ctx;
    (void)src_ctx;
    CALLED(buffer_copy_from_peer);
    return check_stream(stream) != TF_OK ? TF_ERR_INVALID_ARGUMENT : copy_bytes(dst, doff, src, soff, n);
}

/* ---- streams and events: tokens on a synchronous device ---- */

static tf_status new_token(void *ctx, my_token **out) {
    my_token *t = injected_failure() ? NULL : malloc(sizeof *t);
    if (!t) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory for a stream or event");
    *t = (my_token){TOKEN_CANARY, (int)(intptr_t)ctx, 0};
    *out = t;
    return TF_OK;
}

static void free_token(my_token *t) {
    if (t && t->canary == TOKEN_CANARY) {
        t->canary = 0;
        free(t);
    } else if (t) {
        host->log(TF_LOG_ERROR, MYBACKEND_NAME ": freeing a stream or event that is not ours");
    }
}

/* The memory's address as its "native" one: a DLPack export of this
 * device's tensors is a kDLExtDev tensor at that address. */
static tf_status my_buffer_native(void *ctx, tf_backend_buffer *buf, void **ptr, int32_t *type, int32_t *id) {
    CALLED(buffer_native);
    *ptr = ((my_buffer *)buf)->data;
    *type = 12;                                       /* kDLExtDev */
    *id = (int32_t)(intptr_t)ctx;
    return TF_OK;
}

/* A stream's native queue is its token (NULL: the device's own queue). */
static tf_status my_stream_native(void *ctx, tf_backend_stream *stream, void **out) {
    (void)ctx;
    CALLED(stream_native);
    *out = stream;
    return TF_OK;
}

static tf_status my_stream_create(void *ctx, tf_backend_stream **out) {
    CALLED(stream_create);
    return new_token(ctx, (my_token **)out);
}

static void my_stream_destroy(void *ctx, tf_backend_stream *stream) {
    (void)ctx;
    CALLED(stream_destroy);
    free_token((my_token *)stream);
}

static tf_status my_synchronize(void *ctx, tf_backend_stream *stream) {
    (void)ctx;
    CALLED(synchronize);
    return check_stream(stream);                  /* synchronous: nothing is ever pending */
}

static tf_status my_event_create(void *ctx, tf_backend_event **out) {
    CALLED(event_create);
    return new_token(ctx, (my_token **)out);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static tf_status check_event(const tf_backend_event *event) {
    const my_token *t = (const my_token *)event;
    if (!t || t->canary != TOKEN_CANARY) return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": not our event");
    return TF_OK;
}

static tf_status my_event_record(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    (void)ctx;
    CALLED(event_record);
    tf_status s = check_stream(stream);
    if (s == TF_OK) s = check_event(event);
    if (s == TF_OK) ((my_token *)event)->recorded_ns = now_ns();
    return s;
}

static tf_status my_event_query(void *ctx, tf_backend_event *event, bool *done) {
    (void)ctx;
    CALLED(event_query);
    *done = true;                                 /* synchronous: done when recorded */
    return check_event(event);
}

static tf_status my_event_synchronize(void *ctx, tf_backend_event *event) {
    (void)ctx;
    CALLED(event_synchronize);
    return check_event(event);
}

static tf_status my_event_elapsed_ms(void *ctx, tf_backend_event *start, tf_backend_event *end, double *ms) {
    (void)ctx;
    CALLED(event_elapsed_ms);
    tf_status s = check_event(start);
    if (s == TF_OK) s = check_event(end);
    if (s == TF_OK)
        *ms = ((double)((my_token *)end)->recorded_ns - (double)((my_token *)start)->recorded_ns) / 1e6;
    return s;
}

/* The device is synchronous: an asynchronous copy is done on return. */
static tf_status my_upload_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off,
                                 const void *src, size_t n) {
    CALLED(buffer_upload_async);
    atomic_fetch_sub(&slot_calls[SLOT_buffer_upload], 1);   /* counted as the async slot only */
    return my_upload(ctx, stream, dst, off, src, n);
}

static tf_status my_download_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off,
                                   void *dst, size_t n) {
    CALLED(buffer_download_async);
    atomic_fetch_sub(&slot_calls[SLOT_buffer_download], 1);
    return my_download(ctx, stream, src, off, dst, n);
}

/* "Pinned" memory: plain malloc, the slot's contract kept (and counted). */
static tf_status my_host_alloc(void *ctx, size_t n, void **out) {
    (void)ctx;
    CALLED(host_alloc);
    *out = injected_failure() ? NULL : malloc(n ? n : 1);
    return *out ? TF_OK : host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no host memory for %zu bytes", n);
}

static void my_host_free(void *ctx, void *p) {
    (void)ctx;
    CALLED(host_free);
    free(p);
}

static tf_status my_event_wait(void *ctx, tf_backend_event *event, tf_backend_stream *stream) {
    (void)ctx;
    (void)event;
    CALLED(event_wait);
    return check_stream(stream);
}

static void my_event_destroy(void *ctx, tf_backend_event *event) {
    (void)ctx;
    CALLED(event_destroy);
    free_token((my_token *)event);
}

static tf_status my_memory_stats(void *ctx, tf_memory_stats *out) {
    (void)ctx;
    CALLED(memory_stats);
    memset(out, 0, sizeof *out);
    out->allocated = out->reserved = atomic_load(&live_bytes);
    out->peak_allocated = out->peak_reserved = atomic_load(&peak_bytes);
    out->cache_misses = atomic_load(&total_allocs);
    out->limit = atomic_load(&limit_bytes);
    return TF_OK;
}

static void my_empty_cache(void *ctx) {
    (void)ctx;
    CALLED(empty_cache);                          /* no cache: nothing to return */
}

/* No cache, so of the configuration only the limit means anything here. */
static tf_status my_alloc_configure(void *ctx, const tf_alloc_conf *conf) {
    (void)ctx;
    CALLED(alloc_configure);
    atomic_store(&limit_bytes, conf->limit);
    return TF_OK;
}

static void my_reset_peak_memory(void *ctx) {
    (void)ctx;
    CALLED(reset_peak_memory);
    atomic_store(&peak_bytes, atomic_load(&live_bytes));
}

/* ---- kernels (f32 only) ---- */

static float *at(const tf_tensor_desc *d, const int64_t *idx) {
    int64_t e = 0;
    for (int i = 0; i < d->ndim; i++) e += idx[i] * d->strides[i];
    return (float *)(((my_buffer *)d->buffer)->data + d->offset) + e;
}

static int next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static void run_elementwise(const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    int64_t idx[TF_MAX_DIMS] = {0};
    if (tf_desc_numel(o) == 0) return;
    do {
        float x = op->n_inputs ? *at(&op->inputs[0], idx) : (float)op->params.value;
        float y = op->n_inputs > 1 ? *at(&op->inputs[1], idx) : 0.0f;
        float r = op->kind == TF_OP_ADD ? x + y : op->kind == TF_OP_MUL ? x * y : x;
        *at(o, idx) = r;
    } while (next_index(o->ndim, o->shape, idx));
}

/* Sum: walk every input element and add it into its output slot (the
 * output index is the input index with reduced axes pinned to 0). */
static tf_status run_sum(const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int64_t n_out = tf_desc_numel(o), idx[TF_MAX_DIMS] = {0}, oidx[TF_MAX_DIMS] = {0};
    double *acc = injected_failure() ? NULL : calloc((size_t)(n_out ? n_out : 1), sizeof *acc);
    if (!acc) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory for the sum's accumulators");
    if (tf_desc_numel(in) > 0) {
        do {
            int64_t flat = 0;
            for (int i = 0; i < in->ndim; i++) {
                oidx[i] = o->shape[i] == 1 ? 0 : idx[i];
                flat = flat * o->shape[i] + oidx[i];
            }
            acc[flat] += *at(in, idx);
        } while (next_index(in->ndim, in->shape, idx));
    }
    memset(oidx, 0, sizeof oidx);
    for (int64_t k = 0; k < n_out; k++, next_index(o->ndim, o->shape, oidx)) *at(o, oidx) = (float)acc[k];
    free(acc);
    return TF_OK;
}

static bool op_supported(const tf_op *op) {
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].dtype != TF_F32) return false;
    if (op->output.dtype != TF_F32) return false;
    switch (op->kind) {
    case TF_OP_ADD: case TF_OP_MUL: case TF_OP_SUM: case TF_OP_FILL: case TF_OP_COPY: return true;
    default: return false;
    }
}

static bool my_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    CALLED(supports);
    return op_supported(op);
}

static tf_status execute(const tf_op *op) {
    tf_status s = TF_OK;
    if (op->kind == TF_OP_SUM) s = run_sum(op);
    else run_elementwise(op);
    if (s == TF_OK) atomic_fetch_add(&ops_run, 1);
    return s;
}

/* A native graph: the ops run() saw between capture begin and end, in
 * order, run again by each launch. A capture is the calling thread's (as
 * CUDA's thread-local capture mode): other threads' ops run as usual. */
typedef struct my_graph { uint32_t canary; int device, n, cap; tf_op *ops; } my_graph;
#define GRAPH_CANARY 0x67726168u           /* "grah" */
static _Thread_local my_graph *capturing[MAX_MY_DEVICES];

static tf_status capture(my_graph *g, const tf_op *op) {
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        tf_op *more = injected_failure() ? NULL : realloc(g->ops, (size_t)cap * sizeof *more);
        if (!more) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory to capture an op");
        g->ops = more;
        g->cap = cap;
    }
    g->ops[g->n++] = *op;                       /* descriptors hold buffers, which the core keeps alive */
    return TF_OK;
}

static tf_status my_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    CALLED(run);
    if (check_stream(stream) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    if (!op_supported(op)) return host->set_error(TF_ERR_UNSUPPORTED, MYBACKEND_NAME ": unsupported op");
    my_graph *g = capturing[(intptr_t)ctx];
    return g ? capture(g, op) : execute(op);
}

static tf_status my_graph_capture_begin(void *ctx, tf_backend_stream *stream) {
    CALLED(graph_capture_begin);
    intptr_t dev = (intptr_t)ctx;
    if (check_stream(stream) != TF_OK) return TF_ERR_INVALID_ARGUMENT;
    if (capturing[dev]) return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": already capturing");
    my_graph *g = injected_failure() ? NULL : calloc(1, sizeof *g);
    if (!g) return host->set_error(TF_ERR_OUT_OF_MEMORY, MYBACKEND_NAME ": no memory for a graph");
    g->canary = GRAPH_CANARY;
    g->device = (int)dev;
    capturing[dev] = g;
    return TF_OK;
}

static void my_graph_destroy(void *ctx, tf_backend_graph *graph) {
    (void)ctx;
    CALLED(graph_destroy);
    my_graph *g = (my_graph *)graph;
    if (!g || g->canary != GRAPH_CANARY) return;
    g->canary = 0;
    free(g->ops);
    free(g);
}

static tf_status my_graph_capture_end(void *ctx, tf_backend_stream *stream, tf_backend_graph **out) {
    CALLED(graph_capture_end);
    intptr_t dev = (intptr_t)ctx;
    *out = NULL;
    my_graph *g = capturing[dev];
    if (!g) return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": not capturing");
    capturing[dev] = NULL;
    if (check_stream(stream) != TF_OK) {
        my_graph_destroy(ctx, (tf_backend_graph *)g);
        return TF_ERR_INVALID_ARGUMENT;
    }
    *out = (tf_backend_graph *)g;
    return TF_OK;
}

static tf_status my_graph_launch(void *ctx, tf_backend_stream *stream, tf_backend_graph *graph) {
    CALLED(graph_launch);
    const my_graph *g = (const my_graph *)graph;
    if (check_stream(stream) != TF_OK || !g || g->canary != GRAPH_CANARY || g->device != (int)(intptr_t)ctx)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, MYBACKEND_NAME ": not a graph of this device");
    tf_status s = TF_OK;
    for (int i = 0; i < g->n && s == TF_OK; i++) s = execute(&g->ops[i]);
    if (s == TF_OK) atomic_fetch_add(&graph_launches, 1);
    return s;
}

static const tf_device_iface my_device_iface = {
    TF_STRUCT_INIT(tf_device_iface),
    .get_info = my_get_info,
    .buffer_alloc = my_alloc,
    .buffer_free = my_free,
    .buffer_upload = my_upload,
    .buffer_download = my_download,
    .supports = my_supports,
    .run = my_run,
#ifndef MYBACKEND_OPAQUE
    .buffer_host_ptr = my_host_ptr,
    .buffer_from_host_ptr = my_from_host_ptr,
#endif
    .buffer_copy = my_copy,
    .buffer_copy_from_peer = my_copy_from_peer,
    .synchronize = my_synchronize,
    .stream_create = my_stream_create,
    .stream_destroy = my_stream_destroy,
    .event_create = my_event_create,
    .event_record = my_event_record,
    .event_wait = my_event_wait,
    .event_destroy = my_event_destroy,
    .memory_stats = my_memory_stats,
    .empty_cache = my_empty_cache,
    .alloc_configure = my_alloc_configure,
    .reset_peak_memory = my_reset_peak_memory,
    .event_query = my_event_query,
    .event_synchronize = my_event_synchronize,
    .event_elapsed_ms = my_event_elapsed_ms,
    .buffer_upload_async = my_upload_async,
    .buffer_download_async = my_download_async,
    .host_alloc = my_host_alloc,
    .host_free = my_host_free,
    .graph_capture_begin = my_graph_capture_begin,
    .graph_capture_end = my_graph_capture_end,
    .graph_launch = my_graph_launch,
    .graph_destroy = my_graph_destroy,
    .buffer_native = my_buffer_native,
    .stream_native = my_stream_native,
};

static const tf_backend_device my_devices[MAX_MY_DEVICES] = {
    {&my_device_iface, (void *)0}, {&my_device_iface, (void *)1}, {&my_device_iface, (void *)2},
    {&my_device_iface, (void *)3}};
static _Atomic int my_threads = 1;

/* ---- registration ---- */

static void my_stats(mybackend_stats *out) {
    out->live_bytes = atomic_load(&live_bytes);
    out->live_buffers = atomic_load(&live_buffers);
    out->total_allocs = atomic_load(&total_allocs);
    out->ops_run = atomic_load(&ops_run);
    out->graph_launches = atomic_load(&graph_launches);
    out->injected_failures = atomic_load(&injected);
    int64_t c = atomic_load(&fail_countdown);
    out->failure_countdown = c > 0 ? (uint64_t)c : 0;
}

static void my_fail_after(int64_t n) { atomic_store(&fail_countdown, n > 0 ? n : 0); }

static void my_slot_calls(const char *const **names, const uint64_t **counts, int *n) {
    static uint64_t snapshot[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) snapshot[i] = atomic_load(&slot_calls[i]);
    *names = slot_names;
    *counts = snapshot;
    *n = N_SLOTS;
}

static void *my_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    CALLED(get_proc_address);
    if (!strcmp(name, "mybackend_slot_calls")) return (void *)(mybackend_slot_calls_fn)my_slot_calls;
    if (!strcmp(name, "mybackend_stats")) return (void *)(mybackend_stats_fn)my_stats;
    if (!strcmp(name, "mybackend_fail_after")) return (void *)(mybackend_fail_after_fn)my_fail_after;
    return NULL;
}

/* Append "<backend> <slot> <calls>" lines to MYBACKEND_SLOT_LOG, if set. */
static void write_slot_log(void) {
    const char *path = getenv("MYBACKEND_SLOT_LOG");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f) return;
    for (int i = 0; i < N_SLOTS; i++)
        fprintf(f, "%s %s %llu\n", MYBACKEND_NAME, slot_names[i], (unsigned long long)atomic_load(&slot_calls[i]));
    fclose(f);
}

/* A backend's shutdown releases everything it owns: tensors still alive
 * after tf_shutdown are no longer this backend's to free (the core will not
 * call it again for them). */
static void my_shutdown(void *ctx) {
    (void)ctx;
    CALLED(shutdown);
    if (atomic_load(&live_buffers))
        host->log(TF_LOG_INFO, MYBACKEND_NAME ": %llu buffers still live at shutdown, freed",
                  (unsigned long long)atomic_load(&live_buffers));
    while (live_list) my_free(NULL, (tf_backend_buffer *)live_list);
    write_slot_log();
}

static tf_status my_set_threads(void *ctx, int n) {
    (void)ctx;
    CALLED(set_num_threads);
    atomic_store(&my_threads, n);               /* it computes on the caller's thread; kept to report */
    return TF_OK;
}

static int my_get_threads(void *ctx) {
    (void)ctx;
    CALLED(get_num_threads);
    return atomic_load(&my_threads);
}

static const tf_backend_iface my_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = my_shutdown,
    .get_proc_address = my_get_proc_address,
    .set_num_threads = my_set_threads,
    .get_num_threads = my_get_threads,
};

static int device_count(void) {
    const char *env = getenv("MYBACKEND_DEVICES");
    int n = env ? atoi(env) : 1;
    return n < 1 ? 1 : n > MAX_MY_DEVICES ? MAX_MY_DEVICES : n;
}

static void fill_reg(tf_backend_reg *reg) {
    memset(reg, 0, sizeof *reg);
    reg->struct_size = sizeof *reg;
    reg->abi_major = TF_BACKEND_ABI_MAJOR;
    reg->abi_minor = TF_BACKEND_ABI_MINOR;
    reg->name = MYBACKEND_NAME;
    reg->iface = &my_backend_iface;
    reg->device_count = device_count();
    reg->devices = my_devices;
    reg->note = "example backend: add, mul, sum, fill, copy in f32";
}

#ifdef MYBACKEND_PLUGIN
__attribute__((visibility("default"))) tf_status tf_backend_plugin_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    fill_reg(out);
    return TF_OK;
}
#else
tf_status mybackend_register(void) {
    tf_backend_reg reg;
    host = tf_host();
    fill_reg(&reg);
    return tf_backend_register(&reg);
}
#endif
