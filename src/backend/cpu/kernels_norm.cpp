// Row-wise normalizations. softmax / log_softmax along an axis is here: each row is
// copied into a contiguous buffer of the compute type first, so strided and broadcast
// inputs cost one gather and the arithmetic loops stay simple. layer_norm, its backward
// and rms_norm are in norm_impl.inc, compiled per instruction set; this file picks one.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

#define ALK_DECLARE_ISA(ns)                                                                                       \
  namespace ns {                                                                                                  \
  void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out); \
  void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out);                   \
  void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,           \
                           const View& out);                                                                      \
  }
ALK_DECLARE_ISA(generic)
ALK_DECLARE_ISA(avx2)
ALK_DECLARE_ISA(avx512)
#undef ALK_DECLARE_ISA

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

}  // namespace

void softmax(const View& x, int axis, bool log, const View& out) {
  if (x.dtype == DType::F64)
    softmax_impl<double>(x, axis, log, out);
  else
    softmax_impl<float>(x, axis, log, out);
}

#define ALK_BY_ISA(call)                         \
  switch (isa()) {                               \
    case Isa::Avx512: return avx512::call;       \
    case Isa::Avx2: return avx2::call;           \
    case Isa::Generic: break;                    \
  }                                              \
  return generic::call

void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out) {
  ALK_BY_ISA(layer_norm(x, weight, bias, inner, eps, out));
}

void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out) {
  ALK_BY_ISA(rms_norm(x, weight, inner, eps, out));
}

void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,
                         const View& out) {
  ALK_BY_ISA(layer_norm_backward(x, weight, g, inner, eps, out));
}
#undef ALK_BY_ISA

}  // namespace alk::cpu
