"""Views made from Python are recorded (alk._C._track_view), so a write through one reaches
its base and every alias, as PyTorch's shared storage."""

from .. import _C
from .._C import Tensor


def _call(fn, self, args, kwargs):
    try:
        return fn(self, *args, **kwargs)
    except (TypeError, RuntimeError) as e:
        from .arguments import _translated  # (imported after this module)
        better = _translated(fn.__name__, e, (self, *args), kwargs, True)
        if better is None:
            raise
        raise better from None


# ---- views: writes through them reach the base ----

_VIEW_METHODS = ("view", "reshape", "permute", "transpose", "t", "select", "narrow", "expand", "expand_as",
                 "squeeze", "unsqueeze", "flatten")
_VIEW_LIST_METHODS = ("split", "chunk")


def _tracking(fn):
    def method(self, *args, **kwargs):
        _C._prepare_base(self)
        out = _call(fn, self, args, kwargs)
        _C._track_view(self, out)
        return out

    method.__name__, method.__doc__ = fn.__name__, fn.__doc__
    return method


def _tracking_list(fn):
    def method(self, *args, **kwargs):
        _C._prepare_base(self)
        out = _call(fn, self, args, kwargs)
        for piece in out:
            _C._track_view(self, piece)
        return out

    method.__name__, method.__doc__ = fn.__name__, fn.__doc__
    return method


def _tracking_property(prop):
    def get(self):
        _C._prepare_base(self)
        out = prop.__get__(self)
        _C._track_view(self, out)
        return out

    return property(get, doc=prop.__doc__)


for _name in _VIEW_METHODS:
    setattr(Tensor, _name, _tracking(getattr(Tensor, _name)))
for _name in _VIEW_LIST_METHODS:
    setattr(Tensor, _name, _tracking_list(getattr(Tensor, _name)))
for _name in ("T", "mT"):
    setattr(Tensor, _name, _tracking_property(Tensor.__dict__[_name]))


def _view_as(self, other):
    """self viewed in other's shape."""
    return self.view(*other.shape)


def _unbind(self, dim=0):
    """The slices along dim, as a tuple of views."""
    return tuple(self.select(dim, i) for i in range(self.shape[dim]))


Tensor.view_as = _view_as
Tensor.unbind = _unbind


def unbind(input, dim=0):  # noqa: A002
    """The slices of input along dim, as a tuple of views."""
    return _unbind(input, dim)
