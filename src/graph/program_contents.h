// Read-only access to what a compiled Program recorded, for exporters (src/webgpu/):
// the kernel list in replay order, the traced inputs, the carried state (copies a replay
// ends with) and the captured tensors. Valid once the program is traced.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "alk/compile.h"
#include "alk/kernel.h"

namespace alk {

struct ProgramContents {
  const std::vector<Kernel>* kernels = nullptr;
  const std::vector<Tensor>* inputs = nullptr;
  struct Carry {
    std::shared_ptr<Buffer> from, to;
    size_t bytes;
  };
  std::vector<Carry> carries;
  const std::map<std::string, Tensor>* captures = nullptr;
  // Random kernels: the generator offset their recorded offsets start from, and how far one
  // step moves it (a replay k steps later adds k * rng_used to each recorded offset).
  uint64_t rng_base = 0, rng_used = 0;
};

struct ProgramAccess {
  // Throws alk::Error unless p is traced (two calls made).
  static ProgramContents contents(const Program& p, Loc loc = Loc::current());
};

}  // namespace alk
