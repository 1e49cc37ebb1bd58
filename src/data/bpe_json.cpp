// Tokenizer::save and Tokenizer::load: vocab.json, merges.txt and special_tokens.json
// (layout in include/alk/tokenizer.h), through alk's JSON (src/io/json.h).
#include <filesystem>
#include <unordered_set>

#include "alk/io.h"
#include "alk/tokenizer.h"
#include "io/json.h"

namespace alk {

namespace {

// Parses a tokenizer file as JSON; a malformed one is an error naming the file (json's
// message says where: byte, line and column).
json::Value parse_file(const std::string& path, Loc loc) {
  const std::string text = read_file(path, "tokenizer", loc);
  // A parsed JSON value takes about 16 times its text (a vocabulary of millions of entries
  // is tens of MB of text): refuse clearly rather than meet the OOM killer.
  check_memory_for(16 * static_cast<uint64_t>(text.size()), "tokenizer", "parsing '" + path + "'", loc);
  try {
    return json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    fail("tokenizer", loc, path, ": ", e.detail());
  }
}

}  // namespace

void Tokenizer::save(const std::string& dir, Loc loc) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "tokenizer", loc, "cannot create directory ", dir, ": ", ec.message());
  // As GPT-2's encoder.json is written (Python's json.dumps): loading it and saving it
  // again gives the same bytes.
  json::Object vocab;
  vocab.reserve(keys_.size());
  for (size_t id = 0; id < keys_.size(); ++id) vocab.emplace_back(keys_[id], static_cast<int64_t>(id));
  std::string merges = "#version: 0.2\n";
  for (auto [a, b] : merges_) merges += keys_[static_cast<size_t>(a)] + " " + keys_[static_cast<size_t>(b)] + "\n";
  json::Array specials;
  for (int32_t id : specials_) specials.emplace_back(keys_[static_cast<size_t>(id)]);
  // Atomic, like every file a checkpoint directory holds.
  write_file_atomic(dir + "/vocab.json", json::dump_python(json::Value(std::move(vocab)), loc), loc);
  write_file_atomic(dir + "/merges.txt", merges, loc);
  write_file_atomic(dir + "/special_tokens.json", json::dump_python(json::Value(std::move(specials)), loc), loc);
}

Tokenizer Tokenizer::load(const std::string& dir, Loc loc) {
  BpeParts parts;
  std::unordered_map<std::string, int32_t> ids;
  const std::string vocab_path = dir + "/vocab.json";
  {
    const json::Value vocab = parse_file(vocab_path, loc);
    check(vocab.is_object(), "tokenizer", loc, vocab_path, ": expected a JSON object {\"token\": id, ...}, got ",
          json::kind_name(vocab.kind()));
    const json::Object& entries = vocab.as_object();
    parts.keys.resize(entries.size());
    std::vector<bool> seen(entries.size(), false);
    for (const auto& [key, value] : entries) {
      check(value.is_int(), "tokenizer", loc, vocab_path, ": the id of '", key, "' must be an integer, got ",
            value.is_number() ? "a fraction" : json::kind_name(value.kind()));
      const int64_t id = value.as_int();
      check(id >= 0, "tokenizer", loc, vocab_path, ": the id of '", key, "' is ", id, "; ids must be non-negative");
      check(id < static_cast<int64_t>(entries.size()), "tokenizer", loc, vocab_path, ": id ", id, " of '", key,
            "' is out of range: ", entries.size(), " tokens need ids 0..", entries.size() - 1);
      check(!seen[static_cast<size_t>(id)], "tokenizer", loc, vocab_path, ": id ", id, " is used twice (again by '",
            key, "')");
      seen[static_cast<size_t>(id)] = true;
      parts.keys[static_cast<size_t>(id)] = key;
      ids.emplace(key, static_cast<int32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
      std::string key = bpe::bytes_to_key(std::string(1, static_cast<char>(b)));
      check(ids.count(key), "tokenizer", loc, vocab_path, ": the vocabulary lacks the token '", key, "' for byte ", b,
            " (a byte-level vocabulary needs all 256)");
    }
  }

  const std::string special_path = dir + "/special_tokens.json";
  if (std::filesystem::exists(special_path)) {
    const json::Value specials = parse_file(special_path, loc);
    check(specials.is_array(), "tokenizer", loc, special_path, ": expected a JSON array of strings, got ",
          json::kind_name(specials.kind()));
    for (const json::Value& s : specials.as_array()) {
      check(s.is_string(), "tokenizer", loc, special_path, ": expected a string, got ", json::kind_name(s.kind()));
      auto it = ids.find(s.as_string());
      check(it != ids.end(), "tokenizer", loc, special_path, ": special token '", s.as_string(), "' is not in ",
            vocab_path);
      parts.specials.push_back(it->second);
    }
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
