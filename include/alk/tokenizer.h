// Byte-level BPE tokenizer, GPT-2 style.
//
// encode: the text is split at special tokens; every other stretch is pre-tokenized with
// GPT-2's pattern over Unicode code points
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (\s is the White_Space property; an invalid UTF-8 byte counts as one character that is
// neither letter, number nor space, so every byte string round-trips). Each piece's bytes
// start as single-byte tokens and merges apply by rank, lowest first, every occurrence of
// the chosen pair left to right (GPT-2's bpe()).
//
// Files (save/load), the GPT-2 / HuggingFace layout:
//   vocab.json           {"token": id, ...}; ordinary tokens are written in GPT-2's
//                        byte-to-unicode alphabet (" the" is "\u0120the"), special tokens
//                        as their raw text. Written like Python's json.dumps (", " and
//                        ": " separators, non-ASCII as \uXXXX), so loading GPT-2's
//                        encoder.json and saving it again reproduces the file byte for byte.
//   merges.txt           "#version: 0.2" then one "left right" line per merge, rank order.
//   special_tokens.json  alk's addition: a JSON array of the special tokens' texts. Optional
//                        on load (GPT-2's files have none: "<|endoftext|>" is then an
//                        ordinary vocabulary entry that text never encodes to, exactly as
//                        GPT-2's reference encoder behaves; add_special_token makes it
//                        special). Always written by save.
//
// Ids of a trained tokenizer: 0..255 are the 256 bytes in the order of GPT-2's
// bytes_to_unicode table ('!'..'~', '¡'..'¬', '®'..'ÿ', then the remaining bytes
// ascending), then one id per new merged token, then the special tokens in the order given.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alk/error.h"

namespace alk {

// Raw material of a tokenizer, as train and load produce it.
struct BpeParts {
  std::vector<std::string> keys;                    // per id: its vocab.json key
  std::vector<std::pair<int32_t, int32_t>> merges;  // rank order: (left id, right id)
  std::vector<int32_t> specials;                    // ids whose key is a special token's raw text
};

class Tokenizer {
 public:
  // Learns merges from corpus until the vocabulary (bytes + merged tokens + special tokens)
  // has vocab_size entries. If the corpus runs out of pairs first, the vocabulary is
  // smaller (vocab_size() says how big). Special tokens in the corpus are cut out before
  // counting, so merges never span them. Deterministic: the most frequent pair wins, ties
  // go to the pair whose (left bytes, right bytes) is lexicographically smallest.
  static Tokenizer train(std::string_view corpus, int vocab_size, const std::vector<std::string>& special_tokens = {},
                         Loc loc = Loc::current());
  static Tokenizer load(const std::string& dir, Loc loc = Loc::current());
  // Validates parts (ids, merges, the 256 byte tokens); errors name `source`.
  static Tokenizer from_parts(BpeParts parts, const std::string& source, Loc loc = Loc::current());

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids, Loc loc = Loc::current()) const;
  void save(const std::string& dir, Loc loc = Loc::current()) const;

  int vocab_size() const { return static_cast<int>(keys_.size()); }
  // Looks up a vocab.json key: "\u0120the" for " the"; a special token by its raw text.
  std::optional<int32_t> token_id(std::string_view token) const;
  const std::string& token(int32_t id, Loc loc = Loc::current()) const;        // vocab.json key
  const std::string& token_bytes(int32_t id, Loc loc = Loc::current()) const;  // decoded bytes
  int32_t byte_id(uint8_t byte) const { return byte_ids_[byte]; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

  // Special tokens: matched verbatim in encode's input, always one id each.
  const std::vector<int32_t>& special_ids() const { return specials_; }
  std::vector<std::string> special_tokens() const;
  bool is_special(int32_t id) const;
  // Marks the vocab entry `text` as special, or appends it with a new id; returns the id.
  int32_t add_special_token(const std::string& text, Loc loc = Loc::current());

 private:
  struct MergeInfo {
    int32_t rank, result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::string> keys_, bytes_;
  std::unordered_map<std::string, int32_t> key_to_id_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, MergeInfo> merge_info_;
  std::vector<int32_t> specials_;
  std::vector<bool> special_flag_;
  int32_t byte_ids_[256] = {};
};

namespace bpe {
// GPT-2's bytes_to_unicode: the printable code point standing for each byte.
char32_t byte_to_unicode(uint8_t b);
// The byte in GPT-2's table order at position i (the trained vocab's id i).
uint8_t byte_at_rank(int i);
// GPT-2 alphabet text (UTF-8) of raw bytes, and back (nullopt if a character is not in the
// alphabet or the UTF-8 is invalid).
std::string bytes_to_key(std::string_view bytes);
std::optional<std::string> key_to_bytes(std::string_view key);
// Splits text (no special tokens) into GPT-2 pre-tokens; the pieces tile the text.
std::vector<std::string_view> pretokenize(std::string_view text);
// Cuts text at occurrences of the special tokens (leftmost first, then longest): the
// stretches between them (index -1) and the occurrences (index into specials), in order.
struct Segment {
  std::string_view text;
  int special;
};
std::vector<Segment> split_specials(std::string_view text, const std::vector<std::string>& specials);
bool valid_utf8(std::string_view s);
}  // namespace bpe

}  // namespace alk
