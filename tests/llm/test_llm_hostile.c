/* The model library (src/model) against hostile model files: a tiny llama written by
 * tiny_llama.c, then spoiled one way at a time. A spoiled file is refused
 * at load with a message naming what is wrong, or (weights the loader does
 * not read one by one) its forward pass fails with TF_ERR_NOT_FINITE;
 * nothing crashes, nothing runs on garbage. The unspoiled file loads and
 * gives finite logits, so each refusal is the spoiling's doing. */
#define _GNU_SOURCE                          /* memfd_create */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../unit/helpers.h"
#include "llm_model.h"
#include "tiny_llama.h"
#include "tokenizer.h"
#include "encoder.h"

/* The builder's file, opened. Files live in a memfd: nothing on disk. */
static tf_gguf *open_built(const gguf_builder *b) {
    size_t n;
    unsigned char *bytes = gb_bytes(b, &n);
    int fd = memfd_create("tiny-llama", 0);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    free(bytes);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    tf_gguf *f = NULL;
    OK(tf_gguf_open(path, &f));
    close(fd);                                  /* the mapping keeps the bytes */
    return f;
}

static tf_gguf *tiny(const tiny_llama_opts *o) {
    gguf_builder *b = gb_new();
    tiny_llama(b, o);
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

/* Load must fail with `code` and an llm_error() containing `text`. */
static void expect_model_refused(tf_gguf *f, tf_status code, const char *text) {
    llm_model *m = (llm_model *)1;
    tf_status s = llm_model_load(f, cpu_device(), LLM_WEIGHTS_AS_STORED, &m);
    if (s != code || !strstr(llm_error(), text))
        fail_msg("llm_model_load returned %s (%s), expected %s mentioning '%s'", tf_status_name(s), llm_error(),
                 tf_status_name(code), text);
    assert_null(m);
    tf_gguf_close(f);
}

static void expect_tokenizer_refused(tf_gguf *f, const char *text) {
    llm_tokenizer *t = (llm_tokenizer *)1;
    tf_status s = llm_tokenizer_load(f, &t);
    if (s != TF_ERR_FORMAT || !strstr(llm_error(), text))
        fail_msg("llm_tokenizer_load returned %s (%s), expected TF_ERR_FORMAT mentioning '%s'", tf_status_name(s),
                 llm_error(), text);
    assert_null(t);
    tf_gguf_close(f);
}

/* ---- the unspoiled file works ---- */

static void test_tiny_model_runs(void **state) {
    tf_gguf *f = tiny(NULL);
    llm_tokenizer *tok = NULL;
    llm_model *m = NULL;
    llm_cache *kv = NULL;
    OK(llm_tokenizer_load(f, &tok));
    OK(llm_model_load(f, cpu_device(), LLM_WEIGHTS_AS_STORED, &m));
    OK(llm_cache_new(m, 16, &kv));
    int32_t *ids;
    int64_t n;
    OK(llm_tokenize(tok, "<|im_start|>hello the", 21, false, true, &ids, &n));
    assert_int_equal(ids[0], 1);
    tf_tensor *logits = NULL;
    OK(llm_forward(m, kv, ids, n, true, &logits));
    float row[TINY_VOCAB * 8];
    assert_true(n <= 8);
    OK(tf_tensor_read(logits, row, (size_t)n * TINY_VOCAB * sizeof(float)));
    for (int64_t i = 0; i < n * TINY_VOCAB; i++) assert_true(isfinite(row[i]));
    tf_tensor_release(logits);
    free(ids);
    llm_cache_free(kv);
    llm_model_free(m);
    llm_tokenizer_free(tok);
    tf_gguf_close(f);
}

/* ---- the tokenizer ---- */

/* Three invalid UTF-8 bytes decode to three U+FFFD (9 bytes from 3): the
 * buffer once held len + 1 and the heap broke. */
static void test_invalid_utf8_token_decodes_to_replacements(void **state) {
    tf_gguf *f = tiny(&(tiny_llama_opts){.bad_utf8_token = true});
    llm_tokenizer *tok = NULL;
    OK(llm_tokenizer_load(f, &tok));
    size_t len;
    const char *bytes = llm_token_bytes(tok, TINY_VOCAB - 1, &len);
    assert_int_equal(len, 9);
    assert_memory_equal(bytes, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9);
    llm_tokenizer_free(tok);
    tf_gguf_close(f);
}

static tf_gguf *with_token_key(const char *key, int type, uint64_t value) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){key, NULL}});
    if (type == GB_T_U64) gb_u64(b, key, value);
    else if (type == GB_T_I32) gb_i32(b, key, (int32_t)value);
    else if (type == GB_T_F32) gb_f32(b, key, (float)value);
    else gb_string(b, key, "1", 1);
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

/* 2^32 + 1 once became 1 by a cast before its range check. */
static void test_special_ids_checked_before_narrowing(void **state) {
    const uint64_t wide = ((uint64_t)1 << 32) + 1;
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.bos_token_id", GB_T_U64, wide), "bos_token_id is 4294967297");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.eos_token_id", GB_T_U64, wide), "eos_token_id is 4294967297");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.bos_token_id", GB_T_I32, (uint64_t)-5), "bos_token_id is -5");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.eos_token_id", GB_T_U64, TINY_VOCAB), "outside [0, 263]");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.bos_token_id", GB_T_F32, 1), "not an integer");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.bos_token_id", GB_T_STRING, 1), "not an integer");
    expect_tokenizer_refused(with_token_key("tokenizer.ggml.add_bos_token", GB_T_U64, 7), "add_bos_token is 7");
}

static void test_token_types_checked(void **state) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){"tokenizer.ggml.token_type", NULL}});
    int32_t types[TINY_VOCAB];
    for (int i = 0; i < TINY_VOCAB; i++) types[i] = i < TINY_SPECIALS ? 3 : 1;
    types[100] = 1000;
    gb_scalar_array(b, "tokenizer.ggml.token_type", GB_T_I32, TINY_VOCAB, types, sizeof *types);
    tf_gguf *f = open_built(b);
    gb_free(b);
    expect_tokenizer_refused(f, "token 100 has type 1000");
}

/* ---- the model's metadata ---- */

static tf_gguf *with_float_key(const char *key, double value, bool as_f64) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){key, NULL}});
    if (as_f64) gb_f64(b, key, value);
    else gb_f32(b, key, (float)value);
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

/* The tiny llama with `key` (written as u32) set to value. */
static tf_gguf *with_u32_key(const char *key, uint32_t value) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){key, NULL}});
    gb_u32(b, key, value);
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

/* The tiny llama with a rope_freqs.weight of n values, every one `fill`. */
static tf_gguf *with_rope_freqs(int n, float fill) {
    gguf_builder *b = gb_new();
    tiny_llama(b, NULL);
    float v[4] = {fill, fill, fill, fill};
    gb_tensor(b, "rope_freqs.weight", GB_F32, 1, (int64_t[]){n}, v, (size_t)n * sizeof(float));
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

static void test_float_metadata_in_range(void **state) {
    const char *eps = "llama.attention.layer_norm_rms_epsilon", *base = "llama.rope.freq_base";
    const double bad_eps[] = {INFINITY, 1e38, NAN, 0.0, -1e-5, 0.5}, bad_base[] = {INFINITY, 1e38, NAN, 0.0, 0.5, -1e4};
    for (size_t i = 0; i < sizeof bad_eps / sizeof *bad_eps; i++) {
        expect_model_refused(with_float_key(eps, bad_eps[i], false), TF_ERR_FORMAT, "layer_norm_rms_epsilon is");
        expect_model_refused(with_float_key(base, bad_base[i], i % 2), TF_ERR_FORMAT, "rope.freq_base is");
    }
    /* in range, as f64: loads */
    tf_gguf *f = with_float_key(base, 5e5, true);
    llm_model *m = NULL;
    OK(llm_model_load(f, cpu_device(), LLM_WEIGHTS_AS_STORED, &m));
    assert_true(m->cfg.rope_base == 5e5);
    llm_model_free(m);
    tf_gguf_close(f);
    /* a count as a string, a float or a bool */
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){"llama.block_count", "llama.rope.freq_base", NULL}});
    gb_bool(b, "llama.block_count", true);
    gb_u32(b, "llama.rope.freq_base", 10000);
    f = open_built(b);
    gb_free(b);
    expect_model_refused(f, TF_ERR_FORMAT, "block_count is not an integer");
    f = with_float_key("llama.block_count", 2.0, false);
    expect_model_refused(f, TF_ERR_FORMAT, "block_count is not an integer");
    /* a count of blocks the file's tensors cannot hold: refused before a
     * table of 16 million layers is allocated (found by fuzz_model) */
    expect_model_refused(with_u32_key("llama.block_count", 16776971), TF_ERR_FORMAT,
                         "block_count is 16776971 but the file holds 20 tensors");
    /* fewer blocks than the file holds: another model than the file's (the
     * probe ran SmolLM2 on 1 of its 30 blocks) */
    expect_model_refused(with_u32_key("llama.block_count", 1), TF_ERR_FORMAT,
                         "holds blk.1.attn_norm.weight, which a llama model of 1 blocks does not use");
    expect_model_refused(with_u32_key("llama.vocab_size", TINY_VOCAB + 1), TF_ERR_FORMAT,
                         "vocab_size is 265 but token_embd.weight has 264 rows");
    /* Llama 3.1's RoPE divisors: one per rotated pair, positive */
    expect_model_refused(with_rope_freqs(3, 1.0f), TF_ERR_SHAPE, "rope_freqs.weight has an unexpected shape");
    expect_model_refused(with_rope_freqs(2, -1.0f), TF_ERR_FORMAT, "divisors are positive");
    expect_model_refused(with_rope_freqs(2, NAN), TF_ERR_FORMAT, "rope_freqs.weight holds nan");
    f = with_rope_freqs(2, 2.0f);
    m = NULL;
    OK(llm_model_load(f, cpu_device(), LLM_WEIGHTS_AS_STORED, &m));
    assert_true(m->rope_factors && m->rope_factors[1] == 2.0f);
    llm_model_free(m);
    tf_gguf_close(f);
}

/* ---- the families' metadata ---- */

static tf_gguf *with_string_key(const char *key, const char *value) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){key, NULL}});
    gb_string(b, key, value, strlen(value));
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

static void test_family_metadata_checked(void **state) {
    (void)state;
    expect_model_refused(with_string_key("general.architecture", "mamba"), TF_ERR_UNSUPPORTED,
                         "architecture 'mamba' is not one the library runs (llama, qwen2");
    /* a file that names another family than its keys: gemma2's are absent */
    expect_model_refused(with_string_key("general.architecture", "gemma2"), TF_ERR_FORMAT, "has no gemma2.block_count");
    /* RoPE scaling the library cannot run is refused by name */
    gguf_builder *b = gb_new();
    tiny_llama(b, NULL);
    gb_string(b, "llama.rope.scaling.type", "yarn", 4);
    gb_f32(b, "llama.rope.scaling.factor", 4.0f);
    tf_gguf *f = open_built(b);
    gb_free(b);
    expect_model_refused(f, TF_ERR_UNSUPPORTED, "RoPE scaling 'yarn' (factor 4) is not supported");
    expect_model_refused(with_float_key("llama.rope.scaling.factor", NAN, false), TF_ERR_FORMAT, "scaling.factor is");
    /* head sizes: a key length that is 0, or that the matrices do not have */
    expect_model_refused(with_u32_key("llama.attention.key_length", 0), TF_ERR_FORMAT, "key_length is not a usable count");
    expect_model_refused(with_u32_key("llama.attention.key_length", 8), TF_ERR_SHAPE, "unexpected shape");
    expect_model_refused(with_u32_key("llama.attention.value_length", 2), TF_ERR_UNSUPPORTED, "value heads of 2 differ");
    expect_model_refused(with_u32_key("llama.rope.dimension_count", 5), TF_ERR_FORMAT, "does not fit head size");
}

/* SentencePiece vocabularies: scores present, one per token, finite. */
static tf_gguf *spm_vocab(int n_scores, float fill) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){"tokenizer.ggml.model", "tokenizer.ggml.merges", NULL}});
    gb_string(b, "tokenizer.ggml.model", "llama", 5);
    float *scores = malloc((size_t)(n_scores > 0 ? n_scores : 1) * sizeof *scores);
    for (int i = 0; i < n_scores; i++) scores[i] = i == n_scores / 2 ? fill : -(float)i;
    if (n_scores >= 0) gb_scalar_array(b, "tokenizer.ggml.scores", GB_T_F32, n_scores, scores, sizeof *scores);
    free(scores);
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

/* A tiny bert GGUF (width 8, 2 heads, 1 block, 10 tokens); `skip` names a
 * tensor to leave out, `wide_down` gives ffn_down the wrong width. */
static tf_gguf *tiny_bert(const char *skip, bool wide_down, int64_t heads) {
    gguf_builder *b = gb_new();
    gb_string(b, "general.architecture", "bert", 4);
    gb_u32(b, "bert.block_count", 1);
    gb_u32(b, "bert.embedding_length", 8);
    gb_u32(b, "bert.attention.head_count", (uint32_t)heads);
    static float zeros[16 * 16];
    const struct { const char *name; int64_t rows, cols; } t[] = {
        {"token_embd.weight", 10, 8}, {"position_embd.weight", 16, 8}, {"token_types.weight", 2, 8},
        {"token_embd_norm.weight", 0, 8}, {"token_embd_norm.bias", 0, 8},
        {"blk.0.attn_q.weight", 8, 8}, {"blk.0.attn_q.bias", 0, 8}, {"blk.0.attn_k.weight", 8, 8},
        {"blk.0.attn_k.bias", 0, 8}, {"blk.0.attn_v.weight", 8, 8}, {"blk.0.attn_v.bias", 0, 8},
        {"blk.0.attn_output.weight", 8, 8}, {"blk.0.attn_output.bias", 0, 8},
        {"blk.0.attn_output_norm.weight", 0, 8}, {"blk.0.attn_output_norm.bias", 0, 8},
        {"blk.0.ffn_up.weight", 16, 8}, {"blk.0.ffn_up.bias", 0, 16},
        {"blk.0.ffn_down.weight", 8, wide_down ? 12 : 16}, {"blk.0.ffn_down.bias", 0, 8},
        {"blk.0.layer_output_norm.weight", 0, 8}, {"blk.0.layer_output_norm.bias", 0, 8}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (skip && !strcmp(skip, t[i].name)) continue;
        int64_t shape[2] = {t[i].rows, t[i].cols};
        int nd = t[i].rows ? 2 : 1;
        gb_tensor(b, t[i].name, GB_F32, nd, nd == 2 ? shape : shape + 1, zeros,
                  (size_t)(t[i].rows ? t[i].rows : 1) * (size_t)t[i].cols * sizeof(float));
    }
    tf_gguf *f = open_built(b);
    gb_free(b);
    return f;
}

static void expect_encoder_refused(tf_gguf *f, tf_status code, const char *text) {
    llm_encoder *e = (llm_encoder *)1;
    tf_status s = llm_encoder_load_gguf(f, cpu_device(), TF_DTYPE_COUNT, &e);
    if (s != code || !strstr(llm_error(), text))
        fail_msg("llm_encoder_load_gguf returned %s (%s), expected %s mentioning '%s'", tf_status_name(s), llm_error(),
                 tf_status_name(code), text);
    assert_null(e);
    tf_gguf_close(f);
}

static void test_bert_files_checked(void **state) {
    (void)state;
    tf_gguf *f = tiny_bert(NULL, false, 2);
    llm_encoder *e = NULL;
    OK(llm_encoder_load_gguf(f, cpu_device(), TF_DTYPE_COUNT, &e));
    int32_t ids[3] = {1, 2, 3};
    int64_t len = 3;
    tf_tensor *out = NULL;
    OK(llm_encoder_forward(e, 1, 3, ids, &len, LLM_POOL_MEAN, true, &out));
    tf_tensor_release(out);
    ids[1] = 10;                                  /* a token outside the vocabulary */
    assert_int_equal(llm_encoder_forward(e, 1, 3, ids, &len, LLM_POOL_MEAN, true, &out), TF_ERR_INDEX);
    len = 17;                                     /* more positions than the model has */
    assert_int_equal(llm_encoder_forward(e, 1, 17, ids, &len, LLM_POOL_MEAN, true, &out), TF_ERR_SHAPE);
    llm_encoder_free(e);
    tf_gguf_close(f);
    expect_encoder_refused(tiny_bert("blk.0.ffn_up.bias", false, 2), TF_ERR_FORMAT, "blk.0.ffn_up.bias");
    expect_encoder_refused(tiny_bert(NULL, true, 2), TF_ERR_SHAPE, "shapes do not match width 8");
    expect_encoder_refused(tiny_bert(NULL, false, 3), TF_ERR_FORMAT, "heads do not divide the width");
}

static void test_sentencepiece_metadata_checked(void **state) {
    (void)state;
    /* add_eos_token: EOS last when special tokens are added, and only then */
    gguf_builder *eb = gb_new();
    tiny_llama(eb, NULL);
    gb_bool(eb, "tokenizer.ggml.add_eos_token", true);
    tf_gguf *ef = open_built(eb);
    gb_free(eb);
    llm_tokenizer *et = NULL;
    OK(llm_tokenizer_load(ef, &et));
    int32_t *eids = NULL;
    int64_t en = 0;
    OK(llm_tokenize_special(et, "hi", 2, true, true, &eids, &en));
    assert_true(en >= 2 && eids[en - 1] == 2);     /* the tiny vocabulary's EOS is id 2 */
    free(eids);
    OK(llm_tokenize_special(et, "hi", 2, false, true, &eids, &en));
    assert_true(en >= 1 && eids[en - 1] != 2);
    free(eids);
    llm_tokenizer_free(et);
    tf_gguf_close(ef);
    expect_tokenizer_refused(spm_vocab(-1, 0), "has no tokenizer.ggml.scores");
    expect_tokenizer_refused(spm_vocab(TINY_VOCAB - 1, 0), "263 scores for 264 tokens");
    expect_tokenizer_refused(spm_vocab(TINY_VOCAB, NAN), "score 132 is not a finite number");
    expect_tokenizer_refused(spm_vocab(TINY_VOCAB, INFINITY), "score 132 is not a finite number");
    tf_gguf *f = spm_vocab(TINY_VOCAB, 0);      /* well formed: loads, and tokenizes through byte fallback */
    llm_tokenizer *t = NULL;
    OK(llm_tokenizer_load(f, &t));
    int32_t *ids = NULL;
    int64_t n = 0;
    OK(llm_tokenize(t, "h\xff\xe2\x82", 4, true, true, &ids, &n));
    assert_true(n >= 2);
    free(ids);
    llm_tokenizer_free(t);
    tf_gguf_close(f);
}

/* ---- the weights ---- */

static void test_non_finite_norms_refused(void **state) {
    const float nan_value = NAN, inf_value = -INFINITY;
    expect_model_refused(tiny(&(tiny_llama_opts){.norm_fill = &nan_value}), TF_ERR_FORMAT, "holds nan at element 0");
    expect_model_refused(tiny(&(tiny_llama_opts){.norm_fill = &inf_value}), TF_ERR_FORMAT, "holds -inf at element 0");
}

static void test_integer_weights_refused(void **state) {
    expect_model_refused(tiny(&(tiny_llama_opts){.matrix_type = GB_I32}), TF_ERR_DTYPE, "token_embd.weight is stored as I32");
    expect_model_refused(tiny(&(tiny_llama_opts){.matrix_type = GB_I8}), TF_ERR_DTYPE, "stored as I8");
}

/* An infinity in an embedding row reaches the logits: the forward pass
 * fails instead of handing NaN to a sampler; other tokens still run. */
static void test_non_finite_logits_are_an_error(void **state) {
    gguf_builder *b = gb_new();
    tiny_llama(b, &(tiny_llama_opts){.omit = (const char *[]){"token_embd.weight", NULL}});
    float embd[TINY_VOCAB * TINY_EMBD];
    for (int i = 0; i < TINY_VOCAB * TINY_EMBD; i++) embd[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    gb_tensor(b, "output.weight", GB_F32, 2, (int64_t[]){TINY_VOCAB, TINY_EMBD}, embd, sizeof embd);   /* untied */
    embd[5 * TINY_EMBD + 3] = INFINITY;                               /* token 5's input row */
    gb_tensor(b, "token_embd.weight", GB_F32, 2, (int64_t[]){TINY_VOCAB, TINY_EMBD}, embd, sizeof embd);
    tf_gguf *f = open_built(b);
    gb_free(b);
    llm_model *m = NULL;
    llm_cache *kv = NULL;
    OK(llm_model_load(f, cpu_device(), TF_F32, &m));
    OK(llm_cache_new(m, 8, &kv));
    tf_tensor *logits = (tf_tensor *)1;
    tf_status s = llm_forward(m, kv, (int32_t[]){5}, 1, false, &logits);
    if (s != TF_ERR_NOT_FINITE || !strstr(llm_error(), "NaN or infinity"))
        fail_msg("forward returned %s (%s)", tf_status_name(s), llm_error());
    assert_null(logits);
    assert_int_equal(kv->n_past, 0);
    OK(llm_forward(m, kv, (int32_t[]){6, 7}, 2, false, &logits));
    tf_tensor_release(logits);
    llm_cache_free(kv);
    llm_model_free(m);
    tf_gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_model_runs),
        cmocka_unit_test(test_invalid_utf8_token_decodes_to_replacements),
        cmocka_unit_test(test_special_ids_checked_before_narrowing),
        cmocka_unit_test(test_token_types_checked),
        cmocka_unit_test(test_float_metadata_in_range),
        cmocka_unit_test(test_non_finite_norms_refused),
        cmocka_unit_test(test_integer_weights_refused),
        cmocka_unit_test(test_non_finite_logits_are_an_error),
        cmocka_unit_test(test_family_metadata_checked),
        cmocka_unit_test(test_sentencepiece_metadata_checked),
        cmocka_unit_test(test_bert_files_checked),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
