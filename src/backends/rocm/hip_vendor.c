/* What the ROCm plugin does its own way (see ../native_gpu/native_dev.h): load the
 * HIP runtime, pick and load the code objects of the device's gfx target,
 * launch the portable kernels through hipModuleLaunchKernel, multiply with
 * rocBLAS where installed (the portable tiled matmul otherwise), and
 * describe AMD devices. The NVIDIA-only kernels (fast_kernels.cu: mma.sync,
 * ldmatrix, 32-lane warps) are not built here: every other op runs the
 * portable kernels, which use work-group barriers and local memory only, so
 * nothing depends on the wave size (64 on CDNA, 32 on RDNA). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas_plan.h"
#include "native_dev.h"
#include "hip_plan.h"

#define TF_HIP_SONAME "libamdhip64.so.5"     /* the HIP ABI the plugin is compiled against (ROCm 5) */

static tf_rocblas blas_lib;
static char skipped[600];                    /* devices without code for their target */

/* Without the amdgpu kernel driver's /dev/kfd no ROCm device can exist:
 * the runtime (with its LLVM-based code-object manager, over 100 MB) is not
 * loaded at all, unless TF_HIP_LIB names one to load anyway. */
bool tf_vendor_init(char *why, size_t n) {
    memset(&blas_lib, 0, sizeof blas_lib);
    skipped[0] = 0;
    const char *chosen = tf_gpu_env_string("TF_HIP_LIB");
    if (!chosen && access("/dev/kfd", F_OK) != 0) {
        memset(&tf_hip, 0, sizeof tf_hip);
        snprintf(why, n, "no ROCm device: /dev/kfd is absent (no amdgpu kernel driver), the HIP runtime is not loaded");
        return false;
    }
    tf_hip_runtime_load(&tf_hip, TF_HIP_SONAME, chosen);
    if (tf_hip.loaded) return true;
    snprintf(why, n, "no ROCm device: the HIP runtime is not loaded: %.300s", tf_hip.why);
    return false;
}

bool tf_vendor_sticky(hipError_t e) { return tf_hip_error_kind(e) == TF_GPU_ERROR_STICKY; }

/* Why a device was skipped, appended to the registration note. */
static void note_skipped(const char *why) {
    size_t used = strlen(skipped);
    snprintf(skipped + used, sizeof skipped - used, "%s%s", used ? "; " : "", why);
}

static void unload_modules(tf_vendor_state *v) {
    for (int p = 0; p < TF_HIP_MAX_PROGRAMS; p++)
        if (v->modules[p]) tf_hip.hipModuleUnload(v->modules[p]);
    memset(v->modules, 0, sizeof v->modules);
    memset(v->kernels, 0, sizeof v->kernels);
}

/* Every dtype program's code object for the device's target, and its
 * kernels by name (a program lacks the kernels its dtype has no use for). */
static bool load_modules(cuda_dev *d) {
    tf_vendor_state *v = &d->vendor;
    for (int p = 0; p < TF_HIP_MAX_PROGRAMS; p++) {
        const tf_hip_code_object *co = tf_hip_code_object_for(tf_hip_code_objects, tf_hip_code_object_count, v->arch, p);
        if (!co) continue;
        hipError_t e = tf_hip.hipModuleLoadData(&v->modules[p], co->data);
        if (e != hipSuccess) {
            char why[160];
            snprintf(why, sizeof why, "%s: hipModuleLoadData(%s) failed: %s", d->gd.name, v->arch,
                     tf_hip.hipGetErrorName(e));
            note_skipped(why);
            tf_hip.hipGetLastError();
            unload_modules(v);
            return false;
        }
        for (int k = 0; k < TF_PK_KERNEL_COUNT; k++)
            if (tf_hip.hipModuleGetFunction(&v->kernels[p][k], v->modules[p], tf_pk_kernel_names[k]) != hipSuccess) {
                v->kernels[p][k] = NULL;
                tf_hip.hipGetLastError();
            }
    }
    return true;
}

bool tf_vendor_open_device(cuda_dev *d, const tf_gpu_props *p) {
    tf_vendor_state *v = &d->vendor;
    char why[400];
    if (!tf_hip_arch_base(p->gcnArchName, v->arch, sizeof v->arch)) {
        snprintf(why, sizeof why, "%s: unknown architecture '%.60s'", d->gd.name, p->gcnArchName);
        note_skipped(why);
        return false;
    }
    if (tf_hip_find_target(v->arch, tf_hip_targets, tf_hip_target_count) < 0) {
        char built[200];
        tf_hip_list_targets(tf_hip_targets, tf_hip_target_count, built, sizeof built);
        snprintf(why, sizeof why, "%s is %s, which this build has no code for (built for %.150s; add it to TF_ROCM_TARGETS)",
                 d->gd.name, v->arch, built);
        note_skipped(why);
        return false;
    }
    v->wave_size = p->warpSize;
    d->matrix_units = tf_hip_matrix_cores(v->arch);
    d->stats.gfx_version = tf_hip_gfx_version(v->arch);
    d->stats.wave_size = p->warpSize;
    return load_modules(d);
}

void tf_vendor_close_device(cuda_dev *d) {
    if (d->vendor.blas) blas_lib.rocblas_destroy_handle(d->vendor.blas);
    d->vendor.blas = NULL;
    unload_modules(&d->vendor);
}

void tf_vendor_read_limits(cuda_dev *d, const tf_gpu_props *p) {
    tf_device_limits *l = &d->limits;
    l->max_buffer_bytes = l->max_binding_bytes = p->totalGlobalMem;
    l->compute_units = (uint32_t)p->multiProcessorCount;
    l->max_work_group_size = (uint32_t)p->maxThreadsPerBlock;
    for (int i = 0; i < 3; i++) l->max_work_group_dims[i] = (uint32_t)p->maxThreadsDim[i];
    l->subgroup_size = (uint32_t)p->warpSize;        /* the wave size: 64 or 32 */
    l->shared_memory_bytes = p->sharedMemPerBlock;
    l->cache_bytes[1] = p->l2CacheSize > 0 ? (uint64_t)p->l2CacheSize : 0;
    l->clock_mhz = p->clockRate > 0 ? (uint32_t)(p->clockRate / 1000) : 0;
}

/* hipRuntimeGetVersion's number: major * 10^7 + minor * 10^5 + patch. */
static void runtime_version(int *major, int *minor) {
    int v = 0;
    tf_hip.hipRuntimeGetVersion(&v);
    *major = v / 10000000;
    *minor = v / 100000 % 100;
}

void tf_vendor_describe(cuda_dev *d, char *out, size_t n) {
    int major, minor;
    runtime_version(&major, &minor);
    snprintf(out, n, "%.120s (%s, %d CUs, wave%d; HIP runtime %d.%d)%s", d->name, d->vendor.arch, d->sm_count,
             d->vendor.wave_size, major, minor, d->gd.lost ? " LOST" : "");
}

tf_status tf_vendor_launch(cuda_dev *d, tf_dtype program, tf_pk_kernel kernel, void **argv, const unsigned grid[3],
                           const unsigned block[3]) {
    hipFunction_t fn = (int)program < TF_HIP_MAX_PROGRAMS ? d->vendor.kernels[program][kernel] : NULL;
    if (!fn)
        return tf_cu_host->set_error(TF_ERR_BACKEND, "%s: kernel '%s' is not built for %d", d->gd.name,
                                     tf_pk_kernel_names[kernel], (int)program);
    hipError_t e = tf_hip.hipModuleLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                                                d->current, argv, NULL);
    return e == hipSuccess ? TF_OK : tf_cu_fail(d, e, tf_pk_kernel_names[kernel]);
}

/* ---- GEMM through rocBLAS ---- */

static tf_status blas_fail(cuda_dev *d, rocblas_status e, const char *what) {
    tf_status s = e == rocblas_status_memory_error ? TF_ERR_OUT_OF_MEMORY : TF_ERR_BACKEND;
    return tf_cu_host->set_error(s, "%s: %s failed: %s", d->gd.name, what, blas_lib.rocblas_status_to_string(e));
}

/* As cuBLAS (../cuda/cuda_vendor.c): row-major C = A B is column-major
 * C^T = B^T A^T, so rocBLAS gets b first; D = C in place. f16 and bf16
 * accumulate in f32. */
bool tf_vendor_gemm(cuda_dev *d, const tf_pk_target *tg, const tf_op *op, tf_status *s) {
    const tf_tensor_desc *a = &op->inputs[0], *b = &op->inputs[1], *o = &op->output;
    rocblas_datatype type;
    switch (o->dtype) {
    case TF_F32: type = rocblas_datatype_f32_r; break;
    case TF_F64: type = rocblas_datatype_f64_r; break;
    case TF_F16: type = rocblas_datatype_f16_r; break;
    case TF_BF16: type = rocblas_datatype_bf16_r; break;
    default: return false;
    }
    tf_blas_plan p;
    if (!blas_lib.loaded || !tf_blas_plan_of(op, &p)) return false;     /* the portable tiled matmul instead */
    if (!d->vendor.blas) {
        rocblas_status e = blas_lib.rocblas_create_handle(&d->vendor.blas);
        if (e != rocblas_status_success) {
            d->vendor.blas = NULL;
            *s = blas_fail(d, e, "rocblas_create_handle");
            return true;
        }
    }
    if (p.with_c && (*s = tf_pk_copy_c_into_out(tg, op)) != TF_OK) return true;
    rocblas_datatype compute = type == rocblas_datatype_f64_r ? rocblas_datatype_f64_r : rocblas_datatype_f32_r;
    tf_blas_scalars sc;
    tf_blas_scalars_of(&p, compute == rocblas_datatype_f64_r, &sc);
    char *po = tf_cu_first(o);
    d->shared_scratch = true;                    /* rocBLAS's workspace serves every stream */
    rocblas_status e = blas_lib.rocblas_set_stream(d->vendor.blas, d->current);
    if (e != rocblas_status_success) {
        *s = blas_fail(d, e, "rocblas_set_stream");
        return true;
    }
    rocblas_operation ta = p.a.trans ? rocblas_operation_transpose : rocblas_operation_none;
    rocblas_operation tb = p.b.trans ? rocblas_operation_transpose : rocblas_operation_none;
    e = blas_lib.rocblas_gemm_strided_batched_ex(
        d->vendor.blas, tb, ta, (rocblas_int)p.N, (rocblas_int)p.M, (rocblas_int)p.K, sc.alpha, tf_cu_first(b), type,
        (rocblas_int)p.b.ld, p.b.batch_stride, tf_cu_first(a), type, (rocblas_int)p.a.ld, p.a.batch_stride, sc.beta,
        po, type, (rocblas_int)p.N, p.M * p.N, po, type, (rocblas_int)p.N, p.M * p.N, (rocblas_int)p.batch, compute,
        rocblas_gemm_algo_standard, 0, 0);
    *s = e == rocblas_status_success ? TF_OK : blas_fail(d, e, "rocblas_gemm_strided_batched_ex");
    if (*s == TF_OK) d->stats.gemm_calls++;
    return true;
}

/* No AMD-specific kernels yet: the portable ones take every op. */
/* hipBLASLt's epilogues are not used: the core runs GEMM_EPILOGUE as its parts. */
bool tf_vendor_epilogue_supported(const tf_op *op) {
    (void)op;
    return false;
}

tf_status tf_vendor_gemm_epilogue(cuda_dev *d, const tf_pk_target *tg, const tf_op *op) {
    (void)tg;
    (void)op;
    return tf_cu_host->set_error(TF_ERR_UNSUPPORTED, "%s: gemm_epilogue runs as its parts on ROCm", d->gd.name);
}

bool tf_vendor_fast(cuda_dev *d, const tf_op *op, tf_status *s) {
    (void)d;
    (void)op;
    (void)s;
    return false;
}

/* ---- discovery and extras ---- */

void tf_vendor_no_device_note(char *out, size_t n, hipError_t e) {
    char built[200];
    tf_hip_list_targets(tf_hip_targets, tf_hip_target_count, built, sizeof built);
    snprintf(out, n, "no ROCm device (hipGetDeviceCount: %s: %s); HIP runtime %.150s; code objects for %s",
             e == hipSuccess ? "0 devices" : tf_hip.hipGetErrorName(e),
             e == hipSuccess ? "none found" : tf_hip.hipGetErrorString(e), tf_hip.path, built);
}

/* rocBLAS only where there is a GPU to run it on. */
void tf_vendor_discovered(int count) {
    if (count > 0 && !blas_lib.loaded) tf_rocblas_load(&blas_lib, tf_gpu_env_string("TF_ROCBLAS_LIB"));
}

void tf_vendor_note(char *out, size_t n, int count, int failed) {
    int major, minor;
    runtime_version(&major, &minor);
    char built[200];
    tf_hip_list_targets(tf_hip_targets, tf_hip_target_count, built, sizeof built);
    snprintf(out, n, "%d device(s)%s%.600s%s; HIP runtime %d.%d, code objects for %s; %s%.300s", count,
             failed ? " (some skipped: " : "", skipped, failed ? ")" : "", major, minor, built,
             blas_lib.loaded   ? "rocBLAS for GEMM"
             : blas_lib.why[0] ? "GEMM on the portable tiled kernel, rocBLAS not loaded: "
                               : "rocBLAS not looked for (no device)",
             blas_lib.loaded ? "" : blas_lib.why);
}

void *tf_vendor_extra(const char *name) {
    (void)name;
    return NULL;
}
