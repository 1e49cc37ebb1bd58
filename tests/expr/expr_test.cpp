// The expression IR: every op table expression parses and means what it says,
// the builder simplifies and shares, parse errors point at the text.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numbers>

#include "alk/error.h"
#include "expr/emit.h"
#include "expr_eval.h"

namespace alk::expr {
namespace {

using testing::count;
using testing::eval;
using testing::split;
using testing::table;
using testing::TableOp;

// How the op table's names are typed when the literal type is `lit` (mirrors the
// dtype rules in the table's header comment; g and y are the backward extras).
struct Parsed {
  std::vector<std::string> names;
  std::vector<Type> types;
};
Parsed names_for(const TableOp& op, Type lit, bool backward) {
  Parsed p;
  std::string rule = op.rule;
  p.names = split(op.inputs);
  for (size_t k = 0; k < p.names.size(); ++k)
    p.types.push_back(rule == "Logical" || (rule == "Select" && k == 0) ? Type::Bool : lit);
  if (backward) {
    bool bool_out = rule == "Logical" || rule == "Compare";
    p.names.push_back("g"), p.types.push_back(lit);
    p.names.push_back("y"), p.types.push_back(bool_out ? Type::Bool : lit);
  }
  return p;
}

Expr parse_op(const TableOp& op, const char* text, Type lit, bool backward) {
  Parsed p = names_for(op, lit, backward);
  return parse(text, p.names, p.types, lit);
}

const TableOp& find_op(std::string_view name) {
  for (const TableOp& op : table())
    if (op.name == name) return op;
  throw std::runtime_error("no op " + std::string(name));
}

double fwd(std::string_view name, std::vector<double> in, Type lit = Type::F64) {
  const TableOp& op = find_op(name);
  return eval(parse_op(op, op.fwd, lit, false), in);
}

// The bitwise ops at 5 (and 5): known answers.
double fwd_integer_answer(std::string_view name) {
  if (name == "bitwise_not") return ~int64_t{5};
  if (name == "bitwise_and" || name == "bitwise_or") return 5;
  if (name == "bitwise_xor") return 0;
  if (name == "bitwise_left_shift") return 5 << 5;
  if (name == "bitwise_right_shift") return 0;
  if (name == "rotl") return 5u << 5;
  if (name == "rotr") return std::rotr(5u, 5);
  ADD_FAILURE() << "no known answer for " << name;
  return 0;
}

TEST(ExprTable, EveryExpressionParsesAndEvaluates) {
  for (Type lit : {Type::F32, Type::F64}) {
    for (const TableOp& op : table()) {
      SCOPED_TRACE(op.name);
      if (std::string_view(op.rule) == "Integer") {  // bitwise ops: floats are refused, integers evaluate
        EXPECT_THROW(parse_op(op, op.fwd, lit, false), Error);
        Parsed p = names_for(op, Type::I64, false);
        std::fill(p.types.begin(), p.types.end(), Type::I64);
        Expr f = parse(op.fwd, p.names, p.types, Type::I64);
        EXPECT_EQ(f.type(), Type::I64);
        EXPECT_EQ(eval(f, std::vector<double>(op.arity + 2, 5.0)), fwd_integer_answer(op.name)) << f.str();
        continue;
      }
      Expr f = parse_op(op, op.fwd, lit, false);
      EXPECT_FALSE(f.nodes.empty());
      EXPECT_LE(f.num_inputs(), op.arity);
      std::vector<double> at(op.arity + 2, 0.75);
      double y = eval(f, at);
      EXPECT_FALSE(std::isnan(y)) << f.str();
      for (int k = 0; k < op.arity; ++k) {
        if (std::string_view(op.d[k]).empty()) continue;
        Expr d = parse_op(op, op.d[k], lit, true);
        at[op.arity + 1] = y;  // y is the forward output
        EXPECT_FALSE(std::isnan(eval(d, at))) << op.d[k];
      }
    }
  }
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }

TEST(ExprTable, ForwardMatchesReference) {
  for (double x : {-3.0, -1.25, -0.5, 0.3, 1.0, 2.5}) {
    SCOPED_TRACE(x);
    double k = std::sqrt(2 / std::numbers::pi);
    EXPECT_DOUBLE_EQ(fwd("relu", {x}), std::max(x, 0.0));
    EXPECT_NEAR(fwd("gelu", {x}), gelu_ref(x), 1e-15);
    EXPECT_NEAR(fwd("gelu_tanh", {x}), 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x))), 1e-15);
    EXPECT_NEAR(fwd("silu", {x}), x / (1 + std::exp(-x)), 1e-15);
    EXPECT_NEAR(fwd("softplus", {x}), std::log(1 + std::exp(x)), 1e-15);
    EXPECT_NEAR(fwd("sigmoid", {x}), 1 / (1 + std::exp(-x)), 1e-15);
    EXPECT_EQ(fwd("sign", {x}), x > 0 ? 1 : -1);
    EXPECT_EQ(fwd("where", {1, x, 7}), x);
    EXPECT_EQ(fwd("where", {0, x, 7}), 7);
    EXPECT_EQ(fwd("clamp", {x, -1, 1}), std::clamp(x, -1.0, 1.0));
    // f32 literals: the same values, rounded to float at every step.
    EXPECT_NEAR(fwd("gelu", {x}, Type::F32), gelu_ref(x), 1e-6);
    EXPECT_NEAR(fwd("silu", {x}, Type::F32), x / (1 + std::exp(-x)), 1e-6);
  }
  EXPECT_EQ(fwd("sign", {0.0}), 0);
  // Round is half to even.
  EXPECT_EQ(fwd("round", {0.5}), 0);
  EXPECT_EQ(fwd("round", {1.5}), 2);
  EXPECT_EQ(fwd("round", {2.5}), 2);
  EXPECT_EQ(fwd("round", {-2.5}), -2);
  EXPECT_EQ(fwd("round", {2.5}, Type::F32), 2);
}

TEST(ExprTable, BackwardMatchesFiniteDifference) {
  for (const char* name : {"gelu", "gelu_tanh", "silu", "softplus", "sigmoid", "tanh", "rsqrt", "log1p"}) {
    const TableOp& op = find_op(name);
    Expr f = parse_op(op, op.fwd, Type::F64, false);
    Expr d = parse_op(op, op.d[0], Type::F64, true);
    for (double x : {0.3, 0.9, 1.7}) {
      double h = 1e-6, xs[] = {x}, xp[] = {x + h}, xm[] = {x - h};
      double numeric = (eval(f, xp) - eval(f, xm)) / (2 * h);
      double in[] = {x, 1.0, eval(f, xs)};  // x, g, y
      EXPECT_NEAR(eval(d, in), numeric, 1e-7) << name << " at " << x;
    }
  }
}

// ---- builder: simplification, CSE, types ----------------------------------------------

Expr parse1(std::string_view text, Type t = Type::F32) {
  std::string names[] = {"x", "y"};
  Type types[] = {t, t};
  return parse(text, names, types, t);
}

TEST(ExprBuilder, FoldsConstants) {
  Expr e = parse1("2 * 3 + x");
  ASSERT_EQ(e.nodes.size(), 3u);
  EXPECT_EQ(e.nodes[1].fn, Fn::Const);
  EXPECT_EQ(e.nodes[1].value, 6);
  Expr c = parse1("exp(0) * 2 - 1 / 4");
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].value, 1.75);
  EXPECT_EQ(parse1("0.1").nodes[0].value, static_cast<double>(0.1f));  // f32 literals are f32
  EXPECT_EQ(parse1("0.1", Type::F64).nodes[0].value, 0.1);
}

TEST(ExprBuilder, Identities) {
  for (const char* t : {"x * 1", "1 * x", "x + 0", "0 + x", "x - 0", "x / 1", "-(-x)", "--x", "(x)", "!!(x > 0) * x"}) {
    Expr e = parse1(t);
    if (std::string_view(t).starts_with("!!")) {
      EXPECT_EQ(count(e, Fn::Not), 0) << t;
      continue;
    }
    ASSERT_EQ(e.nodes.size(), 1u) << t << " -> " << e.str();
    EXPECT_EQ(e.nodes[0].fn, Fn::Input);
  }
  // x*0 stays: NaN * 0 and inf * 0 are NaN.
  EXPECT_EQ(count(parse1("x * 0"), Fn::Mul), 1);
  double nan[] = {NAN};
  EXPECT_TRUE(std::isnan(eval(parse1("x * 0"), nan)));
}

TEST(ExprBuilder, SharesCommonSubexpressions) {
  Expr e = parse1("exp(x) + exp(x)");
  EXPECT_EQ(count(e, Fn::Exp), 1);
  EXPECT_EQ(count(parse1("x * y + y * x"), Fn::Mul), 1);  // commutative operands are ordered
  const TableOp& gt = find_op("gelu_tanh");
  EXPECT_EQ(count(parse_op(gt, gt.d[0], Type::F32, true), Fn::Tanh), 1);
}

// Several roots as one DAG (a kernel with extra outputs): each shared node once, every root
// found at the index finish reports, what no root reaches dropped.
TEST(ExprBuilder, FinishWithSeveralRootsSharesWhatTheyShare) {
  Builder b;
  const int x = b.input(0, Type::F32), y = b.input(1, Type::F32);
  const int e = b.unary(Fn::Exp, b.binary(Fn::Add, x, y));
  b.unary(Fn::Log, y);  // reached by no root
  const int r0 = b.binary(Fn::Mul, e, x), r1 = b.unary(Fn::Tanh, e);
  std::vector<int> at;
  const int roots[] = {r1, r0, r1};
  const Expr both = b.finish(roots, at);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(count(both, Fn::Exp), 1);
  EXPECT_EQ(count(both, Fn::Log), 0);
  EXPECT_EQ(both.nodes.size(), 6u);  // x, y, add, exp, mul, tanh
  EXPECT_EQ(both.nodes[static_cast<size_t>(at[0])].fn, Fn::Tanh);
  EXPECT_EQ(both.nodes[static_cast<size_t>(at[1])].fn, Fn::Mul);
  EXPECT_EQ(at[2], at[0]);
  EXPECT_EQ(both.root(), std::max(at[0], at[1]));  // the latest root last
  for (size_t i = 0; i < both.nodes.size(); ++i)  // topological
    for (int k = 0; k < fn_arity(both.nodes[i].fn); ++k) EXPECT_LT(both.nodes[i].args[k], static_cast<int>(i));
  EXPECT_EQ(b.finish(r0).str(), "mul(in0:f32, exp(add(in0:f32, in1:f32)))");
  const int none[] = {99};
  EXPECT_THROW(b.finish(none, at), Error);
}

TEST(ExprBuilder, PromotesWithCasts) {
  Builder b;
  int i = b.input(0, Type::I64), f = b.input(1, Type::F32), d = b.input(2, Type::F64);
  int s = b.binary(Fn::Add, i, f);
  EXPECT_EQ(b.type_of(s), Type::F32);
  EXPECT_EQ(b.type_of(b.binary(Fn::Mul, s, d)), Type::F64);
  EXPECT_EQ(b.type_of(b.binary(Fn::Lt, i, f)), Type::Bool);
  EXPECT_EQ(b.type_of(b.binary(Fn::And, f, d)), Type::Bool);
  Expr e = b.finish(s);
  EXPECT_EQ(count(e, Fn::Cast), 1);
  EXPECT_EQ(e.str(), "add(in1:f32, cast:f32(in0:i64))");  // commutative operands ordered by id
  int sel = b.select(f, i, d);  // condition to bool, branches to f64
  Expr se = b.finish(sel);
  EXPECT_EQ(se.type(), Type::F64);
  EXPECT_EQ(se.nodes[se.nodes.back().args[0]].type, Type::Bool);
  // Bool arithmetic in the parser happens in the literal type.
  EXPECT_EQ(parse1("(x > 0) - (x < 0)").type(), Type::F32);
  EXPECT_EQ(parse1("(x > 0) - (x < 0)", Type::F64).type(), Type::F64);
  // exp of an integer is computed in f32 (the Float dtype rule).
  EXPECT_EQ(parse1("exp(x)", Type::I64).type(), Type::F32);
}

TEST(ExprBuilder, Casts) {
  Builder b;
  int x = b.input(0, Type::F32), d = b.input(1, Type::F64);
  EXPECT_EQ(b.cast(x, Type::F32), x);
  EXPECT_EQ(b.cast(b.cast(x, Type::F64), Type::F32), x);  // f32 -> f64 is exact
  EXPECT_NE(b.cast(b.cast(d, Type::F32), Type::F64), d);  // f64 -> f32 is not
  int c = b.cast(b.constant(0.1, Type::F64), Type::F32);
  Expr ce = b.finish(c);
  ASSERT_EQ(ce.nodes.size(), 1u);
  EXPECT_EQ(ce.nodes[0].fn, Fn::Const);
  EXPECT_EQ(ce.nodes[0].type, Type::F32);
  EXPECT_EQ(ce.nodes[0].value, static_cast<double>(0.1f));
  EXPECT_EQ(b.finish(b.cast(b.constant(2.7, Type::F32), Type::I64)).nodes[0].value, 2);
}

TEST(ExprBuilder, SelectWithConstantCondition) {
  EXPECT_EQ(parse1("select(1 > 0, x, y)").nodes.back().slot, 0);
  EXPECT_EQ(parse1("select(0, x, y)").nodes.back().slot, 1);
  EXPECT_EQ(parse1("select(x > 0, y, y)").nodes.size(), 1u);
}

TEST(ExprBuilder, FinishKeepsReachableAndIsDeterministic) {
  Builder b;
  int x = b.input(0, Type::F32);
  b.unary(Fn::Sin, x);  // dead
  int r = b.unary(Fn::Exp, x);
  Expr e = b.finish(r);
  ASSERT_EQ(e.nodes.size(), 2u);
  EXPECT_EQ(e.nodes[1].args[0], 0);
  EXPECT_EQ(e.str(), "exp(in0:f32)");
  EXPECT_EQ(e.num_inputs(), 1);
  EXPECT_TRUE(e.uses_input(0));
  EXPECT_FALSE(e.uses_input(1));
  EXPECT_EQ(e.hash(), parse1("exp(x)").hash());
  EXPECT_NE(e.hash(), parse1("exp(x)", Type::F64).hash());
  EXPECT_NE(parse1("exp(x)").hash(), parse1("exp(y)").hash());
  EXPECT_EQ(parse1("exp(x) * exp(x)").str(), "t1 = exp(in0:f32); mul(t1, t1)");
}

TEST(ExprBuilder, InlineFusesExpressions) {
  Builder b;
  std::string abc[] = {"a", "b", "c"};
  int in[] = {b.input(0, Type::F32), b.input(1, Type::F32), b.input(2, Type::F32)};
  int pre = parse_into(b, "a * b + c", abc, in, Type::F32);
  const TableOp& gelu = find_op("gelu");
  std::string x[] = {"x"};
  Type f32[] = {Type::F32};
  Expr g = parse(gelu.fwd, x, f32, Type::F32);
  int pre_arr[] = {pre};
  Expr fused = b.finish(b.inline_expr(g, pre_arr));
  EXPECT_EQ(fused.num_inputs(), 3);
  double v[] = {0.5, 1.5, -0.25};
  EXPECT_NEAR(eval(fused, v), gelu_ref(0.5 * 1.5 - 0.25), 1e-6);
}

TEST(ExprScalar, Semantics) {
  double big = 4611686018427387904.0;  // 2^62
  EXPECT_EQ(eval_scalar(Fn::Add, Type::I64, big, big), -9223372036854775808.0);  // wraps
  EXPECT_EQ(eval_scalar(Fn::Div, Type::I64, 7, 2), 3);
  EXPECT_EQ(eval_scalar(Fn::Div, Type::I64, -7, 2), -3);
  EXPECT_EQ(eval_scalar(Fn::Div, Type::I64, 7, 0), 0);
  EXPECT_EQ(eval_scalar(Fn::Round, Type::F32, 0.5), 0);
  EXPECT_EQ(eval_scalar(Fn::Round, Type::F32, 1.5), 2);
  EXPECT_EQ(eval_scalar(Fn::Round, Type::F64, 2.5), 2);
  EXPECT_EQ(eval_scalar(Fn::Rsqrt, Type::F64, 4), 0.5);
  EXPECT_EQ(eval_scalar(Fn::Div, Type::F32, 1, 3), static_cast<double>(1.0f / 3.0f));
  EXPECT_EQ(eval_scalar(Fn::Lt, Type::Bool, 1, 2), 1);
  EXPECT_EQ(eval_scalar(Fn::Cast, Type::Bool, 0.25), 1);
  EXPECT_EQ(eval_scalar(Fn::Cast, Type::I64, -2.75), -2);
  EXPECT_EQ(eval_scalar(Fn::Select, Type::F64, 0, 1, 2), 2);
  EXPECT_EQ(fn_name(Fn::Select), "select");
  EXPECT_EQ(fn_arity(Fn::Select), 3);
  EXPECT_TRUE(is_comparison(Fn::Ne));
  EXPECT_FALSE(is_comparison(Fn::And));
}

// ---- parse errors -----------------------------------------------------------------------

TEST(ExprParse, ErrorsNameThePosition) {
  struct Case {
    const char* text;
    const char* where;
  };
  for (Case c : {Case{"x +", "position 3"}, Case{"foo(x)", "position 0"}, Case{"x + z", "position 4"},
                 Case{"x x", "position 2"}, Case{"exp(x, x)", "position 0"}, Case{"1e + x", "position 2"},
                 Case{"(x", "position 2"}, Case{"select(x, x)", "position 0"}, Case{"x $ 2", "position 2"},
                 Case{"", "position 0"}, Case{"2x", "position 1"}}) {
    try {
      parse1(c.text);
      ADD_FAILURE() << "no error for \"" << c.text << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.op(), "expr");
      EXPECT_NE(e.detail().find(c.where), std::string::npos) << e.what();
      EXPECT_NE(e.detail().find(std::string("\"") + c.text + "\""), std::string::npos) << e.what();
    }
  }
}

// ---- the IR rewrites for languages without erf/log1p/expm1 ------------------------------

double max_error(Fn f, Rewrites r, double lo, double hi, double (*ref)(double)) {
  Builder b;
  Expr e = rewrite(b.finish(b.unary(f, b.input(0, Type::F64))), r);
  EXPECT_EQ(count(e, f), 0);
  double worst = 0;
  for (double x = lo; x <= hi; x += 1e-3) {
    double in[] = {x};
    worst = std::max(worst, std::fabs(eval(e, in) - ref(x)));
  }
  return worst;
}

TEST(ExprRewrite, ExpansionsMatchTheLibrary) {
  Rewrites all;
  all.expand_erf = all.expand_log1p = all.expand_expm1 = true;
  EXPECT_LE(max_error(Fn::Erf, all, -5, 5, [](double x) { return std::erf(x); }), 2e-7);
  EXPECT_LE(max_error(Fn::Log1p, all, -0.999, 5, [](double x) { return std::log1p(x); }), 2e-7);
  EXPECT_LE(max_error(Fn::Expm1, all, -5, 5, [](double x) { return std::expm1(x); }), 2e-7);

  Builder b;
  int x = b.input(0, Type::F64);
  Expr l = rewrite(b.finish(b.unary(Fn::Log1p, x)), all), m = rewrite(b.finish(b.unary(Fn::Expm1, x)), all);
  for (double v : {0.0, 1e-20, -1e-20, 1e300, double(INFINITY)}) {
    double in[] = {v};
    EXPECT_DOUBLE_EQ(eval(l, in), std::log1p(v)) << v;
  }
  for (double v : {0.0, 1e-20, -1e-20, -800.0, 800.0, -double(INFINITY), double(INFINITY)}) {
    double in[] = {v};
    EXPECT_DOUBLE_EQ(eval(m, in), std::expm1(v)) << v;
  }
  // Small arguments keep their relative accuracy, the point of log1p/expm1.
  double tiny[] = {1e-10};
  EXPECT_NEAR(eval(l, tiny) / std::log1p(1e-10), 1, 1e-15);
  EXPECT_NEAR(eval(m, tiny) / std::expm1(1e-10), 1, 1e-15);
}

TEST(ExprRewrite, NarrowsF64) {
  Expr e = parse1("exp(x) + 0.1", Type::F64);
  Rewrites narrow;
  narrow.f64_to_f32 = true;
  Expr n = rewrite(e, narrow);
  for (const Node& x : n.nodes) EXPECT_NE(x.type, Type::F64);
  Rewrites demote;
  demote.f64_math_in_f32 = true;
  Expr d = rewrite(e, demote);
  EXPECT_EQ(d.type(), Type::F64);
  EXPECT_EQ(d.str(), "add(cast:f64(exp(cast:f32(in0:f64))), 0.1:f64)");
}

}  // namespace
}  // namespace alk::expr
