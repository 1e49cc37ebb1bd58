// Byte-level BPE: assembling a tokenizer from its parts, encode and decode.
// Training lives in bpe_train.cpp, the files in bpe_json.cpp, pre-tokenization in
// bpe_pretokenize.cpp.
#include <algorithm>
#include <functional>
#include <limits>

#include "alk/tokenizer.h"

namespace alk {

Tokenizer Tokenizer::from_parts(BpeParts parts, const std::string& source, Loc loc) {
  Tokenizer t;
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
    std::optional<std::string> b = t.special_flag_[id] ? std::nullopt : bpe::key_to_bytes(key);
    t.bytes_[id] = b ? std::move(*b) : key;
  }
  for (int b = 0; b < 256; ++b) {
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

// GPT-2's bpe(): while some adjacent pair has a merge, take the lowest-ranked one and merge
// each of its occurrences left to right. Done with a linked list and a heap of
// (rank, position) so that long pieces cost O(n log n), not GPT-2's O(n^2): all heap
// entries of the lowest rank are taken as one batch (they pop in position order), and
// the pairs the batch creates join the heap only afterwards, as in GPT-2's loop.
void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  struct Cand {
    int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> id(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  std::vector<bool> alive(static_cast<size_t>(n), true);
  for (int32_t i = 0; i < n; ++i) {
    id[static_cast<size_t>(i)] = byte_ids_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])];
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

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  for (std::string_view piece : bpe::pretokenize(text)) encode_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (specials_.empty()) {
    encode_ordinary(text, out);
    return out;
  }
  for (const bpe::Segment& seg : bpe::split_specials(text, special_tokens())) {
    if (seg.special < 0)
      encode_ordinary(seg.text, out);
    else
      out.push_back(specials_[static_cast<size_t>(seg.special)]);
  }
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
