#include "backend/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ALK_CPUID_X86 1
#else
#define ALK_CPUID_X86 0
#endif

namespace alk::cpu {

namespace {

constexpr bool bit(uint64_t word, int b) { return ((word >> b) & 1u) != 0; }

// XCR0 state components: SSE (1) and AVX (2) for the YMM registers; opmask (5), ZMM_Hi256 (6)
// and Hi16_ZMM (7) for AVX-512.
constexpr uint64_t kYmmState = 0x6, kZmmState = 0xE6;

#if ALK_CPUID_X86
// XGETBV with ECX = 0, spelled as bytes so no -mxsave is needed to compile it.
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

}  // namespace

CpuidRegs read_cpuid() {
  CpuidRegs r;
#if ALK_CPUID_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return r;
  r.max_leaf = a;
  if (r.max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) r.leaf1_ecx = c;
  if (r.max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    r.leaf7_max_sub = a;
    r.leaf7_ebx = b;
    if (r.leaf7_max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) r.leaf7_1_eax = a;
  }
  if (bit(r.leaf1_ecx, 27)) r.xcr0 = xgetbv0();  // OSXSAVE: XGETBV is available
#endif
  return r;
}

CpuFeatures features_from_cpuid(const CpuidRegs& r) {
  CpuFeatures f;
  if (r.max_leaf < 1) return f;
  const bool osxsave = bit(r.leaf1_ecx, 27);
  const bool ymm = bit(r.leaf1_ecx, 28) && osxsave && (r.xcr0 & kYmmState) == kYmmState;  // AVX usable
  const bool zmm = ymm && (r.xcr0 & kZmmState) == kZmmState;
  f.fma = ymm && bit(r.leaf1_ecx, 12);
  f.f16c = ymm && bit(r.leaf1_ecx, 29);
  if (r.max_leaf < 7) return f;
  f.avx2 = ymm && bit(r.leaf7_ebx, 5);
  f.avx512f = zmm && bit(r.leaf7_ebx, 16);
  f.avx512dq = f.avx512f && bit(r.leaf7_ebx, 17);
  f.avx512bw = f.avx512f && bit(r.leaf7_ebx, 30);
  f.avx512vl = f.avx512f && bit(r.leaf7_ebx, 31);
  f.avx512bf16 = f.avx512f && r.leaf7_max_sub >= 1 && bit(r.leaf7_1_eax, 5);
  return f;
}

CpuFeatures disable_features(CpuFeatures f, const std::string& names, std::string* bad) {
  std::string_view rest(names);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (name.empty()) continue;
    bool* field = name == "avx2"         ? &f.avx2
                  : name == "fma"        ? &f.fma
                  : name == "f16c"       ? &f.f16c
                  : name == "avx512f"    ? &f.avx512f
                  : name == "avx512bw"   ? &f.avx512bw
                  : name == "avx512vl"   ? &f.avx512vl
                  : name == "avx512dq"   ? &f.avx512dq
                  : name == "avx512bf16" ? &f.avx512bf16
                                         : nullptr;
    if (field != nullptr) {
      *field = false;
    } else if (bad != nullptr) {
      *bad += (bad->empty() ? "" : ",") + std::string(name);
    }
  }
  // Dependent features go with what they extend, as the decoding above makes them.
  if (!f.avx512f) f.avx512dq = f.avx512bw = f.avx512vl = f.avx512bf16 = false;
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f = features_from_cpuid(read_cpuid());
    if (const char* off = std::getenv("ALK_CPU_DISABLE")) {
      std::string bad;
      f = disable_features(f, off, &bad);
      if (!bad.empty()) std::fprintf(stderr, "alk: ALK_CPU_DISABLE: unknown feature(s) %s ignored\n", bad.c_str());
    }
    return f;
  }();
  return features;
}

std::string features_str(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512bf16, "avx512bf16");
  return s.empty() ? "none" : s;
}

int best_isa_level(const CpuFeatures& f) {
  if (gemm_avx512_ok(f) && f.avx512dq) return 2;
  if (gemm_avx2_ok(f)) return 1;
  return 0;
}

bool gemm_avx2_ok(const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; }
bool gemm_avx512_ok(const CpuFeatures& f) { return gemm_avx2_ok(f) && f.avx512f && f.avx512bw && f.avx512vl; }
bool gemm_bf16_ok(const CpuFeatures& f) { return gemm_avx512_ok(f) && f.avx512bf16; }

}  // namespace alk::cpu
