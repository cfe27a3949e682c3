"""The array API's inspection namespace and the default device."""
from . import _dtypes as dt
from ._array import _default_device_spec, device_of, devices


def set_default_device(device):
    """The device arrays are made on when none is given ("auto" at first:
    the best device by priority, as in C; TF_BACKEND steers that)."""
    spec = device if isinstance(device, str) else device.name
    device_of(spec)                     # refuse an unknown device now
    _default_device_spec[0] = spec


_STANDARD_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
                   "float64", "complex64", "complex128")


class _Info:
    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 32}

    def default_device(self):
        return device_of(None)

    def default_dtypes(self, *, device=None):
        return {"real floating": dt.default_float, "complex floating": dt.default_complex, "integral": dt.default_int,
                "indexing": dt.default_index}

    def devices(self):
        return devices()

    def dtypes(self, *, device=None, kind=None):
        """The standard's dtypes that tensorframe has (float16 and bfloat16
        are arrays' dtypes too, but not the standard's: they are left out,
        as the standard's tests expect only its names here)."""
        from ._funcs import isdtype
        out = {d.name: d for d in dt.ELEMENT if d.name in _STANDARD_NAMES}
        if kind is not None:
            out = {n: d for n, d in out.items() if isdtype(d, kind)}
        return out


def __array_namespace_info__():
    return _Info()
