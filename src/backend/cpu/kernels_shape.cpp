// Kernels that move elements around by position: argmax/argmin, tril/triu, cumsum,
// pad, concat, slice_scatter. Copies keep exact values when dtypes match.
#include <cstring>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

using detail::AxisRows;
using detail::Walker;

// NaN counts as larger (and smaller) than every number, as in torch: the first NaN wins.
void argreduce(const View& x, int axis, bool is_max, const View& out) {
  AxisRows rows(x, axis);
  if (rows.count == 0) return;
  if (rows.len == 0) fail(is_max ? "argmax" : "argmin", Loc::current(), "cannot reduce an empty dim ", axis);
  bool floating = is_floating(x.dtype);
  parallel_for(rows.count, detail::grain_for(rows.len), [&](int64_t lo, int64_t hi) {
    std::vector<double> fbuf(floating ? static_cast<size_t>(rows.len) : 0);
    for (int64_t r = lo; r < hi; ++r) {
      int64_t base = rows.base(r), best = 0;
      if (floating) {
        detail::load_run(x, base, rows.stride, rows.len, fbuf.data());
        double b = fbuf[0];
        for (int64_t i = 1; i < rows.len && !std::isnan(b); ++i) {
          double v = fbuf[static_cast<size_t>(i)];
          if (std::isnan(v) || (is_max ? v > b : v < b)) b = v, best = i;
        }
      } else {
        int64_t b = load_as_int(x.data, x.dtype, base);
        for (int64_t i = 1; i < rows.len; ++i) {
          int64_t v = load_as_int(x.data, x.dtype, base + i * rows.stride);
          if (is_max ? v > b : v < b) b = v, best = i;
        }
      }
      detail::store_int(out.data, out.dtype, out.offset + r, best);
    }
  });
}

void tri(const View& x, int64_t k, bool upper, const View& out) {
  size_t rank = x.shape.size();
  parallel_for(x.numel(), detail::kParallelElems, [&](int64_t lo, int64_t hi) {
    Walker<1> w(x.shape, {x.strides.data()}, {x.offset}, lo);
    for (int64_t i = lo; i < hi; ++i, w.next()) {
      int64_t diff = w.idx(rank - 1) - w.idx(rank - 2);
      if (upper ? diff >= k : diff <= k)
        detail::copy_elem(x, w.off(0), out, out.offset + i);
      else
        store_double(out.data, out.dtype, out.offset + i, 0.0);
    }
  });
}

// Floating sums run in double (an f32 running sum drifts over long rows); integer
// sums in i64.
void cumsum(const View& x, int axis, bool reverse, const View& out) {
  AxisRows rows(x, axis);
  if (rows.len == 0 || rows.count == 0) return;
  bool floating = is_floating(out.dtype) || is_floating(x.dtype);
  parallel_for(rows.count, detail::grain_for(rows.len), [&](int64_t lo, int64_t hi) {
    std::vector<double> fbuf(floating ? static_cast<size_t>(rows.len) : 0);
    for (int64_t r = lo; r < hi; ++r) {
      int64_t base = rows.base(r), out_base = out.offset + rows.out_base(r);
      if (floating) {
        detail::load_run(x, base, rows.stride, rows.len, fbuf.data());
        double sum = 0;
        for (int64_t s = 0; s < rows.len; ++s) {
          size_t i = static_cast<size_t>(reverse ? rows.len - 1 - s : s);
          sum += fbuf[i];
          fbuf[i] = sum;
        }
        detail::store_run(out, out_base, rows.inner, rows.len, fbuf.data());
      } else {
        int64_t sum = 0;
        for (int64_t s = 0; s < rows.len; ++s) {
          int64_t i = reverse ? rows.len - 1 - s : s;
          sum += load_as_int(x.data, x.dtype, base + i * rows.stride);
          detail::store_int(out.data, out.dtype, out_base + i * rows.inner, sum);
        }
      }
    }
  });
}

void pad(const View& x, std::span<const int64_t> pads, double value, const View& out) {
  size_t rank = x.shape.size();
  if (rank == 0) {
    detail::copy_elem(x, x.offset, out, out.offset);
    return;
  }
  if (out.numel() == 0) return;
  // Walk the output rows (all dims but the last); x's offset is kept for the
  // unshifted position and corrected by the `before` pads once per row.
  std::vector<int64_t> row_shape(out.shape.begin(), out.shape.end() - 1);
  std::vector<int64_t> row_strides(x.strides.begin(), x.strides.end() - 1);
  int64_t shift = 0;
  for (size_t d = 0; d + 1 < rank; ++d) shift += pads[2 * d] * x.strides[d];
  int64_t width = out.shape.back(), before = pads[2 * (rank - 1)], x_width = x.shape.back();
  int64_t last_stride = x.strides.back();
  int64_t rows = out.numel() / width;
  parallel_for(rows, detail::grain_for(width), [&](int64_t lo, int64_t hi) {
    Walker<1> w(row_shape, {row_strides.data()}, {x.offset - shift}, lo);
    for (int64_t r = lo; r < hi; ++r, w.next()) {
      int64_t out_base = out.offset + r * width;
      bool inside = true;
      for (size_t d = 0; d + 1 < rank && inside; ++d) {
        int64_t s = w.idx(d) - pads[2 * d];
        inside = s >= 0 && s < x.shape[d];
      }
      for (int64_t j = 0; j < width; ++j) {
        int64_t s = j - before;
        if (inside && s >= 0 && s < x_width)
          detail::copy_elem(x, w.off(0) + s * last_stride, out, out_base + j);
        else
          store_double(out.data, out.dtype, out_base + j, value);
      }
    }
  });
}

void concat(std::span<const View> xs, int dim, const View& out) {
  std::vector<int64_t> out_strides = detail::contiguous_strides(out.shape);
  int64_t at = 0;
  const size_t esize = dtype_size(out.dtype);
  for (const View& x : xs) {
    int64_t start = out.offset + at * out_strides[dim];
    if (x.dtype == out.dtype && x.is_contiguous()) {
      // Each outer index's block of x is one run of bytes in out (dims after `dim` included).
      int64_t outer = 1;
      for (int d = 0; d < dim; ++d) outer *= x.shape[static_cast<size_t>(d)];
      const int64_t run = outer == 0 ? 0 : x.numel() / outer, out_run = out_strides[dim] * out.shape[dim];
      const char* src = static_cast<const char*>(x.data) + x.offset * static_cast<int64_t>(esize);
      char* dst = static_cast<char*>(out.data) + start * static_cast<int64_t>(esize);
      parallel_for(outer, std::max<int64_t>(1, detail::kParallelElems / std::max<int64_t>(run, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t o = lo; o < hi; ++o)
                       std::memcpy(dst + o * out_run * static_cast<int64_t>(esize),
                                   src + o * run * static_cast<int64_t>(esize), static_cast<size_t>(run) * esize);
                   });
      at += x.shape[dim];
      continue;
    }
    parallel_for(x.numel(), detail::kParallelElems, [&](int64_t lo, int64_t hi) {
      Walker<2> w(x.shape, {x.strides.data(), out_strides.data()}, {x.offset, start}, lo);
      for (int64_t i = lo; i < hi; ++i, w.next()) detail::copy_elem(x, w.off(0), out, w.off(1));
    });
    at += x.shape[dim];
  }
}

void slice_scatter(const View& g, int dim, int64_t start, int64_t step, const View& out) {
  detail::zero_fill(out);
  if (g.dtype == out.dtype && g.is_contiguous()) {
    // The common case (a gradient of a slice): whole runs of the dims after `dim` copied as
    // bytes, one run per (outer index, slice position).
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= g.shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(dim) + 1; d < g.shape.size(); ++d) inner *= g.shape[d];
    const int64_t len = g.shape[static_cast<size_t>(dim)], full = out.shape[static_cast<size_t>(dim)];
    const size_t esize = dtype_size(g.dtype);
    const char* src = static_cast<const char*>(g.data) + g.offset * static_cast<int64_t>(esize);
    char* dst = static_cast<char*>(out.data) + out.offset * static_cast<int64_t>(esize);
    parallel_for(outer * len, std::max<int64_t>(1, detail::kParallelElems / std::max<int64_t>(inner, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t i = lo; i < hi; ++i) {
                     const int64_t o = i / len, j = i % len;
                     std::memcpy(dst + ((o * full + start + j * step) * inner) * static_cast<int64_t>(esize),
                                 src + i * inner * static_cast<int64_t>(esize), static_cast<size_t>(inner) * esize);
                   }
                 });
    return;
  }
  std::vector<int64_t> out_strides = detail::contiguous_strides(out.shape);
  int64_t base = out.offset + start * out_strides[dim];
  out_strides[dim] *= step;
  parallel_for(g.numel(), detail::kParallelElems, [&](int64_t lo, int64_t hi) {
    Walker<2> w(g.shape, {g.strides.data(), out_strides.data()}, {g.offset, base}, lo);
    for (int64_t i = lo; i < hi; ++i, w.next()) detail::copy_elem(g, w.off(0), out, w.off(1));
  });
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::ArgReduce, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<AxisParams>(k.node.params);
    argreduce(in[0], p.axis, p.flag, out);
  });
  ops.add(OpId::Tri, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<TriParams>(k.node.params);
    tri(in[0], p.k, p.upper, out);
  });
  ops.add(OpId::Cumsum, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<AxisParams>(k.node.params);
    cumsum(in[0], p.axis, p.flag, out);
  });
  ops.add(OpId::Pad, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<PadParams>(k.node.params);
    pad(in[0], p.pads, p.value, out);
  });
  ops.add(OpId::Concat, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    concat(in, std::get<IndexParams>(k.node.params).dim, out);
  });
  ops.add(OpId::SliceScatter, kAllDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<SliceScatterParams>(k.node.params);
    slice_scatter(in[0], p.dim, p.start, p.step, out);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
