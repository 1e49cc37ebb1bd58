// The tiny-GPT training step (bench/bench_tiny_gpt.cpp's shapes: V256 T128 d128 H4 L4 B8,
// AdamW) compiled and replayed on a Vulkan device, with the same step on alk's CPU backend
// as the anchor, measured in the same run (issue 8's lavapipe target: within 2x of the CPU):
//   RATIO tiny_gpt_step_vulkan alk=<vulkan ms>ms anchor=<cpu ms>ms ratio=<vulkan/cpu>
// and the same for the process's CPU time per step (getrusage: lavapipe's worker threads and
// alk's CPU thread pool both count), which a machine shared with other jobs distorts less:
//   RATIO tiny_gpt_step_vulkan_cputime alk=<ms>ms anchor=<ms>ms ratio=<vulkan/cpu>
// Options: --steps N (median over N steps after 3 warm-up ones), --device vulkan:N,
// --no-anchor (the Vulkan side only, e.g. under ALK_DEBUG=timing), --optimizer none (forward
// and backward only: the update's cost by difference).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  double wall_ms, cpu_ms, loss;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Wall ms per step (median) of the compiled tiny-GPT step on `dev`, CPU ms per step (mean
// over the timed steps), and its last loss.
Timing time_step(alk::Device& dev, int steps, bool update) {
  const int64_t V = 256, T = 128, B = 8;
  alk::manual_seed(0);
  alk::nn::GPT model({.vocab = V, .ctx = T, .dim = 128, .heads = 4, .layers = 4, .tie_embeddings = false});
  model.to(dev);
  alk::optim::AdamW opt(model.named_parameters(), 3e-4, {.weight_decay = 0.1});
  alk::Tensor x = alk::randint(0, V, {B, T}).to(dev), y = alk::randint(0, V, {B, T}).to(dev);
  x.realize();
  y.realize();
  alk::Program program = alk::compile([&](const std::vector<alk::Tensor>& in) {
    alk::Tensor loss = alk::nn::cross_entropy(model(in[0]), in[1]);
    alk::capture("loss", loss);
    loss.backward();
    if (!update) {  // forward and backward only: what the update costs, by difference
      std::vector<alk::Tensor> grads;
      for (const alk::Tensor& p : model.parameters()) grads.push_back(p.grad());
      alk::realize(grads);
      opt.zero_grad();
      return;
    }
    opt.step();
    opt.zero_grad();
  });
  std::vector<double> ms;
  double loss = 0, cpu0 = 0;
  for (int i = 0; i < steps + 3; ++i) {
    if (i == 3) cpu0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    program({x, y});
    loss = program.captured("loss").item();  // the host reads the loss each step, as training does
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 3) ms.push_back(t);
  }
  return {median(ms), (cpu_seconds() - cpu0) * 1e3 / steps, loss};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  bool anchor = true, update = true;
  std::string device = "vulkan";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    if (!std::strcmp(argv[i], "--no-anchor")) anchor = false;
    if (!std::strcmp(argv[i], "--optimizer") && i + 1 < argc) update = std::strcmp(argv[++i], "none") != 0;
  }
  alk::Device& dev = alk::get_device(device);
  const Timing gpu = time_step(dev, steps, update);
  std::printf("alk-%s tiny-gpt ms/step=%.2f tokens/s=%.0f cpu-ms/step=%.2f loss=%.6f (%s)\n", device.c_str(), gpu.wall_ms,
              1024.0 / gpu.wall_ms * 1e3, gpu.cpu_ms, gpu.loss, dev.info().description.c_str());
  if (!anchor) return 0;
  const Timing cpu = time_step(alk::cpu_device(), steps, update);
  std::printf("alk-cpu tiny-gpt ms/step=%.2f tokens/s=%.0f cpu-ms/step=%.2f loss=%.6f\n", cpu.wall_ms,
              1024.0 / cpu.wall_ms * 1e3, cpu.cpu_ms, cpu.loss);
  std::printf("RATIO tiny_gpt_step_vulkan alk=%.2fms anchor=%.2fms ratio=%.3f\n", gpu.wall_ms, cpu.wall_ms,
              gpu.wall_ms / cpu.wall_ms);
  std::printf("RATIO tiny_gpt_step_vulkan_cputime alk=%.2fms anchor=%.2fms ratio=%.3f\n", gpu.cpu_ms, cpu.cpu_ms,
              gpu.cpu_ms / cpu.cpu_ms);
}
