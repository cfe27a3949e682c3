/* What GPU plugins share about the vendor libraries they sit on. */
#ifndef TF_GPU_VENDOR_H
#define TF_GPU_VENDOR_H

#include <stdbool.h>

/* Keep an already-loaded vendor library mapped for the rest of the process,
 * even after the plugin that brought it in is unloaded by tf_shutdown:
 * driver stacks (the OpenCL ICD loader and its drivers, cuBLAS) keep threads
 * and exit handlers running and are not built to be unloaded and loaded
 * again. False if the library is not loaded. */
bool tf_gpu_keep_loaded(const char *soname);

#endif
