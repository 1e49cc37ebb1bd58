#include "graph/graph.h"

#include <cstdlib>
#include <cstring>

namespace alk {

namespace {
bool unrealized_const(const Tensor& t) { return !t.impl()->node->realized() && t.impl()->node->op == OpId::Const; }
}  // namespace

int64_t Node::numel() const { return alk::numel(shape); }

Tensor make_node(OpId op, Shape shape, DType dtype, std::vector<Tensor> inputs, Params params, Loc loc) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->shape = shape;
  node->dtype = dtype;
  node->params = std::move(params);
  node->loc = loc;
  // Every input on one device (PyTorch's rule): moving data is an explicit `to(device)`.
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (unrealized_const(t)) continue;
    if (!first) {
      first = &t;
      continue;
    }
    Device* a = first->impl()->node->device;
    Device* b = t.impl()->node->device;
    check(a == b, std::string(op_name(op)), loc, "expected all tensors on one device, found ", a->name(), " and ",
          b->name(), "; move one with .to(device)");
  }
  // Only constants (or nothing) as inputs: where the constants were made (zeros_like(p) on p's).
  if (!first && !inputs.empty()) first = &inputs[0];
  node->device = first ? first->impl()->node->device : &default_device();
  node->inputs.reserve(inputs.size());
  for (auto& t : inputs) {
    // A constant made on another device is just a number: make the same number here.
    if (unrealized_const(t) && t.impl()->node->device != node->device) {
      DeviceGuard here(*node->device);
      Tensor c = make_node(OpId::Const, {}, t.dtype(), {}, t.impl()->node->params, t.impl()->node->loc);
      node->inputs.push_back(make_view(c, t.shape(), t.strides(), t.offset()).impl_ptr());
      continue;
    }
    node->inputs.push_back(t.impl_ptr());
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  Tensor out(std::move(impl));
  if (eager_mode()) out.realize();
  return out;
}

Tensor make_buffer_tensor(Shape shape, DType dtype, Device& device) {
  auto node = std::make_shared<Node>();
  node->shape = shape;
  node->dtype = dtype;
  node->device = &device;
  node->buffer = device.allocate(static_cast<size_t>(node->numel()) * dtype_size(dtype));
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  return Tensor(std::move(impl));
}

Tensor tensor_from_host(const void* bytes, Shape shape, DType dtype, Device& device) {
  Tensor t = make_buffer_tensor(std::move(shape), dtype, device);
  const Buffer& b = *t.impl()->node->buffer;
  device.upload(b, 0, bytes, b.bytes);
  return t;
}

std::vector<unsigned char> host_bytes(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.contiguous();
  c.realize();
  const size_t size = dtype_size(c.dtype());
  std::vector<unsigned char> out(static_cast<size_t>(c.numel()) * size);
  const Node& n = *c.impl()->node;
  n.device->download(*n.buffer, static_cast<size_t>(c.offset()) * size, out.data(), out.size());
  return out;
}

void write_host(const Tensor& t, const void* bytes, size_t size) {
  const Node& n = *t.impl()->node;
  check(n.realized() && t.offset() == 0 && t.is_contiguous() && size == n.buffer->bytes &&
            static_cast<size_t>(t.numel()) * dtype_size(t.dtype()) == size,
        "write_host", Loc::current(), "needs a realized tensor viewing its whole buffer and ", n.buffer ? n.buffer->bytes : 0,
        " bytes, got ", size);
  n.device->upload(*n.buffer, 0, bytes, size);
}

Tensor alias(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = t.impl()->shape;
  impl->strides = t.impl()->strides;
  impl->offset = t.impl()->offset;
  impl->dtype = t.impl()->dtype;
  impl->node = t.impl()->node;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = t.impl()->dtype;
  impl->node = t.impl()->node;
  return Tensor(std::move(impl));
}

namespace {
bool& eager_flag() {
  static bool eager = [] {
    const char* v = std::getenv("ALK_EAGER");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return eager;
}
}  // namespace

bool eager_mode() { return eager_flag(); }
void set_eager_mode(bool on) { eager_flag() = on; }

}  // namespace alk
