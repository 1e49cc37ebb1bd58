// Running one template Kernel on the CPU device and on a Vulkan device over the same host
// data (strided, offset views included) and comparing the bytes each writes.
#pragma once
#ifdef ALK_HAVE_VULKAN
#include "required.h"
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "alk/device.h"
#include "backend/vulkan/context.h"
#include "runtime/device.h"
#include "alk/kernel.h"
#include "vulkan_test_util.h"

namespace alk::vk::testing {

// A tensor as host bytes: `storage` holds the elements the view reaches; the view starts
// byte_offset bytes into the buffer and element `offset` after that.
struct HostArg {
  DType dtype = DType::F32;
  std::vector<uint8_t> storage;
  Shape shape, strides;
  int64_t offset = 0;
  size_t byte_offset = 0;
};

template <class T>
HostArg contiguous(DType dtype, const Shape& shape, const std::vector<T>& values) {
  HostArg a{dtype, {}, shape, contiguous_strides(shape), 0, 0};
  a.storage.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(a.storage.data(), values.data(), a.storage.size());
  return a;
}

// A view of `shape` over a bigger storage: permuted by `perm` (a transposed layout), with a
// leading element offset and a byte offset, filled with `fill(i)` for every stored element.
template <class T, class F>
HostArg strided(DType dtype, const Shape& shape, const std::vector<int>& perm, int64_t offset, size_t byte_offset,
                F fill) {
  Shape stored(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) stored[d] = shape[static_cast<size_t>(perm[d])];
  Shape cs = contiguous_strides(stored);
  HostArg a{dtype, {}, shape, Shape(shape.size()), offset, byte_offset};
  for (size_t d = 0; d < shape.size(); ++d) a.strides[static_cast<size_t>(perm[d])] = cs[d];
  int64_t n = offset;  // the elements before the view, then the view's
  int64_t total = 1;
  for (int64_t s : stored) total *= s;
  n += total;
  std::vector<T> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = fill(i);
  a.storage.resize(values.size() * sizeof(T));
  std::memcpy(a.storage.data(), values.data(), a.storage.size());
  return a;
}

inline KernelArg upload_arg(Device& dev, const HostArg& h) {
  auto buf = dev.allocate(h.byte_offset + h.storage.size() + 8);
  if (!h.storage.empty()) dev.upload(*buf, h.byte_offset, h.storage.data(), h.storage.size());
  return KernelArg{buf, h.byte_offset, h.dtype, h.shape, h.strides, h.offset};
}

// Runs `node` as a kernel on dev and returns the output's bytes (contiguous out_shape).
// The output buffer starts filled with 0xAB bytes (so unwritten elements show).
inline std::vector<uint8_t> run_kernel(Device& dev, const KernelOp& node, const std::vector<HostArg>& inputs,
                                       DType out_dtype, const Shape& out_shape) {
  Kernel k;
  k.node = node;
  k.op = node.op;
  for (const HostArg& h : inputs) k.inputs.push_back(upload_arg(dev, h));
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(out_dtype);
  std::vector<uint8_t> out(bytes, 0xAB);
  auto buf = dev.allocate(bytes + 8);
  if (bytes) dev.upload(*buf, 0, out.data(), bytes);
  k.output = KernelArg{buf, 0, out_dtype, out_shape, contiguous_strides(out_shape), 0};
  if (!dev.supports(k)) ADD_FAILURE() << dev.name() << " does not support " << op_name(node.op);
  auto p = dev.prepare(k);
  dev.launch(*p, k);
  dev.synchronize();
  if (bytes) dev.download(*buf, 0, out.data(), bytes);
  return out;
}

inline KernelOp make_op(OpId op, Params params, const Shape& shape, DType dtype, Loc loc = Loc::current()) {
  KernelOp n;
  n.op = op;
  n.params = std::move(params);
  n.shape = shape;
  n.dtype = dtype;
  n.loc = loc;
  return n;
}

inline Device* vulkan_device_or_null() {
  if (devices().empty()) return nullptr;
  return &get_device("vulkan:" + std::to_string(device_under_test()));
}

}  // namespace alk::vk::testing

#define ALK_VULKAN_DEVICE_OR_SKIP(dev)                                                  \
  ::alk::Device* dev = ::alk::vk::testing::vulkan_device_or_null();                    \
  if (!dev) {                                                                           \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + ::alk::vk::unavailable_reason());            \
  }                                                                                     \
  static_assert(true)

#endif
