"""The C library through ctypes: loading it, declaring the calls the
package makes, and turning a failed call into a Python exception that
carries the library's own message and status name."""
import ctypes
import os
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent


def _library_path():
    """TENSORFRAME_LIBRARY (a build tree's libtensorframe.so, whose plugins
    sit beside it) or the copy the wheel bundles in _lib/."""
    env = os.environ.get("TENSORFRAME_LIBRARY")
    if env:
        return env
    bundled = _HERE / "_lib" / "libtensorframe.so"
    if bundled.exists():
        return str(bundled)
    raise ImportError(
        "tensorframe: no libtensorframe.so in %s; install the package with pip (which builds it) "
        "or point TENSORFRAME_LIBRARY at a built one" % bundled.parent)


_PATH = _library_path()
lib = ctypes.CDLL(_PATH)


def library_dir():
    """Where the library was loaded from: its plugins and helpers sit there."""
    return pathlib.Path(_PATH).resolve().parent

c_int64_p = ctypes.POINTER(ctypes.c_int64)
tensor_p = ctypes.c_void_p
device_p = ctypes.c_void_p


# ---- errors ----

class TensorframeError(RuntimeError):
    """A failed library call: .status is the status name ("TF_ERR_SHAPE"),
    .code its value, the message the library's own."""

    def __init__(self, status, code, message):
        super().__init__("%s: %s" % (status, message))
        self.status = status
        self.code = code
        self.message = message


class ShapeError(TensorframeError, ValueError):
    pass


class DtypeError(TensorframeError, TypeError):
    pass


class AxisError(TensorframeError, ValueError, IndexError):
    pass


class OutOfRangeError(TensorframeError, IndexError):
    pass


class InvalidArgumentError(TensorframeError, ValueError):
    pass


class UnknownDeviceError(TensorframeError, ValueError):
    pass


class DeviceMismatchError(TensorframeError, ValueError):
    pass


class UnsupportedError(TensorframeError, NotImplementedError):
    pass


class OutOfMemoryError(TensorframeError, MemoryError):
    pass


# Each status name with the Python classes it also is, so that callers may
# catch what the array API and Python expect (ValueError for a bad shape).
_ERROR_CLASSES = {
    "TF_ERR_SHAPE": ShapeError,
    "TF_ERR_SIZE": ShapeError,
    "TF_ERR_TOO_MANY_DIMS": ShapeError,
    "TF_ERR_DTYPE": DtypeError,
    "TF_ERR_AXIS": AxisError,
    "TF_ERR_INDEX": OutOfRangeError,
    "TF_ERR_INVALID_ARGUMENT": InvalidArgumentError,
    "TF_ERR_NULL_ARGUMENT": InvalidArgumentError,
    "TF_ERR_UNKNOWN_DEVICE": UnknownDeviceError,
    "TF_ERR_NO_DEVICE": UnknownDeviceError,
    "TF_ERR_DEVICE_MISMATCH": DeviceMismatchError,
    "TF_ERR_UNSUPPORTED": UnsupportedError,
    "TF_ERR_OUT_OF_MEMORY": OutOfMemoryError,
}


def error_of(code):
    status = lib.tf_status_name(code).decode()
    message = lib.tf_last_error().decode(errors="replace") or lib.tf_status_string(code).decode()
    return _ERROR_CLASSES.get(status, TensorframeError)(status, code, message)


def check(code):
    """Raise the library's error for a failed status."""
    if code != 0:
        raise error_of(code)


# ---- declarations ----

def _declare(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_S = ctypes.c_int          # tf_status
_T = tensor_p
_TP = ctypes.POINTER(ctypes.c_void_p)
_D = device_p
_I = ctypes.c_int
_I64 = ctypes.c_int64
_DBL = ctypes.c_double
_B = ctypes.c_bool

_declare("tf_status_name", ctypes.c_char_p, _I)
_declare("tf_status_string", ctypes.c_char_p, _I)
_declare("tf_last_error", ctypes.c_char_p)
_declare("tf_dtype_name", ctypes.c_char_p, _I)
_declare("tf_dtype_size", ctypes.c_size_t, _I)
_declare("tf_op_name", ctypes.c_char_p, _I)
_declare("tf_promote_types", _S, _I, _I, ctypes.POINTER(ctypes.c_int))

_declare("tf_device_get", _S, ctypes.c_char_p, ctypes.POINTER(_D))
_declare("tf_device_count", _I)
_declare("tf_device_at", _D, _I)
_declare("tf_device_name", ctypes.c_char_p, _D)
_declare("tf_device_synchronize", _S, _D)
_declare("tf_backend_count", _I)

_declare("tf_tensor_retain", _T, _T)
_declare("tf_tensor_release", None, _T)
_declare("tf_tensor_device", _D, _T)
_declare("tf_tensor_dtype", _I, _T)
_declare("tf_tensor_ndim", _I, _T)
_declare("tf_tensor_shape", c_int64_p, _T)
_declare("tf_tensor_strides", c_int64_p, _T)
_declare("tf_tensor_numel", _I64, _T)
_declare("tf_tensor_nbytes", _I64, _T)
_declare("tf_tensor_read", _S, _T, ctypes.c_void_p, ctypes.c_size_t)
_declare("tf_tensor_to", _S, _T, _D, _TP)

for _name in ("tf_empty", "tf_zeros", "tf_ones"):
    _declare(_name, _S, _D, _I, _I, c_int64_p, _TP)
_declare("tf_full", _S, _D, _I, _I, c_int64_p, _DBL, _TP)
_declare("tf_arange", _S, _D, _I, _DBL, _DBL, _DBL, _TP)
_declare("tf_eye", _S, _D, _I, _I64, _I64, _TP)
_declare("tf_scalar", _S, _D, _I, _DBL, _TP)
_declare("tf_tensor_from_data", _S, _D, _I, _I, c_int64_p, ctypes.c_void_p, _TP)
_declare("tf_rand", _S, _D, _I, _I, c_int64_p, ctypes.c_uint64, _TP)
_declare("tf_randn", _S, _D, _I, _I, c_int64_p, ctypes.c_uint64, _TP)

_declare("tf_reshape", _S, _T, _I, c_int64_p, _TP)
_declare("tf_permute", _S, _T, ctypes.POINTER(ctypes.c_int), _TP)
_declare("tf_transpose", _S, _T, _I, _I, _TP)
_declare("tf_slice", _S, _T, _I, _I64, _I64, _I64, _TP)
_declare("tf_expand", _S, _T, _I, c_int64_p, _TP)
_declare("tf_squeeze", _S, _T, _I, _TP)
_declare("tf_unsqueeze", _S, _T, _I, _TP)
_declare("tf_contiguous", _S, _T, _TP)
_declare("tf_copy", _S, _T, _TP)
_declare("tf_cast", _S, _T, _I, _TP)
_declare("tf_copy_into", _S, _T, _T)

BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge",
          "logical_and", "logical_or", "matmul", "outer", "gemv", "swiglu")
UNARY = ("neg", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
         "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "softplus", "floor", "ceil", "round",
         "logical_not", "isnan", "isinf")
REDUCE = ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "logsumexp")
for _name in BINARY:
    _declare("tf_" + _name, _S, _T, _T, _TP)
for _name in UNARY:
    _declare("tf_" + _name, _S, _T, _TP)
for _name in REDUCE:
    _declare("tf_" + _name, _S, _T, _I, _B, _TP)
_declare("tf_var", _S, _T, _I, _I64, _B, _TP)
_declare("tf_std", _S, _T, _I, _I64, _B, _TP)
_declare("tf_cumsum", _S, _T, _I, _TP)
_declare("tf_leaky_relu", _S, _T, _DBL, _TP)
_declare("tf_clamp", _S, _T, _DBL, _DBL, _TP)
_declare("tf_where", _S, _T, _T, _T, _TP)
_declare("tf_softmax", _S, _T, _I, _TP)
_declare("tf_log_softmax", _S, _T, _I, _TP)
_declare("tf_rmsnorm", _S, _T, _T, _DBL, _TP)
_declare("tf_layernorm", _S, _T, _T, _T, _DBL, _TP)
_declare("tf_norm", _S, _T, _DBL, _I, _B, _TP)
_declare("tf_gemm", _S, _T, _T, _T, _DBL, _DBL, _B, _B, _TP)
_declare("tf_linear", _S, _T, _T, _T, _TP)
_declare("tf_sdpa", _S, _T, _T, _T, _T, _DBL, _B, _I64, _TP)
_declare("tf_rope", _S, _T, _T, _I, _I64, _DBL, _I, _TP)
_declare("tf_index_select", _S, _T, _I, _T, _TP)
_declare("tf_gather", _S, _T, _I, _T, _TP)
_declare("tf_embedding", _S, _T, _T, _TP)
_declare("tf_concat", _S, _I, _TP, _I, _TP)
_declare("tf_stack", _S, _I, _TP, _I, _TP)
_declare("tf_tril", _S, _T, _I64, _TP)
_declare("tf_triu", _S, _T, _I64, _TP)
_declare("tf_tile", _S, _T, _I, c_int64_p, _TP)
_declare("tf_flip", _S, _T, _I, ctypes.POINTER(ctypes.c_int), _TP)
_declare("tf_pad", _S, _T, _I, c_int64_p, _DBL, _TP)

_declare("tf_tensor_to_dlpack", _S, _T, _TP)
_declare("tf_tensor_to_dlpack_legacy", _S, _T, _TP)
_declare("tf_tensor_from_dlpack", _S, ctypes.c_void_p, _TP)
_declare("tf_tensor_from_dlpack_legacy", _S, ctypes.c_void_p, _TP)


class MemoryStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "allocated", "reserved", "peak_allocated", "cache_hits", "cache_misses", "retries", "ooms",
        "peak_reserved", "cached", "limit")] + [("fragmentation", ctypes.c_double)]


_declare("tf_device_memory_stats", _S, _D, ctypes.POINTER(MemoryStats))


def int64_array(values):
    values = list(values)
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def int_array(values):
    values = list(values)
    return (ctypes.c_int * max(1, len(values)))(*values)


def call(fn, *args):
    """fn(*args, &out) -> out, raising the library's error on failure."""
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return out.value
