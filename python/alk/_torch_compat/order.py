"""max/min along a dim as (values, indices); sort, argsort, topk (indices found on the host,
values gathered: differentiable)."""

import numpy as _np

from .. import _C
from .._C import Tensor

_caller = _C._caller


# ---- max / min along a dim: (values, indices) ----

class _ReturnType(tuple):
    """A (values, indices) pair with names, as torch.return_types."""

    __slots__ = ()
    _fields = ("values", "indices")

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self):
        return f"{type(self).__name__}(\nvalues={self[0]!r},\nindices={self[1]!r})"


def _return_type(name):
    return type(name, (_ReturnType,), {"__slots__": ()})


class return_types:  # noqa: N801  (torch.return_types)
    """The named (values, indices) pairs of max, min, topk, sort (as torch.return_types)."""

    max = _return_type("max")
    min = _return_type("min")
    topk = _return_type("topk")
    sort = _return_type("sort")
    mode = _return_type("mode")


def _pick(input, dim, keepdim, index):  # noqa: A002
    """input's values at index (keepdim form) along dim: the gradient goes to those positions only."""
    values = input.gather(dim, index)
    return values if keepdim else values.squeeze(dim)


def _extreme(is_max):
    reduce_all = _C.max if is_max else _C.min
    arg = _C.argmax if is_max else _C.argmin
    pairwise = _C.maximum if is_max else _C.minimum
    kind = return_types.max if is_max else return_types.min

    def fn(input, dim=None, keepdim=False, *, other=None):  # noqa: A002
        if isinstance(dim, Tensor):
            return pairwise(input, dim)
        if other is not None:
            return pairwise(input, other)
        if dim is None:
            if keepdim:
                raise TypeError(f"{'max' if is_max else 'min'}: keepdim needs a dim (at {_caller()})")
            return reduce_all(input)
        if not isinstance(dim, int):
            raise TypeError(f"{'max' if is_max else 'min'}(): argument 'dim' must be int, not "
                            f"{type(dim).__name__} (at {_caller()})")
        index = arg(input, dim, True)
        values = _pick(input, dim, True, index)
        if not keepdim:
            values, index = values.squeeze(dim), index.squeeze(dim)
        return kind(values, index)

    fn.__name__ = "max" if is_max else "min"
    fn.__doc__ = (f"The {'maximum' if is_max else 'minimum'} of all elements, or (values, indices) along dim "
                  f"(PyTorch's torch.{fn.__name__}); with a tensor, the elementwise "
                  f"{'maximum' if is_max else 'minimum'}.")
    return fn


max = _extreme(True)  # noqa: A001
min = _extreme(False)  # noqa: A001
Tensor.max = max
Tensor.min = min


# ---- sort, topk, argsort: indices found on the host, values gathered (differentiable) ----

def _dim(input, dim, op):  # noqa: A002
    n = input.dim()
    lo = -(n if n else 1)
    if not lo <= dim < -lo:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{lo}, {-lo - 1}], "
                         f"but got {dim}) (at {_caller()})")
    return dim % n if n else 0


def _host_order(input, dim, descending, op):  # noqa: A002
    values = input.detach().to(_C.dtype.float64).numpy() if input.dtype != _C.dtype.bool else \
        input.detach().to(_C.dtype.int64).numpy()
    # NaN sorts as the largest value, as in PyTorch; a stable sort keeps ties in order.
    key = -values if descending else values
    if descending:
        key = _np.where(_np.isnan(values), -_np.inf, key)
    order = _np.argsort(key, axis=dim, kind="stable")
    index = _C.from_numpy(_np.ascontiguousarray(order.astype(_np.int64)))
    return index if input.device == "cpu" else index.to(str(input.device))


def argsort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    """Indices that sort input along dim (int64)."""
    d = _dim(input, dim, "argsort")
    return _host_order(input, d, descending, "argsort") if input.dim() else _C.zeros_like(input).to(_C.dtype.int64)


def sort(input, dim=-1, descending=False, stable=False):  # noqa: A002
    """(values, indices) of input sorted along dim."""
    if input.dim() == 0:
        return return_types.sort(input * 1, _C.zeros_like(input).to(_C.dtype.int64))
    d = _dim(input, dim, "sort")
    index = _host_order(input, d, descending, "sort")
    return return_types.sort(input.gather(d, index), index)


def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """(values, indices) of the k largest (or smallest) elements along dim."""
    d = _dim(input, dim, "topk")
    size = input.shape[d] if input.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError(f"topk: selected index k out of range (k={k}, size {size}) (at {_caller()})")
    index = _host_order(input, d, largest, "topk").narrow(d, 0, k)
    return return_types.topk(input.gather(d, index), index)


Tensor.sort = sort
Tensor.argsort = argsort
Tensor.topk = topk
