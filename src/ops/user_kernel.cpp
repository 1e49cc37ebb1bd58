// alk::UserKernel (alk/user_kernel.h): checks a spec once, and each call's inputs and
// attributes before a node is recorded, so a body only ever sees the sizes its spec promised.
#include "alk/user_kernel.h"

#include <cctype>
#include <cmath>
#include <set>

#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

namespace {

bool identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return s.rfind("alk_", 0) != 0;  // alk's own names in the generated text start so
}

// Words one of the four languages reserves, which a tensor or attribute name would break in
// that language's text (GLSL's `out` and `buffer`, WGSL's `var`, C++'s `new`...): refused up
// front, not when a device first compiles the body. Not every reserved word of every
// language; a rarer one gives that compiler's error, mapped to the name's line.
bool reserved(const std::string& s) {
  static const std::set<std::string> words = {
      "in", "out", "inout", "buffer", "shared", "uniform", "layout", "attribute", "varying", "sample", "patch",
      "input", "output", "filter", "common", "partition", "active", "texture", "image", "sampler", "precise",
      "coherent", "volatile", "restrict", "readonly", "writeonly", "discard", "subroutine", "invariant", "smooth",
      "flat", "centroid", "highp", "mediump", "lowp", "precision", "struct", "switch", "default", "case", "break",
      "continue", "return", "while", "for", "do", "if", "else", "true", "false", "const", "void", "bool", "int",
      "uint", "float", "double", "half", "long", "short", "char", "unsigned", "signed", "auto", "static", "extern",
      "inline", "new", "delete", "this", "class", "template", "typename", "namespace", "using", "operator", "and",
      "or", "not", "xor", "register", "goto", "union", "enum", "typedef", "sizeof", "var", "let", "fn", "loop",
      "array", "ptr", "storage", "workgroup", "private", "function", "override", "alias", "enable", "diagnostic",
      "bitcast", "select", "i32", "u32", "f32", "f16", "i", "main", "vec2", "vec3", "vec4", "mat2", "mat3", "mat4"};
  return words.count(s) != 0 || s.rfind("gl_", 0) == 0 || s.rfind("__", 0) == 0;
}

bool body_dtype(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::I32 || t == DType::I64 || t == DType::U8 ||
         t == DType::Bool;
}

}  // namespace

UserKernel::UserKernel(KernelSpec spec, Loc loc) {
  spec.defined_at = loc;
  const std::string op = "user kernel " + spec.name;
  check(identifier(spec.name), "UserKernel", loc, "the name must be an identifier not starting with alk_, got '",
        spec.name, "'");
  check(!spec.body_for(KernelTarget::Cpp).empty(), op, loc,
        "needs a C++ body (the CPU runs it, and it is the reference the other targets are tested against)");
  check(spec.workgroup_size >= 1 && spec.workgroup_size <= 1024, op, loc, "workgroup_size must be in [1, 1024], got ",
        spec.workgroup_size);
  std::set<std::string> names;
  auto name = [&](const std::string& n, const char* what) {
    check(identifier(n), op, loc, what, " name must be an identifier not starting with alk_, got '", n, "'");
    check(!reserved(n), op, loc, what, " name '", n, "' is a reserved word of a kernel language (or the invocation i)");
    check(names.insert(n).second, op, loc, "the name '", n, "' is used twice");
    for (const char* suffix : {"_numel", "_size"})
      check(n.find(suffix) == std::string::npos, op, loc, "the name '", n, "' contains ", suffix,
            " (alk names the sizes so)");
  };
  for (const KernelTensor& t : spec.inputs) {
    name(t.name, "an input's");
    check(body_dtype(t.dtype), op, loc, "input ", t.name, ": ", dtype_name(t.dtype),
          " cannot be a body's element type (f32 f64 i32 i64 u8 bool)");
  }
  name(spec.output.name, "the output's");
  check(body_dtype(spec.output.dtype), op, loc, "output ", spec.output.name, ": ", dtype_name(spec.output.dtype),
        " cannot be a body's element type (f32 f64 i32 i64 u8 bool)");
  for (const KernelAttr& a : spec.attrs) {
    name(a.name, "an attribute's");
    check(a.dtype == DType::I32 || a.dtype == DType::I64 || a.dtype == DType::F32 || a.dtype == DType::F64, op, loc,
          "attribute ", a.name, " must be i32, i64, f32 or f64, got ", dtype_name(a.dtype));
  }
  check(!spec.inputs.empty() || spec.output_shape, op, loc, "a kernel without inputs needs an output_shape rule");
  spec_ = std::make_shared<const KernelSpec>(std::move(spec));
}

Tensor UserKernel::operator()(const std::vector<Tensor>& inputs, const std::vector<double>& attrs, Loc loc) const {
  const KernelSpec& s = *spec_;
  const std::string op = "user kernel " + s.name;
  check(inputs.size() == s.inputs.size(), op, loc, "takes ", s.inputs.size(), " inputs, got ", inputs.size());
  check(attrs.size() == s.attrs.size(), op, loc, "takes ", s.attrs.size(), " attributes, got ", attrs.size());
  std::vector<Tensor> args;
  std::vector<Shape> shapes;
  for (size_t j = 0; j < inputs.size(); ++j) {
    const KernelTensor& want = s.inputs[j];
    check_defined(inputs[j], op.c_str(), loc);
    check(inputs[j].dtype() == want.dtype, op, loc, "input ", want.name, " must be ", dtype_name(want.dtype), ", got ",
          dtype_name(inputs[j].dtype()));
    check(want.rank < 0 || inputs[j].dim() == want.rank, op, loc, "input ", want.name, " must have rank ", want.rank,
          ", got ", to_string(inputs[j].shape()));
    check(!inputs[j].requires_grad(), op, loc, "has no gradient: input ", want.name,
          " requires grad (detach() it, or write the backward as another kernel)");
    // Bodies index elements from 0, row-major: a view with an offset or strides becomes a copy.
    const Tensor& x = inputs[j];
    args.push_back(alias(x.contiguous(loc)));
    shapes.push_back(x.shape());
  }
  for (size_t j = 0; j < attrs.size(); ++j) {
    const KernelAttr& a = s.attrs[j];
    const double v = attrs[j];
    if (a.dtype == DType::I32 || a.dtype == DType::I64) {
      const double lo = a.dtype == DType::I32 ? -2147483648.0 : -9007199254740992.0;
      const double hi = a.dtype == DType::I32 ? 2147483647.0 : 9007199254740992.0;
      check(std::floor(v) == v && v >= lo && v <= hi, op, loc, "attribute ", a.name, " must be an ",
            dtype_name(a.dtype), " value, got ", v);
    } else {
      check(std::isfinite(v) || a.dtype == DType::F64, op, loc, "attribute ", a.name, " must be finite, got ", v);
    }
  }
  const Shape out_shape = s.output_shape ? s.output_shape(shapes, attrs) : shapes[0];
  for (int64_t d : out_shape) check(d >= 0, op, loc, "the output_shape rule gave ", to_string(out_shape));
  check(s.output.rank < 0 || static_cast<int>(out_shape.size()) == s.output.rank, op, loc, "the output must have rank ",
        s.output.rank, ", the output_shape rule gave ", to_string(out_shape));
  const int64_t count = s.invocations ? s.invocations(shapes, attrs) : numel(out_shape);
  check(count >= 0, op, loc, "the invocations rule gave ", count);
  Tensor out = make_node(OpId::UserKernel, out_shape, s.output.dtype, std::move(args),
                         UserKernelParams{spec_, attrs, count}, loc);
  return out;
}

}  // namespace alk
