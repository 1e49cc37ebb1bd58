"""alk.optim: SGD, Adam and AdamW over alk's C++ optimizers, learning-rate schedules, clipping.

    opt = alk.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss.backward(); opt.step(); opt.zero_grad()

Updates are lazy ops assigned into the parameters; one step() computes them all in one
schedule. The learning rate is a tensor the kernels read, so `opt.lr = x` never recompiles.
"""
from . import _C
from ._C.optim import (clip_grad_norm, constant_lr, cosine_lr, linear_lr, step_lr,  # noqa: F401
                       warmup)


def _named(params):
    """(name, tensor) pairs from model.parameters(), model.named_parameters() or a list of either."""
    params = list(params)
    if not params:
        raise ValueError(f"optimizer got an empty parameter list (at {_C._caller()})")
    if isinstance(params[0], tuple):
        return [(str(n), p) for n, p in params]
    return [(str(i), p) for i, p in enumerate(params)]


def _check(lr, eps=None, betas=None, weight_decay=0.0, momentum=0.0):
    where = _C._caller()
    if lr < 0:
        raise ValueError(f"Invalid learning rate: {lr} (at {where})")
    if eps is not None and eps < 0:
        raise ValueError(f"Invalid epsilon value: {eps} (at {where})")
    if betas is not None and not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
        raise ValueError(f"Invalid beta parameters: {betas} (each in [0, 1)) (at {where})")
    if weight_decay < 0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (at {where})")
    if momentum < 0:
        raise ValueError(f"Invalid momentum value: {momentum} (at {where})")


class _StateDict:
    def state_dict(self):
        """Per-parameter state as '<param name>.<slot>' (and '<param name>.step'), plus 'step'."""
        return dict(super().state_dict())


class SGD(_StateDict, _C.optim.SGD):
    """SGD with optional momentum, dampening, Nesterov and L2 weight decay (PyTorch's rules)."""

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        _check(lr, weight_decay=weight_decay, momentum=momentum)
        super().__init__(_named(params), lr, momentum, dampening, weight_decay, nesterov)


class Adam(_StateDict, _C.optim.Adam):
    """Adam; weight_decay is L2 added to the gradient."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        _check(lr, eps, betas, weight_decay)
        super().__init__(_named(params), lr, tuple(betas), eps, weight_decay, False)


class AdamW(_StateDict, _C.optim.AdamW):
    """AdamW: decoupled weight decay p -= lr * weight_decay * p.

    decay(name, tensor) -> bool picks the parameters that decay; by default those of rank >= 2
    (weights, not biases or norm gains), the usual GPT recipe (PyTorch decays all of them)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decay=None):
        _check(lr, eps, betas, weight_decay)
        super().__init__(_named(params), lr, tuple(betas), eps, weight_decay, decay)
