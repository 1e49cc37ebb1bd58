// A strided view of device memory as the CPU kernels see it: element strides
// (0 for broadcast dims), an element offset, any dtype.
#pragma once
#include <cstdint>
#include <vector>

#include "alk/dtype.h"
#include "core/half.h"

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

// Reads element at element-offset `at` (from data, already including view offset) as double.
inline double load_as_double(const void* data, DType t, int64_t at) {
  switch (t) {
    case DType::Bool: return static_cast<const uint8_t*>(data)[at] != 0;
    case DType::U8: return static_cast<const uint8_t*>(data)[at];
    case DType::I32: return static_cast<const int32_t*>(data)[at];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[at]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[at]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[at]);
    case DType::F32: return static_cast<const float*>(data)[at];
    case DType::F64: return static_cast<const double*>(data)[at];
  }
  return 0;
}

inline int64_t load_as_int(const void* data, DType t, int64_t at) {
  switch (t) {
    case DType::I64: return static_cast<const int64_t*>(data)[at];
    case DType::I32: return static_cast<const int32_t*>(data)[at];
    case DType::U8: case DType::Bool: return static_cast<const uint8_t*>(data)[at];
    default: return static_cast<int64_t>(load_as_double(data, t, at));
  }
}

// Stores v converted to t (integers wrap to the storage width, bool is v != 0).
inline void store_double(void* data, DType t, int64_t at, double v) {
  switch (t) {
    case DType::Bool: static_cast<uint8_t*>(data)[at] = v != 0; break;
    case DType::U8: static_cast<uint8_t*>(data)[at] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DType::I32: static_cast<int32_t*>(data)[at] = static_cast<int32_t>(static_cast<int64_t>(v)); break;
    case DType::I64: static_cast<int64_t*>(data)[at] = static_cast<int64_t>(v); break;
    case DType::F16: static_cast<uint16_t*>(data)[at] = f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(data)[at] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::F32: static_cast<float*>(data)[at] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(data)[at] = v; break;
  }
}

}  // namespace alk::cpu
