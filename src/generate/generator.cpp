// alk::Generator: KV-cache generation over a fixed set of slots (include/alk/generate.h).
//
// Device state, all allocated up front (ggml-alloc's reserve-then-allocate):
//   k_cache/v_cache[layer]  [slots, context, kv_heads, head_dim]  the compute dtype
//   tokens, positions       [slots] i64   the token each slot feeds next and its position
//   active                  [slots] i64   1 while the slot runs a request (positions advance)
//   settings                [slots, 3] f32 temperature, top_k, top_p
//   penalties               [slots, 2] f32 presence, frequency
//   seeds                   [slots] i64   Philox keys (the counter is the new token's position)
//   counts                  [slots, vocab] f32 how often each token was generated
// The decode step reads and carries them; the host writes a slot's entries when a request
// starts or ends (it keeps mirrors of the small ones, which change only then or are read
// back anyway), so a step's host work is one replay and one read of the chosen ids.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "alk/compile.h"
#include "alk/generate.h"
#include "alk/nn.h"
#include "graph/graph.h"
#include "ops/ops.h"
#include "runtime/device.h"

namespace alk {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Bytes [offset, offset + size) of a realized tensor's buffer, from the host.
void write_range(const Tensor& t, size_t offset, const void* bytes, size_t size) {
  const Node& n = *t.impl()->node;
  n.buffer->device->upload(*n.buffer, offset, bytes, size);
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "none";
}

int64_t kv_cache_bytes(const nn::GPT& model, int64_t slots, int64_t context, DType t) {
  const nn::GPTConfig& c = model.cfg;
  return 2 * c.layers * slots * context * c.key_value_heads() * c.head_dim() * static_cast<int64_t>(dtype_size(t));
}

struct Generator::State {
  std::shared_ptr<nn::GPT> model;
  GeneratorOptions opt;
  Device* device = nullptr;
  DType cache_dtype = DType::F32;
  int64_t S = 0, T = 0, Hkv = 0, D = 0, C = 0, V = 0;

  std::vector<Tensor> k_cache, v_cache;
  Tensor tokens, positions, active, settings, penalties, seeds, counts, logprobs;
  Tensor top_ids, top_logprobs;  // [S, n] i64 and f32, n = opt.top_logprobs
  std::vector<int64_t> h_tokens, h_positions, h_active, h_seeds;
  std::vector<float> h_settings, h_penalties;
  std::optional<Program> program;

  struct Slot {
    int64_t request = -1;  // -1: free
    GenerateRequest req;
    int64_t prefilled = 0;  // prompt tokens in the cache; the slot decodes once all are
    std::vector<int32_t> generated;
  };
  std::vector<Slot> slots;
  std::deque<std::pair<int64_t, GenerateRequest>> queue;
  std::vector<int64_t> cancelled;  // reported by the next step()
  int64_t next_id = 0;
  GeneratorStats stats;

  // Graphs are built under the Generator's autocast, when it has one.
  void enter_autocast(std::optional<Autocast>& a) const {
    if (opt.autocast != DType::F32) a.emplace(opt.autocast);
  }

  Tensor on_device(const Tensor& host) const { return host.to(*device).realize(); }

  // The n largest entries of each row of log-probabilities [R, V], on the device: n argmax
  // passes, each taking its maximum out of the next (-1e30). Ids [R, n] i64, values [R, n].
  std::pair<Tensor, Tensor> top_n(Tensor lsm) const {
    std::vector<Tensor> ids, values;
    for (int64_t i = 0; i < opt.top_logprobs; ++i) {
      Tensor idx = argmax(lsm, 1, true);  // [R, 1], the first maximum
      ids.push_back(idx);
      values.push_back(gather(lsm, 1, idx));
      if (i + 1 < opt.top_logprobs) lsm = sub(lsm, mul(cast(one_hot(idx.reshape({-1}), V), DType::F32), 1e30));
    }
    return {cat(ids, 1), cat(values, 1)};
  }

  // The final norm and the head over rows x [n, C]: logits [n, V] in f32.
  Tensor logits_of(const Tensor& x) const { return cast(model->logits(x), DType::F32); }

  // One decode step for every slot, as a graph (traced once by alk::compile when opt.compile).
  void decode_graph() {
    NoGradGuard no_grad;
    std::optional<Autocast> ac;
    enter_autocast(ac);
    nn::GPT& m = *model;
    Tensor x = m.embed(tokens, positions);  // [S, C]
    Tensor lengths = add(positions, 1);
    for (size_t l = 0; l < m.blocks.size(); ++l) {
      // Each slot's row at its own position: q [S, H, D], k and v [S, Hkv, D] (rotary applied).
      x = m.blocks[l]->forward(x, positions, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        k_cache[l].assign_(kv_cache_write(k_cache[l], k, positions));
        v_cache[l].assign_(kv_cache_write(v_cache[l], v, positions));
        return decode_attention(q, k_cache[l], v_cache[l], lengths).reshape({S, C});
      });
    }
    Tensor logits = logits_of(x);  // [S, V] f32
    Tensor penalized = sub(sub(logits, mul(penalties.slice(1, 0, 1), cast(gt(counts, 0.0), DType::F32))),
                           mul(penalties.slice(1, 1, 2), counts));
    Tensor ids = sample_tokens(penalized, settings, seeds, lengths);  // counter: the new token's position
    if (opt.logprobs) {
      Tensor lsm = log_softmax(logits, 1);
      logprobs.assign_(gather(lsm, 1, ids.unsqueeze(1)).reshape({S}));
      if (opt.top_logprobs > 0) {
        auto [ti, tv] = top_n(lsm);
        top_ids.assign_(ti);
        top_logprobs.assign_(tv);
      }
    }
    counts.assign_(add(counts, mul(cast(one_hot(ids, V), DType::F32), cast(active, DType::F32).unsqueeze(1))));
    tokens.assign_(ids);
    positions.assign_(add(positions, active));
  }

  std::vector<Tensor> state() const {
    std::vector<Tensor> all = {tokens, positions, counts};
    if (opt.logprobs) all.push_back(logprobs);
    if (opt.top_logprobs > 0) all.insert(all.end(), {top_ids, top_logprobs});
    all.insert(all.end(), k_cache.begin(), k_cache.end());
    all.insert(all.end(), v_cache.begin(), v_cache.end());
    return all;
  }

  void run_decode() {
    if (opt.compile) {
      if (!program) program.emplace(compile([this](const std::vector<Tensor>&) { decode_graph(); }));
      (*program)();
    } else {
      decode_graph();
    }
    realize(state());
  }

  // Runs prompt tokens [prefilled, prefilled + count) of slot s's request through the model
  // and copies their keys and values into the slot's cache rows. The rows attend to the
  // prompt's earlier rows, read from the cache, and causally to each other (the attention
  // kernels align a causal mask of T queries over S keys at the end: query t sees keys
  // <= t + S - T), so a prompt prefilled in chunks gives the rows a whole one would. Returns
  // true when that completes the prompt: its first token is then sampled (below).
  bool prefill(size_t s, int64_t count) {
    Slot& slot = slots[s];
    const std::vector<int32_t>& prompt = slot.req.prompt;
    const int64_t n = static_cast<int64_t>(prompt.size()), p = slot.prefilled, c = count;
    const bool completes = p + c == n;
    const Clock::time_point start = Clock::now();
    NoGradGuard no_grad;
    std::optional<Autocast> ac;
    enter_autocast(ac);
    nn::GPT& m = *model;
    std::vector<int64_t> ids64(prompt.begin() + p, prompt.begin() + p + c);
    Tensor ids = on_device(tensor(ids64, {1, c}));
    DeviceGuard on(*device);
    Tensor positions = arange(static_cast<double>(p), static_cast<double>(p + c));
    Tensor x = m.embed(ids, positions);  // [1, c, C]
    std::vector<Tensor> rows;  // each layer's k then v rows, [1, c, Hkv, D] in the cache dtype
    const int64_t si = static_cast<int64_t>(s);
    for (size_t l = 0; l < m.blocks.size(); ++l) {
      x = m.blocks[l]->forward(x, positions, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        Tensor k_rows = cast(k, cache_dtype).contiguous(), v_rows = cast(v, cache_dtype).contiguous();
        rows.push_back(k_rows);
        rows.push_back(v_rows);
        Tensor keys = k, values = v;
        if (p > 0) {  // the earlier chunks' rows, from the cache
          keys = cat({k_cache[l].slice(0, si, si + 1).slice(1, 0, p), k_rows}, 1);
          values = cat({v_cache[l].slice(0, si, si + 1).slice(1, 0, p), v_rows}, 1);
        }
        return scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), true)
            .transpose(1, 2)
            .reshape({1, c, C});
      });
    }
    std::vector<Tensor> targets = rows;
    Tensor id, lp;
    std::pair<Tensor, Tensor> top;
    std::vector<float> row_settings;
    const SamplingParams& sp = slot.req.sampling;
    if (completes) {
      Tensor logits = logits_of(x.select(1, c - 1));  // [1, V]
      row_settings = {static_cast<float>(sp.temperature), static_cast<float>(sp.top_k), static_cast<float>(sp.top_p)};
      id = sample_tokens(logits, on_device(tensor(row_settings, {1, 3})),
                         on_device(tensor(std::vector<int64_t>{static_cast<int64_t>(h_seeds[s])}, {1})),
                         on_device(tensor(std::vector<int64_t>{n}, {1})));
      Tensor lsm = log_softmax(logits, 1);
      lp = gather(lsm, 1, id.unsqueeze(1));
      targets.push_back(id);
      if (opt.logprobs) targets.push_back(lp);
      if (opt.top_logprobs > 0) {
        top = top_n(lsm);
        targets.insert(targets.end(), {top.first, top.second});
      }
    }
    realize(targets);
    const size_t row_bytes = static_cast<size_t>(Hkv * D) * dtype_size(cache_dtype);
    const size_t at = (static_cast<size_t>(s) * static_cast<size_t>(T) + static_cast<size_t>(p)) * row_bytes;
    for (size_t l = 0; l < k_cache.size(); ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const Tensor& src = rows[2 * l + static_cast<size_t>(kv)];
        const Node& dst = *(kv ? v_cache : k_cache)[l].impl()->node;
        copy_buffer(*src.impl()->node->buffer, static_cast<size_t>(src.offset()) * dtype_size(cache_dtype), *dst.buffer,
                    at, static_cast<size_t>(c) * row_bytes);
      }
    }
    slot.prefilled += c;
    stats.prefill_tokens += c;
    if (!completes) {
      stats.prefill_seconds += seconds_since(start);
      return false;
    }
    const int32_t first = static_cast<int32_t>(id.to_vector<int64_t>()[0]);
    pending_logprob = opt.logprobs ? lp.item() : 0.0;
    pending_top.clear();
    if (opt.top_logprobs > 0) pending_top = top_pairs(top.first.to_vector<int64_t>(), top.second.to_vector<float>(), 0);
    // The slot's device state: it feeds `first` at position n next.
    slots_changed = true;
    h_tokens[s] = first;
    h_positions[s] = n;
    h_active[s] = 1;
    for (int j = 0; j < 3; ++j) h_settings[3 * s + static_cast<size_t>(j)] = row_settings[static_cast<size_t>(j)];
    h_penalties[2 * s] = static_cast<float>(sp.presence_penalty);
    h_penalties[2 * s + 1] = static_cast<float>(sp.frequency_penalty);
    std::vector<float> count_row(static_cast<size_t>(V), 0.0f);
    count_row[static_cast<size_t>(first)] = 1;
    write_range(counts, static_cast<size_t>(s) * static_cast<size_t>(V) * sizeof(float), count_row.data(),
                count_row.size() * sizeof(float));
    stats.prefill_seconds += seconds_since(start);
    return true;
  }
  double pending_logprob = 0;
  std::vector<std::pair<int32_t, double>> pending_top;

  // Row r of the top-n ids and values read back from the device.
  std::vector<std::pair<int32_t, double>> top_pairs(const std::vector<int64_t>& ids, const std::vector<float>& values,
                                                    size_t r) const {
    std::vector<std::pair<int32_t, double>> out;
    const size_t n = static_cast<size_t>(opt.top_logprobs);
    for (size_t j = 0; j < n; ++j) out.emplace_back(static_cast<int32_t>(ids[r * n + j]), values[r * n + j]);
    return out;
  }

  bool slots_changed = true;  // a request started or ended since the state was last written
  void write_slot_state() {
    if (!slots_changed) return;
    slots_changed = false;
    write_host(tokens, h_tokens.data(), h_tokens.size() * sizeof(int64_t));
    write_host(positions, h_positions.data(), h_positions.size() * sizeof(int64_t));
    write_host(active, h_active.data(), h_active.size() * sizeof(int64_t));
    write_host(seeds, h_seeds.data(), h_seeds.size() * sizeof(int64_t));
    write_host(settings, h_settings.data(), h_settings.size() * sizeof(float));
    write_host(penalties, h_penalties.data(), h_penalties.size() * sizeof(float));
  }

  // Whether slot s's request ends with its latest token (stop rules decided here, on the host).
  FinishReason finished(const Slot& slot) const {
    const SamplingParams& sp = slot.req.sampling;
    const std::vector<int32_t>& g = slot.generated;
    if (sp.eos && !g.empty() && g.back() == *sp.eos) return FinishReason::Stop;
    for (const std::vector<int32_t>& stop : sp.stop)
      if (!stop.empty() && g.size() >= stop.size() && std::equal(stop.begin(), stop.end(), g.end() - static_cast<long>(stop.size())))
        return FinishReason::Stop;
    if (static_cast<int64_t>(g.size()) >= sp.max_tokens) return FinishReason::Length;
    if (static_cast<int64_t>(slot.req.prompt.size() + g.size()) >= T) return FinishReason::Length;  // the cache is full
    return FinishReason::None;
  }

  // An idle slot still runs through the step (its results unread): greedy at position 0.
  void free_slot(size_t s) {
    slots_changed = true;
    slots[s] = Slot{};
    h_active[s] = 0;
    h_positions[s] = 0;
    h_settings[3 * s] = 0, h_settings[3 * s + 1] = 0, h_settings[3 * s + 2] = 1;
    h_penalties[2 * s] = h_penalties[2 * s + 1] = 0;
  }
};

Generator::Generator(std::shared_ptr<nn::GPT> model, GeneratorOptions options, Loc loc)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  check(model != nullptr, "Generator", loc, "needs a model");
  check(options.slots >= 1, "Generator", loc, "slots must be >= 1, got ", options.slots);
  const nn::GPTConfig& cfg = model->cfg;
  if (options.max_context == 0) options.max_context = cfg.ctx;
  check(options.max_context >= 1 && options.max_context <= cfg.ctx, "Generator", loc, "max_context ",
        options.max_context, " must be in [1, ", cfg.ctx, "] (the model's positions)");
  check(options.prefill_chunk >= 0, "Generator", loc, "prefill_chunk must be >= 0 (0: whole prompts), got ",
        options.prefill_chunk);
  check(options.top_logprobs >= 0 && options.top_logprobs <= cfg.vocab && (options.top_logprobs == 0 || options.logprobs),
        "Generator", loc, "top_logprobs must be in [0, vocab] and needs logprobs, got ", options.top_logprobs);
  check(options.autocast == DType::F32 || options.autocast == DType::BF16 || options.autocast == DType::F16,
        "Generator", loc, "autocast must be f32 (none), bf16 or f16, got ", dtype_name(options.autocast));
  s.model = std::move(model);
  s.opt = options;
  s.device = &s.model->wte->weight.device();
  s.cache_dtype = options.autocast != DType::F32 ? options.autocast : s.model->wte->weight.dtype();
  s.S = options.slots;
  s.T = options.max_context;
  s.Hkv = cfg.key_value_heads();
  s.C = cfg.dim;
  s.D = cfg.head_dim();
  s.V = cfg.vocab;
  const int64_t bytes = kv_cache_bytes(*s.model, s.S, s.T, s.cache_dtype);
  check(options.memory_budget < 0 || bytes <= options.memory_budget, "Generator", loc, "the KV cache of ", s.S,
        " slots x ", s.T, " positions takes ", bytes, " bytes (", dtype_name(s.cache_dtype), "), over the budget of ",
        options.memory_budget, "; at most ", options.memory_budget / std::max<int64_t>(1, bytes / s.S),
        " slots fit");
  s.model->eval();
  for (int64_t l = 0; l < cfg.layers; ++l) {
    s.k_cache.push_back(make_buffer_tensor({s.S, s.T, s.Hkv, s.D}, s.cache_dtype, *s.device));
    s.v_cache.push_back(make_buffer_tensor({s.S, s.T, s.Hkv, s.D}, s.cache_dtype, *s.device));
  }
  s.h_tokens.assign(static_cast<size_t>(s.S), 0);
  s.h_positions.assign(static_cast<size_t>(s.S), 0);
  s.h_active.assign(static_cast<size_t>(s.S), 0);
  s.h_seeds.assign(static_cast<size_t>(s.S), 0);
  s.h_settings.assign(static_cast<size_t>(3 * s.S), 0.0f);
  s.h_penalties.assign(static_cast<size_t>(2 * s.S), 0.0f);
  s.tokens = s.on_device(tensor(s.h_tokens, {s.S}));
  s.positions = s.on_device(tensor(s.h_positions, {s.S}));
  s.active = s.on_device(tensor(s.h_active, {s.S}));
  s.seeds = s.on_device(tensor(s.h_seeds, {s.S}));
  s.settings = s.on_device(tensor(s.h_settings, {s.S, 3}));
  s.penalties = s.on_device(tensor(s.h_penalties, {s.S, 2}));
  s.counts = s.on_device(tensor(std::vector<float>(static_cast<size_t>(s.S * s.V), 0.0f), {s.S, s.V}));
  s.logprobs = s.on_device(tensor(std::vector<float>(static_cast<size_t>(s.S), 0.0f), {s.S}));
  if (options.top_logprobs > 0) {
    const size_t n = static_cast<size_t>(s.S * options.top_logprobs);
    s.top_ids = s.on_device(tensor(std::vector<int64_t>(n, 0), {s.S, options.top_logprobs}));
    s.top_logprobs = s.on_device(tensor(std::vector<float>(n, 0.0f), {s.S, options.top_logprobs}));
  }
  s.slots.resize(static_cast<size_t>(s.S));
  for (size_t i = 0; i < s.slots.size(); ++i) s.free_slot(i);
  s.write_slot_state();
}

Generator::~Generator() = default;

int64_t Generator::submit(GenerateRequest r, Loc loc) {
  State& s = *s_;
  const SamplingParams& sp = r.sampling;
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  check(n >= 1, "generate", loc, "the prompt needs at least one token");
  for (int32_t id : r.prompt)
    check(id >= 0 && id < s.V, "generate", loc, "prompt token ", id, " is outside the vocabulary [0, ", s.V, ")");
  check(sp.max_tokens >= 1, "generate", loc, "max_tokens must be >= 1, got ", sp.max_tokens);
  check(sp.temperature >= 0 && std::isfinite(sp.temperature), "generate", loc, "temperature must be >= 0, got ",
        sp.temperature);
  check(sp.top_k >= 0, "generate", loc, "top_k must be >= 0, got ", sp.top_k);
  check(sp.top_p > 0 && sp.top_p <= 1, "generate", loc, "top_p must be in (0, 1], got ", sp.top_p);
  check(std::isfinite(sp.presence_penalty) && std::isfinite(sp.frequency_penalty), "generate", loc,
        "penalties must be finite");
  check(!sp.eos || (*sp.eos >= 0 && *sp.eos < s.V), "generate", loc, "eos id ", sp.eos.value_or(0),
        " is outside the vocabulary");
  check(n < s.T && (s.opt.truncate_at_context || n + sp.max_tokens <= s.T), "generate", loc, "prompt of ", n,
        " tokens + max_tokens ", sp.max_tokens, " does not fit the context of ", s.T, " positions");
  const int64_t id = s.next_id++;
  s.queue.emplace_back(id, std::move(r));
  return id;
}

void Generator::cancel(int64_t request) {
  State& s = *s_;
  s.queue.erase(std::remove_if(s.queue.begin(), s.queue.end(), [&](const auto& q) { return q.first == request; }),
                s.queue.end());
  for (size_t i = 0; i < s.slots.size(); ++i)
    if (s.slots[i].request == request) {
      s.free_slot(i);
      s.cancelled.push_back(request);
    }
}

std::vector<TokenEvent> Generator::step() {
  State& s = *s_;
  std::vector<TokenEvent> events;
  for (int64_t r : s.cancelled) events.push_back({r, -1, 0, FinishReason::Cancelled, {}});
  s.cancelled.clear();
  // Admit: each free slot takes the next queued request. Its decode-step row is parked at the
  // cache's last position (written there, never read) until its prompt is in the cache.
  for (size_t i = 0; i < s.slots.size() && !s.queue.empty(); ++i) {
    if (s.slots[i].request >= 0) continue;
    auto [id, req] = std::move(s.queue.front());
    s.queue.pop_front();
    State::Slot& slot = s.slots[i];
    slot.request = id;
    slot.req = std::move(req);
    slot.prefilled = 0;
    const std::optional<uint64_t> seed = slot.req.sampling.seed;
    s.h_seeds[i] = static_cast<int64_t>(seed ? *seed : random_seed() ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(id + 1)));
    s.h_positions[i] = s.T - 1;
    s.slots_changed = true;
  }
  // Prefill: up to prefill_chunk prompt tokens this step, oldest request first, so the slots
  // already decoding get their next token every step while a long prompt goes in by chunks.
  std::vector<size_t> prefilling;
  for (size_t i = 0; i < s.slots.size(); ++i)
    if (s.slots[i].request >= 0 && s.slots[i].prefilled < static_cast<int64_t>(s.slots[i].req.prompt.size()))
      prefilling.push_back(i);
  std::sort(prefilling.begin(), prefilling.end(),
            [&](size_t a, size_t b) { return s.slots[a].request < s.slots[b].request; });
  int64_t budget = s.opt.prefill_chunk > 0 ? s.opt.prefill_chunk : std::numeric_limits<int64_t>::max();
  for (size_t i : prefilling) {
    if (budget == 0) break;
    State::Slot& slot = s.slots[i];
    const int64_t count = std::min(budget, static_cast<int64_t>(slot.req.prompt.size()) - slot.prefilled);
    budget -= count;
    if (!s.prefill(i, count)) continue;
    slot.generated.push_back(static_cast<int32_t>(s.h_tokens[i]));
    TokenEvent e{slot.request, slot.generated.back(), s.pending_logprob, s.finished(slot), s.pending_top};
    events.push_back(e);
    if (e.finished != FinishReason::None) s.free_slot(i);
  }
  s.write_slot_state();
  const bool any = std::any_of(s.slots.begin(), s.slots.end(), [](const State::Slot& x) {
    return x.request >= 0 && x.prefilled == static_cast<int64_t>(x.req.prompt.size());
  });
  if (!any) return events;
  const Clock::time_point start = Clock::now();
  s.run_decode();
  const std::vector<int64_t> ids = s.tokens.to_vector<int64_t>();
  std::vector<float> lps;
  if (s.opt.logprobs) lps = s.logprobs.to_vector<float>();
  std::vector<int64_t> top_ids;
  std::vector<float> top_lps;
  if (s.opt.top_logprobs > 0) top_ids = s.top_ids.to_vector<int64_t>(), top_lps = s.top_logprobs.to_vector<float>();
  ++s.stats.decode_steps;
  for (size_t i = 0; i < s.slots.size(); ++i) {
    State::Slot& slot = s.slots[i];
    s.h_tokens[i] = ids[i];
    if (slot.request < 0 || s.h_active[i] == 0) continue;  // free, or its prompt still going in
    ++s.h_positions[i];
    slot.generated.push_back(static_cast<int32_t>(ids[i]));
    ++s.stats.decode_tokens;
    TokenEvent e{slot.request, slot.generated.back(), lps.empty() ? 0.0 : lps[i], s.finished(slot),
                 top_ids.empty() ? std::vector<std::pair<int32_t, double>>{} : s.top_pairs(top_ids, top_lps, i)};
    events.push_back(e);
    if (e.finished != FinishReason::None) s.free_slot(i);
  }
  s.stats.decode_seconds += seconds_since(start);
  return events;
}

bool Generator::idle() const {
  return s_->queue.empty() && s_->cancelled.empty() &&
         std::none_of(s_->slots.begin(), s_->slots.end(), [](const State::Slot& x) { return x.request >= 0; });
}

std::vector<int32_t> Generator::generate(GenerateRequest request, Loc loc) {
  const int64_t id = submit(std::move(request), loc);
  std::vector<int32_t> out;
  while (!idle())
    for (const TokenEvent& e : step())
      if (e.request == id && e.token >= 0) out.push_back(e.token);
  return out;
}

int64_t Generator::slots() const { return s_->S; }
int64_t Generator::max_context() const { return s_->T; }
int64_t Generator::cache_bytes() const { return kv_cache_bytes(*s_->model, s_->S, s_->T, s_->cache_dtype); }
const GeneratorStats& Generator::stats() const { return s_->stats; }

}  // namespace alk
