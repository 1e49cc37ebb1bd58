"""PyTorch's semantics where alk uses PyTorch's names (issue 42).

Installed into alk and alk.Tensor by alk/__init__.py:

- views: every view method records its result with alk._C._track_view, so a write through
  a view (x[:, 0].zero_(), b[0][1] = 7, p.data.mul_(0)) reaches its base and every alias;
- max/min along a dim return (values, indices), as torch.return_types;
- integer // and % stay integers (floor division; division by zero raises);
- matmul refuses mixed dtypes, as PyTorch does;
- conveniences PyTorch scripts call every day, written over alk's ops (so they are lazy
  and differentiable where PyTorch's are).
Where alk cannot do what PyTorch does, these raise and say so, never compute something else.
"""
import math
import threading

import numpy as _np

from . import _C
from ._C import Tensor

_caller = _C._caller


# ---- views: writes through them reach the base ----

_VIEW_METHODS = ("view", "reshape", "permute", "transpose", "t", "select", "narrow", "expand", "expand_as",
                 "squeeze", "unsqueeze", "flatten")
_VIEW_LIST_METHODS = ("split", "chunk")


def _tracking(fn):
    def method(self, *args, **kwargs):
        _C._prepare_base(self)
        out = fn(self, *args, **kwargs)
        _C._track_view(self, out)
        return out

    method.__name__, method.__doc__ = fn.__name__, fn.__doc__
    return method


def _tracking_list(fn):
    def method(self, *args, **kwargs):
        _C._prepare_base(self)
        out = fn(self, *args, **kwargs)
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


# ---- integer floor division and remainder ----

_C_floordiv, _C_rfloordiv = Tensor.__floordiv__, Tensor.__rfloordiv__
_C_mod, _C_rmod = Tensor.__mod__, Tensor.__rmod__
_INTEGRAL = (_C.dtype.uint8, _C.dtype.int32, _C.dtype.int64, _C.dtype.bool)


def _is_integral(x):
    if isinstance(x, Tensor):
        return x.dtype in _INTEGRAL
    return isinstance(x, int)


def _integer_operands(a, b):
    return _is_integral(a) and _is_integral(b)


def _result_dtype(a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return _C.promote_types(a.dtype, b.dtype)
    t = a if isinstance(a, Tensor) else b
    return _C.dtype.int64 if t.dtype == _C.dtype.bool else t.dtype


def _check_divisor(b, op):
    zero = (b == 0) if isinstance(b, int) else bool((b == 0).any())
    if zero:
        raise RuntimeError(f"{op}: ZeroDivisionError: integer division by zero (at {_caller()})")


def _int_floordiv(a, b):
    _check_divisor(b, "floor_divide")
    dt = _result_dtype(a, b)
    f64 = _C.dtype.float64
    af = a.to(f64) if isinstance(a, Tensor) else float(a)
    bf = b.to(f64) if isinstance(b, Tensor) else float(b)
    q = _C.floor(af / bf) if isinstance(af, Tensor) or isinstance(bf, Tensor) else math.floor(af / bf)
    return q.to(dt)


def _int_mod(a, b):
    _check_divisor(b, "remainder")
    dt = _result_dtype(a, b)
    q = _int_floordiv(a, b)
    return (a - q * b).to(dt)


def _floordiv(self, other):
    return _int_floordiv(self, other) if _integer_operands(self, other) else _C_floordiv(self, other)


def _rfloordiv(self, other):
    return _int_floordiv(other, self) if _integer_operands(self, other) else _C_rfloordiv(self, other)


def _mod(self, other):
    return _int_mod(self, other) if _integer_operands(self, other) else _C_mod(self, other)


def _rmod(self, other):
    return _int_mod(other, self) if _integer_operands(self, other) else _C_rmod(self, other)


def _ifloordiv(self, other):
    return self.copy_(_floordiv(self, other))


def _imod(self, other):
    return self.copy_(_mod(self, other))


Tensor.__floordiv__, Tensor.__rfloordiv__, Tensor.__ifloordiv__ = _floordiv, _rfloordiv, _ifloordiv
Tensor.__mod__, Tensor.__rmod__, Tensor.__imod__ = _mod, _rmod, _imod


def floor_divide(input, other):  # noqa: A002
    """input // other (integers stay integers)."""
    return _floordiv(input, other) if isinstance(input, Tensor) else _rfloordiv(other, input)


def remainder(input, other):  # noqa: A002
    """Python's remainder: the sign of other (integers stay integers)."""
    return _mod(input, other) if isinstance(input, Tensor) else _rmod(other, input)



def _div(input, other, *, rounding_mode=None):  # noqa: A002
    """input / other; rounding_mode 'floor' or 'trunc' rounds the quotient (integers stay integers)."""
    if rounding_mode is None:
        return input / other
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        q = input / other
        q = _C.sign(q) * _C.floor(_C.abs(q)) if isinstance(q, Tensor) else math.trunc(q)
        if _integer_operands(input, other):
            _check_divisor(other, "div")
            return q.to(_result_dtype(input, other))
        return q
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                     f"'{rounding_mode}' (at {_caller()})")


Tensor.div = _div
Tensor.floor_divide = floor_divide
Tensor.remainder = remainder
div = divide = _div
Tensor.divide = _div


# ---- matmul: one dtype, as PyTorch ----

_C_matmul = Tensor.matmul


def _check_same_dtype(a, b, op):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"{op}: both operands must be tensors, got {type(a).__name__} and {type(b).__name__} "
                        f"(at {_caller()})")
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op}: expected both operands to have the same dtype, but got {a.dtype} and {b.dtype} "
                           f"(PyTorch does not promote here; convert one with .to(dtype)) (at {_caller()})")


def matmul(input, other):  # noqa: A002
    """Matrix product with NumPy's rules (batched, broadcast); both operands of one dtype."""
    _check_same_dtype(input, other, "matmul")
    return _C_matmul(input, other)


def mm(input, mat2):  # noqa: A002
    """The product of two matrices (2-D only)."""
    _check_same_dtype(input, mat2, "mm")
    if input.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.dim()}-D and {mat2.dim()}-D (at {_caller()})")
    return _C_matmul(input, mat2)


def bmm(input, mat2):  # noqa: A002
    """Batched matrix product of [B, n, m] and [B, m, p] (3-D only, no broadcasting)."""
    _check_same_dtype(input, mat2, "bmm")
    if input.dim() != 3 or mat2.dim() != 3:
        raise RuntimeError(f"bmm: batch1 must be a 3D tensor, got {input.dim()}-D and {mat2.dim()}-D "
                           f"(at {_caller()})")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {input.shape[0]} and {mat2.shape[0]} (at {_caller()})")
    return _C_matmul(input, mat2)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2)."""
    return beta * input + alpha * mm(mat1, mat2)


def outer(input, vec2):  # noqa: A002
    """The outer product of two vectors."""
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


Tensor.matmul = matmul
Tensor.__matmul__ = matmul
Tensor.__rmatmul__ = lambda self, other: matmul(other, self)
Tensor.mm, Tensor.bmm, Tensor.addmm, Tensor.outer = mm, bmm, addmm, outer


# ---- elementwise and reduction conveniences ----

def masked_fill(input, mask, value):  # noqa: A002
    """input with value where mask (a bool tensor broadcasting to input) is true."""
    if not isinstance(mask, Tensor) or mask.dtype != _C.dtype.bool:
        raise RuntimeError(f"masked_fill only supports boolean masks, but got mask with dtype "
                           f"{getattr(mask, 'dtype', type(mask).__name__)} (at {_caller()})")
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s) (at {_caller()})")
        value = value.to(input.dtype)
    return _C.where(mask, value, input).to(input.dtype)


def _masked_fill_(self, mask, value):
    """masked_fill in place; returns self."""
    return self.copy_(masked_fill(self, mask, value))


def isnan(input):  # noqa: A002
    """True where input is NaN."""
    return input != input


def isinf(input):  # noqa: A002
    """True where input is +-inf."""
    return _C.abs(input) == math.inf if input.is_floating_point() else _C.zeros_like(input).to(_C.dtype.bool)


def isfinite(input):  # noqa: A002
    """True where input is neither NaN nor +-inf."""
    return (input == input) & ~isinf(input)


def any(input, dim=None, keepdim=False):  # noqa: A001,A002
    """Whether any element (along dim) is nonzero, as bool."""
    return _C.amax((input != 0).to(_C.dtype.uint8), dim, keepdim).to(_C.dtype.bool)


def all(input, dim=None, keepdim=False):  # noqa: A001,A002
    """Whether every element (along dim) is nonzero, as bool."""
    return _C.amin((input != 0).to(_C.dtype.uint8), dim, keepdim).to(_C.dtype.bool)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Whether |input - other| <= atol + rtol * |other| everywhere (a Python bool)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002
    """Elementwise |input - other| <= atol + rtol * |other| (equal infinities count as close)."""
    if isinstance(other, Tensor) and input.dtype != other.dtype:
        raise RuntimeError(f"isclose: {input.dtype} did not match {other.dtype} (at {_caller()})")
    close = (input == other) | (_C.abs(input - other) <= atol + rtol * _C.abs(other))
    if equal_nan:
        close = close | (isnan(input) & isnan(other))
    return close


def equal(input, other):  # noqa: A002
    """True when both have the same shape and elements."""
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all())


def flip(input, dims):  # noqa: A002
    """input reversed along each of dims (a copy, as in PyTorch)."""
    if isinstance(dims, int):
        dims = (dims,)
    out = input
    for d in dims:
        d = _dim(input, d, "flip")
        n = input.shape[d]
        out = out.index_select(d, _C.arange(n - 1, -1, -1))
    return out * 1 if out is input else out


def repeat(self, *sizes):
    """self tiled sizes times along each dim (PyTorch's Tensor.repeat)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.dim():
        raise RuntimeError(f"repeat: Number of dimensions of repeat dims ({len(sizes)}) can not be smaller than "
                           f"number of dimensions of tensor ({self.dim()}) (at {_caller()})")
    x = self.reshape(*((1,) * (len(sizes) - self.dim()) + tuple(self.shape)))
    grown, shape = [], []
    for s, n in zip(sizes, x.shape):
        grown += [s, n]
        shape.append(s * n)
    spread = x.reshape(*[v for n in x.shape for v in (1, n)]).expand(*grown)
    return spread.reshape(*shape)


def norm(input, p="fro", dim=None, keepdim=False):  # noqa: A002
    """The p-norm (default 2 / Frobenius) over dim (None: all elements)."""
    if p in ("fro", 2, 2.0):
        return _C.sqrt(_C.sum(input * input, dim, keepdim))
    if p in (math.inf, "inf"):
        return _C.amax(_C.abs(input), dim, keepdim)
    if p == 1:
        return _C.sum(_C.abs(input), dim, keepdim)
    if isinstance(p, (int, float)) and p > 0:
        return _C.sum(_C.abs(input) ** p, dim, keepdim) ** (1.0 / p)
    raise ValueError(f"norm: p={p!r} is not supported (2, 'fro', 1, inf or a positive number) (at {_caller()})")


def diag(input, diagonal=0):  # noqa: A002
    """A 1-D input on the diagonal of a square matrix, or a 2-D input's diagonal."""
    if diagonal != 0:
        raise NotImplementedError(f"diag: only diagonal=0 is supported (at {_caller()})")
    if input.dim() == 1:
        n = input.shape[0]
        return _C.eye(n, dtype=input.dtype) * input.reshape(1, n)
    if input.dim() == 2:
        n = builtins_min(input.shape)
        return input.reshape(-1).index_select(0, _C.arange(n) * (input.shape[1] + 1))
    raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got {input.dim()}-D (at {_caller()})")


builtins_min = __builtins__["min"] if isinstance(__builtins__, dict) else __builtins__.min


def scatter(input, dim, index, src=None, *, value=None, reduce=None):  # noqa: A002
    """input with src (or value) written at index along dim (PyTorch's scatter; an index named twice
    takes one of the values, as in PyTorch where the choice is undefined)."""
    if reduce is not None:
        raise NotImplementedError(f"scatter: reduce= is not supported; use scatter_add (at {_caller()})")
    if src is None:
        src = value
    if not isinstance(src, Tensor):
        src = _C.full(tuple(index.shape), float(src), dtype=input.dtype)
    src = src.to(input.dtype)
    if tuple(src.shape) != tuple(index.shape):
        src = src.narrow(0, 0, index.shape[0]) if src.dim() == 1 else src
    count = _C.scatter_add(_C.zeros_like(input).to(_C.dtype.int32), dim, index,
                           _C.ones_like(index).to(_C.dtype.int32))
    total = _C.scatter_add(_C.zeros_like(input), dim, index, src)
    return _C.where(count > 0, total / _C.maximum(count, 1).to(input.dtype) if input.is_floating_point()
                    else total // _C.maximum(count, 1).to(input.dtype), input).to(input.dtype)


def numel(input):  # noqa: A002
    """The number of elements."""
    return input.numel()


def is_tensor(obj):
    """Whether obj is an alk.Tensor."""
    return isinstance(obj, Tensor)


Tensor.masked_fill = masked_fill
Tensor.masked_fill_ = _masked_fill_
Tensor.isnan, Tensor.isinf, Tensor.isfinite = isnan, isinf, isfinite
Tensor.any, Tensor.all = any, all
Tensor.allclose, Tensor.isclose, Tensor.equal = allclose, isclose, equal
Tensor.flip, Tensor.repeat, Tensor.norm = flip, repeat, norm
Tensor.scatter = scatter
Tensor.diag = diag


def _type_as(self, other):
    return self.to(other.dtype)


def _new_tensor_like(name):
    make = getattr(_C, name)

    def method(self, *size, dtype=None):
        """A new tensor of size, with this tensor's dtype unless dtype is given."""
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        return make(*size, dtype=dtype or self.dtype)

    method.__name__ = "new_" + name
    return method


Tensor.new_zeros = _new_tensor_like("zeros")
Tensor.new_ones = _new_tensor_like("ones")


def _format(self, spec):
    if self.numel() == 1 and self.dim() == 0:
        return format(self.item(), spec)
    if spec:
        raise TypeError(f"unsupported format string passed to Tensor.__format__ (a tensor of "
                        f"{self.numel()} elements) (at {_caller()})")
    return str(self)


Tensor.__format__ = _format


# ---- functions PyTorch has at the top level for the methods ----

def _as_function(name):
    method = getattr(Tensor, name)

    def fn(input, *args, **kwargs):  # noqa: A002
        return method(input, *args, **kwargs)

    fn.__name__, fn.__doc__ = name, method.__doc__
    return fn


reshape = _as_function("reshape")
permute = _as_function("permute")
transpose = _as_function("transpose")
squeeze = _as_function("squeeze")
unsqueeze = _as_function("unsqueeze")
flatten = _as_function("flatten")
swapaxes = _as_function("transpose")
narrow = _as_function("narrow")


# ---- random ----

def randperm(n, *, dtype=None):
    """A random permutation of 0..n-1 (int64), from alk's generator (alk.manual_seed)."""
    order = argsort(_C.rand(n, dtype=_C.dtype.float64)) if n else _C.zeros(0).to(_C.dtype.int64)
    return order if dtype is None else order.to(dtype)


def multinomial(input, num_samples, replacement=False):  # noqa: A002
    """Category indices drawn with probabilities proportional to input's rows (alk's generator)."""
    probs = input.detach().to(_C.dtype.float64)
    rows = probs.reshape(-1, probs.shape[-1])
    if bool((rows < 0).any()) or not bool(isfinite(rows).all()):
        raise RuntimeError(f"multinomial: probability tensor contains either `inf`, `nan` or element < 0 "
                           f"(at {_caller()})")
    if not replacement and num_samples > rows.shape[-1]:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
                           f"replacement (at {_caller()})")
    if replacement:
        cdf = _C.cumsum(rows, 1)
        cdf = cdf / cdf[:, -1:]
        u = _C.rand(rows.shape[0], num_samples, dtype=_C.dtype.float64)
        # The index of the first cdf value above u: the count of cdf values at or below it.
        picks = (cdf.unsqueeze(1) <= u.unsqueeze(2)).to(_C.dtype.int64).sum(2)
        picks = _C.minimum(picks, rows.shape[-1] - 1)
    else:
        # Gumbel-top-k: the k largest log p + Gumbel noise are a draw without replacement.
        g = -_C.log(-_C.log(_C.rand(*rows.shape, dtype=_C.dtype.float64)))
        keys = _C.where(rows > 0, _C.log(rows) + g, -math.inf)
        picks = topk(keys, num_samples, 1).indices
    return picks.reshape(*input.shape[:-1], num_samples)


Tensor.multinomial = multinomial


# ---- grad mode ----

_grad_mode = threading.local()


def _active_no_grad():
    """This thread's open alk.no_grad() guards, innermost last (enable_grad suspends them)."""
    if not hasattr(_grad_mode, "guards"):
        _grad_mode.guards = []
    return _grad_mode.guards


class enable_grad:
    """Records autograd history again inside alk.no_grad() (context manager and decorator)."""

    def __enter__(self):
        active = _active_no_grad()
        self._suspended = list(active)
        for guard in reversed(self._suspended):
            guard.__exit__(None, None, None)
        active.clear()
        return self

    def __exit__(self, *exc):
        active = _active_no_grad()
        for guard in self._suspended:
            guard.__enter__()
            active.append(guard)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with enable_grad():
                return fn(*args, **kwargs)

        return wrapped


class set_grad_enabled:
    """set_grad_enabled(False) is no_grad(), set_grad_enabled(True) is enable_grad()."""

    def __init__(self, mode):
        from . import no_grad
        self._inner = no_grad() if not mode else enable_grad()

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)


class device(str):  # noqa: N801
    """A device name ('cpu', 'vulkan:0') with PyTorch's .type and .index; compares equal to its string.
    As a context manager, tensors made inside are made there (alk's device scope)."""

    def __enter__(self):
        self._scope = _C_device_scope(str(self))
        return self._scope.__enter__()

    def __exit__(self, *exc):
        return self._scope.__exit__(*exc)

    @property
    def type(self):
        return str(self).split(":")[0]

    @property
    def index(self):
        parts = str(self).split(":")
        return int(parts[1]) if len(parts) > 1 else None

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")


_C_device = Tensor.device
_C_device_scope = _C.device


def _tensor_device(self):
    return device(_C_device.__get__(self))


Tensor.device = property(_tensor_device, doc=_C_device.__doc__)


# ---- pickle / deepcopy ----

def _rebuild(array, dtype, requires_grad):
    t = _C.from_numpy(array)
    if t.dtype != dtype:
        t = t.to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _reduce(self):
    return (_rebuild, (_np.array(self.detach().numpy(), copy=True), self.dtype, self.requires_grad))


def _deepcopy(self, memo):
    copied = _rebuild(_np.array(self.detach().numpy(), copy=True), self.dtype, self.requires_grad)
    if type(self) is not Tensor:  # Parameter
        copied = type(self)(copied, requires_grad=self.requires_grad)
    memo[id(self)] = copied
    return copied


Tensor.__reduce__ = _reduce
Tensor.__deepcopy__ = _deepcopy


def _dtype_reduce(self):
    return (getattr, (_C.dtype, self.name))


_C.dtype.__reduce__ = _dtype_reduce


# ---- backward's keyword arguments ----

_C_backward = Tensor.backward


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Computes gradients of this tensor (a scalar, or seeded with gradient) into the leaves' .grad.
    retain_graph is accepted, but alk frees what the backward rules saved: a second backward
    through the same graph raises. create_graph and inputs are refused."""
    if create_graph:
        raise NotImplementedError(f"backward(create_graph=True) is not supported by alk; use alk.grad("
                                  f"create_graph=True) (at {_caller()})")
    if inputs is not None:
        raise NotImplementedError(f"backward(inputs=...) is not supported by alk (at {_caller()})")
    return _C_backward(self, gradient)


Tensor.backward = _backward


# ---- random ----

def normal(mean, std=1.0, size=None, *, generator=None, dtype=None):
    """Samples of N(mean, std): tensors broadcast together, or floats with size."""
    if generator is not None:
        raise NotImplementedError(f"normal: generators are not supported by alk (alk.manual_seed seeds the one "
                                  f"generator) (at {_caller()})")
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        shape = tuple((mean * 0 + std * 0).shape)
        like = mean if isinstance(mean, Tensor) else std
        return mean + std * _C.randn(*shape, dtype=dtype or like.dtype)
    if size is None:
        raise TypeError(f"normal: with float mean and std, size is required (at {_caller()})")
    size = (size,) if isinstance(size, int) else tuple(size)
    return mean + std * _C.randn(*size, dtype=dtype or _C.dtype.float32)


# ---- einsum: operands aligned on every index, multiplied, summed over the contracted ones ----

def einsum(equation, *operands):
    """Einstein summation ('ij,jk->ik'; '...' broadcasts), as a product of aligned operands summed over
    the indices not in the output (differentiable; memory grows with every index at once)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum(): {len(terms)} operands in the equation but {len(operands)} given "
                         f"(at {_caller()})")
    # '...' becomes fresh upper-case letters, right-aligned like broadcasting.
    ell = builtins_max([op.dim() - (len(t) - 3) for t, op in zip(terms, operands) if "..." in t] + [0])
    ell_letters = "".join(chr(ord("A") + i) for i in range(ell))
    expanded = []
    for t, op in zip(terms, operands):
        if "..." in t:
            n = op.dim() - (len(t) - 3)
            t = t.replace("...", ell_letters[ell - n:])
        if len(t) != op.dim():
            raise RuntimeError(f"einsum(): the number of subscripts in '{t}' does not match the number of "
                               f"dimensions ({op.dim()}) (at {_caller()})")
        expanded.append(t)
    if arrow:
        out = rhs.replace("...", ell_letters)
    else:
        counts = {}
        for t in expanded:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell_letters + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell_letters))
    letters = list(out) + sorted({c for t in expanded for c in t} - set(out))
    product = None
    for t, op in zip(expanded, operands):
        # Repeated letters in one term take the diagonal.
        while len(set(t)) < len(t):
            c = next(c for c in t if t.count(c) > 1)
            i, j = t.index(c), t.index(c, t.index(c) + 1)
            op = diagonal(op, i, j)
            t = t[:i] + t[i + 1:j] + t[j + 1:] + c
        order = sorted(range(len(t)), key=lambda k: letters.index(t[k]))
        op = op.permute(*order) if order else op
        shape, at = [], 0
        present = [t[k] for k in order]
        for c in letters:
            if at < len(present) and present[at] == c:
                shape.append(op.shape[at])
                at += 1
            else:
                shape.append(1)
        op = op.reshape(*shape)
        product = op if product is None else product * op
    contracted = list(range(len(out), len(letters)))
    return product.sum(contracted) if contracted else product


def diagonal(input, dim1=0, dim2=1):  # noqa: A002
    """The diagonal of dims dim1 and dim2 (equal sizes), as the last dim (a copy)."""
    n = input.shape[dim1]
    rest = [d for d in range(input.dim()) if d not in (dim1 % input.dim(), dim2 % input.dim())]
    moved = input.permute(*rest, dim1 % input.dim(), dim2 % input.dim())
    flat = moved.reshape(*moved.shape[:-2], n * n)
    return flat.index_select(flat.dim() - 1, _C.arange(n) * (n + 1))


builtins_max = __builtins__["max"] if isinstance(__builtins__, dict) else __builtins__.max
Tensor.diagonal = diagonal


# ---- save / load: safetensors underneath ----

def save(obj, f):
    """Writes obj (a tensor, or dicts, lists and tuples of tensors, numbers, strings and None: a
    state_dict, an optimizer's state) to the path f as a safetensors file. The nesting is kept in
    the file's metadata; a tensor named twice is stored once and comes back shared."""
    import json
    import os
    if not isinstance(f, (str, os.PathLike)):
        raise TypeError(f"save: alk writes to a path (str or os.PathLike), not a {type(f).__name__} "
                        f"(at {_caller()})")
    tensors, ids = {}, {}

    def encode(o):
        if isinstance(o, Tensor):
            key = ids.get(id(o))
            if key is None:
                key = ids[id(o)] = str(len(tensors))
                tensors[key] = o.detach()
            return {"t": key}
        if isinstance(o, dict):
            if not builtins_all(isinstance(k, (str, int)) for k in o):
                raise TypeError(f"save: dict keys must be str or int (at {_caller()})")
            return {"d": [[k, encode(v)] for k, v in o.items()]}
        if isinstance(o, (list, tuple)):
            return {"l" if isinstance(o, list) else "u": [encode(v) for v in o]}
        if o is None or isinstance(o, (bool, int, float, str)):
            return {"v": o}
        raise TypeError(f"save: cannot store a {type(o).__name__} (tensors, dicts, lists, tuples, numbers, "
                        f"strings, None) (at {_caller()})")

    structure = encode(obj)
    _C._save_safetensors(os.fspath(f), tensors, {"alk.structure": json.dumps(structure)})


def load(f, map_location=None, weights_only=None):
    """Reads what alk.save wrote (any safetensors file without alk's structure comes back as a dict
    of its tensors). map_location: a device name ('cpu') the tensors are moved to."""
    import json
    import os
    pairs, meta = _C._load_safetensors(os.fspath(f))
    tensors = dict(pairs)
    if map_location is not None:
        tensors = {k: v.to(str(map_location)) for k, v in tensors.items()}
    if "alk.structure" not in meta:
        return tensors

    def decode(s):
        if "t" in s:
            return tensors[s["t"]]
        if "d" in s:
            return {k: decode(v) for k, v in s["d"]}
        if "l" in s:
            return [decode(v) for v in s["l"]]
        if "u" in s:
            return tuple(decode(v) for v in s["u"])
        return s["v"]

    return decode(json.loads(meta["alk.structure"]))


builtins_all = __builtins__["all"] if isinstance(__builtins__, dict) else __builtins__.all


# ---- wrong arguments: which one, and the caller's line (not pybind11's signature list) ----

import re as _re  # noqa: E402

_OVERLOAD = _re.compile(r"^\s*\d+\. \((.*)\) -> .*$")


def _split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    params = []
    for p in out:
        if p in ("*", "/") or p.startswith("*"):
            continue
        name, _, rest = p.partition(":")
        params.append((name.strip(), rest.split("=")[0].strip(), "=" in rest))
    return params


def _fits(value, annotation):
    a = annotation.replace("alk._C.", "")
    if a.startswith("Optional["):
        return value is None or _fits(value, a[len("Optional["):-1])
    if " | " in a:
        return builtins_any(_fits(value, part) for part in a.split(" | "))
    if a == "Tensor":
        return isinstance(value, Tensor) or value is None
    if a == "int":
        return not isinstance(value, (float, str)) and hasattr(value, "__index__")
    if a == "float":
        return not isinstance(value, str) and (hasattr(value, "__float__") or hasattr(value, "__index__"))
    if a == "bool":
        return isinstance(value, bool) or hasattr(value, "__bool__") and not isinstance(value, (str, list, tuple))
    if a == "str":
        return isinstance(value, str)
    if a.startswith(("List[", "Sequence[", "Tuple[")) or a.startswith("Annotated[List"):
        return isinstance(value, (list, tuple))
    if a == "dtype":
        return isinstance(value, _C.dtype)
    return True


def _explain(name, doc_error, args, kwargs, is_method=False):
    """A TypeError naming the first argument that does not fit the first signature it could match."""
    overloads = [_split_params(m.group(1)) for line in doc_error.splitlines() if (m := _OVERLOAD.match(line))]
    where = f"(at {_caller()})"
    first = None
    for params in overloads:
        problem = None
        positional = [p for p in params]
        if len(args) > len(positional):
            problem = (f"takes at most {len(positional) - is_method} positional arguments but "
                       f"{len(args) - is_method} were given")
        else:
            for i, (value, (pname, ann, _)) in enumerate(zip(args, positional)):
                if not _fits(value, ann):
                    problem = (f"argument '{pname}' (position {i + 1 - is_method}) must be {ann.replace('alk._C.', '')}, "
                               f"not {type(value).__name__}")
                    break
            names = {p[0] for p in params}
            for k, value in kwargs.items():
                if problem:
                    break
                if k not in names:
                    problem = f"got an unexpected keyword argument '{k}'"
                else:
                    ann = next(p[1] for p in params if p[0] == k)
                    if not _fits(value, ann):
                        problem = f"argument '{k}' must be {ann.replace('alk._C.', '')}, not {type(value).__name__}"
            if not problem:
                given = set(p[0] for p in params[:len(args)]) | set(kwargs)
                missing = [p[0] for p in params if not p[2] and p[0] not in given and p[0] != "self"]
                if missing:
                    problem = f"missing required argument '{missing[0]}'"
        if problem is None:
            continue
        first = first or problem
    return TypeError(f"{name}(): {first or 'incompatible arguments'} {where}")


def _checked(name, fn, is_method):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError as e:
            text = str(e)
            if "incompatible function arguments" not in text:
                raise
            raise _explain(name, text, args, kwargs, is_method) from None
        except RuntimeError as e:
            text = str(e)
            if not text.startswith("Unable to cast Python instance of type"):
                raise
            got = _re.search(r"<class '([^']+)'>", text)
            raise TypeError(f"{name}(): an argument of type {got.group(1) if got else '?'} does not fit "
                            f"{text.split(' to C++ type ')[-1]} (at {_caller()})") from None

    call.__name__, call.__doc__, call.__qualname__ = fn.__name__, fn.__doc__, fn.__name__
    call.__wrapped_builtin__ = fn
    return call


builtins_any = __builtins__["any"] if isinstance(__builtins__, dict) else __builtins__.any


def _check_arguments(namespace, tensor_cls):
    """Wraps the pybind11 functions of namespace (a module's dict) and tensor_cls's methods."""
    for name, fn in list(namespace.items()):
        if not name.startswith("_") and type(fn).__name__ == "builtin_function_or_method":
            namespace[name] = _checked(name, fn, False)
    for name, fn in list(vars(tensor_cls).items()):
        if not name.startswith("_") and type(fn).__name__ == "instancemethod":
            setattr(tensor_cls, name, _checked(name, fn, True))


# ---- tensor hooks and retain_grad ----

class _RemovableHandle:
    """What register_hook returns: remove() turns the hook off."""

    def __init__(self, state):
        self._state = state

    def remove(self):
        """Turns the hook off."""
        self._state["on"] = False


def _register_hook(self, hook):
    """Calls hook(grad) with this tensor's gradient during backward; a tensor it returns replaces
    the gradient. Register it before the tensor is used (alk refuses otherwise); leaves refuse."""
    state = {"on": True}

    def call(grad):
        return hook(grad) if state["on"] else None

    _C._register_hook(self, call)
    return _RemovableHandle(state)


def _retain_grad(self):
    """Keeps this non-leaf tensor's gradient in .grad after backward (a no-op on leaves). Call it
    before the tensor is used (alk refuses otherwise)."""
    _C._retain_grad(self)


Tensor.register_hook = _register_hook
Tensor.retain_grad = _retain_grad


class cuda:  # noqa: N801  (torch.cuda's everyday questions)
    """torch.cuda's is_available and device_count, over the CUDA devices alk found."""

    @staticmethod
    def _names():
        return [d for d in _C.devices() if d.startswith("cuda")]

    @staticmethod
    def is_available():
        """Whether alk found a CUDA device."""
        return bool(cuda._names())

    @staticmethod
    def device_count():
        """How many CUDA devices alk found."""
        return len(cuda._names())

    @staticmethod
    def manual_seed(seed):
        """Seeds alk's one generator (alk.manual_seed)."""
        _C.manual_seed(seed)

    @staticmethod
    def synchronize():
        """alk waits for a device when values are read; nothing to do."""
