// Index-driven template ops on Vulkan: gather, index_select (and embedding), scatter_add,
// one_hot. Every index kernel checks its indices as it reads them and reports a bad one
// through IndexErrors (index_errors.h), clamping the read or skipping the write so no
// access leaves its tensor.
//
// Indices are i32 or i64; an i64 index is read as two 32-bit words (no shaderInt64
// needed): it is valid when the high word is 0 and the low one below the size.
//
// scatter_add is deterministic and matches the CPU bit for bit (no float atomics: those
// would be neither): sums run in increasing index order, as the CPU's do.
//   - Whole rows along dim 0 (one id per row: an embedding's or index_select's backward)
//     with more than kBucketRows rows: ids are bucketed by row on the device (counts,
//     scan, placement, per-bucket sort), then each output element sums its bucket;
//     O(N + V + (N + V) * D) work.
//   - Otherwise each invocation owns one output element and walks the index entries
//     along `dim` that could hit it: out.numel * index.shape[dim] reads, fine for
//     gather's backward and small index counts.
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/index_errors.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

using kernels::Launch;

std::string index_reason(DType d) {
  return d == DType::I32 || d == DType::I64 ? "" : "index must be i64 or i32, got " + std::string(dtype_name(d));
}

std::string rank_decl(size_t rank) { return "#define R " + std::to_string(rank) + "\n"; }

// GLSL: the index buffer `idx_` and the flag buffer, read_index(at, lo, hi), report().
std::string index_glsl(DType index, size_t index_binding, size_t flag_binding, int launch_word) {
  std::string s;
  s += "layout(std430, binding = " + std::to_string(index_binding) + ") readonly buffer Idx { " +
       (index == DType::I64 ? "uvec2" : "uint") + " idx_[]; };\n";
  s += "layout(std430, binding = " + std::to_string(flag_binding) + ") buffer Flag { uint flag_[]; };\n";
  if (index == DType::I64)
    s += "void read_index(uint at, out uint lo, out uint hi) { uvec2 w = idx_[at]; lo = w.x; hi = w.y; }\n";
  else
    s += "void read_index(uint at, out uint lo, out uint hi) { lo = idx_[at]; hi = int(lo) < 0 ? 0xffffffffu : 0u; }\n";
  s += "bool index_ok(uint lo, uint hi, uint size) { return hi == 0u && lo < size; }\n";
  s += "// The first kernel (and invocation) to find a bad index claims the flag.\n"
       "void report(uint pos, uint lo, uint hi) {\n"
       "  if (atomicCompSwap(flag_[0], 0u, P(" + std::to_string(launch_word) + ")) == 0u) {\n"
       "    flag_[1] = pos; flag_[2] = lo; flag_[3] = hi;\n  }\n}\n";
  return s;
}

std::string header(const std::vector<DType>& dtypes) {
  std::string s = "#version 450\n";
  bool b8 = false, b16 = false;
  for (DType d : dtypes) b8 = b8 || dtype_size(d) == 1, b16 = b16 || dtype_size(d) == 2;
  if (b8) s += "#extension GL_EXT_shader_8bit_storage : require\n";
  if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  return s;
}

std::string op_label(const Kernel& k, const char* op) { return k.node.name.empty() ? op : k.node.name; }

uint32_t register_launch(Context& ctx, const Encoder& enc, const Kernel& k, const char* op, int64_t size, int64_t dim,
                         const char* what = "index") {
  return IndexErrors::of(ctx).add(IndexLaunch{op_label(k, op), k.node.loc, size, dim, what}, enc);
}

// Shape checks the CPU makes before touching anything (kernels_index.cpp), with its messages.
void check_fits(const Kernel& k, const char* op, const KernelArg& small, const char* small_name, const KernelArg& big,
                const char* big_name, int dim, bool include_dim) {
  if (small.shape.size() != big.shape.size())
    alk::fail(op_label(k, op), k.node.loc, small_name, " has rank ", small.shape.size(), " but ", big_name, " has rank ",
         big.shape.size());
  for (size_t d = 0; d < small.shape.size(); ++d)
    if ((include_dim || static_cast<int>(d) != dim) && small.shape[d] > big.shape[d])
      alk::fail(op_label(k, op), k.node.loc, small_name, " shape ", to_string(small.shape), " exceeds ", big_name,
           " shape ", to_string(big.shape), " at dim ", d);
}

std::string out_reason(const Kernel& k) {
  return kernels::is_contiguous(k.output) ? "" : "a non-contiguous output";
}

// ---- gather: out[c] = x[c with c_dim = index[c]] ----
std::string gather_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 2) return "gather takes 2 inputs";
  if (k.inputs[0].dtype != k.output.dtype) return "gather between dtypes";
  return index_reason(k.inputs[1].dtype);
}

void gather_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const ViewArg x = view_arg(k.inputs[0]), index = view_arg(k.inputs[1]), out = view_arg(k.output);
  check_fits(k, "gather", k.inputs[1], "index", k.inputs[0], "input", dim, false);
  if (std::string why = out_reason(k); !why.empty()) fail("gather: " + why);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const size_t R = x.shape.size();
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), inf = l.bind(index, false), of = l.bind(out, true);
  l.bind_raw(IndexErrors::of(ctx).binding());
  l.u(static_cast<uint64_t>(n));
  l.u(static_cast<uint64_t>(dim));
  l.u(static_cast<uint64_t>(x.shape[dim]));
  l.u(register_launch(ctx, enc, k, "gather", x.shape[dim], dim));
  l.u(xf), l.u(inf), l.u(of);
  for (int64_t s : index.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : index.strides) l.i(s);
  for (int64_t s : x.strides) l.i(s);
  const char* T = kernels::storage_type(x.dtype);
  const std::string SH = "7", IS = std::to_string(7 + R), XS = std::to_string(7 + 2 * R);
  std::string s = header({x.dtype}) + rank_decl(R) + l.preamble();
  s += "layout(std430, binding = 0) readonly buffer X { " + std::string(T) + " x_[]; };\n";
  s += "layout(std430, binding = 2) writeonly buffer O { " + std::string(T) + " out_[]; };\n";
  s += index_glsl(index.dtype, 1, 3, 3);
  s += "void main() {\n  uint n = P(0), dim = P(1), size = P(2);\n  ";
  s += kernels::kLoop;
  s += " {\n"
       "    uint rem = i; int io = 0, xo = 0;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      io += int(c) * PI(" + IS + " + d);\n"
       "      if (uint(d) != dim) xo += int(c) * PI(" + XS + " + d);\n"
       "    }\n"
       "    uint lo, hi;\n"
       "    read_index(P(5) + uint(io), lo, hi);\n"
       "    if (!index_ok(lo, hi, size)) {\n"
       "      report(i, lo, hi);\n"
       "      if (size == 0u) continue;\n"
       "      lo = int(hi) < 0 ? 0u : size - 1u;  // clamped: stays inside x\n"
       "    }\n"
       "    xo += int(lo) * PI(" + XS + " + dim);\n"
       "    out_[P(6) + i] = x_[P(4) + uint(xo)];\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- index_select: out[c] = x[c with c_dim = index[c_dim]] (index 1-D) ----
std::string index_select_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 2) return "index_select takes 2 inputs";
  if (k.inputs[0].dtype != k.output.dtype) return "index_select between dtypes";
  if (k.inputs[0].shape.size() != k.output.shape.size()) return "index_select of a 0-d tensor";
  if (k.inputs[1].shape.size() != 1) return "index_select with an index that is not 1-D";
  return index_reason(k.inputs[1].dtype);
}

void index_select_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const ViewArg x = view_arg(k.inputs[0]), index = view_arg(k.inputs[1]), out = view_arg(k.output);
  if (std::string why = out_reason(k); !why.empty()) fail("index_select: " + why);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const size_t R = x.shape.size();
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), inf = l.bind(index, false), of = l.bind(out, true);
  l.bind_raw(IndexErrors::of(ctx).binding());
  l.u(static_cast<uint64_t>(n));
  l.u(static_cast<uint64_t>(dim));
  l.u(static_cast<uint64_t>(x.shape[dim]));
  l.u(register_launch(ctx, enc, k, "index_select", x.shape[dim], dim));
  l.u(xf), l.u(inf), l.u(of);
  l.i(index.strides[0]);
  for (int64_t s : out.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.strides) l.i(s);
  const char* T = kernels::storage_type(x.dtype);
  const std::string SH = "8", XS = std::to_string(8 + R);
  std::string s = header({x.dtype}) + rank_decl(R) + l.preamble();
  s += "layout(std430, binding = 0) readonly buffer X { " + std::string(T) + " x_[]; };\n";
  s += "layout(std430, binding = 2) writeonly buffer O { " + std::string(T) + " out_[]; };\n";
  s += index_glsl(index.dtype, 1, 3, 3);
  s += "void main() {\n  uint n = P(0), dim = P(1), size = P(2);\n  ";
  s += kernels::kLoop;
  s += " {\n"
       "    uint rem = i, cd = 0u; int xo = 0;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      if (uint(d) != dim) xo += int(c) * PI(" + XS + " + d); else cd = c;\n"
       "    }\n"
       "    uint lo, hi;\n"
       "    read_index(P(5) + uint(int(cd) * PI(7)), lo, hi);\n"
       "    if (!index_ok(lo, hi, size)) {\n"
       "      report(cd, lo, hi);\n"
       "      if (size == 0u) continue;\n"
       "      lo = int(hi) < 0 ? 0u : size - 1u;  // clamped: stays inside x\n"
       "    }\n"
       "    xo += int(lo) * PI(" + XS + " + dim);\n"
       "    out_[P(6) + i] = x_[P(4) + uint(xo)];\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- scatter_add: out = x; out[c with c_dim = index[c]] += src[c] ----
std::string scatter_add_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 3) return "scatter_add takes 3 inputs";
  const DType t = k.output.dtype;
  if (k.inputs[0].dtype != t || k.inputs[2].dtype != t) return "scatter_add between dtypes";
  if (t == DType::U8 || t == DType::Bool) return "scatter_add of " + std::string(dtype_name(t));
  if (t == DType::F64 && !ctx.info().float64) return ctx.info().name + " has no shaderFloat64";
  return index_reason(k.inputs[1].dtype);
}

// scatter_add's payload: the stored type, and GLSL for sums in the CPU's way (each add
// rounded to the dtype, as the CPU stores every partial sum): arithmetic_glsl + ADD(acc, v).
std::pair<std::string, std::string> payload(DType t) {
  const std::string add = t == DType::I64
                              ? "#define ADD(acc, v) { uint carry_; acc.x = uaddCarry(acc.x, v.x, carry_); "
                                "acc.y += v.y + carry_; }\n"
                              : "#define ADD(acc, v) acc = ROUND(acc + v)\n";
  return {t == DType::F32 ? "float" : t == DType::F64 ? "double" : t == DType::I32 ? "int" : kernels::storage_type(t),
          kernels::arithmetic_glsl(t) + add};
}

// Above this many index rows, whole-row scatters (an embedding's backward) take the
// bucket path below instead of every output element scanning every id.
constexpr int64_t kBucketRows = 32;

// scatter_add of whole rows along dim 0 (one id per row, like the CPU's scatter_rows):
// out[v, :] = x[v, :] + the src rows i with ids[i] == v, in increasing i. Five dispatches,
// O(N + V + (N + V) * D) work, deterministic and in the CPU's order:
//   1. count the ids per row v (atomicAdd: counts are order-free), reporting bad ids;
//   2. an exclusive scan of the counts: bucket starts;
//   3. place each i in its bucket (atomicAdd on a cursor: slots in any order);
//   4. sort each bucket (insertion sort: buckets are short unless ids repeat a lot);
//   5. each output element adds its bucket's src values in that order.
// False when k is not this case (the caller then runs the general kernel).
bool scatter_rows(Context& ctx, Encoder& enc, const Kernel& k, uint32_t launch) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const ViewArg x = view_arg(k.inputs[0]), index = view_arg(k.inputs[1]), src = view_arg(k.inputs[2]),
                out = view_arg(k.output);
  const size_t R = out.shape.size();
  if (dim != 0 || R < 1 || R > 8 || index.shape[0] <= kBucketRows) return false;
  for (size_t d = 1; d < R; ++d)
    if (index.shape[d] != out.shape[d] || (index.strides[d] != 0 && index.shape[d] != 1)) return false;
  const int64_t V = out.shape[0], N = index.shape[0], D = numel(out.shape) / std::max<int64_t>(V, 1);
  if (V == 0 || D == 0) return false;
  // Scratch words: counts[V] | cursor[V] | start[V + 1] | slots[N].
  const uint64_t words = 3 * static_cast<uint64_t>(V) + 1 + static_cast<uint64_t>(N);
  std::shared_ptr<Allocation> tmp = ctx.pool().allocate(words * 4);
  const Binding scratch{tmp, 0, words * 4, true};
  const std::string V_ = std::to_string(V), SLOTS = std::to_string(3 * V + 1), START = std::to_string(2 * V);
  const std::string head = "#version 450\n";
  const std::string tmp_decl = "buffer Tmp { uint tmp_[]; };\n";
  {  // 0. zero the counts and cursors
    Launch l(ctx);
    l.bind_raw(scratch);
    l.u(2 * static_cast<uint64_t>(V));
    std::string s = head + l.preamble() + "layout(std430, binding = 0) " + tmp_decl;
    s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) + " tmp_[i] = 0u;\n}\n";
    l.dispatch(enc, s, kernels::groups_for(2 * V));
  }
  {  // 1. count
    Launch l(ctx);
    const uint32_t inf = l.bind(index, false);
    l.bind_raw(scratch);
    l.bind_raw(IndexErrors::of(ctx).binding());
    l.u(static_cast<uint64_t>(N)), l.u(static_cast<uint64_t>(V)), l.u(launch), l.u(inf);
    l.i(index.strides[0]);
    l.u(static_cast<uint64_t>(numel(index.shape) / N));
    std::string s = head + l.preamble() + "layout(std430, binding = 1) " + tmp_decl + index_glsl(index.dtype, 0, 2, 2);
    s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) +
         " {\n"
         "    uint lo, hi;\n"
         "    read_index(P(3) + uint(int(i) * PI(4)), lo, hi);\n"
         "    if (!index_ok(lo, hi, P(1))) { report(i * P(5), lo, hi); continue; }\n"
         "    atomicAdd(tmp_[lo], 1u);\n"
         "  }\n}\n";
    l.dispatch(enc, s, kernels::groups_for(N));
  }
  {  // 2. scan: 256 chunks summed, the 256 sums scanned, each chunk written
    Launch l(ctx);
    l.bind_raw(scratch);
    l.u(static_cast<uint64_t>(V));
    std::string s = head + l.preamble() + "layout(std430, binding = 0) " + tmp_decl;
    s += "shared uint part[256];\n"
         "void main() {\n"
         "  uint V = P(0), t = gl_LocalInvocationID.x, chunk = (V + 255u) / 256u;\n"
         "  uint b = min(t * chunk, V), e = min(b + chunk, V), sum = 0u;\n"
         "  for (uint v = b; v < e; ++v) sum += tmp_[v];\n"
         "  part[t] = sum;\n"
         "  barrier();\n"
         "  if (t == 0u) { uint run = 0u; for (uint j = 0u; j < 256u; ++j) { uint c = part[j]; part[j] = run; run += c; }\n"
         "                 tmp_[" + START + "u + V] = run; }\n"
         "  barrier();\n"
         "  uint run = part[t];\n"
         "  for (uint v = b; v < e; ++v) { tmp_[" + START + "u + v] = run; run += tmp_[v]; }\n"
         "}\n";
    l.dispatch(enc, s, 1);
  }
  {  // 3. place
    Launch l(ctx);
    const uint32_t inf = l.bind(index, false);
    l.bind_raw(scratch);
    l.u(static_cast<uint64_t>(N)), l.u(static_cast<uint64_t>(V)), l.u(inf);
    l.i(index.strides[0]);
    std::string s = head + l.preamble() + "layout(std430, binding = 1) " + tmp_decl;
    s += "layout(std430, binding = 0) readonly buffer Idx { " + std::string(index.dtype == DType::I64 ? "uvec2" : "uint") +
         " idx_[]; };\n";
    s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) + " {\n";
    s += index.dtype == DType::I64 ? "    uvec2 w = idx_[P(2) + uint(int(i) * PI(3))]; uint lo = w.x, hi = w.y;\n"
                                   : "    uint lo = idx_[P(2) + uint(int(i) * PI(3))], hi = int(lo) < 0 ? 1u : 0u;\n";
    s += "    if (hi != 0u || lo >= P(1)) continue;\n"
         "    uint slot = tmp_[" + START + "u + lo] + atomicAdd(tmp_[" + V_ + "u + lo], 1u);\n"
         "    tmp_[" + SLOTS + "u + slot] = i;\n"
         "  }\n}\n";
    l.dispatch(enc, s, kernels::groups_for(N));
  }
  {  // 4. sort each bucket
    Launch l(ctx);
    l.bind_raw(scratch);
    l.u(static_cast<uint64_t>(V));
    std::string s = head + l.preamble() + "layout(std430, binding = 0) " + tmp_decl;
    s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) +
         " {\n"
         "    uint b = " + SLOTS + "u + tmp_[" + START + "u + i], e = " + SLOTS + "u + tmp_[" + START + "u + i + 1u];\n"
         "    for (uint a = b + 1u; a < e; ++a) {\n"
         "      uint key = tmp_[a], j = a;\n"
         "      while (j > b && tmp_[j - 1u] > key) { tmp_[j] = tmp_[j - 1u]; --j; }\n"
         "      tmp_[j] = key;\n"
         "    }\n"
         "  }\n}\n";
    l.dispatch(enc, s, kernels::groups_for(V));
  }
  {  // 5. sum
    Launch l(ctx);
    const uint32_t xf = l.bind(x, false), sf = l.bind(src, false);
    l.bind_raw(scratch);
    const uint32_t of = l.bind(out, true);
    const int64_t n = V * D;
    l.u(static_cast<uint64_t>(n)), l.u(static_cast<uint64_t>(D)), l.u(xf), l.u(sf), l.u(of);
    l.i(x.strides[0]), l.i(src.strides[0]);
    for (size_t d = 1; d < R; ++d) l.u(static_cast<uint64_t>(out.shape[d]));
    for (size_t d = 1; d < R; ++d) l.i(x.strides[d]);
    for (size_t d = 1; d < R; ++d) l.i(src.strides[d]);
    const auto [T, add] = payload(out.dtype);
    const std::string SH = "7", XS = std::to_string(7 + (R - 1)), SS = std::to_string(7 + 2 * (R - 1));
    std::string s = head + kernels::storage_extensions(out.dtype) + "#define R1 " + std::to_string(R - 1) + "\n" +
                    l.preamble() + add;
    s += "layout(std430, binding = 0) readonly buffer X { " + T + " x_[]; };\n";
    s += "layout(std430, binding = 1) readonly buffer S { " + T + " src_[]; };\n";
    s += "layout(std430, binding = 2) readonly " + tmp_decl;
    s += "layout(std430, binding = 3) writeonly buffer O { " + T + " out_[]; };\n";
    s += "void main() {\n  uint n = P(0), D = P(1);\n  " + std::string(kernels::kLoop) +
         " {\n"
         "    uint bucket = i / D, rem = i % D; int xo = int(bucket) * PI(5), so = 0;\n"
         "    for (int d = R1 - 1; d >= 0; --d) {\n"
         "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
         "      xo += int(c) * PI(" + XS + " + d); so += int(c) * PI(" + SS + " + d);\n"
         "    }\n"
         "    ACC acc = LOAD(x_[P(2) + uint(xo)]);\n"
         "    uint b = tmp_[" + START + "u + bucket], e = tmp_[" + START + "u + bucket + 1u];\n"
         "    for (uint at = b; at < e; ++at) {\n"
         "      uint row = tmp_[" + SLOTS + "u + at];\n"
         "      ACC v = LOAD(src_[P(3) + uint(int(row) * PI(6) + so)]);\n"
         "      ADD(acc, v);\n"
         "    }\n"
         "    out_[P(4) + i] = STORE(acc);\n"
         "  }\n}\n";
    l.dispatch(enc, s, kernels::groups_for(n));
  }
  return true;
}

void scatter_add_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const ViewArg x = view_arg(k.inputs[0]), index = view_arg(k.inputs[1]), src = view_arg(k.inputs[2]),
                out = view_arg(k.output);
  check_fits(k, "scatter_add", k.inputs[1], "index", k.inputs[2], "src", dim, true);
  check_fits(k, "scatter_add", k.inputs[1], "index", k.inputs[0], "input", dim, false);
  if (std::string why = out_reason(k); !why.empty()) fail("scatter_add: " + why);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const uint32_t launch = register_launch(ctx, enc, k, "scatter_add", x.shape[dim], dim);
  if (scatter_rows(ctx, enc, k, launch)) return;
  const size_t R = x.shape.size();
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), inf = l.bind(index, false), sf = l.bind(src, false), of = l.bind(out, true);
  l.bind_raw(IndexErrors::of(ctx).binding());
  l.u(static_cast<uint64_t>(n));
  l.u(static_cast<uint64_t>(dim));
  l.u(static_cast<uint64_t>(x.shape[dim]));
  l.u(launch);
  l.u(xf), l.u(inf), l.u(sf), l.u(of);
  l.u(static_cast<uint64_t>(index.shape[dim]));
  for (int64_t s : out.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : index.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.strides) l.i(s);
  for (int64_t s : index.strides) l.i(s);
  for (int64_t s : src.strides) l.i(s);
  const std::string SH = "9", ISH = std::to_string(9 + R), XS = std::to_string(9 + 2 * R),
                    IS = std::to_string(9 + 3 * R), SS = std::to_string(9 + 4 * R);
  const auto [T, add] = payload(out.dtype);
  std::string s = header({out.dtype}) + rank_decl(R) + l.preamble() + add;
  s += "layout(std430, binding = 0) readonly buffer X { " + T + " x_[]; };\n";
  s += "layout(std430, binding = 2) readonly buffer S { " + T + " src_[]; };\n";
  s += "layout(std430, binding = 3) writeonly buffer O { " + T + " out_[]; };\n";
  s += index_glsl(index.dtype, 1, 4, 3);
  s += "void main() {\n  uint n = P(0), dim = P(1), size = P(2), len = P(8);\n  ";
  s += kernels::kLoop;
  s += " {\n"
       "    uint rem = i, cd = 0u, mult = 1u, ipos = 0u, dim_mult = 0u; int xo = 0, io = 0, so = 0;\n"
       "    bool inside = true;  // the other coordinates lie inside the index's shape\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      xo += int(c) * PI(" + XS + " + d);\n"
       "      if (uint(d) == dim) { cd = c; dim_mult = mult; }\n"
       "      else { inside = inside && c < P(" + ISH + " + d); io += int(c) * PI(" + IS + " + d);\n"
       "             so += int(c) * PI(" + SS + " + d); ipos += c * mult; }\n"
       "      mult *= P(" + ISH + " + d);\n"
       "    }\n"
       "    ACC acc = LOAD(x_[P(4) + uint(xo)]);\n"
       "    if (inside) {\n"
       "      for (uint j = 0u; j < len; ++j) {\n"
       "        uint lo, hi;\n"
       "        read_index(P(5) + uint(io + int(j) * PI(" + IS + " + dim)), lo, hi);\n"
       "        if (!index_ok(lo, hi, size)) {\n"
       "          if (cd == 0u) report(ipos + j * dim_mult, lo, hi);  // once per entry\n"
       "          continue;  // skipped: no write outside out\n"
       "        }\n"
       "        if (lo == cd) { ACC v = LOAD(src_[P(6) + uint(so + int(j) * PI(" + SS + " + dim))]); ADD(acc, v); }\n"
       "      }\n"
       "    }\n"
       "    out_[P(7) + i] = STORE(acc);\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- one_hot: out[c, k] = (ids[c] == k) ----
std::string one_hot_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k, 9); !why.empty()) return why;
  if (k.inputs.size() != 1) return "one_hot takes 1 input";
  return index_reason(k.inputs[0].dtype);
}

void one_hot_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const int64_t classes = std::get<OneHotParams>(k.node.params).num_classes;
  const ViewArg ids = view_arg(k.inputs[0]), out = view_arg(k.output);
  if (std::string why = out_reason(k); !why.empty()) fail("one_hot: " + why);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const size_t R = ids.shape.size();
  Launch l(ctx);
  const uint32_t inf = l.bind(ids, false), of = l.bind(out, true);
  l.bind_raw(IndexErrors::of(ctx).binding());
  l.u(static_cast<uint64_t>(n));
  l.u(static_cast<uint64_t>(classes));
  l.u(register_launch(ctx, enc, k, "one_hot", classes, static_cast<int64_t>(R), "class id"));
  l.u(inf), l.u(of);
  const auto one = kernels::constant_bits(out.dtype, 1.0);
  l.u(one.first), l.u(one.second);
  for (int64_t s : ids.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : ids.strides) l.i(s);
  const std::string SH = "7", IS = std::to_string(7 + R);
  std::string s = header({out.dtype}) + rank_decl(R) + l.preamble();
  s += "layout(std430, binding = 1) writeonly buffer O { " + std::string(kernels::storage_type(out.dtype)) +
       " out_[]; };\n";
  s += index_glsl(ids.dtype, 0, 2, 2);
  s += "void main() {\n  uint n = P(0), classes = P(1);\n  ";
  s += kernels::kLoop;
  s += " {\n"
       "    uint cls = i % classes, row = i / classes, rem = row; int io = 0;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      io += int(c) * PI(" + IS + " + d);\n"
       "    }\n"
       "    uint lo, hi;\n"
       "    read_index(P(3) + uint(io), lo, hi);\n"
       "    bool ok = index_ok(lo, hi, classes);\n"
       "    if (!ok && cls == 0u) report(row, lo, hi);\n"
       "    out_[P(4) + i] = ok && lo == cls ? " + kernels::constant_expr(out.dtype, "P(5)", "P(6)") + " : " +
       kernels::constant_expr(out.dtype, "0u", "0u") + ";\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

const bool registered = [] {
  template_ops().add(OpId::Gather, kAllDTypes, TemplateOp{gather_unsupported, gather_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::IndexSelect, kAllDTypes, TemplateOp{index_select_unsupported, index_select_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::ScatterAdd, kFloatDTypes | kIntDType, TemplateOp{scatter_add_unsupported, scatter_add_launch}, "f64 where the device has shaderFloat64; not u8/bool");
  template_ops().add(OpId::OneHot, kIntDType, TemplateOp{one_hot_unsupported, one_hot_launch});
  return true;
}();

}  // namespace
}  // namespace alk::vk
