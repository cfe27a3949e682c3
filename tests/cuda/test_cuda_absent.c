/* The CUDA plugin on a machine without a usable GPU (this one: a toolkit
 * but no driver): it loads, reports zero devices and cudaGetDeviceCount's
 * reason, cuda:0 is a clear error, `auto` and every other device work, and
 * its extras answer for no device. Skipped (77) where a GPU is present. */
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>

#include "helpers.h"

static bool cuda_props(tf_backend_props *out) {
    for (int i = 0; i < tf_backend_count(); i++)
        if (tf_backend_get_props(i, out) == TF_OK && !strcmp(out->name, "cuda")) return true;
    return false;
}

static void test_loads_with_zero_devices_and_the_reason(void **state) {
    (void)state;
    tf_backend_props b;
    assert_true(cuda_props(&b));
    assert_true(b.loaded);
    assert_int_equal(b.status, TF_OK);
    assert_int_equal(b.device_count, 0);
    assert_non_null(strstr(b.reason, "no CUDA device (cudaGetDeviceCount: cudaError"));
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!driver) driver = dlopen("libcuda.so.1", RTLD_LAZY);
    if (!driver)                                     /* no driver here: the note names the missing library */
        assert_non_null(strstr(b.reason, "the NVIDIA driver is not installed: libcuda.so.1"));
    else
        dlclose(driver);
    assert_true(strstr(b.source, "libtensorframe-cuda.so") != NULL);
}

static void test_everything_else_works(void **state) {
    (void)state;
    tf_device *d = NULL;
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "cuda:0", tf_device_get("cuda:0", &d));
    assert_null(d);
    OK(tf_device_get("auto", &d));                       /* cuda is first in the priority list: skipped */
    assert_string_not_equal(tf_device_name(d), "cuda:0");
    int64_t n = 4;
    tf_tensor *a = NULL, *s = NULL;
    OK(tf_arange(d, TF_F32, 0, 4, 1, &a));
    OK(tf_sum(a, TF_ALL_AXES, false, &s));
    float v = 0;
    OK(tf_tensor_read(s, &v, sizeof v));
    assert_true(v == 6.0f);
    (void)n;
    tf_tensor_release(a);
    tf_tensor_release(s);
}

static void test_extras_answer_for_no_device(void **state) {
    (void)state;
    tf_cuda_stats_fn stats = (tf_cuda_stats_fn)tf_backend_proc_address("cuda", "tf_cuda_stats");
    tf_cuda_set_tf32_fn tf32 = (tf_cuda_set_tf32_fn)tf_backend_proc_address("cuda", "tf_cuda_set_tf32");
    assert_non_null(stats);
    assert_non_null(tf32);
    tf_cuda_stats st;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_cuda_stats: no device 0 (0 present)", stats(0, &st));
    OK(tf32(false));
    assert_null(tf_backend_proc_address("cuda", "no_such_extra"));
}

int main(void) {
    tf_backend_props b;
    if (cuda_props(&b) && b.device_count > 0) {
        printf("SKIPPED: this machine has %d CUDA device(s); the no-GPU path is not reachable\n", b.device_count);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads_with_zero_devices_and_the_reason),
        cmocka_unit_test(test_everything_else_works),
        cmocka_unit_test(test_extras_answer_for_no_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
