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
#include <tensorframe/numerics.h>

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

/* A fill rounds its f64 value to f16/bf16 once: a value just past an f16
 * midpoint rounds away from it, where going through f32 (which holds the
 * midpoint exactly) rounded to even (fresh-clone conformance, 2026-11-27). */
static void test_fill_rounds_once(void **state) {
    (void)state;
    const double v = -45.140625 - 1e-9;          /* the f16 neighbours are -45.125 and -45.15625 */
    const tf_dtype dts[2] = {TF_F16, TF_BF16};
    for (int i = 0; i < 2; i++) {
        tf_tensor *g = NULL, *c = NULL;
        OK(tf_full(wgpu(), dts[i], 1, (int64_t[]){3}, v, &g));
        OK(tf_full(cpu_device(), dts[i], 1, (int64_t[]){3}, v, &c));
        uint16_t got[3], want[3];
        OK(tf_tensor_read(g, got, sizeof got));
        OK(tf_tensor_read(c, want, sizeof want));
        assert_int_equal(got[0], tf_f64_to_f16(v) * (dts[i] == TF_F16) + tf_f64_to_bf16(v) * (dts[i] == TF_BF16));
        assert_memory_equal(got, want, sizeof got);
        tf_tensor_release(g);
        tf_tensor_release(c);
    }
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
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {   /* every dtype it stores, 9 x 7 elements (9 blocks) */
        if (!((p.caps.dtypes >> dt) & 1u)) continue;
        int64_t shape[2] = {9, tf_dtype_is_quantized((tf_dtype)dt) ? (int64_t)tf_dtype_block_size((tf_dtype)dt) : 7};
        unsigned char src[9 * 210], out[9 * 210];
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
/* Encoding on the device gives the CPU's bytes for every quantized dtype
 * (the K-quants' searches and IQ4's included): rows of mixed scales, one
 * with a zero sub-block, one with no negative element. */
static void test_quantized_encoding_matches_the_cpu(void **state) {
    (void)state;
    tf_device *cpu = cpu_device(), *dev = wgpu();
    enum { ROWS = 6, K = 512 };
    int64_t shape[2] = {ROWS, K};
    static float x[ROWS * K];
    for (int i = 0; i < ROWS * K; i++) x[i] = (float)sin(i * 0.37 + (i / 256) * 0.5) * (float)(1 + (i / 32) % 9) * 0.25f;
    for (int i = 256; i < 272; i++) x[i] = 0;
    for (int i = 2 * K; i < 3 * K; i++) x[i] = fabsf(x[i]);
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (!tf_dtype_is_quantized((tf_dtype)dt)) continue;
        tf_tensor *xc = NULL, *xd = NULL, *qc = NULL, *qd = NULL;
        OK(tf_tensor_from_data(cpu, TF_F32, 2, shape, x, &xc));
        OK(tf_tensor_to(xc, dev, &xd));
        OK(tf_cast(xc, (tf_dtype)dt, &qc));
        OK(tf_cast(xd, (tf_dtype)dt, &qd));
        size_t n = (size_t)tf_tensor_nbytes(qc);
        unsigned char *a = malloc(n), *b = malloc(n);
        OK(tf_tensor_read(qc, a, n));
        OK(tf_tensor_read(qd, b, n));
        size_t at = 0;
        while (at < n && a[at] == b[at]) at++;
        free(a);
        free(b);
        if (at < n) fail_msg("%s: the device's encoding differs from the CPU's at byte %zu of %zu", tf_dtype_name((tf_dtype)dt), at, n);
        tf_tensor *list[] = {xc, xd, qc, qd};
        for (int i = 0; i < 4; i++) tf_tensor_release(list[i]);
    }
}

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

/* i64 positions (a model's arange) run on the device, counted exactly in
 * i32 past f32's 2^24; a range outside i32 falls back, counted, and is
 * still exact. */
static void test_i64_arange(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    static const struct { double start, stop, step; bool on_device; } cases[] = {
        {16777200, 16777300, 3, true}, {-5, 7, 1, true}, {0, 3e9, 1e9, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tf_tensor *t = NULL;
        uint64_t before = tf_device_fallback_count(dev, TF_OP_ARANGE);
        OK(tf_arange(dev, TF_I64, cases[c].start, cases[c].stop, cases[c].step, &t));
        assert_int_equal(tf_device_fallback_count(dev, TF_OP_ARANGE), before + (cases[c].on_device ? 0 : 1));
        int64_t n = tf_tensor_numel(t), got[64];
        assert_true(n > 0 && n <= 64);
        OK(tf_tensor_read(t, got, (size_t)n * sizeof *got));
        for (int64_t i = 0; i < n; i++)
            if (got[i] != (int64_t)(cases[c].start + (double)i * cases[c].step))
                fail_msg("case %zu element %lld: %lld", c, (long long)i, (long long)got[i]);
        tf_tensor_release(t);
    }
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

/* ---- tensors over the 128 MiB one binding shows ----
 * lavapipe's maxStorageBufferBindingSize is 128 MiB (most WebGPU adapters
 * on Metal and D3D12 have the same). A launch binds a larger tensor's
 * window as several bindings; every op family runs on one such tensor on
 * webgpu:0, with no fallback, and agrees with the CPU backend. */

#define BIG_SIDE 6144                                    /* 6144^2 f32: 144 MiB */
#define BIG_N ((int64_t)BIG_SIDE * BIG_SIDE)

/* dev_r (from webgpu:0) against cpu_r (the same op on the CPU), as f32,
 * within tol * (1 + |cpu|); releases both. */
static void expect_same(const char *what, tf_tensor *dev_r, tf_tensor *cpu_r, double tol) {
    tf_tensor *moved = NULL, *a = NULL, *b = NULL;
    OK(tf_tensor_to(dev_r, cpu_device(), &moved));
    OK(tf_cast(moved, TF_F32, &a));
    OK(tf_cast(cpu_r, TF_F32, &b));
    int64_t n = tf_tensor_numel(b);
    assert_int_equal(tf_tensor_numel(a), n);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    assert_true(x && y);
    OK(tf_tensor_read(a, x, (size_t)n * sizeof *x));
    OK(tf_tensor_read(b, y, (size_t)n * sizeof *y));
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)x[i] - y[i]) <= tol * (1 + fabs((double)y[i]))))
            fail_msg("%s: element %lld of %lld is %.9g on webgpu:0, %.9g on the CPU", what, (long long)i, (long long)n,
                     x[i], y[i]);
    free(x);
    free(y);
    tf_tensor_release(moved);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(dev_r);
    tf_tensor_release(cpu_r);
}

static tf_tensor *reshaped(const tf_tensor *x, int ndim, const int64_t *shape) {
    tf_tensor *r = NULL;
    OK(tf_reshape(x, ndim, shape, &r));
    return r;
}

/* Every 8th element of x from `first`: a tensor whose elements span all of
 * x's 144 MiB (its window takes two bindings) at an eighth of the work, for
 * the families lavapipe runs slowest. */
static tf_tensor *sparse(const tf_tensor *x, int64_t first) {
    tf_tensor *r = NULL;
    OK(tf_slice(x, 0, first, BIG_N, 8, &r));
    return r;
}

/* Small operands, the same on both devices (a fixed seed on the CPU). */
static tf_tensor *small_rand(const tf_tensor *like, int ndim, const int64_t *shape, uint64_t seed) {
    tf_tensor *c = NULL, *r = NULL;
    OK(tf_rand(cpu_device(), TF_F32, ndim, shape, seed, &c));
    OK(tf_tensor_to(c, tf_tensor_device(like), &r));
    tf_tensor_release(c);
    return r;
}

/* One op family on the big tensor x (on either device). */
typedef tf_status (*big_case)(const tf_tensor *x, tf_tensor **out);

static tf_status big_fill(const tf_tensor *x, tf_tensor **out) {
    return tf_full(tf_tensor_device(x), TF_F32, 1, (int64_t[]){BIG_N}, 0.75, out);
}
static tf_status big_arange(const tf_tensor *x, tf_tensor **out) {
    return tf_arange(tf_tensor_device(x), TF_I32, 0, (double)BIG_N, 1, out);
}
static tf_status big_binary(const tf_tensor *x, tf_tensor **out) { return tf_mul(x, x, out); }
static tf_status big_unary(const tf_tensor *x, tf_tensor **out) { return tf_exp(x, out); }
static tf_status big_cast(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *v = sparse(x, 0);
    tf_status s = tf_cast(v, TF_F16, out);
    tf_tensor_release(v);
    return s;
}
static tf_status big_compare(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *half = NULL, *v = sparse(x, 3);
    tf_status s = tf_scalar(tf_tensor_device(x), TF_F32, 0.5, &half);
    if (s == TF_OK) s = tf_gt(v, half, out);
    tf_tensor_release(half);
    tf_tensor_release(v);
    return s;
}
static tf_status big_where(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *cond = NULL, *a = sparse(x, 1), *b = sparse(x, 6);
    OK(big_compare(x, &cond));
    tf_status s = tf_where(cond, a, b, out);
    tf_tensor_release(cond);
    tf_tensor_release(a);
    tf_tensor_release(b);
    return s;
}
static tf_status big_logical_not(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *mask = NULL, *every8 = NULL;              /* every 8th of 136 M bools */
    OK(tf_full(tf_tensor_device(x), TF_BOOL, 1, (int64_t[]){(int64_t)136 << 20}, 1, &mask));
    OK(tf_slice(mask, 0, 5, (int64_t)136 << 20, 8, &every8));
    tf_status s = tf_logical_not(every8, out);
    tf_tensor_release(every8);
    tf_tensor_release(mask);
    return s;
}
/* Stores narrower than a word (atomic ones) into both parts of a window. */
static tf_status big_narrow_fill(const tf_tensor *x, tf_tensor **out) {
    return tf_full(tf_tensor_device(x), TF_F16, 1, (int64_t[]){(int64_t)72 << 20}, -1.5, out);
}
static tf_status big_transpose_copy(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_N / 64, 64}), *rows = NULL, *t = NULL;
    OK(tf_slice(m, 0, 0, BIG_N / 64, 8, &rows));
    OK(tf_transpose(rows, 0, 1, &t));
    tf_status s = tf_contiguous(t, out);
    tf_tensor_release(t);
    tf_tensor_release(rows);
    tf_tensor_release(m);
    return s;
}
static tf_status big_sum_rows(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_N / 4096, 4096});
    tf_status s = tf_sum(m, 1, false, out);
    tf_tensor_release(m);
    return s;
}
static tf_status big_sum_columns(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_N / 64, 64});
    tf_status s = tf_sum(m, 0, false, out);
    tf_tensor_release(m);
    return s;
}
static tf_status big_cumsum(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_N / 64, 64});
    tf_status s = tf_cumsum(m, 1, out);
    tf_tensor_release(m);
    return s;
}
static tf_status big_matmul(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *a = reshaped(x, 2, (int64_t[]){BIG_N / 256, 256}), *rows = NULL;
    OK(tf_slice(a, 0, 3, BIG_N / 256, 8, &rows));        /* a weight's every 8th row */
    tf_tensor *w = small_rand(x, 2, (int64_t[]){256, 2}, 7);
    tf_status s = tf_matmul(rows, w, out);
    tf_tensor_release(rows);
    tf_tensor_release(a);
    tf_tensor_release(w);
    return s;
}
static tf_status big_softmax(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_N / 4096, 4096});
    tf_status s = tf_softmax(m, 1, out);
    tf_tensor_release(m);
    return s;
}
static tf_status big_rope(const tf_tensor *x, tf_tensor **out) {
    int64_t seq = BIG_N / (512 * 64);                    /* positions to 1151: f32 angles within 1e-4 */
    tf_tensor *m = reshaped(x, 4, (int64_t[]){1, seq, 512, 64}), *heads = NULL, *pos = NULL;
    OK(tf_slice(m, 2, 0, 512, 8, &heads));
    OK(tf_arange(tf_tensor_device(x), TF_I32, 0, (double)seq, 1, &pos));
    tf_status s = tf_rope(heads, pos, 1, 0, 10000.0, TF_ROPE_HALF_SPLIT, out);
    tf_tensor_release(pos);
    tf_tensor_release(heads);
    tf_tensor_release(m);
    return s;
}
static tf_status big_sdpa(const tf_tensor *x, tf_tensor **out) {
    /* A 144 MiB key cache, the same tensor as values: 64 heads of 9216 keys. */
    tf_tensor *kv = reshaped(x, 4, (int64_t[]){1, 64, BIG_N / (64 * 64), 64});
    tf_tensor *q = small_rand(x, 4, (int64_t[]){1, 64, 2, 64}, 11);
    tf_status s = tf_sdpa(q, kv, kv, NULL, 0.125, false, 0, out);
    tf_tensor_release(q);
    tf_tensor_release(kv);
    return s;
}
static tf_status big_conv2d(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *img = reshaped(x, 4, (int64_t[]){1, 1, BIG_SIDE, BIG_SIDE}), *rows = NULL, *cols = NULL;
    OK(tf_slice(img, 2, 0, BIG_SIDE, 4, &rows));
    OK(tf_slice(rows, 3, 1, BIG_SIDE, 2, &cols));
    tf_tensor *w = small_rand(x, 4, (int64_t[]){1, 1, 3, 3}, 13);
    tf_status s = tf_conv2d(cols, w, NULL, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1, out);
    tf_tensor_release(w);
    tf_tensor_release(cols);
    tf_tensor_release(rows);
    tf_tensor_release(img);
    return s;
}
static tf_status big_maxpool(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *img = reshaped(x, 4, (int64_t[]){1, 1, BIG_SIDE, BIG_SIDE});
    tf_status s = tf_maxpool2d(img, (int64_t[]){2, 2}, NULL, (int64_t[]){0, 0}, (int64_t[]){1, 1}, out);
    tf_tensor_release(img);
    return s;
}
static tf_status big_embedding(const tf_tensor *x, tf_tensor **out) {
    int64_t rows = BIG_N / 64, n = 3;
    tf_tensor *table = reshaped(x, 2, (int64_t[]){rows, 64}), *ids = NULL, *c = NULL;
    int32_t pick[3] = {0, 123457, (int32_t)rows - 1};
    OK(tf_tensor_from_data(cpu_device(), TF_I32, 1, &n, pick, &c));
    OK(tf_tensor_to(c, tf_tensor_device(x), &ids));
    tf_status s = tf_embedding(table, ids, out);
    tf_tensor_release(c);
    tf_tensor_release(ids);
    tf_tensor_release(table);
    return s;
}
static tf_status big_tril(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *m = reshaped(x, 2, (int64_t[]){BIG_SIDE, BIG_SIDE});
    tf_status s = tf_tril(m, 1, out);
    tf_tensor_release(m);
    return s;
}
/* Two Adam steps on every 8th element of a 144 MiB parameter (x squared),
 * gradient x, then m: the parameter is the result; m and v are checked by
 * the second step, which reads them. */
static tf_status big_adam(const tf_tensor *x, tf_tensor **out) {
    tf_tensor *p = NULL, *m = NULL, *v = NULL;
    OK(tf_mul(x, x, &p));
    OK(tf_zeros(tf_tensor_device(x), TF_F32, 1, (int64_t[]){BIG_N}, &m));
    OK(tf_zeros(tf_tensor_device(x), TF_F32, 1, (int64_t[]){BIG_N}, &v));
    tf_tensor *ps = sparse(p, 2), *gs = sparse(x, 5), *ms = sparse(m, 2), *vs = sparse(v, 2);
    tf_status s = tf_adam_step(ps, gs, ms, vs, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1, false);
    if (s == TF_OK) s = tf_adam_step(ps, ms, ms, vs, 1e-2, 0.9, 0.999, 1e-8, 0.01, 2, true);
    tf_tensor_release(ps);
    tf_tensor_release(gs);
    tf_tensor_release(ms);
    tf_tensor_release(vs);
    tf_tensor_release(m);
    tf_tensor_release(v);
    if (s == TF_OK) *out = p;                            /* all of it: the elements between unchanged too */
    else tf_tensor_release(p);
    return s;
}

static void test_every_family_on_a_tensor_over_the_binding_limit(void **state) {
    (void)state;
    static const struct { const char *name; big_case run; double tol; } cases[] = {
        {"fill", big_fill, 0}, {"narrow fill", big_narrow_fill, 0}, {"arange", big_arange, 0}, {"binary", big_binary, 1e-7},
        {"unary", big_unary, 1e-6}, {"cast", big_cast, 0}, {"compare", big_compare, 0},
        {"where", big_where, 1e-6}, {"bool unary", big_logical_not, 0}, {"strided copy", big_transpose_copy, 0},
        {"row sums", big_sum_rows, 1e-6}, {"column sums", big_sum_columns, 1e-5}, {"cumsum", big_cumsum, 1e-6},
        {"matmul", big_matmul, 1e-5}, {"softmax", big_softmax, 1e-6}, {"rope", big_rope, 2e-4},
        {"sdpa", big_sdpa, 1e-5}, {"conv2d", big_conv2d, 1e-6}, {"maxpool2d", big_maxpool, 0},
        {"embedding", big_embedding, 0}, {"tril", big_tril, 0}, {"adam", big_adam, 1e-6},
    };
    tf_device *dev = wgpu(), *cpu = cpu_device();
    tf_tensor *x = NULL, *xc = NULL;
    uint64_t fallbacks = tf_device_fallback_count(dev, TF_OP_COUNT);
    OK(tf_rand(dev, TF_F32, 1, (int64_t[]){BIG_N}, 5, &x));      /* rand on the device too */
    OK(tf_tensor_to(x, cpu, &xc));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tf_tensor *on_dev = NULL, *on_cpu = NULL;
        OK(cases[i].run(x, &on_dev));
        OK(cases[i].run(xc, &on_cpu));
        assert_ptr_equal(tf_tensor_device(on_dev), dev);
        expect_same(cases[i].name, on_dev, on_cpu, cases[i].tol);
        assert_int_equal(tf_device_fallback_count(dev, TF_OP_COUNT), fallbacks);
    }
    tf_tensor_release(xc);
    tf_tensor_release(x);
}

/* Views deep in a buffer larger than one binding bind a window around
 * themselves (one binding, not the buffer's parts). */
static void test_views_deep_in_a_large_buffer(void **state) {
    (void)state;
    tf_device *dev = wgpu();
    int64_t n = (int64_t)36 << 20, side = 64;            /* 144 MiB of f32 */
    tf_tensor *big = NULL, *tail = NULL, *view = NULL, *r = NULL;
    OK(tf_full(dev, TF_F32, 1, &n, 0.5, &big));
    OK(tf_slice(big, 0, n - side * side, n, 1, &tail));
    OK(tf_reshape(tail, 2, (int64_t[]){side, side}, &view));
    uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
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
    tf_tensor_release(view);
    tf_tensor_release(tail);
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
        cmocka_unit_test(test_quantized_encoding_matches_the_cpu),
        cmocka_unit_test(test_in_place_on_narrow_dtypes),
        cmocka_unit_test(test_f64_falls_back_and_is_counted),
        cmocka_unit_test(test_i64_arange),
        cmocka_unit_test(test_math_within_ulps),
        cmocka_unit_test(test_every_family_on_a_tensor_over_the_binding_limit),
        cmocka_unit_test(test_views_deep_in_a_large_buffer),
        cmocka_unit_test(test_buffer_over_the_limit_is_out_of_memory),
        cmocka_unit_test(test_fill_rounds_once),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
