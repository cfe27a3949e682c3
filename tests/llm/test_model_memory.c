#define _POSIX_C_SOURCE 200809L   /* setenv */
/* Memory-aware loading through tensorframe/model.h, on the example
 * backend with a budget smaller than the model (MYBACKEND_BUDGET_MB=4;
 * the tiny llama of tests/llm/families takes 5.8 MB in f32):
 *   - without allow_split the load fails with TF_ERR_OUT_OF_MEMORY and a
 *     message that names what is needed and what is free, and nothing is
 *     left allocated on the device;
 *   - with it, the first layers that fit stay on the device and the rest
 *     run on the CPU, and the greedy tokens and logits equal those of the
 *     model all on the CPU;
 *   - a budget that holds everything loads unsplit.
 * usage: test_model_memory MODELS_DIR (77 when the model is absent) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/model.h>

#include "mybackend.h"

static int failures;
#define EXPECT(cond, ...)                                       \
    do {                                                        \
        if (!(cond)) {                                          \
            failures++;                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);         \
            printf(__VA_ARGS__);                                \
            printf(" [%s]\n", tf_model_last_error());           \
        }                                                       \
    } while (0)

static const int32_t prompt[] = {1, 17, 250, 33, 400, 5, 77, 128, 301, 12, 9, 460};
#define N_PROMPT (int64_t)(sizeof prompt / sizeof prompt[0])

/* Greedy tokens and the first step's logits. */
static void run(tf_model *m, int32_t *tokens, int n, float *first, int64_t n_vocab) {
    tf_model_context *c = NULL;
    tf_tensor *logits = NULL;
    tf_status s = tf_model_context_new(m, 64, 1, &c);
    if (s == TF_OK) s = tf_model_eval(c, prompt, N_PROMPT, &logits);
    float *row = malloc((size_t)n_vocab * sizeof *row);
    for (int i = 0; s == TF_OK && i < n; i++) {
        s = tf_tensor_read(logits, row, (size_t)n_vocab * sizeof *row);
        if (i == 0) memcpy(first, row, (size_t)n_vocab * sizeof *row);
        int32_t best = 0;
        for (int64_t j = 1; j < n_vocab; j++)
            if (row[j] > row[best]) best = (int32_t)j;
        tokens[i] = best;
        tf_tensor_release(logits);
        logits = NULL;
        if (s == TF_OK && i + 1 < n) s = tf_model_eval(c, &best, 1, &logits);
    }
    EXPECT(s == TF_OK, "decoding");
    tf_tensor_release(logits);
    free(row);
    tf_model_context_free(c);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: test_model_memory MODELS_DIR\n"), 2;
    char path[1024];
    snprintf(path, sizeof path, "%s/llama/f32.gguf", argv[1]);
    FILE *probe = fopen(path, "rb");
    if (!probe) return printf("skipped: %s is absent\n", path), 77;
    fclose(probe);
    setenv("MYBACKEND_BUDGET_MB", "4", 1);
    if (mybackend_register() != TF_OK) return printf("FAIL: mybackend_register: %s\n", tf_last_error()), 1;

    tf_model_params mp = tf_model_default_params();
    mp.device = "mybackend:0";
    mp.n_ctx = 64;
    tf_model *m = NULL;
    tf_device *dev = NULL;
    tf_device_get("mybackend:0", &dev);
    tf_device_props before;
    tf_device_get_props(dev, &before);
    tf_status s = tf_model_load(path, &mp, &m);
    const char *msg = tf_model_last_error();
    EXPECT(s == TF_ERR_OUT_OF_MEMORY && m == NULL, "an unsplit load that does not fit: %s", tf_status_name(s));
    EXPECT(strstr(msg, "needs 5.") && strstr(msg, "has 4.0 MiB free"), "the message names both figures: %s", msg);
    tf_device_props after;
    tf_device_get_props(dev, &after);
    EXPECT(after.memory_free == before.memory_free, "the failed load left %llu bytes on the device",
           (unsigned long long)(before.memory_free - after.memory_free));

    mp.allow_split = true;
    s = tf_model_load(path, &mp, &m);
    EXPECT(s == TF_OK, "a split load");
    tf_model_info info = {0};
    if (s == TF_OK) tf_model_get_info(m, &info);
    EXPECT(s == TF_OK && info.n_layer_on_device >= 1 && info.n_layer_on_device < info.n_layer && info.split_device &&
               !strcmp(info.split_device, "cpu"),
           "split: %lld of %lld layers on the device, the rest on %s", (long long)info.n_layer_on_device,
           (long long)info.n_layer, info.split_device ? info.split_device : "nothing");

    tf_model *whole = NULL;
    tf_model_params cpu = tf_model_default_params();
    cpu.device = "cpu";
    EXPECT(tf_model_load(path, &cpu, &whole) == TF_OK, "the model on the CPU");
    int32_t split_tokens[8] = {0}, cpu_tokens[8] = {0};
    float *a = calloc((size_t)info.n_vocab + 1, sizeof *a), *b = calloc((size_t)info.n_vocab + 1, sizeof *b);
    if (m && whole) {
        run(m, split_tokens, 8, a, info.n_vocab);
        run(whole, cpu_tokens, 8, b, info.n_vocab);
    }
    double diff = 0;
    for (int64_t i = 0; i < info.n_vocab; i++) diff = fmax(diff, fabs((double)a[i] - b[i]));
    EXPECT(!memcmp(split_tokens, cpu_tokens, sizeof cpu_tokens), "split and CPU greedy tokens differ");
    EXPECT(diff <= 1e-4, "split and CPU logits differ by %g", diff);
    printf("split: %lld of %lld layers on mybackend:0 (4 MiB), the rest on cpu; 8 greedy tokens equal, "
           "max |dlogit| %.2g\n", (long long)info.n_layer_on_device, (long long)info.n_layer, diff);
    free(a);
    free(b);
    tf_model_free(m);
    tf_model_free(whole);

    /* the tiny Q8_0 file fits the same budget whole */
    snprintf(path, sizeof path, "%s/llama/Q8_0.gguf", argv[1]);
    s = tf_model_load(path, &mp, &m);
    if (s == TF_OK) tf_model_get_info(m, &info);
    EXPECT(s == TF_OK && info.split_device == NULL && info.n_layer_on_device == info.n_layer, "Q8_0 loads unsplit");
    tf_model_free(m);
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    tf_shutdown();
    return failures ? 1 : 0;
}
