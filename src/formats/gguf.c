/* GGUF (versions 2 and 3), the file format of llama.cpp: a header, typed
 * metadata, tensor infos, then aligned tensor data. The file is mapped and
 * read in place; every count, length, offset and size is checked against
 * the bytes that are actually there before anything is allocated from it,
 * so a hostile file is TF_ERR_FORMAT with a message, never a crash or a
 * multi-gigabyte allocation. Keys and tensor names are copied (NUL-ended);
 * values are read from the mapping when asked for. */
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "formats.h"

#define GGUF_MAX_DIMS 4                 /* ggml's GGML_MAX_DIMS */
#define GGUF_DEFAULT_ALIGNMENT 32u

/* ggml's block types: id, name, elements per block, bytes per block. The
 * ids are ggml's (the file stores them); a gap is a retired or unknown id. */
typedef struct block_type { const char *name; uint32_t block, bytes; } block_type;
static const block_type block_types[] = {
    [0] = {"F32", 1, 4},      [1] = {"F16", 1, 2},       [2] = {"Q4_0", 32, 18},   [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},   [7] = {"Q5_1", 32, 24},    [8] = {"Q8_0", 32, 34},   [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84}, [11] = {"Q3_K", 256, 110}, [12] = {"Q4_K", 256, 144}, [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210}, [15] = {"Q8_K", 256, 292}, [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18}, [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82}, [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},     [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},     [27] = {"I64", 1, 8},      [28] = {"F64", 1, 8},     [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},     [34] = {"TQ1_0", 256, 54}, [35] = {"TQ2_0", 256, 66}, [39] = {"MXFP4", 32, 17},
};
#define N_BLOCK_TYPES (sizeof block_types / sizeof *block_types)

static const block_type *block_type_of(uint32_t id) {
    return id < N_BLOCK_TYPES && block_types[id].name ? &block_types[id] : NULL;
}

/* Bytes of one scalar value type; 0 for string and array (variable). */
static size_t scalar_size(uint32_t t) {
    static const unsigned char sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sizes ? sizes[t] : 0;
}

typedef struct gguf_kv {
    char *key;
    tf_gguf_type type;
    tf_gguf_type elem_type;             /* type for a scalar, element type for an array */
    uint64_t count;                     /* 1 for a scalar */
    const unsigned char *value;         /* the first element, in the mapping */
    const unsigned char **strings;      /* each element of a string array (NULL otherwise) */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    uint32_t type;
    int ndim;
    int64_t shape[GGUF_MAX_DIMS];       /* outermost first (ggml's ne, reversed) */
    uint64_t offset;                    /* from the start of the data section */
    uint64_t nbytes;
} gguf_tensor;

struct tf_gguf {
    tf__mapped_file map;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;                /* file offset of the data section */
    int64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    char path[1024];
};

/* A cursor over the mapped bytes; every read checks what is left. */
typedef struct reader {
    const unsigned char *p, *end;
    const char *path;
} reader;

static tf_status bad(const reader *r, const char *what) {
    return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: %s", r->path, what);
}

static bool take(reader *r, size_t n, const unsigned char **at) {
    if ((size_t)(r->end - r->p) < n) return false;
    *at = r->p;
    r->p += n;
    return true;
}

static uint64_t le(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | p[i];
    return v;
}

static bool read_u32(reader *r, uint32_t *v) {
    const unsigned char *p;
    if (!take(r, 4, &p)) return false;
    *v = (uint32_t)le(p, 4);
    return true;
}

static bool read_u64(reader *r, uint64_t *v) {
    const unsigned char *p;
    if (!take(r, 8, &p)) return false;
    *v = le(p, 8);
    return true;
}

/* A gguf_string: u64 length, then that many bytes (no NUL). */
static bool read_string(reader *r, const unsigned char **s, uint64_t *len) {
    return read_u64(r, len) && *len <= (uint64_t)(r->end - r->p) && take(r, (size_t)*len, s);
}

static char *copy_string(const unsigned char *s, uint64_t len) {
    char *c = tf__malloc((size_t)len + 1);
    if (!c) return NULL;
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    return c;
}

static tf_status out_of_memory(void) { return tf__error(TF_ERR_OUT_OF_MEMORY, "tf_gguf_open: out of memory"); }

/* An array's elements: scalars are skipped as one block (after checking
 * they fit), strings are walked and remembered for random access. */
static tf_status read_array(reader *r, gguf_kv *kv) {
    uint32_t et;
    if (!read_u32(r, &et) || !read_u64(r, &kv->count)) return bad(r, "truncated array header");
    if (et == TF_GGUF_ARRAY) return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: key '%s' is an array of arrays", r->path, kv->key);
    if (et != TF_GGUF_STRING && !scalar_size(et))
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: key '%s' has unknown element type %u", r->path, kv->key, et);
    kv->elem_type = (tf_gguf_type)et;
    kv->value = r->p;
    size_t left = (size_t)(r->end - r->p);
    size_t min_size = et == TF_GGUF_STRING ? 8 : scalar_size(et);
    if (kv->count > left / min_size)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: key '%s' claims %llu elements, the file holds at most %zu",
                         r->path, kv->key, (unsigned long long)kv->count, left / min_size);
    if (et != TF_GGUF_STRING) {
        r->p += (size_t)kv->count * min_size;
        return TF_OK;
    }
    kv->strings = tf__malloc(sizeof *kv->strings * (size_t)(kv->count ? kv->count : 1));
    if (!kv->strings) return out_of_memory();
    for (uint64_t i = 0; i < kv->count; i++) {
        const unsigned char *s;
        uint64_t len;
        kv->strings[i] = r->p;
        if (!read_string(r, &s, &len))
            return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: string %llu of key '%s' runs past the end", r->path,
                             (unsigned long long)i, kv->key);
    }
    return TF_OK;
}

static tf_status read_kv(reader *r, gguf_kv *kv) {
    const unsigned char *key;
    uint64_t len;
    uint32_t type;
    if (!read_string(r, &key, &len)) return bad(r, "a metadata key runs past the end");
    if (len == 0) return bad(r, "a metadata key is empty");
    if (memchr(key, 0, (size_t)len)) return bad(r, "a metadata key holds a NUL byte");
    if (!(kv->key = copy_string(key, len))) return out_of_memory();
    if (!read_u32(r, &type)) return bad(r, "truncated metadata value type");
    kv->type = (tf_gguf_type)type;
    kv->count = 1;
    kv->elem_type = (tf_gguf_type)type;
    if (type == TF_GGUF_ARRAY) return read_array(r, kv);
    kv->value = r->p;
    if (type == TF_GGUF_STRING) {
        const unsigned char *s;
        if (!read_string(r, &s, &len))
            return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: the string of key '%s' runs past the end", r->path, kv->key);
        return TF_OK;
    }
    const unsigned char *v;
    if (!scalar_size(type))
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: key '%s' has unknown value type %u", r->path, kv->key, type);
    if (!take(r, scalar_size(type), &v))
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: the value of key '%s' runs past the end", r->path, kv->key);
    return TF_OK;
}

static tf_status read_tensor_info(reader *r, gguf_tensor *t) {
    const unsigned char *name;
    uint64_t len;
    uint32_t ndim;
    if (!read_string(r, &name, &len)) return bad(r, "a tensor name runs past the end");
    if (memchr(name, 0, (size_t)len)) return bad(r, "a tensor name holds a NUL byte");
    if (!(t->name = copy_string(name, len))) return out_of_memory();
    if (!read_u32(r, &ndim)) return bad(r, "truncated tensor info");
    if (ndim == 0 || ndim > GGUF_MAX_DIMS)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' has %u dimensions (1 to %d allowed)", r->path,
                         t->name, ndim, GGUF_MAX_DIMS);
    t->ndim = (int)ndim;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t ne;
        if (!read_u64(r, &ne)) return bad(r, "truncated tensor dimensions");
        if (ne > (uint64_t)INT64_MAX || (ne && numel > (uint64_t)INT64_MAX / ne))
            return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' has an overflowing element count", r->path, t->name);
        numel *= ne;
        t->shape[ndim - 1 - d] = (int64_t)ne;   /* ne[0] is the innermost */
    }
    if (!read_u32(r, &t->type) || !read_u64(r, &t->offset)) return bad(r, "truncated tensor info");
    const block_type *bt = block_type_of(t->type);
    if (!bt)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' has unknown block type %u", r->path, t->name, t->type);
    int64_t row = t->shape[ndim - 1];
    if (row % bt->block)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' has rows of %lld, not a multiple of %s's block of %u",
                         r->path, t->name, (long long)row, bt->name, bt->block);
    if (numel / bt->block > (uint64_t)INT64_MAX / bt->bytes)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' has an overflowing byte size", r->path, t->name);
    t->nbytes = numel / bt->block * bt->bytes;
    return TF_OK;
}

/* check_unique reads each item's name as the char * at its start. */
_Static_assert(offsetof(gguf_kv, key) == 0 && offsetof(gguf_tensor, name) == 0, "names lead their structs");

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Names must be unique (sorted copy, n log n: a file may hold millions). */
static tf_status check_unique(const reader *r, const char *what, int64_t n, const void *items, size_t stride) {
    const char **names = tf__malloc(sizeof *names * (size_t)(n ? n : 1));
    if (!names) return out_of_memory();
    for (int64_t i = 0; i < n; i++) names[i] = *(char *const *)((const char *)items + (size_t)i * stride);
    qsort(names, (size_t)n, sizeof *names, by_name);
    tf_status s = TF_OK;
    for (int64_t i = 1; i < n && s == TF_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            s = tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: %s '%s' appears twice", r->path, what, names[i]);
    tf__free((void *)names);
    return s;
}

static int by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset != y->offset ? (x->offset < y->offset ? -1 : 1) : (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* Each tensor's bytes are aligned, inside the file and overlap no other's. */
static tf_status check_ranges(const reader *r, tf_gguf *f) {
    uint64_t data_size = f->map.size - f->data_start;
    const gguf_tensor **order = tf__malloc(sizeof *order * (size_t)(f->n_tensors ? f->n_tensors : 1));
    if (!order) return out_of_memory();
    tf_status s = TF_OK;
    for (int64_t i = 0; i < f->n_tensors && s == TF_OK; i++) {
        const gguf_tensor *t = &f->tensors[i];
        order[i] = t;
        if (t->offset % f->alignment)
            s = tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensor '%s' starts at %llu, not a multiple of the alignment %u",
                          r->path, t->name, (unsigned long long)t->offset, f->alignment);
        else if (t->offset > data_size || t->nbytes > data_size - t->offset)
            s = tf__error(TF_ERR_FORMAT,
                          "tf_gguf_open: %s: tensor '%s' spans data bytes [%llu, +%llu), the file holds %llu after the header",
                          r->path, t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                          (unsigned long long)data_size);
    }
    if (s == TF_OK) qsort(order, (size_t)f->n_tensors, sizeof *order, by_offset);
    for (int64_t i = 1; i < f->n_tensors && s == TF_OK; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            s = tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: tensors '%s' and '%s' overlap", r->path, order[i - 1]->name,
                          order[i]->name);
    tf__free((void *)order);
    return s;
}

/* general.alignment, if present, must be a u32 power of two. */
static tf_status read_alignment(const reader *r, tf_gguf *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = tf_gguf_find_key(f, "general.alignment");
    if (i < 0) return TF_OK;
    const gguf_kv *kv = &f->kv[i];
    uint32_t a = kv->type == TF_GGUF_U32 ? (uint32_t)le(kv->value, 4) : 0;
    if (!a || (a & (a - 1)))
        return bad(r, "general.alignment is not a u32 power of two");
    f->alignment = a;
    return TF_OK;
}

/* Counts come before the items they count: bound each by the bytes left
 * (a key or name takes at least 8, a tensor info at least 24) before any
 * array is sized from it. */
static tf_status read_counts(reader *r, tf_gguf *f) {
    const unsigned char *magic;
    uint64_t n_tensors, n_kv;
    if (!take(r, 4, &magic) || memcmp(magic, "GGUF", 4)) return bad(r, "not a GGUF file (bad magic)");
    if (!read_u32(r, &f->version)) return bad(r, "truncated header");
    if (f->version != 2 && f->version != 3)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: GGUF version %u (2 and 3 are read)", r->path, f->version);
    if (!read_u64(r, &n_tensors) || !read_u64(r, &n_kv)) return bad(r, "truncated header");
    size_t left = (size_t)(r->end - r->p);
    if (n_kv > left / 12 || n_tensors > left / 24 || n_kv * 12 + n_tensors * 24 > left)
        return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: %llu tensors and %llu keys cannot fit in %zu bytes", r->path,
                         (unsigned long long)n_tensors, (unsigned long long)n_kv, left);
    f->n_kv = (int64_t)n_kv;
    f->n_tensors = (int64_t)n_tensors;
    f->kv = tf__calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv);
    f->tensors = tf__calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *f->tensors);
    return f->kv && f->tensors ? TF_OK : out_of_memory();
}

static tf_status parse(tf_gguf *f) {
    if (!f->map.data) return tf__error(TF_ERR_FORMAT, "tf_gguf_open: %s: the file is empty", f->path);
    reader r = {f->map.data, f->map.data + f->map.size, f->path};
    tf_status s = read_counts(&r, f);
    for (int64_t i = 0; i < f->n_kv && s == TF_OK; i++) s = read_kv(&r, &f->kv[i]);
    if (s == TF_OK) s = check_unique(&r, "key", f->n_kv, f->kv, sizeof *f->kv);
    if (s == TF_OK) s = read_alignment(&r, f);
    for (int64_t i = 0; i < f->n_tensors && s == TF_OK; i++) s = read_tensor_info(&r, &f->tensors[i]);
    if (s == TF_OK) s = check_unique(&r, "tensor", f->n_tensors, f->tensors, sizeof *f->tensors);
    if (s != TF_OK) return s;
    uint64_t header = (uint64_t)(r.p - f->map.data);
    f->data_start = (header + f->alignment - 1) / f->alignment * f->alignment;
    if (f->data_start > f->map.size) {
        if (f->n_tensors) return bad(&r, "the data section starts past the end of the file");
        f->data_start = f->map.size;     /* metadata only: no padding needed */
    }
    return check_ranges(&r, f);
}

tf_status tf_gguf_open(const char *path, tf_gguf **out) {
    static const char fn[] = "tf_gguf_open";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: path is NULL", fn);
    tf_gguf *f = tf__calloc(1, sizeof *f);
    if (!f) return out_of_memory();
    snprintf(f->path, sizeof f->path, "%s", path);
    tf_status s = tf__map_file(fn, path, &f->map);
    if (s == TF_OK) s = parse(f);
    if (s != TF_OK) {
        tf_gguf_close(f);
        return s;
    }
    *out = f;
    return TF_OK;
}

void tf_gguf_close(tf_gguf *f) {
    if (!f) return;
    for (int64_t i = 0; f->kv && i < f->n_kv; i++) {
        tf__free(f->kv[i].key);
        tf__free((void *)f->kv[i].strings);
    }
    for (int64_t i = 0; f->tensors && i < f->n_tensors; i++) tf__free(f->tensors[i].name);
    tf__free(f->kv);
    tf__free(f->tensors);
    tf__unmap_file(&f->map);
    tf__free(f);
}

int tf_gguf_version(const tf_gguf *f) { return f ? (int)f->version : 0; }
int64_t tf_gguf_key_count(const tf_gguf *f) { return f ? f->n_kv : 0; }
int64_t tf_gguf_tensor_count(const tf_gguf *f) { return f ? f->n_tensors : 0; }

static const gguf_kv *kv_at(const tf_gguf *f, int64_t i) { return f && i >= 0 && i < f->n_kv ? &f->kv[i] : NULL; }

const char *tf_gguf_key(const tf_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->key : NULL;
}

int64_t tf_gguf_find_key(const tf_gguf *f, const char *key) {
    for (int64_t i = 0; f && key && i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key)) return i;
    return -1;
}

tf_gguf_type tf_gguf_key_type(const tf_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv ? kv->type : TF_GGUF_NONE;
}

tf_gguf_type tf_gguf_array_type(const tf_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv && kv->type == TF_GGUF_ARRAY ? kv->elem_type : TF_GGUF_NONE;
}

int64_t tf_gguf_array_length(const tf_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at(f, i);
    return kv && kv->type == TF_GGUF_ARRAY ? (int64_t)kv->count : -1;
}

/* Key i and its element `elem` (0 for a scalar), both checked in range. */
static tf_status element(const char *fn, const tf_gguf *f, int64_t i, int64_t elem, const gguf_kv **kv) {
    if (!f) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file is NULL", fn);
    *kv = kv_at(f, i);
    if (!*kv) return tf__error(TF_ERR_INDEX, "%s: key index %lld outside [0, %lld)", fn, (long long)i, (long long)f->n_kv);
    if (elem < 0 || (uint64_t)elem >= (*kv)->count)
        return tf__error(TF_ERR_INDEX, "%s: element %lld of '%s' outside [0, %llu)", fn, (long long)elem, (*kv)->key,
                         (unsigned long long)(*kv)->count);
    return TF_OK;
}

tf_status tf_gguf_get_int(const tf_gguf *f, int64_t i, int64_t elem, int64_t *v) {
    static const char fn[] = "tf_gguf_get_int";
    const gguf_kv *kv;
    if (!v) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: v is NULL", fn);
    tf_status s = element(fn, f, i, elem, &kv);
    if (s != TF_OK) return s;
    tf_gguf_type t = kv->elem_type;
    size_t n = scalar_size(t);
    bool is_signed = t == TF_GGUF_I8 || t == TF_GGUF_I16 || t == TF_GGUF_I32 || t == TF_GGUF_I64;
    if (!n || t == TF_GGUF_F32 || t == TF_GGUF_F64)
        return tf__error(TF_ERR_DTYPE, "%s: '%s' does not hold integers", fn, kv->key);
    uint64_t raw = le(kv->value + (size_t)elem * n, n);
    if (is_signed && n < 8 && (raw >> (n * 8 - 1)) & 1) raw |= ~0ull << (n * 8);   /* sign-extend */
    if (!is_signed && raw > (uint64_t)INT64_MAX)
        return tf__error(TF_ERR_SIZE, "%s: '%s' holds %llu, beyond int64", fn, kv->key, (unsigned long long)raw);
    *v = (int64_t)raw;
    return TF_OK;
}

tf_status tf_gguf_get_float(const tf_gguf *f, int64_t i, int64_t elem, double *v) {
    static const char fn[] = "tf_gguf_get_float";
    const gguf_kv *kv;
    if (!v) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: v is NULL", fn);
    tf_status s = element(fn, f, i, elem, &kv);
    if (s != TF_OK) return s;
    if (kv->elem_type == TF_GGUF_F32) {
        uint32_t bits = (uint32_t)le(kv->value + (size_t)elem * 4, 4);
        float x;
        memcpy(&x, &bits, 4);
        *v = x;
    } else if (kv->elem_type == TF_GGUF_F64) {
        uint64_t bits = le(kv->value + (size_t)elem * 8, 8);
        memcpy(v, &bits, 8);
    } else {
        int64_t n;
        s = tf_gguf_get_int(f, i, elem, &n);
        if (s != TF_OK) return tf__error(TF_ERR_DTYPE, "%s: '%s' does not hold numbers", fn, kv->key);
        *v = (double)n;
    }
    return TF_OK;
}

tf_status tf_gguf_get_string(const tf_gguf *f, int64_t i, int64_t elem, const char **str, size_t *len) {
    static const char fn[] = "tf_gguf_get_string";
    const gguf_kv *kv;
    if (!str || !len) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: str or len is NULL", fn);
    tf_status s = element(fn, f, i, elem, &kv);
    if (s != TF_OK) return s;
    if (kv->elem_type != TF_GGUF_STRING) return tf__error(TF_ERR_DTYPE, "%s: '%s' does not hold strings", fn, kv->key);
    const unsigned char *at = kv->strings ? kv->strings[elem] : kv->value;
    *len = (size_t)le(at, 8);
    *str = (const char *)at + 8;
    return TF_OK;
}

int64_t tf_gguf_find_tensor(const tf_gguf *f, const char *name) {
    for (int64_t i = 0; f && name && i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return i;
    return -1;
}

/* A tensor's bytes in the mapping. */
static const unsigned char *data_of(const tf_gguf *f, const gguf_tensor *t) {
    return f->map.data + f->data_start + t->offset;
}

tf_status tf_gguf_tensor_info(const tf_gguf *f, int64_t i, tf_gguf_tensor *info) {
    static const char fn[] = "tf_gguf_tensor_info";
    if (!f || !info) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file or info is NULL", fn);
    if (i < 0 || i >= f->n_tensors)
        return tf__error(TF_ERR_INDEX, "%s: tensor index %lld outside [0, %lld)", fn, (long long)i, (long long)f->n_tensors);
    const gguf_tensor *t = &f->tensors[i];
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->block_type = (int)t->type;
    info->block_type_name = block_types[t->type].name;
    info->ndim = t->ndim;
    memcpy(info->shape, t->shape, sizeof t->shape);
    info->data = data_of(f, t);
    info->nbytes = t->nbytes;
    return TF_OK;
}

/* The block types that are tensorframe dtypes load as such; the others are
 * reached through tf_gguf_tensor_info's raw bytes. */
static tf_dtype dtype_of_block_type(uint32_t t) {
    switch (t) {
    case 0: return TF_F32;
    case 1: return TF_F16;
    case 2: return TF_Q4_0;
    case 3: return TF_Q4_1;
    case 6: return TF_Q5_0;
    case 7: return TF_Q5_1;
    case 8: return TF_Q8_0;
    case 10: return TF_Q2_K;
    case 11: return TF_Q3_K;
    case 12: return TF_Q4_K;
    case 13: return TF_Q5_K;
    case 14: return TF_Q6_K;
    case 20: return TF_IQ4_NL;
    case 23: return TF_IQ4_XS;
    case 24: return TF_I8;
    case 26: return TF_I32;
    case 27: return TF_I64;
    case 28: return TF_F64;
    case 30: return TF_BF16;
    default: return TF_DTYPE_COUNT;
    }
}

/* The checks both loaders start with: out cleared, arguments present, the
 * tensor found (*t). */
static tf_status find_to_load(const char *fn, const tf_gguf *f, const char *name, const tf_device *dev,
                              tf_tensor **out, const gguf_tensor **t) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!f || !name || !dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file, name or device is NULL", fn);
    int64_t i = tf_gguf_find_tensor(f, name);
    if (i < 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s has no tensor '%s'", fn, f->path, name);
    *t = &f->tensors[i];
    return TF_OK;
}

tf_status tf_gguf_load(const tf_gguf *f, const char *name, tf_device *dev, tf_tensor **out) {
    static const char fn[] = "tf_gguf_load";
    const gguf_tensor *t;
    tf_status s = find_to_load(fn, f, name, dev, out, &t);
    if (s != TF_OK) return s;
    tf_dtype dt = dtype_of_block_type(t->type);
    if (dt == TF_DTYPE_COUNT)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, which tensorframe neither stores nor decodes "
                         "(F32, F16, BF16, F64, I8, I32, I64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL and "
                         "IQ4_XS are)", fn, name, block_types[t->type].name);
    return tf__in(fn, tf_tensor_from_data(dev, dt, t->ndim, t->shape, data_of(f, t), out));
}

tf_status tf_gguf_load_as(const tf_gguf *f, const char *name, tf_device *dev, tf_dtype dtype, tf_tensor **out) {
    static const char fn[] = "tf_gguf_load_as";
    const gguf_tensor *t;
    tf_status s = find_to_load(fn, f, name, dev, out, &t);
    if (s != TF_OK) return s;
    if (!tf_dtype_is_float(dtype))
        return tf__error(TF_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn, tf_dtype_name(dtype));
    tf_tensor *loaded = NULL;
    tf_dtype native = dtype_of_block_type(t->type);
    if (native == TF_DTYPE_COUNT)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: tensor '%s' is %s, which tensorframe does not decode (Q4_0, Q4_1, "
                         "Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL and IQ4_XS are)", fn, name, block_types[t->type].name);
    s = tf_tensor_from_data(dev, native, t->ndim, t->shape, data_of(f, t), &loaded);
    if (s != TF_OK) return tf__in(fn, s);
    if (tf_tensor_dtype(loaded) == dtype) {
        *out = loaded;
        return TF_OK;
    }
    s = tf_cast(loaded, dtype, out);
    tf_tensor_release(loaded);
    return tf__in(fn, s);
}
