// A strided view of device memory as the CPU kernels see it: element strides
// (0 for broadcast dims), an element offset, any dtype.
#pragma once
#include <cstdint>
#include <vector>

#include "alk/dtype.h"
#include "core/element.h"

namespace alk::cpu {

struct View {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool is_contiguous() const;
  // Element offset (including `offset`) of the element at row-major linear index i.
  int64_t offset_of(int64_t linear) const;
};

// One element of any dtype in host memory, as double or int64 (core/element.h): kept under
// their cpu:: names for the kernels.
using alk::load_as_double;
using alk::load_as_int;
using alk::store_double;

}  // namespace alk::cpu
