// Signal processing: DFT and STFT as products with cosine and sine matrices built on the host
// in f64 (a length-L transform is two [L, K] products, which the GEMMs run at full speed for the
// frame sizes audio models use, 256..2048; an FFT would only win on long single transforms).
// MelWeightMatrix, the filter bank applied to their magnitudes, is made on the host.
// The windows (HannWindow, ...) are in ops_more.cpp.
#include <algorithm>
#include <numbers>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// cos and sin of 2 pi k j / L for k < bins, j < used, as [used, bins] matrices of dtype t
// (x [..., used] @ them gives the bins).
std::pair<Tensor, Tensor> dft_matrices(int64_t L, int64_t used, int64_t bins, DType t) {
  std::vector<double> c(static_cast<size_t>(used * bins)), s(c.size());
  for (int64_t j = 0; j < used; ++j)
    for (int64_t k = 0; k < bins; ++k) {
      // k j mod L keeps the angle small (exact for the integers involved), as the direct sum would.
      const double theta = 2 * std::numbers::pi * static_cast<double>((k * j) % L) / static_cast<double>(L);
      c[static_cast<size_t>(j * bins + k)] = std::cos(theta);
      s[static_cast<size_t>(j * bins + k)] = std::sin(theta);
    }
  return {tensor(c, {used, bins}).to(t), tensor(s, {used, bins}).to(t)};
}

// The transform of (re, im) [..., n] along the last axis: [..., bins] each. sign -1 forward, +1 inverse.
std::pair<Tensor, Tensor> transform(const Tensor& re, const Tensor& im, int64_t L, int64_t bins, bool inverse) {
  const int64_t n = re.shape().back(), used = std::min(n, L);
  const Tensor a = used < n ? re.slice(-1, 0, used) : re;
  const Tensor b = im.defined() ? (used < n ? im.slice(-1, 0, used) : im) : Tensor();
  auto [C, S] = dft_matrices(L, used, bins, re.dtype());
  C = C.to(re.device());
  S = S.to(re.device());
  // (a + ib)(cos + i s sin) = a cos - s b sin + i (b cos + s a sin), s = -1 forward.
  const double sign = inverse ? 1.0 : -1.0;
  Tensor out_re = matmul(a, C), out_im = matmul(a, S) * sign;
  if (b.defined()) {
    out_re = out_re - matmul(b, S) * sign;
    out_im = out_im + matmul(b, C);
  }
  if (inverse) {
    out_re = out_re / static_cast<double>(L);
    out_im = out_im / static_cast<double>(L);
  }
  return {out_re, out_im};
}

// DFT(input [..., n, ..., 1 | 2], dft_length?, axis? (opset 20)): the signal axis transformed,
// [..., L or L / 2 + 1, ..., 2] (real and imaginary parts last).
Outs dft(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(is_float(x), "needs a floating-point input, got ", dtype_name(x.dtype()));
  c.require(x.dim() >= 2 && (x.shape().back() == 1 || x.shape().back() == 2), "input must end in a dim of 1 (real) or 2 "
            "(complex), got ", to_string(x.shape()));
  const int64_t rank = x.dim();
  int64_t axis = c.opset >= 20 ? (c.has(2) ? static_cast<int64_t>(c.scalar(2)) : -2) : c.i("axis", 1);
  // The axis counts the trailing real/imaginary dim in the rank; it may not name that dim.
  axis = c.axis(axis, rank);
  c.require(axis != rank - 1, "axis ", axis, " is the real/imaginary dim");
  const bool inverse = c.i("inverse", 0) != 0, onesided = c.i("onesided", 0) != 0;
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  const int64_t L = c.has(1) ? static_cast<int64_t>(c.scalar(1)) : n;
  c.require(L >= 1 && L <= kMaxShapeValues, "dft_length ", L, " must be in [1, ", kMaxShapeValues, "]");
  c.require(!(onesided && inverse), "an inverse one-sided DFT is not supported");
  c.require(!(onesided && x.shape().back() == 2), "a one-sided DFT needs a real input");
  const int64_t bins = onesided ? L / 2 + 1 : L;
  // The signal axis moved last, the real/imaginary dim dropped.
  Tensor re = x.select(-1, 0).transpose(axis, rank - 2);
  Tensor im = x.shape().back() == 2 ? x.select(-1, 1).transpose(axis, rank - 2) : Tensor();
  auto [yr, yi] = transform(re, im, L, bins, inverse);
  return {stack({yr.transpose(axis, rank - 2), yi.transpose(axis, rank - 2)}, -1, c.loc).contiguous()};
}

// STFT(signal [batch, len, 1 | 2], frame_step, window?, frame_length?): [batch, frames, bins, 2],
// frames = 1 + (len - L) / step, each frame multiplied by the window.
Outs stft(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(is_float(x), "needs a floating-point signal, got ", dtype_name(x.dtype()));
  c.require(x.dim() == 3 && (x.shape()[2] == 1 || x.shape()[2] == 2), "signal must be [batch, length, 1 | 2], got ",
            to_string(x.shape()));
  const int64_t step = static_cast<int64_t>(c.scalar(1));
  const bool onesided = c.i("onesided", 1) != 0;
  int64_t L = -1;
  if (c.has(2)) {
    c.require(c.in[2].dim() == 1, "window must be 1-D, got ", to_string(c.in[2].shape()));
    L = c.in[2].shape()[0];
  }
  if (c.has(3)) {
    const int64_t given = static_cast<int64_t>(c.scalar(3));
    c.require(L < 0 || given == L, "frame_length ", given, " differs from the window's length ", L);
    L = given;
  }
  const int64_t len = x.shape()[1];
  c.require(L >= 1 && L <= len, "frame length ", L, " must be in [1, ", len, "] (a window or frame_length is needed)");
  c.require(step >= 1, "frame_step must be >= 1, got ", step);
  c.require(!(onesided && x.shape()[2] == 2), "a one-sided STFT needs a real signal");
  const int64_t frames = 1 + (len - L) / step, bins = onesided ? L / 2 + 1 : L;
  // Frame f's samples f * step + j, gathered as one index.
  std::vector<int64_t> idx(static_cast<size_t>(frames * L));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < L; ++j) idx[static_cast<size_t>(f * L + j)] = f * step + j;
  const Tensor at = tensor(idx, {frames * L}).to(x.device());
  auto framed = [&](int64_t part) {
    Tensor v = index_select(x.select(2, part), 1, at).reshape({x.shape()[0], frames, L});
    return c.has(2) ? v * c.in[2].to(x.dtype()) : v;
  };
  Tensor re = framed(0), im = x.shape()[2] == 2 ? framed(1) : Tensor();
  auto [yr, yi] = transform(re, im, L, bins, false);
  return {stack({yr, yi}, -1, c.loc).contiguous()};
}

// MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
// [dft_length / 2 + 1, num_mel_bins] triangular filters, made on the host in f64. The band
// edges are num_mel_bins + 2 points on the mel scale (2595 log10(1 + f / 700)) spaced by
// (high - low) / (num_mel_bins + 2), as the spec's reference divides (not by + 1), mapped back
// to hertz and floored to spectrogram bins: floor((dft_length + 1) * f / sample_rate).
Outs mel_weight_matrix(Ctx& c) {
  const auto mels = static_cast<int64_t>(c.scalar(0)), dft_length = static_cast<int64_t>(c.scalar(1));
  const double rate = c.scalar(2), low_hz = c.scalar(3), high_hz = c.scalar(4);
  c.require(mels >= 1 && mels <= kMaxShapeValues, "num_mel_bins ", mels, " must be in [1, ", kMaxShapeValues, "]");
  c.require(dft_length >= 1 && dft_length <= kMaxShapeValues, "dft_length ", dft_length, " must be in [1, ",
            kMaxShapeValues, "]");
  c.require(rate > 0 && low_hz >= 0 && low_hz <= high_hz && high_hz <= rate / 2, "edges ", low_hz, "..", high_hz,
            " Hz must be ordered and at most half the sample rate ", rate);
  DType dt = DType::F32;
  if (!dtype_from_onnx(static_cast<int>(c.i("output_datatype", 1)), &dt) || !is_floating(dt))
    c.unsupported("output_datatype ", c.i("output_datatype", 1));
  const int64_t bins = dft_length / 2 + 1;
  if (bins * mels > kMaxShapeValues * 16) c.fail_with(bins, " x ", mels, " weights are too many to make on the host");
  const auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double low = mel(low_hz), step = (mel(high_hz) - low) / static_cast<double>(mels + 2);
  // Clamped to the last bin: the Nyquist edge of an odd dft_length would land one past it.
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t k = 0; k < mels + 2; ++k) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(k) * step + low) / 2595.0) - 1.0);
    edge[static_cast<size_t>(k)] =
        std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / rate)), 0, bins - 1);
  }
  std::vector<double> w(static_cast<size_t>(bins * mels), 0.0);
  auto at = [&](int64_t bin, int64_t m) -> double& { return w[static_cast<size_t>(bin * mels + m)]; };
  for (int64_t m = 0; m < mels; ++m) {
    const int64_t left = edge[static_cast<size_t>(m)], center = edge[static_cast<size_t>(m + 1)],
                  right = edge[static_cast<size_t>(m + 2)];
    if (center == left) at(center, m) = 1.0;
    for (int64_t j = left; j <= center && center > left; ++j)
      at(j, m) = static_cast<double>(j - left) / static_cast<double>(center - left);
    for (int64_t j = center; j < right; ++j) at(j, m) = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  return {tensor(w, {bins, mels}).to(dt)};
}

}  // namespace

void add_signal_ops(HandlerTable& h) {
  h["DFT"] = dft;
  h["STFT"] = stft;
  h["MelWeightMatrix"] = mel_weight_matrix;
}

}  // namespace alk::onnx
