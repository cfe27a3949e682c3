/* The collectives under mpirun (2 ranks in make test): every collective
 * on cpu and opencl:0, dtypes i32 f32 f16 bf16, sizes from 1 element to
 * 64 MiB, in place and not, a strided view; each rank builds every rank's
 * input itself (a function of rank and index), so it checks the result
 * against a float64 reference: integers bit-exact, floats within the bound
 * the reduction order allows. Then the errors: mismatched shapes and
 * dtypes on every rank, a short message, bad roots and peers - each
 * followed by a collective that must still work (no hang, no torn state). */
#define _DEFAULT_SOURCE   /* clock_gettime */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/comm.h>

static int failures, checks;
static tf_comm *comm;
static int rank, size;

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        checks++;                                                          \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "[rank %d] %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " (%s)\n", tf_last_error());                   \
        }                                                                  \
    } while (0)

#define OK(call) EXPECT((call) == TF_OK, "%s failed", #call)

/* Rank r's element i, before rounding to the dtype: integers in [-50, 50]
 * for i32, otherwise a spread of signs and magnitudes. */
static float value(int r, int64_t i, tf_dtype dt) {
    uint64_t h = (uint64_t)i * 2654435761u + (uint64_t)r * 40503u + 12345u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    if (dt == TF_I32) return (float)((int)(h % 101) - 50);
    return ((float)(h % 20001) - 10000.0f) / 3000.0f;
}

static double eps_of(tf_dtype dt) {
    switch (dt) {
    case TF_F32: return 0x1p-23;
    case TF_F16: return 0x1p-10;
    case TF_BF16: return 0x1p-7;
    default: return 0;
    }
}

/* Rank r's input on dev: generated in f32, cast to dt, moved. */
static tf_tensor *input(int r, tf_device *dev, tf_dtype dt, int64_t n) {
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = value(r, i, dt);
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    tf_tensor *f = NULL, *c = NULL, *out = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 1, &n, v, &f));
    OK(tf_cast(f, dt, &c));
    OK(tf_tensor_to(c, dev, &out));
    tf_tensor_release(f);
    tf_tensor_release(c);
    free(v);
    return out;
}

/* A tensor's n values as doubles (malloc'd): NaN where t is missing or of
 * another size (a failed collective's result), so the checks that follow
 * fail instead of reading past the buffer. */
static double *values(const tf_tensor *t, int64_t n) {
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) out[i] = NAN;
    tf_tensor *d = NULL;
    EXPECT(t && tf_tensor_numel(t) == n, "a tensor of %lld elements", (long long)n);
    if (t && tf_tensor_numel(t) == n) {
        OK(tf_cast(t, TF_F64, &d));
        OK(tf_tensor_read(d, out, sizeof(double) * (size_t)n));
    }
    tf_tensor_release(d);
    return out;
}

/* Every rank's rounded input as doubles: ins[r][i]. */
static double **all_inputs(tf_device *dev, tf_dtype dt, int64_t n) {
    double **ins = malloc(sizeof(double *) * (size_t)size);
    for (int r = 0; r < size; r++) {
        tf_tensor *t = input(r, dev, dt, n);
        ins[r] = values(t, n);
        tf_tensor_release(t);
    }
    return ins;
}

static void free_inputs(double **ins) {
    for (int r = 0; r < size; r++) free(ins[r]);
    free(ins);
}

/* got[i] against the reduction of ins[*][offset + i]. */
static int compare_reduction(const char *what, const double *got, double **ins, int64_t offset, int64_t n,
                             tf_reduce_op op, tf_dtype dt) {
    int bad = 0;
    double eps = eps_of(dt);
    for (int64_t i = 0; i < n && bad < 3; i++) {
        double sum = 0, mag = 0, mx = -INFINITY, mn = INFINITY;
        for (int r = 0; r < size; r++) {
            double v = ins[r][offset + i];
            sum += v;
            mag += fabs(v);
            mx = fmax(mx, v);
            mn = fmin(mn, v);
        }
        double want = op == TF_REDUCE_MAX ? mx : op == TF_REDUCE_MIN ? mn : op == TF_REDUCE_MEAN ? sum / size : sum;
        /* one rounding per step of the reduction (size - 1), one for the
         * division of mean: each at most eps/2 of what it rounds */
        double bound = op == TF_REDUCE_SUM || op == TF_REDUCE_MEAN ? eps * mag * size / (op == TF_REDUCE_MEAN ? size : 1)
                                                                   : 0;
        if (op == TF_REDUCE_MEAN) bound += eps * fabs(want);
        if (!(fabs(got[i] - want) <= bound)) {
            bad++;
            fprintf(stderr, "[rank %d] %s %s: element %lld is %.9g, want %.9g (bound %.3g)\n", rank, what,
                    tf_dtype_name(dt), (long long)i, got[i], want, bound);
        }
    }
    return bad;
}

static void check_all_reduce(tf_device *dev, tf_dtype dt, int64_t n, double **ins) {
    static const tf_reduce_op ops[] = {TF_REDUCE_SUM, TF_REDUCE_MAX, TF_REDUCE_MIN, TF_REDUCE_MEAN};
    for (int k = 0; k < 4; k++) {
        if (ops[k] == TF_REDUCE_MEAN && dt == TF_I32) continue;
        tf_tensor *x = input(rank, dev, dt, n), *y = NULL;
        OK(tf_all_reduce_to(comm, x, ops[k], &y));                 /* not in place: x unchanged */
        double *xv = values(x, n);
        EXPECT(!memcmp(xv, ins[rank], sizeof(double) * (size_t)n), "all_reduce_to changed its input");
        double *yv = values(y, n);
        EXPECT(!compare_reduction("all_reduce_to", yv, ins, 0, n, ops[k], dt), "all_reduce_to op %d", k);
        OK(tf_all_reduce(comm, x, ops[k]));                        /* in place */
        double *xr = values(x, n);
        EXPECT(!memcmp(xr, yv, sizeof(double) * (size_t)n), "in place and not differ (op %d)", k);
        EXPECT(tf_tensor_device(y) == dev, "all_reduce_to's result is on %s", tf_device_name(tf_tensor_device(y)));
        free(xv);
        free(yv);
        free(xr);
        tf_tensor_release(x);
        tf_tensor_release(y);
    }
}

static void check_gather_scatter_broadcast(tf_device *dev, tf_dtype dt, int64_t n, double **ins) {
    tf_tensor *x = input(rank, dev, dt, n), *g = NULL;
    OK(tf_all_gather(comm, x, &g));
    EXPECT(tf_tensor_ndim(g) == 2 && tf_tensor_shape(g)[0] == size && tf_tensor_shape(g)[1] == n, "gather shape");
    double *gv = values(g, size * n);
    for (int r = 0; r < size; r++)
        EXPECT(!memcmp(gv + r * n, ins[r], sizeof(double) * (size_t)n), "all_gather row %d", r);
    free(gv);
    tf_tensor_release(g);

    /* reduce-scatter over [size * n] made of every rank's rows */
    tf_tensor *rows = NULL, *part = NULL;
    tf_tensor **mine = malloc(sizeof(tf_tensor *) * (size_t)size);
    for (int r = 0; r < size; r++) mine[r] = input(rank + r * 7, dev, dt, n);
    OK(tf_stack(size, (const tf_tensor *const *)mine, 0, &rows));
    OK(tf_reduce_scatter(comm, rows, TF_REDUCE_SUM, &part));
    EXPECT(tf_tensor_ndim(part) == 2 && tf_tensor_shape(part)[0] == 1 && tf_tensor_shape(part)[1] == n,
           "reduce_scatter shape");
    double **sent = malloc(sizeof(double *) * (size_t)size);
    for (int r = 0; r < size; r++) {                              /* rank r's row `rank` is input(r + rank*7) */
        tf_tensor *t = input(r + rank * 7, dev, dt, n);
        sent[r] = values(t, n);
        tf_tensor_release(t);
    }
    double *pv = values(part, n);
    EXPECT(!compare_reduction("reduce_scatter", pv, sent, 0, n, TF_REDUCE_SUM, dt), "reduce_scatter values");
    free(pv);
    free_inputs(sent);
    for (int r = 0; r < size; r++) tf_tensor_release(mine[r]);
    free(mine);
    tf_tensor_release(rows);
    tf_tensor_release(part);

    OK(tf_broadcast(comm, x, size - 1));
    double *bv = values(x, n);
    EXPECT(!memcmp(bv, ins[size - 1], sizeof(double) * (size_t)n), "broadcast from the last rank");
    free(bv);
    tf_tensor_release(x);
}

static void check_send_recv(tf_device *dev, tf_dtype dt, int64_t n, double **ins) {
    if (size < 2) return;
    tf_tensor *x = input(rank, dev, dt, n);
    int peer = rank ^ 1;
    if (peer >= size) return;
    if (rank % 2 == 0) {
        OK(tf_send(comm, x, peer, 5));
        OK(tf_recv(comm, x, peer, 6));
    } else {
        tf_tensor *keep = input(rank, dev, dt, n);
        OK(tf_recv(comm, x, peer, 5));
        OK(tf_send(comm, keep, peer, 6));
        tf_tensor_release(keep);
    }
    double *v = values(x, n);
    EXPECT(!memcmp(v, ins[peer], sizeof(double) * (size_t)n), "recv from rank %d", peer);
    free(v);
    tf_tensor_release(x);
}

/* A strided CPU view reduced in place: staged, then written back through the view. */
static void check_strided_view(void) {
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t shape[2] = {3, 4};
    float v[12];
    for (int i = 0; i < 12; i++) v[i] = (float)(i + rank);
    tf_tensor *base = NULL, *t = NULL;
    OK(tf_tensor_from_data(cpu, TF_F32, 2, shape, v, &base));
    OK(tf_transpose(base, 0, 1, &t));
    OK(tf_all_reduce(comm, t, TF_REDUCE_SUM));
    float back[12];
    OK(tf_tensor_read(base, back, sizeof back));
    int bad = 0;
    for (int i = 0; i < 12; i++) bad += back[i] != (float)(size * i + size * (size - 1) / 2);
    EXPECT(!bad, "a transposed view reduced in place");
    tf_tensor_release(t);
    tf_tensor_release(base);
}

static void check_still_works(const char *after) {
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t n = 1;
    tf_tensor *x = NULL;
    OK(tf_full(cpu, TF_I32, 1, &n, 1, &x));
    OK(tf_all_reduce(comm, x, TF_REDUCE_SUM));
    int32_t got = 0;
    OK(tf_tensor_read(x, &got, sizeof got));
    EXPECT(got == size, "a collective after %s gave %d", after, got);
    tf_tensor_release(x);
}

static void check_errors(void) {
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t n = 3 + rank;                                          /* a different shape on each rank */
    tf_tensor *x = NULL, *out = NULL;
    OK(tf_zeros(cpu, TF_F32, 1, &n, &x));
    EXPECT(tf_all_reduce(comm, x, TF_REDUCE_SUM) == TF_ERR_SHAPE, "mismatched shapes");
    EXPECT(strstr(tf_last_error(), "another rank a different shape") != NULL, "message: %s", tf_last_error());
    EXPECT(tf_all_gather(comm, x, &out) == TF_ERR_SHAPE && !out, "mismatched shapes in all_gather");
    tf_tensor_release(x);
    check_still_works("mismatched shapes");
    n = 4;
    OK(tf_zeros(cpu, rank ? TF_F32 : TF_I32, 1, &n, &x));
    EXPECT(tf_broadcast(comm, x, 0) == TF_ERR_DTYPE, "mismatched dtypes");
    tf_tensor_release(x);
    check_still_works("mismatched dtypes");
    OK(tf_zeros(cpu, TF_I32, 1, &n, &x));
    EXPECT(tf_all_reduce(comm, x, TF_REDUCE_MEAN) == TF_ERR_DTYPE, "mean of integers");
    EXPECT(tf_broadcast(comm, x, size) == TF_ERR_INDEX, "a root past the ranks");
    EXPECT(tf_send(comm, x, rank, 0) == TF_ERR_INDEX, "a send to itself");
    EXPECT(tf_all_reduce(comm, x, (tf_reduce_op)9) == TF_ERR_INVALID_ARGUMENT, "an unknown op");
    EXPECT(tf_all_reduce(NULL, x, TF_REDUCE_SUM) == TF_ERR_NULL_ARGUMENT, "a NULL communicator");
    tf_tensor_release(x);
    int64_t odd = 3;
    OK(tf_zeros(cpu, TF_F32, 1, &odd, &x));
    EXPECT(tf_reduce_scatter(comm, x, TF_REDUCE_SUM, &out) == TF_ERR_SHAPE, "3 rows over %d ranks", size);
    tf_tensor_release(x);
    check_still_works("refused arguments");
    if (size >= 2 && rank < 2) {                                  /* a message of the wrong size */
        int64_t sent = 5, want = 4;
        OK(tf_zeros(cpu, TF_F32, 1, rank == 0 ? &sent : &want, &x));
        if (rank == 0) OK(tf_send(comm, x, 1, 9));
        else EXPECT(tf_recv(comm, x, 0, 9) == TF_ERR_SHAPE, "a 5-element message into 4 elements");
        tf_tensor_release(x);
    }
    check_still_works("a short message");
}

/* Every allocation of rank 0's collective failed in turn (staging an
 * opencl:0 tensor, the result, the write-back): rank 0 gets the failure,
 * the other ranks an error too when it came before the exchange - none
 * waits forever - and a tensor whose collective failed keeps its values. */
static void check_one_rank_failing(void) {
    tf_device *dev = NULL;
    if (tf_device_get("opencl:0", &dev) != TF_OK) tf_device_get("cpu", &dev);
    int64_t n = 64;
    int injected = 0, peers_told = 0;
    for (int64_t nth = 1; nth < 400; nth++) {
        int64_t most = 0;                              /* allocations the longest of the three made */
        for (int which = 0; which < 3; which++) {
            tf_tensor *x = input(rank, dev, TF_F16, n), *out = NULL;
            double *before = values(x, n);
            if (rank == 0) tf_debug_fail_allocation(nth);
            tf_status s = which == 0 ? tf_all_reduce(comm, x, TF_REDUCE_SUM)
                        : which == 1 ? tf_all_gather(comm, x, &out)
                                     : tf_reduce_scatter(comm, x, TF_REDUCE_SUM, &out);
            int64_t made = tf_debug_allocation_count();
            tf_debug_fail_allocation(0);
            if (made > most) most = made;
            bool fired = rank == 0 && made >= nth;
            if (rank == 0) EXPECT(fired ? s == TF_ERR_OUT_OF_MEMORY || s == TF_OK : s == TF_OK,
                                  "nth %lld, collective %d: status %d", (long long)nth, which, s);
            else EXPECT(s == TF_OK || s == TF_ERR_BACKEND, "the peer's status %d", s);
            if (s != TF_OK) {
                double *after = values(x, n);
                EXPECT(!memcmp(before, after, sizeof(double) * (size_t)n), "a failed collective changed x");
                EXPECT(!out, "a failed collective made a result");
                free(after);
            }
            injected += fired && s != TF_OK;
            peers_told += rank != 0 && s == TF_ERR_BACKEND;
            free(before);
            tf_tensor_release(x);
            tf_tensor_release(out);
        }
        /* stop once rank 0's allocations all ran: every rank must agree to stop */
        tf_device *cpu = NULL;
        tf_device_get("cpu", &cpu);
        int64_t one = 1;
        tf_tensor *flag = NULL;
        tf_full(cpu, TF_I32, 1, &one, rank == 0 && most < nth ? 1 : 0, &flag);
        tf_all_reduce(comm, flag, TF_REDUCE_MAX);
        int32_t done = 0;
        tf_tensor_read(flag, &done, sizeof done);
        tf_tensor_release(flag);
        if (done) break;
    }
    if (rank == 0) EXPECT(injected > 10, "only %d injected failures surfaced", injected);
    if (rank == 1) EXPECT(peers_told > 0, "the peer never heard of a failure before the exchange");
    check_still_works("one rank's failed allocations");
}

/* tf_comm_set_stream on opencl:0: x = a + b queued on a side stream, the
 * all-reduce on it, then y = 2 x; one synchronize of the side stream at the
 * end must give every rank 2 * sum(a + b). A tensor on another device is
 * TF_ERR_DEVICE_MISMATCH on every rank; NULL makes calls blocking again.
 * The scalar 2 is made on the default stream behind a matmul that keeps it
 * busy, so the side stream sees it only through the event it waits on
 * (the header's rule: a tensor made on one stream and used on another needs
 * an event). Without the event, CI once saw 99999 of 100000 wrong: the
 * scalar 2 was still queued when the side stream's multiply read it. */
static void check_on_a_stream(void) {
    tf_device *dev = NULL, *cpu = NULL;
    tf_device_get("cpu", &cpu);
    if (tf_device_get("opencl:0", &dev) != TF_OK) dev = cpu;
    tf_stream *side = NULL;
    OK(tf_stream_create(dev, &side));
    int64_t n = 100000;
    tf_tensor *a = input(rank, dev, TF_F32, n), *b = input(rank + 7, dev, TF_F32, n), *x = NULL, *y = NULL, *two = NULL;
    tf_tensor *busy = NULL, *busier = NULL;
    int64_t square[2] = {1000, 1000};
    OK(tf_ones(dev, TF_F32, 2, square, &busy));
    OK(tf_matmul(busy, busy, &busier));
    OK(tf_scalar(dev, TF_F32, 2, &two));
    tf_event *inputs_made = NULL;
    OK(tf_event_create(0, &inputs_made));
    OK(tf_event_record(inputs_made, tf_stream_default(dev)));
    OK(tf_stream_wait_event(side, inputs_made));
    OK(tf_comm_set_stream(comm, side));
    OK(tf_stream_set_current(side));
    OK(tf_add(a, b, &x));
    OK(tf_all_reduce(comm, x, TF_REDUCE_SUM));
    OK(tf_mul(x, two, &y));
    OK(tf_stream_synchronize(side));
    OK(tf_stream_set_current(tf_stream_default(dev)));
    double *got = values(y, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) want += (double)value(r, i, TF_F32) + (double)value(r + 7, i, TF_F32);
        bad += fabs(got[i] - 2 * want) > 1e-4 * (1 + fabs(want));
    }
    EXPECT(!bad, "%d of %lld elements wrong after an all-reduce on a stream of %s", bad, (long long)n,
           tf_device_name(dev));
    free(got);
    tf_tensor *elsewhere = NULL;
    OK(tf_zeros(cpu, TF_F32, 1, &n, &elsewhere));
    if (dev != cpu)
        EXPECT(tf_all_reduce(comm, elsewhere, TF_REDUCE_SUM) == TF_ERR_DEVICE_MISMATCH, "a cpu tensor, a %s stream",
               tf_device_name(dev));
    OK(tf_comm_set_stream(comm, NULL));
    EXPECT(tf_comm_set_stream(NULL, side) == TF_ERR_NULL_ARGUMENT, "NULL communicator");
    tf_event_destroy(inputs_made);
    tf_tensor *all[] = {a, b, x, y, two, elsewhere, busy, busier};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    tf_stream_destroy(side);
    check_still_works("calls on a stream");
}

/* libtensorframe_mpi built with NCCL (TF_TEST_NCCL=1 from CMake) must load
 * libnccl.so.2 and resolve every entry point it uses, GPU or not. */
static void check_nccl_loads(void) {
    const char *built = getenv("TF_TEST_NCCL");
    int v = tf_comm_nccl_version();
    if (built && !strcmp(built, "1")) EXPECT(v >= 21000, "NCCL version %d: built with NCCL, but it did not load", v);
    if (!rank) printf("NCCL: %s (version code %d)\n", v ? "loads" : "not available", v);
}

static bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* True on every rank if `mine` is true on every rank (a MIN over the CPU). */
static bool everywhere(bool mine) {
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t one = 1;
    int32_t v = mine;
    tf_tensor *t = NULL;
    OK(tf_tensor_from_data(cpu, TF_I32, 1, &one, &v, &t));
    OK(tf_all_reduce(comm, t, TF_REDUCE_MIN));
    OK(tf_tensor_read(t, &v, sizeof v));
    tf_tensor_release(t);
    return v != 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Timeouts, on a communicator of their own (a timeout leaves it broken):
 * a receive of a message never sent, then an all-reduce that rank 1
 * never makes (as a rank that died would not): rank 0 must return
 * TF_ERR_TIMEOUT, x intact, and refuse the next call. */
static void check_timeouts(void) {
    tf_comm *t = NULL;
    OK(tf_comm_init(&t));
    EXPECT(tf_comm_timeout(t) == 600, "default timeout %g", tf_comm_timeout(t));
    EXPECT(tf_comm_timeout(NULL) == -1, "timeout of NULL");
    EXPECT(tf_comm_set_timeout(t, -1) == TF_ERR_INVALID_ARGUMENT, "a negative timeout");
    EXPECT(tf_comm_set_timeout(t, NAN) == TF_ERR_INVALID_ARGUMENT, "a NaN timeout");
    EXPECT(tf_comm_set_timeout(NULL, 1) == TF_ERR_NULL_ARGUMENT, "NULL communicator");
    const double limit = 0.3;
    if (rank == 1) OK(tf_comm_set_timeout(t, limit));  /* rank 0 waits out rank 1's receive below */
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t n = 1000;
    tf_tensor *x = NULL;
    OK(tf_full(cpu, TF_F32, 1, &n, rank + 1, &x));
    if (rank == 1) {
        double t0 = now_s();
        EXPECT(tf_recv(t, x, 0, 77) == TF_ERR_TIMEOUT, "a receive of a message never sent");
        EXPECT(now_s() - t0 >= limit, "the receive gave up after %g s", now_s() - t0);
        EXPECT(strstr(tf_last_error(), "waited 0.3 s") != NULL, "message: %s", tf_last_error());
    }
    OK(tf_all_reduce(t, x, TF_REDUCE_SUM));           /* a receive that timed out leaves nothing pending */
    static float got[1000];
    OK(tf_tensor_read(x, got, sizeof got));
    EXPECT(got[0] == size * (size + 1) / 2, "after a timed-out receive: %g", got[0]);
    OK(tf_comm_set_timeout(t, limit));
    if (rank == 0) {
        double t0 = now_s();
        tf_status s = tf_all_reduce(t, x, TF_REDUCE_SUM);
        double waited = now_s() - t0;
        EXPECT(s == TF_ERR_TIMEOUT, "a rank that never came: status %d", s);
        EXPECT(waited >= limit && waited < 10 * limit, "rank 0 gave up after %g s", waited);
        OK(tf_tensor_read(x, got, sizeof got));
        EXPECT(got[0] == size * (size + 1) / 2 && got[999] == got[0], "a timed-out all-reduce changed x: %g",
               got[0]);
        EXPECT(tf_broadcast(t, x, 0) == TF_ERR_BACKEND, "a call on a communicator that timed out");
        EXPECT(strstr(tf_last_error(), "timed out in an earlier call") != NULL, "message: %s", tf_last_error());
    }
    tf_tensor_release(x);
    tf_comm_destroy(t);
    check_still_works("a timeout on another communicator");
}

int main(void) {
    if (tf_comm_init(&comm) != TF_OK) {
        fprintf(stderr, "tf_comm_init: %s\n", tf_last_error());
        return 1;
    }
    rank = tf_comm_rank(comm);
    size = tf_comm_size(comm);
    static const tf_dtype dtypes[] = {TF_I32, TF_F32, TF_F16, TF_BF16};
    static const int64_t sizes[] = {1, 7, 1000, 65539};
    /* CUDA: a device per rank (cuda:<rank>), as NCCL requires; with fewer
     * GPUs than ranks they share cuda:0, which only the MPI routes take
     * (TF_COMM_NCCL=0: staged through host memory, or CUDA-aware MPI). */
    char cuda[16];
    snprintf(cuda, sizeof cuda, "cuda:%d", rank);
    tf_device *probe = NULL;
    bool shared_gpu = tf_device_get(cuda, &probe) != TF_OK && tf_device_get("cuda:0", &probe) == TF_OK;
    if (shared_gpu) snprintf(cuda, sizeof cuda, "cuda:0");
    const char *specs[] = {"cpu", "opencl:0", cuda};
    for (int d = 0; d < 3; d++) {
        tf_device *dev = NULL;
        bool here = tf_device_get(specs[d], &dev) == TF_OK;
        if (d == 2 && shared_gpu && tf_comm_nccl_version() > 0 && !env_is("TF_COMM_NCCL", "0")) {
            if (!rank) printf("cuda: ranks share a GPU, which NCCL refuses: skipped (TF_COMM_NCCL=0 tests it)\n");
            here = false;
        }
        if (!everywhere(here)) {                       /* a device some rank lacks is skipped by all */
            if (!rank) printf("%s: not present on every rank, skipped\n", specs[d]);
            continue;
        }
        for (int k = 0; k < 4; k++)
            for (int s = 0; s < 4; s++) {
                double **ins = all_inputs(dev, dtypes[k], sizes[s]);
                check_all_reduce(dev, dtypes[k], sizes[s], ins);
                check_gather_scatter_broadcast(dev, dtypes[k], sizes[s], ins);
                check_send_recv(dev, dtypes[k], sizes[s], ins);
                free_inputs(ins);
            }
        /* 64 MiB: an all-reduce of 16M f32 and i32 (sum, in place) */
        for (int k = 0; k < 2; k++) {
            int64_t big = (64 << 20) / 4;
            double **ins = all_inputs(dev, dtypes[k], big);
            tf_tensor *x = input(rank, dev, dtypes[k], big);
            OK(tf_all_reduce(comm, x, TF_REDUCE_SUM));
            double *xv = values(x, big);
            EXPECT(!compare_reduction("all_reduce 64 MiB", xv, ins, 0, big, TF_REDUCE_SUM, dtypes[k]), "64 MiB %s",
                   tf_dtype_name(dtypes[k]));
            free(xv);
            tf_tensor_release(x);
            free_inputs(ins);
        }
        if (!rank) printf("%s: every collective x {i32, f32, f16, bf16} x {1, 7, 1000, 65539} + 64 MiB: done\n",
                          specs[d]);
    }
    check_strided_view();
    check_on_a_stream();
    check_nccl_loads();
    if (size >= 2) {                                   /* these need a peer */
        check_errors();
        check_one_rank_failing();
        check_timeouts();
    }
    int total = 0, all_checks = 0;
    tf_comm *c = comm;
    /* every rank's failures, so each exits with the same verdict */
    tf_device *cpu = NULL;
    tf_device_get("cpu", &cpu);
    int64_t two = 2;
    int32_t mine[2] = {failures, checks};
    tf_tensor *t = NULL;
    tf_tensor_from_data(cpu, TF_I32, 1, &two, mine, &t);
    tf_all_reduce(c, t, TF_REDUCE_SUM);
    int32_t sum[2] = {0, 0};
    tf_tensor_read(t, sum, sizeof sum);
    tf_tensor_release(t);
    total = sum[0];
    all_checks = sum[1];
    if (!rank) printf("%d ranks: %d checks, %d failed\n", size, all_checks, total);
    tf_comm_destroy(comm);
    tf_shutdown();
    return total ? 1 : 0;
}
