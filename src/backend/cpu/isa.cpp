#include "backend/cpu/isa.h"

#include "backend/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace alk::cpu {

namespace {

// Detection and the choice live in cpu_features.h, where they are tested on synthetic CPUs.
Isa best() {
  const int level = best_isa_level(cpu_features());
  return level == 2 ? Isa::Avx512 : level == 1 ? Isa::Avx2 : Isa::Generic;
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
