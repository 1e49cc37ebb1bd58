"""alk.nn: Modules (subclassable in Python, PyTorch-style) over alk's C++ layers.

Subclass Module, assign Parameters, Modules and buffers as attributes, write forward::

    class MLP(alk.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = alk.nn.Linear(784, 128)
            self.fc2 = alk.nn.Linear(128, 10)
            self.scale = alk.nn.Parameter(alk.ones(10))

        def forward(self, x):
            return self.fc2(alk.relu(self.fc1(x))) * self.scale

The built-in layers (Linear, LayerNorm, GPT, Conv2d, ...) run alk's C++ implementations;
their parameters are the same tensors the C++ objects hold.
"""
from collections import OrderedDict

from .. import _C
from .._C import Tensor
from . import functional, init  # noqa: F401
from .functional import cross_entropy, mse_loss  # noqa: F401


class Parameter(Tensor):
    """A tensor that a Module registers as a parameter when assigned as an attribute."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = _C.zeros(0)
        if not isinstance(data, Tensor):
            data = _C.tensor(data)
        super().__init__(data.detach().realize())
        self.requires_grad_(requires_grad)

    @classmethod
    def _share(cls, t):
        """A Parameter object for an existing tensor (same data and autograd identity)."""
        p = cls.__new__(cls)
        Tensor.__init__(p, t)
        return p

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)


def _caller():
    return _C._caller()


class Module:
    """Base class of every layer and model. Subclasses call super().__init__() first."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration by attribute assignment ----
    def __setattr__(self, name, value):
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning attributes "
                                 f"(at {_caller()})")
        params, buffers, modules = d["_parameters"], d["_buffers"], d["_modules"]
        if name in params and "_native" in d and not getattr(self, "_assignable", False):
            raise RuntimeError(f"{type(self).__name__}: its forward runs alk's C++ layer, which does not see a "
                               f"parameter assigned from Python; copy values in with "
                               f"self.{name}.data.copy_(new) instead (at {_caller()})")
        if isinstance(value, Parameter):
            buffers.pop(name, None)
            modules.pop(name, None)
            d.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None)
            buffers.pop(name, None)
            d.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign a {type(value).__name__} to parameter '{name}' "
                                f"(expected alk.nn.Parameter or None) (at {_caller()})")
            if value is None:
                params[name] = None
            else:
                params[name] = value if isinstance(value, Parameter) else Parameter(value)
        elif name in buffers:
            buffers[name] = value
        else:
            modules.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if key in d and name in d[key]:
                return d[key][name]
        native = d.get("_native")
        if native is not None and hasattr(native, name):
            return getattr(native, name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[key]:
                del self.__dict__[key][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        """Registers param (a Parameter, a tensor, or None) under name."""
        if param is not None and not isinstance(param, Parameter):
            param = Parameter(param)
        self._parameters[name] = param

    def register_buffer(self, name, tensor):
        """Registers a tensor that is state but not a parameter (saved in state_dict, moved by to())."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: '{name}' must be an alk.Tensor or None (at {_caller()})")
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor

    def add_module(self, name, module):
        self._modules[name] = module

    # ---- calling ----
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- traversal ----
    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(prefix + ("." if prefix else "") + name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def _named(self, kind, prefix, recurse):
        seen = set()
        for mod_prefix, m in (self.named_modules(prefix) if recurse else [(prefix, self)]):
            for name, t in getattr(m, kind).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield mod_prefix + ("." if mod_prefix else "") + name, t

    def named_parameters(self, prefix="", recurse=True):
        """(name, parameter) pairs, this module's first, then each child's ("child.name")."""
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    # ---- state ----
    def state_dict(self):
        """Parameters then buffers by dotted name (the tensors themselves: save them as they are)."""
        out = OrderedDict()
        for name, p in self.named_parameters():
            out[name] = p
        for name, b in self.named_buffers():
            out[name] = b
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies the values in, cast to each tensor's dtype. Strict: the keys must match exactly.

        Raises RuntimeError naming the missing and unexpected keys, or the shape that differs.
        Returns (missing_keys, unexpected_keys)."""
        own = self.state_dict()
        given = dict(state_dict)
        missing = [k for k in own if k not in given]
        unexpected = [k for k in given if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"load_state_dict: missing keys: {missing}, unexpected keys: {unexpected} "
                               f"(at {_caller()})")
        for k, t in own.items():
            if k not in given:
                continue
            v = given[k]
            if tuple(v.shape) != tuple(t.shape):
                raise RuntimeError(f"load_state_dict: '{k}' has shape {tuple(v.shape)} in the state dict but "
                                   f"{tuple(t.shape)} in the model (at {_caller()})")
            with _no_grad():
                t.copy_(v)
        return missing, unexpected

    # ---- modes, moves ----
    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        native = self.__dict__.get("_native")
        if native is not None:
            native.train(mode)
        for m in self._modules.values():
            if m is not None:
                m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self, target=None, dtype=None):
        """Moves parameters and buffers to a device ('cpu', 'auto') and/or converts their float dtype,
        in place (every holder of a parameter, optimizers included, sees the change)."""
        if isinstance(target, _C.dtype):
            dtype, target = target, None
        if target is not None:
            _C.Tensor.to(_C.zeros(0), target)  # validates the device name
        for t in list(self.parameters()) + list(self.buffers()):
            changed, new = False, t.data
            if target is not None and new.device != _C.Tensor.to(_C.zeros(0), target).device:
                changed, new = True, new.to(target)
            if dtype is not None and new.dtype.is_floating_point and new.dtype != dtype:
                changed, new = True, new.to(dtype)
            if changed:
                t.data = new
        return self

    def float(self):
        return self.to(_C.dtype.float32)

    def double(self):
        return self.to(_C.dtype.float64)

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        if len(lines) == 1:
            return lines[0] + ")"
        return "\n".join(lines) + "\n)"

    def __dir__(self):
        return list(super().__dir__()) + list(self._parameters) + list(self._buffers) + list(self._modules)


def _no_grad():
    from .. import no_grad
    return no_grad()


class _Native(Module):
    """A layer computed by alk's C++ implementation: its parameters are registered here under the
    C++ module's names (nested ones dotted, "blocks.0.attn.qkv.weight") and are the same tensors."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        object.__setattr__(self, "_init_args", (args, kwargs))  # to rebuild it: pickle, deepcopy
        return self

    def __reduce_ex__(self, protocol):
        state = {k: v for k, v in self.__dict__.items() if k != "_native"}
        return (_rebuild_native, (type(self), *self._init_args, state))

    def _adopt(self, native, repr_args=""):
        object.__setattr__(self, "_native", native)
        object.__setattr__(self, "_repr_args", repr_args)
        for name, t in native.named_parameters():
            self._parameters[name] = Parameter._share(t)
        for name, t in native.named_buffers():
            self._buffers[name] = t

    def forward(self, x):
        return self._native(x)

    def extra_repr(self):
        return self._repr_args


def _rebuild_native(cls, args, kwargs, state):
    """A built-in layer made again from its constructor's arguments, holding state's tensors."""
    module = cls(*args, **kwargs)
    if getattr(cls, "_assignable", False):
        module.__dict__.update(state)  # forward reads these Parameters (tied ones stay tied)
    else:
        with _no_grad():
            for kind in ("_parameters", "_buffers"):
                for name, t in state[kind].items():
                    if t is not None:
                        module.__dict__[kind][name].copy_(t)
        object.__setattr__(module, "training", state["training"])
        module.train(state["training"])
    return module


class Linear(_Native):
    """y = x @ weight.T + bias; weight [out_features, in_features], Kaiming-uniform init as PyTorch.
    forward reads self.weight and self.bias, so assigning them (weight tying) changes the layer."""

    _assignable = True

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self._adopt(_C.nn.Linear(in_features, out_features, bias),
                    f"in_features={in_features}, out_features={out_features}, bias={bias}")
        object.__setattr__(self, "in_features", in_features)
        object.__setattr__(self, "out_features", out_features)

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)


class Embedding(_Native):
    """Rows of weight [num_embeddings, embedding_dim] at integer ids; the padding_idx row starts at
    zero and gets no gradient. forward reads self.weight (assignable: weight tying)."""

    _assignable = True

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        self._adopt(_C.nn.Embedding(num_embeddings, embedding_dim), f"{num_embeddings}, {embedding_dim}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError(f"Padding_idx must be within num_embeddings (at {_caller()})")
            padding_idx %= num_embeddings
            with _no_grad():
                self.weight[padding_idx] = 0.0
        object.__setattr__(self, "padding_idx", padding_idx)
        object.__setattr__(self, "num_embeddings", num_embeddings)
        object.__setattr__(self, "embedding_dim", embedding_dim)

    def forward(self, ids):
        return functional.embedding(ids, self.weight, self.padding_idx)


class LayerNorm(_Native):
    """Normalizes the trailing normalized_shape dims (an int or a tuple), then scales and shifts."""

    _assignable = True

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        size = 1
        for n in shape:
            size *= n
        native = _C.nn.LayerNorm(size, eps, elementwise_affine)
        self._adopt(native, f"{shape}, eps={eps}")
        for name, t in native.named_parameters():
            self._parameters[name] = Parameter(t.reshape(*shape))
        object.__setattr__(self, "normalized_shape", shape)
        object.__setattr__(self, "eps", eps)

    def forward(self, x):
        return functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_Native):
    """x / rms(x) * weight over the last dim."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self._adopt(_C.nn.RMSNorm(dim, eps), f"({dim},), eps={eps}")


class Dropout(_Native):
    """Zeroes elements with probability p in training (scaling the rest by 1/(1-p)); identity in eval."""

    def __init__(self, p=0.5):
        super().__init__()
        self._adopt(_C.nn.Dropout(p), f"p={p}")


class Conv2d(_Native):
    """2-D convolution over [N, C, H, W]; weight [out, in/groups, k, k] (tuple sizes must be square).
    forward reads self.weight and self.bias."""

    _assignable = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__()
        k = functional._pair(kernel_size, "kernel_size", "Conv2d")
        st = functional._pair(stride, "stride", "Conv2d")
        d = functional._pair(dilation, "dilation", "Conv2d")
        if isinstance(padding, str):
            pad = padding
            num = 0
        else:
            pad = num = functional._pair(padding, "padding", "Conv2d")
        self._adopt(_C.nn.Conv2d(in_channels, out_channels, k, st, num, d, groups, bias),
                    f"{in_channels}, {out_channels}, kernel_size={(k, k)}, stride={(st, st)}")
        for name, value in (("stride", st), ("padding", pad), ("dilation", d), ("groups", groups),
                            ("in_channels", in_channels), ("out_channels", out_channels), ("kernel_size", (k, k))):
            object.__setattr__(self, name, value)

    def forward(self, x):
        return functional.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class MaxPool2d(_Native):
    """2-D max pooling over [N, C, H, W] (stride None: kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        kernel_size = functional._pair(kernel_size, "kernel_size", "MaxPool2d")
        stride = None if stride is None else functional._pair(stride, "stride", "MaxPool2d")
        padding = functional._pair(padding, "padding", "MaxPool2d")
        self._adopt(_C.nn.MaxPool2d(kernel_size, -1 if stride is None else stride, padding),
                    f"kernel_size={kernel_size}")


class AvgPool2d(_Native):
    """2-D average pooling over [N, C, H, W] (stride None: kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        kernel_size = functional._pair(kernel_size, "kernel_size", "AvgPool2d")
        stride = None if stride is None else functional._pair(stride, "stride", "AvgPool2d")
        padding = functional._pair(padding, "padding", "AvgPool2d")
        self._adopt(_C.nn.AvgPool2d(kernel_size, -1 if stride is None else stride, padding),
                    f"kernel_size={kernel_size}")


class _BatchNorm(Module):
    """Per-channel (dim 1) normalization over the batch (and spatial) dims: the batch's statistics
    in training (updating running_mean/var, unbiased), the running ones in eval, as PyTorch."""

    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(_C.ones(num_features))
            self.bias = Parameter(_C.zeros(num_features))
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features).realize())
            self.register_buffer("running_var", _C.ones(num_features).realize())
            self.register_buffer("num_batches_tracked", _C.tensor(0))

    def forward(self, x):
        if x.dim() not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected {' or '.join(f'{d}D' for d in self._dims)} input "
                             f"(got {x.dim()}D input) (at {_caller()})")
        use_batch = self.training or not self.track_running_stats
        if self.training and self.track_running_stats:
            with _no_grad():
                self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
        return functional.batch_norm(
            x, self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None,
            self.weight if self.affine else None, self.bias if self.affine else None, use_batch, self.momentum,
            self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    """Batch normalization of [N, C] or [N, C, L]."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of [N, C, H, W]."""

    _dims = (4,)


class GroupNorm(Module):
    """Normalization over groups of channels and the spatial dims, per sample."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"num_channels must be divisible by num_groups (at {_caller()})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(_C.ones(num_channels))
            self.bias = Parameter(_C.zeros(num_channels))

    def forward(self, x):
        return functional.group_norm(x, self.num_groups, self.weight if self.affine else None,
                                     self.bias if self.affine else None, self.eps)


class MLP(_Native):
    """fc (dim -> hidden) -> activation -> proj (hidden -> dim)."""

    def __init__(self, dim, hidden, activation="gelu_tanh", dropout=0.0, bias=True):
        super().__init__()
        act = {"relu": _C.nn.Activation.ReLU, "gelu": _C.nn.Activation.GELU,
               "gelu_tanh": _C.nn.Activation.GELUTanh, "silu": _C.nn.Activation.SiLU}[activation]
        self._adopt(_C.nn.MLP(dim, hidden, act, dropout, bias), f"{dim}, {hidden}")


class CausalSelfAttention(_Native):
    """Multi-head causal self-attention over [B, T, dim] (fused attention kernel)."""

    def __init__(self, dim, heads, dropout=0.0, bias=True):
        super().__init__()
        self._adopt(_C.nn.CausalSelfAttention(dim, heads, dropout, bias), f"{dim}, heads={heads}")


class TransformerBlock(_Native):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim, heads, mlp_ratio=4, dropout=0.0, bias=True):
        super().__init__()
        self._adopt(_C.nn.TransformerBlock(dim, heads, mlp_ratio, dropout, bias), f"{dim}, heads={heads}")


class GPT(_Native):
    """A decoder-only language model: ids [B, T] int64 -> logits [B, T, vocab]. GPT-2 by default; the LLaMA
    family with norm="rmsnorm", positions="rotary" (rope_theta; rope_type "llama3" with rope_factor,
    low_freq_factor, high_freq_factor, original_context), mlp="swiglu" (mlp_hidden wide), kv_heads < heads
    (grouped-query attention), bias=False and qkv_bias=True (Qwen2)."""

    def __init__(self, vocab=256, ctx=128, dim=128, heads=4, layers=4, dropout=0.0, tie_embeddings=True, bias=True,
                 kv_heads=0, mlp_hidden=0, norm="layernorm", norm_eps=1e-5, positions="learned", rope_theta=10000.0,
                 mlp="gelu_tanh", qkv_bias=False, rope_type="", rope_factor=1.0, low_freq_factor=1.0,
                 high_freq_factor=4.0, original_context=0):
        super().__init__()
        self._adopt(_C.nn.GPT(vocab, ctx, dim, heads, layers, dropout, tie_embeddings, bias, kv_heads, mlp_hidden, norm,
                              norm_eps, positions, rope_theta, mlp, qkv_bias, rope_type, rope_factor, low_freq_factor,
                              high_freq_factor, original_context),
                    f"vocab={vocab}, ctx={ctx}, dim={dim}, heads={heads}, layers={layers}")

    def generate(self, ids, max_new_tokens=20, temperature=0.0, top_k=0, top_p=1.0, seed=None, eos_token_id=None,
                 presence_penalty=0.0, frequency_penalty=0.0):
        """Continues token ids with a KV cache (alk::Generator): ``ids`` is one prompt (a list of ints, or a
        1-D tensor) or several (a list of lists, or a [B, T] tensor), decoded together. Returns the prompts
        with their continuations, as lists of ints (one list for one prompt). Greedy by default
        (temperature 0, as transformers' generate without do_sample); with a temperature, top_k / top_p
        filter the distribution and prompt i draws with seed + i. A sequence ends after max_new_tokens
        tokens or at eos_token_id (included)."""
        if hasattr(ids, "numpy"):
            ids = ids.numpy().tolist()
        single = len(ids) > 0 and not isinstance(ids[0], (list, tuple))
        prompts = [list(map(int, ids))] if single else [list(map(int, p)) for p in ids]
        out = self._native.generate(prompts, max_new_tokens, temperature, top_k, top_p, seed, eos_token_id,
                                    presence_penalty, frequency_penalty)
        return out[0] if single else out

    def save_pretrained(self, directory, dtype=None):
        """Writes a directory transformers' from_pretrained loads: config.json, model.safetensors (f32, or
        ``dtype`` alk.bfloat16 / alk.float16) and, for a model from ``from_pretrained``, its tokenizer files."""
        info = getattr(self, "config", None) or {"model_type": "gpt2"}
        _C._save_pretrained(self._native, info, str(directory), getattr(self, "_source_dir", ""),
                               (dtype or _C.dtype.float32).name)


def from_pretrained(directory, device=None):
    """A Hugging Face model directory (config.json, model.safetensors or shards, tokenizer.json,
    generation_config.json; GPT-2 and the LLaMA family) as a GPT module, on ``device`` (default: the
    default device). The module has ``tokenizer`` (alk.Tokenizer: ``encode(text, add_special_tokens=True)``
    gives transformers' input_ids), ``generation_config`` (eos ids, sampling defaults), ``chat_template``
    and ``config`` (architecture, model_type, dtype); ``save_pretrained(dir)`` writes it back."""
    native, tokenizer, chat_template, generation, info = _C._load_pretrained(str(directory), device or "")
    model = GPT.__new__(GPT)
    Module.__init__(model)
    model._adopt(native, f"{info['architecture']} from {directory}")
    object.__setattr__(model, "tokenizer", tokenizer)
    object.__setattr__(model, "chat_template", chat_template)
    object.__setattr__(model, "generation_config", generation)
    object.__setattr__(model, "config", info)
    object.__setattr__(model, "_source_dir", str(directory))
    model.eval()
    return model


# ---- layers that are one table op (Python classes: nothing to wrap) ----


class _Activation(Module):
    """An elementwise op of the table as a module."""

    _fn = None

    def forward(self, x):
        return type(self)._fn(x)


class ReLU(_Activation):
    """max(x, 0), elementwise."""
    _fn = staticmethod(_C.relu)


class GELU(_Activation):
    """GELU; approximate='tanh' for the tanh form."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _C.gelu_tanh(x) if self.approximate == "tanh" else _C.gelu(x)


class SiLU(_Activation):
    """x * sigmoid(x), elementwise."""
    _fn = staticmethod(_C.silu)


class Tanh(_Activation):
    """tanh(x), elementwise."""
    _fn = staticmethod(_C.tanh)


class Sigmoid(_Activation):
    """1 / (1 + exp(-x)), elementwise."""
    _fn = staticmethod(_C.sigmoid)


class Softplus(_Activation):
    """log(1 + exp(x)), elementwise, computed stably."""
    _fn = staticmethod(_C.softplus)


class Identity(Module):
    """Returns its input."""

    def forward(self, x):
        return x


class Flatten(Module):
    """Merges dims start_dim..end_dim (default: all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Softmax(Module):
    """Softmax along dim."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _C.softmax(x, self.dim)


# ---- containers ----


class Sequential(Module):
    """Modules applied in order; children are named "0", "1", ..."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


def clip_grad_norm_(parameters, max_norm):
    """Scales the gradients so their global L2 norm is at most max_norm; returns the norm before."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return _C.optim.clip_grad_norm(list(parameters), float(max_norm))


class utils:  # noqa: N801  (alk.nn.utils.clip_grad_norm_, as torch.nn.utils)
    """torch.nn.utils' names: clip_grad_norm_."""

    clip_grad_norm_ = staticmethod(clip_grad_norm_)


# ---- more activations (PyTorch's names and defaults) ----


class LeakyReLU(Module):
    """x where x > 0, else negative_slope * x."""

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return functional.leaky_relu(x, self.negative_slope)


class ELU(Module):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return functional.elu(x, self.alpha)


class LogSoftmax(Module):
    """log_softmax along dim."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _C.log_softmax(x, -1 if self.dim is None else self.dim)


# The losses, containers and attention of PyTorch's names (after Module, Parameter and Linear).
from .attention import MultiheadAttention  # noqa: E402,F401
from .containers import ModuleDict, ParameterDict, ParameterList  # noqa: E402,F401
from .losses import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss,  # noqa: E402,F401
                     SmoothL1Loss)
