// `alk sample`: text from a GPT run directory, on the KV-cache engine (alk::Generator) when
// the prompt and the new tokens fit the model's context; past it, by sliding a window of the
// last ctx tokens and recomputing it for every token (learned absolute positions cannot be
// shifted inside a cache).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "alk/generate.h"
#include "alk/io.h"
#include "core/philox.h"
#include "train/job.h"
#include "train/run_model.h"

namespace alk::train {

RunModel load_run_model(const std::string& dir, const std::string& device, Loc loc) {
  RunModel r;
  r.config = config_from_json(read_file(dir + "/config.json", "sample", loc), Config{}, loc);
  nn::GPTConfig g;
  if (std::filesystem::exists(hf_files_dir(dir) + "/config.json")) {
    // Fine-tuned from a Hugging Face model: its architecture and tokenizer, alk's checkpoint.
    r.hf_dir = hf_files_dir(dir);
    const std::string path = r.hf_dir + "/config.json";
    HfModelInfo info;
    g = gpt_config_from_hf(read_file(path, "sample", loc), path, &info, loc);
    r.hf = info;
    r.tokenizer = load_hf_tokenizer(r.hf_dir, nullptr, loc);
  } else {
    r.tokenizer = Tokenizer::load(dir + "/tokenizer", loc);
    g = gpt_config(r.config, r.tokenizer.vocab_size());
  }
  r.model = std::make_shared<nn::GPT>(g);
  // The committed checkpoint (checkpoint.json), which the top-level model.safetensors can lag.
  const std::optional<CheckpointFiles> files = find_checkpoint(dir, loc);
  check(files.has_value(), "sample", loc, "no checkpoint in ", dir);
  r.model->load_state_dict(load_safetensors(files->model, loc).tensors, true, loc);
  if (!device.empty()) r.model->to(device, loc);
  r.model->eval();
  return r;
}

namespace {

// The window of the last ctx tokens through the whole model for every token.
std::vector<int32_t> sample_by_recompute(nn::GPT& model, std::vector<int32_t> ids, int64_t tokens, int64_t ctx,
                                         double temperature, int64_t top_k, uint64_t seed) {
  NoGradGuard no_grad;
  const size_t prompt_len = ids.size();
  for (int64_t n = 0; n < tokens; ++n) {
    const size_t from = ids.size() > static_cast<size_t>(ctx) ? ids.size() - static_cast<size_t>(ctx) : 0;
    std::vector<int64_t> window(ids.begin() + static_cast<long>(from), ids.end());
    const int64_t t = static_cast<int64_t>(window.size());
    Tensor logits = model(tensor(window, {1, t})).select(1, t - 1).reshape({1, -1});
    const std::vector<float> settings = {static_cast<float>(temperature), static_cast<float>(top_k), 1.0f};
    // The engine's sampling rule, with the token's position as the counter.
    Tensor id = sample_tokens(cast(logits, DType::F32), tensor(settings, {1, 3}).to(logits.device()),
                              tensor(std::vector<int64_t>{static_cast<int64_t>(seed)}, {1}).to(logits.device()),
                              tensor(std::vector<int64_t>{static_cast<int64_t>(ids.size())}, {1}).to(logits.device()));
    ids.push_back(static_cast<int32_t>(id.to_vector<int64_t>()[0]));
  }
  return std::vector<int32_t>(ids.begin() + static_cast<long>(prompt_len), ids.end());
}

}  // namespace

std::string sample(const std::string& dir, const std::string& prompt, int64_t tokens, double temperature,
                   int64_t top_k, uint64_t seed, Loc loc) {
  check(tokens >= 0 && temperature >= 0, "sample", loc, "tokens must be >= 0 and temperature >= 0");
  check(top_k >= 0, "sample", loc, "top_k must be >= 0, got ", top_k);
  RunModel r = load_run_model(dir, "", loc);
  std::vector<int32_t> ids = r.tokenizer.encode(prompt, true);
  if (ids.empty()) ids.push_back(r.tokenizer.byte_id('\n'));
  if (tokens == 0) return prompt;
  std::vector<int32_t> out;
  if (static_cast<int64_t>(ids.size()) + tokens <= r.model->cfg.ctx) {
    Generator gen(r.model, {.slots = 1}, loc);
    GenerateRequest req;
    req.prompt = ids;
    req.sampling.temperature = temperature;
    req.sampling.top_k = top_k;
    req.sampling.seed = seed;
    req.sampling.max_tokens = tokens;
    out = gen.generate(req, loc);
  } else {
    out = sample_by_recompute(*r.model, ids, tokens, r.model->cfg.ctx, temperature, top_k, seed);
  }
  return prompt + r.tokenizer.decode(out);
}

}  // namespace alk::train
