#define _GNU_SOURCE
#include "cublas_table.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_cublas_load(tf_cublas *t, const char *soname, const char *toolkit_path) {
    memset(t, 0, sizeof *t);
    const char *env = getenv("TF_CUBLAS_LIB");
    const char *lib = env && *env ? env : soname;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h && lib == soname && toolkit_path && *toolkit_path) {   /* the toolkit the plugin was built with */
        h = dlopen(toolkit_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h) lib = toolkit_path;
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(t->why, sizeof t->why, "%s", e ? e : lib);
        return;
    }
#define TF__CUBLAS_RESOLVE(name)                                                              \
    *(void **)&t->name = dlsym(h, #name);                                                     \
    if (!t->name) {                                                                           \
        snprintf(t->why, sizeof t->why, "%s has no symbol %s", lib, #name);                   \
        return;                                                                               \
    }
    TF_CUBLAS_SYMBOLS(TF__CUBLAS_RESOLVE)
#undef TF__CUBLAS_RESOLVE
    t->loaded = true;
}

bool tf_cuda_driver_present(char *why, size_t n) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (h) return true;
    const char *e = dlerror();
    snprintf(why, n, "%s", e ? e : "libcuda.so.1 not found");
    return false;
}
