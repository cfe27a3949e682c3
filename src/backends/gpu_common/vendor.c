#define _GNU_SOURCE
#include "vendor.h"

#include <dlfcn.h>
#include <stddef.h>

bool tf_gpu_keep_loaded(const char *soname) {
    void *h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return h != NULL;       /* the reference this takes is never dropped: NODELETE keeps it mapped anyway */
}
