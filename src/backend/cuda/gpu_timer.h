// ALK_DEBUG=timing on CUDA: the GPU time of each template op or kernel, from events around it
// (the scheduler's own table measures host time to completion, launch and synchronization
// included), by op and shapes, printed at exit. Eager launches only: a replayed graph is one launch.
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/context.h"

namespace alk::cuda {

// GPU events around what is enqueued between its construction (from the next launch on:
// Context::time_next_launch) and add(), which waits for the stop event and adds the time to
// the table under `name`, counted `calls` times. Without ALK_DEBUG=timing it does nothing.
class GpuTimer {
 public:
  explicit GpuTimer(Context& c);
  ~GpuTimer();
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void add(Context& c, const std::string& name, int64_t calls);

 private:
  CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace alk::cuda
