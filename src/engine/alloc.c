/* Host allocations of the library, counted so that tests can fail the nth
 * one (SQLite's faultsim, tf_debug_fail_allocation): every malloc in the core,
 * the host memory backends take through tf_host_api, and every device buffer
 * the core asks a backend for go through here. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static _Atomic int64_t fail_at;        /* 0: off; else the count at which to fail */
static _Atomic int64_t counted;        /* allocations since armed */

void tf_debug_fail_allocation(int64_t nth) {
    atomic_store(&counted, 0);
    atomic_store(&fail_at, nth > 0 ? nth : 0);
}

int64_t tf_debug_allocation_count(void) { return atomic_load(&counted); }

bool tf__alloc_should_fail(void) {
    int64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (!at) return false;
    return atomic_fetch_add(&counted, 1) + 1 == at;
}

void *tf__malloc(size_t n) { return tf__alloc_should_fail() ? NULL : malloc(n ? n : 1); }

void *tf__calloc(size_t count, size_t size) {
    if (tf__alloc_should_fail()) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *tf__realloc(void *p, size_t n) { return tf__alloc_should_fail() ? NULL : realloc(p, n ? n : 1); }

char *tf__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = tf__malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

void tf__free(void *p) { free(p); }
