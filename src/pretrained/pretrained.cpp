// load_pretrained / save_pretrained (alk/pretrained.h): a Hugging Face directory's files in
// and out.
#include <filesystem>

#include "alk/io.h"
#include "alk/pretrained.h"
#include "io/json.h"

namespace alk {

namespace fs = std::filesystem;

namespace {

std::optional<json::Value> read_json_if_present(const std::string& path, Loc loc) {
  if (!fs::exists(path)) return std::nullopt;
  const std::string text = read_file(path, "pretrained", loc);
  try {
    return json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    fail("pretrained", loc, path, ": ", e.detail());
  }
}

// tokenizer_config.json spells a token as its text or as {"content": text, ...}.
std::optional<std::string> token_text(const json::Value* v) {
  if (!v || v->is_null()) return std::nullopt;
  if (v->is_string()) return v->as_string();
  if (v->is_object())
    if (const json::Value* c = v->find("content"); c && c->is_string()) return c->as_string();
  return std::nullopt;
}

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  const std::optional<std::string> text = try_read_file(dir + "/config.json");
  if (!text) return false;
  try {
    const json::Value v = json::parse(*text);
    return v.is_object() && v.find("model_type") != nullptr;
  } catch (const Error&) {
    return false;
  }
}

Tokenizer load_hf_tokenizer(const std::string& dir, std::string* chat_template, Loc loc) {
  Tokenizer tok = Tokenizer::load_tokenizer_json(dir, loc);
  if (!chat_template) return tok;
  chat_template->clear();
  const std::string path = dir + "/tokenizer_config.json";
  if (const std::optional<json::Value> config = read_json_if_present(path, loc)) {
    check(config->is_object(), "pretrained", loc, path, ": must be a JSON object");
    if (const json::Value* t = config->find("chat_template"); t && !t->is_null()) {
      if (t->is_string()) {
        *chat_template = t->as_string();
      } else {
        // A list of named templates: the one named "default".
        check(t->is_array(), "pretrained", loc, path, ": \"chat_template\" must be a string or a list of {name, template}");
        for (const json::Value& named : t->as_array()) {
          check(named.is_object() && named.find("name") && named.find("template"), "pretrained", loc, path,
                ": \"chat_template\" entries must be {name, template}");
          if (named.at("name").is_string() && named.at("name").as_string() == "default")
            *chat_template = named.at("template").as_string(loc);
        }
      }
    }
  }
  // Newer transformers write the template beside the config.
  if (chat_template->empty())
    if (const std::optional<std::string> jinja = try_read_file(dir + "/chat_template.jinja")) *chat_template = *jinja;
  return tok;
}

Pretrained load_pretrained(const std::string& dir, const std::string& device, Loc loc) {
  Pretrained p;
  const std::string config_path = dir + "/config.json";
  const nn::GPTConfig cfg = gpt_config_from_hf(read_file(config_path, "pretrained", loc), config_path, &p.info, loc);
  p.tokenizer = load_hf_tokenizer(dir, &p.chat_template, loc);
  check(p.tokenizer.vocab_size() <= cfg.vocab, "pretrained", loc, dir, ": the tokenizer has ",
        p.tokenizer.vocab_size(), " tokens but the model's vocab_size is ", cfg.vocab);

  const std::string gen_path = dir + "/generation_config.json";
  const std::string gen_text = fs::exists(gen_path) ? read_file(gen_path, "pretrained", loc) : "";
  p.generation = generation_defaults_from_hf(gen_text, p.info, gen_path, loc);
  if (p.generation.eos_ids.empty()) {
    // Neither config names an EOS: tokenizer_config.json's eos_token, when it has one.
    if (const std::optional<json::Value> tc = read_json_if_present(dir + "/tokenizer_config.json", loc))
      if (tc->is_object())
        if (const std::optional<std::string> eos = token_text(tc->find("eos_token")))
          if (const std::optional<int32_t> id = p.tokenizer.token_id(*eos)) p.generation.eos_ids.push_back(*id);
  }

  Device& dev = device.empty() ? default_device() : get_device(device, loc);
  {
    DeviceGuard on(dev);  // the parameters are made where they will live
    p.model = std::make_shared<nn::GPT>(cfg);
  }
  load_hf_weights(*p.model, p.info, dir, loc);
  p.model->eval();
  return p;
}

void save_pretrained(const nn::GPT& model, const HfModelInfo& info_in, const std::string& dir,
                     const std::string& tokenizer_dir, DType dtype, Loc loc) {
  check(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "pretrained", loc,
        "weights are written as f32, bf16 or f16, not ", dtype_name(dtype));
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "pretrained", loc, "cannot create directory ", dir, ": ", ec.message());
  HfModelInfo info = info_in;
  info.torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
  const std::string config = gpt_config_to_hf(model.cfg, info, loc);
  save_safetensors(dir + "/model.safetensors", hf_state_dict(model, info, dtype, loc), {{"format", "pt"}}, loc);
  write_file_atomic(dir + "/config.json", config, loc);
  if (tokenizer_dir.empty()) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "chat_template.jinja"}) {
    const std::string from = tokenizer_dir + "/" + name;
    if (fs::exists(from)) write_file_atomic(dir + "/" + name, read_file(from, "pretrained", loc), loc);
  }
}

}  // namespace alk
