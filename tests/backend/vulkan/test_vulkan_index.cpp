// Vulkan index kernels (gather, index_select, scatter_add, one_hot) against the CPU
// kernels on the same data: outputs must be identical bytes (they copy elements, and
// scatter_add adds in the CPU's order). Out-of-range indices raise the CPU's alk::Error
// at the next synchronize.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include "backend/vulkan/stream.h"
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

Device& cpu() { return get_device("cpu"); }

template <class T>
std::vector<T> as(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// Both devices, same kernel: equal bytes.
void expect_same(Device& dev, const KernelOp& node, const std::vector<HostArg>& in, DType dtype, const Shape& shape) {
  const auto want = run_kernel(cpu(), node, in, dtype, shape);
  const auto got = run_kernel(dev, node, in, dtype, shape);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << op_name(node.op) << ": byte " << i << " differs (element " << i / dtype_size(dtype)
                               << ")";
}

// The error a kernel raises: on the CPU at launch, on Vulkan at the synchronize after.
std::string error_of(Device& dev, const KernelOp& node, const std::vector<HostArg>& in, DType dtype,
                     const Shape& shape) {
  try {
    run_kernel(dev, node, in, dtype, shape);
  } catch (const Error& e) {
    return std::string(e.what()) + " @" + std::to_string(e.line());
  }
  return "no error";
}

template <class I>
HostArg indices(DType dtype, const Shape& shape, const std::vector<int64_t>& v) {
  std::vector<I> t(v.begin(), v.end());
  return contiguous(dtype, shape, t);
}

HostArg floats(const Shape& shape, const std::vector<int>& perm, int64_t offset, size_t byte_offset) {
  return strided<float>(DType::F32, shape, perm, offset, byte_offset,
                        [](int64_t i) { return static_cast<float>(i) * 0.37f - 5.0f; });
}

std::vector<int64_t> ids(int64_t n, int64_t range, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int64_t>(g() % static_cast<uint32_t>(range));
  return v;
}

TEST(VulkanIndex, GatherMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  // x [5, 7, 3] transposed and offset; index [4, 6, 3] along each dim, i64 and i32.
  const HostArg x = floats({5, 7, 3}, {2, 0, 1}, 11, 64);
  const Shape ish{4, 6, 3};
  for (int dim = 0; dim < 3; ++dim) {
    const Shape xs{5, 7, 3};
    auto v = ids(4 * 6 * 3, xs[static_cast<size_t>(dim)], 7u + static_cast<uint32_t>(dim));
    for (DType it : {DType::I64, DType::I32}) {
      HostArg index = it == DType::I64 ? indices<int64_t>(it, ish, v) : indices<int32_t>(it, ish, v);
      expect_same(*dev, make_op(OpId::Gather, IndexParams{dim}, ish, DType::F32), {x, index}, DType::F32, ish);
    }
  }
  // A broadcast (stride 0) index and f64/i64 payloads.
  HostArg bidx = indices<int64_t>(DType::I64, {3, 1}, {2, 0, 1});
  bidx.shape = {3, 4};
  bidx.strides = {1, 0};
  HostArg xi = strided<int64_t>(DType::I64, {3, 5}, {0, 1}, 2, 0, [](int64_t i) { return i * 1000003 - 77; });
  expect_same(*dev, make_op(OpId::Gather, IndexParams{1}, {3, 4}, DType::I64), {xi, bidx}, DType::I64, {3, 4});
}

TEST(VulkanIndex, IndexSelectMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const HostArg x = floats({6, 5, 9}, {1, 2, 0}, 3, 128);
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t size = x.shape[static_cast<size_t>(dim)];
    auto v = ids(13, size, 3u + static_cast<uint32_t>(dim));
    Shape osh = x.shape;
    osh[static_cast<size_t>(dim)] = 13;
    for (DType it : {DType::I64, DType::I32}) {
      // The index is itself a strided view (every other element).
      std::vector<int64_t> spread(26, 999);
      for (size_t i = 0; i < 13; ++i) spread[2 * i] = v[i];
      HostArg index = it == DType::I64 ? indices<int64_t>(it, {26}, spread) : indices<int32_t>(it, {26}, spread);
      index.shape = {13};
      index.strides = {2};
      expect_same(*dev, make_op(OpId::IndexSelect, IndexParams{dim}, osh, DType::F32), {x, index}, DType::F32, osh);
    }
  }
}

TEST(VulkanIndex, ScatterAddMatchesCpuBitForBit) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  // Many collisions (values from a small range), f32 sums in index order.
  const Shape xs{5, 6, 4}, ish{9, 6, 3};
  for (int dim = 0; dim < 3; ++dim) {
    Shape is = ish;
    if (dim != 0) is[0] = 5;
    const HostArg x = floats(xs, {1, 0, 2}, 5, 0);
    HostArg src = strided<float>(DType::F32, is, {2, 1, 0}, 1, 64,
                                 [](int64_t i) { return 1.0f / static_cast<float>(i + 3); });
    auto v = ids(is[0] * is[1] * is[2], xs[static_cast<size_t>(dim)], 21u + static_cast<uint32_t>(dim));
    for (DType it : {DType::I64, DType::I32}) {
      HostArg index = it == DType::I64 ? indices<int64_t>(it, is, v) : indices<int32_t>(it, is, v);
      expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{dim}, xs, DType::F32), {x, index, src}, DType::F32, xs);
    }
  }
  // The embedding backward: zeros [V, D] (broadcast scalar) += rows of src at ids.
  const int64_t V = 11, D = 7, N = 40;
  HostArg zeros = contiguous(DType::F32, {1, 1}, std::vector<float>{0.0f});
  zeros.shape = {V, D};
  zeros.strides = {0, 0};
  HostArg index = indices<int64_t>(DType::I64, {N, 1}, ids(N, V, 5));
  index.shape = {N, D};
  index.strides = {1, 0};
  HostArg src = strided<float>(DType::F32, {N, D}, {0, 1}, 0, 0, [](int64_t i) { return std::sin(float(i)) * 3.0f; });
  expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{0}, {V, D}, DType::F32), {zeros, index, src}, DType::F32,
              {V, D});
  // Whole rows both ways (N <= 32: the per-element kernel; more: the bucket path): heavy
  // repeats, rows no id names, i32 ids, a transposed 3-D src, f32 and f64.
  for (int64_t rows : {int64_t{9}, int64_t{300}}) {
    for (DType t : {DType::F32, DType::F64}) {
      const Shape os{13, 3, 5}, ss{rows, 3, 5};
      HostArg x3 = t == DType::F32 ? strided<float>(t, os, {2, 0, 1}, 2, 0, [](int64_t i) { return float(i) * 0.25f; })
                                   : strided<double>(t, os, {2, 0, 1}, 2, 0, [](int64_t i) { return double(i) / 3; });
      HostArg s3 = t == DType::F32
                       ? strided<float>(t, ss, {1, 2, 0}, 0, 64, [](int64_t i) { return 1.0f / float(i % 89 + 1); })
                       : strided<double>(t, ss, {1, 2, 0}, 0, 64, [](int64_t i) { return 1.0 / double(i % 89 + 1); });
      std::vector<int64_t> rid = ids(rows, 7, 17);  // ids 0..6 of 13 rows: repeats, and empty rows
      HostArg i3 = indices<int32_t>(DType::I32, {rows, 1, 1}, rid);
      i3.shape = ss;
      i3.strides = {1, 0, 0};
      const int64_t before = Context::get(device_under_test())->stream().stats().dispatches;
      expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{0}, os, t), {x3, i3, s3}, t, os);
      const int64_t dispatches = Context::get(device_under_test())->stream().stats().dispatches - before;
      EXPECT_EQ(dispatches, rows > 32 ? 6 : 1) << "the bucket path is 6 dispatches (zero, count, scan, place, sort, sum)";
    }
  }
  // Rank 5: the params (9 + 5 * rank words) outgrow the 128 push-constant bytes and go in a buffer.
  {
    const Shape xs5{3, 2, 4, 2, 3}, is5{3, 2, 5, 2, 2};
    const HostArg x5 = floats(xs5, {4, 3, 2, 1, 0}, 1, 0);
    HostArg s5 = floats(is5, {0, 1, 2, 3, 4}, 0, 64);
    HostArg i5 = indices<int64_t>(DType::I64, is5, ids(3 * 2 * 5 * 2 * 2, 4, 8));
    expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{2}, xs5, DType::F32), {x5, i5, s5}, DType::F32, xs5);
    expect_same(*dev, make_op(OpId::Gather, IndexParams{2}, is5, DType::F32), {x5, i5}, DType::F32, is5);
  }
  // f16/bf16: each partial sum rounded to the dtype, as the CPU stores it (both paths).
  for (DType t : {DType::F16, DType::BF16}) {
    const auto& f = dev->info().features;
    if (std::find(f.begin(), f.end(), "f16") == f.end()) break;
    for (int64_t rows : {int64_t{9}, int64_t{100}}) {
      auto bits = [t](int64_t i) {
        // Values of mixed magnitude (sums that round), as the dtype's bit patterns.
        const float v = std::sin(float(i)) * (i % 5 == 0 ? 300.0f : 1.0f);
        uint16_t b = 0;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        b = t == DType::BF16 ? static_cast<uint16_t>(u >> 16) : 0;
        if (t == DType::F16) {
          // A plain f16 encoding of small numbers: sign, exponent 10..20, mantissa from i.
          b = static_cast<uint16_t>((i % 2 ? 0x8000 : 0) | ((10 + i % 11) << 10) | ((i * 37) & 0x3ff));
        }
        return b;
      };
      HostArg x16 = strided<uint16_t>(t, {6, 4}, {1, 0}, 1, 0, bits);
      HostArg s16 = strided<uint16_t>(t, {rows, 4}, {0, 1}, 0, 0, [&](int64_t i) { return bits(i + 1000); });
      HostArg i16 = indices<int64_t>(DType::I64, {rows, 1}, ids(rows, 6, 4));
      i16.shape = {rows, 4};
      i16.strides = {1, 0};
      expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{0}, {6, 4}, t), {x16, i16, s16}, t, {6, 4});
    }
  }
  // Integer payloads (i64 sums with carries across the low word, i32 wrapping as the CPU).
  HostArg xi = strided<int64_t>(DType::I64, {4, 3}, {0, 1}, 0, 0, [](int64_t i) { return (i + 1) * 0xFFFFFFF0LL; });
  HostArg si = strided<int64_t>(DType::I64, {6, 3}, {1, 0}, 0, 0, [](int64_t i) { return -(i + 5) * 0x1000000FLL; });
  HostArg ii = indices<int32_t>(DType::I32, {6, 3}, ids(18, 4, 9));
  expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{0}, {4, 3}, DType::I64), {xi, ii, si}, DType::I64, {4, 3});
  HostArg x32 = strided<int32_t>(DType::I32, {4, 3}, {0, 1}, 0, 0, [](int64_t i) { return int32_t(i * 0x3FFFFFFF); });
  HostArg s32 = strided<int32_t>(DType::I32, {6, 3}, {0, 1}, 0, 0, [](int64_t i) { return int32_t(i * 0x7FFFFFF); });
  expect_same(*dev, make_op(OpId::ScatterAdd, IndexParams{0}, {4, 3}, DType::I32), {x32, ii, s32}, DType::I32, {4, 3});
}

TEST(VulkanIndex, OneHotMatchesCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType it : {DType::I64, DType::I32}) {
    auto v = ids(15, 7, 2);
    HostArg x = it == DType::I64 ? indices<int64_t>(it, {3, 5}, v) : indices<int32_t>(it, {3, 5}, v);
    x.strides = {1, 3};  // a transposed view of the same values
    expect_same(*dev, make_op(OpId::OneHot, OneHotParams{7}, {3, 5, 7}, DType::I64), {x}, DType::I64, {3, 5, 7});
  }
}

// An out-of-range index raises the CPU's error (op, value, range, the caller's line) at the
// synchronize after the launch, and the device keeps working afterwards.
TEST(VulkanIndex, OutOfRangeIndexRaisesTheCpuErrorAtSync) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const HostArg x = floats({4, 5}, {0, 1}, 0, 0);
  for (int64_t bad : {int64_t{-1}, int64_t{5}, int64_t{1} << 40, -(int64_t{1} << 33)}) {
    std::vector<int64_t> v{0, 1, 2, 3, 4, 0, 1, 2};
    v[5] = bad;
    for (DType it : {DType::I64, DType::I32}) {
      if (it == DType::I32 && (bad > INT32_MAX || bad < INT32_MIN)) continue;
      HostArg index = it == DType::I64 ? indices<int64_t>(it, {2, 4}, v) : indices<int32_t>(it, {2, 4}, v);
      const KernelOp g = make_op(OpId::Gather, IndexParams{1}, {2, 4}, DType::F32);
      const std::string want = error_of(cpu(), g, {x, index}, DType::F32, {2, 4});
      EXPECT_NE(want.find("index " + std::to_string(bad) + " is out of range for dim 1 of size 5"), std::string::npos)
          << want;
      EXPECT_EQ(error_of(*dev, g, {x, index}, DType::F32, {2, 4}), want);

      HostArg flat = index;
      flat.shape = {8};
      flat.strides = {1};
      KernelOp s = make_op(OpId::IndexSelect, IndexParams{1}, {4, 8}, DType::F32);
      EXPECT_EQ(error_of(*dev, s, {x, flat}, DType::F32, {4, 8}), error_of(cpu(), s, {x, flat}, DType::F32, {4, 8}));
      s.name = "embedding";  // a composite reports as itself
      const std::string emb = error_of(*dev, s, {x, flat}, DType::F32, {4, 8});
      EXPECT_EQ(emb, error_of(cpu(), s, {x, flat}, DType::F32, {4, 8}));
      EXPECT_NE(emb.find("embedding"), std::string::npos) << emb;

      HostArg src = floats({2, 4}, {0, 1}, 0, 0);
      const KernelOp sa = make_op(OpId::ScatterAdd, IndexParams{1}, {4, 5}, DType::F32);
      EXPECT_EQ(error_of(*dev, sa, {x, index, src}, DType::F32, {4, 5}),
                error_of(cpu(), sa, {x, index, src}, DType::F32, {4, 5}));
      const KernelOp oh = make_op(OpId::OneHot, OneHotParams{5}, {2, 4, 5}, DType::I64);
      EXPECT_EQ(error_of(*dev, oh, {index}, DType::I64, {2, 4, 5}), error_of(cpu(), oh, {index}, DType::I64, {2, 4, 5}));
    }
  }
  // The bucket path of whole-row scatters (more than 32 rows) reports too.
  {
    std::vector<int64_t> many = ids(40, 4, 3);
    many[33] = 4;
    HostArg rows = indices<int64_t>(DType::I64, {40, 1}, many);
    rows.shape = {40, 5};
    rows.strides = {1, 0};
    HostArg src = floats({40, 5}, {0, 1}, 0, 0);
    const KernelOp sa = make_op(OpId::ScatterAdd, IndexParams{0}, {4, 5}, DType::F32);
    const std::string want = error_of(cpu(), sa, {x, rows, src}, DType::F32, {4, 5});
    EXPECT_NE(want.find("index 4 is out of range for dim 0 of size 4"), std::string::npos) << want;
    EXPECT_EQ(error_of(*dev, sa, {x, rows, src}, DType::F32, {4, 5}), want);
  }
  // Afterwards the flag is clear: a good kernel runs without an error.
  HostArg good = indices<int64_t>(DType::I64, {2, 4}, {0, 1, 2, 3, 4, 0, 1, 2});
  expect_same(*dev, make_op(OpId::Gather, IndexParams{1}, {2, 4}, DType::F32), {x, good}, DType::F32, {2, 4});
}

// A recorded kernel (alk::compile's replays) reports a bad index at the synchronize after
// each replay that met one, and not after replays whose indices are fine.
TEST(VulkanIndex, ReplayedKernelReportsBadIndices) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  Kernel k;
  k.node = make_op(OpId::Gather, IndexParams{0}, {3}, DType::F32);
  k.op = OpId::Gather;
  k.inputs.push_back(upload_arg(*dev, floats({4}, {0}, 0, 0)));
  std::vector<int64_t> good{0, 3, 1}, bad{0, 4, 1};
  k.inputs.push_back(upload_arg(*dev, indices<int64_t>(DType::I64, {3}, good)));
  k.output = KernelArg{dev->allocate(12), 0, DType::F32, {3}, {1}, 0};
  auto rec = dev->record({k});
  EXPECT_NO_THROW(dev->synchronize());  // recorded, not run yet: nothing to report, nothing to wait for
  dev->replay(*rec);
  EXPECT_NO_THROW(dev->synchronize());
  dev->upload(*k.inputs[1].buffer, 0, bad.data(), 24);
  dev->replay(*rec);
  try {
    dev->synchronize();
    ADD_FAILURE() << "expected the replay's bad index to raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "gather");
    EXPECT_NE(e.detail().find("index 4 is out of range for dim 0 of size 4"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), k.node.loc.line());
  }
  dev->upload(*k.inputs[1].buffer, 0, good.data(), 24);
  dev->replay(*rec);
  EXPECT_NO_THROW(dev->synchronize());
}

}  // namespace
}  // namespace alk::vk::testing
#endif
