// GPT-2's pre-tokenizer, written out as a scanner over code points instead of a regex,
// and GPT-2's byte-to-unicode alphabet.
#include <algorithm>
#include <array>

#include "alk/tokenizer.h"

namespace alk::bpe {

namespace {

struct CodeRange {
  char32_t lo, hi;
};
#include "data/unicode_tables.inc"

template <size_t N>
bool in_table(const CodeRange (&table)[N], char32_t c) {
  auto it =
      std::upper_bound(std::begin(table), std::end(table), c, [](char32_t v, const CodeRange& r) { return v < r.lo; });
  return it != std::begin(table) && c <= (it - 1)->hi;
}

enum class Cls : uint8_t { Letter, Number, Space, Other };

struct Char {
  char32_t cp;  // kInvalid for an invalid UTF-8 byte
  uint32_t begin, end;
  Cls cls;
};
constexpr char32_t kInvalid = 0xFFFFFFFF;

Cls classify(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::Letter;
    if (c >= '0' && c <= '9') return Cls::Number;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return Cls::Space;
    return Cls::Other;
  }
  if (c == kInvalid) return Cls::Other;
  if (in_table(kLetterRanges, c)) return Cls::Letter;
  if (in_table(kNumberRanges, c)) return Cls::Number;
  if (in_table(kWhiteSpaceRanges, c)) return Cls::Space;
  return Cls::Other;
}


std::vector<Char> decode_chars(std::string_view text) {
  std::vector<Char> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    size_t n = utf8_next(text, i, cp);
    if (n == 0) cp = kInvalid, n = 1;
    out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(i + n), classify(cp)});
    i += n;
  }
  return out;
}

// Length in characters of the piece GPT-2's pattern matches at c[i].
size_t match_at(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  auto cp = [&](size_t k) { return k < n ? c[k].cp : kInvalid; };
  auto run = [&](size_t k, Cls cls) {
    while (k < n && c[k].cls == cls) ++k;
    return k;
  };
  if (cp(i) == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d
    char32_t a = cp(i + 1), b = cp(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  size_t start = cp(i) == ' ' && i + 1 < n && c[i + 1].cls != Cls::Space ? i + 1 : i;
  if (c[start].cls != Cls::Space) return run(start, c[start].cls) - i;
  // '\s+(?!\S)' leaves the last space of a run for the next piece when a non-space follows;
  // '\s+' takes a lone space before a non-space.
  size_t end = run(i, Cls::Space);
  if (end < n && end - i > 1) --end;
  return end - i;
}

bool is_cr_lf(char32_t c) { return c == '\r' || c == '\n'; }

// Length in characters of the piece that LLaMA-3's pattern (max_digits 3) or Qwen2's (1)
// matches at c[i]; the alternatives are tried in order, as a backtracking regex does:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3_at(const std::vector<Char>& c, size_t i, size_t max_digits) {
  const size_t n = c.size();
  auto cp = [&](size_t k) { return k < n ? c[k].cp : kInvalid; };
  auto lower = [](char32_t x) { return x >= 'A' && x <= 'Z' ? x + 32 : x; };
  auto run = [&](size_t k, Cls cls) {
    while (k < n && c[k].cls == cls) ++k;
    return k;
  };
  if (cp(i) == '\'') {
    // Case-insensitive; U+017F (long s) folds to s, U+212A (Kelvin) to k.
    char32_t a = lower(cp(i + 1)), b = lower(cp(i + 2));
    if (a == 's' || a == 0x17F || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  const Cls first = c[i].cls;
  if (first != Cls::Letter && first != Cls::Number && !is_cr_lf(c[i].cp) && i + 1 < n && c[i + 1].cls == Cls::Letter)
    return run(i + 1, Cls::Letter) - i;
  if (first == Cls::Letter) return run(i, Cls::Letter) - i;
  if (first == Cls::Number) return std::min(run(i, Cls::Number) - i, max_digits);
  auto other_then_newlines = [&](size_t k) {
    k = run(k, Cls::Other);
    while (k < n && is_cr_lf(c[k].cp)) ++k;
    return k - i;
  };
  if (c[i].cp == ' ' && i + 1 < n && c[i + 1].cls == Cls::Other) return other_then_newlines(i + 1);
  if (first == Cls::Other) return other_then_newlines(i);
  // Whitespace: through the last \r or \n of the run, else as GPT-2's last two alternatives.
  const size_t end = run(i, Cls::Space);
  for (size_t k = end; k > i; --k)
    if (is_cr_lf(c[k - 1].cp)) return k - i;
  if (end < n && end - i > 1) return end - 1 - i;
  return end - i;
}

// The tokenizers library's Digits pre-tokenizer: runs of numbers (each one alone when
// individual) split from what surrounds them.
size_t match_digits_at(const std::vector<Char>& c, size_t i, bool individual) {
  const bool number = c[i].cls == Cls::Number;
  if (number && individual) return 1;
  size_t k = i;
  while (k < c.size() && (c[k].cls == Cls::Number) == number) ++k;
  return k - i;
}

}  // namespace

size_t utf8_next(std::string_view s, size_t i, char32_t& cp) {
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t c = b(i);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len;
  char32_t min;
  if ((c & 0xE0) == 0xC0)
    len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0)
    len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0)
    len = 4, cp = c & 0x07, min = 0x10000;
  else
    return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

std::vector<std::string_view> pretokenize(std::string_view text, PreSplit how) {
  std::vector<Char> chars = decode_chars(text);
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < chars.size();) {
    size_t len = 0;
    switch (how) {
      case PreSplit::GPT2:
        len = match_at(chars, i);
        break;
      case PreSplit::Llama3:
        len = match_llama3_at(chars, i, 3);
        break;
      case PreSplit::Qwen2:
        len = match_llama3_at(chars, i, 1);
        break;
      case PreSplit::Digits:
        len = match_digits_at(chars, i, false);
        break;
      case PreSplit::EachDigit:
        len = match_digits_at(chars, i, true);
        break;
    }
    size_t b = chars[i].begin, e = chars[i + len - 1].end;
    pieces.push_back(text.substr(b, e - b));
    i += len;
  }
  return pieces;
}

std::vector<std::string_view> pretokenize(std::string_view text) { return pretokenize(text, PreSplit::GPT2); }

size_t utf8_length(std::string_view s, size_t i) {
  char32_t cp;
  const size_t n = utf8_next(s, i, cp);
  return n == 0 ? 1 : n;
}

std::vector<Segment> split_specials(std::string_view text, const std::vector<std::string>& specials) {
  std::vector<Segment> out;
  constexpr size_t npos = std::string_view::npos;
  std::vector<size_t> next(specials.size());  // where special k next occurs at or after pos
  for (size_t k = 0; k < specials.size(); ++k) next[k] = specials[k].empty() ? npos : text.find(specials[k]);
  size_t pos = 0;
  while (true) {
    size_t best = npos, best_len = 0;
    int best_k = -1;
    for (size_t k = 0; k < specials.size(); ++k) {
      if (next[k] != npos && next[k] < pos) next[k] = text.find(specials[k], pos);
      if (next[k] != npos && (next[k] < best || (next[k] == best && specials[k].size() > best_len)))
        best = next[k], best_len = specials[k].size(), best_k = static_cast<int>(k);
    }
    if (best == npos) break;
    if (best > pos) out.push_back({text.substr(pos, best - pos), -1});
    out.push_back({text.substr(best, best_len), best_k});
    pos = best + best_len;
  }
  if (pos < text.size()) out.push_back({text.substr(pos), -1});
  return out;
}

bool valid_utf8(std::string_view s) {
  char32_t cp;
  for (size_t i = 0, n; i < s.size(); i += n)
    if ((n = utf8_next(s, i, cp)) == 0) return false;
  return true;
}

namespace {
struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<uint8_t, 256> order{};  // order[i]: the byte at position i of GPT-2's table
  ByteTables() {
    int pos = 0, extra = 0;
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    for (int b = 0; b < 256; ++b)
      if (printable(b)) to_unicode[b] = static_cast<char32_t>(b), order[pos++] = static_cast<uint8_t>(b);
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) to_unicode[b] = static_cast<char32_t>(256 + extra++), order[pos++] = static_cast<uint8_t>(b);
  }
};
const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

char32_t byte_to_unicode(uint8_t b) { return tables().to_unicode[b]; }
uint8_t byte_at_rank(int i) { return tables().order[static_cast<size_t>(i)]; }

std::string bytes_to_key(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) append_utf8(out, byte_to_unicode(static_cast<uint8_t>(ch)));
  return out;
}

std::optional<std::string> key_to_bytes(std::string_view key) {
  std::string out;
  for (size_t i = 0; i < key.size();) {
    char32_t cp;
    size_t n = utf8_next(key, i, cp);
    if (n == 0 || cp > 0x143) return std::nullopt;  // the alphabet ends at U+0143
    // Bytes stand for themselves except the 68 remapped to U+0100..U+0143.
    int b = cp >= 0x100 ? tables().order[188 + (cp - 0x100)] : static_cast<int>(cp);
    if (byte_to_unicode(static_cast<uint8_t>(b)) != cp) return std::nullopt;
    out += static_cast<char>(b);
    i += n;
  }
  return out;
}

}  // namespace alk::bpe
