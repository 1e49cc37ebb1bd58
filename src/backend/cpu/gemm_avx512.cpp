// AVX-512 SGEMM micro-kernel: compiled with -mavx512f -mavx512bw -mavx512vl -mfma (see
// CMakeLists.txt) and only ever called after a run-time CPU check (kernels_matmul.cpp).
#include "backend/cpu/gemm_kernel.h"

#if ALK_GEMM_X86
#include <immintrin.h>

namespace {
using V = __m512;
constexpr int VW = 16, MR = 14, NV = 2;
// KC 256: half the passes over C of KC 128 (whose B micro-panel fit L1 beside A's);
// measured 5-10% faster at 1024^3 and 2048^3 on a Zen 4 (bench/NOTES.md).
constexpr int64_t KC = 256, MC = 14 * 32;
inline V vload(const float* p) { return _mm512_load_ps(p); }
inline V vloadu(const float* p) { return _mm512_loadu_ps(p); }
inline void vstoreu(float* p, V v) { _mm512_storeu_ps(p, v); }
inline V vbcast(float x) { return _mm512_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vzero() { return _mm512_setzero_ps(); }
}  // namespace

#define ALK_GEMM_SYMBOL kAvx512
#define ALK_GEMM_NAME "avx512"
#include "backend/cpu/gemm_kernel.inc"
#endif
