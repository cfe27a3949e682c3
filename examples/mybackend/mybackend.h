/* An example backend written against tensorframe/backend.h only. */
#ifndef MYBACKEND_H
#define MYBACKEND_H

#include <tensorframe/backend.h>

/* Register the backend in this process (name "mybackend" by default). */
tf_status mybackend_register(void);

/* Allocator statistics, also reachable through get_proc_address("mybackend_stats"). */
typedef struct mybackend_stats {
    uint64_t live_bytes, live_buffers, total_allocs, ops_run;
} mybackend_stats;
typedef void (*mybackend_stats_fn)(mybackend_stats *out);

#endif
