// The Vulkan backend through the runtime Device interface: the registry, tensors on
// "vulkan", fused kernels the scheduler sends, refusal of what it cannot run, record/replay.
#include "required.h"
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>

#include "alk/device.h"
#include "alk/tensor.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_device.h"
#include "alk/expr.h"
#include "runtime/device.h"

namespace alk {
namespace {

Device* vulkan_or_null() {
  if (vk::devices().empty()) return nullptr;
  return &get_device("vulkan");
}

#define ALK_VULKAN_DEVICE_OR_SKIP(dev)                                          \
  Device* dev = vulkan_or_null();                                               \
  if (!dev) {                                                                   \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason());           \
  }                                                                             \
  static_assert(true)

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << "element " << i;
}

TEST(VulkanDevice, RegisteredWithItsInfo) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const DeviceInfo& info = dev->info();
  EXPECT_EQ(info.name, "vulkan:0");
  EXPECT_EQ(info.kind, "vulkan");
  EXPECT_EQ(info.description, vk::devices()[0].name);
  EXPECT_GE(info.alignment, 64u);
  EXPECT_EQ(&get_device("vulkan:0"), dev);
  bool listed = false;
  for (Device* d : available_devices()) listed = listed || d == dev;
  EXPECT_TRUE(listed);
  std::cout << info.name << ": " << info.description << " (" << info.type << "), " << info.driver << "\n";
}

TEST(VulkanDevice, BufferRoundTrip) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  auto a = dev->allocate(1003), b = dev->allocate(1003);
  dev->upload(*a, 3, data.data(), data.size());
  dev->copy(*a, 3, *b, 0, data.size());
  std::vector<uint8_t> back(data.size());
  dev->download(*b, 0, back.data(), back.size());
  EXPECT_EQ(back, data);
  // Across devices: through host memory.
  auto c = cpu_device().allocate(1000);
  dev->copy(*b, 0, *c, 0, 1000);
  std::vector<uint8_t> host(1000);
  cpu_device().download(*c, 0, host.data(), 1000);
  EXPECT_EQ(host, data);
}

TEST(VulkanDevice, FusedChainsMatchTheCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  manual_seed(3);
  Tensor a = randn({37, 19}), b = randn({19}), c = randn({19, 37});
  auto on_cpu = [&] { return (gelu(a * b + 1.0) - c.transpose(0, 1).slice(0, 0, 37) * 0.5).to_vector<float>(); };
  const std::vector<float> want = on_cpu();
  Tensor av = a.to(*dev), bv = b.to(*dev), cv = c.to(*dev);
  EXPECT_EQ(&av.device(), dev);
  Tensor y = gelu(av * bv + 1.0) - cv.transpose(0, 1).slice(0, 0, 37) * 0.5;
  EXPECT_EQ(&y.device(), dev);
  expect_near(y.to(cpu_device()).to_vector<float>(), want, 2e-5f);
  // Reading on the device directly (download) gives the same.
  expect_near(y.to_vector<float>(), want, 2e-5f);
}

TEST(VulkanDevice, TemplateOpsItLacksAreRefusedClearly) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  // An op no backend family registers (the template ops get kernels one family at a time).
  Kernel k;
  k.op = k.node.op = OpId::ToDevice;
  EXPECT_FALSE(dev->supports(k));
  try {
    dev->prepare(k);
    FAIL() << "ToDevice has no Vulkan kernel; expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vulkan:0"), std::string::npos) << e.what();
  }
}

// An error raised inside the backend while a kernel runs names the op and the user's
// file:line, as the CPU's do (it used to cite src/backend/vulkan/loader.cpp:91). Here: a
// product taller than the device's workgroup grid reaches (rows / 32 > maxComputeWorkGroupCount[1]).
TEST(VulkanDevice, KernelErrorsNameTheCallersLine) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t rows = static_cast<int64_t>(vk::Context::get(0)->info().max_workgroup_count[1]) * 64 + 1;
  if (rows * 4 > 512ll << 20) GTEST_SKIP() << "the device's grid is too tall to overflow cheaply";
  DeviceGuard on(*dev);
  Tensor a = ones({rows, 2}), b = ones({2, 3});
  a.realize(), b.realize();
  unsigned line = 0;
  try {
    line = __LINE__ + 1;
    Tensor c = matmul(a, b);
    c.realize();
    dev->synchronize();
    GTEST_SKIP() << "vulkan:0 ran a " << rows << "-row product: no error to check";
  } catch (const Error& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.file()).find("test_vulkan_device.cpp"), std::string::npos) << e.what();
    EXPECT_EQ(e.op(), std::string(op_name(OpId::Matmul))) << e.what();
    EXPECT_NE(e.detail().find("workgroups"), std::string::npos) << e.what();
  }
}

TEST(VulkanDevice, RecordOnceReplayInPlace) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  // x = x * 2 + 1 in place (a Map reading and writing the same elements), recorded once.
  const int64_t n = 1000;
  std::vector<float> x(n, 1.0f);
  auto buf = dev->allocate(n * 4);
  dev->upload(*buf, 0, x.data(), n * 4);
  expr::Builder b;
  int in = b.input(0, expr::Type::F32);
  Kernel k;
  k.op = k.node.op = OpId::Map;
  k.node.shape = {n};
  k.expr = b.finish(b.binary(expr::Fn::Add, b.binary(expr::Fn::Mul, in, b.constant(2, expr::Type::F32)),
                             b.constant(1, expr::Type::F32)));
  KernelArg arg{buf, 0, DType::F32, {n}, {1}, 0};
  k.inputs = {arg};
  k.output = arg;
  ASSERT_TRUE(dev->supports(k));
  auto rec = dev->record({k, k});  // two steps per replay
  for (int i = 0; i < 3; ++i) dev->replay(*rec);
  dev->download(*buf, 0, x.data(), n * 4);
  // 1 -> 3 -> 7 -> ... six applications: 2^7 - 1.
  for (float v : x) ASSERT_EQ(v, 127.0f);
  // supports(): a kernel the device cannot bind (rank > 8) is refused, with the reason.
  Kernel wide = k;
  wide.output.shape = wide.inputs[0].shape = Shape(9, 1);
  wide.output.strides = wide.inputs[0].strides = Shape(9, 1);
  EXPECT_FALSE(dev->supports(wide));
  EXPECT_NE(vk::unsupported_reason(0, wide).find("rank"), std::string::npos);
}

}  // namespace
}  // namespace alk
#endif
