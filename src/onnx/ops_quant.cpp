// Quantized ops (uint8, the 8-bit type alk has; int8 tensors are refused when the model is read):
// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
// QLinearMatMul, QLinearConv, and com.microsoft's QLinearAdd and QLinearMul, as compositions of
// table ops.
//
// Exactness: the integer products (MatMulInteger, ConvInteger and the accumulators of the QLinear
// ops) run through the float GEMM and convolution kernels on zero-point-shifted values, which
// are integers in [-255, 255]. Every partial sum of k such products is an integer below
// k * 255^2, exact in f32 while that fits its 24-bit significand (k <= 258) and in f64 beyond,
// so the result equals the int32 sum onnxruntime computes. Rounding to the quantized grid is
// round-half-to-even (alk's round), as onnxruntime's std::nearbyint, then saturation.
#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// The float type in which sums of k products of values in [-255, 255] are exact (see above).
DType exact_sum_dtype(int64_t k) { return k <= (int64_t{1} << 24) / (255 * 255) ? DType::F32 : DType::F64; }

void require_u8(const Ctx& c, size_t k, const char* what) {
  if (c.x(k).dtype() != DType::U8)
    c.fail_with(what, " (input ", k, ") must be uint8, got ", dtype_name(c.x(k).dtype()));
}

// A zero point (input k, optional: 0 when omitted) as a value of dtype t.
Tensor zero_point(const Ctx& c, size_t k, DType t) {
  if (!c.has(k)) return full({}, 0.0, t);
  require_u8(c, k, "the zero point");
  return c.x(k).to(t);
}

// A scale or zero point of QuantizeLinear/DequantizeLinear shaped to broadcast over x: a scalar
// (per tensor), 1-D along `axis` (per axis, opset 13), or of x's rank with x's dims except
// along `axis`, where each value covers block_size elements (blocked, opset 21).
Tensor along_axis(const Ctx& c, const Tensor& q, const Tensor& x, int64_t axis, int64_t block_size) {
  if (q.numel() == 1 && block_size == 0) return q.reshape({});
  const int64_t rank = x.dim();
  axis = c.axis(axis, rank);
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  if (block_size > 0) {
    bool fits = q.dim() == rank && q.shape()[static_cast<size_t>(axis)] == (n + block_size - 1) / block_size;
    for (int64_t d = 0; d < rank && fits; ++d)
      fits = d == axis || q.shape()[static_cast<size_t>(d)] == x.shape()[static_cast<size_t>(d)];
    if (!fits)
      c.fail_with("blocked scale/zero point ", to_string(q.shape()), " does not fit input ", to_string(x.shape()),
                  " with block_size ", block_size, " along axis ", axis);
    const Tensor which = floor(arange(0.0, static_cast<double>(n), 1.0, DType::F64) / static_cast<double>(block_size));
    return index_select(q, axis, which.to(DType::I64));
  }
  if (!(q.dim() == 1 && q.shape()[0] == n))
    c.fail_with("scale/zero point ", to_string(q.shape()), " is neither one value nor one per element of axis ", axis,
                " of input ", to_string(x.shape()));
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(axis)] = n;
  return q.reshape(s);
}

// round-half-to-even(v) + zp saturated to uint8's range, as uint8.
Tensor saturate_u8(const Tensor& v, const Tensor& zp) {
  return clamp(round(v) + zp, 0.0, 255.0).to(DType::U8);
}

// QuantizeLinear(x, y_scale, y_zero_point?): saturate(round(x / y_scale) + y_zero_point).
Outs op_quantize_linear(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(is_float(x) || x.dtype() == DType::I32, "x must be float or int32, got ", dtype_name(x.dtype()));
  c.require(c.i("saturate", 1) == 1, "saturate=0 applies to float8 outputs only");
  const int64_t axis = c.i("axis", 1), block = c.i("block_size", 0);
  c.require(block >= 0, "block_size ", block, " is negative");
  if (c.has(2)) require_u8(c, 2, "y_zero_point");
  const Tensor scale = along_axis(c, c.x(1), x, axis, block);
  c.require(is_float(scale), "y_scale must be floating-point, got ", dtype_name(scale.dtype()));
  const Tensor zp = c.has(2) ? along_axis(c, c.x(2), x, axis, block).to(DType::F32) : full({}, 0.0, DType::F32);
  return {saturate_u8((x.to(scale.dtype()) / scale).to(DType::F32), zp)};
}

// DequantizeLinear(x, x_scale, x_zero_point?): (x - x_zero_point) * x_scale, in x_scale's type.
Outs op_dequantize_linear(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dtype() == DType::U8 || x.dtype() == DType::I32, "x must be uint8 or int32, got ", dtype_name(x.dtype()));
  const int64_t axis = c.i("axis", 1), block = c.i("block_size", 0);
  c.require(block >= 0, "block_size ", block, " is negative");
  const Tensor scale = along_axis(c, c.x(1), x, axis, block);
  c.require(is_float(scale), "x_scale must be floating-point, got ", dtype_name(scale.dtype()));
  Tensor shifted = x.to(DType::I64);
  if (c.has(2)) {
    c.require(c.x(2).dtype() == x.dtype(), "x_zero_point's type ", dtype_name(c.x(2).dtype()), " is not x's ",
              dtype_name(x.dtype()));
    shifted = shifted - along_axis(c, c.x(2), x, axis, block).to(DType::I64);
  }
  return {shifted.to(scale.dtype()) * scale};
}

// DynamicQuantizeLinear(x): uint8 y, its scale and zero point, from x's range widened to hold 0.
Outs op_dynamic_quantize_linear(Ctx& c) {
  const Tensor& x = c.x(0);
  c.require(x.dtype() == DType::F32, "x must be float32, got ", dtype_name(x.dtype()));
  c.require(x.numel() > 0, "x is empty (its range is undefined)");
  const Tensor lo = minimum(min(x), 0.0), hi = maximum(max(x), 0.0);
  const Tensor scale = (hi - lo) / 255.0;
  // An all-zero x has scale 0: it quantizes to zeros with zero point 0 (dividing by 1, not 0/0).
  const Tensor divisor = where(eq(scale, 0.0), full({}, 1.0, DType::F32), scale);
  const Tensor zp = clamp(round(0.0 - lo / divisor), 0.0, 255.0);
  return {saturate_u8(x / divisor, zp), scale, zp.to(DType::U8)};
}

// (a - a_zero_point) @ (b - b_zero_point) exactly, as float of exact_sum_dtype: a [..., M, K]
// and b [..., K, N] uint8; a's zero point one value or one per row (M), b's one or one per
// column (N).
Tensor integer_matmul(Ctx& c, size_t ka, size_t kb, size_t kazp, size_t kbzp) {
  require_u8(c, ka, "A");
  require_u8(c, kb, "B");
  const Tensor &a = c.x(ka), &b = c.x(kb);
  c.require(a.dim() >= 1 && b.dim() >= 1, "A and B must have rank 1 or more");
  const int64_t K = a.shape().back();
  const DType t = exact_sum_dtype(K);
  Tensor azp = zero_point(c, kazp, t), bzp = zero_point(c, kbzp, t);
  if (azp.numel() > 1) {
    if (!(azp.dim() == 1 && a.dim() >= 2 && azp.shape()[0] == a.shape()[a.shape().size() - 2]))
      c.fail_with("A's zero point ", to_string(azp.shape()), " is neither one value nor one per row of A ",
                  to_string(a.shape()));
    azp = azp.reshape({azp.shape()[0], 1});
  } else {
    azp = azp.reshape({});
  }
  if (bzp.numel() > 1) {
    if (!(bzp.dim() == 1 && b.dim() >= 2 && bzp.shape()[0] == b.shape().back()))
      c.fail_with("B's zero point ", to_string(bzp.shape()), " is neither one value nor one per column of B ",
                  to_string(b.shape()));
  } else {
    bzp = bzp.reshape({});
  }
  return matmul(a.to(t) - azp, b.to(t) - bzp, c.loc);
}

// conv(x - x_zero_point, w - w_zero_point) exactly, as float of exact_sum_dtype (Conv's
// attributes; w's zero point one value or one per output channel). Padding adds zeros to the
// shifted x, which is padding x with its zero point, as the spec says.
Tensor integer_conv(Ctx& c, size_t kx, size_t kw, size_t kxzp, size_t kwzp) {
  require_u8(c, kx, "X");
  require_u8(c, kw, "W");
  const Tensor &x = c.x(kx), &w = c.x(kw);
  c.require(w.dim() >= 3, "W must have rank 3 or more, got ", to_string(w.shape()));
  int64_t K = 1;
  for (size_t d = 1; d < w.shape().size(); ++d) K *= w.shape()[d];
  const DType t = exact_sum_dtype(K);
  const Tensor xzp = zero_point(c, kxzp, t);
  if (xzp.numel() != 1) c.fail_with("x_zero_point must be one value, got ", to_string(xzp.shape()));
  Tensor wzp = zero_point(c, kwzp, t);
  if (wzp.numel() > 1) {
    if (!(wzp.dim() == 1 && wzp.shape()[0] == w.shape()[0]))
      c.fail_with("w_zero_point ", to_string(wzp.shape()), " is neither one value nor one per output channel of W ",
                  to_string(w.shape()));
    Shape s(w.shape().size(), 1);
    s[0] = w.shape()[0];
    wzp = wzp.reshape(s);
  } else {
    wzp = wzp.reshape({});
  }
  Ctx conv{c.node, c.opset, {x.to(t) - xzp.reshape({}), w.to(t) - wzp}, c.loc};
  return op_conv(conv)[0];
}

Outs op_matmul_integer(Ctx& c) { return {integer_matmul(c, 0, 1, 2, 3).to(DType::I32)}; }

Outs op_conv_integer(Ctx& c) { return {integer_conv(c, 0, 1, 2, 3).to(DType::I32)}; }

// A QLinear op's scale (input k): one float32 value, or (per_axis_len > 0) one per element of
// the axis that broadcast_shape puts it on.
Tensor qlinear_scale(const Ctx& c, size_t k, int64_t per_axis_len, const Shape& broadcast_shape) {
  const Tensor& s = c.x(k);
  c.require(s.dtype() == DType::F32, "scale (input ", k, ") must be float32, got ", dtype_name(s.dtype()));
  if (s.numel() == 1) return s.reshape({});
  if (!(per_axis_len > 0 && s.dim() == 1 && s.shape()[0] == per_axis_len))
    c.fail_with("scale (input ", k, ") ", to_string(s.shape()), " must be one value",
                per_axis_len > 0 ? " or one per output channel" : "");
  return s.reshape(broadcast_shape);
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the int32 product scaled
// by a_scale * b_scale / y_scale, rounded and saturated onto y's grid.
Outs op_qlinear_matmul(Ctx& c) {
  const Tensor acc = integer_matmul(c, 0, 3, 2, 5).to(DType::I32).to(DType::F32);
  const Tensor &a = c.x(0), &b = c.x(3);
  const int64_t M = a.dim() >= 2 ? a.shape()[a.shape().size() - 2] : 0, N = b.dim() >= 2 ? b.shape().back() : 0;
  const Tensor multiplier = qlinear_scale(c, 1, M, {M, 1}) * qlinear_scale(c, 4, N, {N}) / qlinear_scale(c, 6, 0, {});
  require_u8(c, 7, "y_zero_point");
  return {saturate_u8(acc * multiplier, c.x(7).reshape({}).to(DType::F32))};
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?): as QLinearMatMul over a
// convolution, with the int32 bias B added to the accumulator; w's scale may be per channel.
Outs op_qlinear_conv(Ctx& c) {
  Tensor acc = integer_conv(c, 0, 3, 2, 5).to(DType::I32);
  const int64_t M = c.x(3).shape()[0];
  Shape per_channel(static_cast<size_t>(acc.dim()), 1);
  per_channel[1] = M;
  if (c.has(8)) {
    const Tensor& bias = c.x(8);
    if (!(bias.dtype() == DType::I32 && bias.dim() == 1 && bias.shape()[0] == M))
      c.fail_with("B must be int32 of shape [", M, "], got ", dtype_name(bias.dtype()), " ", to_string(bias.shape()));
    acc = acc + bias.reshape(per_channel);
  }
  const Tensor multiplier =
      qlinear_scale(c, 1, 0, {}) * qlinear_scale(c, 4, M, per_channel) / qlinear_scale(c, 6, 0, {});
  require_u8(c, 7, "y_zero_point");
  return {saturate_u8(acc.to(DType::F32) * multiplier, c.x(7).reshape({}).to(DType::F32))};
}

// com.microsoft's QLinearAdd and QLinearMul (A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale,
// C_zp?): the dequantized sum or product requantized onto C's grid, computed in f32 as
// onnxruntime's kernels do (a sum of the two scaled terms; a product times one multiplier).
Handler qlinear_binary(bool mul) {
  return [mul](Ctx& c) {
    require_u8(c, 0, "A");
    require_u8(c, 3, "B");
    const Tensor a = c.x(0).to(DType::F32) - zero_point(c, 2, DType::F32).reshape({});
    const Tensor b = c.x(3).to(DType::F32) - zero_point(c, 5, DType::F32).reshape({});
    const Tensor as = qlinear_scale(c, 1, 0, {}), bs = qlinear_scale(c, 4, 0, {}), cs = qlinear_scale(c, 6, 0, {});
    const Tensor value = mul ? a * b * (as * bs / cs) : a * (as / cs) + b * (bs / cs);
    return Outs{saturate_u8(value, zero_point(c, 7, DType::F32).reshape({}))};
  };
}

}  // namespace

void add_quant_ops(HandlerTable& h) {
  h["com.microsoft:QLinearAdd"] = qlinear_binary(false);
  h["com.microsoft:QLinearMul"] = qlinear_binary(true);
  h["QuantizeLinear"] = op_quantize_linear;
  h["DequantizeLinear"] = op_dequantize_linear;
  h["DynamicQuantizeLinear"] = op_dynamic_quantize_linear;
  h["MatMulInteger"] = op_matmul_integer;
  h["ConvInteger"] = op_conv_integer;
  h["QLinearMatMul"] = op_qlinear_matmul;
  h["QLinearConv"] = op_qlinear_conv;
}

}  // namespace alk::onnx
