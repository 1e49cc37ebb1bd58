// ONNX normalization, convolution and pooling (1-D and 2-D through unfold2d and matmul; 3-D as
// sums or chains of 2-D ones), losses, and a few ops of the same models (Dropout, PRelu, TopK).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// ---- normalization -----------------------------------------------------------------------

// [1, C, 1, ...] for x [N, C, ...] (callers check the rank is at least 2).
Shape channel_shape(const Tensor& x) {
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = -1;
  return s;
}

// Inference: the running mean and variance normalize. Training (training_mode, opset 14; more
// than one output before): the batch's mean and population variance over every axis but the
// channels normalize, and the running statistics move toward them by 1 - momentum.
Outs op_batchnorm(Ctx& c) {
  const Tensor& x = c.x(0);
  const bool training = c.opset >= 14 ? c.i("training_mode", 0) != 0 : c.node.outputs.size() > 1;
  c.require(x.dim() >= 2, "input must be at least 2-D");
  const double eps = c.f("epsilon", 1e-5);
  Shape cs = channel_shape(x);
  Tensor scale = c.x(1).reshape(cs), bias = c.x(2).reshape(cs), m = c.x(3).reshape(cs), v = c.x(4).reshape(cs);
  if (!training) return {(x - m) * (scale * rsqrt(v + eps)) + bias};
  if (c.node.outputs.size() > 3) c.unsupported("the saved mean and variance outputs (training mode before opset 14)");
  const double momentum = c.f("momentum", 0.9);
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
  const Tensor batch_mean = mean(x, axes, true), centered = x - batch_mean;
  const Tensor batch_var = mean(centered * centered, axes, true);
  const Shape stat = c.x(3).shape();
  return {centered * (scale * rsqrt(batch_var + eps)) + bias,
          c.x(3) * momentum + batch_mean.reshape(stat) * (1.0 - momentum),
          c.x(4) * momentum + batch_var.reshape(stat) * (1.0 - momentum)};
}

Outs op_instancenorm(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() >= 3, "input must be at least 3-D");
  const double eps = c.f("epsilon", 1e-5);
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
  Tensor m = mean(x, axes, true);
  Tensor d = x - m;
  Tensor v = mean(d * d, axes, true);
  Shape cs = channel_shape(x);
  return {d * rsqrt(v + eps) * c.x(1).reshape(cs) + c.x(2).reshape(cs)};
}

Outs op_layernorm(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", -1), x.dim());
  const double eps = c.f("epsilon", 1e-5);
  Shape norm(x.shape().begin() + axis, x.shape().end());
  const bool stats = (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) ||
                     (c.node.outputs.size() > 2 && !c.node.outputs[2].empty());
  const Tensor& scale = c.x(1);
  if (!stats && is_float(x) && x.dtype() == DType::F32 && scale.shape() == norm && (!c.has(2) || c.x(2).shape() == norm))
    return {layer_norm(x, norm, scale, c.has(2) ? c.x(2) : Tensor(), eps, c.loc)};
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < x.dim(); ++d) axes.push_back(d);
  Tensor xf = x.dtype() == DType::F64 ? x : x.to(DType::F32);
  Tensor m = mean(xf, axes, true);
  Tensor d = xf - m;
  Tensor inv = rsqrt(mean(d * d, axes, true) + eps);
  Tensor y = cast(d * inv, x.dtype()) * scale;
  if (c.has(2)) y = y + c.x(2);
  return {y, m, inv};
}

Outs op_mvn(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = c.ints("axes", {0, 2, 3});
  for (auto& a : axes) a = c.axis(a, x.dim());
  Tensor m = mean(x, axes, true);
  Tensor d = x - m;
  return {d / sqrt(mean(d * d, axes, true) + 1e-9)};
}

// ---- convolution and pooling -------------------------------------------------------------

struct Window {
  int64_t spatial = 0;  // 1 or 2
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

// Kernel, strides, dilations and pads of a Conv/Pool node over x's spatial dims (auto_pad resolved).
Window window_of(Ctx& c, const Tensor& x, std::vector<int64_t> kernel) {
  Window w;
  w.spatial = x.dim() - 2;
  if (w.spatial < 1 || w.spatial > 2) c.unsupported(w.spatial, "-D spatial input (only 1-D and 2-D)");
  if (!(static_cast<int64_t>(kernel.size()) == w.spatial))
    c.fail_with("kernel_shape ", to_string(kernel), " does not match input rank");
  w.kernel = kernel;
  const size_t s = static_cast<size_t>(w.spatial);
  w.strides = c.ints("strides", std::vector<int64_t>(s, 1));
  w.dilations = c.ints("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = c.ints("pads", std::vector<int64_t>(2 * s, 0));
  c.require(w.strides.size() == s && w.dilations.size() == s && pads.size() == 2 * s, "strides/dilations/pads of the wrong length");
  for (size_t k = 0; k < s; ++k) {
    c.require(w.kernel[k] > 0 && w.kernel[k] <= 4096 && w.strides[k] > 0 && w.strides[k] <= 4096 && w.dilations[k] > 0 &&
                  w.dilations[k] <= 4096 && pads[k] >= 0 && pads[k + s] >= 0 && pads[k] <= 4096 && pads[k + s] <= 4096,
              "kernel/strides/dilations/pads out of range");
  }
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(s));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(s), pads.end());
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t k = 0; k < s; ++k) {
      const int64_t in = x.shape()[2 + k];
      const int64_t out = (in + w.strides[k] - 1) / w.strides[k];
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[k] + (w.kernel[k] - 1) * w.dilations[k] + 1 - in);
      w.pad_begin[k] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[k] = total - w.pad_begin[k];
    }
  } else if (auto_pad == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  } else {
    c.require(auto_pad == "NOTSET", "unknown auto_pad ", auto_pad);
  }
  return w;
}

// Pads the spatial dims (asymmetric, any value) and lifts 1-D to 2-D: [N, C, H, W].
Tensor padded_2d(const Tensor& x, const Window& w, const std::vector<int64_t>& extra_end, double value) {
  Tensor y = w.spatial == 1 ? x.unsqueeze(2) : x;
  std::vector<int64_t> pads;  // torch order: last dim first
  if (w.spatial == 1) pads = {w.pad_begin[0], w.pad_end[0] + extra_end[0]};
  else pads = {w.pad_begin[1], w.pad_end[1] + extra_end[1], w.pad_begin[0], w.pad_end[0] + extra_end[0]};
  bool any = false;
  for (int64_t p : pads) any = any || p != 0;
  return any ? pad(y, pads, value) : y;
}

Conv2dGeometry geometry_2d(const Window& w);

// x as [N, C, H, W] with the geometry unfold2d takes: symmetric pads stay in the geometry (the
// unfold reads pad_value there, no padded copy is made); other pads are applied first.
std::pair<Tensor, Conv2dGeometry> unfold_input(const Tensor& x, const Window& w, const std::vector<int64_t>& extra_end,
                                               double value) {
  Conv2dGeometry g = geometry_2d(w);
  bool symmetric = true;
  for (size_t k = 0; k < w.pad_begin.size(); ++k)
    symmetric = symmetric && w.pad_begin[k] == w.pad_end[k] && extra_end[k] == 0;
  if (!symmetric) return {padded_2d(x, w, extra_end, value), g};
  if (w.spatial == 1) {
    g.pad_w = w.pad_begin[0];
  } else {
    g.pad_h = w.pad_begin[0];
    g.pad_w = w.pad_begin[1];
  }
  return {w.spatial == 1 ? x.unsqueeze(2) : x, g};
}

Conv2dGeometry geometry_2d(const Window& w) {
  Conv2dGeometry g;
  if (w.spatial == 1) {
    g.kw = w.kernel[0];
    g.stride_w = w.strides[0];
    g.dilation_w = w.dilations[0];
  } else {
    g.kh = w.kernel[0];
    g.kw = w.kernel[1];
    g.stride_h = w.strides[0];
    g.stride_w = w.strides[1];
    g.dilation_h = w.dilations[0];
    g.dilation_w = w.dilations[1];
  }
  return g;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d) { return (in - ((k - 1) * d + 1)) / s + 1; }

Tensor restore_rank(const Tensor& y, const Window& w) { return w.spatial == 1 ? y.squeeze(2) : y; }

// 3-D convolution as a sum over the kernel's depth taps of 2-D convolutions: tap kd reads the
// (padded) input depths d' * stride + kd * dilation for every output depth d', folded into the
// batch, with the kernel's slice W[:, :, kd]. auto_pad over H and W passes on to the 2-D part.
Outs conv_3d(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  c.require(wt.dim() == 5, "W must be 5-D for a 3-D convolution, got ", to_string(wt.shape()));
  const std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  c.require(c.ints("kernel_shape", kernel) == kernel, "kernel_shape does not match W");
  const std::vector<int64_t> strides = c.ints("strides", {1, 1, 1}), dilations = c.ints("dilations", {1, 1, 1});
  std::vector<int64_t> pads = c.ints("pads", {0, 0, 0, 0, 0, 0});
  c.require(strides.size() == 3 && dilations.size() == 3 && pads.size() == 6, "strides/dilations/pads of the wrong length for 3-D");
  c.require(strides[0] >= 1 && strides[0] <= 4096 && dilations[0] >= 1 && dilations[0] <= 4096 && pads[0] >= 0 &&
                pads[3] >= 0 && pads[0] <= 4096 && pads[3] <= 4096,
            "depth stride/dilation/pads out of range");
  const int64_t N = x.shape()[0], D = x.shape()[2], KD = kernel[0], span = (KD - 1) * dilations[0] + 1;
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t out = (D + strides[0] - 1) / strides[0], total = std::max<int64_t>(0, (out - 1) * strides[0] + span - D);
    pads[0] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pads[3] = total - pads[0];
  } else if (auto_pad == "VALID") {
    pads[0] = pads[3] = 0;
  }
  const int64_t padded = D + pads[0] + pads[3];
  c.require(padded >= span, "the kernel does not fit the padded input depth");
  const int64_t out_d = (padded - span) / strides[0] + 1;
  const Tensor xt = (pads[0] || pads[3] ? pad(x, {0, 0, 0, 0, pads[0], pads[3]}) : x).permute({0, 2, 1, 3, 4});
  Node plane = c.node;
  for (auto& [name, values] : {std::pair{"kernel_shape", std::vector<int64_t>{kernel[1], kernel[2]}},
                               {"strides", {strides[1], strides[2]}},
                               {"dilations", {dilations[1], dilations[2]}},
                               {"pads", {pads[1], pads[2], pads[4], pads[5]}}}) {
    Attr a;
    a.kind = Attr::Ints;
    a.ints = values;
    plane.attrs[name] = a;
  }
  Tensor acc;
  for (int64_t kd = 0; kd < KD; ++kd) {
    const int64_t first = kd * dilations[0];
    const Tensor taps = xt.slice(1, first, first + (out_d - 1) * strides[0] + 1, strides[0], c.loc);  // [N, D', C, H, W]
    Shape folded{N * out_d};
    folded.insert(folded.end(), x.shape().begin() + 1, x.shape().begin() + 2);
    folded.insert(folded.end(), x.shape().begin() + 3, x.shape().end());
    Ctx part{plane, c.opset, {taps.reshape(folded), wt.select(2, kd)}, c.loc};
    const Tensor y = op_conv(part)[0];  // [N * D', M, H', W']
    acc = acc.defined() ? acc + y : y;
  }
  const int64_t M = wt.shape()[0];
  Tensor y = acc.reshape({N, out_d, M, acc.shape()[2], acc.shape()[3]}).permute({0, 2, 1, 3, 4});
  if (c.has(2)) y = y + c.x(2).reshape({1, M, 1, 1, 1});
  return {y.contiguous()};
}

}  // namespace

Outs op_conv(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  if (x.dim() == 5) return conv_3d(c);
  c.require(x.dim() == wt.dim() && x.dim() >= 3, "X and W ranks differ or are below 3");
  std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  Window w = window_of(c, x, c.ints("kernel_shape", kernel));
  c.require(w.kernel == kernel, "kernel_shape does not match W");
  const int64_t groups = c.i("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1], M = wt.shape()[0];
  if (!(groups > 0 && C % groups == 0 && M % groups == 0 && wt.shape()[1] == C / groups))
    c.fail_with("channels ", C, " and W ", to_string(wt.shape()), " do not fit group ", groups);
  Tensor bias = c.has(2) ? c.x(2) : Tensor();
  bool pointwise = true;  // 1x1, stride 1, no pads: a matmul over the channels, no unfold
  for (size_t k = 0; k < static_cast<size_t>(w.spatial); ++k)
    pointwise = pointwise && w.kernel[k] == 1 && w.strides[k] == 1 && w.pad_begin[k] == 0 && w.pad_end[k] == 0;
  if (pointwise && w.spatial == 2 && groups == 1) return {conv2d(x, wt, bias, 1, 0, 1, 1, c.loc)};  // ops/conv.cpp picks
  if (pointwise) {
    const int64_t L = x.numel() / std::max<int64_t>(N * C, 1);
    Tensor y = matmul(wt.reshape({groups, M / groups, C / groups}), x.reshape({N, groups, C / groups, L}), c.loc);
    Shape out = x.shape();
    out[1] = M;
    y = y.reshape(out);
    if (bias.defined()) y = y + bias.reshape(channel_shape(y));
    return {y};
  }
  const bool uniform = w.spatial == 2 && w.strides[0] == w.strides[1] && w.dilations[0] == w.dilations[1] &&
                       w.pad_begin[0] == w.pad_end[0] && w.pad_begin[1] == w.pad_end[1] && w.pad_begin[0] == w.pad_begin[1];
  if (uniform) return {conv2d(x, wt, bias, w.strides[0], w.pad_begin[0], w.dilations[0], groups, c.loc)};
  if (groups == C && M == C) {  // depthwise, other geometries: the direct kernel too
    auto [xp, g] = unfold_input(x, w, std::vector<int64_t>(static_cast<size_t>(w.spatial), 0), 0.0);
    Tensor w4 = w.spatial == 1 ? wt.unsqueeze(2) : wt;
    Tensor y = depthwise_conv2d(xp, w4, g, c.loc);
    if (bias.defined()) y = y + bias.reshape({1, M, 1, 1});
    return {restore_rank(y, w)};
  }
  auto [xp, g] = unfold_input(x, w, std::vector<int64_t>(static_cast<size_t>(w.spatial), 0), 0.0);
  Tensor w4 = w.spatial == 1 ? wt.unsqueeze(2) : wt;
  const int64_t H = xp.shape()[2] + 2 * g.pad_h, W = xp.shape()[3] + 2 * g.pad_w;
  const int64_t oh = out_size(H, g.kh, g.stride_h, g.dilation_h), ow = out_size(W, g.kw, g.stride_w, g.dilation_w);
  c.require(oh > 0 && ow > 0, "the kernel does not fit the padded input");
  Tensor cols = unfold2d(xp, g, 0.0, c.loc);  // [N, C*kh*kw, L]
  const int64_t K = (C / groups) * g.kh * g.kw;
  Tensor y = matmul(w4.reshape({groups, M / groups, K}), cols.reshape({N, groups, K, oh * ow}), c.loc);
  y = y.reshape({N, M, oh, ow});
  if (bias.defined()) y = y + bias.reshape({1, M, 1, 1});
  return {restore_rank(y, w)};
}

namespace {

Outs op_conv_transpose(Ctx& c);

// 3-D transposed convolution as a sum over the kernel's depth taps of 2-D ones: input depth d
// with tap kd lands on output depth d * stride + kd * dilation, the input depths folded into the
// batch. The depth's pads (from pads, output_shape or auto_pad, as for H and W) crop the sum;
// H and W are the 2-D part's.
Outs conv_transpose_3d(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  c.require(wt.dim() == 5, "W must be 5-D for a 3-D transposed convolution, got ", to_string(wt.shape()));
  const std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  c.require(c.ints("kernel_shape", kernel) == kernel, "kernel_shape does not match W");
  const std::vector<int64_t> strides = c.ints("strides", {1, 1, 1}), dilations = c.ints("dilations", {1, 1, 1}),
                             out_pad = c.ints("output_padding", {0, 0, 0});
  std::vector<int64_t> pads = c.ints("pads", {0, 0, 0, 0, 0, 0}), out_shape = c.ints("output_shape");
  c.require(strides.size() == 3 && dilations.size() == 3 && pads.size() == 6 && out_pad.size() == 3,
            "strides/dilations/pads/output_padding of the wrong length for 3-D");
  c.require(strides[0] >= 1 && strides[0] <= 4096 && dilations[0] >= 1 && dilations[0] <= 4096 && out_pad[0] >= 0 &&
                out_pad[0] < std::max(strides[0], dilations[0]) && std::abs(pads[0]) <= 4096 && std::abs(pads[3]) <= 4096,
            "depth stride/dilation/pads/output_padding out of range");
  if (out_shape.size() == 5) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  c.require(out_shape.empty() || out_shape.size() == 3, "output_shape of the wrong length");
  const int64_t N = x.shape()[0], D = x.shape()[2], KD = kernel[0];
  const int64_t full = (D - 1) * strides[0] + (KD - 1) * dilations[0] + 1 + out_pad[0];
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t total = full - (out_shape.empty() ? D * strides[0] : out_shape[0]);
    c.require(total > -kMaxShapeValues, "output_shape too large");
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor, as the spec's Python
    pads[0] = auto_pad == "SAME_UPPER" ? half : total - half;
    pads[3] = total - pads[0];
  }
  Node plane = c.node;
  std::vector<std::pair<const char*, std::vector<int64_t>>> attrs = {
      {"kernel_shape", {kernel[1], kernel[2]}}, {"strides", {strides[1], strides[2]}},
      {"dilations", {dilations[1], dilations[2]}}, {"pads", {pads[1], pads[2], pads[4], pads[5]}},
      {"output_padding", {out_pad[1], out_pad[2]}}};
  if (!out_shape.empty()) attrs.push_back({"output_shape", {out_shape[1], out_shape[2]}});
  for (auto& [name, values] : attrs) {
    Attr a;
    a.kind = Attr::Ints;
    a.ints = values;
    plane.attrs[name] = a;
  }
  const Tensor planes = x.permute({0, 2, 1, 3, 4}).reshape({N * D, x.shape()[1], x.shape()[3], x.shape()[4]});
  const int64_t placed = (D - 1) * strides[0] + 1;
  Tensor acc;
  for (int64_t kd = 0; kd < KD; ++kd) {
    Ctx part{plane, c.opset, {planes, wt.select(2, kd)}, c.loc};
    Tensor z = op_conv_transpose(part)[0];  // [N * D, M, H', W']
    const Shape zs = z.shape();
    z = z.reshape({N, D, zs[1], zs[2], zs[3]});
    if (strides[0] > 1)  // input depth d at d * stride: stride - 1 zero planes after each
      z = pad(z.unsqueeze(2), {0, 0, 0, 0, 0, 0, 0, strides[0] - 1}).reshape({N, D * strides[0], zs[1], zs[2], zs[3]}).slice(1, 0, placed);
    const int64_t front = kd * dilations[0];
    z = pad(z, {0, 0, 0, 0, 0, 0, front, full - placed - front});
    acc = acc.defined() ? acc + z : z;
  }
  // Positive pads crop the depth, negative ones extend it with zeros.
  acc = acc.slice(1, std::max<int64_t>(pads[0], 0), full - std::max<int64_t>(pads[3], 0));
  if (pads[0] < 0 || pads[3] < 0)
    acc = pad(acc, {0, 0, 0, 0, 0, 0, std::max<int64_t>(-pads[0], 0), std::max<int64_t>(-pads[3], 0)});
  const int64_t M = acc.shape()[2];
  Tensor y = acc.permute({0, 2, 1, 3, 4});
  if (c.has(2)) y = y + c.x(2).reshape({1, M, 1, 1, 1});
  return {y.contiguous()};
}

Outs op_conv_transpose(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  c.require(x.dim() == wt.dim() && x.dim() >= 3, "X and W ranks differ or are below 3");
  if (x.dim() == 5) return conv_transpose_3d(c);
  std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  const int64_t groups = c.i("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1];
  if (!(groups > 0 && C % groups == 0 && wt.shape()[0] == C))
    c.fail_with("W ", to_string(wt.shape()), " does not fit ", C, " channels");
  const int64_t M = wt.shape()[1] * groups;
  // The pads here crop the full output, so window_of's auto_pad (for a forward conv) is not used.
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  Window w;
  {
    Node plain = c.node;
    plain.attrs.erase("auto_pad");
    Ctx pc{plain, c.opset, c.in, c.loc};
    w = window_of(pc, x, c.ints("kernel_shape", kernel));
  }
  const size_t s = static_cast<size_t>(w.spatial);
  std::vector<int64_t> out_pad = c.ints("output_padding", std::vector<int64_t>(s, 0));
  std::vector<int64_t> out_shape = c.ints("output_shape");
  c.require(out_pad.size() == s, "output_padding of the wrong length");
  std::vector<int64_t> full(s);
  for (size_t k = 0; k < s; ++k) {
    c.require(out_pad[k] >= 0 && out_pad[k] < std::max(w.strides[k], w.dilations[k]), "output_padding out of range");
    full[k] = (x.shape()[2 + k] - 1) * w.strides[k] + (w.kernel[k] - 1) * w.dilations[k] + 1 + out_pad[k];
  }
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (out_shape.size() == s + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.empty())
      for (size_t k = 0; k < s; ++k) out_shape.push_back(x.shape()[2 + k] * w.strides[k]);
    c.require(out_shape.size() == s, "output_shape of the wrong length");
    for (size_t k = 0; k < s; ++k) {
      const int64_t total = full[k] - out_shape[k];
      c.require(total > -kMaxShapeValues, "output_shape too large");
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor, as the spec's Python
      if (auto_pad == "SAME_UPPER") {
        w.pad_begin[k] = half;
        w.pad_end[k] = total - half;
      } else {
        w.pad_begin[k] = total - half;
        w.pad_end[k] = half;
      }
    }
  }
  Conv2dGeometry g = geometry_2d(w);
  const int64_t H = w.spatial == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
  const int64_t fh = w.spatial == 1 ? 1 : full[0], fw = full[s - 1];
  c.checked({N, M, fh, fw});
  const int64_t K = (M / groups) * g.kh * g.kw;
  Tensor w3 = wt.reshape({groups, C / groups, K}).transpose(1, 2);                 // [g, K, C/g]
  Tensor cols = matmul(w3, x.reshape({N, groups, C / groups, H * W}), c.loc);     // [N, g, K, L]
  Tensor y = fold2d(cols.reshape({N, M * g.kh * g.kw, H * W}), fh, fw, g, c.loc);  // [N, M, fh, fw]
  // Positive pads crop the full output, negative ones extend it with zeros.
  auto crop = [&](Tensor t, int64_t dim, int64_t b, int64_t e) {
    const int64_t n = t.shape()[static_cast<size_t>(dim)];
    t = t.slice(dim, std::max<int64_t>(b, 0), n - std::max<int64_t>(e, 0));
    if (b < 0 || e < 0) {
      std::vector<int64_t> p(2 * static_cast<size_t>(4 - dim), 0);
      p[p.size() - 2] = std::max<int64_t>(-b, 0);
      p[p.size() - 1] = std::max<int64_t>(-e, 0);
      t = pad(t, p);
    }
    return t;
  };
  if (w.spatial == 1) {
    y = crop(y, 3, w.pad_begin[0], w.pad_end[0]);
  } else {
    y = crop(crop(y, 2, w.pad_begin[0], w.pad_end[0]), 3, w.pad_begin[1], w.pad_end[1]);
  }
  if (c.has(2)) y = y + c.x(2).reshape({1, M, 1, 1});
  return {restore_rank(y, w)};
}

Outs pool_3d(Ctx& c, bool is_max);

Handler pool(bool is_max) {
  return [is_max](Ctx& c) {
    const Tensor& x = c.x(0);
    if (x.dim() == 5) return pool_3d(c, is_max);
    const bool want_indices = c.node.outputs.size() > 1 && !c.node.outputs[1].empty();
    const bool column_major = c.i("storage_order", 0) != 0;
    c.require(is_float(x) || is_max, "average pooling needs a floating-point input");
    Window w = window_of(c, x, c.ints("kernel_shape"));
    const size_t s = static_cast<size_t>(w.spatial);
    const bool ceil_mode = c.i("ceil_mode", 0) != 0;
    std::vector<int64_t> extra(s, 0), out(s);
    for (size_t k = 0; k < s; ++k) {
      const int64_t in = x.shape()[2 + k] + w.pad_begin[k] + w.pad_end[k];
      const int64_t eff = (w.kernel[k] - 1) * w.dilations[k] + 1;
      c.require(in >= eff, "the kernel does not fit the padded input");
      int64_t o = (in - eff) / w.strides[k] + 1;
      if (ceil_mode) {
        o = (in - eff + w.strides[k] - 1) / w.strides[k] + 1;
        if ((o - 1) * w.strides[k] >= x.shape()[2 + k] + w.pad_begin[k]) --o;
      }
      out[k] = o;
      extra[k] = std::max<int64_t>(0, (o - 1) * w.strides[k] + eff - in);
    }
    double lowest = -std::numeric_limits<double>::infinity();
    if (x.dtype() == DType::U8 || x.dtype() == DType::Bool) lowest = 0;
    else if (x.dtype() == DType::I32) lowest = std::numeric_limits<int32_t>::min();
    else if (x.dtype() == DType::I64) lowest = static_cast<double>(std::numeric_limits<int64_t>::min());
    auto [xp, g] = unfold_input(x, w, extra, is_max ? lowest : 0.0);
    const int64_t N = x.shape()[0], C = x.shape()[1];
    const int64_t oh = s == 1 ? 1 : out[0], ow = out[s - 1];
    if (is_max && !want_indices && g.pad_h == 0 && g.pad_w == 0 && g.kh * g.kw <= 16) {
      // A few taps without padding: the elementwise maximum of one strided view per tap, one Map
      // kernel that a following reduction (cls's MaxPool -> GlobalAveragePool) takes as its
      // prologue. Unfold + a reduction over the tap axis (a middle axis: strided loads) was 12%
      // of cls's kernel time for one 2x2 pool.
      Tensor y;
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t y0 = ky * g.dilation_h, x0 = kx * g.dilation_w;
          Tensor tap = xp.slice(2, y0, y0 + (oh - 1) * g.stride_h + 1, g.stride_h, c.loc)
                           .slice(3, x0, x0 + (ow - 1) * g.stride_w + 1, g.stride_w, c.loc);
          y = y.defined() ? maximum(y, tap) : tap;
        }
      return Outs{restore_rank(g.kh * g.kw == 1 ? y.contiguous() : y, w)};
    }
    Tensor cols = unfold2d(xp, g, is_max ? lowest : 0.0, c.loc).reshape({N, C, g.kh * g.kw, oh * ow});
    Tensor y;
    if (is_max) {
      y = max(cols, {2});
    } else {
      // Each tap's weight 1/count (0 for taps outside what counts), made on the host, so the
      // average is one weighted sum (a reduction with a prologue, which every backend runs).
      const bool include_pad = c.i("count_include_pad", 0) != 0;
      const int64_t H = s == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
      const int64_t ph = s == 1 ? 0 : w.pad_begin[0], pw = w.pad_begin[s - 1];
      const int64_t ph_end = s == 1 ? 0 : w.pad_end[0], pw_end = w.pad_end[s - 1];
      const int64_t taps = g.kh * g.kw, L = oh * ow;
      std::vector<double> weights(static_cast<size_t>(taps * L), 0.0);
      for (int64_t o = 0; o < L; ++o) {
        const int64_t oy = o / ow, ox = o % ow;
        int64_t count = 0;
        for (int pass = 0; pass < 2; ++pass) {
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t iy = oy * g.stride_h + ky * g.dilation_h - ph, ix = ox * g.stride_w + kx * g.dilation_w - pw;
              const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
              const bool in_pads = iy >= -ph && iy < H + ph_end && ix >= -pw && ix < W + pw_end;
              if (!(include_pad ? in_pads : inside)) continue;
              if (pass == 0) ++count;
              else weights[static_cast<size_t>((ky * g.kw + kx) * L + o)] = 1.0 / static_cast<double>(count);
            }
        }
      }
      Tensor wt = tensor(weights, {1, 1, taps, L}).to(x.dtype());
      y = sum(cols * wt, {2});
    }
    y = y.reshape({N, C, oh, ow});
    if (!want_indices) return Outs{restore_rank(y, w)};
    // Indices: the winning tap of each window, mapped through a host table (tap, position) ->
    // offset in the unpadded image, plus the (n, c) plane's offset.
    const int64_t H = s == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
    const int64_t ph = s == 1 ? 0 : w.pad_begin[0], pw = w.pad_begin[s - 1];
    const int64_t taps = g.kh * g.kw, L = oh * ow;
    std::vector<int64_t> table(static_cast<size_t>(taps * L));
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx)
        for (int64_t o = 0; o < L; ++o) {
          const int64_t iy = (o / ow) * g.stride_h + ky * g.dilation_h - ph, ix = (o % ow) * g.stride_w + kx * g.dilation_w - pw;
          const int64_t cy = std::clamp<int64_t>(iy, 0, H - 1), cx = std::clamp<int64_t>(ix, 0, W - 1);
          table[static_cast<size_t>((ky * g.kw + kx) * L + o)] = column_major ? cx * H + cy : cy * W + cx;
        }
    Tensor winner = argmax(cols, 2, true);  // [N, C, 1, L]
    Tensor at = gather(tensor(table, {1, 1, taps, L}).expand({N, C, taps, L}).contiguous(), 2, winner).reshape({N, C, oh, ow});
    Tensor plane = (arange(N * C) * (H * W)).reshape({N, C, 1, 1});
    Tensor idx = at + plane;
    return Outs{restore_rank(y, w), restore_rank(idx, w)};
  };
}

// 3-D pooling as two 2-D poolings: over (H, W) with D folded into the channels, then over
// (D, 1) with H' x W' flattened. Both are separable over a box window: the max of maxima, and
// the average of averages, since the count a window averages over (pads included or not) is
// the product of its per-axis counts. auto_pad and ceil_mode apply per axis, so they pass on.
Outs pool_3d(Ctx& c, bool is_max) {
  const Tensor& x = c.x(0);
  if (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) c.unsupported("the Indices output of a 3-D MaxPool");
  const std::vector<int64_t> kernel = c.ints("kernel_shape"), strides = c.ints("strides", {1, 1, 1}),
                             dilations = c.ints("dilations", {1, 1, 1}), pads = c.ints("pads", {0, 0, 0, 0, 0, 0});
  c.require(kernel.size() == 3 && strides.size() == 3 && dilations.size() == 3 && pads.size() == 6,
            "kernel_shape/strides/dilations/pads of the wrong length for 3-D");
  auto part = [&](std::vector<int64_t> k, std::vector<int64_t> st, std::vector<int64_t> d, std::vector<int64_t> p) {
    Node n = c.node;
    n.outputs.resize(1);
    for (auto& [name, values] : {std::pair{"kernel_shape", k}, {"strides", st}, {"dilations", d}, {"pads", p}}) {
      Attr a;
      a.kind = Attr::Ints;
      a.ints = values;
      n.attrs[name] = a;
    }
    return n;
  };
  const Node over_hw = part({kernel[1], kernel[2]}, {strides[1], strides[2]}, {dilations[1], dilations[2]},
                            {pads[1], pads[2], pads[4], pads[5]});
  const Node over_d = part({kernel[0], 1}, {strides[0], 1}, {dilations[0], 1}, {pads[0], 0, pads[3], 0});
  const int64_t N = x.shape()[0], C = x.shape()[1], D = x.shape()[2];
  Ctx hw{over_hw, c.opset, {x.reshape({N, C * D, x.shape()[3], x.shape()[4]})}, c.loc};
  const Tensor y = pool(is_max)(hw)[0];  // [N, C * D, H', W']
  const int64_t oh = y.shape()[2], ow = y.shape()[3];
  Ctx d{over_d, c.opset, {y.reshape({N, C, D, oh * ow})}, c.loc};
  const Tensor z = pool(is_max)(d)[0];  // [N, C, D', H' * W']
  return {z.reshape({N, C, z.shape()[2], oh, ow})};
}

Handler global_pool(bool is_max) {
  return [is_max](Ctx& c) {
    const Tensor& x = c.x(0);
    c.require(x.dim() >= 3, "input must be at least 3-D");
    std::vector<int64_t> axes;
    for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
    return Outs{is_max ? max(x, axes, true, c.loc) : mean(x, axes, true, c.loc)};
  };
}

Outs op_dropout(Ctx& c) {
  const bool training = c.opset >= 12 ? (c.has(2) && c.scalar(2) != 0) : c.i("is_test", 1) == 0 && c.opset < 7;
  if (training) {
    // Only the ratio that keeps every element is deterministic.
    const double ratio = c.opset >= 12 ? (c.has(1) ? c.scalar(1) : 0.5) : c.f("ratio", 0.5);
    if (ratio != 0) c.unsupported("training mode with ratio ", ratio, " (random masks)");
  }
  Outs out{c.x(0)};
  if (c.node.outputs.size() > 1) out.push_back(ones(c.x(0).shape(), DType::Bool).contiguous());
  return out;
}

// Any kind of value passes through (a tensor, a sequence, an optional).
Outs op_identity(Ctx& c) { return outputs_of(c, {c.value(0)}); }

Outs op_prelu(Ctx& c) {
  const Tensor& x = c.x(0);
  Tensor slope = c.x(1);
  // Opset < 7 slopes of shape [C] broadcast over dim 1 (unidirectional since 7 too when 1-D of size C).
  if (slope.dim() == 1 && x.dim() > 2 && slope.shape()[0] == x.shape()[1] && slope.shape()[0] != x.shape().back()) {
    Shape cs(static_cast<size_t>(x.dim() - 1), 1);
    cs[0] = -1;
    slope = slope.reshape(cs);
  }
  return {where(x < 0, x * slope, x)};
}

Outs op_castlike(Ctx& c) { return {cast(c.x(0), c.x(1).dtype())}; }

Outs op_topk(Ctx& c) {
  // Repeated argmax/argmin: fine for the small k of classifiers' top-5.
  const Tensor& x = c.x(0);
  const int64_t k = static_cast<int64_t>(c.scalar(1));
  const int64_t axis = c.axis(c.i("axis", -1), x.dim());
  const bool largest = c.i("largest", 1) != 0;
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  c.require(k >= 0 && k <= n, "k ", k, " out of range for ", n);
  if (k > 64) c.unsupported("k > 64");
  c.require(is_float(x), "TopK needs a floating-point input");
  Tensor work = x.to(DType::F64);
  std::vector<Tensor> values, indices;
  Shape pos_shape(static_cast<size_t>(x.dim()), 1);
  pos_shape[static_cast<size_t>(axis)] = n;
  Tensor pos = arange(n).reshape(pos_shape);
  const double fill = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < k; ++j) {
    Tensor idx = largest ? argmax(work, axis, true) : argmin(work, axis, true);
    indices.push_back(idx);
    values.push_back(gather(x, axis, idx));
    work = where(eq(pos, idx), fill, work);
    work.realize();
  }
  if (k == 0) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = 0;
    return {zeros(s, x.dtype()).contiguous(), zeros(s, DType::I64).contiguous()};
  }
  return {cat(values, axis), cat(indices, axis)};
}

// ---- losses ------------------------------------------------------------------------------

// NegativeLogLikelihoodLoss over log-probabilities [N, C, d...] and targets [N, d...].
Tensor nll(Ctx& c, const Tensor& logp, const Tensor& target, const Tensor& weight) {
  if (!(logp.dim() >= 2 && target.dim() == logp.dim() - 1))
    c.fail_with("input ", to_string(logp.shape()), " and target ", to_string(target.shape()), " do not fit");
  Tensor t = target.to(DType::I64);
  Tensor valid = ones(t.shape(), DType::Bool);
  if (c.attr("ignore_index")) valid = ne(t, c.i("ignore_index", 0));
  Tensor safe = where(valid, t, 0);
  Tensor picked = gather(logp, 1, safe.unsqueeze(1), c.loc).squeeze(1);
  Tensor w = weight.defined() ? index_select(weight, 0, safe.reshape({safe.numel()})).reshape(t.shape())
                              : ones(t.shape(), logp.dtype());
  w = where(valid, w, 0.0);
  Tensor loss = -(picked * w);
  const std::string reduction = c.s("reduction", "mean");
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  c.require(reduction == "mean", "unknown reduction ", reduction);
  return sum(loss) / sum(w);
}

Outs op_nll(Ctx& c) { return {nll(c, c.x(0), c.x(1), c.has(2) ? c.x(2) : Tensor())}; }

Outs op_softmax_ce(Ctx& c) {
  Tensor logp = log_softmax(c.x(0), 1, c.loc);
  Tensor loss = nll(c, logp, c.x(1), c.has(2) ? c.x(2) : Tensor());
  return {loss, logp};
}

}  // namespace

void add_nn_ops(HandlerTable& h) {
  h["CastLike"] = op_castlike;
  h["PRelu"] = op_prelu;
  h["BatchNormalization"] = op_batchnorm;
  h["InstanceNormalization"] = op_instancenorm;
  h["LayerNormalization"] = op_layernorm;
  h["MeanVarianceNormalization"] = op_mvn;
  h["Conv"] = op_conv;
  h["ConvTranspose"] = op_conv_transpose;
  h["MaxPool"] = pool(true);
  h["AveragePool"] = pool(false);
  h["GlobalMaxPool"] = global_pool(true);
  h["GlobalAveragePool"] = global_pool(false);
  h["Dropout"] = op_dropout;
  h["Identity"] = op_identity;
  h["TopK"] = op_topk;
  h["NegativeLogLikelihoodLoss"] = op_nll;
  h["SoftmaxCrossEntropyLoss"] = op_softmax_ce;
}

}  // namespace alk::onnx
