/* The profiler: one record per op the core dispatches (tf__dispatch), kept
 * while tf_profiler_start..stop (or TF_PROFILE) is on, written as Chrome
 * trace JSON (Perfetto, chrome://tracing) and summed by op into a table.
 * Off, it costs one relaxed atomic load per op. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "observers.h"

#define SHAPES_TEXT 200

typedef struct prof_record {
    uint64_t start_ns, end_ns;           /* host clock, around the backend's run (or the CPU fallback) */
    tf_op_kind op;
    const tf_device *dev;
    char fn[32];                         /* the public call ("tf_linear") */
    char shapes[SHAPES_TEXT];            /* "f32[2,3], f32[3] -> f32[2,3]" */
    uint64_t bytes;                      /* read and written by the kernel */
    unsigned thread;                     /* the host thread, numbered from 1 in order of first op */
    bool fallback;
    bool synchronous;                    /* the device computes before returning: the span is execution */
    tf_status status;
} prof_record;

static struct {
    pthread_mutex_t lock;
    atomic_bool on;
    prof_record *records;
    size_t count, cap;
    uint64_t dropped;                    /* no memory for more records */
    uint64_t origin_ns;                  /* tf_profiler_start */
    unsigned threads;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local unsigned thread_number;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool tf__profiling(void) { return atomic_load_explicit(&P.on, memory_order_relaxed); }

uint64_t tf__profile_clock(void) { return now_ns(); }

/* ---- what a record says ---- */

static void append_desc(char *buf, size_t n, const tf_tensor_desc *d) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    int w = snprintf(buf + len, n - len, "%s[", tf_dtype_name(d->dtype));
    for (int i = 0; i < d->ndim && w > 0; i++) {
        len = strlen(buf);
        if (len + 1 >= n) return;
        w = snprintf(buf + len, n - len, "%s%lld", i ? "," : "", (long long)d->shape[i]);
    }
    len = strlen(buf);
    if (len + 1 < n) snprintf(buf + len, n - len, "]");
}

static void describe(const tf_op *op, char *buf, size_t n) {
    buf[0] = 0;
    for (int i = 0; i < op->n_inputs; i++) {
        if (i) strncat(buf, ", ", n - strlen(buf) - 1);
        append_desc(buf, n, &op->inputs[i]);
    }
    strncat(buf, " -> ", n - strlen(buf) - 1);
    append_desc(buf, n, &op->output);
}

/* Bytes the op touches: each operand's elements once (broadcast axes read once). */
static uint64_t operand_bytes(const tf_tensor_desc *d) {
    int64_t elems = 1;
    for (int i = 0; i < d->ndim; i++) elems *= d->strides[i] ? d->shape[i] : 1;
    return (uint64_t)tf__bytes_of(d->dtype, elems);
}

static uint64_t bytes_moved(const tf_op *op) {
    uint64_t b = operand_bytes(&op->output);
    for (int i = 0; i < op->n_inputs; i++) b += operand_bytes(&op->inputs[i]);
    return b;
}

void tf__profile_record(const char *fn, const tf_device *dev, const tf_op *op, uint64_t start_ns, bool fallback,
                        tf_status status) {
    prof_record r = {.start_ns = start_ns, .end_ns = now_ns(), .op = op->kind, .dev = dev, .fallback = fallback,
                     .synchronous = fallback || !dev->async, .status = status, .bytes = bytes_moved(op)};
    snprintf(r.fn, sizeof r.fn, "%s", fn ? fn : "");
    describe(op, r.shapes, sizeof r.shapes);
    pthread_mutex_lock(&P.lock);
    if (!thread_number) thread_number = ++P.threads;
    r.thread = thread_number;
    if (atomic_load(&P.on) && P.count == P.cap) {
        size_t cap = P.cap ? P.cap * 2 : 4096;
        prof_record *bigger = realloc(P.records, cap * sizeof *bigger);   /* not counted: profiling is diagnostics */
        if (bigger) {
            P.records = bigger;
            P.cap = cap;
        }
    }
    if (!atomic_load(&P.on)) {
    } else if (P.count < P.cap) {
        P.records[P.count++] = r;
    } else {
        P.dropped++;
    }
    pthread_mutex_unlock(&P.lock);
}

/* ---- the public calls ---- */

tf_status tf_profiler_start(void) {
    tf_status s = tf__init();
    if (s != TF_OK) return s;
    pthread_mutex_lock(&P.lock);
    P.count = 0;
    P.dropped = 0;
    P.origin_ns = now_ns();
    atomic_store(&P.on, true);
    pthread_mutex_unlock(&P.lock);
    return TF_OK;
}

tf_status tf_profiler_stop(void) {
    atomic_store(&P.on, false);
    return TF_OK;
}

int64_t tf_profiler_record_count(void) {
    pthread_mutex_lock(&P.lock);
    int64_t n = (int64_t)P.count;
    pthread_mutex_unlock(&P.lock);
    return n;
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* One track per (device, host thread): ops of one thread on one device
 * never overlap, which Chrome's "X" events on one track require. */
static unsigned track_of(const prof_record *r) { return (unsigned)tf__device_index(r->dev) * 1000u + r->thread; }

static void write_track_names(FILE *f) {
    unsigned seen[256];
    size_t n = 0;
    for (size_t i = 0; i < P.count; i++) {
        unsigned t = track_of(&P.records[i]);
        bool known = false;
        for (size_t k = 0; k < n && !known; k++) known = seen[k] == t;
        if (known || n == sizeof seen / sizeof *seen) continue;
        seen[n++] = t;
        char name[96];
        snprintf(name, sizeof name, "%s (host thread %u)", tf_device_name(P.records[i].dev), P.records[i].thread);
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":", t);
        json_string(f, name);
        fprintf(f, "}},\n");
    }
}

static void write_event(FILE *f, const prof_record *r) {
    double ts = (double)(r->start_ns - P.origin_ns) / 1e3, dur = (double)(r->end_ns - r->start_ns) / 1e3;
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{",
            tf_op_name(r->op), track_of(r), ts, dur);
    fprintf(f, "\"call\":");
    json_string(f, r->fn);
    fprintf(f, ",\"device\":");
    json_string(f, tf_device_name(r->dev));
    fprintf(f, ",\"stream\":\"current\",\"operands\":");
    json_string(f, r->shapes);
    fprintf(f, ",\"bytes\":%llu,\"fallback\":%s,\"status\":\"%s\",", (unsigned long long)r->bytes,
            r->fallback ? "true" : "false", tf_status_name(r->status));
    /* Synchronous work is done when run returns; an asynchronous device's
     * span is the time to queue it, and it reports no execution time. */
    if (r->synchronous) fprintf(f, "\"execution_us\":%.3f}}", dur);
    else fprintf(f, "\"queue_us\":%.3f,\"execution_us\":null}}", dur);
}

tf_status tf_profiler_write_trace(const char *path) {
    if (!path) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_profiler_write_trace: path is NULL");
    FILE *f = fopen(path, "w");
    if (!f) return tf__error(TF_ERR_IO, "tf_profiler_write_trace: cannot write %s", path);
    pthread_mutex_lock(&P.lock);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"library\":\"tensorframe\",\"dropped\":%llu},\n"
               "\"traceEvents\":[\n",
            (unsigned long long)P.dropped);
    write_track_names(f);
    for (size_t i = 0; i < P.count; i++) {
        write_event(f, &P.records[i]);
        fprintf(f, "%s\n", i + 1 < P.count ? "," : "");
    }
    fprintf(f, "]}\n");
    pthread_mutex_unlock(&P.lock);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) return tf__error(TF_ERR_IO, "tf_profiler_write_trace: writing %s failed", path);
    return TF_OK;
}

/* ---- the summary ---- */

typedef struct op_total {
    tf_op_kind op;
    const tf_device *dev;
    uint64_t calls, ns, bytes, fallbacks;
} op_total;

static int by_time(const void *a, const void *b) {
    const op_total *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

static size_t totals(op_total *t, size_t cap, uint64_t *all_ns) {
    size_t n = 0;
    *all_ns = 0;
    for (size_t i = 0; i < P.count; i++) {
        const prof_record *r = &P.records[i];
        size_t k = 0;
        while (k < n && !(t[k].op == r->op && t[k].dev == r->dev)) k++;
        if (k == n) {
            if (n == cap) continue;
            t[n++] = (op_total){.op = r->op, .dev = r->dev};
        }
        uint64_t ns = r->end_ns - r->start_ns;
        t[k].calls++;
        t[k].ns += ns;
        t[k].bytes += r->bytes;
        t[k].fallbacks += r->fallback;
        *all_ns += ns;
    }
    qsort(t, n, sizeof *t, by_time);
    return n;
}

tf_status tf_profiler_summary(char *buf, size_t buf_bytes) {
    if (!buf) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_profiler_summary: buf is NULL");
    enum { MAX_ROWS = 4 * TF_OP_COUNT };
    op_total *t = malloc(MAX_ROWS * sizeof *t);
    if (!t) return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_profiler_summary: out of memory");
    pthread_mutex_lock(&P.lock);
    uint64_t all_ns;
    size_t n = totals(t, MAX_ROWS, &all_ns), used = 0;
    bool fits = true;
#define PUT(...)                                                                                  \
    do {                                                                                          \
        int w_ = snprintf(buf + used, used < buf_bytes ? buf_bytes - used : 0, __VA_ARGS__);      \
        used += w_ > 0 ? (size_t)w_ : 0;                                                          \
        if (used >= buf_bytes) fits = false;                                                      \
    } while (0)
    PUT("%-22s %-12s %8s %11s %10s %6s %10s %9s\n", "op", "device", "calls", "total ms", "mean us", "share",
        "MB moved", "fallbacks");
    for (size_t i = 0; i < n; i++)
        PUT("%-22s %-12s %8llu %11.3f %10.2f %5.1f%% %10.2f %9llu\n", tf_op_name(t[i].op), tf_device_name(t[i].dev),
            (unsigned long long)t[i].calls, t[i].ns / 1e6, t[i].ns / 1e3 / (double)t[i].calls,
            all_ns ? 100.0 * (double)t[i].ns / (double)all_ns : 0.0, t[i].bytes / 1e6,
            (unsigned long long)t[i].fallbacks);
    PUT("%llu ops, %.3f ms in ops%s\n", (unsigned long long)P.count, all_ns / 1e6,
        P.dropped ? " (some records dropped: out of memory)" : "");
#undef PUT
    pthread_mutex_unlock(&P.lock);
    free(t);
    if (!fits) {
        if (buf_bytes) buf[buf_bytes - 1] = 0;
        return tf__error(TF_ERR_BUFFER_TOO_SMALL, "tf_profiler_summary: the table needs %zu bytes, %zu given",
                         used + 1, buf_bytes);
    }
    return TF_OK;
}

/* ---- TF_PROFILE ---- */

void tf__profile_from_environment(void) {
    if (tf__env_string("TF_PROFILE") && !tf__profiling()) tf_profiler_start();
}

/* At tf_shutdown: TF_PROFILE's trace to its path, the table beside it
 * (PATH.txt). Records name devices, so they go with them. */
void tf__profile_shutdown(void) {
    const char *path = tf__env_string("TF_PROFILE");
    if (path && P.count) {
        tf_profiler_stop();
        if (tf_profiler_write_trace(path) != TF_OK) tf__log(TF_LOG_WARN, "TF_PROFILE: %s", tf_last_error());
        char txt[1024];
        snprintf(txt, sizeof txt, "%s.txt", path);
        size_t cap = 1 << 16;
        char *table = malloc(cap);
        FILE *f = table ? fopen(txt, "w") : NULL;
        if (f && tf_profiler_summary(table, cap) != TF_ERR_NULL_ARGUMENT) fputs(table, f);
        if (f) fclose(f);
        free(table);
    }
    atomic_store(&P.on, false);
    pthread_mutex_lock(&P.lock);
    free(P.records);
    P.records = NULL;
    P.count = P.cap = 0;
    pthread_mutex_unlock(&P.lock);
}
