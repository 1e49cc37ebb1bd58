// Config <-> config.json. One table of fields serves both directions, so a new field is
// one line here.
#include <cctype>
#include <functional>
#include <string>

#include "alk/train.h"
#include "io/json.h"
#include "train/job.h"

namespace alk::train {

namespace {

struct Field {
  const char* name;
  std::function<json::Value(const Config&)> get;
  std::function<void(Config&, const json::Value&)> set;
};

#define ALK_STR(f) {#f, [](const Config& c) { return json::Value(c.f); }, [](Config& c, const json::Value& v) { c.f = v.as_string(); }}
#define ALK_INT(f) {#f, [](const Config& c) { return json::Value(static_cast<int64_t>(c.f)); }, [](Config& c, const json::Value& v) { c.f = static_cast<decltype(c.f)>(v.as_int()); }}
#define ALK_NUM(f) {#f, [](const Config& c) { return json::Value(c.f); }, [](Config& c, const json::Value& v) { c.f = v.as_double(); }}
#define ALK_BOOL(f) {#f, [](const Config& c) { return json::Value(c.f); }, [](Config& c, const json::Value& v) { c.f = v.as_bool(); }}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      ALK_STR(task), ALK_STR(corpus), ALK_STR(data), ALK_STR(out), ALK_STR(init_from), ALK_STR(device), ALK_STR(dtype), ALK_INT(seed),
      ALK_INT(steps), ALK_INT(batch), ALK_INT(ctx), ALK_INT(dim), ALK_INT(heads), ALK_INT(layers),
      ALK_INT(vocab_size), ALK_NUM(dropout), ALK_NUM(lr), ALK_NUM(min_lr), ALK_NUM(weight_decay),
      ALK_NUM(grad_clip), ALK_INT(warmup), ALK_NUM(val_fraction), ALK_INT(eval_every), ALK_INT(eval_batches),
      ALK_INT(ckpt_every), ALK_INT(log_every), ALK_INT(sample_tokens), ALK_STR(memory_budget),
      ALK_INT(zero), ALK_INT(kv_heads), ALK_INT(mlp_hidden), ALK_STR(norm), ALK_NUM(norm_eps), ALK_STR(positions),
      ALK_NUM(rope_theta), ALK_STR(rope_scaling), ALK_NUM(rope_factor), ALK_NUM(rope_low_freq_factor),
      ALK_NUM(rope_high_freq_factor), ALK_INT(rope_original_context), ALK_STR(mlp), ALK_BOOL(bias),
      ALK_BOOL(qkv_bias), ALK_BOOL(tie_embeddings),
  };
  return f;
}

#undef ALK_STR
#undef ALK_INT
#undef ALK_NUM
#undef ALK_BOOL

}  // namespace

std::string config_to_json(const Config& c) {
  json::Object o;
  for (const Field& f : fields()) o.emplace_back(f.name, f.get(c));
  return json::dump(json::Value(std::move(o)), 2) + "\n";
}

Config config_from_json(const std::string& text, Config base, Loc loc) {
  json::Value v = json::parse(text, json::kDefaultMaxDepth, loc);
  check(v.is_object(), "config", loc, "config must be a JSON object");
  for (const auto& [key, value] : v.as_object()) {
    const Field* field = nullptr;
    for (const Field& f : fields())
      if (key == f.name) field = &f;
    check(field != nullptr, "config", loc, "unknown config key '", key, "'");
    try {
      field->set(base, value);
    } catch (const Error& e) {
      fail("config", loc, "key '", key, "': ", e.detail());
    }
  }
  check(base.task == "gpt" || base.task == "mnist", "config", loc, "task must be gpt or mnist, got '", base.task, "'");
  check(base.steps >= 0 && base.batch > 0, "config", loc, "steps must be >= 0 and batch > 0");
  check(base.dim > 0 && base.heads > 0 && base.dim % base.heads == 0, "config", loc, "dim ", base.dim,
        " must be a positive multiple of heads ", base.heads);
  check(base.ctx > 0 && base.layers >= 0 && base.vocab_size >= 256, "config", loc,
        "ctx must be > 0, layers >= 0 and vocab_size >= 256");
  check(base.dtype == "f32" || base.dtype == "bf16" || base.dtype == "f16", "config", loc,
        "dtype must be f32, bf16 or f16, got '", base.dtype, "'");
  if (!base.memory_budget.empty()) parse_bytes(base.memory_budget, loc);  // validates
  check(base.norm == "layernorm" || base.norm == "rmsnorm", "config", loc, "norm must be layernorm or rmsnorm, got '",
        base.norm, "'");
  check(base.positions == "learned" || base.positions == "rotary", "config", loc,
        "positions must be learned or rotary, got '", base.positions, "'");
  check(base.mlp == "gelu_tanh" || base.mlp == "swiglu", "config", loc, "mlp must be gelu_tanh or swiglu, got '",
        base.mlp, "'");
  check(base.rope_scaling.empty() || base.rope_scaling == "llama3", "config", loc,
        "rope_scaling must be \"\" or llama3, got '", base.rope_scaling, "'");
  check(base.kv_heads >= 0 && (base.kv_heads == 0 || base.heads % base.kv_heads == 0) && base.mlp_hidden >= 0, "config",
        loc, "kv_heads ", base.kv_heads, " must divide heads ", base.heads, " and mlp_hidden ", base.mlp_hidden,
        " be >= 0");
  check(base.zero == 0 || base.zero == 1, "config", loc, "zero must be 0 (off) or 1 (ZeRO-1), got ", base.zero);
  return base;
}

int64_t parse_bytes(const std::string& text, Loc loc) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() == 3 && unit[1] == 'I') unit.erase(1, 1);  // MiB = MB here
  const double scale = unit == "" || unit == "B" ? 1.0
                       : unit == "KB"            ? 1024.0
                       : unit == "MB"            ? 1024.0 * 1024
                       : unit == "GB"            ? 1024.0 * 1024 * 1024
                       : unit == "TB"            ? 1024.0 * 1024 * 1024 * 1024
                                                 : -1.0;
  check(end > 0 && scale > 0 && value > 0 && value * scale < 9.0e18, "config", loc, "memory budget '", text,
        "' is not a positive size like 64MB, 1.5GB or 1000000 (bytes)");
  return static_cast<int64_t>(value * scale);
}

nn::GPTConfig gpt_config(const Config& c, int64_t vocab) {
  nn::GPTConfig g;
  g.vocab = vocab;
  g.ctx = c.ctx;
  g.dim = c.dim;
  g.heads = c.heads;
  g.layers = c.layers;
  g.dropout = c.dropout;
  g.tie_embeddings = c.tie_embeddings;
  g.bias = c.bias;
  g.kv_heads = c.kv_heads;
  g.mlp_hidden = c.mlp_hidden;
  g.norm = c.norm == "rmsnorm" ? nn::NormKind::RMSNorm : nn::NormKind::LayerNorm;
  g.norm_eps = c.norm_eps;
  g.positions = c.positions == "rotary" ? nn::PositionKind::Rotary : nn::PositionKind::Learned;
  g.rope_theta = c.rope_theta;
  g.rope_scaling = {c.rope_scaling, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                    c.rope_original_context};
  g.mlp = c.mlp == "swiglu" ? nn::MLPKind::SwiGLU : nn::MLPKind::GELUTanh;
  g.qkv_bias = c.qkv_bias;
  return g;
}

}  // namespace alk::train
