// The CUDA backend's template-op table (alk/op_registry.h): each file of ops/ registers the
// ops of its kernel family at static-initialization time, with the dtype families they run and
// a note for their limits, or refuses an op with the reason; CudaDevice::supports() and its
// launches go through this table, nothing else. Map kernels (the elementwise ops, Cast) are the
// device's own (ops/map.cpp states their dtypes with coverage().set_elementwise).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "alk/op_registry.h"
#include "backend/cuda/launch.h"

namespace alk::cuda {

struct TemplateOp {
  // "" when the kernels run k, else why not (supports() is false then); nullptr: every k.
  std::string (*unsupported)(const Kernel& k) = nullptr;
  // Queues k's op (not its epilogue: the device runs that after, as a Map kernel) into out,
  // which has the node's dtype and shape.
  void (*launch)(Context& ctx, const Kernel& k, const Arg& out) = nullptr;
  // Queues k's op with its epilogue applied in the op's own store, into k's output; false,
  // having queued nothing, where these kernels do not take that epilogue. nullptr: never.
  bool (*launch_with_epilogue)(Context& ctx, const Kernel& k, const Arg& out) = nullptr;
};

TemplateOpTable<TemplateOp>& template_ops();

// Sample sources of a kernel family, as (what, CUDA C): every template kernel for each dtype
// family it serves. A family's file registers its list at static-initialization time;
// template_sources() (cuda_device.h) returns them all, and the tests compile them with NVRTC.
using SampleSources = std::vector<std::pair<std::string, std::string>>;
bool add_sample_sources(void (*samples)(SampleSources& out));

}  // namespace alk::cuda
