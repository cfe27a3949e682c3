/* See gguf_builder.h. */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include "gguf_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

typedef struct tensor {
    char *name;
    int type, ndim;
    int64_t shape[4];
    unsigned char *data;
    size_t nbytes;
} tensor;

struct gguf_builder {
    bytes kv;
    uint64_t n_kv;
    tensor *tensors;
    int n_tensors;
};

static void *must(void *p) {
    if (!p) {
        fprintf(stderr, "gguf_builder: out of memory\n");
        abort();
    }
    return p;
}

static void put(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = must(realloc(b->p, b->cap));
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }   /* little-endian hosts only, as ggml */
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

static void key(gguf_builder *b, const char *k, uint32_t type) {
    put_str(&b->kv, k, strlen(k));
    put_u32(&b->kv, type);
    b->n_kv++;
}

gguf_builder *gb_new(void) { return must(calloc(1, sizeof(gguf_builder))); }

void gb_free(gguf_builder *b) {
    if (!b) return;
    for (int i = 0; i < b->n_tensors; i++) {
        free(b->tensors[i].name);
        free(b->tensors[i].data);
    }
    free(b->tensors);
    free(b->kv.p);
    free(b);
}

void gb_string(gguf_builder *b, const char *k, const char *value, size_t len) {
    key(b, k, GB_T_STRING);
    put_str(&b->kv, value, len);
}

#define SCALAR(fn, ctype, type_id)                              \
    void fn(gguf_builder *b, const char *k, ctype v) {          \
        key(b, k, type_id);                                     \
        put(&b->kv, &v, sizeof v);                              \
    }
SCALAR(gb_u32, uint32_t, GB_T_U32)
SCALAR(gb_i32, int32_t, GB_T_I32)
SCALAR(gb_u64, uint64_t, GB_T_U64)
SCALAR(gb_i64, int64_t, GB_T_I64)
SCALAR(gb_f32, float, GB_T_F32)
SCALAR(gb_f64, double, GB_T_F64)

void gb_bool(gguf_builder *b, const char *k, bool v) {
    key(b, k, GB_T_BOOL);
    unsigned char c = v;
    put(&b->kv, &c, 1);
}

void gb_scalar(gguf_builder *b, const char *k, int type, const void *value, size_t size) {
    key(b, k, (uint32_t)type);
    put(&b->kv, value, size);
}

void gb_string_array(gguf_builder *b, const char *k, int64_t n, const char *const *strs, const size_t *lens) {
    key(b, k, GB_T_ARRAY);
    put_u32(&b->kv, GB_T_STRING);
    put_u64(&b->kv, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) put_str(&b->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
}

void gb_scalar_array(gguf_builder *b, const char *k, int type, int64_t n, const void *values, size_t elsize) {
    key(b, k, GB_T_ARRAY);
    put_u32(&b->kv, (uint32_t)type);
    put_u64(&b->kv, (uint64_t)n);
    put(&b->kv, values, (size_t)n * elsize);
}

void gb_tensor(gguf_builder *b, const char *name, int ggml_type, int ndim, const int64_t *shape, const void *data,
               size_t nbytes) {
    b->tensors = must(realloc(b->tensors, (size_t)(b->n_tensors + 1) * sizeof *b->tensors));
    tensor *t = &b->tensors[b->n_tensors++];
    *t = (tensor){must(strdup(name)), ggml_type, ndim, {0}, must(malloc(nbytes ? nbytes : 1)), nbytes};
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (nbytes) memcpy(t->data, data, nbytes);
}

static size_t align32(size_t n) { return (n + 31) & ~(size_t)31; }

unsigned char *gb_bytes(const gguf_builder *b, size_t *n) {
    bytes out = {0};
    put_u32(&out, 0x46554747u);                       /* "GGUF" */
    put_u32(&out, 3);
    put_u64(&out, (uint64_t)b->n_tensors);
    put_u64(&out, b->n_kv);
    put(&out, b->kv.p, b->kv.n);
    size_t offset = 0;
    for (int i = 0; i < b->n_tensors; i++) {
        const tensor *t = &b->tensors[i];
        put_str(&out, t->name, strlen(t->name));
        put_u32(&out, (uint32_t)t->ndim);
        for (int d = t->ndim - 1; d >= 0; d--) put_u64(&out, (uint64_t)t->shape[d]);   /* ggml's ne: innermost first */
        put_u32(&out, (uint32_t)t->type);
        put_u64(&out, offset);
        offset = align32(offset + t->nbytes);
    }
    static const unsigned char zeros[32];
    put(&out, zeros, align32(out.n) - out.n);
    for (int i = 0; i < b->n_tensors; i++) {
        put(&out, b->tensors[i].data, b->tensors[i].nbytes);
        put(&out, zeros, align32(out.n) - out.n);
    }
    *n = out.n;
    return out.p;
}

int gb_write(const gguf_builder *b, const char *path) {
    size_t n;
    unsigned char *p = gb_bytes(b, &n);
    FILE *f = fopen(path, "wb");
    int rc = !f || fwrite(p, 1, n, f) != n;
    if (f && fclose(f)) rc = 1;
    free(p);
    return rc;
}

uint16_t gb_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xFF, man = x & 0x7FFFFFu;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {                                      /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e), half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | (uint32_t)e << 10 | man >> 13, rest = man & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) half++;
    return (uint16_t)half;
}
