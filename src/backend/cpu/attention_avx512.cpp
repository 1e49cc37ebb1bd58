// The fused attention kernels compiled for one instruction set (see attention_impl.inc).
#define ALK_ATTN_ISA avx512
#include "backend/cpu/attention_impl.inc"
