// The determinism contract (docs/determinism.md), end to end: a compiled GPT training step
// gives the same bits whatever the CPU thread count and whichever instruction-set path
// runs it (each path against itself; across paths within rounding), and the same bits
// when run again from the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "alk/compile.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"
#include "testing.h"

namespace alk {
namespace {

// Losses of `steps` compiled AdamW steps of a small GPT (dropout on, so the random stream
// is part of what must repeat), from seed 7.
std::vector<float> gpt_losses(int steps) {
  manual_seed(7);
  nn::GPTConfig cfg;
  cfg.vocab = 64, cfg.ctx = 32, cfg.dim = 32, cfg.heads = 2, cfg.layers = 2, cfg.dropout = 0.1;
  nn::GPT model(cfg);
  optim::AdamW opt(model.named_parameters(), 3e-3);
  Program step = testing::compiled_lm_step(model, opt);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> ids(4 * 32), next(4 * 32);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(s) * 3) % 64);
    for (size_t i = 0; i < ids.size(); ++i) next[i] = (ids[i] + 1) % 64;
    step({tensor(ids, {4, 32}), tensor(next, {4, 32})});
    losses.push_back(static_cast<float>(step.captured("loss").item()));
  }
  return losses;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Determinism : public ::testing::Test {
 protected:
  void TearDown() override {
    cpu::set_num_threads(threads_);
    cpu::set_isa(isa_);
  }
  const int threads_ = cpu::num_threads();
  const cpu::Isa isa_ = cpu::isa();
};

TEST_F(Determinism, GptStepsRepeatBitForBitAcrossRunsAndThreadCounts) {
  const std::vector<float> first = gpt_losses(4);
  EXPECT_TRUE(same_bits(first, gpt_losses(4))) << "a second run from the same seed differs";
  for (int threads : {1, 2, 3}) {
    cpu::set_num_threads(threads);
    EXPECT_TRUE(same_bits(first, gpt_losses(4))) << threads << " threads";
  }
  EXPECT_LT(first.back(), first.front());  // it trains
}

TEST_F(Determinism, EachIsaPathRepeatsItselfAndAgreesWithinRounding) {
  const std::vector<float> reference = gpt_losses(3);
  for (cpu::Isa isa : {cpu::Isa::Generic, cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    cpu::set_isa(isa);
    SCOPED_TRACE(cpu::isa_name(isa));
    const std::vector<float> a = gpt_losses(3);
    cpu::set_num_threads(1);
    EXPECT_TRUE(same_bits(a, gpt_losses(3))) << "thread count changed the bits";
    cpu::set_num_threads(threads_);
    ASSERT_EQ(a.size(), reference.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], reference[i], 1e-4 * std::fabs(reference[i])) << i;
  }
}

}  // namespace
}  // namespace alk
