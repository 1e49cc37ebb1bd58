// Broadcasting (result shapes, errors, values against a naive reference) and dtype
// promotion (docs/dtypes.md: the tensor-tensor table, weak scalars, the op-table rules,
// storage rounding and wrapping, and casts between every pair of dtypes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/kernel.h"  // numel
#include "alk/op_table.h"
#include "error_expect.h"

namespace {

using alk::DType;
using alk::Shape;
using alk::Tensor;

const DType kAll[] = {DType::Bool, DType::U8, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64};

std::string str(const Shape& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string name(DType t) { return std::string(alk::dtype_name(t)); }

// A tensor of dtype t holding `values` (converted on store).
Tensor make(DType t, const std::vector<double>& values, Shape shape = {}) {
  if (shape.empty() && values.size() != 1) shape = {static_cast<int64_t>(values.size())};
  return alk::tensor(values, shape).to(t);
}

// ---------------------------------------------------------------------------------------
// Broadcasting
// ---------------------------------------------------------------------------------------

struct BroadcastCase {
  Shape a, b;
  bool ok;
  Shape out;
};

const BroadcastCase kBroadcastTable[] = {
    {{}, {}, true, {}},
    {{}, {3}, true, {3}},
    {{3}, {}, true, {3}},
    {{3}, {3}, true, {3}},
    {{1}, {3}, true, {3}},
    {{3}, {1}, true, {3}},
    {{2, 3}, {3}, true, {2, 3}},
    {{2, 3}, {1, 3}, true, {2, 3}},
    {{2, 1}, {1, 3}, true, {2, 3}},
    {{3}, {1, 1, 3}, true, {1, 1, 3}},  // rank mismatch: leading 1s
    {{1, 1, 3}, {2, 1}, true, {1, 2, 3}},
    {{1, 2, 3}, {5, 1, 1}, true, {5, 2, 3}},
    {{4, 1, 3}, {2, 3}, true, {4, 2, 3}},
    {{5, 1, 4, 1}, {3, 1, 2}, true, {5, 3, 4, 2}},
    {{0}, {1}, true, {0}},  // zero-size dims broadcast against 1 only
    {{1}, {0}, true, {0}},
    {{0}, {}, true, {0}},
    {{2, 0}, {2, 1}, true, {2, 0}},
    {{0, 3}, {3}, true, {0, 3}},
    {{1, 0}, {5, 1}, true, {5, 0}},
    {{0}, {3}, false, {}},
    {{3}, {0}, false, {}},
    {{2, 0}, {2, 2}, false, {}},
    {{3}, {4}, false, {}},
    {{2, 3}, {3, 2}, false, {}},
    {{2, 3}, {2}, false, {}},  // trailing dims are aligned, not leading
    {{4, 2, 3}, {5, 1, 3}, false, {}},
    {{2, 1, 3}, {1, 1, 4}, false, {}},
};

TEST(BroadcastShapes, Table) {
  for (const BroadcastCase& c : kBroadcastTable) {
    SCOPED_TRACE(str(c.a) + " with " + str(c.b));
    if (c.ok) {
      EXPECT_EQ(alk::broadcast_shapes(c.a, c.b), c.out);
      EXPECT_EQ(alk::broadcast_shapes(c.b, c.a), c.out);
      Tensor r = alk::add(alk::zeros(c.a), alk::zeros(c.b));
      EXPECT_EQ(r.shape(), c.out);
      EXPECT_EQ(alk::mul(alk::ones(c.b, DType::I32), alk::ones(c.a, DType::I32)).shape(), c.out);
      EXPECT_EQ(static_cast<int64_t>(r.to_vector<double>().size()), alk::numel(c.out));
    } else {
      EXPECT_ALK_ERROR(alk::broadcast_shapes(c.a, c.b), "broadcast", str(c.a), str(c.b));
      EXPECT_ALK_ERROR(alk::broadcast_shapes(c.b, c.a), "broadcast", str(c.b), str(c.a));
      EXPECT_ALK_ERROR(alk::add(alk::zeros(c.a), alk::zeros(c.b)), "add", str(c.a), str(c.b));
      EXPECT_ALK_ERROR(alk::mul(alk::zeros(c.b), alk::zeros(c.a)), "mul", str(c.b), str(c.a));
    }
  }
}

TEST(BroadcastShapes, ErrorNamesBothShapes) {
  try {
    (void)alk::add(alk::zeros({2, 3}), alk::zeros({4, 3}));
    FAIL() << "expected alk::Error";
  } catch (const alk::Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("[2, 3]"), std::string::npos) << w;
    EXPECT_NE(w.find("[4, 3]"), std::string::npos) << w;
  }
}

TEST(BroadcastShapes, BroadcastToAndExpandAgree) {
  Tensor x = alk::tensor(std::vector<double>{1, 2, 3}, {3, 1});
  Tensor b = alk::broadcast_to(x, {2, 3, 4});
  EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(b.to_vector<double>(), x.expand({2, 3, 4}).to_vector<double>());
  EXPECT_ALK_ERROR(alk::broadcast_to(x, {2, 2}), "expand", "[3, 1]", "[2, 2]", "dim 0");  // 3 vs 2
  EXPECT_ALK_ERROR(alk::broadcast_to(x, {4}), "expand", "[3, 1]", "[4]", "fewer dims");  // fewer dims
}

// Row-major multi-index.
std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Linear index into `in` (broadcast to `out`) of the element at output index `o`.
int64_t broadcast_source(const std::vector<int64_t>& o, const Shape& in, const Shape& out) {
  const size_t lead = out.size() - in.size();
  int64_t at = 0;
  for (size_t d = 0; d < in.size(); ++d) at = at * in[d] + (in[d] == 1 ? 0 : o[d + lead]);
  return at;
}

// From an output shape: drop some leading dims and set some dims to 1.
Shape operand_shape(std::mt19937& g, const Shape& out) {
  std::uniform_int_distribution<size_t> drop(0, out.size());
  Shape s(out.begin() + static_cast<std::ptrdiff_t>(drop(g)), out.end());
  for (int64_t& d : s)
    if (std::bernoulli_distribution(0.4)(g)) d = 1;
  return s;
}

TEST(BroadcastValues, AddMulMatchNaiveReference) {
  std::mt19937 g(7);
  std::uniform_real_distribution<double> val(-10, 10);
  for (int trial = 0; trial < 200; ++trial) {
    Shape out(std::uniform_int_distribution<size_t>(0, 4)(g));
    for (int64_t& d : out) d = std::uniform_int_distribution<int64_t>(1, 4)(g);
    Shape sa = operand_shape(g, out), sb = operand_shape(g, out);
    Shape want = alk::broadcast_shapes(sa, sb);  // may be smaller than `out` (all-1 dims)
    std::vector<double> va(static_cast<size_t>(alk::numel(sa))), vb(static_cast<size_t>(alk::numel(sb)));
    for (double& v : va) v = val(g);
    for (double& v : vb) v = val(g);
    Tensor a = alk::tensor(va, sa), b = alk::tensor(vb, sb);
    SCOPED_TRACE(str(sa) + " with " + str(sb));
    // Also through a lazy operand and a non-trivial view.
    Tensor sum = a + b, prod = alk::mul(a, b), lazy = sb.size() < 2 ? (a * 1.0) + b : (a * 1.0) + b.t().t();
    ASSERT_EQ(sum.shape(), want);
    ASSERT_EQ(prod.shape(), want);
    std::vector<double> s = sum.to_vector<double>(), p = prod.to_vector<double>(), l = lazy.to_vector<double>();
    for (int64_t i = 0; i < alk::numel(want); ++i) {
      std::vector<int64_t> o = unravel(i, want);
      double x = va[static_cast<size_t>(broadcast_source(o, sa, want))];
      double y = vb[static_cast<size_t>(broadcast_source(o, sb, want))];
      ASSERT_EQ(s[static_cast<size_t>(i)], x + y) << "element " << i;
      ASSERT_EQ(p[static_cast<size_t>(i)], x * y) << "element " << i;
      ASSERT_EQ(l[static_cast<size_t>(i)], x + y) << "element " << i;
    }
  }
}

TEST(BroadcastValues, IntegerAndMixedDtypes) {
  Tensor a = alk::tensor(std::vector<int32_t>{1, 2, 3}, {3, 1});
  Tensor b = alk::tensor(std::vector<int64_t>{10, 20}, {1, 2});
  Tensor c = a * b;
  EXPECT_EQ(c.dtype(), DType::I64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{10, 20, 20, 40, 30, 60}));
  Tensor f = alk::tensor(std::vector<float>{0.5f, 0.25f}, {2});
  Tensor d = a + f;  // i32 [3,1] + f32 [2] -> f32 [3,2]
  EXPECT_EQ(d.dtype(), DType::F32);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.5, 1.25, 2.5, 2.25, 3.5, 3.25}));
}

// ---------------------------------------------------------------------------------------
// Promotion between tensors: the full table of docs/dtypes.md.
// ---------------------------------------------------------------------------------------

// Rows and columns in the order bool u8 i32 i64 f16 bf16 f32 f64, copied from the doc.
const char* const kDocTable[8][8] = {
    {"bool", "u8", "i32", "i64", "f16", "bf16", "f32", "f64"},
    {"u8", "u8", "i32", "i64", "f16", "bf16", "f32", "f64"},
    {"i32", "i32", "i32", "i64", "f16", "bf16", "f32", "f64"},
    {"i64", "i64", "i64", "i64", "f16", "bf16", "f32", "f64"},
    {"f16", "f16", "f16", "f16", "f16", "f32", "f32", "f64"},
    {"bf16", "bf16", "bf16", "bf16", "f32", "bf16", "f32", "f64"},
    {"f32", "f32", "f32", "f32", "f32", "f32", "f32", "f64"},
    {"f64", "f64", "f64", "f64", "f64", "f64", "f64", "f64"},
};

TEST(PromotionTable, AllPairsOfTensorOps) {
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      DType a = kAll[i], b = kAll[j];
      SCOPED_TRACE(name(a) + " with " + name(b));
      EXPECT_EQ(name(alk::promote(a, b)), kDocTable[i][j]);
      Tensor x = make(a, {1, 0}), y = make(b, {1, 1});
      EXPECT_EQ(name(alk::add(x, y).dtype()), kDocTable[i][j]);
      EXPECT_EQ(name((x * y).dtype()), kDocTable[i][j]);
      EXPECT_EQ(name(alk::maximum(x, y).dtype()), kDocTable[i][j]);
      // Float rule on top of promotion.
      std::string fl = alk::is_floating(alk::promote(a, b)) ? kDocTable[i][j] : "f32";
      EXPECT_EQ(name(alk::div(x, y).dtype()), fl);
      EXPECT_EQ(name(alk::lt(x, y).dtype()), "bool");
      EXPECT_EQ(name(alk::logical_and(x, y).dtype()), "bool");
    }
}

TEST(PromotionTable, ValuesOfMixedAdd) {
  // 1 + 2 in every pair gives 3 (bool: true + true), stored in the promoted type.
  for (DType a : kAll)
    for (DType b : kAll) {
      SCOPED_TRACE(name(a) + " with " + name(b));
      Tensor x = make(a, {1, 2}), y = make(b, {2, 1});
      std::vector<double> got = alk::add(x, y).to_vector<double>();
      DType r = alk::promote(a, b);
      // x holds {1, 2} and y {2, 1}, except that a bool holds 1 for both.
      double x0 = 1, x1 = a == DType::Bool ? 1 : 2;
      double y0 = b == DType::Bool ? 1 : 2, y1 = 1;
      std::vector<double> want = {x0 + y0, x1 + y1};
      if (r == DType::Bool) want = {1, 1};
      EXPECT_EQ(got, want);
    }
}

// ---------------------------------------------------------------------------------------
// Weak scalars.
// ---------------------------------------------------------------------------------------

TEST(PromotionScalars, WeakScalarRules) {
  Tensor i32 = make(DType::I32, {2, 3});
  Tensor i64 = make(DType::I64, {2, 3});
  Tensor u8 = make(DType::U8, {2, 3});
  Tensor f16 = make(DType::F16, {2, 3});
  Tensor bf16 = make(DType::BF16, {2, 3});
  Tensor f32 = make(DType::F32, {2, 3});
  Tensor f64 = make(DType::F64, {2, 3});
  Tensor b = make(DType::Bool, {1, 0});

  EXPECT_EQ((i32 * 2.5).dtype(), DType::F32);
  EXPECT_EQ((i32 * 2.5).to_vector<double>(), (std::vector<double>{5, 7.5}));
  EXPECT_EQ((i64 * 0.5).dtype(), DType::F32);
  EXPECT_EQ((u8 * 1.5f).dtype(), DType::F32);
  EXPECT_EQ((f16 * 2.0).dtype(), DType::F16);
  EXPECT_EQ((bf16 * 2.0).dtype(), DType::BF16);
  EXPECT_EQ((f32 - 1.0).dtype(), DType::F32);  // the double does not make it f64
  EXPECT_EQ((f64 * 2.0f).dtype(), DType::F64);
  EXPECT_EQ((i32 + 1).dtype(), DType::I32);
  EXPECT_EQ((i32 + 1).to_vector<int64_t>(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ((u8 + 1).dtype(), DType::U8);
  EXPECT_EQ((i32 + int64_t{1}).dtype(), DType::I32);
  EXPECT_EQ((f16 + 1).dtype(), DType::F16);
  EXPECT_EQ((1 - f32).dtype(), DType::F32);

  // PyTorch: bool tensor + int number -> i64.
  EXPECT_EQ((b + 1).dtype(), DType::I64);
  EXPECT_EQ((b + 1).to_vector<int64_t>(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ((b * 1.5).dtype(), DType::F32);
  EXPECT_EQ((b * 1.5).to_vector<double>(), (std::vector<double>{1.5, 0}));

  // A bool number never promotes.
  EXPECT_EQ((f32 + true).dtype(), DType::F32);
  EXPECT_EQ((i32 * true).dtype(), DType::I32);
  EXPECT_EQ((u8 + true).dtype(), DType::U8);
  EXPECT_EQ(alk::logical_or(b, true).dtype(), DType::Bool);
  EXPECT_EQ(alk::maximum(b, false).dtype(), DType::Bool);

  // Several tensors first, then the numbers against the result.
  Tensor c = make(DType::Bool, {1, 0});
  EXPECT_EQ(alk::where(c, i32, 0.0).dtype(), DType::F32);
  EXPECT_EQ(alk::where(c, i32, 0).dtype(), DType::I32);
  EXPECT_EQ(alk::where(c, i32, 0).to_vector<int64_t>(), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(alk::where(bf16 > 0, bf16, 0.0).dtype(), DType::BF16);
  EXPECT_EQ(alk::clamp(bf16, 0.0, 6.0).dtype(), DType::BF16);
  EXPECT_EQ(alk::clamp(i32, 0, f16).dtype(), DType::F16);
  EXPECT_EQ(alk::clamp(i32, 2.5, 10).dtype(), DType::F32);
  EXPECT_EQ(alk::clamp(i32, 2.5, 10).to_vector<double>(), (std::vector<double>{2.5, 3}));
}

// The number is taken in the tensor's type: 0.1 compared with an f16 0.1 is equal
// (both round to the same f16), as in PyTorch.
TEST(PromotionScalars, ScalarTakesTheTensorType) {
  Tensor h = make(DType::F16, {0.1});
  EXPECT_EQ(alk::eq(h, 0.1).to_vector<int64_t>(), std::vector<int64_t>{1});
  Tensor bh = make(DType::BF16, {0.1});
  EXPECT_EQ(alk::eq(bh, 0.1).to_vector<int64_t>(), std::vector<int64_t>{1});
  Tensor f = make(DType::F32, {0.1});
  EXPECT_EQ(alk::eq(f, 0.1).to_vector<int64_t>(), std::vector<int64_t>{1});
  Tensor d = make(DType::F64, {0.1});
  EXPECT_EQ(alk::eq(d, 0.1).to_vector<int64_t>(), std::vector<int64_t>{1});
  // An integer tensor with an int number compares as integers.
  Tensor big = alk::tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1}, {1});
  EXPECT_EQ(alk::eq(big, int64_t{1} << 53).to_vector<int64_t>(), std::vector<int64_t>{0});
}

// An int64_t number is exact against an i64 tensor, as a Python int is in PyTorch:
// 2^53 + 1 must not turn into 2^53 on the way in.
// Tensor-tensor integer arithmetic is exact over all of i64. (Numbers written as literals
// travel through the IR as doubles: beyond 2^53 they round; docs/dtypes.md says so.)
TEST(PromotionScalars, Int64TensorArithmeticIsExact) {
  Tensor big = alk::tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1}, {1});
  Tensor same = alk::tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1}, {1});
  EXPECT_EQ(alk::eq(big, same).to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ((big - same).to_vector<int64_t>(), std::vector<int64_t>{0});
  Tensor max = alk::tensor(std::vector<int64_t>{std::numeric_limits<int64_t>::max()}, {1});
  EXPECT_EQ((alk::tensor(std::vector<int64_t>{0}, {1}) + max).to_vector<int64_t>(),
            std::vector<int64_t>{std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(alk::eq(big, (int64_t{1} << 20) + 1).to_vector<int64_t>(), std::vector<int64_t>{0});
}

// ---------------------------------------------------------------------------------------
// The dtype rules of the op table, for every op of elementwise.def and every dtype.
// ---------------------------------------------------------------------------------------

enum class Rule { Same, Float, Compare, Logical, Select, Integer };

// Each op's rule comes from the table itself (so a new entry needs no edit here); the
// test checks that the rule the entry declares is the behaviour the op has.
Rule rule_of(const std::string& op) {
  switch (alk::find_elementwise(op)->rule) {
    case alk::DTypeRule::Same: return Rule::Same;
    case alk::DTypeRule::Float: return Rule::Float;
    case alk::DTypeRule::Compare: return Rule::Compare;
    case alk::DTypeRule::Logical: return Rule::Logical;
    case alk::DTypeRule::Select: return Rule::Select;
    case alk::DTypeRule::Integer: return Rule::Integer;
  }
  return Rule::Same;
}

struct TableOp {
  const char* name;
  int arity;
  std::function<Tensor(const std::vector<Tensor>&)> call;
};

#define PROMO_CALL_1(op) [](const std::vector<Tensor>& x) { return alk::op(x[0]); }
#define PROMO_CALL_2(op) [](const std::vector<Tensor>& x) { return alk::op(x[0], x[1]); }
#define PROMO_CALL_3(op) [](const std::vector<Tensor>& x) { return alk::op(x[0], x[1], x[2]); }

const std::vector<TableOp>& table_ops() {
  static const std::vector<TableOp> ops = {
#define ALK_EW(op, arity, ...) {#op, arity, PROMO_CALL_##arity(op)},
#include "alk/elementwise.def"
#undef ALK_EW
  };
  return ops;
}

DType expected(Rule r, const std::vector<DType>& in) {
  switch (r) {
    case Rule::Integer:  // as Same; floats are refused (the test expects the error)
    case Rule::Same: {
      DType t = in[0];
      for (DType d : in) t = alk::promote(t, d);
      return t;
    }
    case Rule::Float: {
      DType t = in[0];
      for (DType d : in) t = alk::promote(t, d);
      return alk::is_floating(t) ? t : DType::F32;
    }
    case Rule::Compare:
    case Rule::Logical: return DType::Bool;
    case Rule::Select: return alk::promote(in[1], in[2]);
  }
  return DType::F32;
}

TEST(PromotionOpTable, EveryOpEveryDtype) {
  ASSERT_FALSE(table_ops().empty());
  for (const TableOp& op : table_ops()) {
    SCOPED_TRACE(op.name);
    const Rule rule = rule_of(op.name);
    std::vector<std::vector<DType>> combos;
    if (op.arity == 1)
      for (DType a : kAll) combos.push_back({a});
    if (op.arity == 2)
      for (DType a : kAll)
        for (DType b : kAll) combos.push_back({a, b});
    if (op.arity == 3)
      for (DType a : kAll)
        for (DType b : kAll) combos.push_back({rule == Rule::Select ? DType::Bool : a, a, b});
    for (const auto& dts : combos) {
      std::vector<Tensor> xs;
      for (DType d : dts) xs.push_back(make(d, {1, 2}));
      std::string what;
      for (DType d : dts) what += name(d) + " ";
      if (rule == Rule::Integer && alk::is_floating(expected(rule, dts))) {
        EXPECT_THROW(op.call(xs), alk::Error) << op.name << "(" << what << ") of a float";
        continue;
      }
      try {
        EXPECT_EQ(name(op.call(xs).dtype()), name(expected(rule, dts))) << op.name << "(" << what << ")";
      } catch (const alk::Error& e) {
        ADD_FAILURE() << op.name << "(" << what << ") threw " << e.what();
      }
    }
  }
}

TEST(PromotionOpTable, DocExamples) {
  Tensor i32 = make(DType::I32, {7, 3}), i64 = make(DType::I64, {7, 3}), u8 = make(DType::U8, {7, 3});
  Tensor f16 = make(DType::F16, {7, 3}), bf16 = make(DType::BF16, {7, 3}), f32 = make(DType::F32, {7, 3});
  Tensor f64 = make(DType::F64, {7, 3}), b = make(DType::Bool, {1, 0});

  // Same
  EXPECT_EQ(alk::add(i32, f16).dtype(), DType::F16);
  EXPECT_EQ(alk::mul(u8, u8).dtype(), DType::U8);
  EXPECT_EQ(alk::relu(i64).dtype(), DType::I64);
  EXPECT_EQ(alk::floor(i32).dtype(), DType::I32);
  EXPECT_EQ(alk::pow(i64, i64).dtype(), DType::I64);
  EXPECT_EQ(alk::pow(i64, i64).to_vector<int64_t>(), (std::vector<int64_t>{823543, 27}));
  // Float: true division of integers
  Tensor q = alk::div(make(DType::I32, {7, -7}), make(DType::I32, {2, 2}));
  EXPECT_EQ(q.dtype(), DType::F32);
  EXPECT_EQ(q.to_vector<double>(), (std::vector<double>{3.5, -3.5}));
  Tensor q2 = make(DType::I64, {7}) / make(DType::I64, {2});
  EXPECT_EQ(q2.dtype(), DType::F32);
  EXPECT_EQ(q2.to_vector<double>(), std::vector<double>{3.5});
  EXPECT_EQ((make(DType::I32, {1}) / 4).to_vector<double>(), std::vector<double>{0.25});
  Tensor e = alk::exp(make(DType::I64, {0, 1}));
  EXPECT_EQ(e.dtype(), DType::F32);
  std::vector<double> ev = e.to_vector<double>();
  EXPECT_EQ(ev[0], 1.0);
  EXPECT_NEAR(ev[1], std::exp(1.0), 1e-6 * std::exp(1.0));  // f32 precision
  EXPECT_EQ(alk::sqrt(b).dtype(), DType::F32);
  EXPECT_EQ(alk::sqrt(b).to_vector<double>(), (std::vector<double>{1, 0}));
  EXPECT_EQ(alk::div(f16, f16).dtype(), DType::F16);
  EXPECT_EQ(alk::div(f64, i32).dtype(), DType::F64);
  EXPECT_EQ(alk::gelu(bf16).dtype(), DType::BF16);
  // Compare
  EXPECT_EQ(alk::lt(i32, f32).dtype(), DType::Bool);
  EXPECT_EQ((f16 > 0.5).dtype(), DType::Bool);
  EXPECT_EQ((f16 > 5.0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  // i32 16777217 and f32 16777216 compare equal in f32 (the promoted type).
  Tensor big = alk::tensor(std::vector<int32_t>{16777217}, {1});
  Tensor bigf = alk::tensor(std::vector<float>{16777216.0f}, {1});
  EXPECT_EQ(alk::eq(big, bigf).to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(alk::lt(bigf, big).to_vector<int64_t>(), std::vector<int64_t>{0});
  // ... but as i64 vs i32 they differ.
  EXPECT_EQ(alk::eq(big, alk::tensor(std::vector<int64_t>{16777216}, {1})).to_vector<int64_t>(),
            std::vector<int64_t>{0});
  // Logical
  EXPECT_EQ(alk::logical_and(f32, i64).dtype(), DType::Bool);
  Tensor ln = alk::logical_not(make(DType::U8, {3, 0}));
  EXPECT_EQ(ln.dtype(), DType::Bool);
  EXPECT_EQ(ln.to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(alk::logical_and(make(DType::F32, {0.5, 0.5}), make(DType::I64, {0, 2})).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(alk::logical_xor(b, b).dtype(), DType::Bool);
  EXPECT_EQ((!make(DType::F32, {0.0, -0.25})).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  // Select
  Tensor w = alk::where(b, make(DType::I32, {1, 2}), make(DType::F32, {0.5, 0.25}));
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 0.25}));
  EXPECT_EQ(alk::where(b, f32, f16).dtype(), DType::F32);
}

// ---------------------------------------------------------------------------------------
// Storage: f16/bf16 round on store, integers wrap to the storage width.
// ---------------------------------------------------------------------------------------

uint16_t bits16(const Tensor& t) {
  // The stored 16-bit pattern, read back through an exact widening to f64.
  double v = t.to_vector<double>()[0];
  float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}

TEST(PromotionStorage, HalfAndBfloatRoundOnStore) {
  Tensor one_h = alk::ones({1}, DType::F16), one_b = alk::ones({1}, DType::BF16);
  // 1/3: f16 0x3555 = 0.333251953125 (rounded down), bf16 0x3EAB = 0.333984375 (rounded up).
  Tensor h = one_h / 3.0, b = one_b / 3.0;
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(h.to_vector<double>()[0], 0.333251953125);
  EXPECT_EQ(b.to_vector<double>()[0], 0.333984375);
  EXPECT_EQ(bits16(b), 0x3EAB);
  // 2049 is not an f16: ties go to even (2048); 2051 -> 2052.
  Tensor hi = alk::full({2}, 2048, DType::F16) + make(DType::F16, {1, 3});
  EXPECT_EQ(hi.to_vector<double>(), (std::vector<double>{2048, 2052}));
  // bf16: 257 -> 256 (tie to even), 259 -> 260.
  Tensor bi = alk::full({2}, 256, DType::BF16) + make(DType::BF16, {1, 3});
  EXPECT_EQ(bi.to_vector<double>(), (std::vector<double>{256, 260}));
  // f16 overflow goes to inf.
  EXPECT_EQ((alk::full({1}, 65504, DType::F16) * 2.0).to_vector<double>()[0], std::numeric_limits<double>::infinity());
  // f32 rounds to f32, f64 does not.
  EXPECT_EQ((alk::ones({1}, DType::F32) / 3.0).to_vector<double>()[0], static_cast<double>(1.0f / 3.0f));
  EXPECT_EQ((alk::ones({1}, DType::F64) / 3.0).to_vector<double>()[0], 1.0 / 3.0);
}

TEST(PromotionStorage, IntegersWrapToStorageWidth) {
  Tensor m = alk::tensor(std::vector<int32_t>{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}, {2});
  Tensor p = m + 1;
  EXPECT_EQ(p.dtype(), DType::I32);
  EXPECT_EQ(p.to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int32_t>::min(), int64_t{std::numeric_limits<int32_t>::min()} + 1}));
  EXPECT_EQ((m - 1).to_vector<int64_t>()[1], std::numeric_limits<int32_t>::max());
  Tensor one32 = alk::tensor(std::vector<int32_t>{1, 1}, {2});
  EXPECT_EQ((m + one32).to_vector<int64_t>()[0], std::numeric_limits<int32_t>::min());
  // i32 * i32 wraps modulo 2^32: 65536 * 65536 = 0, 65536 * 32768 = INT32_MIN.
  Tensor w = alk::tensor(std::vector<int32_t>{65536, 65536}, {2}) * alk::tensor(std::vector<int32_t>{65536, 32768}, {2});
  EXPECT_EQ(w.to_vector<int64_t>(), (std::vector<int64_t>{0, std::numeric_limits<int32_t>::min()}));
  // u8: 200 + 100 = 44, 10 - 20 = 246.
  Tensor u = make(DType::U8, {200, 10});
  EXPECT_EQ((u + make(DType::U8, {100, 0})).to_vector<int64_t>(), (std::vector<int64_t>{44, 10}));
  EXPECT_EQ((u - 20).to_vector<int64_t>(), (std::vector<int64_t>{180, 246}));
  // Promoted to i64, nothing wraps.
  EXPECT_EQ((m + alk::tensor(std::vector<int64_t>{1, 0}, {2})).to_vector<int64_t>()[0],
            int64_t{std::numeric_limits<int32_t>::max()} + 1);
  // Sums of i32 accumulate in i64 (PyTorch).
  EXPECT_EQ(alk::sum(alk::tensor(std::vector<int32_t>{std::numeric_limits<int32_t>::max(), 1}, {2})).to_vector<int64_t>()[0],
            int64_t{std::numeric_limits<int32_t>::max()} + 1);
}

// ---------------------------------------------------------------------------------------
// Casts between every pair of dtypes.
// ---------------------------------------------------------------------------------------

// Round v to `bits` significant bits, nearest-even (no overflow/subnormals for our values).
double round_bits(double v, int bits) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);
  return std::ldexp(std::nearbyint(std::ldexp(v, bits - e)), e - bits);
}

// What storing v (a double) into dtype t keeps.
double stored(DType t, double v) {
  switch (t) {
    case DType::Bool: return v != 0 ? 1 : 0;
    case DType::U8: return static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(std::trunc(v)) & 0xff));
    case DType::I32: return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(std::trunc(v)))));
    case DType::I64: return std::trunc(v);
    case DType::F16: return std::fabs(v) > 65519.99 ? std::copysign(INFINITY, v) : round_bits(v, 11);
    case DType::BF16: return round_bits(v, 8);
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    case DType::F64: return v;
  }
  return v;
}

TEST(PromotionCast, SpecificValues) {
  EXPECT_EQ(make(DType::I32, {3.7, -3.7}).to_vector<int64_t>(), (std::vector<int64_t>{3, -3}));
  EXPECT_EQ(make(DType::I64, {3.7, -3.7, 0.999}).to_vector<int64_t>(), (std::vector<int64_t>{3, -3, 0}));
  EXPECT_EQ(make(DType::U8, {300, 255, 256}).to_vector<int64_t>(), (std::vector<int64_t>{44, 255, 0}));
  EXPECT_EQ(make(DType::Bool, {0.5, 0, -2}).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(alk::cast(alk::tensor(std::vector<int64_t>{300, -1}, {2}), DType::U8).to_vector<int64_t>(),
            (std::vector<int64_t>{44, 255}));
  EXPECT_EQ(alk::cast(alk::tensor(std::vector<int64_t>{(int64_t{1} << 32) + 5}, {1}), DType::I32).to_vector<int64_t>(),
            std::vector<int64_t>{5});
  EXPECT_EQ(alk::cast(alk::tensor(std::vector<int64_t>{2049}, {1}), DType::F16).to_vector<double>(),
            std::vector<double>{2048});
  EXPECT_EQ(alk::cast(make(DType::F32, {0.1}), DType::F64).to_vector<double>(),
            std::vector<double>{static_cast<double>(0.1f)});
  EXPECT_EQ(make(DType::F32, {3.7}).to(DType::Bool).to(DType::F32).to_vector<double>(), std::vector<double>{1});
}

TEST(PromotionCast, EveryPairOfDtypes) {
  const std::vector<double> values = {0, 1, -1, 0.5, 3.7, -3.7, 2.5, 300, 1000.25, 127, -128};
  for (DType from : kAll) {
    // The source tensor: values as stored in `from`.
    Tensor src = alk::tensor(values, {static_cast<int64_t>(values.size())}).to(from);
    std::vector<double> held;
    for (double v : values) held.push_back(stored(from, v));
    ASSERT_EQ(src.to_vector<double>(), held) << "storing into " << name(from);
    for (DType to : kAll) {
      SCOPED_TRACE(name(from) + " -> " + name(to));
      Tensor c = alk::cast(src, to);
      EXPECT_EQ(c.dtype(), to);
      std::vector<double> want;
      for (double v : held) want.push_back(stored(to, v));
      EXPECT_EQ(c.to_vector<double>(), want);
      EXPECT_EQ(src.to(to).to_vector<double>(), want);
      if (from == to) {
        EXPECT_EQ(c.impl(), src.impl()) << "a cast to the same dtype is a no-op";
      }
    }
  }
}

}  // namespace
