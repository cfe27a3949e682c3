/* A sweep of reductions with few outputs over long rows, the shapes where
 * a split reduction's group count matters, timed on one device; with
 * TF_AUTOTUNE=1 the first use of each shape tunes it (bench/autotune.sh
 * runs this three times and compares).
 *
 *   autotune_sweep [device] [--quick]
 *
 * Prints one line per shape (median microseconds per tf_sum), then the
 * device's autotune statistics. Every sum is checked against a float64
 * reference; a wrong one exits 1. Exit 77 when the device is absent. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/backend.h>
#include <tensorframe/opencl.h>
#include <tensorframe/tensorframe.h>

#include "bench_util.h"

/* Sum [m, r] over its rows; check every output; the median time of reps. */
static double sweep_one(tf_device *d, int64_t m, int64_t r, int reps) {
    int64_t shape[2] = {m, r};
    float *v = malloc((size_t)(m * r) * sizeof *v);
    double *want = calloc((size_t)m, sizeof *want);
    if (!v || !want) exit(1);
    for (int64_t i = 0; i < m * r; i++) {
        v[i] = (float)((i * 7919) % 2001 - 1000) / 1024.0f;    /* exact in f32 */
        want[i / r] += v[i];
    }
    tf_tensor *x, *s = NULL;
    CHECK(tf_tensor_from_data(d, TF_F32, 2, shape, v, &x));
    CHECK(tf_sum(x, 1, false, &s));                               /* first use: tuned here when on */
    float *got = malloc((size_t)m * sizeof *got);
    CHECK(tf_tensor_read(s, got, (size_t)m * sizeof *got));
    for (int64_t i = 0; i < m; i++)
        if (fabs(got[i] - want[i]) > 1e-5 * (double)r) {
            fprintf(stderr, "sum [%lld, %lld] row %lld: %.9g, want %.9g\n", (long long)m, (long long)r, (long long)i,
                    got[i], want[i]);
            exit(1);
        }
    tf_tensor_release(s);
    for (int k = 0; k < 3; k++) {                   /* warm: caches, the driver's first launches */
        CHECK(tf_sum(x, 1, false, &s));
        tf_tensor_release(s);
    }
    CHECK(tf_device_synchronize(d));
    double t[31];
    for (int k = 0; k < reps; k++) {
        double t0 = now_us();
        CHECK(tf_sum(x, 1, false, &s));
        CHECK(tf_device_synchronize(d));
        t[k] = now_us() - t0;
        tf_tensor_release(s);
    }
    tf_tensor_release(x);
    free(v);
    free(want);
    free(got);
    return median(t, (size_t)reps);
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "opencl:0";
    bool quick = argc > 2 && !strcmp(argv[2], "--quick");
    tf_device *d;
    if (tf_device_get(spec, &d) != TF_OK) {
        printf("autotune_sweep: no %s here\n", spec);
        return 77;
    }
    static const int64_t shapes[][2] = {{1, 1 << 12}, {1, 1 << 16}, {1, 1 << 20}, {2, 1 << 18},
                                        {4, 1 << 16}, {8, 1 << 17}, {16, 1 << 14}, {32, 1 << 15}};
    int n = quick ? 3 : (int)(sizeof shapes / sizeof *shapes), reps = quick ? 3 : 21;
    printf("autotune_sweep %s (TF_AUTOTUNE=%s)\n", tf_device_name(d), getenv("TF_AUTOTUNE") ? getenv("TF_AUTOTUNE") : "");
    for (int i = 0; i < n; i++)
        printf("shape %lld x %lld: %.1f us\n", (long long)shapes[i][0], (long long)shapes[i][1],
               sweep_one(d, shapes[i][0], shapes[i][1], reps));
    tf_opencl_autotune_stats_fn stats = (tf_opencl_autotune_stats_fn)tf_backend_proc_address("opencl",
                                                                                             "tf_opencl_autotune_stats");
    tf_autotune_stats st = {0};
    if (stats && !strncmp(tf_device_name(d), "opencl:", 7)) CHECK(stats(atoi(tf_device_name(d) + 7), &st));
    printf("autotune: lookups %llu hits %llu tuned %llu timing_launches %llu discarded_files %llu\n",
           (unsigned long long)st.lookups, (unsigned long long)st.hits, (unsigned long long)st.tuned,
           (unsigned long long)st.timing_launches, (unsigned long long)st.discarded_files);
    tf_shutdown();
    return 0;
}
