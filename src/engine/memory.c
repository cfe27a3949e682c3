/* Device memory as the core sees it: every device buffer is taken and
 * given back here (counted for fault injection; recorded when
 * TF_ALLOC_TRACE names a file), and the public allocator calls —
 * statistics, the cache, configuration — reach the backend from here. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- the allocation trace ----
 * One line per event: "+ DEVICE ID BYTES" and "- DEVICE ID". An ID is the
 * backend buffer's address, unique while the buffer lives, which is all a
 * replay needs to pair a free with its allocation. */
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_file;
/* Every buffer passes here: with no trace (the usual case) one relaxed
 * load decides, and the lock is never taken. */
enum { TRACE_UNKNOWN, TRACE_OFF, TRACE_ON };
static atomic_int trace_mode;

static FILE *trace_locked(void) {
    if (atomic_load(&trace_mode) == TRACE_UNKNOWN) {
        const char *path = tf__env_string("TF_ALLOC_TRACE");
        if (path && !(trace_file = fopen(path, "w")))
            tf__log(TF_LOG_WARN, "TF_ALLOC_TRACE: cannot open %s; no trace is written", path);
        atomic_store(&trace_mode, trace_file ? TRACE_ON : TRACE_OFF);
    }
    return trace_file;
}

static void trace_event(const tf_device *dev, char sign, const void *buf, size_t nbytes) {
    if (atomic_load_explicit(&trace_mode, memory_order_relaxed) == TRACE_OFF) return;
    pthread_mutex_lock(&trace_lock);
    FILE *f = trace_locked();
    if (f && sign == '+') fprintf(f, "+ %s %p %zu\n", dev->name, buf, nbytes);
    else if (f) fprintf(f, "- %s %p\n", dev->name, buf);
    pthread_mutex_unlock(&trace_lock);
}

void tf__alloc_trace_close(void) {
    pthread_mutex_lock(&trace_lock);
    if (trace_file) fclose(trace_file);
    trace_file = NULL;
    atomic_store(&trace_mode, TRACE_UNKNOWN);
    pthread_mutex_unlock(&trace_lock);
}

/* ---- buffers ---- */

tf_status tf__buffer_alloc(tf_device *dev, size_t nbytes, tf_backend_buffer **out) {
    if ((*out = tf__hook_reuse(dev, nbytes))) return TF_OK;   /* a capture's temporary, used again */
    return tf__buffer_alloc_new(dev, nbytes, out);
}

tf_status tf__buffer_alloc_new(tf_device *dev, size_t nbytes, tf_backend_buffer **out) {
    if (tf__alloc_should_fail())
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: %zu bytes refused (injected allocation failure)", dev->name, nbytes);
    tf__deferred_sweep(dev);
    tf__clear_error();
    tf_status s = dev->bdev.iface->buffer_alloc(dev->bdev.ctx, nbytes, out);
    if (s == TF_ERR_OUT_OF_MEMORY && atomic_load(&dev->n_deferred)) {
        /* Memory freed behind other streams: wait for them, then once more. */
        tf__device_synchronize_all(dev);
        tf__clear_error();
        s = dev->bdev.iface->buffer_alloc(dev->bdev.ctx, nbytes, out);
    }
    if (s != TF_OK && !*tf_last_error()) tf__error(s, "%s: the backend refused %zu bytes", dev->name, nbytes);
    if (s == TF_OK) trace_event(dev, '+', *out, nbytes);
    if (s == TF_OK) tf__hook_alloc(dev, *out, nbytes);
    return s;
}

/* ---- buffers over memory tensorframe does not own (DLPack imports) ----
 * A release hook per such buffer, run once the buffer is truly freed: after
 * deferred frees and graph claims, or by the host free after tf_shutdown. */

typedef struct release_hook {
    tf_backend_buffer *buf;
    void (*release)(void *ctx);
    void *ctx;
    struct release_hook *next;
} release_hook;

static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static release_hook *hooks;
static _Atomic int n_hooks;                  /* the free path looks only when there are any */

tf_status tf__buffer_on_release(tf_backend_buffer *buf, void (*release)(void *ctx), void *ctx) {
    release_hook *h = tf__malloc(sizeof *h);
    if (!h) return tf__error(TF_ERR_OUT_OF_MEMORY, "out of host memory for a release hook");
    *h = (release_hook){buf, release, ctx, NULL};
    pthread_mutex_lock(&hooks_lock);
    h->next = hooks;
    hooks = h;
    atomic_fetch_add(&n_hooks, 1);
    pthread_mutex_unlock(&hooks_lock);
    return TF_OK;
}

/* Take buf's hook off the list (before the buffer is freed, so a new buffer
 * at the same address cannot be mistaken for it); NULL if it has none. */
release_hook *tf__buffer_take_release(tf_backend_buffer *buf) {
    if (!atomic_load(&n_hooks)) return NULL;
    pthread_mutex_lock(&hooks_lock);
    release_hook *found = NULL;
    for (release_hook **p = &hooks; *p; p = &(*p)->next)
        if ((*p)->buf == buf) {
            found = *p;
            *p = found->next;
            atomic_fetch_sub(&n_hooks, 1);
            break;
        }
    pthread_mutex_unlock(&hooks_lock);
    return found;
}

void tf__buffer_run_release(release_hook *h) {
    if (!h) return;
    h->release(h->ctx);
    tf__free(h);
}

void tf__buffer_free_now(tf_device *dev, tf_backend_buffer *buf) {
    trace_event(dev, '-', buf, 0);
    release_hook *h = tf__buffer_take_release(buf);
    dev->bdev.iface->buffer_free(dev->bdev.ctx, buf);
    tf__buffer_run_release(h);
}

void tf__buffer_free(tf_device *dev, tf_backend_buffer *buf) {
    if (tf__hook_free(dev, buf)) return;          /* a graph's ops still write it */
    tf__deferred_sweep(dev);
    if (!tf__deferred_free(dev, buf)) tf__buffer_free_now(dev, buf);
}

/* ---- statistics and the cache ---- */

tf_status tf_device_memory_stats(const tf_device *d, tf_memory_stats *out) {
    if (!d || !out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_memory_stats: NULL argument");
    memset(out, 0, sizeof *out);
    tf_status (*fn)(void *, tf_memory_stats *) = TF_DEVICE_SLOT(d, memory_stats);
    if (!fn) return tf__error(TF_ERR_UNSUPPORTED, "tf_device_memory_stats: %s keeps no allocator statistics", d->name);
    /* Frees deferred behind queues that have since passed them are done
     * first, so that they do not count as allocated. */
    tf__deferred_sweep((tf_device *)d);
    return fn(d->bdev.ctx, out);
}

tf_status tf_device_empty_cache(tf_device *d) {
    if (!d) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_empty_cache: device is NULL");
    void (*fn)(void *) = TF_DEVICE_SLOT(d, empty_cache);
    if (fn) fn(d->bdev.ctx);
    return TF_OK;
}

tf_status tf_device_reset_peak_memory(tf_device *d) {
    if (!d) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_reset_peak_memory: device is NULL");
    void (*fn)(void *) = TF_DEVICE_SLOT(d, reset_peak_memory);
    if (!fn) return tf__error(TF_ERR_UNSUPPORTED, "tf_device_reset_peak_memory: %s keeps no peaks", d->name);
    fn(d->bdev.ctx);
    return TF_OK;
}

/* ---- configuration ---- */

/* A device spec as tf_device_get reads it: "opencl:1", "opencl" (index 0),
 * "cpu" or "cpu:0" for the host. */
static bool device_matches(const tf_device *d, const char *spec) {
    if (!strcmp(d->name, spec)) return true;
    const char *backend = tf__backend_name(d);
    size_t n = strlen(backend);
    if (strncmp(spec, backend, n)) return false;
    if (!spec[n]) return d->index == 0;
    char *end;
    long i = spec[n] == ':' ? strtol(spec + n + 1, &end, 10) : -1;
    return spec[n] == ':' && end != spec + n + 1 && !*end && i == d->index;
}

tf_alloc_conf tf_alloc_conf_default(void) { return TF_ALLOC_CONF_DEFAULT; }

static bool valid_divisions(int d) { return d >= 1 && d <= 32 && (d & (d - 1)) == 0; }

static tf_status check_conf(const char *fn, const tf_alloc_conf *c) {
    if (!(c->limit_fraction >= 0 && c->limit_fraction <= 1))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: limit_fraction %g is outside [0, 1]", fn, c->limit_fraction);
    if (!valid_divisions(c->round_divisions))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: round_divisions %d is not 1, 2, 4, 8, 16 or 32", fn,
                         c->round_divisions);
    if (!(c->max_reserved_ratio == 0 || (c->max_reserved_ratio >= 1 && c->max_reserved_ratio < 1e6)))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: max_reserved_ratio %g is neither 0 nor at least 1", fn,
                         c->max_reserved_ratio);
    return TF_OK;
}

/* "8GiB", "512M", "1000000": bytes; false for anything else. */
static bool parse_bytes(const char *v, uint64_t *out) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || !(x >= 0)) return false;
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"", 1},       {"B", 1},          {"K", 1e3},        {"KB", 1e3},       {"KiB", 1024.0},
                 {"M", 1e6},    {"MB", 1e6},       {"MiB", 1048576.0}, {"G", 1e9},        {"GB", 1e9},
                 {"GiB", 1073741824.0}, {"T", 1e12}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].unit)) {
            double b = x * units[i].scale;
            if (b >= 18446744073709551615.0) return false;
            *out = (uint64_t)b;
            return true;
        }
    return false;
}

static bool parse_number(const char *v, double *out) {
    char *end;
    *out = strtod(v, &end);
    return end != v && !*end;
}

static bool parse_flag(const char *v, bool *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on")) *out = true;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off")) *out = false;
    else return false;
    return true;
}

/* One KEY:VALUE into *c; false if the key is unknown or the value bad. */
static bool apply_entry(const char *key, const char *value, tf_alloc_conf *c) {
    double x;
    if (!strcmp(key, "limit")) return parse_bytes(value, &c->limit);
    if (!strcmp(key, "release_threshold")) {
        if (!strcmp(value, "none")) {
            c->release_threshold = UINT64_MAX;
            return true;
        }
        return parse_bytes(value, &c->release_threshold);
    }
    if (!strcmp(key, "caching")) return parse_flag(value, &c->caching);
    if (!strcmp(key, "limit_fraction") && parse_number(value, &x)) return (c->limit_fraction = x), true;
    if (!strcmp(key, "max_reserved_ratio") && parse_number(value, &x)) return (c->max_reserved_ratio = x), true;
    if (!strcmp(key, "round_divisions") && parse_number(value, &x) && x == (int)x) {
        c->round_divisions = (int)x;
        return true;
    }
    return false;
}

tf_status tf_alloc_conf_parse(const char *text, const tf_device *device, tf_alloc_conf *conf) {
    if (!text || !conf) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_alloc_conf_parse: NULL argument");
    tf_alloc_conf c = *conf;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        char entry[256];
        if (len >= sizeof entry)
            return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_alloc_conf_parse: entry '%.40s...' is too long", p);
        memcpy(entry, p, len);
        entry[len] = 0;
        p += len + (p[len] == ',');
        if (!len) continue;
        /* DEVICE/KEY:VALUE applies to that device alone. */
        char *slash = strchr(entry, '/'), *key = entry;
        if (slash) {
            *slash = 0;
            key = slash + 1;
        }
        char *colon = strchr(key, ':');
        if (!colon) return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_alloc_conf_parse: '%s' is not KEY:VALUE", key);
        *colon = 0;
        tf_alloc_conf trial = c;
        if (!apply_entry(key, colon + 1, &trial))
            return tf__error(TF_ERR_INVALID_ARGUMENT,
                             "tf_alloc_conf_parse: bad entry '%s:%s' (keys: limit, limit_fraction, round_divisions, "
                             "release_threshold, max_reserved_ratio, caching)", key, colon + 1);
        if (slash && !(device && device_matches(device, entry))) continue;
        c = trial;
    }
    tf_status s = check_conf("tf_alloc_conf_parse", &c);
    if (s == TF_OK) *conf = c;
    return s;
}

tf_status tf_device_alloc_conf_get(const tf_device *d, tf_alloc_conf *out) {
    if (!d || !out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_alloc_conf_get: NULL argument");
    *out = d->alloc_conf;
    return TF_OK;
}

/* The backend sees the limit in bytes: the smaller of limit and the
 * fraction of the device's memory. */
static tf_alloc_conf resolved(tf_device *d, const tf_alloc_conf *conf) {
    tf_alloc_conf r = *conf;
    if (conf->limit_fraction > 0) {
        tf_backend_device_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (d->bdev.iface->get_info(d->bdev.ctx, &info) == TF_OK && info.memory_total) {
            uint64_t share = (uint64_t)(conf->limit_fraction * (double)info.memory_total);
            if (!share) share = 1;
            if (!r.limit || share < r.limit) r.limit = share;
        }
    }
    r.limit_fraction = 0;
    return r;
}

tf_status tf_device_alloc_conf_set(tf_device *d, const tf_alloc_conf *conf) {
    if (!d || !conf) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_device_alloc_conf_set: NULL argument");
    tf_status s = check_conf("tf_device_alloc_conf_set", conf);
    if (s != TF_OK) return s;
    tf_status (*fn)(void *, const tf_alloc_conf *) = TF_DEVICE_SLOT(d, alloc_configure);
    if (!fn)
        return tf__error(TF_ERR_UNSUPPORTED, "tf_device_alloc_conf_set: %s's allocator takes no configuration",
                         d->name);
    tf_alloc_conf r = resolved(d, conf);
    tf__clear_error();
    s = fn(d->bdev.ctx, &r);
    if (s != TF_OK) return *tf_last_error() ? s : tf__error(s, "tf_device_alloc_conf_set: %s refused", d->name);
    d->alloc_conf = *conf;
    return TF_OK;
}

static bool same_conf(const tf_alloc_conf *a, const tf_alloc_conf *b) {
    return a->limit == b->limit && a->limit_fraction == b->limit_fraction && a->round_divisions == b->round_divisions &&
           a->release_threshold == b->release_threshold && a->max_reserved_ratio == b->max_reserved_ratio &&
           a->caching == b->caching;
}

void tf__alloc_conf_init(tf_device *d) {
    d->alloc_conf = TF_ALLOC_CONF_DEFAULT;
    const char *env = tf__env_string("TF_ALLOC_CONF");
    if (!env) return;
    tf_alloc_conf c = d->alloc_conf;
    if (tf_alloc_conf_parse(env, d, &c) != TF_OK) {
        tf__log(TF_LOG_WARN, "TF_ALLOC_CONF ignored for %s: %s", d->name, tf_last_error());
        return;
    }
    if (same_conf(&c, &d->alloc_conf)) return;   /* no entry for this device: nothing to refuse */
    if (tf_device_alloc_conf_set(d, &c) != TF_OK)
        tf__log(TF_LOG_WARN, "TF_ALLOC_CONF not applied to %s: %s", d->name, tf_last_error());
}
