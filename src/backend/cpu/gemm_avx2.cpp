// AVX2 + FMA SGEMM micro-kernel: compiled with -mavx2 -mfma (see CMakeLists.txt) and only
// ever called after a run-time CPU check (kernels_matmul.cpp).
#include "backend/cpu/gemm_kernel.h"

#if ALK_GEMM_X86
#include <immintrin.h>

namespace {
using V = __m256;
constexpr int VW = 8, MR = 6, NV = 2;
constexpr int64_t KC = 256, MC = 6 * 24;
inline V vload(const float* p) { return _mm256_load_ps(p); }
inline V vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstoreu(float* p, V v) { _mm256_storeu_ps(p, v); }
inline V vbcast(float x) { return _mm256_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vzero() { return _mm256_setzero_ps(); }
}  // namespace

#define ALK_GEMM_SYMBOL kAvx2
#define ALK_GEMM_NAME "avx2"
#include "backend/cpu/gemm_kernel.inc"
#endif
