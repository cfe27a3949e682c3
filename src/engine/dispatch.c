/* Dispatch: the op table, input placement under the mixed-device policy,
 * output allocation, and running an op on its device or, when the backend
 * lacks it, on the CPU. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"

const tf_op_info tf__op_table[TF_OP_COUNT] = {
#define TF__OP_INFO(E, n, ar, sh, dt, acc, dom, k, kern) \
    [TF_OP_##E] = {#n, ar, TF_SHAPE_##sh, TF_DTRULE_##dt, TF_DTYPES_##acc},
    TF_OP_LIST(TF__OP_INFO)
#undef TF__OP_INFO
};

const char *tf_op_name(tf_op_kind op) { return (unsigned)op < TF_OP_COUNT ? tf__op_table[op].name : "?"; }

int tf_op_count(void) { return TF_OP_COUNT; }

int tf_op_arity(tf_op_kind op) { return (unsigned)op < TF_OP_COUNT ? tf__op_table[op].arity : -1; }
bool tf_op_accepts(tf_op_kind op, tf_dtype dt) {
    return (unsigned)op < TF_OP_COUNT && (unsigned)dt < TF_DTYPE_COUNT && ((tf__op_table[op].accepts >> dt) & 1u);
}

tf_op_kernel tf_op_family(tf_op_kind op) { return (unsigned)op < TF_OP_COUNT ? tf_op_kernel_of(op) : TF_KERNEL_NONE; }

static atomic_bool poison_outputs;

void tf_debug_poison_outputs(bool on) { atomic_store(&poison_outputs, on); }

/* ---- outputs ---- */

static tf_status poison(tf_tensor *t) {
    size_t n = t->storage->nbytes, chunk = n < (1u << 20) ? n : (1u << 20);
    if (n == 0) return TF_OK;
    unsigned char *ff = tf__malloc(chunk);
    if (!ff) return tf__error(TF_ERR_OUT_OF_MEMORY, "poison: no host memory");
    memset(ff, 0xFF, chunk);
    tf_status s = TF_OK;
    for (size_t off = 0; off < n && s == TF_OK; off += chunk)
        s = tf__upload(t->storage, off, ff, n - off < chunk ? n - off : chunk);
    tf__free(ff);
    return s;
}

tf_status tf__op_output(const char *fn, tf_device *dev, tf_dtype dt, int ndim, const int64_t *shape,
                        tf_tensor **out) {
    tf_status s = tf__tensor_alloc(fn, dev, dt, ndim, shape, out);
    if (s != TF_OK || !atomic_load(&poison_outputs)) return s;
    s = poison(*out);
    if (s != TF_OK) {
        tf_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

/* ---- placement ---- */

tf_status tf__place_inputs(const char *fn, int n, const tf_tensor *const *in, tf_device **dev_out,
                           tf_tensor **moved) {
    for (int i = 0; i < n; i++) moved[i] = NULL;
    tf_device *dev = in[0]->storage->dev;
    bool mixed = false;
    for (int i = 1; i < n; i++) mixed |= in[i]->storage->dev != dev;
    if (mixed) {
        tf_mixed_policy p = tf_mixed_policy_get();
        if (p == TF_MIXED_STRICT)
            return tf__error(TF_ERR_DEVICE_MISMATCH, "%s: inputs on %s and %s (mixed-device policy is strict)", fn,
                             in[0]->storage->dev->name, in[1]->storage->dev->name);
        if (p == TF_MIXED_HIGHEST_PRIORITY)
            for (int i = 1; i < n; i++)
                if (tf__device_rank(in[i]->storage->dev) < tf__device_rank(dev)) dev = in[i]->storage->dev;
    }
    for (int i = 0; i < n; i++) {
        tf_status s = tf__tensor_move(in[i], dev, &moved[i]);
        if (s != TF_OK) {
            tf__error_context(s, "%s: moving input %d from %s to %s", fn, i, in[i]->storage->dev->name, dev->name);
            for (int j = 0; j < i; j++) {
                tf_tensor_release(moved[j]);
                moved[j] = NULL;
            }
            return s;
        }
    }
    *dev_out = dev;
    return TF_OK;
}

/* The ops defined on block-quantized inputs: moving whole rows, and the
 * weight of a quantized product. */
static bool takes_quantized(tf_op_kind kind, int input) {
    return (kind == TF_OP_COPY && input == 0) || (kind == TF_OP_INDEX_SELECT && input == 0) ||
           ((kind == TF_OP_QMATMUL || kind == TF_OP_QMATMUL_EPILOGUE) && input == 1);
}

tf_status tf__op_begin(tf_op_call *c, const char *fn, tf_op_kind kind, int n, const tf_tensor *const *in,
                       const tf_dtype *want, tf_device *dev) {
    c->fn = fn;
    c->n = n;
    c->dev = dev;
    c->into = NULL;
    c->grad = n && tf__grad_wanted(n, in);
    c->op.struct_size = (uint32_t)sizeof c->op;
    c->op.kind = kind;                   /* the hot path: set what a backend reads, not all 1 KB */
    c->op.n_inputs = n;
    memset(&c->op.params, 0, sizeof c->op.params);
    for (int i = 0; i < n; i++)          /* before anything is held: nothing to release */
        if (tf_dtype_is_quantized(in[i]->dtype) && !takes_quantized(kind, i)) {
            c->n = 0;
            return tf__error(TF_ERR_DTYPE, "%s: %s does not take a %s input (cast it to a float dtype)", fn,
                             tf_op_name(kind), tf_dtype_name(in[i]->dtype));
        }
    tf_status s = n ? tf__place_inputs(fn, n, in, &c->dev, c->in) : TF_OK;
    for (int i = 0; i < n && s == TF_OK; i++) {
        if (!want || want[i] == TF_KEEP_DTYPE || c->in[i]->dtype == want[i]) continue;
        tf_tensor *converted;
        s = tf__copy_cast(fn, c->in[i], want[i], &converted);
        if (s != TF_OK) {
            tf__error_context(s, "%s: converting input %d from %s to %s", fn, i, tf_dtype_name(c->in[i]->dtype),
                              tf_dtype_name(want[i]));
            break;
        }
        tf_tensor_release(c->in[i]);
        c->in[i] = converted;
    }
    if (s != TF_OK) {
        for (int i = 0; i < n; i++) {
            tf_tensor_release(c->in[i]);
            c->in[i] = NULL;
        }
        c->n = 0;
    }
    return s;
}

/* ---- results written into an existing tensor ---- */

static tf_status check_into(const tf_op_call *c, tf_dtype dt, int ndim, const int64_t *shape) {
    const tf_tensor *dst = c->into;
    bool same = dst->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = dst->shape[i] == shape[i];
    if (!same) {
        char want[256], have[256];
        return tf__error(TF_ERR_SHAPE, "%s: the result has shape %s but dst has %s", c->fn,
                         tf__shape_str(ndim, shape, want, sizeof want),
                         tf__shape_str(dst->ndim, dst->shape, have, sizeof have));
    }
    /* PyTorch's out= rule: a result may be stored into a dtype of its own
     * kind or a higher one (bool < integer < float), never narrowed across. */
    if (tf__dtype_category(dt) > tf__dtype_category(dst->dtype) || tf_dtype_is_quantized(dst->dtype))
        return tf__error(TF_ERR_DTYPE, "%s: a %s result cannot be stored into a %s dst", c->fn, tf_dtype_name(dt),
                         tf_dtype_name(dst->dtype));
    return TF_OK;
}

/* Whether input i shares no byte with dst, or is exactly dst (same bytes
 * read and written per element: an in-place elementwise op). */
static bool input_safe_for(const tf_op_call *c, int i, const tf_tensor *dst) {
    if (!tf__overlap(c->in[i], dst)) return true;
    const tf_tensor_desc *d = &c->op.inputs[i];
    tf_tensor_desc o = tf__desc(dst);
    if (d->offset != o.offset || d->ndim != o.ndim) return false;
    for (int k = 0; k < d->ndim; k++)
        if (d->shape[k] > 1 && d->strides[k] != o.strides[k]) return false;
    return true;
}

/* The kernel writes dst itself when it is a contiguous tensor of the
 * result's dtype on the op's device that inputs either miss or are; else
 * the result is made apart and copied in (cast, moved, strided). */
static bool writes_directly(const tf_op_call *c, tf_dtype dt) {
    const tf_tensor *dst = c->into;
    if (dst->dtype != dt || dst->storage->dev != c->dev || !tf_tensor_is_contiguous(dst)) return false;
    for (int i = 0; i < c->n; i++)
        if (!input_safe_for(c, i, dst)) return false;
    return true;
}

static tf_status op_end_into(tf_op_call *c, tf_status s, tf_dtype dt, int ndim, const int64_t *shape) {
    tf_tensor *dst = c->into, *apart = NULL;
    if (s == TF_OK) s = check_into(c, dt, ndim, shape);
    if (s == TF_OK) s = tf__grad_check_write(c->fn, dst);
    if (s == TF_OK && c->grad)           /* the gradient could not follow the write */
        s = tf__error(TF_ERR_UNSUPPORTED, "%s: an input requires a gradient, and a write into an existing tensor "
                      "has none (turn grad mode off, or use the out-of-place form)", c->fn);
    if (s == TF_OK && tf_tensor_numel(dst)) {
        if (writes_directly(c, dt)) {
            tf__desc_into(&c->op.output, dst);
        } else {
            s = tf__op_output(c->fn, c->dev, dt, ndim, shape, &apart);
            if (s == TF_OK) tf__desc_into(&c->op.output, apart);
        }
        if (s == TF_OK) s = tf__dispatch(c->fn, c->dev, &c->op);
    }
    for (int i = 0; i < c->n; i++) {
        tf_tensor_release(c->in[i]);
        c->in[i] = NULL;
    }
    if (s == TF_OK && apart) s = tf__in(c->fn, tf_copy_into(dst, apart));
    tf_tensor_release(apart);
    return s;
}

/* An op on an input that requires a gradient that no rule recorded: its
 * output gets a node that tf_backward refuses by name, so that a missing
 * gradient is never a silent zero. */
static tf_status no_gradient_rule(tf_op_call *c, tf_tensor **out) {
    tf__grad_args a;
    memset(&a, 0, sizeof a);
    a.rule = TF__GRAD_NONE;
    a.op = c->op.kind;
    return tf__grad_finish(c->fn, TF_OK, &a, 0, NULL, out);
}

tf_status tf__op_end(tf_op_call *c, tf_status s, tf_dtype dt, int ndim, const int64_t *shape, tf_tensor **out) {
    if (c->into) return op_end_into(c, s, dt, ndim, shape);
    tf_tensor *o = NULL;
    if (s == TF_OK) s = tf__op_output(c->fn, c->dev, dt, ndim, shape, &o);
    if (s == TF_OK && tf_tensor_numel(o)) {
        tf__desc_into(&c->op.output, o);
        s = tf__dispatch(c->fn, c->dev, &c->op);
    }
    for (int i = 0; i < c->n; i++) {
        tf_tensor_release(c->in[i]);
        c->in[i] = NULL;
    }
    if (s != TF_OK) {
        tf_tensor_release(o);
        return s;
    }
    *out = o;
    return c->grad ? no_gradient_rule(c, out) : TF_OK;
}

/* ---- CPU fallback ---- */

void tf__desc_extent(const tf_tensor_desc *d, uint64_t *lo, uint64_t *hi) {
    int64_t min = 0, max = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] == 0) { *lo = *hi = d->offset; return; }
        int64_t span = (d->shape[i] - 1) * d->strides[i];
        if (span < 0) min += span; else max += span;
    }
    *lo = d->offset + (uint64_t)tf__bytes_of(d->dtype, min);
    *hi = d->offset + (uint64_t)tf__bytes_of(d->dtype, max + (int64_t)tf_dtype_block_size(d->dtype));
}

/* A CPU buffer holding the bytes of `d` from `dev`: the device's own host
 * memory when it has it, else a downloaded copy. Rewrites d to point at it. */
static tf_status stage_to_cpu(tf_device *dev, tf_device *cpu, tf_tensor_desc *d, bool fetch,
                              tf_backend_buffer **staged) {
    uint64_t lo, hi;
    tf__desc_extent(d, &lo, &hi);
    size_t n = (size_t)(hi - lo);
    const tf_device_iface *di = dev->bdev.iface, *ci = cpu->bdev.iface;
    void *(*host_ptr)(void *, tf_backend_buffer *) = TF_DEVICE_SLOT(dev, buffer_host_ptr);
    void *host = host_ptr ? host_ptr(dev->bdev.ctx, d->buffer) : NULL;
    tf_status s;
    if (host) {
        s = tf__host_sync(dev);
        if (s == TF_OK) s = ci->buffer_from_host_ptr(cpu->bdev.ctx, (char *)host + lo, n, staged);
    } else {
        s = tf__buffer_alloc(cpu, n, staged);
        if (s == TF_OK && fetch && n) {
            void *dst = ci->buffer_host_ptr(cpu->bdev.ctx, *staged);
            s = di->buffer_download(dev->bdev.ctx, tf__stream_of(dev), d->buffer, lo, dst, n);
            if (s != TF_OK) {
                tf__buffer_free(cpu, *staged);
                *staged = NULL;
            }
        }
    }
    if (s != TF_OK) return s;
    d->buffer = *staged;
    d->offset -= lo;
    return TF_OK;
}

/* Inputs an op updates in place (ADAM: m and v; param is its output). */
static bool writes_input(const tf_op *op, int i) { return op->kind == TF_OP_ADAM && (i == 2 || i == 3); }

static tf_status run_on_cpu(const char *fn, tf_device *dev, const tf_op *op) {
    tf_device *cpu = tf__cpu_device();
    const tf_device_iface *ci = cpu->bdev.iface;
    tf_op cop = *op;
    tf_backend_buffer *staged[TF_OP_MAX_INPUTS + 1] = {NULL};
    tf_status s = TF_OK;
    for (int i = 0; i < op->n_inputs && s == TF_OK; i++)
        s = stage_to_cpu(dev, cpu, &cop.inputs[i], true, &staged[i]);
    /* A strided output (a copy into part of a tensor) keeps the bytes between
     * its elements: fetch them so the write-back does not clobber them. */
    bool partial = !tf_desc_is_contiguous(&op->output);
    if (s == TF_OK) s = stage_to_cpu(dev, cpu, &cop.output, partial, &staged[TF_OP_MAX_INPUTS]);
    if (s == TF_OK && !ci->supports(cpu->bdev.ctx, &cop))
        s = tf__error(TF_ERR_UNSUPPORTED, "neither %s nor the CPU backend runs %s", dev->name,
                      tf_op_name(op->kind));
    if (s == TF_OK) s = ci->run(cpu->bdev.ctx, NULL, &cop);   /* the CPU's own queue: done on return */
    /* Write the output back unless it is the device's own host memory. */
    const tf_device_iface *di = dev->bdev.iface;
    void *(*host_ptr)(void *, tf_backend_buffer *) = TF_DEVICE_SLOT(dev, buffer_host_ptr);
    bool host_out = host_ptr && host_ptr(dev->bdev.ctx, op->output.buffer);
    if (s == TF_OK && !host_out) {
        uint64_t lo, hi;
        tf__desc_extent(&op->output, &lo, &hi);
        void *src = ci->buffer_host_ptr(cpu->bdev.ctx, staged[TF_OP_MAX_INPUTS]);
        if (hi > lo) s = di->buffer_upload(dev->bdev.ctx, tf__stream_of(dev), op->output.buffer, lo, src, (size_t)(hi - lo));
        for (int i = 0; i < op->n_inputs && s == TF_OK; i++) {
            if (!writes_input(op, i)) continue;
            tf__desc_extent(&op->inputs[i], &lo, &hi);
            src = ci->buffer_host_ptr(cpu->bdev.ctx, staged[i]);
            if (hi > lo)
                s = di->buffer_upload(dev->bdev.ctx, tf__stream_of(dev), op->inputs[i].buffer, lo, src, (size_t)(hi - lo));
        }
    }
    for (int i = 0; i <= TF_OP_MAX_INPUTS; i++)
        if (staged[i]) tf__buffer_free(cpu, staged[i]);
    return s;
}

static tf_status dispatch_op(const char *fn, tf_device *dev, tf_op *op, bool *fell_back);

/* ---- a fused op the device lacks: its parts, on the device ----
 * GEMM_EPILOGUE as the GEMM into the output, then the activation and the
 * residual add in place there: no scratch, nothing moved to the host. */
static tf_status run_gemm_epilogue_parts(const char *fn, tf_device *dev, const tf_op *op, bool *fell_back) {
    bool residual = op->params.flags & TF_GEMM_RESIDUAL;
    tf_op part = *op;
    part.kind = TF_OP_GEMM;
    part.n_inputs = op->n_inputs - residual;
    part.params.flags = 0;
    part.params.activation = 0;
    tf_status s = dispatch_op(fn, dev, &part, fell_back);
    if (s == TF_OK && op->params.activation != (int32_t)TF_NO_ACTIVATION) {
        tf__op_init(&part, (tf_op_kind)op->params.activation, 1);
        part.inputs[0] = part.output = op->output;
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    if (s == TF_OK && residual) {
        tf__op_init(&part, TF_OP_ADD, 2);
        part.inputs[0] = part.output = op->output;
        part.inputs[1] = op->inputs[op->n_inputs - 1];
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    return s;
}

/* QMATMUL of an f16/bf16 weight on a device whose kernels take only
 * block-quantized ones: the weight widened to f32 in scratch on the device,
 * then a GEMM with it transposed as a view. A pass over the weight per
 * call, but the product stays on the device (it used to fall back to the
 * CPU whole). */
static tf_status run_half_weight_product(const char *fn, tf_device *dev, const tf_op *op, bool *fell_back) {
    const tf_tensor_desc *W = &op->inputs[1];
    const int64_t n = W->shape[0], k = W->shape[1];
    tf_backend_buffer *scratch = NULL;
    tf_status s = tf__buffer_alloc(dev, (size_t)(n * k) * sizeof(float) + 1, &scratch);
    if (s != TF_OK) return tf__error_context(s, "%s: scratch for a widened weight", fn);
    tf_tensor_desc wide = {scratch, 0, TF_F32, 2, {n, k}, {k, 1}};
    tf_op part;
    tf__op_init(&part, TF_OP_COPY, 1);
    part.inputs[0] = *W;
    part.output = wide;
    s = dispatch_op(fn, dev, &part, fell_back);
    if (s == TF_OK) {
        tf__op_init(&part, TF_OP_GEMM, 2);
        part.inputs[0] = op->inputs[0];
        part.inputs[1] = (tf_tensor_desc){scratch, 0, TF_F32, 2, {k, n}, {1, k}};   /* W^T */
        part.output = op->output;
        part.params.alpha = 1;
        part.params.beta = 0;
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    tf__buffer_free(dev, scratch);
    return s;
}

static bool half_weight(const tf_op *op) {
    return (op->kind == TF_OP_QMATMUL || op->kind == TF_OP_QMATMUL_EPILOGUE) &&
           (op->inputs[1].dtype == TF_F16 || op->inputs[1].dtype == TF_BF16) && op->inputs[0].dtype == TF_F32;
}

/* QMATMUL_EPILOGUE as QMATMUL into the output, then the bias add, the
 * activation and the residual add in place there. */
static tf_status run_qmatmul_epilogue_parts(const char *fn, tf_device *dev, const tf_op *op, bool *fell_back) {
    tf_op part;
    tf__op_init(&part, TF_OP_QMATMUL, 2);
    part.inputs[0] = op->inputs[0];
    part.inputs[1] = op->inputs[1];
    part.output = op->output;
    tf_status s = dispatch_op(fn, dev, &part, fell_back);
    int next = 2;
    if (s == TF_OK && (op->params.flags & TF_QMM_BIAS)) {
        tf__op_init(&part, TF_OP_ADD, 2);
        part.inputs[0] = part.output = op->output;
        part.inputs[1] = op->inputs[next++];
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    if (s == TF_OK && op->params.activation != (int32_t)TF_NO_ACTIVATION) {
        tf__op_init(&part, (tf_op_kind)op->params.activation, 1);
        part.inputs[0] = part.output = op->output;
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    if (s == TF_OK && (op->params.flags & TF_GEMM_RESIDUAL)) {
        tf__op_init(&part, TF_OP_ADD, 2);
        part.inputs[0] = part.output = op->output;
        part.inputs[1] = op->inputs[op->n_inputs - 1];
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    return s;
}

/* ADD_NORM as the add into a scratch tensor of the output's geometry on
 * the device, then the norm from it into the output: the norm's input and
 * output stay apart, as every row kernel expects. */
static tf_status run_add_norm_parts(const char *fn, tf_device *dev, const tf_op *op, bool *fell_back) {
    size_t nbytes = (size_t)tf_desc_numel(&op->output) * tf_dtype_size(op->output.dtype);
    tf_backend_buffer *scratch = NULL;
    tf_status s = tf__buffer_alloc(dev, nbytes ? nbytes : 1, &scratch);
    if (s != TF_OK) return tf__error_context(s, "%s: scratch for the sum of %s", fn, tf_op_name(op->kind));
    tf_tensor_desc sum = op->output;
    sum.buffer = scratch;
    sum.offset = 0;
    tf_op part;
    tf__op_init(&part, TF_OP_ADD, 2);
    part.inputs[0] = op->inputs[0];
    part.inputs[1] = op->inputs[1];
    part.output = sum;
    s = dispatch_op(fn, dev, &part, fell_back);
    if (s == TF_OK) {
        tf__op_init(&part, op->kind == TF_OP_ADD_RMSNORM ? TF_OP_RMSNORM : TF_OP_LAYERNORM, op->n_inputs - 1);
        part.inputs[0] = sum;
        for (int i = 2; i < op->n_inputs; i++) part.inputs[i - 1] = op->inputs[i];
        part.output = op->output;
        part.params.axis = op->params.axis;
        part.params.eps = op->params.eps;
        part.params.flags = op->params.flags;
        s = dispatch_op(fn, dev, &part, fell_back);
    }
    tf__buffer_free(dev, scratch);
    return s;
}

static tf_status dispatch_op(const char *fn, tf_device *dev, tf_op *op, bool *fell_back) {
    atomic_fetch_add(&dev->ops, 1);
    if (dev->bdev.iface->supports(dev->bdev.ctx, op)) {
        tf__clear_error();
        tf_status s = dev->bdev.iface->run(dev->bdev.ctx, tf__stream_of(dev), op);
        if (s != TF_OK) tf__error_context(s, "%s: %s on %s", fn, tf_op_name(op->kind), dev->name);
        return s;
    }
    if (op->kind == TF_OP_GEMM_EPILOGUE) return run_gemm_epilogue_parts(fn, dev, op, fell_back);
    if (op->kind == TF_OP_QMATMUL_EPILOGUE) return run_qmatmul_epilogue_parts(fn, dev, op, fell_back);
    if (half_weight(op) && dev != tf__cpu_device()) return run_half_weight_product(fn, dev, op, fell_back);
    if (op->kind == TF_OP_ADD_RMSNORM || op->kind == TF_OP_ADD_LAYERNORM)
        return run_add_norm_parts(fn, dev, op, fell_back);
    if (dev == tf__cpu_device())
        return tf__error(TF_ERR_UNSUPPORTED, "%s: the CPU backend does not run %s for %s", fn,
                         tf_op_name(op->kind), tf_dtype_name(op->output.dtype));
    atomic_fetch_add(&dev->fallbacks[op->kind], 1);
    *fell_back = true;
    if (!atomic_exchange(&dev->fallback_warned[op->kind], true))
        tf__log(TF_LOG_INFO, "%s does not run %s (%s); running it on the CPU", dev->name, tf_op_name(op->kind),
                tf_dtype_name(op->output.dtype));
    tf__clear_error();
    tf_status s = run_on_cpu(fn, dev, op);
    if (s != TF_OK) tf__error_context(s, "%s: %s from %s on the CPU", fn, tf_op_name(op->kind), dev->name);
    return s;
}

/* Whether dev runs `kind` over n inputs of dtype dt itself (no CPU
 * fallback, no parts): autograd asks before choosing a gradient kernel
 * over a gradient composed of forward ops. The descriptors are small and
 * contiguous; supports() reads dtypes and kinds, never the buffers. */
bool tf__device_runs(tf_device *dev, tf_op_kind kind, tf_dtype dt, int n) {
    tf_op op;
    tf__op_init(&op, kind, n);
    tf_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.ndim = 4;
    for (int i = 0; i < 4; i++) d.shape[i] = d.strides[i] = 1;
    for (int i = 0; i < n && i < TF_OP_MAX_INPUTS; i++) op.inputs[i] = d;
    op.output = d;
    return dev->bdev.iface->supports(dev->bdev.ctx, &op);
}

/* A replayed op the device ran itself at capture goes straight to `run`:
 * supports() answered then and the op has not changed. */
static tf_status run_native(const char *fn, tf_device *dev, tf_op *op, bool *fell_back) {
    (void)fell_back;
    atomic_fetch_add_explicit(&dev->ops, 1, memory_order_relaxed);
    tf__clear_error();
    tf_status s = dev->bdev.iface->run(dev->bdev.ctx, tf__stream_of(dev), op);
    if (s != TF_OK) tf__error_context(s, "%s: %s on %s", fn, tf_op_name(op->kind), dev->name);
    return s;
}

static void zero_axes_past(tf_tensor_desc *d, int upto) {
    for (int i = d->ndim < 0 ? 0 : d->ndim; i < upto; i++) d->shape[i] = d->strides[i] = 0;
}

/* Every descriptor's axes past its ndim zero, up to the op's widest (at
 * least TF_ZEROED_AXES): the backends see what they saw when descriptors
 * were built zeroed whole, without the core clearing 536 bytes apiece. */
static void zero_short_axes(tf_op *op) {
    int widest = op->output.ndim > TF_ZEROED_AXES ? op->output.ndim : TF_ZEROED_AXES;
    for (int i = 0; i < op->n_inputs && i < TF_OP_MAX_INPUTS; i++)
        if (op->inputs[i].ndim > widest) widest = op->inputs[i].ndim;
    if (widest > TF_MAX_DIMS) widest = TF_MAX_DIMS;
    zero_axes_past(&op->output, widest);
    for (int i = 0; i < op->n_inputs && i < TF_OP_MAX_INPUTS; i++) zero_axes_past(&op->inputs[i], widest);
}

tf_status tf__dispatch_recorded(const char *fn, tf_device *dev, tf_op *op, bool native) {
    zero_short_axes(op);
    return tf__hook_run(fn, dev, op, native ? run_native : dispatch_op);
}

tf_status tf__dispatch(const char *fn, tf_device *dev, tf_op *op) {
    tf_status s = tf__dispatch_recorded(fn, dev, op, false);
    tf__hook_op_done(fn, dev, op, s);
    return s;
}

/* ---- ordering between streams ---- */

tf_status tf__stream_wait(tf_device *waiter, tf_device *signaler) {
    tf_status (*create)(void *, tf_backend_event **) = TF_DEVICE_SLOT(signaler, event_create);
    tf_status (*record)(void *, tf_backend_event *, tf_backend_stream *) = TF_DEVICE_SLOT(signaler, event_record);
    tf_status (*wait)(void *, tf_backend_event *, tf_backend_stream *) = TF_DEVICE_SLOT(waiter, event_wait);
    void (*destroy)(void *, tf_backend_event *) = TF_DEVICE_SLOT(signaler, event_destroy);
    if (!create || !record || !wait || !destroy) return TF_OK;   /* synchronous devices: already in order */
    tf_backend_event *e = NULL;
    tf__clear_error();
    tf_status s = create(signaler->bdev.ctx, &e);
    if (s == TF_OK) s = record(signaler->bdev.ctx, e, tf__stream_of(signaler));
    if (s == TF_OK) s = wait(waiter->bdev.ctx, e, tf__stream_of(waiter));
    if (e) destroy(signaler->bdev.ctx, e);
    if (s != TF_OK) tf__error_context(s, "ordering %s after %s", waiter->name, signaler->name);
    return s;
}

/* ---- the copy op ---- */

void tf__op_init(tf_op *op, tf_op_kind kind, int n_inputs) {
    memset(op, 0, sizeof *op);
    op->struct_size = (uint32_t)sizeof *op;
    op->kind = kind;
    op->n_inputs = n_inputs;
}

tf_status tf__copy_into(const char *fn, const tf_tensor *src, tf_tensor *dst) {
    tf_op op;
    tf__op_init(&op, TF_OP_COPY, 1);
    tf__desc_into(&op.inputs[0], src);
    tf__desc_into(&op.output, dst);
    return tf_tensor_numel(dst) ? tf__dispatch(fn, dst->storage->dev, &op) : TF_OK;
}

tf_status tf__copy_cast(const char *fn, const tf_tensor *t, tf_dtype dt, tf_tensor **out) {
    tf_device *dev = t->storage->dev;
    tf_tensor *o;
    tf_status s = tf__op_output(fn, dev, dt, t->ndim, t->shape, &o);
    if (s != TF_OK) return s;
    tf_status (*copy)(void *, tf_backend_stream *, tf_backend_buffer *, size_t, tf_backend_buffer *, size_t, size_t) =
        TF_DEVICE_SLOT(dev, buffer_copy);
    size_t n = (size_t)tf__bytes_of(dt, tf_tensor_numel(t));
    if (!n) {
        s = TF_OK;
    } else if (copy && dt == t->dtype && tf_tensor_is_contiguous(t) && !tf__hook_ops_only()) {   /* a byte range */
        tf__clear_error();
        s = copy(dev->bdev.ctx, tf__stream_of(dev), o->storage->buf, 0, t->storage->buf, (size_t)t->offset, n);
        if (s != TF_OK) tf__error_context(s, "%s: copying %zu bytes on %s", fn, n, dev->name);
    } else {
        s = tf__copy_into(fn, t, o);
    }
    if (s != TF_OK) {
        tf_tensor_release(o);
        return s;
    }
    *out = o;
    return TF_OK;
}
