#include "backend/vulkan/kernels/reduce.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/vulkan/context.h"
#include "backend/vulkan/map_kernel.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/vulkan_device.h"
#include "expr/emit.h"

namespace alk::vk {

namespace {

// ---- tensors over a rows x elements space -------------------------------------------

// One buffer of a stage: a kernel argument or a scratch buffer of the plan, with its
// strides over the space's outer (row) and inner (element) dims.
struct Arg {
  const KernelArg* arg = nullptr;
  int scratch = -1;
  DType dtype = DType::F32;
  bool write = false;
  Shape outer, inner;
  int64_t first = 0;  // scratch: the element offset of element 0
};

// One dispatch. Words of its params block: rows, len, outer shape, inner shape, then per
// argument its outer strides, inner strides and first element, then the op's own words.
struct Stage {
  Shape outer, inner;
  std::vector<Arg> args;
  std::vector<uint32_t> extra;
  std::string source;
  Groups groups;
  uint32_t wg = 0;  // the workgroup size (0: workgroup_size)
  bool push = true;
  size_t words = 0;
};

struct Plan {
  std::vector<Stage> stages;
  std::vector<size_t> scratch_bytes;
};


// Drops size-1 dims and merges neighbours every argument walks as one (a stride equal to
// the next dim's stride times its size), so kernels divide less per element.
void merge_dims(Shape& shape, const std::vector<Shape*>& strides) {
  Shape ns;
  std::vector<Shape> nst(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool join = !ns.empty();
    for (size_t t = 0; join && t < strides.size(); ++t) join = nst[t].back() == (*strides[t])[d] * shape[d];
    if (join) {
      ns.back() *= shape[d];
      for (size_t t = 0; t < strides.size(); ++t) nst[t].back() = (*strides[t])[d];
    } else {
      ns.push_back(shape[d]);
      for (size_t t = 0; t < strides.size(); ++t) nst[t].push_back((*strides[t])[d]);
    }
  }
  shape = ns;
  for (size_t t = 0; t < strides.size(); ++t) *strides[t] = nst[t];
}

// a's strides when viewed with shape `target` (same elements in the same order): its own
// when the shapes agree, else those of a run at one fixed step (a flattened weight).
Shape strides_as(const KernelArg& a, const Shape& target, const char* what) {
  if (a.shape == target) return a.strides;
  if (numel(a.shape) != numel(target))
    fail(std::string(what) + " has " + to_string(a.shape) + ", not " + to_string(target));
  Shape shape = a.shape, strides = a.strides;
  merge_dims(shape, {&strides});
  if (shape.size() > 1) fail(std::string(what) + ": a layout that cannot be viewed as " + to_string(target));
  const int64_t step = strides.empty() ? 1 : strides[0];
  Shape out = contiguous_strides(target);
  for (int64_t& s : out) s *= step;
  return out;
}

bool mentions(const std::string& text, std::string_view word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const bool left = at == 0 || !ident(text[at - 1]);
    const bool right = at + word.size() >= text.size() || !ident(text[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// GLSL from a template: every $NAME (capitals, digits, _) replaced by its value in vars.
std::string fill(std::string_view text, std::initializer_list<std::pair<std::string_view, std::string>> vars) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '$') {
      out += text[i++];
      continue;
    }
    size_t j = i + 1;
    while (j < text.size() && (std::isupper(static_cast<unsigned char>(text[j])) ||
                               std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '_'))
      ++j;
    const std::string_view name = text.substr(i + 1, j - i - 1);
    auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    if (it == vars.end()) fail("internal: no value for $" + std::string(name) + " in a kernel template");
    out += it->second;
    i = j;
  }
  return out;
}

// ---- GLSL spellings -------------------------------------------------------------------

std::string storage_type(DType t) { return expr::glsl_storage_type(t); }

// The type values of storage dtype t compute in (as in the expression emitters).
std::string compute_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::U8:
    case DType::I32:
    case DType::I64:
      return "int64_t";
    case DType::F16:
    case DType::BF16:
    case DType::F32:
      return "float";
    case DType::F64:
      return "double";
  }
  return "?";
}

// `value` (of any numeric GLSL type) as the compute type of t, rounded through t's storage:
// what a core op's result is when the CPU stores it into a buffer of dtype t and reads it back.
std::string through_storage(DType t, const std::string& value) {
  switch (t) {
    case DType::F32:
      return "float(" + value + ")";
    case DType::F64:
      return "double(" + value + ")";
    case DType::F16:
      return "float(float16_t(float(" + value + ")))";
    case DType::BF16:
      return "uintBitsToFloat(alk_f32_to_bf16(float(" + value + ")) << 16)";
    case DType::I64:
      return "int64_t(" + value + ")";
    case DType::I32:
      return "alk_i32_to_i64(int(" + value + "))";
    case DType::U8:
      return "int64_t(uint(" + value + ") & 0xffu)";
    case DType::Bool:
      return "(" + value + " != 0)";
  }
  return "?";
}

std::string load_fn(size_t t, DType d) {
  const std::string n = std::to_string(t), raw = "t" + n + "[j]";
  std::string body;
  switch (d) {
    case DType::Bool:
      body = "return uint(" + raw + ") != 0u;";
      break;
    case DType::U8:
      body = "return int64_t(uint(" + raw + "));";
      break;
    case DType::I32:
      body = "return alk_i32_to_i64(" + raw + ");";
      break;
    case DType::F16:
      body = "return float(" + raw + ");";
      break;
    case DType::BF16:
      body = "return uintBitsToFloat(uint(" + raw + ") << 16);";
      break;
    case DType::I64:
    case DType::F32:
    case DType::F64:
      body = "return " + raw + ";";
      break;
  }
  return compute_name(d) + " ld" + n + "(uint j) { " + body + " }\n";
}

std::string store_fn(size_t t, DType d) {
  const std::string n = std::to_string(t), dst = "t" + n + "[j] = ";
  std::string body;
  switch (d) {
    case DType::Bool:
      body = dst + "uint8_t(v ? 1u : 0u);";
      break;
    case DType::U8:
      body = dst + "uint8_t(uint(v) & 0xffu);";
      break;
    case DType::I32:
      body = dst + "int(v);";
      break;
    case DType::F16:
      body = dst + "float16_t(v);";
      break;
    case DType::BF16:
      body = dst + "uint16_t(alk_f32_to_bf16(v));";
      break;
    case DType::I64:
    case DType::F32:
    case DType::F64:
      body = dst + "v;";
      break;
  }
  return "void st" + n + "(uint j, " + compute_name(d) + " v) { " + body + " }\n";
}

const char* kHelpers =
    "// Round to nearest even; NaN stays a (quiet) NaN.\n"
    "uint alk_f32_to_bf16(float v) {\n"
    "  uint b = floatBitsToUint(v);\n"
    "  if (isnan(v)) return (b >> 16) | 0x40u;\n"
    "  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;\n"
    "}\n";
// Sign extension by hand: lavapipe miscompiles int64_t(int) compared with a constant.
const char* kI32Helper = "int64_t alk_i32_to_i64(int v) { return packInt2x32(ivec2(v, v >> 31)); }\n";

uint32_t workgroup_size(const Context& ctx) {
  const DeviceInfo& info = ctx.info();
  uint32_t limit = std::min<uint32_t>({256u, info.max_workgroup_invocations ? info.max_workgroup_invocations : 128u,
                                       info.max_workgroup_size[0] ? info.max_workgroup_size[0] : 128u});
  uint32_t wg = 1;
  while (wg * 2 <= limit) wg *= 2;
  return wg;
}

// Merges the stage's dims, then wraps `body` (helpers and main, which use WG, P(i),
// row<t>(r), el<t>(i), ld<t>(j), st<t>(j, v) and the word index E of the op's own words)
// into a complete shader.
void finish(const Context& ctx, Stage& s, const std::string& name, const std::string& body) {
  std::vector<Shape*> outer, inner;
  for (Arg& a : s.args) outer.push_back(&a.outer), inner.push_back(&a.inner);
  merge_dims(s.outer, outer);
  merge_dims(s.inner, inner);
  const size_t no = s.outer.size(), ni = s.inner.size(), nt = s.args.size();
  s.words = 2 + no + ni + nt * (no + ni + 1) + s.extra.size();
  s.push = s.words * 4 <= expr::kPushConstantBudget;
  const uint32_t wg = s.wg ? s.wg : workgroup_size(ctx);

  std::string d = "layout(local_size_x = " + std::to_string(wg) + ") in;\n";
  d += "const uint WG = " + std::to_string(wg) + "u;\n";
  for (size_t t = 0; t < nt; ++t)
    d += "layout(std430, binding = " + std::to_string(t) + ") " + (s.args[t].write ? "writeonly" : "readonly") +
         " buffer B" + std::to_string(t) + " { " + storage_type(s.args[t].dtype) + " t" + std::to_string(t) +
         "[]; };\n";
  if (s.push)
    d += "layout(push_constant) uniform Params { uint w[" + std::to_string(s.words) + "]; } p;\n";
  else
    d += "layout(std430, binding = " + std::to_string(nt) + ") readonly buffer Params { uint w[]; } p;\n";
  d += "#define P(i) p.w[i]\n";
  d += "const uint E = " + std::to_string(s.words - s.extra.size()) + "u;  // the op's own words\n";
  auto word = [](size_t i) { return "P(" + std::to_string(i) + "u)"; };
  for (size_t t = 0; t < nt; ++t) {
    const size_t base = 2 + no + ni + t * (no + ni + 1);
    const std::string n = std::to_string(t);
    d += "uint row" + n + "(uint r) {\n  int o = int(" + word(base + no + ni) + ");\n";
    for (size_t k = no; k-- > 0;)
      d += "  o += int(r % " + word(2 + k) + ") * int(" + word(base + k) + ");\n  r /= " + word(2 + k) + ";\n";
    d += "  return uint(o);\n}\n";
    d += "int el" + n + "(uint i) {\n  int o = 0;\n";
    for (size_t k = ni; k-- > 0;)
      d += "  o += int(i % " + word(2 + no + k) + ") * int(" + word(base + no + k) + ");\n  i /= " + word(2 + no + k) +
           ";\n";
    d += "  return o;\n}\n";
  }
  std::string fns;
  for (size_t t = 0; t < nt; ++t) fns += s.args[t].write ? store_fn(t, s.args[t].dtype) : load_fn(t, s.args[t].dtype);
  std::string text = d + fns + body;
  std::string helpers = kHelpers;
  if (mentions(text, "alk_i32_to_i64")) helpers += kI32Helper;
  text = helpers + text;
  std::string head = "#version 450\n";
  if (mentions(text, "float16_t") || mentions(text, "uint16_t"))
    head += "#extension GL_EXT_shader_16bit_storage : require\n";
  if (mentions(text, "uint8_t")) head += "#extension GL_EXT_shader_8bit_storage : require\n";
  if (mentions(text, "int64_t")) head += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n";
  if (mentions(text, "subgroupShuffleXor"))
    head += "#extension GL_KHR_shader_subgroup_basic : require\n#extension GL_KHR_shader_subgroup_shuffle : require\n";
  head += "// alk vulkan kernel " + name + " (src/backend/vulkan/kernels/reduce.cpp)\n";
  // map_unsupported_reason reads the text after the local size: keep the helpers after it.
  const size_t at = text.find("layout(local_size_x");
  s.source = head + text.substr(at, d.find('\n') + 1) + text.substr(0, at) + text.substr(at + d.find('\n') + 1);
}

Groups row_groups(int64_t rows, uint32_t parts = 1) {
  return Groups{static_cast<uint32_t>(std::clamp<int64_t>(rows, 1, 65535)), parts, 1};
}
Groups thread_groups(int64_t n, int64_t wg) {
  return Groups{static_cast<uint32_t>(std::clamp<int64_t>((n + wg - 1) / wg, 1, 65535)), 1, 1};
}

// The math type of a floating row op on dtype t.
// Invocations per row: rows of a few thousand elements take 64 (fewer idle lanes and a
// shallower tree; on lavapipe, far fewer fibers to switch at each barrier), longer ones the
// full workgroup.
uint32_t row_workgroup(const Context& ctx, int64_t len) {
  return len < 4096 ? std::min<uint32_t>(64, workgroup_size(ctx)) : workgroup_size(ctx);
}

std::string float_math(DType t) { return t == DType::F64 ? "double" : "float"; }
// GLSL has exp and log on float only: on double, these by hand.
// exp: x = k ln2 + r (Cody-Waite: ln2 split in two so k ln2 is exact), |r| <= ln2 / 2,
// exp(r) by its Taylor series to degree 13 (truncation below 1e-17), scaled by 2^k.
// log: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(f), f = (m - 1) / (m + 1),
// |f| <= 0.172, by its odd series to degree 21.
const char* kF64Math =
    "double alk_exp_f64(double x) {\n"
    "  if (isnan(x)) return x;\n"
    "  if (x > 709.78lf) return double(uintBitsToFloat(0x7f800000u));\n"
    "  if (x < -745.2lf) return 0.0lf;\n"
    "  double k = floor(x * 1.4426950408889634lf + 0.5lf);\n"
    "  double r = (x - k * 6.93147180369123816490e-01lf) - k * 1.90821492927058770002e-10lf;\n"
    "  double p = 1.0lf;\n"
    "  for (int n = 13; n >= 1; --n) p = 1.0lf + p * r / double(n);\n"
    "  int ki = int(k);\n"
    "  // Two steps so 2^k never overflows on its own near the ends of the range.\n"
    "  return ldexp(ldexp(p, ki / 2), ki - ki / 2);\n"
    "}\n"
    "double alk_log_f64(double x) {\n"
    "  if (isnan(x) || x < 0.0lf) return double(uintBitsToFloat(0x7fc00000u));\n"
    "  if (x == 0.0lf) return -double(uintBitsToFloat(0x7f800000u));\n"
    "  if (isinf(x)) return x;\n"
    "  int e;\n"
    "  double m = frexp(x, e);\n"
    "  if (m < 0.70710678118654752lf) { m *= 2.0lf; e -= 1; }\n"
    "  double f = (m - 1.0lf) / (m + 1.0lf), f2 = f * f, s = 1.0lf / 21.0lf;\n"
    "  for (int n = 19; n >= 1; n -= 2) s = s * f2 + 1.0lf / double(n);\n"
    "  return 2.0lf * f * s + double(e) * 0.69314718055994530942lf;\n"
    "}\n";

// Whether workgroup reductions of f32 go through subgroup shuffles: where the device offers
// them in compute shaders (ALK_VK_NO_SUBGROUPS=1 forces the shared-memory tree, for tests).
bool use_subgroups(const Context& ctx, const std::string& type, uint32_t wg) {
  const DeviceInfo& info = ctx.info();
  const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  const char* off = std::getenv("ALK_VK_NO_SUBGROUPS");
  return type == "float" && !(off && *off && std::string(off) != "0") && (info.subgroup_ops & need) == need &&
         info.subgroup_size >= 2 && info.subgroup_size <= wg;
}

// Functions reducing one value per invocation over the workgroup with a combining function
// (every invocation gets the result, in an order fixed by the workgroup and subgroup sizes):
// `fns` pairs each function's name with the combining function it applies. With subgroups,
// a butterfly of shuffles within each subgroup, then the subgroups' results in order; else
// a shared-memory tree. Called from uniform control flow only.
std::string workgroup_fns(const Context& ctx, const std::string& t,
                          const std::vector<std::pair<std::string, std::string>>& fns, uint32_t wg) {
  std::string s = "shared " + t + " red[WG];\n";
  const bool sg = use_subgroups(ctx, t, wg);
  for (const auto& [name, fn] : fns) {
    s += t + " " + name + "(" + t + " v) {\n";
    if (sg)
      s += "  for (uint o = 1u; o < gl_SubgroupSize; o <<= 1u) v = " + fn +
           "(v, subgroupShuffleXor(v, o));\n"
           "  if (subgroupElect()) red[gl_SubgroupID] = v;\n  barrier();\n"
           "  " +
           t + " r = red[0];\n  for (uint k = 1u; k < gl_NumSubgroups; ++k) r = " + fn + "(r, red[k]);\n";
    else
      s += "  uint tid = gl_LocalInvocationID.x;\n  red[tid] = v;\n  barrier();\n"
           "  for (uint w = WG / 2u; w > 0u; w >>= 1u) {\n    if (tid < w) red[tid] = " +
           fn +
           "(red[tid], red[tid + w]);\n"
           "    barrier();\n  }\n  " +
           t + " r = red[0];\n";
    s += "  barrier();  // red is reused by the next call\n  return r;\n}\n";
  }
  return s;
}

// tree_sum and tree_max (NaN never wins: softmax's max skips it) of type m.
std::string tree_fns(const Context& ctx, const std::string& m, uint32_t wg) {
  return m + " alk_add(" + m + " a, " + m + " b) { return a + b; }\n" + m + " alk_max(" + m + " a, " + m +
         " b) { return b > a ? b : a; }\n" +
         workgroup_fns(ctx, m, {{"tree_sum", "alk_add"}, {"tree_max", "alk_max"}}, wg);
}

// How layer norm (forward, and its backward's dx) spreads rows: a workgroup per row, whose
// invocations stride the row and combine their sums through tree_sum; or, on a CPU
// implementation, an invocation per row of up to 1024 elements: lavapipe runs a workgroup's
// invocations as fibers and switches all of them at every barrier of the tree (four per row
// in the backward), while its loads cost the same per element either way. The shader text is
// one for both: it walks rows r = ROW0, ROW0 + ROW_STEP, ... and elements LANE, LANE + LANES, ...
// ALK_VK_NORM_ROWS=group|invocation overrides the choice (A/B runs).
struct RowSpread {
  bool per_invocation = false;
  uint32_t wg = 0;
};
RowSpread row_spread(const Context& ctx, int64_t len) {
  const char* force = std::getenv("ALK_VK_NORM_ROWS");
  const bool per_invocation = force ? std::string_view(force) == "invocation"
                                    : ctx.info().kind == DeviceInfo::Kind::Cpu && len <= 1024;
  return {per_invocation, per_invocation ? std::min<uint32_t>(64, workgroup_size(ctx)) : row_workgroup(ctx, len)};
}
std::string row_spread_fns(const Context& ctx, const std::string& m, const RowSpread& rs) {
  if (rs.per_invocation)
    return m + " tree_sum(" + m + " v) { return v; }\n#define LANE 0u\n#define LANES 1u\n" +
           "#define ROW0 gl_GlobalInvocationID.x\n#define ROW_STEP (gl_NumWorkGroups.x * WG)\n";
  return tree_fns(ctx, m, rs.wg) + "#define LANE gl_LocalInvocationID.x\n#define LANES WG\n" +
         "#define ROW0 gl_WorkGroupID.x\n#define ROW_STEP gl_NumWorkGroups.x\n";
}
Groups row_spread_groups(const RowSpread& rs, int64_t rows) {
  return rs.per_invocation ? thread_groups(rows, rs.wg) : row_groups(rows);
}

void put_double(std::vector<uint32_t>& w, double v) {
  uint32_t h[2];
  std::memcpy(h, &v, 8);
  w.push_back(h[0]);
  w.push_back(h[1]);
}
void put_float(std::vector<uint32_t>& w, float v) {
  uint32_t h;
  std::memcpy(&h, &v, 4);
  w.push_back(h);
}
// eps in the math type, from the op's words at E.
std::string eps_glsl(const std::string& m) {
  return m == "double" ? "packDouble2x32(uvec2(P(E), P(E + 1u)))" : "uintBitsToFloat(P(E))";
}
void put_eps(std::vector<uint32_t>& w, const std::string& m, double eps) {
  if (m == "double")
    put_double(w, eps);
  else
    put_float(w, static_cast<float>(eps));
}

// ---- Reduce ---------------------------------------------------------------------------

struct ReduceSpec {
  std::string acc;  // float, double, int64_t
  DType acc_dtype;
  ReduceOp op;
};

std::string identity(const ReduceSpec& r) {
  const bool flt = r.acc != "int64_t";
  switch (r.op) {
    case ReduceOp::Sum:
      return r.acc + "(0)";
    case ReduceOp::Prod:
      return r.acc + "(1)";
    case ReduceOp::Max:
      return flt ? r.acc + "(uintBitsToFloat(0xff800000u))" : "(-9223372036854775807l - 1l)";
    case ReduceOp::Min:
      return flt ? r.acc + "(uintBitsToFloat(0x7f800000u))" : "9223372036854775807l";
  }
  return "?";
}

std::string combine_fn(const ReduceSpec& r) {
  const std::string& a = r.acc;
  std::string body;
  const bool flt = a != "int64_t";
  switch (r.op) {
    case ReduceOp::Sum:
      body = "return x + y;";
      break;
    case ReduceOp::Prod:
      body = "return x * y;";
      break;
    // NaN wins, as on the CPU (and in PyTorch).
    case ReduceOp::Max:
      body = flt ? "return (isnan(x) || x > y) ? x : y;" : "return x > y ? x : y;";
      break;
    case ReduceOp::Min:
      body = flt ? "return (isnan(x) || x < y) ? x : y;" : "return x < y ? x : y;";
      break;
  }
  return a + " combine(" + a + " x, " + a + " y) { " + body + " }\n";
}

// The GLSL that stores a row's reduced value `v` (acc type): through the epilogue when the
// kernel has one. Output argument index `out`, epilogue inputs at `epi0`...
std::string reduce_finish(const Kernel& k, const ReduceSpec& r, size_t out, size_t epi0) {
  const std::string o = std::to_string(out);
  if (!k.epilogue) {
    std::string v = k.output.dtype == DType::Bool ? "(v != " + r.acc + "(0))" : compute_name(k.output.dtype) + "(v)";
    return "st" + o + "(row" + o + "(r), " + v + ");";
  }
  std::string call = "alk_epilogue(" + through_storage(k.node.dtype, "v");
  for (size_t e = 0; e < k.epilogue_inputs.size(); ++e)
    call += ", ld" + std::to_string(epi0 + e) + "(row" + std::to_string(epi0 + e) + "(r))";
  return "st" + o + "(row" + o + "(r), " + call + "));";
}

Plan plan_reduce(const Context& ctx, const Kernel& k) {
  const auto& p = std::get<ReduceParams>(k.node.params);
  if (!k.expr) fail("a Reduce kernel without its prologue expression");
  const Shape& shape = k.node.in_shape;
  const size_t rank = shape.size();
  std::vector<bool> reduced(rank, false);
  for (int a : p.axes) {
    if (a < 0 || static_cast<size_t>(a) >= rank) fail("reduce axis " + std::to_string(a) + " out of range");
    reduced[static_cast<size_t>(a)] = true;
  }
  Shape outer, inner, keep = shape;
  for (size_t d = 0; d < rank; ++d) {
    (reduced[d] ? inner : outer).push_back(shape[d]);
    if (reduced[d]) keep[d] = 1;
  }
  auto split = [&](const Shape& strides, Shape& o, Shape& i) {
    for (size_t d = 0; d < rank; ++d) (reduced[d] ? i : o).push_back(strides[d]);
  };
  const int64_t rows = numel(outer), len = numel(inner);
  ReduceSpec rs;
  rs.op = p.op;
  switch (k.expr->type()) {
    case expr::Type::F32:
      rs.acc = "float", rs.acc_dtype = DType::F32;
      break;
    case expr::Type::F64:
      rs.acc = "double", rs.acc_dtype = DType::F64;
      break;
    default:
      rs.acc = "int64_t", rs.acc_dtype = DType::I64;
      break;
  }
  // Arguments over the output's (keepdim) shape: only their kept dims' strides matter.
  auto over_output = [&](const KernelArg& a, bool write, const char* what) {
    Arg x;
    x.arg = &a, x.dtype = a.dtype, x.write = write;
    Shape st = strides_as(a, keep, what), ignored;
    split(st, x.outer, ignored);
    x.inner.assign(inner.size(), 0);
    return x;
  };
  const uint32_t wg = row_workgroup(ctx, len);
  std::string fns = combine_fn(rs);
  std::vector<DType> in_types;
  for (const KernelArg& a : k.inputs) in_types.push_back(a.dtype);
  fns += expr::emit_function(*k.expr, {"alk_prologue", in_types, rs.acc_dtype}, expr::Target::Glsl);
  if (k.epilogue) {
    std::vector<DType> e_types{k.node.dtype};
    for (const KernelArg& a : k.epilogue_inputs) e_types.push_back(a.dtype);
    fns += expr::emit_function(*k.epilogue, {"alk_epilogue", e_types, k.output.dtype}, expr::Target::Glsl);
  }

  // The final stage's arguments after its value source: epilogue inputs, then the output.
  auto add_tail = [&](Stage& s) {
    for (size_t e = 0; e < k.epilogue_inputs.size(); ++e)
      s.args.push_back(over_output(k.epilogue_inputs[e], false, "an epilogue input"));
    s.args.push_back(over_output(k.output, true, "the output"));
  };

  Plan plan;
  if (rows == 0) return plan;
  if (len == 0) {  // an empty reduction: the identity (through the epilogue)
    Stage s;
    s.outer = outer;
    add_tail(s);
    s.inner.clear();
    for (Arg& a : s.args) a.inner.clear();
    const size_t epi0 = 0, out = k.epilogue_inputs.size();
    const std::string body =
        fns + fill(R"(
void main() {
  for (uint r = gl_GlobalInvocationID.x; r < P(0); r += gl_NumWorkGroups.x * WG) {
    $A v = $IDENT;
    $FINISH
  }
}
)",
                   {{"A", rs.acc}, {"IDENT", identity(rs)}, {"FINISH", reduce_finish(k, rs, out, epi0)}});
    s.groups = thread_groups(rows, wg);
    s.wg = wg;
    finish(ctx, s, "reduce_empty", body);
    plan.stages.push_back(std::move(s));
    return plan;
  }

  // Inputs over the reduce input's shape.
  std::vector<Arg> inputs;
  for (const KernelArg& a : k.inputs) {
    if (a.shape != shape) fail("a Reduce input of shape " + to_string(a.shape) + ", not " + to_string(shape));
    Arg x;
    x.arg = &a, x.dtype = a.dtype;
    split(a.strides, x.outer, x.inner);
    inputs.push_back(x);
  }
  auto prologue_call = [&](const std::string& i) {
    std::string c = "alk_prologue(";
    for (size_t t = 0; t < inputs.size(); ++t)
      c += (t ? ", " : "") + std::string("ld") + std::to_string(t) + "(b" + std::to_string(t) + " + uint(el" +
           std::to_string(t) + "(" + i + ")))";
    return c + ")";
  };
  std::string bases;
  for (size_t t = 0; t < inputs.size(); ++t)
    bases += "    uint b" + std::to_string(t) + " = row" + std::to_string(t) + "(r);\n";

  // How rows are spread: short rows (and columns of a row-major tensor, many of them) one
  // per invocation; else a workgroup per row, a long row among few split into parts.
  const int64_t last_stride = inputs.empty() || inputs[0].inner.empty() ? 1 : inputs[0].inner.back();
  const bool per_thread = len <= 32 || (last_stride != 1 && (rows >= 1024 || (rows >= 64 && len <= 4096)));
  const uint32_t parts =
      per_thread || rows >= 32 || len < 32768 ? 1u : static_cast<uint32_t>(std::clamp<int64_t>(len / 16384, 2, 64));
  fns += workgroup_fns(ctx, rs.acc, {{"wg_combine", "combine"}}, wg);
  // A workgroup per row: each invocation folds elements tid, tid + WG, ... in order, then
  // the workgroup combines the invocations' values.
  auto per_group = [&](const std::string& bases_, const std::string& value, const std::string& finish_) {
    return fns +
           fill(R"(
void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < P(0); r += gl_NumWorkGroups.x) {
$BASES    $A acc = $IDENT;
    for (uint i = tid; i < P(1); i += WG) acc = combine(acc, $VALUE);
    acc = wg_combine(acc);
    if (tid == 0u) {
      $A v = acc;
      $FINISH
    }
  }
}
)",
                {{"A", rs.acc}, {"IDENT", identity(rs)}, {"BASES", bases_}, {"VALUE", value}, {"FINISH", finish_}});
  };
  // Partial results of `n` parts per row: scratch 0, row r's part s at r * n + s.
  auto partial_arg = [&](uint32_t n, bool write) {
    Shape strides = contiguous_strides(outer);
    for (int64_t& st : strides) st *= n;
    Arg part;
    part.scratch = 0, part.dtype = rs.acc_dtype, part.write = write, part.outer = strides;
    part.inner.assign(inner.size(), 0);
    return part;
  };
  // The second pass of a split reduction: each row's parts combined in order.
  auto combine_parts = [&](uint32_t n) {
    Stage s;
    s.outer = outer, s.inner = {static_cast<int64_t>(n)};
    Arg part = partial_arg(n, false);
    part.inner = {1};
    s.args.push_back(part);
    add_tail(s);
    for (size_t t = 1; t < s.args.size(); ++t) s.args[t].inner = {0};
    const size_t epi0 = 1, out = 1 + k.epilogue_inputs.size();
    const std::string body = per_group("    uint b0 = row0(r);\n", "ld0(b0 + i)", reduce_finish(k, rs, out, epi0));
    s.groups = row_groups(rows);
    s.wg = wg;
    finish(ctx, s, "reduce_combine_parts", body);
    plan.stages.push_back(std::move(s));
  };
  // The first pass of a split reduction: the inputs, and `n` partial results a row to write
  // (the op's word E), their scratch reserved.
  auto first_of_parts = [&](uint32_t n) {
    plan.scratch_bytes.push_back(static_cast<size_t>(rows) * n * dtype_size(rs.acc_dtype));
    Stage s;
    s.outer = outer, s.inner = inner, s.args = inputs;
    s.args.push_back(partial_arg(n, true));
    s.extra.push_back(n);
    return s;
  };
  // Columns on a GPU (a bias gradient: [4096, 768] -> [768]): an invocation per row would
  // keep a few of its SMs on a long serial walk (0.5 ms on the H200 for 12.6 MB, 1% of its
  // bandwidth: bench/vulkan/NOTES.md). Each row's elements are split into parts of >= 16 so
  // that ~128k invocations run, and a second pass combines the parts. CPU implementations keep
  // one pass (their few threads are busy either way); ALK_VK_COLUMN_PARTS=1 splits there too
  // (the tests of this path on lavapipe), =0 nowhere (A/B runs).
  const char* parts_env = std::getenv("ALK_VK_COLUMN_PARTS");
  const bool split_columns = parts_env && *parts_env ? std::string_view(parts_env) == "1"
                                                     : ctx.info().kind != DeviceInfo::Kind::Cpu;
  const uint32_t column_parts =
      per_thread && split_columns
          ? static_cast<uint32_t>(std::clamp<int64_t>(std::min<int64_t>((131072 + rows - 1) / rows, len / 16), 1, 256))
          : 1u;
  if (column_parts > 1) {
    Stage s = first_of_parts(column_parts);
    const std::string pn = std::to_string(inputs.size());
    const std::string body = fns + fill(R"(
void main() {
  uint chunk = (P(1) + P(E) - 1u) / P(E);
  uint lo = min(P(1), gl_WorkGroupID.y * chunk), hi = min(P(1), lo + chunk);
  for (uint r = gl_GlobalInvocationID.x; r < P(0); r += gl_NumWorkGroups.x * WG) {
$BASES    $A acc = $IDENT;
    for (uint i = lo; i < hi; ++i) acc = combine(acc, $VALUE);
    st$PN(row$PN(r) + gl_WorkGroupID.y, acc);
  }
}
)",
                                        {{"A", rs.acc}, {"IDENT", identity(rs)}, {"BASES", bases}, {"VALUE", prologue_call("i")}, {"PN", pn}});
    s.groups = thread_groups(rows, wg);
    s.groups.y = column_parts;
    s.wg = wg;
    finish(ctx, s, "reduce_column_parts", body);
    plan.stages.push_back(std::move(s));
    combine_parts(column_parts);
    return plan;
  }
  if (per_thread) {
    Stage s;
    s.outer = outer, s.inner = inner, s.args = inputs;
    add_tail(s);
    const size_t epi0 = inputs.size(), out = epi0 + k.epilogue_inputs.size();
    const std::string body = fns + fill(R"(
void main() {
  for (uint r = gl_GlobalInvocationID.x; r < P(0); r += gl_NumWorkGroups.x * WG) {
$BASES    $A acc = $IDENT;
    for (uint i = 0u; i < P(1); ++i) acc = combine(acc, $VALUE);
    $A v = acc;
    $FINISH
  }
}
)",
                                        {{"A", rs.acc},
                                         {"IDENT", identity(rs)},
                                         {"BASES", bases},
                                         {"VALUE", prologue_call("i")},
                                         {"FINISH", reduce_finish(k, rs, out, epi0)}});
    s.groups = thread_groups(rows, wg);
    s.wg = wg;
    finish(ctx, s, "reduce_rows_per_invocation", body);
    plan.stages.push_back(std::move(s));
    return plan;
  }
  if (parts == 1) {
    Stage s;
    s.outer = outer, s.inner = inner, s.args = inputs;
    add_tail(s);
    const size_t epi0 = inputs.size(), out = epi0 + k.epilogue_inputs.size();
    const std::string body = per_group(bases, prologue_call("i"), reduce_finish(k, rs, out, epi0));
    s.groups = row_groups(rows);
    s.wg = wg;
    finish(ctx, s, "reduce_rows_per_group", body);
    plan.stages.push_back(std::move(s));
    return plan;
  }
  // Two passes: part s of row r reduces elements [s * chunk, (s + 1) * chunk) into
  // partial[r * parts + s]; the second pass combines a row's parts in order.
  {
    Stage s = first_of_parts(parts);
    const std::string pn = std::to_string(inputs.size());
    const std::string body =
        fns +
        fill(R"(
void main() {
  uint tid = gl_LocalInvocationID.x;
  uint chunk = (P(1) + P(E) - 1u) / P(E);
  uint lo = min(P(1), gl_WorkGroupID.y * chunk), hi = min(P(1), lo + chunk);
  for (uint r = gl_WorkGroupID.x; r < P(0); r += gl_NumWorkGroups.x) {
$BASES    $A acc = $IDENT;
    for (uint i = lo + tid; i < hi; i += WG) acc = combine(acc, $VALUE);
    acc = wg_combine(acc);
    if (tid == 0u) st$PN(row$PN(r) + gl_WorkGroupID.y, acc);
  }
}
)",
             {{"A", rs.acc}, {"IDENT", identity(rs)}, {"BASES", bases}, {"VALUE", prologue_call("i")}, {"PN", pn}});
    s.groups = row_groups(rows, parts);
    s.wg = wg;
    finish(ctx, s, "reduce_parts", body);
    plan.stages.push_back(std::move(s));
  }
  combine_parts(parts);
  return plan;
}

// ---- ops along one axis: argmax/argmin, softmax, log_softmax, cumsum -------------------

// x's dims other than `axis` (rows) x dim `axis` (elements); `out` over x's shape (or with
// the axis kept as 1: argreduce).
Stage axis_stage(const Kernel& k, int axis, bool out_keeps_axis) {
  const KernelArg& x = k.inputs.at(0);
  const size_t rank = x.shape.size();
  if (axis < 0 || static_cast<size_t>(axis) >= rank) fail("axis " + std::to_string(axis) + " out of range");
  Stage s;
  Arg in, out;
  in.arg = &x, in.dtype = x.dtype;
  out.arg = &k.output, out.dtype = k.output.dtype, out.write = true;
  Shape oshape = x.shape;
  if (out_keeps_axis) oshape[static_cast<size_t>(axis)] = 1;
  const Shape ost = strides_as(k.output, oshape, "the output");
  for (size_t d = 0; d < rank; ++d) {
    if (static_cast<int>(d) == axis) {
      s.inner.push_back(x.shape[d]);
      in.inner.push_back(x.strides[d]);
      out.inner.push_back(out_keeps_axis ? 0 : ost[d]);
    } else {
      s.outer.push_back(x.shape[d]);
      in.outer.push_back(x.strides[d]);
      out.outer.push_back(ost[d]);
    }
  }
  s.args = {in, out};
  return s;
}

std::string value_type(DType t) {
  if (t == DType::F64) return "double";
  if (is_floating(t)) return "float";
  return "int64_t";
}

Plan plan_argreduce(const Context& ctx, const Kernel& k) {
  const auto& p = std::get<AxisParams>(k.node.params);
  Stage s = axis_stage(k, p.axis, true);
  s.wg = row_workgroup(ctx, numel(s.inner));
  Plan plan;
  if (numel(s.outer) == 0) return plan;
  if (numel(s.inner) == 0)
    fail(std::string(p.flag ? "argmax" : "argmin") + ": cannot reduce an empty dim " + std::to_string(p.axis));
  const DType t = k.inputs[0].dtype;
  const std::string m = value_type(t);
  const bool flt = m != "int64_t";
  // Short rows (max pooling's windows: 4 or 9 elements) get one invocation each, scanning
  // in order: a workgroup per row would leave most lanes idle and pay a barrier per tree
  // level (on lavapipe, a switch of every fiber).
  const bool short_rows = numel(s.inner) <= 32;
  if (short_rows) s.wg = 64;
  const std::string scan_rows = R"(
void main() {
  for (uint r = gl_GlobalInvocationID.x; r < P(0); r += gl_NumWorkGroups.x * WG) {
    uint b0 = row0(r);
    $M bv = $M(0);
    uint bi = NONE;
    for (uint i = 0u; i < P(1); ++i) {
      $M v = $M(ld0(b0 + uint(el0(i))));
      if (take(bv, bi, v, i)) {
        bv = v;
        bi = i;
      }
    }
    st1(row1(r), $OUT(bi));
  }
}
)";
  // Should (vb, ib) replace (va, ia)? NaN wins (the first one), then the larger (smaller)
  // value, then the lower index: the first extremum, as the CPU's scan finds it.
  const std::string take_fn = R"(
const uint NONE = 0xffffffffu;
// Should (vb, ib) replace (va, ia)? NaN wins (the first one), then the larger (smaller)
// value, then the lower index: the first extremum, as the CPU's scan finds it.
bool take($M va, uint ia, $M vb, uint ib) {
  if (ib == NONE) return false;
  if (ia == NONE) return true;
$NAN  if (vb == va) return ib < ia;
  return vb $CMP va;
}
)";
  const std::string body = fill(short_rows ? take_fn + scan_rows : std::string(
      R"(
const uint NONE = 0xffffffffu;
// Should (vb, ib) replace (va, ia)? NaN wins (the first one), then the larger (smaller)
// value, then the lower index: the first extremum, as the CPU's scan finds it.
bool take($M va, uint ia, $M vb, uint ib) {
  if (ib == NONE) return false;
  if (ia == NONE) return true;
$NAN  if (vb == va) return ib < ia;
  return vb $CMP va;
}
shared $M sv[WG];
shared uint si[WG];
void main() {
  uint tid = gl_LocalInvocationID.x;
  for (uint r = gl_WorkGroupID.x; r < P(0); r += gl_NumWorkGroups.x) {
    uint b0 = row0(r);
    $M bv = $M(0);
    uint bi = NONE;
    for (uint i = tid; i < P(1); i += WG) {
      $M v = $M(ld0(b0 + uint(el0(i))));
      if (take(bv, bi, v, i)) {
        bv = v;
        bi = i;
      }
    }
    sv[tid] = bv;
    si[tid] = bi;
    barrier();
    for (uint w = WG / 2u; w > 0u; w >>= 1u) {
      if (tid < w && take(sv[tid], si[tid], sv[tid + w], si[tid + w])) {
        sv[tid] = sv[tid + w];
        si[tid] = si[tid + w];
      }
      barrier();
    }
    if (tid == 0u) st1(row1(r), $OUT(si[0]));
    barrier();
  }
}
)"),
      {{"M", m},
       {"CMP", p.flag ? ">" : "<"},
       {"OUT", compute_name(k.output.dtype)},
       {"NAN", flt ? "  bool an = isnan(va), bn = isnan(vb);\n  if (an || bn) return bn && (!an || ib < ia);\n" : ""}});
  s.groups = short_rows ? thread_groups(numel(s.outer), s.wg) : row_groups(numel(s.outer));
  finish(ctx, s, p.flag ? "argmax" : "argmin", body);
  plan.stages.push_back(std::move(s));
  return plan;
}

Plan plan_softmax(const Context& ctx, const Kernel& k, bool log) {
  const auto& p = std::get<AxisParams>(k.node.params);
  Stage s = axis_stage(k, p.axis, false);
  s.wg = row_workgroup(ctx, numel(s.inner));
  Plan plan;
  if (numel(s.outer) == 0 || numel(s.inner) == 0) return plan;
  const std::string m = float_math(k.inputs[0].dtype);
  const std::string x = m + "(ld0(b0 + uint(el0(i))))", exp_fn = m == "double" ? "alk_exp_f64" : "exp",
                    log_fn = m == "double" ? "alk_log_f64" : "log";
  const std::string write = log ? R"(
    $M ls = $LOG(sum);
    for (uint i = gl_LocalInvocationID.x; i < P(1); i += WG) st1(b1 + uint(el1(i)), ($X - mx) - ls);)"
                                : R"(
    $M inv = $M(1) / sum;
    for (uint i = gl_LocalInvocationID.x; i < P(1); i += WG) st1(b1 + uint(el1(i)), $EXP($X - mx) * inv);)";
  const std::string body = (m == "double" ? std::string(kF64Math) : std::string()) + tree_fns(ctx, m, s.wg) +
                           fill(R"(
void main() {
  for (uint r = gl_WorkGroupID.x; r < P(0); r += gl_NumWorkGroups.x) {
    uint b0 = row0(r), b1 = row1(r);
    // NaN never wins the max (it reaches the sum instead, as on the CPU).
    $M mx = $M(uintBitsToFloat(0xff800000u));
    for (uint i = gl_LocalInvocationID.x; i < P(1); i += WG) {
      $M v = $X;
      if (v > mx) mx = v;
    }
    mx = tree_max(mx);
    // A fully masked row (all -inf) has no finite max: shifting by 0 gives 0/0 = NaN, as
    // the unshifted formula would.
    if (isinf(mx) || isnan(mx)) mx = $M(0);
    $M sum = $M(0);
    for (uint i = gl_LocalInvocationID.x; i < P(1); i += WG) sum += $EXP($X - mx);
    sum = tree_sum(sum);)" + write + R"(
  }
}
)",
                                {{"M", m}, {"X", x}, {"EXP", exp_fn}, {"LOG", log_fn}});
  s.groups = row_groups(numel(s.outer));
  finish(ctx, s, log ? "log_softmax" : "softmax", body);
  plan.stages.push_back(std::move(s));
  return plan;
}

Plan plan_cumsum(const Context& ctx, const Kernel& k) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const KernelArg& x = k.inputs.at(0);
  Stage s = axis_stage(k, x.shape.empty() ? 0 : p.axis, false);
  s.wg = row_workgroup(ctx, numel(s.inner));
  Plan plan;
  if (numel(s.outer) == 0 || numel(s.inner) == 0) return plan;
  const std::string m = value_type(x.dtype);
  s.extra.push_back(p.flag ? 1u : 0u);
  const std::string body = fill(R"(
shared $M sc[WG];
void main() {
  uint tid = gl_LocalInvocationID.x;
  bool rev = P(E) != 0u;
  for (uint r = gl_WorkGroupID.x; r < P(0); r += gl_NumWorkGroups.x) {
    uint b0 = row0(r), b1 = row1(r);
    $M carry = $M(0);
    // The row in chunks of WG elements: an inclusive scan of each chunk in shared memory
    // (Hillis-Steele), plus the total of the chunks before it.
    for (uint c = 0u; c < P(1); c += WG) {
      uint j = c + tid, i = rev ? P(1) - 1u - j : j;
      sc[tid] = j < P(1) ? $M(ld0(b0 + uint(el0(i)))) : $M(0);
      barrier();
      for (uint off = 1u; off < WG; off <<= 1u) {
        $M t = tid >= off ? sc[tid - off] : $M(0);
        barrier();
        sc[tid] += t;
        barrier();
      }
      if (j < P(1)) st1(b1 + uint(el1(i)), $OUT(carry + sc[tid]));
      carry += sc[WG - 1u];
      barrier();
    }
  }
}
)",
                                {{"M", m}, {"OUT", compute_name(k.output.dtype)}});
  s.groups = row_groups(numel(s.outer));
  finish(ctx, s, "cumsum", body);
  plan.stages.push_back(std::move(s));
  return plan;
}

// ---- norms over the trailing `inner` elements ----------------------------------------

// x's leading dims (rows) x its trailing dims holding `inner` elements.
void norm_space(const KernelArg& x, int64_t inner, Shape& lead, Shape& trail, size_t& split) {
  split = x.shape.size();
  int64_t n = 1;
  while (split > 0 && n < inner) n *= x.shape[--split];
  while (split > 0 && x.shape[split - 1] == 1) --split;
  if (n != inner)
    fail("normalized size " + std::to_string(inner) + " is not a run of trailing dims of " + to_string(x.shape));
  lead.assign(x.shape.begin(), x.shape.begin() + static_cast<int64_t>(split));
  trail.assign(x.shape.begin() + static_cast<int64_t>(split), x.shape.end());
}

Arg row_arg(const KernelArg& a, size_t split, bool write = false) {
  Arg x;
  x.arg = &a, x.dtype = a.dtype, x.write = write;
  x.outer.assign(a.strides.begin(), a.strides.begin() + static_cast<int64_t>(split));
  x.inner.assign(a.strides.begin() + static_cast<int64_t>(split), a.strides.end());
  return x;
}
Arg param_arg(const KernelArg& a, const Shape& lead, const Shape& trail, const char* what) {
  Arg x;
  x.arg = &a, x.dtype = a.dtype;
  x.outer.assign(lead.size(), 0);
  x.inner = strides_as(a, trail, what);
  return x;
}

Plan plan_norm(const Context& ctx, const Kernel& k, bool rms) {
  const auto& p = std::get<NormParams>(k.node.params);
  const KernelArg& x = k.inputs.at(0);
  Stage s;
  size_t split;
  Plan plan;
  if (p.inner <= 0) return plan;
  norm_space(x, p.inner, s.outer, s.inner, split);
  if (numel(s.outer) == 0) return plan;
  const RowSpread spread = row_spread(ctx, p.inner);
  s.wg = spread.wg;
  s.args.push_back(row_arg(x, split));
  s.args.push_back(param_arg(k.inputs.at(1), s.outer, s.inner, "the weight"));
  if (!rms) s.args.push_back(param_arg(k.inputs.at(2), s.outer, s.inner, "the bias"));
  Arg out = row_arg(k.output, split, true);
  const Shape ost = strides_as(k.output, x.shape, "the output");
  out.outer.assign(ost.begin(), ost.begin() + static_cast<int64_t>(split));
  out.inner.assign(ost.begin() + static_cast<int64_t>(split), ost.end());
  s.args.push_back(out);
  const std::string m = float_math(x.dtype);
  put_eps(s.extra, m, p.eps);
  const char* rms_text = R"(
void main() {
  uint tid = LANE;
  $M eps = $EPS, n = $M(P(1));
  for (uint r = ROW0; r < P(0); r += ROW_STEP) {
    uint b0 = row0(r), b1 = row1(r), b2 = row2(r);
    $M q = $M(0);
    for (uint i = tid; i < P(1); i += LANES) {
      $M v = $X;
      q += v * v;
    }
    $M inv = $M(1) / sqrt(tree_sum(q) / n + eps);
    for (uint i = tid; i < P(1); i += LANES) st2(b2 + uint(el2(i)), $X * inv * $W);
  }
}
)";
  const char* layer_text = R"(
void main() {
  uint tid = LANE;
  $M eps = $EPS, n = $M(P(1));
  for (uint r = ROW0; r < P(0); r += ROW_STEP) {
    uint b0 = row0(r), b1 = row1(r), b2 = row2(r), b3 = row3(r);
    $M sum = $M(0);
    for (uint i = tid; i < P(1); i += LANES) sum += $X;
    $M mean = tree_sum(sum) / n;
    // Two passes over the row: sum((x - mean)^2) does not cancel the way E[x^2] - mean^2 does.
    $M q = $M(0);
    for (uint i = tid; i < P(1); i += LANES) {
      $M d = $X - mean;
      q += d * d;
    }
    $M rstd = $M(1) / sqrt(tree_sum(q) / n + eps);
    for (uint i = tid; i < P(1); i += LANES) st3(b3 + uint(el3(i)), ($X - mean) * rstd * $W + $M(ld2(b2 + uint(el2(i)))));
  }
}
)";
  const std::string body =
      row_spread_fns(ctx, m, spread) + fill(rms ? rms_text : layer_text, {{"M", m},
                                                                          {"EPS", eps_glsl(m)},
                                                                          {"X", m + "(ld0(b0 + uint(el0(i))))"},
                                                                          {"W", m + "(ld1(b1 + uint(el1(i))))"}});
  s.groups = row_spread_groups(spread, numel(s.outer));
  finish(ctx, s, rms ? "rms_norm" : "layer_norm", body);
  plan.stages.push_back(std::move(s));
  return plan;
}

// dx per row (a workgroup or an invocation each: row_spread; also saving the row's mean and
// rstd), then dweight and dbias per column in two passes (chunks of rows, then the chunks in
// order).
Plan plan_layer_norm_backward(const Context& ctx, const Kernel& k) {
  const auto& p = std::get<NormParams>(k.node.params);
  const KernelArg& x = k.inputs.at(0);
  const KernelArg& g = k.inputs.at(2);
  if (g.shape != x.shape) fail("the output gradient has shape " + to_string(g.shape) + ", not " + to_string(x.shape));
  Shape lead, trail;
  size_t split;
  Plan plan;
  if (p.inner <= 0) return plan;
  norm_space(x, p.inner, lead, trail, split);
  const int64_t rows = numel(lead);
  // The packed output [rows + 2, inner] must be contiguous: dx is then x's shape in row-major
  // order, dweight and dbias the two rows after it.
  const Shape want = contiguous_strides(k.output.shape);
  for (size_t d = 0; d < k.output.shape.size(); ++d)
    if (k.output.shape[d] != 1 && k.output.strides[d] != want[d]) fail("the packed output is not contiguous");
  const std::string m = float_math(x.dtype);
  const DType stat = m == "double" ? DType::F64 : DType::F32;
  Arg out;
  out.arg = &k.output, out.dtype = k.output.dtype, out.write = true;
  const Shape xc = contiguous_strides(x.shape);
  out.outer.assign(xc.begin(), xc.begin() + static_cast<int64_t>(split));
  out.inner.assign(xc.begin() + static_cast<int64_t>(split), xc.end());
  Arg stats;
  stats.scratch = 0, stats.dtype = stat;
  stats.outer = contiguous_strides(lead);
  for (int64_t& st : stats.outer) st *= 2;
  stats.inner.assign(trail.size(), 0);
  plan.scratch_bytes.push_back(static_cast<size_t>(std::max<int64_t>(rows, 1)) * 2 * dtype_size(stat));
  if (rows > 0) {
    Stage s;
    s.outer = lead, s.inner = trail;
    const RowSpread spread = row_spread(ctx, p.inner);
    s.wg = spread.wg;
    s.args = {row_arg(x, split), param_arg(k.inputs.at(1), lead, trail, "the weight"), row_arg(g, split), out, stats};
    s.args[4].write = true;
    // A fourth input (VulkanDevice::norm_backward_adds): a gradient of x's shape that dx adds.
    const bool adds = k.inputs.size() > 3;
    if (adds) {
      if (k.inputs[3].shape != x.shape) fail("the gradient dx adds has shape " + to_string(k.inputs[3].shape));
      s.args.push_back(row_arg(k.inputs[3], split));
    }
    put_eps(s.extra, m, p.eps);
    const std::string body =
        row_spread_fns(ctx, m, spread) + fill(R"(
void main() {
  uint tid = LANE;
  $M eps = $EPS, n = $M(P(1));
  for (uint r = ROW0; r < P(0); r += ROW_STEP) {
    uint b0 = row0(r), b1 = row1(r), b2 = row2(r), b3 = row3(r);
    $M sum = $M(0);
    for (uint i = tid; i < P(1); i += LANES) sum += $X;
    $M mean = tree_sum(sum) / n;
    $M q = $M(0);
    for (uint i = tid; i < P(1); i += LANES) {
      $M d = $X - mean;
      q += d * d;
    }
    $M rstd = $M(1) / sqrt(tree_sum(q) / n + eps);
    // xhat = (x - mean) rstd, gx = g w: dx = rstd (gx - mean(gx) - xhat mean(gx xhat)).
    $M sa = $M(0), sb = $M(0);
    for (uint i = tid; i < P(1); i += LANES) {
      $M xh = ($X - mean) * rstd, gx = $GX;
      sa += gx;
      sb += gx * xh;
    }
    $M mgx = tree_sum(sa) / n;
    $M mgxh = tree_sum(sb) / n;
    for (uint i = tid; i < P(1); i += LANES) {
      $M xh = ($X - mean) * rstd, gx = $GX;
      st3(b3 + uint(el3(i)), rstd * (gx - mgx - xh * mgxh)$SUM);
    }
    if (tid == 0u) {
      st4(row4(r), mean);
      st4(row4(r) + 1u, rstd);
    }
  }
}
)",
                                      {{"M", m},
                                       {"EPS", eps_glsl(m)},
                                       {"X", m + "(ld0(b0 + uint(el0(i))))"},
                                       {"GX", m + "(ld2(b2 + uint(el2(i)))) * " + m + "(ld1(b1 + uint(el1(i))))"},
                                       {"SUM", adds ? " + " + m + "(ld5(row5(r) + uint(el5(i))))" : ""}});
    s.groups = row_spread_groups(spread, rows);
    finish(ctx, s, "layer_norm_backward_dx", body);
    plan.stages.push_back(std::move(s));
  }
  // dweight and dbias: the rows in chunks (enough workgroups to fill the device; on a CPU
  // implementation, its cores), each invocation one column of one chunk, into partial sums
  // [chunk][2][inner]; then a column's chunks added in order (the same result on every launch).
  const int64_t chunks = std::clamp<int64_t>(rows / 64, 1, 256);
  plan.scratch_bytes.push_back(static_cast<size_t>(chunks * 2 * p.inner) * dtype_size(stat));
  Arg partial;
  partial.scratch = 1, partial.dtype = stat;
  partial.outer.assign(lead.size(), 0);
  partial.inner.assign(trail.size(), 0);
  {
    Stage s;
    s.outer = lead, s.inner = trail;
    Arg st_in = stats;
    st_in.write = false;
    Arg part_out = partial;
    part_out.write = true;
    s.args = {row_arg(x, split), row_arg(g, split), st_in, part_out};
    s.extra.push_back(static_cast<uint32_t>(chunks));
    const std::string body = fill(R"(
void main() {
  uint chunk = (P(0) + P(E) - 1u) / P(E);
  uint lo = min(P(0), gl_WorkGroupID.y * chunk), hi = min(P(0), lo + chunk);
  for (uint i = gl_GlobalInvocationID.x; i < P(1); i += gl_NumWorkGroups.x * WG) {
    $M dw = $M(0), db = $M(0);
    for (uint r = lo; r < hi; ++r) {
      uint b0 = row0(r), b1 = row1(r), b2 = row2(r);
      $M gv = $M(ld1(b1 + uint(el1(i))));
      dw += gv * (($M(ld0(b0 + uint(el0(i)))) - ld2(b2)) * ld2(b2 + 1u));
      db += gv;
    }
    uint o = gl_WorkGroupID.y * 2u * P(1) + i;
    st3(o, dw);
    st3(o + P(1), db);
  }
}
)",
                                  {{"M", m}});
    const uint32_t wg = workgroup_size(ctx);
    s.groups = thread_groups(p.inner, wg);
    s.groups.y = static_cast<uint32_t>(chunks);
    finish(ctx, s, "layer_norm_backward_dparams_parts", body);
    plan.stages.push_back(std::move(s));
  }
  {
    Stage s;
    s.outer = lead, s.inner = trail;
    s.args = {partial, out};
    s.extra.push_back(static_cast<uint32_t>(chunks));
    const std::string body = fill(R"(
void main() {
  for (uint i = gl_GlobalInvocationID.x; i < P(1); i += gl_NumWorkGroups.x * WG) {
    $M dw = $M(0), db = $M(0);
    for (uint c = 0u; c < P(E); ++c) {
      dw += ld0(c * 2u * P(1) + i);
      db += ld0(c * 2u * P(1) + P(1) + i);
    }
    // dweight and dbias: the two rows after dx.
    uint o = row1(0u) + P(0) * P(1) + uint(el1(i));
    st1(o, dw);
    st1(o + P(1), db);
  }
}
)",
                                  {{"M", m}});
    s.groups = thread_groups(p.inner, workgroup_size(ctx));
    finish(ctx, s, "layer_norm_backward_dparams", body);
    plan.stages.push_back(std::move(s));
  }
  return plan;
}

Plan make_plan(const Context& ctx, const Kernel& k) {
  const int64_t n = numel(k.output.shape);
  if (n > std::numeric_limits<int32_t>::max()) fail("more than 2^31 output elements (32-bit indices)");
  for (const KernelArg& a : k.inputs) {
    int64_t m = 1;
    for (int64_t d : a.shape) m *= d;
    if (m > std::numeric_limits<int32_t>::max()) fail("an input of more than 2^31 elements (32-bit indices)");
  }
  switch (k.op) {
    case OpId::Reduce:
      return plan_reduce(ctx, k);
    case OpId::ArgReduce:
      return plan_argreduce(ctx, k);
    case OpId::Softmax:
      return plan_softmax(ctx, k, false);
    case OpId::LogSoftmax:
      return plan_softmax(ctx, k, true);
    case OpId::LayerNorm:
      return plan_norm(ctx, k, false);
    case OpId::RmsNorm:
      return plan_norm(ctx, k, true);
    case OpId::LayerNormBackward:
      return plan_layer_norm_backward(ctx, k);
    case OpId::Cumsum:
      return plan_cumsum(ctx, k);
    default:
      break;
  }
  fail(std::string(op_name(k.op)) + " is not a reduction or row op");
}

uint32_t int_word(int64_t v, const char* what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail(std::string(what) + " beyond 32 bits");
  return static_cast<uint32_t>(static_cast<int32_t>(v));
}

}  // namespace

std::string row_op_unsupported(const Context& ctx, const Kernel& k) {
  try {
    if (k.epilogue && k.op != OpId::Reduce) return "an epilogue on " + std::string(op_name(k.op));
    const Plan plan = make_plan(ctx, k);
    for (const Stage& s : plan.stages) {
      const size_t bindings = s.args.size() + (s.push ? 0 : 1);
      if (std::string why = map_unsupported_reason(ctx, s.source, bindings); !why.empty()) return why;
      for (const Arg& a : s.args) {
        for (int64_t st : a.outer) int_word(st, "a stride");
        for (int64_t st : a.inner) int_word(st, "a stride");
      }
    }
  } catch (const Error& e) {
    return e.detail();
  }
  return "";
}

void launch_row_op(Context& ctx, Encoder& enc, const Kernel& k) {
  auto refuse = [&](const std::string& why) {
    fail(std::string(op_name(k.op)) + " cannot run on vulkan:" + std::to_string(ctx.info().index) + ": " + why);
  };
  if (k.epilogue && k.op != OpId::Reduce) refuse("an epilogue on " + std::string(op_name(k.op)));
  Plan plan;
  try {
    plan = make_plan(ctx, k);
  } catch (const Error& e) {
    refuse(e.detail());
  }
  for (const Stage& s : plan.stages)
    if (std::string why = map_unsupported_reason(ctx, s.source, s.args.size() + (s.push ? 0 : 1)); !why.empty())
      refuse(why);
  std::vector<std::shared_ptr<Allocation>> scratch;
  for (size_t bytes : plan.scratch_bytes) scratch.push_back(ctx.pool().allocate(std::max<size_t>(bytes, 4)));
  for (const Stage& s : plan.stages) {
    std::vector<Binding> bindings;
    std::vector<uint32_t> words{static_cast<uint32_t>(numel(s.outer)), static_cast<uint32_t>(numel(s.inner))};
    for (int64_t d : s.outer) words.push_back(static_cast<uint32_t>(d));
    for (int64_t d : s.inner) words.push_back(static_cast<uint32_t>(d));
    for (const Arg& a : s.args) {
      uint32_t first = 0;
      if (a.arg) {
        const BoundView b = bind_view(ctx, view_arg(*a.arg), a.write);
        bindings.push_back(b.binding);
        first = b.first;
      } else {
        const auto& alloc = scratch.at(static_cast<size_t>(a.scratch));
        bindings.push_back(Binding{alloc, 0, alloc->bytes(), a.write});
        first = static_cast<uint32_t>(a.first);
      }
      for (int64_t st : a.outer) words.push_back(int_word(st, "a stride"));
      for (int64_t st : a.inner) words.push_back(int_word(st, "a stride"));
      words.push_back(first);
    }
    words.insert(words.end(), s.extra.begin(), s.extra.end());
    if (words.size() != s.words)
      fail("internal: params of " + std::to_string(words.size()) + " words, expected " + std::to_string(s.words));
    const auto* bytes = reinterpret_cast<const uint8_t*>(words.data());
    const size_t nbytes = words.size() * 4;
    if (s.push) {
      const Pipeline& pipe =
          ctx.pipeline(s.source, static_cast<uint32_t>(bindings.size()), static_cast<uint32_t>(nbytes));
      enc.dispatch(pipe, bindings, std::span<const uint8_t>(bytes, nbytes), s.groups);
    } else {
      const Pipeline& pipe = ctx.pipeline(s.source, static_cast<uint32_t>(bindings.size() + 1), 0);
      std::shared_ptr<Allocation> pbuf = ctx.pool().allocate(nbytes);
      ctx.stream().upload(pbuf, 0, bytes, nbytes);
      bindings.push_back(Binding{pbuf, 0, nbytes, false});
      enc.dispatch(pipe, bindings, {}, s.groups);
    }
  }
}

namespace {

std::string unsupported_entry(const Context& ctx, const Kernel& k) { return row_op_unsupported(ctx, k); }
void launch_entry(Context& ctx, Encoder& enc, const Kernel& k) { launch_row_op(ctx, enc, k); }

const bool registered = [] {
  for (OpId op : {OpId::Reduce, OpId::ArgReduce, OpId::Softmax, OpId::LogSoftmax, OpId::LayerNorm, OpId::RmsNorm,
                  OpId::LayerNormBackward, OpId::Cumsum})
    template_ops().add(op, op == OpId::Reduce || op == OpId::ArgReduce || op == OpId::Cumsum ? kAllDTypes : kFloatDTypes,
                        TemplateOp{unsupported_entry, launch_entry}, "f64 where the device has shaderFloat64");
  return true;
}();

}  // namespace

}  // namespace alk::vk
