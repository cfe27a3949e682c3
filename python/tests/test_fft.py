"""The fft extension against numpy.fft (pocketfft) on fresh random inputs:
every function, both precisions, every scaling, n and s padding and
trimming, on every device (the transform runs on the host through FFTW;
the result comes back to the input's device)."""
import pytest

import tensorframe as tf

NORMS = ["backward", "ortho", "forward"]


def close(np, got, want, single):
    got_np = np.asarray(got.to("cpu"))
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    # The array API keeps single precision single; numpy before 2.0 widened
    # every transform to double, so the expected dtype comes from `single`.
    want_dtype = {"complex128": "complex64", "float64": "float32"}.get(str(want.dtype), str(want.dtype)) \
        if single else str(want.dtype)
    assert str(got_np.dtype) == want_dtype, (got_np.dtype, want_dtype)
    tol = 1e-4 if single else 1e-11
    np.testing.assert_allclose(got_np, want, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(want), initial=0))))


@pytest.mark.parametrize("single", [True, False])
@pytest.mark.parametrize("norm", NORMS)
def test_complex_transforms(np, rng, device, single, norm):
    dtype = "complex64" if single else "complex128"
    host = (rng.standard_normal((4, 6, 5)) + 1j * rng.standard_normal((4, 6, 5))).astype(dtype)
    x = tf.asarray(host, device=device)
    for name, kw in (("fft", {}), ("ifft", {"axis": 1}), ("fft", {"n": 8}), ("ifft", {"n": 3, "axis": 0}),
                     ("fftn", {}), ("ifftn", {"axes": (0, 2)}), ("fftn", {"s": (3, 7), "axes": (1, 2)}),
                     ("hfft", {"n": 9})):
        got = getattr(tf.fft, name)(x, norm=norm, **kw)
        assert got.device.name == device
        want = getattr(np.fft, name)(host, norm=norm, **kw)
        if name == "hfft":                                 # NumPy computes it in double: its dtype is float64
            want = want.astype("float32" if single else "float64")
        close(np, got, want, single)


@pytest.mark.parametrize("single", [True, False])
@pytest.mark.parametrize("norm", NORMS)
def test_real_transforms(np, rng, device, single, norm):
    dtype = "float32" if single else "float64"
    host = rng.standard_normal((3, 8, 7)).astype(dtype)
    x = tf.asarray(host, device=device)
    for name, kw in (("rfft", {}), ("rfft", {"n": 10, "axis": 1}), ("rfftn", {}), ("rfftn", {"axes": (0, 1)}),
                     ("ihfft", {})):
        close(np, getattr(tf.fft, name)(x, norm=norm, **kw), getattr(np.fft, name)(host, norm=norm, **kw), single)
    spectrum = np.fft.rfftn(host).astype("complex64" if single else "complex128")
    s = tf.asarray(spectrum, device=device)
    for name, kw in (("irfft", {}), ("irfft", {"n": 12}), ("irfftn", {"s": (3, 8, 7), "axes": (0, 1, 2)}), ("irfftn", {})):
        want = getattr(np.fft, name)(spectrum, norm=norm, **kw).astype(dtype)
        close(np, getattr(tf.fft, name)(s, norm=norm, **kw), want, single)
    back = tf.fft.irfftn(tf.fft.rfftn(x, norm=norm), s=host.shape, norm=norm)   # the round trip
    close(np, back, host, single)


def test_frequencies_and_shifts(np):
    for n in (1, 5, 8):
        np.testing.assert_allclose(np.asarray(tf.fft.fftfreq(n, d=0.25, dtype=tf.float64)), np.fft.fftfreq(n, d=0.25))
        np.testing.assert_allclose(np.asarray(tf.fft.rfftfreq(n, dtype=tf.float64)), np.fft.rfftfreq(n))
    x = np.arange(30).reshape(5, 6)
    assert tf.fft.fftshift(tf.asarray(x)).tolist() == np.fft.fftshift(x).tolist()
    assert tf.fft.ifftshift(tf.asarray(x), axes=1).tolist() == np.fft.ifftshift(x, axes=1).tolist()
    assert tf.fft.fftfreq(4).dtype == tf.float32


def test_refusals():
    with pytest.raises(ValueError, match="norm"):
        tf.fft.fft(tf.ones((4,), dtype=tf.complex64), norm="sideways")
    with pytest.raises(TypeError):
        tf.fft.rfft(tf.ones((4,), dtype=tf.complex64))
    with pytest.raises(TypeError):
        tf.fft.fft(tf.arange(4))
    with pytest.raises(ValueError):
        tf.fft.fft(tf.ones((4,), dtype=tf.complex64), n=0)
    with pytest.raises(tf.ShapeError):                   # a transform of no points
        tf.fft.fft(tf.ones((3, 0), dtype=tf.complex64))
