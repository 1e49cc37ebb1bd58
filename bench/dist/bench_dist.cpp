// Data-parallel GPT-2 124M on N GPUs of one host (issue 15's benchmark): every rank runs the
// model of bench/cuda/bench_gpt2.cpp on its own batch of B x T tokens (weak scaling), with
// the gradients averaged over NCCL between the compiled backward and the compiled update.
// Rank 0 prints the job's tokens/s; bench/dist/run_device.sh compares 1 and 2 GPUs and
// PyTorch DDP (torchrun) in the same call.
//   bench_dist --nproc N [--batch 16] [--ctx 1024] [--steps 10] [--layers 12] [--dtype bf16|f32]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "alk/alk.h"
#include "alk/dist.h"

int main(int argc, char** argv) {
  int64_t B = 16, T = 1024, layers = 12;
  int steps = 10, nproc = 1;
  std::string dtype = "bf16";
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch")) B = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--ctx")) T = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--nproc")) nproc = std::atoi(argv[++i]);
  }
  if (nproc > 1 && !alk::dist::launched()) return alk::dist::launch_local(nproc);
  try {
    const int world = alk::dist::world_size(), rank = alk::dist::rank();
    alk::Device& dev = alk::get_device("cuda:" + std::to_string(alk::dist::local_rank()));
    alk::manual_seed(0);
    alk::nn::GPT model({.vocab = 50304, .ctx = T, .dim = 768, .heads = 12, .layers = layers, .tie_embeddings = true});
    model.to(dev);
    alk::optim::AdamW opt(model.named_parameters(), 3e-4);
    alk::dist::DataParallel dp(model.named_parameters());
    alk::manual_seed(1 + static_cast<uint64_t>(rank));  // each rank its own data
    alk::Tensor x = alk::randint(0, 50257, {B, T}).to(dev), y = alk::randint(0, 50257, {B, T}).to(dev);
    alk::Program backward = alk::compile([&](const std::vector<alk::Tensor>& in) {
      alk::Tensor loss;
      {
        std::optional<alk::Autocast> mixed;
        if (dtype == "bf16") mixed.emplace(alk::DType::BF16);
        loss = alk::nn::cross_entropy(model(in[0]), in[1]);
      }
      alk::capture("loss", loss);
      dp.backward(loss);
    });
    alk::Program update = alk::compile([&](const std::vector<alk::Tensor>&) {
      dp.load_grads();
      opt.step();
      opt.zero_grad();
    });
    std::vector<double> ms;
    double loss = 0;
    for (int i = 0; i < steps + 3; ++i) {
      dev.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      backward({x, y});
      dp.all_reduce();
      update({});
      dev.synchronize();
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 3) ms.push_back(t);
      if (i == 0 || i == steps + 2) {
        alk::Tensor l = backward.captured("loss");
        alk::dist::all_reduce(l, alk::dist::ReduceOp::Avg);
        loss = l.item();
      }
      if (i == 0 && rank == 0) std::printf("step 0 loss %.4f (%.0f ms, compiling)\n", loss, t);
    }
    std::sort(ms.begin(), ms.end());
    // The job's step time: the slowest rank's median.
    alk::Tensor med = alk::tensor(std::vector<double>{ms[ms.size() / 2]}, {1}).to(dev);
    alk::dist::all_reduce(med, alk::dist::ReduceOp::Max);
    const double step_ms = med.item();
    if (rank == 0)
      std::printf("alk-dist gpt2 %s world=%d B=%lld/rank T=%lld L=%lld buckets=%zu ms/step=%.1f tok/s=%.0f last_loss=%.4f\n",
                  dtype.c_str(), world, static_cast<long long>(B), static_cast<long long>(T),
                  static_cast<long long>(layers), dp.buckets(), step_ms,
                  static_cast<double>(world * B * T) / (step_ms / 1e3), loss);
    std::fflush(stdout);
  } catch (const alk::Error& e) {
    std::fprintf(stderr, "bench_dist: %s\n", e.what());
    return 1;
  }
  return 0;
}
