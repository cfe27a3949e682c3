#define _GNU_SOURCE
#include "cublas_table.h"
#include "gpu_runtime.h"   /* tf_gpu_env_string */
#include "vendor.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared loader (../gpu_common/vendor.c), with the library it opened unused. */
static bool load_symbols(const char *soname, const char *chosen, const char *toolkit_path, const char *const *names,
                         void **const *slots, size_t n, char *why, size_t why_n) {
    const char *lib;
    return tf_gpu_load_symbols(soname, chosen, toolkit_path, names, slots, n, &lib, why, why_n);
}

#define TF__NAME(name) #name,
#define TF__SLOT(name) (void **)&t->name,

void tf_cublas_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    memset(t, 0, sizeof *t);
    static const char *const names[] = {TF_CUBLAS_SYMBOLS(TF__NAME)};
    void **const slots[] = {TF_CUBLAS_SYMBOLS(TF__SLOT)};
    t->loaded = load_symbols(soname, tf_gpu_env_string("TF_CUBLAS_LIB"), toolkit_path, names, slots,
                             sizeof names / sizeof *names, t->why, sizeof t->why);
}

void tf_cublaslt_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    static const char *const names[] = {TF_CUBLASLT_SYMBOLS(TF__NAME)};
    void **const slots[] = {TF_CUBLASLT_SYMBOLS(TF__SLOT)};
    t->lt_loaded = load_symbols(soname, tf_gpu_env_string("TF_CUBLASLT_LIB"), toolkit_path, names, slots,
                                sizeof names / sizeof *names, t->lt_why, sizeof t->lt_why);
}
#undef TF__NAME
#undef TF__SLOT

bool tf_cuda_driver_present(char *why, size_t n) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (h) return true;
    const char *e = dlerror();
    snprintf(why, n, "%s", e ? e : "libcuda.so.1 not found");
    return false;
}
