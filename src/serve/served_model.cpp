// Where a served model comes from: a run directory of `alk train` now; a Hugging Face
// directory (--model) once its loader lands (branch hf), through the same ServedModel.
#include <filesystem>
#include <fstream>
#include <sstream>

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
  check(source.hf_dir.empty(), "serve", loc,
        "--model HF_DIR is not yet supported: the Hugging Face loader has not landed; serve a run directory with --from");
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
