/* GGUF: a file built here byte by byte (every value type, alignment,
 * a float tensor and a quantized one) reads back exactly; every class of
 * malformed file is TF_ERR_FORMAT with a message that names the fault,
 * and every truncation of a good file is rejected without a crash. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#include <tensorframe/numerics.h>

/* ---- a tiny GGUF writer with marks at the fields the tests corrupt ---- */

typedef struct bytes {
    unsigned char buf[4096];
    size_t n;
} bytes;

static void put(bytes *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->buf);
    memcpy(b->buf + b->n, p, n);
    b->n += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }   /* little-endian host */
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_key(bytes *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
}
static void patch_u32(bytes *b, size_t at, uint32_t v) { memcpy(b->buf + at, &v, 4); }
static void patch_u64(bytes *b, size_t at, uint64_t v) { memcpy(b->buf + at, &v, 8); }

enum { ALIGN = 64, N_KV = 17, N_TENSORS = 3 };

typedef struct marks {
    size_t version, n_tensors, n_kv, key_i8, alignment_value, names_count, string_len;
    size_t t0_ndim, t0_dim0, t0_type, t0_offset, t1_name, t1_offset, t2_type, t2_dim0;
    size_t data_start;
} marks;

static const float matrix[2][3] = {{1.5f, -2.0f, 3.25f}, {0.0f, 1e-3f, -7.0f}};
static const uint16_t halves[4] = {0x3c00, 0xc000, 0x3800, 0x0000};   /* 1, -2, 0.5, 0 */

static void build(bytes *b, marks *m, uint32_t version) {
    memset(b, 0, sizeof *b);
    put(b, "GGUF", 4);
    m->version = b->n;
    put_u32(b, version);
    m->n_tensors = b->n;
    put_u64(b, N_TENSORS);
    m->n_kv = b->n;
    put_u64(b, N_KV);
    put_key(b, "general.architecture", 8);
    m->string_len = b->n;
    put_str(b, "llama");
    put_key(b, "general.alignment", 4);
    m->alignment_value = b->n;
    put_u32(b, ALIGN);
    put_key(b, "u8", 0);  put(b, "\xfe", 1);
    m->key_i8 = b->n + 8;
    put_key(b, "i8", 1);  put(b, "\xfb", 1);                     /* -5 */
    put_key(b, "u16", 2); put(b, "\x34\x12", 2);
    put_key(b, "i16", 3); put(b, "\x00\x80", 2);                 /* -32768 */
    put_key(b, "u32", 4); put_u32(b, 4000000000u);
    put_key(b, "i32", 5); put_u32(b, (uint32_t)-123456);
    put_key(b, "f32", 6); float f = 100000.0f; put(b, &f, 4);
    put_key(b, "bool", 7); put(b, "\x01", 1);
    put_key(b, "u64", 10); put_u64(b, 0xffffffffffffffffull);
    put_key(b, "i64", 11); put_u64(b, (uint64_t)-9000000000ll);
    put_key(b, "f64", 12); double d = -0.125; put(b, &d, 8);
    put_key(b, "ints", 9); put_u32(b, 5); put_u64(b, 3);
    put_u32(b, 7); put_u32(b, (uint32_t)-8); put_u32(b, 9);
    put_key(b, "floats", 9); put_u32(b, 6); put_u64(b, 2);
    f = 0.5f; put(b, &f, 4); f = -1.0f; put(b, &f, 4);
    put_key(b, "names", 9); put_u32(b, 8);
    m->names_count = b->n;
    put_u64(b, 3);
    put_str(b, "<s>"); put_str(b, ""); put_str(b, "caf\xc3\xa9");
    put_key(b, "empty", 9); put_u32(b, 4); put_u64(b, 0);
    /* tensor 0: f32 [2, 3] at 0; tensor 1: f16 [4] at 64; tensor 2: Q4_1 [1, 32] at 128 */
    put_str(b, "matrix");
    m->t0_ndim = b->n;
    put_u32(b, 2);
    m->t0_dim0 = b->n;
    put_u64(b, 3); put_u64(b, 2);
    m->t0_type = b->n;
    put_u32(b, 0);
    m->t0_offset = b->n;
    put_u64(b, 0);
    m->t1_name = b->n;
    put_str(b, "halves");
    put_u32(b, 1); put_u64(b, 4); put_u32(b, 1);
    m->t1_offset = b->n;
    put_u64(b, ALIGN);
    put_str(b, "quant");
    put_u32(b, 2);
    m->t2_dim0 = b->n;
    put_u64(b, 32); put_u64(b, 1);
    m->t2_type = b->n;
    put_u32(b, 3);
    put_u64(b, 2 * ALIGN);
    while (b->n % ALIGN) put(b, "", 1);
    m->data_start = b->n;
    put(b, matrix, sizeof matrix);
    while (b->n % ALIGN) put(b, "", 1);
    put(b, halves, sizeof halves);
    while (b->n % ALIGN) put(b, "", 1);
    put(b, "\x00\x38\x00\xc0", 4);                   /* Q4_1: d = 0.5, m = -2 (f16) */
    for (int j = 0; j < 16; j++) put(b, &(unsigned char){(unsigned char)(j | (15 - j) << 4)}, 1);
}

/* The Q4_1 block's 32 values: low nibbles j, then high nibbles 15 - j. */
static float quant_value(int e) { return 0.5f * (float)(e < 16 ? e : 31 - e) - 2.0f; }

static char path[256];

static void write_file(const bytes *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b->buf, 1, n, fp), n);
    fclose(fp);
}

static int setup(void **state) {
    (void)state;
    snprintf(path, sizeof path, "/tmp/tf-test-gguf-%ld.gguf", (long)getpid());
    /* TF_GGUF_SEED=<file>: write the good file there (the fuzzer's seed). */
    const char *seed = getenv("TF_GGUF_SEED");
    if (seed) {
        bytes b;
        marks m;
        build(&b, &m, 3);
        FILE *fp = fopen(seed, "wb");
        if (!fp || fwrite(b.buf, 1, b.n, fp) != b.n) return 1;
        fclose(fp);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(path);
    return 0;
}

static tf_gguf *open_ok(const bytes *b) {
    write_file(b, b->n);
    tf_gguf *f = NULL;
    tf_status s = tf_gguf_open(path, &f);
    if (s != TF_OK) fail_msg("tf_gguf_open: %s", tf_last_error());
    return f;
}

static int64_t key(const tf_gguf *f, const char *k) {
    int64_t i = tf_gguf_find_key(f, k);
    assert_true(i >= 0);
    return i;
}

static int64_t get_int(const tf_gguf *f, const char *k, int64_t elem) {
    int64_t v = 0;
    assert_int_equal(tf_gguf_get_int(f, key(f, k), elem, &v), TF_OK);
    return v;
}

static void gguf_metadata_of_every_type_reads_back(void **state) {
    (void)state;
    bytes b;
    marks m;
    build(&b, &m, 3);
    tf_gguf *f = open_ok(&b);
    assert_int_equal(tf_gguf_version(f), 3);
    assert_int_equal(tf_gguf_key_count(f), N_KV);
    assert_string_equal(tf_gguf_key(f, 0), "general.architecture");
    assert_null(tf_gguf_key(f, N_KV));
    assert_int_equal(tf_gguf_find_key(f, "absent"), -1);
    assert_int_equal(get_int(f, "u8", 0), 254);
    assert_int_equal(get_int(f, "i8", 0), -5);
    assert_int_equal(get_int(f, "u16", 0), 0x1234);
    assert_int_equal(get_int(f, "i16", 0), -32768);
    assert_int_equal(get_int(f, "u32", 0), 4000000000ll);
    assert_int_equal(get_int(f, "i32", 0), -123456);
    assert_int_equal(get_int(f, "bool", 0), 1);
    assert_int_equal(get_int(f, "i64", 0), -9000000000ll);
    assert_int_equal(get_int(f, "ints", 1), -8);
    int64_t v;
    assert_int_equal(tf_gguf_get_int(f, key(f, "u64"), 0, &v), TF_ERR_SIZE);
    assert_int_equal(tf_gguf_get_int(f, key(f, "f32"), 0, &v), TF_ERR_DTYPE);
    assert_int_equal(tf_gguf_get_int(f, key(f, "ints"), 3, &v), TF_ERR_INDEX);
    assert_int_equal(tf_gguf_get_int(f, key(f, "ints"), -1, &v), TF_ERR_INDEX);
    assert_int_equal(tf_gguf_get_int(f, N_KV, 0, &v), TF_ERR_INDEX);
    double x;
    assert_int_equal(tf_gguf_get_float(f, key(f, "f32"), 0, &x), TF_OK);
    assert_true(x == 100000.0);
    assert_int_equal(tf_gguf_get_float(f, key(f, "f64"), 0, &x), TF_OK);
    assert_true(x == -0.125);
    assert_int_equal(tf_gguf_get_float(f, key(f, "floats"), 1, &x), TF_OK);
    assert_true(x == -1.0);
    assert_int_equal(tf_gguf_get_float(f, key(f, "i32"), 0, &x), TF_OK);
    assert_true(x == -123456.0);
    assert_int_equal(tf_gguf_get_float(f, key(f, "names"), 0, &x), TF_ERR_DTYPE);
    const char *s;
    size_t n;
    assert_int_equal(tf_gguf_get_string(f, key(f, "general.architecture"), 0, &s, &n), TF_OK);
    assert_true(n == 5 && !memcmp(s, "llama", 5));
    assert_int_equal(tf_gguf_key_type(f, key(f, "names")), TF_GGUF_ARRAY);
    assert_int_equal(tf_gguf_array_type(f, key(f, "names")), TF_GGUF_STRING);
    assert_int_equal(tf_gguf_array_length(f, key(f, "names")), 3);
    assert_int_equal(tf_gguf_array_length(f, key(f, "u8")), -1);
    assert_int_equal(tf_gguf_array_type(f, key(f, "u8")), TF_GGUF_NONE);
    assert_int_equal(tf_gguf_array_length(f, key(f, "empty")), 0);
    assert_int_equal(tf_gguf_get_string(f, key(f, "names"), 2, &s, &n), TF_OK);
    assert_true(n == 5 && !memcmp(s, "caf\xc3\xa9", 5));
    assert_int_equal(tf_gguf_get_string(f, key(f, "names"), 1, &s, &n), TF_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tf_gguf_get_string(f, key(f, "u8"), 0, &s, &n), TF_ERR_DTYPE);
    assert_int_equal(tf_gguf_get_string(f, key(f, "empty"), 0, &s, &n), TF_ERR_INDEX);
    tf_gguf_close(f);
}

static void gguf_tensors_read_back_at_their_alignment(void **state) {
    (void)state;
    bytes b;
    marks m;
    for (uint32_t version = 2; version <= 3; version++) {
        build(&b, &m, version);
        tf_gguf *f = open_ok(&b);
        assert_int_equal(tf_gguf_tensor_count(f), N_TENSORS);
        tf_gguf_tensor info;
        assert_int_equal(tf_gguf_tensor_info(f, 0, &info), TF_OK);
        assert_string_equal(info.name, "matrix");
        assert_string_equal(info.block_type_name, "F32");
        assert_int_equal(info.ndim, 2);
        assert_int_equal(info.shape[0], 2);   /* ggml's ne = [3, 2], reversed */
        assert_int_equal(info.shape[1], 3);
        assert_int_equal(info.nbytes, sizeof matrix);
        assert_memory_equal(info.data, b.buf + m.data_start, sizeof matrix);
        assert_int_equal(tf_gguf_tensor_info(f, 2, &info), TF_OK);
        assert_int_equal(info.block_type, 3);
        assert_string_equal(info.block_type_name, "Q4_1");
        assert_int_equal(info.nbytes, 20);
        assert_memory_equal(info.data, b.buf + m.data_start + 2 * ALIGN, 20);
        assert_int_equal(tf_gguf_tensor_info(f, 3, &info), TF_ERR_INDEX);
        assert_int_equal(tf_gguf_find_tensor(f, "halves"), 1);
        assert_int_equal(tf_gguf_find_tensor(f, "nope"), -1);

        tf_tensor *t = NULL;
        assert_int_equal(tf_gguf_load(f, "matrix", cpu_device(), &t), TF_OK);
        assert_int_equal(tf_tensor_dtype(t), TF_F32);
        float got[6];
        assert_int_equal(tf_tensor_read(t, got, sizeof got), TF_OK);
        assert_memory_equal(got, matrix, sizeof matrix);
        tf_tensor_release(t);
        assert_int_equal(tf_gguf_load(f, "halves", cpu_device(), &t), TF_OK);
        assert_int_equal(tf_tensor_dtype(t), TF_F16);
        uint16_t h[4];
        assert_int_equal(tf_tensor_read(t, h, sizeof h), TF_OK);
        assert_memory_equal(h, halves, sizeof h);
        tf_tensor_release(t);
        assert_int_equal(tf_gguf_load(f, "quant", cpu_device(), &t), TF_OK);   /* a Q4_1 tensor, its bytes as stored */
        assert_int_equal(tf_tensor_dtype(t), TF_Q4_1);
        assert_int_equal(tf_tensor_shape(t)[1], 32);
        tf_tensor *decoded = NULL;
        assert_int_equal(tf_cast(t, TF_F32, &decoded), TF_OK);
        float q[32];
        assert_int_equal(tf_tensor_read(decoded, q, sizeof q), TF_OK);
        for (int e = 0; e < 32; e++) assert_true(q[e] == quant_value(e));
        tf_tensor_release(decoded);
        tf_tensor_release(t);
        assert_int_equal(tf_gguf_load(f, "nope", cpu_device(), &t), TF_ERR_INVALID_ARGUMENT);
        tf_gguf_close(f);
    }
}

static void gguf_load_as_decodes_and_converts(void **state) {
    (void)state;
    bytes b;
    marks m;
    build(&b, &m, 3);
    tf_gguf *f = open_ok(&b);
    tf_tensor *t = NULL;
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_F32, &t), TF_OK);
    assert_int_equal(tf_tensor_ndim(t), 2);
    float got[32];
    assert_int_equal(tf_tensor_read(t, got, sizeof got), TF_OK);
    for (int e = 0; e < 32; e++) assert_true(got[e] == quant_value(e));
    tf_tensor_release(t);
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_BF16, &t), TF_OK);
    assert_int_equal(tf_tensor_dtype(t), TF_BF16);
    uint16_t h[32];
    assert_int_equal(tf_tensor_read(t, h, sizeof h), TF_OK);
    for (int e = 0; e < 32; e++) assert_true(tf_bf16_to_f32(h[e]) == quant_value(e));   /* all exact in bf16 */
    tf_tensor_release(t);
    assert_int_equal(tf_gguf_load_as(f, "halves", cpu_device(), TF_F32, &t), TF_OK);   /* a float type converts */
    assert_int_equal(tf_tensor_read(t, got, 4 * sizeof(float)), TF_OK);
    assert_true(got[0] == 1.0f && got[1] == -2.0f && got[2] == 0.5f && got[3] == 0.0f);
    tf_tensor_release(t);
    assert_int_equal(tf_gguf_load_as(f, "matrix", cpu_device(), TF_F32, &t), TF_OK);   /* already the dtype */
    assert_int_equal(tf_tensor_read(t, got, sizeof matrix), TF_OK);
    assert_memory_equal(got, matrix, sizeof matrix);
    tf_tensor_release(t);
    t = (tf_tensor *)&b;
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_I32, &t), TF_ERR_DTYPE);
    assert_null(t);
    assert_int_equal(tf_gguf_load_as(f, "nope", cpu_device(), TF_F32, &t), TF_ERR_INVALID_ARGUMENT);
    assert_int_equal(tf_gguf_load_as(NULL, "quant", cpu_device(), TF_F32, &t), TF_ERR_NULL_ARGUMENT);
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_F32, NULL), TF_ERR_NULL_ARGUMENT);
    tf_gguf_close(f);
    /* IQ4_NL (18 bytes a block): the Q4_1 block read as one is d = 0.5, then
     * 16 bytes of codebook indices: Q4_1's min (00 c0), then its nibbles
     * (byte j: j low, 15 - j high) */
    patch_u32(&b, m.t2_type, 20);
    f = open_ok(&b);
    static const int8_t iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_F32, &t), TF_OK);
    assert_int_equal(tf_tensor_read(t, got, sizeof got), TF_OK);
    for (int e = 0; e < 32; e++) {
        int j = e % 16, byte = j == 0 ? 0x00 : j == 1 ? 0xc0 : (j - 2) | (15 - (j - 2)) << 4;
        assert_true(got[e] == 0.5f * iq4[e < 16 ? byte & 15 : byte >> 4]);
    }
    tf_tensor_release(t);
    tf_gguf_close(f);
    patch_u32(&b, m.t2_type, 39);                      /* MXFP4 (17 bytes a block): no tensorframe dtype */
    f = open_ok(&b);
    assert_int_equal(tf_gguf_load_as(f, "quant", cpu_device(), TF_F32, &t), TF_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(tf_last_error(), "MXFP4"));
    assert_int_equal(tf_gguf_load(f, "quant", cpu_device(), &t), TF_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(tf_last_error(), "MXFP4"));
    /* the message names what is read, not tf_gguf_load_as, which refuses the same types */
    assert_null(strstr(tf_last_error(), "tf_gguf_load_as"));
    assert_non_null(strstr(tf_last_error(), "IQ4_XS are"));
    tf_gguf_close(f);
}

/* A bad file: TF_ERR_FORMAT, *out NULL and a message containing `why`. */
static void expect_rejected(const bytes *b, size_t n, const char *why) {
    write_file(b, n);
    tf_gguf *f = (tf_gguf *)b;
    tf_status s = tf_gguf_open(path, &f);
    if (s != TF_ERR_FORMAT || f || (why && !strstr(tf_last_error(), why)))
        fail_msg("expected TF_ERR_FORMAT mentioning '%s', got %s: %s", why ? why : "", tf_status_name(s), tf_last_error());
}

static void gguf_every_malformed_file_is_a_format_error(void **state) {
    (void)state;
    bytes b;
    marks m;
#define CORRUPT(edit, why)     \
    do {                       \
        build(&b, &m, 3);      \
        edit;                  \
        expect_rejected(&b, b.n, why); \
    } while (0)
    CORRUPT(memcpy(b.buf, "GGUL", 4), "bad magic");
    CORRUPT(patch_u32(&b, m.version, 1), "version 1");
    CORRUPT(patch_u32(&b, m.version, 4), "version 4");
    CORRUPT(patch_u64(&b, m.n_tensors, 1ull << 62), "cannot fit");
    CORRUPT(patch_u64(&b, m.n_kv, ~0ull), "cannot fit");
    CORRUPT(patch_u64(&b, m.string_len, ~0ull), "runs past the end");
    CORRUPT(patch_u64(&b, m.names_count, 1ull << 60), "claims");
    CORRUPT(patch_u32(&b, m.alignment_value, 0), "power of two");
    CORRUPT(patch_u32(&b, m.alignment_value, 48), "power of two");
    CORRUPT(patch_u32(&b, m.t0_ndim, 5), "dimensions");
    CORRUPT(patch_u32(&b, m.t0_ndim, 0), "dimensions");
    CORRUPT(patch_u32(&b, m.t0_type, 99), "unknown block type 99");
    CORRUPT(patch_u32(&b, m.t0_type, 4), "unknown block type 4");   /* a retired id */
    CORRUPT(patch_u64(&b, m.t0_offset, 4), "not a multiple of the alignment");
    CORRUPT(patch_u64(&b, m.t0_offset, 1ull << 40), "spans");
    CORRUPT(patch_u64(&b, m.t0_dim0, 1ull << 62), "overflowing");
    CORRUPT((patch_u64(&b, m.t0_dim0, 1ull << 31), patch_u64(&b, m.t0_dim0 + 8, 1ull << 31)), "overflowing byte size");
    CORRUPT((patch_u64(&b, m.t0_dim0, 1ull << 30), patch_u64(&b, m.t0_dim0 + 8, 1ull << 30)), "spans");
    CORRUPT(patch_u64(&b, m.t0_dim0, 100), "spans");          /* runs into 'halves' and past the end */
    CORRUPT(patch_u64(&b, m.t0_dim0, 17), "overlap");         /* 68 bytes at 0 reach 'halves' at 64 */
    CORRUPT(patch_u64(&b, m.t1_offset, 0), "overlap");
    CORRUPT(patch_u64(&b, m.t2_dim0, 16), "not a multiple of Q4_1's block");
    CORRUPT(memcpy(b.buf + m.t1_name + 8, "matrix", 6), "'matrix' appears twice");
    CORRUPT(b.buf[m.key_i8] = 'u', "key 'u8' appears twice");
    CORRUPT(patch_u32(&b, m.names_count - 4, 9), "array of arrays");
    CORRUPT(patch_u32(&b, m.names_count - 4, 13), "unknown element type 13");
    CORRUPT(patch_u32(&b, m.string_len - 4, 77), "unknown value type 77");
    CORRUPT(b.buf[m.t1_name + 9] = 0, "NUL");
#undef CORRUPT
}

static void gguf_every_truncation_is_rejected(void **state) {
    (void)state;
    bytes b;
    marks m;
    build(&b, &m, 3);
    for (size_t n = 0; n < b.n; n++) expect_rejected(&b, n, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gguf_metadata_of_every_type_reads_back),
        cmocka_unit_test(gguf_tensors_read_back_at_their_alignment),
        cmocka_unit_test(gguf_load_as_decodes_and_converts),
        cmocka_unit_test(gguf_every_malformed_file_is_a_format_error),
        cmocka_unit_test(gguf_every_truncation_is_rejected),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
