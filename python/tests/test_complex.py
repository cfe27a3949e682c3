"""complex64 and complex128: creation, the elementwise functions, the
standard's promotion, reductions, products and linalg, against NumPy on
fresh random inputs, on every device (complex ops run on the CPU for
devices without complex kernels: the library's fallback)."""
import cmath
import math

import pytest

import tensorframe as tf

COMPLEX = ["complex64", "complex128"]
UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos",
         "atan", "asinh", "acosh", "atanh", "log2", "log10", "square", "negative", "conj", "sign"]
NUMPY_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
              "atanh": "arctanh"}


def host_values(np, rng, shape, dtype):
    return (rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(dtype)


def close(np, got, want, dtype):
    got = np.asarray(got.to("cpu"))
    assert str(got.dtype) == str(np.asarray(want).dtype), (got.dtype, np.asarray(want).dtype)
    tol = 2e-5 if "64" in str(dtype) and "128" not in str(dtype) else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_creation_and_values(np):
    x = tf.asarray([1 + 2j, -3.5j, 2])
    assert x.dtype == tf.complex64                         # the default float's precision
    assert x.tolist() == [1 + 2j, -3.5j, 2 + 0j]
    assert repr(x) == "Array([1.+2.j, 0.-3.5j, 2.+0.j], dtype=complex64, device='%s')" % x.device.name
    assert complex(x[1]) == -3.5j
    with pytest.raises(TypeError):
        float(x[0])
    with pytest.raises(TypeError):                         # the standard refuses dropping the imaginary part
        x.astype(tf.float32)
    assert x.astype(tf.bool).tolist() == [True, True, True]
    assert tf.full((2,), 1 - 1j, dtype=tf.complex128).tolist() == [1 - 1j, 1 - 1j]
    assert tf.zeros((2,), dtype=tf.complex64).tolist() == [0j, 0j]
    z = tf.linspace(0, 2 + 4j, 3)
    assert z.tolist() == [0j, 1 + 2j, 2 + 4j]
    assert tf.isdtype(tf.complex64, "complex floating") and not tf.isdtype(tf.complex64, "real floating")
    assert tf.isdtype(tf.complex128, "numeric")
    assert tf.finfo(tf.complex64).dtype == tf.float32 and tf.finfo(tf.complex128).eps == 2.0 ** -52
    assert tf.real(x).dtype == tf.float32 and tf.imag(x).tolist() == [2.0, -3.5, 0.0]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", UNARY)
def test_unary_against_numpy(np, rng, device, dtype, name):
    host = host_values(np, rng, (5, 7), dtype)
    got = getattr(tf, name)(tf.asarray(host, device=device))
    want = getattr(np, NUMPY_NAME.get(name, name))(host)
    if name == "sign":                                     # NumPy 2: z / |z|, as the standard
        want = host / np.abs(host)
    assert got.device.name == device
    close(np, got, want, dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_abs_real_imag_give_real_dtypes(np, rng, dtype):
    host = host_values(np, rng, (4, 3), dtype)
    x = tf.asarray(host)
    for fn, want in ((tf.abs, np.abs(host)), (tf.real, host.real), (tf.imag, host.imag)):
        close(np, fn(x), want, dtype)


@pytest.mark.parametrize("other", ["float32", "float64", "complex64", "complex128", "int32"])
def test_binary_promotion(np, rng, device, other):
    a_host = host_values(np, rng, (3, 4), "complex64")
    b_host = (rng.uniform(1, 2, (4,)) * (1 + 0.5j) if other.startswith("complex") else
              rng.integers(1, 4, (4,)) if other == "int32" else rng.uniform(1, 2, (4,))).astype(other)
    a, b = tf.asarray(a_host, device=device), tf.asarray(b_host, device=device)
    want_dtype = "complex128" if other in ("float64", "complex128") else "complex64"
    if other == "int32":                                   # the library's rule (the standard leaves it open)
        b_host = b_host.astype("complex64")
    for op in ("__add__", "__sub__", "__mul__", "__truediv__", "__pow__"):
        got = getattr(a, op)(b)
        assert got.dtype.name == want_dtype, (op, got.dtype)
        want = getattr(a_host.astype(want_dtype), op)(b_host.astype(want_dtype))
        close(np, got, want, want_dtype)
    assert (a == a).tolist() == [[True] * 4] * 3
    assert not tf.any(a != a)


def test_python_scalars_are_weak(np):
    x32 = tf.asarray([1.0, 2.0], dtype=tf.float32)
    assert (x32 * 1j).dtype == tf.complex64               # a float array's precision
    assert (tf.asarray([1.0], dtype=tf.float64) + 1j).dtype == tf.complex128
    z = tf.asarray([1 + 1j], dtype=tf.complex64)
    assert (z * 2.5).dtype == tf.complex64 and (z + 1).dtype == tf.complex64
    assert (z * 2j).tolist() == [-2 + 2j]
    with pytest.raises(TypeError):                         # a complex scalar with an integer array
        tf.asarray([1, 2]) + 1j


@pytest.mark.parametrize("dtype", COMPLEX)
def test_reductions_and_products(np, rng, device, dtype):
    host = host_values(np, rng, (4, 6), dtype)
    x = tf.asarray(host, device=device)
    close(np, tf.sum(x, axis=1), host.sum(axis=1), dtype)
    close(np, tf.prod(x, axis=0), host.prod(axis=0), dtype)
    close(np, tf.mean(x), host.mean(), dtype)
    close(np, tf.cumulative_sum(x, axis=1), np.cumsum(host, axis=1), dtype)
    other = host_values(np, rng, (6, 3), dtype)
    close(np, x @ tf.asarray(other, device=device), host @ other, dtype)
    close(np, tf.vecdot(x, x), np.sum(np.conj(host) * host, axis=-1), dtype)     # x1 conjugated
    close(np, tf.linalg.vector_norm(x, axis=1), np.linalg.norm(host, axis=1), dtype)
    close(np, tf.linalg.matrix_norm(x), np.linalg.norm(host), dtype)
    assert tf.any(x) and tf.all(x)


def test_unique_sorts_by_real_then_imaginary(np):
    x = tf.asarray([2 + 1j, 1 + 5j, 2 - 1j, 1 + 5j, 0j])
    assert tf.unique_values(x).tolist() == [0j, 1 + 5j, 2 - 1j, 2 + 1j]
    assert tf.unique_counts(x).counts.tolist() == [1, 2, 1, 1]


@pytest.mark.parametrize("dtype", COMPLEX)
def test_linalg_against_numpy(np, rng, dtype):
    """The factorizations through LAPACK's complex routines."""
    a_host = host_values(np, rng, (3, 4, 4), dtype)
    b_host = host_values(np, rng, (3, 4, 2), dtype)
    a, b = tf.asarray(a_host), tf.asarray(b_host)
    la = tf.linalg
    close(np, la.solve(a, b), np.linalg.solve(a_host, b_host), dtype)
    close(np, la.inv(a), np.linalg.inv(a_host), dtype)
    close(np, la.det(a), np.linalg.det(a_host), dtype)
    sign, logabs = la.slogdet(a)
    want_sign, want_log = np.linalg.slogdet(a_host)
    close(np, sign, want_sign, dtype)
    close(np, logabs, want_log, dtype)
    q, r = la.qr(a)
    close(np, q @ r, a_host, dtype)
    close(np, la.svdvals(a), np.linalg.svd(a_host, compute_uv=False), dtype)
    u, s, vh = la.svd(a, full_matrices=False)
    close(np, (u * s[..., None, :]) @ vh, a_host, dtype)
    h_host = (a_host @ np.conj(np.swapaxes(a_host, -1, -2)) + 4 * np.eye(4)).astype(dtype)
    h = tf.asarray(h_host)
    close(np, la.cholesky(h), np.linalg.cholesky(h_host), dtype)
    w, v = la.eigh(h)
    close(np, w, np.linalg.eigvalsh(h_host), dtype)
    v_host = np.asarray(v)
    close(np, tf.asarray(h_host @ v_host), v_host * np.asarray(w)[..., None, :], dtype)
    close(np, la.pinv(a), np.linalg.pinv(a_host), dtype)


def test_special_values_follow_c99():
    z = tf.asarray([complex(-math.inf, 1.0), complex(math.inf, 0.5), complex(0.0, 0.0)], dtype=tf.complex128)
    e = tf.exp(z).tolist()
    assert e[0] == 0j and math.isinf(e[1].real) and e[2] == 1
    assert tf.tanh(z).tolist()[1] == complex(1.0, 0.0)
    assert tf.log(z).tolist()[2].real == -math.inf
    assert tf.isnan(tf.asarray([complex(math.nan, 0)])).tolist() == [True]
    assert tf.isinf(tf.asarray([complex(0, math.inf)])).tolist() == [True]
    assert tf.isfinite(z).tolist() == [False, False, True]
    assert cmath.isclose(tf.sqrt(tf.asarray([-4 + 0j])).tolist()[0], 2j)
    assert cmath.isclose(tf.tan(tf.asarray([1 + 1000j])).tolist()[0], 1j)     # sin/cos would give inf/inf
