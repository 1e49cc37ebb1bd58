// The Vulkan backend as a runtime Device (include/alk/device.h): a thin adapter over the
// core in this directory. Devices are registered as "vulkan:N" (context.h says the order);
// nothing is opened until a device is used.
//
// What runs: fused elementwise (Map) kernels from the GLSL emitter, and the template ops
// registered below. supports() is false for every other kernel, so the scheduler keeps
// them off this device (or says why it cannot run them).
//
// Adding a template op (GEMM, softmax, ...): write one GLSL compute shader for it and
// add a TemplateOp for its OpId to the backend's table (template_ops().add, at static-init
// time in the op's own .cpp file under src/backend/vulkan/kernels/; alk/op_registry.h), or
// refuse it there with the reason. Convention for the shader:
//   - set 0, bindings 0..N-1: storage buffers, the kernel's inputs in order, then its output;
//   - every tensor binds through bind_view() (map_kernel.h): at an aligned offset, with
//     the element offset of its first element passed to the shader (like offset[] of Map
//     kernels) -- never assume a tensor starts at its binding;
//   - sizes, strides and those offsets in one push-constant block (std430, at most 128
//     bytes, which every device offers), else in a params storage buffer bound last;
//   - the workgroup size is the shader's own; the launch gives the group counts.
// ctx.pipeline(source, bindings, push_bytes) compiles (cached by source, memory and disk)
// and enc.dispatch(...) records it with barriers where needed.
#pragma once
#include <memory>

#include "alk/op_registry.h"
#include "backend/vulkan/map_kernel.h"
#include "runtime/device.h"

namespace alk::vk {

// The allocation and layout behind a KernelArg on a Vulkan device.
ViewArg view_arg(const KernelArg& a);

struct TemplateOp {
  // "" when the device can run k, else why not.
  std::string (*unsupported)(const Context& ctx, const Kernel& k) = nullptr;
  // Records k into enc (the device's stream, or a recording).
  void (*launch)(Context& ctx, Encoder& enc, const Kernel& k) = nullptr;
};
// How this backend runs each template op, or why it does not (alk/op_registry.h).
TemplateOpTable<TemplateOp>& template_ops();

// Why device `index` cannot run k ("" when it can): what supports() reports.
std::string unsupported_reason(int index, const Kernel& k);

}  // namespace alk::vk
