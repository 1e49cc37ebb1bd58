#include "backend/cpu/isa.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace alk::cpu {

namespace {

Isa best() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Generic;
}

Isa& current() {
  static Isa chosen = [] {
    Isa i = best();
    if (const char* want = std::getenv("ALK_ISA")) {
      Isa w = !std::strcmp(want, "avx512") ? Isa::Avx512 : !std::strcmp(want, "avx2") ? Isa::Avx2 : Isa::Generic;
      if (w <= i)
        i = w;
      else
        std::fprintf(stderr, "alk: ALK_ISA=%s is not supported by this processor; using %s\n", want, isa_name(i));
    }
    return i;
  }();
  return chosen;
}

}  // namespace

Isa isa() { return current(); }
const char* isa_name(Isa i) { return i == Isa::Avx512 ? "avx512" : i == Isa::Avx2 ? "avx2" : "generic"; }
bool isa_supported(Isa i) { return i <= best(); }
void set_isa(Isa i) {
  if (isa_supported(i))
    current() = i;
  else
    std::fprintf(stderr, "alk: %s is not supported by this processor; keeping %s\n", isa_name(i), isa_name(current()));
}

}  // namespace alk::cpu
