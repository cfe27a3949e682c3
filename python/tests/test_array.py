"""The array type against NumPy (float64 references) on fresh random
inputs: operators with broadcasting and scalars, dtypes, views, indexing,
devices, and errors that carry the library's status and message."""
import operator

import pytest

import tensorframe as tf

TOL = {"float32": 2e-6, "float64": 1e-13, "float16": 2e-3, "bfloat16": 1.6e-2}


def to_np(x, np):
    return np.asarray(x.to("cpu"))


def shapes_that_broadcast(rng):
    ndim = int(rng.integers(0, 4))
    a = [int(rng.integers(1, 5)) for _ in range(ndim)]
    b = [s if rng.random() < 0.6 else 1 for s in a][int(rng.integers(0, ndim + 1)):]
    return tuple(a), tuple(b)


def random_array(rng, np, shape, dtype, device, positive=False):
    if dtype in ("int32", "int64", "int8", "uint8"):
        lo = 1 if positive else (-9 if dtype != "uint8" else 0)
        host = rng.integers(lo, 10, size=shape).astype(dtype)
    elif dtype == "bool":
        host = rng.random(shape) < 0.5
    else:
        host = rng.uniform(0.5 if positive else -3, 3, size=shape)
        if dtype == "bfloat16":
            bits = np.asarray(host, dtype=np.float32).reshape(-1).view(np.uint32) & 0xFFFF0000
            host = bits.view(np.float32).reshape(shape)                 # exactly representable in bf16
            return tf.asarray(host, device=device).astype(tf.bfloat16), host.astype(np.float64)
        host = host.astype(dtype)
    return tf.asarray(host, device=device), host


def close(got, want, dtype, np):
    got = np.asarray(got, dtype=np.float64) if dtype not in ("bool",) else np.asarray(got)
    if dtype in TOL:
        scale = max(1.0, float(np.max(np.abs(want))) if np.size(want) else 1.0)
        np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * scale)
    else:
        np.testing.assert_array_equal(got, want)


ARITH = [("+", operator.add), ("-", operator.sub), ("*", operator.mul), ("/", operator.truediv)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "float16", "bfloat16"])
@pytest.mark.parametrize("name,op", ARITH)
def test_arithmetic_broadcasts_like_numpy(device, rng, np, dtype, name, op):
    for _ in range(4):
        sa, sb = shapes_that_broadcast(rng)
        a, ha = random_array(rng, np, sa, dtype, device)
        b, hb = random_array(rng, np, sb, dtype, device, positive=(name == "/"))
        got = op(a, b)
        want = op(ha.astype(np.float64), hb.astype(np.float64))
        assert got.shape == want.shape
        assert got.device == device
        if name == "/" and dtype.startswith("int"):
            assert got.dtype == tf.float32          # the library's rule: integer division gives f32
            close(got, want, "float32", np)
        else:
            assert got.dtype.name == dtype
            close(got, want, dtype, np)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_comparisons_and_logic(device, rng, np, dtype):
    sa, sb = shapes_that_broadcast(rng)
    a, ha = random_array(rng, np, sa, dtype, device)
    b, hb = random_array(rng, np, sb, dtype, device)
    for op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
        got = op(a, b)
        assert got.dtype == tf.bool
        np.testing.assert_array_equal(to_np(got, np), op(ha, hb))
    if dtype == "bool":
        np.testing.assert_array_equal(to_np(a & b, np), ha & hb)
        np.testing.assert_array_equal(to_np(a | b, np), ha | hb)
        np.testing.assert_array_equal(to_np(a ^ b, np), ha ^ hb)
        np.testing.assert_array_equal(to_np(~a, np), ~ha)


def test_scalars_take_the_arrays_dtype(device, rng, np):
    a, ha = random_array(rng, np, (3, 4), "float32", device)
    for got, want in ((a + 1, ha + 1), (2 - a, 2 - ha), (a * 0.5, ha * 0.5), (1 / (abs(a) + 1), 1 / (abs(ha) + 1)),
                      (a ** 2, ha ** 2), (-a, -ha)):
        assert got.dtype == tf.float32
        close(got, want.astype(np.float64), "float32", np)
    i, hi = random_array(rng, np, (5,), "int32", device)
    assert (i + 3).dtype == tf.int32
    np.testing.assert_array_equal(to_np(i + 3, np), hi + 3)
    assert (i * 1.5).dtype == tf.float32                      # a float scalar makes an integer array float
    np.testing.assert_array_equal(to_np(i // 4, np), hi // 4)
    np.testing.assert_array_equal(to_np(i % 4, np), hi % 4)
    np.testing.assert_array_equal(to_np(-i, np), -hi)
    np.testing.assert_array_equal(to_np(abs(i), np), np.abs(hi))


def test_matmul(device, rng, np):
    for sa, sb in (((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)), ((2, 1, 3, 4), (5, 4, 2))):
        a, ha = random_array(rng, np, sa, "float32", device)
        b, hb = random_array(rng, np, sb, "float32", device)
        got = a @ b
        want = ha.astype(np.float64) @ hb.astype(np.float64)
        assert got.shape == want.shape
        np.testing.assert_allclose(to_np(got, np), want, rtol=1e-5, atol=1e-5)


def test_linear_fused(device, rng, np):
    x, hx = random_array(rng, np, (2, 5, 8), "float32", device)
    w, hw = random_array(rng, np, (6, 8), "float32", device)
    b, hb = random_array(rng, np, (6,), "float32", device)
    r, hr = random_array(rng, np, (5, 6), "float32", device)
    pre = hx.astype(np.float64) @ hw.astype(np.float64).T + hb
    for name, f in (("relu", lambda v: np.maximum(v, 0)), ("silu", lambda v: v / (1 + np.exp(-v))), (None, lambda v: v)):
        got = tf.linear_fused(x, w, b, activation=name, residual=r)
        np.testing.assert_allclose(to_np(got, np), f(pre) + hr, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        tf.linear_fused(x, w, activation="no_such_op")
    with pytest.raises(tf.InvalidArgumentError):
        tf.linear_fused(x, w, activation="clamp")


def test_add_norms(device, rng, np):
    x, hx = random_array(rng, np, (3, 4, 16), "float32", device)
    r, hr = random_array(rng, np, (4, 16), "float32", device)
    w, hw = random_array(rng, np, (16,), "float32", device)
    b, hb = random_array(rng, np, (16,), "float32", device)
    h = (hx + hr).astype(np.float64)                 # the sum rounded to f32, then the norm
    c = h - h.mean(axis=-1, keepdims=True)
    want = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5) * hw + hb
    np.testing.assert_allclose(to_np(tf.add_layernorm(x, r, w, b, eps=1e-5), np), want, rtol=2e-5, atol=2e-5)
    want = h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-6) * hw
    np.testing.assert_allclose(to_np(tf.add_rmsnorm(x, r, w), np), want, rtol=2e-5, atol=2e-5)
    with pytest.raises(tf.ShapeError):
        tf.add_rmsnorm(r, x)


def test_slices_are_views_that_write_through(device, rng, np):
    base, host = random_array(rng, np, (6, 7), "float32", device)
    for _ in range(20):
        key = tuple(slice(int(rng.integers(-8, 8)), int(rng.integers(-8, 8)), int(rng.choice([1, 2, 3, -1, -2])))
                    for _ in range(2))
        np.testing.assert_array_equal(to_np(base[key], np), host[key])
    np.testing.assert_array_equal(to_np(base[2], np), host[2])
    np.testing.assert_array_equal(to_np(base[-1, 3], np), host[-1, 3])
    np.testing.assert_array_equal(to_np(base[..., 1:3], np), host[..., 1:3])
    np.testing.assert_array_equal(to_np(base[None, :, None, 2], np), host[None, :, None, 2])
    np.testing.assert_array_equal(to_np(base.T[1:4], np), host.T[1:4])
    view = base[1:3, ::2]
    view[...] = 7.0                                     # through the view into base
    host[1:3, ::2] = 7.0
    np.testing.assert_array_equal(to_np(base, np), host)
    base[0] = tf.arange(7, dtype=tf.float32, device=device)
    host[0] = np.arange(7)
    np.testing.assert_array_equal(to_np(base, np), host)
    base += 1
    host += 1
    np.testing.assert_array_equal(to_np(view, np), host[1:3, ::2])   # in place: the view sees it


def test_array_indices(device, rng, np):
    x, hx = random_array(rng, np, (5, 4), "float32", device)
    idx = rng.integers(0, 5, size=(3,))
    np.testing.assert_array_equal(to_np(x[tf.asarray(idx, device=device)], np), hx[idx])
    cols = rng.integers(0, 4, size=(2, 2))
    np.testing.assert_array_equal(to_np(x[:, tf.asarray(cols, device=device)], np), hx[:, cols])
    mask = hx > 0
    np.testing.assert_array_equal(to_np(x[tf.asarray(mask, device=device)], np), hx[mask])
    np.testing.assert_array_equal(to_np(x[x[:, 0] > 0], np), hx[hx[:, 0] > 0])


def test_attributes_conversions_and_moves(device, np):
    x = tf.arange(6, dtype=tf.float32, device=device).reshape((2, 3))
    assert (x.shape, x.ndim, x.size, x.dtype, len(x)) == ((2, 3), 2, 6, tf.float32, 2)
    assert x.device == device and str(x.device) == device
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert float(x[1, 2]) == 5.0 and int(x[0, 1]) == 1 and bool(x[0, 1])
    y = x.to("cpu")
    assert y.device == "cpu" and y.tolist() == x.tolist()
    assert x.to(device) is x
    for d in tf.devices():
        assert x.to(d).tolist() == x.tolist()
    assert x.astype(tf.int64).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert x.mT.shape == (3, 2)
    assert tf.asarray([[True, False]], device=device).dtype == tf.bool
    assert tf.asarray([1, 2], device=device).dtype == tf.int64
    assert tf.asarray([1.5, 2], device=device).dtype == tf.float32
    assert tf.asarray(2 ** 60, dtype=tf.int64, device=device).item() == 2 ** 60     # not through a double


def test_repr_and_str(device):
    x = tf.ones((2, 3), device=device) + 1
    assert str(x) == "[[2., 2., 2.],\n [2., 2., 2.]]"
    assert repr(x) == "Array([[2., 2., 2.],\n       [2., 2., 2.]], dtype=float32, device='%s')" % device
    assert str(tf.asarray([True, False], device=device)) == "[True, False]"
    assert str(tf.asarray(3, device=device)) == "3"


def test_errors_carry_status_and_message(device):
    a = tf.ones((2, 3), device=device)
    with pytest.raises(tf.ShapeError) as err:
        a + tf.ones((4,), device=device)
    assert err.value.status == "TF_ERR_SHAPE" and err.value.code == -5
    assert "[2,3] and [4] do not broadcast" in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(tf.UnknownDeviceError) as err:
        tf.ones((1,), device="nosuch:3")
    assert err.value.status == "TF_ERR_UNKNOWN_DEVICE"
    with pytest.raises(IndexError):
        a[2]
    with pytest.raises(IndexError):
        a[0, 0, 0]
    with pytest.raises(TypeError):
        tf.ones((2,), dtype=tf.float32, device=device) & 1         # bitwise: integers and bools only
    with pytest.raises(TypeError):
        tf.exp(tf.ones((2,), dtype=tf.int32, device=device))   # the library's TF_ERR_DTYPE, a TypeError
    with pytest.raises(ValueError):
        bool(a)
    with pytest.raises(tf.ShapeError):
        tf.reshape(a, (4, 2))
    with pytest.raises(TypeError):
        tf.Array()
    with pytest.raises(tf.AxisError):
        tf.softmax(a, axis=5)
    assert a.tolist() == [[1.0] * 3] * 2                       # nothing touched by the failures
