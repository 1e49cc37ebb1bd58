// Reverse-mode autodiff: accumulation, detach, no_grad, the functional alk::grad with
// and without create_graph (second derivatives), un-broadcasting and the error paths.
#include <cmath>

#include "error_expect.h"
#include "graph/autograd.h"
#include "testing.h"

namespace alk {
namespace {

Tensor vec(std::vector<double> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return tensor(std::move(v), {n});
}

TEST(Autograd, BackwardAccumulatesIntoLeaves) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  sum(x * x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
  sum(x * 3.0).backward();  // accumulates, like PyTorch
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

TEST(Autograd, SharedInputsSumTheirPaths) {
  Tensor x = vec({0.5, -1.0}).requires_grad_();
  Tensor y = x * x + exp(x) * x;  // d/dx = 2x + e^x (1 + x)
  sum(y).backward();
  auto g = x.grad().to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    double v = i == 0 ? 0.5 : -1.0;
    EXPECT_NEAR(g[static_cast<size_t>(i)], 2 * v + std::exp(v) * (1 + v), 1e-12);
  }
}

TEST(Autograd, BroadcastGradientsAreSummedBackToInputShape) {
  Tensor a = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = vec({10, 20, 30}).requires_grad_();
  Tensor c = tensor(std::vector<double>{2}, {1, 1}).requires_grad_();
  sum(a * b * c).backward();
  EXPECT_EQ(b.grad().shape(), (Shape{3}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{10, 14, 18}));
  EXPECT_EQ(c.grad().shape(), (Shape{1, 1}));
  EXPECT_DOUBLE_EQ(c.grad().item(), 10 + 40 + 90 + 40 + 100 + 180);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{20, 40, 60, 20, 40, 60}));
}

TEST(Autograd, DetachAndNoGradStopRecording) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  {
    NoGradGuard ng;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * x;
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(is_grad_enabled());
  Tensor z = x * d;  // d is a constant to autograd
  sum(z).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4}));
}

TEST(Autograd, FunctionalGradLeavesGradUntouched) {
  Tensor x = vec({0.3, 0.7}).requires_grad_();
  Tensor y = sum(sin(x));
  auto g = grad({y}, {x});
  EXPECT_FALSE(x.grad().defined());
  auto gv = g[0].to_vector<double>();
  EXPECT_NEAR(gv[0], std::cos(0.3), 1e-12);
  EXPECT_NEAR(gv[1], std::cos(0.7), 1e-12);
  // Gradients with respect to an intermediate tensor.
  Tensor h = x * 3.0;
  Tensor out = sum(h * h);
  auto gh = grad({out}, {h});
  EXPECT_NEAR(gh[0].to_vector<double>()[1], 2 * 2.1, 1e-12);
}

TEST(Autograd, SeedGradientForNonScalarOutputs) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * x;
  y.backward(vec({1, 0, 2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 0, 12}));
}

TEST(Autograd, SecondDerivativesThroughCreateGraph) {
  Tensor x = vec({0.5, -1.5, 2.0}).requires_grad_();
  // d2/dx2 x^3 = 6x; d2/dx2 tanh(x) = -2 tanh(x) (1 - tanh^2(x)) (tanh's backward uses y).
  Tensor y = sum(x * x * x + tanh(x));
  auto g1 = grad({y}, {x}, {}, true);
  ASSERT_TRUE(g1[0].requires_grad());
  auto g2 = grad({sum(g1[0])}, {x});
  auto v = g2[0].to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    double xi = std::vector<double>{0.5, -1.5, 2.0}[static_cast<size_t>(i)];
    double t = std::tanh(xi);
    EXPECT_NEAR(v[static_cast<size_t>(i)], 6 * xi - 2 * t * (1 - t * t), 1e-10);
  }
  // Through a template op and a broadcast: d/dw of ||d(sum(softmax(w * x)^2))/dx||^2 exists
  // and matches central differences.
  testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor xx = in[1].detach().requires_grad_();
        Tensor inner = sum(square(gelu(in[0] * xx)));
        auto gx = grad({inner}, {xx}, {}, true);
        return sum(gx[0] * gx[0]).reshape({1});
      },
      {vec({0.4, -0.8, 1.1}).requires_grad_(), vec({0.9, 0.2, -0.5})});
}

TEST(Autograd, CastAndSixteenBitGradients) {
  Tensor x = tensor(std::vector<float>{1.5f, -2.0f}, {2}).requires_grad_();
  Tensor h = x.to(DType::BF16);
  sum(h * h).backward();
  EXPECT_EQ(x.grad().dtype(), DType::F32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3.0f, -4.0f}));
}

TEST(Autograd, Errors) {
  Tensor x = vec({1, 2}).requires_grad_();
  Tensor y = x * 2.0;
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2]"), std::string::npos) << e.what();
  }
  Tensor c = vec({1, 2});
  EXPECT_ALK_ERROR(sum(c).backward(), "backward", "does not require grad", "[]");
  // Comparisons and argmax have no gradient: their results do not require grad.
  Tensor lt_result = lt(x, 1.5);
  EXPECT_FALSE(lt_result.requires_grad());
  EXPECT_FALSE(argmax(x).requires_grad());
  EXPECT_ALK_ERROR(cast(lt_result, DType::F64).backward(), "backward", "does not require grad", "[2]");
  EXPECT_ALK_ERROR(y.backward(vec({1, 2, 3})), "backward", "[3]", "[2]");
  EXPECT_ALK_ERROR(tensor(std::vector<int64_t>{1}, {1}).requires_grad_(), "requires_grad_", "i64");
  EXPECT_ALK_ERROR(y.requires_grad_(false), "requires_grad_", "leaf");  // not a leaf
  EXPECT_ALK_ERROR(grad({sum(y)}, {c}), "grad", "input 0");
}

}  // namespace
}  // namespace alk

namespace alk {
namespace {

TEST(Autograd, OpsWithoutSecondDerivativeSaySo) {
  Tensor q = randn({1, 4, 8}).requires_grad_();
  Tensor out = sum(square(scaled_dot_product_attention(q, q, q)));
  auto g = grad({out}, {q}, {}, true);
  ASSERT_TRUE(g[0].requires_grad());
  try {
    grad({sum(g[0])}, {q});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "scaled_dot_product_attention");
    EXPECT_NE(std::string(e.what()).find("second derivative"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace alk

namespace alk {
namespace {

// Double backward through a slice that ends before the dim does (slice_backward's rule).
TEST(Autograd, SecondDerivativeThroughPartialSlice) {
  Tensor x = tensor(std::vector<double>{0.5, -1.0, 2.0, 1.5, -0.5}, {5}).requires_grad_();
  Tensor y = sum(x.slice(0, 1, 3) * x.slice(0, 1, 3) * x.slice(0, 1, 3));  // x1^3 + x2^3
  auto g = grad({y}, {x}, {}, true);
  auto h = grad({sum(g[0])}, {x});  // d/dx of 3 x^2 on elements 1, 2
  EXPECT_EQ(h[0].to_vector<double>(), (std::vector<double>{0, 6 * -1.0, 6 * 2.0, 0, 0}));
}

// add hands its incoming gradient to both operands as it is (no copy kernel); each leaf
// still gets its own grad tensor, so changing one does not change the other.
TEST(Autograd, LeavesSharingAGradientGetTheirOwnTensors) {
  Tensor a = tensor(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor b = tensor(std::vector<double>{4, 5, 6}, {3}).requires_grad_();
  sum((a + b) * 2.0).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
  Tensor ga = a.grad();
  ga.assign_(ga * 10.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{20, 20, 20}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
  // grad() too; under create_graph the second one (a view of the first) keeps its history.
  auto g = grad({sum(a + b)}, {a, b});
  EXPECT_NE(g[0].impl(), g[1].impl());
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{1, 1, 1}));
  auto gg = grad({sum((a + b) * (a + b))}, {a, b}, {}, true);
  EXPECT_NE(gg[0].impl(), gg[1].impl());
  auto h = grad({sum(gg[1])}, {a});  // d/da of sum(2 (a + b)) = 2
  EXPECT_EQ(h[0].to_vector<double>(), (std::vector<double>{2, 2, 2}));
}

// A rule that folds in the gradient its input has received so far (GradFn::backward_folding,
// layer norm's on devices whose kernel adds it): it sees exactly the consumers that ran
// before it, its result replaces that sum, later consumers still add, and a rule that
// declines (an empty result) leaves the plain one to run.
TEST(Autograd, FoldingRulesReplaceTheSumSoFar) {
  for (bool decline : {false, true}) {
    SCOPED_TRACE(decline ? "declined" : "folded");
    Tensor x = vec({1, -2, 3}).requires_grad_();
    std::vector<std::vector<double>> seen;  // what the folding rule got as pending
    auto triple = [&](const Tensor& in) {
      Tensor out = in.detach() * 3.0;
      return with_grad(
          out, "triple", {in}, [](const Tensor& g) { return std::vector<Tensor>{g * 3.0}; }, 0,
          [&seen, decline](const Tensor& g, const Tensor& pending) {
            seen.push_back(pending.to_vector<double>());
            if (decline) return std::vector<Tensor>{};
            return std::vector<Tensor>{g * 3.0 + pending};
          });
    };
    // h's consumers, in the order backward reaches them: exp, triple, the product with 5.
    Tensor h = x * 2.0;
    Tensor y = sum(h * 5.0) + sum(triple(h) * vec({1, 10, 100})) + sum(exp(h));
    y.backward();
    ASSERT_EQ(seen.size(), 1u);
    const std::vector<double> hv{2, -4, 6}, w{1, 10, 100};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(seen[0][i], std::exp(hv[i]), 1e-9 * std::exp(hv[i]));  // exp's part alone
      // dy/dx = 2 (5 + 3 w + e^h)
      EXPECT_NEAR(x.grad().to_vector<double>()[i], 2 * (5 + 3 * w[i] + std::exp(hv[i])), 1e-9 * std::exp(6.0));
    }
  }
}

// The same through selects (whose gradient is an elementwise masked broadcast).
TEST(Autograd, SecondDerivativeThroughSelect) {
  Tensor x = tensor(std::vector<double>{0.5, -1.0, 2.0, 1.5, -0.5, 3.0}, {2, 3}).requires_grad_();
  Tensor y = sum(x.select(1, 1) * x.select(1, 1) * x.select(1, 2));  // sum over rows of x1^2 x2
  auto g = grad({y}, {x}, {}, true);  // [0, 2 x1 x2, x1^2] per row
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{0, 2 * -1.0 * 2.0, 1.0, 0, 2 * -0.5 * 3.0, 0.25}));
  auto h = grad({sum(g[0])}, {x});  // d/dx of 2 x1 x2 + x1^2: [0, 2 x2 + 2 x1, 2 x1]
  EXPECT_EQ(h[0].to_vector<double>(), (std::vector<double>{0, 2 * 2.0 + 2 * -1.0, 2 * -1.0, 0, 2 * 3.0 + 2 * -0.5, 2 * -0.5}));
}

}  // namespace
}  // namespace alk
