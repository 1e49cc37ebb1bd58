// alk::compile on Vulkan: the traced step's kernels are recorded as one command buffer and
// replayed; the losses and the carried parameters match the same step on the CPU.
#ifdef ALK_HAVE_VULKAN
#include "required.h"
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "alk/alk.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/stream.h"
#include "vulkan_test_util.h"

namespace alk {
namespace {

// clip_grad_norm over 54 parameters (alk train's default GPT has as many) sums 54 norms:
// one fused kernel would bind more buffers than lavapipe allows per shader (32); the
// scheduler splits it, and norm and clipped gradients match the CPU's.
TEST(VulkanCompile, ClipGradNormOverManyParameters) {
  if (vk::devices().empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());
  manual_seed(3);
  std::vector<Tensor> grads;
  for (int i = 0; i < 54; ++i) grads.push_back(randn({7 + i % 5}));
  auto clip = [&](Device& dev) {
    std::vector<Tensor> params;
    for (const Tensor& g : grads) {
      Tensor p = zeros({g.shape()[0]}).to(dev).detach();
      p.requires_grad_();
      sum(p * g.to(dev)).backward();
      params.push_back(p);
    }
    const double norm = optim::clip_grad_norm(params, 0.5);
    std::vector<double> clipped;
    for (const Tensor& p : params)
      for (double v : p.grad().to(cpu_device()).to_vector<double>()) clipped.push_back(v);
    return std::make_pair(norm, clipped);
  };
  const auto [cpu_norm, cpu_grads] = clip(cpu_device());
  const auto [gpu_norm, gpu_grads] = clip(get_device("vulkan"));
  EXPECT_NEAR(gpu_norm, cpu_norm, 1e-5 * cpu_norm);
  ASSERT_EQ(gpu_grads.size(), cpu_grads.size());
  for (size_t i = 0; i < cpu_grads.size(); ++i) EXPECT_NEAR(gpu_grads[i], cpu_grads[i], 1e-6) << i;
}

TEST(VulkanCompile, ReplayedStepMatchesTheCpu) {
  if (vk::devices().empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());
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

// ALK_VK_PROFILE=1: the same test again in a child process; it still passes, and at exit the
// table times its four replays on the GPU by kernel (the step's reduction and maps named).
TEST(VulkanCompile, ProfiledReplaysNameTheirKernels) {
  if (std::getenv("ALK_VK_PROFILE")) GTEST_SKIP() << "already profiled";
  if (vk::devices().empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());
  if (!vk::Context::get(0)->info().timestamp_bits) GTEST_SKIP() << "no timestamps on the compute queue";
  std::string out;
  ASSERT_EQ(vk::testing::run_this_binary("ALK_VK_PROFILE=1",
                                         "--gtest_filter=VulkanCompile.ReplayedStepMatchesTheCpu --gtest_brief=1", out),
            0)
      << out;
  const size_t head = out.find("[alk vulkan profile] 4 replays, ");
  ASSERT_NE(head, std::string::npos) << out;
  EXPECT_GT(std::atof(out.c_str() + head + std::strlen("[alk vulkan profile] 4 replays, ")), 0.0) << out;
  EXPECT_NE(out.find(" x Reduce ["), std::string::npos) << out;
  EXPECT_NE(out.find(" x map:"), std::string::npos) << out;
  EXPECT_EQ(out.find("(unlabelled)"), std::string::npos) << out;
}

// A step drawing random numbers (dropout's mask, randn, randint) replayed on Vulkan draws what
// the CPU's replay and an eager call draw from the same generator state, bit for bit: the seed
// and the step's base offset come from a device buffer the replay rewrites, so the whole step
// stays one recorded command buffer (one submit per replay) with nothing patched on the host.
TEST(VulkanCompile, ReplayedRandomDrawsMatchTheCpuBitForBit) {
  if (vk::devices().empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());
  Device& gpu = get_device("vulkan");
  manual_seed(3);
  Tensor x = randn({64, 32}), w0 = randn({32});
  x.realize();
  struct Run {
    Device* dev;
    Tensor w, x;
    std::optional<Program> step;
  };
  auto make = [&](Device& dev) {
    auto r = std::make_shared<Run>();
    r->dev = &dev;
    r->w = w0.to(dev).contiguous().detach();
    r->w.realize();
    r->w.requires_grad_();
    r->x = x.to(dev);
    r->x.realize();
    Run* raw = r.get();
    r->step.emplace([raw](const std::vector<Tensor>& in) {
      DeviceGuard on(*raw->dev);
      Tensor dropped = dropout(in[0], 0.5);  // scale 2: exact, so the values compare bit for bit
      Tensor noise = randn({64, 32});
      Tensor ints = randint(-5, 1000, {257});
      Tensor y = dropped * raw->w + 0.01 * noise;
      Tensor loss = mean(y * y);
      loss.backward();
      NoGradGuard no_grad;
      raw->w.assign_(raw->w - 0.1 * raw->w.grad());
      raw->w.zero_grad();
      capture("loss", loss);
      capture("dropped", dropped);
      capture("noise", noise);
      capture("ints", ints);
    });
    return r;
  };
  auto on_cpu = make(cpu_device()), on_gpu = make(gpu);
  auto stream_submits = [&] { return vk::Context::get(0)->stream().stats().submits; };
  std::vector<float> previous_noise;
  for (int i = 0; i < 8; ++i) {  // eager, traced, then six replays
    const uint64_t seed = 100 + static_cast<uint64_t>(i % 3), offset = 1000 * static_cast<uint64_t>(i) + 7;
    set_random_state(seed, offset);
    (*on_cpu->step)({on_cpu->x});
    const uint64_t after_cpu = random_offset();
    set_random_state(seed, offset);
    gpu.synchronize();
    const int64_t submits_before = stream_submits();
    (*on_gpu->step)({on_gpu->x});
    const int64_t submits = stream_submits() - submits_before;
    EXPECT_EQ(random_offset(), after_cpu) << "step " << i;
    if (i >= 2) {
      // A replay writes the generator's seed and offset into the step's state buffer: a
      // memcpy where the device has host-visible device-local memory (unified memory,
      // NVIDIA's BAR, AMD's SAM; lavapipe: all of it), so the replay is one submit; only a
      // device without such memory (ALK_VK_NO_MAPPED_STATE=1 pretends) adds a staging copy.
      const int64_t state_upload = vk::Context::get(0)->mapped_small() ? 0 : 1;
      EXPECT_EQ(submits, 1 + state_upload) << "a replay is one submit of the recorded step, step " << i;
    }
    // What an eager call draws from the same state.
    set_random_state(seed, offset);
    Tensor dropped = dropout(on_cpu->x, 0.5);
    Tensor noise = randn({64, 32});
    Tensor ints = randint(-5, 1000, {257});
    const auto& cc = *on_cpu->step;
    const auto& gc = *on_gpu->step;
    EXPECT_EQ(cc.captured("dropped").to_vector<float>(), dropped.to_vector<float>()) << "step " << i;
    EXPECT_EQ(cc.captured("noise").to_vector<float>(), noise.to_vector<float>()) << "step " << i;
    EXPECT_EQ(cc.captured("ints").to_vector<int64_t>(), ints.to_vector<int64_t>()) << "step " << i;
    EXPECT_EQ(gc.captured("dropped").to_vector<float>(), dropped.to_vector<float>()) << "step " << i;
    EXPECT_EQ(gc.captured("noise").to_vector<float>(), noise.to_vector<float>()) << "step " << i;
    EXPECT_EQ(gc.captured("ints").to_vector<int64_t>(), ints.to_vector<int64_t>()) << "step " << i;
    EXPECT_NEAR(gc.captured("loss").item(), cc.captured("loss").item(), 1e-5) << "step " << i;
    std::vector<float> n = noise.to_vector<float>();
    EXPECT_NE(n, previous_noise) << "each step draws fresh numbers, step " << i;
    previous_noise = n;
  }
  EXPECT_TRUE(on_gpu->step->traced());
  std::vector<float> a = on_cpu->w.to_vector<float>(), b = on_gpu->w.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

}  // namespace
}  // namespace alk
#endif
