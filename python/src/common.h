// Shared pieces of alk's Python bindings: the type casters that make alk::Tensor a Python
// object with identity (one Python object per TensorImpl while it is alive), alk::Operand
// (a tensor or a Python number), the guard every kernel-running call holds, and errors
// raised with the Python caller's file:line.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>

#include "alk/tensor.h"
#include "graph/graph.h"

namespace py = pybind11;

namespace alkpy {

// Held by every binding that may build graphs or run kernels: the GIL is released (other
// Python threads run while kernels do) and alk's own lock is taken instead, so two Python
// threads never build alk graphs at once. The lock is recursive and never awaited while
// holding the GIL, so a Python step function that alk::compile calls back (which takes
// the GIL, then calls alk again) cannot deadlock.
std::recursive_mutex& alk_lock();
struct Released {
  py::gil_scoped_release gil;
  std::unique_lock<std::recursive_mutex> lock{alk_lock()};
};

// "file.py:12" of the innermost Python frame outside the alk package ("" if none).
std::string python_caller();
// Message + " (at file.py:12)".
std::string at_caller(const std::string& message);

// Python exceptions with the caller's location in the message.
[[noreturn]] void raise_index(const std::string& message);
[[noreturn]] void raise_type(const std::string& message);
[[noreturn]] void raise_value(const std::string& message);
[[noreturn]] void raise_runtime(const std::string& message);

// A device by name ("cpu", "vulkan:0", "auto"); unknown or absent devices raise ValueError
// naming the ones this process found.
alk::Device& device_of(const std::string& spec);
std::vector<std::string> available_devices();

// Pieces each translation unit registers (module.cpp calls them in order).
void bind_tensor(py::module_& m, py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>& cls);
void bind_ops(py::module_& m, py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>& cls);
void bind_nn(py::module_& m);
void bind_runtime(py::module_& m);
void bind_remote(py::module_& m);  // remote.cpp: present with ALK_HAVE_REMOTE
void bind_user_kernel(py::module_& m);

}  // namespace alkpy

namespace pybind11::detail {

// alk::Tensor <-> alk.Tensor. A Python alk.Tensor owns a shared_ptr<TensorImpl>; a Tensor
// handle converts to the Python object already wrapping that impl, if any, so
// `model.weight is model.weight` and `.grad` keep their identity. An undefined Tensor is None.
template <>
struct type_caster<alk::Tensor> {
  using holder_caster = copyable_holder_caster<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>;
  PYBIND11_TYPE_CASTER(alk::Tensor, const_name("Tensor"));

  bool load(handle src, bool convert) {
    if (src.is_none()) {
      value = alk::Tensor();
      return true;
    }
    holder_caster h;
    if (!h.load(src, convert)) return false;
    value = alk::Tensor(static_cast<std::shared_ptr<alk::TensorImpl>&>(h));
    return true;
  }
  static handle cast(const alk::Tensor& t, return_value_policy, handle parent) {
    if (!t.defined()) return none().release();
    return holder_caster::cast(t.impl_ptr(), return_value_policy::take_ownership, parent);
  }
};

// alk::Operand: an alk.Tensor, or a Python bool / int / float (or anything with __index__
// or __float__, such as numpy scalars), which alk treats as a weak scalar.
template <>
struct type_caster<alk::Operand> {
  static constexpr auto name = const_name("Tensor | float");
  std::optional<alk::Operand> value;

  bool load(handle src, bool convert) {
    PyObject* o = src.ptr();
    if (PyBool_Check(o)) {
      value.emplace(o == Py_True);
      return true;
    }
    if (PyLong_Check(o)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      if (overflow) return false;
      value.emplace(static_cast<int64_t>(v));
      return true;
    }
    if (PyFloat_Check(o)) {
      value.emplace(PyFloat_AS_DOUBLE(o));
      return true;
    }
    make_caster<alk::Tensor> t;
    if (!src.is_none() && t.load(src, convert)) {
      value.emplace(cast_op<alk::Tensor&>(t));
      return true;
    }
    if (!convert || src.is_none()) return false;
    // numpy scalars and other numbers: integers first (np.int64 has both).
    if (PyIndex_Check(o)) {
      object i = reinterpret_steal<object>(PyNumber_Index(o));
      if (!i) {
        PyErr_Clear();
        return false;
      }
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
      if (overflow) return false;
      value.emplace(static_cast<int64_t>(v));
      return true;
    }
    if (PyNumber_Check(o) && hasattr(src, "__float__")) {
      double d = PyFloat_AsDouble(o);
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      value.emplace(d);
      return true;
    }
    return false;
  }
  static handle cast(const alk::Operand& op, return_value_policy p, handle parent) {
    if (!op.is_scalar) return make_caster<alk::Tensor>::cast(op.tensor, p, parent);
    if (op.is_bool) return pybind11::bool_(op.scalar != 0).release();
    if (op.is_float) return pybind11::float_(op.scalar).release();
    return pybind11::int_(static_cast<int64_t>(op.scalar)).release();
  }
  template <typename T>
  using cast_op_type = const alk::Operand&;
  operator const alk::Operand&() { return *value; }  // NOLINT(google-explicit-constructor)
};

}  // namespace pybind11::detail
