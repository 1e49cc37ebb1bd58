// Vulkan unfold (im2col) and fold (col2im) against the CPU kernels: identical bytes for
// strides, paddings, dilations, odd sizes and strided inputs; and the round trip
// fold(unfold(x)) kept on the device, equal to the CPU's.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

struct Geometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};
const Geometry kGeometries[] = {
    {3, 3, 1, 1, 1, 1, 1, 1},  // same-size 3x3
    {2, 3, 2, 1, 0, 2, 1, 1},  // strided, asymmetric
    {3, 2, 2, 3, 1, 0, 2, 1},  // dilated, stride > kernel
    {1, 1, 1, 1, 0, 0, 1, 1},  // pointwise
};

void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << what << ": byte " << i;
}

TEST(VulkanConv, UnfoldAndFoldMatchCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const bool f64 = [&] {
    const auto& f = dev->info().features;
    return std::find(f.begin(), f.end(), "f64") != f.end();
  }();
  const int64_t N = 2, C = 3, H = 7, W = 6;
  for (DType t : {DType::F32, DType::F64}) {
    if (t == DType::F64 && !f64) continue;
    for (const Geometry& g : kGeometries) {
      const int64_t OH = out_size(H, g.kh, g.sh, g.ph, g.dh), OW = out_size(W, g.kw, g.sw, g.pw, g.dw);
      const UnfoldParams p{g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, H, W, -0.5};
      // x [N, C, H, W] stored as [H, N, W, C] (a transposed view) at an offset.
      HostArg x = t == DType::F32
                      ? strided<float>(t, {N, C, H, W}, {2, 0, 3, 1}, 5, 64, [](int64_t i) { return float(i) * 0.1f - 3; })
                      : strided<double>(t, {N, C, H, W}, {2, 0, 3, 1}, 5, 64, [](int64_t i) { return double(i) / 7 - 3; });
      const Shape cs{N, C * g.kh * g.kw, OH * OW};
      const KernelOp unfold = make_op(OpId::Unfold, p, cs, t);
      expect_same_bytes(run_kernel(*dev, unfold, {x}, t, cs), run_kernel(get_device("cpu"), unfold, {x}, t, cs), "unfold");
      // fold of values whose sums round differently in another order.
      HostArg cols = t == DType::F32 ? strided<float>(t, cs, {0, 2, 1}, 3, 0,
                                                      [](int64_t i) { return 1.0f / float(i % 97 + 1) + 1e3f * float(i % 3); })
                                     : strided<double>(t, cs, {0, 2, 1}, 3, 0,
                                                       [](int64_t i) { return 1.0 / double(i % 97 + 1) + 1e9 * double(i % 3); });
      const KernelOp fold = make_op(OpId::Fold, p, {N, C, H, W}, t);
      expect_same_bytes(run_kernel(*dev, fold, {cols}, t, {N, C, H, W}),
                        run_kernel(get_device("cpu"), fold, {cols}, t, {N, C, H, W}), "fold");
    }
  }
  // fold of f16/bf16: float sums rounded once at the end, as the CPU's.
  const auto& f = dev->info().features;
  if (std::find(f.begin(), f.end(), "f16") != f.end()) {
    for (DType t : {DType::F16, DType::BF16}) {
      const Geometry& g = kGeometries[2];
      const int64_t OH = out_size(H, g.kh, g.sh, g.ph, g.dh), OW = out_size(W, g.kw, g.sw, g.pw, g.dw);
      const UnfoldParams p{g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, H, W, 0.0};
      const Shape cs{N, C * g.kh * g.kw, OH * OW};
      HostArg cols = strided<uint16_t>(t, cs, {0, 2, 1}, 3, 0, [t](int64_t i) {
        return static_cast<uint16_t>(t == DType::F16 ? ((i % 2 ? 0x8000 : 0) | ((12 + i % 7) << 10) | ((i * 53) & 0x3ff))
                                                     : (0x3F00 + (i * 29) % 0x200) | (i % 3 ? 0 : 0x8000));
      });
      const KernelOp fold = make_op(OpId::Fold, p, {N, C, H, W}, t);
      expect_same_bytes(run_kernel(*dev, fold, {cols}, t, {N, C, H, W}),
                        run_kernel(get_device("cpu"), fold, {cols}, t, {N, C, H, W}), "fold 16-bit");
    }
  }
  // unfold copies any dtype's bits: i64 with an integer pad value.
  HostArg xi = strided<int64_t>(DType::I64, {1, 2, 5, 4}, {0, 1, 2, 3}, 0, 0, [](int64_t i) { return i * 0x100000001LL; });
  const UnfoldParams p{2, 2, 1, 1, 1, 1, 1, 1, 5, 4, 9};
  const Shape cs{1, 8, 6 * 5};
  const KernelOp unfold = make_op(OpId::Unfold, p, cs, DType::I64);
  expect_same_bytes(run_kernel(*dev, unfold, {xi}, DType::I64, cs), run_kernel(get_device("cpu"), unfold, {xi}, DType::I64, cs),
                    "unfold i64");
}

// unfold then fold with the buffers left on each device (fold(unfold(x)) = x times the
// number of windows covering each pixel).
TEST(VulkanConv, RoundTripStaysOnDevice) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t N = 2, C = 2, H = 9, W = 5;
  const UnfoldParams p{3, 2, 2, 1, 1, 0, 1, 2, H, W, 0.0};
  const int64_t OH = out_size(H, 3, 2, 1, 1), OW = out_size(W, 2, 1, 0, 2);
  const Shape cs{N, C * 6, OH * OW}, xs{N, C, H, W};
  HostArg x = strided<float>(DType::F32, xs, {0, 1, 2, 3}, 0, 0, [](int64_t i) { return std::cos(float(i)); });
  std::vector<std::vector<uint8_t>> results;
  for (Device* d : {&get_device("cpu"), dev}) {
    Kernel u;
    u.node = make_op(OpId::Unfold, p, cs, DType::F32);
    u.op = OpId::Unfold;
    u.inputs.push_back(upload_arg(*d, x));
    u.output = KernelArg{d->allocate(static_cast<size_t>(N * C * 6 * OH * OW) * 4), 0, DType::F32, cs,
                         contiguous_strides(cs), 0};
    Kernel f;
    f.node = make_op(OpId::Fold, p, xs, DType::F32);
    f.op = OpId::Fold;
    f.inputs.push_back(u.output);
    f.output = KernelArg{d->allocate(static_cast<size_t>(N * C * H * W) * 4), 0, DType::F32, xs, contiguous_strides(xs), 0};
    d->launch(*d->prepare(u), u);
    d->launch(*d->prepare(f), f);
    std::vector<uint8_t> back(static_cast<size_t>(N * C * H * W) * 4);
    d->download(*f.output.buffer, 0, back.data(), back.size());
    results.push_back(back);
  }
  expect_same_bytes(results[1], results[0], "fold(unfold(x))");
}

}  // namespace
}  // namespace alk::vk::testing
#endif
