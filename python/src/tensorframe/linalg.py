"""The array API's linalg extension.

The factorizations (cholesky, solve, inv, det, slogdet, qr, svd, eigh) are
the library's tf_linalg_* calls: LAPACK on the host in float64, results on
the input's device in its dtype. The rest is composed from the namespace's
functions on the device: matmul, norms, traces, diagonals, cross products,
powers, ranks and pseudo-inverses.
"""
import builtins
import ctypes
import math
from collections import namedtuple

from . import _dtypes as dt
from . import _funcs as _f
from ._array import Array
from ._lib import check, lib

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
           "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])


def _outputs(fn, *args, count):
    """fn(*args, &out1, ..., &outN) -> the N arrays."""
    outs = [ctypes.c_void_p() for _ in range(count)]
    check(fn(*args, *[ctypes.byref(o) for o in outs]))
    return [Array._wrap(o.value) for o in outs]


def _floating(x, name):
    if not x.dtype.is_inexact:
        raise TypeError("tensorframe.linalg.%s: takes floating-point or complex arrays (got %s)"
                        % (name, x.dtype.name))


def cholesky(x, /, *, upper=False):
    _floating(x, "cholesky")
    return _outputs(lib.tf_linalg_cholesky, x._h, builtins.bool(upper), count=1)[0]


def inv(x, /):
    _floating(x, "inv")
    return _outputs(lib.tf_linalg_inv, x._h, count=1)[0]


def det(x, /):
    _floating(x, "det")
    return _outputs(lib.tf_linalg_det, x._h, count=1)[0]


def slogdet(x, /):
    _floating(x, "slogdet")
    return SlogdetResult(*_outputs(lib.tf_linalg_slogdet, x._h, count=2))


def solve(x1, x2, /):
    _floating(x1, "solve")
    _floating(x2, "solve")
    dtype = _f.result_type(x1, x2)
    x1, x2 = x1.astype(dtype, copy=False), x2.astype(dtype, copy=False)
    vector = x2.ndim == 1                            # (M,): one right-hand side for every matrix
    if vector:
        x2 = _f.expand_dims(x2, axis=-1)
    batch = _broadcast_shape(x1.shape[:-2], x2.shape[:-2])
    a = _f.broadcast_to(x1, batch + x1.shape[-2:])
    b = _f.broadcast_to(x2, batch + x2.shape[-2:])
    out = _outputs(lib.tf_linalg_solve, a._h, b._h, count=1)[0]
    return out[..., 0] if vector else out


def _broadcast_shape(a, b):
    n = builtins.max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for p, q in zip(a, b):
        if p != q and 1 not in (p, q):
            raise ValueError("tensorframe.linalg.solve: batch shapes %s and %s do not broadcast" % (a, b))
        out.append(q if p == 1 else p)
    return tuple(out)


def qr(x, /, *, mode="reduced"):
    _floating(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError("tensorframe.linalg.qr: mode is 'reduced' or 'complete', not %r" % (mode,))
    return QRResult(*_outputs(lib.tf_linalg_qr, x._h, mode == "complete", count=2))


def svd(x, /, *, full_matrices=True):
    _floating(x, "svd")
    u, s, vh = (ctypes.c_void_p() for _ in range(3))
    check(lib.tf_linalg_svd(x._h, builtins.bool(full_matrices), ctypes.byref(u), ctypes.byref(s), ctypes.byref(vh)))
    return SVDResult(Array._wrap(u.value), Array._wrap(s.value), Array._wrap(vh.value))


def svdvals(x, /):
    _floating(x, "svdvals")
    s = ctypes.c_void_p()
    check(lib.tf_linalg_svd(x._h, False, None, ctypes.byref(s), None))
    return Array._wrap(s.value)


def eigh(x, /):
    _floating(x, "eigh")
    return EighResult(*_outputs(lib.tf_linalg_eigh, x._h, count=2))


def eigvalsh(x, /):
    _floating(x, "eigvalsh")
    w = ctypes.c_void_p()
    check(lib.tf_linalg_eigh(x._h, ctypes.byref(w), None))
    return Array._wrap(w.value)


# ---- composed on the device ----

def matmul(x1, x2, /):
    return _f.matmul(x1, x2)


def matrix_transpose(x, /):
    return _f.matrix_transpose(x)


def tensordot(x1, x2, /, *, axes=2):
    return _f.tensordot(x1, x2, axes=axes)


def vecdot(x1, x2, /, *, axis=-1):
    return _f.vecdot(x1, x2, axis=axis)


def outer(x1, x2, /):
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError("tensorframe.linalg.outer: takes two 1-d arrays (got %d-d and %d-d)" % (x1.ndim, x2.ndim))
    return _f.multiply(x1[:, None], x2[None, :])


def diagonal(x, /, *, offset=0):
    """The diagonal of each matrix: a strided view of the flattened last
    two axes (step N + 1 from the offset's first element)."""
    m, n = x.shape[-2], x.shape[-1]
    count = builtins.max(0, builtins.min(m, n - offset) if offset >= 0 else builtins.min(m + offset, n))
    start = offset if offset >= 0 else -offset * n
    flat = _f.reshape(x, x.shape[:-2] + (m * n,))
    if count == 0:
        return flat[..., 0:0]
    return flat[..., start:start + (count - 1) * (n + 1) + 1:n + 1]


def trace(x, /, *, offset=0, dtype=None):
    return _f.sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def cross(x1, x2, /, *, axis=-1):
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError("tensorframe.linalg.cross: the axis must have 3 elements (got %d and %d)"
                         % (x1.shape[axis], x2.shape[axis]))
    if not (-x1.ndim <= axis < x1.ndim and -x2.ndim <= axis < x2.ndim):
        raise ValueError("tensorframe.linalg.cross: axis %d out of range" % axis)
    a, b = _f.broadcast_arrays(x1, x2)
    ax = axis if axis < 0 else axis - a.ndim                 # counted from the end: the shapes were broadcast
    a0, a1, a2 = (_f.take(a, _f.asarray([i], device=a.device), axis=ax) for i in range(3))
    b0, b1, b2 = (_f.take(b, _f.asarray([i], device=b.device), axis=ax) for i in range(3))
    return _f.concat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=ax)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if not x.dtype.is_inexact:
        raise TypeError("tensorframe.linalg.vector_norm: takes floating-point arrays (got %s)" % x.dtype.name)
    a = _f.abs(x)                                           # complex: the moduli, a real array
    if ord == math.inf:
        return _f.max(a, axis=axis, keepdims=keepdims) if a.size else _f.sum(a, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return _f.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _f.sum((a != 0).astype(a.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _f.sum(a, axis=axis, keepdims=keepdims)
    if ord == 2:
        return _f.sqrt(_f.sum(a * a, axis=axis, keepdims=keepdims))
    p = float(ord)
    return _f.sum(a ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    if x.dtype.is_complex and ord in ("fro", 1, -1, math.inf, -math.inf):
        x = _f.abs(x)                                       # these norms see only the moduli
    _floating(x, "matrix_norm")
    if ord == "fro":
        out = _f.sqrt(_f.sum(x * x, axis=(-2, -1), keepdims=keepdims))
    elif ord == "nuc":
        out = _f.sum(svdvals(x), axis=-1)
    elif ord in (2, -2):
        s = svdvals(x)
        out = _f.max(s, axis=-1) if ord == 2 else _f.min(s, axis=-1)
    elif ord in (1, -1, math.inf, -math.inf):
        sum_axis = -2 if ord in (1, -1) else -1           # column sums for 1, row sums for inf
        sums = _f.sum(_f.abs(x), axis=sum_axis)
        out = _f.max(sums, axis=-1) if ord > 0 else _f.min(sums, axis=-1)
    else:
        raise ValueError("tensorframe.linalg.matrix_norm: ord %r is not one of 'fro', 'nuc', 1, -1, 2, -2, "
                         "inf, -inf" % (ord,))
    if keepdims and ord != "fro":
        out = _f.expand_dims(_f.expand_dims(out, axis=-1), axis=-1)
    return out


def matrix_power(x, n, /):
    if x.shape[-1] != x.shape[-2]:
        raise ValueError("tensorframe.linalg.matrix_power: the matrices must be square")
    if n == 0:
        eye = _f.eye(x.shape[-1], dtype=x.dtype, device=x.device)
        return _f.broadcast_to(eye, x.shape) * 1
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while n:                                                # squaring: log2(n) products
        if n & 1:
            result = base if result is None else _f.matmul(result, base)
        n >>= 1
        if n:
            base = _f.matmul(base, base)
    return result


def _default_rtol(x):
    return max(x.shape[-2], x.shape[-1]) * _f.finfo(x.dtype).eps


def matrix_rank(x, /, *, rtol=None):
    _floating(x, "matrix_rank")
    s = svdvals(x)
    if s.shape[-1] == 0:
        return _f.zeros(s.shape[:-1], dtype=dt.int64, device=x.device)
    tol = _f.max(s, axis=-1, keepdims=True) * (_default_rtol(x) if rtol is None else
                                               (rtol[..., None] if isinstance(rtol, Array) else rtol))
    return _f.sum((s > tol).astype(dt.int64), axis=-1)


def pinv(x, /, *, rtol=None):
    _floating(x, "pinv")
    u, s, vh = svd(x, full_matrices=False)
    if s.shape[-1] == 0:
        return _f.zeros(x.shape[:-2] + (x.shape[-1], x.shape[-2]), dtype=x.dtype, device=x.device)
    cutoff = _f.max(s, axis=-1, keepdims=True) * (_default_rtol(x) if rtol is None else
                                                  (rtol[..., None] if isinstance(rtol, Array) else rtol))
    inverse = _f.where(s > cutoff, 1 / s, _f.zeros_like(s))
    vh, u = _f.conj(vh), _f.conj(u)                         # V S^+ U^H: conjugate transposes
    return _f.matmul(_f.matrix_transpose(vh) * inverse[..., None, :], _f.matrix_transpose(u))
