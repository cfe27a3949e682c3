"""The array API's fft extension.

fft, ifft, fftn, ifftn, rfft, irfft, rfftn, irfftn are the library's
tf_fft, tf_rfft and tf_irfft (FFTW 3 on the host in double precision,
results on the input's device); n and s pad with zeros or trim first, as
NumPy does. hfft and ihfft are irfft and rfft of the conjugate with the
scaling's direction swapped; fftfreq, rfftfreq, fftshift and ifftshift are
composed from the namespace.
"""
import builtins
import ctypes

from . import _dtypes as dt
from . import _funcs as _f
from ._array import Array, device_of
from ._lib import check, lib

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]

_NORMS = {"backward": 0, "ortho": 1, "forward": 2}
_SWAPPED = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def _norm_code(norm, name):
    if norm not in _NORMS:
        raise ValueError("tensorframe.fft.%s: norm must be 'backward', 'ortho' or 'forward', not %r" % (name, norm))
    return _NORMS[norm]


def _call(fn, *args):
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return Array._wrap(out.value)


def _axes_array(axes):
    return (ctypes.c_int * len(axes))(*axes)


def _fit(x, axis, n, name):
    """x trimmed or padded with zeros to n points along axis."""
    if n is None:
        return x
    if n < 1:
        raise ValueError("tensorframe.fft.%s: n must be at least 1, not %d" % (name, n))
    have = x.shape[axis]
    if n == have:
        return x
    if n < have:
        return x[(slice(None),) * (axis % x.ndim) + (slice(0, n),)]
    shape = list(x.shape)
    shape[axis] = n - have
    return _f.concat([x, _f.zeros(tuple(shape), dtype=x.dtype, device=x.device)], axis=axis)


def _floating(x, name, real=False):
    ok = x.dtype.is_float if real else x.dtype.is_inexact
    if not ok:
        raise TypeError("tensorframe.fft.%s: takes %s arrays, not %s"
                        % (name, "real floating-point" if real else "floating-point or complex", x.dtype.name))


def _axes_and_sizes(x, s, axes, name):
    """The standard's defaults: every axis, or the last len(s) when only s is given."""
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(a % x.ndim if x.ndim else a for a in axes)
    if s is None:
        s = tuple(x.shape[a] for a in axes)
    if len(s) != len(axes):
        raise ValueError("tensorframe.fft.%s: s and axes have different lengths" % name)
    return tuple(axes), tuple(s)


def _c2c(x, axes, sizes, inverse, norm, name):
    _floating(x, name)
    for a, n in zip(axes, sizes):
        x = _fit(x, a, n, name)
    return _call(lib.tf_fft, x._h, len(axes), _axes_array(axes), builtins.bool(inverse), _norm_code(norm, name))


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    return _c2c(x, (axis,), (n,), False, norm, "fft")


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    return _c2c(x, (axis,), (n,), True, norm, "ifft")


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    axes, sizes = _axes_and_sizes(x, s, axes, "fftn")
    return _c2c(x, axes, sizes, False, norm, "fftn")


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    axes, sizes = _axes_and_sizes(x, s, axes, "ifftn")
    return _c2c(x, axes, sizes, True, norm, "ifftn")


def _r2c(x, axes, sizes, norm, name):
    _floating(x, name, real=True)
    for a, n in zip(axes, sizes):
        x = _fit(x, a, n, name)
    return _call(lib.tf_rfft, x._h, len(axes), _axes_array(axes), _norm_code(norm, name))


def _c2r(x, axes, sizes, norm, name):
    """sizes: the output's lengths (None last: 2 * (m - 1))."""
    _floating(x, name)
    sizes = list(sizes)
    if sizes[-1] is None:
        sizes[-1] = 2 * (x.shape[axes[-1]] - 1)
    if sizes[-1] < 1:
        raise ValueError("tensorframe.fft.%s: the output needs at least 1 point along axis %d" % (name, axes[-1]))
    for a, n in zip(axes[:-1], sizes[:-1]):
        x = _fit(x, a, n, name)
    x = _fit(x, axes[-1], sizes[-1] // 2 + 1, name)
    return _call(lib.tf_irfft, x._h, len(axes), _axes_array(axes), int(sizes[-1]),
                 _norm_code(norm, name))


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _r2c(x, (axis % x.ndim if x.ndim else axis,), (n,), norm, "rfft")


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _c2r(x, (axis % x.ndim if x.ndim else axis,), (n,), norm, "irfft")


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    axes, sizes = _axes_and_sizes(x, s, axes, "rfftn")
    return _r2c(x, axes, sizes, norm, "rfftn")


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    axes, sizes = _axes_and_sizes(x, s, axes, "irfftn")
    if s is None:                                          # the last axis: 2 * (m - 1) points
        sizes = sizes[:-1] + (None,)
    return _c2r(x, axes, sizes, norm, "irfftn")


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The transform of a Hermitian-symmetric signal given by its first half:
    a real spectrum (NumPy's irfft of the conjugate, the scaling swapped)."""
    _floating(x, "hfft")
    return irfft(_f.conj(x), n=n, axis=axis, norm=_SWAPPED.get(norm, norm))


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    _floating(x, "ihfft", real=True)
    return _f.conj(rfft(x, n=n, axis=axis, norm=_SWAPPED.get(norm, norm)))


def _frequencies(values, scale, dtype, device):
    out = _f.asarray(values, dtype=dt.float64, device="cpu") * scale
    return out.astype(dt.dtype_of(dtype) if dtype is not None else dt.default_float).to(device_of(device))


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n)."""
    if n < 1:
        raise ValueError("tensorframe.fft.fftfreq: n must be at least 1")
    values = list(range((n - 1) // 2 + 1)) + list(range(-(n // 2), 0))
    return _frequencies(values, 1.0 / (d * n), dtype, device)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """[0, 1, ..., n // 2] / (d * n)."""
    if n < 1:
        raise ValueError("tensorframe.fft.rfftfreq: n must be at least 1")
    return _frequencies(list(range(n // 2 + 1)), 1.0 / (d * n), dtype, device)


def _shift(x, axes, back):
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    shifts = tuple((-(x.shape[a] // 2) if back else x.shape[a] // 2) for a in axes)
    return _f.roll(x, shifts, axis=tuple(axes)) if axes else x


def fftshift(x, /, *, axes=None):
    """The zero frequency moved to the middle: a roll by n // 2 along axes."""
    return _shift(x, axes, False)


def ifftshift(x, /, *, axes=None):
    return _shift(x, axes, True)
