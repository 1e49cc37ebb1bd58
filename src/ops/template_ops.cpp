// Template ops: the table's shape, dtype and backward rules for ops whose kernels are
// hand-written per backend (src/backend/<name>/). Backward rules are compositions of
// other ops, so they are lazy, fused and differentiable again.
#include <algorithm>
#include <numeric>

#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

namespace {

Tensor float_operand(const Tensor& x, const char* op, Loc loc) {
  check_defined(x, op, loc);
  // Under autocast, 16-bit inputs are widened: these ops' sums and statistics need f32.
  if (autocast_dtype() && (x.dtype() == DType::BF16 || x.dtype() == DType::F16)) return cast(x, DType::F32, loc);
  return is_floating(x.dtype()) ? x : cast(x, DType::F32, loc);
}

thread_local std::optional<DType> t_autocast;

void check_index(const Tensor& index, const char* op, Loc loc) {
  check_defined(index, op, loc);
  check(index.dtype() == DType::I64 || index.dtype() == DType::I32, op, loc,
        "index must be i64 or i32, got ", dtype_name(index.dtype()));
}

// Batched matmul of [..., m, k] x [..., k, n] with broadcast batch dims.
Tensor matmul_nd(const Tensor& a, const Tensor& b, Loc loc) {
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1];
  const int64_t k2 = b.shape()[b.dim() - 2], n = b.shape()[b.dim() - 1];
  check(k == k2, "matmul", loc, "inner dimensions do not match: ", to_string(a.shape()), " @ ",
        to_string(b.shape()), " (", k, " vs ", k2, ")");
  Shape abatch(a.shape().begin(), a.shape().end() - 2), bbatch(b.shape().begin(), b.shape().end() - 2);
  for (size_t i = 0; i < std::min(abatch.size(), bbatch.size()); ++i) {
    int64_t x = abatch[abatch.size() - 1 - i], y = bbatch[bbatch.size() - 1 - i];
    check(x == y || x == 1 || y == 1, "matmul", loc, "batch dimensions do not broadcast: ", to_string(a.shape()),
          " @ ", to_string(b.shape()));
  }
  Shape batch = broadcast_shapes(abatch, bbatch, loc);
  Shape ash = batch, bsh = batch, osh = batch;
  ash.insert(ash.end(), {m, k});
  bsh.insert(bsh.end(), {k, n});
  osh.insert(osh.end(), {m, n});
  Tensor ae = alias(a).expand(ash, loc), be = alias(b).expand(bsh, loc);
  Tensor out = make_node(OpId::Matmul, osh, a.dtype(), {ae, be}, std::monostate{}, loc);
  if (!needs_grad({&a, &b})) return out;
  // The inputs themselves (with their history), so gradients of gradients flow through them.
  Tensor sa = a, sb = b;
  return with_grad(out, "matmul", {a, b}, [sa, sb, k, n](const Tensor& g) {
    // A b shared by every batch matrix of a (a linear layer's weight): its gradient
    // contracts over the batch and the rows at once, one [k, rows] x [rows, n] matmul,
    // instead of a batch of matmuls summed afterwards (batch times the output, and a
    // K of m instead of batch * m).
    bool b_shared = g.dim() > 2 && Shape(sa.shape().begin(), sa.shape().end() - 2) == Shape(g.shape().begin(), g.shape().end() - 2);
    for (int64_t d = 0; d + 2 < sb.dim(); ++d) b_shared = b_shared && sb.shape()[static_cast<size_t>(d)] == 1;
    // A b that is a transposed view (y = x W^T with W [n, k]) gets its gradient in the same
    // layout: W's gradient comes out contiguous, so the optimizer's kernels read it in place
    // instead of gathering it through a transpose (one strided element per cache line).
    const bool b_transposed = sb.dim() == 2 && sb.strides()[0] == 1 && sb.strides()[1] != 1;
    Tensor grad_b = b_shared && b_transposed
                        ? matmul(g.reshape({g.numel() / n, n}).transpose(0, 1), sa.reshape({sa.numel() / k, k}))
                              .transpose(0, 1)
                    : b_shared ? matmul(sa.reshape({sa.numel() / k, k}).transpose(0, 1), g.reshape({g.numel() / n, n}))
                                     .reshape(sb.shape())
                               : sum_to(matmul(sa.transpose(-1, -2), g), sb.shape());
    return std::vector<Tensor>{sum_to(matmul(g, sb.transpose(-1, -2)), sa.shape()), grad_b};
  });
}

}  // namespace

Autocast::Autocast(DType dtype, Loc loc) : previous_(t_autocast) {
  check(dtype == DType::BF16 || dtype == DType::F16, "autocast", loc, "dtype must be bf16 or f16, got ",
        dtype_name(dtype));
  t_autocast = dtype;
}
Autocast::~Autocast() { t_autocast = previous_; }
std::optional<DType> autocast_dtype() { return t_autocast; }

thread_local bool t_portable = false;
PortableOps::PortableOps() : previous_(t_portable) { t_portable = true; }
PortableOps::~PortableOps() { t_portable = previous_; }
bool portable_ops() { return t_portable; }
bool fused_kernel_on(const Tensor& t, std::string_view feature) {
  if (t_portable) return false;
  const std::vector<std::string>& f = t.device().info().features;
  return std::find(f.begin(), f.end(), feature) != f.end();
}

Tensor matmul(const Tensor& a0, const Tensor& b0, Loc loc) {
  check_defined(a0, "matmul", loc);
  check_defined(b0, "matmul", loc);
  check(a0.dim() >= 1 && b0.dim() >= 1, "matmul", loc, "both operands need at least 1 dim; got shapes ",
        to_string(a0.shape()), " and ", to_string(b0.shape()));
  DType t = to_floating(promote(a0.dtype(), b0.dtype()));
  if (autocast_dtype() && (t == DType::F32 || t == DType::F64)) t = *autocast_dtype();
  // An operand that is the transpose of a contiguous tensor (x @ W^T: a weight) is cast in its
  // storage order and viewed transposed after, as PyTorch's .to() keeps a tensor's layout: the
  // cast then reads and writes rows in order (a transposing cast moved GPT-2's weights at a
  // quarter of the bandwidth on the H200), and the product reads a K-contiguous operand.
  auto operand = [&](const Tensor& x) {
    if (x.dtype() != t && x.dim() >= 2 && !x.is_contiguous()) {
      const Tensor stored = x.t(loc);
      if (stored.is_contiguous()) return cast(stored, t, loc).t(loc);
    }
    return cast(x, t, loc);
  };
  Tensor a = operand(a0), b = operand(b0);
  // NumPy rules: a 1-D left operand is a row, a 1-D right operand a column; both dropped after.
  const bool row = a.dim() == 1, col = b.dim() == 1;
  if (row) a = a.unsqueeze(0, loc);
  if (col) b = b.unsqueeze(1, loc);
  Tensor out = matmul_nd(a, b, loc);
  if (col) out = out.squeeze(-1, loc);
  if (row) out = out.squeeze(col ? -1 : -2, loc);
  return out;
}

Tensor softmax(const Tensor& x0, int64_t dim, Loc loc) {
  Tensor x = float_operand(x0, "softmax", loc);
  int axis = static_cast<int>(normalize_axis(dim, x.dim(), "softmax", loc));
  Tensor out = make_node(OpId::Softmax, x.shape(), x.dtype(), {alias(x)}, AxisParams{axis, false}, loc);
  // The output cannot hold its own history; under create_graph it is recomputed from x.
  Tensor y = alias(out);
  return with_grad(out, "softmax", {x}, [x, y, axis](const Tensor& g) {
    Tensor yy = is_grad_enabled() ? softmax(x, axis) : y;
    return std::vector<Tensor>{yy * (g - sum(g * yy, {axis}, true))};
  });
}

Tensor log_softmax(const Tensor& x0, int64_t dim, Loc loc) {
  Tensor x = float_operand(x0, "log_softmax", loc);
  int axis = static_cast<int>(normalize_axis(dim, x.dim(), "log_softmax", loc));
  Tensor out = make_node(OpId::LogSoftmax, x.shape(), x.dtype(), {alias(x)}, AxisParams{axis, true}, loc);
  Tensor y = alias(out);
  return with_grad(out, "log_softmax", {x}, [x, y, axis](const Tensor& g) {
    Tensor yy = is_grad_enabled() ? log_softmax(x, axis) : y;
    return std::vector<Tensor>{g - exp(yy) * sum(g, {axis}, true)};
  });
}

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Loc loc) {
  check_defined(logits, "cross_entropy", loc);
  check_index(targets, "cross_entropy", loc);
  // 16-bit logits are read as they are (the kernel computes in f32): no widened copy.
  const Tensor x = is_floating(logits.dtype()) ? logits : cast(logits, DType::F32, loc);
  check(x.dim() == 2 && targets.dim() == 1 && targets.shape()[0] == x.shape()[0], "cross_entropy", loc,
        "expected logits [N, C] and targets [N], got ", to_string(x.shape()), " and ", to_string(targets.shape()));
  const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t classes = x.shape()[1];
  Tensor out = make_node(OpId::CrossEntropy, {x.shape()[0], 2}, acc, {alias(x), alias(targets)},
                         CrossEntropyParams{ignore_index}, loc);
  Tensor packed = alias(out), sx = x, st = targets;
  return with_grad(out, "cross_entropy", {x}, [sx, st, packed, ignore_index, classes, acc, loc](const Tensor& g) {
    if (!is_grad_enabled()) {
      // One kernel: d x = (g_nll + g_lse) softmax(x) - g_nll one_hot(target) per kept row.
      return std::vector<Tensor>{make_node(OpId::CrossEntropyBackward, sx.shape(), sx.dtype(),
                                           {alias(sx), alias(st), alias(packed), alias(g.to(acc))},
                                           CrossEntropyParams{ignore_index}, loc)};
    }
    // Under create_graph: the same formula composed of differentiable ops.
    const Tensor keep = ne(st, ignore_index).reshape({-1, 1});
    const Tensor g_nll = g.slice(1, 0, 1) * keep.to(g.dtype()), g_lse = g.slice(1, 1, 2);
    const Tensor target = one_hot(where(keep.reshape({-1}), st, int64_t{0}).to(DType::I64), classes).to(g.dtype());
    return std::vector<Tensor>{(softmax(sx.to(acc), 1) * (g_nll + g_lse) - target * g_nll).to(sx.dtype())};
  });
}

namespace {

// Checks normalized_shape against x's trailing dims; returns (leading axes, normalized axes).
std::pair<std::vector<int64_t>, std::vector<int64_t>> norm_axes(const Tensor& x, const Shape& normalized,
                                                                const char* op, Loc loc) {
  const int64_t k = static_cast<int64_t>(normalized.size());
  check(k >= 1 && k <= x.dim() && std::equal(normalized.begin(), normalized.end(), x.shape().end() - k), op, loc,
        "normalized_shape ", to_string(normalized), " does not match the trailing dims of input shape ",
        to_string(x.shape()));
  std::vector<int64_t> lead(static_cast<size_t>(x.dim() - k)), inner(static_cast<size_t>(k));
  std::iota(lead.begin(), lead.end(), 0);
  std::iota(inner.begin(), inner.end(), x.dim() - k);
  return {lead, inner};
}

Tensor affine_param(const Tensor& p, const Shape& normalized, double fill, DType t, const char* what,
                    const char* op, Loc loc) {
  if (!p.defined()) return full(normalized, fill, t);
  check(p.shape() == normalized, op, loc, what, " has shape ", to_string(p.shape()), ", expected ",
        to_string(normalized));
  return p;
}

}  // namespace

Tensor layer_norm(const Tensor& x0, Shape normalized, const Tensor& weight, const Tensor& bias, double eps,
                  Loc loc) {
  Tensor x = float_operand(x0, "layer_norm", loc);
  // Named variables, not a structured binding: lambdas below capture them (clang 14, which
  // the fuzzing build uses, cannot capture bindings).
  const auto axes = norm_axes(x, normalized, "layer_norm", loc);
  const std::vector<int64_t> lead = axes.first, inner_axes = axes.second;
  int64_t inner = 1;
  for (int64_t s : normalized) inner *= s;
  Tensor w = affine_param(weight, normalized, 1, x.dtype(), "weight", "layer_norm", loc);
  Tensor b = affine_param(bias, normalized, 0, x.dtype(), "bias", "layer_norm", loc);
  Tensor out = make_node(OpId::LayerNorm, x.shape(), x.dtype(), {alias(x), alias(w), alias(b)},
                         NormParams{inner, eps}, loc);
  Tensor sx = x, sw = w;
  // dx, dweight, dbias; the kernel's dx adds `pending` (the gradient x has received from its
  // other consumers) where that is defined (never under create_graph: declined below).
  auto rule = [sx, sw, lead, inner_axes, eps, inner, loc](const Tensor& g, const Tensor& pending) {
    if (!is_grad_enabled()) {
      // One kernel: dx, dweight and dbias packed as [rows + 2, inner], recomputing the
      // statistics from x (nothing but x was kept from the forward).
      const int64_t rows = sx.numel() / std::max<int64_t>(inner, 1);
      std::vector<Tensor> inputs{alias(sx), alias(sw), alias(g.to(sx.dtype()))};
      if (pending.defined()) inputs.push_back(pending);
      Tensor packed = make_node(OpId::LayerNormBackward, {rows + 2, inner}, sx.dtype(), inputs, NormParams{inner, eps}, loc);
      Shape wshape(sx.shape().end() - static_cast<int64_t>(inner_axes.size()), sx.shape().end());
      return std::vector<Tensor>{packed.slice(0, 0, rows).reshape(sx.shape()),
                                 packed.select(0, rows).reshape(wshape), packed.select(0, rows + 1).reshape(wshape)};
    }
    // Under create_graph: the same formulas composed of differentiable ops.
    Tensor mu = mean(sx, inner_axes, true);
    Tensor rstd = rsqrt(var(sx, inner_axes, 0, true) + eps);
    Tensor xhat = (sx - mu) * rstd;
    Tensor gx = g * sw;
    Tensor dx = rstd * (gx - mean(gx, inner_axes, true) - xhat * mean(gx * xhat, inner_axes, true));
    Tensor dw = lead.empty() ? g * xhat : sum(g * xhat, lead);
    Tensor db = lead.empty() ? g : sum(g, lead);
    return std::vector<Tensor>{dx, dw, db};
  };
  // Where the device's kernel adds a gradient into dx (Device::norm_backward_adds), the sum
  // x's other consumers sent it (a residual stream's) is folded into that kernel.
  return with_grad(
      out, "layer_norm", {x, weight, bias}, [rule](const Tensor& g) { return rule(g, Tensor()); }, 0,
      [rule, sx](const Tensor& g, const Tensor& pending) {
        if (is_grad_enabled() || !sx.device().norm_backward_adds() || &pending.device() != &sx.device() ||
            pending.dtype() != sx.dtype() || pending.shape() != sx.shape())
          return std::vector<Tensor>{};
        return rule(g, pending);
      });
}

Tensor rms_norm(const Tensor& x0, Shape normalized, const Tensor& weight, double eps, Loc loc) {
  Tensor x = float_operand(x0, "rms_norm", loc);
  // Named variables, not a structured binding: lambdas below capture them (clang 14, which
  // the fuzzing build uses, cannot capture bindings).
  const auto axes = norm_axes(x, normalized, "rms_norm", loc);
  const std::vector<int64_t> lead = axes.first, inner_axes = axes.second;
  int64_t inner = 1;
  for (int64_t s : normalized) inner *= s;
  Tensor w = affine_param(weight, normalized, 1, x.dtype(), "weight", "rms_norm", loc);
  Tensor out = make_node(OpId::RmsNorm, x.shape(), x.dtype(), {alias(x), alias(w)}, NormParams{inner, eps}, loc);
  Tensor sx = x, sw = w;
  return with_grad(out, "rms_norm", {x, weight}, [sx, sw, lead, inner_axes, eps](const Tensor& g) {
    Tensor rstd = rsqrt(mean(sx * sx, inner_axes, true) + eps);
    Tensor xhat = sx * rstd;
    Tensor gx = g * sw;
    Tensor dx = rstd * (gx - xhat * mean(gx * xhat, inner_axes, true));
    Tensor dw = lead.empty() ? g * xhat : sum(g * xhat, lead);
    return std::vector<Tensor>{dx, dw};
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Loc loc) {
  check_defined(x, "gather", loc);
  check_index(index, "gather", loc);
  check(index.dim() == x.dim(), "gather", loc, "index rank ", index.dim(), " (shape ", to_string(index.shape()),
        ") must equal input rank ", x.dim(), " (shape ", to_string(x.shape()), ")");
  int d = static_cast<int>(normalize_axis(dim, x.dim(), "gather", loc));
  for (int i = 0; i < x.dim(); ++i)
    check(i == d || index.shape()[i] <= x.shape()[i], "gather", loc, "index shape ", to_string(index.shape()),
          " exceeds input shape ", to_string(x.shape()), " at dim ", i);
  Tensor out = make_node(OpId::Gather, index.shape(), x.dtype(), {alias(x), alias(index)}, IndexParams{d}, loc);
  Tensor si = alias(index);
  Shape xs = x.shape();
  return with_grad(out, "gather", {x}, [si, xs, d](const Tensor& g) {
    return std::vector<Tensor>{scatter_add(zeros(xs, g.dtype()), d, si, g)};
  });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Loc loc) {
  check_defined(x, "index_select", loc);
  check_index(index, "index_select", loc);
  check(index.dim() <= 1, "index_select", loc, "index must be 1-D, got shape ", to_string(index.shape()));
  int d = static_cast<int>(normalize_axis(dim, x.dim(), "index_select", loc));
  Tensor idx = index.reshape({-1}, loc);
  Shape osh = x.shape();
  if (osh.empty()) osh.push_back(1);
  osh[d] = idx.numel();
  Tensor out = make_node(OpId::IndexSelect, osh, x.dtype(), {alias(x), alias(idx)}, IndexParams{d}, loc);
  Tensor si = alias(idx);
  Shape xs = x.shape();
  return with_grad(out, "index_select", {x}, [si, xs, d](const Tensor& g) {
    // Scatter g back along dim, with the 1-D index broadcast over the other dims.
    Shape ish(static_cast<size_t>(g.dim()), 1);
    ish[d] = si.numel();
    Tensor idx = si.reshape(ish).expand(g.shape());
    return std::vector<Tensor>{scatter_add(zeros(xs, g.dtype()), d, idx, g)};
  });
}

Tensor embedding(const Tensor& weight, const Tensor& ids, Loc loc) {
  check_defined(weight, "embedding", loc);
  check(weight.dim() == 2, "embedding", loc, "weight must be 2-D [num, dim], got shape ", to_string(weight.shape()));
  check_index(ids, "embedding", loc);
  Shape osh = ids.shape();
  osh.push_back(weight.shape()[1]);
  Tensor rows = index_select(weight, 0, ids.reshape({-1}, loc), loc);
  rows.impl()->node->name = "embedding";  // a bad id is reported as embedding's, at this call
  return rows.reshape(osh, loc);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Loc loc) {
  check_defined(x, "scatter_add", loc);
  check_defined(src, "scatter_add", loc);
  check_index(index, "scatter_add", loc);
  check(index.shape() == src.shape(), "scatter_add", loc, "index shape ", to_string(index.shape()),
        " must equal src shape ", to_string(src.shape()));
  check(index.dim() == x.dim(), "scatter_add", loc, "index rank ", index.dim(), " must equal input rank ", x.dim());
  int d = static_cast<int>(normalize_axis(dim, x.dim(), "scatter_add", loc));
  for (int i = 0; i < x.dim(); ++i)
    check(i == d || index.shape()[i] <= x.shape()[i], "scatter_add", loc, "index shape ",
          to_string(index.shape()), " exceeds input shape ", to_string(x.shape()), " at dim ", i);
  Tensor s = cast(src, x.dtype(), loc);
  Tensor out = make_node(OpId::ScatterAdd, x.shape(), x.dtype(), {alias(x), alias(index), alias(s)},
                         IndexParams{d}, loc);
  Tensor si = alias(index);
  return with_grad(out, "scatter_add", {x, index, s}, [si, d](const Tensor& g) {
    return std::vector<Tensor>{g, Tensor(), gather(g, d, si)};
  });
}

Tensor one_hot(const Tensor& ids, int64_t num_classes, Loc loc) {
  check_index(ids, "one_hot", loc);
  if (num_classes < 0) num_classes = ids.numel() ? static_cast<int64_t>(max(ids).item()) + 1 : 0;
  check(num_classes > 0, "one_hot", loc, "num_classes must be positive, got ", num_classes);
  Shape osh = ids.shape();
  osh.push_back(num_classes);
  return make_node(OpId::OneHot, osh, DType::I64, {alias(ids)}, OneHotParams{num_classes}, loc);
}

namespace {
Tensor tri(const Tensor& x, int64_t k, bool upper, Loc loc) {
  const char* name = upper ? "triu" : "tril";
  check_defined(x, name, loc);
  check(x.dim() >= 2, name, loc, "needs a tensor of rank >= 2, got shape ", to_string(x.shape()));
  Tensor out = make_node(OpId::Tri, x.shape(), x.dtype(), {alias(x)}, TriParams{k, upper}, loc);
  return with_grad(out, name, {x}, [k, upper](const Tensor& g) {
    return std::vector<Tensor>{upper ? triu(g, k) : tril(g, k)};
  });
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k, Loc loc) { return tri(x, k, false, loc); }
Tensor triu(const Tensor& x, int64_t k, Loc loc) { return tri(x, k, true, loc); }

namespace {
Tensor cumsum_dir(const Tensor& x0, int axis, bool reverse, Loc loc) {
  Tensor x = is_floating(x0.dtype()) ? x0 : cast(x0, DType::I64, loc);
  Tensor out = make_node(OpId::Cumsum, x.shape(), x.dtype(), {alias(x)}, AxisParams{axis, reverse}, loc);
  return with_grad(out, "cumsum", {x}, [axis, reverse, loc](const Tensor& g) {
    return std::vector<Tensor>{cumsum_dir(g, axis, !reverse, loc)};
  });
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, Loc loc) {
  check_defined(x, "cumsum", loc);
  Tensor xx = x.dim() == 0 ? x.reshape({1}, loc) : x;
  int axis = static_cast<int>(normalize_axis(dim, xx.dim(), "cumsum", loc));
  Tensor out = cumsum_dir(xx, axis, false, loc);
  return x.dim() == 0 ? out.reshape({}, loc) : out;
}

Tensor pad(const Tensor& x, std::vector<int64_t> pads, double value, Loc loc) {
  check_defined(x, "pad", loc);
  check(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) <= 2 * x.dim(), "pad", loc,
        "pads must hold (before, after) pairs for at most ", x.dim(), " dims, got ", to_string(pads));
  // Convert from last-dim-first pairs to one (before, after) pair per dim in dim order.
  std::vector<int64_t> full(2 * static_cast<size_t>(x.dim()), 0);
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    size_t d = static_cast<size_t>(x.dim()) - 1 - p;
    full[2 * d] = pads[2 * p];
    full[2 * d + 1] = pads[2 * p + 1];
  }
  Shape osh = x.shape();
  for (size_t d = 0; d < osh.size(); ++d) {
    osh[d] += full[2 * d] + full[2 * d + 1];
    check(osh[d] >= 0, "pad", loc, "padding ", to_string(pads), " makes dim ", d, " of shape ",
          to_string(x.shape()), " negative");
  }
  Tensor out = make_node(OpId::Pad, osh, x.dtype(), {alias(x)}, PadParams{full, value}, loc);
  std::vector<int64_t> negated = pads;
  for (int64_t& p : negated) p = -p;
  return with_grad(out, "pad", {x}, [negated](const Tensor& g) { return std::vector<Tensor>{pad(g, negated)}; });
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  check(!xs.empty(), "cat", loc, "needs at least one tensor");
  for (const Tensor& x : xs) check_defined(x, "cat", loc);
  const Tensor& first = xs[0];
  check(first.dim() >= 1, "cat", loc, "zero-dimensional tensors cannot be concatenated");
  int d = static_cast<int>(normalize_axis(dim, first.dim(), "cat", loc));
  DType t = first.dtype();
  Shape osh = first.shape();
  osh[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    check(x.dim() == first.dim(), "cat", loc, "tensor ", i, " has rank ", x.dim(), " but tensor 0 has rank ",
          first.dim());
    for (int k = 0; k < first.dim(); ++k)
      check(k == d || x.shape()[k] == first.shape()[k], "cat", loc, "tensor ", i, " has shape ",
            to_string(x.shape()), " but tensor 0 has shape ", to_string(first.shape()), " (dim ", k,
            " differs; only dim ", d, " may)");
    osh[d] += x.shape()[d];
    t = promote(t, x.dtype());
  }
  std::vector<Tensor> inputs;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    inputs.push_back(alias(cast(x, t, loc)));
    sizes.push_back(x.shape()[d]);
  }
  Tensor out = make_node(OpId::Concat, osh, t, inputs, IndexParams{d}, loc);
  return with_grad(out, "cat", xs, [sizes, d](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t s : sizes) {
      grads.push_back(g.slice(d, at, at + s));
      at += s;
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  check(!xs.empty(), "stack", loc, "needs at least one tensor");
  int64_t d = normalize_axis(dim, xs[0].dim() + 1, "stack", loc);
  std::vector<Tensor> us;
  for (size_t i = 0; i < xs.size(); ++i) {
    check(xs[i].defined() && xs[i].shape() == xs[0].shape(), "stack", loc, "tensor ", i, " has shape ",
          xs[i].defined() ? to_string(xs[i].shape()) : "undefined", " but tensor 0 has shape ",
          to_string(xs[0].shape()));
    us.push_back(xs[i].unsqueeze(d, loc));
  }
  return cat(us, d, loc);
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim, Loc loc) {
  check_defined(x, "split", loc);
  check(size > 0, "split", loc, "split size must be positive, got ", size);
  int64_t d = normalize_axis(dim, x.dim(), "split", loc);
  std::vector<Tensor> out;
  for (int64_t at = 0; at < x.shape()[d]; at += size) out.push_back(x.slice(d, at, at + size, 1, loc));
  if (out.empty()) out.push_back(x.slice(d, 0, 0, 1, loc));  // an empty dim splits into one empty piece
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, Loc loc) {
  check_defined(x, "chunk", loc);
  check(chunks > 0, "chunk", loc, "number of chunks must be positive, got ", chunks);
  int64_t d = normalize_axis(dim, x.dim(), "chunk", loc);
  int64_t n = x.shape()[d];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), d, loc);
}

}  // namespace alk
