/* Quantized matrix products, tensorframe beside ggml (llama.cpp's tensor
 * library, from the build scripts/llama-fixtures.sh makes), on the same
 * bytes: for each block type a weight [N, K] is encoded once by tf_cast and
 * the same bytes go into a ggml tensor; then x [M, K] times its transpose
 * through tf_matmul_quantized and through ggml_mul_mat on the CPU, in
 * alternating pairs, the same thread count, the median of each. M = 1 is
 * token generation's matrix-vector product, a larger M a prompt's. Prints
 * one line per (type, M): both times, the ratio (ggml's time over ours:
 * above 1 we are faster), and the largest difference of the two results
 * relative to the largest output (both round activations to 8 bits, in
 * different blocks, so they agree to ~1e-2, not bit for bit).
 * usage: qmatmul_ggml [--threads T] [--rounds R] [--n N] [--k K] [--m M,M...] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ggml-cpu.h>
#include <ggml.h>
#include <tensorframe/tensorframe.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define CHECK(call)                                                                     \
    do {                                                                                \
        tf_status s_ = (call);                                                          \
        if (s_ != TF_OK) {                                                              \
            fprintf(stderr, "qmatmul_ggml: %s: %s\n", #call, tf_last_error());           \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static const struct { tf_dtype tf; enum ggml_type gg; } types[] = {
    {TF_Q4_0, GGML_TYPE_Q4_0}, {TF_Q4_1, GGML_TYPE_Q4_1}, {TF_Q5_0, GGML_TYPE_Q5_0},   {TF_Q5_1, GGML_TYPE_Q5_1},
    {TF_Q8_0, GGML_TYPE_Q8_0}, {TF_Q2_K, GGML_TYPE_Q2_K}, {TF_Q3_K, GGML_TYPE_Q3_K},   {TF_Q4_K, GGML_TYPE_Q4_K},
    {TF_Q5_K, GGML_TYPE_Q5_K}, {TF_Q6_K, GGML_TYPE_Q6_K}, {TF_IQ4_NL, GGML_TYPE_IQ4_NL}, {TF_IQ4_XS, GGML_TYPE_IQ4_XS},
};

/* Random values of a few scales, like trained weights' rows. */
static float *random_values(int64_t n, unsigned seed) {
    float *v = malloc(sizeof(float) * (size_t)n);
    srand(seed);
    for (int64_t i = 0; i < n; i++) v[i] = ((float)rand() / (float)RAND_MAX * 2 - 1) * (float)(1 + (i / 32) % 3);
    return v;
}

static void run(int ti, int64_t n, int64_t k, int64_t m, int threads, int rounds) {
    tf_device *cpu;
    CHECK(tf_device_get("cpu", &cpu));
    float *wv = random_values(n * k, 1), *xv = random_values(m * k, 2);
    tf_tensor *wf, *wq, *x, *y = NULL;
    CHECK(tf_tensor_from_data(cpu, TF_F32, 2, (int64_t[]){n, k}, wv, &wf));
    CHECK(tf_cast(wf, types[ti].tf, &wq));
    CHECK(tf_tensor_from_data(cpu, TF_F32, 2, (int64_t[]){m, k}, xv, &x));

    size_t wbytes = tf_tensor_nbytes(wq);
    struct ggml_init_params ip = {wbytes + sizeof(float) * (size_t)(m * k + m * n) + (64u << 20), NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *gw = ggml_new_tensor_2d(ctx, types[ti].gg, k, n), *gx = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
    if (ggml_nbytes(gw) != wbytes) {
        fprintf(stderr, "qmatmul_ggml: %s is %zu bytes in ggml, %zu here\n", tf_dtype_name(types[ti].tf), ggml_nbytes(gw), wbytes);
        exit(1);
    }
    CHECK(tf_tensor_read(wq, gw->data, wbytes));               /* the same bytes in both */
    memcpy(gx->data, xv, sizeof(float) * (size_t)(m * k));
    struct ggml_tensor *gy = ggml_mul_mat(ctx, gw, gx);         /* [m, n] as ggml's ne = {n, m} */
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, gy);

    double *t_tf = malloc(sizeof(double) * (size_t)rounds), *t_gg = malloc(sizeof(double) * (size_t)rounds);
    for (int r = -1; r < rounds; r++) {                         /* round -1 warms both up */
        double t0 = now();
        tf_tensor_release(y);
        CHECK(tf_matmul_quantized(x, wq, &y));
        CHECK(tf_device_synchronize(cpu));
        double t1 = now();
        ggml_graph_compute_with_ctx(ctx, gf, threads);
        double t2 = now();
        if (r >= 0) {
            t_tf[r] = t1 - t0;
            t_gg[r] = t2 - t1;
        }
    }
    float *ours = malloc(sizeof(float) * (size_t)(m * n));
    CHECK(tf_tensor_read(y, ours, sizeof(float) * (size_t)(m * n)));
    double diff = 0, top = 0;
    for (int64_t i = 0; i < m * n; i++) {
        diff = fmax(diff, fabs((double)ours[i] - ((float *)gy->data)[i]));
        top = fmax(top, fabs((double)((float *)gy->data)[i]));
    }
    double a = median(t_tf, rounds), b = median(t_gg, rounds);
    printf("%-7s M %-4lld tensorframe %9.1f us  ggml %9.1f us  ratio %5.2f  rel diff %.1e\n",
           tf_dtype_name(types[ti].tf), (long long)m, a * 1e6, b * 1e6, b / a, diff / (top > 0 ? top : 1));
    fflush(stdout);
    ggml_free(ctx);
    tf_tensor *all[] = {wf, wq, x, y};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    free(wv);
    free(xv);
    free(ours);
    free(t_tf);
    free(t_gg);
}

int main(int argc, char **argv) {
    int threads = 1, rounds = 21;
    int64_t n = 4096, k = 4096, ms[8] = {1, 64};
    int n_ms = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--n")) n = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--k")) k = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--m")) {
            n_ms = 0;
            for (char *p = argv[i + 1]; *p && n_ms < 8; p += strspn(p, ",")) {
                ms[n_ms++] = strtoll(p, &p, 10);
            }
        }
    }
    char env[32];
    snprintf(env, sizeof env, "%d", threads);
    setenv("TF_NUM_THREADS", env, 1);                            /* before the first tensorframe call */
    printf("qmatmul_ggml: W [%lld, %lld], %d thread(s), median of %d alternating pairs\n", (long long)n, (long long)k,
           threads, rounds);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (int j = 0; j < n_ms; j++)
            if (k % (int64_t)tf_dtype_block_size(types[ti].tf) == 0) run((int)ti, n, k, ms[j], threads, rounds);
    tf_shutdown();
    return 0;
}
