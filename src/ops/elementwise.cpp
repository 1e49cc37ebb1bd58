// Turns each entry of elementwise.def into a Tensor function: dtype rule, broadcasting,
// the forward Map node built from the entry's expression, and a backward rule built
// from the entry's gradient expressions. Nothing here is specific to one op.
#include <algorithm>
#include <cctype>
#include <set>

#include "core/half.h"
#include "expr/emit.h"
#include "graph/autograd.h"
#include "graph/schedule.h"
#include "ops/ops.h"

namespace alk {

namespace {

// The names an expression text mentions (to save only the tensors backward reads).
std::set<std::string> names_in(std::string_view text) {
  std::set<std::string> out;
  for (size_t i = 0; i < text.size();) {
    if (std::isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      out.emplace(text.substr(i, j - i));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// The dtype operands are brought to before the expression runs: tensors promote together,
// numbers are weak (docs/dtypes.md); a bool number never promotes anything.
DType common_dtype(const std::vector<Operand>& xs, const char* op, Loc loc) {
  std::optional<DType> tensors;
  bool float_scalar = false, int_scalar = false;
  for (const Operand& x : xs) {
    if (!x.is_scalar) {
      check(x.tensor.defined(), op, loc, "operand is an undefined tensor");
      tensors = tensors ? promote(*tensors, x.tensor.dtype()) : x.tensor.dtype();
    } else if (x.is_float) {
      float_scalar = true;
    } else if (!x.is_bool) {
      int_scalar = true;
    }
  }
  if (!tensors) return float_scalar ? DType::F32 : int_scalar ? DType::I64 : DType::Bool;
  DType t = *tensors;
  if (float_scalar && !is_floating(t)) return DType::F32;
  if (int_scalar && t == DType::Bool) return DType::I64;
  return t;
}

}  // namespace

namespace {

struct BuiltExpr {
  expr::Expr expr;
  std::vector<Tensor> inputs;  // one per Input slot, in slot order
  Shape shape;                 // the broadcast shape
};

// Builds `text` over the operands: numbers become literals, tensors become inputs cast
// to their operand dtype; the result is cast to out_dtype.
BuiltExpr build(std::string_view text, const std::vector<std::string>& names, const std::vector<Operand>& operands,
                const std::vector<DType>& operand_dtypes, DType literal_dtype, DType out_dtype, Loc loc) {
  BuiltExpr r;
  for (const Operand& x : operands)
    if (!x.is_scalar) r.shape = broadcast_shapes(r.shape, x.tensor.shape(), loc);
  expr::Builder b;
  std::vector<int> ids;
  for (size_t k = 0; k < operands.size(); ++k) {
    const ComputeType want = compute_type(operand_dtypes[k]);
    if (operands[k].is_scalar) {  // the number as the operand's dtype holds it (f16 0.1 != f32 0.1)
      ids.push_back(b.constant(round_to(operands[k].scalar, operand_dtypes[k]), want));
      continue;
    }
    const Tensor& t = operands[k].tensor;
    int id = b.input(static_cast<int>(r.inputs.size()), compute_type(t.dtype()));
    ids.push_back(b.cast(id, want));
    r.inputs.push_back(t);
  }
  int root = parse_into(b, text, names, ids, compute_type(literal_dtype));
  r.expr = b.finish(b.cast(root, compute_type(out_dtype)));
  return r;
}

DType dtype_of(expr::Type t) {
  switch (t) {
    case expr::Type::Bool: return DType::Bool;
    case expr::Type::I64: return DType::I64;
    case expr::Type::F32: return DType::F32;
    case expr::Type::F64: return DType::F64;
  }
  return DType::F32;
}

// Evaluates an expression with the table's own (differentiable) ops instead of one Map
// node: used for backward under create_graph, so gradients of gradients exist. The
// scheduler fuses the resulting chain back into one kernel anyway.
Tensor eval_with_ops(const expr::Expr& e, const std::vector<Tensor>& inputs) {
  using expr::Fn;
  std::vector<Tensor> v(e.nodes.size());
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const expr::Node& n = e.nodes[i];
    auto a = [&](int k) -> const Tensor& { return v[static_cast<size_t>(n.args[k])]; };
    switch (n.fn) {
      case Fn::Input: v[i] = inputs[static_cast<size_t>(n.slot)]; break;
      case Fn::Const: v[i] = scalar_tensor(n.value, dtype_of(n.type)); break;
      case Fn::Cast: v[i] = cast(a(0), dtype_of(n.type)); break;
      case Fn::Neg: v[i] = neg(a(0)); break;
      case Fn::Not: v[i] = logical_not(a(0)); break;
      case Fn::Exp: v[i] = exp(a(0)); break;
      case Fn::Log: v[i] = log(a(0)); break;
      case Fn::Log1p: v[i] = log1p(a(0)); break;
      case Fn::Expm1: v[i] = expm1(a(0)); break;
      case Fn::Sqrt: v[i] = sqrt(a(0)); break;
      case Fn::Rsqrt: v[i] = rsqrt(a(0)); break;
      case Fn::Sin: v[i] = sin(a(0)); break;
      case Fn::Cos: v[i] = cos(a(0)); break;
      case Fn::Tanh: v[i] = tanh(a(0)); break;
      case Fn::Erf: v[i] = erf(a(0)); break;
      case Fn::Abs: v[i] = abs(a(0)); break;
      case Fn::Floor: v[i] = floor(a(0)); break;
      case Fn::Ceil: v[i] = ceil(a(0)); break;
      case Fn::Round: v[i] = round(a(0)); break;
      case Fn::RoundBf16: v[i] = cast(cast(a(0), DType::BF16), a(0).dtype()); break;  // the scheduler's; no table op spells it
      case Fn::Add: v[i] = add(a(0), a(1)); break;
      case Fn::Sub: v[i] = sub(a(0), a(1)); break;
      case Fn::Mul: v[i] = mul(a(0), a(1)); break;
      case Fn::Div: v[i] = div(a(0), a(1)); break;
      case Fn::Pow: v[i] = pow(a(0), a(1)); break;
      case Fn::Max: v[i] = maximum(a(0), a(1)); break;
      case Fn::Min: v[i] = minimum(a(0), a(1)); break;
      case Fn::Lt: v[i] = lt(a(0), a(1)); break;
      case Fn::Le: v[i] = le(a(0), a(1)); break;
      case Fn::Gt: v[i] = gt(a(0), a(1)); break;
      case Fn::Ge: v[i] = ge(a(0), a(1)); break;
      case Fn::Eq: v[i] = eq(a(0), a(1)); break;
      case Fn::Ne: v[i] = ne(a(0), a(1)); break;
      case Fn::And: v[i] = logical_and(a(0), a(1)); break;
      case Fn::Or: v[i] = logical_or(a(0), a(1)); break;
      case Fn::BitNot: v[i] = bitwise_not(a(0)); break;
      case Fn::BitAnd: v[i] = bitwise_and(a(0), a(1)); break;
      case Fn::BitOr: v[i] = bitwise_or(a(0), a(1)); break;
      case Fn::BitXor: v[i] = bitwise_xor(a(0), a(1)); break;
      case Fn::Shl: v[i] = bitwise_left_shift(a(0), a(1)); break;
      case Fn::Shr: v[i] = bitwise_right_shift(a(0), a(1)); break;
      case Fn::Rotl: v[i] = rotl(a(0), a(1)); break;
      case Fn::Rotr: v[i] = rotr(a(0), a(1)); break;
      case Fn::Select: v[i] = where(a(0), a(1), a(2)); break;
    }
  }
  return v.back();
}

}  // namespace

Tensor map_expr(OpId op, std::string_view text, const std::vector<std::string>& names,
                const std::vector<Operand>& operands, const std::vector<DType>& operand_dtypes, DType literal_dtype,
                DType out_dtype, Loc loc) {
  BuiltExpr r = build(text, names, operands, operand_dtypes, literal_dtype, out_dtype, loc);
  std::vector<Tensor> inputs;
  for (const Tensor& t : r.inputs) inputs.push_back(t.shape() == r.shape ? alias(t) : broadcast_to(alias(t), r.shape, loc));
  return make_node(op, r.shape, out_dtype, std::move(inputs), MapParams{std::move(r.expr)}, loc);
}

Tensor apply_elementwise(OpId op, const std::vector<Operand>& operands, Loc loc) {
  return apply_entry(elementwise_entry(op), nullptr, operands, loc);
}

// `keep` keeps a custom op's strings alive as long as a backward rule may read them.
Tensor apply_entry(const ElementwiseEntry& e, std::shared_ptr<const void> keep, const std::vector<Operand>& operands,
                   Loc loc) {
  const OpId op = e.op;
  const std::string name(e.name);
  DType common = common_dtype(operands, name.c_str(), loc);
  std::vector<DType> dtypes(operands.size(), common);
  DType out = common;
  switch (e.rule) {
    case DTypeRule::Same: break;
    case DTypeRule::Float: out = common = to_floating(common); std::fill(dtypes.begin(), dtypes.end(), common); break;
    case DTypeRule::Compare: out = DType::Bool; break;
    case DTypeRule::Logical:
      out = common = DType::Bool;
      std::fill(dtypes.begin(), dtypes.end(), DType::Bool);
      break;
    case DTypeRule::Integer:
      check(is_integral(common) || common == DType::Bool, name, loc, "takes integer or bool tensors, got ",
            dtype_name(common));
      break;
    case DTypeRule::Select: {
      const Operand& c = operands[0];
      check(c.is_scalar ? c.is_bool : c.tensor.dtype() == DType::Bool, name, loc,
            "the condition must be bool, got ", c.is_scalar ? "a number" : std::string(dtype_name(c.tensor.dtype())));
      common = common_dtype({operands.begin() + 1, operands.end()}, name.c_str(), loc);
      dtypes = {DType::Bool, common, common};
      out = common;
      break;
    }
  }
  Tensor result;
  try {
    result = map_expr(op, e.forward, e.inputs, operands, dtypes, common, out, loc);
    if (op == OpId::Map) result.impl()->node->name = name;  // a custom op
  } catch (const Error& err) {
    if (err.op() == name) throw;
    throw Error(name, err.detail(), loc);
  }
  std::vector<Tensor> tensor_inputs;
  for (const Operand& x : operands) tensor_inputs.push_back(x.is_scalar ? Tensor() : x.tensor);
  if (!e.differentiable() || !needs_grad(tensor_inputs)) return result;

  // Backward: each operand's gradient expression over (operands, y, g), summed back
  // over broadcast dims. Only the tensors the expressions name are kept alive.
  std::set<std::string> used;
  for (auto text : e.backward) used.merge(names_in(text));
  std::vector<Operand> saved;
  std::vector<Shape> shapes(operands.size());
  std::vector<bool> is_tensor(operands.size(), false);
  for (size_t k = 0; k < operands.size(); ++k) {
    if (operands[k].is_scalar) {
      saved.push_back(operands[k]);
      continue;
    }
    is_tensor[k] = true;
    shapes[k] = operands[k].tensor.shape();
    // Inputs are kept when a gradient names them, or names y (create_graph recomputes y).
    saved.push_back(used.count(e.inputs[k]) || used.count("y") ? operands[k] : Operand(0.0));
  }
  // The output itself cannot be kept with its history (it would own its own grad_fn);
  // a detached alias serves plain backward, and create_graph recomputes it.
  Tensor y = used.count("y") ? alias(result) : Tensor();
  auto backward = [&e, keep, saved, shapes, is_tensor, dtypes, out, common, y, loc](const Tensor& g) {
    const bool create_graph = is_grad_enabled();
    std::vector<std::string> names = e.inputs;
    names.push_back("y");
    names.push_back("g");
    std::vector<Operand> xs = saved;
    Operand y_operand = y.defined() ? Operand(y) : Operand(0.0);
    if (create_graph && y.defined()) {
      BuiltExpr fwd = build(e.forward, e.inputs, saved, dtypes, common, out, loc);
      y_operand = eval_with_ops(fwd.expr, fwd.inputs);
    }
    xs.push_back(y_operand);
    xs.push_back(g);
    std::vector<DType> types = dtypes;
    types.push_back(common);
    types.push_back(common);
    std::vector<Tensor> grads(saved.size());
    for (size_t k = 0; k < saved.size(); ++k) {
      if (e.backward[k].empty() || !is_tensor[k]) continue;
      Tensor gk;
      if (e.backward[k] == "g" && g.dtype() == common) {
        // The incoming gradient itself (add's, sub's first operand's): no node, so no copy
        // kernel when the gradient is stored.
        gk = g;
      } else if (create_graph) {
        BuiltExpr r = build(e.backward[k], names, xs, types, common, common, loc);
        gk = eval_with_ops(r.expr, r.inputs);
      } else {
        gk = map_expr(OpId::Map, e.backward[k], names, xs, types, common, common, loc);
      }
      if (gk.shape() != g.shape()) gk = broadcast_to(gk, g.shape(), loc);
      grads[k] = sum_to(gk, shapes[k]);
    }
    return grads;
  };
  return with_grad(result, name, tensor_inputs, backward);
}

// One function per table entry.
#define ALK_DEFINE_1(name) \
  Tensor name(const Operand& x, Loc loc) { return apply_elementwise(OpId::name, {x}, loc); }
#define ALK_DEFINE_2(name) \
  Tensor name(const Operand& a, const Operand& b, Loc loc) { return apply_elementwise(OpId::name, {a, b}, loc); }
#define ALK_DEFINE_3(name)                                                \
  Tensor name(const Operand& a, const Operand& b, const Operand& c, Loc loc) { \
    return apply_elementwise(OpId::name, {a, b, c}, loc);                 \
  }
#define ALK_EW(name, arity, ...) ALK_DEFINE_##arity(name)
#include "alk/elementwise.def"
#undef ALK_EW

Tensor cast(const Tensor& x, DType dtype, Loc loc) {
  check(x.defined(), "cast", loc, "undefined tensor");
  if (x.dtype() == dtype) return x;
  expr::Builder b;
  int root = b.cast(b.input(0, compute_type(x.dtype())), compute_type(dtype));
  Tensor out = make_node(OpId::Cast, x.shape(), dtype, {alias(x)}, MapParams{b.finish(root)}, loc);
  if (!is_floating(dtype) || !is_floating(x.dtype())) return out;
  DType from = x.dtype();
  return with_grad(out, "cast", {x}, [from](const Tensor& g) { return std::vector<Tensor>{cast(g, from)}; });
}

namespace {
// A custom op's entry, owning the strings the entry's views point into.
struct CustomEntry {
  CustomOp op;
  ElementwiseEntry entry;
};
}  // namespace

Tensor custom_elementwise(const CustomOp& op, const std::vector<Operand>& operands, Loc loc) {
  check(!op.inputs.empty() && op.inputs.size() <= 3 && op.inputs.size() == operands.size(), op.name, loc,
        "a custom op takes 1 to 3 operands, one per input name; got ", op.inputs.size(), " names and ",
        operands.size(), " operands");
  check(op.backward.empty() || op.backward.size() == op.inputs.size(), op.name, loc, "got ", op.backward.size(),
        " gradient expressions for ", op.inputs.size(), " inputs");
  auto custom = std::make_shared<CustomEntry>();
  custom->op = op;
  ElementwiseEntry& e = custom->entry;
  e.op = OpId::Map;
  e.name = custom->op.name;
  e.arity = static_cast<int>(op.inputs.size());
  e.inputs = custom->op.inputs;
  e.rule = op.float_result ? DTypeRule::Float : DTypeRule::Same;
  e.domain = Domain::Any;
  e.forward = custom->op.forward;
  for (size_t k = 0; k < custom->op.backward.size(); ++k) e.backward[k] = custom->op.backward[k];
  return apply_entry(e, custom, operands, loc);
}

// Operators cannot take a location argument; the operands' conversions recorded it.
Tensor operator+(const Operand& a, const Operand& b) { return add(a, b, a.loc); }
Tensor operator-(const Operand& a, const Operand& b) { return sub(a, b, a.loc); }
Tensor operator*(const Operand& a, const Operand& b) { return mul(a, b, a.loc); }
Tensor operator/(const Operand& a, const Operand& b) { return div(a, b, a.loc); }
Tensor operator-(const Operand& x) { return neg(x, x.loc); }
Tensor operator<(const Operand& a, const Operand& b) { return lt(a, b, a.loc); }
Tensor operator<=(const Operand& a, const Operand& b) { return le(a, b, a.loc); }
Tensor operator>(const Operand& a, const Operand& b) { return gt(a, b, a.loc); }
Tensor operator>=(const Operand& a, const Operand& b) { return ge(a, b, a.loc); }
Tensor operator&&(const Operand& a, const Operand& b) { return logical_and(a, b, a.loc); }
Tensor operator||(const Operand& a, const Operand& b) { return logical_or(a, b, a.loc); }
Tensor operator!(const Operand& x) { return logical_not(x, x.loc); }

std::string generated_kernel(const Tensor& t, std::string_view target, Loc loc) {
  check(t.defined(), "generated_kernel", loc, "undefined tensor");
  auto which = expr::parse_target(target);
  check(which.has_value(), "generated_kernel", loc, "unknown target '", target, "' (cpp, cuda, glsl, wgsl)");
  auto kernel = fused_map_kernel(t.impl());
  check(kernel.has_value(), "generated_kernel", loc,
        "only a lazy elementwise result has a generated kernel (this one is ",
        t.is_realized() ? "realized" : "a template op", ")");
  return expr::emit_map_kernel(kernel->first, kernel->second, *which);
}

}  // namespace alk
