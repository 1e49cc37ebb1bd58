// layer_norm, its backward and rms_norm are compiled per instruction set (norm_impl.inc)
// and must compute the same bits on every path the processor has, for every float dtype,
// for contiguous and strided rows, at any thread count; and match float64 references.
#include <cmath>

#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"
#include "testing.h"

namespace alk {
namespace {

// The forward and both gradients of a layer norm, and an rms norm, as one vector.
std::vector<double> norms(DType dtype, bool strided) {
  manual_seed(21);
  Tensor x = randn({37, 75}, DType::F64) * 3.0 + 1.0;
  if (strided) x = randn({75, 37}, DType::F64).t() * 3.0 + 1.0;
  x = x.to(dtype).detach().requires_grad_();
  Tensor w = (randn({75}, DType::F64) * 0.5 + 1.0).to(dtype).requires_grad_(), b = randn({75}, DType::F64).to(dtype).requires_grad_();
  Tensor y = layer_norm(x, {75}, w, b);
  Tensor r = rms_norm(x, {75}, w);
  Tensor g = randn({37, 75}, DType::F64).to(dtype);
  sum(y * g).backward();
  std::vector<double> out;
  for (const Tensor& t : {y, r, x.grad(), w.grad(), b.grad()}) {
    auto v = t.to(DType::F64).to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(NormIsa, EveryPathAndThreadCountComputesTheSameBits) {
  const cpu::Isa original = cpu::isa();
  const int threads = cpu::num_threads();
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (strided ? " strided" : ""));
      cpu::set_isa(cpu::Isa::Generic);
      cpu::set_num_threads(1);
      const std::vector<double> want = norms(dtype, strided);
      for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
        if (!cpu::isa_supported(isa)) continue;
        SCOPED_TRACE(cpu::isa_name(isa));
        cpu::set_isa(isa);
        cpu::set_num_threads(3);
        EXPECT_EQ(norms(dtype, strided), want);
      }
    }
  }
  cpu::set_num_threads(threads);
  cpu::set_isa(original);
}

// softmax and log_softmax go through each path's vector exp (libmvec on AVX2/AVX-512, a
// few ulp apart): every path within 1e-6 of the generic one, for contiguous and strided
// rows; a fully masked row (all -inf) gives NaN and a NaN poisons its row, on every path.
TEST(NormIsa, SoftmaxEveryPathAgrees) {
  const cpu::Isa original = cpu::isa();
  auto run = [](DType dtype, bool log, bool strided) {
    manual_seed(6);
    Tensor x = (strided ? randn({75, 37}, DType::F64).t() : randn({37, 75}, DType::F64)) * 4.0;
    std::vector<double> v = x.contiguous().to_vector<double>();
    for (int e = 0; e < 75; ++e) v[static_cast<size_t>(3 * 75 + e)] = -INFINITY;  // row 3: fully masked
    v[5 * 75 + 7] = NAN;                                                            // row 5: one NaN
    Tensor t = tensor(v, {37, 75}).to(dtype);
    return (log ? log_softmax(t, 1) : softmax(t, 1)).to(DType::F64).to_vector<double>();
  };
  for (DType dtype : {DType::F32, DType::F64})
    for (bool log : {false, true})
      for (bool strided : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (log ? " log" : "") + (strided ? " strided" : ""));
        cpu::set_isa(cpu::Isa::Generic);
        const std::vector<double> want = run(dtype, log, strided);
        for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
          if (!cpu::isa_supported(isa)) continue;
          SCOPED_TRACE(cpu::isa_name(isa));
          cpu::set_isa(isa);
          const std::vector<double> got = run(dtype, log, strided);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) {
            const size_t row = i / 75;
            if (row == 3 || row == 5) {
              ASSERT_TRUE(std::isnan(got[i])) << "element " << i;
              continue;
            }
            ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << "element " << i;
          }
        }
      }
  cpu::set_isa(original);
}

TEST(NormIsa, LayerNormMatchesFloat64Reference) {
  manual_seed(2);
  Tensor x = randn({5, 300}, DType::F64) * 10.0 + 100.0;  // a large mean: the two-pass variance matters
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<double> got = layer_norm(x.to(DType::F32), {300}).to(DType::F64).to_vector<double>();
  for (int r = 0; r < 5; ++r) {
    double mean = 0, var = 0;
    for (int e = 0; e < 300; ++e) mean += xv[static_cast<size_t>(r * 300 + e)] / 300;
    for (int e = 0; e < 300; ++e) var += std::pow(xv[static_cast<size_t>(r * 300 + e)] - mean, 2) / 300;
    for (int e = 0; e < 300; ++e) {
      const double want = (xv[static_cast<size_t>(r * 300 + e)] - mean) / std::sqrt(var + 1e-5);
      ASSERT_NEAR(got[static_cast<size_t>(r * 300 + e)], want, 2e-5 * (1 + std::fabs(want)));
    }
  }
}

}  // namespace
}  // namespace alk
