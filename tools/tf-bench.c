/* tf-bench: time ops on a device and report rates (GFLOP/s or GB/s), as
 * text and as JSON lines for bench/compare.py.
 *
 * usage: tf-bench [--device SPEC] [--ops a,b,...] [--json FILE] [--threads N] [--quick]
 *        tf-bench --gpu [--scale S] [--device SPEC] [--json FILE] [--ops SECTIONS]   (the CUDA targets' sizes;
 *                 sections: add matmul gemm rows reduce attention (= prefill + decode) overhead)
 * ops: overhead add mul sum softmax rmsnorm layernorm matmul attention
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>
#include <tensorframe/tensorframe.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static FILE *json;
static const char *dev_name;

#define CHECK(call)                                                                              \
    do {                                                                                         \
        tf_status s_ = (call);                                                                   \
        if (s_ != TF_OK) {                                                                       \
            fprintf(stderr, "%s: %s: %s\n", #call, tf_status_name(s_), tf_last_error());         \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

typedef tf_status (*bench_fn)(void *ctx);

/* Median seconds per call: warm up, then repeat until ~min_time has passed. */
static double time_op(bench_fn fn, void *ctx, tf_device *dev, double min_time) {
    double times[64];
    int n = 0;
    CHECK(fn(ctx));
    CHECK(tf_device_synchronize(dev));
    double start = now();
    while (n < 64 && (n < 5 || now() - start < min_time)) {
        double t0 = now();
        CHECK(fn(ctx));
        CHECK(tf_device_synchronize(dev));
        times[n++] = now() - t0;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    return times[n / 2];
}

static void report(const char *op, const char *size, double seconds, double flops, double bytes) {
    double gflops = flops / seconds * 1e-9, gbs = bytes / seconds * 1e-9;
    if (seconds < 1e-4) printf("%-16s %-26s %10.3f us", op, size, seconds * 1e6);
    else printf("%-16s %-26s %10.3f ms", op, size, seconds * 1e3);
    if (flops > 0) printf("  %8.1f GFLOP/s", gflops);
    if (bytes > 0) printf("  %8.1f GB/s", gbs);
    printf("\n");
    if (json)
        fprintf(json, "{\"lib\":\"tensorframe\",\"device\":\"%s\",\"op\":\"%s\",\"size\":\"%s\",\"seconds\":%.9g,"
                      "\"gflops\":%.6g,\"gbs\":%.6g}\n", dev_name, op, size, seconds, flops > 0 ? gflops : 0, bytes > 0 ? gbs : 0);
}

/* ---- the benchmarked calls ---- */

typedef struct binary_ctx { tf_tensor *a, *b; int op; } binary_ctx;

static tf_status run_binary(void *v) {
    binary_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = c->op == 0 ? tf_add(c->a, c->b, &o) : tf_mul(c->a, c->b, &o);
    tf_tensor_release(o);
    return s;
}

typedef struct unary_ctx { tf_tensor *x, *w, *b; int op; } unary_ctx;

static tf_status run_row(void *v) {
    unary_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s;
    switch (c->op) {
    case 0: s = tf_sum(c->x, TF_ALL_AXES, false, &o); break;
    case 1: s = tf_softmax(c->x, -1, &o); break;
    case 2: s = tf_rmsnorm(c->x, c->w, 1e-6, &o); break;
    case 4: s = tf_log_softmax(c->x, -1, &o); break;
    default: s = tf_layernorm(c->x, c->w, c->b, 1e-5, &o); break;
    }
    tf_tensor_release(o);
    return s;
}

/* Reductions: sum, max, argmax over everything (axis TF_ALL_AXES) or the rows. */
typedef struct reduce_ctx { tf_tensor *x; int op, axis; } reduce_ctx;

static tf_status run_reduce(void *v) {
    reduce_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = c->op == 0 ? tf_sum(c->x, c->axis, false, &o)
                  : c->op == 1 ? tf_max(c->x, c->axis, false, &o) : tf_argmax(c->x, c->axis, false, &o);
    tf_tensor_release(o);
    return s;
}

/* An elementwise unary op over a whole tensor. */
typedef struct math_ctx { tf_tensor *x; tf_status (*fn)(const tf_tensor *, tf_tensor **); } math_ctx;

static tf_status run_math(void *v) {
    math_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = c->fn(c->x, &o);
    tf_tensor_release(o);
    return s;
}

typedef struct mm_ctx { tf_tensor *a, *b; } mm_ctx;

static tf_status run_matmul(void *v) {
    mm_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = tf_matmul(c->a, c->b, &o);
    tf_tensor_release(o);
    return s;
}

/* out = x @ w^T + bias: a linear layer through tf_gemm (beta 1, c a row). */
typedef struct linear_ctx { tf_tensor *x, *w, *bias; } linear_ctx;

static tf_status run_linear(void *v) {
    linear_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = tf_gemm(c->x, c->w, c->bias, 1.0, 1.0, false, true, &o);
    tf_tensor_release(o);
    return s;
}

typedef struct attn_ctx { tf_tensor *q, *k, *v; } attn_ctx;

static tf_status run_attention(void *v) {
    attn_ctx *c = v;
    tf_tensor *o = NULL;
    tf_status s = tf_sdpa(c->q, c->k, c->v, NULL, 0, true, -1, &o);
    tf_tensor_release(o);
    return s;
}

static tf_status run_copy(void *v) {
    tf_tensor *o = NULL;
    tf_status s = tf_copy(((binary_ctx *)v)->a, &o);
    tf_tensor_release(o);
    return s;
}

/* A tensor of dtype dt with normal values (made in f32, then cast). */
static tf_tensor *randn_as(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
    tf_tensor *t32 = NULL, *t = NULL;
    CHECK(tf_randn(dev, TF_F32, ndim, shape, seed, &t32));
    if (dt == TF_F32) return t32;
    CHECK(tf_cast(t32, dt, &t));
    tf_tensor_release(t32);
    return t;
}

static void gpu_rows(tf_device *dev, double min_time, int64_t scale) {
    static const struct { const char *name; int op; } ops[] = {
        {"softmax", 1}, {"log_softmax", 4}, {"rmsnorm", 2}, {"layernorm", 3}};
    static const tf_dtype dts[] = {TF_F32, TF_BF16};
    char name[64], size[96];
    for (int di = 0; di < 2; di++)
        for (int oi = 0; oi < 4; oi++) {
            int64_t shape[2] = {32768 / scale, 4096}, d = 4096;
            unary_ctx c = {randn_as(dev, dts[di], 2, shape, 4), randn_as(dev, dts[di], 1, &d, 5),
                           randn_as(dev, dts[di], 1, &d, 6), ops[oi].op};
            snprintf(name, sizeof name, "%s%s", ops[oi].name, dts[di] == TF_F32 ? "" : "_bf16");
            snprintf(size, sizeof size, "[%lld,4096] %s", (long long)shape[0], tf_dtype_name(dts[di]));
            double bytes = 2.0 * (double)tf_dtype_size(dts[di]) * shape[0] * shape[1];
            report(name, size, time_op(run_row, &c, dev, min_time), 0, bytes);
            tf_tensor_release(c.x);
            tf_tensor_release(c.w);
            tf_tensor_release(c.b);
        }
}

static void gpu_reductions(tf_device *dev, double min_time, int64_t scale) {
    static const char *names[] = {"sum", "max", "argmax"};
    char name[64], size[96];
    int64_t n = ((int64_t)256 << 20) / (scale * scale), rows[2] = {n / 4096, 4096};
    tf_tensor *x = randn_as(dev, TF_F32, 1, &n, 3), *xr = NULL;
    CHECK(tf_reshape(x, 2, rows, &xr));
    for (int op = 0; op < 3; op++)
        for (int by_row = 0; by_row < 2; by_row++) {
            reduce_ctx c = {by_row ? xr : x, op, by_row ? 1 : TF_ALL_AXES};
            snprintf(name, sizeof name, "%s_%s", names[op], by_row ? "rows" : "all");
            snprintf(size, sizeof size, by_row ? "[%lld,4096] f32" : "%lldM f32",
                     (long long)(by_row ? rows[0] : n >> 20));
            report(name, size, time_op(run_reduce, &c, dev, min_time), 0, 4.0 * n);
        }
    tf_tensor_release(xr);
    tf_tensor_release(x);
}

/* Attention, 8 x 32 heads x 128: causal prefill of L queries against L
 * keys (sections[0]), and decode, one query against L keys (sections[1]),
 * as bench/gpu_compare.py measures PyTorch's SDPA. */
static void gpu_attention(tf_device *dev, double min_time, int64_t scale, const bool sections[2]) {
    static const struct {
        const char *name;
        tf_dtype dt;
        int64_t L;
        bool decode;
    } cases[] = {{"attention", TF_BF16, 4096, false},     {"attention_f16", TF_F16, 4096, false},
                 {"attention_1k", TF_BF16, 1024, false},  {"attention_16k", TF_BF16, 16384, false},
                 {"decode", TF_BF16, 4096, true},         {"decode_f16", TF_F16, 4096, true},
                 {"decode_32k", TF_BF16, 32768, true}};
    char size[96];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!sections[cases[i].decode]) continue;
        int64_t L = cases[i].L / scale, shape[4] = {8, 32, L, 128}, qshape[4] = {8, 32, cases[i].decode ? 1 : L, 128};
        tf_dtype dt = cases[i].dt;
        attn_ctx c = {randn_as(dev, dt, 4, qshape, 9), randn_as(dev, dt, 4, shape, 10), randn_as(dev, dt, 4, shape, 11)};
        if (cases[i].decode) {
            snprintf(size, sizeof size, "8x32x1x%lldx128 %s", (long long)L, tf_dtype_name(dt));
            report(cases[i].name, size, time_op(run_attention, &c, dev, min_time), 0, 2.0 * 2 * 8 * 32 * (double)L * 128);
        } else {
            snprintf(size, sizeof size, "8x32x%lldx128 %s causal", (long long)L, tf_dtype_name(dt));
            report(cases[i].name, size, time_op(run_attention, &c, dev, min_time),
                   2.0 * 2.0 * 8 * 32 * (double)L * L * 128 / 2, 0);
        }
        tf_tensor_release(c.q);
        tf_tensor_release(c.k);
        tf_tensor_release(c.v);
    }
}

/* The cost of a tiny op (a 4-element add). "overhead": host cost, the
 * time to issue a batch of 256 calls, each batch waited for outside the
 * timing (short enough that a GPU's launch queue never fills, so the device
 * never sets the pace), median of the batches. "overhead_sustained": reps
 * calls back to back and one wait, so a GPU's rate of running tiny kernels
 * counts too. On the CPU the two agree: the call is the work. */
static void bench_overhead(tf_device *dev, int reps) {
    enum { BATCH = 256, BATCHES = 64 };
    int64_t n = 4;
    binary_ctx c = {NULL, NULL, 0};
    CHECK(tf_ones(dev, TF_F32, 1, &n, &c.a));
    CHECK(tf_ones(dev, TF_F32, 1, &n, &c.b));
    double issue[BATCHES];
    for (int b = -4; b < BATCHES; b++) {                 /* four batches to warm up */
        double t0 = now();
        for (int i = 0; i < BATCH; i++) CHECK(run_binary(&c));
        double t = (now() - t0) / BATCH;
        CHECK(tf_device_synchronize(dev));
        if (b >= 0) {
            int j = b;
            for (; j > 0 && issue[j - 1] > t; j--) issue[j] = issue[j - 1];
            issue[j] = t;
        }
    }
    report("overhead", "add [4] f32", issue[BATCHES / 2], 0, 0);
    double t0 = now();
    for (int i = 0; i < reps; i++) CHECK(run_binary(&c));
    CHECK(tf_device_synchronize(dev));
    report("overhead_sustained", "add [4] f32", (now() - t0) / reps, 0, 0);
    tf_tensor_release(c.a);
    tf_tensor_release(c.b);
}

/* GEMMs beyond bf16: f32 without and with TF32 (the CUDA plugin's opt-in),
 * and linear layers whose bias a GPU may add in the GEMM's epilogue. */
static void gpu_gemms(tf_device *dev, double min_time, int64_t scale) {
    char size[96];
    int64_t m = 8192 / scale, shape[2] = {m, m};
    tf_cuda_set_tf32_fn set_tf32 = (tf_cuda_set_tf32_fn)tf_backend_proc_address("cuda", "tf_cuda_set_tf32");
    mm_ctx c = {randn_as(dev, TF_F32, 2, shape, 13), randn_as(dev, TF_F32, 2, shape, 14)};
    snprintf(size, sizeof size, "%lldx%lldx%lld f32", (long long)m, (long long)m, (long long)m);
    report("matmul_f32", size, time_op(run_matmul, &c, dev, min_time), 2.0 * m * m * m, 0);
    if (set_tf32 && !strncmp(tf_device_name(dev), "cuda", 4)) {
        CHECK(set_tf32(true));
        report("matmul_tf32", size, time_op(run_matmul, &c, dev, min_time), 2.0 * m * m * m, 0);
        CHECK(set_tf32(false));
    }
    tf_tensor_release(c.a);
    tf_tensor_release(c.b);
    static const int64_t tokens[] = {8192, 128};
    for (int i = 0; i < 2; i++) {
        int64_t t = tokens[i] / (i == 0 ? scale : 1), d = 4096 / scale, xs[2] = {t, d}, ws[2] = {d, d};
        linear_ctx l = {randn_as(dev, TF_BF16, 2, xs, 15), randn_as(dev, TF_BF16, 2, ws, 16),
                        randn_as(dev, TF_BF16, 1, &d, 17)};
        snprintf(size, sizeof size, "[%lld,%lld]x[%lld,%lld]^T+b bf16", (long long)t, (long long)d, (long long)d,
                 (long long)d);
        report(i == 0 ? "linear_bias" : "linear_bias_128", size, time_op(run_linear, &l, dev, min_time),
               2.0 * t * d * d, 0);
        tf_tensor_release(l.x);
        tf_tensor_release(l.w);
        tf_tensor_release(l.bias);
    }
}

/* The GPU suite: the CUDA targets' shapes, each extent divided by `scale`
 * (1 on a GPU; larger to try the suite on a small device). */
static bool wanted(const char *ops, const char *op);

/* ops (NULL: all) picks sections: add, matmul, gemm, rows, reduce, attention (prefill and decode), overhead. */
static void gpu_suite(tf_device *dev, double min_time, int64_t scale, const char *ops) {
    char size[96];
    if (wanted(ops, "add")) {
        int64_t n = ((int64_t)256 << 20) / (scale * scale);
        binary_ctx c = {NULL, NULL, 0};
        CHECK(tf_rand(dev, TF_F32, 1, &n, 1, &c.a));
        CHECK(tf_rand(dev, TF_F32, 1, &n, 2, &c.b));
        snprintf(size, sizeof size, "%lldM f32", (long long)(n >> 20));
        report("copy", size, time_op(run_copy, &c, dev, min_time), 0, 8.0 * n);
        report("add", size, time_op(run_binary, &c, dev, min_time), (double)n, 12.0 * n);
        tf_tensor_release(c.a);
        tf_tensor_release(c.b);
    }
    if (wanted(ops, "matmul")) {
        int64_t m = 8192 / scale, shape[2] = {m, m};
        mm_ctx c = {randn_as(dev, TF_BF16, 2, shape, 7), randn_as(dev, TF_BF16, 2, shape, 8)};
        snprintf(size, sizeof size, "%lldx%lldx%lld bf16", (long long)m, (long long)m, (long long)m);
        report("matmul", size, time_op(run_matmul, &c, dev, min_time), 2.0 * m * m * m, 0);
        tf_tensor_release(c.a);
        tf_tensor_release(c.b);
    }
    if (wanted(ops, "gemm")) gpu_gemms(dev, min_time, scale);
    if (wanted(ops, "rows")) gpu_rows(dev, min_time, scale);
    if (wanted(ops, "reduce")) gpu_reductions(dev, min_time, scale);
    const bool attention[2] = {wanted(ops, "attention") || wanted(ops, "prefill"),
                               wanted(ops, "attention") || wanted(ops, "decode")};
    if (attention[0] || attention[1]) gpu_attention(dev, min_time, scale, attention);
    if (wanted(ops, "overhead")) bench_overhead(dev, 20000);
}

static bool wanted(const char *ops, const char *op) {
    if (!ops) return true;
    size_t n = strlen(op);
    for (const char *p = ops; (p = strstr(p, op)); p += n)
        if ((p == ops || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

/* --profile: the trace to the file, the table to stdout, before tf_shutdown. */
static const char *profile_file;
static void write_profile(void) {
    static char table[1 << 16];
    tf_profiler_stop();
    if (tf_profiler_write_trace(profile_file) != TF_OK) fprintf(stderr, "%s\n", tf_last_error());
    if (tf_profiler_summary(table, sizeof table) == TF_OK) printf("\nprofile (%s):\n%s", profile_file, table);
}

int main(int argc, char **argv) {
    const char *spec = "cpu", *ops = NULL, *json_path = NULL, *profile_path = NULL;
    bool quick = false, gpu = false;
    int64_t scale = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--ops") && i + 1 < argc) ops = argv[++i];
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) CHECK(tf_set_num_threads(atoi(argv[++i])));
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--gpu")) gpu = true;
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atoll(argv[++i]) > 0 ? atoll(argv[i]) : 1;
        else {
            fprintf(stderr, "usage: tf-bench [--device SPEC] [--ops a,b] [--json FILE] [--threads N] [--quick]\n"
                            "                [--gpu [--scale S]]  (the GPU suite; extents divided by S)\n"
                            "                [--profile TRACE.json]  (the profiler's trace and table; plot it\n"
                            "                with tools/tf-profile-plot TRACE.json)\n");
            return 2;
        }
    }
    tf_device *dev;
    CHECK(tf_device_get(spec, &dev));
    dev_name = tf_device_name(dev);
    if (json_path && !(json = fopen(json_path, "w"))) {
        perror(json_path);
        return 1;
    }
    if (profile_path) {
        CHECK(tf_profiler_start());
        profile_file = profile_path;
    }
    double min_time = quick ? 0.05 : 0.5;
    printf("tf-bench on %s, %d threads\n", dev_name, tf_get_num_threads());
    if (gpu) {
        gpu_suite(dev, min_time, scale, ops);
        if (json) fclose(json);
        if (profile_file) write_profile();
    tf_shutdown();
        return 0;
    }

    if (wanted(ops, "overhead")) bench_overhead(dev, quick ? 20000 : 200000);   /* a 4-element add */
    for (int op = 0; op < 2; op++) {
        if (!wanted(ops, op ? "mul" : "add")) continue;
        int64_t n = 16 << 20;
        binary_ctx c = {NULL, NULL, op};
        CHECK(tf_rand(dev, TF_F32, 1, &n, 1, &c.a));
        CHECK(tf_rand(dev, TF_F32, 1, &n, 2, &c.b));
        report(op ? "mul" : "add", "16M f32", time_op(run_binary, &c, dev, min_time), (double)n, 12.0 * n);
        tf_tensor_release(c.a);
        tf_tensor_release(c.b);
    }
    if (wanted(ops, "sum")) {
        int64_t n = 16 << 20;
        unary_ctx c = {NULL, NULL, NULL, 0};
        CHECK(tf_rand(dev, TF_F32, 1, &n, 3, &c.x));
        report("sum", "16M f32", time_op(run_row, &c, dev, min_time), (double)n, 4.0 * n);
        tf_tensor_release(c.x);
    }
    /* Unary formulas: with a SIMD body (gelu, silu, exp, relu) and without (tanh). */
    static const struct { const char *name; tf_status (*fn)(const tf_tensor *, tf_tensor **); } maths[] = {
        {"gelu", tf_gelu}, {"silu", tf_silu}, {"exp", tf_exp}, {"relu", tf_relu}, {"tanh", tf_tanh}};
    for (size_t i = 0; i < sizeof maths / sizeof *maths; i++) {
        if (!wanted(ops, maths[i].name)) continue;
        int64_t n = 16 << 20;
        math_ctx c = {NULL, maths[i].fn};
        CHECK(tf_rand(dev, TF_F32, 1, &n, 4, &c.x));
        report(maths[i].name, "16M f32", time_op(run_math, &c, dev, min_time), (double)n, 8.0 * n);
        tf_tensor_release(c.x);
    }
    static const char *const row_names[3] = {"softmax", "rmsnorm", "layernorm"};
    for (int op = 1; op <= 3; op++) {
        if (!wanted(ops, row_names[op - 1])) continue;
        int64_t shape[2] = {4096, 4096}, d = 4096;
        unary_ctx c = {NULL, NULL, NULL, op};
        CHECK(tf_randn(dev, TF_F32, 2, shape, 4, &c.x));
        CHECK(tf_randn(dev, TF_F32, 1, &d, 5, &c.w));
        CHECK(tf_randn(dev, TF_F32, 1, &d, 6, &c.b));
        report(row_names[op - 1], "[4096,4096] f32", time_op(run_row, &c, dev, min_time), 0, 8.0 * shape[0] * shape[1]);
        tf_tensor_release(c.x);
        tf_tensor_release(c.w);
        tf_tensor_release(c.b);
    }
    if (wanted(ops, "matmul")) {
        static const int64_t sizes[] = {256, 512, 1024, 2048, 4096};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            int64_t n = sizes[i], shape[2] = {n, n};
            if (quick && n > 1024) break;
            mm_ctx c = {NULL, NULL};
            CHECK(tf_randn(dev, TF_F32, 2, shape, 7, &c.a));
            CHECK(tf_randn(dev, TF_F32, 2, shape, 8, &c.b));
            char size[64];
            snprintf(size, sizeof size, "%lldx%lldx%lld f32", (long long)n, (long long)n, (long long)n);
            report("matmul", size, time_op(run_matmul, &c, dev, min_time), 2.0 * n * n * n, 0);
            tf_tensor_release(c.a);
            tf_tensor_release(c.b);
        }
        /* Skinny and tiny shapes (M x K x N): a decode step's vector-matrix
         * products and a small GEMM, where a library's set-up cost shows. */
        static const int64_t skinny[][3] = {{1, 4096, 4096}, {4096, 4096, 1}, {8, 8, 8}};
        for (size_t i = 0; i < sizeof skinny / sizeof *skinny; i++) {
            int64_t m = skinny[i][0], k = skinny[i][1], n = skinny[i][2], sa[2] = {m, k}, sb[2] = {k, n};
            mm_ctx c = {NULL, NULL};
            CHECK(tf_randn(dev, TF_F32, 2, sa, 7, &c.a));
            CHECK(tf_randn(dev, TF_F32, 2, sb, 8, &c.b));
            char size[64];
            snprintf(size, sizeof size, "%lldx%lldx%lld f32", (long long)m, (long long)k, (long long)n);
            report("matmul", size, time_op(run_matmul, &c, dev, min_time), 2.0 * m * k * n, 0);
            tf_tensor_release(c.a);
            tf_tensor_release(c.b);
        }
    }
    if (wanted(ops, "matmul")) {                         /* a decode step with half weights: x @ W^T, W [4096, 4096] */
        static const tf_dtype dts[3] = {TF_BF16, TF_F16, TF_F32};
        for (int d = 0; d < 3; d++) {
            tf_dtype dt = dts[d];
            int64_t sx[2] = {1, 4096}, sw[2] = {4096, 4096};
            tf_tensor *x32 = NULL, *w32 = NULL, *w = NULL;
            mm_ctx c = {NULL, NULL};
            CHECK(tf_randn(dev, TF_F32, 2, sx, 12, &x32));
            CHECK(tf_randn(dev, TF_F32, 2, sw, 13, &w32));
            CHECK(tf_cast(x32, dt, &c.a));
            CHECK(tf_cast(w32, dt, &w));
            CHECK(tf_transpose(w, 0, 1, &c.b));
            char size[64];
            snprintf(size, sizeof size, "1x4096x4096 %s W^T", tf_dtype_name(dt));
            report("matmul", size, time_op(run_matmul, &c, dev, min_time), 2.0 * 4096 * 4096,
                   (double)tf_dtype_size(dt) * 4096 * 4096);
            tf_tensor *all[] = {x32, w32, w, c.a, c.b};
            for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
        }
    }
    if (wanted(ops, "attention")) {
        int64_t shape[4] = {1, 32, quick ? 512 : 2048, 128};
        attn_ctx c = {NULL, NULL, NULL};
        CHECK(tf_randn(dev, TF_F32, 4, shape, 9, &c.q));
        CHECK(tf_randn(dev, TF_F32, 4, shape, 10, &c.k));
        CHECK(tf_randn(dev, TF_F32, 4, shape, 11, &c.v));
        double L = (double)shape[2], flops = 2.0 * 2.0 * shape[1] * L * L * shape[3] / 2;   /* causal: half */
        char size[64];
        snprintf(size, sizeof size, "32h x %lld x 128 causal", (long long)shape[2]);
        report("attention", size, time_op(run_attention, &c, dev, min_time), flops, 0);
        tf_tensor_release(c.q);
        tf_tensor_release(c.k);
        tf_tensor_release(c.v);
    }
    if (json) fclose(json);
    if (profile_file) write_profile();
    tf_shutdown();
    return 0;
}
