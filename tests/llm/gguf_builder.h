/* A GGUF writer for tests and fuzz seeds: keys of any type (including
 * hostile ones: a value of the wrong type, a count that lies is up to the
 * caller's raw bytes), tensors of any ggml type id with the caller's bytes,
 * written as GGUF v3 with 32-byte alignment. Not a library API: it writes
 * what it is told, checking nothing, so tests can make files the loaders
 * must refuse. Allocation failures abort (test code). */
#ifndef GGUF_BUILDER_H
#define GGUF_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_builder gguf_builder;

/* ggml type ids the tests use. */
enum { GB_F32 = 0, GB_F16 = 1, GB_Q4_1 = 3, GB_Q8_0 = 8, GB_I8 = 24, GB_I32 = 26, GB_F64 = 28, GB_BF16 = 30 };
/* GGUF value type ids. */
enum { GB_T_U8 = 0, GB_T_I8, GB_T_U16, GB_T_I16, GB_T_U32, GB_T_I32, GB_T_F32, GB_T_BOOL, GB_T_STRING, GB_T_ARRAY,
       GB_T_U64, GB_T_I64, GB_T_F64 };

gguf_builder *gb_new(void);
void gb_free(gguf_builder *b);

void gb_string(gguf_builder *b, const char *key, const char *value, size_t len);
void gb_u32(gguf_builder *b, const char *key, uint32_t v);
void gb_i32(gguf_builder *b, const char *key, int32_t v);
void gb_u64(gguf_builder *b, const char *key, uint64_t v);
void gb_i64(gguf_builder *b, const char *key, int64_t v);
void gb_f32(gguf_builder *b, const char *key, float v);
void gb_f64(gguf_builder *b, const char *key, double v);
void gb_bool(gguf_builder *b, const char *key, bool v);
/* A scalar of value type `type` from its bytes (any type id, hostile too). */
void gb_scalar(gguf_builder *b, const char *key, int type, const void *value, size_t size);
/* An array of n strings (lens[i] bytes each; NULL lens: NUL-ended). */
void gb_string_array(gguf_builder *b, const char *key, int64_t n, const char *const *strs, const size_t *lens);
/* An array of n scalars of value type `type`, `elsize` bytes each. */
void gb_scalar_array(gguf_builder *b, const char *key, int type, int64_t n, const void *values, size_t elsize);

/* A tensor: shape outermost first (as tensorframe and model.h read it);
 * `bytes` are copied. */
void gb_tensor(gguf_builder *b, const char *name, int ggml_type, int ndim, const int64_t *shape, const void *bytes,
               size_t nbytes);

/* The file's bytes (malloc'ed) or written to path; 0 on success. */
unsigned char *gb_bytes(const gguf_builder *b, size_t *n);
int gb_write(const gguf_builder *b, const char *path);

/* f32 -> IEEE half, round to nearest even (for f16 tensors). */
uint16_t gb_half(float f);

#endif
