// Hugging Face directories: config.json -> GPTConfig (GPT-2, LLaMA with GQA and llama3 rope
// scaling, Qwen2), refused configs naming the field, the weight-name mapping checked against
// shapes computed here from the config, a sharded bf16 LLaMA checkpoint assembled into alk's
// parameters, and a GPT-2 written in transformers' layout and read back with equal logits.
// The fixtures made by transformers itself (tests/fixtures/hf) are used by
// test_hf_fixtures.cpp.
#include <gtest/gtest.h>

#include "alk/alk.h"
#include "alk/io.h"
#include "alk/pretrained.h"
#include "graph/graph.h"
#include "io/temp_dir.h"

namespace alk {
namespace {

using testing::TempDir;
using testing::write_file;

const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
  "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 128, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 32, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.46.0", "use_cache": true, "vocab_size": 512})";

const char* kQwen2Config = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": [1, 2],
  "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
  "max_position_embeddings": 128, "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "sliding_window": 128, "tie_word_embeddings": true, "torch_dtype": "float16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 300})";

const char* kGpt2Config = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 0,
  "embd_pdrop": 0.1, "eos_token_id": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_inner": null, "n_layer": 2, "n_positions": 128,
  "reorder_and_upcast_attn": false, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false,
  "scale_attn_weights": true, "summary_activation": null, "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
  "torch_dtype": "float32", "transformers_version": "4.46.0", "use_cache": true, "vocab_size": 512})";

TEST(HfConfig, LlamaWithGqaAndLlama3Scaling) {
  HfModelInfo info;
  const nn::GPTConfig g = gpt_config_from_hf(kLlamaConfig, "llama/config.json", &info);
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.torch_dtype, "bfloat16");
  EXPECT_EQ(info.bos_id, 1);
  EXPECT_EQ(info.eos_ids, std::vector<int32_t>{2});
  EXPECT_EQ(g.vocab, 512);
  EXPECT_EQ(g.ctx, 128);
  EXPECT_EQ(g.dim, 64);
  EXPECT_EQ(g.heads, 4);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.layers, 2);
  EXPECT_EQ(g.mlp_hidden, 160);
  EXPECT_EQ(g.norm, nn::NormKind::RMSNorm);
  EXPECT_DOUBLE_EQ(g.norm_eps, 1e-5);
  EXPECT_EQ(g.positions, nn::PositionKind::Rotary);
  EXPECT_DOUBLE_EQ(g.rope_theta, 500000.0);
  EXPECT_EQ(g.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(g.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(g.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(g.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(g.rope_scaling.original_context, 32);
  EXPECT_EQ(g.mlp, nn::MLPKind::SwiGLU);
  EXPECT_FALSE(g.bias);
  EXPECT_FALSE(g.qkv_bias);
  EXPECT_FALSE(g.tie_embeddings);
}

TEST(HfConfig, Qwen2HasQkvBiasesAndTiedHead) {
  HfModelInfo info;
  const nn::GPTConfig g = gpt_config_from_hf(kQwen2Config, "qwen2/config.json", &info);
  EXPECT_EQ(info.model_type, "qwen2");
  EXPECT_EQ(info.eos_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(g.qkv_bias);
  EXPECT_FALSE(g.bias);
  EXPECT_TRUE(g.tie_embeddings);
  EXPECT_EQ(g.rope_scaling.type, "");
  EXPECT_DOUBLE_EQ(g.norm_eps, 1e-6);
}

TEST(HfConfig, Gpt2) {
  const nn::GPTConfig g = gpt_config_from_hf(kGpt2Config, "gpt2/config.json");
  EXPECT_EQ(g.norm, nn::NormKind::LayerNorm);
  EXPECT_EQ(g.positions, nn::PositionKind::Learned);
  EXPECT_EQ(g.mlp, nn::MLPKind::GELUTanh);
  EXPECT_EQ(g.mlp_hidden, 256);
  EXPECT_TRUE(g.bias);
  EXPECT_TRUE(g.tie_embeddings);
  EXPECT_EQ(g.ctx, 128);
}

std::string edited(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

void expect_config_refused(const std::string& text, const std::string& needle) {
  try {
    gpt_config_from_hf(text, "m/config.json");
    ADD_FAILURE() << "accepted a config that should fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m/config.json"), std::string::npos) << e.what();
  }
}

TEST(HfConfig, UnsupportedFieldsAreErrorsNamingThem) {
  expect_config_refused("{", "m/config.json");
  expect_config_refused(edited(kLlamaConfig, R"("use_cache": true,)", R"("use_cache": true, "fancy_option": 3,)"),
                        "\"fancy_option\"");
  expect_config_refused(edited(kLlamaConfig, R"("hidden_act": "silu")", R"("hidden_act": "gelu")"), "\"hidden_act\"");
  expect_config_refused(edited(kLlamaConfig, R"("rope_type": "llama3")", R"("rope_type": "yarn")"), "rope type 'yarn'");
  expect_config_refused(edited(kLlamaConfig, R"("attention_bias": false)", R"("attention_bias": true)"),
                        "\"attention_bias\"");
  expect_config_refused(edited(kLlamaConfig, R"("head_dim": 16)", R"("head_dim": 32)"), "\"head_dim\"");
  expect_config_refused(edited(kLlamaConfig, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)"),
                        "\"num_key_value_heads\"");
  expect_config_refused(edited(kLlamaConfig, R"("hidden_size": 64)", R"("hidden_size": "64")"), "\"hidden_size\"");
  expect_config_refused(edited(kLlamaConfig, R"("model_type": "llama")", R"("model_type": "mamba")"), "'mamba'");
  expect_config_refused(edited(kLlamaConfig, R"(["LlamaForCausalLM"])", R"(["LlamaForSequenceClassification"])"),
                        "\"architectures\"");
  expect_config_refused(edited(kQwen2Config, R"("use_sliding_window": false)", R"("use_sliding_window": true)"),
                        "\"use_sliding_window\"");
  expect_config_refused(edited(kGpt2Config, R"("activation_function": "gelu_new")", R"("activation_function": "relu")"),
                        "\"activation_function\"");
  expect_config_refused(edited(kGpt2Config, R"("vocab_size": 512)", R"("vocab_size": 0)"), "\"vocab_size\"");
  // Mistral's sliding window: refused only when shorter than the context.
  const std::string mistral =
      edited(edited(edited(edited(kLlamaConfig, R"("model_type": "llama")", R"("model_type": "mistral")"),
                           R"(["LlamaForCausalLM"])", R"(["MistralForCausalLM"])"),
                    R"("attention_bias": false, )", ""),
             R"("mlp_bias": false,)", "");
  EXPECT_NO_THROW(gpt_config_from_hf(edited(mistral, R"("pretraining_tp": 1,)", R"("sliding_window": 4096,)"), "m"));
  expect_config_refused(edited(mistral, R"("pretraining_tp": 1,)", R"("sliding_window": 64,)"), "\"sliding_window\"");
}

TEST(HfConfig, GenerationDefaults) {
  HfModelInfo info;
  gpt_config_from_hf(kQwen2Config, "qwen2/config.json", &info);
  GenerationDefaults d = generation_defaults_from_hf("", info, "none");
  EXPECT_EQ(d.eos_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(d.do_sample);
  d = generation_defaults_from_hf(R"({"eos_token_id": 7, "do_sample": true, "temperature": 0.7, "top_p": 0.8,
                                      "top_k": 20, "transformers_version": "4.46.0"})",
                                  info, "generation_config.json");
  EXPECT_EQ(d.eos_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(d.do_sample);
  EXPECT_DOUBLE_EQ(d.temperature, 0.7);
  EXPECT_DOUBLE_EQ(d.top_p, 0.8);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_THROW(generation_defaults_from_hf(R"({"top_p": 2})", info, "g"), Error);
}

// alk's parameter shapes for a config, written out from nn.h's naming comment.
std::map<std::string, Shape> alk_parameter_shapes(const nn::GPTConfig& g) {
  const int64_t hd = g.dim / g.heads, kv = g.kv_heads ? g.kv_heads : g.heads;
  const int64_t hidden = g.mlp_hidden ? g.mlp_hidden : 4 * g.dim;
  const bool swiglu = g.mlp == nn::MLPKind::SwiGLU, layer_norm = g.norm == nn::NormKind::LayerNorm;
  std::map<std::string, Shape> s;
  s["wte.weight"] = {g.vocab, g.dim};
  if (g.positions == nn::PositionKind::Learned) s["wpe.weight"] = {g.ctx, g.dim};
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* ln : {"ln1", "ln2"}) {
      s[b + ln + ".weight"] = {g.dim};
      if (layer_norm && g.bias) s[b + ln + ".bias"] = {g.dim};
    }
    s[b + "attn.qkv.weight"] = {(g.heads + 2 * kv) * hd, g.dim};
    if (g.bias || g.qkv_bias) s[b + "attn.qkv.bias"] = {(g.heads + 2 * kv) * hd};
    s[b + "attn.proj.weight"] = {g.dim, g.heads * hd};
    if (g.bias) s[b + "attn.proj.bias"] = {g.dim};
    s[b + "mlp.fc.weight"] = {swiglu ? 2 * hidden : hidden, g.dim};
    if (g.bias) s[b + "mlp.fc.bias"] = {hidden};
    s[b + "mlp.proj.weight"] = {g.dim, hidden};
    if (g.bias) s[b + "mlp.proj.bias"] = {g.dim};
  }
  s["ln_f.weight"] = {g.dim};
  if (layer_norm && g.bias) s["ln_f.bias"] = {g.dim};
  if (!g.tie_embeddings) s["head.weight"] = {g.vocab, g.dim};
  return s;
}

// transformers' key -> shape for a LLaMA-family model (what its state_dict holds).
std::map<std::string, Shape> llama_hf_shapes(const nn::GPTConfig& g) {
  const int64_t hd = g.dim / g.heads, kv = g.kv_heads;
  std::map<std::string, Shape> s;
  s["model.embed_tokens.weight"] = {g.vocab, g.dim};
  for (int64_t i = 0; i < g.layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    s[l + "input_layernorm.weight"] = {g.dim};
    s[l + "post_attention_layernorm.weight"] = {g.dim};
    s[l + "self_attn.q_proj.weight"] = {g.heads * hd, g.dim};
    s[l + "self_attn.k_proj.weight"] = {kv * hd, g.dim};
    s[l + "self_attn.v_proj.weight"] = {kv * hd, g.dim};
    if (g.qkv_bias) {
      s[l + "self_attn.q_proj.bias"] = {g.heads * hd};
      s[l + "self_attn.k_proj.bias"] = {kv * hd};
      s[l + "self_attn.v_proj.bias"] = {kv * hd};
    }
    s[l + "self_attn.o_proj.weight"] = {g.dim, g.heads * hd};
    s[l + "mlp.gate_proj.weight"] = {g.mlp_hidden, g.dim};
    s[l + "mlp.up_proj.weight"] = {g.mlp_hidden, g.dim};
    s[l + "mlp.down_proj.weight"] = {g.dim, g.mlp_hidden};
  }
  s["model.norm.weight"] = {g.dim};
  if (!g.tie_embeddings) s["lm_head.weight"] = {g.vocab, g.dim};
  return s;
}

TEST(HfWeights, MapCoversEveryParameterAndKey) {
  for (const char* config : {kLlamaConfig, kQwen2Config, kGpt2Config}) {
    HfModelInfo info;
    const nn::GPTConfig g = gpt_config_from_hf(config, "config.json", &info);
    const std::vector<HfWeight> map = hf_weight_map(g, info, info.model_type == "gpt2" ? "transformer." : "model.");
    const std::map<std::string, Shape> want = alk_parameter_shapes(g);
    std::set<std::string> names;
    for (const HfWeight& w : map) {
      ASSERT_TRUE(want.count(w.name)) << info.model_type << ": " << w.name;
      int64_t rows = 0;
      for (auto& [key, r] : w.hf) rows += r;
      EXPECT_EQ(rows, want.at(w.name)[0]) << w.name;
      names.insert(w.name);
    }
    EXPECT_EQ(names.size(), want.size()) << info.model_type;
    if (info.model_type != "gpt2") {
      std::set<std::string> keys;
      for (const HfWeight& w : map)
        for (auto& [key, r] : w.hf) keys.insert(key);
      std::set<std::string> hf_keys;
      for (auto& [key, shape] : llama_hf_shapes(g)) hf_keys.insert(key);
      EXPECT_EQ(keys, hf_keys) << info.model_type;
    }
  }
}

// A sharded bf16 LLaMA checkpoint with transformers' names and shapes, random values.
void write_llama_checkpoint(const TempDir& dir, const nn::GPTConfig& g) {
  manual_seed(11);
  std::vector<std::pair<std::string, Tensor>> first, second;
  std::string weight_map;
  int i = 0;
  for (auto& [key, shape] : llama_hf_shapes(g)) {
    const bool in_first = i++ % 2 == 0;
    (in_first ? first : second).emplace_back(key, randn(shape).to(DType::BF16));
    weight_map += std::string(weight_map.empty() ? "" : ", ") + "\"" + key + "\": \"model-0000" +
                  (in_first ? "1" : "2") + "-of-00002.safetensors\"";
  }
  save_safetensors(dir / "model-00001-of-00002.safetensors", first, {{"format", "pt"}});
  save_safetensors(dir / "model-00002-of-00002.safetensors", second, {{"format", "pt"}});
  write_file(dir / "model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {" + weight_map + "}}");
}

// The state dict alk would load from a sharded LLaMA: every parameter assembled from its
// parts (q | k | v rows, gate | up rows) in the file's dtype, with the parameter's shape.
TEST(HfWeights, ShardedLlamaAssemblesIntoAlkParameters) {
  TempDir dir;
  HfModelInfo info;
  const nn::GPTConfig g = gpt_config_from_hf(kLlamaConfig, "config.json", &info);
  write_llama_checkpoint(dir, g);
  const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir.path());
  EXPECT_EQ(hf_key_prefix(info, ckpt), "model.");
  const std::map<std::string, Shape> want = alk_parameter_shapes(g);
  for (const HfWeight& w : hf_weight_map(g, info, "model.")) {
    const Tensor t = read_hf_weight(ckpt, w, cpu_device());
    EXPECT_EQ(t.dtype(), DType::BF16) << w.name;
    EXPECT_EQ(t.shape(), want.at(w.name)) << w.name;
    int64_t row = 0;
    for (auto& [key, rows] : w.hf) {  // each part where the mapping puts it
      EXPECT_EQ(host_bytes(t.slice(0, row, row + rows)), host_bytes(ckpt.read(key, cpu_device()))) << key;
      row += rows;
    }
  }
  // A part with the wrong shape is refused by name.
  TempDir bad;
  save_safetensors(bad / "model.safetensors", {{"model.layers.0.self_attn.k_proj.weight", zeros({64, 64})}});
  const SafetensorsCheckpoint wrong = SafetensorsCheckpoint::open(bad.path());
  const HfWeight qkv = hf_weight_map(g, info, "model.")[2];
  ASSERT_EQ(qkv.name, "blocks.0.attn.qkv.weight");
  EXPECT_THROW(read_hf_weight(wrong, qkv, cpu_device()), Error);
}

// The transformers-made LLaMA (sharded bf16, GQA, untied) and Qwen2 (f16, q/k/v biases, tied)
// fixtures: every alk parameter assembled from their files has the shape the config gives,
// in the file's dtype, and every tensor of the files is used.
TEST(HfWeights, LlamaAndQwen2FixturesAssembleIntoAlkShapes) {
  for (const char* model : {"llama", "qwen2"}) {
    const std::string dir = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/hf/" + model;
    HfModelInfo info;
    const nn::GPTConfig g = gpt_config_from_hf(testing::read_file(dir + "/config.json"), dir, &info);
    const SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(dir);
    EXPECT_EQ(ckpt.files().size(), std::string(model) == "llama" ? 3u : 1u);
    const std::map<std::string, Shape> want = alk_parameter_shapes(g);
    std::set<std::string> used;
    size_t params = 0;
    for (const HfWeight& w : hf_weight_map(g, info, hf_key_prefix(info, ckpt))) {
      const Tensor t = read_hf_weight(ckpt, w, cpu_device());
      EXPECT_EQ(t.shape(), want.at(w.name)) << model << ": " << w.name;
      EXPECT_EQ(t.dtype(), std::string(model) == "llama" ? DType::BF16 : DType::F16) << w.name;
      for (auto& [key, rows] : w.hf) used.insert(key);
      ++params;
    }
    EXPECT_EQ(params, want.size()) << model;
    const std::vector<std::string> names = ckpt.names();
    EXPECT_EQ(used, std::set<std::string>(names.begin(), names.end())) << model;
  }
}

// A tiny GPT-2 with a BPE trained on a few sentences, in alk's layout.
struct TinyGpt2 {
  nn::GPTConfig cfg;
  std::shared_ptr<nn::GPT> model;
  Tokenizer tok;
  TinyGpt2() {
    tok = Tokenizer::train("the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs! 1234 ",
                           300, {"<|endoftext|>"});
    cfg.vocab = tok.vocab_size();
    cfg.ctx = 32;
    cfg.dim = 32;
    cfg.heads = 4;
    cfg.layers = 2;
    manual_seed(5);
    model = std::make_shared<nn::GPT>(cfg);
    model->eval();
  }
};

TEST(Pretrained, Gpt2WrittenInTransformersLayoutAndReadBack) {
  TinyGpt2 t;
  TempDir dir;
  HfModelInfo info;
  info.model_type = "gpt2";
  info.eos_ids = {*t.tok.token_id("<|endoftext|>")};
  save_pretrained(*t.model, info, dir.path());
  write_file(dir / "tokenizer.json", t.tok.to_tokenizer_json());

  // transformers' names and Conv1D layout on disk, with the metadata it requires.
  const SafetensorsReader file(dir / "model.safetensors");
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  const Tensor c_attn = file.read("transformer.h.1.attn.c_attn.weight", cpu_device());
  EXPECT_EQ(c_attn.shape(), (Shape{32, 96}));
  EXPECT_EQ(host_bytes(c_attn), host_bytes(t.model->blocks[1]->attn->qkv->weight.t()));
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);  // tied, as transformers saves GPT-2
  EXPECT_NE(file.find("transformer.wpe.weight"), nullptr);

  const Pretrained p = load_pretrained(dir.path(), "cpu");
  EXPECT_EQ(p.info.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(p.generation.eos_ids, info.eos_ids);
  const std::string text = "the lazy fox sleeps<|endoftext|>the dog";
  EXPECT_EQ(p.tokenizer.encode(text, true), t.tok.encode(text));
  const std::vector<int32_t> ids32 = t.tok.encode(text);
  const std::vector<int64_t> ids(ids32.begin(), ids32.end());
  const Tensor x = tensor(ids, {1, static_cast<int64_t>(ids.size())});
  EXPECT_EQ((*p.model)(x).to_vector<float>(), (*t.model)(x).to_vector<float>());
}

TEST(Pretrained, Bf16ExportKeepsKeysAndCastsValues) {
  TinyGpt2 t;
  TempDir dir;
  HfModelInfo info;
  info.model_type = "gpt2";
  save_pretrained(*t.model, info, dir.path(), "", DType::BF16);
  const SafetensorsReader file(dir / "model.safetensors");
  const Tensor wte = file.read("transformer.wte.weight", cpu_device());
  EXPECT_EQ(wte.dtype(), DType::BF16);
  EXPECT_EQ(host_bytes(wte), host_bytes(t.model->wte->weight.to(DType::BF16)));
  HfModelInfo back;
  gpt_config_from_hf(testing::read_file(dir / "config.json"), "config.json", &back);
  EXPECT_EQ(back.torch_dtype, "bfloat16");
}

TEST(Pretrained, MissingAndUnexpectedWeightsAreErrorsNamingTheKey) {
  TinyGpt2 t;
  TempDir dir;
  HfModelInfo info;
  info.model_type = "gpt2";
  save_pretrained(*t.model, info, dir.path());
  write_file(dir / "tokenizer.json", t.tok.to_tokenizer_json());
  nn::NamedTensors state = hf_state_dict(*t.model, info);
  auto expect_refused = [&](const nn::NamedTensors& tensors, const std::string& needle) {
    save_safetensors(dir / "model.safetensors", tensors);
    try {
      load_pretrained(dir.path(), "cpu");
      ADD_FAILURE() << "loaded weights that should fail with '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nn::NamedTensors missing(state.begin() + 1, state.end());
  expect_refused(missing, "transformer.wte.weight");
  nn::NamedTensors extra = state;
  extra.emplace_back("transformer.h.0.attn.surprise", zeros({2}));
  expect_refused(extra, "transformer.h.0.attn.surprise");
  // GPT-2's mask buffers, which transformers may save, are skipped.
  nn::NamedTensors masks = state;
  masks.emplace_back("transformer.h.0.attn.bias", ones({1, 1, 32, 32}));
  save_safetensors(dir / "model.safetensors", masks);
  EXPECT_NO_THROW(load_pretrained(dir.path(), "cpu"));
}

}  // namespace
}  // namespace alk
