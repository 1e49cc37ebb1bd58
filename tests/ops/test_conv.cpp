// unfold2d / fold2d / conv2d / max_pool2d / avg_pool2d against naive float64 references,
// their gradients by central differences, and their argument checks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "alk/kernel.h"  // numel
#include "testing.h"

namespace alk {
namespace {

using testing::f64_tensor;
using testing::gradcheck;

Tensor leaf(Tensor t) { return t.requires_grad_(); }

std::vector<double> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

Conv2dGeometry geo(int64_t kh, int64_t kw, int64_t sh = 1, int64_t sw = 1, int64_t ph = 0, int64_t pw = 0,
                   int64_t dh = 1, int64_t dw = 1) {
  return Conv2dGeometry{kh, kw, sh, sw, ph, pw, dh, dw};
}

int64_t osize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// Naive unfold: out[n][c*kh*kw + i*kw + j][oy*OW + ox] = x[n][c][oy*sh - ph + i*dh][ox*sw - pw + j*dw].
std::vector<double> ref_unfold(const std::vector<double>& x, int64_t N, int64_t C, int64_t H, int64_t W,
                               const Conv2dGeometry& g, double pad_value) {
  int64_t OH = osize(H, g.kh, g.stride_h, g.pad_h, g.dilation_h), OW = osize(W, g.kw, g.stride_w, g.pad_w, g.dilation_w);
  int64_t K = g.kh * g.kw, L = OH * OW;
  std::vector<double> out(static_cast<size_t>(N * C * K * L));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              int64_t iy = oy * g.stride_h - g.pad_h + i * g.dilation_h;
              int64_t ix = ox * g.stride_w - g.pad_w + j * g.dilation_w;
              double v = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[static_cast<size_t>(((n * C + c) * H + iy) * W + ix)]
                                                                 : pad_value;
              out[static_cast<size_t>(((n * C + c) * K + i * g.kw + j) * L + oy * OW + ox)] = v;
            }
  return out;
}

// Naive fold: the adjoint of ref_unfold.
std::vector<double> ref_fold(const std::vector<double>& cols, int64_t N, int64_t C, int64_t H, int64_t W,
                             const Conv2dGeometry& g) {
  int64_t OH = osize(H, g.kh, g.stride_h, g.pad_h, g.dilation_h), OW = osize(W, g.kw, g.stride_w, g.pad_w, g.dilation_w);
  int64_t K = g.kh * g.kw, L = OH * OW;
  std::vector<double> out(static_cast<size_t>(N * C * H * W), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              int64_t iy = oy * g.stride_h - g.pad_h + i * g.dilation_h;
              int64_t ix = ox * g.stride_w - g.pad_w + j * g.dilation_w;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              out[static_cast<size_t>(((n * C + c) * H + iy) * W + ix)] +=
                  cols[static_cast<size_t>(((n * C + c) * K + i * g.kw + j) * L + oy * OW + ox)];
            }
  return out;
}

// Naive direct convolution in f64.
std::vector<double> ref_conv(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>* b,
                             int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                             int64_t stride, int64_t pad, int64_t dil, int64_t groups) {
  int64_t OH = osize(H, kh, stride, pad, dil), OW = osize(W, kw, stride, pad, dil);
  int64_t Cg = C / groups, Og = O / groups;
  std::vector<double> out(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = b ? (*b)[static_cast<size_t>(o)] : 0.0;
          int64_t gi = o / Og;
          for (int64_t cc = 0; cc < Cg; ++cc)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t iy = oy * stride - pad + i * dil, ix = ox * stride - pad + j * dil;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                int64_t c = gi * Cg + cc;
                acc += x[static_cast<size_t>(((n * C + c) * H + iy) * W + ix)] *
                       w[static_cast<size_t>(((o * Cg + cc) * kh + i) * kw + j)];
              }
          out[static_cast<size_t>(((n * O + o) * OH + oy) * OW + ox)] = acc;
        }
  return out;
}

// Naive pooling (count_include_pad for avg; padding never wins max).
std::vector<double> ref_pool(const std::vector<double>& x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                             int64_t s, int64_t p, bool is_max) {
  int64_t OH = osize(H, k, s, p, 1), OW = osize(W, k, s, p, 1);
  std::vector<double> out(static_cast<size_t>(N * C * OH * OW));
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            int64_t iy = oy * s - p + i, ix = ox * s - p + j;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            double v = x[static_cast<size_t>((nc * H + iy) * W + ix)];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        out[static_cast<size_t>((nc * OH + oy) * OW + ox)] = is_max ? acc : acc / static_cast<double>(k * k);
      }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
}

struct Geom {
  int64_t N, C, H, W;
  Conv2dGeometry g;
};

std::vector<Geom> geometries() {
  return {
      {2, 3, 5, 6, geo(3, 3)},                    // plain 3x3
      {1, 2, 7, 8, geo(3, 3, 2, 2)},              // stride 2
      {2, 2, 5, 5, geo(3, 3, 1, 1, 1, 1)},        // padding 1
      {1, 3, 9, 8, geo(3, 3, 1, 1, 0, 0, 2, 2)},  // dilation 2
      {2, 2, 6, 7, geo(2, 3, 1, 2, 1, 0, 1, 1)},  // non-square kernel, mixed stride/padding
      {1, 2, 7, 6, geo(3, 1, 2, 1, 2, 1, 2, 3)},  // everything asymmetric
      {2, 4, 3, 5, geo(1, 1)},                    // 1x1
      {1, 1, 4, 4, geo(4, 4)},                    // a single window
  };
}

TEST(Unfold, MatchesNaiveReference) {
  std::mt19937 rng(1);
  for (const Geom& ge : geometries()) {
    SCOPED_TRACE(to_string({ge.N, ge.C, ge.H, ge.W}) + " k " + std::to_string(ge.g.kh) + "x" + std::to_string(ge.g.kw));
    std::vector<double> xv = random_values(static_cast<size_t>(ge.N * ge.C * ge.H * ge.W), rng);
    Tensor x = tensor(xv, {ge.N, ge.C, ge.H, ge.W});
    for (double pv : {0.0, -3.5}) {
      Tensor y = unfold2d(x, ge.g, pv);
      int64_t OH = osize(ge.H, ge.g.kh, ge.g.stride_h, ge.g.pad_h, ge.g.dilation_h);
      int64_t OW = osize(ge.W, ge.g.kw, ge.g.stride_w, ge.g.pad_w, ge.g.dilation_w);
      EXPECT_EQ(y.shape(), (Shape{ge.N, ge.C * ge.g.kh * ge.g.kw, OH * OW}));
      EXPECT_EQ(y.dtype(), DType::F64);
      expect_close(y.to_vector<double>(), ref_unfold(xv, ge.N, ge.C, ge.H, ge.W, ge.g, pv), 0);
    }
  }
}

TEST(Unfold, StridedInputAndNarrowDtypes) {
  std::mt19937 rng(2);
  // A permuted (non-contiguous) input: x is the [N, C, H, W] view of a [N, H, W, C] tensor.
  std::vector<double> nhwc = random_values(2 * 5 * 6 * 3, rng);
  Tensor x = tensor(nhwc, {2, 5, 6, 3}).permute({0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  std::vector<double> xv = x.contiguous().to_vector<double>();
  Conv2dGeometry g = geo(3, 2, 2, 1, 1, 1, 1, 2);
  expect_close(unfold2d(x, g).to_vector<double>(), ref_unfold(xv, 2, 3, 5, 6, g, 0), 0);
  // f32, f16 and bf16 move values exactly (the values are already representable).
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    Tensor xt = x.to(t);
    std::vector<double> xr = xt.contiguous().to_vector<double>();
    Tensor y = unfold2d(xt, g, -1.0);
    EXPECT_EQ(y.dtype(), t);
    expect_close(y.to_vector<double>(), ref_unfold(xr, 2, 3, 5, 6, g, -1.0), 0);
  }
}

TEST(Fold, MatchesNaiveReference) {
  std::mt19937 rng(3);
  for (const Geom& ge : geometries()) {
    SCOPED_TRACE(to_string({ge.N, ge.C, ge.H, ge.W}) + " k " + std::to_string(ge.g.kh) + "x" + std::to_string(ge.g.kw));
    int64_t OH = osize(ge.H, ge.g.kh, ge.g.stride_h, ge.g.pad_h, ge.g.dilation_h);
    int64_t OW = osize(ge.W, ge.g.kw, ge.g.stride_w, ge.g.pad_w, ge.g.dilation_w);
    Shape cs{ge.N, ge.C * ge.g.kh * ge.g.kw, OH * OW};
    std::vector<double> cv = random_values(static_cast<size_t>(alk::numel(cs)), rng);
    Tensor y = fold2d(tensor(cv, cs), ge.H, ge.W, ge.g);
    EXPECT_EQ(y.shape(), (Shape{ge.N, ge.C, ge.H, ge.W}));
    expect_close(y.to_vector<double>(), ref_fold(cv, ge.N, ge.C, ge.H, ge.W, ge.g));
    // f32 through a transposed (strided) input.
    Tensor ct = tensor(cv, {cs[0], cs[2], cs[1]}).to(DType::F32).transpose(1, 2);  // different values, same shape
    std::vector<double> ctv = ct.contiguous().to_vector<double>();
    Tensor yf = fold2d(ct, ge.H, ge.W, ge.g);
    EXPECT_EQ(yf.dtype(), DType::F32);
    expect_close(yf.to_vector<double>(), ref_fold(ctv, ge.N, ge.C, ge.H, ge.W, ge.g), 1e-5);
  }
}

TEST(Fold, IsTheAdjointOfUnfold) {
  // <unfold(x), c> == <x, fold(c)> for every geometry.
  std::mt19937 rng(4);
  for (const Geom& ge : geometries()) {
    Tensor x = f64_tensor({ge.N, ge.C, ge.H, ge.W}, Domain::Any, rng);
    Tensor u = unfold2d(x, ge.g);
    Tensor c = f64_tensor(u.shape(), Domain::Any, rng);
    double lhs = sum(u * c).item(), rhs = sum(x * fold2d(c, ge.H, ge.W, ge.g)).item();
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::fabs(lhs)));
  }
}

TEST(Fold, DeterministicAcrossRuns) {
  std::mt19937 rng(5);
  Tensor c = tensor(random_values(8 * 16 * 9 * 36, rng), {8, 16 * 9, 36}).to(DType::F32);
  Conv2dGeometry g = geo(3, 3, 1, 1, 1, 1);
  std::vector<float> a = fold2d(c, 6, 6, g).to_vector<float>();
  for (int rep = 0; rep < 3; ++rep) EXPECT_EQ(fold2d(c, 6, 6, g).to_vector<float>(), a);
}

struct ConvCase {
  int64_t N, C, H, W, O, kh, kw, stride, pad, dil, groups;
  bool bias;
};

TEST(Conv, MatchesDirectConvolution) {
  std::mt19937 rng(6);
  const ConvCase cases[] = {
      {2, 3, 6, 7, 4, 3, 3, 1, 0, 1, 1, false}, {2, 3, 6, 7, 4, 3, 3, 1, 1, 1, 1, true},
      {1, 4, 9, 8, 6, 3, 2, 2, 1, 1, 2, true},  {2, 4, 7, 7, 2, 3, 3, 1, 2, 2, 2, false},
      {2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 4, true},  // depthwise
      {1, 3, 5, 5, 6, 3, 3, 2, 1, 1, 3, false},  // depthwise with multiplier 2
      {2, 5, 4, 3, 3, 1, 1, 1, 0, 1, 1, true},  // 1x1
  };
  for (const ConvCase& k : cases) {
    SCOPED_TRACE("C " + std::to_string(k.C) + " O " + std::to_string(k.O) + " groups " + std::to_string(k.groups) +
                 " stride " + std::to_string(k.stride) + " pad " + std::to_string(k.pad) + " dil " +
                 std::to_string(k.dil));
    std::vector<double> xv = random_values(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
    std::vector<double> wv = random_values(static_cast<size_t>(k.O * (k.C / k.groups) * k.kh * k.kw), rng);
    std::vector<double> bv = random_values(static_cast<size_t>(k.O), rng);
    Tensor x = tensor(xv, {k.N, k.C, k.H, k.W}), w = tensor(wv, {k.O, k.C / k.groups, k.kh, k.kw});
    Tensor b = k.bias ? tensor(bv, {k.O}) : Tensor();
    Tensor y = conv2d(x, w, b, k.stride, k.pad, k.dil, k.groups);
    int64_t OH = osize(k.H, k.kh, k.stride, k.pad, k.dil), OW = osize(k.W, k.kw, k.stride, k.pad, k.dil);
    EXPECT_EQ(y.shape(), (Shape{k.N, k.O, OH, OW}));
    EXPECT_EQ(y.dtype(), DType::F64);
    std::vector<double> want = ref_conv(xv, wv, k.bias ? &bv : nullptr, k.N, k.C, k.H, k.W, k.O, k.kh, k.kw,
                                        k.stride, k.pad, k.dil, k.groups);
    expect_close(y.to_vector<double>(), want, 1e-12);
    // f32 agrees to f32 accuracy.
    Tensor yf = conv2d(x.to(DType::F32), w.to(DType::F32), k.bias ? b.to(DType::F32) : Tensor(), k.stride, k.pad,
                       k.dil, k.groups);
    EXPECT_EQ(yf.dtype(), DType::F32);
    expect_close(yf.to_vector<double>(), want, 1e-4);
  }
}

TEST(Pool, MaxAndAvgMatchNaive) {
  std::mt19937 rng(7);
  struct P { int64_t N, C, H, W, k, s, p; };
  const P cases[] = {{2, 3, 6, 6, 2, -1, 0}, {1, 2, 7, 5, 3, 2, 1}, {2, 2, 5, 5, 3, 1, 1},
                     {1, 3, 8, 9, 4, 3, 2},  {1, 1, 3, 3, 3, -1, 0}};
  for (const P& c : cases) {
    SCOPED_TRACE("k " + std::to_string(c.k) + " s " + std::to_string(c.s) + " p " + std::to_string(c.p));
    std::vector<double> xv = random_values(static_cast<size_t>(c.N * c.C * c.H * c.W), rng);
    for (double& v : xv) v -= 5;  // all negative: padding must not win the max (and zero-pads count in avg)
    Tensor x = tensor(xv, {c.N, c.C, c.H, c.W});
    int64_t s = c.s == -1 ? c.k : c.s;
    Tensor mx = max_pool2d(x, c.k, c.s, c.p), av = avg_pool2d(x, c.k, c.s, c.p);
    Shape want_shape{c.N, c.C, osize(c.H, c.k, s, c.p, 1), osize(c.W, c.k, s, c.p, 1)};
    EXPECT_EQ(mx.shape(), want_shape);
    EXPECT_EQ(av.shape(), want_shape);
    expect_close(mx.to_vector<double>(), ref_pool(xv, c.N, c.C, c.H, c.W, c.k, s, c.p, true), 0);
    expect_close(av.to_vector<double>(), ref_pool(xv, c.N, c.C, c.H, c.W, c.k, s, c.p, false), 1e-12);
    Tensor mf = max_pool2d(x.to(DType::F32), c.k, c.s, c.p);
    EXPECT_EQ(mf.dtype(), DType::F32);
    expect_close(mf.to_vector<double>(), ref_pool(xv, c.N, c.C, c.H, c.W, c.k, s, c.p, true), 1e-5);
  }
}

TEST(Pool, MaxGradientTiesGoToTheFirstMaximum) {
  // One 2x2 window of equal values: the first (row-major) gets all of it, as in PyTorch.
  Tensor x = leaf(tensor(std::vector<double>{1, 1, 1, 1}, {1, 1, 2, 2}));
  sum(max_pool2d(x, 2)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 0, 0}));
  // ReLU zeros tie in the second window; a NaN wins its window (forward and gradient).
  Tensor y = leaf(tensor(std::vector<double>{0, 0, 0, NAN, 0, 0, 0, 5}, {1, 1, 2, 4}));
  Tensor out = max_pool2d(y, 2);
  std::vector<double> o = out.to_vector<double>();
  EXPECT_EQ(o[0], 0);
  EXPECT_TRUE(std::isnan(o[1]));
  sum(out).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{1, 0, 0, 1, 0, 0, 0, 0}));
}

// ---- gradients ----

// Distinct values (spaced well beyond the finite-difference step) so the max is never a tie.
Tensor distinct(Shape shape, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(alk::numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * static_cast<double>(i) - 1.0;
  std::shuffle(v.begin(), v.end(), rng);
  return tensor(v, shape);
}

TEST(Conv, Gradcheck) {
  std::mt19937 rng(8);
  gradcheck([](auto& x) { return conv2d(x[0], x[1], x[2], 1, 1); },
            {leaf(f64_tensor({2, 2, 4, 5}, Domain::Any, rng)), leaf(f64_tensor({3, 2, 3, 3}, Domain::Any, rng)),
             leaf(f64_tensor({3}, Domain::Any, rng))});
  gradcheck([](auto& x) { return conv2d(x[0], x[1], Tensor(), 2, 1, 2, 2); },
            {leaf(f64_tensor({1, 4, 6, 6}, Domain::Any, rng)), leaf(f64_tensor({4, 2, 2, 3}, Domain::Any, rng))});
  gradcheck([](auto& x) { return conv2d(x[0], x[1], x[2], 1, 0, 1, 3); },  // depthwise
            {leaf(f64_tensor({2, 3, 4, 4}, Domain::Any, rng)), leaf(f64_tensor({3, 1, 2, 2}, Domain::Any, rng)),
             leaf(f64_tensor({3}, Domain::Any, rng))});
}

TEST(Pool, Gradcheck) {
  std::mt19937 rng(9);
  gradcheck([](auto& x) { return max_pool2d(x[0], 2); }, {leaf(distinct({2, 2, 4, 4}, rng))});
  gradcheck([](auto& x) { return max_pool2d(x[0], 3, 2, 1); }, {leaf(distinct({1, 2, 5, 6}, rng))});
  gradcheck([](auto& x) { return max_pool2d(x[0], 3, 1, 1); }, {leaf(distinct({1, 1, 4, 4}, rng))});  // overlaps
  gradcheck([](auto& x) { return avg_pool2d(x[0], 2); }, {leaf(f64_tensor({2, 2, 4, 4}, Domain::Any, rng))});
  gradcheck([](auto& x) { return avg_pool2d(x[0], 3, 2, 1); }, {leaf(f64_tensor({1, 2, 5, 6}, Domain::Any, rng))});
}

TEST(Unfold, GradcheckAndDoubleBackward) {
  std::mt19937 rng(10);
  gradcheck([](auto& x) { return unfold2d(x[0], geo(2, 3, 2, 1, 1, 1, 1, 2)); },
            {leaf(f64_tensor({2, 2, 4, 5}, Domain::Any, rng))});
  gradcheck([](auto& x) { return fold2d(x[0], 4, 5, geo(2, 3, 2, 1, 1, 1, 1, 2)); },
            {leaf(f64_tensor({2, 12, 9}, Domain::Any, rng))});
  // Double backward: d/dz of sum(fold(unfold(x) * z)^2) depends on x through unfold and through fold's
  // backward (an unfold of a gradient that depends on x), so both rules must be differentiable again.
  // z is a fresh leaf per call (gradcheck passes plain tensors when it perturbs x).
  Conv2dGeometry g = geo(2, 2, 1, 2, 1, 0, 1, 1);
  Tensor z0 = f64_tensor({1, 8, 8}, Domain::Any, rng);
  gradcheck([g, z0](auto& x) {
    Tensor z = leaf(tensor(z0.to_vector<double>(), z0.shape()));
    Tensor y = fold2d(unfold2d(x[0], g) * z, 3, 4, g);
    return grad({sum(y * y)}, {z}, {}, true)[0];
  }, {leaf(f64_tensor({1, 2, 3, 4}, Domain::Any, rng))});
}

// ---- errors ----

template <class F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    for (const std::string& s : needles) EXPECT_NE(what.find(s), std::string::npos) << "missing '" << s << "' in " << what;
    EXPECT_NE(what.find("test_conv.cpp"), std::string::npos) << what;  // the caller's line
  }
}

TEST(Conv, Errors) {
  Tensor x = zeros({2, 4, 5, 5}, DType::F32), w = zeros({6, 2, 3, 3}, DType::F32);
  expect_error([&] { conv2d(zeros({4, 5, 5}), w); }, {"conv2d", "input must be 4-D", "[4, 5, 5]"});
  expect_error([&] { conv2d(x, zeros({6, 4, 3})); }, {"conv2d", "weight must be 4-D", "[6, 4, 3]"});
  expect_error([&] { conv2d(x, w); }, {"conv2d", "[6, 2, 3, 3]", "[2, 4, 5, 5]", "input channels"});
  expect_error([&] { conv2d(x, w, Tensor(), 1, 0, 1, 3); }, {"conv2d", "not divisible by groups = 3"});
  expect_error([&] { conv2d(x, zeros({5, 2, 3, 3}), Tensor(), 1, 0, 1, 2); },
               {"conv2d", "output channels 5", "not divisible by groups = 2"});
  expect_error([&] { conv2d(x, w, Tensor(), 1, 0, 1, 0); }, {"conv2d", "groups must be positive"});
  expect_error([&] { conv2d(x, w, zeros({5}), 1, 0, 1, 2); }, {"conv2d", "bias must have shape [6]", "[5]"});
  expect_error([&] { conv2d(x, w, Tensor(), 0, 0, 1, 2); }, {"conv2d", "stride (0, 0)"});
  expect_error([&] { conv2d(x, w, Tensor(), 1, -1, 1, 2); }, {"conv2d", "padding must be non-negative", "(-1, -1)"});
  expect_error([&] { conv2d(x, w, Tensor(), 1, 0, 0, 2); }, {"conv2d", "dilation (0, 0)"});
  expect_error([&] { conv2d(x, w, Tensor(), 1, 0, 3, 2); }, {"conv2d", "output size", "[2, 4, 5, 5]"});
  expect_error([&] { conv2d(x, zeros({6, 2, 6, 1}), Tensor(), 1, 0, 1, 2); }, {"conv2d", "output size would be 0"});
}

TEST(Pool, Errors) {
  Tensor x = zeros({1, 2, 4, 4});
  expect_error([&] { max_pool2d(zeros({2, 4, 4}), 2); }, {"max_pool2d", "4-D", "[2, 4, 4]"});
  expect_error([&] { avg_pool2d(x, 0); }, {"avg_pool2d", "kernel (0, 0)"});
  expect_error([&] { max_pool2d(x, 2, 0); }, {"max_pool2d", "stride (0, 0)"});
  expect_error([&] { max_pool2d(x, 2, 2, -1); }, {"max_pool2d", "padding must be non-negative"});
  expect_error([&] { avg_pool2d(x, 2, 2, 2); }, {"avg_pool2d", "at most half"});
  expect_error([&] { max_pool2d(x, 5); }, {"max_pool2d", "output size", "[1, 2, 4, 4]"});
  expect_error([&] { max_pool2d(zeros({1, 2, 4, 4}, DType::I64), 2); }, {"max_pool2d", "floating"});
}

TEST(Unfold, Errors) {
  expect_error([&] { unfold2d(zeros({3, 4, 4}), geo(2, 2)); }, {"unfold2d", "4-D", "[3, 4, 4]"});
  expect_error([&] { unfold2d(zeros({1, 1, 4, 4}), geo(2, -1)); }, {"unfold2d", "kernel (2, -1)"});
  expect_error([&] { unfold2d(zeros({1, 1, 4, 4}), geo(2, 2, 1, 1, 0, -2)); }, {"unfold2d", "padding (0, -2)"});
  expect_error([&] { unfold2d(zeros({1, 1, 4, 4}), geo(3, 3, 1, 1, 0, 0, 2, 2)); },
               {"unfold2d", "output size would be 0 x 0", "[1, 1, 4, 4]"});
}

TEST(Fold, Errors) {
  expect_error([&] { fold2d(zeros({2, 4}), 3, 3, geo(2, 2)); }, {"fold2d", "3-D", "[2, 4]"});
  expect_error([&] { fold2d(zeros({1, 6, 4}), 3, 3, geo(2, 2)); }, {"fold2d", "multiple of kh*kw = 4", "[1, 6, 4]"});
  expect_error([&] { fold2d(zeros({1, 8, 5}), 3, 3, geo(2, 2)); }, {"fold2d", "dim 2", "must be 4"});
  expect_error([&] { fold2d(zeros({1, 4, 4}), 0, 3, geo(2, 2)); }, {"fold2d", "output size must be positive"});
  expect_error([&] { fold2d(zeros({1, 4, 4}), 1, 1, geo(2, 2)); }, {"fold2d", "output size would be 0"});
}

}  // namespace
}  // namespace alk
