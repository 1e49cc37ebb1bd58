// alk::compile on Vulkan: the traced step's kernels are recorded as one command buffer and
// replayed; the losses and the carried parameters match the same step on the CPU.
#ifdef ALK_HAVE_VULKAN
#include <gtest/gtest.h>

#include <optional>

#include "alk/alk.h"
#include "backend/vulkan/context.h"

namespace alk {
namespace {

TEST(VulkanCompile, ReplayedStepMatchesTheCpu) {
  if (vk::devices().empty()) GTEST_SKIP() << "no Vulkan device: " << vk::unavailable_reason();
  Device& gpu = get_device("vulkan");
  manual_seed(11);
  Tensor x = randn({64, 33}), w0 = randn({33});
  x.realize();
  struct Run {
    Tensor w, x;
    std::optional<Program> step;
  };
  auto make = [&](Device& dev) {
    auto r = std::make_shared<Run>();
    r->w = w0.to(dev).contiguous().detach();
    r->w.realize();
    r->w.requires_grad_();
    r->x = x.to(dev);
    r->x.realize();
    Run* raw = r.get();
    r->step.emplace([raw](const std::vector<Tensor>& in) {
      // Elementwise chains, broadcasts, a reduction and its gradient, an in-place update.
      Tensor loss = mean(tanh(in[0] * raw->w + 0.5) * sigmoid(in[0]));
      loss.backward();
      NoGradGuard no_grad;
      raw->w.assign_(raw->w - 0.5 * raw->w.grad());
      raw->w.zero_grad();
      capture("loss", loss);
    });
    return r;
  };
  auto on_cpu = make(cpu_device()), on_gpu = make(gpu);
  for (int i = 0; i < 6; ++i) {  // eager, traced, then four replays of the recording
    (*on_cpu->step)({on_cpu->x});
    (*on_gpu->step)({on_gpu->x});
    EXPECT_NEAR(on_gpu->step->captured("loss").item(), on_cpu->step->captured("loss").item(), 1e-5) << "step " << i;
  }
  EXPECT_TRUE(on_gpu->step->traced());
  std::vector<float> a = on_cpu->w.to_vector<float>(), b = on_gpu->w.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
  EXPECT_EQ(&on_gpu->w.device(), &gpu);
}

}  // namespace
}  // namespace alk
#endif
