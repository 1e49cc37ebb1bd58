// `alk train --task mnist --device vulkan`'s step: the MNIST CNN (two conv + pool stages, two
// linear layers: unfold, batched matmuls, max pools, cross entropy, AdamW) compiled and
// replayed on Vulkan follows the CPU backend's losses and ends with its weights. Images are
// drawn here (u8, normalized in the step as the job does), so the test needs no data set.
#ifdef ALK_HAVE_VULKAN
#include "required.h"
#include <gtest/gtest.h>

#include <cmath>

#include "alk/alk.h"
#include "alk/compile.h"
#include "alk/data.h"
#include "alk/optim.h"
#include "alk/train.h"
#include "backend/vulkan/context.h"

namespace alk {
namespace {

struct MnistRun {
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::AdamW> opt;
  Tensor images, labels;
  std::optional<Program> step;
  std::vector<double> losses;
};

std::unique_ptr<MnistRun> mnist_run(Device& dev, const Tensor& images, const Tensor& labels) {
  auto r = std::make_unique<MnistRun>();
  manual_seed(5);  // the same initial weights on every device
  r->net = train::mnist_cnn();
  r->net->to(dev);
  r->opt = std::make_unique<optim::AdamW>(r->net->named_parameters(), 2e-3, optim::AdamOptions{.weight_decay = 0.01});
  r->images = images.to(dev);
  r->labels = labels.to(dev);
  realize({r->images, r->labels});
  MnistRun* raw = r.get();
  r->step.emplace([raw](const std::vector<Tensor>& in) {
    Tensor x = normalize_images(index_select(raw->images, 0, in[0])), y = index_select(raw->labels, 0, in[0]);
    Tensor loss = nn::cross_entropy(raw->net->forward(x), y);
    capture("loss", loss);
    loss.backward();
    raw->opt->step();
    raw->opt->zero_grad();
  });
  return r;
}

TEST(VulkanMnist, CompiledCnnStepFollowsTheCpu) {
  if (vk::devices().empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());
  Device& gpu = get_device("vulkan");
  manual_seed(17);
  const int64_t n = 96, batch = 16;
  Tensor images = randint(0, 256, {n, 28, 28}, DType::U8), labels = randint(0, 10, {n});
  realize({images, labels});
  auto on_cpu = mnist_run(cpu_device(), images, labels), on_gpu = mnist_run(gpu, images, labels);
  const int steps = 6;  // eager, traced, four replays
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < batch; ++b) rows.push_back((s * 37 + b * 5) % n);
    Tensor r = tensor(rows, {batch});
    (*on_cpu->step)({r});
    (*on_gpu->step)({r.to(gpu)});
    const double a = on_cpu->step->captured("loss").item(), b = on_gpu->step->captured("loss").item();
    EXPECT_TRUE(std::isfinite(a));
    EXPECT_NEAR(b, a, 1e-4 * std::max(1.0, std::abs(a))) << "step " << s;
    on_cpu->losses.push_back(a);
  }
  EXPECT_TRUE(on_gpu->step->traced());
  auto pc = on_cpu->net->named_parameters(), pg = on_gpu->net->named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    std::vector<float> a = pc[i].second.to_vector<float>(), b = pg[i].second.to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, static_cast<double>(std::abs(a[j] - b[j])));
    EXPECT_LT(worst, 1e-4) << pc[i].first;
  }
}

}  // namespace
}  // namespace alk
#endif
