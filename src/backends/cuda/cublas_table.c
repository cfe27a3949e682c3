#define _GNU_SOURCE
#include "cublas_table.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dlopen `soname` (or `chosen`, a user's choice) through the loader's search
 * path, else the toolkit's copy; NULL and the loader's reason in why. */
static void *open_library(const char *soname, const char *chosen, const char *toolkit_path, const char **lib,
                          char *why, size_t n) {
    *lib = chosen && *chosen ? chosen : soname;
    void *h = dlopen(*lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h && *lib == soname && toolkit_path && *toolkit_path) {   /* the toolkit the plugin was built with */
        h = dlopen(toolkit_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h) *lib = toolkit_path;
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : *lib);
    }
    return h;
}

#define TF__CUBLAS_RESOLVE(name)                                                              \
    *(void **)&t->name = dlsym(h, #name);                                                     \
    if (!t->name) {                                                                           \
        snprintf(why, why_n, "%s has no symbol %s", lib, #name);                                 \
        return;                                                                               \
    }

void tf_cublas_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    memset(t, 0, sizeof *t);
    const char *lib;
    char *why = t->why;
    size_t why_n = sizeof t->why;
    void *h = open_library(soname, getenv("TF_CUBLAS_LIB"), toolkit_path, &lib, why, why_n);
    if (!h) return;
    TF_CUBLAS_SYMBOLS(TF__CUBLAS_RESOLVE)
    t->loaded = true;
}

void tf_cublaslt_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    t->lt_loaded = false;
    const char *lib;
    char *why = t->lt_why;
    size_t why_n = sizeof t->lt_why;
    void *h = open_library(soname, getenv("TF_CUBLASLT_LIB"), toolkit_path, &lib, why, why_n);
    if (!h) return;
    TF_CUBLASLT_SYMBOLS(TF__CUBLAS_RESOLVE)
    t->lt_loaded = true;
}
#undef TF__CUBLAS_RESOLVE

bool tf_cuda_driver_present(char *why, size_t n) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (h) return true;
    const char *e = dlerror();
    snprintf(why, n, "%s", e ? e : "libcuda.so.1 not found");
    return false;
}
