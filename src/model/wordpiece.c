/* BERT's WordPiece tokenizer; see wordpiece.h. */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "wordpiece.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"          /* llm_fail */
#include "unicode_bert.h"

#define MAX_WORD_CHARS 100      /* the tokenizers package's max_input_chars_per_word */

typedef struct piece {
    char *text;                 /* the piece without "##" or U+2581 */
    size_t len;
    char *bytes;                /* what it stands for: " text" for a word's first piece */
    size_t nbytes;
    int kind;                   /* START, CONTINUATION or SPECIAL */
} piece;

enum { START, CONTINUATION, SPECIAL };

struct llm_wordpiece {
    piece *pieces;
    int64_t n;
    int32_t *slots;             /* open addressing over (kind, text); -1 empty */
    size_t mask;
    int32_t unk, cls, sep;
    int32_t specials[8];
    int n_specials;
    bool lowercase;
};

/* ---- the vocabulary ---------------------------------------------------------- */

static uint64_t hash_piece(int kind, const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)kind;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int32_t find(const llm_wordpiece *w, int kind, const char *s, size_t n) {
    for (size_t i = hash_piece(kind, s, n) & w->mask;; i = (i + 1) & w->mask) {
        int32_t id = w->slots[i];
        if (id < 0) return -1;
        const piece *p = &w->pieces[id];
        if (p->kind == kind && p->len == n && !memcmp(p->text, s, n)) return id;
    }
}

static void insert(llm_wordpiece *w, int32_t id) {
    const piece *p = &w->pieces[id];
    size_t i = hash_piece(p->kind, p->text, p->len) & w->mask;
    while (w->slots[i] >= 0) {
        if (w->pieces[w->slots[i]].kind == p->kind && w->pieces[w->slots[i]].len == p->len &&
            !memcmp(w->pieces[w->slots[i]].text, p->text, p->len))
            return;                       /* a duplicate keeps the first id, as a dict built in order would */
        i = (i + 1) & w->mask;
    }
    w->slots[i] = id;
}

static bool is_special_text(const char *s, size_t n) {
    static const char *const names[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (n == strlen(names[i]) && !memcmp(s, names[i], n)) return true;
    return false;
}

/* Piece i from its vocabulary text: vocab.txt marks continuations with
 * "##"; a GGUF marks a word's first piece with U+2581 instead. */
static tf_status add_piece(llm_wordpiece *w, int64_t i, const char *s, size_t n, bool gguf_form) {
    piece *p = &w->pieces[i];
    if (is_special_text(s, n)) p->kind = SPECIAL;
    else if (gguf_form) p->kind = n >= 3 && !memcmp(s, "\xe2\x96\x81", 3) ? START : CONTINUATION;
    else p->kind = n > 2 && !memcmp(s, "##", 2) ? CONTINUATION : START;
    size_t skip = p->kind == SPECIAL ? 0 : gguf_form ? (p->kind == START ? 3 : 0) : (p->kind == CONTINUATION ? 2 : 0);
    p->len = n - skip;
    p->nbytes = p->len + (p->kind == START);
    p->text = malloc(p->len + 1);
    p->bytes = malloc(p->nbytes + 1);
    if (!p->text || !p->bytes) return llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
    memcpy(p->text, s + skip, p->len);
    p->text[p->len] = 0;
    p->bytes[0] = ' ';
    memcpy(p->bytes + (p->kind == START), p->text, p->len + 1);
    if (p->kind == SPECIAL && w->n_specials < 8) w->specials[w->n_specials++] = (int32_t)i;
    return TF_OK;
}

static tf_status alloc_vocab(llm_wordpiece *w, int64_t n) {
    if (n <= 0 || n > (1 << 24)) return llm_fail(TF_ERR_FORMAT, "wordpiece: %lld pieces", (long long)n);
    size_t size = 16;
    while (size < (size_t)n * 2) size *= 2;
    w->pieces = calloc((size_t)n, sizeof *w->pieces);
    w->slots = malloc(size * sizeof *w->slots);
    if (!w->pieces || !w->slots) return llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
    memset(w->slots, 0xFF, size * sizeof *w->slots);
    w->mask = size - 1;
    w->n = n;
    return TF_OK;
}

static tf_status finish(llm_wordpiece *w) {
    for (int64_t i = 0; i < w->n; i++) insert(w, (int32_t)i);
    w->unk = find(w, SPECIAL, "[UNK]", 5);
    w->cls = find(w, SPECIAL, "[CLS]", 5);
    w->sep = find(w, SPECIAL, "[SEP]", 5);
    if (w->unk < 0) return llm_fail(TF_ERR_FORMAT, "wordpiece: the vocabulary has no [UNK]");
    return TF_OK;
}

tf_status llm_wordpiece_load_txt(const char *path, bool lowercase, llm_wordpiece **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return llm_fail(TF_ERR_IO, "wordpiece: cannot open %s", path);
    llm_wordpiece *w = calloc(1, sizeof *w);
    char *all = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    tf_status s = w ? TF_OK : llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
    if (s == TF_OK && (size <= 0 || size > (1l << 28))) s = llm_fail(TF_ERR_FORMAT, "wordpiece: %s is empty or too big", path);
    if (s == TF_OK && !(all = malloc((size_t)size + 1))) s = llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
    if (s == TF_OK && (fseek(f, 0, SEEK_SET) != 0 || fread(all, 1, (size_t)size, f) != (size_t)size))
        s = llm_fail(TF_ERR_IO, "wordpiece: reading %s", path);
    fclose(f);
    int64_t lines = 0;
    for (long i = 0; s == TF_OK && i < size; i++) lines += all[i] == '\n';
    if (s == TF_OK && size > 0 && all[size - 1] != '\n') lines++;
    if (s == TF_OK) s = alloc_vocab(w, lines);
    int64_t i = 0;
    for (char *line = all, *end; s == TF_OK && i < lines; line = end + 1, i++) {
        end = memchr(line, '\n', (size_t)(all + size - line));
        if (!end) end = all + size;
        size_t n = (size_t)(end - line);
        if (n && line[n - 1] == '\r') n--;
        s = add_piece(w, i, line, n, false);
    }
    free(all);
    if (w) w->lowercase = lowercase;
    if (s == TF_OK) s = finish(w);
    if (s != TF_OK) {
        llm_wordpiece_free(w);
        return s;
    }
    *out = w;
    return TF_OK;
}

tf_status llm_wordpiece_load_gguf(const tf_gguf *f, llm_wordpiece **out) {
    *out = NULL;
    int64_t k = tf_gguf_find_key(f, "tokenizer.ggml.tokens");
    if (k < 0 || tf_gguf_array_type(f, k) != TF_GGUF_STRING)
        return llm_fail(TF_ERR_FORMAT, "wordpiece: the file has no tokenizer.ggml.tokens strings");
    llm_wordpiece *w = calloc(1, sizeof *w);
    tf_status s = w ? alloc_vocab(w, tf_gguf_array_length(f, k)) : llm_fail(TF_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; s == TF_OK && i < w->n; i++) {
        const char *text;
        size_t len;
        if ((s = tf_gguf_get_string(f, k, i, &text, &len)) != TF_OK) s = llm_fail(s, "wordpiece: token %lld", (long long)i);
        else s = add_piece(w, i, text, len, true);
    }
    if (w) w->lowercase = true;             /* llama.cpp's WPM lowercases, as the uncased models it converts */
    if (s == TF_OK) s = finish(w);
    if (s != TF_OK) {
        llm_wordpiece_free(w);
        return s;
    }
    *out = w;
    return TF_OK;
}

void llm_wordpiece_free(llm_wordpiece *w) {
    if (!w) return;
    for (int64_t i = 0; w->pieces && i < w->n; i++) {
        free(w->pieces[i].text);
        free(w->pieces[i].bytes);
    }
    free(w->pieces);
    free(w->slots);
    free(w);
}

/* ---- normalization ------------------------------------------------------------- */

static bool in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

#define IN(table, cp) in_ranges(cp, table, sizeof table / sizeof table[0])

/* Unicode's White_Space, as Rust's char::is_whitespace. */
static bool is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == ' ' || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_punctuation(uint32_t c) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126) ||
           IN(llm_punctuation_ranges, c);
}

/* A code point's mapping in a sorted table, or NULL. */
#define LOOKUP(table, c)                                                                    \
    do {                                                                                    \
        size_t lo_ = 0, hi_ = sizeof table / sizeof table[0];                               \
        while (lo_ < hi_) {                                                                 \
            size_t mid_ = (lo_ + hi_) / 2;                                                  \
            if (table[mid_].cp == (c)) return table[mid_].to;                               \
            if (table[mid_].cp < (c)) lo_ = mid_ + 1;                                       \
            else hi_ = mid_;                                                                \
        }                                                                                   \
        return NULL;                                                                        \
    } while (0)

static const uint32_t *nfd_of(uint32_t c) { LOOKUP(llm_nfd_map, c); }
static const uint32_t *lower_of(uint32_t c) { LOOKUP(llm_lower_map, c); }

typedef struct cps {
    uint32_t *v;
    size_t n, cap;
    bool failed;
} cps;

static void put(cps *o, uint32_t c) {
    if (o->failed) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        uint32_t *grown = realloc(o->v, cap * sizeof *grown);
        if (!grown) {
            o->failed = true;
            return;
        }
        o->v = grown;
        o->cap = cap;
    }
    o->v[o->n++] = c;
}

/* NFD of c with the nonspacing marks dropped, then lowercased. */
static void strip_and_lower(cps *o, uint32_t c, bool lowercase) {
    uint32_t parts[4] = {c, 0, 0, 0};
    int n = 1;
    if (!lowercase) {
        put(o, c);
        return;
    }
    if (c >= 0xAC00 && c <= 0xD7A3) {             /* Hangul syllables decompose by rule */
        uint32_t s = c - 0xAC00;
        parts[0] = 0x1100 + s / 588;
        parts[1] = 0x1161 + (s % 588) / 28;
        parts[2] = 0x11A7 + s % 28;
        n = s % 28 ? 3 : 2;
    } else if (nfd_of(c)) {
        const uint32_t *d = nfd_of(c);
        for (n = 0; n < 4 && d[n]; n++) parts[n] = d[n];
    }
    for (int i = 0; i < n; i++) {
        if (IN(llm_nonspacing_mark_ranges, parts[i])) continue;
        const uint32_t *lo = lower_of(parts[i]);
        if (!lo) put(o, parts[i]);
        for (int j = 0; lo && j < 2 && lo[j]; j++) put(o, lo[j]);
    }
}

static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    static const unsigned char len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    size_t k = len_of[s[0] >> 4];
    if (k == 0 || k > n) return *cp = 0xFFFD, 1;
    uint32_t v = k == 1 ? s[0] : s[0] & (0xFF >> (k + 1));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return *cp = 0xFFFD, 1;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    *cp = v < min_of[k] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) ? 0xFFFD : v;
    return k;
}

static size_t utf8_encode(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3F)), o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (char)(0x80 | (c >> 6 & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* BertNormalizer over a fragment: code points, cleaned, CJK spaced, accents stripped and lowercased. */
static void normalize(const llm_wordpiece *w, const char *text, size_t len, cps *o) {
    for (size_t i = 0, k; i < len; i += k) {
        uint32_t c;
        k = utf8_decode((const unsigned char *)text + i, len - i, &c);
        if (c == 0 || c == 0xFFFD) continue;
        if (c == '\t' || c == '\n' || c == '\r' || is_whitespace(c)) {
            put(o, ' ');
            continue;
        }
        if (IN(llm_other_ranges, c)) continue;
        if (is_cjk(c)) {
            put(o, ' ');
            put(o, c);
            put(o, ' ');
            continue;
        }
        strip_and_lower(o, c, w->lowercase);
    }
}

/* ---- words and pieces ------------------------------------------------------------ */

typedef struct ids {
    int32_t *v;
    int64_t n, cap;
} ids;

static tf_status push(ids *l, int32_t id) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 64;
        int32_t *grown = realloc(l->v, (size_t)cap * sizeof *grown);
        if (!grown) return llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return TF_OK;
}

/* One word's pieces: the longest match from each point, "##" after the
 * first; any gap makes the whole word [UNK]. */
static tf_status word_pieces(const llm_wordpiece *w, const uint32_t *c, size_t n, ids *out) {
    if (n > MAX_WORD_CHARS) return push(out, w->unk);
    char bytes[4 * MAX_WORD_CHARS + 4];
    size_t at[MAX_WORD_CHARS + 1];
    at[0] = 0;
    for (size_t i = 0; i < n; i++) at[i + 1] = at[i] + utf8_encode(c[i], bytes + at[i]);
    int64_t mark = out->n;
    tf_status s = TF_OK;
    for (size_t start = 0; s == TF_OK && start < n;) {
        int32_t id = -1;
        size_t end = n;
        for (; end > start && id < 0; end--) id = find(w, start ? CONTINUATION : START, bytes + at[start], at[end] - at[start]);
        if (id < 0) {
            out->n = mark;
            return push(out, w->unk);
        }
        s = push(out, id);
        start = end + 1;
    }
    return s;
}

/* BertPreTokenizer then WordPiece over normalized code points. */
static tf_status fragment(const llm_wordpiece *w, const char *text, size_t len, ids *out) {
    cps c = {0};
    normalize(w, text, len, &c);
    if (c.failed) {
        free(c.v);
        return llm_fail(TF_ERR_OUT_OF_MEMORY, "wordpiece: out of memory");
    }
    tf_status s = TF_OK;
    size_t word = 0;
    for (size_t i = 0; s == TF_OK && i <= c.n; i++) {
        bool end = i == c.n, space = !end && c.v[i] == ' ', punct = !end && is_punctuation(c.v[i]);
        if (!(end || space || punct)) continue;
        if (i > word) s = word_pieces(w, c.v + word, i - word, out);
        if (s == TF_OK && punct) s = word_pieces(w, c.v + i, 1, out);
        word = i + 1;
    }
    free(c.v);
    return s;
}

/* The earliest special token written in text, or -1. */
static int32_t next_special(const llm_wordpiece *w, const char *text, size_t len, size_t *at) {
    int32_t best = -1;
    *at = len;
    for (int k = 0; k < w->n_specials; k++) {
        const piece *p = &w->pieces[w->specials[k]];
        for (size_t i = 0; i + p->len <= len && i < *at; i++)
            if (!memcmp(text + i, p->text, p->len)) {
                best = w->specials[k];
                *at = i;
                break;
            }
    }
    return best;
}

tf_status llm_wordpiece_tokenize(const llm_wordpiece *w, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t **out_ids, int64_t *n) {
    *out_ids = NULL;
    *n = 0;
    if (!text && len) return llm_fail(TF_ERR_INVALID_ARGUMENT, "wordpiece: no text");
    ids out = {0};
    tf_status s = add_special && w->cls >= 0 ? push(&out, w->cls) : TF_OK;
    while (s == TF_OK && len > 0) {
        size_t at = len;
        int32_t special = parse_special ? next_special(w, text, len, &at) : -1;
        if (at > 0) s = fragment(w, text, at, &out);
        if (s != TF_OK || special < 0) break;
        s = push(&out, special);
        text += at + w->pieces[special].len;
        len -= at + w->pieces[special].len;
    }
    if (s == TF_OK && add_special && w->sep >= 0) s = push(&out, w->sep);
    if (s != TF_OK) {
        free(out.v);
        return s;
    }
    *out_ids = out.v;
    *n = out.n;
    return TF_OK;
}

const char *llm_wordpiece_token_bytes(const llm_wordpiece *w, int32_t id, size_t *len) {
    if (id < 0 || id >= w->n) return *len = 0, "";
    *len = w->pieces[id].nbytes;
    return w->pieces[id].bytes;
}

int64_t llm_wordpiece_size(const llm_wordpiece *w) { return w->n; }
int32_t llm_wordpiece_cls(const llm_wordpiece *w) { return w->cls; }
int32_t llm_wordpiece_sep(const llm_wordpiece *w) { return w->sep; }
