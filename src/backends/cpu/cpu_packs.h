/* Weights packed once, kept while their buffer's bytes stay as they were
 * (cpu_packs.c), and the write records that tell. */
#ifndef TF_CPU_PACKS_H
#define TF_CPU_PACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tensorframe/backend.h>

/* What a pack was made from, besides its buffer. */
typedef struct tf_cpu_pack_key {
    uint64_t offset;                     /* bytes into the buffer */
    tf_dtype dtype;
    int64_t rows, cols, row_bytes;
} tf_cpu_pack_key;

/* Writes out (bytes long) from the source the caller knows. */
typedef void (*tf_cpu_pack_fill)(void *ctx, void *out);

/* The kept pack of buf for key, made by fill if there is none yet; NULL
 * when none may be kept (the buffer's memory was handed out raw, or it was
 * written after a pack was made: not a constant), the budget is spent, or
 * memory is short: the caller then works from the buffer itself. Valid
 * until buf is freed. */
const void *tf_cpu_pack_get(tf_backend_buffer *buf, const tf_cpu_pack_key *key, size_t bytes, tf_cpu_pack_fill fill,
                            void *ctx);

/* The backend's write records (cpu_backend.c calls them): a write into buf
 * ran, or its memory was handed out raw. */
void tf_cpu_note_write(tf_backend_buffer *buf);
void tf_cpu_note_exposed(tf_backend_buffer *buf);

/* buf is being freed: its packs go. */
void tf_cpu_packs_forget(tf_backend_buffer *buf);
/* Every pack (at the backend's shutdown). */
void tf_cpu_packs_clear(void);
/* Bytes the packs hold (tests). */
size_t tf_cpu_packs_bytes(void);

#endif
