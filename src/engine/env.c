/* Environment variables, read one strict way (engine.h: tf__env_*; plugins
 * through tf_host_api's env slots, SDK 2.5). A value is taken only when
 * all of it is what the variable means: an integer in the API's own range
 * (no "4x", no wrap of "-2147483649"), a number, one of the named choices,
 * a flag. Anything else is ignored with one warning naming the variable and
 * the value (once per variable and value: the hot paths read some variables
 * per call), and the default stands. Unset and empty are the same. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- warnings, once per variable and value ---- */

enum { MAX_WARNED = 64 };
static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t warned[MAX_WARNED];
static int n_warned;

static uint64_t hash_of(const char *name, const char *value) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h = (h ^ '=') * 0x100000001b3ull;
    for (const char *p = value; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

static bool first_time(const char *name, const char *value) {
    uint64_t h = hash_of(name, value);
    bool first = true;
    pthread_mutex_lock(&warned_lock);
    for (int i = 0; i < n_warned && first; i++) first = warned[i] != h;
    if (first && n_warned == MAX_WARNED) first = false;     /* enough said (and no loop through TF_LOG_LEVEL) */
    if (first) warned[n_warned++] = h;
    pthread_mutex_unlock(&warned_lock);
    return first;
}

/* The value shown in a warning: at most 64 bytes, control bytes as '?'. */
static void printable(const char *value, char *out, size_t n) {
    size_t i = 0;
    for (; value[i] && i + 1 < n; i++) out[i] = (unsigned char)value[i] < 32 || value[i] == 127 ? '?' : value[i];
    out[i] = 0;
}

void tf__env_warn(const char *name, const char *value, const char *expected) {
    if (!first_time(name, value)) return;
    char shown[65];
    printable(value, shown, sizeof shown);
    tf__log(TF_LOG_WARN, "%s=%s%s is ignored: %s", name, shown, strlen(value) >= sizeof shown ? "..." : "", expected);
}

/* ---- the readers ---- */

const char *tf__env_string(const char *name) {
    const char *v = name ? getenv(name) : NULL;
    return v && *v ? v : NULL;
}

bool tf__env_int(const char *name, int64_t lo, int64_t hi, int64_t *out) {
    const char *v = tf__env_string(name);
    if (!v) return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    if (end == v || *end || errno == ERANGE || x < lo || x > hi) {
        char expected[96];
        snprintf(expected, sizeof expected, "not an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        tf__env_warn(name, v, expected);
        return false;
    }
    *out = x;
    return true;
}

bool tf__env_number(const char *name, double lo, double hi, double *out) {
    const char *v = tf__env_string(name);
    if (!v) return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    while (*end == ' ' || *end == '\t') end++;
    if (end == v || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi) {
        char expected[96];
        snprintf(expected, sizeof expected, "not a number in [%g, %g]", lo, hi);
        tf__env_warn(name, v, expected);
        return false;
    }
    *out = x;
    return true;
}

int tf__env_choice(const char *name, const char *const *choices, int n) {
    const char *v = tf__env_string(name);
    if (!v) return -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, choices[i])) return i;
    char expected[256];
    size_t at = (size_t)snprintf(expected, sizeof expected, "not one of");
    for (int i = 0; i < n && at < sizeof expected; i++)
        at += (size_t)snprintf(expected + at, sizeof expected - at, "%s %s", i ? "," : "", choices[i]);
    tf__env_warn(name, v, expected);
    return -1;
}

bool tf__env_flag(const char *name, bool fallback) {
    static const char *const names[] = {"0", "1", "false", "true", "off", "on", "no", "yes"};
    int i = tf__env_choice(name, names, 8);
    return i < 0 ? fallback : (i % 2) == 1;
}
