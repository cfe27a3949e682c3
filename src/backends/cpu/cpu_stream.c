/* The CPU's made streams: an in-order queue per stream and a worker thread
 * that drains it. Events are marks in a queue: a mark's sequence number is
 * "reached" when the worker passes it, and a wait task blocks its worker
 * until the mark it names is reached. Waits only name marks already
 * queued, so two streams never wait on each other in a cycle. */
#define _GNU_SOURCE
#include "cpu_stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum { TASK_OP, TASK_COPY, TASK_MARK, TASK_WAIT } task_kind;

typedef struct task {
    struct task *next;
    task_kind kind;
    cpu_event *event;                  /* MARK, WAIT: a reference held by the task */
    uint64_t seq;                      /* MARK: its number; WAIT: the mark awaited */
    void *dst;                         /* COPY */
    const void *src;
    size_t n;
    tf_op op;                          /* OP */
} task;

struct cpu_stream {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, idle;
    task *head, *tail;
    bool running, stop;
    tf_status error;                   /* the first failure since the last sync */
    char message[512];
};

/* Every event's state is under one lock: events are few and brief. */
struct cpu_event {
    _Atomic int refs;                  /* the owner's and one per queued task */
    uint64_t recorded;                 /* marks made */
    uint64_t reached;                  /* the highest mark the work has passed */
    uint64_t when_ns;                  /* when `reached` was reached */
};
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t events_changed = PTHREAD_COND_INITIALIZER;

static const tf_host_api *host;
static cpu_op_runner run_op;

void cpu_streams_init(const tf_host_api *h, cpu_op_runner run) {
    host = h;
    run_op = run;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- events ---- */

static void event_release(cpu_event *e) {
    if (atomic_fetch_sub(&e->refs, 1) == 1) host->free(e);
}

tf_status cpu_event_create(cpu_event **out) {
    cpu_event *e = host->alloc(sizeof *e);
    if (!e) return host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: no host memory for an event");
    memset(e, 0, sizeof *e);
    atomic_init(&e->refs, 1);
    *out = e;
    return TF_OK;
}

void cpu_event_destroy(cpu_event *e) {
    if (e) event_release(e);
}

static void reach(cpu_event *e, uint64_t seq) {
    pthread_mutex_lock(&events_lock);
    if (seq > e->reached) {
        e->reached = seq;
        e->when_ns = now_ns();
    }
    pthread_cond_broadcast(&events_changed);
    pthread_mutex_unlock(&events_lock);
}

static void wait_reached(cpu_event *e, uint64_t seq) {
    pthread_mutex_lock(&events_lock);
    while (e->reached < seq) pthread_cond_wait(&events_changed, &events_lock);
    pthread_mutex_unlock(&events_lock);
}

bool cpu_event_done(cpu_event *e) {
    pthread_mutex_lock(&events_lock);
    bool done = e->reached >= e->recorded;
    pthread_mutex_unlock(&events_lock);
    return done;
}

void cpu_event_sync(cpu_event *e) {
    pthread_mutex_lock(&events_lock);
    uint64_t target = e->recorded;
    pthread_mutex_unlock(&events_lock);
    wait_reached(e, target);
}

tf_status cpu_event_elapsed_ms(cpu_event *start, cpu_event *end, double *ms) {
    pthread_mutex_lock(&events_lock);
    bool done = start->reached >= start->recorded && end->reached >= end->recorded;
    *ms = ((double)end->when_ns - (double)start->when_ns) / 1e6;
    pthread_mutex_unlock(&events_lock);
    return done ? TF_OK : host->set_error(TF_ERR_INVALID_ARGUMENT, "cpu: an event's work is not done");
}

/* ---- the queue ---- */

static tf_status enqueue(cpu_stream *s, task *t) {
    t->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return TF_OK;
}

/* An op task holds the whole tf_op; the others stop before it. */
static task *new_task(task_kind kind) {
    size_t size = kind == TASK_OP ? sizeof(task) : offsetof(task, op);
    task *t = host->alloc(size);
    if (!t) {
        host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: no host memory to queue work on a stream");
        return NULL;
    }
    memset(t, 0, size);
    t->kind = kind;
    return t;
}

static void note_error(cpu_stream *s, tf_status st) {
    pthread_mutex_lock(&s->lock);
    if (s->error == TF_OK) {
        s->error = st;
        const char *m = host->last_error ? host->last_error() : "";
        snprintf(s->message, sizeof s->message, "%s", m && *m ? m : "an op queued on a CPU stream failed");
    }
    pthread_mutex_unlock(&s->lock);
}

static void execute(cpu_stream *s, task *t) {
    switch (t->kind) {
    case TASK_OP: {
        tf_status st = run_op(&t->op);
        if (st != TF_OK) note_error(s, st);
        break;
    }
    case TASK_COPY:
        memmove(t->dst, t->src, t->n);
        break;
    case TASK_MARK:
        reach(t->event, t->seq);
        event_release(t->event);
        break;
    case TASK_WAIT:
        wait_reached(t->event, t->seq);
        event_release(t->event);
        break;
    }
    host->free(t);
}

static void *worker(void *arg) {
    cpu_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->lock);
        if (!s->head) break;                   /* stopping, and nothing left */
        task *t = s->head;
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        s->running = true;
        pthread_mutex_unlock(&s->lock);
        execute(s, t);
        pthread_mutex_lock(&s->lock);
        s->running = false;
        if (!s->head) pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

tf_status cpu_stream_create(cpu_stream **out) {
    cpu_stream *s = host->alloc(sizeof *s);
    if (!s) return host->set_error(TF_ERR_OUT_OF_MEMORY, "cpu: no host memory for a stream");
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    int e = pthread_create(&s->thread, NULL, worker, s);
    if (e != 0) {
        pthread_cond_destroy(&s->idle);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        host->free(s);
        return host->set_error(TF_ERR_BACKEND, "cpu: cannot start a stream's thread (%s)", strerror(e));
    }
    *out = s;
    return TF_OK;
}

tf_status cpu_stream_sync(cpu_stream *s) {
    pthread_mutex_lock(&s->lock);
    while (s->head || s->running) pthread_cond_wait(&s->idle, &s->lock);
    tf_status st = s->error;
    char message[sizeof s->message];
    memcpy(message, s->message, sizeof message);
    s->error = TF_OK;
    pthread_mutex_unlock(&s->lock);
    return st == TF_OK ? TF_OK : host->set_error(st, "%s", message);
}

void cpu_stream_destroy(cpu_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);             /* it drains the queue first */
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    host->free(s);
}

tf_status cpu_stream_run(cpu_stream *s, const tf_op *op) {
    /* The op's struct as the core built it: a backend of an older core
     * copies no more than it was given. */
    size_t n = op->struct_size < sizeof *op ? op->struct_size : sizeof *op;
    task *t = new_task(TASK_OP);
    if (!t) return TF_ERR_OUT_OF_MEMORY;
    memcpy(&t->op, op, n);
    return enqueue(s, t);
}

tf_status cpu_stream_copy(cpu_stream *s, void *dst, const void *src, size_t n) {
    task *t = new_task(TASK_COPY);
    if (!t) return TF_ERR_OUT_OF_MEMORY;
    t->dst = dst;
    t->src = src;
    t->n = n;
    return enqueue(s, t);
}

tf_status cpu_event_record(cpu_event *e, cpu_stream *s) {
    task *t = s ? new_task(TASK_MARK) : NULL;
    if (s && !t) return TF_ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&events_lock);
    uint64_t seq = ++e->recorded;
    pthread_mutex_unlock(&events_lock);
    if (!s) {
        reach(e, seq);                          /* the default stream's work is already done */
        return TF_OK;
    }
    atomic_fetch_add(&e->refs, 1);
    t->event = e;
    t->seq = seq;
    return enqueue(s, t);
}

tf_status cpu_event_wait(cpu_event *e, cpu_stream *s) {
    pthread_mutex_lock(&events_lock);
    uint64_t seq = e->recorded;
    bool done = e->reached >= seq;
    pthread_mutex_unlock(&events_lock);
    if (done) return TF_OK;
    if (!s) {
        wait_reached(e, seq);
        return TF_OK;
    }
    task *t = new_task(TASK_WAIT);
    if (!t) return TF_ERR_OUT_OF_MEMORY;
    atomic_fetch_add(&e->refs, 1);
    t->event = e;
    t->seq = seq;
    return enqueue(s, t);
}
