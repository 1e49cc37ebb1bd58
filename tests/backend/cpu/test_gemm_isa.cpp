// The SGEMM path of cpu::matmul on every micro-kernel ISA this CPU supports (forced with
// set_gemm_isa), against a float64 reference: odd sizes, k = 0 and k past one cache block,
// transposed / strided / offset / broadcast operands, f32/bf16/f16 inputs; plus agreement
// across ISA paths and bitwise invariance under the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "kernel_test_util.h"

namespace alk::cpu {
namespace {

using namespace alk::cpu::testing;

// Restores the automatic ISA choice and the thread count when a test ends.
struct Restore {
  int threads = num_threads();
  ~Restore() {
    set_gemm_isa("auto");
    set_num_threads(threads);
  }
};

struct Problem {
  int64_t batch, m, k, n;  // batch 0: plain 2-D matrices
  DType in = DType::F32, out = DType::F32;
  Layout la = Layout::Contiguous, lb = Layout::Contiguous;
};

std::string describe(const Problem& p) {
  return "batch " + std::to_string(p.batch) + " m " + std::to_string(p.m) + " k " + std::to_string(p.k) + " n " +
         std::to_string(p.n) + " " + dtype_str(p.in) + " -> " + dtype_str(p.out) + " a " + layout_name(p.la) +
         " b " + layout_name(p.lb);
}

struct Inputs {
  Buf a, b;
};

Inputs make_inputs(const Problem& p) {
  std::mt19937 rng(static_cast<unsigned>(p.m * 7919 + p.k * 131 + p.n * 17 + p.batch));
  std::vector<int64_t> sa = {p.m, p.k}, sb = {p.k, p.n};
  if (p.batch > 0) {
    sa.insert(sa.begin(), p.batch);
    sb.insert(sb.begin(), p.batch);
  }
  return {make_input(sa, p.in, p.la, rng), make_input(sb, p.in, p.lb, rng)};
}

Buf run(const Problem& p, const Inputs& in) {
  std::vector<int64_t> so = {p.m, p.n};
  if (p.batch > 0) so.insert(so.begin(), p.batch);
  Buf out = make_output(so, p.out);
  matmul(in.a.view, in.b.view, out.view);
  expect_guards(out);
  return out;
}

// Per output element: the exact-ish sum and the sum of |a||b| (the scale of f32 rounding error).
struct Reference {
  std::vector<double> value, scale;
};

Reference reference(const Problem& p, const Inputs& in) {
  std::vector<double> a = in.a.values(), b = in.b.values();
  int64_t batches = std::max<int64_t>(p.batch, 1);
  Reference r;
  r.value.assign(static_cast<size_t>(batches * p.m * p.n), 0.0);
  r.scale = r.value;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0, mag = 0;
        for (int64_t q = 0; q < p.k; ++q) {
          double x = a[static_cast<size_t>((bi * p.m + i) * p.k + q)] * b[static_cast<size_t>((bi * p.k + q) * p.n + j)];
          s += x;
          mag += std::abs(x);
        }
        r.value[static_cast<size_t>((bi * p.m + i) * p.n + j)] = s;
        r.scale[static_cast<size_t>((bi * p.m + i) * p.n + j)] = mag;
      }
  return r;
}

// |got - want| <= rel * scale + (rounding of the output dtype).
void expect_near_ref(const Buf& out, const Reference& ref, double rel, DType out_dt) {
  std::vector<double> got = out.values();
  ASSERT_EQ(got.size(), ref.value.size());
  double out_eps = out_dt == DType::BF16 ? 1.0 / 128 : out_dt == DType::F16 ? 1.0 / 1024 : 0.0;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    double tol = rel * ref.scale[i] + out_eps * std::abs(ref.value[i]) + 1e-30;
    if (!(std::abs(got[i] - ref.value[i]) <= tol)) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << ref.value[i] << " (tol " << tol << ")";
      ++bad;
    }
  }
}

// The f32 worst-case bound for a k-term dot product: k * 2^-24 relative to sum |a||b|.
double f32_bound(int64_t k) { return static_cast<double>(k + 2) * 6.0e-8; }

void check_all_isas(const Problem& p) {
  SCOPED_TRACE(describe(p));
  Restore restore;
  Inputs in = make_inputs(p);
  Reference ref = reference(p, in);
  std::vector<std::vector<double>> results;
  for (const std::string& isa : gemm_supported_isas()) {
    SCOPED_TRACE("isa " + isa);
    ASSERT_TRUE(set_gemm_isa(isa));
    ASSERT_EQ(gemm_isa(), isa);
    Buf out = run(p, in);
    expect_near_ref(out, ref, f32_bound(p.k), p.out);
    results.push_back(out.values());
  }
  // Every path agrees with the first (best) within 1e-5 relative to the element's sum |a||b|.
  double out_eps = p.out == DType::BF16 ? 1.0 / 128 : p.out == DType::F16 ? 1.0 / 1024 : 0.0;
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_LE(std::abs(results[r][i] - results[0][i]), 1e-5 * ref.scale[i] + out_eps * std::abs(ref.value[i]) + 1e-30)
          << "isa " << gemm_supported_isas()[r] << " element " << i;
}

TEST(GemmIsa, SupportedPathsAndSelection) {
  Restore restore;
  std::vector<std::string> isas = gemm_supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "generic");
  EXPECT_EQ(gemm_isa(), isa_name(isa()));  // by default the GEMM follows the process-wide ISA choice
  for (const std::string& isa : isas) {
    EXPECT_TRUE(set_gemm_isa(isa));
    EXPECT_EQ(gemm_isa(), isa);
  }
  // Unknown names and unsupported paths are refused and leave the choice alone.
  EXPECT_FALSE(set_gemm_isa("sse9000"));
  EXPECT_EQ(gemm_isa(), "generic");
  for (const char* isa : {"avx512", "avx2"}) {
    if (std::find(isas.begin(), isas.end(), isa) == isas.end()) {
      EXPECT_FALSE(set_gemm_isa(isa));
    }
  }
  EXPECT_TRUE(set_gemm_isa("auto"));
  EXPECT_EQ(gemm_isa(), isa_name(isa()));
}

TEST(GemmIsa, OddSizesAgainstFloat64Reference) {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 14, 15, 16, 17, 29, 31, 32, 33, 47, 63, 64, 65, 97, 113, 127, 128, 129, 130};
  const size_t count = std::size(sizes);
  for (size_t i = 0; i < count; ++i) {
    check_all_isas({0, sizes[i], sizes[(i * 7 + 3) % count], sizes[(i * 11 + 5) % count]});
    check_all_isas({0, sizes[(i * 5 + 2) % count], sizes[i], sizes[(i * 3 + 1) % count]});
  }
  for (int64_t s : {1, 17, 31, 97, 130}) check_all_isas({0, s, s, s});
  // Depth past one KC block, and skinny shapes (row vector / column vector).
  check_all_isas({0, 37, 300, 41});
  check_all_isas({0, 29, 771, 67});
  check_all_isas({0, 1, 513, 130});
  check_all_isas({0, 130, 513, 1});
}

// bf16 x bf16: on the avx512 path of a CPU with AVX-512 BF16, the dot-product kernel (pairs
// of k, odd k padded); checked against the reference and the converting paths, with k odd,
// past one block, and every edge.
TEST(GemmIsa, Bf16DotProducts) {
  Restore restore;
  // One vector: std::find needs begin and end of the same container (each call returns a new one).
  const std::vector<std::string> isas = gemm_supported_isas();
  if (std::find(isas.begin(), isas.end(), "avx512") != isas.end()) {
    ASSERT_TRUE(set_gemm_isa("avx512"));
    EXPECT_EQ(gemm_bf16_dot(), cpu_features().avx512bf16);
  } else {
    EXPECT_FALSE(gemm_bf16_dot());
  }
  ASSERT_TRUE(set_gemm_isa("generic"));
  EXPECT_FALSE(gemm_bf16_dot());
  for (int64_t k : {1, 2, 3, 255, 256, 257, 771})
    check_all_isas({0, 29, k, 67, DType::BF16, DType::F32, Layout::Contiguous, Layout::Contiguous});
  check_all_isas({2, 130, 513, 33, DType::BF16, DType::BF16, Layout::Offset, Layout::Broadcast});
  check_all_isas({0, 1, 300, 130, DType::BF16, DType::F32, Layout::Strided, Layout::Transposed});
}

TEST(GemmIsa, ZeroDepth) {
  Restore restore;
  for (const std::string& isa : gemm_supported_isas()) {
    ASSERT_TRUE(set_gemm_isa(isa));
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {130, 129}}) {
      Problem p{2, m, 0, n};
      Inputs in = make_inputs(p);
      expect_close(run(p, in), std::vector<double>(static_cast<size_t>(2 * m * n), 0.0), tol_for(DType::F32));
    }
  }
}

TEST(GemmIsa, LayoutsDtypesAndBroadcastBatch) {
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset,
                            Layout::Broadcast};
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (Layout la : layouts)
      for (Layout lb : layouts) {
        check_all_isas({3, 19, 37, 45, dt, DType::F32, la, lb});
        if (la == lb) check_all_isas({0, 31, 29, 35, dt, DType::F32, la, lb});  // 2-D: broadcast rows
      }
  for (DType out : {DType::BF16, DType::F16, DType::F32})
    check_all_isas({2, 45, 270, 70, DType::F32, out, Layout::Transposed, Layout::Strided});
  check_all_isas({2, 33, 130, 129, DType::BF16, DType::F32, Layout::Transposed, Layout::Transposed});
}

// A column-major f32 A (a weight gradient's x^T) is packed into micro panels: once for
// all tasks when its rows fit one row block, else by each row block per KC-deep slice.
// Row tails (m % MR of 6 and 14), k tails past whole KC = 256 blocks, partial column
// panels, one and several threads, batched and broadcast A.
TEST(GemmIsa, TransposedAPackedEveryWay) {
  Restore restore;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    check_all_isas({0, 128, 1030, 70, DType::F32, DType::F32, Layout::Transposed, Layout::Contiguous});
    check_all_isas({0, 130, 513, 129, DType::F32, DType::F32, Layout::Transposed, Layout::Contiguous});
    check_all_isas({0, 611, 300, 45, DType::F32, DType::F32, Layout::Transposed, Layout::Contiguous});
    check_all_isas({0, 601, 257, 33, DType::F32, DType::F32, Layout::Transposed, Layout::Transposed});
    check_all_isas({3, 131, 260, 40, DType::F32, DType::F32, Layout::Transposed, Layout::Contiguous});
    check_all_isas({2, 29, 270, 50, DType::F32, DType::F32, Layout::Broadcast, Layout::Contiguous});
    // B packed by runs of rows a group of panels at a time: widths around the group of 4 panels.
    for (int64_t n : {15, 64, 65, 127, 200})
      check_all_isas({0, 150, 300, n, DType::F32, DType::F32, Layout::Contiguous, Layout::Contiguous});
  }
}

TEST(GemmIsa, ManySmallBatches) {
  // Tiny per-batch matmuls, batch-broadcast B (one packed copy) and batched B.
  check_all_isas({40, 32, 16, 33, DType::F32, DType::F32, Layout::Contiguous, Layout::Broadcast});
  check_all_isas({24, 13, 33, 20, DType::F32, DType::F32, Layout::Transposed, Layout::Contiguous});
}

TEST(GemmIsa, ResultDoesNotDependOnThreadCount) {
  Restore restore;
  const Problem problems[] = {
      {0, 300, 600, 200},                                                          // several row blocks, k blocks
      {0, 5, 300, 700},                                                            // few rows: columns split
      {0, 1, 1000, 257},                                                           // a row vector
      {6, 37, 129, 33, DType::F32, DType::F32, Layout::Contiguous, Layout::Broadcast},  // batched
      {3, 70, 520, 90, DType::BF16, DType::BF16, Layout::Transposed, Layout::Strided},
  };
  for (const std::string& isa : gemm_supported_isas()) {
    ASSERT_TRUE(set_gemm_isa(isa));
    for (const Problem& p : problems) {
      SCOPED_TRACE("isa " + isa + " " + describe(p));
      Inputs in = make_inputs(p);
      set_num_threads(1);
      Buf one = run(p, in);
      for (int threads : {2, 3, 4}) {
        set_num_threads(threads);
        Buf many = run(p, in);
        std::vector<double> x = one.values(), y = many.values();
        ASSERT_EQ(x.size(), y.size());
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(double))) << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace alk::cpu
