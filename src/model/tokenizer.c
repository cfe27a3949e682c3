/* Byte-level BPE from GGUF metadata; see tokenizer.h.
 *
 * The steps are llama.cpp's for its "gpt2"-model vocabularies:
 *   1. control tokens written in the text are cut out first (longest first);
 *   2. each remaining fragment is split into words by the pre-tokenizer's
 *      patterns (for smollm: every \p{N} code point alone, then GPT-2's
 *      pattern inside each piece);
 *   3. each word's bytes are spelled with GPT-2's byte-to-character map and
 *      merged pair by pair, always the adjacent pair of lowest merge rank
 *      (leftmost on ties), until no pair has a rank;
 *   4. the final symbols are looked up in the vocabulary. */
#include "tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode_tables.h"

/* ---- errors ------------------------------------------------------------ */

static _Thread_local char last_error[512];

const char *llm_error(void) { return last_error; }

tf_status llm_fail(tf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- a string -> id hash table (open addressing, power-of-two size) ---- */

typedef struct str_map {
    int32_t *slots;       /* token id, or -1 for empty */
    size_t mask;
} str_map;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;          /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

typedef struct token {
    char *text;           /* as in the vocabulary (byte-level characters) */
    size_t len;
    char *bytes;          /* what it stands for */
    size_t nbytes;
    int type;             /* 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte */
} token;

/* ---- the (left, right) -> merge table ---------------------------------- */

typedef struct merge_slot {
    uint64_t key;         /* left << 32 | right; UINT64_MAX for empty */
    int32_t rank;
    int32_t merged;       /* the id of left + right */
} merge_slot;

/* The pre-tokenizers (tokenizer.ggml.pre) this file knows, as llama.cpp
 * groups the names: GPT-2's pattern; smollm and its kin, every \p{N}
 * alone first; Llama 3's pattern (digits in threes); Qwen2's (digits alone);
 * Mistral's tekken (case runs, digits alone). */
enum { PRE_GPT2, PRE_DIGITS, PRE_LLAMA3, PRE_QWEN2, PRE_TEKKEN };

struct llm_tokenizer {
    token *tokens;
    int64_t n_tokens;
    str_map by_text;
    merge_slot *merges;
    size_t merge_mask;
    int32_t *specials;    /* control / user-defined / unknown ids, longest text first */
    int n_specials;
    int32_t bos, eos;
    bool add_bos;
    int pre;              /* the pre-tokenizer: PRE_GPT2, PRE_DIGITS, PRE_LLAMA3 or PRE_QWEN2 */
    bool strip_space_prefix;   /* detokenizing drops the space tokenizing put first (SentencePiece) */
    bool add_eos;              /* tokenizer.ggml.add_eos_token: EOS last when special tokens are added */
    bool ignore_merges;        /* a word that is a token is that token, merges or not (Llama 3, tekken) */
    bool spm;             /* SentencePiece (tokenizer.ggml.model "llama"): scores, not merges */
    float *scores;        /* SentencePiece: a piece's score; merges take the highest first */
    int32_t unk;          /* SentencePiece: for a byte no token spells; -1 when none */
    int32_t byte_token[256];
};

static size_t table_size(int64_t n) {
    size_t size = 16;
    while (size < (size_t)n * 2) size *= 2;
    return size;
}

static int32_t map_find(const llm_tokenizer *t, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & t->by_text.mask;; i = (i + 1) & t->by_text.mask) {
        int32_t id = t->by_text.slots[i];
        if (id < 0) return -1;
        if (t->tokens[id].len == n && memcmp(t->tokens[id].text, s, n) == 0) return id;
    }
}

/* The first id wins when a text repeats, as in llama.cpp's map. */
static void map_insert(llm_tokenizer *t, int32_t id) {
    const token *tok = &t->tokens[id];
    for (size_t i = hash_bytes(tok->text, tok->len) & t->by_text.mask;; i = (i + 1) & t->by_text.mask) {
        int32_t other = t->by_text.slots[i];
        if (other < 0) {
            t->by_text.slots[i] = id;
            return;
        }
        if (t->tokens[other].len == tok->len && memcmp(t->tokens[other].text, tok->text, tok->len) == 0) return;
    }
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static const merge_slot *merge_find(const llm_tokenizer *t, int32_t left, int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merges[i].key == key) return &t->merges[i];
        if (t->merges[i].key == UINT64_MAX) return NULL;
    }
}

static void merge_insert(llm_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merges[i].key == key) return;           /* a repeated merge keeps its first rank */
        if (t->merges[i].key == UINT64_MAX) {
            t->merges[i] = (merge_slot){key, rank, merged};
            return;
        }
    }
}

/* ---- Unicode ------------------------------------------------------------ */

static bool in_ranges(uint32_t cp, const uint32_t (*ranges)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < ranges[mid][0]) hi = mid;
        else if (cp > ranges[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

static bool is_letter(uint32_t cp) {
    return in_ranges(cp, llm_letter_ranges, sizeof llm_letter_ranges / sizeof llm_letter_ranges[0]);
}
static bool is_number(uint32_t cp) {
    return in_ranges(cp, llm_number_ranges, sizeof llm_number_ranges / sizeof llm_number_ranges[0]);
}
/* llama.cpp's \s: Unicode's White_Space property. */
static bool is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* One code point from s[0..n); an invalid or truncated sequence reads as
 * U+FFFD over one byte (llama.cpp replaces it the same way). */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *used) {
    static const uint32_t min_of_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    size_t len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    *used = 1;
    if (len == 0 || len > n) return 0xFFFD;
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min_of_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
    *used = len;
    return cp;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's printable spelling of a byte: printable Latin-1 bytes stand for
 * themselves, the others for U+0100 upwards in byte order. */
static uint32_t byte_to_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
    return 256 + n;
}

static int char_to_byte(uint32_t cp) {
    static int16_t inverse[324];
    static bool ready;
    if (!ready) {      /* idempotent: racing threads write the same values */
        for (unsigned b = 0; b < 256; b++) inverse[byte_to_char(b)] = (int16_t)b;
        ready = true;
    }
    return cp < 324 ? inverse[cp] : -1;
}

/* ---- loading ------------------------------------------------------------ */

static tf_status key_of(const tf_gguf *f, const char *key, tf_gguf_type type, bool array, int64_t *index) {
    *index = tf_gguf_find_key(f, key);
    if (*index < 0) return llm_fail(TF_ERR_FORMAT, "tokenizer: the file has no %s", key);
    tf_gguf_type got = array ? tf_gguf_array_type(f, *index) : tf_gguf_key_type(f, *index);
    if (got != type) return llm_fail(TF_ERR_FORMAT, "tokenizer: %s has the wrong type", key);
    return TF_OK;
}

/* An optional integer key: `fallback` when absent; present, it must be an
 * integer (or bool) in [lo, hi], checked as int64 before any narrowing. */
static tf_status optional_int(const tf_gguf *f, const char *key, int64_t lo, int64_t hi, int64_t fallback,
                              int64_t *v) {
    int64_t i = tf_gguf_find_key(f, key);
    *v = fallback;
    if (i < 0) return TF_OK;
    tf_gguf_type type = tf_gguf_key_type(f, i);
    bool integer = type != TF_GGUF_F32 && type != TF_GGUF_F64 && type != TF_GGUF_STRING && type != TF_GGUF_ARRAY;
    if (!integer || tf_gguf_get_int(f, i, 0, v) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "tokenizer: %s is not an integer", key);
    if (*v < lo || *v > hi)
        return llm_fail(TF_ERR_FORMAT, "tokenizer: %s is %lld, outside [%lld, %lld]", key, (long long)*v,
                        (long long)lo, (long long)hi);
    return TF_OK;
}

/* The raw bytes a vocabulary entry stands for. Each byte of the text gives
 * at most 3: a byte-level character (1 or 2 bytes of text) gives 1, a valid
 * UTF-8 character of k bytes gives the same k, and a byte that starts no
 * valid sequence gives U+FFFD's 3. */
/* A SentencePiece piece's bytes: U+2581 is a space, <0xXX> (a byte token) its byte. */
static void decode_spm_token(token *tok) {
    unsigned v;
    char close;
    if (tok->type == 6 && tok->len == 6 && sscanf(tok->text, "<0x%2X%c", &v, &close) == 2 && close == '>') {
        tok->bytes[0] = (char)v;
        tok->nbytes = 1;
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < tok->len; i++) {
        if (tok->type == 1 && i + 3 <= tok->len && !memcmp(tok->text + i, "\xe2\x96\x81", 3)) {
            tok->bytes[n++] = ' ';
            i += 2;
            continue;
        }
        tok->bytes[n++] = tok->text[i];
    }
    tok->nbytes = n;
}

static tf_status decode_token(token *tok, bool spm) {
    tok->bytes = malloc(3 * tok->len + 1);
    if (!tok->bytes) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    if (tok->type == 3 || tok->type == 4) {       /* control and user-defined tokens are plain text */
        memcpy(tok->bytes, tok->text, tok->len);
        tok->nbytes = tok->len;
        return TF_OK;
    }
    if (spm) {
        decode_spm_token(tok);
        return TF_OK;
    }
    size_t n = 0;
    for (size_t i = 0, used; i < tok->len; i += used) {
        uint32_t cp = utf8_next((const unsigned char *)tok->text + i, tok->len - i, &used);
        int b = char_to_byte(cp);
        if (b < 0) {                                /* not byte-level: keep the character's UTF-8 */
            n += utf8_put(cp, tok->bytes + n);
            continue;
        }
        tok->bytes[n++] = (char)b;
    }
    tok->nbytes = n;
    return TF_OK;
}

static tf_status load_tokens(llm_tokenizer *t, const tf_gguf *f) {
    int64_t ki, kt;
    tf_status s = key_of(f, "tokenizer.ggml.tokens", TF_GGUF_STRING, true, &ki);
    if (s == TF_OK) s = key_of(f, "tokenizer.ggml.token_type", TF_GGUF_I32, true, &kt);
    if (s != TF_OK) return s;
    int64_t n = tf_gguf_array_length(f, ki);
    if (n <= 0 || n > INT32_MAX / 2 || tf_gguf_array_length(f, kt) != n)
        return llm_fail(TF_ERR_FORMAT, "tokenizer: %lld tokens with %lld types", (long long)n,
                        (long long)tf_gguf_array_length(f, kt));
    t->tokens = calloc((size_t)n, sizeof *t->tokens);
    t->by_text.mask = table_size(n) - 1;
    t->by_text.slots = malloc((t->by_text.mask + 1) * sizeof(int32_t));
    if (!t->tokens || !t->by_text.slots) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    t->n_tokens = n;
    memset(t->by_text.slots, 0xFF, (t->by_text.mask + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        const char *text;
        size_t len;
        int64_t type;
        if ((s = tf_gguf_get_string(f, ki, i, &text, &len)) != TF_OK || (s = tf_gguf_get_int(f, kt, i, &type)) != TF_OK)
            return llm_fail(s, "tokenizer: token %lld unreadable", (long long)i);
        if (type < 0 || type > 6)      /* llama.cpp's types: undefined, normal, unknown, control, user, unused, byte */
            return llm_fail(TF_ERR_FORMAT, "tokenizer: token %lld has type %lld (types are 0 to 6)", (long long)i,
                            (long long)type);
        token *tok = &t->tokens[i];
        tok->text = malloc(len + 1);
        if (!tok->text) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        memcpy(tok->text, text, len);
        tok->text[len] = 0;
        tok->len = len;
        tok->type = (int)type;
        if ((s = decode_token(tok, t->spm)) != TF_OK) return s;
        map_insert(t, (int32_t)i);
    }
    return TF_OK;
}

static tf_status load_merges(llm_tokenizer *t, const tf_gguf *f) {
    int64_t km;
    tf_status s = key_of(f, "tokenizer.ggml.merges", TF_GGUF_STRING, true, &km);
    if (s != TF_OK) return s;
    int64_t n = tf_gguf_array_length(f, km);
    if (n < 0 || n > INT32_MAX / 2) return llm_fail(TF_ERR_FORMAT, "tokenizer: %lld merges", (long long)n);
    t->merge_mask = table_size(n) - 1;
    t->merges = malloc((t->merge_mask + 1) * sizeof *t->merges);
    if (!t->merges) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memset(t->merges, 0xFF, (t->merge_mask + 1) * sizeof *t->merges);
    for (int64_t i = 0; i < n; i++) {
        const char *text;
        size_t len;
        if ((s = tf_gguf_get_string(f, km, i, &text, &len)) != TF_OK) return llm_fail(s, "tokenizer: merge %lld", (long long)i);
        const char *space = memchr(text + 1, ' ', len > 1 ? len - 1 : 0);   /* the first space after one byte */
        if (!space) return llm_fail(TF_ERR_FORMAT, "tokenizer: merge %lld has no space", (long long)i);
        size_t left_len = (size_t)(space - text);
        int32_t left = map_find(t, text, left_len), right = map_find(t, space + 1, len - left_len - 1);
        char buf[512];
        if (left < 0 || right < 0 || len - 1 > sizeof buf) continue;   /* a merge no symbol can reach */
        memcpy(buf, text, left_len);
        memcpy(buf + left_len, space + 1, len - left_len - 1);
        int32_t merged = map_find(t, buf, len - 1);
        if (merged >= 0) merge_insert(t, left, right, (int32_t)i, merged);
    }
    return TF_OK;
}

/* SentencePiece's scores: one finite float a token. */
static tf_status load_scores(llm_tokenizer *t, const tf_gguf *f) {
    int64_t ks;
    tf_status s = key_of(f, "tokenizer.ggml.scores", TF_GGUF_F32, true, &ks);
    if (s != TF_OK) return s;
    if (tf_gguf_array_length(f, ks) != t->n_tokens)
        return llm_fail(TF_ERR_FORMAT, "tokenizer: %lld scores for %lld tokens", (long long)tf_gguf_array_length(f, ks),
                        (long long)t->n_tokens);
    if (!(t->scores = malloc((size_t)t->n_tokens * sizeof *t->scores)))
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int64_t i = 0; i < t->n_tokens; i++) {
        double v;
        if (tf_gguf_get_float(f, ks, i, &v) != TF_OK || !(v == v) || v > 1e30 || v < -1e30)
            return llm_fail(TF_ERR_FORMAT, "tokenizer: score %lld is not a finite number", (long long)i);
        t->scores[i] = (float)v;
    }
    return TF_OK;
}

static int by_length_desc(const void *a, const void *b, void *ctx) {
    const llm_tokenizer *t = ctx;
    size_t la = t->tokens[*(const int32_t *)a].len, lb = t->tokens[*(const int32_t *)b].len;
    if (la != lb) return la < lb ? 1 : -1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* glibc's qsort_r is not C11: a small insertion sort suffices (a few dozen). */
static void sort_specials(llm_tokenizer *t) {
    for (int i = 1; i < t->n_specials; i++)
        for (int j = i; j > 0 && by_length_desc(&t->specials[j - 1], &t->specials[j], t) > 0; j--) {
            int32_t tmp = t->specials[j];
            t->specials[j] = t->specials[j - 1];
            t->specials[j - 1] = tmp;
        }
}

static tf_status load_specials(llm_tokenizer *t) {
    t->specials = malloc((size_t)t->n_tokens * sizeof(int32_t));
    if (!t->specials) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    for (int64_t i = 0; i < t->n_tokens; i++) {
        int type = t->tokens[i].type;
        if ((type == 2 || type == 3 || type == 4) && t->tokens[i].len > 0) t->specials[t->n_specials++] = (int32_t)i;
    }
    sort_specials(t);
    for (int b = 0; b < 256; b++) {
        char spelled[8];
        if (t->spm) {       /* <0xXX>, else the byte as a one-byte piece, else unknown (llama.cpp would throw) */
            snprintf(spelled, sizeof spelled, "<0x%02X>", b);
            int32_t id = map_find(t, spelled, 6);
            spelled[0] = (char)b;
            if (id < 0 && b < 0x80) id = map_find(t, spelled, 1);
            t->byte_token[b] = id >= 0 ? id : t->unk;
            continue;
        }
        t->byte_token[b] = map_find(t, spelled, utf8_put(byte_to_char((unsigned)b), spelled));
    }
    return TF_OK;
}

static const struct {
    const char *name;
    int pre;
} pre_names[] = {
    {"default", PRE_GPT2},     {"gpt2", PRE_GPT2},          {"smollm", PRE_DIGITS},     {"starcoder", PRE_DIGITS},
    {"refact", PRE_DIGITS},    {"command-r", PRE_DIGITS},   {"codeshell", PRE_DIGITS},  {"exaone", PRE_DIGITS},
    {"minerva", PRE_DIGITS},   {"llama3", PRE_LLAMA3},      {"llama-v3", PRE_LLAMA3},   {"llama-bpe", PRE_LLAMA3},
    {"falcon3", PRE_LLAMA3},   {"pixtral", PRE_LLAMA3},     {"qwen2", PRE_QWEN2},       {"deepseek-r1-qwen", PRE_QWEN2},
    {"megrez", PRE_QWEN2},     {"tekken", PRE_TEKKEN},
};

static tf_status check_model(llm_tokenizer *t, const tf_gguf *f) {
    int64_t km, kp;
    const char *model, *pre = "default";
    size_t model_len, pre_len = 7;
    tf_status s = key_of(f, "tokenizer.ggml.model", TF_GGUF_STRING, false, &km);
    if (s != TF_OK) return s;
    if ((s = tf_gguf_get_string(f, km, 0, &model, &model_len)) != TF_OK) return llm_fail(s, "tokenizer: model name");
    if (model_len == 5 && !memcmp(model, "llama", 5)) {
        t->spm = true;                        /* SentencePiece: no pre-tokenizer */
        return TF_OK;
    }
    if (model_len != 4 || memcmp(model, "gpt2", 4) != 0)
        return llm_fail(TF_ERR_UNSUPPORTED, "tokenizer: model '%.*s' is neither byte-level BPE (gpt2) nor SentencePiece "
                        "(llama)", (int)(model_len < 64 ? model_len : 64), model);
    if ((kp = tf_gguf_find_key(f, "tokenizer.ggml.pre")) >= 0 && tf_gguf_get_string(f, kp, 0, &pre, &pre_len) != TF_OK)
        return llm_fail(TF_ERR_FORMAT, "tokenizer: tokenizer.ggml.pre is not a string");
    for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++)
        if (pre_len == strlen(pre_names[i].name) && !memcmp(pre, pre_names[i].name, pre_len)) {
            t->pre = pre_names[i].pre;
            t->ignore_merges = t->pre == PRE_LLAMA3 || t->pre == PRE_TEKKEN;     /* as llama.cpp sets it */
            return TF_OK;
        }
    return llm_fail(TF_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.*s' is not known here", (int)(pre_len < 64 ? pre_len : 64),
                    pre);
}

tf_status llm_tokenizer_load(const tf_gguf *f, llm_tokenizer **out) {
    *out = NULL;
    llm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    tf_status s = check_model(t, f);
    if (s == TF_OK) s = load_tokens(t, f);
    if (s == TF_OK) s = t->spm ? load_scores(t, f) : load_merges(t, f);
    /* SentencePiece files add BOS and a space before the text unless they say not to. */
    int64_t bos = -1, eos = -1, unk = -1, add_bos = 0, add_eos = 0, space_prefix = 0;
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.bos_token_id", 0, t->n_tokens - 1, -1, &bos);
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.eos_token_id", 0, t->n_tokens - 1, -1, &eos);
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.unknown_token_id", 0, t->n_tokens - 1, -1, &unk);
    /* llama.cpp's defaults when the key is absent: SentencePiece and Llama 3 add BOS */
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.add_bos_token", 0, 1, t->spm || t->pre == PRE_LLAMA3, &add_bos);
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.add_eos_token", 0, 1, 0, &add_eos);
    if (s == TF_OK) s = optional_int(f, "tokenizer.ggml.add_space_prefix", 0, 1, t->spm, &space_prefix);
    t->add_eos = add_eos != 0;
    t->unk = (int32_t)unk;
    t->strip_space_prefix = space_prefix != 0;
    if (s == TF_OK) s = load_specials(t);
    if (s != TF_OK) {
        llm_tokenizer_free(t);
        return s;
    }
    t->bos = (int32_t)bos;                 /* in range: n_tokens <= INT32_MAX / 2 */
    t->eos = (int32_t)eos;
    t->add_bos = add_bos != 0;
    *out = t;
    return TF_OK;
}

void llm_tokenizer_free(llm_tokenizer *t) {
    if (!t) return;
    for (int64_t i = 0; t->tokens && i < t->n_tokens; i++) {
        free(t->tokens[i].text);
        free(t->tokens[i].bytes);
    }
    free(t->tokens);
    free(t->by_text.slots);
    free(t->merges);
    free(t->scores);
    free(t->specials);
    free(t);
}

/* ---- output ids ---------------------------------------------------------- */

typedef struct id_list {
    int32_t *ids;
    int64_t n, cap;
} id_list;

static tf_status push(id_list *l, int32_t id) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        int32_t *ids = realloc(l->ids, (size_t)cap * sizeof *ids);
        if (!ids) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return TF_OK;
}

/* ---- BPE of one word ------------------------------------------------------ */

typedef struct symbol {
    int32_t id;           /* -1 once merged into its left neighbour */
    int prev, next;
} symbol;

typedef struct pair {
    int32_t rank;
    int left;             /* the left symbol's index: ties go leftmost */
    int32_t left_id, right_id;
} pair;

static bool pair_before(const pair *a, const pair *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(pair *heap, int *n, pair p) {
    int i = (*n)++;
    while (i > 0 && pair_before(&p, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = p;
}

static pair heap_pop(pair *heap, int *n) {
    pair top = heap[0], last = heap[--*n];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && pair_before(&heap[child + 1], &heap[child])) child++;
        if (!pair_before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

static void offer_pair(const llm_tokenizer *t, const symbol *sym, int left, pair *heap, int *n) {
    if (left < 0 || sym[left].next < 0) return;
    int right = sym[left].next;
    const merge_slot *m = merge_find(t, sym[left].id, sym[right].id);
    if (m) heap_push(heap, n, (pair){m->rank, left, sym[left].id, sym[right].id});
}

/* Symbols start as one per byte (each byte's spelling is a vocabulary
 * token in a byte-level vocabulary); merges only ever join two tokens into
 * a third, so symbols stay token ids throughout. */
/* ignore_merges: the word's byte-level spelling, when it is a token, is it. */
static int32_t whole_word_token(const llm_tokenizer *t, const unsigned char *word, size_t len) {
    char spelled[512];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (n + 2 > sizeof spelled) return -1;
        n += utf8_put(byte_to_char(word[i]), spelled + n);
    }
    return map_find(t, spelled, n);
}

static tf_status bpe_word(const llm_tokenizer *t, const unsigned char *word, size_t len, id_list *out) {
    int32_t whole = t->ignore_merges ? whole_word_token(t, word, len) : -1;
    if (whole >= 0) return push(out, whole);
    symbol *sym = malloc(len * sizeof *sym);
    pair *heap = malloc((len * 3 + 1) * sizeof *heap);   /* each merge offers at most two pairs */
    if (!sym || !heap) {
        free(sym);
        free(heap);
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    }
    int n_heap = 0;
    for (size_t i = 0; i < len; i++) sym[i] = (symbol){t->byte_token[word[i]], (int)i - 1, i + 1 < len ? (int)i + 1 : -1};
    for (size_t i = 0; i + 1 < len; i++) offer_pair(t, sym, (int)i, heap, &n_heap);
    while (n_heap > 0) {
        pair p = heap_pop(heap, &n_heap);
        int right = sym[p.left].next;
        if (sym[p.left].id != p.left_id || right < 0 || sym[right].id != p.right_id) continue;   /* outdated */
        sym[p.left].id = merge_find(t, p.left_id, p.right_id)->merged;
        sym[p.left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = p.left;
        sym[right].id = -1;
        offer_pair(t, sym, sym[p.left].prev, heap, &n_heap);
        offer_pair(t, sym, p.left, heap, &n_heap);
    }
    tf_status s = TF_OK;
    for (int i = len ? 0 : -1; i >= 0 && s == TF_OK; i = sym[i].next)
        if (sym[i].id >= 0) s = push(out, sym[i].id);
    free(sym);
    free(heap);
    return s;
}

/* ---- pre-tokenization ------------------------------------------------------ */

/* A fragment as code points with their byte offsets (offs has n+1 entries). */
typedef struct cps {
    uint32_t *cp;
    size_t *off;
    size_t n;
} cps;

enum { OTHER = 1, LETTER = 2, NUMBER = 4, SPACE = 8 };

static int class_of(const cps *c, size_t i, size_t end) {
    if (i >= end) return 0;       /* outside the piece: no class at all */
    uint32_t cp = c->cp[i];
    return is_space(cp) ? SPACE : is_letter(cp) ? LETTER : is_number(cp) ? NUMBER : OTHER;
}

typedef tf_status (*word_fn)(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out);

/* The bytes of code points [from, to) run through BPE (invalid input was
 * read as U+FFFD, and its spelling is U+FFFD's bytes, as in llama.cpp). */
static tf_status emit_word(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    unsigned char stack[256], *buf = stack;
    size_t cap = (to - from) * 4;
    if (cap > sizeof stack && !(buf = malloc(cap))) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += utf8_put(c->cp[i], (char *)buf + n);
    tf_status s = bpe_word(t, buf, n, out);
    if (buf != stack) free(buf);
    return s;
}

static bool contraction(const cps *c, size_t pos, size_t end, size_t *len) {
    if (c->cp[pos] != '\'' || pos + 1 >= end) return false;
    uint32_t a = c->cp[pos + 1], b = pos + 2 < end ? c->cp[pos + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') { *len = 2; return true; }
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) { *len = 3; return true; }
    return false;
}

/* GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * over code points [from, to), as llama.cpp's hand-written matcher reads it. */
static tf_status gpt2_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    tf_status s = TF_OK;
    for (size_t pos = from; pos < to && s == TF_OK;) {
        size_t start = pos, len;
        int cls = class_of(c, pos, to);
        int cls2 = c->cp[pos] == ' ' ? class_of(c, pos + 1, to) : cls;
        if (contraction(c, pos, to, &len)) {
            pos += len;
        } else if (cls2 == LETTER || cls2 == NUMBER || cls2 == OTHER) {
            pos += c->cp[pos] == ' ';
            while (class_of(c, pos, to) == cls2) pos++;
        } else {
            size_t spaces = 0;
            while (class_of(c, pos + spaces, to) == SPACE) spaces++;
            if (spaces > 1 && pos + spaces < to) pos += spaces - 1;   /* \s+(?!\S): leave one for the word */
            else if (spaces > 0) pos += spaces;
            else pos++;
        }
        s = emit_word(t, c, start, pos, out);
    }
    return s;
}

/* \p{N}: every number code point a piece of its own, the runs between too. */
static tf_status digit_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    tf_status s = TF_OK;
    size_t run = from;
    for (size_t i = from; i < to && s == TF_OK; i++) {
        if (!is_number(c->cp[i])) continue;
        if (run < i) s = gpt2_split(t, c, run, i, out);
        if (s == TF_OK) s = gpt2_split(t, c, i, i + 1, out);
        run = i + 1;
    }
    if (s == TF_OK && run < to) s = gpt2_split(t, c, run, to, out);
    return s;
}

static bool is_cr_or_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* Llama 3's pattern, with digits in runs of at most max_digits (Qwen2: 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * over code points [from, to), as llama.cpp's hand-written matcher reads it. */
static tf_status llama3_like_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out,
                                   size_t max_digits) {
    tf_status s = TF_OK;
    for (size_t pos = from; pos < to && s == TF_OK;) {
        size_t start = pos;
        uint32_t cp = c->cp[pos];
        int cls = class_of(c, pos, to);
        uint32_t next = pos + 1 < to ? c->cp[pos + 1] : 0;
        uint32_t lower = next >= 'A' && next <= 'Z' ? next + 32 : next;
        uint32_t lower2 = pos + 2 < to ? (c->cp[pos + 2] >= 'A' && c->cp[pos + 2] <= 'Z' ? c->cp[pos + 2] + 32 : c->cp[pos + 2]) : 0;
        if (cp == '\'' && pos + 1 < to && (lower == 's' || lower == 't' || lower == 'm' || lower == 'd')) {
            pos += 2;
        } else if (cp == '\'' && pos + 2 < to && ((lower == 'r' && lower2 == 'e') || (lower == 'v' && lower2 == 'e') ||
                                                   (lower == 'l' && lower2 == 'l'))) {
            pos += 3;
        } else if (!is_cr_or_lf(cp) && cls != NUMBER && (cls == LETTER || class_of(c, pos + 1, to) == LETTER)) {
            pos++;                                          /* one optional lead, then letters */
            while (class_of(c, pos, to) == LETTER) pos++;
        } else if (cls == NUMBER) {
            while (pos < to && class_of(c, pos, to) == NUMBER && pos - start < max_digits) pos++;
        } else if ((cp == ' ' ? class_of(c, pos + 1, to) : cls) == OTHER) {
            pos += cp == ' ';
            while (class_of(c, pos, to) == OTHER) pos++;
            while (pos < to && is_cr_or_lf(c->cp[pos])) pos++;
        } else {
            size_t spaces = 0, last_newline_end = 0;
            for (; class_of(c, pos + spaces, to) == SPACE; spaces++)
                if (is_cr_or_lf(c->cp[pos + spaces])) last_newline_end = pos + spaces + 1;
            if (last_newline_end) pos = last_newline_end;                 /* \s*[\r\n]+ */
            else if (spaces > 1 && pos + spaces < to) pos += spaces - 1;  /* \s+(?!\S) */
            else if (spaces > 0) pos += spaces;                           /* \s+ */
            else pos++;
        }
        s = emit_word(t, c, start, pos, out);
    }
    return s;
}

/* tekken's pattern as llama.cpp runs it (its regex with \p{Lu}... read as
 * "a letter but a-z" and "a letter but A-Z", so a letter outside ASCII is
 * both):  P?U*L+ | P?U+L* | \p{N} | ' '?[^\s\p{L}\p{N}]+[\r\n/]* |
 * \s*[\r\n]+ | \s+(?!\S) | \s+   with P = [^\r\n\p{L}\p{N}], tried in
 * that order with the regex's backtracking. */
static bool is_upperish(const cps *c, size_t i, size_t to) {
    return i < to && class_of(c, i, to) == LETTER && !(c->cp[i] >= 'a' && c->cp[i] <= 'z');
}
static bool is_lowerish(const cps *c, size_t i, size_t to) {
    return i < to && class_of(c, i, to) == LETTER && !(c->cp[i] >= 'A' && c->cp[i] <= 'Z');
}

/* The end of P?U*L+ (or P?U+L* when upper_first) from pos, or 0 for no match. */
static size_t case_run(const cps *c, size_t pos, size_t to, bool upper_first) {
    size_t starts[2] = {pos, pos}, n_starts = 1;
    uint32_t cp = c->cp[pos];
    int cls = class_of(c, pos, to);
    if (cp != '\r' && cp != '\n' && cls != LETTER && cls != NUMBER) starts[n_starts++] = pos + 1;   /* P taken first */
    for (size_t k = n_starts; k-- > 0;) {            /* the optional P greedy: with it first, then without */
        size_t at = starts[k], u = at;
        while (is_upperish(c, u, to)) u++;
        if (upper_first) {
            if (u == at) continue;                   /* U+ */
            size_t end = u;
            while (is_lowerish(c, end, to)) end++;
            return end;
        }
        for (size_t split = u + 1; split-- > at;) {  /* U* gives back until L+ can start */
            if (!is_lowerish(c, split, to)) continue;
            size_t end = split;
            while (is_lowerish(c, end, to)) end++;
            return end;
        }
    }
    return 0;
}

static tf_status tekken_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    tf_status s = TF_OK;
    for (size_t pos = from; pos < to && s == TF_OK;) {
        size_t start = pos, end;
        uint32_t cp = c->cp[pos];
        int cls = class_of(c, pos, to);
        if ((end = case_run(c, pos, to, false)) || (end = case_run(c, pos, to, true))) {
            pos = end;
        } else if (cls == NUMBER) {
            pos++;
        } else if ((cp == ' ' ? class_of(c, pos + 1, to) : cls) == OTHER) {
            pos += cp == ' ';
            while (class_of(c, pos, to) == OTHER) pos++;
            while (pos < to && (is_cr_or_lf(c->cp[pos]) || c->cp[pos] == '/')) pos++;
        } else {
            size_t spaces = 0, last_newline_end = 0;
            for (; class_of(c, pos + spaces, to) == SPACE; spaces++)
                if (is_cr_or_lf(c->cp[pos + spaces])) last_newline_end = pos + spaces + 1;
            if (last_newline_end) pos = last_newline_end;
            else if (spaces > 1 && pos + spaces < to) pos += spaces - 1;
            else if (spaces > 0) pos += spaces;
            else pos++;
        }
        s = emit_word(t, c, start, pos, out);
    }
    return s;
}

static tf_status llama3_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    return llama3_like_split(t, c, from, to, out, 3);
}

static tf_status qwen2_split(const llm_tokenizer *t, const cps *c, size_t from, size_t to, id_list *out) {
    return llama3_like_split(t, c, from, to, out, 1);
}

static tf_status tokenize_fragment(const llm_tokenizer *t, const char *text, size_t len, id_list *out) {
    cps c = {malloc((len + 1) * sizeof *c.cp), NULL, 0};
    if (!c.cp) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    for (size_t i = 0, used; i < len; i += used) c.cp[c.n++] = utf8_next((const unsigned char *)text + i, len - i, &used);
    word_fn split = t->pre == PRE_DIGITS ? digit_split : t->pre == PRE_LLAMA3 ? llama3_split
                  : t->pre == PRE_QWEN2 ? qwen2_split : t->pre == PRE_TEKKEN ? tekken_split : gpt2_split;
    tf_status s = split(t, &c, 0, c.n, out);
    free(c.cp);
    return s;
}

/* ---- SentencePiece ----------------------------------------------------------- */

/* llama.cpp's SentencePiece tokenization of one fragment: the text (with
 * its spaces as U+2581) is split into UTF-8 characters, then the adjacent
 * pair whose concatenation is a piece of the highest score (the leftmost
 * on ties) is merged, again and again; a final symbol that is no piece is
 * written as byte tokens. */
typedef struct spm_symbol {
    size_t at, n;          /* bytes of the escaped text; n 0: merged away */
    int prev, next;
} spm_symbol;

typedef struct spm_pair {
    float score;
    int left, right;
    size_t n;              /* the merged length when offered: stale when it changed */
} spm_pair;

static bool spm_before(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void spm_push(spm_pair *heap, int *n, spm_pair p) {
    int i = (*n)++;
    for (; i > 0 && spm_before(&p, &heap[(i - 1) / 2]); i = (i - 1) / 2) heap[i] = heap[(i - 1) / 2];
    heap[i] = p;
}

static spm_pair spm_pop(spm_pair *heap, int *n) {
    spm_pair top = heap[0], last = heap[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && spm_before(&heap[c + 1], &heap[c])) c++;
        if (!spm_before(&heap[c], &last)) break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

static void spm_offer(const llm_tokenizer *t, const char *text, const spm_symbol *sym, int left, int right,
                      spm_pair *heap, int *n_heap) {
    if (left < 0 || right < 0) return;
    size_t n = sym[left].n + sym[right].n;
    int32_t id = map_find(t, text + sym[left].at, n);
    if (id < 0) return;
    spm_push(heap, n_heap, (spm_pair){t->scores[id], left, right, n});
}

static tf_status spm_fragment(const llm_tokenizer *t, const char *text, size_t len, id_list *out) {
    spm_symbol *sym = malloc((len + 1) * sizeof *sym);
    spm_pair *heap = malloc((3 * len + 1) * sizeof *heap);    /* each merge offers at most two pairs */
    tf_status s = sym && heap ? TF_OK : llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    int n_sym = 0, n_heap = 0;
    for (size_t at = 0; s == TF_OK && at < len; n_sym++) {
        unsigned char lead = (unsigned char)text[at];
        size_t k = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (k > len - at) k = len - at;
        sym[n_sym] = (spm_symbol){at, k, n_sym - 1, at + k < len ? n_sym + 1 : -1};
        at += k;
    }
    for (int i = 1; s == TF_OK && i < n_sym; i++) spm_offer(t, text, sym, i - 1, i, heap, &n_heap);
    while (s == TF_OK && n_heap > 0) {
        spm_pair p = spm_pop(heap, &n_heap);
        spm_symbol *l = &sym[p.left], *r = &sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.n || l->next != p.right) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        spm_offer(t, text, sym, l->prev, p.left, heap, &n_heap);
        spm_offer(t, text, sym, p.left, l->next, heap, &n_heap);
    }
    for (int i = 0; s == TF_OK && n_sym > 0 && i != -1; i = sym[i].next) {
        int32_t id = map_find(t, text + sym[i].at, sym[i].n);
        if (id >= 0) {
            s = push(out, id);
            continue;
        }
        for (size_t j = 0; s == TF_OK && j < sym[i].n; j++) {         /* byte fallback */
            int32_t b = t->byte_token[(unsigned char)text[sym[i].at + j]];
            if (b >= 0) s = push(out, b);
        }
    }
    free(sym);
    free(heap);
    return s;
}

/* A fragment with its spaces as U+2581, after the space SentencePiece puts
 * before the text and after each special token (when the file asks). */
static tf_status spm_tokenize_fragment(const llm_tokenizer *t, const char *text, size_t len, bool after_special,
                                       id_list *out) {
    bool prefix = t->strip_space_prefix && after_special;
    size_t spaces = prefix;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *escaped = malloc(len + 2 * spaces + 1);
    if (!escaped) return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    size_t n = 0;
    if (prefix) memcpy(escaped, "\xe2\x96\x81", 3), n = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(escaped + n, "\xe2\x96\x81", 3), n += 3;
        else escaped[n++] = text[i];
    }
    tf_status s = spm_fragment(t, escaped, n, out);
    free(escaped);
    return s;
}

/* ---- control tokens in the text ---------------------------------------- */

/* The earliest occurrence in text[0..len) of any special token, preferring
 * the longest at the same place (llama.cpp cuts the longest tokens out
 * first, which gives the same pieces for the tokens real vocabularies have). */
static int32_t next_special(const llm_tokenizer *t, const char *text, size_t len, size_t *at) {
    int32_t best = -1;
    size_t best_at = len;
    for (int k = 0; k < t->n_specials; k++) {
        const token *tok = &t->tokens[t->specials[k]];
        for (size_t i = 0; i + tok->len <= len && i < best_at; i++) {
            if (text[i] != tok->text[0] || memcmp(text + i, tok->text, tok->len) != 0) continue;
            best = t->specials[k];
            best_at = i;
            break;
        }
    }
    *at = best_at;
    return best;
}

tf_status llm_tokenize(const llm_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                       int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len)) return llm_fail(TF_ERR_INVALID_ARGUMENT, "tokenize: NULL argument");
    id_list out = {0};
    tf_status s = add_bos && t->bos >= 0 ? push(&out, t->bos) : TF_OK;
    bool after_special = true;
    while (s == TF_OK && len > 0) {
        size_t at = len;
        int32_t special = parse_special ? next_special(t, text, len, &at) : -1;
        if (at > 0)
            s = t->spm ? spm_tokenize_fragment(t, text, at, after_special, &out) : tokenize_fragment(t, text, at, &out);
        after_special = false;
        if (s != TF_OK || special < 0) break;
        after_special = true;
        s = push(&out, special);
        text += at + t->tokens[special].len;
        len -= at + t->tokens[special].len;
    }
    if (s != TF_OK) {
        free(out.ids);
        return s;
    }
    *ids = out.ids;
    *n = out.n;
    return TF_OK;
}

tf_status llm_tokenize_special(const llm_tokenizer *t, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t **ids, int64_t *n) {
    tf_status s = llm_tokenize(t, text, len, add_special && t->add_bos, parse_special, ids, n);
    if (s != TF_OK || !add_special || !t->add_eos || t->eos < 0) return s;
    int32_t *grown = realloc(*ids, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) {
        free(*ids);
        *ids = NULL;
        *n = 0;
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "tokenize: out of memory");
    }
    grown[(*n)++] = t->eos;
    *ids = grown;
    return TF_OK;
}

const char *llm_token_bytes(const llm_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_tokens) {
        *len = 0;
        return "";
    }
    *len = t->tokens[id].nbytes;
    return t->tokens[id].bytes;
}

tf_status llm_detokenize(const llm_tokenizer *t, const int32_t *ids, int64_t n, char **out, size_t *len) {
    size_t total = 0;
    int64_t first = n > 0 && t->add_bos && ids[0] == t->bos ? 1 : 0;     /* the BOS tokenizing added */
    for (int64_t i = first; i < n; i++) total += ids[i] >= 0 && ids[i] < t->n_tokens ? t->tokens[ids[i]].nbytes : 0;
    char *text = malloc(total + 1);
    if (!text) return llm_fail(TF_ERR_OUT_OF_MEMORY, "detokenize: out of memory");
    size_t at = 0;
    for (int64_t i = first; i < n; i++) {
        size_t k;
        const char *b = llm_token_bytes(t, ids[i], &k);
        memcpy(text + at, b, k);
        at += k;
    }
    text[at] = 0;
    size_t skip = t->strip_space_prefix && at > 0 && text[0] == ' ' ? 1 : 0;   /* SentencePiece's added space */
    memmove(text, text + skip, at - skip + 1);
    *out = text;
    *len = at - skip;
    return TF_OK;
}

int64_t llm_vocab_size(const llm_tokenizer *t) { return t->n_tokens; }
int llm_token_type(const llm_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_tokens ? t->tokens[id].type : -1; }
bool llm_tokenizer_is_spm(const llm_tokenizer *t) { return t->spm; }
int32_t llm_token_bos(const llm_tokenizer *t) { return t->bos; }
int32_t llm_token_eos(const llm_tokenizer *t) { return t->eos; }
bool llm_add_bos(const llm_tokenizer *t) { return t->add_bos; }
int32_t llm_token_id(const llm_tokenizer *t, const char *text, size_t len) { return map_find(t, text, len); }

bool llm_token_is_end(const llm_tokenizer *t, int32_t id) {
    if (id == t->eos) return true;
    if (id < 0 || id >= t->n_tokens || t->tokens[id].type != 3) return false;
    static const char *const enders[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof enders / sizeof enders[0]; i++)
        if (strcmp(t->tokens[id].text, enders[i]) == 0) return true;
    return false;
}
