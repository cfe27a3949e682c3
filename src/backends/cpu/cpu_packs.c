/* Weights packed once: data the CPU backend derives from a buffer's bytes
 * (a quantized weight repacked into the integer GEMM's panels) and keeps
 * while those bytes stay as they were, so a product of a few activation
 * rows does not repack its weight on every call (at 10 rows the repack was
 * about 40% of a Q8_0 product: perf, MiniLM, Zen 5).
 *
 * Whether the bytes stayed is known exactly, without reading them: every
 * write into a CPU buffer goes through this backend (an op's output, an
 * upload, a copy), which counts them in the buffer's block (`writes`), and
 * a buffer whose memory was handed out raw (a host pointer: DLPack, a
 * wrapped pointer, a transfer) is marked `exposed`, after which nothing is
 * kept for it. A pack is used only while the count is the one it was made
 * at; a buffer written after its pack was made is not a constant, and gets
 * none again. Packs go when their buffer is freed.
 *
 * Budget: TF_CPU_WEIGHT_PACKS_MB (default a sixteenth of RAM, at most 256;
 * 0 turns packing off); past it, products repack per call as before. A pack
 * of a Q8_0 weight takes 1.5 bytes a weight beside the weight's own 1.06:
 * a sentence encoder's fit (MiniLM: 32 MB), a large LLM's only in part. */
#include <pthread.h>
#include <stdatomic.h>

#include "../common/block_cache.h"
#include "cpu_common.h"
#include "cpu_packs.h"

typedef struct weight_pack {
    const tf_block *buf;
    tf_cpu_pack_key key;
    uint64_t writes;                     /* the buffer's count when the pack was made */
    bool stale;                          /* written since: kept until the buffer goes, never used */
    void *data;
    size_t bytes;
    struct weight_pack *next;
} weight_pack;

static pthread_mutex_t packs_lock = PTHREAD_MUTEX_INITIALIZER;
static weight_pack *packs;
static size_t packs_bytes;
static _Atomic bool any_packs;           /* a buffer's free skips the lock until the first pack */

void tf_cpu_note_write(tf_backend_buffer *buf) {
    if (buf) __atomic_add_fetch(&((tf_block *)buf)->writes, 1, __ATOMIC_RELEASE);
}

void tf_cpu_note_exposed(tf_backend_buffer *buf) {
    if (buf) __atomic_store_n(&((tf_block *)buf)->exposed, true, __ATOMIC_RELEASE);
}

static size_t budget(void) {
    static _Atomic int64_t chosen = -1;
    int64_t b = chosen;
    if (b < 0) {
        int64_t mb;
        if (!tf_host()->env_int("TF_CPU_WEIGHT_PACKS_MB", 0, 1 << 20, &mb)) {
            mb = (int64_t)(tf_cpu_physical_memory() / 16 >> 20);
            mb = mb < 256 ? mb : 256;
        }
        b = mb << 20;
        chosen = b;
    }
    return (size_t)b;
}

static bool same_key(const tf_cpu_pack_key *a, const tf_cpu_pack_key *b) {
    return a->offset == b->offset && a->dtype == b->dtype && a->rows == b->rows && a->cols == b->cols &&
           a->row_bytes == b->row_bytes;
}

/* The entry for (buf, key), under packs_lock; NULL if none. */
static weight_pack *find(const tf_block *buf, const tf_cpu_pack_key *key) {
    for (weight_pack *p = packs; p; p = p->next)
        if (p->buf == buf && same_key(&p->key, key)) return p;
    return NULL;
}

/* A usable pack of e, or NULL (marking it stale when the buffer moved on). */
static const void *usable(weight_pack *e, uint64_t writes) {
    if (e->stale) return NULL;
    if (e->writes == writes) return e->data;
    e->stale = true;                     /* not freed: a product on another thread may still read it */
    return NULL;
}

const void *tf_cpu_pack_get(tf_backend_buffer *buffer, const tf_cpu_pack_key *key, size_t bytes, tf_cpu_pack_fill fill,
                            void *ctx) {
    const tf_block *buf = (const tf_block *)buffer;
    if (!buf || __atomic_load_n(&buf->exposed, __ATOMIC_ACQUIRE) || !bytes) return NULL;
    const uint64_t writes = __atomic_load_n(&buf->writes, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&packs_lock);
    weight_pack *e = find(buf, key);
    const void *data = e ? usable(e, writes) : NULL;
    bool room = !e && packs_bytes + bytes <= budget();
    pthread_mutex_unlock(&packs_lock);
    if (data || !room) return data;
    /* Made outside the lock (packing a large weight takes milliseconds);
     * two threads racing for one weight both pack, the second copy goes. */
    weight_pack *made = tf_cpu_alloc(sizeof *made);   /* the host's allocator: the fault sweep reaches it */
    void *out = made ? tf_cpu_alloc(bytes) : NULL;
    if (!out) {
        tf_cpu_free(made);
        return NULL;
    }
    fill(ctx, out);
    *made = (weight_pack){buf, *key, writes, false, out, bytes, NULL};
    pthread_mutex_lock(&packs_lock);
    const bool unchanged = __atomic_load_n(&buf->writes, __ATOMIC_ACQUIRE) == writes;
    e = find(buf, key);
    if (!e && unchanged && packs_bytes + bytes <= budget()) {
        made->next = packs;
        packs = made;
        any_packs = true;
        packs_bytes += bytes;
        data = out;
        made = NULL;
    } else if (e) {
        data = usable(e, writes);
    }
    pthread_mutex_unlock(&packs_lock);
    if (made) {                          /* not kept (raced, written meanwhile, or no room): the caller packs per call */
        tf_cpu_free(out);
        tf_cpu_free(made);
    }
    return data;
}

void tf_cpu_packs_forget(tf_backend_buffer *buffer) {
    const tf_block *buf = (const tf_block *)buffer;
    if (!any_packs) return;
    pthread_mutex_lock(&packs_lock);
    for (weight_pack **p = &packs; *p;) {
        weight_pack *e = *p;
        if (e->buf != buf) {
            p = &e->next;
            continue;
        }
        *p = e->next;
        packs_bytes -= e->bytes;
        tf_cpu_free(e->data);
        tf_cpu_free(e);
    }
    pthread_mutex_unlock(&packs_lock);
}

void tf_cpu_packs_clear(void) {
    pthread_mutex_lock(&packs_lock);
    while (packs) {
        weight_pack *e = packs;
        packs = e->next;
        tf_cpu_free(e->data);
        tf_cpu_free(e);
    }
    packs_bytes = 0;
    pthread_mutex_unlock(&packs_lock);
}

size_t tf_cpu_packs_bytes(void) {
    pthread_mutex_lock(&packs_lock);
    size_t b = packs_bytes;
    pthread_mutex_unlock(&packs_lock);
    return b;
}
