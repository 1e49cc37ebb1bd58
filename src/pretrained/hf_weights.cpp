// Hugging Face weight names and layouts <-> alk's GPT parameters (alk/pretrained.h).
#include <map>
#include <set>

#include "alk/io.h"
#include "alk/pretrained.h"

namespace alk {

namespace {

bool is_gpt2(const HfModelInfo& info) { return info.model_type == "gpt2"; }

// Keys transformers saves that hold nothing alk loads: GPT-2's causal-mask buffers and the
// rotary inverse frequencies older LLaMA checkpoints kept.
bool skipped_key(const std::string& key) {
  auto ends = [&](std::string_view s) { return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0; };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq");
}

// Norm weights and biases are vectors; every other weight a matrix.
size_t expected_rank(const std::string& alk_name) {
  const bool norm = alk_name.starts_with("ln_f.") || alk_name.find(".ln1.") != std::string::npos ||
                    alk_name.find(".ln2.") != std::string::npos;
  return norm || alk_name.ends_with(".bias") ? 1 : 2;
}

}  // namespace

std::vector<HfWeight> hf_weight_map(const nn::GPTConfig& g, const HfModelInfo& info, const std::string& prefix) {
  std::vector<HfWeight> m;
  const int64_t hd = g.dim / g.heads, kv = g.kv_heads > 0 ? g.kv_heads : g.heads;
  const int64_t hidden = g.mlp_hidden > 0 ? g.mlp_hidden : 4 * g.dim;
  auto one = [&](std::string name, std::string key, int64_t rows, bool transposed = false) {
    m.push_back({std::move(name), {{prefix + key, rows}}, transposed});
  };
  if (is_gpt2(info)) {
    one("wte.weight", "wte.weight", g.vocab);
    one("wpe.weight", "wpe.weight", g.ctx);
    for (int64_t i = 0; i < g.layers; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".", h = "h." + std::to_string(i) + ".";
      one(b + "ln1.weight", h + "ln_1.weight", g.dim);
      one(b + "ln1.bias", h + "ln_1.bias", g.dim);
      one(b + "attn.qkv.weight", h + "attn.c_attn.weight", 3 * g.dim, true);
      one(b + "attn.qkv.bias", h + "attn.c_attn.bias", 3 * g.dim);
      one(b + "attn.proj.weight", h + "attn.c_proj.weight", g.dim, true);
      one(b + "attn.proj.bias", h + "attn.c_proj.bias", g.dim);
      one(b + "ln2.weight", h + "ln_2.weight", g.dim);
      one(b + "ln2.bias", h + "ln_2.bias", g.dim);
      one(b + "mlp.fc.weight", h + "mlp.c_fc.weight", hidden, true);
      one(b + "mlp.fc.bias", h + "mlp.c_fc.bias", hidden);
      one(b + "mlp.proj.weight", h + "mlp.c_proj.weight", g.dim, true);
      one(b + "mlp.proj.bias", h + "mlp.c_proj.bias", g.dim);
    }
    one("ln_f.weight", "ln_f.weight", g.dim);
    one("ln_f.bias", "ln_f.bias", g.dim);
  } else {
    one("wte.weight", "embed_tokens.weight", g.vocab);
    for (int64_t i = 0; i < g.layers; ++i) {
      const std::string b = "blocks." + std::to_string(i) + ".", l = prefix + "layers." + std::to_string(i) + ".";
      m.push_back({b + "ln1.weight", {{l + "input_layernorm.weight", g.dim}}, false});
      m.push_back({b + "attn.qkv.weight",
                   {{l + "self_attn.q_proj.weight", g.heads * hd},
                    {l + "self_attn.k_proj.weight", kv * hd},
                    {l + "self_attn.v_proj.weight", kv * hd}},
                   false});
      if (g.qkv_bias)
        m.push_back({b + "attn.qkv.bias",
                     {{l + "self_attn.q_proj.bias", g.heads * hd},
                      {l + "self_attn.k_proj.bias", kv * hd},
                      {l + "self_attn.v_proj.bias", kv * hd}},
                     false});
      m.push_back({b + "attn.proj.weight", {{l + "self_attn.o_proj.weight", g.dim}}, false});
      m.push_back({b + "ln2.weight", {{l + "post_attention_layernorm.weight", g.dim}}, false});
      m.push_back({b + "mlp.fc.weight", {{l + "mlp.gate_proj.weight", hidden}, {l + "mlp.up_proj.weight", hidden}}, false});
      m.push_back({b + "mlp.proj.weight", {{l + "mlp.down_proj.weight", g.dim}}, false});
    }
    one("ln_f.weight", "norm.weight", g.dim);
  }
  // The head sits outside the base model's prefix in both families.
  if (!g.tie_embeddings) m.push_back({"head.weight", {{"lm_head.weight", g.vocab}}, false});
  return m;
}

std::string hf_key_prefix(const HfModelInfo& info, const SafetensorsCheckpoint& ckpt) {
  if (!is_gpt2(info)) return "model.";
  // GPT2LMHeadModel saves its base model under "transformer."; a bare GPT2Model (the
  // original gpt2 upload) without it.
  return !ckpt.find("transformer.wte.weight") && ckpt.find("wte.weight") ? "" : "transformer.";
}

Tensor read_hf_weight(const SafetensorsCheckpoint& ckpt, const HfWeight& w, Device& device, Loc loc) {
  std::vector<Tensor> pieces;
  int64_t cols = -1;
  for (auto& [key, rows] : w.hf) {
    const SafetensorsEntry* e = ckpt.find(key);
    check(e != nullptr, "pretrained", loc, "the weights lack '", key, "' (for alk's ", w.name, ")");
    check(e->shape.size() == expected_rank(w.name) && e->shape[w.transposed ? 1 : 0] == rows,
          "pretrained", loc, "'", key, "' has shape ", to_string(e->shape), "; config.json gives it ", rows,
          w.transposed ? " columns" : " rows");
    if (e->shape.size() == 2) {
      const int64_t c = e->shape[w.transposed ? 0 : 1];
      check(cols < 0 || c == cols, "pretrained", loc, "'", key, "' has shape ", to_string(e->shape),
            ", unlike the other parts of ", w.name);
      cols = c;
    }
    Tensor t = ckpt.read(key, device, loc);
    pieces.push_back(w.transposed ? t.t() : t);
  }
  return pieces.size() == 1 ? pieces[0] : cat(pieces, 0, loc);
}

void load_hf_weights(nn::GPT& model, const HfModelInfo& info, const std::string& dir, Loc loc) {
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir, loc);
  const std::vector<HfWeight> map = hf_weight_map(model.cfg, info, hf_key_prefix(info, ckpt));
  std::map<std::string, Tensor> params;
  for (auto& [name, t] : model.named_parameters()) params.emplace(name, t);
  std::set<std::string> used;
  NoGradGuard no_grad;
  for (const HfWeight& w : map) {
    auto p = params.find(w.name);
    check(p != params.end(), "pretrained", loc, "the model has no parameter '", w.name, "' for ", w.hf[0].first);
    Tensor& param = p->second;
    Tensor value;
    try {
      value = read_hf_weight(ckpt, w, param.device(), loc);
    } catch (const Error& e) {
      fail("pretrained", loc, dir, ": ", e.detail());
    }
    check(value.shape() == param.shape(), "pretrained", loc, dir, ": ", w.hf[0].first, (w.hf.size() > 1 ? " and the rest" : ""),
          " make a ", to_string(value.shape()), " tensor for ", w.name, ", which config.json makes ",
          to_string(param.shape()));
    param.assign_(value.dtype() == param.dtype() ? value.contiguous() : value.to(param.dtype()), loc);
    param.realize();  // so the file's copy is freed before the next one is read
    for (auto& [key, rows] : w.hf) used.insert(key);
  }
  std::string unexpected;
  for (const std::string& key : ckpt.names()) {
    if (used.count(key) || skipped_key(key)) continue;
    if (model.cfg.tie_embeddings && key == "lm_head.weight") continue;  // a tied head saved anyway
    unexpected += (unexpected.empty() ? "" : ", ") + key;
  }
  check(unexpected.empty(), "pretrained", loc, dir, ": tensors alk does not know for a ", info.model_type,
        " model: ", unexpected);
}

nn::NamedTensors hf_state_dict(const nn::GPT& model, const HfModelInfo& info, DType dtype, Loc loc) {
  std::map<std::string, Tensor> params;
  for (auto& [name, t] : model.named_parameters()) params.emplace(name, t);
  nn::NamedTensors out;
  NoGradGuard no_grad;
  for (const HfWeight& w : hf_weight_map(model.cfg, info, is_gpt2(info) ? "transformer." : "model.")) {
    auto p = params.find(w.name);
    check(p != params.end(), "pretrained", loc, "the model has no parameter '", w.name, "'");
    Tensor value = p->second.detach();
    if (value.dtype() != dtype) value = value.to(dtype);
    int64_t row = 0;
    for (auto& [key, rows] : w.hf) {
      Tensor piece = w.hf.size() == 1 ? value : value.slice(0, row, row + rows);
      out.emplace_back(key, (w.transposed ? piece.t() : piece).contiguous());
      row += rows;
    }
  }
  return out;
}

}  // namespace alk
