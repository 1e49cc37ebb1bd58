// Recursive-descent parser for the op table's expression strings (grammar in
// include/alk/elementwise.def). It builds straight into a Builder, so CSE and
// simplification apply while parsing and there is no separate syntax tree.
//
//   or      := and ('||' and)*
//   and     := eq ('&&' eq)*
//   eq      := rel (('==' | '!=') rel)*
//   rel     := add (('<' | '<=' | '>' | '>=') add)*
//   add     := mul (('+' | '-') mul)*
//   mul     := unary (('*' | '/') unary)*
//   unary   := ('-' | '!') unary | primary
//   primary := number | name | name '(' or (',' or)* ')' | '(' or ')'
#include <cctype>
#include <charconv>
#include <source_location>

#include "alk/error.h"
#include "alk/expr.h"

namespace alk::expr {

namespace {

struct Call {
  std::string_view name;
  Fn fn;
};
constexpr Call kCalls[] = {
    {"select", Fn::Select}, {"max", Fn::Max},     {"min", Fn::Min},     {"pow", Fn::Pow},
    {"exp", Fn::Exp},       {"log", Fn::Log},     {"log1p", Fn::Log1p}, {"expm1", Fn::Expm1},
    {"sqrt", Fn::Sqrt},     {"rsqrt", Fn::Rsqrt}, {"sin", Fn::Sin},     {"cos", Fn::Cos},
    {"tanh", Fn::Tanh},     {"erf", Fn::Erf},     {"abs", Fn::Abs},     {"floor", Fn::Floor},
    {"ceil", Fn::Ceil},     {"round", Fn::Round}, {"round_bf16", Fn::RoundBf16},
    {"bitnot", Fn::BitNot}, {"bitand", Fn::BitAnd}, {"bitor", Fn::BitOr}, {"bitxor", Fn::BitXor},
    {"shl", Fn::Shl},       {"shr", Fn::Shr},     {"rotl", Fn::Rotl},   {"rotr", Fn::Rotr}};

class Parser {
 public:
  Parser(Builder& b, std::string_view text, std::span<const std::string> names, std::span<const int> inputs,
         Type literal_type)
      : b_(b), text_(text), names_(names), inputs_(inputs), lit_(literal_type) {}

  int parse_all() {
    int r = parse_or();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "' after the expression");
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("expr", "cannot parse \"" + std::string(text_) + "\" at position " + std::to_string(pos_) + ": " +
                            what,
                Loc::current());
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  // Consumes op when it comes next, but not when it is the prefix of a longer operator
  // ("<" must not eat the start of "<=").
  bool eat(std::string_view op) {
    skip_space();
    if (text_.substr(pos_, op.size()) != op) return false;
    if (op.size() == 1 && pos_ + 1 < text_.size() && text_[pos_ + 1] == '=' &&
        (op == "<" || op == ">" || op == "!" || op == "="))
      return false;
    pos_ += op.size();
    return true;
  }

  void expect(std::string_view op) {
    if (!eat(op)) fail("expected '" + std::string(op) + "'");
  }

  // + - * / and unary - on two bools would be integer arithmetic; the table means
  // numbers ("(x > 0) - (x < 0)"), so bools become the literal type first.
  int arith(Fn f, int a, int c) {
    if (b_.type_of(a) == Type::Bool && b_.type_of(c) == Type::Bool) {
      a = b_.cast(a, lit_);
      c = b_.cast(c, lit_);
    }
    return b_.binary(f, a, c);
  }

  int parse_or() {
    int a = parse_and();
    while (eat("||")) a = b_.binary(Fn::Or, a, parse_and());
    return a;
  }
  int parse_and() {
    int a = parse_eq();
    while (eat("&&")) a = b_.binary(Fn::And, a, parse_eq());
    return a;
  }
  int parse_eq() {
    int a = parse_rel();
    for (;;) {
      if (eat("==")) a = b_.binary(Fn::Eq, a, parse_rel());
      else if (eat("!=")) a = b_.binary(Fn::Ne, a, parse_rel());
      else return a;
    }
  }
  int parse_rel() {
    int a = parse_add();
    for (;;) {
      if (eat("<=")) a = b_.binary(Fn::Le, a, parse_add());
      else if (eat(">=")) a = b_.binary(Fn::Ge, a, parse_add());
      else if (eat("<")) a = b_.binary(Fn::Lt, a, parse_add());
      else if (eat(">")) a = b_.binary(Fn::Gt, a, parse_add());
      else return a;
    }
  }
  int parse_add() {
    int a = parse_mul();
    for (;;) {
      if (eat("+")) a = arith(Fn::Add, a, parse_mul());
      else if (eat("-")) a = arith(Fn::Sub, a, parse_mul());
      else return a;
    }
  }
  int parse_mul() {
    int a = parse_unary();
    for (;;) {
      if (eat("*")) a = arith(Fn::Mul, a, parse_unary());
      else if (eat("/")) a = arith(Fn::Div, a, parse_unary());
      else return a;
    }
  }
  int parse_unary() {
    if (eat("-")) {
      int a = parse_unary();
      if (b_.type_of(a) == Type::Bool) a = b_.cast(a, lit_);
      return b_.unary(Fn::Neg, a);
    }
    if (eat("!")) return b_.unary(Fn::Not, parse_unary());
    return parse_primary();
  }

  int parse_primary() {
    skip_space();
    if (pos_ >= text_.size()) fail("expected an operand, found the end");
    char ch = text_[pos_];
    if (ch == '(') {
      ++pos_;
      int a = parse_or();
      expect(")");
      return a;
    }
    if (std::isdigit(static_cast<unsigned char>(ch)) || ch == '.') return parse_number();
    if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') return parse_name();
    fail("expected an operand, found '" + std::string(1, ch) + "'");
  }

  int parse_number() {
    // A literal is digits, an optional fraction and an optional exponent; no sign
    // (unary minus handles that) and no suffix.
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    };
    digits();
    if (pos_ < text_.size() && text_[pos_] == '.') ++pos_, digits();
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      size_t exp_start = pos_;
      digits();
      if (pos_ == exp_start) fail("exponent without digits");
    }
    double v = 0;
    auto r = std::from_chars(text_.data() + start, text_.data() + pos_, v);
    if (r.ec != std::errc() || r.ptr != text_.data() + pos_) {
      pos_ = start;
      fail("bad number");
    }
    if (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      fail("unexpected '" + std::string(1, text_[pos_]) + "' after a number");
    return b_.constant(v, lit_);
  }

  int parse_name() {
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    std::string_view name = text_.substr(start, pos_ - start);
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '(') {
      for (const Call& c : kCalls)
        if (c.name == name) return parse_call(c, start);
      pos_ = start;
      fail("unknown function '" + std::string(name) + "'");
    }
    for (size_t k = 0; k < names_.size(); ++k)
      if (names_[k] == name) return inputs_[k];
    pos_ = start;
    fail("unknown name '" + std::string(name) + "'");
  }

  int parse_call(const Call& c, size_t start) {
    expect("(");
    int args[3] = {-1, -1, -1};
    int n = 0;
    if (!eat(")")) {
      do {
        if (n == 3) fail(std::string(c.name) + "() takes " + std::to_string(fn_arity(c.fn)) + " arguments");
        args[n++] = parse_or();
      } while (eat(","));
      expect(")");
    }
    if (n != fn_arity(c.fn)) {
      pos_ = start;
      fail(std::string(c.name) + "() takes " + std::to_string(fn_arity(c.fn)) + " arguments, got " +
           std::to_string(n));
    }
    switch (n) {
      case 1: return b_.unary(c.fn, args[0]);
      case 2: return b_.binary(c.fn, args[0], args[1]);
      default: return b_.select(args[0], args[1], args[2]);
    }
  }

  Builder& b_;
  std::string_view text_;
  std::span<const std::string> names_;
  std::span<const int> inputs_;
  Type lit_;
  size_t pos_ = 0;
};

}  // namespace

int parse_into(Builder& b, std::string_view text, std::span<const std::string> names, std::span<const int> inputs,
               Type literal_type) {
  if (names.size() != inputs.size())
    throw Error("expr", "parse: " + std::to_string(names.size()) + " names but " + std::to_string(inputs.size()) +
                            " inputs",
                Loc::current());
  return Parser(b, text, names, inputs, literal_type).parse_all();
}

Expr parse(std::string_view text, std::span<const std::string> names, std::span<const Type> types,
           Type literal_type) {
  if (names.size() != types.size())
    throw Error("expr", "parse: " + std::to_string(names.size()) + " names but " + std::to_string(types.size()) +
                            " types",
                Loc::current());
  Builder b;
  std::vector<int> inputs;
  for (size_t k = 0; k < types.size(); ++k) inputs.push_back(b.input(static_cast<int>(k), types[k]));
  return b.finish(parse_into(b, text, names, inputs, literal_type));
}

}  // namespace alk::expr
