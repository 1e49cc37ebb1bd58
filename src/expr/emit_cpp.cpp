// C++ spelling of a map kernel. The CPU backend evaluates the IR directly; this text
// is what its kernel cache hashes and what ALK_DEBUG=kernels prints, and it is kept
// compilable on its own (the golden files are checked with the host compiler).
#include <cmath>
#include <string>

#include "expr/emit.h"

namespace alk::expr::emit_detail {

namespace {

bool uses_fn(const Expr& e, Fn f) {
  for (const Node& x : e.nodes)
    if (x.fn == f) return true;
  return false;
}

std::string storage(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: return "uint8_t";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
    case DType::F16: case DType::BF16: return "uint16_t";
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

struct Cpp final : Lang {
  Cpp() { indent = "    "; }
  Rewrites rewrites() const override { return {}; }  // C++ has every function

  std::string type(Type t) const override {
    switch (t) {
      case Type::Bool: return "bool";
      case Type::I64: return "int64_t";
      case Type::F32: return "float";
      case Type::F64: return "double";
    }
    return "?";
  }

  std::string literal(double v, Type t) const override {
    switch (t) {
      case Type::Bool: return v != 0 ? "true" : "false";
      case Type::I64: return "int64_t{" + std::to_string(static_cast<int64_t>(v)) + "}";
      case Type::F32: return float_text(v, t) + "f";
      case Type::F64: return float_text(v, t);
    }
    return "?";
  }

  std::string special(double v, Type t) const override {
    std::string lim = "std::numeric_limits<" + type(t) + ">::";
    if (std::isnan(v)) return lim + "quiet_NaN()";
    return v > 0 ? lim + "infinity()" : "(-" + lim + "infinity())";
  }

  std::string fn_name(Fn f, Type t) const override {
    bool flt = t == Type::F32 || t == Type::F64;
    switch (f) {
      case Fn::Exp: return "std::exp";
      case Fn::Log: return "std::log";
      case Fn::Log1p: return "std::log1p";
      case Fn::Expm1: return "std::expm1";
      case Fn::Sqrt: return "std::sqrt";
      case Fn::Rsqrt: return "alk_rsqrt";
      case Fn::Sin: return "std::sin";
      case Fn::Cos: return "std::cos";
      case Fn::Tanh: return "std::tanh";
      case Fn::Erf: return "std::erf";
      case Fn::Abs: return flt ? "std::fabs" : "std::abs";
      case Fn::Floor: return "std::floor";
      case Fn::Ceil: return "std::ceil";
      case Fn::Round: return "std::nearbyint";  // half to even in the default rounding mode
      case Fn::Pow: return "std::pow";
      case Fn::RoundBf16:  // spelled by the walk (emit_common.cpp)
      case Fn::Input: case Fn::Const: case Fn::Neg: case Fn::Not: case Fn::Cast: case Fn::Max: case Fn::Min: case Fn::Add: case Fn::Sub:
      case Fn::Mul: case Fn::Div: case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne:
      case Fn::And: case Fn::Or: case Fn::Select: return "";
    }
    return "";
  }

  std::string f32_bits(const std::string& a) const override { return "__builtin_bit_cast(unsigned, " + a + ")"; }
  std::string f32_from_bits(const std::string& u) const override { return "__builtin_bit_cast(float, " + u + ")"; }
  std::string cast(Type to, const std::string& a) const override {
    return "static_cast<" + type(to) + ">(" + a + ")";
  }

  std::string let(Type t, const std::string& name, const std::string& value) const override {
    return "const " + type(t) + " " + name + " = " + value + ";";
  }

  std::string load(int k, DType s, const std::string& idx) const override {
    std::string in = "in" + std::to_string(k), raw = in + "_data[" + idx + "]";
    std::string t = type(compute_type(s));
    switch (s) {
      case DType::Bool: return "const bool " + in + " = " + raw + " != 0;";
      case DType::F16: return "const float " + in + " = alk::f16_to_f32(" + raw + ");";
      case DType::BF16: return "const float " + in + " = alk::bf16_to_f32(" + raw + ");";
      case DType::U8: case DType::I32: case DType::I64: case DType::F32: case DType::F64:
        return "const " + t + " " + in + " = " + raw + ";";
    }
    return "";
  }

  std::string store(DType s, const std::string& v) const override {
    switch (s) {
      case DType::F16: return "out_data[i] = alk::f32_to_f16(" + v + ");";
      case DType::BF16: return "out_data[i] = alk::f32_to_bf16(" + v + ");";
      // Integer stores wrap to the storage width (modular conversion since C++20).
      case DType::Bool: case DType::U8: case DType::I32: return "out_data[i] = static_cast<" + storage(s) + ">(" + v + ");";
      case DType::I64: case DType::F32: case DType::F64: return "out_data[i] = " + v + ";";
    }
    return "";
  }

  std::string offset_call(int k) const override {
    return "alk_offset(i, p.shape, p.strides[" + std::to_string(k) + "], p.rank)";
  }

  std::string prologue(const Expr& original, const Expr& lowered, const MapSignature& sig,
                       const std::vector<bool>& used) const override {
    bool half = sig.output == DType::F16 || sig.output == DType::BF16;
    for (DType d : sig.inputs) half = half || d == DType::F16 || d == DType::BF16;
    std::string s = header_comment(original, sig, "//");
    s += "#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <cstdlib>\n#include <limits>\n";
    if (half) s += "\n#include \"core/half.h\"\n";
    s += "\nstruct " + sig.name + "_params {\n  int64_t n, rank;\n  int64_t shape[8];\n";
    s += "  int64_t strides[" + std::to_string(std::max<size_t>(1, sig.inputs.size())) + "][8];  // elements\n};\n\n";
    s += "// Element offset of an input for output element i: unravel i over the output shape.\n"
         "static inline int64_t alk_offset(int64_t i, const int64_t* shape, const int64_t* strides, int64_t rank) {\n"
         "  int64_t off = 0;\n"
         "  for (int64_t d = rank - 1; d >= 0; --d) {\n"
         "    off += (i % shape[d]) * strides[d];\n"
         "    i /= shape[d];\n"
         "  }\n"
         "  return off;\n"
         "}\n\n";
    if (uses_fn(lowered, Fn::Rsqrt))
      s += "static inline float alk_rsqrt(float x) { return 1.0f / std::sqrt(x); }\n"
           "static inline double alk_rsqrt(double x) { return 1.0 / std::sqrt(x); }\n\n";
    s += "void " + sig.name + "(const void* const* in, void* out, int64_t begin, int64_t end, const " + sig.name +
         "_params& p) {\n";
    bool any = false;
    for (size_t k = 0; k < sig.inputs.size(); ++k) {
      if (!used[k]) continue;
      any = true;
      std::string st = storage(sig.inputs[k]);
      s += "  const " + st + "* in" + std::to_string(k) + "_data = static_cast<const " + st + "*>(in[" +
           std::to_string(k) + "]);\n";
    }
    if (!any) s += "  (void)in;\n  (void)p;\n";
    std::string so = storage(sig.output);
    s += "  " + so + "* out_data = static_cast<" + so + "*>(out);\n";
    s += "  for (int64_t i = begin; i < end; ++i) {\n";
    return s;
  }

  std::string epilogue() const override { return "  }\n}\n"; }
};

}  // namespace

std::unique_ptr<Lang> make_cpp() { return std::make_unique<Cpp>(); }

}  // namespace alk::expr::emit_detail
