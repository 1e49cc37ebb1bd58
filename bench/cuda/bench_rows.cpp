// Row and column kernels of the GPT-2 step on a CUDA device against PyTorch in the same
// command, by effective bandwidth (the bytes the op must move over its time):
//   ln-bwd   layer-norm backward of [16384, 768] (x and the output gradient read, dx
//            written, dweight/dbias: 3 x 50.3 MB in f32, what the GPT-2 step runs: autocast
//            widens layer norm to f32; 3 x 25.2 MB in bf16); PyTorch: autograd.grad of F.layer_norm
//   ln-fwd   layer norm of [16384, 768] (x read, y written: 2 x 50.3 MB in f32)
//   colsum   x.sum(0) over [16384, C] (bias gradients), bf16 and f32; "-cast": the bf16 sum
//            cast to f32, as the GPT step's bias gradients are (one kernel on alk's side)
// The layer-norm cases also run on the kernels they replaced (cuda::tuning()'s
// layer_norm_*_old, as ALK_CUDA_LN_BACKWARD=old and ALK_CUDA_LN_FORWARD=old set them; kept as
// the path for rows too wide for registers), printed as "old". alk times are
// CUDA-graph replays of a compiled program (alk::compile), 20 per synchronization, median
// of 5; PyTorch's are CUDA events around one call, median of 10 after 3 warm-ups.
//   bench_rows [--no-anchor] [--device cuda:0] [--rows 16384]   (--device cpu: a smoke test)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "backend/cuda/tuning.h"
#include "bench_util.h"

namespace {

// Median ms per call of a compiled program that computes `f`'s tensors (captured).
double replay_ms(alk::Device& dev, const std::function<std::vector<alk::Tensor>()>& f) {
  alk::Program p = alk::compile([&](const std::vector<alk::Tensor>&) {
    int i = 0;
    for (const alk::Tensor& t : f()) alk::capture("out" + std::to_string(i++), t);
  });
  for (int i = 0; i < 3; ++i) p();  // eager, traced, first replay
  std::vector<double> ms;
  for (int rep = 0; rep < 5; ++rep) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) p();
    dev.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 20);
  }
  return bench::median(ms);
}

// The tuning switch that selects the old kernels of a case (nullptr where there are none).
using OldKernels = bool alk::cuda::Tuning::*;

// `f` timed on the default kernels, then with the `old` switch on (0 where there is none).
std::pair<double, double> new_and_old(alk::Device& dev, OldKernels old,
                                      const std::function<std::vector<alk::Tensor>()>& f) {
  if (!old) return {replay_ms(dev, f), 0};
  alk::cuda::Tuning& tuning = alk::cuda::tuning();
  const bool was = tuning.*old;
  tuning.*old = false;
  const double now = replay_ms(dev, f);
  tuning.*old = true;
  const double old_ms = replay_ms(dev, f);
  tuning.*old = was;
  return {now, old_ms};
}

}  // namespace

int main(int argc, char** argv) {
  bool anchor = true;
  std::string device = "cuda:0";
  int64_t R = 16384;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) R = std::atoll(argv[++i]);
  }
  alk::Device& dev = alk::get_device(device);
  using alk::DType;
  using alk::Tensor;
  const int64_t D = 768;
  auto bf16 = [&](alk::Shape s) { return alk::cast(alk::randn(s), DType::BF16).to(dev).detach(); };
  Tensor x = bf16({R, D}), g = bf16({R, D}), w = bf16({D}), b = bf16({D});
  Tensor x32 = alk::randn({R, D}).to(dev), g32 = alk::randn({R, D}).to(dev), w32 = alk::randn({D}).to(dev),
         b32 = alk::randn({D}).to(dev);
  Tensor h768 = bf16({R, 768}), h3072 = bf16({R, 3072}), h2304 = bf16({R, 2304});
  Tensor f768 = alk::randn({R, 768}).to(dev), f2304 = alk::randn({R, 2304}).to(dev);
  for (Tensor* t : {&x, &g, &w, &b, &x32, &g32, &w32, &b32, &h768, &h3072, &h2304, &f768, &f2304}) t->realize();

  struct Case {
    std::string name;
    double bytes;
    OldKernels old;
    std::function<std::vector<Tensor>()> run;
  };
  const double row_bytes = static_cast<double>(R * D) * 2;
  auto ln_backward = [D](const Tensor& xs, const Tensor& ws, const Tensor& bs, const Tensor& gs) {
    Tensor xg = xs.detach().requires_grad_(), wg = ws.detach().requires_grad_(), bg = bs.detach().requires_grad_();
    Tensor y = alk::layer_norm(xg, {D}, wg, bg);
    return alk::grad({y}, {xg, wg, bg}, {gs});
  };
  std::vector<Case> cases = {
      {"ln-bwd-f32", 6 * row_bytes, &alk::cuda::Tuning::layer_norm_backward_old,
       [&] { return ln_backward(x32, w32, b32, g32); }},
      {"ln-bwd-bf16", 3 * row_bytes, &alk::cuda::Tuning::layer_norm_backward_old,
       [&] { return ln_backward(x, w, b, g); }},
      {"ln-fwd-f32", 4 * row_bytes, &alk::cuda::Tuning::layer_norm_forward_old,
       [&] { return std::vector<Tensor>{alk::layer_norm(x32, {D}, w32, b32)}; }},
      {"ln-fwd-bf16", 2 * row_bytes, &alk::cuda::Tuning::layer_norm_forward_old,
       [&] { return std::vector<Tensor>{alk::layer_norm(x, {D}, w, b)}; }},
  };
  for (auto [name, t, cols, size] : {std::tuple{"colsum-bf16-768", &h768, 768, 2},
                                     {"colsum-bf16-3072", &h3072, 3072, 2},
                                     {"colsum-f32-768", &f768, 768, 4},
                                     {"colsum-f32-2304", &f2304, 2304, 4}}) {
    Tensor* src = t;  // (lambdas capture no structured bindings in clang 14)
    cases.push_back({name, static_cast<double>(R * cols * size), nullptr,
                     [src] { return std::vector<Tensor>{alk::sum(*src, {0})}; }});
  }
  cases.push_back({"colsum-bf16-2304-cast", static_cast<double>(R * 2304 * 2), nullptr,
                   [&] { return std::vector<Tensor>{alk::cast(alk::sum(h2304, {0}), DType::F32)}; }});

  const std::string out =
      anchor
          ? bench::run_python(std::string("import torch, torch.nn.functional as F\n") + bench::kTorchTimer +
                              "R,D=" + std::to_string(R) +
                              ",768\n"
                              "bf=lambda *s: torch.randn(*s,device='cuda',dtype=torch.bfloat16)\n"
                              "x,g,w,b=bf(R,D),bf(R,D),bf(D),bf(D)\n"
                              "xg,wg,bg=[v.clone().requires_grad_() for v in (x,w,b)]\n"
                              "y=F.layer_norm(xg,(D,),wg,bg)\n"
                              "print('ln-bwd-bf16', t(lambda: torch.autograd.grad(y,(xg,wg,bg),g,retain_graph=True)))\n"
                              "print('ln-fwd-bf16', t(lambda: F.layer_norm(x,(D,),w,b)))\n"
                              "x,g,w,b=[v.float() for v in (x,g,w,b)]\n"
                              "xg,wg,bg=[v.clone().requires_grad_() for v in (x,w,b)]\n"
                              "y=F.layer_norm(xg,(D,),wg,bg)\n"
                              "print('ln-bwd-f32', t(lambda: torch.autograd.grad(y,(xg,wg,bg),g,retain_graph=True)))\n"
                              "print('ln-fwd-f32', t(lambda: F.layer_norm(x,(D,),w,b)))\n"
                              "h768,h3072,h2304=bf(R,768),bf(R,3072),bf(R,2304)\n"
                              "f768,f2304=torch.randn(R,768,device='cuda'),torch.randn(R,2304,device='cuda')\n"
                              "print('colsum-bf16-768', t(lambda: h768.sum(0)))\n"
                              "print('colsum-bf16-3072', t(lambda: h3072.sum(0)))\n"
                              "print('colsum-f32-768', t(lambda: f768.sum(0)))\n"
                              "print('colsum-f32-2304', t(lambda: f2304.sum(0)))\n"
                              "print('colsum-bf16-2304-cast', t(lambda: h2304.sum(0).float()))\n")
          : std::string();
  if (anchor && bench::field(out, "ln-bwd-bf16") <= 0) std::printf("PyTorch anchor failed:\n%s\n", out.c_str());
  for (const Case& c : cases) {
    const auto [ms, old_ms] = new_and_old(dev, c.old, c.run);
    const double torch_ms = bench::field(out, c.name);
    std::printf("rows %-17s alk %.4f ms (%.0f GB/s)", c.name.c_str(), ms, c.bytes / ms / 1e6);
    if (old_ms > 0) std::printf("  old %.4f ms (%.0f GB/s)", old_ms, c.bytes / old_ms / 1e6);
    if (torch_ms > 0) std::printf("  torch %.4f ms (%.0f GB/s)", torch_ms, c.bytes / torch_ms / 1e6);
    std::printf("\n");
    if (old_ms > 0)
      std::printf("RATIO rows-%s-vs-old alk=%.4fms anchor=%.4fms ratio=%.3f\n", c.name.c_str(), ms, old_ms, ms / old_ms);
    if (torch_ms > 0)
      std::printf("RATIO rows-%s alk=%.4fms anchor=%.4fms ratio=%.3f\n", c.name.c_str(), ms, torch_ms, ms / torch_ms);
  }
}
