// Fused attention on the CPU: picks the kernels compiled for the instruction set in use
// (isa.h). The kernels themselves are in attention_impl.inc, compiled once per ISA by
// attention_generic.cpp, attention_avx2.cpp and attention_avx512.cpp.
#include "alk/error.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"

namespace alk::cpu {

#define ALK_DECLARE_ISA(ns)                                                                                      \
  namespace ns {                                                                                                 \
  void attention_forward(const View& q, const View& k, const View& v, bool causal, double scale, const View& out); \
  void attention_backward(const View& q, const View& k, const View& v, const View& fwd, const View& d_out,        \
                          bool causal, double scale, const View& out);                                          \
  }
ALK_DECLARE_ISA(generic)
ALK_DECLARE_ISA(avx2)
ALK_DECLARE_ISA(avx512)
#undef ALK_DECLARE_ISA

namespace {

void check_inputs(const View& q, const View& k, const View& v) {
  // The op (src/ops/attention.cpp) guarantees these; a violation is a bug there. q, k, v
  // are [..., T or S, D] with equal leading (batch) dims, any strides.
  const size_t r = q.shape.size();
  bool ok = r >= 3 && k.shape.size() == r && v.shape.size() == r && k.shape == v.shape && q.shape[r - 1] == k.shape[r - 1] &&
            q.dtype == k.dtype && q.dtype == v.dtype;
  for (size_t d = 0; ok && d + 2 < r; ++d) ok = q.shape[d] == k.shape[d];
  if (!ok) throw Error("scaled_dot_product_attention", "internal: inconsistent kernel inputs", Loc::current());
}

}  // namespace

void attention_forward(const View& q, const View& k, const View& v, bool causal, double scale, const View& out) {
  check_inputs(q, k, v);
  switch (isa()) {
    case Isa::Avx512: return avx512::attention_forward(q, k, v, causal, scale, out);
    case Isa::Avx2: return avx2::attention_forward(q, k, v, causal, scale, out);
    case Isa::Generic: break;
  }
  generic::attention_forward(q, k, v, causal, scale, out);
}

void attention_backward(const View& q, const View& k, const View& v, const View& fwd, const View& d_out, bool causal,
                        double scale, const View& out) {
  check_inputs(q, k, v);
  switch (isa()) {
    case Isa::Avx512: return avx512::attention_backward(q, k, v, fwd, d_out, causal, scale, out);
    case Isa::Avx2: return avx2::attention_backward(q, k, v, fwd, d_out, causal, scale, out);
    case Isa::Generic: break;
  }
  generic::attention_backward(q, k, v, fwd, d_out, causal, scale, out);
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  // The layout with the logsumexps apart (out_heads > 0) is made only for devices with
  // "attention_16bit": the CPU kernels pack each row's logsumexp.
  ops.add(OpId::Attention, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<AttentionParams>(k.node.params);
    check(p.out_heads == 0, "scaled_dot_product_attention", k.node.loc, "the CPU kernels pack each row's logsumexp");
    attention_forward(in[0], in[1], in[2], p.causal, p.scale, out);
  }, "rows with their logsumexp packed (out_heads 0)");
  ops.add(OpId::AttentionBackward, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    const auto& p = std::get<AttentionParams>(k.node.params);
    check(p.out_heads == 0, "scaled_dot_product_attention", k.node.loc, "the CPU kernels pack each row's logsumexp");
    attention_backward(in[0], in[1], in[2], in[3], in[4], p.causal, p.scale, out);
  }, "rows with their logsumexp packed (out_heads 0)");
  return true;
}();
}  // namespace

}  // namespace alk::cpu
