// GPT-2 124M training step on a CUDA device (issue 12's benchmark): vocab 50304, ctx 1024,
// 12 layers, d 768, 12 heads, tied embeddings, AdamW, the step compiled (alk::compile ->
// one CUDA graph) and replayed. Prints ms/step (median), tokens/s, MFU (6N + 12 L d T FLOP
// per token over the dtype's peak) and peak device memory; with --anchor SCRIPT it runs
// ../shared/anchors/torch_gpt2_cuda.py in the same command and prints RATIO lines.
//   bench_gpt2 [--batch 16] [--ctx 1024] [--steps 10] [--layers 12] [--dtype bf16|f32] [--tf32] [--anchor PATH]
//              [--device cuda:0] [--vocab 50304] [--dim 768] [--heads 12]
// (--device cpu with small sizes shows, without a GPU, the schedule a GPU would get: with
// ALK_DEBUG=memory,schedule and ALK_RECOMPUTE=1, what the step keeps at its peak.)
// bf16 is mixed precision (alk::Autocast around the forward, f32 master weights), as the
// anchor's torch.autocast; --tf32 lets f32 matmuls use TF32 tensor cores.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "alk/alk.h"
#include "backend/cuda/context.h"
#include "bench_util.h"

namespace {

using bench::median;
using bench::run;

// ms/step of the anchor's line starting with `mode` and holding `dtype` (0 if absent).
double anchor_ms(const std::string& out, const std::string& mode, const std::string& dtype) {
  size_t at = 0;
  while ((at = out.find(mode, at)) != std::string::npos) {
    const size_t eol = out.find('\n', at);
    const std::string line = out.substr(at, eol - at);
    if (line.find(dtype) != std::string::npos)
      if (size_t m = line.find("ms/step="); m != std::string::npos) return std::atof(line.c_str() + m + 8);
    at = eol;
  }
  return 0;
}

// GB of the wrapper's `peak_mem <mode> <dtype> <GB>` line for mode and dtype (0 if absent).
double anchor_peak_gb(const std::string& out, const std::string& mode, const std::string& dtype) {
  const std::string key = "peak_mem " + mode + " " + dtype + " ";
  const size_t at = out.find(key);
  return at == std::string::npos ? 0 : std::atof(out.c_str() + at + key.size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 16, T = 1024, layers = 12, vocab = 50304, dim = 768, heads = 12;
  std::string device = "cuda:0";
  int steps = 10;
  std::string anchor, dtype = "bf16";
  std::string optimizer = "adamw";  // --optimizer none: forward and backward only (what the update costs, by difference)
  bool eager = false;  // --eager: every step scheduled and launched kernel by kernel (ALK_DEBUG=timing sees each)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tf32")) alk::set_float32_matmul_precision("high");
    if (!std::strcmp(argv[i], "--eager")) eager = true;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch")) B = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--ctx")) T = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::max(1, std::atoi(argv[++i]));  // a median needs one
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--anchor")) anchor = argv[++i];
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--optimizer")) optimizer = argv[++i];
    else if (!std::strcmp(argv[i], "--device")) device = argv[++i];
    else if (!std::strcmp(argv[i], "--vocab")) vocab = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--dim")) dim = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--heads")) heads = std::atoll(argv[++i]);
  }
  alk::Device& dev = alk::get_device(device);
  alk::manual_seed(0);
  alk::nn::GPT model({.vocab = vocab, .ctx = T, .dim = dim, .heads = heads, .layers = layers, .tie_embeddings = true});
  model.to(dev);
  alk::optim::AdamW opt(model.named_parameters(), 3e-4);
  alk::Tensor x = alk::randint(0, std::min<int64_t>(vocab, 50257), {B, T}).to(dev),
             y = alk::randint(0, std::min<int64_t>(vocab, 50257), {B, T}).to(dev);
  auto step_fn = [&](const std::vector<alk::Tensor>& in) {
    alk::Tensor loss;
    {
      std::optional<alk::Autocast> mixed;
      if (dtype == "bf16") mixed.emplace(alk::DType::BF16);
      loss = alk::nn::cross_entropy(model(in[0]), in[1]);
    }
    alk::capture("loss", loss);
    loss.backward();
    if (optimizer == "none") {
      std::vector<alk::Tensor> grads;
      for (const alk::Tensor& p : model.parameters()) grads.push_back(p.grad());
      alk::realize(grads);
      opt.zero_grad();
      return;
    }
    opt.step();
    opt.zero_grad();
  };
  alk::Program step = alk::compile(step_fn);
  std::vector<double> ms;
  double loss = 0;
  int64_t first_steps_peak = 0;
  for (int i = 0; i < steps + 3; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    if (eager) {
      step_fn({x, y});
      alk::realize(model.parameters());  // the step's work, scheduled and launched now
    } else {
      step({x, y});
    }
    dev.synchronize();
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 3) ms.push_back(t);
    if (!eager && (i == 0 || i == steps + 2)) loss = step.captured("loss").item();
    if (i == 0) std::printf("step 0 loss %.4f (%.0f ms, compiling)\n", loss, t);
    if (i == 1) {  // the trace (or the second eager step) is done: from here, the steady state
      first_steps_peak = alk::Buffer::peak_bytes();
      alk::Buffer::reset_peak_bytes();
    }
  }
  // Bytes of alk's buffers as requested (the allocator's peak below counts its rounded blocks).
  std::printf("alk buffers: peak %.2f GB over the first two steps (warm-up, trace), %.2f GB over the rest\n",
              static_cast<double>(first_steps_peak) / 1e9, static_cast<double>(alk::Buffer::peak_bytes()) / 1e9);
  const double alk_ms = median(ms);
  const double n_params = static_cast<double>(model.num_parameters());
  const double flop_per_token = 6 * n_params + 12.0 * static_cast<double>(layers * dim) * static_cast<double>(T);
  const double tokens = static_cast<double>(B * T) / (alk_ms / 1e3);
  const bool on_cuda = device.rfind("cuda", 0) == 0;
  const double peak_gb = static_cast<double>(on_cuda ? alk::cuda::Context::get(device.size() > 5 ? std::atoi(device.c_str() + 5) : 0).memory_stats().peak_bytes
                                                     : alk::Buffer::peak_bytes()) / 1e9;
  const double peak = dtype == "bf16" ? 989e12 : 67e12;
  std::printf("alk-cuda gpt2 %s%s B=%lld T=%lld L=%lld params=%.1fM ms/step=%.1f tok/s=%.0f MFU=%.1f%% (of %.0f TFLOP/s) "
              "peak_mem=%.2fGB last_loss=%.4f\n",
              dtype.c_str(), alk::float32_matmul_precision() == "high" ? "+tf32" : "", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(layers), n_params / 1e6, alk_ms, tokens,
              flop_per_token * tokens / peak * 100, peak / 1e12, peak_gb, loss);
  if (!anchor.empty()) {
    // The anchor through bench/cuda/torch_gpt2_memory.py, which adds PyTorch's peak allocated memory per mode.
    const std::string out = run("python3 bench/cuda/torch_gpt2_memory.py " + anchor);
    std::printf("%s", out.c_str());
    const double compiled = anchor_ms(out, "compile", "bfloat16"), fp32 = anchor_ms(out, "eager", "float32");
    if (dtype == "f32" && fp32 > 0)
      std::printf("RATIO gpt2-124m-step-f32 alk=%.1fms anchor=%.1fms ratio=%.3f (torch eager fp32+TF32)\n", alk_ms, fp32,
                  alk_ms / fp32);
    if (compiled > 0)
      std::printf("RATIO gpt2-124m-step alk=%.1fms anchor=%.1fms ratio=%.3f (alk %s vs torch.compile bf16)\n", alk_ms,
                  compiled, alk_ms / compiled, dtype.c_str());
    const double torch_gb = anchor_peak_gb(out, "compile", "torch.bfloat16");
    if (torch_gb > 0)
      std::printf("RATIO gpt2-124m-peak-memory alk=%.2fGB anchor=%.2fGB ratio=%.3f (alk's allocated high-water mark vs "
                  "torch.cuda.max_memory_allocated, torch.compile bf16)\n",
                  peak_gb, torch_gb, peak_gb / torch_gb);
  }
}
