// The SGEMM micro-kernel interface shared by the ISA-specific translation units
// (gemm_generic.cpp, gemm_avx2.cpp, gemm_avx512.cpp). Those files are compiled with
// different -m flags, so this header must stay free of inline functions and templates:
// an inline definition emitted from an AVX-512 file could be picked by the linker for
// every caller (ODR), and crash on a CPU without AVX-512.
#pragma once
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define ALK_GEMM_X86 1
#else
#define ALK_GEMM_X86 0
#endif

namespace alk::cpu::gemm {

// c[mr x nr] (row stride ldc) = (accumulate ? c : 0) + A panel * B panel, where the A panel
// is kc x MR floats, element (i, p) at a[p * a_step + i] (a packed panel: a_step = MR,
// zero-padded past mr; a column-major matrix read in place: a_step = its column stride),
// and the B panel kc x NR floats (p-major, 64-byte aligned, zero-padded past nr). For each
// element the kc products are summed in order p = 0, 1, ..., kc - 1 and the sum is then
// added to c, so the result does not depend on how the caller tiles M and N.
// adds (may be null): tiles added to the result before it is stored, in order (a bias row
// has row stride 0, a residual its row stride); each p[q] points at the tile's first
// element. c = ((c + A B) + adds[0]) + adds[1] ..., each + rounded: what a separate
// elementwise kernel computes from the stored product.
struct Addends {
  static constexpr int kMax = 4;
  int n = 0;
  const float* p[kMax] = {};
  int64_t row_stride[kMax] = {};
};
using MicroKernel = void (*)(int64_t kc, const float* a, int64_t a_step, const float* b, float* c, int64_t ldc,
                             int mr, int nr, bool accumulate, const Addends* adds);

struct Kernel {
  const char* name;  // "avx512", "avx2", "generic"
  int mr, nr;        // register tile
  int64_t kc, mc;    // cache blocking: depth of one packed block, rows of A per L2 block
  MicroKernel run;
  // The same product with the A panel by rows, element (i, p) at a[i * a_step + p]: a
  // row-major A read where it is (a_step = its row stride), or its last partial panel
  // packed with a copy per row (a_step = kc, the kernel's block depth above).
  MicroKernel run_rows;
  // The same two for a last panel of at most edge_rows[e] rows (ascending, each <= mr):
  // fewer accumulator rows, the same sums (a 128-row A on the 14-row AVX-512 tile computed
  // 140 rows).
  static constexpr int kEdges = 3;
  int edge_rows[kEdges];
  MicroKernel run_edge[kEdges];
  MicroKernel run_rows_edge[kEdges];
};

extern const Kernel kGeneric;
#if ALK_GEMM_X86
extern const Kernel kAvx2;
extern const Kernel kAvx512;
#endif

// bf16 x bf16 on AVX-512 BF16: panels of k pairs, each pair of bf16 in one 32-bit word
// (the even k in the low half), accumulating in f32. The sums run pair by pair in k order
// (within a pair the hardware adds the odd product first), then onto c.
using Bf16MicroKernel = void (*)(int64_t kc2, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, int mr,
                                 int nr, bool accumulate);
struct Bf16Kernel {
  int mr, nr;       // register tile
  int64_t kc, mc;   // block depth in k (pairs: kc / 2), rows of A per block
  Bf16MicroKernel run;
};
#if ALK_GEMM_X86
extern const Bf16Kernel kAvx512Bf16;
#endif

}  // namespace alk::cpu::gemm
