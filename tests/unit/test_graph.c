/* Graph capture and replay: a decode-like block captured once and replayed
 * with new inputs matches eager runs bit for bit on every device; what a
 * replay cannot repeat is refused at tf_graph_end; index guards; shapes;
 * native graphs (SDK 2.3) on the example backend. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "helpers.h"
#include "mybackend.h"

#define DIM 16
#define HIDDEN 32
#define LAYERS 4

typedef struct params {
    tf_tensor *norm[LAYERS], *gate[LAYERS], *up[LAYERS], *down[LAYERS];
} params;

static tf_tensor *random_tensor(tf_device *d, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    float v[HIDDEN * DIM];
    for (int64_t i = 0; i < rows * cols; i++) v[i] = (float)(rand() % 2001 - 1000) / 4000.0f;
    return tensor_f32(d, 2, shape, v);
}

static params make_params(tf_device *d) {
    params p;
    for (int l = 0; l < LAYERS; l++) {
        int64_t n = DIM;
        tf_tensor *w = random_tensor(d, 1, DIM);
        OK(tf_reshape(w, 1, &n, &p.norm[l]));
        tf_tensor_release(w);
        p.gate[l] = random_tensor(d, HIDDEN, DIM);
        p.up[l] = random_tensor(d, HIDDEN, DIM);
        p.down[l] = random_tensor(d, DIM, HIDDEN);
    }
    return p;
}

static void free_params(params *p) {
    for (int l = 0; l < LAYERS; l++) {
        tf_tensor_release(p->norm[l]);
        tf_tensor_release(p->gate[l]);
        tf_tensor_release(p->up[l]);
        tf_tensor_release(p->down[l]);
    }
}

/* Llama's MLP half-layer, LAYERS times, intermediates released at once. */
static tf_tensor *block(const params *p, const tf_tensor *x0) {
    tf_tensor *x = tf_tensor_retain((tf_tensor *)x0);
    for (int l = 0; l < LAYERS; l++) {
        tf_tensor *h = NULL, *g = NULL, *u = NULL, *a = NULL, *dn = NULL, *next = NULL;
        OK(tf_rmsnorm(x, p->norm[l], 1e-6, &h));
        OK(tf_linear(h, p->gate[l], NULL, &g));
        OK(tf_linear(h, p->up[l], NULL, &u));
        OK(tf_swiglu(g, u, &a));
        OK(tf_linear(a, p->down[l], NULL, &dn));
        OK(tf_add(x, dn, &next));
        tf_tensor *all[] = {h, g, u, a, dn, x};
        for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
        x = next;
    }
    return x;
}

static void read_all(const tf_tensor *t, float *out, size_t n) { OK(tf_tensor_read(t, out, n * sizeof *out)); }

static void random_row(float *v, int n) {
    for (int i = 0; i < n; i++) v[i] = (float)(rand() % 2001 - 1000) / 500.0f;
}

static void test_replay_matches_eager_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        params p = make_params(d);
        int64_t shape[2] = {1, DIM};
        float v[DIM], got[DIM], want[DIM];
        tf_tensor *x = NULL;
        OK(tf_zeros(d, TF_F32, 2, shape, &x));                /* the static input */
        tf_memory_stats before, after;
        bool stats = tf_device_memory_stats(d, &before) == TF_OK;
        OK(tf_graph_begin(d));
        tf_tensor *y = block(&p, x);
        tf_graph *g = NULL;
        OK(tf_graph_end(&g));
        assert_true(tf_graph_node_count(g) >= 5 * LAYERS);   /* the last linear and its add fuse where the device can */
        for (int round = 0; round < 3; round++) {
            random_row(v, DIM);
            OK(tf_tensor_write(x, v, sizeof v));
            OK(tf_graph_replay(g));
            read_all(y, got, DIM);
            tf_tensor *e = block(&p, x);                    /* eager, same inputs */
            read_all(e, want, DIM);
            tf_tensor_release(e);
            for (int i = 0; i < DIM; i++)
                if (got[i] != want[i] && !(fabsf(got[i] - want[i]) <= 1e-6f * fabsf(want[i])))
                    fail_msg("%s round %d: element %d replayed %.9g, eager %.9g", tf_device_name(d), round, i, got[i],
                             want[i]);
        }
        /* replay_with: new values through the same static input */
        tf_tensor *nx = NULL;
        random_row(v, DIM);
        OK(tf_tensor_from_data(d, TF_F32, 2, shape, v, &nx));
        tf_tensor *inputs[] = {x};
        const tf_tensor *values[] = {nx};
        OK(tf_graph_replay_with(g, 1, inputs, values));
        read_all(y, got, DIM);
        tf_tensor *e = block(&p, nx);
        read_all(e, want, DIM);
        for (int i = 0; i < DIM; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])));
        tf_tensor_release(e);
        tf_tensor_release(nx);
        tf_tensor_release(y);                              /* the graph keeps its buffer */
        OK(tf_graph_replay(g));
        tf_graph_destroy(g);                               /* ... and frees it now */
        if (stats) {
            OK(tf_device_memory_stats(d, &after));
            if (after.allocated != before.allocated)
                fail_msg("%s: %llu bytes allocated before the capture, %llu after destroy", tf_device_name(d),
                         (unsigned long long)before.allocated, (unsigned long long)after.allocated);
        }
        tf_tensor_release(x);
        free_params(&p);
    }
}

/* Rows of a table picked by static ids: new ids each replay, and an id out
 * of range stops the replay before anything runs. */
static void test_index_guards(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        int64_t tshape[2] = {5, 3}, n = 2;
        float table[15];
        for (int i = 0; i < 15; i++) table[i] = (float)i;
        tf_tensor *t = tensor_f32(d, 2, tshape, table), *ids = NULL, *rows = NULL, *doubled = NULL;
        int32_t start[2] = {0, 1};
        OK(tf_tensor_from_data(d, TF_I32, 1, &n, start, &ids));
        OK(tf_graph_begin(d));
        OK(tf_embedding(t, ids, &rows));
        OK(tf_add(rows, rows, &doubled));
        tf_graph *g = NULL;
        OK(tf_graph_end(&g));
        int32_t pick[2] = {4, 2};
        OK(tf_tensor_write(ids, pick, sizeof pick));
        OK(tf_graph_replay(g));
        float got[6], want[6] = {24, 26, 28, 12, 14, 16};
        OK(tf_tensor_read(doubled, got, sizeof got));
        for (int i = 0; i < 6; i++) assert_true(got[i] == want[i]);
        int32_t bad[2] = {1, 5};
        OK(tf_tensor_write(ids, bad, sizeof bad));
        FAILS_WITH(TF_ERR_INDEX, "index 5 out of range [0, 5)", tf_graph_replay(g));
        OK(tf_tensor_read(doubled, got, sizeof got));       /* nothing ran */
        for (int i = 0; i < 6; i++) assert_true(got[i] == want[i]);
        tf_graph_destroy(g);
        tf_tensor *all[] = {t, ids, rows, doubled};
        for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    }
}

static void test_what_a_replay_cannot_repeat_is_refused(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t n = 4;
    float v[4] = {1, 2, 3, 4}, out[4];
    tf_tensor *x = tensor_f32(cpu, 1, &n, v), *y = NULL, *z = NULL;
    tf_graph *g = NULL;
    /* a read to the host */
    OK(tf_graph_begin(cpu));
    OK(tf_add(x, x, &y));
    OK(tf_tensor_read(y, out, sizeof out));
    FAILS_WITH(TF_ERR_UNSUPPORTED, "read to the host", tf_graph_end(&g));
    assert_null(g);
    tf_tensor_release(y);
    /* host data into a tensor from before the capture */
    OK(tf_graph_begin(cpu));
    OK(tf_tensor_write(x, v, sizeof v));
    FAILS_WITH(TF_ERR_UNSUPPORTED, "written into a tensor from before", tf_graph_end(&g));
    /* a constant made inside the capture is fine */
    OK(tf_graph_begin(cpu));
    tf_tensor *c = tensor_f32(cpu, 1, &n, v);
    OK(tf_mul(x, c, &y));
    OK(tf_graph_end(&g));
    OK(tf_graph_replay(g));
    OK(tf_tensor_read(y, out, sizeof out));
    assert_true(out[3] == 16);
    tf_graph_destroy(g);
    tf_tensor_release(c);
    tf_tensor_release(y);
    /* an op or a move on another device */
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (d == cpu) continue;
        tf_tensor *m = NULL;
        OK(tf_graph_begin(cpu));
        OK(tf_tensor_to(x, d, &m));
        FAILS_WITH(TF_ERR_DEVICE_MISMATCH, "moved from cpu", tf_graph_end(&g));
        tf_tensor_release(m);
        OK(tf_graph_begin(d));
        OK(tf_add(x, x, &y));                               /* ran on the CPU */
        FAILS_WITH(TF_ERR_DEVICE_MISMATCH, "ran on cpu", tf_graph_end(&g));
        tf_tensor_release(y);
        break;
    }
    /* misuse */
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "device is NULL", tf_graph_begin(NULL));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not capturing", tf_graph_end(&g));
    OK(tf_graph_begin(cpu));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "already capturing", tf_graph_begin(cpu));
    OK(tf_add(x, x, &y));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_graph_end(NULL));   /* the capture is dropped */
    OK(tf_graph_begin(cpu));
    OK(tf_add(y, x, &z));
    OK(tf_graph_end(&g));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "graph is NULL", tf_graph_replay(NULL));
    assert_int_equal(tf_graph_node_count(NULL), -1);
    assert_int_equal(tf_graph_node_count(g), 1);
    /* a shape that changes is refused, nothing written */
    int64_t n5 = 5;
    float v5[5] = {9, 9, 9, 9, 9};
    tf_tensor *wrong = tensor_f32(cpu, 1, &n5, v5);
    tf_tensor *inputs[] = {x};
    const tf_tensor *values[] = {wrong};
    FAILS_WITH(TF_ERR_SHAPE, "captured as f32[4], given f32[5]", tf_graph_replay_with(g, 1, inputs, values));
    OK(tf_tensor_read(x, out, sizeof out));
    assert_true(out[0] == 1 && out[3] == 4);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "no arrays", tf_graph_replay_with(g, 1, NULL, values));
    /* a tensor the graph never read, and the graph's own output: refused by
     * position, before anything is written (x keeps its values) */
    int64_t n4 = 4;
    tf_tensor *stranger = tensor_f32(cpu, 1, &n4, (float[]){7, 7, 7, 7}), *sevens = tensor_f32(cpu, 1, &n4, (float[]){7, 7, 7, 7});
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "captured[1] is not an input of the graph: the graph never read it",
               tf_graph_replay_with(g, 2, (tf_tensor *[]){x, stranger}, (const tf_tensor *[]){sevens, sevens}));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "captured[0] is not an input of the graph: it is the graph's own",
               tf_graph_replay_with(g, 1, (tf_tensor *[]){z}, (const tf_tensor *[]){sevens}));
    OK(tf_tensor_read(x, out, sizeof out));
    assert_true(out[0] == 1 && out[3] == 4);
    OK(tf_graph_replay_with(g, 2, (tf_tensor *[]){x, y}, (const tf_tensor *[]){sevens, sevens}));   /* both read */
    OK(tf_tensor_read(z, out, sizeof out));
    assert_true(out[0] == 14 && out[3] == 14);
    tf_tensor_release(stranger);
    tf_tensor_release(sevens);
    OK(tf_graph_begin(cpu));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "capturing another graph", tf_graph_replay(g));
    tf_graph *empty = NULL;
    OK(tf_graph_end(&empty));
    assert_int_equal(tf_graph_node_count(empty), 0);
    OK(tf_graph_replay(empty));
    tf_graph_destroy(empty);
    tf_graph_destroy(g);
    tf_graph_destroy(NULL);
    tf_tensor *all[] = {x, y, z, wrong};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    OK(tf_graph_begin(cpu));                                /* left open: tf_shutdown drops it */
}

static mybackend_stats my_stats(void) {
    mybackend_stats st = {0};
    mybackend_stats_fn f = (mybackend_stats_fn)tf_backend_proc_address("mybackend", "mybackend_stats");
    assert_non_null(f);
    f(&st);
    return st;
}

/* x -> 2x -> 2x*x -> + x on the example backend, all its own ops. */
static tf_tensor *own_ops(const tf_tensor *x, tf_tensor **keep) {
    tf_tensor *y = NULL, *z = NULL, *w = NULL;
    OK(tf_add(x, x, &y));
    OK(tf_mul(y, x, &z));
    OK(tf_add(z, x, &w));
    tf_tensor_release(y);
    *keep = z;
    return w;
}

static void expect_own_ops(const tf_tensor *w, const float *x) {
    float got[4];
    OK(tf_tensor_read(w, got, sizeof got));
    for (int i = 0; i < 4; i++)
        if (got[i] != 2 * x[i] * x[i] + x[i]) fail_msg("element %d: %g, want %g", i, got[i], 2 * x[i] * x[i] + x[i]);
}

/* SDK 2.3: a device with graph slots replays a graph of its own ops in one
 * launch; a fallback node, TF_GRAPH_NATIVE=0, the profiler or a capture the
 * device refuses give node-by-node replays, with the same results. */
static void test_native_graphs(void **state) {
    (void)state;
    tf_device *my = NULL;
    OK(tf_device_get("mybackend:0", &my));
    int64_t n = 4;
    float v[4] = {1, -2, 0.5f, 3}, w2[4] = {2, 0, -1, 0.25f};
    tf_tensor *x = tensor_f32(my, 1, &n, v), *keep = NULL, *e = NULL, *ekeep = NULL;
    tf_graph *g = NULL;
    OK(tf_graph_begin(my));
    tf_tensor *out = own_ops(x, &keep);
    OK(tf_graph_end(&g));
    assert_true(tf_graph_is_native(g));
    assert_int_equal(tf_graph_node_count(g), 3);
    mybackend_stats before = my_stats();
    OK(tf_tensor_write(x, w2, sizeof w2));
    OK(tf_graph_replay(g));
    mybackend_stats after = my_stats();
    assert_int_equal(after.graph_launches, before.graph_launches + 1);
    assert_int_equal(after.ops_run, before.ops_run + 3);
    expect_own_ops(out, w2);
    /* replay_with and the profiler (node by node, each op recorded) */
    tf_tensor *nx = tensor_f32(my, 1, &n, v);
    OK(tf_profiler_start());
    OK(tf_graph_replay_with(g, 1, &x, (const tf_tensor *[]){nx}));
    OK(tf_profiler_stop());
    assert_int_equal(my_stats().graph_launches, after.graph_launches);
    assert_true(tf_profiler_record_count() >= 3);
    expect_own_ops(out, v);
    tf_graph_destroy(g);
    tf_tensor_release(out);
    tf_tensor_release(keep);
    /* a node the device does not run (exp falls back to the CPU): node by node */
    OK(tf_graph_begin(my));
    OK(tf_exp(x, &e));
    OK(tf_graph_end(&g));
    assert_false(tf_graph_is_native(g));
    OK(tf_graph_replay(g));
    tf_graph_destroy(g);
    tf_tensor_release(e);
    /* the user's switch */
    setenv("TF_GRAPH_NATIVE", "0", 1);
    OK(tf_graph_begin(my));
    out = own_ops(x, &keep);
    OK(tf_graph_end(&g));
    setenv("TF_GRAPH_NATIVE", "1", 1);
    assert_false(tf_graph_is_native(g));
    OK(tf_tensor_write(x, w2, sizeof w2));
    OK(tf_graph_replay(g));
    expect_own_ops(out, w2);
    tf_graph_destroy(g);
    tf_tensor_release(out);
    tf_tensor_release(keep);
    /* the device refuses (its first allocation at the capture fails): node by node */
    mybackend_fail_after_fn fail_after =
        (mybackend_fail_after_fn)tf_backend_proc_address("mybackend", "mybackend_fail_after");
    assert_non_null(fail_after);
    OK(tf_graph_begin(my));
    out = own_ops(x, &ekeep);
    fail_after(1);
    OK(tf_graph_end(&g));
    fail_after(0);
    assert_false(tf_graph_is_native(g));
    OK(tf_tensor_write(x, v, sizeof v));
    OK(tf_graph_replay(g));
    expect_own_ops(out, v);
    tf_graph_destroy(g);
    tf_tensor *all[] = {out, ekeep, x, nx};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
}

/* ---- the fusion pass ---- */

#define ROWS 12
#define FEAT 24
#define WIDE 40

typedef struct ffn {
    tf_tensor *w1, *b1, *w2, *b2;
} ffn;

/* A BERT feed-forward half-layer as a model author writes it: the GELU and
 * the residual in place (as the library's encoder does). */
static tf_tensor *ffn_in_place(const ffn *f, const tf_tensor *x) {
    tf_tensor *h = NULL, *y = NULL;
    OK(tf_linear(x, f->w1, f->b1, &h));
    OK(tf_unary_into(h, TF_OP_GELU, h));
    OK(tf_linear(h, f->w2, f->b2, &y));
    OK(tf_binary_into(y, TF_OP_ADD, y, x));
    tf_tensor_release(h);
    return y;
}

/* The same with new tensors at each step, intermediates released. */
static tf_tensor *ffn_out_of_place(const ffn *f, const tf_tensor *x) {
    tf_tensor *p = NULL, *h = NULL, *q = NULL, *y = NULL;
    OK(tf_linear(x, f->w1, f->b1, &p));
    OK(tf_silu(p, &h));
    tf_tensor_release(p);
    OK(tf_linear(h, f->w2, NULL, &q));
    tf_tensor_release(h);
    OK(tf_add(x, q, &y));                 /* the residual on the left */
    tf_tensor_release(q);
    return y;
}

static int64_t captured_nodes(tf_device *d, tf_tensor *(*fn)(const ffn *, const tf_tensor *), const ffn *f,
                              const tf_tensor *x, tf_graph **g, tf_tensor **y) {
    OK(tf_graph_begin(d));
    *y = fn(f, x);
    OK(tf_graph_end(g));
    return tf_graph_node_count(*g);
}

/* Replayed (fused) against eager (unfused), new inputs each round: the same
 * bits on the CPU (same formulas on the same values), within f32 rounding
 * elsewhere. */
static void expect_replay_equals_eager(tf_device *d, tf_graph *g, tf_tensor *x, tf_tensor *y,
                                       tf_tensor *(*fn)(const ffn *, const tf_tensor *), const ffn *f) {
    bool cpu = !strcmp(tf_device_name(d), "cpu");
    float v[ROWS * FEAT], got[ROWS * FEAT], want[ROWS * FEAT];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < ROWS * FEAT; i++) v[i] = (float)(rand() % 2001 - 1000) / 300.0f;
        OK(tf_tensor_write(x, v, sizeof v));
        OK(tf_graph_replay(g));
        read_all(y, got, ROWS * FEAT);
        tf_tensor *e = fn(f, x);
        read_all(e, want, ROWS * FEAT);
        tf_tensor_release(e);
        for (int i = 0; i < ROWS * FEAT; i++)
            if (cpu ? got[i] != want[i] : !(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]))))
                fail_msg("%s round %d: element %d fused %.9g, eager %.9g", tf_device_name(d), round, i, got[i], want[i]);
    }
}

static tf_tensor *random_weight(tf_device *d, int64_t rows, int64_t cols) {
    float v[WIDE * FEAT];
    for (int64_t i = 0; i < rows * cols; i++) v[i] = (float)(rand() % 2001 - 1000) / 4000.0f;
    return tensor_f32(d, 2, (int64_t[]){rows, cols}, v);
}

static ffn make_ffn(tf_device *d) {
    ffn f = {random_weight(d, WIDE, FEAT), NULL, random_weight(d, FEAT, WIDE), NULL};
    tf_tensor *b1 = random_weight(d, 1, WIDE), *b2 = random_weight(d, 1, FEAT);
    OK(tf_reshape(b1, 1, (int64_t[]){WIDE}, &f.b1));
    OK(tf_reshape(b2, 1, (int64_t[]){FEAT}, &f.b2));
    tf_tensor_release(b1);
    tf_tensor_release(b2);
    return f;
}

static void free_ffn(ffn *f) {
    tf_tensor *all[] = {f->w1, f->b1, f->w2, f->b2};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
}

/* Each form of the half-layer captured with the pass off and on, on every
 * device, weights in `wt` (f32: GEMM_EPILOGUE; bf16 under f32 x: QMATMUL,
 * then tf_linear's bias add, into QMATMUL_EPILOGUE). On the CPU the plain
 * graph has plain[form] nodes and the fused one 2; replays equal eager. */
static void check_fusion_on_every_device(tf_dtype wt, const int64_t plain_nodes[2]) {
    int64_t shape[2] = {ROWS, FEAT};
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        bool cpu = !strcmp(tf_device_name(d), "cpu");
        ffn f = make_ffn(d), h = f;
        if (wt != TF_F32) {
            OK(tf_cast(f.w1, wt, &h.w1));
            OK(tf_cast(f.w2, wt, &h.w2));
        }
        tf_tensor *x = NULL, *y = NULL;
        OK(tf_zeros(d, TF_F32, 2, shape, &x));
        tf_graph *g = NULL;
        tf_tensor *(*forms[2])(const ffn *, const tf_tensor *) = {ffn_in_place, ffn_out_of_place};
        for (int form = 0; form < 2; form++) {
            setenv("TF_GRAPH_FUSION", "0", 1);
            int64_t plain = captured_nodes(d, forms[form], &h, x, &g, &y);
            setenv("TF_GRAPH_FUSION", "1", 1);
            tf_graph_destroy(g);
            tf_tensor_release(y);
            int64_t fused = captured_nodes(d, forms[form], &h, x, &g, &y);
            if (cpu || wt == TF_F32) assert_int_equal(plain, plain_nodes[form]);
            if (cpu) assert_int_equal(fused, 2);      /* product + its tail, twice */
            else assert_true(fused <= plain);         /* where the device has the kernel */
            expect_replay_equals_eager(d, g, x, y, forms[form], &h);
            tf_graph_destroy(g);
            tf_tensor_release(y);
        }
        if (wt != TF_F32) {
            tf_tensor_release(h.w1);
            tf_tensor_release(h.w2);
        }
        tf_tensor_release(x);
        free_ffn(&f);
    }
}

static void test_fusion_matches_eager_on_every_device(void **state) {
    (void)state;
    check_fusion_on_every_device(TF_F32, (const int64_t[]){4, 4});   /* linear, activation, linear, add */
}

/* bf16 weights under f32 x: the product, its bias, activation and residual
 * become one QMATMUL_EPILOGUE node per linear on the CPU. */
static void test_kept_weight_fusion_matches_eager(void **state) {
    (void)state;
    check_fusion_on_every_device(TF_BF16, (const int64_t[]){6, 5});  /* product + bias, activation, product (+ bias), add */
}

/* What must not fuse: an intermediate the user still holds, or a later
 * node reads; a dtype change between the product and the add; an add that
 * broadcasts the product to a larger shape. */
static void test_fusion_near_misses(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    ffn f = make_ffn(cpu);
    int64_t shape[2] = {ROWS, FEAT};
    tf_tensor *x = NULL, *p = NULL, *h = NULL, *y = NULL, *z = NULL, *r64 = NULL, *row = NULL, *wide = NULL;
    OK(tf_rand(cpu, TF_F32, 2, shape, 5, &x));
    tf_graph *g = NULL;
    /* held: p survives the capture */
    OK(tf_graph_begin(cpu));
    OK(tf_linear(x, f.w1, f.b1, &p));
    OK(tf_gelu(p, &h));
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 2);
    tf_graph_destroy(g);
    tf_tensor_release(h);
    tf_tensor_release(p);
    /* read later: p released, but a later node adds it to the GELU's output */
    OK(tf_graph_begin(cpu));
    OK(tf_linear(x, f.w1, f.b1, &p));
    OK(tf_gelu(p, &h));
    OK(tf_add(h, p, &y));
    tf_tensor_release(p);
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 3);
    tf_graph_destroy(g);
    tf_tensor_release(h);
    tf_tensor_release(y);
    /* a dtype change: an f64 residual promotes the sum */
    OK(tf_rand(cpu, TF_F64, 2, (int64_t[]){ROWS, WIDE}, 6, &r64));
    OK(tf_graph_begin(cpu));
    OK(tf_linear(x, f.w1, f.b1, &p));
    OK(tf_add(p, r64, &z));
    tf_tensor_release(p);
    OK(tf_graph_end(&g));
    assert_true(tf_graph_node_count(g) >= 2);        /* the cast stands between them */
    tf_graph_destroy(g);
    tf_tensor_release(z);
    /* a broadcast: one row of product added to ROWS rows */
    OK(tf_slice(x, 0, 0, 1, 1, &row));
    OK(tf_rand(cpu, TF_F32, 2, (int64_t[]){ROWS, WIDE}, 7, &wide));
    OK(tf_graph_begin(cpu));
    OK(tf_linear(row, f.w1, f.b1, &p));
    OK(tf_add(p, wide, &z));
    tf_tensor_release(p);
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 2);
    tf_graph_destroy(g);
    tf_tensor *all[] = {z, r64, row, wide, x};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    free_ffn(&f);
}

/* tf_linear_fused itself, against its parts. */
static void test_linear_fused_api(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    ffn f = make_ffn(cpu);
    tf_tensor *x = NULL, *r = NULL, *a = NULL, *b = NULL, *c = NULL, *fused = NULL;
    OK(tf_rand(cpu, TF_F32, 3, (int64_t[]){2, ROWS / 2, FEAT}, 8, &x));
    OK(tf_rand(cpu, TF_F32, 1, (int64_t[]){WIDE}, 9, &r));
    OK(tf_linear_fused(x, f.w1, f.b1, TF_OP_GELU_TANH, r, &fused));
    OK(tf_linear(x, f.w1, f.b1, &a));
    OK(tf_gelu_tanh(a, &b));
    OK(tf_add(b, r, &c));
    float got[ROWS * WIDE], want[ROWS * WIDE];
    read_all(fused, got, ROWS * WIDE);
    read_all(c, want, ROWS * WIDE);
    for (int i = 0; i < ROWS * WIDE; i++) assert_true(fabsf(got[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])));
    tf_tensor *bad = NULL;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not a unary op", tf_linear_fused(x, f.w1, f.b1, TF_OP_CLAMP, NULL, &bad));
    assert_null(bad);
    FAILS_WITH(TF_ERR_SHAPE, "does not broadcast", tf_linear_fused(x, f.w1, f.b1, TF_OP_GELU, f.b2, &bad));
    assert_null(bad);
    tf_tensor *all[] = {x, r, a, b, c, fused};
    for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
    free_ffn(&f);
}

/* ---- add + norm: one ADD_NORM node ---- */

/* A residual add and a norm as a model author writes them (x + r, then the
 * norm of the sum; the sum released), layer or RMS. */
static tf_tensor *add_then_norm(const tf_tensor *x, const tf_tensor *r, const tf_tensor *w, const tf_tensor *b,
                                bool layer) {
    tf_tensor *h = NULL, *y = NULL;
    OK(tf_add(x, r, &h));
    if (layer) OK(tf_layernorm(h, w, b, 1e-5, &y));
    else OK(tf_rmsnorm(h, w, 1e-6, &y));
    tf_tensor_release(h);
    return y;
}

static void expect_same_rows(tf_device *d, const float *got, const float *want, int n, const char *what) {
    bool cpu = !strcmp(tf_device_name(d), "cpu");
    for (int i = 0; i < n; i++)
        if (cpu ? got[i] != want[i] : !(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]))))
            fail_msg("%s %s: element %d fused %.9g, eager %.9g", tf_device_name(d), what, i, got[i], want[i]);
}

/* Captured add + norm fuse into one node where the device has the kernel
 * (the CPU), its parts elsewhere; replays equal eager runs (the same bits
 * on the CPU: the sum is rounded as tf_add stores it). */
static void test_add_norm_fusion_on_every_device(void **state) {
    (void)state;
    int64_t shape[2] = {ROWS, FEAT};
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        bool cpu = !strcmp(tf_device_name(d), "cpu");
        tf_tensor *x = NULL, *r = NULL, *w = random_weight(d, 1, FEAT), *b = random_weight(d, 1, FEAT), *w1, *b1;
        OK(tf_reshape(w, 1, (int64_t[]){FEAT}, &w1));
        OK(tf_reshape(b, 1, (int64_t[]){FEAT}, &b1));
        OK(tf_zeros(d, TF_F32, 2, shape, &x));
        r = random_weight(d, ROWS, FEAT);
        for (int layer = 0; layer < 2; layer++) {
            tf_graph *g = NULL;
            OK(tf_graph_begin(d));
            tf_tensor *y = add_then_norm(x, layer ? b1 : r, w1, layer ? b1 : NULL, layer);   /* a broadcast row, a block */
            OK(tf_graph_end(&g));
            if (cpu) assert_int_equal(tf_graph_node_count(g), 1);
            else assert_true(tf_graph_node_count(g) <= 2);
            float v[ROWS * FEAT], got[ROWS * FEAT], want[ROWS * FEAT];
            for (int round = 0; round < 2; round++) {
                for (int i = 0; i < ROWS * FEAT; i++) v[i] = (float)(rand() % 2001 - 1000) / 300.0f;
                OK(tf_tensor_write(x, v, sizeof v));
                OK(tf_graph_replay(g));
                read_all(y, got, ROWS * FEAT);
                tf_tensor *e = add_then_norm(x, layer ? b1 : r, w1, layer ? b1 : NULL, layer);
                read_all(e, want, ROWS * FEAT);
                tf_tensor_release(e);
                expect_same_rows(d, got, want, ROWS * FEAT, layer ? "add+layernorm" : "add+rmsnorm");
            }
            tf_graph_destroy(g);
            tf_tensor_release(y);
        }
        tf_tensor *all[] = {x, r, w, b, w1, b1};
        for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
    }
}

/* What must not fuse: a sum the user still holds, one a later node reads,
 * a sum written into an input (the user's tensor changes), a norm that
 * reads the sum in another shape. */
static void test_add_norm_near_misses(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    int64_t shape[2] = {ROWS, FEAT};
    tf_tensor *x = NULL, *r = NULL, *h = NULL, *y = NULL, *z = NULL, *v = NULL;
    OK(tf_rand(cpu, TF_F32, 2, shape, 11, &x));
    OK(tf_rand(cpu, TF_F32, 2, shape, 12, &r));
    tf_graph *g = NULL;
    OK(tf_graph_begin(cpu));                         /* held */
    OK(tf_add(x, r, &h));
    OK(tf_rmsnorm(h, NULL, 1e-6, &y));
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 2);
    tf_graph_destroy(g);
    tf_tensor_release(h);
    tf_tensor_release(y);
    OK(tf_graph_begin(cpu));                         /* read later */
    OK(tf_add(x, r, &h));
    OK(tf_rmsnorm(h, NULL, 1e-6, &y));
    OK(tf_mul(h, y, &z));
    tf_tensor_release(h);
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 3);
    tf_graph_destroy(g);
    tf_tensor_release(y);
    tf_tensor_release(z);
    OK(tf_graph_begin(cpu));                         /* the sum written into x */
    OK(tf_binary_into(x, TF_OP_ADD, x, r));
    OK(tf_layernorm(x, NULL, NULL, 1e-5, &y));
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 2);
    tf_graph_destroy(g);
    tf_tensor_release(y);
    OK(tf_graph_begin(cpu));                         /* the norm over other rows: [ROWS/2, 2*FEAT] */
    OK(tf_add(x, r, &h));
    OK(tf_reshape(h, 2, (int64_t[]){ROWS / 2, 2 * FEAT}, &v));
    tf_tensor_release(h);
    OK(tf_layernorm(v, NULL, NULL, 1e-5, &y));
    tf_tensor_release(v);
    OK(tf_graph_end(&g));
    assert_int_equal(tf_graph_node_count(g), 2);
    tf_graph_destroy(g);
    tf_tensor_release(y);
    tf_tensor_release(x);
    tf_tensor_release(r);
}

/* tf_add_layernorm / tf_add_rmsnorm against their parts, and bad input. */
static void test_add_norm_api(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_tensor *x = NULL, *r = NULL, *w = NULL, *b = NULL, *x64 = NULL, *h = NULL, *want = NULL, *got = NULL;
    OK(tf_rand(cpu, TF_F32, 3, (int64_t[]){2, ROWS / 2, FEAT}, 13, &x));
    OK(tf_rand(cpu, TF_F32, 2, (int64_t[]){ROWS / 2, FEAT}, 14, &r));
    OK(tf_rand(cpu, TF_F32, 1, (int64_t[]){FEAT}, 15, &w));
    OK(tf_rand(cpu, TF_F32, 1, (int64_t[]){FEAT}, 16, &b));
    float g[ROWS * FEAT], e[ROWS * FEAT];
    for (int layer = 0; layer < 2; layer++) {
        OK(tf_add(x, r, &h));
        if (layer) OK(tf_layernorm(h, w, b, 1e-5, &want));
        else OK(tf_rmsnorm(h, w, 1e-5, &want));
        if (layer) OK(tf_add_layernorm(x, r, w, b, 1e-5, &got));
        else OK(tf_add_rmsnorm(x, r, w, 1e-5, &got));
        read_all(got, g, ROWS * FEAT);
        read_all(want, e, ROWS * FEAT);
        for (int i = 0; i < ROWS * FEAT; i++) assert_true(g[i] == e[i]);
        tf_tensor *all[] = {h, want, got};
        for (int i = 0; i < 3; i++) tf_tensor_release(all[i]);
    }
    tf_tensor *bad = NULL;
    OK(tf_cast(r, TF_F64, &x64));
    FAILS_WITH(TF_ERR_DTYPE, "one dtype", tf_add_rmsnorm(x, x64, NULL, 1e-6, &bad));
    assert_null(bad);
    FAILS_WITH(TF_ERR_SHAPE, "does not broadcast", tf_add_layernorm(r, x, NULL, NULL, 1e-6, &bad));
    assert_null(bad);
    FAILS_WITH(TF_ERR_SHAPE, "weight", tf_add_layernorm(x, r, r, NULL, 1e-6, &bad));
    assert_null(bad);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "eps", tf_add_rmsnorm(x, r, NULL, -1, &bad));
    assert_null(bad);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_add_rmsnorm(x, NULL, NULL, 1e-6, &bad));
    tf_tensor *all[] = {x, r, w, b, x64};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
}

/* ---- a capture's temporaries reuse released buffers ---- */

#define CHAIN 40
#define SIDE 64

/* x + 1 + 2 + ... CHAIN steps, each step's input released once read; a
 * constant made mid-chain (tf_tensor_from_data, when released buffers are
 * waiting) joins at the end: it must not share bytes with a temporary. */
static tf_tensor *long_chain(tf_device *d, const tf_tensor *x) {
    tf_tensor *t = tf_tensor_retain((tf_tensor *)x), *k = NULL;
    float ramp[SIDE * SIDE];
    for (int i = 0; i < SIDE * SIDE; i++) ramp[i] = (float)(i % 97) / 8.0f;
    for (int step = 1; step <= CHAIN; step++) {
        tf_tensor *c = NULL, *next = NULL;
        OK(tf_scalar(d, TF_F32, step, &c));
        OK(tf_add(t, c, &next));
        tf_tensor_release(c);
        tf_tensor_release(t);
        t = next;
        if (step == CHAIN / 2) OK(tf_tensor_from_data(d, TF_F32, 2, (int64_t[]){SIDE, SIDE}, ramp, &k));
    }
    tf_tensor *y = NULL;
    OK(tf_mul(t, k, &y));
    tf_tensor_release(t);
    tf_tensor_release(k);
    return y;
}

/* Bytes the device holds for tensors (claimed buffers included). */
static uint64_t held_bytes(tf_device *d) {
    tf_memory_stats st;
    OK(tf_device_memory_stats(d, &st));
    return st.allocated;
}

static void test_capture_reuses_its_temporaries(void **state) {
    (void)state;
    const size_t one = SIDE * SIDE * sizeof(float);
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        float v[SIDE * SIDE], got[SIDE * SIDE], want[SIDE * SIDE];
        tf_tensor *x = NULL;
        OK(tf_zeros(d, TF_F32, 2, (int64_t[]){SIDE, SIDE}, &x));
        for (int reuse = 1; reuse >= 0; reuse--) {
            if (!reuse) setenv("TF_GRAPH_REUSE", "0", 1);
            uint64_t before = held_bytes(d);
            tf_graph *g = NULL;
            OK(tf_graph_begin(d));
            tf_tensor *y = long_chain(d, x);
            OK(tf_graph_end(&g));
            uint64_t held = held_bytes(d) - before;
            setenv("TF_GRAPH_REUSE", "1", 1);
            /* the chain's temporaries, the constant, y; scalars are small.
             * (Frees deferred behind an async device's queue may land during
             * the capture and lower the count, never raise it: the second
             * bound has room for them.) */
            if (reuse) assert_true(held < 8 * one + 4096);
            else assert_true(held >= CHAIN / 2 * one);
            for (int round = 0; round < 2; round++) {
                random_row(v, SIDE * SIDE);
                OK(tf_tensor_write(x, v, sizeof v));
                OK(tf_graph_replay(g));
                read_all(y, got, SIDE * SIDE);
                tf_tensor *e = long_chain(d, x);
                read_all(e, want, SIDE * SIDE);
                tf_tensor_release(e);
                for (int i = 0; i < SIDE * SIDE; i++)
                    if (!(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i]))))
                        fail_msg("%s (reuse %d) round %d: element %d replayed %.9g, eager %.9g", tf_device_name(d),
                                 reuse, round, i, got[i], want[i]);
            }
            tf_graph_destroy(g);
            tf_tensor_release(y);
        }
        tf_tensor_release(x);
    }
}

int main(void) {
    /* The switches the tests flip exist before any thread does, and are only
     * ever overwritten (never added or removed): glibc's setenv reallocates
     * the environment when a name is added, which crashed a lavapipe thread
     * reading it at that moment (1 run in 3 under ASan). */
    setenv("TF_GRAPH_NATIVE", "1", 0);
    setenv("TF_GRAPH_FUSION", "1", 0);
    setenv("TF_GRAPH_REUSE", "1", 0);
    if (mybackend_register() != TF_OK) return 1;
    const char *seed_text = getenv("TF_TEST_SEED");
    unsigned seed = seed_text ? (unsigned)strtoul(seed_text, NULL, 10) : (unsigned)time(NULL);
    printf("test_graph: TF_TEST_SEED=%u\n", seed);
    srand(seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_matches_eager_on_every_device),
        cmocka_unit_test(test_index_guards),
        cmocka_unit_test(test_native_graphs),
        cmocka_unit_test(test_fusion_matches_eager_on_every_device),
        cmocka_unit_test(test_kept_weight_fusion_matches_eager),
        cmocka_unit_test(test_fusion_near_misses),
        cmocka_unit_test(test_linear_fused_api),
        cmocka_unit_test(test_add_norm_fusion_on_every_device),
        cmocka_unit_test(test_add_norm_near_misses),
        cmocka_unit_test(test_add_norm_api),
        cmocka_unit_test(test_capture_reuses_its_temporaries),
        cmocka_unit_test(test_what_a_replay_cannot_repeat_is_refused),   /* last: leaves a capture open */
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
