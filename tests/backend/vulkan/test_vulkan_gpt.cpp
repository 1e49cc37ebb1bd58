// The GPT training step on Vulkan (issue 8's acceptance check): the same model, data and
// AdamW step compiled on the CPU and on the Vulkan device give the same losses over 20 steps.
#ifdef ALK_HAVE_VULKAN
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "alk/alk.h"
#include "backend/vulkan/context.h"

namespace alk {
namespace {

std::vector<double> train_losses(Device& dev, int steps) {
  manual_seed(5);
  nn::GPTConfig cfg;
  cfg.vocab = 97;
  cfg.ctx = 16;
  cfg.dim = 32;
  cfg.heads = 2;
  cfg.layers = 2;
  nn::GPT model(cfg);  // initialized on the CPU, then moved: both runs start from the same weights
  model.to(dev);
  optim::AdamW opt(model.named_parameters(), 3e-3);
  Program step = compile([&](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
    capture("loss", loss);
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  });
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> ids(2 * 17);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(s) * 3) % 97);
    Tensor all = tensor(ids, {2, 17});
    step({all.slice(1, 0, 16).contiguous().to(dev), all.slice(1, 1, 17).contiguous().to(dev)});
    losses.push_back(step.captured("loss").item());
  }
  return losses;
}

TEST(VulkanGpt, TwentyCompiledStepsMatchTheCpu) {
  if (vk::devices().empty()) GTEST_SKIP() << "no Vulkan device: " << vk::unavailable_reason();
  const std::vector<double> cpu = train_losses(cpu_device(), 20), gpu = train_losses(get_device("vulkan"), 20);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-4 * std::max(1.0, cpu[i])) << "step " << i;
  EXPECT_LT(cpu.back(), cpu.front() - 0.5) << "the model learns the repeating sequence";
}

}  // namespace
}  // namespace alk
#endif
