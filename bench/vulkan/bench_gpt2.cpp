// GPT-2 124M training step on a Vulkan device (issue 8, part 8): vocab 50304, ctx 1024, 12
// layers, d 768, 12 heads, tied embeddings, AdamW, the step compiled (alk::compile -> one
// recorded command buffer) and replayed. Prints ms/step (median), tokens/s and the
// achieved TFLOP/s (6N + 12 L d T FLOP per token, the anchor's count).
//   bench_vulkan_gpt2 [--device vulkan:N] [--batch 4] [--ctx 1024] [--steps 5] [--layers 12]
//                     [--dim 768] [--heads 12] [--vocab 50304] [--dtype f32|bf16] [--anchor PATH]
// --dtype bf16 is mixed precision (alk::Autocast around the forward, f32 master weights).
// --anchor PATH (../shared/anchors/torch_gpt2_cuda.py): PyTorch's eager step on CUDA at the
// same B, T and dtype (f32 with TF32 off: the arithmetic of alk's f32 path), measured in the
// same command:
//   RATIO gpt2_124m_step_vulkan_<dtype> alk=<ms>ms anchor=<ms>ms ratio=<alk/anchor>
// The smaller shapes (--vocab, --dim, --layers, --ctx) let lavapipe run it: its storage
// buffers are capped at 128 MiB, under GPT-2's 154 MB embedding.
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
#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The standard output of a shell command (stderr too).
std::string run(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  std::string out;
  if (!pipe) return out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 4, T = 1024, layers = 12, dim = 768, heads = 12, vocab = 50304;
  int steps = 5;
  std::string device = "vulkan", dtype = "f32", anchor;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch") B = std::atoll(argv[++i]);
    else if (a == "--ctx") T = std::atoll(argv[++i]);
    else if (a == "--steps") steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--layers") layers = std::atoll(argv[++i]);
    else if (a == "--dim") dim = std::atoll(argv[++i]);
    else if (a == "--heads") heads = std::atoll(argv[++i]);
    else if (a == "--vocab") vocab = std::atoll(argv[++i]);
    else if (a == "--device") device = argv[++i];
    else if (a == "--dtype") dtype = argv[++i];
    else if (a == "--anchor") anchor = argv[++i];
  }
  if (dtype != "f32" && dtype != "bf16") {
    std::fprintf(stderr, "bench_vulkan_gpt2: --dtype f32 or bf16\n");
    return 2;
  }
  alk::Device& dev = alk::get_device(device);
  alk::manual_seed(0);
  alk::nn::GPT model({.vocab = vocab, .ctx = T, .dim = dim, .heads = heads, .layers = layers, .tie_embeddings = true});
  model.to(dev);
  alk::optim::AdamW opt(model.named_parameters(), 3e-4);
  const int64_t tokens_max = std::min<int64_t>(vocab, 50257);
  alk::Tensor x = alk::randint(0, tokens_max, {B, T}).to(dev), y = alk::randint(0, tokens_max, {B, T}).to(dev);
  auto step_fn = [&](const std::vector<alk::Tensor>& in) {
    alk::Tensor loss;
    {
      std::optional<alk::Autocast> mixed;
      if (dtype == "bf16") mixed.emplace(alk::DType::BF16);
      loss = alk::nn::cross_entropy(model(in[0]), in[1]);
    }
    alk::capture("loss", loss);
    loss.backward();
    opt.step();
    opt.zero_grad();
  };
  alk::Program step = alk::compile(step_fn);
  std::vector<double> ms;
  double first_loss = 0, last_loss = 0;
  for (int i = 0; i < steps + 2; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    step({x, y});
    dev.synchronize();
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double loss = step.captured("loss").item();
    if (i == 0) {
      first_loss = loss;
      std::printf("step 0 loss %.4f (%.0f ms: traced, shaders compiled, recorded)\n", loss, t);
      std::fflush(stdout);
    }
    if (i >= 2) ms.push_back(t);
    last_loss = loss;
  }
  const double alk_ms = median(ms);
  const double n_params = static_cast<double>(model.num_parameters());
  const double flop_per_token =
      6 * n_params + 12.0 * static_cast<double>(layers) * static_cast<double>(dim) * static_cast<double>(T);
  const double tok_s = static_cast<double>(B * T) / (alk_ms / 1e3);
  std::printf("alk-%s gpt2 %s B=%lld T=%lld L=%lld d=%lld V=%lld params=%.1fM ms/step=%.1f tok/s=%.0f "
              "TFLOP/s=%.2f loss %.4f -> %.4f (%s)\n",
              device.c_str(), dtype.c_str(), static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(layers), static_cast<long long>(dim), static_cast<long long>(vocab), n_params / 1e6,
              alk_ms, tok_s, flop_per_token * tok_s / 1e12, first_loss, last_loss, dev.info().description.c_str());
  if (anchor.empty()) return 0;
  // PyTorch's eager step, the anchor's own model and timing (imported, not copied).
  const std::string tdtype = dtype == "bf16" ? "torch.bfloat16" : "torch.float32";
  const std::string script =
      "import importlib.util, sys, torch\n"
      "if not torch.cuda.is_available(): print('NOCUDA'); sys.exit(0)\n"
      "spec = importlib.util.spec_from_file_location('anchor', '" + anchor + "')\n"
      "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
      "torch.backends.cuda.matmul.allow_tf32 = False; torch.backends.cudnn.allow_tf32 = False\n"
      "m.bench('eager', " + tdtype + ", " + std::to_string(B) + ", " + std::to_string(T) + ", 10, 3)\n";
  const std::string path = "/tmp/alk_bench_vulkan_gpt2_anchor.py";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  const std::string out = run("python3 " + path);
  std::printf("%s", out.c_str());
  const size_t at = out.find("ms/step=");
  if (at == std::string::npos) {
    std::printf("no anchor (no CUDA PyTorch here, or it failed)\n");
    return 0;
  }
  const double anchor_ms = std::atof(out.c_str() + at + 8);
  if (layers == 12 && dim == 768 && vocab == 50304)
    std::printf("RATIO gpt2_124m_step_vulkan_%s alk=%.1fms anchor=%.1fms ratio=%.3f (torch eager %s, TF32 off)\n",
                dtype.c_str(), alk_ms, anchor_ms, alk_ms / anchor_ms, dtype.c_str());
  return 0;
}
