// Fused attention on a CUDA device against PyTorch's scaled_dot_product_attention (its
// flash kernel, bf16), in the same command: the GPT-2 124M shape (B 16, 12 heads, T 1024,
// head dim 64, causal), forward alone and forward + backward, bf16 inputs under autocast
// (alk multiplies on the tensor cores, kernels/attention_mma.cu). Median of 10 after 3
// warm-ups, timed with device synchronization. FLOP: 4 B H T^2 D / 2 forward (causal),
// 2.5 times that backward.
//   bench_attention [--batch 16] [--no-anchor]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "alk/alk.h"
#include "bench_util.h"


int main(int argc, char** argv) {
  int64_t B = 16;
  const int64_t H = 12, T = 1024, D = 64;
  bool anchor = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) B = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
  }
  alk::Device& dev = alk::get_device("cuda:0");
  auto make = [&] { return alk::cast(alk::randn({B, H, T, D}), alk::DType::BF16).to(dev).detach(); };
  alk::Tensor q = make(), k = make(), v = make(), w = make();
  for (alk::Tensor* t : {&q, &k, &v, &w}) t->realize();
  const double fwd = bench::time_ms(dev, [&] {
    alk::Autocast scope;
    alk::scaled_dot_product_attention(q, k, v, true).realize();
  });
  const double both = bench::time_ms(dev, [&] {
    alk::Tensor qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
    alk::Tensor out;
    {
      alk::Autocast scope;
      out = alk::scaled_dot_product_attention(qg, kg, vg, true);
    }
    alk::sum(out * w).backward();
    qg.grad().realize(), kg.grad().realize(), vg.grad().realize();
  });
  const double flop = 4.0 * static_cast<double>(B * H) * static_cast<double>(T * T) * static_cast<double>(D) / 2;
  std::printf("alk-cuda attention B=%lld H=%lld T=%lld D=%lld causal bf16: forward %.3f ms (%.0f TFLOP/s), forward+backward "
              "%.3f ms (%.0f TFLOP/s)\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(T), static_cast<long long>(D), fwd,
              flop / fwd / 1e9, both, 3.5 * flop / both / 1e9);
  if (!anchor) return 0;
  const std::string script =
      std::string("import torch, torch.nn.functional as F\n") + bench::kTorchTimer +
      "s=(" + std::to_string(B) + "," + std::to_string(H) + "," + std::to_string(T) + "," + std::to_string(D) + ")\n"
      "q,k,v,w=[torch.randn(s,device='cuda',dtype=torch.bfloat16) for _ in range(4)]\n"
      "print('fwd', t(lambda: F.scaled_dot_product_attention(q,k,v,is_causal=True)))\n"
      "def both():\n"
      "  qg,kg,vg=[x.detach().requires_grad_() for x in (q,k,v)]\n"
      "  (F.scaled_dot_product_attention(qg,kg,vg,is_causal=True)*w).sum().backward()\n"
      "print('both', t(both))\n";
  const std::string out = bench::run_python(script);
  const double tf = bench::field(out, "fwd"), tb = bench::field(out, "both");
  if (tf <= 0) {
    std::printf("anchor failed:\n%s", out.c_str());
    return 0;
  }
  std::printf("torch sdpa (flash) bf16: forward %.3f ms (%.0f TFLOP/s), forward+backward %.3f ms (%.0f TFLOP/s)\n", tf,
              flop / tf / 1e9, tb, 3.5 * flop / tb / 1e9);
  std::printf("RATIO attention-fwd alk=%.3fms anchor=%.3fms ratio=%.3f\n", fwd, tf, fwd / tf);
  std::printf("RATIO attention-fwd-bwd alk=%.3fms anchor=%.3fms ratio=%.3f\n", both, tb, both / tb);
}
