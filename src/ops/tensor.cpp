// Tensor accessors and views. A view makes a new handle over the same node with new
// geometry; nothing is copied or computed. Each view records its backward rule.
#include <algorithm>
#include <numeric>

#include "core/element.h"
#include "graph/autograd.h"
#include "graph/trace.h"
#include "ops/ops.h"

namespace alk {

const Shape& Tensor::shape() const { return impl_->shape; }
const Shape& Tensor::strides() const { return impl_->strides; }
int64_t Tensor::offset() const { return impl_->offset; }
int64_t Tensor::dim() const { return static_cast<int64_t>(impl_->shape.size()); }
int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : impl_->shape) n *= s;
  return n;
}
int64_t Tensor::size(int64_t d, Loc loc) const { return impl_->shape[normalize_axis(d, dim(), "size", loc)]; }
DType Tensor::dtype() const { return impl_->dtype; }
bool Tensor::is_realized() const { return impl_->node->realized(); }
Device& Tensor::device() const { return *impl_->node->device; }
bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expect) return false;
    expect *= impl_->shape[i];
  }
  return true;
}

bool Tensor::requires_grad() const { return impl_->requires_grad; }
Tensor& Tensor::requires_grad_(bool on, Loc loc) {
  check(is_floating(dtype()), "requires_grad_", loc, "only floating tensors can require grad; got ",
        dtype_name(dtype()));
  check(!impl_->grad_fn, "requires_grad_", loc, "only leaf tensors can change requires_grad; use detach()");
  impl_->requires_grad = on;
  return *this;
}
Tensor Tensor::grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
void Tensor::zero_grad() const { impl_->grad.reset(); }
Tensor Tensor::detach() const { return alias(*this); }
bool Tensor::is_leaf() const { return !impl_->grad_fn; }

const Tensor& Tensor::realize() const {
  realize_all({impl_.get()});
  return *this;
}

void realize(const std::vector<Tensor>& ts) {
  std::vector<TensorImpl*> impls;
  for (const Tensor& t : ts)
    if (t.defined()) impls.push_back(t.impl());
  realize_all(impls);
}

template <class T>
std::vector<T> Tensor::to_vector(Loc loc) const {
  check(defined(), "to_vector", loc, "undefined tensor");
  const std::vector<unsigned char> bytes = host_bytes(*this);
  std::vector<T> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    if constexpr (std::is_integral_v<T>)
      out[i] = static_cast<T>(load_as_int(bytes.data(), dtype(), i));
    else
      out[i] = static_cast<T>(load_as_double(bytes.data(), dtype(), i));
  }
  return out;
}
template std::vector<float> Tensor::to_vector(Loc) const;
template std::vector<double> Tensor::to_vector(Loc) const;
template std::vector<int32_t> Tensor::to_vector(Loc) const;
template std::vector<int64_t> Tensor::to_vector(Loc) const;
template std::vector<uint8_t> Tensor::to_vector(Loc) const;

double Tensor::item(Loc loc) const {
  check(defined(), "item", loc, "undefined tensor");
  if (!(numel() == 1))
    fail("item", loc, "only one-element tensors can be converted to a number; got shape ", to_string(shape()));
  return to_vector<double>(loc)[0];
}

// ---- views ----

namespace {

// Strides for viewing (shape, strides) as new_shape without a copy, if possible. Walk
// the old dims from the innermost, cutting them into chunks that are contiguous within
// themselves; each chunk must be covered exactly by a run of new dims.
std::optional<Shape> view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  Shape out(new_shape.size(), 1);
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (numel == 0 || shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = strides.back(), chunk_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    chunk_numel *= shape[d];
    bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || new_shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Checks whose messages format shapes are written `if (!ok) fail(...)`: check() would build the
// strings on every call (every reshape, view and expand), not only when it fails.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, Loc loc) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1) {
      if (!(infer < 0)) fail(op, loc, "only one dimension can be -1 in ", to_string(shape));
      infer = static_cast<int64_t>(d);
    } else {
      if (!(out[d] >= 0)) fail(op, loc, "invalid size ", out[d], " in ", to_string(shape));
      known *= out[d];
    }
  }
  if (infer >= 0) {
    if (!(known != 0 && numel % known == 0))
      fail(op, loc, "cannot infer -1 in shape ", to_string(shape), " for ", numel, " elements");
    out[infer] = numel / known;
  } else {
    if (!(known == numel)) fail(op, loc, "shape ", to_string(shape), " is invalid for input of ", numel, " elements");
  }
  return out;
}

}  // namespace

Tensor Tensor::view(Shape new_shape, Loc loc) const {
  check_defined(*this, "view", loc);
  new_shape = infer_shape(new_shape, numel(), "view", loc);
  auto strides = view_strides(shape(), this->strides(), new_shape);
  if (!(strides.has_value()))
    fail("view", loc, "cannot view a tensor of shape ", to_string(shape()), " and strides ", to_string(this->strides()),
         " as ", to_string(new_shape), ": call reshape() (it copies)");
  Tensor out = make_view(*this, new_shape, *strides, offset());
  Shape old = shape();
  return with_grad(out, "view", {*this}, [old](const Tensor& g) { return std::vector<Tensor>{g.reshape(old)}; });
}

Tensor Tensor::reshape(Shape new_shape, Loc loc) const {
  check_defined(*this, "reshape", loc);
  new_shape = infer_shape(new_shape, numel(), "reshape", loc);
  if (view_strides(shape(), strides(), new_shape)) return view(new_shape, loc);
  return contiguous(loc).view(new_shape, loc);
}

Tensor Tensor::permute(std::vector<int64_t> dims, Loc loc) const {
  check_defined(*this, "permute", loc);
  if (!(static_cast<int64_t>(dims.size()) == dim()))
    fail("permute", loc, "got ", dims.size(), " dims for a tensor of rank ", dim(), " (shape ", to_string(shape()),
         ")");
  std::vector<bool> seen(dims.size(), false);
  Shape sh(dims.size()), st(dims.size());
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_axis(dims[i], dim(), "permute", loc);
    if (!(!seen[d])) fail("permute", loc, "dim ", dims[i], " repeated in ", to_string(dims));
    seen[d] = true;
    sh[i] = shape()[d];
    st[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(*this, sh, st, offset());
  return with_grad(out, "permute", {*this},
                   [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1, Loc loc) const {
  check_defined(*this, "transpose", loc);
  d0 = normalize_axis(d0, dim(), "transpose", loc);
  d1 = normalize_axis(d1, dim(), "transpose", loc);
  std::vector<int64_t> dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[d0], dims[d1]);
  return permute(dims, loc);
}

Tensor Tensor::t(Loc loc) const {
  check(defined() && dim() >= 2, "t", loc, "needs a tensor of rank >= 2");
  return transpose(-2, -1, loc);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step, Loc loc) const {
  check_defined(*this, "slice", loc);
  d = normalize_axis(d, dim(), "slice", loc);
  check(step > 0, "slice", loc, "step must be positive; got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = shape(), st = strides();
  sh[d] = (end - start + step - 1) / step;
  st[d] = strides()[d] * step;
  Tensor out = make_view(*this, sh, st, offset() + start * strides()[d]);
  Shape in_shape = shape();
  int dim_ = static_cast<int>(d);
  return with_grad(out, "slice", {*this}, [in_shape, dim_, start, step, loc](const Tensor& g) {
    if (g.shape()[dim_] == 1) {
      // One position (a select): the gradient is g broadcast along dim where the position
      // is `start`, else 0, an elementwise expression. The gradients of several selects of
      // one tensor (the q, k, v split of a fused projection) then fuse, with their sum, into
      // one kernel, instead of a scatter into zeros per select and adds.
      Shape at(in_shape.size(), 1);
      at[static_cast<size_t>(dim_)] = in_shape[static_cast<size_t>(dim_)];
      DeviceGuard on(g.device());  // the positions are made where the gradient lives
      Tensor hit = eq(arange(in_shape[static_cast<size_t>(dim_)], loc).reshape(at, loc), static_cast<double>(start), loc);
      return std::vector<Tensor>{where(hit, g.expand(in_shape, loc), 0.0, loc)};
    }
    Tensor gc = g.contiguous();
    Tensor r = make_node(OpId::SliceScatter, in_shape, g.dtype(), {gc}, SliceScatterParams{dim_, start, step}, loc);
    // The scatter's own gradient (double backward) is the same slice of its gradient.
    const int64_t len = g.shape()[dim_];
    return std::vector<Tensor>{with_grad(r, "slice_backward", {gc}, [dim_, start, step, len](const Tensor& gg) {
      return std::vector<Tensor>{gg.slice(dim_, start, start + step * std::max<int64_t>(len - 1, 0) + 1, step)};
    })};
  });
}

Tensor Tensor::select(int64_t d, int64_t index, Loc loc) const {
  check_defined(*this, "select", loc);
  d = normalize_axis(d, dim(), "select", loc);
  const int64_t n = shape()[d];
  check(index >= -n && index < n, "select", loc, "index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return slice(d, index, index + 1, 1, loc).squeeze(d, loc);
}

Tensor Tensor::expand(Shape new_shape, Loc loc) const {
  check_defined(*this, "expand", loc);
  if (!(new_shape.size() >= shape().size()))
    fail("expand", loc, "cannot expand shape ", to_string(shape()), " to ", to_string(new_shape), ": fewer dims");
  const size_t lead = new_shape.size() - shape().size();
  Shape st(new_shape.size(), 0);
  for (size_t i = 0; i < new_shape.size(); ++i) {
    if (i < lead) {
      check(new_shape[i] >= 0, "expand", loc, "new leading dim ", i, " must be sized, got ", new_shape[i]);
      continue;
    }
    int64_t have = shape()[i - lead];
    if (new_shape[i] == -1) new_shape[i] = have;
    if (!(have == new_shape[i] || have == 1))
      fail("expand", loc, "cannot expand shape ", to_string(shape()), " to ", to_string(new_shape), ": dim ", i,
           " has size ", have, " (only size 1 can expand)");
    st[i] = have == new_shape[i] ? strides()[i - lead] : 0;
  }
  Tensor out = make_view(*this, new_shape, st, offset());
  Shape old = shape();
  return with_grad(out, "expand", {*this}, [old](const Tensor& g) { return std::vector<Tensor>{sum_to(g, old)}; });
}

Tensor broadcast_to(const Tensor& x, Shape shape, Loc loc) { return x.expand(std::move(shape), loc); }

Tensor Tensor::squeeze(Loc loc) const {
  check_defined(*this, "squeeze", loc);
  Shape sh;
  for (int64_t s : shape())
    if (s != 1) sh.push_back(s);
  return view(sh, loc);
}

Tensor Tensor::squeeze(int64_t d, Loc loc) const {
  check_defined(*this, "squeeze", loc);
  d = normalize_axis(d, dim(), "squeeze", loc);
  if (shape()[d] != 1) return *this;
  Shape sh = shape();
  sh.erase(sh.begin() + d);
  return view(sh, loc);
}

Tensor Tensor::unsqueeze(int64_t d, Loc loc) const {
  check_defined(*this, "unsqueeze", loc);
  d = normalize_axis(d, dim() + 1, "unsqueeze", loc);
  Shape sh = shape();
  sh.insert(sh.begin() + d, 1);
  return view(sh, loc);
}

Tensor Tensor::flatten(int64_t start, int64_t end, Loc loc) const {
  check_defined(*this, "flatten", loc);
  if (dim() == 0) return reshape({1}, loc);
  start = normalize_axis(start, dim(), "flatten", loc);
  end = normalize_axis(end, dim(), "flatten", loc);
  check(start <= end, "flatten", loc, "start dim ", start, " is after end dim ", end);
  Shape sh(shape().begin(), shape().begin() + start);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d) n *= shape()[d];
  sh.push_back(n);
  sh.insert(sh.end(), shape().begin() + end + 1, shape().end());
  return reshape(sh, loc);
}

Tensor Tensor::contiguous(Loc loc) const {
  check_defined(*this, "contiguous", loc);
  if (is_contiguous() && offset() == 0 && numel() == impl_->node->numel()) return *this;
  expr::Builder b;
  int root = b.input(0, compute_type(dtype()));
  Tensor out = make_node(OpId::Map, shape(), dtype(), {alias(*this)}, MapParams{b.finish(root)}, loc);
  return with_grad(out, "contiguous", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::to(DType t, Loc loc) const { return cast(*this, t, loc); }

Tensor Tensor::to(Device& target, Loc loc) const {
  check_defined(*this, "to", loc);
  if (&target == &device()) return *this;
  // The copy node reads its input's elements in order: a strided view is made contiguous
  // on its own device first. Built by hand: make_node would refuse the two devices.
  Tensor src = contiguous(loc);
  auto node = std::make_shared<Node>();
  node->op = OpId::ToDevice;
  node->shape = shape();
  node->dtype = dtype();
  node->loc = loc;
  node->device = &target;
  node->inputs.push_back(alias(src).impl_ptr());
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape());
  impl->shape = shape();
  impl->dtype = dtype();
  impl->node = std::move(node);
  Tensor out(std::move(impl));
  if (eager_mode()) out.realize();
  Device* source = &device();
  return with_grad(out, "to", {*this}, [source, loc](const Tensor& g) { return std::vector<Tensor>{g.to(*source, loc)}; });
}

Tensor Tensor::to(std::string_view name, Loc loc) const { return to(get_device(name, loc), loc); }

Tensor& Tensor::assign_(const Tensor& value, Loc loc) {
  check_defined(*this, "assign_", loc);
  check_defined(value, "assign_", loc);
  if (!(value.shape() == shape() && value.dtype() == dtype()))
    fail("assign_", loc, "cannot assign a ", dtype_name(value.dtype()), " tensor of shape ", to_string(value.shape()),
         " to a ", dtype_name(dtype()), " tensor of shape ", to_string(shape()));
  check(&value.device() == &device(), "assign_", loc, "cannot assign a tensor on ", value.device().name(),
        " to a tensor on ", device().name(), "; move it with .to(device) first");
  if (TraceRecorder* trace = active_trace();
      trace && trace->seen.insert(impl_.get()).second && is_realized() && !trace->produced.count(impl_->node->buffer.get()))
    trace->assigned.push_back({impl_, impl_->node, impl_->strides, impl_->offset});
  impl_->node = value.impl()->node;
  impl_->strides = value.impl()->strides;
  impl_->offset = value.impl()->offset;
  return *this;
}

// ---- shared checks ----

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op, Loc loc) {
  int64_t r = std::max<int64_t>(rank, 1);
  check(axis >= -r && axis < r, op, loc, "dim ", axis, " is out of range for a tensor of rank ", rank,
        " (expected in [", -r, ", ", r - 1, "])");
  return axis < 0 ? axis + r : axis;
}

std::vector<int> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op, Loc loc) {
  std::vector<int> out;
  for (int64_t a : axes) {
    int d = static_cast<int>(normalize_axis(a, rank, op, loc));
    if (!(std::find(out.begin(), out.end(), d) == out.end()))
      fail(op, loc, "dim ", a, " repeated in ", to_string(axes));
    out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void check_defined(const Tensor& t, const char* op, Loc loc) { check(t.defined(), op, loc, "undefined tensor"); }

void check_floating(const Tensor& t, const char* op, Loc loc) {
  check_defined(t, op, loc);
  check(is_floating(t.dtype()), op, loc, "expected a floating tensor, got ", dtype_name(t.dtype()));
}

Shape broadcast_shapes(const Shape& a, const Shape& b, Loc loc) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (!(x == y || x == 1 || y == 1))
      fail("broadcast", loc, "shapes ", to_string(a), " and ", to_string(b), " are not broadcastable (dim ", i, ": ", x,
           " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

}  // namespace alk
