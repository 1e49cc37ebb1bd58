// Byte-level BPE: GPT-2's real files against ids from GPT-2's reference encoder
// (tests/fixtures/gpt2, made by scripts/gen_gpt2_fixture.js), round trips over random
// bytes, training, special tokens, save/load, and malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "alk/tokenizer.h"

namespace alk {
namespace {

namespace fs = std::filesystem;
const std::string kGpt2Dir = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/gpt2";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("alk_bpe_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::load(kGpt2Dir);
  return t;
}

// Random byte strings: arbitrary bytes (invalid UTF-8, NULs), text-like ASCII, and
// valid multi-byte characters mixed with stray continuation and lead bytes.
std::string random_bytes(std::mt19937& rng) {
  static const std::vector<std::string> atoms = {"a",
                                                 "Z",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\t",
                                                 "'s",
                                                 "'ll",
                                                 "9",
                                                 "0",
                                                 ".",
                                                 "!",
                                                 "é",
                                                 "ß",
                                                 "日",
                                                 "本",
                                                 "😀",
                                                 "\xC3",
                                                 "\x80",
                                                 "\xFF",
                                                 std::string(1, '\0'),
                                                 "\xED\xA0\x80",
                                                 "\xF0\x9F",
                                                 "\u00a0",
                                                 "\u3000",
                                                 "\u2028",
                                                 "Ⅻ",
                                                 "½"};
  std::uniform_int_distribution<int> len(0, 40), mode(0, 2), byte(0, 255), atom(0, static_cast<int>(atoms.size()) - 1);
  std::string s;
  int n = len(rng), m = mode(rng);
  for (int i = 0; i < n; ++i) {
    if (m == 0)
      s += static_cast<char>(byte(rng));
    else if (m == 1)
      s += static_cast<char>(" eeetaoin\n'sl.,0A"[byte(rng) % 17]);
    else
      s += atoms[static_cast<size_t>(atom(rng))];
  }
  return s;
}

std::string training_corpus() {
  std::mt19937 rng(7);
  static const std::vector<std::string> words = {
      "the",  "of",  "and",  "to",    "in",   "that", "is",   "was",   "he",     "for",   "it",    "with",  "as",
      "his",  "on",  "be",   "at",    "by",   "I",    "this", "had",   "not",    "are",   "but",   "from",  "or",
      "have", "an",  "they", "which", "one",  "you",  "were", "her",   "all",    "she",   "there", "would", "their",
      "we",   "him", "been", "has",   "when", "who",  "café", "naïve", "日本語", "don't", "it's",  "42",    "1999"};
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::uniform_int_distribution<int> punct(0, 11);
  std::string s;
  for (int i = 0; i < 6000; ++i) {
    s += words[pick(rng)];
    int p = punct(rng);
    s += p == 0 ? ". " : p == 1 ? ",  " : p == 2 ? "\n" : " ";
  }
  return s;
}

std::vector<int32_t> parse_ids(std::string_view list) {
  std::vector<int32_t> ids;
  std::istringstream in{std::string(list)};
  std::string tok;
  while (std::getline(in, tok, ',')) ids.push_back(std::stoi(tok));
  return ids;
}

TEST(BpePretokenize, FollowsGpt2Pattern) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(bpe::pretokenize("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(bpe::pretokenize("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(bpe::pretokenize("a\n\n b  "), (V{"a", "\n\n", " b", "  "}));
  EXPECT_EQ(bpe::pretokenize("I'm he'll x'Ll"), (V{"I", "'m", " he", "'ll", " x", "'", "Ll"}));
  EXPECT_EQ(bpe::pretokenize("abc123 !?x"), (V{"abc", "123", " !?", "x"}));
  EXPECT_EQ(bpe::pretokenize("é\xFF\xC3x"), (V{"é", "\xFF\xC3", "x"}));
  EXPECT_EQ(bpe::pretokenize(""), V{});
}

TEST(BpeGpt2, MatchesReferenceEncoder) {
  std::ifstream f(kGpt2Dir + "/expected.json");
  ASSERT_TRUE(f) << "missing " << kGpt2Dir << "/expected.json";
  std::string line;
  int cases = 0;
  while (std::getline(f, line)) {
    size_t h = line.find("\"hex\": \""), i = line.find("\"ids\": [");
    if (h == std::string::npos) continue;
    std::string hex = line.substr(h + 8, line.find('"', h + 8) - (h + 8)), text;
    for (size_t k = 0; k < hex.size(); k += 2) text += static_cast<char>(std::stoi(hex.substr(k, 2), nullptr, 16));
    std::vector<int32_t> want = parse_ids(std::string_view(line).substr(i + 8, line.find(']', i) - (i + 8)));
    EXPECT_EQ(gpt2().encode(text), want) << "text: " << text;
    EXPECT_EQ(gpt2().decode(want), text);
    ++cases;
  }
  EXPECT_GE(cases, 30);
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().token_id("\u0120the"), 262);
}

TEST(BpeGpt2, RandomBytesRoundTrip) {
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) {
    std::string s = random_bytes(rng);
    ASSERT_EQ(gpt2().decode(gpt2().encode(s)), s) << "case " << i;
  }
}

TEST(BpeGpt2, SaveReproducesTheFiles) {
  TempDir dir;
  gpt2().save(dir.str());
  EXPECT_TRUE(slurp(dir.path / "vocab.json") == slurp(kGpt2Dir + "/vocab.json"));
  EXPECT_TRUE(slurp(dir.path / "merges.txt") == slurp(kGpt2Dir + "/merges.txt"));
  EXPECT_EQ(slurp(dir.path / "special_tokens.json"), "[]");
}

TEST(BpeGpt2, EndOfTextBecomesSpecial) {
  Tokenizer t = gpt2();
  EXPECT_GT(t.encode("<|endoftext|>").size(), 1u);  // ordinary text without special_tokens.json
  EXPECT_EQ(t.add_special_token("<|endoftext|>"), 50256);
  EXPECT_EQ(t.encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_THROW(t.add_special_token("!"), Error);  // a byte token
}

TEST(BpeTrain, FirstIdsAreBytesInGpt2Order) {
  Tokenizer t = Tokenizer::train(training_corpus(), 300);
  EXPECT_EQ(t.token_bytes(0), "!");
  EXPECT_EQ(t.token_bytes(188), std::string(1, '\0'));
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(t.token_bytes(i), std::string(1, static_cast<char>(bpe::byte_at_rank(i))));
    EXPECT_EQ(t.token(i), gpt2().token(i));  // the same alphabet order as GPT-2's vocabulary
  }
}

TEST(BpeTrain, ReachesVocabSizeAndIsDeterministic) {
  std::string corpus = training_corpus();
  Tokenizer a = Tokenizer::train(corpus, 400), b = Tokenizer::train(corpus, 400);
  EXPECT_EQ(a.vocab_size(), 400);
  EXPECT_EQ(a.merges(), b.merges());
  for (int32_t id = 0; id < a.vocab_size(); ++id) EXPECT_EQ(a.token(id), b.token(id));
  EXPECT_EQ(a.encode(corpus), b.encode(corpus));
  EXPECT_LT(a.encode(corpus).size(), corpus.size() / 3);
}

TEST(BpeTrain, StopsWhenPairsRunOut) {
  // "ab ab ab": pieces "ab" and " ab"; merges: a+b, then " "+ab; nothing is left.
  Tokenizer t = Tokenizer::train("ab ab ab", 1000);
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.encode("ab ab"), (std::vector<int32_t>{256, 257}));
}

TEST(BpeTrain, RandomBytesRoundTrip) {
  Tokenizer t = Tokenizer::train(training_corpus(), 500, {"<|endoftext|>"});
  std::mt19937 rng(2);
  for (int i = 0; i < 3000; ++i) {
    std::string s = random_bytes(rng);
    ASSERT_EQ(t.decode(t.encode(s)), s) << "case " << i;
  }
}

TEST(BpeTrain, RejectsBadArguments) {
  EXPECT_THROW(Tokenizer::train("abc", 255), Error);
  EXPECT_THROW(Tokenizer::train("abc", 256, {"<s>"}), Error);
  EXPECT_THROW(Tokenizer::train("abc", 300, {"<s>", "<s>"}), Error);
  EXPECT_THROW(Tokenizer::train("abc", 300, {""}), Error);
  EXPECT_THROW(Tokenizer::train("abc", 300, {"\xFF"}), Error);
  EXPECT_THROW(Tokenizer::train("abc", 300, {"a"}), Error);
}

TEST(BpeSpecial, SingleIdsAndRoundTrip) {
  std::string corpus = training_corpus();
  corpus += "<|endoftext|>";
  Tokenizer t = Tokenizer::train(corpus, 400, {"<|endoftext|>", "<pad>", "<pad> x"});
  EXPECT_EQ(t.vocab_size(), 400);
  int32_t eot = 397, pad = 398, padx = 399;
  EXPECT_EQ(t.token_id("<|endoftext|>"), eot);
  EXPECT_EQ(t.special_ids(), (std::vector<int32_t>{eot, pad, padx}));
  EXPECT_TRUE(t.is_special(pad));
  EXPECT_FALSE(t.is_special(5));
  EXPECT_EQ(t.special_tokens(), (std::vector<std::string>{"<|endoftext|>", "<pad>", "<pad> x"}));
  std::string text = "the<|endoftext|><pad> x<pad>the <|endoftext|";
  std::vector<int32_t> ids = t.encode(text);
  EXPECT_EQ(ids[1], eot);
  EXPECT_EQ(ids[2], padx);  // longest special at the same position
  EXPECT_EQ(ids[3], pad);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1);
  EXPECT_EQ(t.decode(ids), text);
  for (int32_t id = 256; id < eot; ++id) EXPECT_EQ(t.token_bytes(id).find("<|"), std::string::npos);
}

TEST(BpeSaveLoad, IdenticalEncodingsAndFiles) {
  TempDir dir;
  std::string corpus = training_corpus();
  Tokenizer t = Tokenizer::train(corpus, 450, {"<|endoftext|>", "<a b😀>"});
  t.save(dir.str() + "/one");
  Tokenizer u = Tokenizer::load(dir.str() + "/one");
  EXPECT_EQ(u.vocab_size(), t.vocab_size());
  EXPECT_EQ(u.special_ids(), t.special_ids());
  EXPECT_EQ(u.encode(corpus + "<a b😀><|endoftext|>"), t.encode(corpus + "<a b😀><|endoftext|>"));
  std::mt19937 rng(3);
  for (int i = 0; i < 500; ++i) {
    std::string s = random_bytes(rng);
    ASSERT_EQ(u.encode(s), t.encode(s));
  }
  u.save(dir.str() + "/two");
  for (const char* f : {"vocab.json", "merges.txt", "special_tokens.json"})
    EXPECT_EQ(slurp(dir.path / "one" / f), slurp(dir.path / "two" / f)) << f;
  EXPECT_TRUE(slurp(dir.path / "one" / "merges.txt").starts_with("#version: 0.2\n"));
  const std::string vocab_text = slurp(dir.path / "one" / "vocab.json");
  EXPECT_NE(vocab_text.find("\"<a b\\ud83d\\ude00>\": " + std::to_string(t.vocab_size() - 1) + "}"),
            std::string::npos)
      << vocab_text.substr(vocab_text.size() > 200 ? vocab_text.size() - 200 : 0);
  EXPECT_TRUE(slurp(dir.path / "one" / "vocab.json").starts_with("{\"!\": 0, \"\\\"\": 1, "));
}

TEST(BpeDecode, BadIdThrows) {
  std::vector<int32_t> ids = {15496, 50257};
  try {
    gpt2().decode(ids);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "tokenizer");
    EXPECT_NE(e.detail().find("50257"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpt2().decode(std::vector<int32_t>{-1}), Error);
}

// Loads a small valid tokenizer with one file replaced; the error must name the file
// (and where a line is meaningful, the line).
void expect_load_error(const std::string& file, const std::string& text, const std::string& needle) {
  TempDir dir;
  Tokenizer::train("hello hello world", 262).save(dir.str());
  spit(dir.path / file, text);
  try {
    Tokenizer::load(dir.str());
    ADD_FAILURE() << "no error for " << file << ": " << text.substr(0, 80);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BpeLoad, MalformedFilesThrow) {
  TempDir dir;
  Tokenizer::train("hello hello world", 262).save(dir.str());
  std::string vocab = slurp(dir.path / "vocab.json"), merges = slurp(dir.path / "merges.txt");
  expect_load_error("vocab.json", vocab.substr(0, vocab.size() / 2), "(line 1, column");  // truncated
  expect_load_error("vocab.json", "", "expected a value at byte 0");
  expect_load_error("vocab.json", "[]", "expected a JSON object");
  expect_load_error("vocab.json", "{\"a\": 0,}", "expected a string");
  expect_load_error("vocab.json", "{\"a\" 0}", "expected ':'");
  expect_load_error("vocab.json", "{\"a\": x}", "expected a value");
  expect_load_error("vocab.json", "{\"a\": \"0\"}", "must be an integer");
  expect_load_error("vocab.json", "{\"a\": -1}", "non-negative");
  expect_load_error("vocab.json", "{\"a\": 1.5}", "integer");
  expect_load_error("vocab.json", "{\"a\\q\": 0}", "escape");
  expect_load_error("vocab.json", "{\"\\ud800\": 0}", "surrogate");
  expect_load_error("vocab.json", "{\"a\": 0} x", "trailing");
  expect_load_error("vocab.json", "{\n\"a\": 0,\n\"b\": 0}", "id 0 is used twice (again by 'b')");
  expect_load_error("vocab.json", "{\"a\": 0,\n \"a\": 1}", "duplicate key \"a\" at byte 10 (line 2, column 2");
  expect_load_error("vocab.json", "{\"a\": 0, \"b\": 5}", "out of range");
  expect_load_error("vocab.json", "{\"a\": 0}", "lacks the token");
  std::string v2 = vocab;
  v2.replace(v2.find("\"!\": 0"), 6, "\"!\": 9");  // the id of another token
  expect_load_error("vocab.json", v2, "used twice");
  expect_load_error("merges.txt", merges + "q z\n",
                    "merges.txt:" + std::to_string(std::count(merges.begin(), merges.end(), '\n') + 1));
  expect_load_error("merges.txt", merges + "\u0120zzz q\n", "is not in");
  expect_load_error("merges.txt", merges + "lo\n", "expected two tokens");
  expect_load_error("merges.txt", merges + "l  o\n", "expected two tokens");
  expect_load_error("merges.txt", "#version: 0.2\n\nh e\n", "merges.txt:2:");
  expect_load_error("merges.txt", merges + "z q\n", "merged token");
  std::string first = merges.substr(merges.find('\n') + 1);
  expect_load_error("merges.txt", merges + first.substr(0, first.find('\n') + 1), "listed twice");
  expect_load_error("special_tokens.json", "[\"<nope>\"]", "not in");
  expect_load_error("special_tokens.json", "[\"a\"", "expected ',' or ']'");
  expect_load_error("special_tokens.json", "[1]", "expected a string");
  TempDir empty;
  EXPECT_THROW(Tokenizer::load(empty.str()), Error);
}

}  // namespace
}  // namespace alk
