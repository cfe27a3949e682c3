/* The plugin loader: a good plugin loads and works with opaque (non-host)
 * memory; each kind of bad plugin is skipped with its reason while the
 * process goes on; with the plugin absent the CPU still works. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"
#include "mybackend.h"

static bool find_backend(const char *name, tf_backend_props *out) {
    for (int i = 0; i < tf_backend_count(); i++)
        if (tf_backend_get_props(i, out) == TF_OK && !strcmp(out->name, name)) return true;
    return false;
}

static void expect_skipped(const char *name, tf_status status, const char *reason) {
    tf_backend_props p;
    if (!find_backend(name, &p)) fail_msg("backend '%s' is not reported", name);
    assert_false(p.loaded);
    assert_int_equal(p.status, status);
    if (!strstr(p.reason, reason)) fail_msg("%s: reason '%s' does not mention '%s'", name, p.reason, reason);
}

static int load_with_bad_plugins(void **state) {
    (void)state;
    tf_shutdown();
    setenv("TF_PLUGIN_PATH", TF_GOOD_PLUGIN_DIR ":" TF_BAD_PLUGIN_DIR ":/nonexistent/libtensorframe-missing.so", 1);
    return 0;
}

static void test_bad_plugins_are_reported_and_skipped(void **state) {
    (void)state;
    char abi[96];
    snprintf(abi, sizeof abi, "backend ABI %d.0, this library speaks %d.%d", TF_BACKEND_ABI_MAJOR + 1,
             TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR);
    expect_skipped("badabi", TF_ERR_ABI_MISMATCH, abi);
    expect_skipped("noentry", TF_ERR_PLUGIN, "no entry point tf_backend_plugin_init()");
    expect_skipped("initfail", TF_ERR_BACKEND, "init failed with TF_ERR_BACKEND: initfail: no hardware found");
    expect_skipped("notelf", TF_ERR_PLUGIN, "libtensorframe-notelf.so");
    expect_skipped("missing", TF_ERR_PLUGIN, "TF_PLUGIN_PATH entry does not exist");
    tf_backend_props p;
    assert_true(find_backend("testplug", &p));
    assert_true(p.loaded);
    assert_int_equal(p.device_count, 1);
    assert_non_null(strstr(p.source, "libtensorframe-testplug.so"));
    /* the process goes on: the CPU works */
    int64_t n = 2;
    float v[2] = {1, 2}, want[2] = {2, 4};
    tf_tensor *a = tensor_f32(cpu_device(), 1, &n, v), *o = NULL;
    OK(tf_add(a, a, &o));
    expect_f32(o, want, 2);
    tf_tensor_release(a);
    tf_tensor_release(o);
}

static void test_plugin_device_with_opaque_memory(void **state) {
    (void)state;
    tf_device *plug, *cpu = cpu_device();
    OK(tf_device_get("testplug:0", &plug));
    tf_device_props props;
    OK(tf_device_get_props(plug, &props));
    assert_string_equal(props.backend, "testplug");
    /* cpu -> plugin -> cpu is bit-exact for every dtype */
    unsigned char bytes[64 * 16];                        /* 8x8 of the widest dtype, c128 */
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 131 + 7);
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (dt == TF_BOOL) continue;
        int64_t shape[2] = {8, 8};
        if (tf_dtype_is_quantized((tf_dtype)dt)) {         /* one row of one block: any bytes are a block */
            shape[0] = 1;
            shape[1] = (int64_t)tf_dtype_block_size((tf_dtype)dt);
        }
        tf_tensor *a = NULL, *there = NULL, *back = NULL;
        OK(tf_tensor_from_data(cpu, (tf_dtype)dt, 2, shape, bytes, &a));
        OK(tf_tensor_to(a, plug, &there));
        OK(tf_tensor_to(there, cpu, &back));
        unsigned char got[sizeof bytes];
        OK(tf_tensor_read(back, got, sizeof got));
        assert_memory_equal(got, bytes, (size_t)(shape[0] * shape[1]) / tf_dtype_block_size((tf_dtype)dt) *
                                            tf_dtype_size((tf_dtype)dt));
        tf_tensor_release(a);
        tf_tensor_release(there);
        tf_tensor_release(back);
    }
    /* an op it lacks runs on the CPU by staging through upload/download */
    int64_t s22[2] = {2, 2};
    float v[4] = {1, 2, 3, 4}, want[4] = {7, 10, 15, 22};
    tf_tensor *a = tensor_f32(plug, 2, s22, v), *at = NULL, *o = NULL;
    uint64_t before = tf_device_fallback_count(plug, TF_OP_MATMUL);
    OK(tf_matmul(a, a, &o));
    expect_f32(o, want, 4);
    assert_ptr_equal(tf_tensor_device(o), plug);
    assert_int_equal(tf_device_fallback_count(plug, TF_OP_MATMUL), before + 1);
    tf_tensor_release(o);
    OK(tf_transpose(a, 0, 1, &at));                    /* strided input through the staging path */
    OK(tf_matmul(at, a, &o));
    float want_t[4] = {10, 14, 14, 20};
    expect_f32(o, want_t, 4);
    tf_tensor_release(o);
    tf_tensor_release(at);
    tf_tensor_release(a);
    mybackend_stats_fn stats = (mybackend_stats_fn)tf_backend_proc_address("testplug", "mybackend_stats");
    assert_non_null(stats);
    mybackend_stats st;
    stats(&st);
    assert_int_equal(st.live_buffers, 0);
}

static void test_plugin_absent(void **state) {
    (void)state;
    tf_shutdown();
    unsetenv("TF_PLUGIN_PATH");
    tf_device *d;
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "testplug:0", tf_device_get("testplug:0", &d));
    tf_backend_props p;
    assert_false(find_backend("testplug", &p));
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");
    int64_t n = 3;
    tf_tensor *t = NULL, *s = NULL;
    OK(tf_arange(d, TF_F32, 1, 4, 1, &t));
    OK(tf_sum(t, 0, false, &s));
    float six[1] = {6};
    expect_f32(s, six, 1);
    (void)n;
    tf_tensor_release(t);
    tf_tensor_release(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_plugins_are_reported_and_skipped),
        cmocka_unit_test(test_plugin_device_with_opaque_memory),
        cmocka_unit_test(test_plugin_absent),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, load_with_bad_plugins, NULL));
}
