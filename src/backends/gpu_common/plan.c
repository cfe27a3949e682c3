/* The host side of the portable kernels: see plan.h. Moved here from the
 * OpenCL plugin so that the CUDA plugin launches the same kernels with the
 * same arguments. */
#include "plan.h"
#include "formulas.h"          /* generated: the binary formulas with an int form */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tensorframe/numerics.h>

const char *const tf_pk_kernel_names[TF_PK_KERNEL_COUNT] = {
#define TF__PK_NAME(E, name) #name,
    TF_PK_KERNEL_LIST(TF__PK_NAME)
#undef TF__PK_NAME
};


typedef void *pk_mem;
typedef tf_pk_arg arg;
#define ARG(v) ((tf_pk_arg){sizeof(v), &(v)})
#define MEM(tg, t) ((tg)->mem(t))
#define MAX_DV TF_PK_MAX_DV

/* ---- dtype facts, from the header-only list (plugins never link the core) ---- */

size_t tf_pk_elsize(tf_dtype dt) {
    static const size_t sizes[TF_DTYPE_COUNT] = {
#define TF__SZ(E, n, sz, fl, in) sz,
        TF_DTYPE_LIST(TF__SZ)
#undef TF__SZ
    };
    return (unsigned)dt < TF_DTYPE_COUNT ? sizes[dt] : 0;
}

int64_t tf_pk_block_elems(tf_dtype dt) {
    switch (dt) {
#define TF__QB(E, n, blk, bytes) case TF_##E: return blk;
        TF_QDTYPE_LIST(TF__QB)
#undef TF__QB
    default: return 0;
    }
}

int64_t tf_pk_block_bytes(tf_dtype dt) {
    switch (dt) {
#define TF__QB(E, n, blk, bytes) case TF_##E: return bytes;
        TF_QDTYPE_LIST(TF__QB)
#undef TF__QB
    default: return 0;
    }
}

static bool is_quantized(tf_dtype dt) { return tf_pk_block_elems(dt) != 0; }

static bool dt_is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }

/* A descriptor's offset in elements (0 for a quantized one, whose kernels take its byte offset). */
static int64_t elem_offset(const tf_tensor_desc *t) {
    size_t size = tf_pk_elsize(t->dtype);
    return size ? (int64_t)(t->offset / size) : 0;
}

static tf_status launch(const tf_pk_target *tg, tf_dtype program, tf_pk_kernel k, int nargs, const tf_pk_arg *args,
                        int dims, const size_t *global, const size_t *local) {
    return tg->launch(tg->ctx, program, k, nargs, args, dims, global, local);
}


/* Geometry over `shape` for up to four descriptors (NULL entries skipped). */
static tf_pk_geom make_geom(int ndim, const int64_t *shape, const tf_tensor_desc *const *ops, int nops) {
    tf_pk_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = ndim;
    g.contiguous = 1;
    for (int i = 0; i < ndim; i++) g.shape[i] = shape[i];
    for (int k = 0; k < nops; k++) {
        if (!ops[k]) continue;
        g.offset[k] = elem_offset(ops[k]);
        for (int i = 0; i < ndim; i++) g.stride[k][i] = ops[k]->strides[i];
        if (!tf_desc_is_contiguous(ops[k])) g.contiguous = 0;
    }
    return g;
}


/* f32, every operand contiguous with the same shape, element offsets and
 * count multiples of 4: the binary4 kernel's 128-bit accesses. */
static bool binary4_fits(const tf_tensor_desc *const *ops, int64_t n) {
    if (ops[0]->dtype != TF_F32 || n % 4) return false;
    for (int k = 0; k < 3; k++)
        if (!tf_desc_is_contiguous(ops[k]) || elem_offset(ops[k]) % 4) return false;
    return true;
}

static tf_status run_binary(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[3] = {o, &op->inputs[0], &op->inputs[1]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 3);
    int32_t code = op->kind;
    int64_t n = tf_desc_numel(o);
    if (binary4_fits(ops, n)) {
        int64_t n4 = n / 4, oo = elem_offset(o), ao = elem_offset(ops[1]), bo = elem_offset(ops[2]);
        pk_mem mo = MEM(tg, o), ma = MEM(tg, ops[1]), mb = MEM(tg, ops[2]);
        arg args[] = {ARG(code), ARG(n4), ARG(oo), ARG(ao), ARG(bo), ARG(mo), ARG(ma), ARG(mb)};
        size_t global = (size_t)n4;
        return launch(tg, o->dtype, TF_PK_BINARY4, 8, args, 1, &global, NULL);
    }
    pk_mem mo = MEM(tg, o), ma = MEM(tg, ops[1]), mb = MEM(tg, ops[2]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_BINARY, 6, args, 1, &global, NULL);
}

static tf_status run_unary(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 2);
    int32_t code = op->kind;
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mx = MEM(tg, ops[1]);
    size_t global = (size_t)n;
    if (o->dtype == TF_F64) {
        double alpha = op->params.alpha, lo = op->params.min_value, hi = op->params.max_value;
        arg args[] = {ARG(code), ARG(alpha), ARG(lo), ARG(hi), ARG(n), ARG(g), ARG(mo), ARG(mx)};
        return launch(tg, o->dtype, TF_PK_UNARY, 8, args, 1, &global, NULL);
    }
    float alpha = (float)op->params.alpha, lo = (float)op->params.min_value, hi = (float)op->params.max_value;
    arg args[] = {ARG(code), ARG(alpha), ARG(lo), ARG(hi), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    return launch(tg, o->dtype, TF_PK_UNARY, 8, args, 1, &global, NULL);
}


static tf_status run_compare(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[3] = {o, &op->inputs[0], &op->inputs[1]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 3);
    int32_t code = op->kind;
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), ma = MEM(tg, ops[1]), mb = MEM(tg, ops[2]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(tg, ops[1]->dtype, TF_PK_COMPARE, 6, args, 1, &global, NULL);
}

static tf_status run_bool_unary(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 2);
    int32_t code = op->kind;
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mx = MEM(tg, ops[1]);
    arg args[] = {ARG(code), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    size_t global = (size_t)n;
    return launch(tg, ops[1]->dtype, TF_PK_BOOL_UNARY, 5, args, 1, &global, NULL);
}

static tf_status run_where(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[4] = {o, &op->inputs[0], &op->inputs[1], &op->inputs[2]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 4);
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mc = MEM(tg, ops[1]), ma = MEM(tg, ops[2]), mb = MEM(tg, ops[3]);
    arg args[] = {ARG(n), ARG(g), ARG(mo), ARG(mc), ARG(ma), ARG(mb)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_WHERE, 6, args, 1, &global, NULL);
}

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static tf_status run_matmul(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    const tf_tensor_desc *c = op->n_inputs > 2 ? &op->inputs[2] : o;   /* o stands in when there is no c */
    int nb = o->ndim - 2;
    const tf_tensor_desc *ops[4] = {a, b, o, c};
    tf_pk_geom g = make_geom(nb, o->shape, ops, 4);
    int64_t M = o->shape[nb], N = o->shape[nb + 1], K = a->shape[nb + 1];
    tf_pk_long4 ms = {{a->strides[nb], a->strides[nb + 1], b->strides[nb], b->strides[nb + 1]}};
    tf_pk_long2 cs = {{c->strides[nb], c->strides[nb + 1]}};
    int32_t epilogue = op->kind == TF_OP_GEMM;
    double alpha = epilogue ? op->params.alpha : 1, beta = epilogue && op->n_inputs > 2 ? op->params.beta : 0;
    double alpha_d = alpha, beta_d = beta;
    float alpha_f = (float)alpha, beta_f = (float)beta;
    pk_mem mo = MEM(tg, o), ma = MEM(tg, a), mb = MEM(tg, b), mc = MEM(tg, c);
    size_t batch = 1;
    for (int i = 0; i < nb; i++) batch *= (size_t)o->shape[i];
    arg args[] = {ARG(M), ARG(N), ARG(K), ARG(ms), ARG(g), ARG(mo), ARG(ma), ARG(mb), ARG(epilogue),
                  tg->fp64 ? ARG(alpha_d) : ARG(alpha_f), tg->fp64 ? ARG(beta_d) : ARG(beta_f), ARG(mc), ARG(cs)};
    size_t ts = (size_t)tg->ts, global[2] = {round_up((size_t)N, ts), round_up((size_t)M, ts) * batch}, local[2] = {ts, ts};
    return launch(tg, o->dtype, TF_PK_MATMUL, 13, args, 2, global, local);
}

/* SUM and MEAN as partial sums over G groups per output, then a final pass. */
typedef struct split_reduce {
    const tf_pk_target *tg;
    const tf_op *op;
    tf_pk_geom go, gr;
    int64_t M, R;
} split_reduce;

static tf_status run_split_reduce(const void *closure, int64_t G) {
    const split_reduce *sr = closure;
    const tf_pk_target *tg = sr->tg;
    const tf_tensor_desc *in = &sr->op->inputs[0], *o = &sr->op->output;
    int64_t M = sr->M, R = sr->R;
    tf_pk_geom go = sr->go, gr = sr->gr;
    size_t acc_size = dt_is_float(in->dtype) ? (in->dtype == TF_F64 ? 8 : 4) : 8;
    void *partial = NULL, *token = NULL;
    tf_status s = tg->scratch_alloc(tg->ctx, (size_t)(M * G) * acc_size, &partial, &token);
    if (s != TF_OK) return s;
    pk_mem mi = MEM(tg, in), mo = MEM(tg, o);
    arg pargs[] = {ARG(M), ARG(R), ARG(G), ARG(go), ARG(gr), ARG(mi), ARG(partial)};
    size_t global[2] = {(size_t)G * (size_t)tg->rwg, (size_t)M}, local[2] = {(size_t)tg->rwg, 1};
    s = launch(tg, in->dtype, TF_PK_REDUCE_PARTIAL, 7, pargs, 2, global, local);
    if (s == TF_OK) {
        int32_t mean = sr->op->kind == TF_OP_MEAN;
        int64_t off = elem_offset(o);
        arg fargs[] = {ARG(M), ARG(G), ARG(R), ARG(mean), ARG(partial), ARG(mo), ARG(off)};
        size_t gm = (size_t)M;
        s = launch(tg, in->dtype, TF_PK_REDUCE_FINAL, 7, fargs, 1, &gm, NULL);
    }
    tg->scratch_free(tg->ctx, token);
    return s;
}

static tf_status run_reduce(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int64_t kshape[TF_MAX_DIMS] = {0}, rshape[TF_MAX_DIMS] = {0};
    tf_tensor_desc kept = *in, red = *in;
    int nk = 0, nr = 0;
    for (int i = 0; i < in->ndim; i++) {
        bool reduced = op->params.axis == TF_ALL_AXES || i == op->params.axis;
        tf_tensor_desc *t = reduced ? &red : &kept;
        int *n = reduced ? &nr : &nk;
        t->strides[*n] = in->strides[i];
        (reduced ? rshape : kshape)[(*n)++] = in->shape[i];
    }
    kept.ndim = nk;
    red.ndim = nr;
    const tf_tensor_desc *kops[1] = {&kept}, *rops[1] = {&red};
    tf_pk_geom go = make_geom(nk, kshape, kops, 1), gr = make_geom(nr, rshape, rops, 1);
    int64_t M = tf_desc_numel(o), R = 1;
    if (M == 0) return TF_OK;
    for (int i = 0; i < nr; i++) R *= rshape[i];
    if (op->kind != TF_OP_SUM && op->kind != TF_OP_MEAN) {
        int32_t code = op->kind;
        int64_t correction = op->params.correction, off = elem_offset(o);
        int32_t out_long = o->dtype == TF_I64;
        pk_mem mi = MEM(tg, in), mo = MEM(tg, o);
        arg args[] = {ARG(code), ARG(R), ARG(correction), ARG(go), ARG(gr), ARG(mi), ARG(mo), ARG(off), ARG(out_long)};
        size_t global = (size_t)M * (size_t)tg->rwg, local = (size_t)tg->rwg;
        return launch(tg, in->dtype, TF_PK_REDUCE_FULL, 9, args, 1, &global, &local);
    }
    /* Enough groups per output to fill the device when there are few
     * outputs; the backend may tune the count per shape (reduce_groups). */
    int64_t G = M >= 64 || R <= (int64_t)tg->rwg * 4 ? 1 : (R / ((int64_t)tg->rwg * 4) < 64 ? R / ((int64_t)tg->rwg * 4) : 64);
    if (G < 1) G = 1;
    split_reduce sr = {tg, op, go, gr, M, R};
    if (tg->reduce_groups) G = tg->reduce_groups(tg->ctx, op, M, R, G, run_split_reduce, &sr);
    return run_split_reduce(&sr, G);
}

static tf_status run_cumsum(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int ax = op->params.axis == TF_ALL_AXES ? -1 : op->params.axis;
    int64_t lshape[TF_MAX_DIMS] = {0};
    for (int i = 0; i < in->ndim; i++) lshape[i] = i == ax ? 1 : in->shape[i];
    const tf_tensor_desc *ops[2] = {in, o};
    tf_pk_geom g = make_geom(in->ndim, lshape, ops, 2);
    int64_t len = ax >= 0 ? in->shape[ax] : 1, is = ax >= 0 ? in->strides[ax] : 0, os = ax >= 0 ? o->strides[ax] : 0;
    int64_t lines = tf_desc_numel(o) / (len ? len : 1);
    if (len == 0 || lines == 0) return TF_OK;
    int32_t out_long = o->dtype == TF_I64;
    pk_mem mi = MEM(tg, in), mo = MEM(tg, o);
    arg args[] = {ARG(lines), ARG(len), ARG(g), ARG(is), ARG(os), ARG(mi), ARG(mo), ARG(out_long)};
    size_t global = (size_t)lines;
    return launch(tg, in->dtype, TF_PK_CUMSUM, 8, args, 1, &global, NULL);
}

static tf_status run_sort(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    int ax = op->params.axis == TF_ALL_AXES ? -1 : op->params.axis;
    int64_t lshape[TF_MAX_DIMS] = {0};
    for (int i = 0; i < in->ndim; i++) lshape[i] = i == ax ? 1 : in->shape[i];
    const tf_tensor_desc *ops[2] = {in, o};
    tf_pk_geom g = make_geom(in->ndim, lshape, ops, 2);
    int64_t len = ax >= 0 ? in->shape[ax] : 1, is = ax >= 0 ? in->strides[ax] : 0, os = ax >= 0 ? o->strides[ax] : 0;
    int64_t lines = tf_desc_numel(o) / (len ? len : 1);
    if (len == 0 || lines == 0) return TF_OK;
    int32_t descending = (op->params.flags & TF_SORT_DESCENDING) != 0, values = op->kind == TF_OP_SORT;
    pk_mem mi = MEM(tg, in), mo = MEM(tg, o);
    arg args[] = {ARG(lines), ARG(len), ARG(g), ARG(is), ARG(os), ARG(descending), ARG(values), ARG(mi), ARG(mo)};
    size_t global = (size_t)(lines * len);
    return launch(tg, in->dtype, TF_PK_SORT_RANK, 9, args, 1, &global, NULL);
}

static tf_status run_searchsorted(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *s = &op->inputs[0], *v = &op->inputs[1], *o = &op->output;
    const tf_tensor_desc *ops[2] = {v, o};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 2);
    int64_t n = tf_desc_numel(o), len = s->shape[0], so = elem_offset(s), ss = s->strides[0];
    int32_t right = (op->params.flags & TF_SEARCH_RIGHT) != 0;
    if (n == 0) return TF_OK;
    pk_mem ms = MEM(tg, s), mv = MEM(tg, v), mo = MEM(tg, o);
    arg args[] = {ARG(n), ARG(len), ARG(g), ARG(so), ARG(ss), ARG(right), ARG(ms), ARG(mv), ARG(mo)};
    size_t global = (size_t)n;
    return launch(tg, v->dtype, TF_PK_SEARCHSORTED, 9, args, 1, &global, NULL);
}

static tf_status run_index_pick(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *ix = &op->inputs[1], *o = &op->output;
    tf_pk_geom g = make_geom(o->ndim, o->shape, (const tf_tensor_desc *const[]){x, ix, o}, 3);
    int32_t gather = op->kind == TF_OP_GATHER, axis = op->params.axis, index64 = ix->dtype == TF_I64;
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mx = MEM(tg, x), mi = MEM(tg, ix);
    arg args[] = {ARG(gather), ARG(axis), ARG(n), ARG(g), ARG(mo), ARG(mx), ARG(mi), ARG(index64)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_INDEX_PICK, 8, args, 1, &global, NULL);
}

static tf_status run_triangle(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output, *ops[2] = {o, &op->inputs[0]};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 2);
    int32_t upper = op->kind == TF_OP_TRIU;
    int64_t k = op->params.diagonal, n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mx = MEM(tg, ops[1]);
    arg args[] = {ARG(upper), ARG(k), ARG(n), ARG(g), ARG(mo), ARG(mx)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_TRIANGLE, 6, args, 1, &global, NULL);
}

/* wide_t arguments are double where the device has fp64, else float. */
typedef struct wide_arg { double d; float f; } wide_arg;
static wide_arg wide(double v) { return (wide_arg){v, (float)v}; }
#define WIDE_ARG(dev, w) ((dev)->fp64 ? ARG((w).d) : ARG((w).f))

static tf_status run_row_op(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    int ax = op->params.axis, next = 1;
    bool has_w = op->params.flags & TF_ROW_WEIGHT, has_b = op->params.flags & TF_ROW_BIAS;
    const tf_tensor_desc *w = has_w ? &op->inputs[next++] : x, *b = has_b ? &op->inputs[next++] : x;
    int64_t lines_shape[TF_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++) lines_shape[i] = i == ax ? 1 : x->shape[i];
    tf_pk_geom g = make_geom(x->ndim, lines_shape, (const tf_tensor_desc *const[]){x, o}, 2);
    int64_t len = x->shape[ax], xs = x->strides[ax], os = o->strides[ax], lines = tf_desc_numel(o) / (len ? len : 1);
    if (len == 0) return TF_OK;
    int32_t code = op->kind;
    int32_t hw = has_w, hb = has_b;
    int64_t ws = has_w ? w->strides[0] : 0, bs = has_b ? b->strides[0] : 0, w_off = elem_offset(w), b_off = elem_offset(b);
    wide_arg eps = wide(op->params.eps);
    pk_mem mx = MEM(tg, x), mo = MEM(tg, o), mw = MEM(tg, w), mb = MEM(tg, b);
    arg args[] = {ARG(code), ARG(len), ARG(xs), ARG(os), WIDE_ARG(tg, eps), ARG(hw), ARG(hb), ARG(g), ARG(mx), ARG(mo),
                  ARG(mw), ARG(w_off), ARG(ws), ARG(mb), ARG(b_off), ARG(bs)};
    size_t global = (size_t)lines * (size_t)tg->rwg, local = (size_t)tg->rwg;
    return launch(tg, x->dtype, TF_PK_ROW_OP, 16, args, 1, &global, &local);
}

static tf_status run_rope(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *p = &op->inputs[1], *o = &op->output;
    tf_pk_geom g = make_geom(x->ndim, x->shape, (const tf_tensor_desc *const[]){x, o}, 2);
    int64_t n = tf_desc_numel(o), rot = op->params.rotary_dims, ps = p->strides[0], p_off = elem_offset(p);
    int32_t neox = (op->params.flags & TF_ROPE_NEOX) != 0, ax = op->params.axis, pos64 = p->dtype == TF_I64;
    wide_arg theta = wide(op->params.theta);
    pk_mem mx = MEM(tg, x), mo = MEM(tg, o), mp = MEM(tg, p);
    arg args[] = {ARG(n), ARG(neox), ARG(rot), WIDE_ARG(tg, theta), ARG(ax), ARG(g), ARG(mx), ARG(mo), ARG(mp), ARG(p_off),
                  ARG(ps), ARG(pos64)};
    size_t global = (size_t)n;
    return launch(tg, x->dtype, TF_PK_ROPE, 12, args, 1, &global, NULL);
}

static tf_status run_sdpa(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *t[5] = {&op->inputs[0], &op->inputs[1], &op->inputs[2],
                                  (op->params.flags & TF_SDPA_MASK) ? &op->inputs[3] : &op->inputs[0], &op->output};
    tf_pk_attn_geom a;
    memset(&a, 0, sizeof a);
    a.B = t[0]->shape[0];
    a.Hq = t[0]->shape[1];
    a.Lq = t[0]->shape[2];
    a.D = t[0]->shape[3];
    a.Hkv = t[1]->shape[1];
    a.Lk = t[1]->shape[2];
    a.Dv = t[2]->shape[3];
    a.q_off = op->params.q_offset;
    for (int k = 0; k < 5; k++) {
        a.off[k] = elem_offset(t[k]);
        for (int i = 0; i < 4; i++) a.st[k][i] = t[k]->strides[i];
    }
    int32_t causal = (op->params.flags & TF_SDPA_CAUSAL) != 0, has_mask = (op->params.flags & TF_SDPA_MASK) != 0;
    wide_arg scale = wide(op->params.scale);
    pk_mem mq = MEM(tg, t[0]), mk = MEM(tg, t[1]), mv = MEM(tg, t[2]), mm = MEM(tg, t[3]), mo = MEM(tg, t[4]);
    arg args[] = {WIDE_ARG(tg, scale), ARG(causal), ARG(has_mask), ARG(a), ARG(mq), ARG(mk), ARG(mv), ARG(mm), ARG(mo)};
    size_t global = (size_t)(a.B * a.Hq * a.Lq);
    return launch(tg, t[0]->dtype, TF_PK_SDPA, 9, args, 1, &global, NULL);
}

static tf_pk_conv_geom conv_geom_of(const tf_op *op, const tf_tensor_desc *w, const tf_tensor_desc *b) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    tf_pk_conv_geom g;
    memset(&g, 0, sizeof g);
    g.N = x->shape[0];
    g.C = x->shape[1];
    g.H = x->shape[2];
    g.W = x->shape[3];
    g.O = o->shape[1];
    g.Ho = o->shape[2];
    g.Wo = o->shape[3];
    g.groups = op->params.groups ? op->params.groups : 1;
    g.cg = w ? w->shape[1] : 1;
    g.kh = w ? w->shape[2] : op->params.kernel[0];
    g.kw = w ? w->shape[3] : op->params.kernel[1];
    for (int i = 0; i < 2; i++) {
        g.stride[i] = op->params.stride[i];
        g.pad[i] = op->params.padding[i];
        g.dil[i] = op->params.dilation[i] ? op->params.dilation[i] : 1;
    }
    for (int i = 0; i < 4; i++) {
        g.xs[i] = x->strides[i];
        g.os[i] = o->strides[i];
        g.ws[i] = w ? w->strides[i] : 0;
    }
    g.bs = b ? b->strides[0] : 0;
    g.x_off = elem_offset(x);
    g.o_off = elem_offset(o);
    g.w_off = w ? elem_offset(w) : 0;
    g.b_off = b ? elem_offset(b) : 0;
    return g;
}

static tf_status run_conv2d(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *w = &op->inputs[1], *o = &op->output;
    int32_t has_bias = (op->params.flags & TF_CONV_BIAS) != 0;
    const tf_tensor_desc *b = has_bias ? &op->inputs[2] : x;
    tf_pk_conv_geom g = conv_geom_of(op, w, has_bias ? b : NULL);
    pk_mem mx = MEM(tg, x), mw = MEM(tg, w), mb = MEM(tg, b), mo = MEM(tg, o);
    arg args[] = {ARG(has_bias), ARG(g), ARG(mx), ARG(mw), ARG(mb), ARG(mo)};
    size_t global = (size_t)tf_desc_numel(o);
    return launch(tg, o->dtype, TF_PK_CONV2D, 6, args, 1, &global, NULL);
}

static tf_status run_pool(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *o = &op->output;
    tf_pk_conv_geom g = conv_geom_of(op, NULL, NULL);
    int32_t is_max = op->kind == TF_OP_MAXPOOL2D, count_pad = (op->params.flags & TF_POOL_COUNT_PAD) != 0;
    pk_mem mx = MEM(tg, x), mo = MEM(tg, o);
    arg args[] = {ARG(is_max), ARG(count_pad), ARG(g), ARG(mx), ARG(mo)};
    size_t global = (size_t)tf_desc_numel(o);
    return launch(tg, o->dtype, TF_PK_POOL2D, 5, args, 1, &global, NULL);
}

static tf_status run_adam(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *ops[4] = {&op->inputs[0], &op->inputs[1], &op->inputs[2], &op->inputs[3]};
    tf_pk_geom g = make_geom(ops[0]->ndim, ops[0]->shape, ops, 4);
    const tf_op_params *q = &op->params;
    int64_t n = tf_desc_numel(ops[0]);
    wide_arg lr = wide(q->lr), b1 = wide(q->beta1), b2 = wide(q->beta2), eps = wide(q->eps), wd = wide(q->weight_decay),
             c1 = wide(1 - pow(q->beta1, (double)q->adam_step)), c2 = wide(1 - pow(q->beta2, (double)q->adam_step));
    int32_t decoupled = (q->flags & TF_ADAM_DECOUPLED) != 0;
    pk_mem mp = MEM(tg, ops[0]), mg = MEM(tg, ops[1]), mm = MEM(tg, ops[2]), mv = MEM(tg, ops[3]);
    arg args[] = {ARG(n), ARG(g), WIDE_ARG(tg, lr), WIDE_ARG(tg, b1), WIDE_ARG(tg, b2), WIDE_ARG(tg, eps), WIDE_ARG(tg, wd),
                  WIDE_ARG(tg, c1), WIDE_ARG(tg, c2), ARG(decoupled), ARG(mp), ARG(mg), ARG(mm), ARG(mv)};
    size_t global = (size_t)n;
    return launch(tg, ops[0]->dtype, TF_PK_ADAM, 14, args, 1, &global, NULL);
}

static tf_status run_copy(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output, *ops[2] = {o, in};
    tf_pk_geom g = make_geom(o->ndim, o->shape, ops, 2);
    int32_t src_dt = in->dtype;
    int64_t n = tf_desc_numel(o);
    pk_mem mo = MEM(tg, o), mi = MEM(tg, in);
    arg args[] = {ARG(src_dt), ARG(n), ARG(g), ARG(mo), ARG(mi)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_COPY_FROM, 5, args, 1, &global, NULL);
}

/* The element `value` becomes in dtype dt, by the CPU reference's rules. */
void tf_pk_encode_scalar(tf_dtype dt, double v, unsigned char *out) {
    double lo = 0, hi = 0;
    switch (dt) {
    case TF_F32: { float f = (float)v; memcpy(out, &f, 4); return; }
    case TF_F64: memcpy(out, &v, 8); return;
    case TF_F16: { uint16_t h = tf_f64_to_f16(v); memcpy(out, &h, 2); return; }   /* one rounding: via f32 would round twice */
    case TF_BF16: { uint16_t h = tf_f64_to_bf16(v); memcpy(out, &h, 2); return; }
    case TF_BOOL: out[0] = v != 0; return;
    case TF_I8: lo = -128; hi = 127; break;
    case TF_U8: lo = 0; hi = 255; break;
    case TF_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    default: lo = -0x1p63; hi = 0x1p63; break;
    }
    int64_t x = isnan(v) ? 0 : v <= lo ? (int64_t)lo : v >= hi ? (dt == TF_I64 ? INT64_MAX : (int64_t)hi) : (int64_t)v;
    switch (dt) {
    case TF_I8: case TF_U8: out[0] = (unsigned char)x; break;
    case TF_I32: { int32_t y = (int32_t)x; memcpy(out, &y, 4); break; }
    default: memcpy(out, &x, 8); break;
    }
}

static tf_status run_creation(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    int64_t n = tf_desc_numel(o), off = elem_offset(o);
    pk_mem mo = MEM(tg, o);
    size_t global = (size_t)n;
    if (op->kind == TF_OP_ARANGE) {
        if (tg->fp64) {
            double start = op->params.value, step = op->params.step;
            arg args[] = {ARG(n), ARG(start), ARG(step), ARG(mo), ARG(off)};
            return launch(tg, o->dtype, TF_PK_ARANGE, 5, args, 1, &global, NULL);
        }
        float start = (float)op->params.value, step = (float)op->params.step;
        arg args[] = {ARG(n), ARG(start), ARG(step), ARG(mo), ARG(off)};
        return launch(tg, o->dtype, TF_PK_ARANGE, 5, args, 1, &global, NULL);
    }
    int32_t normal = op->kind == TF_OP_RAND_NORMAL;
    uint64_t seed = op->params.seed;
    arg args[] = {ARG(normal), ARG(n), ARG(seed), ARG(mo), ARG(off)};
    return launch(tg, o->dtype, TF_PK_RAND, 5, args, 1, &global, NULL);
}


static tf_status run_fill(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *o = &op->output;
    uint64_t bits = 0;
    tf_pk_encode_scalar(o->dtype, op->params.value, (unsigned char *)&bits);
    int64_t n = tf_desc_numel(o), off = elem_offset(o);
    pk_mem mo = MEM(tg, o);
    arg args[] = {ARG(n), ARG(bits), ARG(mo), ARG(off)};
    size_t global = (size_t)n;
    return launch(tg, o->dtype, TF_PK_FILL, 4, args, 1, &global, NULL);
}

/* ---- block-quantized dtypes ---- */

/* A quantized descriptor as the bytes of its rows, u8 [..., bytes per row]:
 * moving whole rows (same-dtype copies, index_select) then runs the u8
 * kernels. Leading strides are whole blocks, so they convert exactly. */
static tf_tensor_desc as_row_bytes(const tf_tensor_desc *t) {
    tf_tensor_desc b = *t;
    int64_t blk = tf_pk_block_elems(t->dtype), bytes = tf_pk_block_bytes(t->dtype);
    int last = t->ndim - 1;
    b.dtype = TF_U8;
    for (int i = 0; i < last; i++) b.strides[i] = t->strides[i] / blk * bytes;
    b.shape[last] = t->shape[last] / blk * bytes;
    b.strides[last] = 1;
    return b;
}

/* The op with its quantized operands seen as row bytes. */
static tf_op with_row_bytes(const tf_op *op) {
    tf_op b = *op;
    if (is_quantized(b.output.dtype)) b.output = as_row_bytes(&op->output);
    if (is_quantized(b.inputs[0].dtype)) b.inputs[0] = as_row_bytes(&op->inputs[0]);
    return b;
}

/* Casts: decoding into any float dtype (one work-item per element), and
 * encoding from one (one per block); same-dtype copies move bytes. */
static tf_status run_quant_copy(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    if (in->dtype == o->dtype) {
        tf_op bytes = with_row_bytes(op);
        return run_copy(tg, &bytes);
    }
    pk_mem mo = MEM(tg, o), mi = MEM(tg, in);
    if (is_quantized(in->dtype)) {
        tf_pk_geom g = make_geom(o->ndim, o->shape, (const tf_tensor_desc *const[]){o, in}, 2);
        int32_t wt = in->dtype;
        int64_t nchunks = tf_desc_numel(o) / 32, src_off = (int64_t)in->offset;   /* every block is whole chunks of 32 */
        arg args[] = {ARG(wt), ARG(nchunks), ARG(g), ARG(src_off), ARG(mo), ARG(mi)};
        size_t global = (size_t)nchunks;
        return launch(tg, o->dtype, TF_PK_QUANT_DECODE, 6, args, 1, &global, NULL);
    }
    tf_pk_geom g = make_geom(in->ndim, in->shape, (const tf_tensor_desc *const[]){in, o}, 2);
    int32_t wt = o->dtype;
    int64_t nblocks = tf_desc_numel(o) / tf_pk_block_elems(o->dtype), dst_off = (int64_t)o->offset;
    arg args[] = {ARG(wt), ARG(nblocks), ARG(g), ARG(dst_off), ARG(mo), ARG(mi)};
    size_t global = (size_t)nblocks;
    return launch(tg, in->dtype, TF_PK_QUANT_ENCODE, 6, args, 1, &global, NULL);
}

/* Activation rows up to which qgemv (QGEMV_LANES work-items per output
 * column, the weight read once for all rows) runs rather than qmatmul's
 * tiles; the kernel's QGEMV_ROWS and QGEMV_LANES. A device whose work-groups
 * hold fewer than QGEMV_LANES work-items takes the tiles. */
#define QGEMV_ROWS 8
#define QGEMV_LANES 32

static tf_status run_qmatmul(const tf_pk_target *tg, const tf_op *op) {
    const tf_tensor_desc *x = &op->inputs[0], *w = &op->inputs[1], *o = &op->output;
    int32_t wt = w->dtype;
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    int64_t x_off = elem_offset(x), ldx = x->strides[0], o_off = elem_offset(o), ldo = o->strides[0];
    int64_t w_off = (int64_t)w->offset, ldw = w->strides[0] / tf_pk_block_elems(w->dtype) * tf_pk_block_bytes(w->dtype);
    if (M == 0 || N == 0) return TF_OK;
    pk_mem mo = MEM(tg, o), mx = MEM(tg, x), mw = MEM(tg, w);
    arg args[] = {ARG(wt), ARG(M), ARG(N), ARG(K), ARG(x_off), ARG(ldx), ARG(w_off), ARG(ldw), ARG(o_off), ARG(ldo),
                  ARG(mo), ARG(mx), ARG(mw)};
    if (M <= QGEMV_ROWS && tg->rwg >= QGEMV_LANES && !tg->no_qgemv) {
        size_t columns_per_group = (size_t)tg->rwg / QGEMV_LANES, local = (size_t)tg->rwg;
        size_t global = round_up((size_t)N, columns_per_group) / columns_per_group * local;
        return launch(tg, TF_F32, TF_PK_QGEMV, 13, args, 1, &global, &local);
    }
    size_t ts = (size_t)tg->ts, global[2] = {round_up((size_t)N, ts), round_up((size_t)M, ts)}, local[2] = {ts, ts};
    return launch(tg, TF_F32, TF_PK_QMATMUL, 13, args, 2, global, local);
}

/* The binary formulas with an int form (src/ops/formulas.txt); the others
 * take floats only. */
static bool has_int_form(tf_op_kind kind) {
#define TF__INT_CASE(E, name) case TF_OP_##E:
    switch (kind) {
    TF_FORMULA_BINARY_INT(TF__INT_CASE)
        return true;
    default: return false;
    }
#undef TF__INT_CASE
}

static bool float_on_device(tf_dtype dt, bool fp64) { return dt_is_float(dt) && (fp64 || dt != TF_F64); }

/* The ops a quantized operand takes part in (tf__op_begin admits no others). */
static bool quant_supported(const tf_op *op, bool fp64) {
    const tf_tensor_desc *in = &op->inputs[0], *o = &op->output;
    switch (op->kind) {
    case TF_OP_COPY:
        if (in->dtype == o->dtype) return true;
        return is_quantized(in->dtype) ? float_on_device(o->dtype, fp64) : float_on_device(in->dtype, fp64);
    case TF_OP_INDEX_SELECT:
        return is_quantized(in->dtype) && op->params.axis < in->ndim - 1 &&
               (op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64);
    case TF_OP_QMATMUL:
        return in->dtype == TF_F32 && o->dtype == TF_F32 && is_quantized(op->inputs[1].dtype) && in->ndim == 2 &&
               in->strides[1] == 1 && o->ndim == 2 && o->strides[1] == 1;
    default:
        return false;
    }
}

static bool has_quantized_operand(const tf_op *op) {
    if (is_quantized(op->output.dtype)) return true;
    for (int i = 0; i < op->n_inputs; i++)
        if (is_quantized(op->inputs[i].dtype)) return true;
    return false;
}

/* sort / argsort rank every element against its line: O(len^2) per line.
 * Past this much work (or lines this long) the CPU's merge sort, after a
 * copy to the host and back, is the faster way (the core's fallback). */
#define SORT_RANK_MAX_LEN 8192
#define SORT_RANK_MAX_WORK (1ll << 26)

static bool sort_rank_fits(const tf_op *op) {
    if (op->kind == TF_OP_SEARCHSORTED) return true;       /* a binary search per value */
    const tf_tensor_desc *in = &op->inputs[0];
    int ax = op->params.axis;
    int64_t len = ax >= 0 && ax < in->ndim ? in->shape[ax] : 1, lines = len ? tf_desc_numel(in) / len : 0;
    return len <= SORT_RANK_MAX_LEN && lines * len * len <= SORT_RANK_MAX_WORK;
}

bool tf_pk_dims_fit(const tf_op *op) {
    if (op->output.ndim > TF_PK_GEOM_DIMS) return false;
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].ndim > TF_PK_GEOM_DIMS) return false;
    return true;
}

bool tf_pk_supports(const tf_op *op, bool fp64) {
    if (!tf_pk_dims_fit(op)) return false;                  /* the kernels' geometry holds 8 axes */
    if (has_quantized_operand(op)) return quant_supported(op, fp64);
    if (!tf_pk_elsize(op->output.dtype)) return false;        /* not a dtype these kernels know */
    for (int i = 0; i < op->n_inputs; i++)
        if (!tf_pk_elsize(op->inputs[i].dtype)) return false;
    if (!fp64) {
        if (op->output.dtype == TF_F64) return false;
        for (int i = 0; i < op->n_inputs; i++)
            if (op->inputs[i].dtype == TF_F64) return false;
    }
    bool float_out = dt_is_float(op->output.dtype);
    switch (tf_op_kernel_of(op->kind)) {            /* by family: a new op of a family needs no line here */
    case TF_KERNEL_ARITH: return float_out || has_int_form(op->kind);
    case TF_KERNEL_MATH: case TF_KERNEL_ROW: case TF_KERNEL_ROPE: case TF_KERNEL_CONV: case TF_KERNEL_POOL:
    case TF_KERNEL_OPTIMIZER:
        return float_out;
    case TF_KERNEL_ATTENTION: return float_out && op->inputs[2].shape[3] <= MAX_DV;
    case TF_KERNEL_PICK: return op->inputs[1].dtype == TF_I32 || op->inputs[1].dtype == TF_I64;
    case TF_KERNEL_MATMUL:                       /* qmatmul: quantized weights only (above); gemm_epilogue: */
        return op->kind == TF_OP_MATMUL || op->kind == TF_OP_GEMM;   /* its parts, which the core runs */
    case TF_KERNEL_NONE: case TF_KERNEL_ADD_NORM: return false;   /* fused rows: the core sends the parts */
    case TF_KERNEL_BACKWARD: return false;       /* no portable kernels yet: the CPU's, or autograd's composition */
    case TF_KERNEL_SORT: return sort_rank_fits(op);
    default: return true;   /* COMPARE, PREDICATE, SELECT, REDUCE, SCAN, TRIANGLE, COPY, FILL, ARANGE, RANDOM */
    }
}

tf_dtype tf_pk_program_dtype(const tf_op *op) {
    if (has_quantized_operand(op)) {              /* the float side's program, or u8 for moving row bytes */
        if (op->kind == TF_OP_QMATMUL) return TF_F32;
        if (op->kind == TF_OP_INDEX_SELECT || op->inputs[0].dtype == op->output.dtype) return TF_U8;
        return is_quantized(op->output.dtype) ? op->inputs[0].dtype : op->output.dtype;
    }
    switch (tf_op_kernel_of(op->kind)) {           /* kernels whose program is the input's dtype */
    case TF_KERNEL_REDUCE: case TF_KERNEL_SCAN: case TF_KERNEL_COMPARE: case TF_KERNEL_PREDICATE:
    case TF_KERNEL_SORT:
        return op->inputs[0].dtype;
    default:
        return op->output.dtype;
    }
}

tf_status tf_pk_run(const tf_pk_target *tg, const tf_op *op) {
    if (has_quantized_operand(op)) {
        switch (op->kind) {
        case TF_OP_COPY: return run_quant_copy(tg, op);
        case TF_OP_INDEX_SELECT: {
            tf_op bytes = with_row_bytes(op);
            return run_index_pick(tg, &bytes);
        }
        case TF_OP_QMATMUL: return run_qmatmul(tg, op);
        default: return tg->host->set_error(TF_ERR_UNSUPPORTED, "portable kernels: no kernel for %d", (int)op->kind);
        }
    }
    switch (tf_op_kernel_of(op->kind)) {
    case TF_KERNEL_ARITH: return run_binary(tg, op);
    case TF_KERNEL_MATH: return run_unary(tg, op);
    case TF_KERNEL_COMPARE: return run_compare(tg, op);
    case TF_KERNEL_PREDICATE: return run_bool_unary(tg, op);
    case TF_KERNEL_SELECT: return run_where(tg, op);
    case TF_KERNEL_MATMUL: return run_matmul(tg, op);
    case TF_KERNEL_REDUCE: return run_reduce(tg, op);
    case TF_KERNEL_SCAN: return run_cumsum(tg, op);
    case TF_KERNEL_SORT: return op->kind == TF_OP_SEARCHSORTED ? run_searchsorted(tg, op) : run_sort(tg, op);
    case TF_KERNEL_PICK: return run_index_pick(tg, op);
    case TF_KERNEL_TRIANGLE: return run_triangle(tg, op);
    case TF_KERNEL_COPY: return run_copy(tg, op);
    case TF_KERNEL_FILL: return run_fill(tg, op);
    case TF_KERNEL_ARANGE: case TF_KERNEL_RANDOM: return run_creation(tg, op);
    case TF_KERNEL_ROW: return run_row_op(tg, op);
    case TF_KERNEL_ROPE: return run_rope(tg, op);
    case TF_KERNEL_ATTENTION: return run_sdpa(tg, op);
    case TF_KERNEL_CONV: return run_conv2d(tg, op);
    case TF_KERNEL_POOL: return run_pool(tg, op);
    case TF_KERNEL_OPTIMIZER: return run_adam(tg, op);
    default: return tg->host->set_error(TF_ERR_UNSUPPORTED, "portable kernels: no kernel for %d", (int)op->kind);
    }
}

size_t tf_pk_op_codes(char *buf, size_t n) {
    size_t used = 0;
#define TF__CODE(E, ...)                                                                                \
    used += (size_t)snprintf(buf && used < n ? buf + used : NULL, buf && used < n ? n - used : 0,         \
                             "#define TF_OP_%s %d\n", #E, (int)TF_OP_##E);
    TF_OP_LIST(TF__CODE)
#undef TF__CODE
    return used;
}

tf_status tf_pk_copy_c_into_out(const tf_pk_target *tg, const tf_op *gemm) {
    tf_op copy;
    memset(&copy, 0, sizeof copy);
    copy.struct_size = sizeof copy;
    copy.kind = TF_OP_COPY;
    copy.n_inputs = 1;
    copy.inputs[0] = gemm->inputs[2];
    copy.output = gemm->output;
    return tf_pk_run(tg, &copy);
}
