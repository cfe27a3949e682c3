"""Hostile arguments from Python: integers that do not fit, NUL bytes in
names, released arrays, hand-made DLPack capsules that lie, and counts that
would take forever. Each is the stated exception - never a signal, a hang,
or a silently different value. The cases that once killed or hung the
interpreter run in a child process, so a regression fails the test instead
of the run."""
import ctypes
import os
import subprocess
import sys

import pytest

import tensorframe as tf
from tensorframe import _dlpack


def run_child(code, timeout=120):
    """code in a fresh interpreter: (returncode, stdout + stderr). A signal
    is a negative returncode; a hang is TimeoutExpired."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


# ---- integers ----

@pytest.mark.parametrize("shape", [(2 ** 64,), (2 ** 64 + 3,), (2 ** 63,), (3, -(2 ** 63) - 1)])
def test_shapes_that_do_not_fit_int64(shape):
    with pytest.raises(OverflowError, match="does not fit int64"):
        tf.ones(shape)


def test_negative_and_overflowing_sizes_are_the_librarys_errors():
    with pytest.raises(tf.ShapeError, match="negative"):
        tf.ones((-1,))
    with pytest.raises(tf.ShapeError, match="overflows"):
        tf.ones((2 ** 62, 2 ** 62))


@pytest.mark.parametrize("call", [
    lambda: tf.eye(2 ** 64),
    lambda: tf.tril(tf.ones((2, 2)), k=2 ** 70),
    lambda: tf.rand((2,), seed=2 ** 64),
    lambda: tf.rand((2,), seed=-1),
    lambda: tf.expand_dims(tf.ones((2,)), axis=2 ** 40),
])
def test_scalars_that_do_not_fit_their_c_type(call):
    with pytest.raises(OverflowError):
        call()


def test_python_integers_follow_numpy2s_overflow_rule(np):
    """A Python int outside an integer dtype's range is OverflowError
    everywhere: asarray, full, scalars beside arrays (NumPy 2's rule)."""
    cases = [
        lambda m: m.asarray([300], dtype=m.int8),
        lambda m: m.asarray([-1], dtype=m.uint8),
        lambda m: m.asarray([2 ** 63], dtype=m.int64),
        lambda m: m.full((2,), 2 ** 40, dtype=m.int32),
        lambda m: m.ones((3,), dtype=m.int8) + 300,
        lambda m: m.ones((3,), dtype=m.uint8) * -1,
    ]
    numpy2 = int(np.__version__.split(".")[0]) >= 2
    for make in cases:
        with pytest.raises(OverflowError):
            make(tf)
        if numpy2:                                   # the rule is NumPy's own
            with pytest.raises(OverflowError):
                make(np)
    assert tf.asarray([127, -128], dtype=tf.int8).tolist() == [127, -128]
    assert tf.full((2,), 2 ** 31 - 1, dtype=tf.int32).tolist() == [2 ** 31 - 1] * 2
    assert (tf.ones((2,), dtype=tf.uint8) * 255).tolist() == [255, 255]


def test_repeat_counts():
    x = tf.asarray([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=">= 0"):
        tf.repeat(x, -1)
    with pytest.raises(ValueError, match=">= 0"):
        tf.repeat(x, [1, -1, 2])
    with pytest.raises((MemoryError, tf.ShapeError)):   # the library refuses the size before an index is built
        tf.repeat(x, 2 ** 40)
    assert tf.repeat(x, 0).tolist() == []
    assert tf.repeat(x, [0, 2, 1]).tolist() == [2.0, 2.0, 3.0]


def test_counts_are_checked_before_work():
    """linspace once built a Python list of num values first: 2**62 hung."""
    code = """
import tensorframe as tf
for num in (2 ** 62, 2 ** 40, 2 ** 70):
    try:
        tf.linspace(0, 1, num)
    except (MemoryError, ValueError, OverflowError) as err:
        print(type(err).__name__)
    else:
        print("made it")
"""
    rc, out = run_child(code)
    assert rc == 0, out
    names = out.split()
    assert len(names) == 3 and all(n in ("ShapeError", "OutOfMemoryError", "OverflowError") for n in names), out
    assert tf.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert tf.linspace(2, 3, 4, endpoint=False).tolist() == [2.0, 2.25, 2.5, 2.75]


# ---- names and released arrays ----

@pytest.mark.parametrize("spec", ["cpu\0evil", "cpu\0", "\0"])
def test_device_names_with_nul_are_refused(spec):
    with pytest.raises(ValueError, match="NUL"):
        tf.ones((2,), device=spec)


def test_the_c_layer_keeps_its_handle():
    """With the C hot path an array's handle is its own: no __del__ to call
    by hand, and _h cannot be replaced by a dangling one."""
    x = tf.ones((3,))
    if hasattr(x, "__del__"):
        pytest.skip("the package runs on ctypes alone here (TENSORFRAME_NATIVE=0 or no C layer)")
    with pytest.raises(AttributeError):
        x._h = 1234
    assert (x + x).tolist() == [2.0, 2.0, 2.0] and x[1:].shape == (2,)


def test_odd_operands_get_the_python_path_answer():
    """Whatever the C layer does not take plainly goes to the Python code:
    the same answers and errors with and without it."""
    x, i8 = tf.ones((3,)), tf.asarray([1, 2, 3], dtype=tf.int8)
    assert (x + True).dtype == tf.float32 and (i8 + 1).dtype == tf.int8
    assert (x * 2 ** 60).tolist() == [2.0 ** 60] * 3              # an int past 2^53 for a float array
    with pytest.raises(OverflowError):
        i8 + 300                                                  # out of int8's range
    with pytest.raises(OverflowError):
        i8 * 2 ** 70
    for bad in ("2", None, object(), [1, 2, 3]):
        with pytest.raises(TypeError):
            x + bad
        with pytest.raises(TypeError):
            bad * x
    for key in (1.5, "a", (0, 0), 3, -4, (slice(None), 0)):
        with pytest.raises(IndexError):
            x[key]
    assert x[-3:100:2].shape == (2,) and x[::-1].shape == (3,) and x[()].shape == (3,)
    assert (x / tf.asarray([2], dtype=tf.float64)).dtype == tf.float64      # mixed dtypes: promotion
    with pytest.raises(tf.ShapeError):
        x + tf.ones((2,))


def test_a_released_array_says_so():
    x, y = tf.ones((3,)), tf.ones((3,))
    if not hasattr(x, "__del__"):
        pytest.skip("the C layer frees an array only when it dies (test_the_c_layer_keeps_its_handle)")
    x.__del__()                                      # what a hostile caller can do
    for use in (lambda: x.shape, lambda: x.dtype, lambda: x + 1, lambda: x + y, lambda: tf.exp(x),
                lambda: tf.concat([y, x]), lambda: x.tolist(), lambda: tf.sum(x)):
        with pytest.raises(ValueError, match="released"):
            use()
    assert (y + 1).tolist() == [2.0, 2.0, 2.0]


# ---- DLPack capsules made by hand ----

def _capsule(data, shape, strides, byte_offset=0, bits=32, keep=None):
    """A dltensor_versioned capsule over ctypes memory, no deleter."""
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * ndim)(*shape)
    strides_arr = (ctypes.c_int64 * ndim)(*strides) if strides is not None else None
    m = _dlpack._Versioned()
    m.major, m.minor = 1, 0
    t = m.dl_tensor
    t.data = ctypes.addressof(data)
    t.device_type, t.device_id, t.ndim = _dlpack.kDLCPU, 0, ndim
    t.code, t.bits, t.lanes = 2, bits, 1
    t.shape = ctypes.addressof(shape_arr)
    t.strides = ctypes.addressof(strides_arr) if strides_arr is not None else None
    t.byte_offset = byte_offset
    if keep is not None:
        keep.extend([m, shape_arr, strides_arr])
    return _dlpack._capi.PyCapsule_New(ctypes.addressof(m), _dlpack.VERSIONED, None)


def test_capsules_that_lie_are_refused_in_process():
    keep = []
    data = (ctypes.c_float * 8)(*range(8))
    for strides, offset in (([2 ** 61], 0), ([2 ** 40], 0), ([1], 2 ** 63), ([1], 2 ** 64 - 1)):
        cap = _capsule(data, [2], strides, offset, keep=keep)
        with pytest.raises(BufferError):
            tf.from_dlpack(cap)
        assert _dlpack._capi.PyCapsule_IsValid(id(cap), _dlpack.VERSIONED)   # refused: still the caller's


def test_a_lying_capsule_no_longer_kills_the_interpreter():
    code = """
import ctypes, sys
sys.path.insert(0, %r)
from test_hostile import _capsule
import tensorframe as tf
data, keep = (ctypes.c_float * 8)(), []
try:
    tf.from_dlpack(_capsule(data, [2], [2 ** 61], keep=keep))
except BufferError as err:
    print("refused:", err)
""" % os.path.dirname(os.path.abspath(__file__))
    rc, out = run_child(code)
    assert rc == 0, "the interpreter died (status %d): %s" % (rc, out)
    assert "refused:" in out and "addressable size" in out, out


def test_misaligned_capsules_are_copied_unless_copy_is_false():
    keep = []
    raw = (ctypes.c_ubyte * 64)()
    want = (ctypes.c_float * 3)(1.5, -2.25, 1e30)
    ctypes.memmove(ctypes.addressof(raw) + 1, want, 12)
    with pytest.raises(BufferError, match="not aligned"):
        tf.from_dlpack(_capsule(raw, [3], None, 1, keep=keep), copy=False)
    got = tf.from_dlpack(_capsule(raw, [3], None, 1, keep=keep))
    assert got.tolist() == [1.5, -2.25, pytest.approx(1e30)]
    raw[1] = 0                                       # a copy: the producer's later writes do not reach it
    assert got.tolist()[0] == 1.5


def test_op_lists_come_from_the_library(monkeypatch):
    """The elementwise op lists are the library's op table: the families'
    plain-signature ops, none with parameters, and an op whose function
    the library lacks is left out instead of breaking the import."""
    from tensorframe import _lib
    assert {"add", "swiglu", "eq", "logical_or"} <= set(_lib.ELEMENTWISE_BINARY)
    assert {"gelu", "gelu_tanh", "exp", "isnan", "logical_not"} <= set(_lib.ELEMENTWISE_UNARY)
    assert "leaky_relu" not in _lib.ELEMENTWISE_UNARY and "clamp" not in _lib.ELEMENTWISE_UNARY
    assert "matmul" not in _lib.ELEMENTWISE_BINARY          # not an elementwise family
    assert hasattr(tf, "gelu_tanh") and hasattr(tf, "silu")

    class Without:
        def __init__(self, real, hidden):
            self.real, self.hidden = real, hidden

        def __getattr__(self, name):
            if name == self.hidden:
                raise AttributeError(name)
            return getattr(self.real, name)

    monkeypatch.setattr(_lib, "_cdll", Without(_lib._cdll, "tf_gelu"))
    unary = _lib._ops_of((_lib.KERNEL_MATH,), 1)
    assert "gelu" not in unary and "gelu_tanh" in unary
