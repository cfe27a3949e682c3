/* What the file formats (io.c, gguf.c, dlpack.c) share beyond the engine. */
#ifndef TF_FORMATS_H
#define TF_FORMATS_H

#include "engine.h"

/* A whole file mapped read-only (the loaders read headers in place and copy
 * tensor bytes straight from the mapping to their device). */
typedef struct tf__mapped_file {
    unsigned char *data;
    size_t size;
} tf__mapped_file;
tf_status tf__map_file(const char *fn, const char *path, tf__mapped_file *m);
void tf__unmap_file(tf__mapped_file *m);

#endif /* TF_FORMATS_H */
