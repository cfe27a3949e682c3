#define _POSIX_C_SOURCE 200809L   /* strdup, clock_gettime */
/* llm: run a llama-architecture GGUF model (SmolLM2, Llama, ...) through
 * tensorframe on any device, streaming its answer.
 *
 *   llm MODEL.gguf [--device auto|cpu|opencl:0|cuda:0] [--prompt TEXT] [--raw]
 *                  [-n MAX_TOKENS] [--temp T] [--top-k K] [--top-p P] [--seed S]
 *                  [--ctx N] [--weights stored|f32|bf16|f16] [--bench ROUNDS]
 *
 * The prompt is wrapped in the model's chat template (ChatML, the template
 * SmolLM2 ships) unless --raw. It is processed in one batch, then tokens
 * are generated one at a time with the KV cache until an end-of-turn token
 * or MAX_TOKENS. Timings go to stderr.
 *
 * --bench ROUNDS measures as llama-bench does: pp128 and pp512 (that many
 * tokens in one batch into an empty cache) and tg128 (128 single-token steps
 * from an empty cache), printing the median tokens/s of ROUNDS runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/tensorframe.h>

#include "llm_model.h"
#include "sampler.h"
#include "tokenizer.h"

typedef struct options {
    const char *model, *device, *prompt, *weights;
    bool raw;
    int64_t max_tokens, n_ctx;
    llm_sampler sampler;
    uint64_t seed;
    int bench_rounds;
} options;

static void usage(void) {
    fprintf(stderr, "usage: llm MODEL.gguf [--device D] [--prompt TEXT] [--raw] [-n N] [--temp T] [--top-k K]\n"
                    "           [--top-p P] [--seed S] [--ctx N] [--weights stored|f32|bf16|f16]\n");
}

static bool parse_args(int argc, char **argv, options *o) {
    *o = (options){.device = "auto", .prompt = "What is the capital of France? Answer in one sentence.", .weights = "stored", .max_tokens = 64,
                   .n_ctx = 1024, .sampler = {.temperature = 0, .top_k = 40, .top_p = 0.95}, .seed = 42};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "--device") && v) o->device = v;
        else if (!strcmp(a, "--prompt") && v) o->prompt = v;
        else if (!strcmp(a, "--weights") && v) o->weights = v;
        else if (!strcmp(a, "-n") && v) o->max_tokens = atoll(v);
        else if (!strcmp(a, "--ctx") && v) o->n_ctx = atoll(v);
        else if (!strcmp(a, "--temp") && v) o->sampler.temperature = atof(v);
        else if (!strcmp(a, "--top-k") && v) o->sampler.top_k = atoll(v);
        else if (!strcmp(a, "--top-p") && v) o->sampler.top_p = atof(v);
        else if (!strcmp(a, "--seed") && v) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--bench") && v) o->bench_rounds = atoi(v);
        else if ((takes = false), !strcmp(a, "--raw")) o->raw = true;
        else if (a[0] != '-' && !o->model) o->model = a;
        else return false;
        i += takes;
    }
    return o->model && o->max_tokens >= 0 && o->n_ctx > 0;
}

/* The default system message of a ChatML template, as the template writes
 * it, or NULL when it has none. */
static char *template_system(const tf_gguf *f) {
    static const char opening[] = "<|im_start|>system\n";
    int64_t k = tf_gguf_find_key(f, "tokenizer.chat_template");
    const char *tpl;
    size_t len;
    if (k < 0 || tf_gguf_get_string(f, k, 0, &tpl, &len) != TF_OK) return NULL;
    for (size_t i = 0; i + sizeof opening - 1 < len; i++) {
        if (memcmp(tpl + i, opening, sizeof opening - 1)) continue;
        const char *from = tpl + i + sizeof opening - 1, *end = from;
        while (end + 10 <= tpl + len && memcmp(end, "<|im_end|>", 10)) end++;
        if (end + 10 > tpl + len || end == from || memchr(from, '\'', (size_t)(end - from))) return NULL;
        char *sys = malloc((size_t)(end - from) + 1);
        if (sys) {
            memcpy(sys, from, (size_t)(end - from));
            sys[end - from] = 0;
        }
        return sys;
    }
    return NULL;
}

static char *chat_prompt(const tf_gguf *f, const char *user) {
    char *sys = template_system(f);
    size_t n = strlen(user) + (sys ? strlen(sys) : 0) + 128;
    char *text = malloc(n);
    if (text && sys)
        snprintf(text, n, "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", sys, user);
    else if (text)
        snprintf(text, n, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
    free(sys);
    return text;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tf_dtype weight_dtype(const char *name) {
    return !strcmp(name, "bf16") ? TF_BF16 : !strcmp(name, "f16") ? TF_F16 : !strcmp(name, "f32") ? TF_F32
                                                                                              : LLM_WEIGHTS_AS_STORED;
}

/* Reads a [1, vocab] f32 row and samples from it. */
static tf_status next_token(llm_sampler *s, const tf_tensor *logits, float *row, int64_t n_vocab, int32_t *id) {
    tf_status st = tf_tensor_read(logits, row, (size_t)n_vocab * sizeof *row);
    if (st != TF_OK) return llm_fail(st, "reading logits: %s", tf_last_error());
    *id = llm_sample(s, row, n_vocab);
    return *id < 0 ? llm_fail(TF_ERR_INVALID_ARGUMENT, "no token to sample (all logits NaN)") : TF_OK;
}

static tf_status generate(const options *o, const llm_model *m, const llm_tokenizer *tok, llm_cache *kv,
                          const int32_t *ids, int64_t n_ids) {
    llm_sampler sampler = o->sampler;
    llm_sampler_seed(&sampler, o->seed);
    int64_t n_vocab = m->cfg.n_vocab, produced = 0;
    float *row = malloc((size_t)n_vocab * sizeof *row);
    if (!row) return llm_fail(TF_ERR_OUT_OF_MEMORY, "out of memory");
    tf_tensor *logits;
    double t0 = now();
    tf_status st = llm_forward(m, kv, ids, n_ids, false, &logits);
    int32_t id = -1;
    if (st == TF_OK) st = next_token(&sampler, logits, row, n_vocab, &id);
    tf_tensor_release(logits);
    double t1 = now(), t_gen = t1;
    while (st == TF_OK && produced < o->max_tokens && !llm_token_is_end(tok, id)) {
        size_t len;
        const char *bytes = llm_token_bytes(tok, id, &len);
        fwrite(bytes, 1, len, stdout);
        fflush(stdout);
        if (++produced == o->max_tokens || kv->n_past >= kv->n_ctx) break;
        st = llm_forward(m, kv, &id, 1, false, &logits);
        if (st == TF_OK) st = next_token(&sampler, logits, row, n_vocab, &id);
        tf_tensor_release(logits);
        t_gen = now();
    }
    printf("\n");
    fflush(stdout);          /* the answer before the timings on stderr */
    free(row);
    if (st == TF_OK)
        fprintf(stderr, "[prompt: %lld tokens in %.3f s, %.1f tokens/s; generated: %lld tokens, %.1f tokens/s]\n",
                (long long)n_ids, t1 - t0, (double)n_ids / (t1 - t0), (long long)produced,
                produced > 1 ? (double)(produced - 1) / (t_gen - t1) : 0.0);
    return st;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One llama-bench test: n tokens as one batch (prompt) or one at a time
 * (generation), from an empty cache; tokens/s. */
static tf_status bench_once(const llm_model *m, int64_t n, bool batch, double *rate) {
    llm_cache *kv;
    tf_status st = llm_cache_new(m, n + 1, &kv);
    if (st != TF_OK) return st;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) st = llm_fail(TF_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; st == TF_OK && i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % m->cfg.n_vocab);
    double t0 = now();
    for (int64_t i = 0; st == TF_OK && i < (batch ? 1 : n); i++) {
        tf_tensor *logits = NULL;
        st = llm_forward(m, kv, ids + i, batch ? n : 1, false, &logits);
        if (st == TF_OK) st = tf_device_synchronize(m->dev);
        tf_tensor_release(logits);
    }
    *rate = (double)n / (now() - t0);
    free(ids);
    llm_cache_free(kv);
    return st;
}

static tf_status bench(const options *o, const llm_model *m) {
    static const struct { const char *name; int64_t n; bool batch; } tests[] = {
        {"pp128", 128, true}, {"pp512", 512, true}, {"tg128", 128, false}};
    double rates[64];
    int rounds = o->bench_rounds < 64 ? o->bench_rounds : 64;
    printf("test\ttokens/s (median of %d)\n", rounds);
    for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
        double warm;
        tf_status st = bench_once(m, tests[t].n < 32 ? tests[t].n : 32, tests[t].batch, &warm);
        for (int r = 0; st == TF_OK && r < rounds; r++) st = bench_once(m, tests[t].n, tests[t].batch, &rates[r]);
        if (st != TF_OK) return st;
        qsort(rates, (size_t)rounds, sizeof rates[0], by_value);
        printf("%s\t%.2f\n", tests[t].name, rates[rounds / 2]);
        fflush(stdout);
    }
    return TF_OK;
}

static int run(const options *o) {
    tf_device *dev;
    tf_gguf *f = NULL;
    llm_tokenizer *tok = NULL;
    llm_model *m = NULL;
    llm_cache *kv = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    char *text = NULL;
    tf_status st = tf_device_get(o->device, &dev);
    if (st != TF_OK) llm_fail(st, "device %s: %s", o->device, tf_last_error());
    if (st == TF_OK && (st = tf_gguf_open(o->model, &f)) != TF_OK) llm_fail(st, "%s", tf_last_error());
    if (st == TF_OK) st = llm_tokenizer_load(f, &tok);
    if (st == TF_OK) {
        fprintf(stderr, "[%s on %s, weights %s]\n", o->model, tf_device_name(dev), o->weights);
        double t0 = now();
        st = llm_model_load(f, dev, weight_dtype(o->weights), &m);
        if (st == TF_OK) fprintf(stderr, "[loaded in %.2f s]\n", now() - t0);
    }
    if (st == TF_OK && o->bench_rounds > 0) {
        st = bench(o, m);
        if (st != TF_OK) fprintf(stderr, "llm: %s: %s\n", tf_status_name(st), llm_error());
        llm_model_free(m);
        llm_tokenizer_free(tok);
        tf_gguf_close(f);
        tf_shutdown();
        return st == TF_OK ? 0 : 1;
    }
    if (st == TF_OK && o->n_ctx > m->cfg.n_ctx_train)     /* llama.cpp warns the same way */
        fprintf(stderr, "[warning: --ctx %lld is past the %lld positions the model was trained on]\n",
                (long long)o->n_ctx, (long long)m->cfg.n_ctx_train);
    if (st == TF_OK) st = llm_cache_new(m, o->n_ctx, &kv);
    if (st == TF_OK && !(text = o->raw ? strdup(o->prompt) : chat_prompt(f, o->prompt)))
        st = llm_fail(TF_ERR_OUT_OF_MEMORY, "out of memory");
    if (st == TF_OK) st = llm_tokenize(tok, text, strlen(text), llm_add_bos(tok), true, &ids, &n_ids);
    if (st == TF_OK && n_ids == 0) st = llm_fail(TF_ERR_INVALID_ARGUMENT, "the prompt has no tokens");
    if (st == TF_OK) st = generate(o, m, tok, kv, ids, n_ids);
    if (st != TF_OK) fprintf(stderr, "llm: %s: %s\n", tf_status_name(st), llm_error());
    free(ids);
    free(text);
    llm_cache_free(kv);
    llm_model_free(m);
    llm_tokenizer_free(tok);
    tf_gguf_close(f);
    tf_shutdown();
    return st == TF_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    options o;
    if (!parse_args(argc, argv, &o)) {
        usage();
        return 2;
    }
    return run(&o);
}
