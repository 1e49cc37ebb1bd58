// alk.kernel(...): alk::UserKernel (include/alk/user_kernel.h) from Python, with the same
// fields as KernelSpec. The shape and count rules may be Python callables; they are called
// with the GIL taken, and the spec keeps them alive (released under the GIL too).
#include <memory>

#include "alk/user_kernel.h"
#include "common.h"

namespace alkpy {

namespace {

using alk::DType;
using alk::KernelTarget;
using alk::Shape;

// A Python object shared by C++ copies of a rule, dropped under the GIL.
std::shared_ptr<py::object> hold(py::object f) {
  return std::shared_ptr<py::object>(new py::object(std::move(f)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

py::tuple shapes_and_attrs(std::span<const Shape> shapes, std::span<const double> attrs) {
  py::list s, a;
  for (const Shape& x : shapes) s.append(py::tuple(py::cast(x)));
  for (double v : attrs) a.append(v);
  return py::make_tuple(s, a);
}

alk::KernelTensor tensor_spec(const py::tuple& t, const char* what) {
  if (t.size() < 2 || t.size() > 3) raise_value(std::string(what) + " must be (name, dtype) or (name, dtype, rank)");
  return alk::KernelTensor{t[0].cast<std::string>(), t[1].cast<DType>(), t.size() == 3 ? t[2].cast<int>() : -1};
}

}  // namespace

void bind_user_kernel(py::module_& m) {
  py::class_<alk::UserKernel>(m, "Kernel", R"doc(A kernel from your source text (alk.kernel makes one).
Call it with the input tensors and the attributes' values: k(x, y, a=2.0) or k(x, y, 2.0).)doc")
      .def("__call__", [](const alk::UserKernel& k, py::args args, py::kwargs kwargs) {
        const alk::KernelSpec& spec = k.spec();
        std::vector<alk::Tensor> inputs;
        std::vector<double> attrs;
        for (size_t j = 0; j < args.size(); ++j) {
          if (j < spec.inputs.size()) inputs.push_back(args[j].cast<alk::Tensor>());
          else attrs.push_back(args[j].cast<double>());
        }
        for (size_t j = attrs.size(); j < spec.attrs.size(); ++j) {
          const char* name = spec.attrs[j].name.c_str();
          if (!kwargs.contains(name)) raise_type("kernel " + spec.name + ": missing attribute " + spec.attrs[j].name);
          attrs.push_back(kwargs[name].cast<double>());
        }
        if (kwargs.size() + std::min(args.size(), spec.inputs.size() + spec.attrs.size()) >
            spec.inputs.size() + spec.attrs.size())
          raise_type("kernel " + spec.name + ": too many arguments");
        Released r;
        return k(inputs, attrs);
      })
      .def_property_readonly("name", [](const alk::UserKernel& k) { return k.spec().name; });

  m.def("kernel", [](const std::string& name, const std::vector<py::tuple>& inputs, const py::tuple& output,
                     const std::string& cpp, const std::string& cuda, const std::string& glsl, const std::string& wgsl,
                     const std::vector<py::tuple>& attrs, const py::object& output_shape,
                     const py::object& invocations, int workgroup_size, const py::dict& helpers) {
        alk::KernelSpec spec;
        spec.name = name;
        for (const py::tuple& t : inputs) spec.inputs.push_back(tensor_spec(t, "an input"));
        spec.output = tensor_spec(output, "the output");
        for (const py::tuple& a : attrs) {
          if (a.size() != 2) raise_value("an attribute must be (name, dtype)");
          spec.attrs.push_back(alk::KernelAttr{a[0].cast<std::string>(), a[1].cast<DType>()});
        }
        spec.body[static_cast<int>(KernelTarget::Cpp)] = cpp;
        spec.body[static_cast<int>(KernelTarget::Cuda)] = cuda;
        spec.body[static_cast<int>(KernelTarget::Glsl)] = glsl;
        spec.body[static_cast<int>(KernelTarget::Wgsl)] = wgsl;
        const char* targets[] = {"cpp", "cuda", "glsl", "wgsl"};
        for (int t = 0; t < alk::kNumKernelTargets; ++t)
          if (helpers.contains(targets[t])) spec.helpers[t] = helpers[targets[t]].cast<std::string>();
        spec.workgroup_size = workgroup_size;
        if (!output_shape.is_none()) {
          auto f = hold(output_shape);
          spec.output_shape = [f](std::span<const Shape> s, std::span<const double> a) {
            py::gil_scoped_acquire gil;
            return (*f)(*shapes_and_attrs(s, a)).cast<Shape>();
          };
        }
        if (!invocations.is_none()) {
          auto f = hold(invocations);
          spec.invocations = [f](std::span<const Shape> s, std::span<const double> a) {
            py::gil_scoped_acquire gil;
            return (*f)(*shapes_and_attrs(s, a)).cast<int64_t>();
          };
        }
        return alk::UserKernel(std::move(spec), alk::Loc::current());
      },
      py::arg("name"), py::arg("inputs"), py::arg("output"), py::arg("cpp"), py::arg("cuda") = "",
      py::arg("glsl") = "", py::arg("wgsl") = "", py::arg("attrs") = std::vector<py::tuple>{},
      py::arg("output_shape") = py::none(), py::arg("invocations") = py::none(), py::arg("workgroup_size") = 64,
      py::arg("helpers") = py::dict(),
      R"doc(A kernel from source text: alk writes the bindings and the entry point around each body.

inputs: [(name, dtype) or (name, dtype, rank)], output: (name, dtype[, rank]), attrs: [(name, dtype)]
(i32, i64, f32, f64). cpp (required: the CPU runs it, and it is the reference), cuda, glsl, wgsl:
the body per language; it sees i (the invocation), NAME[j] for each tensor, NAME_numel and
NAME_size0, NAME_size1, ... for its dims, and each attribute by name. output_shape(shapes, attrs)
-> shape (default: the first input's); invocations(shapes, attrs) -> count (default: the output's
element count). helpers: {"cpp": text, ...} placed before the body's function.)doc");
}

}  // namespace alkpy
