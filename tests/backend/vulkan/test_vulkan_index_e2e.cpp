// The index, shape, random and sliding-window ops end to end through Tensors on the
// Vulkan device: forward values and gradients (backward from a seed, no reduction needed)
// equal the CPU's; a bad embedding id raises the CPU's error when the result is read;
// random tensors drawn on the device equal the CPU's draws from the same state.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>
#include <functional>

#include "alk/device.h"
#include "alk/tensor.h"
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

using Outputs = std::vector<std::vector<float>>;

// Runs f with new tensors created on d.
Outputs on(Device& d, const std::function<Outputs()>& f) {
  DeviceGuard guard(d);
  return f();
}

void expect_equal(const Outputs& got, const Outputs& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "output " << k;
    for (size_t i = 0; i < got[k].size(); ++i) ASSERT_EQ(got[k][i], want[k][i]) << "output " << k << " element " << i;
  }
}

std::vector<float> values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 1.3f) * scale;
  return v;
}

// y = op(x); y.backward(seed): {y, x.grad}.
Outputs forward_backward(const Shape& xs, const std::function<Tensor(const Tensor&)>& op) {
  Tensor x = tensor(values(static_cast<size_t>(Tensor(zeros(xs)).numel()), 2.0f), xs);
  x.requires_grad_();
  Tensor y = op(x);
  Tensor seed = tensor(values(static_cast<size_t>(y.numel()), 0.5f), y.shape());
  y.backward(seed);
  return {y.to_vector<float>(), x.grad().to_vector<float>()};
}

void expect_same_on_both(const Shape& xs, const std::function<Tensor(const Tensor&)>& op) {
  Device* dev = vulkan_device_or_null();
  const Outputs want = on(get_device("cpu"), [&] { return forward_backward(xs, op); });
  const Outputs got = on(*dev, [&] { return forward_backward(xs, op); });
  expect_equal(got, want);
}

TEST(VulkanIndexOps, GatherIndexSelectEmbeddingWithGradients) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const std::vector<int64_t> ids{3, 0, 4, 4, 1, 3, 3, 2, 0, 1, 4, 2};
  expect_same_on_both({5, 6}, [&](const Tensor& x) { return gather(x.t(), 1, tensor(ids, {6, 2})); });
  expect_same_on_both({5, 6}, [&](const Tensor& x) { return index_select(x, 0, tensor(ids, {12})); });
  expect_same_on_both({5, 3}, [&](const Tensor& x) {
    std::vector<int32_t> ids32(ids.begin(), ids.end());
    return embedding(x, tensor(ids32, {3, 4}));
  });
  expect_same_on_both({5, 6}, [&](const Tensor& x) {
    return scatter_add(x, 0, tensor(ids, {2, 6}), tensor(values(12, 3.0f), {2, 6}));
  });
}

TEST(VulkanIndexOps, ShapeOpsWithGradients) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  expect_same_on_both({3, 4, 5}, [](const Tensor& x) { return tril(x.transpose(1, 2), -1); });
  expect_same_on_both({3, 4, 5}, [](const Tensor& x) { return triu(x, 2); });
  expect_same_on_both({3, 4, 5}, [](const Tensor& x) { return pad(x, {1, 2, -1, 0}, 0.25); });
  expect_same_on_both({3, 4, 5}, [](const Tensor& x) { return cat({x, x.slice(1, 1, 3) * 2.0, x}, 1); });
  expect_same_on_both({3, 9, 5}, [](const Tensor& x) { return x.slice(1, 1, 8, 3) * 3.0; });
  expect_same_on_both({2, 3, 7, 6}, [](const Tensor& x) {
    return unfold2d(x, Conv2dGeometry{3, 2, 2, 1, 1, 1, 1, 2}, -1.0);
  });
  expect_same_on_both({2, 12, 24}, [](const Tensor& x) {
    return fold2d(x, 7, 6, Conv2dGeometry{3, 2, 2, 1, 1, 1, 1, 2});
  });
}

TEST(VulkanIndexOps, OneHotOnDevice) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  auto run = [] { return tensor(std::vector<int64_t>{2, 0, 1, 3, 3}, {5}); };
  std::vector<int64_t> want, got;
  {
    DeviceGuard g(get_device("cpu"));
    want = one_hot(run(), 4).to_vector<int64_t>();
  }
  {
    DeviceGuard g(*dev);
    Tensor y = one_hot(run(), 4);
    EXPECT_EQ(&y.device(), dev);
    got = y.to_vector<int64_t>();
  }
  EXPECT_EQ(got, want);
}

TEST(VulkanIndexOps, BadEmbeddingIdRaisesTheCpuErrorWhenRead) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  auto message = [](Device& d) {
    DeviceGuard g(d);
    Tensor w = tensor(values(12, 1.0f), {4, 3});
    try {
      embedding(w, tensor(std::vector<int64_t>{1, 7, 2}, {3})).to_vector<float>();  // the line both name
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string want = message(get_device("cpu"));
  EXPECT_NE(want.find("embedding"), std::string::npos) << want;
  EXPECT_NE(want.find("index 7 is out of range"), std::string::npos) << want;
  EXPECT_EQ(message(*dev), want);
  // The device works on afterwards.
  DeviceGuard g(*dev);
  EXPECT_EQ(index_select(tensor(values(4, 1.0f), {4}), 0, tensor(std::vector<int64_t>{3}, {1})).to_vector<float>(),
            std::vector<float>{values(4, 1.0f)[3]});
}

TEST(VulkanIndexOps, RandomDrawsMatchTheCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  auto draw = [](Device& d) {
    DeviceGuard g(d);
    set_random_state(1234, 99);
    Tensor a = rand({17, 5}), b = randn({301});
    Tensor c = randint(-5, 17, {33});
    EXPECT_EQ(&a.device(), &d);
    EXPECT_EQ(&b.device(), &d);
    EXPECT_EQ(&c.device(), &d);
    Outputs o{a.to_vector<float>(), b.to_vector<float>()};
    for (int64_t v : c.to_vector<int64_t>()) o.push_back({static_cast<float>(v)});
    return o;
  };
  const auto& f = dev->info().features;
  if (std::find(f.begin(), f.end(), "f64") == f.end()) GTEST_SKIP() << "normal draws need f64 on Vulkan";
  expect_equal(draw(*dev), draw(get_device("cpu")));
}

// backward() on a scalar made on Vulkan seeds its gradient there: a kernel whose gradient
// is the seed itself made contiguous (attention under sum()) found it on the CPU.
TEST(VulkanIndexOps, BackwardSeedsOnTheOutputsDevice) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  manual_seed(4);
  Tensor q0 = randn({1, 2, 4, 8});
  auto grad_of = [&](Device& d) {
    Tensor q = q0.to(d).detach();
    q.requires_grad_();
    sum(scaled_dot_product_attention(q, q, q, true)).backward();
    EXPECT_EQ(&q.grad().device(), &d);
    return q.grad().to_vector<float>();
  };
  std::vector<float> a = grad_of(*dev), b = grad_of(get_device("cpu"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

}  // namespace
}  // namespace alk::vk::testing
#endif
