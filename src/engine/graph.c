/* Graph capture and replay. Between tf_graph_begin and tf_graph_end the
 * calling thread's ops run as usual and each one dispatched is also
 * recorded: the validated, placed tf_op with its output already allocated.
 * Replay hands the recorded ops to the backend again, skipping validation,
 * placement, output allocation and release: the buffers are the same, so
 * the tensors the capture produced hold the new results.
 *
 * Memory: every buffer a recorded op touches stays alive while the graph
 * does. A tensor released during or after the capture gives its buffer to
 * the graph (tf__graph_claim), which frees it when destroyed. Within the
 * capture such a buffer (one the capture made) goes to the graph's private
 * pool, and a later allocation of the capture on the same queue takes it
 * (best fit, at most twice the size): replay runs the nodes in capture
 * order, so the buffer's earlier use is over before its next one starts,
 * as in the eager run. A pass of many layers then holds about one layer's
 * temporaries, not all of them. Buffers a guard reads are not pooled (the
 * guards are checked before any node runs), and host data written into a
 * pooled buffer before any node used it moves the tensor to a fresh
 * buffer (a constant must not share bytes with a temporary).
 *
 * What a replay could not repeat ends the capture with an error at
 * tf_graph_end: a read of device memory to the host (data-dependent host
 * logic), a write of host data into a tensor made before the capture, an op
 * or a copy on another device. Index bounds checks, which read the indices
 * back, become guards that replay checks on the host before the ops.
 *
 * Once captured, the nodes go through the fusion pass (graph_fusion.c):
 * a product and the activation or residual add after it become one
 * GEMM_EPILOGUE node where the device has that kernel. */
#include <stdlib.h>
#include <string.h>

#include "graph_fusion.h"
#include "observers.h"

/* An index tensor whose values must lie in [0, extent) before node `before`. */
typedef struct graph_guard {
    const char *fn;
    int before;
    tf_backend_buffer *buf;
    uint64_t offset;
    tf_dtype dtype;
    int64_t numel, extent;
} graph_guard;

/* How the captured ops use one buffer: the bytes they read (from nodes'
 * inputs and guards) and whether the capture made it (an output or a
 * constant of the graph). tf_graph_replay_with writes only into tensors
 * the graph reads and did not make. */
typedef struct buffer_use {
    uint64_t read_lo, read_hi;     /* empty when read_lo >= read_hi */
    bool made;
} buffer_use;

/* A buffer the capture allocated, with its size. */
typedef struct made_buffer {
    tf_backend_buffer *buf;
    size_t nbytes;
} made_buffer;

/* A buffer released during the capture, free for its later allocations
 * on the queue it was last used on. */
typedef struct pooled_buffer {
    tf_backend_buffer *buf;
    size_t nbytes;
    tf_backend_stream *stream;
    int from_node;                 /* the first node whose output may take it */
} pooled_buffer;

struct tf_graph {
    tf_device *dev;
    uint32_t generation;
    graph_node *nodes;
    int n_nodes, cap_nodes;
    graph_guard *guards;
    int n_guards, cap_guards;
    tf_backend_buffer **bufs;      /* touched by recorded ops; sorted once captured */
    bool *released;                /* its tensors are gone: the graph frees it */
    int n_bufs, cap_bufs;
    made_buffer *made;             /* allocated during the capture (freed once captured) */
    int n_made, cap_made;
    pooled_buffer *pool;           /* released during the capture, for its later allocations */
    int n_pool, cap_pool;
    tf_backend_buffer **fresh;     /* taken from the pool, no node has used them yet */
    int n_fresh, cap_fresh;
    buffer_use *uses;              /* per sorted buffer: what replay_with may write into */
    bool sorted;
    tf_backend_graph *native;      /* the device's own graph, or NULL */
    tf_status invalid;             /* TF_OK, or why the capture cannot be replayed */
    char why[256];
    tf_graph *next;                /* in the live list */
};

static pthread_mutex_t graphs_lock = PTHREAD_MUTEX_INITIALIZER;
static tf_graph *live;             /* captured and capturing graphs */
static _Atomic int n_live;
static _Thread_local tf_graph *capturing;

static void invalidate(tf_graph *g, tf_status s, const char *fmt, const char *a, const char *b) {
    if (g->invalid != TF_OK) return;
    g->invalid = s;
    snprintf(g->why, sizeof g->why, fmt, a, b);
}

static void out_of_memory(tf_graph *g) {
    invalidate(g, TF_ERR_OUT_OF_MEMORY, "%s%sno host memory to record the graph", "", "");
}

/* ---- the buffers a graph holds ---- */

static int find_buffer(const tf_graph *g, const tf_backend_buffer *buf) {
    if (!g->sorted) {
        for (int i = 0; i < g->n_bufs; i++)
            if (g->bufs[i] == buf) return i;
        return -1;
    }
    int lo = 0, hi = g->n_bufs - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (g->bufs[mid] == buf) return mid;
        if ((uintptr_t)g->bufs[mid] < (uintptr_t)buf) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Room for `need` buffers in bufs and released together (under graphs_lock:
 * claims read them from other threads). */
static bool grow_buffers(tf_graph *g, int need) {
    if (need <= g->cap_bufs) return true;
    int n = g->cap_bufs ? g->cap_bufs * 2 : 64;
    while (n < need) n *= 2;
    tf_backend_buffer **b = tf__realloc(g->bufs, (size_t)n * sizeof *b);
    if (!b) return false;
    g->bufs = b;
    bool *r = tf__realloc(g->released, (size_t)n * sizeof *r);
    if (!r) return false;                         /* bufs is larger, cap unchanged: still consistent */
    g->released = r;
    g->cap_bufs = n;
    return true;
}

/* Under graphs_lock, with room for it. */
static void hold_buffer(tf_graph *g, tf_backend_buffer *buf) {
    if (!buf || find_buffer(g, buf) >= 0) return;
    g->bufs[g->n_bufs] = buf;
    g->released[g->n_bufs++] = false;
}

/* Record the op's buffers; false without host memory. */
static bool hold_op_buffers(tf_graph *g, const tf_op *op) {
    pthread_mutex_lock(&graphs_lock);
    bool ok = grow_buffers(g, g->n_bufs + TF_OP_MAX_INPUTS + 1);
    if (ok) {
        for (int i = 0; i < op->n_inputs; i++) hold_buffer(g, op->inputs[i].buffer);
        hold_buffer(g, op->output.buffer);
    }
    pthread_mutex_unlock(&graphs_lock);
    return ok;
}

/* ---- the capture's private pool ---- */

static const made_buffer *made_entry(const tf_graph *g, const tf_backend_buffer *buf) {
    for (int i = 0; i < g->n_made; i++)
        if (g->made[i].buf == buf) return &g->made[i];
    return NULL;
}

static bool guarded(const tf_graph *g, const tf_backend_buffer *buf) {
    for (int i = 0; i < g->n_guards; i++)
        if (g->guards[i].buf == buf) return true;
    return false;
}

static void forget_fresh(tf_graph *g, const tf_backend_buffer *buf) {
    for (int i = 0; i < g->n_fresh; i++)
        if (g->fresh[i] == buf) {
            g->fresh[i] = g->fresh[--g->n_fresh];
            return;
        }
}

/* Nodes recorded after a buffer's release before an output may take it:
 * the fusion pass merges up to three adjacent nodes into one kernel, which
 * could not read a buffer and write it as the unfused nodes did. */
#define REUSE_DELAY 2

static bool pooling_on(void) { return tf__env_flag("TF_GRAPH_REUSE", true); }

/* Under graphs_lock on the capturing thread: buf, just released, joins the
 * pool if the capture made it and no guard reads it (without host memory
 * for the entry it is simply kept, as before). */
static void pool_buffer(tf_graph *g, tf_backend_buffer *buf) {
    if (g->invalid != TF_OK || guarded(g, buf) || !pooling_on()) return;
    const made_buffer *m = made_entry(g, buf);
    if (!m || !tf__grow((void **)&g->pool, &g->cap_pool, g->n_pool + 1, sizeof *g->pool)) return;
    g->pool[g->n_pool++] = (pooled_buffer){buf, m->nbytes, tf__stream_of(g->dev), g->n_nodes + REUSE_DELAY};
    forget_fresh(g, buf);
}

static bool is_fresh(const tf_graph *g, const tf_backend_buffer *buf) {
    for (int i = 0; i < g->n_fresh; i++)
        if (g->fresh[i] == buf) return true;
    return false;
}

tf_backend_buffer *tf__capture_reuse(tf_device *dev, size_t nbytes) {
    tf_graph *g = capturing;
    if (g->invalid != TF_OK || dev != g->dev || nbytes == 0 || !g->n_pool) return NULL;
    tf_backend_stream *bs = tf__stream_of(dev);
    pthread_mutex_lock(&graphs_lock);
    int best = -1;
    for (int i = 0; i < g->n_pool; i++) {
        const pooled_buffer *p = &g->pool[i];
        if (p->stream == bs && g->n_nodes >= p->from_node && p->nbytes >= nbytes && p->nbytes / 2 <= nbytes &&
            (best < 0 || p->nbytes < g->pool[best].nbytes))
            best = i;
    }
    tf_backend_buffer *buf = NULL;
    int k = best >= 0 ? find_buffer(g, g->pool[best].buf) : -1;
    if (k >= 0 && tf__grow((void **)&g->fresh, &g->cap_fresh, g->n_fresh + 1, sizeof *g->fresh)) {
        buf = g->pool[best].buf;
        g->released[k] = false;                   /* a tensor of the capture holds it again */
        g->pool[best] = g->pool[--g->n_pool];
        g->fresh[g->n_fresh++] = buf;
    }
    pthread_mutex_unlock(&graphs_lock);
    return buf;
}

bool tf__graph_claim(tf_device *dev, tf_backend_buffer *buf) {
    if (!atomic_load_explicit(&n_live, memory_order_relaxed)) return false;
    bool claimed = false;
    pthread_mutex_lock(&graphs_lock);
    for (tf_graph *g = live; g && !claimed; g = g->next) {
        /* a graph left from before tf_shutdown names devices that are gone
         * (a new one may sit at the same address): it claims nothing */
        if (g->dev != dev || g->generation != tf__generation()) continue;
        int i = find_buffer(g, buf);
        if (i >= 0 && !g->released[i]) {
            claimed = g->released[i] = true;
            if (g == capturing) pool_buffer(g, buf);
        }
    }
    pthread_mutex_unlock(&graphs_lock);
    return claimed;
}

/* ---- hooks the core calls while a thread captures ---- */

bool tf__capturing(void) { return capturing != NULL; }

void tf__capture_op(const char *fn, tf_device *dev, const tf_op *op) {
    tf_graph *g = capturing;
    if (g->invalid != TF_OK) return;
    if (dev != g->dev) return invalidate(g, TF_ERR_DEVICE_MISMATCH, "%s ran on %s", fn, dev->name);
    if (!tf__grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes) || !hold_op_buffers(g, op))
        return out_of_memory(g);
    for (int i = 0; g->n_fresh && i < op->n_inputs; i++) forget_fresh(g, op->inputs[i].buffer);
    if (g->n_fresh) forget_fresh(g, op->output.buffer);
    g->nodes[g->n_nodes++] = (graph_node){fn, dev->bdev.iface->supports(dev->bdev.ctx, op), *op};
}

void tf__capture_alloc(tf_device *dev, tf_backend_buffer *buf, size_t nbytes) {
    tf_graph *g = capturing;
    if (g->invalid != TF_OK || dev != g->dev) return;
    if (!tf__grow((void **)&g->made, &g->cap_made, g->n_made + 1, sizeof *g->made)) return out_of_memory(g);
    g->made[g->n_made++] = (made_buffer){buf, nbytes};
}

/* Host data written into a buffer taken from the pool before any node used
 * it (tf_tensor_from_data, tf_empty then a write): a constant of the graph,
 * which the buffer's earlier use would overwrite at each replay. The
 * storage moves to a buffer of its own; the pooled one goes back. */
static void keep_constant_apart(tf_graph *g, tf_storage *s) {
    tf_backend_buffer *old = s->buf, *own = NULL;
    forget_fresh(g, old);
    if (tf__buffer_alloc_new(s->dev, s->nbytes, &own) != TF_OK) return out_of_memory(g);
    s->buf = own;
    pthread_mutex_lock(&graphs_lock);
    int k = find_buffer(g, old);
    if (k >= 0) {
        g->released[k] = true;
        pool_buffer(g, old);
    }
    pthread_mutex_unlock(&graphs_lock);
}

void tf__capture_upload(tf_storage *s) {
    tf_graph *g = capturing;
    if (g->invalid == TF_OK && s->dev == g->dev && is_fresh(g, s->buf)) keep_constant_apart(g, s);
    if (made_entry(g, s->buf)) return;            /* a constant made in the capture: kept as written */
    invalidate(g, TF_ERR_UNSUPPORTED, "host data was written into a tensor from before the capture (on %s)%s",
               s->dev->name, "; write static inputs before tf_graph_replay, not during the capture");
}

void tf__capture_download(const tf_storage *s) {
    invalidate(capturing, TF_ERR_UNSUPPORTED, "device memory was read to the host (on %s)%s", s->dev->name,
               ": a replay cannot repeat host logic that depends on the data");
}

void tf__capture_move(const tf_device *from, const tf_device *to) {
    invalidate(capturing, TF_ERR_DEVICE_MISMATCH, "a tensor moved from %s to %s during the capture", from->name,
               to->name);
}

bool tf__capture_index_guard(const char *fn, const tf_tensor *index, int64_t extent) {
    tf_graph *g = capturing;
    if (g->invalid != TF_OK) return true;
    if (!tf_tensor_is_contiguous(index) || index->storage->dev != g->dev) {
        invalidate(g, TF_ERR_UNSUPPORTED, "%s: indices that are not contiguous on %s cannot be guarded", fn,
                   g->dev->name);
        return true;
    }
    if (!tf__grow((void **)&g->guards, &g->cap_guards, g->n_guards + 1, sizeof *g->guards)) {
        out_of_memory(g);
        return true;
    }
    tf_op holder = {.n_inputs = 1};                 /* only its buffer is read */
    holder.inputs[0].buffer = index->storage->buf;
    if (!hold_op_buffers(g, &holder)) {
        out_of_memory(g);
        return true;
    }
    g->guards[g->n_guards++] = (graph_guard){fn, g->n_nodes, index->storage->buf, (uint64_t)index->offset,
                                             index->dtype, tf_tensor_numel(index), extent};
    return true;
}

/* ---- the public calls ---- */

static void unlink_graph(tf_graph *g) {
    pthread_mutex_lock(&graphs_lock);
    for (tf_graph **p = &live; *p; p = &(*p)->next)
        if (*p == g) {
            *p = g->next;
            atomic_fetch_sub(&n_live, 1);
            break;
        }
    pthread_mutex_unlock(&graphs_lock);
}

static void free_graph(tf_graph *g) {
    unlink_graph(g);
    if (g->native && g->generation == tf__generation()) g->dev->bdev.iface->graph_destroy(g->dev->bdev.ctx, g->native);
    if (g->generation == tf__generation())
        for (int i = 0; i < g->n_bufs; i++)
            if (g->released[i]) tf__buffer_free(g->dev, g->bufs[i]);   /* another graph may claim it */
    tf__free(g->nodes);
    tf__free(g->guards);
    tf__free(g->bufs);
    tf__free(g->released);
    tf__free(g->made);
    tf__free(g->pool);
    tf__free(g->fresh);
    tf__free(g->uses);
    tf__free(g);
}

tf_status tf_graph_begin(tf_device *dev) {
    static const char fn[] = "tf_graph_begin";
    if (!dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: device is NULL", fn);
    if (capturing)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: this thread is already capturing on %s", fn,
                         capturing->dev->name);
    tf_graph *g = tf__calloc(1, sizeof *g);
    if (!g) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    g->dev = dev;
    g->generation = tf__generation();
    pthread_mutex_lock(&graphs_lock);
    g->next = live;
    live = g;
    atomic_fetch_add(&n_live, 1);
    pthread_mutex_unlock(&graphs_lock);
    capturing = g;
    return TF_OK;
}

/* Can the device capture graphs of its own, and does the user let it? */
static bool native_wanted(const tf_graph *g) {
    const tf_device *d = g->dev;
    if (!TF_DEVICE_SLOT(d, graph_capture_begin) || !TF_DEVICE_SLOT(d, graph_capture_end) ||
        !TF_DEVICE_SLOT(d, graph_launch) || !TF_DEVICE_SLOT(d, graph_destroy) || g->n_nodes == 0)
        return false;
    if (!tf__env_flag("TF_GRAPH_NATIVE", true)) return false;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].native) return false;     /* a CPU fallback node is the core's to run */
    return true;
}

/* The recorded ops captured once more by the device as a graph of its own
 * (they do not run again: the device records their launches). Whatever the
 * device refuses, the graph replays node by node, so a failure here is only
 * logged. */
static void make_native(tf_graph *g) {
    if (!native_wanted(g)) return;
    tf_device *d = g->dev;
    const tf_device_iface *dv = d->bdev.iface;
    tf_backend_stream *bs = tf__stream_of(d);
    tf_status s = dv->graph_capture_begin(d->bdev.ctx, bs);
    if (s != TF_OK) {
        tf__log(TF_LOG_INFO, "%s: no native graph: %s", d->name, tf_last_error());
        tf__clear_error();
        return;
    }
    for (int i = 0; i < g->n_nodes && s == TF_OK; i++) s = dv->run(d->bdev.ctx, bs, &g->nodes[i].op);
    tf_backend_graph *native = NULL;
    tf_status ended = dv->graph_capture_end(d->bdev.ctx, bs, &native);
    if (s == TF_OK) s = ended;
    if (s != TF_OK) {
        if (native) dv->graph_destroy(d->bdev.ctx, native);
        tf__log(TF_LOG_INFO, "%s: no native graph, replays go node by node: %s", d->name, tf_last_error());
        tf__clear_error();
        return;
    }
    g->native = native;
}

static void note_read(tf_graph *g, tf_backend_buffer *buf, uint64_t lo, uint64_t hi) {
    int i = find_buffer(g, buf);
    if (i < 0 || lo >= hi) return;
    buffer_use *u = &g->uses[i];
    if (u->read_lo >= u->read_hi) {
        u->read_lo = lo, u->read_hi = hi;
        return;
    }
    u->read_lo = lo < u->read_lo ? lo : u->read_lo;
    u->read_hi = hi > u->read_hi ? hi : u->read_hi;
}

/* Per sorted buffer: the bytes the nodes and guards read, and whether the
 * capture made it; false without host memory. */
static bool record_uses(tf_graph *g) {
    g->uses = tf__calloc((size_t)(g->n_bufs ? g->n_bufs : 1), sizeof *g->uses);
    if (!g->uses) return false;
    for (int n = 0; n < g->n_nodes; n++)
        for (int i = 0; i < g->nodes[n].op.n_inputs; i++) {
            const tf_tensor_desc *d = &g->nodes[n].op.inputs[i];
            uint64_t lo, hi;
            tf__desc_extent(d, &lo, &hi);
            note_read(g, d->buffer, lo, hi);
        }
    for (int i = 0; i < g->n_guards; i++) {
        const graph_guard *gd = &g->guards[i];
        note_read(g, gd->buf, gd->offset, gd->offset + (uint64_t)gd->numel * tf_dtype_size(gd->dtype));
    }
    for (int i = 0; i < g->n_made; i++) {
        int k = find_buffer(g, g->made[i].buf);
        if (k >= 0) g->uses[k].made = true;
    }
    return true;
}

/* Why replay_with may not write into t, or NULL: the graph never reads
 * those bytes (nothing it computes depends on them), or it made t. */
static const char *not_an_input(const tf_graph *g, const tf_tensor *t) {
    if (t->storage->dev != g->dev) return "it lives on another device than the graph";
    int i = find_buffer(g, t->storage->buf);
    if (i >= 0 && g->uses[i].made)
        return "it is the graph's own (made during the capture: an output or a constant, which a replay rewrites)";
    tf_tensor_desc d = tf__desc(t);
    uint64_t lo, hi;
    tf__desc_extent(&d, &lo, &hi);
    if (i < 0 || lo >= hi || hi <= g->uses[i].read_lo || lo >= g->uses[i].read_hi)
        return "the graph never read it (nothing it computes depends on it)";
    return NULL;
}

/* Whether the bytes of d are the graph's alone once captured (the fusion
 * pass's liveness): every tensor on the buffer released, no guard reading
 * them. Under graphs_lock. */
static bool bytes_dead(void *ctx, const tf_tensor_desc *d) {
    const tf_graph *g = ctx;
    int i = find_buffer(g, d->buffer);
    if (i < 0 || !g->released[i]) return false;
    uint64_t lo, hi;
    tf__desc_extent(d, &lo, &hi);
    for (int k = 0; k < g->n_guards; k++) {
        const graph_guard *gd = &g->guards[k];
        uint64_t glo = gd->offset, ghi = gd->offset + (uint64_t)gd->numel * tf_dtype_size(gd->dtype);
        if (gd->buf == d->buffer && glo < hi && lo < ghi) return false;
    }
    return true;
}

/* The fusion pass over the recorded nodes, guards renumbered; false
 * without host memory. */
static bool fuse(tf_graph *g) {
    if (g->n_nodes < 2) return true;
    int *new_index = tf__malloc(sizeof(int) * (size_t)g->n_nodes);
    if (!new_index) return false;
    int n = tf__graph_fuse(g->dev, g->nodes, g->n_nodes, bytes_dead, g, new_index);
    for (int i = 0; i < g->n_guards; i++)
        g->guards[i].before = g->guards[i].before < g->n_nodes ? new_index[g->guards[i].before] : n;
    g->n_nodes = n;
    tf__free(new_index);
    return true;
}

static int compare_buffers(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (tf_backend_buffer *const *)a, y = (uintptr_t) * (tf_backend_buffer *const *)b;
    return x < y ? -1 : x > y;
}

tf_status tf_graph_end(tf_graph **out) {
    static const char fn[] = "tf_graph_end";
    if (out) *out = NULL;
    tf_graph *g = capturing;
    if (!g) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: this thread is not capturing", fn);
    capturing = NULL;
    if (!out) {
        free_graph(g);
        return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL (the capture is dropped)", fn);
    }
    if (g->invalid != TF_OK) {
        tf_status s = g->invalid;
        tf__error(s, "%s: the capture on %s cannot be replayed: %s", fn, g->dev->name, g->why);
        free_graph(g);
        return s;
    }
    /* Sort the buffers (with their flags) for the claims' binary search. */
    pthread_mutex_lock(&graphs_lock);
    for (int i = 0; i < g->n_bufs; i++)            /* a released buffer is marked by a low bit meanwhile */
        if (g->released[i]) g->bufs[i] = (tf_backend_buffer *)((uintptr_t)g->bufs[i] | 1u);
    if (g->n_bufs) qsort(g->bufs, (size_t)g->n_bufs, sizeof *g->bufs, compare_buffers);   /* NULL when empty */
    for (int i = 0; i < g->n_bufs; i++) {
        g->released[i] = (uintptr_t)g->bufs[i] & 1u;
        g->bufs[i] = (tf_backend_buffer *)((uintptr_t)g->bufs[i] & ~(uintptr_t)1u);
    }
    g->sorted = true;
    bool fused = fuse(g);                          /* reads released: under the lock */
    pthread_mutex_unlock(&graphs_lock);
    if (!fused) {
        free_graph(g);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the fusion pass", fn);
    }
    if (!record_uses(g)) {
        free_graph(g);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to record the graph's inputs", fn);
    }
    tf__free(g->made);
    g->made = NULL;
    g->n_made = g->cap_made = 0;
    tf__free(g->pool);                             /* its buffers stay released: the graph frees them */
    tf__free(g->fresh);
    g->pool = NULL;
    g->fresh = NULL;
    g->n_pool = g->cap_pool = g->n_fresh = g->cap_fresh = 0;
    make_native(g);
    *out = g;
    return TF_OK;
}

int64_t tf_graph_node_count(const tf_graph *g) { return g ? g->n_nodes : -1; }

bool tf_graph_is_native(const tf_graph *g) { return g && g->native; }

void tf_graph_destroy(tf_graph *g) {
    if (g) free_graph(g);
}

static tf_status check_guard(const tf_graph *g, const graph_guard *gd) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    size_t es = tf_dtype_size(gd->dtype), n = (size_t)gd->numel * es;
    unsigned char small[512], *bytes = n <= sizeof small ? small : tf__malloc(n);
    if (!bytes) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_graph_replay: no host memory to check %s's indices", gd->fn);
    tf_status s = g->dev->bdev.iface->buffer_download(g->dev->bdev.ctx, tf__stream_of(g->dev), gd->buf,
                                                      (size_t)gd->offset, bytes, n);
    for (int64_t i = 0; s == TF_OK && i < gd->numel; i++) {
        int64_t v;
        if (gd->dtype == TF_I32) {
            int32_t v32;
            memcpy(&v32, bytes + i * 4, 4);
            v = v32;
        } else {
            memcpy(&v, bytes + i * 8, 8);
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    if (bytes != small) tf__free(bytes);
    if (s != TF_OK) return tf__error_context(s, "tf_graph_replay: reading %s's indices", gd->fn);
    if (gd->numel && (lo < 0 || hi >= gd->extent))
        return tf__error(TF_ERR_INDEX, "tf_graph_replay: %s: index %lld out of range [0, %lld); nothing ran", gd->fn,
                         (long long)(lo < 0 ? lo : hi), (long long)gd->extent);
    return TF_OK;
}

tf_status tf_graph_replay(tf_graph *g) {
    static const char fn[] = "tf_graph_replay";
    if (!g) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: graph is NULL", fn);
    if (g->generation != tf__generation())
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the graph is from before tf_shutdown", fn);
    if (capturing) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: this thread is capturing another graph", fn);
    /* Every guard before any op: a bad index stops the replay untouched. */
    for (int i = 0; i < g->n_guards; i++) {
        tf_status s = check_guard(g, &g->guards[i]);
        if (s != TF_OK) return s;
    }
    if (g->native && !tf__profiling()) {           /* one launch of the device's own graph */
        tf_device *d = g->dev;
        tf_status s = d->bdev.iface->graph_launch(d->bdev.ctx, tf__stream_of(d), g->native);
        if (s != TF_OK) return tf__error_context(s, "%s: the native graph on %s", fn, d->name);
        atomic_fetch_add_explicit(&d->ops, (uint64_t)g->n_nodes, memory_order_relaxed);
        return TF_OK;
    }
    if (tf__profiling()) {                         /* each node recorded, as dispatch does */
        for (int i = 0; i < g->n_nodes; i++) {
            tf_status s = tf__dispatch_recorded(g->nodes[i].fn, g->dev, &g->nodes[i].op, g->nodes[i].native);
            if (s != TF_OK) return tf__error_context(s, "%s: node %d (%s)", fn, i, tf_op_name(g->nodes[i].op.kind));
        }
        return TF_OK;
    }
    /* The hot loop: the stream and the backend's table read once, each node
     * one call into the backend (the fallback ones through dispatch). */
    tf_device *d = g->dev;
    tf_backend_stream *bs = tf__stream_of(d);
    tf_status (*run)(void *, tf_backend_stream *, const tf_op *) = d->bdev.iface->run;
    tf__clear_error();
    for (int i = 0; i < g->n_nodes; i++) {
        graph_node *nd = &g->nodes[i];
        tf_status s = nd->native ? run(d->bdev.ctx, bs, &nd->op) : tf__dispatch_recorded(nd->fn, d, &nd->op, false);
        if (s != TF_OK) {
            atomic_fetch_add_explicit(&d->ops, (uint64_t)i + 1, memory_order_relaxed);
            return tf__error_context(s, "%s: node %d (%s) on %s", fn, i, tf_op_name(nd->op.kind), d->name);
        }
    }
    atomic_fetch_add_explicit(&d->ops, (uint64_t)g->n_nodes, memory_order_relaxed);
    return TF_OK;
}

tf_status tf_graph_replay_with(tf_graph *g, int n, tf_tensor *const *captured, const tf_tensor *const *values) {
    static const char fn[] = "tf_graph_replay_with";
    if (!g) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: graph is NULL", fn);
    if (g->generation != tf__generation())
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the graph is from before tf_shutdown", fn);
    if (n < 0 || (n > 0 && (!captured || !values)))
        return tf__error(TF_ERR_NULL_ARGUMENT, "%s: %d inputs but no arrays", fn, n);
    for (int i = 0; i < n; i++) {                 /* all checked before anything is written */
        const tf_tensor *c = captured[i], *v = values[i];
        if (!c || !v) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input %d is NULL", fn, i);
        const char *why = not_an_input(g, c);
        if (why) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: captured[%d] is not an input of the graph: %s", fn, i, why);
        bool same = c->dtype == v->dtype && c->ndim == v->ndim;
        for (int k = 0; same && k < c->ndim; k++) same = c->shape[k] == v->shape[k];
        if (!same) {
            char a[256], b[256];
            return tf__error(TF_ERR_SHAPE, "%s: input %d was captured as %s%s, given %s%s (a graph replays one shape: "
                             "capture another for this one)", fn, i, tf_dtype_name(c->dtype),
                             tf__shape_str(c->ndim, c->shape, a, sizeof a), tf_dtype_name(v->dtype),
                             tf__shape_str(v->ndim, v->shape, b, sizeof b));
        }
    }
    for (int i = 0; i < n; i++) {
        tf_status s = tf_copy_into(captured[i], values[i]);
        if (s != TF_OK) return tf__in(fn, s);
    }
    return tf__in(fn, tf_graph_replay(g));
}

/* At tf_shutdown: a capture left open on this thread is dropped. */
void tf__graph_shutdown(void) {
    if (capturing) {
        tf_graph *g = capturing;
        capturing = NULL;
        free_graph(g);
    }
}
