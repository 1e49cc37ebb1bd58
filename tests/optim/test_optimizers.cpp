// Optimizers against hand-written float64 versions of torch.optim's update rules (SGD with
// momentum/dampening/nesterov/weight decay, Adam with L2 decay, AdamW with decoupled decay
// and its default rank >= 2 filter), state_dict round trips, clip_grad_norm and the
// learning-rate schedules.
#include <cmath>
#include <cstdio>
#include <memory>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "alk/io.h"
#include "alk/optim.h"
#include "io/temp_dir.h"
#include "testing.h"

namespace alk {
namespace {

using Vec = std::vector<double>;

// The learning rate and bias corrections reach the kernels as f32 0-d tensors (optim.h), so
// f64 parameters agree with an all-f64 reference to ~1e-7 relative, not to the last bit.
constexpr double kTol = 2e-7;

void expect_close(const Vec& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], kTol * (1 + std::fabs(want[i]))) << what << " element " << i;
}

// Loss 0.5 * sum(a * p^2) + sum(c * p): gradient a * p + c (changes with p, so momentum
// and moment estimates see a different gradient at every step).
struct Quadratic {
  Vec a, c;
  Tensor loss(const Tensor& p) const {
    Shape s = p.shape();
    return sum(tensor(a, s) * p * p * 0.5 + tensor(c, s) * p);
  }
  Vec grad(const Vec& p) const {
    Vec g(p.size());
    for (size_t i = 0; i < p.size(); ++i) g[i] = a[i] * p[i] + c[i];
    return g;
  }
};

Tensor leaf(const Vec& v, Shape s) { return tensor(v, std::move(s)).requires_grad_(); }

// ---- reference rules (torch.optim) ----
struct SgdRef {
  SgdRef(double lr_, double m, double d, double w, bool n) : lr(lr_), momentum(m), dampening(d), wd(w), nesterov(n) {}
  double lr, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false;
  Vec buf;
  int t = 0;
  void step(Vec& p, Vec g) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      if (wd != 0) g[i] += wd * p[i];
      if (momentum != 0) {
        if (buf.empty()) buf.assign(p.size(), 0);
        buf[i] = t == 1 ? g[i] : momentum * buf[i] + (1 - dampening) * g[i];
        g[i] = nesterov ? g[i] + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g[i];
    }
  }
};

struct AdamRef {
  explicit AdamRef(double lr_, double b1_ = 0.9, double b2_ = 0.999, double eps_ = 1e-8)
      : lr(lr_), b1(b1_), b2(b2_), eps(eps_) {}
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  bool decoupled = false;
  Vec m, v;
  int t = 0;
  void step(Vec& p, Vec g) {
    ++t;
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g[i] += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

const Quadratic kQ{{1.0, 2.0, 0.5, 3.0, 0.25, 1.5}, {0.3, -0.7, 1.1, 0.2, -0.4, 0.9}};
const Vec kP0{0.5, -1.0, 2.0, 0.1, -0.3, 1.2};

template <class Ref>
void run_and_compare(optim::Optimizer& opt, Tensor& p, Ref ref, int steps, const std::string& what) {
  Vec want = kP0;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    kQ.loss(p).backward();
    ref.step(want, kQ.grad(want));
    opt.step();
    expect_close(p.to_vector<double>(), want, what + " step " + std::to_string(s + 1));
  }
  EXPECT_EQ(opt.steps(), steps);
}

struct SgdCase {
  const char* name;
  optim::SGDOptions o;
};

TEST(Optim, SgdVariantsMatchTorchRules) {
  const SgdCase cases[] = {
      {"plain", {}},
      {"momentum", {.momentum = 0.9}},
      {"dampening", {.momentum = 0.9, .dampening = 0.3}},
      {"nesterov", {.momentum = 0.8, .nesterov = true}},
      {"weight_decay", {.weight_decay = 0.1}},
      {"all", {.momentum = 0.7, .dampening = 0.1, .weight_decay = 0.05}},
      {"nesterov_wd", {.momentum = 0.9, .weight_decay = 0.02, .nesterov = true}},
  };
  for (const SgdCase& c : cases) {
    Tensor p = leaf(kP0, {2, 3});
    optim::SGD opt({{"p", p}}, 0.1, c.o);
    SgdRef ref{0.1, c.o.momentum, c.o.dampening, c.o.weight_decay, c.o.nesterov};
    run_and_compare(opt, p, ref, 5, c.name);
  }
}

TEST(Optim, SgdPlainStepIsExactForFixedGradient) {
  // grad = c from loss = sum(p * c); lr = 0.25 is exact in f32, so the result is exact.
  Tensor p = leaf({1, 2, 3}, {3});
  const Vec c{0.5, -1, 2};
  optim::SGD opt({{"p", p}}, 0.25);
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    sum(p * tensor(c, {3})).backward();
    opt.step();
  }
  EXPECT_EQ(p.to_vector<double>(), (Vec{1 - 3 * 0.125, 2 + 3 * 0.25, 3 - 3 * 0.5}));
}

TEST(Optim, AdamWithL2WeightDecayMatchesTorch) {
  for (double wd : {0.0, 0.1}) {
    Tensor p = leaf(kP0, {6});  // 1-D: Adam's L2 decay applies to every parameter
    optim::Adam opt({{"p", p}}, 0.05, {.weight_decay = wd});
    AdamRef ref{0.05};
    ref.wd = wd;
    run_and_compare(opt, p, ref, 5, "adam wd=" + std::to_string(wd));
  }
  // Non-default betas and eps.
  Tensor p = leaf(kP0, {3, 2});
  optim::Adam opt({{"p", p}}, 0.01, {.beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3});
  AdamRef ref{0.01, 0.5, 0.9, 1e-3};
  run_and_compare(opt, p, ref, 4, "adam betas");
}

TEST(Optim, AdamWDecoupledDecayWithDefaultFilter) {
  Tensor w = leaf(kP0, {2, 3});  // rank 2: decays
  Tensor b = leaf(kP0, {6});     // rank 1: does not
  optim::AdamW opt({{"w", w}, {"b", b}}, 0.05, {.weight_decay = 0.5});
  AdamRef rw{0.05}, rb{0.05};
  rw.wd = 0.5;
  rw.decoupled = true;
  rb.decoupled = true;  // wd 0
  Vec ww = kP0, wb = kP0;
  for (int s = 0; s < 4; ++s) {
    opt.zero_grad();
    (kQ.loss(w) + kQ.loss(b)).backward();
    rw.step(ww, kQ.grad(ww));
    rb.step(wb, kQ.grad(wb));
    opt.step();
    expect_close(w.to_vector<double>(), ww, "adamw weight step " + std::to_string(s + 1));
    expect_close(b.to_vector<double>(), wb, "adamw bias step " + std::to_string(s + 1));
  }
  // The decay made a real difference to the weight.
  EXPECT_GT(std::fabs(w.to_vector<double>()[2] - b.to_vector<double>()[2]), 1e-3);
}

TEST(Optim, AdamWCustomDecayFilter) {
  Tensor w = leaf(kP0, {2, 3});
  Tensor b = leaf(kP0, {6});
  optim::AdamOptions o{.weight_decay = 0.5};
  o.decay = [](const std::string& name, const Tensor&) { return name == "b"; };
  optim::AdamW opt({{"w", w}, {"b", b}}, 0.05, o);
  AdamRef rw{0.05}, rb{0.05};
  rw.decoupled = rb.decoupled = true;
  rb.wd = 0.5;
  Vec ww = kP0, wb = kP0;
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    (kQ.loss(w) + kQ.loss(b)).backward();
    rw.step(ww, kQ.grad(ww));
    rb.step(wb, kQ.grad(wb));
    opt.step();
  }
  expect_close(w.to_vector<double>(), ww, "filtered-out weight");
  expect_close(b.to_vector<double>(), wb, "filtered-in bias");
}

TEST(Optim, AdamFirstStepMovesEachCoordinateByLr) {
  // Bias correction: the first Adam step is lr * g / (|g| + eps') = ~lr * sign(g).
  Tensor p = leaf({0, 0, 0}, {3});
  optim::Adam opt({{"p", p}}, 0.01);
  sum(p * tensor(Vec{3, -0.001, 50}, {3})).backward();
  opt.step();
  auto v = p.to_vector<double>();
  EXPECT_NEAR(v[0], -0.01 * 3 / (3 + 1e-8), 1e-9);
  EXPECT_NEAR(v[1], 0.01 * 0.001 / (0.001 + 1e-8), 1e-9);
  EXPECT_NEAR(v[2], -0.01 * 50 / (50 + 1e-8), 1e-9);
}

TEST(Optim, ParametersWithoutGradAreSkipped) {
  Tensor p = leaf({1, 2}, {2}), q = leaf({3, 4}, {2});
  optim::Adam opt({{"p", p}, {"q", q}}, 0.1);
  sum(p * 2.0).backward();
  opt.step();
  EXPECT_EQ(q.to_vector<double>(), (Vec{3, 4}));
  EXPECT_NE(p.to_vector<double>(), (Vec{1, 2}));
  std::vector<std::string> keys;
  for (auto& [k, t] : opt.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "p.step", "p.exp_avg", "p.exp_avg_sq"}));
  EXPECT_EQ(opt.param_steps(0), 1);
  EXPECT_EQ(opt.param_steps(1), 0);
}

// torch.optim keeps a step count per parameter (state["step"]): a parameter whose first
// gradient arrives at the optimizer's 3rd step gets the bias corrections of ITS first step.
TEST(Optim, AdamBiasCorrectionCountsEachParametersOwnSteps) {
  Tensor p = leaf({1, 2}, {2}), q = leaf({0, 0}, {2});
  optim::Adam opt({{"p", p}, {"q", q}}, 0.01);
  for (int s = 0; s < 2; ++s) {
    opt.zero_grad();
    sum(p * p).backward();
    opt.step();
  }
  opt.zero_grad();
  sum(p * p + q * tensor(Vec{4, -4}, {2})).backward();
  opt.step();
  // q's first update is ~lr * sign(g) (as in AdamFirstStepMovesEachCoordinateByLr), not
  // scaled by the bias corrections of step 3.
  auto v = q.to_vector<double>();
  EXPECT_NEAR(v[0], -0.01, 1e-8);
  EXPECT_NEAR(v[1], 0.01, 1e-8);
}

// torch.optim.SGD: a parameter's momentum buffer starts as its first gradient, whenever that is.
TEST(Optim, SgdMomentumBufferStartsAtEachParametersFirstGradient) {
  Tensor p = leaf({1}, {1}), q = leaf({0}, {1});
  optim::SGD opt({{"p", p}, {"q", q}}, 0.5, {.momentum = 0.9, .dampening = 0.5});
  opt.zero_grad();
  sum(p).backward();
  opt.step();
  opt.zero_grad();
  sum(p + q).backward();  // q's first gradient: 1
  opt.step();
  EXPECT_NEAR(q.to_vector<double>()[0], -0.5, 1e-7);  // buf = g = 1 (no dampening on the first)
}

// A deep copy of a state dict (fresh buffers with the same values).
optim::NamedTensors deep_copy(const optim::NamedTensors& sd) {
  optim::NamedTensors out;
  for (auto& [k, t] : sd) {
    Tensor c = t.dtype() == DType::I64 ? tensor(t.to_vector<int64_t>(), t.shape())
                                       : tensor(t.to_vector<double>(), t.shape()).to(t.dtype());
    c.realize();
    out.emplace_back(k, c);
  }
  return out;
}

template <class Make>
void check_state_round_trip(Make make, bool copy, const std::string& what) {
  Tensor p1 = leaf(kP0, {2, 3});
  auto opt1 = make(p1);
  for (int s = 0; s < 2; ++s) {
    opt1->zero_grad();
    kQ.loss(p1).backward();
    opt1->step();
  }
  // A fresh optimizer on a copy of the parameter, loaded from opt1's state.
  Tensor p2 = leaf(p1.to_vector<double>(), {2, 3});
  auto opt2 = make(p2);
  opt2->load_state_dict(copy ? deep_copy(opt1->state_dict()) : opt1->state_dict());
  EXPECT_EQ(opt2->steps(), 2) << what;
  for (int s = 0; s < 3; ++s) {
    opt1->zero_grad();
    kQ.loss(p1).backward();
    opt1->step();
    opt2->zero_grad();
    kQ.loss(p2).backward();
    opt2->step();
    EXPECT_EQ(p2.to_vector<double>(), p1.to_vector<double>()) << what << " step " << s + 3;
  }
}

auto make_adamw = [](Tensor& p) {
  return std::make_unique<optim::AdamW>(optim::NamedTensors{{"p", p}}, 0.05, optim::AdamOptions{.weight_decay = 0.1});
};
auto make_sgd = [](Tensor& p) {
  return std::make_unique<optim::SGD>(optim::NamedTensors{{"p", p}}, 0.05, optim::SGDOptions{.momentum = 0.9});
};

TEST(Optim, StateDictRoundTripContinuesIdentically) {
  check_state_round_trip(make_adamw, true, "adamw");
  check_state_round_trip(make_sgd, true, "sgd momentum");
}

TEST(Optim, StateDictRoundTripThroughSafetensors) {
  Tensor p1 = leaf(kP0, {2, 3});
  auto opt1 = make_adamw(p1);
  for (int s = 0; s < 3; ++s) {
    opt1->zero_grad();
    kQ.loss(p1).backward();
    opt1->step();
  }
  const alk::testing::TempDir dir;  // Optim.* and VulkanOptim run this at once under ctest -j2
  const std::string path = dir / "optim_state.safetensors";
  save_safetensors(path, opt1->state_dict());
  Tensor p2 = leaf(p1.to_vector<double>(), {2, 3});
  auto opt2 = make_adamw(p2);
  opt2->load_state_dict(load_safetensors(path).tensors);
  std::remove(path.c_str());
  EXPECT_EQ(opt2->steps(), 3);
  for (int s = 0; s < 2; ++s) {
    for (auto* o : {opt1.get(), opt2.get()}) {
      Tensor& p = o == opt1.get() ? p1 : p2;
      o->zero_grad();
      kQ.loss(p).backward();
      o->step();
    }
    EXPECT_EQ(p2.to_vector<double>(), p1.to_vector<double>()) << "step " << s + 4;
  }
}

// Loading opt1's state_dict() directly (no copy): the loaded optimizer must own its state.
// Module::load_state_dict gives the model its own handles; Optimizer::load_state_dict keeps
// the caller's handles as its slots, so opt1's next step (assign_ on its slots) rewrites
// opt2's state as well.
TEST(Optim, LoadedStateIsNotAnAliasOfTheSource) {
  check_state_round_trip(make_adamw, false, "adamw");
  check_state_round_trip(make_sgd, false, "sgd momentum");
}

TEST(Optim, StateDictKeysAndValues) {
  Tensor w = leaf(kP0, {2, 3});
  optim::Adam opt({{"layer.w", w}}, 0.05);
  AdamRef ref{0.05};
  Vec pw = kP0;
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    kQ.loss(w).backward();
    ref.step(pw, kQ.grad(pw));
    opt.step();
  }
  auto sd = opt.state_dict();
  std::map<std::string, Tensor> by_name(sd.begin(), sd.end());
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[0].first, "step");
  EXPECT_EQ(sd[0].second.item(), 3);
  ASSERT_TRUE(by_name.count("layer.w.step"));
  EXPECT_EQ(by_name["layer.w.step"].item(), 3);
  ASSERT_TRUE(by_name.count("layer.w.exp_avg"));
  ASSERT_TRUE(by_name.count("layer.w.exp_avg_sq"));
  expect_close(by_name["layer.w.exp_avg"].to_vector<double>(), ref.m, "exp_avg");
  expect_close(by_name["layer.w.exp_avg_sq"].to_vector<double>(), ref.v, "exp_avg_sq");
  // Errors: unknown parameter, wrong shape, no step.
  optim::Adam other({{"layer.w", leaf(kP0, {2, 3})}}, 0.05);
  auto bad = sd;
  for (auto& kv : bad)
    if (kv.first == "layer.w.exp_avg") kv.first = "nope.exp_avg";
  EXPECT_THROW(other.load_state_dict(bad), Error);
  bad = sd;
  for (auto& kv : bad)
    if (kv.first == "layer.w.exp_avg_sq") kv.second = zeros({6}, DType::F64);
  EXPECT_THROW(other.load_state_dict(bad), Error);
  bad = sd;
  bad.erase(bad.begin());
  EXPECT_THROW(other.load_state_dict(bad), Error);
}

TEST(Optim, ClipGradNormScalesToMaxNorm) {
  Tensor a = leaf({0, 0, 0}, {3}), b = leaf({0, 0, 0, 0}, {2, 2});
  const Vec ca{3, -4, 12}, cb{1, 2, -2, 4};  // norm sqrt(9+16+144+1+4+4+16) = sqrt(194)
  auto set_grads = [&] {
    a.zero_grad();
    b.zero_grad();
    (sum(a * tensor(ca, {3})) + sum(b * tensor(cb, {2, 2}))).backward();
  };
  set_grads();
  const double norm = std::sqrt(194.0);
  double got = optim::clip_grad_norm({a, b}, 2.0);
  EXPECT_NEAR(got, norm, 1e-5 * norm);
  const double coef = 2.0 / (norm + 1e-6);
  auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  double sq = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(ga[i], ca[i] * coef, 1e-6);
    sq += ga[i] * ga[i];
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(gb[i], cb[i] * coef, 1e-6);
    sq += gb[i] * gb[i];
  }
  EXPECT_NEAR(std::sqrt(sq), 2.0, 1e-5);
  // An optimizer step uses the clipped gradient.
  optim::SGD opt({{"a", a}}, 1.0);
  opt.step();
  expect_close(a.to_vector<double>(), {-ca[0] * coef, -ca[1] * coef, -ca[2] * coef}, "step after clip");

  // Below max_norm: unchanged, and the norm is still returned.
  set_grads();
  EXPECT_NEAR(optim::clip_grad_norm({a, b}, 100.0), norm, 1e-5 * norm);
  EXPECT_EQ(a.grad().to_vector<double>(), ca);
  EXPECT_EQ(b.grad().to_vector<double>(), cb);
  // No gradients at all: 0.
  Tensor c = leaf({1}, {1});
  EXPECT_EQ(optim::clip_grad_norm({c}, 1.0), 0.0);
}

// ---------------- schedules ----------------

TEST(LrSchedule, ConstantAndLinear) {
  auto c = optim::constant_lr(0.3);
  EXPECT_EQ(c(0), 0.3);
  EXPECT_EQ(c(12345), 0.3);
  auto l = optim::linear_lr(1.0, 0.2, 8);
  EXPECT_DOUBLE_EQ(l(0), 1.0);
  EXPECT_DOUBLE_EQ(l(4), 0.6);
  EXPECT_DOUBLE_EQ(l(2), 0.8);
  EXPECT_DOUBLE_EQ(l(8), 0.2);
  EXPECT_DOUBLE_EQ(l(100), 0.2);  // held after the end
}

TEST(LrSchedule, CosineEndpointsAndMidpoint) {
  auto s = optim::cosine_lr(1.0, 100, 0.1);
  EXPECT_DOUBLE_EQ(s(0), 1.0);
  EXPECT_NEAR(s(50), 0.55, 1e-15);
  EXPECT_NEAR(s(25), 0.1 + 0.45 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_NEAR(s(100), 0.1, 1e-15);
  EXPECT_NEAR(s(500), 0.1, 1e-15);
  for (int64_t i = 1; i <= 100; ++i) EXPECT_LE(s(i), s(i - 1)) << i;
  auto z = optim::cosine_lr(2.0, 10);
  EXPECT_NEAR(z(10), 0.0, 1e-15);
  EXPECT_NEAR(z(5), 1.0, 1e-15);
}

TEST(LrSchedule, StepLr) {
  auto s = optim::step_lr(0.8, 3, 0.5);
  const double want[] = {0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2, 0.2, 0.1};
  for (int64_t i = 0; i < 10; ++i) EXPECT_DOUBLE_EQ(s(i), want[i]) << i;
}

TEST(LrSchedule, WarmupRampsThenRunsTheInnerSchedule) {
  auto s = optim::warmup(4, optim::cosine_lr(1.0, 10, 0.0));
  // Linear ramp towards the inner schedule's first value (nanoGPT: lr * (step + 1) / warmup).
  EXPECT_DOUBLE_EQ(s(0), 0.25);
  EXPECT_DOUBLE_EQ(s(1), 0.5);
  EXPECT_DOUBLE_EQ(s(2), 0.75);
  EXPECT_DOUBLE_EQ(s(3), 1.0);
  // Then the inner schedule, shifted by the warmup.
  EXPECT_DOUBLE_EQ(s(4), 1.0);
  EXPECT_NEAR(s(9), 0.5, 1e-15);
  EXPECT_NEAR(s(14), 0.0, 1e-15);
  auto none = optim::warmup(0, optim::step_lr(1.0, 2, 0.1));
  EXPECT_DOUBLE_EQ(none(0), 1.0);
  EXPECT_DOUBLE_EQ(none(2), 0.1);
}

TEST(LrSchedule, OptimizerUsesSetLr) {
  Tensor p = leaf({0}, {1});
  optim::SGD opt({{"p", p}}, 1.0);
  auto sched = optim::step_lr(0.5, 1, 0.5);  // 0.5, 0.25, 0.125: exact in f32
  double want = 0;
  for (int64_t s = 0; s < 3; ++s) {
    opt.set_lr(sched(s));
    EXPECT_EQ(opt.lr(), sched(s));
    opt.zero_grad();
    sum(p * 2.0).backward();
    opt.step();
    want -= 2 * sched(s);
  }
  EXPECT_EQ(p.item(), want);
}

}  // namespace
}  // namespace alk
