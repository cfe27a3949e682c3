"""tensorframe: tensors on every device, from Python.

A thin layer over the C library (ctypes): arrays with Python's operators,
the array API 2023.12 namespace as far as the op table reaches, and DLPack
both ways (zero-copy with NumPy and PyTorch on host memory).

    import tensorframe as tf
    x = tf.ones((2, 3), device="opencl:0") + 1
    y = tf.from_dlpack(numpy_array)          # shares numpy_array's memory
"""
import math as _math

from ._lib import (TensorframeError, ShapeError, DtypeError, AxisError, OutOfRangeError, InvalidArgumentError,
                   UnknownDeviceError, DeviceMismatchError, UnsupportedError, OutOfMemoryError, NotFiniteError)
from ._dtypes import (DType, float32, float64, float16, bfloat16, int8, int32, int64, uint8, bool,  # noqa: A004
                      q4_0, q4_1, q8_0, q4_k, q6_k, q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl, iq4_xs, complex64,
                      complex128)
from ._array import Array, Device, devices, device_of as device
from ._funcs import *  # noqa: F401,F403 - the namespace
from ._funcs import __all__ as _funcs_all
from ._info import __array_namespace_info__, set_default_device
from . import linalg
from . import fft
from . import autograd
from . import optim
from .autograd import no_grad, enable_grad, set_grad_enabled, is_grad_enabled

__version__ = "0.1.0"
__array_api_version__ = "2023.12"

e = _math.e
pi = _math.pi
inf = _math.inf
nan = _math.nan
newaxis = None

__all__ = list(_funcs_all) + [
    "Array", "Device", "DType", "devices", "device", "set_default_device", "__array_namespace_info__",
    "float32", "float64", "float16", "bfloat16", "int8", "int32", "int64", "uint8", "bool", "complex64",
    "complex128", "e", "pi", "inf", "nan", "newaxis", "TensorframeError", "linalg", "fft", "autograd", "optim",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]
