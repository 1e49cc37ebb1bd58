// The Unicode normal forms (bpe::normalize_unicode) against the Unicode Consortium's own
// conformance file, NormalizationTest.txt of the same Unicode version the tables were made
// from (Debian's unicode-data), and the tokenizer.json normalizers that use them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "alk/tokenizer.h"
#include "required.h"

namespace alk {
namespace {

using bpe::NormalForm;

std::string utf8_of(const std::vector<char32_t>& cps) {
  std::string s;
  for (char32_t c : cps) bpe::append_utf8(s, c);
  return s;
}

std::vector<char32_t> parse_code_points(const std::string& field) {
  std::vector<char32_t> out;
  std::istringstream in(field);
  for (std::string hex; in >> hex;) out.push_back(static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
  return out;
}

std::string hex_of(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size();) {
    char32_t c = 0;
    const size_t n = bpe::utf8_next(utf8, i, c);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%04X", out.empty() ? "" : " ", n ? static_cast<unsigned>(c) : 0xFFFFFFFFu);
    out += buf;
    i += n ? n : 1;
  }
  return out;
}

// NormalizationTest.txt, decompressed through bzip2 (Debian ships it as .bz2).
std::string read_normalization_test() {
  const char* path = "/usr/share/unicode/NormalizationTest.txt.bz2";
  if (!std::filesystem::exists(path)) return {};
  FILE* p = ::popen((std::string("bzip2 -dc ") + path).c_str(), "r");
  if (!p) return {};
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  return text;
}

TEST(UnicodeNormalize, EveryLineOfTheConformanceFileHolds) {
  const std::string text = read_normalization_test();
  if (text.empty())
    ALK_SKIP_OR_FAIL_IF_REQUIRED("unicode-data", "no /usr/share/unicode/NormalizationTest.txt.bz2 (apt-get install unicode-data bzip2)");
  // Each line: c1;c2;c3;c4;c5; with c2 = NFC(c1..c3), c4 = NFC(c4..c5) = NFKC(c1..c5),
  // c3 = NFD(c1..c3), c5 = NFD(c4..c5) = NFKD(c1..c5) (the file's header states these).
  std::istringstream lines(text);
  std::set<char32_t> listed;  // Part 1's single code points: every other one is its own normal form
  int cases = 0, failures = 0;
  bool part1 = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("@Part")) {
      part1 = line.starts_with("@Part1");
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ';') && f.size() < 5;) f.push_back(utf8_of(parse_code_points(x)));
    ASSERT_EQ(f.size(), 5u) << line;
    if (part1) listed.insert(parse_code_points(line.substr(0, line.find(';')))[0]);
    auto expect = [&](NormalForm form, const char* name, int from, int want) {
      const std::string got = bpe::normalize_unicode(f[static_cast<size_t>(from)], form);
      if (got != f[static_cast<size_t>(want)] && ++failures <= 20)
        ADD_FAILURE() << name << "(c" << from + 1 << " = " << hex_of(f[static_cast<size_t>(from)]) << ") = " << hex_of(got)
                      << ", expected c" << want + 1 << " = " << hex_of(f[static_cast<size_t>(want)]) << "  (line: " << line << ")";
    };
    for (int c = 0; c < 3; ++c) expect(NormalForm::NFC, "NFC", c, 1), expect(NormalForm::NFD, "NFD", c, 2);
    for (int c = 3; c < 5; ++c) expect(NormalForm::NFC, "NFC", c, 3), expect(NormalForm::NFD, "NFD", c, 4);
    for (int c = 0; c < 5; ++c) expect(NormalForm::NFKC, "NFKC", c, 3), expect(NormalForm::NFKD, "NFKD", c, 4);
    ++cases;
  }
  EXPECT_GT(cases, 15000) << "the conformance file was not read whole";
  // Part 1 lists every code point that changes under some form; any other stands alone unchanged.
  int unlisted = 0;
  for (char32_t c = 1; c <= 0x10FFFF; ++c) {
    if ((c >= 0xD800 && c <= 0xDFFF) || listed.count(c)) continue;
    const std::string s = utf8_of({c});
    for (NormalForm form : {NormalForm::NFC, NormalForm::NFD, NormalForm::NFKC, NormalForm::NFKD})
      if (bpe::normalize_unicode(s, form) != s && ++failures <= 40)
        ADD_FAILURE() << "U+" << hex_of(s) << " is in no line of Part 1 yet changes under form " << static_cast<int>(form);
    ++unlisted;
  }
  EXPECT_GT(unlisted, 1000000);
  EXPECT_EQ(failures, 0) << "of " << cases << " lines";
}

TEST(UnicodeNormalize, InvalidBytesPassThroughAndBreakComposition) {
  // "e" + an invalid byte + a combining acute: the acute may not reach across the byte.
  const std::string text = "e\xFF\xCC\x81 e\xCC\x81";
  EXPECT_EQ(bpe::normalize_unicode(text, NormalForm::NFC), "e\xFF\xCC\x81 \xC3\xA9");
  EXPECT_EQ(bpe::normalize_unicode("\xC3", NormalForm::NFD), "\xC3");  // a truncated sequence stays
  EXPECT_EQ(bpe::normalize_unicode("", NormalForm::NFKC), "");
  // A text that starts with a combining mark has nothing to compose it with.
  EXPECT_EQ(bpe::normalize_unicode("\xCC\x81" "e", NormalForm::NFC), "\xCC\x81" "e");
}

// A byte-level BPE tokenizer.json with an NFC normalizer (Qwen2's layout): decomposed and
// precomposed spellings of a text tokenize alike, and Prepend/Replace stay refused there.
TEST(UnicodeNormalize, TokenizerJsonNfcNormalizerComposesBeforeBpe) {
  const std::string dir = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/hf/qwen2";
  std::ifstream in(dir + "/tokenizer.json");
  ASSERT_TRUE(in.good()) << dir;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json = ss.str();
  // The fixture's own normalizer (NFC, as Qwen2's) and the same file with none. (Found by hand,
  // not std::regex: gcc 12's -O1 sanitizer build warns inside <regex>.)
  const size_t key = json.find("\"normalizer\"");
  ASSERT_NE(key, std::string::npos) << "the fixture has no normalizer field";
  size_t begin = json.find_first_not_of(" \t\n:", key + std::string("\"normalizer\"").size());
  ASSERT_NE(begin, std::string::npos);
  const size_t end = json.compare(begin, 4, "null") == 0 ? begin + 4 : json.find('}', begin) + 1;
  ASSERT_TRUE(json[begin] == 'n' || json[begin] == '{') << json.substr(begin, 20);
  auto with_normalizer = [&](const std::string& value) {
    return json.substr(0, key) + "\"normalizer\": " + value + json.substr(end);
  };
  const std::string nfc_json = with_normalizer("{\"type\": \"NFC\"}");
  const std::string plain_json = with_normalizer("null");
  const Tokenizer nfc = Tokenizer::from_tokenizer_json(nfc_json, "qwen2+NFC");
  const Tokenizer raw = Tokenizer::from_tokenizer_json(plain_json, "qwen2");
  const std::string precomposed = "Caf\xC3\xA9 \xC3\x85 \xEA\xB0\x81";       // Café Å 각
  const std::string decomposed = "Cafe\xCC\x81 A\xCC\x8A \xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8";  // the same, decomposed
  EXPECT_EQ(nfc.encode(decomposed), raw.encode(precomposed));
  EXPECT_EQ(nfc.encode(precomposed), raw.encode(precomposed));
  EXPECT_NE(raw.encode(decomposed), raw.encode(precomposed));  // so the normalizer did the work
  // NFC leaves a compatibility ligature alone (NFKC would not).
  EXPECT_EQ(nfc.encode("\xEF\xAC\x81ne"), raw.encode("\xEF\xAC\x81ne"));
  const std::string prepend_json = with_normalizer("{\"type\": \"Prepend\", \"prepend\": \"x\"}");
  try {
    (void)Tokenizer::from_tokenizer_json(prepend_json, "qwen2+Prepend");
    ADD_FAILURE() << "a byte-level tokenizer with a Prepend normalizer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Prepend/Replace normalizer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace alk
