/* The ROCm plugin end to end on its host side, over a fake HIP runtime
 * (fake_hip.c, through TF_HIP_LIB, FAKE_HIP=gfx90a): discovery reads the
 * device's name, target, compute units, wave size and memory; the plugin
 * loads the gfx90a code object of every dtype program and finds its kernels
 * by name; uploads and downloads go through the pinned staging buffers;
 * a launch that fails with a sticky error marks rocm:0 lost while the CPU
 * goes on; and shutdown leaves nothing behind (ASan). No kernel runs. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/rocm.h>

#include "helpers.h"

static tf_device *rocm0(void) {
    tf_device *d = NULL;
    OK(tf_device_get("rocm:0", &d));
    return d;
}

static void test_discovery(void **state) {
    (void)state;
    tf_backend_props b;
    bool found = false;
    for (int i = 0; i < tf_backend_count(); i++)
        if (tf_backend_get_props(i, &b) == TF_OK && !strcmp(b.name, "rocm")) {
            found = true;
            break;
        }
    assert_true(found);
    assert_int_equal(b.device_count, 1);
    assert_non_null(strstr(b.reason, "1 device(s); HIP runtime 5.2, code objects for gfx90a"));
    assert_non_null(strstr(b.reason, "rocBLAS not loaded: librocblas.so.0"));
    tf_device_props p;
    OK(tf_device_get_props(rocm0(), &p));
    assert_string_equal(p.backend, "rocm");
    assert_non_null(strstr(p.description, "AMD Instinct MI210 (fake) (gfx90a, 104 CUs, wave64; HIP runtime 5.2)"));
    assert_int_equal(p.type, TF_DEVICE_TYPE_GPU);
    assert_true(p.memory_total == (uint64_t)64 << 30);
    assert_true(p.memory_free == (uint64_t)60 << 30);
    assert_true(p.caps.tensor_cores);                          /* MFMA on gfx90a */
    assert_true(p.caps.async);
    tf_device_limits l;
    tf_device_hints h;
    OK(tf_device_get_limits(rocm0(), &l, &h));
    assert_int_equal(l.subgroup_size, 64);                     /* the wave size, read from the device */
    assert_int_equal(l.compute_units, 104);
    assert_int_equal(l.clock_mhz, 1700);
    tf_device *autod = NULL;
    OK(tf_device_get("auto", &autod));
    assert_string_equal(tf_device_name(autod), "rocm:0");     /* rocm ranks above webgpu and opencl */
}

static void test_code_objects_loaded(void **state) {
    (void)state;
    void *fake = dlopen(getenv("TF_HIP_LIB"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(fake);
    void (*counts)(int *, int *) = (void (*)(int *, int *))dlsym(fake, "fake_hip_counts");
    assert_non_null(counts);
    int modules = 0, functions = 0;
    counts(&modules, &functions);
    assert_int_equal(modules, 9);                              /* one per dtype program, gfx90a's (the fake checks) */
    assert_true(functions >= 9 * 10);                          /* kernels found by the names plan.h gives */
    dlclose(fake);
    tf_rocm_stats_fn stats = (tf_rocm_stats_fn)tf_backend_proc_address("rocm", "tf_rocm_stats");
    assert_non_null(stats);
    tf_rocm_stats s;
    OK(stats(0, &s));
    assert_int_equal(s.gfx_version, 9010);
    assert_int_equal(s.wave_size, 64);
    assert_false(s.lost);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_rocm_stats", stats(1, &s));
}

static void test_transfers(void **state) {
    (void)state;
    const int64_t n = (int64_t)5 << 20;                       /* 20 MiB: three staging chunks */
    float *src = malloc((size_t)n * sizeof *src), *back = malloc((size_t)n * sizeof *back);
    assert_non_null(src);
    assert_non_null(back);
    for (int64_t i = 0; i < n; i++) src[i] = (float)(i % 1000) * 0.5f;
    tf_tensor *t = NULL, *c = NULL;
    OK(tf_tensor_from_data(rocm0(), TF_F32, 1, &n, src, &t));
    OK(tf_tensor_to(t, rocm0(), &c));                           /* same device: a new buffer, copied */
    memset(back, 0, (size_t)n * sizeof *back);
    OK(tf_tensor_read(c, back, (size_t)n * sizeof *back));
    assert_memory_equal(src, back, (size_t)n * sizeof *back);
    tf_tensor_release(t);
    tf_tensor_release(c);
    free(src);
    free(back);
}

static void test_sticky_error_loses_only_the_device(void **state) {
    (void)state;
    float v[4] = {1, 2, 3, 4};
    int64_t n = 4;
    tf_tensor *a = NULL, *s = NULL;
    OK(tf_tensor_from_data(rocm0(), TF_F32, 1, &n, v, &a));
    tf_status st = tf_add(a, a, &s);                            /* the fake's launch: hipErrorIllegalAddress */
    assert_int_equal(st, TF_ERR_DEVICE_LOST);
    assert_non_null(strstr(tf_last_error(), "hipErrorIllegalAddress"));
    assert_null(s);
    FAILS_WITH(TF_ERR_DEVICE_LOST, "rocm:0", tf_add(a, a, &s));
    tf_rocm_stats_fn stats = (tf_rocm_stats_fn)tf_backend_proc_address("rocm", "tf_rocm_stats");
    tf_rocm_stats rs;
    OK(stats(0, &rs));
    assert_true(rs.lost);
    tf_tensor_release(a);
    tf_tensor *x = tensor_f32(cpu_device(), 1, &n, v), *y = NULL;   /* the CPU goes on */
    OK(tf_add(x, x, &y));
    expect_f32(y, (float[]){2, 4, 6, 8}, 4);
    tf_tensor_release(x);
    tf_tensor_release(y);
}

int main(void) {
    if (!getenv("TF_HIP_LIB") || !getenv("FAKE_HIP")) {
        fprintf(stderr, "needs TF_HIP_LIB (the fake runtime) and FAKE_HIP=gfx90a\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_code_objects_loaded),
        cmocka_unit_test(test_transfers),
        cmocka_unit_test(test_sticky_error_loses_only_the_device),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
