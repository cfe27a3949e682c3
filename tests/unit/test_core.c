/* Statuses, dtypes and promotion, every class of bad input, op semantics
 * at the edges, casts, creation and the generator. */
#include <math.h>
#include <stdlib.h>
#include <pthread.h>

#include <tensorframe/numerics.h>

#include "helpers.h"
#include "mybackend.h"

static void test_status_names(void **state) {
    (void)state;
    assert_int_equal(TF_OK, 0);
    assert_string_equal(tf_status_name(TF_ERR_SHAPE), "TF_ERR_SHAPE");
    assert_string_equal(tf_status_string(TF_ERR_OUT_OF_MEMORY), "out of memory");
    assert_string_equal(tf_status_name((tf_status)-999), "TF_UNKNOWN_STATUS");
    assert_true(TF_ERR_INVALID_ARGUMENT < 0 && TF_ERR_ALREADY_EXISTS < 0);
}

static void test_dtypes_and_promotion(void **state) {
    (void)state;
    assert_string_equal(tf_dtype_name(TF_BF16), "bf16");
    assert_int_equal(tf_dtype_size(TF_F16), 2);
    assert_int_equal(tf_dtype_size((tf_dtype)99), 0);
    assert_true(tf_dtype_is_float(TF_BF16) && !tf_dtype_is_float(TF_I8));
    assert_true(tf_dtype_is_integer(TF_U8) && !tf_dtype_is_integer(TF_BOOL));
    static const struct { tf_dtype a, b, want; } table[] = {
        {TF_F32, TF_I64, TF_F32}, {TF_U8, TF_I8, TF_I32},   {TF_F16, TF_BF16, TF_F32}, {TF_BOOL, TF_U8, TF_U8},
        {TF_I32, TF_I64, TF_I64}, {TF_F64, TF_F16, TF_F64}, {TF_BOOL, TF_BOOL, TF_BOOL}, {TF_I8, TF_BF16, TF_BF16},
        {TF_U8, TF_I64, TF_I64},  {TF_BOOL, TF_F16, TF_F16},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        tf_dtype got;
        OK(tf_promote_types(table[i].a, table[i].b, &got));
        assert_int_equal(got, table[i].want);
        OK(tf_promote_types(table[i].b, table[i].a, &got));
        assert_int_equal(got, table[i].want);
    }
    tf_dtype got;
    FAILS_WITH(TF_ERR_DTYPE, "invalid dtype", tf_promote_types((tf_dtype)42, TF_F32, &got));
}

static void test_null_arguments(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t shape[1] = {3};
    float v[3] = {1, 2, 3};
    tf_tensor *a = tensor_f32(cpu, 1, shape, v), *out = (tf_tensor *)0x1;
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_add", tf_add(NULL, a, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_add(a, a, NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_matmul", tf_matmul(a, NULL, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_sum", tf_sum(NULL, 0, false, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_device_get", tf_device_get(NULL, &out == NULL ? NULL : (tf_device **)&out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "device is NULL", tf_zeros(NULL, TF_F32, 1, shape, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "shape is NULL", tf_zeros(cpu, TF_F32, 2, NULL, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "data is NULL", tf_tensor_from_data(cpu, TF_F32, 1, shape, NULL, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_tensor_read", tf_tensor_read(a, NULL, 12));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_reshape", tf_reshape(NULL, 1, shape, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_tensor_to", tf_tensor_to(a, NULL, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_device_synchronize", tf_device_synchronize(NULL));
    tf_tensor_release(NULL);                  /* a no-op */
    expect_f32(a, v, 3);                      /* untouched */
    tf_tensor_release(a);
}

static void test_unknown_device(void **state) {
    (void)state;
    tf_device *d = (tf_device *)0x1;
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "no device 'nosuch:0' (devices present: cpu", tf_device_get("nosuch:0", &d));
    assert_null(d);
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "cpu:1", tf_device_get("cpu:1", &d));
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "cpu:x", tf_device_get("cpu:x", &d));
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "cpu:-1", tf_device_get("cpu:-1", &d));
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "''", tf_device_get("", &d));
    OK(tf_device_get("cpu:0", &d));
    assert_string_equal(tf_device_name(d), "cpu");
}

static void test_dtype_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t shape[1] = {2};
    tf_tensor *b = NULL, *i = NULL, *out = NULL;
    OK(tf_zeros(cpu, TF_BOOL, 1, shape, &b));
    OK(tf_zeros(cpu, TF_I32, 1, shape, &i));
    FAILS_WITH(TF_ERR_DTYPE, "tf_add: add does not accept dtype bool", tf_add(b, b, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_DTYPE, "mean does not accept dtype i32", tf_mean(i, 0, false, &out));
    FAILS_WITH(TF_ERR_DTYPE, "acos does not accept dtype i32", tf_acos(i, &out));
    FAILS_WITH(TF_ERR_DTYPE, "copysign does not accept dtype bool", tf_copysign(b, b, &out));
    FAILS_WITH(TF_ERR_DTYPE, "bitwise_and does not accept dtype bool", tf_bitwise_and(b, b, &out));
    FAILS_WITH(TF_ERR_DTYPE, "rand_uniform does not accept dtype i32", tf_rand(cpu, TF_I32, 1, shape, 1, &out));
    FAILS_WITH(TF_ERR_DTYPE, "invalid dtype 99", tf_zeros(cpu, (tf_dtype)99, 1, shape, &out));
    FAILS_WITH(TF_ERR_DTYPE, "invalid dtype", tf_cast(i, (tf_dtype)-1, &out));
    FAILS_WITH(TF_ERR_DTYPE, "arange does not accept dtype bool", tf_arange(cpu, TF_BOOL, 0, 2, 1, &out));
    OK(tf_add(b, i, &out));                   /* bool with i32 promotes to i32 */
    assert_int_equal(tf_tensor_dtype(out), TF_I32);
    tf_tensor_release(out);
    tf_tensor_release(b);
    tf_tensor_release(i);
}

static void test_shape_errors_leave_inputs_intact(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s45[2] = {4, 5}, s233[3] = {2, 3, 3}, s334[3] = {3, 3, 4};
    float v6[6] = {1, 2, 3, 4, 5, 6}, v4[4] = {1, 2, 3, 4}, v20[20] = {0};
    tf_tensor *a = tensor_f32(cpu, 2, s23, v6), *b = tensor_f32(cpu, 1, s4, v4), *c = tensor_f32(cpu, 2, s45, v20);
    tf_tensor *out = NULL, *d = NULL, *e = NULL, *scalar = NULL;
    FAILS_WITH(TF_ERR_SHAPE, "tf_add: shapes [2,3] and [4] do not broadcast", tf_add(a, b, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_SHAPE, "inner dimensions differ: 3 and 4 (shapes [2,3] and [4,5])", tf_matmul(a, c, &out));
    OK(tf_zeros(cpu, TF_F32, 3, s233, &d));
    OK(tf_zeros(cpu, TF_F32, 3, s334, &e));
    FAILS_WITH(TF_ERR_SHAPE, "batch dimensions of [2,3,3] and [3,3,4] do not broadcast", tf_matmul(d, e, &out));
    OK(tf_zeros(cpu, TF_F32, 0, NULL, &scalar));
    FAILS_WITH(TF_ERR_SHAPE, "at least 1 dimension", tf_matmul(scalar, a, &out));
    int64_t bad[2] = {4, 4};
    FAILS_WITH(TF_ERR_SHAPE, "cannot reshape [2,3] (6 elements) to [4,4]", tf_reshape(a, 2, bad, &out));
    FAILS_WITH(TF_ERR_SHAPE, "cannot broadcast [2,3] to [4,4]", tf_expand(a, 2, bad, &out));
    expect_f32(a, v6, 6);
    expect_f32(b, v4, 4);
    tf_tensor *all[] = {a, b, c, d, e, scalar};
    for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
}

static void test_axis_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s23[2] = {2, 3};
    tf_tensor *a = NULL, *out = NULL;
    OK(tf_ones(cpu, TF_F32, 2, s23, &a));
    FAILS_WITH(TF_ERR_AXIS, "tf_sum: axis 2 out of range for a 2-d tensor", tf_sum(a, 2, false, &out));
    FAILS_WITH(TF_ERR_AXIS, "axis -3 out of range", tf_mean(a, -3, true, &out));
    FAILS_WITH(TF_ERR_AXIS, "tf_transpose: axis 5", tf_transpose(a, 0, 5, &out));
    int dup[2] = {1, 1}, bad[2] = {0, 2};
    FAILS_WITH(TF_ERR_AXIS, "appears twice", tf_permute(a, dup, &out));
    FAILS_WITH(TF_ERR_AXIS, "axis 2 out of range", tf_permute(a, bad, &out));
    FAILS_WITH(TF_ERR_AXIS, "tf_slice: axis -4", tf_slice(a, -4, 0, 1, 1, &out));
    FAILS_WITH(TF_ERR_SHAPE, "axis 0 has extent 2, not 1", tf_squeeze(a, 0, &out));
    FAILS_WITH(TF_ERR_AXIS, "tf_unsqueeze: axis 4", tf_unsqueeze(a, 4, &out));
    assert_null(out);
    OK(tf_sum(a, -1, false, &out));           /* negative axes count from the end */
    float want[2] = {3, 3};
    expect_f32(out, want, 2);
    tf_tensor_release(out);
    tf_tensor_release(a);
}

static void test_size_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_tensor *out = NULL, *a = NULL;
    int64_t neg[2] = {3, -1}, huge[3] = {1ll << 40, 1ll << 40, 1ll << 40}, nine[TF_MAX_DIMS + 1];
    for (int i = 0; i <= TF_MAX_DIMS; i++) nine[i] = 1;
    FAILS_WITH(TF_ERR_SIZE, "extent -1 of axis 1 is negative", tf_zeros(cpu, TF_F32, 2, neg, &out));
    FAILS_WITH(TF_ERR_SIZE, "overflows", tf_zeros(cpu, TF_F32, 3, huge, &out));
    FAILS_WITH(TF_ERR_TOO_MANY_DIMS, "33 dimensions, at most 32", tf_zeros(cpu, TF_F32, TF_MAX_DIMS + 1, nine, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "ndim -1 is negative", tf_zeros(cpu, TF_F32, -1, nine, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "step != 0", tf_arange(cpu, TF_F32, 0, 1, 0, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "finite", tf_arange(cpu, TF_F32, 0, INFINITY, 1, &out));
    int64_t s8[TF_MAX_DIMS];
    for (int i = 0; i < TF_MAX_DIMS; i++) s8[i] = 1;
    OK(tf_zeros(cpu, TF_F32, TF_MAX_DIMS, s8, &a));
    FAILS_WITH(TF_ERR_TOO_MANY_DIMS, "already has 32", tf_unsqueeze(a, 0, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "step 0 must be >= 1", tf_slice(a, 0, 0, 1, 0, &out));
    tf_tensor *scalar = NULL;
    OK(tf_zeros(cpu, TF_F32, 0, NULL, &scalar));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_expand: ndim -1 is negative", tf_expand(scalar, -1, s8, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_reshape: ndim -2", tf_reshape(scalar, -2, s8, &out));
    tf_tensor_release(scalar);
    int64_t two_infer[2] = {-1, -1};
    FAILS_WITH(TF_ERR_SIZE, "extent -1 is invalid", tf_reshape(a, 2, two_infer, &out));
    assert_null(out);
    tf_tensor_release(a);
}

static void test_buffer_too_small_and_out_of_memory(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s[1] = {4}, big[1] = {1ll << 42};
    float v[4] = {1, 2, 3, 4}, dst[4] = {9, 9, 9, 9};
    tf_tensor *a = tensor_f32(cpu, 1, s, v), *out = NULL;
    FAILS_WITH(TF_ERR_BUFFER_TOO_SMALL, "tensor needs 16 bytes, dst has 12", tf_tensor_read(a, dst, 12));
    assert_true(dst[0] == 9 && dst[3] == 9);  /* nothing half-written */
    FAILS_WITH(TF_ERR_OUT_OF_MEMORY, "cannot allocate 17592186044416 bytes on cpu", tf_empty(cpu, TF_F32, 1, big, &out));
    assert_null(out);
    /* The example backend's own budget (1 GiB) is enforced the same way. */
    tf_status rs = mybackend_register();
    assert_true(rs == TF_OK || rs == TF_ERR_ALREADY_EXISTS);
    tf_device *my;
    OK(tf_device_get("mybackend", &my));
    int64_t two_gib[1] = {1ll << 29};
    FAILS_WITH(TF_ERR_OUT_OF_MEMORY, "exceed the free budget", tf_empty(my, TF_F32, 1, two_gib, &out));
    tf_tensor_release(a);
}

static tf_tensor *tensor_of(tf_dtype dt, int64_t n, const void *data) {
    tf_tensor *t = NULL;
    OK(tf_tensor_from_data(cpu_device(), dt, 1, &n, data, &t));
    return t;
}

/* sort and searchsorted refuse what they cannot take and leave *out NULL;
 * searchsorted promotes its inputs first; a long line sorts (the CPU's
 * merge passes) to the same order as a sort of the same values by qsort. */
static void test_sort_and_search(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s23[2] = {2, 3};
    float v6[6] = {3, 1, 2, 0, -1, 5};
    tf_tensor *m = tensor_f32(cpu, 2, s23, v6), *out = (tf_tensor *)0x1, *q = NULL;
    FAILS_WITH(TF_ERR_AXIS, "tf_sort: axis 2 out of range", tf_sort(m, 2, false, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_AXIS, "takes one axis", tf_argsort(m, TF_ALL_AXES, false, &out));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_sort", tf_sort(NULL, 0, false, &out));
    FAILS_WITH(TF_ERR_SHAPE, "tf_searchsorted: the sorted input must be 1-d (got 2-d)", tf_searchsorted(m, m, false, &out));
    float v32[32] = {0};
    int64_t n32 = 32;
    tf_tensor *t32 = tensor_f32(cpu, 1, &n32, v32);
    OK(tf_cast(t32, TF_Q8_0, &q));
    tf_tensor_release(t32);
    FAILS_WITH(TF_ERR_DTYPE, "sort does not accept dtype q8_0", tf_sort(q, 0, false, &out));
    tf_tensor_release(q);
    OK(tf_sort(m, -1, true, &out));
    float want[6] = {3, 2, 1, 5, 0, -1};
    expect_f32(out, want, 6);
    tf_tensor_release(out);

    int8_t sorted[4] = {-3, 0, 0, 7};
    float probe[4] = {-0.5f, 0.0f, 6.5f, 100.0f};
    int64_t four = 4, pos[4];
    tf_tensor *st = tensor_of(TF_I8, 4, sorted), *pt = tensor_f32(cpu, 1, &four, probe);
    OK(tf_searchsorted(st, pt, false, &out));      /* compared as f32: -0.5 goes after -3, not at 0 */
    assert_int_equal(tf_tensor_dtype(out), TF_I64);
    OK(tf_tensor_read(out, pos, sizeof pos));
    assert_int_equal(pos[0], 1);
    assert_int_equal(pos[1], 1);
    assert_int_equal(pos[2], 3);
    assert_int_equal(pos[3], 4);
    tf_tensor_release(out);
    OK(tf_searchsorted(st, pt, true, &out));
    OK(tf_tensor_read(out, pos, sizeof pos));
    assert_int_equal(pos[1], 3);
    tf_tensor_release(out);
    tf_tensor_release(st);
    tf_tensor_release(pt);
    tf_tensor_release(m);

    enum { N = 100003 };                          /* many merge passes, a partial last run */
    int32_t *v = malloc(sizeof(int32_t) * N), *got = malloc(sizeof(int32_t) * N);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[i] = (int32_t)(x % 2000003) - 1000000;
    }
    tf_tensor *big = tensor_of(TF_I32, N, v);
    OK(tf_sort(big, 0, false, &out));
    OK(tf_tensor_read(out, got, sizeof(int32_t) * N));
    for (int i = 1; i < N; i++)
        if (got[i - 1] > got[i]) fail_msg("element %d: %d after %d", i, got[i], got[i - 1]);
    int64_t sum_in = 0, sum_out = 0;
    for (int i = 0; i < N; i++) sum_in += v[i], sum_out += got[i];
    assert_true(sum_in == sum_out);
    tf_tensor_release(out);
    tf_tensor_release(big);
    free(v);
    free(got);
}

/* The LAPACK-backed linear algebra from C: values of small known cases,
 * the input's dtype kept (f16 through float64 and back), refusals that
 * leave the outputs NULL. */
static void test_linalg(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s22[2] = {2, 2}, s23[2] = {2, 3};
    float spd[4] = {4, 2, 2, 3}, sing[4] = {1, 2, 2, 4}, v6[6] = {1, 2, 3, 4, 5, 6};
    tf_tensor *a = tensor_f32(cpu, 2, s22, spd), *z = tensor_f32(cpu, 2, s22, sing), *w = tensor_f32(cpu, 2, s23, v6);
    tf_tensor *out = NULL, *o2 = (tf_tensor *)0x1, *o3 = NULL, *h = NULL;
    OK(tf_linalg_cholesky(a, false, &out));            /* [[2, 0], [1, sqrt 2]] */
    float want_l[4] = {2, 0, 1, 1.41421356f};
    expect_f32(out, want_l, 4);
    tf_tensor_release(out);
    OK(tf_linalg_det(a, &out));
    float det = 0;
    OK(tf_tensor_read(out, &det, sizeof det));
    assert_true(fabsf(det - 8.0f) < 1e-5f);
    tf_tensor_release(out);
    OK(tf_linalg_solve(a, a, &out));                    /* A^-1 A = I */
    float eye[4] = {1, 0, 0, 1}, got[4];
    OK(tf_tensor_read(out, got, sizeof got));
    for (int i = 0; i < 4; i++) assert_true(fabsf(got[i] - eye[i]) < 1e-6f);
    tf_tensor_release(out);
    OK(tf_cast(a, TF_F16, &h));
    OK(tf_linalg_inv(h, &out));
    assert_int_equal(tf_tensor_dtype(out), TF_F16);
    tf_tensor_release(out);
    OK(tf_linalg_svd(w, false, &out, &o2, &o3));        /* U 2x2, S 2, Vh 2x3 */
    assert_int_equal(tf_tensor_shape(out)[1], 2);
    assert_int_equal(tf_tensor_ndim(o2), 1);
    assert_int_equal(tf_tensor_shape(o3)[1], 3);
    tf_tensor_release(out);
    tf_tensor_release(o2);
    tf_tensor_release(o3);
    OK(tf_linalg_slogdet(z, &out, &o2));                /* singular: sign 0, log|det| -inf */
    float sign, logabs;
    OK(tf_tensor_read(out, &sign, sizeof sign));
    OK(tf_tensor_read(o2, &logabs, sizeof logabs));
    assert_true(sign == 0 && isinf(logabs) && logabs < 0);
    tf_tensor_release(out);
    tf_tensor_release(o2);
    out = o2 = (tf_tensor *)0x1;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_linalg_inv: matrix 0 is singular", tf_linalg_inv(z, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not positive definite", tf_linalg_cholesky(z, false, &out));
    FAILS_WITH(TF_ERR_SHAPE, "must be square (got 2 x 3)", tf_linalg_slogdet(w, &out, &o2));
    assert_null(out);
    assert_null(o2);
    tf_tensor *w3 = NULL;
    OK(tf_unsqueeze(w, 0, &w3));                        /* (1, 2, 3) beside (2, 2): no batch of a */
    FAILS_WITH(TF_ERR_SHAPE, "broadcast them first", tf_linalg_solve(a, w3, &out));
    tf_tensor_release(w3);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "u and vh together", tf_linalg_svd(w, false, &out, &o2, NULL));
    tf_tensor *ints = NULL;
    OK(tf_cast(a, TF_I32, &ints));
    FAILS_WITH(TF_ERR_DTYPE, "takes floating-point or complex matrices (got i32)", tf_linalg_det(ints, &out));
    tf_tensor_release(ints);
    tf_tensor_release(h);
    tf_tensor_release(a);
    tf_tensor_release(z);
    tf_tensor_release(w);
}

/* tf_view_dtype: the same bytes as another dtype of that size, shared both
 * ways; other sizes, bool and quantized dtypes refused. */
static void test_view_dtype(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t n = 2;
    float v[2] = {1.0f, -2.0f};
    tf_tensor *f = tensor_f32(cpu, 1, &n, v), *i = NULL, *out = (tf_tensor *)0x1, *one = NULL;
    OK(tf_view_dtype(f, TF_I32, &i));
    int32_t bits[2];
    OK(tf_tensor_read(i, bits, sizeof bits));
    assert_int_equal(bits[0], 0x3f800000);
    assert_int_equal((uint32_t)bits[1], 0xc0000000u);
    OK(tf_scalar(cpu, TF_I32, 1, &one));
    OK(tf_binary_into(i, TF_OP_ADD, i, one));            /* one ulp up, seen through the f32 tensor */
    float back[2];
    OK(tf_tensor_read(f, back, sizeof back));
    assert_true(back[0] == nextafterf(1.0f, 2.0f) && back[1] == nextafterf(-2.0f, -3.0f));
    FAILS_WITH(TF_ERR_DTYPE, "f32 cannot be read as f64", tf_view_dtype(f, TF_F64, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_DTYPE, "cannot be read as bool", tf_view_dtype(f, TF_BOOL, &out));
    FAILS_WITH(TF_ERR_DTYPE, "invalid dtype", tf_view_dtype(f, (tf_dtype)99, &out));
    tf_tensor_release(one);
    tf_tensor_release(i);
    tf_tensor_release(f);
}

/* The complex dtypes: promotion, the refused ops, the views of their
 * parts, and Annex G's special values through the kernels. */
static void test_complex_rules(void **state) {
    (void)state;
    tf_dtype d;
    static const struct { tf_dtype a, b, want; } promotions[] = {
        {TF_C64, TF_F32, TF_C64},   {TF_C64, TF_F64, TF_C128}, {TF_C64, TF_C128, TF_C128}, {TF_I64, TF_C64, TF_C64},
        {TF_BOOL, TF_C128, TF_C128}, {TF_F16, TF_C64, TF_C64}, {TF_C64, TF_C64, TF_C64},
    };
    for (size_t i = 0; i < sizeof promotions / sizeof *promotions; i++) {
        OK(tf_promote_types(promotions[i].a, promotions[i].b, &d));
        assert_int_equal(d, promotions[i].want);
    }
    FAILS_WITH(TF_ERR_DTYPE, "does not promote", tf_promote_types(TF_C64, TF_Q8_0, &d));
    assert_int_equal(tf_dtype_to_real(TF_C64), TF_F32);
    assert_int_equal(tf_dtype_to_real(TF_C128), TF_F64);
    assert_int_equal(tf_dtype_to_complex(TF_F64), TF_C128);
    assert_int_equal(tf_dtype_to_complex(TF_I8), TF_C64);
    assert_int_equal(tf_dtype_to_complex(TF_BOOL), TF_BOOL);
    assert_int_equal(tf_dtype_to_real((tf_dtype)99), TF_DTYPE_COUNT);
    assert_true(tf_dtype_is_complex(TF_C64) && !tf_dtype_is_float(TF_C64) && !tf_dtype_is_integer(TF_C128));
    assert_int_equal(tf_dtype_size(TF_C128), 16);
    assert_string_equal(tf_dtype_name(TF_C64), "c64");
    assert_true(tf_op_accepts(TF_OP_ADD, TF_C64) && !tf_op_accepts(TF_OP_MAXIMUM, TF_C64) &&
                !tf_op_accepts(TF_OP_SORT, TF_C128) && tf_op_accepts(TF_OP_CONJ, TF_C64) &&
                !tf_op_accepts(TF_OP_CONJ, TF_F32) && !tf_op_accepts((tf_op_kind)9999, TF_F32));

    tf_device *cpu = cpu_device();
    /* Annex G's values: exp(-inf + i) = +0 (times cis 1), log(-0 + 0i) = -inf + i pi, sqrt(-4) = 2i,
     * and a product of infinities stays infinite, not NaN */
    double zin[8] = {-INFINITY, 1.0, -0.0, 0.0, -4.0, 0.0, INFINITY, INFINITY};
    int64_t n = 4;
    tf_tensor *z = NULL, *o = NULL, *out = (tf_tensor *)0x1, *f = NULL;
    OK(tf_empty(cpu, TF_C128, 1, &n, &z));
    OK(tf_tensor_write(z, zin, sizeof zin));
    double r[8];
    OK(tf_exp(z, &o));
    OK(tf_tensor_read(o, r, sizeof r));
    assert_true(r[0] == 0.0 && r[1] == 0.0 && !signbit(r[0]));
    tf_tensor_release(o);
    OK(tf_log(z, &o));
    OK(tf_tensor_read(o, r, sizeof r));
    assert_true(r[2] == -INFINITY && fabs(r[3] - 3.14159265358979323846) < 1e-15);
    tf_tensor_release(o);
    OK(tf_sqrt(z, &o));
    OK(tf_tensor_read(o, r, sizeof r));
    assert_true(r[4] == 0.0 && r[5] == 2.0);
    tf_tensor_release(o);
    OK(tf_mul(z, z, &o));
    OK(tf_tensor_read(o, r, sizeof r));
    assert_true(isinf(r[6]) || isinf(r[7]));
    tf_tensor_release(o);

    /* refused: ordering ops and float-only math */
    FAILS_WITH(TF_ERR_DTYPE, "maximum does not accept dtype c128", tf_maximum(z, z, &out));
    FAILS_WITH(TF_ERR_DTYPE, "lt does not accept dtype c128", tf_lt(z, z, &out));
    FAILS_WITH(TF_ERR_DTYPE, "sort does not accept dtype c128", tf_sort(z, 0, false, &out));
    FAILS_WITH(TF_ERR_DTYPE, "relu does not accept dtype c128", tf_relu(z, &out));
    FAILS_WITH(TF_ERR_DTYPE, "does not accept dtype c128", tf_max(z, 0, false, &out));
    assert_null(out);

    /* the parts as a view: writes through show in the complex tensor */
    tf_tensor *pairs = NULL, *back = NULL, *col = NULL;
    OK(tf_view_as_real(z, &pairs));
    assert_int_equal(tf_tensor_dtype(pairs), TF_F64);
    assert_int_equal(tf_tensor_ndim(pairs), 2);
    assert_int_equal(tf_tensor_shape(pairs)[1], 2);
    OK(tf_slice(pairs, 1, 1, 2, 1, &col));                 /* the imaginary parts */
    OK(tf_scalar(cpu, TF_F64, 7.0, &f));
    OK(tf_copy_into(col, f));
    OK(tf_tensor_read(z, r, sizeof r));
    assert_true(r[1] == 7.0 && r[3] == 7.0 && r[0] == -INFINITY);
    OK(tf_view_as_complex(pairs, &back));
    assert_int_equal(tf_tensor_dtype(back), TF_C128);
    FAILS_WITH(TF_ERR_SHAPE, "extent 2 and stride 1", tf_view_as_complex(col, &out));
    FAILS_WITH(TF_ERR_DTYPE, "takes a complex tensor", tf_view_as_real(f, &out));
    FAILS_WITH(TF_ERR_DTYPE, "takes an f32 or f64", tf_view_as_complex(z, &out));
    assert_null(out);

    /* conj/real/imag of a real tensor; tf_complex refuses complex parts */
    tf_tensor *same = NULL, *zero = NULL;
    OK(tf_real(f, &same));
    assert_ptr_equal(same, f);
    tf_tensor_release(same);
    OK(tf_conj(f, &same));
    assert_ptr_equal(same, f);
    tf_tensor_release(same);
    OK(tf_imag(f, &zero));
    double zv = 1;
    OK(tf_tensor_read(zero, &zv, sizeof zv));
    assert_true(zv == 0.0);
    FAILS_WITH(TF_ERR_DTYPE, "takes real numeric parts", tf_complex(z, f, &out));
    assert_null(out);
    tf_tensor_release(zero);
    tf_tensor_release(back);
    tf_tensor_release(col);
    tf_tensor_release(pairs);
    tf_tensor_release(f);
    tf_tensor_release(z);
}

/* The DFT by its definition in long double: x [rows, cols] complex,
 * transformed along axis 1 (axis 0 when along_rows), forward or inverse,
 * unscaled. */
static void naive_dft(const double *x, int64_t rows, int64_t cols, bool along_rows, bool inverse, long double *out) {
    int64_t n = along_rows ? rows : cols;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            long double re = 0, im = 0;
            int64_t k = along_rows ? r : c;
            for (int64_t j = 0; j < n; j++) {
                int64_t at = along_rows ? j * cols + c : r * cols + j;
                long double ang = (inverse ? 2 : -2) * 3.14159265358979323846264338327950288L * (long double)(k * j % n) / n;
                re += x[2 * at] * cosl(ang) - x[2 * at + 1] * sinl(ang);
                im += x[2 * at] * sinl(ang) + x[2 * at + 1] * cosl(ang);
            }
            out[2 * (r * cols + c)] = re;
            out[2 * (r * cols + c) + 1] = im;
        }
}

/* tf_fft against the definition on fresh random values (both directions,
 * each axis, every scaling, on the CPU and a plugin device), tf_rfft's half
 * spectrum, tf_irfft's round trip, and the refusals. */
static void test_fft(void **state) {
    (void)state;
    enum { R = 5, C = 12 };
    double x[2 * R * C], got[2 * R * C];
    long double want[2 * R * C];
    srand(7);
    for (int i = 0; i < 2 * R * C; i++) x[i] = rand() / (double)RAND_MAX * 2 - 1;
    tf_device *devs[2] = {cpu_device(), NULL};
    tf_status rs = mybackend_register();
    assert_true(rs == TF_OK || rs == TF_ERR_ALREADY_EXISTS);
    OK(tf_device_get("mybackend", &devs[1]));
    int64_t shape[2] = {R, C};
    for (int d = 0; d < 2; d++)
        for (int axis = 0; axis < 2; axis++)
            for (int inverse = 0; inverse < 2; inverse++)
                for (int norm = 0; norm < 3; norm++) {
                    tf_tensor *t = NULL, *f = NULL;
                    OK(tf_tensor_from_data(devs[d], TF_C128, 2, shape, x, &t));
                    int ax = axis ? -1 : 0;
                    OK(tf_fft(t, 1, &ax, inverse, (tf_fft_norm)norm, &f));
                    assert_ptr_equal(tf_tensor_device(f), devs[d]);
                    assert_int_equal(tf_tensor_dtype(f), TF_C128);
                    OK(tf_tensor_read(f, got, sizeof got));
                    naive_dft(x, R, C, axis == 0, inverse, want);
                    long double n = axis ? C : R, k = norm == TF_FFT_ORTHO ? 1 / sqrtl(n)
                                                    : (norm == TF_FFT_BACKWARD) == (inverse != 0) ? 1 / n : 1;
                    for (int i = 0; i < 2 * R * C; i++)
                        if (fabsl(got[i] - want[i] * k) > 1e-13) fail_msg("fft axis %d inverse %d norm %d: element %d %g vs %Lg",
                                                                          axis, inverse, norm, i, got[i], want[i] * k);
                    tf_tensor_release(f);
                    tf_tensor_release(t);
                }
    /* rfft of the real parts: the first C/2+1 frequencies of the full transform, in c64 from f32 */
    float xr[R * C];
    for (int i = 0; i < R * C; i++) xr[i] = (float)x[2 * i];
    double xc[2 * R * C];
    for (int i = 0; i < R * C; i++) xc[2 * i] = xr[i], xc[2 * i + 1] = 0;
    naive_dft(xc, R, C, false, false, want);
    tf_tensor *r = NULL, *h = NULL, *back = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, shape, xr, &r));
    int last = 1;
    OK(tf_rfft(r, 1, &last, TF_FFT_BACKWARD, &h));
    assert_int_equal(tf_tensor_dtype(h), TF_C64);
    assert_int_equal(tf_tensor_shape(h)[1], C / 2 + 1);
    float hv[2 * R * (C / 2 + 1)];
    OK(tf_tensor_read(h, hv, sizeof hv));
    for (int rr = 0; rr < R; rr++)
        for (int c = 0; c < C / 2 + 1; c++)
            for (int p = 0; p < 2; p++)
                assert_true(fabsl(hv[2 * (rr * (C / 2 + 1) + c) + p] - want[2 * (rr * C + c) + p]) < 1e-5);
    OK(tf_irfft(h, 1, &last, C, TF_FFT_BACKWARD, &back));
    assert_int_equal(tf_tensor_dtype(back), TF_F32);
    float bv[R * C];
    OK(tf_tensor_read(back, bv, sizeof bv));
    for (int i = 0; i < R * C; i++) assert_true(fabsf(bv[i] - xr[i]) < 1e-5f);
    /* refusals leave *out NULL */
    tf_tensor *out = (tf_tensor *)0x1, *ints = NULL;
    int bad = 2, twice[2] = {1, -1};
    FAILS_WITH(TF_ERR_AXIS, "axis 2 out of range", tf_fft(r, 1, &bad, false, TF_FFT_BACKWARD, &out));
    assert_null(out);
    FAILS_WITH(TF_ERR_AXIS, "given twice", tf_fft(r, 2, twice, false, TF_FFT_BACKWARD, &out));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "norm 7", tf_fft(r, 1, &last, false, (tf_fft_norm)7, &out));
    FAILS_WITH(TF_ERR_SHAPE, "needs 8 input points", tf_irfft(h, 1, &last, 15, TF_FFT_BACKWARD, &out));
    FAILS_WITH(TF_ERR_DTYPE, "takes real floating-point", tf_rfft(h, 1, &last, TF_FFT_BACKWARD, &out));
    int32_t iv[3] = {1, 2, 3};
    int64_t three = 3;
    OK(tf_tensor_from_data(cpu_device(), TF_I32, 1, &three, iv, &ints));
    int zero = 0;
    FAILS_WITH(TF_ERR_DTYPE, "takes floating-point or complex", tf_fft(ints, 1, &zero, false, TF_FFT_BACKWARD, &out));
    tf_tensor *empty = NULL;
    int64_t none[2] = {3, 0};
    OK(tf_zeros(cpu_device(), TF_C64, 2, none, &empty));
    FAILS_WITH(TF_ERR_SHAPE, "a transform of 0 points", tf_fft(empty, 1, &last, false, TF_FFT_BACKWARD, &out));
    assert_null(out);
    tf_tensor_release(empty);
    tf_tensor_release(ints);
    tf_tensor_release(back);
    tf_tensor_release(h);
    tf_tensor_release(r);
}

static void test_op_semantics_at_the_edges(void **state) {
    (void)state;
    int8_t i8a[2] = {100, -100}, i8b[2] = {100, -100}, i8r[2];
    tf_tensor *a = tensor_of(TF_I8, 2, i8a), *b = tensor_of(TF_I8, 2, i8b), *o = NULL;
    OK(tf_add(a, b, &o));                      /* integer arithmetic wraps */
    OK(tf_tensor_read(o, i8r, sizeof i8r));
    assert_int_equal(i8r[0], -56);
    assert_int_equal(i8r[1], 56);
    tf_tensor_release(o);
    OK(tf_div(a, b, &o));                      /* integer division gives f32 */
    assert_int_equal(tf_tensor_dtype(o), TF_F32);
    tf_tensor_release(o);
    tf_tensor_release(a);
    tf_tensor_release(b);

    int32_t base[4] = {2, 1, -1, 3}, ex[4] = {-1, -3, -3, 3}, pr[4];
    a = tensor_of(TF_I32, 4, base);
    b = tensor_of(TF_I32, 4, ex);
    OK(tf_pow(a, b, &o));
    OK(tf_tensor_read(o, pr, sizeof pr));
    assert_true(pr[0] == 0 && pr[1] == 1 && pr[2] == -1 && pr[3] == 27);
    tf_tensor_release(o);
    tf_tensor_release(a);
    tf_tensor_release(b);

    float fa[3] = {NAN, 1, -2}, fb[3] = {0, NAN, -3};
    a = tensor_of(TF_F32, 3, fa);
    b = tensor_of(TF_F32, 3, fb);
    OK(tf_maximum(a, b, &o));                  /* NaN propagates */
    float want_max[3] = {NAN, NAN, -2};
    expect_f32(o, want_max, 3);
    tf_tensor_release(o);
    tf_tensor_release(a);
    tf_tensor_release(b);

    uint8_t flags[5] = {1, 0, 1, 1, 0};
    int64_t count;
    a = tensor_of(TF_BOOL, 5, flags);
    OK(tf_sum(a, 0, false, &o));               /* sum of bool counts, as i64 */
    assert_int_equal(tf_tensor_dtype(o), TF_I64);
    assert_int_equal(tf_tensor_ndim(o), 0);
    OK(tf_tensor_read(o, &count, sizeof count));
    assert_int_equal(count, 3);
    tf_tensor_release(o);
    tf_tensor_release(a);

    int64_t empty[2] = {0, 3};
    tf_tensor *z = NULL;
    OK(tf_zeros(cpu_device(), TF_F32, 2, empty, &z));
    OK(tf_mean(z, 0, false, &o));              /* mean of nothing is NaN, sum is 0 */
    float nan3[3] = {NAN, NAN, NAN}, zero3[3] = {0, 0, 0};
    expect_f32(o, nan3, 3);
    tf_tensor_release(o);
    OK(tf_sum(z, 0, true, &o));
    int64_t s13[2] = {1, 3};
    expect_shape(o, 2, s13);
    expect_f32(o, zero3, 3);
    tf_tensor_release(o);
    tf_tensor_release(z);
}

static void test_unary_edges_and_scalars(void **state) {
    (void)state;
    float v[6] = {NAN, -2.5f, -0.5f, 0.5f, 2.5f, 30.0f};
    tf_tensor *x = tensor_of(TF_F32, 6, v), *o = NULL;
    OK(tf_relu(x, &o));                        /* NaN propagates */
    float relu[6] = {NAN, 0, 0, 0.5f, 2.5f, 30};
    expect_f32(o, relu, 6);
    tf_tensor_release(o);
    OK(tf_clamp(x, -1, NAN, &o));              /* a NaN bound means none */
    float clamp[6] = {NAN, -1, -0.5f, 0.5f, 2.5f, 30};
    expect_f32(o, clamp, 6);
    tf_tensor_release(o);
    OK(tf_sign(x, &o));                        /* PyTorch: sign(NaN) is 0 */
    float sign[6] = {0, -1, -1, 1, 1, 1};
    expect_f32(o, sign, 6);
    tf_tensor_release(o);
    OK(tf_round(x, &o));                       /* half to even */
    float rounded[6] = {NAN, -2, -0.0f, 0, 2, 30};
    expect_f32(o, rounded, 6);
    tf_tensor_release(o);
    OK(tf_softplus(x, &o));                    /* above 20: x itself */
    float sp[6];
    OK(tf_tensor_read(o, sp, sizeof sp));
    assert_true(sp[5] == 30.0f && fabsf(sp[3] - 0.974077f) < 1e-5f);
    tf_tensor_release(o);
    tf_tensor *half = NULL;
    OK(tf_scalar(cpu_device(), TF_F32, 0.5, &half));
    assert_int_equal(tf_tensor_ndim(half), 0);
    OK(tf_mul(x, half, &o));                   /* scalars broadcast */
    float scaled[6] = {NAN, -1.25f, -0.25f, 0.25f, 1.25f, 15};
    expect_f32(o, scaled, 6);
    tf_tensor_release(o);
    int32_t iv[2] = {1, 2};
    tf_tensor *ints = tensor_of(TF_I32, 2, iv);
    FAILS_WITH(TF_ERR_DTYPE, "tf_exp: exp does not accept dtype i32", tf_exp(ints, &o));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_gelu: input tensor is NULL", tf_gelu(NULL, &o));
    assert_null(o);
    tf_tensor_release(ints);
    tf_tensor_release(half);
    tf_tensor_release(x);
}

static void test_comparisons_logic_and_where(void **state) {
    (void)state;
    int32_t iv[4] = {1, 2, 3, 4};
    float fv[4] = {1.0f, 2.5f, NAN, 4.0f};
    tf_tensor *i = tensor_of(TF_I32, 4, iv), *f = tensor_of(TF_F32, 4, fv), *o = NULL;
    uint8_t got[4];
    OK(tf_eq(i, f, &o));                       /* i32 vs f32 compares as f32 */
    assert_int_equal(tf_tensor_dtype(o), TF_BOOL);
    OK(tf_tensor_read(o, got, 4));
    uint8_t want_eq[4] = {1, 0, 0, 1};
    assert_memory_equal(got, want_eq, 4);
    tf_tensor_release(o);
    OK(tf_ne(f, f, &o));                       /* NaN != NaN */
    OK(tf_tensor_read(o, got, 4));
    uint8_t want_ne[4] = {0, 0, 1, 0};
    assert_memory_equal(got, want_ne, 4);
    tf_tensor_release(o);
    OK(tf_logical_and(i, f, &o));              /* truth values: NaN is true */
    OK(tf_tensor_read(o, got, 4));
    uint8_t all_true[4] = {1, 1, 1, 1};
    assert_memory_equal(got, all_true, 4);
    tf_tensor *mask = NULL, *zero = NULL;
    OK(tf_isnan(f, &mask));
    OK(tf_scalar(cpu_device(), TF_F64, 0.0, &zero));
    tf_tensor_release(o);
    OK(tf_where(mask, zero, f, &o));           /* replace NaN with 0: an f64 0-d keeps f32 (PyTorch's rule) */
    assert_int_equal(tf_tensor_dtype(o), TF_F32);
    float dv[4];
    OK(tf_tensor_read(o, dv, sizeof dv));
    assert_true(dv[0] == 1.0f && dv[1] == 2.5f && dv[2] == 0.0f && dv[3] == 4.0f);
    tf_tensor_release(o);
    int64_t s3[1] = {3};
    tf_tensor *three = NULL;
    OK(tf_zeros(cpu_device(), TF_BOOL, 1, s3, &three));
    FAILS_WITH(TF_ERR_SHAPE, "tf_where: shapes [3], [4] and [] do not broadcast", tf_where(three, f, zero, &o));
    assert_null(o);
    tf_tensor *all[] = {i, f, mask, zero, three};
    for (int k = 0; k < 5; k++) tf_tensor_release(all[k]);
}

static void test_reduction_edges(void **state) {
    (void)state;
    float v[5] = {1, NAN, 3, NAN, 3};
    tf_tensor *x = tensor_of(TF_F32, 5, v), *o = NULL;
    float f;
    int64_t i;
    OK(tf_max(x, 0, false, &o));               /* NaN propagates */
    OK(tf_tensor_read(o, &f, sizeof f));
    assert_true(isnan(f));
    tf_tensor_release(o);
    OK(tf_argmin(x, 0, false, &o));            /* the first NaN's position */
    OK(tf_tensor_read(o, &i, sizeof i));
    assert_int_equal(i, 1);
    tf_tensor_release(o);
    tf_tensor_release(x);
    int32_t ties[4] = {2, 7, 7, 1};
    x = tensor_of(TF_I32, 4, ties);
    OK(tf_argmax(x, -1, true, &o));            /* the first of equal maxima */
    assert_int_equal(tf_tensor_ndim(o), 1);
    OK(tf_tensor_read(o, &i, sizeof i));
    assert_int_equal(i, 1);
    tf_tensor_release(o);
    OK(tf_prod(x, 0, false, &o));              /* integers give i64 */
    assert_int_equal(tf_tensor_dtype(o), TF_I64);
    OK(tf_tensor_read(o, &i, sizeof i));
    assert_int_equal(i, 98);
    tf_tensor_release(o);
    tf_tensor_release(x);
    int64_t empty[2] = {0, 3};
    tf_tensor *z = NULL;
    OK(tf_zeros(cpu_device(), TF_F32, 2, empty, &z));
    FAILS_WITH(TF_ERR_SHAPE, "tf_max: cannot reduce an empty axis of [0,3] (max has no identity)", tf_max(z, 0, false, &o));
    assert_null(o);
    OK(tf_max(z, 1, false, &o));               /* nothing to reduce into: an empty result */
    assert_int_equal(tf_tensor_numel(o), 0);
    tf_tensor_release(o);
    OK(tf_logsumexp(z, 0, false, &o));         /* empty: -inf */
    float lse[3];
    OK(tf_tensor_read(o, lse, sizeof lse));
    assert_true(isinf(lse[0]) && lse[0] < 0);
    tf_tensor_release(o);
    tf_tensor_release(z);
    float one[1] = {5}, two[2] = {1, 2};
    tf_tensor *a = tensor_of(TF_F32, 1, one), *b = tensor_of(TF_F32, 2, two);
    OK(tf_var(a, 0, 1, false, &o));            /* N = correction: 0/0 */
    OK(tf_tensor_read(o, &f, sizeof f));
    assert_true(isnan(f));
    tf_tensor_release(o);
    OK(tf_var(b, 0, 2, false, &o));            /* positive over zero: inf */
    OK(tf_tensor_read(o, &f, sizeof f));
    assert_true(isinf(f));
    tf_tensor_release(o);
    OK(tf_std(b, 0, 0, false, &o));            /* population std of {1, 2} */
    OK(tf_tensor_read(o, &f, sizeof f));
    assert_true(fabsf(f - 0.5f) < 1e-7f);
    tf_tensor_release(o);
    OK(tf_cumsum(b, 0, &o));
    float cs[2];
    OK(tf_tensor_read(o, cs, sizeof cs));
    assert_true(cs[0] == 1 && cs[1] == 3);
    tf_tensor_release(o);
    FAILS_WITH(TF_ERR_AXIS, "tf_cumsum: axis 1 out of range for a 1-d tensor", tf_cumsum(b, 1, &o));
    FAILS_WITH(TF_ERR_AXIS, "tf_cumsum: takes one axis, not TF_ALL_AXES", tf_cumsum(b, TF_ALL_AXES, &o));
    tf_tensor_release(a);
    tf_tensor_release(b);
}

static void test_indexing_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s45[2] = {4, 5};
    tf_tensor *w = NULL, *o = NULL;
    OK(tf_arange(cpu, TF_F32, 0, 20, 1, &o));
    OK(tf_reshape(o, 2, s45, &w));
    tf_tensor_release(o);
    o = NULL;
    int64_t good[3] = {3, 0, 3}, bad[3] = {1, 4, 2}, neg[2] = {0, -1};
    tf_tensor *ig = tensor_of(TF_I64, 3, good), *ib = tensor_of(TF_I64, 3, bad), *in = tensor_of(TF_I64, 2, neg);
    OK(tf_index_select(w, 0, ig, &o));
    float want[15] = {15, 16, 17, 18, 19, 0, 1, 2, 3, 4, 15, 16, 17, 18, 19};
    expect_f32(o, want, 15);
    tf_tensor_release(o);
    FAILS_WITH(TF_ERR_INDEX, "tf_index_select: index 4 out of range for axis 0 of extent 4", tf_index_select(w, 0, ib, &o));
    assert_null(o);
    FAILS_WITH(TF_ERR_INDEX, "tf_embedding: id -1 out of range for a table of 4 rows", tf_embedding(w, in, &o));
    assert_null(strstr(tf_last_error(), "tf_index_select"));   /* the caller's name, not the op's */
    FAILS_WITH(TF_ERR_DTYPE, "indices must be i32 or i64, not f32", tf_index_select(w, 0, w, &o));
    FAILS_WITH(TF_ERR_AXIS, "tf_gather: axis 2 out of range", tf_gather(w, 2, ig, &o));
    FAILS_WITH(TF_ERR_SHAPE, "tf_gather: index [3] must have the input's 2 dimensions", tf_gather(w, 0, ig, &o));
    OK(tf_embedding(w, ig, &o));               /* ids [3] -> [3, 5] */
    int64_t s35[2] = {3, 5};
    expect_shape(o, 2, s35);
    tf_tensor_release(o);
    int64_t sizes_bad[2] = {2, 2}, sizes_neg[2] = {5, -1};
    tf_tensor *parts[2] = {(tf_tensor *)0x1, (tf_tensor *)0x1};
    FAILS_WITH(TF_ERR_SHAPE, "tf_split: pieces add up to 4, axis 1 has extent 5", tf_split(w, 1, 2, sizes_bad, parts));
    assert_null(parts[0]);
    FAILS_WITH(TF_ERR_SIZE, "piece 1 has negative size -1", tf_split(w, 1, 2, sizes_neg, parts));
    const tf_tensor *pair[2] = {w, ig};
    FAILS_WITH(TF_ERR_SHAPE, "tf_concat: tensor 1 has shape [3], which does not match [4,5] off axis 0", tf_concat(2, pair, 0, &o));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "needs at least one tensor", tf_concat(0, pair, 0, &o));
    int64_t crop[2] = {-3, -3};
    FAILS_WITH(TF_ERR_SHAPE, "tf_pad: pads -3, -3 leave axis 1 with negative extent", tf_pad(w, 1, crop, 0, &o));
    FAILS_WITH(TF_ERR_SHAPE, "tf_tril: needs at least 2 dimensions", tf_tril(ig, 0, &o));
    int64_t neg_rep[1] = {-2};
    FAILS_WITH(TF_ERR_SIZE, "repetition count -2 is negative", tf_tile(w, 1, neg_rep, &o));
    assert_null(o);
    tf_tensor *all[] = {w, ig, ib, in};
    for (int k = 0; k < 4; k++) tf_tensor_release(all[k]);
}

static void test_transformer_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s234[3] = {2, 3, 4}, s3[1] = {3}, q[4] = {1, 4, 2, 8}, kv_bad[4] = {1, 3, 5, 8}, kv[4] = {1, 2, 5, 8};
    tf_tensor *x = NULL, *w3 = NULL, *qq = NULL, *kb = NULL, *kk = NULL, *pos = NULL, *o = NULL, *ix = NULL;
    OK(tf_ones(cpu, TF_F32, 3, s234, &x));
    OK(tf_ones(cpu, TF_F32, 1, s3, &w3));
    OK(tf_zeros(cpu, TF_F32, 4, q, &qq));
    OK(tf_zeros(cpu, TF_F32, 4, kv_bad, &kb));
    OK(tf_zeros(cpu, TF_F32, 4, kv, &kk));
    OK(tf_zeros(cpu, TF_I32, 1, s3, &pos));
    OK(tf_zeros(cpu, TF_I32, 3, s234, &ix));
    FAILS_WITH(TF_ERR_SHAPE, "tf_rmsnorm: weight [3] must be [4], the last axis of x", tf_rmsnorm(x, w3, 1e-6, &o));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_layernorm: eps -1 must be >= 0", tf_layernorm(x, NULL, NULL, -1, &o));
    FAILS_WITH(TF_ERR_DTYPE, "tf_softmax: softmax does not accept dtype i32", tf_softmax(ix, -1, &o));
    FAILS_WITH(TF_ERR_AXIS, "tf_softmax: axis 3 out of range", tf_softmax(x, 3, &o));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "rotary_dims 3 must be even and at most 4", tf_rope(x, pos, 1, 3, 10000, TF_ROPE_HALF_SPLIT, &o));
    FAILS_WITH(TF_ERR_SHAPE, "positions must be [2], one per index of axis 0", tf_rope(x, pos, 0, 0, 10000, TF_ROPE_INTERLEAVED, &o));
    FAILS_WITH(TF_ERR_SHAPE, "kv heads must divide q heads", tf_sdpa(qq, kb, kb, NULL, 0, true, -1, &o));
    FAILS_WITH(TF_ERR_SHAPE, "mask [3] does not broadcast to the scores [1,4,2,5]", tf_sdpa(qq, kk, kk, w3, 0, false, -1, &o));
    assert_null(o);
    OK(tf_sdpa(qq, kk, kk, NULL, 0, true, -1, &o));   /* q of zeros: uniform weights over visible keys */
    tf_tensor_release(o);
    OK(tf_sdpa(qq, kk, kk, NULL, 0, true, -100, &o)); /* q_offset < 0 means Lk - Lq */
    tf_tensor_release(o);
    tf_tensor *all[] = {x, w3, qq, kb, kk, pos, ix};
    for (int k = 0; k < 7; k++) tf_tensor_release(all[k]);
}

/* RoPE past the CPU's angle table (over 2^20 angles: 40000 positions x 32
 * pairs) takes the angles row by row: the rows still match a float64
 * rotation, positions out of order included. */
static void test_rope_long_positions(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    enum { L = 40000, D = 64 };
    int64_t xs[2] = {L, D}, ps[1] = {L};
    float *x = malloc(sizeof(float) * L * D), *y = malloc(sizeof(float) * L * D);
    int32_t *pos = malloc(sizeof(int32_t) * L);
    for (int i = 0; i < L * D; i++) x[i] = (float)sin(i * 0.013) + 0.25f;
    for (int i = 0; i < L; i++) pos[i] = (i * 7919) % L;
    tf_tensor *tx = NULL, *tp = NULL, *out = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 2, xs, x, &tx));
    OK(tf_tensor_from_data(cpu, TF_I32, 1, ps, pos, &tp));
    OK(tf_rope(tx, tp, 0, 0, 10000, TF_ROPE_HALF_SPLIT, &out));
    OK(tf_tensor_read(out, y, sizeof(float) * L * D));
    for (int r = 0; r < L; r += 997)
        for (int e = 0; e < D; e++) {
            const int i = e % (D / 2), partner = e < D / 2 ? e + D / 2 : e - D / 2;
            const double angle = pos[r] * pow(10000.0, -2.0 * i / D), v = x[r * D + e], u = x[r * D + partner];
            const double want = e < D / 2 ? v * cos(angle) - u * sin(angle) : u * sin(angle) + v * cos(angle);
            if (fabs(y[r * D + e] - want) > 1e-6 * (1 + fabs(want)))
                fail_msg("row %d element %d: %g, want %g", r, e, (double)y[r * D + e], want);
        }
    tf_tensor_release(tx);
    tf_tensor_release(tp);
    tf_tensor_release(out);
    free(x);
    free(y);
    free(pos);
}

static void test_vision_training_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t xs[4] = {1, 4, 5, 5}, wbad[4] = {6, 3, 3, 3}, small[4] = {1, 1, 2, 2}, k3[2] = {3, 3}, k4[2] = {4, 4},
            pad3[2] = {3, 3}, s6[1] = {6}, s5[1] = {5}, ls[2] = {2, 3};
    tf_tensor *x = NULL, *w = NULL, *tiny = NULL, *p6 = NULL, *p5 = NULL, *o = NULL, *logits = NULL, *tgt = NULL;
    OK(tf_ones(cpu, TF_F32, 4, xs, &x));
    OK(tf_ones(cpu, TF_F32, 4, wbad, &w));
    OK(tf_ones(cpu, TF_F32, 4, small, &tiny));
    OK(tf_ones(cpu, TF_F32, 1, s6, &p6));
    OK(tf_ones(cpu, TF_F32, 1, s5, &p5));
    FAILS_WITH(TF_ERR_SHAPE, "groups 2 do not fit", tf_conv2d(x, w, NULL, NULL, NULL, NULL, 2, &o));
    int64_t zero_stride[2] = {0, 1};
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "stride {0, 1} must be >= 1", tf_conv2d(x, w, NULL, zero_stride, NULL, NULL, 1, &o));
    FAILS_WITH(TF_ERR_SHAPE, "input [1,1,2,2] is too small for kernel {3, 3}", tf_maxpool2d(tiny, k3, NULL, NULL, NULL, &o));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "padding {3, 3} must be at most half the kernel", tf_avgpool2d(x, k4, NULL, pad3, true, &o));
    FAILS_WITH(TF_ERR_SHAPE, "tf_adam_step: grad [5] must have param's shape [6]", tf_adam_step(p6, p5, p6, p6, 0.1, 0.9, 0.999, 1e-8, 0, 1, true));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "step >= 1", tf_adam_step(p6, p6, p6, p6, 0.1, 0.9, 0.999, 1e-8, 0, 0, false));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "inference needs running_mean and running_var", tf_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5, &o));
    OK(tf_zeros(cpu, TF_F32, 2, ls, &logits));
    int64_t targets[2] = {1, 3};
    OK(tf_tensor_from_data(cpu, TF_I64, 1, ls, targets, &tgt));
    FAILS_WITH(TF_ERR_INDEX, "tf_cross_entropy: a target is outside [0, 3) and is not ignore_index -100",
               tf_cross_entropy(logits, tgt, -100, TF_REDUCTION_MEAN, &o));
    assert_null(o);
    OK(tf_cross_entropy(logits, tgt, 3, TF_REDUCTION_MEAN, &o));   /* 3 ignored: mean of one loss, log 3 */
    float loss;
    OK(tf_tensor_read(o, &loss, sizeof loss));
    assert_true(fabsf(loss - logf(3.0f)) < 1e-6f);
    tf_tensor_release(o);
    tf_tensor *all[] = {x, w, tiny, p6, p5, logits, tgt};
    for (int k = 0; k < 7; k++) tf_tensor_release(all[k]);
}

static void test_cast_rules(void **state) {
    (void)state;
    float f[6] = {300, -300, NAN, 2.7f, -2.7f, 0.5f};
    int8_t i8[6];
    uint8_t u8[6], bl[6];
    tf_tensor *t = tensor_of(TF_F32, 6, f), *o = NULL;
    OK(tf_cast(t, TF_I8, &o));                 /* truncate, saturate, NaN -> 0 */
    OK(tf_tensor_read(o, i8, sizeof i8));
    int8_t want_i8[6] = {127, -128, 0, 2, -2, 0};
    assert_memory_equal(i8, want_i8, 6);
    tf_tensor_release(o);
    OK(tf_cast(t, TF_U8, &o));
    OK(tf_tensor_read(o, u8, sizeof u8));
    uint8_t want_u8[6] = {255, 0, 0, 2, 0, 0};
    assert_memory_equal(u8, want_u8, 6);
    tf_tensor_release(o);
    OK(tf_cast(t, TF_BOOL, &o));               /* nonzero and NaN are true */
    OK(tf_tensor_read(o, bl, sizeof bl));
    uint8_t want_b[6] = {1, 1, 1, 1, 1, 1};
    assert_memory_equal(bl, want_b, 6);
    tf_tensor_release(o);
    tf_tensor_release(t);

    int32_t i32[2] = {300, -129};
    t = tensor_of(TF_I32, 2, i32);
    OK(tf_cast(t, TF_I8, &o));                 /* integer narrowing wraps */
    OK(tf_tensor_read(o, i8, 2));
    assert_int_equal(i8[0], 44);
    assert_int_equal(i8[1], 127);
    tf_tensor_release(o);
    tf_tensor_release(t);
}

static void test_half_conversions(void **state) {
    (void)state;
    assert_int_equal(tf_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(tf_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(tf_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(tf_f32_to_f16(65520.0f), 0x7c00);             /* rounds to infinity */
    assert_int_equal(tf_f32_to_f16(0x1p-24f), 0x0001);             /* smallest subnormal */
    assert_int_equal(tf_f32_to_f16(0x1p-25f), 0x0000);             /* tie to even */
    assert_int_equal(tf_f32_to_f16(0x1.8p-24f), 0x0002);           /* tie to even, upward */
    assert_int_equal(tf_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(tf_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      /* tie to even */
    assert_int_equal(tf_f32_to_f16(1.0f + 0x1.8p-11f), 0x3c01);
    uint16_t nan16 = tf_f32_to_f16(NAN);
    assert_true((nan16 & 0x7c00) == 0x7c00 && (nan16 & 0x3ff));
    assert_true(tf_f16_to_f32(0x7bff) == 65504.0f && tf_f16_to_f32(0x0001) == 0x1p-24f);
    assert_int_equal(tf_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(tf_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      /* tie to even */
    assert_int_equal(tf_f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);   /* 0.75 ulp */
    assert_int_equal(tf_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82);   /* tie to even, upward */
    assert_true(isnan(tf_bf16_to_f32(tf_f32_to_bf16(NAN))));
}

/* tf_full rounds the double once: a value just past an f16 (bf16) tie goes
 * to the far neighbour, where rounding through f32 first lands on the tie
 * and rounds to even (a conformance run caught -82.25 for -82.3125). */
static void test_fill_rounds_once(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    const struct {
        tf_dtype dt;
        double value;
        uint16_t want;
    } cases[] = {
        {TF_F16, -82.28125 - 1e-9, 0xd525},   /* -82.3125; via f32: -82.25 */
        {TF_F16, -82.28125 + 1e-9, 0xd524},   /* -82.25 */
        {TF_BF16, 82.25 + 1e-9, 0x42a5},      /* 82.5; via f32: 82.0 */
        {TF_BF16, 82.25 - 1e-9, 0x42a4},      /* 82.0 */
        {TF_F16, 1e-300, 0x0000},             /* below f32's range: +0, not NaN */
        {TF_F16, -1e-300, 0x8000},
        {TF_BF16, 1e-300, 0x0000},
        {TF_F16, 1e300, 0x7c00},              /* above: inf */
        {TF_BF16, -1e300, 0xff80},
        {TF_F16, 5.9604644775390625e-08 * 0.75, 0x0001},   /* 0.75 of f16's least subnormal: rounds up */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int64_t n = 3;
        tf_tensor *t = NULL;
        OK(tf_full(cpu, cases[i].dt, 1, &n, cases[i].value, &t));
        uint16_t got[3];
        OK(tf_tensor_read(t, got, sizeof got));
        if (got[0] != cases[i].want)
            fail_msg("case %zu: %s fill of %.12f gave 0x%04x, want 0x%04x", i, tf_dtype_name(cases[i].dt),
                     cases[i].value, got[0], cases[i].want);
        tf_tensor_release(t);
    }
}

static void test_creation(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_tensor *t = NULL;
    OK(tf_arange(cpu, TF_F32, 0, 1, 0.25, &t));
    float w1[4] = {0, 0.25f, 0.5f, 0.75f};
    expect_f32(t, w1, 4);
    tf_tensor_release(t);
    OK(tf_arange(cpu, TF_F32, 5, 0, -2, &t));
    float w2[3] = {5, 3, 1};
    expect_f32(t, w2, 3);
    tf_tensor_release(t);
    OK(tf_arange(cpu, TF_F32, 3, 1, 1, &t));   /* empty */
    assert_int_equal(tf_tensor_numel(t), 0);
    tf_tensor_release(t);
    OK(tf_eye(cpu, TF_F32, 2, 3, &t));
    float w3[6] = {1, 0, 0, 0, 1, 0};
    expect_f32(t, w3, 6);
    tf_tensor_release(t);
    int64_t s[2] = {2, 2};
    OK(tf_full(cpu, TF_F32, 2, s, -1.5, &t));
    float w4[4] = {-1.5f, -1.5f, -1.5f, -1.5f};
    expect_f32(t, w4, 4);
    tf_tensor_release(t);
    int64_t ones[3];
    OK(tf_ones(cpu, TF_I64, 1, (int64_t[]){3}, &t));
    OK(tf_tensor_read(t, ones, sizeof ones));
    assert_true(ones[0] == 1 && ones[2] == 1);
    tf_tensor_release(t);
}

static void test_random_is_deterministic_across_devices(void **state) {
    (void)state;
    OK(mybackend_register() == TF_ERR_ALREADY_EXISTS ? TF_OK : TF_OK);
    tf_device *cpu = cpu_device(), *my;
    OK(tf_device_get("mybackend:0", &my));
    int64_t n = 1000;
    float a[1000], b[1000], c[1000];
    tf_tensor *x = NULL, *y = NULL, *z = NULL;
    OK(tf_randn(cpu, TF_F32, 1, &n, 1234, &x));
    OK(tf_randn(my, TF_F32, 1, &n, 1234, &y));
    OK(tf_randn(cpu, TF_F32, 1, &n, 1235, &z));
    OK(tf_tensor_read(x, a, sizeof a));
    OK(tf_tensor_read(y, b, sizeof b));
    OK(tf_tensor_read(z, c, sizeof c));
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    tf_tensor_release(x);
    tf_tensor_release(y);
    tf_tensor_release(z);
}

/* tf_linear against a float64 reference: leading axes, bias or none, a 1-d
 * x, a quantized weight; and its shape errors. */
static void test_linear(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    enum { K = 32, N = 5 };
    float xv[2 * 3 * K], wv[N * K], bv[N];
    for (int i = 0; i < 2 * 3 * K; i++) xv[i] = (float)sin(i * 0.7);
    for (int i = 0; i < N * K; i++) wv[i] = (float)cos(i * 0.3);
    for (int i = 0; i < N; i++) bv[i] = (float)(i - 2);
    int64_t xs[3] = {2, 3, K}, ws[2] = {N, K}, bs[1] = {N};
    tf_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *wq = NULL, *x1 = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 3, xs, xv, &x));
    OK(tf_tensor_from_data(cpu, TF_F32, 2, ws, wv, &w));
    OK(tf_tensor_from_data(cpu, TF_F32, 1, bs, bv, &b));
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        OK(tf_linear(x, w, with_bias ? b : NULL, &y));
        int64_t want_shape[3] = {2, 3, N};
        expect_shape(y, 3, want_shape);
        float got[6 * N];
        OK(tf_tensor_read(y, got, sizeof got));
        for (int r = 0; r < 6; r++)
            for (int j = 0; j < N; j++) {
                double ref = with_bias ? bv[j] : 0;
                for (int k = 0; k < K; k++) ref += (double)xv[r * K + k] * wv[j * K + k];
                if (fabs(got[r * N + j] - ref) > 1e-5 * (1 + fabs(ref)))
                    fail_msg("bias %d: [%d, %d] = %g, float64 gives %g", with_bias, r, j, got[r * N + j], ref);
            }
        tf_tensor_release(y);
    }
    OK(tf_slice(x, 0, 1, 2, 1, &y));                       /* [1, 3, K] -> a 1-d row */
    int64_t one_k[1] = {K};
    tf_tensor *row = NULL, *r1 = NULL;
    OK(tf_slice(y, 1, 2, 3, 1, &x1));
    OK(tf_reshape(x1, 1, one_k, &row));
    OK(tf_linear(row, w, b, &r1));
    int64_t n1[1] = {N};
    expect_shape(r1, 1, n1);
    tf_tensor *list1[] = {y, x1, row, r1};
    for (int i = 0; i < 4; i++) tf_tensor_release(list1[i]);
    OK(tf_cast(w, TF_Q8_0, &wq));                           /* a quantized weight, then the bias */
    tf_tensor *yq = NULL, *wd = NULL, *yd = NULL;
    OK(tf_linear(x, wq, b, &yq));
    OK(tf_cast(wq, TF_F32, &wd));
    OK(tf_linear(x, wd, b, &yd));
    float gq[6 * N], gd[6 * N];
    OK(tf_tensor_read(yq, gq, sizeof gq));
    OK(tf_tensor_read(yd, gd, sizeof gd));
    for (int i = 0; i < 6 * N; i++) assert_true(fabsf(gq[i] - gd[i]) <= 0.02f * (1 + fabsf(gd[i])));
    tf_tensor *o = NULL;
    FAILS_WITH(TF_ERR_SHAPE, "tf_linear: x has 5 features, w [5, 32] takes 32", tf_linear(b, w, NULL, &o));
    FAILS_WITH(TF_ERR_SHAPE, "tf_linear: bias must be [5]", tf_linear(x, w, x, &o));
    FAILS_WITH(TF_ERR_SHAPE, "tf_linear: w must be [out_features, in_features], not 3-d", tf_linear(x, x, NULL, &o));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_linear: x or w is NULL", tf_linear(x, NULL, NULL, &o));
    assert_null(o);
    tf_tensor *list[] = {x, w, b, wq, yq, wd, yd};
    for (int i = 0; i < 7; i++) tf_tensor_release(list[i]);
}

/* A padded batch: tf_key_padding_mask's bool mask gives each sequence the
 * attention over its own keys only (the padded keys sliced away), and a
 * bool mask equals its additive form. */
static void test_attention_masks(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    enum { B = 2, H = 2, L = 3, LK = 5, D = 4 };
    int64_t qs[4] = {B, H, L, D}, ks[4] = {B, H, LK, D}, ms[2] = {B, LK};
    tf_tensor *q = NULL, *k = NULL, *v = NULL, *keep = NULL, *mask = NULL, *o = NULL;
    OK(tf_randn(cpu, TF_F32, 4, qs, 1, &q));
    OK(tf_randn(cpu, TF_F32, 4, ks, 2, &k));
    OK(tf_randn(cpu, TF_F32, 4, ks, 3, &v));
    const int64_t lengths[B] = {3, 5}, keep_v[B * LK] = {1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
    OK(tf_tensor_from_data(cpu, TF_I64, 2, ms, keep_v, &keep));
    OK(tf_key_padding_mask(keep, &mask));
    int64_t mshape[4] = {B, 1, 1, LK};
    expect_shape(mask, 4, mshape);
    assert_int_equal(tf_tensor_dtype(mask), TF_BOOL);
    OK(tf_sdpa(q, k, v, mask, 0, false, 0, &o));
    float got[B * H * L * D];
    OK(tf_tensor_read(o, got, sizeof got));
    for (int b = 0; b < B; b++) {                           /* sequence b alone, its keys only */
        tf_tensor *qb = NULL, *kb = NULL, *vb = NULL, *k2 = NULL, *v2 = NULL, *ob = NULL;
        OK(tf_slice(q, 0, b, b + 1, 1, &qb));
        OK(tf_slice(k, 0, b, b + 1, 1, &k2));
        OK(tf_slice(v, 0, b, b + 1, 1, &v2));
        OK(tf_slice(k2, 2, 0, lengths[b], 1, &kb));
        OK(tf_slice(v2, 2, 0, lengths[b], 1, &vb));
        OK(tf_sdpa(qb, kb, vb, NULL, 0, false, 0, &ob));
        float want[H * L * D];
        OK(tf_tensor_read(ob, want, sizeof want));
        for (int i = 0; i < H * L * D; i++)
            if (fabsf(got[b * H * L * D + i] - want[i]) > 1e-5f)
                fail_msg("sequence %d element %d: %g with the padding mask, %g over its own keys", b, i,
                         got[b * H * L * D + i], want[i]);
        tf_tensor *list[] = {qb, kb, vb, k2, v2, ob};
        for (int i = 0; i < 6; i++) tf_tensor_release(list[i]);
    }
    tf_tensor *keep_bool = NULL, *mask2 = NULL, *o2 = NULL;
    OK(tf_cast(keep, TF_BOOL, &keep_bool));                  /* bool keep: the same mask */
    OK(tf_key_padding_mask(keep_bool, &mask2));
    OK(tf_sdpa(q, k, v, mask2, 0, false, 0, &o2));
    float got2[B * H * L * D];
    OK(tf_tensor_read(o2, got2, sizeof got2));
    assert_memory_equal(got, got2, sizeof got);
    tf_tensor *bad = NULL;
    FAILS_WITH(TF_ERR_SHAPE, "tf_key_padding_mask: keep must be [batch, keys], not 4-d", tf_key_padding_mask(q, &bad));
    FAILS_WITH(TF_ERR_DTYPE, "tf_sdpa: the mask must be bool (true: attend) or additive float, not i64",
               tf_sdpa(q, k, v, keep, 0, false, 0, &bad));
    assert_null(bad);
    tf_tensor *list[] = {q, k, v, keep, mask, o, keep_bool, mask2, o2};
    for (int i = 0; i < 9; i++) tf_tensor_release(list[i]);
}

/* 0-d tensors in promotion (PyTorch's rule): they widen a dimensioned
 * tensor only from a higher category, and two 0-d tensors promote as usual. */
static void test_zero_d_promotion(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    static const struct { tf_dtype tensor, scalar, want; } cases[] = {
        {TF_F16, TF_F32, TF_F16}, {TF_F32, TF_F64, TF_F32}, {TF_BF16, TF_F64, TF_BF16}, {TF_I32, TF_I64, TF_I32},
        {TF_I8, TF_I64, TF_I8},   {TF_U8, TF_I8, TF_U8},    {TF_I32, TF_F64, TF_F64},   {TF_BOOL, TF_I64, TF_I64},
        {TF_BOOL, TF_F16, TF_F16}, {TF_I64, TF_BOOL, TF_I64},
    };
    int64_t n = 3;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tf_tensor *x = NULL, *c = NULL, *o = NULL, *w = NULL, *cond = NULL;
        tf_dtype dt;
        OK(tf_ones(cpu, cases[i].tensor, 1, &n, &x));
        OK(tf_scalar(cpu, cases[i].scalar, 1, &c));
        OK(tf_result_type(x, c, &dt));
        if (dt != cases[i].want)
            fail_msg("%s[3] with a %s 0-d: %s, want %s", tf_dtype_name(cases[i].tensor), tf_dtype_name(cases[i].scalar),
                     tf_dtype_name(dt), tf_dtype_name(cases[i].want));
        OK(tf_result_type(c, x, &dt));                       /* either order */
        assert_int_equal(dt, cases[i].want);
        OK(tf_add(c, x, &o));
        assert_int_equal(tf_tensor_dtype(o), cases[i].want);
        OK(tf_ones(cpu, TF_BOOL, 1, &n, &cond));
        OK(tf_where(cond, x, c, &w));
        assert_int_equal(tf_tensor_dtype(w), cases[i].want);
        tf_tensor *list[] = {x, c, o, w, cond};
        for (int k = 0; k < 5; k++) tf_tensor_release(list[k]);
    }
    tf_tensor *a = NULL, *b = NULL, *o = NULL;              /* two 0-d: the usual promotion */
    OK(tf_scalar(cpu, TF_F16, 1, &a));
    OK(tf_scalar(cpu, TF_F64, 2, &b));
    OK(tf_mul(a, b, &o));
    assert_int_equal(tf_tensor_dtype(o), TF_F64);
    tf_tensor_release(o);
    tf_dtype dt;
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_result_type: input tensor is NULL", tf_result_type(a, NULL, &dt));
    tf_tensor_release(a);
    tf_tensor_release(b);
}

static uint64_t cpu_bytes_held(void) {
    tf_memory_stats st;
    OK(tf_device_memory_stats(cpu_device(), &st));
    return st.allocated;
}

static void *end_scope_elsewhere(void *scope) {
    return (void *)(intptr_t)tf_scope_end(scope);
}

/* Scopes: a pass's temporaries go at tf_scope_end, a retained result
 * survives with its values, an early release leaves the scope, nested
 * scopes end with their parent, and a scope ends only on its own thread. */
static void test_scopes(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t shape[2] = {64, 64};
    const uint64_t before = cpu_bytes_held();
    tf_scope *sc = NULL, *inner = NULL;
    tf_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *v = NULL, *kept = NULL, *early = NULL;
    OK(tf_scope_begin(&sc));
    OK(tf_ones(cpu, TF_F32, 2, shape, &a));
    OK(tf_add(a, a, &b));                                    /* 2 */
    OK(tf_matmul(b, a, &c));                                 /* 128 */
    OK(tf_slice(c, 0, 0, 1, 1, &v));                         /* a view: a record of its own */
    OK(tf_mul(c, b, &early));
    tf_tensor_release(early);                                /* released early: leaves the scope */
    OK(tf_scope_begin(&inner));
    OK(tf_add(c, c, &d));                                    /* 256, in the inner scope */
    kept = tf_tensor_retain(d);
    assert_true(cpu_bytes_held() > before);
    OK(tf_scope_end(sc));                                    /* ends inner first, then sc */
    assert_int_equal(cpu_bytes_held(), before + 64 * 64 * 4); /* only the retained result is held */
    static float got[64 * 64];
    OK(tf_tensor_read(kept, got, sizeof got));
    assert_true(got[0] == 256.0f && got[64 * 64 - 1] == 256.0f);
    tf_tensor_release(kept);
    assert_int_equal(cpu_bytes_held(), before);
    tf_scope *other = NULL;                                  /* a scope is its thread's */
    OK(tf_scope_begin(&other));
    pthread_t th;
    void *rc = NULL;
    assert_int_equal(pthread_create(&th, NULL, end_scope_elsewhere, other), 0);
    pthread_join(th, &rc);
    assert_int_equal((tf_status)(intptr_t)rc, TF_ERR_INVALID_ARGUMENT);
    OK(tf_scope_end(other));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_scope_end: not a scope open on this thread", tf_scope_end(other) == TF_OK ? TF_OK : tf_scope_end(sc));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_scope_end: scope is NULL", tf_scope_end(NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "tf_scope_begin: out is NULL", tf_scope_begin(NULL));
    /* many temporaries: the list compacts as they are released */
    OK(tf_scope_begin(&sc));
    for (int i = 0; i < 1000; i++) {
        tf_tensor *t = NULL;
        OK(tf_ones(cpu, TF_F32, 2, shape, &t));
        if (i % 10) tf_tensor_release(t);
    }
    OK(tf_scope_end(sc));
    assert_int_equal(cpu_bytes_held(), before);
}

/* A thread that ends with scopes open (nested, holding tensors): they end
 * with it, and their tensors are released. */
static void *leave_scopes_open(void *arg) {
    tf_scope *outer = NULL, *inner = NULL;
    tf_tensor *a = NULL, *b = NULL;
    int64_t shape[2] = {32, 32};
    intptr_t ok = tf_scope_begin(&outer) == TF_OK && tf_ones((tf_device *)arg, TF_F32, 2, shape, &a) == TF_OK &&
                  tf_scope_begin(&inner) == TF_OK && tf_add(a, a, &b) == TF_OK;
    return (void *)ok;
}

static void test_scopes_end_with_their_thread(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    const uint64_t before = cpu_bytes_held();
    pthread_t th[10];
    for (int i = 0; i < 10; i++) assert_int_equal(pthread_create(&th[i], NULL, leave_scopes_open, cpu), 0);
    for (int i = 0; i < 10; i++) {
        void *ok = NULL;
        pthread_join(th[i], &ok);
        assert_true(ok);
    }
    assert_int_equal(cpu_bytes_held(), before);
}

/* tf_norm for p = 2, 1, inf and 3, tf_normalize, and tf_masked_mean (a
 * row with nothing kept gives 0), against float64; and their errors. */
static void test_norms_and_masked_mean(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    enum { B = 2, L = 3, D = 4 };
    float xv[B * L * D];
    for (int i = 0; i < B * L * D; i++) xv[i] = (float)sin(i * 1.3) * 3;
    int64_t xs[3] = {B, L, D}, ms[2] = {B, L};
    tf_tensor *x = NULL, *o = NULL, *mask = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 3, xs, xv, &x));
    const double ps[4] = {2, 1, INFINITY, 3};
    for (int pi = 0; pi < 4; pi++) {
        OK(tf_norm(x, ps[pi], -1, false, &o));
        float got[B * L];
        OK(tf_tensor_read(o, got, sizeof got));
        for (int r = 0; r < B * L; r++) {
            double acc = 0;
            for (int d = 0; d < D; d++) {
                double a = fabs(xv[r * D + d]);
                acc = isinf(ps[pi]) ? fmax(acc, a) : acc + pow(a, ps[pi]);
            }
            double want = isinf(ps[pi]) ? acc : pow(acc, 1 / ps[pi]);
            if (fabs(got[r] - want) > 1e-5 * want) fail_msg("p %g row %d: %g, float64 gives %g", ps[pi], r, got[r], want);
        }
        tf_tensor_release(o);
    }
    OK(tf_normalize(x, 2, -1, 1e-12, &o));
    float nv[B * L * D];
    OK(tf_tensor_read(o, nv, sizeof nv));
    for (int r = 0; r < B * L; r++) {
        double ss = 0;
        for (int d = 0; d < D; d++) ss += (double)nv[r * D + d] * nv[r * D + d];
        assert_true(fabs(ss - 1) < 1e-6);
    }
    tf_tensor_release(o);
    const uint8_t keep[B * L] = {1, 1, 0, 0, 0, 0};         /* row 1 keeps nothing */
    OK(tf_tensor_from_data(cpu, TF_BOOL, 2, ms, keep, &mask));
    OK(tf_masked_mean(x, mask, 1, false, &o));
    int64_t want_shape[2] = {B, D};
    expect_shape(o, 2, want_shape);
    float mv[B * D];
    OK(tf_tensor_read(o, mv, sizeof mv));
    for (int d = 0; d < D; d++) {
        double want = ((double)xv[0 * D + d] + xv[1 * D + d]) / 2;
        assert_true(fabs(mv[d] - want) < 1e-6);
        assert_true(mv[D + d] == 0.0f);
    }
    tf_tensor_release(o);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_norm: p must be positive", tf_norm(x, 0, -1, false, &o));
    FAILS_WITH(TF_ERR_DTYPE, "tf_norm: needs a float dtype, not bool", tf_norm(mask, 2, -1, false, &o));
    tf_tensor *wrong = NULL;
    int64_t s34[2] = {3, 4};
    OK(tf_ones(cpu, TF_BOOL, 2, s34, &wrong));
    FAILS_WITH(TF_ERR_SHAPE, "tf_masked_mean: mask [3,4] does not cover x [2,3,4]'s leading axes",
               tf_masked_mean(x, wrong, 1, false, &o));
    assert_null(o);
    tf_tensor_release(wrong);
    tf_tensor_release(x);
    tf_tensor_release(mask);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_dtypes_and_promotion),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_unknown_device),
        cmocka_unit_test(test_dtype_errors),
        cmocka_unit_test(test_sort_and_search),
        cmocka_unit_test(test_linalg),
        cmocka_unit_test(test_view_dtype),
        cmocka_unit_test(test_complex_rules),
        cmocka_unit_test(test_fft),
        cmocka_unit_test(test_shape_errors_leave_inputs_intact),
        cmocka_unit_test(test_axis_errors),
        cmocka_unit_test(test_size_errors),
        cmocka_unit_test(test_buffer_too_small_and_out_of_memory),
        cmocka_unit_test(test_op_semantics_at_the_edges),
        cmocka_unit_test(test_unary_edges_and_scalars),
        cmocka_unit_test(test_comparisons_logic_and_where),
        cmocka_unit_test(test_reduction_edges),
        cmocka_unit_test(test_indexing_errors),
        cmocka_unit_test(test_transformer_errors),
        cmocka_unit_test(test_rope_long_positions),
        cmocka_unit_test(test_vision_training_errors),
        cmocka_unit_test(test_cast_rules),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_creation),
        cmocka_unit_test(test_random_is_deterministic_across_devices),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_attention_masks),
        cmocka_unit_test(test_zero_d_promotion),
        cmocka_unit_test(test_scopes),
        cmocka_unit_test(test_scopes_end_with_their_thread),
        cmocka_unit_test(test_norms_and_masked_mean),
        cmocka_unit_test(test_fill_rounds_once),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
