/* The CPU backend's kernels as a table kernel[op][dtype], BLIS's way: the
 * reference kernels fill it (cpu_ref.c), then the BLAS layer
 * (cpu_blas_kernels.c) and the SIMD layer (cpu_simd.c, by CPUID) override
 * entries. TF_CPU_KERNELS=reference means no overrides at all: every op,
 * GEMM included, runs the reference loops. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "cpu_kernels.h"
#include "cpu_quant.h"
#include "fast_kernels.h"

bool tf_cpu_unary_formula(int32_t op);   /* cpu_ref.c */

static tf_cpu_table table;
static pthread_once_t built = PTHREAD_ONCE_INIT;

static void build(void) {
    tf_cpu_ref_install(&table);
    if (!tf_cpu_reference_kernels()) {
        if (tf_cpu_have_blas()) tf_cpu_blas_install(&table);
        if (tf_cpu_have_blas()) tf_cpu_conv_install(&table);
        if (tf_fast()) tf_cpu_simd_install(&table);
        if (tf_fast()) tf_cpu_attn_grad_install(&table);
        tf_cpu_flat_install(&table);
    }
    tf_cpu_quant_install(&table);       /* the only kernels of the quantized dtypes: in every mode */
    tf_cpu_complex_install(&table);     /* the only kernels of the complex dtypes: in every mode */
}

tf_dtype tf_cpu_table_dtype(const tf_op *op) {
    if (op->n_inputs && (op->inputs[0].dtype == TF_C64 || op->inputs[0].dtype == TF_C128))
        return op->inputs[0].dtype;                 /* complex kernels read complex (cpu_complex.c) */
    switch (tf_op_kernel_of(op->kind)) {            /* kernels keyed by what they read */
    case TF_KERNEL_REDUCE: case TF_KERNEL_SCAN: case TF_KERNEL_COMPARE: case TF_KERNEL_PREDICATE:
    case TF_KERNEL_SORT:
        return op->inputs[0].dtype;
    default:
        return op->output.dtype;
    }
}

static tf_cpu_kernel entry(const tf_op *op) {
    pthread_once(&built, build);
    tf_dtype dt = tf_cpu_table_dtype(op);
    if ((unsigned)op->kind >= TF_OP_COUNT || (unsigned)dt >= TF_DTYPE_COUNT) return NULL;
    return table.fn[op->kind][dt];
}

static bool is_float(tf_dtype dt) { return dt == TF_F32 || dt == TF_F64 || dt == TF_F16 || dt == TF_BF16; }


static bool same_dtype_inputs(const tf_op *op) {
    for (int i = 0; i < op->n_inputs; i++)
        if (op->inputs[i].dtype != op->output.dtype) return false;
    return true;
}

static bool index_dtype(tf_dtype dt) { return dt == TF_I32 || dt == TF_I64; }

/* Copies: a quantized side converts with float and quantized dtypes only. */
static bool copy_supported(tf_dtype in, tf_dtype out) {
    if (tf_dtype_is_quantized(in)) return is_float(out) || tf_dtype_is_quantized(out);
    return !tf_dtype_is_quantized(out) || is_float(in);
}

static bool qmatmul_supported(const tf_op *op) {
    tf_dtype w = op->inputs[1].dtype;
    return op->output.dtype == TF_F32 && op->inputs[0].dtype == TF_F32 && op->inputs[0].ndim == 2 &&
           op->inputs[1].ndim == 2 && (tf_dtype_is_quantized(w) || w == TF_F16 || w == TF_BF16);
}

static bool f32_inputs_from(const tf_op *op, int first) {
    for (int i = first; i < op->n_inputs; i++)
        if (op->inputs[i].dtype != TF_F32 || op->inputs[i].ndim != 2) return false;
    return true;
}

/* Reductions: sums and products of integers give i64, positions i64, the
 * rest (and every float reduction) the input's dtype. */
static bool reduce_supported(tf_op_kind kind, tf_dtype in, tf_dtype out) {
    switch (kind) {
    case TF_OP_SUM: case TF_OP_PROD: case TF_OP_CUMSUM: return is_float(in) ? out == in : out == TF_I64;
    case TF_OP_ARGMAX: case TF_OP_ARGMIN: return out == TF_I64;
    case TF_OP_MAX: case TF_OP_MIN: return out == in;
    default: return is_float(in) && out == in;     /* mean, var, std, logsumexp */
    }
}

/* The dtype combinations the kernels take (the core's op contract), by the
 * op's kernel family (the op table's kernel column), and an entry in the
 * table for them: a new op of a family needs no line here. */
static bool has_complex_operand(const tf_op *op) {
    if (tf_dtype_is_complex(op->output.dtype)) return true;
    for (int i = 0; i < op->n_inputs; i++)
        if (tf_dtype_is_complex(op->inputs[i].dtype)) return true;
    return false;
}

bool tf_cpu_kernels_support(const tf_op *op) {
    tf_dtype out = op->output.dtype, in = op->n_inputs ? op->inputs[0].dtype : out;
    if ((unsigned)out >= TF_DTYPE_COUNT || (unsigned)in >= TF_DTYPE_COUNT || !entry(op)) return false;
    for (int i = 1; i < op->n_inputs; i++)
        if ((unsigned)op->inputs[i].dtype >= TF_DTYPE_COUNT) return false;
    if (has_complex_operand(op)) return tf_cpu_complex_supports(op);
    switch (tf_op_kernel_of(op->kind)) {
    case TF_KERNEL_ARITH: return same_dtype_inputs(op);
    case TF_KERNEL_SELECT: return op->inputs[0].dtype == TF_BOOL && op->inputs[1].dtype == out && op->inputs[2].dtype == out;
    case TF_KERNEL_COMPARE: return op->inputs[1].dtype == in && out == TF_BOOL;
    case TF_KERNEL_PREDICATE: return out == TF_BOOL && (op->kind != TF_OP_LOGICAL_NOT || in == TF_BOOL);
    case TF_KERNEL_MATMUL:
        if (op->kind == TF_OP_GEMM_EPILOGUE)     /* an activation the formulas know */
            return is_float(out) && same_dtype_inputs(op) &&
                   (op->params.activation == (int32_t)TF_NO_ACTIVATION || tf_cpu_unary_formula(op->params.activation));
        if (op->kind == TF_OP_QMATMUL_EPILOGUE)  /* f32 bias and residual, an activation the formulas know */
            return qmatmul_supported(op) && op->n_inputs <= 4 && f32_inputs_from(op, 2) &&
                   (op->params.activation == (int32_t)TF_NO_ACTIVATION || tf_cpu_unary_formula(op->params.activation));
        return op->kind == TF_OP_QMATMUL ? qmatmul_supported(op) : same_dtype_inputs(op);
    case TF_KERNEL_REDUCE: case TF_KERNEL_SCAN: return reduce_supported(op->kind, in, out);
    case TF_KERNEL_PICK: return out == in && index_dtype(op->inputs[1].dtype);
    case TF_KERNEL_TRIANGLE: return out == in && op->output.ndim >= 2;
    case TF_KERNEL_ROPE: return is_float(out) && out == in && index_dtype(op->inputs[1].dtype);
    case TF_KERNEL_ROW: case TF_KERNEL_ATTENTION: return is_float(out) && out == in;
    case TF_KERNEL_ADD_NORM: return is_float(out) && same_dtype_inputs(op);
    case TF_KERNEL_COPY: return copy_supported(in, out);
    case TF_KERNEL_FILL: return true;
    case TF_KERNEL_ARANGE: return out != TF_BOOL;
    case TF_KERNEL_RANDOM: return is_float(out);
    case TF_KERNEL_SORT:                         /* searchsorted: both inputs one dtype; positions i64 */
        if (op->kind == TF_OP_SEARCHSORTED) return op->inputs[1].dtype == in && out == TF_I64;
        return op->kind == TF_OP_SORT ? out == in : out == TF_I64;
    default: return is_float(out) && same_dtype_inputs(op);       /* MATH (the unary formulas), CONV, POOL, OPTIMIZER */
    }
}

tf_status tf_cpu_kernels_run(const tf_op *op, tf_cpu_address_fn address) {
    tf_cpu_kernel fn = entry(op);
    return fn ? fn(op, address) : TF_ERR_UNSUPPORTED;
}
