// Decoding with alk::Generator against a PyTorch decoder with a static KV cache
// (bench/generate/torch_decode.py), in the same command: random weights, greedy, prompt P,
// N new tokens, 1 and B sequences at once. Prints, per batch size,
//   RATIO generate_<device>_b<B> alk=<ms/step>ms anchor=<ms/step>ms ratio=<alk/anchor> alk_tok/s=<...>
// (a step makes one token for every sequence; ratio < 1: alk is faster).
//
//   bench_generate [--device cpu] [--anchor bench/generate/torch_decode.py] [--threads 2]
//                  [--batch 8] [--prompt 32] [--new 96] [--repeats 3]
//                  [--gpt2]  (GPT-2 124M shapes, bf16, prompt 128, 256 new, batch 32; the anchor compiled)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "alk/alk.h"
#include "alk/generate.h"
#include "alk/nn.h"
#include "backend/cpu/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string device = "cpu", anchor, dtype = "f32";
  int threads = 2, repeats = 3;
  int64_t batch = 8, prompt = 32, tokens = 96;
  alk::nn::GPTConfig cfg{.vocab = 1024, .ctx = 128, .dim = 128, .heads = 4, .layers = 4};
  bool compile_anchor = false;
};

// ms per decode step (median of repeats) for `slots` sequences of `a.tokens` new tokens each.
double alk_ms_per_step(const std::shared_ptr<alk::nn::GPT>& model, const Args& a, int64_t slots, double* prefill_ms) {
  alk::GeneratorOptions opt;
  opt.slots = slots;
  if (a.dtype != "f32") opt.autocast = a.dtype == "bf16" ? alk::DType::BF16 : alk::DType::F16;
  alk::Generator gen(model, opt);
  std::vector<double> steps, prefills;
  for (int r = 0; r < a.repeats + 1; ++r) {  // the first run warms up (traces the step)
    for (int64_t s = 0; s < slots; ++s) {
      alk::GenerateRequest req;
      for (int64_t i = 0; i < a.prompt; ++i) req.prompt.push_back(static_cast<int32_t>((r * 7919 + s * 131 + i * 31) % a.cfg.vocab));
      req.sampling.temperature = 0;
      req.sampling.max_tokens = a.tokens;
      gen.submit(req);
    }
    gen.step();  // every request's prefill (and its first token), then one decode step
    const Clock::time_point t0 = Clock::now();
    int64_t n = 1;
    while (!gen.idle()) {
      gen.step();
      ++n;
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r > 0) steps.push_back(ms / static_cast<double>(n));
  }
  std::sort(steps.begin(), steps.end());
  *prefill_ms = gen.stats().prefill_seconds * 1e3 / static_cast<double>(gen.stats().prefill_tokens) *
                static_cast<double>(a.prompt);
  return steps[steps.size() / 2];
}

double run_anchor(const Args& a, int64_t batch) {
  if (a.anchor.empty()) return 0;
  const alk::nn::GPTConfig& c = a.cfg;
  std::string cmd = "env -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE python3 " + a.anchor + " --threads " +
                    std::to_string(a.threads) + " --batch " + std::to_string(batch) + " --prompt " +
                    std::to_string(a.prompt) + " --new " + std::to_string(a.tokens) + " --vocab " + std::to_string(c.vocab) +
                    " --ctx " + std::to_string(c.ctx) + " --dim " + std::to_string(c.dim) + " --heads " +
                    std::to_string(c.heads) + " --layers " + std::to_string(c.layers) + " --dtype " + a.dtype +
                    " --repeats " + std::to_string(a.repeats) +
                    (a.device.rfind("cpu", 0) == 0 ? std::string() : std::string(" --device cuda")) +
                    (a.compile_anchor ? " --compile" : "") + " 2>&1";
  if (a.device.rfind("cpu", 0) == 0) cmd = "/usr/bin/" + cmd.substr(cmd.find("python3"));
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return 0;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  std::cout << out;
  const char* at = std::strstr(out.c_str(), "ms/token=");
  return at ? std::atof(at + 9) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--device") a.device = next();
    else if (k == "--anchor") a.anchor = next();
    else if (k == "--threads") a.threads = std::stoi(next());
    else if (k == "--batch") a.batch = std::stoll(next());
    else if (k == "--prompt") a.prompt = std::stoll(next());
    else if (k == "--new") a.tokens = std::stoll(next());
    else if (k == "--repeats") a.repeats = std::stoi(next());
    else if (k == "--dtype") a.dtype = next();
    else if (k == "--gpt2") {
      a.cfg = {.vocab = 50257, .ctx = 1024, .dim = 768, .heads = 12, .layers = 12};
      a.dtype = "bf16", a.prompt = 128, a.tokens = 256, a.batch = 32, a.compile_anchor = true;
    } else {
      std::cerr << "unknown argument " << k << "\n";
      return 2;
    }
  }
  alk::cpu::set_num_threads(a.threads);
  alk::manual_seed(0);
  auto model = std::make_shared<alk::nn::GPT>(a.cfg);
  model->to(a.device);
  alk::Device& dev = model->wte->weight.device();
  std::printf("alk generate on %s (%s), V%lld T%lld d%lld H%lld L%lld, %s, prompt %lld + %lld new, greedy\n",
              dev.name().c_str(), dev.info().description.c_str(), static_cast<long long>(a.cfg.vocab),
              static_cast<long long>(a.cfg.ctx), static_cast<long long>(a.cfg.dim),
              static_cast<long long>(a.cfg.heads), static_cast<long long>(a.cfg.layers), a.dtype.c_str(),
              static_cast<long long>(a.prompt), static_cast<long long>(a.tokens));
  std::string label = dev.name();
  std::replace(label.begin(), label.end(), ':', '_');
  for (int64_t b : {int64_t{1}, a.batch}) {
    double prefill = 0;
    const double ms = alk_ms_per_step(model, a, b, &prefill);
    std::printf("alk decode B=%lld ms/token=%.3f tokens/s=%.0f prefill_ms=%.2f\n", static_cast<long long>(b), ms,
                static_cast<double>(b) * 1e3 / ms, prefill);
    std::fflush(stdout);
    const double anchor = run_anchor(a, b);
    if (anchor > 0)
      std::printf("RATIO generate_%s_b%lld alk=%.3fms anchor=%.3fms ratio=%.3f alk_tok/s=%.0f\n", label.c_str(),
                  static_cast<long long>(b), ms, anchor, ms / anchor, static_cast<double>(b) * 1e3 / ms);
    else
      std::printf("RATIO generate_%s_b%lld alk=%.3fms anchor=unavailable alk_tok/s=%.0f\n", label.c_str(),
                  static_cast<long long>(b), ms, static_cast<double>(b) * 1e3 / ms);
    std::fflush(stdout);
    if (a.batch == 1) break;
  }
  return 0;
}
