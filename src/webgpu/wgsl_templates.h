// Hand-written WGSL for the template ops (everything that is not a fused elementwise Map):
// one generator per op family turns a kernel's concrete shapes, strides and offsets into
// shader text with those numbers baked in as constants. Baking keeps the generators short
// and gives the shader compiler constant loop bounds; the price is one shader per distinct
// shape, which a training step has few of. Generators produce one or more passes; passes
// that need scratch memory (layer_norm's backward keeps per-row statistics) declare temps.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "alk/kernel.h"
#include "alk/op_registry.h"

namespace alk::webgpu {

// A tensor as a pass reads it: element offset inside its GPU value, shape and strides.
struct TView {
  DType dtype = DType::F32;
  Shape shape, strides;
  int64_t offset = 0;
};

// What a pass binds, in binding order.
struct Slot {
  enum Kind { Input, Output, Temp } kind;
  int index = 0;  // input k, or temp t
};

struct Pass {
  std::string source;  // entry point "main"
  std::array<uint32_t, 3> groups{1, 1, 1};
  std::vector<Slot> slots;
  std::vector<uint32_t> params;  // non-empty: a read-only storage buffer bound after the slots
  bool random = false;           // params are {seed lo, seed hi, offset lo, offset hi}: the runtime moves the offset each step
};

struct TemplatePlan {
  std::vector<Pass> passes;
  std::vector<std::pair<DType, int64_t>> temps;  // dtype, elements
};

// The passes computing k's core op (k.node) from `inputs` into a contiguous `output` of
// k.node.shape and k.node.dtype (the epilogue, if any, is the caller's). Throws alk::Error
// naming the op when it has no WGSL kernel here.
TemplatePlan template_passes(const Kernel& k, const std::vector<TView>& inputs, const TView& output);

// How the exporter writes each template op's passes (alk/op_registry.h): a traced program
// is checked against this table before its kernels are planned.
using TemplateLaunch = TemplatePlan (*)(const Kernel& k, const std::vector<TView>& inputs, const TView& output);
TemplateOpTable<TemplateLaunch>& template_ops();
// Why the exporter cannot write op ("" when it can).
std::string unsupported_reason(OpId op);

// How a dtype is stored in a WebGPU buffer: bytes for n elements (i64 narrowed to i32,
// f64 to f32, 8/16-bit types packed in u32 words; rounded up to whole words).
size_t gpu_bytes(DType t, int64_t n);
size_t gpu_elem_size(DType t);  // 0 for packed types

}  // namespace alk::webgpu
