// Out-of-range indices on the device (gather, index_select, scatter_add, one_hot and the
// embedding built on index_select). The CPU validates every index before it touches the
// output and throws at once; a GPU kernel cannot throw, so Vulkan index kernels
//   - never read or write outside their tensors: a bad index is clamped (a read) or
//     skipped (a write), so the output holds garbage but memory stays intact, and
//   - report the bad index in a small flag buffer of the Context, which the device reads
//     at the next synchronize() or download() and turns into the alk::Error the CPU
//     raises (same op name, message and the caller's file:line from Kernel::node.loc).
//
// The flag buffer is 4 words: [0] the launch id of the failing kernel (0: none), [1] the
// bad index's position (row-major, in the index tensor), [2..3] its value (i64, lo/hi).
// A kernel claims it with atomicCompSwap(word 0, 0, launch id), so the first kernel in
// stream order that fails is the one reported (every index kernel writes the flag, so
// the stream orders them with barriers). Within one kernel, the first invocation to find
// a bad index wins: with several bad indices the CPU names the first in row-major order,
// the device any one of them.
//
// Launch ids name an IndexLaunch (op, loc, the valid size, dim) in a registry. Launches
// recorded into a Recording (alk::compile) are kept for the process, since a replay may
// fail at any later time; stream launches are forgotten at the next clean check.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "alk/error.h"
#include "backend/vulkan/stream.h"

namespace alk::vk {

class Context;

struct IndexLaunch {
  std::string op;    // as the CPU names it: "gather", "index_select", "embedding", ...
  Loc loc;           // the caller's file:line
  int64_t size = 0;  // valid range [0, size)
  int64_t dim = 0;   // the dim the message names
  std::string what = "index";  // "index", or "class id" (one_hot)
};

class IndexErrors {
 public:
  explicit IndexErrors(Context& ctx);
  // The registry of `ctx` (one per Context, created on first use).
  static IndexErrors& of(Context& ctx);
  // Registers a launch about to be recorded into `enc`; returns its id (never 0).
  uint32_t add(IndexLaunch launch, const Encoder& enc);
  // The flag buffer, bound (writable) to every index kernel.
  Binding binding() const { return Binding{flag_, 0, 16, true}; }
  // Reads the flag when an index kernel may have run since the last check (waiting for
  // it); when set, clears it and throws the launch's alk::Error.
  void check();

 private:
  Context& ctx_;
  std::shared_ptr<Allocation> flag_;
  std::mutex mutex_;
  std::map<uint32_t, IndexLaunch> launches_;
  std::set<uint32_t> recorded_ids_;
  uint32_t next_ = 1;
  bool pending_ = false;  // a stream launch since the last check
  size_t recorded_ = 0;   // launches kept for recordings (their replays are checked too)
};

// What VulkanDevice calls after synchronize() and download(): IndexErrors::of(ctx).check()
// when the context has ever run an index kernel (cheap otherwise).
void check_index_errors(Context& ctx);

}  // namespace alk::vk
