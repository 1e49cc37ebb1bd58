// CPU detection itself (cpu_features.h), on synthetic CPUID/XGETBV registers modelled on real
// processors, so the choice of kernels is checked for CPUs this machine is not: AVX2-only
// (AMD Zen 2), AVX-512 without BF16 (Skylake-SP), AVX-512 with BF16 (Cooper Lake, Sapphire
// Rapids, Zen 4), AVX-512 hardware under an OS that does not save the ZMM state, and others.
// The suite's ISA tests also run as ctest entries with ALK_CPU_DISABLE set (CMakeLists.txt),
// which is where the consistency checks at the end see the masked feature sets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"

namespace alk::cpu {
namespace {

constexpr uint32_t kFma = 1u << 12, kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
constexpr uint32_t kAvx2 = 1u << 5, kAvx512f = 1u << 16, kAvx512dq = 1u << 17, kAvx512bw = 1u << 30,
                   kAvx512vl = 1u << 31, kAvx512cd = 1u << 28, kBmi2 = 1u << 8;
constexpr uint32_t kAvx512Bf16 = 1u << 5;  // CPUID.(7,1):EAX
constexpr uint64_t kXcrYmm = 0x7, kXcrZmm = 0xE7;

CpuidRegs zen2() {  // AMD EPYC 7002: AVX2, FMA, F16C, no AVX-512
  CpuidRegs r;
  r.max_leaf = 0x10;
  r.leaf1_ecx = kFma | kOsxsave | kAvx | kF16c;
  r.leaf7_ebx = kAvx2 | kBmi2;
  r.xcr0 = kXcrYmm;
  return r;
}

CpuidRegs skylake_sp() {  // Xeon Scalable 1st gen: AVX-512 F/CD/DQ/BW/VL, no BF16, no leaf (7,1)
  CpuidRegs r = zen2();
  r.max_leaf = 0x16;
  r.leaf7_ebx |= kAvx512f | kAvx512dq | kAvx512bw | kAvx512vl | kAvx512cd;
  r.xcr0 = kXcrZmm;
  return r;
}

CpuidRegs sapphire_rapids() {  // also Cooper Lake and Zen 4 for these bits: AVX-512 + BF16
  CpuidRegs r = skylake_sp();
  r.max_leaf = 0x20;
  r.leaf7_max_sub = 1;
  r.leaf7_1_eax = kAvx512Bf16;
  return r;
}

struct Expect {
  int isa_level;
  bool gemm_avx512, gemm_avx2, bf16;
};

void expect_choice(const CpuidRegs& r, Expect e) {
  const CpuFeatures f = features_from_cpuid(r);
  SCOPED_TRACE("features: " + features_str(f));
  EXPECT_EQ(best_isa_level(f), e.isa_level);
  EXPECT_EQ(gemm_avx512_ok(f), e.gemm_avx512);
  EXPECT_EQ(gemm_avx2_ok(f), e.gemm_avx2);
  EXPECT_EQ(gemm_bf16_ok(f), e.bf16);
}

TEST(CpuFeatures, Avx2OnlyCpu) {
  CpuFeatures f = features_from_cpuid(zen2());
  EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  EXPECT_FALSE(f.avx512f || f.avx512bw || f.avx512vl || f.avx512dq || f.avx512bf16);
  expect_choice(zen2(), {1, false, true, false});
}

TEST(CpuFeatures, Avx512WithoutBf16) {
  CpuFeatures f = features_from_cpuid(skylake_sp());
  EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_FALSE(f.avx512bf16);
  expect_choice(skylake_sp(), {2, true, true, false});
}

TEST(CpuFeatures, Avx512Bf16) { expect_choice(sapphire_rapids(), {2, true, true, true}); }

TEST(CpuFeatures, OsWithoutZmmStateGetsAvx2) {
  // The hardware has AVX-512 (and BF16), the OS saves only XMM/YMM: AVX-512 would fault.
  CpuidRegs r = sapphire_rapids();
  r.xcr0 = kXcrYmm;
  expect_choice(r, {1, false, true, false});
  r.xcr0 = 0x3;  // not even YMM: no AVX, AVX2 or FMA
  expect_choice(r, {0, false, false, false});
}

TEST(CpuFeatures, NoOsxsaveMeansNoAvx) {
  CpuidRegs r = sapphire_rapids();
  r.leaf1_ecx &= ~kOsxsave;
  r.xcr0 = 0;  // read_cpuid() does not run XGETBV then
  expect_choice(r, {0, false, false, false});
}

TEST(CpuFeatures, OlderAndPartialCpus) {
  CpuidRegs sandy;  // Sandy Bridge: AVX but no AVX2/FMA
  sandy.max_leaf = 0xD;
  sandy.leaf1_ecx = kOsxsave | kAvx;
  sandy.xcr0 = kXcrYmm;
  expect_choice(sandy, {0, false, false, false});

  CpuidRegs old = zen2();  // leaf 7 absent: its registers mean nothing
  old.max_leaf = 6;
  expect_choice(old, {0, false, false, false});

  CpuidRegs knl = zen2();  // Knights Landing: AVX-512F/CD without BW/VL/DQ
  knl.leaf7_ebx |= kAvx512f | kAvx512cd;
  knl.xcr0 = kXcrZmm;
  expect_choice(knl, {1, false, true, false});

  CpuidRegs no_f16c = zen2();  // AVX2 + FMA without F16C (no such CPU is known): the AVX2
  no_f16c.leaf1_ecx &= ~kF16c;  // kernels convert f16 with F16C, so not even they run
  EXPECT_FALSE(features_from_cpuid(no_f16c).f16c);
  expect_choice(no_f16c, {0, false, false, false});

  CpuidRegs no_dq = skylake_sp();  // F/BW/VL without DQ: the GEMM can, the evaluator cannot
  no_dq.leaf7_ebx &= ~kAvx512dq;
  expect_choice(no_dq, {1, true, true, false});

  CpuidRegs stale = skylake_sp();  // a BF16 bit in a sub-leaf the CPU says it does not have
  stale.leaf7_1_eax = kAvx512Bf16;
  expect_choice(stale, {2, true, true, false});

  expect_choice(CpuidRegs{}, {0, false, false, false});  // not x86 / nothing readable
}

TEST(CpuFeatures, DisableRemovesOnly) {
  const CpuFeatures spr = features_from_cpuid(sapphire_rapids());
  std::string bad;
  CpuFeatures f = disable_features(spr, "avx512bf16", &bad);
  EXPECT_TRUE(bad.empty());
  EXPECT_EQ(f, features_from_cpuid(skylake_sp()));
  f = disable_features(spr, "avx512f", &bad);  // takes BW/VL/DQ/BF16 with it
  EXPECT_EQ(f, features_from_cpuid(zen2()));
  f = disable_features(features_from_cpuid(zen2()), "avx2,,fma,sse9", &bad);
  EXPECT_EQ(bad, "sse9");
  EXPECT_EQ(best_isa_level(f), 0);
  f = disable_features(features_from_cpuid(zen2()), "f16c", &bad);
  EXPECT_FALSE(f.f16c);
  EXPECT_EQ(best_isa_level(f), 0);
  EXPECT_EQ(disable_features(CpuFeatures{}, "", nullptr), CpuFeatures{});
}

// This machine: what read_cpuid() decodes agrees with the compiler's own detection.
TEST(CpuFeatures, RealCpuMatchesCompilerDetection) {
  const CpuFeatures f = features_from_cpuid(read_cpuid());
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.fma, __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(f.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(f.avx512vl, __builtin_cpu_supports("avx512vl") != 0);
  EXPECT_EQ(f.avx512dq, __builtin_cpu_supports("avx512dq") != 0);
  EXPECT_EQ(f.avx512bf16, __builtin_cpu_supports("avx512bf16") != 0);
#endif
  if (std::getenv("ALK_CPU_DISABLE") == nullptr) {
    EXPECT_EQ(cpu_features(), f);
  }
}

// This machine, through a second source: on Linux the kernel's own CPU flags
// (/proc/cpuinfo), which it clears for features whose register state the OS does not
// enable (as detection does with XCR0), must agree with what read_cpuid() decodes.
TEST(CpuFeatures, RealCpuMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (flags.empty() && std::getline(in, line))
    if (line.rfind("flags", 0) == 0 && line.find(':') != std::string::npos) flags = line.substr(line.find(':') + 1);
  if (flags.empty()) GTEST_SKIP() << "no x86 flags in /proc/cpuinfo";
  std::set<std::string> have;
  std::istringstream words(flags);
  for (std::string w; words >> w;) have.insert(w);
  const CpuFeatures f = features_from_cpuid(read_cpuid());
  SCOPED_TRACE("decoded: " + features_str(f));
  EXPECT_EQ(f.avx2, have.count("avx2") == 1);
  EXPECT_EQ(f.fma, have.count("fma") == 1);
  EXPECT_EQ(f.f16c, have.count("f16c") == 1);
  EXPECT_EQ(f.avx512f, have.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, have.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, have.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512dq, have.count("avx512dq") == 1);
  EXPECT_EQ(f.avx512bf16, have.count("avx512_bf16") == 1);
}

// Whatever the features (real or masked), the kernels' choices follow them.
TEST(CpuFeatures, ChoicesFollowTheFeatures) {
  const CpuFeatures& f = cpu_features();
  SCOPED_TRACE("features: " + features_str(f));
  const int level = best_isa_level(f);
  EXPECT_EQ(isa_supported(Isa::Avx512), level >= 2);
  EXPECT_EQ(isa_supported(Isa::Avx2), level >= 1);
  EXPECT_TRUE(isa_supported(Isa::Generic));
  const std::vector<std::string> isas = gemm_supported_isas();
  auto has = [&](const char* name) { return std::find(isas.begin(), isas.end(), name) != isas.end(); };
#if defined(__x86_64__)
  EXPECT_EQ(has("avx512"), gemm_avx512_ok(f));
  EXPECT_EQ(has("avx2"), gemm_avx2_ok(f));
#endif
  EXPECT_TRUE(has("generic"));
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.back(), "generic");
}

}  // namespace
}  // namespace alk::cpu
