// Sliding-window kernels: unfold2d (im2col) and its adjoint fold2d (col2im). Both run
// one task per (n, c) plane: the plane is gathered once into a compute-typed scratch
// buffer (so strided inputs cost one pass), then every tap row is written or summed with
// the valid output columns found once per row (no per-element bounds test). fold2d sums
// into a private plane per task, so every output element has one writer and the result
// does not depend on the thread count. depthwise_conv2d is a direct convolution (no unfold):
// each task lays a padded plane out once, then conv_impl.inc's per-ISA loop runs the taps.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "alk/error.h"
#include "backend/cpu/conv_epilogue.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

#define ALK_DECLARE_ISA(ns)                                                                                            \
  namespace ns {                                                                                                       \
  void depthwise_plane(const float* P, int64_t Wq, int64_t sh, int64_t sw, int64_t dh, int64_t dw, const float* w,     \
                       int64_t kh, int64_t kw, float bias, float* out, int64_t OH, int64_t OW, const float** taps,     \
                       float* row_w, int64_t y_lo, int64_t y_hi);                                                      \
  void depthwise_plane(const double* P, int64_t Wq, int64_t sh, int64_t sw, int64_t dh, int64_t dw, const double* w,   \
                       int64_t kh, int64_t kw, double bias, double* out, int64_t OH, int64_t OW, const double** taps,  \
                       double* row_w, int64_t y_lo, int64_t y_hi);                                                     \
  int64_t dense_out_block();                                                                                           \
  void split_phases(const float* s, int64_t W, int64_t pw, int64_t sw, int64_t Wq, float* row);                        \
  void finish(float* p, const float* r, int64_t rows, int64_t n, int64_t stride, int act, const float* affine);       \
  void dense_run(const float* P, int64_t plane, int64_t C, const int64_t* taps, int64_t K, const float* wp, int64_t O, \
                 int64_t Opad, const float* bias, float* out, int64_t out_plane, int64_t v_begin, int64_t v_end,       \
                 int64_t Wrow, int64_t OW);                                                                            \
  }
ALK_DECLARE_ISA(generic)
ALK_DECLARE_ISA(avx2)
ALK_DECLARE_ISA(avx512)
#undef ALK_DECLARE_ISA

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

// A Conv2d epilogue the convolution applies itself (conv2d_epilogue): act(out (+ residual))
// (* scale + shift) on each part of the output right after computing it, while it is in cache.
// act 0: none, 1: relu, 2: hardswish. residual: an f32 view with the output's shape, contiguous.
// affine: PP-LCNet's learnable affine block after the activation (det, rec), two constants.
struct Finish {
  int act = 0;
  const float* residual = nullptr;  // at the output's element 0
  bool has_affine = false;
  float affine[2] = {1.0f, 0.0f};
  bool any() const { return act != 0 || residual != nullptr || has_affine; }
  // Output elements [at, at + n) (contiguous), or rows of them `stride` apart.
  void apply(float* out_base, int64_t at, int64_t n, int64_t rows = 1, int64_t stride = 0) const {
    if (!any() || n <= 0) return;
    float* p = out_base + at;
    const float* r = residual ? residual + at : nullptr;
    switch (isa()) {
      case Isa::Avx512: return avx512::finish(p, r, rows, n, stride, act, has_affine ? affine : nullptr);
      case Isa::Avx2: return avx2::finish(p, r, rows, n, stride, act, has_affine ? affine : nullptr);
      case Isa::Generic: return generic::finish(p, r, rows, n, stride, act, has_affine ? affine : nullptr);
    }
  }
};

// One contiguous input row into its stride phases (see conv_impl.inc's split_phases, which f32
// rows go through): column xx goes to phase (xx + pw) % sw, position (xx + pw) / sw.
template <class T>
void split_phases(const T* s, int64_t W, int64_t pw, int64_t sw, int64_t Wq, T* row) {
  if constexpr (std::is_same_v<T, float>) {
    switch (isa()) {
      case Isa::Avx512: return avx512::split_phases(s, W, pw, sw, Wq, row);
      case Isa::Avx2: return avx2::split_phases(s, W, pw, sw, Wq, row);
      case Isa::Generic: return generic::split_phases(s, W, pw, sw, Wq, row);
    }
  }
  for (int64_t q = 0; q < sw; ++q) {
    const int64_t first = ((q - pw) % sw + sw) % sw;  // the first column landing in phase q
    if (first >= W) continue;
    const int64_t n = (W - first + sw - 1) / sw;
    T* d = row + q * Wq + (first + pw) / sw;
    const T* src = s + first;
    for (int64_t k = 0; k < n; ++k) d[k] = src[k * sw];
  }
}

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

namespace {

// fold2d when no two windows overlap (stride >= the dilated kernel: a ConvTranspose with stride =
// kernel, nearest upsampling) and both sides are f32 with contiguous rows: each output element
// gets at most one tap, stored in place (no private plane to sum into). False: not that case.
bool fold_disjoint(const View& cols, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                   int64_t dw, const View& out) {
  if (cols.dtype != DType::F32 || out.dtype != DType::F32 || cols.strides[2] != 1 || sh < (kh - 1) * dh + 1 ||
      sw < (kw - 1) * dw + 1)
    return false;
  const int64_t N = out.shape[0], C = out.shape[1], H = out.shape[2], W = out.shape[3];
  const int64_t OH = out_size(H, kh, sh, ph, dh), OW = out_size(W, kw, sw, pw, dw), K = kh * kw;
  if (OH <= 0 || OW <= 0) return false;
  // Every output element is some window's tap only when the windows tile the image exactly.
  const bool tiled = dh == 1 && dw == 1 && sh == kh && sw == kw && ph == 0 && pw == 0 && OH * sh == H && OW * sw == W;
  const float* cd = static_cast<const float*>(cols.data);
  float* od = static_cast<float*>(out.data);
  parallel_for(N * C, detail::grain_for(H * W), [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      float* plane = od + out.offset + nc * H * W;
      if (tiled) {
        // Windows tiling the image (det's nearest upsampling and stride = kernel ConvTranspose):
        // output row oy * kh + i interleaves the kw tap rows (i, j). Written row by row, in
        // order (kw strided passes over each row stored one float at a time: det's Fold kernels
        // were 7% of its time); kw == 2 spelled out so the compiler vectorizes the interleave.
        const float* base = cd + cols.offset + n * cols.strides[0] + c * K * cols.strides[1];
        for (int64_t oy = 0; oy < OH; ++oy)
          for (int64_t i = 0; i < kh; ++i) {
            float* dst = plane + (oy * kh + i) * W;
            const float* r0 = base + (i * kw) * cols.strides[1] + oy * OW;
            if (kw == 2) {
              const float* r1 = r0 + cols.strides[1];
              for (int64_t ox = 0; ox < OW; ++ox) {
                dst[2 * ox] = r0[ox];
                dst[2 * ox + 1] = r1[ox];
              }
            } else {
              for (int64_t ox = 0; ox < OW; ++ox)
                for (int64_t j = 0; j < kw; ++j) dst[ox * kw + j] = r0[j * cols.strides[1] + ox];
            }
          }
        continue;
      }
      std::fill(plane, plane + H * W, 0.0f);
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          const float* r = cd + cols.offset + n * cols.strides[0] + (c * K + i * kw + j) * cols.strides[1];
          int64_t ox_lo, ox_hi;
          valid_range(j * dw - pw, sw, W, OW, ox_lo, ox_hi);
          for (int64_t oy = 0; oy < OH; ++oy, r += OW) {
            const int64_t iy = oy * sh - ph + i * dh;
            if (iy < 0 || iy >= H) continue;
            float* dst = plane + iy * W + j * dw - pw;
            for (int64_t ox = ox_lo; ox < ox_hi; ++ox) dst[ox * sw] = r[ox];
          }
        }
    }
  });
  return true;
}

}  // namespace

void fold2d(const View& cols, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, const View& out) {
  const int64_t N = out.shape[0], C = out.shape[1], H = out.shape[2], W = out.shape[3];
  const int64_t OH = out_size(H, kh, sh, ph, dh), OW = out_size(W, kw, sw, pw, dw);
  const int64_t L = std::max<int64_t>(OH, 0) * std::max<int64_t>(OW, 0), K = kh * kw;
  if (N * C * H * W == 0) return;
  if (fold_disjoint(cols, kh, kw, sh, sw, ph, pw, dh, dw, out)) return;
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

namespace {

// The output columns conv_impl.inc computes at once (its kBlock): f32 32, f64 16.
template <class T>
constexpr int64_t kDepthwiseBlock = sizeof(T) == 4 ? 32 : 16;

template <class T>
void depthwise_plane_isa(const T* P, int64_t Wq, int64_t sh, int64_t sw, int64_t dh, int64_t dw, const T* w, int64_t kh,
                         int64_t kw, T bias, T* out, int64_t OH, int64_t OW, const T** taps, T* row_w, int64_t y_lo,
                         int64_t y_hi) {
  switch (isa()) {
    case Isa::Avx512:
      return avx512::depthwise_plane(P, Wq, sh, sw, dh, dw, w, kh, kw, bias, out, OH, OW, taps, row_w, y_lo, y_hi);
    case Isa::Avx2:
      return avx2::depthwise_plane(P, Wq, sh, sw, dh, dw, w, kh, kw, bias, out, OH, OW, taps, row_w, y_lo, y_hi);
    case Isa::Generic:
      break;
  }
  generic::depthwise_plane(P, Wq, sh, sw, dh, dw, w, kh, kw, bias, out, OH, OW, taps, row_w, y_lo, y_hi);
}

void depthwise(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
               int64_t dh, int64_t dw, const View& out, const Finish& fin = {}) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t kh = w.shape[2], kw = w.shape[3], K = kh * kw;
  const int64_t OH = out.shape[2], OW = out.shape[3];
  if (N * C == 0 || OH <= 0 || OW <= 0) return;
  dispatch(x.dtype, [&](auto xe) {
    using XE = decltype(xe);
    using T0 = decltype(XE::load(nullptr, 0));
    using T = std::conditional_t<std::is_same_v<T0, float>, float, double>;
    dispatch(out.dtype, [&](auto oe) {
      using OE = decltype(oe);
      constexpr int64_t B = kDepthwiseBlock<T>;
      // Padded rows; each phase row is wide enough for the widest tap offset plus the output
      // rounded up to whole blocks (the last block reads past OW into zeros).
      const int64_t Hp = std::max(H + 2 * ph, (OH - 1) * sh + (kh - 1) * dh + 1);
      const int64_t max_off = ((kw - 1) * dw) / sw;
      const int64_t Wq = std::max((W + 2 * pw + sw - 1) / sw, max_off + (OW + B - 1) / B * B);
      const int64_t plane_size = Hp * sw * Wq;
      const bool x_rows = x.strides[3] == 1 && sw == 1;  // input rows copy as runs
      const bool w_direct = w.dtype == (std::is_same_v<T, float> ? DType::F32 : DType::F64);
      const bool b_direct = bias && bias->dtype == w.dtype && w_direct;
      auto bias_of = [&](int64_t c) {
        if (b_direct) return static_cast<const T*>(bias->data)[bias->offset + c * bias->strides[0]];
        return bias ? static_cast<T>(load_as_double(bias->data, bias->dtype, bias->offset + c * bias->strides[0]))
                    : T(0);
      };
      parallel_for(N * C, detail::grain_for(K * OH * OW), [&](int64_t lo, int64_t hi) {
        std::vector<T> P(static_cast<size_t>(plane_size), T(0));  // pads stay zero across planes
        std::vector<T> wk(static_cast<size_t>(K));
        std::vector<T> tmp;
        std::vector<const T*> taps(static_cast<size_t>(K));
        std::vector<T> row_w(static_cast<size_t>(K));
        if constexpr (!kDirect<OE, T>) tmp.resize(static_cast<size_t>(OH * OW));
        for (int64_t nc = lo; nc < hi; ++nc) {
          const int64_t n = nc / C, c = nc % C;
          const int64_t base = x.offset + n * x.strides[0] + c * x.strides[1];
          for (int64_t y = 0; y < H; ++y) {
            const int64_t src = base + y * x.strides[2];
            T* row = P.data() + (y + ph) * sw * Wq;
            if (x_rows) {
              if constexpr (kDirect<XE, T>) {
                const T* s = static_cast<const T*>(x.data) + src;
                std::copy(s, s + W, row + pw);
                continue;
              }
            }
            if constexpr (kDirect<XE, T>) {
              if (x.strides[3] == 1) {
                split_phases(static_cast<const T*>(x.data) + src, W, pw, sw, Wq, row);
                continue;
              }
            }
            // Column xx + pw goes to phase (xx + pw) % sw, position (xx + pw) / sw: counted, not divided.
            int64_t q = pw % sw, u = pw / sw;
            for (int64_t xx = 0; xx < W; ++xx) {
              row[q * Wq + u] = static_cast<T>(XE::load(x.data, src + xx * x.strides[3]));
              if (++q == sw) {
                q = 0;
                ++u;
              }
            }
          }
          if (w_direct) {  // one load per tap, no dtype dispatch (this runs for every plane)
            const T* wc = static_cast<const T*>(w.data) + w.offset + c * w.strides[0];
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) wk[static_cast<size_t>(i * kw + j)] = wc[i * w.strides[2] + j * w.strides[3]];
          } else {
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j)
                wk[static_cast<size_t>(i * kw + j)] = static_cast<T>(
                    load_as_double(w.data, w.dtype, w.offset + c * w.strides[0] + i * w.strides[2] + j * w.strides[3]));
          }
          T* dst = nullptr;
          if constexpr (kDirect<OE, T>)
            dst = static_cast<T*>(out.data) + out.offset + nc * OH * OW;
          else
            dst = tmp.data();
          depthwise_plane_isa<T>(P.data(), Wq, sh, sw, dh, dw, wk.data(), kh, kw, bias_of(c), dst, OH, OW, taps.data(),
                                 row_w.data(), ph, ph + H);
          if constexpr (kDirect<OE, T> && std::is_same_v<T, float>)
            fin.apply(static_cast<float*>(out.data) + out.offset, nc * OH * OW, OH * OW);
          if constexpr (!kDirect<OE, T>) {
            const int64_t at = out.offset + nc * OH * OW;
            for (int64_t e = 0; e < OH * OW; ++e) OE::store(out.data, at + e, static_cast<double>(tmp[e]));
          }
        }
      });
    });
  });
}

// Rows [r0, r1) of the unfolded input of image n (row c * kh * kw + i * kw + j), columns
// [l0, l1) of the output grid, into tile (row stride l1 - l0). f32 only.
void unfold_tile(const View& x, int64_t n, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                 int64_t dh, int64_t dw, int64_t OW, int64_t l0, int64_t l1, int64_t r0, int64_t r1, float* tile) {
  const int64_t H = x.shape[2], W = x.shape[3], T = l1 - l0, K = kh * kw;
  const float* xd = static_cast<const float*>(x.data);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / K, i = r % K / kw, j = r % kw;
    const float* plane = xd + x.offset + n * x.strides[0] + c * x.strides[1];
    float* dst = tile + (r - r0) * T;
    int64_t ox_lo, ox_hi;
    valid_range(j * dw - pw, sw, W, OW, ox_lo, ox_hi);
    for (int64_t oy = l0 / OW; oy * OW < l1; ++oy) {
      const int64_t a = std::max(l0, oy * OW), b = std::min(l1, (oy + 1) * OW);  // this row's part of the tile
      float* d = dst + (a - l0);
      const int64_t iy = oy * sh - ph + i * dh;
      if (iy < 0 || iy >= H) {
        std::fill(d, d + (b - a), 0.0f);
        continue;
      }
      const int64_t xa = a - oy * OW, xb = b - oy * OW;  // output columns [xa, xb)
      const int64_t lo = std::clamp(ox_lo, xa, xb), hi = std::clamp(ox_hi, lo, xb);
      std::fill(d, d + (lo - xa), 0.0f);
      const float* src = plane + iy * x.strides[2] + (j * dw - pw) * x.strides[3];
      if (sw == 1 && x.strides[3] == 1)
        std::copy(src + lo, src + hi, d + (lo - xa));
      else
        for (int64_t ox = lo; ox < hi; ++ox) d[ox - xa] = src[ox * sw * x.strides[3]];
      std::fill(d + (hi - xa), d + (xb - xa), 0.0f);
    }
  }
}

// Grouped f32 convolution: per image, blocks of output columns whose unfolded input fits in
// kTileBytes are unfolded and multiplied by the weights as [groups, O/groups, K] x [groups,
// K, T] (one batched matmul), so the unfolded input never leaves the cache.
void blocked_im2col(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                    int64_t dh, int64_t dw, const View& out, const Finish& fin = {}) {
  constexpr int64_t kTileBytes = 1 << 20;
  const int64_t N = x.shape[0], C = x.shape[1];
  const int64_t O = w.shape[0], Cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const int64_t groups = C / Cg, Og = O / groups, Kg = Cg * kh * kw, R = C * kh * kw;
  const int64_t OH = out.shape[2], OW = out.shape[3], L = OH * OW;
  // The weights as a contiguous [O, Kg] matrix (w may be any view).
  std::vector<float> wc(static_cast<size_t>(O * Kg));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          wc[static_cast<size_t>(((o * Cg + c) * kh + i) * kw + j)] = static_cast<float>(load_as_double(
              w.data, w.dtype, w.offset + o * w.strides[0] + c * w.strides[1] + i * w.strides[2] + j * w.strides[3]));
  // Blocks of T output columns, at least 4 of them when the image allows (T >= 64), so both
  // threads get work: each task unfolds and multiplies its own blocks (the matmul inside a
  // task runs on that thread), the unfolded block staying in that core's cache.
  int64_t T = std::min(L, std::max<int64_t>(64, kTileBytes / static_cast<int64_t>(sizeof(float)) / R / 16 * 16));
  if (N * ((L + T - 1) / T) < 4) T = std::min(T, std::max<int64_t>(64, (L + 3) / 4 + 15) / 16 * 16);
  const int64_t blocks = (L + T - 1) / T;
  std::vector<float> bv(static_cast<size_t>(O), 0.0f);
  if (bias)
    for (int64_t o = 0; o < O; ++o)
      bv[static_cast<size_t>(o)] =
          static_cast<float>(load_as_double(bias->data, bias->dtype, bias->offset + o * bias->strides[0]));
  const View a{wc.data(), DType::F32, {groups, Og, Kg}, {Og * Kg, Kg, 1}, 0};
  parallel_for(N * blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> tile(static_cast<size_t>(R * T)), obuf(static_cast<size_t>(O * T));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / blocks, l0 = item % blocks * T, l1 = std::min(L, l0 + T), t = l1 - l0;
      unfold_tile(x, n, kh, kw, sh, sw, ph, pw, dh, dw, OW, l0, l1, 0, R, tile.data());
      matmul(a, View{tile.data(), DType::F32, {groups, Kg, t}, {Kg * t, t, 1}, 0},
             View{obuf.data(), DType::F32, {groups, Og, t}, {Og * t, t, 1}, 0});
      float* od = static_cast<float*>(out.data) + out.offset + n * O * L + l0;
      for (int64_t o = 0; o < O; ++o) {  // with the bias, while the block is in cache
        const float* src = obuf.data() + o * t;
        float* dst = od + o * L;
        const float b = bv[static_cast<size_t>(o)];
        for (int64_t l = 0; l < t; ++l) dst[l] = src[l] + b;
        fin.apply(static_cast<float*>(out.data) + out.offset, n * O * L + o * L + l0, t);
      }
    }
  });
}

// The widest column block of conv_impl.inc's dense_row over the instruction sets (AVX-512: 2 x 16
// floats): the padded rows' slack is sized for it whatever the ISA.
constexpr int64_t kDenseMaxCols = 32;
// Up to this many output channels the direct dense kernel beats blocked im2col + GEMM (the
// GEMM's M side is the output channels; bench/onnx/NOTES.md).
constexpr int64_t kDenseMaxO = 48;

bool dense_direct_fits(const View& x, const View& w, const View& out) {
  const int64_t C = x.shape[1], O = w.shape[0], Cg = w.shape[1];
  return Cg == C && O <= kDenseMaxO && w.shape[2] * w.shape[3] > 1 && x.dtype == DType::F32 &&
         out.dtype == DType::F32 && out.strides == detail::contiguous_strides(out.shape);
}

// Dense f32 convolution with few output channels: the input padded once into [N][C][Hp][sw][Wq]
// (as depthwise lays a plane out: phase q of padded row y holds columns q, q + sw, ..., so every
// tap of an output row reads a contiguous run, whatever the stride), the weights packed as
// [C][kh * kw][Opad], then conv_impl.inc's dense_run over runs of output positions. With stride
// 1 a run covers the whole image: position v = oy * Wq + ox reads padded input v + tap offset,
// so rows of any width fill whole vector blocks (the Wq - OW columns per row past the output are
// computed and dropped: (kw - 1) * dw of them); with a stride, a run is one output row.
void dense_direct(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                  int64_t dh, int64_t dw, const View& out, const Finish& fin = {}) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], kh = w.shape[2], kw = w.shape[3], K = kh * kw;
  const int64_t OH = out.shape[2], OW = out.shape[3];
  if (N * O == 0 || OH <= 0 || OW <= 0) return;
  int64_t kO = 0;
  switch (isa()) {
    case Isa::Avx512: kO = avx512::dense_out_block(); break;
    case Isa::Avx2: kO = avx2::dense_out_block(); break;
    case Isa::Generic: kO = generic::dense_out_block(); break;
  }
  const bool flat = sh == 1 && sw == 1;
  const int64_t Opad = (O + kO - 1) / kO * kO;
  const int64_t Hp = std::max(H + 2 * ph, (OH - 1) * sh + (kh - 1) * dh + 1);
  const int64_t max_off = ((kw - 1) * dw) / sw;
  const int64_t Wq = flat ? W + 2 * pw
                          : std::max((W + 2 * pw + sw - 1) / sw,
                                     max_off + (OW + kDenseMaxCols - 1) / kDenseMaxCols * kDenseMaxCols);
  const int64_t row = sw * Wq;
  // A flat run's last block reads up to a block past the last row's taps: one more zero row.
  const int64_t plane = flat ? (Hp + 1) * Wq + kDenseMaxCols : Hp * row;
  std::vector<int64_t> taps(static_cast<size_t>(K));
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j) taps[static_cast<size_t>(i * kw + j)] = i * dh * row + (j * dw) % sw * Wq + (j * dw) / sw;
  // The padded input lives in a buffer kept per launching thread up to kKeepBytes (a replayed
  // model calls this with the same sizes every time: no fresh pages to fault in per call).
  constexpr size_t kKeepBytes = size_t{32} << 20;
  thread_local std::vector<float> kept;
  std::vector<float> own;
  const size_t need = static_cast<size_t>(N * C * plane);
  std::vector<float>& buffer = need * sizeof(float) <= kKeepBytes ? kept : own;
  if (buffer.size() < need) buffer.resize(need);
  float* const padded = buffer.data();
  std::vector<float> wp(static_cast<size_t>(C * K * Opad), 0.0f), bv(static_cast<size_t>(Opad), 0.0f);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          wp[static_cast<size_t>((c * K + i * kw + j) * Opad + o)] = static_cast<float>(load_as_double(
              w.data, w.dtype, w.offset + o * w.strides[0] + c * w.strides[1] + i * w.strides[2] + j * w.strides[3]));
  if (bias)
    for (int64_t o = 0; o < O; ++o)
      bv[static_cast<size_t>(o)] =
          static_cast<float>(load_as_double(bias->data, bias->dtype, bias->offset + o * bias->strides[0]));
  const float* xd = static_cast<const float*>(x.data);
  parallel_for(N * C, detail::grain_for(plane), [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) {
      float* dst = padded + nc * plane;
      const float* src = xd + x.offset + nc / C * x.strides[0] + nc % C * x.strides[1];
      if (flat && x.strides[3] == 1) {
        // Only the padding is zeroed (a whole-plane fill, then the rows over it, wrote det's
        // 80x80 inputs twice): rows above, each row's pw columns either side, rows below and
        // the run's slack.
        std::fill(dst, dst + ph * row, 0.0f);
        for (int64_t y = 0; y < H; ++y) {
          float* r = dst + (y + ph) * row;
          std::fill(r, r + pw, 0.0f);
          std::copy(src + y * x.strides[2], src + y * x.strides[2] + W, r + pw);
          std::fill(r + pw + W, r + row, 0.0f);
        }
        std::fill(dst + (ph + H) * row, dst + plane, 0.0f);
        continue;
      }
      std::fill(dst, dst + plane, 0.0f);
      for (int64_t y = 0; y < H; ++y) {
        float* r = dst + (y + ph) * row;
        const float* s = src + y * x.strides[2];
        if (sw == 1 && x.strides[3] == 1) {
          std::copy(s, s + W, r + pw);
          continue;
        }
        if (x.strides[3] == 1) {
          split_phases(s, W, pw, sw, Wq, r);
          continue;
        }
        // Column xx + pw goes to phase (xx + pw) % sw, position (xx + pw) / sw: counted, not divided.
        int64_t q = pw % sw, u = pw / sw;
        for (int64_t xx = 0; xx < W; ++xx) {
          r[q * Wq + u] = s[xx * x.strides[3]];
          if (++q == sw) {
            q = 0;
            ++u;
          }
        }
      }
    }
  });
  float* od = static_cast<float*>(out.data) + out.offset;
  auto run = [&](const float* p, float* o, int64_t v_begin, int64_t v_end, int64_t Wrow) {
    switch (isa()) {
      case Isa::Avx512:
        return avx512::dense_run(p, plane, C, taps.data(), K, wp.data(), O, Opad, bv.data(), o, OH * OW, v_begin, v_end,
                                 Wrow, OW);
      case Isa::Avx2:
        return avx2::dense_run(p, plane, C, taps.data(), K, wp.data(), O, Opad, bv.data(), o, OH * OW, v_begin, v_end,
                               Wrow, OW);
      case Isa::Generic:
        return generic::dense_run(p, plane, C, taps.data(), K, wp.data(), O, Opad, bv.data(), o, OH * OW, v_begin,
                                  v_end, Wrow, OW);
    }
  };
  if (flat) {  // tasks of one 32-position block of one image
    const int64_t V = OH * Wq, blocks = (V + kDenseMaxCols - 1) / kDenseMaxCols;
    parallel_for(N * blocks, detail::grain_for(C * K * O * kDenseMaxCols), [&](int64_t lo, int64_t hi) {
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t n = item / blocks, v0 = item % blocks * kDenseMaxCols;
        run(padded + n * C * plane, od + n * O * OH * OW, v0, std::min(V, v0 + kDenseMaxCols), Wq);
      }
    });
    // A block's outputs are spread over rows with gaps: the epilogue goes over each plane after.
    if (fin.any())
      parallel_for(N * O, detail::grain_for(OH * OW), [&](int64_t lo, int64_t hi) {
        fin.apply(od, lo * OH * OW, (hi - lo) * OH * OW);
      });
    return;
  }
  parallel_for(N * OH, detail::grain_for(C * K * O * OW), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = r / OH, oy = r % OH;
      run(padded + n * C * plane + oy * sh * row, od + n * O * OH * OW + oy * OW, 0, OW, OW);
      fin.apply(od, n * O * OH * OW + oy * OW, OW, O, OH * OW);
    }
  });
}

bool pointwise_direct_fits(const View& x, const View& w, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                           const View& out) {
  const int64_t C = x.shape[1];
  return w.shape[1] == C && w.shape[2] == 1 && w.shape[3] == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 &&
         x.dtype == DType::F32 && out.dtype == DType::F32 && x.strides[3] == 1 && x.strides[2] == x.shape[3] &&
         out.strides == detail::contiguous_strides(out.shape);
}

// 1x1, stride 1, no padding: conv_impl.inc's dense_run straight over the input planes (no padded
// copy; channel c's plane is x.strides[1] floats from the last), the bias added in registers and
// the epilogue applied to each block of 32 positions while it is in cache (as a matmul, the bias
// of a 1x1 convolution is a column broadcast its epilogue pass adds). The last partial block
// (which would read past the last plane) runs on a zero-padded copy of its columns.
void pointwise_direct(const View& x, const View& w, const View* bias, const View& out, const Finish& fin) {
  const int64_t N = x.shape[0], C = x.shape[1], L = x.shape[2] * x.shape[3], O = w.shape[0];
  if (N * O == 0 || L == 0) return;
  int64_t kO = 0;
  switch (isa()) {
    case Isa::Avx512: kO = avx512::dense_out_block(); break;
    case Isa::Avx2: kO = avx2::dense_out_block(); break;
    case Isa::Generic: kO = generic::dense_out_block(); break;
  }
  const int64_t Opad = (O + kO - 1) / kO * kO;
  std::vector<float> wp(static_cast<size_t>(C * Opad), 0.0f), bv(static_cast<size_t>(Opad), 0.0f);
  if (w.dtype == DType::F32) {  // no per-element dtype dispatch (this runs on every call)
    const float* wd = static_cast<const float*>(w.data) + w.offset;
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c) wp[static_cast<size_t>(c * Opad + o)] = wd[o * w.strides[0] + c * w.strides[1]];
  } else {
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c)
        wp[static_cast<size_t>(c * Opad + o)] =
            static_cast<float>(load_as_double(w.data, w.dtype, w.offset + o * w.strides[0] + c * w.strides[1]));
  }
  if (bias)
    for (int64_t o = 0; o < O; ++o)
      bv[static_cast<size_t>(o)] =
          static_cast<float>(load_as_double(bias->data, bias->dtype, bias->offset + o * bias->strides[0]));
  const int64_t tap = 0;
  const float* xd = static_cast<const float*>(x.data) + x.offset;
  float* od = static_cast<float*>(out.data) + out.offset;
  auto run = [&](const float* p, int64_t plane, float* o, int64_t v_begin, int64_t v_end) {
    switch (isa()) {
      case Isa::Avx512:
        return avx512::dense_run(p, plane, C, &tap, 1, wp.data(), O, Opad, bv.data(), o, L, v_begin, v_end, L, L);
      case Isa::Avx2:
        return avx2::dense_run(p, plane, C, &tap, 1, wp.data(), O, Opad, bv.data(), o, L, v_begin, v_end, L, L);
      case Isa::Generic:
        return generic::dense_run(p, plane, C, &tap, 1, wp.data(), O, Opad, bv.data(), o, L, v_begin, v_end, L, L);
    }
  };
  const int64_t blocks = (L + kDenseMaxCols - 1) / kDenseMaxCols;
  parallel_for(N * blocks, detail::grain_for(C * O * kDenseMaxCols), [&](int64_t lo, int64_t hi) {
    std::vector<float> tail;
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t n = item / blocks, v0 = item % blocks * kDenseMaxCols, v1 = std::min(L, v0 + kDenseMaxCols);
      const float* p = xd + n * x.strides[0];
      float* o = od + n * O * L;
      if (v0 + kDenseMaxCols <= L) {
        run(p, x.strides[1], o, v0, v1);
      } else {
        // The tail: its columns of every channel, zero-padded to a whole block; the copy's
        // positions [0, v1 - v0) are output columns v0.. (an offset output pointer).
        tail.assign(static_cast<size_t>(C * kDenseMaxCols), 0.0f);
        for (int64_t c = 0; c < C; ++c)
          std::copy(p + c * x.strides[1] + v0, p + c * x.strides[1] + v1, tail.data() + c * kDenseMaxCols);
        run(tail.data(), kDenseMaxCols, o + v0, 0, v1 - v0);
      }
    }
    // The epilogue over this task's columns of each image, all O rows: rows as long as the task
    // allows (one block's 32 floats per row made the epilogue's loop set-up its main cost).
    for (int64_t item = lo; item < hi;) {
      const int64_t n = item / blocks, last = std::min(hi, (n + 1) * blocks) - 1;
      const int64_t v0 = item % blocks * kDenseMaxCols, v1 = std::min(L, (last % blocks + 1) * kDenseMaxCols);
      fin.apply(od, n * O * L + v0, v1 - v0, O, L);
      item = last + 1;
    }
  });
}

void conv2d_finished(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                     int64_t dh, int64_t dw, const View& out, const Finish& fin) {
  const int64_t C = x.shape[1], O = w.shape[0], Cg = w.shape[1];
  if (Cg == 1 && O == C) return depthwise(x, w, bias, sh, sw, ph, pw, dh, dw, out, fin);
  if (pointwise_direct_fits(x, w, sh, sw, ph, pw, out)) return pointwise_direct(x, w, bias, out, fin);
  if (dense_direct_fits(x, w, out)) return dense_direct(x, w, bias, sh, sw, ph, pw, dh, dw, out, fin);
  if (x.dtype != DType::F32 || out.dtype != DType::F32)
    throw Error("conv2d", "internal: the cpu backend's grouped convolution takes f32 only", Loc::current());
  blocked_im2col(x, w, bias, sh, sw, ph, pw, dh, dw, out, fin);
}

// Whether node id of e is the f32 constant v.
bool is_const(const expr::Expr& e, int id, double v) {
  const expr::Node& n = e.nodes[static_cast<size_t>(id)];
  return n.fn == expr::Fn::Const && n.type == expr::Type::F32 && n.value == v;
}

bool is_input(const expr::Expr& e, int id, int slot) {
  const expr::Node& n = e.nodes[static_cast<size_t>(id)];
  return n.fn == expr::Fn::Input && n.type == expr::Type::F32 && (slot < 0 ? n.slot > 0 : n.slot == slot);
}

}  // namespace

void conv2d(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, const View& out) {
  conv2d_finished(x, w, bias, sh, sw, ph, pw, dh, dw, out, Finish{});
}

bool conv2d_epilogue(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                     int64_t dh, int64_t dw, const expr::Expr& e, std::span<const View> extra, const View& out) {
  if (x.dtype != DType::F32 || w.dtype != DType::F32 || out.dtype != DType::F32 ||
      out.strides != detail::contiguous_strides(out.shape) || e.nodes.empty())
    return false;
  for (const expr::Node& n : e.nodes)
    if (n.type != expr::Type::F32) return false;
  auto node = [&](int id) -> const expr::Node& { return e.nodes[static_cast<size_t>(id)]; };
  Finish fin;
  int inner = e.root();
  // An affine tail: add(mul(scale, y), shift) with constant scale and shift.
  {
    const expr::Node& add = node(inner);
    if (add.fn == expr::Fn::Add && node(add.args[1]).fn == expr::Fn::Const && node(add.args[0]).fn == expr::Fn::Mul) {
      const expr::Node& mul = node(add.args[0]);
      const int c = node(mul.args[0]).fn == expr::Fn::Const ? 0 : node(mul.args[1]).fn == expr::Fn::Const ? 1 : -1;
      if (c >= 0) {
        fin.has_affine = true;
        fin.affine[0] = static_cast<float>(node(mul.args[c]).value);
        fin.affine[1] = static_cast<float>(node(add.args[1]).value);
        inner = mul.args[1 - c];
      }
    }
  }
  // act(inner): relu max(inner, 0); hardswish inner * min(max(inner + 3, 0), 6) / 6.
  const expr::Node& root = node(inner);
  if (root.fn == expr::Fn::Max && is_const(e, root.args[1], 0.0)) {
    fin.act = 1;
    inner = root.args[0];
  } else if (root.fn == expr::Fn::Div && is_const(e, root.args[1], 6.0) && node(root.args[0]).fn == expr::Fn::Mul) {
    const expr::Node& mul = node(root.args[0]);
    for (int side = 0; side < 2 && fin.act == 0; ++side) {
      const int a = mul.args[side], clip = mul.args[1 - side];
      const expr::Node& mn = node(clip);
      if (mn.fn != expr::Fn::Min || !is_const(e, mn.args[1], 6.0)) continue;
      const expr::Node& mx = node(mn.args[0]);
      if (mx.fn != expr::Fn::Max || !is_const(e, mx.args[1], 0.0)) continue;
      const expr::Node& add = node(mx.args[0]);
      if (add.fn == expr::Fn::Add && add.args[0] == a && is_const(e, add.args[1], 3.0)) {
        fin.act = 2;
        inner = a;
      }
    }
    if (fin.act == 0) return false;
  }
  // inner: the convolution's value (input 0), or it plus one other input (a residual).
  const View* residual = nullptr;
  if (!is_input(e, inner, 0)) {
    const expr::Node& add = node(inner);
    if (add.fn != expr::Fn::Add) return false;
    int other = -1;
    if (is_input(e, add.args[0], 0) && is_input(e, add.args[1], -1)) other = add.args[1];
    if (is_input(e, add.args[1], 0) && is_input(e, add.args[0], -1)) other = add.args[0];
    if (other < 0) return false;
    const size_t slot = static_cast<size_t>(node(other).slot - 1);
    if (slot >= extra.size()) return false;
    residual = &extra[slot];
    if (residual->dtype != DType::F32 || residual->shape != out.shape ||
        residual->strides != detail::contiguous_strides(out.shape) || residual->data == out.data)
      return false;
    fin.residual = static_cast<const float*>(residual->data) + residual->offset;
  }
  if (!fin.any()) return false;
  conv2d_finished(x, w, bias, sh, sw, ph, pw, dh, dw, out, fin);
  return true;
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::Unfold, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<UnfoldParams>(k.node.params);
    unfold2d(in[0], p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, p.pad_value, out);
  });
  ops.add(OpId::Fold, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<UnfoldParams>(k.node.params);
    fold2d(in[0], p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, out);
  });
  ops.add(OpId::Conv2d, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<UnfoldParams>(k.node.params);
    conv2d(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw, out);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
