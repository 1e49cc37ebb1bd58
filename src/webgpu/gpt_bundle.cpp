// The exported GPT (gpt_bundle.h).
#include "webgpu/gpt_bundle.h"

#include <random>
#include <sstream>

#include "io/json.h"

namespace alk::webgpu {

GptBundleConfig GptBundleConfig::micro() {
  GptBundleConfig c;
  c.model = nn::GPTConfig{.vocab = 256, .ctx = 16, .dim = 32, .heads = 2, .layers = 1};
  c.batch = 4;
  c.lr = 1e-2;
  return c;
}

GptBundleConfig GptBundleConfig::tiny() {
  GptBundleConfig c;
  c.model = nn::GPTConfig{.vocab = 256, .ctx = 64, .dim = 128, .heads = 4, .layers = 4};
  c.batch = 8;
  c.lr = 3e-3;
  return c;
}

namespace {
// batch windows of ctx + 1 tokens at seeded positions: inputs and next-token targets.
std::pair<Tensor, Tensor> windows(const std::vector<int32_t>& tokens, int64_t batch, int64_t ctx, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> xs, ys;
  const uint64_t span = tokens.size() - static_cast<uint64_t>(ctx) - 1;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t at = static_cast<size_t>(rng() % span);
    for (int64_t t = 0; t < ctx; ++t) {
      xs.push_back(tokens[at + static_cast<size_t>(t)]);
      ys.push_back(tokens[at + static_cast<size_t>(t) + 1]);
    }
  }
  return {tensor(xs, {batch, ctx}), tensor(ys, {batch, ctx})};
}
}  // namespace

GptBundle::GptBundle(GptBundleConfig c, Loc loc) : config(std::move(c)) {
  const nn::GPTConfig& m = config.model;
  const int64_t vocab = config.tokenizer ? config.tokenizer->vocab_size() : 256;
  check(m.vocab == vocab, "export", loc, "webgpu: the GPT's vocab (", m.vocab, ") must be the tokenizer's (", vocab,
        config.tokenizer ? ", BPE)" : ", bytes)");
  if (config.tokenizer) {
    tokens = config.tokenizer->encode(config.text);
  } else {
    tokens.assign(config.text.begin(), config.text.end());
    for (int32_t& t : tokens) t &= 0xff;  // char may be signed
  }
  check(static_cast<int64_t>(tokens.size()) > 2 * (m.ctx + 1), "export", loc, "webgpu: the text has ",
        tokens.size(), " tokens; it needs more than ", 2 * (m.ctx + 1), " (two windows of ctx + 1)");
  manual_seed(config.seed);
  model = std::make_unique<nn::GPT>(m);
  opt = std::make_unique<optim::AdamW>(model->named_parameters(), config.lr, optim::AdamOptions{.weight_decay = 0.01});
  check(config.compute == DType::F32 || config.compute == DType::F16 || config.compute == DType::BF16, "export", loc,
        "webgpu: compute dtype ", dtype_name(config.compute), " is not f32, f16 or bf16");
  step = std::make_unique<Program>(compile([this](const std::vector<Tensor>& in) {
    PortableOps portable;  // only kernels the WGSL side has
    std::optional<Autocast> mixed;
    if (config.compute != DType::F32) mixed.emplace(config.compute);
    Tensor loss = nn::cross_entropy((*model)(in[0]), in[1]);
    capture("loss", loss);
    loss.backward();
    opt->step();
    opt->zero_grad();
  }));
  std::tie(x, y) = windows(tokens, config.batch, m.ctx, config.seed);
  (*step)({x, y});  // eager: creates the optimizer state
  (*step)({x, y});  // traced
  forward = std::make_unique<Program>(compile([this](const std::vector<Tensor>& in) {
    PortableOps portable;
    NoGradGuard no_grad;
    std::optional<Autocast> mixed;
    if (config.compute != DType::F32) mixed.emplace(config.compute);
    capture("logits", (*model)(in[0]));
  }));
  ids = x.slice(0, 0, 1).contiguous();
  ids.realize();
  // Traced in eval mode: the sampling pass has no dropout (and draws no random numbers, so
  // the step's generator offsets stay consecutive, as the runtime assumes).
  model->eval();
  (*forward)({ids});
  (*forward)({ids});
  model->train();
}

double GptBundle::cpu_step() {
  (*step)({x, y});
  return step->captured("loss").item();
}

ExportSummary GptBundle::write(const std::string& dir, Loc loc) {
  ExportOptions o;
  o.programs = {{"step", step.get()}, {"forward", forward.get()}};
  o.names = model->named_parameters();
  for (auto& [name, t] : opt->state_dict()) o.names.emplace_back("optim." + name, t);
  o.lr = opt->lr_tensor();
  const nn::GPTConfig& m = config.model;
  json::Object meta{{"model", "gpt"},
                    {"vocab", m.vocab},
                    {"ctx", m.ctx},
                    {"dim", m.dim},
                    {"heads", m.heads},
                    {"layers", m.layers},
                    {"batch", config.batch},
                    {"lr", config.lr},
                    {"parameters", model->num_parameters()},
                    {"compute", std::string(dtype_name(config.compute))},
                    {"text", "text.txt"},
                    {"tokenizer", "tokenizer.json"}};
  o.meta_json = json::dump(meta, -1, loc);
  // tokenizer.json says which tokenizer the runtime builds (Tokenizer in alk_webgpu.mjs).
  json::Object tokenizer{{"type", "bytes"},
                         {"vocab_size", 256},
                         {"note", "token id = the byte (UTF-8 text encodes to ids 0..255 and decodes back)"}};
  if (config.tokenizer)
    tokenizer = json::Object{{"type", "bpe"},
                             {"vocab_size", config.tokenizer->vocab_size()},
                             {"vocab", "tokenizer/vocab.json"},
                             {"merges", "tokenizer/merges.txt"},
                             {"special_tokens", "tokenizer/special_tokens.json"},
                             {"note", "alk's byte-level BPE (include/alk/tokenizer.h), as alk train writes it"}};
  o.files = {{"text.txt", config.text}, {"tokenizer.json", json::dump(tokenizer, 1, loc) + "\n"}};
  const ExportSummary s = export_bundle(dir, o, loc);
  if (config.tokenizer) config.tokenizer->save(dir + "/tokenizer", loc);
  return s;
}

}  // namespace alk::webgpu
