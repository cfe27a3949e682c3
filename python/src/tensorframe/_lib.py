"""The C library through ctypes: loading it, declaring the calls the
package makes, and turning a failed call into a Python exception that
carries the library's own message and status name."""
import ctypes
import os
import sys
import pathlib
import threading

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
_cdll = ctypes.CDLL(_PATH)


def library_dir():
    """Where the library was loaded from: its plugins and helpers sit there."""
    return pathlib.Path(_PATH).resolve().parent

def _load_native():
    """The hot path in C (python/csrc/native.c, CPython's stable ABI) from
    beside the library, or None: the package then runs on ctypes alone, as
    it does with TENSORFRAME_NATIVE=0 (to compare) or where the build had
    no Python headers. It gets the library's functions by address."""
    if os.environ.get("TENSORFRAME_NATIVE", "1") == "0" or sys.implementation.name != "cpython":
        return None
    path = library_dir() / "libtfpy_native.so"
    if not path.exists():
        return None
    init = ctypes.PyDLL(str(path)).tf_py_native_init
    init.restype = ctypes.py_object
    init.argtypes = [ctypes.py_object]
    names = ["tf_add", "tf_sub", "tf_mul", "tf_div", "tf_matmul", "tf_slice", "tf_squeeze", "tf_scalar", "tf_tensor_release",
             "tf_tensor_dtype", "tf_tensor_ndim", "tf_tensor_shape", "tf_tensor_numel", "tf_tensor_device",
             "tf_sum", "tf_prod", "tf_max", "tf_min", "tf_tensor_from_dlpack", "tf_tensor_from_dlpack_legacy"]
    return init([ctypes.cast(getattr(_cdll, n), ctypes.c_void_p).value for n in names])


native = _load_native()

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


class NotFiniteError(TensorframeError, ArithmeticError):
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
    "TF_ERR_NOT_FINITE": NotFiniteError,
}


def error_of(code):
    status = lib.tf_status_name(code).decode()
    message = lib.tf_last_error().decode(errors="replace") or lib.tf_status_string(code).decode()
    return _ERROR_CLASSES.get(status, TensorframeError)(status, code, message)


def check(code):
    """Raise the library's error for a failed status."""
    if code != 0:
        raise error_of(code)


# ---- checked argument types ----
# ctypes converts a Python int to a C integer by truncating it silently
# (2**64 + 3 becomes 3) and a str with a NUL to the bytes before it. The
# integer and name arguments of the calls go through these instead: a value
# that does not fit is OverflowError, a NUL in a name ValueError, before
# the library sees anything. (A released array's methods raise before any
# call: see _array.Array.__del__.)

# ctypes reports an exception raised in from_param as ctypes.ArgumentError
# ("argument 2: OverflowError: ..."), losing its type; the refusal is kept
# here and the call's wrapper (lib.<name>) raises it as it was.
_refused = threading.local()


def _refuse(exc):
    _refused.exc = exc
    raise exc


def fit_integer(value, bits, signed=True, what="a C integer"):
    """value as an int that fits `bits` bits, else OverflowError."""
    import operator
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("tensorframe: %s is not an integer (the call takes %s)" % (type(value).__name__, what)) from None
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= v <= hi:
        raise OverflowError("tensorframe: %d does not fit %s [%d, %d]" % (v, what, lo, hi))
    return v


def _fit_param(value, bits, signed, what):
    """fit_integer inside from_param: a refusal is kept for the call's
    wrapper (only here, so no refusal outside a call can go stale)."""
    try:
        return fit_integer(value, bits, signed, what)
    except (TypeError, OverflowError) as exc:
        _refuse(exc)


class _Int(ctypes.c_int):
    @classmethod
    def from_param(cls, value, _c=ctypes.c_int):
        if type(value) is int and -2147483648 <= value <= 2147483647:     # the common case, first
            return _c(value)
        return _c(_fit_param(value, 32, True, "a C int"))


class _Int64(ctypes.c_int64):
    @classmethod
    def from_param(cls, value, _c=ctypes.c_int64):
        if type(value) is int and -9223372036854775808 <= value <= 9223372036854775807:
            return _c(value)
        return _c(_fit_param(value, 64, True, "int64"))


class _UInt64(ctypes.c_uint64):
    @classmethod
    def from_param(cls, value):
        return ctypes.c_uint64(_fit_param(value, 64, False, "uint64"))


class _Name(ctypes.c_char_p):
    """A NUL-free name (a device spec): 'cpu\\0evil' is not 'cpu'."""
    @classmethod
    def from_param(cls, value):
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes):
            _refuse(TypeError("tensorframe: a name is a str, not %s" % type(value).__name__))
        if b"\0" in value:
            _refuse(ValueError("tensorframe: %r holds a NUL character" % value))
        return ctypes.c_char_p(value)


_CHECKED = (_Int, _Int64, _UInt64, _Name)


# ---- declarations ----

_PLAIN = {_Int: ctypes.c_int, _Int64: ctypes.c_int64, _UInt64: ctypes.c_uint64}

class _Library:
    """The declared calls, each raising a refused argument's own exception."""


lib = _Library()


def _wrap_refusals(f):
    def call(*args):
        try:
            return f(*args)
        except ctypes.ArgumentError as err:
            exc, _refused.exc = getattr(_refused, "exc", None), None
            if exc is None or str(exc) not in str(err):    # not our refusal: ctypes' own
                raise
            raise exc from None

    call.__name__ = f.__name__
    return call


def _declare(name, restype, *argtypes):
    """lib.<name>: the C call, wrapped only where an argument is checked."""
    f = getattr(_cdll, name)
    f.restype = _PLAIN.get(restype, restype)      # results come back as Python ints, unchecked
    f.argtypes = list(argtypes)
    setattr(lib, name, _wrap_refusals(f) if any(t in _CHECKED for t in argtypes) else f)
    return f


_S = ctypes.c_int          # tf_status (a result: not checked)
_T = tensor_p
_TP = ctypes.POINTER(ctypes.c_void_p)
_D = device_p
_I = _Int                  # an int from the caller: checked
_I64 = _Int64
_C = ctypes.c_int          # a code or count the package itself computes (a dtype code, len(shape))
_DBL = ctypes.c_double
_B = ctypes.c_bool

_declare("tf_status_name", ctypes.c_char_p, _C)
_declare("tf_status_string", ctypes.c_char_p, _C)
_declare("tf_last_error", ctypes.c_char_p)
_declare("tf_dtype_name", ctypes.c_char_p, _C)
_declare("tf_dtype_size", ctypes.c_size_t, _C)
_declare("tf_op_name", ctypes.c_char_p, _C)
_declare("tf_promote_types", _S, _C, _C, ctypes.POINTER(ctypes.c_int))

_declare("tf_device_get", _S, _Name, ctypes.POINTER(_D))
_declare("tf_device_count", _I)
_declare("tf_device_at", _D, _C)
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
    _declare(_name, _S, _D, _C, _C, c_int64_p, _TP)
_declare("tf_full", _S, _D, _C, _C, c_int64_p, _DBL, _TP)
_declare("tf_arange", _S, _D, _C, _DBL, _DBL, _DBL, _TP)
_declare("tf_eye", _S, _D, _C, _I64, _I64, _TP)
_declare("tf_scalar", _S, _D, _C, _DBL, _TP)
_declare("tf_tensor_from_data", _S, _D, _C, _C, c_int64_p, ctypes.c_void_p, _TP)
_declare("tf_rand", _S, _D, _C, _C, c_int64_p, _UInt64, _TP)
_declare("tf_randn", _S, _D, _C, _C, c_int64_p, _UInt64, _TP)

_declare("tf_reshape", _S, _T, _C, c_int64_p, _TP)
_declare("tf_permute", _S, _T, ctypes.POINTER(ctypes.c_int), _TP)
# The package's own indexing calls these with values it has bounded by the
# shape already (slice.indices, a checked index, -2/-1): plain C types,
# the hot path of x[a:b] without a checking layer.
_declare("tf_transpose", _S, _T, ctypes.c_int, ctypes.c_int, _TP)
_declare("tf_slice", _S, _T, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _TP)
_declare("tf_expand", _S, _T, _C, c_int64_p, _TP)
_declare("tf_squeeze", _S, _T, _C, _TP)          # squeeze() checks its axes
_declare("tf_unsqueeze", _S, _T, _I, _TP)
_declare("tf_contiguous", _S, _T, _TP)
_declare("tf_copy", _S, _T, _TP)
_declare("tf_cast", _S, _T, _C, _TP)
_declare("tf_copy_into", _S, _T, _T)

# autograd and the optimizers
_declare("tf_set_requires_grad", _S, _T, _B)
_declare("tf_requires_grad", _B, _T)
_declare("tf_is_leaf", _B, _T)
_declare("tf_grad", _T, _T)
_declare("tf_zero_grad", None, _T)
_declare("tf_set_grad", _S, _T, _T)
_declare("tf_backward", _S, _T, _T, ctypes.c_uint)
_declare("tf_detach", _S, _T, _TP)
_declare("tf_grad_enabled", _B)
_declare("tf_set_grad_enabled", _B, _B)


class OptimizerConfig(ctypes.Structure):
    """tf_optimizer_config."""
    _fields_ = [("kind", ctypes.c_int), ("lr", ctypes.c_double), ("momentum", ctypes.c_double),
                ("dampening", ctypes.c_double), ("nesterov", ctypes.c_bool), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double)]


_declare("tf_optimizer_defaults", OptimizerConfig, ctypes.c_int)
_declare("tf_optimizer_create", _S, ctypes.POINTER(OptimizerConfig), _C, _TP, _TP)
_declare("tf_optimizer_destroy", None, ctypes.c_void_p)
_declare("tf_optimizer_step", _S, ctypes.c_void_p)
_declare("tf_optimizer_zero_grad", None, ctypes.c_void_p)
_declare("tf_optimizer_set_lr", _S, ctypes.c_void_p, _DBL)
_declare("tf_optimizer_steps", ctypes.c_int64, ctypes.c_void_p)
_declare("tf_clip_grad_norm", _S, _C, _TP, _DBL, ctypes.POINTER(ctypes.c_double))

# The op lists come from the library's op table, not from this file: every
# op of the elementwise families with the plain signature tf_NAME(x[, y],
# out). A family's ops with parameters (leaky_relu, clamp) are declared
# one by one below, with their own signatures.
_declare("tf_op_count", ctypes.c_int)
_declare("tf_op_arity", ctypes.c_int, _C)
_declare("tf_op_family", ctypes.c_int, _C)
KERNEL_ARITH, KERNEL_MATH, KERNEL_COMPARE, KERNEL_PREDICATE = 1, 2, 3, 4     # tf_op_kernel
_WITH_PARAMETERS = ("leaky_relu", "clamp")


def _ops_of(families, arity):
    names = []
    for op in range(lib.tf_op_count()):
        if lib.tf_op_family(op) in families and lib.tf_op_arity(op) == arity:
            name = lib.tf_op_name(op).decode()
            # an op the library lists without its function (a build whose
            # formula is missing) is left out, not an import error: the
            # conformance suite is where that is caught
            if name not in _WITH_PARAMETERS and hasattr(_cdll, "tf_" + name):
                names.append(name)
    return tuple(names)


ELEMENTWISE_BINARY = _ops_of((KERNEL_ARITH, KERNEL_COMPARE), 2)
ELEMENTWISE_UNARY = _ops_of((KERNEL_MATH, KERNEL_PREDICATE), 1)
MATH_UNARY = _ops_of((KERNEL_MATH,), 1)            # the unary formulas: float in, float out
BINARY = ELEMENTWISE_BINARY + ("matmul", "outer", "gemv")
UNARY = ELEMENTWISE_UNARY
REDUCE = ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "logsumexp")
for _name in BINARY:
    _declare("tf_" + _name, _S, _T, _T, _TP)
for _name in UNARY:
    _declare("tf_" + _name, _S, _T, _TP)
for _name in REDUCE:                    # _reduce checks the axes; argmax and argmin take the caller's
    _declare("tf_" + _name, _S, _T, _I if _name.startswith("arg") else _C, _B, _TP)
_declare("tf_var", _S, _T, _C, _I64, _B, _TP)
_declare("tf_std", _S, _T, _C, _I64, _B, _TP)
_declare("tf_cumsum", _S, _T, _I, _TP)
_declare("tf_sort", _S, _T, _I, _B, _TP)
_declare("tf_argsort", _S, _T, _I, _B, _TP)
_declare("tf_searchsorted", _S, _T, _T, _B, _TP)
_declare("tf_view_dtype", _S, _T, _C, _TP)
_declare("tf_view_as_real", _S, _T, _TP)
_declare("tf_view_as_complex", _S, _T, _TP)
_declare("tf_complex", _S, _T, _T, _TP)
_declare("tf_fft", _S, _T, _C, ctypes.POINTER(ctypes.c_int), _B, _C, _TP)
_declare("tf_rfft", _S, _T, _C, ctypes.POINTER(ctypes.c_int), _C, _TP)
_declare("tf_irfft", _S, _T, _C, ctypes.POINTER(ctypes.c_int), _I64, _C, _TP)
_declare("tf_linalg_cholesky", _S, _T, _B, _TP)
_declare("tf_linalg_solve", _S, _T, _T, _TP)
_declare("tf_linalg_inv", _S, _T, _TP)
_declare("tf_linalg_det", _S, _T, _TP)
_declare("tf_linalg_slogdet", _S, _T, _TP, _TP)
_declare("tf_linalg_qr", _S, _T, _B, _TP, _TP)
_declare("tf_linalg_svd", _S, _T, _B, _TP, _TP, _TP)
_declare("tf_linalg_eigh", _S, _T, _TP, _TP)
_declare("tf_leaky_relu", _S, _T, _DBL, _TP)
_declare("tf_clamp", _S, _T, _DBL, _DBL, _TP)
_declare("tf_where", _S, _T, _T, _T, _TP)
_declare("tf_softmax", _S, _T, _I, _TP)
_declare("tf_log_softmax", _S, _T, _I, _TP)
_declare("tf_rmsnorm", _S, _T, _T, _DBL, _TP)
_declare("tf_layernorm", _S, _T, _T, _T, _DBL, _TP)
_declare("tf_add_rmsnorm", _S, _T, _T, _T, _DBL, _TP)
_declare("tf_add_layernorm", _S, _T, _T, _T, _T, _DBL, _TP)
_declare("tf_norm", _S, _T, _DBL, _I, _B, _TP)
_declare("tf_gemm", _S, _T, _T, _T, _DBL, _DBL, _B, _B, _TP)
_declare("tf_linear", _S, _T, _T, _T, _TP)
_declare("tf_linear_fused", _S, _T, _T, _T, _C, _T, _TP)
_declare("tf_sdpa", _S, _T, _T, _T, _T, _DBL, _B, _I64, _TP)
_declare("tf_rope", _S, _T, _T, _I, _I64, _DBL, _I, _TP)
_declare("tf_index_select", _S, _T, _I, _T, _TP)
_declare("tf_gather", _S, _T, _I, _T, _TP)
_declare("tf_embedding", _S, _T, _T, _TP)
_declare("tf_conv2d", _S, _T, _T, _T, c_int64_p, c_int64_p, c_int64_p, _I64, _TP)
_declare("tf_maxpool2d", _S, _T, c_int64_p, c_int64_p, c_int64_p, c_int64_p, _TP)
_declare("tf_avgpool2d", _S, _T, c_int64_p, c_int64_p, c_int64_p, _B, _TP)
_declare("tf_cross_entropy", _S, _T, _T, _I64, _C, _TP)
_declare("tf_concat", _S, _C, _TP, _I, _TP)
_declare("tf_stack", _S, _C, _TP, _I, _TP)
_declare("tf_tril", _S, _T, _I64, _TP)
_declare("tf_triu", _S, _T, _I64, _TP)
_declare("tf_tile", _S, _T, _C, c_int64_p, _TP)
_declare("tf_flip", _S, _T, _C, ctypes.POINTER(ctypes.c_int), _TP)
_declare("tf_pad", _S, _T, _C, c_int64_p, _DBL, _TP)

_declare("tf_tensor_to_dlpack", _S, _T, _TP)
_declare("tf_tensor_native_memory", _S, _T, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int32 * 2))
_declare("tf_tensor_to_dlpack_legacy", _S, _T, _TP)
_declare("tf_tensor_from_dlpack", _S, ctypes.c_void_p, _TP)
_declare("tf_tensor_from_dlpack_legacy", _S, ctypes.c_void_p, _TP)


class MemoryStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "allocated", "reserved", "peak_allocated", "cache_hits", "cache_misses", "retries", "ooms",
        "peak_reserved", "cached", "limit")] + [("fragmentation", ctypes.c_double)]


_declare("tf_device_memory_stats", _S, _D, ctypes.POINTER(MemoryStats))


def int64_array(values):
    values = [fit_integer(v, 64, what="int64") for v in values]
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def int_array(values):
    values = [fit_integer(v, 32, what="a C int") for v in values]
    return (ctypes.c_int * max(1, len(values)))(*values)


def call(fn, *args):
    """fn(*args, &out) -> out, raising the library's error on failure."""
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return out.value
