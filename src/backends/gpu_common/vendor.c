#define _GNU_SOURCE
#include "vendor.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

bool tf_gpu_keep_loaded(const char *soname) {
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return h != NULL;       /* the reference this takes is never dropped: NODELETE keeps it mapped anyway */
}

/* dlopen `chosen` or `soname`, else the fallback; NULL and the loader's reason in why. */
static void *open_library(const char *soname, const char *chosen, const char *fallback_path, const char **lib,
                          char *why, size_t n) {
    *lib = chosen && *chosen ? chosen : soname;
    void *h = dlopen(*lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h && *lib == soname && fallback_path && *fallback_path) {
        h = dlopen(fallback_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h) *lib = fallback_path;
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : *lib);
    }
    return h;
}

bool tf_gpu_load_symbols(const char *soname, const char *chosen, const char *fallback_path, const char *const *names,
                         void **const *slots, size_t n, const char **lib, char *why, size_t why_n) {
    void *h = open_library(soname, chosen, fallback_path, lib, why, why_n);
    if (!h) return false;
    for (size_t i = 0; i < n; i++)
        if (!(*slots[i] = dlsym(h, names[i]))) {
            snprintf(why, why_n, "%s has no symbol %s", *lib, names[i]);
            return false;
        }
    return true;
}
