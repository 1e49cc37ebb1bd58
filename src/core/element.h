// One element of any dtype in host memory, read as double or int64 and written from double:
// what the CPU's kernels do per element, and what the front end does to host bytes (a
// tensor's values to_vector'd, the data tensor() and arange() upload). Base layer: it knows
// dtypes and nothing else.
#pragma once
#include <cstdint>

#include "alk/dtype.h"
#include "core/half.h"

namespace alk {

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

}  // namespace alk
