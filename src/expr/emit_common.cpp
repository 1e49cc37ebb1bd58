// The language-independent half of the emitters: IR rewrites for language gaps, and
// the one walk that turns an Expr into named values inside a per-language kernel.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "alk/error.h"
#include "expr/emit.h"

namespace alk::expr {

// Adding an Fn must fail the build until the walk below (and each language's
// fn_name) handles it.
static_assert(kFnCount == 44, "a new Fn needs emitter support: update emit_*.cpp, then this count");

namespace {

[[noreturn]] void bad(const std::string& what, Loc loc = Loc::current()) { throw Error("expr", what, loc); }

// Rebuilds e node by node through a fresh Builder (so simplification and CSE apply
// again); `custom` may build a replacement for a node and return its id, or -1.
template <class Custom>
Expr rebuild(const Expr& e, Custom custom) {
  Builder b;
  std::vector<int> map(e.nodes.size(), -1);
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& x = e.nodes[i];
    int args[3] = {-1, -1, -1};
    for (int k = 0; k < fn_arity(x.fn); ++k) args[k] = map[x.args[k]];
    int id = custom(b, x, args);
    if (id < 0) {
      switch (fn_arity(x.fn)) {
        case 0: id = x.fn == Fn::Const ? b.constant(x.value, x.type) : b.input(x.slot, x.type); break;
        case 1: id = x.fn == Fn::Cast ? b.cast(args[0], x.type) : b.unary(x.fn, args[0]); break;
        case 2: id = b.binary(x.fn, args[0], args[1]); break;
        default: id = b.select(args[0], args[1], args[2]); break;
      }
    }
    map[i] = id;
  }
  return b.finish(map.back());
}

Type float_type(Builder& b, int& x) {
  Type t = b.type_of(x);
  if (t != Type::F32 && t != Type::F64) x = b.cast(x, t = Type::F32);
  return t;
}

}  // namespace

bool is_transcendental(Fn f) {
  switch (f) {
    case Fn::Exp: case Fn::Log: case Fn::Log1p: case Fn::Expm1: case Fn::Sin: case Fn::Cos: case Fn::Tanh:
    case Fn::Erf: case Fn::Pow: return true;
    default: return false;
  }
}

int build_erf(Builder& b, int x) {
  // Abramowitz & Stegun 7.1.26: erf(|x|) = 1 - t*(a1 + t*(a2 + ...)) * exp(-x^2),
  // t = 1 / (1 + p|x|), max abs error 1.5e-7; odd symmetry gives negative x.
  Type t = float_type(b, x);
  auto k = [&](double v) { return b.constant(v, t); };
  int ax = b.unary(Fn::Abs, x);
  int tt = b.binary(Fn::Div, k(1), b.binary(Fn::Add, k(1), b.binary(Fn::Mul, k(0.3275911), ax)));
  const double a[5] = {0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429};
  int poly = k(a[4]);
  for (int i = 3; i >= 0; --i) poly = b.binary(Fn::Add, k(a[i]), b.binary(Fn::Mul, tt, poly));
  poly = b.binary(Fn::Mul, tt, poly);
  int gauss = b.unary(Fn::Exp, b.unary(Fn::Neg, b.binary(Fn::Mul, ax, ax)));
  int y = b.binary(Fn::Sub, k(1), b.binary(Fn::Mul, poly, gauss));
  return b.select(b.binary(Fn::Lt, x, k(0)), b.unary(Fn::Neg, y), y);
}

int build_log1p(Builder& b, int x) {
  // Goldberg's trick: log(u) * x / (u - 1) cancels the rounding error of u = 1 + x.
  // u == 1 means |x| is below half an ulp of 1, where log1p(x) == x; u - 1 == u only
  // for huge or infinite u, where the correction factor is 1 (and would be inf/inf).
  Type t = float_type(b, x);
  auto k = [&](double v) { return b.constant(v, t); };
  int u = b.binary(Fn::Add, k(1), x);
  int um1 = b.binary(Fn::Sub, u, k(1));
  int lu = b.unary(Fn::Log, u);
  int corrected = b.binary(Fn::Mul, lu, b.binary(Fn::Div, x, um1));
  return b.select(b.binary(Fn::Eq, u, k(1)), x, b.select(b.binary(Fn::Eq, um1, u), lu, corrected));
}

int build_expm1(Builder& b, int x) {
  // Kahan's trick: (u - 1) * x / log(u) with u = exp(x). u == 1: expm1(x) == x to
  // precision; u - 1 == -1: u is below rounding, the answer is -1; u - 1 == u: u is
  // huge or infinite and already the answer.
  Type t = float_type(b, x);
  auto k = [&](double v) { return b.constant(v, t); };
  int u = b.unary(Fn::Exp, x);
  int um1 = b.binary(Fn::Sub, u, k(1));
  int kahan = b.binary(Fn::Mul, um1, b.binary(Fn::Div, x, b.unary(Fn::Log, u)));
  int big = b.select(b.binary(Fn::Eq, um1, u), u, kahan);
  int small = b.select(b.binary(Fn::Eq, um1, k(-1)), k(-1), big);
  return b.select(b.binary(Fn::Eq, u, k(1)), x, small);
}

int build_pow(Builder& b, int x, int y) {
  // C's pow (what the CPU computes) from a pow defined only for x > 0 (GLSL's is
  // undefined for x < 0 and for x = 0, y <= 0): |x|^y, then x = 0 and a negative x with
  // an integral y (odd: negated) by hand; a negative x with a fractional y is NaN.
  Type t = float_type(b, x);
  auto k = [&](double v) { return b.constant(v, t); };
  int ax = b.unary(Fn::Abs, x);
  int p = b.binary(Fn::Pow, ax, y);
  int at_zero = b.select(b.binary(Fn::Gt, y, k(0)), k(0), k(INFINITY));
  int p0 = b.select(b.binary(Fn::Eq, ax, k(0)), at_zero, p);
  int integral = b.binary(Fn::Eq, b.unary(Fn::Floor, y), y);
  int half = b.binary(Fn::Mul, y, k(0.5));
  int odd = b.binary(Fn::Ne, b.unary(Fn::Floor, half), half);
  int negative = b.select(integral, b.select(odd, b.unary(Fn::Neg, p0), p0), k(NAN));
  int r = b.select(b.binary(Fn::Lt, x, k(0)), negative, p0);
  return b.select(b.binary(Fn::Eq, y, k(0)), k(1), r);  // x^0 = 1, even for x = 0 or NaN
}

Expr rewrite(const Expr& e, const Rewrites& r) {
  Expr out = e;
  if (r.expand_pow) {
    out = rebuild(out, [&](Builder& b, const Node& x, const int* a) {
      return x.fn == Fn::Pow ? build_pow(b, a[0], a[1]) : -1;
    });
  }
  if (r.expand_erf || r.expand_log1p || r.expand_expm1) {
    out = rebuild(out, [&](Builder& b, const Node& x, const int* a) {
      if (x.fn == Fn::Erf && r.expand_erf) return build_erf(b, a[0]);
      if (x.fn == Fn::Log1p && r.expand_log1p) return build_log1p(b, a[0]);
      if (x.fn == Fn::Expm1 && r.expand_expm1) return build_expm1(b, a[0]);
      return -1;
    });
  }
  if (r.f64_to_f32) {
    // Leaves and casts carry the type; every other node's type follows from them.
    out = rebuild(out, [&](Builder& b, const Node& x, const int* a) {
      if (x.type != Type::F64) return -1;
      switch (fn_arity(x.fn)) {
        case 0: return x.fn == Fn::Const ? b.constant(x.value, Type::F32) : b.input(x.slot, Type::F32);
        case 1: return x.fn == Fn::Cast ? b.cast(a[0], Type::F32) : -1;
        default: return -1;
      }
    });
  }
  if (r.f64_math_in_f32) {
    // pow stays f64: GLSL spells it alk_pow_f64 (glsl_f64_helpers), exact to a few ulps
    // for integral exponents (Adam's bias corrections beta^t: in f32 they put the optimizer
    // 2.6e-6 away from the CPU's).
    out = rebuild(out, [&](Builder& b, const Node& x, const int* a) {
      if (x.type != Type::F64 || !is_transcendental(x.fn) || x.fn == Fn::Pow) return -1;
      int lo0 = b.cast(a[0], Type::F32);
      int y = fn_arity(x.fn) == 1 ? b.unary(x.fn, lo0) : b.binary(x.fn, lo0, b.cast(a[1], Type::F32));
      return b.cast(y, Type::F64);
    });
  }
  return out;
}

namespace {

void check_inputs(const Expr& e, const MapSignature& sig) {
  if (e.num_inputs() > static_cast<int>(sig.inputs.size()))
    bad("kernel " + sig.name + ": the expression reads input " + std::to_string(e.num_inputs() - 1) +
        " but the signature has " + std::to_string(sig.inputs.size()) + " inputs");
}

}  // namespace

Expr conform(const Expr& e, const MapSignature& sig) {
  check_inputs(e, sig);
  Builder b;
  std::vector<int> inputs;
  for (size_t k = 0; k < sig.inputs.size(); ++k)
    inputs.push_back(b.input(static_cast<int>(k), compute_type(sig.inputs[k])));
  int root = b.cast(b.inline_expr(e, inputs), compute_type(sig.output));
  // No target has an integer pow (GLSL and WGSL have none, C's returns double):
  // compute it in f64 and round (where pow is exact, as in C, that is eval_scalar's
  // truncation; where it is not, as in GLSL's f32 pow, rounding hides the last-ulp error:
  // 5^3 = 124.99999 must still be 125). GLSL and WGSL have no < <= > >=
  // on bool: order bools as the integers 0 and 1 (what eval_scalar does).
  const Expr conformed = b.finish(root);
  return rebuild(conformed, [&conformed](Builder& nb, const Node& x, const int* a) {
    const bool ordered = x.fn == Fn::Lt || x.fn == Fn::Le || x.fn == Fn::Gt || x.fn == Fn::Ge;
    if (ordered && conformed.nodes[static_cast<size_t>(x.args[0])].type == Type::Bool)
      return nb.binary(x.fn, nb.cast(a[0], Type::I64), nb.cast(a[1], Type::I64));
    if (x.fn != Fn::Pow || x.type != Type::I64) return -1;
    int y = nb.binary(Fn::Pow, nb.cast(a[0], Type::F64), nb.cast(a[1], Type::F64));
    return nb.cast(nb.unary(Fn::Round, y), Type::I64);
  });
}

std::optional<Target> parse_target(std::string_view name) {
  if (name == "cpp") return Target::Cpp;
  if (name == "cuda") return Target::Cuda;
  if (name == "glsl") return Target::Glsl;
  if (name == "wgsl") return Target::Wgsl;
  return std::nullopt;
}

std::string_view target_name(Target t) {
  switch (t) {
    case Target::Cpp: return "cpp";
    case Target::Cuda: return "cuda";
    case Target::Glsl: return "glsl";
    case Target::Wgsl: return "wgsl";
  }
  return "?";
}

std::string emit_map_kernel(const Expr& e, const MapSignature& sig, Target t, const std::vector<bool>& uniform_inputs,
                            const std::vector<Expr>& extra_outputs) {
  if (extra_outputs.size() != sig.extra_outputs.size())
    bad("kernel " + sig.name + ": " + std::to_string(extra_outputs.size()) + " extra output expressions for " +
        std::to_string(sig.extra_outputs.size()) + " extra output dtypes");
  if (!extra_outputs.empty() && t != Target::Cuda)
    bad("kernel " + sig.name + ": extra outputs are emitted for CUDA only, not " + std::string(target_name(t)));
  if (t == Target::Cpp) {  // the CPU's block body: storage dtypes are the evaluator's business
    if (e.nodes.empty()) bad("kernel " + sig.name + ": empty expression");
    check_inputs(e, sig);
    return emit_cpu_block(e, uniform_inputs);
  }
  std::unique_ptr<emit_detail::Lang> lang;
  switch (t) {
    case Target::Cpp: lang = emit_detail::make_cpp(); break;
    case Target::Cuda: lang = emit_detail::make_cuda(); break;
    case Target::Glsl: lang = emit_detail::make_glsl(); break;
    case Target::Wgsl: lang = emit_detail::make_wgsl(); break;
  }
  // tanh.approx only where every stored result is bf16.
  lang->bf16_result = sig.output == DType::BF16 &&
                      std::all_of(sig.extra_outputs.begin(), sig.extra_outputs.end(), [](DType d) { return d == DType::BF16; });
  return emit_detail::emit(*lang, e, sig, uniform_inputs, extra_outputs);
}

std::string emit_function(const Expr& e, const MapSignature& sig, Target t) {
  std::unique_ptr<emit_detail::Lang> lang;
  switch (t) {
    case Target::Cpp:  // the CPU's evaluator runs prologues and epilogues itself
      bad("function " + sig.name + ": no C++ form (the CPU evaluates prologues and epilogues from the IR)");
    case Target::Cuda: lang = emit_detail::make_cuda(); break;
    case Target::Glsl: lang = emit_detail::make_glsl(); break;
    case Target::Wgsl: lang = emit_detail::make_wgsl(); break;
  }
  lang->bf16_result = sig.output == DType::BF16;
  return emit_detail::emit_function(*lang, e, sig);
}

size_t map_params_bytes(size_t inputs) {
  const size_t k = inputs;
  return 4 * (2 + 8 + 8 * std::max<size_t>(1, k) + (k + 1));  // n rank shape strides offset
}

namespace emit_detail {

std::string float_text(double v, Type t) {
  char buf[64];
  auto r = t == Type::F32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string header_comment(const Expr& e, const MapSignature& sig, std::string_view c) {
  std::string s = std::string(c) + " alk map kernel " + sig.name + ": (";
  for (size_t k = 0; k < sig.inputs.size(); ++k) s += (k ? ", " : "") + std::string(dtype_name(sig.inputs[k]));
  s += ") -> " + std::string(dtype_name(sig.output)) + "\n";
  s += std::string(c) + " expr: " + e.str() + "\n";
  s += std::string(c) + " generated by src/expr/emit_*.cpp from the expression IR; do not edit\n";
  return s;
}

std::string value_text(const Lang& lang, const Node& x) {
  if (x.type != Type::Bool && !std::isfinite(x.value)) return lang.special(x.value, x.type);
  if (x.type != Type::Bool && std::signbit(x.value)) return "(-" + lang.literal(-x.value, x.type) + ")";
  return lang.literal(x.value, x.type);
}

std::string node_text(const Lang& lang, const Node& x, const std::vector<std::string>& v) {
  auto a = [&](int k) { return v[x.args[k]]; };
  if (x.fn != Fn::Input && x.fn != Fn::Const) {
    std::string args[3];
    for (int k = 0; k < fn_arity(x.fn); ++k) args[k] = a(k);
    if (std::string own = lang.own_spelling(x, args); !own.empty()) return own;
  }
  auto infix = [&](const char* op) { return "(" + a(0) + " " + op + " " + a(1) + ")"; };
  auto call = [&](int n) {
    std::string name = lang.bf16_result ? lang.fn_name_bf16_result(x.fn, x.type) : "";
    if (name.empty()) name = lang.fn_name(x.fn, x.type);
    if (name.empty()) bad("emitter has no spelling for " + std::string(fn_name(x.fn)) + " on " +
                          std::string(compute_type_name(x.type)) + " (a missing IR rewrite?)");
    std::string s = name + "(" + a(0);
    for (int k = 1; k < n; ++k) s += ", " + a(k);
    return s + ")";
  };
  switch (x.fn) {
    case Fn::Input: case Fn::Const: return "";  // named by the walk, never spelled here
    case Fn::Neg: return "(-" + a(0) + ")";
    case Fn::Not: return "(!" + a(0) + ")";
    case Fn::Cast: return lang.cast(x.type, a(0));
    case Fn::Exp: case Fn::Log: case Fn::Log1p: case Fn::Expm1: case Fn::Sqrt: case Fn::Rsqrt: case Fn::Sin:
    case Fn::Cos: case Fn::Tanh: case Fn::Erf: case Fn::Abs: case Fn::Floor: case Fn::Ceil: case Fn::Round:
      return call(1);
    case Fn::RoundBf16: {
      // To the nearest bf16 value, ties to even, kept as f32: a bf16 intermediate inlined
      // into a fused kernel rounds exactly as a stored one would (NaN stays NaN).
      const std::string u = lang.f32_bits(a(0));
      return lang.select(lang.is_nan(a(0)), a(0),
                         lang.f32_from_bits("((" + u + " + 0x7fffu + ((" + u + " >> 16u) & 1u)) & 0xffff0000u)"));
    }
    case Fn::Pow: return call(2);
    case Fn::Max: case Fn::Min: {
      // NaN wins, as on the CPU and in PyTorch's maximum/minimum (fmax and GLSL's max
      // would return the other operand): a if a is NaN or a is the larger, else b.
      const bool flt = x.type == Type::F32 || x.type == Type::F64;
      const std::string wins = "(" + a(0) + (x.fn == Fn::Max ? " > " : " < ") + a(1) + ")";
      return lang.select(flt ? "(" + lang.is_nan(a(0)) + " || " + wins + ")" : wins, a(0), a(1));
    }
    case Fn::Add: return infix("+");
    case Fn::Sub: return infix("-");
    case Fn::Mul: return infix("*");
    case Fn::Div:
      // Integer division by zero is defined as 0 (as in eval_scalar), never a trap.
      if (x.type == Type::I64) {
        std::string zero = lang.literal(0, Type::I64);
        return lang.select("(" + a(1) + " == " + zero + ")", zero, infix("/"));
      }
      return infix("/");
    case Fn::Lt: return infix("<");
    case Fn::Le: return infix("<=");
    case Fn::Gt: return infix(">");
    case Fn::Ge: return infix(">=");
    case Fn::Eq: return infix("==");
    case Fn::Ne: return infix("!=");
    case Fn::And: return infix("&&");
    case Fn::Or: return infix("||");
    // Bitwise ops have integer or bool operands (the builder refuses floats); on bools they
    // are the logical ones.
    case Fn::BitNot: return x.type == Type::Bool ? "(!" + a(0) + ")" : "(~" + a(0) + ")";
    case Fn::BitAnd: return infix(x.type == Type::Bool ? "&&" : "&");
    case Fn::BitOr: return infix(x.type == Type::Bool ? "||" : "|");
    case Fn::BitXor: return infix(x.type == Type::Bool ? "!=" : "^");
    case Fn::Shl: case Fn::Shr: {
      // Shifts by 64 or more (or negative) give what a wider shift would: 0, or the sign for >>.
      const std::string zero = lang.literal(0, x.type);
      const std::string in_range =
          "(" + a(1) + " >= " + zero + " && " + a(1) + " < " + lang.literal(64, x.type) + ")";
      const std::string beyond =
          x.fn == Fn::Shl ? zero : lang.select("(" + a(0) + " < " + zero + ")", lang.literal(-1, x.type), zero);
      return lang.select(in_range, infix(x.fn == Fn::Shl ? "<<" : ">>"), beyond);
    }
    case Fn::Rotl: case Fn::Rotr: {
      // In i64 without unsigned types: u = the low 32 bits (>= 0), so no shift below overflows.
      const std::string mask = lang.literal(4294967295.0, x.type), r = "(" + a(1) + " & " + lang.literal(31, x.type) + ")";
      const std::string back = "((" + lang.literal(32, x.type) + " - " + r + ") & " + lang.literal(31, x.type) + ")";
      const std::string u = "(" + a(0) + " & " + mask + ")";
      const bool left = x.fn == Fn::Rotl;
      return "(((" + u + (left ? " << " : " >> ") + r + ") | (" + u + (left ? " >> " : " << ") + back + ")) & " + mask + ")";
    }
    case Fn::Select: return lang.select(a(0), a(1), a(2));
  }
  return "";
}

std::vector<bool> uniform_nodes(const Expr& e, const std::vector<bool>& uniform_inputs, const std::vector<bool>& is_output) {
  auto uniform_input = [&](int k) { return static_cast<size_t>(k) < uniform_inputs.size() && uniform_inputs[static_cast<size_t>(k)]; };
  std::vector<bool> uniform(e.nodes.size(), false), reads_input(e.nodes.size(), false);
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& x = e.nodes[i];
    if (is_output[i]) continue;
    if (x.fn == Fn::Input) {
      uniform[i] = reads_input[i] = uniform_input(x.slot);
    } else if (x.fn != Fn::Const) {
      bool all = true, any = false;
      for (int a = 0; a < fn_arity(x.fn); ++a) {
        const size_t j = static_cast<size_t>(x.args[a]);
        all = all && (uniform[j] || e.nodes[j].fn == Fn::Const);
        any = any || reads_input[j];
      }
      uniform[i] = reads_input[i] = all && any;
    }
  }
  return uniform;
}

namespace {

void add_lines(std::string& out, const std::string& indent, const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += indent + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
}

// The walk for the computed nodes with now[i] set (inputs and literals are named whenever
// met; v holds the names of the nodes walked before, next numbers the values).
void emit_nodes(const Lang& lang, const Expr& e, const std::vector<bool>& now, const std::string& indent,
                std::string& out, std::vector<std::string>& v, int& next) {
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const Node& x = e.nodes[i];
    if (x.fn == Fn::Input) {
      v[i] = "in" + std::to_string(x.slot);
    } else if (x.fn == Fn::Const) {
      v[i] = value_text(lang, x);
    } else if (now[i]) {
      v[i] = "v" + std::to_string(next++);
      add_lines(out, indent, lang.let(x.type, v[i], node_text(lang, x, v)));
    }
  }
}

}  // namespace

// Names every node's value once (inputs in0.., literals inline, the rest v0, v1, ... in
// topological order), appending each computed value's definition to out: the one value walk
// of map kernels and of functions over named inputs.
std::vector<std::string> emit_values(const Lang& lang, const Expr& e, const std::string& indent, std::string& out) {
  std::vector<std::string> v(e.nodes.size());
  int next = 0;
  emit_nodes(lang, e, std::vector<bool>(e.nodes.size(), true), indent, out, v, next);
  return v;
}


std::string Lang::store_extra(size_t, DType, const std::string&) const {
  bad("this language's map kernels have one output");
}

std::string emit(const Lang& lang, const Expr& e0, const MapSignature& sig, const std::vector<bool>& uniform_inputs,
                 const std::vector<Expr>& extra_outputs) {
  if (e0.nodes.empty()) bad("kernel " + sig.name + ": empty expression");
  Expr e = rewrite(conform(e0, sig), lang.rewrites());
  // Every output's value as one DAG (what they share is computed once); at[j]: output j's node.
  std::vector<int> at{e.root()};
  if (!extra_outputs.empty()) {
    Builder b;
    std::vector<int> inputs;
    for (size_t k = 0; k < sig.inputs.size(); ++k) inputs.push_back(b.input(static_cast<int>(k), compute_type(sig.inputs[k])));
    std::vector<int> roots{b.inline_expr(e, inputs)};
    for (size_t j = 0; j < extra_outputs.size(); ++j) {
      MapSignature one = sig;
      one.output = sig.extra_outputs[j];
      one.extra_outputs.clear();
      roots.push_back(b.inline_expr(rewrite(conform(extra_outputs[j], one), lang.rewrites()), inputs));
    }
    e = b.finish(roots, at);
  }
  std::vector<bool> is_output(e.nodes.size(), false);
  for (int r : at) is_output[static_cast<size_t>(r)] = true;
  auto store_all = [&](const std::vector<std::string>& values, const std::string& indent, std::string& out) {
    add_lines(out, indent, lang.store(sig.output, values[static_cast<size_t>(at[0])]));
    for (size_t j = 1; j < at.size(); ++j)
      add_lines(out, indent, lang.store_extra(j, sig.extra_outputs[j - 1], values[static_cast<size_t>(at[j])]));
  };
  std::vector<bool> used(sig.inputs.size());
  for (size_t k = 0; k < used.size(); ++k) used[k] = e.uses_input(static_cast<int>(k));
  // Values of uniform inputs alone are computed once, where the language loops over elements.
  const bool hoisting = !lang.loop_open().empty();
  auto uniform_input = [&](int k) {
    return hoisting && static_cast<size_t>(k) < uniform_inputs.size() && uniform_inputs[static_cast<size_t>(k)];
  };
  const std::vector<bool> uniform =
      hoisting ? uniform_nodes(e, uniform_inputs, is_output) : std::vector<bool>(e.nodes.size(), false);

  std::string out = lang.prologue(e0, e, sig, used);
  std::vector<std::string> v(e.nodes.size());
  int next = 0;
  for (size_t k = 0; k < used.size(); ++k)
    if (used[k] && uniform_input(static_cast<int>(k)))
      add_lines(out, "  ", lang.load(static_cast<int>(k), sig.inputs[k], lang.uniform_offset(static_cast<int>(k))));
  emit_nodes(lang, e, uniform, "  ", out, v, next);
  std::vector<bool> rest(e.nodes.size()), per_element(used.size());
  for (size_t i = 0; i < rest.size(); ++i) rest[i] = !uniform[i];
  for (size_t k = 0; k < used.size(); ++k) per_element[k] = used[k] && !uniform_input(static_cast<int>(k));
  if (const std::string open = lang.vector_loop_open(sig, per_element); !open.empty()) {
    // The same per-element statements over a vector's elements (their own scope and names).
    out += open;
    const std::string inner = lang.indent + "  ";
    for (size_t k = 0; k < used.size(); ++k)
      if (per_element[k]) add_lines(out, inner, lang.load(static_cast<int>(k), sig.inputs[k], "o"));
    std::vector<std::string> vv = v;
    int vnext = next;
    emit_nodes(lang, e, rest, inner, out, vv, vnext);
    store_all(vv, inner, out);
    out += lang.vector_loop_close(sig);
  }
  out += lang.loop_open();
  for (size_t k = 0; k < used.size(); ++k)
    if (per_element[k]) add_lines(out, lang.indent, lang.load(static_cast<int>(k), sig.inputs[k], lang.offset_call(k)));
  emit_nodes(lang, e, rest, lang.indent, out, v, next);
  store_all(v, lang.indent, out);
  return out + lang.epilogue();
}

std::string glsl_f64_helpers(const Expr& e);  // emit_glsl.cpp

std::string emit_function(const Lang& lang, const Expr& e0, const MapSignature& sig) {
  if (e0.nodes.empty()) bad("function " + sig.name + ": empty expression");
  const Expr e = rewrite(conform(e0, sig), lang.rewrites());
  std::vector<Type> params;
  for (DType d : sig.inputs) params.push_back(compute_type(d));
  // GLSL's f64 pow and round are helper functions, defined once per shader (guarded) before their users.
  std::string out = lang.rewrites().f64_math_in_f32 ? glsl_f64_helpers(e) : "";
  out += lang.function_head(sig.name, params, compute_type(sig.output)) + "\n";
  const std::vector<std::string> v = emit_values(lang, e, "  ", out);
  return out + "  return " + v.back() + ";\n}\n";
}

}  // namespace emit_detail
}  // namespace alk::expr
