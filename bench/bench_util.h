/* What the small C benchmarks in bench/ share: stop on the first failed
 * call (with the library's message), a monotonic clock, and the median. */
#ifndef TF_BENCH_UTIL_H
#define TF_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tensorframe/tensorframe.h>

#define CHECK(call)                                                                           \
    do {                                                                                      \
        tf_status s_ = (call);                                                                \
        if (s_ != TF_OK) {                                                                    \
            fprintf(stderr, "%s: %s: %s\n", #call, tf_status_name(s_), tf_last_error());      \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline int bench_by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n samples (sorted in place). */
static inline double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, bench_by_value);
    return v[n / 2];
}

#endif
