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


def _groups(params, defaults):
    """PyTorch's param groups: a list of dicts ({"params": [...], "lr": ..., ...}) or one iterable
    of parameters. Each group gets the defaults for the options it does not set."""
    params = list(params)
    if params and isinstance(params[0], dict):
        groups = []
        for g in params:
            unknown = set(g) - set(defaults) - {"params"}
            if unknown:
                raise TypeError(f"param group has options this optimizer does not take: {sorted(unknown)} "
                                f"(at {_C._caller()})")
            ps = g["params"]
            ps = [ps] if isinstance(ps, _C.Tensor) else list(ps)
            groups.append(dict(defaults, **{k: v for k, v in g.items() if k != "params"}, params=ps))
        return groups
    return [dict(defaults, params=params)]


class _Group(dict):
    """A param group: setting group["lr"] sets the learning rate its C++ optimizer reads."""

    def __init__(self, options, optimizer):
        super().__init__(options)
        self._optimizer = optimizer

    def __setitem__(self, key, value):
        if key == "lr":
            self._optimizer.lr = float(value)
        elif key in self and key != "params" and self[key] != value:
            raise NotImplementedError(f"param group option {key!r} cannot change after construction in alk "
                                      f"(only 'lr' can) (at {_C._caller()})")
        super().__setitem__(key, value)


class _Grouped:
    """param_groups over one C++ optimizer per group (self is the first group's)."""

    def _init_groups(self, groups, make):
        self._extra = [make(g) for g in groups[1:]]
        self.param_groups = [_Group(g, opt) for g, opt in zip(groups, [self] + self._extra)]
        self.defaults = {k: v for k, v in groups[0].items() if k != "params"}

    def step(self, closure=None):
        """One update of every group from the parameters' .grad (closure: recomputes the loss first)."""
        loss = None
        if closure is not None:
            loss = closure()
        super().step()
        for opt in self._extra:
            opt.step()
        # The step assigned new values to the parameters: their views (p.data held across the
        # step, slices) read them, as after PyTorch's in-place update.
        for g in self.param_groups:
            for p in g["params"]:
                _C._follow_assignment(p[1] if isinstance(p, tuple) else p)
        return loss

    def zero_grad(self, set_to_none=True):
        """Drops every parameter's .grad."""
        super().zero_grad()
        for opt in self._extra:
            opt.zero_grad()

    def add_param_group(self, group):
        """Adds a group of parameters with its own options."""
        raise NotImplementedError(f"add_param_group: pass every group to the constructor in alk "
                                  f"(at {_C._caller()})")


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
        if getattr(self, "_extra", None):
            raise NotImplementedError(f"state_dict of an optimizer with several param groups is not supported "
                                      f"by alk (at {_C._caller()})")
        return dict(super().state_dict())


class SGD(_Grouped, _StateDict, _C.optim.SGD):
    """SGD with optional momentum, dampening, Nesterov and L2 weight decay (PyTorch's rules); param groups."""

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        groups = _groups(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

        def args(g):
            _check(g["lr"], weight_decay=g["weight_decay"], momentum=g["momentum"])
            return (_named(g["params"]), g["lr"], g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"])

        super().__init__(*args(groups[0]))
        self._init_groups(groups, lambda g: _C.optim.SGD(*args(g)))


class Adam(_Grouped, _StateDict, _C.optim.Adam):
    """Adam; weight_decay is L2 added to the gradient; param groups."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        groups = _groups(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

        def args(g):
            _check(g["lr"], g["eps"], g["betas"], g["weight_decay"])
            return (_named(g["params"]), g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"], False)

        super().__init__(*args(groups[0]))
        self._init_groups(groups, lambda g: _C.optim.Adam(*args(g)))


def _decay_all(name, tensor):
    return True


class AdamW(_Grouped, _StateDict, _C.optim.AdamW):
    """AdamW: decoupled weight decay p -= lr * weight_decay * p, on every parameter as PyTorch
    (use param groups, or decay(name, tensor) -> bool, to exempt biases and norm gains)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decay=None):
        groups = _groups(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        rule = decay or _decay_all

        def args(g):
            _check(g["lr"], g["eps"], g["betas"], g["weight_decay"])
            return (_named(g["params"]), g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"], rule)

        super().__init__(*args(groups[0]))
        self._init_groups(groups, lambda g: _C.optim.AdamW(*args(g)))


import sys as _sys  # noqa: E402

from . import _lr_scheduler as lr_scheduler  # noqa: E402,F401

_sys.modules[__name__ + ".lr_scheduler"] = lr_scheduler  # `from alk.optim.lr_scheduler import StepLR`
