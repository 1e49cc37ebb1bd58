// The recorder behind alk::compile: while a trace is active, the scheduler appends every
// kernel it runs, and Tensor::assign_ notes the tensors a step carries forward.
#pragma once
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/schedule.h"

namespace alk {

struct TraceRecorder {
  std::vector<Kernel> kernels;
  struct Assigned {
    std::shared_ptr<TensorImpl> impl;
    std::shared_ptr<Node> before;  // the realized value the step started from
    Shape strides;
    int64_t offset;
  };
  std::vector<Assigned> assigned;  // the first assign_ of each tensor realized before the step
  std::unordered_set<const TensorImpl*> seen;
  // Buffers the step's own kernels wrote: a tensor whose value is one of them was made by
  // the step (a gradient), so an assign_ to it is not state the step carries forward.
  std::unordered_set<const Buffer*> produced;
  int64_t held_bytes = 0, naive_bytes = 0;  // summed over the step's schedules
  // The largest arena buffer per device so far. A replay runs the schedules one after the
  // other and an arena holds only what dies inside its schedule, so a later schedule's
  // arena reuses this buffer when it fits: the step holds the largest arena, not their sum.
  std::unordered_map<const Device*, std::shared_ptr<Buffer>> arenas;
};

// The active recorder of this thread (null when not tracing).
TraceRecorder*& active_trace();

}  // namespace alk
