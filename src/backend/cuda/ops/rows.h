// kernels/rows.cu, the kernels that walk a tensor's rows along one axis: softmax, argmax and
// argmin, cumsum (rows.cpp) and the layer and RMS norms (norm.cpp).
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

#include "backend/cuda/launch.h"

namespace alk::cuda {

// rows.cu for dtype t (T, ACC, FLOATING), with `extra` defines.
std::string rows_source(DType t, std::initializer_list<std::pair<const char*, std::string>> extra = {});

// "Softmax of a non-float dtype" where k's output is not floating, else "".
std::string unless_floating(const Kernel& k);

}  // namespace alk::cuda
