// The process-wide random generator's state (seed, offset), behind one lock: the public
// calls (manual_seed, random_seed, random_offset, set_random_state, the random creation
// functions) and this one are safe from any thread (docs/determinism.md: the numbers a
// thread draws then depend on how the threads interleave). Declared here for the graph
// (alk::compile's replays move the offset on); defined with the state in src/ops/create.cpp.
#pragma once
#include <cstdint>

namespace alk {

// Moves the offset on by n draws and returns where it was, in one step: what a replayed
// step that draws n numbers uses, so two threads never take the same range.
uint64_t advance_random_offset(uint64_t n);

}  // namespace alk
