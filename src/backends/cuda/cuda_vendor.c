/* What the CUDA plugin does its own way (native_dev.h): cuBLAS and cuBLASLt
 * for GEMM, the plugin's own kernels (fast_kernels.cu), the portable kernels
 * through the host stubs nvcc made (kernels_<dtype>.cu), NVIDIA's sticky
 * errors, the device's description and the TF32 extra. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_plan.h"
#include "native_dev.h"
#include "fast_plan.h"


/* The portable kernels, one table per dtype program (kernels_<dtype>.cu). */
#define TF__TABLE(E, n, sz, fl, in) extern const void *const tf_cuda_kernels_##n[TF_PK_KERNEL_COUNT];
TF_DTYPE_LIST(TF__TABLE)
#undef TF__TABLE
static const void *const *const kernel_tables[TF_DTYPE_COUNT] = {
#define TF__ROW(E, n, sz, fl, in) [TF_##E] = tf_cuda_kernels_##n,
    TF_DTYPE_LIST(TF__ROW)
#undef TF__ROW
};

static bool use_tf32;
static tf_cublas blas_lib;               /* resolved once a GPU is found; GEMM falls back without it */

bool tf_vendor_init(char *why, size_t n) {
    (void)why;
    (void)n;
    use_tf32 = tf_gpu_env_flag("TF_CUDA_TF32", false);
    memset(&blas_lib, 0, sizeof blas_lib);
    if (tf_gpu_env_string("TF_CUBLAS_LIB"))           /* a cuBLAS named by the user is checked up front */
        tf_cublas_load(&blas_lib, TF_CUBLAS_SONAME, TF_CUBLAS_TOOLKIT_PATH);
    return true;                                     /* the runtime is linked in: cudaGetDeviceCount says the rest */
}

bool tf_vendor_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchTimeout: case cudaErrorAssert: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorLaunchFailure: case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable: case cudaErrorContained:
        return true;
    default:
        return false;
    }
}

static tf_status blas_fail(cuda_dev *d, cublasStatus_t e, const char *what) {
    tf_status s = e == CUBLAS_STATUS_ALLOC_FAILED ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    if (e == CUBLAS_STATUS_EXECUTION_FAILED) {   /* usually a sticky error underneath */
        cudaError_t ce = cudaGetLastError();
        if (tf_vendor_sticky(ce)) return tf_cu_fail(d, ce, what);
    }
    return tf_cu_host->set_error(s, "%s: %s failed: %s", d->gd.name, what, blas_lib.cublasGetStatusName(e));
}

bool tf_vendor_open_device(cuda_dev *d, const tf_gpu_props *p) {
    d->matrix_units = p->major >= 7;
    d->stats.compute_capability = p->major * 10 + p->minor;
    return true;
}

void tf_vendor_close_device(cuda_dev *d) {
    if (d->vendor.blas) blas_lib.cublasDestroy_v2(d->vendor.blas);
    if (d->vendor.lt) blas_lib.cublasLtDestroy(d->vendor.lt);
}

void tf_vendor_read_limits(cuda_dev *d, const tf_gpu_props *p) {
    tf_device_limits *l = &d->limits;
    l->max_buffer_bytes = l->max_binding_bytes = p->totalGlobalMem;
    l->compute_units = (uint32_t)p->multiProcessorCount;
    l->max_work_group_size = (uint32_t)p->maxThreadsPerBlock;
    for (int i = 0; i < 3; i++) l->max_work_group_dims[i] = (uint32_t)p->maxThreadsDim[i];
    l->subgroup_size = (uint32_t)p->warpSize;
    l->shared_memory_bytes = p->sharedMemPerBlockOptin ? p->sharedMemPerBlockOptin : p->sharedMemPerBlock;
    l->cache_bytes[1] = (uint64_t)p->l2CacheSize;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d->index) == cudaSuccess) l->clock_mhz = (uint32_t)(khz / 1000);
}


void tf_vendor_describe(cuda_dev *d, char *out, size_t n) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    snprintf(out, n, "%.120s (compute %d.%d, %d SMs; driver %d.%d, runtime %d.%d)%s", d->name, d->cc_major, d->cc_minor,
             d->sm_count, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
             d->gd.lost ? " LOST" : "");
}

tf_status tf_vendor_launch(cuda_dev *d, tf_dtype program, tf_pk_kernel kernel, void **argv, const unsigned grid[3],
                           const unsigned block[3]) {
    const void *fn = kernel_tables[program] ? kernel_tables[program][kernel] : NULL;
    if (!fn)
        return tf_cu_host->set_error(TF_ERR_BACKEND, "%s: kernel '%s' is not built for %d", d->gd.name,
                               tf_pk_kernel_names[kernel], (int)program);
    dim3 g = {grid[0], grid[1], grid[2]}, b = {block[0], block[1], block[2]};
    cudaError_t e = cudaLaunchKernel(fn, g, b, argv, 0, d->current);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(d, e, tf_pk_kernel_names[kernel]);
}

/* ---- GEMM through cuBLAS ---- */

static tf_status ensure_blas(cuda_dev *d) {
    if (d->vendor.blas) return TF_OK;
    cublasStatus_t e = blas_lib.cublasCreate_v2(&d->vendor.blas);
    if (e != CUBLAS_STATUS_SUCCESS) return blas_fail(d, e, "cublasCreate");
    return TF_OK;
}

/* TF_CUDA_LT=0 keeps bias GEMMs on the copy-then-GEMM path (to compare). */
static bool lt_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = tf_gpu_env_flag("TF_CUDA_LT", true);
    return enabled;
}

/* g through cuBLASLt with its epilogue: true if it ran (*s holds the
 * result), false to take another path instead (no cuBLASLt, no algorithm
 * for g, or no room for the workspace; nothing was written). */
static bool try_lt(cuda_dev *d, const tf_lt_gemm *g, tf_status *s) {
    if (!blas_lib.lt_loaded || !lt_enabled()) return false;
    if (!d->vendor.lt && blas_lib.cublasLtCreate(&d->vendor.lt) != CUBLAS_STATUS_SUCCESS) {
        d->vendor.lt = NULL;
        return false;
    }
    cuda_buf *ws = NULL;
    if (tf_gpu_alloc(&d->gd, TF_LT_WORKSPACE, &ws) != TF_OK) return false;
    d->shared_scratch = true;
    cublasStatus_t e = tf_lt_gemm_run(&blas_lib, d->vendor.lt, &d->vendor.lt_cache, g, ws->handle, TF_LT_WORKSPACE, d->current);
    tf_cu_release_block(d, ws);
    if (e == CUBLAS_STATUS_NOT_SUPPORTED) return false;
    *s = e == CUBLAS_STATUS_SUCCESS ? TF_OK : blas_fail(d, e, "cublasLtMatmul(epilogue)");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* out = alpha * a @ b (+ beta * c): true if cuBLAS took it (*s holds the
 * result), false to leave it to the portable matmul kernel. Row-major
 * C = A B is column-major C^T = B^T A^T: cuBLAS gets b first. */
bool tf_vendor_gemm(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, tf_status *s) {
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    tf_dtype dt = o->dtype;
    cudaDataType_t type;
    switch (dt) {
    case TF_F32: type = CUDA_R_32F; break;
    case TF_F64: type = CUDA_R_64F; break;
    case TF_F16: type = CUDA_R_16F; break;
    case TF_BF16: type = CUDA_R_16BF; break;
    default: return false;
    }
    tf_blas_plan p;
    if (!blas_lib.loaded || !tf_blas_plan_of(op, &p)) return false;   /* the portable matmul kernel instead */
    int64_t M = p.M, N = p.N, K = p.K;
    cublasComputeType_t compute = dt == TF_F64 ? CUBLAS_COMPUTE_64F
                                  : dt == TF_F32 && use_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (p.with_c && tf_cuda_plan_gemm_bias(op)) {
        tf_lt_gemm g = {type, compute, p.b.trans, p.a.trans, N, M, K, p.b.ld, p.a.ld, N, p.b.batch_stride,
                        p.a.batch_stride, M * N, (int32_t)p.batch, (float)p.alpha, tf_cu_first(b), tf_cu_first(a),
                        tf_cu_first(&op->inputs[2]), tf_cu_first(o), CUBLASLT_EPILOGUE_BIAS, NULL};
        if (try_lt(d, &g, s)) return true;
    }
    if ((*s = ensure_blas(d)) != TF_OK) return true;
    if (p.with_c && (*s = tf_pk_copy_c_into_out(tg, op)) != TF_OK) return true;   /* then beta * out + alpha * a@b */
    tf_blas_scalars sc;
    tf_blas_scalars_of(&p, dt == TF_F64, &sc);
    d->shared_scratch = true;                    /* the handle's workspace serves every stream */
    cublasStatus_t e = blas_lib.cublasSetStream_v2(d->vendor.blas, d->current);
    if (e != CUBLAS_STATUS_SUCCESS) {
        *s = blas_fail(d, e, "cublasSetStream");
        return true;
    }
    e = blas_lib.cublasGemmStridedBatchedEx(
        d->vendor.blas, p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
        (int)K, sc.alpha, tf_cu_first(b), type, (int)p.b.ld, (long long)p.b.batch_stride, tf_cu_first(a), type,
        (int)p.a.ld, (long long)p.a.batch_stride, sc.beta, tf_cu_first(o), type, (int)N, (long long)(M * N),
        (int)p.batch, compute, CUBLAS_GEMM_DEFAULT);
    *s = e == CUBLAS_STATUS_SUCCESS ? TF_OK : blas_fail(d, e, "cublasGemmStridedBatchedEx");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* ---- GEMM_EPILOGUE through cuBLASLt's epilogues ----
 * A fused linear layer in one cuBLASLt call where its epilogues express
 * it: the bias (BIAS), ReLU and the tanh form of GELU (RELU, GELU and their
 * _BIAS forms: cuBLASLt's GELU is the tanh approximation, as PyTorch's
 * addmm_activation uses it; the erf GELU has no epilogue), and a residual
 * without an activation as C with beta 1 (cuBLASLt adds C before its
 * activation, tensorframe's residual comes after it). Anything else is
 * left to the core, which runs the op as its parts. */

/* The op as one cuBLASLt call: its GEMM (the op less the residual), the
 * plan of that GEMM, the epilogue, and the residual (NULL: none). */
typedef struct lt_fused {
    tf_op gemm;
    tf_blas_plan p;
    cublasLtEpilogue_t epilogue;
    bool bias;
    const tf_tensor_desc *residual;
} lt_fused;

static bool lt_epilogue_of(int32_t activation, bool bias, cublasLtEpilogue_t *out) {
    if (activation == (int32_t)TF_NO_ACTIVATION) *out = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    else if (activation == (int32_t)TF_OP_RELU) *out = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (activation == (int32_t)TF_OP_GELU_TANH) *out = bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else return false;
    return true;
}

/* A residual cuBLASLt can read as C: the output's dtype and shape, dense,
 * and either the output's own bytes or none of them. */
static bool residual_as_c(const tf_tensor_desc *r, const tf_tensor_desc *o) {
    if (r->dtype != o->dtype || r->ndim != o->ndim || !tf_desc_is_contiguous(r)) return false;
    for (int i = 0; i < o->ndim; i++)
        if (r->shape[i] != o->shape[i]) return false;
    if (r->buffer != o->buffer) return true;
    uint64_t bytes = (uint64_t)tf_desc_numel(o) * tf_dtype_size(o->dtype);
    uint64_t ro = r->offset, oo = o->offset;
    return ro == oo || ro + bytes <= oo || oo + bytes <= ro;
}

static bool plan_lt_fused(const tf_op *op, lt_fused *f) {
    if (op->kind != TF_OP_GEMM_EPILOGUE || op->output.dtype == TF_F64) return false;
    bool residual = (op->params.flags & TF_GEMM_RESIDUAL) != 0;
    f->gemm = *op;
    f->gemm.kind = TF_OP_GEMM;
    f->gemm.n_inputs = op->n_inputs - residual;
    f->gemm.params.flags = 0;
    f->gemm.params.activation = 0;
    if (!tf_blas_plan_of(&f->gemm, &f->p)) return false;
    f->bias = f->p.with_c;
    if (f->bias && !tf_cuda_plan_gemm_bias(&f->gemm)) return false;       /* a c that is not a bias row */
    if (!lt_epilogue_of(op->params.activation, f->bias, &f->epilogue)) return false;
    f->residual = residual ? &op->inputs[op->n_inputs - 1] : NULL;
    if (residual && (op->params.activation != (int32_t)TF_NO_ACTIVATION || !residual_as_c(f->residual, &op->output)))
        return false;
    return true;
}

bool tf_vendor_epilogue_supported(const tf_op *op) {
    lt_fused f;
    return op->kind == TF_OP_GEMM_EPILOGUE && blas_lib.loaded && blas_lib.lt_loaded && lt_enabled() &&
           plan_lt_fused(op, &f);
}

/* The op's parts on the device, when cuBLASLt finds no algorithm for it
 * after supports() said yes: the GEMM, then the activation and the
 * residual in place in the output. */
static tf_status lt_fused_parts(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, const lt_fused *f) {
    tf_status s;
    if (!tf_vendor_gemm(d, tg, &f->gemm, &s)) s = tf_pk_run(tg, &f->gemm);
    tf_op part = *op;
    part.params.flags = 0;
    part.params.activation = 0;
    if (s == TF_OK && op->params.activation != (int32_t)TF_NO_ACTIVATION) {
        part.kind = (tf_op_kind)op->params.activation;
        part.n_inputs = 1;
        part.inputs[0] = op->output;
        s = tf_pk_run(tg, &part);
    }
    if (s == TF_OK && f->residual) {
        part.kind = TF_OP_ADD;
        part.n_inputs = 2;
        part.inputs[0] = op->output;
        part.inputs[1] = *f->residual;
        s = tf_pk_run(tg, &part);
    }
    return s;
}

tf_status tf_vendor_gemm_epilogue(cuda_dev *d, const tf_pk_target *tg, const tf_op *op) {
    lt_fused f;
    if (!plan_lt_fused(op, &f)) return tf_cu_host->set_error(TF_ERR_UNSUPPORTED, "%s: gemm_epilogue: no cuBLASLt form", d->gd.name);
    const tf_blas_plan *p = &f.p;
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    cudaDataType_t type = o->dtype == TF_F16 ? CUDA_R_16F : o->dtype == TF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t compute = o->dtype == TF_F32 && use_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    tf_lt_gemm g = {type, compute, p->b.trans, p->a.trans, p->N, p->M, p->K, p->b.ld, p->a.ld, p->N,
                    p->b.batch_stride, p->a.batch_stride, p->M * p->N, (int32_t)p->batch, (float)p->alpha,
                    tf_cu_first(b), tf_cu_first(a), f.bias ? tf_cu_first(&op->inputs[2]) : NULL, tf_cu_first(o),
                    f.epilogue, f.residual ? tf_cu_first(f.residual) : NULL};
    tf_status s;
    if (!try_lt(d, &g, &s)) s = lt_fused_parts(d, tg, op, &f);
    return s;
}

/* ---- the plugin's own kernels (fast_kernels.cu; fast_plan.c says which ops) ---- */

static uintptr_t addr_of(const tf_tensor_desc *t) { return (uintptr_t)tf_cu_first(t); }

/* TF_CUDA_PORTABLE_ONLY=1 keeps every op on the portable kernels (to compare). */
static bool fast_kernels_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) enabled = !tf_gpu_env_flag("TF_CUDA_PORTABLE_ONLY", false);
    return enabled;
}

/* A fast kernel that may need device scratch: nbytes of it (0: none) go in
 * *slot for the launch, and back to the allocator right after it, which is
 * safe because the block's next user is later on the same stream. */
static tf_status launch_with_scratch(cuda_dev *d, size_t nbytes, void **slot, int (*launch)(const void *, void *),
                                     const void *args, const char *what) {
    cuda_buf *scratch = NULL;
    if (nbytes) {
        d->shared_scratch = true;
        tf_status s = tf_gpu_alloc(&d->gd, nbytes, &scratch);
        if (s != TF_OK) return s;
        *slot = scratch->handle;
    }
    int e = launch(args, d->current);
    if (scratch) tf_cu_release_block(d, scratch);
    return e == cudaSuccess ? TF_OK : tf_cu_fail(d, (cudaError_t)e, what);
}

static int launch_row(const void *a, void *stream) { return tf_cuda_row_launch(a, stream); }
static int launch_reduce(const void *a, void *stream) { return tf_cuda_reduce_launch(a, stream); }
static int launch_attention(const void *a, void *stream) { return tf_cuda_attn_launch(a, stream); }

/* True if one of the plugin's kernels took op (*s holds the result). */
bool tf_vendor_fast(cuda_dev *d, const tf_op *op, tf_status *s) {
    if (!fast_kernels_enabled()) return false;
    tf_cuda_row_args row;
    tf_cuda_attn_args attn;
    tf_cuda_reduce_args red;
    if (tf_cuda_plan_row(op, addr_of, &row)) {
        *s = launch_with_scratch(d, 0, NULL, launch_row, &row, "row kernel");
    } else if (tf_cuda_plan_reduce(op, d->sm_count, addr_of, &red)) {
        *s = launch_with_scratch(d, tf_cuda_reduce_scratch_bytes(&red), (void **)&red.partial, launch_reduce, &red,
                                 "reduction kernel");
    } else if (tf_cuda_plan_attention(op, d->sm_count, addr_of, &attn)) {
        tf_cuda_plan_flash_device(&attn, d->cc_major, d->cc_minor);
        *s = launch_with_scratch(d, tf_cuda_attn_scratch_bytes(&attn), (void **)&attn.partial, launch_attention, &attn,
                                 "attention kernel");
    } else {
        return false;
    }
    if (*s == TF_OK) d->stats.kernels_launched++;
    return true;
}


/* ---- discovery and extras ---- */

void tf_vendor_no_device_note(char *out, size_t n, cudaError_t e) {
    char driver[200] = "";
    bool have_driver = tf_cuda_driver_present(driver, sizeof driver);
    snprintf(out, n, "no CUDA device (cudaGetDeviceCount: %s: %s%s%.200s)%s%.200s",
             e == cudaSuccess ? "0 devices" : cudaGetErrorName(e), e == cudaSuccess ? "none found" : cudaGetErrorString(e),
             have_driver ? "" : "; the NVIDIA driver is not installed: ", driver,
             blas_lib.loaded ? "; cuBLAS loaded" : blas_lib.why[0] ? "; cuBLAS not loaded: " : "", blas_lib.why);
}

/* cuBLAS only where there is a GPU: ~150 MB and ~65 ms a machine without
 * one need not pay. */
void tf_vendor_discovered(int count) {
    if (count > 0 && !blas_lib.loaded && !blas_lib.why[0])
        tf_cublas_load(&blas_lib, TF_CUBLAS_SONAME, TF_CUBLAS_TOOLKIT_PATH);
    if (blas_lib.loaded && !blas_lib.lt_loaded) tf_cublaslt_load(&blas_lib, TF_CUBLASLT_SONAME, TF_CUBLASLT_TOOLKIT_PATH);
}

void tf_vendor_note(char *out, size_t n, int count, int failed) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    snprintf(out, n, "%d device(s)%s; CUDA runtime %d.%d, %s%s%.300s%s%.300s", count,
             failed ? " (some failed to open)" : "", runtime / 1000, runtime % 1000 / 10,
             blas_lib.loaded ? "cuBLAS for GEMM" : "GEMM on the portable kernel, cuBLAS not loaded: ",
             use_tf32 && blas_lib.loaded ? " (TF32 on)" : "", blas_lib.why,
             !blas_lib.loaded ? "" : blas_lib.lt_loaded ? ", cuBLASLt for bias epilogues" : "; cuBLASLt not loaded: ",
             blas_lib.lt_why);
}

static tf_status set_tf32(bool enabled) {
    use_tf32 = enabled;
    return TF_OK;
}

void *tf_vendor_extra(const char *name) {
    if (!strcmp(name, "tf_cuda_set_tf32")) return (void *)(tf_cuda_set_tf32_fn)set_tf32;
    return NULL;
}
