// The fused attention kernels (cpu::attention_forward / attention_backward) on every ISA
// path this CPU supports (forced with set_isa), against a float64 reference and against
// the generic path: causal and not, S > T, S < T (rows that see no key), sizes that are
// not multiples of the 32-row tiles, f32 and f64; plus bitwise invariance under the
// thread count on each path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"

namespace alk::cpu {
namespace {

struct Restore {
  Isa isa_was = isa();
  int threads = num_threads();
  ~Restore() {
    set_isa(isa_was);
    set_num_threads(threads);
  }
};

struct Case {
  int64_t B, T, S, D;
  bool causal;
};

std::string describe(const Case& c, DType t) {
  return "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " D " +
         std::to_string(c.D) + (c.causal ? " causal " : " full ") + (t == DType::F64 ? "f64" : "f32");
}

// A contiguous buffer of f32 or f64 values, viewed as `shape`.
struct Buf {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<double> d;
  Buf(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    (t == DType::F64 ? d.resize(static_cast<size_t>(n)) : f.resize(static_cast<size_t>(n)));
  }
  size_t size() const { return dtype == DType::F64 ? d.size() : f.size(); }
  double get(size_t i) const { return dtype == DType::F64 ? d[i] : f[i]; }
  void set(size_t i, double v) {
    if (dtype == DType::F64)
      d[i] = v;
    else
      f[i] = static_cast<float>(v);
  }
  View view() {
    View v;
    v.data = dtype == DType::F64 ? static_cast<void*>(d.data()) : static_cast<void*>(f.data());
    v.dtype = dtype;
    v.shape = shape;
    v.strides.resize(shape.size());
    int64_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) v.strides[i] = s, s *= shape[i];
    return v;
  }
};

struct Outputs {
  Buf fwd, grads;
};

struct Problem {
  Case c;
  DType t;
  double scale;
  Buf q, k, v, g;
  Problem(Case c_, DType t_)
      : c(c_), t(t_), scale(1 / std::sqrt(static_cast<double>(c_.D))), q(t_, {c_.B, c_.T, c_.D}),
        k(t_, {c_.B, c_.S, c_.D}), v(t_, {c_.B, c_.S, c_.D}), g(t_, {c_.B, c_.T, c_.D}) {
    std::mt19937 rng(static_cast<unsigned>(c.B * 1000003 + c.T * 7919 + c.S * 131 + c.D));
    std::normal_distribution<double> n(0, 1.5);
    for (Buf* b : {&q, &k, &v, &g})
      for (size_t i = 0; i < b->size(); ++i) b->set(i, n(rng));
  }
  Outputs run() {
    Outputs r{Buf(t, {c.B, c.T, c.D + 1}), Buf(t, {3, c.B, std::max(c.T, c.S), c.D})};
    attention_forward(q.view(), k.view(), v.view(), c.causal, scale, r.fwd.view());
    attention_backward(q.view(), k.view(), v.view(), r.fwd.view(), g.view(), c.causal, scale, r.grads.view());
    return r;
  }
  // The same outputs in float64, straight from the definition.
  Outputs reference() {
    const int64_t B = c.B, T = c.T, S = c.S, D = c.D, M = std::max(T, S);
    Outputs r{Buf(DType::F64, {B, T, D + 1}), Buf(DType::F64, {3, B, M, D})};
    auto at = [&](int64_t b, int64_t row, int64_t d, int64_t n) { return static_cast<size_t>((b * n + row) * D + d); };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t visible = c.causal ? std::clamp<int64_t>(t + S - T + 1, 0, S) : S;
        double* o = r.fwd.d.data() + (b * T + t) * (D + 1);
        if (visible == 0) {
          o[D] = -std::numeric_limits<double>::infinity();
          continue;
        }
        std::vector<double> p(static_cast<size_t>(visible)), dp(static_cast<size_t>(visible));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s < visible; ++s) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += q.get(at(b, t, d, T)) * k.get(at(b, s, d, S));
          p[static_cast<size_t>(s)] = acc * scale;
          mx = std::max(mx, acc * scale);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (double& x : p) x /= sum;
        o[D] = mx + std::log(sum);
        double di = 0;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t s = 0; s < visible; ++s) acc += p[static_cast<size_t>(s)] * v.get(at(b, s, d, S));
          o[d] = acc;
          di += acc * g.get(at(b, t, d, T));
        }
        for (int64_t s = 0; s < visible; ++s) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += g.get(at(b, t, d, T)) * v.get(at(b, s, d, S));
          dp[static_cast<size_t>(s)] = p[static_cast<size_t>(s)] * (acc - di);  // dS
        }
        double* dq = r.grads.d.data() + (b * M + t) * D;
        for (int64_t s = 0; s < visible; ++s) {
          const double ds = dp[static_cast<size_t>(s)], ps = p[static_cast<size_t>(s)];
          double* dk = r.grads.d.data() + ((B + b) * M + s) * D;
          double* dv = r.grads.d.data() + ((2 * B + b) * M + s) * D;
          for (int64_t d = 0; d < D; ++d) {
            dq[d] += scale * ds * k.get(at(b, s, d, S));
            dk[d] += scale * ds * q.get(at(b, t, d, T));
            dv[d] += ps * g.get(at(b, t, d, T));
          }
        }
      }
    return r;
  }
};

// max |a - b| / (atol + rtol * |b|) <= 1 elementwise, with matching infinities.
void expect_close(const Buf& a, const Buf& b, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isinf(y)) {
      EXPECT_EQ(x, y) << what << " at " << i;
      continue;
    }
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y)) && reported++ < 5)
      ADD_FAILURE() << what << " at " << i << ": " << x << " vs " << y;
  }
}

bool bitwise_equal(const Buf& a, const Buf& b) {
  return a.dtype == DType::F64 ? std::memcmp(a.d.data(), b.d.data(), a.d.size() * sizeof(double)) == 0
                               : std::memcmp(a.f.data(), b.f.data(), a.f.size() * sizeof(float)) == 0;
}

const Case kCases[] = {
    {2, 37, 37, 16, true},  {3, 64, 64, 32, true},  {2, 20, 45, 8, true},   {2, 45, 20, 12, true},
    {2, 33, 70, 32, false}, {1, 96, 96, 64, true},  {2, 1, 1, 4, false},    {2, 128, 128, 32, true},
};

TEST(AttentionIsa, EveryIsaMatchesReferenceAndGeneric) {
  Restore restore;
  for (DType t : {DType::F32, DType::F64})
    for (const Case& c : kCases) {
      Problem p(c, t);
      const Outputs ref = p.reference();
      set_isa(Isa::Generic);
      const Outputs generic = p.run();
      const double tol = t == DType::F64 ? 1e-10 : 2e-4;
      for (Isa i : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
        if (!isa_supported(i)) continue;
        set_isa(i);
        const std::string what = describe(c, t) + " " + isa_name(i);
        set_num_threads(1);
        const Outputs one = p.run();
        set_num_threads(std::max(2, restore.threads));
        const Outputs many = p.run();
        EXPECT_TRUE(bitwise_equal(one.fwd, many.fwd)) << what << ": forward depends on the thread count";
        EXPECT_TRUE(bitwise_equal(one.grads, many.grads)) << what << ": backward depends on the thread count";
        const Outputs again = p.run();
        EXPECT_TRUE(bitwise_equal(many.grads, again.grads)) << what << ": backward is not deterministic";
        expect_close(many.fwd, ref.fwd, tol, tol, what + " forward vs f64 reference");
        expect_close(many.grads, ref.grads, tol, tol, what + " grads vs f64 reference");
        expect_close(many.fwd, generic.fwd, tol / 2, tol / 2, what + " forward vs generic");
        expect_close(many.grads, generic.grads, tol / 2, tol / 2, what + " grads vs generic");
      }
    }
}

}  // namespace
}  // namespace alk::cpu
