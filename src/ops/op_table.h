// The op table as data: the OpId enum and names are generated from the elementwise
// table (elementwise.def) and the template-op list below, so there is no second list
// to keep in step.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace alk {

enum class DTypeRule : uint8_t { Same, Float, Compare, Logical, Select };
enum class Domain : uint8_t { Any, Positive, NonZero, Frac };

// Ops whose kernels are hand-written per backend (or that are not kernels at all:
// Buffer is realized data, Const a number, Map a generated elementwise expression).
// X(name, differentiable): differentiable ops must have a gradcheck case (tests/ops).
#define ALK_TEMPLATE_OPS(X)                                                                          \
  X(Buffer, false) X(Const, false) X(Map, false) X(Cast, true) X(Reduce, true) X(ArgReduce, false)    \
  X(Matmul, true) X(Softmax, true) X(LogSoftmax, true) X(LayerNorm, true) X(RmsNorm, true)           \
  X(Gather, true) X(IndexSelect, true) X(ScatterAdd, true) X(OneHot, false) X(Tri, true)             \
  X(Cumsum, true) X(Pad, true) X(Concat, true) X(SliceScatter, true) X(Random, false)              \
  X(Attention, true) X(AttentionBackward, false) X(Unfold, true) X(Fold, true)                     \
  X(LayerNormBackward, false) X(ToDevice, false) X(CrossEntropy, true) X(CrossEntropyBackward, false)  \
  X(Conv2d, true)                                                                                    \
  X(HostCall, false)

enum class OpId : uint16_t {
#define ALK_EW(name, ...) name,
#include "ops/elementwise.def"
#undef ALK_EW
#define ALK_X(name, differentiable) name,
  ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
};

inline constexpr int kNumElementwiseOps = 0
#define ALK_EW(name, ...) +1
#include "ops/elementwise.def"
#undef ALK_EW
    ;
inline constexpr int kNumOps = kNumElementwiseOps
#define ALK_X(name, differentiable) +1
    ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
    ;

struct ElementwiseEntry {
  OpId op;
  std::string_view name;
  int arity;
  std::vector<std::string> inputs;  // operand names used by the expressions
  DTypeRule rule;
  Domain domain;
  std::string_view forward;
  std::array<std::string_view, 3> backward;  // "" = no gradient for that operand
  bool differentiable() const;               // any operand has a gradient
};

std::string_view op_name(OpId op);
// Whether the op has a backward rule (elementwise: any operand has a gradient expression).
bool op_differentiable(OpId op);
bool is_elementwise(OpId op);
const ElementwiseEntry& elementwise_entry(OpId op);
const std::vector<ElementwiseEntry>& elementwise_table();
const ElementwiseEntry* find_elementwise(std::string_view name);

}  // namespace alk
