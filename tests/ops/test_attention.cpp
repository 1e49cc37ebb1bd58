// scaled_dot_product_attention: forward against a float64 naive reference (explicit
// scores, mask, softmax, matmul), gradients by central differences and against the same
// attention composed from alk ops (matmul, where-mask, softmax), strided inputs, the
// causal alignment when S != T, determinism across thread counts, and error messages.
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>

#include "alk/kernel.h"  // numel
#include "backend/cpu/thread_pool.h"
#include "error_expect.h"
#include "ops/ops.h"
#include "testing.h"

namespace alk {
namespace {

using testing::gradcheck;

Shape with_tail(Shape lead, int64_t a, int64_t b) {
  lead.insert(lead.end(), {a, b});
  return lead;
}

Tensor random_f64(const Shape& shape, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> n(0.0, scale);
  std::vector<double> v(static_cast<size_t>(alk::numel(shape)));
  for (double& x : v) x = n(rng);
  return tensor(v, shape);
}

// Float64 reference over the logical (row-major) values; batch dims flattened. Rows that
// see no key (causal with S < T) are 0.
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, int64_t B, int64_t T, int64_t S, int64_t D,
                                    bool causal, double scale) {
  std::vector<double> out(static_cast<size_t>(B * T * D), 0.0);
  std::vector<double> scores(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < S; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += q[(b * T + t) * D + d] * k[(b * S + s) * D + d];
        const bool visible = !causal || s <= t + (S - T);
        scores[s] = visible ? dot * scale : -std::numeric_limits<double>::infinity();
        mx = std::max(mx, scores[s]);
      }
      if (mx == -std::numeric_limits<double>::infinity()) continue;
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += (scores[s] = std::exp(scores[s] - mx));
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) out[(b * T + t) * D + d] += scores[s] / sum * v[(b * S + s) * D + d];
    }
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    if (++reported >= 5) return;
  }
}

// The same attention composed from ordinary ops (materializes the T x S scores).
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t T = q.size(-2), S = k.size(-2);
  Tensor s = matmul(q, k.transpose(-1, -2)) * scale;
  if (causal) {
    std::vector<uint8_t> m(static_cast<size_t>(T * S));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < S; ++j) m[t * S + j] = j <= t + (S - T);
    s = where(tensor(m, {T, S}, DType::Bool), s, -1e30);
  }
  return matmul(softmax(s, -1), v);
}

struct Case {
  Shape lead;
  int64_t T, S, D;
  bool causal;
};

std::string name_of(const Case& c) {
  return "lead " + to_string(c.lead) + " T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " D " +
         std::to_string(c.D) + (c.causal ? " causal" : " full");
}

const std::vector<Case>& forward_cases() {
  static const std::vector<Case> cases = {
      {{2, 3}, 37, 37, 16, true},  {{2, 3}, 37, 37, 16, false}, {{}, 1, 1, 8, true},     {{2}, 1, 20, 8, true},
      {{2}, 1, 20, 8, false},      {{3}, 37, 50, 64, true},     {{3}, 37, 50, 64, false}, {{2, 3}, 20, 9, 8, true},
      {{2, 3}, 20, 9, 8, false},   {{1}, 70, 70, 8, true},      {{2}, 64, 96, 16, true},  {{2, 1}, 5, 33, 8, false},
  };
  return cases;
}

void check_forward(DType dtype, double atol, double rtol) {
  std::mt19937 rng(42);
  for (const Case& c : forward_cases()) {
    SCOPED_TRACE(name_of(c) + " " + std::string(dtype_name(dtype)));
    Tensor q = random_f64(with_tail(c.lead, c.T, c.D), rng).to(dtype);
    Tensor k = random_f64(with_tail(c.lead, c.S, c.D), rng).to(dtype);
    Tensor v = random_f64(with_tail(c.lead, c.S, c.D), rng).to(dtype);
    Tensor y = scaled_dot_product_attention(q, k, v, c.causal);
    EXPECT_EQ(y.shape(), with_tail(c.lead, c.T, c.D));
    EXPECT_EQ(y.dtype(), dtype);
    const int64_t B = alk::numel(c.lead);
    // The reference sees the same (rounded) inputs the op saw.
    auto want = naive_attention(q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(), B, c.T, c.S,
                                c.D, c.causal, 1.0 / std::sqrt(static_cast<double>(c.D)));
    expect_close(y.to_vector<double>(), want, atol, rtol, "output");
  }
}

TEST(Attention, ForwardF64) { check_forward(DType::F64, 1e-12, 1e-10); }
TEST(Attention, ForwardF32) { check_forward(DType::F32, 2e-6, 1e-5); }
TEST(Attention, ForwardBF16) { check_forward(DType::BF16, 2e-2, 2e-2); }
TEST(Attention, ForwardF16) { check_forward(DType::F16, 4e-3, 4e-3); }

TEST(Attention, ExplicitScaleAndPromotion) {
  std::mt19937 rng(5);
  Tensor q = random_f64({2, 6, 8}, rng).to(DType::F32);
  Tensor k = random_f64({2, 9, 8}, rng);  // f64: promotes the op to f64
  Tensor v = random_f64({2, 9, 8}, rng).to(DType::BF16);
  Tensor y = scaled_dot_product_attention(q, k, v, false, 0.3);
  EXPECT_EQ(y.dtype(), DType::F64);
  auto want = naive_attention(q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(), 2, 6, 9, 8, false,
                              0.3);
  expect_close(y.to_vector<double>(), want, 1e-12, 1e-10, "output");

  // Integer inputs become f32.
  Tensor qi = tensor(std::vector<int64_t>{1, 0, 0, 1}, {2, 2});
  Tensor yi = scaled_dot_product_attention(qi, qi, qi);
  EXPECT_EQ(yi.dtype(), DType::F32);
  auto wi = naive_attention({1, 0, 0, 1}, {1, 0, 0, 1}, {1, 0, 0, 1}, 1, 2, 2, 2, true, 1 / std::sqrt(2.0));
  expect_close(yi.to_vector<double>(), wi, 1e-6, 1e-6, "integer output");
}

TEST(Attention, StridedInputs) {
  std::mt19937 rng(9);
  const int64_t B = 2, T = 37, S = 45, H = 3, D = 16;
  for (DType dtype : {DType::F32, DType::F64}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (causal ? " causal" : " full"));
      // [B, T, H, D] -> [B, H, T, D]: the usual head split.
      Tensor q = random_f64({B, T, H, D}, rng).to(dtype).transpose(1, 2);
      // k: a column slice of a wider tensor (row stride 2D), v: transposed from [S, B, H, D].
      Tensor k = random_f64({B, H, S, 2 * D}, rng).to(dtype).slice(-1, D, 2 * D);
      Tensor v = random_f64({S, B, H, D}, rng).to(dtype).permute({1, 2, 0, 3});
      ASSERT_FALSE(q.is_contiguous());
      ASSERT_FALSE(k.is_contiguous());
      ASSERT_FALSE(v.is_contiguous());
      Tensor y = scaled_dot_product_attention(q, k, v, causal);
      auto want = naive_attention(q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(), B * H, T, S,
                                  D, causal, 1.0 / std::sqrt(static_cast<double>(D)));
      const double tol = dtype == DType::F64 ? 1e-12 : 2e-6;
      expect_close(y.to_vector<double>(), want, tol, tol * 10, "output");
      // 3-D [T, B, D] transposed to [B, T, D]: the kernel reads it with its strides.
      Tensor q3 = random_f64({T, B, D}, rng).to(dtype).transpose(0, 1);
      Tensor k3 = random_f64({S, B, D}, rng).to(dtype).transpose(0, 1);
      Tensor v3 = random_f64({S, B, D}, rng).to(dtype).transpose(0, 1);
      Tensor y3 = scaled_dot_product_attention(q3, k3, v3, causal);
      auto want3 = naive_attention(q3.to_vector<double>(), k3.to_vector<double>(), v3.to_vector<double>(), B, T, S,
                                   D, causal, 1.0 / std::sqrt(static_cast<double>(D)));
      expect_close(y3.to_vector<double>(), want3, tol, tol * 10, "3-D output");
    }
  }
}

TEST(Attention, CausalAlignsLastQueryWithLastKey) {
  // S < T: query t sees keys s <= t - (T - S); the first T - S rows see nothing.
  std::mt19937 rng(3);
  const int64_t T = 7, S = 4, D = 8;
  Tensor q = random_f64({T, D}, rng).requires_grad_();
  Tensor k = random_f64({S, D}, rng).requires_grad_();
  Tensor v = random_f64({S, D}, rng).requires_grad_();
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  auto yv = y.to_vector<double>();
  for (int64_t i = 0; i < (T - S) * D; ++i) EXPECT_EQ(yv[static_cast<size_t>(i)], 0.0) << i;
  // The last S rows are ordinary causal attention over all S keys.
  Tensor tail = scaled_dot_product_attention(q.slice(0, T - S, T), k, v, true);
  expect_close(y.slice(0, T - S, T).to_vector<double>(), tail.to_vector<double>(), 1e-14, 1e-12, "aligned rows");
  // Last query, S > T: sees every key.
  Tensor q1 = q.slice(0, T - 1, T);
  Tensor full = scaled_dot_product_attention(q1, k, v, false), causal = scaled_dot_product_attention(q1, k, v, true);
  expect_close(causal.to_vector<double>(), full.to_vector<double>(), 1e-14, 1e-12, "last query");
  // The masked rows get zero gradient and pass none on.
  auto g = grad({sum(y * y)}, {q, k, v});
  auto gq = g[0].to_vector<double>();
  for (int64_t i = 0; i < (T - S) * D; ++i) EXPECT_EQ(gq[static_cast<size_t>(i)], 0.0) << i;
  for (auto& t : g)
    for (double x : t.to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
}

TEST(Attention, Gradcheck) {
  std::mt19937 rng(17);
  struct G {
    Shape lead;
    int64_t T, S, D;
    bool causal;
  };
  const G cases[] = {{{2}, 3, 5, 4, false}, {{2}, 4, 4, 3, true}, {{}, 5, 3, 4, true},
                     {{2, 1}, 3, 6, 2, true}, {{}, 1, 4, 3, false}};
  for (const G& c : cases) {
    SCOPED_TRACE(name_of({c.lead, c.T, c.S, c.D, c.causal}));
    bool causal = c.causal;
    gradcheck([causal](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
              {random_f64(with_tail(c.lead, c.T, c.D), rng).requires_grad_(),
               random_f64(with_tail(c.lead, c.S, c.D), rng).requires_grad_(),
               random_f64(with_tail(c.lead, c.S, c.D), rng).requires_grad_()});
  }
  // q, k, v as [B, H, T, D] views of one [B, T, 3, H, D] projection (batch strides that do
  // not merge: the kernels read them in place), gradients flowing back into the projection.
  gradcheck([](auto& x) {
    auto part = [&](int64_t i) { return x[0].select(2, i).transpose(1, 2); };
    return scaled_dot_product_attention(part(0), part(1), part(2), true);
  }, {random_f64({2, 5, 3, 2, 4}, rng).requires_grad_()});
  // The same through the packed entry, whose gradient is one view of the backward's output.
  for (bool causal : {true, false})
    gradcheck([causal](auto& x) { return scaled_dot_product_attention_qkv(x[0], causal, Loc::current()); },
              {random_f64({2, 5, 3, 2, 4}, rng).requires_grad_()});
  // A custom scale, and only some inputs requiring grad.
  gradcheck([](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true, 0.7); },
            {random_f64({2, 4, 3}, rng), random_f64({2, 6, 3}, rng).requires_grad_(),
             random_f64({2, 6, 3}, rng).requires_grad_()});
}

// Values and gradients of sum(y * w) against the composed reference, on shapes that span
// several query and key tiles.
void check_against_composed(DType dtype, double atol, double rtol) {
  std::mt19937 rng(23);
  const Case cases[] = {{{2, 3}, 37, 37, 16, true}, {{2}, 20, 45, 8, false}, {{2}, 70, 70, 8, true},
                        {{1}, 33, 100, 32, true},   {{3}, 65, 40, 16, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(name_of(c) + " " + std::string(dtype_name(dtype)));
    Tensor q = random_f64(with_tail(c.lead, c.T, c.D), rng).to(dtype).requires_grad_();
    Tensor k = random_f64(with_tail(c.lead, c.S, c.D), rng).to(dtype).requires_grad_();
    Tensor v = random_f64(with_tail(c.lead, c.S, c.D), rng).to(dtype).requires_grad_();
    Tensor w = random_f64(with_tail(c.lead, c.T, c.D), rng).to(dtype);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    Tensor y = scaled_dot_product_attention(q, k, v, c.causal);
    Tensor r = composed_attention(q, k, v, c.causal, scale);
    expect_close(y.to_vector<double>(), r.to_vector<double>(), atol, rtol, "output");
    auto gy = grad({sum(y * w)}, {q, k, v});
    auto gr = grad({sum(r * w)}, {q, k, v});
    const char* names[] = {"dq", "dk", "dv"};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(gy[i].shape(), gr[i].shape());
      expect_close(gy[i].to_vector<double>(), gr[i].to_vector<double>(), atol, rtol, names[i]);
    }
  }
}

TEST(Attention, MatchesComposedF64) { check_against_composed(DType::F64, 1e-11, 1e-9); }
TEST(Attention, MatchesComposedF32) { check_against_composed(DType::F32, 2e-5, 1e-4); }

TEST(Attention, BF16Gradients) {
  // bf16 inputs and outputs, f32 accumulation: compared loosely with the f64 composition.
  std::mt19937 rng(29);
  Tensor q = random_f64({2, 40, 16}, rng).to(DType::BF16).requires_grad_();
  Tensor k = random_f64({2, 40, 16}, rng).to(DType::BF16).requires_grad_();
  Tensor v = random_f64({2, 40, 16}, rng).to(DType::BF16).requires_grad_();
  Tensor w = random_f64({2, 40, 16}, rng);
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  auto gy = grad({sum(y.to(DType::F64) * w)}, {q, k, v});
  std::vector<Tensor> x64;
  for (const Tensor& t : {q, k, v}) x64.push_back(t.detach().to(DType::F64).requires_grad_());
  Tensor r = composed_attention(x64[0], x64[1], x64[2], true, 0.25);
  auto gr = grad({sum(r * w)}, x64);
  expect_close(y.to_vector<double>(), r.to_vector<double>(), 2e-2, 2e-2, "output");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(gy[i].dtype(), DType::BF16);
    expect_close(gy[i].to_vector<double>(), gr[i].to_vector<double>(), 5e-2, 5e-2, "grad " + std::to_string(i));
  }
}

// The packed entry computes what the three select views do, values and gradients bit for
// bit (the same kernels; only the gradient's assembly differs), in f32 and under autocast.
TEST(Attention, PackedQkvMatchesSelectViews) {
  std::mt19937 rng(29);
  for (bool mixed : {false, true}) {
    SCOPED_TRACE(mixed ? "bf16 autocast" : "f32");
    const Tensor base = random_f64({2, 7, 3, 2, 8}, rng).to(DType::F32);
    const Tensor w = random_f64({2, 2, 7, 8}, rng).to(DType::F32);
    auto run = [&](bool packed) {
      Tensor qkv = base.detach().requires_grad_();
      Tensor y;
      {
        std::optional<Autocast> ac;
        if (mixed) ac.emplace(DType::BF16);
        auto part = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };
        y = packed ? scaled_dot_product_attention_qkv(qkv, true, Loc::current())
                   : scaled_dot_product_attention(part(0), part(1), part(2), true);
      }
      sum(y.to(DType::F32) * w).backward();
      return std::pair{y.to(DType::F32).to_vector<float>(), qkv.grad().to_vector<float>()};
    };
    const auto [y_views, g_views] = run(false);
    const auto [y_packed, g_packed] = run(true);
    EXPECT_EQ(y_packed, y_views);
    EXPECT_EQ(g_packed, g_views);
  }
  EXPECT_ALK_ERROR(scaled_dot_product_attention_qkv(zeros({2, 7, 2, 2, 8}), true, Loc::current()), "scaled_dot_product_attention", "[B, T, 3, H, D]", "[2, 7, 2, 2, 8]");
}

TEST(Attention, EmptySizes) {
  // No keys: every row sees nothing, so the output and dq are 0.
  Tensor q = ones({2, 3, 4}).requires_grad_(), k = ones({2, 0, 4}).requires_grad_(), v = ones({2, 0, 4});
  for (bool causal : {false, true}) {
    Tensor y = scaled_dot_product_attention(q, k, v, causal);
    for (float x : y.to_vector<float>()) EXPECT_EQ(x, 0.0f);
    auto g = grad({sum(y)}, {q, k});
    for (float x : g[0].to_vector<float>()) EXPECT_EQ(x, 0.0f);
    EXPECT_EQ(g[1].shape(), (Shape{2, 0, 4}));
  }
  EXPECT_EQ(scaled_dot_product_attention(ones({2, 0, 4}), ones({2, 5, 4}), ones({2, 5, 4})).shape(),
            (Shape{2, 0, 4}));
  EXPECT_EQ(scaled_dot_product_attention(ones({0, 3, 4}), ones({0, 5, 4}), ones({0, 5, 4})).numel(), 0);
}

TEST(Attention, BackwardThroughViewsAndLeaves) {
  // Gradients flow back through the head split and reach the leaves' .grad.
  std::mt19937 rng(31);
  const int64_t B = 2, T = 10, H = 2, D = 4;
  Tensor x = random_f64({B, T, 3 * H * D}, rng).requires_grad_();
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, D}).transpose(1, 2); };
  auto parts = split(x, H * D, -1);
  Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]));
  sum(y * y).backward();
  Tensor r = composed_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), true, 0.5);
  auto gr = grad({sum(r * r)}, {x});
  ASSERT_TRUE(x.grad().defined());
  expect_close(x.grad().to_vector<double>(), gr[0].to_vector<double>(), 1e-11, 1e-9, "x.grad");
}

TEST(Attention, DeterministicAcrossThreadCounts) {
  std::mt19937 rng(77);
  const int64_t B = 4, T = 100, S = 130, D = 16;
  Tensor q = random_f64({B, T, D}, rng).to(DType::F32);
  Tensor k = random_f64({B, S, D}, rng).to(DType::F32);
  Tensor v = random_f64({B, S, D}, rng).to(DType::F32);
  Tensor w = random_f64({B, T, D}, rng).to(DType::F32);
  const int saved = cpu::num_threads();
  auto run = [&](int threads) {
    cpu::set_num_threads(threads);
    Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(), vv = v.detach().requires_grad_();
    Tensor y = scaled_dot_product_attention(qq, kk, vv, true);
    auto g = grad({sum(y * w)}, {qq, kk, vv});
    std::vector<std::vector<float>> all{y.to_vector<float>()};
    for (auto& t : g) all.push_back(t.to_vector<float>());
    return all;
  };
  auto one = run(1), four = run(4);
  cpu::set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(one[i] == four[i]) << "tensor " << i << " differs";
}

TEST(Attention, NoGradRecordsNothing) {
  std::mt19937 rng(1);
  Tensor q = random_f64({2, 3, 4}, rng).requires_grad_();
  {
    NoGradGuard guard;
    EXPECT_FALSE(scaled_dot_product_attention(q, q, q).requires_grad());
  }
  EXPECT_TRUE(scaled_dot_product_attention(q, q, q).requires_grad());
  EXPECT_FALSE(scaled_dot_product_attention(q.detach(), q.detach(), q.detach()).requires_grad());
}

void expect_attention_error(const std::function<void()>& fn, unsigned line, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown (line " << line << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "scaled_dot_product_attention") << e.what();
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_NE(std::string(e.file()).find("test_attention.cpp"), std::string::npos) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Attention, Errors) {
  Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 4});
  expect_attention_error([&] { (void)scaled_dot_product_attention(zeros({4}), k, v); }, __LINE__,
                         {"rank >= 2", "q [4]", "k [2, 5, 4]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, zeros({3, 5, 4}), v); }, __LINE__,
                         {"batch dims", "k [3, 5, 4]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, zeros({5, 4}), v); }, __LINE__,
                         {"same rank", "k [5, 4]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, zeros({2, 5, 3}), v); }, __LINE__,
                         {"last dim", "q [2, 3, 4]", "k [2, 5, 3]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, k, zeros({2, 6, 4})); }, __LINE__,
                         {"number of keys", "v [2, 6, 4]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, k, zeros({2, 5, 8})); }, __LINE__,
                         {"last dim", "v [2, 5, 8]"});
  expect_attention_error([&] { (void)scaled_dot_product_attention(q, Tensor(), v); }, __LINE__, {});
}

}  // namespace
}  // namespace alk
