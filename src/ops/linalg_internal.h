/* The complex factorizations (linalg_complex.c) that linalg.c's public
 * functions hand c64 and c128 matrices to, after checking them. */
#ifndef TF_LINALG_INTERNAL_H
#define TF_LINALG_INTERNAL_H

#include "tensorframe/tensorframe.h"

tf_status tf__zlinalg_cholesky(const char *fn, const tf_tensor *a, bool upper, tf_tensor **out);
tf_status tf__zlinalg_solve(const char *fn, const tf_tensor *a, const tf_tensor *b, tf_tensor **out);
tf_status tf__zlinalg_inv(const char *fn, const tf_tensor *a, tf_tensor **out);
tf_status tf__zlinalg_determinants(const char *fn, const tf_tensor *a, tf_tensor **sign, tf_tensor **logdet);
tf_status tf__zlinalg_qr(const char *fn, const tf_tensor *a, bool complete, tf_tensor **q, tf_tensor **r);
tf_status tf__zlinalg_svd(const char *fn, const tf_tensor *a, bool full_matrices, tf_tensor **u, tf_tensor **s_out,
                          tf_tensor **vh);
tf_status tf__zlinalg_eigh(const char *fn, const tf_tensor *a, tf_tensor **eigenvalues, tf_tensor **eigenvectors);

#endif
