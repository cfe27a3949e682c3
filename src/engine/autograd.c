/* Autograd's state: grad mode per thread, what a tensor that requires a
 * gradient carries, the nodes ops record and their lifetime, and in-place
 * writes checked against them. The walk (tf_backward) and the rules that
 * compute gradients are ops (src/ops/backward.c, grad_rules.c): the
 * engine calls neither. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ---- grad mode, per thread ---- */

static _Thread_local bool grad_off;      /* tf_set_grad_enabled(false) */
static _Thread_local int paused;         /* inside a recorded op, or inside backward */

bool tf_grad_enabled(void) { return !grad_off; }

bool tf_set_grad_enabled(bool enabled) {
    bool was = !grad_off;
    grad_off = !enabled;
    return was;
}

void tf__grad_pause(void) { paused++; }
void tf__grad_resume(void) { paused--; }

static bool recording(void) { return !grad_off && !paused; }

bool tf__grad_wanted(int n, const tf_tensor *const *in) {
    if (!recording()) return false;
    for (int i = 0; i < n; i++)
        if (in[i] && in[i]->ag) return true;
    return false;
}

/* ---- metas and nodes ---- */

/* What the rule read goes; the edges stay (a second backward is refused). */
void tf__grad_node_drop_saved(tf__grad_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        tf_tensor_release(n->in[i].saved);
        n->in[i].saved = NULL;
    }
    tf_tensor_release(n->out);
    n->out = NULL;
}

/* Nodes form chains as long as the model: a node whose last reference
 * goes frees the nodes only it held through a list, not by recursion, so
 * that a graph of a million ops is not a million frames deep. */
static void node_free_chain(tf__grad_node *n) {
    n->free_next = NULL;
    for (tf__grad_node *stack = n; stack;) {
        tf__grad_node *cur = stack;
        stack = cur->free_next;
        tf__grad_node_drop_saved(cur);
        for (int i = 0; i < cur->n_in; i++) {
            tf_tensor_release(cur->in[i].leaf);
            tf__grad_node *child = cur->in[i].fn;
            if (child && atomic_fetch_sub(&child->refs, 1) == 1) {
                child->free_next = stack;
                stack = child;
            }
        }
        tf__free(cur);
    }
}

static void node_release(tf__grad_node *n) {
    if (n && atomic_fetch_sub(&n->refs, 1) == 1) node_free_chain(n);
}

static tf__grad_meta *meta_of(tf_tensor *t) {
    if (!t->ag) t->ag = tf__calloc(1, sizeof *t->ag);
    return t->ag;
}

void tf__grad_meta_drop(tf_tensor *t) {
    tf__grad_meta *m = t->ag;
    t->ag = NULL;
    tf_tensor_release(m->grad);
    node_release(m->fn);
    tf__free(m);
}

tf_status tf__grad_check_write(const char *fn, const tf_tensor *dst) {
    if (dst->ag && !grad_off)
        return tf__error(TF_ERR_INVALID_ARGUMENT,
                         "%s: dst requires a gradient: an in-place write would lose what backward needs (write it "
                         "with grad mode off, tf_set_grad_enabled(false), or use the op's out-of-place form)", fn);
    atomic_fetch_add_explicit(&dst->storage->version, 1, memory_order_relaxed);
    return TF_OK;
}

/* ---- recording ---- */

/* Which values a rule reads: bit i for input i, bit 7 for the output. */
enum { SAVES_OUT = 1 << 7 };

static unsigned unary_saves(tf_op_kind op) {
    switch (op) {
    case TF_OP_NEG: case TF_OP_CONJ: case TF_OP_REAL: case TF_OP_IMAG:
    case TF_OP_FLOOR: case TF_OP_CEIL: case TF_OP_ROUND: case TF_OP_SIGN: return 0;
    case TF_OP_EXP: case TF_OP_EXPM1: case TF_OP_SQRT: case TF_OP_RSQRT: case TF_OP_TANH:
    case TF_OP_SIGMOID: return SAVES_OUT;
    default: return 1;
    }
}

static unsigned rule_saves(const tf__grad_args *a) {
    switch (a->rule) {
    case TF__GRAD_UNARY: return unary_saves(a->op);
    case TF__GRAD_BINARY:
        if (a->op == TF_OP_ADD || a->op == TF_OP_SUB) return 0;
        if (a->op == TF_OP_DIV) return 2 | SAVES_OUT;
        if (a->op == TF_OP_POW) return 3 | SAVES_OUT;
        return 3;
    case TF__GRAD_REDUCE:
        return a->op == TF_OP_SUM || a->op == TF_OP_MEAN ? 0 : 1 | SAVES_OUT;
    case TF__GRAD_MATMUL: return 3;
    case TF__GRAD_GEMM: return 3;
    case TF__GRAD_ROW: return a->op == TF_OP_SOFTMAX || a->op == TF_OP_LOG_SOFTMAX ? SAVES_OUT : 7;
    case TF__GRAD_WHERE: return 1;
    case TF__GRAD_CONV: return 3;
    case TF__GRAD_SDPA: return 15;
    case TF__GRAD_ROPE: return 2;
    case TF__GRAD_POOL: return a->op == TF_OP_MAXPOOL2D ? 1 | SAVES_OUT : 0;
    case TF__GRAD_GATHER: case TF__GRAD_INDEX_SELECT: return 2;
    case TF__GRAD_QMATMUL: return 3;
    case TF__GRAD_LINALG:
        switch (a->i[0]) {
        case TF__GRAD_INV: case TF__GRAD_CHOLESKY: return SAVES_OUT;
        case TF__GRAD_SOLVE: case TF__GRAD_DET: return 1 | SAVES_OUT;
        default: return 1;
        }
    default: return 0;
    }
}

/* The output's value for its node: a header of its own over the same
 * memory, without the meta (the output holds the node: no cycle). */
static tf_status alias_of(const tf_tensor *t, tf_tensor **out) {
    return tf__tensor_view(t, t->ndim, t->shape, t->strides, t->offset, out);
}

static tf_status edge_fill(tf__grad_edge *e, const tf_tensor *t, bool saves) {
    e->dtype = t->dtype;
    e->dev = t->storage->dev;
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, (size_t)t->ndim * sizeof *e->shape);
    e->version = atomic_load_explicit(&t->storage->version, memory_order_relaxed);
    if (saves) e->saved = tf_tensor_retain((tf_tensor *)t);
    if (!t->ag) return TF_OK;
    e->needs = true;
    if (t->ag->fn) {
        e->fn = t->ag->fn;
        atomic_fetch_add(&e->fn->refs, 1);
    } else {
        e->leaf = tf_tensor_retain((tf_tensor *)t);
    }
    return TF_OK;
}

static tf__grad_node *node_new(const char *fn, const tf__grad_args *a, int n, const tf_tensor *const *in,
                               const tf_tensor *out) {
    tf__grad_node *node = tf__calloc(1, sizeof *node);
    if (!node) return NULL;
    atomic_init(&node->refs, 1);
    node->fn = fn;
    node->a = *a;
    node->n_in = n;
    unsigned saves = rule_saves(a);
    for (int i = 0; i < n; i++)
        if (in[i]) edge_fill(&node->in[i], in[i], (saves >> i) & 1);
    if (saves & SAVES_OUT) {
        node->out_version = atomic_load_explicit(&out->storage->version, memory_order_relaxed);
        if (alias_of(out, &node->out) != TF_OK) {
            node_release(node);
            return NULL;
        }
        tf__keep(node->out);
    }
    return node;
}

tf_status tf__grad_finish(const char *fn, tf_status s, const tf__grad_args *a, int n, const tf_tensor *const *in,
                          tf_tensor **out) {
    if (s != TF_OK) return s;
    tf_tensor *o = *out;
    tf__grad_args none;
    if (tf_dtype_is_complex(o->dtype)) {    /* the rules are real: a node that backward refuses by name */
        memset(&none, 0, sizeof none);
        none.rule = TF__GRAD_NONE;
        none.op = a->op;
        none.i[0] = 1;                   /* backward says: complex */
        a = &none;
        n = 0;
    } else if (!tf_dtype_is_float(o->dtype)) {
        return TF_OK;                    /* indices, masks: nothing flows back through them */
    }
    /* An op may hand back an input itself (a view with nothing to change):
     * the output gets a header of its own, so the input stays what it was. */
    bool shared = o->ag != NULL;
    for (int i = 0; i < n; i++) shared = shared || o == in[i];
    if (shared) {
        tf_tensor *fresh = NULL;
        s = alias_of(o, &fresh);
        tf_tensor_release(o);
        *out = o = fresh;
        if (s != TF_OK) return tf__in(fn, s);
    }
    tf__grad_node *node = node_new(fn, a, n, in, o);
    tf__grad_meta *m = node ? meta_of(o) : NULL;
    if (!m) {
        node_release(node);
        tf_tensor_release(o);
        *out = NULL;
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory to record the op for autograd", fn);
    }
    m->fn = node;
    return TF_OK;
}

tf_status tf__grad_no_rule(const char *fn, int n, const tf_tensor *const *in, tf_tensor **out) {
    if (!*out || !tf__grad_wanted(n, in)) return TF_OK;
    tf__grad_args a;
    memset(&a, 0, sizeof a);
    a.rule = TF__GRAD_NONE;
    a.op = TF_OP_COUNT;                  /* not an op of the table: backward names fn alone */
    return tf__grad_finish(fn, TF_OK, &a, 0, NULL, out);
}

/* ---- the public state ---- */

tf_status tf_set_requires_grad(tf_tensor *t, bool requires_grad) {
    static const char fn[] = "tf_set_requires_grad";
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (t->ag && t->ag->fn)
        return tf__error(TF_ERR_INVALID_ARGUMENT,
                         "%s: the tensor was made by a recorded %s and is not a leaf (tf_detach it first)", fn,
                         t->ag->fn->fn);
    if (!requires_grad) {
        if (t->ag) tf__grad_meta_drop(t);
        return TF_OK;
    }
    if (!tf_dtype_is_float(t->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: only float tensors have gradients, not %s (complex ones not yet)", fn,
                         tf_dtype_name(t->dtype));
    if (!meta_of(t)) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    return TF_OK;
}

bool tf_requires_grad(const tf_tensor *t) { return t && t->ag; }
bool tf_is_leaf(const tf_tensor *t) { return t && (!t->ag || !t->ag->fn); }
tf_tensor *tf_grad(const tf_tensor *t) { return t && t->ag ? t->ag->grad : NULL; }

void tf_zero_grad(tf_tensor *t) {
    if (!t || !t->ag) return;
    tf_tensor_release(t->ag->grad);
    t->ag->grad = NULL;
}

bool tf__same_shape(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

void tf__grad_replace(tf_tensor *t, tf_tensor *g) {
    tf_tensor_release(t->ag->grad);
    t->ag->grad = tf__keep(g);
}

tf_status tf_set_grad(tf_tensor *t, tf_tensor *g) {
    static const char fn[] = "tf_set_grad";
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor is NULL", fn);
    if (!t->ag) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the tensor does not require a gradient", fn);
    if (g && !tf__same_shape(g->ndim, g->shape, t->ndim, t->shape))
        return tf__error(TF_ERR_SHAPE, "%s: the gradient's shape differs from the tensor's", fn);
    tf_tensor_retain(g);
    tf_tensor_release(t->ag->grad);
    t->ag->grad = g;
    return TF_OK;
}

tf_status tf_detach(const tf_tensor *t, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_detach: out is NULL");
    *out = NULL;
    if (!t) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_detach: tensor is NULL");
    return tf__in("tf_detach", alias_of(t, out));
}
