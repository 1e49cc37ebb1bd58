// ONNX Resize/Upsample, RNN/GRU/LSTM, inverse trigonometry, windows, GatherND/Scatter*, LRN, and the
// ops whose output size depends on the data (NonZero, Compress, NonMaxSuppression: computed on the host).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// ---- Resize ------------------------------------------------------------------------------

// f when every output o of an axis of `in` inputs reads input o / f alone with weight 1 (nearest
// upsampling by a whole factor), else 0.
int64_t whole_factor(const std::vector<std::vector<std::pair<int64_t, double>>>& taps, const std::vector<bool>& outside,
                     int64_t in) {
  const int64_t out = static_cast<int64_t>(taps.size());
  if (in <= 0 || out <= in || out % in != 0) return 0;
  const int64_t f = out / in;
  for (int64_t o = 0; o < out; ++o) {
    const auto& t = taps[static_cast<size_t>(o)];
    if (t.size() != 1 || t[0].first != o / f || t[0].second != 1.0 || outside[static_cast<size_t>(o)]) return 0;
  }
  return f;
}

// Repeats each element factor[d] times along every dim d: one broadcast view of x copied once
// (a plain elementwise kernel; a gather per axis was slower).
Tensor repeat_elements(const Tensor& x, const std::vector<int64_t>& factor) {
  const size_t r = factor.size();
  if (r == 4 && factor[0] == 1 && factor[1] == 1 && is_floating(x.dtype())) {
    // Images [N, C, H, W] repeated over H and W (a feature pyramid's nearest upsampling): fold2d
    // with kernel = stride = the factors sums exactly one tap into each output, so the input
    // broadcast over the taps (its rows stay contiguous) folds into the upsampled image.
    const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
    const int64_t fh = factor[2], fw = factor[3];
    Tensor cols = broadcast_to(x.reshape({N, C, 1, H * W}), {N, C, fh * fw, H * W}).contiguous();
    return fold2d(cols.reshape({N, C * fh * fw, H * W}), H * fh, W * fw, Conv2dGeometry{fh, fw, fh, fw, 0, 0, 1, 1});
  }
  Shape view, wide, out;
  for (size_t d = 0; d < factor.size(); ++d) {
    const int64_t n = x.shape()[d];
    view.push_back(n);
    wide.push_back(n);
    out.push_back(n * factor[d]);
    if (factor[d] > 1) {
      view.push_back(1);
      wide.push_back(factor[d]);
    }
  }
  return broadcast_to(x.reshape(view), wide).contiguous().reshape(out);
}

// One axis of a separable resize: output position o reads taps (index, weight) of the input.
Tensor resample_axis(const Tensor& x, int64_t axis, const std::vector<std::vector<std::pair<int64_t, double>>>& taps,
                     const std::vector<bool>& outside, double extrapolation) {
  const int64_t out = static_cast<int64_t>(taps.size());
  size_t ntaps = 0;
  for (const auto& t : taps) ntaps = std::max(ntaps, t.size());
  Shape wshape(static_cast<size_t>(x.dim()), 1);
  wshape[static_cast<size_t>(axis)] = out;
  Tensor y;
  const DType compute = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  for (size_t k = 0; k < ntaps; ++k) {
    std::vector<int64_t> idx(static_cast<size_t>(out));
    std::vector<double> w(static_cast<size_t>(out));
    bool all_one = true;
    for (int64_t o = 0; o < out; ++o) {
      const auto& t = taps[static_cast<size_t>(o)];
      idx[static_cast<size_t>(o)] = k < t.size() ? t[k].first : 0;
      w[static_cast<size_t>(o)] = k < t.size() ? t[k].second : 0.0;
      all_one = all_one && w[static_cast<size_t>(o)] == 1.0;
    }
    Tensor picked = index_select(x, axis, tensor(idx, {out}));
    Tensor term = all_one && ntaps == 1 ? picked : picked.to(compute) * tensor(w, wshape).to(compute);
    y = k == 0 ? term : y + term;
  }
  bool any_outside = false;
  for (bool b : outside) any_outside = any_outside || b;
  if (any_outside) {
    std::vector<uint8_t> mask(outside.begin(), outside.end());
    y = where(tensor(mask, wshape, DType::Bool), extrapolation, y);
  }
  return y.dtype() == x.dtype() ? y : cast(is_integral(x.dtype()) ? round(y) : y, x.dtype());
}

Outs op_resize(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t r = x.dim();
  if (c.i("antialias", 0)) c.unsupported("antialias");
  if (c.s("keep_aspect_ratio_policy", "stretch") != "stretch") c.unsupported("keep_aspect_ratio_policy");
  const std::string mode = c.s("mode", "nearest");
  const std::string ctm = c.opset < 11 ? "asymmetric" : c.s("coordinate_transformation_mode", "half_pixel");
  const std::string nearest_mode = c.s("nearest_mode", "round_prefer_floor");
  const double a = c.f("cubic_coeff_a", -0.75), extrapolation = c.f("extrapolation_value", 0.0);
  const bool exclude_outside = c.i("exclude_outside", 0) != 0;
  std::vector<int64_t> axes = c.ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  for (auto& ax : axes) ax = c.axis(ax, r);
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  auto floats = [&](size_t k) {
    c.note_read(k);
    const Tensor& t = c.x(k);
    c.require(t.numel() <= kMaxShapeValues, "input ", k, " too large");
    return t.to_vector<double>(c.loc);
  };
  if (c.opset < 11) {
    scales = floats(1);
  } else {
    if (c.has(1)) roi = floats(1);
    if (c.has(2) && c.x(2).numel() > 0) scales = floats(2);
    if (c.has(3) && c.x(3).numel() > 0) sizes = c.values(3);
  }
  c.require(!scales.empty() || !sizes.empty(), "needs scales or sizes");
  const size_t n = axes.size();
  c.require(scales.empty() || scales.size() == n, "scales ", scales.size(), " for ", n, " axes");
  c.require(sizes.empty() || sizes.size() == n, "sizes ", sizes.size(), " for ", n, " axes");
  c.require(roi.empty() || roi.size() == 2 * n, "roi of the wrong length");
  Tensor y = x;
  Shape out_shape = x.shape();
  std::vector<int64_t> repeat(static_cast<size_t>(r), 1);  // whole-factor nearest axes, done together at the end
  for (size_t k = 0; k < n; ++k) {
    const int64_t ax = axes[k];
    const int64_t in = x.shape()[static_cast<size_t>(ax)];
    double scale;
    int64_t out;
    if (!sizes.empty()) {
      out = sizes[k];
      c.require(in > 0, "cannot resize an empty dim");
      scale = static_cast<double>(out) / static_cast<double>(in);
    } else {
      scale = scales[k];
      c.require(scale > 0 && std::isfinite(scale), "bad scale ", scale);
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * scale));
    }
    c.require(out >= 0 && out <= kMaxShapeValues, "output size ", out, " out of range");
    out_shape[static_cast<size_t>(ax)] = out;
    c.checked(out_shape);
    if (out == in && scale == 1.0 && ctm != "tf_crop_and_resize") continue;
    std::vector<std::vector<std::pair<int64_t, double>>> taps(static_cast<size_t>(out));
    std::vector<bool> outside(static_cast<size_t>(out), false);
    for (int64_t o = 0; o < out; ++o) {
      double xo;
      // The spec's transforms use the unrounded output length in * scale when scales are given.
      const double od = static_cast<double>(o), ind = static_cast<double>(in);
      const double outd = sizes.empty() ? ind * scale : static_cast<double>(out);
      if (ctm == "half_pixel") xo = (od + 0.5) / scale - 0.5;
      else if (ctm == "pytorch_half_pixel") xo = outd > 1 ? (od + 0.5) / scale - 0.5 : 0.0;
      else if (ctm == "align_corners") xo = outd == 1 ? 0.0 : od * (ind - 1) / (outd - 1);
      else if (ctm == "asymmetric") xo = od / scale;
      else if (ctm == "tf_half_pixel_for_nn") xo = (od + 0.5) / scale;
      else if (ctm == "half_pixel_symmetric") {
        const double adj = outd / (scale * ind), center = ind / 2;
        xo = center * (1 - adj) + (od + 0.5) / scale - 0.5;
      } else if (ctm == "tf_crop_and_resize") {
        c.require(!roi.empty(), "tf_crop_and_resize needs roi");
        const double start = roi[k], end = roi[k + n];
        xo = out > 1 ? start * (ind - 1) + od * (end - start) * (ind - 1) / (outd - 1) : 0.5 * (start + end) * (ind - 1);
        if (xo < 0 || xo > ind - 1) outside[static_cast<size_t>(o)] = true;
      } else {
        c.unsupported("coordinate_transformation_mode ", ctm);
      }
      auto& t = taps[static_cast<size_t>(o)];
      auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
      if (mode == "nearest") {
        double v;
        const double fl = std::floor(xo);
        if (nearest_mode == "round_prefer_floor") v = xo == fl + 0.5 ? fl : std::round(xo);
        else if (nearest_mode == "round_prefer_ceil") v = xo == fl + 0.5 ? fl + 1 : std::round(xo);
        else if (nearest_mode == "floor") v = fl;
        else if (nearest_mode == "ceil") v = std::ceil(xo);
        else c.unsupported("nearest_mode ", nearest_mode);
        t.push_back({clampi(static_cast<int64_t>(v)), 1.0});
      } else if (mode == "linear") {
        const double x0 = std::floor(xo), ratio = xo - x0;
        const int64_t i0 = static_cast<int64_t>(x0);
        t.push_back({clampi(i0), 1 - ratio});
        t.push_back({clampi(i0 + 1), ratio});
        if (exclude_outside) {
          double total = 0;
          for (size_t q = 0; q < 2; ++q) {
            const int64_t raw = i0 + static_cast<int64_t>(q);
            if (raw < 0 || raw >= in) t[q].second = 0;
            total += t[q].second;
          }
          if (total != 0) for (auto& p : t) p.second /= total;
        }
      } else if (mode == "cubic") {
        const double x0 = std::floor(xo), rr = xo - x0;
        const int64_t i0 = static_cast<int64_t>(x0);
        const double cf[4] = {((a * (rr + 1) - 5 * a) * (rr + 1) + 8 * a) * (rr + 1) - 4 * a,
                              ((a + 2) * rr - (a + 3)) * rr * rr + 1,
                              ((a + 2) * (1 - rr) - (a + 3)) * (1 - rr) * (1 - rr) + 1,
                              ((a * (2 - rr) - 5 * a) * (2 - rr) + 8 * a) * (2 - rr) - 4 * a};
        double total = 0;
        for (int q = 0; q < 4; ++q) {
          const int64_t raw = i0 - 1 + q;
          double w = cf[q];
          if (exclude_outside && (raw < 0 || raw >= in)) w = 0;
          t.push_back({clampi(raw), w});
          total += w;
        }
        if (exclude_outside && total != 0) for (auto& p : t) p.second /= total;
      } else {
        c.unsupported("mode ", mode);
      }
    }
    c.require(in > 0 || out == 0, "cannot resize an empty dim");
    if (const int64_t f = whole_factor(taps, outside, in)) {
      repeat[static_cast<size_t>(ax)] = f;
      continue;
    }
    y = resample_axis(y, ax, taps, outside, extrapolation);
  }
  for (int64_t f : repeat)
    if (f > 1) return {repeat_elements(y, repeat)};
  return {y};
}

// ---- recurrent layers -----------------------------------------------------------------------

enum class Cell { Rnn, Gru, Lstm };

// RNN, GRU and LSTM with the spec's default activations: the input projection of all steps is
// one matmul per direction, then one small matmul per step for the recurrence.
Handler recurrent(Cell cell) {
  return [cell](Ctx& c) {
    const int64_t G = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
    const std::vector<std::string> defaults = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh", "Tanh"}
                                              : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh", "Sigmoid", "Tanh"}
                                                                  : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"};
    if (const Attr* a = c.attr("activations")) {
      for (size_t k = 0; k < a->strings.size(); ++k)
        if (k >= defaults.size() || a->strings[k] != defaults[k]) c.unsupported("activations other than the defaults");
    }
    if (c.attr("clip")) c.unsupported("clip");
    if (c.i("input_forget", 0)) c.unsupported("input_forget");
    const std::string direction = c.s("direction", "forward");
    const int64_t dirs = direction == "bidirectional" ? 2 : 1;
    c.require(direction == "forward" || direction == "reverse" || direction == "bidirectional", "bad direction ", direction);
    const bool batch_first = c.i("layout", 0) != 0;
    Tensor X = c.x(0);
    c.require(X.dim() == 3, "X must be 3-D");
    if (batch_first) X = X.transpose(0, 1);
    const int64_t T = X.shape()[0], B = X.shape()[1];
    const Tensor &W = c.x(1), &R = c.x(2);
    c.require(W.dim() == 3 && R.dim() == 3 && W.shape()[0] == dirs && R.shape()[0] == dirs, "W/R do not match the directions");
    const int64_t H = c.i("hidden_size", R.shape()[2]);
    c.require(H > 0 && W.shape()[1] == G * H && R.shape()[1] == G * H && R.shape()[2] == H && W.shape()[2] == X.shape()[2],
              "W ", to_string(W.shape()), " / R ", to_string(R.shape()), " do not fit hidden_size ", H);
    if (c.has(4)) {
      for (int64_t len : c.values(4)) if (len != T) c.unsupported("sequence_lens shorter than the sequence");
    }
    const bool lbr = c.i("linear_before_reset", 0) != 0;
    std::vector<Tensor> ys, hs, cs;
    for (int64_t d = 0; d < dirs; ++d) {
      Tensor w = W.select(0, d), r = R.select(0, d);
      Tensor wb, rb;
      if (c.has(3)) {
        c.require(c.x(3).dim() == 2 && c.x(3).shape()[1] == 2 * G * H, "B of the wrong shape");
        wb = c.x(3).select(0, d).slice(0, 0, G * H);
        rb = c.x(3).select(0, d).slice(0, G * H, 2 * G * H);
      } else {
        wb = zeros({G * H}, X.dtype());
        rb = zeros({G * H}, X.dtype());
      }
      Tensor xw = matmul(X, w.t()) + wb;  // [T, B, G*H]
      Tensor h = c.has(5) ? (batch_first ? c.x(5).select(1, d) : c.x(5).select(0, d)) : zeros({B, H}, X.dtype());
      Tensor cst = cell == Cell::Lstm && c.has(6) ? (batch_first ? c.x(6).select(1, d) : c.x(6).select(0, d))
                                                  : zeros({B, H}, X.dtype());
      Tensor peep = cell == Cell::Lstm && c.has(7) ? c.x(7).select(0, d) : Tensor();
      const bool reverse = direction == "reverse" || d == 1;
      std::vector<Tensor> steps(static_cast<size_t>(T));
      for (int64_t k = 0; k < T; ++k) {
        const int64_t t = reverse ? T - 1 - k : k;
        Tensor xt = xw.select(0, t);
        auto gate = [&](const Tensor& all, int64_t g) { return all.slice(-1, g * H, (g + 1) * H); };
        if (cell == Cell::Rnn) {
          h = tanh(xt + matmul(h, r.t()) + rb);
        } else if (cell == Cell::Gru) {
          Tensor hr = matmul(h, r.slice(0, 0, 2 * H).t()) + rb.slice(0, 0, 2 * H);
          Tensor z = sigmoid(gate(xt, 0) + gate(hr, 0)), rr = sigmoid(gate(xt, 1) + gate(hr, 1));
          Tensor rh = r.slice(0, 2 * H, 3 * H), rbh = rb.slice(0, 2 * H, 3 * H);
          Tensor n = lbr ? tanh(gate(xt, 2) + rr * (matmul(h, rh.t()) + rbh)) : tanh(gate(xt, 2) + matmul(rr * h, rh.t()) + rbh);
          h = (1.0 - z) * n + z * h;
        } else {
          Tensor all = xt + matmul(h, r.t()) + rb;
          Tensor gi = gate(all, 0), go = gate(all, 1), gf = gate(all, 2), gc = gate(all, 3);
          if (peep.defined()) {
            gi = gi + peep.slice(0, 0, H) * cst;
            gf = gf + peep.slice(0, 2 * H, 3 * H) * cst;
          }
          cst = sigmoid(gf) * cst + sigmoid(gi) * tanh(gc);
          if (peep.defined()) go = go + peep.slice(0, H, 2 * H) * cst;
          h = sigmoid(go) * tanh(cst);
        }
        h.realize();  // one step at a time: the graph stays shallow for long sequences
        if (cell == Cell::Lstm) cst.realize();
        steps[static_cast<size_t>(t)] = h;
      }
      ys.push_back(T > 0 ? stack(steps, 0) : zeros({0, B, H}, X.dtype()));  // [T, B, H]
      hs.push_back(h);
      cs.push_back(cst);
    }
    Tensor y = stack(ys, 1), yh = stack(hs, 0), yc = stack(cs, 0);  // [T, D, B, H], [D, B, H]
    if (batch_first) {
      y = y.permute({2, 0, 1, 3});
      yh = yh.transpose(0, 1);
      yc = yc.transpose(0, 1);
    }
    Outs out{y, yh};
    if (cell == Cell::Lstm) out.push_back(yc);
    return out;
  };
}

// ---- more ops: inverse trigonometry, windows, scatter/gather variants, data-dependent shapes --

// atan from the primitives: |x| > 1 through atan(x) = sign(x) pi/2 - atan(1/x), then two
// half-angle steps (atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))) to |t| <= tan(pi/16), where the
// odd Taylor series to t^11 is within 1e-10.
Tensor atan_(const Tensor& x) {
  Tensor big = abs(x) > 1.0;
  Tensor t = where(big, 1.0 / x, x);
  for (int k = 0; k < 2; ++k) t = t / (sqrt(t * t + 1.0) + 1.0);
  Tensor t2 = t * t;
  Tensor poly = t * (1.0 - t2 * (1.0 / 3 - t2 * (1.0 / 5 - t2 * (1.0 / 7 - t2 * (1.0 / 9 - t2 / 11.0)))));
  Tensor small = poly * 4.0;
  return where(big, sign(x) * 1.5707963267948966 - small, small);
}
Tensor asin_(const Tensor& x) { return atan_(x / (sqrt(1.0 - x * x) + 1.0)) * 2.0; }

Handler window(int which) {  // 0 Hann, 1 Hamming, 2 Blackman
  return [which](Ctx& c) {
    const int64_t n = static_cast<int64_t>(c.scalar(0));
    c.require(n >= 0 && n <= kMaxShapeValues, "bad window size ", n);
    DType dt = DType::F32;
    if (c.attr("output_datatype") && !dtype_from_onnx(static_cast<int>(c.i("output_datatype", 1)), &dt))
      c.unsupported("output_datatype");
    const double den = c.i("periodic", 1) ? static_cast<double>(n) : static_cast<double>(n - 1);
    std::vector<double> v(static_cast<size_t>(n));
    const double pi = 3.141592653589793;
    for (int64_t k = 0; k < n; ++k) {
      const double a = 2 * pi * static_cast<double>(k) / den;
      v[static_cast<size_t>(k)] = which == 0 ? 0.5 - 0.5 * std::cos(a)
                                  : which == 1 ? 25.0 / 46 - (1 - 25.0 / 46) * std::cos(a)
                                               : 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
    }
    return Outs{cast(tensor(v, {n}), dt)};
  };
}

// Linear positions into data's first k dims (after batch_dims leading dims) for GatherND/ScatterND.
Tensor nd_positions(Ctx& c, const Tensor& data, const Tensor& indices, int64_t batch_dims, int64_t* k_out) {
  c.require(indices.dim() >= 1 && is_integral(indices.dtype()), "indices must be integers of rank >= 1");
  const int64_t k = indices.shape().back();
  c.require(batch_dims >= 0 && batch_dims < indices.dim() && batch_dims + k <= data.dim(), "indices do not fit data");
  Tensor idx = indices.to(DType::I64);
  Tensor lin = zeros(Shape(indices.shape().begin(), indices.shape().end() - 1), DType::I64);
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    const int64_t n = data.shape()[static_cast<size_t>(batch_dims + j)];
    Tensor ij = idx.select(-1, j);
    lin = lin + where(ij < 0, ij + n, ij) * stride;
    stride *= n;
  }
  int64_t batch = 1;
  for (int64_t b = 0; b < batch_dims; ++b) batch *= data.shape()[static_cast<size_t>(b)];
  if (batch_dims > 0) {  // the leading dims of indices and data agree: offset each batch's block
    Shape s{batch};
    s.insert(s.end(), indices.shape().begin() + batch_dims, indices.shape().end() - 1);
    lin = lin.reshape(s);
    Shape bshape(s.size(), 1);
    bshape[0] = batch;
    lin = lin + arange(batch).reshape(bshape) * stride;
  }
  *k_out = k;
  return lin;
}

Outs op_gather_nd(Ctx& c) {
  const Tensor& data = c.x(0);
  const Tensor& indices = c.x(1);
  const int64_t b = c.i("batch_dims", 0);
  int64_t k = 0;
  Tensor lin = nd_positions(c, data, indices, b, &k);
  Shape rest(data.shape().begin() + b + k, data.shape().end());
  Shape flat{-1};
  flat.insert(flat.end(), rest.begin(), rest.end());
  Tensor picked = index_select(data.reshape(flat), 0, lin.reshape({lin.numel()}));
  Shape out(indices.shape().begin(), indices.shape().end() - 1);
  out.insert(out.end(), rest.begin(), rest.end());
  return {picked.reshape(out)};
}

// data with each position index[m] along `axis` (m over updates' elements) combined with
// updates[m] by `combine`, duplicates one after another: the updates go in rounds in which each
// position appears once (the k-th update of every position in round k), made on the host from
// the indices (input 1, read back).
Tensor scatter_in_rounds(Ctx& c, const Tensor& data, int64_t axis, const Tensor& index, const Tensor& updates,
                         const std::function<Tensor(const Tensor&, const Tensor&)>& combine) {
  c.require(index.numel() <= kMaxShapeValues, "too many indices to combine duplicates (", index.numel(), ")");
  c.note_read(1);
  const std::vector<int64_t> idx = index.to_vector<int64_t>(c.loc);
  const Shape& us = updates.shape();
  std::map<std::vector<int64_t>, int64_t> seen;  // target position -> updates placed so far
  std::vector<int64_t> round(idx.size());
  int64_t rounds = 0;
  std::vector<int64_t> at(us.size(), 0);
  for (size_t e = 0; e < idx.size(); ++e) {
    std::vector<int64_t> target = at;
    target[static_cast<size_t>(axis)] = idx[e];
    round[e] = seen[target]++;
    rounds = std::max(rounds, round[e] + 1);
    if (rounds > 4096) c.fail_with("more than 4096 updates of one position");
    for (size_t d = us.size(); d-- > 0;)  // the next multi-index in row-major order
      if (++at[d] < us[d]) break;
      else at[d] = 0;
  }
  Tensor out = data;
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<uint8_t> in_round(idx.size());
    for (size_t e = 0; e < idx.size(); ++e) in_round[e] = round[e] == r;
    const Tensor mask = tensor(in_round, us, DType::Bool);
    const Tensor placed = scatter_add(zeros(data.shape(), updates.dtype()).contiguous(), axis, index,
                                      where(mask, updates, 0.0), c.loc);
    const Tensor hit = scatter_add(zeros(data.shape(), DType::F32).contiguous(), axis, index, mask.to(DType::F32), c.loc);
    out = where(hit > 0, combine(out, placed), out);
  }
  return out;
}

// out = data with positions `index` along `axis` replaced by updates, or combined with them
// (reduction add, mul, max, min).
Tensor scatter_into(Ctx& c, const Tensor& data, int64_t axis, const Tensor& index, const Tensor& updates) {
  const std::string reduction = c.s("reduction", "none");
  if (reduction == "mul") return scatter_in_rounds(c, data, axis, index, updates, [](const Tensor& a, const Tensor& b) { return a * b; });
  if (reduction == "max") return scatter_in_rounds(c, data, axis, index, updates, [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  if (reduction == "min") return scatter_in_rounds(c, data, axis, index, updates, [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  Tensor added = scatter_add(zeros(data.shape(), updates.dtype()).contiguous(), axis, index, updates, c.loc);
  if (reduction == "add") return data + added;
  c.require(reduction == "none", "reduction '", reduction, "' is none of none, add, mul, max, min");
  Tensor hit = scatter_add(zeros(data.shape(), DType::F32).contiguous(), axis, index, ones(updates.shape(), DType::F32), c.loc);
  return where(hit > 0, added, data);
}

Outs op_scatter_elements(Ctx& c) {
  const Tensor& data = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), data.dim());
  Tensor idx = fix_negative_indices(c.x(1), data.shape()[static_cast<size_t>(axis)]);
  return {scatter_into(c, data, axis, idx, c.x(2))};
}

Outs op_scatter_nd(Ctx& c) {
  const Tensor& data = c.x(0);
  int64_t k = 0;
  Tensor lin = nd_positions(c, data, c.x(1), 0, &k);
  Shape rest(data.shape().begin() + k, data.shape().end());
  Shape flat{-1}, upd_shape{lin.numel()};
  flat.insert(flat.end(), rest.begin(), rest.end());
  upd_shape.insert(upd_shape.end(), rest.begin(), rest.end());
  Tensor d2 = data.reshape(flat);
  Shape idx_shape(upd_shape.size(), 1);
  idx_shape[0] = lin.numel();
  Tensor idx = lin.reshape(idx_shape).expand(upd_shape).contiguous();
  return {scatter_into(c, d2, 0, idx, c.x(2).reshape(upd_shape)).reshape(data.shape())};
}

Outs op_lrn(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() >= 3, "input must be at least 3-D");
  const int64_t size = c.i("size", 1);
  c.require(size >= 1 && size <= 1024, "bad size");
  const double alpha = c.f("alpha", 1e-4), beta = c.f("beta", 0.75), bias = c.f("bias", 1.0);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<int64_t> pads(2 * static_cast<size_t>(x.dim() - 1), 0);  // torch order: last dim first; dim 1 is the last pair
  pads[pads.size() - 2] = before;
  pads[pads.size() - 1] = after;
  Tensor sq = pad(x * x, pads);
  const int64_t C = x.shape()[1];
  Tensor acc;
  for (int64_t k = 0; k < size; ++k) {
    Tensor part = sq.slice(1, k, k + C);
    acc = acc.defined() ? acc + part : part;
  }
  return {x / pow(acc * (alpha / static_cast<double>(size)) + bias, beta)};
}

Outs op_nonzero(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.numel() <= kMaxShapeValues, "input too large for NonZero");
  c.note_read(0);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<int64_t> hits;
  for (size_t k = 0; k < v.size(); ++k)
    if (v[k] != 0) hits.push_back(static_cast<int64_t>(k));
  const int64_t r = std::max<int64_t>(x.dim(), 1), n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(r * n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t rem = hits[static_cast<size_t>(j)];
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t size = x.dim() == 0 ? 1 : x.shape()[static_cast<size_t>(d)];
      out[static_cast<size_t>(d * n + j)] = rem % size;
      rem /= size;
    }
  }
  if (n == 0) return {zeros({r, 0}, DType::I64).contiguous()};
  return {tensor(out, {r, n})};
}

Outs op_compress(Ctx& c) {
  Tensor x = c.x(0);
  const Tensor& cond = c.x(1);
  c.require(cond.dim() == 1 && cond.numel() <= kMaxShapeValues, "condition must be 1-D");
  c.note_read(1);
  const std::vector<double> v = cond.to_vector<double>();
  int64_t axis = 0;
  if (c.attr("axis")) axis = c.axis(c.i("axis", 0), x.dim());
  else x = x.reshape({x.numel()});
  std::vector<int64_t> keep;
  for (size_t k = 0; k < v.size() && static_cast<int64_t>(k) < x.shape()[static_cast<size_t>(axis)]; ++k)
    if (v[k] != 0) keep.push_back(static_cast<int64_t>(k));
  if (keep.empty()) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = 0;
    return {zeros(s, x.dtype()).contiguous()};
  }
  return {index_select(x, axis, tensor(keep, {static_cast<int64_t>(keep.size())}))};
}

Outs op_reverse_sequence(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t ta = c.axis(c.i("time_axis", 0), x.dim()), ba = c.axis(c.i("batch_axis", 1), x.dim());
  c.require(ta != ba, "time and batch axes coincide");
  const std::vector<int64_t> lens = c.values(1);
  const int64_t T = x.shape()[static_cast<size_t>(ta)], B = x.shape()[static_cast<size_t>(ba)];
  c.require(static_cast<int64_t>(lens.size()) == B, "sequence_lens has ", lens.size(), " values for batch ", B);
  c.require(T * B <= kMaxShapeValues, "too large");
  std::vector<int64_t> idx(static_cast<size_t>(T * B));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = std::clamp<int64_t>(lens[static_cast<size_t>(b)], 0, T);
      idx[static_cast<size_t>(ta < ba ? t * B + b : b * T + t)] = t < len ? len - 1 - t : t;
    }
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[static_cast<size_t>(ta)] = T;
  s[static_cast<size_t>(ba)] = B;
  return {gather(x, ta, tensor(idx, {static_cast<int64_t>(idx.size())}).reshape(s).expand(x.shape()).contiguous())};
}

Outs op_upsample(Ctx& c) {
  // Upsample (opsets 7-9) is Resize-10 with floor rounding for nearest.
  Node n = c.node;
  n.attrs["nearest_mode"] = Attr{Attr::String, 0, 0, "floor", {}, {}, {}, {}, {}};
  Ctx rc{n, 10, {c.x(0)}, c.loc};
  if (c.opset < 9) {
    const Attr* a = c.attr("scales");
    c.require(a && a->kind == Attr::Floats, "needs scales");
    std::vector<float> v(a->floats.begin(), a->floats.end());
    rc.in.push_back(tensor(v, {static_cast<int64_t>(v.size())}));
  } else {
    rc.in.push_back(c.x(1));
  }
  return op_resize(rc);
}

// Greedy non-maximum suppression per (batch, class), on the host: its output size depends on the data.
Outs op_nms(Ctx& c) {
  const Tensor &boxes = c.x(0), &scores = c.x(1);
  c.require(boxes.dim() == 3 && boxes.shape()[2] == 4 && scores.dim() == 3 && scores.shape()[0] == boxes.shape()[0] &&
                scores.shape()[2] == boxes.shape()[1],
            "boxes ", to_string(boxes.shape()), " and scores ", to_string(scores.shape()), " do not fit");
  c.require(boxes.numel() <= kMaxShapeValues && scores.numel() <= kMaxShapeValues, "too many boxes");
  const int64_t max_out = c.has(2) ? static_cast<int64_t>(c.scalar(2)) : 0;
  const double iou_max = c.has(3) ? c.scalar(3) : 0.0;
  const bool has_thr = c.has(4);
  const double thr = has_thr ? c.scalar(4) : 0.0;
  const bool center = c.i("center_point_box", 0) != 0;
  c.note_read(0), c.note_read(1);
  const std::vector<double> bx = boxes.to_vector<double>(), sc = scores.to_vector<double>();
  const int64_t B = boxes.shape()[0], N = boxes.shape()[1], C = scores.shape()[1];
  auto corners = [&](int64_t b, int64_t i, double out[4]) {
    const double* p = &bx[static_cast<size_t>((b * N + i) * 4)];
    if (center) {
      out[0] = p[1] - p[3] / 2, out[1] = p[0] - p[2] / 2, out[2] = p[1] + p[3] / 2, out[3] = p[0] + p[2] / 2;
    } else {
      out[0] = std::min(p[0], p[2]), out[1] = std::min(p[1], p[3]), out[2] = std::max(p[0], p[2]), out[3] = std::max(p[1], p[3]);
    }
  };
  auto iou = [&](int64_t b, int64_t i, int64_t j) {
    double a[4], d[4];
    corners(b, i, a);
    corners(b, j, d);
    const double ih = std::max(0.0, std::min(a[2], d[2]) - std::max(a[0], d[0]));
    const double iw = std::max(0.0, std::min(a[3], d[3]) - std::max(a[1], d[1]));
    const double inter = ih * iw, uni = (a[2] - a[0]) * (a[3] - a[1]) + (d[2] - d[0]) * (d[3] - d[1]) - inter;
    return uni > 0 ? inter / uni : 0.0;
  };
  std::vector<int64_t> out;
  for (int64_t b = 0; b < B && max_out > 0; ++b)
    for (int64_t k = 0; k < C; ++k) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < N; ++i)
        if (!has_thr || sc[static_cast<size_t>((b * C + k) * N + i)] > thr) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
        return sc[static_cast<size_t>((b * C + k) * N + i)] > sc[static_cast<size_t>((b * C + k) * N + j)];
      });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool keep = true;
        for (int64_t j : kept) keep = keep && iou(b, i, j) <= iou_max;
        if (keep) kept.push_back(i);
      }
      for (int64_t i : kept) out.insert(out.end(), {b, k, i});
    }
  const int64_t n = static_cast<int64_t>(out.size() / 3);
  if (n == 0) return {zeros({0, 3}, DType::I64).contiguous()};
  return {tensor(out, {n, 3})};
}

// Unique, on the host (its output size depends on the data): over the flattened tensor, or over
// slices along `axis`, sorted (lexicographically for slices) or in order of first occurrence.
Outs op_unique(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.numel() <= kMaxShapeValues, "input too large for Unique");
  const bool sorted = c.i("sorted", 1) != 0;
  const bool has_axis = c.attr("axis") != nullptr;
  const int64_t axis = has_axis ? c.axis(c.i("axis", 0), x.dim()) : 0;
  Tensor moved = has_axis ? x.transpose(0, axis).contiguous() : x.reshape({x.numel()});
  const int64_t n = moved.dim() == 0 ? 1 : moved.shape()[0];
  const int64_t width = n == 0 ? 0 : moved.numel() / n;
  c.note_read(0);
  const std::vector<double> v = moved.to_vector<double>();
  auto slice_less = [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < width; ++k) {
      const double p = v[static_cast<size_t>(a * width + k)], q = v[static_cast<size_t>(b * width + k)];
      const bool pn = std::isnan(p), qn = std::isnan(q);  // NaNs equal each other, after all numbers
      if (pn || qn) {
        if (pn != qn) return qn;
        continue;
      }
      if (p != q) return p < q;
    }
    return false;
  };
  auto slice_eq = [&](int64_t a, int64_t b) { return !slice_less(a, b) && !slice_less(b, a); };
  // Group equal slices by sorting positions (O(n log n)); each group's smallest position is
  // its first occurrence.
  std::vector<int64_t> by_value(static_cast<size_t>(n));
  std::iota(by_value.begin(), by_value.end(), 0);
  std::stable_sort(by_value.begin(), by_value.end(), slice_less);
  std::vector<int64_t> group_of(static_cast<size_t>(n)), group_first;
  for (size_t k = 0; k < by_value.size(); ++k) {
    if (k == 0 || !slice_eq(by_value[k - 1], by_value[k])) group_first.push_back(by_value[k]);  // stable: smallest first
    group_of[static_cast<size_t>(by_value[k])] = static_cast<int64_t>(group_first.size()) - 1;
  }
  // Groups in order of first occurrence, as the unsorted output lists them.
  std::vector<int64_t> firsts = group_first, inverse(static_cast<size_t>(n));
  std::sort(firsts.begin(), firsts.end());
  std::vector<int64_t> appearance(group_first.size());
  for (size_t u = 0; u < firsts.size(); ++u) appearance[static_cast<size_t>(group_of[static_cast<size_t>(firsts[u])])] = static_cast<int64_t>(u);
  for (int64_t i = 0; i < n; ++i) inverse[static_cast<size_t>(i)] = appearance[static_cast<size_t>(group_of[static_cast<size_t>(i)])];
  std::vector<int64_t> order(firsts.size());
  std::iota(order.begin(), order.end(), 0);
  if (sorted) std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return slice_less(firsts[a], firsts[b]); });
  std::vector<int64_t> rank(order.size()), picked, counts(order.size(), 0);
  for (size_t r = 0; r < order.size(); ++r) rank[static_cast<size_t>(order[r])] = static_cast<int64_t>(r);
  for (int64_t o : order) picked.push_back(firsts[static_cast<size_t>(o)]);
  for (auto& i : inverse) i = rank[static_cast<size_t>(i)], counts[static_cast<size_t>(i)]++;
  const int64_t m = static_cast<int64_t>(picked.size());
  Tensor y = m == 0 ? moved.slice(0, 0, 0) : index_select(moved, 0, tensor(picked, {m}));
  if (has_axis) y = y.transpose(0, axis);
  auto vec = [](const std::vector<int64_t>& a) { return tensor(a, {static_cast<int64_t>(a.size())}); };
  return {y.contiguous(), vec(picked), vec(inverse), vec(counts)};
}

// BitShift through multiplication by powers of two (stores wrap to the type's width).
Outs op_bitshift(Ctx& c) {
  const Tensor &x = c.x(0), &y = c.x(1);
  c.require(is_integral(x.dtype()), "BitShift needs integer inputs");
  const std::string dir = c.s("direction", "");
  c.require(dir == "LEFT" || dir == "RIGHT", "direction must be LEFT or RIGHT");
  Tensor scale = pow(full({}, 2.0, DType::F64), y.to(DType::F64));
  if (dir == "LEFT") return {cast(x.to(DType::I64) * cast(round(scale), DType::I64), x.dtype())};
  return {cast(floor(x.to(DType::F64) / scale), x.dtype())};
}

// MaxUnpool: the values written at MaxPool's flat indices into zeros of the unpooled shape
// ((in - 1) * stride - pads + kernel). With output_shape (the ONNX reference's rule) the pads are
// ignored, the values land in that unpadded shape, which is then extended with zeros at the end
// of each axis to output_shape. An index that repeats (overlapping windows of the MaxPool that
// made them) carries the same value each time: the values are averaged per position, which
// keeps it, where a sum would multiply it.
Outs op_max_unpool(Ctx& c) {
  const Tensor &x = c.x(0), &idx = c.x(1);
  c.require(x.dim() == 4 && idx.shape() == x.shape(), "X and I must be 4-D of one shape");
  const std::vector<int64_t> kernel = c.ints("kernel_shape");
  c.require(kernel.size() == 2, "kernel_shape must have 2 values");
  std::vector<int64_t> strides = c.ints("strides", {1, 1}), pads = c.ints("pads", {0, 0, 0, 0});
  c.require(strides.size() == 2 && pads.size() == 4, "strides/pads of the wrong length");
  std::vector<int64_t> wanted;
  if (c.has(2)) {
    wanted = c.values(2);
    c.require(wanted.size() == 4, "output_shape must have 4 values, got ", wanted.size());
    pads = {0, 0, 0, 0};
  }
  Shape out = x.shape();
  for (size_t k = 0; k < 2; ++k) out[2 + k] = (x.shape()[2 + k] - 1) * strides[k] - pads[k] - pads[k + 2] + kernel[k];
  const int64_t total = checked_numel(out, c.label(), c.loc);
  Tensor flat_idx = idx.to(DType::I64).reshape({idx.numel()});
  c.require(total > 0 || x.numel() == 0, "empty output");
  const Tensor at = clamp(flat_idx, 0, total - 1);
  const Tensor sums = scatter_add(zeros({total}, x.dtype()).contiguous(), 0, at, x.reshape({x.numel()}));
  const Tensor hits = scatter_add(zeros({total}, x.dtype()).contiguous(), 0, at, ones({x.numel()}, x.dtype()));
  Tensor y = where(hits > 1, sums / hits, sums).reshape(out);
  if (!wanted.empty()) {
    for (size_t k = 0; k < 4; ++k)
      if (wanted[k] < out[k] || (k < 2 && wanted[k] != out[k]) || wanted[k] > kMaxShapeValues)
        c.fail_with("output_shape ", to_string(wanted), " must keep N and C and not be smaller than ", to_string(out));
    y = pad(y, {0, wanted[3] - out[3], 0, wanted[2] - out[2]});
  }
  return {y};
}

// Det by Gaussian elimination with partial pivoting, on the host (small matrices).
Outs op_det(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() >= 2 && x.shape()[x.dim() - 1] == x.shape()[x.dim() - 2], "input must be [..., n, n]");
  c.require(x.numel() <= kMaxShapeValues && is_float(x), "Det needs a small floating-point input");
  const int64_t n = x.shape().back(), batch = n == 0 ? 0 : x.numel() / (n * n);
  c.note_read(0);
  std::vector<double> a = x.to_vector<double>(), dets(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    double* m = &a[static_cast<size_t>(b * n * n)];
    double det = 1;
    for (int64_t col = 0; col < n; ++col) {
      int64_t piv = col;
      for (int64_t r = col + 1; r < n; ++r)
        if (std::fabs(m[r * n + col]) > std::fabs(m[piv * n + col])) piv = r;
      if (m[piv * n + col] == 0) {
        det = 0;
        break;
      }
      if (piv != col) {
        for (int64_t k = 0; k < n; ++k) std::swap(m[col * n + k], m[piv * n + k]);
        det = -det;
      }
      det *= m[col * n + col];
      for (int64_t r = col + 1; r < n; ++r) {
        const double f = m[r * n + col] / m[col * n + col];
        for (int64_t k = col; k < n; ++k) m[r * n + k] -= f * m[col * n + k];
      }
    }
    dets[static_cast<size_t>(b)] = det;
  }
  return {cast(tensor(dets, Shape(x.shape().begin(), x.shape().end() - 2)), x.dtype())};
}

}  // namespace

void add_more_ops(HandlerTable& h) {
  h["Resize"] = op_resize;
  h["RNN"] = recurrent(Cell::Rnn);
  h["GRU"] = recurrent(Cell::Gru);
  h["LSTM"] = recurrent(Cell::Lstm);
  h["Atan"] = unary_fn([](const Ctx&, const Tensor& x) { return atan_(x); });
  h["Asin"] = unary_fn([](const Ctx&, const Tensor& x) { return asin_(x); });
  h["Acos"] = unary_fn([](const Ctx&, const Tensor& x) { return 1.5707963267948966 - asin_(x); });
  h["HannWindow"] = window(0);
  h["HammingWindow"] = window(1);
  h["BlackmanWindow"] = window(2);
  h["GatherND"] = op_gather_nd;
  h["ScatterElements"] = op_scatter_elements;
  h["Scatter"] = op_scatter_elements;
  h["ScatterND"] = op_scatter_nd;
  h["LRN"] = op_lrn;
  h["NonZero"] = op_nonzero;
  h["Compress"] = op_compress;
  h["ReverseSequence"] = op_reverse_sequence;
  h["Upsample"] = op_upsample;
  h["NonMaxSuppression"] = op_nms;
  h["Unique"] = op_unique;
  h["BitShift"] = op_bitshift;
  h["MaxUnpool"] = op_max_unpool;
  h["Det"] = op_det;
}

}  // namespace alk::onnx
