/* The built-in CPU backend: one device, host buffers (64-byte aligned),
 * memory read from the OS. Kernels live in cpu_kernels.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_cache.h"
#include "cpu_blas.h"
#include "tensorframe/cpu.h"
#include "cpu_kernels.h"
#include "cpu_packs.h"
#include "cpu_quant.h"
#include "cpu_stream.h"
#include "fast_kernels.h"
#include "threadpool.h"

/* A CPU buffer is a block of the shared caching allocator (block_cache.h):
 * its handle is the host pointer. Caller memory wrapped for the CPU
 * fallback is a block of class -1 that the cache never sees. */
typedef tf_block cpu_buffer;
#define HUGE_PAGE_HINT (2u << 20)

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static tf_block_cache cache;             /* under alloc_lock; outlives tf_shutdown with its live blocks */
static bool cache_ready;

static const tf_host_api *host;

/* MemTotal and MemAvailable from /proc/meminfo (bytes); sysconf otherwise. */
static void read_memory(uint64_t *total, uint64_t *avail) {
    *total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    *avail = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb * 1024ull;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = kb * 1024ull;
    }
    fclose(f);
}

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            colon += 2;
            colon[strcspn(colon, "\n")] = 0;
            snprintf(out, n, "%s", colon);
            break;
        }
    }
    fclose(f);
}

/* "32K", "1024K", "32M" in a sysfs cache file, in bytes; 0 if absent. */
static uint64_t sysfs_size(const char *path) {
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    char unit = 0;
    if (!f) return 0;
    int got = fscanf(f, "%llu%c", &v, &unit);
    fclose(f);
    if (got < 1) return 0;
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : unit == 'G' ? v << 30 : v;
}

static int sysfs_int(const char *path) {
    FILE *f = fopen(path, "r");
    int v = 0;
    if (f && fscanf(f, "%d", &v) != 1) v = 0;
    if (f) fclose(f);
    return v;
}

/* L1 data, L2 and L3 of cpu0 from /sys/devices/system/cpu/cpu0/cache. */
static void read_caches(uint64_t levels[3]) {
    for (int i = 0; i < 8; i++) {
        char path[128], type[16] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (fscanf(f, "%15s", type) != 1) type[0] = 0;
        fclose(f);
        if (!strcmp(type, "Instruction")) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        int level = sysfs_int(path);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (level >= 1 && level <= 3) levels[level - 1] = sysfs_size(path);
    }
}

static uint32_t clock_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f) && !(sscanf(line, "cpu MHz : %lf", &mhz) == 1)) {
    }
    if (f) fclose(f);
    return (uint32_t)(mhz + 0.5);
}

static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static uint64_t physical_memory(void);

static void fill_limits(tf_backend_device_info *info, const tf_fast_kernels *fast) {
    tf_device_limits *l = &info->limits;
    l->max_buffer_bytes = l->max_binding_bytes = physical_memory();
    l->compute_units = (uint32_t)usable_cores();
    l->subgroup_size = fast ? (uint32_t)fast->lanes : 1;
    read_caches(l->cache_bytes);
    l->clock_mhz = clock_mhz();
    info->hints.alignment = 64;                          /* a cache line; every block is aligned so */
    info->hints.vector_width_f32 = l->subgroup_size;
    info->hints.async_helps = false;                     /* ops run to completion on return */
}

static tf_status cpu_get_info(void *ctx, tf_backend_device_info *info) {
    (void)ctx;
    char model[200];
    read_cpu_model(model, sizeof model);
    const tf_fast_kernels *fast = tf_fast();
    snprintf(info->description, sizeof info->description, "%s (%d threads; kernels %s; BLAS %s)", model,
             tf_cpu_num_threads(), fast ? fast->name : "reference", tf_cpu_blas_name());
    info->type = TF_DEVICE_TYPE_CPU;
    read_memory(&info->memory_total, &info->memory_free);
    info->caps.dtypes = (1u << TF_DTYPE_COUNT) - 1u;
    info->caps.async = false;
    info->caps.pinned_host_memory = false;
    info->caps.unified_memory = true;
    info->caps.emulated = false;
    if (TF_HAS_FIELD(info, tf_backend_device_info, hints)) fill_limits(info, fast);
    return TF_OK;
}

/* Physical memory does not change while we run: read it once. */
uint64_t tf_cpu_physical_memory(void) { return physical_memory(); }

static uint64_t physical_memory(void) {
    static _Atomic uint64_t cached;
    uint64_t total = atomic_load(&cached), avail;
    if (!total) {
        read_memory(&total, &avail);
        atomic_store(&cached, total);
    }
    return total;
}

/* Large blocks start on a 2 MiB boundary: madvise needs a page-aligned
 * start, and huge pages need 2 MiB-aligned ranges to fill. */
static tf_status raw_alloc(void *ctx, size_t capacity, void **handle) {
    (void)ctx;
    bool huge = capacity >= HUGE_PAGE_HINT;
    if (posix_memalign(handle, huge ? HUGE_PAGE_HINT : 64, capacity) != 0)
        return host->set_error(TF_ERR_OUT_OF_MEMORY, "posix_memalign refused %zu bytes", capacity);
    if (huge) madvise(*handle, capacity, MADV_HUGEPAGE);   /* fewer TLB misses; a hint only */
    return TF_OK;
}

static void raw_free(void *ctx, void *handle) {
    (void)ctx;
    free(handle);
}

static const tf_block_ops raw_ops = {raw_alloc, raw_free};

/* Blocks of 64 bytes and up (aligned_alloc's multiple); the cache keeps at
 * most a quarter of RAM unless configured otherwise. */
static void lock_cache(void) {
    pthread_mutex_lock(&alloc_lock);
    if (!cache_ready) {
        tf_block_cache_init(&cache, host, "cpu", &raw_ops, NULL, 64, physical_memory() / 4);
        cache_ready = true;
    }
}

static tf_status cpu_buffer_alloc(void *ctx, size_t nbytes, tf_backend_buffer **out) {
    (void)ctx;
    uint64_t total = physical_memory();
    /* Refuse what the machine cannot hold rather than trust overcommit. */
    if (nbytes > total)
        return host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: %zu bytes requested, the machine has %llu", nbytes,
                               (unsigned long long)total);
    tf_block *b = NULL;
    lock_cache();
    tf_status s = tf_block_alloc(&cache, nbytes, &b);
    pthread_mutex_unlock(&alloc_lock);
    if (s == TF_OK) {
        b->writes = 0;                   /* a new buffer: what its block held before is gone */
        b->exposed = false;
        *out = (tf_backend_buffer *)b;
    }
    return s;
}

static tf_status cpu_buffer_from_host_ptr(void *ctx, void *ptr, size_t nbytes, tf_backend_buffer **out) {
    (void)ctx;
    cpu_buffer *b = host->alloc(sizeof *b);
    if (!b) return host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: out of host memory for a buffer record");
    *b = (tf_block){.handle = ptr, .capacity = nbytes, .requested = nbytes, .cls = -1, .exposed = true};
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}

static void cpu_buffer_free(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    cpu_buffer *b = (cpu_buffer *)buf;
    if (!b) return;
    tf_cpu_packs_forget(buf);
    if (b->cls < 0) {
        host->free(b);
        return;
    }
    lock_cache();
    tf_block_free(&cache, b);
    pthread_mutex_unlock(&alloc_lock);
}

static tf_status cpu_memory_stats(void *ctx, tf_memory_stats *out) {
    (void)ctx;
    lock_cache();
    tf_block_stats(&cache, out);
    pthread_mutex_unlock(&alloc_lock);
    return TF_OK;
}

static void cpu_empty_cache(void *ctx) {
    (void)ctx;
    lock_cache();
    tf_block_release_cached(&cache);
    pthread_mutex_unlock(&alloc_lock);
}

static tf_status cpu_alloc_configure(void *ctx, const tf_alloc_conf *conf) {
    (void)ctx;
    lock_cache();
    tf_status s = tf_block_configure(&cache, conf);
    pthread_mutex_unlock(&alloc_lock);
    return s;
}

static void cpu_reset_peak_memory(void *ctx) {
    (void)ctx;
    lock_cache();
    tf_block_reset_peaks(&cache);
    pthread_mutex_unlock(&alloc_lock);
}

/* The caller may write through it: nothing derived from the buffer is kept from now on. */
static void *cpu_buffer_host_ptr(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    tf_cpu_note_exposed(buf);
    return ((cpu_buffer *)buf)->handle;
}

static tf_status check_range(const cpu_buffer *b, size_t off, size_t n, const char *what) {
    if (off > b->requested || n > b->requested - off)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "cpu: %s of %zu bytes at %zu exceeds buffer of %zu", what, n,
                               off, b->requested);
    return TF_OK;
}

/* The default stream (NULL) runs everything on the caller's thread before
 * returning; a made stream (cpu_stream.c) queues it for its worker. The
 * blocking transfers wait for the stream's queue first. */
static tf_status cpu_upload(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off, const void *src,
                            size_t n) {
    (void)ctx;
    cpu_buffer *b = (cpu_buffer *)dst;
    tf_status s = check_range(b, off, n, "upload");
    if (s == TF_OK && stream) s = cpu_stream_sync((cpu_stream *)stream);
    if (s == TF_OK && n) memcpy((char *)b->handle + off, src, n);
    if (s == TF_OK) tf_cpu_note_write(dst);
    return s;
}

static tf_status cpu_download(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off, void *dst,
                              size_t n) {
    (void)ctx;
    cpu_buffer *b = (cpu_buffer *)src;
    tf_status s = check_range(b, off, n, "download");
    if (s == TF_OK && stream) s = cpu_stream_sync((cpu_stream *)stream);
    if (s == TF_OK && n) memcpy(dst, (char *)b->handle + off, n);
    return s;
}

/* memmove now, or queued on a made stream. A write into a buffer is
 * recorded now; one queued is done later, where the stream's worker has
 * only the address: the buffer counts as handed out raw. */
static tf_status move_bytes(tf_backend_stream *stream, void *dst, const void *src, size_t n, tf_backend_buffer *into) {
    if (!n) return TF_OK;
    if (stream) {
        tf_cpu_note_exposed(into);
        return cpu_stream_copy((cpu_stream *)stream, dst, src, n);
    }
    memmove(dst, src, n);
    tf_cpu_note_write(into);
    return TF_OK;
}

static tf_status cpu_upload_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t off,
                                  const void *src, size_t n) {
    (void)ctx;
    cpu_buffer *b = (cpu_buffer *)dst;
    tf_status s = check_range(b, off, n, "upload");
    return s == TF_OK ? move_bytes(stream, (char *)b->handle + off, src, n, dst) : s;
}

static tf_status cpu_download_async(void *ctx, tf_backend_stream *stream, tf_backend_buffer *src, size_t off,
                                    void *dst, size_t n) {
    (void)ctx;
    cpu_buffer *b = (cpu_buffer *)src;
    tf_status s = check_range(b, off, n, "download");
    return s == TF_OK ? move_bytes(stream, dst, (char *)b->handle + off, n, NULL) : s;
}

static tf_status cpu_copy(void *ctx, tf_backend_stream *stream, tf_backend_buffer *dst, size_t doff,
                          tf_backend_buffer *src, size_t soff, size_t n) {
    (void)ctx;
    cpu_buffer *d = (cpu_buffer *)dst, *s = (cpu_buffer *)src;
    tf_status st = check_range(d, doff, n, "copy");
    if (st == TF_OK) st = check_range(s, soff, n, "copy");
    return st == TF_OK ? move_bytes(stream, (char *)d->handle + doff, (char *)s->handle + soff, n, dst) : st;
}

static char *host_address(tf_backend_buffer *buf) { return (char *)((cpu_buffer *)buf)->handle; }

static bool cpu_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    return tf_cpu_kernels_support(op);
}

/* Every op the backend runs, now or on a stream's worker: its output's
 * buffer is written (recorded first, so a pack made meanwhile is stale). */
static tf_status run_now(const tf_op *op) {
    tf_cpu_note_write(op->output.buffer);
    return tf_cpu_kernels_run(op, host_address);
}

static tf_status cpu_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    (void)ctx;
    return stream ? cpu_stream_run((cpu_stream *)stream, op) : run_now(op);
}

static tf_status cpu_synchronize(void *ctx, tf_backend_stream *stream) {
    (void)ctx;
    return stream ? cpu_stream_sync((cpu_stream *)stream) : TF_OK;
}

/* ---- streams and events: the slots over cpu_stream.c ---- */

static tf_status cpu_stream_create_slot(void *ctx, tf_backend_stream **out) {
    (void)ctx;
    return cpu_stream_create((cpu_stream **)out);
}

static void cpu_stream_destroy_slot(void *ctx, tf_backend_stream *stream) {
    (void)ctx;
    cpu_stream_destroy((cpu_stream *)stream);
}

static tf_status cpu_event_create_slot(void *ctx, tf_backend_event **out) {
    (void)ctx;
    return cpu_event_create((cpu_event **)out);
}

static tf_status cpu_event_record_slot(void *ctx, tf_backend_event *e, tf_backend_stream *stream) {
    (void)ctx;
    return cpu_event_record((cpu_event *)e, (cpu_stream *)stream);
}

static tf_status cpu_event_wait_slot(void *ctx, tf_backend_event *e, tf_backend_stream *stream) {
    (void)ctx;
    return cpu_event_wait((cpu_event *)e, (cpu_stream *)stream);
}

static void cpu_event_destroy_slot(void *ctx, tf_backend_event *e) {
    (void)ctx;
    cpu_event_destroy((cpu_event *)e);
}

static tf_status cpu_event_query_slot(void *ctx, tf_backend_event *e, bool *done) {
    (void)ctx;
    *done = cpu_event_done((cpu_event *)e);
    return TF_OK;
}

static tf_status cpu_event_sync_slot(void *ctx, tf_backend_event *e) {
    (void)ctx;
    cpu_event_sync((cpu_event *)e);
    return TF_OK;
}

static tf_status cpu_event_elapsed_slot(void *ctx, tf_backend_event *start, tf_backend_event *end, double *ms) {
    (void)ctx;
    return cpu_event_elapsed_ms((cpu_event *)start, (cpu_event *)end, ms);
}

static const tf_device_iface cpu_device_iface = {
    TF_STRUCT_INIT(tf_device_iface),
    .get_info = cpu_get_info,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_host_ptr = cpu_buffer_host_ptr,
    .buffer_upload = cpu_upload,
    .buffer_download = cpu_download,
    .buffer_copy = cpu_copy,
    .buffer_from_host_ptr = cpu_buffer_from_host_ptr,
    .supports = cpu_supports,
    .run = cpu_run,
    .memory_stats = cpu_memory_stats,
    .empty_cache = cpu_empty_cache,
    .alloc_configure = cpu_alloc_configure,
    .reset_peak_memory = cpu_reset_peak_memory,
    .synchronize = cpu_synchronize,
    .stream_create = cpu_stream_create_slot,
    .stream_destroy = cpu_stream_destroy_slot,
    .event_create = cpu_event_create_slot,
    .event_record = cpu_event_record_slot,
    .event_wait = cpu_event_wait_slot,
    .event_destroy = cpu_event_destroy_slot,
    .event_query = cpu_event_query_slot,
    .event_synchronize = cpu_event_sync_slot,
    .event_elapsed_ms = cpu_event_elapsed_slot,
    .buffer_upload_async = cpu_upload_async,
    .buffer_download_async = cpu_download_async,
};

static const tf_backend_device cpu_devices[1] = {{&cpu_device_iface, NULL}};

void *tf_cpu_alloc(size_t nbytes) { return host->alloc(nbytes); }
void tf_cpu_free(void *p) { host->free(p); }
/* Large scratch kept between calls: a block of more than glibc's mmap
 * threshold (128 KB) is a fresh mapping each call, and its first touch
 * page-faults every page (the digits CNN's conv1 weight gradient spent
 * more time in the kernel's page faults than in its GEMM). A few slots,
 * each holding one block and its size; taken under a lock, so concurrent
 * kernels take different blocks. Every miss goes through tf_cpu_alloc
 * (the fault sweep's counted allocator). */
#define SCRATCH_SLOTS 8
#define SCRATCH_KEEP_MIN ((size_t)64 << 10)   /* smaller blocks come from malloc's own free lists */
#define SCRATCH_KEEP_MAX ((size_t)64 << 20)   /* larger blocks go back at once */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t bytes; } scratch_slots[SCRATCH_SLOTS];

/* The smallest kept block that holds nbytes, so a small request leaves
 * the large blocks to the large ones. */
void *tf_cpu_scratch_take(size_t nbytes, size_t *got) {
    *got = nbytes;
    if (nbytes < SCRATCH_KEEP_MIN) return tf_cpu_alloc(nbytes);
    pthread_mutex_lock(&scratch_lock);
    int best = -1;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        if (scratch_slots[i].p && scratch_slots[i].bytes >= nbytes &&
            (best < 0 || scratch_slots[i].bytes < scratch_slots[best].bytes))
            best = i;
    if (best >= 0) {
        void *p = scratch_slots[best].p;
        *got = scratch_slots[best].bytes;
        scratch_slots[best].p = NULL;
        pthread_mutex_unlock(&scratch_lock);
        return p;
    }
    pthread_mutex_unlock(&scratch_lock);
    return tf_cpu_alloc(nbytes);
}

void tf_cpu_scratch_give(void *p, size_t bytes) {
    if (!p) return;
    if (bytes < SCRATCH_KEEP_MIN || bytes > SCRATCH_KEEP_MAX) {
        tf_cpu_free(p);
        return;
    }
    pthread_mutex_lock(&scratch_lock);
    int slot = -1;
    for (int i = 0; i < SCRATCH_SLOTS && slot < 0; i++)
        if (!scratch_slots[i].p) slot = i;
    for (int i = 0; i < SCRATCH_SLOTS && slot < 0; i++)     /* all full: replace the smallest, if smaller */
        if (scratch_slots[i].bytes < bytes && (slot < 0 || scratch_slots[i].bytes < scratch_slots[slot].bytes)) slot = i;
    void *gone = NULL;
    if (slot >= 0) {
        gone = scratch_slots[slot].p;
        scratch_slots[slot].p = p;
        scratch_slots[slot].bytes = bytes;
    } else {
        gone = p;
    }
    pthread_mutex_unlock(&scratch_lock);
    if (gone) tf_cpu_free(gone);
}

static void scratch_clear(void) {
    pthread_mutex_lock(&scratch_lock);
    for (int i = 0; i < SCRATCH_SLOTS; i++) {
        if (scratch_slots[i].p) tf_cpu_free(scratch_slots[i].p);
        scratch_slots[i].p = NULL;
    }
    pthread_mutex_unlock(&scratch_lock);
}

tf_status tf_cpu_oom(const char *kernel, size_t nbytes) {
    return host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: %s: no memory for %zu bytes of scratch", kernel, nbytes);
}

static void *cpu_get_proc_address(void *ctx, const char *name) {
    (void)ctx;
    if (!strcmp(name, "tf_cpu_blas_calls")) return (void *)(tf_cpu_blas_calls_fn)tf_cpu_blas_calls;
    if (!strcmp(name, "tf_cpu_reference_gemm_calls")) return (void *)(tf_cpu_blas_calls_fn)tf_cpu_reference_gemm_calls;
    if (!strcmp(name, "tf_cpu_q8_round_row")) return (void *)(tf_cpu_q8_round_row_fn)tf_cpu_q8_round_row;
    if (!strcmp(name, "tf_cpu_weight_pack_bytes")) return (void *)(tf_cpu_weight_pack_bytes_fn)tf_cpu_packs_bytes;
    return NULL;
}

/* Buffers still alive keep counting (a tensor released after tf_shutdown
 * still frees its memory through cpu_buffer_free); the rest is reset. */
static void cpu_shutdown(void *ctx) {
    tf_cpu_packs_clear();
    scratch_clear();
    (void)ctx;
    lock_cache();
    tf_block_release_cached(&cache);
    tf_memory_stats live = cache.stats;
    memset(&cache.stats, 0, sizeof cache.stats);
    cache.stats.allocated = cache.stats.peak_allocated = live.allocated;
    cache.stats.reserved = cache.stats.peak_reserved = live.reserved;
    /* The next initialization configures afresh; blocks still alive are
     * sized under this epoch and are given back, not cached, when freed. */
    tf_block_configure(&cache, &TF_ALLOC_CONF_DEFAULT);
    pthread_mutex_unlock(&alloc_lock);
    tf_cpu_pool_shutdown();
}

static tf_status cpu_set_threads(void *ctx, int n) {
    (void)ctx;
    tf_status s = tf_cpu_set_num_threads(n);
    return s == TF_OK ? s : host->set_error(s, "cpu: cannot use %d threads", n);
}

static int cpu_get_threads(void *ctx) {
    (void)ctx;
    return tf_cpu_num_threads();
}

static const tf_backend_iface cpu_backend_iface = {
    TF_STRUCT_INIT(tf_backend_iface),
    .shutdown = cpu_shutdown,
    .get_proc_address = cpu_get_proc_address,
    .set_num_threads = cpu_set_threads,
    .get_num_threads = cpu_get_threads,
};

tf_status tf__cpu_backend_init(const tf_host_api *h, tf_backend_reg *out) {
    host = h;
    cpu_streams_init(h, run_now);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->abi_major = TF_BACKEND_ABI_MAJOR;
    out->abi_minor = TF_BACKEND_ABI_MINOR;
    out->name = "cpu";
    out->iface = &cpu_backend_iface;
    out->device_count = 1;
    out->devices = cpu_devices;
    out->note = "SIMD kernels chosen by CPUID over portable reference kernels, thread pool, CBLAS GEMM";
    return TF_OK;
}
