/* Seeds for fuzz_model, written at fuzz time into a scratch folder (nothing
 * derived from a downloaded model is committed):
 *   tiny.gguf, tiny-f16.gguf, tiny-untied.gguf
 *                              the tiny llama of tests/llm (a forward pass
 *                              runs on them; the last with output.weight
 *                              and llama.vocab_size);
 * and, given a real model (SmolLM2 from scripts/fetch-models.sh):
 *   real-metadata.gguf         every key of the real file with its value,
 *                              the vocabulary cut to its first N tokens and
 *                              the merges among them; no tensors;
 *   real-tokenizer.gguf        the same tokenizer keys over the tiny
 *                              llama's weights (N rows of embeddings), so
 *                              the fuzzer starts from a real vocabulary,
 *                              template and special ids that run.
 * usage: make_model_seeds OUT_DIR [REAL.gguf [N]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

#include "gguf_builder.h"
#include "tiny_llama.h"

static int write_seed(const gguf_builder *b, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gb_write(b, path)) {
        fprintf(stderr, "make_model_seeds: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* ---- copying keys from a real file ---- */

typedef struct kept_tokens {
    const char **text;
    size_t *len;
    int64_t n;
} kept_tokens;

static bool is_kept(const kept_tokens *k, const char *s, size_t n) {
    for (int64_t i = 0; i < k->n; i++)
        if (k->len[i] == n && !memcmp(k->text[i], s, n)) return true;
    return false;
}

/* A merge "a b" whose two sides and whose result are all kept tokens. */
static bool merge_kept(const kept_tokens *k, const char *s, size_t n) {
    const char *space = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
    if (!space || n > 512) return false;
    size_t left = (size_t)(space - s);
    char joined[512];
    memcpy(joined, s, left);
    memcpy(joined + left, space + 1, n - left - 1);
    return is_kept(k, s, left) && is_kept(k, space + 1, n - left - 1) && is_kept(k, joined, n - 1);
}

static size_t value_size(tf_gguf_type t) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t >= 0 && t <= TF_GGUF_F64 ? sizes[t] : 0;
}

/* One scalar element as its type's bytes. */
static void element_bytes(const tf_gguf *f, int64_t key, int64_t e, tf_gguf_type t, unsigned char *out) {
    int64_t iv = 0;
    double dv = 0;
    if (t == TF_GGUF_F32 || t == TF_GGUF_F64) {
        tf_gguf_get_float(f, key, e, &dv);
        if (t == TF_GGUF_F32) {
            float v = (float)dv;
            memcpy(out, &v, 4);
        } else {
            memcpy(out, &dv, 8);
        }
        return;
    }
    tf_gguf_get_int(f, key, e, &iv);
    memcpy(out, &iv, value_size(t));                   /* little-endian: the low bytes */
}

/* Copies key `key`; the token arrays keep their first kept->n entries, the
 * merges only those among the kept tokens. */
static void copy_key(gguf_builder *b, const tf_gguf *f, int64_t key, const kept_tokens *kept) {
    const char *name = tf_gguf_key(f, key);
    tf_gguf_type type = tf_gguf_key_type(f, key);
    if (type == TF_GGUF_STRING) {
        const char *s;
        size_t n;
        tf_gguf_get_string(f, key, 0, &s, &n);
        gb_string(b, name, s, n);
        return;
    }
    unsigned char bytes[8];
    if (type != TF_GGUF_ARRAY) {
        element_bytes(f, key, 0, type, bytes);
        gb_scalar(b, name, type, bytes, value_size(type));
        return;
    }
    tf_gguf_type elem = tf_gguf_array_type(f, key);
    int64_t n = tf_gguf_array_length(f, key);
    bool tokens = !strcmp(name, "tokenizer.ggml.tokens") || !strcmp(name, "tokenizer.ggml.token_type") ||
                  !strcmp(name, "tokenizer.ggml.scores");
    if (tokens && n > kept->n) n = kept->n;
    if (elem == TF_GGUF_STRING) {
        const char **strs = malloc((size_t)(n ? n : 1) * sizeof *strs);
        size_t *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
        if (!strs || !lens) abort();
        int64_t out = 0;
        bool merges = !strcmp(name, "tokenizer.ggml.merges");
        for (int64_t e = 0; e < n; e++) {
            tf_gguf_get_string(f, key, e, &strs[out], &lens[out]);
            if (!merges || merge_kept(kept, strs[out], lens[out])) out++;
        }
        gb_string_array(b, name, out, strs, lens);
        free(strs);
        free(lens);
        return;
    }
    size_t es = value_size(elem);
    unsigned char *values = malloc((size_t)(n ? n : 1) * (es ? es : 1));
    if (!values) abort();
    for (int64_t e = 0; e < n; e++) element_bytes(f, key, e, elem, values + (size_t)e * es);
    gb_scalar_array(b, name, elem, n, values, es);
    free(values);
}

/* The first n tokens of the real vocabulary. */
static kept_tokens keep_tokens(const tf_gguf *f, int64_t n) {
    kept_tokens k = {0};
    int64_t key = tf_gguf_find_key(f, "tokenizer.ggml.tokens");
    int64_t have = key >= 0 ? tf_gguf_array_length(f, key) : 0;
    k.n = have < n ? (have > 0 ? have : 0) : n;
    k.text = malloc((size_t)(k.n ? k.n : 1) * sizeof *k.text);
    k.len = malloc((size_t)(k.n ? k.n : 1) * sizeof *k.len);
    if (!k.text || !k.len) abort();
    for (int64_t i = 0; i < k.n; i++) tf_gguf_get_string(f, key, i, &k.text[i], &k.len[i]);
    return k;
}

static int real_seeds(const char *dir, const char *path, int64_t n_tokens) {
    tf_gguf *f = NULL;
    if (tf_gguf_open(path, &f) != TF_OK) {
        fprintf(stderr, "make_model_seeds: %s: %s\n", path, tf_last_error());
        return 1;
    }
    kept_tokens kept = keep_tokens(f, n_tokens);
    gguf_builder *all = gb_new(), *tok = gb_new();
    for (int64_t i = 0; i < tf_gguf_key_count(f); i++) {
        const char *name = tf_gguf_key(f, i);
        if (!strcmp(name, "general.alignment")) continue;       /* the builder writes 32-byte alignment */
        copy_key(all, f, i, &kept);
        if (!strncmp(name, "tokenizer.", 10)) copy_key(tok, f, i, &kept);
    }
    tiny_llama(tok, &(tiny_llama_opts){.no_tokenizer = true, .n_vocab = (int)kept.n});
    int rc = write_seed(all, dir, "real-metadata.gguf") | write_seed(tok, dir, "real-tokenizer.gguf");
    printf("make_model_seeds: the metadata of %s with its first %lld tokens\n", path, (long long)kept.n);
    gb_free(all);
    gb_free(tok);
    free(kept.text);
    free(kept.len);
    tf_gguf_close(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: make_model_seeds OUT_DIR [REAL.gguf [N_TOKENS]]\n");
        return 2;
    }
    int rc = 0;
    gguf_builder *b = gb_new();
    tiny_llama(b, NULL);
    rc |= write_seed(b, argv[1], "tiny.gguf");
    gb_free(b);
    b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.matrix_type = GB_F16, .seed = 7});
    rc |= write_seed(b, argv[1], "tiny-f16.gguf");
    gb_free(b);
    b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.untied_output = true, .seed = 9});
    rc |= write_seed(b, argv[1], "tiny-untied.gguf");
    gb_free(b);
    /* SentencePiece's tokenizer (scores instead of merges) */
    b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){"tokenizer.ggml.model", "tokenizer.ggml.merges", NULL},
                                     .seed = 11});
    gb_string(b, "tokenizer.ggml.model", "llama", 5);
    float scores[TINY_VOCAB];
    for (int i = 0; i < TINY_VOCAB; i++) scores[i] = -(float)i;
    gb_scalar_array(b, "tokenizer.ggml.scores", GB_T_F32, TINY_VOCAB, scores, sizeof scores[0]);
    rc |= write_seed(b, argv[1], "tiny-spm.gguf");
    gb_free(b);
    /* scaled RoPE: Llama 3.1's divisors and a linear factor (the table path) */
    b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.seed = 13});
    gb_tensor(b, "rope_freqs.weight", GB_F32, 1, (int64_t[]){2}, (float[]){1.0f, 4.0f}, 2 * sizeof(float));
    gb_string(b, "llama.rope.scaling.type", "linear", 6);
    gb_f32(b, "llama.rope.scaling.factor", 2.0f);
    rc |= write_seed(b, argv[1], "tiny-rope-scaled.gguf");
    gb_free(b);
    if (argc > 2) rc |= real_seeds(argv[1], argv[2], argc > 3 ? atoll(argv[3]) : 400);
    tf_shutdown();
    return rc;
}
