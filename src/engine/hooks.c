/* The engine's hooks: every place where graph capture (graph.c) and the
 * profiler (profiler.c) observe the engine's work goes through here. The
 * rest of the engine, the op library and the formats call a hook at each
 * event - an op run, a buffer allocated or freed, bytes moved, an index
 * checked - and never name an observer: a new observer (a tracer, a
 * checker) is added in this file alone. Each hook costs one branch when
 * nothing observes. */
#include "observers.h"

tf_status tf__hook_run(const char *fn, tf_device *dev, tf_op *op, tf__op_runner run) {
    bool fell_back = false;
    if (!tf__profiling()) return run(fn, dev, op, &fell_back);
    uint64_t start = tf__profile_clock();
    tf_status s = run(fn, dev, op, &fell_back);
    tf__profile_record(fn, dev, op, start, fell_back, s);
    return s;
}

void tf__hook_op_done(const char *fn, tf_device *dev, const tf_op *op, tf_status s) {
    if (s == TF_OK && tf__capturing()) tf__capture_op(fn, dev, op);
}

bool tf__hook_ops_only(void) { return tf__capturing(); }

void tf__hook_alloc(tf_device *dev, tf_backend_buffer *buf, size_t nbytes) {
    if (tf__capturing()) tf__capture_alloc(dev, buf, nbytes);
}

tf_backend_buffer *tf__hook_reuse(tf_device *dev, size_t nbytes) {
    return tf__capturing() ? tf__capture_reuse(dev, nbytes) : NULL;
}

bool tf__hook_free(tf_device *dev, tf_backend_buffer *buf) { return tf__graph_claim(dev, buf); }

void tf__hook_upload(tf_storage *s) {
    if (tf__capturing()) tf__capture_upload(s);
}

void tf__hook_download(const tf_storage *s) {
    if (tf__capturing()) tf__capture_download(s);
}

void tf__hook_move(const tf_device *from, const tf_device *to) {
    if (tf__capturing()) tf__capture_move(from, to);
}

bool tf__hook_index_guard(const char *fn, const tf_tensor *index, int64_t extent) {
    return tf__capturing() && tf__capture_index_guard(fn, index, extent);
}

void tf__hooks_start(void) { tf__profile_from_environment(); }

void tf__hooks_shutdown(void) {
    tf__profile_shutdown();                    /* TF_PROFILE's files name the devices: before they go */
    tf__graph_shutdown();
}
