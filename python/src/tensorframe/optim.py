"""torch.optim's SGD, Adam and AdamW over Arrays that require gradients,
and clip_grad_norm_, on the library's tf_optimizer."""
import ctypes

from ._lib import OptimizerConfig, check, lib

SGD_KIND, ADAM_KIND, ADAMW_KIND = 0, 1, 2


class Optimizer:
    def __init__(self, params, kind, **settings):
        self.params = list(params)
        config = lib.tf_optimizer_defaults(kind)
        for name, value in settings.items():
            if value is not None:
                setattr(config, name, value)
        handles = (ctypes.c_void_p * max(1, len(self.params)))(*[p._h for p in self.params])
        out = ctypes.c_void_p()
        check(lib.tf_optimizer_create(ctypes.byref(config), len(self.params), handles, ctypes.byref(out)))
        self._h = out.value

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._h = None
            lib.tf_optimizer_destroy(h)

    def step(self):
        check(lib.tf_optimizer_step(self._h))

    def zero_grad(self, set_to_none=True):
        lib.tf_optimizer_zero_grad(self._h)

    @property
    def lr(self):
        return self._lr

    @lr.setter
    def lr(self, value):
        check(lib.tf_optimizer_set_lr(self._h, float(value)))
        self._lr = float(value)

    @property
    def steps(self):
        return lib.tf_optimizer_steps(self._h)


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, SGD_KIND, lr=float(lr), momentum=float(momentum), dampening=float(dampening),
                         weight_decay=float(weight_decay), nesterov=bool(nesterov))
        self._lr = float(lr)


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, _kind=ADAM_KIND):
        super().__init__(params, _kind, lr=float(lr), beta1=float(betas[0]), beta2=float(betas[1]),
                         eps=float(eps), weight_decay=float(weight_decay))
        self._lr = float(lr)


class AdamW(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr, betas, eps, weight_decay, _kind=ADAMW_KIND)


def clip_grad_norm_(params, max_norm):
    """Scale all the gradients together so that their 2-norm is at most
    max_norm; returns the norm before."""
    params = list(params)
    handles = (ctypes.c_void_p * max(1, len(params)))(*[p._h for p in params])
    norm = ctypes.c_double()
    check(lib.tf_clip_grad_norm(len(params), handles, float(max_norm), ctypes.byref(norm)))
    return norm.value
