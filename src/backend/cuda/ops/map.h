// Map kernels (the elementwise ops and casts, from the CUDA C emitter, src/expr/emit_cuda.cpp):
// one launch per kernel, or one per run of independent kernels of one source (an optimizer
// step's per-parameter updates: multi-tensor launches). The device runs them; the epilogue of
// a template op whose kernels cannot store it runs as one over the op's value.
#pragma once
#include <optional>
#include <vector>

#include "backend/cuda/launch.h"
#include "backend/cuda/template_ops.h"
#include "expr/emit.h"

namespace alk::cuda {

// extra: the kernel's further outputs (Kernel::extra_outputs), contiguous over out's shape.
struct ExtraArg {
  Arg arg;
  expr::Expr expr;
};

void launch_map(Context& ctx, const expr::Expr& e, const std::vector<Arg>& in, const Arg& out,
                const std::vector<ExtraArg>& extra = {});
// How the device runs a Map kernel k (its expression over its inputs into out, and its extra
// outputs beside it), in the table's terms: Map is not an entry of template_ops().
const TemplateOp& map_kernels();

// ---- multi-tensor Map launches ----
// An optimizer step is the same few elementwise kernels once per parameter; the scheduler
// places them side by side (batch_independent_maps in src/graph/schedule.cpp). A run of such
// kernels - one source, contiguous or single-value operands, none reading what another
// writes - becomes one launch per up to ~4 KB of member table (PyTorch's multi_tensor_apply):
// 148 parameters' t/m/v/p updates in ~10 launches instead of ~600.
struct GroupOperand {
  CUdeviceptr ptr = 0;  // where the member's range starts
  size_t bytes = 0;     // what it reads or writes from there
  bool uniform = false;
};
struct GroupMember {
  std::vector<GroupOperand> in;
  GroupOperand out;
  int64_t n = 0;
};

// The member form of a Map kernel, if it has one: every operand contiguous in the output's
// order or a single value (all strides 0 over the dims that are not 1), under 2^31 elements.
std::optional<GroupMember> group_member(const Kernel& k);
// True when b's operands neither write what a reads or writes nor read what a writes
// (a member reading and writing its own range, as an in-place update does, is fine).
bool independent(const GroupMember& a, const GroupMember& b);
void launch_map_group(Context& ctx, const expr::Expr& e, const expr::MapSignature& sig,
                      const std::vector<GroupMember>& members);

}  // namespace alk::cuda
