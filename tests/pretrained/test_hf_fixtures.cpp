// The Hugging Face fixtures (tests/fixtures/hf, made by scripts/make_hf_fixtures*.py): the
// tokenizers' ids and decoded texts against the tokenizers library's, GPT-2's logits
// (within 1e-4) and greedy continuations against the reference, 20 steps of fine-tuning
// with falling loss, the exported directory read back with the tuned model's logits, and
// damaged files refused. The LLaMA and Qwen2 forwards need the model branch (hf):
// test_hf_fixtures_llama.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <sstream>

#include "alk/alk.h"
#include "alk/generate.h"
#include "alk/pretrained.h"
#include "alk/train.h"
#include "io/json.h"
#include "io/temp_dir.h"
#include "pretrained/hf_fixtures.h"
#include "train/run_model.h"

namespace alk {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(HfFixtures, TokenizersGiveTheLibrarysIds) {
  const json::Value ref = json::parse(testing::read_file(hf_fixture("reference/tokenizers.json")));
  int checked = 0;
  for (const char* model : {"gpt2", "llama", "qwen2", "tokenizer-llama3"}) {
    const Tokenizer tok = Tokenizer::load_tokenizer_json(hf_fixture(model));
    const json::Value& cases = ref.at(model);
    ASSERT_GE(cases.as_array().size(), 10u) << model;
    for (const json::Value& c : cases.as_array()) {
      const std::string& text = c.at("text").as_string();
      std::vector<int32_t> want;
      for (const json::Value& id : c.at("ids").as_array()) want.push_back(static_cast<int32_t>(id.as_int()));
      EXPECT_EQ(tok.encode(text, true), want) << model << ": '" << text << "'";
      EXPECT_EQ(tok.decode(want), c.at("decoded").as_string()) << model << ": '" << text << "'";
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(HfFixtures, Gpt2LogitsAndGreedyMatchTheFixtureReference) {
  const Pretrained p = load_pretrained(hf_fixture("gpt2"), "cpu");
  EXPECT_EQ(p.info.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(p.generation.eos_ids, std::vector<int32_t>{0});
  const HfReference ref = load_hf_reference("gpt2");
  expect_logits_match(*p.model, ref, 1e-4);
  expect_greedy_match(p.model, ref);
}

TEST(HfFixtures, GenerationAndChatTemplateFiles) {
  HfModelInfo info;
  gpt_config_from_hf(testing::read_file(hf_fixture("qwen2/config.json")), "qwen2/config.json", &info);
  const GenerationDefaults g = generation_defaults_from_hf(
      testing::read_file(hf_fixture("qwen2/generation_config.json")), info, "qwen2/generation_config.json");
  EXPECT_EQ(g.eos_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(g.do_sample);
  EXPECT_DOUBLE_EQ(g.temperature, 0.7);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_DOUBLE_EQ(g.repetition_penalty, 1.05);
  std::string chat_template;
  load_hf_tokenizer(hf_fixture("qwen2"), &chat_template);
  EXPECT_NE(chat_template.find("<|im_start|>"), std::string::npos);
}

TEST(HfFixtures, Gpt2FineTunesThenExportsWithEqualLogits) { fine_tune_and_export("gpt2"); }

// A copy of a fixture with one file replaced.
std::string damaged_copy(const TempDir& dir, const std::string& model, const std::string& file,
                         const std::function<std::string(std::string)>& edit) {
  const std::string to = dir / model;
  fs::copy(hf_fixture(model), to, fs::copy_options::recursive);
  testing::write_file(to + "/" + file, edit(testing::read_file(to + "/" + file)));
  return to;
}

void expect_load_refused(const std::string& dir, const std::string& needle) {
  try {
    load_pretrained(dir, "cpu");
    ADD_FAILURE() << "loaded " << dir << ", which should fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(HfFixtures, DamagedFilesAreErrorsNamingThem) {
  {
    TempDir dir;
    expect_load_refused(damaged_copy(dir, "gpt2", "config.json",
                                     [](std::string s) { return replace_once(s, "\"n_head\": 4", "\"n_head\": 5"); }),
                        "n_head");
  }
  {
    TempDir dir;
    expect_load_refused(damaged_copy(dir, "gpt2", "config.json",
                                     [](std::string s) { return replace_once(s, "\"use_cache\"", "\"use_cachy\""); }),
                        "\"use_cachy\"");
  }
  {
    TempDir dir;
    expect_load_refused(damaged_copy(dir, "gpt2", "tokenizer.json", [](std::string s) { return s.substr(0, s.size() / 2); }),
                        "tokenizer.json");
  }
  {
    TempDir dir;
    const std::string copy = damaged_copy(dir, "llama", "model.safetensors.index.json", [](std::string s) {
      return replace_once(s, "model-00002-of-00003", "model-00009-of-00003");
    });
    try {
      SafetensorsCheckpoint::open(copy);
      ADD_FAILURE() << "opened an index naming a missing shard";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model-00009-of-00003"), std::string::npos) << e.what();
    }
  }
  {
    TempDir dir;
    expect_load_refused(damaged_copy(dir, "gpt2", "config.json",
                                     [](std::string s) { return replace_once(s, "\"n_embd\": 64", "\"n_embd\": 32"); }),
                        "transformer.");  // the weights' shapes disagree with the config, named by key
  }
}

}  // namespace
}  // namespace alk
