// Picks the evaluator compiled for the instruction set in use (isa.h).
#include "backend/cpu/eval.h"

#include "backend/cpu/isa.h"

namespace alk::cpu {

#define ALK_DECLARE_ISA(ns)                                                                                   \
  namespace ns {                                                                                              \
  void eval_map(const expr::Expr& e, std::span<const View> inputs, const View& out);                          \
  void eval_reduce(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape,      \
                   const std::vector<int>& axes, Reduction op, const View& out);                             \
  }
ALK_DECLARE_ISA(generic)
ALK_DECLARE_ISA(avx2)
ALK_DECLARE_ISA(avx512)
#undef ALK_DECLARE_ISA

void eval_map(const expr::Expr& e, std::span<const View> inputs, const View& out) {
  switch (isa()) {
    case Isa::Avx512: return avx512::eval_map(e, inputs, out);
    case Isa::Avx2: return avx2::eval_map(e, inputs, out);
    case Isa::Generic: break;
  }
  generic::eval_map(e, inputs, out);
}

void eval_reduce(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape,
                 const std::vector<int>& axes, Reduction op, const View& out) {
  switch (isa()) {
    case Isa::Avx512: return avx512::eval_reduce(e, inputs, shape, axes, op, out);
    case Isa::Avx2: return avx2::eval_reduce(e, inputs, shape, axes, op, out);
    case Isa::Generic: break;
  }
  generic::eval_reduce(e, inputs, shape, axes, op, out);
}

}  // namespace alk::cpu
