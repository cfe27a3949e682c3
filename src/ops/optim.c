/* Optimizers over parameter lists (PyTorch's torch.optim.SGD, Adam, AdamW),
 * gradient clipping by norm, and the GradScaler's step. They run with
 * recording off, on each parameter's device. A step computes everything
 * it allocates first and writes the parameters last, so a failure (an
 * allocation, a bad gradient) leaves every parameter and every state as
 * it was. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"

struct tf_optimizer {
    tf_optimizer_config cfg;
    int n;
    tf_tensor **params;                  /* retained */
    tf_tensor **m, **v;                  /* per parameter: Adam's moments, or SGD's momentum buffer in m */
    int64_t step;
};

tf_optimizer_config tf_optimizer_defaults(tf_optimizer_kind kind) {
    tf_optimizer_config c = {.kind = kind, .lr = kind == TF_OPTIMIZER_SGD ? 0.01 : 1e-3, .beta1 = 0.9,
                             .beta2 = 0.999, .eps = 1e-8, .weight_decay = kind == TF_OPTIMIZER_ADAMW ? 0.01 : 0};
    return c;
}

static tf_status check_config(const char *fn, const tf_optimizer_config *c) {
    if (c->kind != TF_OPTIMIZER_SGD && c->kind != TF_OPTIMIZER_ADAM && c->kind != TF_OPTIMIZER_ADAMW)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: unknown optimizer kind %d", fn, (int)c->kind);
    if (!(c->lr >= 0) || !(c->weight_decay >= 0) || !(c->momentum >= 0) || !(c->dampening >= 0 && c->dampening <= 1))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: needs lr, weight_decay, momentum >= 0 and dampening in [0, 1] "
                         "(got %g, %g, %g, %g)", fn, c->lr, c->weight_decay, c->momentum, c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: Nesterov momentum needs momentum > 0 and no dampening", fn);
    if (c->kind != TF_OPTIMIZER_SGD && (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) ||
                                        !(c->eps >= 0)))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: needs betas in [0, 1) and eps >= 0 (got %g, %g, %g)", fn,
                         c->beta1, c->beta2, c->eps);
    return TF_OK;
}

void tf_optimizer_destroy(tf_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        tf_tensor_release(o->params[i]);
        tf_tensor_release(o->m[i]);
        tf_tensor_release(o->v[i]);
    }
    tf__free(o->params);
    tf__free(o->m);
    tf__free(o->v);
    tf__free(o);
}

tf_status tf_optimizer_create(const tf_optimizer_config *config, int n, tf_tensor *const *params, tf_optimizer **out) {
    static const char fn[] = "tf_optimizer_create";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!config || (n > 0 && !params)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: config or params is NULL", fn);
    if (n < 0) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d parameters", fn, n);
    tf_status s = check_config(fn, config);
    for (int i = 0; i < n && s == TF_OK; i++) {
        if (!params[i]) s = tf__error(TF_ERR_NULL_ARGUMENT, "%s: parameter %d is NULL", fn, i);
        else if (!tf_requires_grad(params[i]) || !tf_is_leaf(params[i]))
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: parameter %d is not a leaf that requires a gradient "
                          "(tf_set_requires_grad)", fn, i);
        for (int j = 0; j < i && s == TF_OK; j++)
            if (params[j] == params[i]) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: parameter %d repeats %d", fn, i, j);
    }
    if (s != TF_OK) return s;
    tf_optimizer *o = tf__calloc(1, sizeof *o);
    size_t k = (size_t)(n ? n : 1);
    if (o) {
        o->params = tf__calloc(k, sizeof *o->params);
        o->m = tf__calloc(k, sizeof *o->m);
        o->v = tf__calloc(k, sizeof *o->v);
    }
    if (!o || !o->params || !o->m || !o->v) {
        tf_optimizer_destroy(o);
        return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for %d parameters", fn, n);
    }
    o->cfg = *config;
    o->n = n;
    for (int i = 0; i < n; i++) o->params[i] = tf_tensor_retain(params[i]);
    *out = o;
    return TF_OK;
}

tf_status tf_optimizer_set_lr(tf_optimizer *o, double lr) {
    if (!o) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_optimizer_set_lr: optimizer is NULL");
    if (!(lr >= 0)) return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_optimizer_set_lr: lr %g must be >= 0", lr);
    o->cfg.lr = lr;
    return TF_OK;
}

int64_t tf_optimizer_steps(const tf_optimizer *o) { return o ? o->step : -1; }

int tf_optimizer_params(const tf_optimizer *o, tf_tensor *const **params) {
    if (params) *params = o ? o->params : NULL;
    return o ? o->n : 0;
}

void tf_optimizer_zero_grad(tf_optimizer *o) {
    for (int i = 0; o && i < o->n; i++) tf_zero_grad(o->params[i]);
}

/* A parameter's gradient ready for its update: checked, on its device, in
 * its dtype (a new reference). */
static tf_status ready_grad(const char *fn, int i, const tf_tensor *p, tf_tensor **out) {
    *out = NULL;
    const tf_tensor *g = tf_grad(p);
    if (g->ndim != p->ndim || memcmp(g->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim))
        return tf__error(TF_ERR_SHAPE, "%s: parameter %d's gradient has another shape", fn, i);
    tf_tensor *moved = NULL;
    tf_status s = tf_tensor_to(g, p->storage->dev, &moved);
    if (s == TF_OK && moved->dtype != p->dtype) {
        s = tf_cast(moved, p->dtype, out);
        tf_tensor_release(moved);
        return s;
    }
    *out = moved;
    return s;
}

/* SGD's new parameter and momentum buffer, as PyTorch: g += wd p;
 * buf = momentum buf + (1 - dampening) g (g itself at the first step);
 * g = nesterov ? g + momentum buf : buf; p -= lr g. */
static tf_status sgd_update(const tf_optimizer *o, const tf_tensor *p, const tf_tensor *buf, const tf_tensor *grad,
                            tf_tensor **new_p, tf_tensor **new_buf) {
    const tf_optimizer_config *c = &o->cfg;
    tf_device *dev = p->storage->dev;
    tf_tensor *t[8] = {NULL};
    tf_tensor *g = tf_tensor_retain((tf_tensor *)grad), *step = NULL;
    tf_status s = TF_OK;
    if (c->weight_decay != 0) {
        s = tf_scalar(dev, p->dtype, c->weight_decay, &t[0]);
        if (s == TF_OK) s = tf_mul(p, t[0], &t[1]);
        if (s == TF_OK) s = tf_add(g, t[1], &t[2]);
        if (s == TF_OK) { tf_tensor_release(g); g = tf_tensor_retain(t[2]); }
    }
    if (s == TF_OK && c->momentum != 0) {
        if (!buf) {
            s = tf_copy(g, new_buf);
        } else {
            s = tf_scalar(dev, p->dtype, c->momentum, &t[3]);
            if (s == TF_OK) s = tf_scalar(dev, p->dtype, 1 - c->dampening, &t[4]);
            if (s == TF_OK) s = tf_mul(g, t[4], &t[5]);
            if (s == TF_OK) s = tf_mul(buf, t[3], &t[6]);
            if (s == TF_OK) s = tf_add(t[6], t[5], new_buf);
        }
        if (s == TF_OK && c->nesterov) {
            tf_tensor *mb = NULL, *m = NULL;
            s = tf_scalar(dev, p->dtype, c->momentum, &m);
            if (s == TF_OK) s = tf_mul(*new_buf, m, &mb);
            if (s == TF_OK) s = tf_add(g, mb, &step);
            tf_tensor_release(mb);
            tf_tensor_release(m);
        } else if (s == TF_OK) {
            step = tf_tensor_retain(*new_buf);
        }
    } else if (s == TF_OK) {
        step = tf_tensor_retain(g);
    }
    tf_tensor *lr = NULL, *delta = NULL;
    if (s == TF_OK) s = tf_scalar(dev, p->dtype, c->lr, &lr);
    if (s == TF_OK) s = tf_mul(step, lr, &delta);
    if (s == TF_OK) s = tf_sub(p, delta, new_p);
    tf_tensor *all[] = {g, step, lr, delta, t[0], t[1], t[2], t[3], t[4], t[5], t[6]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tf_tensor_release(all[i]);
    return s;
}

/* Adam's moments start at zero: made before any parameter is touched. */
static tf_status adam_state(tf_optimizer *o, int i) {
    const tf_tensor *p = o->params[i];
    tf_status s = TF_OK;
    if (!o->m[i]) s = tf_zeros(p->storage->dev, p->dtype, p->ndim, p->shape, &o->m[i]);
    if (s == TF_OK && !o->v[i]) s = tf_zeros(p->storage->dev, p->dtype, p->ndim, p->shape, &o->v[i]);
    tf__keep(o->m[i]);                   /* the optimizer's, past the caller's scope */
    tf__keep(o->v[i]);
    return s;
}

static tf_status optimizer_step(tf_optimizer *o) {
    static const char fn[] = "tf_optimizer_step";
    int n = o->n;
    tf_tensor **grads = tf__calloc((size_t)(n ? n : 1), sizeof *grads);
    tf_tensor **new_p = tf__calloc((size_t)(n ? n : 1), sizeof *new_p);
    tf_tensor **new_buf = tf__calloc((size_t)(n ? n : 1), sizeof *new_buf);
    tf_status s = grads && new_p && new_buf ? TF_OK : tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    bool sgd = o->cfg.kind == TF_OPTIMIZER_SGD;
    /* 1: everything that can fail, nothing written */
    for (int i = 0; i < n && s == TF_OK; i++) {
        if (!tf_grad(o->params[i])) continue;              /* no gradient: skipped, as PyTorch */
        s = ready_grad(fn, i, o->params[i], &grads[i]);
        if (s == TF_OK && sgd) s = sgd_update(o, o->params[i], o->m[i], grads[i], &new_p[i], &new_buf[i]);
        if (s == TF_OK && !sgd) s = adam_state(o, i);
    }
    /* 2: the writes */
    for (int i = 0; i < n && s == TF_OK; i++) {
        if (!grads[i]) continue;
        if (sgd) {
            s = tf__copy_into(fn, new_p[i], o->params[i]);
            atomic_fetch_add(&o->params[i]->storage->version, 1);
            if (new_buf[i]) {
                tf_tensor_release(o->m[i]);
                o->m[i] = tf__keep(new_buf[i]);
                new_buf[i] = NULL;
            }
        } else {
            const tf_optimizer_config *c = &o->cfg;
            s = tf_adam_step(o->params[i], grads[i], o->m[i], o->v[i], c->lr, c->beta1, c->beta2, c->eps,
                             c->weight_decay, o->step + 1, c->kind == TF_OPTIMIZER_ADAMW);
        }
    }
    if (s == TF_OK) o->step++;
    for (int i = 0; i < n; i++) {
        if (grads) tf_tensor_release(grads[i]);
        if (new_p) tf_tensor_release(new_p[i]);
        if (new_buf) tf_tensor_release(new_buf[i]);
    }
    tf__free(grads);
    tf__free(new_p);
    tf__free(new_buf);
    return s;
}

tf_status tf_optimizer_step(tf_optimizer *o) {
    if (!o) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_optimizer_step: optimizer is NULL");
    bool was = tf_set_grad_enabled(false);
    tf_status s = optimizer_step(o);
    tf_set_grad_enabled(was);
    return tf__in("tf_optimizer_step", s);
}

/* ---- clipping ---- */

static tf_status squared_norm(const tf_tensor *g, double *out) {
    tf_tensor *sq = NULL, *total = NULL, *wide = NULL;
    tf_status s = tf_mul(g, g, &sq);
    if (s == TF_OK) s = tf_sum(sq, TF_ALL_AXES, false, &total);
    if (s == TF_OK) s = tf_cast(total, TF_F64, &wide);
    if (s == TF_OK) s = tf_tensor_read(wide, out, sizeof *out);
    tf_tensor_release(sq);
    tf_tensor_release(total);
    tf_tensor_release(wide);
    return s;
}

static tf_status clip_grad_norm(int n, tf_tensor *const *params, double max_norm, double *total_norm) {
    static const char fn[] = "tf_clip_grad_norm";
    double sum = 0;
    tf_status s = TF_OK;
    for (int i = 0; i < n && s == TF_OK; i++) {
        if (!params[i]) s = tf__error(TF_ERR_NULL_ARGUMENT, "%s: parameter %d is NULL", fn, i);
        double part = 0;
        if (s == TF_OK && tf_grad(params[i])) s = squared_norm(tf_grad(params[i]), &part);
        sum += part;
    }
    if (s != TF_OK) return s;
    double norm = sqrt(sum), coef = max_norm / (norm + 1e-6);
    if (total_norm) *total_norm = norm;
    if (coef >= 1) return TF_OK;
    /* new gradients for all first, then swapped in: all or nothing */
    tf_tensor **scaled = tf__calloc((size_t)n, sizeof *scaled);
    if (!scaled) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
    for (int i = 0; i < n && s == TF_OK; i++) {
        const tf_tensor *g = tf_grad(params[i]);
        tf_tensor *k = NULL;
        if (!g) continue;
        s = tf_scalar(g->storage->dev, g->dtype, coef, &k);
        if (s == TF_OK) s = tf_mul(g, k, &scaled[i]);
        tf_tensor_release(k);
    }
    for (int i = 0; i < n && s == TF_OK; i++)
        if (scaled[i]) {
            tf__grad_replace(params[i], scaled[i]);
            scaled[i] = NULL;
        }
    for (int i = 0; i < n; i++) tf_tensor_release(scaled[i]);
    tf__free(scaled);
    return s;
}

tf_status tf_clip_grad_norm(int n, tf_tensor *const *params, double max_norm, double *total_norm) {
    static const char fn[] = "tf_clip_grad_norm";
    if (n < 0 || (n > 0 && !params)) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d parameters", fn, n);
    if (!(max_norm > 0)) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: max_norm %g must be > 0", fn, max_norm);
    bool was = tf_set_grad_enabled(false);
    tf_status s = clip_grad_norm(n, params, max_norm, total_norm);
    tf_set_grad_enabled(was);
    return tf__in(fn, s);
}

tf_status tf_optimizer_clip_grad_norm(tf_optimizer *o, double max_norm, double *total_norm) {
    if (!o) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_optimizer_clip_grad_norm: optimizer is NULL");
    return tf_clip_grad_norm(o->n, o->params, max_norm, total_norm);
}
