/* The shared GPU runtime layer on a fake driver: the caching allocator
 * (size classes, reuse, one statistics definition, release-and-retry on a
 * full device, failures), lost-device handling, range checks, and staged
 * transfers across chunk boundaries. Every GPU backend runs this code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/backend.h>

#include "gpu_runtime.h"

static int passed, failed;
#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) passed++;                                                  \
        else {                                                               \
            failed++;                                                        \
            printf("FAIL line %d: %s (%s)\n", __LINE__, #cond, tf_last_error()); \
        }                                                                    \
    } while (0)

/* A fake device: host memory, a capacity, and a count of live driver blocks. */
typedef struct fake {
    size_t capacity, used;
    int live_blocks, frees, pinned_live, events_live;
    bool fail_pinned;
} fake;

static tf_status fake_alloc(void *ctx, size_t n, void **handle) {
    fake *f = ctx;
    if (f->used + n > f->capacity) return tf_host()->set_error(TF_ERR_OUT_OF_MEMORY, "fake: device full");
    size_t *p = malloc(sizeof(size_t) + n);
    if (!p) return TF_ERR_OUT_OF_MEMORY;
    *p = n;
    f->used += n;
    f->live_blocks++;
    *handle = p + 1;
    return TF_OK;
}

static void fake_free(void *ctx, void *handle) {
    fake *f = ctx;
    size_t *p = (size_t *)handle - 1;
    f->used -= *p;
    f->live_blocks--;
    f->frees++;
    free(p);
}

static const tf_gpu_mem_ops fake_mem = {fake_alloc, fake_free};

static void test_allocator(void) {
    fake f = {.capacity = (1 << 20) + 1024};
    tf_gpu_dev d;
    tf_gpu_dev_init(&d, tf_host(), "fake:0", &fake_mem, &f);
    tf_gpu_block *a = NULL, *b = NULL, *c = NULL;
    CHECK(tf_gpu_alloc(&d, 1000, &a) == TF_OK && a->capacity == 1024 && a->requested == 1000);
    CHECK(tf_gpu_alloc(&d, 100, &b) == TF_OK && b->capacity == 512);
    tf_memory_stats st;
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.allocated == 1100 && st.reserved == 1536 && st.peak_allocated == 1100 && st.cache_misses == 2);
    void *handle = a->handle;
    tf_gpu_free(&d, a);
    CHECK(tf_gpu_alloc(&d, 900, &c) == TF_OK && c->handle == handle);   /* the same class: reused */
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.cache_hits == 1 && st.allocated == 1000 && st.reserved == 1536 && f.live_blocks == 2);
    CHECK(tf_gpu_check_range(&d, c, 800, 100) == TF_OK);
    CHECK(tf_gpu_check_range(&d, c, 800, 101) == TF_ERR_INVALID_ARGUMENT && strstr(tf_last_error(), "outside a buffer"));
    /* A full device: the cache goes back and the request is retried once. */
    tf_gpu_free(&d, c);
    tf_gpu_block *big = NULL;
    CHECK(tf_gpu_alloc(&d, 1 << 20, &big) == TF_OK);                   /* fits only once the cached 1024 are freed */
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.retries == 1 && st.ooms == 0 && f.frees == 1);
    tf_gpu_block *none = NULL;
    CHECK(tf_gpu_alloc(&d, 4096, &none) == TF_ERR_OUT_OF_MEMORY && none == NULL && strstr(tf_last_error(), "device full"));
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.ooms == 1);
    CHECK(tf_gpu_alloc(&d, SIZE_MAX / 2, &none) == TF_ERR_OUT_OF_MEMORY);  /* past every size class */
    if (big) tf_gpu_free(&d, big);
    tf_gpu_free(&d, b);
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.allocated == 0);
    tf_gpu_release_cache(&d);
    tf_gpu_memory_stats(&d, &st);
    CHECK(st.reserved == 0 && f.live_blocks == 0);
    tf_gpu_dev_destroy(&d);
}

static void test_lost_device(void) {
    fake f = {.capacity = 1 << 20};
    tf_gpu_dev d;
    tf_gpu_dev_init(&d, tf_host(), "fake:1", &fake_mem, &f);
    CHECK(tf_gpu_enter(&d) == TF_OK);
    CHECK(tf_gpu_fail(&d, TF_GPU_ERROR_OTHER, "fakeLaunch", "E_BUSY", "try later") == TF_ERR_BACKEND &&
          !strcmp(tf_last_error(), "fake:1: fakeLaunch failed: E_BUSY (try later)"));
    CHECK(!d.lost);
    CHECK(tf_gpu_fail(&d, TF_GPU_ERROR_STICKY, "fakeLaunch", "E_ILLEGAL_ADDRESS", NULL) == TF_ERR_DEVICE_LOST);
    tf_gpu_leave(&d);
    CHECK(tf_gpu_enter(&d) == TF_ERR_DEVICE_LOST &&
          strstr(tf_last_error(), "fake:1 is lost (fakeLaunch failed with E_ILLEGAL_ADDRESS)"));
    tf_gpu_dev_destroy(&d);
}

/* Staging on the fake device: copies are immediate, events count. */
static tf_status st_pinned_alloc(void *ctx, size_t n, void **p) {
    fake *f = ctx;
    if (f->fail_pinned) return tf_host()->set_error(TF_ERR_OUT_OF_MEMORY, "fake: no pinned memory");
    *p = malloc(n);
    f->pinned_live++;
    return *p ? TF_OK : TF_ERR_OUT_OF_MEMORY;
}
static void st_pinned_free(void *ctx, void *p) {
    ((fake *)ctx)->pinned_live--;
    free(p);
}
static tf_status st_to_device(void *ctx, void *dst, size_t off, const void *src, size_t n) {
    (void)ctx;
    memcpy((char *)dst + off, src, n);
    return TF_OK;
}
static tf_status st_to_host(void *ctx, void *dst, const void *src, size_t off, size_t n) {
    (void)ctx;
    memcpy(dst, (const char *)src + off, n);
    return TF_OK;
}
static tf_status st_event_create(void *ctx, void **e) {
    ((fake *)ctx)->events_live++;
    *e = malloc(1);
    return TF_OK;
}
static void st_event_destroy(void *ctx, void *e) {
    ((fake *)ctx)->events_live--;
    free(e);
}
static tf_status st_event_record(void *ctx, void *e) { (void)ctx; (void)e; return TF_OK; }
static tf_status st_event_wait(void *ctx, void *e) { (void)ctx; (void)e; return TF_OK; }
static const tf_gpu_staging_ops fake_staging = {st_pinned_alloc, st_pinned_free,   st_to_device,    st_to_host,
                                                st_event_create, st_event_destroy, st_event_record, st_event_wait};

static void test_staging(void) {
    fake f = {0};
    tf_gpu_staging st;
    tf_gpu_staging_init(&st, &fake_staging, &f, 64);
    static const size_t sizes[] = {0, 1, 63, 64, 65, 128, 200, 1000};
    unsigned char src[1000], dev[1100], back[1000];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7 + 3);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        memset(dev, 0xAA, sizeof dev);
        memset(back, 0, sizeof back);
        CHECK(tf_gpu_staged_upload(&st, dev, 50, src, n) == TF_OK);
        CHECK(!memcmp(dev + 50, src, n) && dev[49] == 0xAA && dev[50 + n] == 0xAA);
        CHECK(tf_gpu_staged_download(&st, back, dev, 50, n) == TF_OK && !memcmp(back, src, n));
    }
    CHECK(f.pinned_live == 2 && f.events_live == 2);
    tf_gpu_staging_release(&st);
    CHECK(f.pinned_live == 0 && f.events_live == 0);
    f.fail_pinned = true;                                 /* no pinned memory: an error, nothing held */
    CHECK(tf_gpu_staged_upload(&st, dev, 0, src, 10) == TF_ERR_OUT_OF_MEMORY && f.events_live == 0);
}

int main(void) {
    test_allocator();
    test_lost_device();
    test_staging();
    tf_shutdown();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
