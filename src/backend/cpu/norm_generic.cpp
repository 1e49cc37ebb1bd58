// layer_norm and rms_norm compiled for one instruction set (see norm_impl.inc).
#define ALK_NORM_ISA generic
#include "backend/cpu/norm_impl.inc"
