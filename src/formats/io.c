/* Files: NumPy .npy and safetensors, read strictly (a malformed file is an
 * error, never a crash) and written portably (little-endian). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats.h"

static tf_status fail_format(const char *fn, const char *path, const char *what) {
    return tf__error(TF_ERR_FORMAT, "%s: %s: %s", fn, path, what);
}

tf_status tf__map_file(const char *fn, const char *path, tf__mapped_file *m) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tf__error(TF_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tf__error(TF_ERR_IO, "%s: %s is not a regular file", fn, path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return tf__error(TF_ERR_IO, "%s: cannot map %s: %s", fn, path, strerror(errno));
        }
        m->data = p;
    }
    close(fd);
    return TF_OK;
}

void tf__unmap_file(tf__mapped_file *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
}

static tf_status write_all(const char *fn, const char *path, int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return tf__error(TF_ERR_IO, "%s: writing %s failed: %s", fn, path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return TF_OK;
}

/* Write header then the tensor's bytes (read to host), via a temporary file
 * renamed into place so a failed save never leaves half a file. */
static tf_status save_file(const char *fn, const char *path, const void *header, size_t header_len, int n,
                           const tf_tensor *const *ts) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: path too long", fn);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return tf__error(TF_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
    tf_status s = write_all(fn, path, fd, header, header_len);
    for (int i = 0; i < n && s == TF_OK; i++) {
        size_t bytes = (size_t)tf_tensor_numel(ts[i]) * tf_dtype_size(ts[i]->dtype);
        void *buf = tf__malloc(bytes ? bytes : 1);
        if (!buf) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for %zu bytes", fn, bytes);
        if (s == TF_OK) s = tf_tensor_read(ts[i], buf, bytes);
        if (s == TF_OK) s = write_all(fn, path, fd, buf, bytes);
        tf__free(buf);
    }
    if (close(fd) != 0 && s == TF_OK) s = tf__error(TF_ERR_IO, "%s: closing %s failed: %s", fn, tmp, strerror(errno));
    if (s == TF_OK && rename(tmp, path) != 0) s = tf__error(TF_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(errno));
    if (s != TF_OK) unlink(tmp);
    return s;
}

/* ---- .npy ---- */

static const struct { const char *descr; tf_dtype dt; } npy_types[] = {
    {"f4", TF_F32}, {"f8", TF_F64}, {"f2", TF_F16}, {"i1", TF_I8}, {"i4", TF_I32},
    {"i8", TF_I64}, {"u1", TF_U8},  {"b1", TF_BOOL},
};

static const char *npy_descr(tf_dtype dt) {
    switch (dt) {
    case TF_F32: return "<f4";
    case TF_F64: return "<f8";
    case TF_F16: return "<f2";
    case TF_BF16: return "bfloat16";
    case TF_I8: return "|i1";
    case TF_I32: return "<i4";
    case TF_I64: return "<i8";
    case TF_U8: return "|u1";
    default: return "|b1";
    }
}

tf_status tf_npy_save(const char *path, const tf_tensor *t) {
    static const char fn[] = "tf_npy_save";
    if (!path || !t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: path or tensor is NULL", fn);
    if (tf_dtype_is_quantized(t->dtype) || tf_dtype_is_complex(t->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: .npy files of tensorframe hold no %s (cast a quantized tensor to a float "
                         "dtype, save a complex one's tf_view_as_real)", fn, tf_dtype_name(t->dtype));
    char dict[512], shape[300] = "(";
    size_t used = 1;
    for (int i = 0; i < t->ndim; i++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%lld%s", (long long)t->shape[i],
                                 t->ndim == 1 ? "," : i + 1 < t->ndim ? ", " : "");
    snprintf(shape + used, sizeof shape - used, ")");
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", npy_descr(t->dtype), shape);
    /* magic (6) + version (2) + length (2) + dict + padding + '\n', a multiple of 64 */
    size_t total = ((size_t)10 + (size_t)dl + 1 + 63) / 64 * 64, hlen = total - 10;
    unsigned char *header = tf__malloc(total);
    if (!header) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memcpy(header, "\x93NUMPY\x01\x00", 8);
    header[8] = (unsigned char)(hlen & 0xff);
    header[9] = (unsigned char)(hlen >> 8);
    memset(header + 10, ' ', hlen);
    memcpy(header + 10, dict, (size_t)dl);
    header[total - 1] = '\n';
    const tf_tensor *ts[1] = {t};
    tf_status s = save_file(fn, path, header, total, 1, ts);
    tf__free(header);
    return s;
}

/* Value of `key` in a Python dict literal: points just past "'key': ". */
static const char *dict_value(const char *dict, size_t n, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "'%s':", key);
    size_t pl = strlen(pat);
    for (size_t i = 0; i + pl <= n; i++)
        if (!memcmp(dict + i, pat, pl)) {
            const char *p = dict + i + pl;
            while (p < dict + n && *p == ' ') p++;
            return p;
        }
    return NULL;
}

/* Parse "(a, b, c)" into shape; false if malformed. */
static bool parse_shape_tuple(const char *p, const char *end, int *ndim, int64_t *shape) {
    if (p >= end || *p != '(') return false;
    p++;
    *ndim = 0;
    for (;;) {
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ')') return true;
        if (p >= end || *p < '0' || *p > '9' || *ndim >= TF_MAX_DIMS) return false;
        int64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return false;
            v = v * 10 + (*p++ - '0');
        }
        shape[(*ndim)++] = v;
        while (p < end && *p == ' ') p++;
        if (p < end && *p == ',') p++;
        else if (p < end && *p == ')') return true;
        else return false;
    }
}

static void byteswap(unsigned char *p, size_t n, size_t es) {
    for (size_t i = 0; i + es <= n; i += es)
        for (size_t a = 0, b = es - 1; a < b; a++, b--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
}

tf_status tf_npy_load(const char *path, tf_device *dev, tf_tensor **out) {
    static const char fn[] = "tf_npy_load";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: path or device is NULL", fn);
    tf__mapped_file m;
    tf_status s = tf__map_file(fn, path, &m);
    if (s != TF_OK) return s;
    const unsigned char *d = m.data;
    size_t hlen = 0, start = 0;
    if (m.size < 10 || memcmp(d, "\x93NUMPY", 6)) s = fail_format(fn, path, "not a .npy file (bad magic)");
    else if (d[6] == 1) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8;
        start = 10;
    } else if ((d[6] == 2 || d[6] == 3) && m.size >= 12) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8 | (size_t)d[10] << 16 | (size_t)d[11] << 24;
        start = 12;
    } else {
        s = fail_format(fn, path, "unsupported .npy version");
    }
    if (s == TF_OK && (hlen > m.size - start || hlen > (1u << 20))) s = fail_format(fn, path, "header runs past the end of the file");
    /* No pointer arithmetic on the mapping before it is known to hold the
     * header: an empty file maps to NULL, and NULL + 0 is undefined. */
    const char *dict = s == TF_OK ? (const char *)d + start : "", *descr = NULL, *order = NULL, *shp = NULL;
    if (s == TF_OK) {
        descr = dict_value(dict, hlen, "descr");
        order = dict_value(dict, hlen, "fortran_order");
        shp = dict_value(dict, hlen, "shape");
        if (!descr || !order || !shp || hlen < 2 || dict[0] != '{')
            s = fail_format(fn, path, "header is not a dict with descr, fortran_order and shape");
    }
    const char *hend = dict + hlen;
    tf_dtype dt = TF_DTYPE_COUNT;
    bool swap = false;
    if (s == TF_OK) {
        if (hend - descr >= 10 && !memcmp(descr, "'bfloat16'", 10)) {
            dt = TF_BF16;
        } else if (hend - descr >= 5 && descr[0] == '\'' && descr[4] == '\'' && strchr("<>|=", descr[1])) {
            swap = descr[1] == '>';
            for (size_t i = 0; i < sizeof npy_types / sizeof *npy_types; i++)
                if (!memcmp(descr + 2, npy_types[i].descr, 2)) dt = npy_types[i].dt;
        }
        if (dt == TF_DTYPE_COUNT) s = tf__error(TF_ERR_FORMAT, "%s: %s: unsupported dtype descr %.12s", fn, path, descr);
    }
    if (s == TF_OK && (hend - order < 5 || memcmp(order, "False", 5)))
        s = tf__error(TF_ERR_FORMAT, "%s: %s: Fortran-order arrays are not supported (save in C order)", fn, path);
    int ndim = 0;
    int64_t shape[TF_MAX_DIMS], numel = 0;
    if (s == TF_OK && !parse_shape_tuple(shp, hend, &ndim, shape)) s = fail_format(fn, path, "malformed shape tuple");
    if (s == TF_OK) s = tf__check_shape(fn, dt, ndim, shape, &numel);
    size_t need = (size_t)numel * tf_dtype_size(dt), avail = m.size - start - hlen;
    if (s == TF_OK && avail != need) {
        char buf[128];
        snprintf(buf, sizeof buf, "holds %zu data bytes, its header describes %zu (truncated or padded)", avail, need);
        s = fail_format(fn, path, buf);
    }
    if (s == TF_OK) {
        const unsigned char *src = d + start + hlen;
        unsigned char *copy = NULL;
        if (swap && need) {
            copy = tf__malloc(need);
            if (!copy) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
            else {
                memcpy(copy, src, need);
                byteswap(copy, need, tf_dtype_size(dt));
                src = copy;
            }
        }
        if (s == TF_OK) s = tf_tensor_from_data(dev, dt, ndim, shape, src, out);
        tf__free(copy);
    }
    tf__unmap_file(&m);
    return tf__in(fn, s);
}

/* ---- a strict, bounded JSON reader for safetensors headers ---- */

typedef struct json {
    const char *p, *end;
    int depth;
} json;

static void ws(json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static bool expect(json *j, char c) {
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* A string into out (escapes decoded; \\u limited to ASCII); false if malformed. */
static bool json_string(json *j, char *out, size_t n) {
    ws(j);
    if (j->p >= j->end || *j->p != '"') return false;
    j->p++;
    size_t used = 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if ((unsigned char)c < 0x20) return false;
        if (c == '\\') {
            if (j->p >= j->end) return false;
            char e = *j->p++;
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k = strchr(from, e);
            if (e == 'u') {
                if (j->end - j->p < 4) return false;
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *j->p++;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 :
                                            h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                    if (v > 0xffff) return false;
                }
                c = v < 0x80 ? (char)v : '?';
            } else if (k && e) {
                c = to[k - from];
            } else {
                return false;
            }
        }
        if (used + 1 < n) out[used++] = c;
        else return false;                        /* names and values are bounded */
    }
    if (j->p >= j->end) return false;
    j->p++;
    out[used] = 0;
    return true;
}

static bool json_uint(json *j, int64_t *v) {
    ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return false;
    *v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (*v > (INT64_MAX - 9) / 10) return false;
        *v = *v * 10 + (*j->p++ - '0');
    }
    return true;
}

/* [u, u, ...] into v (at most max entries). */
static bool json_uint_array(json *j, int64_t *v, int max, int *n) {
    if (!expect(j, '[')) return false;
    *n = 0;
    if (expect(j, ']')) return true;
    do {
        if (*n >= max || !json_uint(j, &v[*n])) return false;
        (*n)++;
    } while (expect(j, ','));
    return expect(j, ']');
}

/* Skip any JSON value (metadata), bounded in depth. */
static bool json_skip(json *j) {
    ws(j);
    if (j->p >= j->end || ++j->depth > 32) return false;
    bool ok = true;
    char c = *j->p;
    if (c == '"') {
        char tmp[4096];
        ok = json_string(j, tmp, sizeof tmp);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (!expect(j, close)) {
            do {
                if (c == '{') {
                    char key[1024];
                    ok = json_string(j, key, sizeof key) && expect(j, ':');
                }
                ok = ok && json_skip(j);
            } while (ok && expect(j, ','));
            ok = ok && expect(j, close);
        }
    } else {
        const char *s = j->p;
        while (j->p < j->end && strchr("0123456789+-.eEtruefalsn", *j->p)) j->p++;
        ok = j->p > s;
    }
    j->depth--;
    return ok;
}

/* ---- safetensors ---- */

typedef struct st_entry {
    char name[256];
    tf_dtype dtype;
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t begin, end;
} st_entry;

struct tf_safetensors {
    tf__mapped_file map;
    const unsigned char *data;       /* the byte buffer after the header */
    size_t data_size;
    int n;
    st_entry *entries;
    char path[1024];
};

static const struct { const char *name; tf_dtype dt; } st_types[] = {
    {"F32", TF_F32}, {"F64", TF_F64}, {"F16", TF_F16}, {"BF16", TF_BF16}, {"I8", TF_I8},
    {"I32", TF_I32}, {"I64", TF_I64}, {"U8", TF_U8},   {"BOOL", TF_BOOL},
};

static const char *st_name_of(tf_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof *st_types; i++)
        if (st_types[i].dt == dt) return st_types[i].name;
    return "?";
}

/* One tensor's {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static tf_status parse_entry(const char *fn, const char *path, json *j, st_entry *e) {
    char key[64], dtype[32] = "";
    int have = 0, noff = 0;
    int64_t off[2] = {0, 0};
    if (!expect(j, '{')) return fail_format(fn, path, "a tensor entry is not an object");
    do {
        if (!json_string(j, key, sizeof key) || !expect(j, ':')) return fail_format(fn, path, "malformed tensor entry");
        if (!strcmp(key, "dtype")) {
            if (!json_string(j, dtype, sizeof dtype)) return fail_format(fn, path, "dtype is not a string");
            have |= 1;
        } else if (!strcmp(key, "shape")) {
            if (!json_uint_array(j, e->shape, TF_MAX_DIMS, &e->ndim))
                return fail_format(fn, path, "shape is not a list of at most 8 non-negative integers");
            have |= 2;
        } else if (!strcmp(key, "data_offsets")) {
            if (!json_uint_array(j, off, 2, &noff) || noff != 2)
                return fail_format(fn, path, "data_offsets is not a pair of integers");
            have |= 4;
        } else {
            return tf__error(TF_ERR_FORMAT, "%s: %s: unexpected key '%s' in tensor '%s'", fn, path, key, e->name);
        }
    } while (expect(j, ','));
    if (!expect(j, '}') || have != 7)
        return tf__error(TF_ERR_FORMAT, "%s: %s: tensor '%s' needs dtype, shape and data_offsets", fn, path, e->name);
    e->dtype = TF_DTYPE_COUNT;
    for (size_t i = 0; i < sizeof st_types / sizeof *st_types; i++)
        if (!strcmp(dtype, st_types[i].name)) e->dtype = st_types[i].dt;
    if (e->dtype == TF_DTYPE_COUNT)
        return tf__error(TF_ERR_FORMAT, "%s: %s: tensor '%s' has unsupported dtype '%s'", fn, path, e->name, dtype);
    e->begin = off[0];
    e->end = off[1];
    int64_t numel;
    tf_status s = tf__check_shape(fn, e->dtype, e->ndim, e->shape, &numel);
    if (s != TF_OK) return s;
    if (e->end < e->begin || e->end - e->begin != numel * (int64_t)tf_dtype_size(e->dtype))
        return tf__error(TF_ERR_FORMAT, "%s: %s: tensor '%s' spans bytes [%lld, %lld), its shape and dtype need %lld", fn,
                         path, e->name, (long long)e->begin, (long long)e->end,
                         (long long)(numel * (int64_t)tf_dtype_size(e->dtype)));
    return TF_OK;
}

/* By byte range: begin, then end (an empty tensor sits before the one that
 * starts where it does), then name, so the order never depends on the
 * header's. */
static int by_range(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) { return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name); }

static tf_status parse_header(const char *fn, tf_safetensors *f, const char *h, size_t n) {
    json j = {h, h + n, 0};
    if (!expect(&j, '{')) return fail_format(fn, f->path, "the header is not a JSON object");
    int cap = 0;
    if (!expect(&j, '}')) {
        do {
            char name[256];
            if (!json_string(&j, name, sizeof name) || !expect(&j, ':'))
                return fail_format(fn, f->path, "malformed header (expected \"name\": {...})");
            if (!strcmp(name, "__metadata__")) {
                if (!json_skip(&j)) return fail_format(fn, f->path, "malformed __metadata__");
                continue;
            }
            if (f->n == cap) {
                cap = cap ? cap * 2 : 16;
                st_entry *grown = tf__realloc(f->entries, sizeof *grown * (size_t)cap);
                if (!grown) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
                f->entries = grown;
            }
            st_entry *e = &f->entries[f->n];
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", name);
            tf_status s = parse_entry(fn, f->path, &j, e);
            if (s != TF_OK) return s;
            f->n++;
        } while (expect(&j, ','));
        if (!expect(&j, '}')) return fail_format(fn, f->path, "malformed header (expected , or })");
    }
    ws(&j);
    if (j.p != j.end) return fail_format(fn, f->path, "trailing bytes after the header object");
    /* The byte buffer must be covered exactly: no gaps, no overlaps. */
    st_entry *sorted = tf__malloc(sizeof *sorted * (size_t)(f->n ? f->n : 1));
    if (!sorted) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (f->n) memcpy(sorted, f->entries, sizeof *sorted * (size_t)f->n);
    tf_status s = TF_OK;
    /* A name that repeats: sorted by name, n log n (not pairwise: the header
     * may hold a million names). */
    qsort(sorted, (size_t)f->n, sizeof *sorted, by_name);
    for (int i = 1; i < f->n && s == TF_OK; i++)
        if (!strcmp(sorted[i - 1].name, sorted[i].name))
            s = tf__error(TF_ERR_FORMAT, "%s: %s: tensor '%s' appears twice", fn, f->path, sorted[i].name);
    qsort(sorted, (size_t)f->n, sizeof *sorted, by_range);
    int64_t at = 0;
    for (int i = 0; i < f->n && s == TF_OK; i++) {
        if (sorted[i].begin != at)
            s = tf__error(TF_ERR_FORMAT, "%s: %s: tensor '%s' starts at byte %lld, expected %lld (gap or overlap)", fn,
                          f->path, sorted[i].name, (long long)sorted[i].begin, (long long)at);
        at = sorted[i].end;
    }
    if (s == TF_OK && (uint64_t)at != f->data_size)
        s = tf__error(TF_ERR_FORMAT, "%s: %s: tensors cover %lld bytes, the file holds %zu after the header", fn, f->path,
                      (long long)at, f->data_size);
    tf__free(sorted);
    return s;
}

tf_status tf_safetensors_open(const char *path, tf_safetensors **out) {
    static const char fn[] = "tf_safetensors_open";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: path is NULL", fn);
    tf_safetensors *f = tf__calloc(1, sizeof *f);
    if (!f) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    snprintf(f->path, sizeof f->path, "%s", path);
    tf_status s = tf__map_file(fn, path, &f->map);
    uint64_t hlen = 0;
    if (s == TF_OK && f->map.size < 8) s = fail_format(fn, path, "shorter than the 8-byte header length");
    if (s == TF_OK) {
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map.data[i];
        if (hlen > f->map.size - 8 || hlen > (100u << 20))
            s = tf__error(TF_ERR_FORMAT, "%s: %s: header length %llu exceeds the file (%zu bytes) or 100 MiB", fn, path,
                          (unsigned long long)hlen, f->map.size);
    }
    if (s == TF_OK) {
        f->data = f->map.data + 8 + hlen;
        f->data_size = f->map.size - 8 - (size_t)hlen;
        s = parse_header(fn, f, (const char *)f->map.data + 8, (size_t)hlen);
    }
    if (s != TF_OK) {
        tf_safetensors_close(f);
        return s;
    }
    *out = f;
    return TF_OK;
}

int tf_safetensors_count(const tf_safetensors *f) { return f ? f->n : 0; }

const char *tf_safetensors_name(const tf_safetensors *f, int i) {
    return f && i >= 0 && i < f->n ? f->entries[i].name : NULL;
}

int tf_safetensors_find(const tf_safetensors *f, const char *name) {
    for (int i = 0; f && name && i < f->n; i++)
        if (!strcmp(f->entries[i].name, name)) return i;
    return -1;
}

tf_status tf_safetensors_tensor_info(const tf_safetensors *f, int i, tf_safetensors_tensor *info) {
    static const char fn[] = "tf_safetensors_tensor_info";
    if (!f || !info) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file or info is NULL", fn);
    if (i < 0 || i >= f->n)
        return tf__error(TF_ERR_INDEX, "%s: tensor %d out of range (%s has %d)", fn, i, f->path, f->n);
    const st_entry *e = &f->entries[i];
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->dtype = e->dtype;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim);
    info->nbytes = (uint64_t)(e->end - e->begin);
    return TF_OK;
}

/* The entry whose name is `name` with a prefix added or taken away
 * ("bert." is the usual one), or -1. */
static int prefix_twin(const tf_safetensors *f, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < f->n; i++) {
        const char *e = f->entries[i].name;
        size_t m = strlen(e);
        if ((m > n && !strcmp(e + m - n, name) && e[m - n - 1] == '.') ||
            (n > m && !strcmp(name + n - m, e) && name[n - m - 1] == '.'))
            return i;
    }
    return -1;
}

/* "has no tensor 'x'", with what it has: a prefixed twin, else the first names. */
static tf_status missing_tensor(const char *fn, const tf_safetensors *f, const char *name) {
    int twin = prefix_twin(f, name);
    if (twin >= 0)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s has no tensor '%s' (it has '%s': a name prefix differs)", fn,
                         f->path, name, f->entries[twin].name);
    char list[600] = "";
    size_t used = 0;
    for (int i = 0; i < f->n && i < 6 && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", f->entries[i].name);
    return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %s has no tensor '%s'; its %d tensors are %s%s", fn, f->path, name, f->n,
                     list, f->n > 6 ? ", ..." : "");
}

static tf_status load_entry(const tf_safetensors *f, int i, tf_device *dev, tf_tensor **out) {
    const st_entry *e = &f->entries[i];
    return tf_tensor_from_data(dev, e->dtype, e->ndim, e->shape, f->data + e->begin, out);
}

tf_status tf_safetensors_load(const tf_safetensors *f, const char *name, tf_device *dev, tf_tensor **out) {
    static const char fn[] = "tf_safetensors_load";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!f || !name || !dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file, name or device is NULL", fn);
    int i = tf_safetensors_find(f, name);
    if (i < 0) return missing_tensor(fn, f, name);
    return tf__in(fn, load_entry(f, i, dev, out));
}

tf_status tf_safetensors_load_as(const tf_safetensors *f, const char *name, tf_device *dev, tf_dtype dtype,
                                 tf_tensor **out) {
    static const char fn[] = "tf_safetensors_load_as";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!f || !name || !dev) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: file, name or device is NULL", fn);
    int i = tf_safetensors_find(f, name);
    if (i < 0) return missing_tensor(fn, f, name);
    tf_tensor *stored = NULL;
    tf_status s = load_entry(f, i, dev, &stored);
    if (s == TF_OK && stored->dtype == dtype) {
        *out = stored;
        return TF_OK;
    }
    if (s == TF_OK) s = tf_cast(stored, dtype, out);
    tf_tensor_release(stored);
    return tf__in(fn, s);
}

void tf_safetensors_close(tf_safetensors *f) {
    if (!f) return;
    tf__unmap_file(&f->map);
    tf__free(f->entries);
    tf__free(f);
}

/* Append printf output to a growing buffer. */
typedef struct strbuf { char *p; size_t len, cap; bool failed; } strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *p = tf__realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static bool plain_name(const char *s) {
    if (!*s || strlen(s) >= 256) return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\') return false;
    return true;
}

tf_status tf_safetensors_save(const char *path, int n, const char *const *names, const tf_tensor *const *tensors) {
    static const char fn[] = "tf_safetensors_save";
    if (!path || (n > 0 && (!names || !tensors))) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: NULL argument", fn);
    if (n < 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d tensors", fn, n);
    for (int i = 0; i < n; i++) {
        if (!names[i] || !tensors[i]) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: name or tensor %d is NULL", fn, i);
        if (tf_dtype_is_quantized(tensors[i]->dtype) || tf_dtype_is_complex(tensors[i]->dtype))
            return tf__error(TF_ERR_DTYPE, "%s: safetensors has no %s (tensor %d; cast a quantized tensor to a float "
                             "dtype, save a complex one's tf_view_as_real)", fn, tf_dtype_name(tensors[i]->dtype), i);
        if (!plain_name(names[i]) || !strcmp(names[i], "__metadata__"))
            return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: name %d must be 1-255 printable characters without quotes "
                             "or backslashes, and not __metadata__", fn, i);
        for (int k = 0; k < i; k++)
            if (!strcmp(names[k], names[i])) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: name '%s' repeats", fn, names[i]);
    }
    strbuf b = {NULL, 0, 0, false};
    sb_printf(&b, "{");
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const tf_tensor *t = tensors[i];
        int64_t bytes = tf_tensor_numel(t) * (int64_t)tf_dtype_size(t->dtype);
        sb_printf(&b, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", names[i], st_name_of(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(&b, "],\"data_offsets\":[%lld,%lld]}", (long long)at, (long long)(at + bytes));
        at += bytes;
    }
    sb_printf(&b, "}");
    while (!b.failed && b.len % 8) sb_printf(&b, " ");   /* keep the data 8-byte aligned */
    if (b.failed) {
        tf__free(b.p);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    unsigned char *header = tf__malloc(8 + b.len);
    tf_status s = header ? TF_OK : tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (s == TF_OK) {
        for (int i = 0; i < 8; i++) header[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
        memcpy(header + 8, b.p, b.len);
        s = save_file(fn, path, header, 8 + b.len, n, tensors);
    }
    tf__free(header);
    tf__free(b.p);
    return s;
}
