/* How a job with a missing rank ends (tests/comm/abort.sh runs it):
 *   late: rank 1 comes to an all-reduce 3 s late; rank 0, with a 0.5 s
 *         timeout, gets TF_ERR_TIMEOUT and calls tf_comm_abort(c, 3), which
 *         must end rank 1 too (it would wait in the exchange);
 *   dies: rank 1 exits (status 7) before the all-reduce; the launcher
 *         or, failing that, rank 0's timeout must end the job.
 * The script checks the job's exit status and that it ended in seconds. */
#define _DEFAULT_SOURCE   /* usleep */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tensorframe/comm.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "late";
    tf_comm *c = NULL;
    if (tf_comm_init(&c) != TF_OK) return 1;
    int rank = tf_comm_rank(c);
    tf_comm_set_timeout(c, strcmp(mode, "late") == 0 ? 0.5 : 5);
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t n = 1 << 20;
    tf_tensor *x = NULL;
    tf_ones(cpu, TF_F32, 1, &n, &x);
    if (rank == 1 && strcmp(mode, "dies") == 0) _exit(7);
    if (rank == 1) usleep(3000 * 1000);
    tf_status s = tf_all_reduce(c, x, TF_REDUCE_SUM);
    if (s == TF_ERR_TIMEOUT) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, tf_status_name(s), tf_last_error());
        tf_comm_abort(c, 3);
    }
    fprintf(stderr, "rank %d: all-reduce returned %s\n", rank, tf_status_name(s));
    tf_tensor_release(x);
    tf_comm_destroy(c);
    return 0;
}
