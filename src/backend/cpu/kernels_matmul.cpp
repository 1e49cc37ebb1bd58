// Batched matmul. The f32 path (also used for f16/bf16 inputs) is a Goto/BLIS-style
// packed GEMM: B is copied once into NR-wide column panels (kc x NR floats each,
// 64-byte aligned), each task copies a block of A into MR-tall panels one KC-deep slice
// at a time, and an MR x NR register-blocked micro-kernel runs over them, so the hot loop
// reads only memory that sits in L1/L2. Strides (transposed, strided, broadcast-0) and
// f16/bf16 -> f32 conversion are handled while packing. Three ways to present A: an f32 A
// with either unit stride is read in place (column-major: a weight gradient's x^T;
// row-major: by rows), its last partial panel copied; anything else is transposed into
// panels. A weight
// shared over a contiguous batch runs as one [batch * m, k] product. bf16 x bf16 uses the
// CPU's bf16 dot products when it has them (matmul_bf16). Add-only epilogues (a bias, a
// residual) are added to each tile in registers before it is stored.
//
// The micro-kernel is chosen at run time (gemm.h): AVX-512, AVX2+FMA or portable C++, each
// compiled in its own file with its own -m flags (gemm_*.cpp). It follows the process-wide
// ISA choice of isa.h, so ALK_ISA=avx512|avx2|generic forces a path (a path the CPU lacks is
// refused there with a one-line stderr note); set_gemm_isa overrides it for the GEMM alone.
//
// Threads split the (batch, row block, column block) grid of C. Every output element is
// summed in a fixed order (KC-deep blocks in order, each summed p = 0..kc-1 and then added
// to C), independent of the tiling, so results do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_kernel.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

// ---------------------------------------------------------------- ISA selection

namespace {

// The feature tests are cpu_features.h's (tested there on synthetic CPUs).
bool cpu_supports(const gemm::Kernel* k) {
#if ALK_GEMM_X86
  if (k == &gemm::kAvx512) return gemm_avx512_ok(cpu_features());
  if (k == &gemm::kAvx2) return gemm_avx2_ok(cpu_features());
#endif
  return k == &gemm::kGeneric;
}

bool cpu_has_bf16() {
#if ALK_GEMM_X86
  return gemm_bf16_ok(cpu_features());
#else
  return false;
#endif
}

// Every path, best first.
std::vector<const gemm::Kernel*> all_kernels() {
#if ALK_GEMM_X86
  return {&gemm::kAvx512, &gemm::kAvx2, &gemm::kGeneric};
#else
  return {&gemm::kGeneric};
#endif
}

const gemm::Kernel* find_kernel(std::string_view name) {
  for (const gemm::Kernel* k : all_kernels())
    if (name == k->name) return k;
  return nullptr;
}

// The kernel for the process-wide ISA choice (isa.h: the best the CPU has, or ALK_ISA).
const gemm::Kernel* kernel_for(Isa i) {
#if ALK_GEMM_X86
  if (i == Isa::Avx512 && cpu_supports(&gemm::kAvx512)) return &gemm::kAvx512;
  if (i != Isa::Generic && cpu_supports(&gemm::kAvx2)) return &gemm::kAvx2;
#endif
  (void)i;
  return &gemm::kGeneric;
}

// Set by set_gemm_isa (tests, benchmarks); null follows isa().
std::atomic<const gemm::Kernel*> g_override{nullptr};

const gemm::Kernel& active_kernel() {
  const gemm::Kernel* k = g_override.load(std::memory_order_acquire);
  return k != nullptr ? *k : *kernel_for(isa());
}

}  // namespace

std::vector<std::string> gemm_supported_isas() {
  std::vector<std::string> names;
  for (const gemm::Kernel* k : all_kernels())
    if (cpu_supports(k)) names.emplace_back(k->name);
  return names;
}

std::string gemm_isa() { return active_kernel().name; }

bool gemm_bf16_dot() {
#if ALK_GEMM_X86
  return &active_kernel() == &gemm::kAvx512 && cpu_has_bf16();
#else
  return false;
#endif
}

bool set_gemm_isa(std::string_view name) {
  if (name.empty() || name == "auto") {
    g_override.store(nullptr, std::memory_order_release);
    return true;
  }
  const gemm::Kernel* k = find_kernel(name);
  if (k == nullptr || !cpu_supports(k)) return false;
  g_override.store(k, std::memory_order_release);
  return true;
}

// ---------------------------------------------------------------- matmul

namespace {

using detail::dispatch;

// 64-byte aligned scratch of n T.
// From 4 MiB on (a packed B of 1024 x 1024 floats), 2 MiB-aligned and advised for
// transparent huge pages, as the CPU device's large buffers (cpu_device.cpp): the
// micro-kernels stream B panels from it, a TLB miss per 4 KiB otherwise.
template <class T>
class Aligned {
 public:
  explicit Aligned(size_t n)
      : bytes_(std::max<size_t>(n, 1) * sizeof(T)),
        align_(bytes_ >= (size_t{4} << 20) ? size_t{2} << 20 : 64),
        p_(static_cast<T*>(::operator new[](bytes_, std::align_val_t{align_}))) {
#if defined(__linux__)
    if (align_ > 64) ::madvise(p_, bytes_, MADV_HUGEPAGE);
#endif
  }
  ~Aligned() { ::operator delete[](p_, std::align_val_t{align_}); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T* get() const { return p_; }

 private:
  size_t bytes_, align_;
  T* p_;
};
using Floats = Aligned<float>;

// Packing scratch kept per thread between calls (grow-only, up to 32 MiB per slot): a fresh
// buffer of a few hundred KiB per call came from mmap and cost a page fault per 4 KiB
// (~3% of a 128x128x1024 product). Larger requests get a buffer of their own.
class Scratch {
 public:
  enum Slot { kApack, kBslice, kBpack, kSlots };
  Scratch(Slot slot, size_t n) {
    constexpr size_t kMaxCached = (size_t{32} << 20) / sizeof(float);
    if (n == 0) return;
    if (n > kMaxCached) {
      own_ = std::make_unique<Floats>(n);
      p_ = own_->get();
      return;
    }
    thread_local std::unique_ptr<Floats> cache[kSlots];
    thread_local size_t size[kSlots] = {};
    if (size[slot] < n) {
      cache[slot].reset();
      cache[slot] = std::make_unique<Floats>(n);
      size[slot] = n;
    }
    p_ = cache[slot]->get();
  }
  float* get() const { return p_; }

 private:
  std::unique_ptr<Floats> own_;
  float* p_ = nullptr;
};

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

int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

// pack_b's row-major f32 case (rows [0, k) from src, row stride rs). Panels are filled a
// group at a time, walking B's rows in order: each row contributes one contiguous run
// (kGroup panels wide) to the group. Filling one panel at a time read one 64-byte line per
// B row, rows 4 KiB apart at n = 1024 (one L1 set, an L1 DTLB miss per row, and the next
// panel's lines fetched again): at 1024^3 that pass took ~5% of the product's time against
// OpenBLAS's ~1.7%.
void pack_b_rows_f32(const float* src, int64_t rs, int64_t n, int64_t j0, int64_t j1, int64_t NR, int64_t k,
                     float* dst) {
  constexpr int64_t kGroup = 4, kAhead = 8;
  const bool far = k * abs64(rs) * static_cast<int64_t>(sizeof(float)) > (int64_t{1} << 20);
  for (int64_t g0 = j0; g0 < j1; g0 += kGroup) {
    const int64_t g1 = std::min(j1, g0 + kGroup);
    const int64_t full_end = std::min(g1, std::max(g0, n / NR));  // panels [g0, full_end) are NR wide
    for (int64_t p = 0; p < k; ++p) {
      const float* row = src + p * rs;
      float* out = dst + (g0 - j0) * k * NR + p * NR;
      // The rows are far apart (no hardware stream to follow): fetch a few rows ahead, when
      // B is larger than L2 (a small B is in cache already and the prefetches cost time).
      if (far && p + kAhead < k)
        for (int64_t f = g0 * NR; f < std::min(n, g1 * NR); f += 16) __builtin_prefetch(row + kAhead * rs + f);
      int64_t j = g0;
      // Fixed-size copies of a full panel row compile to a few vector moves; a memcpy call
      // per 64-byte row cost as much as the copy itself.
      if (NR == 16)
        for (; j < full_end; ++j, out += k * NR) std::memcpy(out, row + j * 16, 16 * sizeof(float));
      else if (NR == 32)
        for (; j < full_end; ++j, out += k * NR) std::memcpy(out, row + j * 32, 32 * sizeof(float));
      for (; j < g1; ++j, out += k * NR) {
        const int64_t w = std::min<int64_t>(NR, n - j * NR);
        std::memcpy(out, row + j * NR, static_cast<size_t>(w) * sizeof(float));
        std::fill(out + w, out + NR, 0.0f);
      }
    }
  }
}

// Copies column panels [j0, j1) of rows [p0, p0 + k) of one batch matrix of B: panel j
// (at dst + (j - j0) * k * NR) holds columns [j*NR, j*NR + NR) as k rows of NR floats,
// zero-padded past n.
void pack_b(const View& b, const Operand& ob, int64_t base, int64_t j0, int64_t j1, int64_t NR, int64_t p0, int64_t k,
            float* dst) {
  const int64_t n = ob.cols, rs = ob.row_stride, cs = ob.col_stride;
  base += p0 * rs;  // rows [p0, p0 + k) of B
  if (b.dtype == DType::F32 && cs == 1 && abs64(rs) >= 1) {
    pack_b_rows_f32(static_cast<const float*>(b.data) + base, rs, n, j0, j1, NR, k, dst);
    return;
  }
  dispatch(b.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t j = j0; j < j1; ++j) {
      int64_t c0 = j * NR, w = std::min<int64_t>(NR, n - c0);
      float* panel = dst + (j - j0) * k * NR;
      if (w < NR)
        for (int64_t p = 0; p < k; ++p) std::fill(panel + p * NR + w, panel + (p + 1) * NR, 0.0f);
      if (abs64(cs) <= abs64(rs)) {  // row-major B: each panel row is a run of one B row
        for (int64_t p = 0; p < k; ++p) {
          int64_t at = base + p * rs + c0 * cs;
          float* row = panel + p * NR;
          if constexpr (std::is_same_v<E, detail::Elem<DType::F32>>) {
            if (cs == 1) {
              const float* src = static_cast<const float*>(b.data) + at;
              // Fixed-size copies of a full panel row compile to a few vector moves; a
              // memcpy call per 64-byte row cost as much as the copy itself.
              if (w == 16 && NR == 16)
                std::memcpy(row, src, 16 * sizeof(float));
              else if (w == 32 && NR == 32)
                std::memcpy(row, src, 32 * sizeof(float));
              else
                std::memcpy(row, src, static_cast<size_t>(w) * sizeof(float));
              continue;
            }
          }
          for (int64_t c = 0; c < w; ++c) row[c] = static_cast<float>(E::load(b.data, at + c * cs));
        }
      } else {  // column-major B: walk each column down k
        int64_t c_done = 0;
#if defined(__SSE2__)
        if constexpr (std::is_same_v<E, detail::Elem<DType::F32>>) {
          if (rs == 1) {  // a transposed f32 B (dX = dY W^T): 4 x 4 transposes of in-register blocks
            const float* src = static_cast<const float*>(b.data) + base + c0 * cs;
            const int64_t k4 = k / 4 * 4;
            for (; c_done + 4 <= w; c_done += 4) {
              const float* col = src + c_done * cs;
              for (int64_t p = 0; p < k4; p += 4) {
                __m128 r0 = _mm_loadu_ps(col + p), r1 = _mm_loadu_ps(col + cs + p), r2 = _mm_loadu_ps(col + 2 * cs + p),
                       r3 = _mm_loadu_ps(col + 3 * cs + p);
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                _mm_storeu_ps(panel + p * NR + c_done, r0);
                _mm_storeu_ps(panel + (p + 1) * NR + c_done, r1);
                _mm_storeu_ps(panel + (p + 2) * NR + c_done, r2);
                _mm_storeu_ps(panel + (p + 3) * NR + c_done, r3);
              }
              for (int64_t p = k4; p < k; ++p)
                for (int64_t c = c_done; c < c_done + 4; ++c) panel[p * NR + c] = src[c * cs + p];
            }
          }
        }
#endif
        for (int64_t c = c_done; c < w; ++c) {
          int64_t at = base + (c0 + c) * cs;
          for (int64_t p = 0; p < k; ++p) panel[p * NR + c] = static_cast<float>(E::load(b.data, at + p * rs));
        }
      }
    }
  });
}

// Copies rows [r0, r1) x columns [p0, p0 + kc) of A into MR-row panels (kc x MR each),
// zero-padded past r1.
void pack_a(const View& a, const Operand& oa, int64_t base, int64_t r0, int64_t r1, int64_t p0, int64_t kc,
            int64_t MR, float* dst) {
  int64_t rs = oa.row_stride, cs = oa.col_stride;
  if (a.dtype == DType::F32 && rs == 1) {  // column-major f32 (a transposed view): each k-step's rows are one run
    const float* src = static_cast<const float*>(a.data) + base + p0 * cs;
    for (int64_t i0 = r0; i0 < r1; i0 += MR) {
      float* panel = dst + ((i0 - r0) / MR) * kc * MR;
      const int64_t h = std::min<int64_t>(MR, r1 - i0);
      for (int64_t p = 0; p < kc; ++p) {
        std::memcpy(panel + p * MR, src + p * cs + i0, static_cast<size_t>(h) * sizeof(float));
        std::fill(panel + p * MR + h, panel + (p + 1) * MR, 0.0f);
      }
    }
    return;
  }
  dispatch(a.dtype, [&](auto e) {
    using E = decltype(e);
    for (int64_t i0 = r0; i0 < r1; i0 += MR) {
      float* panel = dst + ((i0 - r0) / MR) * kc * MR;
      int64_t h = std::min<int64_t>(MR, r1 - i0);
      int64_t at0 = base + i0 * rs + p0 * cs;
      if (abs64(rs) <= abs64(cs)) {  // column-major A (e.g. a transposed view): panel rows are runs
        for (int64_t p = 0; p < kc; ++p) {
          float* row = panel + p * MR;
          int64_t at = at0 + p * cs;
          for (int64_t r = 0; r < h; ++r) row[r] = static_cast<float>(E::load(a.data, at + r * rs));
          for (int64_t r = h; r < MR; ++r) row[r] = 0.0f;
        }
      } else {
        for (int64_t r = 0; r < h; ++r) {
          int64_t at = at0 + r * rs;
          for (int64_t p = 0; p < kc; ++p) panel[p * MR + r] = static_cast<float>(E::load(a.data, at + p * cs));
        }
        for (int64_t r = h; r < MR; ++r)
          for (int64_t p = 0; p < kc; ++p) panel[p * MR + r] = 0.0f;
      }
    }
  });
}

// Copies rows [r0, r1) x columns [p0, p0 + kc) of a row-major f32 A into MR-row panels
// packed by rows (MR x KC floats each, row i of a panel at i * KC): one copy per row.
void pack_a_by_rows(const View& a, const Operand& oa, int64_t base, int64_t r0, int64_t r1, int64_t p0, int64_t kc,
                    int64_t MR, int64_t KC, float* dst) {
  const float* src = static_cast<const float*>(a.data) + base + p0;
  for (int64_t i0 = r0; i0 < r1; i0 += MR) {
    float* panel = dst + ((i0 - r0) / MR) * MR * KC;
    const int64_t h = std::min<int64_t>(MR, r1 - i0);
    for (int64_t r = 0; r < MR; ++r) {
      if (r < h)
        std::memcpy(panel + r * KC, src + (i0 + r) * oa.row_stride, static_cast<size_t>(kc) * sizeof(float));
      else
        std::fill(panel + r * KC, panel + r * KC + kc, 0.0f);
    }
  }
}

// Copies micro panels [q0, q1) (rows [q * MR, q * MR + MR)) x columns [p0, p0 + kc) of a
// column-major f32 A into kc x MR panels, panel q at dst + (q - q0) * kc * MR, zero-padded
// past m.
void pack_a_cols_f32(const float* src, int64_t cs, int64_t m, int64_t p0, int64_t kc, int64_t q0, int64_t q1,
                     int64_t MR, float* dst) {
  // Panels a group at a time, each k-step one contiguous run of A (as pack_b_rows_f32).
  constexpr int64_t kGroup = 8;
  const int64_t q_full = m / MR;  // panels [0, q_full) are MR tall
  for (int64_t g0 = q0; g0 < q1; g0 += kGroup) {
    const int64_t g1 = std::min(q1, g0 + kGroup), full_end = std::min(g1, std::max(g0, q_full));
    for (int64_t p = 0; p < kc; ++p) {
      const float* col = src + (p0 + p) * cs;
      float* out = dst + (g0 - q0) * kc * MR + p * MR;
      int64_t q = g0;
      // Fixed-size copies compile to a few moves; a memcpy call per k-step cost more than the copy.
      if (MR == 6)
        for (; q < full_end; ++q, out += kc * MR) std::memcpy(out, col + q * 6, 6 * sizeof(float));
      else if (MR == 14)
        for (; q < full_end; ++q, out += kc * MR) std::memcpy(out, col + q * 14, 14 * sizeof(float));
      for (; q < g1; ++q, out += kc * MR) {
        const int64_t h = std::min(MR, m - q * MR);
        std::memcpy(out, col + q * MR, static_cast<size_t>(h) * sizeof(float));
        std::fill(out + h, out + MR, 0.0f);
      }
    }
  }
}

// Whether MR rows row_floats apart spread over the L1 sets (32 KiB, 8-way, 64-byte lines:
// 64 sets) at least as well as a packed panel's rows (KC floats apart, <= 4 rows per set).
// A row-major A read in place with rows 4 KiB apart put all 14 rows of an AVX-512 panel in
// one set: 1024^3 took 1.2-1.4x OpenBLAS's time instead of 1.0.
bool rows_spread(int64_t row_floats, int64_t MR) {
  const int64_t bytes = abs64(row_floats) * static_cast<int64_t>(sizeof(float));
  if (bytes == 0 || bytes % 64 != 0) return true;  // one line, or lines off the set grid
  const int64_t step = (bytes / 64) % 64, sets = step == 0 ? 1 : 64 / std::gcd<int64_t>(64, step);
  return (MR + sets - 1) / sets <= 4;
}

// The grid of C blocks both float paths use: mb row blocks (in MR-row micro panels) x nb
// column blocks (in NR-wide panels) per batch matrix; with few blocks, split so they divide
// evenly over the threads, splitting columns once rows run out.
struct Grid {
  int64_t micro_rows, mb, nb = 1;
  Grid(int64_t m, int64_t MR, int64_t mc, int64_t panels, int64_t batches) {
    const int64_t threads = num_threads();
    micro_rows = (m + MR - 1) / MR;
    mb = std::max<int64_t>(1, (micro_rows * MR + mc - 1) / mc);
    // A's rows fit one block (a weight gradient's [k, n] with k = 128): split the columns
    // only, so each column panel of B belongs to one block, which packs it as it goes.
    if (threads > 1 && batches == 1 && mb == 1 && panels >= 2 * threads) {
      nb = std::min(panels, 4 * threads);
      return;
    }
    if (threads > 1 && batches * mb < 8 * threads) {
      mb = std::min(micro_rows, (mb + threads - 1) / threads * threads);
      // At least a few blocks per thread: a thread that is descheduled mid-product (a shared
      // or loaded machine) then holds back a small block, not half of the product.
      if (batches * mb < 4 * threads) nb = std::min(panels, (4 * threads + batches * mb - 1) / (batches * mb));
    }
  }
};

void matmul_f32(const View& a, const View& b, const View& out, int64_t batches, std::span<const View> addends) {
  const gemm::Kernel& kern = active_kernel();
  const int64_t MR = kern.mr, NR = kern.nr, KC = kern.kc;
  Operand oa(a), ob(b);
  int64_t m = oa.rows, k = oa.cols, n = ob.cols;
  int64_t panels = (n + NR - 1) / NR, panel_floats = k * panels * NR;
  bool shared_b = ob.batch_broadcast();
  int64_t b_copies = shared_b ? 1 : batches;
  const Grid grid(m, MR, kern.mc, panels, batches);
  // One row block per matrix and a B per matrix: each B panel is used by one block, which
  // packs its KC-deep slice of all its panels just before use (into L2, no pass over all of
  // B up front, whose copy of a 2 MB B cost ~8% of a [128, 1024] x [1024, 512] product;
  // and B's rows read in order, not one line per row for each 16-wide panel).
  const bool b_in_block = grid.mb == 1 && (!shared_b || batches == 1);
  // ... a group of panels at a time, 128 KiB of them (8 AVX2 panels of KC = 256), so the
  // slice stays in L2 beside A and C: all of a 512-wide B's slice (512 KiB) measured slower.
  const int64_t b_group = std::max<int64_t>(1, (int64_t{128} << 10) / static_cast<int64_t>(KC * NR * sizeof(float)));
  Scratch bpack(Scratch::kBpack, static_cast<size_t>(b_in_block ? 0 : b_copies * panel_floats));
  const bool b_far = !b_in_block && panel_floats * static_cast<int64_t>(sizeof(float)) > (int64_t{1} << 20);
  // B packed whole (not per block) is packed on first use, kPackGroup panels at a time (the
  // group pack_b_rows_f32 fills by runs of B's rows), by whichever block needs it first;
  // blocks start their column walk at different groups, so the threads pack different
  // groups at once. (Packed up front, it was a phase of its own: its small packs ran on the
  // calling thread alone while the others waited, and a worker descheduled inside its pack
  // chunk held every thread back.)
  constexpr int64_t kPackGroup = 4;
  const int64_t pack_groups = (panels + kPackGroup - 1) / kPackGroup, threads = num_threads();
  std::unique_ptr<std::atomic<uint8_t>[]> pack_state;  // per (B copy, group): 0 to pack, 1 packing, 2 packed
  if (!b_in_block) {
    pack_state = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(b_copies * pack_groups));
    for (int64_t g = 0; g < b_copies * pack_groups; ++g) pack_state[g].store(0, std::memory_order_relaxed);
  }
  auto ensure_packed = [&](int64_t bcopy, int64_t group) {
    std::atomic<uint8_t>& state = pack_state[bcopy * pack_groups + group];
    uint8_t seen = state.load(std::memory_order_acquire);
    if (seen == 2) return;
    if (seen == 0 && state.compare_exchange_strong(seen, 1, std::memory_order_acq_rel)) {
      const int64_t j0 = group * kPackGroup, j1 = std::min(panels, j0 + kPackGroup);
      try {
        pack_b(b, ob, ob.batch.offset_of(bcopy), j0, j1, NR, 0, k, bpack.get() + bcopy * panel_floats + j0 * k * NR);
      } catch (...) {
        state.store(2, std::memory_order_release);  // no waiter spins forever; the product fails with the error
        throw;
      }
      state.store(2, std::memory_order_release);
      return;
    }
    while (state.load(std::memory_order_acquire) != 2) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  };

  const int64_t micro_rows = grid.micro_rows, mb = grid.mb, nb = grid.nb;
  int64_t max_rows = (micro_rows + mb - 1) / mb * MR;
  double flops_per_item = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
                          static_cast<double>(mb * nb);
  int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((1 << 21) / std::max(1.0, flops_per_item)));
  bool direct = out.dtype == DType::F32;
  // A column-major f32 A (a transposed view: the weight gradient's x^T) already has each
  // k-step's MR values side by side: the micro-kernel reads its full panels where they are,
  // its partial last panel is packed (pack_a_cols_f32). Packing all of it instead (once for
  // all tasks, or per row block) measured 0-8% slower on the weight-gradient shapes.
  const bool a_in_place = a.dtype == DType::F32 && oa.row_stride == 1 && oa.col_stride > 0;
  // A row-major f32 A is read by rows in place when its rows spread over the L1 sets (its
  // partial panel, or all of it otherwise, copied by rows), anything else transposed into panels.
  const bool a_by_rows = !a_in_place && a.dtype == DType::F32 && oa.col_stride == 1;
  const bool a_rows_in_place = a_by_rows && rows_spread(oa.row_stride, MR);
  std::vector<Operand> adds;  // added to each tile on its last k block (direct output only)
  for (const View& v : addends) adds.emplace_back(v);
  const float* a_data = static_cast<const float*>(a.data);
  const int64_t max_panels = (panels + nb - 1) / nb;
  int64_t max_cols = direct ? 0 : std::min(n, max_panels * NR);
  parallel_for(batches * mb * nb, grain, [&](int64_t lo, int64_t hi) {
    Scratch apack(Scratch::kApack, static_cast<size_t>(max_rows * KC)),
        bslice(Scratch::kBslice, static_cast<size_t>(b_in_block ? KC * b_group * NR : 0));
    std::vector<float> cbuf(static_cast<size_t>(direct ? 0 : max_rows * max_cols));
    for (int64_t item = lo; item < hi; ++item) {
      int64_t bi = item / (mb * nb), mbi = item % (mb * nb) / nb, nbi = item % nb;
      int64_t r0 = micro_rows * mbi / mb * MR, r1 = std::min(m, micro_rows * (mbi + 1) / mb * MR);
      int64_t j0 = panels * nbi / nb, j1 = panels * (nbi + 1) / nb;
      int64_t c0 = j0 * NR, c1 = std::min(n, j1 * NR);
      if (r0 >= r1 || j0 >= j1) continue;
      int64_t a_base = oa.batch.offset_of(bi);
      // An A read in place whose block ends 1 or 2 rows past a whole panel (a 128-row A on
      // the 6- or 14-row tile): its last MR + rem rows run as two panels of half as many
      // rows (4 or 8), each at the full FMA rate, instead of a full panel plus a 1-2 row
      // one, which waits on its few accumulators' FMA latency (~4 cycles a k-step). The
      // sums are the same (each element's, in k order), only the tiling differs.
      int64_t split_at = r1, split_rows = MR;
      if (a_in_place || a_rows_in_place) {
        const int64_t rem = (r1 - r0) % MR, half = (MR + rem) / 2;
        bool edge = false;
        for (int e = 0; e < gemm::Kernel::kEdges; ++e) edge = edge || kern.edge_rows[e] == half;
        if (rem > 0 && rem <= 2 && (MR + rem) % 2 == 0 && r1 - r0 > MR && edge) {
          split_at = r1 - MR - rem;
          split_rows = half;
        }
      }
      const float* bp = b_in_block ? nullptr : bpack.get() + (shared_b ? 0 : bi) * panel_floats;
      // Where this block's walk over its panels starts: the row blocks the threads take
      // together (consecutive ones) start at groups spread over the range, so their first
      // passes pack different groups.
      int64_t j_start = j0;
      if (!b_in_block && j1 > j0) {
        const int64_t g_lo = j0 / kPackGroup, g_count = (j1 - 1) / kPackGroup + 1 - g_lo;
        const int64_t spread = std::max<int64_t>(1, std::min<int64_t>(threads, mb));
        j_start = std::min(j1 - 1, std::max(j0, (g_lo + mbi % spread * g_count / spread) * kPackGroup));
      }
      int64_t ldc = direct ? n : c1 - c0;
      float* c = direct ? static_cast<float*>(out.data) + out.offset + bi * m * n + r0 * n + c0 : cbuf.data();
      for (int64_t p0 = 0; p0 < k; p0 += KC) {
        int64_t kc = std::min(KC, k - p0);
        // Full panels of a column-major A are read in place; the rest is packed.
        const int64_t full_end =
            split_at < r1 ? r1 : a_in_place || a_rows_in_place ? r0 + (r1 - r0) / MR * MR : r0;
        if (full_end < r1) {
          if (a_in_place)
            pack_a_cols_f32(a_data + a_base, oa.col_stride, m, p0, kc, full_end / MR, (r1 + MR - 1) / MR, MR,
                            apack.get());
          else if (a_by_rows)
            pack_a_by_rows(a, oa, a_base, full_end, r1, p0, kc, MR, KC, apack.get());
          else
            pack_a(a, oa, a_base, full_end, r1, p0, kc, MR, apack.get());
        }
        for (int64_t step_j = 0; step_j < j1 - j0; ++step_j) {
          // A B packed whole: its panels from the block's own starting group on (ensure_packed),
          // wrapping around; each tile's sums are the same in any panel order.
          const int64_t j = b_in_block ? j0 + step_j : j0 + (j_start - j0 + step_j) % (j1 - j0);
          int nr = static_cast<int>(std::min<int64_t>(NR, n - j * NR));
          if (b_in_block && (j - j0) % b_group == 0)
            pack_b(b, ob, ob.batch.offset_of(bi), j, std::min(j1, j + b_group), NR, p0, kc, bslice.get());
          if (!b_in_block && p0 == 0) ensure_packed(shared_b ? 0 : bi, j / kPackGroup);  // one load once packed
          const float* bs = b_in_block ? bslice.get() + (j - j0) % b_group * kc * NR : bp + j * k * NR + p0 * NR;
          float* cj = c + (j - j0) * NR;
          // The next B micro panel comes from L3 when the packed B is larger than L2: each
          // micro-kernel call brings in its share of it, so the first call on it does not
          // wait for each line. (A block's own B slice was just packed: in cache.) On the
          // first pass only once the next panel is packed.
          const float* next_bs =
              b_far && j + 1 < j1 &&
                      (p0 > 0 || pack_state[(shared_b ? 0 : bi) * pack_groups + (j + 1) / kPackGroup].load(
                                     std::memory_order_acquire) == 2)
                  ? bs + k * NR
                  : nullptr;
          const int64_t next_lines = kc * NR / 16, calls = (r1 - r0 + MR - 1) / MR;
          const int64_t lines_per_call = (next_lines + calls - 1) / calls;
          for (int64_t i0 = r0, step = MR; i0 < r1; i0 += step) {
            step = i0 < split_at ? MR : split_rows;
            int mr = static_cast<int>(std::min<int64_t>(step, r1 - i0));
            if (next_bs != nullptr) {
              const int64_t l0 = (i0 - r0) / MR * lines_per_call, l1 = std::min(next_lines, l0 + lines_per_call);
              for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(next_bs + l * 16);
            }
            float* ci = cj + (i0 - r0) * ldc;
            gemm::Addends tile;
            if (p0 + KC >= k)
              for (size_t q = 0; q < adds.size(); ++q) {
                tile.p[tile.n] = static_cast<const float*>(addends[q].data) + adds[q].batch.offset_of(bi) +
                                 i0 * adds[q].row_stride + j * NR;
                tile.row_stride[tile.n++] = adds[q].row_stride;
              }
            const gemm::Addends* tile_adds = tile.n ? &tile : nullptr;
            gemm::MicroKernel run = kern.run, run_rows = kern.run_rows;
            for (int e = 0; mr < MR && e < gemm::Kernel::kEdges; ++e)
              if (mr <= kern.edge_rows[e]) {  // a partial last panel: only its rows
                run = kern.run_edge[e];
                run_rows = kern.run_rows_edge[e];
                break;
              }
            if (i0 < full_end && a_rows_in_place)
              run_rows(kc, a_data + a_base + i0 * oa.row_stride + p0, oa.row_stride, bs, ci, ldc, mr, nr, p0 > 0,
                       tile_adds);
            else if (i0 < full_end)
              run(kc, a_data + a_base + i0 + p0 * oa.col_stride, oa.col_stride, bs, ci, ldc, mr, nr, p0 > 0, tile_adds);
            else if (a_by_rows)
              run_rows(kc, apack.get() + ((i0 - full_end) / MR) * MR * KC, KC, bs, ci, ldc, mr, nr, p0 > 0, tile_adds);
            else
              run(kc, apack.get() + ((i0 - full_end) / MR) * kc * MR, MR, bs, ci, ldc, mr, nr, p0 > 0, tile_adds);
          }
        }
      }
      if (!direct)
        for (int64_t i = r0; i < r1; ++i)
          detail::store_run(out, out.offset + bi * m * n + i * n + c0, 1, c1 - c0, cbuf.data() + (i - r0) * ldc);
    }
  });
}

#if ALK_GEMM_X86
// bf16 x bf16 on AVX-512 BF16 (gemm_avx512bf16.cpp): both operands packed as pairs of k
// (two bf16 in one 32-bit word), products accumulated in f32 by vdpbf16ps. The same
// blocking as matmul_f32; each output element sums its KC blocks in order.
void matmul_bf16(const View& a, const View& b, const View& out, int64_t batches) {
  const gemm::Bf16Kernel& kern = gemm::kAvx512Bf16;
  const int64_t MR = kern.mr, NR = kern.nr, KC2 = kern.kc / 2;
  Operand oa(a), ob(b);
  const int64_t m = oa.rows, k = oa.cols, n = ob.cols, k2 = (k + 1) / 2;
  const int64_t panels = (n + NR - 1) / NR, panel_words = k2 * panels * NR;
  const bool shared_b = ob.batch_broadcast();
  const int64_t b_copies = shared_b ? 1 : batches;
  const auto* bsrc = static_cast<const uint16_t*>(b.data);
  const auto* asrc = static_cast<const uint16_t*>(a.data);
  // The word of elements (2p, c) and (2p + 1, c) of a [rows, cols] operand at `base` with
  // strides (rs, cs) along k = rows; zero past either end.
  auto pair = [](const uint16_t* src, int64_t base, int64_t k_rs, int64_t other, int64_t p, int64_t kdim) {
    const uint32_t lo = 2 * p < kdim ? src[base + 2 * p * k_rs + other] : 0u;
    const uint32_t hi = 2 * p + 1 < kdim ? src[base + (2 * p + 1) * k_rs + other] : 0u;
    return lo | hi << 16;
  };
  Aligned<uint32_t> bpack(static_cast<size_t>(b_copies * panel_words));
  parallel_for(b_copies * panels, detail::grain_for(k * NR), [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t bi = item / panels, j = item % panels, base = ob.batch.offset_of(bi);
      uint32_t* panel = bpack.get() + bi * panel_words + j * k2 * NR;
      for (int64_t p = 0; p < k2; ++p)
        for (int64_t c = 0; c < NR; ++c) {
          const int64_t col = j * NR + c;
          panel[p * NR + c] = col < n ? pair(bsrc, base, ob.row_stride, col * ob.col_stride, p, k) : 0u;
        }
    }
  });
  const Grid grid(m, MR, kern.mc, panels, batches);
  const int64_t max_rows = (grid.micro_rows + grid.mb - 1) / grid.mb * MR;
  const bool direct = out.dtype == DType::F32;
  const int64_t max_cols = direct ? 0 : std::min(n, (panels + grid.nb - 1) / grid.nb * NR);
  const double flops_per_item = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
                                static_cast<double>(grid.mb * grid.nb);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((1 << 21) / std::max(1.0, flops_per_item)));
  parallel_for(batches * grid.mb * grid.nb, grain, [&](int64_t lo, int64_t hi) {
    Aligned<uint32_t> apack(static_cast<size_t>(max_rows * KC2));
    std::vector<float> cbuf(static_cast<size_t>(direct ? 0 : max_rows * max_cols));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t bi = item / (grid.mb * grid.nb), mbi = item % (grid.mb * grid.nb) / grid.nb, nbi = item % grid.nb;
      const int64_t r0 = grid.micro_rows * mbi / grid.mb * MR, r1 = std::min(m, grid.micro_rows * (mbi + 1) / grid.mb * MR);
      const int64_t j0 = panels * nbi / grid.nb, j1 = panels * (nbi + 1) / grid.nb;
      const int64_t c0 = j0 * NR, c1 = std::min(n, j1 * NR);
      if (r0 >= r1 || j0 >= j1) continue;
      const int64_t a_base = oa.batch.offset_of(bi);
      const uint32_t* bp = bpack.get() + (shared_b ? 0 : bi) * panel_words;
      const int64_t ldc = direct ? n : c1 - c0;
      float* c = direct ? static_cast<float*>(out.data) + out.offset + bi * m * n + r0 * n + c0 : cbuf.data();
      for (int64_t p0 = 0; p0 < k2; p0 += KC2) {
        const int64_t kc2 = std::min(KC2, k2 - p0);
        for (int64_t i0 = r0; i0 < r1; i0 += MR) {  // A panels: kc2 pairs x MR rows
          uint32_t* panel = apack.get() + ((i0 - r0) / MR) * kc2 * MR;
          for (int64_t p = 0; p < kc2; ++p)
            for (int64_t r = 0; r < MR; ++r)
              panel[p * MR + r] = i0 + r < r1 ? pair(asrc, a_base, oa.col_stride, (i0 + r) * oa.row_stride, p0 + p, k) : 0u;
        }
        for (int64_t j = j0; j < j1; ++j) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, n - j * NR));
          for (int64_t i0 = r0; i0 < r1; i0 += MR) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, r1 - i0));
            kern.run(kc2, apack.get() + ((i0 - r0) / MR) * kc2 * MR, bp + j * k2 * NR + p0 * NR,
                     c + (i0 - r0) * ldc + (j - j0) * NR, ldc, mr, nr, p0 > 0);
          }
        }
      }
      if (!direct)
        for (int64_t i = r0; i < r1; ++i)
          detail::store_run(out, out.offset + bi * m * n + i * n + c0, 1, c1 - c0, cbuf.data() + (i - r0) * ldc);
    }
  });
}
#endif

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

// out += each addend in turn, element by element (the paths without in-register addends).
void add_after(const View& out, std::span<const View> addends) {
  const int64_t rows = out.numel() / std::max<int64_t>(out.shape.back(), 1), cols = out.shape.back();
  for (const View& v : addends) {
    const Operand ad(v);
    const int64_t m = ad.rows;
    parallel_for(rows, detail::grain_for(cols), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        float* o = static_cast<float*>(out.data) + out.offset + r * cols;
        const float* x = static_cast<const float*>(v.data) + ad.batch.offset_of(r / m) + (r % m) * ad.row_stride;
        for (int64_t c = 0; c < cols; ++c) o[c] = o[c] + x[c];
      }
    });
  }
}

// Every addend's batch dims step like its rows (so the batch can merge into the rows).
bool rows_merge(const View& v, int64_t m) {
  const size_t r = v.shape.size();
  int64_t expect = v.strides[r - 2] * m;
  for (size_t d = r - 2; d-- > 0;) {
    if (v.shape[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}

}  // namespace

void matmul(const View& a, const View& b, const View& out, std::span<const View> addends) {
  if (a.rank() < 2 || b.rank() != a.rank() || out.rank() != a.rank())
    fail("matmul", Loc::current(), "expected operands of equal rank >= 2, got ", to_string(a.shape), " x ",
         to_string(b.shape), " -> ", to_string(out.shape));
  for (const View& v : addends)
    if (v.dtype != DType::F32 || out.dtype != DType::F32 || v.shape != out.shape || v.strides.back() != 1)
      fail("matmul", Loc::current(), "internal: an addend must be f32 with the output's shape and unit column stride");
  if (out.numel() == 0) return;
  int64_t k = a.shape.back();
  if (k == 0) {
    detail::zero_fill(out);
    add_after(out, addends);
    return;
  }
  int64_t m = a.shape[a.shape.size() - 2], n = b.shape.back();
  int64_t batches = out.numel() / (m * n);
  // A B shared by every batch matrix (a weight broadcast over a batch) and an A whose batch
  // dims step like its rows (a contiguous activation): one matmul with batch * m rows, so
  // the row blocks and the last partial micro-panel are per product, not per batch matrix.
  if (batches > 1 && Operand(b).batch_broadcast()) {
    const size_t r = a.shape.size();
    bool merge = a.strides[r - 2] != 0 && rows_merge(a, m);
    for (const View& v : addends) merge = merge && rows_merge(v, m);
    if (merge) {
      auto as_rows = [&](View v) {  // [..., m, cols] -> [batches * m, cols]
        v.strides = {v.strides[r - 2], v.strides[r - 1]};
        v.shape = {batches * m, v.shape[r - 1]};
        return v;
      };
      View b2 = b;
      b2.shape = {k, n};
      b2.strides = {b.strides[r - 2], b.strides[r - 1]};
      std::vector<View> adds2;
      for (const View& v : addends) adds2.push_back(as_rows(v));
      return matmul(as_rows(a), b2, as_rows(out), adds2);
    }
  }
  auto narrow_float = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
#if ALK_GEMM_X86
  // bf16 x bf16 on the AVX-512 path uses the CPU's bf16 dot products when it has them.
  if (a.dtype == DType::BF16 && b.dtype == DType::BF16 && out.dtype != DType::F64 && gemm_bf16_dot()) {
    matmul_bf16(a, b, out, batches);
    add_after(out, addends);
    return;
  }
#endif
  if (narrow_float(a.dtype) && narrow_float(b.dtype) && out.dtype != DType::F64) {
    matmul_f32(a, b, out, batches, addends);  // addends only with an f32 output: added in registers
    return;
  }
  matmul_f64(a, b, out, batches);
  add_after(out, addends);
}

// The CPU's template-op table entry for this family (src/backend/cpu/template_ops.h). A
// matmul whose epilogue only adds f32 tensors is run by the device with those addends
// (cpu_device.cpp); this is the plain product.
namespace {
[[maybe_unused]] const bool registered = [] {
  template_ops().add(OpId::Matmul, kAllDTypes, [](const Kernel&, const std::vector<View>& in, const View& out) {
    matmul(in[0], in[1], out);
  }, "integers through f64 arithmetic");
  return true;
}();
}  // namespace

}  // namespace alk::cpu
