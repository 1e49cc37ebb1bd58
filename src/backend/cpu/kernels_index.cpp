// Index-driven kernels. Each one validates every index before touching `out`, so a
// failed call leaves the output as it was.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

using detail::Walker;

void check_index(const char* op, Loc loc, int64_t v, int64_t size, int64_t dim, const char* what = "index") {
  if (v < 0 || v >= size)
    fail(op, loc, what, " ", v, " is out of range for dim ", dim, " of size ", size, " (valid range [0, ", size, "))");
}

// Validates every element of `index` against [0, size), in row-major order so the
// error names the first bad one.
void check_all(const char* op, Loc loc, const View& index, int64_t size, int64_t dim) {
  if (index.dtype != DType::I64 && index.dtype != DType::I32)
    fail(op, loc, "index must be i64 or i32, got ", dtype_name(index.dtype));
  Walker<1> w(index.shape, {index.strides.data()}, {index.offset}, 0);
  for (int64_t i = 0, n = index.numel(); i < n; ++i, w.next())
    check_index(op, loc, detail::load_index(index, w.off(0)), size, dim);
}

// Dims other than `dim` of `small` must not exceed those of `big` (torch's rule,
// which keeps every read and write in bounds).
void check_fits(const char* op, Loc loc, const View& small, const char* small_name, const View& big,
                const char* big_name, int dim, bool include_dim) {
  if (small.rank() != big.rank())
    fail(op, loc, small_name, " has rank ", small.rank(), " but ", big_name, " has rank ", big.rank());
  for (size_t d = 0; d < small.shape.size(); ++d)
    if ((include_dim || static_cast<int>(d) != dim) && small.shape[d] > big.shape[d])
      fail(op, loc, small_name, " shape ", to_string(small.shape), " exceeds ", big_name, " shape ",
           to_string(big.shape), " at dim ", d);
}

// out (contiguous, x's shape) = x: one memcpy for a contiguous x of out's dtype, a fill
// for a broadcast scalar (the zeros a gradient is scattered into), else per element.
void copy_input(const View& x, const View& out) {
  const int64_t n = x.numel();
  const size_t size = dtype_size(out.dtype);
  char* dst = static_cast<char*>(out.data) + out.offset * static_cast<int64_t>(size);
  bool scalar = true;
  for (size_t d = 0; d < x.shape.size(); ++d) scalar = scalar && (x.strides[d] == 0 || x.shape[d] == 1);
  if (x.dtype == out.dtype && x.is_contiguous()) {
    std::memcpy(dst, static_cast<const char*>(x.data) + x.offset * static_cast<int64_t>(size), static_cast<size_t>(n) * size);
  } else if (scalar && n > 0) {
    detail::copy_elem(x, x.offset, out, out.offset);
    for (int64_t done = 1; done < n; done *= 2)  // doubling copies of what is filled so far
      std::memcpy(dst + done * static_cast<int64_t>(size), dst, static_cast<size_t>(std::min(done, n - done)) * size);
  } else {
    parallel_for(n, detail::kParallelElems, [&](int64_t lo, int64_t hi) {
      Walker<1> w(x.shape, {x.strides.data()}, {x.offset}, lo);
      for (int64_t i = lo; i < hi; ++i, w.next()) detail::copy_elem(x, w.off(0), out, out.offset + i);
    });
  }
}

// scatter_add of whole rows, the gradient of an embedding lookup: the index is one id per
// row along dim 0 (broadcast over the other dims), src and out are f32 or f64 with
// contiguous rows. Row ids[i] of out gets row i of src added, in i order; threads split
// the columns, so every element keeps one writer and one order. False: not this case.
bool scatter_rows(int dim, const View& index, const View& src, const View& out) {
  if (dim != 0 || out.rank() < 1 || src.dtype != out.dtype || (out.dtype != DType::F32 && out.dtype != DType::F64) ||
      !out.is_contiguous() || index.shape[0] != src.shape[0])
    return false;
  int64_t cols = 1;
  for (size_t d = out.shape.size(); d-- > 1;) {
    if (index.shape[d] != out.shape[d] || (index.strides[d] != 0 && index.shape[d] != 1)) return false;  // one id per row
    if (src.shape[d] != out.shape[d] || (src.shape[d] != 1 && src.strides[d] != cols)) return false;
    cols *= out.shape[d];
  }
  const int64_t n = index.shape[0];
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = detail::load_index(index, index.offset + i * index.strides[0]);
  auto add_rows = [&](auto* o, const auto* s) {
    parallel_for(cols, std::max<int64_t>(64, detail::kParallelElems / std::max<int64_t>(n, 1)), [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        auto* dst = o + out.offset + ids[static_cast<size_t>(i)] * cols;
        const auto* row = s + src.offset + i * src.strides[0];
        for (int64_t c = c0; c < c1; ++c) dst[c] += row[c];
      }
    });
  };
  if (out.dtype == DType::F32)
    add_rows(static_cast<float*>(out.data), static_cast<const float*>(src.data));
  else
    add_rows(static_cast<double*>(out.data), static_cast<const double*>(src.data));
  return true;
}

}  // namespace

void gather(const View& x, int dim, const View& index, const View& out, Loc loc) {
  check_fits("gather", loc, index, "index", x, "input", dim, false);
  check_all("gather", loc, index, x.shape[dim], dim);
  std::vector<int64_t> x_strides = x.strides;
  int64_t dim_stride = x_strides[dim];
  x_strides[dim] = 0;  // the index value supplies the position along dim
  parallel_for(index.numel(), detail::kParallelElems, [&](int64_t lo, int64_t hi) {
    Walker<2> w(index.shape, {index.strides.data(), x_strides.data()}, {index.offset, x.offset}, lo);
    for (int64_t i = lo; i < hi; ++i, w.next())
      detail::copy_elem(x, w.off(1) + detail::load_index(index, w.off(0)) * dim_stride, out, out.offset + i);
  });
}

void index_select(const View& x, int dim, const View& index, const View& out, Loc loc) {
  check_all("index_select", loc, index, x.shape[dim], dim);
  std::vector<int64_t> ids(static_cast<size_t>(index.numel()));
  for (int64_t i = 0; i < index.numel(); ++i) ids[static_cast<size_t>(i)] = detail::load_index(index, index.offset_of(i));
  std::vector<int64_t> x_strides = x.strides;
  int64_t dim_stride = x_strides[dim];
  x_strides[dim] = 0;
  parallel_for(out.numel(), detail::kParallelElems, [&](int64_t lo, int64_t hi) {
    Walker<1> w(out.shape, {x_strides.data()}, {x.offset}, lo);
    for (int64_t i = lo; i < hi; ++i, w.next())
      detail::copy_elem(x, w.off(0) + ids[static_cast<size_t>(w.idx(static_cast<size_t>(dim)))] * dim_stride, out,
                        out.offset + i);
  });
}

void scatter_add(const View& x, int dim, const View& index, const View& src, const View& out, Loc loc) {
  check_fits("scatter_add", loc, index, "index", src, "src", dim, true);
  check_fits("scatter_add", loc, index, "index", x, "input", dim, false);
  check_all("scatter_add", loc, index, x.shape[dim], dim);
  copy_input(x, out);
  if (scatter_rows(dim, index, src, out)) return;
  // Serial: two index entries may name the same output element.
  std::vector<int64_t> out_strides = detail::contiguous_strides(out.shape);
  int64_t dim_stride = out_strides[dim];
  out_strides[dim] = 0;
  bool floating = is_floating(out.dtype);
  Walker<3> w(index.shape, {index.strides.data(), src.strides.data(), out_strides.data()},
              {index.offset, src.offset, out.offset}, 0);
  for (int64_t i = 0, n = index.numel(); i < n; ++i, w.next()) {
    int64_t at = w.off(2) + detail::load_index(index, w.off(0)) * dim_stride;
    if (floating)
      store_double(out.data, out.dtype, at,
                   load_as_double(out.data, out.dtype, at) + load_as_double(src.data, src.dtype, w.off(1)));
    else
      detail::store_int(out.data, out.dtype, at,
                        load_as_int(out.data, out.dtype, at) + load_as_int(src.data, src.dtype, w.off(1)));
  }
}

void one_hot(const View& ids, int64_t num_classes, const View& out, Loc loc) {
  if (ids.dtype != DType::I64 && ids.dtype != DType::I32)
    fail("one_hot", loc, "ids must be i64 or i32, got ", dtype_name(ids.dtype));
  Walker<1> check(ids.shape, {ids.strides.data()}, {ids.offset}, 0);
  for (int64_t i = 0, n = ids.numel(); i < n; ++i, check.next())
    check_index("one_hot", loc, detail::load_index(ids, check.off(0)), num_classes, ids.rank(), "class id");
  detail::zero_fill(out);
  Walker<1> w(ids.shape, {ids.strides.data()}, {ids.offset}, 0);
  for (int64_t i = 0, n = ids.numel(); i < n; ++i, w.next())
    store_double(out.data, out.dtype, out.offset + i * num_classes + detail::load_index(ids, w.off(0)), 1.0);
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::Gather, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    gather(in[0], std::get<IndexParams>(k.node.params).dim, in[1], out, k.node.loc);
  });
  ops.add(OpId::IndexSelect, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    index_select(in[0], std::get<IndexParams>(k.node.params).dim, in[1], out, k.node.loc);
  });
  ops.add(OpId::ScatterAdd, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    scatter_add(in[0], std::get<IndexParams>(k.node.params).dim, in[1], in[2], out, k.node.loc);
  });
  ops.add(OpId::OneHot, kIntDType, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    one_hot(in[0], std::get<OneHotParams>(k.node.params).num_classes, out, k.node.loc);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
