// The LLaMA family's ops on the CPU against transformers' formulas in PyTorch 1.13
// (bench/bench_llama_ops.py, run in the same command, alternating rounds): RMSNorm over
// [2048, 1024] (alk's fused rms_norm, and the same composed from elementwise ops and a mean,
// which decides whether the fused kernel earns its place), rotary_embedding over q [4, 512, 16,
// 64] at positions 0..511, each forward and forward + backward.
//   RATIO <case> alk=<ms>ms anchor=<ms>ms ratio=<alk/anchor>
//   RATIO rms_norm_fused_vs_composed fused=<ms>ms composed=<ms>ms ratio=<fused/composed>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/cpu.h"
#include "alk/nn.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One untimed call, then the times (ms) of `reps` calls appended to t.
template <class F>
void time_into(F&& fn, std::vector<double>& t, int reps = 3) {
  fn();
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
}

// The anchor's "name ms" lines, appended per name.
// PyTorch runs on as many threads as alk's pool.
void run_anchor(const std::string& script, std::map<std::string, std::vector<double>>& out) {
  const std::string cmd = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " + script + " --reps 3 --threads " +
                          std::to_string(alk::cpu::num_threads()) + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return;
  char line[512], name[128];
  double ms = 0;
  while (std::fgets(line, sizeof line, pipe.get()))
    if (std::sscanf(line, "%127s %lf", name, &ms) == 2) out[name].push_back(ms);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace alk;
  std::string anchor = "bench/bench_llama_ops.py";
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--anchor") && i + 1 < argc) anchor = argv[++i];
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
  }
  manual_seed(0);
  const int64_t rows = 2048, dim = 1024, B = 4, T = 512, H = 16, D = 64;
  Tensor x = randn({rows, dim}), w = randn({dim}), g = randn({rows, dim});
  Tensor q = randn({B, T, H, D}), gq = randn({B, T, H, D});
  Tensor positions = arange(T);
  Tensor inv_freq = tensor(nn::rotary_inv_freq(D, 10000, {}), {D / 2});
  realize({x, w, g, q, gq, positions, inv_freq});
  Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_(), qg = q.detach().requires_grad_();

  auto composed = [](const Tensor& a, const Tensor& weight) {
    return a * rsqrt(mean(a * a, {-1}, true) + 1e-6) * weight;
  };
  std::map<std::string, std::function<void()>> cases = {
      {"rms_norm_fwd", [&] { NoGradGuard ng; rms_norm(x, {dim}, w, 1e-6).realize(); }},
      {"rms_norm_fwd_bwd", [&] { realize(grad({sum(rms_norm(xg, {dim}, wg, 1e-6) * g)}, {xg, wg})); }},
      {"rms_norm_composed_fwd", [&] { NoGradGuard ng; composed(x, w).realize(); }},
      {"rotary_fwd", [&] { NoGradGuard ng; rotary_embedding(q, positions, inv_freq).realize(); }},
      {"rotary_fwd_bwd", [&] { realize(grad({sum(rotary_embedding(qg, positions, inv_freq) * gq)}, {qg})); }},
  };
  std::map<std::string, std::vector<double>> alk_t, anchor_t;
  for (int r = 0; r < rounds; ++r) {
    for (auto& [name, fn] : cases) time_into(fn, alk_t[name]);
    run_anchor(anchor, anchor_t);
  }
  for (const char* name : {"rms_norm_fwd", "rms_norm_fwd_bwd", "rotary_fwd", "rotary_fwd_bwd"}) {
    const double a = median(alk_t[name]);
    const auto it = anchor_t.find(name);
    if (it == anchor_t.end() || it->second.empty()) {
      std::printf("%s alk=%.3fms (no anchor: %s did not run)\n", name, a, anchor.c_str());
      continue;
    }
    const double t = median(it->second);
    std::printf("RATIO %s alk=%.3fms anchor=%.3fms ratio=%.3f\n", name, a, t, a / t);
  }
  const double fused = median(alk_t["rms_norm_fwd"]), comp = median(alk_t["rms_norm_composed_fwd"]);
  std::printf("RATIO rms_norm_fused_vs_composed fused=%.3fms composed=%.3fms ratio=%.3f\n", fused, comp, fused / comp);
}
