/* Mixed precision: the autocast policy (which functions convert what, once,
 * per thread, on every device) and the loss scaler (scale, unscale with its
 * finite check, skip, back off, grow), then an MLP trained in f16 with the
 * scaler against the same MLP in f32. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"

static tf_tensor *filled(tf_device *d, tf_dtype dt, int ndim, const int64_t *shape, const float *v) {
    tf_tensor *f = tensor_f32(d, ndim, shape, v), *t = NULL;
    if (dt == TF_F32) return f;
    OK(tf_cast(f, dt, &t));
    tf_tensor_release(f);
    return t;
}

static void read_f64(const tf_tensor *t, double *out, int64_t n) {
    tf_tensor *w = NULL;
    OK(tf_cast(t, TF_F64, &w));
    assert_int_equal(tf_tensor_numel(w), n);
    OK(tf_tensor_read(w, out, (size_t)n * sizeof *out));
    tf_tensor_release(w);
}

static void random_values(float *v, int n, float scale) {
    for (int i = 0; i < n; i++) v[i] = scale * (float)(rand() % 2001 - 1000) / 1000.0f;
}

/* ---- the policy ---- */

static void test_begin_end_rules(void **state) {
    (void)state;
    assert_int_equal(tf_autocast_dtype(), TF_F32);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "no tf_autocast_begin", tf_autocast_end());
    FAILS_WITH(TF_ERR_DTYPE, "f16, bf16 or f32", tf_autocast_begin(TF_I32));
    FAILS_WITH(TF_ERR_DTYPE, "f16, bf16 or f32", tf_autocast_begin(TF_F64));
    FAILS_WITH(TF_ERR_DTYPE, "invalid dtype", tf_autocast_begin((tf_dtype)999));
    assert_int_equal(tf_autocast_dtype(), TF_F32);
    OK(tf_autocast_begin(TF_F16));
    assert_int_equal(tf_autocast_dtype(), TF_F16);
    OK(tf_autocast_begin(TF_F32));                  /* off inside */
    assert_int_equal(tf_autocast_dtype(), TF_F32);
    OK(tf_autocast_begin(TF_BF16));
    assert_int_equal(tf_autocast_dtype(), TF_BF16);
    OK(tf_autocast_end());
    OK(tf_autocast_end());
    assert_int_equal(tf_autocast_dtype(), TF_F16);
    OK(tf_autocast_end());
    assert_int_equal(tf_autocast_dtype(), TF_F32);
    int depth = 0;
    while (tf_autocast_begin(TF_F16) == TF_OK) depth++;
    assert_int_equal(depth, 32);
    assert_int_equal(tf_autocast_begin(TF_F16), TF_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < depth; i++) OK(tf_autocast_end());
    assert_int_equal(tf_autocast_end(), TF_ERR_INVALID_ARGUMENT);
}

/* Each list on one device: dtypes out, and the values the op gives on
 * inputs converted by hand (the same kernels, so bit for bit). */
static void check_lists_on(tf_device *d) {
    const char *dn = tf_device_name(d);
    int64_t s23[2] = {2, 3}, s34[2] = {3, 4};
    float a_v[6], b_v[12];
    random_values(a_v, 6, 2);
    random_values(b_v, 12, 2);
    tf_tensor *a = filled(d, TF_F32, 2, s23, a_v), *b = filled(d, TF_F32, 2, s34, b_v);
    tf_tensor *a16 = filled(d, TF_F16, 2, s23, a_v), *b16 = filled(d, TF_F16, 2, s34, b_v);
    tf_tensor *a64 = filled(d, TF_F64, 2, s23, a_v), *b64 = filled(d, TF_F64, 2, s34, b_v);
    tf_tensor *want = NULL, *got = NULL, *got64 = NULL, *sm = NULL, *sm_want = NULL, *a16_32 = NULL;
    tf_status s = tf_matmul(a16, b16, &want);
    if (s == TF_ERR_UNSUPPORTED || s == TF_ERR_DTYPE) {       /* no f16 products here: nothing to lower to */
        print_message("%s: no f16 matmul (%s), lists not checked\n", dn, tf_last_error());
    } else {
        OK(s);
        OK(tf_autocast_begin(TF_F16));
        OK(tf_matmul(a, b, &got));                            /* lower: f32 -> f16 */
        OK(tf_matmul(a64, b64, &got64));                      /* f64 stays */
        OK(tf_softmax(a16, -1, &sm));                         /* f32: f16 -> f32 */
        OK(tf_autocast_end());
        assert_int_equal(tf_tensor_dtype(got), TF_F16);
        assert_int_equal(tf_tensor_dtype(got64), TF_F64);
        assert_int_equal(tf_tensor_dtype(sm), TF_F32);
        double g[8], w[8];
        read_f64(got, g, 8);
        read_f64(want, w, 8);
        for (int i = 0; i < 8; i++)
            if (g[i] != w[i]) fail_msg("%s: autocast matmul[%d] %.9g, by hand %.9g", dn, i, g[i], w[i]);
        OK(tf_cast(a16, TF_F32, &a16_32));
        OK(tf_softmax(a16_32, -1, &sm_want));
        read_f64(sm, g, 6);
        read_f64(sm_want, w, 6);
        for (int i = 0; i < 6; i++)
            if (g[i] != w[i]) fail_msg("%s: autocast softmax[%d] %.9g, by hand %.9g", dn, i, g[i], w[i]);
    }
    tf_tensor *all[] = {a, b, a16, b16, a64, b64, want, got, got64, sm, sm_want, a16_32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

static void test_lists_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) check_lists_on(tf_device_at(k));
}

/* The widest input wins where the dtype rules promote: an f16 product plus
 * an f32 residual is f32, a concat of f16 and f32 is f32; off autocast,
 * nothing changes. */
static void test_promotion_and_off(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t s22[2] = {2, 2};
    float v[4] = {1, 2, 3, 4};
    tf_tensor *x = filled(cpu, TF_F32, 2, s22, v), *p = NULL, *r = NULL, *c = NULL, *plain = NULL, *sm = NULL;
    OK(tf_autocast_begin(TF_BF16));
    OK(tf_matmul(x, x, &p));
    OK(tf_add(p, x, &r));
    const tf_tensor *parts[2] = {p, x};
    OK(tf_concat(2, parts, 0, &c));
    OK(tf_autocast_end());
    assert_int_equal(tf_tensor_dtype(p), TF_BF16);
    assert_int_equal(tf_tensor_dtype(r), TF_F32);
    assert_int_equal(tf_tensor_dtype(c), TF_F32);
    float want[4] = {8, 12, 18, 26};                          /* x @ x + x, exact in bf16 */
    expect_f32(r, want, 4);
    OK(tf_matmul(x, x, &plain));
    assert_int_equal(tf_tensor_dtype(plain), TF_F32);
    OK(tf_cast(x, TF_F16, &sm));
    tf_tensor *sm2 = NULL;
    OK(tf_softmax(sm, -1, &sm2));                             /* off: f16 stays f16 */
    assert_int_equal(tf_tensor_dtype(sm2), TF_F16);
    tf_tensor *all[] = {x, p, r, c, plain, sm, sm2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

/* Casts are ops a graph records: a linear of f32 x, w, bias converts the
 * three once, and the tf_gemm it calls converts nothing more; a composite
 * on the f32 list (cross entropy of f16 logits) runs in f32. */
static void test_each_input_converted_once(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t sx[2] = {2, 3}, sw[2] = {4, 3}, sb = 4;
    float xv[6], wv[12], bv[4];
    random_values(xv, 6, 1);
    random_values(wv, 12, 1);
    random_values(bv, 4, 1);
    tf_tensor *x = filled(cpu, TF_F32, 2, sx, xv), *w = filled(cpu, TF_F32, 2, sw, wv), *b = filled(cpu, TF_F32, 1, &sb, bv);
    tf_tensor *x16 = filled(cpu, TF_F16, 2, sx, xv), *w16 = filled(cpu, TF_F16, 2, sw, wv), *b16 = filled(cpu, TF_F16, 1, &sb, bv);
    tf_tensor *y = NULL, *y16 = NULL;
    tf_graph *g = NULL, *g16 = NULL;
    OK(tf_autocast_begin(TF_F16));
    OK(tf_graph_begin(cpu));
    OK(tf_linear(x, w, b, &y));
    OK(tf_graph_end(&g));
    OK(tf_graph_begin(cpu));
    OK(tf_linear(x16, w16, b16, &y16));
    OK(tf_graph_end(&g16));
    OK(tf_autocast_end());
    assert_int_equal(tf_tensor_dtype(y), TF_F16);
    if (tf_graph_node_count(g) != tf_graph_node_count(g16) + 3)
        fail_msg("linear under autocast ran %lld ops, %lld on f16 inputs: want exactly 3 casts more",
                 (long long)tf_graph_node_count(g), (long long)tf_graph_node_count(g16));
    double a[8], e[8];
    read_f64(y, a, 8);
    read_f64(y16, e, 8);
    for (int i = 0; i < 8; i++) assert_true(a[i] == e[i]);
    tf_graph_destroy(g);
    tf_graph_destroy(g16);
    /* cross entropy of f16 logits: f32 loss, the value of f32 logits */
    int64_t tgt_shape = 2;
    int64_t tgt[2] = {1, 3};
    tf_tensor *target = NULL, *loss = NULL, *loss_want = NULL, *w16_32 = NULL, *logits16 = NULL;
    OK(tf_tensor_from_data(cpu, TF_I64, 1, &tgt_shape, tgt, &target));
    OK(tf_slice(w16, 1, 0, 2, 1, &logits16));               /* [4, 2] -> use [2, 4] below */
    tf_tensor *lt = NULL;
    OK(tf_transpose(logits16, 0, 1, &lt));
    OK(tf_autocast_begin(TF_F16));
    OK(tf_cross_entropy(lt, target, -100, TF_REDUCTION_MEAN, &loss));
    OK(tf_autocast_end());
    assert_int_equal(tf_tensor_dtype(loss), TF_F32);
    OK(tf_cast(lt, TF_F32, &w16_32));
    OK(tf_cross_entropy(w16_32, target, -100, TF_REDUCTION_MEAN, &loss_want));
    double l1, l2;
    read_f64(loss, &l1, 1);
    read_f64(loss_want, &l2, 1);
    assert_true(l1 == l2);
    tf_tensor *all[] = {x, w, b, x16, w16, b16, y, y16, target, loss, loss_want, w16_32, logits16, lt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

static void *matmul_dtype_elsewhere(void *arg) {
    tf_tensor *x = arg, *p = NULL;
    tf_dtype *dt = malloc(sizeof *dt);
    *dt = tf_matmul(x, x, &p) == TF_OK ? tf_tensor_dtype(p) : (tf_dtype)-1;
    tf_tensor_release(p);
    return dt;
}

static void test_state_is_per_thread(void **state) {
    (void)state;
    int64_t s22[2] = {2, 2};
    float v[4] = {1, 2, 3, 4};
    tf_tensor *x = filled(cpu_device(), TF_F32, 2, s22, v);
    OK(tf_autocast_begin(TF_F16));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, matmul_dtype_elsewhere, x), 0);
    void *r = NULL;
    pthread_join(t, &r);
    OK(tf_autocast_end());
    assert_int_equal(*(tf_dtype *)r, TF_F32);
    free(r);
    tf_tensor_release(x);
}

/* ---- the scaler ---- */

static void test_scaler_rules(void **state) {
    (void)state;
    tf_grad_scaler *s = NULL;
    tf_grad_scaler_config c = tf_grad_scaler_defaults();
    assert_true(c.init_scale == 65536 && c.growth_factor == 2 && c.backoff_factor == 0.5 && c.growth_interval == 2000);
    c.backoff_factor = 1;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "backoff_factor in (0, 1)", tf_grad_scaler_create(&c, &s));
    assert_null(s);
    c = tf_grad_scaler_defaults();
    c.init_scale = INFINITY;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "finite init_scale", tf_grad_scaler_create(&c, &s));
    c = tf_grad_scaler_defaults();
    c.growth_interval = 0;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "growth_interval >= 1", tf_grad_scaler_create(&c, &s));
    OK(tf_grad_scaler_create(NULL, &s));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "no tf_grad_scaler_unscale", tf_grad_scaler_update(s));
    tf_device *cpu = cpu_device();
    int64_t n = 3;
    float lv[1] = {0.75f};
    tf_tensor *loss = NULL, *scaled = NULL, *loss1 = filled(cpu, TF_F16, 1, (int64_t[]){1}, lv), *scaled1 = NULL;
    OK(tf_scalar(cpu, TF_F16, lv[0], &loss));
    OK(tf_grad_scaler_scale(s, loss, &scaled));
    OK(tf_grad_scaler_scale(s, loss1, &scaled1));
    assert_int_equal(tf_tensor_dtype(scaled), TF_F32);     /* f16 would overflow at 65536 */
    assert_int_equal(tf_tensor_dtype(scaled1), TF_F32);
    double sv;
    read_f64(scaled, &sv, 1);
    assert_true(sv == 0.75 * 65536);
    read_f64(scaled1, &sv, 1);
    assert_true(sv == 0.75 * 65536);
    tf_tensor *l64 = NULL, *s64 = NULL;
    OK(tf_scalar(cpu, TF_F64, 0.1, &l64));
    OK(tf_grad_scaler_scale(s, l64, &s64));
    assert_int_equal(tf_tensor_dtype(s64), TF_F64);
    read_f64(s64, &sv, 1);
    assert_true(sv == 0.1 * 65536);
    tf_tensor_release(l64);
    tf_tensor_release(s64);
    /* refused gradients change nothing */
    float gv[3] = {65536, -131072, 32768};
    tf_tensor *g = filled(cpu, TF_F32, 1, &n, gv), *g16 = filled(cpu, TF_F16, 1, &n, gv), *gi = filled(cpu, TF_I32, 1, &n, gv);
    bool finite = false;
    FAILS_WITH(TF_ERR_DTYPE, "gradient 1 is f16", tf_grad_scaler_unscale(s, 2, (tf_tensor *[]){g, g16}, &finite));
    FAILS_WITH(TF_ERR_DTYPE, "gradient 1 is i32", tf_grad_scaler_unscale(s, 2, (tf_tensor *[]){g, gi}, &finite));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "gradient 1 is NULL", tf_grad_scaler_unscale(s, 2, (tf_tensor *[]){g, NULL}, &finite));
    expect_f32(g, gv, 3);
    OK(tf_grad_scaler_unscale(s, 1, &g, &finite));
    assert_true(finite);
    float want[3] = {1, -2, 0.5f};
    expect_f32(g, want, 3);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "already unscaled", tf_grad_scaler_unscale(s, 1, &g, &finite));
    OK(tf_grad_scaler_update(s));
    tf_grad_scaler_stats st;
    OK(tf_grad_scaler_stats_get(s, &st));
    assert_true(st.scale == 65536 && st.growth_tracker == 1 && st.steps_taken == 1 && st.steps_skipped == 0);
    tf_tensor *all[] = {loss, scaled, loss1, scaled1, g, g16, gi};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    tf_grad_scaler_destroy(s);
}

/* Back off on inf and on NaN, grow after growth_interval finite steps, and
 * never grow past what f32 holds; on every device. */
static void test_scaler_schedule_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        tf_grad_scaler_config c = {.init_scale = 8, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3};
        tf_grad_scaler *s = NULL;
        OK(tf_grad_scaler_create(&c, &s));
        int64_t n = 4;
        float clean[4] = {8, 16, -24, 0}, bad_inf[4] = {8, INFINITY, 0, 0}, bad_nan[4] = {NAN, 0, 0, 0};
        const float *script[] = {clean, bad_inf, clean, clean, clean, bad_nan, clean};
        double scales[] = {8, 8, 2, 2, 2, 8, 2};          /* the scale each iteration runs with */
        for (int it = 0; it < 7; it++) {
            tf_grad_scaler_stats st;
            OK(tf_grad_scaler_stats_get(s, &st));
            if (st.scale != scales[it]) fail_msg("%s: iteration %d runs with scale %g, want %g", tf_device_name(d), it, st.scale, scales[it]);
            tf_tensor *g = filled(d, TF_F32, 1, &n, script[it]), *other = filled(d, TF_F32, 1, &n, clean);
            bool finite = true;
            OK(tf_grad_scaler_unscale(s, 2, (tf_tensor *[]){other, g}, &finite));
            assert_int_equal(finite, script[it] == clean);
            float got[4];
            OK(tf_tensor_read(other, got, sizeof got));
            for (int i = 0; i < 4; i++) assert_true(got[i] == clean[i] / (float)scales[it]);
            OK(tf_grad_scaler_update(s));
            tf_tensor_release(g);
            tf_tensor_release(other);
        }
        tf_grad_scaler_stats st;
        OK(tf_grad_scaler_stats_get(s, &st));
        assert_int_equal(st.steps_skipped, 2);
        assert_int_equal(st.steps_taken, 5);
        assert_int_equal(st.growth_tracker, 1);
        tf_grad_scaler_destroy(s);
    }
    /* growth stops below f32's limit */
    tf_grad_scaler_config c = {.init_scale = 0x1p127, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 1};
    tf_grad_scaler *s = NULL;
    OK(tf_grad_scaler_create(&c, &s));
    int64_t n = 1;
    tf_tensor *g = filled(cpu_device(), TF_F32, 1, &n, (float[]){1});
    bool finite;
    OK(tf_grad_scaler_unscale(s, 1, &g, &finite));
    OK(tf_grad_scaler_update(s));
    tf_grad_scaler_stats st;
    OK(tf_grad_scaler_stats_get(s, &st));
    assert_true(st.scale == 0x1p127 && st.growth_tracker == 0);
    tf_tensor_release(g);
    tf_grad_scaler_destroy(s);
}

/* ---- an MLP trained in f16 with the scaler against f32 ---- */

#define N 64
#define D 16
#define H 32
#define O 4
#ifndef NOISE
#define NOISE 0.5f
#endif

typedef struct mlp {
    tf_tensor *w1, *b1, *w2, *b2;            /* f32 master weights */
    tf_tensor *m[4], *v[4];
} mlp;

static tf_tensor **param(mlp *p, int i) {
    tf_tensor **all[4] = {&p->w1, &p->b1, &p->w2, &p->b2};
    return all[i];
}

static mlp make_mlp(tf_device *d, unsigned seed) {
    srand(seed);
    float w1[H * D], b1[H], w2[O * H], b2[O];
    random_values(w1, H * D, 0.25f);
    random_values(b1, H, 0.1f);
    random_values(w2, O * H, 0.18f);
    random_values(b2, O, 0.1f);
    int64_t s1[2] = {H, D}, s2[2] = {O, H}, sh = H, so = O;
    mlp p = {.w1 = tensor_f32(d, 2, s1, w1), .b1 = tensor_f32(d, 1, &sh, b1), .w2 = tensor_f32(d, 2, s2, w2),
             .b2 = tensor_f32(d, 1, &so, b2)};
    for (int i = 0; i < 4; i++) {
        tf_tensor *w = *param(&p, i);
        OK(tf_zeros(d, TF_F32, tf_tensor_ndim(w), tf_tensor_shape(w), &p.m[i]));
        OK(tf_zeros(d, TF_F32, tf_tensor_ndim(w), tf_tensor_shape(w), &p.v[i]));
    }
    return p;
}

static void free_mlp(mlp *p) {
    for (int i = 0; i < 4; i++) {
        tf_tensor_release(*param(p, i));
        tf_tensor_release(p->m[i]);
        tf_tensor_release(p->v[i]);
    }
}

static void release_n(tf_tensor **t, int n) {
    for (int i = 0; i < n; i++) tf_tensor_release(t[i]);
}

/* One forward and backward; *loss the f32 mean squared error, grads[4]
 * f32 gradients of (loss * scale). Autocast, when on, decides the dtypes. */
static void forward_backward(const mlp *p, const tf_tensor *x, const tf_tensor *t, double scale, double *loss,
                             tf_tensor **grads) {
    tf_device *d = tf_tensor_device(x);
    tf_tensor *h = NULL, *a = NULL, *y = NULL, *diff = NULL, *sq = NULL, *l = NULL, *k = NULL, *gy = NULL, *gyt = NULL,
              *gw2 = NULL, *gb2 = NULL, *ga = NULL, *pos = NULL, *zero = NULL, *gh = NULL, *ght = NULL, *gw1 = NULL,
              *gb1 = NULL;
    OK(tf_linear(x, p->w1, p->b1, &h));
    OK(tf_relu(h, &a));
    OK(tf_linear(a, p->w2, p->b2, &y));
    OK(tf_sub(y, t, &diff));                                   /* f16 - f32: f32 */
    OK(tf_mul(diff, diff, &sq));
    OK(tf_mean(sq, TF_ALL_AXES, false, &l));
    read_f64(l, loss, 1);
    OK(tf_scalar(d, TF_F32, 2.0 * scale / (N * O), &k));
    OK(tf_mul(diff, k, &gy));                                  /* d(loss * scale)/dy */
    OK(tf_transpose(gy, 0, 1, &gyt));
    OK(tf_matmul(gyt, a, &gw2));                               /* [O, H] */
    OK(tf_sum(gy, 0, false, &gb2));
    OK(tf_matmul(gy, p->w2, &ga));                             /* [N, H] */
    OK(tf_scalar(d, tf_tensor_dtype(h), 0, &zero));
    OK(tf_gt(h, zero, &pos));
    OK(tf_mul(ga, pos, &gh));
    OK(tf_transpose(gh, 0, 1, &ght));
    OK(tf_matmul(ght, x, &gw1));                               /* [H, D] */
    OK(tf_sum(gh, 0, false, &gb1));
    tf_tensor *raw[4] = {gw1, gb1, gw2, gb2};
    for (int i = 0; i < 4; i++) OK(tf_cast(raw[i], TF_F32, &grads[i]));   /* for the f32 master weights */
    tf_tensor *all[] = {h, a, y, diff, sq, l, k, gy, gyt, gw2, gb2, ga, pos, zero, gh, ght, gw1, gb1};
    release_n(all, (int)(sizeof all / sizeof *all));
}

static void adam_all(mlp *p, tf_tensor **grads, int64_t step) {
    for (int i = 0; i < 4; i++) OK(tf_adam_step(*param(p, i), grads[i], p->m[i], p->v[i], 3e-3, 0.9, 0.999, 1e-8, 0, step, false));
}

static double eval_loss(const mlp *p, const tf_tensor *x, const tf_tensor *t) {
    double loss;
    tf_tensor *g[4];
    forward_backward(p, x, t, 1, &loss, g);
    release_n(g, 4);
    return loss;
}

static void data(tf_device *d, tf_tensor **x, tf_tensor **t) {
    srand(7);
    float xv[N * D], tv[N * O], a[D * O], noise[N * O];
    random_values(xv, N * D, 1);
    random_values(a, D * O, 0.5f);
    random_values(noise, N * O, NOISE);        /* noisy targets, as real data has */
    for (int i = 0; i < N; i++)
        for (int o = 0; o < O; o++) {
            double acc = 0;
            for (int j = 0; j < D; j++) acc += xv[i * D + j] * a[j * O + o];
            tv[i * O + o] = (float)sin(2 * acc) + noise[i * O + o];
        }
    int64_t sx[2] = {N, D}, st[2] = {N, O};
    *x = tensor_f32(d, 2, sx, xv);
    *t = tensor_f32(d, 2, st, tv);
}

#ifndef STEPS
#define STEPS 200
#endif
#define INJECT_AT 60

static double train_f32(tf_device *d, const tf_tensor *x, const tf_tensor *t) {
    mlp p = make_mlp(d, 1);
    for (int64_t step = 1; step <= STEPS; step++) {
        double loss;
        tf_tensor *g[4];
        forward_backward(&p, x, t, 1, &loss, g);
        adam_all(&p, g, step);
        release_n(g, 4);
    }
    double l = eval_loss(&p, x, t);
    free_mlp(&p);
    return l;
}

/* The f16 run; one iteration gets an inf in a gradient, which must skip
 * that step alone, leave the weights as they were and halve the scale. */
static double train_f16(tf_device *d, const tf_tensor *x, const tf_tensor *t, double *first_loss) {
    mlp p = make_mlp(d, 1);
    tf_grad_scaler_config c = tf_grad_scaler_defaults();
    c.init_scale = 1024;
    tf_grad_scaler *s = NULL;
    OK(tf_grad_scaler_create(&c, &s));
    int64_t taken = 0;
    for (int it = 1; it <= STEPS + 1; it++) {
        tf_grad_scaler_stats before, after;
        OK(tf_grad_scaler_stats_get(s, &before));
        double loss;
        tf_tensor *g[4];
        OK(tf_autocast_begin(TF_F16));
        forward_backward(&p, x, t, before.scale, &loss, g);
        OK(tf_autocast_end());
        if (it == 1) *first_loss = loss;
        if (it == INJECT_AT) {
            float gw1[H * D];
            OK(tf_tensor_read(g[0], gw1, sizeof gw1));
            gw1[3] = INFINITY;
            OK(tf_tensor_write(g[0], gw1, sizeof gw1));
        }
        float w_before[O * H], w_after[O * H];
        OK(tf_tensor_read(p.w2, w_before, sizeof w_before));
        bool finite = false;
        OK(tf_grad_scaler_unscale(s, 4, g, &finite));
        if (finite) adam_all(&p, g, ++taken);
        OK(tf_grad_scaler_update(s));
        release_n(g, 4);
        OK(tf_grad_scaler_stats_get(s, &after));
        OK(tf_tensor_read(p.w2, w_after, sizeof w_after));
        if (it == INJECT_AT) {
            assert_false(finite);
            assert_true(after.scale == before.scale / 2);
            assert_int_equal(after.steps_skipped, before.steps_skipped + 1);
            assert_memory_equal(w_before, w_after, sizeof w_before);
        } else if (!finite) {
            fail_msg("iteration %d: gradients overflowed at scale %g with nothing injected", it, before.scale);
        }
    }
    tf_grad_scaler_stats st;
    OK(tf_grad_scaler_stats_get(s, &st));
    assert_int_equal(st.steps_skipped, 1);
    assert_int_equal(st.steps_taken, STEPS);
    tf_grad_scaler_destroy(s);
    double l = eval_loss(&p, x, t);
    free_mlp(&p);
    return l;
}

static void test_mlp_f16_with_scaler_matches_f32(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        tf_tensor *x = NULL, *t = NULL, *probe = NULL, *h = NULL;
        data(d, &x, &t);
        int64_t s22[2] = {2, 2};
        probe = filled(d, TF_F16, 2, s22, (float[]){1, 2, 3, 4});
        tf_status s = tf_matmul(probe, probe, &h);
        bool f16 = !(s == TF_ERR_UNSUPPORTED || s == TF_ERR_DTYPE);
        tf_tensor_release(probe);
        tf_tensor_release(h);
        if (f16) {
            double first = 0;
            double l32 = train_f32(d, x, t), l16 = train_f16(d, x, t, &first);
            print_message("%s: MSE %.6f at the start, after %d steps %.6f in f32, %.6f in f16 with the scaler "
                          "(%.3f%% apart)\n", tf_device_name(d), first, STEPS, l32, l16, 100 * fabs(l16 - l32) / l32);
            assert_true(l32 < 0.5 * first);                          /* it trained */
            if (!(fabs(l16 - l32) <= 0.01 * l32))
                fail_msg("%s: f16 loss %.6f is more than 1%% from f32's %.6f", tf_device_name(d), l16, l32);
        } else {
            print_message("%s: no f16 products, MLP not trained\n", tf_device_name(d));
        }
        tf_tensor_release(x);
        tf_tensor_release(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_begin_end_rules),
        cmocka_unit_test(test_lists_on_every_device),
        cmocka_unit_test(test_promotion_and_off),
        cmocka_unit_test(test_each_input_converted_once),
        cmocka_unit_test(test_state_is_per_thread),
        cmocka_unit_test(test_scaler_rules),
        cmocka_unit_test(test_scaler_schedule_on_every_device),
        cmocka_unit_test(test_mlp_f16_with_scaler_matches_f32),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
