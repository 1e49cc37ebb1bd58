// Vulkan tril/triu, pad, concat, slice_scatter against the CPU kernels: identical bytes
// (they copy elements), over transposed/offset views, odd sizes and every element size.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

void expect_same(Device& dev, const KernelOp& node, const std::vector<HostArg>& in, DType dtype, const Shape& shape) {
  const auto want = run_kernel(get_device("cpu"), node, in, dtype, shape);
  const auto got = run_kernel(dev, node, in, dtype, shape);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << op_name(node.op) << " " << dtype_name(dtype) << ": byte " << i << " differs";
}

// A [shape] view of dtype over a permuted, offset storage with distinct bit patterns.
HostArg view(DType dtype, const Shape& shape, const std::vector<int>& perm, int64_t offset) {
  const size_t byte_offset = 64;
  switch (dtype_size(dtype)) {
    case 1: return strided<uint8_t>(dtype, shape, perm, offset, byte_offset, [&](int64_t i) {
        return static_cast<uint8_t>(dtype == DType::Bool ? i % 2 : i * 37 + 1);
      });
    case 2: return strided<uint16_t>(dtype, shape, perm, offset, byte_offset, [](int64_t i) {
        return static_cast<uint16_t>(0x3C00 + i * 13);  // finite f16/bf16 values
      });
    case 4: return strided<uint32_t>(dtype, shape, perm, offset, byte_offset, [](int64_t i) {
        return static_cast<uint32_t>(0x3F800000u + static_cast<uint32_t>(i) * 0x1234u);
      });
    default: return strided<uint64_t>(dtype, shape, perm, offset, byte_offset, [](int64_t i) {
        return 0x3FF0000000000000ull + static_cast<uint64_t>(i) * 0x123456789ull;
      });
  }
}

std::vector<DType> dtypes(Device& dev) {
  std::vector<DType> all{DType::F32, DType::F64, DType::I64, DType::I32};
  const auto& f = dev.info().features;
  if (std::find(f.begin(), f.end(), "f16") != f.end()) all.push_back(DType::F16), all.push_back(DType::BF16);
  if (std::find(f.begin(), f.end(), "u8") != f.end()) all.push_back(DType::U8), all.push_back(DType::Bool);
  return all;
}

TEST(VulkanShape, TriMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : dtypes(*dev)) {
    const HostArg x = view(t, {3, 5, 7}, {0, 2, 1}, 3);
    for (int64_t k : {int64_t{-2}, int64_t{0}, int64_t{3}, int64_t{1} << 40})
      for (bool upper : {false, true})
        expect_same(*dev, make_op(OpId::Tri, TriParams{k, upper}, x.shape, t), {x}, t, x.shape);
  }
}

TEST(VulkanShape, PadMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : dtypes(*dev)) {
    const HostArg x = view(t, {3, 4, 5}, {2, 1, 0}, 1);
    // Growing, cropping (negative) and mixed pads; a value each dtype stores differently.
    const std::vector<std::vector<int64_t>> cases{{1, 2, 0, 0, 3, 1}, {0, 0, -1, -2, 2, -3}, {-1, 1, 1, -1, 0, 0}};
    for (const auto& pads : cases) {
      Shape osh = x.shape;
      for (size_t d = 0; d < 3; ++d) osh[d] += pads[2 * d] + pads[2 * d + 1];
      expect_same(*dev, make_op(OpId::Pad, PadParams{pads, -2.75}, osh, t), {x}, t, osh);
    }
  }
}

// Rank 7: pad's params (5 + 4 * rank words) go in a buffer instead of push constants.
TEST(VulkanShape, HighRankPadUsesAParamsBuffer) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const HostArg x = view(DType::F32, {2, 1, 3, 2, 1, 2, 3}, {6, 5, 4, 3, 2, 1, 0}, 2);
  const std::vector<int64_t> pads{1, 0, 0, 1, -1, 1, 0, 0, 1, 1, 0, 1, 2, -1};
  Shape osh = x.shape;
  for (size_t d = 0; d < 7; ++d) osh[d] += pads[2 * d] + pads[2 * d + 1];
  expect_same(*dev, make_op(OpId::Pad, PadParams{pads, 7.0}, osh, DType::F32), {x}, DType::F32, osh);
}

TEST(VulkanShape, ConcatMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : dtypes(*dev)) {
    for (int dim = 0; dim < 3; ++dim) {
      std::vector<HostArg> xs;
      Shape osh{3, 4, 5};
      osh[static_cast<size_t>(dim)] = 0;
      for (int64_t len : {2, 1, 3}) {
        Shape s{3, 4, 5};
        s[static_cast<size_t>(dim)] = len;
        xs.push_back(view(t, s, len == 1 ? std::vector<int>{0, 1, 2} : std::vector<int>{1, 2, 0}, len));
        osh[static_cast<size_t>(dim)] += len;
      }
      expect_same(*dev, make_op(OpId::Concat, IndexParams{dim}, osh, t), xs, t, osh);
    }
  }
}

TEST(VulkanShape, SliceScatterMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : dtypes(*dev)) {
    // g [4, 3, 5] into [4, 8, 5] at 1, 3, 5 (step 2), contiguous and transposed.
    for (const std::vector<int>& perm : {std::vector<int>{0, 1, 2}, std::vector<int>{2, 0, 1}}) {
      const HostArg g = view(t, {4, 3, 5}, perm, 0);
      expect_same(*dev, make_op(OpId::SliceScatter, SliceScatterParams{1, 1, 2}, {4, 8, 5}, t), {g}, t, {4, 8, 5});
      expect_same(*dev, make_op(OpId::SliceScatter, SliceScatterParams{2, 0, 1}, {4, 3, 9}, t), {g}, t, {4, 3, 9});
    }
  }
}

}  // namespace
}  // namespace alk::vk::testing
#endif
