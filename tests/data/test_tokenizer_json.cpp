// tokenizer.json (the tokenizers library's format): GPT-2's real vocabulary written as a
// tokenizer.json gives GPT-2's ids (tests/fixtures/gpt2/expected.json, from GPT-2's own
// encoder) and the same ids as the vocab.json/merges.txt path; LLaMA-3's and Qwen2's
// pre-token patterns against the pieces Python's `regex` module cuts (written out below);
// a SentencePiece-style BPE with byte fallback; malformed files refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "alk/tokenizer.h"
#include "io/json.h"

namespace alk {
namespace {

const std::string kGpt2Dir = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/gpt2";

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// GPT-2's vocab.json and merges.txt as the tokenizer.json transformers saves for GPT-2.
std::string gpt2_tokenizer_json() {
  json::Value vocab = json::parse(slurp(kGpt2Dir + "/vocab.json"));
  json::Array merges;
  std::istringstream lines(slurp(kGpt2Dir + "/merges.txt"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && !line.starts_with("#version")) merges.emplace_back(line);
  json::Object model{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                     {"byte_fallback", false}, {"vocab", vocab}, {"merges", json::Value(std::move(merges))}};
  json::Object added{{"id", 50256}, {"content", "<|endoftext|>"}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", true}, {"special", true}};
  json::Object byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                          {"use_regex", true}};
  json::Object root{{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", json::Array{json::Value(added)}},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", json::Value(byte_level)},
                    {"model", json::Value(std::move(model))},
                    {"post_processor", json::Value(byte_level)},
                    {"decoder", json::Value(byte_level)}};
  return json::dump(json::Value(std::move(root)));
}

const Tokenizer& gpt2_json() {
  static const Tokenizer t = Tokenizer::from_tokenizer_json(gpt2_tokenizer_json(), "gpt2 tokenizer.json");
  return t;
}

std::vector<int32_t> parse_ids(std::string_view s) {
  std::vector<int32_t> out;
  std::istringstream in{std::string(s)};
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

TEST(TokenizerJson, Gpt2RealVocabularyGivesGpt2Ids) {
  std::ifstream f(kGpt2Dir + "/expected.json");
  ASSERT_TRUE(f);
  int cases = 0;
  for (std::string line; std::getline(f, line);) {
    size_t h = line.find("\"hex\": \""), i = line.find("\"ids\": [");
    if (h == std::string::npos) continue;
    std::string hex = line.substr(h + 8, line.find('"', h + 8) - (h + 8)), text;
    for (size_t k = 0; k < hex.size(); k += 2) text += static_cast<char>(std::stoi(hex.substr(k, 2), nullptr, 16));
    const std::vector<int32_t> want = parse_ids(std::string_view(line).substr(i + 8, line.find(']', i) - (i + 8)));
    // GPT-2's own encoder has no special tokens; transformers' (and this) match the added
    // token "<|endoftext|>" in text, checked below.
    if (text.find("<|endoftext|>") != std::string::npos) continue;
    EXPECT_EQ(gpt2_json().encode(text, true), want) << "text: " << text;  // GPT-2 adds no BOS
    EXPECT_EQ(gpt2_json().decode(want), text);
    ++cases;
  }
  EXPECT_GE(cases, 30);
  EXPECT_EQ(gpt2_json().vocab_size(), 50257);
  EXPECT_TRUE(gpt2_json().byte_level());
  // The added token is matched in text, as transformers' tokenizer does.
  EXPECT_EQ(gpt2_json().encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));
}

TEST(TokenizerJson, Gpt2SameIdsAsVocabJsonPath) {
  const Tokenizer classic = Tokenizer::load(kGpt2Dir);
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"a", "Z", " ", "  ", "\n", "\t", "'s", "'ll", "7", "123", "é", "日本",
                                          "🙂", "!", "...", "\xff", "\xc3", "the", " the", "\r\n", "\u00a0"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    for (int k = static_cast<int>(rng() % 12); k > 0; --k) s += atoms[rng() % atoms.size()];
    ASSERT_EQ(gpt2_json().encode(s), classic.encode(s)) << "case " << i << ": " << s;
  }
}

std::vector<std::string> pieces(std::string_view text, bpe::PreSplit how) {
  std::vector<std::string> out;
  for (std::string_view p : bpe::pretokenize(text, how)) out.emplace_back(p);
  return out;
}

// Expected pieces: regex.findall(pattern, text) with Python's `regex` module (2026.5.9).
TEST(TokenizerJson, Llama3AndQwen2PatternsCutAsTheRegexDoes) {
  using V = std::vector<std::string>;
  struct Case {
    std::string text;
    V llama3, qwen2;
  };
  const Case cases[] = {
      {"Hello world", {"Hello", " world"}, {"Hello", " world"}},
      {"I'M here, they'RE 12345678 items!!\n\n",
       {"I", "'M", " here", ",", " they", "'RE", " ", "123", "456", "78", " items", "!!\n\n"},
       {"I", "'M", " here", ",", " they", "'RE", " ", "1", "2", "3", "4", "5", "6", "7", "8", " items", "!!\n\n"}},
      {"  leading\tand  trailing  ",
       {" ", " leading", "\tand", " ", " trailing", "  "},
       {" ", " leading", "\tand", " ", " trailing", "  "}},
      {"line1\r\n\r\n  line2\n", {"line", "1", "\r\n\r\n", " ", " line", "2", "\n"},
       {"line", "1", "\r\n\r\n", " ", " line", "2", "\n"}},
      {"naïve café 日本語 🙂🙂 x", {"naïve", " café", " 日本語", " 🙂🙂", " x"}, {"naïve", " café", " 日本語", " 🙂🙂", " x"}},
      {"a\u00a0\u00a0b", {"a", "\u00a0", "\u00a0b"}, {"a", "\u00a0", "\u00a0b"}},
      {"...\n\n...", {"...\n\n", "..."}, {"...\n\n", "..."}},
      {"price: $1,234.56", {"price", ":", " $", "1", ",", "234", ".", "56"},
       {"price", ":", " $", "1", ",", "2", "3", "4", ".", "5", "6"}},
      {" 'tis 'S", {" '", "tis", " '", "S"}, {" '", "tis", " '", "S"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(pieces(c.text, bpe::PreSplit::Llama3), c.llama3) << c.text;
    EXPECT_EQ(pieces(c.text, bpe::PreSplit::Qwen2), c.qwen2) << c.text;
  }
  EXPECT_EQ(pieces("ab12c3", bpe::PreSplit::EachDigit), (V{"ab", "1", "2", "c", "3"}));
  EXPECT_EQ(pieces("ab12c3", bpe::PreSplit::Digits), (V{"ab", "12", "c", "3"}));
}

// A SentencePiece-style BPE (as LLaMA-2's tokenizer.json): characters, metaspace
// normalizer, byte fallback, BOS from the post-processor, decoder stripping the space.
std::string sentencepiece_json(const std::string& extra_model_fields = "") {
  json::Object vocab{{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char key[8];
    std::snprintf(key, sizeof key, "<0x%02X>", b);
    vocab.emplace_back(key, 3 + b);
  }
  int id = 259;
  for (const char* t : {"\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "\u2581c", "é", "\u2581cab"}) vocab.emplace_back(t, id++);
  json::Array merges{json::Value("\u2581 a"), json::Value("a b"), json::Value("\u2581a b"), json::Value("\u2581 c")};
  const std::string text = R"({"version":"1.0","truncation":null,"padding":null,
    "added_tokens":[{"id":0,"content":"<unk>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                    {"id":1,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                    {"id":2,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
    "normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"\u2581"},
                  {"type":"Replace","pattern":{"String":" "},"content":"\u2581"}]},
    "pre_tokenizer":null,
    "model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,
             "end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true)" +
                           extra_model_fields + R"(,"vocab":VOCAB,"merges":MERGES},
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
                      {"Sequence":{"id":"A","type_id":0}}],
                      "pair":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
                              {"SpecialToken":{"id":"<s>","type_id":1}},{"Sequence":{"id":"B","type_id":1}}],
                      "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
    "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},
               {"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}})";
  std::string out = text;
  out.replace(out.find("VOCAB"), 5, json::dump(json::Value(std::move(vocab))));
  out.replace(out.find("MERGES"), 6, json::dump(json::Value(std::move(merges))));
  return out;
}

TEST(TokenizerJson, SentencePieceStyleByteFallback) {
  const Tokenizer t = Tokenizer::from_tokenizer_json(sentencepiece_json(), "sp tokenizer.json");
  EXPECT_FALSE(t.byte_level());
  EXPECT_EQ(t.prefix_ids(), std::vector<int32_t>{1});
  // "ab c" -> "▁ab▁c" -> ▁ab (265), ▁c (266); BOS first.
  EXPECT_EQ(t.encode("ab c", true), (std::vector<int32_t>{1, 265, 266}));
  EXPECT_EQ(t.encode("ab c"), (std::vector<int32_t>{265, 266}));
  // é is a token; ü is not: its two UTF-8 bytes <0xC3> <0xBC>.
  EXPECT_EQ(t.encode("é"), (std::vector<int32_t>{259, 267}));
  EXPECT_EQ(t.encode("ü"), (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xBC}));
  // Added tokens split the text first; each stretch is normalized on its own.
  EXPECT_EQ(t.encode("<s>ab</s>"), (std::vector<int32_t>{1, 265, 2}));
  // The decoder: metaspaces become spaces, bytes join, the leading space goes.
  EXPECT_EQ(t.decode(t.encode("ab c ü")), "ab c ü");
  EXPECT_EQ(t.decode(t.encode("ab c", true)), "<s> ab c");
}

TEST(TokenizerJson, IgnoreMergesTakesWholeVocabularyPieces) {
  // "▁cab" is a token no merge makes: the merges give ▁c ab; ignore_merges takes it whole.
  const Tokenizer merged = Tokenizer::from_tokenizer_json(sentencepiece_json(), "sp");
  EXPECT_EQ(merged.encode("cab"), (std::vector<int32_t>{266, 264}));
  const Tokenizer whole = Tokenizer::from_tokenizer_json(sentencepiece_json(R"(,"ignore_merges":true)"), "sp");
  EXPECT_EQ(whole.encode("cab"), (std::vector<int32_t>{268}));
}

void expect_refused(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_tokenizer_json(text, "bad/tokenizer.json");
    ADD_FAILURE() << "accepted a tokenizer.json that should fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad/tokenizer.json"), std::string::npos) << e.what();
  }
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(TokenizerJson, MalformedFilesAreErrorsNamingTheField) {
  const std::string sp = sentencepiece_json();
  expect_refused("{", "bad/tokenizer.json");
  expect_refused("[]", "must be an object");
  expect_refused(replaced(sp, R"("padding":null,)", R"("padding":null,"extra":1,)"), "unknown field \"extra\"");
  expect_refused(replaced(sp, R"("type":"BPE")", R"("type":"Unigram")"), "model type 'Unigram'");
  expect_refused(replaced(sp, "\"\u2581 a\"", "\"\u2581 zz\""), "'zz'");
  expect_refused(replaced(sp, R"("lstrip":false,"rstrip":false,"normalized":false,"special":true}],)",
                          R"("lstrip":true,"rstrip":false,"normalized":false,"special":true}],)"),
                 "lstrip");
  expect_refused(replaced(sp, R"({"type":"Prepend","prepend":"\u2581"})", R"({"type":"BertNormalizer"})"), "normalizer 'BertNormalizer'");
  expect_refused(replaced(sp, R"("pre_tokenizer":null)",
                          R"("pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false})"),
                 "'\\w+' is not one alk implements");
  expect_refused(replaced(sp, R"("ids":[1])", R"("ids":[100000])"), "outside the vocabulary");
  expect_refused(replaced(sp, R"("<0x41>":68)", R"("<0x41>":1000)"), "is unused");
  expect_refused(replaced(sp, R"("truncation":null)", R"("truncation":{"max_length":8})"), "truncation");
}

}  // namespace
}  // namespace alk
