/* What only a GPU can show of the CUDA plugin (scripts/cuda-check.sh runs
 * it on cuda:0; with no CUDA device it exits 77, skipped):
 *   - host transfers through the pinned staging buffers, both ways, larger
 *     than the buffers and of odd sizes;
 *   - tf_tensor_to cpu -> cuda -> cpu, and cuda -> cuda on one device;
 *   - stream order: a chain of queued ops, inputs released while their
 *     kernels may still run, then tf_device_synchronize;
 *   - the caching allocator: a cached block released to make room (a
 *     retry), and a request past the card's memory failing with
 *     TF_ERR_OUT_OF_MEMORY while the process goes on;
 *   - GEMM_EPILOGUE as one cuBLASLt call (bias + GELU-tanh, ReLU, a
 *     residual after a bias) against the CPU;
 *   - with a test-only build (TF_CUDA_TEST_HOOKS), a faulting kernel: the
 *     sticky error marks the device lost, later calls return
 *     TF_ERR_DEVICE_LOST, the CPU goes on. Last, since it ends the context.
 * Plain C (the GPU machine has no cmocka); prints one line a failed check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>
#include <tensorframe/tensorframe.h>

#define EXPECT_EXTRA() tf_last_error()
#include "expect.h"

static tf_cuda_stats stats_of(int device) {
    tf_cuda_stats st;
    memset(&st, 0, sizeof st);
    tf_cuda_stats_fn fn = (tf_cuda_stats_fn)tf_backend_proc_address("cuda", "tf_cuda_stats");
    if (fn) fn(device, &st);
    return st;
}

static float *random_floats(int64_t n, unsigned seed) {
    float *v = malloc(sizeof(float) * (size_t)n);
    srand(seed);
    for (int64_t i = 0; v && i < n; i++) v[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return v;
}

/* Upload and read back n floats; the staging buffers (8 MiB each) see them all. */
static void check_round_trip(tf_device *gpu, int64_t n) {
    float *src = random_floats(n, (unsigned)n), *back = malloc(sizeof(float) * (size_t)n);
    tf_tensor *t = NULL;
    uint64_t staged = stats_of(0).staged_bytes;
    tf_status s = tf_tensor_from_data(gpu, TF_F32, 1, &n, src, &t);
    EXPECT(s == TF_OK, "upload of %lld floats: %s", (long long)n, tf_status_name(s));
    if (s == TF_OK) {
        s = tf_tensor_read(t, back, sizeof(float) * (size_t)n);
        EXPECT(s == TF_OK && !memcmp(src, back, sizeof(float) * (size_t)n), "round trip of %lld floats differs",
               (long long)n);
        EXPECT(stats_of(0).staged_bytes - staged >= 2 * sizeof(float) * (uint64_t)n,
               "%lld floats did not go through the pinned staging both ways", (long long)n);
    }
    tf_tensor_release(t);
    free(src);
    free(back);
}

static void check_moves(tf_device *cpu, tf_device *gpu) {
    int64_t n = 3 << 20;
    float *src = random_floats(n, 7), *back = malloc(sizeof(float) * (size_t)n);
    tf_tensor *h = NULL, *d = NULL, *d2 = NULL, *dc = NULL, *h2 = NULL;
    EXPECT(tf_tensor_from_data(cpu, TF_F32, 1, &n, src, &h) == TF_OK, "host tensor");
    EXPECT(tf_tensor_to(h, gpu, &d) == TF_OK && tf_tensor_device(d) == gpu, "cpu -> cuda");
    EXPECT(tf_tensor_to(d, gpu, &d2) == TF_OK && d2 == d, "cuda -> the same cuda device gives the tensor itself");
    EXPECT(tf_copy(d, &dc) == TF_OK && tf_tensor_device(dc) == gpu, "copy on the device");
    EXPECT(tf_tensor_to(dc, cpu, &h2) == TF_OK && tf_tensor_device(h2) == cpu, "cuda -> cpu");
    EXPECT(h2 && tf_tensor_read(h2, back, sizeof(float) * (size_t)n) == TF_OK &&
               !memcmp(src, back, sizeof(float) * (size_t)n),
           "cpu -> cuda -> copy -> cpu changed the values");
    tf_tensor *all[] = {h, d, d2, dc, h2};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    free(src);
    free(back);
}

/* 200 queued adds, the inputs released as soon as each is queued: every
 * block the allocator hands out again must come after its last use. */
static void check_stream_order(tf_device *gpu) {
    int64_t n = 1 << 22;
    tf_tensor *x = NULL, *one = NULL;
    EXPECT(tf_zeros(gpu, TF_F32, 1, &n, &x) == TF_OK && tf_ones(gpu, TF_F32, 1, &n, &one) == TF_OK, "inputs");
    for (int i = 0; i < 200 && x && one; i++) {
        tf_tensor *y = NULL, *scratch = NULL;
        EXPECT(tf_add(x, one, &y) == TF_OK, "add %d", i);
        tf_tensor_release(x);                    /* its block may serve the next request at once */
        EXPECT(tf_full(gpu, TF_F32, 1, &n, -1.0, &scratch) == TF_OK, "full %d", i);
        tf_tensor_release(scratch);
        x = y;
    }
    EXPECT(tf_device_synchronize(gpu) == TF_OK, "synchronize");
    float *v = malloc(sizeof(float) * (size_t)n);
    int bad = 0;
    if (x && tf_tensor_read(x, v, sizeof(float) * (size_t)n) == TF_OK)
        for (int64_t i = 0; i < n; i++) bad += v[i] != 200.0f;
    else
        bad = 1;
    EXPECT(bad == 0, "%d of %lld elements are not 200 after 200 queued adds", bad, (long long)n);
    free(v);
    tf_tensor_release(x);
    tf_tensor_release(one);
}

static void check_out_of_memory(tf_device *gpu) {
    tf_device_props p;
    tf_device_get_props(gpu, &p);
    uint64_t total = p.memory_total;
    tf_memory_stats before, after;
    tf_device_memory_stats(gpu, &before);
    /* A cached 40% of the card, then 70%: only fits once the cache is
     * released. By default the allocator trims its cache first (reserved
     * stays within max_reserved_ratio of the demand), so the request never
     * fails; with the ratio off (0) the cache stays until the driver
     * refuses, and the allocator releases it and retries once. */
    int64_t big = (int64_t)(total / 10 * 4 / 4), bigger = (int64_t)(total / 10 * 7 / 4);
    tf_tensor *a = NULL, *b = NULL, *c = NULL;
    tf_alloc_conf conf, keep_all;
    tf_device_alloc_conf_get(gpu, &conf);
    keep_all = conf;
    keep_all.max_reserved_ratio = 0;
    for (int trim = 1; trim >= 0; trim--) {
        EXPECT(tf_device_alloc_conf_set(gpu, trim ? &conf : &keep_all) == TF_OK, "alloc conf");
        tf_device_memory_stats(gpu, &before);
        EXPECT(tf_empty(gpu, TF_F32, 1, &big, &a) == TF_OK, "40%% of the card");
        tf_tensor_release(a);
        tf_device_memory_stats(gpu, &after);
        EXPECT(after.cached >= (uint64_t)big * 4, "the 40%% block is cached (%llu MiB)",
               (unsigned long long)(after.cached >> 20));
        tf_status s = tf_empty(gpu, TF_F32, 1, &bigger, &b);
        tf_device_memory_stats(gpu, &after);
        if (trim)
            EXPECT(s == TF_OK && after.retries == before.retries && after.ooms == before.ooms,
                   "70%% after a cached 40%%, trimmed first: %s, %llu retries", tf_status_name(s),
                   (unsigned long long)(after.retries - before.retries));
        else
            EXPECT(s == TF_OK && after.retries > before.retries, "70%% after a cached 40%%, kept: %s, %llu retries",
                   tf_status_name(s), (unsigned long long)(after.retries - before.retries));
        tf_tensor_release(b);
        b = NULL;
    }
    EXPECT(tf_device_alloc_conf_set(gpu, &conf) == TF_OK, "alloc conf back");
    tf_device_memory_stats(gpu, &before);
    int64_t huge = (int64_t)(total / 4 * 2);     /* twice the card */
    tf_status s = tf_empty(gpu, TF_F32, 1, &huge, &c);
    EXPECT(s == TF_ERR_OUT_OF_MEMORY && c == NULL, "twice the card's memory: %s", tf_status_name(s));
    tf_device_memory_stats(gpu, &after);
    EXPECT(after.ooms > before.ooms, "the failed allocation is not counted");
    int64_t n = 1 << 20;
    tf_tensor *ok = NULL;
    EXPECT(tf_full(gpu, TF_F32, 1, &n, 3.0, &ok) == TF_OK, "an op after the OOM");
    float *v = malloc(sizeof(float) * (size_t)n);
    EXPECT(ok && tf_tensor_read(ok, v, sizeof(float) * (size_t)n) == TF_OK && v[n - 1] == 3.0f,
           "the device works after an OOM");
    free(v);
    tf_tensor_release(ok);
}

typedef tf_status (*fault_fn)(int device);

static void check_sticky_error(tf_device *cpu, tf_device *gpu) {
    fault_fn fault = (fault_fn)tf_backend_proc_address("cuda", "tf_cuda_debug_fault");
    if (!fault) {
        printf("sticky error: skipped (a build without TF_CUDA_TEST_HOOKS)\n");
        return;
    }
    tf_status s = fault(0);
    EXPECT(s == TF_ERR_DEVICE_LOST, "a faulting kernel gives %s", tf_status_name(s));
    EXPECT(stats_of(0).lost, "the device is not marked lost");
    int64_t n = 4;
    tf_tensor *a = NULL, *h = NULL, *hs = NULL;
    s = tf_ones(gpu, TF_F32, 1, &n, &a);
    EXPECT(s == TF_ERR_DEVICE_LOST && a == NULL, "an op on the lost device gives %s", tf_status_name(s));
    s = tf_device_synchronize(gpu);
    EXPECT(s == TF_ERR_DEVICE_LOST, "synchronize on the lost device gives %s", tf_status_name(s));
    EXPECT(tf_ones(cpu, TF_F32, 1, &n, &h) == TF_OK && tf_add(h, h, &hs) == TF_OK, "the CPU goes on");
    float v[4] = {0};
    EXPECT(hs && tf_tensor_read(hs, v, sizeof v) == TF_OK && v[3] == 2.0f, "the CPU's values");
    tf_tensor_release(a);
    tf_tensor_release(h);
    tf_tensor_release(hs);
}

/* A step with every kind of launch the backend makes (a portable kernel,
 * cuBLAS, cuBLASLt with its bias epilogue, a fast row kernel, a reduction
 * with scratch) captured as a CUDA graph: each replay is one graph launch
 * and equals the ops run eagerly on the same new input. */
static tf_tensor *graph_step(const tf_tensor *x, const tf_tensor *w, const tf_tensor *b) {
    tf_tensor *h = NULL, *a = NULL, *sm = NULL, *r = NULL;
    tf_status s = tf_linear(x, w, b, &h);
    if (s == TF_OK) s = tf_silu(h, &a);
    if (s == TF_OK) s = tf_softmax(a, -1, &sm);
    if (s == TF_OK) s = tf_sum(sm, 0, false, &r);
    EXPECT(s == TF_OK, "graph step: %s", tf_status_name(s));
    tf_tensor_release(h);
    tf_tensor_release(a);
    tf_tensor_release(sm);
    return r;
}

static void check_native_graph(tf_device *gpu) {
    int64_t xs[2] = {64, 256}, ws[2] = {512, 256}, bs = 512;
    float *xv = random_floats(64 * 256, 1), *wv = random_floats(512 * 256, 2), *bv = random_floats(512, 3);
    tf_tensor *x = NULL, *w = NULL, *b = NULL, *nx = NULL, *out = NULL, *eager = NULL;
    tf_graph *g = NULL;
    tf_tensor_from_data(gpu, TF_F32, 2, xs, xv, &x);
    tf_tensor_from_data(gpu, TF_F32, 2, ws, wv, &w);
    tf_tensor_from_data(gpu, TF_F32, 1, &bs, bv, &b);
    tf_status s = tf_graph_begin(gpu);
    if (s == TF_OK) out = graph_step(x, w, b);
    if (s == TF_OK) s = tf_graph_end(&g);
    EXPECT(s == TF_OK, "capture: %s", tf_status_name(s));
    EXPECT(tf_graph_is_native(g), "the capture did not become a CUDA graph (TF_LOG_LEVEL=info says why)");
    uint64_t launches = stats_of(0).graph_launches;
    for (int round = 0; g && round < 3; round++) {
        float *v = random_floats(64 * 256, 10 + (unsigned)round), got[512], want[512];
        tf_tensor_from_data(gpu, TF_F32, 2, xs, v, &nx);
        s = tf_graph_replay_with(g, 1, &x, (const tf_tensor *[]){nx});
        EXPECT(s == TF_OK, "replay %d: %s", round, tf_status_name(s));
        eager = graph_step(nx, w, b);
        tf_tensor_read(out, got, sizeof got);
        tf_tensor_read(eager, want, sizeof want);
        float worst = 0;                          /* the same kernels; a reduction may add in another order */
        for (int i = 0; i < 512; i++) {
            float d = fabsf(got[i] - want[i]) / (1e-6f + fabsf(want[i]));
            worst = d > worst ? d : worst;
        }
        EXPECT(worst <= 1e-5f, "replay %d differs from the eager step (relative %g)", round, worst);
        tf_tensor_release(nx);
        tf_tensor_release(eager);
        free(v);
    }
    EXPECT(!g || !tf_graph_is_native(g) || stats_of(0).graph_launches == launches + 3,
           "3 replays made %llu graph launches", (unsigned long long)(stats_of(0).graph_launches - launches));
    tf_graph_destroy(g);
    tf_tensor_release(out);
    tf_tensor_release(x);
    tf_tensor_release(w);
    tf_tensor_release(b);
    free(xv);
    free(wv);
    free(bv);
}

/* GEMM_EPILOGUE forms cuBLASLt's epilogues take, each as one op on the
 * device (the core's parts would count two or three), against the same
 * call on the CPU: bias + GELU (tanh form), ReLU without a bias, and a
 * residual after a bias. */
static void check_lt_epilogues(tf_device *cpu, tf_device *gpu) {
    static const struct { tf_op_kind act; bool bias, residual; } forms[] = {
        {TF_OP_GELU_TANH, true, false}, {TF_OP_RELU, false, false}, {TF_NO_ACTIVATION, true, true}};
    int64_t xs[2] = {48, 320}, ws[2] = {96, 320}, rs[2] = {48, 96}, bs = 96;
    float *xv = random_floats(48 * 320, 21), *wv = random_floats(96 * 320, 22), *bv = random_floats(96, 23),
          *rv = random_floats(48 * 96, 24), got[48 * 96], want[48 * 96];
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        tf_tensor *t[2][4] = {{NULL}}, *out[2] = {NULL, NULL};
        tf_device *devs[2] = {cpu, gpu};
        uint64_t ops = 0;
        for (int d = 0; d < 2; d++) {
            tf_tensor_from_data(devs[d], TF_F32, 2, xs, xv, &t[d][0]);
            tf_tensor_from_data(devs[d], TF_F32, 2, ws, wv, &t[d][1]);
            if (forms[f].bias) tf_tensor_from_data(devs[d], TF_F32, 1, &bs, bv, &t[d][2]);
            if (forms[f].residual) tf_tensor_from_data(devs[d], TF_F32, 2, rs, rv, &t[d][3]);
            uint64_t before = tf_device_op_count(devs[d]);
            tf_status s = tf_linear_fused(t[d][0], t[d][1], t[d][2], forms[f].act, t[d][3], &out[d]);
            EXPECT(s == TF_OK, "form %zu on %s: %s", f, tf_device_name(devs[d]), tf_status_name(s));
            ops = tf_device_op_count(devs[d]) - before;
        }
        EXPECT(ops == 1, "form %zu ran as %llu ops on cuda:0, not one cuBLASLt call", f, (unsigned long long)ops);
        if (out[0] && out[1]) {
            tf_tensor_read(out[0], want, sizeof want);
            tf_tensor_read(out[1], got, sizeof got);
            float worst = 0;
            for (int i = 0; i < 48 * 96; i++) {
                float e = fabsf(got[i] - want[i]) / (1e-3f + fabsf(want[i]));
                worst = e > worst ? e : worst;
            }
            EXPECT(worst <= 1e-3f, "form %zu: cuBLASLt's epilogue differs from the CPU's by %g (relative)", f, worst);
        }
        for (int d = 0; d < 2; d++) {
            for (int i = 0; i < 4; i++) tf_tensor_release(t[d][i]);
            tf_tensor_release(out[d]);
        }
    }
    free(xv);
    free(wv);
    free(bv);
    free(rv);
}

int main(void) {
    tf_device *gpu = NULL, *cpu = NULL;
    if (tf_device_get("cuda:0", &gpu) != TF_OK) {
        printf("no cuda:0 (%s): skipped\n", tf_last_error());
        return 77;
    }
    tf_device_get("cpu", &cpu);
    check_round_trip(gpu, 1);
    check_round_trip(gpu, (8 << 20) / 4 + 3);    /* one staging buffer and a bit */
    check_round_trip(gpu, 50000017);             /* 200 MB: many rounds, pipelined */
    check_moves(cpu, gpu);
    check_stream_order(gpu);
    check_native_graph(gpu);
    check_lt_epilogues(cpu, gpu);
    check_out_of_memory(gpu);
    check_sticky_error(cpu, gpu);                /* last: it ends the device's context */
    printf("test_cuda_gpu: %d checks, %d failed\n", checks, failures);
    tf_shutdown();
    return failures ? 1 : 0;
}
