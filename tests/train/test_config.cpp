// config.json <-> train::Config: round trip, partial files, unknown keys and invalid values.
#include <string>

#include "alk/nn.h"
#include "alk/train.h"
#include "train/job.h"
#include "testing.h"

namespace alk {
namespace {

std::string error_of(const std::string& json, const train::Config& base = {}) {
  try {
    train::config_from_json(json, base);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, RoundTripKeepsEveryField) {
  train::Config c;
  c.task = "mnist";
  c.corpus = "some \"quoted\" path/ü.txt";
  c.data = "/data/mnist";
  c.out = "runs/x";
  c.device = "cpu";
  c.seed = 987654321012345ull;
  c.steps = 12;
  c.batch = 3;
  c.ctx = 32;
  c.dim = 48;
  c.heads = 6;
  c.layers = 5;
  c.vocab_size = 777;
  c.dropout = 0.125;
  c.lr = 3.3e-4;
  c.min_lr = 1e-5;
  c.weight_decay = 0.01;
  c.grad_clip = 0.0;
  c.warmup = 7;
  c.val_fraction = 0.2;
  c.eval_every = 9;
  c.eval_batches = 2;
  c.ckpt_every = 11;
  c.log_every = 1;
  c.sample_tokens = 0;
  const std::string text = train::config_to_json(c);
  train::Config r = train::config_from_json(text, train::Config{});
  EXPECT_EQ(r.task, c.task);
  EXPECT_EQ(r.corpus, c.corpus);
  EXPECT_EQ(r.data, c.data);
  EXPECT_EQ(r.out, c.out);
  EXPECT_EQ(r.device, c.device);
  EXPECT_EQ(r.seed, c.seed);
  EXPECT_EQ(r.steps, c.steps);
  EXPECT_EQ(r.batch, c.batch);
  EXPECT_EQ(r.ctx, c.ctx);
  EXPECT_EQ(r.dim, c.dim);
  EXPECT_EQ(r.heads, c.heads);
  EXPECT_EQ(r.layers, c.layers);
  EXPECT_EQ(r.vocab_size, c.vocab_size);
  EXPECT_EQ(r.dropout, c.dropout);
  EXPECT_EQ(r.lr, c.lr);  // doubles round-trip exactly
  EXPECT_EQ(r.min_lr, c.min_lr);
  EXPECT_EQ(r.weight_decay, c.weight_decay);
  EXPECT_EQ(r.grad_clip, c.grad_clip);
  EXPECT_EQ(r.warmup, c.warmup);
  EXPECT_EQ(r.val_fraction, c.val_fraction);
  EXPECT_EQ(r.eval_every, c.eval_every);
  EXPECT_EQ(r.eval_batches, c.eval_batches);
  EXPECT_EQ(r.ckpt_every, c.ckpt_every);
  EXPECT_EQ(r.log_every, c.log_every);
  EXPECT_EQ(r.sample_tokens, c.sample_tokens);
  // Serializing again gives the same text.
  EXPECT_EQ(train::config_to_json(r), text);
}

// The model's family: the LLaMA fields round-trip and become the nn::GPTConfig the run builds.
TEST(Config, LlamaModelFieldsRoundTripIntoTheModelConfig) {
  train::Config c;
  c.heads = 4, c.kv_heads = 2, c.mlp_hidden = 200, c.norm = "rmsnorm", c.norm_eps = 1e-6, c.positions = "rotary";
  c.rope_theta = 500000, c.rope_scaling = "llama3", c.rope_factor = 8, c.rope_low_freq_factor = 1.5;
  c.rope_high_freq_factor = 3, c.rope_original_context = 64, c.mlp = "swiglu", c.bias = false, c.qkv_bias = true;
  c.tie_embeddings = false;
  const std::string text = train::config_to_json(c);
  const train::Config r = train::config_from_json(text, train::Config{});
  EXPECT_EQ(train::config_to_json(r), text);
  const nn::GPTConfig g = train::gpt_config(r, 300);
  EXPECT_EQ(g.vocab, 300);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.mlp_hidden, 200);
  EXPECT_EQ(g.norm, nn::NormKind::RMSNorm);
  EXPECT_EQ(g.norm_eps, 1e-6);
  EXPECT_EQ(g.positions, nn::PositionKind::Rotary);
  EXPECT_EQ(g.rope_theta, 500000);
  EXPECT_EQ(g.rope_scaling.type, "llama3");
  EXPECT_EQ(g.rope_scaling.factor, 8);
  EXPECT_EQ(g.rope_scaling.low_freq_factor, 1.5);
  EXPECT_EQ(g.rope_scaling.high_freq_factor, 3);
  EXPECT_EQ(g.rope_scaling.original_context, 64);
  EXPECT_EQ(g.mlp, nn::MLPKind::SwiGLU);
  EXPECT_FALSE(g.bias);
  EXPECT_TRUE(g.qkv_bias);
  EXPECT_FALSE(g.tie_embeddings);
  // GPT-2 by default.
  const nn::GPTConfig d = train::gpt_config(train::Config{}, 256);
  EXPECT_EQ(d.norm, nn::NormKind::LayerNorm);
  EXPECT_EQ(d.positions, nn::PositionKind::Learned);
  EXPECT_EQ(d.mlp, nn::MLPKind::GELUTanh);
  EXPECT_TRUE(d.bias && d.tie_embeddings && !d.qkv_bias);
  EXPECT_NE(error_of(R"({"norm": "batchnorm"})").find("norm must be layernorm or rmsnorm"), std::string::npos);
  EXPECT_NE(error_of(R"({"rope_scaling": "yarn"})").find("yarn"), std::string::npos);
  EXPECT_NE(error_of(R"({"heads": 4, "kv_heads": 3})").find("kv_heads 3"), std::string::npos);
}

TEST(Config, MissingKeysKeepTheBase) {
  train::Config base;
  base.dim = 64;
  base.heads = 8;
  base.lr = 0.5;
  train::Config r = train::config_from_json(R"({"steps": 5, "dim": 32})", base);
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(r.dim, 32);
  EXPECT_EQ(r.heads, 8);
  EXPECT_EQ(r.lr, 0.5);
  EXPECT_EQ(r.task, "gpt");
  // An integer is accepted for a float field.
  EXPECT_EQ(train::config_from_json(R"({"lr": 1})", base).lr, 1.0);
}

TEST(Config, UnknownKeyIsNamed) {
  std::string m = error_of(R"({"steps": 5, "learning_rate": 0.1})");
  EXPECT_NE(m.find("learning_rate"), std::string::npos) << m;
}

TEST(Config, InvalidValuesAreRefused) {
  std::string m = error_of(R"({"dim": 30, "heads": 4})");
  EXPECT_NE(m.find("30"), std::string::npos) << m;
  EXPECT_NE(m.find("heads"), std::string::npos) << m;
  m = error_of(R"({"steps": -1})");
  EXPECT_NE(m.find("steps"), std::string::npos) << m;
  m = error_of(R"({"task": "foo"})");
  EXPECT_NE(m.find("foo"), std::string::npos) << m;
  EXPECT_NE(error_of(R"({"batch": 0})"), "");
  EXPECT_NE(error_of(R"({"heads": 0})"), "");
  EXPECT_NE(error_of(R"({"vocab_size": 100})"), "");
  EXPECT_NE(error_of(R"({"ctx": 0})"), "");
  // Wrong JSON types name the key.
  m = error_of(R"({"steps": "ten"})");
  EXPECT_NE(m.find("steps"), std::string::npos) << m;
  m = error_of(R"({"lr": "fast"})");
  EXPECT_NE(m.find("lr"), std::string::npos) << m;
  m = error_of(R"({"steps": 2.5})");
  EXPECT_NE(m.find("steps"), std::string::npos) << m;
  // Not an object / not JSON.
  EXPECT_NE(error_of("[1, 2]"), "");
  EXPECT_NE(error_of("{\"steps\": "), "");
  // A valid config parses.
  EXPECT_EQ(error_of(R"({"dim": 32, "heads": 4, "steps": 0})"), "");
}

}  // namespace
}  // namespace alk
