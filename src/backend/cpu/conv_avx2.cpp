// The depthwise convolution inner loop compiled for one instruction set (see conv_impl.inc).
#define ALK_CONV_ISA avx2
#include "backend/cpu/conv_impl.inc"
