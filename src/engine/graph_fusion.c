/* The fusion pass: a captured graph of plain ops (tf_linear, tf_gelu,
 * tf_add, ...) rewritten to the fused kernels of the op table, as
 * torch.compile and onnxruntime's graph optimizer do, so a model written
 * op by op gets them without naming them.
 *
 * It looks at adjacent nodes, a producer and the op that consumes its
 * output, and asks each pattern below for one op doing both. A fusion is
 * taken only when
 *  - the consumer reads the producer's output exactly as written (same
 *    bytes, shape and dtype: no broadcast, no cast between them);
 *  - the producer's output is no longer needed on its own: the consumer
 *    overwrites it in place, or no later node, index guard or tensor the
 *    user still holds reads it (the liveness rules replay_with enforces);
 *  - the device runs the fused op itself (a device without the kernel
 *    would run its parts anyway, through dispatch: nothing gained).
 * A fused node may absorb the next one again (GEMM, then its activation,
 * then its residual add). An add the product did not take may join the
 * norm after it (ADD_RMSNORM, ADD_LAYERNORM). Where the arithmetic is the same the result is
 * the same bits (the CPU's f32 epilogue applies the same SIMD formulas to
 * the same values); where a fused kernel rounds once instead of twice
 * (f16/bf16) it is within the op table's bounds.
 *
 * Adding a pattern: a function taking (producer, consumer) and writing the
 * fused op, appended to `patterns`; the driver checks liveness and the
 * device. docs/ARCHITECTURE.md, "Graph fusion". */
#include <string.h>

#include "graph_fusion.h"

/* ---- descriptors ----
 * A model's ops see one tensor through views of several shapes (tf_linear
 * folds [B, L, K] into [B*L, K] rows, the next op reads [B, L, N]): a
 * consumer reads the producer's output when both name the same bytes in
 * the same row-major order, whatever the shapes. */

static int64_t numel(const tf_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

static bool dense(const tf_tensor_desc *d) {
    int64_t want = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->strides[i] != want) return false;
        want *= d->shape[i];
    }
    return true;
}

static bool same_bytes(const tf_tensor_desc *a, const tf_tensor_desc *b) {
    return a->buffer == b->buffer && a->offset == b->offset && a->dtype == b->dtype && numel(a) == numel(b) &&
           dense(a) && dense(b);
}

/* d (shape [..., N]) seen as the 2-D [rows, N] of `like`, if its leading
 * axes fold into one stride (or are all broadcast). */
static bool as_rows_of(const tf_tensor_desc *d, const tf_tensor_desc *like, tf_tensor_desc *out) {
    if (like->ndim != 2 || d->ndim < 1 || d->shape[d->ndim - 1] != like->shape[1] || numel(d) != numel(like))
        return false;
    int last = d->ndim - 1;
    int64_t row_stride = 0, extent = 1;
    bool found = false;
    for (int i = last - 1; i >= 0; i--) {              /* innermost real leading axis first */
        if (d->shape[i] == 1) continue;
        if (!found) {
            row_stride = d->strides[i];
            found = true;
        } else if (d->strides[i] != row_stride * extent) {
            return false;
        }
        extent *= d->shape[i];
    }
    *out = *d;
    out->ndim = 2;
    out->shape[0] = like->shape[0];
    out->shape[1] = like->shape[1];
    out->strides[0] = row_stride;
    out->strides[1] = d->strides[last];
    return true;
}

/* The consumer's output in the producer's geometry: the same dense bytes
 * order, a new buffer. */
static bool output_as(const tf_tensor_desc *consumer_out, const tf_tensor_desc *producer_out, tf_tensor_desc *out) {
    if (!dense(consumer_out) || !dense(producer_out) || numel(consumer_out) != numel(producer_out) ||
        consumer_out->dtype != producer_out->dtype)
        return false;
    *out = *producer_out;
    out->buffer = consumer_out->buffer;
    out->offset = consumer_out->offset;
    return true;
}

static bool overlap(const tf_tensor_desc *a, const tf_tensor_desc *b) {
    if (a->buffer != b->buffer) return false;
    uint64_t alo, ahi, blo, bhi;
    tf__desc_extent(a, &alo, &ahi);
    tf__desc_extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

static bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }

/* ---- patterns: (producer, consumer) -> one op, or false ---- */

/* A product whose weight is read as stored (QMATMUL), or already fused. */
static bool kept_weight_product(const tf_op *p) {
    return p->kind == TF_OP_QMATMUL || p->kind == TF_OP_QMATMUL_EPILOGUE;
}

static bool fused_product(const tf_op *p) {
    return p->kind == TF_OP_GEMM_EPILOGUE || p->kind == TF_OP_QMATMUL_EPILOGUE;
}

/* A product whose output an epilogue may still extend: a float matmul,
 * GEMM or QMATMUL, or a fused one without a residual (which comes last). */
static bool open_product(const tf_op *p) {
    if (!is_float(p->output.dtype)) return false;
    if (p->kind == TF_OP_MATMUL || p->kind == TF_OP_GEMM || p->kind == TF_OP_QMATMUL) return true;
    return fused_product(p) && !(p->params.flags & TF_GEMM_RESIDUAL);
}

/* The producer as a GEMM_EPILOGUE (QMATMUL_EPILOGUE for a kept weight)
 * with nothing after the product yet. */
static tf_op as_epilogue(const tf_op *p) {
    tf_op f = *p;
    if (fused_product(p)) return f;
    if (p->kind == TF_OP_MATMUL) {
        f.params.alpha = 1;
        f.params.beta = 0;
    }
    f.kind = p->kind == TF_OP_QMATMUL ? TF_OP_QMATMUL_EPILOGUE : TF_OP_GEMM_EPILOGUE;
    f.params.flags = 0;
    f.params.activation = (int32_t)TF_NO_ACTIVATION;
    return f;
}

/* product -> unary activation: act(product). */
static bool fuse_activation(const tf_op *p, const tf_op *c, tf_op *fused) {
    bool unary = c->n_inputs == 1 && tf_op_kernel_of(c->kind) == TF_KERNEL_MATH && c->kind != TF_OP_CLAMP &&
                 c->kind != TF_OP_LEAKY_RELU;
    if (!unary || !open_product(p) || p->output.ndim != 2 || !same_bytes(&c->inputs[0], &p->output)) return false;
    if (fused_product(p) && p->params.activation != (int32_t)TF_NO_ACTIVATION) return false;
    *fused = as_epilogue(p);
    fused->params.activation = (int32_t)c->kind;
    return output_as(&c->output, &p->output, &fused->output);
}

/* product -> add of a residual: product + r (addition commutes exactly, so
 * either side). The add must not broadcast the product to a larger shape,
 * and the residual must share no byte with what the fused op writes. After
 * a kept-weight product (tf_linear adds its bias that way) a row broadcast
 * to every row, before any activation, is the bias: an activation may
 * still follow it. */
static bool fuse_residual(const tf_op *p, const tf_op *c, tf_op *fused) {
    if (c->kind != TF_OP_ADD || c->n_inputs != 2 || !open_product(p) || p->output.ndim != 2 ||
        p->n_inputs >= TF_OP_MAX_INPUTS)
        return false;
    int side = same_bytes(&c->inputs[0], &p->output) ? 0 : same_bytes(&c->inputs[1], &p->output) ? 1 : -1;
    if (side < 0 || c->output.dtype != p->output.dtype || numel(&c->output) != numel(&p->output)) return false;
    tf_tensor_desc r;
    if (c->inputs[1 - side].dtype != p->output.dtype || !as_rows_of(&c->inputs[1 - side], &p->output, &r)) return false;
    *fused = as_epilogue(p);
    if (!output_as(&c->output, &p->output, &fused->output) || overlap(&r, &p->output) || overlap(&r, &fused->output))
        return false;
    bool bias = kept_weight_product(p) && r.strides[0] == 0 && !(fused->params.flags & TF_QMM_BIAS) &&
                fused->params.activation == (int32_t)TF_NO_ACTIVATION;
    fused->params.flags |= bias ? TF_QMM_BIAS : TF_GEMM_RESIDUAL;
    fused->inputs[fused->n_inputs++] = r;                /* the bias is input 2: nothing follows the product yet */
    return true;
}

static bool same_shape(const tf_tensor_desc *a, const tf_tensor_desc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* add -> rmsnorm/layernorm of the sum: one ADD_NORM pass. The add's
 * operands (already broadcast to its shape) become x and r; the sum is
 * rounded to the dtype before the norm, as the two ops do, so the result
 * is the same. The norm must read the sum in the add's own shape and the
 * fused output share no byte with either operand. */
static bool fuse_add_norm(const tf_op *p, const tf_op *c, tf_op *fused) {
    if (p->kind != TF_OP_ADD || p->n_inputs != 2 || (c->kind != TF_OP_RMSNORM && c->kind != TF_OP_LAYERNORM)) return false;
    tf_dtype dt = p->output.dtype;
    if (!is_float(dt) || p->inputs[0].dtype != dt || p->inputs[1].dtype != dt || c->output.dtype != dt ||
        !same_bytes(&c->inputs[0], &p->output) || !same_shape(&c->inputs[0], &p->output) ||
        c->n_inputs + 1 > TF_OP_MAX_INPUTS)
        return false;
    if (overlap(&c->output, &p->inputs[0]) || overlap(&c->output, &p->inputs[1])) return false;
    *fused = *c;
    fused->kind = c->kind == TF_OP_RMSNORM ? TF_OP_ADD_RMSNORM : TF_OP_ADD_LAYERNORM;
    fused->n_inputs = c->n_inputs + 1;
    fused->inputs[0] = p->inputs[0];
    fused->inputs[1] = p->inputs[1];
    for (int i = 1; i < c->n_inputs; i++) fused->inputs[i + 1] = c->inputs[i];
    return true;
}

typedef bool (*fusion_pattern)(const tf_op *producer, const tf_op *consumer, tf_op *fused);
static const fusion_pattern patterns[] = {fuse_activation, fuse_residual, fuse_add_norm};

/* ---- the driver ---- */

/* Overlaps the bytes [lo, hi) of buf? */
static bool reads_range(const tf_tensor_desc *in, const tf_backend_buffer *buf, uint64_t lo, uint64_t hi) {
    if (in->buffer != buf || lo >= hi) return false;
    uint64_t a, b;
    tf__desc_extent(in, &a, &b);
    return a < hi && lo < b;
}

/* No node from `from` on reads the bytes of d before others write them all
 * again (a capture hands a released buffer to its later temporaries, from
 * its start), and, where some stay unwritten, nothing outside reads them. */
static bool dead_after(const tf_tensor_desc *d, const graph_node *nodes, int from, int n, tf__bytes_dead_fn dead,
                       void *ctx) {
    uint64_t lo, hi;                                   /* the bytes of d no later node has written yet */
    tf__desc_extent(d, &lo, &hi);
    for (int k = from; k < n && lo < hi; k++) {
        const tf_op *op = &nodes[k].op;
        for (int i = 0; i < op->n_inputs; i++)
            if (reads_range(&op->inputs[i], d->buffer, lo, hi)) return false;
        if (op->output.buffer != d->buffer || !dense(&op->output)) continue;
        uint64_t olo, ohi;
        tf__desc_extent(&op->output, &olo, &ohi);
        if (olo <= lo && ohi > lo) lo = ohi < hi ? ohi : hi;   /* a written prefix */
        else if (olo < hi && ohi >= hi && olo > lo) hi = olo;  /* a written suffix */
    }
    return lo >= hi || dead(ctx, d);
}

static bool fuse_pair(tf_device *dev, const tf_op *producer, const graph_node *nodes, int consumer, int n,
                      tf__bytes_dead_fn dead, void *ctx, tf_op *fused) {
    const tf_op *c = &nodes[consumer].op;
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        if (!patterns[p](producer, c, fused)) continue;
        /* The consumer may write where the producer's inputs were (the
         * capture reused their buffer once they were read): one kernel
         * cannot read and write them. */
        for (int i = 0; i < producer->n_inputs; i++)
            if (overlap(&fused->output, &producer->inputs[i])) return false;
        bool in_place = same_bytes(&c->output, &producer->output);
        if (!in_place && !dead_after(&producer->output, nodes, consumer + 1, n, dead, ctx)) return false;
        return dev->bdev.iface->supports(dev->bdev.ctx, fused);
    }
    return false;
}

int tf__graph_fuse(tf_device *dev, graph_node *nodes, int n, tf__bytes_dead_fn dead, void *ctx, int *new_index) {
    bool on = tf__env_flag("TF_GRAPH_FUSION", true);
    int out = 0;
    for (int i = 0; i < n; i++) {
        new_index[i] = out;
        graph_node node = nodes[i];
        tf_op fused;
        while (on && node.native && i + 1 < n && fuse_pair(dev, &node.op, nodes, i + 1, n, dead, ctx, &fused)) {
            node.op = fused;
            new_index[++i] = out;
        }
        nodes[out++] = node;
    }
    return out;
}
