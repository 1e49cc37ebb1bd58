// Fused elementwise (Map) kernels on a CUDA device against PyTorch in the same command, by
// effective bandwidth (bytes the op must read and write over its time): a bf16 -> f32 cast
// of GPT-2's logits [16384, 50304], an f32 add [16, 1024, 768], and tanh-GELU of bf16
// [16, 1024, 3072]. Median of 10 after 3 warm-ups, timed with device synchronization.
//   bench_map [--no-anchor]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "alk/alk.h"
#include "bench_util.h"


int main(int argc, char** argv) {
  bool anchor = true;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
  alk::Device& dev = alk::get_device("cuda:0");
  using alk::DType;
  alk::Tensor logits = alk::cast(alk::randn({16384, 50304}), DType::BF16).to(dev);
  alk::Tensor a = alk::randn({16, 1024, 768}).to(dev), b = alk::randn({16, 1024, 768}).to(dev);
  alk::Tensor h = alk::cast(alk::randn({16, 1024, 3072}), DType::BF16).to(dev);
  for (alk::Tensor* t : {&logits, &a, &b, &h}) t->realize();
  struct Case {
    const char* name;
    double bytes;
    std::function<alk::Tensor()> run;
  };
  const double nl = 16384.0 * 50304, na = 16.0 * 1024 * 768, nh = 16.0 * 1024 * 3072;
  const Case cases[] = {{"cast-bf16-f32", nl * 6, [&] { return alk::cast(logits, DType::F32); }},
                        {"add-f32", na * 12, [&] { return a + b; }},
                        {"gelu-bf16", nh * 4, [&] { return alk::gelu_tanh(h); }}};
  const std::string out = anchor ? bench::run_python(
                                       std::string("import torch, torch.nn.functional as F\n") + bench::kTorchTimer +
                                       "l=torch.randn(16384,50304,device='cuda',dtype=torch.bfloat16)\n"
                                       "a=torch.randn(16,1024,768,device='cuda'); b=torch.randn(16,1024,768,device='cuda')\n"
                                       "h=torch.randn(16,1024,3072,device='cuda',dtype=torch.bfloat16)\n"
                                       "print('cast-bf16-f32', t(lambda: l.float()))\n"
                                       "print('add-f32', t(lambda: a+b))\n"
                                       "print('gelu-bf16', t(lambda: F.gelu(h, approximate='tanh')))\n")
                                 : std::string();
  for (const Case& c : cases) {
    const double ms = bench::time_ms(dev, [&] { c.run().realize(); }), torch_ms = bench::field(out, c.name);
    std::printf("map %-14s alk %.3f ms (%.0f GB/s)", c.name, ms, c.bytes / ms / 1e6);
    if (torch_ms > 0) {
      std::printf("  torch %.3f ms (%.0f GB/s)\n", torch_ms, c.bytes / torch_ms / 1e6);
      std::printf("RATIO map-%s alk=%.3fms anchor=%.3fms ratio=%.3f\n", c.name, ms, torch_ms, ms / torch_ms);
    } else {
      std::printf("\n");
    }
  }
}
