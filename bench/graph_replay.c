/* Host overhead per node: a decode-like graph (Llama's MLP half-layer,
 * rmsnorm, three linears, swiglu, residual add; about 200 nodes) run
 * eagerly and replayed from a capture, on one device. With tiny tensors the
 * kernels take almost nothing, so the time per node is what the library
 * spends around them: validation, placement, allocation and release in
 * eager mode, one dispatch in a replay.
 *
 *   graph_replay [device] [dim] [iterations]      (defaults: cpu 8 2000)
 *
 * Prints the median over rounds of microseconds per node for each mode and
 * their ratio (the target: eager / replay >= 5 on the CPU). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/tensorframe.h>

#include "bench_util.h"

#define LAYERS 34
#define ROUNDS 11

typedef struct layer {
    tf_tensor *norm, *gate, *up, *down;
} layer;

static tf_tensor *weight(tf_device *d, int ndim, int64_t rows, int64_t cols, uint64_t seed) {
    int64_t shape[2] = {rows, cols};
    tf_tensor *t = NULL;
    CHECK(tf_rand(d, TF_F32, ndim, ndim == 1 ? &cols : shape, seed, &t));
    return t;
}

static tf_tensor *forward(const layer *ls, const tf_tensor *x0) {
    tf_tensor *x = tf_tensor_retain((tf_tensor *)x0);
    for (int l = 0; l < LAYERS; l++) {
        tf_tensor *h, *g, *u, *a, *dn, *next;
        CHECK(tf_rmsnorm(x, ls[l].norm, 1e-6, &h));
        CHECK(tf_linear(h, ls[l].gate, NULL, &g));
        CHECK(tf_linear(h, ls[l].up, NULL, &u));
        CHECK(tf_swiglu(g, u, &a));
        CHECK(tf_linear(a, ls[l].down, NULL, &dn));
        CHECK(tf_add(x, dn, &next));
        tf_tensor *all[] = {h, g, u, a, dn, x};
        for (int i = 0; i < 6; i++) tf_tensor_release(all[i]);
        x = next;
    }
    return x;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "cpu";
    int64_t dim = argc > 2 ? atoll(argv[2]) : 8, hidden = 2 * dim;
    int iters = argc > 3 ? atoi(argv[3]) : 2000;
    tf_device *d;
    CHECK(tf_device_get(spec, &d));
    layer ls[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        ls[l] = (layer){weight(d, 1, 1, dim, 4 * l + 1), weight(d, 2, hidden, dim, 4 * l + 2),
                        weight(d, 2, hidden, dim, 4 * l + 3), weight(d, 2, dim, hidden, 4 * l + 4)};
    int64_t shape[2] = {1, dim};
    tf_tensor *x;
    CHECK(tf_rand(d, TF_F32, 2, shape, 99, &x));
    /* Eager first, with no graph alive (a live graph adds a lookup to every
     * free), then the capture and its replays. */
    double eager[ROUNDS], replay[ROUNDS];
    int64_t nodes = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_us();
        for (int i = 0; i < iters && !getenv("GRAPH_REPLAY_ONLY"); i++) tf_tensor_release(forward(ls, x));
        CHECK(tf_device_synchronize(d));
        eager[r] = now_us() - t0;
    }
    CHECK(tf_graph_begin(d));
    tf_tensor *y = forward(ls, x);
    tf_graph *g;
    CHECK(tf_graph_end(&g));
    nodes = tf_graph_node_count(g);
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_us();
        for (int i = 0; i < iters; i++) CHECK(tf_graph_replay(g));
        CHECK(tf_device_synchronize(d));
        replay[r] = (now_us() - t0) / iters / nodes;
        eager[r] = eager[r] / iters / nodes;
    }
    tf_tensor *first = NULL;                      /* the output is live and readable */
    float check;
    CHECK(tf_slice(y, 1, 0, 1, 1, &first));
    CHECK(tf_tensor_read(first, &check, sizeof check));
    tf_tensor_release(first);
    printf("graph_replay %s: %lld nodes (dim %lld, %d layers), %d iterations x %d rounds\n", tf_device_name(d),
           (long long)nodes, (long long)dim, LAYERS, iters, ROUNDS);
    double e = median(eager, ROUNDS), r = median(replay, ROUNDS);
    printf("  eager %7.3f us/node, replay %7.3f us/node: eager / replay = %.2fx\n", e, r, e / r);
    tf_graph_destroy(g);
    tf_tensor_release(y);
    tf_tensor_release(x);
    for (int l = 0; l < LAYERS; l++) {
        tf_tensor_release(ls[l].norm);
        tf_tensor_release(ls[l].gate);
        tf_tensor_release(ls[l].up);
        tf_tensor_release(ls[l].down);
    }
    tf_shutdown();
    return 0;
}
