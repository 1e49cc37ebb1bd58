// CUDA C spelling of a map kernel (compiled by NVRTC: no standard headers, so
// 64-bit integers are `long long`). One thread per element in a grid-stride loop.
#include <cmath>
#include <string>

#include "alk/error.h"
#include "expr/emit.h"

namespace alk::expr::emit_detail {

namespace {

std::string storage(DType t) { return cuda_storage_type(t); }

struct Cuda final : Lang {
  Cuda() { indent = "    "; }
  Rewrites rewrites() const override { return {}; }  // CUDA's math library has every function

  std::string function_head(const std::string& name, const std::vector<Type>& params, Type ret) const override {
    return "__device__ inline " + Lang::function_head(name, params, ret);
  }

  std::string type(Type t) const override {
    switch (t) {
      case Type::Bool: return "bool";
      case Type::I64: return "long long";
      case Type::F32: return "float";
      case Type::F64: return "double";
    }
    return "?";
  }

  std::string literal(double v, Type t) const override {
    switch (t) {
      case Type::Bool: return v != 0 ? "true" : "false";
      case Type::I64: return std::to_string(static_cast<int64_t>(v)) + "ll";
      case Type::F32: return float_text(v, t) + "f";
      case Type::F64: return float_text(v, t);
    }
    return "?";
  }

  std::string special(double v, Type t) const override {
    std::string s = t == Type::F32 ? (std::isnan(v) ? "__int_as_float(0x7fc00000)" : "__int_as_float(0x7f800000)")
                                   : (std::isnan(v) ? "__longlong_as_double(0x7ff8000000000000ll)"
                                             : "__longlong_as_double(0x7ff0000000000000ll)");
    return v < 0 ? "(-" + s + ")" : s;
  }

  std::string fn_name(Fn f, Type t) const override {
    // The f32 versions carry an "f" suffix; the i64 ones exist only for abs/max/min.
    std::string sfx = t == Type::F32 ? "f" : "";
    switch (f) {
      case Fn::Exp: return "exp" + sfx;
      case Fn::Log: return "log" + sfx;
      case Fn::Log1p: return "log1p" + sfx;
      case Fn::Expm1: return "expm1" + sfx;
      case Fn::Sqrt: return "sqrt" + sfx;
      case Fn::Rsqrt: return "rsqrt" + sfx;
      case Fn::Sin: return "sin" + sfx;
      case Fn::Cos: return "cos" + sfx;
      case Fn::Tanh: return "tanh" + sfx;
      case Fn::Erf: return "erf" + sfx;
      case Fn::Abs: return t == Type::I64 ? "llabs" : "fabs" + sfx;
      case Fn::Floor: return "floor" + sfx;
      case Fn::Ceil: return "ceil" + sfx;
      case Fn::Round: return "rint" + sfx;  // half to even
      case Fn::Pow: return "pow" + sfx;
      case Fn::RoundBf16:  // spelled by the walk (emit_common.cpp)
      case Fn::Input: case Fn::Const: case Fn::Neg: case Fn::Not: case Fn::Cast: case Fn::Max: case Fn::Min: case Fn::Add: case Fn::Sub:
      case Fn::Mul: case Fn::Div: case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne:
      case Fn::And: case Fn::Or: case Fn::Select: case Fn::BitNot: case Fn::BitAnd: case Fn::BitOr: case Fn::BitXor:
      case Fn::Shl: case Fn::Shr: case Fn::Rotl: case Fn::Rotr: return "";
    }
    return "";
  }

  std::string fn_name_bf16_result(Fn f, Type t) const override {
    return f == Fn::Tanh && t == Type::F32 ? "__tanhf" : "";
  }

  std::string cast(Type to, const std::string& a) const override { return "((" + type(to) + ")" + a + ")"; }
  std::string f32_bits(const std::string& a) const override { return "__float_as_uint(" + a + ")"; }
  std::string f32_from_bits(const std::string& u) const override { return "__uint_as_float(" + u + ")"; }

  std::string let(Type t, const std::string& name, const std::string& value) const override {
    return "const " + type(t) + " " + name + " = " + value + ";";
  }

  std::string load(int k, DType s, const std::string& idx) const override {
    std::string in = "in" + std::to_string(k), raw = in + "_data[" + idx + "]";
    switch (s) {
      case DType::Bool: return "const bool " + in + " = " + raw + " != 0;";
      case DType::F16: return "const float " + in + " = __half2float(" + raw + ");";
      case DType::BF16: return "const float " + in + " = __bfloat162float(" + raw + ");";
      case DType::U8: case DType::I32: case DType::I64: case DType::F32: case DType::F64:
        return "const " + type(compute_type(s)) + " " + in + " = " + raw + ";";
    }
    return "";
  }

  std::string store(DType s, const std::string& v) const override { return store_at("out_data[o]", s, v); }
  std::string store_extra(size_t j, DType s, const std::string& v) const override {
    const std::string n = std::to_string(j);
    return store_at("out" + n + "_data[o" + n + "]", s, v);
  }
  std::string store_at(const std::string& at, DType s, const std::string& v) const {
    switch (s) {
      case DType::F16: return at + " = __float2half_rn(" + v + ");";
      case DType::BF16: return at + " = __float2bfloat16_rn(" + v + ");";
      case DType::Bool: case DType::U8: case DType::I32:  // wraps to the storage width
        return at + " = (" + storage(s) + ")" + v + ";";
      case DType::I64: case DType::F32: case DType::F64: return at + " = " + v + ";";
    }
    return "";
  }

  std::string offset_call(int k) const override {
    return "p.offset[" + std::to_string(k) + "] + alk_dot(c, p.strides[" + std::to_string(k) + "], ALK_RANK_OF(p))";
  }

  std::string prologue(const Expr& original, const Expr&, const MapSignature& sig,
                       const std::vector<bool>&) const override {
    bool f16 = sig.output == DType::F16, bf16 = sig.output == DType::BF16;
    for (DType d : sig.inputs) f16 = f16 || d == DType::F16, bf16 = bf16 || d == DType::BF16;
    for (DType d : sig.extra_outputs) f16 = f16 || d == DType::F16, bf16 = bf16 || d == DType::BF16;
    std::string s = header_comment(original, sig, "//");
    if (f16) s += "#include <cuda_fp16.h>\n";
    if (bf16) s += "#include <cuda_bf16.h>\n";
    if (f16 || bf16) s += "\n";
    const std::string params = sig.name + "_params";
    s += "struct " + params + " {\n  long long n, rank;\n  long long shape[8];\n";
    s += "  long long strides[" + std::to_string(std::max<size_t>(1, sig.inputs.size())) + "][8];  // elements\n";
    const size_t K = sig.inputs.size(), X = sig.extra_outputs.size();
    s += "  long long offset[" + std::to_string(K + 1 + X) + "];  // first element: input k at [k], the output at [" +
         std::to_string(K) + "]" + (X ? ", extra output j at [" + std::to_string(K) + " + j]" : std::string()) + "\n";
    s += "  unsigned int magic[8], shift[8];  // i / shape[d] = (umulhi(i, magic[d]) + i) >> shift[d] for i < 2^31\n};\n\n";
    s += "// The coordinates of output element i, computed once and shared by every input. Division by\n"
         "// the shape is a multiply by a precomputed magic number (64-bit divisions are slow on\n"
         "// GPUs); the outermost coordinate is what remains. Unrolled, so c stays in registers.\n"
         "// A launch may define ALK_RANK (the rank, so the loops fold) and ALK_INDEX32 (every\n"
         "// operand's element offsets and the element count fit 31 bits: 32-bit index math, a\n"
         "// quarter of the instructions of 64-bit multiplies), and ALK_VEC (elements per thread\n"
         "// and iteration of the vector loop, for contiguous operands).\n"
         "#ifdef ALK_RANK\n#define ALK_RANK_OF(p) ALK_RANK\n#else\n#define ALK_RANK_OF(p) (p).rank\n#endif\n"
         "#ifdef ALK_INDEX32\ntypedef int alk_idx;\n#else\ntypedef long long alk_idx;\n#endif\n"
         "#ifdef ALK_VEC\ntemplate <class T>\nstruct alignas(sizeof(T) * ALK_VEC) alk_vec {\n  T x[ALK_VEC];\n};\n#endif\n"
         "__device__ __forceinline__ void alk_coords(long long i, const " + params + "& p, alk_idx c[8]) {\n"
         "  if (ALK_RANK_OF(p) == 1) {  // contiguous: the common case, no divisions at all\n"
         "    c[0] = (alk_idx)i;\n"
         "    return;\n"
         "  }\n"
         "#pragma unroll\n"
         "  for (int d = 7; d >= 1; --d) {\n"
         "    if (d >= ALK_RANK_OF(p)) continue;\n"
         "#ifndef ALK_INDEX32\n"
         "    if (!(i < 0x80000000ll && p.shape[d] < 0x80000000ll)) {\n"
         "      c[d] = i % p.shape[d];\n"
         "      i /= p.shape[d];\n"
         "      continue;\n"
         "    }\n"
         "#endif\n"
         "    const unsigned u = (unsigned)i, q = (__umulhi(u, p.magic[d]) + u) >> p.shift[d];\n"
         "    c[d] = (alk_idx)(u - q * (unsigned)p.shape[d]);\n"
         "    i = q;\n"
         "  }\n"
         "  c[0] = (alk_idx)i;\n"
         "}\n\n"
         "__device__ __forceinline__ alk_idx alk_dot(const alk_idx c[8], const long long* strides, long long rank) {\n"
         "  alk_idx off = c[0] * (alk_idx)strides[0];\n"
         "#pragma unroll\n"
         "  for (int d = 1; d < 8; ++d) {  // stops at the rank: no multiply for the dims past it\n"
         "    if (d >= rank) break;\n"
         "    off += c[d] * (alk_idx)strides[d];\n"
         "  }\n"
         "  return off;\n"
         "}\n\n";
    // ALK_GROUP (a multi-tensor launch, cuda_map_group_entry): the body is a device function
    // the group's kernel calls once per member, with the member's share of the blocks.
    s += "#ifdef ALK_GROUP\n#define ALK_BLOCK_X alk_block\n#define ALK_GRID_X alk_blocks\n"
         "__device__ __forceinline__ void " + sig.name + "_body(";
    for (size_t k = 0; k < sig.inputs.size(); ++k)
      s += "const " + storage(sig.inputs[k]) + "* __restrict__ in" + std::to_string(k) + "_data, ";
    s += storage(sig.output) + "* __restrict__ out_data, " + extra_params(sig) + "const " + params +
         "& p, long long alk_block, long long alk_blocks) {\n";
    s += "#else\n#define ALK_BLOCK_X blockIdx.x\n#define ALK_GRID_X gridDim.x\n";
    s += "extern \"C\" __global__ void " + sig.name + "(";
    for (size_t k = 0; k < sig.inputs.size(); ++k)
      s += "const " + storage(sig.inputs[k]) + "* __restrict__ in" + std::to_string(k) + "_data, ";
    s += storage(sig.output) + "* __restrict__ out_data, " + extra_params(sig) + "const " + params + " p) {\n#endif\n";
    s += "  const long long step = (long long)ALK_GRID_X * blockDim.x;\n";
    output_slot_ = sig.inputs.size();
    extra_outputs_ = sig.extra_outputs.size();
    return s;
  }
  static std::string extra_params(const MapSignature& sig) {
    std::string s;
    for (size_t j = 1; j <= sig.extra_outputs.size(); ++j)
      s += storage(sig.extra_outputs[j - 1]) + "* __restrict__ out" + std::to_string(j) + "_data, ";
    return s;
  }

  // A grid-stride loop: what only uniform inputs decide is computed before it (emit()).
  // Under ALK_VEC the vector loop has done the elements below alk_first.
  std::string loop_open() const override {
    return "#ifdef ALK_VEC\n  const long long alk_first = p.n / ALK_VEC * ALK_VEC;\n#else\n  const long long alk_first = 0;\n#endif\n"
           "  for (long long i = alk_first + (long long)ALK_BLOCK_X * blockDim.x + threadIdx.x; i < p.n; i += step) {\n"
           "    const long long o = p.offset[" + std::to_string(output_slot_) + "] + i;\n" + extra_offsets() +
           "    alk_idx c[8];\n    alk_coords(i, p, c);\n";
  }
  std::string extra_offsets() const {
    std::string s;
    for (size_t j = 1; j <= extra_outputs_; ++j)
      s += "    const long long o" + std::to_string(j) + " = p.offset[" + std::to_string(output_slot_ + j) + "] + i;\n";
    return s;
  }

  // ALK_VEC (set by a launch whose per-element operands are contiguous along the innermost
  // dim, vectors never straddling a row, and start on vector boundaries): each thread moves
  // up to 16 bytes per operand per iteration, enough bytes in flight for the memory system
  // (a 2-byte load per thread is not); coordinates are computed once per vector.
  std::string vector_loop_open(const MapSignature& sig, const std::vector<bool>& per_element) const override {
    std::string s = "#ifdef ALK_VEC\n"
                    "  for (long long iv = (long long)ALK_BLOCK_X * blockDim.x + threadIdx.x; iv < p.n / ALK_VEC; iv += step) {\n"
                    "    alk_idx c[8];\n    alk_coords(iv * ALK_VEC, p, c);\n";
    // ALK_VEC_BCAST_<k>: input k is constant along the innermost dim (a per-row value, e.g. a
    // mask or a row statistic): one load, replicated over the vector.
    for (size_t k = 0; k < per_element.size(); ++k)
      if (per_element[k]) {
        const std::string n = std::to_string(k), t = storage(sig.inputs[k]), at = offset_call(static_cast<int>(k));
        s += "#ifdef ALK_VEC_BCAST_" + n + "\n    alk_vec<" + t + "> alk_v" + n + ";\n    {\n      const " + t +
             " alk_s = in" + n + "_data[" + at + "];\n#pragma unroll\n      for (int o = 0; o < ALK_VEC; ++o) alk_v" + n +
             ".x[o] = alk_s;\n    }\n#else\n";
        s += "    const alk_vec<" + t + "> alk_v" + n + " = *(const alk_vec<" + t + ">*)(in" + n + "_data + " + at +
             ");\n#endif\n";
      }
    s += "    alk_vec<" + storage(sig.output) + "> alk_vo;\n";
    for (size_t j = 1; j <= sig.extra_outputs.size(); ++j)
      s += "    alk_vec<" + storage(sig.extra_outputs[j - 1]) + "> alk_vo" + std::to_string(j) + ";\n";
    s += "#pragma unroll\n    for (int o = 0; o < ALK_VEC; ++o) {\n";
    for (size_t k = 0; k < per_element.size(); ++k)
      if (per_element[k]) {
        const std::string n = std::to_string(k);
        s += "      const " + storage(sig.inputs[k]) + "* in" + n + "_data = alk_v" + n + ".x;\n";
      }
    s += "      " + storage(sig.output) + "* out_data = alk_vo.x;\n";
    for (size_t j = 1; j <= sig.extra_outputs.size(); ++j) {
      const std::string n = std::to_string(j);
      s += "      " + storage(sig.extra_outputs[j - 1]) + "* out" + n + "_data = alk_vo" + n + ".x;\n      const int o" + n +
           " = o;\n";
    }
    return s;
  }
  std::string vector_loop_close(const MapSignature& sig) const override {
    const size_t K = sig.inputs.size();
    std::string s = "    }\n    *(alk_vec<" + storage(sig.output) + ">*)(out_data + p.offset[" + std::to_string(K) +
                    "] + iv * ALK_VEC) = alk_vo;\n";
    for (size_t j = 1; j <= sig.extra_outputs.size(); ++j) {
      const std::string n = std::to_string(j);
      s += "    *(alk_vec<" + storage(sig.extra_outputs[j - 1]) + ">*)(out" + n + "_data + p.offset[" +
           std::to_string(K + j) + "] + iv * ALK_VEC) = alk_vo" + n + ";\n";
    }
    return s + "  }\n#endif\n";
  }
  std::string uniform_offset(int k) const override { return "p.offset[" + std::to_string(k) + "]"; }
  mutable size_t output_slot_ = 0;  // the output's index in p.offset (set by prologue)
  mutable size_t extra_outputs_ = 0;  // how many outputs follow it (set by prologue)

  std::string epilogue() const override { return "  }\n}\n"; }
};

}  // namespace

std::unique_ptr<Lang> make_cuda() { return std::make_unique<Cuda>(); }

}  // namespace alk::expr::emit_detail

namespace alk::expr {

std::string cuda_storage_type(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: return "unsigned char";
    case DType::I32: return "int";
    case DType::I64: return "long long";
    case DType::F16: return "__half";
    case DType::BF16: return "__nv_bfloat16";
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

std::string cuda_map_group_entry(const MapSignature& sig, const std::vector<bool>& uniform_inputs) {
  if (!sig.extra_outputs.empty())
    throw Error("expr", "kernel " + sig.name + ": a multi-tensor group has one output per member", Loc::current());
  const size_t K = sig.inputs.size();
  const std::string params = sig.name + "_params";
  std::string s = "\n// One launch for a group of members (ALK_GROUP of them at most, the table passed by value):\n"
                  "// block b runs the member whose blocks [first_block, first_block + blocks) hold it.\n"
                  "struct alk_member {\n  const void* in[" + std::to_string(std::max<size_t>(1, K)) +
                  "];\n  void* out;\n  long long n;\n  int first_block, blocks;\n};\n"
                  "struct alk_group {\n  alk_member m[ALK_GROUP];\n};\n"
                  "extern \"C\" __global__ void " + sig.name + "_group(const alk_group g) {\n"
                  "  int j = 0, last = ALK_GROUP - 1;  // the last member starting at or before this block\n"
                  "  while (j < last) {\n"
                  "    const int mid = (j + last + 1) / 2;\n"
                  "    if (g.m[mid].blocks > 0 && g.m[mid].first_block <= (int)blockIdx.x) j = mid;\n"
                  "    else last = mid - 1;\n"
                  "  }\n"
                  "  const alk_member& m = g.m[j];\n"
                  "  " + params + " p;\n  p.n = m.n;\n  p.rank = 1;\n"
                  "#pragma unroll\n  for (int d = 0; d < 8; ++d) {\n    p.shape[d] = d == 0 ? m.n : 1;\n"
                  "    p.magic[d] = 0;\n    p.shift[d] = 0;\n";
  for (size_t k = 0; k < std::max<size_t>(1, K); ++k)
    s += "    p.strides[" + std::to_string(k) + "][d] = " +
         (k < K && !(k < uniform_inputs.size() && uniform_inputs[k]) ? "d == 0 ? 1 : 0" : "0") + ";\n";
  s += "  }\n#pragma unroll\n  for (int k = 0; k <= " + std::to_string(K) + "; ++k) p.offset[k] = 0;\n";
  s += "  " + sig.name + "_body(";
  for (size_t k = 0; k < K; ++k)
    s += "(const " + cuda_storage_type(sig.inputs[k]) + "*)m.in[" + std::to_string(k) + "], ";
  s += "(" + cuda_storage_type(sig.output) + "*)m.out, p, (long long)blockIdx.x - m.first_block, m.blocks);\n}\n";
  return s;
}

std::pair<uint32_t, uint32_t> cuda_division_magic(int64_t divisor) {
  if (divisor < 1 || divisor > (int64_t{1} << 31)) return {0, 0};  // unused: such dims take the 64-bit path
  uint32_t shift = 0;
  while ((uint64_t{1} << shift) < static_cast<uint64_t>(divisor)) ++shift;
  const uint64_t d = static_cast<uint64_t>(divisor);
  const uint64_t magic = ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1;
  return {static_cast<uint32_t>(magic), shift};
}

}  // namespace alk::expr
