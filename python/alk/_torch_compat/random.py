"""randperm, multinomial, normal over alk's one seeded generator."""
import math

from .. import _C
from .._C import Tensor
from .order import argsort, topk
from .tensor_ops import isfinite

_caller = _C._caller


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


_C_randint = _C.randint


def randint(low, high=None, size=None, *, dtype=None, **kwargs):
    """Integers in [low, high): randint(low, high, size) or randint(high, size) as PyTorch."""
    if isinstance(high, (tuple, list)) and size is None:
        low, high, size = 0, low, high
    if size is None:
        raise TypeError(f"randint(): missing required argument 'size' (at {_caller()})")
    return _C_randint(low, high, list(size), dtype=dtype, **kwargs)
