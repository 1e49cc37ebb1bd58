// Several threads, each with its own graph (the rule in docs/determinism.md): forward,
// backward and compiled training steps running at once give exactly what each gives
// alone. `make test-tsan` runs this file under ThreadSanitizer (no data race may be
// reported); the normal suites run it too.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"

namespace alk {
namespace {

constexpr int kThreads = 4;

// One thread's work: what it computes, as floats, from tensors made beforehand (the
// random generator is for one thread at a time).
struct Job {
  Tensor x, w, targets;
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::AdamW> opt;

  explicit Job(int i) {
    manual_seed(100 + static_cast<uint64_t>(i));
    x = randn({48, 24});
    w = randn({24, 16});
    targets = randint(0, 16, {48});
    realize({x, w, targets});
    net = std::make_shared<nn::Sequential>();
    net->add(std::make_shared<nn::Linear>(24, 32)).add(std::make_shared<nn::Act>(nn::Activation::GELUTanh));
    net->add(std::make_shared<nn::Linear>(32, 16));
    opt = std::make_unique<optim::AdamW>(net->named_parameters(), 1e-2);
  }

  std::vector<float> run() {
    std::vector<float> out;
    // Eager forward and backward through matmul, softmax, reductions.
    Tensor wg = w.detach().requires_grad_();
    Tensor loss = sum(softmax(matmul(x, wg), 1) * 3.0) + mean(gelu_tanh(matmul(x, wg)));
    loss.backward();
    out.push_back(static_cast<float>(loss.item()));
    for (float g : wg.grad().to_vector<float>()) out.push_back(g);
    // Compiled training steps (the trace and the captures are per thread).
    Program step = compile([&](const std::vector<Tensor>& in) {
      Tensor l = nn::cross_entropy(net->forward(in[0]), in[1]);
      capture("loss", l);
      l.backward();
      opt->step();
      opt->zero_grad();
    });
    for (int s = 0; s < 4; ++s) {
      step({x, targets});
      out.push_back(static_cast<float>(step.captured("loss").item()));
    }
    return out;
  }
};

TEST(Concurrency, SeparateGraphsOnSeveralThreadsMatchSerialRuns) {
  std::vector<std::vector<float>> serial;
  for (int i = 0; i < kThreads; ++i) serial.push_back(Job(i).run());

  std::vector<std::unique_ptr<Job>> jobs;
  for (int i = 0; i < kThreads; ++i) jobs.push_back(std::make_unique<Job>(i));
  std::vector<std::vector<float>> parallel(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { parallel[i] = jobs[i]->run(); });
  for (std::thread& t : threads) t.join();

  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(parallel[i].size(), serial[i].size()) << i;
    EXPECT_EQ(std::memcmp(parallel[i].data(), serial[i].data(), serial[i].size() * sizeof(float)), 0)
        << "thread " << i << " computed other bits than alone";
    EXPECT_LT(serial[i].back(), serial[i][1 + 24 * 16]) << "thread " << i << "'s model does not train";
  }
}

}  // namespace
}  // namespace alk
