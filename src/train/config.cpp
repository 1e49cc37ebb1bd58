// Config <-> config.json. One table of fields serves both directions, so a new field is
// one line here.
#include <cctype>
#include <functional>
#include <string>

#include "alk/train.h"
#include "io/json.h"

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

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      ALK_STR(task), ALK_STR(corpus), ALK_STR(data), ALK_STR(out), ALK_STR(init_from), ALK_STR(device), ALK_STR(dtype), ALK_INT(seed),
      ALK_INT(steps), ALK_INT(batch), ALK_INT(ctx), ALK_INT(dim), ALK_INT(heads), ALK_INT(layers),
      ALK_INT(vocab_size), ALK_NUM(dropout), ALK_NUM(lr), ALK_NUM(min_lr), ALK_NUM(weight_decay),
      ALK_NUM(grad_clip), ALK_INT(warmup), ALK_NUM(val_fraction), ALK_INT(eval_every), ALK_INT(eval_batches),
      ALK_INT(ckpt_every), ALK_INT(log_every), ALK_INT(sample_tokens), ALK_STR(memory_budget),
      ALK_INT(zero),
  };
  return f;
}

#undef ALK_STR
#undef ALK_INT
#undef ALK_NUM

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

}  // namespace alk::train
