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
