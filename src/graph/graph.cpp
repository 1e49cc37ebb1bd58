#include "graph/graph.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace alk {

namespace {
std::atomic<int64_t> g_live_buffers{0}, g_live_bytes{0};
constexpr size_t kAlign = 64;  // a cache line, and an AVX-512 vector
}  // namespace

Buffer::Buffer(size_t n) : bytes(n) {
  size_t rounded = (n + kAlign - 1) / kAlign * kAlign;
  data = ::operator new(rounded == 0 ? kAlign : rounded, std::align_val_t{kAlign});
  ++g_live_buffers;
  g_live_bytes += static_cast<int64_t>(n);
}

Buffer::~Buffer() {
  ::operator delete(data, std::align_val_t{kAlign});
  --g_live_buffers;
  g_live_bytes -= static_cast<int64_t>(bytes);
}

int64_t Buffer::live_count() { return g_live_buffers; }
int64_t Buffer::live_bytes() { return g_live_bytes; }

int64_t Node::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor make_node(OpId op, Shape shape, DType dtype, std::vector<Tensor> inputs, Params params, Loc loc) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->shape = shape;
  node->dtype = dtype;
  node->params = std::move(params);
  node->loc = loc;
  node->inputs.reserve(inputs.size());
  for (auto& t : inputs) node->inputs.push_back(t.impl_ptr());
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  Tensor out(std::move(impl));
  if (eager_mode()) out.realize();
  return out;
}

Tensor make_buffer_tensor(Shape shape, DType dtype) {
  auto node = std::make_shared<Node>();
  node->shape = shape;
  node->dtype = dtype;
  node->buffer = std::make_shared<Buffer>(static_cast<size_t>(node->numel()) * dtype_size(dtype));
  auto impl = std::make_shared<TensorImpl>();
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->node = std::move(node);
  return Tensor(std::move(impl));
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
