// A small JSON value with a strict parser and a writer: enough for safetensors headers
// and config files. Objects keep their keys in insertion order (the writer emits them in
// that order, which makes output byte-for-byte predictable). Integers without a fraction
// or exponent that fit in int64 stay exact (safetensors offsets); other numbers are doubles.
//
// The parser is RFC 8259 with no extensions: no comments, no trailing commas, no leading
// zeros, no NaN/Infinity, strings must be valid UTF-8 without raw control characters,
// \uXXXX escapes must pair surrogates correctly, duplicate object keys are rejected,
// and nesting deeper than max_depth is rejected. Errors are alk::Error("json", ...) naming
// the byte position, line and column.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alk/error.h"

namespace alk::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

enum class Kind : uint8_t { Null, Bool, Int, Double, String, Array, Object };
std::string_view kind_name(Kind k);

class Value {
 public:
  Value() = default;
  Value(std::nullptr_t) {}                                              // NOLINT(google-explicit-constructor)
  Value(bool b) : kind_(Kind::Bool), b_(b) {}                           // NOLINT
  Value(int i) : kind_(Kind::Int), i_(i) {}                             // NOLINT
  Value(int64_t i) : kind_(Kind::Int), i_(i) {}                         // NOLINT
  Value(uint64_t i) : kind_(Kind::Int), i_(static_cast<int64_t>(i)) {}  // NOLINT (caller ensures < 2^63)
  Value(double d) : kind_(Kind::Double), d_(d) {}                       // NOLINT
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}       // NOLINT
  Value(const char* s) : kind_(Kind::String), s_(s) {}                  // NOLINT
  Value(std::string_view s) : kind_(Kind::String), s_(s) {}             // NOLINT
  Value(json::Array a) : kind_(Kind::Array), a_(std::move(a)) {}        // NOLINT
  Value(json::Object o) : kind_(Kind::Object), o_(std::move(o)) {}      // NOLINT

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Double; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }

  // Typed access; the wrong kind throws alk::Error("json", "expected K, got K2").
  bool as_bool(Loc loc = Loc::current()) const;
  int64_t as_int(Loc loc = Loc::current()) const;    // Int only: never rounds a double
  double as_double(Loc loc = Loc::current()) const;  // Int or Double
  const std::string& as_string(Loc loc = Loc::current()) const;
  const json::Array& as_array(Loc loc = Loc::current()) const;
  const json::Object& as_object(Loc loc = Loc::current()) const;
  json::Array& as_array(Loc loc = Loc::current());
  json::Object& as_object(Loc loc = Loc::current());

  // Objects: the member named key, or nullptr.
  const Value* find(std::string_view key, Loc loc = Loc::current()) const;
  // Objects: the member named key; throws if missing.
  const Value& at(std::string_view key, Loc loc = Loc::current()) const;
  // Objects: replaces the member named key, or appends it (keeps order).
  Value& set(std::string key, Value value, Loc loc = Loc::current());

  // Deep equality; objects compare in order, and 1 (Int) differs from 1.0 (Double).
  friend bool operator==(const Value& a, const Value& b);

 private:
  // Plain members rather than std::variant: GCC 12 reports false -Wmaybe-uninitialized
  // for a variant holding vectors of the type being defined. Only the member of kind_ is used.
  Kind kind_ = Kind::Null;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  json::Array a_;
  json::Object o_;
};

inline constexpr int kDefaultMaxDepth = 128;

// Parses exactly one value; surrounding whitespace is allowed, anything else is an error.
Value parse(std::string_view text, int max_depth = kDefaultMaxDepth, Loc loc = Loc::current());

// indent < 0: compact, no whitespace at all (separators "," and ":"), the form
// Python's json.dumps(v, separators=(",", ":"), ensure_ascii=False) produces.
// indent >= 0: one member per line, indented by that many spaces per level.
// Strings: '"' '\\' and control characters are escaped (\b \f \n \r \t, else \u00xx with
// lowercase hex); everything else, including non-ASCII, is written as UTF-8.
// Doubles use the shortest form that reads back exactly, with ".0" added to whole numbers;
// NaN and infinities throw.
std::string dump(const Value& v, int indent = -1, Loc loc = Loc::current());
// What Python's json.dumps(v) writes with its defaults: separators ", " and ": ", and
// ensure_ascii (every code point outside printable ASCII as \uXXXX, surrogate pairs above
// the BMP). GPT-2's vocab.json is in this form.
std::string dump_python(const Value& v, Loc loc = Loc::current());

}  // namespace alk::json
