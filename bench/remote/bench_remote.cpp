// The remote device on loopback, against the local CPU in the same command: a server
// (src/remote/server.h) runs in this process on 127.0.0.1, the client drives
// remote:127.0.0.1:PORT/cpu. Prints
//   round trip of one small op (an add of two 4-element tensors, then reading it), median us
//   upload and download bandwidth of --mib MiB, MB/s
//   RATIO remote_tiny_gpt_step alk_remote=<ms>ms anchor=<local cpu ms>ms ratio=<remote/local>
// for the tiny-GPT step (V256 T128 d128 H4 L4 B8, AdamW) compiled and replayed, median over
// --steps after 3 warm-up steps; and the round trips one replayed step costs.
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
#include "remote/remote_device.h"
#include "remote/server.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct StepTiming {
  double ms = 0;
  float last_loss = 0;
};

StepTiming gpt_step_ms(alk::Device& dev, int steps) {
  alk::DeviceGuard on(dev);
  alk::manual_seed(1);
  alk::nn::GPTConfig cfg;
  cfg.vocab = 256, cfg.ctx = 128, cfg.dim = 128, cfg.heads = 4, cfg.layers = 4, cfg.tie_embeddings = false;
  alk::nn::GPT model(cfg);
  alk::optim::AdamOptions adam;
  adam.weight_decay = 0.1;
  alk::optim::AdamW opt(model.named_parameters(), 3e-4, adam);
  alk::Program step = alk::compile([&](const std::vector<alk::Tensor>& in) {
    alk::Tensor loss = alk::nn::cross_entropy(model(in[0]), in[1]);
    alk::capture("loss", loss);
    loss.backward();
    opt.step();
    opt.zero_grad();
  });
  std::vector<int64_t> ids(8 * 128), next(8 * 128);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 31 + 7) % 256), next[i] = (ids[i] + 1) % 256;
  const alk::Tensor x = alk::tensor(ids, {8, 128}), y = alk::tensor(next, {8, 128});
  std::vector<double> times;
  StepTiming out;
  for (int s = 0; s < steps + 3; ++s) {
    const auto t0 = Clock::now();
    step({x, y});
    out.last_loss = static_cast<float>(step.captured("loss").item());
    if (s >= 3) times.push_back(seconds_since(t0) * 1e3);
  }
  out.ms = median(times);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10, mib = 64;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--mib") == 0) mib = std::atoi(argv[++i]);
  }
  const std::string token = "bench-token-0123456789abcdef";
  alk::remote::ServerOptions options;
  options.tokens.push_back({token});
  alk::remote::Server server(options);
  alk::remote::ClientOptions client;
  client.token = token;
  alk::remote::RemoteDevice remote({"127.0.0.1", server.port(), "cpu"}, client);
  alk::Device& cpu = alk::cpu_device();

  {  // one small op's round trip
    alk::DeviceGuard on(remote);
    const alk::Tensor a = alk::ones({4}), b = alk::ones({4});
    (void)(a + b).to_vector<float>();
    std::vector<double> us;
    for (int i = 0; i < 200; ++i) {
      const int64_t trips = remote.round_trips();
      const auto t0 = Clock::now();
      (void)(a + b).to_vector<float>();
      us.push_back(seconds_since(t0) * 1e6);
      if (i == 0) std::printf("small op (add of 4 floats, read back): %lld round trips\n",
                              static_cast<long long>(remote.round_trips() - trips));
    }
    std::printf("small op round trip: median %.0f us over 200\n", median(us));
  }
  {  // bandwidth
    const size_t bytes = static_cast<size_t>(mib) << 20;
    std::vector<unsigned char> host(bytes, 7), back(bytes);
    auto buffer = remote.allocate(bytes);
    remote.upload(*buffer, 0, host.data(), bytes);
    remote.synchronize();
    auto t0 = Clock::now();
    remote.upload(*buffer, 0, host.data(), bytes);
    remote.synchronize();
    const double up = seconds_since(t0);
    t0 = Clock::now();
    remote.download(*buffer, 0, back.data(), bytes);
    const double down = seconds_since(t0);
    std::printf("upload %d MiB: %.0f MB/s; download: %.0f MB/s (%s)\n", mib, bytes / up / 1e6, bytes / down / 1e6,
                back == host ? "bytes equal" : "BYTES DIFFER");
  }
  const StepTiming local = gpt_step_ms(cpu, steps);
  const int64_t trips0 = remote.round_trips();
  const StepTiming far = gpt_step_ms(remote, steps);
  std::printf("tiny-GPT step: local %.2f ms, remote %.2f ms; last loss local %.6f remote %.6f (%s); %.1f round trips a step with setup\n",
              local.ms, far.ms, local.last_loss, far.last_loss, local.last_loss == far.last_loss ? "equal" : "DIFFERENT",
              static_cast<double>(remote.round_trips() - trips0) / (steps + 3));
  std::printf("RATIO remote_tiny_gpt_step alk_remote=%.2fms anchor=%.2fms ratio=%.3f\n", far.ms, local.ms, far.ms / local.ms);
  return 0;
}
