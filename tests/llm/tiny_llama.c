/* See tiny_llama.h. */
#include "tiny_llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool omitted(const tiny_llama_opts *o, const char *name) {
    for (const char *const *k = o->omit; k && *k; k++)
        if (!strcmp(*k, name)) return true;
    return false;
}

/* ---- keys ---- */

static void config(gguf_builder *b, const tiny_llama_opts *o) {
    static const struct { const char *key; uint32_t value; } counts[] = {
        {"llama.block_count", TINY_LAYERS},       {"llama.context_length", 64},
        {"llama.embedding_length", TINY_EMBD},    {"llama.feed_forward_length", TINY_FF},
        {"llama.attention.head_count", TINY_HEADS}, {"llama.attention.head_count_kv", TINY_KV_HEADS},
        {"llama.rope.dimension_count", TINY_EMBD / TINY_HEADS},
    };
    if (!omitted(o, "general.architecture")) gb_string(b, "general.architecture", "llama", 5);
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
        if (!omitted(o, counts[i].key)) gb_u32(b, counts[i].key, counts[i].value);
    if (!omitted(o, "llama.rope.freq_base")) gb_f32(b, "llama.rope.freq_base", 10000.0f);
    if (!omitted(o, "llama.attention.layer_norm_rms_epsilon")) gb_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
}

/* GPT-2's printable spelling of byte b, as UTF-8 (see tokenizer.c). */
static size_t byte_spelling(unsigned b, char out[3]) {
    unsigned cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
        unsigned n = 0;
        for (unsigned c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static void tokenizer(gguf_builder *b, const tiny_llama_opts *o) {
    static const char *const specials[TINY_SPECIALS] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *const merged[5] = {"he", "\xc4\xa0t", "\xc4\xa0the", "ll", "llo"};   /* Ġ is C4 A0 */
    static const char *const merges[5] = {"h e", "\xc4\xa0 t", "\xc4\xa0t he", "l l", "ll o"};
    char bytes[256][3];
    const char *text[TINY_VOCAB];
    size_t lens[TINY_VOCAB];
    int32_t types[TINY_VOCAB];
    int n = 0;
    for (int i = 0; i < TINY_SPECIALS; i++, n++) text[n] = specials[i], lens[n] = strlen(specials[i]), types[n] = 3;
    for (unsigned c = 0; c < 256; c++, n++) text[n] = bytes[c], lens[n] = byte_spelling(c, bytes[c]), types[n] = 1;
    for (int i = 0; i < 5; i++, n++) text[n] = merged[i], lens[n] = strlen(merged[i]), types[n] = 1;
    if (o->bad_utf8_token) text[n - 1] = "\xff\xfe\xfd", lens[n - 1] = 3;
    if (!omitted(o, "tokenizer.ggml.model")) gb_string(b, "tokenizer.ggml.model", "gpt2", 4);
    if (!omitted(o, "tokenizer.ggml.pre")) gb_string(b, "tokenizer.ggml.pre", "smollm", 6);
    if (!omitted(o, "tokenizer.ggml.tokens")) gb_string_array(b, "tokenizer.ggml.tokens", n, text, lens);
    if (!omitted(o, "tokenizer.ggml.token_type"))
        gb_scalar_array(b, "tokenizer.ggml.token_type", GB_T_I32, n, types, sizeof *types);
    if (!omitted(o, "tokenizer.ggml.merges")) gb_string_array(b, "tokenizer.ggml.merges", 5, merges, NULL);
    if (!omitted(o, "tokenizer.ggml.bos_token_id")) gb_u32(b, "tokenizer.ggml.bos_token_id", 1);
    if (!omitted(o, "tokenizer.ggml.eos_token_id")) gb_u32(b, "tokenizer.ggml.eos_token_id", 2);
    if (!omitted(o, "tokenizer.ggml.add_bos_token")) gb_bool(b, "tokenizer.ggml.add_bos_token", false);
    static const char chatml[] = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    if (!omitted(o, "tokenizer.chat_template")) gb_string(b, "tokenizer.chat_template", chatml, sizeof chatml - 1);
}

/* ---- tensors ---- */

static float next_value(unsigned *state) {            /* in [-0.5, 0.5) */
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f - 0.5f;
}

static void tensor(gguf_builder *b, const tiny_llama_opts *o, unsigned *state, const char *name, int64_t rows,
                   int64_t cols) {
    if (omitted(o, name)) return;
    const bool norm = rows == 0;
    int64_t n = norm ? cols : rows * cols;
    int type = norm ? GB_F32 : o->matrix_type;
    size_t es = type == GB_F16 ? 2 : type == GB_I8 ? 1 : 4;
    unsigned char *data = malloc((size_t)n * es);
    if (!data) abort();
    for (int64_t i = 0; i < n; i++) {
        float v = norm ? (o->norm_fill ? *o->norm_fill : 1.0f + 0.2f * next_value(state)) : next_value(state);
        if (type == GB_F16) ((uint16_t *)data)[i] = gb_half(v);
        else if (type == GB_I8) ((int8_t *)data)[i] = (int8_t)(v * 100);
        else if (type == GB_I32) ((int32_t *)data)[i] = (int32_t)(v * 100);
        else ((float *)data)[i] = v;
    }
    gb_tensor(b, name, type, norm ? 1 : 2, norm ? (int64_t[]){cols} : (int64_t[]){rows, cols}, data, (size_t)n * es);
    free(data);
}

void tiny_llama(gguf_builder *b, const tiny_llama_opts *o) {
    static const tiny_llama_opts defaults = {0};
    if (!o) o = &defaults;
    unsigned state = o->seed ? o->seed : 12345u;
    const int64_t e = TINY_EMBD, kv = TINY_KV_HEADS * (TINY_EMBD / TINY_HEADS), vocab = o->n_vocab ? o->n_vocab : TINY_VOCAB;
    config(b, o);
    if (!o->no_tokenizer) tokenizer(b, o);
    tensor(b, o, &state, "token_embd.weight", vocab, e);
    tensor(b, o, &state, "output_norm.weight", 0, e);
    if (o->untied_output) {
        tensor(b, o, &state, "output.weight", vocab, e);
        gb_u32(b, "llama.vocab_size", (uint32_t)vocab);
    }
    for (int l = 0; l < TINY_LAYERS; l++) {
        const struct { const char *suffix; int64_t rows, cols; } parts[] = {
            {"attn_norm.weight", 0, e}, {"attn_q.weight", e, e},      {"attn_k.weight", kv, e},
            {"attn_v.weight", kv, e},   {"attn_output.weight", e, e}, {"ffn_norm.weight", 0, e},
            {"ffn_gate.weight", TINY_FF, e}, {"ffn_up.weight", TINY_FF, e}, {"ffn_down.weight", e, TINY_FF},
        };
        for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, parts[i].suffix);
            tensor(b, o, &state, name, parts[i].rows, parts[i].cols);
        }
    }
}
