/* The shared caching allocator: see block_cache.h. */
#include "block_cache.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int tf_block_size_class(size_t n, size_t granule, int divisions, size_t *capacity) {
    if (n <= granule) {
        *capacity = granule;
        return 0;
    }
    int o = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^o < n <= 2^(o+1) */
    if (o >= TF_BLOCK_MAX_LOG2) return -1;
    size_t p = (size_t)1 << o, step = p / (size_t)divisions;
    if (step < granule) step = granule;
    size_t cap = (n + step - 1) / step * step;
    *capacity = cap;
    return o * 32 + (int)((cap - p) / step);                      /* (cap - p) / step in 1..divisions */
}

void tf_block_cache_init(tf_block_cache *c, const tf_host_api *host, const char *name, const tf_block_ops *ops,
                         void *ctx, size_t granule, uint64_t default_release_threshold) {
    memset(c, 0, sizeof *c);
    c->host = host;
    c->name = name;
    c->ops = ops;
    c->ctx = ctx;
    c->granule = granule;
    c->default_release_threshold = default_release_threshold;
    c->conf = TF_ALLOC_CONF_DEFAULT;
}

static uint64_t release_threshold(const tf_block_cache *c) {
    return c->conf.release_threshold ? c->conf.release_threshold : c->default_release_threshold;
}

static void raw_release(tf_block_cache *c, tf_block *b) {
    c->stats.reserved -= b->capacity;
    c->ops->raw_free(c->ctx, b->handle);
    c->host->free(b);
}

static void forget_trimming(tf_block_cache *c) {
    memset(c->trimmed_at, 0, sizeof c->trimmed_at);
    memset(c->hot, 0, sizeof c->hot);
}

void tf_block_release_cached(tf_block_cache *c) {
    forget_trimming(c);
    for (int k = 0; k < TF_BLOCK_CLASSES; k++)
        while (c->free_list[k]) {
            tf_block *b = c->free_list[k];
            c->free_list[k] = b->next;
            raw_release(c, b);
        }
    c->stats.cached = 0;
}

/* Give back the largest cached block; false when the cache is empty. */
static bool release_largest(tf_block_cache *c) {
    for (int k = TF_BLOCK_CLASSES - 1; k >= 0; k--) {
        tf_block *b = c->free_list[k];
        if (!b) continue;
        c->free_list[k] = b->next;
        c->stats.cached -= b->capacity;
        raw_release(c, b);
        return true;
    }
    return false;
}

/* A class whose block trimming gave back is asked for again within this
 * many allocations: it is part of the working set, not of a finished
 * phase. */
#define REGRET_WINDOW 4096

/* Give back the largest cached block of a class trimming may take (not
 * hot), noting when; false when there is none. */
static bool trim_largest(tf_block_cache *c) {
    for (int k = TF_BLOCK_CLASSES - 1; k >= 0; k--) {
        tf_block *b = c->free_list[k];
        if (!b || c->hot[k]) continue;
        c->free_list[k] = b->next;
        c->stats.cached -= b->capacity;
        c->trimmed_at[k] = c->clock;
        raw_release(c, b);
        return true;
    }
    return false;
}

/* Before reserved grows by `capacity` for a request of n: keep reserved
 * within max_reserved_ratio of the highest demand, at the cache's expense.
 * Blocks whose lifetimes never overlap (a layer's QKV output, then its
 * wider MLP output) are cached side by side although only one counts in
 * the demand; trimming one before its turn gave it back and took it again
 * at every layer (on a GPU a synchronizing free and a new allocation). So
 * a class asked for again within REGRET_WINDOW allocations of losing a
 * block turns hot, and trimming leaves it alone from then on (until the
 * cache is emptied or configured). */
static void trim_for_demand(tf_block_cache *c, size_t n, size_t capacity) {
    if (c->conf.max_reserved_ratio <= 0) return;
    uint64_t demand = c->stats.allocated + n;
    if (demand < c->stats.peak_allocated) demand = c->stats.peak_allocated;
    double target = c->conf.max_reserved_ratio * (double)demand;
    while (c->stats.cached && (double)(c->stats.reserved + capacity) > target && trim_largest(c)) {
    }
}

static void note_miss(tf_block_cache *c, int cls) {
    if (c->trimmed_at[cls] && c->clock - c->trimmed_at[cls] <= REGRET_WINDOW) c->hot[cls] = true;
}

static uint64_t mib(uint64_t b) { return (b + (1u << 19)) >> 20; }

static tf_status over_limit(tf_block_cache *c, size_t n) {
    c->stats.ooms++;
    return c->host->set_error(TF_ERR_OUT_OF_MEMORY,
                              "%s: out of memory under the allocator's limit: %zu bytes requested, %llu MiB in use, "
                              "%llu MiB reserved, limit %llu MiB (TF_ALLOC_CONF or tf_device_alloc_conf_set)",
                              c->name, n, (unsigned long long)mib(c->stats.allocated),
                              (unsigned long long)mib(c->stats.reserved), (unsigned long long)mib(c->conf.limit));
}

static bool over(const tf_block_cache *c, size_t capacity) {
    return c->conf.limit && c->stats.reserved + capacity > c->conf.limit;
}

/* A new block from the OS or driver, within the limit; the cache is
 * released once when either refuses. */
static tf_status fresh_block(tf_block_cache *c, size_t n, size_t capacity, tf_block **out) {
    trim_for_demand(c, n, capacity);
    bool released = false;
    if (over(c, capacity)) {
        tf_block_release_cached(c);
        released = true;
        if (over(c, capacity)) return over_limit(c, n);
    }
    tf_block *b = c->host->alloc(sizeof *b);
    if (!b) {
        c->stats.ooms++;
        return c->host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory for a block record", c->name);
    }
    void *handle = NULL;
    tf_status s = c->ops->raw_alloc(c->ctx, capacity, &handle);
    if (s == TF_ERR_OUT_OF_MEMORY && c->stats.cached) {
        tf_block_release_cached(c);
        released = true;
        s = c->ops->raw_alloc(c->ctx, capacity, &handle);
    }
    if (s != TF_OK) {
        c->host->free(b);
        if (s != TF_ERR_OUT_OF_MEMORY) return s;
        c->stats.ooms++;
        /* Keep the driver's words and add the figures. */
        char why[256] = "";
        if (TF_HAS_FIELD(c->host, tf_host_api, last_error)) snprintf(why, sizeof why, "%s", c->host->last_error());
        return c->host->set_error(TF_ERR_OUT_OF_MEMORY,
                                  "%s: the device has no %zu bytes%s%s%s: %llu MiB in use, %llu MiB reserved%s", c->name,
                                  n, *why ? " (" : "", why, *why ? ")" : "", (unsigned long long)mib(c->stats.allocated),
                                  (unsigned long long)mib(c->stats.reserved),
                                  released ? " after releasing the cache" : "");
    }
    if (released) c->stats.retries++;
    *b = (tf_block){.handle = handle, .capacity = capacity, .epoch = c->epoch};
    c->stats.cache_misses++;
    c->stats.reserved += capacity;
    if (c->stats.reserved > c->stats.peak_reserved) c->stats.peak_reserved = c->stats.reserved;
    *out = b;
    return TF_OK;
}

tf_status tf_block_alloc(tf_block_cache *c, size_t nbytes, tf_block **out) {
    size_t capacity;
    int cls = tf_block_size_class(nbytes, c->granule, c->conf.round_divisions, &capacity);
    if (cls < 0) {
        c->stats.ooms++;
        return c->host->set_error(TF_ERR_OUT_OF_MEMORY, "%s: %zu bytes is more than any device holds", c->name, nbytes);
    }
    c->clock++;
    tf_block *b = c->free_list[cls];
    if (b) {
        c->free_list[cls] = b->next;
        c->stats.cached -= b->capacity;
        c->stats.cache_hits++;
    } else {
        note_miss(c, cls);
        tf_status s = fresh_block(c, nbytes, capacity, &b);
        if (s != TF_OK) return s;
        b->cls = cls;
    }
    b->requested = nbytes;
    b->next = b->live_prev = NULL;
    b->live_next = c->live;
    if (c->live) c->live->live_prev = b;
    c->live = b;
    c->stats.allocated += nbytes;
    if (c->stats.allocated > c->stats.peak_allocated) c->stats.peak_allocated = c->stats.allocated;
    *out = b;
    return TF_OK;
}

void tf_block_free(tf_block_cache *c, tf_block *b) {
    c->stats.allocated -= b->requested;
    b->requested = 0;
    if (b->live_prev) b->live_prev->live_next = b->live_next;
    else c->live = b->live_next;
    if (b->live_next) b->live_next->live_prev = b->live_prev;
    b->live_prev = b->live_next = NULL;
    /* A block sized under an earlier configuration is in no class now. */
    if (!c->conf.caching || b->epoch != c->epoch) {
        raw_release(c, b);
        return;
    }
    b->next = c->free_list[b->cls];
    c->free_list[b->cls] = b;
    c->stats.cached += b->capacity;
    uint64_t keep = release_threshold(c);
    while (c->stats.cached > keep && release_largest(c)) {
    }
}

void tf_block_cache_destroy(tf_block_cache *c) {
    while (c->live) tf_block_free(c, c->live);
    tf_block_release_cached(c);
}

tf_status tf_block_configure(tf_block_cache *c, const tf_alloc_conf *conf) {
    tf_block_release_cached(c);
    c->conf = *conf;
    c->conf.limit_fraction = 0;
    c->epoch++;
    return TF_OK;
}

void tf_block_stats(const tf_block_cache *c, tf_memory_stats *out) {
    *out = c->stats;
    out->limit = c->conf.limit;
    out->fragmentation = c->stats.reserved ? 1.0 - (double)c->stats.allocated / (double)c->stats.reserved : 0.0;
}

void tf_block_reset_peaks(tf_block_cache *c) {
    c->stats.peak_allocated = c->stats.allocated;
    c->stats.peak_reserved = c->stats.reserved;
}
