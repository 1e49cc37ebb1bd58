// depthwise_conv2d (the CPU's direct kernel, conv_impl.inc) against a naive float64
// reference: odd sizes, rows wider than one 32-column block, strides, dilations, padding,
// non-contiguous inputs and weights, f64/f32/f16, on every ISA path this CPU has; conv2d
// with groups == channels routes to it; its gradients by central differences. Also the
// blocked im2col path of the same CPU op (grouped f32 convolutions).
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "backend/cpu/isa.h"
#include "graph/schedule.h"
#include "testing.h"

namespace alk {
namespace {

using testing::f64_tensor;
using testing::gradcheck;

std::vector<double> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

int64_t osize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// y[n][c][oy][ox] = sum_ij w[c][i][j] x[n][c][oy*sh - ph + i*dh][ox*sw - pw + j*dw] (0 outside).
std::vector<double> ref_depthwise(const std::vector<double>& x, const std::vector<double>& w, int64_t N, int64_t C,
                                  int64_t H, int64_t W, const Conv2dGeometry& g) {
  const int64_t OH = osize(H, g.kh, g.stride_h, g.pad_h, g.dilation_h);
  const int64_t OW = osize(W, g.kw, g.stride_w, g.pad_w, g.dilation_w);
  std::vector<double> out(static_cast<size_t>(N * C * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = 0;
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t iy = oy * g.stride_h - g.pad_h + i * g.dilation_h;
              const int64_t ix = ox * g.stride_w - g.pad_w + j * g.dilation_w;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              acc += w[static_cast<size_t>((c * g.kh + i) * g.kw + j)] *
                     x[static_cast<size_t>(((n * C + c) * H + iy) * W + ix)];
            }
          out[static_cast<size_t>(((n * C + c) * OH + oy) * OW + ox)] = acc;
        }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

template <class F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const std::string& s : needles)
      EXPECT_NE(what.find(s), std::string::npos) << "missing '" << s << "' in " << what;
    EXPECT_NE(what.find("test_depthwise_conv.cpp"), std::string::npos) << what;  // the caller's line
  }
}

struct Case {
  int64_t N, C, H, W;
  Conv2dGeometry g;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {2, 3, 6, 7, {3, 3, 1, 1, 1, 1, 1, 1}},      // 3x3 same
      {1, 5, 9, 70, {5, 5, 1, 1, 2, 2, 1, 1}},     // 5x5 same, rows of 2 blocks + a tail
      {1, 4, 11, 67, {1, 25, 1, 1, 0, 12, 1, 1}},  // 1x25 (PaddleOCR's rec)
      {2, 3, 10, 45, {3, 3, 2, 2, 1, 1, 1, 1}},    // stride 2
      {1, 2, 13, 40, {3, 5, 3, 2, 0, 2, 2, 3}},    // stride (3, 2), dilation (2, 3)
      {1, 3, 7, 33, {2, 4, 1, 3, 1, 3, 1, 2}},     // stride 3, even kernel, pad > kernel/2
      {3, 1, 1, 1, {1, 1, 1, 1, 0, 0, 1, 1}},      // 1x1 image
      {1, 2, 4, 5, {3, 3, 1, 1, 2, 2, 1, 1}},      // more padding than image
  };
  return c;
}

struct RestoreIsa {
  cpu::Isa was = cpu::isa();
  ~RestoreIsa() { cpu::set_isa(was); }
};

TEST(DepthwiseConv, MatchesNaiveReferenceOnEveryIsa) {
  RestoreIsa restore;
  std::mt19937 rng(21);
  for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa(isa);
    for (const Case& k : cases()) {
      const Conv2dGeometry& g = k.g;
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + to_string({k.N, k.C, k.H, k.W}) + " k " +
                   std::to_string(g.kh) + "x" + std::to_string(g.kw) + " s " + std::to_string(g.stride_h) + "," +
                   std::to_string(g.stride_w));
      std::vector<double> xv = random_values(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
      std::vector<double> wv = random_values(static_cast<size_t>(k.C * g.kh * g.kw), rng);
      Tensor x = tensor(xv, {k.N, k.C, k.H, k.W}), w = tensor(wv, {k.C, 1, g.kh, g.kw});
      const std::vector<double> want = ref_depthwise(xv, wv, k.N, k.C, k.H, k.W, g);
      Tensor y = depthwise_conv2d(x, w, g);
      EXPECT_EQ(y.shape(), (Shape{k.N, k.C, osize(k.H, g.kh, g.stride_h, g.pad_h, g.dilation_h),
                                  osize(k.W, g.kw, g.stride_w, g.pad_w, g.dilation_w)}));
      EXPECT_EQ(y.dtype(), DType::F64);
      expect_close(y.to_vector<double>(), want, 1e-12);
      Tensor yf = depthwise_conv2d(x.to(DType::F32), w.to(DType::F32), g);
      EXPECT_EQ(yf.dtype(), DType::F32);
      expect_close(yf.to_vector<double>(), want, 1e-4);
      // f16 in and out: the inputs rounded to f16, sums in f32, the output rounded once.
      Tensor xh = x.to(DType::F16), wh = w.to(DType::F16);
      Tensor yh = depthwise_conv2d(xh, wh, g);
      EXPECT_EQ(yh.dtype(), DType::F16);
      const std::vector<double> want_h =
          ref_depthwise(xh.to_vector<double>(), wh.to_vector<double>(), k.N, k.C, k.H, k.W, g);
      std::vector<double> got_h = yh.to_vector<double>();
      for (size_t i = 0; i < got_h.size(); ++i) ASSERT_NEAR(got_h[i], want_h[i], 2e-3 * (1 + std::abs(want_h[i])));
    }
  }
}

TEST(DepthwiseConv, StridedInputsAndWeights) {
  std::mt19937 rng(22);
  // x is the [N, C, H, W] view of an [N, H, W, C] tensor; w a permuted [C, 1, kh, kw] view.
  const int64_t N = 2, C = 3, H = 8, W = 37;
  std::vector<double> nhwc = random_values(static_cast<size_t>(N * H * W * C), rng);
  Tensor x = tensor(nhwc, {N, H, W, C}).permute({0, 3, 1, 2});
  std::vector<double> wt = random_values(static_cast<size_t>(C * 3 * 5), rng);
  Tensor w = tensor(wt, {1, 5, 3, C}).permute({3, 0, 2, 1});  // [C, 1, 3, 5]
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  const Conv2dGeometry g{3, 5, 1, 2, 1, 2, 2, 1};
  const std::vector<double> want =
      ref_depthwise(x.contiguous().to_vector<double>(), w.contiguous().to_vector<double>(), N, C, H, W, g);
  expect_close(depthwise_conv2d(x, w, g).to_vector<double>(), want, 1e-12);
  expect_close(depthwise_conv2d(x.to(DType::F32), w.to(DType::F32), g).to_vector<double>(), want, 1e-4);
}

TEST(DepthwiseConv, Conv2dWithGroupsEqualToChannels) {
  std::mt19937 rng(23);
  const int64_t N = 2, C = 4, H = 9, W = 41;
  std::vector<double> xv = random_values(static_cast<size_t>(N * C * H * W), rng);
  std::vector<double> wv = random_values(static_cast<size_t>(C * 9), rng);
  std::vector<double> bv = random_values(static_cast<size_t>(C), rng);
  Tensor y = conv2d(tensor(xv, {N, C, H, W}), tensor(wv, {C, 1, 3, 3}), tensor(bv, {C}), 2, 1, 2, C);
  const Conv2dGeometry g{3, 3, 2, 2, 1, 1, 2, 2};
  std::vector<double> want = ref_depthwise(xv, wv, N, C, H, W, g);
  const int64_t L = static_cast<int64_t>(want.size()) / (N * C);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bv[(static_cast<int64_t>(i) / L) % C];
  expect_close(y.to_vector<double>(), want, 1e-12);
}

// The CPU's grouped f32 convolution unfolds blocks of output columns (about 1 MB of unfolded
// input each): an image with several blocks and a partial last one, groups 2, stride 2 and
// dilation, against the float64 path (which unfolds the whole input).
TEST(DepthwiseConv, BlockedGroupedConvolutionMatchesFloat64) {
  std::mt19937 rng(25);
  const int64_t N = 2, C = 16, H = 61, W = 67, O = 6;
  for (int64_t stride : {1, 2}) {
    std::vector<double> xv = random_values(static_cast<size_t>(N * C * H * W), rng);
    std::vector<double> wv = random_values(static_cast<size_t>(O * (C / 2) * 9), rng);
    std::vector<double> bv = random_values(static_cast<size_t>(O), rng);
    Tensor x = tensor(xv, {N, C, H, W}), w = tensor(wv, {O, C / 2, 3, 3}), b = tensor(bv, {O});
    Tensor want = conv2d(x, w, b, stride, 1, 2, 2);
    Tensor got = conv2d(x.to(DType::F32), w.to(DType::F32), b.to(DType::F32), stride, 1, 2, 2);
    ASSERT_EQ(got.shape(), want.shape());
    expect_close(got.to_vector<double>(), want.to_vector<double>(), 1e-4);
  }
}

// The CPU's direct f32 convolution for few output channels (groups 1, O <= 48, conv_impl.inc's
// dense_row) on every ISA path this CPU has, against the float64 path: output channels around
// the register blocks (1, 5, 6, 13, 24, 48), odd widths with a partial column block, rows wider
// than two blocks, strides 2 and 3 (the phase layout), dilation, padding larger than the
// kernel's half, 1xK and Kx1 kernels, a bias or none, a batch, and a non-contiguous input.
TEST(DepthwiseConv, DenseFewOutputChannelsMatchFloat64OnEveryIsa) {
  RestoreIsa restore;
  std::mt19937 rng(26);
  struct DenseCase {
    int64_t N, C, H, W, O, kh, kw, stride, pad, dilation;
    bool bias, permuted;
  };
  const DenseCase dense_cases[] = {
      {1, 96, 10, 10, 24, 3, 3, 1, 1, 1, true, false}, {2, 5, 9, 71, 13, 3, 3, 1, 1, 1, true, false},
      {1, 3, 7, 33, 1, 5, 5, 1, 2, 1, false, false},   {1, 4, 12, 40, 6, 3, 3, 1, 2, 2, true, false},
      {1, 7, 5, 17, 5, 1, 5, 1, 0, 1, true, true},     {1, 6, 11, 9, 48, 5, 1, 1, 3, 1, false, false},
      {1, 2, 3, 3, 24, 3, 3, 1, 3, 1, true, false},    {1, 3, 48, 97, 8, 3, 3, 2, 1, 1, true, false},
      {2, 3, 13, 70, 16, 3, 3, 2, 1, 1, false, true},  {1, 5, 14, 41, 7, 3, 3, 3, 2, 2, true, false},
  };
  for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa(isa);
    for (const DenseCase& k : dense_cases) {
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + to_string({k.N, k.C, k.H, k.W}) + " O " +
                   std::to_string(k.O) + " k " + std::to_string(k.kh) + "x" + std::to_string(k.kw) + " s " +
                   std::to_string(k.stride));
      std::vector<double> xv = random_values(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
      std::vector<double> wv = random_values(static_cast<size_t>(k.O * k.C * k.kh * k.kw), rng);
      std::vector<double> bv = random_values(static_cast<size_t>(k.O), rng);
      Tensor x = k.permuted ? tensor(xv, {k.N, k.H, k.W, k.C}).permute({0, 3, 1, 2}) : tensor(xv, {k.N, k.C, k.H, k.W});
      Tensor w = tensor(wv, {k.O, k.C, k.kh, k.kw}), b = k.bias ? tensor(bv, {k.O}) : Tensor();
      Tensor want = conv2d(x, w, b, k.stride, k.pad, k.dilation, 1);
      Tensor got = conv2d(x.to(DType::F32), w.to(DType::F32), k.bias ? b.to(DType::F32) : Tensor(), k.stride, k.pad,
                          k.dilation, 1);
      ASSERT_EQ(got.shape(), want.shape());
      expect_close(got.to_vector<double>(), want.to_vector<double>(), 1e-4 * std::sqrt(double(k.C * k.kh * k.kw)));
    }
  }
}

// 1x1 convolutions over >= 32 positions (ops/conv.cpp routes them to the CPU's Conv2d op:
// kernels_conv.cpp pointwise_direct, dense_run over the input planes) on every ISA path this CPU
// has, against the float64 path (a matmul): output channels around the register blocks, a last
// partial block of positions of one vector or less and of more, a batch, a bias or none, and a
// non-contiguous input (which takes the blocked im2col path).
TEST(DepthwiseConv, PointwiseMatchesFloat64OnEveryIsa) {
  RestoreIsa restore;
  std::mt19937 rng(27);
  struct PointwiseCase {
    int64_t N, C, H, W, O;
    bool bias, permuted;
  };
  const PointwiseCase cases[] = {
      {1, 32, 2, 96, 200, true, false}, {1, 16, 3, 37, 88, true, false}, {2, 7, 5, 9, 5, false, false},
      {1, 3, 6, 11, 50, true, false},   {2, 200, 2, 17, 13, true, false}, {1, 9, 4, 8, 12, true, true},
  };
  for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa(isa);
    for (const PointwiseCase& k : cases) {
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + to_string({k.N, k.C, k.H, k.W}) + " O " + std::to_string(k.O));
      std::vector<double> xv = random_values(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
      std::vector<double> wv = random_values(static_cast<size_t>(k.O * k.C), rng);
      std::vector<double> bv = random_values(static_cast<size_t>(k.O), rng);
      Tensor x = k.permuted ? tensor(xv, {k.N, k.H, k.W, k.C}).permute({0, 3, 1, 2}) : tensor(xv, {k.N, k.C, k.H, k.W});
      Tensor w = tensor(wv, {k.O, k.C, 1, 1}), b = k.bias ? tensor(bv, {k.O}) : Tensor();
      Tensor want = conv2d(x, w, b, 1, 0, 1, 1);
      Tensor got = conv2d(x.to(DType::F32), w.to(DType::F32), k.bias ? b.to(DType::F32) : Tensor(), 1, 0, 1, 1);
      ASSERT_EQ(got.shape(), want.shape());
      expect_close(got.to_vector<double>(), want.to_vector<double>(), 1e-4 * std::sqrt(double(k.C)));
    }
  }
}

// The relu / hardswish / residual epilogues the CPU's Conv2d kernel applies itself (kernels_conv.cpp
// conv2d_epilogue, part by part while in cache) against the same expression as its own kernel
// over the stored convolution (also followed by a constant scale and shift): bitwise equal (the
// same f32 operations), for each kind of
// convolution (depthwise, dense few-output, 1x1, blocked im2col) on every ISA; an epilogue it
// does not take (a sigmoid) still matches.
TEST(DepthwiseConv, ConvEpiloguesMatchSeparateKernelsOnEveryIsa) {
  RestoreIsa restore;
  std::mt19937 rng(28);
  struct ConvCase {
    const char* name;
    int64_t C, O, k, stride, pad, groups;
  };
  const ConvCase convs[] = {{"depthwise", 24, 24, 5, 1, 2, 24},
                            {"depthwise stride 2", 8, 8, 3, 2, 1, 8},
                            {"dense", 12, 20, 3, 1, 1, 1},
                            {"dense stride 2", 3, 16, 3, 2, 1, 1},
                            {"1x1", 20, 70, 1, 1, 0, 1},
                            {"im2col", 16, 64, 3, 1, 1, 1}};
  auto hardswish = [](const Tensor& y) { return y * minimum(maximum(y + 3.0, 0.0), 6.0) / 6.0; };
  auto relu = [](const Tensor& y) { return maximum(y, 0.0); };
  for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa(isa);
    for (const ConvCase& k : convs) {
      const int64_t N = 2, H = 7, W = 45;
      Tensor x = tensor(random_values(static_cast<size_t>(N * k.C * H * W), rng), {N, k.C, H, W}).to(DType::F32);
      Tensor w = tensor(random_values(static_cast<size_t>(k.O * (k.C / k.groups) * k.k * k.k), rng),
                        {k.O, k.C / k.groups, k.k, k.k})
                     .to(DType::F32);
      Tensor b = tensor(random_values(static_cast<size_t>(k.O), rng), {k.O}).to(DType::F32);
      realize({x, w, b});
      Tensor stored = conv2d(x, w, b, k.stride, k.pad, 1, k.groups);
      stored.realize();
      Tensor r = tensor(random_values(static_cast<size_t>(stored.numel()), rng), stored.shape()).to(DType::F32);
      r.realize();
      const std::function<Tensor(const Tensor&)> epilogues[] = {
          relu, hardswish, [&](const Tensor& y) { return y + r; }, [&](const Tensor& y) { return relu(y + r); },
          [&](const Tensor& y) { return hardswish(r + y); }, [](const Tensor& y) { return sigmoid(y); },
          // PP-LCNet's learnable affine block after the activation
          [&](const Tensor& y) { return 0.37 * hardswish(y) + (-0.2); },
          [&](const Tensor& y) { return relu(y + r) * 1.5 + 0.25; }};
      for (size_t e = 0; e < std::size(epilogues); ++e) {
        SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " " + k.name + " epilogue " + std::to_string(e));
        const std::vector<float> want = epilogues[e](stored).to_vector<float>();
        Tensor fused = epilogues[e](conv2d(x, w, b, k.stride, k.pad, 1, k.groups));
        fused.realize();
        EXPECT_EQ(last_schedule_stats().kernels, 1);  // the epilogue ran in the Conv2d kernel
        const std::vector<float> got = fused.to_vector<float>();
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(got, want);
      }
    }
  }
}

// fold2d of f32 windows that do not overlap (ConvTranspose with stride = kernel, nearest
// upsampling) stores each tap in place; the float64 path sums into a plane: same values.
TEST(DepthwiseConv, DisjointFoldMatchesTheSummingPath) {
  std::mt19937 rng(26);
  struct FoldCase {
    int64_t h, w;
    Conv2dGeometry g;
  };
  const FoldCase fold_cases[] = {
      {8, 10, {2, 2, 2, 2, 0, 0, 1, 1}},  // windows tile the image
      {9, 11, {2, 3, 3, 4, 1, 1, 1, 1}},  // gaps between windows, padding
      {10, 9, {2, 2, 3, 3, 0, 1, 2, 1}},  // dilation 2 inside stride 3
      {12, 12, {4, 4, 4, 4, 0, 0, 1, 1}},
  };
  for (const FoldCase& f : fold_cases) {
    const int64_t oh = osize(f.h, f.g.kh, f.g.stride_h, f.g.pad_h, f.g.dilation_h);
    const int64_t ow = osize(f.w, f.g.kw, f.g.stride_w, f.g.pad_w, f.g.dilation_w);
    std::vector<double> v = random_values(static_cast<size_t>(2 * 3 * f.g.kh * f.g.kw * oh * ow), rng);
    Tensor cols = tensor(v, {2, 3 * f.g.kh * f.g.kw, oh * ow});
    const std::vector<double> want = fold2d(cols, f.h, f.w, f.g).to_vector<double>();
    const std::vector<double> got = fold2d(cols.to(DType::F32), f.h, f.w, f.g).to_vector<double>();
    expect_close(got, want, 1e-6);
  }
}

TEST(DepthwiseConv, GradcheckAndErrors) {
  std::mt19937 rng(24);
  auto leaf = [](Tensor t) { return t.requires_grad_(); };
  gradcheck(
      [](auto& v) {
        return depthwise_conv2d(v[0], v[1], Conv2dGeometry{2, 3, 1, 2, 1, 1, 2, 1});
      },
      {leaf(f64_tensor({2, 2, 5, 7}, Domain::Any, rng)), leaf(f64_tensor({2, 1, 2, 3}, Domain::Any, rng))});
  Tensor x = zeros({1, 3, 5, 5}, DType::F32);
  expect_error(
      [&] {
        depthwise_conv2d(x, zeros({3, 2, 3, 3}), Conv2dGeometry{3, 3});
      },
      {"depthwise_conv2d", "weight must have shape [3, 1, 3, 3]", "[3, 2, 3, 3]"});
  expect_error(
      [&] {
        depthwise_conv2d(x, zeros({3, 1, 7, 7}), Conv2dGeometry{7, 7});
      },
      {"depthwise_conv2d", "output size"});
  expect_error(
      [&] {
        depthwise_conv2d(zeros({3, 5, 5}), zeros({3, 1, 3, 3}), Conv2dGeometry{3, 3});
      },
      {"depthwise_conv2d", "input must be 4-D"});
}

}  // namespace
}  // namespace alk
