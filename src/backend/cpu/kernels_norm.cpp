// Row-wise normalizations (softmax, log_softmax, layer_norm and its backward, rms_norm):
// the kernels are in norm_impl.inc, compiled per instruction set; this file picks one.
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"

namespace alk::cpu {

#define ALK_DECLARE_ISA(ns)                                                                                       \
  namespace ns {                                                                                                  \
  void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out); \
  void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out);                   \
  void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,           \
                           const View& out);                                                                      \
  void softmax(const View& x, int axis, bool log, const View& out);                                               \
  }
ALK_DECLARE_ISA(generic)
ALK_DECLARE_ISA(avx2)
ALK_DECLARE_ISA(avx512)
#undef ALK_DECLARE_ISA

#define ALK_BY_ISA(call)                         \
  switch (isa()) {                               \
    case Isa::Avx512: return avx512::call;       \
    case Isa::Avx2: return avx2::call;           \
    case Isa::Generic: break;                    \
  }                                              \
  return generic::call

void softmax(const View& x, int axis, bool log, const View& out) { ALK_BY_ISA(softmax(x, axis, log, out)); }

void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out) {
  ALK_BY_ISA(layer_norm(x, weight, bias, inner, eps, out));
}

void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out) {
  ALK_BY_ISA(rms_norm(x, weight, inner, eps, out));
}

void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,
                         const View& out) {
  ALK_BY_ISA(layer_norm_backward(x, weight, g, inner, eps, out));
}
#undef ALK_BY_ISA

}  // namespace alk::cpu
