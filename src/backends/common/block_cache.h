/* The caching allocator every built-in backend allocates device memory
 * through (the CPU's host blocks, the GPU plugins' driver buffers), so one
 * configuration (tf_alloc_conf) and one set of statistics mean the same on
 * every device. The backend supplies the raw allocation; the cache rounds
 * requests to size classes, keeps freed blocks per class, enforces the
 * limit, the release threshold and the reserved/demand ratio, and counts.
 * It takes no lock: the backend calls it under its own. */
#ifndef TF_BLOCK_CACHE_H
#define TF_BLOCK_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include <tensorframe/backend.h>

/* Classes for sizes up to 2^48 bytes at 32 divisions per power of two. */
#define TF_BLOCK_MAX_LOG2 48
#define TF_BLOCK_CLASSES ((TF_BLOCK_MAX_LOG2 + 1) * 32 + 1)

typedef struct tf_block_ops {
    /* `capacity` bytes from the OS or driver; TF_ERR_OUT_OF_MEMORY with the
     * reason as the thread's message when there is none. */
    tf_status (*raw_alloc)(void *ctx, size_t capacity, void **handle);
    void (*raw_free)(void *ctx, void *handle);
} tf_block_ops;

typedef struct tf_block {
    void *handle;                        /* what raw_alloc gave */
    size_t capacity;                     /* the size class's bytes */
    size_t requested;                    /* asked for by the live buffer (0 while cached) */
    int cls;                             /* -1: not the cache's (a wrapped host pointer) */
    unsigned epoch;                      /* the configuration it was sized under */
    struct tf_block *next;               /* in a free list */
    struct tf_block *live_prev, *live_next;
    /* The CPU backend's record of writes, for data it derives from a buffer
     * and keeps (cpu_packs.c): how many writes it ran into the buffer, and
     * whether its memory was handed out raw (a host pointer, a wrapped
     * one), after which nothing derived from it is kept. */
    uint64_t writes;
    bool exposed;
} tf_block;

typedef struct tf_block_cache {
    const tf_host_api *host;
    const char *name;                    /* the device, for messages */
    const tf_block_ops *ops;
    void *ctx;
    size_t granule;                      /* smallest block and rounding step */
    uint64_t default_release_threshold;  /* what release_threshold 0 means here */
    tf_alloc_conf conf;                  /* as the core resolved it (limit in bytes) */
    unsigned epoch;
    tf_block *free_list[TF_BLOCK_CLASSES];
    tf_block *live;
    /* Trimming's memory (block_cache.c, trim_for_demand): the allocation
     * count, when each class last lost a block to trimming, and the classes
     * asked for again soon after, which trimming then leaves alone. */
    uint64_t clock;
    uint64_t trimmed_at[TF_BLOCK_CLASSES];
    bool hot[TF_BLOCK_CLASSES];
    tf_memory_stats stats;               /* fragmentation filled on reading */
} tf_block_cache;

void tf_block_cache_init(tf_block_cache *c, const tf_host_api *host, const char *name, const tf_block_ops *ops,
                         void *ctx, size_t granule, uint64_t default_release_threshold);
/* Frees every block, live or cached. */
void tf_block_cache_destroy(tf_block_cache *c);
/* TF_ERR_OUT_OF_MEMORY with the figures when the device or the limit
 * refuses, after releasing the cache once. */
tf_status tf_block_alloc(tf_block_cache *c, size_t nbytes, tf_block **out);
void tf_block_free(tf_block_cache *c, tf_block *b);
void tf_block_release_cached(tf_block_cache *c);
/* Empties the cache, then applies conf (checked by the core). */
tf_status tf_block_configure(tf_block_cache *c, const tf_alloc_conf *conf);
void tf_block_stats(const tf_block_cache *c, tf_memory_stats *out);
void tf_block_reset_peaks(tf_block_cache *c);
/* The class of n bytes under `divisions` per power of two and `granule`;
 * -1 when n is beyond every class. */
int tf_block_size_class(size_t n, size_t granule, int divisions, size_t *capacity);

#endif
