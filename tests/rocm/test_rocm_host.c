/* The ROCm plugin's host-side logic, without an AMD GPU: the gfx names it
 * reads, which embedded code object a device gets (each checked as an
 * AMDGPU ELF for its target holding its kernels), how HIP errors are
 * treated, the BLAS and launch planning it shares with CUDA, and the
 * runtime table's loader. */
#define _POSIX_C_SOURCE 200809L
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "elf_symbols.h"

#include "blas_plan.h"
#include "gpu_runtime.h"
#include "hip_plan.h"
#include "plan.h"

static void test_arch_names(void **state) {
    (void)state;
    char b[32];
    assert_true(tf_hip_arch_base("gfx90a:sramecc+:xnack-", b, sizeof b));
    assert_string_equal(b, "gfx90a");
    assert_true(tf_hip_arch_base("gfx1100", b, sizeof b));
    assert_string_equal(b, "gfx1100");
    assert_false(tf_hip_arch_base("sm_90", b, sizeof b));
    assert_false(tf_hip_arch_base("gfx", b, sizeof b));
    assert_false(tf_hip_arch_base("gfx9z0", b, sizeof b));
    assert_false(tf_hip_arch_base(NULL, b, sizeof b));
    assert_false(tf_hip_arch_base("gfx90a", b, 4));              /* does not fit: refused, not cut */
    assert_int_equal(tf_hip_gfx_version("gfx90a:xnack-"), 9010);
    assert_int_equal(tf_hip_gfx_version("gfx1030"), 10030);
    assert_int_equal(tf_hip_gfx_version("gfx1100"), 11000);
    assert_int_equal(tf_hip_gfx_version("gfx942"), 9042);
    assert_int_equal(tf_hip_gfx_version("nvidia"), 0);
    assert_true(tf_hip_matrix_cores("gfx90a"));
    assert_true(tf_hip_matrix_cores("gfx942"));
    assert_true(tf_hip_matrix_cores("gfx1100"));
    assert_false(tf_hip_matrix_cores("gfx1030"));
    assert_false(tf_hip_matrix_cores("gfx906"));
}

static void test_target_choice(void **state) {
    (void)state;
    const char *const built[] = {"gfx90a", "gfx1030", "gfx1100"};
    assert_int_equal(tf_hip_find_target("gfx1030", built, 3), 1);
    assert_int_equal(tf_hip_find_target("gfx1031", built, 3), -1);   /* code objects are per ISA */
    assert_int_equal(tf_hip_find_target("gfx90", built, 3), -1);
    char list[64];
    tf_hip_list_targets(built, 3, list, sizeof list);
    assert_string_equal(list, "gfx90a, gfx1030, gfx1100");
    tf_hip_list_targets(built, 3, list, 10);                          /* truncated, still terminated */
    assert_int_equal(strlen(list), 9);
}

static void test_error_kinds(void **state) {
    (void)state;
    assert_int_equal(tf_hip_error_kind(hipErrorIllegalAddress), TF_GPU_ERROR_STICKY);
    assert_int_equal(tf_hip_error_kind(hipErrorLaunchFailure), TF_GPU_ERROR_STICKY);
    assert_int_equal(tf_hip_error_kind(hipErrorLaunchTimeOut), TF_GPU_ERROR_STICKY);
    assert_int_equal(tf_hip_error_kind(hipErrorAssert), TF_GPU_ERROR_STICKY);
    assert_int_equal(tf_hip_error_kind(hipErrorECCNotCorrectable), TF_GPU_ERROR_STICKY);
    assert_int_equal(tf_hip_error_kind(hipErrorOutOfMemory), TF_GPU_ERROR_OUT_OF_MEMORY);
    assert_int_equal(tf_hip_error_kind(hipErrorInvalidValue), TF_GPU_ERROR_OTHER);
    assert_int_equal(tf_hip_error_kind(hipErrorNotReady), TF_GPU_ERROR_OTHER);
    assert_int_equal(tf_hip_error_kind(hipErrorNoDevice), TF_GPU_ERROR_OTHER);
}

/* ---- the embedded code objects ---- */

/* EF_AMDGPU_MACH of a target (LLVM's AMDGPUUsage). */
static unsigned mach_of(const char *target) {
    if (!strcmp(target, "gfx90a")) return 0x3f;
    if (!strcmp(target, "gfx1030")) return 0x36;
    if (!strcmp(target, "gfx1100")) return 0x41;
    if (!strcmp(target, "gfx940")) return 0x40;
    return 0;
}

static void test_code_objects(void **state) {
    (void)state;
    assert_true(tf_hip_target_count >= 1);
    assert_int_equal(tf_hip_code_object_count, tf_hip_target_count * 9);
    for (int t = 0; t < tf_hip_target_count; t++) {
        const char *target = tf_hip_targets[t];
        bool kernel_somewhere[TF_PK_KERNEL_COUNT] = {false};
        for (int p = 0; p < 9; p++) {
            const tf_hip_code_object *co = tf_hip_code_object_for(tf_hip_code_objects, tf_hip_code_object_count, target, p);
            assert_non_null(co);
            assert_true(co->end - co->data > (long)sizeof(Elf64_Ehdr));
            assert_true(((uintptr_t)co->data & 4095) == 0);         /* page-aligned, as loaders like it */
            const Elf64_Ehdr *h = (const Elf64_Ehdr *)co->data;
            assert_memory_equal(co->data, ELFMAG, SELFMAG);
            assert_int_equal(h->e_machine, EM_AMDGPU);
            if (mach_of(target)) assert_int_equal(h->e_flags & 0xff, mach_of(target));
            for (int k = 0; k < TF_PK_KERNEL_COUNT; k++)
                if (elf_has_function(co->data, tf_pk_kernel_names[k])) kernel_somewhere[k] = true;
            /* every program has the kernels every dtype uses */
            assert_true(elf_has_function(co->data, "copy_from"));
            assert_true(elf_has_function(co->data, "fill"));
            assert_true(elf_has_function(co->data, "index_pick"));
        }
        for (int k = 0; k < TF_PK_KERNEL_COUNT; k++) {
            if (!kernel_somewhere[k]) fprintf(stderr, "%s: no program has kernel %s\n", target, tf_pk_kernel_names[k]);
            assert_true(kernel_somewhere[k]);
        }
        const tf_hip_code_object *f32 = tf_hip_code_object_for(tf_hip_code_objects, tf_hip_code_object_count, target, TF_F32);
        assert_true(elf_has_function(f32->data, "matmul"));              /* the tiled GEMM without rocBLAS */
        assert_true(elf_has_function(f32->data, "qgemv"));
        assert_true(elf_has_function(f32->data, "rand_fill"));
    }
    assert_null(tf_hip_code_object_for(tf_hip_code_objects, tf_hip_code_object_count, "gfx1031", 0));
}

/* ---- what the GPU plugins share: BLAS and launch planning ---- */

static tf_tensor_desc desc(tf_dtype dt, int ndim, const int64_t *shape, const int64_t *strides) {
    tf_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        d.shape[i] = shape[i];
        d.strides[i] = strides[i];
    }
    return d;
}

static void test_blas_plan(void **state) {
    (void)state;
    tf_op op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    op.kind = TF_OP_MATMUL;
    op.n_inputs = 2;
    /* [2, 3, 4] @ [2, 4, 5], b transposed in memory (its strides swap) */
    op.inputs[0] = desc(TF_F32, 3, (int64_t[]){2, 3, 4}, (int64_t[]){12, 4, 1});
    op.inputs[1] = desc(TF_F32, 3, (int64_t[]){2, 4, 5}, (int64_t[]){20, 1, 4});
    op.output = desc(TF_F32, 3, (int64_t[]){2, 3, 5}, (int64_t[]){15, 5, 1});
    tf_blas_plan p;
    assert_true(tf_blas_plan_of(&op, &p));
    assert_int_equal(p.M, 3);
    assert_int_equal(p.N, 5);
    assert_int_equal(p.K, 4);
    assert_int_equal(p.batch, 2);
    assert_false(p.a.trans);
    assert_int_equal(p.a.ld, 4);
    assert_int_equal(p.a.batch_stride, 12);
    assert_true(p.b.trans);
    assert_int_equal(p.b.ld, 4);
    assert_int_equal(p.b.batch_stride, 20);
    assert_false(p.with_c);
    assert_true(p.alpha == 1 && p.beta == 0);
    /* a broadcast over the batch: stride 0 */
    op.inputs[0] = desc(TF_F32, 3, (int64_t[]){2, 3, 4}, (int64_t[]){0, 4, 1});
    assert_true(tf_blas_plan_of(&op, &p));
    assert_int_equal(p.a.batch_stride, 0);
    /* neither axis unit-stride: not one BLAS call */
    op.inputs[0] = desc(TF_F32, 3, (int64_t[]){2, 3, 4}, (int64_t[]){24, 8, 2});
    assert_false(tf_blas_plan_of(&op, &p));
    op.inputs[0] = desc(TF_F32, 3, (int64_t[]){2, 3, 4}, (int64_t[]){12, 4, 1});
    /* integers are the portable kernel's */
    op.output.dtype = op.inputs[0].dtype = op.inputs[1].dtype = TF_I32;
    assert_false(tf_blas_plan_of(&op, &p));
    op.output.dtype = op.inputs[0].dtype = op.inputs[1].dtype = TF_BF16;
    assert_true(tf_blas_plan_of(&op, &p));
    /* GEMM: alpha, and c only when beta != 0 */
    op.kind = TF_OP_GEMM;
    op.n_inputs = 3;
    op.inputs[2] = op.output;
    op.params.alpha = 2;
    op.params.beta = 0.5;
    assert_true(tf_blas_plan_of(&op, &p));
    assert_true(p.with_c && p.alpha == 2 && p.beta == 0.5);
    op.params.beta = 0;
    assert_true(tf_blas_plan_of(&op, &p));
    assert_false(p.with_c);
    /* the scalars as the libraries read them */
    op.params.beta = 0.5;
    assert_true(tf_blas_plan_of(&op, &p));
    tf_blas_scalars sc;
    tf_blas_scalars_of(&p, false, &sc);
    assert_true(*(const float *)sc.alpha == 2.0f && *(const float *)sc.beta == 0.5f);
    tf_blas_scalars_of(&p, true, &sc);
    assert_true(*(const double *)sc.alpha == 2.0 && *(const double *)sc.beta == 0.5);
    /* an empty product is nothing to call */
    op.output.shape[1] = 0;
    assert_false(tf_blas_plan_of(&op, &p));
}

static void test_grid(void **state) {
    (void)state;
    unsigned g[3], b[3];
    size_t global[2] = {1000, 0}, local[2] = {16, 16};
    assert_int_equal(tf_gpu_grid_of(1, global, NULL, g, b), TF_GPU_GRID_OK);
    assert_true(b[0] == 256 && b[1] == 1 && g[0] == 4 && g[1] == 1 && g[2] == 1);
    global[0] = 0;
    assert_int_equal(tf_gpu_grid_of(1, global, NULL, g, b), TF_GPU_GRID_EMPTY);
    /* a second dimension past 65535 groups goes over z */
    global[0] = 32;
    global[1] = (size_t)16 * 100000;
    assert_int_equal(tf_gpu_grid_of(2, global, local, g, b), TF_GPU_GRID_OK);
    assert_true(b[0] == 16 && b[1] == 16 && g[0] == 2 && g[1] == 65535 && g[2] == 2);
    assert_true((size_t)g[1] * g[2] >= 100000);
    global[1] = (size_t)16 * 65535 * 65536;
    assert_int_equal(tf_gpu_grid_of(2, global, local, g, b), TF_GPU_GRID_TOO_BIG);
}

/* ---- the runtime table ---- */

static void test_runtime_table(void **state) {
    (void)state;
    tf_hip_runtime t;
    tf_hip_runtime_load(&t, "libamdhip64.so.5", "/nonexistent/libamdhip64.so.5");
    assert_false(t.loaded);
    assert_non_null(strstr(t.why, "/nonexistent/libamdhip64.so.5: cannot open shared object file"));
    assert_null(t.hipMalloc);                                     /* nothing half-filled */
    const char *missing = getenv("FAKE_HIP_MISSING");             /* a runtime without hipGraphLaunch */
    if (missing) {
        tf_hip_runtime_load(&t, "libamdhip64.so.5", missing);
        assert_false(t.loaded);
        assert_non_null(strstr(t.why, "has no symbol hipGraphLaunch"));
        assert_null(t.hipGetDeviceCount);
    }
    const char *fake = getenv("FAKE_HIP_LIB");
    if (fake) {
        tf_hip_runtime_load(&t, "libamdhip64.so.5", fake);
        assert_true(t.loaded);
        assert_string_equal(t.path, fake);
        int n = -1;
        assert_int_equal(t.hipGetDeviceCount(&n), hipErrorNoDevice);
        assert_int_equal(n, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arch_names),  cmocka_unit_test(test_target_choice), cmocka_unit_test(test_error_kinds),
        cmocka_unit_test(test_code_objects), cmocka_unit_test(test_blas_plan),    cmocka_unit_test(test_grid),
        cmocka_unit_test(test_runtime_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
