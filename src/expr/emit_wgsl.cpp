// WGSL spelling of a map kernel. WGSL lacks erf, log1p, expm1 and every 64-bit type:
// the IR is rewritten first (f64 -> f32; i64 values are spelled i32 since the IR has
// no 32-bit integer type), and a comment in the output records the narrowing. Storage
// has no 8- or 16-bit element types, so bool/u8/f16/bf16 buffers are arrays of u32
// words; outputs of those types are written with atomics on the word, since
// neighbouring invocations share it. Under a WgslNativeF16 scope (expr/wgsl_f16.h) f16 is
// array<f16> instead.
#include <cmath>
#include <string>

#include "expr/emit.h"
#include "expr/wgsl_f16.h"

namespace alk::expr {

namespace {
thread_local bool native_f16 = false;
}  // namespace

WgslNativeF16::WgslNativeF16() : previous_(native_f16) { native_f16 = true; }
WgslNativeF16::~WgslNativeF16() { native_f16 = previous_; }
bool WgslNativeF16::active() { return native_f16; }

}  // namespace alk::expr

namespace alk::expr::emit_detail {

namespace {

bool native(DType t) { return t == DType::F16 && native_f16; }
bool packed(DType t) { return dtype_size(t) < 4 && !native(t); }

std::string storage(DType t) {
  if (native(t)) return "f16";
  switch (t) {
    case DType::Bool: case DType::U8: case DType::F16: case DType::BF16: return "u32";
    case DType::I32: case DType::I64: return "i32";  // i64 narrowed
    case DType::F32: case DType::F64: return "f32";  // f64 narrowed
  }
  return "?";
}

struct Wgsl final : Lang {
  Wgsl() { indent = "    "; }
  Rewrites rewrites() const override {
    Rewrites r;
    r.expand_erf = r.expand_log1p = r.expand_expm1 = true;
    r.f64_to_f32 = true;
    r.expand_pow = true;
    return r;
  }

  std::string function_head(const std::string& name, const std::vector<Type>& params, Type ret) const override {
    std::string s = "fn " + name + "(";
    for (size_t k = 0; k < params.size(); ++k) s += (k ? ", in" : "in") + std::to_string(k) + ": " + type(params[k]);
    return s + ") -> " + type(ret) + " {";
  }

  std::string type(Type t) const override {
    switch (t) {
      case Type::Bool: return "bool";
      case Type::I64: return "i32";
      case Type::F32: case Type::F64: return "f32";
    }
    return "?";
  }

  std::string literal(double v, Type t) const override {
    switch (t) {
      case Type::Bool: return v != 0 ? "true" : "false";
      case Type::I64: return std::to_string(static_cast<int64_t>(v)) + "i";
      case Type::F32: case Type::F64: return float_text(v, Type::F32) + "f";
    }
    return "?";
  }

  // A constant-evaluated inf/NaN is a WGSL shader-creation error ("value inf cannot be
  // represented as 'f32'), so they are read from module-scope private variables, which
  // are not constant expressions (declared by the prologue; a caller of emit_function
  // declares them when the text mentions them: src/webgpu/wgsl_templates.cpp).
  std::string special(double v, Type) const override {
    std::string s = std::isnan(v) ? "bitcast<f32>(alk_nan_bits)" : "bitcast<f32>(alk_inf_bits)";
    return v < 0 ? "(-" + s + ")" : s;
  }

  std::string fn_name(Fn f, Type) const override {
    switch (f) {
      case Fn::Exp: return "exp";
      case Fn::Log: return "log";
      case Fn::Sqrt: return "sqrt";
      case Fn::Rsqrt: return "inverseSqrt";
      case Fn::Sin: return "sin";
      case Fn::Cos: return "cos";
      case Fn::Tanh: return "tanh";
      case Fn::Abs: return "abs";
      case Fn::Floor: return "floor";
      case Fn::Ceil: return "ceil";
      case Fn::Round: return "round";  // WGSL's round is half to even
      case Fn::Pow: return "pow";
      case Fn::Log1p: case Fn::Expm1: case Fn::Erf: return "";  // rewritten in the IR
      case Fn::RoundBf16:  // spelled by the walk (emit_common.cpp)
      case Fn::Input: case Fn::Const: case Fn::Neg: case Fn::Not: case Fn::Cast: case Fn::Max: case Fn::Min: case Fn::Add: case Fn::Sub:
      case Fn::Mul: case Fn::Div: case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne:
      case Fn::And: case Fn::Or: case Fn::Select: case Fn::BitNot: case Fn::BitAnd: case Fn::BitOr: case Fn::BitXor:
      case Fn::Shl: case Fn::Shr: case Fn::Rotl: case Fn::Rotr: return "";
    }
    return "";
  }

  // i64 is narrowed to i32 here, so shifts are 32 bits wide, and WGSL shifts by a u32.
  std::string own_spelling(const Node& x, const std::string* a) const override {
    if (x.type != Type::I64) return "";
    if (x.fn == Fn::Rotl || x.fn == Fn::Rotr) {  // on the u32 bit pattern of the i32
      const std::string u = "bitcast<u32>(" + a[0] + ")", r = "(bitcast<u32>(" + a[1] + ") & 31u)";
      const bool left = x.fn == Fn::Rotl;
      return "bitcast<i32>((" + u + (left ? " << " : " >> ") + r + ") | (" + u + (left ? " >> " : " << ") +
             "((32u - " + r + ") & 31u)))";
    }
    if (x.fn != Fn::Shl && x.fn != Fn::Shr) return "";
    const std::string in_range = "(" + a[1] + " >= 0i && " + a[1] + " < 32i)";
    const std::string shifted = "(" + a[0] + (x.fn == Fn::Shl ? " << " : " >> ") + "u32(" + a[1] + "))";
    const std::string beyond = x.fn == Fn::Shl ? "0i" : "select(0i, -1i, " + a[0] + " < 0i)";
    return "select(" + beyond + ", " + shifted + ", " + in_range + ")";
  }

  std::string cast(Type to, const std::string& a) const override { return type(to) + "(" + a + ")"; }
  std::string f32_bits(const std::string& a) const override { return "bitcast<u32>(" + a + ")"; }
  std::string f32_from_bits(const std::string& u) const override { return "bitcast<f32>(" + u + ")"; }

  std::string select(const std::string& c, const std::string& a, const std::string& b) const override {
    return "select(" + b + ", " + a + ", " + c + ")";  // WGSL: select(false_value, true_value, cond)
  }

  std::string let(Type t, const std::string& name, const std::string& value) const override {
    return "let " + name + ": " + type(t) + " = " + value + ";";
  }

  std::string load(int k, DType s, const std::string& idx) const override {
    std::string in = "in" + std::to_string(k), buf = in + "_data", at = in + "_at";
    std::string pre = "let " + at + " = " + idx + ";\n";
    std::string byte = "((" + buf + "[" + at + " >> 2u] >> ((" + at + " & 3u) * 8u)) & 0xffu)";
    std::string half = "((" + buf + "[" + at + " >> 1u] >> ((" + at + " & 1u) * 16u)) & 0xffffu)";
    if (native(s)) return "let " + in + ": f32 = f32(" + buf + "[" + idx + "]);";
    switch (s) {
      case DType::Bool: return pre + "let " + in + ": bool = " + byte + " != 0u;";
      case DType::U8: return pre + "let " + in + ": i32 = i32" + byte + ";";
      case DType::F16: return pre + "let " + in + ": f32 = unpack2x16float(" + half + ").x;";
      case DType::BF16: return pre + "let " + in + ": f32 = bitcast<f32>(" + half + " << 16u);";
      case DType::I32: case DType::I64: case DType::F32: case DType::F64:
        return "let " + in + ": " + storage(s) + " = " + buf + "[" + idx + "];";
    }
    return "";
  }

  std::string store(DType s, const std::string& v) const override {
    if (native(s)) return "out_data[o] = f16(" + v + ");";
    switch (s) {
      case DType::Bool: return "alk_store_bits(o, 8u, select(0u, 1u, " + v + "));";
      case DType::U8: return "alk_store_bits(o, 8u, u32(" + v + ") & 0xffu);";  // wraps, as C++ does
      case DType::F16: return "alk_store_bits(o, 16u, pack2x16float(vec2<f32>(" + v + ", 0.0f)) & 0xffffu);";
      case DType::BF16: return "alk_store_bits(o, 16u, alk_f32_to_bf16(" + v + "));";
      case DType::I32: case DType::I64: case DType::F32: case DType::F64: return "out_data[o] = " + v + ";";
    }
    return "";
  }

  std::string offset_call(int k) const override { return "alk_offset(i, " + std::to_string(k) + "u)"; }

  std::string prologue(const Expr& original, const Expr& lowered, const MapSignature& sig,
                       const std::vector<bool>&) const override {
    bool wide = sig.output == DType::F64 || sig.output == DType::I64;
    for (DType d : sig.inputs) wide = wide || d == DType::F64 || d == DType::I64;
    for (const Node& x : original.nodes) wide = wide || x.type == Type::F64 || x.type == Type::I64;

    bool half = native(sig.output);
    for (DType d : sig.inputs) half = half || native(d);
    std::string s = std::string(half ? "enable f16;  // WebGPU's shader-f16: f16 buffers are array<f16>\n" : "") +
                    header_comment(original, sig, "//");
    if (wide)
      s += "// note: WGSL has no 64-bit types: f64 is narrowed to f32 and i64 to i32 here, in buffers too\n";
    bool special = false;
    for (const Node& x : lowered.nodes) special = special || (x.fn == Fn::Const && !std::isfinite(x.value));
    if (special)
      s += "\nvar<private> alk_inf_bits: u32 = 0x7f800000u;\nvar<private> alk_nan_bits: u32 = 0x7fc00000u;\n";
    s += "\nstruct Params {\n  n: u32,\n  rank: u32,\n  shape: array<u32, 8>,\n";
    s += "  strides: array<i32, " + std::to_string(8 * std::max<size_t>(1, sig.inputs.size())) +
         ">,  // input k, dim d at [8 * k + d], in elements\n";
    s += "  offset: array<u32, " + std::to_string(sig.inputs.size() + 1) + ">,  // first element: input k at [k], the output at [" +
         std::to_string(sig.inputs.size()) + "]\n}\n\n";
    int binding = 0;
    for (size_t k = 0; k < sig.inputs.size(); ++k)
      s += "@group(0) @binding(" + std::to_string(binding++) + ") var<storage, read> in" + std::to_string(k) +
           "_data: array<" + storage(sig.inputs[k]) + ">;\n";
    std::string out = packed(sig.output) ? "atomic<u32>" : storage(sig.output);
    s += "@group(0) @binding(" + std::to_string(binding++) + ") var<storage, read_write> out_data: array<" + out +
         ">;\n";
    s += "@group(0) @binding(" + std::to_string(binding) + ") var<storage, read> p: Params;\n\n";
    s += "// Element offset of input k for output element i: unravel i over the output shape.\n"
         "fn alk_offset(i0: u32, k: u32) -> u32 {\n"
         "  if (p.rank == 1u) { return p.offset[k] + u32(i32(i0) * p.strides[8u * k]); }  // no division\n"
         "  var i = i0;\n"
         "  var off = 0i;\n"
         "  for (var d = i32(p.rank) - 1; d >= 0; d--) {\n"
         "    off += i32(i % p.shape[d]) * p.strides[8u * k + u32(d)];\n"
         "    i /= p.shape[d];\n"
         "  }\n"
         "  return p.offset[k] + u32(off);\n"
         "}\n\n";
    if (packed(sig.output))
      s += "// Writes the low `bits` bits of v as element i of a packed output; other invocations\n"
           "// write the word's other lanes concurrently, hence atomics on disjoint bits.\n"
           "fn alk_store_bits(i: u32, bits: u32, v: u32) {\n"
           "  let per_word = 32u / bits;\n"
           "  let shift = (i % per_word) * bits;\n"
           "  let mask = ((1u << bits) - 1u) << shift;\n"
           "  atomicAnd(&out_data[i / per_word], ~mask);\n"
           "  atomicOr(&out_data[i / per_word], (v << shift) & mask);\n"
           "}\n\n";
    if (sig.output == DType::BF16)
      s += "// Round to nearest even; NaN stays a (quiet) NaN.\n"
           "fn alk_f32_to_bf16(v: f32) -> u32 {\n"
           "  let b = bitcast<u32>(v);\n"
           "  if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }\n"
           "  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;\n"
           "}\n\n";
    s += "@compute @workgroup_size(256)\n";
    s += "fn " + sig.name + "(@builtin(global_invocation_id) gid: vec3<u32>,\n";
    s += std::string(sig.name.size() + 4, ' ') + "@builtin(num_workgroups) groups: vec3<u32>) {\n";
    s += "  for (var i = gid.x; i < p.n; i += groups.x * 256u) {\n";
    s += "    let o = p.offset[" + std::to_string(sig.inputs.size()) + "] + i;\n";
    return s;
  }

  std::string epilogue() const override { return "  }\n}\n"; }
};

}  // namespace

std::unique_ptr<Lang> make_wgsl() { return std::make_unique<Wgsl>(); }

}  // namespace alk::expr::emit_detail
