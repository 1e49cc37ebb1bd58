// The expression evaluator compiled for one instruction set (see eval_impl.inc).
#define ALK_EVAL_ISA avx512
#include "backend/cpu/eval_impl.inc"
