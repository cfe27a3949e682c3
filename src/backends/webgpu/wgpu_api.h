/* The WebGPU C API (webgpu.h, plus wgpu-native's wgpu.h extras) as a table
 * of entry points resolved at run time from libwgpu_native: the plugin has
 * no link-time dependency on it, so it loads (with zero devices and a note
 * saying why) where the library is missing. */
#ifndef TF_WGPU_API_H
#define TF_WGPU_API_H

#include <stdbool.h>
#include <stddef.h>

#include "webgpu.h"
#include "wgpu.h"

#define TF_WGPU_FUNCTIONS(X)                                                                                          \
    X(WGPUInstance, CreateInstance, (WGPUInstanceDescriptor const *))                                                 \
    X(void, InstanceRelease, (WGPUInstance))                                                                          \
    X(void, InstanceProcessEvents, (WGPUInstance))                                                                    \
    X(size_t, InstanceEnumerateAdapters, (WGPUInstance, WGPUInstanceEnumerateAdapterOptions const *, WGPUAdapter *))   \
    X(WGPUStatus, AdapterGetInfo, (WGPUAdapter, WGPUAdapterInfo *))                                                   \
    X(void, AdapterInfoFreeMembers, (WGPUAdapterInfo))                                                                \
    X(WGPUStatus, AdapterGetLimits, (WGPUAdapter, WGPULimits *))                                                      \
    X(WGPUBool, AdapterHasFeature, (WGPUAdapter, WGPUFeatureName))                                                    \
    X(WGPUFuture, AdapterRequestDevice, (WGPUAdapter, WGPUDeviceDescriptor const *, WGPURequestDeviceCallbackInfo))   \
    X(void, AdapterRelease, (WGPUAdapter))                                                                            \
    X(WGPUQueue, DeviceGetQueue, (WGPUDevice))                                                                        \
    X(void, DeviceRelease, (WGPUDevice))                                                                              \
    X(WGPUBool, DevicePoll, (WGPUDevice, WGPUBool, WGPUSubmissionIndex const *))                                      \
    X(void, DevicePushErrorScope, (WGPUDevice, WGPUErrorFilter))                                                      \
    X(WGPUFuture, DevicePopErrorScope, (WGPUDevice, WGPUPopErrorScopeCallbackInfo))                                   \
    X(WGPUBuffer, DeviceCreateBuffer, (WGPUDevice, WGPUBufferDescriptor const *))                                     \
    X(void, BufferDestroy, (WGPUBuffer))                                                                              \
    X(void, BufferRelease, (WGPUBuffer))                                                                              \
    X(WGPUFuture, BufferMapAsync, (WGPUBuffer, WGPUMapMode, size_t, size_t, WGPUBufferMapCallbackInfo))               \
    X(void const *, BufferGetConstMappedRange, (WGPUBuffer, size_t, size_t))                                          \
    X(void, BufferUnmap, (WGPUBuffer))                                                                                \
    X(WGPUCommandEncoder, DeviceCreateCommandEncoder, (WGPUDevice, WGPUCommandEncoderDescriptor const *))             \
    X(void, CommandEncoderCopyBufferToBuffer, (WGPUCommandEncoder, WGPUBuffer, uint64_t, WGPUBuffer, uint64_t,        \
                                               uint64_t))                                                             \
    X(WGPUCommandBuffer, CommandEncoderFinish, (WGPUCommandEncoder, WGPUCommandBufferDescriptor const *))             \
    X(void, CommandEncoderRelease, (WGPUCommandEncoder))                                                              \
    X(void, CommandBufferRelease, (WGPUCommandBuffer))                                                                \
    X(void, QueueSubmit, (WGPUQueue, size_t, WGPUCommandBuffer const *))                                              \
    X(void, QueueWriteBuffer, (WGPUQueue, WGPUBuffer, uint64_t, void const *, size_t))                                \
    X(void, QueueRelease, (WGPUQueue))                                                                                \
    X(uint64_t, BufferGetSize, (WGPUBuffer))                                                                          \
    X(WGPUShaderModule, DeviceCreateShaderModule, (WGPUDevice, WGPUShaderModuleDescriptor const *))                   \
    X(void, ShaderModuleRelease, (WGPUShaderModule))                                                                  \
    X(WGPUBindGroupLayout, DeviceCreateBindGroupLayout, (WGPUDevice, WGPUBindGroupLayoutDescriptor const *))          \
    X(void, BindGroupLayoutRelease, (WGPUBindGroupLayout))                                                            \
    X(WGPUPipelineLayout, DeviceCreatePipelineLayout, (WGPUDevice, WGPUPipelineLayoutDescriptor const *))             \
    X(void, PipelineLayoutRelease, (WGPUPipelineLayout))                                                              \
    X(WGPUComputePipeline, DeviceCreateComputePipeline, (WGPUDevice, WGPUComputePipelineDescriptor const *))          \
    X(void, ComputePipelineRelease, (WGPUComputePipeline))                                                            \
    X(WGPUBindGroup, DeviceCreateBindGroup, (WGPUDevice, WGPUBindGroupDescriptor const *))                            \
    X(void, BindGroupRelease, (WGPUBindGroup))                                                                        \
    X(WGPUComputePassEncoder, CommandEncoderBeginComputePass, (WGPUCommandEncoder, WGPUComputePassDescriptor const *)) \
    X(void, ComputePassEncoderSetPipeline, (WGPUComputePassEncoder, WGPUComputePipeline))                             \
    X(void, ComputePassEncoderSetBindGroup, (WGPUComputePassEncoder, uint32_t, WGPUBindGroup, size_t,                 \
                                             uint32_t const *))                                                       \
    X(void, ComputePassEncoderDispatchWorkgroups, (WGPUComputePassEncoder, uint32_t, uint32_t, uint32_t))             \
    X(void, ComputePassEncoderEnd, (WGPUComputePassEncoder))                                                          \
    X(void, ComputePassEncoderRelease, (WGPUComputePassEncoder))                                                      \
    X(uint32_t, GetVersion, (void))

typedef struct tf_wgpu_api {
#define TF__WGPU_SLOT(ret, name, args) ret(*name) args;
    TF_WGPU_FUNCTIONS(TF__WGPU_SLOT)
#undef TF__WGPU_SLOT
    char path[512];                      /* where the library was found */
} tf_wgpu_api;

/* Load libwgpu_native: TF_WGPU_LIBRARY, then `plugin_dir` (where the build
 * and the install put it beside the plugin), then the system's search
 * path. False with `why` filled when no library has every entry point. */
bool tf_wgpu_load(tf_wgpu_api *api, const char *plugin_dir, char *why, size_t why_len);

#endif
