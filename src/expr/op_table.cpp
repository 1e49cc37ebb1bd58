#include "alk/op_table.h"

#include <sstream>

namespace alk {

namespace {

std::vector<std::string> split_names(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

constexpr std::string_view kNames[] = {
#define ALK_EW(name, ...) #name,
#include "alk/elementwise.def"
#undef ALK_EW
#define ALK_X(name, differentiable, writes_over_input0) #name,
    ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
};
static_assert(std::size(kNames) == kNumOps, "every op needs a name");

}  // namespace

bool ElementwiseEntry::differentiable() const {
  for (auto b : backward)
    if (!b.empty()) return true;
  return false;
}

std::string_view op_name(OpId op) { return kNames[static_cast<int>(op)]; }
bool op_differentiable(OpId op) {
  static constexpr bool kTemplate[] = {
#define ALK_X(name, differentiable, writes_over_input0) differentiable,
      ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
  };
  if (is_elementwise(op)) return elementwise_entry(op).differentiable();
  return kTemplate[static_cast<int>(op) - kNumElementwiseOps];
}

const std::vector<OpId>& op_backward_uses(OpId op) {
  static const std::vector<OpId> none;
  if (!op_differentiable(op)) return none;
  // Broadcast operands get their gradients summed back (a Reduce); elementwise rules are Maps.
  static const std::vector<OpId> reduce{OpId::Reduce};
  if (is_elementwise(op)) return reduce;
  using V = std::vector<OpId>;
  static const std::vector<V> uses = [] {
    std::vector<V> u(static_cast<size_t>(kNumOps));
    auto set = [&u](OpId o, V v) { u[static_cast<size_t>(o)] = std::move(v); };
    set(OpId::Cast, {});
    set(OpId::Reduce, {OpId::Reduce});
    set(OpId::Matmul, {OpId::Matmul, OpId::Reduce});
    set(OpId::Softmax, {OpId::Softmax, OpId::Reduce});
    set(OpId::LogSoftmax, {OpId::LogSoftmax, OpId::Reduce});
    set(OpId::LayerNorm, {OpId::LayerNormBackward, OpId::Reduce});
    set(OpId::RmsNorm, {OpId::Reduce});
    set(OpId::Gather, {OpId::ScatterAdd});
    set(OpId::IndexSelect, {OpId::ScatterAdd});
    set(OpId::ScatterAdd, {OpId::Gather});
    set(OpId::Tri, {OpId::Tri});
    set(OpId::Cumsum, {OpId::Cumsum});
    set(OpId::Pad, {OpId::Pad});
    set(OpId::Concat, {});
    set(OpId::SliceScatter, {OpId::SliceScatter});
    set(OpId::Attention, {OpId::AttentionBackward});
    set(OpId::Unfold, {OpId::Fold});
    set(OpId::Fold, {OpId::Unfold});
    set(OpId::Conv2d, {OpId::Unfold, OpId::Fold, OpId::Matmul, OpId::Reduce});
    set(OpId::CrossEntropy, {OpId::CrossEntropyBackward});
    return u;
  }();
  return uses[static_cast<size_t>(op)];
}

bool op_writes_over_input0(OpId op) {
  static constexpr bool kTemplate[] = {
#define ALK_X(name, differentiable, writes_over_input0) writes_over_input0,
      ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
  };
  return !is_elementwise(op) && kTemplate[static_cast<int>(op) - kNumElementwiseOps];
}

bool is_elementwise(OpId op) { return static_cast<int>(op) < kNumElementwiseOps; }

const std::vector<ElementwiseEntry>& elementwise_table() {
  static const std::vector<ElementwiseEntry> table = {
#define ALK_EW(name, arity, inputs, rule, domain, fwd, d0, d1, d2) \
  {OpId::name, #name, arity, split_names(inputs), DTypeRule::rule, Domain::domain, fwd, {d0, d1, d2}},
#include "alk/elementwise.def"
#undef ALK_EW
  };
  return table;
}

const ElementwiseEntry& elementwise_entry(OpId op) { return elementwise_table()[static_cast<size_t>(op)]; }

const ElementwiseEntry* find_elementwise(std::string_view name) {
  for (const auto& e : elementwise_table())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace alk
