// Losses against float64 references: cross_entropy (ignore_index, label smoothing with
// PyTorch's formula, [N, C] and [B, T, C]), mse_loss, binary_cross_entropy_with_logits
// (stable at |x| = 100), their gradients by finite differences, and their errors.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "alk/nn.h"
#include "error_expect.h"
#include "ops/ops.h"
#include "testing.h"

namespace alk {
namespace {

std::vector<double> random_vec(size_t n, unsigned seed, double scale = 2.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = u(rng);
  return v;
}

// PyTorch: per row l = (1 - eps) * (-logp[t]) + eps * mean_c(-logp[c]); mean over non-ignored rows.
double ce_reference(const std::vector<double>& logits, const std::vector<int64_t>& targets, size_t C,
                    int64_t ignore = -100, double eps = 0) {
  double total = 0, count = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore) continue;
    double mx = -INFINITY;
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, logits[r * C + c]);
    double se = 0;
    for (size_t c = 0; c < C; ++c) se += std::exp(logits[r * C + c] - mx);
    const double lse = mx + std::log(se);
    double smooth = 0;
    for (size_t c = 0; c < C; ++c) smooth += (lse - logits[r * C + c]) / static_cast<double>(C);
    const double nll = lse - logits[r * C + static_cast<size_t>(targets[r])];
    total += (1 - eps) * nll + eps * smooth;
    count += 1;
  }
  return total / count;
}

TEST(Loss, CrossEntropy2dMatchesReference) {
  const size_t N = 6, C = 5;
  auto lv = random_vec(N * C, 1, 4.0);
  std::vector<int64_t> tv{0, 4, 2, 2, 1, 3};
  Tensor logits = tensor(lv, {6, 5});
  Tensor t = tensor(tv, {6});
  Tensor loss = nn::cross_entropy(logits, t);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_EQ(loss.dtype(), DType::F64);
  EXPECT_NEAR(loss.item(), ce_reference(lv, tv, C), 1e-12);
  // i32 targets are accepted too.
  EXPECT_NEAR(nn::cross_entropy(logits, t.to(DType::I32)).item(), ce_reference(lv, tv, C), 1e-12);
  // f32 logits: close to the f64 value.
  EXPECT_NEAR(nn::cross_entropy(logits.to(DType::F32), t).item(), ce_reference(lv, tv, C), 1e-5);
}

TEST(Loss, CrossEntropyLargeLogitsAreStable) {
  std::vector<double> lv{1000, 0, -1000, 500, 501, 499};
  std::vector<int64_t> tv{1, 0};
  double got = nn::cross_entropy(tensor(lv, {2, 3}), tensor(tv, {2})).item();
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, ce_reference(lv, tv, 3), 1e-9);
  float got32 = static_cast<float>(
      nn::cross_entropy(tensor(lv, {2, 3}).to(DType::F32), tensor(tv, {2})).item());
  EXPECT_NEAR(got32, ce_reference(lv, tv, 3), 1e-2);
}

TEST(Loss, CrossEntropy3dMatchesReference) {
  const size_t B = 2, T = 3, C = 4;
  auto lv = random_vec(B * T * C, 2, 3.0);
  std::vector<int64_t> tv{3, 0, 1, 1, 2, 3};
  Tensor loss = nn::cross_entropy(tensor(lv, {2, 3, 4}), tensor(tv, {2, 3}));
  EXPECT_NEAR(loss.item(), ce_reference(lv, tv, C), 1e-12);
}

TEST(Loss, CrossEntropyIgnoreIndexExcludesRowsFromTheMean) {
  const size_t C = 4;
  auto lv = random_vec(6 * C, 3, 3.0);
  std::vector<int64_t> tv{3, -100, 1, -100, 2, 0};
  Tensor logits = tensor(lv, {6, 4});
  double got = nn::cross_entropy(logits, tensor(tv, {6})).item();
  EXPECT_NEAR(got, ce_reference(lv, tv, C), 1e-12);
  // Not the mean over all 6 rows.
  EXPECT_GT(std::fabs(got - ce_reference(lv, tv, C) * 4.0 / 6.0), 1e-3);
  // A custom ignore index that is also a valid class: those rows are dropped.
  std::vector<int64_t> tv2{3, 2, 1, 2, 2, 0};
  EXPECT_NEAR(nn::cross_entropy(logits, tensor(tv2, {6}), 2).item(), ce_reference(lv, tv2, C, 2), 1e-12);
  // [B, T, C] with ignored positions.
  EXPECT_NEAR(nn::cross_entropy(tensor(lv, {2, 3, 4}), tensor(tv, {2, 3})).item(), ce_reference(lv, tv, C), 1e-12);
  // Ignored rows get no gradient.
  Tensor lg = tensor(lv, {6, 4}).requires_grad_();
  nn::cross_entropy(lg, tensor(tv, {6})).backward();
  auto g = lg.grad().to_vector<double>();
  for (size_t r : {1u, 3u})
    for (size_t c = 0; c < C; ++c) EXPECT_EQ(g[r * C + c], 0.0) << r;
  // Each kept row's gradient is (softmax - onehot) / kept.
  for (size_t r : {0u, 2u, 4u, 5u}) {
    double mx = -INFINITY, se = 0;
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, lv[r * C + c]);
    for (size_t c = 0; c < C; ++c) se += std::exp(lv[r * C + c] - mx);
    for (size_t c = 0; c < C; ++c) {
      double p = std::exp(lv[r * C + c] - mx) / se;
      double want = (p - (static_cast<int64_t>(c) == tv[r] ? 1.0 : 0.0)) / 4.0;
      EXPECT_NEAR(g[r * C + c], want, 1e-12);
    }
  }
}

TEST(Loss, CrossEntropyLabelSmoothingPyTorchFormula) {
  const size_t C = 5;
  auto lv = random_vec(4 * C, 4, 3.0);
  std::vector<int64_t> tv{4, 0, -100, 2};
  for (double eps : {0.1, 0.3, 1.0}) {
    double got = nn::cross_entropy(tensor(lv, {4, 5}), tensor(tv, {4}), -100, eps).item();
    EXPECT_NEAR(got, ce_reference(lv, tv, C, -100, eps), 1e-12) << eps;
  }
  // Smoothing changes the value.
  EXPECT_GT(std::fabs(ce_reference(lv, tv, C, -100, 0.1) - ce_reference(lv, tv, C)), 1e-3);
}

TEST(Loss, CrossEntropyGradcheck) {
  std::mt19937 rng(5);
  Tensor logits = testing::f64_tensor({4, 3}, Domain::Any, rng).requires_grad_();
  Tensor t = tensor(std::vector<int64_t>{2, 0, -100, 1}, {4});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], t); }, {logits});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], t, -100, 0.2); },
                     {logits});
  Tensor l3 = testing::f64_tensor({2, 2, 3}, Domain::Any, rng).requires_grad_();
  Tensor t3 = tensor(std::vector<int64_t>{0, 2, 1, 1}, {2, 2});
  testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], t3, 1, 0.1); }, {l3});
}

TEST(Loss, CrossEntropyErrors) {
  Tensor logits = zeros({3, 4});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string m = message([&] { nn::cross_entropy(logits, zeros({3})); });  // f32 targets
  EXPECT_NE(m.find("cross_entropy"), std::string::npos) << m;
  EXPECT_NE(m.find("f32"), std::string::npos) << m;
  m = message([&] { nn::cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2, 3}, {4})); });
  EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  EXPECT_ALK_ERROR(nn::cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2}, {3, 1})), "cross_entropy", "[3, 1]", "[3]");
  EXPECT_ALK_ERROR(nn::cross_entropy(logits.to(DType::I64), tensor(std::vector<int64_t>{0, 1, 2}, {3})), "cross_entropy", "i64", "[3, 4]");
  EXPECT_ALK_ERROR(nn::cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2}, {3}), -100, 1.5), "cross_entropy", "label_smoothing", "1.5");
  EXPECT_ALK_ERROR(nn::cross_entropy(logits, Tensor()), "cross_entropy", "undefined");
  // Targets outside [0, C) (other than ignore_index) are refused, not read out of bounds.
  for (int64_t bad : {int64_t{4}, int64_t{-1}, int64_t{1} << 40}) {
    m = message([&] { nn::cross_entropy(logits, tensor(std::vector<int64_t>{0, bad, 1}, {3})).item(); });
    EXPECT_NE(m.find(std::to_string(bad)), std::string::npos) << bad << ": " << m;
  }
}

// The fused kernel behind nn::cross_entropy on devices with the "cross_entropy" feature
// (ops.h cross_entropy_rows), run here on the CPU's reference kernel: per-row (nll, lse)
// against float64, gradients through both columns (the fused backward and, under
// create_graph, the composed one), and bad targets.
TEST(Loss, FusedCrossEntropyRowsMatchReference) {
  const size_t N = 5, C = 7;
  const auto lv = random_vec(N * C, 3, 6.0);
  const std::vector<int64_t> tv{6, -100, 0, 3, 3};
  const Tensor logits = tensor(lv, {5, 7}), t = tensor(tv, {5});
  const Tensor rows = cross_entropy_rows(logits, t, -100, Loc::current());
  ASSERT_EQ(rows.shape(), (Shape{5, 2}));
  EXPECT_EQ(rows.dtype(), DType::F64);
  const std::vector<double> got = rows.to_vector<double>();
  for (size_t r = 0; r < N; ++r) {
    double mx = -INFINITY, se = 0;
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, lv[r * C + c]);
    for (size_t c = 0; c < C; ++c) se += std::exp(lv[r * C + c] - mx);
    const double lse = mx + std::log(se);
    const double nll = tv[r] == -100 ? 0.0 : lse - lv[r * C + static_cast<size_t>(tv[r])];
    EXPECT_NEAR(got[2 * r], nll, 1e-12) << r;
    EXPECT_NEAR(got[2 * r + 1], lse, 1e-12) << r;
  }
  // bf16 logits are read as they are; the rows come out in f32.
  const Tensor half = cross_entropy_rows(logits.to(DType::BF16), t, -100, Loc::current());
  EXPECT_EQ(half.dtype(), DType::F32);
  const std::vector<double> half_rows = half.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(half_rows[i], got[i], 0.05 + 0.02 * std::abs(got[i])) << i;

  std::mt19937 rng(9);
  const Tensor weights = testing::f64_tensor({5, 2}, Domain::Any, rng);  // weighs both columns
  auto f = [&](const std::vector<Tensor>& in) { return sum(cross_entropy_rows(in[0], t, -100, Loc::current()) * weights); };
  testing::gradcheck(f, {testing::f64_tensor({5, 7}, Domain::Any, rng).requires_grad_()});
  // The composed backward (create_graph) equals the fused one.
  const Tensor x = testing::f64_tensor({5, 7}, Domain::Any, rng).requires_grad_();
  const std::vector<double> fused = grad({f({x})}, {x})[0].to_vector<double>();
  const std::vector<double> composed = grad({f({x})}, {x}, {}, true)[0].to_vector<double>();
  ASSERT_EQ(fused.size(), composed.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], composed[i], 1e-12) << i;

  std::string m;
  try {
    cross_entropy_rows(logits, tensor(std::vector<int64_t>{0, 1, 7, 2, 3}, {5}), -100, Loc::current()).to_vector<double>();
  } catch (const Error& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("cross_entropy"), std::string::npos) << m;
  EXPECT_NE(m.find("7"), std::string::npos) << m;
  EXPECT_ALK_ERROR(cross_entropy_rows(logits, tensor(std::vector<int64_t>{0, 1}, {2}), -100, Loc::current()), "cross_entropy", "[5, 7]", "[2]");
}

TEST(Loss, MseMatchesReferenceAndGradcheck) {
  auto a = random_vec(12, 6), b = random_vec(12, 7);
  double ref = 0;
  for (size_t i = 0; i < 12; ++i) ref += (a[i] - b[i]) * (a[i] - b[i]) / 12;
  EXPECT_NEAR(nn::mse_loss(tensor(a, {3, 4}), tensor(b, {3, 4})).item(), ref, 1e-13);
  Tensor x = tensor(a, {3, 4}).requires_grad_(), y = tensor(b, {3, 4}).requires_grad_();
  testing::gradcheck([](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1]); }, {x, y});
  // Analytic gradient: 2 (x - y) / N.
  nn::mse_loss(x, y).backward();
  auto g = x.grad().to_vector<double>();
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(g[i], 2 * (a[i] - b[i]) / 12, 1e-14);
}

double bce_reference(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // -[y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], written stably.
    double log_sig = -std::log1p(std::exp(-std::fabs(x[i]))) + std::min(x[i], 0.0);   // log sigmoid(x)
    double log_1m = -std::log1p(std::exp(-std::fabs(x[i]))) + std::min(-x[i], 0.0);   // log sigmoid(-x)
    s += -(y[i] * log_sig + (1 - y[i]) * log_1m);
  }
  return s / static_cast<double>(x.size());
}

TEST(Loss, BceWithLogitsMatchesReference) {
  auto x = random_vec(10, 8, 5.0);
  std::vector<double> y{0, 1, 1, 0, 0.3, 0.7, 1, 0, 0.5, 1};
  EXPECT_NEAR(nn::binary_cross_entropy_with_logits(tensor(x, {2, 5}), tensor(y, {2, 5})).item(),
              bce_reference(x, y), 1e-12);
}

TEST(Loss, BceWithLogitsStableAtLargeMagnitude) {
  std::vector<double> x{100, 100, -100, -100};
  std::vector<double> y{1, 0, 0, 1};
  // Per element: ~0, 100, ~0, 100.
  const double ref = bce_reference(x, y);
  EXPECT_NEAR(ref, 50.0, 1e-12);
  for (DType dt : {DType::F64, DType::F32}) {
    Tensor xt = tensor(x, {4}).to(dt).requires_grad_();
    Tensor loss = nn::binary_cross_entropy_with_logits(xt, tensor(y, {4}).to(dt));
    double v = loss.item();
    EXPECT_TRUE(std::isfinite(v)) << dtype_name(dt);
    EXPECT_NEAR(v, ref, dt == DType::F64 ? 1e-12 : 1e-4) << dtype_name(dt);
    loss.backward();
    // d/dx = (sigmoid(x) - y) / N: 0, 1/4, 0, -1/4.
    auto g = xt.grad().to_vector<double>();
    const std::vector<double> want{0, 0.25, 0, -0.25};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(std::isfinite(g[i])) << i;
      EXPECT_NEAR(g[i], want[i], 1e-6) << dtype_name(dt) << " " << i;
    }
  }
}

TEST(Loss, BceWithLogitsGradcheck) {
  std::mt19937 rng(9);
  Tensor x = testing::f64_tensor({2, 3}, Domain::NonZero, rng).requires_grad_();
  Tensor y = tensor(std::vector<double>{0, 1, 0.25, 0.5, 1, 0.9}, {2, 3}).requires_grad_();
  testing::gradcheck(
      [](const std::vector<Tensor>& in) { return nn::binary_cross_entropy_with_logits(in[0], in[1]); }, {x, y});
}

}  // namespace
}  // namespace alk
