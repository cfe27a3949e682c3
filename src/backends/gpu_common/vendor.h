/* What GPU plugins share about the vendor libraries they sit on. */
#ifndef TF_GPU_VENDOR_H
#define TF_GPU_VENDOR_H

#include <stdbool.h>
#include <stddef.h>

/* Keep an already-loaded vendor library mapped for the rest of the process,
 * even after the plugin that brought it in is unloaded by tf_shutdown:
 * driver stacks (the OpenCL ICD loader and its drivers, cuBLAS) keep threads
 * and exit handlers running and are not built to be unloaded and loaded
 * again. False if the library is not loaded. */
bool tf_gpu_keep_loaded(const char *soname);

/* A vendor library loaded at run time through a table of symbols: dlopen
 * `chosen` (a user's choice, when set) or `soname` through the loader's
 * search path, else `fallback_path` (the toolkit the plugin was built with;
 * may be NULL), then look up every name into its slot. False with `why` set
 * on the first thing missing: the loader's message, or "LIB has no symbol
 * NAME". *lib is the library opened (or tried). The library stays mapped. */
bool tf_gpu_load_symbols(const char *soname, const char *chosen, const char *fallback_path, const char *const *names,
                         void **const *slots, size_t n, const char **lib, char *why, size_t why_n);

#endif
