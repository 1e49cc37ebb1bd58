// Fused attention on Vulkan (src/backend/vulkan/kernels/attention.h) against the CPU
// backend's kernels (cpu::attention_forward / attention_backward) on the same bytes:
// B x H x T x D over {1, 2, 3} x {1, 2} x {1, 5, 17, 64, 130} x {8, 16, 64}, causal and
// not, q/k/v as the three strided [B, H, T, D] views of one [B, T, 3, H, D] projection,
// and cross-attention (S != T, both ways round: the causal alignment t + S - T) with a
// transposed k, an offset v and a strided d_out; the output at an element offset.
// The backward gets the CPU forward's packed output, so each kernel is checked alone;
// the end-to-end tests chain them through Tensors on the device.
//
// Tolerances, |gpu - cpu| <= atol * max(1, max|cpu|) + rtol * |cpu|, per dtype:
//   f32   atol 2e-5, rtol 2e-5 -- both accumulate in f32 but in different orders and
//         with different exp implementations (GLSL exp: a few ulp)
//   f64   atol 2e-6, rtol 2e-6 -- f64 accumulation, but GLSL has no double exp/log: f32 there
//   f16   atol 2e-3, rtol 2e-3 -- one f16 ulp (2^-11 relative) of the output plus the f32 noise
//   bf16  atol 1e-2, rtol 1e-2 -- one bf16 ulp (2^-8 relative): the same value computed
//         slightly differently may round one step away; the backward's inputs (lse, O) are
//         bf16 too
// Measured on lavapipe (Mesa 22.3, LLVM 15): see the report printed by AllShapes*.
#include "required.h"
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "alk/device.h"
#include "alk/tensor.h"
#include "backend/cpu/kernels.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/attention.h"
#include "backend/vulkan/stream.h"
#include "backend/vulkan/vulkan_device.h"
#include "core/half.h"
#include "runtime/device.h"
#include "vulkan_test_util.h"

namespace alk::vk {
namespace {

struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType t) {
  switch (t) {
    case DType::F64: return {2e-6, 2e-6};
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1e-2, 1e-2};
    default: return {2e-5, 2e-5};
  }
}

// Host storage of n elements of dtype t.
struct Host {
  DType dtype;
  std::vector<uint8_t> bytes;
  Host(DType t, int64_t n) : dtype(t), bytes(static_cast<size_t>(n) * dtype_size(t)) {}
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  void set(int64_t i, double v) {
    void* p = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    switch (dtype) {
      case DType::F64: std::memcpy(p, &v, 8); break;
      case DType::F16: { const uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case DType::BF16: { const uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      default: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    }
  }
  double get(int64_t i) const { return cpu::load_as_double(bytes.data(), dtype, i); }
};

Host random_host(DType t, int64_t n, std::mt19937& rng) {
  std::normal_distribution<double> dist(0.0, 1.0);
  Host h(t, n);
  for (int64_t i = 0; i < n; ++i) h.set(i, dist(rng));
  return h;
}

// A strided view of a host buffer, and of the same bytes uploaded to the device.
struct Layout {
  Shape shape, strides;
  int64_t offset = 0;
};

cpu::View cpu_view(Host& h, const Layout& l) { return cpu::View{h.bytes.data(), h.dtype, l.shape, l.strides, l.offset}; }
ViewArg gpu_view(const std::shared_ptr<Allocation>& a, DType t, const Layout& l) {
  return ViewArg{a, 0, t, l.shape, l.strides, l.offset};
}

std::shared_ptr<Allocation> upload(Context& ctx, const Host& h) {
  auto a = ctx.pool().allocate(std::max<size_t>(h.bytes.size(), 4));
  ctx.stream().upload(a, 0, h.bytes.data(), h.bytes.size());
  return a;
}

Host download(Context& ctx, const std::shared_ptr<Allocation>& a, DType t, int64_t n) {
  Host h(t, n);
  ctx.stream().download(a, 0, h.bytes.data(), h.bytes.size());
  return h;
}

struct Stats {
  double worst = 0;  // largest |gpu - cpu| / (atol * max(1, max|cpu|) + rtol * |cpu|)
  double max_abs = 0;
};

// Compares elements [from, to) of got and want; returns how close to the tolerance it came.
void expect_close(const Host& got, const Host& want, int64_t from, int64_t to, Tolerance tol, Stats& stats,
                  const std::string& what) {
  double scale = 1;
  for (int64_t i = from; i < to; ++i)
    if (std::isfinite(want.get(i))) scale = std::max(scale, std::fabs(want.get(i)));
  int reported = 0;
  for (int64_t i = from; i < to; ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w && reported++ < 5) ADD_FAILURE() << what << ": element " << i - from << " got " << g << " want " << w;
      continue;
    }
    const double bound = tol.atol * scale + tol.rtol * std::fabs(w), err = std::fabs(g - w);
    stats.worst = std::max(stats.worst, err / bound);
    stats.max_abs = std::max(stats.max_abs, err);
    if (!(err <= bound) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i - from << " got " << g << " want " << w << " (bound " << bound << ")";
  }
}

struct Case {
  int64_t B, H, T, S, D;
  bool causal;
  bool fused;  // q, k, v split from one [B, T, 3, H, D] projection (S == T)
};

std::string name_of(const Case& c, DType t) {
  return "B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " T " + std::to_string(c.T) + " S " +
         std::to_string(c.S) + " D " + std::to_string(c.D) + (c.causal ? " causal" : " full") +
         (c.fused ? " fused-qkv" : " cross") + " " + std::string(dtype_name(t));
}

// Runs one case forward and backward on both backends and compares.
void check_case(Context& ctx, const Case& c, DType t, Stats& fwd_stats, Stats& bwd_stats) {
  SCOPED_TRACE(name_of(c, t));
  std::mt19937 rng(static_cast<uint32_t>(c.B * 1000003 + c.H * 10007 + c.T * 101 + c.S * 7 + c.D + c.causal));
  const int64_t B = c.B, H = c.H, T = c.T, S = c.S, D = c.D, BH = B * H, M = std::max(T, S);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Tolerance tol = tolerance(t);

  // Inputs: one buffer per operand (the fused case: one buffer for all three).
  std::vector<Host> hosts;
  Layout lq, lk, lv;
  if (c.fused) {
    hosts.push_back(random_host(t, B * T * 3 * H * D, rng));
    const Shape strides{T * 3 * H * D, D, 3 * H * D, 1};
    lq = {{B, H, T, D}, strides, 0};
    lk = {{B, H, T, D}, strides, H * D};
    lv = {{B, H, T, D}, strides, 2 * H * D};
  } else {
    hosts.push_back(random_host(t, BH * T * D, rng));
    hosts.push_back(random_host(t, BH * S * D + 2, rng));   // k stored [B, H, D, S], read transposed
    hosts.push_back(random_host(t, BH * S * D + 6, rng));   // v at an element offset
    lq = {{B, H, T, D}, {H * T * D, T * D, D, 1}, 0};
    lk = {{B, H, S, D}, {H * S * D, S * D, 1, S}, 1};
    lv = {{B, H, S, D}, {H * S * D, S * D, D, 1}, 5};
  }
  Host& hq = hosts[0];
  Host& hk = c.fused ? hosts[0] : hosts[1];
  Host& hv = c.fused ? hosts[0] : hosts[2];

  // Forward: CPU into [BH, T, D + 1]; GPU into the same at element offset 3.
  const int64_t out_n = BH * T * (D + 1);
  Host cpu_fwd(t, out_n);
  const Layout lo{{BH, T, D + 1}, {T * (D + 1), D + 1, 1}, 0};
  cpu::attention_forward(cpu_view(hq, lq), cpu_view(hk, lk), cpu_view(hv, lv), c.causal, scale, cpu_view(cpu_fwd, lo));

  std::vector<std::shared_ptr<Allocation>> dev;
  for (const Host& h : hosts) dev.push_back(upload(ctx, h));
  auto& aq = dev[0];
  auto& ak = c.fused ? dev[0] : dev[1];
  auto& av = c.fused ? dev[0] : dev[2];
  const int64_t out_off = 3;
  auto aout = ctx.pool().allocate(static_cast<size_t>(out_n + out_off) * dtype_size(t));
  const Layout lo_gpu{lo.shape, lo.strides, out_off};
  AttentionForwardKernel fwd(ctx, t, D);
  fwd.launch(ctx.stream(), gpu_view(aq, t, lq), gpu_view(ak, t, lk), gpu_view(av, t, lv), gpu_view(aout, t, lo_gpu),
             c.causal, scale);
  Host gpu_fwd = download(ctx, aout, t, out_n + out_off);
  Host gpu_fwd_tail(t, out_n);
  std::memcpy(gpu_fwd_tail.bytes.data(), gpu_fwd.bytes.data() + out_off * dtype_size(t), gpu_fwd_tail.bytes.size());
  expect_close(gpu_fwd_tail, cpu_fwd, 0, out_n, tol, fwd_stats, "forward");

  // Backward from the CPU forward's output; d_out is a strided view (rows 2 D apart).
  Host hg = random_host(t, BH * T * 2 * D, rng);
  const Layout lg{{B, H, T, D}, {H * T * 2 * D, T * 2 * D, 2 * D, 1}, 0};
  const int64_t grad_n = 3 * BH * M * D;
  const Layout lgrad{{3, BH, M, D}, {BH * M * D, M * D, D, 1}, 0};
  Host cpu_grad(t, grad_n);
  cpu::attention_backward(cpu_view(hq, lq), cpu_view(hk, lk), cpu_view(hv, lv), cpu_view(cpu_fwd, lo),
                          cpu_view(hg, lg), c.causal, scale, cpu_view(cpu_grad, lgrad));
  auto afwd = upload(ctx, cpu_fwd), ag = upload(ctx, hg);
  auto agrad = ctx.pool().allocate(static_cast<size_t>(grad_n) * dtype_size(t));
  {
    // Garbage first: the kernel must write every element, padding rows included.
    Host junk(t, grad_n);
    for (int64_t i = 0; i < grad_n; ++i) junk.set(i, 1e3);
    ctx.stream().upload(agrad, 0, junk.bytes.data(), junk.bytes.size());
  }
  AttentionBackwardKernel bwd(ctx, t, D);
  bwd.launch(ctx.stream(), gpu_view(aq, t, lq), gpu_view(ak, t, lk), gpu_view(av, t, lv), gpu_view(afwd, t, lo),
             gpu_view(ag, t, lg), gpu_view(agrad, t, lgrad), c.causal, scale);
  Host gpu_grad = download(ctx, agrad, t, grad_n);
  const int64_t part = BH * M * D;
  expect_close(gpu_grad, cpu_grad, 0, part, tol, bwd_stats, "dq");
  expect_close(gpu_grad, cpu_grad, part, 2 * part, tol, bwd_stats, "dk");
  expect_close(gpu_grad, cpu_grad, 2 * part, 3 * part, tol, bwd_stats, "dv");
}

void report(const char* what, DType t, const Stats& f, const Stats& b, double seconds) {
  std::cout << what << " " << dtype_name(t) << ": forward max |err| " << f.max_abs << " (" << f.worst
            << " of the tolerance), backward max |err| " << b.max_abs << " (" << b.worst << " of the tolerance), "
            << seconds << " s\n";
}

void all_shapes(Context& ctx, DType t) {
  Stats f, b;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t B : {1, 2, 3})
    for (int64_t H : {1, 2})
      for (int64_t T : {1, 5, 17, 64, 130})
        for (int64_t D : {8, 16, 64})
          for (bool causal : {false, true}) {
            // The biggest shapes once per dtype (B = 3, H = 2 covers them): lavapipe is a CPU.
            if (T == 130 && D == 64 && B * H != 6) continue;
            check_case(ctx, Case{B, H, T, T, D, causal, true}, t, f, b);
            if (::testing::Test::HasFailure()) return;
          }
  report("fused-qkv", t, f, b, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(VulkanAttention, AllShapesF32) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  all_shapes(*ctx, DType::F32);
}

TEST(VulkanAttention, AllShapesBF16) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  if (!ctx->info().storage16) GTEST_SKIP() << ctx->info().name << " has no 16-bit storage";
  all_shapes(*ctx, DType::BF16);
}

// Cross-attention: S != T both ways round (rows that see no key when causal with S < T),
// a transposed k, an offset v; every float dtype the device has.
TEST(VulkanAttention, CrossAttentionEveryDtype) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Case cases[] = {
      {2, 2, 17, 40, 16, true, false}, {2, 2, 17, 40, 16, false, false}, {1, 3, 40, 9, 8, true, false},
      {1, 3, 40, 9, 8, false, false},  {3, 1, 1, 70, 64, true, false},   {1, 1, 130, 65, 64, true, false},
      {2, 1, 5, 1, 8, true, false},    {1, 2, 33, 33, 5, true, false},
  };
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    if (!attention_unsupported_reason(*ctx, t, 64).empty()) {
      std::cout << "skipping " << dtype_name(t) << ": " << attention_unsupported_reason(*ctx, t, 64) << "\n";
      continue;
    }
    Stats f, b;
    for (const Case& c : cases) check_case(*ctx, c, t, f, b);
    report("cross", t, f, b, 0);
  }
}

TEST(VulkanAttention, EmptyAndRefused) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // No keys: every row's output is 0 and its lse -inf.
  Stats f, b;
  check_case(*ctx, Case{2, 1, 3, 0, 8, false, false}, DType::F32, f, b);
  EXPECT_NE(attention_unsupported_reason(*ctx, DType::I32, 8), "");
  EXPECT_NE(attention_unsupported_reason(*ctx, DType::F32, 300).find("head size"), std::string::npos);
  EXPECT_EQ(attention_unsupported_reason(*ctx, DType::F32, 256), "");
}

// Timing, not a check (run with --gtest_also_run_disabled_tests): forward and backward
// of a GPT-sized causal attention, B 4, H 16, T 1024, D 64, in each float dtype.
TEST(VulkanAttention, DISABLED_Benchmark) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const int64_t B = 4, H = 16, T = 1024, D = 64, BH = B * H;
  for (DType t : {DType::F32, DType::BF16}) {
    for (bool causal : {true, false}) {
      std::mt19937 rng(5);
      Host x = random_host(t, BH * T * D, rng);
      auto aq = upload(*ctx, x);
      const Layout l{{BH, T, D}, {T * D, D, 1}, 0};
      auto afwd = ctx->pool().allocate(static_cast<size_t>(BH * T * (D + 1)) * dtype_size(t));
      auto agrad = ctx->pool().allocate(static_cast<size_t>(3 * BH * T * D) * dtype_size(t));
      const Layout lo{{BH, T, D + 1}, {T * (D + 1), D + 1, 1}, 0};
      const Layout lg{{3, BH, T, D}, {BH * T * D, T * D, D, 1}, 0};
      AttentionForwardKernel fwd(*ctx, t, D);
      AttentionBackwardKernel bwd(*ctx, t, D);
      const ViewArg q = gpu_view(aq, t, l);
      auto time = [&](auto&& fn) {
        fn();
        ctx->stream().synchronize();
        const int reps = 10;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) fn();
        ctx->stream().synchronize();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
      };
      const double tf = time([&] { fwd.launch(ctx->stream(), q, q, q, gpu_view(afwd, t, lo), causal, 0.125); });
      const double tb = time([&] {
        bwd.launch(ctx->stream(), q, q, q, gpu_view(afwd, t, lo), q, gpu_view(agrad, t, lg), causal, 0.125);
      });
      // Matmul flops: forward 2 (QK^T, PV), backward 5 (QK^T, dO V^T, dV, dK, dQ) -- plus
      // one more QK^T and dO V^T for the second pass here; halved when causal.
      const double pairs = static_cast<double>(BH) * T * T * (causal ? 0.5 : 1.0);
      std::cout << ctx->info().name << " " << dtype_name(t) << (causal ? " causal" : " full") << " B 4 H 16 T 1024 D 64: forward "
                << tf * 1e3 << " ms (" << 4 * pairs * D / tf * 1e-12 << " TFLOP/s), backward " << tb * 1e3 << " ms ("
                << 10 * pairs * D / tb * 1e-12 << " TFLOP/s)\n";
    }
  }
}

// ---- through Tensors on the device, forward and gradients, against the CPU ----

Device* vulkan_or_null() { return devices().empty() ? nullptr : &get_device("vulkan"); }

void expect_tensors_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(cpu_device()).to_vector<double>(), w = want.to_vector<double>();
  double scale = 1;
  for (double x : w) scale = std::max(scale, std::fabs(x));
  int reported = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= tol * (scale + std::fabs(w[i]))) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << g[i] << " want " << w[i];
}

TEST(VulkanAttention, TensorsForwardAndGradients) {
  Device* dev = vulkan_or_null();
  if (!dev) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());
  for (DType t : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const double tol = t == DType::F32 ? 2e-5 : 1e-2;
    manual_seed(11);
    const int64_t B = 2, T = 19, H = 2, D = 16;
    // A fused projection split into heads: q, k, v are strided views, read in place.
    Tensor x = randn({B, T, 3 * H * D}).to(t);
    Tensor w = randn({B, H, T, D}).to(t);
    auto heads = [&](const Tensor& a) {
      auto parts = split(a, H * D, -1);
      std::vector<Tensor> out;
      for (const Tensor& p : parts) out.push_back(p.reshape({B, T, H, D}).transpose(1, 2));
      return out;
    };
    for (bool causal : {true, false}) {
      SCOPED_TRACE(causal ? "causal" : "full");
      auto cpu_h = heads(x);
      for (Tensor& h : cpu_h) h = h.detach().requires_grad_();
      Tensor y_cpu = scaled_dot_product_attention(cpu_h[0], cpu_h[1], cpu_h[2], causal);
      auto g_cpu = grad({y_cpu}, {cpu_h[0], cpu_h[1], cpu_h[2]}, {w});

      auto dev_h = heads(x.to(*dev));
      for (Tensor& h : dev_h) h = h.detach().requires_grad_();
      Tensor y_dev = scaled_dot_product_attention(dev_h[0], dev_h[1], dev_h[2], causal);
      EXPECT_EQ(&y_dev.device(), dev);
      expect_tensors_near(y_dev, y_cpu, tol, "output");
      auto g_dev = grad({y_dev}, {dev_h[0], dev_h[1], dev_h[2]}, {w.to(*dev)});
      const char* names[] = {"dq", "dk", "dv"};
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(&g_dev[static_cast<size_t>(i)].device(), dev);
        expect_tensors_near(g_dev[static_cast<size_t>(i)], g_cpu[static_cast<size_t>(i)], tol, names[i]);
      }
    }
  }
}

// Recorded once (the batch table is uploaded at record time) and replayed: the kernels a
// compiled training step replays.
TEST(VulkanAttention, RecordAndReplay) {
  Device* dev = vulkan_or_null();
  if (!dev) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());
  const int64_t B = 2, H = 2, T = 9, D = 8, BH = B * H;
  std::mt19937 rng(9);
  Host x = random_host(DType::F32, B * T * 3 * H * D, rng);
  const Shape strides{T * 3 * H * D, D, 3 * H * D, 1};
  const Layout lq{{B, H, T, D}, strides, 0}, lk{{B, H, T, D}, strides, H * D}, lv{{B, H, T, D}, strides, 2 * H * D};
  const Layout lo{{BH, T, D + 1}, {T * (D + 1), D + 1, 1}, 0};
  Host want(DType::F32, BH * T * (D + 1));
  cpu::attention_forward(cpu_view(x, lq), cpu_view(x, lk), cpu_view(x, lv), true, 0.3, cpu_view(want, lo));

  auto in = dev->allocate(x.bytes.size()), out = dev->allocate(want.bytes.size());
  dev->upload(*in, 0, x.bytes.data(), x.bytes.size());
  auto arg = [](const std::shared_ptr<Buffer>& b, const Layout& l) {
    return KernelArg{b, 0, DType::F32, l.shape, l.strides, l.offset};
  };
  Kernel k;
  k.op = k.node.op = OpId::Attention;
  k.node.params = AttentionParams{true, 0.3, false};
  k.node.dtype = DType::F32;
  k.inputs = {arg(in, lq), arg(in, lk), arg(in, lv)};
  k.output = arg(out, lo);
  ASSERT_TRUE(dev->supports(k)) << unsupported_reason(0, k);
  auto rec = dev->record({k});
  Stats stats;
  for (int i = 0; i < 2; ++i) {
    const std::vector<uint8_t> zeros(want.bytes.size(), 0);
    dev->upload(*out, 0, zeros.data(), zeros.size());
    dev->replay(*rec);
    Host got(DType::F32, want.size());
    dev->download(*out, 0, got.bytes.data(), got.bytes.size());
    expect_close(got, want, 0, want.size(), tolerance(DType::F32), stats, "replay " + std::to_string(i));
  }
}

TEST(VulkanAttention, SupportsSaysWhy) {
  Device* dev = vulkan_or_null();
  if (!dev) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());
  // The scheduler refuses what supports() rejects; unsupported_reason() says why.
  Kernel k;
  k.op = k.node.op = OpId::Attention;
  k.node.params = AttentionParams{true, 0.05, false};
  const KernelArg q{nullptr, 0, DType::F32, {1, 4, 300}, {1200, 300, 1}, 0};
  k.inputs = {q, q, q};
  k.output = KernelArg{nullptr, 0, DType::F32, {1, 4, 301}, {1204, 301, 1}, 0};
  EXPECT_FALSE(dev->supports(k));
  EXPECT_NE(unsupported_reason(0, k).find("head size 300"), std::string::npos) << unsupported_reason(0, k);
  k.inputs[0].shape = {1, 4, 64};
  k.inputs[1].shape = k.inputs[2].shape = {1, 9, 64};
  k.inputs[0].dtype = k.inputs[1].dtype = k.inputs[2].dtype = k.output.dtype = DType::BF16;
  if (devices()[0].storage16) {
    EXPECT_EQ(unsupported_reason(0, k), "");
  }
  k.op = k.node.op = OpId::AttentionBackward;
  EXPECT_NE(unsupported_reason(0, k).find("inputs"), std::string::npos);  // 3 inputs, not 5
  Tensor big = randn({1, 4, 300}).to(*dev);
  try {
    scaled_dot_product_attention(big, big, big).to_vector<float>();
    FAIL() << "head size 300 has no Vulkan kernel; expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vulkan:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace alk::vk
#endif
