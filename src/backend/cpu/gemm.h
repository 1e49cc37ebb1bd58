// Run-time selection of the SGEMM micro-kernel behind cpu::matmul's f32/f16/bf16 path.
//
// Paths: "avx512" (AVX-512F/BW/VL + FMA; bf16 x bf16 with AVX-512 BF16 dot products when
// the CPU has them), "avx2" (AVX2 + FMA), "generic" (portable C++).
// By default the path follows the process-wide ISA choice (isa.h): the best the CPU
// supports, or the one the environment variable ALK_ISA=avx512|avx2|generic names; a path
// the CPU lacks is refused there with a one-line note on stderr and the best supported
// path is used instead.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace alk::cpu {

// The paths this CPU can run, best first (always ends with "generic").
std::vector<std::string> gemm_supported_isas();
// The path matmul uses now.
std::string gemm_isa();
// Whether bf16 x bf16 products now use the CPU's bf16 dot products (AVX-512 BF16, on the
// "avx512" path) rather than converting to f32 while packing.
bool gemm_bf16_dot();
// Test/bench hook: forces the GEMM path ("auto" or "" = follow isa.h again). Returns false and
// leaves the current path unchanged when the name is unknown or the CPU lacks it.
// Not meant to be called while a matmul is running on another thread.
bool set_gemm_isa(std::string_view name);

}  // namespace alk::cpu
