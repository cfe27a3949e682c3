/* The WebGPU plugin on a real WebGPU adapter (lavapipe through wgpu-native's
 * Vulkan backend in CI): discovery and what the adapter reports, exact
 * movement of every dtype at sizes that are not whole 4-byte words (WebGPU
 * copies words), device-to-device copies, ops on the WGSL kernels (in
 * place too, narrow dtypes whose stores share words), the counted CPU
 * fallback for what WGSL cannot hold, and an allocation over the adapter's
 * buffer limit. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>

#include "helpers.h"

static tf_device *wgpu(void) {
    tf_device *d = NULL;
    tf_status s = tf_device_get("webgpu:0", &d);
    if (s != TF_OK) fail_msg("no webgpu:0: %s (mesa-vulkan-drivers, scripts/fetch-wgpu.sh)", tf_last_error());
    return d;
}

static void test_discovery_and_selection(void **state) {
    (void)state;
    tf_device_props p;
    OK(tf_device_get_props(wgpu(), &p));
    assert_string_equal(p.backend, "webgpu");
    assert_non_null(strstr(p.description, " via "));           /* the graphics API under WebGPU */
    assert_non_null(strstr(p.description, "max binding "));    /* the adapter's limits */
    assert_true(p.caps.async);
    tf_device *d;
    OK(tf_device_get("auto", &d));
    if (p.type == TF_DEVICE_TYPE_CPU) {
        assert_true(p.caps.emulated);
        assert_true(p.memory_total > 0);                       /* a CPU adapter has the host's memory */
        assert_string_equal(tf_device_name(d), "cpu");         /* never over the CPU backend by default */
    }
    OK(tf_backend_priority_set("webgpu,cpu"));                 /* named: now it is picked */
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "webgpu:0");
    OK(tf_backend_priority_set(NULL));
}

/* n bytes of a pattern there and back, for n = 1..67 (u8: every remainder
 * mod 4, so the word-widened writes and reads both run), through a copy
 * into a second device tensor. */
static void test_moving_is_bit_exact(void **state) {
    (void)state;
    tf_device *cpu = cpu_device(), *dev = wgpu();
    unsigned char bytes[67], got[67];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 97 + 13);
    for (int64_t n = 1; n <= (int64_t)sizeof bytes; n++) {
        tf_tensor *a = NULL, *there = NULL, *again = NULL, *back = NULL;
        OK(tf_tensor_from_data(cpu, TF_U8, 1, &n, bytes, &a));
        OK(tf_tensor_to(a, dev, &there));
        OK(tf_zeros(dev, TF_U8, 1, &n, &again));
        OK(tf_copy_into(again, there));                        /* buffer to buffer on the device */
        OK(tf_tensor_to(again, cpu, &back));
        memset(got, 0, sizeof got);
        OK(tf_tensor_read(back, got, (size_t)n));
        if (memcmp(got, bytes, (size_t)n)) fail_msg("%lld bytes came back changed", (long long)n);
        tf_tensor_release(a);
        tf_tensor_release(there);
        tf_tensor_release(again);
        tf_tensor_release(back);
    }
    /* Views at byte offsets 1..7 of a device tensor: read out, and written
     * into from the host, leaving the bytes around them as they were. */
    int64_t all = (int64_t)sizeof bytes;
    for (int64_t off = 1; off < 8; off++) {
        tf_tensor *a = NULL, *there = NULL, *view = NULL, *back = NULL, *patch = NULL;
        OK(tf_tensor_from_data(cpu, TF_U8, 1, &all, bytes, &a));
        OK(tf_tensor_to(a, dev, &there));
        OK(tf_slice(there, 0, off, off + 5, 1, &view));
        OK(tf_tensor_to(view, cpu, &back));
        OK(tf_tensor_read(back, got, 5));
        if (memcmp(got, bytes + off, 5)) fail_msg("a view at byte %lld read back wrong", (long long)off);
        unsigned char five[5] = {1, 2, 3, 4, 5}, want[67];
        int64_t m = 5;
        OK(tf_tensor_from_data(cpu, TF_U8, 1, &m, five, &patch));
        OK(tf_copy_into(view, patch));
        memcpy(want, bytes, sizeof want);
        memcpy(want + off, five, 5);
        tf_tensor_release(back);
        OK(tf_tensor_to(there, cpu, &back));
        OK(tf_tensor_read(back, got, sizeof got));
        if (memcmp(got, want, sizeof want)) fail_msg("a write at byte %lld changed other bytes", (long long)off);
        tf_tensor_release(a);
        tf_tensor_release(there);
        tf_tensor_release(view);
        tf_tensor_release(back);
        tf_tensor_release(patch);
    }
    tf_device_props p;
    OK(tf_device_get_props(dev, &p));
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {               /* every dtype it stores, 9 x 7 elements */
        if (!((p.caps.dtypes >> dt) & 1u)) continue;
        int64_t shape[2] = {9, 7};
        unsigned char src[9 * 7 * 8], out[9 * 7 * 8];
        for (size_t i = 0; i < sizeof src; i++) src[i] = dt == TF_BOOL ? (unsigned char)(i % 2) : (unsigned char)(i * 31 + 7);
        tf_tensor *a = NULL, *there = NULL, *back = NULL;
        OK(tf_tensor_from_data(cpu, (tf_dtype)dt, 2, shape, src, &a));
        size_t nbytes = tf_tensor_nbytes(a);
        OK(tf_tensor_to(a, dev, &there));
        OK(tf_tensor_to(there, cpu, &back));
        OK(tf_tensor_read(back, out, nbytes));
        if (memcmp(out, src, nbytes)) fail_msg("%s came back changed", tf_dtype_name((tf_dtype)dt));
        tf_tensor_release(a);
        tf_tensor_release(there);
        tf_tensor_release(back);
    }
}

/* An op on webgpu tensors runs on the device (nothing counted as a
 * fallback), gives the right answer, and its output stays on webgpu:0. */
static void test_ops_run_on_the_device(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    float x[5] = {1, -2, 3.5f, 4, 1e-3f}, y[5] = {0.5f, 2, -1, 8, 3};
    tf_tensor *a = NULL, *b = NULL, *s = NULL;
    int64_t n = 5;
    OK(tf_tensor_from_data(dev, TF_F32, 1, &n, x, &a));
    OK(tf_tensor_from_data(dev, TF_F32, 1, &n, y, &b));
    uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_add(a, b, &s));
    assert_ptr_equal(tf_tensor_device(s), dev);
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), before);
    float want[5];
    for (int i = 0; i < 5; i++) want[i] = x[i] + y[i];
    expect_f32(s, want, 5);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(s);
}

/* In place (the output is an input's own buffer) on u8, whose elements
 * share 4-byte words: every element of an odd length is right, and the
 * bytes after the view are untouched. */
static void test_in_place_on_narrow_dtypes(void **state) {
    (void)state;
    tf_device *dev = wgpu(), *cpu = cpu_device();
    enum { N = 1001 };
    unsigned char x[N], y[N], got[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = (unsigned char)(i * 7);
        y[i] = (unsigned char)(i * 13 + 1);
        want[i] = (unsigned char)(x[i] + y[i]);
    }
    int64_t n = N;
    tf_tensor *a = NULL, *b = NULL, *va = NULL, *vb = NULL, *back = NULL;
    OK(tf_tensor_from_data(dev, TF_U8, 1, &n, x, &a));
    OK(tf_tensor_from_data(dev, TF_U8, 1, &n, y, &b));
    int64_t start = 1, stop = N - 1, step = 1;
    OK(tf_slice(a, 0, start, stop, step, &va));
    OK(tf_slice(b, 0, start, stop, step, &vb));
    uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_binary_into(va, TF_OP_ADD, va, vb));
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), before);
    OK(tf_tensor_to(a, cpu, &back));
    OK(tf_tensor_read(back, got, N));
    for (int i = 0; i < N; i++) {
        unsigned char w = i == 0 || i == N - 1 ? x[i] : want[i];
        if (got[i] != w) fail_msg("element %d: got %u, want %u", i, got[i], w);
    }
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(va);
    tf_tensor_release(vb);
    tf_tensor_release(back);
}

/* WGSL has no 64-bit floats: an f64 op on webgpu:0 runs on the CPU, counted,
 * with the CPU's answer, and its result is on webgpu:0. */
static void test_f64_falls_back_and_is_counted(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    double x[3] = {1e300, -2, 0.1}, y[3] = {1e300, 0.5, 0.2};
    tf_tensor *a = NULL, *b = NULL, *s = NULL;
    int64_t n = 3;
    OK(tf_tensor_from_data(dev, TF_F64, 1, &n, x, &a));
    OK(tf_tensor_from_data(dev, TF_F64, 1, &n, y, &b));
    uint64_t before = tf_device_fallback_count(dev, TF_OP_MUL);
    OK(tf_mul(a, b, &s));
    assert_ptr_equal(tf_tensor_device(s), dev);
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_MUL), before + 1);
    double got[3];
    OK(tf_tensor_read(s, got, sizeof got));
    for (int i = 0; i < 3; i++) assert_true(got[i] == x[i] * y[i]);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(s);
}

/* Every element of t is `want` (to a relative 1e-6). */
static void expect_all(const tf_tensor *t, float want, int64_t n) {
    float *got = malloc((size_t)n * sizeof *got);
    assert_non_null(got);
    OK(tf_tensor_read(t, got, (size_t)n * sizeof *got));
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want) <= 1e-6f * fabsf(want))) fail_msg("element %lld: got %g, want %g", (long long)i, got[i], want);
    free(got);
}

/* The math a driver's builtins get wrong by many ulps (lavapipe's exp, log,
 * log2, exp2; GELU's 1 + erf cancelling below x = -5): sweeps against
 * double, within 32 ulps everywhere (conformance's bound for a lone value
 * of GELU), so that no random draw is needed to find a bad region. */
typedef tf_status (*unary_fn)(const tf_tensor *, tf_tensor **);
static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static void expect_ulps(tf_device *dev, const char *name, unary_fn fn, double (*ref)(double), float lo, float hi) {
    enum { N = 20000 };
    static float x[N], got[N];
    for (int i = 0; i < N; i++) x[i] = lo + (hi - lo) * (float)i / (float)(N - 1);
    int64_t n = N;
    tf_tensor *a = NULL, *r = NULL;
    OK(tf_tensor_from_data(dev, TF_F32, 1, &n, x, &a));
    OK(fn(a, &r));
    OK(tf_tensor_read(r, got, sizeof got));
    for (int i = 0; i < N; i++) {
        double want = ref(x[i]);
        float w = (float)want;
        if (w == 0 || isinf(w)) continue;                 /* outside f32: no ulp to count in */
        double ulp = fabs((double)nextafterf(w, INFINITY) - (double)w), err = fabs(got[i] - want) / ulp;
        if (!(err <= 32)) fail_msg("%s(%g): got %.9g, want %.9g (%.0f ulps)", name, x[i], got[i], want, err);
    }
    tf_tensor_release(a);
    tf_tensor_release(r);
}

static void test_math_within_ulps(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    expect_ulps(dev, "gelu", tf_gelu, ref_gelu, -13, 8);
    expect_ulps(dev, "softplus", tf_softplus, ref_softplus, -30, 25);
    expect_ulps(dev, "exp", tf_exp, exp, -87, 88);
    expect_ulps(dev, "log", tf_log, log, 1e-3f, 1e4f);
    expect_ulps(dev, "tanh", tf_tanh, tanh, -12, 12);
}

/* A tensor over the 128 MiB a binding shows (lavapipe's
 * maxStorageBufferBindingSize): an op on all of it runs on the CPU, counted,
 * with the right answer; views deep inside it bind a window of the buffer
 * around themselves and run on the device, for each op family. */
static void test_tensor_over_the_binding_limit(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    int64_t n = (int64_t)36 << 20, side = 64;            /* 144 MiB of f32 */
    tf_tensor *big = NULL, *twice = NULL, *tail = NULL, *view = NULL, *r = NULL;
    uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_full(dev, TF_F32, 1, &n, 0.5, &big));
    OK(tf_add(big, big, &twice));
    assert_true(tf_device_fallback_count(dev, TF_OP_COUNT) >= before + 2);   /* fill and add */
    tf_tensor *end = NULL;
    OK(tf_slice(twice, 0, n - 1, n, 1, &end));
    expect_f32(end, (float[]){1}, 1);
    OK(tf_slice(big, 0, n - side * side, n, 1, &tail));
    OK(tf_reshape(tail, 2, (int64_t[]){side, side}, &view));
    before = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_exp(view, &r));                                /* elementwise */
    expect_all(r, expf(0.5f), side * side);
    tf_tensor_release(r);
    OK(tf_sum(view, 1, false, &r));                      /* reduction */
    expect_all(r, 0.5f * (float)side, side);
    tf_tensor_release(r);
    OK(tf_matmul(view, view, &r));                       /* matmul */
    expect_all(r, 0.25f * (float)side, side * side);
    tf_tensor_release(r);
    OK(tf_softmax(view, 1, &r));                         /* row op */
    expect_all(r, 1.0f / (float)side, side * side);
    tf_tensor_release(r);
    assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), before);
    tf_tensor_release(end);
    tf_tensor_release(view);
    tf_tensor_release(tail);
    tf_tensor_release(twice);
    tf_tensor_release(big);
}

/* More than the adapter's maxBufferSize (lavapipe: 2 GiB - 1): the
 * allocation is refused with TF_ERR_OUT_OF_MEMORY naming the limit, and
 * the device goes on working. */
static void test_buffer_over_the_limit_is_out_of_memory(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    int64_t n = (int64_t)3 << 30;
    tf_tensor *t = NULL;
    FAILS_WITH(TF_ERR_OUT_OF_MEMORY, "maxBufferSize", tf_zeros(dev, TF_U8, 1, &n, &t));
    assert_null(t);
    float one = 1;
    int64_t m = 1;
    OK(tf_tensor_from_data(dev, TF_F32, 1, &m, &one, &t));
    expect_f32(t, &one, 1);
    tf_tensor_release(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery_and_selection),
        cmocka_unit_test(test_moving_is_bit_exact),
        cmocka_unit_test(test_ops_run_on_the_device),
        cmocka_unit_test(test_in_place_on_narrow_dtypes),
        cmocka_unit_test(test_f64_falls_back_and_is_counted),
        cmocka_unit_test(test_math_within_ulps),
        cmocka_unit_test(test_tensor_over_the_binding_limit),
        cmocka_unit_test(test_buffer_over_the_limit_is_out_of_memory),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
