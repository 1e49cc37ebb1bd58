// Autoregressive sampling from a GPT run directory: temperature, top-k, seeded draws.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "alk/io.h"
#include "alk/nn.h"
#include "alk/tokenizer.h"
#include "alk/train.h"
#include "core/philox.h"
#include "train/job.h"

namespace alk::train {

std::string sample(const std::string& dir, const std::string& prompt, int64_t tokens, double temperature,
                   int64_t top_k, uint64_t seed, Loc loc) {
  check(tokens >= 0 && temperature >= 0, "sample", loc, "tokens must be >= 0 and temperature >= 0");
  Config c = config_from_json(read_file(dir + "/config.json", "sample", loc), Config{}, loc);
  Tokenizer tok = Tokenizer::load(dir + "/tokenizer", loc);
  nn::GPTConfig g;
  g.vocab = tok.vocab_size();
  g.ctx = c.ctx;
  g.dim = c.dim;
  g.heads = c.heads;
  g.layers = c.layers;
  nn::GPT model(g);
  // The committed checkpoint (checkpoint.json), which the top-level model.safetensors can lag.
  const std::optional<CheckpointFiles> files = find_checkpoint(dir, loc);
  check(files.has_value(), "sample", loc, "no checkpoint in ", dir);
  model.load_state_dict(load_safetensors(files->model, loc).tensors, true, loc);
  model.eval();
  NoGradGuard no_grad;
  std::vector<int32_t> ids = tok.encode(prompt);
  if (ids.empty()) ids.push_back(tok.byte_id('\n'));
  const size_t prompt_len = ids.size();
  for (int64_t n = 0; n < tokens; ++n) {
    const size_t from = ids.size() > static_cast<size_t>(c.ctx) ? ids.size() - static_cast<size_t>(c.ctx) : 0;
    std::vector<int64_t> window(ids.begin() + static_cast<long>(from), ids.end());
    const int64_t t = static_cast<int64_t>(window.size());
    Tensor logits = model(tensor(window, {1, t})).select(1, t - 1).reshape({-1});
    std::vector<double> l = logits.to_vector<double>();
    int32_t next;
    if (temperature == 0) {
      next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    } else {
      std::vector<int32_t> order(l.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
      size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), order.size()) : order.size();
      std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                        [&](int32_t a, int32_t b) { return l[a] > l[b]; });
      std::vector<double> p(k);
      double total = 0;
      for (size_t i = 0; i < k; ++i) total += p[i] = std::exp((l[order[i]] - l[order[0]]) / temperature);
      double u = philox_uniform(seed, static_cast<uint64_t>(n)) * total;
      size_t pick = 0;
      while (pick + 1 < k && u >= p[pick]) u -= p[pick++];
      next = order[pick];
    }
    ids.push_back(next);
  }
  return prompt + tok.decode(std::span<const int32_t>(ids).subspan(prompt_len));
}

}  // namespace alk::train
