// Every op as an alk function and, where PyTorch has one, an alk.Tensor method. The
// elementwise ops are generated from the op table (include/alk/elementwise.def) by the same
// X-macro the C++ API uses, so an op added there appears here (function, method and
// in-place method) with its argument names, dtype rule and expressions in its docstring.
#include <memory>

#include "alk/tensor.h"
#include "common.h"
#include "tensor_util.h"

namespace alkpy {

using alk::DType;
using alk::Operand;
using alk::Shape;
using alk::Tensor;

namespace {

// Names for py::arg must outlive the module: kept here.
const char* keep(std::string s) {
  static std::deque<std::string> names;
  names.push_back(std::move(s));
  return names.back().c_str();
}

std::vector<std::string> words(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ' ' || *p == 0) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (!*p) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

struct EwInfo {
  std::string name;
  int arity;
  std::string inputs, rule, domain, forward, grads;
};
std::vector<EwInfo>& ew_table() {
  static std::vector<EwInfo> t;
  return t;
}

template <int Arity, class F, class FI>
void def_elementwise(py::module_& m, py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>& cls,
                     const EwInfo& info, F f, FI finplace) {
  std::vector<std::string> in = words(info.inputs.c_str());
  std::string sig = info.name + "(" + info.inputs + ")";
  for (char& c : sig)
    if (c == ' ') c = ',';
  const char* doc = keep("Elementwise op " + sig + " from alk's op table (include/alk/elementwise.def).\n"
                         "forward: " + info.forward + "\ngradients: " + info.grads + "\ndtype rule: " + info.rule +
                         ". Operands broadcast; Python numbers are weak scalars (docs/dtypes.md).");
  const char* idoc = keep("In-place " + info.name + ": self <- " + info.name + "(self, ...); returns self.");
  const char* name = keep(info.name);
  const char* iname = keep(info.name + "_");
  if constexpr (Arity == 1) {
    m.def(name, f, py::arg(keep(in[0])), doc, py::call_guard<Released>());
    cls.def(name, f, doc, py::call_guard<Released>());
    cls.def(iname, finplace, idoc);
  } else if constexpr (Arity == 2) {
    m.def(name, f, py::arg(keep(in[0])), py::arg(keep(in[1])), doc, py::call_guard<Released>());
    cls.def(name, f, py::arg(keep(in[1])), doc, py::call_guard<Released>());
    cls.def(iname, finplace, py::arg(keep(in[1])), idoc);
  } else {
    m.def(name, f, py::arg(keep(in[0])), py::arg(keep(in[1])), py::arg(keep(in[2])), doc, py::call_guard<Released>());
    cls.def(name, f, py::arg(keep(in[1])), py::arg(keep(in[2])), doc, py::call_guard<Released>());
    cls.def(iname, finplace, py::arg(keep(in[1])), py::arg(keep(in[2])), idoc);
  }
}

void inplace(const Tensor& self, const Tensor& value, const char* op) { assign_inplace(self, value, op); }

template <class F>
Tensor build(F f) {
  Released r;
  return f();
}

// A shape given as f(2, 3), f((2, 3)) or f([2, 3]).
Shape shape_args(const py::args& args) {
  if (args.size() == 1 && py::isinstance<py::sequence>(args[0]) && !py::isinstance<py::str>(args[0]))
    return args[0].cast<Shape>();
  return args.cast<Shape>();
}

// dim=None (all), an int, or a sequence of ints.
std::vector<int64_t> dims_arg(const py::object& dim) {
  if (dim.is_none()) return {};
  if (py::isinstance<py::sequence>(dim)) return dim.cast<std::vector<int64_t>>();
  return {dim.cast<int64_t>()};
}

DType dtype_or(const std::optional<DType>& d, DType fallback) { return d.value_or(fallback); }

Tensor finish(Tensor t, bool requires_grad) {
  if (requires_grad) {
    t.realize();
    t.requires_grad_(true);
  }
  return t;
}

}  // namespace

void bind_ops(py::module_& m, py::class_<alk::TensorImpl, std::shared_ptr<alk::TensorImpl>>& cls) {
  // ---- elementwise, from the table ----
#define ALK_FN_1(name) [](const Operand& a) { return alk::name(a); }
#define ALK_FN_2(name) [](const Operand& a, const Operand& b) { return alk::name(a, b); }
#define ALK_FN_3(name) [](const Operand& a, const Operand& b, const Operand& c) { return alk::name(a, b, c); }
// In place: the value is built without the GIL, then assigned with it (the checks raise Python errors).
#define ALK_IP_1(name) [](const Tensor& s) { inplace(s, build([&] { return alk::name(s); }), #name "_"); return s; }
#define ALK_IP_2(name)                                                              \
  [](const Tensor& s, const Operand& b) {                                           \
    inplace(s, build([&] { return alk::name(s, b); }), #name "_");                 \
    return s;                                                                       \
  }
#define ALK_IP_3(name)                                                              \
  [](const Tensor& s, const Operand& b, const Operand& c) {                         \
    inplace(s, build([&] { return alk::name(s, b, c); }), #name "_");              \
    return s;                                                                       \
  }
#define ALK_EW(name, arity, inputs, rule, domain, forward, d0, d1, d2)                                        \
  {                                                                                                          \
    EwInfo info{#name, arity, inputs, #rule, #domain, forward, ""};                                          \
    std::vector<std::string> in = words(inputs);                                                             \
    const char* grads[] = {d0, d1, d2};                                                                      \
    for (size_t i = 0; i < in.size(); ++i)                                                                   \
      info.grads += (i ? "; d" : "d") + in[i] + " = " + (*grads[i] ? grads[i] : "none");                    \
    ew_table().push_back(info);                                                                              \
    def_elementwise<arity>(m, cls, info, ALK_FN_##arity(name), ALK_IP_##arity(name));                        \
  }
#include "alk/elementwise.def"
#undef ALK_EW

  m.def("_elementwise_ops", [] {
    py::list out;
    for (const EwInfo& e : ew_table())
      out.append(py::dict(py::arg("name") = e.name, py::arg("arity") = e.arity, py::arg("inputs") = e.inputs,
                          py::arg("rule") = e.rule, py::arg("domain") = e.domain, py::arg("forward") = e.forward));
    return out;
  }, "The op table's elementwise entries (name, arity, inputs, dtype rule, domain, forward).");

  m.def("cast", [](const Tensor& x, DType t) { return alk::cast(x, t); }, py::arg("x"), py::arg("dtype"),
        py::call_guard<Released>(), "x converted to dtype (differentiable between float types).");

  // ---- operators ----
  auto g = py::call_guard<Released>();
  using B = Tensor (*)(const Operand&, const Operand&);
  auto bin = [&](const char* name, B f, const char* doc) {
    cls.def(name, [f](const Operand& a, const Operand& b) { return f(a, b); }, py::is_operator(), doc, g);
  };
  auto rbin = [&](const char* name, B f) {
    cls.def(name, [f](const Operand& a, const Operand& b) { return f(b, a); }, py::is_operator(), g);
  };
  auto ibin = [&](const char* name, B f, const char* op) {
    cls.def(name, [f, op](const Tensor& a, const Operand& b) {
      Tensor v;
      {
        Released r;
        v = f(a, b);
      }
      inplace(a, v, op);
      return a;
    }, py::is_operator());
  };
  B add = [](const Operand& a, const Operand& b) { return alk::add(a, b); };
  B sub = [](const Operand& a, const Operand& b) { return alk::sub(a, b); };
  B mul = [](const Operand& a, const Operand& b) { return alk::mul(a, b); };
  B div = [](const Operand& a, const Operand& b) { return alk::div(a, b); };
  B pow = [](const Operand& a, const Operand& b) { return alk::pow(a, b); };
  B floordiv = [](const Operand& a, const Operand& b) { return alk::floor(alk::div(a, b)); };
  B mod = [](const Operand& a, const Operand& b) {  // Python's sign rule: the result has b's sign
    Tensor q = alk::floor(alk::div(a, b));
    return alk::sub(a, alk::mul(q, b));
  };
  B matmul = [](const Operand& a, const Operand& b) {
    if (a.is_scalar || b.is_scalar) throw alk::Error("matmul", "both operands must be tensors", alk::Loc::current());
    return alk::matmul(a.tensor, b.tensor);
  };
  // & | ^ << >> as PyTorch: bitwise on integers, logical on bools, an error on floats.
  B land = [](const Operand& a, const Operand& b) { return alk::bitwise_and(a, b); };
  B lor = [](const Operand& a, const Operand& b) { return alk::bitwise_or(a, b); };
  B lxor = [](const Operand& a, const Operand& b) { return alk::bitwise_xor(a, b); };
  B lshift = [](const Operand& a, const Operand& b) { return alk::bitwise_left_shift(a, b); };
  B rshift = [](const Operand& a, const Operand& b) { return alk::bitwise_right_shift(a, b); };
  bin("__add__", add, "self + other");
  bin("__sub__", sub, "self - other");
  bin("__mul__", mul, "self * other");
  bin("__truediv__", div, "self / other (true division: integers give float32)");
  bin("__floordiv__", floordiv, "floor(self / other)");
  bin("__mod__", mod, "self - floor(self / other) * other (Python's sign rule)");
  bin("__pow__", pow, "self ** other");
  bin("__matmul__", matmul, "matmul(self, other)");
  bin("__and__", land, "bitwise and (integers), logical and (bools)");
  bin("__or__", lor, "bitwise or (integers), logical or (bools)");
  bin("__xor__", lxor, "bitwise xor (integers), logical xor (bools)");
  bin("__lshift__", lshift, "self << other (integers)");
  bin("__rshift__", rshift, "self >> other (integers; arithmetic for signed dtypes)");
  rbin("__radd__", add);
  rbin("__rsub__", sub);
  rbin("__rmul__", mul);
  rbin("__rtruediv__", div);
  rbin("__rfloordiv__", floordiv);
  rbin("__rmod__", mod);
  rbin("__rpow__", pow);
  rbin("__rmatmul__", matmul);
  rbin("__rand__", land);
  rbin("__ror__", lor);
  rbin("__rxor__", lxor);
  rbin("__rlshift__", lshift);
  rbin("__rrshift__", rshift);
  ibin("__iadd__", add, "+=");
  ibin("__isub__", sub, "-=");
  ibin("__imul__", mul, "*=");
  ibin("__itruediv__", div, "/=");
  ibin("__ipow__", pow, "**=");
  ibin("__iand__", land, "&=");
  ibin("__ior__", lor, "|=");
  ibin("__ixor__", lxor, "^=");
  ibin("__ilshift__", lshift, "<<=");
  ibin("__irshift__", rshift, ">>=");
  bin("__eq__", [](const Operand& a, const Operand& b) { return alk::eq(a, b); }, "elementwise ==, a bool tensor");
  bin("__ne__", [](const Operand& a, const Operand& b) { return alk::ne(a, b); }, "elementwise !=, a bool tensor");
  bin("__lt__", [](const Operand& a, const Operand& b) { return alk::lt(a, b); }, "elementwise <");
  bin("__le__", [](const Operand& a, const Operand& b) { return alk::le(a, b); }, "elementwise <=");
  bin("__gt__", [](const Operand& a, const Operand& b) { return alk::gt(a, b); }, "elementwise >");
  bin("__ge__", [](const Operand& a, const Operand& b) { return alk::ge(a, b); }, "elementwise >=");
  cls.def("__neg__", [](const Tensor& x) { return alk::neg(x); }, g);
  cls.def("__pos__", [](const Tensor& x) { return x; });
  cls.def("__abs__", [](const Tensor& x) { return alk::abs(x); }, g);
  cls.def("__invert__", [](const Tensor& x) {
    if (is_floating(x.dtype())) raise_type("~: only integer and bool tensors can be inverted");
    Released r;
    return alk::bitwise_not(x);
  });

  // ---- views and conversions ----
  cls.def("reshape", [](const Tensor& x, py::args s) { return x.reshape(shape_args(s)); },
          "The same elements in a new shape (-1 inferred); a view when possible.");
  cls.def("view", [](const Tensor& x, py::args s) -> Tensor {
    if (s.size() == 1 && py::isinstance<DType>(s[0])) raise_type("view(dtype) is not supported; use to(dtype)");
    return x.view(shape_args(s));
  }, "A view in a new shape (errors if the strides cannot express it).");
  cls.def("permute", [](const Tensor& x, py::args d) { return x.permute(shape_args(d)); }, "Reorders the dims (a view).");
  cls.def("transpose", [](const Tensor& t, int64_t a, int64_t b) { return t.transpose(a, b); }, py::arg("dim0"), py::arg("dim1"), "Swaps two dims (a view).");
  cls.def("t", [](const Tensor& t) { return t.t(); }, "Transpose of the last two dims (a view).");
  cls.def_property_readonly("T", [](const Tensor& x) {
    std::vector<int64_t> d;
    for (int64_t i = x.dim() - 1; i >= 0; --i) d.push_back(i);
    return x.permute(d);
  }, "All dims reversed (a view).");
  cls.def_property_readonly("mT", [](const Tensor& t) { return t.t(); }, "Transpose of the last two dims (a view).");
  cls.def("select", [](const Tensor& t, int64_t d, int64_t i) { return t.select(d, i); }, py::arg("dim"), py::arg("index"), "The slice at index along dim (a view).");
  cls.def("narrow", [](const Tensor& x, int64_t dim, int64_t start, int64_t length) {
    return x.slice(dim, start, start + length);
  }, py::arg("dim"), py::arg("start"), py::arg("length"), "length elements from start along dim (a view).");
  cls.def("expand", [](const Tensor& x, py::args s) { return x.expand(shape_args(s)); },
          "A broadcast view (-1 keeps a dim).");
  cls.def("expand_as", [](const Tensor& x, const Tensor& o) { return x.expand(o.shape()); }, py::arg("other"),
          "A broadcast view to other's shape.");
  cls.def("squeeze", [](const Tensor& x, std::optional<int64_t> d) { return d ? x.squeeze(*d) : x.squeeze(); },
          py::arg("dim") = py::none(), "Drops size-1 dims (all, or dim).");
  cls.def("unsqueeze", [](const Tensor& t, int64_t d) { return t.unsqueeze(d); }, py::arg("dim"), "Inserts a size-1 dim.");
  cls.def("flatten", [](const Tensor& t, int64_t a, int64_t b) { return t.flatten(a, b); }, py::arg("start_dim") = 0, py::arg("end_dim") = -1,
          "Merges dims start_dim..end_dim.");
  cls.def("contiguous", [](const Tensor& t) { return t.contiguous(); }, "Row-major without gaps (self if it already is).", g);
  cls.def("clone", [](const Tensor& x) { return x.reshape(x.shape()); },
          "A new tensor handle with the same values (alk's data is immutable, so no copy is needed).");
  cls.def("to", [](const Tensor& x, py::object target, std::optional<DType> dtype) -> Tensor {
    Tensor r = x;
    if (py::isinstance<DType>(target)) {
      dtype = target.cast<DType>();
    } else if (py::isinstance<py::str>(target)) {
      alk::Device& d = device_of(target.cast<std::string>());
      Released rr;
      r = r.to(d);
    } else if (!target.is_none()) {
      raise_type("to: expected a dtype or a device string, got " + py::str(py::type::handle_of(target)).cast<std::string>());
    }
    if (dtype) {
      Released rr;
      r = alk::cast(r, *dtype);
    }
    return r;
  }, py::arg("target") = py::none(), py::arg("dtype") = py::none(),
          "x.to(dtype) converts; x.to(device) moves ('cpu', 'auto'; alk.devices() lists them).");
  cls.def("cpu", [](const Tensor& x) { return x.to(alk::cpu_device()); }, "The tensor on the CPU (itself if there).",
          g);
  cls.def("type_as", [](const Tensor& x, const Tensor& o) { return alk::cast(x, o.dtype()); }, py::arg("other"),
          "x converted to other's dtype.", g);
  struct Conv {
    const char* name;
    DType t;
  };
  for (Conv c : {Conv{"float", DType::F32}, Conv{"double", DType::F64}, Conv{"half", DType::F16},
                 Conv{"bfloat16", DType::BF16}, Conv{"long", DType::I64}, Conv{"int", DType::I32},
                 Conv{"bool", DType::Bool}, Conv{"byte", DType::U8}}) {
    DType t = c.t;
    cls.def(c.name, [t](const Tensor& x) { return alk::cast(x, t); }, keep(std::string("x converted to ") +
            std::string(alk::dtype_name(t))), g);
  }
  cls.def("is_floating_point", [](const Tensor& x) { return alk::is_floating(x.dtype()); },
          "True for float16, bfloat16, float32 and float64 tensors.");

  // ---- reductions ----
  using Red = Tensor (*)(const Tensor&, std::vector<int64_t>, bool, alk::Loc);
  auto reduction = [&](const char* name, Red f, const char* doc) {
    auto fn = [f](const Tensor& x, py::object dim, bool keepdim) {
      std::vector<int64_t> d = dims_arg(dim);
      Released r;
      return f(x, d, keepdim, alk::Loc::current());
    };
    m.def(name, fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, doc);
    cls.def(name, fn, py::arg("dim") = py::none(), py::arg("keepdim") = false, doc);
  };
  reduction("sum", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::sum(x, d, k, l); },
            "Sum over dim (None: all).");
  reduction("mean", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::mean(x, d, k, l); },
            "Mean over dim (None: all).");
  reduction("amax", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::max(x, d, k, l); },
            "Maximum over dim (None: all).");
  reduction("amin", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::min(x, d, k, l); },
            "Minimum over dim (None: all).");
  reduction("prod", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::prod(x, d, k, l); },
            "Product over dim (None: all).");
  reduction("logsumexp",
            [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::logsumexp(x, d, k, l); },
            "log(sum(exp(x))) over dim, computed stably.");
  // max/min: reductions (not PyTorch's (values, indices) pairs: use argmax for indices).
  reduction("max", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::max(x, d, k, l); },
            "Maximum over dim (None: all). Returns the values; argmax gives the indices. For two tensors use "
            "maximum().");
  reduction("min", [](const Tensor& x, std::vector<int64_t> d, bool k, alk::Loc l) { return alk::min(x, d, k, l); },
            "Minimum over dim (None: all). Returns the values; argmin gives the indices.");
  auto varlike = [&](const char* name, bool is_std) {
    auto fn = [is_std](const Tensor& x, py::object dim, int64_t correction, bool keepdim) {
      std::vector<int64_t> d = dims_arg(dim);
      Released r;
      return is_std ? alk::std(x, d, correction, keepdim) : alk::var(x, d, correction, keepdim);
    };
    const char* doc = is_std ? "Standard deviation over dim (correction 1: unbiased)."
                             : "Variance over dim (correction 1: unbiased).";
    m.def(name, fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("correction") = 1,
          py::arg("keepdim") = false, doc);
    cls.def(name, fn, py::arg("dim") = py::none(), py::arg("correction") = 1, py::arg("keepdim") = false, doc);
  };
  varlike("var", false);
  varlike("std", true);
  for (bool is_max : {true, false}) {
    auto fn = [is_max](const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
      Released r;
      return is_max ? alk::argmax(x, dim, keepdim) : alk::argmin(x, dim, keepdim);
    };
    const char* name = is_max ? "argmax" : "argmin";
    const char* doc = is_max ? "Index of the maximum along dim (None: of the flattened tensor), int64."
                             : "Index of the minimum along dim (None: of the flattened tensor), int64.";
    m.def(name, fn, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false, doc);
    cls.def(name, fn, py::arg("dim") = py::none(), py::arg("keepdim") = false, doc);
  }

  // ---- template ops: functions, and methods where PyTorch has them ----
  auto both = [&](const char* name, auto f, const char* doc, auto... args) {
    m.def(name, f, py::arg("input"), args..., doc, g);
    cls.def(name, f, args..., doc, g);
  };
  both("matmul", [](const Tensor& a, const Tensor& b) { return alk::matmul(a, b); },
       "Matrix product with NumPy's rules (batched, broadcast).", py::arg("other"));
  both("softmax", [](const Tensor& x, int64_t d) { return alk::softmax(x, d); }, "Softmax along dim.",
       py::arg("dim"));
  both("log_softmax", [](const Tensor& x, int64_t d) { return alk::log_softmax(x, d); }, "Log-softmax along dim.",
       py::arg("dim"));
  both("gather", [](const Tensor& x, int64_t d, const Tensor& i) { return alk::gather(x, d, i); },
       "out[i][j] = x[index[i][j]][j] (dim 0), as torch.gather.", py::arg("dim"), py::arg("index"));
  both("index_select", [](const Tensor& x, int64_t d, const Tensor& i) { return alk::index_select(x, d, i); },
       "The entries of x at the 1-D index along dim.", py::arg("dim"), py::arg("index"));
  both("scatter_add", [](const Tensor& x, int64_t d, const Tensor& i, const Tensor& s) {
    return alk::scatter_add(x, d, i, s);
  }, "x with src added at index along dim, as torch.scatter_add.", py::arg("dim"), py::arg("index"), py::arg("src"));
  both("tril", [](const Tensor& x, int64_t k) { return alk::tril(x, k); }, "Lower triangle (diagonal k).",
       py::arg("diagonal") = 0);
  both("triu", [](const Tensor& x, int64_t k) { return alk::triu(x, k); }, "Upper triangle (diagonal k).",
       py::arg("diagonal") = 0);
  both("cumsum", [](const Tensor& x, int64_t d) { return alk::cumsum(x, d); }, "Cumulative sum along dim.",
       py::arg("dim"));
  both("broadcast_to", [](const Tensor& x, Shape s) { return alk::broadcast_to(x, s); }, "A broadcast view.",
       py::arg("shape"));
  both("split", [](const Tensor& x, int64_t size, int64_t d) { return alk::split(x, size, d); },
       "Pieces of split_size along dim (the last may be smaller).", py::arg("split_size"), py::arg("dim") = 0);
  both("chunk", [](const Tensor& x, int64_t n, int64_t d) { return alk::chunk(x, n, d); },
       "chunks pieces along dim.", py::arg("chunks"), py::arg("dim") = 0);
  both("one_hot", [](const Tensor& x, int64_t n) { return alk::one_hot(x, n); },
       "Integer ids -> one-hot rows of num_classes.", py::arg("num_classes"));
  both("dropout", [](const Tensor& x, double p, bool training) { return alk::dropout(x, p, training); },
       "Zeroes elements with probability p and scales the rest by 1/(1-p) (identity when not training).",
       py::arg("p") = 0.5, py::arg("training") = true);
  m.def("embedding", [](const Tensor& w, const Tensor& ids) { return alk::embedding(w, ids); }, py::arg("weight"),
        py::arg("ids"), "Rows of weight at the ids.", g);
  m.def("layer_norm", [](const Tensor& x, Shape s, const Tensor& w, const Tensor& b, double eps) {
    return alk::layer_norm(x, s, w, b, eps);
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5, "Layer normalization over the trailing normalized_shape dims.", g);
  m.def("rms_norm", [](const Tensor& x, Shape s, const Tensor& w, double eps) { return alk::rms_norm(x, s, w, eps); },
        py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("eps") = 1e-6,
        "RMS normalization over the trailing normalized_shape dims.", g);
  m.def("pad", [](const Tensor& x, std::vector<int64_t> pads, double v) { return alk::pad(x, pads, v); },
        py::arg("input"), py::arg("pad"), py::arg("value") = 0.0,
        "(before, after) pairs from the last dim backwards, as torch.nn.functional.pad.", g);
  m.def("cat", [](const std::vector<Tensor>& xs, int64_t d) { return alk::cat(xs, d); }, py::arg("tensors"),
        py::arg("dim") = 0, "Concatenates along dim.", g);
  m.def("stack", [](const std::vector<Tensor>& xs, int64_t d) { return alk::stack(xs, d); }, py::arg("tensors"),
        py::arg("dim") = 0, "Stacks along a new dim.", g);
  m.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                           std::optional<double> scale) {
    return alk::scaled_dot_product_attention(q, k, v, causal, scale.value_or(-1));
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::kw_only(), py::arg("is_causal") = false, py::arg("scale") = py::none(),
        "softmax(q k^T * scale [+ causal mask]) v, fused (no T x S matrix kept). scale None: 1/sqrt(D).", g);
  m.def("unfold", [](const Tensor& x, std::array<int64_t, 2> k, std::array<int64_t, 2> d, std::array<int64_t, 2> p,
                     std::array<int64_t, 2> s) {
    return alk::unfold2d(x, {k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]});
  }, py::arg("input"), py::arg("kernel_size"), py::arg("dilation") = std::array<int64_t, 2>{1, 1},
        py::arg("padding") = std::array<int64_t, 2>{0, 0}, py::arg("stride") = std::array<int64_t, 2>{1, 1},
        "Sliding windows [N, C, H, W] -> [N, C*kh*kw, L], as torch.nn.functional.unfold.", g);
  m.def("fold", [](const Tensor& x, std::array<int64_t, 2> out, std::array<int64_t, 2> k, std::array<int64_t, 2> d,
                   std::array<int64_t, 2> p, std::array<int64_t, 2> s) {
    return alk::fold2d(x, out[0], out[1], {k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]});
  }, py::arg("input"), py::arg("output_size"), py::arg("kernel_size"), py::arg("dilation") = std::array<int64_t, 2>{1, 1},
        py::arg("padding") = std::array<int64_t, 2>{0, 0}, py::arg("stride") = std::array<int64_t, 2>{1, 1},
        "The adjoint of unfold (overlapping taps summed), as torch.nn.functional.fold.", g);
  m.def("conv2d", [](const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups) {
    return alk::conv2d(x, w, b, stride, padding, dilation, groups);
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1, "2-D convolution: x [N, C, H, W], weight [O, C/groups, kh, kw].",
        g);
  m.def("max_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s, int64_t p) {
    return alk::max_pool2d(x, k, s.value_or(-1), p);
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        "2-D max pooling (stride None: kernel_size).", g);
  m.def("avg_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s, int64_t p) {
    return alk::avg_pool2d(x, k, s.value_or(-1), p);
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
        "2-D average pooling (stride None: kernel_size).", g);
  m.def("broadcast_shapes", [](py::args shapes) {
    Shape s;
    for (py::handle h : shapes) s = alk::broadcast_shapes(s, h.cast<Shape>());
    return py::tuple(py::cast(s));
  }, "The shape the given shapes broadcast to.");
  m.def("generated_kernel", [](const Tensor& t, const std::string& target) { return alk::generated_kernel(t, target); },
        py::arg("tensor"), py::arg("target") = "cpp",
        "The kernel source alk generates for a lazy elementwise tensor ('cpp', 'cuda', 'glsl', 'wgsl').");
  m.def("custom_elementwise", [](const std::string& name, std::vector<std::string> inputs, const std::string& forward,
                                 std::vector<std::string> backward, const std::vector<Operand>& operands) {
    alk::CustomOp op{name, std::move(inputs), forward, std::move(backward), true};
    return alk::custom_elementwise(op, operands);
  }, py::arg("name"), py::arg("inputs"), py::arg("forward"), py::arg("backward"), py::arg("operands"),
        "A user-defined elementwise op in the op table's expression language; fuses and differentiates like "
        "the built-in ones.", g);

  // ---- creation ----
  auto creation = [&](const char* name, auto f, const char* doc) {
    m.def(name, [f](py::args size, std::optional<DType> dtype, bool requires_grad, py::object device) {
      alk::Device* d = device.is_none() ? nullptr : &device_of(device.cast<std::string>());
      Shape s = shape_args(size);
      Released r;
      std::optional<alk::DeviceGuard> on;
      if (d) on.emplace(*d);
      return finish(f(s, dtype), requires_grad);
    }, py::kw_only(), py::arg("dtype") = py::none(), py::arg("requires_grad") = false, py::arg("device") = py::none(),
          doc);
  };
  creation("zeros", [](Shape s, std::optional<DType> t) { return alk::zeros(s, dtype_or(t, DType::F32)); },
           "A tensor of zeros: zeros(2, 3) or zeros((2, 3)).");
  creation("ones", [](Shape s, std::optional<DType> t) { return alk::ones(s, dtype_or(t, DType::F32)); },
           "A tensor of ones.");
  creation("empty", [](Shape s, std::optional<DType> t) { return alk::zeros(s, dtype_or(t, DType::F32)); },
           "A tensor of the given shape (zero-filled: alk never hands out uninitialized memory).");
  creation("rand", [](Shape s, std::optional<DType> t) { return alk::rand(s, dtype_or(t, DType::F32)); },
           "Uniform [0, 1) samples from the seeded generator (manual_seed).");
  creation("randn", [](Shape s, std::optional<DType> t) { return alk::randn(s, dtype_or(t, DType::F32)); },
           "Standard normal samples from the seeded generator (manual_seed).");
  m.def("full", [](Shape s, double v, std::optional<DType> t, bool rg) {
    Released r;
    return finish(alk::full(s, v, dtype_or(t, DType::F32)), rg);
  }, py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(),
        py::arg("requires_grad") = false, "A tensor filled with fill_value.");
  m.def("zeros_like", [](const Tensor& x, std::optional<DType> t) { return alk::zeros(x.shape(), dtype_or(t, x.dtype())); },
        py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), "Zeros of x's shape (and dtype).", g);
  m.def("ones_like", [](const Tensor& x, std::optional<DType> t) { return alk::ones(x.shape(), dtype_or(t, x.dtype())); },
        py::arg("input"), py::kw_only(), py::arg("dtype") = py::none(), "Ones of x's shape (and dtype).", g);
  m.def("full_like", [](const Tensor& x, double v, std::optional<DType> t) {
    return alk::full(x.shape(), v, dtype_or(t, x.dtype()));
  }, py::arg("input"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = py::none(), "fill_value of x's shape.",
        g);
  m.def("rand_like", [](const Tensor& x) { return alk::rand(x.shape(), x.dtype()); }, py::arg("input"),
        "U[0, 1) samples of x's shape and dtype.", g);
  m.def("randn_like", [](const Tensor& x) { return alk::randn(x.shape(), x.dtype()); }, py::arg("input"),
        "N(0, 1) samples of x's shape and dtype.", g);
  m.def("arange", [](py::object a, py::object b, py::object step, std::optional<DType> t) {
    // PyTorch's rule: any Python float among the arguments gives the default float dtype
    // (arange(5.) is float32), integers alone give int64.
    bool integral = true;
    auto number = [&](const py::object& o) {
      if (py::isinstance<py::float_>(o) || (py::isinstance<alk::TensorImpl>(o) && alk::is_floating(o.cast<Tensor>().dtype())))
        integral = false;
      return o.cast<double>();
    };
    const double first = number(a), stride = number(step);
    const double start = b.is_none() ? 0 : first, end = b.is_none() ? first : number(b);
    if (stride == 0) raise_runtime("arange: step must be nonzero");
    Released r;
    return alk::arange(start, end, stride, t.value_or(integral ? DType::I64 : DType::F32));
  }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(), py::arg("dtype") = py::none(),
        "Values from start to end (exclusive) by step; arange(n) is 0..n-1. Integers give int64, any float "
        "argument float32.");
  m.def("linspace", [](double a, double b, int64_t n, std::optional<DType> t) {
    return alk::linspace(a, b, n, dtype_or(t, DType::F32));
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(), py::arg("dtype") = py::none(),
        "steps evenly spaced values from start to end (inclusive).", g);
  m.def("eye", [](int64_t n, std::optional<int64_t> mm, std::optional<DType> t) {
    return alk::eye(n, mm.value_or(-1), dtype_or(t, DType::F32));
  }, py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = py::none(), "The identity matrix.", g);
  m.def("randint", [](int64_t low, std::optional<int64_t> high, Shape s, std::optional<DType> t) {
    int64_t lo = high ? low : 0, hi = high ? *high : low;
    return alk::randint(lo, hi, s, dtype_or(t, DType::I64));
  }, py::arg("low"), py::arg("high") = py::none(), py::arg("size") = Shape{}, py::kw_only(),
        py::arg("dtype") = py::none(), "Integers in [low, high): randint(low, high, size) or randint(high, size=...).", g);
  m.def("manual_seed", &alk::manual_seed, py::arg("seed"), "Seeds alk's random generator (Philox).");
  m.def("random_state", [] { return py::make_tuple(alk::random_seed(), alk::random_offset()); },
        "(seed, offset) of the generator.");
  m.def("set_random_state", &alk::set_random_state, py::arg("seed"), py::arg("offset"),
        "Restores the generator to (seed, offset), as random_state() returned them.");

  // ---- autograd ----
  m.def("grad", [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& grad_outputs, bool create_graph) {
    return alk::grad(outputs, inputs, grad_outputs, create_graph);
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = std::vector<Tensor>{},
        py::arg("create_graph") = false,
        "Gradients of sum(outputs[i] * grad_outputs[i]) with respect to inputs (leaves' .grad untouched).", g);
  m.def("is_grad_enabled", &alk::is_grad_enabled, "Whether ops record autograd history.");
  struct GradMode {
    std::vector<std::unique_ptr<alk::NoGradGuard>> guards;
  };
  py::class_<GradMode>(m, "_NoGrad")
      .def(py::init<>())
      .def("__enter__", [](GradMode& s) { s.guards.push_back(std::make_unique<alk::NoGradGuard>()); })
      .def("__exit__", [](GradMode& s, py::args) { if (!s.guards.empty()) s.guards.pop_back(); });
  m.def("realize", [](const std::vector<Tensor>& ts) { alk::realize(ts); }, py::arg("tensors"),
        "Computes several tensors in one schedule (shared work done once).", g);
  m.def("_live_buffers", [] { return py::make_tuple(alk::Buffer::live_count(), alk::Buffer::live_bytes()); },
        "(count, bytes) of alk buffers alive now (for leak tests).");
  m.def("memory_allocated", [] { return alk::Buffer::live_bytes(); },
        "Bytes of alk buffers alive now, every device together (torch.cuda.memory_allocated).", g);
  m.def("max_memory_allocated", [] { return alk::Buffer::peak_bytes(); },
        "The most bytes of alk buffers alive at once since the start or reset_peak_memory_stats() "
        "(torch.cuda.max_memory_allocated).", g);
  m.def("reset_peak_memory_stats", [] { alk::Buffer::reset_peak_bytes(); },
        "Starts max_memory_allocated() again from what is alive now.", g);
  m.def("release_cached_memory", &alk::release_cached_memory, "Returns cached free blocks to the system.", g);
  m.def("set_eager", &alk::set_eager_mode, py::arg("on"), "Realize after every op (as ALK_EAGER=1).");
  m.def("last_memory_plan", [] {
    alk::MemoryPlan p = alk::last_memory_plan();
    return py::dict(py::arg("planned_bytes") = p.planned_bytes, py::arg("naive_bytes") = p.naive_bytes,
                    py::arg("arena_bytes") = p.arena_bytes, py::arg("kernels") = p.kernels);
  }, "The most recent realize's memory plan.");
  struct Budget {
    int64_t bytes;
    std::unique_ptr<alk::MemoryBudget> guard;
  };
  py::class_<Budget>(m, "memory_budget", "with alk.memory_budget(bytes): plans needing more are refused up front.")
      .def(py::init([](int64_t b) { return Budget{b, nullptr}; }), py::arg("max_bytes"))
      .def("__enter__", [](Budget& b) { b.guard = std::make_unique<alk::MemoryBudget>(b.bytes); })
      .def("__exit__", [](Budget& b, py::args) { b.guard.reset(); });
}

}  // namespace alkpy
