// Shared test helpers: seeded inputs in an op's gradcheck domain, and gradcheck by
// central differences in float64.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "alk/alk.h"
#include "alk/op_table.h"

namespace alk::testing {

// Values in the domain where the op is smooth (away from kinks, poles and integers).
inline std::vector<double> sample(Domain d, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> v(n);
  for (double& x : v) {
    x = u(rng);
    switch (d) {
      case Domain::Any: break;
      case Domain::Positive: x = 0.2 + std::fabs(x); break;
      case Domain::NonZero: x = (x < 0 ? -0.3 : 0.3) + x * 0.8; break;
      case Domain::Frac: x = std::floor(x) + 0.3 + 0.1 * std::fabs(x); break;
    }
  }
  return v;
}

inline Tensor f64_tensor(Shape shape, Domain d, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return tensor(sample(d, static_cast<size_t>(n), rng), shape);
}

// Checks the gradient of sum(f(inputs) * w) for random w against central differences,
// for every input with requires_grad set. Inputs must be f64.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                      double atol = 1e-6, double rtol = 1e-5, double eps = 1e-6) {
  std::mt19937 rng(1234);
  Tensor y = f(inputs);
  ASSERT_TRUE(y.requires_grad()) << "output does not require grad";
  std::vector<double> w = sample(Domain::Any, static_cast<size_t>(y.numel()), rng);
  Tensor wt = tensor(w, y.shape());
  std::vector<Tensor> wrt;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) {
      wrt.push_back(inputs[i]);
      which.push_back(i);
    }
  auto analytic = grad({sum(y * wt)}, wrt);
  // Evaluated with grad mode on: f may itself take gradients (double backward cases).
  auto loss_at = [&](const std::vector<Tensor>& xs) { return sum(f(xs) * wt).item(); };
  for (size_t j = 0; j < which.size(); ++j) {
    const size_t i = which[j];
    std::vector<double> base = inputs[i].to_vector<double>();
    std::vector<double> got = analytic[j].to_vector<double>();
    ASSERT_EQ(got.size(), base.size());
    for (size_t e = 0; e < base.size(); ++e) {
      std::vector<Tensor> xs = inputs;
      std::vector<double> v = base;
      v[e] = base[e] + eps;
      xs[i] = tensor(v, inputs[i].shape());
      double up = loss_at(xs);
      v[e] = base[e] - eps;
      xs[i] = tensor(v, inputs[i].shape());
      double down = loss_at(xs);
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(got[e], numeric, atol + rtol * std::fabs(numeric))
          << "input " << i << " element " << e << " of shape " << to_string(inputs[i].shape());
    }
  }
}

// The compiled language-model training step several suites run: cross-entropy of
// model(in[0]) against in[1] (captured as "loss"), backward, gradients clipped to norm 1,
// the optimizer's step, gradients cleared.
inline Program compiled_lm_step(nn::Module& model, optim::Optimizer& opt) {
  return compile([&model, &opt](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
    capture("loss", loss);
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  });
}

// Map results that read only another Map kernel's whole result, for kernels with extra
// outputs (Kernel::extra_outputs): an f32 sum read by a reduction and by its bf16 cast; a bf16
// result read back in f32 (the extra output must read its rounding); a product that may be
// written over its dying input, beside the cast of it. Three merges where the device takes them.
inline std::vector<Tensor> extra_output_cases(const Tensor& a, const Tensor& b) {
  Tensor s = a + b;
  Tensor s16 = s.to(DType::BF16);
  Tensor total = sum(s * s);
  Tensor h = (a * b).to(DType::BF16);
  Tensor h_back = h.to(DType::F32) * 0.5 + 1.0;
  Tensor h_sum = sum(h.to(DType::F32), {0});
  Tensor x = exp(a * 0.25);
  Tensor x_sum = sum(x, {1});
  Tensor y = x * 2.0 - b;
  Tensor y16 = y.to(DType::BF16);
  Tensor y_sum = sum(y, {0});
  return {s16, total, h_back, h_sum, x_sum, y16, y_sum};
}

// Extra outputs of a product's epilogue: the GELU of fc's product after its bias (read from
// the kernel's result); a GELU of the tensor an input gradient's epilogue reads, computed
// beside that gradient, scheduled after it (it moves up to the product) and before it (the
// product moves up to it). Three merges where the device takes them.
inline std::vector<Tensor> epilogue_extra_output_cases(const Tensor& x, const Tensor& w, const Tensor& bias,
                                                       const Tensor& h, const Tensor& h2) {
  Tensor y = matmul(x, w) + bias;
  Tensor a = gelu_tanh(y);
  Tensor y_sum = sum(y, {0});
  Tensor dx = matmul(x, w) * (h * 0.5 + 1.0);
  Tensor h_gelu = gelu_tanh(h);
  Tensor h2_gelu = gelu_tanh(h2);
  Tensor dx2 = matmul(x, w) * h2;
  return {a, y_sum, dx, h_gelu, h2_gelu, dx2};
}

}  // namespace alk::testing
