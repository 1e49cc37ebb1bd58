// The CPU's template-op table (alk/op_registry.h): each kernels_*.cpp file registers the ops
// whose kernels it holds; CpuDevice::launch runs them through this table, nothing else.
#pragma once
#include <vector>

#include "alk/op_registry.h"
#include "backend/cpu/view.h"
#include "alk/kernel.h"

namespace alk::cpu {

// Runs kernel k's op (not its epilogue: the device applies that after) over the inputs'
// views into out.
using TemplateLaunch = void (*)(const Kernel& k, const std::vector<View>& in, const View& out);
TemplateOpTable<TemplateLaunch>& template_ops();

}  // namespace alk::cpu
