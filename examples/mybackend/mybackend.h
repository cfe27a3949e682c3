/* An example backend written against tensorframe/backend.h only. */
#ifndef MYBACKEND_H
#define MYBACKEND_H

#include <tensorframe/backend.h>

/* Register the backend in this process (name "mybackend" by default). */
tf_status mybackend_register(void);

/* Allocator statistics, also reachable through get_proc_address("mybackend_stats"). */
typedef struct mybackend_stats {
    uint64_t live_bytes, live_buffers, total_allocs, ops_run;
    uint64_t injected_failures;          /* allocations failed by mybackend_fail_after */
    uint64_t failure_countdown;          /* allocations until the armed failure (0: none armed) */
    uint64_t graph_launches;             /* native graphs launched (each runs all its ops) */
} mybackend_stats;
typedef void (*mybackend_stats_fn)(mybackend_stats *out);
/* For tests of failure paths: the nth allocation this backend makes from now
 * on (buffers and kernel scratch) fails; 0 turns that off. Reachable through
 * get_proc_address("mybackend_fail_after"). */
typedef void (*mybackend_fail_after_fn)(int64_t n);

/* How often the core called each SDK slot of this backend, through
 * get_proc_address("mybackend_slot_calls"): names[i] was called counts[i]
 * times (a snapshot, valid until the next call). */
typedef void (*mybackend_slot_calls_fn)(const char *const **names, const uint64_t **counts, int *n);

#endif
