// The GPT: attention, blocks and the model, with GPT-2's initialization.
#include <cmath>

#include "alk/nn.h"
#include "ops/ops.h"

namespace alk::nn {

CausalSelfAttention::CausalSelfAttention(int64_t d, int64_t h, double p, bool bias) : dim(d), heads(h) {
  check(h > 0 && d % h == 0, "CausalSelfAttention", Loc::current(), "dim ", d, " is not divisible by heads ", h);
  qkv = register_module("qkv", std::make_shared<Linear>(d, 3 * d, bias));
  proj = register_module("proj", std::make_shared<Linear>(d, d, bias));
  drop = register_module("drop", std::make_shared<Dropout>(p));
}

Tensor CausalSelfAttention::forward(const Tensor& x, Loc loc) {
  check(x.dim() == 3 && x.shape()[2] == dim, "CausalSelfAttention", loc, "expected [B, T, ", dim, "], got shape ",
        to_string(x.shape()));
  const int64_t b = x.shape()[0], t = x.shape()[1], hd = dim / heads;
  Tensor qkv_out = qkv->forward(x, loc).reshape({b, t, 3, heads, hd});  // [B, T, 3, H, D]
  Tensor y = scaled_dot_product_attention_qkv(qkv_out, true, loc);          // [B, H, T, D]
  y = y.transpose(1, 2).reshape({b, t, dim});
  return drop->forward(proj->forward(y, loc), loc);
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio, double p, bool bias) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(dim, heads, p, bias));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  mlp = register_module("mlp", std::make_shared<MLP>(dim, mlp_ratio * dim, Activation::GELUTanh, p, bias));
}

Tensor TransformerBlock::forward(const Tensor& x, Loc loc) {
  Tensor h = add(x, attn->forward(ln1->forward(x, loc), loc), loc);
  return add(h, mlp->forward(ln2->forward(h, loc), loc), loc);
}

GPT::GPT(const GPTConfig& c) : cfg(c) {
  // The LLaMA-family fields are declared for the Hugging Face loader; until the model builds
  // them, a config asking for them is refused rather than silently run as GPT-2.
  const bool gpt2 = (c.kv_heads == 0 || c.kv_heads == c.heads) && (c.mlp_hidden == 0 || c.mlp_hidden == 4 * c.dim) &&
                    c.norm == NormKind::LayerNorm && c.positions == PositionKind::Learned &&
                    c.mlp == MLPKind::GELUTanh && !c.qkv_bias && c.rope_scaling.type.empty();
  check(gpt2, "GPT", Loc::current(), "this build runs GPT-2 style configs only (kv_heads ", c.kv_heads,
        ", mlp_hidden ", c.mlp_hidden, ", RMSNorm/rotary/SwiGLU/qkv_bias not yet built)");
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab, c.dim));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.ctx, c.dim));
  for (int64_t i = 0; i < c.layers; ++i)
    blocks.push_back(register_module("blocks." + std::to_string(i),
                                     std::make_shared<TransformerBlock>(c.dim, c.heads, 4, c.dropout, c.bias)));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.dim));
  if (!c.tie_embeddings) head = register_module("head", std::make_shared<Linear>(c.dim, c.vocab, false));
  // GPT-2: N(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2 * layers), zero biases.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
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

Tensor GPT::forward(const Tensor& ids, Loc loc) {
  check(ids.dim() == 2, "GPT", loc, "expected token ids [B, T], got shape ", to_string(ids.shape()));
  const int64_t t = ids.shape()[1];
  check(t <= cfg.ctx, "GPT", loc, "sequence length ", t, " exceeds the context ", cfg.ctx);
  DeviceGuard on(ids.device());  // the positions go where the ids are
  Tensor x = add(wte->forward(ids, loc), wpe->forward(arange(t), loc), loc);
  for (auto& block : blocks) x = block->forward(x, loc);
  x = ln_f->forward(x, loc);
  return head ? head->forward(x, loc) : matmul(x, wte->weight.t(), loc);
}

}  // namespace alk::nn
