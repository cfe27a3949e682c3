/* embed: sentence embeddings through the model library (tensorframe/model.h)
 * on any device: a BERT-family encoder (all-MiniLM-L6-v2's model.safetensors
 * with its config.json and vocab.txt beside it, or a GGUF of architecture
 * bert), or a decoder's final hidden state.
 *
 *   embed MODEL [--device D] [--weights f32|bf16] [--pooling mean|cls|last] [--ids] [--bench N] < lines
 *
 * Each input line is a sentence (tokenized by the model's tokenizer) or,
 * with --ids, its token ids (e.g. tests/embed/fixtures/ids.txt); the
 * sentences run as one padded batch. Prints each embedding's first values
 * and the cosine similarity of every pair; with --bench N, instead, the
 * median and the fastest time of N passes of that batch (after two
 * unmeasured ones) — bench/embed_compare.py reads it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/model.h>

#define MAX_SENTENCES 64
#define MAX_TOKENS 512

typedef struct batch {
    int32_t ids[MAX_SENTENCES * MAX_TOKENS];
    int64_t lengths[MAX_SENTENCES], n, len;
} batch;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One line's ids: read as numbers, or tokenized. */
static tf_status read_line(const tf_model *m, char *line, bool as_ids, int32_t *row, int64_t *n) {
    *n = 0;
    if (as_ids) {
        for (char *p = strtok(line, " \t\n"); p && *n < MAX_TOKENS; p = strtok(NULL, " \t\n")) row[(*n)++] = atoi(p);
        return TF_OK;
    }
    line[strcspn(line, "\n")] = 0;
    int32_t *ids = NULL;
    int64_t k = 0;
    tf_status s = line[0] ? tf_model_tokenize(m, line, strlen(line), true, false, &ids, &k) : TF_OK;
    for (int64_t i = 0; s == TF_OK && i < k && i < MAX_TOKENS; i++) row[(*n)++] = ids[i];
    free(ids);
    return s;
}

static tf_status read_batch(const tf_model *m, bool as_ids, batch *b) {
    static int32_t rows[MAX_SENTENCES][MAX_TOKENS];
    char line[8192];
    b->n = 0;
    b->len = 1;
    tf_status s = TF_OK;
    while (s == TF_OK && b->n < MAX_SENTENCES && fgets(line, sizeof line, stdin)) {
        int64_t n = 0;
        s = read_line(m, line, as_ids, rows[b->n], &n);
        if (n == 0) continue;
        b->lengths[b->n++] = n;
        if (n > b->len) b->len = n;
    }
    memset(b->ids, 0, sizeof b->ids);
    for (int64_t i = 0; i < b->n; i++) memcpy(b->ids + i * b->len, rows[i], sizeof(int32_t) * (size_t)b->lengths[i]);
    return s == TF_OK && b->n == 0 ? TF_ERR_INVALID_ARGUMENT : s;
}

/* Times `rounds` passes; prints "median_ms\tbest_ms". */
static tf_status bench(const tf_model *m, const batch *b, tf_pooling pooling, int rounds) {
    double *ms = malloc(sizeof(double) * (size_t)rounds);
    tf_status s = ms ? TF_OK : TF_ERR_OUT_OF_MEMORY;
    for (int r = -2; s == TF_OK && r < rounds; r++) {
        tf_tensor *e = NULL;
        double t0 = now_ms();
        s = tf_model_embed_tokens(m, b->ids, b->lengths, b->n, b->len, pooling, true, &e);
        if (s == TF_OK) s = tf_device_synchronize(tf_tensor_device(e));
        if (r >= 0) ms[r] = now_ms() - t0;
        tf_tensor_release(e);
    }
    if (s == TF_OK) {
        qsort(ms, (size_t)rounds, sizeof *ms, by_value);
        printf("%.4f\t%.4f\n", ms[rounds / 2], ms[0]);
    }
    free(ms);
    return s;
}

static tf_status show(const tf_model *m, const batch *b, tf_pooling pooling) {
    tf_model_info info;
    tf_tensor *e = NULL;
    tf_status s = tf_model_get_info(m, &info);
    if (s == TF_OK) s = tf_model_embed_tokens(m, b->ids, b->lengths, b->n, b->len, pooling, true, &e);
    int64_t h = info.n_embd;
    float *v = s == TF_OK ? malloc(sizeof(float) * (size_t)(b->n * h)) : NULL;
    if (s == TF_OK) s = v ? tf_tensor_read(e, v, sizeof(float) * (size_t)(b->n * h)) : TF_ERR_OUT_OF_MEMORY;
    if (s == TF_OK) {
        printf("%lld sentences, %s on %s\n", (long long)b->n, info.architecture, info.device);
        for (int64_t i = 0; i < b->n; i++) printf("  [%lld] %+.5f %+.5f %+.5f ...\n", (long long)i, v[i * h], v[i * h + 1], v[i * h + 2]);
        printf("cosine similarities:\n");
        for (int64_t i = 0; i < b->n; i++, printf("\n"))
            for (int64_t j = 0; j < b->n; j++) {
                double dot = 0;
                for (int64_t k = 0; k < h; k++) dot += (double)v[i * h + k] * v[j * h + k];
                printf(" %5.2f", dot);
            }
    }
    free(v);
    tf_tensor_release(e);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: embed MODEL [--device D] [--weights f32|bf16] [--pooling mean|cls|last] [--ids] "
                        "[--bench N] < lines\n");
        return 2;
    }
    tf_model_params mp = tf_model_default_params();
    tf_pooling pooling = TF_POOLING_DEFAULT;
    bool as_ids = false;
    int rounds = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--ids")) as_ids = true;
        else if (!strcmp(a, "--device") && ++i) mp.device = v;
        else if (!strcmp(a, "--weights") && ++i) mp.weights = strcmp(v, "bf16") ? TF_F32 : TF_BF16;
        else if (!strcmp(a, "--bench") && ++i) rounds = atoi(v);
        else if (!strcmp(a, "--pooling") && ++i)
            pooling = !strcmp(v, "cls") ? TF_POOLING_CLS : !strcmp(v, "last") ? TF_POOLING_LAST : TF_POOLING_MEAN;
    }
    tf_model *m = NULL;
    static batch b;
    tf_status s = tf_model_load(argv[1], &mp, &m);
    if (s == TF_OK) s = read_batch(m, as_ids, &b);
    if (s == TF_OK) s = rounds > 0 ? bench(m, &b, pooling, rounds) : show(m, &b, pooling);
    if (s != TF_OK) fprintf(stderr, "embed: %s: %s\n", tf_status_name(s), tf_model_last_error());
    tf_model_free(m);
    tf_shutdown();
    return s == TF_OK ? 0 : 1;
}
