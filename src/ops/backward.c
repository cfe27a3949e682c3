/* tf_backward: the walk over the nodes ops recorded (src/engine/autograd.c
 * keeps them), from a root back to the leaves, each node's rule
 * (grad_rules.c) turning its output's gradient into its inputs'. */
#include <string.h>

#include "../engine/engine.h"

typedef struct walk {
    tf__grad_node **nodes;               /* every node reached, each once */
    int n, cap;
    tf__grad_node **ready;
    int n_ready, ready_cap;
    tf_tensor **leaves, **leaf_grads;    /* gradients for the leaves, committed at the end */
    int n_leaves, leaves_cap, leaf_grads_cap;
    uint64_t id;
    bool retain;
} walk;

static _Atomic uint64_t walks;

static bool push(tf__grad_node ***list, int *n, int *cap, tf__grad_node *node) {
    if (!tf__grow((void **)list, cap, *n + 1, sizeof **list)) return false;
    (*list)[(*n)++] = node;
    return true;
}

/* Every node reachable from root, with deps = how many of them feed it a
 * gradient. Iterative: w->nodes doubles as the stack of nodes to visit. */
static tf_status collect(walk *w, tf__grad_node *root) {
    root->walk = w->id;
    root->deps = 0;
    if (!push(&w->nodes, &w->n, &w->cap, root)) return TF_ERR_OUT_OF_MEMORY;
    for (int k = 0; k < w->n; k++) {
        tf__grad_node *node = w->nodes[k];
        for (int i = 0; i < node->n_in; i++) {
            tf__grad_node *child = node->in[i].fn;
            if (!child) continue;
            if (child->walk != w->id) {
                child->walk = w->id;
                child->deps = 0;
                child->pending = NULL;
                if (!push(&w->nodes, &w->n, &w->cap, child)) return TF_ERR_OUT_OF_MEMORY;
            }
            child->deps++;
        }
    }
    return TF_OK;
}

/* g summed into *acc (NULL: g taken). */
static tf_status accumulate(tf_tensor **acc, tf_tensor *g) {
    if (!*acc) {
        *acc = g;
        return TF_OK;
    }
    tf_tensor *sum = NULL;
    tf_status s = tf_add(*acc, g, &sum);
    tf_tensor_release(g);
    if (s != TF_OK) return s;
    tf_tensor_release(*acc);
    *acc = sum;
    return TF_OK;
}

static tf_status to_leaf(walk *w, tf_tensor *leaf, tf_tensor *g) {
    for (int i = 0; i < w->n_leaves; i++)
        if (w->leaves[i] == leaf) return accumulate(&w->leaf_grads[i], g);
    if (!tf__grow((void **)&w->leaves, &w->leaves_cap, w->n_leaves + 1, sizeof *w->leaves) ||
        !tf__grow((void **)&w->leaf_grads, &w->leaf_grads_cap, w->n_leaves + 1, sizeof *w->leaf_grads)) {
        tf_tensor_release(g);
        return TF_ERR_OUT_OF_MEMORY;
    }
    w->leaves[w->n_leaves] = leaf;
    w->leaf_grads[w->n_leaves++] = g;
    return TF_OK;
}

static tf_status check_versions(const tf__grad_node *node) {
    for (int i = 0; i < node->n_in; i++) {
        const tf__grad_edge *e = &node->in[i];
        uint32_t now = e->saved ? atomic_load(&e->saved->storage->version) : e->version;
        if (now != e->version)
            return tf__error(TF_ERR_INVALID_ARGUMENT,
                             "tf_backward: input %d of %s was written in place after the op used it (version %u, "
                             "saved at %u)", i, node->fn, now, e->version);
    }
    if (node->out && atomic_load(&node->out->storage->version) != node->out_version)
        return tf__error(TF_ERR_INVALID_ARGUMENT,
                         "tf_backward: the output of %s was written in place after the op made it", node->fn);
    return TF_OK;
}

/* A rule's gradient for edge e in e's dtype and on e's device (the rules
 * already give e's shape). */
static tf_status fit_to_edge(const tf__grad_edge *e, tf_tensor *g, tf_tensor **out) {
    *out = NULL;
    tf_tensor *cur = g, *next = NULL;
    tf_status s = TF_OK;
    if (!tf__same_shape(cur->ndim, cur->shape, e->ndim, e->shape))
        s = tf__error(TF_ERR_SHAPE, "tf_backward: a gradient rule gave the wrong shape");
    if (s == TF_OK && cur->dtype != e->dtype) {
        s = tf_cast(cur, e->dtype, &next);
        if (s == TF_OK) { tf_tensor_release(cur); cur = next; next = NULL; }
    }
    if (s == TF_OK && cur->storage->dev != e->dev) {
        s = tf_tensor_to(cur, e->dev, &next);
        if (s == TF_OK) { tf_tensor_release(cur); cur = next; next = NULL; }
    }
    if (s != TF_OK) {
        tf_tensor_release(cur);
        return s;
    }
    *out = cur;
    return TF_OK;
}

/* A leaf's gradient is memory of its own, contiguous: users and
 * collectives write it in place (tf_all_reduce), so it may be neither a
 * broadcast view (a sum's gradient) nor a tensor another leaf also got (an
 * add gives both inputs the same one). */
static bool owns_its_memory(const tf_tensor *g) {
    return atomic_load(&g->refs) == 1 && atomic_load(&g->storage->refs) == 1 && tf_tensor_is_contiguous(g);
}

/* A slice's gradient added straight into the window of its input's
 * pending gradient, where that is memory of the walk's own (else as every
 * rule: a tensor of the full shape, summed in). A transformer block's qkv
 * split is three slices of one tensor, whose rules gave three zero tensors
 * of the full shape and two sums: train_gpt made six [16, 64, 192] zeros
 * and four sums of them a step. True when it took the gradient (*s says
 * how that went). */
static bool slice_into_pending(const tf__grad_node *node, const tf_tensor *g, tf_status *s) {
    const tf__grad_edge *e = &node->in[0];
    if (node->a.rule != TF__GRAD_SLICE || !e->needs || !e->fn || g->dtype != e->dtype || g->storage->dev != e->dev)
        return false;
    tf_tensor *acc = e->fn->pending;
    if (acc && !owns_its_memory(acc)) return false;
    const bool fresh = !acc;
    if (fresh && (*s = tf_zeros(e->dev, e->dtype, e->ndim, e->shape, &acc)) != TF_OK) return true;
    const int64_t axis = node->a.i[0], start = node->a.i[1], step = node->a.i[2];
    tf_tensor *window = NULL;
    *s = tf_slice(acc, (int)axis, start, start + (g->shape[axis] - 1) * step + 1, step, &window);
    if (*s == TF_OK) *s = fresh ? tf_copy_into(window, g) : tf_binary_into(window, TF_OP_ADD, window, g);
    tf_tensor_release(window);
    if (fresh && *s == TF_OK) e->fn->pending = acc;
    else if (fresh) tf_tensor_release(acc);
    return true;
}

static tf_status run_node(walk *w, tf__grad_node *node) {
    tf_tensor *g = node->pending;
    node->pending = NULL;
    tf_status s = TF_OK;
    if (node->released)
        s = tf__error(TF_ERR_INVALID_ARGUMENT, "tf_backward: the graph through %s was already walked and let go "
                      "(pass TF_BACKWARD_RETAIN_GRAPH to walk it twice)", node->fn);
    if (s == TF_OK) s = check_versions(node);
    tf_tensor *grads[TF__GRAD_MAX_IN] = {NULL};
    const bool taken = s == TF_OK && g && slice_into_pending(node, g, &s);
    if (s == TF_OK && g && !taken) s = tf__grad_rule_run(node, g, grads);
    tf_tensor_release(g);
    for (int i = 0; i < node->n_in; i++) {
        tf__grad_edge *e = &node->in[i];
        tf_tensor *fit = NULL;
        if (s == TF_OK && e->needs && grads[i]) s = fit_to_edge(e, grads[i], &fit);
        else tf_tensor_release(grads[i]);
        grads[i] = NULL;
        if (s == TF_OK && fit && e->fn) s = accumulate(&e->fn->pending, fit);
        else if (s == TF_OK && fit) s = to_leaf(w, e->leaf, fit);
        else tf_tensor_release(fit);
        if (e->fn && --e->fn->deps == 0 && s == TF_OK &&
            !push(&w->ready, &w->n_ready, &w->ready_cap, e->fn))
            s = TF_ERR_OUT_OF_MEMORY;
    }
    if (!w->retain) {
        tf__grad_node_drop_saved(node);
        node->released = true;
    }
    return s;
}

static void walk_end(walk *w, bool commit) {
    for (int i = 0; i < w->n_leaves; i++) {
        if (commit) {
            tf__grad_replace(w->leaves[i], w->leaf_grads[i]);
        } else {
            tf_tensor_release(w->leaf_grads[i]);
        }
    }
    for (int i = 0; i < w->n; i++) {
        tf_tensor_release(w->nodes[i]->pending);
        w->nodes[i]->pending = NULL;
    }
    tf__free(w->nodes);
    tf__free(w->ready);
    tf__free(w->leaves);
    tf__free(w->leaf_grads);
}

/* Each leaf's new gradient: what it had plus what arrived, in memory of
 * its own (computed for all before any is stored, so a failure changes
 * none). */
static tf_status sum_with_old(walk *w) {
    for (int i = 0; i < w->n_leaves; i++) {
        tf_tensor *old = w->leaves[i]->ag->grad, *next = NULL;
        tf_status s = TF_OK;
        if (old) s = tf_add(old, w->leaf_grads[i], &next);
        else if (!owns_its_memory(w->leaf_grads[i])) s = tf_copy(w->leaf_grads[i], &next);
        if (s != TF_OK) return s;
        if (!next) continue;
        tf_tensor_release(w->leaf_grads[i]);
        w->leaf_grads[i] = next;
    }
    return TF_OK;
}

static tf_status seed_for(const char *fn, const tf_tensor *root, const tf_tensor *seed, tf_tensor **out) {
    *out = NULL;
    if (seed) {
        if (!tf__same_shape(seed->ndim, seed->shape, root->ndim, root->shape))
            return tf__error(TF_ERR_SHAPE, "%s: the seed's shape differs from root's", fn);
        return tf_cast(seed, root->dtype, out);
    }
    if (tf_tensor_numel(root) != 1)
        return tf__error(TF_ERR_SHAPE, "%s: root has %lld elements: a seed gradient is needed unless it has one", fn,
                         (long long)tf_tensor_numel(root));
    return tf_full(root->storage->dev, root->dtype, root->ndim, root->shape, 1.0, out);
}

static tf_status backward_walk(walk *w, tf_tensor *root, tf_tensor *g) {
    if (!root->ag->fn) return to_leaf(w, root, g);
    tf__grad_node *top = root->ag->fn;
    tf_status s = collect(w, top);
    if (s == TF_OK) {
        top->pending = g;
        g = NULL;
        if (!push(&w->ready, &w->n_ready, &w->ready_cap, top)) s = TF_ERR_OUT_OF_MEMORY;
    }
    tf_tensor_release(g);
    while (s == TF_OK && w->n_ready) s = run_node(w, w->ready[--w->n_ready]);
    return s;
}

tf_status tf_backward(const tf_tensor *root, const tf_tensor *seed, unsigned flags) {
    static const char fn[] = "tf_backward";
    if (!root) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: root is NULL", fn);
    if (flags & ~TF_BACKWARD_RETAIN_GRAPH) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", fn, flags);
    if (!root->ag)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: root does not require a gradient (no input of the ops that "
                         "made it does, or grad mode was off)", fn);
    tf__grad_pause();
    walk w = {.id = atomic_fetch_add(&walks, 1) + 1, .retain = (flags & TF_BACKWARD_RETAIN_GRAPH) != 0};
    tf_tensor *g = NULL;
    tf_status s = seed_for(fn, root, seed, &g);
    if (s == TF_OK) s = backward_walk(&w, (tf_tensor *)root, g);
    if (s == TF_OK) s = sum_with_old(&w);
    if (s == TF_ERR_OUT_OF_MEMORY && !*tf_last_error()) tf__error(s, "%s: out of host memory", fn);
    walk_end(&w, s == TF_OK);
    tf__grad_resume();
    return tf__in(fn, s);
}
