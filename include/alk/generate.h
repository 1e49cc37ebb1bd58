// Generation with a KV cache: the ops a decode step is built from, and alk::Generator, which
// runs many requests at once over a fixed number of cache slots (continuous batching).
//
//   auto model = std::make_shared<alk::nn::GPT>(cfg);      // weights loaded, on its device
//   alk::Generator gen(model, {.slots = 8});
//   alk::GenerateRequest r;
//   r.prompt = tok.encode("Once upon");
//   r.sampling.temperature = 0.8;
//   int64_t id = gen.submit(r);
//   while (!gen.idle())
//     for (const alk::TokenEvent& e : gen.step()) ...   // e.request, e.token, e.finished
//
// Prefill runs a prompt through the fused attention kernels and copies its keys and values
// into the request's slot; each decode step (every layer, the penalties and the sampling) is
// one compiled program replayed with the slots' tokens, positions and settings in device
// buffers, so only the chosen ids come back to the host. Stop sequences and token limits are
// decided on the host from those ids.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "alk/tensor.h"

namespace alk {

namespace nn {
class GPT;
}

// ---- the ops (template ops: every backend runs them or says why not; alk ops lists them) ----

// cache [S, Tmax, Hkv, D] with rows [S, Hkv, D] written at cache[s, positions[s]]; positions
// [S] i64/i32. Functional like every op, but written where the cache lies when nothing else
// reads the old value (cache.assign_(kv_cache_write(cache, ...)) updates it in place, also
// inside alk::compile). A position outside [0, Tmax) is an error.
Tensor kv_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions, Loc loc = Loc::current());

// One query row per slot over that slot's cached keys: q [S, H, D], k_cache and v_cache
// [S, Tmax, Hkv, D] (H a multiple of Hkv: query head h reads kv head h / (H / Hkv)), lengths
// [S] i64/i32 (slot s attends to cache rows [0, lengths[s]); 0 gives zeros). Result [S, H, D]
// in the promoted float dtype (f32 under autocast). scale < 0: 1 / sqrt(D). No gradient.
Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& lengths,
                        double scale = -1, Loc loc = Loc::current());

// Draws one token per row of logits [S, V] on the device: settings [S, 3] f32 (temperature,
// top_k, top_p per row), seeds [S] i64 and counters [S] i64. Temperature <= 0 is greedy (the
// first maximum). Otherwise z = logits / temperature; top_k > 0 keeps the values >= the k-th
// largest z; top_p < 1 then keeps the probabilities >= the largest p* whose tokens (those
// with p >= p*) hold at least top_p of the mass (ties at a threshold are kept, as
// transformers' filters keep them); the token is the inverse CDF, in vocabulary order, of
// the kept probabilities at u = Philox uniform (key seed, counter): a function of (seed,
// counter), never of which slots run beside it. Result [S] i64.
Tensor sample_tokens(const Tensor& logits, const Tensor& settings, const Tensor& seeds, const Tensor& counters,
                     Loc loc = Loc::current());

// ---- the engine ----

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: all
  double top_p = 1.0;
  std::optional<uint64_t> seed = std::nullopt;  // none: one is drawn from the generator of manual_seed
  // Subtracted from a token's logit: presence once if it was generated before, frequency
  // times the times it was (generated tokens, as vLLM counts them; the prompt's are not).
  double presence_penalty = 0, frequency_penalty = 0;
  int64_t max_tokens = 16;
  std::vector<std::vector<int32_t>> stop = {};  // generation ends after any of these id sequences
  std::optional<int32_t> eos = std::nullopt;  // ends after this id (included in the output)
};

struct GenerateRequest {
  std::vector<int32_t> prompt = {};  // at least one id
  SamplingParams sampling = {};
};

enum class FinishReason : uint8_t { None, Length, Stop, Cancelled };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  int64_t request = 0;
  int32_t token = -1;   // -1 for a cancellation (no token)
  double logprob = 0;   // log-probability of token under the model (GeneratorOptions::logprobs)
  FinishReason finished = FinishReason::None;
  // GeneratorOptions::top_logprobs > 0: the most likely tokens at this position and their
  // log-probabilities, most likely first (ties: the lower id first).
  std::vector<std::pair<int32_t, double>> top = {};
};

struct GeneratorOptions {
  int64_t slots = 1;        // sequences decoded at once
  int64_t max_context = 0;  // rows of each slot's cache; 0: the model's context
  // Cache and compute dtype: bf16/f16 decode under an Autocast of that dtype (GPUs); f32 (the
  // default): no autocast, the model's parameters' dtype. (A plain DType, not an optional, so
  // the options can be written as designated initializers under -Wextra.)
  DType autocast = DType::F32;
  int64_t memory_budget = -1;  // bytes the caches may take; a slot count that does not fit is refused
  bool logprobs = false;       // compute each chosen token's log-probability on the device
  int64_t top_logprobs = 0;    // with logprobs: also the n most likely tokens at each position (device top-n)
  bool compile = true;         // replay the decode step (false: build the graph every step, for tests)
  // Prompt tokens one step() prefills at most, over the requests starting (oldest first): a
  // long prompt goes in by chunks while the running requests get a token every step, which
  // bounds how long a new request stalls the others. 0: every waiting prompt whole.
  int64_t prefill_chunk = 512;
  // A request that does not fit a slot's cache (prompt + max_tokens > max_context): an error
  // from submit (false) or accepted and ended with FinishReason::Length at the cache's end.
  bool truncate_at_context = false;
};

struct GeneratorStats {
  int64_t prefill_tokens = 0, decode_tokens = 0, decode_steps = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

class Generator {
 public:
  Generator(std::shared_ptr<nn::GPT> model, GeneratorOptions options = {}, Loc loc = Loc::current());
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Queues a request; it starts (prefill) at the next step() with a free slot. Returns its id.
  int64_t submit(GenerateRequest request, Loc loc = Loc::current());
  // Ends a queued or running request; its slot is free for the next step.
  void cancel(int64_t request);
  // Admits queued requests into free slots, prefills up to prefill_chunk prompt tokens of the
  // starting ones (a request whose prompt completes samples its first token), then runs one
  // decode step for the running ones: the tokens made.
  std::vector<TokenEvent> step();
  bool idle() const;  // nothing queued or running
  // Runs one request alone to the end: its generated ids (the prompt's not included).
  std::vector<int32_t> generate(GenerateRequest request, Loc loc = Loc::current());

  int64_t slots() const;
  int64_t max_context() const;
  int64_t cache_bytes() const;  // K and V of every layer and slot
  const GeneratorStats& stats() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// Bytes the caches of `slots` slots x `context` rows take for this model in dtype t.
int64_t kv_cache_bytes(const nn::GPT& model, int64_t slots, int64_t context, DType t);

}  // namespace alk
