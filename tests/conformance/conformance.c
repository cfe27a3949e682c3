/* Conformance: every op of the op table, every dtype it accepts, on every
 * device present, against a float64 reference computed here on the host.
 *
 * Inputs are fresh random values each run (seed printed; TF_TEST_SEED
 * repeats a run), laid out contiguous, strided (every other element) or
 * transposed; shapes include broadcasting, size-0, size-1 and odd sizes.
 * Outputs are poisoned before each kernel. Float outputs must meet
 * NMSE <= nmse_k * eps^2 from the op table; integer and bool outputs must
 * match exactly. The dtype codecs here are written independently of the
 * library's. A device that runs zero cases fails.
 *
 * usage: conformance [--device NAME]... [--no-fallback BACKEND]... [--op NAME]...
 *        (default: every device, every op)
 */
#define _GNU_SOURCE   /* M_PI */
#include <math.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tensorframe/numerics.h>   /* the Philox spec, for the rand reference */
#include <tensorframe/tensorframe.h>

#include "mybackend.h"
#include "conformance_complex.h"
#include "formulas.h"               /* generated: which ops have a tf_NAME made from a formula */

/* ---- the op table, as this suite reads it ---- */

typedef enum {
    SH_BROADCAST, SH_MATMUL, SH_REDUCE, SH_SAME, SH_UNARY, SH_WHERE, SH_SCAN, SH_INDEXED, SH_TRIANGLE, SH_GEMM,
    SH_ROW, SH_ROPE, SH_ATTENTION, SH_CONV, SH_POOL, SH_OPTIMIZER, SH_COMPOSITE, SH_CREATE, SH_QMATMUL,
    SH_GEMM_EPILOGUE, SH_ADD_NORM, SH_QMATMUL_EPILOGUE, SH_SORT, SH_SEARCH, SH_CONV_GRAD, SH_POOL_GRAD, SH_ATTENTION_GRAD, SH_NORM_GRAD
} shape_rule;
typedef enum {
    DR_PROMOTE, DR_PROMOTE_FLOAT, DR_SUM, DR_SAME, DR_CAST, DR_COMPARE, DR_LOGICAL, DR_BOOL, DR_INDEX, DR_FIRST,
    DR_REAL
} dtype_rule;
typedef enum {
    DOM_ANY, DOM_NONZERO, DOM_POW, DOM_WIDE, DOM_POSITIVE, DOM_TIES, DOM_SPECIAL, DOM_NEAR_ONE, DOM_UNIT, DOM_GE_ONE,
    DOM_SIGNS, DOM_SHIFT, DOM_ORDER
} domain;
/* The real dtypes each accepts set holds; the complex ones (CALL, CNUMERIC,
 * CFLOAT, COMPLEX) are checked apart, in conformance_complex.c. */
enum { ACC_ALL = 0x1ff, ACC_NUMERIC = 0x0ff, ACC_FLOAT = 0x00f, ACC_INTEGER = 0x0f0, ACC_COMPLEX = 0,
       ACC_CALL = ACC_ALL, ACC_CNUMERIC = ACC_NUMERIC, ACC_CFLOAT = ACC_FLOAT };

typedef struct op_row {
    tf_op_kind kind;
    const char *name;
    int arity;
    shape_rule shape;
    dtype_rule dtype;
    unsigned accepts;
    domain dom;
    double nmse_k;
} op_row;

static const op_row op_table[] = {
#define ROW(E, n, ar, sh, dt, acc, dom, k, kern) {TF_OP_##E, #n, ar, SH_##sh, DR_##dt, ACC_##acc, DOM_##dom, k},
    TF_OP_LIST(ROW)
#undef ROW
};

/* ---- random numbers for inputs (xorshift; seeded per run) ---- */

static uint64_t rng_state;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53; }
static int64_t randint(int64_t lo, int64_t hi) { return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1)); }

/* ---- dtype codecs, independent of the library ---- */

static bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }
static bool is_int(tf_dtype dt) { return dt == TF_I8 || dt == TF_I32 || dt == TF_I64 || dt == TF_U8; }

/* Smallest normal number: below it a dtype has no relative precision left,
 * and GPUs may flush such values to zero. */
static double min_normal_of(tf_dtype dt) {
    switch (dt) {
    case TF_F64: return DBL_MIN;
    case TF_F16: return 0x1p-14;
    default: return FLT_MIN;                  /* f32 and bf16 */
    }
}

static double eps_of(tf_dtype dt) {
    switch (dt) {
    case TF_F64: return 0x1p-52;
    case TF_F16: return 0x1p-10;
    case TF_BF16: return 0x1p-7;
    default: return 0x1p-23;
    }
}

/* Round v to a binary format with `bits` significant bits, smallest normal
 * exponent emin, largest finite value max (round half to even). */
static double quantize_format(double v, int bits, int emin, double max) {
    if (v == 0 || !isfinite(v)) return v;
    int e;
    frexp(v, &e);
    int lead = e - 1 < emin ? emin : e - 1;
    double step = ldexp(1.0, lead - (bits - 1));
    double q = rint(v / step) * step;
    return fabs(q) > max ? copysign(INFINITY, v) : q;
}

static double quantize(tf_dtype dt, double v) {
    switch (dt) {
    case TF_F32: return (double)(float)v;
    case TF_F16: return quantize_format(v, 11, -14, 65504.0);
    case TF_BF16: return quantize_format(v, 8, -126, 0x1.fep127);
    default: return v;
    }
}

static uint16_t encode_f16(double q) {
    uint16_t sign = signbit(q) ? 0x8000 : 0;
    double a = fabs(q);
    if (isnan(a)) return sign | 0x7e00;
    if (isinf(a)) return sign | 0x7c00;
    if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24);
    int e;
    frexp(a, &e);
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((a / ldexp(1.0, e - 1) - 1.0) * 1024.0);
}

static double decode_f16(uint16_t h) {
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(1024 + man, exp - 25);
    return (h & 0x8000) ? -v : v;
}

static double wrap_int(tf_dtype dt, int64_t v) {
    switch (dt) {
    case TF_I8: return (double)(int8_t)(uint8_t)v;
    case TF_I32: return (double)(int32_t)(uint32_t)v;
    case TF_U8: return (double)(uint8_t)v;
    default: return (double)v;
    }
}

static void encode(tf_dtype dt, double v, unsigned char *p) {
    switch (dt) {
    case TF_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case TF_F64: memcpy(p, &v, 8); break;
    case TF_F16: { uint16_t h = encode_f16(quantize(dt, v)); memcpy(p, &h, 2); break; }
    case TF_BF16: { float f = (float)quantize(dt, v); uint32_t u; memcpy(&u, &f, 4); uint16_t b = (uint16_t)(u >> 16); memcpy(p, &b, 2); break; }
    case TF_I8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case TF_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case TF_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case TF_U8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case TF_BOOL: p[0] = v != 0; break;
    default: break;
    }
}

static double decode(tf_dtype dt, const unsigned char *p) {
    switch (dt) {
    case TF_F32: { float f; memcpy(&f, p, 4); return f; }
    case TF_F64: { double d; memcpy(&d, p, 8); return d; }
    case TF_F16: { uint16_t h; memcpy(&h, p, 2); return decode_f16(h); }
    case TF_BF16: { uint16_t b; memcpy(&b, p, 2); uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
    case TF_I8: { int8_t x; memcpy(&x, p, 1); return x; }
    case TF_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case TF_I64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case TF_U8: return p[0];
    case TF_BOOL: return p[0] ? 1.0 : 0.0;
    default: return NAN;
    }
}

/* The library's documented conversion of a value to dtype dt. */
static double convert(tf_dtype dt, double v, bool from_float) {
    if (dt == TF_BOOL) return v != 0;
    if (is_float(dt)) return quantize(dt, v);
    if (!from_float) return wrap_int(dt, (int64_t)v);
    if (isnan(v)) return 0;
    double lo = dt == TF_I8 ? -128 : dt == TF_I32 ? -2147483648.0 : dt == TF_U8 ? 0 : -0x1p63;
    double hi = dt == TF_I8 ? 127 : dt == TF_I32 ? 2147483647.0 : dt == TF_U8 ? 255 : 0x1p63;
    return v <= lo ? lo : v >= hi ? hi : trunc(v);
}

/* ---- host tensors and their device twins ---- */

/* strided: every other element, starting from the second (a nonzero offset) */
typedef enum { LAYOUT_CONTIG, LAYOUT_STRIDED, LAYOUT_TRANSPOSED } layout;
static const char *const layout_names[] = {"contig", "strided", "transposed"};

typedef struct host_t {
    tf_dtype dt;
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t n;
    double *v;                 /* logical values, row-major */
    int64_t length;            /* reduction length behind each value (1 if none) */
    double *mag;               /* summing ops: sum of |terms| per value (NULL if none) */
    bool wide_acc;             /* the length's error is at f32's precision for 16-bit dtypes
                                  (every backend accumulates them in f32), plus one rounding
                                  to the dtype: limit k * (eps^2 + eps_acc^2 * length) */
    bool signed_zeros;         /* an exact op whose zeros' signs are checked too (copysign) */
    double extra_nmse;         /* added to the limit: error the op may add by design
                                  (a product's 8-bit activations) */
} host_t;

static int64_t numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static double draw(tf_dtype dt, domain dom, int input) {
    bool fl = is_float(dt);
    if (dt == TF_BOOL) return (double)randint(0, 1);
    switch (dom) {
    case DOM_NONZERO:
        if (input == 1) return (dt == TF_U8 || randint(0, 1) ? 1 : -1) * (fl ? uniform(0.5, 2) : (double)randint(1, 9));
        break;
    case DOM_POW:
        if (input == 0) return fl ? uniform(0.1, 2) : (double)randint(dt == TF_U8 ? 0 : -3, 4);
        return fl ? uniform(-2, 2) : (double)randint(0, 3);
    case DOM_TIES: {                             /* few values, so that equality happens */
        static const double vals[5] = {-1, -0.5, 0, 0.5, 1};
        return fl ? vals[randint(0, 4)] : (double)randint(dt == TF_U8 ? 0 : -1, 2);
    }
    case DOM_SPECIAL:
        if (fl && randint(0, 3) == 0) {
            static const double vals[3] = {NAN, INFINITY, -INFINITY};
            return vals[randint(0, 2)];
        }
        break;
    case DOM_POSITIVE:
        return fl ? uniform(0.05, 4) : (double)randint(1, 20);
    case DOM_NEAR_ONE:
        return fl ? uniform(0.9, 1.1) : (double)randint(dt == TF_U8 ? 1 : -1, 2);
    case DOM_UNIT:                               /* acos, asin, atanh: inside (-1, 1), away from the poles */
        return fl ? uniform(-0.97, 0.97) : 0;
    case DOM_GE_ONE:                             /* acosh */
        return fl ? uniform(1, 4) : 1;
    case DOM_SHIFT:                              /* shifts: the values as WIDE, counts past every width and negative */
        if (input == 1) return (double)randint(dt == TF_U8 ? 0 : -2, 70);
        return dt == TF_U8 ? (double)randint(0, 255) : dt == TF_I8 ? (double)randint(-128, 127)
                                                     : (double)randint(-100000, 100000);
    case DOM_SIGNS:                              /* copysign: signed zeros, NaN and infinities among the values */
        if (fl && randint(0, 3) == 0) {
            static const double vals[5] = {0.0, -0.0, INFINITY, -INFINITY, NAN};
            return vals[randint(0, 4)];
        }
        break;
    case DOM_ORDER: {                            /* sorting: ties, and for floats NaN, infinities, zeros of both signs */
        static const double vals[9] = {-1, -0.5, 0.5, 1, 0.0, -0.0, NAN, INFINITY, -INFINITY};
        if (fl) return vals[randint(0, randint(0, 3) ? 3 : 8)];
        if (dt == TF_U8) return (double)randint(0, 3) * (randint(0, 5) ? 1 : 60);
        return (double)randint(-2, 2) * (randint(0, 5) ? 1 : (dt == TF_I8 ? 60 : 3000000000.0 / (dt == TF_I32 ? 3 : 1)));
    }
    case DOM_WIDE:
        if (fl) return dt == TF_F16 ? uniform(-3e4, 3e4) : uniform(-1e5, 1e5) * (randint(0, 3) ? 1e-3 : 1.0);
        return dt == TF_U8 ? (double)randint(0, 255) : dt == TF_I8 ? (double)randint(-128, 127) : (double)randint(-100000, 100000);
    default: break;
    }
    if (fl) return uniform(-2, 2);
    return dt == TF_U8 ? (double)randint(0, 40) : (double)randint(-20, 20);
}

static void host_init(host_t *h, tf_dtype dt, int ndim, const int64_t *shape) {
    h->dt = dt;
    h->ndim = ndim;
    if (ndim) memcpy(h->shape, shape, sizeof(int64_t) * (size_t)ndim);
    h->n = numel(ndim, shape);
    h->length = 1;
    h->mag = NULL;
    h->wide_acc = false;
    h->extra_nmse = 0;         /* was left to the stack: a limit of garbage could pass anything */
    h->signed_zeros = false;
    h->v = calloc((size_t)(h->n ? h->n : 1), sizeof(double));
}

/* Unravel flat row-major index i of `shape`. */
static void unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? i % shape[d] : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
}

/* Random host values and a device tensor holding them in layout `lay`. */
static tf_status make_input(tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape, domain dom, int input,
                            layout lay, host_t *h, tf_tensor **out) {
    host_init(h, dt, ndim, shape);
    for (int64_t i = 0; i < h->n; i++) h->v[i] = quantize(dt, draw(dt, dom, input));
    if (ndim == 0) lay = LAYOUT_CONTIG;
    int64_t pshape[TF_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        pshape[d] = lay == LAYOUT_TRANSPOSED ? shape[ndim - 1 - d] : shape[d];
    if (lay == LAYOUT_STRIDED) pshape[ndim - 1] *= 2;
    int64_t pn = numel(ndim, pshape);
    size_t es = tf_dtype_size(dt);
    unsigned char *bytes = malloc((size_t)(pn ? pn : 1) * es);
    for (int64_t i = 0; i < pn; i++) encode(dt, quantize(dt, draw(dt, dom, input)), bytes + i * es); /* gaps */
    int64_t idx[TF_MAX_DIMS], pidx[TF_MAX_DIMS];
    for (int64_t i = 0; i < h->n; i++) {
        unravel(i, ndim, shape, idx);
        for (int d = 0; d < ndim; d++) pidx[d] = lay == LAYOUT_TRANSPOSED ? idx[ndim - 1 - d] : idx[d];
        if (lay == LAYOUT_STRIDED) pidx[ndim - 1] = 2 * pidx[ndim - 1] + 1;   /* odd positions: a nonzero offset */
        int64_t p = 0;
        for (int d = 0; d < ndim; d++) p = p * pshape[d] + pidx[d];
        encode(dt, h->v[i], bytes + p * es);
    }
    tf_tensor *parent;
    tf_status s = tf_tensor_from_data(dev, dt, ndim, pshape, bytes, &parent);
    free(bytes);
    if (s != TF_OK) return s;
    if (lay == LAYOUT_CONTIG) {
        *out = parent;
        return TF_OK;
    }
    if (lay == LAYOUT_STRIDED) s = tf_slice(parent, -1, 1, pshape[ndim - 1], 2, out);
    else {
        int perm[TF_MAX_DIMS];
        for (int d = 0; d < ndim; d++) perm[d] = ndim - 1 - d;
        s = tf_permute(parent, perm, out);
    }
    tf_tensor_release(parent);
    return s;
}

/* ---- references ---- */

/* float64 references of the unary ops, as documented in tensorframe.h */
static double ref_unary(tf_op_kind k, double x, double alpha, double lo, double hi) {
    switch (k) {
    case TF_OP_NEG: return -x;
    case TF_OP_ABS: return fabs(x);
    case TF_OP_SIGN: return (x > 0) - (x < 0);   /* PyTorch: NaN gives 0 */
    case TF_OP_EXP: return exp(x);
    case TF_OP_LOG: return log(x);
    case TF_OP_LOG1P: return log1p(x);
    case TF_OP_EXPM1: return expm1(x);
    case TF_OP_SQRT: return sqrt(x);
    case TF_OP_RSQRT: return 1 / sqrt(x);
    case TF_OP_SIN: return sin(x);
    case TF_OP_COS: return cos(x);
    case TF_OP_TANH: return tanh(x);
    case TF_OP_SIGMOID: return 1 / (1 + exp(-x));
    case TF_OP_RELU: return x < 0 ? 0 : x;
    case TF_OP_LEAKY_RELU: return x < 0 ? alpha * x : x;
    case TF_OP_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case TF_OP_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case TF_OP_SILU: return x / (1 + exp(-x));
    case TF_OP_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case TF_OP_FLOOR: return floor(x);
    case TF_OP_CEIL: return ceil(x);
    case TF_OP_ROUND: return nearbyint(x);
    case TF_OP_CLAMP: return isnan(x) ? x : fmin(fmax(x, lo), hi);
    case TF_OP_LOGICAL_NOT: return x == 0;
    case TF_OP_ISNAN: return isnan(x) != 0;
    case TF_OP_ISINF: return isinf(x) != 0;
    case TF_OP_ACOS: return acos(x);
    case TF_OP_ASIN: return asin(x);
    case TF_OP_ATAN: return atan(x);
    case TF_OP_ACOSH: return acosh(x);
    case TF_OP_ASINH: return asinh(x);
    case TF_OP_ATANH: return atanh(x);
    default: return NAN;
    }
}

/* The op's public function: those the formulas make (the generated list
 * names them; the formulas themselves are not used here), then the rest. */
static tf_status run_unary_op(tf_op_kind k, const tf_tensor *x, double alpha, double lo, double hi, tf_tensor **out) {
#define CALL_UNARY(E, name) case TF_OP_##E: return tf_##name(x, out);
    switch (k) {
    TF_FORMULA_UNARY_API(CALL_UNARY)
    TF_FORMULA_UNARY_API_F32(CALL_UNARY)
    case TF_OP_LEAKY_RELU: return tf_leaky_relu(x, alpha, out);
    case TF_OP_CLAMP: return tf_clamp(x, lo, hi, out);
    case TF_OP_LOGICAL_NOT: return tf_logical_not(x, out);
    case TF_OP_ISNAN: return tf_isnan(x, out);
    case TF_OP_ISINF: return tf_isinf(x, out);
    default: return TF_ERR_UNSUPPORTED;
    }
#undef CALL_UNARY
}

/* A reduction of n values (row-major over the reduced axes); *mag, when
 * given, gets the size of the terms for summing ops. */
static double ref_reduce(tf_op_kind k, tf_dtype out, const double *v, int64_t n, int64_t correction, double *mag) {
    bool integral = is_int(out);
    switch (k) {
    case TF_OP_SUM: case TF_OP_MEAN: {
        long double acc = 0, m = 0;
        int64_t iacc = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += v[i];
            m += fabs(v[i]);
            iacc = (int64_t)((uint64_t)iacc + (uint64_t)(int64_t)v[i]);
        }
        if (mag) *mag = (double)(k == TF_OP_MEAN && n ? m / n : m);
        if (integral) return (double)iacc;
        return k == TF_OP_MEAN ? (n ? (double)(acc / n) : NAN) : (double)acc;
    }
    case TF_OP_PROD: {
        long double acc = 1;
        uint64_t iacc = 1;
        for (int64_t i = 0; i < n; i++) {
            acc *= v[i];
            iacc *= (uint64_t)(int64_t)v[i];
        }
        if (mag) *mag = fabs((double)acc);
        return integral ? (double)(int64_t)iacc : (double)acc;
    }
    case TF_OP_MAX: case TF_OP_MIN: case TF_OP_ARGMAX: case TF_OP_ARGMIN: {
        bool want_max = k == TF_OP_MAX || k == TF_OP_ARGMAX;
        int64_t best = 0;
        for (int64_t i = 1; i < n && !isnan(v[best]); i++)
            if (isnan(v[i]) || (want_max ? v[i] > v[best] : v[i] < v[best])) best = i;
        return (k == TF_OP_MAX || k == TF_OP_MIN) ? v[best] : (double)best;
    }
    case TF_OP_LOGSUMEXP: {
        double m = -INFINITY;
        for (int64_t i = 0; i < n; i++) m = isnan(v[i]) ? v[i] : fmax(m, v[i]);
        if (isnan(m) || isinf(m)) return m;
        long double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += expl((long double)v[i] - m);
        return (double)(m + logl(acc));
    }
    default: {                                   /* VAR, STD */
        long double mean = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) mean += v[i];
        mean = n ? mean / n : NAN;
        for (int64_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
        double div = (double)(n - correction);
        double var = div > 0 ? (double)(ss / div) : (ss == 0 || isnan((double)ss)) ? NAN : INFINITY;
        return k == TF_OP_STD ? sqrt(var) : var;
    }
    }
}

static tf_status run_reduce_op(tf_op_kind k, const tf_tensor *t, int axis, bool keep, int64_t correction, tf_tensor **out) {
    switch (k) {
    case TF_OP_SUM: return tf_sum(t, axis, keep, out);
    case TF_OP_MEAN: return tf_mean(t, axis, keep, out);
    case TF_OP_MAX: return tf_max(t, axis, keep, out);
    case TF_OP_MIN: return tf_min(t, axis, keep, out);
    case TF_OP_ARGMAX: return tf_argmax(t, axis, keep, out);
    case TF_OP_ARGMIN: return tf_argmin(t, axis, keep, out);
    case TF_OP_PROD: return tf_prod(t, axis, keep, out);
    case TF_OP_VAR: return tf_var(t, axis, correction, keep, out);
    case TF_OP_STD: return tf_std(t, axis, correction, keep, out);
    case TF_OP_LOGSUMEXP: return tf_logsumexp(t, axis, keep, out);
    default: return TF_ERR_UNSUPPORTED;
    }
}

static int64_t int_pow(int64_t b, int64_t e) {
    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1;
    for (int64_t i = 0; i < e; i++) r *= (uint64_t)b;
    return (int64_t)r;
}

/* The activations' gradients are sums of two terms that cancel where the
 * derivative crosses zero (gelu's at x = -0.75, silu's at -1.28): a float
 * evaluation's error there is the terms' rounding, not a fraction of the
 * tiny result, so they are judged against the size of their terms, as the
 * summing ops are (a one-element case near -0.75 failed at NMSE 8.7e-12
 * on opencl:0, 2.4 times its relative bound). */
static bool activation_grad(tf_op_kind k) {
    return k == TF_OP_GELU_GRAD || k == TF_OP_GELU_TANH_GRAD || k == TF_OP_SILU_GRAD;
}

static double activation_grad_terms(tf_op_kind k, double x, double y) {
    switch (k) {
    case TF_OP_GELU_GRAD: return fabs(y) * (0.5 * erfc(-x / sqrt(2.0)) + fabs(x) * exp(-0.5 * x * x) / sqrt(2 * M_PI));
    case TF_OP_GELU_TANH_GRAD: {
        const double c = 0.79788456080286535588, t = tanh(c * (x + 0.044715 * x * x * x));
        return fabs(y) * (0.5 * (1 + t) + fabs(0.5 * x * (1 - t * t) * c * (1 + 0.134145 * x * x)));
    }
    case TF_OP_SILU_GRAD: {
        const double sg = 1 / (1 + exp(-x));
        return fabs(y) * sg * (1 + fabs(x) * (1 - sg));
    }
    default: return 0;
    }
}

static double ref_binary(tf_op_kind k, tf_dtype out, double x, double y) {
    if (is_int(out)) {
        int64_t a = (int64_t)x, b = (int64_t)y, r = 0;
        switch (k) {
        case TF_OP_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break;
        case TF_OP_SUB: r = (int64_t)((uint64_t)a - (uint64_t)b); break;
        case TF_OP_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
        case TF_OP_MAXIMUM: r = a > b ? a : b; break;
        case TF_OP_MINIMUM: r = a < b ? a : b; break;
        case TF_OP_POW: r = int_pow(a, b); break;
        case TF_OP_BITWISE_AND: r = a & b; break;
        case TF_OP_BITWISE_OR: r = a | b; break;
        case TF_OP_BITWISE_XOR: r = a ^ b; break;
        case TF_OP_LEFT_SHIFT: r = b < 0 || b > 63 ? 0 : (int64_t)((uint64_t)a << b); break;
        case TF_OP_RIGHT_SHIFT: r = b < 0 || b > 63 ? (a < 0 ? -1 : 0) : a >> b; break;
        default: break;
        }
        return wrap_int(out, r);
    }
    switch (k) {
    case TF_OP_ADD: return x + y;
    case TF_OP_SUB: return x - y;
    case TF_OP_MUL: return x * y;
    case TF_OP_DIV: return x / y;
    case TF_OP_MAXIMUM: return isnan(x) || isnan(y) ? NAN : fmax(x, y);
    case TF_OP_MINIMUM: return isnan(x) || isnan(y) ? NAN : fmin(x, y);
    case TF_OP_POW: return pow(x, y);
    case TF_OP_SWIGLU: return x / (1 + exp(-x)) * y;
    case TF_OP_GELU_GRAD: return y * (0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI));
    case TF_OP_GELU_TANH_GRAD: {
        const double c = sqrt(2 / M_PI), t = tanh(c * (x + 0.044715 * x * x * x));
        return y * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x));
    }
    case TF_OP_SILU_GRAD: {
        const double sg = 1 / (1 + exp(-x));
        return y * sg * (1 + x * (1 - sg));
    }
    case TF_OP_RELU_GRAD: return x > 0 ? y : 0;
    case TF_OP_ATAN2: return atan2(x, y);
    case TF_OP_COPYSIGN: return copysign(x, y);
    default: return NAN;
    }
}

/* Comparisons and logic: 0 or 1. */
static double ref_bool_binary(tf_op_kind k, double x, double y) {
    switch (k) {
    case TF_OP_EQ: return x == y;
    case TF_OP_NE: return x != y;
    case TF_OP_LT: return x < y;
    case TF_OP_LE: return x <= y;
    case TF_OP_GT: return x > y;
    case TF_OP_GE: return x >= y;
    case TF_OP_LOGICAL_AND: return x != 0 && y != 0;
    default: return x != 0 || y != 0;            /* LOGICAL_OR */
    }
}

/* Flat index into `h` for output index oidx (right-aligned broadcasting). */
static int64_t broadcast_index(const host_t *h, int ondim, const int64_t *oidx) {
    int64_t p = 0;
    for (int d = 0; d < h->ndim; d++) {
        int od = ondim - h->ndim + d;
        p = p * h->shape[d] + (h->shape[d] == 1 ? 0 : oidx[od]);
    }
    return p;
}

/* ---- comparison ---- */

/* complex_fallbacks: ops of the complex dtypes that ran on the CPU, which
 * every device but the CPU leaves to it today (the core's fallback).
 * quantized_fallbacks: ops of the quantized dtypes that ran on the CPU,
 * which --no-fallback allows on a device whose caps leave those dtypes out
 * (a user's backend; opencl and cuda run them). */
typedef struct counts {
    int passed, failed;
    uint64_t quantized_fallbacks, complex_fallbacks, backward_fallbacks;
    double complex_seconds;
} counts;

static bool compare(const host_t *ref, tf_dtype dt, const unsigned char *got, double k, char *why, size_t n) {
    /* summing ops: rounding error grows with the reduction length */
    size_t es = tf_dtype_size(dt);
    double num = 0, den = 0;
    for (int64_t i = 0; i < ref->n; i++) {
        double g = decode(dt, got + i * es), r = ref->v[i];
        if (isnan(r) || isnan(g)) {
            if (isnan(r) && isnan(g)) continue;
            snprintf(why, n, "element %lld: got %g, expected %g", (long long)i, g, r);
            return false;
        }
        if (!is_float(dt) || k == 0) {
            if (g != r || (ref->signed_zeros && !signbit(g) != !signbit(r))) {
                snprintf(why, n, "element %lld: got %.17g, expected %.17g", (long long)i, g, r);
                return false;
            }
            continue;
        }
        if (fabs(r) < min_normal_of(dt) && fabs(g - r) <= min_normal_of(dt)) continue;   /* subnormal results */
        if (isinf(r) || isinf(g)) {
            if (g != r) {
                snprintf(why, n, "element %lld: got %g, expected %g", (long long)i, g, r);
                return false;
            }
            continue;
        }
        /* Summing ops are judged against the size of their terms, so that a
         * sum that cancels to near zero is not held to a relative bound. */
        double scale = ref->mag ? fmax(fabs(r), ref->mag[i]) : r;
        num += (g - r) * (g - r);
        den += scale * scale;
    }
    double len = ref->length > 1 ? (double)ref->length : 1.0, eps = eps_of(dt);
    double eps_acc = ref->wide_acc && (dt == TF_F16 || dt == TF_BF16) ? eps_of(TF_F32) : eps;
    double nmse = den > 0 ? num / den : num,
           limit = ref->wide_acc ? k * (eps * eps + eps_acc * eps_acc * len) : k * eps * eps * len;
    limit += ref->extra_nmse;
    if (nmse > limit) {
        snprintf(why, n, "NMSE %.3g exceeds %.3g", nmse, limit);
        return false;
    }
    return true;
}

/* Read `out`, check dtype and shape, compare with ref; records the result. */
static void check_case(const char *dev, const op_row *op, const char *desc, tf_status st, const tf_tensor *out,
                       const host_t *ref, counts *c) {
    char why[512] = "";
    bool ok = false;
    if (st != TF_OK) snprintf(why, sizeof why, "returned %s: %s", tf_status_name(st), tf_last_error());
    else if (tf_tensor_dtype(out) != ref->dt)
        snprintf(why, sizeof why, "dtype %s, expected %s", tf_dtype_name(tf_tensor_dtype(out)), tf_dtype_name(ref->dt));
    else if (tf_tensor_ndim(out) != ref->ndim || memcmp(tf_tensor_shape(out), ref->shape, sizeof(int64_t) * (size_t)ref->ndim))
        snprintf(why, sizeof why, "wrong shape (ndim %d, expected %d)", tf_tensor_ndim(out), ref->ndim);
    else {
        size_t bytes = (size_t)(ref->n ? ref->n : 1) * tf_dtype_size(ref->dt);
        unsigned char *got = malloc(bytes);
        tf_status rs = tf_tensor_read(out, got, bytes);
        if (rs != TF_OK) snprintf(why, sizeof why, "read failed: %s", tf_last_error());
        else ok = compare(ref, ref->dt, got, op->nmse_k, why, sizeof why);
        free(got);
    }
    if (ok) c->passed++;
    else {
        c->failed++;
        printf("FAIL %s %s %s: %s\n", dev, op->name, desc, why);
    }
}

static void host_free(host_t *h) {
    free(h->v);
    free(h->mag);
    h->v = h->mag = NULL;
}

/* ---- cases per shape rule ---- */

typedef struct shape_case {
    int na;
    int64_t a[4];
    int nb;
    int64_t b[4];
    layout la, lb;
} shape_case;

static const shape_case broadcast_cases[] = {
    {2, {7, 5}, 2, {7, 5}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {2, {6, 10}, 2, {6, 10}, LAYOUT_CONTIG, LAYOUT_CONTIG},      /* a multiple of 4: vector kernels */
    {2, {7, 5}, 2, {7, 5}, LAYOUT_STRIDED, LAYOUT_TRANSPOSED},
    {3, {3, 1, 5}, 2, {4, 5}, LAYOUT_CONTIG, LAYOUT_STRIDED},
    {0, {0}, 2, {6, 3}, LAYOUT_CONTIG, LAYOUT_TRANSPOSED},
    {2, {0, 3}, 2, {1, 3}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {1, {1}, 1, {1}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {1, {1031}, 1, {1031}, LAYOUT_STRIDED, LAYOUT_CONTIG},
    {4, {2, 3, 4, 5}, 3, {3, 1, 5}, LAYOUT_TRANSPOSED, LAYOUT_CONTIG},
};

static const shape_case matmul_cases[] = {
    {2, {5, 7}, 2, {7, 3}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {1, {7}, 2, {7, 3}, LAYOUT_CONTIG, LAYOUT_TRANSPOSED},
    {2, {5, 7}, 1, {7}, LAYOUT_TRANSPOSED, LAYOUT_STRIDED},
    {1, {7}, 1, {7}, LAYOUT_STRIDED, LAYOUT_CONTIG},
    {4, {2, 1, 4, 6}, 3, {3, 6, 5}, LAYOUT_CONTIG, LAYOUT_TRANSPOSED},
    {2, {0, 4}, 2, {4, 3}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {2, {3, 0}, 2, {0, 4}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    {2, {17, 33}, 2, {33, 9}, LAYOUT_STRIDED, LAYOUT_TRANSPOSED},
    {2, {1, 1}, 2, {1, 1}, LAYOUT_CONTIG, LAYOUT_CONTIG},
};

typedef struct reduce_case {
    int n;
    int64_t shape[3];
    int axis;
    layout lay;
} reduce_case;

static const reduce_case reduce_cases[] = {
    {3, {6, 5, 4}, 0, LAYOUT_CONTIG},         {3, {6, 5, 4}, 1, LAYOUT_TRANSPOSED},
    {3, {6, 5, 4}, -1, LAYOUT_STRIDED},       {3, {6, 5, 4}, TF_ALL_AXES, LAYOUT_TRANSPOSED},
    {2, {0, 5}, 0, LAYOUT_CONTIG},            {2, {0, 5}, 1, LAYOUT_CONTIG},
    {2, {0, 5}, TF_ALL_AXES, LAYOUT_CONTIG},  {0, {0}, TF_ALL_AXES, LAYOUT_CONTIG},
    {1, {1031}, TF_ALL_AXES, LAYOUT_STRIDED}, {2, {1, 1}, 0, LAYOUT_CONTIG},
    /* What the GPUs' reduction kernels take: everything or the last axis of
     * contiguous data, with and without 16-byte loads, in one block a row or
     * in parts merged by a second kernel; a middle axis (CUDA: a thread an
     * output), as an encoder's mean pooling over tokens. */
    {1, {20011}, TF_ALL_AXES, LAYOUT_CONTIG}, {2, {16, 1024}, TF_ALL_AXES, LAYOUT_CONTIG},
    {2, {3, 4096}, -1, LAYOUT_CONTIG},        {2, {7, 999}, 1, LAYOUT_CONTIG},
    {2, {2, 40000}, 1, LAYOUT_CONTIG},        {3, {8, 40, 96}, 1, LAYOUT_CONTIG},
};

static tf_status run_binary_op(tf_op_kind k, const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
#define CALL_BINARY(E, name) case TF_OP_##E: return tf_##name(a, b, out);
    switch (k) {
    TF_FORMULA_BINARY_API(CALL_BINARY)
    TF_FORMULA_BINARY_API_F32(CALL_BINARY)
    case TF_OP_EQ: return tf_eq(a, b, out);
    case TF_OP_NE: return tf_ne(a, b, out);
    case TF_OP_LT: return tf_lt(a, b, out);
    case TF_OP_LE: return tf_le(a, b, out);
    case TF_OP_GT: return tf_gt(a, b, out);
    case TF_OP_GE: return tf_ge(a, b, out);
    case TF_OP_LOGICAL_AND: return tf_logical_and(a, b, out);
    case TF_OP_LOGICAL_OR: return tf_logical_or(a, b, out);
    case TF_OP_MATMUL: return tf_matmul(a, b, out);
    default: return TF_ERR_UNSUPPORTED;
    }
#undef CALL_BINARY
}

static tf_dtype result_dtype(const op_row *op, tf_dtype in) {
    if (op->dtype == DR_COMPARE || op->dtype == DR_LOGICAL || op->dtype == DR_BOOL) return TF_BOOL;
    if (op->dtype == DR_INDEX) return TF_I64;
    if (op->dtype == DR_PROMOTE_FLOAT && !is_float(in)) return TF_F32;
    if (op->dtype == DR_SUM && !is_float(in)) return TF_I64;
    return in;
}

static void desc_of(char *buf, size_t n, tf_dtype dt, const shape_case *c) {
    snprintf(buf, n, "%s a%d-d(%lld..) %s, b%d-d(%lld..) %s", tf_dtype_name(dt), c->na, (long long)c->a[0],
             layout_names[c->la], c->nb, (long long)c->b[0], layout_names[c->lb]);
}

static void run_pairwise(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool mm = op->shape == SH_MATMUL;
    const shape_case *cases = mm ? matmul_cases : broadcast_cases;
    size_t ncases = mm ? sizeof matmul_cases / sizeof *matmul_cases : sizeof broadcast_cases / sizeof *broadcast_cases;
    tf_dtype out_dt = result_dtype(op, dt);
    for (size_t ci = 0; ci < ncases; ci++) {
        const shape_case *sc = &cases[ci];
        host_t ha, hb, ref;
        tf_tensor *a = NULL, *b = NULL, *out = NULL;
        char desc[256];
        desc_of(desc, sizeof desc, dt, sc);
        tf_status s = make_input(dev, dt, sc->na, sc->a, op->dom, 0, sc->la, &ha, &a);
        if (s == TF_OK) s = make_input(dev, dt, sc->nb, sc->b, op->dom, 1, sc->lb, &hb, &b);
        if (s == TF_OK) s = run_binary_op(op->kind, a, b, &out);
        /* expected result */
        if (!mm) {
            int n = ha.ndim > hb.ndim ? ha.ndim : hb.ndim;
            int64_t shape[TF_MAX_DIMS], idx[TF_MAX_DIMS];
            for (int d = 0; d < n; d++) {
                int ia = ha.ndim - n + d, ib = hb.ndim - n + d;
                int64_t da = ia >= 0 ? ha.shape[ia] : 1, db = ib >= 0 ? hb.shape[ib] : 1;
                shape[d] = da == 1 ? db : da;
            }
            host_init(&ref, out_dt, n, shape);
            ref.signed_zeros = op->kind == TF_OP_COPYSIGN;
            const bool terms = activation_grad(op->kind);
            if (terms) ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
            for (int64_t i = 0; i < ref.n; i++) {
                unravel(i, n, shape, idx);
                double x = ha.v[broadcast_index(&ha, n, idx)], y = hb.v[broadcast_index(&hb, n, idx)];
                ref.v[i] = out_dt == TF_BOOL ? ref_bool_binary(op->kind, x, y) : ref_binary(op->kind, out_dt, x, y);
                if (terms) ref.mag[i] = activation_grad_terms(op->kind, x, y);
            }
        } else {
            int64_t m = ha.ndim == 1 ? 1 : ha.shape[ha.ndim - 2], k = ha.shape[ha.ndim - 1];
            int64_t nn = hb.ndim == 1 ? 1 : hb.shape[hb.ndim - 1];
            int nba = ha.ndim > 2 ? ha.ndim - 2 : 0, nbb = hb.ndim > 2 ? hb.ndim - 2 : 0, nbt = nba > nbb ? nba : nbb;
            int64_t shape[TF_MAX_DIMS], full[TF_MAX_DIMS], bidx[TF_MAX_DIMS];
            int n = 0;
            for (int d = 0; d < nbt; d++) {
                int ia = nba - nbt + d, ib = nbb - nbt + d;
                int64_t da = ia >= 0 ? ha.shape[ia] : 1, db = ib >= 0 ? hb.shape[ib] : 1;
                full[d] = shape[n++] = da == 1 ? db : da;
            }
            if (ha.ndim > 1) shape[n++] = m;
            if (hb.ndim > 1) shape[n++] = nn;
            host_init(&ref, out_dt, n, shape);
            ref.length = k;
            ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
            int64_t nbatch = numel(nbt, full);
            for (int64_t bi = 0; bi < nbatch; bi++) {
                unravel(bi, nbt, full, bidx);
                int64_t ao = 0, bo = 0;
                for (int d = 0; d < nba; d++) ao = ao * ha.shape[d] + (ha.shape[d] == 1 ? 0 : bidx[nbt - nba + d]);
                for (int d = 0; d < nbb; d++) bo = bo * hb.shape[d] + (hb.shape[d] == 1 ? 0 : bidx[nbt - nbb + d]);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < nn; j++) {
                        long double acc = 0, mag = 0;
                        int64_t iacc = 0;
                        for (int64_t kk = 0; kk < k; kk++) {
                            double x = ha.v[ao * m * k + i * k + kk], y = hb.v[bo * k * nn + kk * nn + j];
                            if (is_int(out_dt)) iacc = (int64_t)((uint64_t)iacc + (uint64_t)(int64_t)x * (uint64_t)(int64_t)y);
                            else {
                                acc += (long double)x * y;
                                mag += fabsl((long double)x * y);
                            }
                        }
                        ref.v[(bi * m + i) * nn + j] = is_int(out_dt) ? wrap_int(out_dt, iacc) : (double)acc;
                        ref.mag[(bi * m + i) * nn + j] = (double)mag;
                    }
            }
        }
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&ha);
        host_free(&hb);
        host_free(&ref);
        tf_tensor_release(a);
        tf_tensor_release(b);
        tf_tensor_release(out);
    }
}

static void run_reduce(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    for (size_t ci = 0; ci < sizeof reduce_cases / sizeof *reduce_cases; ci++) {
        for (int keep = 0; keep < 2; keep++) {
            const reduce_case *rc = &reduce_cases[ci];
            host_t h, ref;
            tf_tensor *t = NULL, *out = NULL;
            tf_status s = make_input(dev, dt, rc->n, rc->shape, op->dom, 0, rc->lay, &h, &t);
            int64_t correction = randint(0, 2);
            if (s == TF_OK) s = run_reduce_op(op->kind, t, rc->axis, keep, correction, &out);
            int ax = rc->axis == TF_ALL_AXES ? -1 : rc->axis < 0 ? rc->axis + rc->n : rc->axis;
            int64_t kshape[TF_MAX_DIMS], rshape[TF_MAX_DIMS], idx[TF_MAX_DIMS];
            int rn = 0;
            for (int d = 0; d < rc->n; d++) {
                bool red = ax < 0 || d == ax;
                kshape[d] = red ? 1 : rc->shape[d];
                if (!red) rshape[rn++] = rc->shape[d];
            }
            tf_dtype out_dt = result_dtype(op, dt);
            host_init(&ref, out_dt, keep ? rc->n : rn, keep ? kshape : rshape);
            int64_t count = 1;
            for (int d = 0; d < rc->n; d++) count *= (ax < 0 || d == ax) ? rc->shape[d] : 1;
            /* group each output's elements, in row-major order of the reduced axes */
            int64_t kept = ref.n ? ref.n : 1;
            double *grouped = malloc(sizeof(double) * (size_t)(h.n ? h.n : 1));
            int64_t *fill = calloc((size_t)kept, sizeof *fill);
            for (int64_t i = 0; i < h.n; i++) {
                unravel(i, rc->n, rc->shape, idx);
                int64_t o = 0;
                for (int d = 0; d < rc->n; d++) o = o * kshape[d] + ((ax < 0 || d == ax) ? 0 : idx[d]);
                grouped[o * count + fill[o]++] = h.v[i];
            }
            if (op->kind == TF_OP_SUM || op->kind == TF_OP_MEAN || op->kind == TF_OP_PROD || op->kind == TF_OP_CUMSUM)
                ref.mag = calloc((size_t)kept, sizeof(double));
            for (int64_t i = 0; i < ref.n; i++) {
                ref.v[i] = ref_reduce(op->kind, out_dt, grouped + i * count, count, correction, ref.mag ? &ref.mag[i] : NULL);
                if (op->nmse_k == 0) ref.v[i] = quantize(out_dt, ref.v[i]);
            }
            free(grouped);
            free(fill);
            ref.length = count;
            bool expect_error = count == 0 && ref.n > 0 &&
                (op->kind == TF_OP_MAX || op->kind == TF_OP_MIN || op->kind == TF_OP_ARGMAX || op->kind == TF_OP_ARGMIN);
            char desc[160];
            snprintf(desc, sizeof desc, "%s %d-d(%lld..) axis %d keepdim %d %s correction %lld", tf_dtype_name(dt), rc->n,
                     (long long)rc->shape[0], rc->axis, keep, layout_names[rc->lay], (long long)correction);
            if (expect_error) {                  /* no identity: the core must refuse */
                if (s == TF_ERR_SHAPE && !out) c->passed++;
                else {
                    c->failed++;
                    printf("FAIL %s %s %s: expected TF_ERR_SHAPE for an empty reduction, got %s\n", tf_device_name(dev),
                           op->name, desc, tf_status_name(s));
                }
            } else {
                check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
            }
            host_free(&h);
            host_free(&ref);
            tf_tensor_release(t);
            tf_tensor_release(out);
        }
    }
}

static void run_copy(tf_device *dev, const op_row *op, tf_dtype src, counts *c) {
    static const reduce_case shapes[] = {
        {2, {13, 7}, 0, LAYOUT_CONTIG}, {2, {6, 5}, 0, LAYOUT_TRANSPOSED}, {1, {0}, 0, LAYOUT_CONTIG},
        {0, {0}, 0, LAYOUT_CONTIG},     {3, {2, 3, 9}, 0, LAYOUT_STRIDED},
    };
    for (int dst = 0; dst < TF_DTYPE_COUNT; dst++) {
        if (tf_dtype_is_quantized((tf_dtype)dst)) continue;   /* run_quant_casts: whole blocks */
        if (tf_dtype_is_complex((tf_dtype)dst)) continue;     /* conformance_complex.c */
        for (size_t ci = 0; ci < sizeof shapes / sizeof *shapes; ci++) {
            const reduce_case *sc = &shapes[ci];
            host_t h, ref;
            tf_tensor *t = NULL, *out = NULL;
            tf_status s = make_input(dev, src, sc->n, sc->shape, op->dom, 0, sc->lay, &h, &t);
            if (s == TF_OK) s = tf_cast(t, (tf_dtype)dst, &out);
            host_init(&ref, (tf_dtype)dst, sc->n, sc->shape);
            for (int64_t i = 0; i < h.n; i++) ref.v[i] = convert((tf_dtype)dst, h.v[i], is_float(src));
            char desc[128];
            snprintf(desc, sizeof desc, "%s->%s %d-d %s", tf_dtype_name(src), tf_dtype_name((tf_dtype)dst), sc->n,
                     layout_names[sc->lay]);
            check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
            host_free(&h);
            host_free(&ref);
            tf_tensor_release(t);
            tf_tensor_release(out);
        }
    }
}

/* Unary ops: the reference is computed in double on the quantized input and
 * rounded to the output dtype (f16/bf16 ops compute in f32, then round). */
static void run_unary(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const reduce_case shapes[] = {
        {2, {13, 7}, 0, LAYOUT_CONTIG}, {2, {6, 5}, 0, LAYOUT_TRANSPOSED}, {1, {0}, 0, LAYOUT_CONTIG},
        {0, {0}, 0, LAYOUT_CONTIG},     {3, {2, 3, 9}, 0, LAYOUT_STRIDED}, {1, {1031}, 0, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof shapes / sizeof *shapes; ci++) {
        const reduce_case *sc = &shapes[ci];
        double alpha = uniform(0.01, 0.3), lo = uniform(-1.5, -0.5), hi = uniform(0.5, 1.5);
        host_t h, ref;
        tf_tensor *t = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, sc->n, sc->shape, op->dom, 0, sc->lay, &h, &t);
        if (s == TF_OK) s = run_unary_op(op->kind, t, alpha, lo, hi, &out);
        tf_dtype out_dt = result_dtype(op, dt);
        host_init(&ref, out_dt, sc->n, sc->shape);
        for (int64_t i = 0; i < h.n; i++) {
            double r = ref_unary(op->kind, h.v[i], alpha, lo, hi);
            /* exact ops are compared after rounding the reference to the dtype */
            ref.v[i] = op->nmse_k == 0 ? quantize(out_dt, r) : r;
        }
        char desc[128];
        snprintf(desc, sizeof desc, "%s %d-d %s", tf_dtype_name(dt), sc->n, layout_names[sc->lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* where(cond, a, b): three shapes broadcast together, cond drawn as bools. */
static void run_where(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n[3]; int64_t s[3][3]; layout lay[3]; } cases[] = {
        {{2, 2, 2}, {{5, 7}, {5, 7}, {5, 7}}, {LAYOUT_CONTIG, LAYOUT_CONTIG, LAYOUT_CONTIG}},
        {{2, 1, 0}, {{4, 1}, {6}, {0}}, {LAYOUT_TRANSPOSED, LAYOUT_STRIDED, LAYOUT_CONTIG}},
        {{1, 2, 3}, {{5}, {3, 1}, {2, 1, 1}}, {LAYOUT_STRIDED, LAYOUT_TRANSPOSED, LAYOUT_CONTIG}},
        {{2, 2, 2}, {{0, 3}, {1, 3}, {0, 1}}, {LAYOUT_CONTIG, LAYOUT_CONTIG, LAYOUT_CONTIG}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        host_t h[3], ref;
        tf_tensor *t[3] = {NULL, NULL, NULL}, *out = NULL;
        tf_status s = TF_OK;
        for (int k = 0; k < 3; k++) {
            tf_status sk = make_input(dev, k ? dt : TF_BOOL, cases[ci].n[k], cases[ci].s[k], op->dom, k, cases[ci].lay[k], &h[k], &t[k]);
            if (s == TF_OK) s = sk;
        }
        if (s == TF_OK) s = tf_where(t[0], t[1], t[2], &out);
        int n = 0;
        int64_t shape[TF_MAX_DIMS], idx[TF_MAX_DIMS];
        for (int k = 0; k < 3; k++) n = h[k].ndim > n ? h[k].ndim : n;
        for (int d = 0; d < n; d++) {
            shape[d] = 1;
            for (int k = 0; k < 3; k++) {
                int ik = h[k].ndim - n + d;
                if (ik >= 0 && h[k].shape[ik] != 1) shape[d] = h[k].shape[ik];
            }
        }
        host_init(&ref, dt, n, shape);
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, n, shape, idx);
            ref.v[i] = h[0].v[broadcast_index(&h[0], n, idx)] != 0 ? h[1].v[broadcast_index(&h[1], n, idx)]
                                                                      : h[2].v[broadcast_index(&h[2], n, idx)];
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu", tf_dtype_name(dt), ci);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        for (int k = 0; k < 3; k++) {
            host_free(&h[k]);
            tf_tensor_release(t[k]);
        }
        host_free(&ref);
        tf_tensor_release(out);
    }
}

/* cumsum along each axis of a few layouts; the reference runs in long double. */
static void run_scan(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const reduce_case cases[] = {
        {3, {6, 5, 4}, 0, LAYOUT_CONTIG}, {3, {6, 5, 4}, 1, LAYOUT_TRANSPOSED}, {3, {6, 5, 4}, -1, LAYOUT_STRIDED},
        {2, {0, 5}, 0, LAYOUT_CONTIG},    {0, {0}, 0, LAYOUT_CONTIG},            {1, {1031}, 0, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const reduce_case *rc = &cases[ci];
        host_t h, ref;
        tf_tensor *t = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, rc->n, rc->shape, op->dom, 0, rc->lay, &h, &t);
        if (s == TF_OK) s = tf_cumsum(t, rc->axis, &out);
        tf_dtype out_dt = result_dtype(op, dt);
        host_init(&ref, out_dt, rc->n, rc->shape);
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        int ax = rc->n == 0 ? -1 : rc->axis < 0 ? rc->axis + rc->n : rc->axis;
        int64_t len = ax >= 0 ? rc->shape[ax] : 1, step = 1, idx[TF_MAX_DIMS];
        for (int d = ax + 1; d < rc->n; d++) step *= rc->shape[d];
        ref.length = len;
        for (int64_t i = 0; i < h.n; i++) {
            unravel(i, rc->n, rc->shape, idx);
            if (ax >= 0 && idx[ax] != 0) continue;       /* start of a line */
            long double acc = 0, m = 0;
            int64_t iacc = 0;
            for (int64_t j = 0; j < len; j++) {
                int64_t e = i + j * step;
                acc += h.v[e];
                m += fabs(h.v[e]);
                iacc = (int64_t)((uint64_t)iacc + (uint64_t)(int64_t)h.v[e]);
                ref.v[e] = is_int(out_dt) ? (double)iacc : (double)acc;
                ref.mag[e] = (double)m;
            }
        }
        char desc[128];
        snprintf(desc, sizeof desc, "%s %d-d axis %d %s", tf_dtype_name(dt), rc->n, rc->axis, layout_names[rc->lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* ---- sorting and searching ---- */

/* The op table's total order, in float64: NaN after every number. */
static bool sorts_before(double a, double b) { return isnan(b) ? !isnan(a) : a < b; }

/* Stable insertion sort of positions pos[0..n) by values v[pos[i] * step]. */
static void ref_sort_positions(const double *v, int64_t step, int64_t n, bool descending, int64_t *pos) {
    for (int64_t i = 0; i < n; i++) pos[i] = i;
    for (int64_t i = 1; i < n; i++) {
        int64_t x = pos[i], j = i;
        for (; j > 0; j--) {
            double a = v[pos[j - 1] * step], b = v[x * step];
            if (!(descending ? sorts_before(a, b) : sorts_before(b, a))) break;   /* equal: stays behind */
            pos[j] = pos[j - 1];
        }
        pos[j] = x;
    }
}

/* sort / argsort along each axis of a few layouts, both directions. The
 * values' zeros are compared by sign: -0.0 and 0.0 are equal, so a sort
 * that is not stable, or writes a converted value, shows. */
static void run_sort(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const reduce_case cases[] = {
        {3, {6, 5, 4}, 0, LAYOUT_CONTIG}, {3, {6, 5, 4}, 1, LAYOUT_TRANSPOSED}, {3, {6, 5, 4}, -1, LAYOUT_STRIDED},
        {2, {0, 5}, 0, LAYOUT_CONTIG},    {0, {0}, 0, LAYOUT_CONTIG},            {1, {1031}, 0, LAYOUT_CONTIG},
        {2, {3, 200}, -1, LAYOUT_STRIDED},
    };
    for (size_t ci = 0; ci < 2 * sizeof cases / sizeof *cases; ci++) {
        const reduce_case *rc = &cases[ci / 2];
        bool descending = ci % 2;
        host_t h, ref;
        tf_tensor *t = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, rc->n, rc->shape, op->dom, 0, rc->lay, &h, &t);
        if (s == TF_OK) s = (op->kind == TF_OP_SORT ? tf_sort : tf_argsort)(t, rc->axis, descending, &out);
        host_init(&ref, result_dtype(op, dt), rc->n, rc->shape);
        ref.signed_zeros = op->kind == TF_OP_SORT;
        int ax = rc->n == 0 ? -1 : rc->axis < 0 ? rc->axis + rc->n : rc->axis;
        int64_t len = ax >= 0 ? rc->shape[ax] : 1, step = 1, idx[TF_MAX_DIMS];
        for (int d = ax + 1; d < rc->n; d++) step *= rc->shape[d];
        int64_t *pos = malloc(sizeof(int64_t) * (size_t)(len ? len : 1));
        for (int64_t i = 0; i < h.n; i++) {
            unravel(i, rc->n, rc->shape, idx);
            if (ax >= 0 && idx[ax] != 0) continue;       /* start of a line */
            ref_sort_positions(h.v + i, step, len, descending, pos);
            for (int64_t j = 0; j < len; j++)
                ref.v[i + j * step] = op->kind == TF_OP_SORT ? h.v[i + pos[j] * step] : (double)pos[j];
        }
        free(pos);
        char desc[128];
        snprintf(desc, sizeof desc, "%s %d-d axis %d %s%s", tf_dtype_name(dt), rc->n, rc->axis, layout_names[rc->lay],
                 descending ? " descending" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* A 1-d tensor of n values drawn from dom, in the total order; strided: a
 * view of every other element of a longer one. */
static tf_status make_sorted(tf_device *dev, tf_dtype dt, int64_t n, domain dom, bool strided, host_t *h,
                             tf_tensor **out) {
    host_init(h, dt, 1, &n);
    for (int64_t i = 0; i < n; i++) h->v[i] = quantize(dt, draw(dt, dom, 0));
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    double *sorted = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ref_sort_positions(h->v, 1, n, false, pos);
    for (int64_t i = 0; i < n; i++) sorted[i] = h->v[pos[i]];
    memcpy(h->v, sorted, sizeof(double) * (size_t)n);
    free(pos);
    free(sorted);
    int64_t pn = strided ? 2 * n : n;
    size_t es = tf_dtype_size(dt);
    unsigned char *bytes = calloc((size_t)(pn ? pn : 1), es);
    for (int64_t i = 0; i < pn; i++) encode(dt, strided && i % 2 == 0 ? 0.0 : h->v[strided ? i / 2 : i], bytes + i * es);
    tf_tensor *parent;
    tf_status s = tf_tensor_from_data(dev, dt, 1, &pn, bytes, &parent);
    free(bytes);
    if (s != TF_OK || !strided) {
        if (s == TF_OK) *out = parent;
        return s;
    }
    s = tf_slice(parent, 0, 1, pn, 2, out);
    tf_tensor_release(parent);
    return s;
}

/* searchsorted of values of a few shapes and layouts in sorted inputs of a
 * few lengths (none, one, strided, long), both sides. */
static void run_search(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int64_t n; bool strided; reduce_case values; } cases[] = {
        {9, false, {2, {7, 5}, 0, LAYOUT_CONTIG}},       {0, false, {1, {6}, 0, LAYOUT_CONTIG}},
        {1, false, {0, {0}, 0, LAYOUT_CONTIG}},          {33, true, {3, {2, 3, 4}, 0, LAYOUT_TRANSPOSED}},
        {1000, false, {1, {1031}, 0, LAYOUT_STRIDED}},   {40, true, {2, {0, 3}, 0, LAYOUT_CONTIG}},
    };
    for (size_t ci = 0; ci < 2 * sizeof cases / sizeof *cases; ci++) {
        const reduce_case *vc = &cases[ci / 2].values;
        int64_t n = cases[ci / 2].n;
        bool right = ci % 2;
        host_t hs, hv, ref;
        tf_tensor *st = NULL, *vt = NULL, *out = NULL;
        tf_status s = make_sorted(dev, dt, n, op->dom, cases[ci / 2].strided, &hs, &st);
        tf_status s2 = make_input(dev, dt, vc->n, vc->shape, op->dom, 1, vc->lay, &hv, &vt);
        if (s == TF_OK) s = s2;
        if (s == TF_OK) s = tf_searchsorted(st, vt, right, &out);
        host_init(&ref, TF_I64, vc->n, vc->shape);
        for (int64_t i = 0; i < hv.n; i++) {
            int64_t p = 0;
            for (int64_t j = 0; j < n; j++) p += right ? !sorts_before(hv.v[i], hs.v[j]) : sorts_before(hs.v[j], hv.v[i]);
            ref.v[i] = (double)p;
        }
        char desc[128];
        snprintf(desc, sizeof desc, "%s sorted %lld%s, values %d-d %s, %s", tf_dtype_name(dt), (long long)n,
                 cases[ci / 2].strided ? " strided" : "", vc->n, layout_names[vc->lay], right ? "right" : "left");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hs);
        host_free(&hv);
        host_free(&ref);
        tf_tensor_release(st);
        tf_tensor_release(vt);
        tf_tensor_release(out);
    }
}

/* ---- indexing, triangles and composites ---- */

static int64_t flat_of(const host_t *h, const int64_t *idx) {
    int64_t p = 0;
    for (int d = 0; d < h->ndim; d++) p = p * h->shape[d] + idx[d];
    return p;
}

/* An index tensor on dev with values in [0, n): i32 or i64, contiguous or strided. */
static tf_status make_index(tf_device *dev, bool i64, int ndim, const int64_t *shape, int64_t n, bool strided,
                            host_t *h, tf_tensor **out) {
    host_init(h, i64 ? TF_I64 : TF_I32, ndim, shape);
    for (int64_t i = 0; i < h->n; i++) h->v[i] = (double)randint(0, n - 1);
    int64_t pshape[TF_MAX_DIMS];
    memcpy(pshape, shape, sizeof(int64_t) * (size_t)ndim);
    if (strided && ndim) pshape[ndim - 1] *= 2;
    int64_t pn = numel(ndim, pshape);
    size_t es = i64 ? 8 : 4;
    unsigned char *bytes = calloc((size_t)(pn ? pn : 1), es);
    int64_t idx[TF_MAX_DIMS];
    for (int64_t i = 0; i < h->n; i++) {
        unravel(i, ndim, shape, idx);
        if (strided && ndim) idx[ndim - 1] = 2 * idx[ndim - 1] + 1;
        int64_t p = 0;
        for (int d = 0; d < ndim; d++) p = p * pshape[d] + idx[d];
        encode(h->dt, h->v[i], bytes + p * es);
    }
    tf_tensor *parent = NULL;
    tf_status s = tf_tensor_from_data(dev, h->dt, ndim, pshape, bytes, &parent);
    free(bytes);
    if (s == TF_OK && strided && ndim) {
        s = tf_slice(parent, -1, 1, pshape[ndim - 1], 2, out);
        tf_tensor_release(parent);
    } else if (s == TF_OK) {
        *out = parent;
    }
    return s;
}

static void run_indexed(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool gather = op->kind == TF_OP_GATHER;
    static const int64_t xshape[3] = {6, 5, 4};
    static const struct { int axis; int n; int64_t ishape[3]; layout lay; bool strided; } cases[] = {
        {0, 1, {9}, LAYOUT_CONTIG, false},     {1, 1, {3}, LAYOUT_TRANSPOSED, true},
        {-1, 1, {0}, LAYOUT_STRIDED, false},   {2, 1, {7}, LAYOUT_CONTIG, true},
    };
    static const struct { int axis; int64_t ishape[3]; layout lay; bool strided; } gcases[] = {
        {1, {6, 3, 4}, LAYOUT_CONTIG, false}, {-1, {2, 5, 3}, LAYOUT_TRANSPOSED, true},
        {0, {9, 2, 4}, LAYOUT_STRIDED, false}, {2, {6, 0, 1}, LAYOUT_CONTIG, false},
    };
    for (size_t ci = 0; ci < 4; ci++) {
        int axis = gather ? gcases[ci].axis : cases[ci].axis, ax = axis < 0 ? axis + 3 : axis;
        layout lay = gather ? gcases[ci].lay : cases[ci].lay;
        bool i64 = ci % 2 == 0, strided = gather ? gcases[ci].strided : cases[ci].strided;
        host_t hx, hi, ref;
        tf_tensor *x = NULL, *ix = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 3, xshape, op->dom, 0, lay, &hx, &x);
        tf_status si = gather ? make_index(dev, i64, 3, gcases[ci].ishape, xshape[ax], strided, &hi, &ix)
                              : make_index(dev, i64, 1, cases[ci].ishape, xshape[ax], strided, &hi, &ix);
        if (s == TF_OK) s = si;
        if (s == TF_OK) s = gather ? tf_gather(x, axis, ix, &out) : tf_index_select(x, axis, ix, &out);
        int64_t oshape[3], idx[3], xi[3];
        for (int d = 0; d < 3; d++) oshape[d] = gather ? hi.shape[d] : (d == ax ? hi.n : xshape[d]);
        host_init(&ref, dt, 3, oshape);
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, 3, oshape, idx);
            memcpy(xi, idx, sizeof xi);
            xi[ax] = (int64_t)(gather ? hi.v[i] : hi.v[idx[ax]]);
            ref.v[i] = hx.v[flat_of(&hx, xi)];
        }
        char desc[128];
        snprintf(desc, sizeof desc, "%s axis %d index %s%s %s", tf_dtype_name(dt), axis, i64 ? "i64" : "i32",
                 strided ? " strided" : "", layout_names[lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hi);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(ix);
        tf_tensor_release(out);
    }
}

static void run_triangle(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const reduce_case shapes[] = {
        {2, {5, 7}, 0, LAYOUT_CONTIG}, {3, {2, 4, 3}, 0, LAYOUT_TRANSPOSED}, {2, {0, 3}, 0, LAYOUT_CONTIG},
        {2, {3, 3}, 0, LAYOUT_STRIDED},
    };
    for (size_t ci = 0; ci < sizeof shapes / sizeof *shapes; ci++) {
        const reduce_case *sc = &shapes[ci];
        int64_t k = randint(-2, 2), idx[TF_MAX_DIMS];
        host_t h, ref;
        tf_tensor *t = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, sc->n, sc->shape, op->dom, 0, sc->lay, &h, &t);
        if (s == TF_OK) s = op->kind == TF_OP_TRIL ? tf_tril(t, k, &out) : tf_triu(t, k, &out);
        host_init(&ref, dt, sc->n, sc->shape);
        for (int64_t i = 0; i < h.n; i++) {
            unravel(i, sc->n, sc->shape, idx);
            int64_t above = idx[sc->n - 1] - idx[sc->n - 2];
            bool keep = op->kind == TF_OP_TRIL ? above <= k : above >= k;
            ref.v[i] = keep ? h.v[i] : 0;
        }
        char desc[96];
        snprintf(desc, sizeof desc, "%s %d-d diagonal %lld %s", tf_dtype_name(dt), sc->n, (long long)k, layout_names[sc->lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* concat / stack of three inputs with mixed layouts. */
static void run_join(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool stack = op->kind == TF_OP_STACK;
    static const struct { int64_t s[3][3]; int axis; } cases[] = {
        {{{2, 3, 4}, {2, 1, 4}, {2, 0, 4}}, 1}, {{{3, 4, 2}, {1, 4, 2}, {2, 4, 2}}, 0}, {{{2, 2, 3}, {2, 2, 1}, {2, 2, 5}}, -1},
    };
    static const int64_t same[3] = {3, 4, 2};
    static const layout lays[3] = {LAYOUT_TRANSPOSED, LAYOUT_CONTIG, LAYOUT_STRIDED};
    for (size_t ci = 0; ci < 3; ci++) {
        int axis = stack ? (int)ci - 1 : cases[ci].axis;
        host_t h[3], ref;
        tf_tensor *t[3] = {NULL, NULL, NULL}, *out = NULL;
        tf_status s = TF_OK;
        for (int k = 0; k < 3; k++) {
            tf_status sk = make_input(dev, dt, 3, stack ? same : cases[ci].s[k], op->dom, 0, lays[k], &h[k], &t[k]);
            if (s == TF_OK) s = sk;
        }
        if (s == TF_OK) s = stack ? tf_stack(3, (const tf_tensor *const *)t, axis, &out)
                                  : tf_concat(3, (const tf_tensor *const *)t, axis, &out);
        int nd = stack ? 4 : 3, ax = axis < 0 ? axis + nd : axis;
        int64_t oshape[4], idx[4], src[4];
        for (int d = 0, j = 0; d < nd; d++) {
            if (stack) oshape[d] = d == ax ? 3 : same[j++];
            else oshape[d] = d == ax ? h[0].shape[d] + h[1].shape[d] + h[2].shape[d] : h[0].shape[d];
        }
        host_init(&ref, dt, nd, oshape);
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, nd, oshape, idx);
            int k = 0;
            if (stack) {
                k = (int)idx[ax];
                for (int d = 0, j = 0; d < nd; d++)
                    if (d != ax) src[j++] = idx[d];
            } else {
                memcpy(src, idx, sizeof src);
                while (src[ax] >= h[k].shape[ax]) src[ax] -= h[k++].shape[ax];
            }
            ref.v[i] = h[k].v[flat_of(&h[k], src)];
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu axis %d", tf_dtype_name(dt), ci, axis);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        for (int k = 0; k < 3; k++) {
            host_free(&h[k]);
            tf_tensor_release(t[k]);
        }
        host_free(&ref);
        tf_tensor_release(out);
    }
}

/* split, pad, tile, flip: one input, a host reference by index mapping. */
static void run_reshaping(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const reduce_case shapes[] = {
        {2, {7, 5}, 0, LAYOUT_TRANSPOSED}, {3, {2, 3, 4}, 0, LAYOUT_STRIDED}, {2, {3, 4}, 0, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < 3; ci++) {
        const reduce_case *sc = &shapes[ci];
        int nd = sc->n;
        host_t h;
        tf_tensor *t = NULL;
        tf_status s = make_input(dev, dt, nd, sc->shape, op->dom, 0, sc->lay, &h, &t);
        int64_t idx[TF_MAX_DIMS], src[TF_MAX_DIMS];
        char desc[96];
        if (op->kind == TF_OP_SPLIT) {
            int ax = (int)ci % nd;
            int64_t e = sc->shape[ax], sizes[3] = {e / 3, 0, e - e / 3};
            tf_tensor *parts[3] = {NULL, NULL, NULL};
            if (s == TF_OK) s = tf_split(t, ax, 3, sizes, parts);
            int64_t at = 0;
            for (int k = 0; k < 3; k++) {
                int64_t pshape[TF_MAX_DIMS];
                memcpy(pshape, sc->shape, sizeof(int64_t) * (size_t)nd);
                pshape[ax] = sizes[k];
                host_t ref;
                host_init(&ref, dt, nd, pshape);
                for (int64_t i = 0; i < ref.n; i++) {
                    unravel(i, nd, pshape, idx);
                    idx[ax] += at;
                    ref.v[i] = h.v[flat_of(&h, idx)];
                }
                at += sizes[k];
                snprintf(desc, sizeof desc, "%s %d-d axis %d piece %d", tf_dtype_name(dt), nd, ax, k);
                check_case(tf_device_name(dev), op, desc, s, parts[k], &ref, c);
                host_free(&ref);
                tf_tensor_release(parts[k]);
            }
            host_free(&h);
            tf_tensor_release(t);
            continue;
        }
        tf_tensor *out = NULL;
        int64_t oshape[TF_MAX_DIMS], lo[TF_MAX_DIMS] = {0}, pads[6] = {0}, reps[3] = {1, 1, 1};
        int npairs = 0, nreps = 0, on = nd, axes[2] = {0, -1}, naxes = (int)ci % 2 + 1;
        double value = 0;
        if (op->kind == TF_OP_PAD) {
            static const int64_t p3[3][6] = {{1, 2, 0, 1, 0, 0}, {-1, 2, 1, -1, 2, 0}, {0, 3, 2, 0, 0, 0}};
            npairs = nd;
            memcpy(pads, p3[ci], sizeof pads);
            value = dt == TF_BOOL ? 1 : is_float(dt) ? uniform(-5, 5) : (double)randint(0, 9);
            if (s == TF_OK) s = tf_pad(t, npairs, pads, value, &out);
            for (int d = 0; d < nd; d++) {
                int k = nd - 1 - d;
                oshape[d] = sc->shape[d] + pads[2 * k] + pads[2 * k + 1];
                lo[d] = pads[2 * k];
            }
        } else if (op->kind == TF_OP_TILE) {
            static const int64_t r3[3][3] = {{2, 3, 0}, {3, 0, 0}, {2, 1, 2}};
            static const int n3[3] = {2, 1, 3};
            nreps = n3[ci];
            memcpy(reps, r3[ci], sizeof reps);
            if (s == TF_OK) s = tf_tile(t, nreps, reps, &out);
            on = nreps > nd ? nreps : nd;
            for (int d = 0; d < on; d++) {
                int xd = d - (on - nd), rd = d - (on - nreps);
                oshape[d] = (xd >= 0 ? sc->shape[xd] : 1) * (rd >= 0 ? reps[rd] : 1);
            }
        } else {                                   /* FLIP */
            if (s == TF_OK) s = tf_flip(t, naxes, axes, &out);
            memcpy(oshape, sc->shape, sizeof(int64_t) * (size_t)nd);
        }
        host_t ref;
        host_init(&ref, dt, on, oshape);
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, on, oshape, idx);
            bool inside = true;
            for (int d = 0; d < nd; d++) {
                int od = d + (on - nd);
                if (op->kind == TF_OP_PAD) {
                    src[d] = idx[od] - lo[d];
                    inside = inside && src[d] >= 0 && src[d] < sc->shape[d];
                } else if (op->kind == TF_OP_TILE) {
                    src[d] = idx[od] % sc->shape[d];
                } else {
                    bool flipped = false;
                    for (int a = 0; a < naxes; a++) flipped |= (axes[a] < 0 ? axes[a] + nd : axes[a]) == d;
                    src[d] = flipped ? sc->shape[d] - 1 - idx[d] : idx[d];
                }
            }
            ref.v[i] = inside ? h.v[flat_of(&h, src)] : quantize(dt, dt == TF_BOOL ? value != 0 : value);
        }
        snprintf(desc, sizeof desc, "%s %d-d case %zu %s", tf_dtype_name(dt), nd, ci, layout_names[sc->lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* alpha * op(a) @ op(b) + beta * c on host values; a, b logical [.., M, K]
 * and [.., K, N] after transposition; mag gets the size of the terms. */
static void ref_gemm(const host_t *a, bool ta, const host_t *b, bool tb, const host_t *cm, double alpha, double beta,
                     host_t *ref) {
    int nd = ref->ndim;
    int64_t M = ref->shape[nd - 2], N = ref->shape[nd - 1], K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t idx[TF_MAX_DIMS], ai[TF_MAX_DIMS], bi[TF_MAX_DIMS];
    ref->mag = calloc((size_t)(ref->n ? ref->n : 1), sizeof(double));
    ref->length = K;
    for (int64_t i = 0; i < ref->n; i++) {
        unravel(i, nd, ref->shape, idx);
        long double acc = 0, mag = 0;
        for (int64_t k = 0; k < K; k++) {
            for (int d = 0; d < a->ndim - 2; d++) ai[d] = a->shape[d] == 1 ? 0 : idx[nd - a->ndim + d];
            for (int d = 0; d < b->ndim - 2; d++) bi[d] = b->shape[d] == 1 ? 0 : idx[nd - b->ndim + d];
            ai[a->ndim - 2] = ta ? k : idx[nd - 2];
            ai[a->ndim - 1] = ta ? idx[nd - 2] : k;
            bi[b->ndim - 2] = tb ? idx[nd - 1] : k;
            bi[b->ndim - 1] = tb ? k : idx[nd - 1];
            long double t = (long double)a->v[flat_of(a, ai)] * b->v[flat_of(b, bi)];
            acc += t;
            mag += fabsl(t);
        }
        long double v = alpha * acc, m = fabs(alpha) * mag;
        if (cm && beta != 0) {
            double cv = cm->v[broadcast_index(cm, nd, idx)];
            v += beta * cv;
            m += fabs(beta * cv);
        }
        ref->v[i] = (double)v;
        ref->mag[i] = (double)m;
        (void)M;
        (void)N;
    }
}

static void run_gemm(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    /* bias: beta 1 and c one row, what a GPU may add in the GEMM's epilogue */
    static const struct { int na, nb, nc; int64_t a[3], b[3], cs[3]; bool nan_c, bias; } cases[] = {
        {2, 2, 2, {5, 7}, {7, 3}, {5, 3}, false, false},      {2, 2, 1, {4, 9}, {9, 6}, {6}, false, false},
        {3, 2, 3, {2, 5, 7}, {7, 3}, {2, 1, 3}, false, false}, {2, 2, 0, {3, 4}, {4, 2}, {0}, false, false},
        {2, 2, 2, {3, 0}, {0, 4}, {3, 4}, false, false},       {2, 2, 2, {4, 5}, {5, 3}, {4, 3}, true, false},
        {2, 2, 1, {33, 40}, {40, 24}, {24}, false, true},     {3, 3, 1, {3, 5, 16}, {3, 16, 8}, {8}, false, true},
        {3, 2, 2, {2, 9, 7}, {7, 5}, {1, 5}, false, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        bool ta = randint(0, 1), tb = randint(0, 1), has_c = cases[ci].nc > 0;
        double alpha = uniform(-2, 2), beta = cases[ci].nan_c ? 0 : cases[ci].bias ? 1 : uniform(-2, 2);
        int64_t as[3], bs[3];
        memcpy(as, cases[ci].a, sizeof as);
        memcpy(bs, cases[ci].b, sizeof bs);
        int na = cases[ci].na, nb = cases[ci].nb;
        if (ta) { int64_t t = as[na - 1]; as[na - 1] = as[na - 2]; as[na - 2] = t; }   /* stored transposed */
        if (tb) { int64_t t = bs[nb - 1]; bs[nb - 1] = bs[nb - 2]; bs[nb - 2] = t; }
        host_t ha, hb, hc, ref;
        tf_tensor *a = NULL, *b = NULL, *ct = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, na, as, op->dom, 0, ci % 2 ? LAYOUT_TRANSPOSED : LAYOUT_CONTIG, &ha, &a);
        tf_status s2 = make_input(dev, dt, nb, bs, op->dom, 1, ci % 3 ? LAYOUT_CONTIG : LAYOUT_STRIDED, &hb, &b);
        if (s == TF_OK) s = s2;
        memset(&hc, 0, sizeof hc);
        if (has_c) {
            s2 = make_input(dev, dt, cases[ci].nc, cases[ci].cs, cases[ci].nan_c ? DOM_SPECIAL : op->dom, 0, LAYOUT_CONTIG, &hc, &ct);
            if (cases[ci].nan_c) {                 /* beta == 0: c must not be read, NaN included */
                tf_tensor_release(ct);
                ct = NULL;
                s2 = s2 == TF_OK ? tf_full(dev, dt, cases[ci].nc, cases[ci].cs, NAN, &ct) : s2;
            }
            if (s == TF_OK) s = s2;
        }
        if (s == TF_OK) s = tf_gemm(a, b, ct, alpha, beta, ta, tb, &out);
        int nd = na > nb ? na : nb;
        int64_t oshape[3];
        for (int d = 0; d < nd - 2; d++) oshape[d] = na == nd ? cases[ci].a[d] : cases[ci].b[d];
        oshape[nd - 2] = cases[ci].a[na - 2];
        oshape[nd - 1] = cases[ci].b[nb - 1];
        host_init(&ref, dt, nd, oshape);
        ref_gemm(&ha, ta, &hb, tb, has_c ? &hc : NULL, alpha, beta, &ref);
        char desc[128];
        snprintf(desc, sizeof desc, "%s case %zu ta %d tb %d alpha %.3g beta %.3g", tf_dtype_name(dt), ci, ta, tb, alpha, beta);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&ha);
        host_free(&hb);
        if (has_c) host_free(&hc);
        host_free(&ref);
        tf_tensor_release(a);
        tf_tensor_release(b);
        tf_tensor_release(ct);
        tf_tensor_release(out);
    }
}

/* gemm_epilogue through tf_linear_fused: act(x @ w^T + bias) + residual,
 * each activation it takes and none, with and without bias and residual
 * (full, one row broadcast, strided), 2-d and 3-d x, and empty rows. */
static void run_gemm_epilogue(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int nx; int64_t x[3]; int64_t n; bool bias; int nr; int64_t r[3]; layout lr; } cases[] = {
        {2, {5, 7}, 3, true, 2, {5, 3}, LAYOUT_CONTIG},      {3, {2, 4, 9}, 6, false, 1, {6}, LAYOUT_CONTIG},
        {2, {33, 40}, 24, true, 0, {0}, LAYOUT_CONTIG},       {2, {3, 16}, 8, true, 2, {3, 8}, LAYOUT_STRIDED},
        {2, {1, 64}, 96, true, 2, {1, 96}, LAYOUT_CONTIG},    {3, {2, 3, 20}, 12, true, 3, {1, 3, 12}, LAYOUT_CONTIG},
        {2, {0, 4}, 5, true, 2, {0, 5}, LAYOUT_CONTIG},       {2, {14, 48}, 40, true, 2, {14, 40}, LAYOUT_TRANSPOSED},
    };
    static const tf_op_kind acts[] = {TF_NO_ACTIVATION, TF_OP_GELU, TF_OP_GELU_TANH, TF_OP_SILU, TF_OP_RELU};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        tf_op_kind act = acts[(ci + (size_t)randint(0, 4)) % 5];
        int nx = cases[ci].nx;
        int64_t k = cases[ci].x[nx - 1], n = cases[ci].n, wshape[2] = {n, k};
        host_t hx, hw, hb, hr, ref;
        memset(&hb, 0, sizeof hb);
        memset(&hr, 0, sizeof hr);
        tf_tensor *x = NULL, *w = NULL, *b = NULL, *r = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, nx, cases[ci].x, op->dom, 0, ci % 2 ? LAYOUT_TRANSPOSED : LAYOUT_CONTIG, &hx, &x);
        tf_status s2 = make_input(dev, dt, 2, wshape, op->dom, 1, ci % 3 ? LAYOUT_CONTIG : LAYOUT_STRIDED, &hw, &w);
        if (s == TF_OK) s = s2;
        if (cases[ci].bias && (s2 = make_input(dev, dt, 1, &n, op->dom, 0, LAYOUT_CONTIG, &hb, &b)) != TF_OK) s = s2;
        if (cases[ci].nr && (s2 = make_input(dev, dt, cases[ci].nr, cases[ci].r, op->dom, 1, cases[ci].lr, &hr, &r)) != TF_OK)
            s = s2;
        if (s == TF_OK) s = tf_linear_fused(x, w, b, act, r, &out);
        int64_t oshape[3];
        memcpy(oshape, cases[ci].x, sizeof oshape);
        oshape[nx - 1] = n;
        host_init(&ref, dt, nx, oshape);
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        ref.length = k;
        int64_t idx[3];
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, nx, oshape, idx);
            int64_t row = i / n, col = i % n;
            long double acc = cases[ci].bias ? hb.v[col] : 0, mag = fabsl(acc);
            for (int64_t q = 0; q < k; q++) {
                long double t = (long double)hx.v[row * k + q] * hw.v[col * k + q];
                acc += t;
                mag += fabsl(t);
            }
            double v = act == TF_NO_ACTIVATION ? (double)acc : ref_unary(act, (double)acc, 0, 0, 0);
            double m = (double)mag;              /* the activations here change an error by a factor near 1 at most */
            if (cases[ci].nr) {
                double rv = hr.v[broadcast_index(&hr, nx, idx)];
                v += rv;
                m += fabs(rv);
            }
            ref.v[i] = v;
            ref.mag[i] = m;
        }
        char desc[160];
        snprintf(desc, sizeof desc, "%s case %zu act %s bias %d residual %d-d", tf_dtype_name(dt), ci,
                 act == TF_NO_ACTIVATION ? "none" : tf_op_name(act), cases[ci].bias, cases[ci].nr);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hw);
        if (cases[ci].bias) host_free(&hb);
        if (cases[ci].nr) host_free(&hr);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(w);
        tf_tensor_release(b);
        tf_tensor_release(r);
        tf_tensor_release(out);
    }
}

/* gemv and outer against the same GEMM reference. */
static void run_products(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int na; int64_t a[3]; int64_t n; } cases[] = {{2, {5, 7}, 7}, {3, {2, 3, 4}, 4}, {2, {0, 3}, 3}};
    bool outer = op->kind == TF_OP_OUTER;
    for (size_t ci = 0; ci < 3; ci++) {
        int na = outer ? 1 : cases[ci].na;
        int64_t ashape[3];
        memcpy(ashape, cases[ci].a, sizeof ashape);
        if (outer) ashape[0] = cases[ci].a[0] + (int64_t)ci;
        host_t ha, hx, ref;
        tf_tensor *a = NULL, *x = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, na, ashape, op->dom, 0, ci == 1 ? LAYOUT_TRANSPOSED : LAYOUT_CONTIG, &ha, &a);
        int64_t xn = outer ? cases[ci].n : ashape[na - 1];
        tf_status s2 = make_input(dev, dt, 1, &xn, op->dom, 1, LAYOUT_STRIDED, &hx, &x);
        if (s == TF_OK) s = s2;
        if (s == TF_OK) s = outer ? tf_outer(a, x, &out) : tf_gemv(a, x, &out);
        int64_t oshape[3], idx[3];
        int on = outer ? 2 : na - 1;
        if (outer) { oshape[0] = ashape[0]; oshape[1] = xn; }
        else memcpy(oshape, ashape, sizeof(int64_t) * (size_t)on);
        host_init(&ref, is_int(dt) || is_float(dt) ? dt : dt, on, oshape);
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        ref.length = outer ? 1 : xn;
        for (int64_t i = 0; i < ref.n; i++) {
            unravel(i, on, oshape, idx);
            long double acc = 0, mag = 0;
            int64_t iacc = 0;
            if (outer) {
                acc = (long double)ha.v[idx[0]] * hx.v[idx[1]];
                iacc = (int64_t)((uint64_t)(int64_t)ha.v[idx[0]] * (uint64_t)(int64_t)hx.v[idx[1]]);
                mag = fabsl(acc);
            } else {
                int64_t ai[3];
                memcpy(ai, idx, sizeof ai);
                for (int64_t k = 0; k < xn; k++) {
                    ai[na - 1] = k;
                    acc += (long double)ha.v[flat_of(&ha, ai)] * hx.v[k];
                    mag += fabsl((long double)ha.v[flat_of(&ha, ai)] * hx.v[k]);
                    iacc = (int64_t)((uint64_t)iacc + (uint64_t)(int64_t)ha.v[flat_of(&ha, ai)] * (uint64_t)(int64_t)hx.v[k]);
                }
            }
            ref.v[i] = is_int(dt) ? wrap_int(dt, iacc) : (double)acc;
            ref.mag[i] = (double)mag;
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu", tf_dtype_name(dt), ci);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&ha);
        host_free(&hx);
        host_free(&ref);
        tf_tensor_release(a);
        tf_tensor_release(x);
        tf_tensor_release(out);
    }
}

/* ---- transformer kernels ---- */

static void run_row(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool norm = op->kind == TF_OP_RMSNORM || op->kind == TF_OP_LAYERNORM;
    static const reduce_case cases[] = {
        {3, {6, 5, 8}, -1, LAYOUT_CONTIG}, {3, {6, 5, 8}, 1, LAYOUT_TRANSPOSED}, {3, {6, 5, 8}, 0, LAYOUT_STRIDED},
        {1, {1031}, 0, LAYOUT_CONTIG},     {2, {3, 0}, -1, LAYOUT_CONTIG},       {2, {0, 5}, -1, LAYOUT_CONTIG},
        /* Rows the GPUs' one-pass kernels take: a warp a row (with and without
         * 16-byte loads), a block of 256 and of 1024 threads a row. */
        {2, {5, 1000}, -1, LAYOUT_CONTIG}, {2, {7, 33}, -1, LAYOUT_CONTIG},      {2, {4, 4096}, -1, LAYOUT_CONTIG},
        {2, {3, 20000}, -1, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const reduce_case *rc = &cases[ci];
        int nd = rc->n, ax = norm ? nd - 1 : (rc->axis < 0 ? rc->axis + nd : rc->axis);
        int64_t d = rc->shape[nd - 1], len = rc->shape[ax], idx[TF_MAX_DIMS];
        bool with_w = norm && ci % 3 != 1, with_b = op->kind == TF_OP_LAYERNORM && ci % 2 == 0;
        double eps = uniform(1e-6, 1e-2);
        host_t h, hw, hb, ref;
        tf_tensor *t = NULL, *w = NULL, *b = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, nd, rc->shape, op->dom, 0, rc->lay, &h, &t);
        memset(&hw, 0, sizeof hw);
        memset(&hb, 0, sizeof hb);
        layout w_lay = ci < 6 ? LAYOUT_STRIDED : LAYOUT_CONTIG;      /* contiguous: vector loads of w */
        if (with_w && s == TF_OK) s = make_input(dev, dt, 1, &d, DOM_ANY, 0, w_lay, &hw, &w);
        if (with_b && s == TF_OK) s = make_input(dev, dt, 1, &d, DOM_ANY, 0, LAYOUT_CONTIG, &hb, &b);
        if (s == TF_OK) {
            switch (op->kind) {
            case TF_OP_SOFTMAX: s = tf_softmax(t, rc->axis, &out); break;
            case TF_OP_LOG_SOFTMAX: s = tf_log_softmax(t, rc->axis, &out); break;
            case TF_OP_RMSNORM: s = tf_rmsnorm(t, w, eps, &out); break;
            default: s = tf_layernorm(t, w, b, eps, &out); break;
            }
        }
        host_init(&ref, dt, nd, rc->shape);
        ref.length = len;
        int64_t step = 1;
        for (int k = ax + 1; k < nd; k++) step *= rc->shape[k];
        for (int64_t i = 0; i < h.n; i++) {
            unravel(i, nd, rc->shape, idx);
            if (idx[ax] != 0) continue;                        /* once per line */
            long double m = -INFINITY, sum = 0, mean = 0, ss = 0;
            for (int64_t j = 0; j < len; j++) {
                double v = h.v[i + j * step];
                m = v > m ? v : m;
                mean += v;
            }
            mean /= len;
            for (int64_t j = 0; j < len; j++) {
                long double v = h.v[i + j * step];
                sum += expl(v - m);
                ss += op->kind == TF_OP_LAYERNORM ? (v - mean) * (v - mean) : v * v;
            }
            long double inv = 1.0L / sqrtl(ss / len + eps);
            for (int64_t j = 0; j < len; j++) {
                long double v = h.v[i + j * step], r;
                switch (op->kind) {
                case TF_OP_SOFTMAX: r = expl(v - m) / sum; break;
                case TF_OP_LOG_SOFTMAX: r = v - m - logl(sum); break;
                case TF_OP_RMSNORM: r = v * inv; break;
                default: r = (v - mean) * inv; break;
                }
                if (with_w) r *= hw.v[j];
                if (with_b) r += hb.v[j];
                ref.v[i + j * step] = (double)r;
            }
        }
        char desc[128];
        snprintf(desc, sizeof desc, "%s %d-d axis %d %s%s%s", tf_dtype_name(dt), nd, rc->axis, layout_names[rc->lay],
                 with_w ? " weight" : "", with_b ? " bias" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&h);
        host_free(&ref);
        if (with_w) host_free(&hw);
        if (with_b) host_free(&hb);
        tf_tensor_release(t);
        tf_tensor_release(w);
        tf_tensor_release(b);
        tf_tensor_release(out);
    }
}

/* ADD_RMSNORM / ADD_LAYERNORM: norm(x + r) along the last axis, the sum
 * rounded to the dtype first (the op's definition), r broadcast to x. */
static void run_add_norm(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int nx; int64_t x[3]; int nr; int64_t r[3]; layout lx, lr; } cases[] = {
        {3, {6, 5, 8}, 3, {6, 5, 8}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {3, {6, 5, 8}, 3, {6, 5, 8}, LAYOUT_TRANSPOSED, LAYOUT_STRIDED},
        {3, {2, 5, 24}, 2, {5, 24}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {3, {4, 3, 16}, 1, {16}, LAYOUT_STRIDED, LAYOUT_CONTIG},
        {3, {2, 3, 12}, 3, {2, 1, 12}, LAYOUT_CONTIG, LAYOUT_TRANSPOSED},
        {1, {1031}, 1, {1031}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {2, {3, 0}, 2, {3, 0}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {2, {0, 5}, 1, {5}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {2, {5, 1000}, 2, {5, 1000}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {2, {7, 33}, 2, {7, 33}, LAYOUT_CONTIG, LAYOUT_CONTIG},
        {2, {4, 4096}, 2, {4, 4096}, LAYOUT_CONTIG, LAYOUT_CONTIG},
    };
    bool layer = op->kind == TF_OP_ADD_LAYERNORM;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int nd = cases[ci].nx;
        const int64_t *shape = cases[ci].x;
        int64_t d = shape[nd - 1], idx[TF_MAX_DIMS];
        bool with_w = ci % 3 != 1, with_b = layer && ci % 2 == 0;
        double eps = uniform(1e-6, 1e-2);
        host_t hx, hr, hw, hb, ref;
        memset(&hw, 0, sizeof hw);
        memset(&hb, 0, sizeof hb);
        tf_tensor *x = NULL, *r = NULL, *w = NULL, *b = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, nd, shape, op->dom, 0, cases[ci].lx, &hx, &x);
        tf_status s2 = make_input(dev, dt, cases[ci].nr, cases[ci].r, op->dom, 1, cases[ci].lr, &hr, &r);
        if (s == TF_OK) s = s2;
        if (with_w && s == TF_OK) s = make_input(dev, dt, 1, &d, DOM_ANY, 0, LAYOUT_CONTIG, &hw, &w);
        if (with_b && s == TF_OK) s = make_input(dev, dt, 1, &d, DOM_ANY, 1, LAYOUT_CONTIG, &hb, &b);
        if (s == TF_OK) s = layer ? tf_add_layernorm(x, r, w, b, eps, &out) : tf_add_rmsnorm(x, r, w, eps, &out);
        host_init(&ref, dt, nd, shape);
        ref.length = d;
        double *sum = malloc(sizeof(double) * (size_t)(d ? d : 1));
        for (int64_t i = 0; i < hx.n; i += d ? d : 1) {     /* line by line: i is the first of a line */
            if (!d) break;
            long double mean = 0, ss = 0;
            for (int64_t j = 0; j < d; j++) {
                unravel(i + j, nd, shape, idx);
                sum[j] = quantize(dt, hx.v[i + j] + hr.v[broadcast_index(&hr, nd, idx)]);
                mean += sum[j];
            }
            mean = layer ? mean / d : 0;
            for (int64_t j = 0; j < d; j++) ss += (sum[j] - mean) * (sum[j] - mean);
            long double inv = 1.0L / sqrtl(ss / d + eps);
            for (int64_t j = 0; j < d; j++) {
                long double v = (sum[j] - mean) * inv;
                if (with_w) v *= hw.v[j];
                if (with_b) v += hb.v[j];
                ref.v[i + j] = (double)v;
            }
        }
        free(sum);
        char desc[160];
        snprintf(desc, sizeof desc, "%s x %d-d %s, residual %d-d %s%s%s", tf_dtype_name(dt), nd,
                 layout_names[cases[ci].lx], cases[ci].nr, layout_names[cases[ci].lr], with_w ? " weight" : "",
                 with_b ? " bias" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hr);
        host_free(&ref);
        if (with_w) host_free(&hw);
        if (with_b) host_free(&hb);
        tf_tensor_release(x);
        tf_tensor_release(r);
        tf_tensor_release(w);
        tf_tensor_release(b);
        tf_tensor_release(out);
    }
}

static void run_rope(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n; int64_t s[4]; int seq; int64_t rot; layout lay; } cases[] = {
        {4, {2, 5, 3, 8}, 1, 8, LAYOUT_CONTIG}, {4, {2, 5, 3, 8}, 1, 4, LAYOUT_TRANSPOSED},
        {2, {6, 10}, 0, 0, LAYOUT_STRIDED},     {3, {2, 0, 4}, 1, 2, LAYOUT_CONTIG},
        {4, {2, 3, 5, 12}, 2, 8, LAYOUT_CONTIG},                 /* rows past the rotated dims */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        for (int mode = 0; mode < 2; mode++) {
            int nd = cases[ci].n, ax = cases[ci].seq;
            int64_t d = cases[ci].s[nd - 1], rot = cases[ci].rot ? cases[ci].rot : d, half = rot / 2, idx[4];
            double theta = ci % 2 ? 500000.0 : 10000.0;
            host_t h, hp, ref;
            tf_tensor *t = NULL, *p = NULL, *out = NULL;
            tf_status s = make_input(dev, dt, nd, cases[ci].s, op->dom, 0, cases[ci].lay, &h, &t);
            tf_status s2 = make_index(dev, ci % 2, 1, &cases[ci].s[ax], 64, ci == 2, &hp, &p);
            if (s == TF_OK) s = s2;
            if (s == TF_OK) s = tf_rope(t, p, ax, cases[ci].rot, theta, (tf_rope_mode)mode, &out);
            host_init(&ref, dt, nd, cases[ci].s);
            for (int64_t i = 0; i < h.n; i++) {
                unravel(i, nd, cases[ci].s, idx);
                int64_t e = idx[nd - 1];
                if (e >= rot) {
                    ref.v[i] = h.v[i];
                    continue;
                }
                int64_t k = mode ? e % half : e / 2, partner = mode ? (e < half ? e + half : e - half) : e ^ 1;
                bool first = mode ? e < half : e % 2 == 0;
                long double angle = hp.v[idx[ax]] * powl(theta, -2.0L * k / rot);
                long double v = h.v[i], u = h.v[i - e + partner];
                ref.v[i] = (double)(first ? v * cosl(angle) - u * sinl(angle) : u * sinl(angle) + v * cosl(angle));
            }
            char desc[128];
            snprintf(desc, sizeof desc, "%s %d-d rot %lld %s %s", tf_dtype_name(dt), nd, (long long)rot,
                     mode ? "half-split" : "interleaved", layout_names[cases[ci].lay]);
            check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
            host_free(&h);
            host_free(&hp);
            host_free(&ref);
            tf_tensor_release(t);
            tf_tensor_release(p);
            tf_tensor_release(out);
        }
    }
}

static void run_attention(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct {
        int64_t q[4], kv[4], dv;
        bool causal;
        int64_t q_offset;
        int mask_n;
        int64_t mask[4];
        layout lay;
    } cases[] = {
        {{2, 4, 3, 8}, {2, 2, 5, 8}, 6, false, -1, 0, {0}, LAYOUT_CONTIG},           /* GQA */
        {{2, 4, 3, 8}, {2, 2, 5, 8}, 6, true, -1, 2, {3, 5}, LAYOUT_TRANSPOSED},     /* causal, mask */
        {{1, 2, 1, 16}, {1, 2, 7, 16}, 16, true, 6, 0, {0}, LAYOUT_CONTIG},          /* decode, KV cache */
        {{1, 3, 4, 5}, {1, 3, 4, 5}, 3, true, 0, 4, {1, 3, 1, 4}, LAYOUT_STRIDED},   /* MHA, prefill */
        {{1, 2, 0, 4}, {1, 1, 3, 4}, 4, false, -1, 0, {0}, LAYOUT_CONTIG},           /* no queries */
        {{2, 2, 9, 16}, {2, 2, 9, 16}, 12, true, -1, 0, {0}, LAYOUT_CONTIG},        /* rows four at a time, a tail */
        /* Shapes the GPUs' flash (prefill) and split-KV (decode) kernels take:
         * head sizes 64 and 128, partial tiles, GQA, a KV offset, masks. */
        {{1, 4, 150, 64}, {1, 2, 200, 64}, 64, true, 50, 0, {0}, LAYOUT_CONTIG},
        {{2, 2, 70, 128}, {2, 2, 70, 128}, 128, false, -1, 2, {70, 70}, LAYOUT_CONTIG},
        {{1, 3, 1, 128}, {1, 3, 600, 128}, 128, true, -1, 0, {0}, LAYOUT_CONTIG},
        {{2, 4, 3, 64}, {2, 1, 300, 64}, 64, true, 100, 4, {2, 1, 3, 300}, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int64_t vshape[4] = {cases[ci].kv[0], cases[ci].kv[1], cases[ci].kv[2], cases[ci].dv};
        host_t hq, hk, hv, hm, ref;
        tf_tensor *q = NULL, *k = NULL, *v = NULL, *m = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 4, cases[ci].q, op->dom, 0, cases[ci].lay, &hq, &q);
        tf_status s2 = make_input(dev, dt, 4, cases[ci].kv, op->dom, 0, LAYOUT_CONTIG, &hk, &k);
        tf_status s3 = make_input(dev, dt, 4, vshape, op->dom, 0, cases[ci].lay, &hv, &v);
        memset(&hm, 0, sizeof hm);
        if (cases[ci].mask_n) {
            tf_status s4 = make_input(dev, dt, cases[ci].mask_n, cases[ci].mask, op->dom, 0, LAYOUT_CONTIG, &hm, &m);
            if (s == TF_OK) s = s4;
        }
        if (s == TF_OK) s = s2 != TF_OK ? s2 : s3;
        double scale = ci % 2 ? 0.3 : -1;
        if (s == TF_OK) s = tf_sdpa(q, k, v, m, scale, cases[ci].causal, cases[ci].q_offset, &out);
        int64_t B = cases[ci].q[0], Hq = cases[ci].q[1], Lq = cases[ci].q[2], D = cases[ci].q[3];
        int64_t Hkv = cases[ci].kv[1], Lk = cases[ci].kv[2], Dv = cases[ci].dv;
        int64_t oshape[4] = {B, Hq, Lq, Dv}, off = cases[ci].q_offset < 0 ? Lk - Lq : cases[ci].q_offset;
        double sc = scale > 0 ? scale : 1 / sqrt((double)D);
        host_init(&ref, dt, 4, oshape);
        ref.length = Lk;
        ref.wide_acc = true;             /* f16/bf16: bounded by one rounding of the output, not Lk of them */
        long double *p = malloc(sizeof(long double) * (size_t)(Lk ? Lk : 1));
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < Lq; i++) {
                    long double mx = -INFINITY, sum = 0;
                    int64_t kh = h / (Hq / Hkv);
                    for (int64_t j = 0; j < Lk; j++) {
                        long double sj = -INFINITY;
                        if (!cases[ci].causal || j <= off + i) {
                            sj = 0;
                            for (int64_t d = 0; d < D; d++)
                                sj += (long double)hq.v[((b * Hq + h) * Lq + i) * D + d] * hk.v[((b * Hkv + kh) * Lk + j) * D + d];
                            sj *= sc;
                            if (cases[ci].mask_n) {
                                int64_t mi[4] = {b, h, i, j};
                                sj += hm.v[broadcast_index(&hm, 4, mi)];
                            }
                        }
                        p[j] = sj;
                        mx = sj > mx ? sj : mx;
                    }
                    for (int64_t j = 0; j < Lk; j++) sum += (p[j] = expl(p[j] - mx));
                    for (int64_t e = 0; e < Dv; e++) {
                        long double acc = 0;
                        for (int64_t j = 0; j < Lk; j++) acc += p[j] * hv.v[((b * Hkv + kh) * Lk + j) * Dv + e];
                        ref.v[((b * Hq + h) * Lq + i) * Dv + e] = (double)(acc / sum);
                    }
                }
        free(p);
        char desc[96];
        snprintf(desc, sizeof desc, "%s case %zu%s%s", tf_dtype_name(dt), ci, cases[ci].causal ? " causal" : "",
                 cases[ci].mask_n ? " mask" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hq);
        host_free(&hk);
        host_free(&hv);
        if (cases[ci].mask_n) host_free(&hm);
        host_free(&ref);
        tf_tensor_release(q);
        tf_tensor_release(k);
        tf_tensor_release(v);
        tf_tensor_release(m);
        tf_tensor_release(out);
    }
}

/* ---- vision and training ---- */

static void run_conv(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int64_t x[4], w[4], groups, stride[2], pad[2], dil[2]; bool bias; layout lay; } cases[] = {
        {{2, 4, 7, 6}, {6, 2, 3, 3}, 2, {1, 2}, {1, 0}, {1, 2}, true, LAYOUT_CONTIG},
        {{1, 3, 5, 5}, {4, 3, 1, 1}, 1, {1, 1}, {0, 0}, {1, 1}, false, LAYOUT_TRANSPOSED},
        {{1, 4, 6, 6}, {4, 1, 3, 3}, 4, {2, 2}, {1, 1}, {1, 1}, true, LAYOUT_STRIDED},
        {{0, 2, 4, 4}, {2, 2, 2, 2}, 1, {1, 1}, {0, 0}, {1, 1}, false, LAYOUT_CONTIG},
        {{1, 2, 66, 64}, {2, 2, 3, 3}, 1, {1, 1}, {1, 0}, {1, 1}, true, LAYOUT_CONTIG},   /* past the gather table */
        /* 5x5 outputs take the CPU's blocks of images; their 42 x 42 padded
         * planes go two to a run, and a task's 3 images end with a short one */
        {{24, 2, 40, 40}, {4, 1, 3, 3}, 2, {8, 8}, {1, 1}, {1, 1}, true, LAYOUT_STRIDED},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        host_t hx, hw, hb, ref;
        tf_tensor *x = NULL, *w = NULL, *b = NULL, *out = NULL;
        int64_t O = cases[ci].w[0];
        tf_status s = make_input(dev, dt, 4, cases[ci].x, op->dom, 0, cases[ci].lay, &hx, &x);
        tf_status s2 = make_input(dev, dt, 4, cases[ci].w, op->dom, 0, LAYOUT_CONTIG, &hw, &w);
        if (s == TF_OK) s = s2;
        memset(&hb, 0, sizeof hb);
        if (cases[ci].bias && s == TF_OK) s = make_input(dev, dt, 1, &O, op->dom, 0, LAYOUT_STRIDED, &hb, &b);
        if (s == TF_OK) s = tf_conv2d(x, w, b, cases[ci].stride, cases[ci].pad, cases[ci].dil, cases[ci].groups, &out);
        int64_t N = cases[ci].x[0], H = cases[ci].x[2], W = cases[ci].x[3], cg = cases[ci].w[1], kh = cases[ci].w[2],
                kw = cases[ci].w[3], og = O / cases[ci].groups;
        int64_t Ho = (H + 2 * cases[ci].pad[0] - cases[ci].dil[0] * (kh - 1) - 1) / cases[ci].stride[0] + 1;
        int64_t Wo = (W + 2 * cases[ci].pad[1] - cases[ci].dil[1] * (kw - 1) - 1) / cases[ci].stride[1] + 1;
        int64_t oshape[4] = {N, O, Ho, Wo}, C = cases[ci].x[1];
        host_init(&ref, dt, 4, oshape);
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        ref.length = cg * kh * kw;
        for (int64_t i = 0; i < ref.n; i++) {
            int64_t o[4];
            unravel(i, 4, oshape, o);
            long double acc = cases[ci].bias ? hb.v[o[1]] : 0, mag = fabsl(acc);
            for (int64_t cc = 0; cc < cg; cc++)
                for (int64_t a = 0; a < kh; a++)
                    for (int64_t bb = 0; bb < kw; bb++) {
                        int64_t yi = o[2] * cases[ci].stride[0] - cases[ci].pad[0] + a * cases[ci].dil[0];
                        int64_t xi = o[3] * cases[ci].stride[1] - cases[ci].pad[1] + bb * cases[ci].dil[1];
                        if (yi < 0 || yi >= H || xi < 0 || xi >= W) continue;
                        int64_t cin = (o[1] / og) * cg + cc;
                        long double t = (long double)hx.v[((o[0] * C + cin) * H + yi) * W + xi] *
                                        hw.v[((o[1] * cg + cc) * kh + a) * kw + bb];
                        acc += t;
                        mag += fabsl(t);
                    }
            ref.v[i] = (double)acc;
            ref.mag[i] = (double)mag;
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu groups %lld", tf_dtype_name(dt), ci, (long long)cases[ci].groups);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hw);
        if (cases[ci].bias) host_free(&hb);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(w);
        tf_tensor_release(b);
        tf_tensor_release(out);
    }
}

static void run_pool(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool is_max = op->kind == TF_OP_MAXPOOL2D;
    /* ties: values drawn from DOM_ORDER's few (with NaN and infinities
     * where the dtype has them), max pooling only */
    static const struct { int64_t x[4], k[2], stride[2], pad[2], dil[2]; bool count_pad; layout lay; bool ties; } cases[] = {
        {{2, 3, 7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}, true, LAYOUT_CONTIG, false},
        {{1, 2, 6, 6}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, false, LAYOUT_TRANSPOSED, false},
        {{1, 2, 9, 7}, {3, 3}, {1, 2}, {1, 1}, {2, 1}, false, LAYOUT_STRIDED, false},
        {{2, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, LAYOUT_CONTIG, false}, /* 2x2: its own loop */
        {{1, 2, 5, 7}, {2, 2}, {1, 1}, {0, 0}, {1, 1}, true, LAYOUT_CONTIG, false},  /* overlapping */
        {{3, 4, 8, 10}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, LAYOUT_CONTIG, true}, /* 2x2 stride 2, ties */
        {{2, 3, 7, 9}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, LAYOUT_CONTIG, true},  /* ... not tiling x */
        {{2, 3, 7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, false, LAYOUT_STRIDED, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        if (cases[ci].ties && !is_max) continue;
        const int64_t *stride = cases[ci].stride[0] ? cases[ci].stride : cases[ci].k;
        const int64_t dil_avg[2] = {1, 1}, *dil = is_max ? cases[ci].dil : dil_avg;
        host_t hx, ref;
        tf_tensor *x = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 4, cases[ci].x, cases[ci].ties ? DOM_ORDER : op->dom, 0, cases[ci].lay, &hx, &x);
        if (s == TF_OK)
            s = is_max ? tf_maxpool2d(x, cases[ci].k, cases[ci].stride[0] ? cases[ci].stride : NULL, cases[ci].pad, dil, &out)
                       : tf_avgpool2d(x, cases[ci].k, cases[ci].stride[0] ? cases[ci].stride : NULL, cases[ci].pad,
                                      cases[ci].count_pad, &out);
        int64_t H = cases[ci].x[2], W = cases[ci].x[3];
        int64_t Ho = (H + 2 * cases[ci].pad[0] - dil[0] * (cases[ci].k[0] - 1) - 1) / stride[0] + 1;
        int64_t Wo = (W + 2 * cases[ci].pad[1] - dil[1] * (cases[ci].k[1] - 1) - 1) / stride[1] + 1;
        int64_t oshape[4] = {cases[ci].x[0], cases[ci].x[1], Ho, Wo};
        host_init(&ref, dt, 4, oshape);
        ref.length = cases[ci].k[0] * cases[ci].k[1];
        for (int64_t i = 0; i < ref.n; i++) {
            int64_t o[4];
            unravel(i, 4, oshape, o);
            long double acc = is_max ? -INFINITY : 0;
            int64_t counted = 0;
            for (int64_t a = 0; a < cases[ci].k[0]; a++)
                for (int64_t b = 0; b < cases[ci].k[1]; b++) {
                    int64_t yi = o[2] * stride[0] - cases[ci].pad[0] + a * dil[0];
                    int64_t xi = o[3] * stride[1] - cases[ci].pad[1] + b * dil[1];
                    bool inside = yi >= 0 && yi < H && xi >= 0 && xi < W;
                    if (inside || cases[ci].count_pad) counted++;
                    if (!inside) continue;
                    double v = hx.v[((o[0] * cases[ci].x[1] + o[1]) * H + yi) * W + xi];
                    if (is_max) acc = isnan((double)acc) ? acc : isnan(v) || v > acc ? v : acc;   /* the first NaN */
                    else acc += v;
                }
            ref.v[i] = is_max ? (double)acc : (double)(acc / counted);
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu%s", tf_dtype_name(dt), ci, cases[ci].count_pad ? " count_pad" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(out);
    }
}

/* The gradients of conv2d: dy [N, O, Ho, Wo] and w give dx; x and dy
 * give dW. The references scatter (dx) or gather (dW) in long double over
 * the same windows as run_conv's. */
typedef struct conv_grad_case {
    int64_t x[4], w[4], groups, stride[2], pad[2], dil[2];
    layout lay;
} conv_grad_case;

static int64_t conv_extent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

static void conv_grad_reference(const conv_grad_case *cc, bool want_input, const host_t *hx_or_w, const host_t *hdy,
                                host_t *ref) {
    const int64_t N = cc->x[0], C = cc->x[1], H = cc->x[2], W = cc->x[3], O = cc->w[0], cg = cc->w[1], kh = cc->w[2],
                  kw = cc->w[3], og = O / cc->groups;
    const int64_t Ho = conv_extent(H, kh, cc->stride[0], cc->pad[0], cc->dil[0]);
    const int64_t Wo = conv_extent(W, kw, cc->stride[1], cc->pad[1], cc->dil[1]);
    long double *acc = calloc((size_t)(ref->n ? ref->n : 1), sizeof(long double));
    long double *mag = calloc((size_t)(ref->n ? ref->n : 1), sizeof(long double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t y = 0; y < Ho; y++)
                for (int64_t x = 0; x < Wo; x++) {
                    const double g = hdy->v[((n * O + o) * Ho + y) * Wo + x];
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t a = 0; a < kh; a++)
                            for (int64_t b = 0; b < kw; b++) {
                                int64_t yi = y * cc->stride[0] - cc->pad[0] + a * cc->dil[0];
                                int64_t xi = x * cc->stride[1] - cc->pad[1] + b * cc->dil[1];
                                if (yi < 0 || yi >= H || xi < 0 || xi >= W) continue;
                                int64_t xat = ((n * C + (o / og) * cg + c) * H + yi) * W + xi;
                                int64_t wat = ((o * cg + c) * kh + a) * kw + b;
                                int64_t at = want_input ? xat : wat;
                                long double t = (long double)g * hx_or_w->v[want_input ? wat : xat];
                                acc[at] += t;
                                mag[at] += fabsl(t);
                            }
                }
    ref->mag = calloc((size_t)(ref->n ? ref->n : 1), sizeof(double));
    for (int64_t i = 0; i < ref->n; i++) {
        ref->v[i] = (double)acc[i];
        ref->mag[i] = (double)mag[i];
    }
    free(acc);
    free(mag);
}

static void run_conv_grad(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const conv_grad_case cases[] = {
        {{2, 4, 7, 6}, {6, 2, 3, 3}, 2, {1, 2}, {1, 0}, {1, 2}, LAYOUT_CONTIG},
        {{1, 3, 5, 5}, {4, 3, 1, 1}, 1, {1, 1}, {0, 0}, {1, 1}, LAYOUT_TRANSPOSED},
        {{2, 4, 6, 6}, {4, 1, 3, 3}, 4, {2, 2}, {1, 1}, {1, 1}, LAYOUT_STRIDED},
        {{3, 5, 8, 8}, {7, 5, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1}, LAYOUT_CONTIG},     /* the digits CNN's layer */
        {{2, 2, 9, 8}, {3, 2, 2, 3}, 1, {3, 2}, {0, 1}, {1, 1}, LAYOUT_STRIDED},    /* rows the stride skips */
        {{0, 2, 4, 4}, {2, 2, 2, 2}, 1, {1, 1}, {0, 0}, {1, 1}, LAYOUT_CONTIG},
        {{1, 2, 66, 64}, {2, 2, 3, 3}, 1, {1, 2}, {1, 0}, {1, 1}, LAYOUT_CONTIG},    /* past the gather table */
        /* planes of 42 x 42 go two to a run of the gathered path's block,
         * and a task's 3 images (20 over 8 tasks) end with a shorter run */
        {{20, 4, 40, 40}, {4, 2, 3, 3}, 2, {1, 1}, {1, 1}, {1, 1}, LAYOUT_STRIDED},
    };
    const bool want_input = op->kind == TF_OP_CONV2D_GRAD_INPUT;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const conv_grad_case *cc = &cases[ci];
        const int64_t Ho = conv_extent(cc->x[2], cc->w[2], cc->stride[0], cc->pad[0], cc->dil[0]);
        const int64_t Wo = conv_extent(cc->x[3], cc->w[3], cc->stride[1], cc->pad[1], cc->dil[1]);
        const int64_t dyshape[4] = {cc->x[0], cc->w[0], Ho, Wo};
        host_t hother, hdy, ref;
        tf_tensor *other = NULL, *dy = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 4, want_input ? cc->w : cc->x, op->dom, 0,
                                 want_input ? LAYOUT_CONTIG : cc->lay, &hother, &other);
        tf_status s2 = make_input(dev, dt, 4, dyshape, op->dom, 0, want_input ? cc->lay : LAYOUT_CONTIG, &hdy, &dy);
        if (s == TF_OK) s = s2;
        if (s == TF_OK)
            s = want_input ? tf_conv2d_grad_input(dy, other, cc->x, cc->stride, cc->pad, cc->dil, cc->groups, &out)
                           : tf_conv2d_grad_weight(other, dy, cc->w + 2, cc->stride, cc->pad, cc->dil, cc->groups, &out);
        host_init(&ref, dt, 4, want_input ? cc->x : cc->w);
        ref.length = want_input ? cc->w[0] / cc->groups * cc->w[2] * cc->w[3] : cc->x[0] * Ho * Wo;
        if (ref.length < 1) ref.length = 1;
        conv_grad_reference(cc, want_input, &hother, &hdy, &ref);
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu groups %lld", tf_dtype_name(dt), ci, (long long)cc->groups);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hother);
        host_free(&hdy);
        host_free(&ref);
        tf_tensor_release(other);
        tf_tensor_release(dy);
        tf_tensor_release(out);
    }
}

/* Attention's gradients against the forward and its chain rule in long
 * double: P = softmax(scale q k^T, causal), dP = dO v^T,
 * dS = P (dP - rowsum(P dP)); dQ = scale dS k, dK = scale dS^T q and
 * dV = P^T dO (summed over a kv head's query heads). Each value is judged
 * against the size of its terms. */
typedef struct attn_grad_case {
    int64_t q[4], kv[4], dv;
    bool causal;
    int64_t q_offset;
    layout lay;
} attn_grad_case;

static void attn_grad_reference(const attn_grad_case *ac, double scale, bool want_q, const host_t *hq, const host_t *hk,
                                const host_t *hv, const host_t *hg, host_t *ref) {
    const int64_t B = ac->q[0], Hq = ac->q[1], Lq = ac->q[2], D = ac->q[3], Hkv = ac->kv[1], Lk = ac->kv[2],
                  Dv = ac->dv, group = Hq / Hkv, off = ac->q_offset < 0 ? Lk - Lq : ac->q_offset, W = D + Dv;
    long double *P = calloc((size_t)(Lk ? Lk : 1), sizeof(long double)),
                *dS = calloc((size_t)(Lk ? Lk : 1), sizeof(long double)),
                *dSmag = calloc((size_t)(Lk ? Lk : 1), sizeof(long double)),
                *acc = calloc((size_t)(ref->n ? ref->n : 1), sizeof(long double)),
                *mag = calloc((size_t)(ref->n ? ref->n : 1), sizeof(long double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Lq; i++) {
                const int64_t kh = h / group;
                const double *qi = hq->v + ((b * Hq + h) * Lq + i) * D, *gi = hg->v + ((b * Hq + h) * Lq + i) * Dv;
                long double mx = -INFINITY, sum = 0, delta = 0, dmag = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    long double sj = -INFINITY;
                    if (!ac->causal || j <= off + i) {
                        sj = 0;
                        for (int64_t d = 0; d < D; d++) sj += (long double)qi[d] * hk->v[((b * Hkv + kh) * Lk + j) * D + d];
                        sj *= scale;
                    }
                    P[j] = sj;
                    mx = sj > mx ? sj : mx;
                }
                for (int64_t j = 0; j < Lk; j++) sum += (P[j] = expl(P[j] - mx));
                for (int64_t j = 0; j < Lk; j++) {
                    P[j] /= sum;
                    long double dp = 0, dpm = 0;
                    for (int64_t e = 0; e < Dv; e++) {
                        long double t = (long double)gi[e] * hv->v[((b * Hkv + kh) * Lk + j) * Dv + e];
                        dp += t;
                        dpm += fabsl(t);
                    }
                    dS[j] = dp;
                    dSmag[j] = dpm;
                    delta += P[j] * dp;
                    dmag += P[j] * dpm;
                }
                for (int64_t j = 0; j < Lk; j++) {
                    dSmag[j] = P[j] * (dSmag[j] + dmag);
                    dS[j] = P[j] * (dS[j] - delta);
                    const double *kj = hk->v + ((b * Hkv + kh) * Lk + j) * D;
                    if (want_q) {
                        for (int64_t d = 0; d < D; d++) {
                            acc[((b * Hq + h) * Lq + i) * D + d] += scale * dS[j] * kj[d];
                            mag[((b * Hq + h) * Lq + i) * D + d] += scale * dSmag[j] * fabs(kj[d]);
                        }
                    } else {
                        long double *a = acc + ((b * Hkv + kh) * Lk + j) * W, *m = mag + ((b * Hkv + kh) * Lk + j) * W;
                        for (int64_t d = 0; d < D; d++) {
                            a[d] += scale * dS[j] * qi[d];
                            m[d] += scale * dSmag[j] * fabs(qi[d]);
                        }
                        for (int64_t e = 0; e < Dv; e++) {
                            a[D + e] += P[j] * gi[e];
                            m[D + e] += P[j] * fabs(gi[e]);
                        }
                    }
                }
            }
    ref->mag = calloc((size_t)(ref->n ? ref->n : 1), sizeof(double));
    for (int64_t i = 0; i < ref->n; i++) {
        ref->v[i] = (double)acc[i];
        ref->mag[i] = (double)mag[i];
    }
    free(P);
    free(dS);
    free(dSmag);
    free(acc);
    free(mag);
}

static void run_attention_grad(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const attn_grad_case cases[] = {
        {{2, 4, 3, 8}, {2, 2, 5, 8}, 6, false, -1, LAYOUT_CONTIG},          /* GQA, cross lengths */
        {{2, 4, 5, 8}, {2, 2, 5, 8}, 8, true, -1, LAYOUT_TRANSPOSED},       /* causal */
        {{1, 3, 4, 5}, {1, 3, 6, 5}, 3, true, 1, LAYOUT_STRIDED},           /* a KV offset */
        {{1, 2, 0, 4}, {1, 1, 3, 4}, 4, false, -1, LAYOUT_CONTIG},          /* no queries */
        {{2, 4, 64, 16}, {2, 4, 64, 16}, 16, true, 0, LAYOUT_CONTIG},       /* train_gpt's heads */
        {{1, 2, 70, 32}, {1, 1, 150, 32}, 24, true, 80, LAYOUT_CONTIG},     /* past one block of queries */
    };
    const bool want_q = op->kind == TF_OP_SDPA_GRAD_Q;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const attn_grad_case *ac = &cases[ci];
        const int64_t vshape[4] = {ac->kv[0], ac->kv[1], ac->kv[2], ac->dv},
                      gshape[4] = {ac->q[0], ac->q[1], ac->q[2], ac->dv},
                      kvout[4] = {ac->kv[0], ac->kv[1], ac->kv[2], ac->kv[3] + ac->dv};
        host_t hq, hk, hv, hg, ref;
        tf_tensor *q = NULL, *k = NULL, *v = NULL, *g = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 4, ac->q, op->dom, 0, ac->lay, &hq, &q);
        tf_status s2 = make_input(dev, dt, 4, ac->kv, op->dom, 0, LAYOUT_CONTIG, &hk, &k);
        tf_status s3 = make_input(dev, dt, 4, vshape, op->dom, 0, ac->lay, &hv, &v);
        tf_status s4 = make_input(dev, dt, 4, gshape, op->dom, 0, ci % 2 ? LAYOUT_CONTIG : ac->lay, &hg, &g);
        if (s == TF_OK) s = s2 != TF_OK ? s2 : s3 != TF_OK ? s3 : s4;
        const double scale = ci % 2 ? 0.3 : -1, sc = scale > 0 ? scale : 1 / sqrt((double)ac->q[3]);
        if (s == TF_OK)
            s = want_q ? tf_sdpa_grad_q(q, k, v, g, scale, ac->causal, ac->q_offset, &out)
                       : tf_sdpa_grad_kv(q, k, v, g, scale, ac->causal, ac->q_offset, &out);
        host_init(&ref, dt, 4, want_q ? ac->q : kvout);
        ref.length = ac->kv[2] + ac->q[3] + ac->dv;
        ref.wide_acc = true;
        attn_grad_reference(ac, sc, want_q, &hq, &hk, &hv, &hg, &ref);
        char desc[96];
        snprintf(desc, sizeof desc, "%s case %zu%s", tf_dtype_name(dt), ci, ac->causal ? " causal" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hq);
        host_free(&hk);
        host_free(&hv);
        host_free(&hg);
        host_free(&ref);
        tf_tensor_release(q);
        tf_tensor_release(k);
        tf_tensor_release(v);
        tf_tensor_release(g);
        tf_tensor_release(out);
    }
}

/* rmsnorm's gradient in long double: dx = r gw - x r^3 mean(gw x) with
 * r = 1/sqrt(mean(x^2) + eps), gw = dy w; judged against the size of the
 * terms (|r gw| + |x r^3| mean|gw x|). */
static void run_norm_grad(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n; int64_t s[3]; bool weight; double eps; layout lay; } cases[] = {
        {2, {5, 8}, true, 1e-5, LAYOUT_CONTIG},          {3, {2, 3, 64}, true, 1e-6, LAYOUT_CONTIG},
        {2, {4, 7}, false, 1e-5, LAYOUT_TRANSPOSED},     {3, {3, 2, 6}, true, 0.1, LAYOUT_STRIDED},
        {1, {33}, false, 0, LAYOUT_CONTIG},              {2, {0, 5}, true, 1e-5, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int nd = cases[ci].n;
        const int64_t *shape = cases[ci].s, D = shape[nd - 1];
        host_t hx, hg, hw, ref;
        tf_tensor *x = NULL, *g = NULL, *w = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, nd, shape, op->dom, 0, cases[ci].lay, &hx, &x);
        tf_status s2 = make_input(dev, dt, nd, shape, op->dom, 0, ci % 2 ? LAYOUT_CONTIG : cases[ci].lay, &hg, &g);
        memset(&hw, 0, sizeof hw);
        if (cases[ci].weight) {
            tf_status s3 = make_input(dev, dt, 1, &D, op->dom, 0, LAYOUT_CONTIG, &hw, &w);
            if (s2 == TF_OK) s2 = s3;
        }
        if (s == TF_OK) s = s2;
        if (s == TF_OK) s = tf_rmsnorm_grad(x, w, g, cases[ci].eps, &out);
        host_init(&ref, dt, nd, shape);
        ref.length = D;
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        for (int64_t row = 0; D && row < ref.n / D; row++) {
            const double *xr = hx.v + row * D, *gr = hg.v + row * D;
            long double ss = 0, proj = 0, pmag = 0;
            for (int64_t e = 0; e < D; e++) {
                const long double gw = (long double)gr[e] * (cases[ci].weight ? hw.v[e] : 1);
                ss += (long double)xr[e] * xr[e];
                proj += gw * xr[e];
                pmag += fabsl(gw * xr[e]);
            }
            const long double r = 1 / sqrtl(ss / D + cases[ci].eps);
            for (int64_t e = 0; e < D; e++) {
                const long double gw = (long double)gr[e] * (cases[ci].weight ? hw.v[e] : 1);
                ref.v[row * D + e] = (double)(r * gw - xr[e] * r * r * r * proj / D);
                ref.mag[row * D + e] = (double)(fabsl(r * gw) + fabsl(xr[e] * r * r * r) * pmag / D);
            }
        }
        char desc[96];
        snprintf(desc, sizeof desc, "%s %d-d%s eps %g %s", tf_dtype_name(dt), nd, cases[ci].weight ? " weight" : "",
                 cases[ci].eps, layout_names[cases[ci].lay]);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hg);
        if (cases[ci].weight) host_free(&hw);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(g);
        tf_tensor_release(w);
        tf_tensor_release(out);
    }
}

/* Max pooling's gradient: each window's dy to the first element equal to
 * its maximum, summed where windows overlap. */
static void run_pool_grad(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    /* ties: x drawn from DOM_ORDER's few values (NaN and infinities where
     * the dtype has them): the gradient goes to the first maximum, the
     * first NaN where there is one */
    static const struct { int64_t x[4], k[2], stride[2], pad[2], dil[2]; layout lay; bool ties; } cases[] = {
        {{2, 3, 7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}, LAYOUT_CONTIG, false},
        {{2, 4, 8, 8}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, LAYOUT_CONTIG, false},          /* the digits CNN's */
        {{1, 2, 5, 7}, {2, 2}, {1, 1}, {0, 0}, {1, 1}, LAYOUT_CONTIG, false},          /* 2x2 overlapping */
        {{1, 2, 6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, LAYOUT_TRANSPOSED, false},      /* windows overlap */
        {{1, 2, 9, 7}, {3, 3}, {1, 2}, {1, 1}, {2, 1}, LAYOUT_STRIDED, false},
        {{3, 4, 8, 10}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, LAYOUT_CONTIG, true},          /* 2x2 windows tiling x */
        {{2, 3, 7, 9}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, LAYOUT_CONTIG, true},           /* ... not all of it */
        {{1, 2, 5, 7}, {2, 2}, {1, 1}, {0, 0}, {1, 1}, LAYOUT_STRIDED, true},
        {{2, 3, 7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}, LAYOUT_CONTIG, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int64_t H = cases[ci].x[2], W = cases[ci].x[3], *k = cases[ci].k, *st = cases[ci].stride,
                      *pad = cases[ci].pad, *dil = cases[ci].dil;
        const int64_t Ho = conv_extent(H, k[0], st[0], pad[0], dil[0]), Wo = conv_extent(W, k[1], st[1], pad[1], dil[1]);
        const int64_t dyshape[4] = {cases[ci].x[0], cases[ci].x[1], Ho, Wo};
        host_t hx, hdy, ref;
        tf_tensor *x = NULL, *dy = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, 4, cases[ci].x, cases[ci].ties ? DOM_ORDER : op->dom, 0, cases[ci].lay,
                                 &hx, &x);
        tf_status s2 = make_input(dev, dt, 4, dyshape, op->dom, 0, LAYOUT_CONTIG, &hdy, &dy);
        if (s == TF_OK) s = s2;
        if (s == TF_OK) s = tf_maxpool2d_grad(x, dy, k, st, pad, dil, &out);
        host_init(&ref, dt, 4, cases[ci].x);
        ref.length = k[0] * k[1];
        for (int64_t i = 0; i < ref.n; i++) ref.v[i] = 0;
        for (int64_t i = 0; i < hdy.n; i++) {
            int64_t o[4], at = -1;
            unravel(i, 4, dyshape, o);
            double best = -INFINITY;
            for (int64_t a = 0; a < k[0]; a++)
                for (int64_t b = 0; b < k[1]; b++) {
                    int64_t yi = o[2] * st[0] - pad[0] + a * dil[0], xi = o[3] * st[1] - pad[1] + b * dil[1];
                    if (yi < 0 || yi >= H || xi < 0 || xi >= W) continue;
                    int64_t here = ((o[0] * cases[ci].x[1] + o[1]) * H + yi) * W + xi;
                    if (at < 0 || (!isnan(best) && (isnan(hx.v[here]) || hx.v[here] > best))) {
                        best = hx.v[here];
                        at = here;
                    }
                }
            if (at >= 0) ref.v[at] += hdy.v[i];
        }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu%s", tf_dtype_name(dt), ci, cases[ci].ties ? " (ties, NaN)" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hx);
        host_free(&hdy);
        host_free(&ref);
        tf_tensor_release(x);
        tf_tensor_release(dy);
        tf_tensor_release(out);
    }
}

/* Adam/AdamW: run the step in place, then check param, m and v. */
static void run_optimizer(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n; int64_t s[2]; layout lay; } cases[] = {
        {2, {5, 7}, LAYOUT_CONTIG}, {2, {4, 3}, LAYOUT_TRANSPOSED}, {1, {1031}, LAYOUT_CONTIG}, {1, {0}, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        for (int decoupled = 0; decoupled < 2; decoupled++) {
            host_t hp, hg, hm, hv;
            tf_tensor *p = NULL, *g = NULL, *m = NULL, *v = NULL;
            double lr = uniform(1e-3, 1e-1), b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = uniform(0, 0.1);
            int64_t step = randint(1, 10);
            tf_status s = make_input(dev, dt, cases[ci].n, cases[ci].s, DOM_ANY, 0, cases[ci].lay, &hp, &p);
            tf_status s2 = make_input(dev, dt, cases[ci].n, cases[ci].s, DOM_ANY, 0, LAYOUT_CONTIG, &hg, &g);
            tf_status s3 = make_input(dev, dt, cases[ci].n, cases[ci].s, DOM_ANY, 0, cases[ci].lay, &hm, &m);
            tf_status s4 = make_input(dev, dt, cases[ci].n, cases[ci].s, DOM_POSITIVE, 0, LAYOUT_CONTIG, &hv, &v);
            if (s == TF_OK) s = s2 != TF_OK ? s2 : s3 != TF_OK ? s3 : s4;
            if (s == TF_OK) s = tf_adam_step(p, g, m, v, lr, b1, b2, eps, wd, step, decoupled);
            host_t rp, rm, rv;
            host_init(&rp, dt, cases[ci].n, cases[ci].s);
            host_init(&rm, dt, cases[ci].n, cases[ci].s);
            host_init(&rv, dt, cases[ci].n, cases[ci].s);
            long double c1 = 1 - powl(b1, step), c2 = 1 - powl(b2, step);
            for (int64_t i = 0; i < hp.n; i++) {
                long double pv = hp.v[i], gv = hg.v[i];
                if (decoupled) pv *= 1 - lr * wd;
                else gv += wd * pv;
                long double mv = b1 * hm.v[i] + (1 - b1) * gv, vv = b2 * hv.v[i] + (1 - b2) * gv * gv;
                rp.v[i] = (double)(pv - lr * (mv / c1) / (sqrtl(vv / c2) + eps));
                rm.v[i] = (double)mv;
                rv.v[i] = (double)vv;
            }
            const char *names[3] = {"param", "m", "v"};
            tf_tensor *got[3] = {p, m, v};
            host_t *want[3] = {&rp, &rm, &rv};
            for (int k = 0; k < 3; k++) {
                char desc[96];
                snprintf(desc, sizeof desc, "%s %s case %zu %s step %lld", tf_dtype_name(dt), names[k], ci,
                         decoupled ? "adamw" : "adam", (long long)step);
                check_case(tf_device_name(dev), op, desc, s, got[k], want[k], c);
            }
            host_t *all[7] = {&hp, &hg, &hm, &hv, &rp, &rm, &rv};
            for (int k = 0; k < 7; k++) host_free(all[k]);
            tf_tensor_release(p);
            tf_tensor_release(g);
            tf_tensor_release(m);
            tf_tensor_release(v);
        }
    }
}

/* batch_norm (training updates the running stats, checked too) and cross_entropy. */
static void run_batch_norm(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n; int64_t s[4]; bool training, affine; layout lay; } cases[] = {
        {3, {4, 3, 5}, true, true, LAYOUT_CONTIG},     {4, {2, 3, 4, 4}, false, true, LAYOUT_TRANSPOSED},
        {2, {6, 4}, true, false, LAYOUT_STRIDED},      {4, {2, 3, 4, 4}, false, false, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int n = cases[ci].n;
        int64_t C = cases[ci].s[1], count = numel(n, cases[ci].s) / C;
        double eps = 1e-5, momentum = uniform(0.05, 0.5);
        host_t hx, hrm, hrv, hw, hb, ref;
        tf_tensor *x = NULL, *rm = NULL, *rv = NULL, *w = NULL, *b = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, n, cases[ci].s, op->dom, 0, cases[ci].lay, &hx, &x);
        tf_status s2 = make_input(dev, dt, 1, &C, DOM_ANY, 0, LAYOUT_CONTIG, &hrm, &rm);
        tf_status s3 = make_input(dev, dt, 1, &C, DOM_POSITIVE, 0, LAYOUT_CONTIG, &hrv, &rv);
        if (s == TF_OK) s = s2 != TF_OK ? s2 : s3;
        memset(&hw, 0, sizeof hw);
        memset(&hb, 0, sizeof hb);
        if (cases[ci].affine && s == TF_OK) s = make_input(dev, dt, 1, &C, DOM_ANY, 0, LAYOUT_CONTIG, &hw, &w);
        if (cases[ci].affine && s == TF_OK) s = make_input(dev, dt, 1, &C, DOM_ANY, 0, LAYOUT_STRIDED, &hb, &b);
        if (s == TF_OK) s = tf_batch_norm(x, rm, rv, w, b, cases[ci].training, momentum, eps, &out);
        host_t new_rm, new_rv;
        host_init(&ref, dt, n, cases[ci].s);
        host_init(&new_rm, dt, 1, &C);
        host_init(&new_rv, dt, 1, &C);
        ref.length = count;
        int64_t idx[4];
        for (int64_t ch = 0; ch < C; ch++) {
            long double mean = 0, ss = 0;
            for (int64_t i = 0; i < hx.n; i++) {
                unravel(i, n, cases[ci].s, idx);
                if (idx[1] == ch) mean += hx.v[i];
            }
            mean /= count;
            for (int64_t i = 0; i < hx.n; i++) {
                unravel(i, n, cases[ci].s, idx);
                if (idx[1] == ch) ss += (hx.v[i] - mean) * (hx.v[i] - mean);
            }
            long double m_use = cases[ci].training ? mean : hrm.v[ch], v_use = cases[ci].training ? ss / count : hrv.v[ch];
            new_rm.v[ch] = (double)((1 - momentum) * hrm.v[ch] + momentum * mean);
            new_rv.v[ch] = (double)((1 - momentum) * hrv.v[ch] + momentum * (ss / (count - 1)));
            for (int64_t i = 0; i < hx.n; i++) {
                unravel(i, n, cases[ci].s, idx);
                if (idx[1] != ch) continue;
                long double y = (hx.v[i] - m_use) / sqrtl(v_use + eps);
                if (cases[ci].affine) y = y * hw.v[ch] + hb.v[ch];
                ref.v[i] = (double)y;
            }
        }
        char desc[96];
        snprintf(desc, sizeof desc, "%s case %zu %s%s", tf_dtype_name(dt), ci, cases[ci].training ? "training" : "inference",
                 cases[ci].affine ? " affine" : "");
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        if (cases[ci].training) {
            new_rm.length = new_rv.length = count;
            strncat(desc, " running_mean", sizeof desc - strlen(desc) - 1);
            check_case(tf_device_name(dev), op, desc, s, rm, &new_rm, c);
            strncat(desc, "/var", sizeof desc - strlen(desc) - 1);
            check_case(tf_device_name(dev), op, desc, s, rv, &new_rv, c);
        }
        host_t *all[7] = {&hx, &hrm, &hrv, &ref, &new_rm, &new_rv, NULL};
        for (int k = 0; all[k]; k++) host_free(all[k]);
        if (cases[ci].affine) {
            host_free(&hw);
            host_free(&hb);
        }
        tf_tensor *ts[6] = {x, rm, rv, w, b, out};
        for (int k = 0; k < 6; k++) tf_tensor_release(ts[k]);
    }
}

static void run_cross_entropy(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int n; int64_t s[3]; tf_reduction red; layout lay; } cases[] = {
        {2, {6, 5}, TF_REDUCTION_MEAN, LAYOUT_CONTIG}, {2, {6, 5}, TF_REDUCTION_SUM, LAYOUT_TRANSPOSED},
        {2, {4, 3}, TF_REDUCTION_NONE, LAYOUT_STRIDED}, {3, {2, 4, 3}, TF_REDUCTION_MEAN, LAYOUT_CONTIG},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int n = cases[ci].n;
        int64_t C = cases[ci].s[1], tshape[2] = {cases[ci].s[0], n == 3 ? cases[ci].s[2] : 0};
        host_t hl, ht, ref;
        tf_tensor *l = NULL, *t = NULL, *out = NULL;
        tf_status s = make_input(dev, dt, n, cases[ci].s, op->dom, 0, cases[ci].lay, &hl, &l);
        tf_status s2 = make_index(dev, ci % 2, n - 1, tshape, C, false, &ht, &t);
        if (s == TF_OK) s = s2;
        /* mark one target as ignored (-100) through a host copy */
        ht.v[0] = -100;
        tf_tensor_release(t);
        t = NULL;
        size_t es = ci % 2 ? 8 : 4;
        unsigned char *bytes = calloc((size_t)ht.n, es);
        for (int64_t i = 0; i < ht.n; i++) encode(ht.dt, ht.v[i], bytes + i * es);
        if (s == TF_OK) s = tf_tensor_from_data(dev, ht.dt, n - 1, tshape, bytes, &t);
        free(bytes);
        if (s == TF_OK) s = tf_cross_entropy(l, t, -100, cases[ci].red, &out);
        int64_t M = ht.n, idx[3];
        long double *losses = calloc((size_t)M, sizeof *losses), total = 0;
        int64_t valid = 0;
        for (int64_t mi = 0; mi < M; mi++) {
            if (ht.v[mi] == -100) continue;
            int64_t pos[2];
            unravel(mi, n - 1, tshape, pos);
            long double m = -INFINITY, sum = 0, picked = 0;
            for (int64_t k = 0; k < C; k++) {
                idx[0] = pos[0];
                idx[1] = k;
                idx[2] = n == 3 ? pos[1] : 0;
                double v = hl.v[flat_of(&hl, idx)];
                m = v > m ? v : m;
            }
            for (int64_t k = 0; k < C; k++) {
                idx[1] = k;
                long double v = hl.v[flat_of(&hl, idx)];
                sum += expl(v - m);
                if (k == (int64_t)ht.v[mi]) picked = v;
            }
            losses[mi] = -(picked - m - logl(sum));
            total += losses[mi];
            valid++;
        }
        if (cases[ci].red == TF_REDUCTION_NONE) {
            host_init(&ref, dt, n - 1, tshape);
            for (int64_t i = 0; i < M; i++) ref.v[i] = (double)losses[i];
        } else {
            host_init(&ref, dt, 0, NULL);
            ref.v[0] = (double)(cases[ci].red == TF_REDUCTION_SUM ? total : total / valid);
            ref.length = C * M;
        }
        free(losses);
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu reduction %d", tf_dtype_name(dt), ci, (int)cases[ci].red);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&hl);
        host_free(&ht);
        host_free(&ref);
        tf_tensor_release(l);
        tf_tensor_release(t);
        tf_tensor_release(out);
    }
}

/* attention_scores and weighted_sum_rows, with and without leading axes. */
static void run_decode_primitives(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    bool scores = op->kind == TF_OP_ATTENTION_SCORES;
    static const struct { int n; int64_t lead; int64_t L, D; } cases[] = {{1, 0, 5, 8}, {2, 3, 7, 4}, {2, 2, 0, 3}};
    for (size_t ci = 0; ci < 3; ci++) {
        int n = cases[ci].n;
        int64_t L = cases[ci].L, D = cases[ci].D, lead = cases[ci].lead;
        int64_t s1[2] = {lead, scores ? D : L}, s2[3] = {lead, L, D};
        const int64_t *a_shape = n == 2 ? s1 : s1 + 1, *b_shape = n == 2 ? s2 : s2 + 1;
        host_t ha, hb, ref;
        tf_tensor *a = NULL, *b = NULL, *out = NULL;
        double scale = uniform(0.1, 1);
        tf_status s = make_input(dev, dt, n, a_shape, op->dom, 0, LAYOUT_STRIDED, &ha, &a);
        tf_status s2s = make_input(dev, dt, n + 1, b_shape, op->dom, 0, ci ? LAYOUT_TRANSPOSED : LAYOUT_CONTIG, &hb, &b);
        if (s == TF_OK) s = s2s;
        if (s == TF_OK) s = scores ? tf_attention_scores(a, b, scale, &out) : tf_weighted_sum_rows(a, b, &out);
        int64_t oshape[2] = {lead, scores ? L : D};
        host_init(&ref, dt, n, n == 2 ? oshape : oshape + 1);
        ref.length = scores ? D : L;
        ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof(double));
        int64_t rows = n == 2 ? lead : 1, width = scores ? L : D;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t x = 0; x < width; x++) {
                long double acc = 0, mag = 0;
                for (int64_t y = 0; y < (scores ? D : L); y++) {
                    long double t = scores ? (long double)ha.v[r * D + y] * hb.v[(r * L + x) * D + y]
                                           : (long double)ha.v[r * L + y] * hb.v[(r * L + y) * D + x];
                    acc += t;
                    mag += fabsl(t);
                }
                ref.v[r * width + x] = (double)(scores ? acc * scale : acc);
                ref.mag[r * width + x] = (double)(scores ? mag * scale : mag);
            }
        char desc[64];
        snprintf(desc, sizeof desc, "%s case %zu", tf_dtype_name(dt), ci);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&ha);
        host_free(&hb);
        host_free(&ref);
        tf_tensor_release(a);
        tf_tensor_release(b);
        tf_tensor_release(out);
    }
}

static void run_composite(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    if (op->kind == TF_OP_BATCH_NORM) {
        run_batch_norm(dev, op, dt, c);
        return;
    }
    if (op->kind == TF_OP_CROSS_ENTROPY) {
        run_cross_entropy(dev, op, dt, c);
        return;
    }
    if (op->kind == TF_OP_ATTENTION_SCORES || op->kind == TF_OP_WEIGHTED_SUM_ROWS) {
        run_decode_primitives(dev, op, dt, c);
        return;
    }
    if (op->kind == TF_OP_CONCAT || op->kind == TF_OP_STACK) run_join(dev, op, dt, c);
    else if (op->kind == TF_OP_GEMV || op->kind == TF_OP_OUTER) run_products(dev, op, dt, c);
    else run_reshaping(dev, op, dt, c);
}

static void run_create(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const int64_t shapes[][3] = {{3, 4, 5}, {0, 0, 0}, {1, 1, 1}, {1000, 1, 1}};
    static const int ndims[] = {3, 1, 0, 1};
    for (int ci = 0; ci < 4; ci++) {
        tf_tensor *out = NULL;
        host_t ref;
        tf_status s;
        uint64_t seed = rng_next();
        double value = is_float(dt) ? uniform(-100, 100) : (double)randint(-300, 300);
        double start = -3 - ci, step = is_float(dt) ? 0.25 * (ci + 1) : (double)(ci + 1);
        if (op->kind == TF_OP_ARANGE) {
            int64_t n = ci == 1 ? 0 : 7 + 11 * ci;
            s = tf_arange(dev, dt, start, start + (double)n * step, step, &out);
            host_init(&ref, dt, 1, &n);
        } else {
            host_init(&ref, dt, ndims[ci], shapes[ci]);
            s = op->kind == TF_OP_FILL           ? tf_full(dev, dt, ndims[ci], shapes[ci], value, &out)
                : op->kind == TF_OP_RAND_UNIFORM ? tf_rand(dev, dt, ndims[ci], shapes[ci], seed, &out)
                                                 : tf_randn(dev, dt, ndims[ci], shapes[ci], seed, &out);
        }
        for (int64_t i = 0; i < ref.n; i++) {
            double v;
            switch (op->kind) {
            case TF_OP_FILL: v = value; break;
            case TF_OP_ARANGE: v = start + (double)i * step; break;
            case TF_OP_RAND_UNIFORM:
                v = dt == TF_F64 ? tf_rand_uniform_f64(seed, (uint64_t)i)
                                 : tf_rand_uniform_bits(seed, (uint64_t)i, dt == TF_F16 ? 11 : dt == TF_BF16 ? 8 : 24);
                break;
            default: v = tf_rand_normal_f64(seed, (uint64_t)i); break;
            }
            ref.v[i] = convert(dt, v, true);
        }
        char desc[96];
        snprintf(desc, sizeof desc, "%s %d-d case %d", tf_dtype_name(dt), ref.ndim, ci);
        check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
        host_free(&ref);
        tf_tensor_release(out);
    }
}

/* ---- block-quantized dtypes: a decoder of ggml's layouts written from the
 * format's description, independently of the library's ---- */

static const tf_dtype quant_types[] = {TF_Q4_0, TF_Q4_1, TF_Q8_0, TF_Q4_K, TF_Q6_K, TF_Q5_0,
                                       TF_Q5_1, TF_Q2_K, TF_Q3_K, TF_Q5_K, TF_IQ4_NL, TF_IQ4_XS};

static double qf16(const unsigned char *p) { return decode_f16((uint16_t)(p[0] | p[1] << 8)); }

/* The 6-bit scale and min of sub-block j of Q4_K and Q5_K. */
static void q_k_scale_min(const unsigned char *s, int j, int *sc, int *m) {
    if (j < 4) { *sc = s[j] & 63; *m = s[j + 4] & 63; }
    else { *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4; *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4; }
}

static const int iq4_codebook[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Bit i of the little-endian bytes at p. */
static int bit_at(const unsigned char *p, int i) { return (p[i / 8] >> (i % 8)) & 1; }

/* Element e of a block (in element order). */
static double q_element(tf_dtype wt, const unsigned char *b, int e) {
    switch (wt) {
    case TF_Q5_0: return qf16(b) * ((((b[6 + e % 16] >> (e < 16 ? 0 : 4)) & 15) | bit_at(b + 2, e) << 4) - 16);
    case TF_Q5_1: return qf16(b) * (((b[8 + e % 16] >> (e < 16 ? 0 : 4)) & 15) | bit_at(b + 4, e) << 4) + qf16(b + 2);
    case TF_Q2_K: {                                  /* 2-bit field (e % 128) / 32 of byte 16 + 32 (e / 128) + e % 32 */
        int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3, g = e / 16;
        return qf16(b + 80) * (b[g] & 15) * q - qf16(b + 82) * (b[g] >> 4);
    }
    case TF_Q3_K: {
        int g = e / 16, low = (b[32 + 32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
        int high = (b[e % 32] >> (e / 32)) & 1;
        int sc = (((b[96 + g % 8] >> (g < 8 ? 0 : 4)) & 15) | ((b[104 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
        return qf16(b + 108) * sc * (low - (high ? 0 : 4));
    }
    case TF_Q5_K: {
        int j = e / 32, sc, m;
        q_k_scale_min(b + 4, j, &sc, &m);
        int q = ((b[48 + 32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 15) | ((b[16 + e % 32] >> j) & 1) << 4;
        return qf16(b) * sc * q - qf16(b + 2) * m;
    }
    case TF_IQ4_NL: return qf16(b) * iq4_codebook[(b[2 + e % 16] >> (e < 16 ? 0 : 4)) & 15];
    case TF_IQ4_XS: {
        int j = e / 32, l = e % 32;
        int sc = (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((b[2 + j / 4] >> (2 * (j % 4))) & 3) << 4) - 32;
        return qf16(b) * sc * iq4_codebook[(b[8 + 16 * j + l % 16] >> (l < 16 ? 0 : 4)) & 15];
    }
    case TF_Q4_0: return qf16(b) * (((b[2 + e % 16] >> (e < 16 ? 0 : 4)) & 15) - 8);
    case TF_Q4_1: return qf16(b) * ((b[4 + e % 16] >> (e < 16 ? 0 : 4)) & 15) + qf16(b + 2);
    case TF_Q8_0: return qf16(b) * (signed char)b[2 + e];
    case TF_Q4_K: {
        int j = e / 32, sc, m;
        const unsigned char *s = b + 4;
        if (j < 4) { sc = s[j] & 63; m = s[j + 4] & 63; }
        else { sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4; m = (s[j + 4] >> 4) | (s[j] >> 6) << 4; }
        int q = (b[16 + 32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 15;
        return qf16(b) * sc * q - qf16(b + 2) * m;
    }
    default: {                                       /* Q6_K: 8 rows of 32 */
        int r = e / 32, c = e % 32;
        int lo = (b[64 * (r / 4) + 32 * (r % 2) + c] >> (4 * ((r % 4) / 2))) & 15;
        int hi = (b[128 + 32 * (r / 4) + c] >> (2 * (r % 4))) & 3;
        return qf16(b + 208) * (signed char)b[192 + e / 16] * ((lo | hi << 4) - 32);
    }
    }
}

/* n elements (whole blocks) of a quantized tensor's bytes. */
static void q_decode(tf_dtype wt, const unsigned char *bytes, int64_t n, double *out) {
    int64_t blk = (int64_t)tf_dtype_block_size(wt), sz = (int64_t)tf_dtype_size(wt);
    for (int64_t i = 0; i < n; i++) out[i] = q_element(wt, bytes + i / blk * sz, (int)(i % blk));
}

/* What rounding to each format may cost, as an NMSE on uniform values: a
 * step d over a range r leaves d^2/12 of variance against r^2/12 (Q4: 15
 * steps, so 1/225 = 4.4e-3; Q8_0: 1/127^2 of a half range, 2e-5; Q6_K:
 * 1/63^2 = 2.5e-4), times 2 for the scales' own rounding (f16, or 6 and 8
 * bits in the K-quants). IQ4's 16 non-linear levels are Q4's 15 steps at
 * worst (their widest gap is 24/240 of the range, 1/100). */
static double q_rounding_nmse(tf_dtype wt) {
    switch (wt) {
    case TF_Q8_0: return 5e-5;
    case TF_Q6_K: return 6e-4;
    case TF_Q5_0: case TF_Q5_1: case TF_Q5_K: return 3e-3;  /* 31 steps: 1/961, times 2, and a margin */
    case TF_Q3_K: return 5e-2;      /* 8 levels, the extreme at -4: steps of 1/8 of the range (1/64) and 3 + 1 clipped */
    case TF_Q2_K: return 0.25;      /* 3 steps: 1/9, times 2 */
    default: return 1e-2;
    }
}

/* f32 values [rows, k] quantized to wt on dev; h gets their decoded values. */
static tf_status make_quantized(tf_device *dev, tf_dtype wt, int64_t rows, int64_t k, host_t *h, tf_tensor **out) {
    int64_t shape[2] = {rows, k};
    float *f = malloc(sizeof(float) * (size_t)(rows * k + 1));
    for (int64_t i = 0; i < rows * k; i++) f[i] = (float)uniform(-1, 1);
    host_init(h, TF_F32, 2, shape);
    tf_tensor *t = NULL;
    *out = NULL;
    tf_status s = tf_tensor_from_data(dev, TF_F32, 2, shape, f, &t);
    if (s == TF_OK) s = tf_cast(t, wt, out);
    size_t bytes = (size_t)(rows * k / (int64_t)tf_dtype_block_size(wt) * (int64_t)tf_dtype_size(wt));
    unsigned char *raw = malloc(bytes + 1);
    if (s == TF_OK) s = tf_tensor_read(*out, raw, bytes);
    if (s == TF_OK) q_decode(wt, raw, rows * k, h->v);
    free(raw);
    free(f);
    tf_tensor_release(t);
    return s;
}

/* x [.., K] in dt times a quantized w [N, K]: tf_matmul_quantized, and
 * tf_gemm(x, w, NULL, 1, 0, false, true), which must come to the same. */
static void run_qmatmul(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int nx; int64_t x[3]; int64_t n; } cases[] = {
        {2, {1, 256}, 64}, {2, {5, 512}, 24}, {3, {2, 7, 256}, 16}, {2, {13, 256}, 33}, {2, {3, 256}, 0},
    };
    for (size_t qi = 0; qi < sizeof quant_types / sizeof *quant_types; qi++) {
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            tf_dtype wt = quant_types[qi];
            int nx = cases[ci].nx;
            int64_t k = cases[ci].x[nx - 1], n = cases[ci].n, oshape[3];
            host_t hx, hw, ref;
            tf_tensor *x = NULL, *w = NULL, *out = NULL;
            tf_status s = make_input(dev, dt, nx, cases[ci].x, op->dom, 0, LAYOUT_CONTIG, &hx, &x);
            tf_status s2 = make_quantized(dev, wt, n, k, &hw, &w);
            if (s == TF_OK) s = s2;
            bool via_gemm = ci % 2 == 1;
            if (s == TF_OK) s = via_gemm ? tf_gemm(x, w, NULL, 1, 0, false, true, &out) : tf_matmul_quantized(x, w, &out);
            memcpy(oshape, cases[ci].x, sizeof oshape);
            oshape[nx - 1] = n;
            host_init(&ref, dt, nx, oshape);
            ref.length = k;
            ref.extra_nmse = 1e-4;
            for (int64_t i = 0; i < ref.n; i++) {
                long double acc = 0;
                for (int64_t kk = 0; kk < k; kk++) acc += (long double)hx.v[i / n * k + kk] * hw.v[i % n * k + kk];
                ref.v[i] = (double)acc;
            }
            char desc[128];
            snprintf(desc, sizeof desc, "%s x %s case %zu%s", tf_dtype_name(dt), tf_dtype_name(wt), ci,
                     via_gemm ? " (tf_gemm)" : "");
            check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
            host_free(&hx);
            host_free(&hw);
            host_free(&ref);
            tf_tensor_release(x);
            tf_tensor_release(w);
            tf_tensor_release(out);
        }
    }
}

/* A linear layer with a weight read as stored (block-quantized, or f16/bf16
 * under f32 x) and its tail: act(x @ w^T + bias) + r through
 * tf_linear_fused (QMATMUL_EPILOGUE for f32 x, the parts otherwise). */
static void run_qmatmul_epilogue(tf_device *dev, const op_row *op, tf_dtype dt, counts *c) {
    static const struct { int nx; int64_t x[3]; int64_t n; bool bias; int nr; int64_t r[3]; } cases[] = {
        {2, {1, 256}, 64, true, 2, {1, 64}},  {2, {5, 512}, 24, false, 1, {24}},
        {3, {2, 7, 256}, 16, true, 3, {1, 7, 16}}, {2, {13, 256}, 33, true, 0, {0}},
        {2, {3, 256}, 0, true, 2, {3, 0}},    {2, {20, 256}, 40, true, 2, {20, 40}},
    };
    static const tf_op_kind acts[] = {TF_NO_ACTIVATION, TF_OP_GELU, TF_OP_GELU_TANH, TF_OP_SILU, TF_OP_RELU};
    tf_dtype weights[sizeof quant_types / sizeof *quant_types + 2];
    size_t nw = 0;
    for (size_t qi = 0; qi < sizeof quant_types / sizeof *quant_types; qi++) weights[nw++] = quant_types[qi];
    if (dt == TF_F32) {                        /* half weights are kept only under f32 x */
        weights[nw++] = TF_BF16;
        weights[nw++] = TF_F16;
    }
    for (size_t wi = 0; wi < nw; wi++) {
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            tf_dtype wt = weights[wi];
            tf_op_kind act = acts[(ci + wi + (size_t)randint(0, 4)) % 5];
            int nx = cases[ci].nx;
            int64_t k = cases[ci].x[nx - 1], n = cases[ci].n, oshape[3], wshape[2] = {n, k}, idx[3];
            host_t hx, hw, hb, hr, ref;
            memset(&hb, 0, sizeof hb);
            memset(&hr, 0, sizeof hr);
            tf_tensor *x = NULL, *w = NULL, *b = NULL, *r = NULL, *out = NULL;
            tf_status s = make_input(dev, dt, nx, cases[ci].x, op->dom, 0, LAYOUT_CONTIG, &hx, &x);
            tf_status s2 = tf_dtype_is_quantized(wt) ? make_quantized(dev, wt, n, k, &hw, &w)
                                                     : make_input(dev, wt, 2, wshape, op->dom, 1, LAYOUT_CONTIG, &hw, &w);
            if (s == TF_OK) s = s2;
            if (cases[ci].bias && (s2 = make_input(dev, dt, 1, &n, op->dom, 0, LAYOUT_CONTIG, &hb, &b)) != TF_OK) s = s2;
            if (cases[ci].nr && (s2 = make_input(dev, dt, cases[ci].nr, cases[ci].r, op->dom, 1,
                                                 ci % 2 ? LAYOUT_STRIDED : LAYOUT_CONTIG, &hr, &r)) != TF_OK)
                s = s2;
            if (s == TF_OK) s = tf_linear_fused(x, w, b, act, r, &out);
            memcpy(oshape, cases[ci].x, sizeof oshape);
            oshape[nx - 1] = n;
            host_init(&ref, dt, nx, oshape);
            ref.length = k;
            ref.extra_nmse = 1e-4;             /* x rounded to 8 bits per block (or bf16) on the way, as QMATMUL allows */
            for (int64_t i = 0; i < ref.n; i++) {
                unravel(i, nx, oshape, idx);
                long double acc = cases[ci].bias ? hb.v[i % n] : 0;
                for (int64_t q = 0; q < k; q++) acc += (long double)hx.v[i / n * k + q] * hw.v[i % n * k + q];
                double v = act == TF_NO_ACTIVATION ? (double)acc : ref_unary(act, (double)acc, 0, 0, 0);
                if (cases[ci].nr) v += hr.v[broadcast_index(&hr, nx, idx)];
                ref.v[i] = v;
            }
            char desc[160];
            snprintf(desc, sizeof desc, "%s x %s case %zu act %s bias %d residual %d-d", tf_dtype_name(dt),
                     tf_dtype_name(wt), ci, act == TF_NO_ACTIVATION ? "none" : tf_op_name(act), cases[ci].bias,
                     cases[ci].nr);
            check_case(tf_device_name(dev), op, desc, s, out, &ref, c);
            host_free(&hx);
            host_free(&hw);
            if (cases[ci].bias) host_free(&hb);
            if (cases[ci].nr) host_free(&hr);
            host_free(&ref);
            tf_tensor *all[] = {x, w, b, r, out};
            for (int t = 0; t < 5; t++) tf_tensor_release(all[t]);
        }
    }
}

static void record(counts *c, bool ok, const char *dev, const char *what, const char *why) {
    if (ok) c->passed++;
    else {
        c->failed++;
        printf("FAIL %s %s: %s\n", dev, what, why);
    }
}

/* index_select of whole rows of a quantized q [3, 2, 512] along axis 1
 * (then 0): the picked rows' bytes, exactly. */
static void check_quant_row_pick(tf_device *dev, tf_dtype wt, const tf_tensor *q, const unsigned char *raw, counts *c) {
    const int64_t row_bytes = 512 / (int64_t)tf_dtype_block_size(wt) * (int64_t)tf_dtype_size(wt), n = 3;
    static const int64_t pick[3] = {1, 0, 1};
    tf_tensor *ix = NULL, *out = NULL;
    tf_status s = tf_tensor_from_data(dev, TF_I64, 1, &n, pick, &ix);
    if (s == TF_OK) s = tf_index_select(q, 1, ix, &out);
    unsigned char *got = malloc((size_t)(9 * row_bytes));
    if (s == TF_OK) s = tf_tensor_read(out, got, (size_t)(9 * row_bytes));
    bool same = s == TF_OK && tf_tensor_dtype(out) == wt;
    for (int64_t r = 0; same && r < 9; r++)                 /* output row (a, b) is source row (a, pick[b]) */
        same = !memcmp(got + r * row_bytes, raw + (r / 3 * 2 + pick[r % 3]) * row_bytes, (size_t)row_bytes);
    char what[64], why[160];
    snprintf(what, sizeof what, "index_select of %s rows", tf_dtype_name(wt));
    if (s != TF_OK) snprintf(why, sizeof why, "returned %s: %s", tf_status_name(s), tf_last_error());
    else snprintf(why, sizeof why, "the picked rows are not the source's bytes");
    record(c, same, tf_device_name(dev), what, why);
    free(got);
    tf_tensor_release(ix);
    tf_tensor_release(out);
}

/* Casts to and from each quantized dtype: quantizing f32, f16 and bf16
 * (the decoded values within the format's rounding of the source), and
 * decoding to every float dtype (the host decoder's values, rounded once). */
static void run_quant_casts(tf_device *dev, counts *c) {
    static const tf_dtype floats[] = {TF_F32, TF_F16, TF_BF16, TF_F64};
    const char *name = tf_device_name(dev);
    tf_device_props props;
    tf_device_get_props(dev, &props);
    for (size_t qi = 0; qi < sizeof quant_types / sizeof *quant_types; qi++) {
        tf_dtype wt = quant_types[qi];
        for (size_t fi = 0; fi < sizeof floats / sizeof *floats; fi++) {
            tf_dtype ft = floats[fi];
            if (!((props.caps.dtypes >> ft) & 1u)) continue;
            int64_t shape[3] = {3, 2, 512};
            host_t src, dec;
            tf_tensor *t = NULL, *q = NULL, *back = NULL;
            char what[96], why[256] = "";
            tf_status s = make_input(dev, ft, 3, shape, DOM_ANY, 0, fi % 2 ? LAYOUT_STRIDED : LAYOUT_CONTIG, &src, &t);
            if (s == TF_OK) s = tf_cast(t, wt, &q);
            host_init(&dec, TF_F64, 3, shape);
            size_t bytes = (size_t)(src.n / (int64_t)tf_dtype_block_size(wt) * (int64_t)tf_dtype_size(wt));
            unsigned char *raw = malloc(bytes + 1);
            if (s == TF_OK) s = tf_tensor_read(q, raw, bytes);
            double num = 0, den = 0;
            if (s == TF_OK) {
                q_decode(wt, raw, src.n, dec.v);
                for (int64_t i = 0; i < src.n; i++) {
                    num += (dec.v[i] - src.v[i]) * (dec.v[i] - src.v[i]);
                    den += src.v[i] * src.v[i];
                }
            }
            snprintf(what, sizeof what, "cast %s -> %s", tf_dtype_name(ft), tf_dtype_name(wt));
            if (s != TF_OK) snprintf(why, sizeof why, "returned %s: %s", tf_status_name(s), tf_last_error());
            else snprintf(why, sizeof why, "NMSE %.3g exceeds %.3g", num / den, q_rounding_nmse(wt));
            record(c, s == TF_OK && num / den <= q_rounding_nmse(wt), name, what, why);
            /* and back: the bytes decoded on the device, to this float dtype */
            if (s == TF_OK) s = tf_cast(q, ft, &back);
            host_t ref;
            host_init(&ref, ft, 3, shape);
            for (int64_t i = 0; i < ref.n; i++) ref.v[i] = quantize(ft, dec.v[i]);
            op_row row = {TF_OP_COPY, "copy", 1, SH_SAME, DR_CAST, 0, DOM_ANY, 4};
            snprintf(what, sizeof what, "cast %s -> %s", tf_dtype_name(wt), tf_dtype_name(ft));
            check_case(name, &row, what, s, back, &ref, c);
            if (s == TF_OK && fi == 0) check_quant_row_pick(dev, wt, q, raw, c);
            free(raw);
            host_free(&src);
            host_free(&dec);
            host_free(&ref);
            tf_tensor_release(t);
            tf_tensor_release(q);
            tf_tensor_release(back);
        }
    }
}

/* --op NAME (repeatable): only these ops, e.g. for a slow checker (racecheck). */
static const char *only_ops[16];
static int n_only_ops;

static bool op_selected(const op_row *op) {
    if (n_only_ops == 0) return true;
    for (int i = 0; i < n_only_ops; i++)
        if (!strcmp(only_ops[i], op->name)) return true;
    return false;
}

static counts run_device(tf_device *dev) {
    counts c = {0, 0, 0, 0, 0, 0};
    tf_device_props props;
    tf_device_get_props(dev, &props);
    for (size_t oi = 0; oi < sizeof op_table / sizeof *op_table; oi++) {
        const op_row *op = &op_table[oi];
        if (!op_selected(op)) continue;
        for (int dt = 0; dt < TF_DTYPE_COUNT; dt++) {
            if (!((op->accepts >> dt) & 1u) || !((props.caps.dtypes >> dt) & 1u)) continue;
            switch (op->shape) {
            case SH_BROADCAST: case SH_MATMUL: run_pairwise(dev, op, (tf_dtype)dt, &c); break;
            case SH_REDUCE: run_reduce(dev, op, (tf_dtype)dt, &c); break;
            case SH_SAME: run_copy(dev, op, (tf_dtype)dt, &c); break;
            case SH_UNARY: run_unary(dev, op, (tf_dtype)dt, &c); break;
            case SH_WHERE: run_where(dev, op, (tf_dtype)dt, &c); break;
            case SH_SCAN: run_scan(dev, op, (tf_dtype)dt, &c); break;
            case SH_SORT: run_sort(dev, op, (tf_dtype)dt, &c); break;
            case SH_SEARCH: run_search(dev, op, (tf_dtype)dt, &c); break;
            case SH_INDEXED: run_indexed(dev, op, (tf_dtype)dt, &c); break;
            case SH_TRIANGLE: run_triangle(dev, op, (tf_dtype)dt, &c); break;
            case SH_GEMM: run_gemm(dev, op, (tf_dtype)dt, &c); break;
            case SH_GEMM_EPILOGUE: run_gemm_epilogue(dev, op, (tf_dtype)dt, &c); break;
            case SH_ADD_NORM: run_add_norm(dev, op, (tf_dtype)dt, &c); break;
            case SH_ROW: run_row(dev, op, (tf_dtype)dt, &c); break;
            case SH_ROPE: run_rope(dev, op, (tf_dtype)dt, &c); break;
            case SH_ATTENTION: run_attention(dev, op, (tf_dtype)dt, &c); break;
            case SH_CONV: run_conv(dev, op, (tf_dtype)dt, &c); break;
            case SH_POOL: run_pool(dev, op, (tf_dtype)dt, &c); break;
            case SH_CONV_GRAD: case SH_POOL_GRAD: case SH_ATTENTION_GRAD: case SH_NORM_GRAD: {   /* no portable kernels yet: the CPU's, allowed */
                uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
                if (op->shape == SH_CONV_GRAD) run_conv_grad(dev, op, (tf_dtype)dt, &c);
                else if (op->shape == SH_POOL_GRAD) run_pool_grad(dev, op, (tf_dtype)dt, &c);
                else if (op->shape == SH_NORM_GRAD) run_norm_grad(dev, op, (tf_dtype)dt, &c);
                else run_attention_grad(dev, op, (tf_dtype)dt, &c);
                c.backward_fallbacks += tf_device_fallback_count(dev, TF_OP_COUNT) - before;
                break;
            }
            case SH_OPTIMIZER: run_optimizer(dev, op, (tf_dtype)dt, &c); break;
            case SH_COMPOSITE: run_composite(dev, op, (tf_dtype)dt, &c); break;
            case SH_CREATE: run_create(dev, op, (tf_dtype)dt, &c); break;
            case SH_QMATMUL_EPILOGUE: {
                uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
                run_qmatmul_epilogue(dev, op, (tf_dtype)dt, &c);
                c.quantized_fallbacks += tf_device_fallback_count(dev, TF_OP_COUNT) - before;
                break;
            }
            case SH_QMATMUL: {
                uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
                run_qmatmul(dev, op, (tf_dtype)dt, &c);
                c.quantized_fallbacks += tf_device_fallback_count(dev, TF_OP_COUNT) - before;
                break;
            }
            }
        }
    }
    uint64_t before = tf_device_fallback_count(dev, TF_OP_COUNT);
    if (n_only_ops == 0) run_quant_casts(dev, &c);
    c.quantized_fallbacks += tf_device_fallback_count(dev, TF_OP_COUNT) - before;
    before = tf_device_fallback_count(dev, TF_OP_COUNT);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (n_only_ops == 0) conformance_complex(dev, rng_next(), &c.passed, &c.failed);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    c.complex_fallbacks = tf_device_fallback_count(dev, TF_OP_COUNT) - before;
    c.complex_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return c;
}

/* The generator is also checked statistically once, on the CPU. */
static void check_rand_statistics(counts *c) {
    tf_device *cpu;
    tf_tensor *u = NULL, *g = NULL;
    int64_t n = 200000;
    double *uv = malloc(sizeof(double) * (size_t)n), *gv = malloc(sizeof(double) * (size_t)n);
    tf_device_get("cpu", &cpu);
    bool ok = tf_rand(cpu, TF_F64, 1, &n, rng_next(), &u) == TF_OK && tf_randn(cpu, TF_F64, 1, &n, rng_next(), &g) == TF_OK &&
              tf_tensor_read(u, uv, sizeof(double) * (size_t)n) == TF_OK &&
              tf_tensor_read(g, gv, sizeof(double) * (size_t)n) == TF_OK;
    double um = 0, uvar = 0, gm = 0, gvar = 0, umin = 1, umax = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        um += uv[i] / n;
        gm += gv[i] / n;
        umin = fmin(umin, uv[i]);
        umax = fmax(umax, uv[i]);
    }
    for (int64_t i = 0; ok && i < n; i++) {
        uvar += (uv[i] - um) * (uv[i] - um) / n;
        gvar += (gv[i] - gm) * (gv[i] - gm) / n;
    }
    /* 6-sigma bounds for n = 200000 */
    ok = ok && fabs(um - 0.5) < 6 * 0.2887 / sqrt(n) && fabs(uvar - 1.0 / 12) < 0.002 && umin >= 0 && umax < 1 &&
         fabs(gm) < 6 / sqrt(n) && fabs(gvar - 1) < 0.02;
    if (ok) c->passed++;
    else {
        c->failed++;
        printf("FAIL rand statistics: uniform mean %g var %g range [%g,%g], normal mean %g var %g\n", um, uvar, umin,
               umax, gm, gvar);
    }
    free(uv);
    free(gv);
    tf_tensor_release(u);
    tf_tensor_release(g);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);                /* a run stopped by a timeout keeps what it printed */
    const char *seed_env = getenv("TF_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    rng_state = seed ? seed : 88172645463325252ull;
    printf("conformance: seed %llu (set TF_TEST_SEED to repeat)\n", (unsigned long long)seed);
    tf_debug_poison_outputs(true);
    if (mybackend_register() != TF_OK) {
        printf("cannot register the example backend: %s\n", tf_last_error());
        return 1;
    }
    tf_device *devices[64];
    int ndev = 0;
    const char *no_fallback[8];                      /* backends whose devices must run every op themselves */
    int n_no_fallback = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--no-fallback") && n_no_fallback < 8) {
            no_fallback[n_no_fallback++] = argv[i + 1];
            continue;
        }
        if (!strcmp(argv[i], "--op") && n_only_ops < 16) {
            only_ops[n_only_ops++] = argv[i + 1];
            continue;
        }
        if (strcmp(argv[i], "--device") || ndev == 64 || tf_device_get(argv[i + 1], &devices[ndev]) != TF_OK) {
            printf("usage: conformance [--device NAME]... [--no-fallback BACKEND]... [--op NAME]...  (%s)\n", tf_last_error());
            return 2;
        }
        ndev++;
    }
    if (ndev == 0)
        for (int i = 0; i < tf_device_count() && i < 64; i++) devices[ndev++] = tf_device_at(i);

    counts total = {0, 0, 0, 0, 0, 0};
    check_rand_statistics(&total);
    bool any_empty = false;
    for (int i = 0; i < ndev; i++) {
        counts c = run_device(devices[i]);
        printf("%s: %d passed, %d failed\n", tf_device_name(devices[i]), c.passed, c.failed);
        printf("  (%llu ops dispatched, %llu ran on the CPU as fallback)\n",
               (unsigned long long)tf_device_op_count(devices[i]),
               (unsigned long long)tf_device_fallback_count(devices[i], TF_OP_COUNT));
        /* A device that does not list the quantized dtypes may hand their ops to the CPU. */
        tf_device_props props;
        tf_device_get_props(devices[i], &props);
        bool runs_quantized = (props.caps.dtypes >> TF_Q4_0) & 1u;
        uint64_t fallbacks = tf_device_fallback_count(devices[i], TF_OP_COUNT) - (runs_quantized ? 0 : c.quantized_fallbacks) -
                             c.complex_fallbacks - c.backward_fallbacks;
        if (c.backward_fallbacks)
            printf("  (%llu of the fallbacks were the BACKWARD family's gradient kernels, which the portable kernels "
                   "do not have yet: autograd composes those gradients on this device)\n",
                   (unsigned long long)c.backward_fallbacks);
        if (c.quantized_fallbacks && !runs_quantized)
            printf("  (%llu of the fallbacks were ops of quantized dtypes, which this device leaves to the CPU)\n",
                   (unsigned long long)c.quantized_fallbacks);
        if (c.complex_fallbacks)
            printf("  (%llu of the fallbacks were ops of complex dtypes, which only the CPU computes; %.1f s)\n",
                   (unsigned long long)c.complex_fallbacks, c.complex_seconds);
        for (int b = 0; b < n_no_fallback; b++) {
            size_t len = strlen(no_fallback[b]);
            const char *name = tf_device_name(devices[i]);
            if (fallbacks && !strncmp(name, no_fallback[b], len) && name[len] == ':') {
                printf("FAIL %s ran %llu ops on the CPU (TF_LOG_LEVEL=info names them)\n", name,
                       (unsigned long long)fallbacks);
                c.failed++;
            }
        }
        if (c.passed + c.failed == 0) {
            printf("FAIL %s ran zero cases\n", tf_device_name(devices[i]));
            any_empty = true;
        }
        total.passed += c.passed;
        total.failed += c.failed;
    }
    printf("conformance: %d passed, %d failed\n", total.passed, total.failed);
    tf_shutdown();
    return total.failed || any_empty ? 1 : 0;
}
