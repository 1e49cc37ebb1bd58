// Philox words compiled for one instruction set (see random_impl.inc).
#define ALK_RANDOM_ISA avx512
#include "backend/cpu/random_impl.inc"
