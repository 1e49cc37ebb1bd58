// alk::compile: a traced step replays to exactly what eager execution computes (same
// kernels, same order), with new inputs, changing learning rates and fresh random numbers.
#include <map>
#include <set>

#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "graph/graph.h"
#include "graph/program_contents.h"
#include "testing.h"

namespace alk {
namespace {

struct TrainSetup {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> opt;
  explicit TrainSetup(double dropout) {
    manual_seed(42);
    net->add(std::make_shared<nn::Linear>(6, 16)).add(std::make_shared<nn::Act>(nn::Activation::GELUTanh));
    net->add(std::make_shared<nn::Dropout>(dropout)).add(std::make_shared<nn::Linear>(16, 3));
    opt = std::make_unique<optim::AdamW>(net->named_parameters(), 1e-2, optim::AdamOptions{.weight_decay = 0.1});
  }
  void step(const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(net->forward(in[0]), in[1]);
    capture("loss", loss);
    loss.backward();
    optim::clip_grad_norm(net->parameters(), 1.0);
    opt->step();
    opt->zero_grad();
  }
};

std::vector<Tensor> batch(int k) {
  manual_seed(1000 + k);  // the data's own stream, not the model's
  Tensor x = randn({5, 6});
  Tensor y = randint(0, 3, {5});
  realize({x, y});
  return {x, y};
}

void run_both(double dropout) {
  TrainSetup eager(dropout), compiled(dropout);
  Program program = compile([&](const std::vector<Tensor>& in) { compiled.step(in); });
  std::vector<uint64_t> offsets_eager, offsets_compiled;
  for (int k = 0; k < 6; ++k) {
    auto in = batch(k);
    if (k == 3) {  // a new learning rate reaches the replayed kernels
      eager.opt->set_lr(3e-3);
      compiled.opt->set_lr(3e-3);
    }
    set_random_state(7, static_cast<uint64_t>(100 * k));
    eager.step(in);
    const uint64_t after_eager = random_offset();
    set_random_state(7, static_cast<uint64_t>(100 * k));
    program(in);
    EXPECT_EQ(random_offset(), after_eager) << "step " << k;
    EXPECT_EQ(program.traced(), k >= 1);
  }
  auto pe = eager.net->parameters(), pc = compiled.net->parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_EQ(pe[i].to_vector<float>(), pc[i].to_vector<float>()) << "param " << i;
  EXPECT_EQ(eager.opt->steps(), compiled.opt->steps());
  EXPECT_GT(program.kernels(), 5);
  EXPECT_GT(program.plan().planned_bytes, 0);
  // Parameters, moments and step counts are updated where the step reads them: nothing is
  // copied back after a replay.
  EXPECT_EQ(program.replay_copies(), 0);
}

TEST(Compile, ReplaysMatchEagerBitForBit) { run_both(0.0); }

TEST(Compile, DropoutDrawsFreshMasksOnEveryReplay) { run_both(0.3); }

TEST(Compile, CapturedLossFollowsEachReplay) {
  TrainSetup s(0.0);
  Program program = compile([&](const std::vector<Tensor>& in) { s.step(in); });
  std::vector<double> losses;
  for (int k = 0; k < 5; ++k) {
    program(batch(k % 2));
    losses.push_back(program.captured("loss").item());
  }
  // Alternating batches, a model that learns: the loss on each batch keeps falling.
  EXPECT_LT(losses[2], losses[0]);
  EXPECT_LT(losses[4], losses[2]);
  EXPECT_LT(losses[3], losses[1]);
  EXPECT_THROW(program.captured("nope"), Error);
  // Inputs must keep their shapes.
  EXPECT_THROW(program({randn({4, 6}), randint(0, 3, {4})}), Error);
}

TEST(Compile, BudgetCoversTheWholeTracedStep) {
  TrainSetup s(0.0);
  Program program = compile([&](const std::vector<Tensor>& in) { s.step(in); });
  program(batch(0));
  MemoryBudget budget(1000);  // far too small for the traced step's buffers
  try {
    program(batch(1));
    FAIL() << "expected the budget to refuse the trace";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "budget");
  }
}

// A view of a carried tensor's new value, taken inside the step and kept outside it, shows
// each replay's value (as eager calls would), whichever way the replay writes the state.
TEST(Compile, AViewOfACarriedValueFollowsReplays) {
  Tensor w = zeros({4});
  w.realize();
  Tensor view, held;
  Program program = compile([&](const std::vector<Tensor>& in) {
    w.assign_(w + in[0]);
    view = w.reshape({2, 2});
  });
  Tensor one = zeros({4}) + 1.0;
  one.realize();
  for (int k = 1; k <= 4; ++k) {
    // A second view of the value the trace starts from keeps the scheduler from writing
    // over it, so the replays update w through compile's own carry (write_in_place).
    if (k == 2) held = w.reshape({2, 2});
    program({one});
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, static_cast<float>(k))) << "call " << k;
    EXPECT_EQ(view.reshape({4}).to_vector<float>(), std::vector<float>(4, static_cast<float>(k))) << "call " << k;
  }
}

// A compiled GPT step holds no more memory than an eager one: the trace writes optimizer
// updates over the state they update, and a replay reuses the traced buffers.
TEST(Compile, GptStepPeaksNoHigherThanEager) {
  nn::GPTConfig cfg{.vocab = 128, .ctx = 32, .dim = 64, .heads = 4, .layers = 2};
  auto run = [&](bool compiled) {
    manual_seed(3);
    nn::GPT model(cfg);
    optim::AdamW opt(model.named_parameters(), 1e-3);
    Tensor x = randint(0, 128, {4, 32}), y = randint(0, 128, {4, 32});
    realize({x, y});
    auto step = [&](const std::vector<Tensor>& in) {
      Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
      capture("loss", loss);
      loss.backward();
      opt.step();
      opt.zero_grad();
    };
    Program program = compile(step);
    // The first step creates the moments: measure from the second on.
    if (compiled) program({x, y}); else step({x, y});
    Buffer::reset_peak_bytes();
    const int64_t before = Buffer::live_bytes();
    double loss = 0;
    for (int i = 0; i < 3; ++i) {
      if (compiled) {
        program({x, y});
        loss = program.captured("loss").item();
      } else {
        step({x, y});
        loss = 0;
      }
    }
    return std::tuple{Buffer::peak_bytes() - before, loss, model.parameters()[0].to_vector<float>()};
  };
  const auto [eager_peak, unused, eager_w] = run(false);
  const auto [compiled_peak, loss, compiled_w] = run(true);
  EXPECT_GT(eager_peak, 0);
  // (A replay's own few-byte buffers, the random generator's state, are the slack.)
  EXPECT_LE(compiled_peak, eager_peak + 1024);
  EXPECT_EQ(compiled_w, eager_w);
  EXPECT_GT(loss, 0);
}

// An optimizer's per-parameter updates (step count, moments, parameter) run side by side,
// one run of kernels per source (what CUDA launches as one multi-tensor kernel), not
// interleaved parameter by parameter as the graph's depth-first order has them.
TEST(Compile, OptimizerUpdatesOfOneSourceRunSideBySide) {
  manual_seed(5);
  nn::GPT model(nn::GPTConfig{.vocab = 64, .ctx = 16, .dim = 32, .heads = 2, .layers = 2});
  optim::AdamW opt(model.named_parameters(), 1e-3, optim::AdamOptions{.weight_decay = 0.1});
  Tensor x = randint(0, 64, {2, 16}), y = randint(0, 64, {2, 16});
  realize({x, y});
  Program program = compile([&](const std::vector<Tensor>& in) {
    nn::cross_entropy(model(in[0]), in[1]).backward();
    opt.step();
    opt.zero_grad();
  });
  program({x, y});
  program({x, y});
  const auto params = model.parameters();
  std::set<const Buffer*> state;  // parameters, moments, step counts: written in place
  for (const Tensor& p : params) state.insert(p.impl()->node->buffer.get());
  for (auto& [name, t] : opt.state_dict())
    if (name != "step") state.insert(t.impl()->node->buffer.get());
  const std::vector<Kernel>& kernels = *ProgramAccess::contents(program).kernels;
  std::map<std::string, int> runs, updates;
  std::string previous;
  for (const Kernel& k : kernels) {
    if (k.op != OpId::Map || !state.count(k.output.buffer.get())) {
      previous.clear();
      continue;
    }
    const std::string key = map_kernel_key(k);
    ++updates[key];
    if (key != previous) ++runs[key];
    previous = key;
  }
  // Four updates per parameter (t, m, v, p), in a few sources (p with and without decay).
  int total = 0;
  for (auto& [key, n] : updates) total += n;
  EXPECT_EQ(total, 4 * static_cast<int>(params.size()));
  EXPECT_LE(updates.size(), 5u);
  for (auto& [key, n] : runs) EXPECT_EQ(n, 1) << key << " (" << updates[key] << " kernels)";
}

}  // namespace
}  // namespace alk
