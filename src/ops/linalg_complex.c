/* The complex half of linalg.c: the same factorizations of c64 and c128
 * matrices through LAPACK's complex routines (zgetrf, zgetrs, zgetri,
 * zpotrf, zgeqrf, zungqr, zgesdd, zheevd), in double complex whatever the
 * input (c64 results are rounded from it, as f32 ones are from float64).
 *
 * The layout tricks are linalg.c's: a row-major buffer read column-major is
 * the plain transpose A^T (not the conjugate one), so solve factors A^T and
 * solves with TRANS='T'; a Hermitian A read that way is conj(A), whose
 * Cholesky factor read back row-major is A's own, and whose eigenvectors
 * are the conjugates of A's.
 */
#include <complex.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "../engine/engine.h"
#include "linalg_internal.h"

#ifdef TF_HAVE_LAPACK
typedef int lapack_int;
typedef double complex zdouble;
void zpotrf_(const char *uplo, const lapack_int *n, zdouble *a, const lapack_int *lda, lapack_int *info, size_t);
void zgetrf_(const lapack_int *m, const lapack_int *n, zdouble *a, const lapack_int *lda, lapack_int *ipiv,
             lapack_int *info);
void zgetrs_(const char *trans, const lapack_int *n, const lapack_int *nrhs, const zdouble *a, const lapack_int *lda,
             const lapack_int *ipiv, zdouble *b, const lapack_int *ldb, lapack_int *info, size_t);
void zgetri_(const lapack_int *n, zdouble *a, const lapack_int *lda, const lapack_int *ipiv, zdouble *work,
             const lapack_int *lwork, lapack_int *info);
void zgeqrf_(const lapack_int *m, const lapack_int *n, zdouble *a, const lapack_int *lda, zdouble *tau, zdouble *work,
             const lapack_int *lwork, lapack_int *info);
void zungqr_(const lapack_int *m, const lapack_int *n, const lapack_int *k, zdouble *a, const lapack_int *lda,
             const zdouble *tau, zdouble *work, const lapack_int *lwork, lapack_int *info);
void zgesdd_(const char *jobz, const lapack_int *m, const lapack_int *n, zdouble *a, const lapack_int *lda, double *s,
             zdouble *u, const lapack_int *ldu, zdouble *vt, const lapack_int *ldvt, zdouble *work,
             const lapack_int *lwork, double *rwork, lapack_int *iwork, lapack_int *info, size_t);
void zheevd_(const char *jobz, const char *uplo, const lapack_int *n, zdouble *a, const lapack_int *lda, double *w,
             zdouble *work, const lapack_int *lwork, double *rwork, const lapack_int *lrwork, lapack_int *iwork,
             const lapack_int *liwork, lapack_int *info, size_t, size_t);

/* ---- the input, read to the host as double complex ---- */

typedef struct zstack {
    const char *fn;
    tf_device *dev;
    tf_dtype dt;                       /* the input's (c64 or c128): the complex results' */
    int ndim;
    int64_t shape[TF_MAX_DIMS];
    int64_t batch, m, n;
    zdouble *v;                        /* batch * m * n, row-major */
} zstack;

static void *zalloc(const char *fn, int64_t n, size_t size, tf_status *s) {
    void *p = tf__malloc(size * (size_t)(n > 0 ? n : 1));
    if (!p && *s == TF_OK) *s = tf__error(TF_ERR_OUT_OF_MEMORY, "%s: no host memory for LAPACK's work", fn);
    return p;
}

static tf_status read_zstack(const char *fn, const tf_tensor *a, zstack *st) {
    memset(st, 0, sizeof *st);
    st->fn = fn;
    st->dev = tf_tensor_device(a);
    st->dt = tf_dtype_is_complex(a->dtype) ? a->dtype : tf_dtype_to_complex(a->dtype);
    st->ndim = a->ndim;
    memcpy(st->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    st->m = a->shape[a->ndim - 2];
    st->n = a->shape[a->ndim - 1];
    st->batch = 1;
    for (int i = 0; i < a->ndim - 2; i++) st->batch *= a->shape[i];
    int64_t count = st->batch * st->m * st->n;
    tf_status s = TF_OK;
    st->v = zalloc(fn, count, sizeof(zdouble), &s);
    tf_tensor *wide = NULL;
    if (s == TF_OK && a->dtype != TF_C128) s = tf_cast(a, TF_C128, &wide);
    if (s == TF_OK && count) s = tf_tensor_read(wide ? wide : a, st->v, sizeof(zdouble) * (size_t)count);
    tf_tensor_release(wide);
    if (s != TF_OK) {
        tf__free(st->v);
        st->v = NULL;
    }
    return s;
}

/* A result from host values: complex (the input's dtype) or real (its
 * parts' dtype), on the input's device. */
static tf_status make_zresult(const zstack *st, int ndim, const int64_t *shape, const void *v, bool real,
                              tf_tensor **out) {
    tf_dtype host = real ? TF_F64 : TF_C128, want = real ? tf_dtype_to_real(st->dt) : st->dt;
    tf_tensor *t = NULL, *c = NULL;
    tf_status s = tf_tensor_from_data(st->dev, host, ndim, shape, v, &t);
    if (s == TF_OK && want != host) {
        s = tf_cast(t, want, &c);
        tf_tensor_release(t);
        t = c;
    }
    if (s == TF_OK) *out = t;
    return s;
}

static int zresult_shape(const zstack *st, int ntail, const int64_t *tail, int64_t *shape) {
    int nb = st->ndim - 2;
    memcpy(shape, st->shape, sizeof(int64_t) * (size_t)nb);
    if (ntail) memcpy(shape + nb, tail, sizeof(int64_t) * (size_t)ntail);
    return nb + ntail;
}

static void ztranspose(const zdouble *src, int64_t rows, int64_t cols, zdouble *dst) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

static tf_status zfailed(const char *fn, const char *routine, lapack_int info) {
    return tf__error(TF_ERR_BACKEND, "%s: LAPACK's %s refused argument %d", fn, routine, (int)-info);
}

/* LAPACK's workspace query answer as a count (at least `floor`). */
static lapack_int work_count(zdouble q, lapack_int floor) {
    lapack_int n = (lapack_int)creal(q);
    return n > floor ? n : floor;
}

/* ---- cholesky ---- */

tf_status tf__zlinalg_cholesky(const char *fn, const tf_tensor *a, bool upper, tf_tensor **out) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    lapack_int n = (lapack_int)st.n, info = 0;
    const char *uplo = upper ? "L" : "U";
    for (int64_t b = 0; b < st.batch && s == TF_OK; b++) {
        zdouble *m = st.v + b * st.n * st.n;
        if (n) zpotrf_(uplo, &n, m, &n, &info, 1);
        if (info > 0)
            s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is not positive definite (its leading minor of "
                          "order %d is not)", fn, (long long)b, (int)info);
        else if (info < 0) s = zfailed(fn, "zpotrf", info);
        for (int64_t i = 0; i < st.n; i++)
            for (int64_t j = 0; j < st.n; j++)
                if (upper ? j < i : j > i) m[i * st.n + j] = 0;
    }
    if (s == TF_OK) s = make_zresult(&st, st.ndim, st.shape, st.v, false, out);
    tf__free(st.v);
    return s;
}

/* ---- solve, inv, determinants ---- */

tf_status tf__zlinalg_solve(const char *fn, const tf_tensor *a, const tf_tensor *b, tf_tensor **out) {
    zstack sa, sb;
    tf_status s = read_zstack(fn, a, &sa);
    if (s != TF_OK) return s;
    if ((s = read_zstack(fn, b, &sb)) != TF_OK) {
        tf__free(sa.v);
        return s;
    }
    if (sb.dt == TF_C128) sa.dt = TF_C128;
    lapack_int n = (lapack_int)sa.n, k = (lapack_int)sb.n, info = 0;
    zdouble *cb = zalloc(fn, sb.m * sb.n, sizeof(zdouble), &s);
    lapack_int *ipiv = zalloc(fn, n, sizeof(lapack_int), &s);
    for (int64_t i = 0; s == TF_OK && i < sa.batch; i++) {
        zdouble *a_t = sa.v + i * sa.n * sa.n, *rb = sb.v + i * sb.m * sb.n;
        if (n) zgetrf_(&n, &n, a_t, &n, ipiv, &info);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is singular", fn, (long long)i);
        else if (info < 0) s = zfailed(fn, "zgetrf", info);
        if (s != TF_OK || !n || !k) continue;
        ztranspose(rb, sb.m, sb.n, cb);
        zgetrs_("T", &n, &k, a_t, &n, ipiv, cb, &n, &info, 1);
        if (info < 0) s = zfailed(fn, "zgetrs", info);
        ztranspose(cb, sb.n, sb.m, rb);
    }
    if (s == TF_OK) s = make_zresult(&sa, sb.ndim, sb.shape, sb.v, false, out);
    tf__free(ipiv);
    tf__free(cb);
    tf__free(sa.v);
    tf__free(sb.v);
    return s;
}

static tf_status zlu_each(const char *fn, zstack *st, lapack_int *ipiv) {
    lapack_int n = (lapack_int)st->n, info = 0;
    for (int64_t b = 0; b < st->batch && n; b++) {
        zgetrf_(&n, &n, st->v + b * st->n * st->n, &n, ipiv + b * st->n, &info);
        if (info < 0) return zfailed(fn, "zgetrf", info);
    }
    return TF_OK;
}

tf_status tf__zlinalg_inv(const char *fn, const tf_tensor *a, tf_tensor **out) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    lapack_int n = (lapack_int)st.n, info = 0, lwork = -1;
    lapack_int *ipiv = zalloc(fn, st.batch * st.n + 1, sizeof(lapack_int), &s);
    if (s == TF_OK) s = zlu_each(fn, &st, ipiv);
    zdouble query = 0, *work = NULL;
    if (s == TF_OK && n) {
        zgetri_(&n, st.v, &n, ipiv, &query, &lwork, &info);
        lwork = work_count(query, n);
        work = zalloc(fn, lwork, sizeof(zdouble), &s);
    }
    for (int64_t b = 0; s == TF_OK && n && b < st.batch; b++) {
        zgetri_(&n, st.v + b * st.n * st.n, &n, ipiv + b * st.n, work, &lwork, &info);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld is singular", fn, (long long)b);
        else if (info < 0) s = zfailed(fn, "zgetri", info);
    }
    if (s == TF_OK) s = make_zresult(&st, st.ndim, st.shape, st.v, false, out);
    tf__free(work);
    tf__free(ipiv);
    tf__free(st.v);
    return s;
}

/* The determinant (logdet NULL) or its sign, a complex number of modulus 1
 * (0 for a singular matrix), and log|det| (real). */
tf_status tf__zlinalg_determinants(const char *fn, const tf_tensor *a, tf_tensor **sign, tf_tensor **logdet) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    lapack_int *ipiv = zalloc(fn, st.batch * st.n + 1, sizeof(lapack_int), &s);
    zdouble *sg = zalloc(fn, st.batch, sizeof(zdouble), &s);
    double *logabs = zalloc(fn, st.batch, sizeof(double), &s);
    if (s == TF_OK) s = zlu_each(fn, &st, ipiv);
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        const zdouble *m = st.v + b * st.n * st.n;
        zdouble phase = 1, det = 1;
        double la = 0;
        for (int64_t i = 0; i < st.n; i++) {
            zdouble u = m[i * st.n + i];
            double mod = cabs(u);
            if (ipiv[b * st.n + i] != (lapack_int)(i + 1)) {       /* a row swap */
                phase = -phase;
                det = -det;
            }
            phase *= mod > 0 ? u / mod : 0;
            la += log(mod);
            det *= u;
        }
        sg[b] = logdet ? (la == -INFINITY ? 0 : phase) : det;
        logabs[b] = la;
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = zresult_shape(&st, 0, NULL, shape);
    if (s == TF_OK) s = make_zresult(&st, nd, shape, sg, false, sign);
    if (s == TF_OK && logdet && (s = make_zresult(&st, nd, shape, logabs, true, logdet)) != TF_OK) {
        tf_tensor_release(*sign);
        *sign = NULL;
    }
    tf__free(logabs);
    tf__free(sg);
    tf__free(ipiv);
    tf__free(st.v);
    return s;
}

/* ---- qr ---- */

tf_status tf__zlinalg_qr(const char *fn, const tf_tensor *a, bool complete, tf_tensor **q, tf_tensor **r) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    int64_t M = st.m, N = st.n, K = M < N ? M : N, qc = complete ? M : K, rr = complete ? M : K;
    int64_t wide = N > qc ? N : qc;
    lapack_int m = (lapack_int)M, n = (lapack_int)N, k = (lapack_int)K, qcols = (lapack_int)qc, info = 0;
    lapack_int lwork = -1;
    zdouble query = 0, *work = NULL;
    zdouble *col = zalloc(fn, M * wide + K + 1, sizeof(zdouble), &s), *tau = col ? col + M * wide : NULL;
    zdouble *qv = zalloc(fn, st.batch * M * qc, sizeof(zdouble), &s);
    zdouble *rv = zalloc(fn, st.batch * rr * N, sizeof(zdouble), &s);
    if (s == TF_OK && M && N) {
        zgeqrf_(&m, &n, col, &m, tau, &query, &lwork, &info);
        lapack_int need = work_count(query, 1);
        lwork = -1;
        zungqr_(&m, &qcols, &k, col, &m, tau, &query, &lwork, &info);
        lwork = work_count(query, need);
        work = zalloc(fn, lwork, sizeof(zdouble), &s);
    }
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        zdouble *qb = qv + b * M * qc, *rb = rv + b * rr * N;
        memset(col, 0, sizeof(zdouble) * (size_t)(M * wide));
        ztranspose(st.v + b * M * N, M, N, col);
        if (M && N) zgeqrf_(&m, &n, col, &m, tau, work, &lwork, &info);
        if (info < 0) s = zfailed(fn, "zgeqrf", info);
        for (int64_t i = 0; i < rr; i++)
            for (int64_t j = 0; j < N; j++) rb[i * N + j] = i <= j && i < K ? col[j * M + i] : 0;
        if (s == TF_OK && M) {
            if (K) zungqr_(&m, &qcols, &k, col, &m, tau, work, &lwork, &info);
            else for (int64_t i = 0; i < M * qc; i++) col[i] = i % (M + 1) == 0;
            if (info < 0) s = zfailed(fn, "zungqr", info);
            ztranspose(col, qc, M, qb);
        }
    }
    int64_t qshape[TF_MAX_DIMS], rshape[TF_MAX_DIMS];
    int nq = zresult_shape(&st, 2, (int64_t[]){M, qc}, qshape), nr = zresult_shape(&st, 2, (int64_t[]){rr, N}, rshape);
    if (s == TF_OK) s = make_zresult(&st, nq, qshape, qv, false, q);
    if (s == TF_OK && (s = make_zresult(&st, nr, rshape, rv, false, r)) != TF_OK) {
        tf_tensor_release(*q);
        *q = NULL;
    }
    tf__free(work);
    tf__free(rv);
    tf__free(qv);
    tf__free(col);
    tf__free(st.v);
    return s;
}

/* ---- svd: A^T = U' S V'^H gives A = (V'^H)^T S U'^T, plain transposes ---- */

tf_status tf__zlinalg_svd(const char *fn, const tf_tensor *a, bool full_matrices, tf_tensor **u, tf_tensor **s_out,
                          tf_tensor **vh) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    int64_t M = st.m, N = st.n, K = M < N ? M : N, L = M > N ? M : N;
    int64_t uc = !u ? 0 : full_matrices ? M : K, vr = !u ? 0 : full_matrices ? N : K;
    const char *jobz = !u ? "N" : full_matrices ? "A" : "S";
    lapack_int m = (lapack_int)M, n = (lapack_int)N, ldu = m ? m : 1, ldvt = vr ? (lapack_int)vr : 1, info = 0;
    lapack_int lwork = -1;
    zdouble query = 0, *work = NULL;
    zdouble *col = zalloc(fn, M * N + M * uc + vr * N, sizeof(zdouble), &s);
    double *sv = zalloc(fn, st.batch * K, sizeof(double), &s);
    zdouble *uv = zalloc(fn, st.batch * M * uc, sizeof(zdouble), &s);
    zdouble *vv = zalloc(fn, st.batch * vr * N, sizeof(zdouble), &s);
    lapack_int *iwork = zalloc(fn, 8 * K + 1, sizeof(lapack_int), &s);
    /* rwork: LAPACK's bound for jobz != 'N', 5K for 'N' (and a floor) */
    double *rwork = zalloc(fn, K * (5 * K + 7 > 2 * L + 2 * K + 1 ? 5 * K + 7 : 2 * L + 2 * K + 1) + 7 * K + 16,
                           sizeof(double), &s);
    zdouble *cu = col ? col + M * N : NULL, *cv = cu ? cu + M * uc : NULL;
    if (s == TF_OK && K) {
        zgesdd_(jobz, &m, &n, col, &m, sv, cu, &ldu, cv, &ldvt, &query, &lwork, rwork, iwork, &info, 1);
        lwork = work_count(query, 1);
        work = zalloc(fn, lwork, sizeof(zdouble), &s);
    }
    for (int64_t b = 0; s == TF_OK && b < st.batch; b++) {
        zdouble *ub = uv + b * M * uc, *vb = vv + b * vr * N;
        ztranspose(st.v + b * M * N, M, N, col);
        if (K) zgesdd_(jobz, &m, &n, col, &m, sv + b * K, cu, &ldu, cv, &ldvt, work, &lwork, rwork, iwork, &info, 1);
        else {
            for (int64_t i = 0; i < M * uc; i++) cu[i] = i % (M + 1) == 0;
            for (int64_t i = 0; i < vr * N; i++) cv[i] = i % (vr + 1) == 0;
        }
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: the SVD of matrix %lld did not converge", fn,
                                    (long long)b);
        else if (info < 0) s = zfailed(fn, "zgesdd", info);
        if (u) {
            ztranspose(cu, uc, M, ub);
            ztranspose(cv, N, vr, vb);
        }
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = zresult_shape(&st, 1, &K, shape);
    if (s == TF_OK) s = make_zresult(&st, nd, shape, sv, true, s_out);
    if (s == TF_OK && u) {
        nd = zresult_shape(&st, 2, (int64_t[]){M, uc}, shape);
        s = make_zresult(&st, nd, shape, uv, false, u);
        nd = zresult_shape(&st, 2, (int64_t[]){vr, N}, shape);
        if (s == TF_OK) s = make_zresult(&st, nd, shape, vv, false, vh);
        if (s != TF_OK) {
            tf_tensor_release(*u);
            tf_tensor_release(*s_out);
            *u = *s_out = NULL;
        }
    }
    tf__free(work);
    tf__free(rwork);
    tf__free(iwork);
    tf__free(vv);
    tf__free(uv);
    tf__free(sv);
    tf__free(col);
    tf__free(st.v);
    return s;
}

/* ---- eigh: zheevd on conj(A) (the buffer read column-major); A's
 * eigenvectors are the conjugates of the ones it finds ---- */

tf_status tf__zlinalg_eigh(const char *fn, const tf_tensor *a, tf_tensor **eigenvalues, tf_tensor **eigenvectors) {
    zstack st;
    tf_status s = read_zstack(fn, a, &st);
    if (s != TF_OK) return s;
    int64_t N = st.n;
    lapack_int n = (lapack_int)N, info = 0, lwork = -1, lrwork = -1, liwork = -1, iquery = 0;
    const char *jobz = eigenvectors ? "V" : "N";
    zdouble query = 0, *work = NULL;
    double rquery = 0, *rwork = NULL;
    double *w = zalloc(fn, st.batch * N, sizeof(double), &s);
    lapack_int *iwork = NULL;
    if (s == TF_OK && N) {
        zheevd_(jobz, "U", &n, st.v, &n, w, &query, &lwork, &rquery, &lrwork, &iquery, &liwork, &info, 1, 1);
        lwork = work_count(query, 1);
        lrwork = (lapack_int)rquery > 1 ? (lapack_int)rquery : 1;
        liwork = iquery > 1 ? iquery : 1;
        work = zalloc(fn, lwork, sizeof(zdouble), &s);
        rwork = zalloc(fn, lrwork, sizeof(double), &s);
        iwork = zalloc(fn, liwork, sizeof(lapack_int), &s);
    }
    for (int64_t b = 0; s == TF_OK && N && b < st.batch; b++) {
        zdouble *m = st.v + b * N * N;
        zheevd_(jobz, "U", &n, m, &n, w + b * N, work, &lwork, rwork, &lrwork, iwork, &liwork, &info, 1, 1);
        if (info > 0) s = tf__error(TF_ERR_INVALID_ARGUMENT, "%s: matrix %lld did not converge", fn, (long long)b);
        else if (info < 0) s = zfailed(fn, "zheevd", info);
        if (s == TF_OK && eigenvectors)           /* columns to row-major, conjugated */
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = i; j < N; j++) {
                    zdouble t = m[i * N + j];
                    m[i * N + j] = conj(m[j * N + i]);
                    m[j * N + i] = conj(t);
                }
    }
    int64_t shape[TF_MAX_DIMS];
    int nd = zresult_shape(&st, 1, &N, shape);
    if (s == TF_OK) s = make_zresult(&st, nd, shape, w, true, eigenvalues);
    if (s == TF_OK && eigenvectors && (s = make_zresult(&st, st.ndim, st.shape, st.v, false, eigenvectors)) != TF_OK) {
        tf_tensor_release(*eigenvalues);
        *eigenvalues = NULL;
    }
    tf__free(iwork);
    tf__free(rwork);
    tf__free(work);
    tf__free(w);
    tf__free(st.v);
    return s;
}
#endif
