// Helpers tensor.cpp defines for the other binding files.
#pragma once
#include <pybind11/numpy.h>

#include <optional>

#include "common.h"

namespace alkpy {
alk::Tensor from_numpy(const py::array& a);
py::array to_numpy(const alk::Tensor& t);
alk::Tensor tensor_from_python(const py::handle& data, std::optional<alk::DType> dtype, bool requires_grad);
// self <- value in place (cast and broadcast to self), keeping autograd right: a leaf that
// requires grad refuses while grad is on; otherwise self's history becomes value's.
void assign_inplace(const alk::Tensor& self, const alk::Tensor& value, const char* op);
// Records `view` (sharing base's node) as a view of base, so that writes through it reach
// base and every other view of it (PyTorch's aliasing); no-op when view copied.
void track_view(const alk::Tensor& base, const alk::Tensor& view, bool detached);
// Gives base a whole node of its own when it views part of one, so its views can be tracked.
void prepare_base(const alk::Tensor& base);
// After t was assigned outside the bindings (a C++ optimizer's step), the views of t read its
// new values, as PyTorch's in-place step leaves them.
void follow_assignment(const alk::Tensor& t);
}  // namespace alkpy
