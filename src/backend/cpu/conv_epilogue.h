// A Conv2d kernel's epilogue run by the convolution itself (kernels_conv.cpp): relu or
// hardswish, optionally after adding a residual, applied to each part of the output while it is
// in cache, instead of the device's separate elementwise pass over the whole output.
#pragma once
#include <cstdint>
#include <span>

#include "backend/cpu/view.h"
#include "alk/expr.h"

namespace alk::cpu {

// cpu::conv2d followed by the epilogue e (input 0: the convolution's value; others: extra), when
// e is one the convolution applies itself (f32 throughout; act(in0), act(in0 + in_k) or in0 +
// in_k with act relu or hardswish and in_k an f32 tensor of the output's shape, contiguous).
// False, having done nothing, otherwise.
bool conv2d_epilogue(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                     int64_t dh, int64_t dw, const expr::Expr& e, std::span<const View> extra, const View& out);

}  // namespace alk::cpu
