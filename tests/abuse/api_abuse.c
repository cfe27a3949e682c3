/* Every public function that takes sizes, axes, counts, strides or offsets,
 * called with overflowing, negative and extreme values. Each call either
 * succeeds with a result that reads back, or fails with a status and a
 * message that starts with the function's name and leaves its output NULL;
 * either way the inputs keep their values. Run under ASan and UBSan by
 * make test, so a wild write or a signed overflow fails it too. */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/dlpack.h>
#include <tensorframe/tensorframe.h>

static int calls, problems;
static tf_tensor *x, *y, *m4, *idx, *pos;       /* the inputs every call may use */
static uint64_t x_hash, y_hash, m4_hash;

static uint64_t hash(const tf_tensor *t) {
    float buf[64] = {0};
    size_t n = (size_t)tf_tensor_numel(t) * tf_dtype_size(tf_tensor_dtype(t));
    if (n > sizeof buf || tf_tensor_read(t, buf, sizeof buf) != TF_OK) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((unsigned char *)buf)[i]) * 0x100000001b3ull;
    return h;
}

/* After a call: its status, message, output, and the inputs. */
static void check(const char *fn, const char *what, tf_status s, tf_tensor *out, bool out_set) {
    calls++;
    const char *msg = tf_last_error();
    size_t fl = strlen(fn);
    if (s != TF_OK) {
        if (!*msg || strncmp(msg, fn, fl) || msg[fl] != ':') {
            printf("FAIL %s: %s failed with %s and message '%s' (want it to start '%s:')\n", what, fn,
                   tf_status_name(s), msg, fn);
            problems++;
        }
        if (out_set && out) {
            printf("FAIL %s: %s failed but left its output set\n", what, fn);
            problems++;
        }
    } else if (out_set && out) {
        int64_t n = tf_tensor_numel(out);
        if (n < 0) {
            printf("FAIL %s: %s succeeded with a negative element count\n", what, fn);
            problems++;
        } else if (n <= 4096 && (size_t)n * tf_dtype_size(tf_tensor_dtype(out)) <= (1u << 16)) {
            static unsigned char buf[1 << 16];
            tf_status r = tf_tensor_read(out, buf, sizeof buf);
            if (r != TF_OK) {
                printf("FAIL %s: %s's result does not read back: %s\n", what, fn, tf_last_error());
                problems++;
            }
        }
    }
    if (out_set) tf_tensor_release(out);
    if (hash(x) != x_hash || hash(y) != y_hash || hash(m4) != m4_hash) {
        printf("FAIL %s: %s changed an input\n", what, fn);
        problems++;
    }
}

#define OUT1(fn, ...)                                                         \
    do {                                                                      \
        tf_tensor *o_ = NULL;                                                 \
        tf_status s_ = fn(__VA_ARGS__, &o_);                                  \
        check(#fn, #fn "(" #__VA_ARGS__ ")", s_, o_, true);                   \
    } while (0)

/* Hostile, never merely large: each is past any machine's memory or invalid, so no call
 * spends minutes filling a legal 16 GB tensor. */
static const int64_t big[] = {INT64_MAX, INT64_MIN, -1, INT64_MAX / 2, (int64_t)1 << 42, (int64_t)1 << 62, -((int64_t)1 << 62)};
static const int ints[] = {INT_MAX, INT_MIN, -1, -9, 9, TF_ALL_AXES, 1000};
#define N_BIG (int)(sizeof big / sizeof *big)
#define N_INTS (int)(sizeof ints / sizeof *ints)

static void creation(tf_device *cpu) {
    for (int i = 0; i < N_BIG; i++) {
        int64_t shape2[2] = {big[i], 2}, shape3[3] = {big[i], big[i], 0};
        OUT1(tf_empty, cpu, TF_F32, 2, shape2);
        OUT1(tf_zeros, cpu, TF_F64, 3, shape3);
        OUT1(tf_full, cpu, TF_I64, 2, shape2, 1.0);
        OUT1(tf_rand, cpu, TF_F32, 2, shape2, 1);
        OUT1(tf_eye, cpu, TF_F32, big[i], 3);
        OUT1(tf_eye, cpu, TF_F32, 3, big[i]);
        OUT1(tf_tensor_from_data, cpu, TF_F32, 2, shape2, (const float[4]){0});
        OUT1(tf_arange, cpu, TF_F32, 0.0, (double)big[i], 1.0);
        OUT1(tf_arange, cpu, TF_I8, (double)big[i], 0.0, -1e300);
    }
    int64_t ones[TF_MAX_DIMS + 1];                      /* an extent for every axis an ndim may claim */
    for (int i = 0; i <= TF_MAX_DIMS; i++) ones[i] = 1;
    for (int i = 0; i < N_INTS; i++) OUT1(tf_ones, cpu, TF_F32, ints[i], ones);
}

static void views(void) {
    for (int i = 0; i < N_BIG; i++) {
        int64_t s2[2] = {big[i], -1}, s1 = big[i];
        OUT1(tf_reshape, x, 2, s2);
        OUT1(tf_reshape, x, 1, &s1);
        OUT1(tf_expand, x, 2, s2);
        OUT1(tf_slice, x, 0, big[i], big[i], 1);
        OUT1(tf_slice, x, 0, 0, INT64_MAX, big[i]);
        OUT1(tf_slice, x, 0, INT64_MIN, INT64_MAX, INT64_MAX);
        OUT1(tf_tril, m4, big[i]);
        OUT1(tf_triu, m4, big[i]);
        OUT1(tf_var, x, 0, big[i], false);
        OUT1(tf_cumsum, x, (int)big[i]);
    }
    for (int i = 0; i < N_INTS; i++) {
        int perm[2] = {ints[i], 0};
        OUT1(tf_permute, m4, perm);
        OUT1(tf_transpose, m4, ints[i], 0);
        OUT1(tf_squeeze, x, ints[i]);
        OUT1(tf_unsqueeze, x, ints[i]);
        OUT1(tf_sum, m4, ints[i], true);
        OUT1(tf_argmax, m4, ints[i], false);
        OUT1(tf_softmax, m4, ints[i]);
        OUT1(tf_index_select, m4, ints[i], idx);
        OUT1(tf_gather, m4, ints[i], idx);
        OUT1(tf_flip, m4, 1, &ints[i]);
        OUT1(tf_flip, m4, ints[i], ((const int[16]){0, 1}));
    }
}

static void composites(void) {
    for (int i = 0; i < N_BIG; i++) {
        int64_t pads[4] = {big[i], 0, 0, big[i]}, reps[2] = {big[i], 2}, sizes[2] = {big[i], (int64_t)(8ull - (uint64_t)big[i])};   /* they add up to 8 when they wrap */
        OUT1(tf_pad, m4, 2, pads, 0.0);
        OUT1(tf_tile, m4, 2, reps);
        tf_tensor *outs[2] = {(tf_tensor *)&outs, (tf_tensor *)&outs};
        tf_status s = tf_split(x, 0, 2, sizes, outs);
        check("tf_split", "tf_split(sizes)", s, NULL, false);
        if (s == TF_OK) {
            tf_tensor_release(outs[0]);
            tf_tensor_release(outs[1]);
        } else if (outs[0] || outs[1]) {
            printf("FAIL tf_split failed but left outputs set\n");
            problems++;
        }
    }
    for (int i = 0; i < N_INTS; i++) {
        const tf_tensor *two[2] = {m4, m4};
        OUT1(tf_concat, 2, two, ints[i]);
        OUT1(tf_stack, 2, two, ints[i]);
        if (ints[i] <= 0) OUT1(tf_concat, ints[i], two, 0);    /* a count past the array is the caller's bug */
        int64_t pads[16] = {1, 1}, reps[16] = {2};
        OUT1(tf_pad, m4, ints[i], pads, 0.0);
        OUT1(tf_tile, m4, ints[i], reps);
        tf_tensor *outs[2] = {NULL, NULL};
        int64_t sizes[2] = {4, 4};          /* the axis is hostile, the count is true */
        tf_status s = tf_split(x, ints[i], 2, sizes, outs);
        check("tf_split", "tf_split(axis)", s, NULL, false);
        tf_tensor_release(outs[0]);
        tf_tensor_release(outs[1]);
    }
}

static void transformer_and_vision(tf_device *cpu) {
    int64_t qs[4] = {1, 2, 2, 4};
    tf_tensor *q = NULL, *img = NULL, *w = NULL;
    tf_randn(cpu, TF_F32, 4, qs, 5, &q);
    int64_t is[4] = {1, 1, 6, 6}, ws[4] = {1, 1, 3, 3};
    tf_randn(cpu, TF_F32, 4, is, 6, &img);
    tf_randn(cpu, TF_F32, 4, ws, 7, &w);
    for (int i = 0; i < N_BIG; i++) {
        OUT1(tf_rope, q, pos, 2, big[i], 10000.0, TF_ROPE_HALF_SPLIT);
        OUT1(tf_sdpa, q, q, q, NULL, 0.0, true, big[i]);
        int64_t p2[2] = {big[i], 1}, one2[2] = {1, 1};
        OUT1(tf_conv2d, img, w, NULL, p2, NULL, NULL, 1);
        OUT1(tf_conv2d, img, w, NULL, NULL, p2, NULL, 1);
        OUT1(tf_conv2d, img, w, NULL, NULL, NULL, p2, 1);
        OUT1(tf_conv2d, img, w, NULL, NULL, NULL, NULL, big[i]);
        OUT1(tf_maxpool2d, img, p2, NULL, NULL, NULL);
        OUT1(tf_maxpool2d, img, one2, p2, NULL, p2);
        OUT1(tf_avgpool2d, img, (const int64_t[2]){2, 2}, NULL, p2, true);
        OUT1(tf_cross_entropy, m4, idx, big[i], TF_REDUCTION_MEAN);
    }
    for (int i = 0; i < N_INTS; i++) {
        OUT1(tf_rope, q, pos, ints[i], 0, 10000.0, TF_ROPE_HALF_SPLIT);
        OUT1(tf_cross_entropy, m4, idx, -100, (tf_reduction)ints[i]);
        OUT1(tf_rope, q, pos, 2, 0, 10000.0, (tf_rope_mode)ints[i]);
    }
    tf_tensor_release(q);
    tf_tensor_release(img);
    tf_tensor_release(w);
}

static void reading(void) {
    static const size_t sizes[] = {0, 1, 31, SIZE_MAX};
    for (int i = 0; i < 4; i++) {
        float buf[64];
        tf_status s = tf_tensor_read(x, buf, sizes[i] == SIZE_MAX ? sizeof buf : sizes[i]);
        check("tf_tensor_read", "tf_tensor_read(dst_bytes)", s, NULL, false);
    }
}

/* A call that must be refused: its status and message as check() wants. */
static void must_fail(const char *fn, const char *what, tf_status s) {
    if (s == TF_OK) {
        calls++;
        printf("FAIL %s: %s accepted it\n", what, fn);
        problems++;
        return;
    }
    check(fn, what, s, NULL, false);
}

/* Hostile counts and configurations for the loss scaler; hostile dtypes
 * and depths for autocast. */
static void mixed_precision(void) {
    tf_grad_scaler *sc = NULL;
    tf_status s = tf_grad_scaler_create(NULL, &sc);
    check("tf_grad_scaler_create", "tf_grad_scaler_create(NULL)", s, NULL, false);
    tf_tensor *g[1] = {x};
    for (int i = 0; i < N_INTS; i++) {
        if (ints[i] > 0) continue;                        /* a count past the array is the caller's bug */
        bool finite = true;
        s = tf_grad_scaler_unscale(sc, ints[i], g, &finite);
        if (ints[i] < 0) must_fail("tf_grad_scaler_unscale", "tf_grad_scaler_unscale(n < 0)", s);
    }
    tf_grad_scaler_destroy(sc);
    tf_grad_scaler_config bad[] = {{0, 2, 0.5, 1}, {-1, 2, 0.5, 1}, {1, 1, 0.5, 1}, {1, 2, 0, 1}, {1, 2, 0.5, INT64_MIN},
                                   {1e300 * 1e300, 2, 0.5, 1}, {1, 2, 0.5, 0}, {0.0 / 0.0, 2, 0.5, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tf_grad_scaler *b = NULL;
        s = tf_grad_scaler_create(&bad[i], &b);
        must_fail("tf_grad_scaler_create", "tf_grad_scaler_create(bad config)", s);
        tf_grad_scaler_destroy(b);
    }
    static const int dtypes[] = {-1, 999, INT_MIN, TF_I64, TF_F64};
    for (int i = 0; i < 5; i++) {
        s = tf_autocast_begin((tf_dtype)dtypes[i]);
        must_fail("tf_autocast_begin", "tf_autocast_begin(bad dtype)", s);
    }
}

/* A graph over y = x + x, replayed with hostile inputs: counts, NULLs, a
 * tensor the graph never read, its own output, another shape. Each is
 * refused before anything is written (x keeps its values: check() looks). */
static void graphs(tf_device *cpu) {
    tf_tensor *stage = NULL, *out = NULL, *fresh = NULL;
    tf_copy(x, &stage);                               /* a static input the graph reads */
    tf_graph *g = NULL;
    if (tf_graph_begin(cpu) != TF_OK || tf_add(stage, stage, &out) != TF_OK || tf_graph_end(&g) != TF_OK) {
        printf("FAIL graphs: no graph to abuse (%s)\n", tf_last_error());
        problems++;
        return;
    }
    tf_copy(x, &fresh);
    tf_tensor *captured[3] = {stage, NULL, NULL};
    const tf_tensor *values[3] = {x, NULL, NULL};
    for (int i = 0; i < N_INTS; i++)                  /* a count past the arrays is the caller's bug: negative ones */
        if (ints[i] < 0)
            must_fail("tf_graph_replay_with", "tf_graph_replay_with(n < 0)", tf_graph_replay_with(g, ints[i], captured, values));
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(NULL entry)", tf_graph_replay_with(g, 2, captured, values));
    captured[1] = fresh, values[1] = x;
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(never read)", tf_graph_replay_with(g, 2, captured, values));
    captured[1] = out;
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(its output)", tf_graph_replay_with(g, 2, captured, values));
    captured[1] = stage, values[1] = m4;
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(another shape)", tf_graph_replay_with(g, 2, captured, values));
    captured[0] = x;                                  /* x itself: never read by the graph, so never written */
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(x)", tf_graph_replay_with(g, 1, captured, (const tf_tensor *[]){y}));
    must_fail("tf_graph_replay_with", "tf_graph_replay_with(NULL graph)", tf_graph_replay_with(NULL, 1, captured, values));
    tf_graph_destroy(g);
    tf_tensor_release(stage);
    tf_tensor_release(out);
    tf_tensor_release(fresh);
}

/* Scopes misused: ended twice, ended with a pointer that is no scope, and
 * left open on threads that end (reclaimed at their exit) and on this
 * thread until tf_shutdown (reclaimed there: LeakSanitizer checks). */
static _Atomic int witnesses_released;
static float witness_data[4];

static void witness_deleter(DLManagedTensorVersioned *m) {
    witnesses_released++;
    free(m);
}

/* A tensor over caller memory whose release the deleter reports: made in
 * an open scope, it is the scope's, so it goes exactly when the scope does. */
static void make_witness(void) {
    static int64_t shape = 4;
    DLManagedTensorVersioned *m = calloc(1, sizeof *m);
    *m = (DLManagedTensorVersioned){{1, 0}, NULL, witness_deleter, 0,
                                    {witness_data, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, NULL, 0}};
    tf_tensor *t = NULL;
    if (tf_tensor_from_dlpack(m, &t) != TF_OK) free(m);
}

static void *leave_a_scope_open(void *arg) {
    tf_scope *sc = NULL;
    tf_tensor *t = NULL;
    if (tf_scope_begin(&sc) == TF_OK) tf_add((tf_tensor *)arg, (tf_tensor *)arg, &t);
    make_witness();
    return NULL;
}

static void scopes(void) {
    tf_scope *sc = NULL, *inner = NULL;
    tf_scope_begin(&sc);
    tf_scope_end(sc);
    must_fail("tf_scope_end", "tf_scope_end(twice)", tf_scope_end(sc));
    int not_a_scope = 0;
    must_fail("tf_scope_end", "tf_scope_end(not a scope)", tf_scope_end((tf_scope *)&not_a_scope));
    must_fail("tf_scope_end", "tf_scope_end(NULL)", tf_scope_end(NULL));
    pthread_t th[10];
    for (int i = 0; i < 10; i++) pthread_create(&th[i], NULL, leave_a_scope_open, x);
    for (int i = 0; i < 10; i++) pthread_join(th[i], NULL);
    calls++;
    if (witnesses_released != 10) {
        printf("FAIL scopes: %d of 10 threads' open scopes were reclaimed at their exit\n", (int)witnesses_released);
        problems++;
    }
    tf_tensor *t = NULL;                              /* left open here: tf_shutdown ends them */
    tf_scope_begin(&sc);
    tf_add(x, y, &t);
    tf_scope_begin(&inner);
    tf_mul(x, y, &t);
    make_witness();
}

int main(void) {
    tf_device *cpu = NULL;
    if (tf_device_get("cpu", &cpu) != TF_OK) return 1;
    int64_t n = 8, ms[2] = {2, 4}, two = 2;
    tf_arange(cpu, TF_F32, 0, 8, 1, &x);
    tf_arange(cpu, TF_F32, 1, 9, 1, &y);
    tf_tensor *flat = NULL;
    tf_arange(cpu, TF_F32, 0, 8, 1, &flat);
    tf_reshape(flat, 2, ms, &m4);
    tf_tensor_release(flat);
    tf_zeros(cpu, TF_I64, 1, &two, &idx);
    tf_arange(cpu, TF_I64, 0, 2, 1, &pos);
    (void)n;
    x_hash = hash(x);
    y_hash = hash(y);
    m4_hash = hash(m4);
    creation(cpu);
    views();
    composites();
    transformer_and_vision(cpu);
    reading();
    mixed_precision();
    graphs(cpu);
    scopes();
    tf_tensor *all[] = {x, y, m4, idx, pos};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    tf_shutdown();
    calls++;
    if (witnesses_released != 11) {
        printf("FAIL scopes: the scopes left open on the main thread were not reclaimed by tf_shutdown\n");
        problems++;
    }
    printf("%d calls with hostile values: %d passed, %d failed\n", calls, calls - problems, problems);
    return problems ? 1 : 0;
}
