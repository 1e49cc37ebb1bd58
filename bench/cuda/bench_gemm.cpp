// GEMM on a CUDA device against cuBLAS (through PyTorch, in the same command): 4096^3 in
// bf16 and in f32 with TF32 (alk's tensor-core kernel), and f32 on the CUDA cores. Median
// of 20 products after 3 warm-ups, timed with device synchronization; random inputs.
// Prints TFLOP/s and `RATIO gemm-4096-<kind> alk=<ms>ms anchor=<ms>ms ratio=<alk/cublas>`.
//   bench_gemm [--n 4096] [--no-anchor]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "alk/alk.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double time_alk(alk::Device& dev, int64_t n, alk::DType t) {
  alk::Tensor a = alk::cast(alk::randn({n, n}), t).to(dev), b = alk::cast(alk::randn({n, n}), t).to(dev);
  a.realize();
  b.realize();
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    alk::Tensor c = alk::matmul(a, b);
    c.realize();
    dev.synchronize();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
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
  int64_t n = 4096;
  bool anchor = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc) n = std::atoll(argv[++i]);
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
  }
  alk::Device& dev = alk::get_device("cuda:0");
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
