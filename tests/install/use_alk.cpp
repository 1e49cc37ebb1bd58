// Built against the installed headers and libraries only: an op, a gradient, a device name.
#include <cmath>
#include <iostream>

#include "alk/alk.h"

int main() {
  alk::Tensor x = alk::tensor(std::vector<float>{1, 2, 3}, {3});
  x.requires_grad_();
  alk::Tensor loss = alk::sum(x * x);
  loss.backward();
  std::vector<float> g = x.grad().to_vector<float>();
  const bool ok = loss.item() == 14 && g == std::vector<float>{2, 4, 6} && x.device().name() == "cpu";
  std::cout << "loss " << loss.item() << " grad " << x.grad() << " on " << x.device().name() << "\n";
  return ok ? 0 : 1;
}
