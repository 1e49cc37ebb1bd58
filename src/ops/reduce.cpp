// Reductions. sum/max/min/prod are Reduce nodes (the scheduler fuses an elementwise
// producer into them as a prologue); mean, var, std and logsumexp are compositions.
#include <algorithm>
#include <cmath>

#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

namespace {

std::vector<int> reduce_axes(const Tensor& x, const std::vector<int64_t>& axes, const char* op, Loc loc) {
  check_defined(x, op, loc);
  if (axes.empty()) {
    std::vector<int> all(static_cast<size_t>(x.dim()));
    for (int i = 0; i < static_cast<int>(all.size()); ++i) all[i] = i;
    return all;
  }
  return normalize_axes(axes, x.dim(), op, loc);
}

Shape kept_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out = shape;
  for (int a : axes) out[a] = 1;
  return out;
}

Shape dropped_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) out.push_back(shape[d]);
  return out;
}

int64_t reduced_count(const Shape& shape, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= shape[a];
  return n;
}

Tensor reduce(ReduceOp op, const char* name, const Tensor& x0, const std::vector<int64_t>& axes_in, bool keepdim,
              Loc loc) {
  std::vector<int> axes = reduce_axes(x0, axes_in, name, loc);
  Tensor x = x0;
  // Sums and products of bool and integer tensors accumulate in i64, as in PyTorch.
  if ((op == ReduceOp::Sum || op == ReduceOp::Prod) && !is_floating(x.dtype())) x = cast(x, DType::I64, loc);
  if (op == ReduceOp::Max || op == ReduceOp::Min)
    for (int a : axes)
      check(x.shape()[a] > 0, name, loc, "cannot reduce over dim ", a, " of size 0 (shape ", to_string(x.shape()),
            "): the result has no identity");
  Shape kept = kept_shape(x.shape(), axes);
  Tensor out = make_node(OpId::Reduce, kept, x.dtype(), {alias(x)}, ReduceParams{op, axes}, loc);
  if (needs_grad({&x})) {
    Tensor saved_x = x, saved_out = alias(out);
    Shape in_shape = x.shape();
    std::vector<int64_t> ax64(axes.begin(), axes.end());
    out = with_grad(out, name, {x}, [op, saved_x, saved_out, in_shape, axes, ax64](const Tensor& g) -> std::vector<Tensor> {
      Tensor gb = broadcast_to(g, in_shape);
      // The output cannot hold its own history; under create_graph it is recomputed.
      Tensor saved_y = saved_out;
      if (is_grad_enabled() && op != ReduceOp::Sum) {
        saved_y = op == ReduceOp::Max ? max(saved_x, ax64, true) : op == ReduceOp::Min ? min(saved_x, ax64, true)
                                                                                       : prod(saved_x, ax64, true);
      }
      switch (op) {
        case ReduceOp::Sum: return {gb};
        case ReduceOp::Prod: {
          // d prod / d x_i is the product of the other elements. y / x_i is that only
          // where no factor is zero; PyTorch's rule, per reduced slice: with one zero, the
          // zero's gradient is the product of the rest and the others' is 0; with two or
          // more, every gradient is 0.
          Tensor zero = eq(saved_x, 0.0);
          Tensor nonzero_x = where(zero, 1.0, saved_x);
          Tensor zeros_in_slice = sum(cast(zero, DType::I64), ax64, true);
          Tensor rest = broadcast_to(prod(nonzero_x, ax64, true), in_shape);
          Tensor no_zero = broadcast_to(eq(zeros_in_slice, 0), in_shape);
          Tensor one_zero = logical_and(zero, broadcast_to(eq(zeros_in_slice, 1), in_shape));
          Tensor d = where(no_zero, broadcast_to(saved_y, in_shape) / saved_x, where(one_zero, rest, 0.0));
          return {gb * d};
        }
        case ReduceOp::Max:
        case ReduceOp::Min: {
          // Ties share the gradient equally (PyTorch's amax/amin rule).
          Tensor hit = cast(eq(saved_x, saved_y), saved_x.dtype());
          std::vector<int64_t> ax(axes.begin(), axes.end());
          return {gb * hit / sum(hit, ax, true)};
        }
      }
      return {Tensor()};
    });
  }
  if (keepdim) return out;
  return out.reshape(dropped_shape(x.shape(), axes), loc);
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  return reduce(ReduceOp::Sum, "sum", x, axes, keepdim, loc);
}
Tensor prod(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  return reduce(ReduceOp::Prod, "prod", x, axes, keepdim, loc);
}
Tensor max(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  return reduce(ReduceOp::Max, "max", x, axes, keepdim, loc);
}
Tensor min(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  return reduce(ReduceOp::Min, "min", x, axes, keepdim, loc);
}

Tensor mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  std::vector<int> ax = reduce_axes(x, axes, "mean", loc);
  Tensor xf = cast(x, to_floating(x.dtype()), loc);
  return sum(xf, axes, keepdim, loc) / static_cast<double>(reduced_count(x.shape(), ax));
}

Tensor var(const Tensor& x, std::vector<int64_t> axes, int64_t correction, bool keepdim, Loc loc) {
  std::vector<int> ax = reduce_axes(x, axes, "var", loc);
  const int64_t n = reduced_count(x.shape(), ax);
  check(correction >= 0, "var", loc, "correction must be non-negative, got ", correction);
  Tensor xf = cast(x, to_floating(x.dtype()), loc);
  Tensor d = xf - mean(xf, axes, true, loc);
  double denom = static_cast<double>(std::max<int64_t>(n - correction, 0));
  return sum(d * d, axes, keepdim, loc) / denom;
}

Tensor std(const Tensor& x, std::vector<int64_t> axes, int64_t correction, bool keepdim, Loc loc) {
  return sqrt(var(x, axes, correction, keepdim, loc), loc);
}

Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes, bool keepdim, Loc loc) {
  check_floating(x, "logsumexp", loc);
  reduce_axes(x, axes, "logsumexp", loc);
  // Shift by the max for stability; a row of -inf keeps a shift of 0 (result -inf, not NaN).
  Tensor m = max(x, axes, true, loc).detach();
  m = where(eq(abs(m), INFINITY), 0.0, m);
  Tensor s = log(sum(exp(x - m), axes, true, loc)) + m;
  if (keepdim) return s;
  std::vector<int> ax = reduce_axes(x, axes, "logsumexp", loc);
  return s.reshape(dropped_shape(x.shape(), ax), loc);
}

namespace {
Tensor argreduce(const Tensor& x0, std::optional<int64_t> dim, bool keepdim, bool is_max, Loc loc) {
  const char* name = is_max ? "argmax" : "argmin";
  check_defined(x0, name, loc);
  Tensor x = dim ? x0 : x0.reshape({-1}, loc);
  int axis = static_cast<int>(normalize_axis(dim.value_or(0), x.dim(), name, loc));
  if (x.dim() == 0) x = x.reshape({1}, loc);
  check(x.shape()[axis] > 0, name, loc, "cannot take ", name, " over an empty dim");
  Shape kept = x.shape();
  kept[axis] = 1;
  Tensor out = make_node(OpId::ArgReduce, kept, DType::I64, {alias(x)}, AxisParams{axis, is_max}, loc);
  if (!dim) return keepdim ? out.reshape(Shape(static_cast<size_t>(std::max<int64_t>(x0.dim(), 0)), 1)) : out.reshape({});
  if (keepdim) return out;
  return out.squeeze(axis, loc);
}
}  // namespace

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Loc loc) {
  return argreduce(x, dim, keepdim, true, loc);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Loc loc) {
  return argreduce(x, dim, keepdim, false, loc);
}

}  // namespace alk
