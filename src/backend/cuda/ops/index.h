// kernels/index.cu: gather, index_select, scatter_add and one_hot (index.cpp), the shape
// ops' copies and fills (shape.cpp), unfold and fold (conv.cpp); random (random.cpp) builds
// it with integer outputs.
#pragma once
#include <string>

#include "backend/cuda/launch.h"

namespace alk::cuda {

// index.cu for values of dtype `value` and indices of `index_dtype` (E, T, ACC, IDX, HAS_ATOMIC_ADD).
std::string index_source(DType value, DType index_dtype);
// dst view = src view (same shape), moving raw elements.
void copy_view(Context& ctx, const Arg& src, const Arg& dst);

}  // namespace alk::cuda
