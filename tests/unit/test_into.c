/* The _into forms: every elementwise op written into an existing tensor
 * gives, bit for bit, what the op gives into a new tensor, in place or not;
 * shares of storage read as if the result were made apart; bad targets are
 * refused with dst intact; the common case allocates nothing. */
#include <stdlib.h>

#include "helpers.h"

typedef tf_status (*binary_fn)(const tf_tensor *, const tf_tensor *, tf_tensor **);
typedef tf_status (*unary_fn)(const tf_tensor *, tf_tensor **);

static const struct { tf_op_kind op; binary_fn f; } binaries[] = {
    {TF_OP_ADD, tf_add}, {TF_OP_SUB, tf_sub}, {TF_OP_MUL, tf_mul}, {TF_OP_DIV, tf_div},
    {TF_OP_MAXIMUM, tf_maximum}, {TF_OP_MINIMUM, tf_minimum}, {TF_OP_POW, tf_pow}, {TF_OP_SWIGLU, tf_swiglu},
    {TF_OP_EQ, tf_eq}, {TF_OP_NE, tf_ne}, {TF_OP_LT, tf_lt}, {TF_OP_LE, tf_le}, {TF_OP_GT, tf_gt},
    {TF_OP_GE, tf_ge}, {TF_OP_LOGICAL_AND, tf_logical_and}, {TF_OP_LOGICAL_OR, tf_logical_or},
    {TF_OP_ATAN2, tf_atan2}, {TF_OP_COPYSIGN, tf_copysign}, {TF_OP_BITWISE_AND, tf_bitwise_and},
    {TF_OP_BITWISE_OR, tf_bitwise_or}, {TF_OP_BITWISE_XOR, tf_bitwise_xor}, {TF_OP_LEFT_SHIFT, tf_left_shift},
    {TF_OP_RIGHT_SHIFT, tf_right_shift},
};

static const struct { tf_op_kind op; unary_fn f; } unaries[] = {
    {TF_OP_NEG, tf_neg}, {TF_OP_ABS, tf_abs}, {TF_OP_SIGN, tf_sign}, {TF_OP_EXP, tf_exp}, {TF_OP_LOG, tf_log},
    {TF_OP_LOG1P, tf_log1p}, {TF_OP_EXPM1, tf_expm1}, {TF_OP_SQRT, tf_sqrt}, {TF_OP_RSQRT, tf_rsqrt},
    {TF_OP_SIN, tf_sin}, {TF_OP_COS, tf_cos}, {TF_OP_TANH, tf_tanh}, {TF_OP_SIGMOID, tf_sigmoid},
    {TF_OP_RELU, tf_relu}, {TF_OP_GELU, tf_gelu}, {TF_OP_GELU_TANH, tf_gelu_tanh}, {TF_OP_SILU, tf_silu},
    {TF_OP_SOFTPLUS, tf_softplus}, {TF_OP_FLOOR, tf_floor}, {TF_OP_CEIL, tf_ceil}, {TF_OP_ROUND, tf_round},
    {TF_OP_LOGICAL_NOT, tf_logical_not}, {TF_OP_ISNAN, tf_isnan}, {TF_OP_ISINF, tf_isinf},
    {TF_OP_ACOS, tf_acos}, {TF_OP_ASIN, tf_asin}, {TF_OP_ATAN, tf_atan}, {TF_OP_ACOSH, tf_acosh},
    {TF_OP_ASINH, tf_asinh}, {TF_OP_ATANH, tf_atanh},
};

/* Fresh random values in [0.25, 2.25) with random signs (positive for the
 * ops whose domain needs it), in dtype dt. */
static tf_tensor *random_tensor(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, bool positive) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        float m = 0.25f + 2.0f * (float)rand() / (float)RAND_MAX;
        v[i] = positive || rand() % 2 ? m : -m;
        if (dt == TF_I32) v[i] = (float)(int)(v[i] * 3);
    }
    tf_tensor *f = tensor_f32(cpu_device(), ndim, shape, v), *t = NULL, *on = NULL;
    free(v);
    OK(tf_cast(f, dt, &t));
    OK(tf_tensor_to(t, dev, &on));
    tf_tensor_release(f);
    tf_tensor_release(t);
    return on;
}

static void expect_same_bytes(const tf_tensor *got, const tf_tensor *want, const char *what, tf_op_kind op) {
    int64_t n = tf_tensor_nbytes(want);
    assert_int_equal(tf_tensor_nbytes(got), n);
    assert_int_equal(tf_tensor_dtype(got), tf_tensor_dtype(want));
    unsigned char *g = malloc((size_t)n), *w = malloc((size_t)n);
    assert_non_null(g);
    assert_non_null(w);
    OK(tf_tensor_read(got, g, (size_t)n));
    OK(tf_tensor_read(want, w, (size_t)n));
    if (memcmp(g, w, (size_t)n) != 0) fail_msg("%s: %s differs from the op's own result", what, tf_op_name(op));
    free(g);
    free(w);
}

static tf_tensor *copy_of(const tf_tensor *t) {
    tf_tensor *c = NULL;
    OK(tf_copy(t, &c));
    return c;
}

static bool accepts(tf_op_kind op, tf_dtype dt) {
    bool float_only = op == TF_OP_SWIGLU || op == TF_OP_ATAN2 || op == TF_OP_COPYSIGN;
    bool int_only = op == TF_OP_BITWISE_AND || op == TF_OP_BITWISE_OR || op == TF_OP_BITWISE_XOR ||
                    op == TF_OP_LEFT_SHIFT || op == TF_OP_RIGHT_SHIFT;
    return int_only ? !tf_dtype_is_float(dt) : !float_only || tf_dtype_is_float(dt);
}

/* Into a fresh tensor, in place on a, in place on b (b the same shape). */
static void check_binary_forms(tf_device *dev, tf_op_kind op, binary_fn f, tf_dtype dt) {
    int64_t s35[2] = {3, 5}, s5[1] = {5};
    bool positive = op == TF_OP_POW;
    tf_tensor *a = random_tensor(dev, dt, 2, s35, positive), *b = random_tensor(dev, dt, 2, s35, false);
    tf_tensor *row = random_tensor(dev, dt, 1, s5, false), *want = NULL, *want_row = NULL, *dst = NULL;
    if (op == TF_OP_POW) {  /* small exponents */
        tf_tensor_release(b);
        tf_tensor_release(row);
        b = random_tensor(dev, dt, 2, s35, true);
        row = random_tensor(dev, dt, 1, s5, true);
    }
    OK(f(a, b, &want));
    OK(f(a, row, &want_row));
    OK(tf_empty(dev, tf_tensor_dtype(want), 2, s35, &dst));
    OK(tf_binary_into(dst, op, a, b));
    expect_same_bytes(dst, want, "into a new tensor", op);
    if (tf_tensor_dtype(want) == dt) {
        tf_tensor *x = copy_of(a), *y = copy_of(b);
        OK(tf_binary_into(x, op, x, b));
        expect_same_bytes(x, want, "in place on a", op);
        OK(tf_binary_into(y, op, a, y));
        expect_same_bytes(y, want, "in place on b", op);
        tf_tensor_release(x);
        x = copy_of(a);
        OK(tf_binary_into(x, op, x, row));      /* the other input broadcast */
        expect_same_bytes(x, want_row, "in place with a broadcast row", op);
        tf_tensor_release(x);
        tf_tensor_release(y);
    }
    tf_tensor *all[] = {a, b, row, want, want_row, dst};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

static void check_unary_forms(tf_device *dev, tf_op_kind op, unary_fn f, tf_dtype dt) {
    int64_t s47[2] = {4, 7};
    bool positive = op == TF_OP_LOG || op == TF_OP_LOG1P || op == TF_OP_SQRT || op == TF_OP_RSQRT;
    tf_tensor *x = random_tensor(dev, dt, 2, s47, positive), *want = NULL, *dst = NULL;
    OK(f(x, &want));
    OK(tf_empty(dev, tf_tensor_dtype(want), 2, s47, &dst));
    OK(tf_unary_into(dst, op, x));
    expect_same_bytes(dst, want, "into a new tensor", op);
    if (tf_tensor_dtype(want) == dt) {
        tf_tensor *y = copy_of(x);
        OK(tf_unary_into(y, op, y));
        expect_same_bytes(y, want, "in place", op);
        tf_tensor_release(y);
    }
    tf_tensor_release(x);
    tf_tensor_release(want);
    tf_tensor_release(dst);
}

static void each_op_in_every_form_on(tf_device *dev) {
    const tf_dtype dts[] = {TF_F32, TF_F16, TF_BF16, TF_F64, TF_I32};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++)
            if (accepts(binaries[i].op, dts[d])) check_binary_forms(dev, binaries[i].op, binaries[i].f, dts[d]);
        for (size_t i = 0; i < sizeof unaries / sizeof unaries[0]; i++)
            if (tf_dtype_is_float(dts[d]) || tf_op_kernel_of(unaries[i].op) == TF_KERNEL_PREDICATE)
                check_unary_forms(dev, unaries[i].op, unaries[i].f, dts[d]);
    }
}

static void test_each_elementwise_op_matches_its_new_tensor_form(void **state) {
    (void)state;
    srand(7);
    each_op_in_every_form_on(cpu_device());
}

/* Other devices present (OpenCL under PoCL here) run the same checks. */
static void test_each_elementwise_op_on_other_devices(void **state) {
    (void)state;
    int n = tf_device_count();
    for (int i = 0; i < n; i++) {
        tf_device *dev = tf_device_at(i);
        if (dev && dev != cpu_device()) each_op_in_every_form_on(dev);
    }
}

static tf_tensor *iota_f32(int64_t n) {
    tf_tensor *t = NULL;
    OK(tf_arange(cpu_device(), TF_F32, 0, (double)n, 1, &t));
    return t;
}

/* dst a strided view: only its elements change. dst overlapping an input
 * by a shift: the result is as if made apart (written directly, x[i+1] =
 * x[i] + x[i] would read the sums already written). */
static void test_views_and_shifted_overlap(void **state) {
    (void)state;
    int64_t s34[2] = {3, 4};
    tf_tensor *flat = iota_f32(12), *m = NULL, *col = NULL, *ten = NULL;
    OK(tf_reshape(flat, 2, s34, &m));
    OK(tf_slice(m, 1, 1, 2, 1, &col));                  /* column 1: strided */
    OK(tf_scalar(cpu_device(), TF_F32, 10, &ten));
    OK(tf_binary_into(col, TF_OP_MUL, col, ten));
    float want[12] = {0, 10, 2, 3, 4, 50, 6, 7, 8, 90, 10, 11};
    expect_f32(m, want, 12);
    tf_tensor *x = iota_f32(6), *head = NULL, *tail = NULL;
    OK(tf_slice(x, 0, 0, 5, 1, &head));
    OK(tf_slice(x, 0, 1, 6, 1, &tail));
    OK(tf_binary_into(tail, TF_OP_ADD, head, head));
    float want2[6] = {0, 0, 2, 4, 6, 8};
    expect_f32(x, want2, 6);
    tf_tensor *all[] = {flat, m, col, ten, x, head, tail};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

/* A result stored into another dtype of its kind or higher: rounded like
 * tf_cast; into a lower kind refused. */
static void test_results_convert_to_dst_dtype(void **state) {
    (void)state;
    int64_t s4[1] = {4};
    const float av[4] = {1.0f, 2.5f, -3.0f, 1e-4f}, bv[4] = {0.1f, 0.2f, 0.3f, 1.0f};
    tf_tensor *a = tensor_f32(cpu_device(), 1, s4, av), *b = tensor_f32(cpu_device(), 1, s4, bv);
    tf_tensor *h = NULL, *sum = NULL, *want = NULL, *lt = NULL, *i32 = NULL;
    OK(tf_empty(cpu_device(), TF_F16, 1, s4, &h));
    OK(tf_binary_into(h, TF_OP_ADD, a, b));
    OK(tf_add(a, b, &sum));
    OK(tf_cast(sum, TF_F16, &want));
    expect_same_bytes(h, want, "f32 into f16", TF_OP_ADD);
    OK(tf_zeros(cpu_device(), TF_F32, 1, s4, &lt));
    OK(tf_binary_into(lt, TF_OP_LT, a, b));             /* bool into float: 0/1 */
    const float want_lt[4] = {0, 0, 1, 1};
    expect_f32(lt, want_lt, 4);
    OK(tf_zeros(cpu_device(), TF_I32, 1, s4, &i32));
    FAILS_WITH(TF_ERR_DTYPE, "cannot be stored into a i32", tf_binary_into(i32, TF_OP_ADD, a, b));
    FAILS_WITH(TF_ERR_DTYPE, "cannot be stored", tf_unary_into(i32, TF_OP_EXP, a));
    int32_t got[4];
    OK(tf_tensor_read(i32, got, sizeof got));
    for (int i = 0; i < 4; i++) assert_int_equal(got[i], 0);
    tf_tensor *all[] = {a, b, h, sum, want, lt, i32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

static void test_bad_targets_are_refused_and_left_intact(void **state) {
    (void)state;
    int64_t s1[1] = {1}, s4[1] = {4}, s3[1] = {3};
    tf_tensor *x = iota_f32(4), *y = iota_f32(3), *one = NULL, *wide = NULL, *c = NULL;
    OK(tf_zeros(cpu_device(), TF_F32, 1, s1, &one));
    OK(tf_expand(one, 1, s4, &wide));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "broadcast view", tf_binary_into(wide, TF_OP_ADD, x, x));
    FAILS_WITH(TF_ERR_SHAPE, "do not broadcast", tf_binary_into(x, TF_OP_ADD, x, y));
    FAILS_WITH(TF_ERR_SHAPE, "the result has shape [4] but dst has [3]", tf_binary_into(y, TF_OP_ADD, x, x));
    FAILS_WITH(TF_ERR_SHAPE, "the result has shape", tf_binary_into(one, TF_OP_ADD, x, one));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "matmul is not an elementwise op", tf_binary_into(x, TF_OP_MATMUL, x, x));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "clamp takes parameters", tf_unary_into(x, TF_OP_CLAMP, x));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not an elementwise op", tf_unary_into(x, (tf_op_kind)-1, x));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not an elementwise op", tf_unary_into(x, TF_OP_ADD, x));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "dst is NULL", tf_binary_into(NULL, TF_OP_ADD, x, x));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_binary_into(x, TF_OP_ADD, NULL, x));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_where_into(x, NULL, x, x));
    OK(tf_zeros(cpu_device(), TF_I32, 1, s3, &c));
    FAILS_WITH(TF_ERR_DTYPE, "swiglu does not accept dtype i32", tf_binary_into(c, TF_OP_SWIGLU, c, c));
    const float want[4] = {0, 1, 2, 3};
    expect_f32(x, want, 4);
    tf_tensor *all[] = {x, y, one, wide, c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

static void test_where_into(void **state) {
    (void)state;
    int64_t s4[1] = {4};
    tf_tensor *x = iota_f32(4), *zero = NULL, *mask = NULL, *want = NULL;
    OK(tf_scalar(cpu_device(), TF_F32, 0, &zero));
    OK(tf_gt(x, zero, &mask));
    OK(tf_where(mask, zero, x, &want));
    OK(tf_where_into(x, mask, zero, x));               /* in place: zero the positives */
    expect_same_bytes(x, want, "in place", TF_OP_WHERE);
    (void)s4;
    tf_tensor *all[] = {x, zero, mask, want};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
}

static uint64_t allocations(tf_device *d) {
    tf_memory_stats m;
    OK(tf_device_memory_stats(d, &m));
    return m.cache_hits + m.cache_misses;
}

/* The residual add of a layer, h += attn, and an activation in place make
 * no allocation at all; a converting store needs one (the result apart). */
static void test_in_place_allocates_nothing(void **state) {
    (void)state;
    int64_t s[2] = {40, 384};
    tf_tensor *h = random_tensor(cpu_device(), TF_F32, 2, s, false);
    tf_tensor *attn = random_tensor(cpu_device(), TF_F32, 2, s, false), *h16 = NULL;
    uint64_t before = allocations(cpu_device());
    OK(tf_binary_into(h, TF_OP_ADD, h, attn));
    OK(tf_unary_into(h, TF_OP_GELU, h));
    assert_int_equal(allocations(cpu_device()), before);
    OK(tf_empty(cpu_device(), TF_F16, 2, s, &h16));
    before = allocations(cpu_device());
    OK(tf_binary_into(h16, TF_OP_ADD, h, attn));
    assert_true(allocations(cpu_device()) > before);
    tf_tensor_release(h);
    tf_tensor_release(attn);
    tf_tensor_release(h16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_elementwise_op_matches_its_new_tensor_form),
        cmocka_unit_test(test_each_elementwise_op_on_other_devices),
        cmocka_unit_test(test_views_and_shifted_overlap),
        cmocka_unit_test(test_results_convert_to_dst_dtype),
        cmocka_unit_test(test_bad_targets_are_refused_and_left_intact),
        cmocka_unit_test(test_where_into),
        cmocka_unit_test(test_in_place_allocates_nothing),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
