// Portable SGEMM micro-kernel in plain C++ with GCC/Clang vector extensions (4 floats,
// i.e. SSE2 on x86-64, NEON on AArch64). Built with the project's default flags, so it
// runs on any CPU; multiply and add stay separate (no FMA contraction under -std=c++20).
#include "backend/cpu/gemm_kernel.h"

namespace {
typedef float V __attribute__((vector_size(16)));
typedef float VU __attribute__((vector_size(16), aligned(4), may_alias));
constexpr int VW = 4, MR = 6, NV = 2;
constexpr int64_t KC = 256, MC = 6 * 16;
inline V vload(const float* p) { return *reinterpret_cast<const V*>(p); }
inline V vloadu(const float* p) { return *reinterpret_cast<const VU*>(p); }
inline void vstoreu(float* p, V v) { *reinterpret_cast<VU*>(p) = v; }
inline V vbcast(float x) { return V{x, x, x, x}; }
inline V vfma(V a, V b, V c) { return c + a * b; }
inline V vadd(V a, V b) { return a + b; }
inline V vzero() { return V{0.0f, 0.0f, 0.0f, 0.0f}; }
}  // namespace

#define ALK_GEMM_SYMBOL kGeneric
#define ALK_GEMM_NAME "generic"
#include "backend/cpu/gemm_kernel.inc"
