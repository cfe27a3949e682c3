/* Discrete Fourier transforms through FFTW 3, loaded at run time.
 *
 * Why FFTW: it is the reference FFT (every size in O(n log n), real and
 * multi-dimensional transforms over any strides through its guru64
 * interface, double precision), kept for decades and packaged by Debian
 * (libfftw3-double3). Debian's KissFFT is built for float only, and
 * pocketfft is not packaged there. FFTW is GPL-2+, so the library never
 * links it: the first transform dlopen()s libfftw3.so.3, and a system
 * without it gets TF_ERR_UNSUPPORTED naming the package. A program that
 * ships FFTW with tensorframe follows FFTW's terms (or MIT's commercial
 * license for it).
 *
 * Like linalg.c, the transform runs on the host in double precision
 * whatever the dtype (c64 and f32 results are rounded from it), reading
 * the input from its device and making the result there. FFTW's planner is
 * not thread-safe, so plans are made and destroyed under one lock; a plan
 * runs outside it. FFTW_ESTIMATE plans without measuring (microseconds),
 * so nothing is cached between calls.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "../engine/engine.h"

/* ---- FFTW's entry points, resolved from libfftw3.so.3 ---- */

typedef struct fftw_dim { ptrdiff_t n, is, os; } fftw_dim;   /* fftw_iodim64 */
typedef void *fftw_plan_t;
typedef struct fftw_api {
    fftw_plan_t (*plan_dft)(int, const fftw_dim *, int, const fftw_dim *, double *, double *, int, unsigned);
    fftw_plan_t (*plan_r2c)(int, const fftw_dim *, int, const fftw_dim *, double *, double *, unsigned);
    fftw_plan_t (*plan_c2r)(int, const fftw_dim *, int, const fftw_dim *, double *, double *, unsigned);
    void (*execute)(fftw_plan_t);
    void (*destroy)(fftw_plan_t);
} fftw_api;

#define FFTW_FORWARD_SIGN (-1)
#define FFTW_BACKWARD_SIGN 1
#define FFTW_ESTIMATE_FLAG (1u << 6)
#define FFTW_DESTROY_INPUT_FLAG 1u

static fftw_api api;
static bool have_fftw;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;
static pthread_mutex_t planner = PTHREAD_MUTEX_INITIALIZER;

static void load_fftw(void) {
    void *h = dlopen("libfftw3.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    *(void **)&api.plan_dft = dlsym(h, "fftw_plan_guru64_dft");
    *(void **)&api.plan_r2c = dlsym(h, "fftw_plan_guru64_dft_r2c");
    *(void **)&api.plan_c2r = dlsym(h, "fftw_plan_guru64_dft_c2r");
    *(void **)&api.execute = dlsym(h, "fftw_execute");
    *(void **)&api.destroy = dlsym(h, "fftw_destroy_plan");
    have_fftw = api.plan_dft && api.plan_r2c && api.plan_c2r && api.execute && api.destroy;
}

static tf_status need_fftw(const char *fn) {
    if (getenv("TF_FFT_DISABLE")) return tf__error(TF_ERR_UNSUPPORTED, "%s: TF_FFT_DISABLE is set", fn);
    pthread_once(&loaded, load_fftw);
    if (!have_fftw)
        return tf__error(TF_ERR_UNSUPPORTED, "%s: FFTW 3 (libfftw3.so.3, Debian's libfftw3-double3) is not installed: "
                         "tensorframe loads it for its transforms", fn);
    return TF_OK;
}

/* ---- the geometry of one call ---- */

typedef enum { KIND_C2C, KIND_R2C, KIND_C2R } fft_kind;

typedef struct fft_call {
    const char *fn;
    fft_kind kind;
    int ndim, n_axes;
    int axes[TF_MAX_DIMS];               /* normalized; the halved one (r2c, c2r) last */
    bool transformed[TF_MAX_DIMS];
    int64_t in_shape[TF_MAX_DIMS], out_shape[TF_MAX_DIMS];
    int64_t points;                      /* the product of the transformed lengths (real side) */
} fft_call;

static tf_status check_axes(fft_call *c, const tf_tensor *x, int n_axes, const int *axes) {
    c->ndim = x->ndim;
    c->n_axes = n_axes;
    if (n_axes < 1 || n_axes > x->ndim || !axes)
        return tf__error(n_axes < 1 || n_axes > x->ndim ? TF_ERR_AXIS : TF_ERR_NULL_ARGUMENT,
                         "%s: takes 1 to %d axes of the %d-d input (got %d%s)", c->fn, x->ndim, x->ndim, n_axes,
                         axes ? "" : ", axes NULL");
    memset(c->transformed, 0, sizeof c->transformed);
    for (int i = 0; i < n_axes; i++) {
        int a = axes[i] < 0 ? axes[i] + x->ndim : axes[i];
        if (a < 0 || a >= x->ndim)
            return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d input", c->fn, axes[i], x->ndim);
        if (c->transformed[a]) return tf__error(TF_ERR_AXIS, "%s: axis %d is given twice", c->fn, axes[i]);
        c->transformed[a] = true;
        c->axes[i] = a;
    }
    memcpy(c->in_shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(c->out_shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    return TF_OK;
}

/* Row-major strides of shape, in elements. */
static void strides_of(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

static int64_t count_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* FFTW's dims (the transformed axes, in c->axes' order) and howmany dims
 * (the rest): lengths from the real side (c2r: the output), strides of the
 * host buffers. */
static int fftw_dims(const fft_call *c, fftw_dim *dims, fftw_dim *batch, int *n_batch) {
    int64_t is[TF_MAX_DIMS], os[TF_MAX_DIMS];
    strides_of(c->ndim, c->in_shape, is);
    strides_of(c->ndim, c->out_shape, os);
    const int64_t *real_shape = c->kind == KIND_C2R ? c->out_shape : c->in_shape;
    for (int i = 0; i < c->n_axes; i++) {
        int a = c->axes[i];
        dims[i] = (fftw_dim){(ptrdiff_t)real_shape[a], (ptrdiff_t)is[a], (ptrdiff_t)os[a]};
    }
    *n_batch = 0;
    for (int d = 0; d < c->ndim; d++)
        if (!c->transformed[d]) batch[(*n_batch)++] = (fftw_dim){(ptrdiff_t)c->in_shape[d], (ptrdiff_t)is[d],
                                                                  (ptrdiff_t)os[d]};
    return c->n_axes;
}

/* ---- host buffers in and out ---- */

/* x on the host as `as` (c128 or f64), row-major. */
static tf_status read_input(const char *fn, const tf_tensor *x, tf_dtype as, int64_t count, void **host) {
    size_t bytes = tf_dtype_size(as) * (size_t)(count ? count : 1);
    *host = tf__malloc(bytes);
    if (!*host) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the transform's input", fn);
    tf_tensor *wide = NULL;
    tf_status s = x->dtype == as ? TF_OK : tf_cast(x, as, &wide);
    if (s == TF_OK && count) s = tf_tensor_read(wide ? wide : x, *host, tf_dtype_size(as) * (size_t)count);
    tf_tensor_release(wide);
    if (s != TF_OK) {
        tf__free(*host);
        *host = NULL;
    }
    return s;
}

/* The result on dev in dtype want, from host values of dtype host. */
static tf_status make_output(tf_device *dev, tf_dtype host, tf_dtype want, int ndim, const int64_t *shape,
                             const void *v, tf_tensor **out) {
    tf_tensor *t = NULL, *c = NULL;
    tf_status s = tf_tensor_from_data(dev, host, ndim, shape, v, &t);
    if (s == TF_OK && want != host) {
        s = tf_cast(t, want, &c);
        tf_tensor_release(t);
        t = c;
    }
    if (s == TF_OK) *out = t;
    return s;
}

/* The factor norm asks of a transform of `points` points in direction
 * `inverse`: backward scales the inverse by 1/n, forward the forward one,
 * ortho both by 1/sqrt(n). */
static double scale_of(tf_fft_norm norm, bool inverse, int64_t points) {
    double n = (double)points;
    switch (norm) {
    case TF_FFT_ORTHO: return 1.0 / sqrt(n);
    case TF_FFT_FORWARD: return inverse ? 1.0 : 1.0 / n;
    default: return inverse ? 1.0 / n : 1.0;
    }
}

/* Plans, runs and frees one FFTW transform of the host buffers. */
static tf_status run_fftw(const fft_call *c, bool inverse, void *in, void *out) {
    fftw_dim dims[TF_MAX_DIMS], batch[TF_MAX_DIMS];
    int n_batch, rank = fftw_dims(c, dims, batch, &n_batch);
    pthread_mutex_lock(&planner);
    fftw_plan_t p;
    switch (c->kind) {
    case KIND_R2C: p = api.plan_r2c(rank, dims, n_batch, batch, in, out, FFTW_ESTIMATE_FLAG); break;
    case KIND_C2R: p = api.plan_c2r(rank, dims, n_batch, batch, in, out, FFTW_ESTIMATE_FLAG | FFTW_DESTROY_INPUT_FLAG); break;
    default:
        p = api.plan_dft(rank, dims, n_batch, batch, in, out, inverse ? FFTW_BACKWARD_SIGN : FFTW_FORWARD_SIGN,
                         FFTW_ESTIMATE_FLAG);
        break;
    }
    pthread_mutex_unlock(&planner);
    if (!p) return tf__error(TF_ERR_BACKEND, "%s: FFTW made no plan for this transform", c->fn);
    api.execute(p);
    pthread_mutex_lock(&planner);
    api.destroy(p);
    pthread_mutex_unlock(&planner);
    return TF_OK;
}

static bool inexact(tf_dtype dt) { return tf_dtype_is_float(dt) || tf_dtype_is_complex(dt); }

/* The complex dtype of a result: c128 from f64 or c128 inputs, else c64. */
static tf_dtype complex_result(tf_dtype dt) { return dt == TF_F64 || dt == TF_C128 ? TF_C128 : TF_C64; }

/* One transform: checks, host buffers, FFTW, scaling, the result. */
static tf_status transform(fft_call *c, const tf_tensor *x, bool inverse, tf_fft_norm norm, tf_tensor **out) {
    if (norm != TF_FFT_BACKWARD && norm != TF_FFT_ORTHO && norm != TF_FFT_FORWARD)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: norm %d is not TF_FFT_BACKWARD, _ORTHO or _FORWARD", c->fn,
                         (int)norm);
    c->points = 1;
    const int64_t *real_shape = c->kind == KIND_C2R ? c->out_shape : c->in_shape;
    for (int i = 0; i < c->n_axes; i++) {
        if (real_shape[c->axes[i]] < 1)
            return tf__error(TF_ERR_SHAPE, "%s: a transform of %lld points along axis %d (one or more are needed)",
                             c->fn, (long long)real_shape[c->axes[i]], c->axes[i]);
        c->points *= real_shape[c->axes[i]];
    }
    tf_status s = need_fftw(c->fn);
    if (s != TF_OK) return s;
    tf_dtype in_host = c->kind == KIND_R2C ? TF_F64 : TF_C128, out_host = c->kind == KIND_C2R ? TF_F64 : TF_C128;
    tf_dtype want = c->kind == KIND_C2R ? tf_dtype_to_real(complex_result(x->dtype)) : complex_result(x->dtype);
    int64_t n_in = count_of(c->ndim, c->in_shape), n_out = count_of(c->ndim, c->out_shape);
    void *in = NULL;
    if ((s = read_input(c->fn, x, in_host, n_in, &in)) != TF_OK) return s;
    double *res = tf__malloc(tf_dtype_size(out_host) * (size_t)(n_out ? n_out : 1));
    if (!res) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the transform's result", c->fn);
    if (s == TF_OK && n_out) s = run_fftw(c, inverse, in, res);
    double k = scale_of(norm, inverse, c->points);
    size_t parts = (size_t)n_out * (out_host == TF_C128 ? 2 : 1);
    for (size_t i = 0; s == TF_OK && k != 1.0 && i < parts; i++) res[i] *= k;
    if (s == TF_OK) s = make_output(tf_tensor_device(x), out_host, want, c->ndim, c->out_shape, res, out);
    tf__free(res);
    tf__free(in);
    return s;
}

/* ---- the public transforms ---- */

tf_status tf_fft(const tf_tensor *x, int n_axes, const int *axes, bool inverse, tf_fft_norm norm, tf_tensor **out) {
    static const char fn[] = "tf_fft";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (!inexact(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: takes floating-point or complex tensors (got %s)", fn, tf_dtype_name(x->dtype));
    fft_call c = {.fn = fn, .kind = KIND_C2C};
    tf_status s = check_axes(&c, x, n_axes, axes);
    if (s == TF_OK) s = transform(&c, x, inverse, norm, out);
    if (s == TF_OK) s = tf__grad_no_rule(fn, 1, &x, out);
    return tf__in(fn, s);
}

tf_status tf_rfft(const tf_tensor *x, int n_axes, const int *axes, tf_fft_norm norm, tf_tensor **out) {
    static const char fn[] = "tf_rfft";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (!tf_dtype_is_float(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: takes real floating-point tensors (got %s)", fn, tf_dtype_name(x->dtype));
    fft_call c = {.fn = fn, .kind = KIND_R2C};
    tf_status s = check_axes(&c, x, n_axes, axes);
    if (s == TF_OK) {
        int last = c.axes[n_axes - 1];
        c.out_shape[last] = c.in_shape[last] / 2 + 1;
        s = transform(&c, x, false, norm, out);
    }
    if (s == TF_OK) s = tf__grad_no_rule(fn, 1, &x, out);
    return tf__in(fn, s);
}

tf_status tf_irfft(const tf_tensor *x, int n_axes, const int *axes, int64_t last_length, tf_fft_norm norm,
                   tf_tensor **out) {
    static const char fn[] = "tf_irfft";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (!inexact(x->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: takes complex or floating-point tensors (got %s)", fn,
                         tf_dtype_name(x->dtype));
    fft_call c = {.fn = fn, .kind = KIND_C2R};
    tf_status s = check_axes(&c, x, n_axes, axes);
    if (s == TF_OK) {
        int last = c.axes[n_axes - 1];
        if (last_length < 1 || last_length / 2 + 1 != c.in_shape[last])
            s = tf__error(TF_ERR_SHAPE, "%s: an output of %lld points along axis %d needs %lld input points there "
                          "(got %lld: trim or pad the input first)", fn, (long long)last_length, last,
                          (long long)(last_length < 1 ? 1 : last_length / 2 + 1), (long long)c.in_shape[last]);
        else {
            c.out_shape[last] = last_length;
            s = transform(&c, x, true, norm, out);
        }
    }
    if (s == TF_OK) s = tf__grad_no_rule(fn, 1, &x, out);
    return tf__in(fn, s);
}
