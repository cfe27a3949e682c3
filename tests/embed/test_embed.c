/* all-MiniLM-L6-v2 through the model library (tf_model_embed_tokens) against the float64 reference
 * (tests/embed/make_fixtures.py): every device present, f32 weights
 * (cosine >= 0.9999 per sentence) and bf16 weights (>= 0.999), the eight
 * sentences as one padded batch and the longest alone (batch 1, no padding).
 *
 * The model is all-MiniLM-L6-v2's model.safetensors (config.json and
 * vocab.txt beside it), or the same weights as a GGUF of llama.cpp's bert
 * architecture (tests/embed/make_bert_gguf.py).
 *
 * With --stored BOUND, the weights as the file stores them too (a quantized
 * GGUF's stay quantized); with --llama FILE BOUND, those embeddings also
 * against llama.cpp's own for the same file (llama_ref --embed).
 *
 * usage: test_embed MODEL.safetensors|MODEL.gguf FIXTURE_DIR [--stored BOUND] [--llama FILE BOUND] [DEVICE...]
 * (no devices: every one) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/model.h>
#include "../cuda/expect.h"   /* EXPECT: counts checks and failures */

#define N_SENT 8
#define MAX_TOKENS 128
#define HIDDEN 384

static int32_t ids[N_SENT][MAX_TOKENS];
static int64_t lengths[N_SENT];
static double reference[N_SENT][HIDDEN];
static double llama_emb[N_SENT][HIDDEN];      /* llama.cpp's embeddings of the same ids (--llama) */
static double llama_bound = -1;                /* < 0: not compared */

static bool read_rows(const char *path, double (*rows)[HIDDEN]) {
    FILE *r = fopen(path, "r");
    int got = 0;
    for (int s = 0; r && s < N_SENT; s++)
        for (int k = 0; k < HIDDEN; k++) got += fscanf(r, "%lf", &rows[s][k]) == 1;
    if (r) fclose(r);
    return got == N_SENT * HIDDEN;
}

static bool read_fixtures(const char *dir) {
    char path[1024], line[16384];
    snprintf(path, sizeof path, "%s/ids.txt", dir);
    FILE *f = fopen(path, "r");
    for (int s = 0; f && s < N_SENT && fgets(line, sizeof line, f); s++)
        for (char *p = strtok(line, " \n"); p && lengths[s] < MAX_TOKENS; p = strtok(NULL, " \n"))
            ids[s][lengths[s]++] = atoi(p);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/reference.txt", dir);
    FILE *r = fopen(path, "r");
    int got = 0;
    for (int s = 0; r && s < N_SENT; s++)
        for (int k = 0; k < HIDDEN; k++) got += fscanf(r, "%lf", &reference[s][k]) == 1;
    if (r) fclose(r);
    return f && r && got == N_SENT * HIDDEN && lengths[N_SENT - 1] > 0;
}

static double cosine(const float *a, const double *b) {
    double ab = 0, aa = 0, bb = 0;
    for (int k = 0; k < HIDDEN; k++) {
        ab += a[k] * b[k];
        aa += (double)a[k] * a[k];
        bb += b[k] * b[k];
    }
    return ab / sqrt(aa * bb);
}

/* Sentences [first, first + n) as one batch: the smallest cosine. */
static double run_batch_once(const tf_model *m, int first, int n, double (*ref)[HIDDEN]) {
    int64_t len = 1;
    for (int s = first; s < first + n; s++) len = lengths[s] > len ? lengths[s] : len;
    int32_t *batch = calloc((size_t)(n * len), sizeof *batch);
    for (int s = 0; s < n; s++) memcpy(batch + s * len, ids[first + s], sizeof(int32_t) * (size_t)lengths[first + s]);
    tf_tensor *e = NULL;
    tf_status st = tf_model_embed_tokens(m, batch, lengths + first, n, len, TF_POOLING_DEFAULT, true, &e);
    EXPECT(st == TF_OK, "forward: %s", tf_model_last_error());
    float v[N_SENT * HIDDEN];
    double worst = st == TF_OK ? 1 : -1;
    if (st == TF_OK && tf_tensor_read(e, v, sizeof(float) * (size_t)(n * HIDDEN)) == TF_OK)
        for (int s = 0; s < n; s++) worst = fmin(worst, cosine(v + s * HIDDEN, ref[first + s]));
    tf_tensor_release(e);
    free(batch);
    return worst;
}

/* On the CPU twice: the first pass of a shape is captured (and runs op by
 * op), the second replays the captured graph with the fusion pass's nodes.
 * The emulated GPUs run GEMM_EPILOGUE as its parts, so nothing fuses
 * there: once (their passes are the suite's slowest). */
static bool replays;

static double run_batch(const tf_model *m, int first, int n, double (*ref)[HIDDEN]) {
    double captured = run_batch_once(m, first, n, ref);
    return replays ? fmin(captured, run_batch_once(m, first, n, ref)) : captured;
}

static void check_device(const char *path, tf_device *dev, tf_dtype weights, double bound) {
    tf_model *m = NULL;
    tf_model_params mp = tf_model_default_params();
    mp.device = tf_device_name(dev);
    mp.weights = weights;
    tf_status s = tf_model_load(path, &mp, &m);
    EXPECT(s == TF_OK, "load on %s: %s", tf_device_name(dev), tf_model_last_error());
    if (s != TF_OK) return;
    replays = !strcmp(tf_device_name(dev), "cpu");
    double batch8 = run_batch(m, 0, N_SENT, reference), alone = run_batch(m, 4, 1, reference);   /* 4 is the longest */
    printf("%s, %s weights: smallest cosine %.7f (batch of 8), %.7f (one sentence); bound %g\n", tf_device_name(dev),
           weights == TF_DTYPE_COUNT ? "stored" : tf_dtype_name(weights), batch8, alone, bound);
    EXPECT(batch8 >= bound && alone >= bound, "%s, %s weights: cosine %.7f / %.7f below %g", tf_device_name(dev),
           tf_dtype_name(weights), batch8, alone, bound);
    if (llama_bound >= 0 && weights == TF_DTYPE_COUNT) {
        double vs = run_batch(m, 0, N_SENT, llama_emb);
        printf("%s, weights as stored, against llama.cpp's embeddings: smallest cosine %.7f; bound %g\n",
               tf_device_name(dev), vs, llama_bound);
        EXPECT(vs >= llama_bound, "%s: cosine %.7f to llama.cpp's below %g", tf_device_name(dev), vs, llama_bound);
    }
    tf_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_embed MODEL.safetensors|MODEL.gguf FIXTURE_DIR [DEVICE...]\n");
        return 2;
    }
    FILE *probe = fopen(argv[1], "rb");
    if (!probe) {
        printf("skipped: %s is absent (scripts/fetch-models.sh fetches it)\n", argv[1]);
        return 77;
    }
    fclose(probe);
    EXPECT(read_fixtures(argv[2]), "cannot read the fixtures in %s", argv[2]);
    double stored_bound = -1;
    int first_device = 3;
    while (first_device < argc && argv[first_device][0] == '-') {
        if (!strcmp(argv[first_device], "--stored") && first_device + 1 < argc) {
            stored_bound = atof(argv[first_device + 1]);
            first_device += 2;
        } else if (!strcmp(argv[first_device], "--llama") && first_device + 2 < argc) {
            EXPECT(read_rows(argv[first_device + 1], llama_emb), "cannot read %s", argv[first_device + 1]);
            llama_bound = atof(argv[first_device + 2]);
            first_device += 3;
        } else {
            fprintf(stderr, "test_embed: unknown option %s\n", argv[first_device]);
            return 2;
        }
    }
    int n = argc > first_device ? argc - first_device : tf_device_count();
    for (int d = 0; d < n; d++) {
        tf_device *dev = NULL;
        if (argc > first_device) EXPECT(tf_device_get(argv[first_device + d], &dev) == TF_OK, "no device %s", argv[first_device + d]);
        else dev = tf_device_at(d);
        if (!dev) continue;
        /* A quantized file (a bound below f32's) runs as stored only: decoded
         * to f32 it is the same numbers through slower products. An f32
         * file's stored weights are its f32 ones: that pass is not repeated. */
        if (stored_bound >= 0) check_device(argv[1], dev, TF_DTYPE_COUNT, stored_bound);
        if (stored_bound >= 0 && stored_bound < 0.9999) continue;
        if (stored_bound < 0) check_device(argv[1], dev, TF_F32, 0.9999);
        check_device(argv[1], dev, TF_BF16, 0.999);
    }
    tf_shutdown();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
