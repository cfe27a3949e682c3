#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
/* llm: a command line over the model library (tensorframe/model.h): run a
 * GGUF decoder of any family it knows (Llama, SmolLM, Mistral, Qwen2/3,
 * Phi-3, Gemma 2/3) on any device, streaming its answer.
 *
 *   llm MODEL.gguf [--device auto|cpu|opencl:0|cuda:0] [--prompt TEXT] [--system TEXT]
 *                  [--chat | --raw] [--template NAME] [-n MAX_TOKENS] [--temp T] [--top-k K]
 *                  [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--ctx N]
 *                  [--weights stored|f32|bf16|f16] [--bench ROUNDS]
 *
 * --chat (the default) wraps the prompt in the model's chat template (or
 * the format --template names); --raw continues the text as it is. The
 * prompt runs as one batch, then tokens are generated one at a time until
 * an end-of-turn token or MAX_TOKENS. Timings go to stderr.
 *
 * --bench ROUNDS measures as llama-bench does: pp128 and pp512 (that many
 * tokens in one batch into an empty context) and tg128 (128 single-token
 * steps from an empty context), printing the median tokens/s of ROUNDS runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/model.h>

typedef struct options {
    const char *model, *device, *prompt, *system, *template_name, *weights;
    bool raw;
    int64_t max_tokens, n_ctx;
    tf_sampler_params sampling;
    int bench_rounds;
} options;

static void usage(void) {
    fprintf(stderr, "usage: llm MODEL.gguf [--device D] [--prompt TEXT] [--system TEXT] [--chat|--raw] [--template NAME]\n"
                    "           [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
                    "           [--ctx N] [--weights stored|f32|bf16|f16] [--bench ROUNDS]\n");
}

static bool parse_args(int argc, char **argv, options *o) {
    *o = (options){.device = "auto", .prompt = "What is the capital of France? Answer in one sentence.",
                   .weights = "stored", .max_tokens = 64, .n_ctx = 1024, .sampling = tf_sampler_default_params()};
    o->sampling.temperature = 0;       /* greedy unless asked: a run is repeatable */
    o->sampling.seed = 42;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "--device") && v) o->device = v;
        else if (!strcmp(a, "--prompt") && v) o->prompt = v;
        else if (!strcmp(a, "--system") && v) o->system = v;
        else if (!strcmp(a, "--template") && v) o->template_name = v;
        else if (!strcmp(a, "--weights") && v) o->weights = v;
        else if (!strcmp(a, "-n") && v) o->max_tokens = atoll(v);
        else if (!strcmp(a, "--ctx") && v) o->n_ctx = atoll(v);
        else if (!strcmp(a, "--temp") && v) o->sampling.temperature = atof(v);
        else if (!strcmp(a, "--top-k") && v) o->sampling.top_k = atoll(v);
        else if (!strcmp(a, "--top-p") && v) o->sampling.top_p = atof(v);
        else if (!strcmp(a, "--min-p") && v) o->sampling.min_p = atof(v);
        else if (!strcmp(a, "--repeat-penalty") && v) o->sampling.repeat_penalty = atof(v);
        else if (!strcmp(a, "--seed") && v) o->sampling.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--bench") && v) o->bench_rounds = atoi(v);
        else if ((takes = false), !strcmp(a, "--raw")) o->raw = true;
        else if (!strcmp(a, "--chat")) o->raw = false;
        else if (a[0] != '-' && !o->model) o->model = a;
        else return false;
        i += takes;
    }
    return o->model && o->max_tokens >= 0 && o->n_ctx > 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tf_dtype weight_dtype(const char *name) {
    return !strcmp(name, "bf16") ? TF_BF16 : !strcmp(name, "f16") ? TF_F16 : !strcmp(name, "f32") ? TF_F32 : TF_DTYPE_COUNT;
}

/* The prompt's text: the conversation in the chat template, or as given. */
static tf_status prompt_text(const options *o, const tf_model *m, char **text) {
    if (o->raw) return (*text = strdup(o->prompt)) ? TF_OK : TF_ERR_OUT_OF_MEMORY;
    tf_chat_message msgs[2] = {{"system", o->system}, {"user", o->prompt}};
    return tf_model_chat_apply(m, o->template_name, o->system ? msgs : msgs + 1, o->system ? 2 : 1, true, text);
}

static tf_status generate(const options *o, tf_model *m, tf_model_context *ctx, const int32_t *ids, int64_t n_ids) {
    tf_sampler *sampler;
    tf_status st = tf_sampler_new(&o->sampling, &sampler);
    if (st != TF_OK) return st;
    for (int64_t i = 0; st == TF_OK && i < n_ids; i++) st = tf_sampler_accept(sampler, ids[i]);
    tf_utf8_pending pending = {0};
    char piece[256];
    size_t n_piece;
    tf_tensor *logits = NULL;
    int64_t produced = 0;
    int32_t id = -1;
    double t0 = now();
    if (st == TF_OK) st = tf_model_eval(ctx, ids, n_ids, &logits);
    if (st == TF_OK) st = tf_sampler_sample(sampler, logits, 0, &id);
    double t1 = now(), t_gen = t1;
    while (st == TF_OK && produced < o->max_tokens && !tf_model_token_is_end(m, id)) {
        if ((st = tf_model_detokenize(m, id, &pending, piece, sizeof piece, &n_piece)) != TF_OK) break;
        fwrite(piece, 1, n_piece, stdout);
        fflush(stdout);
        if (++produced == o->max_tokens || tf_model_context_used(ctx) >= o->n_ctx) break;
        tf_tensor_release(logits);
        logits = NULL;
        st = tf_model_eval(ctx, &id, 1, &logits);
        if (st == TF_OK) st = tf_sampler_sample(sampler, logits, 0, &id);
        t_gen = now();
    }
    printf("\n");
    fflush(stdout);          /* the answer before the timings on stderr */
    tf_tensor_release(logits);
    tf_sampler_free(sampler);
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

/* One llama-bench test round: n tokens as one batch (prompt) or one at a
 * time (generation) into ctx, emptied first; tokens/s. The context lives
 * through the test's rounds, as llama-bench's does (its cache cleared per
 * round), so a prompt's captured graph is replayed from the second round. */
static tf_status bench_once(tf_model_context *ctx, int64_t n_vocab, int64_t n, bool batch, double *rate) {
    tf_status st = tf_model_seq_rm(ctx, -1, 0, -1);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (st == TF_OK && !ids) st = TF_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; st == TF_OK && i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % n_vocab);
    double t0 = now();
    for (int64_t i = 0; st == TF_OK && i < (batch ? 1 : n); i++) {
        tf_tensor *logits = NULL;
        st = tf_model_eval(ctx, ids + i, batch ? n : 1, &logits);
        if (st == TF_OK) st = tf_device_synchronize(tf_tensor_device(logits));
        tf_tensor_release(logits);
    }
    *rate = (double)n / (now() - t0);
    free(ids);
    return st;
}

static tf_status bench(const options *o, const tf_model *m, int64_t n_vocab) {
    static const struct { const char *name; int64_t n; bool batch; } tests[] = {
        {"pp128", 128, true}, {"pp512", 512, true}, {"tg128", 128, false}};
    double rates[64];
    int rounds = o->bench_rounds < 64 ? o->bench_rounds : 64;
    printf("test\ttokens/s (median of %d)\n", rounds);
    for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++) {
        double warm;
        tf_model_context *ctx;
        tf_status st = tf_model_context_new(m, tests[t].n + 1, 1, &ctx);
        if (st != TF_OK) return st;
        st = bench_once(ctx, n_vocab, tests[t].n < 32 ? tests[t].n : 32, tests[t].batch, &warm);
        for (int r = 0; st == TF_OK && r < rounds; r++) st = bench_once(ctx, n_vocab, tests[t].n, tests[t].batch, &rates[r]);
        tf_model_context_free(ctx);
        if (st != TF_OK) return st;
        qsort(rates, (size_t)rounds, sizeof rates[0], by_value);
        printf("%s\t%.2f\n", tests[t].name, rates[rounds / 2]);
        fflush(stdout);
    }
    return TF_OK;
}

static tf_status run(const options *o) {
    tf_model *m = NULL;
    tf_model_context *ctx = NULL;
    tf_model_params mp = tf_model_default_params();
    mp.device = o->device;
    mp.weights = weight_dtype(o->weights);
    mp.n_ctx = o->n_ctx;
    tf_model_info info;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    char *text = NULL;
    double t0 = now();
    tf_status st = tf_model_load(o->model, &mp, &m);
    if (st == TF_OK) st = tf_model_get_info(m, &info);
    if (st == TF_OK)
        fprintf(stderr, "[%s: %s, %lld layers, on %s, weights %s; loaded in %.2f s]\n", o->model, info.architecture,
                (long long)info.n_layer, info.device, o->weights, now() - t0);
    if (st == TF_OK && o->bench_rounds > 0) st = bench(o, m, info.n_vocab);
    else if (st == TF_OK) {
        if (o->n_ctx > info.n_ctx_train)     /* llama.cpp warns the same way */
            fprintf(stderr, "[warning: --ctx %lld is past the %lld positions the model was trained on]\n",
                    (long long)o->n_ctx, (long long)info.n_ctx_train);
        st = tf_model_context_new(m, o->n_ctx, 1, &ctx);
        if (st == TF_OK) st = prompt_text(o, m, &text);
        if (st == TF_OK) st = tf_model_tokenize(m, text, strlen(text), true, true, &ids, &n_ids);
        if (st == TF_OK && n_ids == 0) st = TF_ERR_INVALID_ARGUMENT;
        if (st == TF_OK) st = generate(o, m, ctx, ids, n_ids);
    }
    if (st != TF_OK) fprintf(stderr, "llm: %s: %s\n", tf_status_name(st), tf_model_last_error());
    free(ids);
    free(text);
    tf_model_context_free(ctx);
    tf_model_free(m);
    return st;
}

int main(int argc, char **argv) {
    options o;
    if (!parse_args(argc, argv, &o)) {
        usage();
        return 2;
    }
    tf_status st = run(&o);
    tf_shutdown();
    return st == TF_OK ? 0 : 1;
}
