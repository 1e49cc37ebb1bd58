// Tokenizer::save and Tokenizer::load: vocab.json, merges.txt and special_tokens.json
// (layout in include/alk/tokenizer.h), with the small JSON reader and writer those flat
// files need: an object of string -> non-negative integer and an array of strings.
#include <filesystem>
#include <unordered_set>

#include "alk/io.h"
#include "alk/tokenizer.h"

namespace alk {

namespace {

void append_utf8(std::string& out, uint32_t c) {
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

class JsonReader {
 public:
  JsonReader(std::string_view text, std::string path, Loc loc) : s_(text), path_(std::move(path)), loc_(loc) {}

  template <class... Parts>
  [[noreturn]] void error_at(size_t pos, const Parts&... parts) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    fail("tokenizer", loc_, path_, ":", line, ":", col, ": ", parts...);
  }

  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    ws();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) error_at(pos_, "expected '", c, "'", pos_ < s_.size() ? "" : " but the file ends");
  }
  void end() {
    ws();
    if (pos_ != s_.size()) error_at(pos_, "unexpected text after the JSON value");
  }
  size_t pos() const { return pos_; }

  std::string string() {
    ws();
    if (pos_ >= s_.size() || s_[pos_] != '"') error_at(pos_, "expected a string");
    size_t start = pos_++;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error_at(start, "unterminated string");
      char c = s_[pos_++];
      if (c == '"') break;
      if (static_cast<uint8_t>(c) < 0x20) error_at(pos_ - 1, "raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error_at(start, "unterminated string");
      char e = s_[pos_++];
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      if (size_t k = kFrom.find(e); k != std::string_view::npos) {
        out += kTo[k];
        continue;
      }
      if (e != 'u') error_at(pos_ - 2, "unknown escape \\", e);
      uint32_t cp = hex4();
      if (cp >= 0xDC00 && cp <= 0xDFFF) error_at(pos_ - 6, "unpaired low surrogate");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
          error_at(pos_ - 6, "unpaired high surrogate");
        pos_ += 2;
        uint32_t lo = hex4();
        if (lo < 0xDC00 || lo > 0xDFFF) error_at(pos_ - 6, "high surrogate not followed by a low one");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      append_utf8(out, cp);
    }
    if (!bpe::valid_utf8(out)) error_at(start, "string is not valid UTF-8");
    return out;
  }

  int32_t id() {
    ws();
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') error_at(start, "ids must be non-negative");
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > INT32_MAX) error_at(start, "id is too large");
    }
    if (pos_ == start) error_at(start, "expected an integer id");
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      error_at(start, "expected an integer id");
    return static_cast<int32_t>(v);
  }

 private:
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error_at(pos_, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[pos_++];
      int d = h >= '0' && h <= '9'   ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                     : -1;
      if (d < 0) error_at(pos_ - 1, "bad hex digit in a \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  std::string_view s_;
  std::string path_;
  Loc loc_;
  size_t pos_ = 0;
};

// Like Python's json.dumps (ensure_ascii): printable ASCII as is, the rest escaped.
void write_json_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  auto u = [&](uint32_t v) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += hex[(v >> sh) & 0xF];
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<uint8_t>(s[i]);
    uint32_t cp = b;
    size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;  // s is valid UTF-8
    if (n > 1) cp = b & (0x3F >> (n - 1));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += n;
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      default:
        break;
    }
    if (cp >= 0x20 && cp <= 0x7E)
      out += static_cast<char>(cp);
    else if (cp < 0x10000)
      u(cp);
    else
      u(0xD800 + ((cp - 0x10000) >> 10)), u(0xDC00 + ((cp - 0x10000) & 0x3FF));
  }
  out += '"';
}

}  // namespace

void Tokenizer::save(const std::string& dir, Loc loc) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "tokenizer", loc, "cannot create directory ", dir, ": ", ec.message());
  std::string vocab = "{";
  for (size_t id = 0; id < keys_.size(); ++id) {
    if (id) vocab += ", ";
    write_json_string(vocab, keys_[id]);
    vocab += ": " + std::to_string(id);
  }
  vocab += "}";
  std::string merges = "#version: 0.2\n";
  for (auto [a, b] : merges_) merges += keys_[static_cast<size_t>(a)] + " " + keys_[static_cast<size_t>(b)] + "\n";
  std::string specials = "[";
  for (size_t k = 0; k < specials_.size(); ++k) {
    if (k) specials += ", ";
    write_json_string(specials, keys_[static_cast<size_t>(specials_[k])]);
  }
  specials += "]";
  // Atomic, like every file a checkpoint directory holds.
  write_file_atomic(dir + "/vocab.json", vocab, loc);
  write_file_atomic(dir + "/merges.txt", merges, loc);
  write_file_atomic(dir + "/special_tokens.json", specials, loc);
}

Tokenizer Tokenizer::load(const std::string& dir, Loc loc) {
  BpeParts parts;
  std::unordered_map<std::string, int32_t> ids;
  const std::string vocab_path = dir + "/vocab.json";
  {
    std::string text = read_file(vocab_path, "tokenizer", loc);
    JsonReader r(text, vocab_path, loc);
    std::vector<std::pair<std::string, int32_t>> entries;
    std::vector<size_t> where;
    r.expect('{');
    if (!r.eat('}')) {
      do {
        r.ws();
        where.push_back(r.pos());
        std::string key = r.string();
        r.expect(':');
        int32_t id = r.id();
        if (!ids.emplace(key, id).second) r.error_at(where.back(), "token '", key, "' appears twice");
        entries.emplace_back(std::move(key), id);
      } while (r.eat(','));
      r.expect('}');
    }
    r.end();
    parts.keys.resize(entries.size());
    std::vector<bool> seen(entries.size(), false);
    for (size_t i = 0; i < entries.size(); ++i) {
      auto id = static_cast<size_t>(entries[i].second);
      if (id >= entries.size())
        r.error_at(where[i], "id ", id, " of '", entries[i].first, "' is out of range: ", entries.size(),
                   " tokens need ids 0..", entries.size() - 1);
      if (seen[id]) r.error_at(where[i], "id ", id, " is used twice");
      seen[id] = true;
      parts.keys[id] = std::move(entries[i].first);
    }
    for (int b = 0; b < 256; ++b) {
      std::string key = bpe::bytes_to_key(std::string(1, static_cast<char>(b)));
      check(ids.count(key), "tokenizer", loc, vocab_path, ": the vocabulary lacks the token '", key, "' for byte ", b,
            " (a byte-level vocabulary needs all 256)");
    }
  }

  const std::string special_path = dir + "/special_tokens.json";
  if (std::filesystem::exists(special_path)) {
    std::string text = read_file(special_path, "tokenizer", loc);
    JsonReader r(text, special_path, loc);
    r.expect('[');
    if (!r.eat(']')) {
      do {
        size_t at = r.pos();
        std::string s = r.string();
        auto it = ids.find(s);
        if (it == ids.end()) r.error_at(at, "special token '", s, "' is not in ", vocab_path);
        parts.specials.push_back(it->second);
      } while (r.eat(','));
      r.expect(']');
    }
    r.end();
  }

  const std::string merges_path = dir + "/merges.txt";
  std::string text = read_file(merges_path, "tokenizer", loc);
  std::unordered_set<uint64_t> seen;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.starts_with("#")) continue;  // "#version: 0.2"
    size_t sp = line.find(' ');
    check(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
              line.find(' ', sp + 1) == std::string_view::npos,
          "tokenizer", loc, merges_path, ":", line_no, ": expected two tokens separated by one space, got '", line,
          "'");
    std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
    auto a = ids.find(left), b = ids.find(right), c = ids.find(left + right);
    check(a != ids.end(), "tokenizer", loc, merges_path, ":", line_no, ": '", left, "' is not in ", vocab_path);
    check(b != ids.end(), "tokenizer", loc, merges_path, ":", line_no, ": '", right, "' is not in ", vocab_path);
    check(c != ids.end(), "tokenizer", loc, merges_path, ":", line_no, ": the merged token '", left + right,
          "' is not in ", vocab_path);
    check(seen.insert(pair_key(a->second, b->second)).second, "tokenizer", loc, merges_path, ":", line_no, ": merge '",
          line, "' is listed twice");
    parts.merges.emplace_back(a->second, b->second);
  }
  return from_parts(std::move(parts), vocab_path, loc);
}

}  // namespace alk
