// The JSON value, strict parser and writer (src/io/json.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "io/json.h"

namespace alk {
namespace {

using json::Kind;
using json::Value;

// The error message of parsing text, or "" if it parsed.
std::string parse_error(std::string_view text, int max_depth = json::kDefaultMaxDepth) {
  try {
    json::parse(text, max_depth);
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "json");
    return e.detail();
  }
  return "";
}

TEST(Json, ParsesScalars) {
  EXPECT_TRUE(json::parse("null").is_null());
  EXPECT_EQ(json::parse("true").as_bool(), true);
  EXPECT_EQ(json::parse(" false ").as_bool(), false);
  EXPECT_EQ(json::parse("0").as_int(), 0);
  EXPECT_EQ(json::parse("-17").as_int(), -17);
  EXPECT_EQ(json::parse("\"hi\"").as_string(), "hi");
  EXPECT_DOUBLE_EQ(json::parse("1.5e3").as_double(), 1500.0);
  EXPECT_DOUBLE_EQ(json::parse("-0.125").as_double(), -0.125);
  EXPECT_EQ(json::parse("1E2").kind(), Kind::Double);
  EXPECT_DOUBLE_EQ(json::parse("7").as_double(), 7.0);  // ints read as doubles on request
}

TEST(Json, IntegersAreExactInInt64) {
  EXPECT_EQ(json::parse("9007199254740993").as_int(), 9007199254740993);  // 2^53 + 1: not a double
  EXPECT_EQ(json::parse("9223372036854775807").as_int(), INT64_MAX);
  EXPECT_EQ(json::parse("-9223372036854775808").as_int(), INT64_MIN);
  Value big = json::parse("9223372036854775808");  // beyond int64: a double, never an int
  EXPECT_EQ(big.kind(), Kind::Double);
  EXPECT_THROW(big.as_int(), Error);
  EXPECT_THROW(json::parse("1.0").as_int(), Error);
}

TEST(Json, ParsesNestedValuesInOrder) {
  Value v = json::parse(R"( { "b" : [1, {"x": null}, []], "a": {}, "c": "z" } )");
  const json::Object& o = v.as_object();
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0].first, "b");
  EXPECT_EQ(o[1].first, "a");
  EXPECT_EQ(o[2].first, "c");
  EXPECT_EQ(v.at("b").as_array().size(), 3u);
  EXPECT_TRUE(v.at("b").as_array()[1].at("x").is_null());
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_THROW(v.at("missing"), Error);
  EXPECT_THROW(v.as_array(), Error);
}

TEST(Json, StringEscapes) {
  EXPECT_EQ(json::parse(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(json::parse(R"("\u0041\u00e9\u20AC")").as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(json::parse(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");  // U+1F600 from a surrogate pair
  EXPECT_EQ(json::parse(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(json::parse("\"h\xC3\xA9llo \xF0\x9F\x98\x80\"").as_string(), "h\xC3\xA9llo \xF0\x9F\x98\x80");
}

TEST(Json, RejectsBadInputWithBytePosition) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "expected a value at byte 0"},
      {"[1,]", "expected a value at byte 3"},
      {"{\"a\":1,}", "expected a string key at byte 7"},
      {"[1 2]", "expected ',' or ']' in array at byte 3"},
      {"{\"a\" 1}", "expected ':' after object key at byte 5"},
      {"01", "leading zero in number at byte 1"},
      {"-", "expected a digit at byte 1"},
      {"1.", "expected a digit after '.' at byte 2"},
      {"1e+", "expected a digit in exponent at byte 3"},
      {"NaN", "expected a value at byte 0"},
      {"tru", "invalid literal at byte 0"},
      {"\"abc", "unterminated string at byte 4"},
      {"\"a\nb\"", "raw control character in string at byte 2"},
      {"\"\\x\"", "invalid escape at byte 1"},
      {"\"\\u12G4\"", "invalid hex digit in \\u escape at byte 5"},
      {"\"\\ud83d\"", "high surrogate not followed by a low surrogate at byte 1"},
      {"\"\\ud83d\\u0041\"", "high surrogate not followed by a low surrogate at byte 1"},
      {"\"\\ude00\"", "unpaired low surrogate in \\u escape at byte 1"},
      {"\"\xC0\x80\"", "invalid UTF-8 in string at byte 1"},          // overlong NUL
      {"\"\xED\xA0\x80\"", "invalid UTF-8 in string at byte 1"},      // encoded surrogate
      {"\"\xF4\x90\x80\x80\"", "invalid UTF-8 in string at byte 1"},  // above U+10FFFF
      {"\"\xE2\x82\"", "invalid UTF-8 continuation byte in string at byte 3"},
      {"\"\xFF\"", "invalid UTF-8 in string at byte 1"},
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\" at byte 7"},
      {"{} x", "unexpected trailing data at byte 3"},
      {"1e999", "number out of range at byte 0"},
  };
  for (const Case& c : cases)
    EXPECT_NE(parse_error(c.text).find(c.message), std::string::npos)
        << "input: " << c.text << "\nerror: " << parse_error(c.text);
}

TEST(Json, DepthLimit) {
  auto nested = [](int depth) {
    return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
  };
  EXPECT_EQ(parse_error(nested(json::kDefaultMaxDepth)), "");
  EXPECT_NE(parse_error(nested(json::kDefaultMaxDepth + 1)).find("nesting deeper than 128"), std::string::npos);
  EXPECT_NE(parse_error(nested(100000)).find("nesting deeper"), std::string::npos);  // no stack overflow
  EXPECT_NE(parse_error("{\"a\":{\"b\":{}}}", 2).find("nesting deeper than 2 at byte 10"), std::string::npos);
}

TEST(Json, WritesCompactLikePython) {
  json::Object o;
  o.emplace_back("s", Value("a\"b\\c\n\t\x01\x1f\x7f \xC3\xA9"));
  o.emplace_back("i", Value(int64_t{-12}));
  o.emplace_back("d", Value(0.1));
  o.emplace_back("w", Value(2.0));
  o.emplace_back("big", Value(1e300));
  o.emplace_back("a", Value(json::Array{Value(true), Value(false), Value(), Value(json::Array{})}));
  o.emplace_back("o", Value(json::Object{}));
  // Python: json.dumps(..., separators=(",", ":"), ensure_ascii=False)
  EXPECT_EQ(json::dump(Value(o)),
            "{\"s\":\"a\\\"b\\\\c\\n\\t\\u0001\\u001f\x7f \xC3\xA9\",\"i\":-12,\"d\":0.1,\"w\":2.0,\"big\":1e+300,"
            "\"a\":[true,false,null,[]],\"o\":{}}");
}

TEST(Json, WritesLikePythonDefaults) {
  // Python: json.dumps({"s": "a\"b\\c\n\x01\x7f \u00e9 \u20ac \U0001f600", "i": [1, 2.5]})
  json::Object o;
  o.emplace_back("s", Value("a\"b\\c\n\x01\x7f \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  o.emplace_back("i", Value(json::Array{Value(1), Value(2.5)}));
  const std::string text = json::dump_python(Value(o));
  EXPECT_EQ(text, "{\"s\": \"a\\\"b\\\\c\\n\\u0001\\u007f \\u00e9 \\u20ac \\ud83d\\ude00\", \"i\": [1, 2.5]}");
  EXPECT_EQ(json::parse(text), Value(o));
}

TEST(Json, ErrorsGiveLineAndColumn) {
  try {
    json::parse("{\n  \"a\": 1,\n  \"b\" 2\n}");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected ':' after object key at byte 18 (line 3, column 7, found '2')"),
              std::string::npos)
        << e.what();
  }
}

TEST(Json, WritesIndented) {
  Value v = json::parse(R"({"a":[1,2],"b":{"c":"d"},"e":[]})");
  EXPECT_EQ(json::dump(v, 2), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {\n    \"c\": \"d\"\n  },\n  \"e\": []\n}");
}

TEST(Json, RoundTrips) {
  const char* text =
      R"({"__metadata__":{"k":"v \u00e9 \ud83d\ude00"},"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("n":[-0.0,1.5e-300,123456789012345678,-1,true,null]})";
  Value v = json::parse(text);
  EXPECT_EQ(json::parse(json::dump(v)), v);
  EXPECT_EQ(json::parse(json::dump(v, 4)), v);
  EXPECT_EQ(json::dump(json::parse(json::dump(v))), json::dump(v));
}

TEST(Json, RejectsNonFiniteOnWrite) {
  EXPECT_THROW(json::dump(Value(std::nan(""))), Error);
  EXPECT_THROW(json::dump(Value(HUGE_VAL)), Error);
}

TEST(Json, SetReplacesOrAppends) {
  Value v{json::Object{}};
  v.set("a", 1);
  v.set("b", "x");
  v.set("a", 2);
  EXPECT_EQ(json::dump(v), R"({"a":2,"b":"x"})");
  EXPECT_THROW(Value(1).set("a", 1), Error);
}

}  // namespace
}  // namespace alk
