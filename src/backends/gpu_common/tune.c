/* The autotuning cache (tune.h): timing candidates, the file, its header. */
#define _POSIX_C_SOURCE 200809L
#include "tune.h"
#include "gpu_runtime.h"   /* tf_gpu_env_flag, tf_gpu_env_string */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TUNE_FORMAT "tensorframe-tune,1"

bool tf_tune_enabled(void) {
    return tf_gpu_env_flag("TF_AUTOTUNE", false);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

void tf_gpu_cache_dir(char *out, size_t n, const char *sub) {
    const char *env = tf_gpu_env_string("TF_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env) snprintf(out, n, "%s/%s", env, sub);
    else if (xdg && *xdg) snprintf(out, n, "%s/tensorframe/%s", xdg, sub);
    else if (home && *home) snprintf(out, n, "%s/.cache/tensorframe/%s", home, sub);
    else snprintf(out, n, "/tmp/tensorframe-cache/%s", sub);
}

void tf_gpu_make_dirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(tmp, 0755);
        *p = '/';
    }
    mkdir(tmp, 0755);
}

void tf_tune_init(tf_tune_cache *c, const tf_host_api *host, const char *backend, const char *device,
                  const char *driver, uint64_t source_hash) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->host = host;
    char root[900];
    tf_gpu_cache_dir(root, sizeof root, "tune");
    snprintf(c->path, sizeof c->path, "%s/%s-%016llx.csv", root, backend, (unsigned long long)fnv1a(device));
    /* commas would split the header's fields: the names are kept as given otherwise */
    snprintf(c->header, sizeof c->header, TUNE_FORMAT ",library=%d.%d.%d,device=%s,driver=%s,source=%016llx",
             TF_VERSION_MAJOR, TF_VERSION_MINOR, TF_VERSION_PATCH, device, driver, (unsigned long long)source_hash);
    for (char *p = c->header + strlen(TUNE_FORMAT) + 1; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

void tf_tune_destroy(tf_tune_cache *c) {
    free(c->entries);
    c->entries = NULL;
    c->n = c->cap = 0;
    pthread_mutex_destroy(&c->lock);
}

static tf_tune_entry *find(tf_tune_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->entries[i].key, key)) return &c->entries[i];
    return NULL;
}

static bool add(tf_tune_cache *c, const char *key, int64_t choice, double us) {
    tf_tune_entry *e = find(c, key);
    if (!e) {
        if (c->n == c->cap) {
            int cap = c->cap ? c->cap * 2 : 32;
            tf_tune_entry *p = realloc(c->entries, (size_t)cap * sizeof *p);
            if (!p) return false;
            c->entries = p;
            c->cap = cap;
        }
        e = &c->entries[c->n++];
        snprintf(e->key, sizeof e->key, "%s", key);
    }
    e->choice = choice;
    e->us = us;
    return true;
}

/* Read the file once; a header from another library, device, driver or
 * kernel source drops the whole file. Malformed lines are skipped. */
static void load(tf_tune_cache *c) {
    if (c->loaded) return;
    c->loaded = true;
    FILE *f = fopen(c->path, "r");
    if (!f) return;
    char line[1024];
    if (!fgets(line, sizeof line, f) || (line[strcspn(line, "\n")] = 0, strcmp(line, c->header) != 0)) {
        fclose(f);
        c->stats.discarded_files++;
        c->host->log(TF_LOG_INFO, "autotune: %s is from another library, device, driver or kernels: discarded",
                     c->path);
        remove(c->path);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *last = strrchr(line, ','), *choice_end;
        if (!last) continue;
        *last = 0;
        char *before = strrchr(line, ',');
        if (!before) continue;
        *before = 0;
        double us = strtod(last + 1, NULL);
        long long choice = strtoll(before + 1, &choice_end, 10);
        if (choice_end == before + 1 || choice < 1 || strlen(line) >= sizeof c->entries[0].key) continue;
        add(c, line, choice, us);
    }
    fclose(f);
}

/* Write to a temporary file and rename: a reader never sees half a file. */
static void save(tf_tune_cache *c) {
    char dir[1024], tmp[1100];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    tf_gpu_make_dirs(dir);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", c->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        c->host->log(TF_LOG_WARN, "autotune: cannot write %s (%s); answers kept in memory only", tmp, strerror(errno));
        return;
    }
    fprintf(f, "%s\n", c->header);
    for (int i = 0; i < c->n; i++)
        fprintf(f, "%s,%lld,%.3f\n", c->entries[i].key, (long long)c->entries[i].choice, c->entries[i].us);
    bool ok = fclose(f) == 0;
    if (!ok || rename(tmp, c->path) != 0) {
        remove(tmp);
        c->host->log(TF_LOG_WARN, "autotune: cannot save %s", c->path);
    }
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

#define TIMED_RUNS 3

/* The median of TIMED_RUNS runs after a warm-up, in microseconds; < 0 on failure. */
static double time_candidate(tf_tune_cache *c, int64_t choice, tf_status (*run)(const void *, int64_t),
                             const void *closure, tf_status (*sync)(void *), void *ctx) {
    double t[TIMED_RUNS];
    if (run(closure, choice) != TF_OK || sync(ctx) != TF_OK) return -1;
    c->stats.timing_launches++;
    for (int i = 0; i < TIMED_RUNS; i++) {
        double t0 = now_us();
        if (run(closure, choice) != TF_OK || sync(ctx) != TF_OK) return -1;
        t[i] = now_us() - t0;
        c->stats.timing_launches++;
    }
    for (int i = 1; i < TIMED_RUNS; i++)                 /* three values: sort in place */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[TIMED_RUNS / 2];
}

int64_t tf_tune_choose(tf_tune_cache *c, const char *key, const int64_t *candidates, int n_candidates,
                       int64_t fallback, tf_status (*run)(const void *closure, int64_t choice), const void *closure,
                       tf_status (*sync)(void *ctx), void *ctx) {
    pthread_mutex_lock(&c->lock);
    load(c);
    c->stats.lookups++;
    tf_tune_entry *e = find(c, key);
    if (e) {
        c->stats.hits++;
        int64_t choice = e->choice;
        pthread_mutex_unlock(&c->lock);
        return choice;
    }
    /* The caller holds its device's lock: timing here keeps other work off
     * the device meanwhile. The fallback is always a candidate, so the
     * winner is never slower than it as measured. */
    int64_t best = fallback;
    double best_us = time_candidate(c, fallback, run, closure, sync, ctx);
    for (int i = 0; i < n_candidates && best_us >= 0; i++) {
        if (candidates[i] == fallback) continue;
        double us = time_candidate(c, candidates[i], run, closure, sync, ctx);
        if (us >= 0 && us < best_us) {
            best = candidates[i];
            best_us = us;
        }
    }
    if (best_us >= 0 && add(c, key, best, best_us)) {
        c->stats.tuned++;
        save(c);
    }
    pthread_mutex_unlock(&c->lock);
    return best;
}
