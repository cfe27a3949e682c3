"""DLPack both ways with NumPy and PyTorch: one memory (data pointers
compared), lifetimes (a producer freed only when its consumer lets go),
both capsule kinds (DLPack 1.x "dltensor_versioned" and 0.x "dltensor"),
and the refusals (BufferError) when only a copy would do."""
import ctypes
import gc
import weakref

import pytest

import tensorframe as tf
from conftest import need

_capi = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)   # our own declarations, not pythonapi's shared ones
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def capsule_name(capsule):
    for name in (b"dltensor_versioned", b"dltensor", b"used_dltensor_versioned", b"used_dltensor"):
        if _capi.PyCapsule_IsValid(capsule, name):
            return name.decode()
    return None


def data_ptr(x):
    """Our array's first element's address, read from a DLPack export."""
    capsule = x.__dlpack__()
    managed = _capi.PyCapsule_GetPointer(capsule, b"dltensor")
    data = ctypes.c_void_p.from_address(managed).value          # DLTensor.data comes first (0.x)
    offset = ctypes.c_uint64.from_address(managed + 40).value   # DLTensor.byte_offset
    return data + offset


def cpu_allocated():
    return tf.device("cpu").memory_stats()["allocated"]


def test_capsule_kinds_follow_max_version():
    x = tf.arange(4, dtype=tf.float32, device="cpu")
    assert capsule_name(x.__dlpack__()) == "dltensor"
    assert capsule_name(x.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(x.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(x.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    assert x.__dlpack_device__() == (1, 0)


def test_capsules_are_consumed_once():
    x = tf.arange(4, dtype=tf.float32, device="cpu")
    for kw in ({}, {"max_version": (1, 0)}):
        capsule = x.__dlpack__(**kw)
        y = tf.from_dlpack(capsule)
        assert capsule_name(capsule).startswith("used_")
        assert data_ptr(y) == data_ptr(x)
        with pytest.raises(BufferError, match="consumed once"):
            tf.from_dlpack(capsule)
    del capsule
    gc.collect()
    # an unconsumed capsule gives its tensor back when collected: no leak
    before = cpu_allocated()
    big = tf.zeros((1 << 20,), device="cpu")
    for kw in ({}, {"max_version": (1, 0)}):
        c = big.__dlpack__(**kw)
        del c
    del big
    gc.collect()
    assert cpu_allocated() == before


def test_numpy_to_tensorframe_shares_memory_and_keeps_it_alive(np):
    n = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = weakref.ref(n)
    t = tf.from_dlpack(n)
    assert t.device == "cpu" and t.dtype == tf.float32 and t.shape == (3, 4)
    assert data_ptr(t) == n.__array_interface__["data"][0]
    n[1, 2] = 100.0                                       # one memory: the write shows
    assert t[1, 2].item() == 100.0
    view = t[1:, ::2]
    del n, t
    gc.collect()
    assert ref() is not None                              # our view holds NumPy's array
    assert view.tolist() == [[4.0, 100.0], [8.0, 10.0]]
    del view
    gc.collect()
    assert ref() is None                                  # released with the last view


def test_numpy_strided_views_and_dtypes(np, rng):
    base = rng.standard_normal((6, 8))
    for v in (base[::2, 1::3], base.T, base[2:, :5]):
        t = tf.from_dlpack(v)
        assert data_ptr(t) == v.__array_interface__["data"][0]
        np.testing.assert_array_equal(np.asarray(t), v)
    for dtype in ("float32", "float64", "float16", "int8", "int32", "int64", "uint8"):
        h = (rng.standard_normal(7) * 20).astype(dtype)
        t = tf.from_dlpack(h)
        assert t.dtype.name == dtype
        back = np.from_dlpack(t)
        assert back.__array_interface__["data"][0] == h.__array_interface__["data"][0]
        np.testing.assert_array_equal(back, h)


def test_tensorframe_to_numpy_shares_memory_and_keeps_it_alive(np):
    before = cpu_allocated()
    t = tf.arange(1 << 18, dtype=tf.float32, device="cpu")
    ptr = data_ptr(t)
    n = np.from_dlpack(t)
    assert n.__array_interface__["data"][0] == ptr
    del t
    gc.collect()
    assert cpu_allocated() - before >= (1 << 20) - 4096   # NumPy's array holds our memory
    garbage = [tf.ones((1 << 18,), device="cpu") for _ in range(4)]
    assert n[12345] == 12345.0 and n[-1] == (1 << 18) - 1
    del garbage, n
    gc.collect()
    assert cpu_allocated() == before                       # freed when NumPy let go


def test_copy_semantics(np):
    n = np.arange(6.0)
    t = tf.from_dlpack(n, copy=True)
    assert data_ptr(t) != n.__array_interface__["data"][0]
    n[0] = 9
    assert t[0].item() == 0.0
    x = tf.arange(3, dtype=tf.float32, device="cpu")
    assert np.from_dlpack(tf.from_dlpack(x, copy=True)).__array_interface__["data"][0] != data_ptr(x)
    assert tf.asarray(n, copy=False).tolist() == n.tolist()


def test_other_devices_copy_or_refuse(np):
    others = [d for d in tf.devices() if d.name != "cpu" and d.backend not in ("cuda", "rocm")]   # GPUs share
    if not others:
        pytest.skip("only the CPU (and GPUs, which export their own memory) here")
    for d in others:
        x = tf.arange(5, dtype=tf.float32, device=d)
        assert x.__dlpack_device__() == (1, 0)
        np.testing.assert_array_equal(np.from_dlpack(x), np.arange(5))   # a copy to the host
        with pytest.raises(BufferError, match="copy=False"):
            x.__dlpack__(copy=False)
        assert capsule_name(x.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
        with pytest.raises(BufferError):
            x.__dlpack__(dl_device=(2, 0))
        y = tf.from_dlpack(np.arange(3.0), device=d)
        assert y.device == d and y.tolist() == [0.0, 1.0, 2.0]


class DeviceProducer:
    """A producer whose memory is on a GPU (kDLCUDA): tensorframe must ask
    for a host copy or refuse."""

    def __init__(self, np, supports_copy):
        self.host = np.arange(4.0)
        self.supports_copy = supports_copy
        self.calls = []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if not self.supports_copy:
            raise TypeError("old producer: no keywords")
        assert kwargs.get("dl_device") == (1, 0) and kwargs.get("copy") is True
        return self.host.__dlpack__()


def test_device_producers(np):
    p = DeviceProducer(np, supports_copy=True)
    with pytest.raises(BufferError, match="copy=False"):
        tf.from_dlpack(p, copy=False)
    assert p.calls == []
    assert tf.from_dlpack(p).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="DLPack < 1.0"):
        tf.from_dlpack(DeviceProducer(np, supports_copy=False))


def test_refusals_are_buffer_errors(np):
    x = tf.asarray([1, 2], dtype=tf.int32, device="cpu")
    with pytest.raises(BufferError):
        x.__dlpack__(stream=5)
    q = tf.asarray([0.0] * 32, device="cpu").astype(tf.q8_0)
    with pytest.raises(BufferError, match="q8_0"):
        q.__dlpack__()
    with pytest.raises(BufferError):
        tf.from_dlpack(np.arange(4, dtype=np.uint16))      # no tensorframe dtype
    with pytest.raises(BufferError):
        tf.from_dlpack(np.arange(4.0)[::-1])               # negative strides


def test_complex_both_ways(np):
    """complex64/complex128 (kDLComplex) cross without a copy, both ways."""
    a = np.arange(6.0).reshape(2, 3) + 1j * np.arange(6.0).reshape(2, 3)[::-1]
    for want in (np.complex64, np.complex128):
        src = a.astype(want)
        x = tf.from_dlpack(src)
        assert x.dtype == (tf.complex64 if want == np.complex64 else tf.complex128)
        assert x.tolist() == src.tolist()
        src[0, 1] = 7 - 7j                                 # shared memory
        assert complex(x[0, 1]) == 7 - 7j
        back = np.from_dlpack(x * 2)
        assert back.dtype == want and np.array_equal(back, src * 2)


def test_torch_both_ways():
    torch = need("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = tf.from_dlpack(t)                                  # torch's __dlpack__ (1.13: a 0.x capsule)
    assert data_ptr(x) == t.data_ptr()
    t[0, 0] = 42
    assert x[0, 0].item() == 42.0
    back = torch.from_dlpack(x)
    assert back.data_ptr() == t.data_ptr()
    y = tf.from_dlpack(torch.utils.dlpack.to_dlpack(t[:, 1::2]))   # a raw capsule, strided
    assert y.shape == (3, 2) and data_ptr(y) == t[:, 1::2].data_ptr()
    z = tf.arange(6, dtype=tf.float64, device="cpu")
    tz = torch.utils.dlpack.from_dlpack(z.__dlpack__())
    assert tz.data_ptr() == data_ptr(z) and tz.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    dtypes = [torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.int8]
    if int(torch.__version__.split(".")[0]) >= 2:
        dtypes.append(torch.bool)                          # PyTorch 1.x exports no bool over DLPack
    for dtype in dtypes:
        src = (torch.arange(8) % 3).to(dtype)
        mine = tf.from_dlpack(src)
        assert data_ptr(mine) == src.data_ptr()
        assert torch.equal(torch.from_dlpack(mine), src)


def test_torch_lifetime():
    torch = need("torch")
    before = cpu_allocated()
    x = tf.ones((1 << 18,), device="cpu")
    t = torch.from_dlpack(x)
    del x
    gc.collect()
    assert cpu_allocated() - before >= (1 << 20) - 4096    # PyTorch holds our memory
    assert float(t.sum()) == float(1 << 18)
    del t
    gc.collect()
    assert cpu_allocated() == before
    src = torch.arange(4.0)
    mine = tf.from_dlpack(src)
    del src
    gc.collect()
    assert mine.tolist() == [0.0, 1.0, 2.0, 3.0]           # torch's storage kept by our tensor


def test_read_only_producers(np):
    n = np.arange(4.0)
    n.flags.writeable = False
    if int(np.__version__.split(".")[0]) >= 2:
        t = tf.from_dlpack(n)                              # flagged READ_ONLY: tensorframe copies
        assert data_ptr(t) != n.__array_interface__["data"][0]
    else:
        with pytest.raises(BufferError):                   # NumPy 1.x will not export it at all
            tf.from_dlpack(n)
        t = tf.asarray(n)                                  # asarray falls back to the values
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(BufferError):
        tf.asarray(n, copy=False) if int(np.__version__.split(".")[0]) < 2 else tf.from_dlpack(n, copy=False)


def cuda_and_torch():
    """PyTorch with CUDA and a tensorframe cuda:0 (the GPU machine), or a skip."""
    torch = need("torch")
    if not torch.cuda.is_available() or "cuda:0" not in [d.name for d in tf.devices()]:
        pytest.skip("no CUDA device for both tensorframe and PyTorch here")
    return torch


def test_cuda_memory_to_torch_without_a_copy():
    torch = cuda_and_torch()
    x = tf.reshape(tf.arange(12, dtype=tf.float32, device="cuda:0"), (3, 4))
    assert x.__dlpack_device__() == (2, 0)                      # kDLCUDA, device 0
    t = torch.from_dlpack(x)
    assert t.device == torch.device("cuda:0") and t.shape == (3, 4)
    assert t.tolist() == [[4.0 * i + j for j in range(4)] for i in range(3)]
    assert t.data_ptr() == data_ptr_native(x)                   # one memory
    t.mul_(2)                                                   # a write through PyTorch ...
    torch.cuda.synchronize()
    assert x.tolist()[2] == [16.0, 18.0, 20.0, 22.0]            # ... shows in tensorframe
    view = torch.from_dlpack(x[1:, ::2])                        # a strided view, still shared
    assert view.stride() == (4, 2) and view.data_ptr() == data_ptr_native(x) + 16
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None and t.sum().item() == 132.0            # the capsule keeps the memory, not the Array
    with pytest.raises(BufferError, match="copy=False"):
        tf.reshape(tf.arange(2, device="cuda:0"), (2,)).__dlpack__(dl_device=(1, 0), copy=False)
    host = tf.reshape(tf.arange(2, dtype=tf.float32, device="cuda:0"), (2,)).__dlpack__(dl_device=(1, 0))
    assert capsule_name(host) == "dltensor"                     # a host copy on request


def test_cuda_memory_back_from_torch():
    torch = cuda_and_torch()
    t = torch.arange(6, dtype=torch.float32, device="cuda:0").reshape(2, 3)
    y = tf.from_dlpack(t, device="cuda:0")                      # through the host: tensorframe imports host memory
    assert y.device.name == "cuda:0" and y.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    with pytest.raises(BufferError, match="copy=False"):
        tf.from_dlpack(t, copy=False)


def data_ptr_native(x):
    data, where = ctypes.c_void_p(), (ctypes.c_int32 * 2)()
    assert tf._lib.lib.tf_tensor_native_memory(x._h, ctypes.byref(data), ctypes.byref(where)) == 0
    return data.value
