// The depthwise convolution inner loop compiled for one instruction set (see conv_impl.inc).
#define ALK_CONV_ISA avx512
#include "backend/cpu/conv_impl.inc"
