/* Data-parallel training (DistributedDataParallel's recipe) with the
 * collectives of tensorframe/comm.h: every rank holds the same MLP, takes
 * its share of each batch, computes its gradients (tf_backward), and
 * averages them with the other ranks (tf_all_reduce, mean) before the same
 * Adam step (tf_optimizer) - so the
 * ranks' weights stay identical and equal to one process training on the
 * whole batch.
 *
 *   mpirun -np 2 build/bin/ddp [--device cpu] [--steps 200] [--check]
 *
 * The task: regress y = sin(x @ A) for x ~ N(0, 1) in 16 dimensions, 4
 * outputs, through a 16-64-4 ReLU MLP with the mean squared error; each
 * step draws a fresh batch of 64 (seeded by the step, so every rank draws
 * the same one) and rank r trains on rows [r * 64 / size, (r + 1) * 64 / size).
 * --check also trains a copy on the whole batch on rank 0 alone and
 * compares the weights; the exit status says whether they agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/comm.h>

#include "../example.h"

enum { IN = 16, HIDDEN = 64, OUT = 4, BATCH = 64, N_PARAMS = 4 };

typedef struct mlp {
    tf_tensor *p[N_PARAMS];              /* w1 [IN, HIDDEN], b1 [HIDDEN], w2 [HIDDEN, OUT], b2 [OUT] */
    tf_optimizer *adam;
} mlp;

/* Kaiming-style initial weights from a fixed seed: every rank, and the
 * single-process copy, starts from the same values. */
static tf_status mlp_init(tf_device *dev, mlp *net) {
    const int64_t shapes[N_PARAMS][2] = {{IN, HIDDEN}, {HIDDEN, 0}, {HIDDEN, OUT}, {OUT, 0}};
    memset(net, 0, sizeof *net);
    for (int i = 0; i < N_PARAMS; i++) {
        int ndim = shapes[i][1] ? 2 : 1;
        tf_tensor *r = NULL, *scale = NULL;
        TF_TRY(tf_randn(dev, TF_F32, ndim, shapes[i], 1000 + (uint64_t)i, &r));
        TF_TRY(tf_scalar(dev, TF_F32, ndim == 2 ? sqrt(2.0 / (double)shapes[i][0]) : 0.1, &scale));
        tf_status s = tf_mul(r, scale, &net->p[i]);
        tf_tensor_release(r);
        tf_tensor_release(scale);
        TF_TRY(s);
        TF_TRY(tf_set_requires_grad(net->p[i], true));
    }
    tf_optimizer_config adam = tf_optimizer_defaults(TF_OPTIMIZER_ADAM);
    adam.lr = 1e-2;
    return tf_optimizer_create(&adam, N_PARAMS, net->p, &net->adam);
}

static void mlp_free(mlp *net) {
    tf_optimizer_destroy(net->adam);
    for (int i = 0; i < N_PARAMS; i++) tf_tensor_release(net->p[i]);
}

/* Step `step`'s batch, rows [lo, hi): x ~ N(0, 1) and y = sin(x @ A), A ~ N(0, 1/16). */
static tf_status batch(tf_device *dev, int step, int64_t lo, int64_t hi, tf_tensor **x, tf_tensor **y) {
    int64_t xs[2] = {BATCH, IN}, as[2] = {IN, OUT};
    tf_tensor *all = NULL, *a = NULL, *quarter = NULL, *xa = NULL, *ys = NULL;
    TF_TRY(tf_randn(dev, TF_F32, 2, xs, 7 + (uint64_t)step, &all));
    TF_TRY(tf_randn(dev, TF_F32, 2, as, 3, &a));                /* the teacher: fixed */
    TF_TRY(tf_scalar(dev, TF_F32, 0.25, &quarter));             /* x @ A of unit variance */
    TF_TRY(tf_mul(a, quarter, &a));
    TF_TRY(tf_matmul(all, a, &xa));
    TF_TRY(tf_sin(xa, &ys));
    TF_TRY(tf_slice(all, 0, lo, hi, 1, x));
    TF_TRY(tf_slice(ys, 0, lo, hi, 1, y));
    return TF_OK;
}

/* The loss on (x, y), mean over these rows: h = relu(x w1 + b1),
 * out = h w2 + b2, loss = mean((out - y)^2). Runs in the caller's scope. */
static tf_status forward(const mlp *net, const tf_tensor *x, const tf_tensor *y, tf_tensor **loss) {
    tf_tensor *z1, *h, *out, *diff, *sq;
    TF_TRY(tf_matmul(x, net->p[0], &z1));
    TF_TRY(tf_add(z1, net->p[1], &z1));
    TF_TRY(tf_relu(z1, &h));
    TF_TRY(tf_matmul(h, net->p[2], &out));
    TF_TRY(tf_add(out, net->p[3], &out));
    TF_TRY(tf_sub(out, y, &diff));
    TF_TRY(tf_mul(diff, diff, &sq));
    return tf_mean(sq, TF_ALL_AXES, false, loss);
}

/* One training step on rows [lo, hi) of the step's batch; with a
 * communicator the gradients are averaged over its ranks first. */
static tf_status train_step(tf_comm *comm, mlp *net, int step, int64_t lo, int64_t hi, float *loss_out) {
    tf_scope *sc;
    TF_TRY(tf_scope_begin(&sc));
    tf_tensor *x, *y, *loss;
    tf_status s = batch(tf_tensor_device(net->p[0]), step, lo, hi, &x, &y);
    if (s == TF_OK) s = forward(net, x, y, &loss);
    if (s == TF_OK) s = tf_backward(loss, NULL, 0);
    for (int i = 0; comm && s == TF_OK && i < N_PARAMS; i++) s = tf_all_reduce(comm, tf_grad(net->p[i]), TF_REDUCE_MEAN);
    if (comm && s == TF_OK) {                    /* the loss, for the log only */
        tf_tensor *value = NULL;
        s = tf_detach(loss, &value);
        if (s == TF_OK) s = tf_all_reduce(comm, value, TF_REDUCE_MEAN);
        if (s == TF_OK) s = tf_tensor_read(value, loss_out, sizeof *loss_out);
        tf_tensor_release(value);
    } else if (s == TF_OK) {
        s = tf_tensor_read(loss, loss_out, sizeof *loss_out);
    }
    if (s == TF_OK) s = tf_optimizer_step(net->adam);
    tf_optimizer_zero_grad(net->adam);
    tf_status ended = tf_scope_end(sc);
    return s != TF_OK ? s : ended;
}

/* The largest |a - b| over the parameters, relative to max(1, |b|). */
static tf_status max_difference(const mlp *a, const mlp *b, double *out) {
    *out = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        int64_t n = tf_tensor_numel(a->p[i]);
        float *va = malloc(sizeof(float) * (size_t)n), *vb = malloc(sizeof(float) * (size_t)n);
        tf_status s = va && vb ? TF_OK : TF_ERR_OUT_OF_MEMORY;
        if (s == TF_OK) s = tf_tensor_read(a->p[i], va, sizeof(float) * (size_t)n);
        if (s == TF_OK) s = tf_tensor_read(b->p[i], vb, sizeof(float) * (size_t)n);
        for (int64_t j = 0; s == TF_OK && j < n; j++) {
            double d = fabs((double)va[j] - vb[j]) / fmax(1.0, fabs((double)vb[j]));
            if (d > *out || d != d) *out = d;
        }
        free(va);
        free(vb);
        TF_TRY(s);
    }
    return TF_OK;
}

typedef struct options {
    const char *device;
    int steps;
    int check;
} options;

static int parse(int argc, char **argv, options *o) {
    *o = (options){"auto", 200, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) o->device = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) o->steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--check")) o->check = 1;
        else {
            fprintf(stderr, "usage: %s [--device SPEC] [--steps N] [--check]\n", argv[0]);
            return 1;
        }
    }
    return o->steps > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    options o;
    if (parse(argc, argv, &o)) return 2;
    tf_comm *comm;
    CHECK(tf_comm_init(&comm));
    int rank = tf_comm_rank(comm), size = tf_comm_size(comm);
    tf_device *dev;
    CHECK(tf_device_get(o.device, &dev));
    if (BATCH % size) {
        if (!rank) fprintf(stderr, "ddp: %d ranks do not split a batch of %d evenly\n", size, BATCH);
        tf_comm_abort(comm, 2);
    }
    mlp net, solo;
    CHECK(mlp_init(dev, &net));
    if (o.check && !rank) CHECK(mlp_init(dev, &solo));
    int64_t lo = rank * BATCH / size, hi = (rank + 1) * BATCH / size;
    if (!rank) printf("ddp: %d ranks on %s, rows [%lld, %lld) of each batch of %d on rank 0\n", size,
                      tf_device_name(dev), (long long)lo, (long long)hi, BATCH);
    float first = 0, loss = 0, solo_loss = 0;
    for (int step = 1; step <= o.steps; step++) {
        tf_status s = train_step(comm, &net, step, lo, hi, &loss);
        if (s == TF_OK && o.check && !rank) s = train_step(NULL, &solo, step, 0, BATCH, &solo_loss);
        if (s != TF_OK) {
            fprintf(stderr, "rank %d, step %d: %s: %s\n", rank, step, tf_status_name(s), tf_last_error());
            tf_comm_abort(comm, 1);                  /* the others may wait in a collective */
        }
        if (step == 1) first = loss;
        if (!rank && (step == 1 || step % 50 == 0 || step == o.steps))
            printf("step %4d  loss %.5f%s", step, loss, o.check ? "" : "\n");
        if (!rank && o.check && (step == 1 || step % 50 == 0 || step == o.steps))
            printf("   one process, whole batch: %.5f\n", solo_loss);
    }
    int status = loss < 0.5f * first ? 0 : 1;
    if (!rank && status) printf("ddp: the loss went from %.5f to %.5f only\n", first, loss);
    if (o.check && !rank) {
        double diff = 0;
        CHECK(max_difference(&net, &solo, &diff));
        bool same = diff <= 1e-4;
        printf("ddp: %d ranks vs one process after %d steps: largest weight difference %.2e (%s 1e-4)\n", size,
               o.steps, diff, same ? "within" : "beyond");
        if (!same) status = 1;
        mlp_free(&solo);
    }
    mlp_free(&net);
    tf_comm_destroy(comm);
    tf_shutdown();
    return status;
}
