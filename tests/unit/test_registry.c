#define _GNU_SOURCE
/* Device discovery and selection, priority (code and TF_BACKEND), the
 * memory-aware pick, the mixed-device policy, in-process registration and
 * its errors, fallback accounting, thread-local errors. */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <tensorframe/backend.h>

#include "helpers.h"
#include "mybackend.h"

static void register_mybackend(void) {
    tf_status s = mybackend_register();
    assert_true(s == TF_OK || s == TF_ERR_ALREADY_EXISTS);
}

static uint64_t meminfo_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024ull;
}

static void test_discovery(void **state) {
    (void)state;
    assert_true(tf_device_count() >= 1);
    tf_device *cpu = tf_device_at(0);
    assert_string_equal(tf_device_name(cpu), "cpu");
    assert_null(tf_device_at(-1));
    assert_null(tf_device_at(tf_device_count()));
    tf_device_props p;
    OK(tf_device_get_props(cpu, &p));
    assert_int_equal(p.type, TF_DEVICE_TYPE_CPU);
    assert_string_equal(p.backend, "cpu");
    assert_int_equal(p.memory_total, meminfo_total());   /* read from the OS */
    assert_true(p.memory_free > 0 && p.memory_free <= p.memory_total);
    assert_true(p.caps.dtypes & (1u << TF_BF16));
    assert_false(p.caps.async);
    OK(tf_device_synchronize(cpu));
}

static void test_auto_and_priority(void **state) {
    (void)state;
    register_mybackend();
    tf_device *d;
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");   /* a CPU-type user backend never beats cpu by default */
    char buf[256];
    OK(tf_backend_priority_get(buf, sizeof buf));
    assert_string_equal(buf, TF_TEST_DEFAULT_PRIORITY);  /* data given at build time, no names in code */
    OK(tf_backend_priority_set("mybackend, cpu"));     /* named: it may be picked */
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "mybackend:0");
    OK(tf_backend_priority_get(buf, sizeof buf));
    assert_string_equal(buf, "mybackend,cpu");
    FAILS_WITH(TF_ERR_BUFFER_TOO_SMALL, "needs 14 bytes", tf_backend_priority_get(buf, 5));
    OK(tf_backend_priority_set("cuda"));               /* nothing present: auto still answers */
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "'Bad-Name' is not a backend name", tf_backend_priority_set("cpu,Bad-Name"));
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "empty list", tf_backend_priority_set(" , "));
    OK(tf_backend_priority_set(NULL));
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");
}

static void test_tf_backend_environment(void **state) {
    (void)state;
    tf_shutdown();                                      /* TF_BACKEND is read at initialization */
    setenv("TF_BACKEND", "mybackend,cpu", 1);
    register_mybackend();
    tf_device *d;
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "mybackend:0");
    unsetenv("TF_BACKEND");
    tf_shutdown();
    register_mybackend();
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");
}

static void test_memory_aware_pick(void **state) {
    (void)state;
    register_mybackend();
    tf_device *d = NULL;
    OK(tf_device_get_with_memory(1 << 20, &d));
    assert_string_equal(tf_device_name(d), "cpu");
    FAILS_WITH(TF_ERR_NO_DEVICE, "no device has 1048576.00 GiB free: cpu has", tf_device_get_with_memory(1ull << 50, &d));
    assert_null(d);
    OK(tf_backend_priority_set("mybackend,cpu"));
    OK(tf_device_get_with_memory(1 << 20, &d));        /* mybackend first, it has room */
    assert_string_equal(tf_device_name(d), "mybackend:0");
    OK(tf_device_get_with_memory(2ull << 30, &d));     /* beyond its 1 GiB budget: the CPU */
    assert_string_equal(tf_device_name(d), "cpu");
    OK(tf_backend_priority_set(NULL));
}

static void test_mixed_device_policy(void **state) {
    (void)state;
    register_mybackend();
    tf_device *cpu = cpu_device(), *my;
    OK(tf_device_get("mybackend", &my));
    int64_t n = 3;
    float va[3] = {1, 2, 3}, vb[3] = {10, 20, 30}, want[3] = {11, 22, 33};
    tf_tensor *a = tensor_f32(cpu, 1, &n, va), *b0 = tensor_f32(cpu, 1, &n, vb), *b = NULL, *o = NULL;
    OK(tf_tensor_to(b0, my, &b));
    assert_int_equal(tf_mixed_policy_get(), TF_MIXED_HIGHEST_PRIORITY);
    OK(tf_add(a, b, &o));                               /* mybackend ranks above cpu */
    assert_ptr_equal(tf_tensor_device(o), my);
    expect_f32(o, want, 3);
    tf_tensor_release(o);
    OK(tf_backend_priority_set("cpu,mybackend"));
    OK(tf_add(b, a, &o));
    assert_ptr_equal(tf_tensor_device(o), cpu);
    tf_tensor_release(o);
    OK(tf_backend_priority_set(NULL));
    OK(tf_mixed_policy_set(TF_MIXED_FIRST_INPUT));
    OK(tf_add(a, b, &o));
    assert_ptr_equal(tf_tensor_device(o), cpu);
    tf_tensor_release(o);
    OK(tf_matmul(b, a, &o));
    assert_ptr_equal(tf_tensor_device(o), my);
    tf_tensor_release(o);
    OK(tf_mixed_policy_set(TF_MIXED_STRICT));
    FAILS_WITH(TF_ERR_DEVICE_MISMATCH, "tf_add: inputs on cpu and mybackend:0 (mixed-device policy is strict)",
               tf_add(a, b, &o));
    assert_null(o);
    expect_f32(a, va, 3);
    expect_f32(b, vb, 3);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "unknown policy 7", tf_mixed_policy_set((tf_mixed_policy)7));
    OK(tf_mixed_policy_set(TF_MIXED_HIGHEST_PRIORITY));
    tf_tensor_release(a);
    tf_tensor_release(b0);
    tf_tensor_release(b);
}

/* The scenario that once released the caller's tensor: a move inside an op
 * fails for lack of memory. The error names the op, the input and both
 * devices, keeps the backend's reason, and both inputs stay intact. */
static void test_failed_move_keeps_inputs(void **state) {
    (void)state;
    register_mybackend();
    tf_device *cpu = cpu_device(), *my;
    OK(tf_device_get("mybackend", &my));
    int64_t one = 1, big = 300000000;                   /* 1.2 GB: over mybackend's 1 GiB budget */
    float va = 2.5f;
    tf_tensor *a = tensor_f32(my, 1, &one, &va), *b = NULL, *o = (tf_tensor *)&va;
    OK(tf_empty(cpu, TF_F32, 1, &big, &b));
    FAILS_WITH(TF_ERR_OUT_OF_MEMORY,
               "tf_add: moving input 1 from cpu to mybackend:0: cannot allocate 1200000000 bytes on mybackend:0: "
               "mybackend: 1200000000 bytes exceed the free budget",
               tf_add(a, b, &o));
    assert_null(o);
    expect_f32(a, &va, 1);
    assert_int_equal(tf_tensor_numel(b), big);
    tf_tensor_release(a);
    tf_tensor_release(b);
}

/* A minimal backend for registration errors. */
static tf_status dummy_info(void *c, tf_backend_device_info *i) { (void)c; (void)i; return TF_OK; }
static tf_status dummy_alloc(void *c, size_t n, tf_backend_buffer **o) { (void)c; (void)n; (void)o; return TF_ERR_OUT_OF_MEMORY; }
static void dummy_free(void *c, tf_backend_buffer *b) { (void)c; (void)b; }
static tf_status dummy_xfer(void *c, tf_backend_stream *s, tf_backend_buffer *b, size_t o, const void *p, size_t n) { (void)c; (void)s; (void)b; (void)o; (void)p; (void)n; return TF_OK; }
static tf_status dummy_down(void *c, tf_backend_stream *s, tf_backend_buffer *b, size_t o, void *p, size_t n) { (void)c; (void)s; (void)b; (void)o; (void)p; (void)n; return TF_OK; }
static bool dummy_supports(void *c, const tf_op *op) { (void)c; (void)op; return false; }
static tf_status dummy_run(void *c, tf_backend_stream *s, const tf_op *op) { (void)c; (void)s; (void)op; return TF_ERR_UNSUPPORTED; }

/* Devices of a backend whose name no list holds: each reports a kind. */
static const tf_device_type kinds[3] = {TF_DEVICE_TYPE_INTEGRATED_GPU, TF_DEVICE_TYPE_GPU, TF_DEVICE_TYPE_CPU};
static tf_status kind_info(void *c, tf_backend_device_info *i) {
    i->type = kinds[(intptr_t)c];
    i->caps.emulated = kinds[(intptr_t)c] == TF_DEVICE_TYPE_CPU;
    return TF_OK;
}

/* "auto" and mixed-device placement rank by what a device is — discrete GPU,
 * integrated GPU, emulated, the host CPU — for a backend the core has never
 * heard of; an explicit list is taken literally. */
static void test_ranking_by_device_kind(void **state) {
    (void)state;
    static const tf_backend_iface iface = {TF_STRUCT_INIT(tf_backend_iface)};
    static const tf_device_iface dev_iface = {TF_STRUCT_INIT(tf_device_iface),
                                              .get_info = kind_info, .buffer_alloc = dummy_alloc,
                                              .buffer_free = dummy_free, .buffer_upload = dummy_xfer,
                                              .buffer_download = dummy_down, .supports = dummy_supports,
                                              .run = dummy_run};
    static const tf_backend_device devs[3] = {{&dev_iface, (void *)0}, {&dev_iface, (void *)1}, {&dev_iface, (void *)2}};
    tf_backend_reg reg = {sizeof(tf_backend_reg), TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR, "neuralchip", &iface, NULL, 3, devs, NULL};
    tf_shutdown();
    OK(tf_backend_register(&reg));
    tf_device *d;
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "neuralchip:1");   /* the discrete one, unnamed in any list */
    OK(tf_backend_priority_set("cpu,neuralchip"));
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "cpu");
    OK(tf_backend_priority_set("neuralchip"));
    OK(tf_device_get("auto", &d));
    assert_string_equal(tf_device_name(d), "neuralchip:1");   /* within a backend, the kind breaks the tie */
    OK(tf_backend_priority_set(NULL));
    tf_shutdown();
}

static void test_registration_errors(void **state) {
    (void)state;
    static const tf_backend_iface iface = {TF_STRUCT_INIT(tf_backend_iface)};
    static const tf_device_iface incomplete = {TF_STRUCT_INIT(tf_device_iface),
                                               .get_info = dummy_info, .buffer_alloc = dummy_alloc,
                                               .buffer_free = dummy_free, .buffer_upload = dummy_xfer,
                                               .buffer_download = dummy_down, .supports = dummy_supports,
                                               .run = NULL /* missing */};
    static const tf_backend_device devs[1] = {{&incomplete, NULL}};
    tf_backend_reg reg = {sizeof(tf_backend_reg), TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR, "emptyback", &iface, NULL, 0, NULL,
                          "no hardware on this machine"};
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "reg is NULL", tf_backend_register(NULL));
    reg.abi_major = TF_BACKEND_ABI_MAJOR + 1;
    char want[96];
    snprintf(want, sizeof want, "backend ABI %d.%d, this library speaks %d.%d", TF_BACKEND_ABI_MAJOR + 1,
             TF_BACKEND_ABI_MINOR, TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR);
    FAILS_WITH(TF_ERR_ABI_MISMATCH, want, tf_backend_register(&reg));
    reg.struct_size = 1;                                /* an SDK 1 plugin: its major where struct_size now is */
    FAILS_WITH(TF_ERR_ABI_MISMATCH, "an SDK without struct_size (ABI major 1?)", tf_backend_register(&reg));
    reg.struct_size = sizeof reg;
    reg.abi_major = TF_BACKEND_ABI_MAJOR;
    reg.name = "Bad-Name";
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "not [a-z0-9_]", tf_backend_register(&reg));
    reg.name = "cpu";
    FAILS_WITH(TF_ERR_ALREADY_EXISTS, "'cpu' is already registered", tf_backend_register(&reg));
    reg.name = "incomplete";
    reg.device_count = 1;
    reg.devices = devs;
    FAILS_WITH(TF_ERR_ABI_MISMATCH, "device 0 lacks a required method", tf_backend_register(&reg));
    reg.device_count = 3;
    reg.devices = NULL;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "reports 3 devices but no device array", tf_backend_register(&reg));
    /* a backend with no devices registers and says why */
    reg.name = "emptyback";
    reg.device_count = 0;
    OK(tf_backend_register(&reg));
    bool found = false;
    for (int i = 0; i < tf_backend_count(); i++) {
        tf_backend_props p;
        OK(tf_backend_get_props(i, &p));
        if (strcmp(p.name, "emptyback")) continue;
        found = true;
        assert_true(p.loaded);
        assert_int_equal(p.device_count, 0);
        assert_string_equal(p.reason, "no hardware on this machine");
        assert_string_equal(p.source, "in-process");
    }
    assert_true(found);
    tf_device *d;
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "emptyback:0", tf_device_get("emptyback:0", &d));
    tf_backend_props p;
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "out of range", tf_backend_get_props(999, &p));
}

static void test_fallback_is_counted(void **state) {
    (void)state;
    register_mybackend();
    tf_device *my;
    OK(tf_device_get("mybackend", &my));
    mybackend_stats_fn stats = (mybackend_stats_fn)tf_backend_proc_address("mybackend", "mybackend_stats");
    assert_non_null(stats);
    assert_null(tf_backend_proc_address("mybackend", "no_such_extra"));
    assert_null(tf_backend_proc_address("nosuch", "mybackend_stats"));
    assert_null(tf_backend_proc_address("cpu", "anything"));
    mybackend_stats before, after;
    stats(&before);
    uint64_t mm0 = tf_device_fallback_count(my, TF_OP_MATMUL), add0 = tf_device_fallback_count(my, TF_OP_ADD);
    uint64_t ops0 = tf_device_op_count(my);
    int64_t s22[2] = {2, 2};
    float v[4] = {1, 2, 3, 4}, want_mm[4] = {7, 10, 15, 22}, want_add[4] = {2, 4, 6, 8};
    tf_tensor *a = tensor_f32(my, 2, s22, v), *o = NULL;
    OK(tf_matmul(a, a, &o));                             /* mybackend lacks matmul */
    expect_f32(o, want_mm, 4);
    tf_tensor_release(o);
    OK(tf_add(a, a, &o));                                /* and has add */
    expect_f32(o, want_add, 4);
    tf_tensor_release(o);
    assert_int_equal(tf_device_fallback_count(my, TF_OP_MATMUL), mm0 + 1);
    assert_int_equal(tf_device_fallback_count(my, TF_OP_ADD), add0);
    assert_true(tf_device_op_count(my) >= ops0 + 2);
    tf_tensor_release(a);
    stats(&after);
    assert_int_equal(after.live_buffers, before.live_buffers);   /* nothing leaked in its allocator */
    assert_true(after.ops_run > before.ops_run);
}

static void *fail_in_thread(void *arg) {
    (void)arg;
    tf_device *d;
    tf_device_get("nowhere", &d);
    return strstr(tf_last_error(), "nowhere") ? (void *)1 : NULL;
}

static void test_errors_are_thread_local(void **state) {
    (void)state;
    tf_device *d;
    FAILS_WITH(TF_ERR_UNKNOWN_DEVICE, "here", tf_device_get("here", &d));
    pthread_t th;
    void *seen = NULL;
    assert_int_equal(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
    pthread_join(th, &seen);
    assert_non_null(seen);
    assert_non_null(strstr(tf_last_error(), "'here'"));  /* ours is untouched */
}

/* Ops on different tensors from several threads at once. */
static void *ops_in_thread(void *arg) {
    tf_device *dev = arg;
    for (int i = 0; i < 200; i++) {
        int64_t shape[2] = {4, 8};
        tf_tensor *a = NULL, *b = NULL, *c = NULL, *s = NULL;
        float total = 0;
        if (tf_full(dev, TF_F32, 2, shape, 1.5, &a) != TF_OK || tf_ones(dev, TF_F32, 2, shape, &b) != TF_OK ||
            tf_add(a, b, &c) != TF_OK || tf_sum(c, TF_ALL_AXES, false, &s) != TF_OK ||
            tf_tensor_read(s, &total, sizeof total) != TF_OK || total != 80.0f)
            return NULL;
        tf_tensor_release(a);
        tf_tensor_release(b);
        tf_tensor_release(c);
        tf_tensor_release(s);
    }
    return arg;
}

static void test_concurrent_ops(void **state) {
    (void)state;
    register_mybackend();
    tf_device *devs[4];
    OK(tf_device_get("cpu", &devs[0]));
    OK(tf_device_get("mybackend", &devs[1]));
    devs[2] = devs[0];
    devs[3] = devs[1];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, ops_in_thread, devs[i]), 0);
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        assert_ptr_equal(r, devs[i]);
    }
}

static void test_allocator_stats_and_threads(void **state) {
    (void)state;
    tf_device *cpu = cpu_device();
    OK(tf_device_empty_cache(cpu));
    tf_memory_stats a, b, c;
    OK(tf_device_memory_stats(cpu, &a));
    int64_t n = 1 << 20;
    tf_tensor *t = NULL;
    OK(tf_zeros(cpu, TF_F32, 1, &n, &t));
    OK(tf_device_memory_stats(cpu, &b));
    assert_int_equal(b.allocated, a.allocated + (4u << 20));
    assert_true(b.peak_allocated >= b.allocated && b.reserved >= b.allocated);
    tf_tensor_release(t);
    OK(tf_zeros(cpu, TF_F32, 1, &n, &t));       /* same size class: served from the cache */
    OK(tf_device_memory_stats(cpu, &c));
    assert_int_equal(c.cache_hits, b.cache_hits + 1);
    assert_int_equal(c.cache_misses, b.cache_misses);
    tf_tensor_release(t);
    OK(tf_device_empty_cache(cpu));              /* cached blocks go back to the OS */
    OK(tf_device_memory_stats(cpu, &c));
    assert_int_equal(c.reserved, c.allocated);
    tf_device *my;
    register_mybackend();
    OK(tf_device_get("mybackend", &my));
    tf_tensor *on_my = NULL;
    OK(tf_zeros(my, TF_F32, 1, &n, &on_my));
    OK(tf_device_memory_stats(my, &c));                /* the example backend counts its live bytes */
    assert_int_equal(c.allocated, (uint64_t)n * sizeof(float));
    tf_tensor_release(on_my);
    OK(tf_device_memory_stats(my, &c));
    assert_int_equal(c.allocated, 0);
    tf_device *twin_less = NULL;
    assert_int_equal(tf_device_get("nosuchbackend", &twin_less), TF_ERR_UNKNOWN_DEVICE);
    int before = tf_get_num_threads();
    assert_true(before >= 1);
    OK(tf_set_num_threads(1));
    assert_int_equal(tf_get_num_threads(), 1);
    FAILS_WITH(TF_ERR_INVALID_ARGUMENT, "tf_set_num_threads: 0 threads", tf_set_num_threads(0));
    OK(tf_set_num_threads(before));
}

/* "twin": two host-memory devices of one backend with a peer-copy slot, to
 * check that tf_tensor_to between them takes it (and nothing else does). */
typedef struct twin_buf { char *p; size_t n; } twin_buf;
static int twin_peer_calls;

static tf_status twin_info(void *ctx, tf_backend_device_info *info) {
    (void)ctx;
    snprintf(info->description, sizeof info->description, "twin test device");
    info->type = TF_DEVICE_TYPE_CPU;
    info->memory_total = info->memory_free = 1u << 30;
    info->caps.dtypes = 1u << TF_F32;
    info->caps.emulated = true;
    return TF_OK;
}
static tf_status twin_alloc(void *ctx, size_t n, tf_backend_buffer **out) {
    (void)ctx;
    twin_buf *b = malloc(sizeof *b);
    b->p = calloc(1, n ? n : 1);
    b->n = n;
    *out = (tf_backend_buffer *)b;
    return TF_OK;
}
static void twin_free(void *ctx, tf_backend_buffer *buf) {
    (void)ctx;
    free(((twin_buf *)buf)->p);
    free(buf);
}
static tf_status twin_upload(void *ctx, tf_backend_stream *st, tf_backend_buffer *dst, size_t off, const void *src,
                             size_t n) {
    (void)ctx;
    (void)st;
    memcpy(((twin_buf *)dst)->p + off, src, n);
    return TF_OK;
}
static tf_status twin_download(void *ctx, tf_backend_stream *st, tf_backend_buffer *src, size_t off, void *dst,
                               size_t n) {
    (void)ctx;
    (void)st;
    memcpy(dst, ((twin_buf *)src)->p + off, n);
    return TF_OK;
}
/* What the core asked of the twin's streams and events, in order:
 * "r0" = an event recorded on device 0's stream, "w1" = device 1's stream
 * made to wait, "p1" = a peer copy queued on device 1. */
static char twin_log[128];
static void twin_note(const char *what, void *ctx) {
    size_t n = strlen(twin_log);
    snprintf(twin_log + n, sizeof twin_log - n, "%s%s%d", n ? " " : "", what, *(int *)ctx);
}
static tf_status twin_stream_create(void *ctx, tf_backend_stream **out) {
    *out = (tf_backend_stream *)ctx;                    /* the stream is the device: one per device */
    return TF_OK;
}
static void twin_stream_destroy(void *ctx, tf_backend_stream *s) { assert_ptr_equal(ctx, s); }
/* The core's own transfers go to the default queue (NULL) unless the
 * thread made another stream current. */
static tf_status twin_event_create(void *ctx, tf_backend_event **out) {
    (void)ctx;
    *out = malloc(1);
    return *out ? TF_OK : TF_ERR_OUT_OF_MEMORY;
}
static tf_status twin_event_record(void *ctx, tf_backend_event *e, tf_backend_stream *s) {
    (void)e;
    assert_null(s);                                     /* the device's default queue */
    twin_note("r", ctx);
    return TF_OK;
}
static tf_status twin_event_wait(void *ctx, tf_backend_event *e, tf_backend_stream *s) {
    (void)e;
    assert_null(s);
    twin_note("w", ctx);
    return TF_OK;
}
static void twin_event_destroy(void *ctx, tf_backend_event *e) {
    (void)ctx;
    free(e);
}
static tf_status twin_peer(void *ctx, tf_backend_stream *st, tf_backend_buffer *dst, size_t doff, void *src_ctx,
                           tf_backend_buffer *src, size_t soff, size_t n) {
    assert_ptr_not_equal(ctx, src_ctx);                 /* two devices, as the slot promises */
    assert_null(st);                                    /* queued on the destination's default queue */
    twin_note("p", ctx);
    twin_peer_calls++;
    memcpy(((twin_buf *)dst)->p + doff, ((twin_buf *)src)->p + soff, n);
    return TF_OK;
}
static bool twin_supports(void *ctx, const tf_op *op) {
    (void)ctx;
    (void)op;
    return false;
}
static tf_status twin_run(void *ctx, tf_backend_stream *stream, const tf_op *op) {
    (void)ctx;
    (void)stream;
    (void)op;
    return TF_ERR_UNSUPPORTED;
}

static void test_peer_copy_between_devices_of_one_backend(void **state) {
    (void)state;
    static const tf_device_iface iface = {TF_STRUCT_INIT(tf_device_iface),
                                          .get_info = twin_info, .buffer_alloc = twin_alloc, .buffer_free = twin_free,
                                          .buffer_upload = twin_upload, .buffer_download = twin_download,
                                          .supports = twin_supports, .run = twin_run,
                                          .buffer_copy_from_peer = twin_peer, .stream_create = twin_stream_create,
                                          .stream_destroy = twin_stream_destroy, .event_create = twin_event_create,
                                          .event_record = twin_event_record, .event_wait = twin_event_wait,
                                          .event_destroy = twin_event_destroy};
    static const tf_backend_iface biface = {TF_STRUCT_INIT(tf_backend_iface)};
    static int ctx[2] = {0, 1};
    static const tf_backend_device devices[2] = {{&iface, &ctx[0]}, {&iface, &ctx[1]}};
    tf_backend_reg reg = {sizeof(tf_backend_reg), TF_BACKEND_ABI_MAJOR, TF_BACKEND_ABI_MINOR, "twin", &biface, NULL, 2, devices, NULL};
    OK(tf_backend_register(&reg));
    tf_device *t0, *t1;
    OK(tf_device_get("twin:0", &t0));
    OK(tf_device_get("twin:1", &t1));
    int64_t n = 6;
    float v[6] = {1, 2, 3, 4, 5, 6}, got[6];
    tf_tensor *a = tensor_f32(t0, 1, &n, v), *tail = NULL, *b = NULL, *c = NULL;
    OK(tf_slice(a, 0, 2, 6, 1, &tail));                 /* a view 8 bytes into its buffer */
    twin_peer_calls = 0;
    twin_log[0] = 0;
    OK(tf_tensor_to(tail, t1, &b));
    assert_int_equal(twin_peer_calls, 1);
    /* device 1 waits for device 0's queued work, copies, then device 0's
     * later work (reuse of the source's memory) waits for the copy */
    assert_string_equal(twin_log, "r0 w1 p1 r1 w0");
    assert_ptr_equal(tf_tensor_device(b), t1);
    OK(tf_tensor_read(b, got, 4 * sizeof(float)));
    for (int i = 0; i < 4; i++) assert_true(got[i] == v[i + 2]);
    OK(tf_tensor_to(b, cpu_device(), &c));              /* another backend: staged, not a peer copy */
    assert_int_equal(twin_peer_calls, 1);
    OK(tf_tensor_read(c, got, 4 * sizeof(float)));
    assert_true(got[0] == 3 && got[3] == 6);
    tf_tensor *all[] = {a, tail, b, c};
    for (int i = 0; i < 4; i++) tf_tensor_release(all[i]);
    tf_shutdown();                                      /* forget the twin backend */
}

/* Limits and hints: sane on every device; the CPU's against glibc's own
 * figures (sysconf), not the sysfs files the backend reads. OpenCL's are
 * compared with clinfo by tests/opencl/limits_match_clinfo.py. */
static void test_limits_and_hints_on_every_device(void **state) {
    (void)state;
    for (int i = 0; i < tf_device_count(); i++) {
        tf_device *d = tf_device_at(i);
        tf_device_limits l;
        tf_device_hints h;
        OK(tf_device_get_limits(d, &l, &h));
        OK(tf_device_get_limits(d, NULL, NULL));
        if (!strncmp(tf_device_name(d), "mybackend", 9) || !strncmp(tf_device_name(d), "testplug", 8)) continue;
        if (l.max_buffer_bytes == 0 || l.max_binding_bytes == 0 || l.max_binding_bytes > l.max_buffer_bytes)
            fail_msg("%s: buffer %llu, binding %llu", tf_device_name(d), (unsigned long long)l.max_buffer_bytes,
                     (unsigned long long)l.max_binding_bytes);
        assert_true(h.alignment >= 1 && (h.alignment & (h.alignment - 1)) == 0);
        assert_true(h.vector_width_f32 >= 1);
        assert_true(l.max_work_group_dims[0] <= l.max_work_group_size);
    }
    tf_device_limits l;
    tf_device_hints h;
    OK(tf_device_get_limits(cpu_device(), &l, &h));
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    assert_int_equal(l.compute_units, CPU_COUNT(&set));
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l1 > 0) assert_int_equal(l.cache_bytes[0], l1);
    if (l2 > 0) assert_int_equal(l.cache_bytes[1], l2);
    /* glibc's L3 is the package's (CPUID: 256 MiB on this EPYC); sysfs's is
     * the slice this core shares (32 MiB, as lscpu says): at most glibc's. */
    if (l3 > 0) assert_true(l.cache_bytes[2] > 0 && l.cache_bytes[2] <= (uint64_t)l3);
    assert_true(l.subgroup_size == 4 || l.subgroup_size == 8 || l.subgroup_size == 16);
    assert_true(h.alignment == 64 && !h.async_helps && h.vector_width_f32 == l.subgroup_size);
    tf_device_props p;
    OK(tf_device_get_props(cpu_device(), &p));
    assert_int_equal(l.max_buffer_bytes, p.memory_total);
    FAILS_WITH(TF_ERR_NULL_ARGUMENT, "NULL", tf_device_get_limits(NULL, &l, &h));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_auto_and_priority),
        cmocka_unit_test(test_tf_backend_environment),
        cmocka_unit_test(test_memory_aware_pick),
        cmocka_unit_test(test_mixed_device_policy),
        cmocka_unit_test(test_failed_move_keeps_inputs),
        cmocka_unit_test(test_ranking_by_device_kind),
        cmocka_unit_test(test_registration_errors),
        cmocka_unit_test(test_fallback_is_counted),
        cmocka_unit_test(test_errors_are_thread_local),
        cmocka_unit_test(test_concurrent_ops),
        cmocka_unit_test(test_allocator_stats_and_threads),
        cmocka_unit_test(test_peer_copy_between_devices_of_one_backend),
        cmocka_unit_test(test_limits_and_hints_on_every_device),
    };
    return run_and_shutdown(cmocka_run_group_tests(tests, NULL, NULL));
}
