// Template ops that move elements by position on Vulkan: tril/triu (Tri), pad, concat,
// slice_scatter. They copy raw element bits (storage_type: 1, 2, 4 or 8 bytes), so one
// shader per element size serves every dtype and the results equal the CPU's bytes; the
// constants they write (a pad value, zeros) are converted on the host by the CPU's own
// conversion. Inputs and the output share a dtype (the op layer casts before).
#include <algorithm>
#include <limits>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

using kernels::Launch;

std::string header(DType dtype, size_t rank) {
  return "#version 450\n" + kernels::storage_extensions(dtype) + "#define R " + std::to_string(rank) + "\n";
}

std::string buffers(DType dtype, bool has_input) {
  const std::string T = kernels::storage_type(dtype);
  std::string s;
  if (has_input) s += "layout(std430, binding = 0) readonly buffer X { " + T + " x_[]; };\n";
  s += "layout(std430, binding = " + std::string(has_input ? "1" : "0") + ") writeonly buffer O { " + T +
       " out_[]; };\n";
  return s;
}

std::string same_dtype_reason(const Context& ctx, const Kernel& k, size_t inputs) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (inputs != SIZE_MAX && k.inputs.size() != inputs) return "wrong number of inputs";
  for (const KernelArg& a : k.inputs)
    if (a.dtype != k.output.dtype) return "an input's dtype differs from the output's";
  if (!kernels::is_contiguous(k.output)) return "a non-contiguous output";
  return "";
}

// out[first + i] = bits, i < n (contiguous).
void fill(Context& ctx, Encoder& enc, const ViewArg& out, std::pair<uint32_t, uint32_t> bits) {
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  Launch l(ctx);
  const uint32_t of = l.bind(out, true);
  l.u(static_cast<uint64_t>(n)), l.u(of), l.u(bits.first), l.u(bits.second);
  std::string s = header(out.dtype, 0) + l.preamble() + buffers(out.dtype, false);
  s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) + " out_[P(1) + i] = " +
       kernels::constant_expr(out.dtype, "P(2)", "P(3)") + ";\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// out[dst_first + sum c_d * dst_strides[d]] = x[c] over x's shape: `out` is bound whole,
// dst_first counts from out's element 0.
void scatter_copy(Context& ctx, Encoder& enc, const ViewArg& x, const ViewArg& out, int64_t dst_first,
                  const std::vector<int64_t>& dst_strides) {
  const int64_t n = numel(x.shape);
  if (n == 0) return;
  const size_t R = x.shape.size();
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), of = l.bind(out, true);
  l.u(static_cast<uint64_t>(n)), l.u(xf), l.u(of + static_cast<uint64_t>(dst_first));
  for (int64_t s : x.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.strides) l.i(s);
  for (int64_t s : dst_strides) l.i(s);
  const std::string SH = "3", XS = std::to_string(3 + R), OS = std::to_string(3 + 2 * R);
  std::string s = header(x.dtype, R) + l.preamble() + buffers(x.dtype, true);
  s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) +
       " {\n"
       "    uint rem = i; int xo = 0, oo = 0;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      xo += int(c) * PI(" + XS + " + d); oo += int(c) * PI(" + OS + " + d);\n"
       "    }\n"
       "    out_[P(2) + uint(oo)] = x_[P(1) + uint(xo)];\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- tri: keep x[.., i, j] where j - i <= k (tril) or >= k (triu), zeros elsewhere ----
std::string tri_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = same_dtype_reason(ctx, k, 1); !why.empty()) return why;
  return k.output.shape.size() < 2 ? "tri of rank < 2" : "";
}

void tri_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<TriParams>(k.node.params);
  const ViewArg x = view_arg(k.inputs[0]), out = view_arg(k.output);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const size_t R = x.shape.size();
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), of = l.bind(out, true);
  // Any k beyond the matrix keeps all or nothing, as a clamped one does.
  const int64_t big = std::numeric_limits<int32_t>::max() / 2;
  l.u(static_cast<uint64_t>(n)), l.u(xf), l.u(of), l.i(std::clamp<int64_t>(p.k, -big, big)), l.u(p.upper ? 1 : 0);
  for (int64_t s : x.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.strides) l.i(s);
  const std::string SH = "5", XS = std::to_string(5 + R);
  std::string s = header(x.dtype, R) + l.preamble() + buffers(x.dtype, true);
  s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) +
       " {\n"
       "    uint rem = i; int xo = 0, row = 0, col = 0;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      xo += int(c) * PI(" + XS + " + d);\n"
       "      if (d == R - 1) col = int(c); else if (d == R - 2) row = int(c);\n"
       "    }\n"
       "    int diff = col - row;\n"
       "    bool keep = P(4) != 0u ? diff >= PI(3) : diff <= PI(3);\n"
       "    out_[P(2) + i] = keep ? x_[P(1) + uint(xo)] : " + kernels::constant_expr(x.dtype, "0u", "0u") + ";\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- pad: out[c] = x[c - before] inside x, else the value (negative pads crop) ----
std::string pad_unsupported(const Context& ctx, const Kernel& k) { return same_dtype_reason(ctx, k, 1); }

void pad_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<PadParams>(k.node.params);
  const ViewArg x = view_arg(k.inputs[0]), out = view_arg(k.output);
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  const size_t R = x.shape.size();
  if (p.pads.size() != 2 * R) fail("pad: " + std::to_string(p.pads.size()) + " pads for rank " + std::to_string(R));
  if (numel(x.shape) == 0) return fill(ctx, enc, out, kernels::constant_bits(out.dtype, p.value));
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), of = l.bind(out, true);
  const auto bits = kernels::constant_bits(out.dtype, p.value);
  l.u(static_cast<uint64_t>(n)), l.u(xf), l.u(of), l.u(bits.first), l.u(bits.second);
  for (int64_t s : out.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.shape) l.u(static_cast<uint64_t>(s));
  for (int64_t s : x.strides) l.i(s);
  for (size_t d = 0; d < R; ++d) l.i(p.pads[2 * d]);
  const std::string SH = "5", XSH = std::to_string(5 + R), XS = std::to_string(5 + 2 * R),
                    BF = std::to_string(5 + 3 * R);
  std::string s = header(x.dtype, R) + l.preamble() + buffers(x.dtype, true);
  s += "void main() {\n  uint n = P(0);\n  " + std::string(kernels::kLoop) +
       " {\n"
       "    uint rem = i; int xo = 0; bool inside = true;\n"
       "    for (int d = R - 1; d >= 0; --d) {\n"
       "      uint c = rem % P(" + SH + " + d); rem /= P(" + SH + " + d);\n"
       "      int at = int(c) - PI(" + BF + " + d);\n"
       "      inside = inside && at >= 0 && at < PI(" + XSH + " + d);\n"
       "      xo += at * PI(" + XS + " + d);\n"
       "    }\n"
       "    out_[P(2) + i] = inside ? x_[P(1) + uint(xo)] : " + kernels::constant_expr(x.dtype, "P(3)", "P(4)") +
       ";\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- concat: each input copied into its slab of out along dim (one dispatch each, so
// any number of inputs fits the binding limit) ----
std::string concat_unsupported(const Context& ctx, const Kernel& k) {
  if (k.inputs.empty()) return "concat of nothing";
  return same_dtype_reason(ctx, k, SIZE_MAX);
}

void concat_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const ViewArg out = view_arg(k.output);
  const std::vector<int64_t> os = contiguous_strides(out.shape);
  int64_t at = 0;
  for (const KernelArg& a : k.inputs) {
    const ViewArg x = view_arg(a);
    scatter_copy(ctx, enc, x, out, at * os[static_cast<size_t>(dim)], os);
    at += x.shape[static_cast<size_t>(dim)];
  }
}

// ---- slice_scatter: zeros, then g into out[.., start + j * step, ..] ----
std::string slice_scatter_unsupported(const Context& ctx, const Kernel& k) { return same_dtype_reason(ctx, k, 1); }

void slice_scatter_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<SliceScatterParams>(k.node.params);
  const ViewArg g = view_arg(k.inputs[0]), out = view_arg(k.output);
  fill(ctx, enc, out, {0u, 0u});
  std::vector<int64_t> os = contiguous_strides(out.shape);
  const int64_t first = p.start * os[static_cast<size_t>(p.dim)];
  os[static_cast<size_t>(p.dim)] *= p.step;
  scatter_copy(ctx, enc, g, out, first, os);  // ordered after the fill by the stream's hazard tracking
}

const bool registered = [] {
  template_ops().add(OpId::Tri, kAllDTypes, TemplateOp{tri_unsupported, tri_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::Pad, kAllDTypes, TemplateOp{pad_unsupported, pad_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::Concat, kAllDTypes, TemplateOp{concat_unsupported, concat_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::SliceScatter, kAllDTypes, TemplateOp{slice_scatter_unsupported, slice_scatter_launch}, "f64 where the device has shaderFloat64");
  return true;
}();

}  // namespace
}  // namespace alk::vk
