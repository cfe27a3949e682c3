/* embed: sentence embeddings with all-MiniLM-L6-v2 on any device.
 *
 *   embed MODEL.safetensors [--device D] [--weights f32|bf16] [--bench N] < ids.txt
 *
 * Each input line holds one sentence's token ids (from the model's
 * tokenizer.json, e.g. tests/embed/fixtures/ids.txt); the sentences run as
 * one padded batch. Prints each embedding's first values and the cosine
 * similarity of every pair; with --bench N, instead, the median and the
 * fastest time of N forward passes of that batch (after two unmeasured
 * ones) — bench/embed_compare.py reads it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed.h"
#include "../example.h"

#define MAX_SENTENCES 64
#define MAX_TOKENS 512

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times `rounds` passes; prints "median_ms\tbest_ms". */
static int bench(const embed_model *m, int64_t batch, int64_t len, const int32_t *ids, const int64_t *lengths,
                  int rounds) {
    double *ms = malloc(sizeof(double) * (size_t)rounds);
    for (int r = -2; r < rounds; r++) {
        tf_tensor *e;
        double t0 = now_ms();
        CHECK(embed_forward(m, batch, len, ids, lengths, &e));
        CHECK(tf_device_synchronize(m->dev));
        if (r >= 0) ms[r] = now_ms() - t0;
        tf_tensor_release(e);
    }
    qsort(ms, (size_t)rounds, sizeof *ms, by_value);
    printf("%.4f\t%.4f\n", ms[rounds / 2], ms[0]);
    free(ms);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: embed MODEL.safetensors [--device D] [--weights f32|bf16] < ids.txt\n");
        return 2;
    }
    const char *device = "auto";
    tf_dtype weights = TF_F32;
    int rounds = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!strcmp(argv[i], "--weights")) weights = strcmp(argv[i + 1], "bf16") ? TF_F32 : TF_BF16;
        else if (!strcmp(argv[i], "--bench")) rounds = atoi(argv[i + 1]);
    }
    static int32_t rows[MAX_SENTENCES][MAX_TOKENS];
    int64_t lengths[MAX_SENTENCES], batch = 0, len = 1;
    char line[8192];
    while (batch < MAX_SENTENCES && fgets(line, sizeof line, stdin)) {
        int64_t n = 0;
        for (char *p = strtok(line, " \t\n"); p && n < MAX_TOKENS; p = strtok(NULL, " \t\n")) rows[batch][n++] = atoi(p);
        if (n == 0) continue;
        lengths[batch++] = n;
        if (n > len) len = n;
    }
    int32_t *ids = calloc((size_t)(batch * len) + 1, sizeof *ids);
    for (int64_t b = 0; b < batch; b++) memcpy(ids + b * len, rows[b], sizeof(int32_t) * (size_t)lengths[b]);
    tf_device *dev;
    embed_model *m;
    tf_tensor *e;
    CHECK(tf_device_get(device, &dev));
    CHECK(embed_model_load(argv[1], dev, weights, &m));
    if (rounds > 0) {
        int rc = bench(m, batch, len, ids, lengths, rounds);
        free(ids);
        embed_model_free(m);
        tf_shutdown();
        return rc;
    }
    CHECK(embed_forward(m, batch, len, ids, lengths, &e));
    float *v = malloc(sizeof(float) * (size_t)(batch * m->hidden));
    CHECK(tf_tensor_read(e, v, sizeof(float) * (size_t)(batch * m->hidden)));
    printf("%lld sentences on %s, %s weights\n", (long long)batch, tf_device_name(dev), tf_dtype_name(weights));
    for (int64_t b = 0; b < batch; b++) printf("  [%lld] %+.5f %+.5f %+.5f ...\n", (long long)b, v[b * m->hidden],
                                               v[b * m->hidden + 1], v[b * m->hidden + 2]);
    printf("cosine similarities:\n");
    for (int64_t a = 0; a < batch; a++) {
        for (int64_t b = 0; b < batch; b++) {
            double dot = 0;
            for (int64_t k = 0; k < m->hidden; k++) dot += (double)v[a * m->hidden + k] * v[b * m->hidden + k];
            printf(" %5.2f", dot);
        }
        printf("\n");
    }
    free(v);
    free(ids);
    tf_tensor_release(e);
    embed_model_free(m);
    tf_shutdown();
    return 0;
}
