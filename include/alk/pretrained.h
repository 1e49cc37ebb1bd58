// Hugging Face model directories (what transformers' save_pretrained writes) loaded into
// alk's GPT and written back:
//   config.json                     the architecture (gpt_config_from_hf)
//   model.safetensors, or shards with model.safetensors.index.json   the weights, f32/f16/bf16
//   tokenizer.json (+ tokenizer_config.json)   Tokenizer::load_tokenizer_json
//   generation_config.json          GenerationDefaults (eos ids, sampling settings)
// Architectures: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM
// (a sliding window shorter than the context is refused).
//
//   alk::Pretrained p = alk::load_pretrained("tiny-llama", "cuda:0");
//   std::vector<int32_t> ids = p.tokenizer.encode("Hello", true);   // with the BOS
//   alk::Tensor logits = (*p.model)(alk::tensor(...));
//
// Weight names: alk's (nn.h, above GPTConfig) from transformers' both ways: GPT-2's Conv1D
// weights ([in, out]) are transposed, its fused c_attn is alk's qkv; LLaMA's q/k/v_proj rows
// are concatenated into qkv (they are in the rotate-half layout alk's rotary uses, so
// nothing is permuted), gate_proj/up_proj into mlp.fc. Buffers transformers saves and
// recomputes (GPT-2's attn.bias masks, rotary_emb.inv_freq) are skipped.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alk/io.h"
#include "alk/nn.h"
#include "alk/tokenizer.h"

namespace alk {

// What config.json says beyond GPTConfig.
struct HfModelInfo {
  std::string architecture;  // "GPT2LMHeadModel", "LlamaForCausalLM", ...
  std::string model_type;    // "gpt2", "llama", "qwen2", "mistral"
  std::string torch_dtype;   // "float32", "bfloat16", "float16" or "" when not given
  std::optional<int32_t> bos_id, pad_id;
  std::vector<int32_t> eos_ids;
};

// generation_config.json over config.json's token ids; transformers' defaults where unset.
struct GenerationDefaults {
  std::vector<int32_t> eos_ids;  // generation ends after any of these
  std::optional<int32_t> bos_id, pad_id;
  bool do_sample = false;  // false: greedy
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 50;
  int64_t max_new_tokens = 0;  // 0: not given
  double repetition_penalty = 1.0;
};

// config.json's text -> alk's model config. A field alk does not know, or a value it cannot
// run (another activation, attention biases on the output projection, a sliding window), is
// an alk::Error naming `source` and the field. info: what else the file says.
nn::GPTConfig gpt_config_from_hf(std::string_view config_json, const std::string& source, HfModelInfo* info = nullptr,
                                 Loc loc = Loc::current());
// The config.json transformers reads for cfg as info.model_type ("gpt2", "llama", "qwen2",
// "mistral"); torch_dtype is the dtype the weights are written in.
std::string gpt_config_to_hf(const nn::GPTConfig& cfg, const HfModelInfo& info, Loc loc = Loc::current());
// generation_config.json's text ("" for none) over info's token ids.
GenerationDefaults generation_defaults_from_hf(std::string_view generation_config_json, const HfModelInfo& info,
                                               const std::string& source, Loc loc = Loc::current());

// One alk parameter and the Hugging Face tensors it is made of: rows of the alk weight, in
// order, from each key (a Conv1D weight, stored [in, out], transposed first).
struct HfWeight {
  std::string name;                                // alk's
  std::vector<std::pair<std::string, int64_t>> hf;  // (key, rows it gives)
  bool transposed = false;
};
// The mapping for a model of this config and type, in parameter order. prefix: the keys'
// prefix ("transformer." for GPT2LMHeadModel, "model." for the LLaMA family).
std::vector<HfWeight> hf_weight_map(const nn::GPTConfig& cfg, const HfModelInfo& info, const std::string& prefix);

// The prefix of the checkpoint's keys ("transformer.", "" for a bare GPT2Model, "model.").
std::string hf_key_prefix(const HfModelInfo& info, const SafetensorsCheckpoint& ckpt);
// The alk tensor w makes from ckpt's tensors (rows concatenated, Conv1D weights transposed),
// on device in the file's dtype; a missing or misshapen part is an alk::Error naming its key.
Tensor read_hf_weight(const SafetensorsCheckpoint& ckpt, const HfWeight& w, Device& device, Loc loc = Loc::current());

// Reads the checkpoint in dir (single or sharded) into model's parameters, each tensor
// straight to the parameter's device in the file's dtype, then cast: host memory holds one
// staging buffer, never the checkpoint. Missing, unexpected or misshapen tensors are an
// alk::Error naming the key.
void load_hf_weights(nn::GPT& model, const HfModelInfo& info, const std::string& dir, Loc loc = Loc::current());
// The tensors transformers would load for model (its key names and layouts), as model's
// parameters' values; dtype: cast to it (F32, BF16, F16).
nn::NamedTensors hf_state_dict(const nn::GPT& model, const HfModelInfo& info, DType dtype = DType::F32,
                               Loc loc = Loc::current());

struct Pretrained {
  std::shared_ptr<nn::GPT> model;  // in eval mode, on the device asked for
  Tokenizer tokenizer;
  std::string chat_template;  // tokenizer_config.json's (a Jinja template), "" when none
  GenerationDefaults generation;
  HfModelInfo info;
};

// True when dir has a config.json naming a model_type (a Hugging Face directory, not an alk
// run directory).
bool is_hf_model_dir(const std::string& dir);
// config.json, the weights, tokenizer.json and generation_config.json of dir. device: a
// registry spec ("cpu", "cuda:0", "auto"); "" the default device. The parameters are f32.
Pretrained load_pretrained(const std::string& dir, const std::string& device = "", Loc loc = Loc::current());
// The tokenizer files of an HF directory (tokenizer.json, tokenizer_config.json) and its chat
// template, without the weights.
Tokenizer load_hf_tokenizer(const std::string& dir, std::string* chat_template = nullptr, Loc loc = Loc::current());

// Writes a directory transformers' from_pretrained loads: config.json (gpt_config_to_hf),
// model.safetensors (hf_state_dict in dtype, metadata format "pt") and, from
// tokenizer_dir when given, its tokenizer.json, tokenizer_config.json,
// special_tokens_map.json and generation_config.json. Every file is written atomically.
void save_pretrained(const nn::GPT& model, const HfModelInfo& info, const std::string& dir,
                     const std::string& tokenizer_dir = "", DType dtype = DType::F32, Loc loc = Loc::current());

}  // namespace alk
