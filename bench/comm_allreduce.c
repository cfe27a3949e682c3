/* tf_all_reduce beside a plain MPI_Allreduce of the same buffer and a
 * local memcpy of it: 64 MiB of f32 (16M elements) summed in place, the
 * best of --rounds interleaved timed calls, in GB/s of algorithm bandwidth
 * (bytes / time, as nccl-tests report "algbw").
 *
 *   mpirun -np 2 --oversubscribe build/bin/comm_allreduce [--device cpu] [--mib 64] [--rounds 10]
 *
 * (as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1). */
#define _DEFAULT_SOURCE            /* posix_memalign, madvise */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <tensorframe/comm.h>

/* One timed call of fn; the call ends when the slowest rank's does. */
static double timed(MPI_Comm comm, void (*fn)(void *), void *arg) {
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    fn(arg);
    double t = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    return slowest;
}

static double min2(double a, double b) { return a < b ? a : b; }

typedef struct args {
    tf_comm *comm;
    tf_tensor *t;
    float *buf, *copy;
    int64_t n;
} args;

static void run_tf(void *p) {
    args *a = p;
    if (tf_all_reduce(a->comm, a->t, TF_REDUCE_SUM) != TF_OK) {
        fprintf(stderr, "tf_all_reduce: %s\n", tf_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void run_mpi(void *p) {
    args *a = p;
    MPI_Allreduce(MPI_IN_PLACE, a->buf, (int)a->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void run_memcpy(void *p) {
    args *a = p;
    memcpy(a->copy, a->buf, sizeof(float) * (size_t)a->n);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *spec = "cpu";
    int mib = 64, rounds = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--device")) spec = argv[i + 1];
        else if (!strcmp(argv[i], "--mib")) mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    }
    args a = {.n = (int64_t)mib * (1 << 20) / 4};
    tf_device *dev = NULL;
    if (tf_comm_init(&a.comm) != TF_OK || tf_device_get(spec, &dev) != TF_OK ||
        tf_full(dev, TF_F32, 1, &a.n, 0.0, &a.t) != TF_OK) {
        fprintf(stderr, "setup: %s\n", tf_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* On 2 MiB boundaries with huge pages advised, as tensorframe's CPU
     * allocator places large blocks: the comparison is of the calls, not of
     * TLB misses (with plain malloc pages MPI_Allreduce ran 20% slower) */
    size_t bytes_all = sizeof(float) * (size_t)a.n;
    if (posix_memalign((void **)&a.buf, 2u << 20, bytes_all) || posix_memalign((void **)&a.copy, 2u << 20, bytes_all))
        MPI_Abort(MPI_COMM_WORLD, 1);
    madvise(a.buf, bytes_all, MADV_HUGEPAGE);
    madvise(a.copy, bytes_all, MADV_HUGEPAGE);
    memset(a.buf, 0, sizeof(float) * (size_t)a.n);
    memset(a.copy, 1, sizeof(float) * (size_t)a.n);                  /* pages touched before timing */
    double bytes = (double)a.n * 4;
    run_tf(&a);                                                       /* warm: caches, MPI's shared memory */
    run_mpi(&a);
    double t_tf = 1e30, t_mpi = 1e30, t_cpy = 1e30;
    for (int r = 0; r < rounds; r++) {                               /* interleaved: no order effect */
        t_tf = min2(t_tf, timed(MPI_COMM_WORLD, run_tf, &a));
        t_mpi = min2(t_mpi, timed(MPI_COMM_WORLD, run_mpi, &a));
        t_cpy = min2(t_cpy, timed(MPI_COMM_WORLD, run_memcpy, &a));
    }
    int rank = tf_comm_rank(a.comm), size = tf_comm_size(a.comm);
    if (!rank) {
        printf("all-reduce (sum, in place) of %d MiB f32 on %s, %d ranks, best of %d\n", mib, spec, size, rounds);
        printf("  tf_all_reduce   %8.2f ms  %7.2f GB/s\n", t_tf * 1e3, bytes / t_tf / 1e9);
        printf("  MPI_Allreduce   %8.2f ms  %7.2f GB/s\n", t_mpi * 1e3, bytes / t_mpi / 1e9);
        printf("  memcpy          %8.2f ms  %7.2f GB/s\n", t_cpy * 1e3, bytes / t_cpy / 1e9);
        printf("  tf / MPI_Allreduce bandwidth %.3f, tf / memcpy %.3f\n", t_mpi / t_tf, t_cpy / t_tf);
    }
    tf_tensor_release(a.t);
    free(a.buf);
    free(a.copy);
    tf_comm_destroy(a.comm);
    MPI_Finalize();
    return 0;
}
