"""The module's functions: the array API 2023.12 namespace as far as the
op table reaches (each either one library call or an exact composition of
a few), plus the op table's own ops under their names."""
import builtins
import ctypes
import math
from collections import namedtuple

from . import _dlpack
from . import _lib
from . import _dtypes as dt
from ._array import ALL_AXES, Array, _from_values, _flatten, _infer_dtype, _shape_of_nested, device_of, scalar, standard_pair
from ._lib import call, check, int64_array, int_array, lib

__all__ = []


def _export(fn):
    __all__.append(fn.__name__)
    return fn


def _wrap(h):
    return Array._wrap(h)


def _shape_tuple(shape):
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(s) for s in shape)


def _pair(x1, x2):
    """Two operands as arrays: a Python scalar takes the other's dtype and
    device (the array API's scalar rule)."""
    if isinstance(x1, Array) and isinstance(x2, Array):
        return standard_pair(x1, x2)
    if isinstance(x1, Array):
        return x1, x1._operand(x2) if not isinstance(x2, Array) else x2
    if isinstance(x2, Array):
        return x2._operand(x1), x2
    a = asarray(x1)
    return a, a._operand(x2)


def _check_operand(x, name):
    if x is NotImplemented:
        raise TypeError("tensorframe.%s: operands are arrays or Python scalars" % name)


# ---- creation ----

@_export
def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """An Array from an Array, anything speaking DLPack (NumPy, PyTorch:
    shared memory when the device and dtype allow), a buffer, or Python
    scalars and nested sequences."""
    target_dtype = dt.dtype_of(dtype) if dtype is not None else None
    if isinstance(obj, Array):
        out = obj
    elif isinstance(obj, (builtins.bool, int, float, complex)):
        return scalar(obj, target_dtype or _infer_dtype([obj]), device_of(device))
    elif isinstance(obj, (list, tuple)):
        shape = _shape_of_nested(obj)
        values = []
        _flatten(obj, shape, 0, values)
        return _from_values(values, shape, target_dtype or _infer_dtype(values), device_of(device))
    elif hasattr(obj, "__dlpack__") or hasattr(obj, "__array__"):
        out = _from_foreign(obj, copy)
    else:
        raise TypeError("tensorframe.asarray: cannot make an array from %s" % type(obj).__name__)
    if copy is False and ((target_dtype and target_dtype != out.dtype)
                          or (device is not None and device_of(device) != out.device)):
        raise ValueError("tensorframe.asarray: the dtype or device asked for needs a copy; copy=False forbids it")
    copied = bool(copy) and out is not obj              # from_dlpack honoured copy=True already
    if device is not None and device_of(device) != out.device:
        out, copied = out.to(device), True
    if target_dtype is not None and target_dtype != out.dtype:
        out, copied = out.astype(target_dtype), True
    if copy and not copied:
        out = _wrap(call(lib.tf_copy, out._h))
    return out


def _from_foreign(obj, copy):
    """Another library's array: over DLPack (NumPy scalars through their
    __array__); what the producer cannot export (NumPy < 1.25: bool and
    read-only arrays) comes over as values, a copy, unless copy=False."""
    src = obj if hasattr(obj, "__dlpack__") else obj.__array__()
    try:
        return from_dlpack(src, copy=copy)
    except BufferError:
        if copy is False or not hasattr(src, "tolist"):
            raise
        return asarray(src.tolist(), dtype=getattr(getattr(src, "dtype", None), "name", None))


def _creation(fn_name):
    fn = getattr(lib, fn_name)

    def make(shape, *, dtype=None, device=None):
        shape = _shape_tuple(shape)
        d = dt.dtype_of(dtype) if dtype is not None else dt.default_float
        return _wrap(call(fn, device_of(device)._h, d.code, len(shape), int64_array(shape)))

    make.__name__ = fn_name[3:]
    return make


zeros = _export(_creation("tf_zeros"))
ones = _export(_creation("tf_ones"))
empty = _export(_creation("tf_empty"))


@_export
def full(shape, fill_value, *, dtype=None, device=None):
    shape = _shape_tuple(shape)
    if dtype is None:
        dtype = dt.bool if isinstance(fill_value, builtins.bool) else (
            dt.default_int if isinstance(fill_value, int) else
            dt.default_complex if isinstance(fill_value, complex) else dt.default_float)
    dtype = dt.dtype_of(dtype)
    dt.check_int_fits(fill_value, dtype)
    if isinstance(fill_value, complex) or (isinstance(fill_value, Array) and fill_value.dtype.is_complex):
        return broadcast_to(scalar(complex(fill_value), dtype, device_of(device)), shape).__copy__()
    if isinstance(fill_value, int) and not isinstance(fill_value, builtins.bool) \
            and builtins.abs(fill_value) > 2 ** 53:
        return broadcast_to(scalar(fill_value, dtype, device_of(device)), shape).__copy__()
    return _wrap(call(lib.tf_full, device_of(device)._h, dtype.code, len(shape), int64_array(shape),
                      float(fill_value)))


def _like(maker):
    def like(x, /, *, dtype=None, device=None):
        return maker(x.shape, dtype=dtype or x.dtype, device=device or x.device)

    like.__name__ = maker.__name__ + "_like"
    return like


zeros_like = _export(_like(zeros))
ones_like = _export(_like(ones))
empty_like = _export(_like(empty))


@_export
def full_like(x, /, fill_value, *, dtype=None, device=None):
    return full(x.shape, fill_value, dtype=dtype or x.dtype, device=device or x.device)


@_export
def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = dt.default_int if builtins.all(
            isinstance(v, int) for v in (start, stop, step)) else dt.default_float
    dtype = dt.dtype_of(dtype)
    if step == 0:
        raise ValueError("tensorframe.arange: step is 0")
    exact = 1 << 53
    if not dtype.is_float and builtins.all(isinstance(v, int) for v in (start, stop, step)) and \
            builtins.any(builtins.abs(v) > exact for v in (start, stop, step)):
        # the library's arange takes doubles: past 2^53 an integer range is
        # start + i * step in int64, each term exact
        n = builtins.max(0, -((start - stop) // step))
        dev = device_of(device)
        index = _wrap(call(lib.tf_arange, dev._h, dt.int64.code, 0.0, float(n), 1.0))
        first = asarray(start, dtype=dt.int64, device=dev)
        return (first + index * asarray(step, dtype=dt.int64, device=dev)).astype(dtype, copy=False)
    return _wrap(call(lib.tf_arange, device_of(device)._h, dtype.code, float(start), float(stop), float(step)))


@_export
def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    n_cols = n_rows if n_cols is None else n_cols
    dtype = dt.dtype_of(dtype) if dtype is not None else dt.default_float
    dev = device_of(device)
    if k == 0:
        return _wrap(call(lib.tf_eye, dev._h, dtype.code, n_rows, n_cols))
    k = builtins.max(-n_rows - 1, builtins.min(k, n_cols + 1))   # past either edge: all zeros (k may pass int64)
    rows = arange(n_rows, dtype=dt.int64, device=dev)[:, None]
    cols = arange(n_cols, dtype=dt.int64, device=dev)[None, :]
    return ((rows + k) == cols).astype(dtype)


@_export
def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    """start + i * step, computed in double precision (NumPy's formula, the
    last value exactly `stop` with an endpoint) by the library on the CPU,
    so the count is checked before any work: a count no memory can hold is
    an error at once, not a Python list being built."""
    import operator
    num = operator.index(num)
    if num < 0:
        raise ValueError("tensorframe.linspace: num is negative")
    if isinstance(start, complex) or isinstance(stop, complex) or (dtype and dt.dtype_of(dtype).is_complex):
        cdt = dt.dtype_of(dtype) if dtype else dt.default_complex
        re = linspace(complex(start).real, complex(stop).real, num, dtype=dt.float64, endpoint=endpoint)
        im = linspace(complex(start).imag, complex(stop).imag, num, dtype=dt.float64, endpoint=endpoint)
        return _wrap(call(lib.tf_complex, re._h, im._h)).astype(cdt).to(device_of(device))
    dtype = dt.dtype_of(dtype) if dtype else dt.default_float
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    i = _wrap(call(lib.tf_arange, device_of("cpu")._h, dt.float64.code, 0.0, float(num), 1.0))
    values = i * float(step) + float(start)
    if endpoint and num > 1:
        values[num - 1] = float(stop)
    return values.astype(dtype).to(device_of(device))


@_export
def from_dlpack(x, /, *, device=None, copy=None):
    """An Array over the memory of anything with __dlpack__ (or a DLPack
    capsule): no copy for host memory, which tensorframe then holds until
    its last view is gone; BufferError when only a copy could do and
    copy=False, or when the producer's memory cannot be read here."""
    if isinstance(x, Array):
        out = x if not copy else _wrap(call(lib.tf_copy, x._h))
        return out.to(device) if device is not None else out
    if _dlpack.is_capsule(x):
        out = _wrap(_dlpack.consume(x, allow_copy=copy is not False))
    else:
        out = _wrap(_dlpack.consume(_request_capsule(x, copy), allow_copy=copy is not False))
        if copy:                                         # a legacy producer could not copy for us
            out = _wrap(call(lib.tf_copy, out._h))
    if device is not None:
        target = device_of(device)
        if target != out.device and copy is False:
            raise BufferError("tensorframe.from_dlpack: reaching %s needs a copy; copy=False forbids it" % target)
        out = out.to(target)
    return out


if _lib.native:                                       # the C layer answers a plain host import itself
    _lib.native["set_from_dlpack"](from_dlpack)
    from_dlpack = _lib.native["from_dlpack"]


_LEGACY_PRODUCERS = _dlpack.LEGACY_PRODUCERS


def _request_capsule(x, copy):
    dev_type, _ = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (_dlpack.kDLCPU, 0)
    on_host = dev_type in _dlpack.HOST_DEVICE_TYPES
    if not on_host and copy is False:
        raise BufferError("tensorframe.from_dlpack: the data is on device type %d, not host memory; "
                          "only a copy could bring it here and copy=False forbids it" % dev_type)
    kwargs = {"max_version": (1, 0)}
    if not on_host:
        kwargs.update(dl_device=(_dlpack.kDLCPU, 0), copy=True)
    elif copy is not None:
        kwargs["copy"] = copy
    if type(x) not in _LEGACY_PRODUCERS:
        try:
            return x.__dlpack__(**kwargs)
        except TypeError as err:                         # a producer from before DLPack 1.0
            if "unexpected keyword" in str(err):
                _LEGACY_PRODUCERS.add(type(x))
    if not on_host:
        raise BufferError("tensorframe.from_dlpack: the data is on device type %d and its producer cannot "
                          "copy it to the host (DLPack < 1.0); move it to the CPU first" % dev_type)
    return x.__dlpack__()


@_export
def tril(x, /, *, k=0):
    return _wrap(call(lib.tf_tril, x._h, k))


@_export
def triu(x, /, *, k=0):
    return _wrap(call(lib.tf_triu, x._h, k))


@_export
def meshgrid(*arrays, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("tensorframe.meshgrid: indexing is 'xy' or 'ij'")
    n = len(arrays)
    shape = [a.shape[0] for a in arrays]
    if indexing == "xy" and n >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and n >= 2 and i < 2:
            axis = 1 - i
        view_shape = [1] * n
        view_shape[axis] = a.shape[0]
        out.append(broadcast_to(reshape(a, tuple(view_shape)), tuple(shape)))
    return out


# ---- dtypes ----

@_export
def astype(x, dtype, /, *, copy=True, device=None):
    out = x.to(device) if device is not None else x
    return out.astype(dtype, copy=copy and out is x)


@_export
def result_type(*arrays_and_dtypes):
    out = None
    for a in arrays_and_dtypes:
        if isinstance(a, (builtins.bool, int, float, complex)):
            continue
        d = a.dtype if isinstance(a, Array) else dt.dtype_of(a)
        out = d if out is None else _promote(out, d)
    if out is None:
        raise ValueError("tensorframe.result_type: needs at least one array or dtype")
    return out


def _promote(a, b):
    code = ctypes.c_int()
    check(lib.tf_promote_types(a.code, b.code, ctypes.byref(code)))
    return dt.BY_CODE[code.value]


@_export
def can_cast(from_, to, /):
    src = from_.dtype if isinstance(from_, Array) else dt.dtype_of(from_)
    return _promote(src, dt.dtype_of(to)) == dt.dtype_of(to)


class finfo_object:
    def __init__(self, bits, eps, max, min, smallest_normal, dtype):
        self.bits, self.eps, self.max, self.min = bits, eps, max, min
        self.smallest_normal, self.dtype = smallest_normal, dtype


class iinfo_object:
    def __init__(self, bits, max, min, dtype):
        self.bits, self.max, self.min, self.dtype = bits, max, min, dtype


_FINFO = {
    "float32": (32, 2.0 ** -23, 3.4028234663852886e38, 2.0 ** -126),
    "float64": (64, 2.0 ** -52, 1.7976931348623157e308, 2.0 ** -1022),
    "float16": (16, 2.0 ** -10, 65504.0, 2.0 ** -14),
    "bfloat16": (16, 2.0 ** -7, 3.3895313892515355e38, 2.0 ** -126),
}


@_export
def finfo(type, /):
    d = type.dtype if isinstance(type, Array) else dt.dtype_of(type)
    d = dt.real_of(d)                        # a complex dtype's: its parts' (the standard's rule)
    if d.name not in _FINFO:
        raise TypeError("tensorframe.finfo: %s is not a floating dtype" % d.name)
    bits, eps, mx, tiny = _FINFO[d.name]
    return finfo_object(bits, eps, mx, -mx, tiny, d)


@_export
def iinfo(type, /):
    d = type.dtype if isinstance(type, Array) else dt.dtype_of(type)
    if not d.is_integer:
        raise TypeError("tensorframe.iinfo: %s is not an integer dtype" % d.name)
    bits = d.itemsize * 8
    if d.kind == "unsigned":
        return iinfo_object(bits, 2 ** bits - 1, 0, d)
    return iinfo_object(bits, 2 ** (bits - 1) - 1, -(2 ** (bits - 1)), d)


_KINDS = {
    "bool": lambda d: d.kind == "bool",
    "signed integer": lambda d: d.kind == "signed",
    "unsigned integer": lambda d: d.kind == "unsigned",
    "integral": lambda d: d.is_integer,
    "real floating": lambda d: d.is_float,
    "complex floating": lambda d: d.is_complex,
    "numeric": lambda d: d.is_integer or d.is_inexact,
}


@_export
def isdtype(dtype, kind):
    dtype = dt.dtype_of(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError("tensorframe.isdtype: unknown kind %r" % kind)
        return _KINDS[kind](dtype)
    return dtype == dt.dtype_of(kind)


# ---- elementwise ----

def _binary_fn(api_name, c_name):
    fn = getattr(lib, "tf_" + c_name)

    def f(x1, x2, /):
        a, b = _pair(x1, x2)
        _check_operand(b, api_name)
        return _wrap(call(fn, a._h, b._h))

    f.__name__ = api_name
    return _export(f)


add = _binary_fn("add", "add")
subtract = _binary_fn("subtract", "sub")
multiply = _binary_fn("multiply", "mul")
divide = _binary_fn("divide", "div")
maximum = _binary_fn("maximum", "maximum")
minimum = _binary_fn("minimum", "minimum")
pow = _binary_fn("pow", "pow")
equal = _binary_fn("equal", "eq")
not_equal = _binary_fn("not_equal", "ne")
less = _binary_fn("less", "lt")
less_equal = _binary_fn("less_equal", "le")
greater = _binary_fn("greater", "gt")
greater_equal = _binary_fn("greater_equal", "ge")
logical_and = _binary_fn("logical_and", "logical_and")
logical_or = _binary_fn("logical_or", "logical_or")
matmul = _binary_fn("matmul", "matmul")
outer = _binary_fn("outer", "outer")
swiglu = _binary_fn("swiglu", "swiglu")
atan2 = _binary_fn("atan2", "atan2")
copysign = _binary_fn("copysign", "copysign")
# the activations' gradients: (x, g) -> g times the derivative at x
gelu_grad = _binary_fn("gelu_grad", "gelu_grad")
gelu_tanh_grad = _binary_fn("gelu_tanh_grad", "gelu_tanh_grad")
silu_grad = _binary_fn("silu_grad", "silu_grad")
relu_grad = _binary_fn("relu_grad", "relu_grad")


def _unary_fn(api_name, c_name, integer_identity=False):
    fn = getattr(lib, "tf_" + c_name)

    def f(x, /):
        if integer_identity and (x.dtype.is_integer or x.dtype == dt.bool):
            return x
        return _wrap(call(fn, x._h))

    f.__name__ = api_name
    return _export(f)


# Every unary formula of the library under its own name (a new one appears
# here without an edit), but those the array API names otherwise
# (negative, absolute value and sign, below) and floor, ceil and round.
_OWN_PYTHON = ("neg", "abs", "sign", "floor", "ceil", "round")
for _name in _lib.MATH_UNARY + ("isnan", "isinf", "logical_not"):
    if _name not in _OWN_PYTHON:
        globals()[_name] = _unary_fn(_name, _name)
floor = _unary_fn("floor", "floor", integer_identity=True)
ceil = _unary_fn("ceil", "ceil", integer_identity=True)
round = _unary_fn("round", "round", integer_identity=True)


def _zero_like(x):
    return scalar(0, x.dtype, x.device)


@_export
def negative(x, /):
    if x.dtype.is_inexact:
        return _wrap(call(lib.tf_neg, x._h))
    if x.dtype == dt.bool:
        raise TypeError("tensorframe.negative: not defined for bool")
    return _zero_like(x) - x


@_export
def positive(x, /):
    return x


@_export
def abs(x, /):
    if x.dtype.is_inexact:                   # complex: the modulus, a real array
        return _wrap(call(lib.tf_abs, x._h))
    if x.dtype == dt.bool:
        raise TypeError("tensorframe.abs: not defined for bool")
    return where(x < 0, negative(x), x)


@_export
def sign(x, /):
    if x.dtype.is_complex:   # z / |z|, 0 at 0, NaN parts for NaN (the library's complex kernel)
        return _wrap(call(lib.tf_sign, x._h))
    if x.dtype.is_float:     # the library gives 0 for NaN (PyTorch's rule); the array API wants NaN
        return where(isnan(x), x, _wrap(call(lib.tf_sign, x._h)))
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


# real, imag and conj: the library's ops on complex arrays (real and imag
# give the parts' dtype); of real-valued arrays (2024.12 admits them) x
# itself, zeros, x itself.
def _part_fn(name, of_real):
    fn = getattr(lib, "tf_" + name)

    def f(x, /):
        if x.dtype.is_complex:
            return _wrap(call(fn, x._h))
        if x.dtype == dt.bool:
            raise TypeError("tensorframe.%s: takes a numeric array" % name)
        return of_real(x)

    f.__name__ = name
    return _export(f)


real = _part_fn("real", lambda x: x)
imag = _part_fn("imag", lambda x: zeros(x.shape, dtype=x.dtype, device=x.device))
conj = _part_fn("conj", lambda x: x)


def _times_i(z, sign):
    """z * i (sign 1) or z * -i (sign -1) exactly: the parts swapped and
    one negated, never a product (which would turn inf * 0 into NaN)."""
    re, im = real(z), imag(z)
    first, second = (negative(im), re) if sign > 0 else (im, negative(re))   # held across the call
    return _wrap(call(lib.tf_complex, first._h, second._h))


@_export
def signbit(x, /):
    """True where x's sign bit is set: negative values, -0.0, -inf and NaNs
    with the bit (the array API's signbit)."""
    if not x.dtype.is_float:
        raise TypeError("tensorframe.signbit: the input must have a real floating-point dtype")
    return copysign(scalar(1, x.dtype, x.device), x) < 0


@_export
def square(x, /):
    return x * x


@_export
def trunc(x, /):
    if not x.dtype.is_float:
        return x
    return where(x < 0, ceil(x), floor(x))


@_export
def isfinite(x, /):
    if not x.dtype.is_inexact:
        return ones(x.shape, dtype=dt.bool, device=x.device)
    return logical_not(logical_or(isnan(x), isinf(x)))


def _bitwise_fn(api_name, c_name, on_bools):
    """The library's bitwise op on integer arrays; on two bool arrays the
    logical op (the standard's bitwise functions take both)."""
    fn = getattr(lib, "tf_" + c_name)

    def f(x1, x2, /):
        a, b = _pair(x1, x2)
        _check_operand(b, api_name)
        if a.dtype == dt.bool and b.dtype == dt.bool and on_bools is not None:
            return on_bools(a, b)
        for x in (a, b):
            if not x.dtype.is_integer:
                raise TypeError("tensorframe.%s: takes integer%s arrays, not %s"
                                % (api_name, "" if on_bools is None else " or bool", x.dtype.name))
        return _wrap(call(fn, a._h, b._h))

    f.__name__ = api_name
    return _export(f)


bitwise_and = _bitwise_fn("bitwise_and", "bitwise_and", lambda a, b: logical_and(a, b))
bitwise_or = _bitwise_fn("bitwise_or", "bitwise_or", lambda a, b: logical_or(a, b))
bitwise_xor = _bitwise_fn("bitwise_xor", "bitwise_xor", lambda a, b: not_equal(a, b))
bitwise_left_shift = _bitwise_fn("bitwise_left_shift", "left_shift", None)
bitwise_right_shift = _bitwise_fn("bitwise_right_shift", "right_shift", None)


@_export
def bitwise_invert(x, /):
    """~x: logical not on bool arrays, xor with all ones on integer ones."""
    if x.dtype == dt.bool:
        return logical_not(x)
    if not x.dtype.is_integer:
        raise TypeError("tensorframe.bitwise_invert: takes integer or bool arrays, not %s" % x.dtype.name)
    return bitwise_xor(x, scalar(255 if x.dtype == dt.uint8 else -1, x.dtype, x.device))


@_export
def logical_xor(x1, x2, /):
    a, b = _pair(x1, x2)
    return not_equal(a.astype(dt.bool), b.astype(dt.bool))


@_export
def clip(x, /, min=None, max=None):
    if x.dtype.is_float and not isinstance(min, Array) and not isinstance(max, Array):
        return _wrap(call(lib.tf_clamp, x._h, float("nan") if min is None else float(min),
                          float("nan") if max is None else float(max)))
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out.astype(x.dtype, copy=False)


@_export
def log2(x, /):
    return log(x) * (1.0 / math.log(2.0))


@_export
def log10(x, /):
    return log(x) * (1.0 / math.log(10.0))


@_export
def logaddexp(x1, x2, /):
    """max + log1p(exp(-|x1 - x2|)); equal inputs (infinities included)
    give x + log 2 exactly as NumPy does."""
    a, b = _pair(x1, x2)
    hi = maximum(a, b)
    return where(a == b, a + math.log(2.0), hi + log1p(exp(negative(abs(a - b)))))


@_export
def sinh(x, /):
    if x.dtype.is_complex:                   # C's csinh(z) = -i csin(iz), special values included
        return _times_i(sin(_times_i(x, 1)), -1)
    return (expm1(x) - expm1(negative(x))) * 0.5


@_export
def cosh(x, /):
    if x.dtype.is_complex:                   # ccosh(z) = ccos(iz)
        return cos(_times_i(x, 1))
    return (exp(x) + exp(negative(x))) * 0.5


@_export
def tan(x, /):
    if x.dtype.is_complex:                   # ctan(z) = -i ctanh(iz): finite for large imaginary parts
        return _times_i(tanh(_times_i(x, 1)), -1)
    return sin(x) / cos(x)


@_export
def hypot(x1, x2, /):
    """m * sqrt((x1/m)^2 + (x2/m)^2) with m = max(|x1|, |x2|): no overflow
    for large inputs; inf when either is infinite, NaN beside it or not."""
    a, b = _pair(x1, x2)
    m = maximum(abs(a), abs(b))
    safe = where(m == 0, ones_like(m), m)
    scaled = where(m == 0, m, m * sqrt(square(a / safe) + square(b / safe)))
    return where(logical_or(isinf(a), isinf(b)), float("inf"), scaled)     # an infinity wins over NaN


def _as_f64(x):
    return x.astype(dt.float64) if x.dtype != dt.float64 else x


@_export
def floor_divide(x1, x2, /):
    a, b = _pair(x1, x2)
    _check_operand(b, "floor_divide")
    if a.dtype.is_float or b.dtype.is_float:
        return floor(a / b)
    out_dtype = result_type(a, b)
    return floor(_as_f64(a) / _as_f64(b)).astype(out_dtype)


@_export
def remainder(x1, x2, /):
    """x1 - floor(x1 / x2) * x2: the sign of x2, as Python's % (integers
    through float64, exact below 2**53)."""
    a, b = _pair(x1, x2)
    _check_operand(b, "remainder")
    if a.dtype.is_float or b.dtype.is_float:
        r = a - floor(a / b) * b
        # the standard's (and Python's) special cases: a finite x1 over an
        # infinite x2 is x1 when their signs agree, else x2 (the formula
        # gives NaN); a zero result has x2's sign
        infinite = isinf(b) & isfinite(a)
        r = where(infinite, where(signbit(a) == signbit(b), a, b), r)
        return where((r == 0) | ((a == 0) & infinite), copysign(zeros_like(r), b), r)
    out_dtype = result_type(a, b)
    fa, fb = _as_f64(a), _as_f64(b)
    return (fa - floor(fa / fb) * fb).astype(out_dtype)


@_export
def where(condition, x1, x2, /):
    if not isinstance(x1, Array) and not isinstance(x2, Array):
        x1 = asarray(x1, device=condition.device)
    a, b = _pair(x1, x2)
    return _wrap(call(lib.tf_where, condition._h, a._h, b._h))


@_export
def leaky_relu(x, /, negative_slope=0.01):
    return _wrap(call(lib.tf_leaky_relu, x._h, negative_slope))


# ---- reductions ----

def _axes(axis, ndim):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < builtins.max(ndim, 1):
            raise IndexError("tensorframe: axis %d is out of range for a %d-d array" % (a, ndim))
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError("tensorframe: repeated axis in %r" % (axis,))
    return tuple(sorted(out))


def _merge_axes_last(x, axes):
    """x with `axes` moved to the end and merged into one (a copy when the
    strides need it), for reductions that do not compose axis by axis."""
    rest = [i for i in range(x.ndim) if i not in axes]
    moved = permute_dims(x, tuple(rest) + tuple(axes))
    n = 1
    for a in axes:
        n *= x.shape[a]
    return reshape(moved, tuple(x.shape[i] for i in rest) + (n,)), rest


def _reduce(c_name, x, axis, keepdims, *extra, composes=True):
    """One library reduction over one axis or all of them; several axes
    reduce one after another where that is exact (sum, max, ...), else are
    merged into one first (mean, var: merging keeps one rounding path)."""
    fn = getattr(lib, "tf_" + c_name)
    axes = _axes(axis, x.ndim)
    if x.ndim == 0 or axes is None or len(axes) == x.ndim:
        return _apply(fn, x, ALL_AXES, keepdims, extra)
    if len(axes) == 0:
        return _apply(fn, reshape(x, x.shape + (1,)), x.ndim, False, extra)
    if len(axes) == 1:
        return _apply(fn, x, axes[0], keepdims, extra)
    if composes:
        out = x
        for a in reversed(axes):
            out = _apply(fn, out, a, True, extra)
        if not keepdims:
            out = reshape(out, tuple(s for i, s in enumerate(x.shape) if i not in axes))
        return out
    merged, _ = _merge_axes_last(x, axes)
    out = _apply(fn, merged, merged.ndim - 1, False, extra)
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
    return out


def _apply(fn, x, axis, keepdims, extra):
    if extra:
        return _wrap(call(fn, x._h, axis, *extra, keepdims))
    return _wrap(call(fn, x._h, axis, keepdims))


def _reduction(api_name, c_name):
    which = ("sum", "prod", "max", "min").index(c_name)
    fast = _lib.native["reduce"] if _lib.native else None

    def f(x, /, *, axis=None, keepdims=False, dtype=None):
        if fast is not None and dtype is None and (axis is None or type(axis) is int):
            out = fast(which, x, axis, keepdims)           # the C layer: one axis or all, as the library takes
            if out is not None:
                return out
        if dtype is not None:
            x = x.astype(dtype, copy=False)
        out = _reduce(c_name, x, axis, keepdims)
        # the library sums integers into int64: the dtype asked for is the result's
        return out if dtype is None or out.dtype == dt.dtype_of(dtype) else out.astype(dtype)

    f.__name__ = api_name
    return _export(f)


sum = _reduction("sum", "sum")
prod = _reduction("prod", "prod")
max = _reduction("max", "max")
min = _reduction("min", "min")


@_export
def mean(x, /, *, axis=None, keepdims=False):
    if not x.dtype.is_inexact:
        raise TypeError("tensorframe.mean: takes a floating-point array, not %s" % x.dtype.name)
    return _reduce("mean", x, axis, keepdims, composes=False)


def _variance(c_name):
    def f(x, /, *, axis=None, correction=0.0, keepdims=False):
        if not x.dtype.is_float:
            raise TypeError("tensorframe.%s: takes a floating-point array" % c_name)
        if correction < 0:
            raise ValueError("tensorframe.%s: correction must be >= 0, not %r" % (c_name, correction))
        if correction == int(correction):
            return _reduce(c_name, x, axis, keepdims, int(correction), composes=False)
        # A fractional correction: the library's divisor is N minus an
        # integer, so the variance of divisor N is rescaled by
        # N / (N - correction); a divisor <= 0 gives inf, or NaN where
        # there is no spread (0 x inf), as NumPy's.
        axes = _axes(axis, x.ndim)
        n = 1
        for a in (range(x.ndim) if axes is None else axes):
            n *= x.shape[a]
        factor = n / (n - correction) if n > correction else float("inf")
        v = _reduce("var", x, axis, keepdims, 0, composes=False) * factor
        return sqrt(v) if c_name == "std" else v

    f.__name__ = c_name
    return _export(f)


var = _variance("var")
std = _variance("std")


@_export
def logsumexp(x, /, *, axis=None, keepdims=False):
    return _reduce("logsumexp", x, axis, keepdims, composes=False)


def _arg(c_name):
    fn = getattr(lib, "tf_" + c_name)

    def f(x, /, *, axis=None, keepdims=False):
        if axis is None:
            flat = reshape(x, (-1,))
            out = _wrap(call(fn, flat._h, 0, False))
            return reshape(out, (1,) * x.ndim) if keepdims else out
        return _wrap(call(fn, x._h, axis, keepdims))

    f.__name__ = c_name
    return _export(f)


argmax = _arg("argmax")
argmin = _arg("argmin")


def _truth(x, axis, keepdims, c_name, when_empty):
    """all and any: the min or max of x as bool; an empty reduction gives
    the identity (True for all, False for any)."""
    b = x.astype(dt.bool, copy=False)
    if b.size == 0:
        return _empty_reduction(b, axis, keepdims, when_empty)
    return _reduce(c_name, b, axis, keepdims)


@_export
def all(x, /, *, axis=None, keepdims=False):
    return _truth(x, axis, keepdims, "min", True)


@_export
def any(x, /, *, axis=None, keepdims=False):
    return _truth(x, axis, keepdims, "max", False)


def _empty_reduction(b, axis, keepdims, value):
    axes = _axes(axis, b.ndim) or tuple(range(b.ndim))
    shape = tuple(1 if i in axes else s for i, s in enumerate(b.shape) if keepdims or i not in axes)
    return full(shape, value, dtype=dt.bool, device=b.device)


@_export
def count_nonzero(x, /, *, axis=None, keepdims=False):
    return sum(x.astype(dt.bool, copy=False), axis=axis, keepdims=keepdims)


@_export
def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    if axis is None:
        if x.ndim > 1:
            raise ValueError("tensorframe.cumulative_sum: axis is required for a %d-d array" % x.ndim)
        axis = 0
    if dtype is not None:
        x = x.astype(dtype, copy=False)
    if x.dtype.is_complex:                   # the parts' running sums: the same additions
        re, im = cumulative_sum(real(x), axis=axis), cumulative_sum(imag(x), axis=axis)    # held across the call
        out = _wrap(call(lib.tf_complex, re._h, im._h))
    else:
        out = _wrap(call(lib.tf_cumsum, x._h, axis))
    if dtype is not None and out.dtype != dt.dtype_of(dtype):
        out = out.astype(dtype)                  # integers accumulate in int64
    if include_initial:
        shape = list(out.shape)
        shape[axis] = 1
        out = concat([zeros(tuple(shape), dtype=out.dtype, device=out.device), out], axis=axis)
    return out


def _along(ndim, axis, index):
    """A key that indexes `axis` with `index` and takes every other axis whole."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


@_export
def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running products (2024.12) by doubling: log2(n) whole-array
    multiplications of shifted views, on the device; integers multiply in
    int64 as cumulative_sum adds (wrapping, so exact in any order), floats
    round in that order rather than left to right."""
    if axis is None:
        if x.ndim > 1:
            raise ValueError("tensorframe.cumulative_prod: axis is required for a %d-d array" % x.ndim)
        axis = 0
    if dtype is not None:
        x = x.astype(dtype, copy=False)
    elif not x.dtype.is_inexact:
        x = x.astype(dt.int64, copy=False)
    if x.ndim == 0:
        out = x.astype(x.dtype)
        return out if dtype is None or out.dtype == dt.dtype_of(dtype) else out.astype(dtype)
    ax = _axes(axis, x.ndim)[0]
    n = x.shape[ax]
    out = x.astype(x.dtype)                       # a copy: the steps below replace it
    shift = 1
    while shift < n:
        moved = out[_along(x.ndim, ax, slice(shift, None))] * out[_along(x.ndim, ax, slice(0, n - shift))]
        out = concat([out[_along(x.ndim, ax, slice(0, shift))], moved], axis=ax)
        shift *= 2
    if dtype is not None and out.dtype != dt.dtype_of(dtype):
        out = out.astype(dtype)
    if include_initial:
        shape = list(out.shape)
        shape[ax] = 1
        out = concat([ones(tuple(shape), dtype=out.dtype, device=out.device), out], axis=ax)
    return out


@_export
def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    """n-th differences along axis (2024.12): x[1:] - x[:-1], n times, after
    prepend and append are joined on; bools give where neighbours differ."""
    if n < 0:
        raise ValueError("tensorframe.diff: n must be >= 0, not %d" % n)
    if x.ndim == 0:
        raise ValueError("tensorframe.diff: not defined for 0-d arrays")
    ax = _axes(axis, x.ndim)[0]
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat(parts, axis=ax)
    for _ in range(n):
        m = x.shape[ax]
        hi, lo = x[_along(x.ndim, ax, slice(1, None))], x[_along(x.ndim, ax, slice(0, builtins.max(m - 1, 0)))]
        x = not_equal(hi, lo) if x.dtype == dt.bool else hi - lo
    return x


@_export
def reciprocal(x, /):
    """1 / x (2024.12), rounded once."""
    return divide(ones_like(x), x)


@_export
def take_along_axis(x, indices, /, *, axis=-1):
    """x's elements at `indices` along axis (2024.12; NumPy's
    take_along_axis): the other axes broadcast together, negative indices
    count from the end; the library's gather."""
    if x.ndim != indices.ndim:
        raise ValueError("tensorframe.take_along_axis: x and indices need the same number of axes (%d and %d)"
                         % (x.ndim, indices.ndim))
    if not indices.dtype.is_integer:
        raise IndexError("tensorframe.take_along_axis: indices must be integers, not %s" % indices.dtype.name)
    ax = _axes(axis, x.ndim)[0]
    shape = []
    for i, (p, q) in enumerate(zip(x.shape, indices.shape)):
        if i != ax and p != q and 1 not in (p, q):
            raise ValueError("tensorframe.take_along_axis: shapes %s and %s do not broadcast off axis %d"
                             % (x.shape, indices.shape, ax))
        shape.append(builtins.max(p, q) if p and q else 0)
    xs, ids = list(shape), list(shape)
    xs[ax], ids[ax] = x.shape[ax], indices.shape[ax]
    n = x.shape[ax]
    indices = indices.astype(dt.int64, copy=False)
    if n > 0:
        indices = where(indices < 0, indices + n, indices)
    wide_x, wide_indices = broadcast_to(x, tuple(xs)), broadcast_to(indices, tuple(ids))   # held through the call
    return _wrap(call(lib.tf_gather, wide_x._h, ax, wide_indices._h))


@_export
def nextafter(x1, x2, /):
    """The next float after x1 toward x2 (2024.12): x1's bits, read as an
    integer of its size (tf_view_dtype), stepped by one toward x2; zero
    steps to the smallest subnormal with x2's sign; equal inputs give x2
    (so -0 toward +0 is +0), NaN gives NaN. float32 and float64 (the
    standard's real floating dtypes)."""
    a, b = _pair(x1, x2)
    _check_operand(b, "nextafter")
    if a.dtype != b.dtype:
        target = result_type(a, b)
        a, b = a.astype(target, copy=False), b.astype(target, copy=False)
    bits = {"float32": dt.int32, "float64": dt.int64}.get(a.dtype.name)
    if bits is None:
        raise TypeError("tensorframe.nextafter: takes float32 or float64 arrays, not %s" % a.dtype.name)
    a, b = broadcast_arrays(a, b)
    a = a.astype(a.dtype)                                 # contiguous, its own bytes: viewed below
    as_int = _wrap(call(lib.tf_view_dtype, a._h, bits.code))
    up = (b > a) == (a > 0)                               # away from zero when moving outward
    stepped = as_int + where(up, ones_like(as_int), -ones_like(as_int))
    moved = _wrap(call(lib.tf_view_dtype, stepped._h, a.dtype.code))
    tiny = copysign(full_like(a, 5e-324 if a.dtype.name == "float64" else 1.401298464324817e-45), b)
    out = where(a == 0, tiny, moved)
    out = where(a == b, b, out)
    return where(isnan(a) | isnan(b), full_like(a, math.nan), out)


# ---- linear algebra ----

@_export
def matrix_transpose(x, /):
    return x.mT


@_export
def vecdot(x1, x2, /, *, axis=-1):
    n1, n2 = x1.shape[axis], x2.shape[axis]
    if n1 != n2:                                 # the axis is not broadcast (the standard's rule)
        raise ValueError("tensorframe.vecdot: the vectors have %d and %d elements along axis %d" % (n1, n2, axis))
    products = (conj(x1) if x1.dtype.is_complex else x1) * x2     # the standard's vecdot conjugates x1
    return sum(products, axis=axis, dtype=products.dtype)    # integers keep their dtype (the library sums in int64)


@_export
def tensordot(x1, x2, /, *, axes=2):
    if isinstance(axes, int):
        a_axes = tuple(range(x1.ndim - axes, x1.ndim))
        b_axes = tuple(range(axes))
    else:
        a_axes, b_axes = (tuple(ax % x1.ndim for ax in axes[0]), tuple(ax % x2.ndim for ax in axes[1]))
    a_rest = [i for i in range(x1.ndim) if i not in a_axes]
    b_rest = [i for i in range(x2.ndim) if i not in b_axes]
    k = m = n = 1
    for ax in a_axes:
        k *= x1.shape[ax]
    for ax in a_rest:
        m *= x1.shape[ax]
    for ax in b_rest:
        n *= x2.shape[ax]
    a = reshape(permute_dims(x1, tuple(a_rest) + a_axes), (m, k))     # sizes given: -1 is ambiguous at k = 0
    b = reshape(permute_dims(x2, b_axes + tuple(b_rest)), (k, n))
    return reshape(matmul(a, b), tuple(x1.shape[i] for i in a_rest) + tuple(x2.shape[i] for i in b_rest))


@_export
def gemm(a, b, c=None, /, *, alpha=1.0, beta=0.0, transpose_a=False, transpose_b=False):
    return _wrap(call(lib.tf_gemm, a._h, b._h, c._h if c is not None else None, alpha, beta, transpose_a,
                      transpose_b))


# ---- manipulation ----

@_export
def reshape(x, /, shape, *, copy=None):
    shape = _shape_tuple(shape)
    out = _wrap(call(lib.tf_reshape, x._h, len(shape), int64_array(shape)))
    if copy:
        out = _wrap(call(lib.tf_copy, out._h))
    return out


@_export
def permute_dims(x, /, axes):
    return _wrap(call(lib.tf_permute, x._h, int_array(axes)))


@_export
def moveaxis(x, source, destination, /):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [s % x.ndim for s in src]
    dst = [d % x.ndim for d in dst]
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


@_export
def expand_dims(x, /, axis=0):
    return _wrap(call(lib.tf_unsqueeze, x._h, axis))


@_export
def squeeze(x, /, axis):
    axes = _axes(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError("tensorframe.squeeze: axis %d has size %d, not 1" % (a, x.shape[a]))
    out = x
    for a in reversed(axes):
        out = _wrap(call(lib.tf_squeeze, out._h, a))
    return out


@_export
def broadcast_to(x, /, shape):
    shape = _shape_tuple(shape)
    return _wrap(call(lib.tf_expand, x._h, len(shape), int64_array(shape)))


@_export
def broadcast_arrays(*arrays):
    shape = []
    for a in arrays:
        s = list(a.shape)
        n = builtins.max(len(shape), len(s))
        shape = [1] * (n - len(shape)) + shape
        s = [1] * (n - len(s)) + s
        for i in range(n):
            if shape[i] != s[i] and 1 not in (shape[i], s[i]):
                raise ValueError("tensorframe.broadcast_arrays: shapes %s do not broadcast"
                                 % [a.shape for a in arrays])
            shape[i] = builtins.max(shape[i], s[i]) if 0 not in (shape[i], s[i]) else 0
    return [broadcast_to(a, tuple(shape)) for a in arrays]


def _handles(arrays):
    arrays = list(arrays)
    if builtins.any(not isinstance(a, Array) or not a._h for a in arrays):
        raise ValueError("tensorframe: concat and stack take live Arrays (one is released or not an Array)")
    return arrays, (ctypes.c_void_p * builtins.max(1, len(arrays)))(*[a._h for a in arrays])


@_export
def concat(arrays, /, *, axis=0):
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [reshape(a, (-1,)) for a in arrays], 0
    keep, hs = _handles(arrays)
    return _wrap(call(lib.tf_concat, len(keep), hs, axis))


@_export
def stack(arrays, /, *, axis=0):
    keep, hs = _handles(arrays)
    return _wrap(call(lib.tf_stack, len(keep), hs, axis))


@_export
def unstack(x, /, *, axis=0):
    return tuple(x[(slice(None),) * (axis % x.ndim) + (i,)] for i in range(x.shape[axis]))


@_export
def flip(x, /, *, axis=None):
    axes = tuple(range(x.ndim)) if axis is None else _axes(axis, x.ndim)
    return _wrap(call(lib.tf_flip, x._h, len(axes), int_array(axes)))


@_export
def roll(x, /, shift, *, axis=None):
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = x
    for s, a in zip(shifts, axes):
        n = out.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            idx = (slice(None),) * (a % out.ndim)
            out = concat([out[idx + (slice(n - s, n),)], out[idx + (slice(0, n - s),)]], axis=a)
    return out


@_export
def tile(x, repetitions, /):
    reps = _shape_tuple(repetitions)
    return _wrap(call(lib.tf_tile, x._h, len(reps), int64_array(reps)))


@_export
def repeat(x, repeats, /, *, axis=None):
    """Each element along `axis` `repeats` times (an int, or one count per
    element). The output's size is checked by the library before an index
    is built: a count no memory can hold fails at once."""
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = _axes(axis, x.ndim)[0]
    n = x.shape[axis]
    counts = [repeats] * n if isinstance(repeats, int) else list(repeats.tolist() if isinstance(repeats, Array)
                                                                 else repeats)
    if len(counts) == 1 and n != 1:
        counts = counts * n                      # one count broadcasts over the axis (the empty one too)
    if len(counts) != n:
        raise ValueError("tensorframe.repeat: %d repeats for an axis of %d" % (len(counts), n))
    if builtins.any(c < 0 for c in counts):
        raise ValueError("tensorframe.repeat: repeats must be >= 0, not %d" % builtins.min(counts))
    shape = list(x.shape)
    shape[axis] = builtins.sum(counts)
    empty(tuple(shape), dtype=x.dtype, device=x.device)   # the size, checked where the memory is
    positions = [i for i, c in enumerate(counts) for _ in range(c)]
    idx = _from_values(positions, [len(positions)], dt.int64, x.device)
    return _wrap(call(lib.tf_index_select, x._h, axis, idx._h))


@_export
def take(x, indices, /, *, axis=None):
    if axis is None:
        if x.ndim != 1:
            raise ValueError("tensorframe.take: axis is required for a %d-d array" % x.ndim)
        axis = 0
    n = x.shape[_axes(axis, x.ndim)[0]]
    if n > 0 and indices.dtype.kind == "signed":
        # negative indices count from the end (on the device); in int64, where
        # n fits whatever the indices' dtype (int8 indices into 200 elements)
        indices = indices.astype(dt.int64, copy=False)
        indices = where(indices < 0, indices + n, indices)
    return _wrap(call(lib.tf_index_select, x._h, axis, indices._h))


# ---- searching ----

@_export
def nonzero(x, /):
    """The indices of the nonzero elements, one array per axis (found on
    the host: the output's size depends on the data)."""
    if x.ndim == 0:
        raise ValueError("tensorframe.nonzero: not defined for 0-d arrays")
    flags = x.astype(dt.bool, copy=False)._host_values()
    shape = x.shape
    found = [i for i, f in enumerate(flags) if f]
    per_axis = [[] for _ in shape]
    for flat in found:
        for a in range(len(shape) - 1, -1, -1):
            per_axis[a].append(flat % shape[a])
            flat //= shape[a]
    return tuple(_from_values(v, [len(v)], dt.int64, x.device) for v in per_axis)


# ---- sorting and sets ----

@_export
def sort(x, /, *, axis=-1, descending=False, stable=True):
    """Sorted along axis: stable always (stable=False permits it), NaN last
    (first when descending), on the array's device."""
    return _wrap(call(lib.tf_sort, x._h, axis, bool(descending)))


@_export
def argsort(x, /, *, axis=-1, descending=False, stable=True):
    return _wrap(call(lib.tf_argsort, x._h, axis, bool(descending)))


@_export
def searchsorted(x1, x2, /, *, side="left", sorter=None):
    if side not in ("left", "right"):
        raise ValueError("tensorframe.searchsorted: side is 'left' or 'right', not %r" % (side,))
    if x1.ndim != 1:
        raise ValueError("tensorframe.searchsorted: x1 must be 1-d (got %d-d)" % x1.ndim)
    if sorter is not None:
        x1 = take(x1, sorter)
    return _wrap(call(lib.tf_searchsorted, x1._h, x2._h, side == "right"))


UniqueAllResult = namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _unique_parts(x):
    """x's elements sorted (stably, on the device), where each run of equal
    values starts, and the permutation that sorted them. NaNs are never
    equal, so each is its own value (the standard's rule); -0.0 equals 0.0."""
    flat = reshape(x, (-1,))
    if flat.dtype.is_complex:     # NumPy's order: by real part, ties by imaginary (two stable sorts)
        by_imag = argsort(imag(flat))
        order = take(by_imag, argsort(take(real(flat), by_imag)))
    else:
        order = argsort(flat)
    ordered = take(flat, order)
    n = flat.shape[0]
    starts = ones((n,), dtype=dt.bool, device=x.device)
    if n > 1:
        starts[1:] = ordered[1:] != ordered[:-1]
    return ordered, starts, order


def _unique_counts_of(first, n, device):
    ends = concat([first[1:], asarray([n], dtype=dt.int64, device=device)]) if first.shape[0] else first
    return ends - first


@_export
def unique_values(x, /):
    ordered, starts, _ = _unique_parts(x)
    return ordered[starts]


@_export
def unique_counts(x, /):
    ordered, starts, _ = _unique_parts(x)
    first = nonzero(starts)[0]
    return UniqueCountsResult(ordered[starts], _unique_counts_of(first, ordered.shape[0], x.device))


def _inverse_of(starts, order, shape):
    """For each element of x, the position of its value among the unique
    values: the running count of starts, put back in x's order."""
    group = cumulative_sum(starts.astype(dt.int64), axis=0) - 1
    return reshape(take(group, argsort(order)), shape)


@_export
def unique_inverse(x, /):
    ordered, starts, order = _unique_parts(x)
    return UniqueInverseResult(ordered[starts], _inverse_of(starts, order, x.shape))


@_export
def unique_all(x, /):
    ordered, starts, order = _unique_parts(x)
    first = nonzero(starts)[0]
    return UniqueAllResult(ordered[starts], take(order, first), _inverse_of(starts, order, x.shape),
                           _unique_counts_of(first, ordered.shape[0], x.device))


# ---- nn (the op table beyond the array API) ----

@_export
def softmax(x, /, *, axis=-1):
    return _wrap(call(lib.tf_softmax, x._h, axis))


@_export
def log_softmax(x, /, *, axis=-1):
    return _wrap(call(lib.tf_log_softmax, x._h, axis))


@_export
def rmsnorm(x, weight, /, *, eps=1e-6):
    return _wrap(call(lib.tf_rmsnorm, x._h, weight._h if weight is not None else None, eps))


@_export
def layernorm(x, weight=None, bias=None, /, *, eps=1e-5):
    return _wrap(call(lib.tf_layernorm, x._h, weight._h if weight is not None else None,
                      bias._h if bias is not None else None, eps))


@_export
def add_rmsnorm(x, residual, weight=None, /, *, eps=1e-6):
    """rmsnorm(x + residual) in one pass where the device has it (the sum
    rounded to x's dtype first, as add then rmsnorm give)."""
    return _wrap(call(lib.tf_add_rmsnorm, x._h, residual._h, weight._h if weight is not None else None, eps))


@_export
def add_layernorm(x, residual, weight=None, bias=None, /, *, eps=1e-5):
    """layernorm(x + residual) in one pass where the device has it."""
    return _wrap(call(lib.tf_add_layernorm, x._h, residual._h, weight._h if weight is not None else None,
                      bias._h if bias is not None else None, eps))


@_export
def linear(x, w, bias=None, /):
    return _wrap(call(lib.tf_linear, x._h, w._h, bias._h if bias is not None else None))


@_export
def linear_fused(x, w, bias=None, /, *, activation=None, residual=None):
    """activation(x @ w^T + bias) + residual in one kernel where the device
    has it (tf_linear_fused): activation is None or the name of a unary op
    without parameters ("gelu", "gelu_tanh", "silu", "relu", ...)."""
    code = -1
    if activation is not None:
        names = {lib.tf_op_name(op).decode(): op for op in range(lib.tf_op_count())}
        if activation not in names:
            raise ValueError(f"linear_fused: no op named {activation!r}")
        code = names[activation]
    return _wrap(call(lib.tf_linear_fused, x._h, w._h, bias._h if bias is not None else None, code,
                      residual._h if residual is not None else None))


@_export
def sdpa(q, k, v, /, *, mask=None, scale=None, causal=False, q_offset=0):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _wrap(call(lib.tf_sdpa, q._h, k._h, v._h, mask._h if mask is not None else None, scale, causal,
                      q_offset))


@_export
def rope(x, positions, /, *, seq_axis=-2, rotary_dims=None, theta=10000.0, half_split=True):
    dims = x.shape[-1] if rotary_dims is None else rotary_dims
    return _wrap(call(lib.tf_rope, x._h, positions._h, seq_axis, dims, theta, 1 if half_split else 0))


@_export
def embedding(weight, ids, /):
    return _wrap(call(lib.tf_embedding, weight._h, ids._h))


def _int_pair(v, name):
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2:
        raise ValueError("tensorframe: %s is an int or a pair, not %r" % (name, v))
    return int64_array(pair)


@_export
def conv2d(x, weight, bias=None, /, *, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's F.conv2d: x [N, C, H, W], weight [O, C/groups, kh, kw]."""
    return _wrap(call(lib.tf_conv2d, x._h, weight._h, bias._h if bias is not None else None, _int_pair(stride, "stride"),
                      _int_pair(padding, "padding"), _int_pair(dilation, "dilation"), groups))


@_export
def max_pool2d(x, kernel_size, /, *, stride=None, padding=0, dilation=1):
    stride = kernel_size if stride is None else stride
    return _wrap(call(lib.tf_maxpool2d, x._h, _int_pair(kernel_size, "kernel_size"), _int_pair(stride, "stride"),
                      _int_pair(padding, "padding"), _int_pair(dilation, "dilation")))


@_export
def avg_pool2d(x, kernel_size, /, *, stride=None, padding=0, count_include_pad=True):
    stride = kernel_size if stride is None else stride
    return _wrap(call(lib.tf_avgpool2d, x._h, _int_pair(kernel_size, "kernel_size"), _int_pair(stride, "stride"),
                      _int_pair(padding, "padding"), bool(count_include_pad)))


@_export
def cross_entropy(logits, target, /, *, ignore_index=-100, reduction="mean"):
    """PyTorch's F.cross_entropy over class indices (logits [N, C, ...])."""
    codes = {"mean": 0, "sum": 1, "none": 2}
    if reduction not in codes:
        raise ValueError("tensorframe: reduction is 'mean', 'sum' or 'none', not %r" % (reduction,))
    return _wrap(call(lib.tf_cross_entropy, logits._h, target._h, ignore_index, codes[reduction]))


@_export
def norm(x, /, *, ord=2.0, axis=None, keepdims=False):
    return _wrap(call(lib.tf_norm, x._h, float(ord), ALL_AXES if axis is None else axis, keepdims))


@_export
def rand(shape, *, seed=0, dtype=None, device=None):
    shape = _shape_tuple(shape)
    d = dt.dtype_of(dtype) if dtype is not None else dt.default_float
    return _wrap(call(lib.tf_rand, device_of(device)._h, d.code, len(shape), int64_array(shape), seed))


@_export
def randn(shape, *, seed=0, dtype=None, device=None):
    shape = _shape_tuple(shape)
    d = dt.dtype_of(dtype) if dtype is not None else dt.default_float
    return _wrap(call(lib.tf_randn, device_of(device)._h, d.code, len(shape), int64_array(shape), seed))


def _copy_method(self):
    return _wrap(call(lib.tf_copy, self._h))


Array.__copy__ = _copy_method
Array.copy = _copy_method
for _name in ("sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "all", "any"):
    setattr(Array, _name, globals()[_name])
Array.reshape = reshape
