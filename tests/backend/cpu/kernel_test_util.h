// Test helpers: strided views over owned storage, and reading a view back as the
// row-major list of its logical values (the input the float64 references work on).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "alk/dtype.h"
#include "backend/cpu/view.h"

namespace alk::cpu::testing {

// How a test input is laid out in memory; each logical shape is tried with several.
enum class Layout { Contiguous, Offset, Transposed, Strided, Broadcast };
inline const Layout kAllLayouts[] = {Layout::Contiguous, Layout::Offset, Layout::Transposed, Layout::Strided,
                                     Layout::Broadcast};
inline std::string layout_name(Layout l) {
  const char* names[] = {"contiguous", "offset", "transposed", "strided", "broadcast"};
  return names[static_cast<int>(l)];
}

inline std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = step;
    step *= std::max<int64_t>(shape[d], 1);
  }
  return s;
}

// Owns the storage behind a View.
struct Buf {
  std::shared_ptr<std::vector<uint64_t>> storage;  // 8-byte units keep every dtype aligned
  View view;
  int64_t storage_elems = 0;

  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(view.numel()));
    for (int64_t i = 0; i < view.numel(); ++i)
      v[static_cast<size_t>(i)] = load_as_double(view.data, view.dtype, view.offset_of(i));
    return v;
  }
};

inline Buf make_buf(std::vector<int64_t> shape, DType dtype, Layout layout) {
  Buf b;
  b.view.dtype = dtype;
  b.view.shape = shape;
  size_t rank = shape.size();
  switch (layout) {
    case Layout::Contiguous:
      b.view.strides = row_major(shape);
      break;
    case Layout::Offset:
      b.view.strides = row_major(shape);
      b.view.offset = 5;
      break;
    case Layout::Transposed: {  // last two dims stored swapped (column-major matrices)
      std::vector<int64_t> perm = shape;
      if (rank >= 2) std::swap(perm[rank - 1], perm[rank - 2]);
      b.view.strides = row_major(perm);
      if (rank >= 2) std::swap(b.view.strides[rank - 1], b.view.strides[rank - 2]);
      b.view.offset = 2;
      break;
    }
    case Layout::Strided: {  // every other element along the last dim
      std::vector<int64_t> wide = shape;
      if (rank >= 1) wide[rank - 1] *= 2;
      b.view.strides = row_major(wide);
      if (rank >= 1) b.view.strides[rank - 1] *= 2;
      b.view.offset = 1;
      break;
    }
    case Layout::Broadcast:  // dim 0 repeats one slice
      b.view.strides = row_major(shape);
      if (rank >= 1) b.view.strides[0] = 0;
      b.view.offset = 3;
      break;
  }
  int64_t max_at = b.view.offset;
  for (size_t d = 0; d < rank; ++d)
    if (shape[d] > 0) max_at += (shape[d] - 1) * b.view.strides[d];
  b.storage_elems = max_at + 1;
  b.storage = std::make_shared<std::vector<uint64_t>>(static_cast<size_t>(b.storage_elems), 0);
  b.view.data = b.storage->data();
  return b;
}

// Fills the whole storage (so broadcast views still read consistent values).
inline void fill_random(Buf& b, std::mt19937& rng, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < b.storage_elems; ++i) store_double(b.view.data, b.view.dtype, i, u(rng));
}
inline void fill_ints(Buf& b, std::mt19937& rng, int64_t lo, int64_t hi_inclusive) {
  std::uniform_int_distribution<int64_t> u(lo, hi_inclusive);
  for (int64_t i = 0; i < b.storage_elems; ++i) store_double(b.view.data, b.view.dtype, i, static_cast<double>(u(rng)));
}

inline Buf make_input(std::vector<int64_t> shape, DType dtype, Layout layout, std::mt19937& rng, double lo = -2.0,
                      double hi = 2.0) {
  Buf b = make_buf(std::move(shape), dtype, layout);
  fill_random(b, rng, lo, hi);
  return b;
}

// Outputs are contiguous but start at a non-zero offset, preceded by guard
// elements set to a sentinel that must survive the kernel.
inline constexpr int64_t kGuard = 3;
inline constexpr double kSentinel = 77.0;
inline Buf make_output(std::vector<int64_t> shape, DType dtype) {
  Buf b = make_buf(std::move(shape), dtype, Layout::Contiguous);
  b.view.offset = kGuard;
  b.storage_elems += kGuard;
  b.storage->resize(static_cast<size_t>(b.storage_elems), 0);
  b.view.data = b.storage->data();
  for (int64_t i = 0; i < b.storage_elems; ++i) store_double(b.view.data, dtype, i, kSentinel);
  return b;
}

inline void expect_guards(const Buf& out) {
  double sentinel = out.view.dtype == DType::Bool ? 1.0 : kSentinel;
  for (int64_t i = 0; i < kGuard; ++i) EXPECT_EQ(load_as_double(out.view.data, out.view.dtype, i), sentinel);
}

struct Tol {
  double rtol, atol;
};
inline Tol tol_for(DType t) {
  switch (t) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {2e-5, 2e-5};
    case DType::F16: return {4e-3, 4e-3};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

inline void expect_close(const Buf& out, const std::vector<double>& ref, Tol tol) {
  expect_guards(out);
  std::vector<double> got = out.values();
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < ref.size() && bad < 5; ++i) {
    bool both_nan = std::isnan(got[i]) && std::isnan(ref[i]);
    if (!both_nan && !(std::abs(got[i] - ref[i]) <= tol.atol + tol.rtol * std::abs(ref[i]))) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << ref[i];
      ++bad;
    }
  }
}

inline std::string dtype_str(DType t) { return std::string(dtype_name(t)); }

}  // namespace alk::cpu::testing
