// The scheduler: lazy nodes -> a list of kernels with a memory plan.
//   1. collect the unrealized graph under the targets, in topological order;
//   2. find which nodes someone outside the graph still holds (they must be stored);
//   3. fuse: an elementwise node used once, through an identity view, is inlined into
//      its consumer's expression (a Map, or the prologue of a Reduce); a Map that
//      consumes a Reduce or Matmul used once becomes that kernel's epilogue;
//   4. plan memory: stored nodes get their own buffers; every other intermediate gets
//      an offset in one arena, reusing space by liveness (and in place where a Map's
//      input dies at that Map);
//   5. hand each kernel to its node's device (enqueued: the host waits only where it reads).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "expr/emit.h"
#include "graph/graph.h"
#include "runtime/device.h"

namespace alk {

struct ScheduleStats {
  int64_t nodes = 0, kernels = 0, fused_nodes = 0;
  int64_t planned_bytes = 0;  // arena + stored outputs
  int64_t naive_bytes = 0;    // one buffer per node
  int64_t arena_bytes = 0;
  int64_t in_place = 0;
  int64_t batched = 0;  // Map kernels placed side by side with others of their source (multi-tensor runs)
  int64_t extra_outputs = 0;  // Map results stored by another Map kernel's pass (merge_extra_outputs)
};
// Statistics of the most recent realize on this thread (for ALK_DEBUG=schedule and tests).
const ScheduleStats& last_schedule_stats();
// ALK_DEBUG=timing: kernel time per op, summed and printed at exit (replays count too).
bool kernel_timing_enabled();
void record_kernel_time(const Kernel& k, double seconds);
// Runs k on the device that holds its output (a ToDevice kernel copies between its input's
// device and its output's), timed when `timing`: the scheduler's and compiled replays' one
// way to launch. `prepared` (from the device's prepare) skips the compile-cache lookup.
void launch(const Kernel& k, bool timing, PreparedKernel* prepared = nullptr);

// The fused elementwise kernel the scheduler would build for target (nothing runs), or
// nothing when the target is realized or not elementwise.
std::optional<std::pair<expr::Expr, expr::MapSignature>> fused_map_kernel(TensorImpl* target);

}  // namespace alk
