// Row-wise normalizations (softmax, log_softmax, layer_norm and its backward, rms_norm):
// the kernels are in norm_impl.inc, compiled per instruction set; this file picks one.
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"

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

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  auto softmax_launch = [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<AxisParams>(k.node.params);
    softmax(in[0], p.axis, k.node.op == OpId::LogSoftmax, out);
  };
  ops.add(OpId::Softmax, kFloatDTypes, softmax_launch);
  ops.add(OpId::LogSoftmax, kFloatDTypes, softmax_launch);
  ops.add(OpId::LayerNorm, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<NormParams>(k.node.params);
    layer_norm(in[0], &in[1], &in[2], p.inner, p.eps, out);
  });
  ops.add(OpId::LayerNormBackward, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<NormParams>(k.node.params);
    layer_norm_backward(in[0], in[1], in[2], p.inner, p.eps, out);
  });
  ops.add(OpId::RmsNorm, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<NormParams>(k.node.params);
    rms_norm(in[0], &in[1], p.inner, p.eps, out);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
