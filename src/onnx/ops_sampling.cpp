// Sampling an image at computed points: GridSample (a grid of points per output pixel) and
// RoiAlign (bins of boxes), each tap one gather from the flattened image with its weight.
#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// GridSample (nearest, bilinear, bicubic; zeros, border and reflection padding): each output
// pixel gathers its taps from the flattened image, weighted, with out-of-image taps weighted 0.
// Nearest and bilinear pad the sampling point; bicubic pads each of its 16 taps (PyTorch's
// rule, which the node test's expected values follow).
Tensor reflect(const Tensor& v, double lo, double hi) {
  const double span = hi - lo;
  if (span <= 0) return zeros_like(v);
  Tensor d = abs(v - lo);
  Tensor flips = floor(d / span);
  Tensor extra = d - flips * span;
  Tensor odd = (flips - floor(flips / 2.0) * 2.0) > 0.5;
  return where(odd, span - extra + lo, extra + lo);
}

Outs op_grid_sample(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& grid = c.x(1);
  c.require(x.dim() == 4 && grid.dim() == 4 && grid.shape()[3] == 2 && grid.shape()[0] == x.shape()[0],
            "X ", to_string(x.shape()), " and grid ", to_string(grid.shape()), " do not fit (only 2-D sampling)");
  const std::string mode = c.s("mode", "bilinear"), padding = c.s("padding_mode", "zeros");
  const bool cubic = mode == "bicubic" || mode == "cubic";
  if (mode != "bilinear" && mode != "nearest" && mode != "linear" && !cubic) c.unsupported("mode ", mode);
  c.require(padding == "zeros" || padding == "border" || padding == "reflection", "bad padding_mode ", padding);
  const bool align = c.i("align_corners", 0) != 0;
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2];
  const DType ft = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor g = grid.to(ft);
  auto unnormalize = [&](const Tensor& v, int64_t n) {
    return align ? (v + 1.0) * 0.5 * static_cast<double>(n - 1) : ((v + 1.0) * static_cast<double>(n) - 1.0) * 0.5;
  };
  auto pad_coord = [&](Tensor v, int64_t n) {
    if (padding == "border") return clamp(v, 0.0, static_cast<double>(n - 1));
    if (padding == "reflection") {
      v = align ? reflect(v, 0.0, static_cast<double>(n - 1)) : reflect(v, -0.5, static_cast<double>(n) - 0.5);
      return clamp(v, 0.0, static_cast<double>(n - 1));
    }
    return v;
  };
  Tensor ix = unnormalize(g.select(3, 0), W), iy = unnormalize(g.select(3, 1), H);
  if (!cubic) ix = pad_coord(ix, W), iy = pad_coord(iy, H);
  Tensor flat = x.reshape({N, C, H * W});
  auto tap = [&](const Tensor& yy, const Tensor& xx, const Tensor& weight) {
    Tensor valid = logical_and(logical_and(xx >= 0, xx <= static_cast<double>(W - 1)),
                               logical_and(yy >= 0, yy <= static_cast<double>(H - 1)));
    Tensor idx = cast(clamp(yy, 0.0, static_cast<double>(H - 1)) * static_cast<double>(W) +
                          clamp(xx, 0.0, static_cast<double>(W - 1)), DType::I64);
    Tensor picked = gather(flat, 2, idx.reshape({N, 1, Ho * Wo}).expand({N, C, Ho * Wo}).contiguous());
    return picked.to(ft) * where(valid, weight, 0.0).reshape({N, 1, Ho * Wo});
  };
  Tensor y;
  if (mode == "nearest") {
    y = tap(round(iy), round(ix), ones_like(ix));
  } else if (cubic) {
    // Keys' cubic convolution (a = -0.75) over taps -1..2 of each axis.
    const double a = -0.75;
    auto weights = [a](const Tensor& t) {
      const Tensor t1 = t + 1.0, u = 1.0 - t, u1 = u + 1.0;
      return std::array<Tensor, 4>{((t1 * a - 5.0 * a) * t1 + 8.0 * a) * t1 - 4.0 * a,
                                   (t * (a + 2.0) - (a + 3.0)) * t * t + 1.0,
                                   (u * (a + 2.0) - (a + 3.0)) * u * u + 1.0,
                                   ((u1 * a - 5.0 * a) * u1 + 8.0 * a) * u1 - 4.0 * a};
    };
    const Tensor x0 = floor(ix), y0 = floor(iy);
    const std::array<Tensor, 4> wx = weights(ix - x0), wy = weights(iy - y0);
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        Tensor t = tap(pad_coord(y0 + static_cast<double>(j - 1), H), pad_coord(x0 + static_cast<double>(i - 1), W),
                       wy[static_cast<size_t>(j)] * wx[static_cast<size_t>(i)]);
        y = y.defined() ? y + t : t;
      }
  } else {
    Tensor x0 = floor(ix), y0 = floor(iy);
    Tensor wx = ix - x0, wy = iy - y0;
    y = tap(y0, x0, (1.0 - wx) * (1.0 - wy)) + tap(y0, x0 + 1.0, wx * (1.0 - wy)) + tap(y0 + 1.0, x0, (1.0 - wx) * wy) +
        tap(y0 + 1.0, x0 + 1.0, wx * wy);
  }
  return {cast(y.reshape({N, C, Ho, Wo}), x.dtype())};
}

// RoiAlign(X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R]) -> [R, C, oh, ow]:
// each bin the average of sampling_ratio^2 (or ceil(roi size / bins)^2) bilinear samples, as
// onnxruntime samples them (points beyond one pixel outside the image count 0, others are
// clamped into it). The sample positions and weights are made on the host from the rois (read
// back), so the image is read by one gather. Mode max is refused: onnxruntime's takes the
// largest weighted corner, not the largest sample.
Outs op_roi_align(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() == 4 && is_float(x), "X must be a floating-point [N, C, H, W], got ", to_string(x.shape()));
  const Tensor& rois_t = c.x(1);
  if (!(rois_t.dim() == 2 && rois_t.shape()[1] == 4)) c.fail_with("rois must be [R, 4], got ", to_string(rois_t.shape()));
  if (c.s("mode", "avg") != "avg") c.unsupported("mode ", c.s("mode", "avg"));
  const std::string transform = c.s("coordinate_transformation_mode", c.opset >= 16 ? "half_pixel" : "output_half_pixel");
  c.require(transform == "half_pixel" || transform == "output_half_pixel", "coordinate_transformation_mode '", transform,
            "' is neither half_pixel nor output_half_pixel");
  const int64_t oh = c.i("output_height", 1), ow = c.i("output_width", 1), ratio = c.i("sampling_ratio", 0);
  const double scale = c.f("spatial_scale", 1.0);
  c.require(oh >= 1 && ow >= 1 && oh * ow <= kMaxShapeValues && ratio >= 0 && ratio <= 64, "output size ", oh, "x", ow,
            " or sampling_ratio ", ratio, " out of range");
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois_t.shape()[0];
  const std::vector<int64_t> batch = c.values(2);
  c.require(static_cast<int64_t>(batch.size()) == R, "batch_indices holds ", batch.size(), " values for ", R, " rois");
  for (int64_t b : batch) c.require(b >= 0 && b < N, "batch index ", b, " out of range for ", N, " images");
  c.note_read(1);
  c.require(rois_t.numel() <= kMaxShapeValues, "too many rois");
  const std::vector<double> rois = rois_t.to_vector<double>(c.loc);
  const double offset = transform == "half_pixel" ? 0.5 : 0.0;
  // Per roi: its box and sampling grid; the widest grid sets the samples per bin (others pad
  // with weight 0).
  struct Box { double y0, x0, bin_h, bin_w; int64_t grid_h, grid_w; };
  std::vector<Box> boxes(static_cast<size_t>(R));
  int64_t taps = 1;
  for (int64_t r = 0; r < R; ++r) {
    const double* q = rois.data() + r * 4;
    Box& b = boxes[static_cast<size_t>(r)];
    b.x0 = q[0] * scale - offset;
    b.y0 = q[1] * scale - offset;
    double w = q[2] * scale - offset - b.x0, h = q[3] * scale - offset - b.y0;
    if (offset == 0) w = std::max(w, 1.0), h = std::max(h, 1.0);
    b.bin_h = h / static_cast<double>(oh);
    b.bin_w = w / static_cast<double>(ow);
    b.grid_h = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(h / static_cast<double>(oh)));
    b.grid_w = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(w / static_cast<double>(ow)));
    c.require(b.grid_h >= 0 && b.grid_w >= 0 && b.grid_h <= 64 && b.grid_w <= 64, "roi ", r, " needs a sampling grid of ",
              b.grid_h, "x", b.grid_w, " (more than 64 per axis)");
    taps = std::max(taps, 4 * b.grid_h * b.grid_w);
  }
  const int64_t L = oh * ow;
  checked_numel({R, C, L * taps}, c.label(), c.loc);
  if (static_cast<double>(R) * static_cast<double>(L) * static_cast<double>(taps) > static_cast<double>(int64_t{1} << 24))
    c.fail_with(R, " rois of ", L, " bins of ", taps, " taps are too many samples");
  std::vector<int64_t> where_at(static_cast<size_t>(R * L * taps), 0);
  std::vector<double> weight(where_at.size(), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const Box& b = boxes[static_cast<size_t>(r)];
    const double count = static_cast<double>(std::max<int64_t>(b.grid_h * b.grid_w, 1));
    for (int64_t bin = 0; bin < L; ++bin) {
      size_t at = static_cast<size_t>((r * L + bin) * taps);
      for (int64_t iy = 0; iy < b.grid_h; ++iy)
        for (int64_t ix = 0; ix < b.grid_w; ++ix) {
          double y = b.y0 + static_cast<double>(bin / ow) * b.bin_h + (static_cast<double>(iy) + 0.5) * b.bin_h / static_cast<double>(b.grid_h);
          double xx = b.x0 + static_cast<double>(bin % ow) * b.bin_w + (static_cast<double>(ix) + 0.5) * b.bin_w / static_cast<double>(b.grid_w);
          if (y < -1.0 || y > static_cast<double>(H) || xx < -1.0 || xx > static_cast<double>(W)) {
            at += 4;
            continue;
          }
          y = std::max(y, 0.0);
          xx = std::max(xx, 0.0);
          int64_t y_lo = static_cast<int64_t>(y), x_lo = static_cast<int64_t>(xx), y_hi = y_lo + 1, x_hi = x_lo + 1;
          if (y_lo >= H - 1) y_lo = y_hi = H - 1, y = static_cast<double>(y_lo);
          if (x_lo >= W - 1) x_lo = x_hi = W - 1, xx = static_cast<double>(x_lo);
          const double ly = y - static_cast<double>(y_lo), lx = xx - static_cast<double>(x_lo);
          for (auto [py, px, wt] : {std::tuple{y_lo, x_lo, (1 - ly) * (1 - lx)}, {y_lo, x_hi, (1 - ly) * lx},
                                    {y_hi, x_lo, ly * (1 - lx)}, {y_hi, x_hi, ly * lx}}) {
            where_at[at] = py * W + px;
            weight[at] = wt / count;
            ++at;
          }
        }
    }
  }
  const Tensor images = index_select(x.reshape({N, C, H * W}), 0, tensor(batch, {R}));  // [R, C, H * W]
  const Tensor idx = tensor(where_at, {R, 1, L * taps}).expand({R, C, L * taps}).contiguous();
  const Tensor picked = gather(images, 2, idx) * tensor(weight, {R, 1, L * taps}).to(x.dtype());
  return {sum(picked.reshape({R, C, L, taps}), {3}).reshape({R, C, oh, ow})};
}

}  // namespace

void add_sampling_ops(HandlerTable& h) {
  h["GridSample"] = op_grid_sample;
  h["RoiAlign"] = op_roi_align;
}

}  // namespace alk::onnx
