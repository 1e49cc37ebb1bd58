"""Integer floor division and remainder that stay integers; div's rounding modes; matmul and
its relatives refusing mixed dtypes, as PyTorch."""
import math

from .. import _C
from .._C import Tensor

_caller = _C._caller


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
