// config.json <-> GPTConfig, and generation_config.json (alk/pretrained.h). Every field of
// a config is one alk maps, one it checks has the value alk runs, or one that changes
// nothing alk computes (dropouts, initializer ranges, generation settings); any other is an
// error naming it, so a model alk would run differently from transformers is refused.
#include <algorithm>
#include <cmath>
#include <set>

#include "alk/pretrained.h"
#include "io/json.h"

namespace alk {

namespace {

// Fields every PretrainedConfig may carry that change nothing alk computes.
const std::set<std::string, std::less<>> kIgnoredCommon = {
    "_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "model_type", "use_cache",
    "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "id2label", "label2id", "problem_type", "finetuning_task", "prefix", "return_dict", "output_hidden_states",
    "output_attentions", "output_scores", "return_dict_in_generate", "torchscript", "tf_legacy_loss",
    "use_bfloat16", "pruned_heads", "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder",
    "tie_encoder_decoder", "cross_attention_hidden_size", "task_specific_params", "tokenizer_class",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "output_past", "attention_dropout", "pretraining_tp"};

const std::set<std::string, std::less<>> kIgnoredGpt2 = {
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "n_ctx", "reorder_and_upcast_attn"};

struct Fields {
  const json::Value& root;
  const std::string& source;
  Loc loc;
  std::set<std::string, std::less<>> used;

  template <class... A>
  [[noreturn]] void bad(std::string_view field, const A&... parts) const {
    fail("pretrained", loc, source, ": \"", field, "\": ", parts...);
  }
  const json::Value* get(std::string_view key) {
    used.emplace(key);
    const json::Value* v = root.find(key);
    return v && !v->is_null() ? v : nullptr;
  }
  int64_t positive(std::string_view key) {
    const json::Value* v = get(key);
    if (!v) bad(key, "is required");
    if (!v->is_int() || v->as_int() <= 0) bad(key, "must be a positive integer");
    return v->as_int();
  }
  std::optional<int64_t> optional_int(std::string_view key) {
    const json::Value* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_int() || v->as_int() < 0) bad(key, "must be a non-negative integer");
    return v->as_int();
  }
  double number(std::string_view key, double fallback) {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->as_double())) bad(key, "must be a number");
    return v->as_double();
  }
  bool flag(std::string_view key, bool fallback) {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (!v->is_bool()) bad(key, "must be true or false");
    return v->as_bool();
  }
  std::string string(std::string_view key, std::string fallback) {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) bad(key, "must be a string");
    return v->as_string();
  }
  void require(std::string_view key, bool value, bool fallback, std::string_view why) {
    if (flag(key, fallback) != value) bad(key, why);
  }
};

std::vector<int32_t> token_ids(Fields& f, std::string_view key) {
  const json::Value* v = f.get(key);
  std::vector<int32_t> out;
  if (!v) return out;
  auto one = [&](const json::Value& x) {
    if (!x.is_int() || x.as_int() < 0 || x.as_int() > INT32_MAX) f.bad(key, "must be a token id or a list of them");
    out.push_back(static_cast<int32_t>(x.as_int()));
  };
  if (v->is_array())
    for (const json::Value& x : v->as_array()) one(x);
  else
    one(*v);
  return out;
}

void read_rope_scaling(Fields& f, const json::Value& v, std::string_view key, nn::GPTConfig& g) {
  if (!v.is_object()) f.bad(key, "must be an object or null");
  std::string type;
  for (auto& [k, x] : v.as_object()) {
    if (k == "rope_type" || k == "type") {
      if (!x.is_string()) f.bad(key, k, " must be a string");
      type = x.as_string();
    }
  }
  if (type == "default" || type.empty()) return;
  if (type != "llama3")
    f.bad(key, "rope type '", type, "' is not supported (alk runs the default rotary and llama3's scaling)");
  g.rope_scaling.type = "llama3";
  bool has_original = false;
  for (const auto& member : v.as_object()) {
    const std::string& k = member.first;
    const json::Value& x = member.second;  // a named reference: lambdas cannot capture bindings (clang 14)
    auto num = [&] {
      if (!x.is_number()) f.bad(key, k, " must be a number");
      return x.as_double();
    };
    if (k == "rope_type" || k == "type") continue;
    if (k == "factor") g.rope_scaling.factor = num();
    else if (k == "low_freq_factor") g.rope_scaling.low_freq_factor = num();
    else if (k == "high_freq_factor") g.rope_scaling.high_freq_factor = num();
    else if (k == "original_max_position_embeddings") {
      if (!x.is_int() || x.as_int() <= 0) f.bad(key, k, " must be a positive integer");
      g.rope_scaling.original_context = x.as_int();
      has_original = true;
    } else if (k == "rope_theta") {
      g.rope_theta = num();
    } else {
      f.bad(key, "unknown field '", k, "' of llama3 rope scaling");
    }
  }
  if (!has_original) f.bad(key, "llama3 rope scaling needs original_max_position_embeddings");
  if (!(g.rope_scaling.factor > 0 && g.rope_scaling.high_freq_factor > g.rope_scaling.low_freq_factor))
    f.bad(key, "llama3 rope scaling needs factor > 0 and high_freq_factor > low_freq_factor");
}

nn::GPTConfig read_gpt2(Fields& f) {
  nn::GPTConfig g;
  g.vocab = f.positive("vocab_size");
  g.ctx = f.positive("n_positions");
  g.dim = f.positive("n_embd");
  g.layers = f.positive("n_layer");
  g.heads = f.positive("n_head");
  if (g.dim % g.heads) f.bad("n_head", g.heads, " does not divide n_embd ", g.dim);
  g.kv_heads = g.heads;
  const std::optional<int64_t> inner = f.optional_int("n_inner");
  g.mlp_hidden = inner && *inner > 0 ? *inner : 4 * g.dim;
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.bad("activation_function", "'", act, "' is not supported (alk runs gelu_new, the tanh approximation)");
  g.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  f.require("scale_attn_weights", true, true, "must be true (alk scales attention by 1/sqrt(head_dim))");
  f.require("scale_attn_by_inverse_layer_idx", false, false, "must be false");
  f.require("add_cross_attention", false, false, "must be false (a decoder-only model)");
  g.tie_embeddings = f.flag("tie_word_embeddings", true);
  g.bias = true;
  return g;
}

nn::GPTConfig read_llama(Fields& f, const std::string& model_type) {
  nn::GPTConfig g;
  g.vocab = f.positive("vocab_size");
  g.ctx = f.positive("max_position_embeddings");
  g.dim = f.positive("hidden_size");
  g.layers = f.positive("num_hidden_layers");
  g.heads = f.positive("num_attention_heads");
  g.mlp_hidden = f.positive("intermediate_size");
  if (g.dim % g.heads) f.bad("num_attention_heads", g.heads, " does not divide hidden_size ", g.dim);
  g.kv_heads = f.optional_int("num_key_value_heads").value_or(g.heads);
  if (g.kv_heads <= 0 || g.heads % g.kv_heads) f.bad("num_key_value_heads", g.kv_heads, " does not divide ", g.heads, " heads");
  if (auto hd = f.optional_int("head_dim"); hd && *hd != g.dim / g.heads)
    f.bad("head_dim", *hd, " differs from hidden_size / num_attention_heads = ", g.dim / g.heads,
          " (alk's attention uses the latter)");
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") f.bad("hidden_act", "'", act, "' is not supported (alk's SwiGLU uses silu)");
  g.norm = nn::NormKind::RMSNorm;
  g.norm_eps = f.number("rms_norm_eps", 1e-6);
  g.positions = nn::PositionKind::Rotary;
  g.rope_theta = f.number("rope_theta", 10000);
  g.mlp = nn::MLPKind::SwiGLU;
  g.bias = false;
  g.qkv_bias = model_type == "qwen2";
  g.tie_embeddings = f.flag("tie_word_embeddings", false);
  if (const json::Value* s = f.get("rope_scaling")) read_rope_scaling(f, *s, "rope_scaling", g);
  if (const json::Value* s = f.get("rope_parameters")) read_rope_scaling(f, *s, "rope_parameters", g);
  if (model_type == "llama") {
    f.require("attention_bias", false, false, "attention biases are not supported (o_proj has no bias in alk)");
    f.require("mlp_bias", false, false, "MLP biases are not supported");
  }
  if (model_type == "qwen2") {
    f.require("use_sliding_window", false, false, "a sliding window is not supported");
    f.get("sliding_window");     // read only with use_sliding_window
    f.get("max_window_layers");  // likewise
    if (const json::Value* types = f.get("layer_types")) {
      if (!types->is_array()) f.bad("layer_types", "must be a list");
      for (const json::Value& t : types->as_array())
        if (!t.is_string() || t.as_string() != "full_attention")
          f.bad("layer_types", "only full_attention layers are supported");
    }
  }
  if (model_type == "mistral") {
    if (auto w = f.optional_int("sliding_window"); w && *w < g.ctx)
      f.bad("sliding_window", *w, " is shorter than max_position_embeddings ", g.ctx,
            ": sliding-window attention is not supported");
  }
  return g;
}

}  // namespace

nn::GPTConfig gpt_config_from_hf(std::string_view config_json, const std::string& source, HfModelInfo* info, Loc loc) {
  json::Value root;
  try {
    root = json::parse(config_json, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    fail("pretrained", loc, source, ": ", e.detail());
  }
  check(root.is_object(), "pretrained", loc, source, ": must be a JSON object");
  Fields f{root, source, loc, {}};
  HfModelInfo local;
  HfModelInfo& out = info ? *info : local;
  out.model_type = f.string("model_type", "");
  if (out.model_type.empty()) f.bad("model_type", "is required");
  if (const json::Value* a = f.get("architectures")) {
    if (!a->is_array() || a->as_array().size() != 1 || !a->as_array()[0].is_string())
      f.bad("architectures", "must be a list of one name");
    out.architecture = a->as_array()[0].as_string();
  }
  static const std::pair<std::string_view, std::string_view> kArchitectures[] = {
      {"gpt2", "GPT2LMHeadModel"}, {"llama", "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"mistral", "MistralForCausalLM"}};
  auto arch = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                           [&](const auto& a) { return a.first == out.model_type; });
  if (arch == std::end(kArchitectures))
    f.bad("model_type", "'", out.model_type, "' is not supported (alk loads gpt2, llama, qwen2, mistral)");
  if (out.architecture.empty()) out.architecture = arch->second;
  if (out.architecture != arch->second)
    f.bad("architectures", "'", out.architecture, "' is not a causal LM alk loads (for ", out.model_type, ": ",
          arch->second, ")");
  out.torch_dtype = f.string("torch_dtype", f.string("dtype", ""));
  const std::vector<int32_t> bos = token_ids(f, "bos_token_id"), pad = token_ids(f, "pad_token_id");
  if (!bos.empty()) out.bos_id = bos[0];
  if (!pad.empty()) out.pad_id = pad[0];
  out.eos_ids = token_ids(f, "eos_token_id");

  nn::GPTConfig g = out.model_type == "gpt2" ? read_gpt2(f) : read_llama(f, out.model_type);
  for (auto& [key, value] : root.as_object()) {
    if (f.used.count(key) || kIgnoredCommon.count(key)) continue;
    if (out.model_type == "gpt2" && kIgnoredGpt2.count(key)) continue;
    f.bad(key, "unknown or unsupported field for model_type ", out.model_type);
  }
  return g;
}

std::string gpt_config_to_hf(const nn::GPTConfig& g, const HfModelInfo& info, Loc loc) {
  json::Object o;
  const std::string type = info.model_type.empty() ? "gpt2" : info.model_type;
  auto put = [&](std::string key, json::Value v) { o.emplace_back(std::move(key), std::move(v)); };
  const int64_t kv = g.kv_heads > 0 ? g.kv_heads : g.heads;
  const int64_t hidden = g.mlp_hidden > 0 ? g.mlp_hidden : 4 * g.dim;
  if (type == "gpt2") {
    check(g.norm == nn::NormKind::LayerNorm && g.positions == nn::PositionKind::Learned &&
              g.mlp == nn::MLPKind::GELUTanh && g.bias && kv == g.heads,
          "pretrained", loc, "this model is not a GPT-2 (LayerNorm, learned positions, gelu MLP, biases, one kv head per head)");
    put("architectures", json::Array{json::Value("GPT2LMHeadModel")});
    put("model_type", "gpt2");
    put("vocab_size", g.vocab);
    put("n_positions", g.ctx);
    put("n_embd", g.dim);
    put("n_layer", g.layers);
    put("n_head", g.heads);
    put("n_inner", hidden);
    put("activation_function", "gelu_new");
    put("layer_norm_epsilon", g.norm_eps);
    put("resid_pdrop", g.dropout);
    put("embd_pdrop", g.dropout);
    put("attn_pdrop", g.dropout);
    put("scale_attn_weights", true);
  } else {
    check(type == "llama" || type == "qwen2" || type == "mistral", "pretrained", loc, "model_type '", type,
          "' cannot be written (gpt2, llama, qwen2, mistral)");
    check(g.norm == nn::NormKind::RMSNorm && g.positions == nn::PositionKind::Rotary && g.mlp == nn::MLPKind::SwiGLU &&
              !g.bias && g.qkv_bias == (type == "qwen2"),
          "pretrained", loc, "this model does not have the ", type, " layout");
    put("architectures", json::Array{json::Value(type == "llama"   ? "LlamaForCausalLM"
                                                 : type == "qwen2" ? "Qwen2ForCausalLM"
                                                                   : "MistralForCausalLM")});
    put("model_type", type);
    put("vocab_size", g.vocab);
    put("hidden_size", g.dim);
    put("intermediate_size", hidden);
    put("num_hidden_layers", g.layers);
    put("num_attention_heads", g.heads);
    put("num_key_value_heads", kv);
    put("hidden_act", "silu");
    put("max_position_embeddings", g.ctx);
    put("rms_norm_eps", g.norm_eps);
    put("rope_theta", g.rope_theta);
    if (g.rope_scaling.type == "llama3") {
      json::Object s;
      s.emplace_back("rope_type", "llama3");
      s.emplace_back("factor", g.rope_scaling.factor);
      s.emplace_back("low_freq_factor", g.rope_scaling.low_freq_factor);
      s.emplace_back("high_freq_factor", g.rope_scaling.high_freq_factor);
      s.emplace_back("original_max_position_embeddings", g.rope_scaling.original_context);
      put("rope_scaling", json::Value(std::move(s)));
    } else {
      put("rope_scaling", nullptr);
    }
    if (type == "llama") {
      put("attention_bias", false);
      put("mlp_bias", false);
    }
    if (type == "qwen2") put("use_sliding_window", false);
    if (type == "mistral") put("sliding_window", nullptr);
  }
  put("tie_word_embeddings", g.tie_embeddings);
  if (info.bos_id) put("bos_token_id", static_cast<int64_t>(*info.bos_id));
  if (info.eos_ids.size() == 1) put("eos_token_id", static_cast<int64_t>(info.eos_ids[0]));
  if (info.eos_ids.size() > 1) {
    json::Array a;
    for (int32_t id : info.eos_ids) a.emplace_back(static_cast<int64_t>(id));
    put("eos_token_id", json::Value(std::move(a)));
  }
  if (info.pad_id) put("pad_token_id", static_cast<int64_t>(*info.pad_id));
  put("torch_dtype", info.torch_dtype.empty() ? "float32" : info.torch_dtype);
  return json::dump(json::Value(std::move(o)), 2, loc) + "\n";
}

GenerationDefaults generation_defaults_from_hf(std::string_view text, const HfModelInfo& info,
                                               const std::string& source, Loc loc) {
  GenerationDefaults d;
  d.eos_ids = info.eos_ids;
  d.bos_id = info.bos_id;
  d.pad_id = info.pad_id;
  if (text.empty()) return d;
  json::Value root;
  try {
    root = json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    fail("pretrained", loc, source, ": ", e.detail());
  }
  check(root.is_object(), "pretrained", loc, source, ": must be a JSON object");
  Fields f{root, source, loc, {}};
  if (root.find("eos_token_id")) d.eos_ids = token_ids(f, "eos_token_id");
  if (std::vector<int32_t> b = token_ids(f, "bos_token_id"); !b.empty()) d.bos_id = b[0];
  if (std::vector<int32_t> p = token_ids(f, "pad_token_id"); !p.empty()) d.pad_id = p[0];
  d.do_sample = f.flag("do_sample", false);
  d.temperature = f.number("temperature", 1.0);
  d.top_p = f.number("top_p", 1.0);
  d.top_k = f.optional_int("top_k").value_or(50);
  d.max_new_tokens = f.optional_int("max_new_tokens").value_or(0);
  d.repetition_penalty = f.number("repetition_penalty", 1.0);
  if (d.temperature < 0 || d.top_p <= 0 || d.top_p > 1) f.bad("temperature", "or top_p is out of range");
  // Other fields (max_length, transformers_version, ...) steer generation modes alk has no
  // counterpart for; they are read as transformers' defaults, not refused.
  return d;
}

}  // namespace alk
