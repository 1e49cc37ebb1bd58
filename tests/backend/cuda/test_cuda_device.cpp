// The CUDA device against the CPU backend, on a machine with an NVIDIA GPU (skipped
// elsewhere, saying why): transfers, fused Map kernels over broadcast and transposed
// views, reductions with prologue and epilogue, matmuls, bad indices raised as the CPU
// raises them, and a compiled step replayed as a CUDA graph. The op-by-op parity over the
// whole op table is tests/backend/test_device_parity.cpp (ALK_PARITY_DEVICES=cuda:0).
#ifdef ALK_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>

#include "alk/alk.h"
#include "backend/cuda/context.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/tuning.h"
#include "graph/schedule.h"
#include "testing.h"

namespace alk {
namespace {

Device* cuda_or_null() {
  if (cuda::devices().empty()) return nullptr;
  return &get_device("cuda:0");
}
#define ALK_CUDA_OR_SKIP(dev)                                                                          \
  Device* dev = cuda_or_null();                                                                        \
  if (!dev) GTEST_SKIP() << "no CUDA device: " << (cuda::driver() ? "none found" : cuda::driver_unavailable_reason())

// The CUDA backend's kernel choices (cuda::tuning(), the ALK_CUDA_* comparisons) changed for
// a scope, and restored after it.
class ScopedTuning {
 public:
  ScopedTuning() : saved_(cuda::tuning()) {}
  ~ScopedTuning() { cuda::tuning() = saved_; }
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;
  cuda::Tuning* operator->() { return &cuda::tuning(); }

 private:
  cuda::Tuning saved_;
};

void expect_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol) {
  ASSERT_EQ(gpu.shape(), cpu.shape());
  const std::vector<double> g = cast(gpu.to(cpu_device()), DType::F64).to_vector<double>();
  const std::vector<double> c = cast(cpu, DType::F64).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << "element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << "element " << i;
  }
}

TEST(CudaDevice, UploadsAndDownloadsRoundTrip) {
  ALK_CUDA_OR_SKIP(dev);
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, (int64_t{1} << 24) + 3}) {  // the last one skips the pinned staging
    Tensor x = randn({n});
    Tensor back = x.to(*dev).to(cpu_device());
    EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>()) << n;
  }
  EXPECT_EQ(dev->info().kind, "cuda");
  EXPECT_GT(dev->info().memory_bytes, 0);
}

TEST(CudaDevice, FusedMapOverBroadcastAndTransposedViews) {
  ALK_CUDA_OR_SKIP(dev);
  Tensor a = randn({33, 17}), b = randn({17, 33}), c = randn({17});
  auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) { return relu(a * b.transpose(0, 1) + c) - exp(a) / 3.0; };
  expect_close(f(a.to(*dev), b.to(*dev), c.to(*dev)), f(a, b, c), 1e-5, 1e-6);
  for (DType t : {DType::F16, DType::BF16, DType::F64, DType::I64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = cast(randn({5, 7}) * 4.0, t), y = cast(randn({7}) * 4.0, t);
    expect_close((x + y * x).to(cpu_device()), x + y * x, 1e-2, 1e-2);
    expect_close(x.to(*dev) + y.to(*dev) * x.to(*dev), x + y * x, 1e-2, 1e-2);
  }
}

// Map kernels walk operands that are contiguous along the innermost dim a vector per
// iteration (ALK_VEC: 16 bytes per operand): rank 1, rows of transposed and broadcast views
// (a [B, H, T, D] view of [B, T, H, D], a bias row), a tail past the last whole vector, and
// views that do not qualify (an odd innermost size, an offset off the vector boundary, a
// column broadcast), each exactly the CPU's values (the ops are exact or rounded alike).
TEST(CudaDevice, VectorizedMapsOverRowsAndTails) {
  ALK_CUDA_OR_SKIP(dev);
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I64, DType::U8}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto make = [t](Shape s) {  // no negatives for u8 (a negative float to u8 is undefined)
      Tensor r = randn(std::move(s)) * 8.0;
      return cast(t == DType::U8 ? abs(r) : r, t);
    };
    Tensor x = make({4, 6, 5, 64}), bias = make({64}), odd = make({4, 6, 5, 63}), flat = make({1003}),
           col = make({4, 6, 5, 1});
    auto check = [&](const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>& f) {
      const Tensor want = f(x, bias, odd, flat, col);
      const Tensor got = f(x.to(*dev), bias.to(*dev), odd.to(*dev), flat.to(*dev), col.to(*dev));
      expect_close(got, want, 0, 0);
    };
    check([](const Tensor& a, const Tensor& b, const Tensor&, const Tensor&, const Tensor&) { return a + b; });
    check([](const Tensor& a, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { return a.transpose(1, 2).contiguous(); });
    check([](const Tensor& a, const Tensor& b, const Tensor&, const Tensor&, const Tensor&) { return a.transpose(1, 2) * 2.0 + b; });
    check([](const Tensor&, const Tensor&, const Tensor& o, const Tensor&, const Tensor&) { return o.transpose(0, 1) - o.transpose(0, 1); });
    check([](const Tensor&, const Tensor&, const Tensor&, const Tensor& f, const Tensor&) { return f * 3.0; });
    check([](const Tensor&, const Tensor&, const Tensor&, const Tensor& f, const Tensor&) { return f.slice(0, 1, 1003) + 1.0; });
    check([](const Tensor& a, const Tensor&, const Tensor&, const Tensor&, const Tensor& c) { return a + c; });
    // A per-row mask and value (stride 0 along the innermost dim: loaded once per vector).
    check([](const Tensor& a, const Tensor&, const Tensor&, const Tensor&, const Tensor& c) {
      return where(gt(c, 0.0), a, c * 2.0);
    });
    check([](const Tensor& a, const Tensor&, const Tensor&, const Tensor&, const Tensor& c) {
      return where(gt(c.transpose(1, 2), 0.0), a.transpose(1, 2), 1.0);
    });
  }
}

// Kernels with extra outputs, which CUDA fuses (Device::extra_outputs): the same
// values as the CPU's separate kernels, over shapes with and without the vector loop.
TEST(CudaDevice, MapKernelsStoreExtraOutputs) {
  ALK_CUDA_OR_SKIP(dev);
  for (Shape shape : {Shape{64, 96}, Shape{7, 13}, Shape{3, 1001}}) {
    SCOPED_TRACE(to_string(shape));
    Tensor a = randn(shape), b = randn(shape);
    realize({a, b});
    const std::vector<Tensor> want = testing::extra_output_cases(a, b);
    realize(want);
    const std::vector<Tensor> got = testing::extra_output_cases(a.to(*dev), b.to(*dev));
    realize(got);
    EXPECT_EQ(last_schedule_stats().extra_outputs, 3);
    ASSERT_EQ(got.size(), want.size());
    expect_close(got[0], want[0], 0, 0);          // bf16(a + b)
    expect_close(got[1], want[1], 1e-5, 1e-4);    // a sum, another order
    expect_close(got[2], want[2], 0, 0);          // bf16(a * b) read back: its rounding
    expect_close(got[3], want[3], 1e-5, 1e-5);
    expect_close(got[4], want[4], 1e-5, 1e-5);    // exp: CUDA's expf
    expect_close(got[5], want[5], 1.0 / 128, 0);  // bf16 of a value within expf's ulps
    expect_close(got[6], want[6], 1e-5, 1e-5);
  }
}

// Extra outputs of a product's epilogue on CUDA (formed under ALK_EXTRA_OUTPUTS=1: not faster
// yet): in f32 (the Map pass after the product) and in bf16 at GPT-2's fc shape (the ping-pong
// tensor-core kernel stages the extra output, then the result).
TEST(CudaDevice, ProductEpiloguesStoreExtraOutputs) {
  ALK_CUDA_OR_SKIP(dev);
  setenv("ALK_EXTRA_OUTPUTS", "1", 1);
  for (auto [rows, inner, cols, dtype] : {std::tuple{48, 32, 40, DType::F32}, std::tuple{2048, 768, 3072, DType::BF16}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    Tensor x = (randn({rows, inner}) * 0.2).to(dtype), w = (randn({inner, cols}) * 0.2).to(dtype);
    Tensor bias = randn({cols}).to(dtype), h = randn({rows, cols}).to(dtype), h2 = randn({rows, cols}).to(dtype);
    realize({x, w, bias, h, h2});
    unsetenv("ALK_EXTRA_OUTPUTS");  // the CPU's values from separate kernels
    const std::vector<Tensor> want = testing::epilogue_extra_output_cases(x, w, bias, h, h2);
    realize(want);
    setenv("ALK_EXTRA_OUTPUTS", "1", 1);
    const std::vector<Tensor> got = testing::epilogue_extra_output_cases(x.to(*dev), w.to(*dev), bias.to(*dev), h.to(*dev),
                                                                               h2.to(*dev));
    realize(got);
    EXPECT_EQ(last_schedule_stats().extra_outputs, 3);
    const double tol = dtype == DType::F32 ? 1e-4 : 1.0 / 64;  // sums in another order; bf16 rounding
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE("output " + std::to_string(i));
      expect_close(got[i], want[i], tol, tol);
    }
  }
  unsetenv("ALK_EXTRA_OUTPUTS");
}

// GPT-2's proj and fc2 forward (K 768 and 3072), an f32 result (the residual stream plus the
// bf16 product and bias) in one kernel. 4096 rows: 192 tiles of 128 x 128, no split-K.
TEST(CudaDevice, F32ResultsOfTheProductEpilogue) {
  ALK_CUDA_OR_SKIP(dev);
  for (int64_t inner : {768, 3072}) {
    SCOPED_TRACE("K = " + std::to_string(inner));
    Tensor x = cast(randn({4096, inner}) * 0.2, DType::BF16), w = cast(randn({768, inner}) * 0.2, DType::BF16);
    Tensor bias = cast(randn({768}), DType::BF16), residual = randn({4096, 768});
    realize({x, w, bias, residual});
    auto linear_residual = [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r) {
      return r + (matmul(x, w.transpose(0, 1)) + b);
    };
    const Tensor want = linear_residual(x, w, bias, residual);
    want.realize();
    const Tensor xd = x.to(*dev), wd = w.to(*dev), bd = bias.to(*dev), rd = residual.to(*dev);
    realize({xd, wd, bd, rd});
    const Tensor got = linear_residual(xd, wd, bd, rd);
    got.realize();
    EXPECT_EQ(last_schedule_stats().kernels, 1);  // the residual and bias in the product's store
    EXPECT_EQ(got.dtype(), DType::F32);
    // The product and its sum with the bias are each rounded to bf16 (autocast's dtype) before
    // the residual adds: summed in another order, either may round one way here and the other
    // on the CPU, up to a bf16 step of the product (|x w^T| reaches ~12 at K = 3072: 0.0625)
    // even where the bias cancels it.
    expect_close(got, want, 0.15, 2e-2);
  }
}

TEST(CudaDevice, ReductionsWithPrologueAndEpilogue) {
  ALK_CUDA_OR_SKIP(dev);
  Tensor x = randn({6, 300, 5}), y = randn({6, 300, 5});
  Tensor xd = x.to(*dev), yd = y.to(*dev);
  expect_close(sum(xd * yd, {1}), sum(x * y, {1}), 1e-4, 1e-4);
  expect_close(sqrt(sum(xd * xd, {0, 2}) + 1.0), sqrt(sum(x * x, {0, 2}) + 1.0), 1e-4, 1e-4);
  expect_close(max(xd, {2}), max(x, {2}), 0, 0);
  expect_close(sum(xd), sum(x), 1e-4, 1e-3);
  Tensor big = randn({3, 5000});  // a block per output
  expect_close(sum(big.to(*dev), {1}), sum(big, {1}), 1e-4, 1e-3);
}

TEST(CudaDevice, MatmulsBatchedTransposedAndInEveryFloatDtype) {
  ALK_CUDA_OR_SKIP(dev);
  Tensor a = randn({3, 70, 40}), b = randn({3, 50, 40});
  expect_close(matmul(a.to(*dev), b.to(*dev).transpose(1, 2)), matmul(a, b.transpose(1, 2)), 1e-4, 1e-4);
  Tensor bias = randn({50});
  expect_close(relu(matmul(a.to(*dev), b.to(*dev).transpose(1, 2)) + bias.to(*dev)),
               relu(matmul(a, b.transpose(1, 2)) + bias), 1e-4, 1e-4);
  for (DType t : {DType::F64, DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = cast(randn({65, 33}), t), y = cast(randn({33, 31}), t);
    expect_close(matmul(x.to(*dev), y.to(*dev)), matmul(x, y), t == DType::F64 ? 1e-12 : 2e-2, 2e-2);
  }
  // Epilogues fused into the tensor-core kernel's store: a bias and tanh-GELU over a bf16
  // product into f32 (the result's dtype differs from the product's), and a residual add over
  // a batched product with a transposed weight.
  Tensor xb = cast(randn({130, 64}), DType::BF16), wb = cast(randn({96, 64}), DType::BF16), bias96 = randn({96});
  auto mlp = [](const Tensor& x, const Tensor& w, const Tensor& b) { return gelu_tanh(matmul(x, w.transpose(0, 1)) + b) * 2.0; };
  expect_close(mlp(xb.to(*dev), wb.to(*dev), bias96.to(*dev)), mlp(xb, wb, bias96), 2e-2, 2e-2);
  Tensor hb = cast(randn({2, 64, 64}), DType::BF16), res = cast(randn({2, 64, 96}), DType::BF16);
  auto block = [](const Tensor& h, const Tensor& w, const Tensor& r) { return r + matmul(h, w.transpose(0, 1)); };
  expect_close(block(hb.to(*dev), wb.to(*dev), res.to(*dev)), block(hb, wb, res), 2e-2, 5e-2);
  // Few output tiles over a long K run split-K (slices into an f32 workspace, then summed):
  // a weight gradient's layout (g^T x, the first operand M-contiguous) and the plain one.
  Tensor g = cast(randn({8192, 96}), DType::BF16), x = cast(randn({8192, 200}), DType::BF16);
  Tensor gd = g.to(*dev), xd = x.to(*dev);
  expect_close(matmul(gd.transpose(0, 1), xd), matmul(g.transpose(0, 1), x), 1e-2, 1.0);
  expect_close(matmul(gd.transpose(0, 1).contiguous(), xd), matmul(g.transpose(0, 1), x), 1e-2, 1.0);
  // On the bulk-copy kernel these run stream-K (every block the same share of all tiles' K
  // steps, a share crossing a tile boundary in two pieces; the pieces summed per tile), or
  // with equal slices (ALK_CUDA_SPLIT_K=slices) K slices of whole 64-wide steps of which the
  // last may be shorter (its overrun reads zeros): K of 131 steps, and of 131 steps and 8
  // elements, on whole tiles and on edge tiles (200 x 264).
  for (bool slices : {false, true}) {
    SCOPED_TRACE(slices ? "equal slices" : "stream-K");
    ScopedTuning tuning;
    tuning->split_k_slices = slices;
    for (int64_t k : {8384, 8392})
      for (auto [m, n] : {std::pair<int64_t, int64_t>{256, 512}, {200, 264}}) {
        SCOPED_TRACE(std::to_string(k) + " " + std::to_string(m) + " x " + std::to_string(n));
        Tensor u = cast(randn({k, m}), DType::BF16), v = cast(randn({k, n}), DType::BF16);
        expect_close(matmul(u.to(*dev).transpose(0, 1), v.to(*dev)), matmul(u.transpose(0, 1), v), 1e-2, 1.0);
        // With an epilogue (stream-K applies it in its sum; slices run it as a pass of its own):
        // a weight gradient's cast to f32, and arithmetic with an f32 input.
        auto grad = [](const Tensor& x, const Tensor& y) { return cast(matmul(x.transpose(0, 1), y), DType::F32); };
        expect_close(grad(u.to(*dev), v.to(*dev)), grad(u, v), 1e-2, 1.0);
        Tensor w = randn({m, n});
        auto scaled = [](const Tensor& x, const Tensor& y, const Tensor& c) { return matmul(x.transpose(0, 1), y) * 0.5 + c; };
        expect_close(scaled(u.to(*dev), v.to(*dev), w.to(*dev)), scaled(u, v, w), 1e-2, 1.0);
      }
  }
  // Weight gradients whose K slices fill one wave (wave_slices): of 192 x 192 tiles (three
  // consumer warpgroups), [768, 768] over K 8192 (16 tiles x 8 slices) and edge tiles
  // (712 x 520: 12 x 11); of 128 x 256 tiles, [2304, 256] (18 x 7); bare and cast to f32 as a
  // gradient (the slices' sum applies it).
  for (auto [m, n] : {std::pair<int64_t, int64_t>{768, 768}, {712, 520}, {2304, 256}}) {
    SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n) + " over K 8192");
    Tensor u = cast(randn({8192, m}), DType::BF16), v = cast(randn({8192, n}), DType::BF16);
    expect_close(matmul(u.to(*dev).transpose(0, 1), v.to(*dev)), matmul(u.transpose(0, 1), v), 1e-2, 1.0);
    auto grad = [](const Tensor& x, const Tensor& y) { return cast(matmul(x.transpose(0, 1), y), DType::F32); };
    expect_close(grad(u.to(*dev), v.to(*dev)), grad(u, v), 1e-2, 1.0);
  }
}

// Products with a short K and a 16-bit result, on the kernel chosen for them (the persistent
// ping-pong kernel: each consumer warpgroup owns whole tiles in turn) and forced onto the
// persistent kernel whose warpgroups share each tile, onto the two-block kernel and onto
// 192 x 192 tiles of three consumer warpgroups (the weight gradients' kernel): more
// tiles than the SMs hold twice, edges in M, N and K, every operand layout, and epilogues in bf16: a bias and tanh-GELU (the bias loaded before the
// main loop), a bias and a residual (the residual copied into the staging tile by TMA), and a
// residual whose rows bulk copies cannot read (a row stride of 1003: loaded in the epilogue).
TEST(CudaDevice, ShortKProductsOfManyTilesMatchTheCpu) {
  ALK_CUDA_OR_SKIP(dev);
  const Tensor a = cast(randn({4000, 200}), DType::BF16), b = cast(randn({200, 1000}), DType::BF16);
  const Tensor bias = randn({1000}), res = cast(randn({4000, 1000}), DType::BF16);
  const Tensor res_wide = cast(randn({4000, 1003}), DType::BF16), res_odd = res_wide.slice(1, 2, 1002);
  const Tensor at = a.transpose(0, 1).contiguous(), bt = b.transpose(0, 1).contiguous();
  const Tensor ad = a.to(*dev), bd = b.to(*dev), atd = at.to(*dev), btd = bt.to(*dev), biasd = bias.to(*dev);
  const Tensor resd = res.to(*dev), res_oddd = res_wide.to(*dev).slice(1, 2, 1002);
  for (cuda::GemmKernel gemm : {cuda::GemmKernel::Auto, cuda::GemmKernel::WgmmaTmaPersistent,
                                cuda::GemmKernel::WgmmaTmaPair, cuda::GemmKernel::WgmmaTma192}) {
    SCOPED_TRACE(static_cast<int>(gemm));
    ScopedTuning tuning;
    tuning->gemm = gemm;
    expect_close(matmul(ad, bd), matmul(a, b), 2e-2, 5e-2);
    expect_close(matmul(atd.transpose(0, 1), bd), matmul(a, b), 2e-2, 5e-2);
    expect_close(matmul(ad, btd.transpose(0, 1)), matmul(a, b), 2e-2, 5e-2);
    expect_close(matmul(atd.transpose(0, 1), btd.transpose(0, 1)), matmul(a, b), 2e-2, 5e-2);
    auto fc = [](const Tensor& x, const Tensor& w, const Tensor& c) { return cast(gelu_tanh(matmul(x, w) + c), DType::BF16); };
    expect_close(fc(ad, bd, biasd), fc(a, b, bias), 2e-2, 5e-2);
    auto block = [](const Tensor& x, const Tensor& w, const Tensor& c, const Tensor& r) {
      return cast(matmul(x, w) + c, DType::BF16) + r;
    };
    expect_close(block(ad, bd, biasd, resd), block(a, b, bias, res), 2e-2, 1e-1);
    expect_close(block(ad, bd, biasd, res_oddd), block(a, b, bias, res_odd), 2e-2, 1e-1);
  }
}

// Under autocast attention multiplies on the tensor cores in bf16 (kernels/attention_mma.cu):
// output and q/k/v gradients against the CPU in f32 within bf16's rounding, for causal and
// full masks, Tq != S, and head dims 32 and 64; without autocast the same call stays f32.
// With bf16 q, k, v (a bf16 projection under autocast) the kernels read them as they are and
// return bf16 gradients (feature "attention_16bit"); the CPU reference widens them. On sm_90a
// the bf16 cases at head dim 64 take the kernels on warpgroup instructions, then run again on
// mma.sync (ALK_CUDA_ATTENTION_FORWARD / _BACKWARD=mma): causal, full, Tq != S.
TEST(CudaDevice, AttentionOnTensorCoresUnderAutocast) {
  ALK_CUDA_OR_SKIP(dev);
  struct Case { int64_t B, H, T, S, D; bool causal, half; };
  for (const Case& c : {Case{2, 3, 100, 100, 64, true, false}, Case{1, 2, 70, 130, 64, true, false},
                        Case{2, 1, 129, 129, 32, false, false}, Case{1, 1, 150, 80, 64, true, false},
                        Case{2, 3, 200, 200, 64, true, true}, Case{1, 2, 70, 130, 64, true, true},
                        Case{2, 1, 129, 129, 32, false, true}, Case{1, 2, 150, 80, 128, true, true},
                        Case{2, 2, 150, 90, 64, false, true}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " D " +
                 std::to_string(c.D) + (c.causal ? " causal" : "") + (c.half ? " bf16 operands" : ""));
    auto operand = [&](int64_t rows) {
      Tensor x = randn({c.B, c.H, rows, c.D});
      return c.half ? cast(x, DType::BF16) : x;
    };
    Tensor q = operand(c.T), k = operand(c.S), v = operand(c.S);
    Tensor w = randn({c.B, c.H, c.T, c.D});
    auto run = [&](Device& d, bool autocast, std::vector<Tensor>& grads) {
      Tensor qd = q.to(d).detach().requires_grad_(), kd = k.to(d).detach().requires_grad_(),
             vd = v.to(d).detach().requires_grad_();
      if (&d == &cpu_device() && c.half) {  // the reference in f32 from the same bf16 values
        qd = cast(q, DType::F32).detach().requires_grad_(), kd = cast(k, DType::F32).detach().requires_grad_(),
        vd = cast(v, DType::F32).detach().requires_grad_();
      }
      Tensor out;
      {
        std::optional<Autocast> scope;
        if (autocast) scope.emplace(DType::BF16);
        out = scaled_dot_product_attention(qd, kd, vd, c.causal);
      }
      out = cast(out, DType::F32);
      sum(out * w.to(d)).backward();
      grads = {qd.grad(), kd.grad(), vd.grad()};
      return out;
    };
    std::vector<Tensor> ref_grads, tc_grads, f32_grads;
    Tensor ref = run(cpu_device(), false, ref_grads);
    Tensor tc = run(*dev, true, tc_grads);
    if (c.half && c.D == 64 && dev->info().driver.find("compute 9.0") != std::string::npos) {
      // sm_90a: the op chose the warpgroup kernels (the mma.sync ones give the same results).
      const cuda::Context& ctx = cuda::Context::get(0);
      EXPECT_TRUE(ctx.loaded("attention_forward_wgmma"));
      EXPECT_TRUE(ctx.loaded("attention_backward_wgmma"));
    }
    expect_close(tc, ref, 3e-2, 3e-2);
    for (int i = 0; i < 3; ++i) expect_close(tc_grads[i], ref_grads[i], 5e-2, 5e-2);
    if (c.half) {
      for (int i = 0; i < 3; ++i) EXPECT_EQ(tc_grads[i].dtype(), DType::BF16);
      // The other kernels: forward and backward on mma.sync.
      std::vector<Tensor> other_grads;
      Tensor other;
      {
        ScopedTuning tuning;
        tuning->attention_forward_mma = tuning->attention_backward_mma = true;
        other = run(*dev, true, other_grads);
      }
      expect_close(other, ref, 3e-2, 3e-2);
      for (int i = 0; i < 3; ++i) expect_close(other_grads[i], ref_grads[i], 5e-2, 5e-2);
      continue;  // without autocast, bf16 operands take the bf16 kernels: covered by the parity suite
    }
    Tensor f32 = run(*dev, false, f32_grads);
    expect_close(f32, ref, 1e-4, 1e-4);
    // The autocast run really took the bf16 path: it differs from f32 by bf16 rounding.
    const double diff = max(abs(tc.to(cpu_device()) - ref)).item();
    EXPECT_GT(diff, 1e-5);
  }
}

// The GPT's case: q, k and v are strided views of one bf16 projection [B, T, 3, H, D] (read
// in place, by cp.async), the gradient flows back into the packed tensor as bf16.
TEST(CudaDevice, AttentionReadsAPackedBf16ProjectionUnderAutocast) {
  ALK_CUDA_OR_SKIP(dev);
  const int64_t B = 2, T = 300, H = 3, D = 64;
  const Tensor packed = cast(randn({B, T, 3, H, D}), DType::BF16), w = randn({B, T, H * D});
  auto run = [&](Device& d, Tensor& grad) {
    Tensor p = (&d == &cpu_device() ? cast(packed, DType::F32) : packed.to(d)).detach().requires_grad_();
    auto part = [&](int64_t i) { return p.select(2, i).transpose(1, 2); };
    Tensor y;
    {
      std::optional<Autocast> scope;
      if (&d != &cpu_device()) scope.emplace(DType::BF16);
      y = scaled_dot_product_attention(part(0), part(1), part(2), true);
    }
    if (&d != &cpu_device()) {
      // 16-bit, as PyTorch's flash attention, with its rows stored [B, T, H, D]: the output
      // projection reads them in place (AttentionParams::out_heads), no transposing copy.
      EXPECT_EQ(y.dtype(), DType::BF16);
      EXPECT_TRUE(y.transpose(1, 2).is_contiguous());
    }
    y = cast(y.transpose(1, 2).reshape({B, T, H * D}), DType::F32);
    sum(y * w.to(d)).backward();
    grad = p.grad();
    return y;
  };
  Tensor ref_grad, grad;
  const Tensor ref = run(cpu_device(), ref_grad), out = run(*dev, grad);
  EXPECT_EQ(grad.dtype(), DType::BF16);
  expect_close(out, ref, 3e-2, 3e-2);
  expect_close(grad, ref_grad, 5e-2, 5e-2);
  // The mma.sync kernels (the warpgroup ones are the default on sm_90a) read and write the
  // packed layouts too.
  Tensor mma_grad, mma_out;
  {
    ScopedTuning tuning;
    tuning->attention_forward_mma = tuning->attention_backward_mma = true;
    mma_out = run(*dev, mma_grad);
  }
  expect_close(mma_out, ref, 3e-2, 3e-2);
  expect_close(mma_grad, ref_grad, 5e-2, 5e-2);
}

// Under autocast a layer norm's f32 output is read only by its bf16 cast (the next
// product's operand): the norm kernel writes the bf16 value itself (its epilogue, here with
// a residual read through a transposed view too), and its backward reads the bf16 gradient
// as it is (Device::widens_input). Rows of 768 (16-byte vectors) and of 100 (scalar loads).
TEST(CudaDevice, LayerNormWritesAndReadsSixteenBitTensorsItself) {
  ALK_CUDA_OR_SKIP(dev);
  for (const Shape& shape : {Shape{4, 33, 768}, Shape{5, 7, 100}}) {
    const int64_t C = shape.back();
    const Tensor x0 = randn(shape), w0 = randn({C}), b0 = randn({C}), r0 = randn({shape[0], C, shape[1]});
    const Tensor seed = randn(shape);
    auto run = [&](Device& d, std::vector<Tensor>& grads) {
      Tensor x = x0.to(d).detach().requires_grad_(), w = w0.to(d).detach().requires_grad_();
      Tensor b = b0.to(d).detach().requires_grad_();
      Tensor y16 = layer_norm(x, {C}, w, b, 1e-5).to(DType::BF16);
      Tensor mixed = (layer_norm(x, {C}, w, b, 1e-5) * 0.5 + r0.to(d).transpose(1, 2)).to(DType::F16);
      Tensor rms16 = rms_norm(x.detach(), {C}, w.detach(), 1e-6).to(DType::BF16);
      realize({y16, mixed, rms16});
      sum(y16.to(DType::F32) * seed.to(d)).backward();
      grads = {x.grad(), w.grad(), b.grad()};
      return std::vector<Tensor>{y16, mixed, rms16};
    };
    std::vector<Tensor> ref_grads, grads;
    const std::vector<Tensor> ref = run(cpu_device(), ref_grads), out = run(*dev, grads);
    expect_close(out[0], ref[0], 1e-2, 1e-2);  // bf16: values may round to neighbours
    expect_close(out[1], ref[1], 2e-3, 2e-3);
    expect_close(out[2], ref[2], 1e-2, 1e-2);
    for (size_t i = 0; i < grads.size(); ++i) expect_close(grads[i], ref_grads[i], 1e-4, 1e-3);
  }
}

TEST(CudaDevice, BadIndicesRaiseTheCpusErrorAtTheNextRead) {
  ALK_CUDA_OR_SKIP(dev);
  Tensor x = randn({4, 3}).to(*dev);
  Tensor idx = tensor(std::vector<int64_t>{0, 7, 1}, {3}).to(*dev);
  try {
    Tensor y = index_select(x, 0, idx);
    y.to(cpu_device()).to_vector<float>();
    FAIL() << "no error for index 7 of 4 rows";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "index_select") << e.what();
    EXPECT_NE(std::string(e.what()).find("7 is out of range"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_cuda_device.cpp"), std::string::npos) << e.what();
  }
  // The device is usable afterwards.
  expect_close(index_select(x, 0, tensor(std::vector<int64_t>{3, 0}, {2}).to(*dev)),
               index_select(x.to(cpu_device()), 0, tensor(std::vector<int64_t>{3, 0}, {2})), 0, 0);
}

TEST(CudaDevice, ACompiledStepReplaysAsAGraph) {
  ALK_CUDA_OR_SKIP(dev);
  auto run = [](Device& d) {
    manual_seed(3);
    nn::Linear lin(8, 4);
    lin.to(d);
    optim::SGD opt(lin.named_parameters(), 0.1);
    Tensor x = randn({16, 8}).to(d), target = randn({16, 4}).to(d);
    Program step = compile([&](const std::vector<Tensor>&) {
      Tensor loss = mean((lin(x) - target) * (lin(x) - target));
      capture("loss", loss);
      loss.backward();
      opt.step();
      opt.zero_grad();
    });
    std::vector<double> losses;
    for (int i = 0; i < 10; ++i) {
      step({});
      losses.push_back(step.captured("loss").item());
    }
    return losses;
  };
  const std::vector<double> cpu = run(cpu_device()), gpu = run(*dev);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * std::max(1.0, cpu[i])) << "step " << i;
  EXPECT_LT(cpu.back(), cpu.front());
}

// The cross-entropy backward writes the logits' gradient over the logits (they die there):
// the arena holds one [N, vocab] tensor, not two, and the gradients match the CPU's.
TEST(CudaDevice, CrossEntropyBackwardTakesTheLogitsPlace) {
  ALK_CUDA_OR_SKIP(dev);
  auto run = [](Device& d) {
    manual_seed(4);
    Tensor x = randn({64, 32}).to(d), targets = randint(0, 1000, {64}).to(d);
    Tensor w = (randn({32, 1000}) * 0.3).to(d).detach().requires_grad_();
    nn::cross_entropy(matmul(x, w), targets).backward();
    w.grad().realize();
    return std::pair{w.grad().to(cpu_device()), last_schedule_stats().arena_bytes};
  };
  const auto [gpu, gpu_arena] = run(*dev);
  expect_close(gpu, run(cpu_device()).first, 1e-4, 1e-6);
  const int64_t logits_bytes = 64 * 1000 * 4;
  EXPECT_LT(gpu_arena, 2 * logits_bytes) << "the logits and their gradient were live at once";
  EXPECT_GT(gpu_arena, logits_bytes - 1);
}

// Eager AdamW steps: the scheduler hands each run of per-parameter updates to the device
// whole (Device::run_batch: multi-tensor launches on CUDA); the weights follow the CPU's.
TEST(CudaDevice, EagerOptimizerStepsRunAsBatchesAndMatchTheCpu) {
  ALK_CUDA_OR_SKIP(dev);
  auto run = [](Device& d) {
    manual_seed(6);
    nn::Sequential net;
    net.add(std::make_shared<nn::Linear>(8, 16)).add(std::make_shared<nn::Linear>(16, 4));
    net.to(d);
    optim::AdamW opt(net.named_parameters(), 1e-2, optim::AdamOptions{.weight_decay = 0.1});
    Tensor x = randn({32, 8}).to(d), y = randn({32, 4}).to(d);
    for (int i = 0; i < 5; ++i) {
      nn::mse_loss(net.forward(x), y).backward();
      opt.step();
      EXPECT_EQ(last_schedule_stats().batched, 4 * 4);  // 4 parameters x (t, m, v, p)
      opt.zero_grad();
    }
    std::vector<float> w;
    for (const Tensor& p : net.parameters()) {
      auto v = p.to(cpu_device()).to_vector<float>();
      w.insert(w.end(), v.begin(), v.end());
    }
    return w;
  };
  const std::vector<float> cpu = run(cpu_device()), gpu = run(*dev);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * std::max(1.0f, std::fabs(cpu[i]))) << i;
}

// A run of independent updates of one source (an optimizer's per-parameter kernels) is one
// multi-tensor launch per up to 64 members in a recording: members of odd sizes, some
// reading views at odd offsets (no 16-byte loads for that group), one value shared by all
// (a learning rate), more members than one launch takes; replays against the CPU.
TEST(CudaDevice, ARecordedRunOfUpdatesMatchesTheCpu) {
  ALK_CUDA_OR_SKIP(dev);
  auto run = [](Device& d, bool views) {
    manual_seed(11);
    Tensor lr = full({}, 0.25, DType::F32).to(d), source = randn({9000}).to(d);
    std::vector<Tensor> state, grads;
    for (int i = 0; i < 80; ++i) {
      const int64_t n = std::vector<int64_t>{1, 3, 17, 64, 1000, 4099}[static_cast<size_t>(i % 6)] + i;
      state.push_back(randn({n}).to(d));
      grads.push_back(views ? source.slice(0, 1 + 7 * i, 1 + 7 * i + n) : randn({n}).to(d));
    }
    realize(state);
    Program step = compile([&](const std::vector<Tensor>&) {
      for (size_t i = 0; i < state.size(); ++i) state[i].assign_(state[i] * 0.9 - lr * grads[i]);
      realize(state);
    });
    for (int i = 0; i < 4; ++i) step({});
    std::vector<float> all;
    for (const Tensor& t : state) {
      auto v = t.to(cpu_device()).to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  for (bool views : {false, true}) {
    SCOPED_TRACE(views ? "gradients are views at odd offsets" : "contiguous gradients");
    const std::vector<float> cpu = run(cpu_device(), views), gpu = run(*dev, views);
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-5 * std::max(1.0f, std::fabs(cpu[i]))) << "element " << i;
  }
}

}  // namespace
}  // namespace alk
#endif
