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

/* Open the library and look up every name into its slot; false with `why`
 * set on the first thing missing. */
static bool load_symbols(const char *soname, const char *chosen, const char *toolkit_path, const char *const *names,
                         void **const *slots, size_t n, char *why, size_t why_n) {
    const char *lib;
    void *h = open_library(soname, chosen, toolkit_path, &lib, why, why_n);
    if (!h) return false;
    for (size_t i = 0; i < n; i++)
        if (!(*slots[i] = dlsym(h, names[i]))) {
            snprintf(why, why_n, "%s has no symbol %s", lib, names[i]);
            return false;
        }
    return true;
}

#define TF__NAME(name) #name,
#define TF__SLOT(name) (void **)&t->name,

void tf_cublas_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    memset(t, 0, sizeof *t);
    static const char *const names[] = {TF_CUBLAS_SYMBOLS(TF__NAME)};
    void **const slots[] = {TF_CUBLAS_SYMBOLS(TF__SLOT)};
    t->loaded = load_symbols(soname, getenv("TF_CUBLAS_LIB"), toolkit_path, names, slots,
                             sizeof names / sizeof *names, t->why, sizeof t->why);
}

void tf_cublaslt_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    static const char *const names[] = {TF_CUBLASLT_SYMBOLS(TF__NAME)};
    void **const slots[] = {TF_CUBLASLT_SYMBOLS(TF__SLOT)};
    t->lt_loaded = load_symbols(soname, getenv("TF_CUBLASLT_LIB"), toolkit_path, names, slots,
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
