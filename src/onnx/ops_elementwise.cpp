// ONNX elementwise math and logic, Gemm/MatMul, reductions and arg-reductions as alk Tensor ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

Outs op_div(Ctx& c) {
  const Tensor &a = c.x(0), &b = c.x(1);
  if (is_integral(a.dtype())) return {cast(trunc_(div(a.to(DType::F64), b.to(DType::F64))), a.dtype())};
  return {div(a, b)};
}

Outs op_mod(Ctx& c) {
  const Tensor &a = c.x(0), &b = c.x(1);
  const bool fmod = c.i("fmod", 0) != 0;
  Tensor a64 = a.to(DType::F64), b64 = b.to(DType::F64);
  Tensor q = div(a64, b64);
  Tensor r = a64 - b64 * (fmod ? trunc_(q) : floor(q));
  return {cast(r, a.dtype())};
}

Outs op_pow(Ctx& c) {
  const Tensor& a = c.x(0);
  Tensor b = c.x(1);
  if (is_integral(a.dtype())) return {cast(round(pow(a.to(DType::F64), b.to(DType::F64))), a.dtype())};
  if (b.dtype() != a.dtype()) b = b.to(a.dtype());
  return {pow(a, b)};
}

Outs op_clip(Ctx& c) {
  Tensor x = c.x(0);
  Tensor out = x;
  if (c.opset < 11) {
    const double lo = c.f("min", -std::numeric_limits<double>::infinity());
    const double hi = c.f("max", std::numeric_limits<double>::infinity());
    if (std::isfinite(lo)) out = maximum(out, lo);
    if (std::isfinite(hi)) out = minimum(out, hi);
    return {out.contiguous()};
  }
  if (c.has(1)) out = maximum(out, c.x(1).to(x.dtype()));
  if (c.has(2)) out = minimum(out, c.x(2).to(x.dtype()));
  return {out.contiguous()};
}

Outs op_cast(Ctx& c) {
  DType dt;
  const int64_t to = c.i("to", 0);
  if (!dtype_from_onnx(static_cast<int>(to), &dt)) c.unsupported("cast to ", onnx_type_name(static_cast<int>(to)));
  const Tensor& x = c.x(0);
  if (is_floating(x.dtype()) && is_integral(dt)) return {cast(trunc_(x), dt)};
  return {cast(x, dt)};
}

Outs op_where(Ctx& c) { return {where(c.x(0).to(DType::Bool), c.x(1), c.x(2), c.loc)}; }

Outs op_isinf(Ctx& c) {
  const Tensor& x = c.x(0);
  // Beyond the largest finite value of the type: an expression every backend keeps (x - x
  // would be folded to 0 by some shader compilers).
  const double big = x.dtype() == DType::F64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  Tensor pos = x > big, neg = x < -big;
  const bool p = c.i("detect_positive", 1) != 0, n = c.i("detect_negative", 1) != 0;
  if (p && n) return {logical_or(pos, neg)};
  if (p) return {pos};
  if (n) return {neg};
  return {zeros(x.shape(), DType::Bool).contiguous()};
}

// ---- matrix ------------------------------------------------------------------------------

Outs op_gemm(Ctx& c) {
  Tensor a = c.x(0), b = c.x(1);
  c.require(a.dim() == 2 && b.dim() == 2, "A and B must be matrices");
  if (c.i("transA", 0)) a = a.t();
  if (c.i("transB", 0)) b = b.t();
  Tensor y = matmul(a, b, c.loc);
  const double alpha = c.f("alpha", 1.0), beta = c.f("beta", 1.0);
  if (alpha != 1.0) y = y * alpha;
  if (c.has(2) && beta != 0.0) y = beta == 1.0 ? y + c.x(2) : y + c.x(2) * beta;
  return {y};
}

Outs op_matmul(Ctx& c) { return {matmul(c.x(0), c.x(1), c.loc)}; }

// ---- reductions --------------------------------------------------------------------------

enum class Red { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

Handler reduce(Red kind) {
  return [kind](Ctx& c) {
    const Tensor& x = c.x(0);
    const bool axes_input = kind == Red::Sum ? c.opset >= 13 : c.opset >= 18;
    std::vector<int64_t> axes = axes_input ? (c.has(1) ? c.values(1) : std::vector<int64_t>{}) : c.ints("axes");
    const bool keep = c.i("keepdims", 1) != 0;
    if (axes.empty() && c.i("noop_with_empty_axes", 0)) return Outs{x};
    for (auto& a : axes) a = c.axis(a, x.dim());
    if (axes.empty())
      for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
    if (x.dim() == 0) return Outs{x};
    for (int64_t a : axes)
      if (x.shape()[static_cast<size_t>(a)] == 0) c.unsupported("reduction over an empty dim");
    switch (kind) {
      case Red::Sum: return Outs{sum(x, axes, keep, c.loc)};
      case Red::Mean: return Outs{mean(x, axes, keep, c.loc)};
      case Red::Max: return Outs{max(x, axes, keep, c.loc)};
      case Red::Min: return Outs{min(x, axes, keep, c.loc)};
      case Red::Prod: return Outs{prod(x, axes, keep, c.loc)};
      case Red::L1: return Outs{sum(abs(x), axes, keep, c.loc)};
      case Red::L2: return Outs{cast(sqrt(sum(x * x, axes, keep, c.loc)), x.dtype())};
      case Red::LogSum: return Outs{log(sum(x, axes, keep, c.loc))};
      case Red::LogSumExp: return Outs{logsumexp(x, axes, keep, c.loc)};
      case Red::SumSquare: return Outs{sum(x * x, axes, keep, c.loc)};
    }
    return Outs{};
  };
}

Handler arg_reduce(bool is_max) {
  return [is_max](Ctx& c) {
    Tensor x = c.x(0);
    const int64_t axis = c.axis(c.i("axis", 0), x.dim());
    const bool keep = c.i("keepdims", 1) != 0;
    const bool last = c.i("select_last_index", 0) != 0;
    if (last) x = reverse(x, axis);
    Tensor r = is_max ? argmax(x, axis, keep, c.loc) : argmin(x, axis, keep, c.loc);
    if (last) r = (x.shape()[static_cast<size_t>(axis)] - 1) - r;
    return Outs{r};
  };
}

// Softmax-like ops: before opset 13 over the flattened dims from axis on (default 1).
Handler softmax_like(int which) {  // 0 softmax, 1 log_softmax, 2 hardmax
  return [which](Ctx& c) {
    const Tensor& x = c.x(0);
    auto f = [&](const Tensor& t, int64_t d) {
      if (which == 0) return softmax(t, d, c.loc);
      if (which == 1) return log_softmax(t, d, c.loc);
      Tensor idx = argmax(t, d, true, c.loc);
      return cast(eq(arange(t.shape()[static_cast<size_t>(d)]).reshape([&] {
                     Shape s(static_cast<size_t>(t.dim()), 1);
                     s[static_cast<size_t>(d)] = -1;
                     return s;
                   }()), idx), t.dtype());
    };
    if (x.dim() == 0) return Outs{f(x.reshape({1}), 0).reshape({})};
    if (c.opset >= 13) return Outs{f(x, c.axis(c.i("axis", -1), x.dim()))};
    const int64_t axis = c.axis(c.i("axis", 1), x.dim());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? outer : inner) *= x.shape()[static_cast<size_t>(d)];
    return Outs{f(x.reshape({outer, inner}), 1).reshape(x.shape())};
  };
}

Outs op_cumsum(Ctx& c) {
  Tensor x = c.x(0);
  const int64_t axis = c.axis(static_cast<int64_t>(c.scalar(1)), x.dim());
  const bool rev = c.i("reverse", 0) != 0, excl = c.i("exclusive", 0) != 0;
  if (rev) x = reverse(x, axis);
  Tensor y = cumsum(x, axis, c.loc);
  if (excl) y = y - x;
  if (rev) y = reverse(y, axis);
  return {y};
}

}  // namespace

void add_elementwise_ops(HandlerTable& h) {
  h["Abs"] = unary(abs);
  h["Neg"] = unary(neg);
  h["Exp"] = unary(exp);
  h["Log"] = unary(log);
  h["Sqrt"] = unary(sqrt);
  h["Reciprocal"] = unary(reciprocal);
  h["Sigmoid"] = unary(sigmoid);
  h["Tanh"] = unary(tanh);
  h["Relu"] = unary(relu);
  h["Erf"] = unary(erf);
  h["Sin"] = unary(sin);
  h["Cos"] = unary(cos);
  h["Floor"] = unary(floor);
  h["Ceil"] = unary(ceil);
  h["Round"] = unary(round);
  h["Sign"] = unary(sign);
  h["Not"] = unary(logical_not);
  h["Softplus"] = unary(softplus);
  h["Softsign"] = unary(softsign);
  h["Tan"] = unary_fn([](const Ctx&, const Tensor& x) { return sin(x) / cos(x); });
  h["Sinh"] = unary_fn([](const Ctx&, const Tensor& x) { return (exp(x) - exp(-x)) * 0.5; });
  h["Cosh"] = unary_fn([](const Ctx&, const Tensor& x) { return (exp(x) + exp(-x)) * 0.5; });
  h["Asinh"] = unary_fn([](const Ctx&, const Tensor& x) { return log(x + sqrt(x * x + 1.0)); });
  h["Acosh"] = unary_fn([](const Ctx&, const Tensor& x) { return log(x + sqrt(x * x - 1.0)); });
  h["Atanh"] = unary_fn([](const Ctx&, const Tensor& x) { return log((1.0 + x) / (1.0 - x)) * 0.5; });
  h["LeakyRelu"] = unary_fn([](const Ctx& c, const Tensor& x) { return where(x < 0, x * c.f("alpha", 0.01), x); });
  h["Elu"] = unary_fn([](const Ctx& c, const Tensor& x) { return where(x < 0, expm1(x) * c.f("alpha", 1.0), x); });
  h["Selu"] = unary_fn([](const Ctx& c, const Tensor& x) {
    const double a = c.f("alpha", 1.67326319217681884765625), g = c.f("gamma", 1.05070102214813232421875);
    return where(x <= 0, expm1(x) * (a * g), x * g);
  });
  h["Celu"] = unary_fn([](const Ctx& c, const Tensor& x) {
    const double a = c.f("alpha", 1.0);
    return maximum(x, 0.0) + minimum(expm1(x / a) * a, 0.0);
  });
  h["HardSigmoid"] = unary_fn([](const Ctx& c, const Tensor& x) {
    return clamp(x * c.f("alpha", 0.2) + c.f("beta", 0.5), 0.0, 1.0);
  });
  h["HardSwish"] = unary_fn([](const Ctx&, const Tensor& x) { return x * clamp(x / 6.0 + 0.5, 0.0, 1.0); });
  h["ThresholdedRelu"] = unary_fn([](const Ctx& c, const Tensor& x) { return where(x > c.f("alpha", 1.0), x, 0.0); });
  h["Mish"] = unary_fn([](const Ctx&, const Tensor& x) { return x * tanh(softplus(x)); });
  h["Gelu"] = unary_fn([](const Ctx& c, const Tensor& x) { return c.s("approximate", "none") == "tanh" ? gelu_tanh(x) : gelu(x); });
  h["Shrink"] = [](Ctx& c) {
    const Tensor& x = c.x(0);
    const double l = c.f("lambd", 0.5), b = c.f("bias", 0.0);
    return Outs{cast(where(x < -l, x + b, where(x > l, x - b, 0.0)), x.dtype())};
  };
  h["IsNaN"] = [](Ctx& c) { return Outs{ne(c.x(0), c.x(0))}; };
  h["IsInf"] = op_isinf;
  h["Add"] = binary(add);
  h["Sub"] = binary(sub);
  h["Mul"] = binary(mul);
  h["Div"] = op_div;
  h["Mod"] = op_mod;
  h["Pow"] = op_pow;
  h["Equal"] = binary(eq);
  h["Less"] = binary(lt);
  h["LessOrEqual"] = binary(le);
  h["Greater"] = binary(gt);
  h["GreaterOrEqual"] = binary(ge);
  h["And"] = binary(logical_and);
  h["Or"] = binary(logical_or);
  h["Xor"] = binary(logical_xor);
  h["Max"] = variadic(maximum, false);
  h["Min"] = variadic(minimum, false);
  h["Sum"] = variadic(add, false);
  h["Mean"] = variadic(add, true);
  h["Where"] = op_where;
  h["Clip"] = op_clip;
  h["Cast"] = op_cast;
  h["Gemm"] = op_gemm;
  h["MatMul"] = op_matmul;
  h["ReduceSum"] = reduce(Red::Sum);
  h["ReduceMean"] = reduce(Red::Mean);
  h["ReduceMax"] = reduce(Red::Max);
  h["ReduceMin"] = reduce(Red::Min);
  h["ReduceProd"] = reduce(Red::Prod);
  h["ReduceL1"] = reduce(Red::L1);
  h["ReduceL2"] = reduce(Red::L2);
  h["ReduceLogSum"] = reduce(Red::LogSum);
  h["ReduceLogSumExp"] = reduce(Red::LogSumExp);
  h["ReduceSumSquare"] = reduce(Red::SumSquare);
  h["ArgMax"] = arg_reduce(true);
  h["ArgMin"] = arg_reduce(false);
  h["Softmax"] = softmax_like(0);
  h["LogSoftmax"] = softmax_like(1);
  h["Hardmax"] = softmax_like(2);
  h["CumSum"] = op_cumsum;
}

}  // namespace alk::onnx
