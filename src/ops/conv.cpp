// Convolution and pooling. unfold2d (im2col) and fold2d (its adjoint, col2im) are
// template ops whose backward rules are each other; conv2d is unfold + one batched
// matmul over the groups, and the pools reduce over the window dim of an unfold, so
// autograd composes their backward from matmul's and mean's rules (max_pool2d has its own:
// a tie's gradient goes to the first maximum, not shared as the max reduction's rule does).
// Depthwise convolutions (groups == channels) on the CPU are their own template op, a direct
// convolution with no unfolded copy; their backward composes unfold/fold as conv2d's does.
#include <cmath>
#include <sstream>
#include <tuple>
#include <string>

#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

// check() builds its message (shape strings) even when the condition holds; these checks run
// for every convolution an imported model builds, per call, so the message is made on failure only.
#define ALK_CONV_CHECK(cond, ...)   \
  do {                              \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

namespace {

std::string describe(const Conv2dGeometry& g) {
  std::ostringstream s;
  s << "kernel (" << g.kh << ", " << g.kw << "), stride (" << g.stride_h << ", " << g.stride_w << "), padding ("
    << g.pad_h << ", " << g.pad_w << "), dilation (" << g.dilation_h << ", " << g.dilation_w << ")";
  return s.str();
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;  // a negative span means no window fits
}

// Checks the geometry against a spatial size (h, w); returns the window grid (OH, OW).
std::pair<int64_t, int64_t> check_geometry(const Conv2dGeometry& g, int64_t h, int64_t w, const Shape& shape,
                                           const char* op, Loc loc) {
  ALK_CONV_CHECK(g.kh > 0 && g.kw > 0 && g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0, op,
                 loc, "kernel size, stride and dilation must be positive, got ", describe(g), " for input shape ",
                 to_string(shape));
  ALK_CONV_CHECK(g.pad_h >= 0 && g.pad_w >= 0, op, loc, "padding must be non-negative, got ", describe(g),
                 " for input shape ", to_string(shape));
  const int64_t oh = out_size(h, g.kh, g.stride_h, g.pad_h, g.dilation_h);
  const int64_t ow = out_size(w, g.kw, g.stride_w, g.pad_w, g.dilation_w);
  ALK_CONV_CHECK(oh > 0 && ow > 0, op, loc, "output size would be ", oh, " x ", ow,
                 " (must be positive) for spatial size ", h, " x ", w, " with ", describe(g), "; input shape ",
                 to_string(shape));
  return {oh, ow};
}

void check_rank4(const Tensor& x, const char* what, const char* op, Loc loc) {
  check_defined(x, op, loc);
  ALK_CONV_CHECK(x.dim() == 4, op, loc, what, " must be 4-D [N, C, H, W], got shape ", to_string(x.shape()));
}

UnfoldParams params_of(const Conv2dGeometry& g, int64_t h, int64_t w, double pad_value) {
  return UnfoldParams{g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w,
                      h,    w,    pad_value};
}

Tensor fold_node(const Tensor& cols, int64_t channels, const UnfoldParams& p, Loc loc);

// Both assume checked arguments.
Tensor unfold_node(const Tensor& x, const UnfoldParams& p, Loc loc) {
  const int64_t oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  const int64_t ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  Tensor out = make_node(OpId::Unfold, {n, c * p.kh * p.kw, oh * ow}, x.dtype(), {alias(x)}, p, loc);
  UnfoldParams back = p;
  back.pad_value = 0;
  return with_grad(out, "unfold2d", {x}, [back, c, loc](const Tensor& g) {
    return std::vector<Tensor>{fold_node(g, c, back, loc)};
  });
}

Tensor fold_node(const Tensor& cols, int64_t channels, const UnfoldParams& p, Loc loc) {
  Tensor out = make_node(OpId::Fold, {cols.shape()[0], channels, p.h, p.w}, cols.dtype(), {alias(cols)}, p, loc);
  return with_grad(out, "fold2d", {cols}, [p, loc](const Tensor& g) {
    return std::vector<Tensor>{unfold_node(g, p, loc)};
  });
}

Conv2dGeometry square(int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  Conv2dGeometry g;
  g.kh = g.kw = kernel;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  g.dilation_h = g.dilation_w = dilation;
  return g;
}

// Shared by the pools: checks, then returns the window values as [N, C, k*k, OH*OW] and (OH, OW).
Tensor pool_windows(const Tensor& x, int64_t kernel, int64_t& stride, int64_t padding, double pad_value,
                    const char* op, Loc loc, int64_t& oh, int64_t& ow) {
  check_rank4(x, "input", op, loc);
  check_floating(x, op, loc);
  if (stride == -1) stride = kernel;
  Conv2dGeometry g = square(kernel, stride, padding, 1);
  std::tie(oh, ow) = check_geometry(g, x.shape()[2], x.shape()[3], x.shape(), op, loc);
  ALK_CONV_CHECK(2 * padding <= kernel, op, loc, "padding should be at most half of the kernel size, got ", describe(g),
                 " for input shape ", to_string(x.shape()));
  const int64_t n = x.shape()[0], c = x.shape()[1];
  Tensor cols = unfold_node(x, params_of(g, x.shape()[2], x.shape()[3], pad_value), loc);
  return cols.reshape({n, c, kernel * kernel, oh * ow}, loc);
}

// The CPU's Conv2d node over checked arguments of one floating dtype: x [N, C, H, W], w [O, C/groups,
// kh, kw], b [O] or undefined (added in the kernel). Depthwise layers (groups == C == O) may have
// any floating dtype, the others are f32. The backward composes unfold/fold with matmuls (an
// elementwise product for depthwise layers), so it is differentiable again.
Tensor conv_node(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dGeometry& g, int64_t groups, int64_t oh,
                 int64_t ow, Loc loc) {
  const int64_t n = x.shape()[0], c = x.shape()[1], o = w.shape()[0], kg = (c / groups) * g.kh * g.kw;
  const UnfoldParams p = params_of(g, x.shape()[2], x.shape()[3], 0);
  std::vector<Tensor> in{alias(x), alias(w)}, leaves{x, w};
  if (b.defined()) {
    in.push_back(alias(b));
    leaves.push_back(b);
  }
  Tensor out = make_node(OpId::Conv2d, {n, o, oh, ow}, x.dtype(), in, p, loc);
  const bool depthwise = groups == c && o == c;
  return with_grad(out, "conv2d", leaves, [x, w, b, p, n, c, o, kg, groups, depthwise, loc](const Tensor& gy) {
    const int64_t l = gy.shape()[2] * gy.shape()[3];
    std::vector<Tensor> grads;
    if (depthwise) {  // y[n, c, l] = sum_k w[c, k] cols[n, c, k, l] with cols = unfold(x) as [N, C, K, L]
      Tensor g4 = gy.reshape({n, c, 1, l}, loc);
      Tensor dcols = (w.reshape({1, c, kg, 1}, loc) * g4).reshape({n, c * kg, l}, loc);
      Tensor cols = unfold_node(x, p, loc).reshape({n, c, kg, l}, loc);
      grads = {fold_node(dcols, c, p, loc), sum(cols * g4, {0, 3}, false, loc).reshape(w.shape(), loc)};
    } else {  // y[n, g] = w[g] cols[n, g]: w as [groups, O/groups, Kg], cols as [N, groups, Kg, L]
      Tensor g3 = gy.reshape({n, groups, o / groups, l}, loc);
      Tensor wg = w.reshape({groups, o / groups, kg}, loc);
      Tensor dx = fold_node(matmul(wg.transpose(1, 2, loc), g3, loc).reshape({n, c * p.kh * p.kw, l}, loc), c, p, loc);
      Tensor cols = unfold_node(x, p, loc).reshape({n, groups, kg, l}, loc);
      grads = {dx, sum(matmul(g3, cols.transpose(2, 3, loc), loc), {0}, false, loc).reshape(w.shape(), loc)};
    }
    if (b.defined()) grads.push_back(sum(gy, {0, 2, 3}, false, loc).reshape(b.shape(), loc));
    return grads;
  });
}

// Where the CPU's Conv2d kernel runs (not while tracing a portable program).
bool on_cpu(const Tensor& t) { return fused_kernel_on(t, "conv2d"); }

}  // namespace

Tensor depthwise_conv2d(const Tensor& x0, const Tensor& w0, const Conv2dGeometry& g, Loc loc) {
  const char* op = "depthwise_conv2d";
  check_rank4(x0, "input", op, loc);
  check_rank4(w0, "weight", op, loc);
  const int64_t c = x0.shape()[1];
  ALK_CONV_CHECK(w0.shape()[0] == c && w0.shape()[1] == 1 && w0.shape()[2] == g.kh && w0.shape()[3] == g.kw, op, loc,
                 "weight must have shape [", c, ", 1, ", g.kh, ", ", g.kw, "] for input shape ", to_string(x0.shape()),
                 " and ", describe(g), ", got ", to_string(w0.shape()));
  auto [oh, ow] = check_geometry(g, x0.shape()[2], x0.shape()[3], x0.shape(), op, loc);
  const DType t = to_floating(promote(x0.dtype(), w0.dtype()));
  Tensor x = cast(x0, t, loc), w = cast(w0, t, loc);
  if (on_cpu(x) && on_cpu(w)) return conv_node(x, w, Tensor(), g, c, oh, ow, loc);
  // Other backends: one batched [1, K] x [K, L] matmul per channel over the unfolded input.
  const int64_t n = x.shape()[0], k = g.kh * g.kw;
  Tensor cols = unfold_node(x, params_of(g, x.shape()[2], x.shape()[3], 0), loc).reshape({n, c, k, oh * ow}, loc);
  return matmul(w.reshape({c, 1, k}, loc), cols, loc).reshape({n, c, oh, ow}, loc);
}

Tensor unfold2d(const Tensor& x, const Conv2dGeometry& g, double pad_value, Loc loc) {
  check_rank4(x, "input", "unfold2d", loc);
  check_geometry(g, x.shape()[2], x.shape()[3], x.shape(), "unfold2d", loc);
  return unfold_node(x, params_of(g, x.shape()[2], x.shape()[3], pad_value), loc);
}

Tensor fold2d(const Tensor& cols, int64_t h, int64_t w, const Conv2dGeometry& g, Loc loc) {
  check_defined(cols, "fold2d", loc);
  ALK_CONV_CHECK(cols.dim() == 3, "fold2d", loc, "input must be 3-D [N, C*kh*kw, L], got shape ",
                 to_string(cols.shape()));
  ALK_CONV_CHECK(h > 0 && w > 0, "fold2d", loc, "output size must be positive, got ", h, " x ", w);
  auto [oh, ow] = check_geometry(g, h, w, cols.shape(), "fold2d", loc);
  const int64_t k = g.kh * g.kw;
  ALK_CONV_CHECK(cols.shape()[1] % k == 0, "fold2d", loc, "dim 1 of input shape ", to_string(cols.shape()),
                 " must be a multiple of kh*kw = ", k, " (", describe(g), ")");
  ALK_CONV_CHECK(cols.shape()[2] == oh * ow, "fold2d", loc, "dim 2 of input shape ", to_string(cols.shape()),
                 " must be ", oh * ow, " (", oh, " x ", ow, " windows of output ", h, " x ", w, " with ", describe(g),
                 ")");
  return fold_node(cols, cols.shape()[1] / k, params_of(g, h, w, 0), loc);
}

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups, Loc loc) {
  const char* op = "conv2d";
  check_rank4(x0, "input", op, loc);
  check_defined(w0, op, loc);
  ALK_CONV_CHECK(w0.dim() == 4, op, loc, "weight must be 4-D [O, C/groups, kh, kw], got shape ", to_string(w0.shape()),
                 " (input shape ", to_string(x0.shape()), ")");
  const int64_t n = x0.shape()[0], c = x0.shape()[1], o = w0.shape()[0];
  ALK_CONV_CHECK(groups > 0, op, loc, "groups must be positive, got ", groups);
  ALK_CONV_CHECK(c % groups == 0, op, loc, "input channels ", c, " (input shape ", to_string(x0.shape()),
                 ") are not divisible by groups = ", groups);
  ALK_CONV_CHECK(o % groups == 0, op, loc, "output channels ", o, " (weight shape ", to_string(w0.shape()),
                 ") are not divisible by groups = ", groups);
  ALK_CONV_CHECK(w0.shape()[1] == c / groups, op, loc, "weight shape ", to_string(w0.shape()), " expects ",
                 w0.shape()[1] * groups, " input channels (", w0.shape()[1], " per group x ", groups,
                 " groups) but input shape ", to_string(x0.shape()), " has ", c);
  if (b0.defined())
    ALK_CONV_CHECK(b0.dim() == 1 && b0.shape()[0] == o, op, loc, "bias must have shape [", o, "] (weight shape ",
                   to_string(w0.shape()), "), got ", to_string(b0.shape()));
  Conv2dGeometry g;
  g.kh = w0.shape()[2];
  g.kw = w0.shape()[3];
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = padding;
  g.dilation_h = g.dilation_w = dilation;
  auto [oh, ow] = check_geometry(g, x0.shape()[2], x0.shape()[3], x0.shape(), op, loc);

  DType t = to_floating(promote(x0.dtype(), w0.dtype()));
  if (b0.defined()) t = to_floating(promote(t, b0.dtype()));
  Tensor x = cast(x0, t, loc), w = cast(w0, t, loc);

  const bool depthwise = groups == c && o == c;
  const bool pointwise = g.kh == 1 && g.kw == 1 && stride == 1 && padding == 0;
  Tensor b = b0.defined() ? cast(b0, t, loc) : Tensor();
  // 1x1 convolutions with few input channels over at least a few positions run on the CPU's
  // direct kernel too (kernels_conv.cpp pointwise_direct): it adds the bias in registers and
  // applies a relu/hardswish epilogue while the block is in cache, where a matmul's epilogue (its
  // bias a column broadcast) is a second pass over the output. Over fewer positions (an SE block's
  // [C, 1]) a matmul; with more input channels too: the direct kernel reads a block's [C, 32]
  // inputs once per 12 outputs, which past ~64 channels leave L1 (det's 96..384-channel 1x1
  // layers ran 10-40% slower than the GEMM; bench/onnx/NOTES.md).
  const bool pointwise_direct = pointwise && groups == 1 && oh * ow >= 32 && c <= 64 && t == DType::F32;
  if (on_cpu(x) && on_cpu(w) && (!b.defined() || on_cpu(b)) && (!pointwise || pointwise_direct) &&
      (depthwise || t == DType::F32)) {
    // The CPU's Conv2d kernel: depthwise layers directly, the others never materialize the
    // whole unfolded input; the bias is added in the kernel.
    return conv_node(x, w, b, g, groups, oh, ow, loc);
  }
  if (depthwise && !pointwise) {
    Tensor y = depthwise_conv2d(x, w, g, loc);
    return b.defined() ? y + b.reshape({1, o, 1, 1}, loc) : y;
  }
  if (pointwise) {  // a matmul over the channels, no unfold
    Tensor y =
        matmul(w.reshape({groups, o / groups, c / groups}, loc), x.reshape({n, groups, c / groups, oh * ow}, loc), loc)
            .reshape({n, o, oh, ow}, loc);
    return b.defined() ? y + b.reshape({1, o, 1, 1}, loc) : y;
  }
  const int64_t k = (c / groups) * g.kh * g.kw;
  Tensor cols = unfold_node(x, params_of(g, x.shape()[2], x.shape()[3], 0), loc);  // [N, C*kh*kw, L]
  Tensor out;
  if (groups == 1) {
    out = matmul(w.reshape({o, k}, loc), cols, loc);  // [N, O, L]
  } else {
    // Group gi's channels are rows [gi*k, (gi+1)*k) of cols and outputs [gi*O/g, (gi+1)*O/g): one batched matmul.
    Tensor cg = cols.reshape({n, groups, k, oh * ow}, loc);
    Tensor wg = w.reshape({groups, o / groups, k}, loc);
    out = matmul(wg, cg, loc);  // [N, groups, O/groups, L]
  }
  out = out.reshape({n, o, oh, ow}, loc);
  if (b0.defined()) out = out + cast(b0, t, loc).reshape({1, o, 1, 1}, loc);
  return out;
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Loc loc) {
  int64_t oh = 0, ow = 0;
  Tensor win = pool_windows(x, kernel, stride, padding, -INFINITY, "max_pool2d", loc, oh, ow);
  Tensor out;
  {
    NoGradGuard no_grad;  // the max reduction's own rule would share a tie; ours is below
    out = max(win, {2}, true, loc);
  }
  if (needs_grad({&win})) {
    // A window's gradient goes to its first maximum (the first NaN, if any), as PyTorch's
    // max_pool2d does: with ties (ReLU's zeros make them common) one input gets all of it.
    out = with_grad(out, "max_pool2d", {win}, [win](const Tensor& g) -> std::vector<Tensor> {
      const int64_t k = win.shape()[2];
      Tensor first = argmax(win.detach(), 2, true);  // [N, C, 1, L], the first maximum
      DeviceGuard on(g.device());  // the positions are made where the gradient lives
      Tensor pos = arange(k).reshape({1, 1, k, 1});
      return {where(eq(pos, first), broadcast_to(g, win.shape()), 0.0)};
    });
  }
  return out.reshape({x.shape()[0], x.shape()[1], oh, ow}, loc);
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, Loc loc) {
  int64_t oh = 0, ow = 0;
  Tensor win = pool_windows(x, kernel, stride, padding, 0, "avg_pool2d", loc, oh, ow);
  return mean(win, {2}, false, loc).reshape({x.shape()[0], x.shape()[1], oh, ow}, loc);
}

}  // namespace alk
