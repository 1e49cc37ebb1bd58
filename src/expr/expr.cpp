// The expression IR: node vocabulary, scalar semantics, and the Builder that
// hash-conses (CSE) and simplifies while nodes are created, so every consumer
// (CPU evaluator, the four emitters, the kernel cache) sees the same small DAG.
#include "alk/expr.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>

#include "alk/error.h"
#include "core/half.h"

namespace alk::expr {

namespace {

constexpr std::string_view kFnNames[] = {
    "input", "const", "neg", "not", "cast", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin",
    "cos", "tanh", "erf", "abs", "floor", "ceil", "round", "round_bf16", "add", "sub", "mul", "div", "pow", "max",
    "min", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "bitnot", "bitand", "bitor", "bitxor", "shl", "shr",
    "rotl", "rotr", "select"};
static_assert(std::size(kFnNames) == kFnCount, "every Fn needs a name");

constexpr int kFnArity[] = {
#define ALK_X(name, arity) arity,
    ALK_EXPR_FNS(ALK_X)
#undef ALK_X
};

// Float -> i64 the way the CPU backend stores it: truncate, NaN to 0, saturate
// instead of the undefined behaviour of an out-of-range C++ conversion.
int64_t to_i64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// Rounds a double-precision result to what a value of type t can hold.
double as_type(double v, Type t) {
  switch (t) {
    case Type::Bool: return v != 0 ? 1.0 : 0.0;
    case Type::I64: return static_cast<double>(to_i64(v));
    case Type::F32: return static_cast<double>(static_cast<float>(v));
    case Type::F64: return v;
  }
  return v;
}

// I64 arithmetic wraps like the hardware does; done in uint64_t to stay defined.
double wrap_i64(Fn f, double a, double b) {
  uint64_t x = static_cast<uint64_t>(to_i64(a)), y = static_cast<uint64_t>(to_i64(b));
  uint64_t r = 0;
  switch (f) {
    case Fn::Add: r = x + y; break;
    case Fn::Sub: r = x - y; break;
    case Fn::Mul: r = x * y; break;
    case Fn::Neg: r = uint64_t{0} - x; break;
    case Fn::Abs: r = static_cast<int64_t>(x) < 0 ? uint64_t{0} - x : x; break;
    case Fn::BitNot: r = ~x; break;
    case Fn::BitAnd: r = x & y; break;
    case Fn::BitOr: r = x | y; break;
    case Fn::BitXor: r = x ^ y; break;
    // Shifts by 64 or more (or negative) give what a wider shift would: 0, or the sign for >>.
    case Fn::Shl: r = y < 64 ? x << y : 0; break;
    case Fn::Shr: r = y < 64 ? static_cast<uint64_t>(static_cast<int64_t>(x) >> y) : (static_cast<int64_t>(x) < 0 ? ~uint64_t{0} : 0); break;
    // Rotations of the low 32 bits, by the amount mod 32; the result is the u32's value.
    case Fn::Rotl: r = std::rotl(static_cast<uint32_t>(x), static_cast<int>(y & 31)); break;
    case Fn::Rotr: r = std::rotr(static_cast<uint32_t>(x), static_cast<int>(y & 31)); break;
    case Fn::Div: {
      int64_t sx = static_cast<int64_t>(x), sy = static_cast<int64_t>(y);
      if (sy == 0) return 0;  // defined as 0 so constant folding never traps
      if (sy == -1) { r = uint64_t{0} - x; break; }  // INT64_MIN / -1 wraps
      return static_cast<double>(sx / sy);
    }
    default: return 0;
  }
  return static_cast<double>(static_cast<int64_t>(r));
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

uint64_t node_hash(const Node& n) {
  uint64_t h = static_cast<uint64_t>(n.fn) | (static_cast<uint64_t>(n.type) << 8);
  h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(n.slot)));
  h = mix(h, std::bit_cast<uint64_t>(n.value));
  for (int a : n.args) h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(a)));
  return h;
}

bool commutative(Fn f) {
  return f == Fn::Add || f == Fn::Mul || f == Fn::Max || f == Fn::Min || f == Fn::Eq || f == Fn::Ne ||
         f == Fn::And || f == Fn::Or || f == Fn::BitAnd || f == Fn::BitOr || f == Fn::BitXor;
}

// Bitwise ops and shifts: integers (and bools) only, computed in i64.
bool bitwise(Fn f) { return f >= Fn::BitNot && f <= Fn::Rotr; }

// Math functions that only exist for floating types: integer operands become f32,
// as the Float dtype rule says.
bool float_only(Fn f) {
  switch (f) {
    case Fn::Exp: case Fn::Log: case Fn::Log1p: case Fn::Expm1: case Fn::Sqrt: case Fn::Rsqrt:
    case Fn::Sin: case Fn::Cos: case Fn::Tanh: case Fn::Erf: return true;
    default: return false;
  }
}

// A cast that keeps every value exactly, so cast(cast(x, mid), t) == cast(x, t).
bool lossless(Type from, Type to) {
  return from == Type::Bool || from == to || (from == Type::F32 && to == Type::F64);
}

// Shortest text that reads back to the same value; f32 constants print as floats
// ("0.70710677", not the double "0.7071067690849304").
std::string format_value(double v, Type t) {
  char buf[64];
  auto r = t == Type::F32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

[[noreturn]] void bad(const std::string& what, Loc loc = Loc::current()) { throw Error("expr", what, loc); }

}  // namespace

std::string_view fn_name(Fn f) { return kFnNames[static_cast<int>(f)]; }
int fn_arity(Fn f) { return kFnArity[static_cast<int>(f)]; }
bool is_comparison(Fn f) { return f >= Fn::Lt && f <= Fn::Ne; }

bool Node::operator==(const Node& o) const {
  return fn == o.fn && type == o.type && slot == o.slot &&
         std::bit_cast<uint64_t>(value) == std::bit_cast<uint64_t>(o.value) && args[0] == o.args[0] &&
         args[1] == o.args[1] && args[2] == o.args[2];
}

double eval_scalar(Fn f, Type t, double a, double b, double c) {
  if (t == Type::I64) {
    switch (f) {
      case Fn::Add: case Fn::Sub: case Fn::Mul: case Fn::Div: case Fn::Neg: case Fn::Abs: case Fn::BitNot:
      case Fn::BitAnd: case Fn::BitOr: case Fn::BitXor: case Fn::Shl: case Fn::Shr: case Fn::Rotl: case Fn::Rotr:
        return wrap_i64(f, a, b);
      default: break;
    }
  }
  double r = 0;
  switch (f) {
    case Fn::Input: case Fn::Const: r = a; break;  // the caller passes the node's value
    case Fn::Cast: r = a; break;
    case Fn::Neg: r = -a; break;
    case Fn::Not: r = a == 0; break;
    case Fn::Exp: r = std::exp(a); break;
    case Fn::Log: r = std::log(a); break;
    case Fn::Log1p: r = std::log1p(a); break;
    case Fn::Expm1: r = std::expm1(a); break;
    case Fn::Sqrt: r = std::sqrt(a); break;
    case Fn::Rsqrt: r = 1 / std::sqrt(a); break;
    case Fn::Sin: r = std::sin(a); break;
    case Fn::Cos: r = std::cos(a); break;
    case Fn::Tanh: r = std::tanh(a); break;
    case Fn::Erf: r = std::erf(a); break;
    case Fn::Abs: r = std::fabs(a); break;
    case Fn::Floor: r = std::floor(a); break;
    case Fn::Ceil: r = std::ceil(a); break;
    case Fn::Round: r = std::nearbyint(a); break;  // default rounding mode: half to even
    case Fn::RoundBf16: r = bf16_to_f32(f32_to_bf16(static_cast<float>(a))); break;
    case Fn::Add: r = a + b; break;
    case Fn::Sub: r = a - b; break;
    case Fn::Mul: r = a * b; break;
    case Fn::Div: r = a / b; break;
    case Fn::Pow: r = std::pow(a, b); break;
    // NaN wins, exactly as the CPU evaluator, the compiled tier and every emitter spell it
    // (and as PyTorch's maximum/minimum/relu/clamp do): folding a constant must not change
    // what the same expression computes over a tensor.
    case Fn::Max: r = (a != a || a > b) ? a : b; break;
    case Fn::Min: r = (a != a || a < b) ? a : b; break;
    case Fn::Lt: r = a < b; break;
    case Fn::Le: r = a <= b; break;
    case Fn::Gt: r = a > b; break;
    case Fn::Ge: r = a >= b; break;
    case Fn::Eq: r = a == b; break;
    case Fn::Ne: r = a != b; break;
    case Fn::And: r = (a != 0) && (b != 0); break;
    case Fn::Or: r = (a != 0) || (b != 0); break;
    // On bools (the only other type bitwise nodes have): not, and, or, xor; shifts of 0/1.
    case Fn::BitNot: r = a == 0; break;
    case Fn::BitAnd: r = (a != 0) && (b != 0); break;
    case Fn::BitOr: r = (a != 0) || (b != 0); break;
    case Fn::BitXor: r = (a != 0) != (b != 0); break;
    case Fn::Shl: case Fn::Shr: case Fn::Rotl: case Fn::Rotr: r = wrap_i64(f, a, b); break;
    case Fn::Select: r = a != 0 ? b : c; break;
  }
  return as_type(r, t);
}

// ---- Expr -------------------------------------------------------------------------------

int Expr::num_inputs() const {
  int n = 0;
  for (const Node& x : nodes)
    if (x.fn == Fn::Input) n = std::max(n, x.slot + 1);
  return n;
}

bool Expr::uses_input(int slot) const {
  return std::any_of(nodes.begin(), nodes.end(),
                     [&](const Node& x) { return x.fn == Fn::Input && x.slot == slot; });
}

// Nested call syntax with typed leaves; a computed node used more than once is
// printed once as "tN = ..." so the text stays linear in the DAG's size.
std::string Expr::str() const {
  std::vector<int> uses(nodes.size(), 0);
  for (const Node& x : nodes)
    for (int k = 0; k < fn_arity(x.fn); ++k) ++uses[x.args[k]];
  std::vector<std::string> text(nodes.size());
  std::string lets;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& x = nodes[i];
    std::string tn(compute_type_name(x.type));
    std::string s;
    if (x.fn == Fn::Input) {
      s = "in" + std::to_string(x.slot) + ":" + tn;
    } else if (x.fn == Fn::Const) {
      s = format_value(x.value, x.type) + ":" + tn;
    } else {
      s = std::string(fn_name(x.fn));
      if (x.fn == Fn::Cast) s += ":" + tn;
      s += "(";
      for (int k = 0; k < fn_arity(x.fn); ++k) s += (k ? ", " : "") + text[x.args[k]];
      s += ")";
      if (uses[i] > 1) {
        std::string name = "t" + std::to_string(i);
        lets += name + " = " + s + "; ";
        s = name;
      }
    }
    text[i] = std::move(s);
  }
  return nodes.empty() ? "" : lets + text.back();
}

uint64_t Expr::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : str()) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

// ---- Builder ----------------------------------------------------------------------------

int Builder::intern(const Node& n) {
  uint64_t h = node_hash(n);
  std::vector<int>& bucket = index_[h];
  for (int id : bucket)
    if (nodes_[id] == n) return id;
  nodes_.push_back(n);
  int id = static_cast<int>(nodes_.size()) - 1;
  bucket.push_back(id);
  return id;
}

bool Builder::is_const(int id, double v) const { return nodes_[id].fn == Fn::Const && nodes_[id].value == v; }

int Builder::input(int slot, Type t) {
  Node n{Fn::Input, t};
  n.slot = slot;
  return intern(n);
}

int Builder::constant(double v, Type t) {
  Node n{Fn::Const, t};
  n.value = as_type(v, t);
  return intern(n);
}

int Builder::cast(int a, Type t) {
  const Node& x = nodes_[a];
  if (x.type == t) return a;
  if (x.fn == Fn::Const) return constant(eval_scalar(Fn::Cast, t, x.value), t);
  if (x.fn == Fn::Cast && lossless(nodes_[x.args[0]].type, x.type)) return cast(x.args[0], t);
  Node n{Fn::Cast, t};
  n.args[0] = a;
  return intern(n);
}

int Builder::unary(Fn f, int a) {
  if (fn_arity(f) != 1 || f == Fn::Cast) bad("unary() called with " + std::string(fn_name(f)));
  Type t = nodes_[a].type;
  switch (f) {
    case Fn::Not:
      a = cast(a, Type::Bool), t = Type::Bool;
      if (nodes_[a].fn == Fn::Not) return nodes_[a].args[0];
      break;
    case Fn::Neg:
      if (t == Type::Bool) a = cast(a, Type::I64), t = Type::I64;
      if (nodes_[a].fn == Fn::Neg) return nodes_[a].args[0];
      break;
    case Fn::Abs:
      if (t == Type::Bool) return a;
      break;
    case Fn::Floor: case Fn::Ceil: case Fn::Round:
      if (t == Type::Bool || t == Type::I64) return a;  // already integral
      break;
    case Fn::BitNot:
      if (t == Type::F32 || t == Type::F64) bad("bitnot of a floating-point value (bitwise ops take integers or bools)");
      if (nodes_[a].fn == Fn::BitNot) return nodes_[a].args[0];
      break;
    case Fn::RoundBf16:  // an f32 value rounded to bf16's precision, still f32; rounding twice is once
      if (t != Type::F32) a = cast(a, Type::F32), t = Type::F32;
      if (nodes_[a].fn == Fn::RoundBf16) return a;
      break;
    default:
      if (float_only(f) && (t == Type::Bool || t == Type::I64)) a = cast(a, Type::F32), t = Type::F32;
      break;
  }
  if (nodes_[a].fn == Fn::Const) return constant(eval_scalar(f, t, nodes_[a].value), t);
  Node n{f, t};
  n.args[0] = a;
  return intern(n);
}

int Builder::binary(Fn f, int a, int b) {
  if (fn_arity(f) != 2) bad("binary() called with " + std::string(fn_name(f)));
  Type t;
  if (f == Fn::And || f == Fn::Or) {
    t = Type::Bool;
  } else if (bitwise(f)) {
    t = std::max(nodes_[a].type, nodes_[b].type);
    if (t == Type::F32 || t == Type::F64)
      bad(std::string(fn_name(f)) + " of a floating-point value (bitwise ops take integers or bools)");
    if (t == Type::Bool && (f == Fn::Shl || f == Fn::Shr || f == Fn::Rotl || f == Fn::Rotr)) t = Type::I64;  // a shifted bool is a number
  } else {
    t = std::max(nodes_[a].type, nodes_[b].type);
    bool arithmetic = f == Fn::Add || f == Fn::Sub || f == Fn::Mul || f == Fn::Div || f == Fn::Pow;
    if (t == Type::Bool && arithmetic) t = Type::I64;
    // On bools max is "or" and min is "and"; GLSL and WGSL have no bool max.
    if (t == Type::Bool && f == Fn::Max) f = Fn::Or;
    if (t == Type::Bool && f == Fn::Min) f = Fn::And;
  }
  a = cast(a, t);
  b = cast(b, t);
  switch (f) {
    case Fn::Add:
      if (is_const(b, 0)) return a;
      if (is_const(a, 0)) return b;
      break;
    case Fn::Sub:
      if (is_const(b, 0)) return a;
      break;
    case Fn::Mul:  // x*0 is not folded: NaN*0 and inf*0 are NaN
      if (is_const(b, 1)) return a;
      if (is_const(a, 1)) return b;
      break;
    case Fn::Div:
      if (is_const(b, 1)) return a;
      break;
    default: break;
  }
  Type result = is_comparison(f) ? Type::Bool : t;
  if (nodes_[a].fn == Fn::Const && nodes_[b].fn == Fn::Const)
    return constant(eval_scalar(f, result, nodes_[a].value, nodes_[b].value), result);
  if (commutative(f) && b < a) std::swap(a, b);  // a+b and b+a share one node
  Node n{f, result};
  n.args[0] = a;
  n.args[1] = b;
  return intern(n);
}

int Builder::select(int c, int a, int b) {
  c = cast(c, Type::Bool);
  Type t = std::max(nodes_[a].type, nodes_[b].type);
  a = cast(a, t);
  b = cast(b, t);
  if (nodes_[c].fn == Fn::Const) return nodes_[c].value != 0 ? a : b;
  if (a == b) return a;
  Node n{Fn::Select, t};
  n.args[0] = c;
  n.args[1] = a;
  n.args[2] = b;
  return intern(n);
}

int Builder::inline_expr(const Expr& e, std::span<const int> inputs) {
  std::vector<int> map(e.nodes.size(), -1);
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& x = e.nodes[i];
    int a = x.args[0] >= 0 ? map[x.args[0]] : -1;
    int b = x.args[1] >= 0 ? map[x.args[1]] : -1;
    int c = x.args[2] >= 0 ? map[x.args[2]] : -1;
    switch (fn_arity(x.fn)) {
      case 0:
        if (x.fn == Fn::Const) {
          map[i] = constant(x.value, x.type);
        } else {
          if (x.slot < 0 || x.slot >= static_cast<int>(inputs.size()))
            bad("inline_expr: input slot " + std::to_string(x.slot) + " has no replacement");
          // The inlined expression computes in its own types: convert the replacement.
          map[i] = cast(inputs[x.slot], x.type);
        }
        break;
      case 1: map[i] = x.fn == Fn::Cast ? cast(a, x.type) : unary(x.fn, a); break;
      case 2: map[i] = binary(x.fn, a, b); break;
      default: map[i] = select(a, b, c); break;
    }
  }
  if (e.nodes.empty()) bad("inline_expr: empty expression");
  return map.back();
}

Expr Builder::finish(int root) const {
  std::vector<int> at;
  return finish(std::span<const int>(&root, 1), at);
}

Expr Builder::finish(std::span<const int> roots, std::vector<int>& at) const {
  int last = -1;
  for (int root : roots) {
    if (root < 0 || root >= static_cast<int>(nodes_.size())) bad("finish: no such node " + std::to_string(root));
    last = std::max(last, root);
  }
  if (last < 0) bad("finish: no root");
  // Ids are created in topological order, so one backward sweep marks what the roots reach
  // and one forward sweep renumbers; the latest root stays last (the largest reached id).
  std::vector<char> live(last + 1, 0);
  for (int root : roots) live[root] = 1;
  for (int i = last; i >= 0; --i)
    if (live[i])
      for (int k = 0; k < fn_arity(nodes_[i].fn); ++k) live[nodes_[i].args[k]] = 1;
  std::vector<int> renum(last + 1, -1);
  Expr e;
  for (int i = 0; i <= last; ++i) {
    if (!live[i]) continue;
    Node n = nodes_[i];
    for (int k = 0; k < fn_arity(n.fn); ++k) n.args[k] = renum[n.args[k]];
    renum[i] = static_cast<int>(e.nodes.size());
    e.nodes.push_back(n);
  }
  at.clear();
  for (int root : roots) at.push_back(renum[root]);
  return e;
}

}  // namespace alk::expr
