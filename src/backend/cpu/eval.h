// The CPU's elementwise engine: it evaluates a fused expression (expr::Expr) directly,
// a block of elements at a time, one tight loop per IR node over the block. There is
// no per-op C++ kernel: adding an op to the table needs nothing here. An interpreter
// first: no compiler needed at run time, no start-up latency, and with 256-element
// blocks the dispatch cost is paid once per node per block. Long chains over many
// elements then get a compiled body (jit.h) that runs all nodes in one loop and
// computes the same bits (docs/architecture.md has the numbers).
#pragma once
#include <span>

#include "backend/cpu/view.h"
#include "alk/expr.h"

namespace alk::cpu {

inline constexpr int kBlock = 256;

// out[i] = e(inputs[0][i], inputs[1][i], ...) over out's shape; every input has out's
// shape (broadcast inputs carry 0 strides). out is contiguous.
void eval_map(const expr::Expr& e, std::span<const View> inputs, const View& out);

enum class Reduction { Sum, Max, Min, Prod };
// out (keepdim shape: reduced axes have size 1) = reduction over `axes` of e evaluated
// over `shape` (the inputs' common shape).
void eval_reduce(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape,
                 const std::vector<int>& axes, Reduction op, const View& out);

}  // namespace alk::cpu
