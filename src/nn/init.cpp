// Parameter initializers. Each draws from alk's seeded Philox generator and replaces the
// tensor's value in place (assign_), so a module's handles see it.
#include <cmath>

#include "alk/nn.h"

namespace alk::nn::init {

namespace {

std::pair<double, double> fans(const Tensor& t) {
  check(t.dim() >= 1, "init", Loc::current(), "fan in/out need a tensor of rank >= 1");
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= static_cast<double>(t.shape()[static_cast<size_t>(d)]);
  double fan_out = static_cast<double>(t.shape()[0]) * receptive;
  double fan_in = t.dim() >= 2 ? static_cast<double>(t.shape()[1]) * receptive : fan_out;
  return {fan_in, fan_out};
}

void set(Tensor& t, const Tensor& value) {
  NoGradGuard no_grad;
  Tensor v = value.to(t.dtype());
  v.realize();
  t.assign_(v);
}

}  // namespace

// Drawn on the tensor's own device (the same numbers on every device: one Philox stream).
void normal_(Tensor& t, double mean, double std) {
  DeviceGuard on(t.device());
  set(t, randn(t.shape(), DType::F32) * std + mean);
}
void uniform_(Tensor& t, double low, double high) {
  DeviceGuard on(t.device());
  set(t, rand(t.shape(), DType::F32) * (high - low) + low);
}
void zeros_(Tensor& t) { set(t, zeros(t.shape(), t.dtype()).contiguous()); }
void ones_(Tensor& t) { set(t, ones(t.shape(), t.dtype()).contiguous()); }

void kaiming_uniform_(Tensor& t, double a) {
  double gain = std::sqrt(2.0 / (1 + a * a)), bound = gain * std::sqrt(3.0 / fans(t).first);
  uniform_(t, -bound, bound);
}
void kaiming_normal_(Tensor& t, double a) { normal_(t, 0, std::sqrt(2.0 / (1 + a * a)) / std::sqrt(fans(t).first)); }
void xavier_uniform_(Tensor& t, double gain) {
  auto [in, out] = fans(t);
  double bound = gain * std::sqrt(6.0 / (in + out));
  uniform_(t, -bound, bound);
}
void xavier_normal_(Tensor& t, double gain) {
  auto [in, out] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / (in + out)));
}

}  // namespace alk::nn::init
