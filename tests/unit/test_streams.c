/* Streams and events: ordering across streams and devices, the CPU's worker
 * queues overlapping the caller, memory released while queued work still
 * uses it, asynchronous copies, pinned memory, and every error path. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "helpers.h"

#define CHAIN 24

/* y = x; CHAIN times y = y * 0.5 + 1, queued on the current stream of x's
 * device. The result tends to 2 and the float64 reference is exact enough. */
static tf_tensor *chain(const tf_tensor *x) {
    tf_tensor *y = tf_tensor_retain((tf_tensor *)x), *half = NULL, *one = NULL;
    OK(tf_scalar(tf_tensor_device(x), TF_F32, 0.5, &half));
    OK(tf_scalar(tf_tensor_device(x), TF_F32, 1.0, &one));
    for (int i = 0; i < CHAIN; i++) {
        tf_tensor *h = NULL, *next = NULL;
        OK(tf_mul(y, half, &h));
        OK(tf_add(h, one, &next));
        tf_tensor_release(h);                    /* released while the work may still be queued */
        tf_tensor_release(y);
        y = next;
    }
    tf_tensor_release(half);
    tf_tensor_release(one);
    return y;
}

static double chain_reference(double v) {
    for (int i = 0; i < CHAIN; i++) v = v * 0.5 + 1.0;
    return v;
}

/* Fresh values in [-50, 50): what a stale or unwritten buffer never holds. */
static float *random_values(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(rand() % 100000) / 1000.0f - 50.0f;
    return v;
}

static void expect_chain(const float *in, const float *out, int64_t n, const char *where) {
    for (int64_t i = 0; i < n; i++) {
        double want = chain_reference(in[i]);
        if (fabs(out[i] - want) > 1e-5 * (1 + fabs(want)))
            fail_msg("%s: element %lld is %.9g, want %.9g", where, (long long)i, out[i], want);
    }
}

static bool real_device(const tf_device *d) {
    return strncmp(tf_device_name(d), "mybackend", 9) && strncmp(tf_device_name(d), "testplug", 8);
}

static int64_t size_for(const tf_device *d) {
    tf_device_props p;
    OK(tf_device_get_props(d, &p));
    return p.type == TF_DEVICE_TYPE_CPU && !p.caps.emulated ? (1 << 20) : (1 << 14);
}

/* Stream A makes y; stream B waits for an event recorded after it and then
 * reads y. Without the wait B would read y's buffer before A wrote it. */
static void test_cross_stream_dependency_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        int64_t n = size_for(d);
        float *in = random_values(n), *out = malloc((size_t)n * sizeof *out);
        tf_stream *a = NULL, *b = NULL;
        tf_event *made = NULL;
        OK(tf_stream_create(d, &a));
        OK(tf_stream_create(d, &b));
        OK(tf_event_create(0, &made));
        tf_tensor *x = NULL, *copy = NULL;
        OK(tf_tensor_from_data(d, TF_F32, 1, &n, in, &x));
        OK(tf_stream_set_current(a));
        assert_ptr_equal(tf_stream_current(d), a);
        tf_tensor *y = chain(x);
        OK(tf_event_record(made, a));
        OK(tf_stream_set_current(b));
        OK(tf_stream_wait_event(b, made));
        OK(tf_copy(y, &copy));                       /* on B, after A's chain */
        OK(tf_tensor_read(copy, out, (size_t)n * sizeof *out));   /* waits for B */
        expect_chain(in, out, n, tf_device_name(d));
        OK(tf_stream_set_current(tf_stream_default(d)));
        assert_ptr_equal(tf_stream_current(d), tf_stream_default(d));
        tf_tensor_release(x);
        tf_tensor_release(y);
        tf_tensor_release(copy);
        tf_event_destroy(made);
        tf_stream_destroy(a);
        tf_stream_destroy(b);
        free(in);
        free(out);
    }
}

/* A CPU stream's event recorded on one device is waited for by another
 * device's default stream (on the host: different backends), and the
 * result moves there. */
static void test_event_orders_work_across_devices(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (d == cpu || !real_device(d)) continue;
        int64_t n = 1 << 18;
        float *in = random_values(n), *out = malloc((size_t)n * sizeof *out);
        tf_stream *a = NULL;
        tf_event *made = NULL;
        OK(tf_stream_create(cpu, &a));
        OK(tf_event_create(0, &made));
        tf_tensor *x = NULL, *moved = NULL;
        OK(tf_tensor_from_data(cpu, TF_F32, 1, &n, in, &x));
        OK(tf_stream_set_current(a));
        tf_tensor *y = chain(x);
        OK(tf_event_record(made, NULL));             /* NULL: the CPU's current stream, a */
        OK(tf_stream_set_current(tf_stream_default(cpu)));
        OK(tf_stream_wait_event(tf_stream_default(d), made));
        OK(tf_tensor_to(y, d, &moved));
        OK(tf_tensor_read(moved, out, (size_t)n * sizeof *out));
        expect_chain(in, out, n, tf_device_name(d));
        tf_tensor *all[] = {x, y, moved};
        for (int i = 0; i < 3; i++) tf_tensor_release(all[i]);
        tf_event_destroy(made);
        tf_stream_destroy(a);
        free(in);
        free(out);
    }
}

/* Ops on a made CPU stream return before they run: the caller goes on. */
static void test_cpu_stream_overlaps_the_caller(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_stream *s = NULL;
    tf_event *done_ev = NULL, *start = NULL;
    OK(tf_stream_create(cpu, &s));
    OK(tf_event_create(TF_EVENT_TIMING, &done_ev));
    OK(tf_event_create(TF_EVENT_TIMING, &start));
    int64_t shape[2] = {768, 768};
    tf_tensor *a = NULL, *b = NULL, *c = NULL;
    OK(tf_rand(cpu, TF_F32, 2, shape, 1, &a));
    OK(tf_rand(cpu, TF_F32, 2, shape, 2, &b));
    OK(tf_stream_set_current(s));
    OK(tf_event_record(start, s));
    for (int i = 0; i < 8; i++) {                /* ~7 GFLOP: far longer than the calls */
        tf_tensor *m = NULL;
        OK(tf_matmul(a, b, &m));
        tf_tensor_release(c);
        c = m;
    }
    OK(tf_event_record(done_ev, s));
    bool done = true;
    OK(tf_event_query(done_ev, &done));
    assert_false(done);                          /* queued, not run: the caller is free */
    double ms = 0;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not done", tf_event_elapsed_ms(start, done_ev, &ms));
    OK(tf_device_synchronize(cpu));              /* every stream of the device */
    OK(tf_event_query(done_ev, &done));
    assert_true(done);
    OK(tf_event_elapsed_ms(start, done_ev, &ms));
    assert_true(ms > 0);
    /* the last product against a default-stream product of the same inputs */
    OK(tf_stream_set_current(tf_stream_default(cpu)));
    tf_tensor *ref = NULL;
    OK(tf_matmul(a, b, &ref));
    float got[4], want[4];
    tf_tensor *cv = NULL, *rv = NULL;
    OK(tf_slice(c, 1, 0, 4, 1, &cv));
    OK(tf_slice(ref, 1, 0, 4, 1, &rv));
    tf_tensor *c0 = NULL, *r0 = NULL;
    OK(tf_slice(cv, 0, 100, 101, 1, &c0));
    OK(tf_slice(rv, 0, 100, 101, 1, &r0));
    OK(tf_tensor_read(c0, got, sizeof got));
    OK(tf_tensor_read(r0, want, sizeof want));
    for (int i = 0; i < 4; i++) assert_true(got[i] == want[i]);
    tf_tensor *all[] = {a, b, c, ref, cv, rv, c0, r0};
    for (int i = 0; i < 8; i++) tf_tensor_release(all[i]);
    tf_event_destroy(done_ev);
    tf_event_destroy(start);
    tf_stream_destroy(s);
}

/* Keep stream `gate` busy with products, and return an event recorded
 * after them: a stream that waits for it stalls for a while. */
static tf_event *busy_gate(tf_device *d, tf_stream *gate) {
    bool cpu = size_for(d) > (1 << 14);
    int64_t shape[2] = {cpu ? 768 : 192, cpu ? 768 : 192};
    tf_tensor *a = NULL, *b = NULL;
    OK(tf_rand(d, TF_F32, 2, shape, 1, &a));
    OK(tf_rand(d, TF_F32, 2, shape, 2, &b));
    OK(tf_stream_set_current(gate));
    for (int i = 0; i < 10; i++) {
        tf_tensor *m = NULL;
        OK(tf_matmul(a, b, &m));
        tf_tensor_release(m);
    }
    tf_event *done = NULL;
    OK(tf_event_create(0, &done));
    OK(tf_event_record(done, gate));
    tf_tensor_release(a);
    tf_tensor_release(b);
    return done;
}

/* Tensors released while a stream still has work that reads them are not
 * reused until it has passed: stream s stalls behind a busy gate with the
 * chain queued (its input and temporaries already released), while the
 * default stream takes memory and fills it with other values. */
static void test_memory_released_while_queued_is_not_reused(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        int64_t n = size_for(d);
        float *in = random_values(n), *out = malloc((size_t)n * sizeof *out), *junk = random_values(n);
        tf_memory_stats before, after;
        bool stats = tf_device_memory_stats(d, &before) == TF_OK;
        tf_stream *s = NULL, *gate = NULL;
        OK(tf_stream_create(d, &s));
        OK(tf_stream_create(d, &gate));
        tf_tensor *x = NULL;
        OK(tf_tensor_from_data(d, TF_F32, 1, &n, in, &x));
        tf_event *open = busy_gate(d, gate);
        OK(tf_stream_set_current(s));
        OK(tf_stream_wait_event(s, open));
        tf_tensor *y = chain(x);                     /* queued behind the gate */
        tf_tensor_release(x);                        /* so are the reads of x */
        OK(tf_stream_set_current(tf_stream_default(d)));
        /* The default stream takes as many blocks as s's queue could have
         * freed, all at once (whatever the cache's order), and fills them. */
        tf_tensor *taken[2 * CHAIN + 4] = {NULL};
        for (int i = 0; i < 2 * CHAIN + 4; i++) OK(tf_tensor_from_data(d, TF_F32, 1, &n, junk, &taken[i]));
        for (int i = 0; i < 2 * CHAIN + 4; i++) tf_tensor_release(taken[i]);
        OK(tf_stream_set_current(s));
        OK(tf_tensor_read(y, out, (size_t)n * sizeof *out));
        expect_chain(in, out, n, tf_device_name(d));
        tf_tensor_release(y);
        OK(tf_stream_set_current(tf_stream_default(d)));
        tf_event_destroy(open);
        tf_stream_destroy(s);
        tf_stream_destroy(gate);
        if (stats) {                                 /* every deferred free was done */
            /* The last free waits on an event on the default queue too,
             * which nothing above waited for. */
            OK(tf_device_synchronize(d));
            OK(tf_device_memory_stats(d, &after));
            if (after.allocated != before.allocated)
                fail_msg("%s: %llu bytes allocated before, %llu after", tf_device_name(d),
                         (unsigned long long)before.allocated, (unsigned long long)after.allocated);
        }
        free(in);
        free(out);
        free(junk);
    }
}

/* Host -> device -> host on a stream from (pinned) host memory. */
static void test_async_copies_on_every_device(void **state) {
    (void)state;
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        int64_t n = 4096;
        float *src = NULL, *dst = NULL;
        OK(tf_host_alloc((size_t)n * sizeof *src, TF_HOST_PINNED, (void **)&src));
        OK(tf_host_alloc((size_t)n * sizeof *dst, 0, (void **)&dst));
        assert_true((uintptr_t)src % 4096 == 0 && (uintptr_t)dst % 4096 == 0);
        assert_true(dst[0] == 0 && dst[n - 1] == 0);      /* zeroed */
        assert_false(tf_host_is_pinned(dst));
        float *in = random_values(n);
        memcpy(src, in, (size_t)n * sizeof *src);
        tf_stream *s = NULL;
        tf_event *copied = NULL, *start = NULL;
        OK(tf_stream_create(d, &s));
        OK(tf_event_create(TF_EVENT_TIMING, &copied));
        OK(tf_event_create(TF_EVENT_TIMING, &start));
        tf_tensor *x = NULL;
        OK(tf_empty(d, TF_F32, 1, &n, &x));
        OK(tf_stream_set_current(s));
        OK(tf_event_record(start, s));
        OK(tf_tensor_write_async(x, src, (size_t)n * sizeof *src, s));
        tf_tensor *y = chain(x);
        OK(tf_tensor_read_async(y, dst, (size_t)n * sizeof *dst, NULL));
        OK(tf_event_record(copied, s));
        OK(tf_event_synchronize(copied));
        expect_chain(in, dst, n, tf_device_name(d));
        double ms = -1;                              /* timed by the device's own clock */
        OK(tf_event_elapsed_ms(start, copied, &ms));
        if (!(ms >= 0 && ms < 60e3)) fail_msg("%s: %g ms between the events", tf_device_name(d), ms);
        tf_event_destroy(start);
        /* tf_tensor_write: the same bytes through the blocking path */
        OK(tf_tensor_write(x, in, (size_t)n * sizeof *in));
        OK(tf_tensor_read(x, dst, (size_t)n * sizeof *dst));
        assert_memory_equal(dst, in, (size_t)n * sizeof *in);
        OK(tf_stream_set_current(tf_stream_default(d)));
        tf_tensor_release(x);
        tf_tensor_release(y);
        tf_event_destroy(copied);
        tf_stream_destroy(s);
        tf_host_free(src);
        tf_host_free(dst);
        free(in);
    }
}

static void *current_on_another_thread(void *arg) {
    tf_device *cpu = arg;
    return tf_stream_current(cpu) == tf_stream_default(cpu) ? arg : NULL;
}

static void test_current_stream_is_per_thread(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_stream *s = NULL;
    OK(tf_stream_create(cpu, &s));
    OK(tf_stream_set_current(s));
    assert_ptr_equal(tf_stream_current(cpu), s);
    assert_ptr_equal(tf_stream_device(s), cpu);
    pthread_t th;
    void *seen = NULL;
    assert_int_equal(pthread_create(&th, NULL, current_on_another_thread, cpu), 0);
    assert_int_equal(pthread_join(th, &seen), 0);
    assert_ptr_equal(seen, cpu);                 /* the other thread still has the default */
    tf_stream_destroy(s);                        /* the current stream: this thread goes back to the default */
    assert_ptr_equal(tf_stream_current(cpu), tf_stream_default(cpu));
}

static void test_stream_and_event_errors(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    tf_stream *s = NULL;
    tf_event *e = NULL, *timed = NULL, *plain = NULL;
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_stream_create(cpu, NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "device is NULL", tf_stream_create(NULL, &s));
    assert_null(s);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "stream is NULL", tf_stream_set_current(NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "stream is NULL", tf_stream_synchronize(NULL));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "unknown flags", tf_event_create(8, &e));
    assert_null(e);
    assert_null(tf_stream_default(NULL));
    assert_null(tf_stream_current(NULL));
    tf_stream_destroy(NULL);
    tf_stream_destroy(tf_stream_default(cpu));   /* a no-op */
    tf_event_destroy(NULL);
    OK(tf_stream_synchronize(tf_stream_default(cpu)));
    OK(tf_event_create(TF_EVENT_TIMING, &timed));
    OK(tf_event_create(0, &plain));
    bool done = false;
    OK(tf_event_query(plain, &done));            /* never recorded: done */
    assert_true(done);
    OK(tf_event_synchronize(plain));
    OK(tf_stream_wait_event(tf_stream_default(cpu), plain));
    double ms = 0;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "must be recorded", tf_event_elapsed_ms(timed, timed, &ms));
    OK(tf_event_record(timed, NULL));
    OK(tf_event_record(plain, NULL));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "TF_EVENT_TIMING", tf_event_elapsed_ms(timed, plain, &ms));
    OK(tf_event_elapsed_ms(timed, timed, &ms));
    assert_true(ms == 0);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_event_elapsed_ms(timed, NULL, &ms));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "event is NULL", tf_event_record(NULL, NULL));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "event is NULL", tf_stream_wait_event(tf_stream_default(cpu), NULL));
    /* events on two devices cannot be timed against each other */
    for (int k = 0; k < tf_device_count(); k++) {
        tf_device *d = tf_device_at(k);
        if (d == cpu) continue;
        tf_event *other = NULL;
        OK(tf_event_create(TF_EVENT_TIMING, &other));
        OK(tf_event_record(other, tf_stream_default(d)));
        FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "one device only", tf_event_elapsed_ms(timed, other, &ms));
        tf_event_destroy(other);
    }
    /* asynchronous copies check what they are given */
    int64_t n = 4, shape[2] = {2, 2};
    float host[4] = {1, 2, 3, 4};
    tf_tensor *t = NULL, *tt = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 2, shape, host, &t));
    OK(tf_transpose(t, 0, 1, &tt));
    OK(tf_stream_create(cpu, &s));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_tensor_read_async(NULL, host, sizeof host, s));
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_tensor_write_async(t, NULL, sizeof host, s));
    FAILS_WITH(TF_ERR_BUFFER_TOO_SMALL, "16 bytes", tf_tensor_read_async(t, host, 8, s));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not contiguous", tf_tensor_write_async(tt, host, sizeof host, s));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not contiguous", tf_tensor_write(tt, host, sizeof host));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "16 bytes", tf_tensor_write(t, host, 32));
    for (int k = 0; k < tf_device_count(); k++)
        if (tf_device_at(k) != cpu) {
            tf_stream *other = NULL;
            OK(tf_stream_create(tf_device_at(k), &other));
            FAILS_WITH(TF_ERR_DEVICE_MISMATCH, "the stream on", tf_tensor_read_async(t, host, sizeof host, other));
            tf_stream_destroy(other);
            break;
        }
    (void)n;
    /* host memory */
    void *p = NULL;
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "out is NULL", tf_host_alloc(16, 0, NULL));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "unknown flags", tf_host_alloc(16, 4, &p));
    FAILS_WITH(TF_ERR_SIZE, "too many", tf_host_alloc(SIZE_MAX, 0, &p));
    assert_null(p);
    tf_host_free(host);                          /* not ours: refused with a message, not freed */
    tf_host_free(NULL);
    assert_false(tf_host_is_pinned(host));
    tf_tensor_release(t);
    tf_tensor_release(tt);
    tf_event_destroy(timed);
    tf_event_destroy(plain);
    tf_stream_destroy(s);
}

/* tf_shutdown destroys the streams left (no leak, no hang), and a thread's
 * current stream from before it is forgotten. */
static void test_streams_end_at_shutdown(void **state) {
    (void)state;
    tf_stream *s = NULL, *left = NULL;
    OK(tf_stream_create(cpu_device(), &s));
    OK(tf_stream_create(cpu_device(), &left));   /* never destroyed: tf_shutdown does it */
    OK(tf_stream_set_current(s));
    tf_shutdown();                               /* waits for and destroys both */
    assert_ptr_equal(tf_stream_current(cpu_device()), tf_stream_default(cpu_device()));
}

int main(void) {
    const char *seed_text = getenv("TF_TEST_SEED");
    unsigned seed = seed_text ? (unsigned)strtoul(seed_text, NULL, 10) : (unsigned)time(NULL);
    printf("test_streams: TF_TEST_SEED=%u\n", seed);
    srand(seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_stream_dependency_on_every_device),
        cmocka_unit_test(test_event_orders_work_across_devices),
        cmocka_unit_test(test_cpu_stream_overlaps_the_caller),
        cmocka_unit_test(test_memory_released_while_queued_is_not_reused),
        cmocka_unit_test(test_async_copies_on_every_device),
        cmocka_unit_test(test_current_stream_is_per_thread),
        cmocka_unit_test(test_stream_and_event_errors),
        cmocka_unit_test(test_streams_end_at_shutdown),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
