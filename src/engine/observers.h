/* The engine's observers, graph capture (graph.c) and the profiler
 * (profiler.c): called from hooks.c only, which the rest of the engine goes
 * through. */
#ifndef TF_ENGINE_OBSERVERS_H
#define TF_ENGINE_OBSERVERS_H

#include "engine.h"

/* ---- graph capture (graph.c) ---- */
/* Is the calling thread capturing? The capture functions are called only then. */
bool tf__capturing(void);
void tf__capture_op(const char *fn, tf_device *dev, const tf_op *op);
void tf__capture_alloc(tf_device *dev, tf_backend_buffer *buf, size_t nbytes);
/* A buffer of at least nbytes from the capture's pool (released earlier in
 * the capture), or NULL: allocate one. */
tf_backend_buffer *tf__capture_reuse(tf_device *dev, size_t nbytes);
/* What a capture cannot replay, and the index checks it defers. */
void tf__capture_upload(tf_storage *s);
void tf__capture_download(const tf_storage *s);
void tf__capture_move(const tf_device *from, const tf_device *to);
bool tf__capture_index_guard(const char *fn, const tf_tensor *index, int64_t extent);
/* A live graph keeps buf (true): it frees it when destroyed. */
bool tf__graph_claim(tf_device *dev, tf_backend_buffer *buf);
void tf__graph_shutdown(void);

/* ---- the profiler (profiler.c) ---- */
bool tf__profiling(void);
void tf__profile_record(const char *fn, const tf_device *dev, const tf_op *op, uint64_t start_ns, bool fallback,
                        tf_status status);
void tf__profile_from_environment(void);
void tf__profile_shutdown(void);

#endif /* TF_ENGINE_OBSERVERS_H */
