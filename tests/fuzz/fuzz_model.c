/* libFuzzer target past the GGUF header: the model runner of examples/llm
 * (its tokenizer, its loader, a prompt and a decode step on the CPU) on
 * every input. Oracles:
 *  - a failed tokenizer or model load returns an error status with a
 *    message and leaves its output NULL;
 *  - every id a loaded tokenizer gives lies in its vocabulary, and every
 *    id's bytes can be read (ASan checks the range);
 *  - a forward pass that succeeds gives finite logits (a non-finite one
 *    must be TF_ERR_NOT_FINITE), and a failed one leaves *logits NULL. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tensorframe/tensorframe.h>

#include "llm_model.h"
#include "sampler.h"
#include "tokenizer.h"

static tf_device *cpu;
static char in_path[64];

static void fail(const char *why) {
    fprintf(stderr, "oracle: %s (%s | %s)\n", why, llm_error(), tf_last_error());
    abort();
}

static void write_input(const uint8_t *data, size_t n) {
    static int fd = -1;
    if (fd < 0) {
        fd = memfd_create("tf-fuzz-model", 0);
        if (fd < 0) abort();
        snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", fd);
        tf_device_get("cpu", &cpu);
    }
    if (ftruncate(fd, 0) || pwrite(fd, data, n, 0) != (ssize_t)n) abort();
}

static void expect_refusal(tf_status s, const void *out) {
    if (s >= 0) fail("a failed load returned a non-error status");
    if (!*llm_error()) fail("a failed load left no message");
    if (out) fail("a failed load left its output set");
}

/* Prompts that reach the control tokens, the digit split, contractions,
 * spaces before a word and invalid UTF-8. */
static const char *const prompts[] = {
    "<|im_start|>user\nWhat's 12+345?<|im_end|>\n<|im_start|>assistant\n",
    "hello  the\tllo \xff\xfe world 1\xe2\x82\xac",
    "",
};

/* Tokens of the first prompt (at most 6), checked against the vocabulary. */
static int64_t tokenize_all(const llm_tokenizer *tok, int32_t *first, int64_t cap) {
    int64_t kept = 0;
    for (size_t p = 0; p < sizeof prompts / sizeof *prompts; p++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        tf_status s = llm_tokenize(tok, prompts[p], strlen(prompts[p]), true, p == 0, &ids, &n);
        if (s != TF_OK) {
            if (s >= 0 || ids) fail("a failed tokenize broke the contract");
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= llm_vocab_size(tok)) fail("a token id lies outside the vocabulary");
            if (p == 0 && kept < cap) first[kept++] = ids[i];
        }
        free(ids);
    }
    volatile unsigned char sum = 0;
    for (int32_t id = 0; id < llm_vocab_size(tok) && id < 4096; id++) {
        size_t len;
        const char *bytes = llm_token_bytes(tok, id, &len);
        for (size_t k = 0; k < len; k++) sum ^= (unsigned char)bytes[k];
        (void)llm_token_is_end(tok, id);
    }
    return kept;
}

static void check_logits(tf_status s, tf_tensor *logits, int64_t n_vocab) {
    if (s != TF_OK) {
        if (s >= 0 || !*llm_error() || logits) fail("a failed forward broke the contract");
        return;
    }
    int64_t n = tf_tensor_numel(logits);
    if (n % n_vocab) fail("logits are not whole rows of the vocabulary");
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) abort();
    if (tf_tensor_read(logits, v, (size_t)n * sizeof *v) != TF_OK) fail("logits do not read back");
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) fail("a forward pass succeeded with non-finite logits");
    llm_sampler greedy = {.temperature = 0};
    if (llm_sample(&greedy, v + n - n_vocab, n_vocab) < 0) fail("no token to sample from finite logits");
    free(v);
    tf_tensor_release(logits);
}

static void run_model(const tf_gguf *f, const int32_t *ids, int64_t n_ids) {
    llm_model *m = (llm_model *)1;
    tf_status s = llm_model_load(f, cpu, LLM_WEIGHTS_AS_STORED, &m);
    if (s != TF_OK) return expect_refusal(s, m);
    llm_cache *kv = NULL;
    if (llm_cache_new(m, 8, &kv) == TF_OK) {
        int32_t zero = 0;
        if (n_ids == 0) ids = &zero, n_ids = 1;
        tf_tensor *logits = (tf_tensor *)1;
        s = llm_forward(m, kv, ids, n_ids, true, &logits);
        check_logits(s, logits, m->cfg.n_vocab);
        if (s == TF_OK) {                        /* one decode step after the prompt */
            int32_t next = (int32_t)(m->cfg.n_vocab - 1);
            logits = (tf_tensor *)1;
            s = llm_forward(m, kv, &next, 1, false, &logits);
            check_logits(s, logits, m->cfg.n_vocab);
        }
        llm_cache_free(kv);
    }
    llm_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    tf_gguf *f = NULL;
    if (tf_gguf_open(in_path, &f) != TF_OK) return 0;      /* the header's fuzzer checks that contract */
    llm_tokenizer *tok = (llm_tokenizer *)1;
    int32_t ids[6];
    int64_t n_ids = 0;
    tf_status s = llm_tokenizer_load(f, &tok);
    if (s != TF_OK) {
        expect_refusal(s, tok);
    } else {
        n_ids = tokenize_all(tok, ids, 6);
        llm_tokenizer_free(tok);
    }
    run_model(f, ids, n_ids);
    tf_gguf_close(f);
    return 0;
}
