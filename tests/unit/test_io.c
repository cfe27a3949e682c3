/* .npy and safetensors: exact round trips for every dtype, files laid out
 * as NumPy writes them, each class of malformed file rejected with its
 * error, and random corruption never crashing. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

static char dir[256];

static int make_dir(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tf-test-io-%ld", (long)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    return system(cmd);
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static const char *file(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static tf_tensor *pattern(tf_dtype dt, int ndim, const int64_t *shape) {
    unsigned char bytes[4096];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = dt == TF_BOOL ? (unsigned char)(i % 3 == 0) : (unsigned char)(i * 29 + 5);
    tf_tensor *t = NULL;
    OK(tf_tensor_from_data(cpu_device(), dt, ndim, shape, bytes, &t));
    return t;
}

static void expect_same(const tf_tensor *a, const tf_tensor *b) {
    assert_int_equal(tf_tensor_dtype(a), tf_tensor_dtype(b));
    expect_shape(b, tf_tensor_ndim(a), tf_tensor_shape(a));
    size_t n = (size_t)tf_tensor_numel(a) * tf_dtype_size(tf_tensor_dtype(a));
    unsigned char *x = malloc(n + 1), *y = malloc(n + 1);
    OK(tf_tensor_read(a, x, n));
    OK(tf_tensor_read(b, y, n));
    assert_memory_equal(x, y, n);
    free(x);
    free(y);
}

static void test_npy_round_trip_every_dtype(void **state) {
    (void)state;
    int64_t shapes[3][3] = {{3, 4, 5}, {0, 7, 0}, {0, 0, 0}};
    int ndims[3] = {3, 2, 0};
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++)
        for (int k = 0; k < 3 && !tf_dtype_is_quantized((tf_dtype)dt); k++) {
            if (tf_dtype_is_complex((tf_dtype)dt)) {    /* refused: saved through tf_view_as_real */
                tf_tensor *z = NULL;
                OK(tf_zeros(cpu_device(), (tf_dtype)dt, ndims[k], shapes[k], &z));
                FAILS_WITH(TF_ERR_DTYPE, "hold no c", tf_npy_save(file("x.npy"), z));
                tf_tensor_release(z);
                continue;
            }
            tf_tensor *t = pattern((tf_dtype)dt, ndims[k], shapes[k]), *back = NULL, *tt = NULL;
            OK(tf_npy_save(file("x.npy"), t));
            OK(tf_npy_load(file("x.npy"), cpu_device(), &back));
            expect_same(t, back);
            tf_tensor_release(back);
            if (ndims[k] == 3) {                  /* a non-contiguous view saves its logical order */
                OK(tf_transpose(t, 0, 2, &tt));
                OK(tf_npy_save(file("t.npy"), tt));
                OK(tf_npy_load(file("t.npy"), cpu_device(), &back));
                expect_same(tt, back);
                tf_tensor_release(back);
                tf_tensor_release(tt);
            }
            tf_tensor_release(t);
        }
}

static void test_npy_as_numpy_writes_it(void **state) {
    (void)state;
    /* version 1.0, little-endian f4, shape (2, 3) */
    unsigned char v1[128 + 24];
    const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    memset(v1, ' ', 128);
    memcpy(v1, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(v1 + 10, dict, sizeof dict - 1);
    v1[127] = '\n';
    float vals[6] = {1, 2, 3, 4, 5, 6};
    memcpy(v1 + 128, vals, 24);
    write_bytes(file("v1.npy"), v1, sizeof v1);
    tf_tensor *t = NULL;
    OK(tf_npy_load(file("v1.npy"), cpu_device(), &t));
    expect_f32(t, vals, 6);
    tf_tensor_release(t);
    /* version 2.0, big-endian i4, 1-d */
    unsigned char v2[128 + 8];
    const char d2[] = "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }";
    memset(v2, ' ', 128);
    memcpy(v2, "\x93NUMPY\x02\x00\x74\x00\x00\x00", 12);
    memcpy(v2 + 12, d2, sizeof d2 - 1);
    v2[127] = '\n';
    unsigned char be[8] = {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};
    memcpy(v2 + 128, be, 8);
    write_bytes(file("v2.npy"), v2, sizeof v2);
    OK(tf_npy_load(file("v2.npy"), cpu_device(), &t));
    int32_t iv[2];
    OK(tf_tensor_read(t, iv, sizeof iv));
    assert_true(iv[0] == 258 && iv[1] == -2);
    tf_tensor_release(t);
    /* bool '|b1' and a 0-d scalar */
    unsigned char v3[128 + 1];
    const char d3[] = "{'descr': '|b1', 'fortran_order': False, 'shape': (), }";
    memset(v3, ' ', 128);
    memcpy(v3, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(v3 + 10, d3, sizeof d3 - 1);
    v3[127] = '\n';
    v3[128] = 1;
    write_bytes(file("v3.npy"), v3, sizeof v3);
    OK(tf_npy_load(file("v3.npy"), cpu_device(), &t));
    assert_int_equal(tf_tensor_dtype(t), TF_BOOL);
    assert_int_equal(tf_tensor_ndim(t), 0);
    tf_tensor_release(t);
}

/* Save a good file, then corrupt it with `edit` and expect `code`. */
static void expect_bad_npy(const char *what, const unsigned char *bytes, size_t n, tf_status code, const char *text) {
    write_bytes(file("bad.npy"), bytes, n);
    tf_tensor *t = (tf_tensor *)0x1;
    tf_status s = tf_npy_load(file("bad.npy"), cpu_device(), &t);
    if (s != code || !strstr(tf_last_error(), text))
        fail_msg("%s: got %s (%s), expected %s mentioning '%s'", what, tf_status_name(s), tf_last_error(),
                 tf_status_name(code), text);
    assert_null(t);
}

static void test_npy_bad_files(void **state) {
    (void)state;
    int64_t shape[2] = {4, 4};
    tf_tensor *t = pattern(TF_F32, 2, shape), *out = NULL;
    OK(tf_npy_save(file("good.npy"), t));
    size_t n;
    unsigned char *good = read_bytes(file("good.npy"), &n), *b = malloc(n + 64);
    FAILS_WITH(TF_ERR_IO, "cannot open", tf_npy_load(file("missing.npy"), cpu_device(), &out));
    FAILS_WITH(TF_ERR_IO, "not a regular file", tf_npy_load(dir, cpu_device(), &out));
    memcpy(b, good, n);
    b[1] = 'X';
    expect_bad_npy("bad magic", b, n, TF_ERR_FORMAT, "bad magic");
    expect_bad_npy("truncated header", good, 9, TF_ERR_FORMAT, "bad magic");
    memcpy(b, good, n);
    b[8] = 0xff;
    b[9] = 0x7f;
    expect_bad_npy("header past the end", b, n, TF_ERR_FORMAT, "header runs past the end");
    memcpy(b, good, n);
    b[6] = 9;
    expect_bad_npy("unknown version", b, n, TF_ERR_FORMAT, "unsupported .npy version");
    expect_bad_npy("truncated data", good, n - 5, TF_ERR_FORMAT, "holds 59 data bytes, its header describes 64");
    memcpy(b, good, n);
    memset(b + n, 0, 8);
    expect_bad_npy("trailing data", b, n + 8, TF_ERR_FORMAT, "holds 72 data bytes");
    memcpy(b, good, n);
    char *descr = strstr((char *)b + 10, "<f4");
    memcpy(descr, "<c8", 3);
    expect_bad_npy("complex dtype", b, n, TF_ERR_FORMAT, "unsupported dtype descr");
    memcpy(b, good, n);
    memcpy(strstr((char *)b + 10, "False"), "True ", 5);
    expect_bad_npy("fortran order", b, n, TF_ERR_FORMAT, "Fortran-order arrays are not supported");
    memcpy(b, good, n);
    memcpy(strstr((char *)b + 10, "(4, 4)"), "(4, x)", 6);
    expect_bad_npy("malformed shape", b, n, TF_ERR_FORMAT, "malformed shape tuple");
    memcpy(b, good, n);
    memcpy(strstr((char *)b + 10, "'shape'"), "'shope'", 7);
    expect_bad_npy("missing key", b, n, TF_ERR_FORMAT, "dict with descr, fortran_order and shape");
    memcpy(b, good, n);
    memcpy(strstr((char *)b + 10, "(4, 4)"), "(4,-4)", 6);
    expect_bad_npy("negative extent", b, n, TF_ERR_FORMAT, "malformed shape tuple");
    FAILS_WITH(TF_ERR_IO, "cannot create", tf_npy_save("/nonexistent-dir/x.npy", t));
    free(good);
    free(b);
    tf_tensor_release(t);
}

static void test_safetensors_round_trip(void **state) {
    (void)state;
    int64_t s1[2] = {3, 5}, s2[1] = {7}, s0[2] = {0, 4};
    tf_tensor *ts[4] = {pattern(TF_F32, 2, s1), pattern(TF_BF16, 1, s2), pattern(TF_I64, 2, s0), pattern(TF_BOOL, 0, NULL)};
    const char *names[4] = {"layer.0.weight", "emb", "empty", "flag"};
    OK(tf_safetensors_save(file("m.safetensors"), 4, names, (const tf_tensor *const *)ts));
    tf_safetensors *f = NULL;
    OK(tf_safetensors_open(file("m.safetensors"), &f));
    assert_int_equal(tf_safetensors_count(f), 4);
    assert_string_equal(tf_safetensors_name(f, 1), "emb");
    assert_null(tf_safetensors_name(f, 4));
    for (int i = 0; i < 4; i++) {
        tf_tensor *back = NULL;
        OK(tf_safetensors_load(f, names[i], cpu_device(), &back));
        expect_same(ts[i], back);
        tf_tensor_release(back);
    }
    tf_tensor *none = NULL;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "has no tensor 'nope'; its 4 tensors are 'layer.0.weight', 'emb', 'empty', 'flag'",
               tf_safetensors_load(f, "nope", cpu_device(), &none));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "has no tensor 'bert.layer.0.weight' (it has 'layer.0.weight': a name prefix differs)",
               tf_safetensors_load(f, "bert.layer.0.weight", cpu_device(), &none));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_safetensors_load_as: ", tf_safetensors_load_as(f, "0.weight", cpu_device(), TF_F32, &none));
    assert_null(none);
    /* the infos, without loading */
    tf_safetensors_tensor info;
    assert_int_equal(tf_safetensors_find(f, "emb"), 1);
    assert_int_equal(tf_safetensors_find(f, "nope"), -1);
    OK(tf_safetensors_tensor_info(f, 0, &info));
    assert_string_equal(info.name, "layer.0.weight");
    assert_true(info.dtype == TF_F32 && info.ndim == 2 && info.shape[0] == 3 && info.shape[1] == 5 && info.nbytes == 60);
    FAILS_WITH(TF_ERR_INDEX, "tf_safetensors_tensor_info: tensor 4 out of range", tf_safetensors_tensor_info(f, 4, &info));
    /* loaded with a cast: the values of the stored tensor cast on the device */
    tf_tensor *as_bf16 = NULL, *want = NULL;
    OK(tf_safetensors_load_as(f, "layer.0.weight", cpu_device(), TF_BF16, &as_bf16));
    OK(tf_cast(ts[0], TF_BF16, &want));
    expect_same(want, as_bf16);
    tf_tensor_release(as_bf16);
    tf_tensor_release(want);
    OK(tf_safetensors_load_as(f, "emb", cpu_device(), TF_BF16, &as_bf16));   /* already bf16: as stored */
    expect_same(ts[1], as_bf16);
    tf_tensor_release(as_bf16);
    tf_safetensors_close(f);
    const char *dup[2] = {"a", "a"};
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "name 'a' repeats", tf_safetensors_save(file("d.safetensors"), 2, dup, (const tf_tensor *const *)ts));
    for (int i = 0; i < 4; i++) tf_tensor_release(ts[i]);
}

static void expect_bad_st(const char *what, const char *header, const unsigned char *data, size_t ndata, tf_status code,
                          const char *text) {
    size_t hl = strlen(header);
    unsigned char *b = malloc(8 + hl + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (ndata) memcpy(b + 8 + hl, data, ndata);
    write_bytes(file("bad.safetensors"), b, 8 + hl + ndata);
    free(b);
    tf_safetensors *f = (tf_safetensors *)0x1;
    tf_status s = tf_safetensors_open(file("bad.safetensors"), &f);
    if (s != code || !strstr(tf_last_error(), text))
        fail_msg("%s: got %s (%s), expected %s mentioning '%s'", what, tf_status_name(s), tf_last_error(),
                 tf_status_name(code), text);
    if (code == TF_OK) tf_safetensors_close(f);
    else assert_null(f);
}

static void test_safetensors_bad_files(void **state) {
    (void)state;
    unsigned char d[16] = {0};
    expect_bad_st("invalid JSON", "{\"a\": {\"dtype\": \"F32\",", d, 16, TF_ERR_FORMAT, "malformed");
    expect_bad_st("not an object", "[1, 2]", d, 0, TF_ERR_FORMAT, "not a JSON object");
    expect_bad_st("missing key", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d, 8, TF_ERR_FORMAT, "needs dtype, shape and data_offsets");
    expect_bad_st("unknown dtype", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", d, 2,
                  TF_ERR_FORMAT, "unsupported dtype 'F8_E4M3'");
    expect_bad_st("size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d, 8,
                  TF_ERR_FORMAT, "its shape and dtype need 12");
    expect_bad_st("past the end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", d, 8,
                  TF_ERR_FORMAT, "tensors cover 16 bytes, the file holds 8");
    expect_bad_st("overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", d, 6, TF_ERR_FORMAT, "gap or overlap");
    expect_bad_st("duplicate", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", d, 2, TF_ERR_FORMAT, "appears twice");
    expect_bad_st("negative shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", d, 1,
                  TF_ERR_FORMAT, "not a list of at most 8 non-negative integers");
    expect_bad_st("trailing bytes", "{} x", d, 0, TF_ERR_FORMAT, "trailing bytes");
    expect_bad_st("metadata is skipped", "{\"__metadata__\":{\"format\":\"pt\",\"n\":[1,{\"x\":\"y\"}]}}", d, 0, TF_OK, "");
    unsigned char tiny[4] = {1, 2, 3, 4};
    write_bytes(file("tiny.safetensors"), tiny, 4);
    tf_safetensors *f = NULL;
    FAILS_WITH(TF_ERR_FORMAT, "shorter than the 8-byte header length", tf_safetensors_open(file("tiny.safetensors"), &f));
    unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    write_bytes(file("huge.safetensors"), huge, 8);
    FAILS_WITH(TF_ERR_FORMAT, "exceeds the file", tf_safetensors_open(file("huge.safetensors"), &f));
}

/* Flip bytes and truncate valid files at random: every load either works
 * or returns an error (ASan in `make test` catches any bad access). */
static void test_corrupted_files_never_crash(void **state) {
    (void)state;
    int64_t shape[2] = {5, 6};
    tf_tensor *t = pattern(TF_F16, 2, shape);
    const char *names[1] = {"w"};
    OK(tf_npy_save(file("f.npy"), t));
    OK(tf_safetensors_save(file("f.safetensors"), 1, names, (const tf_tensor *const *)&t));
    const char *paths[2] = {"f.npy", "f.safetensors"};
    uint64_t rng = 12345;
    int failures = 0, loads = 0;
    for (int kind = 0; kind < 2; kind++) {
        size_t n;
        unsigned char *orig = read_bytes(file(paths[kind]), &n), *b = malloc(n);
        for (int iter = 0; iter < 1500; iter++) {
            memcpy(b, orig, n);
            size_t len = n;
            int edits = 1 + (int)(rng % 4);
            for (int e = 0; e < edits; e++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (size_t)(rng >> 33) % (n < 160 ? n : 160);   /* mostly headers */
                b[at] = (unsigned char)(rng >> 17);
            }
            if (rng % 5 == 0) len = (size_t)(rng >> 40) % n;
            write_bytes(file("fuzz.bin"), b, len);
            tf_tensor *o = NULL;
            tf_safetensors *f = NULL;
            tf_status s;
            if (kind == 0) s = tf_npy_load(file("fuzz.bin"), cpu_device(), &o);
            else {
                s = tf_safetensors_open(file("fuzz.bin"), &f);
                if (s == TF_OK && tf_safetensors_count(f) > 0)
                    s = tf_safetensors_load(f, tf_safetensors_name(f, 0), cpu_device(), &o);
                tf_safetensors_close(f);
            }
            if (s == TF_OK) loads++;
            else {
                failures++;
                assert_null(o);
                assert_true(s == TF_ERR_FORMAT || s == TF_ERR_SIZE || s == TF_ERR_DTYPE || s == TF_ERR_OUT_OF_MEMORY ||
                            s == TF_ERR_TOO_MANY_DIMS || s == TF_ERR_INVALID_ARGUMENT);
            }
            tf_tensor_release(o);
        }
        free(orig);
        free(b);
    }
    assert_true(failures > 1000 && loads > 0);   /* both outcomes were exercised */
    tf_tensor_release(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_round_trip_every_dtype),
        cmocka_unit_test(test_npy_as_numpy_writes_it),
        cmocka_unit_test(test_npy_bad_files),
        cmocka_unit_test(test_safetensors_round_trip),
        cmocka_unit_test(test_safetensors_bad_files),
        cmocka_unit_test(test_corrupted_files_never_crash),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, make_dir, remove_dir));
}
