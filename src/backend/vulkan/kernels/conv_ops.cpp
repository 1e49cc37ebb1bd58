// unfold (im2col) and fold (col2im, its adjoint) on Vulkan, the sliding-window halves of
// conv2d (src/ops/conv.cpp: conv = unfold then a matmul; its input gradient = a matmul
// then fold).
//
// unfold copies element bits (any dtype; the pad value converted on the host as the CPU
// converts it). fold sums overlapping windows: each invocation owns one output pixel and
// adds its taps in (ki, kj) order starting from 0, the order the CPU's plane sums use, so
// results are bit-identical (the adds are `precise`: never reassociated; f16/bf16 sum in
// float and round once, as the CPU's float planes do).
#include <algorithm>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

using kernels::Launch;

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

std::string conv_reason(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 1 || k.inputs[0].shape.size() != 4 - (k.op == OpId::Fold ? 1 : 0) ||
      k.output.shape.size() != 3 + (k.op == OpId::Fold ? 1 : 0))
    return "unexpected shapes";
  if (k.inputs[0].dtype != k.output.dtype) return "between dtypes";
  if (!kernels::is_contiguous(k.output)) return "a non-contiguous output";
  return "";
}

std::string unfold_unsupported(const Context& ctx, const Kernel& k) { return conv_reason(ctx, k); }

void unfold_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const ViewArg x = view_arg(k.inputs[0]), out = view_arg(k.output);
  const int64_t C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t OH = out_size(H, p.kh, p.sh, p.ph, p.dh), OW = out_size(W, p.kw, p.sw, p.pw, p.dw);
  const int64_t n = numel(out.shape);
  if (n == 0 || OH <= 0 || OW <= 0) return;
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), of = l.bind(out, true);
  const auto pad = kernels::constant_bits(x.dtype, p.pad_value);
  l.u(static_cast<uint64_t>(n)), l.u(xf), l.u(of), l.u(pad.first), l.u(pad.second);
  for (int64_t v : {C, H, W, p.kh, p.kw, p.sh, p.sw}) l.u(static_cast<uint64_t>(v));
  for (int64_t v : {p.ph, p.pw, p.dh, p.dw}) l.i(v);
  l.u(static_cast<uint64_t>(OW)), l.u(static_cast<uint64_t>(OH * OW));
  for (int64_t s : x.strides) l.i(s);
  const std::string T = kernels::storage_type(x.dtype);
  std::string s = "#version 450\n" + kernels::storage_extensions(x.dtype) + l.preamble();
  // Integer division has no SIMD instruction on x86: a CPU implementation (lavapipe) runs
  // each lane's divide alone, ~10 per element here. A double divide is SIMD and exact for
  // 32-bit operands (the quotient's distance to the next integer, >= 1/b, is far above
  // double's rounding), so there the quotients come from it.
  if (ctx.info().kind == DeviceInfo::Kind::Cpu && ctx.info().float64)
    s += "uint DIV(uint a, uint b) { return uint(double(a) / double(b)); }\n";
  else
    s += "uint DIV(uint a, uint b) { return a / b; }\n";
  s += "layout(std430, binding = 0) readonly buffer X { " + T + " x_[]; };\n";
  s += "layout(std430, binding = 1) writeonly buffer O { " + T + " out_[]; };\n";
  s += "void main() {\n"
       "  uint n = P(0), C = P(5), H = P(6), W = P(7), kh = P(8), kw = P(9), sh = P(10), sw = P(11);\n"
       "  int ph = PI(12), pw = PI(13), dh = PI(14), dw = PI(15);\n"
       "  uint OW = P(16), L = P(17), K = kh * kw;\n  " +
       std::string(kernels::kLoop) +
       " {\n"
       "    uint il = DIV(i, L), l = i - il * L, b = DIV(il, C * K), row = il - b * (C * K);\n"
       "    uint c = DIV(row, K), rk = row - c * K, ki = DIV(rk, kw), kj = rk - ki * kw;\n"
       "    uint ly = DIV(l, OW), lx = l - ly * OW;\n"
       "    int iy = int(ly * sh) - ph + int(ki) * dh, ix = int(lx * sw) - pw + int(kj) * dw;\n"
       "    bool inside = iy >= 0 && iy < int(H) && ix >= 0 && ix < int(W);\n"
       "    int xo = int(b) * PI(18) + int(c) * PI(19) + iy * PI(20) + ix * PI(21);\n"
       "    out_[P(2) + i] = inside ? x_[P(1) + uint(xo)] : " + kernels::constant_expr(x.dtype, "P(3)", "P(4)") +
       ";\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

std::string fold_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = conv_reason(ctx, k); !why.empty()) return why;
  const DType t = k.output.dtype;
  if (!is_floating(t)) return "fold of " + std::string(dtype_name(t)) + " (floating dtypes only)";
  if (t == DType::F64 && !ctx.info().float64) return ctx.info().name + " has no shaderFloat64";
  return "";
}

void fold_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const ViewArg cols = view_arg(k.inputs[0]), out = view_arg(k.output);
  const int64_t C = out.shape[1], H = out.shape[2], W = out.shape[3];
  const int64_t OH = std::max<int64_t>(0, out_size(H, p.kh, p.sh, p.ph, p.dh));
  const int64_t OW = std::max<int64_t>(0, out_size(W, p.kw, p.sw, p.pw, p.dw));
  const int64_t n = numel(out.shape);
  if (n == 0) return;
  Launch l(ctx);
  const uint32_t cf = l.bind(cols, false), of = l.bind(out, true);
  l.u(static_cast<uint64_t>(n)), l.u(cf), l.u(of);
  for (int64_t v : {C, H, W, p.kh, p.kw, p.sh, p.sw}) l.u(static_cast<uint64_t>(v));
  for (int64_t v : {p.ph, p.pw, p.dh, p.dw}) l.i(v);
  l.u(static_cast<uint64_t>(OH)), l.u(static_cast<uint64_t>(OW));
  for (int64_t s : cols.strides) l.i(s);
  const DType t = out.dtype;
  const std::string T = t == DType::F64 ? "double" : t == DType::F32 ? "float" : kernels::storage_type(t);
  // f16/bf16 sum in float and round once at the end, as the CPU's float planes do.
  std::string s = "#version 450\n" + kernels::storage_extensions(t) + l.preamble() + kernels::arithmetic_glsl(t);
  s += "layout(std430, binding = 0) readonly buffer X { " + T + " cols_[]; };\n";
  s += "layout(std430, binding = 1) writeonly buffer O { " + T + " out_[]; };\n";
  s += "void main() {\n"
       "  uint n = P(0), C = P(3), H = P(4), W = P(5), kh = P(6), kw = P(7);\n"
       "  int sh = int(P(8)), sw = int(P(9)), ph = PI(10), pw = PI(11), dh = PI(12), dw = PI(13);\n"
       "  int OH = int(P(14)), OW = int(P(15));\n  " +
       std::string(kernels::kLoop) +
       " {\n"
       "    int x = int(i % W), y = int((i / W) % H); uint c = (i / (W * H)) % C, b = i / (W * H * C);\n"
       "    precise ACC acc = ACC(0);\n"
       "    for (uint ki = 0u; ki < kh; ++ki) {\n"
       "      int ty = y + ph - int(ki) * dh;  // = oy * sh for the window row that covers y\n"
       "      if (ty < 0 || ty % sh != 0 || ty / sh >= OH) continue;\n"
       "      for (uint kj = 0u; kj < kw; ++kj) {\n"
       "        int tx = x + pw - int(kj) * dw;\n"
       "        if (tx < 0 || tx % sw != 0 || tx / sw >= OW) continue;\n"
       "        int at = int(b) * PI(16) + int(c * kh * kw + ki * kw + kj) * PI(17) + (ty / sh * OW + tx / sw) * PI(18);\n"
       "        acc = acc + LOAD(cols_[P(1) + uint(at)]);\n"
       "      }\n"
       "    }\n"
       "    out_[P(2) + i] = STORE(acc);\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

const bool registered = [] {
  template_ops().add(OpId::Unfold, kAllDTypes, TemplateOp{unfold_unsupported, unfold_launch}, "f64 where the device has shaderFloat64");
  template_ops().add(OpId::Fold, kFloatDTypes, TemplateOp{fold_unsupported, fold_launch}, "f64 where the device has shaderFloat64");
  return true;
}();

}  // namespace
}  // namespace alk::vk
