// Batched matmul. The f32 path follows the usual packed-panel GEMM layout: B is
// copied once into NR-wide column panels, each task copies an MC x KC block of A
// into MR-tall row panels, and a register-blocked MR x NR micro-kernel (plain C++
// that GCC vectorizes) runs over them, so the hot loop reads only contiguous
// memory that sits in L1/L2. Everything narrower than f32 is widened while packing.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

using detail::dispatch;

constexpr int kMR = 4;     // rows of C per micro-kernel call
constexpr int kNR = 16;    // columns of C per micro-kernel call (a multiple of any SIMD width)
constexpr int64_t kKC = 256;  // depth of one packed block: a kKC x kNR panel of B is 16 KiB, L1-sized
constexpr int64_t kMC = 96;   // rows per task: an kMC x kKC block of A is 96 KiB, L2-sized

// The element layout of one operand of a batched matmul.
struct Operand {
  View batch;  // the batch dims only: offset_of(bi) is the start of matrix bi
  int64_t rows, cols, row_stride, col_stride;

  explicit Operand(const View& v) {
    size_t r = v.shape.size();
    batch.shape.assign(v.shape.begin(), v.shape.end() - 2);
    batch.strides.assign(v.strides.begin(), v.strides.end() - 2);
    batch.offset = v.offset;
    rows = v.shape[r - 2];
    cols = v.shape[r - 1];
    row_stride = v.strides[r - 2];
    col_stride = v.strides[r - 1];
  }
  bool batch_broadcast() const {
    for (size_t d = 0; d < batch.shape.size(); ++d)
      if (batch.shape[d] != 1 && batch.strides[d] != 0) return false;
    return true;
  }
};

// acc[MR][NR] += A panel (kc x MR, p-major) * B panel (kc x NR, p-major). The k loop is
// outermost so the MR*NR accumulators stay in registers across it.
inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* c, int64_t ldc,
                         int mr, int nr, bool accumulate) {
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b + p * kNR;
    const float* ap = a + p * kMR;
    for (int i = 0; i < kMR; ++i) {
      float ai = ap[i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += ai * bp[j];
    }
  }
  if (mr == kMR && nr == kNR) {
    for (int i = 0; i < kMR; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        for (int j = 0; j < kNR; ++j) ci[j] += acc[i][j];
      } else {
        for (int j = 0; j < kNR; ++j) ci[j] = acc[i][j];
      }
    }
    return;
  }
  for (int i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    for (int j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + acc[i][j] : acc[i][j];
  }
}

// Copies column panels [j0, j1) of one batch matrix of B: panel j holds columns
// [j*NR, j*NR + NR) as k rows of NR floats, zero-padded past n.
void pack_b(const View& b, const Operand& ob, int64_t base, int64_t j0, int64_t j1, float* dst) {
  int64_t k = ob.rows, n = ob.cols;
  dispatch(b.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t j = j0; j < j1; ++j) {
      int64_t c0 = j * kNR, nr = std::min<int64_t>(kNR, n - c0);
      float* panel = dst + j * k * kNR;
      for (int64_t p = 0; p < k; ++p) {
        int64_t at = base + p * ob.row_stride + c0 * ob.col_stride;
        float* row = panel + p * kNR;
        for (int64_t c = 0; c < nr; ++c) row[c] = static_cast<float>(E::load(b.data, at + c * ob.col_stride));
        for (int64_t c = nr; c < kNR; ++c) row[c] = 0.0f;
      }
    }
  });
}

// Copies rows [r0, r1) x columns [p0, p0 + kc) of A into MR-row panels (kc x MR each),
// zero-padded past r1.
void pack_a(const View& a, const Operand& oa, int64_t base, int64_t r0, int64_t r1, int64_t p0, int64_t kc,
            float* dst) {
  dispatch(a.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t i0 = r0; i0 < r1; i0 += kMR) {
      float* panel = dst + ((i0 - r0) / kMR) * kc * kMR;
      for (int64_t r = 0; r < kMR; ++r) {
        if (i0 + r >= r1) {
          for (int64_t p = 0; p < kc; ++p) panel[p * kMR + r] = 0.0f;
          continue;
        }
        int64_t at = base + (i0 + r) * oa.row_stride + p0 * oa.col_stride;
        for (int64_t p = 0; p < kc; ++p) panel[p * kMR + r] = static_cast<float>(E::load(a.data, at + p * oa.col_stride));
      }
    }
  });
}

int64_t row_block(int64_t m, int64_t batches) {
  // With few matrices, split rows finely enough that every thread gets a share.
  int64_t threads = num_threads();
  if (batches >= threads) return kMC;
  int64_t per = (m * batches + threads - 1) / threads;
  per = (per + kMR - 1) / kMR * kMR;
  return std::clamp<int64_t>(per, kMR, kMC);
}

void matmul_f32(const View& a, const View& b, const View& out, int64_t batches) {
  Operand oa(a), ob(b);
  int64_t m = oa.rows, k = oa.cols, n = ob.cols;
  int64_t panels = (n + kNR - 1) / kNR, panel_floats = k * panels * kNR;
  bool shared_b = ob.batch_broadcast();
  int64_t b_copies = shared_b ? 1 : batches;
  std::vector<float> bpack(static_cast<size_t>(b_copies * panel_floats));
  // Packed per panel rather than per matrix so a single large B is also split over threads.
  parallel_for(b_copies * panels, detail::grain_for(k * kNR), [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi;) {
      int64_t bi = item / panels, j0 = item % panels, j1 = std::min(panels, j0 + (hi - item));
      pack_b(b, ob, ob.batch.offset_of(bi), j0, j1, bpack.data() + bi * panel_floats);
      item += j1 - j0;
    }
  });

  int64_t mc = row_block(m, batches), blocks = (m + mc - 1) / mc;
  double flops_per_item = 2.0 * static_cast<double>(mc) * static_cast<double>(n) * static_cast<double>(k);
  int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((1 << 21) / std::max(1.0, flops_per_item)));
  bool direct = out.dtype == DType::F32;
  parallel_for(batches * blocks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<float> apack(static_cast<size_t>(((mc + kMR - 1) / kMR) * kMR * std::min(k, kKC)));
    std::vector<float> cbuf(direct ? 0 : static_cast<size_t>(mc * n));
    for (int64_t item = lo; item < hi; ++item) {
      int64_t bi = item / blocks, r0 = (item % blocks) * mc, r1 = std::min(m, r0 + mc);
      int64_t a_base = oa.batch.offset_of(bi);
      const float* bp = bpack.data() + (shared_b ? 0 : bi) * panel_floats;
      float* c = direct ? static_cast<float*>(out.data) + out.offset + bi * m * n + r0 * n : cbuf.data();
      for (int64_t p0 = 0; p0 < k; p0 += kKC) {
        int64_t kc = std::min(kKC, k - p0);
        pack_a(a, oa, a_base, r0, r1, p0, kc, apack.data());
        for (int64_t j = 0; j < panels; ++j) {
          int nr = static_cast<int>(std::min<int64_t>(kNR, n - j * kNR));
          const float* bs = bp + j * k * kNR + p0 * kNR;
          for (int64_t i0 = r0; i0 < r1; i0 += kMR) {
            int mr = static_cast<int>(std::min<int64_t>(kMR, r1 - i0));
            micro_kernel(kc, apack.data() + ((i0 - r0) / kMR) * kc * kMR, bs, c + (i0 - r0) * n + j * kNR, n, mr, nr,
                         p0 > 0);
          }
        }
      }
      if (!direct) detail::store_run(out, out.offset + bi * m * n + r0 * n, 1, (r1 - r0) * n, cbuf.data());
    }
  });
}

// f64 (and integer) matmul: both operands copied to contiguous doubles, then
// i-p-j loops blocked over k and n so the B block stays in cache across rows.
void matmul_f64(const View& a, const View& b, const View& out, int64_t batches) {
  constexpr int64_t kRows = 32, kKB = 128, kNB = 512;
  Operand oa(a), ob(b);
  int64_t m = oa.rows, k = oa.cols, n = ob.cols;
  bool shared_b = ob.batch_broadcast();
  int64_t b_copies = shared_b ? 1 : batches;
  std::vector<double> bd(static_cast<size_t>(b_copies * k * n));
  parallel_for(b_copies, detail::grain_for(k * n), [&](int64_t lo, int64_t hi) {
    for (int64_t bi = lo; bi < hi; ++bi) {
      int64_t base = ob.batch.offset_of(bi);
      for (int64_t p = 0; p < k; ++p)
        detail::load_run(b, base + p * ob.row_stride, ob.col_stride, n, bd.data() + (bi * k + p) * n);
    }
  });
  int64_t blocks = (m + kRows - 1) / kRows;
  double flops_per_item = 2.0 * kRows * static_cast<double>(n) * static_cast<double>(k);
  int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((1 << 20) / std::max(1.0, flops_per_item)));
  parallel_for(batches * blocks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<double> ad(static_cast<size_t>(kRows * k)), cd(static_cast<size_t>(kRows * n));
    for (int64_t item = lo; item < hi; ++item) {
      int64_t bi = item / blocks, r0 = (item % blocks) * kRows, rows = std::min(m, r0 + kRows) - r0;
      int64_t a_base = oa.batch.offset_of(bi);
      for (int64_t i = 0; i < rows; ++i)
        detail::load_run(a, a_base + (r0 + i) * oa.row_stride, oa.col_stride, k, ad.data() + i * k);
      std::fill(cd.begin(), cd.end(), 0.0);
      const double* bb = bd.data() + (shared_b ? 0 : bi) * k * n;
      for (int64_t p0 = 0; p0 < k; p0 += kKB) {
        int64_t p1 = std::min(k, p0 + kKB);
        for (int64_t j0 = 0; j0 < n; j0 += kNB) {
          int64_t j1 = std::min(n, j0 + kNB);
          for (int64_t i = 0; i < rows; ++i) {
            double* ci = cd.data() + i * n;
            for (int64_t p = p0; p < p1; ++p) {
              double aip = ad[static_cast<size_t>(i * k + p)];
              const double* bpj = bb + p * n;
              for (int64_t j = j0; j < j1; ++j) ci[j] += aip * bpj[j];
            }
          }
        }
      }
      detail::store_run(out, out.offset + bi * m * n + r0 * n, 1, rows * n, cd.data());
    }
  });
}

}  // namespace

void matmul(const View& a, const View& b, const View& out) {
  if (a.rank() < 2 || b.rank() != a.rank() || out.rank() != a.rank())
    fail("matmul", Loc::current(), "expected operands of equal rank >= 2, got ", to_string(a.shape), " x ",
         to_string(b.shape), " -> ", to_string(out.shape));
  if (out.numel() == 0) return;
  int64_t k = a.shape.back();
  if (k == 0) {
    detail::zero_fill(out);
    return;
  }
  int64_t m = a.shape[a.shape.size() - 2], n = b.shape.back();
  int64_t batches = out.numel() / (m * n);
  auto narrow_float = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  if (narrow_float(a.dtype) && narrow_float(b.dtype) && out.dtype != DType::F64)
    matmul_f32(a, b, out, batches);
  else
    matmul_f64(a, b, out, batches);
}

}  // namespace alk::cpu
