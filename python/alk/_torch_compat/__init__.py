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
# In this order: the view methods are wrapped first, so the functions made from methods
# (alk.reshape, ...) record views too; the argument checks wrap what is still pybind11's.
from . import views  # noqa: F401,I001
from . import order  # noqa: F401
from . import arith  # noqa: F401
from . import tensor_ops  # noqa: F401
from . import random  # noqa: F401
from . import autograd  # noqa: F401
from . import runtime  # noqa: F401
from . import arguments  # noqa: F401
from .arguments import _check_arguments  # noqa: F401
from .arith import (addmm, bmm, div, divide, floor_divide, matmul, mm, outer, remainder)  # noqa: F401
from .autograd import _active_no_grad, enable_grad, set_grad_enabled  # noqa: F401
from .order import argsort, max, min, return_types, sort, topk  # noqa: F401,A004
from .random import multinomial, normal, randint, randperm  # noqa: F401
from .runtime import cuda, device, load, save  # noqa: F401
from .tensor_ops import (all, allclose, any, diag, diagonal, einsum, equal, flatten, flip, is_tensor,  # noqa: F401,A004
                         isclose, isfinite, isinf, isnan, masked_fill, narrow, norm, numel, permute, repeat, reshape,
                         scatter, squeeze, std, swapaxes, transpose, unsqueeze, var)
from .views import unbind  # noqa: F401
