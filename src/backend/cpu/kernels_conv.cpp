// Sliding-window kernels: unfold2d (im2col) and its adjoint fold2d (col2im). Both run
// one task per (n, c) plane: the plane is gathered once into a compute-typed scratch
// buffer (so strided inputs cost one pass), then every tap row is written or summed with
// the valid output columns found once per row (no per-element bounds test). fold2d sums
// into a private plane per task, so every output element has one writer and the result
// does not depend on the thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

using detail::dispatch;

// Output positions along one axis: in = o * stride - pad + tap * dilation.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// The range [lo, hi) of output positions o whose input position o * s + base lies in [0, in).
void valid_range(int64_t base, int64_t s, int64_t in, int64_t outn, int64_t& lo, int64_t& hi) {
  // o * s + base >= 0  <=>  o >= ceil(-base / s)
  lo = base >= 0 ? 0 : (-base + s - 1) / s;
  // o * s + base <= in - 1  <=>  o <= floor((in - 1 - base) / s)
  hi = in - 1 - base < 0 ? 0 : (in - 1 - base) / s + 1;
  lo = std::min(lo, outn);
  hi = std::clamp(hi, lo, outn);
}

// Whether E stores exactly the compute type T (so runs can be copied without conversion).
template <class E, class T>
constexpr bool kDirect = (std::is_same_v<E, detail::Elem<DType::F32>> && std::is_same_v<T, float>) ||
                         (std::is_same_v<E, detail::Elem<DType::F64>> && std::is_same_v<T, double>);

}  // namespace

void unfold2d(const View& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
              int64_t dw, double pad_value, const View& out) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = out_size(H, kh, sh, ph, dh), OW = out_size(W, kw, sw, pw, dw);
  const int64_t L = OH * OW, K = kh * kw;
  if (N * C == 0 || L <= 0) return;
  dispatch(x.dtype, [&](auto xe) {
    using XE = decltype(xe);
    using T = decltype(XE::load(nullptr, 0));
    dispatch(out.dtype, [&](auto oe) {
      using OE = decltype(oe);
      const T pad = static_cast<T>(pad_value);
      parallel_for(N * C, detail::grain_for(K * L), [&](int64_t lo, int64_t hi) {
        std::vector<T> plane(static_cast<size_t>(H * W));
        std::vector<T> row(static_cast<size_t>(L));
        for (int64_t nc = lo; nc < hi; ++nc) {
          const int64_t n = nc / C, c = nc % C;
          const int64_t base = x.offset + n * x.strides[0] + c * x.strides[1];
          for (int64_t y = 0; y < H; ++y)
            for (int64_t xx = 0; xx < W; ++xx)
              plane[static_cast<size_t>(y * W + xx)] = XE::load(x.data, base + y * x.strides[2] + xx * x.strides[3]);
          for (int64_t i = 0; i < kh; ++i) {
            for (int64_t j = 0; j < kw; ++j) {
              int64_t ox_lo, ox_hi;
              valid_range(j * dw - pw, sw, W, OW, ox_lo, ox_hi);
              T* r = row.data();
              for (int64_t oy = 0; oy < OH; ++oy, r += OW) {
                const int64_t iy = oy * sh - ph + i * dh;
                if (iy < 0 || iy >= H) {
                  std::fill(r, r + OW, pad);
                  continue;
                }
                const T* src = plane.data();
                const int64_t at = iy * W + j * dw - pw;
                for (int64_t ox = 0; ox < ox_lo; ++ox) r[ox] = pad;
                if (sw == 1)
                  std::copy(src + at + ox_lo, src + at + ox_hi, r + ox_lo);
                else
                  for (int64_t ox = ox_lo; ox < ox_hi; ++ox) r[ox] = src[at + ox * sw];
                for (int64_t ox = ox_hi; ox < OW; ++ox) r[ox] = pad;
              }
              const int64_t dst = out.offset + (n * C * K + c * K + i * kw + j) * L;
              if constexpr (kDirect<OE, T>) {
                std::copy(row.begin(), row.end(), static_cast<T*>(out.data) + dst);
              } else {
                for (int64_t l = 0; l < L; ++l) OE::store(out.data, dst + l, static_cast<double>(row[l]));
              }
            }
          }
        }
      });
    });
  });
}

void fold2d(const View& cols, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, const View& out) {
  const int64_t N = out.shape[0], C = out.shape[1], H = out.shape[2], W = out.shape[3];
  const int64_t OH = out_size(H, kh, sh, ph, dh), OW = out_size(W, kw, sw, pw, dw);
  const int64_t L = std::max<int64_t>(OH, 0) * std::max<int64_t>(OW, 0), K = kh * kw;
  if (N * C * H * W == 0) return;
  const int64_t s0 = cols.strides[0], s1 = cols.strides[1], s2 = cols.strides[2];
  dispatch(cols.dtype, [&](auto ce) {
    using CE = decltype(ce);
    using T = decltype(CE::load(nullptr, 0));
    dispatch(out.dtype, [&](auto oe) {
      using OE = decltype(oe);
      parallel_for(N * C, detail::grain_for(K * std::max<int64_t>(L, 1)), [&](int64_t lo, int64_t hi) {
        std::vector<T> plane(static_cast<size_t>(H * W));
        std::vector<T> row(static_cast<size_t>(L));
        for (int64_t nc = lo; nc < hi; ++nc) {
          const int64_t n = nc / C, c = nc % C;
          std::fill(plane.begin(), plane.end(), T(0));
          for (int64_t i = 0; i < kh && L > 0; ++i) {
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t src = cols.offset + n * s0 + (c * K + i * kw + j) * s1;
              bool copied = false;
              if constexpr (kDirect<CE, T>) {
                if (s2 == 1) {
                  const T* p = static_cast<const T*>(cols.data) + src;
                  std::copy(p, p + L, row.begin());
                  copied = true;
                }
              }
              if (!copied)
                for (int64_t l = 0; l < L; ++l) row[static_cast<size_t>(l)] = CE::load(cols.data, src + l * s2);
              int64_t ox_lo, ox_hi;
              valid_range(j * dw - pw, sw, W, OW, ox_lo, ox_hi);
              const T* r = row.data();
              for (int64_t oy = 0; oy < OH; ++oy, r += OW) {
                const int64_t iy = oy * sh - ph + i * dh;
                if (iy < 0 || iy >= H) continue;
                T* dst = plane.data();
                const int64_t at = iy * W + j * dw - pw;
                if (sw == 1)
                  for (int64_t ox = ox_lo; ox < ox_hi; ++ox) dst[at + ox] += r[ox];
                else
                  for (int64_t ox = ox_lo; ox < ox_hi; ++ox) dst[at + ox * sw] += r[ox];
              }
            }
          }
          const int64_t dst = out.offset + nc * H * W;
          if constexpr (kDirect<OE, T>) {
            std::copy(plane.begin(), plane.end(), static_cast<T*>(out.data) + dst);
          } else {
            for (int64_t e = 0; e < H * W; ++e) OE::store(out.data, dst + e, static_cast<double>(plane[e]));
          }
        }
      });
    });
  });
}

}  // namespace alk::cpu
