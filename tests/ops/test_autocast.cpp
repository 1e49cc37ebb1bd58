// Autocast (mixed precision, as torch.autocast): inside the scope f32 matmuls run in the
// 16-bit dtype, the norms/softmax/attention widen 16-bit inputs to f32, parameters and
// their gradients stay f32, and the scope nests and restores.
#include <gtest/gtest.h>

#include <cmath>

#include "alk/alk.h"
#include "error_expect.h"

namespace alk {
namespace {

double max_rel(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = cast(a, DType::F64).to_vector<double>(), y = cast(b, DType::F64).to_vector<double>();
  double worst = 0, scale = 1e-12;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / scale);
  return worst;
}

TEST(Autocast, MatmulRunsInBf16AndNormsInF32) {
  manual_seed(1);
  Tensor a = randn({16, 32}), b = randn({32, 8});
  const Tensor exact = matmul(a, b);
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    Autocast scope(DType::BF16);
    ASSERT_EQ(autocast_dtype(), DType::BF16);
    Tensor y = matmul(a, b);
    EXPECT_EQ(y.dtype(), DType::BF16);
    EXPECT_LT(max_rel(y, exact), 2e-2);  // bf16 operands: 8-bit mantissas
    EXPECT_GT(max_rel(y, exact), 0.0);   // and not the f32 product
    EXPECT_EQ(layer_norm(y, {8}).dtype(), DType::F32);
    EXPECT_EQ(softmax(y, -1).dtype(), DType::F32);
    EXPECT_EQ(matmul(cast(a, DType::F64), cast(b, DType::F64)).dtype(), DType::BF16);
    {
      Autocast inner(DType::F16);
      EXPECT_EQ(matmul(a, b).dtype(), DType::F16);
    }
    EXPECT_EQ(autocast_dtype(), DType::BF16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_EQ(matmul(a, b).dtype(), DType::F32);
  EXPECT_ALK_ERROR(Autocast(DType::F32), "autocast", "bf16 or f16", "f32");
}

TEST(Autocast, GradientsOfF32ParametersAreF32AndCloseToTheF32Ones) {
  manual_seed(2);
  Tensor w = randn({32, 8}), x = randn({16, 32});
  w.requires_grad_(true);
  Tensor exact_loss = sum(square(matmul(x, w)));
  exact_loss.backward();
  const Tensor exact_grad = w.grad().detach();
  w.zero_grad();
  Tensor loss;
  {
    Autocast scope;
    loss = sum(square(cast(matmul(x, w), DType::F32)));
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_LT(max_rel(w.grad(), exact_grad), 3e-2);
}

// A Linear under autocast adds its bias in the 16-bit dtype (PyTorch's addmm does): the
// activation stays bf16; the f32 bias's gradient is f32 and close to the f32 one.
TEST(Autocast, LinearKeepsItsOutputIn16Bits) {
  manual_seed(3);
  nn::Linear lin(32, 8);
  Tensor x = randn({16, 32});
  Tensor exact = lin(x);
  sum(square(exact)).backward();
  const Tensor exact_bias_grad = lin.bias.grad().detach();
  lin.zero_grad();
  Tensor y;
  {
    Autocast scope;
    y = lin(x);
  }
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_LT(max_rel(y, exact), 2e-2);
  sum(square(cast(y, DType::F32))).backward();
  ASSERT_TRUE(lin.bias.grad().defined());
  EXPECT_EQ(lin.bias.grad().dtype(), DType::F32);
  EXPECT_LT(max_rel(lin.bias.grad(), exact_bias_grad), 3e-2);
}

}  // namespace
}  // namespace alk
