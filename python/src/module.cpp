// The alk._C extension module: errors with the Python caller's location, the lock every
// kernel-running call takes, devices, and the order in which the other files register.
#include "common.h"  // first: Python.h before anything else

#include <frameobject.h>

#include <cstring>

#include "alk/cpu.h"

namespace alkpy {

namespace {
std::string g_package_dir;  // alk/ of the imported package: its frames are skipped

// PyTorch's choice of exception type for the same failure: an index or dim out of range is
// IndexError, a missing file FileNotFoundError, everything else (shapes, dtypes, values the
// op cannot take) RuntimeError.
PyObject* exception_type(const alk::Error& e) {
  const std::string& d = e.detail();
  if (d.find("out of range") != std::string::npos || d.find("out of bounds") != std::string::npos)
    return PyExc_IndexError;
  if (d.find("No such file") != std::string::npos) return PyExc_FileNotFoundError;
  return PyExc_RuntimeError;
}
}  // namespace

std::recursive_mutex& alk_lock() {
  static std::recursive_mutex mu;
  return mu;
}

std::string python_caller() {
  if (!PyGILState_Check()) return "";
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::string where;
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    py::object file = py::reinterpret_steal<py::object>(PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename"));
    Py_DECREF(code);
    std::string name = file ? py::str(file).cast<std::string>() : "";
    bool inside = !g_package_dir.empty() && name.compare(0, g_package_dir.size(), g_package_dir) == 0;
    if (!inside) {
      where = name + ":" + std::to_string(PyFrame_GetLineNumber(frame));
      Py_DECREF(frame);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return where;
}

std::string at_caller(const std::string& message) {
  std::string where = python_caller();
  return where.empty() ? message : message + " (at " + where + ")";
}

void raise_index(const std::string& message) { throw py::index_error(at_caller(message)); }
void raise_type(const std::string& message) { throw py::type_error(at_caller(message)); }
void raise_value(const std::string& message) { throw py::value_error(at_caller(message)); }
void raise_runtime(const std::string& message) { throw std::runtime_error(at_caller(message)); }

std::vector<std::string> available_devices() {
  std::vector<std::string> out;
  for (alk::Device* d : alk::available_devices()) out.push_back(d->name());
  return out;
}

alk::Device& device_of(const std::string& spec) {
  try {
    return alk::get_device(spec);
  } catch (const alk::Error& e) {
    raise_value(e.op() + ": " + e.detail());
  }
}

}  // namespace alkpy

PYBIND11_MODULE(_C, m) {
  m.doc() = "alk's C++ engine (the alk package wraps it: import alk, not alk._C).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const alk::Error& e) {
      std::string msg = alkpy::at_caller(e.op() + ": " + e.detail());
      PyErr_SetString(alkpy::exception_type(e), msg.c_str());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      // Our own raise_runtime already carries the location.
      std::string msg = e.what();
      if (msg.find(" (at ") == std::string::npos) msg = alkpy::at_caller(msg);
      PyErr_SetString(PyExc_RuntimeError, msg.c_str());
    }
  });

  m.def("_set_package_dir", [](const std::string& dir) { alkpy::g_package_dir = dir; },
        "Frames under this directory are skipped when errors name the Python caller.");
  m.def("_caller", &alkpy::python_caller, "The file:line errors would name from here (for tests).");
  m.def("_wait_for_compiled_kernels", &alk::cpu::wait_for_compiled_kernels, py::call_guard<alkpy::Released>(),
        "Blocks until the CPU's background kernel compiles are done (benchmarks call it after warm-up).");
  m.def("num_threads", &alk::cpu::num_threads, "Threads of alk's CPU pool.");
  m.def("set_num_threads", &alk::cpu::set_num_threads, py::arg("n"), "Sets the CPU pool's thread count.");
  m.def("devices", &alkpy::available_devices,
        "The devices alk can run on now, as strings usable in Tensor.to(): ['cpu', 'vulkan:0', ...].");
  m.def("device_info", [](const std::string& spec) {
    const alk::DeviceInfo& i = alkpy::device_of(spec).info();
    return py::dict(py::arg("name") = i.name, py::arg("kind") = i.kind, py::arg("description") = i.description,
                    py::arg("type") = i.type, py::arg("driver") = i.driver, py::arg("memory_bytes") = i.memory_bytes,
                    py::arg("features") = i.features);
  }, py::arg("device") = "cpu", "What alk knows about a device (name, kind, description, memory, features).");
  m.def("default_device", [] { return alk::default_device().name(); },
        "The device new tensors are created on (ALK_DEVICE, else 'cpu'; see alk.device).");
  struct DeviceScope {
    std::string spec;
    std::vector<std::unique_ptr<alk::DeviceGuard>> guards;
  };
  py::class_<DeviceScope>(m, "device", R"doc(with alk.device("vulkan"): new tensors are created on that device.)doc")
      .def(py::init([](const std::string& spec) {
        alkpy::device_of(spec);
        return DeviceScope{spec, {}};
      }), py::arg("device"))
      .def("__enter__", [](DeviceScope& s) {
        s.guards.push_back(std::make_unique<alk::DeviceGuard>(alkpy::device_of(s.spec)));
        return alkpy::device_of(s.spec).name();
      })
      .def("__exit__", [](DeviceScope& s, py::args) { if (!s.guards.empty()) s.guards.pop_back(); })
      .def("__repr__", [](const DeviceScope& s) { return "alk.device('" + alkpy::device_of(s.spec).name() + "')"; });

  py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>> tensor(m, "Tensor", R"doc(
An n-dimensional array with autograd, over alk's lazy graph.

Ops only record graph nodes; values are computed when needed (printing, .item(),
.numpy(), backward()). Create tensors with alk.tensor, alk.zeros, alk.randn,
alk.from_numpy, ...; alk.Tensor(t) makes another handle to the same data.)doc");
  alkpy::bind_tensor(m, tensor);
  alkpy::bind_ops(m, tensor);
  alkpy::bind_nn(m);
  alkpy::bind_runtime(m);
  alkpy::bind_remote(m);
  alkpy::bind_user_kernel(m);
}
