/* The op table's values are ABI: plugins receive them in tf_op.kind and
 * kernels switch on them. This test pins every released value by hand, so
 * a row inserted, removed or moved fails here. A new op goes at the end of
 * TF_OP_LIST, where it moves nothing; its line here is added when a release
 * makes its value ABI. */
#include <stdio.h>
#include <string.h>

#include <tensorframe/tensorframe.h>

static const struct {
    tf_op_kind kind;
    int value;
    const char *name;
} pinned[] = {
    {TF_OP_ADD, 0, "add"},
    {TF_OP_SUB, 1, "sub"},
    {TF_OP_MUL, 2, "mul"},
    {TF_OP_DIV, 3, "div"},
    {TF_OP_MAXIMUM, 4, "maximum"},
    {TF_OP_MINIMUM, 5, "minimum"},
    {TF_OP_POW, 6, "pow"},
    {TF_OP_MATMUL, 7, "matmul"},
    {TF_OP_SUM, 8, "sum"},
    {TF_OP_MEAN, 9, "mean"},
    {TF_OP_COPY, 10, "copy"},
    {TF_OP_FILL, 11, "fill"},
    {TF_OP_ARANGE, 12, "arange"},
    {TF_OP_RAND_UNIFORM, 13, "rand_uniform"},
    {TF_OP_RAND_NORMAL, 14, "rand_normal"},
    {TF_OP_NEG, 15, "neg"},
    {TF_OP_ABS, 16, "abs"},
    {TF_OP_SIGN, 17, "sign"},
    {TF_OP_EXP, 18, "exp"},
    {TF_OP_LOG, 19, "log"},
    {TF_OP_LOG1P, 20, "log1p"},
    {TF_OP_EXPM1, 21, "expm1"},
    {TF_OP_SQRT, 22, "sqrt"},
    {TF_OP_RSQRT, 23, "rsqrt"},
    {TF_OP_SIN, 24, "sin"},
    {TF_OP_COS, 25, "cos"},
    {TF_OP_TANH, 26, "tanh"},
    {TF_OP_SIGMOID, 27, "sigmoid"},
    {TF_OP_RELU, 28, "relu"},
    {TF_OP_LEAKY_RELU, 29, "leaky_relu"},
    {TF_OP_GELU, 30, "gelu"},
    {TF_OP_GELU_TANH, 31, "gelu_tanh"},
    {TF_OP_SILU, 32, "silu"},
    {TF_OP_SOFTPLUS, 33, "softplus"},
    {TF_OP_FLOOR, 34, "floor"},
    {TF_OP_CEIL, 35, "ceil"},
    {TF_OP_ROUND, 36, "round"},
    {TF_OP_CLAMP, 37, "clamp"},
    {TF_OP_EQ, 38, "eq"},
    {TF_OP_NE, 39, "ne"},
    {TF_OP_LT, 40, "lt"},
    {TF_OP_LE, 41, "le"},
    {TF_OP_GT, 42, "gt"},
    {TF_OP_GE, 43, "ge"},
    {TF_OP_LOGICAL_AND, 44, "logical_and"},
    {TF_OP_LOGICAL_OR, 45, "logical_or"},
    {TF_OP_LOGICAL_NOT, 46, "logical_not"},
    {TF_OP_ISNAN, 47, "isnan"},
    {TF_OP_ISINF, 48, "isinf"},
    {TF_OP_WHERE, 49, "where"},
    {TF_OP_MAX, 50, "max"},
    {TF_OP_MIN, 51, "min"},
    {TF_OP_ARGMAX, 52, "argmax"},
    {TF_OP_ARGMIN, 53, "argmin"},
    {TF_OP_PROD, 54, "prod"},
    {TF_OP_VAR, 55, "var"},
    {TF_OP_STD, 56, "std"},
    {TF_OP_LOGSUMEXP, 57, "logsumexp"},
    {TF_OP_CUMSUM, 58, "cumsum"},
    {TF_OP_INDEX_SELECT, 59, "index_select"},
    {TF_OP_GATHER, 60, "gather"},
    {TF_OP_TRIL, 61, "tril"},
    {TF_OP_TRIU, 62, "triu"},
    {TF_OP_CONCAT, 63, "concat"},
    {TF_OP_STACK, 64, "stack"},
    {TF_OP_SPLIT, 65, "split"},
    {TF_OP_PAD, 66, "pad"},
    {TF_OP_TILE, 67, "tile"},
    {TF_OP_FLIP, 68, "flip"},
    {TF_OP_GEMM, 69, "gemm"},
    {TF_OP_GEMV, 70, "gemv"},
    {TF_OP_OUTER, 71, "outer"},
    {TF_OP_SOFTMAX, 72, "softmax"},
    {TF_OP_LOG_SOFTMAX, 73, "log_softmax"},
    {TF_OP_RMSNORM, 74, "rmsnorm"},
    {TF_OP_LAYERNORM, 75, "layernorm"},
    {TF_OP_ROPE, 76, "rope"},
    {TF_OP_SDPA, 77, "sdpa"},
    {TF_OP_ATTENTION_SCORES, 78, "attention_scores"},
    {TF_OP_WEIGHTED_SUM_ROWS, 79, "weighted_sum_rows"},
    {TF_OP_CONV2D, 80, "conv2d"},
    {TF_OP_MAXPOOL2D, 81, "maxpool2d"},
    {TF_OP_AVGPOOL2D, 82, "avgpool2d"},
    {TF_OP_BATCH_NORM, 83, "batch_norm"},
    {TF_OP_CROSS_ENTROPY, 84, "cross_entropy"},
    {TF_OP_ADAM, 85, "adam"},
    {TF_OP_SWIGLU, 86, "swiglu"},
    {TF_OP_QMATMUL, 87, "qmatmul"},
    {TF_OP_GEMM_EPILOGUE, 88, "gemm_epilogue"},
    {TF_OP_ADD_RMSNORM, 89, "add_rmsnorm"},
    {TF_OP_ADD_LAYERNORM, 90, "add_layernorm"},
    {TF_OP_QMATMUL_EPILOGUE, 91, "qmatmul_epilogue"},
    {TF_OP_ACOS, 92, "acos"},
    {TF_OP_ASIN, 93, "asin"},
    {TF_OP_ATAN, 94, "atan"},
    {TF_OP_ACOSH, 95, "acosh"},
    {TF_OP_ASINH, 96, "asinh"},
    {TF_OP_ATANH, 97, "atanh"},
    {TF_OP_ATAN2, 98, "atan2"},
    {TF_OP_COPYSIGN, 99, "copysign"},
    {TF_OP_BITWISE_AND, 100, "bitwise_and"},
    {TF_OP_BITWISE_OR, 101, "bitwise_or"},
    {TF_OP_BITWISE_XOR, 102, "bitwise_xor"},
    {TF_OP_LEFT_SHIFT, 103, "left_shift"},
    {TF_OP_RIGHT_SHIFT, 104, "right_shift"},
    {TF_OP_SORT, 105, "sort"},
    {TF_OP_ARGSORT, 106, "argsort"},
    {TF_OP_SEARCHSORTED, 107, "searchsorted"},
};

int main(void) {
    int n = (int)(sizeof pinned / sizeof *pinned), bad = 0;
    for (int i = 0; i < n; i++) {
        if ((int)pinned[i].kind != pinned[i].value || strcmp(tf_op_name((tf_op_kind)pinned[i].value), pinned[i].name)) {
            printf("op %s: value %d in the op table, pinned at %d (name there: %s)\n", pinned[i].name,
                   (int)pinned[i].kind, pinned[i].value, tf_op_name((tf_op_kind)pinned[i].value));
            bad++;
        }
    }
    /* Ops appended after the pinned ones take new values and move none of
     * these: they need no pin to be added. Fewer ops than pins means one
     * was removed. */
    if (TF_OP_COUNT < n) {
        printf("the op table has %d ops, %d are pinned: an op was removed (rows are append-only)\n", (int)TF_OP_COUNT, n);
        bad++;
    }
    printf("%d passed, %d failed\n", n - bad, bad);
    return bad ? 1 : 0;
}
