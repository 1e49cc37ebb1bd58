// Helpers shared by the kernels_*.cpp files (not part of the backend's interface).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "alk/dtype.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cpu/view.h"
#include "core/half.h"

namespace alk::cpu::detail {

// Typed element access for one dtype, so a loop templated on it has no per-element
// dtype switch. load returns the compute type (float for f16/bf16/f32, double otherwise).
template <DType D>
struct Elem;
template <>
struct Elem<DType::F32> {
  static float load(const void* p, int64_t at) { return static_cast<const float*>(p)[at]; }
  static void store(void* p, int64_t at, double v) { static_cast<float*>(p)[at] = static_cast<float>(v); }
};
template <>
struct Elem<DType::F64> {
  static double load(const void* p, int64_t at) { return static_cast<const double*>(p)[at]; }
  static void store(void* p, int64_t at, double v) { static_cast<double*>(p)[at] = v; }
};
template <>
struct Elem<DType::F16> {
  static float load(const void* p, int64_t at) { return f16_to_f32(static_cast<const uint16_t*>(p)[at]); }
  static void store(void* p, int64_t at, double v) {
    static_cast<uint16_t*>(p)[at] = f32_to_f16(static_cast<float>(v));
  }
};
template <>
struct Elem<DType::BF16> {
  static float load(const void* p, int64_t at) { return bf16_to_f32(static_cast<const uint16_t*>(p)[at]); }
  static void store(void* p, int64_t at, double v) {
    static_cast<uint16_t*>(p)[at] = f32_to_bf16(static_cast<float>(v));
  }
};
// Integer and bool dtypes go through view.h's converters; they are rare in float kernels.
template <DType D>
struct Elem {
  static double load(const void* p, int64_t at) { return load_as_double(p, D, at); }
  static void store(void* p, int64_t at, double v) { store_double(p, D, at, v); }
};

// Calls fn(Elem<D>{}) for t's D.
template <class Fn>
decltype(auto) dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::Bool: return fn(Elem<DType::Bool>{});
    case DType::U8: return fn(Elem<DType::U8>{});
    case DType::I32: return fn(Elem<DType::I32>{});
    case DType::I64: return fn(Elem<DType::I64>{});
    case DType::F16: return fn(Elem<DType::F16>{});
    case DType::BF16: return fn(Elem<DType::BF16>{});
    case DType::F32: return fn(Elem<DType::F32>{});
    case DType::F64: break;
  }
  return fn(Elem<DType::F64>{});
}

// dst[i] = v[base + i * stride] for i < n, converted to T.
template <class T>
void load_run(const View& v, int64_t base, int64_t stride, int64_t n, T* dst) {
  dispatch(v.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(E::load(v.data, base + i * stride));
  });
}

// v[base + i * stride] = src[i] for i < n, converted to v's dtype.
template <class T>
void store_run(const View& v, int64_t base, int64_t stride, int64_t n, const T* src) {
  dispatch(v.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t i = 0; i < n; ++i) E::store(v.data, base + i * stride, static_cast<double>(src[i]));
  });
}

inline int64_t load_index(const View& v, int64_t at) {
  return v.dtype == DType::I32 ? static_cast<const int32_t*>(v.data)[at] : load_as_int(v.data, v.dtype, at);
}

// Integer values keep all 64 bits (load_as_double would round i64 above 2^53).
inline void store_int(void* data, DType t, int64_t at, int64_t v) {
  switch (t) {
    case DType::I64: static_cast<int64_t*>(data)[at] = v; break;
    case DType::I32: static_cast<int32_t*>(data)[at] = static_cast<int32_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(data)[at] = static_cast<uint8_t>(v); break;
    default: store_double(data, t, at, static_cast<double>(v)); break;
  }
}

// Copies one element, exactly when the dtypes match.
inline void copy_elem(const View& src, int64_t src_at, const View& dst, int64_t dst_at) {
  if (src.dtype == dst.dtype) {
    size_t size = dtype_size(src.dtype);
    std::memcpy(static_cast<char*>(dst.data) + dst_at * static_cast<int64_t>(size),
                static_cast<const char*>(src.data) + src_at * static_cast<int64_t>(size), size);
  } else if (is_floating(src.dtype) || is_floating(dst.dtype)) {
    store_double(dst.data, dst.dtype, dst_at, load_as_double(src.data, src.dtype, src_at));
  } else {
    store_int(dst.data, dst.dtype, dst_at, load_as_int(src.data, src.dtype, src_at));
  }
}

// Every dtype's zero is all-zero bytes.
inline void zero_fill(const View& out) {
  std::memset(static_cast<char*>(out.data) + out.offset * static_cast<int64_t>(dtype_size(out.dtype)), 0,
              static_cast<size_t>(out.numel()) * dtype_size(out.dtype));
}

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = step;
    step *= shape[d];
  }
  return s;
}

// Walks `shape` in row-major order from linear index `start`, keeping the element
// offsets of N views (each given by its strides and base offset) in step, so the
// per-element cost is an increment instead of a divide per dim.
template <int N>
class Walker {
 public:
  Walker(const std::vector<int64_t>& shape, std::array<const int64_t*, N> strides, std::array<int64_t, N> base,
         int64_t start)
      : shape_(shape), idx_(shape.size(), 0), strides_(strides), off_(base) {
    for (size_t d = shape.size(); d-- > 0 && start != 0;) {
      idx_[d] = start % shape[d];
      start /= shape[d];
      for (int v = 0; v < N; ++v) off_[v] += idx_[d] * strides_[v][d];
    }
  }
  int64_t off(int v) const { return off_[v]; }
  int64_t idx(size_t d) const { return idx_[d]; }
  void next() {
    for (size_t d = shape_.size(); d-- > 0;) {
      for (int v = 0; v < N; ++v) off_[v] += strides_[v][d];
      if (++idx_[d] < shape_[d]) return;
      for (int v = 0; v < N; ++v) off_[v] -= idx_[d] * strides_[v][d];
      idx_[d] = 0;
    }
  }

 private:
  const std::vector<int64_t>& shape_;
  std::vector<int64_t> idx_;
  std::array<const int64_t*, N> strides_;
  std::array<int64_t, N> off_;
};

// Work sizes below this many elements are not worth waking the pool for.
inline constexpr int64_t kParallelElems = 32768;
inline int64_t grain_for(int64_t elems_per_item) {
  return std::max<int64_t>(1, kParallelElems / std::max<int64_t>(1, elems_per_item));
}

// The rows of x along `axis`: count = numel / len, each starting at base(r) with
// step `stride`. Row r of a contiguous output of the same shape starts at out_base(r).
struct AxisRows {
  View rows;  // x with dim `axis` set to 1, so offset_of(r) is row r's first element
  int64_t len, stride, count, inner;

  AxisRows(const View& x, int axis) : rows(x), len(x.shape[axis]), stride(x.strides[axis]) {
    rows.shape[axis] = 1;
    count = rows.numel();
    inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  }
  int64_t base(int64_t r) const { return rows.offset_of(r); }
  // Relative to the output's own offset.
  int64_t out_base(int64_t r) const { return (r / inner) * len * inner + r % inner; }
};

}  // namespace alk::cpu::detail
