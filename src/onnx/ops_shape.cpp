// ONNX shape ops: reshaping, transposing, slicing, concatenating, gathering, padding, creating
// constants; the ints they need (shapes, axes) are read back from small tensors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// ---- shapes ------------------------------------------------------------------------------

Outs op_reshape(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> shape = c.opset < 5 ? c.ints("shape") : c.values(1);
  const bool allowzero = c.i("allowzero", 0) != 0;
  int64_t infer = -1, known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0 && !allowzero) {
      if (!(static_cast<int64_t>(k) < x.dim()))
        c.fail_with("shape ", to_string(shape), " copies a dim ", k, " that x lacks");
      shape[k] = x.shape()[k];
    }
    if (shape[k] == -1) {
      if (!(infer < 0)) c.fail_with("shape ", to_string(shape), " has two -1 dims");
      infer = static_cast<int64_t>(k);
    } else {
      if (!(shape[k] >= 0)) c.fail_with("negative dim in shape ", to_string(shape));
    }
  }
  for (size_t k = 0; k < shape.size(); ++k)
    if (static_cast<int64_t>(k) != infer) known *= std::max<int64_t>(shape[k], 0), checked_numel({known}, c.label(), c.loc);
  if (infer >= 0) {
    if (!(known != 0 && x.numel() % known == 0))
      c.fail_with("cannot infer the -1 dim of ", to_string(shape), " for ", x.numel(), " elements");
    shape[static_cast<size_t>(infer)] = x.numel() / known;
  }
  return {x.reshape(c.checked(shape), c.loc)};
}

Outs op_transpose(Ctx& c) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> perm = c.ints("perm");
  if (perm.empty())
    for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
  if (!(static_cast<int64_t>(perm.size()) == x.dim()))
    c.fail_with("perm ", to_string(perm), " does not match rank ", x.dim());
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
  if (!(total == n)) c.fail_with("split sizes ", to_string(sizes), " do not add up to ", n);
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
  if (!(static_cast<int64_t>(reps.size()) == x.dim()))
    c.fail_with("repeats ", to_string(reps), " do not match rank ", x.dim());
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

Tensor attr_tensor_value(const Attr& a) { return scalar_as_constant(a.t).to(default_device()); }

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
  if (!(pads.size() == 2 * axes.size())) c.fail_with("pads ", to_string(pads), " do not match ", axes.size(), " axes");
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

}  // namespace

void add_shape_ops(HandlerTable& h) {
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
}

}  // namespace alk::onnx
