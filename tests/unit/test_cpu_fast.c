/* The CPU fast paths on sizes the conformance suite does not reach: streamed
 * stores, unaligned tails, the pool's splits, BLAS panels (plain, transposed,
 * batched, with c), blocked attention over several query and key blocks,
 * and two threads running large ops at once. Checked against float64 loops. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <tensorframe/backend.h>

#include "helpers.h"
#include "tensorframe/numerics.h"

static float *randv(int64_t n, uint64_t seed) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
    }
    return v;
}

static float *read_all(const tf_tensor *t) {
    float *v = malloc(sizeof(float) * (size_t)tf_tensor_numel(t) + 4);
    assert_int_equal(tf_tensor_read(t, v, sizeof(float) * (size_t)tf_tensor_numel(t)), TF_OK);
    return v;
}

/* NMSE of got against a double reference. */
static void expect_close(const char *what, const float *got, const double *want, int64_t n, double limit) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i])) fail_msg("%s: element %lld: got %g, want %g", what, (long long)i, got[i], want[i]);
        if (isnan(want[i])) continue;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    if (num > limit * (den > 0 ? den : 1)) fail_msg("%s: NMSE %g above %g", what, num / den, limit);
}

static void test_large_elementwise_and_sum(void **state) {
    (void)state;
    int64_t n = (3 << 20) + 7;                          /* past the streaming threshold, an odd tail */
    float *a = randv(n + 1, 1), *b = randv(n, 2);
    tf_tensor *ta = NULL, *tb = NULL, *off = NULL, *o = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, (int64_t[]){n + 1}, a, &ta));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &n, b, &tb));
    OK(tf_slice(ta, 0, 1, n + 1, 1, &off));             /* an input 4 bytes off alignment */
    double *want = malloc(sizeof(double) * (size_t)n);
    for (int op = 0; op < 5; op++) {
        tf_status s = op == 0 ? tf_add(off, tb, &o) : op == 1 ? tf_mul(off, tb, &o) : op == 2 ? tf_maximum(off, tb, &o)
                      : op == 3 ? tf_div(off, tb, &o) : tf_swiglu(off, tb, &o);
        OK(s);
        float *got = read_all(o);
        for (int64_t i = 0; i < n; i++) {
            double x = a[i + 1], y = b[i];
            want[i] = op == 0 ? x + y : op == 1 ? x * y : op == 2 ? fmax(x, y) : op == 3 ? x / y : x / (1 + exp(-x)) * y;
        }
        expect_close("large binary", got, want, n, op == 4 ? 1e-12 : 1e-13);
        free(got);
        tf_tensor_release(o);
    }
    tf_tensor *half = NULL;
    OK(tf_scalar(cpu_device(), TF_F32, 0.5, &half));
    OK(tf_mul(tb, half, &o));                           /* scalar broadcast */
    float *got = read_all(o);
    for (int64_t i = 0; i < n; i++) want[i] = b[i] * 0.5;
    expect_close("scalar broadcast", got, want, n, 1e-14);
    free(got);
    tf_tensor_release(o);
    OK(tf_sum(tb, TF_ALL_AXES, false, &o));
    float s;
    OK(tf_tensor_read(o, &s, sizeof s));
    double ws = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        ws += b[i];
        mag += fabs(b[i]);
    }
    assert_true(fabs(s - ws) <= 1e-6 * mag);
    tf_tensor *all[] = {ta, tb, off, o, half};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    free(a);
    free(b);
    free(want);
}

static void test_large_broadcast_copy_and_half_matmul(void **state) {
    (void)state;
    int64_t R = 1500, C = 700, shape[2] = {R, C};
    float *x = randv(R * C, 21), *bias = randv(C, 22);
    tf_tensor *tx = NULL, *tb = NULL, *o = NULL, *tt = NULL, *c = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, shape, x, &tx));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &C, bias, &tb));
    OK(tf_add(tx, tb, &o));                              /* rows of the pool, vectorized with a broadcast */
    double *want = malloc(sizeof(double) * (size_t)(R * C));
    for (int64_t i = 0; i < R * C; i++) want[i] = (double)x[i] + bias[i % C];
    float *got = read_all(o);
    expect_close("bias add", got, want, R * C, 1e-14);
    free(got);
    OK(tf_transpose(tx, 0, 1, &tt));
    OK(tf_contiguous(tt, &c));                           /* a large strided copy */
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < R; j++) want[i * R + j] = x[j * C + i];
    got = read_all(c);
    expect_close("transposed copy", got, want, R * C, 0);
    free(got);
    tf_tensor_release(o);
    tf_tensor_release(c);
    /* bf16 and f16 matmul: f32 panels through sgemm */
    int64_t M = 130, K = 200, N = 150, sa[2] = {M, K}, sb[2] = {K, N};
    float *a = randv(M * K, 23), *b = randv(K * N, 24);
    for (int half = 0; half < 2; half++) {
        tf_dtype dt = half ? TF_F16 : TF_BF16;
        tf_tensor *ta32 = NULL, *tb32 = NULL, *ta = NULL, *tbb = NULL, *tp = NULL, *p32 = NULL;
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa, a, &ta32));
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sb, b, &tb32));
        OK(tf_cast(ta32, dt, &ta));
        OK(tf_cast(tb32, dt, &tbb));
        tf_tensor *a_back = NULL, *b_back = NULL;
        OK(tf_cast(ta, TF_F32, &a_back));                /* the values the product really sees */
        OK(tf_cast(tbb, TF_F32, &b_back));
        float *av = read_all(a_back), *bv = read_all(b_back);
        OK(tf_matmul(ta, tbb, &tp));
        assert_int_equal(tf_tensor_dtype(tp), dt);
        OK(tf_cast(tp, TF_F32, &p32));
        double *w = malloc(sizeof(double) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t kk = 0; kk < K; kk++) acc += (double)av[i * K + kk] * bv[kk * N + j];
                w[i * N + j] = acc;
            }
        got = read_all(p32);
        expect_close(half ? "f16 matmul" : "bf16 matmul", got, w, M * N, half ? 1e-6 : 1e-4);
        free(got);
        free(w);
        free(av);
        free(bv);
        tf_tensor *all[] = {ta32, tb32, ta, tbb, tp, p32, a_back, b_back};
        for (int q = 0; q < 8; q++) tf_tensor_release(all[q]);
    }
    tf_tensor_release(tx);
    tf_tensor_release(tb);
    tf_tensor_release(tt);
    free(x);
    free(bias);
    free(want);
    free(a);
    free(b);
}

static void test_large_rows(void **state) {
    (void)state;
    int64_t rows = 300, cols = 1031, n = rows * cols, shape[2] = {rows, cols};
    float *x = randv(n, 3), *w = randv(cols, 4), *b = randv(cols, 5);
    x[7 * cols + 3] = NAN;                              /* one row takes the reference path */
    tf_tensor *tx = NULL, *tw = NULL, *tb = NULL, *o = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, shape, x, &tx));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &cols, w, &tw));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &cols, b, &tb));
    double *want = malloc(sizeof(double) * (size_t)n);
    for (int op = 0; op < 4; op++) {
        OK(op == 0 ? tf_softmax(tx, -1, &o) : op == 1 ? tf_log_softmax(tx, -1, &o) : op == 2 ? tf_rmsnorm(tx, tw, 1e-6, &o)
                                                                                                : tf_layernorm(tx, tw, tb, 1e-5, &o));
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * cols;
            double m = -INFINITY, sum = 0, mean = 0, ss = 0;
            for (int64_t c = 0; c < cols; c++) {
                m = isnan(xr[c]) || xr[c] > m ? xr[c] : m;
                mean += xr[c];
            }
            mean /= cols;
            for (int64_t c = 0; c < cols; c++) {
                sum += exp(xr[c] - m);
                ss += op == 3 ? (xr[c] - mean) * (xr[c] - mean) : (double)xr[c] * xr[c];
            }
            for (int64_t c = 0; c < cols; c++) {
                double v;
                if (op == 0) v = exp(xr[c] - m) / sum;
                else if (op == 1) v = xr[c] - m - log(sum);
                else if (op == 2) v = xr[c] / sqrt(ss / cols + 1e-6) * w[c];
                else v = (xr[c] - mean) / sqrt(ss / cols + 1e-5) * w[c] + b[c];
                want[r * cols + c] = v;
            }
        }
        float *got = read_all(o);
        expect_close("large rows", got, want, n, 1e-11);
        free(got);
        tf_tensor_release(o);
    }
    tf_tensor_release(tx);
    tf_tensor_release(tw);
    tf_tensor_release(tb);
    free(x);
    free(w);
    free(b);
    free(want);
}

static void test_blas_paths(void **state) {
    (void)state;
    int64_t M = 300, K = 257, N = 190, sa[2] = {K, M}, sb[2] = {K, N}, sc[1] = {N};
    float *a = randv(M * K, 6), *b = randv(K * N, 7), *c = randv(N, 8);
    tf_tensor *ta = NULL, *at = NULL, *tb = NULL, *tc = NULL, *o = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa, a, &ta));   /* stored [K, M]: used transposed */
    OK(tf_transpose(ta, 0, 1, &at));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sb, b, &tb));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, sc, c, &tc));
    OK(tf_gemm(at, tb, tc, 0.5, 2.0, false, false, &o));
    double *want = malloc(sizeof(double) * (size_t)(M * N));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)a[k * M + i] * b[k * N + j];
            want[i * N + j] = 0.5 * acc + 2.0 * c[j];
        }
    float *got = read_all(o);
    expect_close("gemm, transposed a", got, want, M * N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* fewer rows than columns, w stored [N, K] as a linear layer's: the pool
     * splits the columns (the first case split rows) */
    {
        int64_t m2 = 100, n2 = 333, k2 = 200;
        float *x2 = randv(m2 * k2, 11), *w2v = randv(n2 * k2, 12), *bias2 = randv(n2, 13);
        tf_tensor *tx2 = NULL, *tw2 = NULL, *tb2 = NULL, *o2 = NULL;
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, (int64_t[]){m2, k2}, x2, &tx2));
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, (int64_t[]){n2, k2}, w2v, &tw2));
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &n2, bias2, &tb2));
        OK(tf_gemm(tx2, tw2, tb2, 1.0, 1.0, false, true, &o2));
        double *want2 = malloc(sizeof(double) * (size_t)(m2 * n2));
        for (int64_t i = 0; i < m2; i++)
            for (int64_t j = 0; j < n2; j++) {
                double acc = bias2[j];
                for (int64_t k = 0; k < k2; k++) acc += (double)x2[i * k2 + k] * w2v[j * k2 + k];
                want2[i * n2 + j] = acc;
            }
        float *got2 = read_all(o2);
        expect_close("gemm, w transposed, bias, split by columns", got2, want2, m2 * n2, 1e-12);
        free(got2);
        free(want2);
        free(x2);
        free(w2v);
        free(bias2);
        tf_tensor *t2[] = {tx2, tw2, tb2, o2};
        for (int i = 0; i < 4; i++) tf_tensor_release(t2[i]);
    }
    /* batched: row panels inside the pool */
    int64_t bs[3] = {3, 64, 96}, bw[2] = {96, 80};
    float *x = randv(3 * 64 * 96, 9), *y = randv(96 * 80, 10);
    tf_tensor *tx = NULL, *ty = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 3, bs, x, &tx));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, bw, y, &ty));
    OK(tf_matmul(tx, ty, &o));
    double *w2 = malloc(sizeof(double) * 3 * 64 * 80);
    for (int64_t p = 0; p < 3; p++)
        for (int64_t i = 0; i < 64; i++)
            for (int64_t j = 0; j < 80; j++) {
                double acc = 0;
                for (int64_t k = 0; k < 96; k++) acc += (double)x[(p * 64 + i) * 96 + k] * y[k * 80 + j];
                w2[(p * 64 + i) * 80 + j] = acc;
            }
    got = read_all(o);
    expect_close("batched matmul", got, w2, 3 * 64 * 80, 1e-12);
    free(got);
    tf_tensor *all[] = {ta, at, tb, tc, o, tx, ty};
    for (int i = 0; i < 7; i++) tf_tensor_release(all[i]);
    free(a);
    free(b);
    free(c);
    free(x);
    free(y);
    free(want);
    free(w2);
}

static void test_skinny_products(void **state) {
    (void)state;
    static const int64_t shapes[3][3] = {{3, 1000, 301}, {700, 2, 513}, {1, 4096, 130}};   /* k tails */
    for (int c = 0; c < 3; c++) {
        int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2], sa[2] = {M, K}, sb[2] = {K, N};
        float *a = randv(M * K, 30 + c), *b = randv(K * N, 40 + c);
        tf_tensor *ta = NULL, *tb = NULL, *o = NULL;
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa, a, &ta));
        OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sb, b, &tb));
        OK(tf_matmul(ta, tb, &o));
        double *w = malloc(sizeof(double) * (size_t)(M * N));
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) acc += (double)a[i * K + k] * b[k * N + j];
                w[i * N + j] = acc;
            }
        float *got = read_all(o);
        expect_close("skinny matmul", got, w, M * N, 1e-12);
        free(got);
        free(w);
        free(a);
        free(b);
        tf_tensor_release(ta);
        tf_tensor_release(tb);
        tf_tensor_release(o);
    }
}

/* One output row (a decode step): the GEMV path, with b stored as [n, k]
 * (a linear layer's weight) or [k, n], a bias through gemm's c, a strided
 * a, a batch of single rows, and f64. */
static void test_single_row_products(void **state) {
    (void)state;
    const int64_t N = 9001, K = 577;        /* several slices of the outputs per thread pool */
    float *a = randv(2 * K, 50), *w = randv(N * K, 51), *c = randv(N, 52);
    int64_t sw[2] = {N, K}, sa[2] = {1, K}, sc[1] = {N}, sa2[2] = {K, 2}, sb3[3] = {2, 1, K};
    tf_tensor *ta = NULL, *tw = NULL, *tc = NULL, *o = NULL, *wt = NULL, *ta2 = NULL, *col = NULL, *colt = NULL, *t3 = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa, a, &ta));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sw, w, &tw));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, sc, c, &tc));
    double *want = malloc(sizeof(double) * (size_t)(2 * N));
    for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (double)a[k] * w[j * K + k];
        want[j] = acc;
    }
    /* a @ w^T with w stored [N, K] */
    OK(tf_gemm(ta, tw, NULL, 1.0, 0.0, false, true, &o));
    float *got = read_all(o);
    expect_close("single row, b transposed", got, want, N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* 0.5 * a @ w^T + 2 * c */
    double *biased = malloc(sizeof(double) * (size_t)N);
    for (int64_t j = 0; j < N; j++) biased[j] = 0.5 * want[j] + 2.0 * c[j];
    OK(tf_gemm(ta, tw, tc, 0.5, 2.0, false, true, &o));
    got = read_all(o);
    expect_close("single row with bias", got, biased, N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* b stored [K, N]: the same product from w^T made contiguous */
    tf_tensor *wtc = NULL;
    OK(tf_transpose(tw, 0, 1, &wt));
    OK(tf_contiguous(wt, &wtc));
    OK(tf_matmul(ta, wtc, &o));
    got = read_all(o);
    expect_close("single row, b plain", got, want, N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* b stored [K, N] with a bias: BLAS's GEMV on column slices */
    OK(tf_gemm(ta, wtc, tc, 0.5, 2.0, false, false, &o));
    got = read_all(o);
    expect_close("single row, b plain, with bias", got, biased, N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* a strided: column 0 of a [K, 2] matrix, transposed to [1, K] */
    float *a2 = malloc(sizeof(float) * (size_t)(2 * K));
    for (int64_t k = 0; k < K; k++) a2[2 * k] = a[k], a2[2 * k + 1] = 99;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa2, a2, &ta2));
    OK(tf_slice(ta2, 1, 0, 1, 1, &col));
    OK(tf_transpose(col, 0, 1, &colt));
    OK(tf_gemm(colt, tw, NULL, 1.0, 0.0, false, true, &o));
    got = read_all(o);
    expect_close("single strided row", got, want, N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* a batch of two single rows */
    for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (double)a[K + k] * w[j * K + k];
        want[N + j] = acc;
    }
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 3, sb3, a, &t3));
    OK(tf_gemm(t3, tw, NULL, 1.0, 0.0, false, true, &o));
    got = read_all(o);
    expect_close("batch of single rows", got, want, 2 * N, 1e-12);
    free(got);
    tf_tensor_release(o);
    /* f64 */
    tf_tensor *a64 = NULL, *w64 = NULL;
    OK(tf_cast(ta, TF_F64, &a64));
    OK(tf_cast(tw, TF_F64, &w64));
    OK(tf_gemm(a64, w64, NULL, 1.0, 0.0, false, true, &o));
    double *got64 = malloc(sizeof(double) * (size_t)N);
    OK(tf_tensor_read(o, got64, sizeof(double) * (size_t)N));
    for (int64_t j = 0; j < N; j++)
        if (fabs(got64[j] - want[j]) > 1e-9 * (1 + fabs(want[j]))) fail_msg("f64 single row %lld: %g vs %g", (long long)j, got64[j], want[j]);
    free(got64);
    tf_tensor *all[] = {ta, tw, tc, o, wt, wtc, ta2, col, colt, t3, a64, w64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tf_tensor_release(all[i]);
    free(a);
    free(a2);
    free(w);
    free(c);
    free(want);
    free(biased);
}

static uint16_t *half_bits(int64_t n, uint64_t seed) {   /* every bit pattern: NaN, inf, subnormals */
    uint16_t *v = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (uint16_t)(seed >> 48);
    }
    return v;
}

static float half_value(tf_dtype dt, uint16_t h) { return dt == TF_BF16 ? tf_bf16_to_f32(h) : tf_f16_to_f32(h); }

/* f16/bf16 elementwise: widened blocks, the f32 kernel, one rounding; bit
 * for bit what the reference computes (f32 arithmetic, round to nearest
 * even), NaNs only required to stay NaN. */
static void test_half_elementwise(void **state) {
    (void)state;
    int64_t n = 200003;                                  /* several pool chunks and a ragged tail */
    for (int d = 0; d < 2; d++) {
        tf_dtype dt = d ? TF_BF16 : TF_F16;
        uint16_t *a = half_bits(n, 50 + d), *b = half_bits(n, 60 + d), *got = malloc(sizeof(uint16_t) * (size_t)n);
        tf_tensor *ta = NULL, *tb = NULL, *ts = NULL, *o = NULL;
        OK(tf_tensor_from_data(cpu_device(), dt, 1, &n, a, &ta));
        OK(tf_tensor_from_data(cpu_device(), dt, 1, &n, b, &tb));
        OK(tf_tensor_from_data(cpu_device(), dt, 0, NULL, b + 7, &ts));
        for (int op = 0; op < 4; op++) {
            const tf_tensor *rhs = op == 3 ? ts : tb;
            OK(op == 0 ? tf_add(ta, rhs, &o) : op == 1 ? tf_mul(ta, rhs, &o) : op == 2 ? tf_maximum(ta, rhs, &o)
                                                                                 : tf_sub(ta, rhs, &o));
            OK(tf_tensor_read(o, got, sizeof(uint16_t) * (size_t)n));
            for (int64_t i = 0; i < n; i++) {
                float x = half_value(dt, a[i]), y = half_value(dt, op == 3 ? b[7] : b[i]);
                float r = op == 0 ? x + y : op == 1 ? x * y : op == 2 ? (x != x || y != y ? x + y : x > y ? x : y) : x - y;
                uint16_t want = dt == TF_BF16 ? tf_f32_to_bf16(r) : tf_f32_to_f16(r);
                float gv = half_value(dt, got[i]);
                if (r != r ? gv == gv : got[i] != want)
                    fail_msg("%s op %d element %lld: %#x op %#x gave %#x, want %#x", tf_dtype_name(dt), op, (long long)i,
                             a[i], op == 3 ? b[7] : b[i], got[i], want);
            }
            tf_tensor_release(o);
        }
        tf_tensor_release(ta);
        tf_tensor_release(tb);
        tf_tensor_release(ts);
        free(a);
        free(b);
        free(got);
    }
}

/* Decode-shaped matmuls: a few rows against a weight stored row-major [k, n]
 * and as a linear layer's [n, k] (x @ W^T; for bf16 the dot-product path
 * where the CPU has AVX512-BF16), in f16, bf16 and f32, with tails in k and n. */
static void test_half_skinny_matmul(void **state) {
    (void)state;
    int64_t K = 301, N = 200;                           /* tails: k % 4, k % 32, n % 64 */
    static const tf_dtype dts[3] = {TF_F16, TF_BF16, TF_F32};   /* f32 for its own A @ W^T kernel */
    for (int d = 0; d < 3; d++)
        for (int layout = 0; layout < 2; layout++)
            for (int64_t M = 1; M <= 8; M += 3) {
                tf_dtype dt = dts[d];
                int64_t sa[2] = {M, K}, sw[2] = {layout ? N : K, layout ? K : N};
                float *a = randv(M * K, 70 + M), *w = randv(K * N, 80 + layout);
                tf_tensor *a32 = NULL, *w32 = NULL, *ta = NULL, *tw = NULL, *tb = NULL, *o = NULL, *o32 = NULL;
                OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sa, a, &a32));
                OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, sw, w, &w32));
                OK(tf_cast(a32, dt, &ta));
                OK(tf_cast(w32, dt, &tw));
                if (layout) OK(tf_transpose(tw, 0, 1, &tb));
                else tb = tf_tensor_retain(tw);
                OK(tf_matmul(ta, tb, &o));
                assert_int_equal(tf_tensor_dtype(o), dt);
                OK(tf_cast(o, TF_F32, &o32));
                tf_tensor *back_a = NULL, *back_w = NULL;
                OK(tf_cast(ta, TF_F32, &back_a));
                OK(tf_cast(tw, TF_F32, &back_w));
                float *av = read_all(back_a), *wv = read_all(back_w), *got = read_all(o32);
                double *want = malloc(sizeof(double) * (size_t)(M * N));
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double acc = 0;
                        for (int64_t k = 0; k < K; k++) acc += (double)av[i * K + k] * (layout ? wv[j * K + k] : wv[k * N + j]);
                        want[i * N + j] = acc;
                    }
                static const double limit[3] = {5e-7, 3e-5, 1e-12};
                expect_close(tf_dtype_name(dt), got, want, M * N, limit[d]);
                tf_tensor *all[] = {a32, w32, ta, tw, tb, o, o32, back_a, back_w};
                for (int q = 0; q < 9; q++) tf_tensor_release(all[q]);
                free(a);
                free(w);
                free(av);
                free(wv);
                free(got);
                free(want);
            }
}

static void test_blocked_attention(void **state) {
    (void)state;
    int64_t B = 1, Hq = 4, Hkv = 2, Lq = 150, Lk = 300, D = 64, qs[4] = {B, Hq, Lq, D}, ks[4] = {B, Hkv, Lk, D},
            ms[2] = {Lq, Lk};
    float *q = randv(B * Hq * Lq * D, 11), *k = randv(B * Hkv * Lk * D, 12), *v = randv(B * Hkv * Lk * D, 13),
          *mask = randv(Lq * Lk, 14);
    tf_tensor *tq = NULL, *tk = NULL, *tv = NULL, *tm = NULL, *o = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 4, qs, q, &tq));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 4, ks, k, &tk));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 4, ks, v, &tv));
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, ms, mask, &tm));
    int64_t q_offset = Lk - Lq;                          /* decoding the last Lq positions */
    OK(tf_sdpa(tq, tk, tv, tm, 0, true, -1, &o));
    double *want = malloc(sizeof(double) * (size_t)(B * Hq * Lq * D)), *p = malloc(sizeof(double) * (size_t)Lk);
    double scale = 1 / sqrt((double)D);
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < Lq; i++) {
            int64_t kh = h / (Hq / Hkv);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < Lk; j++) {
                p[j] = -INFINITY;
                if (j > q_offset + i) continue;
                double s = 0;
                for (int64_t d = 0; d < D; d++) s += (double)q[(h * Lq + i) * D + d] * k[(kh * Lk + j) * D + d];
                p[j] = s * scale + mask[i * Lk + j];
                mx = fmax(mx, p[j]);
            }
            for (int64_t j = 0; j < Lk; j++) sum += (p[j] = exp(p[j] - mx));
            for (int64_t e = 0; e < D; e++) {
                double acc = 0;
                for (int64_t j = 0; j < Lk; j++) acc += p[j] * v[(kh * Lk + j) * D + e];
                want[(h * Lq + i) * D + e] = acc / sum;
            }
        }
    float *got = read_all(o);
    expect_close("blocked attention", got, want, B * Hq * Lq * D, 1e-11);
    free(got);
    tf_tensor *all[] = {tq, tk, tv, tm, o};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    free(q);
    free(k);
    free(v);
    free(mask);
    free(want);
    free(p);
}

static void *large_adds(void *arg) {
    int64_t n = 1 << 20;
    tf_tensor *a = NULL, *o = NULL, *s = NULL;
    float total = 0;
    bool ok = tf_full(cpu_device(), TF_F32, 1, &n, 0.25, &a) == TF_OK;
    for (int i = 0; ok && i < 20; i++) {
        ok = tf_add(a, a, &o) == TF_OK && tf_sum(o, TF_ALL_AXES, false, &s) == TF_OK &&
             tf_tensor_read(s, &total, sizeof total) == TF_OK && total == 0.5f * (float)n;
        tf_tensor_release(o);
        tf_tensor_release(s);
    }
    tf_tensor_release(a);
    return ok ? arg : NULL;
}

/* tf_linear through both fast kernels, f32, bf16 and f16 weights under f32
 * activations: the dot products (fewer than 12 rows) and the panel kernel
 * (from 12: W packed into L1 per panel of 16 columns, 256 of k per panel,
 * 384 rows per task). Edge tiles in both directions, k tails shorter than a
 * vector and k past one block, several row blocks, with and without a bias.
 * Each element is held to its own bound: 1e-6 of sum |x w|. */
static void test_linear_layers(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 5, 16},   {7, 97, 100},  {13, 3, 800},  {31, 50, 17},
                                        {5, 2, 1030}, {40, 66, 130}, {100, 37, 1600}, {127, 9, 800},
                                        {12, 33, 257}, {24, 200, 384}, {390, 45, 517}, {800, 17, 40}};
    static const tf_dtype wdt[] = {TF_F32, TF_BF16, TF_F16};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++)
        for (size_t d = 0; d < 3; d++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                int64_t M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
                float *x = randv(M * K, 50 + c), *w = randv(N * K, 60 + c), *b = randv(N, 70 + c);
                tf_tensor *tx = NULL, *tw32 = NULL, *tw = NULL, *wback = NULL, *tb = NULL, *o = NULL;
                OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, (int64_t[]){M, K}, x, &tx));
                OK(tf_tensor_from_data(cpu_device(), TF_F32, 2, (int64_t[]){N, K}, w, &tw32));
                OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &N, b, &tb));
                OK(tf_cast(tw32, wdt[d], &tw));
                OK(tf_cast(tw, TF_F32, &wback));                 /* the weight's values as stored */
                float *wv = read_all(wback);
                OK(tf_linear(tx, tw, with_bias ? tb : NULL, &o));
                assert_int_equal(tf_tensor_dtype(o), TF_F32);
                float *got = read_all(o);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double acc = with_bias ? b[j] : 0, mag = fabs(acc);
                        for (int64_t k = 0; k < K; k++) {
                            acc += (double)x[i * K + k] * wv[j * K + k];
                            mag += fabs((double)x[i * K + k] * wv[j * K + k]);
                        }
                        /* a bf16 weight may meet x rounded to bf16 (AVX512-BF16, a dozen rows or
                         * more): each product then within 2^-8 of its size */
                        double bound = wdt[d] == TF_BF16 ? 0x1p-8 : 1e-6;
                        if (fabs(got[i * N + j] - acc) > bound * mag + 1e-30)
                            fail_msg("linear %lldx%lldx%lld (%s weight%s): [%lld, %lld] = %.9g, want %.9g", (long long)M,
                                     (long long)N, (long long)K, tf_dtype_name(wdt[d]), with_bias ? ", bias" : "",
                                     (long long)i, (long long)j, got[i * N + j], acc);
                    }
                free(got);
                free(wv);
                free(x);
                free(w);
                free(b);
                tf_tensor_release(tx);
                tf_tensor_release(tw32);
                tf_tensor_release(tw);
                tf_tensor_release(wback);
                tf_tensor_release(tb);
                tf_tensor_release(o);
            }
}

/* gelu's vector erf: over [-12, 12] and past it, each value within
 * 2e-7 |x| + 4 ulp of float64, and on the negative tail [-9, -2] within 2%
 * of it (erfc is computed directly, so 1 + erf never cancels to 0); f16/bf16
 * through the same kernel within their rounding; NaN stays NaN, +inf stays
 * +inf. */
static void test_gelu(void **state) {
    (void)state;
    int64_t n = 100003;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-12.0 + 24.0 * (double)i / (double)(n - 1));
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -30.0f;
    x[3] = 1e-20f;
    tf_tensor *t = NULL, *o = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &n, x, &t));
    OK(tf_gelu(t, &o));
    float *got = read_all(o);
    assert_true(isnan(got[0]));
    assert_true(isinf(got[1]) && got[1] > 0);
    for (int64_t i = 2; i < n; i++) {
        double v = x[i], want = 0.5 * v * erfc(-v / sqrt(2.0));
        if (fabs(got[i] - want) > 2e-7 * fabs(v) + 4 * FLT_EPSILON * fabs(want))
            fail_msg("gelu(%.9g) = %.9g, want %.9g", v, got[i], want);
        if (v >= -9 && v <= -2 && fabs(got[i] - want) > 0.02 * fabs(want))   /* the tail: no cancellation to 0 */
            fail_msg("gelu(%.9g) = %.9g, want %.9g (relative error past 2%%)", v, got[i], want);
    }
    tf_tensor_release(o);
    static const tf_dtype halves[] = {TF_BF16, TF_F16};
    for (int h = 0; h < 2; h++) {
        tf_tensor *th = NULL, *oh = NULL, *back = NULL;
        OK(tf_cast(t, halves[h], &th));
        OK(tf_gelu(th, &oh));
        OK(tf_cast(oh, TF_F32, &back));
        float *hv = read_all(back), *xin = NULL;
        tf_tensor *xback = NULL;
        OK(tf_cast(th, TF_F32, &xback));
        xin = read_all(xback);
        double ulp = halves[h] == TF_BF16 ? 1.0 / 256 : 1.0 / 2048;
        for (int64_t i = 2; i < n; i++) {
            double v = xin[i], want = 0.5 * v * erfc(-v / sqrt(2.0));
            if (fabs(hv[i] - want) > ulp * fabs(want) + 2e-7 * fabs(v) + (halves[h] == TF_F16 ? 6e-8 : 0))
                fail_msg("%s gelu(%.9g) = %.9g, want %.9g", tf_dtype_name(halves[h]), v, hv[i], want);
        }
        free(hv);
        free(xin);
        tf_tensor_release(th);
        tf_tensor_release(oh);
        tf_tensor_release(back);
        tf_tensor_release(xback);
    }
    free(got);
    free(x);
    tf_tensor_release(t);
}

/* The generated SIMD bodies of the unary formulas (contiguous f32) against
 * double over [-110, 90] and the special values: exp over its whole range
 * (finite up to log(FLT_MAX) = 88.72, subnormal results down to -103.97,
 * as expf), within 4 ulps where the result is normal and 2 subnormal ulps
 * below; NaN in gives NaN out except for sign (0, PyTorch's rule). The
 * CPU ISA variants run it (test_cpu_fast_avx2, _generic). */
static double ref_math(const char *op, double x) {
    if (!strcmp(op, "exp")) return exp(x);
    if (!strcmp(op, "sigmoid")) return 1 / (1 + exp(-x));
    if (!strcmp(op, "silu")) return x / (1 + exp(-x));
    if (!strcmp(op, "relu")) return x < 0 ? 0 : x;
    if (!strcmp(op, "neg")) return -x;
    if (!strcmp(op, "abs")) return fabs(x);
    return isnan(x) ? 0 : (x > 0) - (x < 0);           /* sign */
}

static void test_simd_unary_formulas(void **state) {
    (void)state;
    static const struct { const char *name; tf_status (*fn)(const tf_tensor *, tf_tensor **); } ops[] = {
        {"exp", tf_exp}, {"sigmoid", tf_sigmoid}, {"silu", tf_silu}, {"relu", tf_relu},
        {"neg", tf_neg}, {"abs", tf_abs}, {"sign", tf_sign}};
    int64_t n = 200003;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(-110.0 + 200.0 * (double)i / (double)(n - 1));
    const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 88.72f, 88.5f, -100.0f, -103.9f, 1e-30f};
    for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) x[k * 7] = specials[k];
    tf_tensor *t = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, 1, &n, x, &t));
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
        tf_tensor *r = NULL;
        OK(ops[o].fn(t, &r));
        float *got = read_all(r);
        for (int64_t i = 0; i < n; i++) {
            double want = ref_math(ops[o].name, x[i]);
            float w = (float)want;
            if (isnan(want)) {
                if (!isnan(got[i])) fail_msg("%s(%g) = %g, want NaN", ops[o].name, x[i], got[i]);
                continue;
            }
            double ulp = fabs(w) < FLT_MIN ? 0x1p-149 : fabs((double)nextafterf(w, INFINITY) - (double)w);
            /* below FLT_MIN: exp to 2 subnormal ulps. Where exp(-x)
             * overflows f32 (x < -88.72) the ratios (sigmoid, silu) give 0,
             * as their f32 formula does (x / (1 + inf)): 0 is allowed there. */
            bool is_exp = !strcmp(ops[o].name, "exp");
            double tol = fabs(w) >= FLT_MIN ? 4 * ulp : 2 * ulp;
            if (!is_exp && x[i] < -88.72f) tol = fabs(want);
            if (isinf(w) ? got[i] != w : !(fabs(got[i] - want) <= tol))
                fail_msg("%s(%.9g) = %.9g, want %.9g", ops[o].name, x[i], got[i], want);
        }
        free(got);
        tf_tensor_release(r);
    }
    free(x);
    tf_tensor_release(t);
}

static void test_pool_under_concurrency(void **state) {
    (void)state;
    pthread_t th[3];
    for (intptr_t i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, large_adds, (void *)(i + 1)), 0);
    for (intptr_t i = 0; i < 3; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        assert_ptr_equal(r, (void *)(i + 1));
    }
}


/* ---- every float GEMM entry takes a fast kernel ----
 * tf_matmul, tf_gemm (alpha, beta, c, transposes), tf_linear, batched and
 * broadcast products and strided operands, in f32, f16, bf16 and a mixed
 * pair: each checked against float64 loops on the values as rounded to its
 * dtype, and none may run the reference loops (the extra counts them). */

typedef enum { ENTRY_MATMUL, ENTRY_GEMM, ENTRY_LINEAR } gemm_entry;

typedef struct gemm_case {
    const char *name;
    gemm_entry entry;
    int64_t batch, m, k, n;              /* batch 0: 2-D operands; < 0: b broadcast over -batch */
    bool ta, tb, strided_a;
    double alpha, beta;
    int c_kind;                          /* 0 none, 1 a bias row, 2 a full [m, n] c */
} gemm_case;

/* A random tensor of dtype dt, stored [rows, cols] (or batched). */
static tf_tensor *random_matrix(tf_dtype dt, int64_t batch, int64_t rows, int64_t cols, uint64_t seed) {
    int64_t shape[3] = {batch, rows, cols};
    int nd = batch ? 3 : 2;
    int64_t n = (batch ? batch : 1) * rows * cols;
    float *v = randv(n, seed);
    tf_tensor *f = NULL, *t = NULL;
    OK(tf_tensor_from_data(cpu_device(), TF_F32, nd, batch ? shape : shape + 1, v, &f));
    OK(tf_cast(f, dt, &t));
    tf_tensor_release(f);
    free(v);
    return t;
}

static float *logical_values(const tf_tensor *t) {
    tf_tensor *f = NULL;
    OK(tf_cast(t, TF_F32, &f));
    float *v = read_all(f);
    tf_tensor_release(f);
    return v;
}

static tf_tensor *swap_last(const tf_tensor *t) {
    tf_tensor *v = NULL;
    OK(tf_transpose(t, tf_tensor_ndim(t) - 2, tf_tensor_ndim(t) - 1, &v));
    return v;
}

static void run_gemm_case(const gemm_case *gc, tf_dtype da, tf_dtype db, uint64_t (*reference_calls)(void)) {
    int64_t bA = gc->batch > 0 ? gc->batch : gc->batch < 0 ? -gc->batch : 0, bB = gc->batch > 0 ? gc->batch : 0;
    int64_t m = gc->m, k = gc->k, n = gc->n;
    /* a as stored, and its logical [.., m, k] view */
    tf_tensor *as = gc->ta ? random_matrix(da, bA, k, m, 11) : random_matrix(da, bA, m, gc->strided_a ? 2 * k : k, 11);
    tf_tensor *a = NULL;
    if (gc->ta) a = swap_last(as);
    else if (gc->strided_a) OK(tf_slice(as, tf_tensor_ndim(as) - 1, 0, 2 * k, 2, &a));
    else a = tf_tensor_retain(as);
    bool w_rows = gc->entry == ENTRY_LINEAR || gc->tb;
    tf_tensor *bs = w_rows ? random_matrix(db, bB, n, k, 12) : random_matrix(db, bB, k, n, 12);
    tf_tensor *b = w_rows ? swap_last(bs) : tf_tensor_retain(bs);
    tf_tensor *c = NULL;
    if (gc->c_kind == 1) {
        float *v = randv(n, 13);
        tf_tensor *f = tensor_f32(cpu_device(), 1, (int64_t[]){n}, v);
        OK(tf_cast(f, da, &c));
        tf_tensor_release(f);
        free(v);
    } else if (gc->c_kind == 2) {
        c = random_matrix(da, 0, m, n, 13);
    }
    uint64_t before = reference_calls();
    tf_tensor *out = NULL;
    tf_status s;
    switch (gc->entry) {
    case ENTRY_MATMUL: s = tf_matmul(a, b, &out); break;
    case ENTRY_GEMM: s = tf_gemm(gc->ta ? as : a, gc->tb ? bs : b, c, gc->alpha, gc->beta, gc->ta, gc->tb, &out); break;
    default: s = tf_linear(a, bs, c, &out); break;
    }
    if (s != TF_OK) fail_msg("%s %s x %s: %s", gc->name, tf_dtype_name(da), tf_dtype_name(db), tf_last_error());
    uint64_t slow = reference_calls() - before;
    if (slow) fail_msg("%s %s x %s: %llu reference GEMM call(s)", gc->name, tf_dtype_name(da), tf_dtype_name(db),
                       (unsigned long long)slow);
    float *va = logical_values(a), *vb = logical_values(b), *vc = c ? logical_values(c) : NULL, *got = logical_values(out);
    int64_t batches = bA ? bA : 1;
    double *want = malloc(sizeof(double) * (size_t)(batches * m * n));
    double alpha = gc->entry == ENTRY_GEMM ? gc->alpha : 1, beta = gc->entry == ENTRY_GEMM ? gc->beta : 1;
    for (int64_t q = 0; q < batches; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t x = 0; x < k; x++)
                    acc += (double)va[(q * m + i) * k + x] * vb[((bB ? q : 0) * k + x) * n + j];
                double cv = !vc ? 0 : gc->c_kind == 1 ? vc[j] : vc[i * n + j];
                want[(q * m + i) * n + j] = alpha * acc + beta * cv;
            }
    tf_dtype dout = da == TF_F32 || db == TF_F32 ? TF_F32 : da;
    /* f32 x with a bf16 w: x may be rounded to bf16 on the way (tf_linear) */
    double limit = dout == TF_F32 ? (db == TF_BF16 ? 1e-5 : 1e-10) : dout == TF_F16 ? 1e-5 : 1e-4;
    char what[160];
    snprintf(what, sizeof what, "%s %s x %s", gc->name, tf_dtype_name(da), tf_dtype_name(db));
    assert_int_equal(tf_tensor_dtype(out), dout);
    expect_close(what, got, want, batches * m * n, limit);
    free(va), free(vb), free(vc), free(got), free(want);
    tf_tensor_release(a), tf_tensor_release(as), tf_tensor_release(b), tf_tensor_release(bs);
    tf_tensor_release(c), tf_tensor_release(out);
}

static void test_every_gemm_entry_is_fast(void **state) {
    (void)state;
    uint64_t (*reference_calls)(void) = (uint64_t (*)(void))tf_backend_proc_address("cpu", "tf_cpu_reference_gemm_calls");
    assert_non_null(reference_calls);
    static const gemm_case cases[] = {
        {"matmul", ENTRY_MATMUL, 0, 33, 70, 45, false, false, false, 1, 0, 0},
        {"matmul x @ W^T", ENTRY_MATMUL, 0, 40, 96, 130, false, true, false, 1, 0, 0},
        {"matmul one row", ENTRY_MATMUL, 0, 1, 100, 33, false, false, false, 1, 0, 0},
        {"matmul few columns", ENTRY_MATMUL, 0, 37, 70, 3, false, false, false, 1, 0, 0},
        {"matmul odd k", ENTRY_MATMUL, 0, 30, 37, 50, false, false, false, 1, 0, 0},
        {"matmul tiny", ENTRY_MATMUL, 0, 5, 6, 7, false, false, false, 1, 0, 0},
        {"matmul a^T", ENTRY_MATMUL, 0, 24, 50, 31, true, false, false, 1, 0, 0},
        {"matmul strided a", ENTRY_MATMUL, 0, 20, 48, 26, false, false, true, 1, 0, 0},
        {"batched matmul", ENTRY_MATMUL, 3, 17, 40, 19, false, false, false, 1, 0, 0},
        {"broadcast matmul", ENTRY_MATMUL, -3, 9, 24, 11, false, false, false, 1, 0, 0},
        {"gemm x @ W^T + bias", ENTRY_GEMM, 0, 64, 96, 160, false, true, false, 1, 1, 1},
        {"gemm decode row + bias", ENTRY_GEMM, 0, 1, 128, 96, false, true, false, 1, 1, 1},
        {"gemm batched x @ W^T + bias", ENTRY_GEMM, -3, 8, 64, 48, false, true, false, 1, 1, 1},
        {"gemm alpha, beta, c", ENTRY_GEMM, 0, 29, 50, 41, true, false, false, 0.5, -2, 2},
        {"gemm both transposed", ENTRY_GEMM, 0, 21, 66, 35, true, true, false, 2, 0, 0},
        {"gemm strided a, c", ENTRY_GEMM, 0, 18, 40, 22, false, false, true, 1, 0.25, 2},
        {"linear + bias", ENTRY_LINEAR, 0, 48, 64, 80, false, true, false, 1, 1, 1},
        {"linear, k of 25 pairs", ENTRY_LINEAR, 0, 20, 50, 37, false, true, false, 1, 1, 1},
        {"linear no bias", ENTRY_LINEAR, 0, 6, 64, 50, false, true, false, 1, 1, 0},
    };
    static const tf_dtype pairs[][2] = {{TF_F32, TF_F32}, {TF_F16, TF_F16}, {TF_BF16, TF_BF16}, {TF_F32, TF_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
            if (cases[i].entry == ENTRY_GEMM && pairs[p][0] != pairs[p][1]) continue;   /* tf_gemm: one dtype (BLAS's) */
            run_gemm_case(&cases[i], pairs[p][0], pairs[p][1], reference_calls);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_elementwise_and_sum),
        cmocka_unit_test(test_large_broadcast_copy_and_half_matmul),
        cmocka_unit_test(test_large_rows),
        cmocka_unit_test(test_blas_paths),
        cmocka_unit_test(test_skinny_products),
        cmocka_unit_test(test_single_row_products),
        cmocka_unit_test(test_half_elementwise),
        cmocka_unit_test(test_half_skinny_matmul),
        cmocka_unit_test(test_blocked_attention),
        cmocka_unit_test(test_linear_layers),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_simd_unary_formulas),
        cmocka_unit_test(test_pool_under_concurrency),
        cmocka_unit_test(test_every_gemm_entry_is_fast),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
