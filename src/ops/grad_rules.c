/* The gradient rules: for each recorded node, its inputs' gradients from
 * its output's gradient, written with the library's own ops (so they run
 * on the node's device, whatever it is). tf_backward runs them with
 * recording paused. Each rule returns gradients in the shapes of the
 * inputs; the walk casts and moves them to the inputs' dtypes and devices. */
#include <math.h>
#include <string.h>

#include "../engine/engine.h"

/* Temporaries of one rule, released together; the first failure stops the
 * rest (every helper returns NULL once k->s is not TF_OK). */
typedef struct scratch {
    tf_tensor **t;
    int n, cap;
    tf_status s;
} scratch;

/* *t once the call that wrote it has returned (taken by address: C does
 * not order a call's arguments, so a value argument could be read first). */
static tf_tensor *keep(scratch *k, tf_status s, tf_tensor **tp) {
    tf_tensor *t = *tp;
    if (s != TF_OK) {
        k->s = s;
        return NULL;
    }
    if (!tf__grow((void **)&k->t, &k->cap, k->n + 1, sizeof *k->t)) {
        tf_tensor_release(t);
        k->s = tf__error(TF_ERR_OUT_OF_MEMORY, "tf_backward: no host memory");
        return NULL;
    }
    return k->t[k->n++] = t;
}

/* A result the rule hands back: a reference of its own. */
static tf_tensor *take(scratch *k, tf_tensor *t) { return k->s == TF_OK ? tf_tensor_retain(t) : NULL; }

#define K_OP1(name, call)                                                 \
    static tf_tensor *name(scratch *k, const tf_tensor *x) {             \
        tf_tensor *o = NULL;                                               \
        return k->s != TF_OK ? NULL : keep(k, call(x, &o), &o);             \
    }
#define K_OP2(name, call)                                                                   \
    static tf_tensor *name(scratch *k, const tf_tensor *a, const tf_tensor *b) {            \
        tf_tensor *o = NULL;                                                                 \
        return k->s != TF_OK ? NULL : keep(k, call(a, b, &o), &o);                            \
    }
K_OP1(neg, tf_neg)
K_OP1(exp_, tf_exp)
K_OP1(log_, tf_log)
K_OP1(sqrt_, tf_sqrt)
K_OP1(sin_, tf_sin)
K_OP1(cos_, tf_cos)
K_OP1(sign_, tf_sign)
K_OP1(sigmoid, tf_sigmoid)
K_OP1(silu, tf_silu)
K_OP2(gelu_grad, tf_gelu_grad)
K_OP2(gelu_tanh_grad, tf_gelu_tanh_grad)
K_OP2(silu_grad, tf_silu_grad)
K_OP2(relu_grad, tf_relu_grad)
K_OP2(add, tf_add)
K_OP2(sub, tf_sub)
K_OP2(mul, tf_mul)
K_OP2(div, tf_div)
K_OP2(gt, tf_gt)
K_OP2(ge, tf_ge)
K_OP2(le, tf_le)
K_OP2(eq, tf_eq)
K_OP2(pow_, tf_pow)
K_OP2(matmul, tf_matmul)
K_OP2(copysign_, tf_copysign)

static tf_tensor *where(scratch *k, const tf_tensor *c, const tf_tensor *a, const tf_tensor *b) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_where(c, a, b, &o), &o);
}

/* A 0-d tensor of like's dtype and device. */
static tf_tensor *num(scratch *k, const tf_tensor *like, double v) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_scalar(like->storage->dev, like->dtype, v, &o), &o);
}

static tf_tensor *sum(scratch *k, const tf_tensor *x, int axis, bool keepdim) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_sum(x, axis, keepdim, &o), &o);
}

static tf_tensor *mean(scratch *k, const tf_tensor *x, int axis, bool keepdim) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_mean(x, axis, keepdim, &o), &o);
}

static tf_tensor *reshape(scratch *k, const tf_tensor *x, int ndim, const int64_t *shape) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_reshape(x, ndim, shape, &o), &o);
}

static tf_tensor *expand(scratch *k, const tf_tensor *x, int ndim, const int64_t *shape) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_expand(x, ndim, shape, &o), &o);
}

static tf_tensor *unsqueeze(scratch *k, const tf_tensor *x, int axis) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_unsqueeze(x, axis, &o), &o);
}

static tf_tensor *transpose(scratch *k, const tf_tensor *x, int a, int b) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_transpose(x, a, b, &o), &o);
}

static tf_tensor *permute(scratch *k, const tf_tensor *x, const int *perm) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_permute(x, perm, &o), &o);
}

static tf_tensor *cast(scratch *k, const tf_tensor *x, tf_dtype dt) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_cast(x, dt, &o), &o);
}

/* Zeros in an input's shape, in like's dtype and on its device. */
static tf_tensor *zeros_for(scratch *k, const tf__grad_edge *e, const tf_tensor *like) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_zeros(like->storage->dev, like->dtype, e->ndim, e->shape, &o), &o);
}

/* g, of a broadcast result's shape, summed down to (ndim, shape): over the
 * leading axes the input lacked and over the axes where it had one. */
static tf_tensor *sum_to(scratch *k, tf_tensor *g, int ndim, const int64_t *shape) {
    while (k->s == TF_OK && g->ndim > ndim) g = sum(k, g, 0, false);
    for (int i = 0; k->s == TF_OK && i < ndim; i++)
        if (shape[i] == 1 && g->shape[i] != 1) g = sum(k, g, i, true);
    return g;
}

static tf_tensor *sum_to_edge(scratch *k, tf_tensor *g, const tf__grad_edge *e) {
    return k->s == TF_OK ? sum_to(k, g, e->ndim, e->shape) : NULL;
}

static tf_status unsupported(const tf__grad_node *n) {
    if ((unsigned)n->a.op >= TF_OP_COUNT)
        return tf__error(TF_ERR_UNSUPPORTED, "tf_backward: %s has no gradient rule", n->fn);
    return tf__error(TF_ERR_UNSUPPORTED, "tf_backward: %s (%s) has no gradient rule%s", n->fn, tf_op_name(n->a.op),
                     n->a.rule == TF__GRAD_NONE && n->a.i[0] ? " for complex values (the rules are real)" : "");
}

/* ---- elementwise ---- */

/* d(op)/dx at x (or from the output y), times g. */
static tf_tensor *unary_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf_tensor *x = n->in[0].saved, *y = n->out;
    const tf_op_params *p = &n->a.p;
    switch (n->a.op) {
    case TF_OP_NEG: return neg(k, g);
    case TF_OP_ABS: return mul(k, g, sign_(k, x));
    case TF_OP_SIGN: case TF_OP_FLOOR: case TF_OP_CEIL: case TF_OP_ROUND: return mul(k, g, num(k, g, 0));
    case TF_OP_EXP: return mul(k, g, y);
    case TF_OP_EXPM1: return mul(k, g, add(k, y, num(k, y, 1)));
    case TF_OP_LOG: return div(k, g, x);
    case TF_OP_LOG1P: return div(k, g, add(k, x, num(k, x, 1)));
    case TF_OP_SQRT: return div(k, mul(k, g, num(k, g, 0.5)), y);
    case TF_OP_RSQRT: return mul(k, mul(k, g, num(k, g, -0.5)), mul(k, y, mul(k, y, y)));
    case TF_OP_SIN: return mul(k, g, cos_(k, x));
    case TF_OP_COS: return neg(k, mul(k, g, sin_(k, x)));
    case TF_OP_TANH: return mul(k, g, sub(k, num(k, y, 1), mul(k, y, y)));
    case TF_OP_SIGMOID: return mul(k, g, mul(k, y, sub(k, num(k, y, 1), y)));
    case TF_OP_RELU: return relu_grad(k, x, g);          /* the activations' gradients: one op each */
    case TF_OP_LEAKY_RELU: return where(k, gt(k, x, num(k, x, 0)), g, mul(k, g, num(k, g, p->alpha)));
    case TF_OP_CLAMP: {
        /* PyTorch's rule: the gradient passes where lo <= x <= hi (a NaN bound is none) */
        tf_tensor *pass = num(k, x, 1), *zero = num(k, g, 0);
        if (!isnan(p->min_value)) pass = mul(k, pass, cast(k, ge(k, x, num(k, x, p->min_value)), x->dtype));
        if (!isnan(p->max_value)) pass = mul(k, pass, cast(k, le(k, x, num(k, x, p->max_value)), x->dtype));
        return k->s == TF_OK ? where(k, cast(k, pass, TF_BOOL), g, zero) : NULL;
    }
    case TF_OP_SILU: return silu_grad(k, x, g);
    case TF_OP_SOFTPLUS: return mul(k, g, sigmoid(k, x));
    case TF_OP_GELU: return gelu_grad(k, x, g);
    case TF_OP_GELU_TANH: return gelu_tanh_grad(k, x, g);
    case TF_OP_ASIN: return div(k, g, sqrt_(k, sub(k, num(k, x, 1), mul(k, x, x))));
    case TF_OP_ACOS: return neg(k, div(k, g, sqrt_(k, sub(k, num(k, x, 1), mul(k, x, x)))));
    case TF_OP_ATAN: return div(k, g, add(k, num(k, x, 1), mul(k, x, x)));
    case TF_OP_ASINH: return div(k, g, sqrt_(k, add(k, mul(k, x, x), num(k, x, 1))));
    case TF_OP_ACOSH: return div(k, g, sqrt_(k, sub(k, mul(k, x, x), num(k, x, 1))));
    case TF_OP_ATANH: return div(k, g, sub(k, num(k, x, 1), mul(k, x, x)));
    default: k->s = unsupported(n); return NULL;
    }
}

/* Ties of maximum/minimum share the gradient, as PyTorch. */
static void extremum_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, bool max, tf_tensor **ga,
                           tf_tensor **gb) {
    const tf_tensor *a = n->in[0].saved, *b = n->in[1].saved;
    tf_tensor *wins = max ? gt(k, a, b) : gt(k, b, a), *tie = eq(k, a, b);
    tf_tensor *half = mul(k, g, num(k, g, 0.5)), *zero = num(k, g, 0);
    tf_tensor *share = where(k, tie, half, zero);
    *ga = where(k, wins, g, share);
    *gb = where(k, wins, zero, where(k, tie, half, g));
}

static void binary_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **ga, tf_tensor **gb) {
    const tf_tensor *a = n->in[0].saved, *b = n->in[1].saved, *y = n->out;
    switch (n->a.op) {
    case TF_OP_ADD: *ga = g; *gb = g; return;
    case TF_OP_SUB: *ga = g; *gb = neg(k, g); return;
    case TF_OP_MUL: *ga = mul(k, g, b); *gb = mul(k, g, a); return;
    case TF_OP_DIV: *ga = div(k, g, b); *gb = neg(k, div(k, mul(k, g, y), b)); return;
    case TF_OP_POW: {                    /* y b / a would divide by a zero base: a^(b-1) instead */
        *ga = mul(k, g, mul(k, b, pow_(k, a, sub(k, b, num(k, b, 1)))));
        tf_tensor *zero_base = eq(k, a, num(k, a, 0));
        *gb = where(k, zero_base, num(k, g, 0), mul(k, g, mul(k, y, log_(k, a))));
        return;
    }
    case TF_OP_MAXIMUM: extremum_grads(k, n, g, true, ga, gb); return;
    case TF_OP_MINIMUM: extremum_grads(k, n, g, false, ga, gb); return;
    case TF_OP_SWIGLU: {                 /* silu(a) b */
        *ga = silu_grad(k, a, mul(k, g, b));
        *gb = mul(k, g, silu(k, a));
        return;
    }
    case TF_OP_COPYSIGN:                 /* |a| sgn(b): g sign(a) sgn(b), 0 at a = 0 (PyTorch's); none to b */
        *ga = mul(k, mul(k, g, sign_(k, a)), copysign_(k, num(k, g, 1), b));
        *gb = zeros_for(k, &n->in[1], g);
        return;
    case TF_OP_ATAN2: {                  /* atan2(a, b): (b, -a) / (a^2 + b^2) */
        tf_tensor *r2 = add(k, mul(k, a, a), mul(k, b, b));
        *ga = div(k, mul(k, g, b), r2);
        *gb = neg(k, div(k, mul(k, g, a), r2));
        return;
    }
    default: k->s = unsupported(n); return;
    }
}

/* ---- reductions ---- */

/* g back in the input's rank (the reduced axes of size 1), then broadcast
 * over the input's shape. */
static tf_tensor *spread_back(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf__grad_edge *e = &n->in[0];
    int64_t kshape[TF_MAX_DIMS];
    bool all = n->a.p.axis == TF_ALL_AXES;
    for (int i = 0; i < e->ndim; i++) kshape[i] = all || i == n->a.p.axis ? 1 : e->shape[i];
    tf_tensor *kept = reshape(k, g, e->ndim, kshape);
    return expand(k, kept, e->ndim, e->shape);
}

static int64_t reduced_count(const tf__grad_node *n) {
    const tf__grad_edge *e = &n->in[0];
    if (n->a.p.axis != TF_ALL_AXES) return e->shape[n->a.p.axis];
    int64_t c = 1;
    for (int i = 0; i < e->ndim; i++) c *= e->shape[i];
    return c;
}

static tf_tensor *reduce_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf_tensor *x = n->in[0].saved;
    const double count = (double)reduced_count(n);
    tf_tensor *gb = spread_back(k, n, g);
    switch (n->a.op) {
    case TF_OP_SUM: return gb;
    case TF_OP_MEAN: return div(k, gb, num(k, gb, count));
    case TF_OP_MAX: case TF_OP_MIN: {    /* shared among the elements equal to the extremum */
        tf_tensor *hit = cast(k, eq(k, x, spread_back(k, n, n->out)), g->dtype);
        tf_tensor *ties = spread_back(k, n, sum(k, hit, n->a.p.axis, false));
        return div(k, mul(k, gb, hit), ties);
    }
    case TF_OP_PROD: return div(k, mul(k, gb, spread_back(k, n, n->out)), x);
    case TF_OP_LOGSUMEXP: return mul(k, gb, exp_(k, sub(k, x, spread_back(k, n, n->out))));
    case TF_OP_VAR: case TF_OP_STD: {    /* var: 2 (x - mean) / (N - c); std: that / (2 std) */
        double dof = count - (double)n->a.p.correction;
        tf_tensor *centered = sub(k, x, mean(k, x, n->a.p.axis, true));
        tf_tensor *d = mul(k, centered, num(k, x, (n->a.op == TF_OP_VAR ? 2.0 : 1.0) / (dof > 0 ? dof : 0)));
        if (n->a.op == TF_OP_STD) d = div(k, d, spread_back(k, n, n->out));
        return mul(k, gb, d);
    }
    default: k->s = unsupported(n); return NULL;
    }
}

/* ---- products ---- */

/* NumPy matmul: a 1-d operand is a row (a) or a column (b); the batch axes
 * broadcast. da = g b^T, db = a^T g, summed back over broadcast batches. */
static void matmul_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **ga, tf_tensor **gb) {
    const tf_tensor *a = n->in[0].saved, *b = n->in[1].saved;
    const tf_tensor *a2 = a->ndim == 1 ? unsqueeze(k, a, 0) : a, *b2 = b->ndim == 1 ? unsqueeze(k, b, 1) : b;
    tf_tensor *g2 = g;
    if (a->ndim == 1) g2 = unsqueeze(k, g2, g2 ? g2->ndim - (b->ndim == 1 ? 0 : 1) : 0);
    if (b->ndim == 1 && g2) g2 = unsqueeze(k, g2, g2->ndim);
    if (k->s != TF_OK) return;
    if (n->in[0].needs) {
        tf_tensor *d = matmul(k, g2, transpose(k, b2, -1, -2));
        d = k->s == TF_OK ? sum_to(k, d, a2->ndim, a2->shape) : NULL;
        *ga = reshape(k, d, a->ndim, a->shape);
    }
    if (n->in[1].needs) {
        tf_tensor *d = matmul(k, transpose(k, a2, -1, -2), g2);
        d = k->s == TF_OK ? sum_to(k, d, b2->ndim, b2->shape) : NULL;
        *gb = reshape(k, d, b->ndim, b->shape);
    }
}

/* out = alpha op(a) op(b) + beta c, op a transpose where asked. */
static void gemm_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf_tensor *a = n->in[0].saved, *b = n->in[1].saved;
    bool ta = n->a.i[0], tb = n->a.i[1];
    tf_tensor *ga = mul(k, g, num(k, g, n->a.p.alpha));
    const tf_tensor *opa = ta ? transpose(k, a, -1, -2) : a, *opb = tb ? transpose(k, b, -1, -2) : b;
    if (k->s != TF_OK) return;
    if (n->in[0].needs) {                /* d op(a) = ga op(b)^T; da is its transpose when ta */
        tf_tensor *d = matmul(k, ga, transpose(k, opb, -1, -2));
        if (ta) d = transpose(k, d, -1, -2);
        grads[0] = k->s == TF_OK ? sum_to(k, d, a->ndim, a->shape) : NULL;
    }
    if (n->in[1].needs) {
        tf_tensor *d = matmul(k, transpose(k, opa, -1, -2), ga);
        if (tb) d = transpose(k, d, -1, -2);
        grads[1] = k->s == TF_OK ? sum_to(k, d, b->ndim, b->shape) : NULL;
    }
    if (n->n_in > 2 && n->in[2].needs) grads[2] = sum_to_edge(k, mul(k, g, num(k, g, n->a.p.beta)), &n->in[2]);
}

/* ---- rows: softmax, log_softmax, rmsnorm, layernorm (the last axis for norms) ---- */

static void row_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const int ax = n->a.p.axis;
    const tf_tensor *y = n->out, *x = n->in[0].saved, *w = n->n_in > 1 ? n->in[1].saved : NULL;
    switch (n->a.op) {
    case TF_OP_SOFTMAX:                  /* y (g - sum(g y)) */
        grads[0] = mul(k, y, sub(k, g, sum(k, mul(k, g, y), ax, true)));
        return;
    case TF_OP_LOG_SOFTMAX:              /* g - exp(y) sum(g) */
        grads[0] = sub(k, g, mul(k, exp_(k, y), sum(k, g, ax, true)));
        return;
    case TF_OP_RMSNORM: {                /* y = x r w, r = 1/sqrt(mean(x^2) + eps) */
        if (tf__device_runs(g->storage->dev, TF_OP_RMSNORM_GRAD, g->dtype, w ? 3 : 2)) {   /* the kernel */
            tf_tensor *dx = NULL, *xr = NULL;
            if (n->in[0].needs && k->s == TF_OK)
                grads[0] = keep(k, tf_rmsnorm_grad(x, w, g, n->a.p.eps, &dx), &dx);
            if (w && n->in[1].needs && k->s == TF_OK && keep(k, tf_rmsnorm(x, NULL, n->a.p.eps, &xr), &xr))
                grads[1] = sum_to_edge(k, mul(k, g, xr), &n->in[1]);
            return;
        }
        tf_tensor *r = div(k, num(k, x, 1), sqrt_(k, add(k, mean(k, mul(k, x, x), -1, true), num(k, x, n->a.p.eps))));
        tf_tensor *gw = w ? mul(k, g, w) : g;
        tf_tensor *proj = mean(k, mul(k, gw, x), -1, true);
        grads[0] = sub(k, mul(k, gw, r), mul(k, x, mul(k, proj, mul(k, r, mul(k, r, r)))));
        if (w && n->in[1].needs) grads[1] = sum_to_edge(k, mul(k, g, mul(k, x, r)), &n->in[1]);
        return;
    }
    case TF_OP_LAYERNORM: {              /* xhat = (x - mu) r: dx = r (gh - mean(gh) - xhat mean(gh xhat)) */
        tf_tensor *centered = sub(k, x, mean(k, x, -1, true));
        tf_tensor *var = mean(k, mul(k, centered, centered), -1, true);
        tf_tensor *r = div(k, num(k, x, 1), sqrt_(k, add(k, var, num(k, x, n->a.p.eps))));
        tf_tensor *xhat = mul(k, centered, r);
        tf_tensor *gh = w ? mul(k, g, w) : g;
        tf_tensor *inner = sub(k, sub(k, gh, mean(k, gh, -1, true)), mul(k, xhat, mean(k, mul(k, gh, xhat), -1, true)));
        grads[0] = mul(k, r, inner);
        if (w && n->in[1].needs) grads[1] = sum_to_edge(k, mul(k, g, xhat), &n->in[1]);
        if (n->n_in > 2 && n->in[2].needs) grads[2] = sum_to_edge(k, g, &n->in[2]);
        return;
    }
    default: k->s = unsupported(n); return;
    }
}

/* ---- views and moves ---- */

static tf_tensor *slice_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    tf_tensor *full = zeros_for(k, &n->in[0], g), *window = NULL;
    if (k->s != TF_OK) return NULL;
    int64_t axis = n->a.i[0], start = n->a.i[1], step = n->a.i[2];
    int64_t stop = start + (g->shape[axis] - 1) * step + 1;
    if (keep(k, tf_slice(full, (int)axis, start, stop, step, &window), &window) && k->s == TF_OK)
        k->s = tf_copy_into(window, g);
    return full;
}

static tf_tensor *permute_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    int inverse[TF_MAX_DIMS];
    for (int i = 0; i < n->in[0].ndim; i++) inverse[n->a.perm[i]] = i;
    return permute(k, g, inverse);
}

/* where(c, a, b): g goes to a where c holds, to b elsewhere. */
static void where_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf_tensor *c = n->in[0].saved;
    tf_tensor *zero = num(k, g, 0);
    if (n->in[1].needs) grads[1] = sum_to_edge(k, where(k, c, g, zero), &n->in[1]);
    if (n->in[2].needs) grads[2] = sum_to_edge(k, where(k, c, zero, g), &n->in[2]);
}

/* A one-hot [k, n] (like's dtype) of an index of k elements over n classes. */
static tf_tensor *one_hot(scratch *k, const tf_tensor *index, int64_t classes, const tf_tensor *like) {
    tf_tensor *range = NULL;
    if (k->s != TF_OK) return NULL;
    keep(k, tf_arange(like->storage->dev, TF_I64, 0, (double)classes, 1, &range), &range);
    int64_t col[2] = {tf_tensor_numel(index), 1};
    tf_tensor *idx = reshape(k, cast(k, index, TF_I64), 2, col);
    return k->s == TF_OK ? cast(k, eq(k, idx, range), like->dtype) : NULL;
}

/* index_select along axis: the picked rows' gradients summed back into
 * their rows, as a product with the one-hot of the index. */
static tf_tensor *index_select_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf__grad_edge *e = &n->in[0];
    int ax = n->a.p.axis, last = e->ndim - 1;
    tf_tensor *oh = one_hot(k, n->in[1].saved, e->shape[ax], g);
    tf_tensor *moved = ax == last ? g : transpose(k, g, ax, last);   /* [..., k] */
    tf_tensor *d = matmul(k, moved, oh);                            /* [..., n] */
    return ax == last ? d : transpose(k, d, ax, last);
}

/* gather along axis with index of x's rank (the other axes alike). */
static tf_tensor *gather_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf__grad_edge *e = &n->in[0];
    const tf_tensor *index = n->in[1].saved;
    int ax = n->a.p.axis;
    for (int i = 0; i < e->ndim; i++)
        if (i != ax && index->shape[i] != e->shape[i]) {
            k->s = tf__error(TF_ERR_UNSUPPORTED, "tf_backward: %s's gradient needs an index as wide as x off its "
                             "axis", n->fn);
            return NULL;
        }
    /* hit[..., j, c, ...] = index[..., j, ...] == c; dx = sum_j where(hit, g, 0)
     * (a select, not a cast and a product: two passes over [.., j, c, ..]
     * fewer; cross-entropy's is [1024, 1, 256] a step of train_gpt), the
     * sum a reshape where the index holds one element along the axis */
    int64_t rshape[TF_MAX_DIMS];
    for (int i = 0; i <= e->ndim; i++) rshape[i] = 1;
    rshape[ax + 1] = e->shape[ax];
    const tf_dtype it = index->dtype == TF_I32 ? TF_I32 : TF_I64;     /* the CPU compares these in its own loops */
    tf_tensor *range = NULL;
    if (k->s == TF_OK) keep(k, tf_arange(g->storage->dev, it, 0, (double)e->shape[ax], 1, &range), &range);
    tf_tensor *r = range ? reshape(k, range, e->ndim + 1, rshape) : NULL;
    tf_tensor *hit = eq(k, unsqueeze(k, index->dtype == it ? index : cast(k, index, it), ax + 1), r);
    tf_tensor *picked = where(k, hit, unsqueeze(k, g, ax + 1), num(k, g, 0));
    return index->shape[ax] == 1 && picked ? reshape(k, picked, e->ndim, e->shape) : sum(k, picked, ax, false);
}


/* ---- convolution and pooling (NCHW), through window slices ----
 * Window offset (i, j) of a kernel sees, of the padded input, the rows
 * i*dil, i*dil + stride, ... (Ho of them) and the columns likewise: a
 * strided slice. Forward is a sum over offsets of such slices, so the
 * gradient goes back by adding each offset's share into the same slice of
 * a zero padded input, then cropping the padding. */

static tf_tensor *window(scratch *k, const tf_tensor *padded, const tf_op_params *p, int64_t i, int64_t j,
                         int64_t ho, int64_t wo) {
    tf_tensor *rows = NULL, *cols = NULL;
    if (k->s != TF_OK) return NULL;
    int64_t r0 = i * p->dilation[0], c0 = j * p->dilation[1];
    keep(k, tf_slice(padded, 2, r0, r0 + (ho - 1) * p->stride[0] + 1, p->stride[0], &rows), &rows);
    if (k->s != TF_OK) return NULL;
    return keep(k, tf_slice(rows, 3, c0, c0 + (wo - 1) * p->stride[1] + 1, p->stride[1], &cols), &cols);
}

/* A zero tensor of x's padded shape (like's dtype and device). */
static tf_tensor *padded_zeros(scratch *k, const tf__grad_edge *e, const tf_op_params *p, const tf_tensor *like) {
    int64_t shape[4] = {e->shape[0], e->shape[1], e->shape[2] + 2 * p->padding[0], e->shape[3] + 2 * p->padding[1]};
    tf_tensor *z = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_zeros(like->storage->dev, like->dtype, 4, shape, &z), &z);
}

/* block added into the window (i, j) of the padded gradient z, in place. */
static void add_into_window(scratch *k, tf_tensor *z, const tf_op_params *p, int64_t i, int64_t j,
                            const tf_tensor *block) {
    if (k->s != TF_OK) return;           /* block is NULL after a failure */
    tf_tensor *w = window(k, z, p, i, j, block->shape[2], block->shape[3]);
    if (k->s == TF_OK) k->s = tf_binary_into(w, TF_OP_ADD, w, block);
}

/* The padded gradient z cropped back to x's extent. */
static tf_tensor *crop(scratch *k, tf_tensor *z, const tf__grad_edge *e, const tf_op_params *p) {
    tf_tensor *rows = NULL, *both = NULL;
    if (k->s != TF_OK) return NULL;
    keep(k, tf_slice(z, 2, p->padding[0], p->padding[0] + e->shape[2], 1, &rows), &rows);
    if (k->s != TF_OK) return NULL;
    return keep(k, tf_slice(rows, 3, p->padding[1], p->padding[1] + e->shape[3], 1, &both), &both);
}

static tf_tensor *pad_input(scratch *k, const tf_tensor *x, const tf_op_params *p, double value) {
    if (!p->padding[0] && !p->padding[1]) return (tf_tensor *)x;
    const int64_t pads[4] = {p->padding[1], p->padding[1], p->padding[0], p->padding[0]};
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_pad(x, 2, pads, value, &o), &o);
}

static tf_tensor *conv(scratch *k, const tf_tensor *x, const tf_tensor *w, const int64_t stride[2],
                       const int64_t dilation[2]) {
    tf_tensor *o = NULL;
    static const int64_t zero[2] = {0, 0};
    return k->s != TF_OK ? NULL : keep(k, tf_conv2d(x, w, NULL, stride, zero, dilation, 1, &o), &o);
}

/* dX of an ungrouped convolution as one convolution (a transposed one):
 * g spread out by the stride (zeros between), padded by dil (k - 1) - p
 * on each side (plus what the forward's floor left uncovered at the end),
 * convolved with the weight flipped in space and with O and C swapped. */
static tf_tensor *conv_input_grad(scratch *k, const tf__grad_node *n, tf_tensor *g, const tf_tensor *w) {
    const tf__grad_edge *ex = &n->in[0];
    const tf_op_params *p = &n->a.p;
    const int64_t N = g->shape[0], O = g->shape[1], Ho = g->shape[2], Wo = g->shape[3];
    int64_t spread[4] = {N, O, (Ho - 1) * p->stride[0] + 1, (Wo - 1) * p->stride[1] + 1};
    tf_tensor *gs = g;
    if (p->stride[0] > 1 || p->stride[1] > 1) {
        tf_tensor *z = NULL, *rows = NULL, *cells = NULL;
        if (k->s == TF_OK) keep(k, tf_zeros(g->storage->dev, g->dtype, 4, spread, &z), &z);
        if (k->s == TF_OK) keep(k, tf_slice(z, 2, 0, spread[2], p->stride[0], &rows), &rows);
        if (k->s == TF_OK) keep(k, tf_slice(rows, 3, 0, spread[3], p->stride[1], &cells), &cells);
        if (k->s == TF_OK) k->s = tf_copy_into(cells, g);
        gs = z;
    }
    int64_t pads[4];
    for (int a = 0; a < 2; a++) {                /* F.pad order: last axis first */
        int64_t kk = w->shape[2 + a], reach = p->dilation[a] * (kk - 1), full = ex->shape[2 + a];
        int64_t before = reach - p->padding[a];
        int64_t covered = spread[2 + a] + 2 * before - reach;     /* the output's extent with `before` both sides */
        pads[2 * (1 - a)] = before;
        pads[2 * (1 - a) + 1] = before + (full - covered);
    }
    tf_tensor *gp = NULL;
    if (k->s == TF_OK) keep(k, tf_pad(gs, 2, pads, 0, &gp), &gp);
    int axes[2] = {2, 3};
    tf_tensor *flipped = NULL;
    if (k->s == TF_OK) keep(k, tf_flip(w, 2, axes, &flipped), &flipped);
    tf_tensor *wt = k->s == TF_OK ? transpose(k, flipped, 0, 1) : NULL;      /* [C, O, kh, kw] */
    static const int64_t one[2] = {1, 1};
    return conv(k, gp, wt, one, p->dilation);
}

/* dW of an ungrouped convolution as one convolution: the padded input with
 * N as its channels, convolved with g (N as its channels) as the kernel,
 * stride and dilation exchanged; the result [C, O, >= kh, >= kw] cropped. */
static tf_tensor *conv_weight_grad(scratch *k, const tf__grad_node *n, tf_tensor *g, const tf_tensor *x) {
    const tf__grad_edge *ew = &n->in[1];
    const tf_op_params *p = &n->a.p;
    tf_tensor *xp = pad_input(k, x, p, 0);
    tf_tensor *xt = k->s == TF_OK ? transpose(k, xp, 0, 1) : NULL;            /* [C, N, Hp, Wp] */
    tf_tensor *gt = k->s == TF_OK ? transpose(k, g, 0, 1) : NULL;             /* [O, N, Ho, Wo] */
    tf_tensor *d = conv(k, xt, gt, p->dilation, p->stride);                   /* [C, O, kh', kw'] */
    tf_tensor *rows = NULL, *cells = NULL;
    if (k->s == TF_OK) keep(k, tf_slice(d, 2, 0, ew->shape[2], 1, &rows), &rows);
    if (k->s == TF_OK) keep(k, tf_slice(rows, 3, 0, ew->shape[3], 1, &cells), &cells);
    return k->s == TF_OK ? transpose(k, cells, 0, 1) : NULL;
}

/* y[n, g, o, q] = sum_c' W[g, o, c'] P[n, g, c', q] with P the unfolded
 * input (c' runs over C/G channels times the kernel's offsets). */
static void conv2d_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf__grad_edge *ex = &n->in[0], *ew = &n->in[1];
    const tf_op_params *p = &n->a.p;
    const tf_tensor *x = n->in[0].saved, *w = n->in[1].saved;
    const int64_t N = ex->shape[0], C = ex->shape[1], O = ew->shape[0], G = p->groups, kh = ew->shape[2],
                  kw = ew->shape[3], Ho = g->shape[2], Wo = g->shape[3], K = C / G * kh * kw;
    if (n->in[2].needs) {                /* [N, O, Ho Wo] summed over positions, then images */
        const int64_t planes[3] = {N, O, Ho * Wo};
        grads[2] = sum(k, sum(k, reshape(k, g, 3, planes), 2, false), 0, false);
    }
    tf_device *dev = g->storage->dev;
    if (n->in[0].needs && tf__device_runs(dev, TF_OP_CONV2D_GRAD_INPUT, g->dtype, 2)) {   /* the kernels */
        tf_tensor *dx = NULL;
        if (k->s == TF_OK)
            grads[0] = keep(k, tf_conv2d_grad_input(g, w, ex->shape, p->stride, p->padding, p->dilation, G, &dx), &dx);
    } else if (n->in[0].needs && G == 1) {
        grads[0] = conv_input_grad(k, n, g, w);      /* one convolution (a transposed one) */
    }
    if (n->in[1].needs && tf__device_runs(dev, TF_OP_CONV2D_GRAD_WEIGHT, g->dtype, 2)) {
        tf_tensor *dw = NULL;
        const int64_t kernel[2] = {kh, kw};
        if (k->s == TF_OK)
            grads[1] = keep(k, tf_conv2d_grad_weight(x, g, kernel, p->stride, p->padding, p->dilation, G, &dw), &dw);
    } else if (n->in[1].needs && G == 1) {
        grads[1] = conv_weight_grad(k, n, g, x);     /* one convolution */
    }
    const bool input_done = !n->in[0].needs || grads[0] || k->s != TF_OK;
    const bool weight_done = !n->in[1].needs || grads[1] || k->s != TF_OK;
    if (input_done && weight_done) return;
    const int64_t gshape[4] = {N, G, O / G, Ho * Wo}, wshape[3] = {G, O / G, K};
    tf_tensor *gg = reshape(k, g, 4, gshape), *wg = reshape(k, w, 3, wshape);
    if (kh * kw > 64) {
        k->s = tf__error(TF_ERR_UNSUPPORTED, "tf_backward: %s's gradient takes kernels of up to 64 elements", n->fn);
        return;
    }
    if (!weight_done) {                  /* dW = sum_n G' P^T */
        tf_tensor *xp = pad_input(k, x, p, 0);
        tf_tensor *slices[64];
        int count = 0;
        for (int64_t i = 0; i < kh && k->s == TF_OK; i++)
            for (int64_t j = 0; j < kw && k->s == TF_OK; j++) slices[count++] = window(k, xp, p, i, j, Ho, Wo);
        tf_tensor *st = NULL;
        if (k->s == TF_OK) keep(k, tf_stack(count, (const tf_tensor *const *)slices, 2, &st), &st);   /* [N, C, khkw, Ho, Wo] */
        const int64_t pshape[4] = {N, G, K, Ho * Wo};
        tf_tensor *P = st ? reshape(k, st, 4, pshape) : NULL;
        tf_tensor *dw = P ? sum(k, matmul(k, gg, transpose(k, P, -1, -2)), 0, false) : NULL;   /* [G, O/G, K] */
        grads[1] = reshape(k, dw, 4, ew->shape);
    }
    if (!input_done) {                   /* dP = W^T G', added back window by window */
        tf_tensor *dp = matmul(k, transpose(k, wg, -1, -2), gg);          /* [N, G, K, HoWo] */
        const int64_t dshape[5] = {N, C, kh * kw, Ho, Wo};
        tf_tensor *d5 = reshape(k, dp, 5, dshape), *z = padded_zeros(k, ex, p, g);
        for (int64_t i = 0; i < kh && k->s == TF_OK; i++)
            for (int64_t j = 0; j < kw && k->s == TF_OK; j++) {
                tf_tensor *part = NULL;
                keep(k, tf_slice(d5, 2, i * kw + j, i * kw + j + 1, 1, &part), &part);
                tf_tensor *block = k->s == TF_OK ? reshape(k, part, 4, (int64_t[]){N, C, Ho, Wo}) : NULL;
                if (k->s == TF_OK) add_into_window(k, z, p, i, j, block);
            }
        grads[0] = crop(k, z, ex, p);
    }
}

/* Max pooling: each output's gradient to the first element of its window
 * that equals the maximum (PyTorch's choice among ties); average pooling:
 * g over the window's divisor to every element of it. */
static tf_tensor *pool_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf__grad_edge *e = &n->in[0];
    const tf_op_params *p = &n->a.p;
    const int64_t Ho = g->shape[2], Wo = g->shape[3];
    if (n->a.op == TF_OP_MAXPOOL2D && tf__device_runs(g->storage->dev, TF_OP_MAXPOOL2D_GRAD, g->dtype, 2)) {
        tf_tensor *dx = NULL;
        return k->s != TF_OK ? NULL
                             : keep(k, tf_maxpool2d_grad(n->in[0].saved, g, p->kernel, p->stride, p->padding,
                                                         p->dilation, &dx), &dx);
    }
    tf_tensor *z = padded_zeros(k, e, p, g);
    if (n->a.op == TF_OP_MAXPOOL2D) {
        tf_tensor *xp = pad_input(k, n->in[0].saved, p, -INFINITY), *taken = NULL, *zero = num(k, g, 0);
        for (int64_t i = 0; i < p->kernel[0] && k->s == TF_OK; i++)
            for (int64_t j = 0; j < p->kernel[1] && k->s == TF_OK; j++) {
                tf_tensor *hit = eq(k, window(k, xp, p, i, j, Ho, Wo), n->out);
                if (taken) {
                    tf_tensor *fresh = NULL, *not_taken = NULL;
                    keep(k, tf_logical_not(taken, &not_taken), &not_taken);
                    if (k->s == TF_OK) keep(k, tf_logical_and(hit, not_taken, &fresh), &fresh);
                    tf_tensor *now = NULL;
                    if (k->s == TF_OK) keep(k, tf_logical_or(taken, hit, &now), &now);
                    hit = fresh;
                    taken = now;
                } else {
                    taken = hit;
                }
                add_into_window(k, z, p, i, j, where(k, hit, g, zero));
            }
        return crop(k, z, e, p);
    }
    /* average: the divisor of each output is its window's size, or the
     * count of real (unpadded) elements in it */
    tf_tensor *share = NULL;
    double area = (double)(p->kernel[0] * p->kernel[1]);
    if (p->flags & TF_POOL_COUNT_PAD || (!p->padding[0] && !p->padding[1])) {
        share = div(k, g, num(k, g, area));
    } else {
        tf_tensor *ones = NULL, *frac = NULL;
        if (k->s == TF_OK) keep(k, tf_ones(g->storage->dev, g->dtype, 4, e->shape, &ones), &ones);
        if (k->s == TF_OK)
            keep(k, tf_avgpool2d(ones, p->kernel, p->stride, p->padding, true, &frac), &frac);   /* count / area */
        share = frac ? div(k, g, mul(k, frac, num(k, g, area))) : NULL;
    }
    for (int64_t i = 0; i < p->kernel[0] && k->s == TF_OK; i++)
        for (int64_t j = 0; j < p->kernel[1] && k->s == TF_OK; j++) add_into_window(k, z, p, i, j, share);
    return crop(k, z, e, p);
}


/* ---- attention and rotary embedding ---- */

/* k or v [B, Hkv, L, D] repeated to the query heads [B, Hq, L, D] (head h
 * reads kv head h / (Hq / Hkv)), and the reverse sum for gradients. */
static tf_tensor *repeat_heads(scratch *k, const tf_tensor *t, int64_t hq) {
    int64_t b = t->shape[0], hkv = t->shape[1], l = t->shape[2], d = t->shape[3];
    if (hkv == hq) return (tf_tensor *)t;
    const int64_t wide[5] = {b, hkv, hq / hkv, l, d}, flat[4] = {b, hq, l, d};
    return reshape(k, expand(k, unsqueeze(k, t, 2), 5, wide), 4, flat);
}

static tf_tensor *sum_heads(scratch *k, tf_tensor *t, int64_t hkv) {
    if (!t || t->shape[1] == hkv) return t;
    const int64_t grouped[5] = {t->shape[0], hkv, t->shape[1] / hkv, t->shape[2], t->shape[3]};
    return sum(k, reshape(k, t, 5, grouped), 2, false);
}

static tf_tensor *slice_(scratch *k, const tf_tensor *x, int axis, int64_t start, int64_t stop);

/* The gradient kernels: dQ from one, dK and dV side by side from the other. */
static void sdpa_grads_fused(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf_tensor *q = n->in[0].saved, *kk = n->in[1].saved, *v = n->in[2].saved;
    const tf_op_params *p = &n->a.p;
    const bool causal = p->flags & TF_SDPA_CAUSAL;
    tf_tensor *dq = NULL, *dkv = NULL;
    if (n->in[0].needs && k->s == TF_OK)
        grads[0] = keep(k, tf_sdpa_grad_q(q, kk, v, g, p->scale, causal, p->q_offset, &dq), &dq);
    if ((n->in[1].needs || n->in[2].needs) && k->s == TF_OK)
        keep(k, tf_sdpa_grad_kv(q, kk, v, g, p->scale, causal, p->q_offset, &dkv), &dkv);
    const int64_t D = kk->shape[3];
    if (n->in[1].needs) grads[1] = slice_(k, dkv, 3, 0, D);
    if (n->in[2].needs) grads[2] = slice_(k, dkv, 3, D, D + v->shape[3]);
}

/* The forward recomputed: P = softmax(scale q k^T + mask, causal); then
 * dV = P^T dO, dS = P (dP - rowsum(dP P)) with dP = dO V^T, dQ = scale dS K,
 * dK = scale dS^T Q; a float mask's gradient is dS, summed to its shape. */
static void sdpa_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf_tensor *q = n->in[0].saved, *kk = n->in[1].saved, *v = n->in[2].saved, *mask = n->in[3].saved;
    const tf_op_params *p = &n->a.p;
    if (!mask && tf__device_runs(g->storage->dev, TF_OP_SDPA_GRAD_Q, g->dtype, 4)) {
        sdpa_grads_fused(k, n, g, grads);          /* the kernels: no scores kept */
        return;
    }
    const int64_t hq = q->shape[1], hkv = kk->shape[1], lq = q->shape[2], lk = kk->shape[2];
    tf_tensor *kr = repeat_heads(k, kk, hq), *vr = repeat_heads(k, v, hq);
    tf_tensor *scores = mul(k, matmul(k, q, transpose(k, kr, -1, -2)), num(k, q, p->scale));
    if (mask) scores = add(k, scores, mask);
    if (p->flags & TF_SDPA_CAUSAL && k->s == TF_OK) {
        tf_tensor *rows = NULL, *cols = NULL;
        keep(k, tf_arange(q->storage->dev, TF_I64, (double)p->q_offset, (double)(p->q_offset + lq), 1, &rows), &rows);
        if (k->s == TF_OK) keep(k, tf_arange(q->storage->dev, TF_I64, 0, (double)lk, 1, &cols), &cols);
        tf_tensor *visible = k->s == TF_OK ? le(k, cols, unsqueeze(k, rows, 1)) : NULL;   /* [lq, lk] */
        scores = where(k, visible, scores, num(k, scores, -INFINITY));
    }
    tf_tensor *probs = NULL;
    if (k->s == TF_OK) keep(k, tf_softmax(scores, -1, &probs), &probs);
    if (k->s != TF_OK) return;
    if (n->in[2].needs) grads[2] = sum_heads(k, matmul(k, transpose(k, probs, -1, -2), g), hkv);
    tf_tensor *dp = matmul(k, g, transpose(k, vr, -1, -2));
    tf_tensor *ds = mul(k, probs, sub(k, dp, sum(k, mul(k, dp, probs), -1, true)));
    if (n->in[0].needs) grads[0] = mul(k, matmul(k, ds, kr), num(k, g, p->scale));
    if (n->in[1].needs) grads[1] = sum_heads(k, mul(k, matmul(k, transpose(k, ds, -1, -2), q), num(k, g, p->scale)), hkv);
    if (mask && n->in[3].needs) grads[3] = sum_to_edge(k, ds, &n->in[3]);
}

/* A rotation's transpose is the rotation by minus the angle: the
 * positions negated. */
static tf_tensor *rope_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const tf_op_params *p = &n->a.p;
    tf_tensor *back = NULL, *minus = NULL;
    tf_tensor *pos = n->in[1].saved;
    if (k->s == TF_OK) keep(k, tf_scalar(pos->storage->dev, pos->dtype, -1, &minus), &minus);
    tf_tensor *neg_pos = mul(k, pos, minus);
    if (k->s == TF_OK)
        keep(k, tf_rope(g, neg_pos, p->axis, p->rotary_dims, p->theta,
                        p->flags & TF_ROPE_NEOX ? TF_ROPE_HALF_SPLIT : TF_ROPE_INTERLEAVED, &back), &back);
    return back;
}

/* ---- the shaping composites, the scan, triangles, quantized weights ---- */

static tf_tensor *slice_(scratch *k, const tf_tensor *x, int axis, int64_t start, int64_t stop) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_slice(x, axis, start, stop, 1, &o), &o);
}

static tf_tensor *flip_(scratch *k, const tf_tensor *x, int naxes, const int *axes) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_flip(x, naxes, axes, &o), &o);
}

/* concat(a, b) along an axis (tf_concat records a tree of pairs): each
 * input's gradient is its window of g. */
static void concat_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const int ax = (int)n->a.i[0];
    const int64_t split = n->a.i[1];
    if (n->in[0].needs) grads[0] = slice_(k, g, ax, 0, split);
    if (n->in[1].needs) grads[1] = slice_(k, g, ax, split, g->shape[ax]);
}

/* Padding's transpose is the crop by the same pads and cropping's (a
 * negative pad) is padding with zeros: tf_pad by the negated pads. */
static tf_tensor *pad_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    int64_t back[2 * TF_MAX_DIMS];
    const int npairs = (int)n->a.i[0];
    for (int i = 0; i < 2 * npairs; i++) back[i] = -n->a.v[i];
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_pad(g, npairs, back, 0, &o), &o);
}

/* g of the tiled shape summed over each axis's repetitions: axis d of
 * extent r*e viewed as [r, e] and summed over r (or, where that would pass
 * TF_MAX_DIMS axes, its r windows added). */
static tf_tensor *tile_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const int m = (int)n->a.i[0];
    for (int d = 0; d < m && k->s == TF_OK; d++) {
        const int64_t r = n->a.v[d];
        if (r <= 1 || g->shape[d] == 0) continue;
        const int64_t e = g->shape[d] / r;
        if (m < TF_MAX_DIMS) {
            int64_t split[TF_MAX_DIMS];
            for (int i = 0, j = 0; i < m; i++) {
                if (i == d) split[j++] = r;
                split[j++] = i == d ? e : g->shape[i];
            }
            g = sum(k, reshape(k, g, m + 1, split), d, false);
        } else {
            tf_tensor *acc = slice_(k, g, d, 0, e);
            for (int64_t j = 1; j < r && k->s == TF_OK; j++) acc = add(k, acc, slice_(k, g, d, j * e, (j + 1) * e));
            g = acc;
        }
    }
    return k->s == TF_OK ? reshape(k, g, n->in[0].ndim, n->in[0].shape) : NULL;
}

/* cumsum's transpose sums from the far end: flip, cumsum, flip. */
static tf_tensor *cumsum_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    if (g->ndim == 0) return g;
    const int ax = n->a.p.axis;
    tf_tensor *flipped = flip_(k, g, 1, &ax), *o = NULL;
    if (k->s == TF_OK) keep(k, tf_cumsum(flipped, ax, &o), &o);
    return k->s == TF_OK ? flip_(k, o, 1, &ax) : NULL;
}

static tf_tensor *triangle_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    tf_tensor *o = NULL;
    if (k->s != TF_OK) return NULL;
    tf_status s = n->a.op == TF_OP_TRIL ? tf_tril(g, n->a.i[0], &o) : tf_triu(g, n->a.i[0], &o);
    return keep(k, s, &o);
}

/* Rows x [M, K] times a quantized or half w [N, K] read as stored: dx =
 * g w, w decoded to g's dtype; dw = g^T x (a quantized w is never float,
 * so never asks for one). */
static void qmatmul_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    if (n->in[0].needs) grads[0] = matmul(k, g, cast(k, n->in[1].saved, g->dtype));
    if (n->in[1].needs) grads[1] = matmul(k, transpose(k, g, 0, 1), cast(k, n->in[0].saved, g->dtype));
}

/* ---- linear algebra ---- */

static tf_tensor *mT(scratch *k, const tf_tensor *x) { return transpose(k, x, -1, -2); }

K_OP1(inv_, tf_linalg_inv)
K_OP2(solve_, tf_linalg_solve)

static tf_tensor *tril_(scratch *k, const tf_tensor *x, int64_t diagonal) {
    tf_tensor *o = NULL;
    return k->s != TF_OK ? NULL : keep(k, tf_tril(x, diagonal, &o), &o);
}

/* A per-matrix value [...] as [..., 1, 1], to scale whole matrices. */
static tf_tensor *per_matrix(scratch *k, const tf_tensor *v) { return unsqueeze(k, unsqueeze(k, v, -1), -1); }

/* Cholesky A = L L^T: with phi(P) P's lower triangle, its diagonal halved,
 * dA = L^-T phi(L^T dL) L^-1, made symmetric (PyTorch's convention: A is
 * read as symmetric, so both triangles share the gradient). */
static tf_tensor *cholesky_grad(scratch *k, const tf__grad_node *n, tf_tensor *g) {
    const bool upper = n->a.i[1];
    const tf_tensor *l = upper ? mT(k, n->out) : n->out;
    tf_tensor *gl = upper ? mT(k, g) : g;
    tf_tensor *p = matmul(k, mT(k, l), gl);
    tf_tensor *phi = mul(k, add(k, tril_(k, p, 0), tril_(k, p, -1)), num(k, g, 0.5));
    tf_tensor *l_inv = inv_(k, l);
    tf_tensor *sym = matmul(k, matmul(k, mT(k, l_inv), phi), l_inv);
    return mul(k, add(k, sym, mT(k, sym)), num(k, g, 0.5));
}

/* inv: dA = -Y^T G Y^T. solve X = A^-1 B: dB = A^-T G, dA = -dB X^T.
 * det: dA = g det A^-T. log|det|: dA = g A^-T. */
static void linalg_grads(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf_tensor *a = n->in[0].saved, *y = n->out;
    switch (n->a.i[0]) {
    case TF__GRAD_INV: grads[0] = neg(k, matmul(k, matmul(k, mT(k, y), g), mT(k, y))); return;
    case TF__GRAD_SOLVE: {
        tf_tensor *db = solve_(k, mT(k, a), g);
        if (n->in[1].needs) grads[1] = db;
        if (n->in[0].needs) grads[0] = neg(k, matmul(k, db, mT(k, y)));
        return;
    }
    case TF__GRAD_DET: grads[0] = mul(k, per_matrix(k, mul(k, g, y)), mT(k, inv_(k, a))); return;
    case TF__GRAD_LOGDET: grads[0] = mul(k, per_matrix(k, g), mT(k, inv_(k, a))); return;
    case TF__GRAD_CHOLESKY: grads[0] = cholesky_grad(k, n, g); return;
    }
    k->s = unsupported(n);
}

/* ---- dispatch ---- */

static void run_rule(scratch *k, const tf__grad_node *n, tf_tensor *g, tf_tensor **grads) {
    const tf__grad_edge *e0 = &n->in[0];
    switch (n->a.rule) {
    case TF__GRAD_UNARY: grads[0] = unary_grad(k, n, g); return;
    case TF__GRAD_BINARY: {
        tf_tensor *ga = NULL, *gb = NULL;
        binary_grads(k, n, g, &ga, &gb);
        if (n->in[0].needs && ga) grads[0] = sum_to_edge(k, ga, &n->in[0]);
        if (n->in[1].needs && gb) grads[1] = sum_to_edge(k, gb, &n->in[1]);
        return;
    }
    case TF__GRAD_REDUCE: grads[0] = reduce_grad(k, n, g); return;
    case TF__GRAD_MATMUL: matmul_grads(k, n, g, &grads[0], &grads[1]); return;
    case TF__GRAD_GEMM: gemm_grads(k, n, g, grads); return;
    case TF__GRAD_VIEW: grads[0] = reshape(k, g, e0->ndim, e0->shape); return;
    case TF__GRAD_PERMUTE: grads[0] = permute_grad(k, n, g); return;
    case TF__GRAD_SLICE: grads[0] = slice_grad(k, n, g); return;
    case TF__GRAD_EXPAND: grads[0] = sum_to_edge(k, g, e0); return;
    case TF__GRAD_CAST: grads[0] = g; return;
    case TF__GRAD_ROW: row_grads(k, n, g, grads); return;
    case TF__GRAD_WHERE: where_grads(k, n, g, grads); return;
    case TF__GRAD_GATHER: grads[0] = gather_grad(k, n, g); return;
    case TF__GRAD_INDEX_SELECT: grads[0] = index_select_grad(k, n, g); return;
    case TF__GRAD_CONV: conv2d_grads(k, n, g, grads); return;
    case TF__GRAD_POOL: grads[0] = pool_grad(k, n, g); return;
    case TF__GRAD_SDPA: sdpa_grads(k, n, g, grads); return;
    case TF__GRAD_ROPE: grads[0] = rope_grad(k, n, g); return;
    case TF__GRAD_CONCAT: concat_grads(k, n, g, grads); return;
    case TF__GRAD_PAD: grads[0] = pad_grad(k, n, g); return;
    case TF__GRAD_TILE: grads[0] = tile_grad(k, n, g); return;
    case TF__GRAD_FLIP: grads[0] = flip_(k, g, (int)n->a.i[0], n->a.perm); return;
    case TF__GRAD_SCAN: grads[0] = cumsum_grad(k, n, g); return;
    case TF__GRAD_TRIANGLE: grads[0] = triangle_grad(k, n, g); return;
    case TF__GRAD_QMATMUL: qmatmul_grads(k, n, g, grads); return;
    case TF__GRAD_LINALG: linalg_grads(k, n, g, grads); return;
    case TF__GRAD_NONE: break;
    }
    k->s = unsupported(n);
}

tf_status tf__grad_rule_run(const tf__grad_node *n, const tf_tensor *g, tf_tensor **grads) {
    scratch k = {.t = NULL, .n = 0, .cap = 0, .s = TF_OK};
    tf_tensor *view[TF__GRAD_MAX_IN] = {NULL};
    run_rule(&k, n, (tf_tensor *)g, view);
    for (int i = 0; i < n->n_in; i++) grads[i] = n->in[i].needs && view[i] ? take(&k, view[i]) : NULL;
    for (int i = 0; i < k.n; i++) tf_tensor_release(k.t[i]);
    tf__free(k.t);
    if (k.s != TF_OK)
        for (int i = 0; i < n->n_in; i++) {
            tf_tensor_release(grads[i]);
            grads[i] = NULL;
        }
    return k.s;
}
