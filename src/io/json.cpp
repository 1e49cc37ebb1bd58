// JSON parser and writer (json.h). The parser is a recursive descent over a string_view
// with an explicit depth counter; every error names the byte offset where it was found.
#include "io/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

namespace alk::json {

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::Null:
      return "null";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "integer";
    case Kind::Double:
      return "number";
    case Kind::String:
      return "string";
    case Kind::Array:
      return "array";
    case Kind::Object:
      return "object";
  }
  return "?";
}

// ---- access ----

namespace {
[[noreturn]] void wrong_kind(Kind want, Kind got, Loc loc) {
  fail("json", loc, "expected ", kind_name(want), ", got ", kind_name(got));
}
}  // namespace

bool Value::as_bool(Loc loc) const {
  if (!is_bool()) wrong_kind(Kind::Bool, kind(), loc);
  return b_;
}
int64_t Value::as_int(Loc loc) const {
  if (!is_int()) wrong_kind(Kind::Int, kind(), loc);
  return i_;
}
double Value::as_double(Loc loc) const {
  if (is_int()) return static_cast<double>(i_);
  if (kind() != Kind::Double) wrong_kind(Kind::Double, kind(), loc);
  return d_;
}
const std::string& Value::as_string(Loc loc) const {
  if (!is_string()) wrong_kind(Kind::String, kind(), loc);
  return s_;
}
const Array& Value::as_array(Loc loc) const {
  if (!is_array()) wrong_kind(Kind::Array, kind(), loc);
  return a_;
}
const Object& Value::as_object(Loc loc) const {
  if (!is_object()) wrong_kind(Kind::Object, kind(), loc);
  return o_;
}
Array& Value::as_array(Loc loc) {
  if (!is_array()) wrong_kind(Kind::Array, kind(), loc);
  return a_;
}
Object& Value::as_object(Loc loc) {
  if (!is_object()) wrong_kind(Kind::Object, kind(), loc);
  return o_;
}

const Value* Value::find(std::string_view key, Loc loc) const {
  for (auto& [k, v] : as_object(loc))
    if (k == key) return &v;
  return nullptr;
}

const Value& Value::at(std::string_view key, Loc loc) const {
  const Value* v = find(key, loc);
  if (!v) fail("json", loc, "missing key \"", key, "\"");
  return *v;
}

Value& Value::set(std::string key, Value value, Loc loc) {
  Object& o = as_object(loc);
  for (auto& [k, v] : o)
    if (k == key) return v = std::move(value);
  o.emplace_back(std::move(key), std::move(value));
  return o.back().second;
}

bool operator==(const Value& a, const Value& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Kind::Null:
      return true;
    case Kind::Bool:
      return a.b_ == b.b_;
    case Kind::Int:
      return a.i_ == b.i_;
    case Kind::Double:
      return a.d_ == b.d_;
    case Kind::String:
      return a.s_ == b.s_;
    case Kind::Array:
      return a.a_ == b.a_;
    case Kind::Object:
      return a.o_ == b.o_;
  }
  return false;
}

// ---- parser ----

namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth, Loc loc) : s_(text), max_depth_(max_depth), loc_(loc) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) error("unexpected trailing data");
    return v;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int max_depth_;
  Loc loc_;

  [[noreturn]] void error(const std::string& what) const { error_at(pos_, what); }
  [[noreturn]] void error_at(size_t at, const std::string& what) const {
    std::string near;
    if (at < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[at]);
      char buf[16];
      if (c >= 0x20 && c < 0x7f)
        std::snprintf(buf, sizeof buf, "'%c'", c);
      else
        std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
      near = std::string(", found ") + buf;
    } else {
      near = ", found end of input";
    }
    size_t line = 1, column = 1;  // for people reading a file in an editor
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n')
        ++line, column = 1;
      else
        ++column;
    }
    fail("json", loc_, what, " at byte ", at, " (line ", line, ", column ", column, near, ")");
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  void expect(char c, const char* what) {
    if (peek() != c || at_end()) error(std::string("expected ") + what);
    ++pos_;
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) error("invalid literal");
    pos_ += word.size();
  }

  Value parse_value(int depth) {
    if (at_end()) error("expected a value");
    switch (s_[pos_]) {
      case '{':
        return parse_object(depth + 1);
      case '[':
        return parse_array(depth + 1);
      case '"':
        return Value(parse_string());
      case 't':
        literal("true");
        return Value(true);
      case 'f':
        literal("false");
        return Value(false);
      case 'n':
        literal("null");
        return Value();
      default:
        if (s_[pos_] == '-' || (s_[pos_] >= '0' && s_[pos_] <= '9')) return parse_number();
        error("expected a value");
    }
  }

  void check_depth(int depth) {
    if (depth > max_depth_) error("nesting deeper than " + std::to_string(max_depth_));
  }

  Value parse_object(int depth) {
    check_depth(depth);
    ++pos_;  // '{'
    Object out;
    std::unordered_set<std::string> keys;  // a tokenizer's vocabulary has 50k keys: no quadratic scan
    skip_ws();
    if (peek() == '}' && !at_end()) {
      ++pos_;
      return Value(std::move(out));
    }
    for (;;) {
      skip_ws();
      size_t key_at = pos_;
      if (peek() != '"' || at_end()) error("expected a string key");
      std::string key = parse_string();
      if (!keys.insert(key).second) error_at(key_at, "duplicate key \"" + key + "\"");
      skip_ws();
      expect(':', "':' after object key");
      skip_ws();
      Value v = parse_value(depth);
      out.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}' in object");
      return Value(std::move(out));
    }
  }

  Value parse_array(int depth) {
    check_depth(depth);
    ++pos_;  // '['
    Array out;
    skip_ws();
    if (peek() == ']' && !at_end()) {
      ++pos_;
      return Value(std::move(out));
    }
    for (;;) {
      skip_ws();
      out.push_back(parse_value(depth));
      skip_ws();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']' in array");
      return Value(std::move(out));
    }
  }

  Value parse_number() {
    size_t start = pos_;
    bool is_int = true;
    if (peek() == '-') ++pos_;
    if (at_end() || s_[pos_] < '0' || s_[pos_] > '9') error("expected a digit");
    if (s_[pos_] == '0') {
      ++pos_;
      if (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') error("leading zero in number");
    } else {
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (peek() == '.' && !at_end()) {
      is_int = false;
      ++pos_;
      if (at_end() || s_[pos_] < '0' || s_[pos_] > '9') error("expected a digit after '.'");
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      is_int = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (at_end() || s_[pos_] < '0' || s_[pos_] > '9') error("expected a digit in exponent");
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (is_int) {
      int64_t i = 0;
      auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) return Value(i);
      // Out of int64 range: fall through to a double.
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) error_at(start, "number out of range");
    if (r.ec != std::errc() || r.ptr != last) error_at(start, "invalid number");
    return Value(d);
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) error("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        error("invalid hex digit in \\u escape");
      ++pos_;
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // One UTF-8 encoded code point copied from the input, validated (no overlongs, no
  // surrogates, nothing above U+10FFFF).
  void copy_utf8(std::string& out) {
    size_t start = pos_;
    auto byte = [&](size_t i) { return static_cast<unsigned char>(s_[start + i]); };
    unsigned char b0 = byte(0);
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF)
      len = 2, cp = b0 & 0x1F, min = 0x80;
    else if (b0 >= 0xE0 && b0 <= 0xEF)
      len = 3, cp = b0 & 0x0F, min = 0x800;
    else if (b0 >= 0xF0 && b0 <= 0xF4)
      len = 4, cp = b0 & 0x07, min = 0x10000;
    else
      error("invalid UTF-8 in string");
    if (s_.size() - start < len) error("truncated UTF-8 sequence in string");
    for (size_t i = 1; i < len; ++i) {
      if ((byte(i) & 0xC0) != 0x80) error_at(start + i, "invalid UTF-8 continuation byte in string");
      cp = (cp << 6) | (byte(i) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) error("invalid UTF-8 in string");
    out.append(s_.data() + start, len);
    pos_ += len;
  }

  std::string parse_string() {
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (at_end()) error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) error("raw control character in string");
      if (c >= 0x80) {
        copy_utf8(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      size_t escape_at = pos_;
      ++pos_;
      if (at_end()) error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) error_at(escape_at, "unpaired low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") error_at(escape_at, "high surrogate not followed by a low surrogate");
            pos_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error_at(escape_at, "high surrogate not followed by a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          error_at(escape_at, "invalid escape");
      }
    }
  }
};

// ---- writer ----

// ascii: every code point outside printable ASCII as \uXXXX (a surrogate pair above the
// BMP), as Python's json.dumps(ensure_ascii=True) writes; else only '"', '\\' and
// control characters are escaped and the rest stays UTF-8.
void dump_string(std::string& out, const std::string& s, bool ascii) {
  auto u = [&](uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", v);
    out += buf;
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    uint32_t cp = b;
    size_t n = 1;
    if (ascii && b >= 0x80) {  // decode one code point (strings hold valid UTF-8)
      n = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      cp = b & (0x3F >> (n - 1));
      for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp < 0x20 || (ascii && cp >= 0x7F)) {
          if (cp < 0x10000) {
            u(cp);
          } else {
            u(0xD800 + ((cp - 0x10000) >> 10));
            u(0xDC00 + ((cp - 0x10000) & 0x3FF));
          }
        } else {
          out.append(s, i, n);
        }
    }
    i += n;
  }
  out += '"';
}

void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void dump_value(std::string& out, const Value& v, int indent, int level, bool python, Loc loc) {
  switch (v.kind()) {
    case Kind::Null:
      out += "null";
      return;
    case Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Kind::Double: {
      double d = v.as_double();
      if (!std::isfinite(d)) fail("json", loc, "cannot write ", d, ": JSON has no NaN or infinity");
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof buf, d);
      std::string s(buf, r.ptr);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      out += s;
      return;
    }
    case Kind::String:
      dump_string(out, v.as_string(), python);
      return;
    case Kind::Array: {
      const Array& a = v.as_array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += python && indent < 0 ? ", " : ",";
        newline(out, indent, level + 1);
        dump_value(out, a[i], indent, level + 1, python, loc);
      }
      if (!a.empty()) newline(out, indent, level);
      out += ']';
      return;
    }
    case Kind::Object: {
      const Object& o = v.as_object();
      out += '{';
      for (size_t i = 0; i < o.size(); ++i) {
        if (i) out += python && indent < 0 ? ", " : ",";
        newline(out, indent, level + 1);
        dump_string(out, o[i].first, python);
        out += indent < 0 && !python ? ":" : ": ";
        dump_value(out, o[i].second, indent, level + 1, python, loc);
      }
      if (!o.empty()) newline(out, indent, level);
      out += '}';
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text, int max_depth, Loc loc) { return Parser(text, max_depth, loc).parse_document(); }

std::string dump(const Value& v, int indent, Loc loc) {
  std::string out;
  dump_value(out, v, indent, 0, false, loc);
  return out;
}

std::string dump_python(const Value& v, Loc loc) {
  std::string out;
  dump_value(out, v, -1, 0, true, loc);
  return out;
}

}  // namespace alk::json
