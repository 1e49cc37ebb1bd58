// What the x86 processor can run, read from CPUID and XGETBV once, and the pure functions
// that turn those bits into the CPU kernels' choices (isa.h's Isa, the GEMM paths of gemm.h).
//
// Detection is split in two so it can be tested without the hardware: read_cpuid() fills
// CpuidRegs from the instructions, features_from_cpuid() decodes them. A feature counts
// only when the operating system also saves its registers (XCR0): a CPU with AVX-512 under
// an OS (or hypervisor) that does not enable the ZMM state must not run AVX-512 code.
//
// ALK_CPU_DISABLE=feature,... (avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512bf16)
// removes features after detection, so the whole suite can run as it would on an AVX2-only
// CPU or one with AVX-512 but no BF16. It can only remove: nothing the CPU lacks is enabled.
#pragma once
#include <cstdint>
#include <string>

namespace alk::cpu {

// The raw registers detection reads (zero where a leaf is absent).
struct CpuidRegs {
  uint32_t max_leaf = 0;        // CPUID.0:EAX
  uint32_t leaf1_ecx = 0;       // CPUID.1:ECX (FMA, OSXSAVE, AVX, F16C)
  uint32_t leaf7_max_sub = 0;   // CPUID.(7,0):EAX
  uint32_t leaf7_ebx = 0;       // CPUID.(7,0):EBX (AVX2, AVX512F/DQ/BW/VL)
  uint32_t leaf7_1_eax = 0;     // CPUID.(7,1):EAX (AVX512_BF16)
  uint64_t xcr0 = 0;            // XGETBV(0), when OSXSAVE is set
};

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512bf16 = false;
  bool operator==(const CpuFeatures&) const = default;
};

CpuidRegs read_cpuid();  // all zero off x86
CpuFeatures features_from_cpuid(const CpuidRegs& r);
// Clears the features named in a comma-separated list; unknown names are reported in *bad.
CpuFeatures disable_features(CpuFeatures f, const std::string& names, std::string* bad = nullptr);
// This process's features: read_cpuid(), decoded, minus ALK_CPU_DISABLE. Computed once.
const CpuFeatures& cpu_features();
std::string features_str(const CpuFeatures& f);  // "avx2 fma avx512f ..." (for messages)

// The choices, as pure functions of the features.
// The evaluator/attention/norm ISA: 0 generic, 1 AVX2 (+FMA), 2 AVX-512 (F, BW, VL, DQ + FMA).
int best_isa_level(const CpuFeatures& f);
// GEMM micro-kernel paths: AVX-512 needs F, BW, VL (+AVX2, FMA, F16C); AVX2 needs AVX2 + FMA +
// F16C (f16 conversions; every AVX2 CPU has it, so this excludes none in practice); bf16
// dot products need the AVX-512 path and AVX512_BF16.
bool gemm_avx512_ok(const CpuFeatures& f);
bool gemm_avx2_ok(const CpuFeatures& f);
bool gemm_bf16_ok(const CpuFeatures& f);

}  // namespace alk::cpu
