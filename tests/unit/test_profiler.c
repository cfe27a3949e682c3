/* The profiler: one record per dispatched op on every device present,
 * fallbacks marked, nothing recorded while off, the Chrome trace and the
 * summary table, TF_PROFILE. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"
#include "mybackend.h"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static uint64_t ops_everywhere(void) {
    uint64_t n = 0;
    for (int i = 0; i < tf_device_count(); i++) n += tf_device_op_count(tf_device_at(i));
    return n;
}

/* An add of two [2,3] f32 tensors on d. */
static void add_on(tf_device *d) {
    const int64_t shape[2] = {2, 3};
    const float v[6] = {1, 2, 3, 4, 5, 6};
    tf_tensor *a = tensor_f32(d, 2, shape, v), *b = tensor_f32(d, 2, shape, v), *c = NULL;
    OK(tf_add(a, b, &c));
    const float want[6] = {2, 4, 6, 8, 10, 12};
    expect_f32(c, want, 6);
    tf_tensor_release(a);
    tf_tensor_release(b);
    tf_tensor_release(c);
}

static void test_records_every_op_on_every_device(void **state) {
    (void)state;
    OK(mybackend_register());
    tf_device *my = NULL;
    OK(tf_device_get("mybackend:0", &my));
    add_on(cpu_device());                                  /* before start: not recorded */
    OK(tf_profiler_start());
    assert_int_equal(tf_profiler_record_count(), 0);
    uint64_t before = ops_everywhere();
    for (int i = 0; i < tf_device_count(); i++) add_on(tf_device_at(i));
    tf_tensor *x = NULL, *y = NULL;                         /* softmax: the example backend falls back */
    const int64_t shape[2] = {2, 3};
    const float v[6] = {1, 2, 3, 4, 5, 6};
    x = tensor_f32(my, 2, shape, v);
    OK(tf_softmax(x, 1, &y));
    uint64_t dispatched = ops_everywhere() - before;
    OK(tf_profiler_stop());
    assert_int_equal(tf_profiler_record_count(), (int64_t)dispatched);
    add_on(cpu_device());                                  /* after stop: not recorded */
    assert_int_equal(tf_profiler_record_count(), (int64_t)dispatched);

    char path[] = "/tmp/tf_profile_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    OK(tf_profiler_write_trace(path));
    char *json = read_file(path);
    assert_int_equal(count_of(json, "\"ph\":\"X\""), (int)dispatched);
    assert_true(strstr(json, "\"traceEvents\":[") && strstr(json, "\"thread_name\""));
    assert_true(strstr(json, "\"name\":\"add\"") && strstr(json, "\"call\":\"tf_add\""));
    assert_true(strstr(json, "\"operands\":\"f32[2,3], f32[2,3] -> f32[2,3]\",\"bytes\":72"));
    assert_true(strstr(json, "\"device\":\"mybackend:0\""));
    for (int i = 0; i < tf_device_count(); i++) {
        char want[96];
        snprintf(want, sizeof want, "\"device\":\"%s\"", tf_device_name(tf_device_at(i)));
        if (!strstr(json, want)) fail_msg("no record names %s", tf_device_name(tf_device_at(i)));
    }
    assert_int_equal(count_of(json, "\"fallback\":true"), 1);
    assert_true(strstr(json, "\"name\":\"softmax\"") && strstr(json, "\"execution_us\":"));
    free(json);
    unlink(path);

    char table[8192];
    OK(tf_profiler_summary(table, sizeof table));
    assert_true(strstr(table, "op ") && strstr(table, "mean us") && strstr(table, "fallbacks"));
    char row[64];
    snprintf(row, sizeof row, "add                    cpu          %8d", 1);
    assert_non_null(strstr(table, row));
    assert_non_null(strstr(table, "softmax"));
    char small[40];
    FAILS_WITH(TF_ERR_BUFFER_TOO_SMALL, "needs", tf_profiler_summary(small, sizeof small));
    assert_int_equal(strlen(small), sizeof small - 1);
    FAILS_WITH(TF_ERR_IO, "cannot write", tf_profiler_write_trace("/nonexistent/dir/trace.json"));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_profiler_write_trace(NULL));
    tf_tensor_release(x);
    tf_tensor_release(y);
}

/* TF_PROFILE: on from initialization, both files written at tf_shutdown. */
static void test_environment(void **state) {
    (void)state;
    tf_shutdown();
    char dir[] = "/tmp/tf_profile_env_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], txt[160];
    snprintf(path, sizeof path, "%s/run.json", dir);
    snprintf(txt, sizeof txt, "%s.txt", path);
    setenv("TF_PROFILE", path, 1);
    add_on(cpu_device());
    add_on(cpu_device());
    tf_shutdown();
    unsetenv("TF_PROFILE");
    char *json = read_file(path), *table = read_file(txt);
    assert_int_equal(count_of(json, "\"ph\":\"X\""), 2);
    assert_non_null(strstr(table, "add"));
    assert_non_null(strstr(table, "2 ops"));
    free(json);
    free(table);
    unlink(path);
    unlink(txt);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_every_op_on_every_device),
        cmocka_unit_test(test_environment),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
