/* The OpenCL plugin on a real OpenCL device (PoCL in CI): discovery,
 * selection, exact movement, the mixed-device policy, asynchronous ops,
 * driver errors, and a failing kernel build. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>

#include <tensorframe/backend.h>
#include <tensorframe/opencl.h>

#include "helpers.h"

static tf_device *ocl(void) {
    tf_device *d = NULL;
    tf_status s = tf_device_get("opencl:0", &d);
    if (s != TF_OK) fail_msg("no opencl:0: %s (is pocl-opencl-icd installed?)", tf_last_error());
    return d;
}

static void test_discovery_and_selection(void **state) {
    (void)state;
    tf_device_props p;
    OK(tf_device_get_props(ocl(), &p));
    assert_string_equal(p.backend, "opencl");
    assert_true(p.memory_total > 0 && p.memory_free <= p.memory_total);
    assert_non_null(strstr(p.description, "driver "));
    assert_true(p.caps.async);
    assert_true(p.caps.dtypes & (1u << TF_F16));          /* stored through vload/vstore_half */
    tf_device *d;
    OK(tf_device_get("opencl", &d));                       /* the backend name alone means :0 */
    assert_ptr_equal(d, ocl());
    OK(tf_device_get("auto", &d));
    if (p.type == TF_DEVICE_TYPE_CPU) {
        assert_true(p.caps.emulated);
        assert_string_equal(tf_device_name(d), "cpu");     /* never over the CPU backend by default */
    }
    OK(tf_backend_priority_set("opencl,cpu"));             /* named: now it is picked */
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "opencl:0");
    OK(tf_backend_priority_set(NULL));
}

static void test_moving_is_bit_exact(void **state) {
    (void)state;
    tf_device *cpu = cpu_device(), *dev = ocl();
    unsigned char bytes[9 * 7 * 8];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 97 + 13);
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (dt == TF_BOOL) continue;
        int64_t shape[2] = {9, 7};
        if (tf_dtype_is_quantized((tf_dtype)dt)) {         /* one row of one block: any bytes are a block */
            shape[0] = 1;
            shape[1] = (int64_t)tf_dtype_block_size((tf_dtype)dt);
        }
        tf_tensor *a = NULL, *there = NULL, *copy = NULL, *back = NULL;
        OK(tf_tensor_from_data(cpu, (tf_dtype)dt, 2, shape, bytes, &a));
        OK(tf_tensor_to(a, dev, &there));
        OK(tf_copy(there, &copy));                         /* a device-side copy kernel */
        OK(tf_tensor_to(copy, cpu, &back));
        unsigned char got[sizeof bytes];
        size_t n = (size_t)(shape[0] * shape[1]) / tf_dtype_block_size((tf_dtype)dt) * tf_dtype_size((tf_dtype)dt);
        OK(tf_tensor_read(back, got, n));
        if (memcmp(got, bytes, n)) fail_msg("%s is not bit-exact after cpu -> opencl -> cpu", tf_dtype_name((tf_dtype)dt));
        tf_tensor *all[] = {a, there, copy, back};
        for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    }
}

static void test_mixed_device_policy(void **state) {
    (void)state;
    tf_device *cpu = cpu_device(), *dev = ocl();
    int64_t n = 4;
    float va[4] = {1, 2, 3, 4}, want[4] = {2, 4, 6, 8};
    tf_tensor *a = tensor_f32(cpu, 1, &n, va), *b = NULL, *o = NULL;
    OK(tf_tensor_to(a, dev, &b));
    OK(tf_add(a, b, &o));                                  /* opencl ranks above cpu */
    assert_ptr_equal(tf_tensor_device(o), dev);
    expect_f32(o, want, 4);
    tf_tensor_release(o);
    OK(tf_mixed_policy_set(TF_MIXED_FIRST_INPUT));
    OK(tf_add(a, b, &o));
    assert_ptr_equal(tf_tensor_device(o), cpu);
    expect_f32(o, want, 4);
    tf_tensor_release(o);
    OK(tf_mixed_policy_set(TF_MIXED_STRICT));
    FAILS_WITH(TF_ERR_DEVICE_MISMATCH, "inputs on cpu and opencl:0", tf_add(a, b, &o));
    OK(tf_mixed_policy_set(TF_MIXED_HIGHEST_PRIORITY));
    tf_tensor_release(a);
    tf_tensor_release(b);
}

static void test_ops_are_asynchronous_and_stay_on_device(void **state) {
    (void)state;
    tf_device *dev = ocl();
    tf_opencl_stats_fn stats = (tf_opencl_stats_fn)tf_backend_proc_address("opencl", "tf_opencl_stats");
    assert_non_null(stats);
    int64_t shape[2] = {256, 256};
    tf_tensor *a = NULL, *b = NULL, *c = NULL, *s = NULL;
    uint64_t fb = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_randn(dev, TF_F32, 2, shape, 7, &a));
    OK(tf_rand(dev, TF_F32, 2, shape, 8, &b));
    OK(tf_matmul(a, b, &c));                               /* enqueued, not waited for */
    OK(tf_sum(c, TF_ALL_AXES, false, &s));
    OK(tf_device_synchronize(dev));
    float total;
    OK(tf_tensor_read(s, &total, sizeof total));           /* waits behind the queue */
    tf_tensor *cpu_c = NULL, *cpu_s = NULL, *ca = NULL, *cb = NULL;
    OK(tf_tensor_to(a, cpu_device(), &ca));
    OK(tf_tensor_to(b, cpu_device(), &cb));
    OK(tf_matmul(ca, cb, &cpu_c));
    OK(tf_sum(cpu_c, TF_ALL_AXES, false, &cpu_s));
    float want;
    OK(tf_tensor_read(cpu_s, &want, sizeof want));
    assert_true(fabsf(total - want) <= 1e-3f * fabsf(want) + 1e-2f);
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), fb);   /* nothing left the device */
    tf_opencl_stats st;
    OK(stats(0, &st));
    assert_true(st.kernels_launched > 0);
    tf_tensor *all[] = {a, b, c, s, cpu_c, cpu_s, ca, cb};
    for (int i = 0; i < 8; i++) tf_tensor_release(all[i]);
}

static void test_driver_errors_are_named(void **state) {
    (void)state;
    tf_device_props p;
    OK(tf_device_get_props(ocl(), &p));
    int64_t too_big[1] = {(int64_t)(p.memory_total / 4) + 1024};
    tf_tensor *t = NULL;
    FAILS_WITH(TF_ERR_OUT_OF_MEMORY, "CL_MEM_OBJECT_ALLOCATION_FAILURE", tf_empty(ocl(), TF_F64, 1, too_big, &t));
    assert_null(t);
}

static void test_failing_kernel_build_reports_the_compiler_log(void **state) {
    (void)state;
    tf_shutdown();                                         /* fresh programs */
    setenv("TF_CACHE_DIR", "/tmp/tf-test-opencl-build-error", 1);
    tf_opencl_set_build_options_fn set_options =
        (tf_opencl_set_build_options_fn)tf_backend_proc_address("opencl", "tf_opencl_set_build_options");
    assert_non_null(set_options);
    OK(set_options("-DTF_FORCE_BUILD_ERROR"));
    int64_t n = 3;
    tf_tensor *a = NULL, *b = NULL, *o = NULL;
    OK(tf_tensor_from_data(ocl(), TF_I32, 1, &n, (int32_t[]){1, 1, 1}, &a));   /* an upload needs no program */
    FAILS_WITH(TF_ERR_BACKEND, "building the i32 kernels failed (CL_BUILD_PROGRAM_FAILURE)", tf_add(a, a, &o));
    assert_null(o);
    assert_non_null(strstr(tf_last_error(), "build error forced by tf_opencl_set_build_options"));
    OK(set_options(""));                                   /* a good build works again */
    OK(tf_add(a, a, &b));
    int32_t got[3];
    OK(tf_tensor_read(b, got, sizeof got));
    assert_true(got[0] == 2 && got[2] == 2);
    tf_tensor_release(a);
    tf_tensor_release(b);
    unsetenv("TF_CACHE_DIR");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery_and_selection),
        cmocka_unit_test(test_moving_is_bit_exact),
        cmocka_unit_test(test_mixed_device_policy),
        cmocka_unit_test(test_ops_are_asynchronous_and_stay_on_device),
        cmocka_unit_test(test_driver_errors_are_named),
        cmocka_unit_test(test_failing_kernel_build_reports_the_compiler_log),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
