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
// The pre-token patterns alk knows (the tokenizers library's Split regexes and Digits):
// GPT2 (above); Llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ ; Qwen2: the same with \p{N} one at
// a time; Digits / EachDigit: runs of \p{N} (each alone) apart from the rest.
enum class PreSplit : uint8_t { GPT2, Llama3, Qwen2, Digits, EachDigit };
std::vector<std::string_view> pretokenize(std::string_view text, PreSplit how);
// Bytes of the UTF-8 character at s[i] (1 for an invalid byte).
size_t utf8_length(std::string_view s, size_t i);
// Cuts text at occurrences of the special tokens (leftmost first, then longest): the
// stretches between them (index -1) and the occurrences (index into specials), in order.
struct Segment {
  std::string_view text;
  int special;
};
std::vector<Segment> split_specials(std::string_view text, const std::vector<std::string>& specials);
bool valid_utf8(std::string_view s);
// Decodes one strict UTF-8 sequence at s[i] (no overlongs, surrogates or code points past
// U+10FFFF) into cp: its length, or 0 when the byte at i does not start a valid sequence.
size_t utf8_next(std::string_view s, size_t i, char32_t& cp);
void append_utf8(std::string& out, char32_t cp);  // cp's UTF-8 bytes
// Unicode normalization forms (UAX #15), the tokenizers library's NFC/NFD/NFKC/NFKD
// normalizers. Bytes that are not valid UTF-8 pass through unchanged (nothing composes across them).
enum class NormalForm : uint8_t { NFC, NFD, NFKC, NFKD };
std::string normalize_unicode(std::string_view text, NormalForm form);
}  // namespace bpe

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

  // A tokenizer.json of the tokenizers library (Hugging Face's tokenizer files; what alk
  // reads and refuses is listed in src/data/tokenizer_json.cpp): a byte-level BPE (GPT-2,
  // LLaMA-3, Qwen2, SmolLM2) or a SentencePiece-style BPE over characters with byte
  // fallback (LLaMA-2, TinyLlama), its added tokens and its post-processor's BOS/EOS.
  // tokenizer_config is the text of tokenizer_config.json, or "" (read: whether decode
  // cleans up spaces before punctuation, as transformers does). Errors name `source`.
  static Tokenizer from_tokenizer_json(std::string_view text, const std::string& source,
                                       std::string_view tokenizer_config = "", Loc loc = Loc::current());
  // DIR/tokenizer.json (and DIR/tokenizer_config.json when present).
  static Tokenizer load_tokenizer_json(const std::string& dir, Loc loc = Loc::current());
  // A GPT-2 style byte-level BPE (what train and load make) as the tokenizer.json
  // transformers saves for GPT-2: the same ids from either library. Others: an error.
  std::string to_tokenizer_json(Loc loc = Loc::current()) const;

  std::vector<int32_t> encode(std::string_view text) const;
  // With add_special_tokens, the post-processor's tokens around the ids (LLaMA's BOS): what
  // transformers' tokenizer(text)["input_ids"] gives. Without, the same as encode(text).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // The ids' bytes, joined (a tokenizer.json's decoder: SentencePiece-style tokenizers drop
  // the space their normalizer put before the text, and tokenizer_config's
  // clean_up_tokenization_spaces is applied, as transformers' decode does).
  std::string decode(std::span<const int32_t> ids, Loc loc = Loc::current()) const;
  // The ids the post-processor puts before and after a text (empty for GPT-2).
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }
  // True for a byte-level vocabulary (GPT-2's alphabet), false for a SentencePiece-style one.
  bool byte_level() const { return model_ == Model::ByteLevel; }
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
  enum class Model : uint8_t { ByteLevel, Characters };  // BPE over bytes / over characters
  static Tokenizer build(BpeParts parts, const std::string& source, Model model, bool byte_fallback, Loc loc);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& id, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, bool first_segment, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const { encode_ordinary(text, true, out); }

  // What a tokenizer.json sets (defaults: GPT-2's byte-level BPE, which load/train make).
  Model model_ = Model::ByteLevel;
  bool byte_fallback_ = false;       // Characters: an unknown character becomes its <0xNN> bytes
  std::optional<int32_t> unk_id_;    // Characters: an unknown character without byte fallback
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;       // a piece that is a vocabulary token is that token
  // Normalizer steps in order, per segment between added tokens: a Unicode normal form when
  // `form` is set, else Prepend(to) when from is empty, else Replace(from -> to).
  struct NormalizeStep {
    std::string from, to;
    std::optional<bpe::NormalForm> form = std::nullopt;
  };
  std::vector<NormalizeStep> normalize_;
  // Metaspace pre-tokenizer: spaces become metaspace_, prepended per prepend scheme.
  std::string metaspace_;
  enum class Prepend : uint8_t { Never, First, Always };
  Prepend metaspace_prepend_ = Prepend::Never;
  bool metaspace_split_ = false;
  bool add_prefix_space_ = false;    // ByteLevel's: a space before a segment not starting with one
  std::vector<bpe::PreSplit> presplit_ = {bpe::PreSplit::GPT2};
  std::vector<int32_t> prefix_ids_, suffix_ids_;
  bool strip_leading_space_ = false;  // decode: the Strip decoder's one leading space
  bool cleanup_spaces_ = false;       // decode: clean_up_tokenization_spaces

  std::vector<std::string> keys_, bytes_;
  std::unordered_map<std::string, int32_t> key_to_id_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, MergeInfo> merge_info_;
  std::vector<int32_t> specials_;
  std::vector<bool> special_flag_;
  int32_t byte_ids_[256] = {};
};


}  // namespace alk
