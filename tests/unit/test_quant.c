/* Block-quantized dtypes: what they are, which layouts and ops take them,
 * and the errors everything else gives. Values against a float64 reference
 * are the conformance suite's (run_qmatmul, run_quant_casts). */
#define _POSIX_C_SOURCE 200809L   /* setenv */
#include <cpuid.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cpu.h>

#include "helpers.h"

static const tf_dtype quantized[] = {TF_Q4_0, TF_Q4_1, TF_Q8_0, TF_Q4_K, TF_Q6_K, TF_Q5_0,
                                     TF_Q5_1, TF_Q2_K, TF_Q3_K, TF_Q5_K, TF_IQ4_NL, TF_IQ4_XS};
#define N_QUANTIZED (sizeof quantized / sizeof *quantized)

static tf_tensor *random_f32(int64_t rows, int64_t k, unsigned seed) {
    float *v = malloc(sizeof(float) * (size_t)(rows * k));
    srand(seed);
    for (int64_t i = 0; i < rows * k; i++) v[i] = (float)rand() / RAND_MAX * 2 - 1;
    int64_t shape[2] = {rows, k};
    tf_tensor *t = tensor_f32(cpu_device(), 2, shape, v);
    free(v);
    return t;
}

static tf_tensor *quantize(const tf_tensor *t, tf_dtype dt) {
    tf_tensor *q = NULL;
    OK(tf_cast(t, dt, &q));
    return q;
}

static void read_all(const tf_tensor *t, float *v) {
    OK(tf_tensor_read(t, v, sizeof(float) * (size_t)tf_tensor_numel(t)));
}

static void test_dtype_facts(void **state) {
    (void)state;
    static const struct { tf_dtype dt; const char *name; size_t block, bytes; } facts[] = {
        {TF_Q4_0, "q4_0", 32, 18}, {TF_Q4_1, "q4_1", 32, 20}, {TF_Q8_0, "q8_0", 32, 34},
        {TF_Q4_K, "q4_k", 256, 144}, {TF_Q6_K, "q6_k", 256, 210}, {TF_Q5_0, "q5_0", 32, 22},
        {TF_Q5_1, "q5_1", 32, 24}, {TF_Q2_K, "q2_k", 256, 84}, {TF_Q3_K, "q3_k", 256, 110},
        {TF_Q5_K, "q5_k", 256, 176}, {TF_IQ4_NL, "iq4_nl", 32, 18}, {TF_IQ4_XS, "iq4_xs", 256, 136},
    };
    for (size_t i = 0; i < sizeof facts / sizeof *facts; i++) {
        assert_string_equal(tf_dtype_name(facts[i].dt), facts[i].name);
        assert_int_equal(tf_dtype_block_size(facts[i].dt), facts[i].block);
        assert_int_equal(tf_dtype_size(facts[i].dt), facts[i].bytes);
        assert_true(tf_dtype_is_quantized(facts[i].dt));
        assert_false(tf_dtype_is_float(facts[i].dt) || tf_dtype_is_integer(facts[i].dt));
    }
    assert_int_equal(TF_Q4_0, 9);                        /* ABI: after the element dtypes, in order */
    assert_int_equal(TF_Q6_K, 13);
    assert_int_equal(TF_Q5_0, 14);
    assert_int_equal(TF_IQ4_XS, 20);
    assert_int_equal(TF_C64, 21);                       /* the complex dtypes follow, appended */
    assert_int_equal(TF_C128, 22);
    assert_int_equal(TF_DTYPE_COUNT, 23);               /* caps.dtypes is a 32-bit mask */
    int64_t shape[2] = {3, 64};
    tf_tensor *t = NULL;
    OK(tf_empty(cpu_device(), TF_Q4_K, 1, (int64_t[]){512}, &t));
    assert_int_equal(tf_tensor_nbytes(t), 2 * 144);
    tf_tensor_release(t);
    OK(tf_empty(cpu_device(), TF_F16, 2, shape, &t));
    assert_int_equal(tf_tensor_nbytes(t), 3 * 64 * 2);
    tf_tensor_release(t);
    assert_int_equal(tf_dtype_block_size(TF_F32), 1);
    assert_false(tf_dtype_is_quantized(TF_F32));
    assert_int_equal(tf_dtype_block_size(TF_DTYPE_COUNT), 0);
    tf_dtype out;
    FAILS_WITH(TF_ERR_DTYPE, "does not promote", tf_promote_types(TF_Q8_0, TF_F32, &out));
}

static void test_shapes_are_whole_blocks(void **state) {
    (void)state;
    tf_tensor *t = (tf_tensor *)1;
    int64_t bad[2] = {3, 48}, good[2] = {3, 64}, k_bad[1] = {64};
    FAILS_WITH(TF_ERR_SHAPE, "whole number of 32-element blocks", tf_empty(cpu_device(), TF_Q4_0, 2, bad, &t));
    assert_null(t);
    FAILS_WITH(TF_ERR_SHAPE, "256-element blocks", tf_empty(cpu_device(), TF_Q4_K, 1, k_bad, &t));
    FAILS_WITH(TF_ERR_SHAPE, "blocks", tf_empty(cpu_device(), TF_Q8_0, 0, NULL, &t));
    OK(tf_empty(cpu_device(), TF_Q8_0, 2, good, &t));
    tf_tensor_release(t);
    FAILS_WITH(TF_ERR_DTYPE, "fill", tf_zeros(cpu_device(), TF_Q4_0, 2, good, &t));
    assert_null(t);
}

/* Rows: slices along the first axis are views and decode as the matching
 * rows of the whole; anything that would split a block is refused. */
static void test_views_pick_whole_rows(void **state) {
    (void)state;
    tf_tensor *f = random_f32(6, 64, 1), *q = quantize(f, TF_Q4_1), *rows = NULL, *v = NULL, *part = NULL, *all = NULL;
    OK(tf_slice(q, 0, 2, 5, 1, &rows));
    OK(tf_cast(rows, TF_F32, &part));
    OK(tf_cast(q, TF_F32, &all));
    float a[6 * 64], p[3 * 64];
    read_all(all, a);
    read_all(part, p);
    assert_memory_equal(p, a + 2 * 64, sizeof p);
    OK(tf_slice(q, 1, 32, 64, 1, &v));                   /* the second block of every row */
    tf_tensor *second = NULL;
    OK(tf_cast(v, TF_F32, &second));
    float s[6 * 32];
    read_all(second, s);
    for (int r = 0; r < 6; r++) assert_memory_equal(s + 32 * r, a + 64 * r + 32, sizeof(float) * 32);
    tf_tensor_release(second);
    tf_tensor_release(v);
    v = (tf_tensor *)1;
    FAILS_WITH(TF_ERR_DTYPE, "split", tf_slice(q, 1, 16, 48, 1, &v));
    FAILS_WITH(TF_ERR_DTYPE, "split", tf_transpose(q, 0, 1, &v));
    FAILS_WITH(TF_ERR_DTYPE, "split", tf_slice(q, 1, 0, 64, 2, &v));
    assert_null(v);
    int64_t flat[1] = {6 * 64};
    OK(tf_reshape(q, 1, flat, &v));                      /* whole rows run into one: still whole blocks */
    tf_tensor_release(v);
    tf_tensor *list[] = {f, q, rows, part, all};
    for (int i = 0; i < 5; i++) tf_tensor_release(list[i]);
}

static void test_other_ops_refuse(void **state) {
    (void)state;
    tf_tensor *f = random_f32(2, 32, 2), *q = quantize(f, TF_Q8_0), *o = (tf_tensor *)1;
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_add(q, q, &o));
    assert_null(o);
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_add(f, q, &o));
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_exp(q, &o));
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_sum(q, TF_ALL_AXES, false, &o));
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_softmax(q, -1, &o));
    FAILS_WITH(TF_ERR_DTYPE, "q8_0", tf_matmul(f, q, &o));
    FAILS_WITH(TF_ERR_DTYPE, "float dtypes only", tf_cast(q, TF_I32, &o));
    tf_tensor *ints = NULL;
    OK(tf_cast(f, TF_I32, &ints));
    FAILS_WITH(TF_ERR_DTYPE, "float dtypes only", tf_cast(ints, TF_Q4_0, &o));
    assert_null(o);
    FAILS_WITH(TF_ERR_DTYPE, ".npy files of tensorframe hold no q8_0", tf_npy_save("/tmp/tf_test_quant.npy", q));
    const char *names[1] = {"q"};
    const tf_tensor *ts[1] = {q};
    FAILS_WITH(TF_ERR_DTYPE, "safetensors has no q8_0", tf_safetensors_save("/tmp/tf_test_quant.st", 1, names, ts));
    tf_tensor *idx = NULL;
    int64_t one = 1;
    int32_t zero = 0;
    OK(tf_tensor_from_data(cpu_device(), TF_I32, 1, &one, &zero, &idx));
    FAILS_WITH(TF_ERR_DTYPE, "whole rows", tf_index_select(q, 1, idx, &o));
    tf_tensor_release(idx);
    tf_tensor_release(ints);
    tf_tensor_release(f);
    tf_tensor_release(q);
}

/* A quantized table's rows come out as f32, equal to the decoded table's. */
static void test_embedding_decodes_rows(void **state) {
    (void)state;
    for (size_t t = 0; t < N_QUANTIZED; t++) {
        int64_t k = (int64_t)tf_dtype_block_size(quantized[t]);
        tf_tensor *f = random_f32(10, k, 3), *q = quantize(f, quantized[t]), *all = NULL, *ids = NULL, *e = NULL;
        OK(tf_cast(q, TF_F32, &all));
        int64_t n = 3;
        int64_t id[3] = {7, 0, 7};
        OK(tf_tensor_from_data(cpu_device(), TF_I64, 1, &n, id, &ids));
        OK(tf_embedding(q, ids, &e));
        assert_int_equal(tf_tensor_dtype(e), TF_F32);
        float *a = malloc(sizeof(float) * 10 * (size_t)k), *g = malloc(sizeof(float) * 3 * (size_t)k);
        read_all(all, a);
        read_all(e, g);
        for (int i = 0; i < 3; i++) assert_memory_equal(g + i * k, a + id[i] * k, sizeof(float) * (size_t)k);
        free(a);
        free(g);
        tf_tensor *list[] = {f, q, all, ids, e};
        for (int i = 0; i < 5; i++) tf_tensor_release(list[i]);
    }
}

/* The activation rounding: the SIMD version gives the scalar one's bytes,
 * ties go away from zero, and the sums are the codes'. */
static void test_activation_rounding(void **state) {
    (void)state;
    tf_cpu_q8_round_row_fn round_row = (tf_cpu_q8_round_row_fn)tf_backend_proc_address("cpu", "tf_cpu_q8_round_row");
    assert_non_null(round_row);
    enum { K = 256 };
    float x[K];
    for (int i = 0; i < K; i++) x[i] = (float)sin(i * 1.7) * (float)(1 + i % 5);
    x[0] = 127;                                        /* block 0: d = 1, so x / d is x itself */
    x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.49f, x[4] = -0.0f, x[5] = -126.5f, x[6] = 0.5f;
    for (int i = 64; i < 96; i++) x[i] = 0;             /* block 2: all zero, d = 0 */
    int8_t q[2][K];
    float d[2][K / 32], ds[2][K / 32];
    int32_t sums[2][K / 16];
    unsetenv("TF_CPU_QDOT");
    round_row(x, K, q[0], d[0], sums[0], ds[0]);
    setenv("TF_CPU_QDOT", "scalar", 1);
    round_row(x, K, q[1], d[1], sums[1], ds[1]);
    unsetenv("TF_CPU_QDOT");
    assert_memory_equal(q[0], q[1], K);
    assert_memory_equal(d[0], d[1], sizeof d[0]);
    assert_memory_equal(sums[0], sums[1], sizeof sums[0]);
    assert_memory_equal(ds[0], ds[1], sizeof ds[0]);
    assert_true(d[0][0] == 1.0f && d[0][2] == 0.0f);
    const int8_t want[7] = {127, 3, -3, 0, 0, -127, 1};
    assert_memory_equal(q[0], want, 7);
    for (int h = 0; h < K / 16; h++) {
        int32_t sum = 0;
        for (int i = 0; i < 16; i++) sum += q[0][16 * h + i];
        assert_int_equal(sums[0][h], sum);
    }
}

/* A NaN or an infinity in an activation reaches the product, through the
 * SIMD rounding and the scalar one: the 8-bit rounding once dropped a NaN
 * (the block's max skips it), and a model whose activations broke gave
 * finite garbage. Other rows and blocks keep their values. */
static void test_non_finite_activations_propagate(void **state) {
    (void)state;
    for (size_t t = 0; t < N_QUANTIZED; t++) {
        tf_tensor *w = random_f32(3, 256, 8), *q = quantize(w, quantized[t]);
        for (int scalar = 0; scalar < 2; scalar++) {
            float xv[3 * 256];
            for (int i = 0; i < 3 * 256; i++) xv[i] = (float)cos(i * 0.3);
            xv[5] = NAN;                                   /* row 0, block 0 */
            xv[256 + 40] = -INFINITY;                      /* row 1, block 1 */
            tf_tensor *x = NULL, *y = NULL;
            OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, (int64_t[]){3, 256}, xv, &x));
            if (scalar) setenv("TF_CPU_QDOT", "scalar", 1);
            OK(tf_matmul_quantized(x, q, &y));
            unsetenv("TF_CPU_QDOT");
            float out[9];
            read_all(y, out);
            for (int j = 0; j < 3; j++) {
                if (!isnan(out[j]) || isfinite(out[3 + j]))
                    fail_msg("%s (%s): row 0 gives %g, row 1 %g (want NaN, non-finite)", tf_dtype_name(quantized[t]),
                             scalar ? "scalar" : "simd", out[j], out[3 + j]);
                if (!isfinite(out[6 + j])) fail_msg("%s: the finite row gives %g", tf_dtype_name(quantized[t]), out[6 + j]);
            }
            tf_tensor_release(x);
            tf_tensor_release(y);
        }
        tf_tensor_release(w);
        tf_tensor_release(q);
    }
}

/* Does the CPU's integer GEMM (VNNI) run here, as the ISA cap allows? */
static bool integer_gemm_here(void) {
    __builtin_cpu_init();
    const char *isa = getenv("TF_CPU_ISA");
    unsigned a, b, c, d;
    bool avx_vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);   /* CPUID's AVX-VNNI bit */
    return (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") && !(isa && *isa)) ||
           (avx_vnni && isa && !strcmp(isa, "avxvnni"));
}

/* The SIMD dot products against the scalar ones (same integers; only the
 * order of the f32 additions differs), for one row and a few, and for
 * many (the integer GEMM where the CPU has VNNI; TF_CPU_QDOT=scalar takes
 * the scalar dots for every row count); 37 weight rows leave a partial
 * group of 8, and the row counts every partial tile of activation rows. */
static void test_simd_matches_scalar(void **state) {
    (void)state;
    /* 5 to 11 and 13 leave every remainder of the GEMM's row tiles (6 and 4) */
    static const int64_t row_counts[] = {1, 5, 8, 9, 10, 11, 13, 30};
    int integer_many = 0;                      /* many-row products that took the integer GEMM */
    for (size_t t = 0; t < N_QUANTIZED; t++) {
        for (size_t mi = 0; mi < sizeof row_counts / sizeof *row_counts; mi++) {
            const int64_t m = row_counts[mi];
            tf_tensor *x = random_f32(m, 512, 4), *w = random_f32(37, 512, 5), *q = quantize(w, quantized[t]);
            tf_tensor *fast = NULL, *ref = NULL, *wd = NULL, *f32 = NULL;
            unsetenv("TF_CPU_QDOT");
            OK(tf_matmul_quantized(x, q, &fast));
            setenv("TF_CPU_QDOT", "scalar", 1);
            OK(tf_matmul_quantized(x, q, &ref));
            unsetenv("TF_CPU_QDOT");
            OK(tf_cast(q, TF_F32, &wd));                       /* without the 8-bit activations */
            OK(tf_gemm(x, wd, NULL, 1.0, 0.0, false, true, &f32));
            float a[30 * 37], b[30 * 37], e[30 * 37];
            read_all(fast, a);
            read_all(ref, b);
            read_all(f32, e);
            /* few rows: the scalar dots' integers. Many: the same (the
             * integer GEMM), or, on a CPU without VNNI, the f32 product of
             * decoded panels */
            bool like_scalar = true, like_f32 = m >= 12;
            for (int i = 0; i < m * 37; i++) {
                like_scalar = like_scalar && fabsf(a[i] - b[i]) <= 1e-4f * (1 + fabsf(b[i]));
                like_f32 = like_f32 && fabsf(a[i] - e[i]) <= 1e-4f * (1 + fabsf(e[i]));
            }
            if (!like_scalar && !like_f32)
                fail_msg("%s m %lld: the product matches neither the scalar dots nor the f32 one", tf_dtype_name(quantized[t]),
                         (long long)m);
            integer_many += m >= 12 && like_scalar && !like_f32;
            tf_tensor *list[] = {x, w, q, fast, ref, wd, f32};
            for (int i = 0; i < 7; i++) tf_tensor_release(list[i]);
        }
    }
    if (integer_gemm_here()) assert_int_equal(integer_many, 2 * (int)N_QUANTIZED);   /* every many-row case took the GEMM */
}

/* The products' arguments, and a GEMM of a quantized operand that is not
 * the plain weight (decoded first): alpha 2 is twice the plain product. */
static void test_products(void **state) {
    (void)state;
    tf_tensor *x = random_f32(3, 64, 6), *w = random_f32(5, 64, 7), *q = quantize(w, TF_Q4_0), *o = (tf_tensor *)1;
    FAILS_WITH(TF_ERR_DTYPE, "not a quantized dtype", tf_matmul_quantized(x, w, &o));
    assert_null(o);
    tf_tensor *xs = random_f32(3, 32, 8);
    FAILS_WITH(TF_ERR_SHAPE, "w must be [N, K]", tf_matmul_quantized(xs, q, &o));
    tf_tensor *plain = NULL, *twice = NULL, *xh = NULL, *half = NULL, *wd = NULL;
    OK(tf_cast(q, TF_F32, &wd));
    OK(tf_gemm(x, wd, NULL, 2.0, 0.0, false, true, &plain));
    OK(tf_gemm(x, q, NULL, 2.0, 0.0, false, true, &twice));
    float p[15], t2[15];
    read_all(plain, p);
    read_all(twice, t2);
    for (int i = 0; i < 15; i++) assert_true(fabsf(t2[i] - p[i]) <= 1e-5f * (1 + fabsf(p[i])));
    tf_tensor_release(wd);
    OK(tf_cast(x, TF_F16, &xh));                          /* the result has the activation's dtype */
    OK(tf_matmul_quantized(xh, q, &half));
    assert_int_equal(tf_tensor_dtype(half), TF_F16);
    tf_tensor *list[] = {x, w, q, xs, plain, twice, xh, half};
    for (int i = 0; i < 8; i++) tf_tensor_release(list[i]);
}

/* ---- weights packed once (cpu_packs.c) ---- */

static size_t pack_bytes(void) {
    tf_cpu_weight_pack_bytes_fn fn = (tf_cpu_weight_pack_bytes_fn)tf_backend_proc_address("cpu", "tf_cpu_weight_pack_bytes");
    assert_non_null(fn);
    return fn();
}

/* x @ w^T, and the scalar dots' result for the same operands. */
static void product_pair(const tf_tensor *x, const tf_tensor *q, float *fast, float *scalar) {
    tf_tensor *a = NULL, *b = NULL;
    OK(tf_matmul_quantized(x, q, &a));
    setenv("TF_CPU_QDOT", "scalar", 1);
    OK(tf_matmul_quantized(x, q, &b));
    unsetenv("TF_CPU_QDOT");
    read_all(a, fast);
    read_all(b, scalar);
    tf_tensor_release(a);
    tf_tensor_release(b);
}

static void expect_close(const float *a, const float *b, int n, const char *when) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-4f * (1 + fabsf(b[i])))) fail_msg("%s: element %d %.7g, scalar %.7g", when, i, a[i], b[i]);
}

/* Where the integer GEMM runs (VNNI), a product of a few rows keeps its
 * weight packed: the same results, the pack reused by the next call, and
 * not used once the weight is written - through an op, through
 * tf_tensor_write; gone with the weight. (A quantized tensor has no DLPack
 * form, so no raw pointer to one is handed out that way.) */
static void test_weight_packs(void **state) {
    (void)state;
    tf_tensor *x = random_f32(10, 256, 31), *w = random_f32(40, 256, 32), *q = quantize(w, TF_Q8_0);
    tf_tensor *w2 = random_f32(40, 256, 33), *q2 = quantize(w2, TF_Q8_0);
    float fast[10 * 40], scalar[10 * 40], again[10 * 40], scalar2[10 * 40];
    const size_t before = pack_bytes();
    product_pair(x, q, fast, scalar);
    expect_close(fast, scalar, 400, "first product");
    const size_t one = pack_bytes() - before;
    const char *budget = getenv("TF_CPU_WEIGHT_PACKS_MB");
    if (integer_gemm_here() && !(budget && !strcmp(budget, "0"))) assert_true(one > 0);
    else assert_int_equal(one, 0);                    /* no integer GEMM here, or packs off: nothing kept */
    product_pair(x, q, again, scalar);
    expect_close(again, scalar, 400, "second product (the kept pack)");
    assert_int_equal(pack_bytes() - before, one);     /* reused, not made again */

    /* a write through an op: the pack is stale, the product reads the new bytes */
    OK(tf_copy_into(q, q2));
    product_pair(x, q, again, scalar2);
    expect_close(again, scalar2, 400, "after tf_copy_into");
    tf_tensor *x_only = NULL;
    OK(tf_matmul_quantized(x, q2, &x_only));
    float direct[10 * 40];
    read_all(x_only, direct);
    expect_close(again, direct, 400, "after tf_copy_into, against the source weight");
    tf_tensor_release(x_only);

    /* a write from the host into a freshly packed weight */
    tf_tensor *q3 = quantize(w, TF_Q8_0);
    product_pair(x, q3, again, scalar);                  /* packs q3 */
    size_t q3_bytes = tf_dtype_size(TF_Q8_0) * 40 * 256 / 32;
    unsigned char *raw = malloc(q3_bytes);
    OK(tf_tensor_read(q2, raw, q3_bytes));
    OK(tf_tensor_write(q3, raw, q3_bytes));
    free(raw);
    product_pair(x, q3, again, scalar2);
    expect_close(again, direct, 400, "after tf_tensor_write");

    /* released: its packs go */
    const size_t held = pack_bytes();
    tf_tensor_release(q3);
    if (one) assert_true(pack_bytes() < held);
    tf_tensor *list[] = {x, w, q, w2, q2};
    for (int i = 0; i < 5; i++) tf_tensor_release(list[i]);
    assert_int_equal(pack_bytes(), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_facts),         cmocka_unit_test(test_shapes_are_whole_blocks),
        cmocka_unit_test(test_views_pick_whole_rows), cmocka_unit_test(test_other_ops_refuse),
        cmocka_unit_test(test_embedding_decodes_rows), cmocka_unit_test(test_simd_matches_scalar), cmocka_unit_test(test_activation_rounding),
        cmocka_unit_test(test_non_finite_activations_propagate),
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_weight_packs),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
