// A custom elementwise op in alk's expression language: Mish, x * tanh(softplus(x)).
// It fuses with its neighbours, is differentiable through its gradient expression, and
// gets a kernel in every target language from the same text.
#include <cmath>
#include <iostream>

#include "alk/alk.h"

int main() {
  const alk::CustomOp mish{
      .name = "mish",
      .inputs = {"x"},
      .forward = "x * tanh(log1p(exp(x)))",
      // d/dx = tanh(sp) + x * (1 - tanh(sp)^2) * sigmoid(x), sp = softplus(x)
      .backward = {"g * (tanh(log1p(exp(x))) + x * (1 - tanh(log1p(exp(x))) * tanh(log1p(exp(x)))) / (1 + exp(-x)))"},
  };
  alk::Tensor x = alk::linspace(-3, 3, 7).requires_grad_();
  alk::Tensor y = alk::custom_elementwise(mish, {x * 2.0}) + 1.0;  // fused: one kernel
  std::cout << "kernel (CUDA):\n" << alk::generated_kernel(y, "cuda") << "\n";
  alk::sum(y).backward();
  std::cout << "y = " << y << "\ndy/dx = " << x.grad() << "\n";
  // Check the gradient against a central difference at x = 0.5 (inner argument 1.0).
  auto f = [](double v) { return 2 * v * std::tanh(std::log1p(std::exp(2 * v))); };
  double numeric = (f(0.5 + 1e-4) - f(0.5 - 1e-4)) / 2e-4;
  alk::Tensor x1 = alk::tensor(std::vector<float>{0.5f}, {1}).requires_grad_();
  alk::sum(alk::custom_elementwise(mish, {x1 * 2.0})).backward();
  std::cout << "gradient at 0.5: alk " << x1.grad().item() << ", central difference " << numeric << "\n";
}
