// BPE training: count pre-tokens once, then merge pairs in the table of distinct words,
// keeping pair counts up to date incrementally (only words holding the merged pair are
// touched) and picking the next pair from a max-heap with lazy deletion.
#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "alk/tokenizer.h"

namespace alk {

namespace {

uint64_t key_of(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t left_of(uint64_t k) { return static_cast<int32_t>(k >> 32); }
int32_t right_of(uint64_t k) { return static_cast<int32_t>(k & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> syms;
  int64_t count;
};

struct Candidate {
  int64_t count;
  uint64_t pair;
};

class Trainer {
 public:
  explicit Trainer(std::vector<Word> words) : words_(std::move(words)) {
    for (int i = 0; i < 256; ++i) {
      bytes_.push_back(std::string(1, static_cast<char>(bpe::byte_at_rank(i))));
      id_of_.emplace(bytes_.back(), i);
    }
    for (size_t w = 0; w < words_.size(); ++w) {
      const auto& s = words_[w].syms;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        uint64_t k = key_of(s[i], s[i + 1]);
        counts_[k] += words_[w].count;
        auto& list = where_[k];
        if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
      }
    }
    for (auto& [k, c] : counts_) heap_.push({c, k});
  }

  // Merges until `target` tokens exist or no pair is left. Merges whose result's vocab.json
  // key would equal a special token's are skipped.
  void run(size_t target, const std::unordered_set<std::string>& special_keys) {
    while (bytes_.size() < target && !heap_.empty()) {
      Candidate top = heap_.top();
      heap_.pop();
      auto it = counts_.find(top.pair);
      if (it == counts_.end() || it->second != top.count) continue;  // stale entry
      int32_t a = left_of(top.pair), b = right_of(top.pair);
      std::string merged = bytes_[static_cast<size_t>(a)] + bytes_[static_cast<size_t>(b)];
      if (special_keys.count(bpe::bytes_to_key(merged))) {
        counts_.erase(it);
        continue;
      }
      auto [found, fresh] = id_of_.emplace(merged, static_cast<int32_t>(bytes_.size()));
      if (fresh) bytes_.push_back(merged);
      // A pair can come back when a merge re-creates an existing token; encode applies the
      // first listing anyway, so it is recorded once.
      if (merged_.insert(top.pair).second) merges_.push_back({a, b});
      apply(top.pair, found->second);
    }
  }

  std::vector<std::string> bytes_;
  std::vector<std::pair<int32_t, int32_t>> merges_;

 private:
  void apply(uint64_t pair, int32_t c) {
    int32_t a = left_of(pair), b = right_of(pair);
    std::vector<int32_t> list = std::move(where_[pair]);
    where_.erase(pair);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    std::unordered_map<uint64_t, int64_t> delta;
    std::vector<int32_t> merged;
    for (int32_t w : list) {
      Word& word = words_[static_cast<size_t>(w)];
      auto& s = word.syms;
      merged.clear();
      bool hit = false;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(c);
          hit = true;
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      if (!hit) continue;  // a stale listing: an earlier merge consumed the pair here
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[key_of(s[i], s[i + 1])] -= word.count;
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        uint64_t k = key_of(merged[i], merged[i + 1]);
        delta[k] += word.count;
        if (merged[i] == c || merged[i + 1] == c) where_[k].push_back(w);
      }
      s.swap(merged);
    }
    for (auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& n = counts_[k];
      n += d;
      if (n <= 0)
        counts_.erase(k);
      else
        heap_.push({n, k});
    }
    counts_.erase(pair);
  }

  struct Lower {  // heap order: more frequent first, then the smaller (left, right) bytes
    const std::vector<std::string>* bytes;
    bool operator()(const Candidate& x, const Candidate& y) const {
      if (x.count != y.count) return x.count < y.count;
      const auto& v = *bytes;
      int c = v[static_cast<size_t>(left_of(x.pair))].compare(v[static_cast<size_t>(left_of(y.pair))]);
      if (c != 0) return c > 0;
      return v[static_cast<size_t>(right_of(x.pair))] > v[static_cast<size_t>(right_of(y.pair))];
    }
  };

  std::vector<Word> words_;
  std::unordered_map<std::string, int32_t> id_of_;
  std::unordered_set<uint64_t> merged_;
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;
  std::priority_queue<Candidate, std::vector<Candidate>, Lower> heap_{Lower{&bytes_}};
};

}  // namespace

Tokenizer Tokenizer::train(std::string_view corpus, int vocab_size, const std::vector<std::string>& special_tokens,
                           Loc loc) {
  const int n_special = static_cast<int>(special_tokens.size());
  check(vocab_size >= 256 + n_special, "tokenizer", loc, "vocab_size ", vocab_size,
        " is too small: it must hold the 256 byte tokens and the ", n_special, " special tokens");
  std::unordered_set<std::string> special_keys;
  for (const std::string& s : special_tokens) {
    check(!s.empty(), "tokenizer", loc, "a special token cannot be empty");
    check(bpe::valid_utf8(s), "tokenizer", loc, "special token '", s, "' is not valid UTF-8");
    check(special_keys.insert(s).second, "tokenizer", loc, "special token '", s, "' is given twice");
    std::optional<std::string> b = bpe::key_to_bytes(s);
    check(!(b && b->size() == 1), "tokenizer", loc, "special token '", s, "' is already the token of byte ",
          b ? static_cast<int>(static_cast<uint8_t>((*b)[0])) : 0);
  }

  // Count distinct pre-tokens; special tokens are cut out of the corpus first.
  std::unordered_map<std::string_view, int64_t> counts;
  for (const bpe::Segment& seg : bpe::split_specials(corpus, special_tokens))
    if (seg.special < 0)
      for (std::string_view piece : bpe::pretokenize(seg.text)) ++counts[piece];
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());  // word order must not depend on hashing
  int32_t byte_id[256];
  for (int i = 0; i < 256; ++i) byte_id[bpe::byte_at_rank(i)] = i;
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (auto& [piece, n] : sorted) {
    Word w{{}, n};
    for (char ch : piece) w.syms.push_back(byte_id[static_cast<uint8_t>(ch)]);
    words.push_back(std::move(w));
  }

  Trainer trainer(std::move(words));
  trainer.run(static_cast<size_t>(vocab_size - n_special), special_keys);

  BpeParts parts;
  for (const std::string& b : trainer.bytes_) parts.keys.push_back(bpe::bytes_to_key(b));
  parts.merges = std::move(trainer.merges_);
  for (const std::string& s : special_tokens) {
    parts.specials.push_back(static_cast<int32_t>(parts.keys.size()));
    parts.keys.push_back(s);
  }
  return from_parts(std::move(parts), "trained tokenizer", loc);
}

}  // namespace alk
