/* The one vendor header: the CUDA runtime names ../native_gpu/native_backend.c uses,
 * as the HIP runtime's, called through the symbol table (tf_hip) resolved at
 * run time. HIP mirrors the CUDA runtime API call for call; where it differs
 * (hipHostMalloc's name, hipGraphInstantiate's error-node arguments, the
 * error codes) the mapping says so. */
#ifndef TF_HIP_VENDOR_H
#define TF_HIP_VENDOR_H

#include "hip_runtime_table.h"
#include "plan.h"
#include "rocblas_table.h"
#include <tensorframe/rocm.h>

#define TF_VENDOR_NAME "rocm"
#define TF_RT "hip"                     /* the runtime API's prefix, in messages */

/* Types and constants. */
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNotReady hipErrorNotReady
#define cudaStream_t hipStream_t
#define cudaEvent_t hipEvent_t
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaEventDefault hipEventDefault
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal

/* Calls, through the table. */
#define cudaGetDeviceCount tf_hip.hipGetDeviceCount
#define cudaGetDeviceProperties tf_hip.hipGetDeviceProperties
#define cudaSetDevice tf_hip.hipSetDevice
#define cudaGetLastError tf_hip.hipGetLastError
#define cudaGetErrorName tf_hip.hipGetErrorName
#define cudaGetErrorString tf_hip.hipGetErrorString
#define cudaDriverGetVersion tf_hip.hipDriverGetVersion
#define cudaRuntimeGetVersion tf_hip.hipRuntimeGetVersion
#define cudaMemGetInfo tf_hip.hipMemGetInfo
#define cudaMalloc tf_hip.hipMalloc
#define cudaFree tf_hip.hipFree
#define cudaHostAlloc tf_hip.hipHostMalloc
#define cudaFreeHost tf_hip.hipHostFree
#define cudaMemcpyAsync tf_hip.hipMemcpyAsync
#define cudaMemcpyPeerAsync tf_hip.hipMemcpyPeerAsync
#define cudaStreamCreateWithFlags tf_hip.hipStreamCreateWithFlags
#define cudaStreamDestroy tf_hip.hipStreamDestroy
#define cudaStreamSynchronize tf_hip.hipStreamSynchronize
#define cudaStreamWaitEvent tf_hip.hipStreamWaitEvent
#define cudaEventCreateWithFlags tf_hip.hipEventCreateWithFlags
#define cudaEventDestroy tf_hip.hipEventDestroy
#define cudaEventRecord tf_hip.hipEventRecord
#define cudaEventSynchronize tf_hip.hipEventSynchronize
#define cudaEventQuery tf_hip.hipEventQuery
#define cudaEventElapsedTime tf_hip.hipEventElapsedTime
#define cudaDeviceCanAccessPeer tf_hip.hipDeviceCanAccessPeer
#define cudaDeviceEnablePeerAccess tf_hip.hipDeviceEnablePeerAccess
#define cudaDeviceSynchronize tf_hip.hipDeviceSynchronize
#define cudaStreamBeginCapture tf_hip.hipStreamBeginCapture
#define cudaStreamEndCapture tf_hip.hipStreamEndCapture
#define cudaGraphInstantiate(exec, graph, flags) tf_hip.hipGraphInstantiate((exec), (graph), NULL, NULL, 0)
#define cudaGraphLaunch tf_hip.hipGraphLaunch
#define cudaGraphExecDestroy tf_hip.hipGraphExecDestroy
#define cudaGraphDestroy tf_hip.hipGraphDestroy

typedef hipDeviceProp_t tf_gpu_props;
typedef tf_rocm_stats tf_vendor_stats;

#define TF_HIP_MAX_PROGRAMS 9           /* the plain dtypes: one code object each per target */

/* What a HIP device holds beyond the shared state. */
typedef struct tf_vendor_state {
    char arch[64];                      /* the gfx target its code objects were built for: "gfx90a" */
    int wave_size;                      /* 64 on CDNA (gfx9), 32 on RDNA (gfx10, gfx11) */
    hipModule_t modules[TF_HIP_MAX_PROGRAMS];
    hipFunction_t kernels[TF_HIP_MAX_PROGRAMS][TF_PK_KERNEL_COUNT];
    rocblas_handle blas;                /* made on the first GEMM, where rocBLAS is installed */
} tf_vendor_state;

#endif
