/* Indexing and shaping: index_select, embedding, gather, tril/triu (kernels
 * of their own) and concat, stack, split, pad, tile, flip (composites: views
 * plus the copy op, so every backend that copies runs them). */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static int norm_axis(int axis, int ndim) { return axis < 0 ? axis + ndim : axis; }

static tf_status axis_error(const char *fn, int axis, int ndim) {
    return tf__error(TF_ERR_AXIS, "%s: axis %d out of range for a %d-d tensor", fn, axis, ndim);
}

/* Slice view of t along `axis`: [start, start + len). */
static tf_status slice_view(const tf_tensor *t, int axis, int64_t start, int64_t len, tf_tensor **out) {
    int64_t shape[TF_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[axis] = len;
    int64_t first = len > 0 ? start * t->strides[axis] : 0;
    if (first % (int64_t)tf_dtype_block_size(t->dtype) != 0)
        return tf__error(TF_ERR_DTYPE, "a slice from %lld of axis %d would split %s blocks", (long long)start, axis,
                         tf_dtype_name(t->dtype));
    return tf__tensor_view(t, t->ndim, shape, t->strides, t->offset + tf__bytes_of(t->dtype, first), out);
}

/* ---- indices ---- */

static tf_status check_index_dtype(const char *fn, const tf_tensor *index) {
    if (index->dtype != TF_I32 && index->dtype != TF_I64)
        return tf__error(TF_ERR_DTYPE, "%s: indices must be i32 or i64, not %s", fn, tf_dtype_name(index->dtype));
    return TF_OK;
}

/* Every index must lie in [0, extent). Reads two scalars back (a sync on
 * asynchronous devices): the price of an error instead of a wild read. */
static tf_status check_index_range(const char *fn, const tf_tensor *index, int64_t extent, int axis, bool table_ids) {
    if (tf_tensor_numel(index) == 0) return TF_OK;
    /* A capture checks the values at each replay instead (they change). */
    if (tf__hook_index_guard(fn, index, extent)) return TF_OK;
    int64_t lohi[2];
    tf_tensor *r = NULL, *r64 = NULL;
    for (int k = 0; k < 2; k++) {
        tf_status s = k ? tf_max(index, TF_ALL_AXES, false, &r) : tf_min(index, TF_ALL_AXES, false, &r);
        if (s == TF_OK) s = tf_cast(r, TF_I64, &r64);
        if (s == TF_OK) s = tf_tensor_read(r64, &lohi[k], sizeof lohi[k]);
        tf_tensor_release(r);
        tf_tensor_release(r64);
        r = r64 = NULL;
        if (s != TF_OK) return s;
    }
    int64_t bad = lohi[0] < 0 ? lohi[0] : lohi[1] >= extent ? lohi[1] : 0;
    if ((lohi[0] < 0 || lohi[1] >= extent) && table_ids)
        return tf__error(TF_ERR_INDEX, "%s: id %lld out of range for a table of %lld rows", fn, (long long)bad,
                         (long long)extent);
    if (lohi[0] < 0 || lohi[1] >= extent)
        return tf__error(TF_ERR_INDEX, "%s: index %lld out of range for axis %d of extent %lld", fn, (long long)bad,
                         axis, (long long)extent);
    return TF_OK;
}

/* Run an INDEXED op: x and index placed on one device, output `shape`;
 * table_ids: the indices are ids of x's rows (tf_embedding's wording). */
static tf_status run_indexed(const char *fn, tf_op_kind kind, const tf_tensor *x, int axis, const tf_tensor *index,
                             int ndim, const int64_t *shape, bool table_ids, tf_tensor **out) {
    const tf_tensor *in[2] = {x, index};
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 2, in, NULL, NULL);
    if (s != TF_OK) return s;
    s = check_index_range(fn, c.in[1], x->shape[axis], axis, table_ids);
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    tf__desc_into(&c.op.inputs[1], c.in[1]);
    if (c.in[1]->ndim == 0) {                        /* a 0-d index is one index */
        c.op.inputs[1].ndim = 1;
        c.op.inputs[1].shape[0] = 1;
        c.op.inputs[1].strides[0] = 1;
    }
    c.op.params.axis = axis;
    return tf__op_end(&c, s, x->dtype, ndim, shape, out);
}

static tf_status select_rows(const char *fn, const tf_tensor *x, int ax, const tf_tensor *index, bool table_ids,
                             tf_tensor **out);

tf_status tf_index_select(const tf_tensor *x, int axis, const tf_tensor *index, tf_tensor **out) {
    static const char fn[] = "tf_index_select";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !index) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    int ax = norm_axis(axis, x->ndim);
    if (ax < 0 || ax >= x->ndim) return axis_error(fn, axis, x->ndim);
    tf_status s = check_index_dtype(fn, index);
    if (s != TF_OK) return s;
    if (index->ndim > 1)
        return tf__error(TF_ERR_SHAPE, "%s: the index must be 0-d or 1-d, not %d-d", fn, index->ndim);
    if (tf_dtype_is_quantized(x->dtype) && ax == x->ndim - 1)
        return tf__error(TF_ERR_DTYPE, "%s: %s elements are picked by whole rows, not along the last axis", fn,
                         tf_dtype_name(x->dtype));
    return select_rows(fn, x, ax, index, false, out);
}

/* index_select's op, errors in the caller's name (tf_embedding's ids are
 * ids of a table's rows, not indices of an axis). */
static tf_status select_rows(const char *fn, const tf_tensor *x, int ax, const tf_tensor *index, bool table_ids,
                             tf_tensor **out) {
    TF__GRAD(fn, out, select_rows(fn, x, ax, index, table_ids, out),
             (ga_.rule = TF__GRAD_INDEX_SELECT, ga_.p.axis = ax), x, index);
    int64_t shape[TF_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[ax] = tf_tensor_numel(index);
    return tf__in(fn, run_indexed(fn, TF_OP_INDEX_SELECT, x, ax, index, x->ndim, shape, table_ids, out));
}

tf_status tf_embedding(const tf_tensor *weight, const tf_tensor *ids, tf_tensor **out) {
    static const char fn[] = "tf_embedding";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!weight || !ids) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (weight->ndim != 2) return tf__error(TF_ERR_SHAPE, "%s: weight must be [vocab, dim], not %d-d", fn, weight->ndim);
    if (ids->ndim + 1 > TF_MAX_DIMS) return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: ids have %d dimensions", fn, ids->ndim);
    tf_status s = check_index_dtype(fn, ids);
    if (s != TF_OK) return s;
    int64_t flat_n = tf_tensor_numel(ids), shape[TF_MAX_DIMS];
    tf_tensor *flat = NULL, *rows = NULL;
    s = tf_reshape(ids, 1, &flat_n, &flat);
    if (s == TF_OK) s = select_rows(fn, weight, 0, flat, true, &rows);
    if (s == TF_OK && tf_dtype_is_quantized(rows->dtype)) {   /* a quantized table gives f32 rows */
        tf_tensor *decoded = NULL;
        s = tf_cast(rows, TF_F32, &decoded);
        tf_tensor_release(rows);
        rows = decoded;
    }
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = weight->shape[1];
    if (s == TF_OK) s = tf_reshape(rows, ids->ndim + 1, shape, out);
    tf_tensor_release(flat);
    tf_tensor_release(rows);
    return tf__in(fn, s);
}

tf_status tf_gather(const tf_tensor *x, int axis, const tf_tensor *index, tf_tensor **out) {
    static const char fn[] = "tf_gather";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || !index) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    int ax = norm_axis(axis, x->ndim);
    if (ax < 0 || ax >= x->ndim) return axis_error(fn, axis, x->ndim);
    tf_status s = check_index_dtype(fn, index);
    if (s != TF_OK) return s;
    char a[256], b[256];
    if (index->ndim != x->ndim)
        return tf__error(TF_ERR_SHAPE, "%s: index %s must have the input's %d dimensions", fn,
                         tf__shape_str(index->ndim, index->shape, a, sizeof a), x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (d != ax && index->shape[d] > x->shape[d])
            return tf__error(TF_ERR_SHAPE, "%s: index %s exceeds input %s along axis %d", fn,
                             tf__shape_str(index->ndim, index->shape, a, sizeof a),
                             tf__shape_str(x->ndim, x->shape, b, sizeof b), d);
    TF__GRAD(fn, out, tf_gather(x, axis, index, out), (ga_.rule = TF__GRAD_GATHER, ga_.p.axis = ax), x, index);
    return tf__in(fn, run_indexed(fn, TF_OP_GATHER, x, ax, index, index->ndim, index->shape, false, out));
}

/* ---- triangles ---- */

static tf_status triangle(const char *fn, tf_op_kind kind, const tf_tensor *x, int64_t diagonal, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input tensor is NULL", fn);
    if (x->ndim < 2) return tf__error(TF_ERR_SHAPE, "%s: needs at least 2 dimensions, got %d", fn, x->ndim);
    TF__GRAD(fn, out, triangle(fn, kind, x, diagonal, out),
             (ga_.rule = TF__GRAD_TRIANGLE, ga_.op = kind, ga_.i[0] = diagonal), x);
    tf_op_call c;
    tf_status s = tf__op_begin(&c, fn, kind, 1, &x, NULL, NULL);
    if (s != TF_OK) return s;
    tf__desc_into(&c.op.inputs[0], c.in[0]);
    c.op.params.diagonal = diagonal;
    return tf__op_end(&c, TF_OK, x->dtype, x->ndim, x->shape, out);
}

tf_status tf_tril(const tf_tensor *x, int64_t diagonal, tf_tensor **out) { return triangle("tf_tril", TF_OP_TRIL, x, diagonal, out); }
tf_status tf_triu(const tf_tensor *x, int64_t diagonal, tf_tensor **out) { return triangle("tf_triu", TF_OP_TRIU, x, diagonal, out); }

/* ---- concat and stack ---- */

static tf_status concat_checked(const char *fn, int n, const tf_tensor *const *xs, int axis, tf_tensor **out);

/* Two tensors joined, recorded for autograd as one node (each input's
 * gradient is its window of the output's). */
static tf_status concat_pair(const char *fn, const tf_tensor *a, const tf_tensor *b, int ax, tf_tensor **out) {
    TF__GRAD(fn, out, concat_pair(fn, a, b, ax, out),
             (ga_.rule = TF__GRAD_CONCAT, ga_.i[0] = ax, ga_.i[1] = a->shape[ax]), a, b);
    const tf_tensor *two[2] = {a, b};
    return concat_checked(fn, 2, two, ax, out);
}

/* Recording autograd, concat is a tree of pairs: log2(n) copies of the
 * data rather than one, and nodes of two inputs. */
static tf_status concat_recorded(const char *fn, int n, const tf_tensor *const *xs, int ax, tf_tensor **out) {
    if (n == 1) {                        /* a leaf of the tree: the input itself */
        *out = tf_tensor_retain((tf_tensor *)xs[0]);
        return TF_OK;
    }
    if (n == 2) return concat_pair(fn, xs[0], xs[1], ax, out);
    int half = n / 2;
    tf_tensor *left = NULL, *right = NULL;
    tf_status s = concat_recorded(fn, half, xs, ax, &left);
    if (s == TF_OK) s = concat_recorded(fn, n - half, xs + half, ax, &right);
    if (s == TF_OK) s = concat_pair(fn, left, right, ax, out);
    tf_tensor_release(left);
    tf_tensor_release(right);
    return s;
}

static tf_status concat_checked(const char *fn, int n, const tf_tensor *const *xs, int axis, tf_tensor **out) {
    int ndim = xs[0]->ndim, ax = norm_axis(axis, ndim);
    if (ndim == 0) return tf__error(TF_ERR_SHAPE, "%s: cannot concatenate 0-d tensors (use tf_stack)", fn);
    if (ax < 0 || ax >= ndim) return axis_error(fn, axis, ndim);
    tf_dtype dt = xs[0]->dtype;
    int64_t shape[TF_MAX_DIMS];
    memcpy(shape, xs[0]->shape, sizeof shape);
    shape[ax] = 0;
    for (int i = 0; i < n; i++) {
        bool fits = xs[i]->ndim == ndim;
        for (int d = 0; fits && d < ndim; d++) fits = d == ax || xs[i]->shape[d] == xs[0]->shape[d];
        if (!fits) {
            char a[256], b[256];
            return tf__error(TF_ERR_SHAPE, "%s: tensor %d has shape %s, which does not match %s off axis %d", fn, i,
                             tf__shape_str(xs[i]->ndim, xs[i]->shape, a, sizeof a),
                             tf__shape_str(ndim, xs[0]->shape, b, sizeof b), ax);
        }
        tf_status s = tf_promote_types(dt, xs[i]->dtype, &dt);
        if (s != TF_OK) return s;
        if (tf__add_overflows(shape[ax], xs[i]->shape[ax], &shape[ax]))
            return tf__error(TF_ERR_SIZE, "%s: the joined extent of axis %d overflows", fn, ax);
    }
    tf_status s = tf__check_shape(fn, dt, ndim, shape, NULL);
    if (s != TF_OK) return s;
    if (tf__grad_wanted(n, xs)) return n == 1 ? tf_copy(xs[0], out) : concat_recorded(fn, n, xs, ax, out);
    tf_tensor **ready = tf__calloc((size_t)n, sizeof *ready), *o = NULL;
    if (!ready) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    tf_device *dev;
    s = tf__place_inputs(fn, n, xs, &dev, ready);
    if (s == TF_OK) s = tf__op_output(fn, dev, dt, ndim, shape, &o);
    int64_t at = 0;
    for (int i = 0; i < n && s == TF_OK; i++) {
        tf_tensor *part = NULL;
        s = slice_view(o, ax, at, ready[i]->shape[ax], &part);
        if (s == TF_OK) s = tf__copy_into(fn, ready[i], part);
        tf_tensor_release(part);
        at += ready[i]->shape[ax];
    }
    if (s == TF_OK) *out = o;
    else tf_tensor_release(o);
    for (int i = 0; i < n; i++) tf_tensor_release(ready[i]);
    tf__free(ready);
    return s;
}

static tf_status check_list(const char *fn, int n, const tf_tensor *const *xs, tf_tensor **out) {
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (n < 1) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: needs at least one tensor, got %d", fn, n);
    if (!xs) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor list is NULL", fn);
    for (int i = 0; i < n; i++)
        if (!xs[i]) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: tensor %d is NULL", fn, i);
    return TF_OK;
}

tf_status tf_concat(int n, const tf_tensor *const *xs, int axis, tf_tensor **out) {
    tf_status s = check_list("tf_concat", n, xs, out);
    return s != TF_OK ? s : tf__in("tf_concat", concat_checked("tf_concat", n, xs, axis, out));
}

tf_status tf_stack(int n, const tf_tensor *const *xs, int axis, tf_tensor **out) {
    static const char fn[] = "tf_stack";
    tf_status s = check_list(fn, n, xs, out);
    if (s != TF_OK) return s;
    int ndim = xs[0]->ndim, ax = norm_axis(axis, ndim + 1);
    if (ax < 0 || ax > ndim) return axis_error(fn, axis, ndim + 1);
    if (ndim + 1 > TF_MAX_DIMS) return tf__error(TF_ERR_TOO_MANY_DIMS, "%s: stacking %d-d tensors", fn, ndim);
    for (int i = 0; i < n; i++) {
        if (xs[i]->ndim != ndim || memcmp(xs[i]->shape, xs[0]->shape, sizeof(int64_t) * (size_t)ndim)) {
            char a[256], b[256];
            return tf__error(TF_ERR_SHAPE, "%s: tensor %d has shape %s, tensor 0 has %s", fn, i,
                             tf__shape_str(xs[i]->ndim, xs[i]->shape, a, sizeof a),
                             tf__shape_str(ndim, xs[0]->shape, b, sizeof b));
        }
    }
    tf_tensor **views = tf__calloc((size_t)n, sizeof *views);
    if (!views) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (int i = 0; i < n && s == TF_OK; i++) s = tf_unsqueeze(xs[i], ax, &views[i]);
    if (s == TF_OK) s = concat_checked(fn, n, (const tf_tensor *const *)views, ax, out);
    for (int i = 0; i < n; i++) tf_tensor_release(views[i]);
    tf__free(views);
    return tf__in(fn, s);
}

/* ---- split ---- */

tf_status tf_split(const tf_tensor *x, int axis, int n, const int64_t *sizes, tf_tensor **outs) {
    static const char fn[] = "tf_split";
    if (!x || !sizes || !outs) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: NULL argument", fn);
    if (n < 1) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: needs at least one piece, got %d", fn, n);
    for (int i = 0; i < n; i++) outs[i] = NULL;
    int ax = norm_axis(axis, x->ndim);
    if (ax < 0 || ax >= x->ndim) return axis_error(fn, axis, x->ndim);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0) return tf__error(TF_ERR_SIZE, "%s: piece %d has negative size %lld", fn, i, (long long)sizes[i]);
        if (tf__add_overflows(total, sizes[i], &total))
            return tf__error(TF_ERR_SIZE, "%s: the sizes of the pieces overflow (piece %d)", fn, i);
    }
    if (total != x->shape[ax])
        return tf__error(TF_ERR_SHAPE, "%s: pieces add up to %lld, axis %d has extent %lld", fn, (long long)total, ax,
                         (long long)x->shape[ax]);
    /* pieces of a tensor that requires a gradient are tf_slice's views,
     * which record a slice node each (plain views carried none: the
     * pieces silently did not require a gradient) */
    const bool record = tf__grad_wanted(1, &x);
    tf_status s = TF_OK;
    int64_t at = 0;
    for (int i = 0; i < n && s == TF_OK; i++) {
        s = record ? tf_slice(x, ax, at, at + sizes[i], 1, &outs[i]) : slice_view(x, ax, at, sizes[i], &outs[i]);
        at += sizes[i];
    }
    if (s != TF_OK)
        for (int i = 0; i < n; i++) {
            tf_tensor_release(outs[i]);
            outs[i] = NULL;
        }
    return tf__in(fn, s);
}

/* ---- pad ---- */

static int grad_pads(tf__grad_args *a, int npairs, const int64_t *pads) {
    a->rule = TF__GRAD_PAD;
    a->i[0] = npairs;
    if (npairs > 0) memcpy(a->v, pads, sizeof *pads * 2 * (size_t)npairs);
    return 0;
}

tf_status tf_pad(const tf_tensor *x, int npairs, const int64_t *pads, double value, tf_tensor **out) {
    static const char fn[] = "tf_pad";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || (npairs > 0 && !pads)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input or pads is NULL", fn);
    if (npairs < 0 || npairs > x->ndim)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d pad pairs for a %d-d tensor", fn, npairs, x->ndim);
    TF__GRAD(fn, out, tf_pad(x, npairs, pads, value, out), grad_pads(&ga_, npairs, pads), x);
    int64_t shape[TF_MAX_DIMS], src_start[TF_MAX_DIMS] = {0}, src_len[TF_MAX_DIMS], dst_start[TF_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) shape[d] = src_len[d] = x->shape[d];
    for (int k = 0; k < npairs; k++) {
        int d = x->ndim - 1 - k;
        int64_t before = pads[2 * k], after = pads[2 * k + 1];
        if (before == INT64_MIN || after == INT64_MIN || tf__add_overflows(x->shape[d], before, &shape[d]) ||
            tf__add_overflows(shape[d], after, &shape[d]))
            return tf__error(TF_ERR_SIZE, "%s: pads %lld, %lld on axis %d overflow its extent", fn, (long long)before,
                             (long long)after, d);
        if (shape[d] < 0)
            return tf__error(TF_ERR_SHAPE, "%s: pads %lld, %lld leave axis %d with negative extent", fn,
                             (long long)before, (long long)after, d);
        src_start[d] = before < 0 ? -before : 0;      /* negative pads crop */
        dst_start[d] = before > 0 ? before : 0;
        src_len[d] = x->shape[d] - src_start[d] - (after < 0 ? -after : 0);   /* no wrap: |pads| < 2^63 */
        if (src_len[d] < 0) src_len[d] = 0;
        if (src_start[d] > x->shape[d]) src_start[d] = x->shape[d];
        if (dst_start[d] > shape[d]) dst_start[d] = shape[d];
    }
    tf_status st = tf__check_shape(fn, x->dtype, x->ndim, shape, NULL);
    if (st != TF_OK) return st;
    tf_tensor *o = NULL, *src = tf_tensor_retain((tf_tensor *)x), *dst = NULL;
    tf_status s = tf_full(x->storage->dev, x->dtype, x->ndim, shape, value, &o);
    if (s == TF_OK) dst = tf_tensor_retain(o);
    for (int d = 0; d < x->ndim && s == TF_OK; d++) {
        tf_tensor *a = NULL, *b = NULL;
        s = slice_view(src, d, src_start[d], src_len[d], &a);
        if (s == TF_OK) s = slice_view(dst, d, dst_start[d], src_len[d], &b);
        tf_tensor_release(src);
        tf_tensor_release(dst);
        src = a;
        dst = b;
    }
    if (s == TF_OK) s = tf__copy_into(fn, src, dst);
    tf_tensor_release(src);
    tf_tensor_release(dst);
    if (s == TF_OK) *out = o;
    else tf_tensor_release(o);
    return tf__in(fn, s);
}

/* ---- tile ---- */

/* Repeat `cur` r times along axis d: copy it in once, then keep doubling
 * the filled prefix (log2(r) copies). */
static tf_status tile_axis(const char *fn, tf_tensor *cur, int d, int64_t r, tf_tensor **out) {
    int64_t shape[TF_MAX_DIMS], e = cur->shape[d];
    memcpy(shape, cur->shape, sizeof shape);
    shape[d] = e * r;
    tf_tensor *o = NULL;
    tf_status s = tf__op_output(fn, cur->storage->dev, cur->dtype, cur->ndim, shape, &o);
    tf_tensor *first = NULL;
    if (s == TF_OK && shape[d] > 0) {
        s = slice_view(o, d, 0, e, &first);
        if (s == TF_OK) s = tf__copy_into(fn, cur, first);
        tf_tensor_release(first);
        for (int64_t filled = e; s == TF_OK && filled < shape[d];) {
            int64_t k = filled < shape[d] - filled ? filled : shape[d] - filled;
            tf_tensor *from = NULL, *to = NULL;
            s = slice_view(o, d, 0, k, &from);
            if (s == TF_OK) s = slice_view(o, d, filled, k, &to);
            if (s == TF_OK) s = tf__copy_into(fn, from, to);
            tf_tensor_release(from);
            tf_tensor_release(to);
            filled += k;
        }
    }
    if (s == TF_OK) *out = o;
    else tf_tensor_release(o);
    return s;
}

static int grad_reps(tf__grad_args *a, int m, const int64_t *r) {
    a->rule = TF__GRAD_TILE;
    a->i[0] = m;
    memcpy(a->v, r, sizeof *r * (size_t)m);
    return 0;
}

tf_status tf_tile(const tf_tensor *x, int nreps, const int64_t *reps, tf_tensor **out) {
    static const char fn[] = "tf_tile";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || (nreps > 0 && !reps)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input or reps is NULL", fn);
    if (nreps < 0 || nreps > TF_MAX_DIMS)
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d repetition counts", fn, nreps);
    for (int i = 0; i < nreps; i++)
        if (reps[i] < 0) return tf__error(TF_ERR_SIZE, "%s: repetition count %lld is negative", fn, (long long)reps[i]);
    int m = nreps > x->ndim ? nreps : x->ndim;
    int64_t shape[TF_MAX_DIMS] = {0}, r[TF_MAX_DIMS] = {0};
    int64_t final_shape[TF_MAX_DIMS] = {0};
    for (int d = 0; d < m; d++) {
        int xd = d - (m - x->ndim), rd = d - (m - nreps);
        shape[d] = xd >= 0 ? x->shape[xd] : 1;
        r[d] = rd >= 0 ? reps[rd] : 1;
        if (tf__mul_overflows(shape[d], r[d], &final_shape[d]))
            return tf__error(TF_ERR_SIZE, "%s: %lld repetitions of axis %d (extent %lld) overflow", fn, (long long)r[d], d,
                             (long long)shape[d]);
    }
    tf_status st = tf__check_shape(fn, x->dtype, m, final_shape, NULL);    /* the result's size must fit */
    if (st != TF_OK) return st;
    TF__GRAD(fn, out, tf_tile(x, nreps, reps, out), grad_reps(&ga_, m, r), x);
    tf_tensor *cur = NULL;
    tf_status s = tf_reshape(x, m, shape, &cur);
    for (int d = 0; d < m && s == TF_OK; d++) {
        if (r[d] == 1) continue;
        tf_tensor *next = NULL;
        s = tile_axis(fn, cur, d, r[d], &next);
        tf_tensor_release(cur);
        cur = next;
    }
    if (s == TF_OK) s = tf_contiguous(cur, out);
    tf_tensor_release(cur);
    return tf__in(fn, s);
}

/* ---- flip ---- */

static int grad_flip(tf__grad_args *a, int ndim, int naxes, const int *axes) {
    a->rule = TF__GRAD_FLIP;
    a->i[0] = naxes;
    for (int i = 0; i < naxes; i++) a->perm[i] = norm_axis(axes[i], ndim);
    return 0;
}

tf_status tf_flip(const tf_tensor *x, int naxes, const int *axes, tf_tensor **out) {
    static const char fn[] = "tf_flip";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (!x || (naxes > 0 && !axes)) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: input or axes is NULL", fn);
    if (naxes < 0 || naxes > x->ndim)             /* distinct axes: at most ndim of them */
        return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: %d axes for a %d-d tensor", fn, naxes, x->ndim);
    int64_t strides[TF_MAX_DIMS], offset = x->offset;
    memcpy(strides, x->strides, sizeof strides);
    bool seen[TF_MAX_DIMS] = {false};
    for (int i = 0; i < naxes; i++) {
        int d = norm_axis(axes[i], x->ndim);
        if (d < 0 || d >= x->ndim) return axis_error(fn, axes[i], x->ndim);
        if (seen[d]) return tf__error(TF_ERR_AXIS, "%s: axis %d listed twice", fn, d);
        seen[d] = true;
        if (x->shape[d] > 0) offset += tf__bytes_of(x->dtype, (x->shape[d] - 1) * strides[d]);   /* the far end */
        strides[d] = -strides[d];
    }
    TF__GRAD(fn, out, tf_flip(x, naxes, axes, out), grad_flip(&ga_, x->ndim, naxes, axes), x);
    tf_tensor *view = NULL;
    tf_status s = tf__tensor_view(x, x->ndim, x->shape, strides, offset, &view);
    if (s == TF_OK) s = tf__copy_cast(fn, view, x->dtype, out);
    tf_tensor_release(view);
    return tf__in(fn, s);
}
