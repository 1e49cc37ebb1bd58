// The scheduler: lazy nodes -> a list of kernels with a memory plan.
//   1. collect the unrealized graph under the targets, in topological order;
//   2. find which nodes someone outside the graph still holds (they must be stored);
//   3. fuse: an elementwise node used once, through an identity view, is inlined into
//      its consumer's expression (a Map, or the prologue of a Reduce); a Map that
//      consumes a Reduce or Matmul used once becomes that kernel's epilogue;
//   4. plan memory: stored nodes get their own buffers; every other intermediate gets
//      an offset in one arena, reusing space by liveness (and in place where a Map's
//      input dies at that Map);
//   5. hand each kernel to the device.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "expr/emit.h"
#include "graph/graph.h"

namespace alk {

// A strided window on memory as a kernel sees it.
struct KernelArg {
  std::shared_ptr<Buffer> buffer;  // keeps the memory alive
  size_t byte_offset = 0;          // where this tensor starts inside buffer (arena slices)
  DType dtype = DType::F32;
  Shape shape, strides;
  int64_t offset = 0;  // in elements, on top of byte_offset
  void* data() const { return static_cast<char*>(buffer->data) + byte_offset; }
};

// What a kernel computes, copied out of its node so a recorded kernel can be replayed
// after the graph it came from is gone (alk::compile).
struct KernelOp {
  OpId op = OpId::Map;
  Params params;
  Shape shape, in_shape;  // the op's output shape; a Reduce's input shape
  DType dtype = DType::F32;
  Loc loc;
  std::string name;  // the user-facing op, when a composite built the node
};

struct Kernel {
  KernelOp node;        // the op (for Map: the root of the fused expression)
  OpId op = OpId::Map;  // Map for fused elementwise kernels, else the template op
  std::vector<KernelArg> inputs;
  KernelArg output;
  // Map: the fused expression over inputs. Reduce: the prologue computing the reduced
  // value from inputs (shape = the reduce input's shape).
  std::optional<expr::Expr> expr;
  // Reduce/Matmul epilogue: Input slot 0 is the op's result; slot k > 0 is epilogue_inputs[k-1].
  std::optional<expr::Expr> epilogue;
  std::vector<KernelArg> epilogue_inputs;
  uint64_t source_key = 0;  // Map: the kernel cache's key (expression + dtypes fix the source)
};

struct ScheduleStats {
  int64_t nodes = 0, kernels = 0, fused_nodes = 0;
  int64_t planned_bytes = 0;  // arena + stored outputs
  int64_t naive_bytes = 0;    // one buffer per node
  int64_t arena_bytes = 0;
  int64_t in_place = 0;
};
// Statistics of the most recent realize on this thread (for ALK_DEBUG=schedule and tests).
const ScheduleStats& last_schedule_stats();
// ALK_DEBUG=timing: kernel time per op, summed and printed at exit (replays count too).
bool kernel_timing_enabled();
void record_kernel_time(const Kernel& k, double seconds);
class Device;
// Runs k on dev, timed when `timing` (the scheduler's and compiled replays' one way to launch).
void launch(Device& dev, const Kernel& k, bool timing);

// The fused elementwise kernel the scheduler would build for target (nothing runs), or
// nothing when the target is realized or not elementwise.
std::optional<std::pair<expr::Expr, expr::MapSignature>> fused_map_kernel(TensorImpl* target);

}  // namespace alk
