"""alk.nn.functional: the stateless forms of the layers and losses, as torch.nn.functional.

Every function here is an alk op (the op table's elementwise ops or a template op) or a
loss computed by alk's C++ implementation, or a composite of them. PyTorch's argument
order, defaults and layouts (the class dim is dim 1); where alk lacks an option it raises
and says so."""
import math

from .. import _C
from .._C import (avg_pool2d, fold, log_softmax, relu, rms_norm, sigmoid, silu,  # noqa: F401
                  softmax, softplus, tanh, unfold)
from .._C import conv2d as _conv2d
from .._C import dropout as _dropout
from .._C import embedding as _embedding
from .._C import gelu as _gelu
from .._C import gelu_tanh as _gelu_tanh
from .._C import layer_norm as _layer_norm
from .._C import max_pool2d as _max_pool2d
from .._C import one_hot as _one_hot
from .._C import pad as _pad
from .._C import scaled_dot_product_attention as _sdpa
from .._C import Tensor
from .._C.nn import binary_cross_entropy_with_logits as _bce_logits_mean
from .._C.nn import cross_entropy as _cross_entropy_last
from .._C.nn import mse_loss as _mse_mean

_caller = _C._caller


def linear(input, weight, bias=None):  # noqa: A002
    """input @ weight.T + bias (weight [out, in])."""
    if input.dtype != weight.dtype:
        raise RuntimeError(f"linear: expected input and weight of one dtype, got {input.dtype} and {weight.dtype} "
                           f"(at {_caller()})")
    y = _C.matmul(input, weight.t())
    return y if bias is None else y + bias


def gelu(input, approximate="none"):  # noqa: A002
    """GELU: exact (erf) by default, approximate='tanh' for the tanh form."""
    if approximate == "tanh":
        return _gelu_tanh(input)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r} (at {_caller()})")
    return _gelu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):  # noqa: A002
    """x where x > 0, else negative_slope * x."""
    out = _C.where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def elu(input, alpha=1.0, inplace=False):  # noqa: A002
    """x where x > 0, else alpha * (exp(x) - 1)."""
    out = _C.where(input > 0, input, alpha * _C.expm1(_C.minimum(input, 0.0)))
    return input.copy_(out) if inplace else out


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Zeroes elements with probability p and scales the rest by 1/(1-p) (identity when not training)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p} (at {_caller()})")
    out = _dropout(input, p, training)
    return input.copy_(out) if inplace else out


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    """Rows of weight at the integer ids in input (PyTorch's order: input, then weight). The row at
    padding_idx gets no gradient."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(f"embedding: max_norm, scale_grad_by_freq and sparse are not supported by alk "
                                  f"(at {_caller()})")
    if input.is_floating_point():
        raise RuntimeError(f"embedding: expected integer ids as the first argument (input), got {input.dtype}; "
                           f"the order is embedding(input, weight) (at {_caller()})")
    if padding_idx is not None:
        n = weight.shape[0]
        if padding_idx < 0:
            padding_idx += n
        keep = (_C.arange(n) != padding_idx).reshape(n, 1)
        weight = _C.where(keep, weight, weight.detach())
    return _embedding(weight, input)


def one_hot(tensor, num_classes=-1):
    """Integer ids -> int64 one-hot rows (num_classes -1: the largest id + 1)."""
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    return _one_hot(tensor, num_classes).to(_C.dtype.int64)


def pad(input, pad, mode="constant", value=None):  # noqa: A002
    """(before, after) pairs from the last dim backwards; mode 'constant' only."""
    if mode != "constant":
        raise NotImplementedError(f"pad: only mode='constant' is supported by alk, got {mode!r} (at {_caller()})")
    return _pad(input, list(pad), 0.0 if value is None else value)


def _pair(v, name, op):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{op}: {name} must be an int or a pair, got {v!r} (at {_caller()})")
        if v[0] != v[1]:
            raise NotImplementedError(f"{op}: alk supports square {name} only, got {tuple(v)} (at {_caller()})")
        return int(v[0])
    return int(v)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """2-D convolution: input [N, C, H, W], weight [O, C/groups, kh, kw]; tuple arguments must be square."""
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same" and _pair(stride, "stride", "conv2d") == 1:
            k, d = weight.shape[-1], _pair(dilation, "dilation", "conv2d")
            if (d * (k - 1)) % 2:
                raise NotImplementedError(f"conv2d: padding='same' with an even kernel is not supported "
                                          f"(at {_caller()})")
            padding = d * (k - 1) // 2
        else:
            raise ValueError(f"conv2d: padding must be 'valid', 'same' (stride 1) or a number (at {_caller()})")
    return _conv2d(input, weight, bias, _pair(stride, "stride", "conv2d"), _pair(padding, "padding", "conv2d"),
                   _pair(dilation, "dilation", "conv2d"), groups)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    """2-D max pooling (stride None: kernel_size); square windows."""
    if dilation not in (1, (1, 1)) or ceil_mode or return_indices:
        raise NotImplementedError(f"max_pool2d: dilation, ceil_mode and return_indices are not supported by alk "
                                  f"(at {_caller()})")
    stride = None if stride is None or stride == [] else _pair(stride, "stride", "max_pool2d")
    return _max_pool2d(input, _pair(kernel_size, "kernel_size", "max_pool2d"), stride,
                       _pair(padding, "padding", "max_pool2d"))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Layer normalization over the trailing normalized_shape dims (an int or a tuple)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _layer_norm(input, list(normalized_shape), weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,  # noqa: A002
               eps=1e-5):
    """Normalization per channel (dim 1) over the batch and spatial dims; in training the batch's
    statistics are used and the running ones updated in place (unbiased variance), as PyTorch."""
    if input.dim() < 2:
        raise ValueError(f"batch_norm: expected at least 2-D input, got {input.dim()}-D (at {_caller()})")
    c = input.shape[1]
    dims = [0] + list(range(2, input.dim()))
    shape = [1, c] + [1] * (input.dim() - 2)
    if training:
        count = input.numel() // c
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{tuple(input.shape)} (at {_caller()})")
        mean = input.mean(dims)
        var = ((input - mean.reshape(*shape)) ** 2).mean(dims)
        if running_mean is not None:
            from .. import no_grad
            with no_grad():
                running_mean.copy_((1 - momentum) * running_mean + momentum * mean.detach())
                running_var.copy_((1 - momentum) * running_var + momentum * var.detach() * (count / (count - 1)))
    else:
        mean, var = running_mean, running_var
    out = (input - mean.reshape(*shape)) / _C.sqrt(var.reshape(*shape) + eps)
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Normalization over groups of channels (dim 1) and the spatial dims, per sample."""
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"group_norm: num_channels ({c}) must be divisible by num_groups ({num_groups}) "
                           f"(at {_caller()})")
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(2, True)
    var = ((x - mean) ** 2).mean(2, True)
    out = ((x - mean) / _C.sqrt(var + eps)).reshape(*input.shape)
    shape = [1, c] + [1] * (input.dim() - 2)
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,  # noqa: A002
                recompute_scale_factor=None, antialias=False):
    """Resizes the spatial dims; mode 'nearest' with whole-number scale factors only."""
    if mode != "nearest":
        raise NotImplementedError(f"interpolate: only mode='nearest' is supported by alk, got {mode!r} "
                                  f"(at {_caller()})")
    spatial = input.shape[2:]
    if size is not None:
        size = (size,) * len(spatial) if isinstance(size, int) else tuple(size)
        factors = []
        for s, n in zip(size, spatial):
            if s % n:
                raise NotImplementedError(f"interpolate: alk supports whole-number scales only ({n} -> {s}) "
                                          f"(at {_caller()})")
            factors.append(s // n)
    elif scale_factor is not None:
        sf = (scale_factor,) * len(spatial) if not isinstance(scale_factor, (tuple, list)) else scale_factor
        factors = []
        for f in sf:
            if float(f) != int(f) or f < 1:
                raise NotImplementedError(f"interpolate: alk supports whole-number scale factors only, got {f} "
                                          f"(at {_caller()})")
            factors.append(int(f))
    else:
        raise ValueError(f"interpolate: either size or scale_factor should be defined (at {_caller()})")
    x = input
    for i, f in enumerate(factors):
        d = 2 + i
        if f == 1:
            continue
        shape = list(x.shape)
        x = x.unsqueeze(d + 1).expand(*shape[:d + 1], f, *shape[d + 1:]).reshape(*shape[:d], shape[d] * f,
                                                                                  *shape[d + 1:])
    return x


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v: PyTorch 2's signature and defaults (not causal unless is_causal).
    attn_mask: bool (True = attend) or float (added to the scores)."""
    if attn_mask is None and dropout_p == 0.0:
        return _sdpa(query, key, value, is_causal=is_causal, scale=scale)
    if attn_mask is not None and is_causal:
        raise RuntimeError(f"scaled_dot_product_attention: attn_mask and is_causal cannot both be set "
                           f"(at {_caller()})")
    d = query.shape[-1]
    s = (1.0 / math.sqrt(d)) if scale is None else scale
    scores = _C.matmul(query, key.transpose(-2, -1)) * s
    if is_causal:
        t, u = query.shape[-2], key.shape[-2]
        attn_mask = _C.tril(_C.ones(t, u)) > 0
    if attn_mask is not None:
        if attn_mask.dtype == _C.dtype.bool:
            scores = _C.where(attn_mask, scores, -math.inf)
        else:
            scores = scores + attn_mask
    weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = _dropout(weights, dropout_p, True)
    return _C.matmul(weights, value)


# ---- losses: PyTorch's layouts (class dim 1), reduction= and weight= ----

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(reduction, size_average, reduce, op):
    if size_average is not None or reduce is not None:
        reduce = True if reduce is None else reduce
        size_average = True if size_average is None else size_average
        reduction = ("mean" if size_average else "sum") if reduce else "none"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction (in {op}) (at {_caller()})")
    return reduction


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _class_last(input, target, op):  # noqa: A002
    """input [N, C, d1...] (or [C]) as [M, C], and the shape of the per-element losses ([N, d1...] or
    []), which target must have."""
    if input.dim() == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension (at {_caller()})")
    if input.dim() == 1:
        return input.unsqueeze(0), ()
    c = input.shape[1]
    rest = tuple(input.shape[:1]) + tuple(input.shape[2:])
    if input.dim() > 2:
        input = input.permute(0, *range(2, input.dim()), 1)
    return input.reshape(-1, c), rest


def _check_target(input, target, rest, op):  # noqa: A002
    if tuple(target.shape) == tuple(rest):
        return
    if input.dim() >= 2 and target.dim() >= 1 and target.shape[0] != input.shape[0]:
        raise ValueError(f"{op}: Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}) (at {_caller()})")
    raise RuntimeError(f"{op}: expected target of shape {tuple(rest)} for input of shape {tuple(input.shape)} "
                       f"(class dim 1), got {tuple(target.shape)} (at {_caller()})")


def _nll(logp, target, weight, ignore_index, reduction, label_smoothing, op):
    """logp [M, C] (class last), target [M] integer class ids."""
    m, c = logp.shape
    if target.is_floating_point():
        raise RuntimeError(f"{op}: expected integer class ids as target (or class probabilities of the input's "
                           f"shape), got {target.dtype} of shape {tuple(target.shape)} (at {_caller()})")
    target = target.reshape(-1)
    if target.shape[0] != m:
        raise ValueError(f"{op}: Expected input batch_size ({m}) to match target batch_size "
                         f"({target.shape[0]}) (at {_caller()})")
    valid = target != ignore_index
    if bool(((target < 0) | (target >= c)).__and__(valid).any()):
        raise IndexError(f"{op}: Target {target.tolist()} is out of bounds for {c} classes (at {_caller()})")
    safe = _C.where(valid, target, 0).to(_C.dtype.int64)
    picked = -logp.gather(1, safe.reshape(m, 1)).reshape(m)
    w = weight.index_select(0, safe) if weight is not None else None
    nll = picked * w if w is not None else picked
    mask = valid.to(logp.dtype)
    loss = nll * mask
    denom = (w * mask).sum() if w is not None else mask.sum()
    if label_smoothing > 0:
        smooth = -(logp * weight.reshape(1, c)).sum(1) if weight is not None else -logp.sum(1)
        smooth = smooth * mask / c
        loss = (1 - label_smoothing) * loss + label_smoothing * smooth
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / denom


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,  # noqa: A002
                  reduction="mean", label_smoothing=0.0):
    """Cross entropy of logits input [N, C, d...] (class dim 1, as PyTorch; or [C]) against class ids
    [N, d...] or class probabilities of input's shape."""
    reduction = _reduction(reduction, size_average, reduce, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing} "
                         f"(at {_caller()})")
    x, rest = _class_last(input, target, "cross_entropy")
    c = x.shape[1]
    if target.is_floating_point():
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(f"cross_entropy: class-probability targets must have the input's shape "
                               f"{tuple(input.shape)}, got {tuple(target.shape)} (at {_caller()})")
        tp, _ = _class_last(target, target, "cross_entropy")
        if label_smoothing > 0:
            tp = tp * (1 - label_smoothing) + label_smoothing / c
        logp = log_softmax(x, -1)
        terms = tp * logp if weight is None else tp * logp * weight.reshape(1, c)
        loss = -terms.sum(1)
        if reduction == "none":
            return loss.reshape(*rest)
        return loss.sum() if reduction == "sum" else loss.sum() / x.shape[0]
    _check_target(input, target, rest, "cross_entropy")
    t = target.reshape(-1)
    if weight is None and reduction == "mean":
        return _cross_entropy_last(x, t, ignore_index, label_smoothing)  # fused
    loss = _nll(log_softmax(x, -1), t, weight, ignore_index, reduction, label_smoothing, "cross_entropy")
    return loss.reshape(*rest) if reduction == "none" else loss


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,  # noqa: A002
             reduction="mean"):
    """Negative log likelihood of log-probabilities input [N, C, d...] (class dim 1) at target ids."""
    reduction = _reduction(reduction, size_average, reduce, "nll_loss")
    x, rest = _class_last(input, target, "nll_loss")
    _check_target(input, target, rest, "nll_loss")
    loss = _nll(x, target.reshape(-1), weight, ignore_index, reduction, 0.0, "nll_loss")
    return loss.reshape(*rest) if reduction == "none" else loss


def _same_shape(input, target, op):  # noqa: A002
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"{op}: Using a target size ({tuple(target.shape)}) that is different to the input size "
                         f"({tuple(input.shape)}) is not supported (at {_caller()})")


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    """Mean (or summed, or elementwise) squared error."""
    reduction = _reduction(reduction, size_average, reduce, "mse_loss")
    if reduction == "mean" and tuple(input.shape) == tuple(target.shape):
        return _mse_mean(input, target)
    return _reduce((input - target) ** 2, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):  # noqa: A002
    """Mean (or summed, or elementwise) absolute error."""
    return _reduce(_C.abs(input - target), _reduction(reduction, size_average, reduce, "l1_loss"))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):  # noqa: A002
    """Huber-like loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""
    d = _C.abs(input - target)
    loss = _C.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta) if beta > 0 else d
    return _reduce(loss, _reduction(reduction, size_average, reduce, "smooth_l1_loss"))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):
    """Binary cross entropy of probabilities input against target (logs clamped at -100, as PyTorch)."""
    _same_shape(input, target, "binary_cross_entropy")
    loss = -(target * _C.maximum(_C.log(input), -100.0) + (1 - target) * _C.maximum(_C.log(1 - input), -100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, _reduction(reduction, size_average, reduce, "binary_cross_entropy"))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                                     reduction="mean", pos_weight=None):
    """Binary cross entropy of logits input against target in [0, 1], computed stably."""
    _same_shape(input, target, "binary_cross_entropy_with_logits")
    reduction = _reduction(reduction, size_average, reduce, "binary_cross_entropy_with_logits")
    if weight is None and pos_weight is None and reduction == "mean":
        return _bce_logits_mean(input, target)
    softplus_neg = _C.log1p(_C.exp(-_C.abs(input))) + _C.maximum(-input, 0.0)  # log(1 + exp(-x))
    if pos_weight is not None:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * softplus_neg
    else:
        loss = (1 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):  # noqa: A002
    """KL divergence with input as log-probabilities ('batchmean' divides by the batch size)."""
    if log_target:
        loss = _C.exp(target) * (target - input)
    else:
        loss = _C.where(target > 0, target * (_C.log(_C.maximum(target, 1e-45)) - input), 0.0)
    if reduction == "batchmean":
        return loss.sum() / input.shape[0]
    return _reduce(loss, _reduction(reduction, size_average, reduce, "kl_div"))
