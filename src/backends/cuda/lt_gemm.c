/* GEMM with cuBLASLt's epilogues: a bias, an activation, a matrix added (see lt_gemm.h). */
#include "lt_gemm.h"

#include <string.h>

/* Descriptors of one call, destroyed together whatever happened. */
typedef struct lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
} lt_descs;

static void descs_destroy(const tf_cublas *lib, lt_descs *x) {
    if (x->pref) lib->cublasLtMatmulPreferenceDestroy(x->pref);
    if (x->d) lib->cublasLtMatrixLayoutDestroy(x->d);
    if (x->b) lib->cublasLtMatrixLayoutDestroy(x->b);
    if (x->a) lib->cublasLtMatrixLayoutDestroy(x->a);
    if (x->op) lib->cublasLtMatmulDescDestroy(x->op);
}

#define LT_TRY(call)                                  \
    do {                                              \
        cublasStatus_t e_ = (call);                   \
        if (e_ != CUBLAS_STATUS_SUCCESS) return e_;   \
    } while (0)

static cublasStatus_t layout(const tf_cublas *lib, cublasLtMatrixLayout_t *out, cudaDataType_t type, int64_t rows,
                             int64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    LT_TRY(lib->cublasLtMatrixLayoutCreate(out, type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch == 1) return CUBLAS_STATUS_SUCCESS;
    LT_TRY(lib->cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    return lib->cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                 sizeof stride);
}

static cublasStatus_t describe(const tf_cublas *lib, const tf_lt_gemm *g, size_t workspace_bytes, lt_descs *x) {
    cudaDataType_t scale = CUDA_R_32F;
    LT_TRY(lib->cublasLtMatmulDescCreate(&x->op, g->compute, scale));
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = g->epilogue;
    int64_t bias_stride = 0;                       /* one bias for every batch */
    LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias) {
        LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
        LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->type,
                                                   sizeof g->type));
        if (g->batch > 1)
            LT_TRY(lib->cublasLtMatmulDescSetAttribute(x->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                                       sizeof bias_stride));
    }
    LT_TRY(layout(lib, &x->a, g->type, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->batch,
                  g->stride_a));
    LT_TRY(layout(lib, &x->b, g->type, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->batch,
                  g->stride_b));
    LT_TRY(layout(lib, &x->d, g->type, g->m, g->n, g->ldd, g->batch, g->stride_d));
    LT_TRY(lib->cublasLtMatmulPreferenceCreate(&x->pref));
    uint64_t ws = workspace_bytes;
    return lib->cublasLtMatmulPreferenceSetAttribute(x->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
}

/* The largest power of two (up to 256) that divides p: the heuristic's
 * choice depends on it, so the cache key keeps it instead of the pointer. */
static const void *alignment_of(const void *p) {
    uintptr_t v = (uintptr_t)p;
    uintptr_t a = 256;
    while (a > 1 && v % a) a /= 2;
    return (const void *)a;
}

static tf_lt_gemm key_of(const tf_lt_gemm *g) {
    tf_lt_gemm k;
    memset(&k, 0, sizeof k);                       /* padding too: keys compare with memcmp */
    k.type = g->type;
    k.compute = g->compute;
    k.trans_a = g->trans_a;
    k.trans_b = g->trans_b;
    k.m = g->m, k.n = g->n, k.k = g->k;
    k.lda = g->lda, k.ldb = g->ldb, k.ldd = g->ldd;
    k.stride_a = g->stride_a, k.stride_b = g->stride_b, k.stride_d = g->stride_d;
    k.batch = g->batch;
    k.a = alignment_of(g->a), k.b = alignment_of(g->b), k.d = (void *)alignment_of(g->d);
    k.bias = g->bias ? alignment_of(g->bias) : NULL;
    k.c = g->c ? alignment_of(g->c) : NULL;
    k.epilogue = g->epilogue;
    return k;
}

static cublasStatus_t choose(const tf_cublas *lib, cublasLtHandle_t h, tf_lt_cache *cache, const tf_lt_gemm *g,
                             const lt_descs *x, cublasLtMatmulAlgo_t *algo) {
    tf_lt_gemm key = key_of(g);
    for (int i = 0; i < TF_LT_CACHE; i++)
        if (cache->entries[i].used && !memcmp(&cache->entries[i].key, &key, sizeof key)) {
            *algo = cache->entries[i].algo;
            return CUBLAS_STATUS_SUCCESS;
        }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    memset(&result, 0, sizeof result);
    LT_TRY(lib->cublasLtMatmulAlgoGetHeuristic(h, x->op, x->a, x->b, x->d, x->d, x->pref, 1, &result, &found));
    if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_NOT_SUPPORTED;
    tf_lt_cache_entry *e = &cache->entries[cache->next];
    cache->next = (cache->next + 1) % TF_LT_CACHE;
    e->key = key;
    e->algo = result.algo;
    e->used = true;
    *algo = result.algo;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t tf_lt_gemm_run(const tf_cublas *lib, cublasLtHandle_t h, tf_lt_cache *cache, const tf_lt_gemm *g,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    lt_descs x;
    memset(&x, 0, sizeof x);
    cublasLtMatmulAlgo_t algo;
    float beta = g->c ? 1.0f : 0.0f;               /* C laid out as D */
    const void *c = g->c ? g->c : g->d;
    cublasStatus_t e = describe(lib, g, workspace_bytes, &x);
    if (e == CUBLAS_STATUS_SUCCESS) e = choose(lib, h, cache, g, &x, &algo);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = lib->cublasLtMatmul(h, x.op, &g->alpha, g->a, x.a, g->b, x.b, &beta, c, x.d, g->d, x.d, &algo,
                                workspace, workspace_bytes, stream);
    descs_destroy(lib, &x);
    return e;
}
