// The tiny-GPT training step of ../shared/anchors/torch_tiny_gpt_cpu.py, in alk: same shapes
// (V256 T128 d128 H4 L4 B8, untied head), AdamW(lr 3e-4, wd 0.1), median ms/step over
// --steps steps after 3 warm-up steps. The step runs through alk::compile (traced once,
// replayed), as a training loop would; --eager builds and schedules the graph every step. With --anchor SCRIPT it also runs PyTorch's version
// in the same command and prints the ratio line:
//   RATIO tiny_gpt_step_<alk's ISA path> alk=<ms>ms anchor=<ms>ms ratio=<alk/anchor>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "alk/alk.h"
#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/jit.h"
#include "backend/cpu/thread_pool.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs the PyTorch anchor and returns its ms/step (0 if it could not run). OPENBLAS_CORETYPE
// passes through from this command's environment: `make bench-cpu` sets Haswell for the AVX2
// path's run, so PyTorch's GEMMs there use OpenBLAS's AVX2 kernels like alk's (unsetting it
// here had given that run's anchor OpenBLAS's AVX-512 kernels), and unsets it for the
// default run.
double run_anchor(const std::string& script, int threads, int steps) {
  std::string cmd = "env -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + script + " --threads " +
                    std::to_string(threads) + " --steps " + std::to_string(steps) + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return 0;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  std::cout << out;
  const char* at = std::strstr(out.c_str(), "ms/step=");
  return at ? std::atof(at + 8) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  bool eager = false;
  std::string anchor;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--eager")) eager = true;
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--anchor") && i + 1 < argc) anchor = argv[++i];
  }
  const int64_t V = 256, T = 128, B = 8;
  alk::manual_seed(0);
  alk::nn::GPT model({.vocab = V, .ctx = T, .dim = 128, .heads = 4, .layers = 4, .tie_embeddings = false});
  alk::optim::AdamW opt(model.named_parameters(), 3e-4, {.weight_decay = 0.1});
  alk::Tensor x = alk::randint(0, V, {B, T}), y = alk::randint(0, V, {B, T});
  x.realize();
  y.realize();
  auto step = [&](const std::vector<alk::Tensor>& in) {
    alk::Tensor loss = alk::nn::cross_entropy(model(in[0]), in[1]);
    alk::capture("loss", loss);
    loss.backward();
    opt.step();
    opt.zero_grad();
  };
  alk::Program program = alk::compile(step);
  std::vector<double> ms;
  double loss = 0;
  for (int i = 0; i < steps + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (eager) {
      step({x, y});
    } else {
      program({x, y});
      loss = program.captured("loss").item();
    }
    double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 3) ms.push_back(t);
    if (i == 2) alk::cpu::jit::wait_idle();  // the kernels compiled in the background are in use from here
  }
  (void)loss;
  const double alk_ms = median(ms);
  std::printf("alk-cpu tiny-gpt ms/step=%.2f tokens/s=%.0f params=%lld threads=%d isa=%s mode=%s\n", alk_ms,
              static_cast<double>(B * T) / alk_ms * 1e3, static_cast<long long>(model.num_parameters()),
              alk::cpu::num_threads(), alk::cpu::isa_name(alk::cpu::isa()), eager ? "eager" : "compiled");
  if (!anchor.empty()) {
    double torch_ms = run_anchor(anchor, alk::cpu::num_threads(), steps);
    if (torch_ms > 0)
      std::printf("RATIO tiny_gpt_step_%s alk=%.2fms anchor=%.2fms ratio=%.3f\n", alk::cpu::isa_name(alk::cpu::isa()),
                  alk_ms, torch_ms, alk_ms / torch_ms);
    else
      std::printf("RATIO tiny_gpt_step_%s alk=%.2fms anchor=unavailable\n", alk::cpu::isa_name(alk::cpu::isa()), alk_ms);
  }
}
