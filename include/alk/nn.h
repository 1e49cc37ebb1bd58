// Neural-network building blocks: Module (a named tree of parameters and buffers),
// layers, initializers and losses. Modules hold Tensor handles; optimizers and
// load_state_dict update them in place with Tensor::assign_, so every holder of a
// parameter sees the new value.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "alk/tensor.h"

namespace alk::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  // The module's computation on one input. Modules with other signatures add their own.
  // loc is the caller's file:line, which errors name (every override keeps the default, so
  // a call through the derived type reports the caller too).
  virtual Tensor forward(const Tensor& x, Loc loc = Loc::current());
  Tensor operator()(const Tensor& x, Loc loc = Loc::current()) { return forward(x, loc); }

  // Parameters of this module then of its children (prefixed "child."), in registration order.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  NamedTensors state_dict() const;  // parameters, then buffers
  // Strict: every key must be present and known, with a matching shape. Values are copied
  // into the parameters' dtype (as PyTorch's copy_ does).
  void load_state_dict(const NamedTensors& state, bool strict = true, Loc loc = Loc::current());
  // Moves every parameter and buffer to device, in place (the module's tensor handles
  // keep their identity; gradients are dropped). Returns *this.
  Module& to(Device& device);
  Module& to(std::string_view device, Loc loc = Loc::current());
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  int64_t num_parameters() const;
  void zero_grad();

 protected:
  Tensor register_parameter(std::string name, Tensor value);  // sets requires_grad
  Tensor register_buffer(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out, bool buffers) const;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// ---- initializers (draw from the seeded generator; see manual_seed) ----
namespace init {
void normal_(Tensor& t, double mean = 0, double std = 1);
void uniform_(Tensor& t, double low, double high);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// fan_in/fan_out from the shape as PyTorch computes them ([out, in, k...]).
void kaiming_uniform_(Tensor& t, double a = 0);
void kaiming_normal_(Tensor& t, double a = 0);
void xavier_uniform_(Tensor& t, double gain = 1);
void xavier_normal_(Tensor& t, double gain = 1);
}  // namespace init

// ---- layers ----
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;  // weight [out, in]
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim);
  Tensor forward(const Tensor& ids, Loc loc = Loc::current()) override;
  Tensor weight;  // [num, dim]
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;
  int64_t dim;
  double eps;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight;
  int64_t dim;
  double eps;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : p(p) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override { return dropout(x, p, is_training(), loc); }
  double p;
};

enum class Activation { ReLU, GELU, GELUTanh, SiLU };
Tensor activate(const Tensor& x, Activation a, Loc loc = Loc::current());

class Act : public Module {
 public:
  explicit Act(Activation a) : kind(a) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override { return activate(x, kind, loc); }
  Activation kind;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start(start), end(end) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override { return x.flatten(start, end, loc); }
  int64_t start, end;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);  // named "0", "1", ...
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  size_t size() const { return layers_.size(); }
  const std::vector<std::shared_ptr<Module>>& layers() const { return layers_; }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

// The decoder families one GPT covers: GPT-2 (the defaults) and the LLaMA layout (RMSNorm,
// rotary positions, SwiGLU, grouped-query attention; Qwen2 adds q/k/v biases).
enum class NormKind : uint8_t { LayerNorm, RMSNorm };
enum class PositionKind : uint8_t { Learned, Rotary };  // wpe embedding / rotate-half rotary on q and k
enum class MLPKind : uint8_t { GELUTanh, SwiGLU };      // proj(gelu(fc x)) / proj(silu(gate x) * (up x))

// config.json's rope_scaling. type "": none; "llama3": Llama 3.1's frequency-band rescaling.
struct RopeScaling {
  std::string type;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_context = 0;  // original_max_position_embeddings
};

// Parameter names (what Module::named_parameters gives, checkpoints store, the Hugging Face
// loader maps onto): wte.weight, wpe.weight (Learned only), blocks.{i}.ln1.{weight,bias},
// blocks.{i}.attn.qkv.{weight,bias} with weight [(heads + 2 kv_heads) * head_dim, dim]
// (rows q | k | v), blocks.{i}.attn.proj.{weight,bias}, blocks.{i}.ln2.*, blocks.{i}.mlp.fc.*
// (SwiGLU: [2 * hidden, dim], rows gate | up), blocks.{i}.mlp.proj.*, ln_f.*, head.weight
// (untied only). RMSNorm has a weight and no bias.
struct GPTConfig {
  int64_t vocab = 256, ctx = 128, dim = 128, heads = 4, layers = 4;
  double dropout = 0;
  bool tie_embeddings = true, bias = true;  // bias: every Linear's and LayerNorm's
  int64_t kv_heads = 0;      // key/value heads (grouped-query attention when < heads); 0: heads
  int64_t mlp_hidden = 0;    // the MLP's hidden width; 0: 4 * dim
  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;
  PositionKind positions = PositionKind::Learned;
  double rope_theta = 10000;
  RopeScaling rope_scaling = {};
  MLPKind mlp = MLPKind::GELUTanh;
  bool qkv_bias = false;     // q/k/v projections get a bias even when `bias` is false (Qwen2)

  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head_dim() const { return heads > 0 ? dim / heads : 0; }
  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * dim; }
};

// The rotary embedding's inverse frequencies for heads of head_dim (even): theta^(-2i / head_dim)
// for i < head_dim / 2, rescaled by rope scaling "llama3" (Llama 3.1: wavelengths longer than
// original_context / low_freq_factor divided by factor, shorter than original_context /
// high_freq_factor kept, those between interpolated), in f32 as transformers computes them.
// An unknown scaling type or out-of-range factors are an error.
std::vector<float> rotary_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                   Loc loc = Loc::current());

// GELU-tanh MLP proj(act(fc x)), or gated (SwiGLU): fc gives [gate | up] ([2 * hidden, dim]) and
// the MLP is proj(act(gate) * up).
class MLP : public Module {
 public:
  MLP(int64_t dim, int64_t hidden, Activation act = Activation::GELUTanh, double dropout = 0, bool bias = true,
      bool gated = false);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  std::shared_ptr<Linear> fc, proj;
  Activation act;
  std::shared_ptr<Dropout> drop;
  int64_t hidden;
  bool gated;
};

// Causal self-attention over x [B, T, dim] with the fused attention op: multi-head (GPT-2), or
// grouped-query (kv_heads < heads: query head h reads key/value head h / (heads / kv_heads))
// with rotary positions on q and k (the LLaMA family).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads, double dropout = 0, bool bias = true);  // GPT-2's
  explicit CausalSelfAttention(const GPTConfig& cfg);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;  // positions 0..T-1
  Tensor forward(const Tensor& x, const Tensor& positions, Loc loc = Loc::current());

  // The projections of x [..., T, dim] at positions [T] (i64): q [..., T, heads, head_dim], k and
  // v [..., T, kv_heads, head_dim], rotary applied to q and k. What forward and the generator's
  // prefill and decode step (which keeps k and v in its cache) attend with.
  struct Projected {
    Tensor q, k, v;
  };
  Projected project(const Tensor& x, const Tensor& positions, Loc loc = Loc::current()) const;
  // The output projection of the attention's rows y [..., T, heads * head_dim] (dropout included).
  Tensor output(const Tensor& y, Loc loc = Loc::current());
  // The inverse frequencies as a tensor on `device` (made once per device).
  Tensor inv_freq_on(Device& device) const;

  std::shared_ptr<Linear> qkv, proj;
  std::shared_ptr<Dropout> drop;
  int64_t dim, heads, kv_heads, head_dim;
  bool rotary = false;
  std::vector<float> inv_freq;  // rotary: [head_dim / 2]

 private:
  mutable std::vector<Tensor> inv_freq_tensors_;  // inv_freq on each device it was asked for
};

// Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)). ln1 and ln2 are LayerNorm or RMSNorm
// modules (GPTConfig::norm).
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t heads, int64_t mlp_ratio = 4, double dropout = 0, bool bias = true);
  explicit TransformerBlock(const GPTConfig& cfg);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;  // positions 0..T-1
  Tensor forward(const Tensor& x, const Tensor& positions, Loc loc = Loc::current());
  // The block with the attention itself supplied: attend(q, k, v) (CausalSelfAttention::project's
  // tensors) returns the attended rows [..., T, heads * head_dim]. The generator attends over
  // its KV cache this way, so the block's layout lives here only.
  using Attend = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;
  Tensor forward(const Tensor& x, const Tensor& positions, const Attend& attend, Loc loc = Loc::current());
  std::shared_ptr<Module> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

// A decoder-only language model: GPT-2 (token + learned position embeddings, LayerNorm,
// GELU-tanh MLP, multi-head attention) or the LLaMA family (no position embedding: rotary on q
// and k; RMSNorm; SwiGLU; grouped-query attention; Qwen2's q/k/v biases), pre-norm blocks, a
// final norm and a head (tied to the token embedding when configured).
class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& cfg, Loc loc = Loc::current());
  Tensor forward(const Tensor& ids, Loc loc = Loc::current()) override;  // [B, T] i64 -> logits [B, T, vocab]
  // The pieces forward runs, for callers that run the blocks themselves (the generator):
  // ids [..., T] at positions [T] -> x [..., T, dim], and x [..., dim] -> logits [..., vocab].
  Tensor embed(const Tensor& ids, const Tensor& positions, Loc loc = Loc::current());
  Tensor logits(const Tensor& x, Loc loc = Loc::current());
  GPTConfig cfg;
  std::shared_ptr<Embedding> wte, wpe;  // wpe: null with rotary positions
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  std::shared_ptr<Module> ln_f;
  std::shared_ptr<Linear> head;  // null when tied
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1,
         int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias;  // weight [out, in/groups, k, k]
  int64_t stride, padding, dilation, groups;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = -1, int64_t padding = 0)
      : kernel(kernel), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override {
    return max_pool2d(x, kernel, stride, padding, loc);
  }
  int64_t kernel, stride, padding;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = -1, int64_t padding = 0)
      : kernel(kernel), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override {
    return avg_pool2d(x, kernel, stride, padding, loc);
  }
  int64_t kernel, stride, padding;
};

// Normalizes over (N, H, W) per channel; in training also updates the running statistics
// (momentum-weighted, unbiased variance), which eval mode uses.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) override;
  Tensor weight, bias, running_mean, running_var;
  double eps, momentum;
};

// ---- losses (mean over the non-ignored elements) ----
// logits [N, C] or [..., C]; targets i64 [N] or [...]. Fused log-softmax + NLL.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0, Loc loc = Loc::current());
Tensor mse_loss(const Tensor& x, const Tensor& target, Loc loc = Loc::current());
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Loc loc = Loc::current());

}  // namespace alk::nn
