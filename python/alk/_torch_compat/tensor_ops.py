"""Everyday conveniences over alk's ops (lazy and differentiable), the top-level forms of
methods, einsum."""
import builtins
import math

from .. import _C
from .._C import Tensor
from .order import _dim

_caller = _C._caller


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
        n = builtins.min(input.shape)
        return input.reshape(-1).index_select(0, _C.arange(n) * (input.shape[1] + 1))
    raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got {input.dim()}-D (at {_caller()})")




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
    ell = builtins.max([op.dim() - (len(t) - 3) for t, op in zip(terms, operands) if "..." in t] + [0])
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


Tensor.diagonal = diagonal


def _with_unbiased(fn):
    def method(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
        if isinstance(unbiased, bool) or unbiased is None:
            corr = 1 if unbiased is None else int(unbiased)
        else:  # var(x, dim, correction) positionally, as alk's own signature
            corr = int(unbiased)
        if correction is not None:
            corr = int(correction)
        return fn(input, dim, corr, keepdim)

    method.__name__ = fn.__name__
    method.__doc__ = (f"{fn.__doc__} PyTorch's unbiased=True/False (or correction=) picks the divisor "
                      f"n - 1 or n.")
    return method


var = _with_unbiased(Tensor.var)
std = _with_unbiased(Tensor.std)
Tensor.var, Tensor.std = var, std
