/* tensorframe — the op table.
 *
 * One X-macro names every op. From it come the op enum, the op names, the
 * core's validation and dispatch, the conformance cases and the op list in
 * the docs. Adding an op is one row here plus its kernels.
 *
 * Columns:
 *   ENUM    suffix of TF_OP_<ENUM>
 *   name    lower-case name (tf_op_name, docs, conformance output)
 *   arity   number of tensor inputs (0 = creation op)
 *   shape   shape rule:  BROADCAST  NumPy broadcasting of the inputs
 *                        MATMUL     NumPy matmul (1-D, 2-D, batched + broadcast)
 *                        REDUCE     one axis or all, keepdim
 *                        SAME       output shape = input shape (copy/cast)
 *                        UNARY      elementwise over one input, same shape
 *                        WHERE      three inputs broadcast together (cond, a, b)
 *                        SCAN       along one axis, output shape = input shape
 *                        INDEXED    values picked by an index tensor (i32/i64)
 *                        TRIANGLE   elements kept or zeroed by position in the last two axes
 *                        GEMM       alpha * op(a) @ op(b) + beta * c, batched
 *                        ROW        line by line along one axis (softmax, norms)
 *                        ROPE       rotary position embedding of pairs in the last axis
 *                        ATTENTION  scaled dot-product attention
 *                        CONV       2-d convolution, NCHW
 *                        POOL       2-d max / average pooling, NCHW
 *                        OPTIMIZER  updates its inputs in place
 *                        COMPOSITE  lowered by the core to views and copies: no
 *                                   kernel of its own, every backend runs it
 *                        CREATE     shape given by the caller
 *                        QMATMUL    x [M, K] (f32) times a block-quantized, f16 or
 *                                   bf16 w [N, K] transposed, w read as stored:
 *                                   [M, N] f32 (tf_matmul_quantized, tf_linear)
 *                        GEMM_EPILOGUE  a GEMM and what follows it in one kernel:
 *                                   act(alpha * a @ b + beta * c) + r, inputs a,
 *                                   b, c (when beta != 0 and given), r (with
 *                                   TF_GEMM_RESIDUAL, last); act is
 *                                   params.activation (a unary op of the MATH
 *                                   family without parameters, or
 *                                   TF_NO_ACTIVATION). A device without the
 *                                   kernel runs it as its parts, on the device
 *                                   (tf_linear_fused, the graph fusion pass)
 *                        QMATMUL_EPILOGUE  QMATMUL and what follows a linear
 *                                   layer: act(x @ w^T + bias) + r, inputs x, w
 *                                   (as QMATMUL's), the bias (with
 *                                   TF_QMM_BIAS) and r (with TF_GEMM_RESIDUAL,
 *                                   last), both f32 [M, N] (stride 0 where
 *                                   broadcast); act is params.activation as
 *                                   GEMM_EPILOGUE's. A device without the
 *                                   kernel runs its parts, on the device
 *                                   (tf_linear_fused, the graph fusion pass)
 *                        SORT       along one axis, output shape = input shape
 *                                   (sort: the values in order; argsort: their
 *                                   positions, i64), stable, NaN after every
 *                                   number (before, descending: the reverse
 *                                   order of the same total order);
 *                                   params.axis, params.flags TF_SORT_DESCENDING
 *                        SEARCH     positions in a sorted 1-d input (the first)
 *                                   at which the second input's values would
 *                                   go: i64 in the second input's shape, the
 *                                   first such position (the last, with
 *                                   TF_SEARCH_RIGHT in params.flags), NaN
 *                                   ordered after every number
 *                        ADD_NORM   a residual add and the norm of its rows in
 *                                   one pass: norm(x + r) along the last axis,
 *                                   the sum rounded to the dtype first (what
 *                                   tf_add then tf_rmsnorm/tf_layernorm give);
 *                                   inputs x, r (broadcast to x), then the
 *                                   weight and bias as ROW's. A device without
 *                                   the kernel runs its parts, on the device
 *                                   (tf_add_rmsnorm, tf_add_layernorm, the
 *                                   graph fusion pass)
 *                        CONV_GRAD  a convolution's gradients, NCHW, the forward's
 *                                   stride, padding, dilation and groups in
 *                                   params: conv2d_grad_input takes dy
 *                                   [N, O, Ho, Wo] and the weight, and gives dx
 *                                   in the output's shape [N, C, H, W] (the
 *                                   forward's input, which dy alone does not
 *                                   tell); conv2d_grad_weight takes x and dy
 *                                   and gives dW [O, C/groups, kh, kw]
 *                        POOL_GRAD  max pooling's gradient: inputs x and dy,
 *                                   dx in x's shape; each window's dy goes to
 *                                   the first element equal to its maximum
 *                                   (the first NaN where there is one), what
 *                                   PyTorch picks; the forward's kernel,
 *                                   stride, padding and dilation in params
 *                        ATTENTION_GRAD  SDPA's gradients, the forward recomputed
 *                                   (no scores kept): inputs q, k, v as
 *                                   SDPA's and dO [B, Hq, Lq, Dv], the
 *                                   forward's scale, q_offset and
 *                                   TF_SDPA_CAUSAL in params (no mask: a
 *                                   masked forward's gradient is composed);
 *                                   sdpa_grad_q gives dQ in q's shape,
 *                                   sdpa_grad_kv dK and dV side by side,
 *                                   [B, Hkv, Lk, D + Dv], summed over the
 *                                   query heads that share a kv head
 *                        NORM_GRAD  rmsnorm's gradient along the last axis:
 *                                   inputs x and dy (x's shape), then with
 *                                   TF_ROW_WEIGHT in params.flags the weight
 *                                   [D]; params.eps the forward's; dx in x's
 *                                   shape (the weight's gradient is dy times
 *                                   the unweighted norm, summed over rows)
 *   dtype   dtype rule:  PROMOTE        promoted input dtype (see tf_promote_types)
 *                        PROMOTE_FLOAT  promoted, then integers/bool -> f32
 *                        SUM            floats keep their dtype, integers/bool -> i64
 *                        SAME           input dtype
 *                        COMPARE        inputs promoted, output bool
 *                        LOGICAL        inputs cast to bool (nonzero and NaN are true), output bool
 *                        BOOL           output bool, input as is
 *                        INDEX          output i64 (positions)
 *                        FIRST          the first input's dtype
 *                        CAST           dtype chosen by the caller
 *                        REAL           the dtype of the input's parts: c64 -> f32,
 *                                       c128 -> f64, a real dtype itself (abs, real, imag)
 *   accepts dtype set accepted: ALL, NUMERIC (all but bool), FLOAT, INTEGER
 *           (i8 i32 i64 u8), COMPLEX (c64 c128); CALL, CNUMERIC and CFLOAT
 *           are ALL, NUMERIC and FLOAT with the complex dtypes
 *   domain  inputs the conformance suite draws: ANY, NONZERO (|b| >= 0.5),
 *           POW (positive base, small exponent), WIDE (past 8-bit ranges),
 *           POSITIVE (0.05 to 4), TIES (few distinct values, so equality
 *           happens), SPECIAL (NaN and infinities mixed in), NEAR_ONE
 *           (0.9 to 1.1 and small integers, for long products), UNIT
 *           (inside (-1, 1): acos, asin, atanh), GE_ONE (1 to 4: acosh),
 *           SIGNS (zeros of both signs, NaN and infinities mixed in: copysign, atan2),
 *           SHIFT (shift counts from -2 to 70 for the second input),
 *           ORDER (few distinct values, and for floats NaN, infinities and
 *           zeros of both signs among them: sort, argsort, searchsorted)
 *   nmse_k  conformance threshold: NMSE <= nmse_k * eps(out dtype)^2, where
 *           eps is the dtype's machine epsilon, times the reduction length
 *           for ops that accumulate (REDUCE: elements per output; MATMUL, GEMM: K;
 *           SCAN: the axis length; ROW and ATTENTION: the line length; CONV and
 *           POOL: the window size), since
 *           rounding error grows with it. 0 means bit-exact. Integer outputs
 *           are always compared exactly. gelu's bound allows for its formula
 *           cancelling (1 + erf -> 0) at negative inputs, as PyTorch's does.
 *           QMATMUL (K) adds 1e-4 for the 8-bit rounding of x that a device
 *           may apply per block: |error| <= d/2 with d = max|x|/127, an NMSE
 *           near 1.5e-5 for uniform x, so a bound six times that.
 *   kernel  the kernel family that runs the op, for backends that share one
 *           kernel among several ops (tf_op_kernel_of): ARITH (binary
 *           arithmetic), MATH (unary float math), COMPARE (comparisons and
 *           logical and/or, bool out), PREDICATE (logical_not, isnan, isinf),
 *           SELECT, MATMUL, REDUCE, SCAN, PICK (index_select, gather),
 *           TRIANGLE, COPY, FILL, ARANGE, RANDOM, ROW, ROPE, ATTENTION, CONV,
 *           POOL, OPTIMIZER, SORT (sort, argsort, searchsorted), ADD_NORM (fused: a backend without it is sent
 *           the parts), BACKWARD (gradients of other ops' kernels: a device
 *           without one runs it on the CPU, and autograd composes the
 *           gradient from forward ops there instead); NONE for composites. Kernels tell the ops of a
 *           family apart by the op's own value (TF_OP_ADD, ...), never by its
 *           distance from another op.
 *
 * Rows are append-only: an op's value is ABI that plugins receive (a test
 * pins every value). A new op goes at the end of the list.
 */
#ifndef TENSORFRAME_OPS_H
#define TENSORFRAME_OPS_H

/* X(ENUM, name, arity, shape, dtype, accepts, domain, nmse_k, kernel) */
#define TF_OP_LIST(X)                                                            \
    X(ADD,          add,          2, BROADCAST, PROMOTE,       CNUMERIC, ANY,     1, ARITH) \
    X(SUB,          sub,          2, BROADCAST, PROMOTE,       CNUMERIC, ANY,     1, ARITH) \
    X(MUL,          mul,          2, BROADCAST, PROMOTE,       CNUMERIC, ANY,     1, ARITH) \
    X(DIV,          div,          2, BROADCAST, PROMOTE_FLOAT, CNUMERIC, NONZERO, 1, ARITH) \
    X(MAXIMUM,      maximum,      2, BROADCAST, PROMOTE,       NUMERIC, ANY,     0, ARITH) \
    X(MINIMUM,      minimum,      2, BROADCAST, PROMOTE,       NUMERIC, ANY,     0, ARITH) \
    X(POW,          pow,          2, BROADCAST, PROMOTE,       CNUMERIC, POW,     4, ARITH) \
    X(MATMUL,       matmul,       2, MATMUL,    PROMOTE,       CNUMERIC, ANY,     4, MATMUL) \
    X(SUM,          sum,          1, REDUCE,    SUM,           CALL,     ANY,     4, REDUCE) \
    X(MEAN,         mean,         1, REDUCE,    SAME,          CFLOAT,   ANY,     4, REDUCE) \
    X(COPY,         copy,         1, SAME,      CAST,          CALL,     WIDE,    1, COPY) \
    X(FILL,         fill,         0, CREATE,    CAST,          CALL,     ANY,     0, FILL) \
    X(ARANGE,       arange,       0, CREATE,    CAST,          NUMERIC, ANY,     1, ARANGE) \
    X(RAND_UNIFORM, rand_uniform, 0, CREATE,    CAST,          FLOAT,   ANY,     1, RANDOM) \
    X(RAND_NORMAL,  rand_normal,  0, CREATE,    CAST,          FLOAT,   ANY,     4, RANDOM) \
    X(NEG,          neg,          1, UNARY,     SAME,          CFLOAT,   ANY,     0, MATH) \
    X(ABS,          abs,          1, UNARY,     REAL,          CFLOAT,   ANY,     0, MATH) \
    X(SIGN,         sign,         1, UNARY,     SAME,          CFLOAT,   ANY,     0, MATH) \
    X(EXP,          exp,          1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(LOG,          log,          1, UNARY,     SAME,          CFLOAT,   POSITIVE, 16, MATH) \
    X(LOG1P,        log1p,        1, UNARY,     SAME,          CFLOAT,   POSITIVE, 16, MATH) \
    X(EXPM1,        expm1,        1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(SQRT,         sqrt,         1, UNARY,     SAME,          CFLOAT,   POSITIVE, 4, MATH) \
    X(RSQRT,        rsqrt,        1, UNARY,     SAME,          FLOAT,   POSITIVE, 16, MATH) \
    X(SIN,          sin,          1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(COS,          cos,          1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(TANH,         tanh,         1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(SIGMOID,      sigmoid,      1, UNARY,     SAME,          FLOAT,   ANY,     16, MATH) \
    X(RELU,         relu,         1, UNARY,     SAME,          FLOAT,   ANY,     0, MATH) \
    X(LEAKY_RELU,   leaky_relu,   1, UNARY,     SAME,          FLOAT,   ANY,     1, MATH) \
    X(GELU,         gelu,         1, UNARY,     SAME,          FLOAT,   ANY,     1024, MATH) \
    X(GELU_TANH,    gelu_tanh,    1, UNARY,     SAME,          FLOAT,   ANY,     1024, MATH) \
    X(SILU,         silu,         1, UNARY,     SAME,          FLOAT,   ANY,     16, MATH) \
    X(SOFTPLUS,     softplus,     1, UNARY,     SAME,          FLOAT,   WIDE,    16, MATH) \
    X(FLOOR,        floor,        1, UNARY,     SAME,          FLOAT,   ANY,     0, MATH) \
    X(CEIL,         ceil,         1, UNARY,     SAME,          FLOAT,   ANY,     0, MATH) \
    X(ROUND,        round,        1, UNARY,     SAME,          CFLOAT,   ANY,     0, MATH) \
    X(CLAMP,        clamp,        1, UNARY,     SAME,          FLOAT,   ANY,     0, MATH) \
    X(EQ,           eq,           2, BROADCAST, COMPARE,       CALL,     TIES,    0, COMPARE) \
    X(NE,           ne,           2, BROADCAST, COMPARE,       CALL,     TIES,    0, COMPARE) \
    X(LT,           lt,           2, BROADCAST, COMPARE,       ALL,     TIES,    0, COMPARE) \
    X(LE,           le,           2, BROADCAST, COMPARE,       ALL,     TIES,    0, COMPARE) \
    X(GT,           gt,           2, BROADCAST, COMPARE,       ALL,     TIES,    0, COMPARE) \
    X(GE,           ge,           2, BROADCAST, COMPARE,       ALL,     TIES,    0, COMPARE) \
    X(LOGICAL_AND,  logical_and,  2, BROADCAST, LOGICAL,       CALL,     TIES,    0, COMPARE) \
    X(LOGICAL_OR,   logical_or,   2, BROADCAST, LOGICAL,       CALL,     TIES,    0, COMPARE) \
    X(LOGICAL_NOT,  logical_not,  1, UNARY,     LOGICAL,       CALL,     TIES,    0, PREDICATE) \
    X(ISNAN,        isnan,        1, UNARY,     BOOL,          CALL,     SPECIAL, 0, PREDICATE) \
    X(ISINF,        isinf,        1, UNARY,     BOOL,          CALL,     SPECIAL, 0, PREDICATE) \
    X(WHERE,        where,        3, WHERE,     PROMOTE,       CALL,     ANY,     0, SELECT) \
    X(MAX,          max,          1, REDUCE,    SAME,          ALL,     ANY,     0, REDUCE) \
    X(MIN,          min,          1, REDUCE,    SAME,          ALL,     ANY,     0, REDUCE) \
    X(ARGMAX,       argmax,       1, REDUCE,    INDEX,         ALL,     TIES,    0, REDUCE) \
    X(ARGMIN,       argmin,       1, REDUCE,    INDEX,         ALL,     TIES,    0, REDUCE) \
    X(PROD,         prod,         1, REDUCE,    SUM,           CALL,     NEAR_ONE, 4, REDUCE) \
    X(VAR,          var,          1, REDUCE,    SAME,          FLOAT,   ANY,     16, REDUCE) \
    X(STD,          std,          1, REDUCE,    SAME,          FLOAT,   ANY,     16, REDUCE) \
    X(LOGSUMEXP,    logsumexp,    1, REDUCE,    SAME,          FLOAT,   ANY,     16, REDUCE) \
    X(CUMSUM,       cumsum,       1, SCAN,      SUM,           ALL,     ANY,     4, SCAN) \
    X(INDEX_SELECT, index_select, 2, INDEXED,   FIRST,         CALL,     ANY,     0, PICK) \
    X(GATHER,       gather,       2, INDEXED,   FIRST,         CALL,     ANY,     0, PICK) \
    X(TRIL,         tril,         1, TRIANGLE,  SAME,          CALL,     ANY,     0, TRIANGLE) \
    X(TRIU,         triu,         1, TRIANGLE,  SAME,          CALL,     ANY,     0, TRIANGLE) \
    X(CONCAT,       concat,       2, COMPOSITE, PROMOTE,       CALL,     ANY,     0, NONE) \
    X(STACK,        stack,        2, COMPOSITE, PROMOTE,       CALL,     ANY,     0, NONE) \
    X(SPLIT,        split,        1, COMPOSITE, SAME,          CALL,     ANY,     0, NONE) \
    X(PAD,          pad,          1, COMPOSITE, SAME,          CALL,     ANY,     0, NONE) \
    X(TILE,         tile,         1, COMPOSITE, SAME,          CALL,     ANY,     0, NONE) \
    X(FLIP,         flip,         1, COMPOSITE, SAME,          CALL,     ANY,     0, NONE) \
    X(GEMM,         gemm,         3, GEMM,      PROMOTE,       CFLOAT,   ANY,     4, MATMUL) \
    X(GEMV,         gemv,         2, COMPOSITE, PROMOTE,       CNUMERIC, ANY,     4, NONE) \
    X(OUTER,        outer,        2, COMPOSITE, PROMOTE,       CNUMERIC, ANY,     1, NONE) \
    X(SOFTMAX,      softmax,      1, ROW,       SAME,          FLOAT,   WIDE,    16, ROW) \
    X(LOG_SOFTMAX,  log_softmax,  1, ROW,       SAME,          FLOAT,   WIDE,    16, ROW) \
    X(RMSNORM,      rmsnorm,      2, ROW,       SAME,          FLOAT,   ANY,     16, ROW) \
    X(LAYERNORM,    layernorm,    3, ROW,       SAME,          FLOAT,   ANY,     16, ROW) \
    X(ROPE,         rope,         2, ROPE,      SAME,          FLOAT,   ANY,     64, ROPE) \
    X(SDPA,         sdpa,         4, ATTENTION, SAME,          FLOAT,   ANY,     16, ATTENTION) \
    X(ATTENTION_SCORES, attention_scores, 2, COMPOSITE, PROMOTE, FLOAT, ANY,     4, NONE) \
    X(WEIGHTED_SUM_ROWS, weighted_sum_rows, 2, COMPOSITE, PROMOTE, FLOAT, ANY,   4, NONE) \
    X(CONV2D,       conv2d,       3, CONV,      SAME,          FLOAT,   ANY,     16, CONV) \
    X(MAXPOOL2D,    maxpool2d,    1, POOL,      SAME,          FLOAT,   ANY,     0, POOL) \
    X(AVGPOOL2D,    avgpool2d,    1, POOL,      SAME,          FLOAT,   ANY,     16, POOL) \
    X(BATCH_NORM,   batch_norm,   5, COMPOSITE, SAME,          FLOAT,   ANY,     64, NONE) \
    X(CROSS_ENTROPY, cross_entropy, 2, COMPOSITE, SAME,        FLOAT,   ANY,     64, NONE) \
    X(ADAM,         adam,         4, OPTIMIZER, SAME,          FLOAT,   ANY,     16, OPTIMIZER) \
    X(SWIGLU,       swiglu,       2, BROADCAST, PROMOTE,       FLOAT,   ANY,     16, ARITH) \
    X(QMATMUL,      qmatmul,      2, QMATMUL,   FIRST,         FLOAT,   ANY,     16, MATMUL) \
    X(GEMM_EPILOGUE, gemm_epilogue, 4, GEMM_EPILOGUE, PROMOTE, FLOAT,   ANY,     16, MATMUL) \
    X(ADD_RMSNORM,  add_rmsnorm,  3, ADD_NORM,  SAME,          FLOAT,   ANY,     16, ADD_NORM) \
    X(ADD_LAYERNORM, add_layernorm, 4, ADD_NORM, SAME,         FLOAT,   ANY,     16, ADD_NORM) \
    X(QMATMUL_EPILOGUE, qmatmul_epilogue, 4, QMATMUL_EPILOGUE, FIRST, FLOAT, ANY,  16, MATMUL) \
    X(ACOS,         acos,         1, UNARY,     SAME,          CFLOAT,   UNIT,    16, MATH) \
    X(ASIN,         asin,         1, UNARY,     SAME,          CFLOAT,   UNIT,    16, MATH) \
    X(ATAN,         atan,         1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(ACOSH,        acosh,        1, UNARY,     SAME,          CFLOAT,   GE_ONE,  16, MATH) \
    X(ASINH,        asinh,        1, UNARY,     SAME,          CFLOAT,   ANY,     16, MATH) \
    X(ATANH,        atanh,        1, UNARY,     SAME,          CFLOAT,   UNIT,    16, MATH) \
    X(ATAN2,        atan2,        2, BROADCAST, PROMOTE_FLOAT, FLOAT,   SIGNS,   16, ARITH) \
    X(COPYSIGN,     copysign,     2, BROADCAST, PROMOTE_FLOAT, FLOAT,   SIGNS,   0, ARITH) \
    X(BITWISE_AND,  bitwise_and,  2, BROADCAST, PROMOTE,       INTEGER, WIDE,    0, ARITH) \
    X(BITWISE_OR,   bitwise_or,   2, BROADCAST, PROMOTE,       INTEGER, WIDE,    0, ARITH) \
    X(BITWISE_XOR,  bitwise_xor,  2, BROADCAST, PROMOTE,       INTEGER, WIDE,    0, ARITH) \
    X(LEFT_SHIFT,   left_shift,   2, BROADCAST, PROMOTE,       INTEGER, SHIFT,   0, ARITH) \
    X(RIGHT_SHIFT,  right_shift,  2, BROADCAST, PROMOTE,       INTEGER, SHIFT,   0, ARITH) \
    X(SORT,         sort,         1, SORT,      SAME,          ALL,     ORDER,   0, SORT) \
    X(ARGSORT,      argsort,      1, SORT,      INDEX,         ALL,     ORDER,   0, SORT) \
    X(SEARCHSORTED, searchsorted, 2, SEARCH,    INDEX,         ALL,     ORDER,   0, SORT) \
    X(CONJ,         conj,         1, UNARY,     SAME,          COMPLEX, ANY,     0, MATH) \
    X(REAL,         real,         1, UNARY,     REAL,          COMPLEX, ANY,     0, MATH) \
    X(IMAG,         imag,         1, UNARY,     REAL,          COMPLEX, ANY,     0, MATH) \
    X(CONV2D_GRAD_INPUT, conv2d_grad_input, 2, CONV_GRAD, SAME,   FLOAT,   ANY,     16, BACKWARD) \
    X(CONV2D_GRAD_WEIGHT, conv2d_grad_weight, 2, CONV_GRAD, SAME, FLOAT,   ANY,     16, BACKWARD) \
    X(MAXPOOL2D_GRAD, maxpool2d_grad, 2, POOL_GRAD, SAME,         FLOAT,   TIES,    1, BACKWARD) \
    X(GELU_GRAD,    gelu_grad,    2, BROADCAST, PROMOTE,       FLOAT,   ANY,     256, ARITH) \
    X(GELU_TANH_GRAD, gelu_tanh_grad, 2, BROADCAST, PROMOTE,   FLOAT,   ANY,     256, ARITH) \
    X(SILU_GRAD,    silu_grad,    2, BROADCAST, PROMOTE,       FLOAT,   ANY,     256, ARITH) \
    X(RELU_GRAD,    relu_grad,    2, BROADCAST, PROMOTE,       FLOAT,   ANY,     0, ARITH) \
    X(SDPA_GRAD_Q,  sdpa_grad_q,  4, ATTENTION_GRAD, SAME,     FLOAT,   ANY,     16, BACKWARD) \
    X(SDPA_GRAD_KV, sdpa_grad_kv, 4, ATTENTION_GRAD, SAME,     FLOAT,   ANY,     16, BACKWARD) \
    X(RMSNORM_GRAD, rmsnorm_grad, 3, NORM_GRAD, SAME,          FLOAT,   ANY,     16, BACKWARD)

typedef enum tf_op_kind {
#define TF__OP_ENUM(E, n, ar, sh, dt, acc, dom, k, kern) TF_OP_##E,
    TF_OP_LIST(TF__OP_ENUM)
#undef TF__OP_ENUM
    TF_OP_COUNT
} tf_op_kind;

typedef enum tf_op_kernel {
    TF_KERNEL_NONE, TF_KERNEL_ARITH, TF_KERNEL_MATH, TF_KERNEL_COMPARE, TF_KERNEL_PREDICATE, TF_KERNEL_SELECT,
    TF_KERNEL_MATMUL, TF_KERNEL_REDUCE, TF_KERNEL_SCAN, TF_KERNEL_PICK, TF_KERNEL_TRIANGLE, TF_KERNEL_COPY,
    TF_KERNEL_FILL, TF_KERNEL_ARANGE, TF_KERNEL_RANDOM, TF_KERNEL_ROW, TF_KERNEL_ROPE, TF_KERNEL_ATTENTION,
    TF_KERNEL_CONV, TF_KERNEL_POOL, TF_KERNEL_OPTIMIZER, TF_KERNEL_ADD_NORM, TF_KERNEL_SORT, TF_KERNEL_BACKWARD
} tf_op_kernel;

/* The kernel family of an op (header-only: plugins do not link the core). */
static inline tf_op_kernel tf_op_kernel_of(tf_op_kind op) {
    switch (op) {
#define TF__OP_KERNEL(E, n, ar, sh, dt, acc, dom, k, kern) case TF_OP_##E: return TF_KERNEL_##kern;
        TF_OP_LIST(TF__OP_KERNEL)
#undef TF__OP_KERNEL
    default: return TF_KERNEL_NONE;
    }
}

#endif /* TENSORFRAME_OPS_H */
