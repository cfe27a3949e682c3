/* Views share storage and compute the right geometry; copies and moves are
 * exact; storage outlives the tensor it was created with. */
#include "helpers.h"
#include "mybackend.h"

static tf_tensor *iota(int ndim, const int64_t *shape) {
    tf_tensor *flat = NULL, *t = NULL;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    OK(tf_arange(cpu_device(), TF_F32, 0, (double)n, 1, &flat));
    OK(tf_reshape(flat, ndim, shape, &t));
    tf_tensor_release(flat);
    return t;
}

static void test_reshape_is_a_view_when_strides_allow(void **state) {
    (void)state;
    int64_t s46[2] = {4, 6}, s223[3] = {2, 2, 3}, s12[1] = {12};
    tf_tensor *t = iota(2, s46), *rows = NULL, *r = NULL, *tt = NULL, *flat = NULL;
    OK(tf_slice(t, 0, 0, 4, 2, &rows));        /* rows 0 and 2: strides (12, 1) */
    OK(tf_reshape(rows, 3, s223, &r));
    assert_false(tf_tensor_is_contiguous(r));  /* a view: no copy was made */
    assert_int_equal(tf_tensor_strides(r)[0], 12);
    assert_int_equal(tf_tensor_strides(r)[1], 3);
    assert_int_equal(tf_tensor_strides(r)[2], 1);
    float want[12] = {0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17};
    expect_f32(r, want, 12);
    tf_tensor_release(r);
    /* a transposed tensor cannot be flattened without a copy */
    int64_t s34[2] = {3, 4};
    tf_tensor *small = iota(2, s34);
    OK(tf_transpose(small, 0, 1, &tt));
    OK(tf_reshape(tt, 1, s12, &flat));
    assert_true(tf_tensor_is_contiguous(flat));
    float want_t[12] = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
    expect_f32(flat, want_t, 12);
    int64_t infer[2] = {-1, 6};
    tf_tensor *inferred = NULL;
    OK(tf_reshape(small, 2, infer, &inferred));
    int64_t s26[2] = {2, 6};
    expect_shape(inferred, 2, s26);
    tf_tensor *all[] = {t, rows, small, tt, flat, inferred};
    for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
}

static void test_permute_slice_expand_squeeze(void **state) {
    (void)state;
    int64_t s234[3] = {2, 3, 4};
    tf_tensor *t = iota(3, s234), *p = NULL, *s = NULL, *e = NULL, *q = NULL, *u = NULL;
    int perm[3] = {2, 0, -2};                  /* negative entries count from the end */
    OK(tf_permute(t, perm, &p));
    int64_t s423[3] = {4, 2, 3};
    expect_shape(p, 3, s423);
    assert_int_equal(tf_tensor_strides(p)[0], 1);
    float first[6] = {0, 4, 8, 12, 16, 20};
    tf_tensor *p0 = NULL;
    OK(tf_slice(p, 0, 0, 1, 1, &p0));
    expect_f32(p0, first, 6);
    /* Python slicing: negative bounds, clamping, steps */
    OK(tf_slice(t, -1, -3, 100, 2, &s));       /* last axis [1:4:2] -> 1, 3 */
    int64_t s232[3] = {2, 3, 2};
    expect_shape(s, 3, s232);
    float want_s[12] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23};
    expect_f32(s, want_s, 12);
    tf_tensor *empty = NULL;
    OK(tf_slice(t, 1, 2, 1, 1, &empty));
    assert_int_equal(tf_tensor_numel(empty), 0);
    /* expand: stride 0 on broadcast axes, -1 keeps an extent */
    int64_t s31[2] = {3, 1}, target[3] = {2, 3, 5}, keep[3] = {2, -1, 5};
    tf_tensor *col = iota(2, s31);
    OK(tf_expand(col, 3, target, &e));
    expect_shape(e, 3, target);
    assert_int_equal(tf_tensor_strides(e)[0], 0);
    assert_int_equal(tf_tensor_strides(e)[2], 0);
    tf_tensor *e2 = NULL;
    OK(tf_expand(col, 3, keep, &e2));
    expect_shape(e2, 3, target);
    tf_tensor *sum = NULL;
    OK(tf_sum(e, TF_ALL_AXES, false, &sum));   /* 2 * 5 * (0 + 1 + 2) */
    float thirty[1] = {30};
    expect_f32(sum, thirty, 1);
    /* squeeze / unsqueeze */
    int64_t s1315[4] = {1, 3, 1, 5};
    tf_tensor *ones = NULL;
    OK(tf_ones(cpu_device(), TF_F32, 4, s1315, &ones));
    OK(tf_squeeze(ones, TF_ALL_AXES, &q));
    int64_t s35[2] = {3, 5};
    expect_shape(q, 2, s35);
    OK(tf_unsqueeze(q, -1, &u));
    int64_t s351[3] = {3, 5, 1};
    expect_shape(u, 3, s351);
    tf_tensor *u0 = NULL, *sq2 = NULL;
    OK(tf_unsqueeze(q, 0, &u0));
    int64_t s135[3] = {1, 3, 5};
    expect_shape(u0, 3, s135);
    OK(tf_squeeze(ones, 2, &sq2));
    int64_t s135b[3] = {1, 3, 5};
    expect_shape(sq2, 3, s135b);
    tf_tensor *all[] = {t, p, p0, s, empty, col, e, e2, sum, ones, q, u, u0, sq2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

static void test_contiguous_copy_and_lifetime(void **state) {
    (void)state;
    int64_t s23[2] = {2, 3};
    tf_tensor *t = iota(2, s23), *same = NULL, *tt = NULL, *c = NULL, *copy = NULL;
    OK(tf_contiguous(t, &same));
    assert_ptr_equal(same, t);                 /* already contiguous: same tensor */
    tf_tensor_release(same);
    OK(tf_transpose(t, 0, 1, &tt));
    OK(tf_contiguous(tt, &c));
    assert_ptr_not_equal(c, tt);
    assert_true(tf_tensor_is_contiguous(c));
    OK(tf_copy(t, &copy));
    assert_ptr_not_equal(copy, t);
    /* the view keeps the storage alive after its base is released */
    tf_tensor_release(t);
    float want[6] = {0, 3, 1, 4, 2, 5};
    expect_f32(tt, want, 6);
    expect_f32(c, want, 6);
    assert_ptr_equal(tf_tensor_retain(c), c);
    tf_tensor_release(c);
    tf_tensor_release(c);
    tf_tensor_release(tt);
    tf_tensor_release(copy);
}

static void test_moving_between_devices_is_exact(void **state) {
    (void)state;
    tf_status s = mybackend_register();
    assert_true(s == TF_OK || s == TF_ERR_ALREADY_EXISTS);
    tf_device *cpu = cpu_device(), *my;
    OK(tf_device_get("mybackend", &my));
    unsigned char bytes[7 * 5 * 16];                     /* 7x5 of the widest dtype, c128 */
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 37 + 11);
    for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
        if (dt == TF_BOOL) continue;                       /* bool bytes must be 0/1 */
        int64_t shape[2] = {7, 5};
        if (tf_dtype_is_quantized((tf_dtype)dt)) {         /* one row of one block: any bytes are a block */
            shape[0] = 1;
            shape[1] = (int64_t)tf_dtype_block_size((tf_dtype)dt);
        }
        tf_tensor *a = NULL, *there = NULL, *back = NULL, *same = NULL;
        OK(tf_tensor_from_data(cpu, (tf_dtype)dt, 2, shape, bytes, &a));
        OK(tf_tensor_to(a, my, &there));
        assert_ptr_equal(tf_tensor_device(there), my);
        OK(tf_tensor_to(there, my, &same));
        assert_ptr_equal(same, there);                     /* already there */
        OK(tf_tensor_to(there, cpu, &back));
        unsigned char got[sizeof bytes];
        size_t n = (size_t)(shape[0] * shape[1]) / tf_dtype_block_size((tf_dtype)dt) * tf_dtype_size((tf_dtype)dt);
        OK(tf_tensor_read(back, got, n));
        assert_memory_equal(got, bytes, n);
        tf_tensor *all[] = {a, there, back, same};
        for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    }
    /* a non-contiguous tensor moves as its logical contents */
    int64_t s23[2] = {2, 3};
    tf_tensor *t = iota(2, s23), *tt = NULL, *moved = NULL;
    OK(tf_transpose(t, 0, 1, &tt));
    OK(tf_tensor_to(tt, my, &moved));
    float want[6] = {0, 3, 1, 4, 2, 5};
    expect_f32(moved, want, 6);
    tf_tensor_release(t);
    tf_tensor_release(tt);
    tf_tensor_release(moved);
}

/* tf_copy_into writes into a view in place (a KV cache's append): the rest
 * of the storage is untouched, src broadcasts and converts, may overlap dst,
 * and may live on another device; a broadcast dst is refused, dst intact. */
static void test_copy_into_writes_a_view_in_place(void **state) {
    (void)state;
    int64_t s34[2] = {3, 4}, s24[2] = {2, 4}, s1[1] = {1}, s4[1] = {4};
    tf_tensor *cache = NULL, *rows = NULL, *slot = NULL, *col = NULL, *scalar = NULL;
    OK(tf_zeros(cpu_device(), TF_F32, 2, s34, &cache));
    rows = iota(2, s24);
    OK(tf_slice(cache, 0, 1, 3, 1, &slot));             /* rows 1 and 2 */
    OK(tf_copy_into(slot, rows));
    float want[12] = {0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7};
    expect_f32(cache, want, 12);
    OK(tf_slice(cache, 1, 3, 4, 1, &col));               /* the last column, strided */
    OK(tf_scalar(cpu_device(), TF_I32, -2, &scalar));    /* broadcast and converted */
    OK(tf_copy_into(col, scalar));
    float want2[12] = {0, 0, 0, -2, 0, 1, 2, -2, 4, 5, 6, -2};
    expect_f32(cache, want2, 12);
    /* overlapping source and destination: row 1 <- row 0 and row 2 <- row 1
     * at once (copied in order, row 2 would get row 0) */
    tf_tensor *head = NULL, *tail = NULL;
    OK(tf_slice(cache, 0, 0, 2, 1, &head));
    OK(tf_slice(cache, 0, 1, 3, 1, &tail));
    OK(tf_copy_into(tail, head));
    float want3[12] = {0, 0, 0, -2, 0, 0, 0, -2, 0, 1, 2, -2};
    expect_f32(cache, want3, 12);
    /* a source on another device moves first */
    tf_device *my;
    tf_tensor *there = NULL, *row0 = NULL, *four = NULL;
    OK(tf_device_get("mybackend", &my));
    const float v4[4] = {9, 8, 7, 6};
    four = tensor_f32(cpu_device(), 1, s4, v4);
    OK(tf_tensor_to(four, my, &there));
    OK(tf_slice(cache, 0, 2, 3, 1, &row0));
    OK(tf_copy_into(row0, there));
    float want4[12] = {0, 0, 0, -2, 0, 0, 0, -2, 9, 8, 7, 6};
    expect_f32(cache, want4, 12);
    /* refused: a broadcast destination, shapes that do not broadcast, NULL */
    tf_tensor *one = NULL, *wide = NULL;
    OK(tf_zeros(cpu_device(), TF_F32, 1, s1, &one));
    OK(tf_expand(one, 1, s4, &wide));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "broadcast", tf_copy_into(wide, four));
    FAILS_WITH(TF_ERR_SHAPE, "broadcast", tf_copy_into(row0, rows));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_copy_into(NULL, rows));
    expect_f32(cache, want4, 12);
    tf_tensor *all[] = {cache, rows, slot, col, scalar, head, tail, there, row0, four, one, wide};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshape_is_a_view_when_strides_allow),
        cmocka_unit_test(test_permute_slice_expand_squeeze),
        cmocka_unit_test(test_contiguous_copy_and_lifetime),
        cmocka_unit_test(test_moving_between_devices_is_exact),
        cmocka_unit_test(test_copy_into_writes_a_view_in_place),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
