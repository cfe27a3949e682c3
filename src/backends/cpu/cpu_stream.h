/* The CPU's made streams: each is a worker thread that runs its queue in
 * order (ops, copies, event marks and waits), so the caller's thread goes
 * on while CPU kernels run. The default stream (NULL) is not one of these:
 * it runs every call on the caller's thread before returning. */
#ifndef TF_CPU_STREAM_H
#define TF_CPU_STREAM_H

#include "tensorframe/backend.h"

typedef struct cpu_stream cpu_stream;
typedef struct cpu_event cpu_event;
typedef tf_status (*cpu_op_runner)(const tf_op *op);

void cpu_streams_init(const tf_host_api *host, cpu_op_runner run);

tf_status cpu_stream_create(cpu_stream **out);
/* Runs what is queued, then stops the worker. */
void cpu_stream_destroy(cpu_stream *s);
/* Wait until the queue is empty; the first error of its work since the
 * last synchronize (the message through host->set_error), then cleared. */
tf_status cpu_stream_sync(cpu_stream *s);
/* Queue work; TF_ERR_OUT_OF_MEMORY (nothing queued) without host memory. */
tf_status cpu_stream_run(cpu_stream *s, const tf_op *op);
tf_status cpu_stream_copy(cpu_stream *s, void *dst, const void *src, size_t n);

tf_status cpu_event_create(cpu_event **out);
void cpu_event_destroy(cpu_event *e);
/* s NULL (the synchronous default stream): done now. */
tf_status cpu_event_record(cpu_event *e, cpu_stream *s);
/* s NULL: the caller waits. */
tf_status cpu_event_wait(cpu_event *e, cpu_stream *s);
bool cpu_event_done(cpu_event *e);
void cpu_event_sync(cpu_event *e);
/* Milliseconds between the times the two events' work was done. */
tf_status cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, double *ms);

#endif
