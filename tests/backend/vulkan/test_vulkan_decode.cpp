// The decode ops (src/backend/vulkan/kernels/decode_ops.cpp) against the CPU's kernels on the
// same inputs, and alk::Generator on Vulkan against the CPU's generator: the cache write
// (in place and copied, a bad position raising the CPU's error), decode attention
// (grouped-query, per-slot lengths including 0, strided q, f32/f16/bf16 caches), sampling
// (greedy, temperature, top-k, top-p) and greedy generation through the compiled step.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>
#include <map>
#include <cstdlib>
#include <random>

#include "alk/device.h"
#include "alk/generate.h"
#include "alk/nn.h"
#include "alk/tensor.h"
#include "vulkan_kernel_test_util.h"

namespace alk::vk::testing {
namespace {

std::vector<double> randoms(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

TEST(VulkanDecode, KvCacheWriteEqualsTheCpus) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t S = 3, T = 6, H = 2, D = 8;
  const std::vector<double> c = randoms(static_cast<size_t>(S * T * H * D), 1);
  const std::vector<double> qkv = randoms(static_cast<size_t>(S * 3 * H * D), 2);
  Tensor pos = tensor(std::vector<int64_t>{5, 0, 2}, {S});
  for (DType t : {DType::F32, DType::BF16}) {
    auto run = [&](Device& d, bool in_place) {
      Tensor cache = tensor(c, {S, T, H, D}).to(t).to(d).realize();
      // The rows as the decode step has them: a strided slice of the [S, 3, H, D] projection.
      Tensor rows = tensor(qkv, {S, 3, H, D}).to(t).to(d).select(1, 1);
      if (!in_place) return kv_cache_write(cache, rows, pos.to(d)).to(DType::F64).to_vector<double>();
      cache.assign_(kv_cache_write(cache, rows, pos.to(d)));
      return cache.to(DType::F64).to_vector<double>();
    };
    for (bool in_place : {false, true}) {
      const std::vector<double> want = run(get_device("cpu"), in_place), got = run(*dev, in_place);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << dtype_name(t) << " element " << i;
    }
  }
  Tensor cache = zeros({S, T, H, D}).to(*dev).contiguous();
  Tensor bad = kv_cache_write(cache, zeros({S, H, D}).to(*dev), tensor(std::vector<int64_t>{0, 6, 1}, {S}).to(*dev));
  EXPECT_THROW(bad.to_vector<float>(), Error);
}

// Each (slot, head) in one workgroup (what lavapipe runs), and split over the keys into parts
// combined by a second pass (what GPUs run; forced here): 70 rows in 3 parts of 24 leave the last
// part short, lengths 0 and 1 leave parts empty.
TEST(VulkanDecode, DecodeAttentionEqualsTheCpus) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t S = 4, T = 70, H = 4, Hkv = 2;
  for (const char* parts : {"1", "3"})
  for (int64_t D : {8, 64}) {
    ::setenv("ALK_VK_DECODE_PARTS", parts, 1);
    const std::vector<double> q = randoms(static_cast<size_t>(S * H * D), 3);
    const std::vector<double> k = randoms(static_cast<size_t>(S * T * Hkv * D), 4);
    const std::vector<double> v = randoms(static_cast<size_t>(S * T * Hkv * D), 5);
    Tensor lengths = tensor(std::vector<int32_t>{70, 0, 1, 37}, {S});
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      auto run = [&](Device& d) {
        // q read through strides: a transposed copy viewed back.
        Tensor qd = tensor(q, {H, S, D}).to(t).to(d).transpose(0, 1);
        Tensor out = decode_attention(qd, tensor(k, {S, T, Hkv, D}).to(t).to(d), tensor(v, {S, T, Hkv, D}).to(t).to(d),
                                      lengths.to(d));
        return out.to(DType::F64).to_vector<double>();
      };
      const std::vector<double> want = run(get_device("cpu")), got = run(*dev);
      const double tol = t == DType::F32 ? 2e-5 : t == DType::F16 ? 2e-3 : 1e-2;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
            << dtype_name(t) << " D " << D << " parts " << parts << " element " << i;
    }
    ::unsetenv("ALK_VK_DECODE_PARTS");
  }
}

TEST(VulkanDecode, SampleTokensEqualsTheCpus) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t V = 1000;
  const std::vector<std::vector<float>> settings = {{0, 0, 1}, {1, 0, 1}, {0.8f, 40, 1}, {1.1f, 0, 0.9f},
                                                   {0.7f, 50, 0.5f}, {1, 1, 1}, {1.5f, 0, 0.2f}, {1, 999, 1}};
  const int64_t S = static_cast<int64_t>(settings.size());
  std::vector<float> st;
  for (const auto& s : settings) st.insert(st.end(), s.begin(), s.end());
  int draws = 0, differ = 0;
  for (uint32_t round = 0; round < 25; ++round) {
    const std::vector<double> logits = randoms(static_cast<size_t>(S * V), 100 + round, 3.0);
    std::vector<int64_t> seeds, counters;
    for (int64_t s = 0; s < S; ++s) seeds.push_back(round * 100 + s), counters.push_back(round + 3 * s);
    auto run = [&](Device& d) {
      return sample_tokens(tensor(logits, {S, V}).to(DType::F32).to(d), tensor(st, {S, 3}).to(d),
                           tensor(seeds, {S}).to(d), tensor(counters, {S}).to(d))
          .to_vector<int64_t>();
    };
    const std::vector<int64_t> want = run(get_device("cpu")), got = run(*dev);
    for (int64_t s = 0; s < S; ++s) {
      ++draws;
      differ += got[static_cast<size_t>(s)] != want[static_cast<size_t>(s)];
      // Greedy and top-k 1 are exact; a draw may differ only where f32 rounding moves u across a boundary.
      if (settings[static_cast<size_t>(s)][0] == 0 || settings[static_cast<size_t>(s)][1] == 1) {
        EXPECT_EQ(got[static_cast<size_t>(s)], want[static_cast<size_t>(s)]) << "round " << round << " row " << s;
      }
    }
  }
  EXPECT_LE(differ, 1) << differ << " of " << draws << " draws differ from the CPU's";
}

// GPT-2, and the LLaMA layout (rotary at each slot's position, 4 query heads over 2 cached
// key/value heads, RMSNorm, SwiGLU, untied head).
class VulkanGreedy : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Families, VulkanGreedy, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "llama" : "gpt2"; });

TEST_P(VulkanGreedy, GenerationEqualsTheCpus) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  manual_seed(3);
  nn::GPTConfig cfg{.vocab = 64, .ctx = 48, .dim = 32, .heads = 4, .layers = 2};
  if (GetParam()) {
    cfg.kv_heads = 2, cfg.mlp_hidden = 40, cfg.norm = nn::NormKind::RMSNorm, cfg.positions = nn::PositionKind::Rotary;
    cfg.rope_scaling = {"llama3", 8, 1, 4, 16}, cfg.mlp = nn::MLPKind::SwiGLU, cfg.bias = false;
    cfg.tie_embeddings = false;
  }
  auto cpu_model = std::make_shared<nn::GPT>(cfg);
  for (auto& [name, p] : cpu_model->named_parameters()) {
    Tensor t = p;
    if (name.find("ln") == std::string::npos) t.assign_(mul(t, 8.0).realize());
  }
  manual_seed(3);
  auto vk_model = std::make_shared<nn::GPT>(cpu_model->cfg);
  vk_model->load_state_dict(cpu_model->state_dict());
  vk_model->to(*dev);
  auto requests = [] {
    std::vector<GenerateRequest> r(3);
    r[0].prompt = {1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16};
    r[1].prompt = {9};
    r[2].prompt = {5, 6};
    for (auto& x : r) x.sampling.temperature = 0, x.sampling.max_tokens = 20;
    return r;
  };
  auto run = [&](const std::shared_ptr<nn::GPT>& m, int64_t prefill_chunk = 0) {
    Generator gen(m, {.slots = 2, .prefill_chunk = prefill_chunk});
    std::vector<int64_t> ids;
    for (const GenerateRequest& r : requests()) ids.push_back(gen.submit(r));
    std::map<int64_t, std::vector<int32_t>> out;
    while (!gen.idle())
      for (const TokenEvent& e : gen.step()) out[e.request].push_back(e.token);
    return out;
  };
  const auto want = run(cpu_model);
  EXPECT_EQ(run(vk_model), want);
  // Prompts prefilled 3 tokens a step (chunks attending to the earlier rows in the cache).
  EXPECT_EQ(run(vk_model, 3), want);
  // The decode step recorded with the attention split in parts (as on GPUs): the same tokens.
  ::setenv("ALK_VK_DECODE_PARTS", "2", 1);
  EXPECT_EQ(run(vk_model), want);
  ::unsetenv("ALK_VK_DECODE_PARTS");
}

}  // namespace
}  // namespace alk::vk::testing
#endif
