// The Jinja subset of chat templates (chat_template.h): a lexer that cuts the source into text
// and tags, a recursive-descent parser into statement and expression trees, and an evaluator
// over a small dynamic value type.
#include "serve/chat_template.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

namespace alk::serve {

namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw ApiError(500, "template_error", "chat template: " + what);
}

// ---- values ----

struct Val;
using List = std::vector<Val>;
using Dict = std::vector<std::pair<std::string, Val>>;

struct Val {
  enum K : uint8_t { Undef, None, Bool, Int, Float, Str, ListK, DictK, Namespace } k = Undef;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // DictK and Namespace (a namespace is a dict `set ns.x` may change)

  static Val none() { Val v; v.k = None; return v; }
  static Val boolean(bool x) { Val v; v.k = Bool; v.b = x; return v; }
  static Val integer(int64_t x) { Val v; v.k = Int; v.i = x; return v; }
  static Val real(double x) { Val v; v.k = Float; v.f = x; return v; }
  static Val str(std::string x) { Val v; v.k = Str; v.s = std::move(x); return v; }
  static Val of_list(List x) { Val v; v.k = ListK; v.list = std::make_shared<List>(std::move(x)); return v; }
  static Val of_dict(Dict x, K kind = DictK) { Val v; v.k = kind; v.dict = std::make_shared<Dict>(std::move(x)); return v; }
  bool number() const { return k == Int || k == Float || k == Bool; }
  double as_double() const { return k == Float ? f : k == Bool ? (b ? 1 : 0) : static_cast<double>(i); }
  const Val* member(const std::string& key) const {
    if (!dict) return nullptr;
    for (const auto& [name, v] : *dict)
      if (name == key) return &v;
    return nullptr;
  }
};

bool truthy(const Val& v) {
  switch (v.k) {
    case Val::Undef: case Val::None: return false;
    case Val::Bool: return v.b;
    case Val::Int: return v.i != 0;
    case Val::Float: return v.f != 0;
    case Val::Str: return !v.s.empty();
    case Val::ListK: return !v.list->empty();
    case Val::DictK: return !v.dict->empty();
    case Val::Namespace: return true;
  }
  return false;
}

std::string repr(const Val& v);

std::string to_text(const Val& v) {
  switch (v.k) {
    case Val::Undef: return "";
    case Val::None: return "None";
    case Val::Bool: return v.b ? "True" : "False";
    case Val::Int: return std::to_string(v.i);
    case Val::Float: {
      if (std::floor(v.f) == v.f && std::fabs(v.f) < 1e16) return std::to_string(static_cast<int64_t>(v.f)) + ".0";
      std::ostringstream o;
      o.precision(17);
      o << v.f;
      return o.str();
    }
    case Val::Str: return v.s;
    default: return repr(v);
  }
}

std::string repr(const Val& v) {
  if (v.k == Val::Str) {
    std::string out = "'";
    for (char c : v.s) out += c == '\'' ? std::string("\\'") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    return out + "'";
  }
  if (v.k == Val::ListK) {
    std::string out = "[";
    for (size_t j = 0; j < v.list->size(); ++j) out += (j ? ", " : "") + repr((*v.list)[j]);
    return out + "]";
  }
  if (v.k == Val::DictK || v.k == Val::Namespace) {
    std::string out = "{";
    for (size_t j = 0; j < v.dict->size(); ++j)
      out += (j ? ", " : "") + repr(Val::str((*v.dict)[j].first)) + ": " + repr((*v.dict)[j].second);
    return out + "}";
  }
  return to_text(v);
}

// transformers' tojson: json.dumps(x, ensure_ascii=False) (separators ", " and ": ").
std::string to_json(const Val& v) {
  switch (v.k) {
    case Val::Undef: case Val::None: return "null";
    case Val::Bool: return v.b ? "true" : "false";
    case Val::Int: return std::to_string(v.i);
    case Val::Float: return json::dump(json::Value(v.f));
    case Val::Str: return json::dump(json::Value(v.s));
    case Val::ListK: {
      std::string out = "[";
      for (size_t j = 0; j < v.list->size(); ++j) out += (j ? ", " : "") + to_json((*v.list)[j]);
      return out + "]";
    }
    default: {
      std::string out = "{";
      for (size_t j = 0; j < v.dict->size(); ++j)
        out += (j ? ", " : "") + json::dump(json::Value((*v.dict)[j].first)) + ": " + to_json((*v.dict)[j].second);
      return out + "}";
    }
  }
}

bool equal(const Val& a, const Val& b) {
  if (a.number() && b.number() && a.k != Val::Bool && b.k != Val::Bool) return a.as_double() == b.as_double();
  if (a.k != b.k) return (a.k == Val::Undef || a.k == Val::None) && (b.k == Val::Undef || b.k == Val::None) && a.k == b.k;
  switch (a.k) {
    case Val::Bool: return a.b == b.b;
    case Val::Str: return a.s == b.s;
    case Val::ListK: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t j = 0; j < a.list->size(); ++j)
        if (!equal((*a.list)[j], (*b.list)[j])) return false;
      return true;
    }
    case Val::DictK: case Val::Namespace: return a.dict == b.dict;
    default: return true;
  }
}

// ---- lexer ----

struct Tok {
  enum K : uint8_t { Name, String, Int, Float, Op, End } k = End;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

std::vector<Tok> lex_expr(std::string_view src) {
  std::vector<Tok> out;
  size_t p = 0;
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) { ++p; continue; }
    Tok t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
      t.k = Tok::Name;
      t.text = std::string(src.substr(p, q - p));
      p = q;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t q = p;
      while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
      bool is_float = q + 1 < src.size() && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]));
      if (is_float) {
        ++q;
        while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
      }
      t.text = std::string(src.substr(p, q - p));
      if (is_float) {
        t.k = Tok::Float;
        t.f = std::stod(t.text);
      } else {
        t.k = Tok::Int;
        if (t.text.size() > 18) unsupported("integer literal too long: " + t.text);
        t.i = std::stoll(t.text);
      }
      p = q;
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t q = p + 1;
      for (; q < src.size() && src[q] != c; ++q) {
        if (src[q] == '\\' && q + 1 < src.size()) {
          const char e = src[++q];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          s += src[q];
        }
      }
      if (q >= src.size()) unsupported("unterminated string literal");
      t.k = Tok::String;
      t.text = std::move(s);
      p = q + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      t.k = Tok::Op;
      t.text = std::string(1, c);
      for (const char* op : two)
        if (src.substr(p, 2) == op) t.text = op;
      if (std::strchr("+-*/%~=<>!()[]{}.,:|", c) == nullptr) unsupported(std::string("unexpected character '") + c + "'");
      p += t.text.size();
    }
    out.push_back(std::move(t));
  }
  out.push_back(Tok{});
  return out;
}

}  // namespace

// ---- trees ----

struct Expr {
  enum K : uint8_t { Literal, Var, Attr, Item, Slice, Call, Filter, Test, Binary, Unary, Cond, ListLit, DictLit } k;
  Val value;
  std::string name;  // variable, attribute, filter, test or operator
  std::vector<std::shared_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::shared_ptr<Expr>>> kwargs;
  bool negated = false;
  explicit Expr(K kind) : k(kind) {}
};
using ExprP = std::shared_ptr<Expr>;

struct ChatTemplate::Node {
  enum K : uint8_t { Text, Output, If, For, Set, Block } k = Block;
  std::string text;
  ExprP expr;                                              // Output, Set's value, For's sequence
  std::vector<std::pair<ExprP, std::vector<Node>>> branches;  // If: (condition, body); For: body
  std::vector<Node> otherwise;                             // If's else, For's else
  std::vector<std::string> names;                          // For's loop variables; Set's target (ns, attr)
  ExprP filter;                                            // For's `if`
  std::vector<Node> body;                                  // Block
};

namespace {

using Node = ChatTemplate::Node;

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}

  ExprP parse_all() {
    ExprP e = expression();
    if (t_[p_].k != Tok::End) unsupported("unexpected '" + t_[p_].text + "' in an expression");
    return e;
  }
  const Tok& peek() const { return t_[p_]; }
  bool accept_name(const char* n) {
    if (t_[p_].k == Tok::Name && t_[p_].text == n) { ++p_; return true; }
    return false;
  }
  bool accept_op(const char* o) {
    if (t_[p_].k == Tok::Op && t_[p_].text == o) { ++p_; return true; }
    return false;
  }
  void expect_op(const char* o) {
    if (!accept_op(o)) unsupported(std::string("expected '") + o + "', got '" + t_[p_].text + "'");
  }
  std::string name() {
    if (t_[p_].k != Tok::Name) unsupported("expected a name, got '" + t_[p_].text + "'");
    return t_[p_++].text;
  }
  bool at_end() const { return t_[p_].k == Tok::End; }

  ExprP expression() {
    ExprP e = or_expr();
    if (accept_name("if")) {
      auto c = std::make_shared<Expr>(Expr::Cond);
      ExprP cond = or_expr();
      ExprP other = accept_name("else") ? expression() : nullptr;
      c->args = {e, cond, other};
      return c;
    }
    return e;
  }
  // The `or` level without a trailing `if` (a for loop's sequence, whose `if` is a filter).
  ExprP or_expr() {
    ExprP e = and_expr();
    while (accept_name("or")) e = binary("or", e, and_expr());
    return e;
  }

 private:
  static ExprP binary(const std::string& op, ExprP a, ExprP b) {
    auto e = std::make_shared<Expr>(Expr::Binary);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (accept_name("and")) e = binary("and", e, not_expr());
    return e;
  }
  ExprP not_expr() {
    if (accept_name("not")) {
      auto e = std::make_shared<Expr>(Expr::Unary);
      e->name = "not";
      e->args = {not_expr()};
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = concat();
    for (;;) {
      const Tok& t = peek();
      if (t.k == Tok::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" ||
                             t.text == ">=")) {
        ++p_;
        e = binary(t.text, e, concat());
      } else if (t.k == Tok::Name && t.text == "in") {
        ++p_;
        e = binary("in", e, concat());
      } else if (t.k == Tok::Name && t.text == "not" && t_[p_ + 1].k == Tok::Name && t_[p_ + 1].text == "in") {
        p_ += 2;
        auto n = std::make_shared<Expr>(Expr::Unary);
        n->name = "not";
        n->args = {binary("in", e, concat())};
        e = n;
      } else if (t.k == Tok::Name && t.text == "is") {
        ++p_;
        auto test = std::make_shared<Expr>(Expr::Test);
        test->negated = accept_name("not");
        test->name = name();
        test->args = {e};
        e = test;
      } else {
        return e;
      }
    }
  }
  ExprP concat() {
    ExprP e = additive();
    while (accept_op("~")) e = binary("~", e, additive());
    return e;
  }
  ExprP additive() {
    ExprP e = multiplicative();
    for (;;) {
      if (accept_op("+")) e = binary("+", e, multiplicative());
      else if (accept_op("-")) e = binary("-", e, multiplicative());
      else return e;
    }
  }
  ExprP multiplicative() {
    ExprP e = unary();
    for (;;) {
      const Tok& t = peek();
      if (t.k == Tok::Op && (t.text == "*" || t.text == "/" || t.text == "%" || t.text == "//")) {
        ++p_;
        e = binary(t.text, e, unary());
      } else {
        return e;
      }
    }
  }
  ExprP unary() {
    if (accept_op("-")) {
      auto e = std::make_shared<Expr>(Expr::Unary);
      e->name = "-";
      e->args = {unary()};
      return e;
    }
    return filtered();
  }
  ExprP filtered() {
    ExprP e = postfix(primary());
    while (accept_op("|")) {
      auto f = std::make_shared<Expr>(Expr::Filter);
      f->name = name();
      f->args = {e};
      if (accept_op("(")) call_args(*f);
      e = f;
    }
    return e;
  }
  void call_args(Expr& call) {
    if (accept_op(")")) return;
    do {
      if (peek().k == Tok::Name && t_[p_ + 1].k == Tok::Op && t_[p_ + 1].text == "=") {
        std::string key = name();
        ++p_;
        call.kwargs.emplace_back(key, expression());
      } else {
        call.args.push_back(expression());
      }
    } while (accept_op(","));
    expect_op(")");
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = std::make_shared<Expr>(Expr::Attr);
        a->name = name();
        a->args = {e};
        e = a;
      } else if (accept_op("[")) {
        ExprP start, stop;
        if (!(peek().k == Tok::Op && peek().text == ":")) start = expression();
        if (accept_op(":")) {
          if (!(peek().k == Tok::Op && peek().text == "]")) stop = expression();
          auto s = std::make_shared<Expr>(Expr::Slice);
          s->args = {e, start, stop};
          e = s;
        } else {
          auto it = std::make_shared<Expr>(Expr::Item);
          it->args = {e, start};
          e = it;
        }
        expect_op("]");
      } else if (accept_op("(")) {
        auto c = std::make_shared<Expr>(Expr::Call);
        c->args = {e};
        call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }
  ExprP primary() {
    const Tok t = peek();
    ++p_;
    auto lit = [](Val v) {
      auto e = std::make_shared<Expr>(Expr::Literal);
      e->value = std::move(v);
      return e;
    };
    switch (t.k) {
      case Tok::String: {
        std::string s = t.text;
        while (peek().k == Tok::String) s += t_[p_++].text;  // adjacent literals join, as in Python
        return lit(Val::str(s));
      }
      case Tok::Int: return lit(Val::integer(t.i));
      case Tok::Float: return lit(Val::real(t.f));
      case Tok::Name:
        if (t.text == "true" || t.text == "True") return lit(Val::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Val::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Val::none());
        {
          auto v = std::make_shared<Expr>(Expr::Var);
          v->name = t.text;
          return v;
        }
      case Tok::Op:
        if (t.text == "(") {
          ExprP e = expression();
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto l = std::make_shared<Expr>(Expr::ListLit);
          if (!accept_op("]")) {
            do l->args.push_back(expression());
            while (accept_op(","));
            expect_op("]");
          }
          return l;
        }
        if (t.text == "{") {
          auto d = std::make_shared<Expr>(Expr::DictLit);
          if (!accept_op("}")) {
            do {
              d->args.push_back(expression());
              expect_op(":");
              d->args.push_back(expression());
            } while (accept_op(","));
            expect_op("}");
          }
          return d;
        }
        break;
      case Tok::End: break;
    }
    unsupported("unexpected '" + t.text + "' in an expression");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
};

// The source cut into text and tags, whitespace control applied.
struct Piece {
  enum K : uint8_t { Text, Output, Statement } k;
  std::string text;
};

std::vector<Piece> cut(const std::string& src) {
  std::vector<Piece> out;
  size_t p = 0;
  bool strip_next = false, after_block = false;
  while (p <= src.size()) {
    size_t open = src.find('{', p);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(p, open == std::string::npos ? std::string::npos : open - p);
    if (after_block && !text.empty() && text[0] == '\n') text.erase(0, 1);  // trim_blocks
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    strip_next = after_block = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::Text, text});
      break;
    }
    const char kind = src[open + 1];
    const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
    if (strip_before) {
      text.erase(text.find_last_not_of(" \t\r\n") == std::string::npos ? 0 : text.find_last_not_of(" \t\r\n") + 1);
    } else if (kind != '{' && !(open + 2 < src.size() && src[open + 2] == '+')) {
      // lstrip_blocks: spaces and tabs from the line's start up to a block tag go (the line's
      // start found in the source: trim_blocks may have taken its newline from the text).
      const size_t newline = open == 0 ? std::string::npos : src.rfind('\n', open - 1);
      const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
      const bool only_blanks = src.find_first_not_of(" \t", line_start) >= open;
      if (only_blanks && (line_start > p || (line_start == 0 && p == 0)))
        text.erase(text.size() - std::min(text.size(), open - line_start));
    }
    if (!text.empty()) out.push_back({Piece::Text, text});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t q = open + 2 + (strip_before || (open + 2 < src.size() && src[open + 2] == '+') ? 1 : 0);
    const size_t body_start = q;
    char quote = 0;
    for (; q + 1 < src.size(); ++q) {
      if (kind != '#') {
        if (quote) {
          if (src[q] == '\\') ++q;
          else if (src[q] == quote) quote = 0;
          continue;
        }
        if (src[q] == '\'' || src[q] == '"') { quote = src[q]; continue; }
      }
      if (src.compare(q, 2, close) == 0) break;
    }
    if (q + 1 >= src.size()) unsupported(std::string("a tag opened with '{") + kind + "' is never closed");
    size_t body_end = q;
    if (body_end > body_start && src[body_end - 1] == '-') {
      strip_next = true;
      --body_end;
    }
    if (kind != '#')
      out.push_back({kind == '{' ? Piece::Output : Piece::Statement, src.substr(body_start, body_end - body_start)});
    after_block = kind != '{';
    p = q + 2;
  }
  return out;
}

class StatementParser {
 public:
  explicit StatementParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::vector<Node> parse_all() {
    std::string end;
    std::vector<Node> body = block({}, end);
    if (!end.empty()) unsupported("unexpected {% " + end + " %}");
    return body;
  }

 private:
  // Nodes up to one of the `stops` keywords (returned in `end` with its parser), or the end.
  std::vector<Node> block(const std::vector<std::string>& stops, std::string& end) {
    std::vector<Node> nodes;
    while (i_ < pieces_.size()) {
      const Piece& piece = pieces_[i_++];
      if (piece.k == Piece::Text) {
        Node n;
        n.k = Node::Text;
        n.text = piece.text;
        nodes.push_back(std::move(n));
        continue;
      }
      if (piece.k == Piece::Output) {
        Node n;
        n.k = Node::Output;
        n.expr = ExprParser(lex_expr(piece.text)).parse_all();
        nodes.push_back(std::move(n));
        continue;
      }
      current_ = std::make_unique<ExprParser>(lex_expr(piece.text));
      const std::string keyword = current_->name();
      for (const std::string& s : stops)
        if (keyword == s) {
          end = keyword;
          return nodes;
        }
      if (keyword == "if") nodes.push_back(if_node());
      else if (keyword == "for") nodes.push_back(for_node());
      else if (keyword == "set") nodes.push_back(set_node());
      else if (keyword == "generation" || keyword == "endgeneration") continue;  // transformers' marker: no output
      else unsupported("{% " + keyword + " %} is not supported");
    }
    if (!stops.empty()) unsupported("{% " + stops.back() + " %} is missing");
    end.clear();
    return nodes;
  }
  Node if_node() {
    Node n;
    n.k = Node::If;
    ExprP cond = current_->parse_all();
    for (;;) {
      std::string end;
      std::vector<Node> body = block({"elif", "else", "endif"}, end);
      n.branches.emplace_back(cond, std::move(body));
      if (end == "elif") {
        cond = current_->parse_all();
        continue;
      }
      if (end == "else") {
        n.otherwise = block({"endif"}, end);
      }
      return n;
    }
  }
  Node for_node() {
    Node n;
    n.k = Node::For;
    n.names.push_back(current_->name());
    while (current_->accept_op(",")) n.names.push_back(current_->name());
    if (!current_->accept_name("in")) unsupported("{% for %} needs 'in'");
    n.expr = current_->or_expr();
    if (current_->accept_name("if")) n.filter = current_->or_expr();
    if (current_->accept_name("recursive")) unsupported("recursive loops are not supported");
    if (!current_->at_end()) unsupported("unexpected '" + current_->peek().text + "' in {% for %}");
    std::string end;
    std::vector<Node> body = block({"else", "endfor"}, end);
    n.branches.emplace_back(nullptr, std::move(body));
    if (end == "else") n.otherwise = block({"endfor"}, end);
    return n;
  }
  Node set_node() {
    Node n;
    n.k = Node::Set;
    n.names.push_back(current_->name());
    if (current_->accept_op(".")) n.names.push_back(current_->name());
    if (!current_->accept_op("=")) unsupported("{% set %} blocks are not supported (only {% set x = value %})");
    n.expr = current_->parse_all();
    return n;
  }

  std::vector<Piece> pieces_;
  size_t i_ = 0;
  std::unique_ptr<ExprParser> current_;
};

// ---- evaluation ----

class Renderer {
 public:
  explicit Renderer(std::string& out) : out_(out) { scopes_.emplace_back(); }
  void set_global(const std::string& name, Val v) { scopes_.front()[name] = std::move(v); }

  void run(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) run(n);
  }

 private:
  void run(const Node& n) {
    switch (n.k) {
      case Node::Text: out_ += n.text; break;
      case Node::Output: out_ += to_text(eval(*n.expr)); break;
      case Node::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) {
            run(body);
            return;
          }
        run(n.otherwise);
        break;
      case Node::For: run_for(n); break;
      case Node::Set:
        if (n.names.size() == 1) {
          scopes_.back()[n.names[0]] = eval(*n.expr);
        } else {
          Val ns = lookup(n.names[0]);
          if (ns.k != Val::Namespace) unsupported("{% set " + n.names[0] + "." + n.names[1] + " %} needs a namespace()");
          Val v = eval(*n.expr);
          for (auto& [key, x] : *ns.dict)
            if (key == n.names[1]) {
              x = v;
              return;
            }
          ns.dict->emplace_back(n.names[1], v);
        }
        break;
      case Node::Block: run(n.body); break;
    }
  }

  void run_for(const Node& n) {
    const Val seq = eval(*n.expr);
    List items;
    if (seq.k == Val::ListK) items = *seq.list;
    else if (seq.k == Val::DictK) for (const auto& kv : *seq.dict) items.push_back(Val::str(kv.first));
    else if (seq.k == Val::Str) for (char c : seq.s) items.push_back(Val::str(std::string(1, c)));
    else if (seq.k != Val::Undef && seq.k != Val::None) unsupported("cannot loop over " + repr(seq));
    scopes_.emplace_back();
    auto bind = [&](const Val& item) {
      if (n.names.size() == 1) {
        scopes_.back()[n.names[0]] = item;
      } else {
        if (item.k != Val::ListK || item.list->size() != n.names.size())
          unsupported("cannot unpack " + repr(item) + " into " + std::to_string(n.names.size()) + " names");
        for (size_t j = 0; j < n.names.size(); ++j) scopes_.back()[n.names[j]] = (*item.list)[j];
      }
    };
    if (n.filter) {
      List kept;
      for (const Val& item : items) {
        bind(item);
        if (truthy(eval(*n.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    for (size_t j = 0; j < items.size(); ++j) {
      bind(items[j]);
      const int64_t idx = static_cast<int64_t>(j), len = static_cast<int64_t>(items.size());
      scopes_.back()["loop"] = Val::of_dict({{"index", Val::integer(idx + 1)},
                                             {"index0", Val::integer(idx)},
                                             {"revindex", Val::integer(len - idx)},
                                             {"revindex0", Val::integer(len - idx - 1)},
                                             {"first", Val::boolean(j == 0)},
                                             {"last", Val::boolean(j + 1 == items.size())},
                                             {"length", Val::integer(len)},
                                             {"previtem", j > 0 ? items[j - 1] : Val()},
                                             {"nextitem", j + 1 < items.size() ? items[j + 1] : Val()}});
      run(n.branches[0].second);
    }
    scopes_.pop_back();
    if (items.empty()) run(n.otherwise);
  }

  Val lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end()) return it->second;
    return Val();
  }

  static int64_t index_of(int64_t i, size_t size) { return i < 0 ? i + static_cast<int64_t>(size) : i; }

  Val item(const Val& obj, const Val& key) {
    if ((obj.k == Val::DictK || obj.k == Val::Namespace) && key.k == Val::Str) {
      const Val* v = obj.member(key.s);
      return v ? *v : Val();
    }
    if ((obj.k == Val::ListK || obj.k == Val::Str) && key.k == Val::Int) {
      const size_t size = obj.k == Val::ListK ? obj.list->size() : obj.s.size();
      const int64_t i = index_of(key.i, size);
      if (i < 0 || i >= static_cast<int64_t>(size)) return Val();
      return obj.k == Val::ListK ? (*obj.list)[static_cast<size_t>(i)] : Val::str(std::string(1, obj.s[static_cast<size_t>(i)]));
    }
    return Val();
  }

  Val slice(const Val& obj, const Expr* start, const Expr* stop) {
    const size_t size = obj.k == Val::ListK ? obj.list->size() : obj.k == Val::Str ? obj.s.size() : 0;
    if (obj.k != Val::ListK && obj.k != Val::Str) unsupported("cannot slice " + repr(obj));
    auto bound = [&](const Expr* e, int64_t dflt) {
      if (!e) return dflt;
      const Val v = eval(*e);
      if (v.k != Val::Int) unsupported("slice bounds must be integers");
      return std::clamp<int64_t>(index_of(v.i, size), 0, static_cast<int64_t>(size));
    };
    const int64_t a = bound(start, 0), b = std::max(a, bound(stop, static_cast<int64_t>(size)));
    if (obj.k == Val::Str) return Val::str(obj.s.substr(static_cast<size_t>(a), static_cast<size_t>(b - a)));
    return Val::of_list(List(obj.list->begin() + a, obj.list->begin() + b));
  }

  Val call(const Expr& e) {
    const Expr& callee = *e.args[0];
    std::vector<Val> args;
    for (size_t j = 1; j < e.args.size(); ++j) args.push_back(eval(*e.args[j]));
    if (callee.k == Expr::Var) {
      if (callee.name == "raise_exception")
        throw ApiError(400, "invalid_request_error",
                       "the chat template refused the messages: " + (args.empty() ? std::string() : to_text(args[0])),
                       "messages");
      if (callee.name == "namespace") {
        Dict d;
        for (const auto& [key, x] : e.kwargs) d.emplace_back(key, eval(*x));
        return Val::of_dict(std::move(d), Val::Namespace);
      }
      if (callee.name == "range") {
        int64_t a = 0, b = 0, step = 1;
        if (args.size() == 1) b = args[0].i;
        else if (args.size() >= 2) a = args[0].i, b = args[1].i;
        if (args.size() == 3) step = args[2].i;
        if (step == 0 || std::abs(b - a) / std::abs(step) > 100000) unsupported("range too long");
        List l;
        for (int64_t x = a; step > 0 ? x < b : x > b; x += step) l.push_back(Val::integer(x));
        return Val::of_list(std::move(l));
      }
      unsupported("unknown function " + callee.name + "()");
    }
    if (callee.k != Expr::Attr) unsupported("only functions and methods can be called");
    const Val obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    auto arg_str = [&](size_t j) {
      if (j >= args.size() || args[j].k != Val::Str) unsupported(m + "() needs a string argument");
      return args[j].s;
    };
    if (obj.k == Val::Str) {
      const std::string& s = obj.s;
      const std::string ws = args.empty() ? " \t\r\n" : arg_str(0);
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        size_t a = m == "rstrip" ? 0 : s.find_first_not_of(ws);
        if (a == std::string::npos) return Val::str("");
        size_t b = m == "lstrip" ? s.size() : s.find_last_not_of(ws) + 1;
        return Val::str(s.substr(a, b - a));
      }
      if (m == "upper" || m == "lower") {
        std::string r = s;
        for (char& c : r) c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        return Val::str(r);
      }
      if (m == "startswith") return Val::boolean(s.rfind(arg_str(0), 0) == 0);
      if (m == "endswith") {
        const std::string x = arg_str(0);
        return Val::boolean(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      }
      if (m == "split") {
        const std::string sep = arg_str(0);
        if (sep.empty()) unsupported("split() needs a non-empty separator");
        List parts;
        size_t a = 0;
        for (size_t b; (b = s.find(sep, a)) != std::string::npos; a = b + sep.size()) parts.push_back(Val::str(s.substr(a, b - a)));
        parts.push_back(Val::str(s.substr(a)));
        return Val::of_list(std::move(parts));
      }
      if (m == "replace") {
        const std::string from = arg_str(0), to = arg_str(1);
        if (from.empty()) return obj;
        std::string r;
        size_t a = 0;
        for (size_t b; (b = s.find(from, a)) != std::string::npos; a = b + from.size()) r += s.substr(a, b - a) + to;
        return Val::str(r + s.substr(a));
      }
    }
    if (obj.k == Val::DictK) {
      if (m == "get") {
        const Val* v = args.empty() || args[0].k != Val::Str ? nullptr : obj.member(args[0].s);
        return v ? *v : args.size() > 1 ? args[1] : Val::none();
      }
      if (m == "items" || m == "keys" || m == "values") {
        List l;
        for (const auto& [key, v] : *obj.dict)
          l.push_back(m == "items" ? Val::of_list({Val::str(key), v}) : m == "keys" ? Val::str(key) : v);
        return Val::of_list(std::move(l));
      }
    }
    unsupported("unknown method " + m + "() on " + repr(obj));
  }

  Val filter(const Expr& e) {
    const Val v = eval(*e.args[0]);
    const std::string& f = e.name;
    if (f == "trim") {
      const std::string s = to_text(v);
      const size_t a = s.find_first_not_of(" \t\r\n");
      return Val::str(a == std::string::npos ? std::string() : s.substr(a, s.find_last_not_of(" \t\r\n") + 1 - a));
    }
    if (f == "upper" || f == "lower") {
      std::string r = to_text(v);
      for (char& c : r) c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      return Val::str(r);
    }
    if (f == "length" || f == "count") {
      if (v.k == Val::Str) return Val::integer(static_cast<int64_t>(v.s.size()));
      if (v.k == Val::ListK) return Val::integer(static_cast<int64_t>(v.list->size()));
      if (v.k == Val::DictK) return Val::integer(static_cast<int64_t>(v.dict->size()));
      unsupported("length of " + repr(v));
    }
    if (f == "tojson") return Val::str(to_json(v));
    if (f == "string") return Val::str(to_text(v));
    if (f == "first" || f == "last") {
      if (v.k != Val::ListK || v.list->empty()) return Val();
      return f == "first" ? v.list->front() : v.list->back();
    }
    if (f == "join") {
      const std::string sep = e.args.size() > 1 ? to_text(eval(*e.args[1])) : "";
      if (v.k != Val::ListK) unsupported("join of " + repr(v));
      std::string r;
      for (size_t j = 0; j < v.list->size(); ++j) r += (j ? sep : "") + to_text((*v.list)[j]);
      return Val::str(r);
    }
    if (f == "default" || f == "d") {
      if (v.k != Val::Undef) return v;
      return e.args.size() > 1 ? eval(*e.args[1]) : Val::str("");
    }
    unsupported("unknown filter |" + f);
  }

  bool test(const Expr& e) {
    const Val v = eval(*e.args[0]);
    const std::string& t = e.name;
    bool r = false;
    if (t == "defined") r = v.k != Val::Undef;
    else if (t == "undefined") r = v.k == Val::Undef;
    else if (t == "none") r = v.k == Val::None;
    else if (t == "string") r = v.k == Val::Str;
    else if (t == "number") r = v.k == Val::Int || v.k == Val::Float;
    else if (t == "integer") r = v.k == Val::Int;
    else if (t == "boolean") r = v.k == Val::Bool;
    else if (t == "mapping") r = v.k == Val::DictK;
    else if (t == "sequence" || t == "iterable") r = v.k == Val::ListK || v.k == Val::Str || (t == "iterable" && v.k == Val::DictK);
    else if (t == "true") r = v.k == Val::Bool && v.b;
    else if (t == "false") r = v.k == Val::Bool && !v.b;
    else unsupported("unknown test 'is " + t + "'");
    return r != e.negated;
  }

  Val binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Val a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Val a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Val a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "~") return Val::str(to_text(a) + to_text(b));
    if (op == "==") return Val::boolean(equal(a, b));
    if (op == "!=") return Val::boolean(!equal(a, b));
    if (op == "in") {
      if (b.k == Val::Str) return Val::boolean(a.k == Val::Str && b.s.find(a.s) != std::string::npos);
      if (b.k == Val::ListK) {
        for (const Val& x : *b.list)
          if (equal(a, x)) return Val::boolean(true);
        return Val::boolean(false);
      }
      if (b.k == Val::DictK || b.k == Val::Namespace) return Val::boolean(a.k == Val::Str && b.member(a.s) != nullptr);
      return Val::boolean(false);
    }
    if (op == "+" && a.k == Val::Str && b.k == Val::Str) return Val::str(a.s + b.s);
    if (op == "+" && a.k == Val::ListK && b.k == Val::ListK) {
      List l = *a.list;
      l.insert(l.end(), b.list->begin(), b.list->end());
      return Val::of_list(std::move(l));
    }
    if (a.k == Val::Str && b.k == Val::Str && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
      const int c = a.s.compare(b.s);
      return Val::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (!a.number() || !b.number()) unsupported("cannot apply '" + op + "' to " + repr(a) + " and " + repr(b));
    if (op == "<") return Val::boolean(a.as_double() < b.as_double());
    if (op == ">") return Val::boolean(a.as_double() > b.as_double());
    if (op == "<=") return Val::boolean(a.as_double() <= b.as_double());
    if (op == ">=") return Val::boolean(a.as_double() >= b.as_double());
    const bool ints = a.k != Val::Float && b.k != Val::Float;
    const int64_t ai = a.k == Val::Bool ? a.b : a.i, bi = b.k == Val::Bool ? b.b : b.i;
    if (op == "+") return ints ? Val::integer(ai + bi) : Val::real(a.as_double() + b.as_double());
    if (op == "-") return ints ? Val::integer(ai - bi) : Val::real(a.as_double() - b.as_double());
    if (op == "*") return ints ? Val::integer(ai * bi) : Val::real(a.as_double() * b.as_double());
    if (op == "/") return Val::real(a.as_double() / b.as_double());
    if ((op == "%" || op == "//") && ints) {
      if (bi == 0) unsupported("division by zero");
      const int64_t q = ai / bi - ((ai % bi != 0) && ((ai < 0) != (bi < 0)) ? 1 : 0);  // Python's floor
      return Val::integer(op == "//" ? q : ai - q * bi);
    }
    unsupported("cannot apply '" + op + "' to " + repr(a) + " and " + repr(b));
  }

  Val eval(const Expr& e) {
    switch (e.k) {
      case Expr::Literal: return e.value;
      case Expr::Var: return lookup(e.name);
      case Expr::Attr: {
        const Val obj = eval(*e.args[0]);
        return item(obj, Val::str(e.name));
      }
      case Expr::Item: return item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Slice: return slice(eval(*e.args[0]), e.args[1].get(), e.args[2].get());
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return Val::boolean(test(e));
      case Expr::Binary: return binary(e);
      case Expr::Unary: {
        const Val a = eval(*e.args[0]);
        if (e.name == "not") return Val::boolean(!truthy(a));
        if (a.k == Val::Int) return Val::integer(-a.i);
        if (a.k == Val::Float) return Val::real(-a.f);
        unsupported("cannot negate " + repr(a));
      }
      case Expr::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Val();
      case Expr::ListLit: {
        List l;
        for (const ExprP& x : e.args) l.push_back(eval(*x));
        return Val::of_list(std::move(l));
      }
      case Expr::DictLit: {
        Dict d;
        for (size_t j = 0; j + 1 < e.args.size(); j += 2) d.emplace_back(to_text(eval(*e.args[j])), eval(*e.args[j + 1]));
        return Val::of_dict(std::move(d));
      }
    }
    return Val();
  }

  std::string& out_;
  std::vector<std::map<std::string, Val>> scopes_;
};

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) {
  auto root = std::make_shared<Node>();
  root->k = Node::Block;
  root->body = StatementParser(cut(source)).parse_all();
  root_ = std::move(root);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
  std::string out;
  Renderer r(out);
  List msgs;
  for (const ChatMessage& m : messages) msgs.push_back(Val::of_dict({{"role", Val::str(m.role)}, {"content", Val::str(m.content)}}));
  r.set_global("messages", Val::of_list(std::move(msgs)));
  r.set_global("add_generation_prompt", Val::boolean(add_generation_prompt));
  r.set_global("bos_token", Val::str(bos_token));
  r.set_global("eos_token", Val::str(eos_token));
  r.run(root_->body);
  return out;
}

const char* plain_chat_template() {
  return "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n\n{% endfor %}"
         "{% if add_generation_prompt %}assistant:{% endif %}";
}

}  // namespace alk::serve
