// Which instruction set the CPU kernels use: the best the processor has, or the one
// ALK_ISA names (avx512, avx2, generic) when the processor has it. Kernels compiled for
// several ISAs (eval_*.cpp) dispatch on this.
#pragma once

namespace alk::cpu {

enum class Isa { Generic, Avx2, Avx512 };
Isa isa();
const char* isa_name(Isa i);
bool isa_supported(Isa i);
void set_isa(Isa i);  // for tests; ignored (with a note) if the processor lacks it

}  // namespace alk::cpu
