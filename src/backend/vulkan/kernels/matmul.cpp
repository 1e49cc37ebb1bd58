#include "backend/vulkan/kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>

#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"
#include "expr/emit.h"
#include "backend/vulkan/vulkan_device.h"
#include "alk/kernel.h"

namespace alk::vk {

namespace {

constexpr int kBatchDims = 3;            // batch dims the kernel unravels (more: looped on the host)
constexpr size_t kCoreWords = 20;        // params words before the epilogue inputs'
constexpr size_t kWordsPerEpilogue = 6;  // batch strides[3], row and column strides, offset
constexpr size_t kMaxFusedEpilogueInputs = 8;

constexpr const MatmulTiles& kLarge = kMatmulLarge;
constexpr const MatmulTiles& kSmall = kMatmulSmall;

bool is16(DType t) { return t == DType::F16 || t == DType::BF16; }
bool is8(DType t) { return t == DType::Bool || t == DType::U8; }
bool computes_i64(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::U8; }

std::string storage_type(DType t) { return expr::glsl_storage_type(t); }

std::string compute_name(DType t) {
  switch (compute_type(t)) {
    case ComputeType::Bool: return "bool";
    case ComputeType::I64: return "int64_t";
    case ComputeType::F32: return "float";
    case ComputeType::F64: return "double";
  }
  return "?";
}

// A stored element `raw` as its compute type.
std::string load_as_compute(DType t, const std::string& raw) {
  switch (t) {
    case DType::Bool: return "(uint(" + raw + ") != 0u)";
    case DType::U8: return "int64_t(uint(" + raw + "))";
    case DType::I32: return "alk_i32_to_i64(" + raw + ")";
    case DType::F16: return "float(" + raw + ")";
    case DType::BF16: return "uintBitsToFloat(uint(" + raw + ") << 16)";
    case DType::I64: case DType::F32: case DType::F64: return raw;
  }
  return "?";
}

// A compute-type value `v` as the storage type of t.
std::string store_as(DType t, const std::string& v) {
  switch (t) {
    case DType::Bool: return "uint8_t(" + v + " ? 1u : 0u)";
    case DType::U8: return "uint8_t(uint(" + v + ") & 0xffu)";
    case DType::I32: return "int(" + v + ")";
    case DType::F16: return "float16_t(" + v + ")";
    case DType::BF16: return "uint16_t(alk_f32_to_bf16(" + v + "))";
    case DType::I64: case DType::F32: case DType::F64: return v;
  }
  return "?";
}

bool epilogue_has_f64(const MatmulSignature& sig) {
  if (!sig.epilogue) return false;
  for (const expr::Node& x : sig.epilogue->nodes)
    if (x.type == ComputeType::F64) return true;
  return false;
}

// Strides of the same elements viewed with shape `to` (same count, row-major order), or
// nullopt when no strides do it (a reshape that would need a copy).
std::optional<Shape> restride(const Shape& from, const Shape& strides, const Shape& to) {
  Shape out(to.size(), 0);
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  if (from.empty()) {
    for (int64_t& s : out) s = 0;
    return numel(to) == 1 ? std::optional<Shape>(out) : std::nullopt;
  }
  int64_t chunk_stride = strides.back(), from_count = 1, to_count = 1;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; d >= 0; --d) {
    from_count *= from[static_cast<size_t>(d)];
    const bool chunk_ends = d == 0 || (from[static_cast<size_t>(d - 1)] != 1 &&
                                       strides[static_cast<size_t>(d - 1)] != from_count * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (to_count < from_count || to[static_cast<size_t>(view_d)] == 1)) {
      out[static_cast<size_t>(view_d)] = to_count * chunk_stride;
      to_count *= to[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (to_count != from_count) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[static_cast<size_t>(d - 1)];
      from_count = to_count = 1;
    }
  }
  return view_d == -1 ? std::optional<Shape>(out) : std::nullopt;
}

int32_t i32(int64_t v, const char* what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail(std::string("matmul: ") + what + " beyond 32 bits");
  return static_cast<int32_t>(v);
}

// The product's [batch.., m] dims after merging, per operand: A, B, C, epilogue inputs.
struct Dim {
  int64_t size;
  std::vector<int64_t> strides;
};

}  // namespace

struct MatmulKernel::Variant {
  MatmulTiles tiles;
  bool a_k, b_n, fused, vec_a, vec_b;
  size_t epilogue_inputs;
  bool push;
  uint32_t bindings;
  const Pipeline* pipeline;
};

uint32_t coop_shared_bytes(const MatmulTiles& t, uint32_t buffers) {
  const uint32_t slices = t.direct ? 0 : (t.bm * (t.bk + 8) + t.bk * (t.bn + 8)) * 2;  // f16
  return buffers * slices + (t.threads() / 32) * 256 * 4;
}

MatmulTiles choose_matmul_tiles(const DeviceInfo& info, DType input, int64_t M, int64_t N, int64_t K, int64_t batches) {
  auto tiles = [&](int64_t bm, int64_t bn) { return ((M + bm - 1) / bm) * ((N + bn - 1) / bn) * batches; };
  // f16 on the tensor cores (VK_NV_cooperative_matrix): the 256x128 or 128x256 tiles where
  // they fill the device (>= ~1 workgroup per SM of a large GPU), else 128x128, else 64x64.
  if (input == DType::F16 && info.cooperative_matrix_nv && M >= 16 && N >= 16 && K >= 16) {
    auto fits = [&](const MatmulTiles& t, uint32_t buffers) {
      return coop_shared_bytes(t, buffers) <= info.max_shared_memory && t.threads() <= info.max_workgroup_invocations;
    };
    if (M >= 256 && N >= 128 && tiles(256, 128) >= 96 && fits(kMatmulCoopTall, 1)) return kMatmulCoopTall;
    if (M >= 128 && N >= 256 && tiles(128, 256) >= 96) {
      if (fits(kMatmulCoopLarge, 2)) return kMatmulCoopLarge;
      if (fits(kMatmulCoopLargeK16, 2)) return kMatmulCoopLargeK16;
      if (fits(kMatmulCoopLarge, 1)) return kMatmulCoopLarge;
    }
    if (M >= 128 && N >= 128 && tiles(128, 128) >= 48 && fits(kMatmulCoop, 1)) return kMatmulCoop;
    return kMatmulCoopSmall;
  }
  if (info.kind == DeviceInfo::Kind::Cpu && !std::getenv("ALK_VK_GEMM_SHARED")) {
    // On a CPU implementation: 4 rows by 16, 8 or 4 columns per invocation as n allows, 8 x 8
    // invocations per workgroup (bench/vulkan/NOTES.md).
    const uint32_t cpu_tn = N >= 128 ? 16 : N >= 32 ? 8 : 4;
    return MatmulTiles{32, 8 * cpu_tn, 4, 4, cpu_tn, false, true};
  }
  return M >= 128 && N >= 128 && tiles(128, 128) >= 96 ? kLarge : kSmall;
}

std::string matmul_unsupported_reason(const Context& ctx, const MatmulSignature& sig) {
  const DeviceInfo& info = ctx.info();
  if (!is_floating(sig.input)) return "matmul of " + std::string(dtype_name(sig.input)) + " (floating dtypes only)";
  std::vector<DType> all{sig.input, sig.value, sig.output};
  all.insert(all.end(), sig.epilogue_inputs.begin(), sig.epilogue_inputs.end());
  bool f64 = epilogue_has_f64(sig), b16 = false, b8 = false, i64 = false;
  for (DType t : all) f64 = f64 || t == DType::F64, b16 = b16 || is16(t), b8 = b8 || is8(t), i64 = i64 || computes_i64(t);
  if (sig.epilogue)
    for (const expr::Node& x : sig.epilogue->nodes) i64 = i64 || x.type == ComputeType::I64;
  if (f64 && !info.float64) return info.name + " has no shaderFloat64";
  if (b16 && !info.storage16) return info.name + " has no 16-bit storage (f16/bf16 tensors)";
  if (b8 && !info.storage8) return info.name + " has no 8-bit storage (bool/u8 tensors)";
  if (i64 && !info.int64) return info.name + " has no shaderInt64 (an integer epilogue)";
  const size_t bindings = 3 + sig.epilogue_inputs.size() + 1;
  if (bindings > info.max_storage_buffers_per_stage)
    return std::to_string(bindings) + " buffers exceed " + info.name + "'s " +
           std::to_string(info.max_storage_buffers_per_stage) + " per stage";
  return "";
}

MatmulKernel::MatmulKernel(Context& ctx, MatmulSignature sig) : ctx_(ctx), sig_(std::move(sig)) {
  if (std::string why = matmul_unsupported_reason(ctx, sig_); !why.empty())
    fail("matmul cannot run on vulkan:" + std::to_string(ctx.info().index) + ": " + why);
  if (!sig_.epilogue && sig_.output != sig_.value) fail("matmul: the output dtype differs from the product's without an epilogue");
}

MatmulKernel::~MatmulKernel() = default;

std::string MatmulKernel::source(const MatmulTiles& t, bool a_k, bool b_n, bool fused, bool vec_a, bool vec_b,
                                 uint32_t shared_limit) const {
  vec_a = vec_a && (t.coop ? a_k : t.cpu && sig_.input == DType::F32);
  vec_b = vec_b && (t.coop ? b_n : t.cpu && sig_.input == DType::F32);
  const size_t E = fused && sig_.epilogue ? sig_.epilogue_inputs.size() : 0;
  const bool epilogue = fused && sig_.epilogue.has_value();
  const DType out = epilogue ? sig_.output : sig_.value;
  std::vector<DType> all{sig_.input, out};
  if (epilogue) all.insert(all.end(), sig_.epilogue_inputs.begin(), sig_.epilogue_inputs.end());
  bool b16 = false, b8 = false, i64 = false;
  for (DType d : all) b16 = b16 || is16(d), b8 = b8 || is8(d), i64 = i64 || computes_i64(d);
  std::string fn;
  if (epilogue) {
    expr::MapSignature esig{"alk_epilogue", {sig_.value}, sig_.output};
    esig.inputs.insert(esig.inputs.end(), sig_.epilogue_inputs.begin(), sig_.epilogue_inputs.end());
    fn = expr::emit_function(*sig_.epilogue, esig, expr::Target::Glsl);
  }
  const bool f64 = sig_.input == DType::F64;
  const std::string acc = f64 ? "double" : "float";
  const std::string value_ct = compute_name(sig_.value);
  auto u = [](uint32_t v) { return std::to_string(v) + "u"; };

  std::string s = "#version 450\n";
  if (t.coop)
    s += "#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n"
         "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
         "#extension GL_KHR_shader_subgroup_basic : require\n";
  if (!t.cpu) s += "#extension GL_EXT_control_flow_attributes : require\n";
  if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  if (b8) s += "#extension GL_EXT_shader_8bit_storage : require\n";
  // The epilogue may compute in i64 (conform() orders bools as integers, integer pow...);
  // the extension costs nothing where the code has no 64-bit integers.
  if (i64 || epilogue) s += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n";
  s += "// alk matmul (src/backend/vulkan/kernels/matmul.cpp): " + std::string(dtype_name(sig_.input)) + " x " +
       std::string(dtype_name(sig_.input)) + " -> " + std::string(dtype_name(sig_.value));
  s += epilogue ? ", epilogue -> " + std::string(dtype_name(sig_.output)) + "\n" : "\n";
  s += std::string(t.coop ? (t.direct ? "// cooperative matrices loaded from the operands, " : "// cooperative matrices, ") : "// ") + "tiles " + std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + ", " +
       std::to_string(t.tm) + "x" + std::to_string(t.tn) + " per invocation; A loads along " + (a_k ? "k" : "m") +
       ", B along " + (b_n ? "n" : "k") + "\n";
  s += "#define BM " + u(t.bm) + "\n#define BN " + u(t.bn) + "\n#define BK " + u(t.bk) + "\n#define TM " + u(t.tm) +
       "\n#define TN " + u(t.tn) + "\n#define WG " + u(t.threads()) + "\n#define ACC " + acc + "\n";
  s += "layout(local_size_x = " + std::to_string(t.threads()) + ") in;\n\n";
  uint32_t binding = 0;
  auto buffer = [&](const std::string& name, DType d, bool write) {
    s += "layout(std430, binding = " + std::to_string(binding++) + ") " + (write ? "writeonly" : "readonly") +
         " buffer " + name + "_buf { " + storage_type(d) + " " + name + "_data[]; };\n";
  };
  buffer("a", sig_.input, false);
  buffer("b", sig_.input, false);
  for (size_t e = 0; e < E; ++e) buffer("e" + std::to_string(e), sig_.epilogue_inputs[e], false);
  buffer("c", out, true);
  // The same A / B bindings seen 16 bytes at a time (descriptor aliasing).
  if (vec_a) s += t.cpu ? "layout(std430, binding = 0) readonly buffer a_vbuf { vec4 a_v4[]; };\n"
                        : "layout(std430, binding = 0) readonly buffer a_vbuf { uvec4 a_vec[]; };\n";
  if (vec_b) s += t.cpu ? "layout(std430, binding = 1) readonly buffer b_vbuf { vec4 b_v4[]; };\n"
                        : "layout(std430, binding = 1) readonly buffer b_vbuf { uvec4 b_vec[]; };\n";
  const bool push = (kCoreWords + kWordsPerEpilogue * E) * 4 <= expr::kPushConstantBudget;
  s += push ? "layout(push_constant) uniform Params {\n"
            : "layout(std430, binding = " + std::to_string(binding) + ") readonly buffer Params {\n";
  s += "  uint M, N, K, batches;\n"
       "  uint bshape[3];       // batch dims, outermost first (1 where unused)\n"
       "  int a_bs[3], b_bs[3];  // batch strides\n"
       "  int a_rs, a_cs, b_rs, b_cs;\n"
       "  uint a_off, b_off, c_off;  // element 0 of each view, from its binding's start\n";
  if (E) {
    const std::string n = std::to_string(E);
    s += "  int e_bs[" + std::to_string(3 * E) + "];  // epilogue input e, batch dim d at [3 * e + d]\n"
         "  int e_rs[" + n + "], e_cs[" + n + "];\n  uint e_off[" + n + "];\n";
  }
  s += "} p;\n\n";
  bool need_bf16 = out == DType::BF16 || (epilogue && sig_.value == DType::BF16);
  if (need_bf16)
    s += "// Round to nearest even; NaN stays a (quiet) NaN.\n"
         "uint alk_f32_to_bf16(float v) {\n"
         "  uint b = floatBitsToUint(v);\n"
         "  if (isnan(v)) return (b >> 16) | 0x40u;\n"
         "  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;\n"
         "}\n";
  bool need_i32 = false;
  for (size_t e = 0; e < E; ++e) need_i32 = need_i32 || sig_.epilogue_inputs[e] == DType::I32;
  if (need_i32)
    s += "// Sign extension by hand (lavapipe miscompiles int64_t(int) compared with a constant).\n"
         "int64_t alk_i32_to_i64(int x) { return packInt2x32(ivec2(x, x >> 31)); }\n";
  s += "ACC load_a(int i) { return ACC(" + load_as_compute(sig_.input, "a_data[i]") + "); }\n";
  s += "ACC load_b(int i) { return ACC(" + load_as_compute(sig_.input, "b_data[i]") + "); }\n";
  // The product as the node's dtype sees it (slot 0 of the epilogue).
  std::string round = "v";
  if (sig_.value == DType::BF16) round = "uintBitsToFloat(alk_f32_to_bf16(float(v)) << 16)";
  if (sig_.value == DType::F16) round = "unpackHalf2x16(packHalf2x16(vec2(float(v), 0.0))).x";
  if (sig_.value == DType::F32) round = "float(v)";
  s += value_ct + " alk_value(ACC v) { return " + (epilogue ? round : value_ct + "(v)") + "; }\n";
  if (epilogue) s += fn;
  s += "\n";
  // Which tile element load slot `e` of an invocation fetches: consecutive invocations
  // walk the operand's contiguous dimension.
  s += a_k ? "#define A_M(e) ((e) / BK)\n#define A_K(e) ((e) % BK)\n" : "#define A_M(e) ((e) % BM)\n#define A_K(e) ((e) / BM)\n";
  s += b_n ? "#define B_K(e) ((e) / BN)\n#define B_N(e) ((e) % BN)\n" : "#define B_K(e) ((e) % BK)\n#define B_N(e) ((e) / BK)\n";
  const std::string n_e = u(static_cast<uint32_t>(E));
  // The batch loop and each view's start for this batch matrix (both kernel shapes).
  std::string batch_head = R"(  for (uint bz = gl_WorkGroupID.z; bz < p.batches; bz += gl_NumWorkGroups.z) {
    int a_base = int(p.a_off), b_base = int(p.b_off);
)";
  if (E) batch_head += "    int e_base[" + std::to_string(E) + "];\n    for (uint e = 0u; e < " + n_e + "; ++e) e_base[e] = int(p.e_off[e]);\n";
  batch_head += R"(    uint rem = bz;
    for (int d = 2; d >= 0; --d) {
      const int c = int(rem % p.bshape[d]);
      rem /= p.bshape[d];
      a_base += c * p.a_bs[d];
      b_base += c * p.b_bs[d];
)";
  if (E) batch_head += "      for (uint e = 0u; e < " + n_e + "; ++e) e_base[e] += c * p.e_bs[3u * e + uint(d)];\n";
  batch_head += "    }\n    const uint c_base = p.c_off + bz * p.M * p.N;\n";
  // Stores product value `v` (ACC) at row r, column c, through the epilogue.
  std::string value = "alk_value(v)";
  if (epilogue) {
    value = "alk_epilogue(alk_value(v)";
    for (size_t e = 0; e < E; ++e) {
      const std::string es = std::to_string(e);
      value += ", " + load_as_compute(sig_.epilogue_inputs[e], "e" + es + "_data[e_base[" + es + "] + int(r) * p.e_rs[" +
                                                                   es + "] + int(c) * p.e_cs[" + es + "]]");
    }
    value += ")";
  }
  const std::string store = "c_data[c_base + r * p.N + c] = " + store_as(out, value) + ";";
  // Tile loads into registers, zero past the edges (`T` the register type).
  auto tile_loads = [](const std::string& k_start, const std::string& indent, const std::string& zero,
                       const std::string& la, const std::string& lb) {
    return indent + "for (uint i = 0u; i < LA; ++i) {\n" + indent + "  const uint e = tid + i * WG, r = row0 + A_M(e), k = " +
           k_start + " + A_K(e);\n" + indent + "  ra[i] = r < p.M && k < p.K ? " + la +
           "(a_base + int(r) * p.a_rs + int(k) * p.a_cs) : " + zero + ";\n" + indent + "}\n" + indent +
           "for (uint i = 0u; i < LB; ++i) {\n" + indent + "  const uint e = tid + i * WG, k = " + k_start +
           " + B_K(e), c = col0 + B_N(e);\n" + indent + "  rb[i] = k < p.K && c < p.N ? " + lb +
           "(b_base + int(k) * p.b_rs + int(c) * p.b_cs) : " + zero + ";\n" + indent + "}\n";
  };
  s += "#define LA ((BM * BK) / WG)\n#define LB ((BK * BN) / WG)\n";

  if (t.cpu) {
    // Register blocks (matmul.h): rows ty * TM.., columns tx * TN.. of the workgroup's tile.
    const uint32_t tm = t.tm, tn = t.tn;
    s += "void main() {\n"
         "  const uint tid = gl_LocalInvocationID.x, tx = tid % (BN / TN), ty = tid / (BN / TN);\n"
         "  const uint row0 = gl_WorkGroupID.y * BM + ty * TM, col0 = gl_WorkGroupID.x * BN + tx * TN;\n";
    s += batch_head;
    // Accumulators as plain variables (an array read at a computed index would stay in memory).
    for (uint32_t i = 0; i < tm * tn; ++i) s += "    ACC acc" + std::to_string(i) + " = ACC(0);\n";
    // Rows and columns past the edges read the last one (never stored): no masks in the loop.
    for (uint32_t i = 0; i < tm; ++i)
      s += "    const int ar" + std::to_string(i) + " = a_base + int(min(row0 + " + u(i) + ", p.M - 1u)) * p.a_rs;\n";
    for (uint32_t j = 0; j < tn; ++j)
      s += "    const int bc" + std::to_string(j) + " = b_base + int(min(col0 + " + u(j) + ", p.N - 1u)) * p.b_cs;\n";
    if (vec_a && !a_k) s += "    const int am0 = a_base + int(min(row0, p.M - 4u));  // A's 4 rows, contiguous\n";
    if (vec_b && b_n)
      for (uint32_t g = 0; g < tn / 4; ++g)
        s += "    const int bn" + std::to_string(g) + " = b_base + int(min(col0 + " + u(4 * g) + ", p.N - 4u));\n";
    auto step = [&](const std::string& kk, const std::string& indent) {
      std::string b;
      for (uint32_t i = 0; i < tm; ++i)
        b += indent + "const ACC a" + std::to_string(i) + " = load_a(ar" + std::to_string(i) + " + int(" + kk + ") * p.a_cs);\n";
      for (uint32_t j = 0; j < tn; ++j)
        b += indent + "const ACC b" + std::to_string(j) + " = load_b(bc" + std::to_string(j) + " + int(" + kk + ") * p.b_rs);\n";
      for (uint32_t i = 0; i < tm; ++i)
        for (uint32_t j = 0; j < tn; ++j) {
          const std::string ai = std::to_string(i * tn + j);
          b += indent + "acc" + ai + " = fma(a" + std::to_string(i) + ", b" + std::to_string(j) + ", acc" + ai + ");\n";
        }
      return b;
    };
    s += "    uint k = 0u;\n    for (; k + 4u <= p.K; k += 4u) {\n";
    if (vec_a || vec_b) {
      // f32 operands whose rows start 16-byte aligned (the host checks: launch_fused) are read
      // a vec4 at a time: on lavapipe each storage-buffer access is a loop over the SIMD lanes
      // whatever its width, so 4 k steps of a 4 x 16 block take 4 + 16 loads instead of 80.
      // A along k: row i's 4 k values (one vec4 per row); along m: the block's 4 rows at one
      // k (TM == 4). B along n: 4 columns per vec4 at one k (N % 4 == 0: the last vec4 of a
      // row clamps to N - 4); along k: column j's 4 k values.
      const std::string I = "        ";
      if (vec_a && a_k)
        for (uint32_t i = 0; i < tm; ++i)
          s += "      const vec4 va" + std::to_string(i) + " = a_v4[uint(ar" + std::to_string(i) + " + int(k)) >> 2u];\n";
      if (vec_a && !a_k)
        for (int q = 0; q < 4; ++q)
          s += "      const vec4 va" + std::to_string(q) + " = a_v4[uint(am0 + int(k + " + std::to_string(q) +
               "u) * p.a_cs) >> 2u];\n";
      if (vec_b && !b_n)
        for (uint32_t j = 0; j < tn; ++j)
          s += "      const vec4 vb" + std::to_string(j) + " = b_v4[uint(bc" + std::to_string(j) + " + int(k)) >> 2u];\n";
      for (int q = 0; q < 4; ++q) {
        const std::string kk = "k + " + std::to_string(q) + "u", qs = std::to_string(q);
        s += "      {\n";
        if (vec_b && b_n)
          for (uint32_t g = 0; g < tn / 4; ++g)
            s += I + "const vec4 vb" + std::to_string(g) + " = b_v4[uint(bn" + std::to_string(g) + " + int(" + kk +
                 ") * p.b_rs) >> 2u];\n";
        for (uint32_t i = 0; i < tm; ++i) {
          const std::string is = std::to_string(i);
          s += I + "const ACC a" + is + " = " +
               (!vec_a ? "load_a(ar" + is + " + int(" + kk + ") * p.a_cs)" : a_k ? "va" + is + "[" + qs + "]" : "va" + qs + "[" + is + "]") +
               ";\n";
        }
        for (uint32_t j = 0; j < tn; ++j) {
          const std::string js = std::to_string(j);
          s += I + "const ACC b" + js + " = " +
               (!vec_b ? "load_b(bc" + js + " + int(" + kk + ") * p.b_rs)"
                       : b_n ? "vb" + std::to_string(j / 4) + "[" + std::to_string(j % 4) + "]" : "vb" + js + "[" + qs + "]") +
               ";\n";
        }
        for (uint32_t i = 0; i < tm; ++i)
          for (uint32_t j = 0; j < tn; ++j) {
            const std::string ai = std::to_string(i * tn + j);
            s += I + "acc" + ai + " = fma(a" + std::to_string(i) + ", b" + std::to_string(j) + ", acc" + ai + ");\n";
          }
        s += "      }\n";
      }
    } else {
      for (int q = 0; q < 4; ++q) s += "      {\n" + step("k + " + std::to_string(q) + "u", "        ") + "      }\n";
    }
    s += "    }\n    for (; k < p.K; ++k) {\n" + step("k", "      ") + "    }\n";
    for (uint32_t i = 0; i < tm; ++i)
      for (uint32_t j = 0; j < tn; ++j)
        s += "    if (row0 + " + u(i) + " < p.M && col0 + " + u(j) + " < p.N) {\n      const uint r = row0 + " + u(i) +
             ", c = col0 + " + u(j) + ";\n      const ACC v = acc" + std::to_string(i * tn + j) + ";\n      " + store + "\n    }\n";
    s += "  }\n}\n";
    return s;
  }

  // Cooperative-matrix tiles store accumulator (i, j) through the subgroup's 16x16 of Cs,
  // element by element through the epilogue. Without an epilogue, an f16 product whose
  // fragment lies inside C with 16-byte aligned rows is converted and stored whole.
  const bool whole_f16_stores = !epilogue && out == DType::F16 && sig_.value == DType::F16;
  auto coop_store = [&](const std::string& i, const std::string& j) {
    const std::string rf = "row0 + wm * 16u * TM + " + std::to_string(16 * std::stoi(i)) + "u",
                      cf = "col0 + wn * 16u * TN + " + std::to_string(16 * std::stoi(j)) + "u";
    std::string x;
    if (whole_f16_stores)
      x += "    if (" + rf + " + 16u <= p.M && " + cf + " + 16u <= p.N && c_base % 8u == 0u && p.N % 8u == 0u) {\n"
           "      coopMatStoreNV(fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(acc" + i + j + "), c_data, c_base + (" + rf +
           ") * p.N + " + cf + ", p.N, false);\n    } else {\n";
    x += "    coopMatStoreNV(acc" + i + j + ", Cs, sg * 256u, 16u, false);\n"
         "    subgroupMemoryBarrierShared();\n    subgroupBarrier();\n"
         "    for (uint q = 0u; q < 8u; ++q) {\n"
         "      const uint e = lane + q * 32u;\n"
         "      const uint r = " + rf + " + e / 16u, c = " + cf + " + e % 16u;\n"
         "      if (r < p.M && c < p.N) {\n"
         "        const ACC v = Cs[sg * 256u + e];\n"
         "        " + store + "\n"
         "      }\n    }\n    subgroupBarrier();\n";
    if (whole_f16_stores) x += "    }\n";
    return x;
  };
  // Both cooperative-matrix forms open main() alike: the invocation's subgroup and its
  // (16 TM) x (16 TN) piece, the tile's origin, the batch item, and the TM x TN accumulators,
  // written out unrolled (arrays of cooperative matrices indexed in loops may be kept in local
  // memory rather than registers). `each` spells a statement per accumulator.
  const int frags_m = static_cast<int>(t.tm), frags_n = static_cast<int>(t.tn);
  auto each = [&](const std::function<std::string(const std::string&, const std::string&)>& f) {
    std::string x;
    for (int i = 0; i < frags_m; ++i)
      for (int j = 0; j < frags_n; ++j) x += f(std::to_string(i), std::to_string(j));
    return x;
  };
  const std::string coop_main_head = R"(
void main() {
  const uint tid = gl_LocalInvocationID.x, sg = tid / 32u, lane = tid % 32u;
  const uint wm = sg / (BN / (16u * TN)), wn = sg % (BN / (16u * TN));  // the subgroup's (16 TM) x (16 TN) piece
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
)" + batch_head + each([](const std::string& i, const std::string& j) {
    return "    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc" + i + j + " = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);\n";
  });
  if (t.coop && t.direct) {
    // Fragments straight from the operands (MatmulTiles::direct): rows and columns of
    // fragments past M or N read the last whole fragment (M, N multiples of 16) and are
    // never stored. Two sets of fragments alternate: set 1 loads k0 + 16 while set 0 is
    // multiplied, and the other way round.
    if (!vec_a || !vec_b) fail("matmul: direct cooperative-matrix loads need 16-byte loads of both operands");
    s += "shared float Cs[(WG / 32u) * 256u];  // per subgroup: one 16x16 tile on its way to the store\n";
    s += coop_main_head;
    for (int i = 0; i < frags_m; ++i)
      s += "    const uint ar" + std::to_string(i) + " = uint(a_base) / 8u + min(row0 + wm * 16u * TM + " + std::to_string(16 * i) +
           "u, p.M - 16u) * uint(p.a_rs) / 8u;\n";
    for (int j = 0; j < frags_n; ++j)
      s += "    const uint bc" + std::to_string(j) + " = uint(b_base) / 8u + min(col0 + wn * 16u * TN + " + std::to_string(16 * j) +
           "u, p.N - 16u) / 8u;\n";
    s += "    const uint a_st = uint(p.a_rs) / 8u, b_st = uint(p.b_rs) / 8u;\n";
    for (int set = 0; set < 2; ++set) {
      for (int i = 0; i < frags_m; ++i) s += "    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa" + std::to_string(set) + std::to_string(i) + ";\n";
      for (int j = 0; j < frags_n; ++j) s += "    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb" + std::to_string(set) + std::to_string(j) + ";\n";
    }
    auto load = [&](int set, const std::string& k, const std::string& in) {
      std::string x;
      for (int i = 0; i < frags_m; ++i)
        x += in + "coopMatLoadNV(fa" + std::to_string(set) + std::to_string(i) + ", a_vec, ar" + std::to_string(i) + " + (" + k +
             ") / 8u, a_st, false);\n";
      for (int j = 0; j < frags_n; ++j)
        x += in + "coopMatLoadNV(fb" + std::to_string(set) + std::to_string(j) + ", b_vec, bc" + std::to_string(j) + " + (" + k +
             ") * b_st, b_st, false);\n";
      return x;
    };
    auto mma = [&](int set, const std::string& in) {
      return each([&](const std::string& i, const std::string& j) {
        const std::string st = std::to_string(set);
        return in + "acc" + i + j + " = coopMatMulAddNV(fa" + st + i + ", fb" + st + j + ", acc" + i + j + ");\n";
      });
    };
    s += load(0, "0u", "    ");
    s += "    for (uint k0 = 0u; k0 < p.K; k0 += 32u) {\n";
    s += "      const bool more = k0 + 16u < p.K;\n      if (more) {\n" + load(1, "k0 + 16u", "        ") + "      }\n";
    s += mma(0, "      ");
    s += "      if (!more) break;\n      if (k0 + 32u < p.K) {\n" + load(0, "k0 + 32u", "        ") + "      }\n";
    s += mma(1, "      ");
    s += "    }\n";
    s += each(coop_store);
    s += "  }\n}\n";
    return s;
  }

  if (t.coop) {
    // Cooperative matrices (VK_NV_cooperative_matrix): subgroups of 32, each computing a
    // (16 TM) x (16 TN) piece of the tile as TM x TN 16x16 f32 accumulators; A and B slices are
    // staged in shared memory as f16 (rows padded by 8 halfs: 16-byte aligned, and the 8 rows
    // a 16x16 load reads at once fall in 8 different 16-byte bank groups).
    const uint32_t limit = shared_limit ? shared_limit : ctx_.info().max_shared_memory;
    const uint32_t nbuf = coop_shared_bytes(t, 2) <= limit ? 2u : 1u;
    s += "#define NBUF " + u(nbuf) + R"(
#define AS_STRIDE (BK + 8u)  // As[m][k]
#define BS_STRIDE (BN + 8u)  // Bs[k][n]
#define LA8 ((BM * BK) / (8u * WG))
#define LB8 ((BK * BN) / (8u * WG))
shared float Cs[(WG / 32u) * 256u];  // per subgroup: one 16x16 tile on its way to the store

float16_t raw_a(int i) { return a_data[i]; }
float16_t raw_b(int i) { return b_data[i]; }
uvec4 pack8(float16_t h[8]) {
  return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
               packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
}
)";
    // Operands read 16 bytes at a time are staged 16 bytes at a time (uvec4; cooperative
    // matrix loads count offsets and strides in that unit), the rest as halfs.
    // With two of each (ping-pong), slice i + 1 is stored while slice i may still be read,
    // so one barrier per slice suffices; with one, a second barrier guards the stores.
    s += vec_a ? "#define A_BUF (BM * AS_STRIDE / 8u)\nshared uvec4 As[NBUF * A_BUF];\n"
               : "#define A_BUF (BM * AS_STRIDE)\nshared float16_t As[NBUF * A_BUF];\n";
    s += vec_b ? "#define B_BUF (BK * BS_STRIDE / 8u)\nshared uvec4 Bs[NBUF * B_BUF];\n"
               : "#define B_BUF (BK * BS_STRIDE)\nshared float16_t Bs[NBUF * B_BUF];\n";
    if (vec_a)
      s += R"(// 8 halfs of row r from column k (zero past the edges): one 16-byte load when all are inside.
uvec4 load_a8(uint r, uint k, int a_base) {
  if (r >= p.M) return uvec4(0u);
  const int i = a_base + int(r) * p.a_rs + int(k);
  if (k + 8u <= p.K) return a_vec[i / 8];
  float16_t h[8];
  for (uint q = 0u; q < 8u; ++q) h[q] = k + q < p.K ? a_data[i + int(q)] : float16_t(0.0);
  return pack8(h);
}
)";
    if (vec_b)
      s += R"(uvec4 load_b8(uint k, uint c, int b_base) {
  if (k >= p.K) return uvec4(0u);
  const int i = b_base + int(k) * p.b_rs + int(c);
  if (c + 8u <= p.N) return b_vec[i / 8];
  float16_t h[8];
  for (uint q = 0u; q < 8u; ++q) h[q] = c + q < p.N ? b_data[i + int(q)] : float16_t(0.0);
  return pack8(h);
}
)";
    s += coop_main_head;
    // Register sets: one set of staging registers by default. ALK_VK_COOP_PREFETCH=2 gives
    // double-buffered tiles a second set, so the global loads of slice i + 2 are issued while
    // slice i is multiplied; on the H200 that was slower (128x256x16: 1.286 ms with two sets,
    // 1.099 ms with one, at 4096^3: the second set's registers cost more than the overlap won).
    const char* prefetch_env = std::getenv("ALK_VK_COOP_PREFETCH");
    const int sets = nbuf == 2 && prefetch_env && std::string_view(prefetch_env) == "2" ? 2 : 1;
    for (int r = 0; r < sets; ++r) {
      const std::string n = std::to_string(r);
      s += vec_a ? "    uvec4 ra" + n + "[LA8];\n" : "    float16_t ra" + n + "[LA];\n";
      s += vec_b ? "    uvec4 rb" + n + "[LB8];\n" : "    float16_t rb" + n + "[LB];\n";
    }
    // Loads of the slice starting at k into register set r.
    auto loads = [&](int r, const std::string& k, const std::string& in) {
      const std::string ra = "ra" + std::to_string(r), rb = "rb" + std::to_string(r);
      std::string x;
      if (vec_a)
        x += in + "[[unroll]] for (uint i = 0u; i < LA8; ++i) {\n" + in + "  const uint e = tid + i * WG;\n" + in + "  " + ra +
             "[i] = load_a8(row0 + e / (BK / 8u), " + k + " + (e % (BK / 8u)) * 8u, a_base);\n" + in + "}\n";
      else
        x += in + "[[unroll]] for (uint i = 0u; i < LA; ++i) {\n" + in + "  const uint e = tid + i * WG, r = row0 + A_M(e), k = " + k +
             " + A_K(e);\n" + in + "  " + ra + "[i] = r < p.M && k < p.K ? raw_a(a_base + int(r) * p.a_rs + int(k) * p.a_cs) : float16_t(0.0);\n" +
             in + "}\n";
      if (vec_b)
        x += in + "[[unroll]] for (uint i = 0u; i < LB8; ++i) {\n" + in + "  const uint e = tid + i * WG;\n" + in + "  " + rb +
             "[i] = load_b8(" + k + " + e / (BN / 8u), col0 + (e % (BN / 8u)) * 8u, b_base);\n" + in + "}\n";
      else
        x += in + "[[unroll]] for (uint i = 0u; i < LB; ++i) {\n" + in + "  const uint e = tid + i * WG, k = " + k +
             " + B_K(e), c = col0 + B_N(e);\n" + in + "  " + rb +
             "[i] = k < p.K && c < p.N ? raw_b(b_base + int(k) * p.b_rs + int(c) * p.b_cs) : float16_t(0.0);\n" + in + "}\n";
      return x;
    };
    // Register set r into shared buffer `buf`.
    auto stores = [&](int r, const std::string& buf) {
      const std::string ra = "ra" + std::to_string(r), rb = "rb" + std::to_string(r);
      std::string x;
      x += vec_a ? "      [[unroll]] for (uint i = 0u; i < LA8; ++i) {\n        const uint e = tid + i * WG;\n        As[" + buf +
                       " * A_BUF + (e / (BK / 8u)) * (AS_STRIDE / 8u) + e % (BK / 8u)] = " + ra + "[i];\n      }\n"
                 : "      [[unroll]] for (uint i = 0u; i < LA; ++i) {\n        const uint e = tid + i * WG;\n        As[" + buf +
                       " * A_BUF + A_M(e) * AS_STRIDE + A_K(e)] = " + ra + "[i];\n      }\n";
      x += vec_b ? "      [[unroll]] for (uint i = 0u; i < LB8; ++i) {\n        const uint e = tid + i * WG;\n        Bs[" + buf +
                       " * B_BUF + (e / (BN / 8u)) * (BS_STRIDE / 8u) + e % (BN / 8u)] = " + rb + "[i];\n      }\n"
                 : "      [[unroll]] for (uint i = 0u; i < LB; ++i) {\n        const uint e = tid + i * WG;\n        Bs[" + buf +
                       " * B_BUF + B_K(e) * BS_STRIDE + B_N(e)] = " + rb + "[i];\n      }\n";
      return x;
    };
    // The products of the slice in shared buffer `buf`.
    const std::string a_unit = vec_a ? " / 8u" : "", b_unit = vec_b ? " / 8u" : "";
    auto products = [&](const std::string& buf) {
      std::string x = "      [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {\n";
      for (int i = 0; i < frags_m; ++i)
        x += "        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa" + std::to_string(i) + ";\n        coopMatLoadNV(fa" +
             std::to_string(i) + ", As, " + buf + " * A_BUF + ((wm * 16u * TM + " + std::to_string(16 * i) + "u) * AS_STRIDE + kk)" +
             a_unit + ", AS_STRIDE" + a_unit + ", false);\n";
      for (int j = 0; j < frags_n; ++j)
        x += "        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb" + std::to_string(j) + ";\n        coopMatLoadNV(fb" +
             std::to_string(j) + ", Bs, " + buf + " * B_BUF + (kk * BS_STRIDE + wn * 16u * TN + " + std::to_string(16 * j) + "u)" +
             b_unit + ", BS_STRIDE" + b_unit + ", false);\n";
      x += each([](const std::string& i, const std::string& j) {
        return "        acc" + i + j + " = coopMatMulAddNV(fa" + i + ", fb" + j + ", acc" + i + j + ");\n";
      });
      return x + "      }\n";
    };
    s += loads(0, "0u", "    ");
    if (sets == 1) {
      // Store slice k0 (registers) into `buf`, then fetch slice k0 + BK into the registers
      // before this slice's products, so their latency hides behind the tensor-core work.
      s += nbuf == 2 ? "    for (uint k0 = 0u, buf = 0u; k0 < p.K; k0 += BK, buf ^= 1u) {\n"
                     : "    for (uint k0 = 0u, buf = 0u; k0 < p.K; k0 += BK) {\n";
      s += stores(0, "buf");
      s += "      barrier();\n      if (k0 + BK < p.K) {\n" + loads(0, "k0 + BK", "        ") + "      }\n";
      s += products("buf");
      if (nbuf == 1) s += "      barrier();  // one buffer: every subgroup is done with it before the next stores\n";
      s += "    }\n";
    } else {
      // Two slices per trip: set 0 and buffer 0 hold the even slices, set 1 and buffer 1 the
      // odd ones; each set is refilled with the slice two ahead as soon as it is stored.
      s += "    if (BK < p.K) {\n" + loads(1, "BK", "      ") + "    }\n";
      s += "    for (uint k0 = 0u; k0 < p.K; k0 += 2u * BK) {\n";
      s += stores(0, "0u");
      s += "      barrier();\n      if (k0 + 2u * BK < p.K) {\n" + loads(0, "k0 + 2u * BK", "        ") + "      }\n";
      s += products("0u");
      s += "      if (k0 + BK >= p.K) break;\n";
      s += stores(1, "1u");
      s += "      barrier();\n      if (k0 + 3u * BK < p.K) {\n" + loads(1, "k0 + 3u * BK", "        ") + "      }\n";
      s += products("1u");
      s += "    }\n";
    }
    s += "    barrier();  // before the next batch matrix reuses the buffers\n";
    s += each(coop_store);
    s += "  }\n}\n";
    return s;
  }

  // GPUs (matmul.h): each invocation owns TM/4 x TN/4 blocks of 4 x 4 outputs, the blocks
  // spread BM/(TM/4) rows and BN/(TN/4) columns apart, so a k step reads TM/4 + TN/4 vec4s
  // of shared memory per TM x TN fmas (a warp's A reads are broadcasts, its B reads
  // consecutive). Shared slices are double-buffered (one barrier per slice) where both fit
  // the device's shared memory (f32 128x128 tiles: 33 KiB; lavapipe offers 32 KiB).
  const uint32_t slice_bytes = t.bk * (t.bm + 4 + t.bn + 4) * (f64 ? 8u : 4u);
  const bool two_buffers = 2 * slice_bytes <= ctx_.info().max_shared_memory;
  s += std::string("#define ACC4 ") + (f64 ? "dvec4" : "vec4") + "\n#define NBUF " + (two_buffers ? "2u" : "1u") + "\n" +
       R"(#define AS_STRIDE (BM + 4u)  // As[k][m]; + 4: rows stay 16-byte aligned, stores along k spread over banks
#define BS_STRIDE (BN + 4u)  // Bs[k][n]
#define A_BUF (BK * AS_STRIDE)
#define B_BUF (BK * BS_STRIDE)
#define RM (BM / (TM / 4u))  // distance between an invocation's row blocks
#define CN (BN / (TN / 4u))

shared ACC4 As4[NBUF * A_BUF / 4u];
shared ACC4 Bs4[NBUF * B_BUF / 4u];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % (BN / TN), ty = tid / (BN / TN);
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
)";
  s += batch_head;
  s += R"(    ACC acc[TM * TN];
    [[unroll]] for (uint i = 0u; i < TM * TN; ++i) acc[i] = ACC(0);
    // Staged in registers, so the next slice's global loads overlap this slice's arithmetic.
    ACC ra[LA], rb[LB];
)";
  s += tile_loads("0u", "    ", "ACC(0)", "load_a", "load_b");
  s += R"(    uint buf = 0u;
    for (uint k0 = 0u; k0 < p.K; k0 += BK) {
      [[unroll]] for (uint i = 0u; i < LA; ++i) {
        const uint e = tid + i * WG, x = buf * A_BUF + A_K(e) * AS_STRIDE + A_M(e);
        As4[x / 4u][x % 4u] = ra[i];
      }
      [[unroll]] for (uint i = 0u; i < LB; ++i) {
        const uint e = tid + i * WG, x = buf * B_BUF + B_K(e) * BS_STRIDE + B_N(e);
        Bs4[x / 4u][x % 4u] = rb[i];
      }
      barrier();
      const uint k1 = k0 + BK;
      if (k1 < p.K) {
)";
  s += tile_loads("k1", "        ", "ACC(0)", "load_a", "load_b");
  s += R"(      }
      [[unroll]] for (uint kk = 0u; kk < BK; ++kk) {
        ACC4 av[TM / 4u], bv[TN / 4u];
        [[unroll]] for (uint g = 0u; g < TM / 4u; ++g) av[g] = As4[(buf * A_BUF + kk * AS_STRIDE + g * RM) / 4u + ty];
        [[unroll]] for (uint h = 0u; h < TN / 4u; ++h) bv[h] = Bs4[(buf * B_BUF + kk * BS_STRIDE + h * CN) / 4u + tx];
        [[unroll]] for (uint i = 0u; i < TM; ++i)
          [[unroll]] for (uint j = 0u; j < TN; ++j)
            acc[i * TN + j] = fma(av[i / 4u][i % 4u], bv[j / 4u][j % 4u], acc[i * TN + j]);
      }
)";
  s += two_buffers ? "      buf ^= 1u;  // the next slice goes to the other buffer: no barrier before its stores\n"
                   : "      barrier();  // one buffer: every invocation is done with it before the next stores\n";
  s += R"(    }
    [[unroll]] for (uint i = 0u; i < TM; ++i) {
      const uint r = row0 + (i / 4u) * RM + ty * 4u + i % 4u;
      [[unroll]] for (uint j = 0u; j < TN; ++j) {
        const uint c = col0 + (j / 4u) * CN + tx * 4u + j % 4u;
        if (r < p.M && c < p.N) {
          const ACC v = acc[i * TN + j];
          )" + store + R"(
        }
      }
    }
)";
  s += two_buffers ? "    barrier();  // before the next batch matrix stores into the buffers\n" : "";
  s += R"(  }
}
)";
  return s;
}

const MatmulKernel::Variant& MatmulKernel::variant(const MatmulTiles& t, bool a_k, bool b_n, bool fused, bool vec_a,
                                                   bool vec_b) const {
  vec_a = vec_a && (t.coop ? a_k : t.cpu && sig_.input == DType::F32);
  vec_b = vec_b && (t.coop ? b_n : t.cpu && sig_.input == DType::F32);
  std::lock_guard lock(mutex_);
  for (const auto& v : variants_)
    if (v->tiles.bm == t.bm && v->tiles.bn == t.bn && v->tiles.bk == t.bk && v->tiles.tm == t.tm &&
        v->tiles.tn == t.tn && v->tiles.coop == t.coop && v->tiles.cpu == t.cpu && v->tiles.direct == t.direct && v->a_k == a_k &&
        v->b_n == b_n && v->fused == fused && v->vec_a == vec_a && v->vec_b == vec_b)
      return *v;
  if (!t.coop && !t.cpu && (t.tm % 4 || t.tn % 4 || t.bm % t.tm || t.bn % t.tn))
    fail("matmul: shared-memory tiles need TM and TN multiples of 4 dividing BM and BN");
  if (t.coop && !(sig_.input == DType::F16 && ctx_.info().cooperative_matrix_nv))
    fail("matmul: cooperative-matrix tiles need f16 operands and VK_NV_cooperative_matrix");
  if (t.coop) {
    const uint32_t wg = t.threads();
    if (t.direct && !(vec_a && vec_b))
      fail("matmul: direct cooperative-matrix loads need both operands contiguous along k / n with 16-byte aligned rows");
    if (t.tm == 0 || t.tn == 0 || t.bm % (16 * t.tm) || t.bn % (16 * t.tn) || t.bk % 16 ||
        (!t.direct && ((t.bm * t.bk) % (8 * wg) || (t.bk * t.bn) % (8 * wg))))
      fail("matmul: cooperative-matrix tiles need BM, BN multiples of 16 TM, 16 TN, BK of 16, and slices of 8 halfs per invocation");
    if (wg > ctx_.info().max_workgroup_invocations)
      fail("matmul: cooperative-matrix tiles of " + std::to_string(wg) + " invocations exceed the device's " +
           std::to_string(ctx_.info().max_workgroup_invocations));
    if (coop_shared_bytes(t, 1) > ctx_.info().max_shared_memory)
      fail("matmul: cooperative-matrix tiles need " + std::to_string(coop_shared_bytes(t, 1)) +
           " bytes of shared memory, the device has " + std::to_string(ctx_.info().max_shared_memory));
  }
  auto v = std::make_unique<Variant>();
  v->tiles = t;
  v->a_k = a_k, v->b_n = b_n, v->fused = fused, v->vec_a = vec_a, v->vec_b = vec_b;
  v->epilogue_inputs = fused && sig_.epilogue ? sig_.epilogue_inputs.size() : 0;
  v->push = (kCoreWords + kWordsPerEpilogue * v->epilogue_inputs) * 4 <= expr::kPushConstantBudget;
  v->bindings = static_cast<uint32_t>(3 + v->epilogue_inputs + (v->push ? 0 : 1));
  const std::string src = source(t, a_k, b_n, fused, vec_a, vec_b);
  v->pipeline = &ctx_.pipeline(src, v->bindings,
                               v->push ? static_cast<uint32_t>((kCoreWords + kWordsPerEpilogue * v->epilogue_inputs) * 4) : 0);
  variants_.push_back(std::move(v));
  return *variants_.back();
}

void MatmulKernel::launch(Encoder& enc, const ViewArg& a, const ViewArg& b, const ViewArg& out,
                          std::span<const ViewArg> eps) const {
  const size_t R = a.shape.size();
  if (R < 2 || b.shape.size() != R) fail("matmul: operands of equal rank >= 2 expected");
  const int64_t k = a.shape[R - 1], n = b.shape[R - 1];
  if (b.shape[R - 2] != k) fail("matmul: inner dimensions differ");
  if (a.dtype != sig_.input || b.dtype != sig_.input) fail("matmul: operand dtype differs from the kernel's");
  Shape prod(a.shape.begin(), a.shape.end() - 1);
  prod.push_back(n);
  for (size_t d = 0; d + 2 < R; ++d)
    if (b.shape[d] != a.shape[d]) fail("matmul: batch dims must be broadcast to the output's");
  if (numel(out.shape) != numel(prod)) fail("matmul: the output has " + std::to_string(numel(out.shape)) + " elements, the product " + std::to_string(numel(prod)));
  {
    int64_t expect = 1;
    for (size_t d = out.shape.size(); d-- > 0;) {
      if (out.shape[d] != 1 && out.strides[d] != expect) fail("matmul: the output is not contiguous");
      expect *= out.shape[d];
    }
  }
  if (numel(prod) == 0) return;
  if (numel(prod) > std::numeric_limits<int32_t>::max()) fail("matmul: more than 2^31 output elements");
  if (eps.size() != (sig_.epilogue ? sig_.epilogue_inputs.size() : 0)) fail("matmul: wrong number of epilogue inputs");

  if (!sig_.epilogue) return launch_fused(enc, a, b, out, {}, false);
  // Epilogue inputs over the product's layout; else the epilogue runs as a separate pass.
  std::vector<ViewArg> over_prod;
  bool fusable = eps.size() <= kMaxFusedEpilogueInputs;
  for (size_t e = 0; e < eps.size() && fusable; ++e) {
    if (eps[e].dtype != sig_.epilogue_inputs[e]) fail("matmul: epilogue input dtype differs from the kernel's");
    std::optional<Shape> st = eps[e].shape == prod ? std::optional<Shape>(eps[e].strides)
                                                   : restride(eps[e].shape, eps[e].strides, prod);
    if (!st) {
      fusable = false;
      break;
    }
    ViewArg v = eps[e];
    v.shape = prod;
    v.strides = *st;
    over_prod.push_back(std::move(v));
  }
  if (fusable) return launch_fused(enc, a, b, out, over_prod, true);

  // Unfused: the product (node dtype, contiguous) into scratch, then the epilogue as a Map.
  ViewArg scratch{ctx_.pool().allocate(static_cast<size_t>(numel(prod)) * dtype_size(sig_.value)), 0, sig_.value,
                  prod, contiguous_strides(prod), 0};
  launch_fused(enc, a, b, scratch, {}, false);
  std::vector<ViewArg> in{scratch};
  in[0].shape = out.shape;
  in[0].strides = contiguous_strides(out.shape);
  in.insert(in.end(), eps.begin(), eps.end());
  {
    std::lock_guard lock(mutex_);
    if (!epilogue_map_) {
      expr::MapSignature msig{"matmul_epilogue", {sig_.value}, sig_.output};
      msig.inputs.insert(msig.inputs.end(), sig_.epilogue_inputs.begin(), sig_.epilogue_inputs.end());
      epilogue_map_ = std::make_unique<MapKernel>(ctx_, *sig_.epilogue, msig);
    }
  }
  epilogue_map_->launch(enc, in, out);
}

void MatmulKernel::launch_fused(Encoder& enc, const ViewArg& a, const ViewArg& b, const ViewArg& out,
                                std::span<const ViewArg> eps, bool fused) const {
  const size_t R = a.shape.size();
  const int64_t k = a.shape[R - 1], n = b.shape[R - 1];
  const size_t E = eps.size();
  // Per operand strides over [batch.., m]: A, B (0 along m), C (contiguous), epilogue inputs.
  std::vector<Dim> dims;
  for (size_t d = 0; d + 1 < R; ++d) {
    const bool rows = d + 2 == R;
    if (a.shape[d] == 1 && !rows) continue;
    Dim x{a.shape[d], {a.strides[d], rows ? 0 : b.strides[d], 0}};
    for (const ViewArg& e : eps) x.strides.push_back(e.strides[d]);
    dims.push_back(std::move(x));
  }
  {
    int64_t c = n;  // the output is contiguous over the product's shape
    for (size_t i = dims.size(); i-- > 0;) dims[i].strides[2] = c, c *= dims[i].size;
  }
  const DeviceInfo& info = ctx_.info();
  // CPU implementations (lavapipe) run register-block tiles (matmul.h), 32 rows tall.
  const bool cpu_impl = info.kind == DeviceInfo::Kind::Cpu && !std::getenv("ALK_VK_GEMM_SHARED");
  const int64_t merge_bm = cpu_impl ? 32 : kSmall.bm;
  // Merge a dim into the one inside it where every operand steps evenly across both; the
  // rows take in batch dims only while their tile count stays within the group limit.
  for (size_t i = dims.size() - 1; i-- > 0;) {
    Dim &outer = dims[i], &inner = dims[i + 1];
    bool ok = true;
    for (size_t o = 0; o < outer.strides.size() && ok; ++o) ok = outer.strides[o] == inner.strides[o] * inner.size;
    if (ok && i + 2 == dims.size())
      ok = (outer.size * inner.size + merge_bm - 1) / merge_bm <= static_cast<int64_t>(info.max_workgroup_count[1]);
    if (!ok) continue;
    inner.size *= outer.size;
    dims.erase(dims.begin() + static_cast<long>(i));
  }
  const Dim rows = dims.back();
  dims.pop_back();
  const int64_t M = rows.size;
  int64_t kernel_batches = 1;
  const size_t host_dims = dims.size() > kBatchDims ? dims.size() - kBatchDims : 0;
  for (size_t d = host_dims; d < dims.size(); ++d) kernel_batches *= dims[d].size;

  const MatmulTiles tiles = forced_ ? *forced_ : choose_matmul_tiles(info, sig_.input, M, n, k, kernel_batches);
  const int64_t a_rs = rows.strides[0], a_cs = a.strides[R - 1], b_rs = b.strides[R - 2], b_cs = b.strides[R - 1];
  const bool a_k = std::abs(a_cs) <= std::abs(a_rs) || M == 1;
  const bool b_n = std::abs(b_cs) <= std::abs(b_rs) || k == 1;
  // Bind every view once; host-looped batch dims move the element offsets.
  std::vector<Binding> bindings;
  std::vector<int64_t> first;
  auto bind = [&](const ViewArg& x, bool write) {
    const BoundView bv = bind_view(ctx_, x, write);
    bindings.push_back(bv.binding);
    first.push_back(bv.first);
  };
  bind(a, false);
  bind(b, false);
  for (const ViewArg& e : eps) bind(e, false);
  bind(out, true);
  // 16-byte loads where every row of the operand starts 16-byte aligned (f16: 8 elements).
  auto aligned8 = [&](size_t op, int64_t first_element, int64_t row_stride) {
    bool ok = first_element % 8 == 0 && row_stride % 8 == 0;
    for (const Dim& d : dims) ok = ok && d.strides[op] % 8 == 0;
    return ok;
  };
  bool vec_a = tiles.coop && a_cs == 1 && aligned8(0, first[0], a_rs);
  bool vec_b = tiles.coop && b_cs == 1 && aligned8(1, first[1], b_rs);
  if (tiles.cpu && sig_.input == DType::F32 && !std::getenv("ALK_VK_GEMM_SCALAR")) {
    // vec4 loads (the register-block source above) where each one starts 16-byte aligned:
    // element 0, the strides between vectors and every batch stride multiples of 4.
    auto aligned4 = [&](size_t op, int64_t first_element, int64_t stride) {
      bool ok = first_element % 4 == 0 && stride % 4 == 0;
      for (const Dim& d : dims) ok = ok && d.strides[op] % 4 == 0;
      return ok;
    };
    vec_a = a_k ? a_cs == 1 && aligned4(0, first[0], a_rs)
                : a_rs == 1 && tiles.tm == 4 && M % 4 == 0 && aligned4(0, first[0], a_cs);
    vec_b = b_n ? b_cs == 1 && tiles.tn % 4 == 0 && n % 4 == 0 && aligned4(1, first[1], b_rs)
                : b_rs == 1 && aligned4(1, first[1], b_cs);
  }
  if (tiles.direct && (M % 16 || n % 16 || k % 16))
    fail("matmul: direct cooperative-matrix loads need M, N and K multiples of 16 (" + std::to_string(M) + " x " +
         std::to_string(n) + " x " + std::to_string(k) + ")");
  const Variant& v = variant(tiles, a_k, b_n, fused, vec_a, vec_b);
  last_vec_ = {v.vec_a, v.vec_b};

  const uint32_t gx = static_cast<uint32_t>((n + tiles.bn - 1) / tiles.bn);
  const int64_t gy = (M + tiles.bm - 1) / tiles.bm;
  if (gx > info.max_workgroup_count[0] || gy > static_cast<int64_t>(info.max_workgroup_count[1]))
    fail("matmul: " + std::to_string(M) + " x " + std::to_string(n) + " needs more workgroups than the device allows");
  const uint32_t gz = static_cast<uint32_t>(std::min<int64_t>({kernel_batches, info.max_workgroup_count[2], 65535}));

  // `first` is in binding order (A, B, epilogue inputs, C); Dim strides are A, B, C, epilogue inputs.

  int64_t host_count = 1;
  for (size_t d = 0; d < host_dims; ++d) host_count *= dims[d].size;
  for (int64_t h = 0; h < host_count; ++h) {
    // Offsets of this host-looped batch: A, B, C, epilogue inputs (operand order of `dims`).
    std::vector<int64_t> off(3 + E, 0);
    for (int64_t rem = h, d = static_cast<int64_t>(host_dims) - 1; d >= 0; --d) {
      const int64_t c = rem % dims[static_cast<size_t>(d)].size;
      rem /= dims[static_cast<size_t>(d)].size;
      for (size_t o = 0; o < off.size(); ++o) off[o] += c * dims[static_cast<size_t>(d)].strides[o];
    }
    std::vector<uint32_t> w;
    auto put = [&](int64_t x, const char* what) { w.push_back(static_cast<uint32_t>(i32(x, what))); };
    auto uput = [&](int64_t x, const char* what) {
      if (x < 0 || x > std::numeric_limits<int32_t>::max()) fail(std::string("matmul: ") + what + " beyond 31 bits");
      w.push_back(static_cast<uint32_t>(x));
    };
    uput(M, "rows"), uput(n, "columns"), uput(k, "inner size"), uput(kernel_batches, "batch count");
    // Kernel batch dims, outermost first, padded at the front with size 1.
    const size_t kd = dims.size() - host_dims;
    auto batch_word = [&](size_t slot, size_t op, bool shape) -> int64_t {
      if (slot < kBatchDims - kd) return shape ? 1 : 0;
      const Dim& x = dims[host_dims + slot - (kBatchDims - kd)];
      return shape ? x.size : x.strides[op];
    };
    for (size_t s2 = 0; s2 < kBatchDims; ++s2) uput(batch_word(s2, 0, true), "batch size");
    for (size_t s2 = 0; s2 < kBatchDims; ++s2) put(batch_word(s2, 0, false), "a batch stride");
    for (size_t s2 = 0; s2 < kBatchDims; ++s2) put(batch_word(s2, 1, false), "b batch stride");
    put(a_rs, "a row stride"), put(a_cs, "a column stride"), put(b_rs, "b row stride"), put(b_cs, "b column stride");
    uput(first[0] + off[0], "a offset");
    uput(first[1] + off[1], "b offset");
    uput(first[2 + E] + off[2], "output offset");
    if (E) {
      for (size_t e = 0; e < E; ++e)
        for (size_t s2 = 0; s2 < kBatchDims; ++s2) put(batch_word(s2, 3 + e, false), "epilogue batch stride");
      for (size_t e = 0; e < E; ++e) put(rows.strides[3 + e], "epilogue row stride");
      for (size_t e = 0; e < E; ++e) put(eps[e].strides[R - 1], "epilogue column stride");
      for (size_t e = 0; e < E; ++e) uput(first[2 + e] + off[3 + e], "epilogue offset");
    }
    std::vector<uint8_t> params(w.size() * 4);
    std::memcpy(params.data(), w.data(), params.size());
    const Groups groups{gx, static_cast<uint32_t>(gy), gz};
    if (v.push) {
      enc.dispatch(*v.pipeline, bindings, params, groups);
    } else {
      std::shared_ptr<Allocation> pbuf = ctx_.pool().allocate(params.size());
      ctx_.stream().upload(pbuf, 0, params.data(), params.size());
      std::vector<Binding> with_params = bindings;
      with_params.push_back(Binding{pbuf, 0, params.size(), false});
      enc.dispatch(*v.pipeline, with_params, {}, groups);
    }
  }
}

MatmulSignature matmul_signature(const Kernel& k) {
  MatmulSignature s;
  s.input = k.inputs.empty() ? k.node.dtype : k.inputs[0].dtype;
  s.value = k.node.dtype;
  s.output = k.output.dtype;
  if (k.epilogue) {
    s.epilogue = *k.epilogue;
    for (const KernelArg& e : k.epilogue_inputs) s.epilogue_inputs.push_back(e.dtype);
  }
  return s;
}

namespace {

std::string signature_key(const MatmulSignature& s) {
  std::string key = std::string(dtype_name(s.input)) + "," + std::string(dtype_name(s.value)) + "," +
                    std::string(dtype_name(s.output));
  if (s.epilogue) {
    key += "|" + s.epilogue->str();
    for (DType t : s.epilogue_inputs) key += "," + std::string(dtype_name(t));
  }
  return key;
}

// Compiled kernels, per context and signature: kept for the process, like the contexts.
const MatmulKernel& kernel_for(Context& ctx, const MatmulSignature& sig) {
  static std::mutex mutex;
  static std::map<std::pair<const Context*, std::string>, std::unique_ptr<MatmulKernel>> kernels;
  std::lock_guard lock(mutex);
  auto& slot = kernels[{&ctx, signature_key(sig)}];
  if (!slot) slot = std::make_unique<MatmulKernel>(ctx, sig);
  return *slot;
}

std::string kernel_unsupported(const Context& ctx, const Kernel& k) {
  if (k.inputs.size() != 2) return "a matmul kernel with " + std::to_string(k.inputs.size()) + " inputs";
  const KernelArg &a = k.inputs[0], &b = k.inputs[1];
  if (a.shape.size() < 2 || b.shape.size() != a.shape.size()) return "matmul operands of unequal rank";
  if (a.dtype != b.dtype) return "matmul operands of different dtypes";
  if (std::string why = matmul_unsupported_reason(ctx, matmul_signature(k)); !why.empty()) return why;
  if (numel(k.output.shape) > std::numeric_limits<int32_t>::max()) return "more than 2^31 output elements (32-bit indices)";
  auto span = [](const KernelArg& x) {
    uint64_t elements = 1;
    for (size_t d = 0; d < x.shape.size(); ++d)
      elements += static_cast<uint64_t>(x.shape[d] > 0 ? x.shape[d] - 1 : 0) * static_cast<uint64_t>(std::abs(x.strides[d]));
    return elements;
  };
  std::vector<const KernelArg*> views{&a, &b, &k.output};
  for (const KernelArg& e : k.epilogue_inputs) views.push_back(&e);
  for (const KernelArg* x : views) {
    if (span(*x) > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      return "a view spans more than 2^31 elements (32-bit indices)";
    if (span(*x) * dtype_size(x->dtype) > ctx.info().max_storage_buffer_range)
      return "a view spans more than maxStorageBufferRange (" + std::to_string(ctx.info().max_storage_buffer_range) + " bytes)";
  }
  return "";
}

void kernel_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const MatmulKernel& kernel = kernel_for(ctx, matmul_signature(k));
  std::vector<ViewArg> eps;
  for (const KernelArg& e : k.epilogue_inputs) eps.push_back(view_arg(e));
  kernel.launch(enc, view_arg(k.inputs[0]), view_arg(k.inputs[1]), view_arg(k.output), eps);
}

[[maybe_unused]] const bool registered = (template_ops().add(OpId::Matmul, kFloatDTypes, TemplateOp{kernel_unsupported, kernel_launch}, "f64 where the device has shaderFloat64"), true);

}  // namespace

}  // namespace alk::vk
