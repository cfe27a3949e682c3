/* Status names, thread-local error details and logging. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static _Thread_local char tl_error[4096];   /* room for a compiler log */

const char *tf_status_name(tf_status s) {
    switch (s) {
#define TF__STATUS_NAME(name, code, msg) case TF_##name: return "TF_" #name;
        TF_STATUS_LIST(TF__STATUS_NAME)
#undef TF__STATUS_NAME
    }
    return "TF_UNKNOWN_STATUS";
}

const char *tf_status_string(tf_status s) {
    switch (s) {
#define TF__STATUS_MSG(name, code, msg) case TF_##name: return msg;
        TF_STATUS_LIST(TF__STATUS_MSG)
#undef TF__STATUS_MSG
    }
    return "unknown status";
}

const char *tf_last_error(void) { return tl_error; }

void tf__clear_error(void) { tl_error[0] = 0; }

tf_status tf__verror(tf_status s, const char *fmt, va_list ap) {
    char msg[sizeof tl_error];                  /* an argument may be tf_last_error() itself */
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(tl_error, msg, sizeof msg);
    return s;
}

tf_status tf__error(tf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tf__verror(s, fmt, ap);
    va_end(ap);
    return s;
}

tf_status tf__error_context(tf_status s, const char *fmt, ...) {
    char prefix[1024], detail[sizeof tl_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(detail, tl_error, sizeof detail);
    const char *rest = *detail ? detail : tf_status_string(s);
    size_t used = (size_t)snprintf(tl_error, sizeof tl_error, "%s: ", prefix);
    if (used < sizeof tl_error) snprintf(tl_error + used, sizeof tl_error - used, "%.*s", (int)(sizeof tl_error - used - 1), rest);
    return s;
}

tf_status tf__in(const char *fn, tf_status s) {
    size_t n = strlen(fn);
    if (s == TF_OK || (!strncmp(tl_error, fn, n) && tl_error[n] == ':')) return s;
    return tf__error_context(s, "%s", fn);
}

static tf_log_level log_threshold(void) {
    /* A bad value warns once through tf__log itself, which reads this again:
     * env.c's once-per-value rule ends that at the second read. */
    static const char *const names[] = {"debug", "info", "warn", "warning", "error", "none"};
    static const tf_log_level levels[] = {TF_LOG_DEBUG, TF_LOG_INFO, TF_LOG_WARN, TF_LOG_WARN, TF_LOG_ERROR,
                                          (tf_log_level)99};
    int i = tf__env_choice("TF_LOG_LEVEL", names, 6);
    return i < 0 ? TF_LOG_WARN : levels[i];
}

void tf__log(tf_log_level level, const char *fmt, ...) {
    if (level < log_threshold()) return;
    static const char *const names[] = {"debug", "info", "warning", "error"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tensorframe %s: %s\n", names[level], line);
}

const char *tf__shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}
