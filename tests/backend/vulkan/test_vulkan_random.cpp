// Vulkan random() against the CPU kernel: bit-identical numbers for every distribution,
// seed, offset (including a counter that carries into its high word), odd sizes and the
// output dtypes the device runs.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

void expect_identical(Device& dev, const RandomParams& p, DType dtype, const Shape& shape) {
  const KernelOp node = make_op(OpId::Random, p, shape, dtype);
  Kernel probe;
  probe.node = node;
  probe.op = OpId::Random;
  probe.output = KernelArg{nullptr, 0, dtype, shape, contiguous_strides(shape), 0};
  const auto want = run_kernel(get_device("cpu"), node, {}, dtype, shape);
  const auto got = run_kernel(dev, node, {}, dtype, shape);
  ASSERT_EQ(got.size(), want.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.size(); i += dtype_size(dtype))
    if (std::memcmp(&got[i], &want[i], dtype_size(dtype)) != 0 && differ++ == 0) first = i / dtype_size(dtype);
  EXPECT_EQ(differ, 0u) << "dist " << p.dist << " seed " << p.seed << " offset " << p.offset << " "
                        << dtype_name(dtype) << ": first differing element " << first;
}

bool has(Device& dev, const char* feature) {
  const auto& f = dev.info().features;
  return std::find(f.begin(), f.end(), feature) != f.end();
}

bool has_f64(Device& dev) {
  const auto& f = dev.info().features;
  return std::find(f.begin(), f.end(), "f64") != f.end();
}

struct SeedOffset {
  uint64_t seed, offset;
};
const SeedOffset kStates[] = {{0, 0}, {42, 7}, {0x123456789abcdefull, 0xFFFFFFFFull - 1000}, {7, 1ull << 40}};

TEST(VulkanRandom, UniformIsBitIdenticalToCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (const auto& s : kStates) {
    expect_identical(*dev, RandomParams{0, s.seed, s.offset, 0.0, 1.0}, DType::F32, {37, 55});
    if (has(*dev, "f16")) {
      expect_identical(*dev, RandomParams{0, s.seed, s.offset, 0.0, 1.0}, DType::BF16, {257});
      expect_identical(*dev, RandomParams{0, s.seed, s.offset, 0.0, 1.0}, DType::F16, {257});
    }
    if (!has_f64(*dev)) continue;
    expect_identical(*dev, RandomParams{0, s.seed, s.offset, -3.5, 0.25}, DType::F32, {2023});
    expect_identical(*dev, RandomParams{0, s.seed, s.offset, -1.0, 1.0}, DType::F64, {3, 333});
  }
}

TEST(VulkanRandom, NormalIsBitIdenticalToCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  if (!has_f64(*dev)) GTEST_SKIP() << dev->name() << " has no f64: normal random is not run there";
  for (const auto& s : kStates) {
    expect_identical(*dev, RandomParams{1, s.seed, s.offset, 0.0, 1.0}, DType::F32, {129, 129});
    expect_identical(*dev, RandomParams{1, s.seed, s.offset, 0.5, 0.02}, DType::F32, {1001});
    expect_identical(*dev, RandomParams{1, s.seed, s.offset, -2.0, 3.0}, DType::F64, {777});
    if (has(*dev, "f16")) {
      expect_identical(*dev, RandomParams{1, s.seed, s.offset, 0.0, 0.02}, DType::BF16, {1025});
      expect_identical(*dev, RandomParams{1, s.seed, s.offset, 1.0, 3.0}, DType::F16, {1025});
    }
  }
}

TEST(VulkanRandom, IntegerIsBitIdenticalToCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (const auto& s : kStates) {
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, 0, 10}, DType::I64, {1000});
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, -7, 1000003}, DType::I32, {3, 41});
    // Spans above 2^32 and 2^63 exercise the 64-bit modulo's high word and its overflow.
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, -4e18, 5e18}, DType::I64, {513});
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, 5, 6e12}, DType::I64, {99});
    if (has_f64(*dev)) {
      expect_identical(*dev, RandomParams{2, s.seed, s.offset, -50, 50}, DType::F32, {301});
      expect_identical(*dev, RandomParams{2, s.seed, s.offset, 0, 9e15}, DType::F64, {301});
      if (has(*dev, "f16")) expect_identical(*dev, RandomParams{2, s.seed, s.offset, -3000, 3000}, DType::F16, {301});
    }
  }
}

// The 64-bit modulo of devices without shaderInt64 (shift and subtract on 32-bit words).
TEST(VulkanRandom, IntegerWithoutInt64IsBitIdenticalToCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  setenv("ALK_VK_EMULATE_INT64", "1", 1);
  for (const auto& s : kStates) {
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, -7, 1000003}, DType::I64, {3, 41});
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, -4e18, 5e18}, DType::I64, {513});
    expect_identical(*dev, RandomParams{2, s.seed, s.offset, 5, 6e12}, DType::I32, {99});
  }
  unsetenv("ALK_VK_EMULATE_INT64");
}

TEST(VulkanRandom, EmptyIntegerRangeIsTheCpuError) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const KernelOp node = make_op(OpId::Random, RandomParams{2, 1, 0, 3, 3}, {4}, DType::I64);
  std::string cpu_error, vk_error;
  try {
    run_kernel(get_device("cpu"), node, {}, DType::I64, {4});
  } catch (const Error& e) {
    cpu_error = e.detail();
  }
  try {
    run_kernel(*dev, node, {}, DType::I64, {4});
  } catch (const Error& e) {
    vk_error = e.detail();
  }
  EXPECT_FALSE(cpu_error.empty());
  EXPECT_EQ(vk_error, cpu_error);
}

}  // namespace
}  // namespace alk::vk::testing
#endif
