// Each kernel against a naive float64 reference over the logical values of its
// inputs, across shapes, dtypes and memory layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "kernel_test_util.h"

namespace alk::cpu {
namespace {

using namespace alk::cpu::testing;

const DType kFloatTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16};

// A tensor split around one axis: [outer, len, inner].
struct Split {
  int64_t outer = 1, len = 1, inner = 1;
  Split(const std::vector<int64_t>& shape, int axis) {
    for (int d = 0; d < static_cast<int>(shape.size()); ++d)
      (d < axis ? outer : d == axis ? len : inner) *= shape[static_cast<size_t>(d)];
  }
  size_t at(int64_t o, int64_t i, int64_t e) const { return static_cast<size_t>((o * len + i) * inner + e); }
};

// ---------------------------------------------------------------- matmul

std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                               int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a[static_cast<size_t>((bi * m + i) * k + p)] * b[static_cast<size_t>((bi * k + p) * n + j)];
        c[static_cast<size_t>((bi * m + i) * n + j)] = s;
      }
  return c;
}

void check_matmul(int64_t batch, int64_t m, int64_t k, int64_t n, DType dt, Layout la, Layout lb,
                  DType out_dt) {
  SCOPED_TRACE(::testing::Message() << "batch " << batch << " m " << m << " k " << k << " n " << n << " "
                                    << dtype_str(dt) << " -> " << dtype_str(out_dt) << " a " << layout_name(la)
                                    << " b " << layout_name(lb));
  std::mt19937 rng(static_cast<unsigned>(m * 131 + k * 17 + n));
  std::vector<int64_t> sa = {m, k}, sb = {k, n}, so = {m, n};
  if (batch > 0) {
    sa.insert(sa.begin(), batch);
    sb.insert(sb.begin(), batch);
    so.insert(so.begin(), batch);
  }
  Buf a = make_input(sa, dt, la, rng), b = make_input(sb, dt, lb, rng);
  Buf out = make_output(so, out_dt);
  matmul(a.view, b.view, out.view);
  // The rounding-error bound of a k-term dot product (as tests/backend/cpu/test_gemm_isa.cpp):
  // (k + 2) units of the accumulation's rounding relative to sum |a||b| of each element, plus
  // the output's own rounding; integers are exact. bf16 and f16 products are exact in f32,
  // which accumulates them.
  const std::vector<double> av = a.values(), bv = b.values();
  const int64_t nb = std::max<int64_t>(batch, 1);
  const std::vector<double> want = ref_matmul(av, bv, nb, m, k, n);
  std::vector<double> abs_a(av.size()), abs_b(bv.size());
  for (size_t i = 0; i < av.size(); ++i) abs_a[i] = std::abs(av[i]);
  for (size_t i = 0; i < bv.size(); ++i) abs_b[i] = std::abs(bv[i]);
  const std::vector<double> magnitude = ref_matmul(abs_a, abs_b, nb, m, k, n);
  auto unit = [](DType t) {
    switch (t) {
      case DType::F64: return std::ldexp(1.0, -53);
      case DType::F32: return std::ldexp(1.0, -24);
      case DType::F16: return std::ldexp(1.0, -11);
      case DType::BF16: return std::ldexp(1.0, -8);
      default: return 0.0;
    }
  };
  const double acc = dt == DType::F64 ? unit(DType::F64) : unit(DType::F32);
  const double out_unit = unit(out_dt);
  const std::vector<double> got = out.values();
  ASSERT_EQ(got.size(), want.size());
  expect_guards(out);
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const double bound = is_floating(out_dt) ? static_cast<double>(k + 2) * acc * magnitude[i] + out_unit * std::abs(want[i])
                                             : 0.0;
    if (!(std::abs(got[i] - want[i]) <= bound)) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i] << ", bound " << bound
                    << " (sum |a||b| " << magnitude[i] << ")";
      ++bad;
    }
  }
}

TEST(Matmul, ShapesAndDtypes) {
  struct Case {
    int64_t m, k, n;
  };
  const Case cases[] = {{1, 1, 1}, {37, 53, 29}, {1, 7, 1}, {5, 1, 6}, {4, 16, 16}, {3, 300, 35}, {150, 20, 40}};
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) check_matmul(0, c.m, c.k, c.n, dt, Layout::Contiguous, Layout::Contiguous, dt);
}

TEST(Matmul, LayoutsAndBroadcastBatch) {
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Offset,
                            Layout::Broadcast};
  for (DType dt : {DType::F32, DType::F64, DType::BF16})
    for (Layout la : layouts)
      for (Layout lb : layouts) check_matmul(3, 13, 9, 21, dt, la, lb, dt);
}

TEST(Matmul, MixedOutputDtypes) {
  check_matmul(2, 9, 11, 18, DType::BF16, Layout::Contiguous, Layout::Transposed, DType::F32);
  check_matmul(2, 9, 11, 18, DType::F32, Layout::Contiguous, Layout::Contiguous, DType::BF16);
  check_matmul(2, 9, 11, 18, DType::F32, Layout::Contiguous, Layout::Contiguous, DType::F64);
  check_matmul(1, 9, 11, 18, DType::I32, Layout::Strided, Layout::Contiguous, DType::I32);
}

TEST(Matmul, ZeroDepthGivesZeros) {
  for (DType dt : {DType::F32, DType::F64}) {
    std::mt19937 rng(1);
    Buf a = make_input({2, 3, 0}, dt, Layout::Contiguous, rng), b = make_input({2, 0, 4}, dt, Layout::Contiguous, rng);
    Buf out = make_output({2, 3, 4}, dt);
    matmul(a.view, b.view, out.view);
    expect_close(out, std::vector<double>(24, 0.0), tol_for(dt));
  }
}

TEST(Matmul, LargeBatchedMultiThreaded) {
  // Several row blocks and k blocks, with the pool both on and off.
  for (int threads : {1, 3}) {
    int saved = num_threads();
    set_num_threads(threads);
    check_matmul(2, 203, 270, 77, DType::F32, Layout::Contiguous, Layout::Broadcast, DType::F32);
    check_matmul(2, 70, 130, 45, DType::F64, Layout::Transposed, Layout::Contiguous, DType::F64);
    check_matmul(2, 40, 300, 250, DType::BF16, Layout::Contiguous, Layout::Strided, DType::F32);  // B packed in parallel
    set_num_threads(saved);
  }
}

// ---------------------------------------------------------------- softmax

std::vector<double> ref_softmax(const std::vector<double>& x, const std::vector<int64_t>& shape, int axis, bool log) {
  Split s(shape, axis);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t e = 0; e < s.inner; ++e) {
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < s.len; ++i) mx = std::max(mx, x[s.at(o, i, e)]);
      for (int64_t i = 0; i < s.len; ++i) sum += std::exp(x[s.at(o, i, e)] - mx);
      for (int64_t i = 0; i < s.len; ++i) {
        double v = x[s.at(o, i, e)] - mx;
        y[s.at(o, i, e)] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

TEST(Softmax, MatchesReference) {
  const std::vector<std::vector<int64_t>> shapes = {{7}, {3, 5}, {2, 1, 9}, {4, 3, 6}, {1, 1}};
  std::mt19937 rng(7);
  for (DType dt : kFloatTypes)
    for (Layout l : kAllLayouts)
      for (const auto& shape : shapes)
        for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
          for (bool log : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(shape)
                                              << " axis " << axis << " log " << log);
            Buf x = make_input(shape, dt, l, rng, -4, 4);
            Buf out = make_output(shape, dt);
            softmax(x.view, axis, log, out.view);
            expect_close(out, ref_softmax(x.values(), shape, axis, log), tol_for(dt));
          }
}

TEST(Softmax, StableForLargeInputs) {
  std::mt19937 rng(3);
  for (DType dt : {DType::F32, DType::F64}) {
    Buf x = make_input({3, 40}, dt, Layout::Contiguous, rng, 1000, 1010);
    for (bool log : {false, true}) {
      Buf out = make_output({3, 40}, dt);
      softmax(x.view, 1, log, out.view);
      expect_close(out, ref_softmax(x.values(), {3, 40}, 1, log), {1e-5, 1e-5});
    }
  }
}

TEST(Softmax, LongRowsUseThreads) {
  std::mt19937 rng(5);
  std::vector<int64_t> shape = {300, 257};
  Buf x = make_input(shape, DType::F32, Layout::Transposed, rng);
  Buf out = make_output(shape, DType::F32);
  softmax(x.view, 1, false, out.view);
  expect_close(out, ref_softmax(x.values(), shape, 1, false), tol_for(DType::F32));
}

// ---------------------------------------------------------------- layer_norm / rms_norm

std::vector<double> ref_norm(const std::vector<double>& x, int64_t inner, const std::vector<double>* w,
                             const std::vector<double>* b, double eps, bool rms) {
  std::vector<double> y(x.size());
  for (size_t r0 = 0; r0 < x.size(); r0 += static_cast<size_t>(inner)) {
    double mean = 0, var = 0;
    for (int64_t e = 0; e < inner; ++e) mean += x[r0 + static_cast<size_t>(e)] / static_cast<double>(inner);
    for (int64_t e = 0; e < inner; ++e) {
      double d = rms ? x[r0 + static_cast<size_t>(e)] : x[r0 + static_cast<size_t>(e)] - mean;
      var += d * d / static_cast<double>(inner);
    }
    for (int64_t e = 0; e < inner; ++e) {
      size_t i = r0 + static_cast<size_t>(e);
      double v = (rms ? x[i] : x[i] - mean) / std::sqrt(var + eps);
      if (w) v *= (*w)[static_cast<size_t>(e)];
      if (b && !rms) v += (*b)[static_cast<size_t>(e)];
      y[i] = v;
    }
  }
  return y;
}

TEST(Norms, MatchReference) {
  struct Case {
    std::vector<int64_t> shape;
    int trailing;  // how many trailing dims form `inner`
  };
  const Case cases[] = {{{5, 8}, 1}, {{3, 4, 6}, 2}, {{1, 33}, 1}, {{7, 1}, 1}, {{2, 3, 5}, 1}};
  std::mt19937 rng(11);
  for (DType dt : kFloatTypes)
    for (Layout l : kAllLayouts)
      for (const Case& c : cases)
        for (bool with_params : {false, true})
          for (bool rms : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(c.shape)
                                              << " params " << with_params << " rms " << rms);
            std::vector<int64_t> pshape(c.shape.end() - c.trailing, c.shape.end());
            int64_t inner = 1;
            for (int64_t s : pshape) inner *= s;
            Buf x = make_input(c.shape, dt, l, rng);
            Buf w = make_input(pshape, dt, Layout::Strided, rng), b = make_input(pshape, dt, Layout::Offset, rng);
            std::vector<double> wv = w.values(), bv = b.values();
            Buf out = make_output(c.shape, dt);
            double eps = 1e-5;
            if (rms)
              rms_norm(x.view, with_params ? &w.view : nullptr, inner, eps, out.view);
            else
              layer_norm(x.view, with_params ? &w.view : nullptr, with_params ? &b.view : nullptr, inner, eps,
                         out.view);
            Tol tol = tol_for(dt);
            if (dt == DType::F32) tol = {1e-5, 1e-5};
            expect_close(out, ref_norm(x.values(), inner, with_params ? &wv : nullptr, with_params ? &bv : nullptr, eps, rms), tol);
          }
}

// ---------------------------------------------------------------- argreduce

TEST(ArgReduce, FirstExtremeAlongAxis) {
  const std::vector<std::vector<int64_t>> shapes = {{9}, {4, 7}, {3, 1, 5}, {2, 6, 3}};
  std::mt19937 rng(13);
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64})
    for (Layout l : kAllLayouts)
      for (const auto& shape : shapes)
        for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
          for (bool is_max : {false, true}) {
            SCOPED_TRACE(::testing::Message() << dtype_str(dt) << " " << layout_name(l) << " " << to_string(shape)
                                              << " axis " << axis << " max " << is_max);
            Buf x = make_buf(shape, dt, l);
            fill_ints(x, rng, -2, 2);  // few distinct values, so ties are common
            std::vector<int64_t> oshape = shape;
            oshape[static_cast<size_t>(axis)] = 1;
            Buf out = make_output(oshape, DType::I64);
            argreduce(x.view, axis, is_max, out.view);
            Split s(shape, axis);
            std::vector<double> xv = x.values(), ref;
            for (int64_t o = 0; o < s.outer; ++o)
              for (int64_t e = 0; e < s.inner; ++e) {
                int64_t best = 0;
                for (int64_t i = 1; i < s.len; ++i) {
                  double v = xv[s.at(o, i, e)], bv = xv[s.at(o, best, e)];
                  if (is_max ? v > bv : v < bv) best = i;
                }
                ref.push_back(static_cast<double>(best));
              }
            expect_close(out, ref, {0, 0});
          }
}

TEST(ArgReduce, NaNWins) {
  std::mt19937 rng(1);
  Buf x = make_input({5}, DType::F32, Layout::Contiguous, rng);
  static_cast<float*>(x.view.data)[2] = std::numeric_limits<float>::quiet_NaN();
  static_cast<float*>(x.view.data)[4] = std::numeric_limits<float>::quiet_NaN();
  for (bool is_max : {false, true}) {
    Buf out = make_output({1}, DType::I64);
    argreduce(x.view, 0, is_max, out.view);
    expect_close(out, {2.0}, {0, 0});
  }
}

}  // namespace
}  // namespace alk::cpu
