// Fused attention on a CUDA device against PyTorch's scaled_dot_product_attention (its
// flash kernel, bf16), in the same command: the GPT-2 124M shape (B 16, 12 heads, T 1024,
// head dim 64, causal), forward alone and forward + backward, bf16 inputs under autocast
// (alk multiplies on the tensor cores, kernels/attention_mma.cu). Median of 10 after 3
// warm-ups, timed with device synchronization. FLOP: 4 B H T^2 D / 2 forward (causal),
// 2.5 times that backward.
//   bench_attention [--batch 16] [--no-anchor]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alk/alk.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_ms(alk::Device& dev, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    dev.synchronize();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

std::string run_python(const std::string& script) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("python3 -c \"" + script + "\" 2>&1").c_str(), "r"), pclose);
  std::string out;
  if (!pipe) return out;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, k);
  return out;
}

double field(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  return at == std::string::npos ? 0 : std::atof(out.c_str() + at + key.size() + 1);
}

}  // namespace

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
  const double fwd = time_ms(dev, [&] {
    alk::Autocast scope;
    alk::scaled_dot_product_attention(q, k, v, true).realize();
  });
  const double both = time_ms(dev, [&] {
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
      "import torch, torch.nn.functional as F\n"
      "def t(f):\n"
      "  for _ in range(3): f()\n"
      "  ts=[]\n"
      "  for _ in range(10):\n"
      "    e0=torch.cuda.Event(enable_timing=True); e1=torch.cuda.Event(enable_timing=True)\n"
      "    e0.record(); f(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))\n"
      "  ts.sort(); return ts[len(ts)//2]\n"
      "s=(" + std::to_string(B) + "," + std::to_string(H) + "," + std::to_string(T) + "," + std::to_string(D) + ")\n"
      "q,k,v,w=[torch.randn(s,device='cuda',dtype=torch.bfloat16) for _ in range(4)]\n"
      "print('fwd', t(lambda: F.scaled_dot_product_attention(q,k,v,is_causal=True)))\n"
      "def both():\n"
      "  qg,kg,vg=[x.detach().requires_grad_() for x in (q,k,v)]\n"
      "  (F.scaled_dot_product_attention(qg,kg,vg,is_causal=True)*w).sum().backward()\n"
      "print('both', t(both))\n";
  const std::string out = run_python(script);
  const double tf = field(out, "fwd"), tb = field(out, "both");
  if (tf <= 0) {
    std::printf("anchor failed:\n%s", out.c_str());
    return 0;
  }
  std::printf("torch sdpa (flash) bf16: forward %.3f ms (%.0f TFLOP/s), forward+backward %.3f ms (%.0f TFLOP/s)\n", tf,
              flop / tf / 1e9, tb, 3.5 * flop / tb / 1e9);
  std::printf("RATIO attention-fwd alk=%.3fms anchor=%.3fms ratio=%.3f\n", fwd, tf, fwd / tf);
  std::printf("RATIO attention-fwd-bwd alk=%.3fms anchor=%.3fms ratio=%.3f\n", both, tb, both / tb);
}
