// ONNX nodes as alk Tensor ops. Each op type has one handler taking the node's inputs (undefined
// tensors for omitted optional ones) and returning its outputs; everything stays lazy except the
// small integer tensors that hold shapes, axes and counts, which are read back when a node needs
// them (so shape inference happens with the actual, possibly symbolic-in-the-file, input shapes).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "onnx/model.h"

namespace alk::onnx {

namespace {

constexpr const char* kOp = "onnx";

struct Ctx {
  const Node& node;
  int64_t opset;
  std::vector<Tensor> in;
  Loc loc;

  std::string label() const { return "node '" + node.name + "' (" + node.op_type + ")"; }
  template <class... P>
  [[noreturn]] void unsupported(const P&... p) const {
    fail(kUnsupported, loc, label(), ": ", p...);
  }
  template <class... P>
  void require(bool ok, const P&... p) const {
    if (!ok) fail(kOp, loc, label(), ": ", p...);
  }
  bool has(size_t k) const { return k < in.size() && in[k].defined(); }
  const Tensor& x(size_t k) const {
    require(has(k), "input ", k, " is required");
    return in[k];
  }
  const Attr* attr(const std::string& name) const {
    auto it = node.attrs.find(name);
    return it == node.attrs.end() ? nullptr : &it->second;
  }
  int64_t i(const std::string& name, int64_t def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Int, "attribute ", name, " is not an int");
    return a->i;
  }
  double f(const std::string& name, double def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Float || a->kind == Attr::Int, "attribute ", name, " is not a float");
    return a->kind == Attr::Float ? a->f : static_cast<double>(a->i);
  }
  std::string s(const std::string& name, const std::string& def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::String, "attribute ", name, " is not a string");
    return a->s;
  }
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def = {}) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Ints, "attribute ", name, " is not a list of ints");
    return a->ints;
  }
  // An integer tensor's values (shapes, axes, repeats), read back to the host.
  std::vector<int64_t> values(size_t k) const {
    const Tensor& t = x(k);
    require(is_integral(t.dtype()), "input ", k, " must be an integer tensor, got ", dtype_name(t.dtype()));
    require(t.numel() <= kMaxShapeValues, "input ", k, " holds ", t.numel(), " values, too many for a shape");
    return t.to_vector<int64_t>(loc);
  }
  double scalar(size_t k) const {
    const Tensor& t = x(k);
    require(t.numel() == 1, "input ", k, " must hold one value, has shape ", to_string(t.shape()));
    return t.to_vector<double>(loc)[0];
  }
  int64_t axis(int64_t a, int64_t rank) const {
    require(rank > 0 && a >= -rank && a < rank, "axis ", a, " is out of range for rank ", rank);
    return a < 0 ? a + rank : a;
  }
  Shape checked(Shape s) const {
    checked_numel(s, label(), loc);
    return s;
  }
};

using Outs = std::vector<Tensor>;
using Handler = std::function<Outs(Ctx&)>;

bool is_float(const Tensor& t) { return is_floating(t.dtype()); }

Tensor reverse(const Tensor& x, int64_t dim) {
  const int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (n <= 1) return x;
  return index_select(x, dim, arange(static_cast<double>(n - 1), -1.0, -1.0, DType::I64));
}

// Integer division truncating toward zero (C, ONNX) of values computed in f64.
Tensor trunc_(const Tensor& v) { return where(v < 0, ceil(v), floor(v)); }

Tensor fix_negative_indices(const Tensor& idx, int64_t n) {
  Tensor i = idx.dtype() == DType::I64 ? idx : idx.to(DType::I64);
  return where(i < 0, i + n, i);
}

// ---- elementwise -------------------------------------------------------------------------

Handler unary(Tensor (*f)(const Operand&, Loc)) {
  return [f](Ctx& c) { return Outs{f(c.x(0), c.loc)}; };
}
Handler binary(Tensor (*f)(const Operand&, const Operand&, Loc)) {
  return [f](Ctx& c) { return Outs{f(c.x(0), c.x(1), c.loc)}; };
}
Handler unary_fn(std::function<Tensor(const Ctx&, const Tensor&)> f) {
  return [f](Ctx& c) {
    c.require(is_float(c.x(0)), "needs a floating-point input, got ", dtype_name(c.x(0).dtype()));
    return Outs{f(c, c.x(0))};
  };
}
Handler variadic(Tensor (*f)(const Operand&, const Operand&, Loc), bool mean) {
  return [f, mean](Ctx& c) {
    c.require(!c.in.empty(), "needs at least one input");
    Tensor acc = c.x(0);
    for (size_t k = 1; k < c.in.size(); ++k) acc = f(acc, c.x(k), c.loc);
    if (mean) acc = acc / static_cast<double>(c.in.size());
    if (c.in.size() == 1) acc = acc.contiguous();
    return Outs{acc};
  };
}

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

// ---- shapes ------------------------------------------------------------------------------

Outs op_reshape(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> shape = c.opset < 5 ? c.ints("shape") : c.values(1);
  const bool allowzero = c.i("allowzero", 0) != 0;
  int64_t infer = -1, known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      c.require(static_cast<int64_t>(k) < x.dim(), "shape ", to_string(shape), " copies a dim ", k, " that x lacks");
      shape[k] = x.shape()[k];
    }
    if (shape[k] == -1) {
      c.require(infer < 0, "shape ", to_string(shape), " has two -1 dims");
      infer = static_cast<int64_t>(k);
    } else {
      c.require(shape[k] >= 0, "negative dim in shape ", to_string(shape));
    }
  }
  for (size_t k = 0; k < shape.size(); ++k)
    if (static_cast<int64_t>(k) != infer) known *= std::max<int64_t>(shape[k], 0), checked_numel({known}, c.label(), c.loc);
  if (infer >= 0) {
    c.require(known != 0 && x.numel() % known == 0, "cannot infer the -1 dim of ", to_string(shape), " for ",
              x.numel(), " elements");
    shape[static_cast<size_t>(infer)] = x.numel() / known;
  }
  return {x.reshape(c.checked(shape), c.loc)};
}

Outs op_transpose(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> perm = c.ints("perm");
  if (perm.empty())
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  c.require(static_cast<int64_t>(perm.size()) == x.dim(), "perm ", to_string(perm), " does not match rank ", x.dim());
  return {x.permute(perm, c.loc)};
}

Outs op_concat(Ctx& c) {
  std::vector<Tensor> xs;
  for (size_t k = 0; k < c.in.size(); ++k) xs.push_back(c.x(k));
  c.require(!xs.empty(), "needs inputs");
  const int64_t axis = c.axis(c.i("axis", c.opset < 4 ? 1 : 0), xs[0].dim());
  std::vector<Tensor> nonempty;
  for (auto& t : xs)
    if (t.numel() > 0 || t.dim() != xs[0].dim()) nonempty.push_back(t);
  if (nonempty.empty()) {
    Shape s = xs[0].shape();
    s[static_cast<size_t>(axis)] = 0;
    return {zeros(s, xs[0].dtype()).contiguous()};
  }
  if (nonempty.size() == 1) return {nonempty[0].contiguous()};
  return {cat(nonempty, axis, c.loc)};
}

Outs op_split(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), x.dim());
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes = c.opset < 13 ? c.ints("split") : (c.has(1) ? c.values(1) : std::vector<int64_t>{});
  const int64_t parts = c.opset >= 18 && c.attr("num_outputs") ? c.i("num_outputs", 1)
                                                                : static_cast<int64_t>(c.node.outputs.size());
  c.require(parts > 0 && parts <= 4096, "bad number of outputs ", parts);
  if (sizes.empty()) {
    const int64_t each = (n + parts - 1) / parts;
    for (int64_t k = 0, left = n; k < parts; ++k, left -= each) sizes.push_back(std::max<int64_t>(0, std::min(each, left)));
  }
  int64_t total = 0;
  for (int64_t s : sizes) c.require(s >= 0, "negative split size"), total += s;
  c.require(total == n, "split sizes ", to_string(sizes), " do not add up to ", n);
  Outs out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(axis, at, at + s, 1, c.loc));
    at += s;
  }
  return out;
}

Outs op_slice(Ctx& c) {
  Tensor x = c.x(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    starts = c.ints("starts");
    ends = c.ints("ends");
    axes = c.ints("axes");
  } else {
    starts = c.values(1);
    ends = c.values(2);
    if (c.has(3)) axes = c.values(3);
    if (c.has(4)) steps = c.values(4);
  }
  c.require(starts.size() == ends.size(), "starts and ends differ in length");
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  c.require(axes.size() == starts.size() && steps.size() == starts.size(), "axes/steps differ in length from starts");
  for (size_t k = 0; k < starts.size(); ++k) {
    const int64_t a = c.axis(axes[k], x.dim());
    const int64_t n = x.shape()[static_cast<size_t>(a)];
    int64_t s = starts[k], e = ends[k], st = steps[k];
    c.require(st != 0, "step 0");
    if (s < 0) s += n;
    if (e < 0) e += n;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      x = x.slice(a, s, std::max(s, e), st, c.loc);
    } else {
      s = std::clamp<int64_t>(s, -1, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      if (s <= e || n == 0) {
        Shape sh = x.shape();
        sh[static_cast<size_t>(a)] = 0;
        x = x.slice(a, 0, 0, 1, c.loc);
        continue;
      }
      // Elements s, s+st, ... > e: the reversed tensor's positions n-1-s, n-1-s-st, ...
      Tensor r = reverse(x, a);
      const int64_t rs = n - 1 - s, re = n - 1 - e;
      x = r.slice(a, rs, re, -st, c.loc);
    }
  }
  return {x};
}

Outs op_gather(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), x.dim());
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  const Tensor& idx = c.x(1);
  c.require(is_integral(idx.dtype()), "indices must be integers");
  Tensor flat = fix_negative_indices(idx, n).reshape({idx.numel()});
  Tensor picked = index_select(x, axis, flat, c.loc);
  Shape out(x.shape().begin(), x.shape().begin() + axis);
  out.insert(out.end(), idx.shape().begin(), idx.shape().end());
  out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
  return {picked.reshape(out, c.loc)};
}

Outs op_gather_elements(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), x.dim());
  return {gather(x, axis, fix_negative_indices(c.x(1), x.shape()[static_cast<size_t>(axis)]), c.loc)};
}

std::vector<int64_t> axes_of(Ctx& c, size_t input) {
  return c.opset < 13 ? c.ints("axes") : (c.has(input) ? c.values(input) : std::vector<int64_t>{});
}

Outs op_squeeze(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = axes_of(c, 1);
  if (axes.empty()) return {x.squeeze(c.loc)};
  for (auto& a : axes) a = c.axis(a, x.dim());
  std::sort(axes.begin(), axes.end());
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) {
      c.require(x.shape()[static_cast<size_t>(d)] == 1, "cannot squeeze dim ", d, " of size ", x.shape()[static_cast<size_t>(d)]);
    } else {
      s.push_back(x.shape()[static_cast<size_t>(d)]);
    }
  }
  return {x.reshape(s, c.loc)};
}

Outs op_unsqueeze(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = axes_of(c, 1);
  const int64_t rank = x.dim() + static_cast<int64_t>(axes.size());
  c.require(rank <= kMaxRank, "rank too large");
  for (auto& a : axes) a = c.axis(a, rank);
  std::sort(axes.begin(), axes.end());
  c.require(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), "repeated axis");
  Shape s;
  size_t src = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) s.push_back(1);
    else s.push_back(x.shape()[src++]);
  }
  return {x.reshape(s, c.loc)};
}

Outs op_flatten(Ctx& c) {
  const Tensor& x = c.x(0);
  int64_t axis = c.i("axis", 1);
  axis = axis < 0 ? axis + x.dim() : axis;
  c.require(axis >= 0 && axis <= x.dim(), "axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? outer : inner) *= x.shape()[static_cast<size_t>(d)];
  return {x.reshape({outer, inner}, c.loc)};
}

Shape broadcast_checked(Ctx& c, const Shape& a, const Shape& b) {
  Shape out = broadcast_shapes(a, b, c.loc);
  return c.checked(out);
}

Outs op_expand(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> shape = c.values(1);
  c.require(static_cast<int>(shape.size()) <= kMaxRank, "rank too large");
  for (int64_t d : shape) c.require(d >= 0 && d <= kMaxElements, "bad dim ", d);
  Shape out = broadcast_checked(c, x.shape(), shape);
  return {broadcast_to(x, out, c.loc)};
}

Outs op_tile(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> reps = c.values(1);
  c.require(static_cast<int64_t>(reps.size()) == x.dim(), "repeats ", to_string(reps), " do not match rank ", x.dim());
  Shape inter, expanded, out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    c.require(reps[static_cast<size_t>(d)] >= 0, "negative repeat");
    inter.push_back(1);
    inter.push_back(x.shape()[static_cast<size_t>(d)]);
    expanded.push_back(reps[static_cast<size_t>(d)]);
    expanded.push_back(x.shape()[static_cast<size_t>(d)]);
    out.push_back(reps[static_cast<size_t>(d)] * x.shape()[static_cast<size_t>(d)]);
  }
  c.checked(expanded);
  return {x.reshape(inter).expand(expanded).reshape(out, c.loc)};
}

Outs op_shape(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t r = x.dim();
  int64_t start = c.i("start", 0), end = c.i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  std::vector<int64_t> dims(x.shape().begin() + start, x.shape().begin() + end);
  return {tensor(dims, {static_cast<int64_t>(dims.size())})};
}

Outs op_size(Ctx& c) { return {tensor(std::vector<int64_t>{c.x(0).numel()}, {})}; }

Tensor attr_tensor_value(const Attr& a) {
  Tensor t = a.t;
  return t.to(default_device());
}

Outs op_constant(Ctx& c) {
  if (const Attr* a = c.attr("value")) {
    c.require(a->kind == Attr::TensorValue, "value is not a tensor");
    return {attr_tensor_value(*a)};
  }
  if (const Attr* a = c.attr("value_float")) return {full({}, a->f, DType::F32).contiguous()};
  if (const Attr* a = c.attr("value_int")) return {tensor(std::vector<int64_t>{a->i}, {})};
  if (const Attr* a = c.attr("value_floats")) {
    std::vector<float> v(a->floats.begin(), a->floats.end());
    return {tensor(v, {static_cast<int64_t>(v.size())})};
  }
  if (const Attr* a = c.attr("value_ints")) return {tensor(a->ints, {static_cast<int64_t>(a->ints.size())})};
  c.unsupported("only value, value_float(s) and value_int(s) constants are supported");
}

Outs op_constant_of_shape(Ctx& c) {
  std::vector<int64_t> shape = c.values(0);
  c.checked(shape);
  double v = 0;
  DType dt = DType::F32;
  if (const Attr* a = c.attr("value")) {
    c.require(a->kind == Attr::TensorValue && a->t.numel() == 1, "value must be a one-element tensor");
    dt = a->t.dtype();
    v = a->t.to_vector<double>()[0];
  }
  return {full(shape, v, dt).contiguous()};
}

Outs op_range(Ctx& c) {
  const double start = c.scalar(0), limit = c.scalar(1), delta = c.scalar(2);
  c.require(delta != 0 && std::isfinite(start) && std::isfinite(limit) && std::isfinite(delta), "bad range");
  const double count = std::max(std::ceil((limit - start) / delta), 0.0);
  c.require(count <= static_cast<double>(kMaxElements), "range of ", count, " elements is too large");
  const DType dt = c.x(0).dtype();
  if (count == 0) return {zeros({0}, dt).contiguous()};
  return {arange(start, start + count * delta - delta * 0.5, delta, dt, c.loc)};
}

Outs op_pad(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> pads;
  double value = 0;
  std::string mode = c.s("mode", "constant");
  std::vector<int64_t> axes;
  if (c.opset < 11) {
    pads = c.ints("pads", c.ints("paddings"));
    value = c.f("value", 0);
  } else {
    pads = c.values(1);
    if (c.has(2)) value = c.scalar(2);
    if (c.has(3)) axes = c.values(3);
  }
  const int64_t r = x.dim();
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  c.require(pads.size() == 2 * axes.size(), "pads ", to_string(pads), " do not match ", axes.size(), " axes");
  std::vector<int64_t> before(static_cast<size_t>(r), 0), after(static_cast<size_t>(r), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = c.axis(axes[k], r);
    before[static_cast<size_t>(a)] = pads[k];
    after[static_cast<size_t>(a)] = pads[k + axes.size()];
  }
  Tensor y = x;
  if (mode == "constant") {
    std::vector<int64_t> torch_pads;
    for (int64_t d = r - 1; d >= 0; --d) {
      torch_pads.push_back(before[static_cast<size_t>(d)]);
      torch_pads.push_back(after[static_cast<size_t>(d)]);
    }
    Shape out = x.shape();
    for (int64_t d = 0; d < r; ++d) out[static_cast<size_t>(d)] += before[static_cast<size_t>(d)] + after[static_cast<size_t>(d)];
    c.checked(out);
    return {pad(x, torch_pads, value, c.loc)};
  }
  c.require(mode == "edge" || mode == "reflect" || mode == "wrap", "unknown mode ", mode);
  for (int64_t d = 0; d < r; ++d) {
    const int64_t b = before[static_cast<size_t>(d)], e = after[static_cast<size_t>(d)];
    const int64_t n = y.shape()[static_cast<size_t>(d)];
    if (b == 0 && e == 0) continue;
    if (b < 0 || e < 0) c.unsupported("negative pads in mode ", mode);
    c.require(n > 0 && (mode != "reflect" || (b < n && e < n)), "cannot pad dim of size ", n, " by ", b, "/", e, " in mode ", mode);
    c.require(b <= kMaxShapeValues && e <= kMaxShapeValues, "pads too large");
    std::vector<int64_t> idx;
    for (int64_t k = -b; k < n + e; ++k) {
      int64_t j = k;
      if (mode == "edge") j = std::clamp<int64_t>(k, 0, n - 1);
      else if (mode == "wrap") j = ((k % n) + n) % n;
      else {
        const int64_t period = 2 * (n - 1);
        j = period == 0 ? 0 : ((k % period) + period) % period;
        if (j >= n) j = period - j;
      }
      idx.push_back(j);
    }
    y = index_select(y, d, tensor(idx, {static_cast<int64_t>(idx.size())}), c.loc);
  }
  return {y};
}

Outs op_trilu(Ctx& c) {
  const int64_t k = c.has(1) ? static_cast<int64_t>(c.scalar(1)) : 0;
  return {c.i("upper", 1) ? triu(c.x(0), k, c.loc) : tril(c.x(0), k, c.loc)};
}

Outs op_onehot(Ctx& c) {
  const Tensor& idx = c.x(0);
  const int64_t depth = static_cast<int64_t>(c.scalar(1));
  c.require(depth > 0 && depth <= kMaxShapeValues, "bad depth ", depth);
  const Tensor& values = c.x(2);
  c.require(values.numel() == 2, "values must hold [off, on]");
  Tensor i = idx.to(DType::I64);
  i = where(i < 0, i + depth, i);
  // Out-of-range indices give an all-off row (ONNX); one_hot would reject them.
  Tensor valid = logical_and(i >= 0, i < depth);
  Tensor oh = eq(i.unsqueeze(-1), arange(depth));
  oh = logical_and(oh, valid.unsqueeze(-1));
  const int64_t rank = idx.dim() + 1;
  const int64_t axis = c.axis(c.i("axis", -1), rank);
  if (axis != rank - 1) {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank - 1; ++d) perm.push_back(d);
    perm.insert(perm.begin() + axis, rank - 1);
    oh = oh.permute(perm);
  }
  Tensor off = values.slice(0, 0, 1).reshape({}), on = values.slice(0, 1, 2).reshape({});
  return {where(oh, on, off, c.loc)};
}

Outs op_eyelike(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() == 2, "input must be 2-D");
  DType dt = x.dtype();
  if (c.attr("dtype") && !dtype_from_onnx(static_cast<int>(c.i("dtype", 1)), &dt)) c.unsupported("dtype");
  const int64_t k = c.i("k", 0);
  Tensor hit = eq(arange(x.shape()[1]).reshape({1, -1}) - arange(x.shape()[0]).reshape({-1, 1}), k);
  return {cast(hit, dt)};
}

Outs op_depth_to_space(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() == 4, "input must be 4-D");
  const int64_t b = c.i("blocksize", 0);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  c.require(b > 0 && C % (b * b) == 0, "bad blocksize");
  if (c.s("mode", "DCR") == "DCR")
    return {x.reshape({N, b, b, C / (b * b), H, W}).permute({0, 3, 4, 1, 5, 2}).reshape({N, C / (b * b), H * b, W * b})};
  return {x.reshape({N, C / (b * b), b, b, H, W}).permute({0, 1, 4, 2, 5, 3}).reshape({N, C / (b * b), H * b, W * b})};
}

Outs op_space_to_depth(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() == 4, "input must be 4-D");
  const int64_t b = c.i("blocksize", 0);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  c.require(b > 0 && H % b == 0 && W % b == 0, "bad blocksize");
  return {x.reshape({N, C, H / b, b, W / b, b}).permute({0, 3, 5, 1, 2, 4}).reshape({N, C * b * b, H / b, W / b})};
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

// ---- normalization -----------------------------------------------------------------------

// [1, C, 1, ...] for x [N, C, ...] (callers check the rank is at least 2).
Shape channel_shape(const Tensor& x) {
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[1] = -1;
  return s;
}

Outs op_batchnorm(Ctx& c) {
  const Tensor& x = c.x(0);
  if (c.i("training_mode", 0) || c.node.outputs.size() > 1) c.unsupported("training mode");
  c.require(x.dim() >= 2, "input must be at least 2-D");
  const double eps = c.f("epsilon", 1e-5);
  Shape cs = channel_shape(x);
  Tensor scale = c.x(1).reshape(cs), bias = c.x(2).reshape(cs), m = c.x(3).reshape(cs), v = c.x(4).reshape(cs);
  return {(x - m) * (scale * rsqrt(v + eps)) + bias};
}

Outs op_instancenorm(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() >= 3, "input must be at least 3-D");
  const double eps = c.f("epsilon", 1e-5);
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
  Tensor m = mean(x, axes, true);
  Tensor d = x - m;
  Tensor v = mean(d * d, axes, true);
  Shape cs = channel_shape(x);
  return {d * rsqrt(v + eps) * c.x(1).reshape(cs) + c.x(2).reshape(cs)};
}

Outs op_layernorm(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", -1), x.dim());
  const double eps = c.f("epsilon", 1e-5);
  Shape norm(x.shape().begin() + axis, x.shape().end());
  const bool stats = (c.node.outputs.size() > 1 && !c.node.outputs[1].empty()) ||
                     (c.node.outputs.size() > 2 && !c.node.outputs[2].empty());
  const Tensor& scale = c.x(1);
  if (!stats && is_float(x) && x.dtype() == DType::F32 && scale.shape() == norm && (!c.has(2) || c.x(2).shape() == norm))
    return {layer_norm(x, norm, scale, c.has(2) ? c.x(2) : Tensor(), eps, c.loc)};
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < x.dim(); ++d) axes.push_back(d);
  Tensor xf = x.dtype() == DType::F64 ? x : x.to(DType::F32);
  Tensor m = mean(xf, axes, true);
  Tensor d = xf - m;
  Tensor inv = rsqrt(mean(d * d, axes, true) + eps);
  Tensor y = cast(d * inv, x.dtype()) * scale;
  if (c.has(2)) y = y + c.x(2);
  return {y, m, inv};
}

Outs op_mvn(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes = c.ints("axes", {0, 2, 3});
  for (auto& a : axes) a = c.axis(a, x.dim());
  Tensor m = mean(x, axes, true);
  Tensor d = x - m;
  return {d / sqrt(mean(d * d, axes, true) + 1e-9)};
}

// ---- convolution and pooling -------------------------------------------------------------

struct Window {
  int64_t spatial = 0;  // 1 or 2
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

// Kernel, strides, dilations and pads of a Conv/Pool node over x's spatial dims (auto_pad resolved).
Window window_of(Ctx& c, const Tensor& x, std::vector<int64_t> kernel) {
  Window w;
  w.spatial = x.dim() - 2;
  if (w.spatial < 1 || w.spatial > 2) c.unsupported(w.spatial, "-D spatial input (only 1-D and 2-D)");
  c.require(static_cast<int64_t>(kernel.size()) == w.spatial, "kernel_shape ", to_string(kernel), " does not match input rank");
  w.kernel = kernel;
  const size_t s = static_cast<size_t>(w.spatial);
  w.strides = c.ints("strides", std::vector<int64_t>(s, 1));
  w.dilations = c.ints("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = c.ints("pads", std::vector<int64_t>(2 * s, 0));
  c.require(w.strides.size() == s && w.dilations.size() == s && pads.size() == 2 * s, "strides/dilations/pads of the wrong length");
  for (size_t k = 0; k < s; ++k) {
    c.require(w.kernel[k] > 0 && w.kernel[k] <= 4096 && w.strides[k] > 0 && w.strides[k] <= 4096 && w.dilations[k] > 0 &&
                  w.dilations[k] <= 4096 && pads[k] >= 0 && pads[k + s] >= 0 && pads[k] <= 4096 && pads[k + s] <= 4096,
              "kernel/strides/dilations/pads out of range");
  }
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(s));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(s), pads.end());
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t k = 0; k < s; ++k) {
      const int64_t in = x.shape()[2 + k];
      const int64_t out = (in + w.strides[k] - 1) / w.strides[k];
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[k] + (w.kernel[k] - 1) * w.dilations[k] + 1 - in);
      w.pad_begin[k] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[k] = total - w.pad_begin[k];
    }
  } else if (auto_pad == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  } else {
    c.require(auto_pad == "NOTSET", "unknown auto_pad ", auto_pad);
  }
  return w;
}

// Pads the spatial dims (asymmetric, any value) and lifts 1-D to 2-D: [N, C, H, W].
Tensor padded_2d(const Tensor& x, const Window& w, const std::vector<int64_t>& extra_end, double value) {
  Tensor y = w.spatial == 1 ? x.unsqueeze(2) : x;
  std::vector<int64_t> pads;  // torch order: last dim first
  if (w.spatial == 1) pads = {w.pad_begin[0], w.pad_end[0] + extra_end[0]};
  else pads = {w.pad_begin[1], w.pad_end[1] + extra_end[1], w.pad_begin[0], w.pad_end[0] + extra_end[0]};
  bool any = false;
  for (int64_t p : pads) any = any || p != 0;
  return any ? pad(y, pads, value) : y;
}

Conv2dGeometry geometry_2d(const Window& w);

// x as [N, C, H, W] with the geometry unfold2d takes: symmetric pads stay in the geometry (the
// unfold reads pad_value there, no padded copy is made); other pads are applied first.
std::pair<Tensor, Conv2dGeometry> unfold_input(const Tensor& x, const Window& w, const std::vector<int64_t>& extra_end,
                                               double value) {
  Conv2dGeometry g = geometry_2d(w);
  bool symmetric = true;
  for (size_t k = 0; k < w.pad_begin.size(); ++k)
    symmetric = symmetric && w.pad_begin[k] == w.pad_end[k] && extra_end[k] == 0;
  if (!symmetric) return {padded_2d(x, w, extra_end, value), g};
  if (w.spatial == 1) {
    g.pad_w = w.pad_begin[0];
  } else {
    g.pad_h = w.pad_begin[0];
    g.pad_w = w.pad_begin[1];
  }
  return {w.spatial == 1 ? x.unsqueeze(2) : x, g};
}

Conv2dGeometry geometry_2d(const Window& w) {
  Conv2dGeometry g;
  if (w.spatial == 1) {
    g.kw = w.kernel[0];
    g.stride_w = w.strides[0];
    g.dilation_w = w.dilations[0];
  } else {
    g.kh = w.kernel[0];
    g.kw = w.kernel[1];
    g.stride_h = w.strides[0];
    g.stride_w = w.strides[1];
    g.dilation_h = w.dilations[0];
    g.dilation_w = w.dilations[1];
  }
  return g;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d) { return (in - ((k - 1) * d + 1)) / s + 1; }

Tensor restore_rank(const Tensor& y, const Window& w) { return w.spatial == 1 ? y.squeeze(2) : y; }

Outs op_conv(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  c.require(x.dim() == wt.dim() && x.dim() >= 3, "X and W ranks differ or are below 3");
  std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  Window w = window_of(c, x, c.ints("kernel_shape", kernel));
  c.require(w.kernel == kernel, "kernel_shape does not match W");
  const int64_t groups = c.i("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1], M = wt.shape()[0];
  c.require(groups > 0 && C % groups == 0 && M % groups == 0 && wt.shape()[1] == C / groups,
            "channels ", C, " and W ", to_string(wt.shape()), " do not fit group ", groups);
  Tensor bias = c.has(2) ? c.x(2) : Tensor();
  bool pointwise = true;  // 1x1, stride 1, no pads: a matmul over the channels, no unfold
  for (size_t k = 0; k < static_cast<size_t>(w.spatial); ++k)
    pointwise = pointwise && w.kernel[k] == 1 && w.strides[k] == 1 && w.pad_begin[k] == 0 && w.pad_end[k] == 0;
  if (pointwise) {
    const int64_t L = x.numel() / std::max<int64_t>(N * C, 1);
    Tensor y = matmul(wt.reshape({groups, M / groups, C / groups}), x.reshape({N, groups, C / groups, L}), c.loc);
    Shape out = x.shape();
    out[1] = M;
    y = y.reshape(out);
    if (bias.defined()) y = y + bias.reshape(channel_shape(y));
    return {y};
  }
  const bool uniform = w.spatial == 2 && w.strides[0] == w.strides[1] && w.dilations[0] == w.dilations[1] &&
                       w.pad_begin[0] == w.pad_end[0] && w.pad_begin[1] == w.pad_end[1] && w.pad_begin[0] == w.pad_begin[1];
  if (uniform) return {conv2d(x, wt, bias, w.strides[0], w.pad_begin[0], w.dilations[0], groups, c.loc)};
  auto [xp, g] = unfold_input(x, w, std::vector<int64_t>(static_cast<size_t>(w.spatial), 0), 0.0);
  Tensor w4 = w.spatial == 1 ? wt.unsqueeze(2) : wt;
  const int64_t H = xp.shape()[2] + 2 * g.pad_h, W = xp.shape()[3] + 2 * g.pad_w;
  const int64_t oh = out_size(H, g.kh, g.stride_h, g.dilation_h), ow = out_size(W, g.kw, g.stride_w, g.dilation_w);
  c.require(oh > 0 && ow > 0, "the kernel does not fit the padded input");
  Tensor cols = unfold2d(xp, g, 0.0, c.loc);  // [N, C*kh*kw, L]
  const int64_t K = (C / groups) * g.kh * g.kw;
  Tensor y = matmul(w4.reshape({groups, M / groups, K}), cols.reshape({N, groups, K, oh * ow}), c.loc);
  y = y.reshape({N, M, oh, ow});
  if (bias.defined()) y = y + bias.reshape({1, M, 1, 1});
  return {restore_rank(y, w)};
}

Outs op_conv_transpose(Ctx& c) {
  const Tensor& x = c.x(0);
  const Tensor& wt = c.x(1);
  c.require(x.dim() == wt.dim() && x.dim() >= 3, "X and W ranks differ or are below 3");
  std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  const int64_t groups = c.i("group", 1);
  const int64_t N = x.shape()[0], C = x.shape()[1];
  c.require(groups > 0 && C % groups == 0 && wt.shape()[0] == C, "W ", to_string(wt.shape()), " does not fit ", C, " channels");
  const int64_t M = wt.shape()[1] * groups;
  // The pads here crop the full output, so window_of's auto_pad (for a forward conv) is not used.
  const std::string auto_pad = c.s("auto_pad", "NOTSET");
  Window w;
  {
    Node plain = c.node;
    plain.attrs.erase("auto_pad");
    Ctx pc{plain, c.opset, c.in, c.loc};
    w = window_of(pc, x, c.ints("kernel_shape", kernel));
  }
  const size_t s = static_cast<size_t>(w.spatial);
  std::vector<int64_t> out_pad = c.ints("output_padding", std::vector<int64_t>(s, 0));
  std::vector<int64_t> out_shape = c.ints("output_shape");
  c.require(out_pad.size() == s, "output_padding of the wrong length");
  std::vector<int64_t> full(s);
  for (size_t k = 0; k < s; ++k) {
    c.require(out_pad[k] >= 0 && out_pad[k] < std::max(w.strides[k], w.dilations[k]), "output_padding out of range");
    full[k] = (x.shape()[2 + k] - 1) * w.strides[k] + (w.kernel[k] - 1) * w.dilations[k] + 1 + out_pad[k];
  }
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (out_shape.size() == s + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.empty())
      for (size_t k = 0; k < s; ++k) out_shape.push_back(x.shape()[2 + k] * w.strides[k]);
    c.require(out_shape.size() == s, "output_shape of the wrong length");
    for (size_t k = 0; k < s; ++k) {
      const int64_t total = full[k] - out_shape[k];
      c.require(total > -kMaxShapeValues, "output_shape too large");
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor, as the spec's Python
      if (auto_pad == "SAME_UPPER") {
        w.pad_begin[k] = half;
        w.pad_end[k] = total - half;
      } else {
        w.pad_begin[k] = total - half;
        w.pad_end[k] = half;
      }
    }
  }
  Conv2dGeometry g = geometry_2d(w);
  const int64_t H = w.spatial == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
  const int64_t fh = w.spatial == 1 ? 1 : full[0], fw = full[s - 1];
  c.checked({N, M, fh, fw});
  const int64_t K = (M / groups) * g.kh * g.kw;
  Tensor w3 = wt.reshape({groups, C / groups, K}).transpose(1, 2);                 // [g, K, C/g]
  Tensor cols = matmul(w3, x.reshape({N, groups, C / groups, H * W}), c.loc);     // [N, g, K, L]
  Tensor y = fold2d(cols.reshape({N, M * g.kh * g.kw, H * W}), fh, fw, g, c.loc);  // [N, M, fh, fw]
  // Positive pads crop the full output, negative ones extend it with zeros.
  auto crop = [&](Tensor t, int64_t dim, int64_t b, int64_t e) {
    const int64_t n = t.shape()[static_cast<size_t>(dim)];
    t = t.slice(dim, std::max<int64_t>(b, 0), n - std::max<int64_t>(e, 0));
    if (b < 0 || e < 0) {
      std::vector<int64_t> p(2 * static_cast<size_t>(4 - dim), 0);
      p[p.size() - 2] = std::max<int64_t>(-b, 0);
      p[p.size() - 1] = std::max<int64_t>(-e, 0);
      t = pad(t, p);
    }
    return t;
  };
  if (w.spatial == 1) {
    y = crop(y, 3, w.pad_begin[0], w.pad_end[0]);
  } else {
    y = crop(crop(y, 2, w.pad_begin[0], w.pad_end[0]), 3, w.pad_begin[1], w.pad_end[1]);
  }
  if (c.has(2)) y = y + c.x(2).reshape({1, M, 1, 1});
  return {restore_rank(y, w)};
}

Handler pool(bool is_max) {
  return [is_max](Ctx& c) {
    const Tensor& x = c.x(0);
    const bool want_indices = c.node.outputs.size() > 1 && !c.node.outputs[1].empty();
    const bool column_major = c.i("storage_order", 0) != 0;
    c.require(is_float(x) || is_max, "average pooling needs a floating-point input");
    Window w = window_of(c, x, c.ints("kernel_shape"));
    const size_t s = static_cast<size_t>(w.spatial);
    const bool ceil_mode = c.i("ceil_mode", 0) != 0;
    std::vector<int64_t> extra(s, 0), out(s);
    for (size_t k = 0; k < s; ++k) {
      const int64_t in = x.shape()[2 + k] + w.pad_begin[k] + w.pad_end[k];
      const int64_t eff = (w.kernel[k] - 1) * w.dilations[k] + 1;
      c.require(in >= eff, "the kernel does not fit the padded input");
      int64_t o = (in - eff) / w.strides[k] + 1;
      if (ceil_mode) {
        o = (in - eff + w.strides[k] - 1) / w.strides[k] + 1;
        if ((o - 1) * w.strides[k] >= x.shape()[2 + k] + w.pad_begin[k]) --o;
      }
      out[k] = o;
      extra[k] = std::max<int64_t>(0, (o - 1) * w.strides[k] + eff - in);
    }
    double lowest = -std::numeric_limits<double>::infinity();
    if (x.dtype() == DType::U8 || x.dtype() == DType::Bool) lowest = 0;
    else if (x.dtype() == DType::I32) lowest = std::numeric_limits<int32_t>::min();
    else if (x.dtype() == DType::I64) lowest = static_cast<double>(std::numeric_limits<int64_t>::min());
    auto [xp, g] = unfold_input(x, w, extra, is_max ? lowest : 0.0);
    const int64_t N = x.shape()[0], C = x.shape()[1];
    const int64_t oh = s == 1 ? 1 : out[0], ow = out[s - 1];
    Tensor cols = unfold2d(xp, g, is_max ? lowest : 0.0, c.loc).reshape({N, C, g.kh * g.kw, oh * ow});
    Tensor y;
    if (is_max) {
      y = max(cols, {2});
    } else {
      // Each tap's weight 1/count (0 for taps outside what counts), made on the host, so the
      // average is one weighted sum (a reduction with a prologue, which every backend runs).
      const bool include_pad = c.i("count_include_pad", 0) != 0;
      const int64_t H = s == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
      const int64_t ph = s == 1 ? 0 : w.pad_begin[0], pw = w.pad_begin[s - 1];
      const int64_t ph_end = s == 1 ? 0 : w.pad_end[0], pw_end = w.pad_end[s - 1];
      const int64_t taps = g.kh * g.kw, L = oh * ow;
      std::vector<double> weights(static_cast<size_t>(taps * L), 0.0);
      for (int64_t o = 0; o < L; ++o) {
        const int64_t oy = o / ow, ox = o % ow;
        int64_t count = 0;
        for (int pass = 0; pass < 2; ++pass) {
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t iy = oy * g.stride_h + ky * g.dilation_h - ph, ix = ox * g.stride_w + kx * g.dilation_w - pw;
              const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
              const bool in_pads = iy >= -ph && iy < H + ph_end && ix >= -pw && ix < W + pw_end;
              if (!(include_pad ? in_pads : inside)) continue;
              if (pass == 0) ++count;
              else weights[static_cast<size_t>((ky * g.kw + kx) * L + o)] = 1.0 / static_cast<double>(count);
            }
        }
      }
      Tensor wt = tensor(weights, {1, 1, taps, L}).to(x.dtype());
      y = sum(cols * wt, {2});
    }
    y = y.reshape({N, C, oh, ow});
    if (!want_indices) return Outs{restore_rank(y, w)};
    // Indices: the winning tap of each window, mapped through a host table (tap, position) ->
    // offset in the unpadded image, plus the (n, c) plane's offset.
    const int64_t H = s == 1 ? 1 : x.shape()[2], W = x.shape()[x.dim() - 1];
    const int64_t ph = s == 1 ? 0 : w.pad_begin[0], pw = w.pad_begin[s - 1];
    const int64_t taps = g.kh * g.kw, L = oh * ow;
    std::vector<int64_t> table(static_cast<size_t>(taps * L));
    for (int64_t ky = 0; ky < g.kh; ++ky)
      for (int64_t kx = 0; kx < g.kw; ++kx)
        for (int64_t o = 0; o < L; ++o) {
          const int64_t iy = (o / ow) * g.stride_h + ky * g.dilation_h - ph, ix = (o % ow) * g.stride_w + kx * g.dilation_w - pw;
          const int64_t cy = std::clamp<int64_t>(iy, 0, H - 1), cx = std::clamp<int64_t>(ix, 0, W - 1);
          table[static_cast<size_t>((ky * g.kw + kx) * L + o)] = column_major ? cx * H + cy : cy * W + cx;
        }
    Tensor winner = argmax(cols, 2, true);  // [N, C, 1, L]
    Tensor at = gather(tensor(table, {1, 1, taps, L}).expand({N, C, taps, L}).contiguous(), 2, winner).reshape({N, C, oh, ow});
    Tensor plane = (arange(N * C) * (H * W)).reshape({N, C, 1, 1});
    Tensor idx = at + plane;
    return Outs{restore_rank(y, w), restore_rank(idx, w)};
  };
}

Handler global_pool(bool is_max) {
  return [is_max](Ctx& c) {
    const Tensor& x = c.x(0);
    c.require(x.dim() >= 3, "input must be at least 3-D");
    std::vector<int64_t> axes;
    for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
    return Outs{is_max ? max(x, axes, true, c.loc) : mean(x, axes, true, c.loc)};
  };
}

Outs op_dropout(Ctx& c) {
  const bool training = c.opset >= 12 ? (c.has(2) && c.scalar(2) != 0) : c.i("is_test", 1) == 0 && c.opset < 7;
  if (training) c.unsupported("training mode (random masks)");
  Outs out{c.x(0)};
  if (c.node.outputs.size() > 1) out.push_back(ones(c.x(0).shape(), DType::Bool).contiguous());
  return out;
}

Outs op_identity(Ctx& c) { return {c.x(0)}; }

Outs op_prelu(Ctx& c) {
  const Tensor& x = c.x(0);
  Tensor slope = c.x(1);
  // Opset < 7 slopes of shape [C] broadcast over dim 1 (unidirectional since 7 too when 1-D of size C).
  if (slope.dim() == 1 && x.dim() > 2 && slope.shape()[0] == x.shape()[1] && slope.shape()[0] != x.shape().back()) {
    Shape cs(static_cast<size_t>(x.dim() - 1), 1);
    cs[0] = -1;
    slope = slope.reshape(cs);
  }
  return {where(x < 0, x * slope, x)};
}

Outs op_castlike(Ctx& c) { return {cast(c.x(0), c.x(1).dtype())}; }

Outs op_einsum(Ctx& c) {
  // Two-operand (or one-operand) contractions through permute/reshape/matmul.
  std::string eq_s = c.s("equation", "");
  eq_s.erase(std::remove(eq_s.begin(), eq_s.end(), ' '), eq_s.end());
  if (eq_s.find("...") != std::string::npos) c.unsupported("equation '", eq_s, "' (ellipsis)");
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
  std::vector<std::string> terms;
  {
    std::string lhs = eq_s.substr(0, arrow), cur;
    for (char ch : lhs) {
      if (ch == ',') terms.push_back(cur), cur.clear();
      else cur += ch;
    }
    terms.push_back(cur);
  }
  const std::string out = eq_s.substr(arrow + 2);
  c.require(terms.size() == c.in.size(), "equation has ", terms.size(), " operands, node has ", c.in.size());
  if (terms.size() > 2) c.unsupported("more than two operands");
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Tensor& x = c.x(t);
    c.require(static_cast<int64_t>(terms[t].size()) == x.dim(), "term ", terms[t], " does not match rank ", x.dim());
    std::set<char> seen;
    for (size_t k = 0; k < terms[t].size(); ++k) {
      if (!seen.insert(terms[t][k]).second) c.unsupported("repeated index (diagonal) in '", terms[t], "'");
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
    const Tensor& x = c.x(t);
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

Outs op_topk(Ctx& c) {
  // Repeated argmax/argmin: fine for the small k of classifiers' top-5.
  const Tensor& x = c.x(0);
  const int64_t k = static_cast<int64_t>(c.scalar(1));
  const int64_t axis = c.axis(c.i("axis", -1), x.dim());
  const bool largest = c.i("largest", 1) != 0;
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  c.require(k >= 0 && k <= n, "k ", k, " out of range for ", n);
  if (k > 64) c.unsupported("k > 64");
  c.require(is_float(x), "TopK needs a floating-point input");
  Tensor work = x.to(DType::F64);
  std::vector<Tensor> values, indices;
  Shape pos_shape(static_cast<size_t>(x.dim()), 1);
  pos_shape[static_cast<size_t>(axis)] = n;
  Tensor pos = arange(n).reshape(pos_shape);
  const double fill = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < k; ++j) {
    Tensor idx = largest ? argmax(work, axis, true) : argmin(work, axis, true);
    indices.push_back(idx);
    values.push_back(gather(x, axis, idx));
    work = where(eq(pos, idx), fill, work);
    work.realize();
  }
  if (k == 0) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = 0;
    return {zeros(s, x.dtype()).contiguous(), zeros(s, DType::I64).contiguous()};
  }
  return {cat(values, axis), cat(indices, axis)};
}

// ---- losses ------------------------------------------------------------------------------

// NegativeLogLikelihoodLoss over log-probabilities [N, C, d...] and targets [N, d...].
Tensor nll(Ctx& c, const Tensor& logp, const Tensor& target, const Tensor& weight) {
  c.require(logp.dim() >= 2 && target.dim() == logp.dim() - 1, "input ", to_string(logp.shape()), " and target ",
            to_string(target.shape()), " do not fit");
  Tensor t = target.to(DType::I64);
  Tensor valid = ones(t.shape(), DType::Bool);
  if (c.attr("ignore_index")) valid = ne(t, c.i("ignore_index", 0));
  Tensor safe = where(valid, t, 0);
  Tensor picked = gather(logp, 1, safe.unsqueeze(1), c.loc).squeeze(1);
  Tensor w = weight.defined() ? index_select(weight, 0, safe.reshape({safe.numel()})).reshape(t.shape())
                              : ones(t.shape(), logp.dtype());
  w = where(valid, w, 0.0);
  Tensor loss = -(picked * w);
  const std::string reduction = c.s("reduction", "mean");
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  c.require(reduction == "mean", "unknown reduction ", reduction);
  return sum(loss) / sum(w);
}

Outs op_nll(Ctx& c) { return {nll(c, c.x(0), c.x(1), c.has(2) ? c.x(2) : Tensor())}; }

Outs op_softmax_ce(Ctx& c) {
  Tensor logp = log_softmax(c.x(0), 1, c.loc);
  Tensor loss = nll(c, logp, c.x(1), c.has(2) ? c.x(2) : Tensor());
  return {loss, logp};
}

// ---- Resize ------------------------------------------------------------------------------

// One axis of a separable resize: output position o reads taps (index, weight) of the input.
Tensor resample_axis(const Tensor& x, int64_t axis, const std::vector<std::vector<std::pair<int64_t, double>>>& taps,
                     const std::vector<bool>& outside, double extrapolation) {
  const int64_t out = static_cast<int64_t>(taps.size());
  size_t ntaps = 0;
  for (const auto& t : taps) ntaps = std::max(ntaps, t.size());
  Shape wshape(static_cast<size_t>(x.dim()), 1);
  wshape[static_cast<size_t>(axis)] = out;
  Tensor y;
  const DType compute = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  for (size_t k = 0; k < ntaps; ++k) {
    std::vector<int64_t> idx(static_cast<size_t>(out));
    std::vector<double> w(static_cast<size_t>(out));
    bool all_one = true;
    for (int64_t o = 0; o < out; ++o) {
      const auto& t = taps[static_cast<size_t>(o)];
      idx[static_cast<size_t>(o)] = k < t.size() ? t[k].first : 0;
      w[static_cast<size_t>(o)] = k < t.size() ? t[k].second : 0.0;
      all_one = all_one && w[static_cast<size_t>(o)] == 1.0;
    }
    Tensor picked = index_select(x, axis, tensor(idx, {out}));
    Tensor term = all_one && ntaps == 1 ? picked : picked.to(compute) * tensor(w, wshape).to(compute);
    y = k == 0 ? term : y + term;
  }
  bool any_outside = false;
  for (bool b : outside) any_outside = any_outside || b;
  if (any_outside) {
    std::vector<uint8_t> mask(outside.begin(), outside.end());
    y = where(tensor(mask, wshape, DType::Bool), extrapolation, y);
  }
  return y.dtype() == x.dtype() ? y : cast(is_integral(x.dtype()) ? round(y) : y, x.dtype());
}

Outs op_resize(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t r = x.dim();
  if (c.i("antialias", 0)) c.unsupported("antialias");
  if (c.s("keep_aspect_ratio_policy", "stretch") != "stretch") c.unsupported("keep_aspect_ratio_policy");
  const std::string mode = c.s("mode", "nearest");
  const std::string ctm = c.opset < 11 ? "asymmetric" : c.s("coordinate_transformation_mode", "half_pixel");
  const std::string nearest_mode = c.s("nearest_mode", "round_prefer_floor");
  const double a = c.f("cubic_coeff_a", -0.75), extrapolation = c.f("extrapolation_value", 0.0);
  const bool exclude_outside = c.i("exclude_outside", 0) != 0;
  std::vector<int64_t> axes = c.ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  for (auto& ax : axes) ax = c.axis(ax, r);
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  auto floats = [&](size_t k) {
    const Tensor& t = c.x(k);
    c.require(t.numel() <= kMaxShapeValues, "input ", k, " too large");
    return t.to_vector<double>(c.loc);
  };
  if (c.opset < 11) {
    scales = floats(1);
  } else {
    if (c.has(1)) roi = floats(1);
    if (c.has(2) && c.x(2).numel() > 0) scales = floats(2);
    if (c.has(3) && c.x(3).numel() > 0) sizes = c.values(3);
  }
  c.require(!scales.empty() || !sizes.empty(), "needs scales or sizes");
  const size_t n = axes.size();
  c.require(scales.empty() || scales.size() == n, "scales ", scales.size(), " for ", n, " axes");
  c.require(sizes.empty() || sizes.size() == n, "sizes ", sizes.size(), " for ", n, " axes");
  c.require(roi.empty() || roi.size() == 2 * n, "roi of the wrong length");
  Tensor y = x;
  Shape out_shape = x.shape();
  for (size_t k = 0; k < n; ++k) {
    const int64_t ax = axes[k];
    const int64_t in = x.shape()[static_cast<size_t>(ax)];
    double scale;
    int64_t out;
    if (!sizes.empty()) {
      out = sizes[k];
      c.require(in > 0, "cannot resize an empty dim");
      scale = static_cast<double>(out) / static_cast<double>(in);
    } else {
      scale = scales[k];
      c.require(scale > 0 && std::isfinite(scale), "bad scale ", scale);
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * scale));
    }
    c.require(out >= 0 && out <= kMaxShapeValues, "output size ", out, " out of range");
    out_shape[static_cast<size_t>(ax)] = out;
    c.checked(out_shape);
    if (out == in && scale == 1.0 && ctm != "tf_crop_and_resize") continue;
    std::vector<std::vector<std::pair<int64_t, double>>> taps(static_cast<size_t>(out));
    std::vector<bool> outside(static_cast<size_t>(out), false);
    for (int64_t o = 0; o < out; ++o) {
      double xo;
      // The spec's transforms use the unrounded output length in * scale when scales are given.
      const double od = static_cast<double>(o), ind = static_cast<double>(in);
      const double outd = sizes.empty() ? ind * scale : static_cast<double>(out);
      if (ctm == "half_pixel") xo = (od + 0.5) / scale - 0.5;
      else if (ctm == "pytorch_half_pixel") xo = outd > 1 ? (od + 0.5) / scale - 0.5 : 0.0;
      else if (ctm == "align_corners") xo = outd == 1 ? 0.0 : od * (ind - 1) / (outd - 1);
      else if (ctm == "asymmetric") xo = od / scale;
      else if (ctm == "tf_half_pixel_for_nn") xo = (od + 0.5) / scale;
      else if (ctm == "half_pixel_symmetric") {
        const double adj = outd / (scale * ind), center = ind / 2;
        xo = center * (1 - adj) + (od + 0.5) / scale - 0.5;
      } else if (ctm == "tf_crop_and_resize") {
        c.require(!roi.empty(), "tf_crop_and_resize needs roi");
        const double start = roi[k], end = roi[k + n];
        xo = out > 1 ? start * (ind - 1) + od * (end - start) * (ind - 1) / (outd - 1) : 0.5 * (start + end) * (ind - 1);
        if (xo < 0 || xo > ind - 1) outside[static_cast<size_t>(o)] = true;
      } else {
        c.unsupported("coordinate_transformation_mode ", ctm);
      }
      auto& t = taps[static_cast<size_t>(o)];
      auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
      if (mode == "nearest") {
        double v;
        const double fl = std::floor(xo);
        if (nearest_mode == "round_prefer_floor") v = xo == fl + 0.5 ? fl : std::round(xo);
        else if (nearest_mode == "round_prefer_ceil") v = xo == fl + 0.5 ? fl + 1 : std::round(xo);
        else if (nearest_mode == "floor") v = fl;
        else if (nearest_mode == "ceil") v = std::ceil(xo);
        else c.unsupported("nearest_mode ", nearest_mode);
        t.push_back({clampi(static_cast<int64_t>(v)), 1.0});
      } else if (mode == "linear") {
        const double x0 = std::floor(xo), ratio = xo - x0;
        const int64_t i0 = static_cast<int64_t>(x0);
        t.push_back({clampi(i0), 1 - ratio});
        t.push_back({clampi(i0 + 1), ratio});
        if (exclude_outside) {
          double total = 0;
          for (size_t q = 0; q < 2; ++q) {
            const int64_t raw = i0 + static_cast<int64_t>(q);
            if (raw < 0 || raw >= in) t[q].second = 0;
            total += t[q].second;
          }
          if (total != 0) for (auto& p : t) p.second /= total;
        }
      } else if (mode == "cubic") {
        const double x0 = std::floor(xo), rr = xo - x0;
        const int64_t i0 = static_cast<int64_t>(x0);
        const double cf[4] = {((a * (rr + 1) - 5 * a) * (rr + 1) + 8 * a) * (rr + 1) - 4 * a,
                              ((a + 2) * rr - (a + 3)) * rr * rr + 1,
                              ((a + 2) * (1 - rr) - (a + 3)) * (1 - rr) * (1 - rr) + 1,
                              ((a * (2 - rr) - 5 * a) * (2 - rr) + 8 * a) * (2 - rr) - 4 * a};
        double total = 0;
        for (int q = 0; q < 4; ++q) {
          const int64_t raw = i0 - 1 + q;
          double w = cf[q];
          if (exclude_outside && (raw < 0 || raw >= in)) w = 0;
          t.push_back({clampi(raw), w});
          total += w;
        }
        if (exclude_outside && total != 0) for (auto& p : t) p.second /= total;
      } else {
        c.unsupported("mode ", mode);
      }
    }
    c.require(in > 0 || out == 0, "cannot resize an empty dim");
    y = resample_axis(y, ax, taps, outside, extrapolation);
  }
  return {y};
}

// ---- recurrent layers -----------------------------------------------------------------------

enum class Cell { Rnn, Gru, Lstm };

// RNN, GRU and LSTM with the spec's default activations: the input projection of all steps is
// one matmul per direction, then one small matmul per step for the recurrence.
Handler recurrent(Cell cell) {
  return [cell](Ctx& c) {
    const int64_t G = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
    const std::vector<std::string> defaults = cell == Cell::Rnn   ? std::vector<std::string>{"Tanh", "Tanh"}
                                              : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh", "Sigmoid", "Tanh"}
                                                                  : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh", "Sigmoid", "Tanh", "Tanh"};
    if (const Attr* a = c.attr("activations")) {
      for (size_t k = 0; k < a->strings.size(); ++k)
        if (k >= defaults.size() || a->strings[k] != defaults[k]) c.unsupported("activations other than the defaults");
    }
    if (c.attr("clip")) c.unsupported("clip");
    if (c.i("input_forget", 0)) c.unsupported("input_forget");
    const std::string direction = c.s("direction", "forward");
    const int64_t dirs = direction == "bidirectional" ? 2 : 1;
    c.require(direction == "forward" || direction == "reverse" || direction == "bidirectional", "bad direction ", direction);
    const bool batch_first = c.i("layout", 0) != 0;
    Tensor X = c.x(0);
    c.require(X.dim() == 3, "X must be 3-D");
    if (batch_first) X = X.transpose(0, 1);
    const int64_t T = X.shape()[0], B = X.shape()[1];
    const Tensor &W = c.x(1), &R = c.x(2);
    c.require(W.dim() == 3 && R.dim() == 3 && W.shape()[0] == dirs && R.shape()[0] == dirs, "W/R do not match the directions");
    const int64_t H = c.i("hidden_size", R.shape()[2]);
    c.require(H > 0 && W.shape()[1] == G * H && R.shape()[1] == G * H && R.shape()[2] == H && W.shape()[2] == X.shape()[2],
              "W ", to_string(W.shape()), " / R ", to_string(R.shape()), " do not fit hidden_size ", H);
    if (c.has(4)) {
      for (int64_t len : c.values(4)) if (len != T) c.unsupported("sequence_lens shorter than the sequence");
    }
    const bool lbr = c.i("linear_before_reset", 0) != 0;
    std::vector<Tensor> ys, hs, cs;
    for (int64_t d = 0; d < dirs; ++d) {
      Tensor w = W.select(0, d), r = R.select(0, d);
      Tensor wb, rb;
      if (c.has(3)) {
        c.require(c.x(3).dim() == 2 && c.x(3).shape()[1] == 2 * G * H, "B of the wrong shape");
        wb = c.x(3).select(0, d).slice(0, 0, G * H);
        rb = c.x(3).select(0, d).slice(0, G * H, 2 * G * H);
      } else {
        wb = zeros({G * H}, X.dtype());
        rb = zeros({G * H}, X.dtype());
      }
      Tensor xw = matmul(X, w.t()) + wb;  // [T, B, G*H]
      Tensor h = c.has(5) ? (batch_first ? c.x(5).select(1, d) : c.x(5).select(0, d)) : zeros({B, H}, X.dtype());
      Tensor cst = cell == Cell::Lstm && c.has(6) ? (batch_first ? c.x(6).select(1, d) : c.x(6).select(0, d))
                                                  : zeros({B, H}, X.dtype());
      Tensor peep = cell == Cell::Lstm && c.has(7) ? c.x(7).select(0, d) : Tensor();
      const bool reverse = direction == "reverse" || d == 1;
      std::vector<Tensor> steps(static_cast<size_t>(T));
      for (int64_t k = 0; k < T; ++k) {
        const int64_t t = reverse ? T - 1 - k : k;
        Tensor xt = xw.select(0, t);
        auto gate = [&](const Tensor& all, int64_t g) { return all.slice(-1, g * H, (g + 1) * H); };
        if (cell == Cell::Rnn) {
          h = tanh(xt + matmul(h, r.t()) + rb);
        } else if (cell == Cell::Gru) {
          Tensor hr = matmul(h, r.slice(0, 0, 2 * H).t()) + rb.slice(0, 0, 2 * H);
          Tensor z = sigmoid(gate(xt, 0) + gate(hr, 0)), rr = sigmoid(gate(xt, 1) + gate(hr, 1));
          Tensor rh = r.slice(0, 2 * H, 3 * H), rbh = rb.slice(0, 2 * H, 3 * H);
          Tensor n = lbr ? tanh(gate(xt, 2) + rr * (matmul(h, rh.t()) + rbh)) : tanh(gate(xt, 2) + matmul(rr * h, rh.t()) + rbh);
          h = (1.0 - z) * n + z * h;
        } else {
          Tensor all = xt + matmul(h, r.t()) + rb;
          Tensor gi = gate(all, 0), go = gate(all, 1), gf = gate(all, 2), gc = gate(all, 3);
          if (peep.defined()) {
            gi = gi + peep.slice(0, 0, H) * cst;
            gf = gf + peep.slice(0, 2 * H, 3 * H) * cst;
          }
          cst = sigmoid(gf) * cst + sigmoid(gi) * tanh(gc);
          if (peep.defined()) go = go + peep.slice(0, H, 2 * H) * cst;
          h = sigmoid(go) * tanh(cst);
        }
        h.realize();  // one step at a time: the graph stays shallow for long sequences
        if (cell == Cell::Lstm) cst.realize();
        steps[static_cast<size_t>(t)] = h;
      }
      ys.push_back(T > 0 ? stack(steps, 0) : zeros({0, B, H}, X.dtype()));  // [T, B, H]
      hs.push_back(h);
      cs.push_back(cst);
    }
    Tensor y = stack(ys, 1), yh = stack(hs, 0), yc = stack(cs, 0);  // [T, D, B, H], [D, B, H]
    if (batch_first) {
      y = y.permute({2, 0, 1, 3});
      yh = yh.transpose(0, 1);
      yc = yc.transpose(0, 1);
    }
    Outs out{y, yh};
    if (cell == Cell::Lstm) out.push_back(yc);
    return out;
  };
}

// ---- more ops: inverse trigonometry, windows, scatter/gather variants, data-dependent shapes --

// atan from the primitives: |x| > 1 through atan(x) = sign(x) pi/2 - atan(1/x), then two
// half-angle steps (atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))) to |t| <= tan(pi/16), where the
// odd Taylor series to t^11 is within 1e-10.
Tensor atan_(const Tensor& x) {
  Tensor big = abs(x) > 1.0;
  Tensor t = where(big, 1.0 / x, x);
  for (int k = 0; k < 2; ++k) t = t / (sqrt(t * t + 1.0) + 1.0);
  Tensor t2 = t * t;
  Tensor poly = t * (1.0 - t2 * (1.0 / 3 - t2 * (1.0 / 5 - t2 * (1.0 / 7 - t2 * (1.0 / 9 - t2 / 11.0)))));
  Tensor small = poly * 4.0;
  return where(big, sign(x) * 1.5707963267948966 - small, small);
}
Tensor asin_(const Tensor& x) { return atan_(x / (sqrt(1.0 - x * x) + 1.0)) * 2.0; }

Handler window(int which) {  // 0 Hann, 1 Hamming, 2 Blackman
  return [which](Ctx& c) {
    const int64_t n = static_cast<int64_t>(c.scalar(0));
    c.require(n >= 0 && n <= kMaxShapeValues, "bad window size ", n);
    DType dt = DType::F32;
    if (c.attr("output_datatype") && !dtype_from_onnx(static_cast<int>(c.i("output_datatype", 1)), &dt))
      c.unsupported("output_datatype");
    const double den = c.i("periodic", 1) ? static_cast<double>(n) : static_cast<double>(n - 1);
    std::vector<double> v(static_cast<size_t>(n));
    const double pi = 3.141592653589793;
    for (int64_t k = 0; k < n; ++k) {
      const double a = 2 * pi * static_cast<double>(k) / den;
      v[static_cast<size_t>(k)] = which == 0 ? 0.5 - 0.5 * std::cos(a)
                                  : which == 1 ? 25.0 / 46 - (1 - 25.0 / 46) * std::cos(a)
                                               : 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
    }
    return Outs{cast(tensor(v, {n}), dt)};
  };
}

// Linear positions into data's first k dims (after batch_dims leading dims) for GatherND/ScatterND.
Tensor nd_positions(Ctx& c, const Tensor& data, const Tensor& indices, int64_t batch_dims, int64_t* k_out) {
  c.require(indices.dim() >= 1 && is_integral(indices.dtype()), "indices must be integers of rank >= 1");
  const int64_t k = indices.shape().back();
  c.require(batch_dims >= 0 && batch_dims < indices.dim() && batch_dims + k <= data.dim(), "indices do not fit data");
  Tensor idx = indices.to(DType::I64);
  Tensor lin = zeros(Shape(indices.shape().begin(), indices.shape().end() - 1), DType::I64);
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    const int64_t n = data.shape()[static_cast<size_t>(batch_dims + j)];
    Tensor ij = idx.select(-1, j);
    lin = lin + where(ij < 0, ij + n, ij) * stride;
    stride *= n;
  }
  int64_t batch = 1;
  for (int64_t b = 0; b < batch_dims; ++b) batch *= data.shape()[static_cast<size_t>(b)];
  if (batch_dims > 0) {  // the leading dims of indices and data agree: offset each batch's block
    Shape s{batch};
    s.insert(s.end(), indices.shape().begin() + batch_dims, indices.shape().end() - 1);
    lin = lin.reshape(s);
    Shape bshape(s.size(), 1);
    bshape[0] = batch;
    lin = lin + arange(batch).reshape(bshape) * stride;
  }
  *k_out = k;
  return lin;
}

Outs op_gather_nd(Ctx& c) {
  const Tensor& data = c.x(0);
  const Tensor& indices = c.x(1);
  const int64_t b = c.i("batch_dims", 0);
  int64_t k = 0;
  Tensor lin = nd_positions(c, data, indices, b, &k);
  Shape rest(data.shape().begin() + b + k, data.shape().end());
  Shape flat{-1};
  flat.insert(flat.end(), rest.begin(), rest.end());
  Tensor picked = index_select(data.reshape(flat), 0, lin.reshape({lin.numel()}));
  Shape out(indices.shape().begin(), indices.shape().end() - 1);
  out.insert(out.end(), rest.begin(), rest.end());
  return {picked.reshape(out)};
}

// out = data with positions `index` along `axis` replaced (or added to) by updates.
Tensor scatter_into(Ctx& c, const Tensor& data, int64_t axis, const Tensor& index, const Tensor& updates) {
  const std::string reduction = c.s("reduction", "none");
  Tensor added = scatter_add(zeros(data.shape(), updates.dtype()).contiguous(), axis, index, updates, c.loc);
  if (reduction == "add") return data + added;
  if (reduction != "none") c.unsupported("reduction ", reduction);
  Tensor hit = scatter_add(zeros(data.shape(), DType::F32).contiguous(), axis, index, ones(updates.shape(), DType::F32), c.loc);
  return where(hit > 0, added, data);
}

Outs op_scatter_elements(Ctx& c) {
  const Tensor& data = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), data.dim());
  Tensor idx = fix_negative_indices(c.x(1), data.shape()[static_cast<size_t>(axis)]);
  return {scatter_into(c, data, axis, idx, c.x(2))};
}

Outs op_scatter_nd(Ctx& c) {
  const Tensor& data = c.x(0);
  int64_t k = 0;
  Tensor lin = nd_positions(c, data, c.x(1), 0, &k);
  Shape rest(data.shape().begin() + k, data.shape().end());
  Shape flat{-1}, upd_shape{lin.numel()};
  flat.insert(flat.end(), rest.begin(), rest.end());
  upd_shape.insert(upd_shape.end(), rest.begin(), rest.end());
  Tensor d2 = data.reshape(flat);
  Shape idx_shape(upd_shape.size(), 1);
  idx_shape[0] = lin.numel();
  Tensor idx = lin.reshape(idx_shape).expand(upd_shape).contiguous();
  return {scatter_into(c, d2, 0, idx, c.x(2).reshape(upd_shape)).reshape(data.shape())};
}

Outs op_lrn(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dim() >= 3, "input must be at least 3-D");
  const int64_t size = c.i("size", 1);
  c.require(size >= 1 && size <= 1024, "bad size");
  const double alpha = c.f("alpha", 1e-4), beta = c.f("beta", 0.75), bias = c.f("bias", 1.0);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<int64_t> pads(2 * static_cast<size_t>(x.dim() - 1), 0);  // torch order: last dim first; dim 1 is the last pair
  pads[pads.size() - 2] = before;
  pads[pads.size() - 1] = after;
  Tensor sq = pad(x * x, pads);
  const int64_t C = x.shape()[1];
  Tensor acc;
  for (int64_t k = 0; k < size; ++k) {
    Tensor part = sq.slice(1, k, k + C);
    acc = acc.defined() ? acc + part : part;
  }
  return {x / pow(acc * (alpha / static_cast<double>(size)) + bias, beta)};
}

Outs op_nonzero(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.numel() <= kMaxShapeValues, "input too large for NonZero");
  const std::vector<double> v = x.to_vector<double>();
  std::vector<int64_t> hits;
  for (size_t k = 0; k < v.size(); ++k)
    if (v[k] != 0) hits.push_back(static_cast<int64_t>(k));
  const int64_t r = std::max<int64_t>(x.dim(), 1), n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(static_cast<size_t>(r * n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t rem = hits[static_cast<size_t>(j)];
    for (int64_t d = r - 1; d >= 0; --d) {
      const int64_t size = x.dim() == 0 ? 1 : x.shape()[static_cast<size_t>(d)];
      out[static_cast<size_t>(d * n + j)] = rem % size;
      rem /= size;
    }
  }
  if (n == 0) return {zeros({r, 0}, DType::I64).contiguous()};
  return {tensor(out, {r, n})};
}

Outs op_compress(Ctx& c) {
  Tensor x = c.x(0);
  const Tensor& cond = c.x(1);
  c.require(cond.dim() == 1 && cond.numel() <= kMaxShapeValues, "condition must be 1-D");
  const std::vector<double> v = cond.to_vector<double>();
  int64_t axis = 0;
  if (c.attr("axis")) axis = c.axis(c.i("axis", 0), x.dim());
  else x = x.reshape({x.numel()});
  std::vector<int64_t> keep;
  for (size_t k = 0; k < v.size() && static_cast<int64_t>(k) < x.shape()[static_cast<size_t>(axis)]; ++k)
    if (v[k] != 0) keep.push_back(static_cast<int64_t>(k));
  if (keep.empty()) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = 0;
    return {zeros(s, x.dtype()).contiguous()};
  }
  return {index_select(x, axis, tensor(keep, {static_cast<int64_t>(keep.size())}))};
}

Outs op_reverse_sequence(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t ta = c.axis(c.i("time_axis", 0), x.dim()), ba = c.axis(c.i("batch_axis", 1), x.dim());
  c.require(ta != ba, "time and batch axes coincide");
  const std::vector<int64_t> lens = c.values(1);
  const int64_t T = x.shape()[static_cast<size_t>(ta)], B = x.shape()[static_cast<size_t>(ba)];
  c.require(static_cast<int64_t>(lens.size()) == B, "sequence_lens has ", lens.size(), " values for batch ", B);
  c.require(T * B <= kMaxShapeValues, "too large");
  std::vector<int64_t> idx(static_cast<size_t>(T * B));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = std::clamp<int64_t>(lens[static_cast<size_t>(b)], 0, T);
      idx[static_cast<size_t>(ta < ba ? t * B + b : b * T + t)] = t < len ? len - 1 - t : t;
    }
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[static_cast<size_t>(ta)] = T;
  s[static_cast<size_t>(ba)] = B;
  return {gather(x, ta, tensor(idx, {static_cast<int64_t>(idx.size())}).reshape(s).expand(x.shape()).contiguous())};
}

Outs op_upsample(Ctx& c) {
  // Upsample (opsets 7-9) is Resize-10 with floor rounding for nearest.
  Node n = c.node;
  n.attrs["nearest_mode"] = Attr{Attr::String, 0, 0, "floor", {}, {}, {}, {}};
  Ctx rc{n, 10, {c.x(0)}, c.loc};
  if (c.opset < 9) {
    const Attr* a = c.attr("scales");
    c.require(a && a->kind == Attr::Floats, "needs scales");
    std::vector<float> v(a->floats.begin(), a->floats.end());
    rc.in.push_back(tensor(v, {static_cast<int64_t>(v.size())}));
  } else {
    rc.in.push_back(c.x(1));
  }
  return op_resize(rc);
}

// Greedy non-maximum suppression per (batch, class), on the host: its output size depends on the data.
Outs op_nms(Ctx& c) {
  const Tensor &boxes = c.x(0), &scores = c.x(1);
  c.require(boxes.dim() == 3 && boxes.shape()[2] == 4 && scores.dim() == 3 && scores.shape()[0] == boxes.shape()[0] &&
                scores.shape()[2] == boxes.shape()[1],
            "boxes ", to_string(boxes.shape()), " and scores ", to_string(scores.shape()), " do not fit");
  c.require(boxes.numel() <= kMaxShapeValues && scores.numel() <= kMaxShapeValues, "too many boxes");
  const int64_t max_out = c.has(2) ? static_cast<int64_t>(c.scalar(2)) : 0;
  const double iou_max = c.has(3) ? c.scalar(3) : 0.0;
  const bool has_thr = c.has(4);
  const double thr = has_thr ? c.scalar(4) : 0.0;
  const bool center = c.i("center_point_box", 0) != 0;
  const std::vector<double> bx = boxes.to_vector<double>(), sc = scores.to_vector<double>();
  const int64_t B = boxes.shape()[0], N = boxes.shape()[1], C = scores.shape()[1];
  auto corners = [&](int64_t b, int64_t i, double out[4]) {
    const double* p = &bx[static_cast<size_t>((b * N + i) * 4)];
    if (center) {
      out[0] = p[1] - p[3] / 2, out[1] = p[0] - p[2] / 2, out[2] = p[1] + p[3] / 2, out[3] = p[0] + p[2] / 2;
    } else {
      out[0] = std::min(p[0], p[2]), out[1] = std::min(p[1], p[3]), out[2] = std::max(p[0], p[2]), out[3] = std::max(p[1], p[3]);
    }
  };
  auto iou = [&](int64_t b, int64_t i, int64_t j) {
    double a[4], d[4];
    corners(b, i, a);
    corners(b, j, d);
    const double ih = std::max(0.0, std::min(a[2], d[2]) - std::max(a[0], d[0]));
    const double iw = std::max(0.0, std::min(a[3], d[3]) - std::max(a[1], d[1]));
    const double inter = ih * iw, uni = (a[2] - a[0]) * (a[3] - a[1]) + (d[2] - d[0]) * (d[3] - d[1]) - inter;
    return uni > 0 ? inter / uni : 0.0;
  };
  std::vector<int64_t> out;
  for (int64_t b = 0; b < B && max_out > 0; ++b)
    for (int64_t k = 0; k < C; ++k) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < N; ++i)
        if (!has_thr || sc[static_cast<size_t>((b * C + k) * N + i)] > thr) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
        return sc[static_cast<size_t>((b * C + k) * N + i)] > sc[static_cast<size_t>((b * C + k) * N + j)];
      });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        bool keep = true;
        for (int64_t j : kept) keep = keep && iou(b, i, j) <= iou_max;
        if (keep) kept.push_back(i);
      }
      for (int64_t i : kept) out.insert(out.end(), {b, k, i});
    }
  const int64_t n = static_cast<int64_t>(out.size() / 3);
  if (n == 0) return {zeros({0, 3}, DType::I64).contiguous()};
  return {tensor(out, {n, 3})};
}

const std::unordered_map<std::string, Handler>& handlers() {
  static const std::unordered_map<std::string, Handler> table = [] {
    std::unordered_map<std::string, Handler> h;
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
    h["CastLike"] = op_castlike;
    h["PRelu"] = op_prelu;
    h["Gemm"] = op_gemm;
    h["MatMul"] = op_matmul;
    h["Reshape"] = op_reshape;
    h["Transpose"] = op_transpose;
    h["Concat"] = op_concat;
    h["Split"] = op_split;
    h["Slice"] = op_slice;
    h["Gather"] = op_gather;
    h["GatherElements"] = op_gather_elements;
    h["Squeeze"] = op_squeeze;
    h["Unsqueeze"] = op_unsqueeze;
    h["Flatten"] = op_flatten;
    h["Expand"] = op_expand;
    h["Tile"] = op_tile;
    h["Shape"] = op_shape;
    h["Size"] = op_size;
    h["Constant"] = op_constant;
    h["ConstantOfShape"] = op_constant_of_shape;
    h["Range"] = op_range;
    h["Pad"] = op_pad;
    h["Trilu"] = op_trilu;
    h["OneHot"] = op_onehot;
    h["EyeLike"] = op_eyelike;
    h["DepthToSpace"] = op_depth_to_space;
    h["SpaceToDepth"] = op_space_to_depth;
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
    h["BatchNormalization"] = op_batchnorm;
    h["InstanceNormalization"] = op_instancenorm;
    h["LayerNormalization"] = op_layernorm;
    h["MeanVarianceNormalization"] = op_mvn;
    h["Conv"] = op_conv;
    h["ConvTranspose"] = op_conv_transpose;
    h["MaxPool"] = pool(true);
    h["AveragePool"] = pool(false);
    h["GlobalMaxPool"] = global_pool(true);
    h["GlobalAveragePool"] = global_pool(false);
    h["Dropout"] = op_dropout;
    h["Identity"] = op_identity;
    h["Einsum"] = op_einsum;
    h["TopK"] = op_topk;
    h["NegativeLogLikelihoodLoss"] = op_nll;
    h["SoftmaxCrossEntropyLoss"] = op_softmax_ce;
    h["Resize"] = op_resize;
    h["RNN"] = recurrent(Cell::Rnn);
    h["GRU"] = recurrent(Cell::Gru);
    h["LSTM"] = recurrent(Cell::Lstm);
    h["Atan"] = unary_fn([](const Ctx&, const Tensor& x) { return atan_(x); });
    h["Asin"] = unary_fn([](const Ctx&, const Tensor& x) { return asin_(x); });
    h["Acos"] = unary_fn([](const Ctx&, const Tensor& x) { return 1.5707963267948966 - asin_(x); });
    h["HannWindow"] = window(0);
    h["HammingWindow"] = window(1);
    h["BlackmanWindow"] = window(2);
    h["GatherND"] = op_gather_nd;
    h["ScatterElements"] = op_scatter_elements;
    h["Scatter"] = op_scatter_elements;
    h["ScatterND"] = op_scatter_nd;
    h["LRN"] = op_lrn;
    h["NonZero"] = op_nonzero;
    h["Compress"] = op_compress;
    h["ReverseSequence"] = op_reverse_sequence;
    h["Upsample"] = op_upsample;
    h["NonMaxSuppression"] = op_nms;
    return h;
  }();
  return table;
}

}  // namespace

bool is_supported_op(std::string_view op_type) { return handlers().count(std::string(op_type)) != 0; }

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (auto& [name, h] : handlers()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc) {
  std::unordered_map<std::string, Tensor> env;
  Device* device = nullptr;
  for (const auto& name : m.input_names) {
    auto it = inputs.find(name);
    check(it != inputs.end() && it->second.defined(), kOp, loc, "input '", name, "' is not given");
    if (!device) device = &it->second.device();
    env[name] = it->second;
  }
  for (const auto& [name, t] : inputs)
    check(env.count(name) || m.initializers.count(name), kOp, loc, "'", name, "' is not an input of the model");
  if (!device) device = &default_device();
  DeviceGuard on(*device);
  for (const auto& [name, t] : m.initializers) {
    auto it = inputs.find(name);  // an input may override an initializer's default
    env[name] = it != inputs.end() ? it->second : t.to(*device);
  }
  for (const auto& node : m.nodes) {
    if (!node.domain.empty()) fail(kUnsupported, loc, "node '", node.name, "': domain ", node.domain, " is not supported");
    auto h = handlers().find(node.op_type);
    if (h == handlers().end()) fail(kUnsupported, loc, "op ", node.op_type, " is not supported");
    Ctx c{node, m.info.opset, {}, loc};
    for (const auto& name : node.inputs) c.in.push_back(name.empty() ? Tensor() : env.at(name));
    Outs outs = h->second(c);
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (k >= outs.size() || !outs[k].defined()) c.unsupported("output ", k, " ('", node.outputs[k], "')");
      checked_numel(outs[k].shape(), c.label(), loc);
      // An empty result needs no kernel (and some backends have none for empty inputs).
      if (outs[k].numel() == 0 && !outs[k].is_realized())
        outs[k] = zeros(outs[k].shape(), outs[k].dtype()).contiguous();
      env[node.outputs[k]] = outs[k];
    }
  }
  std::map<std::string, Tensor> out;
  for (const auto& name : m.output_names) out[name] = env.at(name);
  return out;
}

// ---- Model -------------------------------------------------------------------------------

const ModelInfo& Model::info() const {
  static const ModelInfo empty;
  return impl_ ? impl_->info : empty;
}
std::vector<std::string> Model::input_names() const { return impl_ ? impl_->input_names : std::vector<std::string>{}; }
std::vector<std::string> Model::output_names() const { return impl_ ? impl_->output_names : std::vector<std::string>{}; }

std::map<std::string, Tensor> Model::run(const std::map<std::string, Tensor>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  return run_graph(*impl_, inputs, loc);
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  check(inputs.size() == impl_->input_names.size(), kOp, loc, "the model takes ", impl_->input_names.size(),
        " inputs, got ", inputs.size());
  std::map<std::string, Tensor> named;
  for (size_t k = 0; k < inputs.size(); ++k) named[impl_->input_names[k]] = inputs[k];
  std::map<std::string, Tensor> out = run_graph(*impl_, named, loc);
  std::vector<Tensor> result;
  for (const auto& name : impl_->output_names) result.push_back(out.at(name));
  return result;
}

}  // namespace alk::onnx
