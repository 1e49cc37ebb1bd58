// Tokenizer::from_tokenizer_json: the tokenizers library's tokenizer.json (the format its
// Tokenizer.save and transformers' save_pretrained write), read strictly. What alk reads:
//   model          BPE: vocab, merges ("a b" strings or [a, b] pairs), unk_token, fuse_unk,
//                  byte_fallback, ignore_merges; dropout, continuing_subword_prefix and
//                  end_of_word_suffix only unset.
//   added_tokens   each matched verbatim in the text (leftmost, then longest), one id each;
//                  lstrip, rstrip and single_word only false.
//   normalizer     null, NFC, NFD, NFKC, NFKD (the Unicode normal forms: a byte-level
//                  tokenizer may have only these, as Qwen2's has NFC), Prepend, Replace (a
//                  String pattern), Sequence of those.
//   pre_tokenizer  null, ByteLevel (use_regex: GPT-2's pattern), Split with one of the
//                  patterns bpe::PreSplit names (behavior Isolated), Digits, Metaspace,
//                  Sequence of those.
//   post_processor null, ByteLevel, TemplateProcessing (its "single" template: the special
//                  tokens around $A), RobertaProcessing, BertProcessing, Sequence.
//   decoder        null, ByteLevel, Metaspace, Sequence of Replace(metaspace -> " "),
//                  ByteFallback, Fuse, Strip(" ", 1, 0).
// Anything else (another model type, an unknown pattern or field) is an alk::Error naming
// the file and the field: a tokenizer alk cannot reproduce exactly is refused, never
// approximated. A byte-level tokenizer (ByteLevel pre-tokenizer or decoder) runs BPE over
// bytes in GPT-2's alphabet; any other over characters, an unknown one becoming its <0xNN>
// byte tokens (byte_fallback) or the unk token.
#include <algorithm>
#include <filesystem>
#include <map>

#include "alk/io.h"
#include "alk/tokenizer.h"
#include "io/json.h"

namespace alk {

namespace {

// The Split patterns alk implements (bpe_pretokenize.cpp), as tokenizer.json spells them.
const std::pair<std::string_view, bpe::PreSplit> kKnownPatterns[] = {
    {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", bpe::PreSplit::GPT2},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     bpe::PreSplit::Llama3},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     bpe::PreSplit::Qwen2},
};

constexpr std::string_view kMetaspace = "\u2581";

struct Reader {
  const std::string& source;
  Loc loc;

  template <class... A>
  [[noreturn]] void bad(const A&... parts) const {
    fail("tokenizer", loc, source, ": ", parts...);
  }
  const json::Object& object(const json::Value& v, std::string_view what) const {
    if (!v.is_object()) bad(what, " must be an object, got ", json::kind_name(v.kind()));
    return v.as_object();
  }
  const json::Array& array(const json::Value& v, std::string_view what) const {
    if (!v.is_array()) bad(what, " must be an array, got ", json::kind_name(v.kind()));
    return v.as_array();
  }
  const std::string& string(const json::Value& v, std::string_view what) const {
    if (!v.is_string()) bad(what, " must be a string, got ", json::kind_name(v.kind()));
    return v.as_string();
  }
  bool boolean(const json::Value& v, std::string_view what) const {
    if (!v.is_bool()) bad(what, " must be true or false, got ", json::kind_name(v.kind()));
    return v.as_bool();
  }
  int64_t integer(const json::Value& v, std::string_view what) const {
    if (!v.is_int()) bad(what, " must be an integer, got ", json::kind_name(v.kind()));
    return v.as_int();
  }
  // The component's "type", after checking every field is one the type has.
  std::string type_of(const json::Value& v, std::string_view what, std::initializer_list<std::string_view> fields) const {
    const json::Object& o = object(v, what);
    const json::Value* t = v.find("type");
    if (!t) bad(what, " has no \"type\"");
    const std::string& type = string(*t, std::string(what) + ".type");
    for (auto& [key, value] : o) {
      if (key == "type") continue;
      if (std::find(fields.begin(), fields.end(), key) == fields.end())
        bad(what, " (", type, "): unknown field \"", key, "\"");
    }
    return type;
  }
  const json::Value& need(const json::Value& v, std::string_view key, std::string_view what) const {
    const json::Value* f = v.find(key);
    if (!f) bad(what, " has no \"", key, "\"");
    return *f;
  }
  bool flag(const json::Value& v, std::string_view key, std::string_view what, bool fallback) const {
    const json::Value* f = v.find(key);
    return f && !f->is_null() ? boolean(*f, std::string(what) + "." + std::string(key)) : fallback;
  }
};

// A sequence component's members, or the component itself.
std::vector<const json::Value*> members(const Reader& r, const json::Value& v, std::string_view what,
                                        std::string_view list_key) {
  std::vector<const json::Value*> out;
  const json::Value* type = v.is_object() ? v.find("type") : nullptr;
  if (type && type->is_string() && type->as_string() == "Sequence") {
    r.type_of(v, what, {list_key});
    for (const json::Value& m : r.array(r.need(v, list_key, what), std::string(what) + "." + std::string(list_key)))
      out.push_back(&m);
  } else {
    out.push_back(&v);
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_tokenizer_json(std::string_view text, const std::string& source,
                                         std::string_view tokenizer_config, Loc loc) {
  const Reader r{source, loc};
  check_memory_for(16 * static_cast<uint64_t>(text.size()), "tokenizer", "parsing '" + source + "'", loc);
  json::Value root;
  try {
    root = json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    r.bad(e.detail());
  }
  r.object(root, "the file");
  static constexpr std::string_view kTop[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                              "pre_tokenizer", "model", "post_processor", "decoder"};
  for (auto& [key, value] : root.as_object())
    if (std::find(std::begin(kTop), std::end(kTop), key) == std::end(kTop)) r.bad("unknown field \"", key, "\"");
  if (const json::Value* t = root.find("truncation"); t && !t->is_null())
    r.bad("\"truncation\" is set; alk encodes whole texts (save the tokenizer without truncation)");

  // ---- model: the vocabulary and merges ----
  const json::Value& model = r.need(root, "model", "the file");
  const std::string model_type = r.type_of(model, "model",
                                           {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                                            "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (model_type != "BPE") r.bad("model type '", model_type, "' is not supported (alk reads BPE)");
  if (const json::Value* d = model.find("dropout"); d && !d->is_null()) r.bad("model.dropout must be null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json::Value* v = model.find(key); v && !v->is_null() && !(v->is_string() && v->as_string().empty()))
      r.bad("model.", key, " is not supported (only null)");
  std::map<int64_t, std::string> by_id;
  std::map<std::string, int64_t> id_of;
  for (auto& [key, value] : r.object(r.need(model, "vocab", "model"), "model.vocab")) {
    const int64_t id = r.integer(value, "model.vocab['" + key + "']");
    if (id < 0 || id >= (int64_t{1} << 31)) r.bad("model.vocab['", key, "'] has id ", id, ", outside 0..2^31-1");
    if (!by_id.emplace(id, key).second) r.bad("model.vocab: id ", id, " is used by '", by_id[id], "' and '", key, "'");
    id_of.emplace(key, id);
  }

  // ---- added tokens (matched in the text before anything else) ----
  std::vector<int32_t> added;
  if (const json::Value* list = root.find("added_tokens"); list && !list->is_null()) {
    for (const json::Value& a : r.array(*list, "added_tokens")) {
      r.object(a, "an added token");
      for (auto& [key, value] : a.as_object()) {
        static constexpr std::string_view kFields[] = {"id", "content", "single_word", "lstrip", "rstrip",
                                                       "normalized", "special"};
        if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
          r.bad("added token: unknown field \"", key, "\"");
      }
      const std::string& content = r.string(r.need(a, "content", "an added token"), "added_tokens[].content");
      const std::string what = "added token '" + content + "'";
      const int64_t id = r.integer(r.need(a, "id", what), what + ".id");
      if (id < 0 || id >= (int64_t{1} << 31)) r.bad(what, " has id ", id);
      if (content.empty()) r.bad("an added token (id ", id, ") is empty");
      for (const char* f : {"single_word", "lstrip", "rstrip"})
        if (r.flag(a, f, what, false)) r.bad(what, ": ", f, " = true is not supported");
      auto [it, fresh] = by_id.emplace(id, content);
      if (!fresh && it->second != content)
        r.bad(what, " has id ", id, ", which model.vocab gives to '", it->second, "'");
      if (auto other = id_of.find(content); other != id_of.end() && other->second != id)
        r.bad(what, " has id ", id, " but model.vocab gives it id ", other->second);
      id_of.emplace(content, id);
      if (std::find(added.begin(), added.end(), static_cast<int32_t>(id)) != added.end())
        r.bad(what, " is listed twice");
      added.push_back(static_cast<int32_t>(id));
    }
  }
  BpeParts parts;
  if (by_id.empty()) r.bad("the vocabulary is empty");
  const int64_t size = by_id.rbegin()->first + 1;
  if (static_cast<size_t>(size) != by_id.size()) {
    int64_t hole = 0;
    while (by_id.count(hole)) ++hole;
    r.bad("the vocabulary has ", by_id.size(), " tokens but ids up to ", size - 1, ": id ", hole, " is unused");
  }
  for (auto& [id, key] : by_id) parts.keys.push_back(key);
  parts.specials = added;

  for (const json::Value& m : r.array(r.need(model, "merges", "model"), "model.merges")) {
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.as_string();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        r.bad("model.merges: '", s, "' is not two tokens separated by one space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else {
      const json::Array& pair = r.array(m, "a model.merges entry");
      if (pair.size() != 2) r.bad("model.merges: an entry has ", pair.size(), " tokens, not 2");
      left = r.string(pair[0], "a model.merges token");
      right = r.string(pair[1], "a model.merges token");
    }
    auto a = id_of.find(left), b = id_of.find(right);
    if (a == id_of.end() || b == id_of.end())
      r.bad("model.merges: '", a == id_of.end() ? left : right, "' (in merge '", left, " ", right,
            "') is not in model.vocab");
    parts.merges.emplace_back(static_cast<int32_t>(a->second), static_cast<int32_t>(b->second));
  }

  // ---- the pipeline around the model ----
  bool byte_level_pre = false, byte_level_decoder = false, add_prefix_space = false, strip = false;
  std::vector<bpe::PreSplit> presplit;
  std::vector<NormalizeStep> normalize;
  std::string metaspace;
  Prepend metaspace_prepend = Prepend::Never;
  bool metaspace_split = false;
  auto read_prepend_scheme = [&](const json::Value& v, std::string_view what) {
    if (const json::Value* p = v.find("prepend_scheme"); p && !p->is_null()) {
      const std::string& s = r.string(*p, std::string(what) + ".prepend_scheme");
      if (s == "always") return Prepend::Always;
      if (s == "first") return Prepend::First;
      if (s == "never") return Prepend::Never;
      r.bad(what, ".prepend_scheme '", s, "' is not always, first or never");
    }
    return r.flag(v, "add_prefix_space", what, true) ? Prepend::Always : Prepend::Never;
  };

  if (const json::Value* n = root.find("normalizer"); n && !n->is_null()) {
    for (const json::Value* step : members(r, *n, "normalizer", "normalizers")) {
      const std::string type = r.type_of(*step, "normalizer", {"prepend", "pattern", "content"});
      if (type == "Prepend") {
        normalize.push_back({"", r.string(r.need(*step, "prepend", "normalizer Prepend"), "Prepend.prepend")});
      } else if (type == "Replace") {
        const json::Value& pattern = r.need(*step, "pattern", "normalizer Replace");
        const json::Value* s = pattern.is_object() ? pattern.find("String") : nullptr;
        if (!s) r.bad("normalizer Replace: only a {\"String\": ...} pattern is supported");
        const std::string& from = r.string(*s, "Replace.pattern.String");
        if (from.empty()) r.bad("normalizer Replace: the pattern is empty");
        normalize.push_back({from, r.string(r.need(*step, "content", "normalizer Replace"), "Replace.content")});
      } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        const bpe::NormalForm form = type == "NFC"    ? bpe::NormalForm::NFC
                                     : type == "NFD"  ? bpe::NormalForm::NFD
                                     : type == "NFKC" ? bpe::NormalForm::NFKC
                                                      : bpe::NormalForm::NFKD;
        normalize.push_back({"", "", form});
      } else {
        r.bad("normalizer '", type,
              "' is not supported (alk reads NFC, NFD, NFKC, NFKD, Prepend, Replace and Sequence of them)");
      }
    }
  }

  if (const json::Value* p = root.find("pre_tokenizer"); p && !p->is_null()) {
    const std::vector<const json::Value*> steps = members(r, *p, "pre_tokenizer", "pretokenizers");
    for (size_t i = 0; i < steps.size(); ++i) {
      const json::Value& step = *steps[i];
      const std::string type = r.type_of(step, "pre_tokenizer",
                                         {"add_prefix_space", "trim_offsets", "use_regex", "pattern", "behavior",
                                          "invert", "individual_digits", "replacement", "prepend_scheme", "split",
                                          "str_rep"});
      if (type == "ByteLevel") {
        byte_level_pre = true;
        add_prefix_space = r.flag(step, "add_prefix_space", "ByteLevel", false);
        if (add_prefix_space && i != 0)
          r.bad("pre_tokenizer ByteLevel: add_prefix_space after another pre-tokenizer is not supported");
        if (r.flag(step, "use_regex", "ByteLevel", true)) presplit.push_back(bpe::PreSplit::GPT2);
      } else if (type == "Split") {
        const json::Value& pattern = r.need(step, "pattern", "pre_tokenizer Split");
        const json::Value* re = pattern.is_object() ? pattern.find("Regex") : nullptr;
        if (!re) r.bad("pre_tokenizer Split: only a {\"Regex\": ...} pattern is supported");
        const std::string& regex = r.string(*re, "Split.pattern.Regex");
        auto known = std::find_if(std::begin(kKnownPatterns), std::end(kKnownPatterns),
                                  [&](const auto& k) { return k.first == regex; });
        if (known == std::end(kKnownPatterns))
          r.bad("pre_tokenizer Split: the pattern '", regex,
                "' is not one alk implements (GPT-2's, LLaMA-3's and Qwen2's are)");
        const json::Value* behavior = step.find("behavior");
        if (!behavior || r.string(*behavior, "Split.behavior") != "Isolated")
          r.bad("pre_tokenizer Split: only behavior Isolated is supported");
        if (r.flag(step, "invert", "Split", false)) r.bad("pre_tokenizer Split: invert = true is not supported");
        presplit.push_back(known->second);
      } else if (type == "Digits") {
        presplit.push_back(r.flag(step, "individual_digits", "Digits", false) ? bpe::PreSplit::EachDigit
                                                                              : bpe::PreSplit::Digits);
      } else if (type == "Metaspace") {
        if (i != 0 || !presplit.empty()) r.bad("pre_tokenizer Metaspace is supported only first");
        metaspace = r.string(r.need(step, "replacement", "pre_tokenizer Metaspace"), "Metaspace.replacement");
        if (metaspace.empty()) r.bad("pre_tokenizer Metaspace: the replacement is empty");
        metaspace_prepend = read_prepend_scheme(step, "pre_tokenizer Metaspace");
        metaspace_split = r.flag(step, "split", "Metaspace", true);
      } else {
        r.bad("pre_tokenizer '", type, "' is not supported (alk reads ByteLevel, Split, Digits, Metaspace)");
      }
    }
  }

  std::vector<int32_t> prefix, suffix;
  auto id_for = [&](const std::string& token, std::string_view what) {
    auto it = id_of.find(token);
    if (it == id_of.end()) r.bad(what, ": token '", token, "' is not in the vocabulary");
    return static_cast<int32_t>(it->second);
  };
  if (const json::Value* p = root.find("post_processor"); p && !p->is_null()) {
    for (const json::Value* step : members(r, *p, "post_processor", "processors")) {
      const std::string type = r.type_of(*step, "post_processor",
                                         {"add_prefix_space", "trim_offsets", "use_regex", "single", "pair",
                                          "special_tokens", "sep", "cls"});
      if (type == "ByteLevel") continue;  // it moves offsets only
      if (type == "TemplateProcessing") {
        std::map<std::string, std::vector<int32_t>> special_ids;
        if (const json::Value* st = step->find("special_tokens"); st && !st->is_null())
          for (auto& [name, spec] : r.object(*st, "TemplateProcessing.special_tokens"))
            for (const json::Value& id : r.array(r.need(spec, "ids", "TemplateProcessing special token '" + name + "'"),
                                                 "TemplateProcessing.special_tokens.ids")) {
              const int64_t v = r.integer(id, "a TemplateProcessing id");
              if (v < 0 || v >= size) r.bad("TemplateProcessing: special token '", name, "' has id ", v, ", outside the vocabulary");
              special_ids[name].push_back(static_cast<int32_t>(v));
            }
        bool seen_a = false;
        for (const json::Value& piece : r.array(r.need(*step, "single", "TemplateProcessing"), "TemplateProcessing.single")) {
          r.object(piece, "a TemplateProcessing piece");
          if (const json::Value* s = piece.find("SpecialToken")) {
            const std::string& name = r.string(r.need(*s, "id", "TemplateProcessing SpecialToken"), "SpecialToken.id");
            auto it = special_ids.find(name);
            if (it == special_ids.end()) r.bad("TemplateProcessing: '", name, "' is not in special_tokens");
            (seen_a ? suffix : prefix).insert((seen_a ? suffix : prefix).end(), it->second.begin(), it->second.end());
          } else if (const json::Value* seq = piece.find("Sequence")) {
            if (r.string(r.need(*seq, "id", "TemplateProcessing Sequence"), "Sequence.id") != "A" || seen_a)
              r.bad("TemplateProcessing.single must hold the sequence A once");
            seen_a = true;
          } else {
            r.bad("TemplateProcessing.single: a piece is neither SpecialToken nor Sequence");
          }
        }
        if (!seen_a) r.bad("TemplateProcessing.single has no sequence A");
      } else if (type == "RobertaProcessing" || type == "BertProcessing") {
        auto token = [&](const char* key) {
          const json::Array& pair = r.array(r.need(*step, key, type), type + "." + key);
          if (pair.size() != 2) r.bad(type, ".", key, " must be [token, id]");
          return id_for(r.string(pair[0], type + "." + key), type);
        };
        prefix.push_back(token("cls"));
        suffix.push_back(token("sep"));
      } else {
        r.bad("post_processor '", type, "' is not supported");
      }
    }
  }

  if (const json::Value* d = root.find("decoder"); d && !d->is_null()) {
    for (const json::Value* step : members(r, *d, "decoder", "decoders")) {
      const std::string type = r.type_of(*step, "decoder",
                                         {"add_prefix_space", "trim_offsets", "use_regex", "pattern", "content",
                                          "start", "stop", "replacement", "prepend_scheme", "split", "str_rep"});
      if (type == "ByteLevel") {
        byte_level_decoder = true;
      } else if (type == "Replace") {
        const json::Value& pattern = r.need(*step, "pattern", "decoder Replace");
        const json::Value* s = pattern.is_object() ? pattern.find("String") : nullptr;
        if (!s || r.string(*s, "decoder Replace.pattern") != kMetaspace ||
            r.string(r.need(*step, "content", "decoder Replace"), "decoder Replace.content") != " ")
          r.bad("decoder Replace: only the metaspace (U+2581) -> ' ' is supported");
      } else if (type == "ByteFallback" || type == "Fuse") {
        continue;  // what token_bytes gives already
      } else if (type == "Strip") {
        if (r.string(r.need(*step, "content", "decoder Strip"), "Strip.content") != " " ||
            r.integer(r.need(*step, "start", "decoder Strip"), "Strip.start") > 1 ||
            r.integer(r.need(*step, "stop", "decoder Strip"), "Strip.stop") != 0)
          r.bad("decoder Strip: only content ' ', start 0 or 1, stop 0 is supported");
        strip = strip || step->at("start").as_int() == 1;
      } else if (type == "Metaspace") {
        if (r.string(r.need(*step, "replacement", "decoder Metaspace"), "decoder Metaspace.replacement") != kMetaspace)
          r.bad("decoder Metaspace: only the replacement U+2581 is supported");
        strip = strip || read_prepend_scheme(*step, "decoder Metaspace") != Prepend::Never;
      } else {
        r.bad("decoder '", type, "' is not supported");
      }
    }
  }
  if (byte_level_decoder && !byte_level_pre && !presplit.empty())
    r.bad("a ByteLevel decoder needs the ByteLevel pre-tokenizer after the Split ones");
  const bool byte_level = byte_level_pre || byte_level_decoder;
  const bool only_normal_forms =
      std::all_of(normalize.begin(), normalize.end(), [](const NormalizeStep& n) { return n.form.has_value(); });
  if (byte_level && (!only_normal_forms || !metaspace.empty()))
    r.bad("a byte-level tokenizer with a Prepend/Replace normalizer or Metaspace is not supported");
  if (!byte_level && !metaspace.empty() && !presplit.empty())
    r.bad("Metaspace with other pre-tokenizers is not supported");

  const bool fallback = r.flag(model, "byte_fallback", "model", false);
  if (byte_level && fallback) r.bad("model.byte_fallback with a byte-level pre-tokenizer is not supported");
  Tokenizer t = build(std::move(parts), source, byte_level ? Model::ByteLevel : Model::Characters, fallback, loc);
  t.fuse_unk_ = r.flag(model, "fuse_unk", "model", false);
  t.ignore_merges_ = r.flag(model, "ignore_merges", "model", false);
  if (const json::Value* u = model.find("unk_token"); u && !u->is_null())
    t.unk_id_ = id_for(r.string(*u, "model.unk_token"), "model.unk_token");
  t.normalize_ = std::move(normalize);
  t.metaspace_ = std::move(metaspace);
  t.metaspace_prepend_ = metaspace_prepend;
  t.metaspace_split_ = metaspace_split && !t.metaspace_.empty();
  t.add_prefix_space_ = add_prefix_space;
  t.presplit_ = std::move(presplit);
  t.prefix_ids_ = std::move(prefix);
  t.suffix_ids_ = std::move(suffix);
  t.strip_leading_space_ = strip;

  if (!tokenizer_config.empty()) {
    const std::string config_source = source + " (tokenizer_config.json)";
    json::Value config;
    try {
      config = json::parse(tokenizer_config, json::kDefaultMaxDepth, loc);
    } catch (const Error& e) {
      fail("tokenizer", loc, config_source, ": ", e.detail());
    }
    check(config.is_object(), "tokenizer", loc, config_source, ": must be a JSON object");
    if (const json::Value* c = config.find("clean_up_tokenization_spaces"); c && !c->is_null()) {
      check(c->is_bool(), "tokenizer", loc, config_source, ": clean_up_tokenization_spaces must be true or false");
      t.cleanup_spaces_ = c->as_bool();
    }
  }
  return t;
}

std::string Tokenizer::to_tokenizer_json(Loc loc) const {
  check(model_ == Model::ByteLevel && presplit_.size() == 1 && presplit_[0] == bpe::PreSplit::GPT2 &&
            !add_prefix_space_ && !ignore_merges_ && prefix_ids_.empty() && suffix_ids_.empty(),
        "tokenizer", loc, "only a GPT-2 style byte-level BPE is written as a tokenizer.json");
  json::Object vocab;
  vocab.reserve(keys_.size());
  for (size_t id = 0; id < keys_.size(); ++id) vocab.emplace_back(keys_[id], static_cast<int64_t>(id));
  json::Array merges;
  for (auto [a, b] : merges_) merges.emplace_back(keys_[static_cast<size_t>(a)] + " " + keys_[static_cast<size_t>(b)]);
  json::Array added;
  for (int32_t id : specials_)
    added.emplace_back(json::Object{{"id", static_cast<int64_t>(id)}, {"content", keys_[static_cast<size_t>(id)]},
                                    {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                    {"normalized", false}, {"special", true}});
  const json::Object byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                {"use_regex", true}};
  json::Object model{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                     {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", json::Value(std::move(vocab))},
                     {"merges", json::Value(std::move(merges))}};
  json::Object root{{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", json::Value(std::move(added))},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", json::Value(byte_level)},
                    {"model", json::Value(std::move(model))},
                    {"post_processor", json::Value(byte_level)},
                    {"decoder", json::Value(byte_level)}};
  return json::dump(json::Value(std::move(root)), 2, loc) + "\n";
}

Tokenizer Tokenizer::load_tokenizer_json(const std::string& dir, Loc loc) {
  const std::string path = dir + "/tokenizer.json", config_path = dir + "/tokenizer_config.json";
  const std::string text = read_file(path, "tokenizer", loc);
  const std::string config = std::filesystem::exists(config_path) ? read_file(config_path, "tokenizer", loc) : "";
  return from_tokenizer_json(text, path, config, loc);
}

}  // namespace alk
