// The LLaMA family in nn::GPT: the rotary embedding and its inverse frequencies, grouped-query
// attention, and a whole model against a float64 reference written here with plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numbers>
#include <random>

#include "alk/alk.h"
#include "alk/generate.h"
#include "alk/io.h"
#include "testing.h"

namespace alk {
namespace {

using testing::gradcheck;

// ---- rotary ----

// transformers' formula in f64: theta^(-2i/d), then llama3's bands.
std::vector<double> inv_freq_reference(int64_t d, double theta, const nn::RopeScaling& s) {
  std::vector<double> f;
  for (int64_t i = 0; i < d / 2; ++i) f.push_back(1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(d)));
  if (s.type != "llama3") return f;
  const double orig = static_cast<double>(s.original_context);
  const double low = orig / s.low_freq_factor, high = orig / s.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen > low) {
      x /= s.factor;
    } else if (wavelen >= high) {
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      x = (1 - smooth) * x / s.factor + smooth * x;
    }
  }
  return f;
}

TEST(Rotary, InverseFrequenciesFollowTransformersFormulaWithLlama3Bands) {
  // head_dim 16, theta 500000 and original context 64: wavelengths from 6 to ~6e5 fall in all
  // three llama3 bands (kept, interpolated, divided by factor).
  const nn::RopeScaling llama3{"llama3", 8, 1, 4, 64};
  for (const nn::RopeScaling& s : {nn::RopeScaling{}, llama3}) {
    const std::vector<float> got = nn::rotary_inv_freq(16, 500000, s);
    const std::vector<double> want = inv_freq_reference(16, 500000, s);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << s.type << " " << i;
  }
  const std::vector<float> plain = nn::rotary_inv_freq(16, 500000, {}), scaled = nn::rotary_inv_freq(16, 500000, llama3);
  int kept = 0, divided = 0, between = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (scaled[i] == plain[i]) ++kept;
    else if (std::fabs(scaled[i] - plain[i] / 8) <= 1e-6f * plain[i]) ++divided;
    else ++between;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0);
  EXPECT_THROW(nn::rotary_inv_freq(16, 10000, {"yarn", 4, 1, 4, 64}), Error);
  EXPECT_THROW(nn::rotary_inv_freq(7, 10000, {}), Error);
  EXPECT_THROW(nn::rotary_inv_freq(16, 10000, {"llama3", 8, 4, 1, 64}), Error);  // low >= high
}

// x [B, P, H, D] rotated at positions, in f64 loops: out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
std::vector<double> rotary_reference(const std::vector<double>& x, Shape shape, const std::vector<int64_t>& pos,
                                     const std::vector<double>& inv) {
  const int64_t B = shape[0], P = shape[1], H = shape[2], D = shape[3], half = D / 2;
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t h = 0; h < H; ++h) {
        const size_t row = static_cast<size_t>(((b * P + p) * H + h) * D);
        for (int64_t i = 0; i < half; ++i) {
          const double a = static_cast<double>(pos[static_cast<size_t>(p)]) * inv[static_cast<size_t>(i)];
          const double x1 = x[row + static_cast<size_t>(i)], x2 = x[row + static_cast<size_t>(i + half)];
          out[row + static_cast<size_t>(i)] = x1 * std::cos(a) - x2 * std::sin(a);
          out[row + static_cast<size_t>(i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
      }
  return out;
}

TEST(Rotary, ValuesMatchAFloat64ReferenceAndGradientsFiniteDifferences) {
  std::mt19937 rng(3);
  const Shape shape = {2, 5, 3, 8};
  Tensor x = testing::f64_tensor(shape, Domain::Any, rng);
  const std::vector<int64_t> pos = {0, 3, 7, 100, 2};
  const std::vector<double> inv = {1.0, 0.1, 0.01, 0.001};
  Tensor got = rotary_embedding(x, tensor(pos, {5}), tensor(inv, {4}));
  const std::vector<double> want = rotary_reference(x.to_vector<double>(), shape, pos, inv);
  const std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-12) << i;
  // f32 (angles in f32 as transformers computes them).
  Tensor got32 = rotary_embedding(x.to(DType::F32), tensor(pos, {5}), tensor(std::vector<float>{1, 0.1f, 0.01f, 0.001f}, {4}));
  const std::vector<double> g32 = got32.to_vector<double>();
  for (size_t i = 0; i < g32.size(); ++i) EXPECT_NEAR(g32[i], want[i], 2e-5) << i;
  // A strided x (a slice of a wider projection), as the model passes it.
  Tensor wide = testing::f64_tensor({2, 5, 7, 8}, Domain::Any, rng);
  Tensor part = wide.slice(2, 2, 5);
  const std::vector<double> want_part = rotary_reference(part.contiguous().to_vector<double>(), shape, pos, inv);
  const std::vector<double> got_part = rotary_embedding(part, tensor(pos, {5}), tensor(inv, {4})).to_vector<double>();
  for (size_t i = 0; i < got_part.size(); ++i) EXPECT_NEAR(got_part[i], want_part[i], 1e-12) << i;
  // The gradient is the inverse rotation: central differences in f64.
  x = testing::f64_tensor({1, 3, 2, 6}, Domain::Any, rng).requires_grad_();
  gradcheck([](const std::vector<Tensor>& in) {
    return rotary_embedding(in[0], tensor(std::vector<int64_t>{4, 1, 9}, {3}), tensor(std::vector<double>{1, 0.3, 0.05}, {3}));
  }, {x});
}

TEST(Rotary, BadInputsRaiseWithTheValues) {
  Tensor x = zeros({1, 4, 2, 6});
  Tensor f = zeros({3});
  try {
    rotary_embedding(x, tensor(std::vector<int64_t>{0, 1, 2}, {3}), f);
    FAIL() << "positions of the wrong length were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions must be integer [4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_llama.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rotary_embedding(zeros({1, 4, 2, 5}), arange(4), zeros({2})), Error);  // odd head dim
  EXPECT_THROW(rotary_embedding(x, arange(4), zeros({6})), Error);                    // inv_freq not D/2
  EXPECT_THROW(rotary_embedding(x, zeros({4}), f), Error);                            // float positions
}

// ---- grouped-query attention ----

TEST(GroupedQueryAttention, EqualsMultiHeadWithRepeatedKeyValueHeadsForwardAndBackward) {
  std::mt19937 rng(5);
  for (bool causal : {true, false}) {
    Tensor q = testing::f64_tensor({2, 6, 5, 8}, Domain::Any, rng).requires_grad_();
    Tensor k = testing::f64_tensor({2, 2, 7, 8}, Domain::Any, rng).requires_grad_();
    Tensor v = testing::f64_tensor({2, 2, 7, 8}, Domain::Any, rng).requires_grad_();
    Tensor w = testing::f64_tensor({2, 6, 5, 8}, Domain::Any, rng);
    // Query head h reads key/value head h / 3.
    Tensor repeat = tensor(std::vector<int64_t>{0, 0, 0, 1, 1, 1}, {6});
    Tensor want = scaled_dot_product_attention(q, index_select(k, 1, repeat), index_select(v, 1, repeat), causal);
    Tensor got = scaled_dot_product_attention(q, k, v, causal);
    const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
    auto g_got = grad({sum(got * w)}, {q, k, v});
    auto g_want = grad({sum(want * w)}, {q, k, v});
    for (size_t j = 0; j < 3; ++j) {
      const std::vector<double> x = g_got[j].to_vector<double>(), y = g_want[j].to_vector<double>();
      ASSERT_EQ(x.size(), y.size());
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-11) << "input " << j << " element " << i;
    }
  }
  // And against central differences.
  Tensor q = testing::f64_tensor({1, 4, 3, 4}, Domain::Any, rng).requires_grad_();
  Tensor k = testing::f64_tensor({1, 2, 3, 4}, Domain::Any, rng).requires_grad_();
  Tensor v = testing::f64_tensor({1, 2, 3, 4}, Domain::Any, rng).requires_grad_();
  gradcheck([](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], true); },
            {q, k, v});
}

TEST(GroupedQueryAttention, HeadsThatDoNotDivideRaise) {
  try {
    scaled_dot_product_attention(zeros({1, 6, 3, 4}), zeros({1, 4, 3, 4}), zeros({1, 4, 3, 4}));
    FAIL() << "6 query heads over 4 key/value heads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grouped-query, dim -3 of q a multiple"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("k [1, 4, 3, 4]"), std::string::npos) << e.what();
  }
}

// ---- the model against a float64 reference ----

nn::GPTConfig tiny_llama(bool qkv_bias, bool tied) {
  nn::GPTConfig c;
  c.vocab = 50, c.ctx = 16, c.dim = 32, c.heads = 4, c.layers = 2;
  c.kv_heads = 2, c.mlp_hidden = 48;
  c.norm = nn::NormKind::RMSNorm, c.norm_eps = 1e-6;
  c.positions = nn::PositionKind::Rotary, c.rope_theta = 10000;
  // head_dim 8, original context 8: wavelength 6.3 is interpolated, 63, 628 and 6283 divided by 8.
  c.rope_scaling = {"llama3", 8, 1, 4, 8};
  c.mlp = nn::MLPKind::SwiGLU;
  c.bias = false, c.qkv_bias = qkv_bias, c.tie_embeddings = tied;
  return c;
}

// Weights far from the init's tiny values (and norms' away from 1), so every term counts.
void randomize(nn::Module& m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0, 1);
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<float> v(static_cast<size_t>(p.numel()));
    const bool norm = name.find("ln") != std::string::npos;
    for (float& x : v) x = static_cast<float>(norm ? 1 + 0.2 * n(rng) : 0.25 * n(rng));
    Tensor t = p;
    t.assign_(tensor(v, p.shape()));
  }
}

struct Reference {
  const nn::GPT& model;
  std::map<std::string, std::vector<double>> w;
  explicit Reference(const nn::GPT& m) : model(m) {
    for (auto& [name, p] : m.named_parameters()) w[name] = p.to_vector<double>();
  }
  // y [n, out] = x [n, in] W^T (+ b)
  std::vector<double> linear(const std::vector<double>& x, int64_t n, const std::string& name, int64_t in,
                             int64_t out) const {
    const std::vector<double>& W = w.at(name + ".weight");
    const auto bias = w.find(name + ".bias");
    std::vector<double> y(static_cast<size_t>(n * out));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias != w.end() ? bias->second[static_cast<size_t>(o)] : 0;
        for (int64_t i = 0; i < in; ++i) acc += x[static_cast<size_t>(r * in + i)] * W[static_cast<size_t>(o * in + i)];
        y[static_cast<size_t>(r * out + o)] = acc;
      }
    return y;
  }
  std::vector<double> rms(const std::vector<double>& x, int64_t n, int64_t d, const std::string& name) const {
    const std::vector<double>& g = w.at(name + ".weight");
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < n; ++r) {
      double ms = 0;
      for (int64_t i = 0; i < d; ++i) ms += x[static_cast<size_t>(r * d + i)] * x[static_cast<size_t>(r * d + i)];
      const double s = 1 / std::sqrt(ms / static_cast<double>(d) + model.cfg.norm_eps);
      for (int64_t i = 0; i < d; ++i)
        y[static_cast<size_t>(r * d + i)] = x[static_cast<size_t>(r * d + i)] * s * g[static_cast<size_t>(i)];
    }
    return y;
  }
  // Logits [T, vocab] of one sequence.
  std::vector<double> logits(const std::vector<int64_t>& ids) const {
    const nn::GPTConfig& c = model.cfg;
    const int64_t T = static_cast<int64_t>(ids.size()), C = c.dim, H = c.heads, Hkv = c.key_value_heads(),
                  D = c.head_dim(), G = H / Hkv, F = c.hidden(), width = (H + 2 * Hkv) * D;
    std::vector<double> inv(model.blocks[0]->attn->inv_freq.begin(), model.blocks[0]->attn->inv_freq.end());
    std::vector<double> x(static_cast<size_t>(T * C));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i)
        x[static_cast<size_t>(t * C + i)] = w.at("wte.weight")[static_cast<size_t>(ids[static_cast<size_t>(t)] * C + i)];
    for (int64_t l = 0; l < c.layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      std::vector<double> qkv = linear(rms(x, T, C, b + "ln1"), T, b + "attn.qkv", C, width);
      // Rotary on the q and k heads of each row (head slot j: q heads then k heads), at position t.
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < H + Hkv; ++j) {
          double* r = &qkv[static_cast<size_t>(t * width + j * D)];
          for (int64_t i = 0; i < D / 2; ++i) {
            const double a = static_cast<double>(t) * inv[static_cast<size_t>(i)], x1 = r[i], x2 = r[i + D / 2];
            r[i] = x1 * std::cos(a) - x2 * std::sin(a);
            r[i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
          }
        }
      std::vector<double> y(static_cast<size_t>(T * C), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / G;
        for (int64_t t = 0; t < T; ++t) {
          std::vector<double> s(static_cast<size_t>(t + 1));
          double mx = -1e300;
          for (int64_t u = 0; u <= t; ++u) {
            double dot = 0;
            for (int64_t i = 0; i < D; ++i)
              dot += qkv[static_cast<size_t>(t * width + h * D + i)] * qkv[static_cast<size_t>(u * width + (H + kvh) * D + i)];
            s[static_cast<size_t>(u)] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[static_cast<size_t>(u)]);
          }
          double z = 0;
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int64_t u = 0; u <= t; ++u)
            for (int64_t i = 0; i < D; ++i)
              y[static_cast<size_t>(t * C + h * D + i)] +=
                  s[static_cast<size_t>(u)] / z * qkv[static_cast<size_t>(u * width + (H + Hkv + kvh) * D + i)];
        }
      }
      std::vector<double> o = linear(y, T, b + "attn.proj", C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      std::vector<double> f = linear(rms(x, T, C, b + "ln2"), T, b + "mlp.fc", C, 2 * F);
      std::vector<double> a(static_cast<size_t>(T * F));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < F; ++i) {
          const double gate = f[static_cast<size_t>(t * 2 * F + i)], up = f[static_cast<size_t>(t * 2 * F + F + i)];
          a[static_cast<size_t>(t * F + i)] = gate / (1 + std::exp(-gate)) * up;
        }
      o = linear(a, T, b + "mlp.proj", F, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    }
    x = rms(x, T, C, "ln_f");
    return linear(x, T, c.tie_embeddings ? "wte" : "head", C, c.vocab);
  }
};

TEST(LlamaModel, LogitsMatchAFloat64ReferenceModel) {
  for (bool qkv_bias : {false, true})
    for (bool tied : {false, true}) {
      manual_seed(7);
      nn::GPT model(tiny_llama(qkv_bias, tied));
      randomize(model, 9);
      model.eval();
      // Parameter names and shapes as the Hugging Face loader maps onto them.
      std::map<std::string, Shape> shapes;
      for (auto& [name, p] : model.named_parameters()) shapes[name] = p.shape();
      EXPECT_EQ(shapes.count("wpe.weight"), 0u);
      EXPECT_EQ(shapes.at("blocks.0.attn.qkv.weight"), (Shape{(4 + 2 * 2) * 8, 32}));
      EXPECT_EQ(shapes.count("blocks.0.attn.qkv.bias"), qkv_bias ? 1u : 0u);
      EXPECT_EQ(shapes.count("blocks.0.attn.proj.bias"), 0u);
      EXPECT_EQ(shapes.at("blocks.1.mlp.fc.weight"), (Shape{2 * 48, 32}));
      EXPECT_EQ(shapes.at("blocks.1.mlp.proj.weight"), (Shape{32, 48}));
      EXPECT_EQ(shapes.count("blocks.1.ln2.bias"), 0u);
      EXPECT_EQ(shapes.count("ln_f.weight"), 1u);
      EXPECT_EQ(shapes.count("head.weight"), tied ? 0u : 1u);

      const std::vector<int64_t> ids = {3, 17, 42, 0, 9, 9, 31, 49, 5, 12, 1, 28, 40, 7};
      const std::vector<double> want = Reference(model).logits(ids);
      NoGradGuard no_grad;
      const std::vector<double> got = model(tensor(ids, {1, 14})).to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      double worst = 0, scale = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
      }
      EXPECT_GT(scale, 1.0);  // logits far from zero: the comparison means something
      EXPECT_LT(worst, 2e-4 * scale) << "qkv_bias " << qkv_bias << " tied " << tied;
    }
}

TEST(LlamaModel, FineTunesTwentyStepsWithFallingLoss) {
  manual_seed(1);
  nn::GPT model(tiny_llama(true, false));
  optim::AdamW opt(model.named_parameters(), 3e-3);
  // A repeating sequence the model can learn in a few steps.
  std::vector<int64_t> seq;
  for (int64_t i = 0; i < 4 * 17; ++i) seq.push_back((i * 7) % 23);
  Tensor data = tensor(seq, {4, 17});
  Tensor in = data.slice(1, 0, 16).contiguous(), target = data.slice(1, 1, 17).contiguous();
  std::vector<double> losses;
  for (int step = 0; step < 20; ++step) {
    Tensor loss = nn::cross_entropy(model(in).reshape({-1, 50}), target.reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << losses.front() << " -> " << losses.back();
  for (auto& [name, p] : model.named_parameters()) EXPECT_TRUE(std::isfinite(sum(p).item())) << name;
}

TEST(LlamaModel, UnsupportedConfigsRaiseClearly) {
  nn::GPTConfig c = tiny_llama(false, true);
  c.kv_heads = 3;  // 4 heads are not a multiple of 3
  EXPECT_THROW(nn::GPT{c}, Error);
  c = tiny_llama(false, true);
  c.rope_scaling.type = "yarn";
  try {
    nn::GPT model(c);
    FAIL() << "rope scaling yarn was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("yarn"), std::string::npos) << e.what();
  }
  c = tiny_llama(false, true);
  c.positions = nn::PositionKind::Learned;  // llama3 scaling on learned positions
  EXPECT_THROW(nn::GPT{c}, Error);
}


// ---- the Hugging Face fixtures (tests/fixtures/hf, made by scripts/make_hf_fixtures*.py) ----
// The model against logits and greedy tokens computed from transformers' modeling formulas in
// float64. The names are mapped here by hand, the layout nn.h documents (the loader proper,
// config.json and all, is src/io's); only the model is under test.

namespace hf {

const std::string kDir = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/hf/";

nn::NamedTensors read(const std::vector<std::string>& files) {
  nn::NamedTensors all;
  for (const std::string& f : files)
    for (auto& kv : load_safetensors(kDir + f).tensors) all.push_back(kv);
  return all;
}

Tensor get(const nn::NamedTensors& t, const std::string& name) {
  for (const auto& [k, v] : t)
    if (k == name) return v.to(DType::F32);
  ADD_FAILURE() << "no " << name;
  return Tensor();
}

// LlamaForCausalLM / Qwen2ForCausalLM names -> nn::GPT's.
nn::NamedTensors llama_state(const nn::NamedTensors& hf, int64_t layers, bool qkv_bias, bool tied) {
  nn::NamedTensors s = {{"wte.weight", get(hf, "model.embed_tokens.weight")}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", b = "blocks." + std::to_string(i) + ".";
    s.push_back({b + "ln1.weight", get(hf, h + "input_layernorm.weight")});
    s.push_back({b + "attn.qkv.weight", cat({get(hf, h + "self_attn.q_proj.weight"), get(hf, h + "self_attn.k_proj.weight"),
                                            get(hf, h + "self_attn.v_proj.weight")})});
    if (qkv_bias)
      s.push_back({b + "attn.qkv.bias", cat({get(hf, h + "self_attn.q_proj.bias"), get(hf, h + "self_attn.k_proj.bias"),
                                            get(hf, h + "self_attn.v_proj.bias")})});
    s.push_back({b + "attn.proj.weight", get(hf, h + "self_attn.o_proj.weight")});
    s.push_back({b + "ln2.weight", get(hf, h + "post_attention_layernorm.weight")});
    s.push_back({b + "mlp.fc.weight", cat({get(hf, h + "mlp.gate_proj.weight"), get(hf, h + "mlp.up_proj.weight")})});
    s.push_back({b + "mlp.proj.weight", get(hf, h + "mlp.down_proj.weight")});
  }
  s.push_back({"ln_f.weight", get(hf, "model.norm.weight")});
  if (!tied) s.push_back({"head.weight", get(hf, "lm_head.weight")});
  return s;
}

// GPT2LMHeadModel: Conv1D weights are [in, out] (transposed here); attn.bias (the mask) ignored.
nn::NamedTensors gpt2_state(const nn::NamedTensors& hf, int64_t layers) {
  nn::NamedTensors s = {{"wte.weight", get(hf, "transformer.wte.weight")}, {"wpe.weight", get(hf, "transformer.wpe.weight")}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".", b = "blocks." + std::to_string(i) + ".";
    for (const auto& [ours, theirs] : std::vector<std::pair<std::string, std::string>>{
             {"ln1", "ln_1"}, {"attn.qkv", "attn.c_attn"}, {"attn.proj", "attn.c_proj"}, {"ln2", "ln_2"},
             {"mlp.fc", "mlp.c_fc"}, {"mlp.proj", "mlp.c_proj"}}) {
      const bool conv1d = ours.find('.') != std::string::npos;
      const Tensor w = get(hf, h + theirs + ".weight");
      s.push_back({b + ours + ".weight", conv1d ? w.t().contiguous() : w});
      s.push_back({b + ours + ".bias", get(hf, h + theirs + ".bias")});
    }
  }
  s.push_back({"ln_f.weight", get(hf, "transformer.ln_f.weight")});
  s.push_back({"ln_f.bias", get(hf, "transformer.ln_f.bias")});
  return s;
}

void expect_reference(nn::GPT& model, const std::string& reference) {
  model.eval();
  const nn::NamedTensors ref = load_safetensors(kDir + "reference/" + reference).tensors;
  auto by_name = [&](const std::string& n) {
    for (const auto& [k, v] : ref)
      if (k == n) return v;
    ADD_FAILURE() << reference << " has no " << n;
    return Tensor();
  };
  auto shared = std::shared_ptr<nn::GPT>(&model, [](nn::GPT*) {});
  Generator gen(shared, {.slots = 1});
  for (int i = 0; i < 3; ++i) {
    const std::vector<int64_t> ids = by_name("input_ids." + std::to_string(i)).to_vector<int64_t>();
    const std::vector<double> want = by_name("logits." + std::to_string(i)).to_vector<double>();
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<double> got;
    {
      NoGradGuard no_grad;
      got = model(tensor(ids, {1, n})).to_vector<double>();
    }
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::fabs(got[j] - want[j]));
    EXPECT_LT(worst, 2e-4) << reference << " prompt " << i;
    // Greedy with the KV cache: the reference's tokens (argmax of full recomputations in f64).
    const std::vector<int64_t> greedy = by_name("greedy." + std::to_string(i)).to_vector<int64_t>();
    GenerateRequest r;
    r.prompt.assign(ids.begin(), ids.end());
    r.sampling.temperature = 0;
    r.sampling.max_tokens = static_cast<int64_t>(greedy.size());
    const std::vector<int32_t> tokens = gen.generate(r);
    EXPECT_EQ(std::vector<int64_t>(tokens.begin(), tokens.end()), greedy) << reference << " prompt " << i;
  }
}

}  // namespace hf

TEST(HfFixtures, LlamaWithGqaAndLlama3RopeMatchesTheReference) {
  nn::GPTConfig c;
  c.vocab = 512, c.ctx = 128, c.dim = 64, c.heads = 4, c.kv_heads = 2, c.layers = 2, c.mlp_hidden = 160;
  c.norm = nn::NormKind::RMSNorm, c.norm_eps = 1e-5, c.positions = nn::PositionKind::Rotary, c.rope_theta = 10000;
  c.rope_scaling = {"llama3", 8, 1, 4, 32};
  c.mlp = nn::MLPKind::SwiGLU, c.bias = false, c.tie_embeddings = false;
  nn::GPT model(c);
  model.load_state_dict(hf::llama_state(hf::read({"llama/model-00001-of-00003.safetensors",
                                                  "llama/model-00002-of-00003.safetensors",
                                                  "llama/model-00003-of-00003.safetensors"}),
                                        2, false, false));
  hf::expect_reference(model, "llama.safetensors");
}

TEST(HfFixtures, Qwen2WithQkvBiasAndTiedHeadMatchesTheReference) {
  nn::GPTConfig c;
  c.vocab = 512, c.ctx = 128, c.dim = 64, c.heads = 4, c.kv_heads = 2, c.layers = 2, c.mlp_hidden = 128;
  c.norm = nn::NormKind::RMSNorm, c.norm_eps = 1e-6, c.positions = nn::PositionKind::Rotary, c.rope_theta = 1e6;
  c.mlp = nn::MLPKind::SwiGLU, c.bias = false, c.qkv_bias = true, c.tie_embeddings = true;
  nn::GPT model(c);
  model.load_state_dict(hf::llama_state(hf::read({"qwen2/model.safetensors"}), 2, true, true));
  hf::expect_reference(model, "qwen2.safetensors");
}

TEST(HfFixtures, Gpt2MatchesTheReference) {
  nn::GPT model(nn::GPTConfig{.vocab = 512, .ctx = 128, .dim = 64, .heads = 4, .layers = 2});
  model.load_state_dict(hf::gpt2_state(hf::read({"gpt2/model.safetensors"}), 2));
  hf::expect_reference(model, "gpt2.safetensors");
}

}  // namespace
}  // namespace alk
