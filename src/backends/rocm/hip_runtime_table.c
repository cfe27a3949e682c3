/* See hip_runtime_table.h. */
#define _GNU_SOURCE
#include "hip_runtime_table.h"

#include <stdio.h>
#include <string.h>

#include "vendor.h"

tf_hip_runtime tf_hip;

void tf_hip_runtime_load(tf_hip_runtime *t, const char *soname, const char *chosen) {
    memset(t, 0, sizeof *t);
#define TF__NAME(name) #name,
#define TF__SLOT(name) (void **)&t->name,
    static const char *const names[] = {TF_HIP_SYMBOLS(TF__NAME)};
    void **const slots[] = {TF_HIP_SYMBOLS(TF__SLOT)};
#undef TF__NAME
#undef TF__SLOT
    const char *lib = NULL;
    t->loaded = tf_gpu_load_symbols(soname, chosen, NULL, names, slots, sizeof names / sizeof *names, &lib, t->why,
                                    sizeof t->why);
    if (lib) snprintf(t->path, sizeof t->path, "%s", lib);
    if (!t->loaded) {                    /* no half-filled table: every call is through a resolved symbol or none */
        char why[sizeof t->why];
        memcpy(why, t->why, sizeof why);
        memset(t, 0, sizeof *t);
        memcpy(t->why, why, sizeof why);
    }
}
