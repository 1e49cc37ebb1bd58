// Data parallel on the CPU over MPI (loopback), with and without the gradient all-reduce
// overlapped with the backward, in the same job: every rank builds two identical tiny GPTs,
// one trained with overlap (the default) and one with ALK_DIST_OVERLAP=0 (every bucket
// all-reduced after the backward), and times their compiled steps interleaved, so machine
// noise hits both alike. Rank 0 prints tokens/s of each and
//   RATIO dist_cpu_overlap alk=<tok/s overlapped> anchor=<tok/s after backward> ratio=<alk/anchor>
//   bench_dist_cpu [--nproc 2] [--batch 4] [--ctx 64] [--dim 256] [--layers 4] [--steps 12] [--bucket-kb 256]
// --batch is the global batch (split over the ranks).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "alk/alk.h"
#include "alk/dist.h"

namespace {

struct Trainer {
  alk::nn::GPT model;
  alk::optim::AdamW opt;
  alk::dist::DataParallel dp;
  alk::Program backward, update;
  Trainer(const alk::nn::GPTConfig& c, int64_t bucket_bytes)
      : model((alk::manual_seed(0), c)),
        opt(model.named_parameters(), 3e-4),
        dp(model.named_parameters(), bucket_bytes),
        backward(alk::compile([this](const std::vector<alk::Tensor>& in) {
          alk::Tensor loss = alk::nn::cross_entropy(model(in[0]), in[1]);
          alk::capture("loss", loss);
          dp.backward(loss);
        })),
        update(alk::compile([this](const std::vector<alk::Tensor>&) {
          dp.load_grads();
          opt.step();
          opt.zero_grad();
        })) {}
  double step_ms(const alk::Tensor& x, const alk::Tensor& y) {
    alk::dist::barrier();  // both ranks start the step together
    const auto t0 = std::chrono::steady_clock::now();
    backward({x, y});
    dp.all_reduce();
    update({});
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 4, ctx = 64, dim = 256, layers = 4, bucket_kb = 256;
  int steps = 12, nproc = 2;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--dim")) dim = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--bucket-kb")) bucket_kb = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--nproc")) nproc = std::atoi(argv[++i]);
  }
  if (nproc > 1 && !alk::dist::launched()) return alk::dist::launch_local(nproc);
  try {
    const int world = alk::dist::world_size(), rank = alk::dist::rank();
    const auto [first, rows] = alk::dist::shard_rows(batch, rank, world);
    (void)first;
    const alk::nn::GPTConfig c{.vocab = 512, .ctx = ctx, .dim = dim, .heads = 4, .layers = layers};
    setenv("ALK_DIST_OVERLAP", "1", 1);
    Trainer overlapped(c, bucket_kb << 10);
    setenv("ALK_DIST_OVERLAP", "0", 1);
    Trainer after(c, bucket_kb << 10);
    if (!overlapped.dp.overlapped() || after.dp.overlapped()) {
      std::fprintf(stderr, "bench_dist_cpu: the overlap switch did not take (launch with mpirun: MPI_THREAD_SERIALIZED)\n");
      return 1;
    }
    alk::manual_seed(1 + static_cast<uint64_t>(rank));  // each rank its own rows
    alk::Tensor x = alk::randint(0, 512, {rows, ctx}), y = alk::randint(0, 512, {rows, ctx});
    std::vector<double> on, off;
    for (int i = 0; i < steps + 2; ++i) {  // the first two calls of each are eager and traced
      const double a = overlapped.step_ms(x, y), b = after.step_ms(x, y);
      if (i >= 2) on.push_back(a), off.push_back(b);
    }
    // The floor of what overlap can save: one all-reduce of every gradient, alone.
    std::vector<double> alone;
    alk::Tensor grads = alk::zeros({overlapped.model.num_parameters()});
    for (int i = 0; i < 5; ++i) {
      alk::dist::barrier();
      const auto t0 = std::chrono::steady_clock::now();
      alk::dist::all_reduce(grads, alk::dist::ReduceOp::Avg);
      alone.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    // The job's step time: the slowest rank's median.
    alk::Tensor med = alk::tensor(std::vector<double>{median(on), median(off), median(alone)}, {3});
    alk::dist::all_reduce(med, alk::dist::ReduceOp::Max);
    const std::vector<double> m = med.to_vector<double>();
    const double tokens = static_cast<double>(batch * ctx);
    if (rank == 0) {
      std::printf("alk-dist cpu world=%d batch=%lld ctx=%lld dim=%lld layers=%lld params=%.2fM buckets=%zu\n", world,
                  static_cast<long long>(batch), static_cast<long long>(ctx), static_cast<long long>(dim),
                  static_cast<long long>(layers), static_cast<double>(overlapped.model.num_parameters()) / 1e6,
                  overlapped.dp.buckets());
      std::printf("overlapped: %.1f ms/step %.0f tok/s; after backward: %.1f ms/step %.0f tok/s; "
                  "all-reduce of the gradients alone: %.1f ms\n",
                  m[0], tokens / (m[0] / 1e3), m[1], tokens / (m[1] / 1e3), m[2]);
      std::printf("RATIO dist_cpu_overlap alk=%.0f anchor=%.0f ratio=%.3f\n", tokens / (m[0] / 1e3), tokens / (m[1] / 1e3),
                  m[1] / m[0]);
    }
    std::fflush(stdout);
  } catch (const alk::Error& e) {
    std::fprintf(stderr, "bench_dist_cpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
