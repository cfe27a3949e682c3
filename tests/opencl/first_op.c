#define _POSIX_C_SOURCE 200809L
/* Time the first op on opencl:0 in a fresh process (program build or cache
 * load included) and print the backend's build and cache counters. */
#include <stdio.h>
#include <time.h>

#include <tensorframe/backend.h>
#include <tensorframe/opencl.h>

int main(void) {
    tf_device *dev;
    tf_tensor *a = NULL, *b = NULL;
    if (tf_device_get("opencl:0", &dev) != TF_OK) {
        printf("no opencl:0: %s\n", tf_last_error());
        return 1;
    }
    int64_t n = 1024;
    struct timespec t0, t1;
    if (tf_ones(dev, TF_F32, 1, &n, &a) != TF_OK) return 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tf_status s = tf_add(a, a, &b);
    if (s == TF_OK) s = tf_device_synchronize(dev);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (s != TF_OK) {
        printf("first op failed: %s\n", tf_last_error());
        return 1;
    }
    tf_opencl_stats st = {0};
    tf_opencl_stats_fn stats = (tf_opencl_stats_fn)tf_backend_proc_address("opencl", "tf_opencl_stats");
    if (stats) stats(0, &st);
    printf("first op on opencl:0: %.1f ms (programs built from source: %llu, loaded from cache: %llu)\n",
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, (unsigned long long)st.builds,
           (unsigned long long)st.cache_hits);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_shutdown();
    return 0;
}
