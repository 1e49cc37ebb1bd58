// Byte-level BPE: assembling a tokenizer from its parts, encode and decode.
// Training lives in bpe_train.cpp, the files in bpe_json.cpp, pre-tokenization in
// bpe_pretokenize.cpp.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>

#include "alk/tokenizer.h"

namespace alk {

Tokenizer Tokenizer::from_parts(BpeParts parts, const std::string& source, Loc loc) {
  return build(std::move(parts), source, Model::ByteLevel, false, loc);
}

namespace {
// A SentencePiece-style token's bytes: <0xNN> is byte NN, "\u2581" (the metaspace) a space.
std::string characters_token_bytes(std::string_view key) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  if (key.size() == 6 && key.starts_with("<0x") && key[5] == '>' && hex(key[3]) && hex(key[4]))
    return std::string(1, static_cast<char>(std::stoi(std::string(key.substr(3, 2)), nullptr, 16)));
  std::string out(key);
  for (size_t at = out.find("\u2581"); at != std::string::npos; at = out.find("\u2581", at + 1)) out.replace(at, 3, " ");
  return out;
}
}  // namespace

Tokenizer Tokenizer::build(BpeParts parts, const std::string& source, Model model, bool byte_fallback, Loc loc) {
  Tokenizer t;
  t.model_ = model;
  t.byte_fallback_ = byte_fallback;
  const size_t n = parts.keys.size();
  check(n < static_cast<size_t>(std::numeric_limits<int32_t>::max()), "tokenizer", loc, source, ": too many tokens (",
        n, ")");
  t.keys_ = std::move(parts.keys);
  t.bytes_.resize(n);
  t.special_flag_.assign(n, false);
  for (int32_t id : parts.specials) {
    check(id >= 0 && static_cast<size_t>(id) < n, "tokenizer", loc, source, ": special token id ", id,
          " is out of range");
    check(!t.special_flag_[static_cast<size_t>(id)], "tokenizer", loc, source, ": special token '",
          t.keys_[static_cast<size_t>(id)], "' is listed twice");
    check(!t.keys_[static_cast<size_t>(id)].empty(), "tokenizer", loc, source, ": empty special token");
    t.special_flag_[static_cast<size_t>(id)] = true;
  }
  t.specials_ = std::move(parts.specials);
  t.key_to_id_.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& key = t.keys_[id];
    auto [it, fresh] = t.key_to_id_.emplace(key, static_cast<int32_t>(id));
    if (!fresh) fail("tokenizer", loc, source, ": token '", key, "' appears twice (ids ", it->second, " and ", id, ")");
    // A key outside GPT-2's byte alphabet can only be literal text (HF stores added
    // tokens that way), so it decodes to its own UTF-8 bytes.
    if (model == Model::Characters) {
      t.bytes_[id] = t.special_flag_[id] ? key : characters_token_bytes(key);
      continue;
    }
    std::optional<std::string> b = t.special_flag_[id] ? std::nullopt : bpe::key_to_bytes(key);
    t.bytes_[id] = b ? std::move(*b) : key;
  }
  for (int b = 0; model == Model::Characters && b < 256; ++b) {
    char key[8];
    std::snprintf(key, sizeof key, "<0x%02X>", b);
    auto it = t.key_to_id_.find(key);
    check(!byte_fallback || it != t.key_to_id_.end(), "tokenizer", loc, source, ": byte fallback needs the token '",
          key, "', which the vocabulary lacks");
    t.byte_ids_[b] = it == t.key_to_id_.end() ? -1 : it->second;
  }
  for (int b = 0; model == Model::ByteLevel && b < 256; ++b) {
    std::string key = bpe::bytes_to_key(std::string(1, static_cast<char>(b)));
    auto it = t.key_to_id_.find(key);
    check(it != t.key_to_id_.end() && !t.special_flag_[static_cast<size_t>(it->second)], "tokenizer", loc, source,
          ": the vocabulary lacks the token '", key, "' for byte ", b, " (a byte-level vocabulary needs all 256)");
    t.byte_ids_[b] = it->second;
  }
  t.merges_ = std::move(parts.merges);
  t.merge_info_.reserve(t.merges_.size());
  for (size_t r = 0; r < t.merges_.size(); ++r) {
    auto [a, b] = t.merges_[r];
    check(a >= 0 && b >= 0 && static_cast<size_t>(a) < n && static_cast<size_t>(b) < n, "tokenizer", loc, source,
          ": merge ", r, " refers to an unknown id");
    auto it = t.key_to_id_.find(t.keys_[static_cast<size_t>(a)] + t.keys_[static_cast<size_t>(b)]);
    check(it != t.key_to_id_.end(), "tokenizer", loc, source, ": merge ", r, " ('", t.keys_[static_cast<size_t>(a)],
          "' '", t.keys_[static_cast<size_t>(b)], "') makes a token that is not in the vocabulary");
    check(t.merge_info_.emplace(pair_key(a, b), MergeInfo{static_cast<int32_t>(r), it->second}).second, "tokenizer",
          loc, source, ": merge ", r, " ('", t.keys_[static_cast<size_t>(a)], "' '", t.keys_[static_cast<size_t>(b)],
          "') is listed twice");
  }
  return t;
}

// The piece's starting symbols: its bytes (byte-level), or its characters, each a
// vocabulary token, its <0xNN> byte tokens (byte fallback) or the unknown token.
void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = key_to_id_.find(model_ == Model::ByteLevel ? bpe::bytes_to_key(piece) : std::string(piece));
    if (it != key_to_id_.end() && !special_flag_[static_cast<size_t>(it->second)]) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> id;
  id.reserve(piece.size());
  if (model_ == Model::ByteLevel) {
    for (char ch : piece) id.push_back(byte_ids_[static_cast<uint8_t>(ch)]);
  } else {
    bool last_unknown = false;
    for (size_t i = 0; i < piece.size();) {
      const size_t n = bpe::utf8_length(piece, i);
      auto it = key_to_id_.find(std::string(piece.substr(i, n)));
      if (it != key_to_id_.end()) {
        id.push_back(it->second);
        last_unknown = false;
      } else if (byte_fallback_) {
        for (size_t k = i; k < i + n; ++k) id.push_back(byte_ids_[static_cast<uint8_t>(piece[k])]);
        last_unknown = false;
      } else {
        check(unk_id_.has_value(), "tokenizer", Loc::current(), "the character '", piece.substr(i, n),
              "' is not in the vocabulary, which has no unknown token and no byte fallback");
        if (!(fuse_unk_ && last_unknown)) id.push_back(*unk_id_);
        last_unknown = true;
      }
      i += n;
    }
  }
  merge_symbols(id, out);
}

// GPT-2's bpe(): while some adjacent pair has a merge, take the lowest-ranked one and merge
// each of its occurrences left to right. Done with a linked list and a heap of
// (rank, position) so that long pieces cost O(n log n), not GPT-2's O(n^2): all heap
// entries of the lowest rank are taken as one batch (they pop in position order), and
// the pairs the batch creates join the heap only afterwards, as in GPT-2's loop. (The
// tokenizers library merges one lowest (rank, position) pair at a time; on a vocabulary
// whose merged tokens were made by its merges in rank order the two agree.)
void Tokenizer::merge_symbols(std::vector<int32_t>& id, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(id.size());
  if (n <= 1) {
    out.insert(out.end(), id.begin(), id.end());
    return;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  std::vector<bool> alive(static_cast<size_t>(n), true);
  for (int32_t i = 0; i < n; ++i) {
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
    prev[static_cast<size_t>(i)] = i - 1;
  }
  std::vector<Cand> heap;
  auto push = [&](int32_t p) {
    int32_t q = next[static_cast<size_t>(p)];
    if (q < 0) return;
    int32_t l = id[static_cast<size_t>(p)], r = id[static_cast<size_t>(q)];
    auto it = merge_info_.find(pair_key(l, r));
    if (it == merge_info_.end()) return;
    heap.push_back({it->second.rank, p, l, r});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<int32_t> touched;
  while (!heap.empty()) {
    const int32_t rank = heap.front().rank;
    const int32_t result = merge_info_.at(pair_key(heap.front().left, heap.front().right)).result;
    touched.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      Cand c = heap.back();
      heap.pop_back();
      auto p = static_cast<size_t>(c.pos);
      int32_t q = next[p];
      if (!alive[p] || q < 0 || id[p] != c.left || id[static_cast<size_t>(q)] != c.right) continue;  // stale
      id[p] = result;
      alive[static_cast<size_t>(q)] = false;
      next[p] = next[static_cast<size_t>(q)];
      if (next[p] >= 0) prev[static_cast<size_t>(next[p])] = c.pos;
      touched.push_back(c.pos);
    }
    for (int32_t p : touched) {
      if (prev[static_cast<size_t>(p)] >= 0) push(prev[static_cast<size_t>(p)]);
      push(p);
    }
  }
  for (int32_t p = 0; p >= 0; p = next[static_cast<size_t>(p)]) out.push_back(id[static_cast<size_t>(p)]);
}

namespace {
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Cuts every piece into the pieces `how` makes of it.
void split_pieces(std::vector<std::string_view>& pieces, bpe::PreSplit how) {
  std::vector<std::string_view> out;
  for (std::string_view p : pieces)
    for (std::string_view q : bpe::pretokenize(p, how)) out.push_back(q);
  pieces = std::move(out);
}
}  // namespace

// One stretch of text between added tokens: normalizer, pre-tokenizers, then BPE per piece.
// first_segment: the stretch starts the text (Metaspace's prepend_scheme "first").
void Tokenizer::encode_ordinary(std::string_view text, bool first_segment, std::vector<int32_t>& out) const {
  std::string owned;
  if (!normalize_.empty() || !metaspace_.empty() || add_prefix_space_) {
    owned = text;
    for (const NormalizeStep& step : normalize_) {
      if (step.form) {
        owned = bpe::normalize_unicode(owned, *step.form);
      } else if (step.from.empty()) {
        if (!owned.empty()) owned.insert(0, step.to);
      } else {
        replace_all(owned, step.from, step.to);
      }
    }
    if (!metaspace_.empty()) {
      replace_all(owned, " ", metaspace_);
      const bool prepend = metaspace_prepend_ == Prepend::Always || (metaspace_prepend_ == Prepend::First && first_segment);
      if (prepend && !owned.empty() && !owned.starts_with(metaspace_)) owned.insert(0, metaspace_);
    }
    if (add_prefix_space_ && !owned.empty() && owned[0] != ' ') owned.insert(0, " ");
    text = owned;
  }
  if (text.empty()) return;
  std::vector<std::string_view> pieces = {text};
  if (metaspace_split_) {  // each metaspace starts a piece (MergedWithNext)
    pieces.clear();
    size_t from = 0;
    for (size_t at = text.find(metaspace_, 1); at != std::string_view::npos; at = text.find(metaspace_, at + 1)) {
      pieces.push_back(text.substr(from, at - from));
      from = at;
    }
    pieces.push_back(text.substr(from));
  }
  for (bpe::PreSplit how : presplit_) split_pieces(pieces, how);
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (specials_.empty()) {
    encode_ordinary(text, true, out);
    return out;
  }
  for (const bpe::Segment& seg : bpe::split_specials(text, special_tokens())) {
    if (seg.special < 0)
      encode_ordinary(seg.text, seg.text.data() == text.data(), out);
    else
      out.push_back(specials_[static_cast<size_t>(seg.special)]);
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!add_special_tokens) return encode(text);
  std::vector<int32_t> out = prefix_ids_;
  const std::vector<int32_t> body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, Loc loc) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    check(id >= 0 && id < vocab_size(), "tokenizer", loc, "cannot decode id ", id, " at position ", i,
          ": the vocabulary has ids 0..", vocab_size() - 1);
    out += bytes_[static_cast<size_t>(id)];
  }
  if (strip_leading_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  if (cleanup_spaces_) {
    // transformers' clean_up_tokenization, in its order.
    for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                            {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
      replace_all(out, from, to);
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = key_to_id_.find(std::string(token));
  if (it == key_to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::token(int32_t id, Loc loc) const {
  check(id >= 0 && id < vocab_size(), "tokenizer", loc, "id ", id, " is outside 0..", vocab_size() - 1);
  return keys_[static_cast<size_t>(id)];
}

const std::string& Tokenizer::token_bytes(int32_t id, Loc loc) const {
  check(id >= 0 && id < vocab_size(), "tokenizer", loc, "id ", id, " is outside 0..", vocab_size() - 1);
  return bytes_[static_cast<size_t>(id)];
}

std::vector<std::string> Tokenizer::special_tokens() const {
  std::vector<std::string> out;
  for (int32_t id : specials_) out.push_back(keys_[static_cast<size_t>(id)]);
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_flag_[static_cast<size_t>(id)];
}

int32_t Tokenizer::add_special_token(const std::string& text, Loc loc) {
  check(!text.empty(), "tokenizer", loc, "a special token cannot be empty");
  check(bpe::valid_utf8(text), "tokenizer", loc, "special token '", text, "' is not valid UTF-8");
  auto it = key_to_id_.find(text);
  int32_t id;
  if (it != key_to_id_.end()) {
    id = it->second;
    if (special_flag_[static_cast<size_t>(id)]) return id;
    check(bytes_[static_cast<size_t>(id)] == text, "tokenizer", loc, "'", text,
          "' is an ordinary token whose bytes differ from its text; it cannot become special");
    for (int b = 0; b < 256; ++b)
      check(byte_ids_[b] != id, "tokenizer", loc, "'", text, "' is a byte token; it cannot become special");
  } else {
    id = vocab_size();
    keys_.push_back(text);
    bytes_.push_back(text);
    special_flag_.push_back(false);
    key_to_id_.emplace(text, id);
  }
  special_flag_[static_cast<size_t>(id)] = true;
  specials_.push_back(id);
  return id;
}

}  // namespace alk
