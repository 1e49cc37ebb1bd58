// User kernels on Vulkan (alk/kernel_spec.h): the GLSL body inside alk's bindings and entry
// point (src/expr/user_kernel_source.cpp writes them), compiled by shaderc through the shader
// cache like every template kernel here, dispatched with a grid-stride loop over the count.
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "alk/kernel_spec.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

const KernelSpec& spec_of(const Kernel& k) { return *std::get<UserKernelParams>(k.node.params).spec; }

std::string user_unsupported(const Context& ctx, const Kernel& k) {
  const KernelSpec& spec = spec_of(k);
  if (spec.body_for(KernelTarget::Glsl).empty())
    return "user kernel " + spec.name + " has no GLSL body (Vulkan runs GLSL)";
  auto check_arg = [&](const KernelArg& a) -> std::string {
    if (a.dtype != DType::F32 && a.dtype != DType::I32)
      return "user kernel " + spec.name + ": GLSL bodies take f32 and i32 tensors, not " + std::string(dtype_name(a.dtype));
    if (numel(a.shape) > std::numeric_limits<uint32_t>::max()) return "a tensor of more than 2^32 elements";
    if (a.offset != 0 || !kernels::is_contiguous(a)) return "a tensor that does not start its binding (a view)";
    return "";
  };
  for (const KernelArg& a : k.inputs)
    if (std::string why = check_arg(a); !why.empty()) return why;
  if (std::string why = check_arg(k.output); !why.empty()) return why;
  if (k.inputs.size() + 2 > ctx.info().max_storage_buffers_per_stage) return "more tensors than the device binds";
  if (std::get<UserKernelParams>(k.node.params).invocations > std::numeric_limits<uint32_t>::max())
    return "more than 2^32 invocations";
  return "";
}

void user_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<UserKernelParams>(k.node.params);
  const KernelSpec& spec = *p.spec;
  if (p.invocations == 0) return;
  kernels::Launch l(ctx);
  std::vector<int> ranks;
  std::vector<const KernelArg*> args;
  for (const KernelArg& a : k.inputs) args.push_back(&a);
  args.push_back(&k.output);
  for (size_t j = 0; j < args.size(); ++j) {
    const uint32_t first = l.bind(view_arg(*args[j]), j + 1 == args.size());
    // The body indexes each tensor from its binding's start; the arena aligns every buffer
    // to the binding alignment, so only an offset view (which the front end copies) moves it.
    if (first != 0)
      alk::fail("user kernel " + spec.name, k.node.loc, "a tensor starts at element ", first,
           " of its binding on vulkan (the device's binding alignment exceeds the arena's)");
    ranks.push_back(static_cast<int>(args[j]->shape.size()));
  }
  for (const KernelArg* a : args) {
    l.u(static_cast<uint64_t>(numel(a->shape)));
    for (int64_t d : a->shape) l.u(static_cast<uint64_t>(d));
  }
  for (size_t j = 0; j < spec.attrs.size(); ++j) {
    if (spec.attrs[j].dtype == DType::F32) {
      const float f = static_cast<float>(p.attrs[j]);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      l.u(bits);
    } else if (spec.attrs[j].dtype == DType::I32) {
      l.i(static_cast<int64_t>(p.attrs[j]));
    } else {
      alk::fail("user kernel " + spec.name, k.node.loc, "attribute ", spec.attrs[j].name, ": GLSL bodies take f32 and i32 attributes");
    }
  }
  l.u(static_cast<uint64_t>(p.invocations));
  const std::string source = user_kernel_source(spec, KernelTarget::Glsl, ranks);
  try {
    (void)ctx.shaders().spirv(source);  // compiled (and cached) here, so an error names the body's line
  } catch (const Error& e) {
    fail_user_kernel_compile(spec, KernelTarget::Glsl, e.what(), k.node.loc);
  }
  const int64_t groups = (p.invocations + spec.workgroup_size - 1) / spec.workgroup_size;
  l.dispatch(enc, source, static_cast<uint32_t>(std::clamp<int64_t>(groups, 1, 65535)));
}

[[maybe_unused]] const bool registered =
    (template_ops().add(OpId::UserKernel, kF32DType | kIntDType, TemplateOp{user_unsupported, user_launch},
                        "the GLSL body; f32 and i32 tensors"),
     true);

}  // namespace
}  // namespace alk::vk
