/* Uses the library the way programs do, on the example backend loaded as a
 * plugin with two devices (testplug) and registered in-process (mybackend),
 * so that the core goes through every SDK slot it calls. The backends record
 * the calls (MYBACKEND_SLOT_LOG); slots.sh then checks that every slot
 * backend.h documents was called. */
#include <stdio.h>
#include <string.h>

#include <tensorframe/dlpack.h>
#include <tensorframe/tensorframe.h>

#include "mybackend.h"

static int failures;
#define CHECK(call)                                                                              \
    do {                                                                                         \
        tf_status s_ = (call);                                                                   \
        if (s_ != TF_OK) {                                                                       \
            printf("FAIL %s: %s: %s\n", #call, tf_status_name(s_), tf_last_error());              \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

static void exercise(tf_device *d0, tf_device *d1, tf_device *cpu) {
    int64_t n = 8, shape[2] = {2, 4};
    tf_tensor *a = NULL, *b = NULL, *c = NULL, *moved = NULL, *back = NULL, *sm = NULL, *cp = NULL, *x = NULL;
    CHECK(tf_arange(cpu, TF_F32, 0, 8, 1, &x));                    /* then uploaded to the device */
    CHECK(tf_tensor_to(x, d0, &a));
    CHECK(tf_ones(d0, TF_F32, 1, &n, &b));                          /* run: fill */
    CHECK(tf_add(a, b, &c));                                        /* supports + run */
    CHECK(tf_copy(c, &cp));                                         /* same device: buffer_copy */
    tf_tensor *r = NULL;
    CHECK(tf_reshape(cp, 2, shape, &r));
    CHECK(tf_softmax(r, 1, &sm));                                   /* unsupported: the CPU runs it */
    CHECK(tf_tensor_to(c, d1, &moved));                             /* peer copy, ordered by events */
    CHECK(tf_tensor_to(moved, cpu, &back));                         /* download */
    float got[8];
    CHECK(tf_tensor_read(back, got, sizeof got));
    for (int i = 0; i < 8; i++)
        if (got[i] != (float)i + 1) {
            printf("FAIL element %d: %g, want %d\n", i, got[i], i + 1);
            failures++;
        }
    CHECK(tf_device_synchronize(d0));
    tf_memory_stats st;
    CHECK(tf_device_memory_stats(d0, &st));
    CHECK(tf_device_empty_cache(d1));
    CHECK(tf_device_reset_peak_memory(d0));
    tf_alloc_conf conf = tf_alloc_conf_default();
    CHECK(tf_device_alloc_conf_set(d1, &conf));
    tf_tensor *all[] = {a, b, c, moved, back, sm, cp, x, r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
}

/* Streams, events, pinned memory and asynchronous copies on d0. */
static void exercise_streams(tf_device *d0) {
    tf_stream *side = NULL;
    tf_event *start = NULL, *end = NULL;
    tf_tensor *t = NULL;
    float *pinned = NULL, got[4];
    int64_t n = 4;
    CHECK(tf_stream_create(d0, &side));                             /* stream_create */
    CHECK(tf_event_create(TF_EVENT_TIMING, &start));
    CHECK(tf_event_create(TF_EVENT_TIMING, &end));
    CHECK(tf_host_alloc(sizeof got, TF_HOST_PINNED, (void **)&pinned));   /* host_alloc */
    if (pinned && !tf_host_is_pinned(pinned)) {
        printf("FAIL tf_host_alloc: not pinned through the backend\n");
        failures++;
    }
    CHECK(tf_stream_set_current(side));
    CHECK(tf_event_record(start, side));
    CHECK(tf_zeros(d0, TF_F32, 1, &n, &t));
    for (int i = 0; pinned && i < 4; i++) pinned[i] = (float)(10 + i);
    if (t && pinned) CHECK(tf_tensor_write_async(t, pinned, sizeof got, NULL));   /* buffer_upload_async */
    if (t) CHECK(tf_tensor_read_async(t, got, sizeof got, side));                 /* buffer_download_async */
    CHECK(tf_event_record(end, side));
    CHECK(tf_stream_wait_event(tf_stream_default(d0), end));
    bool done = false;
    CHECK(tf_event_query(end, &done));                              /* event_query */
    CHECK(tf_event_synchronize(end));                               /* event_synchronize */
    double ms = -1;
    CHECK(tf_event_elapsed_ms(start, end, &ms));                    /* event_elapsed_ms */
    CHECK(tf_stream_synchronize(side));
    if (!done || ms < 0 || got[3] != 13.0f) {
        printf("FAIL streams: done %d, %g ms, got[3] %g\n", done, ms, got[3]);
        failures++;
    }
    void *queue = NULL;
    CHECK(tf_stream_native_handle(side, &queue));                  /* stream_native */
    if (!queue) {
        printf("FAIL tf_stream_native_handle: no queue for a stream of %s\n", tf_device_name(d0));
        failures++;
    }
    DLManagedTensorVersioned *m = NULL;
    if (t) CHECK(tf_tensor_to_dlpack(t, &m));                       /* buffer_native: device memory, no copy */
    if (m) {
        const float *p = m->dl_tensor.data;                         /* the example's memory is host memory */
        if (m->dl_tensor.device.device_type != kDLExtDev || !p || p[3] != 13.0f) {
            printf("FAIL tf_tensor_to_dlpack of %s: device type %d, p[3] %g\n", tf_device_name(d0),
                   (int)m->dl_tensor.device.device_type, p ? p[3] : -1.0);
            failures++;
        }
        void *at = NULL;
        DLDevice where = {kDLCPU, 0};
        CHECK(tf_tensor_native_memory(t, &at, &where));
        if (at != m->dl_tensor.data || where.device_type != kDLExtDev) {
            printf("FAIL tf_tensor_native_memory: %p on %d, the export %p\n", at, (int)where.device_type,
                   m->dl_tensor.data);
            failures++;
        }
        m->deleter(m);
    }
    CHECK(tf_stream_set_current(tf_stream_default(d0)));
    tf_tensor_release(t);
    tf_event_destroy(start);
    tf_event_destroy(end);
    tf_host_free(pinned);                                          /* host_free */
    tf_stream_destroy(side);                                        /* stream_destroy */
}

/* A graph of the example backend's own ops becomes a native graph: one
 * launch per replay, the results of the ops run one by one. */
static void exercise_graphs(tf_device *d0) {
    int64_t n = 4;
    float v[4] = {1, 2, 3, 4}, got[4];
    tf_tensor *x = NULL, *y = NULL, *z = NULL;
    tf_graph *g = NULL;
    CHECK(tf_tensor_from_data(d0, TF_F32, 1, &n, v, &x));
    CHECK(tf_graph_begin(d0));                                      /* graph_capture_begin at the end */
    CHECK(tf_add(x, x, &y));
    CHECK(tf_mul(y, x, &z));
    CHECK(tf_graph_end(&g));                                        /* graph_capture_end */
    if (g && !tf_graph_is_native(g)) {
        printf("FAIL graphs: %s made no native graph\n", tf_device_name(d0));
        failures++;
    }
    float w[4] = {-1, 0.5f, 2, 3};
    if (x) CHECK(tf_tensor_write(x, w, sizeof w));
    if (g) CHECK(tf_graph_replay(g));                               /* graph_launch */
    if (z) CHECK(tf_tensor_read(z, got, sizeof got));
    for (int i = 0; z && i < 4; i++)
        if (got[i] != 2 * w[i] * w[i]) {
            printf("FAIL graphs: element %d is %g after the native replay, want %g\n", i, got[i], 2 * w[i] * w[i]);
            failures++;
        }
    tf_graph_destroy(g);                                            /* graph_destroy */
    tf_tensor_release(x);
    tf_tensor_release(y);
    tf_tensor_release(z);
}

int main(void) {
    CHECK(mybackend_register());
    tf_device *cpu = NULL, *p0 = NULL, *p1 = NULL, *m0 = NULL, *m1 = NULL;
    CHECK(tf_device_get("cpu", &cpu));
    CHECK(tf_device_get("testplug:0", &p0));
    CHECK(tf_device_get("testplug:1", &p1));
    CHECK(tf_device_get("mybackend:0", &m0));
    CHECK(tf_device_get("mybackend:1", &m1));
    if (failures) return 1;
    exercise(p0, p1, cpu);                                          /* opaque memory: staged */
    exercise(m0, m1, cpu);                                          /* host memory: in place */
    exercise_streams(p0);
    exercise_streams(m0);
    exercise_graphs(p0);
    exercise_graphs(m0);
    int threads = tf_get_num_threads();
    CHECK(tf_set_num_threads(threads));
    for (int i = 0; i < tf_backend_count(); i++) {                  /* each backend's thread count */
        tf_backend_props p;
        CHECK(tf_backend_get_props(i, &p));
    }
    if (!tf_backend_proc_address("testplug", "mybackend_stats")) {
        printf("FAIL: no mybackend_stats extra\n");
        failures++;
    }
    tf_shutdown();                                                  /* shutdown */
    printf("sdk_exercise: %s\n", failures ? "failed" : "ok");
    return failures ? 1 : 0;
}
