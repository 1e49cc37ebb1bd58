// alk.Tensor: properties, numpy in and out, Python indexing, in-place operators and repr.
#include <pybind11/numpy.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "alk/dtype.h"
#include "alk/kernel.h"
#include "graph/autograd.h"
#include "common.h"
#include "tensor_util.h"

namespace alkpy {

using alk::DType;
using alk::Tensor;

// ---- numpy ----

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::Bool: return py::dtype("bool");
    case DType::U8: return py::dtype("uint8");
    case DType::I32: return py::dtype("int32");
    case DType::I64: return py::dtype("int64");
    case DType::F16: return py::dtype("float16");
    case DType::BF16: return py::dtype("float32");  // numpy has no bfloat16: values widen
    case DType::F32: return py::dtype("float32");
    case DType::F64: return py::dtype("float64");
  }
  return py::dtype("float32");
}

std::optional<DType> dtype_of_numpy(const py::dtype& d) {
  char kind = d.kind();
  auto size = d.itemsize();
  if (kind == 'b') return DType::Bool;
  if (kind == 'u' && size == 1) return DType::U8;
  if (kind == 'i' && size == 4) return DType::I32;
  if (kind == 'i' && size == 8) return DType::I64;
  if (kind == 'f' && size == 2) return DType::F16;
  if (kind == 'f' && size == 4) return DType::F32;
  if (kind == 'f' && size == 8) return DType::F64;
  return std::nullopt;
}

Tensor from_numpy(const py::array& in) {
  std::optional<DType> t = dtype_of_numpy(in.dtype());
  if (!t)
    raise_type("from_numpy: numpy dtype " + py::str(in.dtype()).cast<std::string>() +
               " has no alk dtype (supported: bool, uint8, int32, int64, float16, float32, float64)");
  // One copy into an alk buffer (alk's buffers own their memory; see python/README).
  py::array a = py::array::ensure(in, py::array::c_style | py::array::forcecast);
  alk::Shape shape(a.shape(), a.shape() + a.ndim());
  size_t bytes = static_cast<size_t>(a.nbytes());
  const void* data = a.data();
  Released r;
  return alk::from_bytes(data, bytes, shape, *t);
}

// A numpy array over the tensor's own buffer (no copy) for every dtype numpy has; bf16
// widens to a float32 copy. The array keeps the buffer alive; writes through it are
// visible to every tensor viewing that buffer (as with torch's .numpy()).
py::array to_numpy(const Tensor& x) {
  Tensor t = x;
  if (t.dtype() == DType::BF16) {
    Released r;
    t = alk::cast(x, DType::F32);
  }
  {
    Released r;
    t.realize();
  }
  const alk::TensorImpl* impl = t.impl();
  std::vector<py::ssize_t> shape(impl->shape.begin(), impl->shape.end()), strides;
  const auto item = static_cast<py::ssize_t>(alk::dtype_size(t.dtype()));
  for (int64_t s : impl->strides) strides.push_back(s * item);
  auto buffer = impl->node->buffer;
  if (!buffer || t.numel() == 0) return py::array(numpy_dtype(t.dtype()), shape);
  if (buffer->device != &alk::cpu_device()) {
    // Device memory: one download into a new array.
    std::vector<unsigned char> bytes;
    {
      Released r;
      bytes = alk::host_bytes(t);
    }
    py::array out(numpy_dtype(t.dtype()), shape);
    std::memcpy(out.mutable_data(), bytes.data(), bytes.size());
    return out;
  }
  // The CPU's memory has a host address (Device::address): the array views it in place and
  // holds the Buffer alive.
  char* data = static_cast<char*>(buffer->device->address(*buffer, static_cast<size_t>(impl->offset * item)));
  auto* keep = new std::shared_ptr<alk::Buffer>(buffer);
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<alk::Buffer>*>(p); });
  py::array out(numpy_dtype(t.dtype()), shape, strides, data, owner);
  // A broadcast (stride 0 over more than one element: alk.zeros is one value viewed that
  // way) comes out read-only: a write would land in every element.
  for (size_t d = 0; d < shape.size(); ++d)
    if (strides[d] == 0 && shape[d] > 1) {
      out.attr("flags").attr("writeable") = false;
      break;
    }
  return out;
}

Tensor tensor_from_python(const py::handle& data, std::optional<DType> dtype, bool requires_grad) {
  Tensor out;
  if (py::isinstance<alk::TensorImpl>(data)) {
    Tensor src = data.cast<Tensor>();
    Released r;
    out = alk::cast(src.detach(), dtype.value_or(src.dtype())).contiguous();
    if (out.impl() == src.impl()) out = src.detach().reshape(src.shape());
  } else {
    bool was_array = py::isinstance<py::array>(data);
    py::array a = py::array::ensure(py::module_::import("numpy").attr("asarray")(data));
    if (!a) raise_type("tensor: cannot make a tensor from " + py::str(py::type::handle_of(data)).cast<std::string>());
    // Python floats default to float32 as in torch.tensor; numpy arrays keep their dtype.
    if (!was_array && a.dtype().kind() == 'f') a = py::array::ensure(a.attr("astype")("float32"));
    out = from_numpy(a);
    if (dtype && *dtype != out.dtype()) {
      Released r;
      out = alk::cast(out, *dtype);
    }
  }
  if (requires_grad) {
    Released r;
    out.realize();
    out.requires_grad_(true);
  }
  return out;
}

// ---- aliasing: writes through views reach their base (PyTorch's storage sharing) ----
//
// alk's graph is functional: a view shares its base's Node, and assign_ points one handle at
// a new node. PyTorch's model is shared storage: a write through a view changes the base and
// every other view of it. The bindings keep that model on top of the graph. The Node plays
// the storage: the tensors made from Python that share one (a base and its views from
// indexing, view/reshape/transpose..., detach and .data) are recorded as one group. A write
// to any of them computes the node's new contents (the old ones with the written positions
// replaced) as a new node, and every live member of the group is pointed at it with its own
// geometry (strides and offset count elements of the node), so later reads of every alias
// see the write. Members are held weakly: the group never keeps a tensor alive. All of it
// runs with the GIL held.

namespace {

struct Member {
  std::weak_ptr<alk::TensorImpl> self;
  bool detached = false;  // made through detach()/.data: writes through it record no autograd
  const alk::Node* node = nullptr;  // the node it shared when it joined (compared, never read)
};

// Groups by the node their members share; member records by tensor.
std::unordered_map<const alk::Node*, std::vector<Member>>& groups() {
  static auto* g = new std::unordered_map<const alk::Node*, std::vector<Member>>();
  return *g;
}

std::unordered_map<const alk::TensorImpl*, Member>& members() {
  static auto* m = new std::unordered_map<const alk::TensorImpl*, Member>();
  return *m;
}

// The member record of t, if t is a live member of its node's group.
const Member* member_of(const alk::TensorImpl* t) {
  auto& all = members();
  auto it = all.find(t);
  if (it == all.end()) return nullptr;
  if (it->second.self.lock().get() != t) {
    all.erase(it);
    return nullptr;
  }
  auto g = groups().find(t->node.get());
  if (g == groups().end()) return nullptr;
  for (const Member& m : g->second)
    if (m.self.lock().get() == t) return &it->second;
  return nullptr;
}

// The live members of t's node's group (t's node as they read it).
std::vector<std::pair<std::shared_ptr<alk::TensorImpl>, bool>> live_members(const alk::Node* node) {
  std::vector<std::pair<std::shared_ptr<alk::TensorImpl>, bool>> out;
  auto g = groups().find(node);
  if (g == groups().end()) return out;
  for (const Member& m : g->second)
    if (auto p = m.self.lock(); p && p->node.get() == node) out.emplace_back(p, m.detached);
  return out;
}

void prune_dead_records() {
  auto& all = members();
  for (auto it = all.begin(); it != all.end();) it = it->second.self.expired() ? all.erase(it) : std::next(it);
  auto& gs = groups();
  for (auto it = gs.begin(); it != gs.end();) {
    auto& v = it->second;
    const alk::Node* node = it->first;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [node](const Member& m) {
                             auto p = m.self.lock();
                             return !p || p->node.get() != node;
                           }),
            v.end());
    it = v.size() < 2 ? gs.erase(it) : std::next(it);
  }
}

void add_member(const Tensor& t, bool detached) {
  static size_t added = 0;
  if (++added % 4096 == 0) prune_dead_records();
  const alk::Node* node = t.impl()->node.get();
  members()[t.impl()] = Member{t.impl_ptr(), detached, node};
  std::vector<Member>& group = groups()[node];
  // A base sliced every step (a dataset's batches) gathers dead views: dropped as the group
  // doubles, so finding a member stays proportional to the live ones.
  if (group.size() >= 64 && (group.size() & (group.size() - 1)) == 0)
    group.erase(std::remove_if(group.begin(), group.end(),
                               [node](const Member& m) {
                                 auto p = m.self.lock();
                                 return !p || p->node.get() != node;
                               }),
                group.end());
  group.push_back(Member{t.impl_ptr(), detached, node});
}

bool broadcasts(const alk::TensorImpl* t) {
  for (size_t d = 0; d < t->shape.size(); ++d)
    if (t->strides[d] == 0 && t->shape[d] > 1) return true;
  return false;
}

// Whether t reads its node's elements in the node's own order (offset 0, row-major, all of them).
bool views_whole_node(const alk::TensorImpl* t) {
  if (t->offset != 0 || t->strides != alk::contiguous_strides(t->shape)) return false;
  int64_t n = 1;
  for (int64_t d : t->shape) n *= d;
  return n == t->node->numel();
}

}  // namespace

void prepare_base(const Tensor& base) {
  if (!base.defined() || member_of(base.impl())) return;
  alk::TensorImpl* t = base.impl();
  int64_t n = 1;
  for (int64_t d : t->shape) n *= d;
  if (!broadcasts(t) && n <= t->node->numel()) return;
  // A broadcast (zeros() is one value viewed that way) has no element of its own to write:
  // its values move into a node of its own first, as PyTorch allocates them.
  Released r;
  Tensor(base.impl_ptr()).assign_(base.contiguous());
}

void follow_assignment(const Tensor& t) {
  if (!t.defined()) return;
  auto rec = members().find(t.impl());
  if (rec == members().end() || rec->second.self.lock().get() != t.impl()) return;
  const alk::Node* old = rec->second.node;
  const alk::Node* now = t.impl()->node.get();
  if (old == now || !views_whole_node(t.impl())) return;
  auto g = groups().find(old);
  if (g == groups().end()) return;
  // The members still on the old node read the new one, with their geometry (the assignment
  // kept the node's size and order: t views all of it in order).
  std::vector<std::pair<std::shared_ptr<alk::TensorImpl>, bool>> movers;
  for (const Member& m : g->second)
    if (auto p = m.self.lock(); p && (p->node.get() == old || p.get() == t.impl()))
      if (p->node->numel() == t.impl()->node->numel()) movers.emplace_back(p, m.detached);
  groups().erase(g);
  {
    Released r;  // the handles change under alk's lock; the records below under the GIL
    for (auto& [p, detached] : movers) p->node = t.impl()->node;
  }
  std::vector<Member> moved;
  for (auto& [p, detached] : movers) {
    moved.push_back(Member{p, detached, now});
    members()[p.get()].node = now;
  }
  if (moved.size() > 1) groups()[now] = std::move(moved);
}

void track_view(const Tensor& base, const Tensor& view, bool detached) {
  if (!base.defined() || !view.defined() || view.impl() == base.impl()) return;
  if (view.impl()->node != base.impl()->node) return;  // a copy (reshape of a strided tensor)
  if (const Member* m = member_of(base.impl()))
    detached = detached || m->detached;
  else
    add_member(base, false);
  add_member(view, detached);
}

// ---- in place ----

namespace {

void check_assignable(const Tensor& self, const Tensor& value, const char* op) {
  if (value.shape() != self.shape() && alk::broadcast_shapes(value.shape(), self.shape()) != self.shape())
    raise_runtime(std::string(op) + ": the result of shape " + alk::to_string(value.shape()) +
                  " does not fit the tensor of shape " + alk::to_string(self.shape()));
  if (value.dtype() != self.dtype() && alk::is_floating(value.dtype()) && !alk::is_floating(self.dtype()))
    raise_runtime(std::string(op) + ": result type " + std::string(alk::dtype_name(value.dtype())) +
                  " can't be cast to the tensor's dtype " + std::string(alk::dtype_name(self.dtype())));
}

// The flat node positions a tensor with this geometry reads.
Tensor node_positions(int64_t n, const alk::Shape& shape, const alk::Shape& strides, int64_t offset) {
  Tensor all = alk::arange(0, static_cast<double>(n), 1, DType::I64).contiguous();
  return alk::make_view(all, shape, strides, offset).reshape({-1});
}

// A write to a member of a group: the node's new contents, then every member re-pointed.
void assign_shared(const Tensor& self, const Tensor& value_in, bool self_detached,
                   const std::vector<std::pair<std::shared_ptr<alk::TensorImpl>, bool>>& group, const char* op) {
  Tensor value = value_in;
  const bool record_grad = !self_detached && alk::is_grad_enabled();
  if (record_grad)
    for (const auto& [m, detached] : group)
      if (!detached && m->requires_grad && !m->grad_fn)
        raise_runtime(std::string(op) + (m.get() == self.impl() ? ": a leaf tensor" : ": a view of a leaf tensor") +
                      " that requires grad is used in an in-place operation (wrap it in alk.no_grad())");
  if (broadcasts(self.impl()))
    raise_runtime(std::string(op) +
                  ": unsupported operation: more than one element of the written-to tensor refers to a single "
                  "memory location (an expanded view); clone() it first");
  check_assignable(self, value, op);
  const std::shared_ptr<alk::Node> old_node = self.impl()->node;
  Tensor merged;
  {
    Released r;
    const alk::Shape node_shape = old_node->shape;
    const int64_t n = old_node->numel();
    if (value.shape() != self.shape()) value = alk::broadcast_to(value, self.shape());
    if (value.dtype() != self.dtype()) value = alk::cast(value, self.dtype());
    if (!record_grad) value = value.detach();
    // The old contents, with autograd from the member that reads the whole node in order (the
    // base), when grad is recorded and there is one.
    Tensor old = alk::make_view(self, node_shape, alk::contiguous_strides(node_shape), 0);
    if (record_grad)
      for (const auto& [m, detached] : group)
        if (!detached && views_whole_node(m.get())) {
          old = Tensor(m).reshape(node_shape);
          break;
        }
    const DType dtype = self.dtype(), work = dtype == DType::Bool ? DType::U8 : dtype;
    Tensor pos = node_positions(n, self.shape(), self.strides(), self.offset());
    Tensor hit = alk::scatter_add(alk::zeros({n}, DType::I32), 0, pos, alk::ones({pos.numel()}, DType::I32)) > 0;
    Tensor put = alk::scatter_add(alk::zeros({n}, work), 0, pos, value.to(work).reshape({-1}));
    merged = alk::where(hit.reshape(node_shape), put.reshape(node_shape), old.to(work)).to(dtype).contiguous();
    const bool merged_grad = record_grad && merged.requires_grad();
    for (const auto& [m, detached] : group) {
      m->node = merged.impl()->node;  // strides and offset stay: they count elements of the node
      if (!merged_grad || detached) continue;
      if (views_whole_node(m.get()) && m->shape == node_shape) {
        m->grad_fn = merged.impl()->grad_fn;
      } else if (views_whole_node(m.get())) {
        m->grad_fn = merged.reshape(m->shape).impl()->grad_fn;  // the base seen in another shape
      } else {
        Tensor p = node_positions(n, m->shape, m->strides, m->offset);
        Tensor fresh = alk::with_grad(alk::make_view(merged, m->shape, m->strides, m->offset), "view", {merged},
                                      [p, node_shape, n](const Tensor& g) {
                                        Tensor zero = alk::zeros({n}, g.dtype());
                                        Tensor flat = alk::scatter_add(zero, 0, p, g.reshape({-1}));
                                        return std::vector<Tensor>{flat.reshape(node_shape)};
                                      });
        m->grad_fn = fresh.impl()->grad_fn;
      }
      m->requires_grad = true;
    }
  }
  // The group follows its members to the new node (the records change under the GIL).
  auto& gs = groups();
  std::vector<Member> moved;
  for (const auto& [m, detached] : group) {
    moved.push_back(Member{m, detached, merged.impl()->node.get()});
    members()[m.get()].node = merged.impl()->node.get();
  }
  gs.erase(old_node.get());
  gs[merged.impl()->node.get()] = std::move(moved);
}

}  // namespace

void assign_inplace(const Tensor& self_in, const Tensor& value_in, const char* op) {
  Tensor self = self_in, value = value_in;
  if (const Member* m = member_of(self.impl())) {
    auto group = live_members(self.impl()->node.get());
    if (group.size() > 1 || !views_whole_node(self.impl())) {
      assign_shared(self, value, m->detached, group, op);
      return;
    }
  }
  // Checks first, with the GIL (their errors name the Python caller) ...
  if (alk::is_grad_enabled() && self.requires_grad() && self.is_leaf())
    raise_runtime(std::string(op) +
                  ": a leaf tensor that requires grad is used in an in-place operation (wrap it in alk.no_grad())");
  check_assignable(self, value, op);
  // ... then the graph work without it, under alk's lock.
  Released r;
  if (value.shape() != self.shape()) value = alk::broadcast_to(value, self.shape());
  if (value.dtype() != self.dtype()) value = alk::cast(value, self.dtype());
  self.assign_(value);
  // The handle's history becomes the value's (PyTorch rebases an in-place op the same way).
  if (alk::is_grad_enabled() && value.requires_grad()) {
    self.impl()->grad_fn = value.impl()->grad_fn;
    self.impl()->requires_grad = true;
  }
}

// ---- indexing ----

namespace {

int64_t to_index(py::handle h) {
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) {
    PyErr_Clear();
    raise_type("index: expected an int, slice, None, Ellipsis or an integer tensor, got " +
               py::str(py::type::handle_of(h)).cast<std::string>());
  }
  return i.cast<int64_t>();
}

bool is_tensor_like_index(py::handle h) {
  return py::isinstance<alk::TensorImpl>(h) || py::isinstance<py::list>(h) || py::isinstance<py::array>(h);
}

}  // namespace

Tensor index_tensor(const Tensor& x, py::handle key_in) {
  py::tuple key = py::isinstance<py::tuple>(key_in) ? py::reinterpret_borrow<py::tuple>(key_in)
                                                   : py::make_tuple(key_in);
  int64_t consumed = 0, ellipses = 0, tensors = 0;
  for (py::handle k : key) {
    if (k.is_none()) continue;
    if (k.ptr() == Py_Ellipsis) {
      ++ellipses;
      continue;
    }
    if (is_tensor_like_index(k)) {
      py::object t = py::isinstance<alk::TensorImpl>(k) ? py::reinterpret_borrow<py::object>(k)
                                                         : py::cast(tensor_from_python(k, std::nullopt, false));
      consumed += t.cast<Tensor>().dtype() == DType::Bool ? t.cast<Tensor>().dim() : 1;
      ++tensors;
      continue;
    }
    ++consumed;
  }
  if (ellipses > 1) raise_index("an index can only have a single ellipsis ('...')");
  if (tensors > 1) raise_index("only one tensor (or list) index per subscript is supported; use gather for more");
  if (consumed > x.dim())
    raise_index("too many indices for tensor of dimension " + std::to_string(x.dim()) + " (got " +
                std::to_string(consumed) + ")");
  Tensor r = x;
  int64_t d = 0;
  for (py::handle k : key) {
    if (k.is_none()) {
      Released g;
      r = r.unsqueeze(d++);
    } else if (k.ptr() == Py_Ellipsis) {
      d += x.dim() - consumed;
    } else if (PySlice_Check(k.ptr())) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(k.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      if (step <= 0) raise_value("index: slice step must be positive, got " + std::to_string(step));
      int64_t n = r.shape()[d];
      Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
      if (len == 0) stop = start;
      Released g;
      r = r.slice(d++, start, stop, step);
    } else if (is_tensor_like_index(k)) {
      Tensor idx = py::isinstance<alk::TensorImpl>(k) ? k.cast<Tensor>() : tensor_from_python(k, std::nullopt, false);
      if (idx.dtype() == DType::Bool) {
        // A mask over dims d..d+k: the positions where it is true, found on the host.
        int64_t kdim = idx.dim();
        for (int64_t j = 0; j < kdim; ++j)
          if (idx.shape()[j] != r.shape()[d + j])
            raise_index("index: the mask of shape " + alk::to_string(idx.shape()) + " does not match the indexed dims " +
                        alk::to_string(alk::Shape(r.shape().begin() + d, r.shape().begin() + d + kdim)));
        py::array mask = to_numpy(idx);
        py::array flat = py::module_::import("numpy").attr("flatnonzero")(mask);
        Tensor pos = from_numpy(flat.attr("astype")("int64"));
        Released g;
        Tensor merged = kdim == 0 ? r.unsqueeze(d) : r.flatten(d, d + kdim - 1);
        r = alk::index_select(merged, d, pos);
        d += 1;
      } else {
        if (!alk::is_integral(idx.dtype())) raise_index("index: tensors used as indices must be integer or bool, got " +
                                                        std::string(alk::dtype_name(idx.dtype())));
        Released g;
        const int64_t n = r.shape()[d];
        Tensor flat = idx.reshape({-1});
        flat = alk::where(flat < 0, flat + n, flat).to(DType::I64);
        Tensor sel = alk::index_select(r, d, flat);
        alk::Shape shape(r.shape().begin(), r.shape().begin() + d);
        shape.insert(shape.end(), idx.shape().begin(), idx.shape().end());
        shape.insert(shape.end(), r.shape().begin() + d + 1, r.shape().end());
        r = sel.reshape(shape);
        d += idx.dim();
      }
    } else {
      int64_t i = to_index(k), n = r.shape()[d];
      if (i < -n || i >= n)
        raise_index("index " + std::to_string(i) + " is out of bounds for dimension " + std::to_string(d) +
                    " with size " + std::to_string(n));
      Released g;
      r = r.select(d, i < 0 ? i + n : i);
    }
  }
  if (r.impl() == x.impl()) {
    Released g;
    r = r.reshape(r.shape());  // x[...] is a new view, not x itself
  }
  return r;
}

// x[key] = value, functionally: the positions key selects get value, the result is assigned
// into x (so gradients flow to both the kept part of x and to value).
void set_index(const Tensor& x, py::handle key, const alk::Operand& value) {
  Tensor positions;
  {
    Released g;
    positions = alk::arange(0, static_cast<double>(x.numel()), 1, DType::I64).reshape(x.shape());
  }
  Tensor picked = index_tensor(positions, key), merged;
  {
    Released g;
    const DType work = x.dtype() == DType::Bool ? DType::U8 : x.dtype();
    Tensor v = value.is_scalar ? alk::full(picked.shape(), value.scalar, work)
                               : alk::broadcast_to(value.tensor, picked.shape()).to(work);
    Tensor pos = picked.reshape({-1}), vals = v.reshape({-1});
    const int64_t n = x.numel();
    Tensor hit = alk::scatter_add(alk::zeros({n}, DType::I32), 0, pos, alk::ones({pos.numel()}, DType::I32)) > 0;
    Tensor put = alk::scatter_add(alk::zeros({n}, work), 0, pos, vals);
    merged = alk::where(hit, put, x.to(work).reshape({-1})).reshape(x.shape()).to(x.dtype());
  }
  assign_inplace(x, merged, "__setitem__");  // with the GIL: its checks raise Python errors
}

// ---- repr ----

std::string repr(const Tensor& t) {
  std::string s;
  {
    Released g;
    s = t.str();
  }
  // Like torch: a tensor off the CPU names its device.
  if (&t.device() != &alk::cpu_device() && !s.empty() && s.back() == ')')
    s.insert(s.size() - 1, ", device='" + t.device().name() + "'");
  return s;
}

void bind_tensor(py::module_& m, py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>& cls) {
  py::enum_<DType> dt(m, "dtype", "Element types: bool, uint8, int32, int64, float16, bfloat16, float32, float64.");
  dt.value("bool", DType::Bool)
      .value("uint8", DType::U8)
      .value("int32", DType::I32)
      .value("int64", DType::I64)
      .value("float16", DType::F16)
      .value("bfloat16", DType::BF16)
      .value("float32", DType::F32)
      .value("float64", DType::F64);
  py::setattr(dt, "__repr__", py::cpp_function([](DType t) {
    static const char* names[] = {"bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
    return std::string("alk.") + names[static_cast<int>(t)];
  }, py::is_method(dt)));
  dt.def_property_readonly("itemsize", [](DType t) { return alk::dtype_size(t); }, "Bytes per element.");
  dt.def_property_readonly("is_floating_point", [](DType t) { return alk::is_floating(t); },
                           "True for float16, bfloat16, float32, float64.");
  m.def("promote_types", &alk::promote, py::arg("a"), py::arg("b"), "The dtype arithmetic between a and b gives.");

  cls.def(py::init([](const Tensor& t) { return t.impl_ptr(); }), py::arg("data"),
          "Another handle to the same tensor (shares data and autograd identity). Use alk.tensor() to build one "
          "from Python data.");
  cls.def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); },
                            "The size of each dimension, as a tuple.");
  cls.def_property_readonly("dtype", [](const Tensor& t) { return t.dtype(); }, "The element type (alk.float32, ...).");
  cls.def_property_readonly("device", [](const Tensor& t) { return t.device().name(); },
                            "The device holding the data and running the ops on it ('cpu', 'vulkan:0', ...).");
  cls.def_property_readonly("ndim", [](const Tensor& t) { return t.dim(); }, "Number of dimensions.");
  cls.def("dim", [](const Tensor& t) { return t.dim(); }, "Number of dimensions.");
  cls.def("numel", [](const Tensor& t) { return t.numel(); }, "Number of elements.");
  cls.def("size", [](const Tensor& t, std::optional<int64_t> d) -> py::object {
    if (!d) return py::tuple(py::cast(t.shape()));
    return py::int_(t.size(*d));
  }, py::arg("dim") = py::none(), "The shape, or the size of dimension dim.");
  cls.def("stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); }, "Strides, in elements.");
  cls.def("is_contiguous", [](const Tensor& t) { return t.is_contiguous(); }, "Whether the elements are laid out row-major without gaps.");
  cls.def_property_readonly("is_realized", [](const Tensor& t) { return t.is_realized(); },
                            "Whether the values are computed (False for a lazy graph node).");
  cls.def("__len__", [](const Tensor& t) {
    if (t.dim() == 0) raise_type("len() of a 0-d tensor");
    return t.shape()[0];
  });

  // ---- autograd ----
  cls.def_property("requires_grad", [](const Tensor& t) { return t.requires_grad(); }, [](Tensor& t, bool on) { t.requires_grad_(on); },
                   "Whether gradients are recorded for this tensor.");
  cls.def("requires_grad_", [](Tensor& t, bool on) { return t.requires_grad_(on); }, py::arg("requires_grad") = true,
          "Sets requires_grad in place; returns self.");
  cls.def_property(
      "grad", [](const Tensor& t) { return t.grad(); },
      [](const Tensor& t, const Tensor& g) {
        if (!g.defined()) {
          t.impl()->grad.reset();
          return;
        }
        if (g.shape() != t.shape()) raise_runtime("grad: assigned grad has shape " + alk::to_string(g.shape()) +
                                                  ", the tensor has " + alk::to_string(t.shape()));
        t.impl()->grad = g.impl_ptr();
      },
      "The gradient accumulated by backward() (None until then).");
  cls.def_property_readonly("is_leaf", [](const Tensor& t) { return t.is_leaf(); }, "True unless the tensor was computed by an op that records grad.");
  cls.def_property_readonly("grad_fn", [](const Tensor& t) -> py::object {
    if (!t.impl()->grad_fn) return py::none();
    return py::str(t.impl()->grad_fn->name);
  }, "The name of the op whose backward produces this tensor's gradient (None for leaves).");
  cls.def("backward", [](const Tensor& t, const Tensor& gradient) { t.backward(gradient); },
          py::arg("gradient") = py::none(), py::call_guard<Released>(),
          "Computes gradients of this tensor (a scalar, or seeded with gradient) into the leaves' .grad.");
  m.def("_register_hook", [](const Tensor& t, py::function hook) {
    // The hook is a grad_fn in front of t's own: ops recorded from now on send t's gradient
    // through it. Ops recorded before already point at the old grad_fn, so a tensor already
    // used (its grad_fn shared) refuses rather than skip them silently.
    if (!alk::is_grad_enabled() || !t.requires_grad())
      raise_runtime("register_hook: cannot register a hook on a tensor that doesn't require gradient");
    if (t.is_leaf())
      raise_runtime("register_hook: hooks on leaf tensors are not supported by alk (their gradient is "
                    "accumulated into .grad directly); hook the tensor computed from it instead");
    if (t.impl()->grad_fn.use_count() > 1)
      raise_runtime("register_hook: the tensor is already used by other ops; alk runs hooks for the ops "
                    "recorded after registration, so register it right after the tensor is made");
    // The hook object is released with the GIL held (the grad_fn may die on any thread).
    std::shared_ptr<py::object> fn(new py::object(hook), [](py::object* o) {
      py::gil_scoped_acquire gil;
      delete o;
    });
    Tensor front;
    {
      Released r;
      front = alk::with_grad(alk::alias(t), "hook", {t}, [fn](const Tensor& g) {
        py::gil_scoped_acquire gil;
        py::object out = (*fn)(g);
        if (out.is_none()) return std::vector<Tensor>{g};
        Tensor replaced = out.cast<Tensor>();
        if (replaced.shape() != g.shape())
          throw alk::Error("register_hook",
                           "the hook returned a gradient of shape " + alk::to_string(replaced.shape()) +
                               ", expected " + alk::to_string(g.shape()),
                           alk::Loc::current());
        return std::vector<Tensor>{replaced};
      });
    }
    t.impl()->grad_fn = front.impl()->grad_fn;
  }, py::arg("tensor"), py::arg("hook"), "Runs hook(grad) on t's gradient in backward (Tensor.register_hook).");
  m.def("_retain_grad", [](const Tensor& t) {
    if (t.is_leaf() || !alk::is_grad_enabled()) return;
    if (t.impl()->grad_fn.use_count() > 1)
      raise_runtime("retain_grad: the tensor is already used by other ops; alk keeps the gradient of the ops "
                    "recorded after this call, so call it right after the tensor is made");
    // Weak: the grad_fn must not keep its own tensor alive.
    std::weak_ptr<alk::TensorImpl> target = t.impl_ptr();
    Released r;
    Tensor front = alk::with_grad(alk::alias(t), "retain_grad", {t}, [target](const Tensor& g) {
      if (auto p = target.lock()) {
        Tensor add = g.detach();
        p->grad = p->grad ? (Tensor(p->grad) + add).impl_ptr() : add.impl_ptr();
      }
      return std::vector<Tensor>{g};
    });
    t.impl()->grad_fn = front.impl()->grad_fn;
  }, py::arg("tensor"), "Keeps t's gradient in t.grad after backward (Tensor.retain_grad).");

  cls.def("detach", [](const Tensor& t) {
    prepare_base(t);
    Tensor d = t.detach();
    track_view(t, d, true);
    return d;
  }, "The same values, cut from the autograd graph (sharing them: writes through it reach t).");
  m.def("_follow_assignment", &follow_assignment, py::arg("tensor"),
        "After tensor was assigned outside the bindings (an optimizer step), its views read its new values.");
  m.def("_prepare_base", &prepare_base, py::arg("base"),
        "Gives base a node of its own (when it views part of one) so views of it can write through.");
  m.def("_track_view", &track_view, py::arg("base"), py::arg("view"), py::arg("detached") = false,
        "Records view as a view of base, so writes through it reach base (what the view methods call).");
  cls.def_property(
      "data", [](const Tensor& t) {
        prepare_base(t);
        Tensor d = t.detach();
        track_view(t, d, true);
        return d;
      },
      [](const Tensor& t, const Tensor& v) {
        // PyTorch's `p.data = new`: this handle (and every holder of it: modules, optimizers)
        // now refers to v's values, whatever its shape or dtype; autograd identity is kept
        // and the accumulated gradient dropped. How Module.to(dtype) converts in place.
        if (!v.defined()) raise_type("data: expected a tensor");
        alk::TensorImpl* impl = t.impl();
        const alk::TensorImpl* src = v.impl();
        impl->node = src->node;
        impl->shape = src->shape;
        impl->strides = src->strides;
        impl->offset = src->offset;
        impl->dtype = src->dtype;
        impl->grad.reset();
      },
      "The same values without autograd history (as detach()); assigning replaces the values in place.");
  cls.def("copy_", [](const Tensor& t, const alk::Operand& v) {
    Tensor value;
    {
      Released g;
      value = v.is_scalar ? alk::full(t.shape(), v.scalar, t.dtype()) : v.tensor;
    }
    assign_inplace(t, value, "copy_");
    return t;
  }, py::arg("src"), "Copies src's values in (broadcast, cast to this dtype); returns self.");
  cls.def("fill_", [](const Tensor& t, double v) {
    Tensor value;
    {
      Released g;
      value = alk::full(t.shape(), v, t.dtype());
    }
    assign_inplace(t, value, "fill_");
    return t;
  }, py::arg("value"), "Sets every element to value; returns self.");
  cls.def("zero_", [](const Tensor& t) {
    Tensor value;
    {
      Released g;
      value = alk::zeros(t.shape(), t.dtype());
    }
    assign_inplace(t, value, "zero_");
    return t;
  }, "Sets every element to 0; returns self.");
  cls.def("zero_grad_", [](const Tensor& t) { t.zero_grad(); }, "Drops the accumulated gradient.");

  // ---- data out ----
  cls.def("item", [](const Tensor& t) -> py::object {
    if (t.numel() != 1)
      raise_runtime("item: a tensor with " + std::to_string(t.numel()) + " elements cannot be converted to a Python scalar");
    double v;
    {
      Released g;
      v = t.item();
    }
    if (t.dtype() == DType::Bool) return py::bool_(v != 0);
    if (alk::is_integral(t.dtype())) return py::int_(static_cast<int64_t>(v));
    return py::float_(v);
  }, "The single value as a Python number.");
  cls.def("numpy", &to_numpy,
          "A numpy array sharing the tensor's memory (computed first if lazy). bfloat16 becomes a float32 copy.");
  cls.def("__array__", [](const Tensor& t, py::object dtype) -> py::object {
    py::object a = to_numpy(t);
    return dtype.is_none() ? a : a.attr("astype")(dtype);
  }, py::arg("dtype") = py::none(), "numpy's conversion hook: np.asarray(t).");
  cls.def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); }, "Nested Python lists of the values.");
  cls.def("realize", [](const Tensor& t) { return t.realize(); }, py::call_guard<Released>(),
          "Computes the values now; returns self.");
  cls.def("__repr__", &repr);
  cls.def("__str__", &repr);
  cls.def("_repr_html_", [](const Tensor& t) {
    std::string body = repr(t), esc;
    for (char c : body) esc += c == '<' ? std::string("&lt;") : c == '>' ? std::string("&gt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
    std::string head = "alk.Tensor " + alk::to_string(t.shape()) + " " + std::string(alk::dtype_name(t.dtype())) + " " +
                     t.device().name();
    if (t.requires_grad()) head += " requires_grad";
    return "<div><b>" + head + "</b><pre>" + esc + "</pre></div>";
  }, "Jupyter's rich display: shape, dtype, device, then the values.");
  cls.def("__hash__", [](py::handle self) { return reinterpret_cast<intptr_t>(self.ptr()); });
  cls.def("__bool__", [](const Tensor& t) {
    if (t.numel() != 1) raise_runtime("bool: the truth value of a tensor with more than one element is ambiguous");
    Released g;
    return t.item() != 0;
  });
  cls.def("__float__", [](const Tensor& t) {
    if (t.numel() != 1) raise_type("float: only one-element tensors can be converted to Python scalars");
    Released g;
    return t.item();
  });
  cls.def("__int__", [](const Tensor& t) {
    if (t.numel() != 1) raise_type("int: only one-element tensors can be converted to Python scalars");
    Released g;
    return static_cast<int64_t>(t.item());
  });
  cls.def("__index__", [](const Tensor& t) {
    if (t.numel() != 1 || !(alk::is_integral(t.dtype()) || t.dtype() == DType::Bool))
      raise_type("index: only integer tensors of a single element can be converted to an index");
    Released g;
    return static_cast<int64_t>(t.item());
  });

  // ---- indexing ----
  cls.def("__getitem__", [](const Tensor& x, py::handle key) {
    prepare_base(x);
    Tensor r = index_tensor(x, key);
    track_view(x, r, false);  // basic indexing views x: writes through it reach x
    return r;
  }, py::arg("key"),
          "x[key] with ints (negative count from the end), slices (positive steps), None, ..., integer "
          "tensors/lists (index_select) and bool masks. Views where possible.");
  cls.def("__setitem__", &set_index, py::arg("key"), py::arg("value"),
          "x[key] = value: the selected elements get value (broadcast, cast to x's dtype); differentiable.");

  // ---- numpy in ----
  m.def("from_numpy", &from_numpy, py::arg("array"),
        "A tensor with the array's values and dtype (bool, uint8, int32, int64, float16, float32, float64); "
        "one copy.");
  m.def("tensor", &tensor_from_python, py::arg("data"), py::arg("dtype") = py::none(),
        py::arg("requires_grad") = false,
        "A new tensor from Python data (nested lists, numbers, numpy arrays, tensors). Python floats give "
        "float32, ints int64, bools bool.");
}

}  // namespace alkpy
