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

enum class DTypeRule : uint8_t { Same, Float, Compare, Logical, Select, Integer };
enum class Domain : uint8_t { Any, Positive, NonZero, Frac };

// Ops whose kernels are hand-written per backend (or that are not kernels at all:
// Buffer is realized data, Const a number, Map a generated elementwise expression).
// X(name, differentiable, writes_over_input0): differentiable ops must have a gradcheck case
// (tests/ops); writes_over_input0: every backend's kernel computes each output element from
// the same element of input 0 (and per-row values), reading it first, so the scheduler may
// give the output input 0's memory when input 0 dies there (the cross-entropy backward's
// gradient takes the logits' place). Map kernels have their own, general rule.
#define ALK_TEMPLATE_OPS(X)                                                                      \
  X(Buffer, false, false) X(Const, false, false) X(Map, false, false) X(Cast, true, false)       \
  X(Reduce, true, false) X(ArgReduce, false, false) X(Matmul, true, false)                       \
  X(Softmax, true, false) X(LogSoftmax, true, false) X(LayerNorm, true, false)                   \
  X(RmsNorm, true, false) X(Gather, true, false) X(IndexSelect, true, false)                     \
  X(ScatterAdd, true, false) X(OneHot, false, false) X(Tri, true, false) X(Cumsum, true, false)  \
  X(Pad, true, false) X(Concat, true, false) X(SliceScatter, true, false)                        \
  X(Random, false, false) X(Attention, true, false) X(AttentionBackward, false, false)           \
  X(Unfold, true, false) X(Fold, true, false) X(LayerNormBackward, false, false)                 \
  X(ToDevice, false, false) X(CrossEntropy, true, false) X(CrossEntropyBackward, false, true)    \
  X(Conv2d, true, false) X(HostCall, false, false) X(KvCacheWrite, false, true)                 \
  X(DecodeAttention, false, false) X(SampleTokens, false, false) X(UserKernel, false, false)

enum class OpId : uint16_t {
#define ALK_EW(name, ...) name,
#include "alk/elementwise.def"
#undef ALK_EW
#define ALK_X(name, differentiable, writes_over_input0) name,
  ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
};

inline constexpr int kNumElementwiseOps = 0
#define ALK_EW(name, ...) +1
#include "alk/elementwise.def"
#undef ALK_EW
    ;
inline constexpr int kNumOps = kNumElementwiseOps
#define ALK_X(name, differentiable, writes_over_input0) +1
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
bool op_writes_over_input0(OpId op);
// The template ops a differentiable op's backward rule launches besides Map kernels (what a
// backend must run for the op's gradient: `alk ops` marks the backward of an op runnable
// where all of them run). tests/ops/test_gradcheck.cpp checks it against what each op's
// backward runs on the CPU. Empty for ops without a gradient.
const std::vector<OpId>& op_backward_uses(OpId op);  // the template-op list's third column (false for elementwise ops)
bool is_elementwise(OpId op);
const ElementwiseEntry& elementwise_entry(OpId op);
const std::vector<ElementwiseEntry>& elementwise_table();
const ElementwiseEntry* find_elementwise(std::string_view name);

}  // namespace alk
