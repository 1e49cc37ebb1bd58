// The lazy graph and scheduler: laziness, dead-code elimination, fusion (elementwise
// chains, reduction prologues, matmul/reduction epilogues), memory planning, the kernel
// cache and eager mode, each checked by counting kernels and comparing values.
#include <cmath>
#include <cstdlib>
#include <functional>

#include "backend/cpu/kernel_cache.h"
#include "graph/graph.h"
#include "graph/schedule.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "testing.h"

namespace alk {
namespace {

std::vector<double> iota_values(size_t n, double scale = 0.1) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 1.3) * scale * 10;
  return v;
}

TEST(Schedule, OpsAreLazyUntilDataIsNeeded) {
  Tensor a = tensor(iota_values(6), {2, 3});
  Tensor b = exp(a) + 1.0;
  EXPECT_FALSE(b.is_realized());
  EXPECT_TRUE(a.is_realized());
  b.realize();
  EXPECT_TRUE(b.is_realized());
}

TEST(Schedule, ElementwiseChainWithBroadcastIsOneKernel) {
  auto av = iota_values(12), bv = iota_values(4, 0.3);
  Tensor a = tensor(av, {3, 4}), b = tensor(bv, {4});
  Tensor y = relu(a * b + 1.0) * 2.0 - sigmoid(a);
  auto got = y.to_vector<double>();
  const auto& st = last_schedule_stats();
  EXPECT_EQ(st.kernels, 1);
  EXPECT_EQ(st.fused_nodes, 5);
  for (size_t i = 0; i < 12; ++i) {
    double x = av[i], w = bv[i % 4];
    double want = std::max(x * w + 1.0, 0.0) * 2.0 - 1.0 / (1.0 + std::exp(-x));
    EXPECT_NEAR(got[i], want, 1e-12);
  }
}

// A sum of 54 stored tensors (clip_grad_norm's chain of per-parameter norms) would be one
// kernel reading 54 buffers, past what GPU shaders may bind: it splits into kernels of at
// most 16 leaves, with the same value.
TEST(Schedule, KernelsReadAtMostSixteenStoredTensors) {
  std::vector<Tensor> parts;
  double want = 0;
  for (int i = 0; i < 54; ++i) {
    auto v = iota_values(5, 0.01 * (i + 1));
    parts.push_back(tensor(v, {5}));
    for (double x : v) want += x * x;
  }
  Tensor total;
  for (const Tensor& p : parts) total = total.defined() ? total + sum(square(p)) : sum(square(p));
  const double got = total.item();
  const auto& st = last_schedule_stats();
  // 54 reductions (each takes its square as a prologue), and the adds in >= 4 kernels.
  EXPECT_GE(st.kernels, 54 + 4);
  EXPECT_LE(st.kernels, 54 + 8);
  EXPECT_NEAR(got, want, 1e-9 * want);
}

TEST(Schedule, FusionReadsStridedViews) {
  auto av = iota_values(24);
  Tensor a = tensor(av, {2, 3, 4});
  Tensor y = exp(a.permute({2, 0, 1})) * a.permute({2, 0, 1});
  EXPECT_EQ(y.shape(), (Shape{4, 2, 3}));
  auto got = y.to_vector<double>();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        double x = av[static_cast<size_t>(i * 12 + j * 4 + k)];
        EXPECT_NEAR(got[static_cast<size_t>(k * 6 + i * 3 + j)], std::exp(x) * x, 1e-12);
      }
}

TEST(Schedule, ReductionTakesElementwiseProducerAsPrologue) {
  auto av = iota_values(12), bv = iota_values(12, 0.2);
  Tensor a = tensor(av, {3, 4}), b = tensor(bv, {3, 4});
  Tensor s = sum(exp(a) * b, {1});
  auto got = s.to_vector<double>();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  for (int i = 0; i < 3; ++i) {
    double want = 0;
    for (int j = 0; j < 4; ++j) want += std::exp(av[static_cast<size_t>(i * 4 + j)]) * bv[static_cast<size_t>(i * 4 + j)];
    EXPECT_NEAR(got[static_cast<size_t>(i)], want, 1e-12);
  }
}

TEST(Schedule, MatmulTakesElementwiseConsumerAsEpilogue) {
  auto av = iota_values(6), bv = iota_values(6, 0.2), cv = iota_values(3, 0.5);
  Tensor a = tensor(av, {3, 2}), b = tensor(bv, {2, 3}), bias = tensor(cv, {1, 3}).slice(1, 0, 3);
  Tensor y = gelu(matmul(a, b) + bias);
  auto got = y.to_vector<double>();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double x = cv[static_cast<size_t>(j)];
      for (int k = 0; k < 2; ++k) x += av[static_cast<size_t>(i * 2 + k)] * bv[static_cast<size_t>(k * 3 + j)];
      EXPECT_NEAR(got[static_cast<size_t>(i * 3 + j)], 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-12);
    }
}

// The CPU runs a matmul's epilogue on each block of rows as soon as the block is done:
// batched operands, several row blocks per matrix, a few rows split by columns (the
// whole-matrix path), f32 and f64, with a broadcast bias and a residual read through a
// transposed view. Each result is checked against the matmul realized alone, then the
// epilogue applied by a separate kernel.
TEST(Schedule, MatmulEpilogueOnRowBlocksMatchesSeparateKernels) {
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{3, 37, 20}, {3, 20, 45}}, {{1000, 64}, {64, 70}}, {{2, 300}, {300, 500}}};
  for (DType dtype : {DType::F32, DType::F64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(to_string(c.a) + " x " + to_string(c.b));
      manual_seed(5);
      Tensor a = randn(c.a, dtype), b = randn(c.b, dtype);
      const int64_t n = c.b.back(), m = c.a[c.a.size() - 2];
      Tensor bias = randn({n}, dtype), residual = randn({n, m}, dtype);
      realize({a, b, bias, residual});
      Tensor fused = tanh(matmul(a, b) + bias) * 2.0 - residual.t();
      fused.realize();
      EXPECT_EQ(last_schedule_stats().kernels, 1);
      Tensor product = matmul(a, b);
      product.realize();
      Tensor separate = tanh(product + bias) * 2.0 - residual.t();
      const auto want = separate.to(DType::F64).to_vector<double>(), got = fused.to(DType::F64).to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
    }
  }
}

// Bias and residual epilogues are added to each tile inside the CPU matmul: the same bits
// as the matmul and the adds run as separate kernels, for a bias row, bias then residual in
// either nesting, a batch merged into rows, edge tiles, depths past one k block, and a
// transposed residual (which stays a separate pass).
TEST(Schedule, MatmulBiasAndResidualEpiloguesMatchSeparateKernels) {
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{3, 37, 20}, {20, 45}}, {{1000, 300}, {300, 70}}, {{2, 29}, {29, 33}}, {{4, 15, 600}, {4, 600, 17}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.a) + " x " + to_string(c.b));
    manual_seed(6);
    Tensor a = randn(c.a), b = randn(c.b);
    const int64_t n = c.b.back(), m = c.a[c.a.size() - 2];
    Shape out_shape(c.a.begin(), c.a.end() - 1);
    out_shape.push_back(n);
    Tensor bias = randn({n}), residual = randn(out_shape), residual_t = randn({n, m});
    realize({a, b, bias, residual, residual_t});
    Tensor product = matmul(a, b);
    product.realize();
    const std::vector<std::function<Tensor(const Tensor&)>> epilogues = {
        [&](const Tensor& p) { return p + bias; },
        [&](const Tensor& p) { return (p + bias) + residual; },
        [&](const Tensor& p) { return residual + (bias + p); },
        [&](const Tensor& p) { return p + residual_t.t(); },
    };
    for (size_t i = 0; i < epilogues.size(); ++i) {
      SCOPED_TRACE("epilogue " + std::to_string(i));
      if (i == 3 && c.a.size() != 2) continue;
      Tensor fused = epilogues[i](matmul(a, b));
      fused.realize();
      EXPECT_EQ(last_schedule_stats().kernels, 1);
      const auto want = epilogues[i](product).to_vector<float>(), got = fused.to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], want[j]) << "element " << j;
    }
  }
}

// An epilogue may read its core more than once (a hardswish written out, x * clamp(x / 6 + 0.5,
// 0, 1), after a matmul and after the CPU's Conv2d): one kernel, the same bits as the core
// realized alone and the activation applied by a separate kernel. A core with a reader outside
// the kernel is stored and the result is still right.
TEST(Schedule, EpilogueReadingItsCoreTwiceMatchesSeparateKernels) {
  manual_seed(8);
  auto hardswish = [](const Tensor& x) { return x * clamp(x / 6.0 + 0.5, 0.0, 1.0); };
  Tensor a = randn({37, 20}) * 4.0, b = randn({20, 45}), x = randn({1, 5, 9, 11}) * 4.0, w = randn({7, 5, 3, 3}),
         bias = randn({7});
  realize({a, b, x, w, bias});
  Tensor row_bias = randn({45});
  realize({row_bias});
  const std::vector<std::function<Tensor()>> cores = {
      [&] { return matmul(a, b); },
      [&] { return matmul(a, b) + row_bias; },  // the add, read twice, is inlined twice
      [&] { return conv2d(x, w, bias, 1, 1, 1, 1); },
      [&] { return conv2d(x, w, bias, 2, 1, 1, 1); },
  };
  for (size_t i = 0; i < cores.size(); ++i) {
    SCOPED_TRACE("core " + std::to_string(i));
    Tensor fused = hardswish(cores[i]());
    fused.realize();
    EXPECT_EQ(last_schedule_stats().kernels, 1);
    Tensor core = cores[i]();
    core.realize();
    const auto want = hardswish(core).to_vector<float>(), got = fused.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], want[j]) << "element " << j;
    // A third reader in another kernel (a sum): the core is stored, both results right.
    Tensor c = cores[i]();
    Tensor act = hardswish(c), total = sum(c * c);
    realize({act, total});
    EXPECT_EQ(act.to_vector<float>(), want);
    EXPECT_NEAR(total.item(), sum(core * core).item(), 1e-3 * std::abs(total.item()));
  }
}

// Maps read twice inside one kernel are inlined once per read, one level deep: a chain where
// each value is read twice by the next stays right (and does not grow exponentially).
TEST(Schedule, MapsReadTwiceInsideOneKernelAreInlined) {
  manual_seed(9);
  Tensor x = randn({5, 7}), y = randn({5, 7});
  realize({x, y});
  Tensor s = x + y;
  Tensor fused = s * tanh(s);
  fused.realize();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  Tensor sum_xy = x + y;
  sum_xy.realize();
  EXPECT_EQ(fused.to_vector<float>(), (sum_xy * tanh(sum_xy)).to_vector<float>());
  Tensor v = x.to(DType::F64);
  for (int i = 0; i < 24; ++i) v = v * v * 0.5 + v;  // each value read twice by the next
  const std::vector<double> got = v.to_vector<double>();
  std::vector<double> want = x.to(DType::F64).to_vector<double>();
  for (double& w : want)
    for (int i = 0; i < 24; ++i) w = w * w * 0.5 + w;
  for (size_t k = 0; k < got.size(); ++k)
    if (std::isfinite(want[k])) {
      EXPECT_NEAR(got[k], want[k], 1e-12 * std::abs(want[k])) << k;
    }
}

TEST(Schedule, ReductionEpilogueAndPrologueTogether) {
  auto av = iota_values(20);
  Tensor a = tensor(av, {4, 5});
  Tensor y = sqrt(sum(a * a, {1}) + 1.0);
  auto got = y.to_vector<double>();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  for (int i = 0; i < 4; ++i) {
    double s = 1;
    for (int j = 0; j < 5; ++j) s += av[static_cast<size_t>(i * 5 + j)] * av[static_cast<size_t>(i * 5 + j)];
    EXPECT_NEAR(got[static_cast<size_t>(i)], std::sqrt(s), 1e-12);
  }
}

TEST(Schedule, ValuesHeldByTheUserAreStoredNotRecomputed) {
  Tensor a = tensor(iota_values(6), {6});
  Tensor h = exp(a);
  Tensor y = h * 2.0;
  realize({y, h});
  EXPECT_EQ(last_schedule_stats().kernels, 2);
  EXPECT_TRUE(h.is_realized());
  auto hv = h.to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(yv[i], 2 * hv[i]);
}

// Kernels with extra outputs (merge_extra_outputs): under ALK_EXTRA_OUTPUTS=1 the CPU forms
// them too (each output its own pass), and every value is the separate kernels' bit for bit;
// by default the CPU does not ask for them.
TEST(Schedule, ExtraOutputsStoreTheSameBitsAsTheirOwnKernels) {
  std::mt19937 rng(11);
  Tensor a = testing::f64_tensor({24, 40}, Domain::Any, rng).to(DType::F32);
  Tensor b = testing::f64_tensor({24, 40}, Domain::Any, rng).to(DType::F32);
  realize({a, b});
  auto run = [&](const char* setting, int64_t& kernels, int64_t& extra) {
    if (setting) setenv("ALK_EXTRA_OUTPUTS", setting, 1);
    std::vector<Tensor> outs = testing::extra_output_cases(a, b);
    realize(outs);
    kernels = last_schedule_stats().kernels;
    extra = last_schedule_stats().extra_outputs;
    unsetenv("ALK_EXTRA_OUTPUTS");
    std::vector<std::vector<double>> values;
    for (const Tensor& t : outs) values.push_back(t.to_vector<double>());
    return values;
  };
  int64_t k_default = 0, x_default = 0, k_merged = 0, x_merged = 0;
  const auto want = run(nullptr, k_default, x_default);
  const auto got = run("1", k_merged, x_merged);
  EXPECT_EQ(x_default, 0) << "the CPU does not ask for extra outputs";
  EXPECT_EQ(x_merged, 3);
  EXPECT_EQ(k_merged, k_default - 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t j = 0; j < want[i].size(); ++j)
      ASSERT_EQ(got[i][j], want[i][j]) << "output " << i << " element " << j;
  }
  // And the values themselves, in float64 from the same inputs (s16: the bf16 of a + b).
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t j = 0; j < av.size(); ++j) {
    const float sum = static_cast<float>(av[j]) + static_cast<float>(bv[j]);
    ASSERT_EQ(got[0][j], tensor(std::vector<double>{sum}, Shape{1}).to(DType::BF16).to_vector<double>()[0]);
    if (j > 40) break;  // a few suffice: the rest are compared bit for bit above
  }
  // A compiled step that carries extra outputs through its trace replays the same values.
  setenv("ALK_EXTRA_OUTPUTS", "1", 1);
  Program step = compile([](const std::vector<Tensor>& in) {
    const std::vector<Tensor> outs = testing::extra_output_cases(in[0], in[1]);
    realize(outs);  // one schedule, so its kernels take extra outputs in the trace too
    for (size_t i = 0; i < outs.size(); ++i) capture("out" + std::to_string(i), outs[i]);
  });
  std::vector<std::vector<double>> replayed;
  for (int call = 0; call < 3; ++call) {
    step({a, b});
    replayed.clear();
    for (size_t i = 0; i < want.size(); ++i) replayed.push_back(step.captured("out" + std::to_string(i)).to_vector<double>());
  }
  unsetenv("ALK_EXTRA_OUTPUTS");
  ASSERT_EQ(replayed.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(replayed[i], want[i]) << "output " << i;
}

// The same for extra outputs of a template op's epilogue (on the CPU only under
// ALK_EXTRA_OUTPUTS=1: the value computed, the extra outputs from it, then the epilogue).
TEST(Schedule, EpilogueExtraOutputsStoreTheSameBitsAsTheirOwnKernels) {
  std::mt19937 rng(12);
  Tensor x = testing::f64_tensor({48, 32}, Domain::Any, rng).to(DType::F32);
  Tensor w = testing::f64_tensor({32, 40}, Domain::Any, rng).to(DType::F32);
  Tensor bias = testing::f64_tensor({40}, Domain::Any, rng).to(DType::F32);
  Tensor h = testing::f64_tensor({48, 40}, Domain::Any, rng).to(DType::F32);
  Tensor h2 = testing::f64_tensor({48, 40}, Domain::Any, rng).to(DType::F32);
  realize({x, w, bias, h, h2});
  auto run = [&](const char* setting, int64_t& extra) {
    if (setting) setenv("ALK_EXTRA_OUTPUTS", setting, 1);
    std::vector<Tensor> outs = testing::epilogue_extra_output_cases(x, w, bias, h, h2);
    realize(outs);
    extra = last_schedule_stats().extra_outputs;
    unsetenv("ALK_EXTRA_OUTPUTS");
    std::vector<std::vector<double>> values;
    for (const Tensor& t : outs) values.push_back(t.to_vector<double>());
    return values;
  };
  int64_t x_default = 0, x_merged = 0;
  const auto want = run(nullptr, x_default);
  const auto got = run("1", x_merged);
  EXPECT_EQ(x_default, 0);
  EXPECT_EQ(x_merged, 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "output " << i;
}

// A result whose every reader became an extra output of its own kernel is read by no later
// kernel: its arena memory is reused after that kernel (here by e, which then fits in the
// same slot: one tensor's bytes of arena, not two).
TEST(Schedule, AResultReadOnlyByItsExtraOutputsFreesItsMemory) {
  Tensor a = randn({64, 64}), b = randn({64, 64});
  realize({a, b});
  setenv("ALK_EXTRA_OUTPUTS", "1", 1);
  Tensor s = a + b;
  Tensor s16 = s.to(DType::BF16), s_exp = exp(s);
  Tensor e = sin(b) * 3.0;
  Tensor rows = sum(e, {0}), cols = sum(e, {1});
  realize({s16, s_exp, rows, cols});
  unsetenv("ALK_EXTRA_OUTPUTS");
  EXPECT_EQ(last_schedule_stats().extra_outputs, 2);
  EXPECT_LE(last_schedule_stats().arena_bytes, 64 * 64 * 4 + 64);
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>(), ev = s_exp.to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i)
    ASSERT_NEAR(ev[i], std::exp(static_cast<double>(static_cast<float>(av[i]) + static_cast<float>(bv[i]))), 1e-6 * ev[i])
        << "element " << i;
}

TEST(Schedule, DeadNodesDoNotRun) {
  Tensor a = tensor(iota_values(6), {6});
  Tensor unused = exp(a) * 3.0;
  Tensor y = a + 1.0;
  y.realize();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  EXPECT_FALSE(unused.is_realized());
}

TEST(Schedule, MemoryPlanReusesDeadIntermediates) {
  Tensor x = tensor(iota_values(4096), {64, 64});
  // Softmax is a template op, so each one needs a buffer; the arena reuses dead ones.
  Tensor y = softmax(softmax(softmax(softmax(x, 1), 0), 1), 0);
  y.realize();
  const auto& st = last_schedule_stats();
  EXPECT_EQ(st.kernels, 4);
  EXPECT_EQ(st.naive_bytes, 4 * 4096 * 8);
  // Output stored (1 buffer) + at most 2 live intermediates at any time.
  EXPECT_LE(st.planned_bytes, 3 * 4096 * 8);
  EXPECT_LT(st.planned_bytes, st.naive_bytes);
  auto got = y.to_vector<double>();
  NoGradGuard ng;
  Tensor step = softmax(x, 1);
  step.realize();
  step = softmax(step, 0);
  step.realize();
  step = softmax(step, 1);
  step.realize();
  auto ref = softmax(step, 0).to_vector<double>();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-15);
}

TEST(Schedule, ElementwiseAfterTemplateOpRunsInPlace) {
  Tensor x = tensor(iota_values(64), {8, 8});
  // The Map overwrites the softmax output that dies there (no names hold the middle).
  auto build = [](const Tensor& in) { return softmax(softmax(softmax(in, 1), 0) * 3.0 + 1.0, 1); };
  Tensor z = build(x);
  z.realize();
  EXPECT_GE(last_schedule_stats().in_place, 1);
}

// An update `x = f(x, ...)` of a realized tensor writes over x's buffer when nothing else
// can read the old value: the optimizer step needs no second copy of the state.
TEST(Schedule, UpdateOfARealizedTensorWritesOverItsBuffer) {
  const std::vector<double> start = iota_values(64);
  Tensor x = tensor(start, {8, 8});
  Tensor g = full({8, 8}, 0.5);
  realize({x, g});
  const Buffer* before = x.impl()->node->buffer.get();
  x.assign_(x * 2.0 - g);
  x.realize();
  EXPECT_EQ(x.impl()->node->buffer.get(), before);
  EXPECT_EQ(last_schedule_stats().planned_bytes, 0);
  auto v = x.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], 2.0 * start[i] - 0.5);
}

// ...and never when the old value can still be read: another view of it held outside,
// a lazy result that would recompute from it later, a reader in a later kernel.
TEST(Schedule, UpdateKeepsTheOldValueWhereItCanStillBeRead) {
  const std::vector<double> start = iota_values(16);
  {
    Tensor x = tensor(start, {16});
    Tensor view = x.reshape({4, 4});  // a second TensorImpl on x's node
    x.assign_(x + 1.0);
    x.realize();
    EXPECT_EQ(view.reshape({16}).to_vector<double>(), start);
    EXPECT_EQ(x.to_vector<double>()[3], start[3] + 1);
  }
  {
    Tensor x = tensor(start, {16});
    Tensor lazy = x * 3.0;  // a held Map, not realized by the update's schedule
    x.assign_(x + 1.0);
    x.realize();
    ASSERT_FALSE(lazy.is_realized());
    auto v = lazy.to_vector<double>();
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(v[i], 3 * start[i]);
  }
  {
    Tensor x = tensor(start, {16});
    Tensor y = tensor(start, {16});
    Tensor old_sum = sum(x);  // read by a Reduce after the Map that updates x
    x.assign_(x + 1.0);
    y.assign_(y + old_sum);
    realize({x, y});
    double total = 0;
    for (double v : start) total += v;
    EXPECT_NEAR(y.to_vector<double>()[0], start[0] + total, 1e-12);
    EXPECT_EQ(x.to_vector<double>()[0], start[0] + 1);
  }
  {
    // A same-shaped transpose reads the old value out of order: no in-place write (the
    // CPU evaluates 256-element blocks, so the hazard needs a larger tensor).
    const std::vector<double> big = iota_values(4096);
    Tensor x = tensor(big, {64, 64});
    x.assign_(x + x.transpose(0, 1));
    x.realize();
    auto v = x.to_vector<double>();
    for (size_t i = 0; i < 64; ++i)
      for (size_t j = 0; j < 64; ++j) EXPECT_EQ(v[64 * i + j], big[64 * i + j] + big[64 * j + i]);
  }
  {
    // The same for an intermediate dying in the arena: s + s.T does not overwrite s.
    Tensor x = tensor(iota_values(4096), {64, 64}) * 0.01;
    Tensor s = softmax(x, 1);
    s.realize();
    const std::vector<double> sv = s.to_vector<double>();
    auto sym = [](const Tensor& in) {
      Tensor t = softmax(in, 1);  // dies inside the graph: an arena intermediate
      return t + t.transpose(0, 1);
    };
    Tensor y = sym(x);
    auto v = y.to_vector<double>();
    for (size_t i = 0; i < 64; ++i)
      for (size_t j = 0; j < 64; ++j) EXPECT_EQ(v[64 * i + j], sv[64 * i + j] + sv[64 * j + i]);
  }
}

TEST(Schedule, KernelCacheHitsOnRepeatedExpressions) {
  Tensor a = tensor(iota_values(8), {8});
  (tanh(a) * 7.25 + 0.125).realize();
  int64_t hits = cpu_kernel_cache().hits();
  (tanh(a) * 7.25 + 0.125).realize();
  EXPECT_EQ(cpu_kernel_cache().hits(), hits + 1);
}

TEST(Schedule, EagerModeRealizesEveryOp) {
  set_eager_mode(true);
  Tensor a = tensor(iota_values(4), {4});
  Tensor b = exp(a);
  Tensor c = b * 2.0;
  EXPECT_TRUE(b.is_realized());
  EXPECT_TRUE(c.is_realized());
  set_eager_mode(false);
  Tensor d = exp(a);
  EXPECT_FALSE(d.is_realized());
  auto cv = c.to_vector<double>(), dv = d.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(cv[i], 2 * dv[i]);
}

TEST(Schedule, ReductionsMatchReferenceOverAnyAxes) {
  auto av = iota_values(120);
  Tensor a = tensor(av, {2, 3, 4, 5});
  auto at = [&](int i, int j, int k, int l) { return av[static_cast<size_t>(((i * 3 + j) * 4 + k) * 5 + l)]; };
  auto s = sum(a, {1, 3}).to_vector<double>();
  auto m = max(a, {0, 2}, true).to_vector<double>();
  auto p = prod(a, {3}).to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double want = 0;
      for (int j = 0; j < 3; ++j)
        for (int l = 0; l < 5; ++l) want += at(i, j, k, l);
      EXPECT_NEAR(s[static_cast<size_t>(i * 4 + k)], want, 1e-12);
    }
  for (int j = 0; j < 3; ++j)
    for (int l = 0; l < 5; ++l) {
      double want = -INFINITY;
      for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 4; ++k) want = std::max(want, at(i, j, k, l));
      EXPECT_EQ(m[static_cast<size_t>(j * 5 + l)], want);
    }
  for (int i = 0; i < 24; ++i) {
    double want = 1;
    for (int l = 0; l < 5; ++l) want *= av[static_cast<size_t>(i * 5 + l)];
    EXPECT_NEAR(p[static_cast<size_t>(i)], want, 1e-12);
  }
  // A large full reduction takes the split-row path across threads.
  std::vector<double> big(200000, 0.5);
  EXPECT_DOUBLE_EQ(sum(tensor(big, {200000})).item(), 100000.0);
  EXPECT_DOUBLE_EQ(mean(tensor(big, {400, 500})).item(), 0.5);
}

TEST(Schedule, SixteenBitFloatsComputeInF32) {
  Tensor a = tensor(std::vector<float>{1.0f, 2.5f, -3.25f, 1000.0f}, {4});
  Tensor h = a.to(DType::F16), bh = a.to(DType::BF16);
  auto hv = (h * 2.0).to_vector<float>();
  auto bv = (bh + 1.0).to_vector<float>();
  EXPECT_EQ((h * 2.0).dtype(), DType::F16);
  EXPECT_EQ(hv, (std::vector<float>{2.0f, 5.0f, -6.5f, 2000.0f}));
  EXPECT_EQ(bv, (std::vector<float>{2.0f, 3.5f, -2.25f, 1000.0f}));  // bf16: 1001 rounds to 1000
}

// Kernels of one source are moved next to each other (an optimizer's per-parameter updates),
// but never ahead of what they read: here c = 2b + 1 has b's very expression and reads b, and
// d reads both, for several independent tensors at once; every value is what it is computed
// one tensor at a time.
TEST(Schedule, BatchedKernelsOfOneSourceKeepTheirDependencies) {
  std::vector<Tensor> a, targets;
  for (int i = 0; i < 5; ++i) a.push_back(tensor(iota_values(static_cast<size_t>(7 + i), 0.1 * (i + 1)), {7 + i}));
  realize(a);
  for (const Tensor& x : a) {
    Tensor b = x * 2.0 + 1.0;
    Tensor c = b * 2.0 + 1.0;
    targets.insert(targets.end(), {b, c, c - b * 3.0});
  }
  realize(targets);
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> x = a[i].to_vector<double>();
    const std::vector<double> b = targets[3 * i].to_vector<double>(), c = targets[3 * i + 1].to_vector<double>(),
                              d = targets[3 * i + 2].to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) {
      const double bj = x[j] * 2.0 + 1.0, cj = bj * 2.0 + 1.0;  // (the tensors are f64)
      EXPECT_EQ(b[j], bj) << i << " " << j;
      EXPECT_EQ(c[j], cj) << i << " " << j;
      EXPECT_EQ(d[j], cj - bj * 3.0) << i << " " << j;
    }
  }
}

// An eager AdamW step: each parameter's step count, moments and value are Map kernels of four
// sources (with and without decay for the value), every one of them placed in a run of its own
// source: ALK_DEBUG=schedule's `batched` counts them.
TEST(Schedule, AnOptimizerStepIsRunsOfOneSourceEach) {
  manual_seed(2);
  nn::Sequential net;
  net.add(std::make_shared<nn::Linear>(4, 3)).add(std::make_shared<nn::Linear>(3, 2));
  optim::AdamW opt(net.named_parameters(), 1e-2, optim::AdamOptions{.weight_decay = 0.1});
  nn::mse_loss(net.forward(randn({5, 4})), randn({5, 2})).backward();
  opt.step();
  EXPECT_EQ(last_schedule_stats().batched, 4 * 4);  // 4 parameters x (t, m, v, p)
}

// Under bf16 autocast the GELU of each block's fc output is read by the forward and again by
// the backward's weight gradient; the backward reads the fc output anyway (the GELU's own
// backward), so the scheduler computes the GELU again there instead of keeping it from the
// forward: a lower peak, the same parameters bit for bit.
TEST(Schedule, ElementwiseActivationsAreRecomputedForTheBackward) {
  auto run = [](bool recompute) {
    setenv("ALK_RECOMPUTE", recompute ? "1" : "0", 1);  // 1: on the CPU too (by default GPUs only)
    manual_seed(9);
    nn::GPT model(nn::GPTConfig{.vocab = 64, .ctx = 32, .dim = 128, .heads = 2, .layers = 3});
    optim::AdamW opt(model.named_parameters(), 1e-3);
    Tensor x = randint(0, 64, {32, 32}), y = randint(0, 64, {32, 32});
    realize({x, y});
    int64_t peak = 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t before = Buffer::live_bytes();
      Buffer::reset_peak_bytes();
      Tensor loss;
      {
        Autocast mixed(DType::BF16);
        loss = nn::cross_entropy(model(x), y);
      }
      loss.backward();
      opt.step();
      peak = std::max(peak, Buffer::peak_bytes() - before);
      opt.zero_grad();
    }
    unsetenv("ALK_RECOMPUTE");
    std::vector<float> w;
    for (const Tensor& p : model.parameters()) {
      auto v = p.to_vector<float>();
      w.insert(w.end(), v.begin(), v.end());
    }
    return std::pair{peak, w};
  };
  const auto [kept_peak, kept] = run(false);
  const auto [recomputed_peak, recomputed] = run(true);
  EXPECT_EQ(recomputed, kept);
  // Three blocks' GELU outputs, [32, 32, 512] bf16 (1 MiB) each: about two no longer live to
  // the backward (measured 2 MiB less 32 KiB: the tensors live beside them at the peak shift
  // with what else the schedule fuses), so at least one and a half.
  EXPECT_LE(recomputed_peak, kept_peak - 3 * 512 * 512) << kept_peak << " -> " << recomputed_peak;
}

}  // namespace
}  // namespace alk

namespace alk {
namespace {

// Fusion must not change results: a 16-bit intermediate is rounded to its dtype whether it
// is fused or run op by op, and so is a number that meets a 16-bit tensor.
TEST(Schedule, SixteenBitIntermediatesRoundTheSameFusedOrEager) {
  std::vector<float> v{0.1f, 1.0001f, -3.14159f, 65504.0f, 1e-5f};
  auto compute = [&] {
    Tensor x = tensor(v, {5});
    Tensor h = (x * 1.0001).to(DType::F16);
    Tensor b = (x * 0.3).to(DType::BF16);
    return std::vector<std::vector<float>>{(h + 0.1).to(DType::F32).to_vector<float>(),
                                           (b * 3.0).to(DType::F32).to_vector<float>(),
                                           eq(h.to(DType::F16), 0.1).to(DType::F32).to_vector<float>()};
  };
  auto lazy = compute();
  set_eager_mode(true);
  auto eager = compute();
  set_eager_mode(false);
  EXPECT_EQ(lazy, eager);
  EXPECT_EQ(eq(tensor(std::vector<float>{0.1f}, {1}).to(DType::F16), 0.1).item(), 1.0);  // PyTorch: True
}

// bf16 intermediates are inlined and rounded in the kernel (RoundBf16): a chain of bf16 ops
// is one kernel, bit for bit the op-by-op result, over values that round up, down, to even
// on ties, overflow to infinity, and NaN.
TEST(Schedule, Bf16ChainsFuseAndRoundAsEager) {
  std::vector<float> v;
  for (int i = 0; i < 2000; ++i) v.push_back(static_cast<float>(std::ldexp(1.0 + i / 2000.0, i % 40 - 20)) * (i % 3 ? 1 : -1));
  v.insert(v.end(), {1.00390625f, 1.01171875f, 3.0e38f, -3.0e38f, INFINITY, NAN, 0.0f, -0.0f});  // ties, overflow
  auto compute = [&] {
    Tensor x = tensor(v, {static_cast<int64_t>(v.size())}).to(DType::BF16);
    x.realize();
    Tensor a = x * 1.37 + 0.5;
    Tensor y = maximum(exp(-(square(a) - 3.0)), x) * 0.75;
    std::vector<float> out = y.to(DType::F32).to_vector<float>();
    return std::make_pair(out, last_schedule_stats().kernels);
  };
  auto [lazy, kernels] = compute();
  EXPECT_EQ(kernels, 1);
  set_eager_mode(true);
  auto [eager, eager_kernels] = compute();
  set_eager_mode(false);
  ASSERT_EQ(lazy.size(), eager.size());
  for (size_t i = 0; i < lazy.size(); ++i) {
    if (std::isnan(eager[i])) {
      EXPECT_TRUE(std::isnan(lazy[i])) << i;
      continue;
    }
    EXPECT_EQ(lazy[i], eager[i]) << "element " << i << " (x = " << v[i] << ")";
  }
}

// A layer norm whose only reader is an elementwise Map (under autocast: the cast of its f32
// output to the next product's bf16 operand) takes that Map as its epilogue where the device
// fuses one (the CPU runs it over the norm's result in place; CUDA in the norm's store):
// one kernel, bit for bit the norm realized alone and then cast. Over rows of a batch and
// with a second epilogue input (a residual read through a transposed view).
TEST(Schedule, LayerNormTakesElementwiseConsumerAsEpilogue) {
  manual_seed(4);
  Tensor x = randn({3, 5, 64}), w = randn({64}), b = randn({64}), r = randn({3, 64, 5});
  realize({x, w, b, r});
  Tensor fused = layer_norm(x, {64}, w, b, 1e-5).to(DType::BF16);
  fused.realize();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  std::vector<float> got = fused.to(DType::F32).to_vector<float>();
  Tensor alone = layer_norm(x, {64}, w, b, 1e-5);
  alone.realize();
  EXPECT_EQ(alone.to(DType::BF16).to(DType::F32).to_vector<float>(), got);
  // Norm + residual, rounded to f16: the epilogue reads a second tensor.
  Tensor fused2 = (layer_norm(x, {64}, w, b, 1e-5) * 0.5 + r.transpose(1, 2)).to(DType::F16);
  fused2.realize();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  std::vector<float> got2 = fused2.to(DType::F32).to_vector<float>();
  std::vector<float> want2 = (alone * 0.5 + r.transpose(1, 2)).to(DType::F16).to(DType::F32).to_vector<float>();
  EXPECT_EQ(got2, want2);
  // RMS norm, the same way.
  Tensor rms = rms_norm(x, {64}, w, 1e-6).to(DType::BF16);
  rms.realize();
  EXPECT_EQ(last_schedule_stats().kernels, 1);
  Tensor rms_alone = rms_norm(x, {64}, w, 1e-6);
  rms_alone.realize();
  EXPECT_EQ(rms.to(DType::F32).to_vector<float>(), rms_alone.to(DType::BF16).to(DType::F32).to_vector<float>());
}

// The backward of a layer norm is handed the f32 cast of a bf16 gradient (a product's under
// autocast): where the device's kernel widens it as it loads (Device::widens_input), the
// scheduler gives it the bf16 tensor and never computes the cast, so the step runs as many
// kernels as with an f32 gradient to begin with. The gradients are those of the f32 cast.
TEST(Schedule, LayerNormBackwardReadsA16BitGradientAsItIs) {
  manual_seed(5);
  Tensor x0 = randn({6, 48}), w0 = randn({48}), b0 = randn({48});
  Tensor g16 = randn({6, 48}).to(DType::BF16);
  realize({x0, w0, b0, g16});
  auto grads = [&](const Tensor& seed) {
    Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
    layer_norm(x, {48}, w, b, 1e-5).backward(seed);
    const int64_t kernels = last_schedule_stats().kernels;
    return std::make_tuple(x.grad().to_vector<double>(), w.grad().to_vector<double>(), kernels);
  };
  Tensor g32 = g16.to(DType::F32);
  g32.realize();
  const auto [dx_cast, dw_cast, kernels_cast] = grads(g16.to(DType::F32));
  const auto [dx_f32, dw_f32, kernels_f32] = grads(g32);
  EXPECT_EQ(kernels_cast, kernels_f32);
  EXPECT_EQ(dx_cast, dx_f32);
  EXPECT_EQ(dw_cast, dw_f32);
  // Against float64: dx = rstd (g w - mean(g w) - xhat mean(g w xhat)).
  std::vector<double> xv = x0.to_vector<double>(), wv = w0.to_vector<double>(), gv = g32.to_vector<double>();
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0, a = 0, c = 0;
    for (int j = 0; j < 48; ++j) mean += xv[r * 48 + j] / 48;
    for (int j = 0; j < 48; ++j) var += (xv[r * 48 + j] - mean) * (xv[r * 48 + j] - mean) / 48;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    for (int j = 0; j < 48; ++j) {
      a += gv[r * 48 + j] * wv[j] / 48;
      c += gv[r * 48 + j] * wv[j] * (xv[r * 48 + j] - mean) * rstd / 48;
    }
    for (int j = 0; j < 48; ++j) {
      const double xhat = (xv[r * 48 + j] - mean) * rstd;
      EXPECT_NEAR(dx_cast[r * 48 + j], rstd * (gv[r * 48 + j] * wv[j] - a - xhat * c), 2e-5) << r << " " << j;
    }
  }
}

}  // namespace
}  // namespace alk
