// The divergences from PyTorch 1.13 found by comparing the two (issue 14), each pinned down:
// NaN through max/min in constant folding (lazy) as in eager mode, prod's gradient with
// zeros, maximum/minimum ties, clip_grad_norm of f64 gradients, and the caller's file:line
// in errors raised inside Module::forward.
#include <cmath>
#include <vector>

#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/expr.h"
#include "graph/graph.h"
#include "testing.h"

namespace alk {
namespace {

bool all_nan(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isnan(v)) return false;
  return true;
}

// full() is a constant: the scheduler folds these expressions at build time.
TEST(PyTorchSemantics, NanThroughMaxMinWhenFolded) {
  EXPECT_TRUE(all_nan(relu(full({3}, NAN))));
  EXPECT_TRUE(all_nan(maximum(full({3}, NAN), 1.0)));
  EXPECT_TRUE(all_nan(maximum(1.0, full({3}, NAN))));
  EXPECT_TRUE(all_nan(minimum(full({3}, NAN), 1.0)));
  EXPECT_TRUE(all_nan(minimum(-1.0, full({3}, NAN, DType::F64))));
  EXPECT_TRUE(all_nan(clamp(full({3}, NAN), 0.0, 1.0)));
  EXPECT_EQ(relu(full({2}, -2.0)).to_vector<double>(), (std::vector<double>{0, 0}));
  // The folding itself, and the same expressions over a realized tensor (the evaluator).
  EXPECT_TRUE(std::isnan(expr::eval_scalar(expr::Fn::Max, expr::Type::F64, NAN, 1)));
  EXPECT_TRUE(std::isnan(expr::eval_scalar(expr::Fn::Max, expr::Type::F64, 1, NAN)));
  EXPECT_TRUE(std::isnan(expr::eval_scalar(expr::Fn::Min, expr::Type::F32, NAN, 1)));
  EXPECT_TRUE(std::isnan(expr::eval_scalar(expr::Fn::Min, expr::Type::F32, 1, NAN)));
  Tensor x = full({3}, NAN).contiguous();
  x.realize();
  EXPECT_TRUE(all_nan(relu(x)));
  EXPECT_TRUE(all_nan(clamp(x, 0.0, 1.0)));
}

TEST(PyTorchSemantics, NanThroughMaxMinEager) {
  const bool was = eager_mode();
  set_eager_mode(true);
  EXPECT_TRUE(all_nan(relu(full({3}, NAN))));
  EXPECT_TRUE(all_nan(maximum(full({3}, NAN), 1.0)));
  set_eager_mode(was);
}

TEST(PyTorchSemantics, ProdGradientWithZeros) {
  Tensor x = tensor(std::vector<double>{2, 0, 3}, {3}).requires_grad_();
  prod(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 6, 0}));
  // Per row: no zero, one zero, two zeros.
  Tensor y = tensor(std::vector<double>{2, 4, 0.5, 2, 0, 3, 0, 5, 0}, {3, 3}).requires_grad_();
  sum(prod(y, {1})).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{2, 1, 8, 0, 6, 0, 0, 0, 0}));
}

TEST(PyTorchSemantics, MaximumMinimumTiesSplitTheGradient) {
  Tensor a = tensor(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor b = tensor(std::vector<double>{2, 2, 1}, {3}).requires_grad_();
  sum(maximum(a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 0.5, 0}));
  Tensor c = tensor(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor d = tensor(std::vector<double>{2, 2, 1}, {3}).requires_grad_();
  sum(minimum(c, d)).backward();
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{1, 0.5, 0}));
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 1}));
}

TEST(PyTorchSemantics, ClipGradNormOfF64GradientsInF64) {
  Tensor p = tensor(std::vector<double>{0, 0, 0}, {3}).requires_grad_();
  // Gradients 1/3, 1/7, 1/11: their f32 squares would round the norm.
  sum(p * tensor(std::vector<double>{1.0 / 3, 1.0 / 7, 1.0 / 11}, {3})).backward();
  const double want = std::sqrt(1.0 / 9 + 1.0 / 49 + 1.0 / 121);
  const double norm = optim::clip_grad_norm({p}, 0.1);
  EXPECT_NEAR(norm, want, 1e-15);
  const double coef = 0.1 / (want + 1e-6);
  std::vector<double> g = p.grad().to_vector<double>();
  EXPECT_NEAR(g[0], coef / 3, 1e-16);
  EXPECT_NEAR(g[2], coef / 11, 1e-16);
  EXPECT_EQ(p.grad().dtype(), DType::F64);
}

TEST(PyTorchSemantics, ModuleForwardReportsTheCallersLine) {
  nn::Embedding emb(5, 3);
  const int line = __LINE__ + 2;
  try {
    emb(tensor(std::vector<int64_t>{1, 7}, {2})).realize();
    ADD_FAILURE() << "an id out of range was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.file(), __FILE__) << e.what();
    EXPECT_EQ(static_cast<int>(e.line()), line) << e.what();
  }
  nn::Linear lin(4, 2);
  const int line2 = __LINE__ + 2;
  try {
    lin.forward(zeros({3, 5}));
    ADD_FAILURE() << "a shape mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.file(), __FILE__) << e.what();
    EXPECT_EQ(static_cast<int>(e.line()), line2) << e.what();
  }
}

}  // namespace
}  // namespace alk
