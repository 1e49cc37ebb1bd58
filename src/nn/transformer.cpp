// The GPT: attention, blocks and the model (GPT-2 and the LLaMA family), with GPT-2's
// initialization.
#include <cmath>
#include <numbers>

#include "alk/nn.h"
#include "ops/ops.h"

namespace alk::nn {

std::vector<float> rotary_inv_freq(int64_t head_dim, double theta, const RopeScaling& s, Loc loc) {
  check(head_dim > 0 && head_dim % 2 == 0, "rotary_inv_freq", loc, "head_dim must be even and > 0, got ", head_dim);
  check(theta > 1 && std::isfinite(theta), "rotary_inv_freq", loc, "rope_theta must be > 1, got ", theta);
  check(s.type.empty() || s.type == "default" || s.type == "llama3", "rotary_inv_freq", loc, "rope scaling type '",
        s.type, "' is not supported (none or llama3)");
  // transformers: 1 / theta ** (arange(0, d, 2).float() / d), every step in f32.
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    const float exponent = static_cast<float>(2 * static_cast<int64_t>(i)) / static_cast<float>(head_dim);
    inv[i] = 1.0f / static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
  }
  if (s.type != "llama3") return inv;
  check(s.factor >= 1 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_context > 0,
        "rotary_inv_freq", loc, "llama3 rope scaling needs factor >= 1 (got ", s.factor, "), 0 < low_freq_factor (",
        s.low_freq_factor, ") < high_freq_factor (", s.high_freq_factor, ") and original_max_position_embeddings > 0 (",
        s.original_context, ")");
  // transformers' _compute_llama3_parameters, in f32 where it computes in f32 (the wavelength
  // bounds are Python floats: f64).
  const double original = static_cast<double>(s.original_context);
  const double low_freq_wavelen = original / s.low_freq_factor, high_freq_wavelen = original / s.high_freq_factor;
  for (float& f : inv) {
    const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / f;
    if (wavelen > low_freq_wavelen) {
      f = f / static_cast<float>(s.factor);
    } else if (wavelen >= high_freq_wavelen) {
      const float smooth = (static_cast<float>(original) / wavelen - static_cast<float>(s.low_freq_factor)) /
                           static_cast<float>(s.high_freq_factor - s.low_freq_factor);
      f = (1.0f - smooth) * f / static_cast<float>(s.factor) + smooth * f;
    }
  }
  return inv;
}

CausalSelfAttention::CausalSelfAttention(int64_t d, int64_t h, double p, bool bias)
    : dim(d), heads(h), kv_heads(h), head_dim(h > 0 ? d / h : 0) {
  check(h > 0 && d % h == 0, "CausalSelfAttention", Loc::current(), "dim ", d, " is not divisible by heads ", h);
  qkv = register_module("qkv", std::make_shared<Linear>(d, 3 * d, bias));
  proj = register_module("proj", std::make_shared<Linear>(d, d, bias));
  drop = register_module("drop", std::make_shared<Dropout>(p));
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : dim(c.dim), heads(c.heads), kv_heads(c.key_value_heads()), head_dim(c.head_dim()),
      rotary(c.positions == PositionKind::Rotary) {
  const Loc loc = Loc::current();
  check(heads > 0 && dim % heads == 0, "CausalSelfAttention", loc, "dim ", dim, " is not divisible by heads ", heads);
  check(kv_heads > 0 && heads % kv_heads == 0, "CausalSelfAttention", loc, "heads ", heads,
        " is not a multiple of kv_heads ", kv_heads);
  if (rotary) inv_freq = rotary_inv_freq(head_dim, c.rope_theta, c.rope_scaling, loc);
  qkv = register_module("qkv", std::make_shared<Linear>(dim, (heads + 2 * kv_heads) * head_dim, c.bias || c.qkv_bias));
  proj = register_module("proj", std::make_shared<Linear>(dim, dim, c.bias));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
}

Tensor CausalSelfAttention::inv_freq_on(Device& device) const {
  for (const Tensor& t : inv_freq_tensors_)
    if (&t.device() == &device) return t;
  Tensor t = tensor(inv_freq, {static_cast<int64_t>(inv_freq.size())}).to(device).realize();
  inv_freq_tensors_.push_back(t);
  return t;
}

CausalSelfAttention::Projected CausalSelfAttention::project(const Tensor& x, const Tensor& positions, Loc loc) const {
  check(x.dim() >= 2 && x.shape().back() == dim, "CausalSelfAttention", loc, "expected [..., T, ", dim,
        "], got shape ", to_string(x.shape()));
  Shape rows(x.shape().begin(), x.shape().end() - 1);
  Shape split = rows;
  split.insert(split.end(), {heads + 2 * kv_heads, head_dim});
  Tensor all = qkv->forward(x, loc).reshape(split, loc);  // [..., T, heads + 2 kv_heads, head_dim]
  const int64_t h = static_cast<int64_t>(rows.size());
  Projected out{all.slice(h, 0, heads, 1, loc), all.slice(h, heads, heads + kv_heads, 1, loc),
                all.slice(h, heads + kv_heads, heads + 2 * kv_heads, 1, loc)};
  if (rotary) {
    // q's and k's heads are adjacent in the projection: one rotation of both (one cos/sin).
    Tensor qk = rotary_embedding(all.slice(h, 0, heads + kv_heads, 1, loc), positions, inv_freq_on(x.device()), loc);
    out.q = qk.slice(h, 0, heads, 1, loc);
    out.k = qk.slice(h, heads, heads + kv_heads, 1, loc);
  }
  return out;
}

Tensor CausalSelfAttention::output(const Tensor& y, Loc loc) { return drop->forward(proj->forward(y, loc), loc); }

Tensor CausalSelfAttention::forward(const Tensor& x, Loc loc) {
  check(x.dim() == 3 && x.shape()[2] == dim, "CausalSelfAttention", loc, "expected [B, T, ", dim, "], got shape ",
        to_string(x.shape()));
  DeviceGuard on(x.device());
  return forward(x, arange(x.shape()[1]), loc);
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& positions, Loc loc) {
  check(x.dim() == 3 && x.shape()[2] == dim, "CausalSelfAttention", loc, "expected [B, T, ", dim, "], got shape ",
        to_string(x.shape()));
  const int64_t b = x.shape()[0], t = x.shape()[1];
  Tensor y;
  if (!rotary && kv_heads == heads) {
    // GPT-2: the packed projection's gradient comes back as one tensor (see
    // scaled_dot_product_attention_qkv).
    Tensor qkv_out = qkv->forward(x, loc).reshape({b, t, 3, heads, head_dim});  // [B, T, 3, H, D]
    y = scaled_dot_product_attention_qkv(qkv_out, true, loc);                   // [B, H, T, D]
  } else {
    Projected p = project(x, positions, loc);
    y = scaled_dot_product_attention(p.q.transpose(1, 2, loc), p.k.transpose(1, 2, loc), p.v.transpose(1, 2, loc),
                                     true, -1, loc);
  }
  return output(y.transpose(1, 2).reshape({b, t, dim}), loc);
}

namespace {
std::shared_ptr<Module> make_norm(const GPTConfig& c) {
  if (c.norm == NormKind::RMSNorm) return std::make_shared<RMSNorm>(c.dim, c.norm_eps);
  return std::make_shared<LayerNorm>(c.dim, c.norm_eps, true);
}
}  // namespace

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio, double p, bool bias) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(dim, heads, p, bias));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  mlp = register_module("mlp", std::make_shared<MLP>(dim, mlp_ratio * dim, Activation::GELUTanh, p, bias));
}

TransformerBlock::TransformerBlock(const GPTConfig& c) {
  ln1 = register_module("ln1", make_norm(c));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln2 = register_module("ln2", make_norm(c));
  const bool swiglu = c.mlp == MLPKind::SwiGLU;
  mlp = register_module("mlp", std::make_shared<MLP>(c.dim, c.hidden(), swiglu ? Activation::SiLU : Activation::GELUTanh,
                                                     c.dropout, c.bias, swiglu));
}

Tensor TransformerBlock::forward(const Tensor& x, Loc loc) {
  Tensor h = add(x, attn->forward(ln1->forward(x, loc), loc), loc);
  return add(h, mlp->forward(ln2->forward(h, loc), loc), loc);
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& positions, Loc loc) {
  Tensor h = add(x, attn->forward(ln1->forward(x, loc), positions, loc), loc);
  return add(h, mlp->forward(ln2->forward(h, loc), loc), loc);
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& positions, const Attend& attend, Loc loc) {
  CausalSelfAttention::Projected p = attn->project(ln1->forward(x, loc), positions, loc);
  Tensor h = add(x, attn->output(attend(p.q, p.k, p.v), loc), loc);
  return add(h, mlp->forward(ln2->forward(h, loc), loc), loc);
}

GPT::GPT(const GPTConfig& c, Loc loc) : cfg(c) {
  constexpr const char* kOp = "GPT";
  check(c.vocab > 0 && c.ctx > 0 && c.dim > 0 && c.heads > 0 && c.layers >= 0, kOp, loc,
        "vocab, ctx, dim and heads must be > 0 and layers >= 0; got vocab ", c.vocab, ", ctx ", c.ctx, ", dim ", c.dim,
        ", heads ", c.heads, ", layers ", c.layers);
  check(c.dim % c.heads == 0, kOp, loc, "dim ", c.dim, " is not divisible by heads ", c.heads);
  check(c.kv_heads >= 0 && c.heads % c.key_value_heads() == 0, kOp, loc, "heads ", c.heads,
        " must be a multiple of kv_heads ", c.kv_heads);
  check(c.mlp_hidden >= 0, kOp, loc, "mlp_hidden must be >= 0 (0: 4 * dim), got ", c.mlp_hidden);
  check(c.norm_eps > 0 && std::isfinite(c.norm_eps), kOp, loc, "norm_eps must be > 0, got ", c.norm_eps);
  check(c.positions == PositionKind::Rotary || c.rope_scaling.type.empty(), kOp, loc,
        "rope scaling '", c.rope_scaling.type, "' given for learned positions");
  check(c.positions == PositionKind::Learned || c.head_dim() % 2 == 0, kOp, loc,
        "rotary positions need an even head dim, got ", c.head_dim());
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab, c.dim));
  if (c.positions == PositionKind::Learned) wpe = register_module("wpe", std::make_shared<Embedding>(c.ctx, c.dim));
  // One block constructor for every family: for a GPT-2 config it registers the same modules
  // in the same order as the GPT-2 one (and draws the same initial values).
  for (int64_t i = 0; i < c.layers; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i), std::make_shared<TransformerBlock>(c)));
  ln_f = register_module("ln_f", make_norm(c));
  if (!c.tie_embeddings) head = register_module("head", std::make_shared<Linear>(c.dim, c.vocab, false));
  // GPT-2: N(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2 * layers), zero biases.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(c.layers, 1)));
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p;
    bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    bool is_norm = name.find("ln") != std::string::npos;
    if (is_norm) continue;
    if (is_bias) {
      init::zeros_(t);
    } else if (name.find("proj.weight") != std::string::npos) {
      init::normal_(t, 0, residual_std);
    } else {
      init::normal_(t, 0, 0.02);
    }
  }
}

Tensor GPT::embed(const Tensor& ids, const Tensor& positions, Loc loc) {
  Tensor x = wte->forward(ids, loc);
  return wpe ? add(x, wpe->forward(positions, loc), loc) : x;
}

Tensor GPT::logits(const Tensor& x, Loc loc) {
  Tensor y = ln_f->forward(x, loc);
  return head ? head->forward(y, loc) : matmul(y, wte->weight.t(), loc);
}

Tensor GPT::forward(const Tensor& ids, Loc loc) {
  check(ids.dim() == 2, "GPT", loc, "expected token ids [B, T], got shape ", to_string(ids.shape()));
  const int64_t t = ids.shape()[1];
  check(t <= cfg.ctx, "GPT", loc, "sequence length ", t, " exceeds the context ", cfg.ctx);
  DeviceGuard on(ids.device());  // the positions go where the ids are
  Tensor positions = arange(t);
  Tensor x = embed(ids, positions, loc);
  for (auto& block : blocks) x = block->forward(x, positions, loc);
  return logits(x, loc);
}

}  // namespace alk::nn
