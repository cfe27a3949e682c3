/* The HIP runtime (libamdhip64.so.5), loaded at run time through a table of
 * symbols, as the CUDA plugin loads cuBLAS: the plugin has no load-time
 * dependency on ROCm, so a machine without it gets "0 devices, and why"
 * instead of a plugin that fails to load. Prototypes come from HIP's own
 * header (hip_runtime_api.h is C); nothing of libamdhip64 is linked. */
#ifndef TF_HIP_RUNTIME_TABLE_H
#define TF_HIP_RUNTIME_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

/* Every runtime call the plugin makes, by its exported name. */
#define TF_HIP_SYMBOLS(X)                                                                                       \
    X(hipGetDeviceCount) X(hipGetDeviceProperties) X(hipSetDevice) X(hipGetLastError) X(hipGetErrorName)        \
    X(hipGetErrorString) X(hipDriverGetVersion) X(hipRuntimeGetVersion) X(hipMemGetInfo) X(hipMalloc)          \
    X(hipFree) X(hipHostMalloc) X(hipHostFree) X(hipMemcpyAsync) X(hipMemcpyPeerAsync) X(hipStreamCreateWithFlags) \
    X(hipStreamDestroy) X(hipStreamSynchronize) X(hipStreamWaitEvent) X(hipEventCreateWithFlags)               \
    X(hipEventDestroy) X(hipEventRecord) X(hipEventSynchronize) X(hipEventQuery) X(hipEventElapsedTime)        \
    X(hipDeviceCanAccessPeer) X(hipDeviceEnablePeerAccess) X(hipDeviceSynchronize) X(hipStreamBeginCapture)    \
    X(hipStreamEndCapture) X(hipGraphInstantiate) X(hipGraphLaunch) X(hipGraphExecDestroy) X(hipGraphDestroy)  \
    X(hipModuleLoadData) X(hipModuleUnload) X(hipModuleGetFunction) X(hipModuleLaunchKernel)

typedef struct tf_hip_runtime {
    bool loaded;
    char why[300];                      /* when not loaded: the library or symbol missing */
    char path[200];                     /* the library that was opened */
#define TF__HIP_FIELD(name) __typeof__(&name) name;
    TF_HIP_SYMBOLS(TF__HIP_FIELD)
#undef TF__HIP_FIELD
} tf_hip_runtime;

/* The plugin's table, filled by tf_hip_runtime_load. */
extern tf_hip_runtime tf_hip;

/* Open `chosen` (TF_HIP_LIB, a user's choice) or `soname` through the
 * loader's search path and resolve every symbol; on failure t->loaded is
 * false and t->why names the library or symbol missing. The library stays
 * mapped for the life of the process (its threads and exit handlers are not
 * built to be unloaded). */
void tf_hip_runtime_load(tf_hip_runtime *t, const char *soname, const char *chosen);

#endif
