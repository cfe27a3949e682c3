#define _POSIX_C_SOURCE 200809L   /* strdup */
/* The public model API (include/tensorframe/model.h) over the library's
 * internal pieces: llm_model (weights, forward), llm_tokenizer, llm_sampler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/model.h>

#include "chat.h"
#include "encoder.h"
#include "llm_model.h"
#include "sampler.h"
#include "tokenizer.h"
#include "wordpiece.h"

struct tf_model {
    tf_gguf *file;              /* open while loading; closed after (nothing points into its mapping) */
    llm_model *llm;             /* a decoder, or */
    llm_encoder *enc;           /* an encoder (BERT) */
    llm_tokenizer *tok;         /* a decoder's tokenizer; NULL when the file has none this library reads */
    llm_wordpiece *wp;          /* an encoder's */
    char *tokenizer_error;      /* why, when it is NULL */
    char *chat_template, *name;
    uint64_t weight_bytes;
    int64_t n_first;            /* layers on the first device */
};

struct tf_model_context {
    const tf_model *model;
    llm_cache *kv;
};

struct tf_sampler {
    llm_sampler s;
};

const char *tf_model_last_error(void) { return llm_error(); }

tf_model_params tf_model_default_params(void) {
    return (tf_model_params){.device = "auto", .weights = TF_DTYPE_COUNT, .n_ctx = 0, .n_seq = 1};
}

/* A string key as a NUL-terminated copy, or NULL when absent or not a string. */
static char *string_key(const tf_gguf *f, const char *key) {
    int64_t k = tf_gguf_find_key(f, key);
    const char *s;
    size_t len;
    if (k < 0 || tf_gguf_get_string(f, k, 0, &s, &len) != TF_OK) return NULL;
    char *copy = malloc(len + 1);
    if (copy) {
        memcpy(copy, s, len);
        copy[len] = 0;
    }
    return copy;
}

/* The bytes a tensor takes on a device: as stored, or (a matrix) decoded to `dtype`. */
static uint64_t tensor_bytes(const tf_gguf_tensor *info, tf_dtype dtype) {
    if (dtype == TF_DTYPE_COUNT || info->ndim == 1) return info->nbytes;
    uint64_t n = 1;
    for (int d = 0; d < info->ndim; d++) n *= (uint64_t)info->shape[d];
    return n * tf_dtype_size(dtype);
}

static uint64_t kv_bytes(const llm_config *c, int64_t n_ctx) {
    return 2ull * (uint64_t)c->n_layer * (uint64_t)n_ctx * (uint64_t)(c->n_head_kv * c->head_dim) * sizeof(float);
}

/* What a load needs: the bytes outside the blocks (embeddings, head) and
 * each block's weights with its share of the KV cache. */
typedef struct footprint {
    uint64_t base, *layer, total, weights;
    int64_t n_ctx;
} footprint;

static tf_status measure(const tf_gguf *f, const llm_config *c, const tf_model_params *p, footprint *fp) {
    fp->n_ctx = p->n_ctx > 0 ? p->n_ctx : (c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
    if (!(fp->layer = calloc((size_t)c->n_layer, sizeof *fp->layer)))
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    uint64_t kv_layer = kv_bytes(c, fp->n_ctx) / (uint64_t)c->n_layer;
    for (int64_t l = 0; l < c->n_layer; l++) fp->layer[l] = kv_layer;
    for (int64_t i = 0; i < tf_gguf_tensor_count(f); i++) {
        tf_gguf_tensor info;
        long long block = -1;
        if (tf_gguf_tensor_info(f, i, &info) != TF_OK) continue;
        uint64_t bytes = tensor_bytes(&info, p->weights);
        fp->weights += bytes;
        if (sscanf(info.name, "blk.%lld.", &block) == 1 && block >= 0 && block < c->n_layer) fp->layer[block] += bytes;
        else fp->base += bytes;
    }
    fp->total = fp->base;
    for (int64_t l = 0; l < c->n_layer; l++) fp->total += fp->layer[l];
    return TF_OK;
}

static uint64_t free_bytes(tf_device *dev) {
    tf_device_props props;
    return tf_device_get_props(dev, &props) == TF_OK ? props.memory_free : 0;
}

/* How many first layers stay on dev: all when everything fits (or the
 * device cannot say), else as many as fit beside the embeddings (with
 * allow_split; without it, the figures as an error). */
static tf_status place(const footprint *fp, const llm_config *c, const tf_model_params *p, tf_device *dev,
                       tf_device **second, int64_t *n_first) {
    uint64_t avail = free_bytes(dev);
    *second = NULL;
    *n_first = c->n_layer;
    if (avail == 0 || fp->total <= avail) return TF_OK;
    const double mib = 1048576.0;
    if (!p->allow_split)
        return llm_fail(TF_ERR_OUT_OF_MEMORY,
                        "model: %s needs %.1f MiB (weights %.1f MiB + a KV cache of %lld cells %.1f MiB) but has %.1f MiB "
                        "free; allow_split puts the layers that do not fit on another device",
                        tf_device_name(dev), fp->total / mib, fp->weights / mib, (long long)fp->n_ctx,
                        (fp->total - fp->weights) / mib, avail / mib);
    const char *spec = p->split_device ? p->split_device : "cpu";
    tf_status s = tf_device_get(spec, second);
    if (s != TF_OK) return llm_fail(s, "model: split device %s: %s", spec, tf_last_error());
    if (*second == dev) return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: %s needs %.1f MiB, has %.1f MiB free, and is "
                                        "its own split device", tf_device_name(dev), fp->total / mib, avail / mib);
    uint64_t used = fp->base;
    int64_t n = 0;
    while (n < c->n_layer && used + fp->layer[n] <= avail) used += fp->layer[n++];
    uint64_t rest = fp->total - used, avail2 = free_bytes(*second);
    if (fp->base > avail || (avail2 && rest > avail2))
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: %.1f MiB do not fit %s (%.1f MiB free) and %s (%.1f MiB free) together",
                        fp->total / mib, tf_device_name(dev), avail / mib, tf_device_name(*second), avail2 / mib);
    *n_first = n;
    return TF_OK;
}

/* do_lower_case from tokenizer_config.json beside the weights (true when absent). */
static bool lowercases(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return true;
    char buf[8192] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *at = strstr(buf, "\"do_lower_case\"");
    return !at || !strstr(at, "false") || strstr(at, "true") < strstr(at, "false");
}

/* A Hugging Face sentence encoder: model.safetensors, with config.json,
 * vocab.txt and tokenizer_config.json beside it. */
static tf_status load_safetensors_encoder(tf_model *m, const char *path, const tf_model_params *p, tf_device *dev) {
    tf_dtype dt = p->weights == TF_DTYPE_COUNT ? TF_F32 : p->weights;
    tf_status s = llm_encoder_load_safetensors(path, dev, dt, &m->enc);
    if (s != TF_OK) return s;
    char dir[4096], vocab[4200];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    if (llm_wordpiece_load_txt(vocab, lowercases(dir), &m->wp) != TF_OK && !(m->tokenizer_error = strdup(llm_error())))
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    return TF_OK;
}

static bool is_bert(const tf_gguf *f) {
    int64_t k = tf_gguf_find_key(f, "general.architecture");
    const char *a;
    size_t n;
    return k >= 0 && tf_gguf_get_string(f, k, 0, &a, &n) == TF_OK && n == 4 && !memcmp(a, "bert", 4);
}

static tf_status load_gguf_encoder(tf_model *m, const tf_model_params *p, tf_device *dev) {
    tf_status s = llm_encoder_load_gguf(m->file, dev, p->weights, &m->enc);
    if (s == TF_OK && llm_wordpiece_load_gguf(m->file, &m->wp) != TF_OK && !(m->tokenizer_error = strdup(llm_error())))
        s = llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    return s;
}

static tf_status load_into(tf_model *m, const char *path, const tf_model_params *p) {
    tf_device *dev;
    tf_status s = tf_device_get(p->device ? p->device : "auto", &dev);
    if (s != TF_OK) return llm_fail(s, "model: device %s: %s", p->device ? p->device : "auto", tf_last_error());
    if (p->weights != TF_DTYPE_COUNT && p->weights != TF_F32 && p->weights != TF_F16 && p->weights != TF_BF16)
        return llm_fail(TF_ERR_DTYPE, "model: weights may be kept as stored or decoded to f32, f16 or bf16, not %s",
                        tf_dtype_name(p->weights));
    size_t len = strlen(path);
    if (len > 12 && !strcmp(path + len - 12, ".safetensors")) return load_safetensors_encoder(m, path, p, dev);
    if ((s = tf_gguf_open(path, &m->file)) != TF_OK) return llm_fail(s, "model: %s", tf_last_error());
    m->name = string_key(m->file, "general.name");
    if (is_bert(m->file)) return load_gguf_encoder(m, p, dev);
    const llm_arch *arch;
    llm_config cfg;
    if ((s = llm_model_config(m->file, &arch, &cfg)) != TF_OK) return s;
    footprint fp = {0};
    tf_device *second = NULL;
    int64_t n_first = 0;
    s = measure(m->file, &cfg, p, &fp);
    if (s == TF_OK) s = place(&fp, &cfg, p, dev, &second, &n_first);
    free(fp.layer);
    m->weight_bytes = fp.weights;
    if (s != TF_OK) return s;
    tf_dtype dt = p->weights == TF_DTYPE_COUNT ? LLM_WEIGHTS_AS_STORED : p->weights;
    if ((s = llm_model_load_split(m->file, dev, second, n_first, dt, &m->llm)) != TF_OK) return s;
    m->n_first = second ? n_first : cfg.n_layer;
    /* A file without a tokenizer this library reads still runs from ids;
     * tokenizing says why it cannot. */
    if (llm_tokenizer_load(m->file, &m->tok) != TF_OK && !(m->tokenizer_error = strdup(llm_error())))
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    m->chat_template = string_key(m->file, "tokenizer.chat_template");
    return TF_OK;
}

tf_status tf_model_load(const char *path, const tf_model_params *params, tf_model **out) {
    if (!out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "model: no output");
    *out = NULL;
    if (!path) return llm_fail(TF_ERR_INVALID_ARGUMENT, "model: no path");
    tf_model_params p = params ? *params : tf_model_default_params();
    tf_model *m = calloc(1, sizeof *m);
    if (!m) return llm_fail(TF_ERR_OUT_OF_MEMORY, "model: out of memory");
    tf_status s = load_into(m, path, &p);
    if (s != TF_OK) {
        tf_model_free(m);
        return s;
    }
    /* The weights, vocabulary and strings are copies: the mapping goes, and
     * with it the page cache's claim on the file's bytes. */
    tf_gguf_close(m->file);
    m->file = NULL;
    *out = m;
    return TF_OK;
}

void tf_model_free(tf_model *m) {
    if (!m) return;
    llm_model_free(m->llm);
    llm_encoder_free(m->enc);
    llm_tokenizer_free(m->tok);
    llm_wordpiece_free(m->wp);
    free(m->tokenizer_error);
    free(m->chat_template);
    free(m->name);
    tf_gguf_close(m->file);
    free(m);
}

static void encoder_info(const tf_model *m, tf_model_info *out) {
    const llm_encoder *e = m->enc;
    *out = (tf_model_info){.architecture = "bert", .name = m->name ? m->name : "", .device = tf_device_name(e->dev),
                           .n_layer = e->n_layers, .n_embd = e->hidden, .n_head = e->heads, .n_head_kv = e->heads,
                           .head_dim = e->hidden / e->heads, .n_vocab = e->n_vocab, .n_ctx_train = e->max_positions,
                           .n_layer_on_device = e->n_layers, .weight_bytes = m->weight_bytes,
                           .has_tokenizer = m->wp != NULL, .bos = m->wp ? llm_wordpiece_cls(m->wp) : -1,
                           .eos = m->wp ? llm_wordpiece_sep(m->wp) : -1, .add_bos = m->wp != NULL};
    if (e->n_layers > 0) out->n_ff = tf_tensor_shape(e->layer[0].w_up)[0];
}

tf_status tf_model_get_info(const tf_model *m, tf_model_info *out) {
    if (!m || !out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "model: no model or no output");
    if (m->enc) {
        encoder_info(m, out);
        return TF_OK;
    }
    const llm_config *c = &m->llm->cfg;
    *out = (tf_model_info){
        .architecture = m->llm->arch->name, .name = m->name ? m->name : "", .device = tf_device_name(m->llm->dev),
        .n_layer = c->n_layer, .n_embd = c->n_embd, .n_ff = c->n_ff, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
        .head_dim = c->head_dim, .n_vocab = c->n_vocab, .n_ctx_train = c->n_ctx_train, .sliding_window = c->n_swa,
        .n_layer_on_device = m->n_first, .split_device = m->llm->n_devs == 2 ? tf_device_name(m->llm->devs[1]) : NULL,
        .weight_bytes = m->weight_bytes, .has_tokenizer = m->tok != NULL, .bos = m->tok ? llm_token_bos(m->tok) : -1,
        .eos = m->tok ? llm_token_eos(m->tok) : -1, .add_bos = m->tok && llm_add_bos(m->tok),
        .chat_template = m->chat_template};
    return TF_OK;
}

uint64_t tf_model_kv_bytes(const tf_model *m, int64_t n_ctx) {
    return m && m->llm && n_ctx > 0 ? kv_bytes(&m->llm->cfg, n_ctx) : 0;
}

/* ---- tokens ---------------------------------------------------------------- */

static tf_status need_tokenizer(const tf_model *m) {
    if (!m) return llm_fail(TF_ERR_INVALID_ARGUMENT, "model: no model");
    if (!m->tok && !m->wp) return llm_fail(TF_ERR_UNSUPPORTED, "model: no tokenizer: %s", m->tokenizer_error);
    return TF_OK;
}

tf_status tf_model_tokenize(const tf_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t **ids, int64_t *n) {
    tf_status s = need_tokenizer(m);
    if (s != TF_OK) return s;
    if (!ids || !n || (!text && len)) return llm_fail(TF_ERR_INVALID_ARGUMENT, "tokenize: no text or no output");
    if (m->wp) return llm_wordpiece_tokenize(m->wp, text ? text : "", len, add_special, parse_special, ids, n);
    return llm_tokenize_special(m->tok, text ? text : "", len, add_special, parse_special, ids, n);
}

tf_status tf_model_token_bytes(const tf_model *m, int32_t id, const char **bytes, size_t *len) {
    tf_status s = need_tokenizer(m);
    if (s != TF_OK) return s;
    if (!bytes || !len) return llm_fail(TF_ERR_INVALID_ARGUMENT, "token: no output");
    int64_t vocab = m->wp ? llm_wordpiece_size(m->wp) : llm_vocab_size(m->tok);
    if (id < 0 || id >= vocab) return llm_fail(TF_ERR_INDEX, "token: %d is outside the vocabulary of %lld", id, (long long)vocab);
    *bytes = m->wp ? llm_wordpiece_token_bytes(m->wp, id, len) : llm_token_bytes(m->tok, id, len);
    return TF_OK;
}

bool tf_model_token_is_end(const tf_model *m, int32_t id) {
    return m && m->tok && id >= 0 && id < llm_vocab_size(m->tok) && llm_token_is_end(m->tok, id);
}

/* The length of the UTF-8 character a lead byte opens (1 for a stray byte). */
static int utf8_length(unsigned char lead) {
    return lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

tf_status tf_model_detokenize(const tf_model *m, int32_t id, tf_utf8_pending *pending, char *out, size_t out_cap,
                              size_t *n_out) {
    const char *bytes;
    size_t len;
    tf_status s = tf_model_token_bytes(m, id, &bytes, &len);
    if (s != TF_OK) return s;
    if (!pending || !out || !n_out || pending->n < 0 || pending->n > 3)
        return llm_fail(TF_ERR_INVALID_ARGUMENT, "detokenize: no output or a spoiled pending state");
    size_t total = (size_t)pending->n + len, complete = 0;
    /* Whole characters of pending + bytes: stop before an incomplete one at the end. */
    for (size_t i = 0; i < total;) {
        unsigned char b = (unsigned char)(i < (size_t)pending->n ? pending->bytes[i] : bytes[i - pending->n]);
        size_t k = (size_t)utf8_length(b);
        if (i + k > total) break;
        i += k;
        complete = i;
    }
    if (complete + 1 > out_cap) return llm_fail(TF_ERR_SIZE, "detokenize: %zu bytes do not fit %zu", complete + 1, out_cap);
    for (size_t i = 0; i < complete; i++) out[i] = i < (size_t)pending->n ? pending->bytes[i] : bytes[i - pending->n];
    out[complete] = 0;
    char tail[4];
    int n_tail = 0;
    for (size_t i = complete; i < total; i++) tail[n_tail++] = i < (size_t)pending->n ? pending->bytes[i] : bytes[i - pending->n];
    memcpy(pending->bytes, tail, (size_t)n_tail);
    pending->n = n_tail;
    *n_out = complete;
    return TF_OK;
}

/* ---- chat templates --------------------------------------------------------- */

tf_status tf_chat_template_detect(const char *template_or_name, const char **name) {
    if (!template_or_name || !name) return llm_fail(TF_ERR_INVALID_ARGUMENT, "chat: no template or no output");
    return llm_chat_detect(template_or_name, name);
}

tf_status tf_model_chat_apply(const tf_model *m, const char *template_or_name, const tf_chat_message *messages, size_t n,
                              bool add_assistant, char **out) {
    if (!out || (!messages && n)) return llm_fail(TF_ERR_INVALID_ARGUMENT, "chat: no messages or no output");
    *out = NULL;
    const char *own = m ? m->chat_template : NULL, *tmpl = template_or_name ? template_or_name : own;
    if (!tmpl)
        return llm_fail(TF_ERR_UNSUPPORTED, "chat: %s; name a format (%s)",
                        m ? "the model's file has no tokenizer.chat_template" : "no model and no template", llm_chat_names());
    /* tf_chat_message and llm_chat_message are the same two pointers. */
    return llm_chat_apply(tmpl, own, (const llm_chat_message *)messages, n, add_assistant, out);
}

/* ---- contexts -------------------------------------------------------------- */

tf_status tf_model_context_new(const tf_model *m, int64_t n_ctx, int64_t n_seq, tf_model_context **out) {
    if (!m || !out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "context: no model or no output");
    *out = NULL;
    if (!m->llm) return llm_fail(TF_ERR_UNSUPPORTED, "context: an encoder has no KV cache; tf_model_embed runs it");
    tf_model_context *c = calloc(1, sizeof *c);
    if (!c) return llm_fail(TF_ERR_OUT_OF_MEMORY, "context: out of memory");
    c->model = m;
    tf_status s = llm_cache_new_seqs(m->llm, n_ctx, n_seq, &c->kv);
    if (s != TF_OK) {
        free(c);
        return s;
    }
    *out = c;
    return TF_OK;
}

void tf_model_context_free(tf_model_context *c) {
    if (!c) return;
    llm_cache_free(c->kv);
    free(c);
}

int64_t tf_model_context_used(const tf_model_context *c) { return c ? c->kv->n_past : 0; }
int64_t tf_model_seq_pos_max(const tf_model_context *c, int32_t seq) { return c ? llm_cache_seq_pos_max(c->kv, seq) : -1; }

tf_status tf_model_seq_rm(tf_model_context *c, int32_t seq, int64_t p0, int64_t p1) {
    if (!c) return llm_fail(TF_ERR_INVALID_ARGUMENT, "context: none");
    return llm_cache_seq_rm(c->kv, seq, p0, p1);
}

tf_status tf_model_seq_cp(tf_model_context *c, int32_t src, int32_t dst, int64_t p0, int64_t p1) {
    if (!c) return llm_fail(TF_ERR_INVALID_ARGUMENT, "context: none");
    return llm_cache_seq_cp(c->kv, src, dst, p0, p1);
}

tf_status tf_model_decode(tf_model_context *c, const tf_model_batch *b, tf_tensor **logits) {
    if (!c || !b || !logits) return llm_fail(TF_ERR_INVALID_ARGUMENT, "decode: no context, batch or output");
    llm_batch lb = {.ids = b->ids, .pos = b->pos, .seq = b->seq, .logits = b->logits, .n = b->n};
    return llm_decode(c->model->llm, c->kv, &lb, logits);
}

tf_status tf_model_eval(tf_model_context *c, const int32_t *ids, int64_t n, tf_tensor **logits) {
    tf_model_batch b = {.ids = ids, .n = n};
    return tf_model_decode(c, &b, logits);
}

/* ---- embeddings ---------------------------------------------------------------- */

/* One decoder row's final hidden states [len, n_embd], pooled to [1, n_embd]. */
static tf_status decoder_row(const tf_model *m, const int32_t *ids, int64_t len, tf_pooling pooling, tf_tensor **out) {
    llm_cache *kv = NULL;
    bool *all = malloc((size_t)len * sizeof *all);
    tf_tensor *h = NULL;
    tf_status s = all ? llm_cache_new(m->llm, len, &kv) : llm_fail(TF_ERR_OUT_OF_MEMORY, "embed: out of memory");
    for (int64_t i = 0; all && i < len; i++) all[i] = true;
    llm_batch b = {.ids = ids, .logits = all, .n = len, .hidden = true};
    if (s == TF_OK) s = llm_decode(m->llm, kv, &b, &h);
    if (s == TF_OK && pooling == TF_POOLING_MEAN) s = tf_mean(h, 0, true, out);
    else if (s == TF_OK) {
        int64_t row = pooling == TF_POOLING_CLS ? 0 : len - 1;
        tf_tensor *v = NULL;
        s = tf_slice(h, 0, row, row + 1, 1, &v);
        if (s == TF_OK) s = tf_contiguous(v, out);
        tf_tensor_release(v);
    }
    if (s != TF_OK && !*llm_error()) llm_fail(s, "embed: %s", tf_last_error());
    tf_tensor_release(h);
    llm_cache_free(kv);
    free(all);
    return s;
}

static tf_status decoder_embed(const tf_model *m, const int32_t *ids, const int64_t *lengths, int64_t n, int64_t len,
                               tf_pooling pooling, tf_tensor **out) {
    tf_tensor **rows = calloc((size_t)n, sizeof *rows);
    if (!rows) return llm_fail(TF_ERR_OUT_OF_MEMORY, "embed: out of memory");
    tf_status s = TF_OK;
    for (int64_t i = 0; s == TF_OK && i < n; i++) s = decoder_row(m, ids + i * len, lengths[i], pooling, &rows[i]);
    if (s == TF_OK && (s = tf_concat((int)n, (const tf_tensor *const *)rows, 0, out)) != TF_OK)
        llm_fail(s, "embed: %s", tf_last_error());
    for (int64_t i = 0; i < n; i++) tf_tensor_release(rows[i]);
    free(rows);
    return s;
}

tf_status tf_model_embed_tokens(const tf_model *m, const int32_t *ids, const int64_t *lengths, int64_t n, int64_t len,
                                tf_pooling pooling, bool normalize, tf_tensor **out) {
    if (!out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: no output");
    *out = NULL;
    if (!m || !ids || !lengths || n < 1 || n > (1 << 20) || len < 1 || pooling < 0 || pooling > TF_POOLING_LAST)
        return llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: no model or ids, no rows, or a pooling that is none of tf_pooling's");
    for (int64_t i = 0; i < n; i++)
        if (lengths[i] < 1 || lengths[i] > len)
            return llm_fail(TF_ERR_SHAPE, "embed: row %lld has %lld tokens of %lld", (long long)i, (long long)lengths[i],
                            (long long)len);
    if (m->enc) {
        if (pooling == TF_POOLING_LAST) return llm_fail(TF_ERR_UNSUPPORTED, "embed: an encoder pools mean or CLS");
        llm_pooling p = pooling == TF_POOLING_DEFAULT ? m->enc->pooling : pooling == TF_POOLING_CLS ? LLM_POOL_CLS
                                                                                                     : LLM_POOL_MEAN;
        return llm_encoder_forward(m->enc, n, len, ids, lengths, p, normalize, out);
    }
    tf_tensor *pooled = NULL;
    tf_status s = decoder_embed(m, ids, lengths, n, len, pooling == TF_POOLING_DEFAULT ? TF_POOLING_LAST : pooling, &pooled);
    if (s == TF_OK && normalize && (s = tf_normalize(pooled, 2, -1, 1e-12, out)) != TF_OK)
        llm_fail(s, "embed: %s", tf_last_error());
    else if (s == TF_OK && !normalize)
        *out = tf_tensor_retain(pooled);
    tf_tensor_release(pooled);
    return s;
}

tf_status tf_model_embed(const tf_model *m, const char *const *texts, int64_t n, tf_pooling pooling, bool normalize,
                         tf_tensor **out) {
    if (!out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: no output");
    *out = NULL;
    if (!texts || n < 1 || n > (1 << 20)) return llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: no texts");
    int32_t **each = calloc((size_t)n, sizeof *each);
    int64_t *lengths = calloc((size_t)n, sizeof *lengths), len = 1;
    tf_status s = each && lengths ? TF_OK : llm_fail(TF_ERR_OUT_OF_MEMORY, "embed: out of memory");
    for (int64_t i = 0; s == TF_OK && i < n; i++) {
        if (!texts[i]) s = llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: text %lld is NULL", (long long)i);
        else s = tf_model_tokenize(m, texts[i], strlen(texts[i]), true, false, &each[i], &lengths[i]);
        if (s == TF_OK && lengths[i] == 0) s = llm_fail(TF_ERR_INVALID_ARGUMENT, "embed: text %lld has no tokens", (long long)i);
        if (s == TF_OK && lengths[i] > len) len = lengths[i];
    }
    int32_t *ids = s == TF_OK ? calloc((size_t)(n * len), sizeof *ids) : NULL;
    if (s == TF_OK && !ids) s = llm_fail(TF_ERR_OUT_OF_MEMORY, "embed: out of memory");
    for (int64_t i = 0; s == TF_OK && i < n; i++) memcpy(ids + i * len, each[i], (size_t)lengths[i] * sizeof *ids);
    if (s == TF_OK) s = tf_model_embed_tokens(m, ids, lengths, n, len, pooling, normalize, out);
    for (int64_t i = 0; each && i < n; i++) free(each[i]);
    free(each);
    free(lengths);
    free(ids);
    return s;
}

/* ---- sampling -------------------------------------------------------------- */

tf_sampler_params tf_sampler_default_params(void) {
    return (tf_sampler_params){.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05, .repeat_penalty = 1.0,
                               .penalty_last_n = 64, .seed = 0};
}

tf_status tf_sampler_new(const tf_sampler_params *p, tf_sampler **out) {
    if (!p || !out) return llm_fail(TF_ERR_INVALID_ARGUMENT, "sampler: no parameters or no output");
    *out = NULL;
    bool finite = p->temperature == p->temperature && p->top_p == p->top_p && p->min_p == p->min_p &&
                  p->frequency_penalty == p->frequency_penalty && p->presence_penalty == p->presence_penalty;
    if (!finite || !(p->repeat_penalty > 0) || p->penalty_last_n < 0 || p->penalty_last_n > (1 << 24))
        return llm_fail(TF_ERR_INVALID_ARGUMENT, "sampler: a NaN parameter, a repeat penalty <= 0 or a penalty window "
                        "outside [0, 2^24]");
    tf_sampler *s = calloc(1, sizeof *s);
    if (!s) return llm_fail(TF_ERR_OUT_OF_MEMORY, "sampler: out of memory");
    s->s = (llm_sampler){.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                         .repeat_penalty = p->repeat_penalty, .frequency_penalty = p->frequency_penalty,
                         .presence_penalty = p->presence_penalty, .penalty_last_n = p->penalty_last_n};
    llm_sampler_seed(&s->s, p->seed);
    *out = s;
    return TF_OK;
}

void tf_sampler_free(tf_sampler *s) {
    if (!s) return;
    llm_sampler_reset(&s->s);
    free(s);
}

tf_status tf_sampler_accept(tf_sampler *s, int32_t id) {
    if (!s) return llm_fail(TF_ERR_INVALID_ARGUMENT, "sampler: none");
    return llm_sampler_accept(&s->s, id) == TF_OK ? TF_OK : llm_fail(TF_ERR_OUT_OF_MEMORY, "sampler: out of memory");
}

tf_status tf_sampler_sample(tf_sampler *s, const tf_tensor *logits, int64_t row, int32_t *id) {
    if (!s || !logits || !id) return llm_fail(TF_ERR_INVALID_ARGUMENT, "sampler: no sampler, logits or output");
    if (tf_tensor_ndim(logits) != 2 || tf_tensor_dtype(logits) != TF_F32 || row < 0 || row >= tf_tensor_shape(logits)[0])
        return llm_fail(TF_ERR_SHAPE, "sampler: logits are not [rows, n_vocab] f32 with a row %lld", (long long)row);
    int64_t n = tf_tensor_shape(logits)[1];
    tf_tensor *r = NULL;
    float *v = malloc((size_t)n * sizeof *v);
    tf_status st = v ? tf_slice(logits, 0, row, row + 1, 1, &r) : TF_ERR_OUT_OF_MEMORY;
    if (st == TF_OK) st = tf_tensor_read(r, v, (size_t)n * sizeof *v);
    tf_tensor_release(r);
    int32_t chosen = st == TF_OK ? llm_sample(&s->s, v, n) : -1;
    free(v);
    if (st != TF_OK) return llm_fail(st, "sampler: reading the logits: %s", tf_last_error());
    if (chosen < 0) return llm_fail(TF_ERR_NOT_FINITE, "sampler: no finite logit to choose");
    if (llm_sampler_accept(&s->s, chosen) != TF_OK) return llm_fail(TF_ERR_OUT_OF_MEMORY, "sampler: out of memory");
    *id = chosen;
    return TF_OK;
}
