/* See blas_plan.h. */
#include "blas_plan.h"

#include <limits.h>
#include <string.h>

/* A row-major [rows, cols] operand: unit stride along the row (as is) or the
 * column (transposed), and one stride across every batch axis it spans. */
static bool operand_of(const tf_tensor_desc *t, const int64_t *batch_shape, int nb, int64_t rows, int64_t cols,
                       tf_blas_operand *m) {
    int64_t rs = t->strides[nb], cs = t->strides[nb + 1];
    if (cs == 1 && (rs >= cols || rows == 1)) {
        m->trans = false;
        m->ld = rows == 1 ? (cols > 0 ? cols : 1) : rs;
    } else if (rs == 1 && (cs >= rows || cols == 1)) {
        m->trans = true;
        m->ld = cols == 1 ? (rows > 0 ? rows : 1) : cs;
    } else {
        return false;
    }
    int64_t s = -1, span = 1;
    for (int i = nb - 1; i >= 0; i--) {
        if (batch_shape[i] == 1) continue;
        if (s < 0) s = t->strides[i];
        else if (t->strides[i] != s * span) return false;
        span *= batch_shape[i];
    }
    m->batch_stride = s < 0 ? 0 : s;
    return true;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

bool tf_blas_plan_of(const tf_op *op, tf_blas_plan *p) {
    memset(p, 0, sizeof *p);
    if (op->kind != TF_OP_MATMUL && op->kind != TF_OP_GEMM) return false;
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    tf_dtype dt = o->dtype;
    if (dt != TF_F32 && dt != TF_F64 && dt != TF_F16 && dt != TF_BF16) return false;
    if (o->ndim < 2) return false;
    int nb = o->ndim - 2;
    p->M = o->shape[nb];
    p->N = o->shape[nb + 1];
    p->K = a->shape[nb + 1];
    p->batch = 1;
    for (int i = 0; i < nb; i++) p->batch *= o->shape[i];
    if (!tf_desc_is_contiguous(o) || p->M == 0 || p->N == 0 || p->K == 0 || p->batch == 0 ||
        !operand_of(a, o->shape, nb, p->M, p->K, &p->a) || !operand_of(b, o->shape, nb, p->K, p->N, &p->b) ||
        !fits_int(p->M) || !fits_int(p->N) || !fits_int(p->K) || !fits_int(p->a.ld) || !fits_int(p->b.ld) ||
        !fits_int(p->batch))
        return false;
    bool gemm = op->kind == TF_OP_GEMM;
    p->with_c = gemm && op->n_inputs > 2 && op->params.beta != 0;
    p->alpha = gemm ? op->params.alpha : 1;
    p->beta = p->with_c ? op->params.beta : 0;
    return true;
}

void tf_blas_scalars_of(const tf_blas_plan *p, bool f64_compute, tf_blas_scalars *s) {
    s->alpha_f = (float)p->alpha;
    s->beta_f = (float)p->beta;
    s->alpha = f64_compute ? (const void *)&p->alpha : (const void *)&s->alpha_f;
    s->beta = f64_compute ? (const void *)&p->beta : (const void *)&s->beta_f;
}
