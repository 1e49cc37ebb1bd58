// C++ for the CPU: the block body its evaluator's compiled tier builds and runs
// (src/backend/cpu/jit.h). This text is what the host compiler compiles, what
// ALK_DEBUG=kernels and `alk kernels --target cpp` print, and what tests/golden/*.cpp hold
// (the tests compile the golden files and run them).
//
// The CPU compiles no whole kernel. Its evaluator (src/backend/cpu/eval_impl.inc) loads the
// inputs (any dtype, strides, broadcasts) into registers of their node's type, computes the
// values that are uniform over the launch once, and stores the result in the output's dtype;
// the body computes every other node over one block of kCpuBlockElements elements a call,
// ALK_LANES at a time (16 with AVX-512, 8 with AVX2): each value in a lane array, each node
// one loop over the lanes that GCC turns into vector instructions, the transcendental
// functions libmvec's called on whole vectors, as in the evaluator. Contract:
//   extern "C" void alk_block(const void* const* leaves, void* out);
// leaves[i] points at node i's values when node i is a leaf: an input's block (kept in its
// node's register type: float, double, or int64_t for i64 and bool) or a uniform value's one
// value; out receives the root's block (a root that is an input or a literal leaves nothing
// to compute: the evaluator compiles no body for it). Node numbers are those of the caller's expression
// (no conform, no rewrite: the evaluator converts storage dtypes as it loads and stores), so
// the text depends on the expression and on which inputs are uniform, nothing else: not on
// storage dtypes or the kernel's name, and not on the instruction set (the compiler's -m
// flags pick the lanes and the libmvec variants through the preprocessor).
//
// Every node is spelled as the evaluator computes it (eval_impl.inc): the same IEEE
// operations (built with -ffp-contract=off), the same libmvec functions and alk's own f32
// tanh (vec_tanh.inc, the evaluator's source pasted in), wrapping integer arithmetic,
// integer division by zero as 0, NaN-propagating max/min. So both tiers compute the same
// bits and the compiled body can replace the interpreter at any block. The text includes no
// header: the compile is the compiler's start-up and the body, nothing else.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

#include "alk/error.h"
#include "expr/emit.h"
#include "expr/vec_tanh.inc"

namespace alk::expr {

namespace emit_detail {

namespace {

[[noreturn]] void bad(const std::string& what, Loc loc = Loc::current()) { throw Error("expr", what, loc); }

bool is_float(Type t) { return t == Type::F32 || t == Type::F64; }

// The functions the evaluator takes from libmvec (eval_impl.inc's vector_math), whose body
// calls them on whole vectors of lanes (f32 tanh: alk's own).
const char* vector_math_name(Fn f) {
  switch (f) {
    case Fn::Exp: return "exp";
    case Fn::Log: return "log";
    case Fn::Log1p: return "log1p";
    case Fn::Expm1: return "expm1";
    case Fn::Sin: return "sin";
    case Fn::Cos: return "cos";
    case Fn::Tanh: return "tanh";
    case Fn::Erf: return "erf";
    default: return nullptr;
  }
}

struct Cpp final : Lang {
  Rewrites rewrites() const override { return {}; }  // C++ has every function

  // The evaluator's register types: bool lives in int64_t lanes (0 or 1), as it does there.
  std::string type(Type t) const override {
    switch (t) {
      case Type::F32: return "float";
      case Type::F64: return "double";
      case Type::Bool: case Type::I64: return "int64_t";
    }
    return "?";
  }

  std::string literal(double v, Type t) const override {
    switch (t) {
      case Type::Bool: return v != 0 ? "int64_t{1}" : "int64_t{0}";
      case Type::I64: return "int64_t{" + std::to_string(static_cast<int64_t>(v)) + "}";
      case Type::F32: return float_text(v, t) + "f";
      case Type::F64: return float_text(v, t);
    }
    return "?";
  }

  // Builtins, no header. A NaN keeps its bits (sign and payload), as the evaluator's
  // static_cast of the literal does.
  std::string special(double v, Type t) const override {
    const bool f32 = t == Type::F32;
    if (std::isnan(v)) {
      char bits[40];
      if (f32)
        std::snprintf(bits, sizeof bits, "0x%08xu", std::bit_cast<uint32_t>(static_cast<float>(v)));
      else
        std::snprintf(bits, sizeof bits, "0x%016llxull", static_cast<unsigned long long>(std::bit_cast<uint64_t>(v)));
      return "__builtin_bit_cast(" + type(t) + ", " + bits + ")";
    }
    const std::string inf = f32 ? "__builtin_inff()" : "__builtin_inf()";
    return v > 0 ? inf : "(-" + inf + ")";
  }

  std::string fn_name(Fn f, Type t) const override {
    const bool f32 = t == Type::F32;
    if (!is_float(t)) return "";
    switch (f) {
      case Fn::Sqrt: return f32 ? "__builtin_sqrtf" : "__builtin_sqrt";
      case Fn::Abs: return f32 ? "__builtin_fabsf" : "__builtin_fabs";
      case Fn::Floor: return f32 ? "__builtin_floorf" : "__builtin_floor";
      case Fn::Ceil: return f32 ? "__builtin_ceilf" : "__builtin_ceil";
      case Fn::Round: return f32 ? "__builtin_nearbyintf" : "__builtin_nearbyint";  // half to even
      case Fn::Pow: return f32 ? "powf" : "pow";
      default: return "";  // libmvec's: called on whole lane arrays by the block walk
    }
  }

  // Where C++'s operators are not what the evaluator computes, or would let GCC make worse code.
  std::string own_spelling(const Node& x, const std::string* a) const override {
    const bool flt = is_float(x.type), f32 = x.type == Type::F32;
    const std::string t = type(x.type);
    switch (x.fn) {
      // Integer arithmetic wraps (two's complement), never overflows; x / 0 is 0 and
      // INT64_MIN / -1 wraps, as eval_scalar and the evaluator define them.
      case Fn::Add: return flt ? "" : "alk_wrap_add(" + a[0] + ", " + a[1] + ")";
      case Fn::Sub: return flt ? "" : "alk_wrap_sub(" + a[0] + ", " + a[1] + ")";
      case Fn::Mul: return flt ? "" : "alk_wrap_mul(" + a[0] + ", " + a[1] + ")";
      case Fn::Div: return flt ? "" : "alk_int_div(" + a[0] + ", " + a[1] + ")";
      case Fn::Neg: return flt ? "" : "alk_wrap_sub(0, " + a[0] + ")";
      case Fn::Abs: return flt ? "" : "(" + a[0] + " < 0 ? alk_wrap_sub(0, " + a[0] + ") : " + a[0] + ")";
      case Fn::Floor: case Fn::Ceil: case Fn::Round: return flt ? "" : a[0];  // integers are integral
      // The evaluator's integer pow: C's pow in double, truncated.
      case Fn::Pow:
        return flt ? "" : "static_cast<int64_t>(pow(static_cast<double>(" + a[0] + "), static_cast<double>(" + a[1] + ")))";
      case Fn::Rsqrt:
        if (!flt) return "";
        return f32 ? "(1.0f / __builtin_sqrtf(" + a[0] + "))" : "(1.0 / __builtin_sqrt(" + a[0] + "))";
      case Fn::RoundBf16: return f32 ? "alk_round_bf16(" + a[0] + ")" : "";
      // NaN wins (a if a is NaN or the larger), in a function: its operands are values
      // already loaded, so the || of the comparison reads no memory conditionally.
      case Fn::Max: return "alk_max<" + t + ">(" + a[0] + ", " + a[1] + ")";
      case Fn::Min: return "alk_min<" + t + ">(" + a[0] + ", " + a[1] + ")";
      // Both values loaded first (the function's arguments), and & and | for && and ||: no
      // short circuit for GCC to turn into masked loads (GCC 12 reuses one mask for both
      // halves of 16 int64 lanes with AVX-512).
      case Fn::Select: return "alk_select<" + t + ">(" + a[0] + ", " + a[1] + ", " + a[2] + ")";
      case Fn::And: return "((" + a[0] + " != 0) & (" + a[1] + " != 0))";
      case Fn::Or: return "((" + a[0] + " != 0) | (" + a[1] + " != 0))";
      // On bools the bitwise ops are the logical ones, spelled as And and Or (no short circuit).
      case Fn::BitAnd: return x.type == Type::Bool ? "((" + a[0] + " != 0) & (" + a[1] + " != 0))" : "";
      case Fn::BitOr: return x.type == Type::Bool ? "((" + a[0] + " != 0) | (" + a[1] + " != 0))" : "";
      // Left shifts in unsigned: a negative value shifted is defined there (C++20 also defines
      // it on signed values, but the body is compiled as whatever the system compiler defaults to).
      case Fn::Shl:
        return x.type == Type::I64 ? "((" + a[1] + " >= 0 && " + a[1] + " < 64) ? static_cast<int64_t>(static_cast<uint64_t>(" +
                                         a[0] + ") << " + a[1] + ") : int64_t{0})"
                                   : "";
      default: return "";
    }
  }

  std::string f32_bits(const std::string& a) const override { return "__builtin_bit_cast(unsigned, " + a + ")"; }
  std::string f32_from_bits(const std::string& u) const override { return "__builtin_bit_cast(float, " + u + ")"; }
  std::string cast(Type to, const std::string& a) const override {
    return to == Type::Bool ? "(" + a + " != 0)" : "static_cast<" + type(to) + ">(" + a + ")";
  }
  std::string let(Type t, const std::string& name, const std::string& value) const override {
    return "const " + type(t) + " " + name + " = " + value + ";";
  }

  // The block walk below writes the kernel; the per-element kernel of the GPU languages
  // (emit_common.cpp's emit) is never asked for C++.
  [[noreturn]] static void block_only() { bad("the C++ kernel is the CPU's block body (emit_cpu_block)"); }
  std::string load(int, DType, const std::string&) const override { block_only(); }
  std::string store(DType, const std::string&) const override { block_only(); }
  std::string prologue(const Expr&, const Expr&, const MapSignature&, const std::vector<bool>&) const override {
    block_only();
  }
  std::string epilogue() const override { block_only(); }
  std::string offset_call(int) const override { block_only(); }
};

// The helpers a body may call, each defined only where the body calls it.
struct Helper {
  const char* name;  // as called: "alk_wrap_add("
  const char* text;
};
constexpr Helper kHelpers[] = {
    {"alk_wrap_add(", "static inline int64_t alk_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }\n"},
    {"alk_wrap_sub(", "static inline int64_t alk_wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }\n"},
    {"alk_wrap_mul(", "static inline int64_t alk_wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }\n"},
    {"alk_int_div(",
     "static inline int64_t alk_int_div(int64_t a, int64_t b) {\n"
     "  return b == 0 || (b == -1 && a == -9223372036854775807LL - 1) ? 0 : a / b;\n}\n"},
    {"alk_max<", "template <class T> static inline T alk_max(T a, T b) { return (a != a || a > b) ? a : b; }\n"},
    {"alk_min<", "template <class T> static inline T alk_min(T a, T b) { return (a != a || a < b) ? a : b; }\n"},
    {"alk_select<", "template <class T> static inline T alk_select(int64_t c, T a, T b) { return c ? a : b; }\n"},
    {"alk_round_bf16(",
     "static inline float alk_round_bf16(float x) {  // to the nearest bf16, ties to even; NaN stays NaN\n"
     "  const unsigned u = __builtin_bit_cast(unsigned, x);\n"
     "  return x != x ? x : __builtin_bit_cast(float, (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);\n}\n"},
    {"powf(", "extern \"C\" float powf(float, float);\n"},
    {"pow(", "extern \"C\" double pow(double, double);\n"},
};

// The text before the function: types, the instruction set's lanes and functions, the
// helpers `body` calls, and the libmvec wrappers in `math` ("exp_f", "log_d", ...).
std::string prelude(const std::string& body, const std::set<std::string>& math) {
  std::string p =
      "typedef __INT64_TYPE__ int64_t;\n"
      "typedef __UINT64_TYPE__ uint64_t;\n"
      "#if defined(__AVX512F__)\n"
      "#define ALK_LANES 16\n"
      "#elif defined(__AVX2__)\n"
      "#define ALK_LANES 8\n"
      "#else\n"
      "#error \"built with -mavx2 or -mavx512f: the CPU's generic path is interpreted, never compiled\"\n"
      "#endif\n";
  for (const Helper& h : kHelpers)
    if (body.find(h.name) != std::string::npos) p += h.text;
  if (math.empty()) return p;
  // One GCC vector is the lanes of f32, or half of them of f64 (two calls).
  p += "typedef float alk_vf __attribute__((vector_size(ALK_LANES * 4)));\n"
       "typedef double alk_vd __attribute__((vector_size(ALK_LANES * 4)));\n"
       "#if ALK_LANES == 16\n"
       "#define ALK_VM_F(name) _ZGVeN16v_##name##f\n"
       "#define ALK_VM_D(name) _ZGVeN8v_##name\n"
       "#else\n"
       "#define ALK_VM_F(name) _ZGVdN8v_##name##f\n"
       "#define ALK_VM_D(name) _ZGVdN4v_##name\n"
       "#endif\n";
  for (const std::string& m : math) {
    const bool f32 = m.back() == 'f';
    const std::string name = m.substr(0, m.size() - 2);
    if (m == "tanh_f") {
      // The evaluator's own source (vec_tanh.inc) with the FMA of the lanes' width; ALK_VFMA
      // is a macro of this text only (emit_cpp.cpp has none by that name).
      p += "typedef int alk_vi __attribute__((vector_size(ALK_LANES * 4)));\n"
           "#if ALK_LANES == 16\n"
           "#define ALK_VFMA " ALK_STRINGIFY(ALK_VFMA_512) "\n"
           "#else\n"
           "#define ALK_VFMA " ALK_STRINGIFY(ALK_VFMA_256) "\n"
           "#endif\n" ALK_STRINGIFY(ALK_VEC_TANH_SOURCE(ALK_VFMA)) "\n"
           "static inline void alk_vm_tanh_f(const float* a, float* o) {\n"
           "  alk_vf x;\n  __builtin_memcpy(&x, a, sizeof x);\n  x = alk_tanh_vf(x);\n  __builtin_memcpy(o, &x, sizeof x);\n}\n";
      continue;
    }
    const std::string et = f32 ? "float" : "double", vt = f32 ? "alk_vf" : "alk_vd",
                      sym = std::string(f32 ? "ALK_VM_F(" : "ALK_VM_D(") + name + ")";
    p += "extern \"C\" " + vt + " " + sym + "(" + vt + ");\n";
    p += "static inline void alk_vm_" + m + "(const " + et + "* a, " + et + "* o) {\n  for (int k = 0; k < ALK_LANES; k += sizeof(" +
         vt + ") / sizeof(" + et + ")) {\n    " + vt + " x;\n    __builtin_memcpy(&x, a + k, sizeof x);\n    x = " + sym +
         "(x);\n    __builtin_memcpy(o + k, &x, sizeof x);\n  }\n}\n";
  }
  return p;
}

}  // namespace

std::unique_ptr<Lang> make_cpp() { return std::make_unique<Cpp>(); }

}  // namespace emit_detail

std::string emit_cpu_block(const Expr& e, const std::vector<bool>& uniform_inputs) {
  using namespace emit_detail;
  if (e.nodes.empty()) emit_detail::bad("CPU block body: empty expression");
  const Cpp lang;
  const size_t n = e.nodes.size(), last = n - 1;
  std::vector<bool> is_output(n, false);
  is_output[last] = true;
  // The evaluator computes these once and hands each over as a leaf (eval_impl.inc's Plan:
  // its uniform nodes include these; a literal-only node it would also take is folded).
  const std::vector<bool> uniform = uniform_nodes(e, uniform_inputs, is_output);
  // What the body reads: the arguments of the nodes it computes, and the root.
  std::vector<bool> read(n, false);
  read[last] = true;
  for (size_t i = 0; i < n; ++i)
    if (e.nodes[i].fn != Fn::Input && e.nodes[i].fn != Fn::Const && !uniform[i])
      for (int k = 0; k < fn_arity(e.nodes[i].fn); ++k) read[static_cast<size_t>(e.nodes[i].args[k])] = true;
  std::vector<std::string> lane(n), array(n);  // node i in lane l of the chunk; its lane array's name
  std::string leaves, body;
  std::set<std::string> math, names;
  int next = 0, next_uniform = 0;
  for (size_t i = 0; i < n; ++i) {
    const Node& x = e.nodes[i];
    const std::string t = lang.type(x.type), id = std::to_string(i);
    if (x.fn == Fn::Const) {
      lane[i] = value_text(lang, x);
      continue;
    }
    if (x.fn == Fn::Input || uniform[i]) {
      if (!read[i]) continue;  // a uniform input only uniform values read
      std::string name = x.fn == Fn::Input ? "in" + std::to_string(x.slot) : "u" + std::to_string(next_uniform++);
      if (!names.insert(name).second) name += "_" + id;  // one slot read as two types
      if (uniform[i]) {
        leaves += "  const " + t + " " + name + " = *static_cast<const " + t + "*>(leaves[" + id + "]);\n";
        lane[i] = name;
      } else {
        leaves += "  const " + t + "* " + name + " = static_cast<const " + t + "*>(leaves[" + id + "]);\n";
        lane[i] = name + "[c + l]";
        array[i] = name + " + c";
      }
      continue;
    }
    const std::string v = "v" + std::to_string(next++);
    if (const char* vm = vector_math_name(x.fn)) {
      if (!is_float(x.type))
        emit_detail::bad("CPU block body: " + std::string(fn_name(x.fn)) + " of " + std::string(compute_type_name(x.type)) +
                         " (the evaluator computes it through double, the compiled tier does not)");
      const std::string m = std::string(vm) + (x.type == Type::F32 ? "_f" : "_d");
      math.insert(m);
      const size_t arg = static_cast<size_t>(x.args[0]);
      std::string src = array[arg];
      if (src.empty()) {  // a uniform value or a literal: its lanes first
        src = v + "_arg";
        body += "    " + t + " " + src + "[ALK_LANES];\n    for (int l = 0; l < ALK_LANES; ++l) " + src + "[l] = " + lane[arg] + ";\n";
      }
      body += "    " + t + " " + v + "[ALK_LANES];\n    alk_vm_" + m + "(" + src + ", " + v + ");\n";
    } else {
      body += "    " + t + " " + v + "[ALK_LANES];\n    for (int l = 0; l < ALK_LANES; ++l) " + v + "[l] = " +
              node_text(lang, x, lane) + ";\n";
    }
    lane[i] = v + "[l]";
    array[i] = v;
  }
  const std::string rt = lang.type(e.type());
  std::string s = "// alk map kernel: the CPU's compiled block body, " + std::to_string(kCpuBlockElements) +
                  " elements a call (contract: src/expr/emit_cpp.cpp)\n// expr: " + e.str() +
                  "\n// generated by src/expr/emit_*.cpp from the expression IR; do not edit\n";
  s += prelude(body, math);
  s += "extern \"C\" void alk_block(const void* const* leaves, void* out_) {\n";
  s += leaves.empty() ? "  (void)leaves;\n" : leaves;
  s += "  " + rt + "* out = static_cast<" + rt + "*>(out_);\n";
  s += "  for (int c = 0; c < " + std::to_string(kCpuBlockElements) + "; c += ALK_LANES) {\n" + body;
  s += "    for (int l = 0; l < ALK_LANES; ++l) out[c + l] = " + lane[last] + ";\n  }\n}\n";
  return s;
}

}  // namespace alk::expr
