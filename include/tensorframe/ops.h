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
 *   accepts dtype set accepted: ALL, NUMERIC (all but bool), FLOAT
 *   domain  inputs the conformance suite draws: ANY, NONZERO (|b| >= 0.5),
 *           POW (positive base, small exponent), WIDE (past 8-bit ranges),
 *           POSITIVE (0.05 to 4), TIES (few distinct values, so equality
 *           happens), SPECIAL (NaN and infinities mixed in), NEAR_ONE
 *           (0.9 to 1.1 and small integers, for long products)
 *   nmse_k  conformance threshold: NMSE <= nmse_k * eps(out dtype)^2, where
 *           eps is the dtype's machine epsilon, times the reduction length
 *           for ops that accumulate (REDUCE: elements per output; MATMUL, GEMM: K;
 *           SCAN: the axis length; ROW and ATTENTION: the line length; CONV and
 *           POOL: the window size), since
 *           rounding error grows with it. 0 means bit-exact. Integer outputs
 *           are always compared exactly. gelu's bound allows for its formula
 *           cancelling (1 + erf -> 0) at negative inputs, as PyTorch's does.
 */
#ifndef TENSORFRAME_OPS_H
#define TENSORFRAME_OPS_H

/* X(ENUM, name, arity, shape, dtype, accepts, domain, nmse_k) */
#define TF_OP_LIST(X)                                                            \
    X(ADD,          add,          2, BROADCAST, PROMOTE,       NUMERIC, ANY,     1) \
    X(SUB,          sub,          2, BROADCAST, PROMOTE,       NUMERIC, ANY,     1) \
    X(MUL,          mul,          2, BROADCAST, PROMOTE,       NUMERIC, ANY,     1) \
    X(DIV,          div,          2, BROADCAST, PROMOTE_FLOAT, NUMERIC, NONZERO, 1) \
    X(MAXIMUM,      maximum,      2, BROADCAST, PROMOTE,       NUMERIC, ANY,     0) \
    X(MINIMUM,      minimum,      2, BROADCAST, PROMOTE,       NUMERIC, ANY,     0) \
    X(POW,          pow,          2, BROADCAST, PROMOTE,       NUMERIC, POW,     4) \
    X(MATMUL,       matmul,       2, MATMUL,    PROMOTE,       NUMERIC, ANY,     4) \
    X(SUM,          sum,          1, REDUCE,    SUM,           ALL,     ANY,     4) \
    X(MEAN,         mean,         1, REDUCE,    SAME,          FLOAT,   ANY,     4) \
    X(COPY,         copy,         1, SAME,      CAST,          ALL,     WIDE,    1) \
    X(FILL,         fill,         0, CREATE,    CAST,          ALL,     ANY,     0) \
    X(ARANGE,       arange,       0, CREATE,    CAST,          NUMERIC, ANY,     1) \
    X(RAND_UNIFORM, rand_uniform, 0, CREATE,    CAST,          FLOAT,   ANY,     1) \
    X(RAND_NORMAL,  rand_normal,  0, CREATE,    CAST,          FLOAT,   ANY,     4) \
    X(NEG,          neg,          1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(ABS,          abs,          1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(SIGN,         sign,         1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(EXP,          exp,          1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(LOG,          log,          1, UNARY,     SAME,          FLOAT,   POSITIVE, 16) \
    X(LOG1P,        log1p,        1, UNARY,     SAME,          FLOAT,   POSITIVE, 16) \
    X(EXPM1,        expm1,        1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(SQRT,         sqrt,         1, UNARY,     SAME,          FLOAT,   POSITIVE, 4) \
    X(RSQRT,        rsqrt,        1, UNARY,     SAME,          FLOAT,   POSITIVE, 16) \
    X(SIN,          sin,          1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(COS,          cos,          1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(TANH,         tanh,         1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(SIGMOID,      sigmoid,      1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(RELU,         relu,         1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(LEAKY_RELU,   leaky_relu,   1, UNARY,     SAME,          FLOAT,   ANY,     1) \
    X(GELU,         gelu,         1, UNARY,     SAME,          FLOAT,   ANY,     1024) \
    X(GELU_TANH,    gelu_tanh,    1, UNARY,     SAME,          FLOAT,   ANY,     1024) \
    X(SILU,         silu,         1, UNARY,     SAME,          FLOAT,   ANY,     16) \
    X(SOFTPLUS,     softplus,     1, UNARY,     SAME,          FLOAT,   WIDE,    16) \
    X(FLOOR,        floor,        1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(CEIL,         ceil,         1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(ROUND,        round,        1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(CLAMP,        clamp,        1, UNARY,     SAME,          FLOAT,   ANY,     0) \
    X(EQ,           eq,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(NE,           ne,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(LT,           lt,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(LE,           le,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(GT,           gt,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(GE,           ge,           2, BROADCAST, COMPARE,       ALL,     TIES,    0) \
    X(LOGICAL_AND,  logical_and,  2, BROADCAST, LOGICAL,       ALL,     TIES,    0) \
    X(LOGICAL_OR,   logical_or,   2, BROADCAST, LOGICAL,       ALL,     TIES,    0) \
    X(LOGICAL_NOT,  logical_not,  1, UNARY,     LOGICAL,       ALL,     TIES,    0) \
    X(ISNAN,        isnan,        1, UNARY,     BOOL,          ALL,     SPECIAL, 0) \
    X(ISINF,        isinf,        1, UNARY,     BOOL,          ALL,     SPECIAL, 0) \
    X(WHERE,        where,        3, WHERE,     PROMOTE,       ALL,     ANY,     0) \
    X(MAX,          max,          1, REDUCE,    SAME,          ALL,     ANY,     0) \
    X(MIN,          min,          1, REDUCE,    SAME,          ALL,     ANY,     0) \
    X(ARGMAX,       argmax,       1, REDUCE,    INDEX,         ALL,     TIES,    0) \
    X(ARGMIN,       argmin,       1, REDUCE,    INDEX,         ALL,     TIES,    0) \
    X(PROD,         prod,         1, REDUCE,    SUM,           ALL,     NEAR_ONE, 4) \
    X(VAR,          var,          1, REDUCE,    SAME,          FLOAT,   ANY,     16) \
    X(STD,          std,          1, REDUCE,    SAME,          FLOAT,   ANY,     16) \
    X(LOGSUMEXP,    logsumexp,    1, REDUCE,    SAME,          FLOAT,   ANY,     16) \
    X(CUMSUM,       cumsum,       1, SCAN,      SUM,           ALL,     ANY,     4) \
    X(INDEX_SELECT, index_select, 2, INDEXED,   FIRST,         ALL,     ANY,     0) \
    X(GATHER,       gather,       2, INDEXED,   FIRST,         ALL,     ANY,     0) \
    X(TRIL,         tril,         1, TRIANGLE,  SAME,          ALL,     ANY,     0) \
    X(TRIU,         triu,         1, TRIANGLE,  SAME,          ALL,     ANY,     0) \
    X(CONCAT,       concat,       2, COMPOSITE, PROMOTE,       ALL,     ANY,     0) \
    X(STACK,        stack,        2, COMPOSITE, PROMOTE,       ALL,     ANY,     0) \
    X(SPLIT,        split,        1, COMPOSITE, SAME,          ALL,     ANY,     0) \
    X(PAD,          pad,          1, COMPOSITE, SAME,          ALL,     ANY,     0) \
    X(TILE,         tile,         1, COMPOSITE, SAME,          ALL,     ANY,     0) \
    X(FLIP,         flip,         1, COMPOSITE, SAME,          ALL,     ANY,     0) \
    X(GEMM,         gemm,         3, GEMM,      PROMOTE,       FLOAT,   ANY,     4) \
    X(GEMV,         gemv,         2, COMPOSITE, PROMOTE,       NUMERIC, ANY,     4) \
    X(OUTER,        outer,        2, COMPOSITE, PROMOTE,       NUMERIC, ANY,     1) \
    X(SOFTMAX,      softmax,      1, ROW,       SAME,          FLOAT,   WIDE,    16) \
    X(LOG_SOFTMAX,  log_softmax,  1, ROW,       SAME,          FLOAT,   WIDE,    16) \
    X(RMSNORM,      rmsnorm,      2, ROW,       SAME,          FLOAT,   ANY,     16) \
    X(LAYERNORM,    layernorm,    3, ROW,       SAME,          FLOAT,   ANY,     16) \
    X(ROPE,         rope,         2, ROPE,      SAME,          FLOAT,   ANY,     64) \
    X(SDPA,         sdpa,         4, ATTENTION, SAME,          FLOAT,   ANY,     16) \
    X(ATTENTION_SCORES, attention_scores, 2, COMPOSITE, PROMOTE, FLOAT, ANY,     4) \
    X(WEIGHTED_SUM_ROWS, weighted_sum_rows, 2, COMPOSITE, PROMOTE, FLOAT, ANY,   4) \
    X(CONV2D,       conv2d,       3, CONV,      SAME,          FLOAT,   ANY,     16) \
    X(MAXPOOL2D,    maxpool2d,    1, POOL,      SAME,          FLOAT,   ANY,     0) \
    X(AVGPOOL2D,    avgpool2d,    1, POOL,      SAME,          FLOAT,   ANY,     16) \
    X(BATCH_NORM,   batch_norm,   5, COMPOSITE, SAME,          FLOAT,   ANY,     64) \
    X(CROSS_ENTROPY, cross_entropy, 2, COMPOSITE, SAME,        FLOAT,   ANY,     64) \
    X(ADAM,         adam,         4, OPTIMIZER, SAME,          FLOAT,   ANY,     16) \
    X(SWIGLU,       swiglu,       2, BROADCAST, PROMOTE,       FLOAT,   ANY,     16)

typedef enum tf_op_kind {
#define TF__OP_ENUM(E, n, ar, sh, dt, acc, dom, k) TF_OP_##E,
    TF_OP_LIST(TF__OP_ENUM)
#undef TF__OP_ENUM
    TF_OP_COUNT
} tf_op_kind;

#endif /* TENSORFRAME_OPS_H */
