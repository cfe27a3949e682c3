/* The GPU runtime layer: see gpu_runtime.h. */
#include "gpu_runtime.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the device ---- */

void tf_gpu_dev_init(tf_gpu_dev *d, const tf_host_api *host, const char *name, const tf_gpu_mem_ops *ops, void *ctx) {
    memset(d, 0, sizeof *d);
    d->host = host;
    snprintf(d->name, sizeof d->name, "%s", name);
    pthread_mutex_init(&d->lock, NULL);
    tf_block_cache_init(&d->alloc, host, d->name, ops, ctx, TF_GPU_GRANULE, UINT64_MAX);
}

void tf_gpu_dev_destroy(tf_gpu_dev *d) {
    pthread_mutex_lock(&d->lock);
    tf_block_cache_destroy(&d->alloc);
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_destroy(&d->lock);
}

tf_status tf_gpu_enter(tf_gpu_dev *d) {
    pthread_mutex_lock(&d->lock);
    if (!d->lost) return TF_OK;
    pthread_mutex_unlock(&d->lock);
    return d->host->set_error(TF_ERR_DEVICE_LOST, "%s is lost (%s); restart the process to use it again", d->name,
                              d->lost_reason);
}

void tf_gpu_leave(tf_gpu_dev *d) { pthread_mutex_unlock(&d->lock); }

tf_status tf_gpu_fail(tf_gpu_dev *d, tf_gpu_error kind, const char *what, const char *error_name, const char *detail) {
    tf_status s = kind == TF_GPU_ERROR_OUT_OF_MEMORY ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    if (kind == TF_GPU_ERROR_STICKY) {
        d->lost = true;
        snprintf(d->lost_reason, sizeof d->lost_reason, "%s failed with %s", what, error_name);
        s = TF_ERR_DEVICE_LOST;
    }
    return d->host->set_error(s, "%s: %s failed: %s%s%s%s", d->name, what, error_name, detail ? " (" : "",
                              detail ? detail : "", detail ? ")" : "");
}

tf_status tf_gpu_check_range(tf_gpu_dev *d, const tf_gpu_block *b, size_t offset, size_t n) {
    if (offset > b->requested || n > b->requested - offset)
        return d->host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: %zu bytes at %zu outside a buffer of %zu", d->name, n,
                                  offset, b->requested);
    return TF_OK;
}

/* ---- the caching allocator ---- */

tf_status tf_gpu_alloc(tf_gpu_dev *d, size_t nbytes, tf_gpu_block **out) { return tf_block_alloc(&d->alloc, nbytes, out); }

void tf_gpu_free(tf_gpu_dev *d, tf_gpu_block *b) { tf_block_free(&d->alloc, b); }

void tf_gpu_release_cache(tf_gpu_dev *d) { tf_block_release_cached(&d->alloc); }

void tf_gpu_memory_stats(tf_gpu_dev *d, tf_memory_stats *out) {
    pthread_mutex_lock(&d->lock);
    tf_block_stats(&d->alloc, out);
    pthread_mutex_unlock(&d->lock);
}

tf_status tf_gpu_alloc_configure(tf_gpu_dev *d, const tf_alloc_conf *conf) { return tf_block_configure(&d->alloc, conf); }

void tf_gpu_reset_peak_memory(tf_gpu_dev *d) {
    pthread_mutex_lock(&d->lock);
    tf_block_reset_peaks(&d->alloc);
    pthread_mutex_unlock(&d->lock);
}

/* ---- what a GPU plugin hands the core ---- */

void tf_gpu_fill_reg(tf_backend_reg *out, const char *name, const tf_backend_iface *iface,
                     const tf_backend_device *devices, int count, const char *note) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->abi_major = TF_BACKEND_ABI_MAJOR;
    out->abi_minor = TF_BACKEND_ABI_MINOR;
    out->name = name;
    out->iface = iface;
    out->device_count = count;
    out->devices = devices;
    out->note = note;
}

void *tf_gpu_find_extra(const tf_gpu_extra *extras, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(extras[i].name, name)) return extras[i].fn;
    return NULL;
}

/* ---- environment variables ---- */

static const tf_host_api *env_host;

void tf_gpu_env_init(const tf_host_api *host) { env_host = host; }

static bool host_reads_env(void) { return env_host && TF_HAS_FIELD(env_host, tf_host_api, env_string); }

const char *tf_gpu_env_string(const char *name) { return host_reads_env() ? env_host->env_string(name) : NULL; }

bool tf_gpu_env_flag(const char *name, bool fallback) {
    return host_reads_env() ? env_host->env_flag(name, fallback) : fallback;
}

int tf_gpu_env_choice(const char *name, const char *const *choices, int n) {
    return host_reads_env() ? env_host->env_choice(name, choices, n) : -1;
}

tf_status tf_gpu_check_index(const tf_host_api *host, const char *extra, int device, int count, const void *out) {
    if (!out) return host->set_error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", extra);
    if (device < 0 || device >= count)
        return host->set_error(TF_ERR_INVALID_ARGUMENT, "%s: no device %d (%d present)", extra, device, count);
    return TF_OK;
}

/* ---- staged transfers ---- */

void tf_gpu_staging_init(tf_gpu_staging *st, const tf_gpu_staging_ops *ops, void *ctx, size_t chunk) {
    memset(st, 0, sizeof *st);
    st->ops = ops;
    st->ctx = ctx;
    st->chunk = chunk;
}

static tf_status ensure_staging(tf_gpu_staging *st) {
    for (int i = 0; i < 2; i++) {
        if (st->buf[i]) continue;
        tf_status s = st->ops->event_create(st->ctx, &st->free_event[i]);
        if (s == TF_OK) s = st->ops->pinned_alloc(st->ctx, st->chunk, &st->buf[i]);
        if (s == TF_OK) s = st->ops->event_record(st->ctx, st->free_event[i]);   /* free from the start */
        if (s != TF_OK) {
            tf_gpu_staging_release(st);
            return s;
        }
    }
    return TF_OK;
}

tf_status tf_gpu_staged_upload(tf_gpu_staging *st, void *dst_handle, size_t dst_offset, const void *src, size_t n) {
    tf_status s = ensure_staging(st);
    const char *from = src;
    for (size_t done = 0, i = 0; s == TF_OK && done < n; i++) {
        int slot = (int)(i % 2);
        size_t c = n - done < st->chunk ? n - done : st->chunk;
        s = st->ops->event_wait_host(st->ctx, st->free_event[slot]);    /* its last DMA has finished */
        if (s != TF_OK) break;
        memcpy(st->buf[slot], from + done, c);
        s = st->ops->copy_to_device(st->ctx, dst_handle, dst_offset + done, st->buf[slot], c);
        if (s == TF_OK) s = st->ops->event_record(st->ctx, st->free_event[slot]);
        done += c;
    }
    if (s == TF_OK) st->staged_bytes += n;
    return s;
}

tf_status tf_gpu_staged_download(tf_gpu_staging *st, void *dst, const void *src_handle, size_t src_offset, size_t n) {
    tf_status s = ensure_staging(st);
    char *to = dst;
    size_t prev_off = 0, prev_len = 0;
    int prev_slot = 0;
    for (size_t done = 0, i = 0; s == TF_OK && (done < n || prev_len); i++) {
        int slot = (int)(i % 2);
        size_t c = n - done < st->chunk ? n - done : st->chunk;
        if (c) {
            s = st->ops->copy_to_host(st->ctx, st->buf[slot], src_handle, src_offset + done, c);
            if (s == TF_OK) s = st->ops->event_record(st->ctx, st->free_event[slot]);
        }
        if (s == TF_OK && prev_len) {
            s = st->ops->event_wait_host(st->ctx, st->free_event[prev_slot]);
            if (s == TF_OK) memcpy(to + prev_off, st->buf[prev_slot], prev_len);
        }
        prev_off = done;
        prev_len = c;
        prev_slot = slot;
        done += c;
    }
    if (s == TF_OK) st->staged_bytes += n;
    return s;
}

void tf_gpu_staging_release(tf_gpu_staging *st) {
    for (int i = 0; i < 2; i++) {
        if (st->buf[i]) st->ops->pinned_free(st->ctx, st->buf[i]);
        if (st->free_event[i]) st->ops->event_destroy(st->ctx, st->free_event[i]);
        st->buf[i] = st->free_event[i] = NULL;
    }
}

tf_gpu_grid_result tf_gpu_grid_of(int dims, const size_t *global, const size_t *local, unsigned grid[3],
                                  unsigned block[3]) {
    block[0] = local ? (unsigned)local[0] : 256;
    block[1] = dims > 1 && local ? (unsigned)local[1] : 1;
    block[2] = 1;
    size_t gx = (global[0] + block[0] - 1) / block[0];
    size_t gy = dims > 1 ? (global[1] + block[1] - 1) / block[1] : 1;
    grid[0] = grid[1] = grid[2] = 1;
    if (gx == 0 || gy == 0) return TF_GPU_GRID_EMPTY;
    if (gx > (size_t)INT_MAX || gy > (size_t)65535 * 65535) return TF_GPU_GRID_TOO_BIG;
    grid[0] = (unsigned)gx;
    grid[1] = (unsigned)(gy > 65535 ? 65535 : gy);
    grid[2] = (unsigned)((gy + grid[1] - 1) / grid[1]);
    return TF_GPU_GRID_OK;
}
