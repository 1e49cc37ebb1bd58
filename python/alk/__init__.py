"""alk: a tensor library with autodiff whose kernels are generated from one op table.

PyTorch-shaped, over alk's C++ engine (the same library the `alk` command line uses)::

    import alk
    x = alk.randn(4, 8)
    w = alk.randn(8, 3, requires_grad=True)
    loss = (alk.gelu(x @ w) - 1.0).square().sum()
    loss.backward()
    print(loss.item(), w.grad.shape)

Ops are lazy: they record a graph, and values are computed (fused, memory-planned) when
needed: printing, .item(), .numpy(), backward(). Errors raise IndexError / TypeError /
ValueError / RuntimeError naming your file and line.
"""
import functools as _functools
import os as _os

from . import _C
from ._C import *  # noqa: F401,F403  (Tensor, dtype, every op, creation functions)
from ._C import Tensor, Tokenizer, dtype

_C._set_package_dir(_os.path.dirname(_os.path.abspath(__file__)) + _os.sep)

__version__ = "0.1.0"
_live_buffers = _C._live_buffers  # (count, bytes) of alk buffers alive: for leak checks
_elementwise_ops = _C._elementwise_ops  # the op table's elementwise entries

# dtypes, with PyTorch's names and aliases
bool = dtype.bool  # noqa: A001
uint8 = dtype.uint8
int32 = dtype.int32
int64 = dtype.int64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
float32 = dtype.float32
float64 = dtype.float64
half, float, double = float16, float32, float64  # noqa: A001
int, long = int32, int64  # noqa: A001

# numpy defers to alk's operators (np.float32(2) * t is an alk.Tensor), as with torch.
Tensor.__array_priority__ = 1000


def _clamp(self, min=None, max=None):  # noqa: A002
    """Clamps into [min, max]; either bound may be None."""
    if min is None and max is None:
        raise ValueError(f"clamp: at least one of min and max must be given (at {_C._caller()})")
    if max is None:
        return _C.maximum(self, min)
    if min is None:
        return _C.minimum(self, max)
    return _C.clamp(self, min, max)


def _where_method(self, condition, other):
    """self where condition is true, else other (PyTorch's Tensor.where order)."""
    return _C.where(condition, self, other)


Tensor.clamp = _clamp
Tensor.clip = _clamp
Tensor.where = _where_method
clip = _clamp


def clamp(input, min=None, max=None):  # noqa: A002
    """Clamps input into [min, max]; either bound may be None."""
    return _clamp(input, min, max)


class no_grad:
    """Context manager and decorator: ops inside record no autograd history.

    with alk.no_grad():
        w -= 0.1 * w.grad
    """

    def __enter__(self):
        self._guard = _C._NoGrad()
        self._guard.__enter__()
        _torch_compat._active_no_grad().append(self._guard)
        return self

    def __exit__(self, *exc):
        active = _torch_compat._active_no_grad()
        if active and active[-1] is self._guard:
            active.pop()
        self._guard.__exit__(*exc)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapped


def devices():
    """The devices alk can run on now, as strings for Tensor.to(): ['cpu', ...]."""
    return _C.devices()


# ---- alk.compile ----


def _flatten(out):
    if out is None:
        return [], None
    if isinstance(out, Tensor):
        return [out], "t"
    if isinstance(out, (tuple, list)):
        flat, spec = [], []
        for o in out:
            f, s = _flatten(o)
            flat += f
            spec.append((len(f), s))
        return flat, (type(out), spec)
    if isinstance(out, dict):
        flat, spec = [], []
        for k, o in out.items():
            f, s = _flatten(o)
            flat += f
            spec.append((k, len(f), s))
        return flat, (dict, spec)
    raise TypeError(f"compile: a step may return tensors, tuples, lists, dicts or None, not {type(out).__name__}")


def _unflatten(spec, flat):
    if spec is None:
        return None
    if spec == "t":
        return flat[0]
    kind, items = spec
    if kind is dict:
        out, at = {}, 0
        for k, n, s in items:
            out[k] = _unflatten(s, flat[at:at + n])
            at += n
        return out
    out, at = [], 0
    for n, s in items:
        out.append(_unflatten(s, flat[at:at + n]))
        at += n
    return kind(out)


class _StepState:
    """What the traced function needs (kept apart from the Program: no reference cycle)."""

    def __init__(self, fn):
        self.fn = fn
        self.spec = None
        self.count = 0

    def run(self, inputs):
        flat, self.spec = _flatten(self.fn(*inputs))
        self.count = len(flat)
        for i, t in enumerate(flat):
            _C.capture(f"__out{i}", t)


class CompiledStep:
    """A step function traced once and replayed (see alk.compile)."""

    def __init__(self, fn):
        self._state = _StepState(fn)
        self._program = _C._compile(self._state.run)
        _functools.update_wrapper(self, fn)

    def __call__(self, *inputs):
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise TypeError(f"compile: input {i} is a {type(x).__name__}, not an alk.Tensor (at {_C._caller()})")
        self._program(list(inputs))
        s = self._state
        return _unflatten(s.spec, [self._program.captured(f"__out{i}") for i in range(s.count)])

    @property
    def traced(self):
        """True once the step has been traced: later calls replay its kernels."""
        return self._program.traced

    @property
    def kernels(self):
        """Kernels per replay."""
        return self._program.kernels

    def captured(self, name):
        """The value alk.capture(name, t) recorded in the latest call."""
        return self._program.captured(name)


def compile(fn):  # noqa: A001
    """Traces a training step (forward, loss, backward, optimizer update) and replays it.

    The first call runs fn eagerly (optimizer state is created), the second traces its
    kernels, later calls replay them with no Python, graph building or allocation per call.
    Inputs must be alk.Tensors of the same shapes every call; what fn returns (tensors,
    tuples, dicts) is returned from every call, with the values of that call::

        @alk.compile
        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
    """
    return CompiledStep(fn)


# ---- safetensors ----


def save_safetensors(path, tensors, metadata=None):
    """Writes tensors (a dict, (name, tensor) pairs or a Module's state) to path, atomically."""
    if hasattr(tensors, "state_dict") and callable(tensors.state_dict):
        tensors = tensors.state_dict()
    _C._save_safetensors(_os.fspath(path), tensors, metadata or {})


def load_safetensors(path, with_metadata=False):
    """The tensors of a safetensors file as a dict in file order (and its metadata if asked)."""
    pairs, meta = _C._load_safetensors(_os.fspath(path))
    out = dict(pairs)
    return (out, meta) if with_metadata else out


save_file, load_file = save_safetensors, load_safetensors  # the safetensors package's names

# PyTorch's semantics where alk uses its names (views that write through, max/min pairs,
# integer floor division, ...) and the everyday conveniences: alk/_torch_compat.py.
from . import _torch_compat  # noqa: E402
from ._torch_compat import (addmm, all, allclose, any, argsort, bmm, device, diag, div, divide,  # noqa: E402,F401,A004
                            enable_grad, equal, flatten, flip, floor_divide, is_tensor, isclose, isfinite, isinf,
                            isnan, masked_fill, matmul, max, min, mm, multinomial, narrow, norm, numel, outer,
                            permute, randperm, remainder, repeat, reshape, return_types, scatter, set_grad_enabled,
                            sort, squeeze, swapaxes, topk, transpose, unbind, unsqueeze, normal, einsum, diagonal,
                            save, load, cuda, randint, std, var)

# Wrong arguments name the argument and the caller's line (not pybind11's signature list).
_torch_compat._check_arguments(globals(), Tensor)

# The star import brought _C's own nn and optim submodules: the Python packages replace them.
globals().pop("nn", None)
globals().pop("optim", None)
from . import nn, optim, utils  # noqa: E402,F401  (after Tensor is set up)
