// ONNX elementwise math and logic, Gemm/MatMul/Einsum, reductions and arg-reductions as alk Tensor ops.
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

std::vector<std::string> einsum_terms(const std::string& lhs) {
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',') terms.emplace_back();
    else terms.back() += ch;
  }
  return terms;
}

// The equation with each '...' written as capital letters it does not use, as many as the dims
// the ellipsis stands for in that operand (aligned at the right across operands, as numpy
// broadcasts them); an implicit output becomes explicit: the ellipsis dims, then the letters
// that appear once, in order.
std::string without_ellipsis(const Ctx& c, const std::string& eq, const std::vector<Tensor>& xs) {
  if (eq.find("...") == std::string::npos) return eq;
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms = einsum_terms(eq.substr(0, arrow));
  c.require(terms.size() == xs.size(), "equation has ", terms.size(), " operands, node has ", xs.size());
  std::string spare;
  for (char ch = 'A'; ch <= 'Z'; ++ch)
    if (eq.find(ch) == std::string::npos) spare += ch;
  std::vector<int64_t> dims(terms.size(), 0);
  int64_t most = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].find("...") == std::string::npos) continue;
    dims[t] = xs[t].dim() - static_cast<int64_t>(terms[t].size() - 3);
    c.require(dims[t] >= 0, "term ", terms[t], " has more letters than operand ", t, " has dims");
    most = std::max(most, dims[t]);
  }
  c.require(most <= static_cast<int64_t>(spare.size()), "the ellipsis stands for more dims than there are spare letters");
  const std::string letters = spare.substr(0, static_cast<size_t>(most));
  std::string out = letters;
  std::map<char, int> count;
  std::string lhs;
  for (size_t t = 0; t < terms.size(); ++t) {
    for (char ch : terms[t])
      if (ch != '.') count[ch]++;
    if (const size_t at = terms[t].find("..."); at != std::string::npos)
      terms[t].replace(at, 3, letters.substr(static_cast<size_t>(most - dims[t])));
    lhs += (t ? "," : "") + terms[t];
  }
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (const size_t at = out.find("..."); at != std::string::npos) out.replace(at, 3, letters);
  } else {
    for (auto& [ch, n] : count)
      if (n == 1) out += ch;
  }
  return lhs + "->" + out;
}

// An operand whose term repeats a letter ("ii"): its diagonal over those dims, the letter kept
// once, last (the flattened pair of dims read at steps of n + 1).
void take_diagonals(const Ctx& c, std::string& term, Tensor& x) {
  for (;;) {
    size_t p = std::string::npos, q = std::string::npos;
    for (size_t i = 0; i < term.size() && q == std::string::npos; ++i)
      if (const size_t j = term.find(term[i], i + 1); j != std::string::npos) p = i, q = j;
    if (q == std::string::npos) return;
    c.require(static_cast<int64_t>(term.size()) == x.dim(), "term ", term, " does not match rank ", x.dim());
    const int64_t n = x.shape()[p];
    if (x.shape()[q] != n) c.fail_with("index ", term[p], " has sizes ", n, " and ", x.shape()[q], " in '", term, "'");
    std::vector<int64_t> perm;
    Shape flat;
    for (size_t k = 0; k < term.size(); ++k)
      if (k != p && k != q) perm.push_back(static_cast<int64_t>(k)), flat.push_back(x.shape()[k]);
    perm.push_back(static_cast<int64_t>(p));
    perm.push_back(static_cast<int64_t>(q));
    flat.push_back(n * n);
    const Tensor on_diagonal = arange(0.0, static_cast<double>(n * n), static_cast<double>(n + 1), DType::I64);
    x = index_select(x.permute(perm).reshape(flat), static_cast<int64_t>(flat.size()) - 1, on_diagonal);
    const char letter = term[p];
    term.erase(q, 1);
    term.erase(p, 1);
    term += letter;
  }
}

Outs op_einsum(Ctx& c) {
  // Two-operand (or one-operand) contractions through permute/reshape/matmul.
  std::string eq_s = c.s("equation", "");
  eq_s.erase(std::remove(eq_s.begin(), eq_s.end(), ' '), eq_s.end());
  std::vector<Tensor> xs;
  for (size_t t = 0; t < c.in.size(); ++t) xs.push_back(c.x(t));
  eq_s = without_ellipsis(c, eq_s, xs);
  if (eq_s.find("->") == std::string::npos) {
    // Implicit output: the letters that appear once, in alphabetical order.
    std::map<char, int> count;
    for (char ch : eq_s)
      if (ch != ',') count[ch]++;
    eq_s += "->";
    for (auto& [ch, n] : count)
      if (n == 1) eq_s += ch;
  }
  const size_t arrow = eq_s.find("->");
  std::vector<std::string> terms = einsum_terms(eq_s.substr(0, arrow));
  const std::string out = eq_s.substr(arrow + 2);
  c.require(terms.size() == c.in.size(), "equation has ", terms.size(), " operands, node has ", c.in.size());
  if (terms.size() > 2) c.unsupported("more than two operands");
  for (size_t t = 0; t < terms.size(); ++t) take_diagonals(c, terms[t], xs[t]);
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = xs[t];
    c.require(static_cast<int64_t>(terms[t].size()) == x.dim(), "term ", terms[t], " does not match rank ", x.dim());
    for (size_t k = 0; k < terms[t].size(); ++k) {
      auto [it, fresh] = size.emplace(terms[t][k], x.shape()[k]);
      c.require(fresh || it->second == x.shape()[k] || x.shape()[k] == 1 || it->second == 1, "index ", terms[t][k], " sizes differ");
      it->second = std::max(it->second, x.shape()[k]);
    }
  }
  // Every operand laid out over all letters (broadcast by size-1 dims), product, then sum.
  std::string letters;
  for (char ch : out) letters += ch;
  for (auto& [ch, n] : size)
    if (out.find(ch) == std::string::npos) letters += ch;
  Tensor prod_t;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = xs[t];
    std::vector<int64_t> perm;
    Shape view;
    std::string present;
    for (char ch : letters) {
      const size_t at = terms[t].find(ch);
      if (at != std::string::npos) perm.push_back(static_cast<int64_t>(at)), present += ch;
    }
    Tensor p = x.permute(perm);
    for (char ch : letters) {
      const size_t at = terms[t].find(ch);
      view.push_back(at == std::string::npos ? 1 : x.shape()[at]);
    }
    p = p.reshape(view);
    prod_t = t == 0 ? p : prod_t * p;
  }
  std::vector<int64_t> sum_axes;
  for (size_t k = out.size(); k < letters.size(); ++k) sum_axes.push_back(static_cast<int64_t>(k));
  Shape full;
  for (char ch : letters) full.push_back(size[ch]);
  c.checked(full);
  Tensor r = broadcast_to(prod_t, full);
  return {sum_axes.empty() ? r.contiguous() : sum(r, sum_axes, false, c.loc)};
}

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
  h["Einsum"] = op_einsum;
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
