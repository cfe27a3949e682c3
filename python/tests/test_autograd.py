"""Autograd from Python against torch.autograd (Debian's PyTorch) on the
same inputs, on every device; grad mode; the optimizers against torch.optim
step by step."""
import pytest

import tensorframe as tf
from conftest import need


def host(x):
    import numpy
    return numpy.asarray(x.to("cpu"), dtype=numpy.float64)


# Each case: input shapes, a value range, and the same function written for
# both libraries (m is the module: tf or torch).
CASES = {
    "tanh*x": ([(3, 4)], (-2, 2), lambda m, x: (m.tanh(x) * x)),
    "softmax": ([(3, 5)], (-2, 2), lambda m, x: m.nn.functional.softmax(x, dim=1) if m.__name__ == "torch"
                else m.exp(x) / m.sum(m.exp(x), axis=1, keepdims=True)),
    "broadcast": ([(3, 4), (4,)], (-2, 2), lambda m, a, b: a * b + b),
    "matmul": ([(3, 4), (4, 2)], (-1, 1), lambda m, a, b: a @ b),
    "div_log": ([(2, 3), (2, 3)], (0.5, 2), lambda m, a, b: m.log(a) / b),
    "mean_sq": ([(4, 3)], (-2, 2), lambda m, x: ((x - m.mean(x, **_axis(m, 0, True))) ** 2)),
    "views": ([(2, 3, 4)], (-2, 2), lambda m, x: _permute(m, x)[1:, ::2] * 3),
    "max": ([(3, 5)], (-2, 2), lambda m, x: m.max(x, **_axis(m, 1, False)) if m.__name__ != "torch"
            else m.max(x, dim=1).values),
    "sqrt_sin": ([(5,)], (0.2, 2), lambda m, x: m.sqrt(x) * m.sin(x)),
    "concat_flip": ([(2, 3), (2, 2)], (-2, 2), lambda m, a, b: _concat(m, [m.flip(a, **_dims(m, (0, 1))), b * b])),
    "cumsum_tril": ([(4, 4)], (-2, 2), lambda m, x: m.tril(_cumsum(m, x, 1), **_diagonal(m, -1))),
    "sort": ([(3, 5)], (-2, 2), lambda m, x: m.sort(x, **_axis1(m)) if m.__name__ != "torch"
             else m.sort(x, dim=1).values),
    "inv_solve": ([(3, 3), (3, 2)], "dominant", lambda m, a, b: m.linalg.inv(a) @ m.linalg.solve(a, b)),
    "det_slogdet": ([(2, 3, 3)], "dominant", lambda m, a: m.linalg.det(a) + m.linalg.slogdet(a)[1]),
    "cholesky": ([(3, 3)], "spd", lambda m, a: m.linalg.cholesky(a)),
}


def _concat(m, xs):
    return m.cat(xs, dim=1) if m.__name__ == "torch" else m.concat(xs, axis=1)


def _dims(m, axes):
    return {"dims": axes} if m.__name__ == "torch" else {"axis": axes}


def _cumsum(m, x, axis):
    return m.cumsum(x, dim=axis) if m.__name__ == "torch" else m.cumulative_sum(x, axis=axis)


def _diagonal(m, k):
    return {"diagonal": k} if m.__name__ == "torch" else {"k": k}


def _axis1(m):
    return {"axis": 1}


def _values(rng, shape, kind):
    """Inputs in a range, or matrices well away from singular: x + 3 I
    ("dominant"), or symmetric positive definite r r^T + 3 I ("spd": the
    leaf itself symmetric, so torch's symmetrized cholesky gradient is the
    one to match)."""
    import numpy
    if kind == "dominant":                        # the square ones; a right-hand side as drawn
        square = len(shape) >= 2 and shape[-1] == shape[-2]
        return rng.uniform(-1, 1, shape) + (3 * numpy.eye(shape[-1]) if square else 0)
    if kind == "spd":
        r = rng.uniform(-1, 1, shape)
        return r @ numpy.swapaxes(r, -1, -2) + 3 * numpy.eye(shape[-1])
    lo, hi = kind
    return rng.uniform(lo, hi, shape)


def _axis(m, axis, keep):
    return {"dim": axis, "keepdim": keep} if m.__name__ == "torch" else {"axis": axis, "keepdims": keep}


def _permute(m, x):
    return x.permute(2, 0, 1) if m.__name__ == "torch" else tf.permute_dims(x, (2, 0, 1))


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_torch(device, rng, name):
    torch = need("torch")
    shapes, kind, f = CASES[name]
    values = [_values(rng, s, kind) for s in shapes]
    weights = None
    xs = [tf.asarray(v.astype("float32"), device=device) for v in values]
    for x in xs:
        x.requires_grad = True
    ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    out_tf, out_t = f(tf, *xs), f(torch, *ts)
    weights = rng.uniform(0.5, 1.5, tuple(out_t.shape))
    (tf.sum(out_tf * tf.asarray(weights.astype("float32"), device=device))).backward()
    (out_t * torch.tensor(weights)).sum().backward()
    for x, t in zip(xs, ts):
        got, want = host(x.grad), t.grad.numpy()
        assert got.shape == want.shape
        assert abs(got - want).max() <= 1e-4 * (1 + abs(want).max()), (name, device)


def test_grad_mode_and_leaves(device):
    x = tf.asarray([1.0, 2.0, 3.0], device=device)
    assert not x.requires_grad and x.grad is None
    x.requires_grad = True
    assert x.is_leaf
    y = x * x
    assert y.requires_grad and not y.is_leaf
    with tf.no_grad():
        z = x * 2
        assert not tf.is_grad_enabled()
    assert tf.is_grad_enabled() and not z.requires_grad
    tf.sum(y).backward()
    assert host(x.grad).tolist() == [2.0, 4.0, 6.0]
    x.grad = None
    assert x.grad is None
    with pytest.raises(tf.TensorframeError, match="does not require a gradient"):
        z.backward()
    with pytest.raises(tf.TensorframeError, match="requires a gradient"):
        x += 1                                    # an in-place write into a leaf, as PyTorch refuses
    d = x.detach()
    assert not d.requires_grad

    @tf.no_grad()
    def update(p):
        p += 1
    update(x)
    assert host(x).tolist() == [2.0, 3.0, 4.0]


@pytest.mark.parametrize("kind", ["sgd", "sgd_nesterov", "adam", "adamw"])
def test_optimizers_match_torch(device, rng, kind):
    torch = need("torch")
    start = rng.uniform(-1, 1, (4, 3))
    data = rng.uniform(-1, 1, (5, 4))
    w = tf.asarray(start.astype("float32"), device=device)
    w.requires_grad = True
    tw = torch.tensor(start.astype("float32"), requires_grad=True)
    make = {
        "sgd": (lambda p: tf.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
        "sgd_nesterov": (lambda p: tf.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
                         lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
        "adam": (lambda p: tf.optim.Adam(p, lr=0.01, weight_decay=0.1),
                 lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1)),
        "adamw": (lambda p: tf.optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
    }[kind]
    opt, topt = make[0]([w]), make[1]([tw])
    x = tf.asarray(data.astype("float32"), device=device)
    tx = torch.tensor(data.astype("float32"))
    for _ in range(5):
        loss = tf.sum(tf.tanh(x @ w) ** 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
        tloss = (torch.tanh(tx @ tw) ** 2).sum()
        tloss.backward()
        topt.step()
        topt.zero_grad()
    assert abs(host(w) - tw.detach().numpy()).max() <= 2e-5
    assert opt.steps == 5


def test_clip_grad_norm(device):
    a = tf.asarray([3.0, 4.0], device=device)
    a.requires_grad = True
    tf.sum(a * a).backward()                      # grad (6, 8): norm 10
    norm = tf.optim.clip_grad_norm_([a], 5.0)
    assert abs(norm - 10) < 1e-5
    assert abs(host(a.grad) - [3.0, 4.0]).max() < 1e-5
