"""The array type: a tf_tensor handle with Python's operators, indexing as
views, device moves and DLPack."""
import array as _pyarray
import builtins
import ctypes
import math
import operator

from . import _dlpack
from . import _dtypes as dt
from ._lib import call, check, int64_array, int_array, lib, native as _native

ALL_AXES = -1000          # TF_ALL_AXES


# ---- devices ----

class Device:
    """A device tensorframe found ("cpu", "opencl:0", "cuda:0", ...)."""
    __slots__ = ("_h", "name")

    def __init__(self, handle):
        self._h = handle
        self.name = lib.tf_device_name(handle).decode()

    def __repr__(self):
        return "Device(%r)" % self.name

    def __str__(self):
        return self.name

    def __eq__(self, other):
        if isinstance(other, str):
            other = _DEVICES.get(other) or _maybe_device(other)
        return isinstance(other, Device) and other._h == self._h

    def __hash__(self):
        return hash(self.name)

    @property
    def backend(self):
        return self.name.split(":")[0]

    @property
    def is_host(self):
        return self.backend == "cpu"

    def synchronize(self):
        check(lib.tf_device_synchronize(self._h))

    def memory_stats(self):
        from ._lib import MemoryStats
        stats = MemoryStats()
        check(lib.tf_device_memory_stats(self._h, ctypes.byref(stats)))
        return {name: getattr(stats, name) for name, _ in MemoryStats._fields_}


_DEVICES = {}
_default_device_spec = ["auto"]


def _maybe_device(spec):
    try:
        return device_of(spec)
    except Exception:
        return None


def device_of(spec):
    """A Device from None (the default: "auto", the best device by
    priority, or what set_default_device chose), a Device or a spec."""
    if isinstance(spec, Device):
        return spec
    if spec is None:
        spec = _default_device_spec[0]
    if not isinstance(spec, str):
        raise TypeError("tensorframe: a device is a Device or a spec such as 'cpu' or 'opencl:0', not %s"
                        % type(spec).__name__)
    found = _DEVICES.get(spec)
    if found is None:
        handle = ctypes.c_void_p()
        check(lib.tf_device_get(spec.encode(), ctypes.byref(handle)))
        found = Device(handle.value)
        _DEVICES[spec] = found
    return found


def devices():
    """Every device present, in the library's order."""
    return [Device(lib.tf_device_at(i)) for i in range(lib.tf_device_count())]


# ---- host values ----

def _shape_of_nested(obj):
    shape = []
    while isinstance(obj, (list, tuple)):
        shape.append(len(obj))
        if not obj:
            break
        obj = obj[0]
    return shape


def _flatten(obj, shape, depth, out):
    if depth == len(shape):
        if isinstance(obj, (list, tuple)):
            raise ValueError("tensorframe.asarray: ragged nested sequence")
        if isinstance(obj, Array) and obj.ndim == 0:     # its Python value, exact (int64 past 2^53 too)
            obj = obj._scalar_value("value")
        out.append(obj)
        return
    if not isinstance(obj, (list, tuple)) or len(obj) != shape[depth]:
        raise ValueError("tensorframe.asarray: ragged nested sequence")
    for item in obj:
        _flatten(item, shape, depth + 1, out)


def _infer_dtype(values):
    if values and builtins.all(isinstance(v, builtins.bool) for v in values):
        return dt.bool
    if builtins.all(isinstance(v, (builtins.bool, int)) for v in values):
        return dt.default_int if values else dt.default_float
    if builtins.any(isinstance(v, complex) for v in values):
        return dt.default_complex
    return dt.default_float


def _from_values(values, shape, dtype, device):
    """A tensor of `dtype` on `device` from flat Python scalars: packed as
    f64, i64 or bool on the host, then cast by the library."""
    if dtype.kind == "bool":
        host_dtype, packed = dt.bool, bytes(1 if v else 0 for v in values)
    elif dtype.is_complex or builtins.any(isinstance(v, complex) for v in values):
        if not dtype.is_complex:
            raise TypeError("tensorframe: a complex value cannot be stored in a %s array" % dtype.name)
        parts = []
        for v in values:
            z = complex(v)
            parts += (z.real, z.imag)
        host_dtype, packed = dt.complex128, _pyarray.array("d", parts)
    elif dtype.is_integer and builtins.all(isinstance(v, int) for v in values):
        for v in values:
            dt.check_int_fits(v, dtype)
        host_dtype, packed = dt.int64, _pyarray.array("q", values)
    else:
        host_dtype, packed = dt.float64, _pyarray.array("d", [float(v) for v in values])
    buf = (ctypes.c_char * builtins.max(1, len(packed) * (packed.itemsize if hasattr(packed, "itemsize") else 1)))
    data = buf.from_buffer_copy(bytes(packed) or b"\0")
    h = call(lib.tf_tensor_from_data, device._h, host_dtype.code, len(shape), int64_array(shape), data)
    t = Array._wrap(h)
    return t if host_dtype == dtype else t.astype(dtype)


def _format(values, shape, dtype, indent=0):
    """NumPy's layout: rows on lines of their own, a blank line between
    blocks of higher dimensions, `indent` columns before nested rows."""
    def one_real(v):
        if not math.isfinite(v):
            return repr(float(v))
        return "%d." % int(v) if v == int(v) and abs(v) < 1e16 else "%.6g" % v

    def one(v):
        if dtype.kind == "bool":
            return "True" if v else "False"
        if dtype.is_complex:                     # NumPy's 1.+2.j
            im = one_real(v.imag)
            return "%s%s%sj" % (one_real(v.real), "" if im.startswith("-") else "+", im)
        if dtype.is_float:
            if not math.isfinite(v):
                return repr(float(v))
            return "%d." % int(v) if v == int(v) and abs(v) < 1e16 else "%.6g" % v
        return str(v)

    def rec(offset, depth):
        if depth == len(shape):
            return one(values[offset]), offset + 1
        parts = []
        for _ in range(shape[depth]):
            text, offset = rec(offset, depth + 1)
            parts.append(text)
        if depth == len(shape) - 1:
            sep = ", "
        else:
            sep = "," + "\n" * (len(shape) - depth - 1) + " " * (indent + depth + 1)
        return "[" + sep.join(parts) + "]", offset

    return rec(0, 0)[0]


# ---- the array ----

def standard_pair(a, b):
    """Two arrays as the array API promotes them: a 0-d array like any
    other (only Python scalars are weak). The C library follows PyTorch
    and casts a 0-d operand down to the other's dtype (int32 300 with int8
    [1] gives int8 [45]), so where exactly one is 0-d and the dtypes differ
    both are cast to the promoted dtype first."""
    if a.dtype == b.dtype or (a.ndim == 0) == (b.ndim == 0):
        return a, b
    code = ctypes.c_int()
    check(lib.tf_promote_types(a.dtype.code, b.dtype.code, ctypes.byref(code)))
    target = dt.BY_CODE[code.value]
    return (a if a.dtype == target else a.astype(target)), (b if b.dtype == target else b.astype(target))


def _binary(name):
    fn = getattr(lib, "tf_" + name)

    def op(self, other):
        was_array = isinstance(other, Array)
        other = self._operand(other)
        if other is NotImplemented:
            return NotImplemented
        a, b = standard_pair(self, other) if was_array else (self, other)
        return Array._wrap(call(fn, a._h, b._h))

    def rop(self, other):
        other = self._operand(other)
        if other is NotImplemented:
            return NotImplemented
        return Array._wrap(call(fn, other._h, self._h))

    return op, rop


class Array(_native["ArrayBase"] if _native else object):
    """A tensorframe tensor. Operators follow NumPy broadcasting and the
    library's dtype promotion; basic indexing gives views.

    With the C hot path (_native: python/csrc/native.c) the handle lives in
    its ArrayBase, which also answers + - * /, basic indexing, ndim, shape,
    size and dtype; the Python definitions below are then the general cases
    it hands over (see _use_native)."""
    __slots__ = ("__weakref__",) if _native else ("_h", "__weakref__")
    __array_priority__ = 100      # NumPy defers mixed operators to us

    def __init__(self, *args, **kwargs):
        raise TypeError("tensorframe.Array is made by tensorframe.asarray, zeros, ones, ... not directly")

    @classmethod
    def _wrap(cls, handle):
        self = object.__new__(cls)
        self._h = handle
        return self

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._h = None
            self.__class__ = _Released      # any later use says so, at no cost to live arrays
            lib.tf_tensor_release(h)

    # -- attributes --
    @property
    def dtype(self):
        return dt.BY_CODE[lib.tf_tensor_dtype(self._h)]

    @property
    def device(self):
        handle = lib.tf_tensor_device(self._h)
        for d in _DEVICES.values():
            if d._h == handle:
                return d
        d = Device(handle)
        _DEVICES[d.name] = d
        return d

    @property
    def ndim(self):
        return lib.tf_tensor_ndim(self._h)

    @property
    def shape(self):
        n = lib.tf_tensor_ndim(self._h)
        p = lib.tf_tensor_shape(self._h)
        return tuple(p[i] for i in range(n))

    @property
    def strides(self):
        """In elements, as the library keeps them."""
        n = lib.tf_tensor_ndim(self._h)
        p = lib.tf_tensor_strides(self._h)
        return tuple(p[i] for i in range(n))

    @property
    def size(self):
        return lib.tf_tensor_numel(self._h)

    @property
    def T(self):
        if self.ndim != 2:
            raise ValueError("tensorframe: .T is for 2-d arrays (this one is %d-d); use .mT or permute_dims"
                             % self.ndim)
        return Array._wrap(call(lib.tf_transpose, self._h, 0, 1))

    @property
    def mT(self):
        if self.ndim < 2:
            raise ValueError("tensorframe: .mT needs at least 2 dimensions")
        return Array._wrap(call(lib.tf_transpose, self._h, -2, -1))

    # -- autograd (torch.Tensor's names) --
    @property
    def requires_grad(self):
        return lib.tf_requires_grad(self._h)

    @requires_grad.setter
    def requires_grad(self, value):
        check(lib.tf_set_requires_grad(self._h, builtins.bool(value)))

    def requires_grad_(self, value=True):
        self.requires_grad = value
        return self

    @property
    def is_leaf(self):
        return lib.tf_is_leaf(self._h)

    @property
    def grad(self):
        """The accumulated gradient of a leaf (a new array each time), or None."""
        h = lib.tf_grad(self._h)
        return Array._wrap(lib.tf_tensor_retain(h)) if h else None

    @grad.setter
    def grad(self, value):
        if value is None:
            lib.tf_zero_grad(self._h)
        else:
            check(lib.tf_set_grad(self._h, value._h))

    def backward(self, gradient=None, retain_graph=False):
        """Gradients of this array with respect to the leaves it depends on,
        added to their .grad (gradient: d(self), needed unless it has one
        element)."""
        check(lib.tf_backward(self._h, gradient._h if gradient is not None else None, 1 if retain_graph else 0))

    def detach(self):
        return Array._wrap(call(lib.tf_detach, self._h))

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    # -- conversions --
    def to(self, device):
        """This array on `device` (itself if it is there already)."""
        target = device_of(device)
        if target == self.device:
            return self
        return Array._wrap(call(lib.tf_tensor_to, self._h, target._h))

    def to_device(self, device, /, *, stream=None):
        return self.to(device)

    def astype(self, dtype, copy=True):
        dtype = dt.dtype_of(dtype)
        if dtype == self.dtype and not copy:
            return self
        if self.dtype.is_complex and not dtype.is_complex and dtype != dt.bool:
            raise TypeError("tensorframe: astype from %s to %s drops the imaginary part; the array API refuses it "
                            "(take real(x) first)" % (self.dtype.name, dtype.name))
        return Array._wrap(call(lib.tf_cast, self._h, dtype.code))

    def _host_values(self):
        """Flat row-major Python values (a copy to the host)."""
        src = self
        if src.dtype in (dt.bfloat16, dt.float16) or src.dtype.kind == "quantized":
            src = src.astype(dt.float32)
        n = src.size
        buf = (ctypes.c_char * builtins.max(1, n * src.dtype.itemsize))()
        check(lib.tf_tensor_read(src._h, buf, n * src.dtype.itemsize))
        flat = memoryview(buf).cast("B")[: n * src.dtype.itemsize].cast(src.dtype.format).tolist()
        if src.dtype.is_complex:                         # (real, imaginary) pairs
            return [complex(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        return flat

    def tolist(self):
        values = self._host_values()
        shape = self.shape

        def rec(offset, depth):
            if depth == len(shape):
                return values[offset], offset + 1
            out = []
            for _ in range(shape[depth]):
                v, offset = rec(offset, depth + 1)
                out.append(v)
            return out, offset

        return rec(0, 0)[0]

    def item(self):
        if self.size != 1:
            raise ValueError("tensorframe: item() of an array of %d elements" % self.size)
        return self._host_values()[0]

    def __bool__(self):
        return builtins.bool(self._scalar_value("bool"))

    def __int__(self):
        if self.dtype.is_complex:
            raise TypeError("tensorframe: int() of a complex array (take its real part first)")
        return int(self._scalar_value("int"))

    def __float__(self):
        if self.dtype.is_complex:
            raise TypeError("tensorframe: float() of a complex array (take its real part first)")
        return float(self._scalar_value("float"))

    def __index__(self):
        if not self.dtype.is_integer:
            raise TypeError("tensorframe: only integer arrays can be indices")
        return int(self._scalar_value("index"))

    def __complex__(self):
        return complex(self._scalar_value("complex"))

    def _scalar_value(self, what):
        if self.size != 1:
            raise ValueError("tensorframe: the %s of an array of %d elements is ambiguous" % (what, self.size))
        return self._host_values()[0]

    def __array__(self, dtype=None, copy=None):
        """NumPy's view of the array: zero-copy over DLPack for host memory,
        a copy for other devices (which copy=False refuses)."""
        import numpy
        if copy is False and not self.device.is_host:
            raise ValueError("tensorframe: an array on %s reaches NumPy only by a copy" % self.device)
        host = self if self.device.is_host else self.to("cpu")
        if host.dtype == dt.bfloat16 or host.dtype.kind == "quantized":
            host = host.astype(dt.float32)
        try:
            out = numpy.from_dlpack(host)
        except (BufferError, TypeError, RuntimeError):     # NumPy < 1.25 reads no bool over DLPack
            out = numpy.array(host.tolist(), dtype=host.dtype.name)
        if copy:
            out = out.copy()
        return out.astype(dtype) if dtype is not None else out

    def __repr__(self):
        body = _format(self._host_values(), self.shape, self.dtype, indent=len("Array("))
        return "Array(%s, dtype=%s, device='%s')" % (body, self.dtype.name, self.device.name)

    def __str__(self):
        return _format(self._host_values(), self.shape, self.dtype)

    # -- DLPack --
    def __dlpack_device__(self):
        """Where __dlpack__ hands out memory: a CUDA or ROCm device's own
        (kDLCUDA/kDLROCM, id) for an array there, shared without a copy;
        else host memory (kDLCPU, 0): an array on another device is copied
        to the host for export, which copy=False refuses with BufferError."""
        native = None if self.device.is_host else _dlpack.native_gpu_device(self._h)
        return native or (_dlpack.kDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = max_version is not None and max_version[0] >= 1
        native = None if self.device.is_host else _dlpack.native_gpu_device(self._h)
        if native and not copy and (dl_device is None or tuple(dl_device) == native):
            # The GPU's memory itself. The library synchronizes the device
            # before export, so whatever stream the consumer names may read it.
            try:
                return _dlpack.export(self._h, versioned)
            except Exception as err:
                raise BufferError(str(err)) from err
        if stream is not None and stream != -1:
            raise BufferError("tensorframe: exports host memory (kDLCPU), which takes no stream (got %r)" % (stream,))
        if dl_device is not None and tuple(dl_device) != (_dlpack.kDLCPU, 0):
            raise BufferError("tensorframe: exports to the host (kDLCPU, 0)%s only, not %r"
                              % (" or its device %r" % (native,) if native else "", tuple(dl_device)))
        src, copied = self, False
        if not self.device.is_host:
            if copy is False:
                raise BufferError("tensorframe: this array lives on %s, whose memory DLPack cannot hand out; "
                                  "it reaches the host only by a copy, which copy=False forbids" % self.device)
            src, copied = self.to("cpu"), True
        elif copy:
            src, copied = Array._wrap(call(lib.tf_copy, self._h)), True
        try:
            return _dlpack.export(src._h, versioned, copied)
        except Exception as err:
            raise BufferError(str(err)) from err

    def __array_namespace__(self, *, api_version=None):
        if api_version not in (None, "2021.12", "2022.12", "2023.12"):
            raise ValueError("tensorframe implements the array API 2023.12, not %r" % api_version)
        import tensorframe
        return tensorframe

    # -- operands --
    def _operand(self, other):
        if isinstance(other, Array):
            return other
        if isinstance(other, (builtins.bool, int, float, complex)):
            return scalar(other, dt.scalar_dtype(other, self.dtype), self.device)
        return NotImplemented

    __add__, __radd__ = _binary("add")
    __sub__, __rsub__ = _binary("sub")
    __mul__, __rmul__ = _binary("mul")
    __truediv__, __rtruediv__ = _binary("div")
    __pow__, __rpow__ = _binary("pow")
    __matmul__, __rmatmul__ = _binary("matmul")
    __eq__, _ = _binary("eq")
    __ne__, _ = _binary("ne")
    __lt__, _ = _binary("lt")
    __le__, _ = _binary("le")
    __gt__, _ = _binary("gt")
    __ge__, _ = _binary("ge")
    __hash__ = None

    def __floordiv__(self, other):
        from . import _funcs
        return _funcs.floor_divide(self, other)

    def __rfloordiv__(self, other):
        from . import _funcs
        return _funcs.floor_divide(other, self)

    def __mod__(self, other):
        from . import _funcs
        return _funcs.remainder(self, other)

    def __rmod__(self, other):
        from . import _funcs
        return _funcs.remainder(other, self)

    # & | ^ ~ << >>: bitwise on integer arrays, logical on bool ones
    def _bitwise(self, name, other, reflected=False):
        if not isinstance(other, (Array, builtins.bool, int)):
            return NotImplemented
        from . import _funcs
        fn = getattr(_funcs, name)
        return fn(other, self) if reflected else fn(self, other)

    def __and__(self, other):
        return self._bitwise("bitwise_and", other)

    def __rand__(self, other):
        return self._bitwise("bitwise_and", other, True)

    def __or__(self, other):
        return self._bitwise("bitwise_or", other)

    def __ror__(self, other):
        return self._bitwise("bitwise_or", other, True)

    def __xor__(self, other):
        return self._bitwise("bitwise_xor", other)

    def __rxor__(self, other):
        return self._bitwise("bitwise_xor", other, True)

    def __lshift__(self, other):
        return self._bitwise("bitwise_left_shift", other)

    def __rlshift__(self, other):
        return self._bitwise("bitwise_left_shift", other, True)

    def __rshift__(self, other):
        return self._bitwise("bitwise_right_shift", other)

    def __rrshift__(self, other):
        return self._bitwise("bitwise_right_shift", other, True)

    def __invert__(self):
        from . import _funcs
        return _funcs.bitwise_invert(self)

    def __neg__(self):
        from . import _funcs
        return _funcs.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        from . import _funcs
        return _funcs.abs(self)

    # -- in place: the result written into this array's memory (views see it) --
    def _inplace(self, op, other):
        result = op(self, other)
        if result is NotImplemented:
            return NotImplemented
        check(lib.tf_copy_into(self._h, result._h))
        return self

    def __iadd__(self, other):
        return self._inplace(operator.add, other)

    def __isub__(self, other):
        return self._inplace(operator.sub, other)

    def __imul__(self, other):
        return self._inplace(operator.mul, other)

    def __itruediv__(self, other):
        return self._inplace(operator.truediv, other)

    def __ipow__(self, other):
        return self._inplace(operator.pow, other)

    def __iand__(self, other):
        return self._inplace(operator.and_, other)

    def __ior__(self, other):
        return self._inplace(operator.or_, other)

    def __ixor__(self, other):
        return self._inplace(operator.xor, other)

    def __ilshift__(self, other):
        return self._inplace(operator.lshift, other)

    def __irshift__(self, other):
        return self._inplace(operator.rshift, other)

    # -- indexing --
    def __getitem__(self, key):
        return _index(self, key)

    def __setitem__(self, key, value):
        if isinstance(key, Array) and key.dtype == dt.bool:
            _assign_by_mask(self, key, value)
            return
        flips = []
        view = _index(self, key, for_write=True, flips=flips)
        if not isinstance(value, Array):
            value = asarray_like(value, view)
        if flips:     # a negative step: the view steps forward, so the value is reversed along those axes
            from . import _funcs
            value = _funcs.flip(_funcs.broadcast_to(value, view.shape), axis=tuple(flips))
        check(lib.tf_copy_into(view._h, value._h))


def _use_native():
    """Hand Array's hot calls to the C base: the Python operators and
    indexing stay as the general cases it calls; the C versions of the
    attributes and of freeing replace the Python ones."""
    ops = tuple((Array.__dict__["__%s__" % n], Array.__dict__["__r%s__" % n])
                for n in ("add", "sub", "mul", "truediv", "matmul"))
    types = tuple(dt.BY_CODE.get(i) for i in range(builtins.max(dt.BY_CODE) + 1))
    _native["configure"](Array, types, ops, _index, _dlpack.LEGACY_PRODUCERS)
    for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                 "__rtruediv__", "__matmul__", "__rmatmul__", "__getitem__", "__del__", "ndim", "shape", "size",
                 "dtype"):
        delattr(Array, name)
    Array._wrap = staticmethod(_native["wrap"])


class _Released(Array):
    """What an Array becomes once its tensor is released (by __del__, which
    a caller may call by hand): every attribute and operator raises."""
    __slots__ = ()
    _MESSAGE = "tensorframe: this array was released (its tensor is gone); use another array"

    def __getattribute__(self, name):
        if name in ("__class__", "__del__", "__repr__"):
            return object.__getattribute__(self, name)
        raise ValueError(_Released._MESSAGE)

    def __del__(self):
        pass

    def __repr__(self):
        return "Array(<released>)"


def scalar(value, dtype, device):
    """A 0-d array holding a Python scalar; integers past 2**53 go through
    int64 exactly rather than through a double, and one outside an integer
    dtype's range is OverflowError."""
    dt.check_int_fits(value, dtype)
    if isinstance(value, int) and not isinstance(value, builtins.bool) and abs(value) > 2 ** 53:
        return _from_values([value], [], dtype, device)
    if isinstance(value, complex) or dtype.is_complex:
        if not dtype.is_complex:
            raise TypeError("tensorframe: a complex value cannot be stored in a %s array" % dtype.name)
        return _from_values([value], [], dtype, device)
    return Array._wrap(call(lib.tf_scalar, device._h, dtype.code, float(value)))


def asarray_like(value, like):
    """A Python scalar or array-like as an Array on `like`'s device, taking
    `like`'s dtype for scalars."""
    if isinstance(value, (builtins.bool, int, float, complex)):
        return scalar(value, dt.scalar_dtype(value, like.dtype), like.device)
    from . import _funcs
    return _funcs.asarray(value, device=like.device)


# ---- indexing ----

def _normalize_key(key, ndim):
    if not isinstance(key, tuple):
        key = (key,)
    consuming = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    bool_dims = builtins.sum(k.ndim - 1 for k in key if isinstance(k, Array) and k.dtype == dt.bool)
    consuming += bool_dims
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("tensorframe: an index can hold one ellipsis")
    if consuming > ndim:
        raise IndexError("tensorframe: too many indices (%d) for a %d-d array" % (consuming, ndim))
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - consuming))
        else:
            out.append(k)
    if Ellipsis not in key:
        out.extend([slice(None)] * (ndim - consuming))
    return out


def _assign_by_mask(x, mask, value):
    """x[mask] = value for a boolean mask over x's leading axes: value a
    scalar (or 0-d), or one row per true position, broadcast. The result is
    made with where() and copied into x, so x need not be contiguous."""
    from . import _funcs
    k = mask.ndim
    if tuple(x.shape[:k]) != tuple(mask.shape):
        raise IndexError("tensorframe: a boolean index of shape %s does not match the array's axes %s"
                         % (mask.shape, x.shape[:k]))
    if mask.device != x.device:
        mask = mask.to(x.device)
    rest = tuple(x.shape[k:])
    m = Array._wrap(call(lib.tf_reshape, mask._h, x.ndim, int64_array(tuple(mask.shape) + (1,) * len(rest))))
    if not isinstance(value, Array):
        value = asarray_like(value, x)
    value = value.astype(x.dtype, copy=False)
    if value.device != x.device:
        value = value.to(x.device)
    if value.ndim == 0:
        result = _funcs.where(m, value, x)
    else:
        keep = mask.reshape_flat()._host_values()
        n_true = builtins.sum(1 for b in keep if b)
        if n_true == 0:
            return
        rows = _funcs.broadcast_to(value, (n_true,) + rest)
        ranks, r = [], 0
        for b in keep:                           # each true position's row of value; false ones any row
            ranks.append(r if b else 0)
            r += 1 if b else 0
        idx = _from_values(ranks, [len(ranks)], dt.int64, x.device)
        picked = Array._wrap(call(lib.tf_index_select, rows._h, 0, idx._h))
        picked = Array._wrap(call(lib.tf_reshape, picked._h, x.ndim, int64_array(x.shape)))
        result = _funcs.where(m, picked, x)
    check(lib.tf_copy_into(x._h, result._h))


def _index(x, key, for_write=False, flips=None):
    if isinstance(key, slice) and x.ndim:             # the common case, without the general walk
        return _slice_axis(x, 0, key, for_write, flips)
    if not for_write and _vectorized_key(key, x.ndim):
        return _vectorized_index(x, key)
    t = x
    axis = 0
    for k in _normalize_key(key, x.ndim):
        if k is None:
            t = Array._wrap(call(lib.tf_unsqueeze, t._h, axis))
            axis += 1
        elif isinstance(k, slice):
            t = _slice_axis(t, axis, k, for_write, flips)
            axis += 1
        elif isinstance(k, Array):
            if for_write:
                raise IndexError("tensorframe: assignment takes basic indices (integers, slices, None, ...); "
                                 "array indices give copies")
            t, axis = _array_index(t, axis, k)
        elif isinstance(k, (list, tuple)):
            raise IndexError("tensorframe: a list index must be an Array of integers (tensorframe.asarray(...))")
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError("tensorframe: index %r is not an integer, slice, None, ellipsis or array"
                                 % (k,)) from None
            n = t.shape[axis]
            if not -n <= i < n:
                raise IndexError("tensorframe: index %d is out of range for axis %d of size %d" % (i, axis, n))
            i %= n
            s = Array._wrap(call(lib.tf_slice, t._h, axis, i, i + 1, 1))
            t = Array._wrap(call(lib.tf_squeeze, s._h, axis))
    return t


def _vectorized_key(key, ndim):
    """A tuple of integers and at least two integer arrays, one per leading
    axis: 2024.12 broadcasts them together (NumPy's vectorized indexing)
    where a key with one array indexes its own axis."""
    if not isinstance(key, tuple) or len(key) > ndim:
        return False
    arrays = 0
    for k in key:
        if isinstance(k, Array):
            if not k.dtype.is_integer:
                return False
            arrays += 1
        elif isinstance(k, builtins.bool) or not isinstance(k, int):
            return False
    return arrays >= 2


def _vectorized_index(x, key):
    """x[key] for a _vectorized_key: the indices broadcast to one shape B,
    become one row-major position over the leading len(key) axes, and pick
    rows of x seen as (those axes flattened, the rest): shape B + the rest."""
    from . import _funcs
    lead = x.shape[:len(key)]
    parts = []
    for axis, k in enumerate(key):
        n = lead[axis]
        if isinstance(k, Array):
            k = k.to(x.device).astype(dt.int64, copy=False)
            if n > 0:
                k = _funcs.where(k < 0, k + n, k)   # negative indices count from the end
        else:
            if not -n <= k < n:
                raise IndexError("tensorframe: index %d is out of range for axis %d of size %d" % (k, axis, n))
            k = _funcs.asarray(k % n, dtype=dt.int64, device=x.device)
        parts.append(k)
    parts = _funcs.broadcast_arrays(*parts)
    position, stride = None, 1
    for axis in range(len(key) - 1, -1, -1):
        term = parts[axis] * stride if stride != 1 else parts[axis]
        position = term if position is None else position + term
        stride *= lead[axis]
    rows = _funcs.reshape(x, (stride,) + tuple(x.shape[len(key):]))
    picked = _funcs.take(rows, _funcs.reshape(position, (-1,)), axis=0)
    return _funcs.reshape(picked, tuple(parts[0].shape) + tuple(x.shape[len(key):]))


def _slice_axis(t, axis, k, for_write, flips=None):
    """A slice along one axis as a view. A negative step reads as the
    forward view flipped (a copy); for a write it is the forward view
    itself, and `flips` gets the axis, along which the caller reverses
    the value."""
    n = t.shape[axis]
    start, stop, step = k.indices(n)
    if step > 0:
        if (start, stop, step) == (0, n, 1):
            return t
        return Array._wrap(call(lib.tf_slice, t._h, axis, start, builtins.max(start, stop), step))
    r = range(start, stop, step)
    if len(r) == 0:
        return Array._wrap(call(lib.tf_slice, t._h, axis, 0, 0, 1))
    forward = Array._wrap(call(lib.tf_slice, t._h, axis, r[-1], r[0] + 1, -step))
    if for_write:
        flips.append(axis)
        return forward
    return Array._wrap(call(lib.tf_flip, forward._h, 1, int_array([axis])))


def _array_index(t, axis, k):
    """An integer array picks along one axis (index_select, a copy); a bool
    mask picks the positions it holds true across its axes."""
    if k.dtype == dt.bool:
        mask_shape = k.shape
        if k.ndim == 0:                          # x[True]: a new axis of 1; x[False]: of 0
            t = Array._wrap(call(lib.tf_unsqueeze, t._h, axis))
            keep = 1 if k._host_values()[0] else 0
            return Array._wrap(call(lib.tf_slice, t._h, axis, 0, keep, 1)), axis + 1
        covered = tuple(t.shape[axis:axis + len(mask_shape)])
        if len(covered) == len(mask_shape) and k.size == 0 and builtins.all(
                m in (s, 0) for s, m in zip(covered, mask_shape)):
            # a mask with a size-0 axis selects nothing, whatever that axis of x holds
            shape = list(t.shape[:axis]) + [0] + list(t.shape[axis + len(mask_shape):])
            from . import _funcs
            return _funcs.empty(tuple(shape), dtype=t.dtype, device=t.device), axis + 1
        if tuple(t.shape[axis:axis + len(mask_shape)]) != tuple(mask_shape):
            raise IndexError("tensorframe: a boolean index of shape %s does not match the array's axes %s"
                             % (mask_shape, t.shape[axis:axis + len(mask_shape)]))
        merged = list(t.shape[:axis]) + [-1] + list(t.shape[axis + len(mask_shape):])
        flat = Array._wrap(call(lib.tf_reshape, t._h, len(merged), int64_array(_resolve_minus_one(merged, t.size))))
        positions = [i for i, keep in enumerate(k.reshape_flat()._host_values()) if keep]
        idx = _from_values(positions, [len(positions)], dt.int64, t.device)
        return Array._wrap(call(lib.tf_index_select, flat._h, axis, idx._h)), axis + 1
    if not k.dtype.is_integer:
        raise IndexError("tensorframe: array indices must be integers or bools, not %s" % k.dtype.name)
    if k.device != t.device:
        k = k.to(t.device)
    n = t.shape[axis]
    if n > 0 and k.dtype.kind == "signed":             # negative indices count from the end (as take's)
        from . import _funcs
        k = k.astype(dt.int64, copy=False)
        k = _funcs.where(k < 0, k + n, k)
    flat = Array._wrap(call(lib.tf_reshape, k._h, 1, int64_array([k.size])))
    picked = Array._wrap(call(lib.tf_index_select, t._h, axis, flat._h))
    shape = list(t.shape[:axis]) + list(k.shape) + list(t.shape[axis + 1:])
    return Array._wrap(call(lib.tf_reshape, picked._h, len(shape), int64_array(shape))), axis + k.ndim


def _resolve_minus_one(shape, size):
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    return [size // known if s == -1 and known else (0 if s == -1 else s) for s in shape]


def _reshape_flat(self):
    return Array._wrap(call(lib.tf_reshape, self._h, 1, int64_array([self.size])))


Array.reshape_flat = _reshape_flat


if _native:
    _use_native()
