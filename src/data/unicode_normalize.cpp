// Unicode normalization forms (UAX #15) for tokenizer.json's NFC/NFD/NFKC/NFKD normalizers
// (Qwen2's tokenizers compose with NFC before pre-tokenizing): decompose each code point fully
// (tables generated from the Unicode Character Database by scripts/gen_unicode_tables.py;
// Hangul syllables by arithmetic), put each run of combining marks in canonical order, and for
// the composed forms recompose starters with the marks not blocked from them.
#include <algorithm>
#include <vector>

#include "alk/tokenizer.h"

namespace alk::bpe {

namespace {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t canonical_at, canonical_len, compat_at, compat_len;
};
struct Composition {
  char32_t first, second, composite;
};
#include "data/unicode_combining_classes.inc"
#include "data/unicode_compositions.inc"
#include "data/unicode_decompositions.inc"

// Hangul syllables: S = SBase + (L * VCount + V) * TCount + T (The Unicode Standard, 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid UTF-8 byte travels through as this marker (and its byte): it is a starter that
// nothing composes with, so text around it normalizes as if it were cut there.
constexpr char32_t kInvalidByte = 0x80000000;

uint8_t combining_class(char32_t c) {
  if (c < 0x300 || c >= kInvalidByte) return 0;
  auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), c,
                             [](const CombiningClass& e, char32_t v) { return e.cp < v; });
  return it != std::end(kCombiningClasses) && it->cp == c ? it->ccc : 0;
}

void decompose(char32_t c, bool compat, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (c >= 0xA0 && c < kInvalidByte) {  // nothing below U+00A0 decomposes
    auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                               [](const Decomposition& e, char32_t v) { return e.cp < v; });
    if (it != std::end(kDecompositions) && it->cp == c) {
      const uint16_t at = compat ? it->compat_at : it->canonical_at;
      const uint16_t len = compat ? it->compat_len : it->canonical_len;
      if (len > 0) {
        out.insert(out.end(), kDecompositionData + at, kDecompositionData + at + len);
        return;
      }
    }
  }
  out.push_back(c);
}

// The primary composite of (first, second), or 0 when they do not compose.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{first, second},
                             [](const Composition& e, const std::pair<char32_t, char32_t>& v) {
                               return e.first < v.first || (e.first == v.first && e.second < v.second);
                             });
  return it != std::end(kCompositions) && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string normalize_unicode(std::string_view text, NormalForm form) {
  // Text below U+0300 that is not Latin-1 Supplement needs nothing: ASCII returns as it is.
  if (std::all_of(text.begin(), text.end(), [](char ch) { return static_cast<uint8_t>(ch) < 0x80; }))
    return std::string(text);
  const bool compat = form == NormalForm::NFKC || form == NormalForm::NFKD;
  const bool composed = form == NormalForm::NFC || form == NormalForm::NFKC;
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t c;
    const size_t n = utf8_next(text, i, c);
    if (n == 0) {
      cps.push_back(kInvalidByte | static_cast<uint8_t>(text[i]));
      ++i;
      continue;
    }
    decompose(c, compat, cps);
    i += n;
  }
  // Canonical order: each run of non-starters sorted by combining class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && combining_class(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + static_cast<long>(i), cps.begin() + static_cast<long>(end),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  if (composed && !cps.empty()) {
    // A character composes with the last starter unless a character between them is a starter
    // or has a combining class >= its own (it is "blocked"). A text that starts with a
    // non-starter has no starter to compose with until the first one.
    size_t starter = 0, kept = 1;
    int last_class = combining_class(cps[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < cps.size(); ++i) {
      const char32_t c = cps[i];
      const int cls = combining_class(c);
      const char32_t composite = cps[starter] < kInvalidByte && c < kInvalidByte ? compose(cps[starter], c) : 0;
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        cps[starter] = composite;
        continue;
      }
      if (cls == 0) starter = kept;
      last_class = cls;
      cps[kept++] = c;
    }
    cps.resize(kept);
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t c : cps) {
    if (c >= kInvalidByte)
      out += static_cast<char>(c & 0xFF);
    else
      append_utf8(out, c);
  }
  return out;
}

}  // namespace alk::bpe
