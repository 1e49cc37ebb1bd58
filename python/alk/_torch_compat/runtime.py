"""device objects, alk.cuda's questions, pickle/deepcopy of tensors, alk.save/alk.load."""
import builtins

import numpy as _np

from .. import _C
from .._C import Tensor

_caller = _C._caller


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
            if not builtins.all(isinstance(k, (str, int)) for k in o):
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
