// GLSL (Vulkan compute, #version 450) spelling of a map kernel. GLSL has no erf,
// log1p or expm1 and no transcendental functions on double: those are rewritten in
// the IR (emit_common.cpp), except pow and round on double (glsl_f64_helpers below). 8/16-bit and 64-bit integer storage use the standard
// Vulkan extensions, enabled only when the kernel needs them.
#include <cmath>
#include <string>

#include "expr/emit.h"

namespace alk::expr::emit_detail {

std::string glsl_f64_helpers(const Expr& e);

namespace {


struct Glsl final : Lang {
  Glsl() { indent = "    "; }
  Rewrites rewrites() const override {
    Rewrites r;
    r.expand_erf = r.expand_log1p = r.expand_expm1 = true;
    r.f64_math_in_f32 = true;
    r.expand_pow = true;
    return r;
  }

  // Rotations in 32-bit uint, the u32 they are defined on: the i64 spelling (mask, shifts, or)
  // crashes lavapipe's LLVM 15 (a SIGFPE in its DAG combiner, compiling the shader).
  std::string own_spelling(const Node& x, const std::string* a) const override {
    if ((x.fn != Fn::Rotl && x.fn != Fn::Rotr) || x.type != Type::I64) return "";
    const std::string u = "uint(" + a[0] + ")", r = "(uint(" + a[1] + ") & 31u)";
    const bool left = x.fn == Fn::Rotl;
    return "int64_t(uint64_t((" + u + (left ? " << " : " >> ") + r + ") | (" + u + (left ? " >> " : " << ") +
           "((32u - " + r + ") & 31u))))";
  }

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
      case Type::I64: return std::to_string(static_cast<int64_t>(v)) + "l";
      case Type::F32: return float_text(v, t);
      case Type::F64: return float_text(v, t) + "lf";
    }
    return "?";
  }

  std::string special(double v, Type t) const override {
    std::string s = std::isnan(v) ? "uintBitsToFloat(0x7fc00000u)" : "uintBitsToFloat(0x7f800000u)";
    if (t == Type::F64) s = "double(" + s + ")";
    return v < 0 ? "(-" + s + ")" : s;
  }

  std::string fn_name(Fn f, Type t) const override {
    switch (f) {
      case Fn::Exp: return "exp";
      case Fn::Log: return "log";
      case Fn::Sqrt: return "sqrt";
      case Fn::Rsqrt: return "inversesqrt";
      case Fn::Sin: return "sin";
      case Fn::Cos: return "cos";
      case Fn::Tanh: return "tanh";
      case Fn::Abs: return "abs";
      case Fn::Floor: return "floor";
      case Fn::Ceil: return "ceil";
      // GLSL round() may round halves either way; roundEven on double is wrong on Mesa 22.3.6's
      // lavapipe (-3.5 -> -3), so doubles take a helper.
      case Fn::Round: return t == Type::F64 ? "alk_round_f64" : "roundEven";
      case Fn::Pow: return t == Type::F64 ? "alk_pow_f64" : "pow";
      case Fn::Log1p: case Fn::Expm1: case Fn::Erf: return "";  // rewritten in the IR
      case Fn::RoundBf16:  // spelled by the walk (emit_common.cpp)
      case Fn::Input: case Fn::Const: case Fn::Neg: case Fn::Not: case Fn::Cast: case Fn::Max: case Fn::Min: case Fn::Add: case Fn::Sub:
      case Fn::Mul: case Fn::Div: case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne:
      case Fn::And: case Fn::Or: case Fn::Select: case Fn::BitNot: case Fn::BitAnd: case Fn::BitOr: case Fn::BitXor:
      case Fn::Shl: case Fn::Shr: case Fn::Rotl: case Fn::Rotr: return "";
    }
    return "";
  }

  std::string is_nan(const std::string& a) const override { return "isnan(" + a + ")"; }

  std::string cast(Type to, const std::string& a) const override { return type(to) + "(" + a + ")"; }
  std::string f32_bits(const std::string& a) const override { return "floatBitsToUint(" + a + ")"; }
  std::string f32_from_bits(const std::string& u) const override { return "uintBitsToFloat(" + u + ")"; }

  std::string let(Type t, const std::string& name, const std::string& value) const override {
    return type(t) + " " + name + " = " + value + ";";
  }

  std::string load(int k, DType s, const std::string& idx) const override {
    std::string in = "in" + std::to_string(k), raw = in + "_data[" + idx + "]";
    // 8/16-bit storage types only convert to 32-bit ones, so go through uint/float.
    switch (s) {
      case DType::Bool: return "bool " + in + " = uint(" + raw + ") != 0u;";
      case DType::U8: return "int64_t " + in + " = int64_t(uint(" + raw + "));";
      // i32 -> i64 as an explicit sign extension: Mesa 22.3's lavapipe compares
      // int64_t(int) with a constant as if unsigned (relu, sign, erf of negative i32
      // inputs went wrong); the two halves built by hand compile correctly everywhere.
      case DType::I32: return "int " + in + "_raw = " + raw + ";\n" + "int64_t " + in + " = packInt2x32(ivec2(" + in + "_raw, " + in + "_raw >> 31));";
      case DType::F16: return "float " + in + " = float(" + raw + ");";
      case DType::BF16: return "float " + in + " = uintBitsToFloat(uint(" + raw + ") << 16);";
      case DType::I64: case DType::F32: case DType::F64: return type(compute_type(s)) + " " + in + " = " + raw + ";";
    }
    return "";
  }

  std::string store(DType s, const std::string& v) const override {
    switch (s) {
      case DType::Bool: return "out_data[o] = uint8_t(" + v + " ? 1u : 0u);";
      case DType::U8: return "out_data[o] = uint8_t(uint(" + v + ") & 0xffu);";
      case DType::I32: return "out_data[o] = int(" + v + ");";
      case DType::F16: return "out_data[o] = float16_t(" + v + ");";
      case DType::BF16: return "out_data[o] = uint16_t(alk_f32_to_bf16(" + v + "));";
      case DType::I64: case DType::F32: case DType::F64: return "out_data[o] = " + v + ";";
    }
    return "";
  }

  std::string offset_call(int k) const override { return "alk_offset(i, " + std::to_string(k) + "u)"; }

  std::string prologue(const Expr& original, const Expr& lowered, const MapSignature& sig,
                       const std::vector<bool>& used) const override {
    bool b8 = false, b16 = false, i64 = false, f64 = false;
    auto note = [&](DType d) {
      b8 = b8 || d == DType::Bool || d == DType::U8;
      b16 = b16 || d == DType::F16 || d == DType::BF16;
      i64 = i64 || d == DType::I64;
    };
    for (DType d : sig.inputs) note(d);
    note(sig.output);
    for (const Node& x : lowered.nodes) i64 = i64 || x.type == Type::I64, f64 = f64 || x.type == Type::F64;
    for (const Node& x : original.nodes) f64 = f64 || x.type == Type::F64;

    std::string s = "#version 450\n";
    if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
    if (b8) s += "#extension GL_EXT_shader_8bit_storage : require\n";
    if (i64) s += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n";
    s += "#extension GL_EXT_control_flow_attributes : enable\n";
    s += header_comment(original, sig, "//");
    if (f64) s += "// note: GLSL has no exp/log/sin/cos/tanh on double: those are computed in float here\n";
    s += "layout(local_size_x = 256) in;\n\n";
    int binding = 0;
    for (size_t k = 0; k < sig.inputs.size(); ++k)
      s += "layout(std430, binding = " + std::to_string(binding++) + ") readonly buffer In" + std::to_string(k) +
           " { " + glsl_storage_type(sig.inputs[k]) + " in" + std::to_string(k) + "_data[]; };\n";
    s += "layout(std430, binding = " + std::to_string(binding++) + ") writeonly buffer Out { " +
         glsl_storage_type(sig.output) + " out_data[]; };\n";
    // 16-byte views of the same buffers, for the vector loop (32-bit operands only).
    if (vec4_type(sig.output)) {
      bool all = true;
      for (size_t k = 0; k < sig.inputs.size(); ++k)
        all = all && (!used[k] || ((vec4_type(sig.inputs[k]) || splat_only(sig.inputs[k])) && k < 16));
      if (all) {
        for (size_t k = 0; k < sig.inputs.size(); ++k)
          if (used[k] && vec4_type(sig.inputs[k]))
            s += "layout(std430, binding = " + std::to_string(k) + ") readonly buffer In" + std::to_string(k) +
                 "V { " + vec4_type(sig.inputs[k]) + " in" + std::to_string(k) + "_v4[]; };\n";
        s += "layout(std430, binding = " + std::to_string(sig.inputs.size()) + ") writeonly buffer OutV { " +
             vec4_type(sig.output) + " out_v4[]; };\n";
      }
    }
    // Push constants when the block fits the budget every device has (emit.h), else a buffer.
    const size_t k_in = sig.inputs.size();
    if (glsl_params_in_push_constants(k_in))
      s += "layout(push_constant) uniform Params {\n";
    else
      s += "layout(std430, binding = " + std::to_string(binding) + ") readonly buffer Params {\n";
    s += "  uint n;\n  uint rank;\n  uint shape[8];\n"
         "  int strides[" + std::to_string(8 * std::max<size_t>(1, k_in)) +
         "];  // input k, dim d at [8 * k + d], in elements\n"
         "  uint offset[" + std::to_string(k_in + 1) + "];  // first element: input k at [k], the output at [" +
         std::to_string(k_in) + "]\n} p;\n\n";
    // Rank 1 (the host merges dims every view steps through evenly: any contiguous or
    // scalar-broadcast operand) takes no integer divides, which are slow on GPUs and run
    // lane by lane on CPU implementations such as lavapipe.
    // p.rank's low byte is the rank; the bits above say how the launch may use the vector
    // loop (vector_loop_open), so the block keeps the layout every GPU language shares.
    s += "// Element offset of input k for output element i: unravel i over the output shape.\n"
         "uint alk_offset(uint i, uint k) {\n"
         "  if ((p.rank & 0xffu) == 1u) return p.offset[k] + uint(int(i) * p.strides[8u * k]);\n"
         "  int off = 0;\n"
         "  for (int d = int(p.rank & 0xffu) - 1; d >= 0; --d) {\n"
         "    off += int(i % p.shape[d]) * p.strides[8u * k + uint(d)];\n"
         "    i /= p.shape[d];\n"
         "  }\n"
         "  return p.offset[k] + uint(off);\n"
         "}\n\n";
    if (sig.output == DType::BF16)
      s += "// Round to nearest even; NaN stays a (quiet) NaN.\n"
           "uint alk_f32_to_bf16(float v) {\n"
           "  uint b = floatBitsToUint(v);\n"
           "  if (isnan(v)) return (b >> 16) | 0x40u;\n"
           "  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;\n"
           "}\n\n";
    if (const std::string h = glsl_f64_helpers(lowered); !h.empty()) s += h + "\n";
    s += "void main() {\n";
    s += "  uint step = gl_NumWorkGroups.x * 256u;\n";
    s += "  uint alk_first = 0u;  // elements below it were done by the vector loop\n";
    return s;
  }

  std::string loop_open() const override {
    return "  for (uint i = alk_first + gl_GlobalInvocationID.x; i < p.n; i += step) {\n"
           "    uint o = p.offset[" + std::to_string(output_slot_) + "] + i;\n";
  }
  // An input with one value for the launch (uniform_inputs; Vulkan passes none yet): its one
  // element, loaded before the loops.
  std::string uniform_offset(int k) const override { return "p.offset[" + std::to_string(k) + "]"; }

  // The vector loop (for kernels whose operands are all 32-bit: vec4/ivec4 aliases of their
  // buffers), taken when the launch sets bit 8 of p.rank: four elements per iteration, each
  // per-element operand read with one 16-byte load, or, where bit 16 + k is set (input k
  // constant along the innermost dim: a bias, a scalar), one scalar load splatted. The host
  // (src/backend/vulkan/map_kernel.cpp) sets it only where every vector operand's element 0
  // of each vector is 16-byte aligned and no vector straddles a row. Why: lavapipe runs each
  // storage-buffer access as a loop over the SIMD lanes, so one vec4 access costs about what
  // a float access does (bench/vulkan/NOTES.md); on GPUs it is the usual 16-byte access.
  // The per-element statements (load/store) are unchanged: inside, in<k>_data and out_data
  // name the vector's registers and o the element in it.
  std::string vector_loop_open(const MapSignature& sig, const std::vector<bool>& per_element) const override {
    output_slot_ = sig.inputs.size();
    if (!vec4_type(sig.output)) return "";
    for (size_t k = 0; k < per_element.size(); ++k)
      if (per_element[k] && (!(vec4_type(sig.inputs[k]) || splat_only(sig.inputs[k])) || k >= 16)) return "";
    std::string s = "  if ((p.rank & 0x100u) != 0u) {  // alk_vec_path\n"
                    "    uint nv = p.n / 4u;\n"
                    "    for (uint iv = gl_GlobalInvocationID.x; iv < nv; iv += step) {\n"
                    "      uint i = 4u * iv;\n";
    for (size_t k = 0; k < per_element.size(); ++k)
      if (per_element[k] && splat_only(sig.inputs[k])) {
        const std::string n = std::to_string(k), t = splat_type(sig.inputs[k]);
        s += "      " + t + " alk_v" + n + " = " + t + "(in" + n + "_data[alk_offset(i, " + n + "u)]);\n";
      } else if (per_element[k]) {
        const std::string n = std::to_string(k), t = vec4_type(sig.inputs[k]);
        s += "      " + t + " alk_v" + n + ";\n      if ((p.rank & " + std::to_string(0x10000u << k) + "u) != 0u) alk_v" + n +
             " = " + t + "(in" + n + "_data[alk_offset(i, " + n + "u)]);\n      else alk_v" + n + " = in" + n +
             "_v4[alk_offset(i, " + n + "u) / 4u];\n";
      }
    s += "      {\n";
    for (size_t k = 0; k < per_element.size(); ++k)
      if (per_element[k] && splat_only(sig.inputs[k])) {
        const std::string n = std::to_string(k), t = splat_type(sig.inputs[k]);
        s += "        " + t + " in" + n + "_data[4] = " + t + "[4](alk_v" + n + ", alk_v" + n + ", alk_v" + n + ", alk_v" + n +
             ");\n";
      } else if (per_element[k]) {
        s += "        " + std::string(vec4_type(sig.inputs[k])) + " in" + std::to_string(k) + "_data = alk_v" +
             std::to_string(k) + ";\n";
      }
    s += "        " + std::string(vec4_type(sig.output)) + " out_data;\n"
         "        [[unroll]] for (uint o = 0u; o < 4u; ++o) {\n";
    return s;
  }
  std::string vector_loop_close(const MapSignature& sig) const override {
    return "        }\n        out_v4[(p.offset[" + std::to_string(sig.inputs.size()) +
           "] + i) / 4u] = out_data;\n      }\n    }\n    alk_first = nv * 4u;\n  }\n";
  }

 private:
  // The 4-element vector a 32-bit storage type loads as, or null.
  static const char* vec4_type(DType d) {
    if (d == DType::F32) return "vec4";
    if (d == DType::I32) return "ivec4";
    return nullptr;
  }
  // Other types enter the vector loop only as splats (an optimizer's f64 scalars, a bool
  // mask constant along the row): the host never sets the vector bit for a per-element one.
  // Their registers hold the stored value widened to a type GLSL allows in locals (8/16-bit
  // types are storage-only), which load() converts from as it does from the buffer.
  static bool splat_only(DType d) { return !vec4_type(d); }
  static const char* splat_type(DType d) {
    switch (d) {
      case DType::F64: return "double";
      case DType::I64: return "int64_t";
      case DType::F16: return "float";
      default: return "uint";  // bool, u8, bf16 bits
    }
  }
  mutable size_t output_slot_ = 0;

 public:

  std::string epilogue() const override { return "  }\n}\n"; }
};

}  // namespace

std::unique_ptr<Lang> make_glsl() { return std::make_unique<Glsl>(); }

// The helpers an expression's double math needs, each guarded so several emitted functions
// in one shader define it once.
// - GLSL has no pow on double. x^y for x >= 0 (build_pow handles signs and zero): by squaring
//   in double where y is an integer below 2^24 (relative error ~|y| ulps: the optimizers'
//   beta^t to ~1e-13 where f32 gave ~1e-7), else through f32 like exp and log.
// - Round half to even on double without roundEven (miscompiled by Mesa 22.3.6's lavapipe):
//   floor(x + 0.5) is exact below 2^52 (above it every double is an integer), and a tie that
//   landed on an odd integer goes to the even one below.
std::string glsl_f64_helpers(const Expr& e) {
  bool pow = false, round = false;
  for (const Node& x : e.nodes) {
    pow = pow || (x.fn == Fn::Pow && x.type == Type::F64);
    round = round || (x.fn == Fn::Round && x.type == Type::F64);
  }
  std::string s;
  if (round)
    s += R"(#ifndef ALK_ROUND_F64
#define ALK_ROUND_F64
double alk_round_f64(double x) {
  if (abs(x) >= 4503599627370496.0lf) return x;
  double r = floor(x + 0.5lf);
  if (r - x == 0.5lf && r != 2.0lf * floor(r * 0.5lf)) r -= 1.0lf;
  return r;
}
#endif
)";
  if (!pow) return s;
  return s + R"(#ifndef ALK_POW_F64
#define ALK_POW_F64
double alk_pow_f64(double x, double y) {
  const double n = abs(y);
  if (n == floor(n) && n < 16777216.0lf) {
    double r = 1.0lf, b = x;
    for (uint e = uint(n); e != 0u; e >>= 1u) {
      if ((e & 1u) != 0u) r *= b;
      b *= b;
    }
    return y < 0.0lf ? 1.0lf / r : r;
  }
  return double(pow(float(x), float(y)));
}
#endif
)";
}

}  // namespace alk::expr::emit_detail

namespace alk::expr {

std::string glsl_storage_type(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: return "uint8_t";
    case DType::I32: return "int";
    case DType::I64: return "int64_t";
    case DType::F16: return "float16_t";
    case DType::BF16: return "uint16_t";  // bit patterns: the high half of an f32
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

}  // namespace alk::expr
