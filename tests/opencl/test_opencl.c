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
    unsigned char bytes[9 * 7 * 16];                     /* 9x7 of the widest dtype, c128 */
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

/* The bytes of a tensor (any dtype, contiguous), malloc'd. */
static unsigned char *bytes_of(const tf_tensor *t, size_t *n) {
    *n = (size_t)tf_tensor_nbytes(t);
    unsigned char *b = malloc(*n + 1);
    assert_non_null(b);
    OK(tf_tensor_read(t, b, *n));
    return b;
}

static void expect_same_bytes(const tf_tensor *a, const tf_tensor *b, const char *what, tf_dtype wt) {
    size_t na, nb;
    unsigned char *x = bytes_of(a, &na), *y = bytes_of(b, &nb);
    assert_int_equal(na, nb);
    size_t at = 0;
    while (at < na && x[at] == y[at]) at++;
    if (at < na) fail_msg("%s (%s): the device's bytes differ from the CPU's at byte %zu of %zu", what, tf_dtype_name(wt), at, na);
    free(x);
    free(y);
}

/* Quantized dtypes on the device, with no CPU fallback: encoding, decoding
 * (to f32 and f16, whole tensors and row slices) and row selection give the
 * CPU's bytes exactly; the product with a quantized weight matches a float64
 * product of the decoded weight, in both of its kernels (few rows, many). */
static void test_quantized_dtypes_run_on_the_device(void **state) {
    (void)state;
    static const tf_dtype types[] = {TF_Q4_0, TF_Q4_1, TF_Q8_0, TF_Q4_K, TF_Q6_K, TF_Q5_0,
                                     TF_Q5_1, TF_Q2_K, TF_Q3_K, TF_Q5_K, TF_IQ4_NL, TF_IQ4_XS};
    tf_device *cpu = cpu_device(), *dev = ocl();
    enum { ROWS = 20, K = 512 };
    int64_t shape[2] = {ROWS, K}, ids_n = 3;
    float *x = malloc(sizeof(float) * ROWS * K), *w = malloc(sizeof(float) * ROWS * K);
    for (int i = 0; i < ROWS * K; i++) {
        x[i] = (float)sin(i * 0.37) * 2.0f;
        w[i] = (float)cos(i * 0.11) * (float)(1 + i % 7);
    }
    uint64_t fb = tf_device_fallback_count(dev, TF_OP_COUNT);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        tf_dtype wt = types[ti];
        tf_tensor *wc = tensor_f32(cpu, 2, shape, w), *wd = NULL, *qc = NULL, *qd = NULL, *qcd = NULL;
        OK(tf_tensor_to(wc, dev, &wd));
        OK(tf_cast(wc, wt, &qc));
        OK(tf_cast(wd, wt, &qd));                                  /* encoded on the device */
        expect_same_bytes(qd, qc, "encoding", wt);
        OK(tf_tensor_to(qc, dev, &qcd));
        for (int f = 0; f < 2; f++) {                              /* decoded: f32, f16 */
            tf_dtype ft = f ? TF_F16 : TF_F32;
            tf_tensor *dc = NULL, *dd = NULL, *sc = NULL, *sd = NULL, *dsc = NULL, *dsd = NULL;
            OK(tf_cast(qc, ft, &dc));
            OK(tf_cast(qcd, ft, &dd));
            expect_same_bytes(dd, dc, "decoding", wt);
            OK(tf_slice(qc, 0, 3, 17, 2, &sc));                    /* every other row: a strided view */
            OK(tf_slice(qcd, 0, 3, 17, 2, &sd));
            OK(tf_cast(sc, ft, &dsc));
            OK(tf_cast(sd, ft, &dsd));
            expect_same_bytes(dsd, dsc, "decoding a row slice", wt);
            tf_tensor *all[] = {dc, dd, sc, sd, dsc, dsd};
            for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
        }
        tf_tensor *ic = NULL, *id = NULL, *pc = NULL, *pd = NULL;
        OK(tf_tensor_from_data(cpu, TF_I32, 1, &ids_n, (int32_t[]){19, 0, 7}, &ic));
        OK(tf_tensor_to(ic, dev, &id));
        OK(tf_index_select(qc, 0, ic, &pc));
        OK(tf_index_select(qcd, 0, id, &pd));
        assert_int_equal(tf_tensor_dtype(pd), wt);
        expect_same_bytes(pd, pc, "index_select", wt);
        /* products: 3 rows (qgemv) and 20 rows (qmatmul's tiles) */
        float *wdec = malloc(sizeof(float) * ROWS * K), *got = malloc(sizeof(float) * ROWS * ROWS);
        tf_tensor *wf = NULL;
        OK(tf_cast(qc, TF_F32, &wf));
        OK(tf_tensor_read(wf, wdec, sizeof(float) * ROWS * K));
        for (int64_t m = 3; m <= ROWS; m += ROWS - 3) {
            int64_t xs[2] = {m, K};
            tf_tensor *xc = tensor_f32(cpu, 2, xs, x), *xd = NULL, *od = NULL;
            OK(tf_tensor_to(xc, dev, &xd));
            OK(tf_matmul_quantized(xd, qcd, &od));
            assert_ptr_equal(tf_tensor_device(od), dev);
            OK(tf_tensor_read(od, got, sizeof(float) * (size_t)(m * ROWS)));
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < ROWS; j++) {
                    double ref = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        ref += (double)x[i * K + k] * wdec[j * K + k];
                        mag += fabs((double)x[i * K + k] * wdec[j * K + k]);
                    }
                    if (fabs(got[i * ROWS + j] - ref) > 1e-5 * mag)
                        fail_msg("%s product, %lld rows: [%lld, %lld] = %g, float64 gives %g", tf_dtype_name(wt),
                                 (long long)m, (long long)i, (long long)j, got[i * ROWS + j], ref);
                }
            tf_tensor_release(xc);
            tf_tensor_release(xd);
            tf_tensor_release(od);
        }
        free(wdec);
        free(got);
        tf_tensor *all[] = {wc, wd, qc, qd, qcd, ic, id, pc, pd, wf};
        for (int i = 0; i < 10; i++) tf_tensor_release(all[i]);
    }
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), fb);   /* nothing left the device */
    free(x);
    free(w);
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
        cmocka_unit_test(test_quantized_dtypes_run_on_the_device),
        cmocka_unit_test(test_mixed_device_policy),
        cmocka_unit_test(test_ops_are_asynchronous_and_stay_on_device),
        cmocka_unit_test(test_driver_errors_are_named),
        cmocka_unit_test(test_failing_kernel_build_reports_the_compiler_log),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
