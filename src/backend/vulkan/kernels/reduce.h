// Reductions and row-wise ops on Vulkan: Reduce (Sum/Max/Min/Prod over any axes, with the
// kernel's fused prologue and epilogue), ArgReduce, Softmax/LogSoftmax, LayerNorm and its
// backward, RmsNorm, Cumsum. Registered as template ops of the VulkanDevice at static-init
// time (reduce.cpp); these entry points are for tests and callers holding a Context.
//
// Every op is a pass over an iteration space of rows x elements (a Reduce's kept x reduced
// dims, the other dims x the axis, leading x normalized dims). Each tensor is described
// over that space by strides (dims that can be merged are merged first, so most kernels
// index with one or two divisions per element), and the shader is generated per op, dtype
// and merged rank: shapes, strides and offsets are push constants (a storage buffer when
// they exceed 128 bytes), so one pipeline serves every shape of that rank.
//
// Numbers: f16/bf16/f32 compute and accumulate in f32, f64 in f64 (exp and log of f64
// written out in the shader: GLSL has none on double), integers in i64. A row is reduced by one
// workgroup (each invocation folds a fixed strided subset in order, then a fixed shared
// memory tree), so results depend on the shape and the device's workgroup size only, never
// on how many groups run. A long row with few rows beside it is split into a number of
// parts fixed by its length, reduced in a second pass in order.
#pragma once
#include <string>

#include "backend/vulkan/stream.h"
#include "alk/kernel.h"

namespace alk::vk {

class Context;

// "" when the device can run k (one of the ops above), else why not.
std::string row_op_unsupported(const Context& ctx, const Kernel& k);
// Records k into enc. Throws alk::Error where row_op_unsupported is not empty.
void launch_row_op(Context& ctx, Encoder& enc, const Kernel& k);

}  // namespace alk::vk
