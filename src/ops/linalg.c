/* Dense linear algebra: Cholesky, solve, inverse, determinants, QR, SVD and
 * the symmetric eigenproblem, through LAPACK (the reference routines that
 * OpenBLAS ships), not hand-written: these are decades of numerical care we
 * would only get wrong.
 *
 * The matrices are read to the host, factored there in float64 whatever
 * their dtype (f32 inputs come out rounded from a float64 result, more
 * accurate than LAPACK's single precision, at twice its cost; 16-bit
 * floats are widened), and the results are made on the input's device in
 * its dtype. A stack (..., M, N) is factored matrix by matrix.
 *
 * Complex matrices (c64, c128) go to linalg_complex.c, the same steps with
 * LAPACK's complex routines.
 *
 * LAPACK is column-major and our tensors row-major: a row-major buffer read
 * as column-major is the transpose, which several routines can use as it
 * is (det, inv, cholesky); the others get an explicit transposed copy.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../engine/engine.h"
#include "linalg_internal.h"

#ifdef TF_HAVE_LAPACK
/* The Fortran interface (LP64: 32-bit integers; gfortran's hidden string
 * lengths last). */
typedef int lapack_int;
void dpotrf_(const char *uplo, const lapack_int *n, double *a, const lapack_int *lda, lapack_int *info, size_t);
void dgesv_(const lapack_int *n, const lapack_int *nrhs, double *a, const lapack_int *lda, lapack_int *ipiv, double *b,
            const lapack_int *ldb, lapack_int *info);
void dgetrf_(const lapack_int *m, const lapack_int *n, double *a, const lapack_int *lda, lapack_int *ipiv,
             lapack_int *info);
void dgetrs_(const char *trans, const lapack_int *n, const lapack_int *nrhs, const double *a, const lapack_int *lda,
             const lapack_int *ipiv, double *b, const lapack_int *ldb, lapack_int *info, size_t);
void dgetri_(const lapack_int *n, double *a, const lapack_int *lda, const lapack_int *ipiv, double *work,
             const lapack_int *lwork, lapack_int *info);
void dgeqrf_(const lapack_int *m, const lapack_int *n, double *a, const lapack_int *lda, double *tau, double *work,
             const lapack_int *lwork, lapack_int *info);
void dorgqr_(const lapack_int *m, const lapack_int *n, const lapack_int *k, double *a, const lapack_int *lda,
             const double *tau, double *work, const lapack_int *lwork, lapack_int *info);
void dgesdd_(const char *jobz, const lapack_int *m, const lapack_int *n, double *a, const lapack_int *lda, double *s,
             double *u, const lapack_int *ldu, double *vt, const lapack_int *ldvt, double *work,
             const lapack_int *lwork, lapack_int *iwork, lapack_int *info, size_t);
void dsyevd_(const char *jobz, const char *uplo, const lapack_int *n, double *a, const lapack_int *lda, double *w,
             double *work, const lapack_int *lwork, lapack_int *iwork, const lapack_int *liwork, lapack_int *info,
             size_t, size_t);
#endif

static tf_status check_matrix(const char *fn, const tf_tensor *a, bool square) {
    if (!a) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (!tf_dtype_is_float(a->dtype) && !tf_dtype_is_complex(a->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: takes floating-point or complex matrices (got %s)", fn,
                         tf_dtype_name(a->dtype));
    if (a->ndim < 2)
        return tf__error(TF_ERR_SHAPE, "%s: takes a matrix or a stack of them (got %d-d)", fn, a->ndim);
    int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1];
    if (square && m != n) return tf__error(TF_ERR_SHAPE, "%s: the matrices must be square (got %lld x %lld)", fn,
                                           (long long)m, (long long)n);
    if (m > INT_MAX / 2 || n > INT_MAX / 2)
        return tf__error(TF_ERR_SHAPE, "%s: matrices past 2^30 rows or columns are beyond LAPACK's 32-bit sizes", fn);
    return TF_OK;
}

#ifdef TF_HAVE_LAPACK
/* ---- the input, read to the host in float64 ---- */

typedef struct stack {
    const char *fn;
    tf_device *dev;
    tf_dtype dt;                       /* the input's: the results' */
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t batch, m, n;
    double *v;                         /* batch * m * n, row-major */
} stack;

static tf_status read_stack(const char *fn, const tf_tensor *a, stack *st) {
    memset(st, 0, sizeof *st);
    st->fn = fn;
    st->dev = tf_tensor_device(a);
    st->dt = a->dtype;
    st->ndim = a->ndim;
    memcpy(st->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    st->m = a->shape[a->ndim - 2];
    st->n = a->shape[a->ndim - 1];
    st->batch = 1;
    for (int i = 0; i < a->ndim - 2; i++) st->batch *= a->shape[i];
    int64_t count = st->batch * st->m * st->n;
    st->v = tf__malloc(sizeof(double) * (size_t)(count ? count : 1));
    if (!st->v) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the matrices", fn);
    tf_tensor *wide = NULL;                         /* 16-bit floats are read as f32 */
    tf_status s = a->dtype == TF_F64 || a->dtype == TF_F32 ? TF_OK : tf_cast(a, TF_F32, &wide);
    const tf_tensor *src = wide ? wide : a;
    if (s == TF_OK && count) {
        if (src->dtype == TF_F64) s = tf_tensor_read(src, st->v, sizeof(double) * (size_t)count);
        else {
            float *f = tf__malloc(sizeof(float) * (size_t)count);
            s = f ? tf_tensor_read(src, f, sizeof(float) * (size_t)count)
                  : tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the matrices", fn);
            for (int64_t i = 0; f && s == TF_OK && i < count; i++) st->v[i] = f[i];
            tf__free(f);
        }
    }
    tf_tensor_release(wide);
    if (s != TF_OK) {
        tf__free(st->v);
        st->v = NULL;
    }
    return s;
}

/* A result of `shape` from host float64 values, on the input's device in its
 * dtype (a 16-bit input's results through f32). */
static tf_status make_result(const stack *st, int ndim, const int64_t *shape, const double *v, tf_tensor **out) {
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) count *= shape[i];
    tf_dtype made = st->dt == TF_F64 ? TF_F64 : TF_F32;
    tf_status s;
    tf_tensor *t = NULL;
    if (made == TF_F64) s = tf_tensor_from_data(st->dev, TF_F64, ndim, shape, v, &t);
    else {
        float *f = tf__malloc(sizeof(float) * (size_t)(count ? count : 1));
        if (!f) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for the result", st->fn);
        for (int64_t i = 0; i < count; i++) f[i] = (float)v[i];
        s = tf_tensor_from_data(st->dev, TF_F32, ndim, shape, f, &t);
        tf__free(f);
    }
    if (s == TF_OK && made != st->dt) {
        tf_tensor *c = NULL;
        s = tf_cast(t, st->dt, &c);
        tf_tensor_release(t);
        t = c;
    }
    if (s == TF_OK) *out = t;
    return s;
}

/* The stack's batch shape followed by `tail`. */
static int result_shape(const stack *st, int ntail, const int64_t *tail, int64_t *shape) {
    int nb = st->ndim - 2;
    memcpy(shape, st->shape, sizeof(int64_t) * (size_t)nb);
    if (ntail) memcpy(shape + nb, tail, sizeof(int64_t) * (size_t)ntail);   /* det's scalars have no tail */
    return nb + ntail;
}

static void transpose(const double *src, int64_t rows, int64_t cols, double *dst) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

#endif

#ifndef TF_HAVE_LAPACK
static tf_status no_lapack(const char *fn) {
    return tf__error(TF_ERR_UNSUPPORTED, "%s: this build has no LAPACK (built without OpenBLAS)", fn);
}
#endif

#ifdef TF_HAVE_LAPACK
/* Host scratch of n doubles, counted as the library's allocations. */
static double *scratch(const char *fn, int64_t n, tf_status *s) {
    double *p = tf__malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!p) *s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's work", fn);
    return p;
}

static tf_status lapack_failed(const char *fn, const char *routine, lapack_int info) {
    return tf__error(TF_ERR_BACKEND, "%s: LAPACK's %s refused argument %d", fn, routine, (int)-info);
}
#endif

/* ---- cholesky ---- */

tf_status tf_linalg_cholesky(const tf_tensor *a, bool upper, tf_tensor **out) {
    static const char fn[] = "tf_linalg_cholesky";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_status s = check_matrix(fn, a, true);
    if (s != TF_OK) return s;
    TF__GRAD(fn, out, tf_linalg_cholesky(a, upper, out),
             (ga_.rule = TF__GRAD_LINALG, ga_.i[0] = TF__GRAD_CHOLESKY, ga_.i[1] = upper), a);
#ifndef TF_HAVE_LAPACK
    (void)upper;
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_cholesky(fn, a, upper, out));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    lapack_int n = (lapack_int)st.n, info = 0;
    /* the row-major buffer read column-major is A itself (symmetric): LAPACK's
     * upper factor read back row-major is the lower one, and the other way */
    const char *uplo = upper ? "L" : "U";
    for (int64_t b = 0; b < st.batch && s == TF_OK; b++) {
        double *m = st.v + b * st.n * st.n;
        if (n) dpotrf_(uplo, &n, m, &n, &info, 1);
        if (info > 0)
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is not positive definite (its leading minor of "
                          "order %d is not)", fn, (long long)b, (int)info);
        else if (info < 0) s = lapack_failed(fn, "dpotrf", info);
        for (int64_t i = 0; i < st.n; i++)          /* the other triangle is zero */
            for (int64_t j = 0; j < st.n; j++)
                if (upper ? j < i : j > i) m[i * st.n + j] = 0;
    }
    if (s == TF_OK) s = make_result(&st, st.ndim, st.shape, st.v, out);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

/* ---- solve, inv, det ---- */

tf_status tf_linalg_solve(const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    static const char fn[] = "tf_linalg_solve";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_status s = check_matrix(fn, a, true);
    if (s == TF_OK) s = check_matrix(fn, b, false);
    if (s != TF_OK) return s;
    bool same_batch = a->ndim == b->ndim && b->shape[b->ndim - 2] == a->shape[a->ndim - 1];
    for (int i = 0; same_batch && i < a->ndim - 2; i++) same_batch = a->shape[i] == b->shape[i];
    if (!same_batch) {
        char sa[256], sb[256];
        return tf__error(TF_ERR_SHAPE, "%s: b must be (..., M, K) with a's (..., M, M) batch (got %s and %s; "
                         "broadcast them first)", fn, tf__shape_str(a->ndim, a->shape, sa, sizeof sa),
                         tf__shape_str(b->ndim, b->shape, sb, sizeof sb));
    }
    TF__GRAD(fn, out, tf_linalg_solve(a, b, out), (ga_.rule = TF__GRAD_LINALG, ga_.i[0] = TF__GRAD_SOLVE), a, b);
#ifndef TF_HAVE_LAPACK
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype) || tf_dtype_is_complex(b->dtype))
        return tf__in(fn, tf__zlinalg_solve(fn, a, b, out));
    stack sa, sb;
    if ((s = read_stack(fn, a, &sa)) != TF_OK) return s;
    if ((s = read_stack(fn, b, &sb)) != TF_OK) {
        tf__free(sa.v);
        return s;
    }
    if (b->dtype == TF_F64) sa.dt = TF_F64;        /* the result's dtype: the wider input's */
    /* The row-major A read column-major is A^T: factor that in place and
     * solve with its transpose (dgetrs TRANS='T'), so only the narrow B
     * moves through column-major scratch. */
    lapack_int n = (lapack_int)sa.n, k = (lapack_int)sb.n, info = 0;
    double *cb = scratch(fn, sb.m * sb.n, &s);
    lapack_int *ipiv = cb ? tf__malloc(sizeof(lapack_int) * (size_t)(n ? n : 1)) : NULL;
    if (cb && !ipiv) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's pivots", fn);
    for (int64_t i = 0; s == TF_OK && i < sa.batch; i++) {
        double *a_t = sa.v + i * sa.n * sa.n, *rb = sb.v + i * sb.m * sb.n;
        if (n) dgetrf_(&n, &n, a_t, &n, ipiv, &info);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is singular", fn, (long long)i);
        else if (info < 0) s = lapack_failed(fn, "dgetrf", info);
        if (s != TF_OK || !n || !k) continue;
        transpose(rb, sb.m, sb.n, cb);
        dgetrs_("T", &n, &k, a_t, &n, ipiv, cb, &n, &info, 1);
        if (info < 0) s = lapack_failed(fn, "dgetrs", info);
        transpose(cb, sb.n, sb.m, rb);
    }
    if (s == TF_OK) s = make_result(&sa, sb.ndim, sb.shape, sb.v, out);
    tf__free(ipiv);
    tf__free(cb);
    tf__free(sa.v);
    tf__free(sb.v);
    return tf__in(fn, s);
#endif
}

#ifdef TF_HAVE_LAPACK
/* LU of each matrix in place (of its transpose, which has the same
 * determinant and whose inverse is the inverse's transpose); ipiv holds n
 * pivots per matrix. Singular matrices are not an error here. */
static tf_status lu_each(const char *fn, stack *st, lapack_int *ipiv) {
    lapack_int n = (lapack_int)st->n, info = 0;
    for (int64_t b = 0; b < st->batch && n; b++) {
        dgetrf_(&n, &n, st->v + b * st->n * st->n, &n, ipiv + b * st->n, &info);
        if (info < 0) return lapack_failed(fn, "dgetrf", info);
    }
    return TF_OK;
}
#endif

tf_status tf_linalg_inv(const tf_tensor *a, tf_tensor **out) {
    static const char fn[] = "tf_linalg_inv";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_status s = check_matrix(fn, a, true);
    if (s != TF_OK) return s;
    TF__GRAD(fn, out, tf_linalg_inv(a, out), (ga_.rule = TF__GRAD_LINALG, ga_.i[0] = TF__GRAD_INV), a);
#ifndef TF_HAVE_LAPACK
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_inv(fn, a, out));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    lapack_int n = (lapack_int)st.n, info = 0, lwork = -1;
    lapack_int *ipiv = tf__malloc(sizeof(lapack_int) * (size_t)(st.batch * st.n + 1));
    if (!ipiv) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's pivots", fn);
    if (s == TF_OK) s = lu_each(fn, &st, ipiv);
    double query = 0, *work = NULL;
    if (s == TF_OK && n) {
        dgetri_(&n, st.v, &n, ipiv, &query, &lwork, &info);
        lwork = (lapack_int)query > n ? (lapack_int)query : n;
        work = scratch(fn, lwork, &s);
    }
    for (int64_t b = 0; s == TF_OK && n && b < st.batch; b++) {
        dgetri_(&n, st.v + b * st.n * st.n, &n, ipiv + b * st.n, work, &lwork, &info);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is singular", fn, (long long)b);
        else if (info < 0) s = lapack_failed(fn, "dgetri", info);
    }
    if (s == TF_OK) s = make_result(&st, st.ndim, st.shape, st.v, out);
    tf__free(work);
    tf__free(ipiv);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

/* sign and log|det| of each matrix; logdet NULL: the determinant into sign. */
static tf_status determinants(const char *fn, const tf_tensor *a, tf_tensor **sign, tf_tensor **logdet) {
    tf_status s = check_matrix(fn, a, true);
    if (s != TF_OK) return s;
#ifndef TF_HAVE_LAPACK
    (void)sign; (void)logdet;
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_determinants(fn, a, sign, logdet));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    lapack_int *ipiv = tf__malloc(sizeof(lapack_int) * (size_t)(st.batch * st.n + 1));
    double *res = scratch(fn, 2 * st.batch, &s);
    if (!ipiv && s == TF_OK) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's pivots", fn);
    if (s == TF_OK) s = lu_each(fn, &st, ipiv);
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        const double *m = st.v + b * st.n * st.n;
        double sg = 1, logabs = 0, det = 1;
        for (int64_t i = 0; i < st.n; i++) {
            double u = m[i * st.n + i];
            if (ipiv[b * st.n + i] != (lapack_int)(i + 1)) sg = -sg;   /* a row swap */
            if (u < 0) sg = -sg;
            logabs += log(fabs(u));
            det *= u;
        }
        if (logabs == -INFINITY) sg = 0;
        bool swapped_odd = false;
        for (int64_t i = 0; i < st.n; i++) swapped_odd ^= ipiv[b * st.n + i] != (lapack_int)(i + 1);
        res[b] = logdet ? sg : (swapped_odd ? -det : det);
        res[st.batch + b] = logabs;
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = result_shape(&st, 0, NULL, shape);
    if (s == TF_OK) s = make_result(&st, nd, shape, res, sign);
    if (s == TF_OK && logdet) {
        s = make_result(&st, nd, shape, res + st.batch, logdet);
        if (s != TF_OK) {
            tf_tensor_release(*sign);
            *sign = NULL;
        }
    }
    tf__free(res);
    tf__free(ipiv);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

tf_status tf_linalg_det(const tf_tensor *a, tf_tensor **out) {
    static const char fn[] = "tf_linalg_det";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    TF__GRAD(fn, out, tf_linalg_det(a, out), (ga_.rule = TF__GRAD_LINALG, ga_.i[0] = TF__GRAD_DET), a);
    return determinants(fn, a, out, NULL);
}

tf_status tf_linalg_slogdet(const tf_tensor *a, tf_tensor **sign, tf_tensor **logabsdet) {
    static const char fn[] = "tf_linalg_slogdet";
    if (!sign || !logabsdet) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: an output pointer is NULL", fn);
    *sign = *logabsdet = NULL;
    if (!a || !tf__grad_wanted(1, &a)) return determinants(fn, a, sign, logabsdet);
    tf__grad_pause();                    /* log|det| is recorded; the sign takes no gradient */
    tf_status s = determinants(fn, a, sign, logabsdet);
    tf__grad_resume();
    tf__grad_args ga = {.rule = TF__GRAD_LINALG, .i = {TF__GRAD_LOGDET}};
    s = tf__grad_finish(fn, s, &ga, 1, &a, logabsdet);
    if (s != TF_OK) {
        tf_tensor_release(*sign);
        *sign = NULL;
    }
    return s;
}

/* ---- qr ---- */

static tf_status linalg_qr(const tf_tensor *a, bool complete, tf_tensor **q, tf_tensor **r) {
    static const char fn[] = "tf_linalg_qr";
    if (!q || !r) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: an output pointer is NULL", fn);
    *q = *r = NULL;
    tf_status s = check_matrix(fn, a, false);
    if (s != TF_OK) return s;
#ifndef TF_HAVE_LAPACK
    (void)complete;
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_qr(fn, a, complete, q, r));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    int64_t M = st.m, N = st.n, K = M < N ? M : N, qc = complete ? M : K, rr = complete ? M : K;
    int64_t wide = N > qc ? N : qc;                 /* columns of the factored copy: A's, then Q's */
    lapack_int m = (lapack_int)M, n = (lapack_int)N, k = (lapack_int)K, qcols = (lapack_int)qc, info = 0;
    lapack_int lwork = -1;
    double query = 0;
    double *col = scratch(fn, M * wide + K + 1, &s), *tau = col ? col + M * wide : NULL;
    double *qv = s == TF_OK ? scratch(fn, st.batch * M * qc, &s) : NULL;
    double *rv = s == TF_OK ? scratch(fn, st.batch * rr * N, &s) : NULL;
    double *work = NULL;
    if (s == TF_OK && M && N) {
        dgeqrf_(&m, &n, col, &m, tau, &query, &lwork, &info);
        lapack_int need = (lapack_int)query;
        lwork = -1;
        dorgqr_(&m, &qcols, &k, col, &m, tau, &query, &lwork, &info);
        lwork = (lapack_int)query > need ? (lapack_int)query : need;
        if (lwork < 1) lwork = 1;
        work = scratch(fn, lwork, &s);
    }
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        double *qb = qv + b * M * qc, *rb = rv + b * rr * N;
        memset(col, 0, sizeof(double) * (size_t)(M * wide));
        transpose(st.v + b * M * N, M, N, col);
        if (M && N) dgeqrf_(&m, &n, col, &m, tau, work, &lwork, &info);
        if (info < 0) s = lapack_failed(fn, "dgeqrf", info);
        for (int64_t i = 0; i < rr; i++)            /* R: the upper triangle, row-major */
            for (int64_t j = 0; j < N; j++) rb[i * N + j] = i <= j && i < K ? col[j * M + i] : 0;
        if (s == TF_OK && M) {
            if (K) dorgqr_(&m, &qcols, &k, col, &m, tau, work, &lwork, &info);
            else for (int64_t i = 0; i < M * qc; i++) col[i] = i % (M + 1) == 0;   /* no reflectors: I */
            if (info < 0) s = lapack_failed(fn, "dorgqr", info);
            transpose(col, qc, M, qb);
        }
    }
    int64_t qshape[TF_MAX_DIMS], rshape[TF_MAX_DIMS];
    int nq = result_shape(&st, 2, (int64_t[]){M, qc}, qshape), nr = result_shape(&st, 2, (int64_t[]){rr, N}, rshape);
    if (s == TF_OK) s = make_result(&st, nq, qshape, qv, q);
    if (s == TF_OK && (s = make_result(&st, nr, rshape, rv, r)) != TF_OK) {
        tf_tensor_release(*q);
        *q = NULL;
    }
    tf__free(work);
    tf__free(rv);
    tf__free(qv);
    tf__free(col);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

/* ---- svd ---- */

static tf_status linalg_svd(const tf_tensor *a, bool full_matrices, tf_tensor **u, tf_tensor **s_out, tf_tensor **vh) {
    static const char fn[] = "tf_linalg_svd";
    if (!s_out || (!u) != (!vh)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: s is needed, and u and vh together", fn);
    *s_out = NULL;
    if (u) *u = *vh = NULL;
    tf_status s = check_matrix(fn, a, false);
    if (s != TF_OK) return s;
#ifndef TF_HAVE_LAPACK
    (void)full_matrices;
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_svd(fn, a, full_matrices, u, s_out, vh));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    int64_t M = st.m, N = st.n, K = M < N ? M : N;
    int64_t uc = !u ? 0 : full_matrices ? M : K, vr = !u ? 0 : full_matrices ? N : K;
    const char *jobz = !u ? "N" : full_matrices ? "A" : "S";
    lapack_int m = (lapack_int)M, n = (lapack_int)N, ldu = m ? m : 1, ldvt = vr ? (lapack_int)vr : 1, info = 0;
    lapack_int lwork = -1;
    double query = 0;
    double *col = scratch(fn, M * N + M * uc + vr * N, &s);
    double *sv = s == TF_OK ? scratch(fn, st.batch * K, &s) : NULL;
    double *uv = s == TF_OK ? scratch(fn, st.batch * M * uc, &s) : NULL;
    double *vv = s == TF_OK ? scratch(fn, st.batch * vr * N, &s) : NULL;
    lapack_int *iwork = s == TF_OK ? tf__malloc(sizeof(lapack_int) * (size_t)(8 * K + 1)) : NULL;
    if (s == TF_OK && !iwork) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's work", fn);
    double *work = NULL, *cu = col ? col + M * N : NULL, *cv = cu ? cu + M * uc : NULL;
    if (s == TF_OK && K) {
        dgesdd_(jobz, &m, &n, col, &m, sv, cu, &ldu, cv, &ldvt, &query, &lwork, iwork, &info, 1);
        lwork = (lapack_int)query > 1 ? (lapack_int)query : 1;
        work = scratch(fn, lwork, &s);
    }
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        double *ub = uv + b * M * uc, *vb = vv + b * vr * N;
        transpose(st.v + b * M * N, M, N, col);
        if (K) dgesdd_(jobz, &m, &n, col, &m, sv + b * K, cu, &ldu, cv, &ldvt, work, &lwork, iwork, &info, 1);
        else {                                      /* an empty matrix: no values, identity factors */
            for (int64_t i = 0; i < M * uc; i++) cu[i] = i % (M + 1) == 0;
            for (int64_t i = 0; i < vr * N; i++) cv[i] = i % (vr + 1) == 0;
        }
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the SVD of matrix %lld did not converge", fn,
                                    (long long)b);
        else if (info < 0) s = lapack_failed(fn, "dgesdd", info);
        if (u) {
            transpose(cu, uc, M, ub);               /* column-major M x uc to row-major */
            transpose(cv, N, vr, vb);               /* column-major vr x N to row-major */
        }
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = result_shape(&st, 1, &K, shape);
    if (s == TF_OK) s = make_result(&st, nd, shape, sv, s_out);
    if (s == TF_OK && u) {
        nd = result_shape(&st, 2, (int64_t[]){M, uc}, shape);
        s = make_result(&st, nd, shape, uv, u);
        nd = result_shape(&st, 2, (int64_t[]){vr, N}, shape);
        if (s == TF_OK) s = make_result(&st, nd, shape, vv, vh);
        if (s != TF_OK) {
            tf_tensor_release(*u);
            tf_tensor_release(*s_out);
            *u = *s_out = NULL;
        }
    }
    tf__free(work);
    tf__free(iwork);
    tf__free(vv);
    tf__free(uv);
    tf__free(sv);
    tf__free(col);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

/* ---- eigh ---- */

static tf_status linalg_eigh(const tf_tensor *a, tf_tensor **eigenvalues, tf_tensor **eigenvectors) {
    static const char fn[] = "tf_linalg_eigh";
    if (!eigenvalues) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: eigenvalues is NULL", fn);
    *eigenvalues = NULL;
    if (eigenvectors) *eigenvectors = NULL;
    tf_status s = check_matrix(fn, a, true);
    if (s != TF_OK) return s;
#ifndef TF_HAVE_LAPACK
    return no_lapack(fn);
#else
    if (tf_dtype_is_complex(a->dtype)) return tf__in(fn, tf__zlinalg_eigh(fn, a, eigenvalues, eigenvectors));
    stack st;
    if ((s = read_stack(fn, a, &st)) != TF_OK) return s;
    int64_t N = st.n;
    lapack_int n = (lapack_int)N, info = 0, lwork = -1, liwork = -1, iquery = 0;
    /* the row-major lower triangle (NumPy's UPLO='L') is LAPACK's upper one */
    const char *jobz = eigenvectors ? "V" : "N";
    double query = 0, *work = NULL;
    double *w = scratch(fn, st.batch * N, &s);
    lapack_int *iwork = NULL;
    if (s == TF_OK && N) {
        dsyevd_(jobz, "U", &n, st.v, &n, w, &query, &lwork, &iquery, &liwork, &info, 1, 1);
        lwork = (lapack_int)query > 1 ? (lapack_int)query : 1;
        liwork = iquery > 1 ? iquery : 1;
        work = scratch(fn, lwork, &s);
        iwork = s == TF_OK ? tf__malloc(sizeof(lapack_int) * (size_t)liwork) : NULL;
        if (s == TF_OK && !iwork) s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's work", fn);
    }
    for (int64_t b = 0; s == TF_OK && N && b < st.batch; b++) {
        double *m = st.v + b * N * N;
        dsyevd_(jobz, "U", &n, m, &n, w + b * N, work, &lwork, iwork, &liwork, &info, 1, 1);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld did not converge", fn, (long long)b);
        else if (info < 0) s = lapack_failed(fn, "dsyevd", info);
        if (s == TF_OK && eigenvectors)             /* LAPACK's columns are the vectors: row-major, transposed */
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = i + 1; j < N; j++) {
                    double t = m[i * N + j];
                    m[i * N + j] = m[j * N + i];
                    m[j * N + i] = t;
                }
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = result_shape(&st, 1, &N, shape);
    if (s == TF_OK) s = make_result(&st, nd, shape, w, eigenvalues);
    if (s == TF_OK && eigenvectors && (s = make_result(&st, st.ndim, st.shape, st.v, eigenvectors)) != TF_OK) {
        tf_tensor_release(*eigenvalues);
        *eigenvalues = NULL;
    }
    tf__free(iwork);
    tf__free(work);
    tf__free(w);
    tf__free(st.v);
    return tf__in(fn, s);
#endif
}

/* ---- what autograd cannot differentiate yet ---- */

/* The outputs of a function without a gradient rule, marked so that
 * tf_backward refuses it by name rather than miss its input's gradient
 * (a failure releases them all). */
static tf_status no_rule_outputs(const char *fn, tf_status s, const tf_tensor *a, int n, tf_tensor **const *outs) {
    if (s != TF_OK) return s;
    for (int i = 0; i < n && s == TF_OK; i++)
        if (outs[i]) s = tf__grad_no_rule(fn, 1, &a, outs[i]);
    if (s != TF_OK)
        for (int i = 0; i < n; i++)
            if (outs[i]) {
                tf_tensor_release(*outs[i]);
                *outs[i] = NULL;
            }
    return s;
}

tf_status tf_linalg_qr(const tf_tensor *a, bool complete, tf_tensor **q, tf_tensor **r) {
    return no_rule_outputs("tf_linalg_qr", linalg_qr(a, complete, q, r), a, 2, (tf_tensor **const[]){q, r});
}

tf_status tf_linalg_svd(const tf_tensor *a, bool full_matrices, tf_tensor **u, tf_tensor **s_out, tf_tensor **vh) {
    return no_rule_outputs("tf_linalg_svd", linalg_svd(a, full_matrices, u, s_out, vh), a, 3,
                           (tf_tensor **const[]){u, s_out, vh});
}

tf_status tf_linalg_eigh(const tf_tensor *a, tf_tensor **eigenvalues, tf_tensor **eigenvectors) {
    return no_rule_outputs("tf_linalg_eigh", linalg_eigh(a, eigenvalues, eigenvectors), a, 2,
                           (tf_tensor **const[]){eigenvalues, eigenvectors});
}
