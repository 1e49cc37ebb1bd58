// Linear, Embedding, norms, MLP, Conv2d, BatchNorm2d: thin modules over alk's ops.
#include <cmath>

#include "alk/nn.h"

namespace alk::nn {

Tensor activate(const Tensor& x, Activation a, Loc loc) {
  switch (a) {
    case Activation::ReLU: return relu(x, loc);
    case Activation::GELU: return gelu(x, loc);
    case Activation::GELUTanh: return gelu_tanh(x, loc);
    case Activation::SiLU: return silu(x, loc);
  }
  return x;
}

// PyTorch's defaults: weight and bias U(-1/sqrt(in), 1/sqrt(in)).
Linear::Linear(int64_t in, int64_t out, bool has_bias) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", zeros({out, in}));
  init::uniform_(weight, -bound, bound);
  if (has_bias) {
    bias = register_parameter("bias", zeros({out}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x, Loc loc) {
  Tensor y = matmul(x, weight.t(), loc);
  if (!bias.defined()) return y;
  // Under bf16 autocast the product is bf16 and the bias joins it in bf16 (PyTorch's addmm
  // under autocast does the same): the activation stays bf16, not widened to f32 by type
  // promotion, so what follows (GELU, the next product's input, the saved values for
  // backward) reads and writes half the bytes. Not under f16: the bias gradient would then
  // be an f16 sum, whose small values underflow without loss scaling (bf16 has f32's range).
  const bool half = autocast_dtype() == DType::BF16 && y.dtype() == DType::BF16 && bias.dtype() != y.dtype();
  return add(y, half ? cast(bias, y.dtype(), loc) : bias, loc);
}

Embedding::Embedding(int64_t num, int64_t dim) {
  weight = register_parameter("weight", zeros({num, dim}));
  init::normal_(weight, 0, 1);
}

Tensor Embedding::forward(const Tensor& ids, Loc loc) { return embedding(weight, ids, loc); }

LayerNorm::LayerNorm(int64_t d, double e, bool affine) : dim(d), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones({d}).contiguous());
    bias = register_parameter("bias", zeros({d}).contiguous());
  }
}

Tensor LayerNorm::forward(const Tensor& x, Loc loc) { return layer_norm(x, {dim}, weight, bias, eps, loc); }

RMSNorm::RMSNorm(int64_t d, double e) : dim(d), eps(e) {
  weight = register_parameter("weight", ones({d}).contiguous());
}

Tensor RMSNorm::forward(const Tensor& x, Loc loc) { return rms_norm(x, {dim}, weight, eps, loc); }

MLP::MLP(int64_t dim, int64_t h, Activation a, double p, bool bias, bool g) : act(a), hidden(h), gated(g) {
  fc = register_module("fc", std::make_shared<Linear>(dim, g ? 2 * h : h, bias));
  proj = register_module("proj", std::make_shared<Linear>(h, dim, bias));
  drop = register_module("drop", std::make_shared<Dropout>(p));
}

Tensor MLP::forward(const Tensor& x, Loc loc) {
  Tensor h = fc->forward(x, loc);
  if (gated) {  // [gate | up] along the last dim
    const int64_t last = h.dim() - 1;
    h = mul(activate(h.slice(last, 0, hidden, 1, loc), act, loc), h.slice(last, hidden, 2 * hidden, 1, loc), loc);
  } else {
    h = activate(h, act, loc);
  }
  return drop->forward(proj->forward(h, loc), loc);
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t s, int64_t p, int64_t d, int64_t g, bool has_bias)
    : stride(s), padding(p), dilation(d), groups(g) {
  check(g > 0 && in % g == 0 && out % g == 0, "Conv2d", Loc::current(), "groups ", g,
        " must divide in_channels ", in, " and out_channels ", out);
  double bound = 1.0 / std::sqrt(static_cast<double>(in / g * kernel * kernel));
  weight = register_parameter("weight", zeros({out, in / g, kernel, kernel}));
  init::uniform_(weight, -bound, bound);
  if (has_bias) {
    bias = register_parameter("bias", zeros({out}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x, Loc loc) {
  return conv2d(x, weight, bias, stride, padding, dilation, groups, loc);
}

BatchNorm2d::BatchNorm2d(int64_t c, double e, double m) : eps(e), momentum(m) {
  weight = register_parameter("weight", ones({c}).contiguous());
  bias = register_parameter("bias", zeros({c}).contiguous());
  running_mean = register_buffer("running_mean", zeros({c}).contiguous());
  running_var = register_buffer("running_var", ones({c}).contiguous());
}

Tensor BatchNorm2d::forward(const Tensor& x, Loc loc) {
  check(x.dim() == 4 && x.shape()[1] == weight.shape()[0], "BatchNorm2d", loc, "expected [N, ",
        weight.shape()[0], ", H, W], got ", to_string(x.shape()));
  const int64_t c = weight.shape()[0];
  auto per_channel = [c](const Tensor& t) { return t.reshape({1, c, 1, 1}); };
  if (!is_training()) {
    return (x - per_channel(running_mean)) * per_channel(rsqrt(running_var + eps) * weight) + per_channel(bias);
  }
  Tensor mu = mean(x, {0, 2, 3}, true);
  Tensor var_biased = mean(square(x - mu), {0, 2, 3}, true);
  {
    NoGradGuard no_grad;
    const double n = static_cast<double>(x.numel() / c);
    Tensor new_mean = running_mean * (1 - momentum) + mu.detach().reshape({c}) * momentum;
    Tensor new_var = running_var * (1 - momentum) + var_biased.detach().reshape({c}) * (momentum * n / std::max(n - 1, 1.0));
    running_mean.assign_(new_mean);
    running_var.assign_(new_var);
  }
  return (x - mu) * rsqrt(var_biased + eps) * per_channel(weight) + per_channel(bias);
}

}  // namespace alk::nn
