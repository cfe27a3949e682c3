/* DLPack 1.x: tensors to and from any library that speaks it (PyTorch,
 * NumPy, JAX, CuPy, ...), by their C structures.
 *
 * The structures are DLPack's ABI (dlpack.h 1.0: DLManagedTensorVersioned),
 * written here from the specification under upstream's include guard, so
 * this header and an included dlpack.h 1.x are one and the same; an older
 * dlpack.h (0.x, without the versioned structure) is refused at compile time.
 */
#ifndef TENSORFRAME_DLPACK_H
#define TENSORFRAME_DLPACK_H

#include <stdint.h>

#include "tensorframe/tensorframe.h"

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
    kDLOpenCL = 4,
    kDLVulkan = 7,
    kDLMetal = 8,
    kDLVPI = 9,
    kDLROCM = 10,
    kDLROCMHost = 11,
    kDLExtDev = 12,
    kDLCUDAManaged = 13,
    kDLOneAPI = 14,
    kDLWebGPU = 15,
    kDLHexagon = 16
} DLDeviceType;

typedef struct {
    DLDeviceType device_type;
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0U,
    kDLUInt = 1U,
    kDLFloat = 2U,
    kDLOpaqueHandle = 3U,
    kDLBfloat = 4U,
    kDLComplex = 5U,
    kDLBool = 6U
} DLDataTypeCode;

typedef struct {
    uint8_t code;                /* DLDataTypeCode */
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;            /* elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;

/* DLPack 0.x's managed tensor, still what legacy consumers exchange (the
 * "dltensor" capsule of NumPy < 2.1 and PyTorch < 2.4). */
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif
#elif !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1
#error "tensorframe/dlpack.h needs DLPack 1.x (DLManagedTensorVersioned); an older dlpack.h is included"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* t as a DLPack tensor, without a copy: its shape, strides (elements) and
 * first element as the data pointer (byte_offset 0). The managed tensor
 * holds a reference to t's memory; the consumer calls its deleter exactly
 * once, and t may be released before that. Work queued on t's device is
 * finished first, so the consumer reads the values on any stream. Devices
 * whose memory is host memory (the CPU) export as kDLCPU; devices whose
 * backend addresses its memory natively, as their own (CUDA: kDLCUDA with
 * the device pointer; ROCm: kDLROCM); others (OpenCL, WebGPU) give
 * TF_ERR_UNSUPPORTED (move the tensor with tf_tensor_to first). A
 * block-quantized dtype, which DLPack cannot describe, is TF_ERR_DTYPE. */
TF_API tf_status tf_tensor_to_dlpack(const tf_tensor *t, DLManagedTensorVersioned **out);

/* Where t's first element lives, without a reference and without waiting
 * for queued work (order foreign work with tf_stream_native_handle): a
 * host address (kDLCPU) or a device address as the backend's native API
 * takes it (kDLCUDA ...). t must stay alive while it is used. Strides as
 * tf_tensor_strides; TF_ERR_UNSUPPORTED as for tf_tensor_to_dlpack. */
TF_API tf_status tf_tensor_native_memory(const tf_tensor *t, void **data, DLDevice *device);

/* A tensor over a DLPack tensor's memory, on the CPU, without a copy (host
 * memory: kDLCPU, kDLCUDAHost, kDLROCMHost). On success tensorframe owns
 * `managed`: its deleter runs once the memory is truly free (the last view
 * released and queued work done). A READ_ONLY tensor is copied instead (an
 * op's output or tf_tensor_write could write through it), and so is one
 * whose first element is misaligned for its dtype (data + byte_offset not a
 * multiple of the element size: kernels load whole elements); a copy's
 * deleter runs before this returns. The fields are not trusted: an offset
 * or strides that wrap the address space or span more than any object can
 * (TF_ERR_SIZE), or that reach bytes not mapped in this process
 * (TF_ERR_INVALID_ARGUMENT: the pages of the first and last byte are
 * checked), are refused before anything is read. On failure - those, another
 * device, a dtype tensorframe lacks (complex, lanes > 1), negative strides,
 * a version other than 1.x - the error says which, nothing is made, and
 * `managed` stays the caller's. */
TF_API tf_status tf_tensor_from_dlpack(DLManagedTensorVersioned *managed, tf_tensor **out);

/* The same through DLPack 0.x's unversioned DLManagedTensor, for consumers
 * and producers that predate 1.0 (at::fromDLPack / at::toDLPack of
 * PyTorch < 2.4, NumPy < 2.1). It carries no flags: an import is taken as
 * writable, as those producers mean it. Ownership follows the rules above. */
TF_API tf_status tf_tensor_to_dlpack_legacy(const tf_tensor *t, DLManagedTensor **out);
TF_API tf_status tf_tensor_from_dlpack_legacy(DLManagedTensor *managed, tf_tensor **out);

#ifdef __cplusplus
}
#endif

#endif
