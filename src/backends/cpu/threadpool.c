/* The CPU backend's thread pool: workers sleep on a condition variable and
 * spin briefly after each job (back-to-back ops then start without a
 * wake-up); chunks are handed out through an atomic counter; workers the
 * scheduler left queued behind the caller are moved off its CPU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tensorframe/backend.h"   /* tf_host: the core's strict environment readers */
#include "threadpool.h"

#define MAX_THREADS (TF_CPU_MAX_THREADS - 1)   /* workers */
#define SPIN_NS 50000                /* how long a worker waits for the next job before sleeping */

typedef struct job {
    tf_pool_task fn;
    void *ctx;
    int64_t n, chunk, chunks;
    atomic_llong next;               /* next chunk to take */
    atomic_llong done;               /* chunks finished */
    atomic_llong by_workers;         /* chunks the workers ran */
} job;

static struct {
    pthread_mutex_t lock;            /* guards the fields below and the condvars */
    pthread_cond_t wake, finished;
    pthread_mutex_t owner;           /* held by the thread running a parallel region */
    pthread_t workers[MAX_THREADS];
    int n_workers;                   /* threads besides the caller */
    _Atomic int wanted;              /* total threads, caller included (0 until first read) */
    bool started, stopping;
    atomic_ullong generation;
    job *current;
    atomic_int active;               /* workers holding `current` (changed under lock): the job outlives them */
    int starved;                     /* regions in a row whose chunks were all the caller's (under owner) */
    int kept_off;                    /* the CPU the workers were last moved off, or -1 */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER, .owner = PTHREAD_MUTEX_INITIALIZER, .kept_off = -1};

static _Thread_local bool in_region;

static void work_on(job *j, bool worker) {
    bool was = in_region;
    in_region = true;
    for (;;) {
        int64_t c = atomic_fetch_add(&j->next, 1);
        if (c >= j->chunks) break;
        int64_t begin = c * j->chunk, end = begin + j->chunk < j->n ? begin + j->chunk : j->n;
        j->fn(j->ctx, begin, end);
        if (worker) atomic_fetch_add(&j->by_workers, 1);
        atomic_fetch_add(&j->done, 1);
    }
    in_region = was;
}

static void *worker_main(void *arg) {
    (void)arg;
    unsigned long long seen = 0;
    for (;;) {
        /* spin a little: the next op usually comes right away */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; atomic_load(&pool.generation) == seen; i++) {
            __builtin_ia32_pause();
            if (i % 64) continue;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > SPIN_NS) break;
        }
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.generation) == seen && !pool.stopping) pthread_cond_wait(&pool.wake, &pool.lock);
        if (pool.stopping) {
            pthread_mutex_unlock(&pool.lock);
            return NULL;
        }
        seen = atomic_load(&pool.generation);
        job *j = pool.current;
        if (j) pool.active++;
        pthread_mutex_unlock(&pool.lock);
        if (!j) continue;
        work_on(j, true);
        pthread_mutex_lock(&pool.lock);
        pool.active--;
        pthread_cond_broadcast(&pool.finished);
        pthread_mutex_unlock(&pool.lock);
    }
}

static int default_threads(void) {
    int64_t n_env;                  /* the limits of tf_set_num_threads; anything else warns and is ignored */
    if (tf_host()->env_int("TF_NUM_THREADS", 1, TF_CPU_MAX_THREADS, &n_env)) return (int)n_env;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void stop_workers_locked(void) {
    pool.stopping = true;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.n_workers; i++) pthread_join(pool.workers[i], NULL);
    pthread_mutex_lock(&pool.lock);
    pool.n_workers = 0;
    pool.stopping = false;
}

/* Start (or resize to) `wanted - 1` workers. Caller holds pool.lock. */
static void ensure_workers_locked(void) {
    if (!pool.started) {
        pool.wanted = default_threads();
        pool.started = true;
    }
    int need = pool.wanted - 1;
    if (need > MAX_THREADS) need = MAX_THREADS;
    if (pool.n_workers == need) return;
    if (pool.n_workers) stop_workers_locked();
    pool.kept_off = -1;                          /* new threads: the process's own affinity */
    for (int i = 0; i < need; i++) {
        if (pthread_create(&pool.workers[i], NULL, worker_main, NULL) != 0) break;
        pool.n_workers++;
    }
}

bool tf_cpu_in_parallel_region(void) { return in_region; }

int tf_cpu_num_threads(void) {
    int n = atomic_load(&pool.wanted);           /* the hot path: no lock */
    if (n) return n;
    pthread_mutex_lock(&pool.lock);
    if (!pool.started) {
        pool.wanted = default_threads();
        pool.started = true;
    }
    n = pool.wanted;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

tf_status tf_cpu_set_num_threads(int n) {
    if (n < 1 || n > TF_CPU_MAX_THREADS) return TF_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&pool.owner);              /* no region may be running */
    pthread_mutex_lock(&pool.lock);
    pool.started = true;
    pool.wanted = n;
    if (pool.n_workers) stop_workers_locked();    /* restarted lazily at the next region */
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.owner);
    return TF_OK;
}

/* ---- a worker queued behind the caller on one CPU ----
 * Linux may wake a worker onto the CPU of the thread that woke it (wake-
 * affine) and leave it queued there behind the caller, who never sleeps
 * between regions, while another CPU idles: the caller then runs every
 * chunk itself. On a 2-CPU VM that happened in about half the short runs
 * (a one-sentence MiniLM pass of 30 rounds: 2.4-2.9 ms instead of 1.3,
 * the worker had run 50 chunks of 10 376; /proc showed both threads
 * runnable on one CPU). Spinning with sched_yield instead was tried: it
 * helped when they shared a CPU and cost 7% when they did not. A few
 * regions in a row with no chunk run by a worker move the workers off the
 * caller's CPU: their affinity becomes every CPU the process may use but
 * that one. Nothing is done again until the caller is seen on another CPU,
 * so a program that is simply too short for its workers pays one call. */
#define STARVED_REGIONS 4

static void move_workers_off(int cpu) {
    cpu_set_t allowed;
    if (cpu < 0 || cpu == pool.kept_off || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
        !CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) <= pool.n_workers)
        return;                                  /* no CPU to spare: leave the scheduler to it */
    CPU_CLR(cpu, &allowed);
    for (int i = 0; i < pool.n_workers; i++) pthread_setaffinity_np(pool.workers[i], sizeof allowed, &allowed);
    pool.kept_off = cpu;
}

static void note_region(const job *j) {
    if (j->chunks < 2 || atomic_load(&j->by_workers)) {
        pool.starved = 0;
        return;
    }
    if (++pool.starved < STARVED_REGIONS) return;
    pool.starved = 0;
    move_workers_off(sched_getcpu());
}

/* The caller, its own chunks done, spins a little for the workers' before
 * sleeping on the condition variable: a region's chunks end within
 * microseconds of each other, and a futex wake-up costs tens of them (a
 * decode step of a small model is hundreds of such regions). */
static void wait_briefly(const job *j) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; atomic_load(&j->done) < j->chunks || atomic_load(&pool.active); i++) {
        __builtin_ia32_pause();
        if (i % 64) continue;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > SPIN_NS) return;
    }
}

void tf_cpu_parallel_for(int64_t n, int64_t grain, tf_pool_task fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) {                            /* small work: no pool at all */
        fn(ctx, 0, n);
        return;
    }
    int threads = tf_cpu_num_threads();
    if (threads == 1 || in_region || pthread_mutex_trylock(&pool.owner) != 0) {
        fn(ctx, 0, n);
        return;
    }
    job j;
    int64_t chunks = (n + grain - 1) / grain;
    if (chunks > (int64_t)threads * 4) chunks = (int64_t)threads * 4;   /* a little slack for imbalance */
    j.fn = fn;
    j.ctx = ctx;
    j.n = n;
    j.chunk = (n + chunks - 1) / chunks;
    j.chunks = (n + j.chunk - 1) / j.chunk;
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_init(&j.by_workers, 0);
    pthread_mutex_lock(&pool.lock);
    ensure_workers_locked();
    pool.current = &j;
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    work_on(&j, false);
    wait_briefly(&j);
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&j.done) < j.chunks) pthread_cond_wait(&pool.finished, &pool.lock);
    pool.current = NULL;                          /* no worker can pick it up now ... */
    while (pool.active) pthread_cond_wait(&pool.finished, &pool.lock);   /* ... and none still holds it */
    note_region(&j);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.owner);
}

void tf_cpu_pool_shutdown(void) {
    pthread_mutex_lock(&pool.owner);
    pthread_mutex_lock(&pool.lock);
    if (pool.n_workers) stop_workers_locked();
    pool.started = false;
    pool.wanted = 0;
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.owner);
}
