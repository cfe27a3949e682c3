/* The prefill attention kernels on a GPU (scripts/cuda-check.sh runs it;
 * with no CUDA device it exits 77, skipped). Each case runs under every
 * kernel the device has (TF_CUDA_FLASH: the Hopper kernel with and without
 * its softmax overlap, required, on compute 9.0; the mma.sync kernel
 * everywhere) and is checked element by element against a float64
 * reference computed from the rounded inputs: causal with and without a KV
 * offset, GQA, additive and boolean masks, head sizes 64 and 128, f16 and
 * bf16, partial tiles, a [B, L, H, D] layout seen as [B, H, L, D]. The
 * output's memory is poisoned with NaN first, so an element a kernel never
 * writes fails. Then, at the benchmark's sizes (8 x 32 x 4096 x 128 and
 * 16384 keys), where a float64 reference is too slow, the kernels are
 * checked against each other.
 * usage: test_flash_gpu [DEVICE]   (default cuda:0; another device runs the
 * reference cases under its own kernel, which checks this test's reference) */
#define _POSIX_C_SOURCE 200809L   /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>
#include <tensorframe/cuda.h>
#include <tensorframe/tensorframe.h>

#define EXPECT_EXTRA() tf_last_error()
#include "expect.h"

typedef enum { MASK_NONE, MASK_ADDITIVE, MASK_KEY_PADDING } mask_kind;

typedef struct flash_case {
    const char *what;
    tf_dtype dt;
    int64_t B, Hq, Hkv, Lq, Lk, D;
    bool causal;
    int64_t q_offset;            /* -1: Lk - Lq */
    mask_kind mask;
    bool blhd;                   /* q, k, v stored [B, L, H, D] */
} flash_case;

static const char *const kernels[] = {"hopper-pingpong", "hopper-overlap", "hopper-serial", "mma", "default"};
enum { N_CUDA_KERNELS = 4, MMA_KERNEL = 3, DEFAULT_KERNEL = 4 };
static bool on_cuda = true;

static float uniform(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A [B, H, L, D] tensor of dt on gpu with values in [-1, 1], and its
 * rounded values on the host (in [B, H, L, D] order). */
static tf_tensor *make_qkv(tf_device *cpu, tf_device *gpu, tf_dtype dt, int64_t B, int64_t H, int64_t L, int64_t D,
                           bool blhd, unsigned seed, double **host) {
    int64_t n = B * H * L * D, shape[4] = {B, blhd ? L : H, blhd ? H : L, D};
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = uniform(&seed);
    tf_tensor *h = NULL, *hd = NULL, *back = NULL, *g = NULL, *out = NULL;
    tf_status s = tf_tensor_from_data(cpu, TF_F32, 4, shape, v, &h);
    if (s == TF_OK) s = tf_cast(h, dt, &hd);
    if (s == TF_OK) s = tf_cast(hd, TF_F32, &back);
    if (s == TF_OK) s = tf_tensor_read(back, v, sizeof(float) * (size_t)n);
    if (s == TF_OK) s = tf_tensor_to(hd, gpu, &g);
    static const int perm[4] = {0, 2, 1, 3};
    if (s == TF_OK && blhd) s = tf_permute(g, perm, &out);
    else if (s == TF_OK) out = g, g = NULL;
    EXPECT(s == TF_OK, "making a [%lld, %lld, %lld, %lld] input", (long long)B, (long long)H, (long long)L, (long long)D);
    double *r = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t d = 0; d < D; d++)
                    r[((b * H + hh) * L + l) * D + d] =
                        v[blhd ? ((b * L + l) * H + hh) * D + d : ((b * H + hh) * L + l) * D + d];
    *host = r;
    free(v);
    tf_tensor_release(h);
    tf_tensor_release(hd);
    tf_tensor_release(back);
    tf_tensor_release(g);
    return out;
}

/* The case's mask on gpu, and on the host as an additive [B, Lq, Lk] (0 or -inf where a key is hidden). */
static tf_tensor *make_mask(tf_device *cpu, tf_device *gpu, const flash_case *c, double **host) {
    int64_t B = c->B, Lq = c->Lq, Lk = c->Lk;
    double *add = calloc((size_t)(B * Lq * Lk), sizeof(double));
    *host = add;
    tf_tensor *h = NULL, *hd = NULL, *back = NULL, *g = NULL;
    tf_status s = TF_OK;
    unsigned seed = 99;
    if (c->mask == MASK_ADDITIVE) {                 /* [Lq, Lk] broadcast over batch and heads */
        int64_t shape[2] = {Lq, Lk};
        float *v = malloc(sizeof(float) * (size_t)(Lq * Lk));
        for (int64_t i = 0; i < Lq * Lk; i++) {
            float u = uniform(&seed);
            v[i] = u > 0.8f && i % Lk != 0 ? -INFINITY : 2.0f * u;   /* key 0 stays: no empty row */
        }
        s = tf_tensor_from_data(cpu, TF_F32, 2, shape, v, &h);
        if (s == TF_OK) s = tf_cast(h, c->dt, &hd);
        if (s == TF_OK) s = tf_cast(hd, TF_F32, &back);
        if (s == TF_OK) s = tf_tensor_read(back, v, sizeof(float) * (size_t)(Lq * Lk));
        if (s == TF_OK) s = tf_tensor_to(hd, gpu, &g);
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < Lq * Lk; i++) add[b * Lq * Lk + i] = v[i];
        free(v);
    } else {                                        /* bool [B, 1, 1, Lk]: batch b hides its last 37 b keys */
        int64_t shape[4] = {B, 1, 1, Lk};
        unsigned char *keep = malloc((size_t)(B * Lk));
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Lk; j++) {
                keep[b * Lk + j] = j < Lk - 37 * b;
                for (int64_t i = 0; i < Lq; i++) add[(b * Lq + i) * Lk + j] = keep[b * Lk + j] ? 0 : -INFINITY;
            }
        s = tf_tensor_from_data(cpu, TF_BOOL, 4, shape, keep, &h);
        if (s == TF_OK) s = tf_tensor_to(h, gpu, &g);
        free(keep);
    }
    EXPECT(s == TF_OK, "%s: making the mask", c->what);
    tf_tensor_release(h);
    tf_tensor_release(hd);
    tf_tensor_release(back);
    return g;
}

static void reference(const flash_case *c, const double *q, const double *k, const double *v, const double *mask,
                      double *out) {
    int64_t off = c->q_offset < 0 ? c->Lk - c->Lq : c->q_offset, D = c->D;
    double scale = 1.0 / sqrt((double)D);
    double *p = malloc(sizeof(double) * (size_t)c->Lk);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                int64_t kh = h / (c->Hq / c->Hkv);
                const double *qi = q + ((b * c->Hq + h) * c->Lq + i) * D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->Lk; j++) {
                    double s = -INFINITY;
                    if (!c->causal || j <= off + i) {
                        const double *kj = k + ((b * c->Hkv + kh) * c->Lk + j) * D;
                        s = 0;
                        for (int64_t d = 0; d < D; d++) s += qi[d] * kj[d];
                        s *= scale;
                        if (mask) s += mask[(b * c->Lq + i) * c->Lk + j];
                    }
                    p[j] = s;
                    if (s > mx) mx = s;
                }
                double *o = out + ((b * c->Hq + h) * c->Lq + i) * D;
                for (int64_t d = 0; d < D; d++) o[d] = 0;
                for (int64_t j = 0; j < c->Lk; j++) {
                    double e = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                    sum += e;
                    const double *vj = v + ((b * c->Hkv + kh) * c->Lk + j) * D;
                    for (int64_t d = 0; d < D; d++) o[d] += e * vj[d];
                }
                for (int64_t d = 0; d < D; d++) o[d] /= sum;
            }
    free(p);
}

/* A block of the output's size filled with NaN and released: the caching
 * allocator hands it to the next output of that size. */
static void poison(tf_device *gpu, tf_dtype dt, int64_t n) {
    tf_tensor *t = NULL;
    if (tf_full(gpu, dt, 1, &n, NAN, &t) == TF_OK) tf_device_synchronize(gpu);
    tf_tensor_release(t);
}

/* The output on the host as doubles ([B, Hq, Lq, D]), or NULL. */
static double *run_on(const char *kernel, tf_device *gpu, const flash_case *c, tf_tensor *q, tf_tensor *k, tf_tensor *v,
                      tf_tensor *m) {
    if (on_cuda) setenv("TF_CUDA_FLASH", kernel, 1);
    int64_t n = c->B * c->Hq * c->Lq * c->D;
    poison(gpu, c->dt, n);
    tf_tensor *o = NULL, *o32 = NULL, *oc = NULL;
    tf_status s = tf_sdpa(q, k, v, m, -1, c->causal, c->q_offset, &o);
    EXPECT(s == TF_OK, "%s under %s: tf_sdpa", c->what, kernel);
    if (s == TF_OK) s = tf_cast(o, TF_F32, &o32);
    if (s == TF_OK) s = tf_contiguous(o32, &oc);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (s == TF_OK) s = tf_tensor_read(oc, f, sizeof(float) * (size_t)n);
    double *r = NULL;
    if (s == TF_OK) {
        r = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) r[i] = f[i];
    }
    free(f);
    tf_tensor_release(o);
    tf_tensor_release(o32);
    tf_tensor_release(oc);
    unsetenv("TF_CUDA_FLASH");
    return r;
}

static double eps_of(tf_dtype dt) { return dt == TF_BF16 ? 1.0 / 256 : 1.0 / 2048; }

/* |got - want| <= tol * max(1, |want|) everywhere (NaN fails). */
static void compare(const char *what, const char *kernel, const double *got, const double *want, int64_t n, double tol) {
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(err <= tol)) {
            if (first < 0) first = i;
            bad++;
        }
        if (err > worst || isnan(err)) worst = isnan(err) ? INFINITY : err;
    }
    EXPECT(bad == 0, "%s under %s: %lld of %lld elements off (worst %.3g, bound %.3g; first at %lld: %g vs %g)", what,
           kernel, (long long)bad, (long long)n, worst, tol, (long long)first, first >= 0 ? got[first] : 0,
           first >= 0 ? want[first] : 0);
    printf("  %-44s %-14s worst %.3g (bound %.3g)\n", what, kernel, worst, tol);
}

static bool is_hopper(void) {
    tf_cuda_stats st;
    memset(&st, 0, sizeof st);
    tf_cuda_stats_fn fn = (tf_cuda_stats_fn)tf_backend_proc_address("cuda", "tf_cuda_stats");
    return fn && fn(0, &st) == TF_OK && st.compute_capability == 90;
}

static void check_against_reference(tf_device *cpu, tf_device *gpu, const flash_case *c, int first_kernel) {
    double *hq, *hk, *hv, *hm = NULL;
    tf_tensor *q = make_qkv(cpu, gpu, c->dt, c->B, c->Hq, c->Lq, c->D, c->blhd, 1, &hq);
    tf_tensor *k = make_qkv(cpu, gpu, c->dt, c->B, c->Hkv, c->Lk, c->D, c->blhd, 2, &hk);
    tf_tensor *v = make_qkv(cpu, gpu, c->dt, c->B, c->Hkv, c->Lk, c->D, c->blhd, 3, &hv);
    tf_tensor *m = c->mask ? make_mask(cpu, gpu, c, &hm) : NULL;
    int64_t n = c->B * c->Hq * c->Lq * c->D;
    double *ref = malloc(sizeof(double) * (size_t)n);
    reference(c, hq, hk, hv, hm, ref);
    for (int ki = first_kernel; ki < (on_cuda ? N_CUDA_KERNELS : DEFAULT_KERNEL + 1); ki++) {
        double *got = run_on(kernels[ki], gpu, c, q, k, v, m);
        if (got) compare(c->what, kernels[ki], got, ref, n, 4 * eps_of(c->dt));
        free(got);
    }
    free(ref);
    free(hq);
    free(hk);
    free(hv);
    free(hm);
    tf_tensor_release(q);
    tf_tensor_release(k);
    tf_tensor_release(v);
    tf_tensor_release(m);
}

/* At the benchmark's sizes: the first kernel against the last (mma.sync). */
static void check_kernels_agree(tf_device *gpu, tf_dtype dt, int64_t B, int64_t H, int64_t L, int first_kernel) {
    if (!on_cuda || first_kernel >= MMA_KERNEL) return;
    int64_t shape[4] = {B, H, L, 128}, n = B * H * L * 128;
    tf_tensor *x[3] = {NULL, NULL, NULL}, *x32 = NULL;
    for (int i = 0; i < 3; i++) {
        EXPECT(tf_randn(gpu, TF_F32, 4, shape, 40 + (uint64_t)i, &x32) == TF_OK && tf_cast(x32, dt, &x[i]) == TF_OK,
               "random input");
        tf_tensor_release(x32);
        x32 = NULL;
    }
    char what[96];
    snprintf(what, sizeof what, "%lldx%lldx%lldx128 %s causal", (long long)B, (long long)H, (long long)L,
             tf_dtype_name(dt));
    flash_case c = {what, dt, B, H, H, L, L, 128, true, -1, MASK_NONE, false};
    double *mma = run_on("mma", gpu, &c, x[0], x[1], x[2], NULL);
    for (int ki = first_kernel; ki < MMA_KERNEL && mma; ki++) {
        double *got = run_on(kernels[ki], gpu, &c, x[0], x[1], x[2], NULL);
        if (got) compare(what, kernels[ki], got, mma, n, 4 * eps_of(dt));
        free(got);
    }
    free(mma);
    for (int i = 0; i < 3; i++) tf_tensor_release(x[i]);
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "cuda:0";
    tf_device *gpu = NULL, *cpu = NULL;
    if (tf_device_get(spec, &gpu) != TF_OK) {
        printf("no %s (%s): skipped\n", spec, tf_last_error());
        return 77;
    }
    tf_device_get("cpu", &cpu);
    on_cuda = !strncmp(spec, "cuda", 4);
    int first = !on_cuda ? DEFAULT_KERNEL : is_hopper() ? 0 : MMA_KERNEL;   /* the Hopper kernel: compute 9.0 only */
    printf("prefill attention kernels on %s: %s\n", spec,
           !on_cuda ? "the device's own" : first == 0 ? "hopper-pingpong, hopper-overlap, hopper-serial, mma" : "mma");
    static const flash_case cases[] = {
        {"causal self-attention, GQA 4/2, partial tiles", TF_BF16, 2, 4, 2, 333, 333, 128, true, -1, MASK_NONE, false},
        {"causal with a KV cache (offset 577), MQA", TF_F16, 1, 8, 1, 200, 777, 128, true, 577, MASK_NONE, false},
        {"additive mask, head size 64", TF_BF16, 1, 2, 2, 130, 300, 64, false, -1, MASK_ADDITIVE, false},
        {"key padding (bool), causal", TF_F16, 2, 4, 4, 257, 257, 128, true, -1, MASK_KEY_PADDING, false},
        {"[B, L, H, D] layout", TF_BF16, 2, 4, 4, 256, 256, 128, false, -1, MASK_NONE, true},
        {"head size 64, causal, GQA 8/2, 1000 tokens", TF_F16, 1, 8, 2, 1000, 1000, 64, true, -1, MASK_NONE, false},
        {"17 queries against 5000 keys (offset 4983)", TF_BF16, 1, 2, 2, 17, 5000, 128, true, 4983, MASK_NONE, false},
        {"non-causal, 129 against 1, f16", TF_F16, 1, 2, 1, 129, 1, 128, false, -1, MASK_NONE, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_against_reference(cpu, gpu, &cases[i], first);
    check_kernels_agree(gpu, TF_BF16, 8, 32, 4096, first);
    check_kernels_agree(gpu, TF_F16, 8, 32, 4096, first);
    check_kernels_agree(gpu, TF_BF16, 1, 16, 16384, first);
    printf("test_flash_gpu: %d checks, %d failed\n", checks, failures);
    tf_shutdown();
    return failures ? 1 : 0;
}
