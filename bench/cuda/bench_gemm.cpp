// GEMM on a CUDA device against cuBLAS (through PyTorch, in the same command): 4096^3 in
// bf16 and in f32 with TF32 (alk's tensor-core kernel), and f32 on the CUDA cores. alk's
// products: the median of 5 rounds of 10 enqueued back to back between synchronizations
// (until 2026-12-02 each product between two, which charged it a synchronization and a
// launch, ~10-30 us); PyTorch's: GPU events around each. Random inputs.
// Prints TFLOP/s and `RATIO gemm-4096-<kind> alk=<ms>ms anchor=<ms>ms ratio=<alk/cublas>`.
// With --gpt2: the bf16 products of a GPT-2 124M training step at B16 x T1024 (M = 16384 rows),
// each linear layer's forward x W^T and its two backward products dY W and dY^T x, beside
// the same products in PyTorch, so the slow layouts show.
// With --soak S: the bf16 product back to back for S seconds, nothing printed (to watch the
// clocks and power it runs at: nvidia-smi --query-gpu=clocks.sm,power.draw -lms 100).
//   bench_gemm [--n 4096] [--no-anchor] [--gpt2] [--only qkv|proj|fc|fc2|head] [--soak S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "alk/alk.h"
#include "bench_util.h"

namespace {

using bench::field;
using bench::run_python;

double time_product(alk::Device& dev, const alk::Tensor& a, const alk::Tensor& b) {
  return bench::time_ms_batched(dev, [&] { alk::matmul(a, b).realize(); });
}

double time_alk(alk::Device& dev, int64_t n, alk::DType t) {
  alk::Tensor a = alk::cast(alk::randn({n, n}), t).to(dev), b = alk::cast(alk::randn({n, n}), t).to(dev);
  a.realize();
  b.realize();
  return time_product(dev, a, b);
}

// cuBLAS through PyTorch: "bf16 <ms>\ntf32 <ms>\nf32 <ms>\n".
std::string torch_times(int64_t n) {
  const std::string script =
      "import torch\n"
      "n=" + std::to_string(n) + "\n"
      "def t(dt, tf32):\n"
      "  torch.backends.cuda.matmul.allow_tf32 = tf32\n"
      "  a=torch.randn(n,n,device='cuda',dtype=dt); b=torch.randn(n,n,device='cuda',dtype=dt)\n"
      "  for _ in range(3): a@b\n"
      "  ts=[]\n"
      "  for _ in range(20):\n"
      "    e0=torch.cuda.Event(enable_timing=True); e1=torch.cuda.Event(enable_timing=True)\n"
      "    e0.record(); a@b; e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))\n"
      "  ts.sort(); return ts[len(ts)//2]\n"
      "print('bf16', t(torch.bfloat16, False)); print('tf32', t(torch.float32, True)); print('f32', t(torch.float32, False))\n";
  return run_python(script);
}

// One GPT-2 layer shape: y [M, N] = x [M, K] W^T with W [N, K].
struct LinearShape {
  const char* name;
  int64_t K, N;
};
constexpr LinearShape kGpt2Shapes[] = {{"qkv", 768, 2304}, {"proj", 768, 768}, {"fc", 768, 3072}, {"fc2", 3072, 768},
                                       {"head", 768, 50304}};
constexpr int64_t kGpt2Rows = 16384;



// Forward (x W^T), dX (dY W) and dW (dY^T x) for every shape, alk then PyTorch.
void gpt2_products(alk::Device& dev, bool anchor, const std::string& only) {
  std::string script =
      std::string("import torch\n") + bench::kTorchTimer +
      "M=" + std::to_string(kGpt2Rows) + "\n";
  for (const LinearShape& s : kGpt2Shapes) {
    const std::string K = std::to_string(s.K), N = std::to_string(s.N), n = s.name;
    script += "x=torch.randn(M," + K + ",device='cuda',dtype=torch.bfloat16); w=torch.randn(" + N + "," + K +
              ",device='cuda',dtype=torch.bfloat16); g=torch.randn(M," + N + ",device='cuda',dtype=torch.bfloat16)\n"
              "print('" + n + "-fwd', t(lambda: x@w.t())); print('" + n + "-dx', t(lambda: g@w)); print('" + n +
              "-dw', t(lambda: g.t()@x))\n";
  }
  const std::string out = anchor ? run_python(script) : std::string();
  for (const LinearShape& s : kGpt2Shapes) {
    if (!only.empty() && only != s.name) continue;
    alk::Tensor x = alk::cast(alk::randn({kGpt2Rows, s.K}), alk::DType::BF16).to(dev);
    alk::Tensor w = alk::cast(alk::randn({s.N, s.K}), alk::DType::BF16).to(dev);
    alk::Tensor g = alk::cast(alk::randn({kGpt2Rows, s.N}), alk::DType::BF16).to(dev);
    x.realize(), w.realize(), g.realize();
    const double flop = 2.0 * static_cast<double>(kGpt2Rows) * static_cast<double>(s.K) * static_cast<double>(s.N);
    // The products followed by the step's kinds of epilogue: a bias row, and the backward's
    // product times a saved activation (as the GELU derivative reads one). Whether they ran
    // fused shows in ALK_DEBUG=timing: on the H200 (2026-12-01) these standalone ones did not
    // (a Matmul, then a map:add / map:mul), unlike the GPT-2 step's, so the line is the pair.
    alk::Tensor bias = alk::cast(alk::randn({s.N}), alk::DType::BF16).to(dev), h = alk::cast(alk::randn({kGpt2Rows, s.K}), alk::DType::BF16).to(dev);
    bias.realize(), h.realize();
    const alk::Tensor wt = w.transpose(0, 1);
    const std::pair<const char*, double> runs[] = {
        {"fwd", time_product(dev, x, wt)},
        {"dx", time_product(dev, g, w)},
        {"dw", time_product(dev, g.transpose(0, 1), x)},
        {"fwd+bias", bench::time_ms_batched(dev, [&] { (alk::matmul(x, wt) + bias).realize(); })},
        {"dx*h", bench::time_ms_batched(dev, [&] { (alk::matmul(g, w) * h).realize(); })}};
    for (const auto& [kind, ms] : runs) {
      const std::string key = std::string(s.name) + "-" + kind;
      const double torch_ms = field(out, key);
      std::printf("gpt2 %-10s M=%lld K=%lld N=%lld  alk %.3f ms (%.0f TFLOP/s)", key.c_str(),
                  static_cast<long long>(kGpt2Rows), static_cast<long long>(s.K), static_cast<long long>(s.N), ms,
                  flop / ms / 1e9);
      if (torch_ms > 0) std::printf("  cublas %.3f ms (%.0f)  ratio %.2f", torch_ms, flop / torch_ms / 1e9, ms / torch_ms);
      std::printf("\n");
    }
  }
}


}  // namespace

int main(int argc, char** argv) {
  int64_t n = 4096;
  bool anchor = true, gpt2 = false;
  double soak_s = 0;
  std::string only;  // --only NAME: one GPT-2 shape (qkv, proj, fc, fc2, head), e.g. under a profiler
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc) n = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
    if (!std::strcmp(argv[i], "--gpt2")) gpt2 = true;
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i], gpt2 = true;
    if (!std::strcmp(argv[i], "--soak") && i + 1 < argc) soak_s = std::atof(argv[++i]);
  }
  alk::Device& dev = alk::get_device("cuda:0");
  if (soak_s > 0) {
    alk::Tensor a = alk::cast(alk::randn({n, n}), alk::DType::BF16).to(dev), b = alk::cast(alk::randn({n, n}), alk::DType::BF16).to(dev);
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < soak_s) {
      for (int i = 0; i < 20; ++i) alk::matmul(a, b).realize();
      dev.synchronize();
    }
    return 0;
  }
  if (gpt2) {
    gpt2_products(dev, anchor, only);
    return 0;
  }
  const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double bf16 = time_alk(dev, n, alk::DType::BF16);
  alk::set_float32_matmul_precision("high");
  const double tf32 = time_alk(dev, n, alk::DType::F32);
  alk::set_float32_matmul_precision("highest");
  const double f32 = time_alk(dev, n, alk::DType::F32);
  std::printf("alk-cuda gemm %lld^3: bf16 %.3f ms (%.0f TFLOP/s), tf32 %.3f ms (%.0f), f32 %.3f ms (%.1f)\n",
              static_cast<long long>(n), bf16, flop / bf16 / 1e9, tf32, flop / tf32 / 1e9, f32, flop / f32 / 1e9);
  if (!anchor) return 0;
  const std::string out = torch_times(n);
  const double tb = field(out, "bf16"), tt = field(out, "tf32"), tf = field(out, "f32");
  if (tb <= 0) std::printf("anchor failed:\n%s", out.c_str());
  std::printf("cublas (torch) %lld^3: bf16 %.3f ms (%.0f TFLOP/s), tf32 %.3f ms (%.0f), f32 %.3f ms (%.1f)\n",
              static_cast<long long>(n), tb, flop / tb / 1e9, tt, flop / tt / 1e9, tf, flop / tf / 1e9);
  std::printf("RATIO gemm-%lld-bf16 alk=%.3fms anchor=%.3fms ratio=%.3f\n", static_cast<long long>(n), bf16, tb, bf16 / tb);
  std::printf("RATIO gemm-%lld-tf32 alk=%.3fms anchor=%.3fms ratio=%.3f\n", static_cast<long long>(n), tf32, tt, tf32 / tt);
  std::printf("RATIO gemm-%lld-f32 alk=%.3fms anchor=%.3fms ratio=%.3f\n", static_cast<long long>(n), f32, tf, f32 / tf);
}
