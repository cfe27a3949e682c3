/* llama_ref: the reference fixtures of tests/llm, written by llama.cpp
 * itself (linked against its libllama; built by scripts/llama-fixtures.sh).
 *
 *   llama_ref MODEL CASES TOKENS_OUT PROMPT LOGITS_OUT [STEPS] [TOPK]
 *
 * CASES holds one string a line, with \n \t \r \\ and \xHH escapes.
 * TOKENS_OUT gets, per case, the string's bytes in hex, a tab, and the ids
 * llama.cpp gives it (parse_special on, BOS as the model asks).
 * PROMPT is a file whose whole text is the prompt; LOGITS_OUT gets the
 * prompt's ids, then for the prompt's last position and each of STEPS greedy
 * steps: the argmax, the log-sum-exp of all logits, and the TOPK largest
 * logits with their ids. Each greedy token is fed back, so the steps are
 * llama.cpp's own continuation.
 *
 *   llama_ref --ids MODEL "ID ID ..." LOGITS_OUT [STEPS] [TOPK]
 *
 * does the same from token ids, for models without a vocabulary (the tiny
 * family models of tests/llm/families).
 *
 *   llama_ref --embed MODEL IDS_FILE OUT
 *
 * writes, per line of ids, the model's mean-pooled embedding (an encoder's,
 * as llama.cpp's embedding example computes it), L2-normalized, one line of
 * floats each (tests/embed's llama.cpp fixtures).
 *
 * With LLAMA_REF_VOCAB_ONLY set, MODEL may hold a vocabulary and no
 * weights, and LOGITS_OUT "-" writes the tokens only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static size_t unescape(const char *in, char *out) {
    size_t n = 0;
    for (const char *p = in; *p && *p != '\n'; p++) {
        if (*p != '\\' || !p[1]) {
            out[n++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'x': {
            unsigned v;
            if (sscanf(p + 1, "%2x", &v) == 1) out[n++] = (char)v;
            p += 2;
            break;
        }
        default: out[n++] = *p;
        }
    }
    return n;
}

static int write_tokens(const struct llama_vocab *vocab, const char *cases_path, const char *out_path) {
    FILE *in = fopen(cases_path, "r"), *out = fopen(out_path, "w");
    if (!in || !out) return perror("llama_ref"), 1;
    static char line[1 << 16], text[1 << 16];
    static llama_token ids[1 << 16];
    while (fgets(line, sizeof line, in)) {
        size_t n = unescape(line, text);
        int32_t k = llama_tokenize(vocab, text, (int32_t)n, ids, 1 << 16, true, true);
        if (k < 0) return fprintf(stderr, "llama_ref: tokenize failed\n"), 1;
        for (size_t i = 0; i < n; i++) fprintf(out, "%02x", (unsigned char)text[i]);
        fputc('\t', out);
        for (int32_t i = 0; i < k; i++) fprintf(out, i ? " %d" : "%d", ids[i]);
        fputc('\n', out);
    }
    fclose(in);
    fclose(out);
    return 0;
}

static void write_step(FILE *out, int step, const float *logits, int n_vocab, int topk, int *argmax) {
    int best = 0;
    double max = logits[0], sum = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[best = i];
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    fprintf(out, "step %d %d %.9g %d", step, best, max + log(sum), topk);
    char *taken = calloc((size_t)n_vocab, 1);
    for (int k = 0; k < topk; k++) {
        int pick = -1;
        for (int i = 0; i < n_vocab; i++)
            if (!taken[i] && (pick < 0 || logits[i] > logits[pick])) pick = i;
        taken[pick] = 1;
        fprintf(out, " %d:%.9g", pick, logits[pick]);
    }
    fputc('\n', out);
    free(taken);
    *argmax = best;
}

static int continue_greedily(struct llama_model *model, llama_token *ids, int32_t k, FILE *out, int steps, int topk);

static int write_logits(struct llama_model *model, const char *prompt_path, const char *out_path, int steps, int topk) {
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    FILE *in = fopen(prompt_path, "rb"), *out = fopen(out_path, "w");
    if (!in || !out) return perror("llama_ref"), 1;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, in);
    fclose(in);
    static llama_token ids[4096];
    int32_t k = llama_tokenize(vocab, text, (int32_t)n, ids, 4096, true, true);
    if (k <= 0) return fprintf(stderr, "llama_ref: prompt tokenize failed\n"), 1;
    return continue_greedily(model, ids, k, out, steps, topk);
}

static int write_logits_from_ids(struct llama_model *model, const char *id_text, const char *out_path, int steps, int topk) {
    FILE *out = fopen(out_path, "w");
    if (!out) return perror("llama_ref"), 1;
    static llama_token ids[4096];
    int32_t k = 0;
    for (char *p = (char *)id_text, *end; k < 4096; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[k++] = (llama_token)v;
    }
    if (k <= 0) return fprintf(stderr, "llama_ref: no ids\n"), 1;
    return continue_greedily(model, ids, k, out, steps, topk);
}

static int continue_greedily(struct llama_model *model, llama_token *ids, int32_t k, FILE *out, int steps, int topk) {
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    fprintf(out, "prompt %d", k);
    for (int32_t i = 0; i < k; i++) fprintf(out, " %d", ids[i]);
    fputc('\n', out);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "llama_ref: no context\n"), 1;
    int n_vocab = llama_vocab_n_tokens(vocab);
    if (llama_decode(ctx, llama_batch_get_one(ids, k)) != 0) return fprintf(stderr, "llama_ref: decode failed\n"), 1;
    for (int step = 0; step <= steps; step++) {
        llama_token next;
        write_step(out, step, llama_get_logits_ith(ctx, -1), n_vocab, topk, &next);
        if (step == steps) break;
        if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return fprintf(stderr, "llama_ref: decode failed\n"), 1;
    }
    llama_free(ctx);
    fclose(out);
    return 0;
}

static int write_embeddings(struct llama_model *model, const char *ids_path, const char *out_path) {
    FILE *in = fopen(ids_path, "r"), *out = fopen(out_path, "w");
    if (!in || !out) return perror("llama_ref"), 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_MEAN;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return fprintf(stderr, "llama_ref: no context\n"), 1;
    int n_embd = llama_model_n_embd(model);
    static char line[1 << 16];
    while (fgets(line, sizeof line, in)) {
        llama_token ids[512];
        int n = 0;
        for (char *p = strtok(line, " \n"); p && n < 512; p = strtok(NULL, " \n")) ids[n++] = atoi(p);
        if (n == 0) continue;
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = ids[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = n;
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_decode(ctx, b) < 0) return fprintf(stderr, "llama_ref: decode failed\n"), 1;
        const float *e = llama_get_embeddings_seq(ctx, 0);
        if (!e) return fprintf(stderr, "llama_ref: no embeddings\n"), 1;
        double norm = 0;
        for (int k = 0; k < n_embd; k++) norm += (double)e[k] * e[k];
        norm = sqrt(norm);
        for (int k = 0; k < n_embd; k++) fprintf(out, k ? " %.9g" : "%.9g", e[k] / norm);
        fputc('\n', out);
        llama_batch_free(b);
    }
    llama_free(ctx);
    fclose(in);
    fclose(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 6 && !(argc >= 5 && (!strcmp(argv[1], "--ids") || !strcmp(argv[1], "--embed")))) {
        fprintf(stderr, "usage: llama_ref MODEL CASES TOKENS_OUT PROMPT LOGITS_OUT [STEPS] [TOPK]\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    if (!strcmp(argv[1], "--embed")) {
        struct llama_model *model = llama_model_load_from_file(argv[2], mp);
        if (!model) return fprintf(stderr, "llama_ref: cannot load %s\n", argv[2]), 1;
        int rc = write_embeddings(model, argv[3], argv[4]);
        llama_model_free(model);
        llama_backend_free();
        return rc;
    }
    if (!strcmp(argv[1], "--ids")) {
        struct llama_model *model = llama_model_load_from_file(argv[2], mp);
        if (!model) return fprintf(stderr, "llama_ref: cannot load %s\n", argv[2]), 1;
        int rc = write_logits_from_ids(model, argv[3], argv[4], argc > 5 ? atoi(argv[5]) : 16, argc > 6 ? atoi(argv[6]) : 40);
        llama_model_free(model);
        llama_backend_free();
        return rc;
    }
    mp.vocab_only = getenv("LLAMA_REF_VOCAB_ONLY") != NULL;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "llama_ref: cannot load %s\n", argv[1]), 1;
    int rc = write_tokens(llama_model_get_vocab(model), argv[2], argv[3]);
    if (rc == 0 && strcmp(argv[5], "-")) rc = write_logits(model, argv[4], argv[5], argc > 6 ? atoi(argv[6]) : 32, argc > 7 ? atoi(argv[7]) : 40);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
