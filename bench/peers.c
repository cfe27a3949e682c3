/* The peers tf-bench is compared with, measured the same way: OpenBLAS
 * sgemm through direct cblas calls, and STREAM-style loops (add, copy, read)
 * that show the memory bandwidth this machine has, on all threads.
 * usage: peers [--json FILE] [--threads N] [--quick] */
#define _DEFAULT_SOURCE
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static FILE *json;

static void report(const char *lib, const char *op, const char *size, double s, double flops, double bytes) {
    if (s < 1e-4) printf("%-9s %-10s %-22s %10.3f us", lib, op, size, s * 1e6);
    else printf("%-9s %-10s %-22s %10.3f ms", lib, op, size, s * 1e3);
    if (flops > 0) printf("  %8.1f GFLOP/s", flops / s * 1e-9);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / s * 1e-9);
    printf("\n");
    if (json)
        fprintf(json, "{\"lib\":\"%s\",\"op\":\"%s\",\"size\":\"%s\",\"seconds\":%.9g,\"gflops\":%.6g,\"gbs\":%.6g}\n", lib, op,
                size, s, flops > 0 ? flops / s * 1e-9 : 0, bytes > 0 ? bytes / s * 1e-9 : 0);
}

/* The STREAM arrays get what tensorframe's allocator gives large blocks:
 * 2 MiB alignment and a huge-page hint, so the loops show the bandwidth the
 * machine has rather than its TLB misses. */
static float *big_array(long n) {
    void *p = NULL;
    if (posix_memalign(&p, 2 << 20, (size_t)n * 4) != 0) {
        fprintf(stderr, "peers: out of memory\n");
        exit(1);
    }
    madvise(p, (size_t)n * 4, MADV_HUGEPAGE);
    return p;
}

/* The timed bodies. */
static float *A, *B, *Cc, *X, *Y, *Z;
static long N;
static int M, MK, MN;   /* square size, or M x MK x MN for the skinny shapes */
static volatile float sink;

static void stream_add(void) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) Cc[i] = A[i] + B[i];
}

static void stream_copy(void) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) Cc[i] = A[i];
}

static void stream_read(void) {
    float s = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (long i = 0; i < N; i++) s += A[i];
    sink = s;
}

static void sgemm(void) { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, MN, MK, 1.0f, X, MK, Y, MN, 0.0f, Z, MN); }

/* Median of repeated runs: at least 5 and about min_time seconds. */
static double median(void (*body)(void), double min_time) {
    double ts[64];
    int n = 0;
    body();
    double start = now();
    while (n < 64 && (n < 5 || now() - start < min_time)) {
        double t0 = now();
        body();
        ts[n++] = now() - t0;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
            double x = ts[j];
            ts[j] = ts[j - 1];
            ts[j - 1] = x;
        }
    return ts[n / 2];
}

int main(int argc, char **argv) {
    int threads = omp_get_max_threads();
    double min_time = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = fopen(argv[++i], "w");
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) min_time = 0.05;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    printf("peers: %d threads, %s\n", threads, openblas_get_config());
    N = 16L << 20;
    A = big_array(N);
    B = big_array(N);
    Cc = big_array(N);
#pragma omp parallel for
    for (long i = 0; i < N; i++) A[i] = 1.0f + i % 7, B[i] = 2.0f, Cc[i] = 0;
    report("stream", "add", "16M f32", median(stream_add, min_time), (double)N, 12.0 * N);
    report("stream", "copy", "16M f32", median(stream_copy, min_time), 0, 8.0 * N);
    report("stream", "read", "16M f32", median(stream_read, min_time), (double)N, 4.0 * N);
    free(A);
    free(B);
    free(Cc);
    static const int sizes[] = {256, 512, 1024, 2048, 4096};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        M = MK = MN = sizes[k];
        if (min_time < 0.1 && M > 1024) break;
        X = aligned_alloc(64, (size_t)M * M * 4);
        Y = aligned_alloc(64, (size_t)M * M * 4);
        Z = aligned_alloc(64, (size_t)M * M * 4);
        for (long i = 0; i < (long)M * M; i++) X[i] = (float)(i % 13) * 0.1f, Y[i] = (float)(i % 7) * 0.1f;
        char size[64];
        snprintf(size, sizeof size, "%dx%dx%d f32", M, M, M);
        report("openblas", "matmul", size, median(sgemm, min_time), 2.0 * M * M * M, 0);
        free(X);
        free(Y);
        free(Z);
    }
    static const int skinny[][3] = {{1, 4096, 4096}, {4096, 4096, 1}, {8, 8, 8}};   /* as in tf-bench */
    for (size_t k = 0; k < sizeof skinny / sizeof *skinny; k++) {
        M = skinny[k][0], MK = skinny[k][1], MN = skinny[k][2];
        X = aligned_alloc(64, ((size_t)M * MK * 4 + 63) & ~(size_t)63);
        Y = aligned_alloc(64, ((size_t)MK * MN * 4 + 63) & ~(size_t)63);
        Z = aligned_alloc(64, ((size_t)M * MN * 4 + 63) & ~(size_t)63);
        for (long i = 0; i < (long)M * MK; i++) X[i] = (float)(i % 13) * 0.1f;
        for (long i = 0; i < (long)MK * MN; i++) Y[i] = (float)(i % 7) * 0.1f;
        char size[64];
        snprintf(size, sizeof size, "%dx%dx%d f32", M, MK, MN);
        report("openblas", "matmul", size, median(sgemm, min_time), 2.0 * M * MK * MN, 0);
        free(X);
        free(Y);
        free(Z);
    }
    if (json) fclose(json);
    return 0;
}
