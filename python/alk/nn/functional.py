"""alk.nn.functional: the stateless forms of the layers and losses, as torch.nn.functional.

Every function here is an alk op (the op table's elementwise ops or a template op) or a
loss computed by alk's C++ implementation."""
from .._C import (avg_pool2d, conv2d, dropout, embedding, fold, layer_norm, log_softmax,  # noqa: F401
                   max_pool2d, one_hot, pad, relu, rms_norm, scaled_dot_product_attention, sigmoid, silu,
                   softmax, softplus, tanh, unfold)
from .._C import gelu as _gelu
from .._C import gelu_tanh as _gelu_tanh
from .._C import matmul as _matmul
from .._C.nn import binary_cross_entropy_with_logits, cross_entropy, mse_loss  # noqa: F401


def linear(input, weight, bias=None):  # noqa: A002
    """input @ weight.T + bias (weight [out, in])."""
    y = _matmul(input, weight.t())
    return y if bias is None else y + bias


def gelu(input, approximate="none"):  # noqa: A002
    """GELU: exact (erf) by default, approximate='tanh' for the tanh form."""
    if approximate == "tanh":
        return _gelu_tanh(input)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _gelu(input)
