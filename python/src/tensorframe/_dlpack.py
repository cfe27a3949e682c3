"""DLPack capsules over the C API (tf_tensor_to_dlpack / _from_dlpack and
their DLPack 0.x twins), made and consumed with CPython's capsule calls.

A capsule named "dltensor_versioned" (DLPack 1.x) or "dltensor" (0.x)
holds a managed tensor; the consumer renames it "used_..." and owns the
tensor from then on. A capsule still carrying its first name when it is
collected was never consumed, so its destructor gives the tensor back by
calling the managed tensor's deleter."""
import ctypes

from . import _lib

VERSIONED = b"dltensor_versioned"
LEGACY = b"dltensor"
USED_VERSIONED = b"used_dltensor_versioned"
USED_LEGACY = b"used_dltensor"

kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan, kDLROCM, kDLROCMHost, kDLWebGPU = 1, 2, 3, 4, 7, 10, 11, 15
HOST_DEVICE_TYPES = (kDLCPU, kDLCUDAHost, kDLROCMHost)   # python/csrc/native.c lists them too

# Types whose __dlpack__ takes no keywords (DLPack < 1.0: NumPy < 2.1,
# PyTorch < 2.4), remembered so that each call does not fail first.
LEGACY_PRODUCERS = set()
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2

_capi = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)   # our own declarations, not pythonapi's shared ones
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capi.PyCapsule_SetName.restype = ctypes.c_int
_capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _Versioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


class _Legacy(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


# The capsule destructor is C (python/csrc/dlpack_capsule.c): CPython runs
# it with an exception in flight whenever a consumer refuses a capsule, when
# Python code could not run without losing that exception.
_helper = ctypes.CDLL(str(_lib.library_dir() / "libtfpy_capsule.so"))
_DESTRUCTOR = ctypes.cast(_helper.tf_py_dlpack_capsule_destructor, ctypes.c_void_p)


# GPU memory that DLPack consumers (PyTorch, CuPy, JAX) address directly.
NATIVE_GPU_TYPES = (kDLCUDA, kDLROCM)


def native_gpu_device(handle):
    """(device type, id) where tensor `handle`'s memory is a GPU's that a
    consumer can take without a copy (kDLCUDA, kDLROCM); None for any other
    memory (host, or a device DLPack consumers do not address)."""
    data, where = ctypes.c_void_p(), (ctypes.c_int32 * 2)()
    if _lib.lib.tf_tensor_native_memory(handle, ctypes.byref(data), ctypes.byref(where)) != 0:
        return None
    return (where[0], where[1]) if where[0] in NATIVE_GPU_TYPES else None


def export(handle, versioned, copied=False):
    """A capsule over tensor `handle` (host memory, or a GPU's that
    native_gpu_device names), versioned or legacy. The library waits for
    the device's queued work first, so a consumer may read it on any stream."""
    managed = ctypes.c_void_p()
    fn = _lib.lib.tf_tensor_to_dlpack if versioned else _lib.lib.tf_tensor_to_dlpack_legacy
    _lib.check(fn(handle, ctypes.byref(managed)))
    if versioned and copied:
        _Versioned.from_address(managed.value).flags |= FLAG_IS_COPIED
    try:
        return _capi.PyCapsule_New(managed.value, VERSIONED if versioned else LEGACY,
                                   _DESTRUCTOR)
    except BaseException:
        struct = _Versioned if versioned else _Legacy
        struct.from_address(managed.value).deleter(managed.value)
        raise


def _why_copied(ptr, versioned):
    """Why the library would copy this managed tensor rather than share its
    memory (read-only, or misaligned for its dtype), or None."""
    managed = (_Versioned if versioned else _Legacy).from_address(ptr)
    if versioned and managed.flags & FLAG_READ_ONLY:
        return "the producer's memory is read-only (an op could write through it)"
    t = managed.dl_tensor
    size = t.bits // 8
    if size > 1 and ((t.data or 0) + t.byte_offset) % size:
        return "the data is not aligned to its %d-byte elements" % size
    return None


def consume(capsule, allow_copy=True):
    """The tensor handle over a capsule's memory; the capsule is marked used
    (tensorframe owns the managed tensor) only when the import succeeds. A
    read-only or misaligned tensor is copied by the library, which
    allow_copy=False refuses."""
    address = id(capsule)
    for name, used, fn in ((VERSIONED, USED_VERSIONED, _lib.lib.tf_tensor_from_dlpack),
                           (LEGACY, USED_LEGACY, _lib.lib.tf_tensor_from_dlpack_legacy)):
        if _capi.PyCapsule_IsValid(address, name):
            ptr = _capi.PyCapsule_GetPointer(address, name)
            why = None if allow_copy else _why_copied(ptr, name == VERSIONED)
            if why:
                raise BufferError("tensorframe.from_dlpack: %s, so tensorframe would copy it; copy=False forbids "
                                  "that" % why)
            out = ctypes.c_void_p()
            code = fn(ptr, ctypes.byref(out))
            if code != 0:
                err = _lib.error_of(code)
                raise BufferError(str(err)) from err
            _capi.PyCapsule_SetName(capsule, used)
            return out.value
    raise BufferError("tensorframe.from_dlpack: not an unconsumed DLPack capsule (\"dltensor_versioned\" or "
                      "\"dltensor\"); a capsule can be consumed once")


def is_capsule(obj):
    return type(obj).__name__ == "PyCapsule"
