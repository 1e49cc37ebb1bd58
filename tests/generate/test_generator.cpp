// alk::Generator: the cached decode against recomputing the whole sequence, batching against
// running alone, seeded sampling, cancellation and bad requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "alk/alk.h"
#include "alk/generate.h"

namespace alk {
namespace {

// scale: weights this many times GPT-2's 0.02 init, so the logits are far apart and greedy
// choices are not near-ties that rounding could flip (1: nearly uniform distributions).
std::shared_ptr<nn::GPT> small_gpt(int64_t ctx = 64, double scale = 8.0) {
  manual_seed(11);
  auto model = std::make_shared<nn::GPT>(nn::GPTConfig{.vocab = 96, .ctx = ctx, .dim = 32, .heads = 4, .layers = 2});
  for (auto& [name, p] : model->named_parameters()) {
    Tensor t = p;
    if (name.find("ln") == std::string::npos && scale != 1.0) t.assign_(mul(t, scale).realize());
  }
  model->eval();
  return model;
}

// Today's `alk sample` loop: the whole sequence through the model for every token, the last
// row's logits to the host, the first maximum.
std::vector<int32_t> greedy_by_recompute(nn::GPT& model, std::vector<int32_t> ids, int64_t tokens,
                                         std::vector<double>* logprobs = nullptr) {
  NoGradGuard no_grad;
  const size_t prompt = ids.size();
  for (int64_t n = 0; n < tokens; ++n) {
    std::vector<int64_t> window(ids.begin(), ids.end());
    const int64_t t = static_cast<int64_t>(window.size());
    Tensor logits = model(tensor(window, {1, t})).select(1, t - 1).reshape({-1});
    std::vector<double> l = logits.to_vector<double>();
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    if (logprobs) logprobs->push_back(log_softmax(logits, 0).to_vector<double>()[static_cast<size_t>(next)]);
    ids.push_back(next);
  }
  return std::vector<int32_t>(ids.begin() + static_cast<long>(prompt), ids.end());
}

GenerateRequest request(std::vector<int32_t> prompt, int64_t max_tokens, double temperature = 0,
                        std::optional<uint64_t> seed = std::nullopt) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

TEST(Generator, GreedyWithTheCacheEqualsGreedyByRecomputation) {
  auto model = small_gpt(300);
  const std::vector<int32_t> prompt = {5, 17, 3, 90, 44};
  std::vector<double> want_lp;
  const std::vector<int32_t> want = greedy_by_recompute(*model, prompt, 256, &want_lp);
  Generator gen(model, {.slots = 1, .logprobs = true});
  const int64_t id = gen.submit(request(prompt, 256));
  std::vector<int32_t> got;
  std::vector<double> got_lp;
  while (!gen.idle())
    for (const TokenEvent& e : gen.step()) {
      ASSERT_EQ(e.request, id);
      got.push_back(e.token);
      got_lp.push_back(e.logprob);
    }
  EXPECT_EQ(got, want);
  // The cached decode's logits equal the recomputation's (the chosen token's log-probability
  // at every step, f32 on both sides).
  ASSERT_EQ(got_lp.size(), want_lp.size());
  for (size_t i = 0; i < got_lp.size(); ++i) EXPECT_NEAR(got_lp[i], want_lp[i], 2e-4) << "token " << i;
  EXPECT_EQ(gen.stats().decode_tokens, 255);
  EXPECT_EQ(gen.stats().prefill_tokens, 5);
}

// The LLaMA layout: rotary at each slot's own position in the decode step, a cache of 2
// key/value heads for 4 query heads (grouped-query), RMSNorm, SwiGLU, q/k/v biases, untied head.
std::shared_ptr<nn::GPT> small_llama(int64_t ctx) {
  manual_seed(12);
  nn::GPTConfig c{.vocab = 96, .ctx = ctx, .dim = 32, .heads = 4, .layers = 2};
  c.kv_heads = 2, c.mlp_hidden = 40, c.norm = nn::NormKind::RMSNorm, c.norm_eps = 1e-6;
  c.positions = nn::PositionKind::Rotary, c.rope_theta = 500, c.mlp = nn::MLPKind::SwiGLU;
  c.rope_scaling = {"llama3", 4, 1, 4, 16};
  c.bias = false, c.qkv_bias = true, c.tie_embeddings = false;
  auto model = std::make_shared<nn::GPT>(c);
  for (auto& [name, p] : model->named_parameters()) {
    Tensor t = p;
    if (name.find("ln") == std::string::npos) t.assign_(mul(t, 8.0).realize());
  }
  model->eval();
  return model;
}

TEST(Generator, LlamaLayoutGreedyWithTheCacheEqualsGreedyByRecomputation) {
  auto model = small_llama(120);
  const std::vector<int32_t> prompt = {5, 17, 3, 90, 44, 2};
  std::vector<double> want_lp;
  const std::vector<int32_t> want = greedy_by_recompute(*model, prompt, 100, &want_lp);
  Generator gen(model, {.slots = 2, .logprobs = true});
  EXPECT_EQ(gen.cache_bytes(), 2 * 2 * 2 * 120 * 2 * 8 * 4);  // K and V, layers, slots, rows, kv heads, head dim, f32
  // Two slots at different positions in each step: a shorter request beside the long one.
  const int64_t other = gen.submit(request({7, 8}, 30));
  const int64_t id = gen.submit(request(prompt, 100));
  std::vector<int32_t> got, got_other;
  std::vector<double> got_lp;
  while (!gen.idle())
    for (const TokenEvent& e : gen.step()) {
      if (e.request == other) {
        got_other.push_back(e.token);
        continue;
      }
      ASSERT_EQ(e.request, id);
      got.push_back(e.token);
      got_lp.push_back(e.logprob);
    }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_other, greedy_by_recompute(*model, {7, 8}, 30));
  ASSERT_EQ(got_lp.size(), want_lp.size());
  for (size_t i = 0; i < got_lp.size(); ++i) EXPECT_NEAR(got_lp[i], want_lp[i], 2e-4) << "token " << i;
  // The eager decode step agrees with the compiled one.
  Generator eager(model, {.slots = 1, .compile = false});
  EXPECT_EQ(eager.generate(request(prompt, 40)), std::vector<int32_t>(want.begin(), want.begin() + 40));
}

TEST(Generator, CompiledAndEagerDecodeStepsAgree) {
  auto model = small_gpt();
  const std::vector<int32_t> prompt = {1, 2, 3};
  Generator compiled(model, {.slots = 2});
  Generator eager(model, {.slots = 2, .compile = false});
  EXPECT_EQ(compiled.generate(request(prompt, 20, 0.9, 3)), eager.generate(request(prompt, 20, 0.9, 3)));
}

// Slots of different prompt lengths decoded together give each request the tokens it gets
// alone, with more requests than slots (a finished slot takes the next one).
TEST(Generator, BatchingGivesEachRequestItsTokensAlone) {
  auto model = small_gpt();
  std::vector<GenerateRequest> reqs = {request({1, 2, 3, 4, 5, 6, 7}, 12), request({9}, 20, 0.8, 42),
                                       request({4, 4, 4}, 5), request({60, 61, 62, 63}, 9, 1.2, 7),
                                       request({30, 31}, 14, 0.7, 5)};
  reqs[1].sampling.top_k = 10;
  reqs[3].sampling.top_p = 0.8;
  reqs[4].sampling.presence_penalty = 0.5;
  reqs[4].sampling.frequency_penalty = 0.3;
  std::vector<std::vector<int32_t>> alone;
  for (const GenerateRequest& r : reqs) {
    Generator one(model, {.slots = 1});
    alone.push_back(one.generate(r));
    EXPECT_EQ(static_cast<int64_t>(alone.back().size()), r.sampling.max_tokens);
  }
  Generator gen(model, {.slots = 3});
  std::vector<int64_t> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(gen.submit(r));
  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, FinishReason> reason;
  int steps = 0;
  while (!gen.idle()) {
    ++steps;
    for (const TokenEvent& e : gen.step()) {
      got[e.request].push_back(e.token);
      if (e.finished != FinishReason::None) reason[e.request] = e.finished;
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i;
    EXPECT_EQ(reason[ids[i]], FinishReason::Length);
  }
  EXPECT_LT(steps, 20 + 14);  // slots were shared, not run one after another
}

TEST(Generator, SeededSamplingRepeatsAndSeedsDiffer) {
  auto model = small_gpt(64, 1.0);
  Generator gen(model, {.slots = 2});
  auto a = gen.generate(request({3, 1, 4}, 30, 1.0, 123));
  auto b = gen.generate(request({3, 1, 4}, 30, 1.0, 123));
  auto c = gen.generate(request({3, 1, 4}, 30, 1.0, 124));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Generator, StopSequencesAndEosEndARequest) {
  auto model = small_gpt();
  Generator gen(model, {.slots = 1});
  const std::vector<int32_t> free_run = gen.generate(request({7, 8}, 12));
  GenerateRequest r = request({7, 8}, 12);
  const std::vector<int32_t> stop = {free_run[3], free_run[4]};
  r.sampling.stop = {stop};
  const std::vector<int32_t> stopped = gen.generate(r);
  const auto end = std::search(free_run.begin(), free_run.end(), stop.begin(), stop.end()) + 2;  // the first match
  EXPECT_EQ(stopped, std::vector<int32_t>(free_run.begin(), end));
  GenerateRequest e = request({7, 8}, 12);
  e.sampling.eos = free_run[2];
  const std::vector<int32_t> at_eos = gen.generate(e);
  const size_t first = static_cast<size_t>(std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin());
  EXPECT_EQ(at_eos, std::vector<int32_t>(free_run.begin(), free_run.begin() + static_cast<long>(first) + 1));
}

TEST(Generator, CancelFreesTheSlotForTheNextRequest) {
  auto model = small_gpt();
  Generator gen(model, {.slots = 1});
  const int64_t first = gen.submit(request({1, 2}, 40));
  const int64_t second = gen.submit(request({3}, 4));
  gen.step();
  gen.step();
  gen.cancel(first);
  bool cancelled = false;
  std::vector<int32_t> second_tokens;
  while (!gen.idle())
    for (const TokenEvent& e : gen.step()) {
      if (e.request == first) {
        EXPECT_EQ(e.finished, FinishReason::Cancelled);
        cancelled = true;
      }
      if (e.request == second) second_tokens.push_back(e.token);
    }
  EXPECT_TRUE(cancelled);
  Generator alone(model, {.slots = 1});
  EXPECT_EQ(second_tokens, alone.generate(request({3}, 4)));
}

TEST(Generator, BadRequestsAndOptionsRaise) {
  auto model = small_gpt(16);
  Generator gen(model, {.slots = 1});
  EXPECT_THROW(gen.submit(request({1, 2, 3}, 14)), Error);  // 3 + 14 > 16
  EXPECT_THROW(gen.submit(request({}, 4)), Error);
  EXPECT_THROW(gen.submit(request({1000}, 4)), Error);  // outside the vocabulary
  GenerateRequest r = request({1}, 4, 1.0);
  r.sampling.top_p = 0;
  EXPECT_THROW(gen.submit(r), Error);
  r.sampling.top_p = 1;
  r.sampling.temperature = -1;
  EXPECT_THROW(gen.submit(r), Error);
  EXPECT_THROW(Generator(model, {.slots = 0}), Error);
  EXPECT_THROW(Generator(model, {.slots = 1, .max_context = 17}), Error);
  // 2 layers x K and V x 4 slots x 16 rows x 32 floats = 32 KiB.
  EXPECT_EQ(Generator(model, {.slots = 4}).cache_bytes(), 32768);
  EXPECT_THROW(Generator(model, {.slots = 4, .memory_budget = 32000}), Error);
  EXPECT_NO_THROW(Generator(model, {.slots = 3, .memory_budget = 32000}));
}

// The device's top-n log-probabilities (argmax passes inside the compiled step, and in the
// prefill) against a float64 reference: the recomputed logits' log-softmax in double, sorted on
// the host. Greedy, so the sequence is the recomputation's; several slots at once.
TEST(Generator, TopLogprobsEqualAFloat64Reference) {
  auto model = small_gpt(64, 1.0);  // GPT-2's init: spread-out distributions, many close values
  const int64_t n = 5, tokens = 12;
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3}, {90, 44}, {7}};
  Generator gen(model, {.slots = 2, .logprobs = true, .top_logprobs = n});
  std::map<int64_t, size_t> which;
  for (size_t p = 0; p < prompts.size(); ++p) which[gen.submit(request(prompts[p], tokens))] = p;
  std::map<size_t, std::vector<TokenEvent>> events;
  while (!gen.idle())
    for (const TokenEvent& e : gen.step()) events[which.at(e.request)].push_back(e);
  NoGradGuard no_grad;
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> ids = prompts[p];
    ASSERT_EQ(events[p].size(), static_cast<size_t>(tokens));
    for (const TokenEvent& e : events[p]) {
      std::vector<int64_t> window(ids.begin(), ids.end());
      const int64_t t = static_cast<int64_t>(window.size());
      const std::vector<double> logits = model->forward(tensor(window, {1, t})).select(1, t - 1).reshape({-1}).to_vector<double>();
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double l : logits) sum += std::exp(l - mx);
      std::vector<std::pair<double, int32_t>> ref;
      for (size_t v = 0; v < logits.size(); ++v) ref.emplace_back(logits[v] - mx - std::log(sum), static_cast<int32_t>(v));
      std::stable_sort(ref.begin(), ref.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      ASSERT_EQ(e.top.size(), static_cast<size_t>(n));
      for (size_t j = 0; j < e.top.size(); ++j) {
        EXPECT_NEAR(e.top[j].second, ref[j].first, 1e-4) << "prompt " << p << " rank " << j;
        // The id where the reference's values are not within rounding of a neighbour's.
        const bool tie = (j > 0 && ref[j - 1].first - ref[j].first < 1e-4) ||
                         (j + 1 < ref.size() && ref[j].first - ref[j + 1].first < 1e-4);
        if (!tie) {
          EXPECT_EQ(e.top[j].first, ref[j].second) << "prompt " << p << " rank " << j;
        }
      }
      EXPECT_EQ(e.token, e.top[0].first);  // greedy takes the most likely
      EXPECT_NEAR(e.logprob, e.top[0].second, 1e-6);
      ids.push_back(e.token);
    }
  }
  EXPECT_THROW(Generator(model, {.slots = 1, .top_logprobs = 2}), Error);  // needs logprobs
}


// A prompt prefilled in chunks (each chunk's rows attending to the earlier ones in the cache)
// gives the tokens and log-probabilities of the whole prompt at once, and of recomputation; on
// the LLaMA layout too (rotary at the chunk's positions, grouped-query cache).
TEST(Generator, ChunkedPrefillEqualsWholePrefill) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 41; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % 96));
  for (bool llama : {false, true}) {
    auto model = llama ? small_llama(120) : small_gpt(120);
    std::vector<double> want_lp;
    const std::vector<int32_t> want = greedy_by_recompute(*model, prompt, 24, &want_lp);
    for (int64_t chunk : {0, 7, 40, 41}) {
      Generator gen(model, {.slots = 1, .logprobs = true, .prefill_chunk = chunk});
      gen.submit(request(prompt, 24));
      std::vector<int32_t> got;
      std::vector<double> got_lp;
      int steps_to_first = 0;
      while (!gen.idle()) {
        const std::vector<TokenEvent> events = gen.step();
        if (got.empty()) ++steps_to_first;
        for (const TokenEvent& e : events) got.push_back(e.token), got_lp.push_back(e.logprob);
      }
      EXPECT_EQ(got, want) << (llama ? "llama" : "gpt") << " chunk " << chunk;
      ASSERT_EQ(got_lp.size(), want_lp.size());
      for (size_t i = 0; i < got_lp.size(); ++i) EXPECT_NEAR(got_lp[i], want_lp[i], 2e-4) << "chunk " << chunk << " token " << i;
      EXPECT_EQ(steps_to_first, chunk == 0 ? 1 : (41 + chunk - 1) / chunk) << "chunk " << chunk;
      EXPECT_EQ(gen.stats().prefill_tokens, 41);
    }
  }
}

// While a long prompt goes in by chunks, the request already decoding gets a token every step
// (its row in the decode step is unaffected by the slot being filled beside it), and each
// request's tokens are those it gets alone.
TEST(Generator, RunningRequestsGetATokenEveryStepWhileALongPromptIsPrefilled) {
  auto model = small_gpt(120);
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 50; ++i) long_prompt.push_back(static_cast<int32_t>((i * 13 + 5) % 96));
  const GenerateRequest running = request({3, 1, 4}, 30, 0.9, 77), arriving = request(long_prompt, 10);
  std::vector<int32_t> running_alone, arriving_alone;
  {
    Generator one(model, {.slots = 1, .prefill_chunk = 0});
    running_alone = one.generate(running);
    arriving_alone = one.generate(arriving);
  }
  Generator gen(model, {.slots = 2, .prefill_chunk = 8});
  const int64_t a = gen.submit(running);
  std::map<int64_t, std::vector<int32_t>> got;
  for (const TokenEvent& e : gen.step()) got[e.request].push_back(e.token);
  ASSERT_EQ(got[a].size(), 2u);  // its first token after the prefill, its second from the decode step
  const int64_t b = gen.submit(arriving);
  for (int step = 1; step <= 7; ++step) {
    const std::vector<TokenEvent> events = gen.step();
    int from_a = 0, from_b = 0;
    for (const TokenEvent& e : events) {
      got[e.request].push_back(e.token);
      (e.request == a ? from_a : from_b) += 1;
    }
    EXPECT_EQ(from_a, 1) << "step " << step;
    // 50 prompt tokens at 8 a step: the 7th step completes the prompt, samples b's first token
    // and decodes its second.
    EXPECT_EQ(from_b, step < 7 ? 0 : 2) << "step " << step;
  }
  while (!gen.idle())
    for (const TokenEvent& e : gen.step()) got[e.request].push_back(e.token);
  EXPECT_EQ(got[a], running_alone);
  EXPECT_EQ(got[b], arriving_alone);
  EXPECT_THROW(Generator(model, {.slots = 1, .prefill_chunk = -1}), Error);
}

}  // namespace
}  // namespace alk
