// The bf16 x bf16 micro-kernel on AVX-512 BF16 (vdpbf16ps: two bf16 products per f32 lane
// and step). Compiled with -mavx512bf16 (CMakeLists.txt) and only called after a run-time
// CPU check (kernels_matmul.cpp). Like gemm_kernel.h, no inline functions are shared
// with other files (see there why).
#include "backend/cpu/gemm_kernel.h"

#if ALK_GEMM_X86
#include <immintrin.h>

namespace {

constexpr int MR = 14, NR = 32;

// c[mr x nr] (row stride ldc) = (accumulate ? c : 0) + A * B over kc2 pairs of k: the A
// panel holds, per pair p and row i, a(i, 2p) and a(i, 2p + 1) as one 32-bit word
// (a[p * MR + i]); the B panel, per pair, NR such words for the columns (b[p * NR + j]),
// 64-byte aligned. Rows past mr and columns past nr are zero in the panels.
void micro_kernel_bf16(int64_t kc2, const uint32_t* __restrict a, const uint32_t* __restrict b, float* __restrict c,
                       int64_t ldc, int mr, int nr, bool accumulate) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc2; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    a += MR;
    b += NR;
  }
  alignas(64) float tmp[NR];
  for (int i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    if (nr == NR) {
      if (accumulate) {
        acc[i][0] = _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][0]);
        acc[i][1] = _mm512_add_ps(_mm512_loadu_ps(ci + 16), acc[i][1]);
      }
      _mm512_storeu_ps(ci, acc[i][0]);
      _mm512_storeu_ps(ci + 16, acc[i][1]);
      continue;
    }
    _mm512_store_ps(tmp, acc[i][0]);
    _mm512_store_ps(tmp + 16, acc[i][1]);
    for (int j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + tmp[j] : tmp[j];
  }
}

}  // namespace

namespace alk::cpu::gemm {
extern const Bf16Kernel kAvx512Bf16 = {MR, NR, 256, 14 * 32, micro_kernel_bf16};
}  // namespace alk::cpu::gemm
#endif
