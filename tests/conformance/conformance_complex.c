/* Conformance of the complex dtypes (c64, c128) on one device: every op
 * that takes them, against a reference computed here in long double
 * complex from the textbook formulas (exp(x)(cos y + i sin y), the
 * logarithm of the modulus and the argument, Kahan's forms of the inverse
 * functions), not from the library's or libm's complex functions.
 *
 * Inputs are fresh random values whose parts lie in +-[0.1, 2]: off the
 * branch cuts (every cut is on an axis) and away from the cancellations a
 * formula would bring. Layouts: contiguous, transposed, broadcast and
 * size 0. Errors are measured as NMSE = sum |got - ref|^2 / sum |ref|^2 over
 * a case, against k * eps^2 of the output's parts (exact ops: 0). */
#define _GNU_SOURCE   /* M_PI */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

#include "conformance_complex.h"

typedef long double complex lz;

static uint64_t state;
static uint64_t next_u64(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}
static double unit(void) { return (double)(next_u64() >> 11) * 0x1p-53; }
/* A part: +-[0.1, 2], either sign. */
static double part(void) { return (next_u64() & 1 ? -1 : 1) * (0.1 + 1.9 * unit()); }

static const char *device_name;
static int *n_passed, *n_failed;

static void fail(const char *what, const char *dt, const char *why) {
    (*n_failed)++;
    printf("FAIL %s complex %s %s: %s\n", device_name, what, dt, why);
}

/* ---- host values and tensors ---- */

typedef struct values {
    tf_dtype dt;
    int ndim;
    int64_t shape[4];
    int64_t n;
    lz *v;
    long double *mag;              /* sums and products: sum of |terms| per value (NULL: |value|) */
} values;

static int64_t count(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

static values make_values(tf_dtype dt, int ndim, const int64_t *shape) {
    values h = {dt, ndim, {0}, count(ndim, shape), NULL, NULL};
    memcpy(h.shape, shape, sizeof(int64_t) * (size_t)ndim);
    h.v = calloc((size_t)(h.n ? h.n : 1), sizeof *h.v);
    return h;
}

/* The value as the dtype holds it (parts rounded to f32 for c64). */
static lz rounded(tf_dtype dt, lz z) {
    switch (dt) {
    case TF_C64: return (float)creall(z) + I * (long double)(float)cimagl(z);
    case TF_C128: return (double)creall(z) + I * (long double)(double)cimagl(z);
    case TF_F32: return (float)creall(z);
    case TF_F64: return (double)creall(z);
    case TF_I32: return (int32_t)creall(z);
    default: return z;
    }
}

static void encode(tf_dtype dt, lz z, unsigned char *p) {
    switch (dt) {
    case TF_C64: { float f[2] = {(float)creall(z), (float)cimagl(z)}; memcpy(p, f, 8); break; }
    case TF_C128: { double d[2] = {(double)creall(z), (double)cimagl(z)}; memcpy(p, d, 16); break; }
    case TF_F32: { float f = (float)creall(z); memcpy(p, &f, 4); break; }
    case TF_F64: { double d = (double)creall(z); memcpy(p, &d, 8); break; }
    case TF_I32: { int32_t i = (int32_t)creall(z); memcpy(p, &i, 4); break; }
    case TF_I64: { int64_t i = (int64_t)creall(z); memcpy(p, &i, 8); break; }
    case TF_BOOL: *p = creall(z) != 0 || cimagl(z) != 0; break;
    default: break;
    }
}

static lz decode(tf_dtype dt, const unsigned char *p) {
    switch (dt) {
    case TF_C64: { float f[2]; memcpy(f, p, 8); return f[0] + I * (long double)f[1]; }
    case TF_C128: { double d[2]; memcpy(d, p, 16); return d[0] + I * (long double)d[1]; }
    case TF_F32: { float f; memcpy(&f, p, 4); return f; }
    case TF_F64: { double d; memcpy(&d, p, 8); return d; }
    case TF_I32: { int32_t i; memcpy(&i, p, 4); return i; }
    case TF_I64: { int64_t i; memcpy(&i, p, 8); return i; }
    case TF_BOOL: return *p;
    default: return NAN;
    }
}

/* Random values of dt (real dtypes: the real part only; i32: small integers). */
static values random_values(tf_dtype dt, int ndim, const int64_t *shape) {
    values h = make_values(dt, ndim, shape);
    for (int64_t i = 0; i < h.n; i++) {
        lz z = part() + I * (long double)part();
        if (dt == TF_I32) z = (int)(next_u64() % 3) + 1, z = next_u64() & 1 ? -z : z;   /* nonzero: divisors */
        h.v[i] = rounded(dt, z);
    }
    return h;
}

/* The tensor of h on dev; transposed: stored as the reverse shape and
 * viewed back through tf_permute (2-d and up), so the kernel sees strides. */
static tf_tensor *upload(tf_device *dev, const values *h, bool transposed) {
    int nd = h->ndim;
    transposed = transposed && nd >= 2;
    int64_t st[4];
    for (int d = 0; d < nd; d++) st[d] = transposed ? h->shape[nd - 1 - d] : h->shape[d];
    size_t es = tf_dtype_size(h->dt);
    unsigned char *bytes = calloc((size_t)(h->n ? h->n : 1), es);
    int64_t idx[4] = {0};
    for (int64_t i = 0; i < h->n; i++) {
        int64_t off = 0;                             /* the element's place in the stored (reversed) order */
        for (int d = 0; d < nd; d++) off = off * st[d] + (transposed ? idx[nd - 1 - d] : idx[d]);
        encode(h->dt, h->v[i], bytes + off * (int64_t)es);
        for (int d = nd - 1; d >= 0 && ++idx[d] == h->shape[d]; d--) idx[d] = 0;
    }
    tf_tensor *t = NULL, *v = NULL;
    if (tf_empty(dev, h->dt, nd, st, &t) != TF_OK || tf_tensor_write(t, bytes, (size_t)h->n * es) != TF_OK) {
        free(bytes);
        tf_tensor_release(t);
        return NULL;
    }
    free(bytes);
    if (!transposed) return t;
    int perm[4];
    for (int d = 0; d < nd; d++) perm[d] = nd - 1 - d;
    tf_permute(t, perm, &v);
    tf_tensor_release(t);
    return v;
}

static double eps_of(tf_dtype dt) { return dt == TF_C64 || dt == TF_F32 ? 0x1p-23 : 0x1p-52; }

/* Checks out against ref: dtype, shape, then NMSE <= k eps^2 (k = 0: every
 * element equal, NaN matching NaN), the error measured against the sum of
 * the terms' moduli where a value is a sum (a small sum of large terms
 * keeps the terms' rounding). Frees ref and releases out. */
static void check(const char *what, tf_status s, tf_tensor *out, values *ref, double k) {
    char why[256] = "";
    const char *dn = tf_dtype_name(ref->dt);
    if (s != TF_OK) snprintf(why, sizeof why, "returned %s: %s", tf_status_name(s), tf_last_error());
    else if (tf_tensor_dtype(out) != ref->dt)
        snprintf(why, sizeof why, "dtype %s, expected %s", tf_dtype_name(tf_tensor_dtype(out)), dn);
    else if (tf_tensor_ndim(out) != ref->ndim ||
             memcmp(tf_tensor_shape(out), ref->shape, sizeof(int64_t) * (size_t)ref->ndim))
        snprintf(why, sizeof why, "wrong shape");
    else {
        size_t es = tf_dtype_size(ref->dt), bytes = (size_t)(ref->n ? ref->n : 1) * es;
        unsigned char *got = malloc(bytes);
        if (tf_tensor_read(out, got, bytes) != TF_OK) snprintf(why, sizeof why, "read: %s", tf_last_error());
        long double num = 0, den = 0;
        for (int64_t i = 0; !why[0] && i < ref->n; i++) {
            lz g = decode(ref->dt, got + i * (int64_t)es), r = ref->v[i];
            bool gn = isnan(creall(g)) || isnan(cimagl(g)), rn = isnan(creall(r)) || isnan(cimagl(r));
            if (gn || rn) {
                if (!(gn && rn)) snprintf(why, sizeof why, "element %lld: NaN where the other is not", (long long)i);
                continue;
            }
            if (k == 0 && (creall(g) != creall(r) || cimagl(g) != cimagl(r)))
                snprintf(why, sizeof why, "element %lld: got %Lg%+Lgi, expected %Lg%+Lgi", (long long)i, creall(g),
                         cimagl(g), creall(r), cimagl(r));
            long double d = cabsl(g - r), m = ref->mag ? ref->mag[i] : cabsl(r);
            num += d * d;
            den += m * m;
        }
        double e = eps_of(ref->dt), nmse = den > 0 ? (double)(num / den) : (double)num;
        if (!why[0] && k > 0 && nmse > k * e * e)
            snprintf(why, sizeof why, "NMSE %.3g > %g eps^2 (%.3g eps^2)", nmse, k, nmse / (e * e));
        free(got);
    }
    if (why[0]) fail(what, dn, why);
    else (*n_passed)++;
    free(ref->v);
    free(ref->mag);
    tf_tensor_release(out);
}

/* ---- the reference functions ---- */

static lz ref_exp(lz z) { return expl(creall(z)) * (cosl(cimagl(z)) + I * sinl(cimagl(z))); }
static lz ref_log(lz z) { return logl(hypotl(creall(z), cimagl(z))) + I * atan2l(cimagl(z), creall(z)); }
static lz ref_sqrt(lz z) {
    long double x = creall(z), y = cimagl(z), r = hypotl(x, y);
    return sqrtl((r + x) / 2) + I * copysignl(sqrtl((r - x) / 2), y);
}
static lz ref_asin(lz z) { return -I * ref_log(I * z + ref_sqrt(1 - z) * ref_sqrt(1 + z)); }
static lz ref_atan(lz z) { return 0.5L * I * (ref_log(1 - I * z) - ref_log(1 + I * z)); }

static lz ref_unary(tf_op_kind k, lz z) {
    long double x = creall(z), y = cimagl(z);
    switch (k) {
    case TF_OP_NEG: return -x - I * y;
    case TF_OP_CONJ: return x - I * y;
    case TF_OP_REAL: return x;
    case TF_OP_IMAG: return y;
    case TF_OP_ABS: return hypotl(x, y);
    case TF_OP_SIGN: return z / hypotl(x, y);
    case TF_OP_ROUND: return rintl(x) + I * rintl(y);
    case TF_OP_EXP: return ref_exp(z);
    case TF_OP_EXPM1: return ref_exp(z) - 1;
    case TF_OP_LOG: return ref_log(z);
    case TF_OP_LOG1P: return ref_log(1 + z);
    case TF_OP_SQRT: return ref_sqrt(z);
    case TF_OP_SIN: return sinl(x) * coshl(y) + I * cosl(x) * sinhl(y);
    case TF_OP_COS: return cosl(x) * coshl(y) - I * sinl(x) * sinhl(y);
    case TF_OP_TANH: return (sinhl(2 * x) + I * sinl(2 * y)) / (coshl(2 * x) + cosl(2 * y));
    case TF_OP_ASIN: return ref_asin(z);
    case TF_OP_ACOS: return M_PI / 2 - ref_asin(z);
    case TF_OP_ATAN: return ref_atan(z);
    case TF_OP_ASINH: return -I * ref_asin(I * z);
    case TF_OP_ACOSH: return ref_log(z + ref_sqrt(z + 1) * ref_sqrt(z - 1));
    case TF_OP_ATANH: return -I * ref_atan(I * z);
    default: return NAN;
    }
}

typedef tf_status (*unary_fn)(const tf_tensor *, tf_tensor **);
static const struct { tf_op_kind kind; const char *name; unary_fn fn; double k; } unaries[] = {
    {TF_OP_NEG, "neg", tf_neg, 0},       {TF_OP_CONJ, "conj", tf_conj, 0},     {TF_OP_REAL, "real", tf_real, 0},
    {TF_OP_IMAG, "imag", tf_imag, 0},    {TF_OP_ABS, "abs", tf_abs, 1},        {TF_OP_SIGN, "sign", tf_sign, 4},
    {TF_OP_ROUND, "round", tf_round, 0}, {TF_OP_EXP, "exp", tf_exp, 16},       {TF_OP_EXPM1, "expm1", tf_expm1, 16},
    {TF_OP_LOG, "log", tf_log, 16},      {TF_OP_LOG1P, "log1p", tf_log1p, 16}, {TF_OP_SQRT, "sqrt", tf_sqrt, 4},
    {TF_OP_SIN, "sin", tf_sin, 16},      {TF_OP_COS, "cos", tf_cos, 16},       {TF_OP_TANH, "tanh", tf_tanh, 16},
    {TF_OP_ASIN, "asin", tf_asin, 16},   {TF_OP_ACOS, "acos", tf_acos, 16},    {TF_OP_ATAN, "atan", tf_atan, 16},
    {TF_OP_ASINH, "asinh", tf_asinh, 16}, {TF_OP_ACOSH, "acosh", tf_acosh, 16}, {TF_OP_ATANH, "atanh", tf_atanh, 16},
};

static bool real_result(tf_op_kind k) { return k == TF_OP_ABS || k == TF_OP_REAL || k == TF_OP_IMAG; }

static void run_unaries(tf_device *dev, tf_dtype dt) {
    static const int64_t shape[2] = {7, 5}, empty[2] = {0, 3};
    for (size_t u = 0; u < sizeof unaries / sizeof *unaries; u++)
        for (int lay = 0; lay < 3; lay++) {
            values x = random_values(dt, 2, lay == 2 ? empty : shape);
            tf_tensor *t = upload(dev, &x, lay == 1), *out = NULL;
            tf_dtype odt = real_result(unaries[u].kind) ? (dt == TF_C64 ? TF_F32 : TF_F64) : dt;
            values ref = make_values(odt, 2, x.shape);
            for (int64_t i = 0; i < x.n; i++) ref.v[i] = rounded(odt, ref_unary(unaries[u].kind, x.v[i]));
            tf_status s = t ? unaries[u].fn(t, &out) : TF_ERR_OUT_OF_MEMORY;
            char what[64];
            snprintf(what, sizeof what, "%s %s", unaries[u].name, lay == 0 ? "contiguous" : lay == 1 ? "transposed" : "empty");
            check(what, s, out, &ref, odt == TF_F32 || odt == TF_F64 ? (unaries[u].k ? 1 : 0) : unaries[u].k);
            free(x.v);
            tf_tensor_release(t);
        }
}

/* ---- binary ops, with broadcasting and a real or complex partner ---- */

typedef tf_status (*binary_fn)(const tf_tensor *, const tf_tensor *, tf_tensor **);
static const struct { const char *name; binary_fn fn; double k; int op; } binaries[] = {
    {"add", tf_add, 1, '+'}, {"sub", tf_sub, 1, '-'}, {"mul", tf_mul, 4, '*'}, {"div", tf_div, 4, '/'},
    {"pow", tf_pow, 64, '^'}, {"eq", tf_eq, 0, '='}, {"ne", tf_ne, 0, '!'},
};

static lz ref_binary(int op, lz a, lz b) {
    switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    case '/': return a / b;
    case '^': return ref_exp(b * ref_log(a));
    case '=': return a == b;
    default: return a != b;
    }
}

static tf_dtype promoted(tf_dtype a, tf_dtype b) {
    bool wide = a == TF_C128 || b == TF_C128 || a == TF_F64 || b == TF_F64;
    return wide ? TF_C128 : TF_C64;
}

static void run_binaries(tf_device *dev, tf_dtype dt) {
    static const tf_dtype partners[] = {TF_C64, TF_C128, TF_F64, TF_F32, TF_I32};
    static const struct { int na, nb; int64_t a[2], b[2]; } shapes[] = {
        {2, 2, {4, 5}, {4, 5}}, {2, 1, {4, 5}, {5}}, {2, 2, {4, 1}, {1, 5}}, {2, 1, {0, 5}, {5}},
    };
    for (size_t o = 0; o < sizeof binaries / sizeof *binaries; o++)
        for (size_t p = 0; p < sizeof partners / sizeof *partners; p++)
            for (size_t sc = 0; sc < sizeof shapes / sizeof *shapes; sc++) {
                tf_dtype pd = partners[p];
                values a = random_values(dt, shapes[sc].na, shapes[sc].a), b = random_values(pd, shapes[sc].nb, shapes[sc].b);
                bool ties = binaries[o].op == '=' || binaries[o].op == '!';
                for (int64_t i = 0; ties && i < a.n && i < b.n; i += 2) a.v[i] = rounded(dt, b.v[i]);
                tf_tensor *ta = upload(dev, &a, sc == 0), *tb = upload(dev, &b, false), *out = NULL;
                tf_dtype odt = ties ? TF_BOOL : promoted(dt, pd);
                int64_t oshape[2] = {shapes[sc].a[0], shapes[sc].nb == 2 ? shapes[sc].b[1] : shapes[sc].b[0]};
                values ref = make_values(odt, 2, oshape);
                for (int64_t i = 0; i < ref.n; i++) {
                    int64_t r = i / oshape[1], c = i % oshape[1];
                    lz av = a.v[(shapes[sc].a[1] == 1 ? 0 : c) + r * shapes[sc].a[1]];
                    lz bv = shapes[sc].nb == 1 ? b.v[c] : b.v[(b.shape[0] == 1 ? 0 : r) * b.shape[1] + (b.shape[1] == 1 ? 0 : c)];
                    if (!ties) {                      /* the promoted dtype's values, as the library converts */
                        av = rounded(odt, av);
                        bv = rounded(odt, bv);
                    }
                    ref.v[i] = rounded(odt, ref_binary(binaries[o].op, av, bv));
                }
                tf_status s = ta && tb ? binaries[o].fn(ta, tb, &out) : TF_ERR_OUT_OF_MEMORY;
                char what[96];
                snprintf(what, sizeof what, "%s with %s [%lldx%lld]", binaries[o].name, tf_dtype_name(pd),
                         (long long)oshape[0], (long long)oshape[1]);
                check(what, s, out, &ref, binaries[o].k);
                free(a.v);
                free(b.v);
                tf_tensor_release(ta);
                tf_tensor_release(tb);
            }
}

/* ---- reductions ---- */

static void run_reductions(tf_device *dev, tf_dtype dt) {
    typedef tf_status (*reduce_fn)(const tf_tensor *, int, bool, tf_tensor **);
    static const struct { const char *name; reduce_fn fn; } reds[] = {{"sum", tf_sum}, {"prod", tf_prod}, {"mean", tf_mean}};
    static const int64_t shape[2] = {6, 9}, empty[2] = {0, 4};
    static const int axes[] = {0, 1, TF_ALL_AXES};
    for (size_t r = 0; r < 3; r++)
        for (int e = 0; e < 2; e++)
            for (size_t ai = 0; ai < 3; ai++) {
                if (e && r == 2) continue;           /* the mean of nothing is an error, as for reals */
                values x = random_values(dt, 2, e ? empty : shape);
                for (int64_t i = 0; r == 1 && i < x.n; i++)       /* products: factors near the unit circle */
                    x.v[i] = rounded(dt, ref_exp(I * (long double)part()) * (1 + 0.05L * part()));
                tf_tensor *t = upload(dev, &x, ai == 1), *out = NULL;
                int ax = axes[ai];
                int64_t oshape[2] = {ax == 1 ? x.shape[0] : 1, ax == 0 ? x.shape[1] : 1};
                int ond = ax == TF_ALL_AXES ? 0 : 1;
                int64_t keep = ax == 0 ? x.shape[1] : x.shape[0];
                values ref = make_values(dt, ond, ax == 0 ? &oshape[1] : oshape);
                int64_t len = ax == TF_ALL_AXES ? x.n : x.shape[ax];
                ref.mag = calloc((size_t)(ref.n ? ref.n : 1), sizeof *ref.mag);
                for (int64_t o = 0; o < ref.n; o++) {
                    lz acc = r == 1 ? 1 : 0;
                    long double mag = r == 1 ? 1 : 0;
                    for (int64_t j = 0; j < len; j++) {
                        int64_t i = ax == TF_ALL_AXES ? j : ax == 0 ? j * x.shape[1] + o : o * x.shape[1] + j;
                        acc = r == 1 ? acc * x.v[i] : acc + x.v[i];
                        mag = r == 1 ? mag * cabsl(x.v[i]) : mag + cabsl(x.v[i]);
                    }
                    ref.v[o] = rounded(dt, r == 2 ? acc / len : acc);
                    ref.mag[o] = r == 2 ? mag / len : mag;
                }
                (void)keep;
                tf_status s = t ? reds[r].fn(t, ax, false, &out) : TF_ERR_OUT_OF_MEMORY;
                char what[64];
                snprintf(what, sizeof what, "%s axis %d%s", reds[r].name, ax, e ? " of nothing" : "");
                check(what, s, out, &ref, 4.0 * (double)(len > 1 ? len : 1));
                free(x.v);
                tf_tensor_release(t);
            }
}

/* ---- matmul and gemm ---- */

static void run_products(tf_device *dev, tf_dtype dt) {
    static const struct { int64_t m, k, n; bool ta, tb; } cases[] = {
        {4, 6, 3, false, false}, {5, 8, 7, true, false}, {3, 4, 6, false, true}, {1, 9, 1, true, true},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int gemm = 0; gemm < 2; gemm++) {
            int64_t m = cases[ci].m, k = cases[ci].k, n = cases[ci].n;
            int64_t as[2] = {m, k}, bs[2] = {k, n}, cs[2] = {m, n};
            values a = random_values(dt, 2, as), b = random_values(dt, 2, bs), c = random_values(dt, 2, cs);
            /* gemm's transpose flags read the stored matrix transposed: store a^T, b^T there */
            bool ta = gemm && cases[ci].ta, tb = gemm && cases[ci].tb;
            values at = make_values(dt, 2, (int64_t[2]){k, m}), bt = make_values(dt, 2, (int64_t[2]){n, k});
            for (int64_t i = 0; i < m * k; i++) at.v[(i % k) * m + i / k] = a.v[i];
            for (int64_t i = 0; i < k * n; i++) bt.v[(i % n) * k + i / n] = b.v[i];
            tf_tensor *tA = upload(dev, ta ? &at : &a, !gemm && cases[ci].ta);
            tf_tensor *tB = upload(dev, tb ? &bt : &b, !gemm && cases[ci].tb);
            tf_tensor *tC = upload(dev, &c, false), *out = NULL;
            double alpha = 0.5, beta = -2.0;
            values ref = make_values(dt, 2, cs);
            ref.mag = calloc((size_t)(m * n), sizeof *ref.mag);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    lz acc = 0;
                    long double mag = 0;
                    for (int64_t p = 0; p < k; p++) {
                        acc += a.v[i * k + p] * b.v[p * n + j];
                        mag += cabsl(a.v[i * k + p]) * cabsl(b.v[p * n + j]);
                    }
                    ref.v[i * n + j] = rounded(dt, gemm ? alpha * acc + beta * c.v[i * n + j] : acc);
                    ref.mag[i * n + j] = gemm ? fabsl(alpha) * mag + fabsl(beta) * cabsl(c.v[i * n + j]) : mag;
                }
            tf_status s = !tA || !tB || !tC ? TF_ERR_OUT_OF_MEMORY
                          : gemm ? tf_gemm(tA, tB, tC, alpha, beta, ta, tb, &out)
                                 : tf_matmul(tA, tB, &out);
            char what[96];
            snprintf(what, sizeof what, "%s %lldx%lldx%lld%s%s", gemm ? "gemm" : "matmul", (long long)m, (long long)k,
                     (long long)n, cases[ci].ta ? " a^T" : "", cases[ci].tb ? " b^T" : "");
            check(what, s, out, &ref, 4.0 * (double)k + 8);
            free(a.v); free(b.v); free(c.v); free(at.v); free(bt.v);
            tf_tensor_release(tA);
            tf_tensor_release(tB);
            tf_tensor_release(tC);
        }
}

/* ---- casts, parts, predicates, selection ---- */

static void run_casts(tf_device *dev, tf_dtype dt) {
    static const tf_dtype to[] = {TF_C64, TF_C128, TF_F32, TF_F64, TF_I32, TF_BOOL};
    static const int64_t shape[2] = {5, 6};
    for (size_t i = 0; i < sizeof to / sizeof *to; i++) {
        values x = random_values(dt, 2, shape);
        x.v[0] = 0;                                  /* bool: a zero, and parts zero one at a time */
        x.v[1] = rounded(dt, I * 1.5L);
        x.v[2] = 1.5L;
        tf_tensor *t = upload(dev, &x, true), *out = NULL;
        values ref = make_values(to[i], 2, shape);
        for (int64_t j = 0; j < x.n; j++)
            ref.v[j] = to[i] == TF_BOOL ? (lz)(creall(x.v[j]) != 0 || cimagl(x.v[j]) != 0)
                       : to[i] == TF_I32 ? (lz)(int32_t)creall(x.v[j]) : rounded(to[i], x.v[j]);
        tf_status s = t ? tf_cast(t, to[i], &out) : TF_ERR_OUT_OF_MEMORY;
        char what[64];
        snprintf(what, sizeof what, "cast to %s", tf_dtype_name(to[i]));
        check(what, s, out, &ref, 0);
        free(x.v);
        tf_tensor_release(t);
    }
    /* real to complex: imaginary part zero */
    static const tf_dtype from[] = {TF_F32, TF_F64, TF_I32, TF_BOOL};
    for (size_t i = 0; i < sizeof from / sizeof *from; i++) {
        values x = random_values(from[i] == TF_BOOL ? TF_I32 : from[i], 2, shape);
        x.dt = from[i];
        for (int64_t j = 0; from[i] == TF_BOOL && j < x.n; j++) x.v[j] = creall(x.v[j]) != 0;
        tf_tensor *t = upload(dev, &x, false), *out = NULL;
        values ref = make_values(dt, 2, shape);
        for (int64_t j = 0; j < x.n; j++) ref.v[j] = rounded(dt, creall(x.v[j]));
        tf_status s = t ? tf_cast(t, dt, &out) : TF_ERR_OUT_OF_MEMORY;
        char what[64];
        snprintf(what, sizeof what, "cast from %s", tf_dtype_name(from[i]));
        check(what, s, out, &ref, 0);
        free(x.v);
        tf_tensor_release(t);
    }
}

static void run_predicates_and_picks(tf_device *dev, tf_dtype dt) {
    static const int64_t shape[2] = {4, 6};
    values x = random_values(dt, 2, shape);
    long double special[] = {INFINITY, -INFINITY, NAN};
    for (int j = 0; j < 6; j++)                      /* specials in either part */
        x.v[j * 3 % 24] = j % 2 ? creall(x.v[j]) + I * special[j % 3] : special[j % 3] + I * cimagl(x.v[j]);
    x.v[5] = 0;
    tf_tensor *t = upload(dev, &x, true), *out = NULL;
    typedef tf_status (*pred_fn)(const tf_tensor *, tf_tensor **);
    static const struct { const char *name; pred_fn fn; int which; } preds[] = {
        {"isnan", tf_isnan, 0}, {"isinf", tf_isinf, 1}, {"logical_not", tf_logical_not, 2}};
    for (int p = 0; p < 3; p++) {
        values ref = make_values(TF_BOOL, 2, shape);
        for (int64_t j = 0; j < x.n; j++) {
            long double a = creall(x.v[j]), b = cimagl(x.v[j]);
            ref.v[j] = preds[p].which == 0 ? (isnan(a) || isnan(b)) : preds[p].which == 1 ? (isinf(a) || isinf(b))
                                                                                           : (a == 0 && b == 0);
        }
        tf_status ps = t ? preds[p].fn(t, &out) : TF_ERR_OUT_OF_MEMORY;
        check(preds[p].name, ps, out, &ref, 0);
        out = NULL;
    }
    /* where, index_select, tril move whole elements */
    values y = random_values(dt, 2, shape), cond = random_values(TF_I32, 1, &shape[1]);
    cond.dt = TF_BOOL;
    for (int64_t j = 0; j < cond.n; j++) cond.v[j] = creall(cond.v[j]) > 0;
    tf_tensor *ty = upload(dev, &y, false), *tc = upload(dev, &cond, false);
    values ref = make_values(dt, 2, shape);
    for (int64_t j = 0; j < ref.n; j++) ref.v[j] = creall(cond.v[j % 6]) != 0 ? x.v[j] : y.v[j];
    tf_status s = t && ty && tc ? tf_where(tc, t, ty, &out) : TF_ERR_OUT_OF_MEMORY;
    check("where", s, out, &ref, 0);
    out = NULL;
    int64_t picks[3] = {2, 0, 2}, pshape[1] = {3};
    tf_tensor *ti = NULL;
    s = tf_empty(tf_tensor_device(ty), TF_I64, 1, pshape, &ti);
    if (s == TF_OK) s = tf_tensor_write(ti, picks, sizeof picks);
    ref = make_values(dt, 2, (int64_t[2]){3, 6});
    for (int64_t j = 0; j < ref.n; j++) ref.v[j] = y.v[picks[j / 6] * 6 + j % 6];
    if (s == TF_OK) s = tf_index_select(ty, 0, ti, &out);
    check("index_select", s, out, &ref, 0);
    out = NULL;
    ref = make_values(dt, 2, shape);
    for (int64_t j = 0; j < ref.n; j++) ref.v[j] = j % 6 <= j / 6 ? x.v[j] : 0;
    s = t ? tf_tril(t, 0, &out) : TF_ERR_OUT_OF_MEMORY;
    check("tril", s, out, &ref, 0);
    out = NULL;
    /* parts: tf_complex(real, imag) rebuilds y; view_as_real exposes its parts */
    tf_tensor *re = NULL, *im = NULL, *pairs = NULL;
    s = tf_real(ty, &re);
    if (s == TF_OK) s = tf_imag(ty, &im);
    ref = make_values(dt, 2, shape);
    memcpy(ref.v, y.v, sizeof *ref.v * (size_t)y.n);
    if (s == TF_OK) s = tf_complex(re, im, &out);
    check("complex(real, imag)", s, out, &ref, 0);
    out = NULL;
    tf_dtype pdt = dt == TF_C64 ? TF_F32 : TF_F64;
    ref = make_values(pdt, 3, (int64_t[3]){4, 6, 2});
    for (int64_t j = 0; j < ref.n; j++) ref.v[j] = j % 2 ? cimagl(y.v[j / 2]) : creall(y.v[j / 2]);
    s = tf_view_as_real(ty, &pairs);
    if (s == TF_OK) s = tf_contiguous(pairs, &out);
    check("view_as_real", s, out, &ref, 0);
    tf_tensor_release(pairs);
    tf_tensor_release(re);
    tf_tensor_release(im);
    tf_tensor_release(ti);
    tf_tensor_release(ty);
    tf_tensor_release(tc);
    tf_tensor_release(t);
    free(x.v);
    free(y.v);
    free(cond.v);
}

void conformance_complex(tf_device *dev, uint64_t seed, int *passed, int *failed) {
    state = seed ? seed : 0x9e3779b97f4a7c15ull;
    device_name = tf_device_name(dev);
    n_passed = passed;
    n_failed = failed;
    static const tf_dtype dts[] = {TF_C64, TF_C128};
    for (int d = 0; d < 2; d++) {
        run_unaries(dev, dts[d]);
        run_binaries(dev, dts[d]);
        run_reductions(dev, dts[d]);
        run_products(dev, dts[d]);
        run_casts(dev, dts[d]);
        run_predicates_and_picks(dev, dts[d]);
    }
}
