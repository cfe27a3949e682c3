/* Mixed precision: the per-thread autocast policy and the loss scaler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autocast.h"

/* ---- autocast ---- */

#define MAX_REGIONS 32

/* The thread's regions, innermost last (TF_F32: off), and how many listed
 * functions are running on it: inside one, nothing converts again. */
static _Thread_local tf_dtype regions[MAX_REGIONS];
static _Thread_local int n_regions;
static _Thread_local int in_listed;

tf_status tf_autocast_begin(tf_dtype dtype) {
    if (dtype != TF_F16 && dtype != TF_BF16 && dtype != TF_F32)
        return tf__error(TF_ERR_DTYPE, "tf_autocast_begin: dtype must be f16, bf16 or f32 (off), not %s",
                         tf__dtype_valid(dtype) ? tf_dtype_name(dtype) : "an invalid dtype");
    if (n_regions == MAX_REGIONS)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_autocast_begin: more than %d nested regions", MAX_REGIONS);
    regions[n_regions++] = dtype;
    return TF_OK;
}

tf_status tf_autocast_end(void) {
    if (n_regions == 0)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "tf_autocast_end: no tf_autocast_begin on this thread");
    n_regions--;
    return TF_OK;
}

tf_dtype tf_autocast_dtype(void) { return n_regions ? regions[n_regions - 1] : TF_F32; }

/* The dtype list wants t converted to, or t's own when it stays. */
static tf_dtype wanted_dtype(tf__autocast_list list, tf_dtype lower, tf_dtype have) {
    if (list == TF__AUTOCAST_LOWER) return have == TF_F32 ? lower : have;
    return have == TF_F16 || have == TF_BF16 ? TF_F32 : have;
}

bool tf__autocast_enter(tf__autocast *ac, const char *fn, tf__autocast_list list, int n, const tf_tensor **args[]) {
    tf_dtype lower = tf_autocast_dtype();
    if (lower == TF_F32 || in_listed) return false;
    ac->status = TF_OK;
    ac->n_held = 0;
    const tf_tensor *converted[TF__AUTOCAST_MAX_ARGS] = {0};
    for (int i = 0; i < n && i < TF__AUTOCAST_MAX_ARGS && ac->status == TF_OK; i++) {
        const tf_tensor *t = *args[i];
        if (!t || tf_dtype_is_quantized(t->dtype)) continue;
        tf_dtype want = wanted_dtype(list, lower, t->dtype);
        if (want == t->dtype) continue;
        tf_tensor *c = NULL;
        ac->status = tf__in(fn, tf_cast(t, want, &c));
        if (ac->status == TF_OK) converted[i] = ac->held[ac->n_held++] = c;
    }
    if (ac->status == TF_OK)
        for (int i = 0; i < n && i < TF__AUTOCAST_MAX_ARGS; i++)
            if (converted[i]) *args[i] = converted[i];
    in_listed++;
    return true;
}

tf_status tf__autocast_leave(tf__autocast *ac, tf_status s) {
    in_listed--;
    for (int i = 0; i < ac->n_held; i++) tf_tensor_release(ac->held[i]);
    return s;
}

/* ---- the loss scaler ---- */

struct tf_grad_scaler {
    tf_grad_scaler_config config;
    tf_grad_scaler_stats stats;
    bool unscaled;                 /* since the last update */
    bool found_inf;                /* by that unscale */
};

tf_grad_scaler_config tf_grad_scaler_defaults(void) {
    return (tf_grad_scaler_config){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                   .growth_interval = 2000};
}

tf_status tf_grad_scaler_create(const tf_grad_scaler_config *config, tf_grad_scaler **out) {
    static const char fn[] = "tf_grad_scaler_create";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_grad_scaler_config c = config ? *config : tf_grad_scaler_defaults();
    if (!(c.init_scale > 0 && isfinite(c.init_scale)) || !(c.growth_factor > 1 && isfinite(c.growth_factor)) ||
        !(c.backoff_factor > 0 && c.backoff_factor < 1) || c.growth_interval < 1)
        return tf__error(TF_ERR_INVALID_ARGUMENT,
                         "%s: needs a finite init_scale > 0, a finite growth_factor > 1, backoff_factor in (0, 1) "
                         "and growth_interval >= 1 (got %g, %g, %g, %lld)", fn, c.init_scale, c.growth_factor,
                         c.backoff_factor, (long long)c.growth_interval);
    tf_grad_scaler *s = tf__calloc(1, sizeof *s);
    if (!s) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no memory for the scaler", fn);
    s->config = c;
    s->stats.scale = c.init_scale;
    *out = s;
    return TF_OK;
}

void tf_grad_scaler_destroy(tf_grad_scaler *s) { tf__free(s); }

tf_status tf_grad_scaler_stats_get(const tf_grad_scaler *s, tf_grad_scaler_stats *out) {
    if (!s || !out) return tf__error(TF_ERR_NULL_ARGUMENT, "tf_grad_scaler_stats_get: scaler or out is NULL");
    *out = s->stats;
    return TF_OK;
}

tf_status tf_grad_scaler_scale(const tf_grad_scaler *s, const tf_tensor *loss, tf_tensor **out) {
    static const char fn[] = "tf_grad_scaler_scale";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!s || !loss) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scaler or loss is NULL", fn);
    if (!tf_dtype_is_float(loss->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: the loss must be a float tensor, not %s", fn, tf_dtype_name(loss->dtype));
    tf_tensor *factor = NULL, *wide = NULL;
    tf_status st = tf_scalar(tf_tensor_device(loss), TF_F32, s->stats.scale, &factor);
    /* f16 cannot hold the default scale (65536): a half loss is scaled in f32 */
    bool half = loss->dtype == TF_F16 || loss->dtype == TF_BF16;
    if (st == TF_OK && half) st = tf_cast(loss, TF_F32, &wide);
    if (st == TF_OK) st = tf_mul(wide ? wide : loss, factor, out);
    tf_tensor_release(factor);
    tf_tensor_release(wide);
    return tf__in(fn, st);
}

static tf_status check_gradients(const char *fn, int n, tf_tensor *const *grads) {
    if (n < 0 || (n > 0 && !grads))
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d gradients at %p", fn, n, (void *)grads);
    for (int i = 0; i < n; i++) {
        if (!grads[i]) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: gradient %d is NULL", fn, i);
        tf_dtype dt = grads[i]->dtype;
        if (dt == TF_F16)
            return tf__error(TF_ERR_DTYPE, "%s: gradient %d is f16: unscaling in f16 loses what the scale kept "
                             "(cast it to f32, the dtype of master weights, first)", fn, i);
        if (dt != TF_F32 && dt != TF_BF16 && dt != TF_F64)
            return tf__error(TF_ERR_DTYPE, "%s: gradient %d is %s, not a float dtype", fn, i, tf_dtype_name(dt));
        if (tf__overlaps_itself(grads[i]))
            return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: gradient %d maps several indices to one element", fn, i);
    }
    return TF_OK;
}

/* grad * (1 / scale) as a new tensor, and whether it is all finite:
 * sum(x * 0) is 0 unless an element is inf or NaN. */
static tf_status unscaled_copy(const tf_tensor *grad, double inverse, tf_tensor **out, bool *finite) {
    tf_device *dev = tf_tensor_device(grad);
    tf_tensor *inv = NULL, *zero = NULL, *zeros = NULL, *total = NULL, *wide = NULL;
    double probe = 0;
    tf_status s = tf_scalar(dev, TF_F32, inverse, &inv);
    if (s == TF_OK) s = tf_mul(grad, inv, out);
    if (s == TF_OK) s = tf_scalar(dev, TF_F32, 0, &zero);
    if (s == TF_OK) s = tf_mul(*out, zero, &zeros);
    if (s == TF_OK) s = tf_sum(zeros, TF_ALL_AXES, false, &total);
    if (s == TF_OK) s = tf_cast(total, TF_F64, &wide);
    if (s == TF_OK) s = tf_tensor_read(wide, &probe, sizeof probe);
    if (s == TF_OK) *finite = probe == 0;
    if (s != TF_OK) {
        tf_tensor_release(*out);
        *out = NULL;
    }
    tf_tensor *all[] = {inv, zero, zeros, total, wide};
    for (int i = 0; i < 5; i++) tf_tensor_release(all[i]);
    return s;
}

tf_status tf_grad_scaler_unscale(tf_grad_scaler *s, int n, tf_tensor *const *grads, bool *finite) {
    static const char fn[] = "tf_grad_scaler_unscale";
    if (!s || !finite) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scaler or finite is NULL", fn);
    if (s->unscaled)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: already unscaled since the last tf_grad_scaler_update", fn);
    tf_status st = check_gradients(fn, n, grads);
    if (st != TF_OK) return st;
    tf_tensor **ready = n ? tf__calloc((size_t)n, sizeof *ready) : NULL;
    if (n && !ready) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no memory for %d gradients", fn, n);
    /* 1/scale rounded to f32 as PyTorch does, so f32 results match its own */
    double inverse = (double)(float)(1.0 / s->stats.scale);
    bool all_finite = true;
    for (int i = 0; i < n && st == TF_OK; i++) {
        bool ok = true;
        st = unscaled_copy(grads[i], inverse, &ready[i], &ok);
        all_finite = all_finite && ok;
    }
    /* Written back only once every copy exists: a failure above changed nothing. */
    for (int i = 0; i < n && st == TF_OK; i++) st = tf__copy_into(fn, ready[i], grads[i]);
    for (int i = 0; i < n; i++) tf_tensor_release(ready[i]);
    tf__free(ready);
    if (st != TF_OK) return tf__in(fn, st);
    s->unscaled = true;
    s->found_inf = !all_finite;
    *finite = all_finite;
    return TF_OK;
}

tf_status tf_grad_scaler_update(tf_grad_scaler *s) {
    static const char fn[] = "tf_grad_scaler_update";
    if (!s) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scaler is NULL", fn);
    if (!s->unscaled)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: no tf_grad_scaler_unscale since the last update: nothing "
                         "says whether the gradients were finite", fn);
    tf_grad_scaler_stats *st = &s->stats;
    if (s->found_inf) {
        st->scale *= s->config.backoff_factor;
        st->growth_tracker = 0;
        st->steps_skipped++;
    } else {
        st->steps_taken++;
        if (++st->growth_tracker == s->config.growth_interval) {
            double grown = st->scale * s->config.growth_factor;
            if (isfinite((float)grown)) st->scale = grown;      /* the scale lives in f32 in PyTorch */
            st->growth_tracker = 0;
        }
    }
    s->unscaled = false;
    s->found_inf = false;
    return TF_OK;
}

/* PyTorch's scaler.step(optimizer): unscale the parameters' gradients
 * (unless tf_grad_scaler_unscale already did, for clipping), then step
 * only when they are all finite. */
tf_status tf_grad_scaler_step(tf_grad_scaler *s, tf_optimizer *o, bool *stepped) {
    static const char fn[] = "tf_grad_scaler_step";
    if (!s || !o || !stepped) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scaler, optimizer or stepped is NULL", fn);
    *stepped = false;
    tf_status st = TF_OK;
    if (!s->unscaled) {
        tf_tensor *const *params = NULL;
        int n = tf_optimizer_params(o, &params), k = 0;
        tf_tensor **grads = tf__calloc((size_t)(n ? n : 1), sizeof *grads);
        if (!grads) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory", fn);
        for (int i = 0; i < n; i++)
            if (tf_grad(params[i])) grads[k++] = tf_grad(params[i]);
        bool finite = false;
        st = tf_grad_scaler_unscale(s, k, grads, &finite);
        tf__free(grads);
    }
    if (st == TF_OK && !s->found_inf) st = tf_optimizer_step(o);
    if (st == TF_OK) *stepped = !s->found_inf;
    return tf__in(fn, st);
}
