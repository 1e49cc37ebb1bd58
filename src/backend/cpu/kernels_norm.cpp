// Row-wise normalizations: softmax / log_softmax along an axis, layer_norm and
// rms_norm over the trailing `inner` elements. Each row is copied into a contiguous
// buffer of the compute type first, so strided and broadcast inputs cost one gather
// and the arithmetic loops stay simple.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

using detail::AxisRows;

// T is the compute type; the sum of exponentials is always accumulated in double
// because it is cheap next to exp and keeps long rows accurate.
template <class T>
void softmax_impl(const View& x, int axis, bool log, const View& out) {
  AxisRows rows(x, axis);
  if (rows.len == 0 || rows.count == 0) return;
  parallel_for(rows.count, detail::grain_for(rows.len), [&](int64_t lo, int64_t hi) {
    std::vector<T> buf(static_cast<size_t>(rows.len));
    for (int64_t r = lo; r < hi; ++r) {
      detail::load_run(x, rows.base(r), rows.stride, rows.len, buf.data());
      T mx = -std::numeric_limits<T>::infinity();
      for (T v : buf) mx = std::max(mx, v);
      // A row of all -inf (fully masked) has no finite max; shifting by 0 instead
      // gives 0/0 = NaN, as the unshifted formula would. A NaN input still reaches
      // the sum (max() skips it) and so poisons the row as it should.
      if (!std::isfinite(mx)) mx = T(0);
      double sum = 0;
      if (log) {
        for (T& v : buf) {
          v -= mx;
          sum += static_cast<double>(std::exp(v));
        }
        // Subtracting max and log(sum) separately: folding them into one shift would
        // round it at max's magnitude and lose the small differences.
        T log_sum = static_cast<T>(std::log(sum));
        for (T& v : buf) v -= log_sum;
      } else {
        for (T& v : buf) {
          v = std::exp(v - mx);
          sum += static_cast<double>(v);
        }
        T inv = static_cast<T>(1.0 / sum);
        for (T& v : buf) v *= inv;
      }
      detail::store_run(out, out.offset + rows.out_base(r), rows.inner, rows.len, buf.data());
    }
  });
}

// The element offsets of a run of `inner` trailing elements relative to its first
// element: identical for every row, so computed once.
std::vector<int64_t> inner_offsets(const View& x, int64_t inner) {
  View rel = x;
  rel.offset = 0;
  std::vector<int64_t> offs(static_cast<size_t>(inner));
  for (int64_t e = 0; e < inner; ++e) offs[static_cast<size_t>(e)] = rel.offset_of(e);
  return offs;
}

std::vector<double> load_param(const View* p, int64_t inner, double fallback) {
  std::vector<double> v(static_cast<size_t>(inner), fallback);
  if (p) {
    std::vector<int64_t> offs = inner_offsets(*p, inner);
    for (int64_t e = 0; e < inner; ++e)
      v[static_cast<size_t>(e)] = load_as_double(p->data, p->dtype, p->offset + offs[static_cast<size_t>(e)]);
  }
  return v;
}

// Shared driver: fn(row buffer in double, inner) rewrites the buffer in place.
// Statistics are taken in double for every input dtype (a row is already in cache,
// so the wider type costs little and f32 rows of 10^5+ elements stay accurate).
template <class Fn>
void for_each_norm_row(const View& x, int64_t inner, const View& out, Fn&& fn) {
  if (inner <= 0 || x.numel() == 0) return;
  int64_t count = x.numel() / inner;
  std::vector<int64_t> offs = inner_offsets(x, inner);
  bool strided_run = true;  // do the trailing elements sit at a fixed stride?
  int64_t step = inner > 1 ? offs[1] : 1;
  for (int64_t e = 0; e < inner && strided_run; ++e) strided_run = offs[static_cast<size_t>(e)] == e * step;
  parallel_for(count, detail::grain_for(inner), [&](int64_t lo, int64_t hi) {
    std::vector<double> buf(static_cast<size_t>(inner));
    for (int64_t r = lo; r < hi; ++r) {
      int64_t base = x.offset_of(r * inner);
      if (strided_run) {
        detail::load_run(x, base, step, inner, buf.data());
      } else {
        for (int64_t e = 0; e < inner; ++e)
          buf[static_cast<size_t>(e)] = load_as_double(x.data, x.dtype, base + offs[static_cast<size_t>(e)]);
      }
      fn(buf.data());
      detail::store_run(out, out.offset + r * inner, 1, inner, buf.data());
    }
  });
}

}  // namespace

void softmax(const View& x, int axis, bool log, const View& out) {
  if (x.dtype == DType::F64)
    softmax_impl<double>(x, axis, log, out);
  else
    softmax_impl<float>(x, axis, log, out);
}

void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out) {
  std::vector<double> w = load_param(weight, inner, 1.0), b = load_param(bias, inner, 0.0);
  double n = static_cast<double>(inner);
  for_each_norm_row(x, inner, out, [&](double* row) {
    double sum = 0;
    for (int64_t e = 0; e < inner; ++e) sum += row[e];
    double mean = sum / n, sq = 0;
    // Two passes: sum((x - mean)^2) does not cancel the way E[x^2] - mean^2 does.
    for (int64_t e = 0; e < inner; ++e) sq += (row[e] - mean) * (row[e] - mean);
    double inv = 1.0 / std::sqrt(sq / n + eps);
    for (int64_t e = 0; e < inner; ++e) row[e] = (row[e] - mean) * inv * w[static_cast<size_t>(e)] + b[static_cast<size_t>(e)];
  });
}

void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out) {
  std::vector<double> w = load_param(weight, inner, 1.0);
  double n = static_cast<double>(inner);
  for_each_norm_row(x, inner, out, [&](double* row) {
    double sq = 0;
    for (int64_t e = 0; e < inner; ++e) sq += row[e] * row[e];
    double inv = 1.0 / std::sqrt(sq / n + eps);
    for (int64_t e = 0; e < inner; ++e) row[e] = row[e] * inv * w[static_cast<size_t>(e)];
  });
}

namespace {

// Loads row r (inner elements) of v into buf as doubles.
void load_row(const View& v, const std::vector<int64_t>& offs, int64_t r, int64_t inner, double* buf) {
  int64_t base = v.offset_of(r * inner);
  for (int64_t e = 0; e < inner; ++e)
    buf[e] = load_as_double(v.data, v.dtype, base + offs[static_cast<size_t>(e)]);
}

}  // namespace

void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,
                         const View& out) {
  const int64_t rows = inner > 0 ? x.numel() / inner : 0;
  std::vector<double> w = load_param(&weight, inner, 1.0);
  std::vector<int64_t> xoffs = inner_offsets(x, inner), goffs = inner_offsets(g, inner);
  // dw and db sum over rows: each fixed chunk of rows keeps its own partial sums, added in
  // chunk order afterwards, so the result does not depend on the thread count.
  constexpr int64_t kChunk = 32;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks * 2 * inner), 0.0);
  const double n = static_cast<double>(inner);
  parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<double> xr(static_cast<size_t>(inner)), gr(static_cast<size_t>(inner)), dx(static_cast<size_t>(inner));
    for (int64_t c = c0; c < c1; ++c) {
      double* dw = partial.data() + c * 2 * inner;
      double* db = dw + inner;
      for (int64_t r = c * kChunk; r < std::min(rows, (c + 1) * kChunk); ++r) {
        load_row(x, xoffs, r, inner, xr.data());
        load_row(g, goffs, r, inner, gr.data());
        double sum = 0, sq = 0;
        for (int64_t e = 0; e < inner; ++e) sum += xr[e];
        const double mean = sum / n;
        for (int64_t e = 0; e < inner; ++e) sq += (xr[e] - mean) * (xr[e] - mean);
        const double rstd = 1.0 / std::sqrt(sq / n + eps);
        // xhat = (x - mean) rstd; gx = g w; dx = rstd (gx - mean(gx) - xhat mean(gx xhat))
        double sum_gx = 0, sum_gx_xhat = 0;
        for (int64_t e = 0; e < inner; ++e) {
          const double xhat = (xr[e] - mean) * rstd, gx = gr[e] * w[static_cast<size_t>(e)];
          sum_gx += gx;
          sum_gx_xhat += gx * xhat;
          dw[e] += gr[e] * xhat;
          db[e] += gr[e];
        }
        const double mean_gx = sum_gx / n, mean_gx_xhat = sum_gx_xhat / n;
        for (int64_t e = 0; e < inner; ++e) {
          const double xhat = (xr[e] - mean) * rstd;
          dx[e] = rstd * (gr[e] * w[static_cast<size_t>(e)] - mean_gx - xhat * mean_gx_xhat);
        }
        detail::store_run(out, out.offset + r * inner, 1, inner, dx.data());
      }
    }
  });
  std::vector<double> dw(static_cast<size_t>(inner), 0.0), db(static_cast<size_t>(inner), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t e = 0; e < inner; ++e) {
      dw[e] += partial[static_cast<size_t>(c * 2 * inner + e)];
      db[e] += partial[static_cast<size_t>(c * 2 * inner + inner + e)];
    }
  detail::store_run(out, out.offset + rows * inner, 1, inner, dw.data());
  detail::store_run(out, out.offset + (rows + 1) * inner, 1, inner, db.data());
}

}  // namespace alk::cpu
