/* Defects found by probing the library as a hostile user would (issue 10),
 * each with the call that showed it: every size computed from caller values
 * is checked, a failed kernel scratch allocation is an error, in-place ops
 * reject aliasing, a valid file with an empty tensor loads, and more. Each
 * case asserts the error code, its message, and that the inputs are intact. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tensorframe/backend.h>

#include "helpers.h"
#include "mybackend.h"

static tf_tensor *iota(int64_t n) {
    tf_tensor *t = NULL;
    OK(tf_arange(cpu_device(), TF_F32, 0, (double)n, 1, &t));
    return t;
}

static void expect_iota(const tf_tensor *t, int64_t n) {
    float want[256];
    for (int64_t i = 0; i < n; i++) want[i] = (float)i;
    expect_f32(t, want, (size_t)n);
}

/* 1. Extents computed from caller values overflow: errors, not heap writes. */
static void test_pad_with_huge_pads(void **state) {
    (void)state;
    tf_tensor *x = iota(4), *o = (tf_tensor *)&o;
    int64_t pads[2] = {INT64_MAX, INT64_MAX};
    FAILS_WITH(TF_ERR_SIZE, "tf_pad: pads", tf_pad(x, 1, pads, 0, &o));
    assert_null(o);
    int64_t neg[2] = {INT64_MIN, 0};
    FAILS_WITH(TF_ERR_SIZE, "tf_pad: pads", tf_pad(x, 1, neg, 0, &o));
    expect_iota(x, 4);
    tf_tensor_release(x);
}

static void test_tile_with_huge_reps(void **state) {
    (void)state;
    tf_tensor *x = iota(96), *o = (tf_tensor *)&o;
    int64_t reps = 192153584101141163;               /* 96 * reps wraps to 32 */
    FAILS_WITH(TF_ERR_SIZE, "tf_tile: ", tf_tile(x, 1, &reps, &o));
    assert_null(o);
    expect_iota(x, 96);
    tf_tensor_release(x);
}

static void test_concat_of_huge_views(void **state) {
    (void)state;
    tf_tensor *one = iota(1), *big = NULL, *x = iota(4), *o = (tf_tensor *)&o;
    int64_t huge = INT64_MAX;
    OK(tf_expand(one, 1, &huge, &big));
    const tf_tensor *parts[3] = {big, big, x};
    FAILS_WITH(TF_ERR_SIZE, "tf_concat: ", tf_concat(3, parts, 0, &o));
    assert_null(o);
    expect_iota(x, 4);
    tf_tensor *all[] = {one, big, x};
    for (int i = 0; i < 3; i++) tf_tensor_release(all[i]);
}

static void test_split_sizes_that_wrap(void **state) {
    (void)state;
    tf_tensor *x = iota(100), *outs[3] = {(tf_tensor *)&outs, (tf_tensor *)&outs, (tf_tensor *)&outs};
    int64_t sizes[3] = {200, INT64_MAX, INT64_MAX - 98};   /* adds up to 100 when it wraps */
    FAILS_WITH(TF_ERR_SIZE, "tf_split: ", tf_split(x, 0, 3, sizes, outs));
    for (int i = 0; i < 3; i++) assert_null(outs[i]);
    expect_iota(x, 100);
    tf_tensor_release(x);
}

/* 5. An expanded element count that overflows is an error, not zero. */
static void test_expand_past_int64(void **state) {
    (void)state;
    tf_tensor *one = iota(1), *o = (tf_tensor *)&o;
    int64_t shape[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
    FAILS_WITH(TF_ERR_SIZE, "tf_expand: ", tf_expand(one, 2, shape, &o));
    assert_null(o);
    tf_tensor_release(one);
}

/* 6. A huge dilation leaves no output window: not a 10x10 output. */
static void test_window_with_huge_dilation(void **state) {
    (void)state;
    int64_t xs[4] = {1, 1, 8, 8}, ws[4] = {1, 1, 3, 3}, dil[2] = {INT64_MAX, INT64_MAX}, k[2] = {3, 3};
    tf_tensor *x = NULL, *w = NULL, *o = (tf_tensor *)&o;
    OK(tf_zeros(cpu_device(), TF_F32, 4, xs, &x));
    OK(tf_zeros(cpu_device(), TF_F32, 4, ws, &w));
    FAILS_WITH(TF_ERR_SHAPE, "tf_conv2d: input [1,1,8,8] is too small", tf_conv2d(x, w, NULL, NULL, NULL, dil, 1, &o));
    assert_null(o);
    FAILS_WITH(TF_ERR_SHAPE, "tf_maxpool2d: input [1,1,8,8] is too small", tf_maxpool2d(x, k, NULL, NULL, dil, &o));
    assert_null(o);
    tf_tensor_release(x);
    tf_tensor_release(w);
}

/* 7. An in-place op rejects an output that overlaps itself or an input. */
static void test_adam_rejects_aliasing(void **state) {
    (void)state;
    tf_tensor *p = iota(4), *g = iota(4), *m = NULL, *v = NULL, *one = iota(1), *wide = NULL;
    int64_t n = 4;
    OK(tf_zeros(cpu_device(), TF_F32, 1, &n, &m));
    OK(tf_zeros(cpu_device(), TF_F32, 1, &n, &v));
    OK(tf_expand(one, 1, &n, &wide));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_adam_step: param overlaps itself",
               tf_adam_step(wide, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0, 1, true));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_adam_step: m overlaps param",
               tf_adam_step(p, g, p, v, 0.1, 0.9, 0.999, 1e-8, 0, 1, true));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_adam_step: v overlaps m",
               tf_adam_step(p, g, m, m, 0.1, 0.9, 0.999, 1e-8, 0, 1, true));
    expect_iota(p, 4);
    OK(tf_adam_step(p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0, 1, true));   /* distinct tensors: fine */
    tf_tensor *all[] = {p, g, m, v, one, wide};
    for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
}

/* 7. batch_norm's running statistics are written in place: no aliasing. */
static void test_batch_norm_rejects_aliasing(void **state) {
    (void)state;
    int64_t xs[4] = {2, 2, 3, 3}, c = 2;
    tf_tensor *x = NULL, *rm = NULL, *one = iota(1), *wide = NULL, *o = (tf_tensor *)&o;
    OK(tf_randn(cpu_device(), TF_F32, 4, xs, 3, &x));
    OK(tf_zeros(cpu_device(), TF_F32, 1, &c, &rm));
    OK(tf_expand(one, 1, &c, &wide));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_batch_norm: running_mean overlaps itself",
               tf_batch_norm(x, wide, rm, NULL, NULL, true, 0.1, 1e-5, &o));
    assert_null(o);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_batch_norm: running_var overlaps running_mean",
               tf_batch_norm(x, rm, rm, NULL, NULL, true, 0.1, 1e-5, &o));
    float zeros[2] = {0, 0};
    expect_f32(rm, zeros, 2);
    tf_tensor *all[] = {x, rm, one, wide};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
}

/* 11. Training batch norm on an empty batch has no statistics to learn. */
static void test_batch_norm_on_an_empty_batch(void **state) {
    (void)state;
    int64_t xs[4] = {0, 2, 3, 3}, c = 2;
    tf_tensor *x = NULL, *rm = NULL, *rv = NULL, *o = (tf_tensor *)&o;
    OK(tf_zeros(cpu_device(), TF_F32, 4, xs, &x));
    OK(tf_zeros(cpu_device(), TF_F32, 1, &c, &rm));
    OK(tf_ones(cpu_device(), TF_F32, 1, &c, &rv));
    FAILS_WITH(TF_ERR_SHAPE, "tf_batch_norm: training needs at least one element per channel",
               tf_batch_norm(x, rm, rv, NULL, NULL, true, 0.1, 1e-5, &o));
    assert_null(o);
    float zeros[2] = {0, 0}, ones[2] = {1, 1};
    expect_f32(rm, zeros, 2);                         /* running statistics untouched, no NaN */
    expect_f32(rv, ones, 2);
    tf_tensor *all[] = {x, rm, rv};
    for (int i = 0; i < 3; i++) tf_tensor_release(all[i]);
}

/* 4. A valid safetensors file with an empty tensor loads, in either key order. */
static void test_safetensors_with_an_empty_tensor(void **state) {
    (void)state;
    static const char *const headers[2] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"};
    for (int k = 0; k < 2; k++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/tf-hardening-%ld-%d.safetensors", (long)getpid(), k);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        uint64_t hl = strlen(headers[k]);
        float one = 1.5f;
        assert_int_equal(fwrite(&hl, 8, 1, f), 1);
        assert_int_equal(fwrite(headers[k], 1, hl, f), hl);
        assert_int_equal(fwrite(&one, 4, 1, f), 1);
        fclose(f);
        tf_safetensors *st = NULL;
        OK(tf_safetensors_open(path, &st));
        tf_tensor *a = NULL, *b = NULL;
        OK(tf_safetensors_load(st, "a", cpu_device(), &a));
        OK(tf_safetensors_load(st, "b", cpu_device(), &b));
        expect_f32(a, &one, 1);
        assert_int_equal(tf_tensor_numel(b), 0);
        tf_tensor_release(a);
        tf_tensor_release(b);
        tf_safetensors_close(st);
        remove(path);
    }
}

/* 10. No fixed cap a user can reach: 40 backends registered in-process and
 * 40 plugin paths that do not exist are all kept, and the installed plugins
 * still load after them. */
static void test_many_backends_and_skipped_plugins(void **state) {
    (void)state;
    char path[40 * 40] = "";
    for (int i = 0; i < 40; i++) {
        char one[40];
        snprintf(one, sizeof one, "%s/nonexistent/libtensorframe-gone%d.so", i ? ":" : "", i);
        strcat(path, one);
    }
    strcat(path, ":" TF_GOOD_PLUGIN_DIR);
    setenv("TF_PLUGIN_PATH", path, 1);
    tf_shutdown();
    static const tf_backend_iface iface = {TF_STRUCT_INIT(tf_backend_iface)};
    static char names[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "user%d", i);
        tf_backend_reg reg = {sizeof reg, TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR, names[i], &iface, NULL, 0, NULL, NULL};
        OK(tf_backend_register(&reg));
    }
    int loaded = 0, skipped = 0;
    bool testplug = false;
    for (int i = 0; i < tf_backend_count(); i++) {
        tf_backend_props p;
        OK(tf_backend_get_props(i, &p));
        if (p.loaded) loaded++;
        else if (strstr(p.reason, "does not exist")) skipped++;
        testplug |= p.loaded && !strcmp(p.name, "testplug");
    }
    assert_true(loaded >= 42);                        /* cpu, 40 user backends, testplug */
    assert_int_equal(skipped, 40);
    assert_true(testplug);
    unsetenv("TF_PLUGIN_PATH");
    tf_shutdown();
}

/* 12. Tensors released after tf_shutdown (C++ destructors, a garbage
 * collector, static destructors): safe. CPU memory goes back; a plugin's
 * went with its backend at shutdown and the plugin is not called again. */
static void test_release_after_shutdown(void **state) {
    (void)state;
    setenv("TF_PLUGIN_PATH", TF_GOOD_PLUGIN_DIR, 1);
    tf_shutdown();
    assert_int_equal(mybackend_register(), TF_OK);
    static const char *const specs[] = {"cpu", "mybackend:0", "testplug:0", "opencl:0"};
    tf_tensor *held[8] = {NULL};
    int n = 0;
    int64_t shape[2] = {3, 5};
    for (int i = 0; i < 4; i++) {
        tf_device *d = NULL;
        if (tf_device_get(specs[i], &d) != TF_OK) continue;   /* opencl:0 where there is one */
        OK(tf_ones(d, TF_F32, 2, shape, &held[n]));
        OK(tf_transpose(held[n], 0, 1, &held[n + 1]));      /* a view shares the storage */
        n += 2;
    }
    assert_true(n >= 6);
    tf_shutdown();                                       /* backends gone, plugins unloaded */
    for (int i = 0; i < n; i++) tf_tensor_release(held[i]);
    unsetenv("TF_PLUGIN_PATH");
    tf_tensor *t = NULL;                                 /* and the library starts again */
    OK(tf_ones(cpu_device(), TF_F32, 2, shape, &t));
    float want[15];
    for (int i = 0; i < 15; i++) want[i] = 1;
    expect_f32(t, want, 15);
    tf_tensor_release(t);
    tf_memory_stats ms;
    OK(tf_device_memory_stats(cpu_device(), &ms));
    assert_int_equal(ms.allocated, 0);                   /* the early tensors' memory came back */
    tf_shutdown();
}

/* 8. Signed overflow (UBSan runs this suite): strides of an empty .npy
 * whose extents multiply past int64, a slice with step INT64_MAX, and an
 * attention q_offset of INT64_MAX (every key visible). */
static void test_no_signed_overflow(void **state) {
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/tf-hardening-%ld.npy", (long)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    char h[128];
    int hl = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 8), }");
    while ((10 + hl + 1) % 64) h[hl++] = ' ';
    h[hl++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 255), (unsigned char)(hl >> 8)};
    assert_int_equal(fwrite(pre, 1, 10, f), 10);
    assert_int_equal(fwrite(h, 1, (size_t)hl, f), (size_t)hl);
    fclose(f);
    tf_tensor *t = NULL;
    OK(tf_npy_load(path, cpu_device(), &t));
    assert_int_equal(tf_tensor_numel(t), 0);
    tf_tensor_release(t);
    remove(path);
    tf_tensor *x = iota(10), *v = NULL;
    OK(tf_slice(x, 0, 3, 10, INT64_MAX, &v));
    float three = 3;
    expect_f32(v, &three, 1);
    tf_tensor_release(v);
    tf_tensor_release(x);
    int64_t qs[4] = {1, 1, 2, 4}, ks[4] = {1, 1, 3, 4};
    tf_tensor *q = NULL, *k = NULL, *val = NULL, *causal = NULL, *open_ = NULL;
    OK(tf_randn(cpu_device(), TF_F32, 4, qs, 1, &q));
    OK(tf_randn(cpu_device(), TF_F32, 4, ks, 2, &k));
    OK(tf_randn(cpu_device(), TF_F32, 4, ks, 3, &val));
    OK(tf_sdpa(q, k, val, NULL, 0, true, INT64_MAX, &causal));
    OK(tf_sdpa(q, k, val, NULL, 0, false, 0, &open_));
    float a[8], b[8];
    OK(tf_tensor_read(causal, a, sizeof a));
    OK(tf_tensor_read(open_, b, sizeof b));
    for (int i = 0; i < 8; i++) assert_true(a[i] == b[i]);
    tf_tensor *all[] = {q, k, val, causal, open_};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pad_with_huge_pads),
        cmocka_unit_test(test_tile_with_huge_reps),
        cmocka_unit_test(test_concat_of_huge_views),
        cmocka_unit_test(test_split_sizes_that_wrap),
        cmocka_unit_test(test_expand_past_int64),
        cmocka_unit_test(test_window_with_huge_dilation),
        cmocka_unit_test(test_adam_rejects_aliasing),
        cmocka_unit_test(test_batch_norm_on_an_empty_batch),
        cmocka_unit_test(test_batch_norm_rejects_aliasing),
        cmocka_unit_test(test_safetensors_with_an_empty_tensor),
        cmocka_unit_test(test_many_backends_and_skipped_plugins),
        cmocka_unit_test(test_release_after_shutdown),
        cmocka_unit_test(test_no_signed_overflow),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
