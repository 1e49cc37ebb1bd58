// Where a served model comes from: a run directory of `alk train` (--from) or a Hugging Face
// directory (--model, alk::load_pretrained), into the same ServedModel.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "alk/pretrained.h"
#include "serve/server.h"
#include "train/run_model.h"

namespace alk::serve {

namespace {

// tokenizer_config.json's chat_template and bos/eos texts, when the file is there. A token may
// be a string or {"content": ...} (transformers' AddedToken form).
void read_tokenizer_config(const std::filesystem::path& file, ServedModel& m) {
  if (!std::filesystem::exists(file)) return;
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const json::Value v = json::parse(text.str());
  if (const json::Value* t = v.find("chat_template"); t && t->is_string()) m.chat_template = t->as_string();
  auto token = [](const json::Value* t) -> std::string {
    if (!t) return "";
    if (t->is_string()) return t->as_string();
    if (t->is_object())
      if (const json::Value* c = t->find("content"); c && c->is_string()) return c->as_string();
    return "";
  };
  if (std::string b = token(v.find("bos_token")); !b.empty()) m.bos_token = b;
  if (std::string e = token(v.find("eos_token")); !e.empty()) m.eos_token = e;
}

}  // namespace

ServedModel load_served_model(const ModelSource& source, Loc loc) {
  check(source.run_dir.empty() != source.hf_dir.empty(), "serve", loc, "give one of --from RUN_DIR or --model HF_DIR");
  if (!source.hf_dir.empty()) {
    Pretrained p = load_pretrained(source.hf_dir, source.device, loc);
    ServedModel m;
    const std::filesystem::path dir = std::filesystem::path(source.hf_dir).lexically_normal();
    m.name = !source.name.empty() ? source.name : !dir.filename().empty() ? dir.filename().string() : dir.parent_path().filename().string();
    m.model = p.model;
    m.tokenizer = std::move(p.tokenizer);
    m.chat_template = p.chat_template;
    m.eos_ids = p.generation.eos_ids;
    m.add_special_tokens = true;  // transformers' tokenizer(prompt): the BOS where the model has one
    if (p.generation.bos_id) m.bos_token = m.tokenizer.token_bytes(*p.generation.bos_id);
    if (!m.eos_ids.empty()) m.eos_token = m.tokenizer.token_bytes(m.eos_ids.front());
    read_tokenizer_config(dir / "tokenizer_config.json", m);
    return m;
  }
  train::RunModel r = train::load_run_model(source.run_dir, source.device, loc);
  ServedModel m;
  m.name = source.name.empty() ? std::filesystem::path(source.run_dir).lexically_normal().filename().string() : source.name;
  if (m.name.empty()) m.name = std::filesystem::path(source.run_dir).lexically_normal().parent_path().filename().string();
  m.model = r.model;
  m.tokenizer = std::move(r.tokenizer);
  // GPT-2's end of text, when the run's tokenizer has it as a special token.
  for (int32_t id : m.tokenizer.special_ids())
    if (m.tokenizer.token_bytes(id) == "<|endoftext|>") {
      m.eos_ids.push_back(id);
      m.eos_token = m.bos_token = "<|endoftext|>";
    }
  read_tokenizer_config(std::filesystem::path(source.run_dir) / "tokenizer_config.json", m);
  return m;
}

}  // namespace alk::serve
