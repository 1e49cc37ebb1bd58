// Fused attention, FlashAttention-2 style, on the CPU.
//
// Forward: each task owns one (batch, block of kQ query rows); it walks the visible keys
// in blocks of kK, keeping a running max m and running sum l per row (online softmax)
// and rescaling its output accumulator as the max grows. It writes the normalized
// output and lse = m + log(l) per row.
//
// Backward: P = exp(scale * q.k - lse) is recomputed tile by tile; with
// Di = rowsum(dO * O), dP = dO v^T and dS = P * (dP - Di):
//   dV = P^T dO,  dK = scale * dS^T Q,  dQ = scale * dS K.
// For deterministic results without atomics it runs two passes: one task per (batch,
// key block) accumulates that block's dK and dV over all query blocks, then one task
// per (batch, query block) accumulates its dQ over all key blocks. Each output element
// has exactly one writer and a fixed summation order, whatever the thread count.
//
// Tiles are laid out so the innermost loop always runs over a compile-time block width
// (kQ or kK) of contiguous memory; the tile products go through one register-blocked
// micro-kernel (tile_gemm). Accumulation is in f32 for f16/bf16/f32 and in f64 for f64.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "alk/error.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

constexpr int64_t kQ = 32;  // query rows per tile
constexpr int64_t kK = 32;  // key rows per tile

// A [B, N, D] strided view as (batch, row, col) element offsets.
struct Mat3 {
  const View* v;
  int64_t sb, sr, sc;
  explicit Mat3(const View& view) : v(&view), sb(view.strides[0]), sr(view.strides[1]), sc(view.strides[2]) {}
  int64_t at(int64_t b, int64_t r, int64_t c) const { return v->offset + b * sb + r * sr + c * sc; }
};

// One register block of tile_gemm: rows [r0, r0 + R), all W columns, two 16-byte vectors
// (GCC vector extensions, so it does not depend on the auto-vectorizer) at a time.
template <int R, int W, class Acc>
inline void gemm_block(int64_t r0, int64_t depth, const Acc* a, int64_t a_rs, int64_t a_ps, const Acc* bt, Acc* c,
                       bool accumulate) {
  typedef Acc V __attribute__((vector_size(16)));
  constexpr int L = static_cast<int>(16 / sizeof(Acc)), C = 2 * L;
  static_assert(W % C == 0);
  for (int c0 = 0; c0 < W; c0 += C) {
    V acc[R][2];
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) {
        if (accumulate)
          std::memcpy(&acc[r][h], c + (r0 + r) * W + c0 + h * L, sizeof(V));
        else
          acc[r][h] = V{} ;
      }
    for (int64_t p = 0; p < depth; ++p) {
      V b0, b1;
      std::memcpy(&b0, bt + p * W + c0, sizeof(V));
      std::memcpy(&b1, bt + p * W + c0 + L, sizeof(V));
      for (int r = 0; r < R; ++r) {
        const Acc av = a[(r0 + r) * a_rs + p * a_ps];
        acc[r][0] += av * b0;
        acc[r][1] += av * b1;
      }
    }
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) std::memcpy(c + (r0 + r) * W + c0 + h * L, &acc[r][h], sizeof(V));
  }
}

// c[r * W + j] (+)= sum_{p < depth} a[r * a_rs + p * a_ps] * bt[p * W + j] for r < rows, j < W:
// the tile products, with a read through strides so it can be either operand transposed.
// Each element sums over p in order (onto its old value when accumulating), so results do
// not depend on how work is split.
template <int W, class Acc>
void tile_gemm(int64_t rows, int64_t depth, const Acc* a, int64_t a_rs, int64_t a_ps, const Acc* bt, Acc* c,
               bool accumulate) {
  int64_t r0 = 0;
  for (; r0 + 4 <= rows; r0 += 4) gemm_block<4, W>(r0, depth, a, a_rs, a_ps, bt, c, accumulate);
  for (; r0 < rows; ++r0) gemm_block<1, W>(r0, depth, a, a_rs, a_ps, bt, c, accumulate);
}

template <class E, class Acc>
struct Attention {
  using Vec = std::vector<Acc>;
  static constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();

  int64_t B, T, S, D, off;  // off = S - T: query t sees keys s <= t + off when causal
  bool causal;
  Acc scale;

  Attention(const View& q, const View& k, bool causal_, double scale_)
      : B(q.shape[0]), T(q.shape[1]), S(k.shape[1]), D(q.shape[2]), off(S - T), causal(causal_),
        scale(static_cast<Acc>(scale_)) {}

  static Acc load(const View& v, int64_t at) { return static_cast<Acc>(E::load(v.data, at)); }

  // Keys [0, end) can be visible to query rows [t0, t1) (t1 > t0).
  int64_t key_end(int64_t t1) const { return causal ? std::clamp<int64_t>(t1 + off, 0, S) : S; }
  // Query rows [begin, T) can see key s0 (the first of a key block).
  int64_t query_begin(int64_t s0) const { return causal ? std::clamp<int64_t>(s0 - off, 0, T) : 0; }

  // dst[d * kQ + i] = src[b, r0 + i, d] * mul for i < n (rows past n zero): rows as columns.
  void load_cols(const View& src, int64_t b, int64_t r0, int64_t n, Acc mul, Acc* dst) const {
    Mat3 m(src);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < kQ; ++i) dst[d * kQ + i] = i < n ? load(src, m.at(b, r0 + i, d)) * mul : Acc(0);
  }
  // dst[j * D + d] = src[b, r0 + j, d] for j < n (rows past n zero): rows as rows.
  void load_rows(const View& src, int64_t b, int64_t r0, int64_t n, int64_t width, Acc* dst) const {
    Mat3 m(src);
    for (int64_t j = 0; j < width; ++j)
      for (int64_t d = 0; d < D; ++d) dst[j * D + d] = j < n ? load(src, m.at(b, r0 + j, d)) : Acc(0);
  }
  // dst[d * kK + j] = src[b, r0 + j, d] for j < n (rows past n zero).
  void load_cols_k(const View& src, int64_t b, int64_t r0, int64_t n, Acc* dst) const {
    Mat3 m(src);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t j = 0; j < kK; ++j) dst[d * kK + j] = j < n ? load(src, m.at(b, r0 + j, d)) : Acc(0);
  }

  // ---- forward: one task per (batch, query block) ----
  void forward(const View& q, const View& k, const View& v, const View& out) const {
    const int64_t nqb = (T + kQ - 1) / kQ;
    const int64_t W = D + 1;
    parallel_for(B * nqb, detail::grain_for(kQ * S * std::max<int64_t>(D, 1)), [&](int64_t lo, int64_t hi) {
      Vec qt(static_cast<size_t>(D * kQ)), ot(static_cast<size_t>(D * kQ)), kb(static_cast<size_t>(kK * D)),
          vb(static_cast<size_t>(kK * D)), st(static_cast<size_t>(kK * kQ));
      Acc m[kQ], l[kQ], ms[kQ], alpha[kQ];
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t b = item / nqb, t0 = (item % nqb) * kQ, nq = std::min(kQ, T - t0);
        load_cols(q, b, t0, nq, scale, qt.data());
        std::fill(ot.begin(), ot.end(), Acc(0));
        for (int64_t i = 0; i < kQ; ++i) m[i] = kNegInf, l[i] = 0;
        const int64_t kend = key_end(t0 + nq);
        for (int64_t s0 = 0; s0 < kend; s0 += kK) {
          const int64_t nj = std::min(kK, kend - s0);
          load_rows(k, b, s0, nj, nj, kb.data());
          load_rows(v, b, s0, nj, nj, vb.data());
          tile_gemm<kQ>(nj, D, kb.data(), D, 1, qt.data(), st.data(), false);
          // Mask, then the new running max per row.
          for (int64_t i = 0; i < kQ; ++i) ms[i] = m[i];
          for (int64_t j = 0; j < nj; ++j) {
            Acc* sj = st.data() + j * kQ;
            const int64_t s = s0 + j;
            // Rows i < first see key s only from row first on (or never, for padding rows).
            const int64_t first = causal ? std::clamp<int64_t>(s - off - t0, 0, kQ) : 0;
            for (int64_t i = 0; i < first; ++i) sj[i] = kNegInf;
            for (int64_t i = nq; i < kQ; ++i) sj[i] = kNegInf;
            for (int64_t i = 0; i < kQ; ++i) ms[i] = std::max(ms[i], sj[i]);
          }
          for (int64_t i = 0; i < kQ; ++i) {
            // Rows that have seen no key yet keep m = -inf; shift by 0 so exp(-inf) = 0.
            const Acc shift = ms[i] == kNegInf ? Acc(0) : ms[i];
            alpha[i] = std::exp(m[i] - shift);
            m[i] = ms[i];
            ms[i] = shift;
          }
          for (int64_t j = 0; j < nj; ++j) {
            Acc* sj = st.data() + j * kQ;
            for (int64_t i = 0; i < kQ; ++i) sj[i] = std::exp(sj[i] - ms[i]);
          }
          for (int64_t i = 0; i < kQ; ++i) l[i] *= alpha[i];
          for (int64_t j = 0; j < nj; ++j) {
            const Acc* sj = st.data() + j * kQ;
            for (int64_t i = 0; i < kQ; ++i) l[i] += sj[i];
          }
          for (int64_t d = 0; d < D; ++d) {
            Acc* od = ot.data() + d * kQ;
            for (int64_t i = 0; i < kQ; ++i) od[i] *= alpha[i];
          }
          tile_gemm<kQ>(D, nj, vb.data(), 1, D, st.data(), ot.data(), true);  // O += P^T-tile . V
        }
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t row = out.offset + (b * T + t0 + i) * W;
          const bool any = l[i] > 0;
          const Acc inv = any ? Acc(1) / l[i] : Acc(0);
          for (int64_t d = 0; d < D; ++d) E::store(out.data, row + d, static_cast<double>(ot[d * kQ + i] * inv));
          E::store(out.data, row + D, any ? static_cast<double>(m[i] + std::log(l[i])) : -HUGE_VAL);
        }
      }
    });
  }

  // ---- backward ----
  void backward(const View& q, const View& k, const View& v, const View& fwd, const View& dout,
                const View& out) const {
    detail::zero_fill(out);  // rows past T (dq) or past S (dk, dv) stay zero
    const int64_t M = std::max(T, S);
    // Per row: lse and Di = rowsum(dO * O), O read back from the forward's packed output.
    Vec lse(static_cast<size_t>(B * T)), di(static_cast<size_t>(B * T));
    Mat3 f(fwd), g(dout);
    parallel_for(B * T, detail::grain_for(2 * D + 1), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t b = r / T, t = r % T;
        Acc acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += load(dout, g.at(b, t, d)) * load(fwd, f.at(b, t, d));
        di[static_cast<size_t>(r)] = acc;
        lse[static_cast<size_t>(r)] = load(fwd, f.at(b, t, D));
      }
    });
    const int64_t work = std::max<int64_t>(D, 1) * 3;
    // Pass 1: dK, dV per (batch, key block); the tile is s[i * kK + j] (keys innermost).
    const int64_t nkb = (S + kK - 1) / kK;
    parallel_for(B * nkb, detail::grain_for(kK * T * work), [&](int64_t lo, int64_t hi) {
      Vec kt(static_cast<size_t>(D * kK)), vt(static_cast<size_t>(D * kK)), qb(static_cast<size_t>(kQ * D)),
          gb(static_cast<size_t>(kQ * D)), p(static_cast<size_t>(kQ * kK)), ds(static_cast<size_t>(kQ * kK)),
          dkt(static_cast<size_t>(D * kK)), dvt(static_cast<size_t>(D * kK));
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t b = item / nkb, s0 = (item % nkb) * kK, nj = std::min(kK, S - s0);
        load_cols_k(k, b, s0, nj, kt.data());
        load_cols_k(v, b, s0, nj, vt.data());
        std::fill(dkt.begin(), dkt.end(), Acc(0));
        std::fill(dvt.begin(), dvt.end(), Acc(0));
        for (int64_t t0 = query_begin(s0) / kQ * kQ; t0 < T; t0 += kQ) {
          const int64_t nq = std::min(kQ, T - t0);
          load_rows(q, b, t0, nq, kQ, qb.data());
          load_rows(dout, b, t0, nq, kQ, gb.data());
          tile_gemm<kK>(kQ, D, qb.data(), D, 1, kt.data(), p.data(), false);   // q.k
          tile_gemm<kK>(kQ, D, gb.data(), D, 1, vt.data(), ds.data(), false);  // dP = dO.v
          for (int64_t i = 0; i < kQ; ++i) {
            Acc* pi = p.data() + i * kK;
            Acc* dsi = ds.data() + i * kK;
            const int64_t t = t0 + i;
            if (i >= nq) {
              for (int64_t j = 0; j < kK; ++j) pi[j] = dsi[j] = 0;
              continue;
            }
            const Acc lse_t = lse[static_cast<size_t>(b * T + t)], di_t = di[static_cast<size_t>(b * T + t)];
            // Keys j >= vis are hidden from row t (padding keys included).
            const int64_t vis = std::clamp<int64_t>((causal ? std::min(S, t + off + 1) : S) - s0, 0, kK);
            for (int64_t j = 0; j < kK; ++j) {
              const Acc pij = j < vis ? std::exp(pi[j] * scale - lse_t) : Acc(0);
              pi[j] = pij;
              dsi[j] = pij * (dsi[j] - di_t);
            }
          }
          tile_gemm<kK>(D, nq, gb.data(), 1, D, p.data(), dvt.data(), true);   // dV += P^T dO
          tile_gemm<kK>(D, nq, qb.data(), 1, D, ds.data(), dkt.data(), true);  // dK += dS^T Q
        }
        for (int64_t j = 0; j < nj; ++j) {
          const int64_t dk_row = out.offset + ((1 * B + b) * M + s0 + j) * D;
          const int64_t dv_row = out.offset + ((2 * B + b) * M + s0 + j) * D;
          for (int64_t d = 0; d < D; ++d) {
            E::store(out.data, dk_row + d, static_cast<double>(dkt[d * kK + j] * scale));
            E::store(out.data, dv_row + d, static_cast<double>(dvt[d * kK + j]));
          }
        }
      }
    });
    // Pass 2: dQ per (batch, query block); the tile is st[j * kQ + i] (queries innermost).
    const int64_t nqb = (T + kQ - 1) / kQ;
    parallel_for(B * nqb, detail::grain_for(kQ * S * work), [&](int64_t lo, int64_t hi) {
      Vec qt(static_cast<size_t>(D * kQ)), gt(static_cast<size_t>(D * kQ)), kb(static_cast<size_t>(kK * D)),
          vb(static_cast<size_t>(kK * D)), st(static_cast<size_t>(kK * kQ)), dst(static_cast<size_t>(kK * kQ)),
          dqt(static_cast<size_t>(D * kQ));
      Acc lse_i[kQ], di_i[kQ];
      for (int64_t item = lo; item < hi; ++item) {
        const int64_t b = item / nqb, t0 = (item % nqb) * kQ, nq = std::min(kQ, T - t0);
        load_cols(q, b, t0, nq, Acc(1), qt.data());
        load_cols(dout, b, t0, nq, Acc(1), gt.data());
        for (int64_t i = 0; i < kQ; ++i) {
          lse_i[i] = i < nq ? lse[static_cast<size_t>(b * T + t0 + i)] : Acc(0);
          di_i[i] = i < nq ? di[static_cast<size_t>(b * T + t0 + i)] : Acc(0);
        }
        std::fill(dqt.begin(), dqt.end(), Acc(0));
        const int64_t kend = key_end(t0 + nq);
        for (int64_t s0 = 0; s0 < kend; s0 += kK) {
          const int64_t nj = std::min(kK, kend - s0);
          load_rows(k, b, s0, nj, nj, kb.data());
          load_rows(v, b, s0, nj, nj, vb.data());
          tile_gemm<kQ>(nj, D, kb.data(), D, 1, qt.data(), st.data(), false);   // q.k
          tile_gemm<kQ>(nj, D, vb.data(), D, 1, gt.data(), dst.data(), false);  // dP = dO.v
          for (int64_t j = 0; j < nj; ++j) {
            Acc* sj = st.data() + j * kQ;
            Acc* dsj = dst.data() + j * kQ;
            const int64_t s = s0 + j;
            const int64_t first = causal ? std::clamp<int64_t>(s - off - t0, 0, kQ) : 0;
            for (int64_t i = 0; i < kQ; ++i) {
              const Acc pij = i >= first && i < nq ? std::exp(sj[i] * scale - lse_i[i]) : Acc(0);
              dsj[i] = pij * (dsj[i] - di_i[i]);
            }
          }
          tile_gemm<kQ>(D, nj, kb.data(), 1, D, dst.data(), dqt.data(), true);  // dQ += dS K
        }
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t row = out.offset + (b * M + t0 + i) * D;
          for (int64_t d = 0; d < D; ++d) E::store(out.data, row + d, static_cast<double>(dqt[d * kQ + i] * scale));
        }
      }
    });
  }
};

template <class Fn>
void dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::F16: return fn(detail::Elem<DType::F16>{}, float{});
    case DType::BF16: return fn(detail::Elem<DType::BF16>{}, float{});
    case DType::F32: return fn(detail::Elem<DType::F32>{}, float{});
    case DType::F64: return fn(detail::Elem<DType::F64>{}, double{});
    default: break;
  }
  throw Error("scaled_dot_product_attention", std::string("the CPU kernel needs a floating dtype, got ") +
                                                  std::string(dtype_name(t)),
              Loc::current());
}

void check_inputs(const View& q, const View& k, const View& v) {
  // The op (src/ops/attention.cpp) guarantees these; a violation is a bug there.
  if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3 || k.shape != v.shape || q.shape[0] != k.shape[0] ||
      q.shape[2] != k.shape[2] || q.dtype != k.dtype || q.dtype != v.dtype)
    throw Error("scaled_dot_product_attention", "internal: inconsistent kernel inputs", Loc::current());
}

}  // namespace

void attention_forward(const View& q, const View& k, const View& v, bool causal, double scale, const View& out) {
  check_inputs(q, k, v);
  dispatch_float(q.dtype, [&](auto e, auto acc) {
    Attention<decltype(e), decltype(acc)>(q, k, causal, scale).forward(q, k, v, out);
  });
}

void attention_backward(const View& q, const View& k, const View& v, const View& fwd, const View& d_out, bool causal,
                        double scale, const View& out) {
  check_inputs(q, k, v);
  dispatch_float(q.dtype, [&](auto e, auto acc) {
    Attention<decltype(e), decltype(acc)>(q, k, causal, scale).backward(q, k, v, fwd, d_out, out);
  });
}

}  // namespace alk::cpu
