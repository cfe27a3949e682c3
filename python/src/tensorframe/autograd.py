"""Grad mode (torch.no_grad, enable_grad, set_grad_enabled): per thread,
as the library keeps it. Gradients themselves are Array.requires_grad,
Array.backward() and Array.grad."""
import functools

from ._lib import lib


def is_grad_enabled():
    return lib.tf_grad_enabled()


class set_grad_enabled:
    """Grad mode on or off from here (a call), or inside a with block."""

    def __init__(self, mode):
        self._prev = lib.tf_set_grad_enabled(bool(mode))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.tf_set_grad_enabled(self._prev)
        return False


class _Mode:
    _mode = True

    def __enter__(self):
        self._prev = lib.tf_set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        lib.tf_set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_Mode):
    """Ops record nothing inside (a with block, or a decorated function)."""
    _mode = False


class enable_grad(_Mode):
    _mode = True
