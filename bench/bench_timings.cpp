// Times that used to be printed by tests asserting nothing (tests/ops/test_conv.cpp's
// Conv.TimingForwardBackward, tests/backend/vulkan/test_vulkan_reduce.cpp's VulkanRowOps.Timings):
// a ResNet-block-sized conv2d forward + backward on the CPU, and softmax / layer_norm / sums of
// typical shapes on each device alk finds (lavapipe is a CPU: its times say little about GPUs).
//   cmake --build build --target bench_timings && ./build/bench_timings
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "alk/alk.h"

namespace {

// Milliseconds per call of fn, over `reps` calls after one untimed call.
double time_ms(const std::function<void()>& fn, int reps = 5) {
  fn();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main() {
  using namespace alk;
  manual_seed(0);
  {
    Tensor x = randn({64, 32, 14, 14}).requires_grad_(), w = randn({64, 32, 3, 3}).requires_grad_();
    const double ms = time_ms([&] {
      Tensor y = conv2d(x, w, Tensor(), 1, 1);
      auto gs = grad({sum(y * y)}, {x, w});
      realize({gs[0], gs[1]});
    });
    std::printf("conv2d x [64, 32, 14, 14] w [64, 32, 3, 3] pad 1 forward+backward on cpu: %.2f ms\n", ms);
  }
  Tensor logits = randn({8, 50257}), rows = randn({256, 768}), gain = randn({768}), bias = randn({768});
  Tensor flat = randn({1 << 20}), cols = randn({512, 768});
  realize({logits, rows, gain, bias, flat, cols});
  for (Device* dev : available_devices()) {
    Tensor l = logits.to(*dev), r = rows.to(*dev), g = gain.to(*dev), b = bias.to(*dev), f = flat.to(*dev),
           c = cols.to(*dev);
    realize({l, r, g, b, f, c});
    auto on = [&](const char* what, const std::function<Tensor()>& fn) {
      std::printf("%s f32 on %s (%s): %.3f ms\n", what, dev->name().c_str(), dev->info().description.c_str(),
                  time_ms([&] {
                    Tensor t = fn();
                    t.realize();
                    dev->synchronize();
                  }));
    };
    on("softmax [8, 50257]", [&] { return softmax(l, 1); });
    on("layer_norm [256, 768]", [&] { return layer_norm(r, {768}, g, b, 1e-5); });
    on("sum [2^20] -> [1]", [&] { return sum(f); });
    on("sum [512, 768] over 0", [&] { return sum(c, {0}); });
  }
  return 0;
}
