// The expression evaluator is compiled per instruction set (eval_generic/avx2/avx512.cpp):
// every path the processor supports must compute what the generic path computes, for
// fused expressions with strided and broadcast inputs, reductions over any axes, and the
// vector-math functions (libmvec), which may differ from std:: by a few ulp.
#include <cmath>

#include "backend/cpu/isa.h"
#include "testing.h"

namespace alk {
namespace {

std::vector<double> run_all(cpu::Isa isa) {
  cpu::set_isa(isa);
  manual_seed(3);
  Tensor a = randn({37, 65}), b = randn({65}), c = randn({37, 1});
  std::vector<double> out;
  auto add = [&](const Tensor& t) {
    auto v = t.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  };
  add(gelu(a * b + c) - tanh(a.t().contiguous().t()) * sigmoid(b));
  add(exp(a * 0.5) + log1p(abs(a)) + sin(a) * cos(b) + erf(a) + expm1(c * 0.1));
  add(sum(exp(a) * b, {1}));
  add(sum(a * a, {0}));
  add(max(a.t(), {1}, true));
  add(mean(softplus(a)));
  add(where(a > 0, a, c * 2.0).to(DType::F64) / 3.0);
  add((a.to(DType::BF16) * 2.0).to(DType::F32));
  add(sum(tensor(std::vector<int64_t>{1, -2, 3, 4, 5, 6}, {2, 3}) * 3, {1}));
  return out;
}

TEST(EvalIsa, EverySupportedPathMatchesGeneric) {
  const cpu::Isa original = cpu::isa();
  std::vector<double> generic = run_all(cpu::Isa::Generic);
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    SCOPED_TRACE(cpu::isa_name(isa));
    std::vector<double> got = run_all(isa);
    ASSERT_EQ(got.size(), generic.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], generic[i], 2e-6 * (1 + std::fabs(generic[i]))) << "element " << i;
  }
  cpu::set_isa(original);
  EXPECT_EQ(cpu::isa(), original);
}

}  // namespace
}  // namespace alk
