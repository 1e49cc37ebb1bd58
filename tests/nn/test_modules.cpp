// nn modules: parameter naming and counting, state dicts (round trip and strict errors),
// train/eval propagation, layers against float64 references, BatchNorm2d's running
// statistics (PyTorch's update rule), and the initializers' distributions.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "alk/nn.h"
#include "error_expect.h"
#include "testing.h"

namespace alk {
namespace {

using nn::NamedTensors;

std::vector<double> f64(const Tensor& t) { return t.to_vector<double>(); }

Tensor randn_f32(Shape shape, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::normal_distribution<double> d(0, 1);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(d(rng));
  return tensor(v, shape);
}

nn::GPTConfig small_gpt(bool tie = true, double dropout = 0) {
  nn::GPTConfig c;
  c.vocab = 50;
  c.ctx = 8;
  c.dim = 16;
  c.heads = 2;
  c.layers = 2;
  c.tie_embeddings = tie;
  c.dropout = dropout;
  return c;
}

std::vector<std::string> names(const NamedTensors& nt) {
  std::vector<std::string> out;
  for (auto& [n, t] : nt) out.push_back(n);
  return out;
}

Tensor gpt_ids() { return tensor(std::vector<int64_t>{1, 7, 3, 49, 0, 22, 5, 5, 11, 2}, {2, 5}); }

// ---------------- naming and counting ----------------

TEST(Module, GptNamedParametersInRegistrationOrder) {
  manual_seed(1);
  nn::GPT gpt(small_gpt(true));
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (int b = 0; b < 2; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    for (const char* s : {"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
                          "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                          "mlp.proj.weight", "mlp.proj.bias"})
      expected.push_back(p + s);
  }
  expected.push_back("ln_f.weight");
  expected.push_back("ln_f.bias");
  auto np = gpt.named_parameters();
  EXPECT_EQ(names(np), expected);
  std::map<std::string, Shape> shapes;
  for (auto& [n, t] : np) shapes[n] = t.shape();
  EXPECT_EQ(shapes["wte.weight"], (Shape{50, 16}));
  EXPECT_EQ(shapes["wpe.weight"], (Shape{8, 16}));
  EXPECT_EQ(shapes["blocks.1.attn.qkv.weight"], (Shape{48, 16}));
  EXPECT_EQ(shapes["blocks.1.attn.qkv.bias"], (Shape{48}));
  EXPECT_EQ(shapes["blocks.0.mlp.fc.weight"], (Shape{64, 16}));
  EXPECT_EQ(shapes["blocks.0.mlp.proj.weight"], (Shape{16, 64}));
  for (auto& [n, t] : np) EXPECT_TRUE(t.requires_grad()) << n;
  EXPECT_EQ(gpt.head, nullptr);
  // Parameters are the same tensors as the members.
  EXPECT_EQ(np[0].second.impl(), gpt.wte->weight.impl());
  EXPECT_EQ(gpt.parameters().size(), np.size());
  // No buffers in a GPT: the state dict is exactly the parameters.
  EXPECT_TRUE(gpt.named_buffers().empty());
  EXPECT_EQ(names(gpt.state_dict()), expected);
}

TEST(Module, GptUntiedHasHeadWeightWithoutBias) {
  manual_seed(1);
  nn::GPT gpt(small_gpt(false));
  auto n = names(gpt.named_parameters());
  ASSERT_FALSE(n.empty());
  EXPECT_EQ(n.back(), "head.weight");
  EXPECT_EQ(std::count(n.begin(), n.end(), "head.bias"), 0);
  ASSERT_NE(gpt.head, nullptr);
  EXPECT_EQ(gpt.head->weight.shape(), (Shape{50, 16}));
}

TEST(Module, NumParametersMatchesFormula) {
  for (bool tie : {true, false}) {
    manual_seed(2);
    nn::GPTConfig c = small_gpt(tie);
    nn::GPT gpt(c);
    const int64_t V = c.vocab, T = c.ctx, D = c.dim, L = c.layers;
    const int64_t block = 2 * D                    // ln1
                          + 3 * D * D + 3 * D      // qkv
                          + D * D + D              // attn proj
                          + 2 * D                  // ln2
                          + 4 * D * D + 4 * D      // fc
                          + 4 * D * D + D;         // mlp proj
    const int64_t expected = V * D + T * D + L * block + 2 * D + (tie ? 0 : V * D);
    EXPECT_EQ(gpt.num_parameters(), expected) << "tie=" << tie;
    int64_t summed = 0;
    for (const Tensor& p : gpt.parameters()) summed += p.numel();
    EXPECT_EQ(summed, expected);
  }
}

TEST(Module, GptInitFollowsGpt2) {
  manual_seed(3);
  nn::GPTConfig c = small_gpt();
  c.dim = 32;
  nn::GPT gpt(c);
  for (auto& [name, p] : gpt.named_parameters()) {
    auto v = f64(p);
    if (name.find("ln") != std::string::npos) {
      const bool w = name.find("weight") != std::string::npos;
      for (double x : v) ASSERT_EQ(x, w ? 1.0 : 0.0) << name;
    } else if (name.size() > 5 && name.substr(name.size() - 5) == ".bias") {
      for (double x : v) ASSERT_EQ(x, 0.0) << name;
    }
  }
  auto sd = [](const std::vector<double>& v) {
    double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()), s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  // 50*32 = 1600 samples: the std estimate is within ~2% of 0.02 with high probability.
  EXPECT_NEAR(sd(f64(gpt.wte->weight)), 0.02, 0.002);
  EXPECT_NEAR(sd(f64(gpt.blocks[0]->mlp->proj->weight)), 0.02 / std::sqrt(4.0), 0.001);
}

// ---------------- state dicts ----------------

TEST(Module, StateDictRoundTripGivesIdenticalOutputs) {
  manual_seed(10);
  nn::GPT a(small_gpt(false));
  manual_seed(11);
  nn::GPT b(small_gpt(false));
  Tensor ids = gpt_ids();
  auto ya = f64(a(ids)), yb = f64(b(ids));
  ASSERT_NE(ya, yb) << "differently seeded models should differ before loading";
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(f64(b(ids)), ya);
  for (auto& [n, t] : b.named_parameters()) EXPECT_TRUE(t.requires_grad()) << n;
  // The loaded model is independent of the source: changing a's parameters leaves b alone.
  {
    NoGradGuard ng;
    Tensor w = a.wte->weight;
    w.assign_((w * 2.0).contiguous());
  }
  EXPECT_EQ(f64(b(ids)), ya);
  EXPECT_NE(f64(a(ids)), ya);
}

TEST(Module, StateDictRoundTripKeepsBatchNormBuffers) {
  nn::BatchNorm2d a(3), b(3);
  a(randn_f32({4, 3, 2, 2}, 5));  // moves a's running stats
  auto sd = a.state_dict();
  EXPECT_EQ(names(sd), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var"}));
  b.load_state_dict(sd);
  EXPECT_EQ(f64(b.running_mean), f64(a.running_mean));
  EXPECT_EQ(f64(b.running_var), f64(a.running_var));
  a.eval();
  b.eval();
  Tensor x = randn_f32({2, 3, 2, 2}, 6);
  EXPECT_EQ(f64(a(x)), f64(b(x)));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Module, LoadStateDictStrictErrorsNameTheKey) {
  manual_seed(12);
  nn::GPT m(small_gpt());
  const NamedTensors full = m.state_dict();

  NamedTensors missing;
  for (auto& kv : full)
    if (kv.first != "blocks.1.ln2.bias") missing.push_back(kv);
  std::string msg = error_of([&] { m.load_state_dict(missing); });
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("blocks.1.ln2.bias"), std::string::npos) << msg;

  NamedTensors extra = full;
  extra.emplace_back("bogus.weight", zeros({3}));
  msg = error_of([&] { m.load_state_dict(extra); });
  EXPECT_NE(msg.find("unexpected"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bogus.weight"), std::string::npos) << msg;

  NamedTensors wrong = full;
  for (auto& kv : wrong)
    if (kv.first == "wpe.weight") kv.second = zeros({7, 16});
  msg = error_of([&] { m.load_state_dict(wrong); });
  EXPECT_NE(msg.find("wpe.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[7, 16]"), std::string::npos) << msg;
  // Shape mismatches are refused even when not strict.
  EXPECT_ALK_ERROR(m.load_state_dict(wrong, false), "load_state_dict", "wpe.weight", "[7, 16]", "[8, 16]");
}

// nn.h: "Strict: every key must be present and known, with matching shape and dtype."
// Like PyTorch (param.copy_(value)), a value of another floating dtype is converted to the
// parameter's dtype; the parameter keeps its dtype.
TEST(Module, LoadStateDictConvertsDtypeLikeCopy) {
  nn::LayerNorm ln(4);
  NamedTensors sd{{"weight", tensor(std::vector<double>{1, 2, 3, 4}, {4})},
                  {"bias", tensor(std::vector<float>{0, 0, 0, 0}, {4})}};
  ln.load_state_dict(sd, true);
  EXPECT_EQ(ln.weight.dtype(), DType::F32);
  EXPECT_EQ(ln.weight.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Module, LoadStateDictNonStrictIgnoresExtrasAndMissing) {
  manual_seed(13);
  nn::Linear a(3, 2), b(3, 2);
  NamedTensors sd{{"weight", a.weight}, {"extra.thing", zeros({5})}};
  const auto bias_before = f64(b.bias);
  EXPECT_NO_THROW(b.load_state_dict(sd, false));
  EXPECT_EQ(f64(b.weight), f64(a.weight));
  EXPECT_EQ(f64(b.bias), bias_before);  // missing: untouched
  EXPECT_TRUE(b.weight.requires_grad());
}

// ---------------- train / eval ----------------

TEST(Module, TrainEvalPropagatesToEveryChild) {
  manual_seed(14);
  nn::GPT gpt(small_gpt(true, 0.5));
  EXPECT_TRUE(gpt.is_training());
  gpt.eval();
  EXPECT_FALSE(gpt.is_training());
  EXPECT_FALSE(gpt.blocks[1]->attn->drop->is_training());
  EXPECT_FALSE(gpt.blocks[0]->mlp->drop->is_training());
  EXPECT_FALSE(gpt.ln_f->is_training());
  gpt.train();
  EXPECT_TRUE(gpt.blocks[1]->attn->drop->is_training());
  EXPECT_TRUE(gpt.blocks[0]->mlp->is_training());
}

TEST(Module, DropoutOnlyInTraining) {
  nn::Sequential net;
  net.add(std::make_shared<nn::Dropout>(0.5));
  Tensor x = ones({4, 64});
  manual_seed(20);
  auto y1 = f64(net(x));
  auto y2 = f64(net(x));  // the generator moved on
  EXPECT_NE(y1, y2);
  int zeros_seen = 0;
  for (double v : y1) {
    EXPECT_TRUE(v == 0.0 || v == 2.0) << v;  // inverted dropout: kept values scaled by 1/(1-p)
    zeros_seen += v == 0.0;
  }
  EXPECT_GT(zeros_seen, 64);   // ~128 of 256 expected
  EXPECT_LT(zeros_seen, 192);
  // Same RNG state: same mask.
  manual_seed(20);
  EXPECT_EQ(f64(net(x)), y1);
  net.eval();
  auto e1 = f64(net(x)), e2 = f64(net(x));
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(e1, std::vector<double>(256, 1.0));
}

TEST(Module, GptDropoutOnlyInTraining) {
  manual_seed(21);
  nn::GPT gpt(small_gpt(true, 0.3));
  Tensor ids = gpt_ids();
  auto t1 = f64(gpt(ids)), t2 = f64(gpt(ids));
  EXPECT_NE(t1, t2);
  gpt.eval();
  auto e1 = f64(gpt(ids));
  manual_seed(999);
  EXPECT_EQ(f64(gpt(ids)), e1);
}

// ---------------- layers vs float64 references ----------------

TEST(Module, LinearMatchesFloat64Reference) {
  manual_seed(30);
  nn::Linear lin(5, 3);
  Tensor x = randn_f32({2, 4, 5}, 31);
  Tensor y = lin(x);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  auto xv = f64(x), w = f64(lin.weight), b = f64(lin.bias), yv = f64(y);
  const double bound = 1 / std::sqrt(5.0);
  for (double v : w) EXPECT_LE(std::fabs(v), bound);
  for (double v : b) EXPECT_LE(std::fabs(v), bound);
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 3; ++o) {
      double ref = b[static_cast<size_t>(o)];
      for (int i = 0; i < 5; ++i) ref += xv[static_cast<size_t>(r * 5 + i)] * w[static_cast<size_t>(o * 5 + i)];
      EXPECT_NEAR(yv[static_cast<size_t>(r * 3 + o)], ref, 1e-5);
    }
  nn::Linear nobias(5, 3, false);
  EXPECT_FALSE(nobias.bias.defined());
  EXPECT_EQ(nobias.named_parameters().size(), 1u);
}

TEST(Module, EmbeddingGathersRows) {
  manual_seed(32);
  nn::Embedding emb(10, 4);
  Tensor ids = tensor(std::vector<int64_t>{3, 0, 9, 3, 7, 1}, {2, 3});
  Tensor y = emb(ids);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  auto w = f64(emb.weight), yv = f64(y);
  const std::vector<int64_t> idv{3, 0, 9, 3, 7, 1};
  for (size_t r = 0; r < 6; ++r)
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(yv[r * 4 + d], w[static_cast<size_t>(idv[r]) * 4 + d]);
  // Gradient: rows scattered back, repeated ids summed.
  sum(y * 2.0).backward();
  auto g = f64(emb.weight.grad());
  for (size_t r = 0; r < 10; ++r) {
    const double count = static_cast<double>(std::count(idv.begin(), idv.end(), static_cast<int64_t>(r)));
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(g[r * 4 + d], 2 * count) << r;
  }
}

TEST(Module, LayerNormAndRmsNormMatchReferences) {
  manual_seed(33);
  const int64_t D = 6;
  nn::LayerNorm ln(D, 1e-5);
  nn::RMSNorm rms(D, 1e-6);
  nn::init::normal_(ln.weight, 1, 0.5);
  nn::init::normal_(ln.bias, 0, 0.5);
  nn::init::normal_(rms.weight, 1, 0.5);
  Tensor x = randn_f32({3, D}, 34) * 3.0 + 1.0;
  auto xv = f64(x), lw = f64(ln.weight), lb = f64(ln.bias), rw = f64(rms.weight);
  auto y1 = f64(ln(x)), y2 = f64(rms(x));
  for (size_t r = 0; r < 3; ++r) {
    double m = 0, ms = 0;
    for (size_t i = 0; i < 6; ++i) m += xv[r * 6 + i] / 6;
    double var = 0;
    for (size_t i = 0; i < 6; ++i) {
      var += (xv[r * 6 + i] - m) * (xv[r * 6 + i] - m) / 6;
      ms += xv[r * 6 + i] * xv[r * 6 + i] / 6;
    }
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_NEAR(y1[r * 6 + i], (xv[r * 6 + i] - m) / std::sqrt(var + 1e-5) * lw[i] + lb[i], 2e-5);
      EXPECT_NEAR(y2[r * 6 + i], xv[r * 6 + i] / std::sqrt(ms + 1e-6) * rw[i], 2e-5);
    }
  }
  nn::LayerNorm plain(D, 1e-5, false);
  EXPECT_TRUE(plain.named_parameters().empty());
}

TEST(Module, SequentialAppliesLayersInOrderAndNamesThemByIndex) {
  manual_seed(35);
  auto l1 = std::make_shared<nn::Linear>(3, 4);
  auto l2 = std::make_shared<nn::Linear>(4, 2);
  nn::Sequential net;
  net.add(l1).add(std::make_shared<nn::Act>(nn::Activation::ReLU)).add(l2);
  EXPECT_EQ(net.size(), 3u);
  EXPECT_EQ(names(net.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Tensor x = randn_f32({5, 3}, 36);
  auto y = f64(net(x));
  // Reference in f64: l2(relu(l1(x))).
  auto xv = f64(x), w1 = f64(l1->weight), b1 = f64(l1->bias), w2 = f64(l2->weight), b2 = f64(l2->bias);
  for (size_t r = 0; r < 5; ++r) {
    double h[4];
    for (size_t j = 0; j < 4; ++j) {
      h[j] = b1[j];
      for (size_t i = 0; i < 3; ++i) h[j] += xv[r * 3 + i] * w1[j * 3 + i];
      h[j] = std::max(h[j], 0.0);
    }
    for (size_t o = 0; o < 2; ++o) {
      double ref = b2[o];
      for (size_t j = 0; j < 4; ++j) ref += h[j] * w2[o * 4 + j];
      EXPECT_NEAR(y[r * 2 + o], ref, 1e-5);
    }
  }
}

TEST(Module, Conv2dModuleShapeAndValues) {
  manual_seed(37);
  nn::Conv2d conv(3, 4, 3, /*stride=*/2, /*padding=*/1);
  EXPECT_EQ(conv.weight.shape(), (Shape{4, 3, 3, 3}));
  const double bound = 1 / std::sqrt(27.0);
  for (double v : f64(conv.weight)) EXPECT_LE(std::fabs(v), bound);
  Tensor x = randn_f32({2, 3, 7, 6}, 38);
  Tensor y = conv(x);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 4, 3}));
  EXPECT_EQ(f64(y), f64(conv2d(x, conv.weight, conv.bias, 2, 1)));
  // Direct f64 reference.
  auto xv = f64(x), w = f64(conv.weight), b = f64(conv.bias), yv = f64(y);
  auto X = [&](int n, int c, int h, int ww) -> double {
    if (h < 0 || h >= 7 || ww < 0 || ww >= 6) return 0;
    return xv[static_cast<size_t>(((n * 3 + c) * 7 + h) * 6 + ww)];
  };
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 4; ++o)
      for (int oh = 0; oh < 4; ++oh)
        for (int ow = 0; ow < 3; ++ow) {
          double ref = b[static_cast<size_t>(o)];
          for (int c = 0; c < 3; ++c)
            for (int kh = 0; kh < 3; ++kh)
              for (int kw = 0; kw < 3; ++kw)
                ref += X(n, c, oh * 2 - 1 + kh, ow * 2 - 1 + kw) * w[static_cast<size_t>(((o * 3 + c) * 3 + kh) * 3 + kw)];
          EXPECT_NEAR(yv[static_cast<size_t>(((n * 4 + o) * 4 + oh) * 3 + ow)], ref, 1e-5);
        }
  nn::Conv2d grouped(4, 6, 3, 1, 1, 1, /*groups=*/2, false);
  EXPECT_EQ(grouped.weight.shape(), (Shape{6, 2, 3, 3}));
  EXPECT_FALSE(grouped.bias.defined());
  EXPECT_EQ(grouped(randn_f32({1, 4, 5, 5}, 39)).shape(), (Shape{1, 6, 5, 5}));
  // nn::Conv2d's constructor takes no Loc (include/alk/nn.h), so its error names layers.cpp,
  // not this line: the op and the values are checked.
  try {
    nn::Conv2d(3, 4, 3, 1, 0, 1, 2);
    ADD_FAILURE() << "groups 2 with 3 input channels was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "Conv2d") << e.what();
    EXPECT_NE(std::string(e.what()).find("groups 2 must divide in_channels 3 and out_channels 4"), std::string::npos)
        << e.what();
  }
}

// ---------------- BatchNorm2d ----------------

struct ChannelStats {
  std::vector<double> mean, var_biased, var_unbiased;
};

ChannelStats channel_stats(const std::vector<double>& x, int N, int C, int HW) {
  ChannelStats s;
  for (int c = 0; c < C; ++c) {
    double m = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) m += x[static_cast<size_t>((n * C + c) * HW + i)];
    const double cnt = N * HW;
    m /= cnt;
    double ss = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        double d = x[static_cast<size_t>((n * C + c) * HW + i)] - m;
        ss += d * d;
      }
    s.mean.push_back(m);
    s.var_biased.push_back(ss / cnt);
    s.var_unbiased.push_back(ss / (cnt - 1));
  }
  return s;
}

TEST(BatchNorm, TrainingNormalizesPerChannelAndUpdatesRunningStatsLikePyTorch) {
  const int N = 4, C = 3, H = 2, W = 3, HW = H * W;
  nn::BatchNorm2d bn(C, 1e-5, 0.1);
  // Channels with very different offsets and scales.
  Tensor scale = tensor(std::vector<float>{1, 5, 0.2f}, {1, C, 1, 1});
  Tensor shift = tensor(std::vector<float>{0, -3, 10}, {1, C, 1, 1});
  Tensor x1 = (randn_f32({N, C, H, W}, 40) * scale + shift).contiguous();
  Tensor x2 = (randn_f32({N, C, H, W}, 41) * scale + shift * 2.0).contiguous();
  auto v1 = f64(x1), v2 = f64(x2);

  auto y = f64(bn(x1));
  auto ys = channel_stats(y, N, C, HW), s1 = channel_stats(v1, N, C, HW);
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(ys.mean[static_cast<size_t>(c)], 0, 1e-5) << c;
    // Normalized by the biased variance: the output's biased variance is var / (var + eps).
    const double vb = s1.var_biased[static_cast<size_t>(c)];
    EXPECT_NEAR(ys.var_biased[static_cast<size_t>(c)], vb / (vb + 1e-5), 1e-4) << c;
  }
  // running = (1 - momentum) * running + momentum * batch stat (unbiased variance).
  std::vector<double> rm(C, 0.0), rv(C, 1.0);
  for (int c = 0; c < C; ++c) {
    rm[static_cast<size_t>(c)] = 0.9 * rm[static_cast<size_t>(c)] + 0.1 * s1.mean[static_cast<size_t>(c)];
    rv[static_cast<size_t>(c)] = 0.9 * rv[static_cast<size_t>(c)] + 0.1 * s1.var_unbiased[static_cast<size_t>(c)];
  }
  auto grm = f64(bn.running_mean), grv = f64(bn.running_var);
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    EXPECT_NEAR(grm[c], rm[c], 1e-5 * (1 + std::fabs(rm[c]))) << c;
    EXPECT_NEAR(grv[c], rv[c], 1e-5 * (1 + std::fabs(rv[c]))) << c;
  }
  bn(x2);
  auto s2 = channel_stats(v2, N, C, HW);
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    rm[c] = 0.9 * rm[c] + 0.1 * s2.mean[c];
    rv[c] = 0.9 * rv[c] + 0.1 * s2.var_unbiased[c];
  }
  grm = f64(bn.running_mean);
  grv = f64(bn.running_var);
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    EXPECT_NEAR(grm[c], rm[c], 1e-5 * (1 + std::fabs(rm[c]))) << c;
    EXPECT_NEAR(grv[c], rv[c], 1e-5 * (1 + std::fabs(rv[c]))) << c;
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThemAlone) {
  const int N = 2, C = 2, HW = 4;
  nn::BatchNorm2d bn(C, 1e-3, 0.5);
  nn::init::normal_(bn.weight, 1, 0.5);
  nn::init::normal_(bn.bias, 0, 0.5);
  bn(randn_f32({8, C, 2, 2}, 42) * 2.0 + 1.0);  // moves the running stats away from (0, 1)
  auto rm = f64(bn.running_mean), rv = f64(bn.running_var), w = f64(bn.weight), b = f64(bn.bias);
  bn.eval();
  Tensor x = randn_f32({N, C, 2, 2}, 43);
  auto xv = f64(x), y = f64(bn(x));
  for (int n = 0; n < N; ++n)
    for (size_t c = 0; c < static_cast<size_t>(C); ++c)
      for (int i = 0; i < HW; ++i) {
        size_t k = (static_cast<size_t>(n) * C + c) * HW + static_cast<size_t>(i);
        EXPECT_NEAR(y[k], (xv[k] - rm[c]) / std::sqrt(rv[c] + 1e-3) * w[c] + b[c], 1e-5);
      }
  EXPECT_EQ(f64(bn.running_mean), rm);
  EXPECT_EQ(f64(bn.running_var), rv);
  // Two eval calls give the same output (no batch statistics involved).
  EXPECT_EQ(f64(bn(x)), y);
}

// ---------------- initializers ----------------

struct Moments {
  double mean, std, max_abs;
};
Moments moments(const Tensor& t) {
  auto v = t.to_vector<double>();
  double m = 0, s = 0, mx = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) {
    s += (x - m) * (x - m);
    mx = std::max(mx, std::fabs(x));
  }
  return {m, std::sqrt(s / static_cast<double>(v.size())), mx};
}

TEST(Init, KaimingUniformBoundsAndStd) {
  manual_seed(50);
  Tensor w = zeros({256, 400});
  nn::init::kaiming_uniform_(w);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 400);
  Moments m = moments(w);
  EXPECT_LE(m.max_abs, bound);
  EXPECT_GT(m.max_abs, 0.99 * bound);
  EXPECT_NEAR(m.std, bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_NEAR(m.mean, 0, 0.01 * bound);
  // Conv weights: fan_in includes the receptive field; a = sqrt(5) is PyTorch's Linear default.
  Tensor k = zeros({64, 16, 3, 3});
  nn::init::kaiming_uniform_(k, std::sqrt(5.0));
  const double kb = std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / 144);  // = 1/sqrt(fan_in)
  EXPECT_NEAR(kb, 1 / std::sqrt(144.0), 1e-12);
  Moments mk = moments(k);
  EXPECT_LE(mk.max_abs, kb);
  EXPECT_GT(mk.max_abs, 0.99 * kb);
}

TEST(Init, KaimingNormalStd) {
  manual_seed(51);
  Tensor w = zeros({200, 500});
  nn::init::kaiming_normal_(w);
  EXPECT_NEAR(moments(w).std, std::sqrt(2.0 / 500), 0.02 * std::sqrt(2.0 / 500));
}

TEST(Init, NormalMeanAndStdOver100kSamples) {
  manual_seed(52);
  Tensor w = zeros({100000});
  nn::init::normal_(w, 3.0, 2.0);
  Moments m = moments(w);
  // Standard errors: 2/sqrt(1e5) = 0.0063 for the mean, ~0.0045 for the std.
  EXPECT_NEAR(m.mean, 3.0, 0.03);
  EXPECT_NEAR(m.std, 2.0, 0.025);
  Tensor d = zeros({100000}, DType::F64);
  nn::init::normal_(d, -1.0, 0.5);
  EXPECT_EQ(d.dtype(), DType::F64);
  Moments md = moments(d);
  EXPECT_NEAR(md.mean, -1.0, 0.008);
  EXPECT_NEAR(md.std, 0.5, 0.007);
}

TEST(Init, UniformXavierBounds) {
  manual_seed(53);
  Tensor u = zeros({50000});
  nn::init::uniform_(u, -2, 6);
  Moments mu = moments(u);
  auto uv = f64(u);
  EXPECT_GE(*std::min_element(uv.begin(), uv.end()), -2.0);
  EXPECT_LT(*std::max_element(uv.begin(), uv.end()), 6.0);
  EXPECT_NEAR(mu.mean, 2.0, 0.06);
  EXPECT_NEAR(mu.std, 8 / std::sqrt(12.0), 0.03);

  Tensor w = zeros({300, 200});
  nn::init::xavier_uniform_(w, 2.0);
  const double bound = 2.0 * std::sqrt(6.0 / 500);
  Moments m = moments(w);
  EXPECT_LE(m.max_abs, bound);
  EXPECT_GT(m.max_abs, 0.99 * bound);
  EXPECT_NEAR(m.std, bound / std::sqrt(3.0), 0.01 * bound);

  Tensor n = zeros({300, 200});
  nn::init::xavier_normal_(n, 1.0);
  EXPECT_NEAR(moments(n).std, std::sqrt(2.0 / 500), 0.02 * std::sqrt(2.0 / 500));
  Tensor z = randn_f32({3, 3}, 1), o = randn_f32({3, 3}, 2);
  nn::init::zeros_(z);
  nn::init::ones_(o);
  EXPECT_EQ(f64(z), std::vector<double>(9, 0.0));
  EXPECT_EQ(f64(o), std::vector<double>(9, 1.0));
}

TEST(Init, DeterministicUnderManualSeed) {
  Tensor a = zeros({1000}), b = zeros({1000}), c = zeros({1000});
  manual_seed(77);
  nn::init::normal_(a);
  nn::init::normal_(c);  // the generator moved on
  manual_seed(77);
  nn::init::normal_(b);
  EXPECT_EQ(f64(a), f64(b));
  EXPECT_NE(f64(a), f64(c));
  manual_seed(78);
  nn::init::normal_(b);
  EXPECT_NE(f64(a), f64(b));
  // Whole modules too.
  manual_seed(5);
  nn::GPT g1(small_gpt());
  manual_seed(5);
  nn::GPT g2(small_gpt());
  auto p1 = g1.state_dict(), p2 = g2.state_dict();
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_EQ(f64(p1[i].second), f64(p2[i].second)) << p1[i].first;
}

TEST(Init, InitKeepsHandlesAndAutogradIdentity) {
  manual_seed(54);
  nn::Linear lin(4, 4);
  Tensor alias = lin.weight;  // another holder of the same parameter
  nn::init::kaiming_uniform_(lin.weight);
  EXPECT_EQ(f64(alias), f64(lin.weight));
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_TRUE(lin.weight.is_leaf());
  EXPECT_EQ(lin.named_parameters()[0].second.impl(), lin.weight.impl());
}

}  // namespace
}  // namespace alk
