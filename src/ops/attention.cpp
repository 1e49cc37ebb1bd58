// Fused attention: softmax(q k^T * scale [+ causal mask]) v as one template op.
// The forward node packs the output and each query row's logsumexp ([B, T, D + 1]), so
// the backward node recomputes the probabilities tile by tile from it (FlashAttention-2
// style) and no T x S matrix is ever stored. Both kernels live in
// src/backend/<name>/kernels_attention.cpp. Grouped-query attention and rotary positions
// (the LLaMA family) are compositions over it here.
#include <cmath>

#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "q " + to_string(q.shape()) + ", k " + to_string(k.shape()) + ", v " + to_string(v.shape());
}


// `qkv`, when given, is the [B, T, 3, H, D] tensor that q0, k0 and v0 are the
// `select(2, i).transpose(1, 2)` views of (scaled_dot_product_attention_qkv): the inputs
// are cast as one, and the gradient comes back as one permuted view of the backward's
// [3, B*H, T, D] result instead of three pieces that the selects' gradients would put
// back together (a masked sum reading all three for every element).
Tensor attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, bool causal, double scale, const Tensor* qkv,
                 Loc loc) {
  check_defined(q0, kOp, loc);
  check_defined(k0, kOp, loc);
  check_defined(v0, kOp, loc);
  check(q0.dim() >= 2 && k0.dim() >= 2 && v0.dim() >= 2, kOp, loc,
        "q, k and v need rank >= 2 ([..., T, D] and [..., S, D]); got ", shapes_of(q0, k0, v0));
  check(q0.dim() == k0.dim() && q0.dim() == v0.dim(), kOp, loc, "q, k and v must have the same rank; got ",
        shapes_of(q0, k0, v0));
  const int64_t r = q0.dim();
  const Shape lead(q0.shape().begin(), q0.shape().end() - 2);
  check(Shape(k0.shape().begin(), k0.shape().end() - 2) == lead &&
            Shape(v0.shape().begin(), v0.shape().end() - 2) == lead,
        kOp, loc,
        "batch dims (all but the last two) of q, k and v must be equal (or, grouped-query, dim -3 of q a "
        "multiple of k's and v's); got ",
        shapes_of(q0, k0, v0));
  const int64_t T = q0.shape()[r - 2], D = q0.shape()[r - 1];
  const int64_t S = k0.shape()[r - 2];
  check(k0.shape()[r - 1] == D, kOp, loc, "q and k must have the same last dim (head size); got ",
        shapes_of(q0, k0, v0));
  check(v0.shape()[r - 2] == S, kOp, loc, "k and v must have the same number of keys (dim -2); got ",
        shapes_of(q0, k0, v0));
  check(v0.shape()[r - 1] == D, kOp, loc, "v must have the same last dim as q and k; got ", shapes_of(q0, k0, v0));
  check(std::isfinite(scale), kOp, loc, "scale must be finite, got ", scale);
  if (scale < 0) scale = D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;

  DType t = to_floating(promote(promote(q0.dtype(), k0.dtype()), v0.dtype()));
  // Under autocast the node is f32: the packed output carries each row's logsumexp, which
  // the backward needs to more than bf16's 8 bits. The products themselves may run in bf16
  // (reduced_precision), as PyTorch's autocast runs attention on half inputs.
  const bool reduced_precision = autocast_dtype() && t != DType::F64;
  int64_t B = 1;
  for (int64_t s : lead) B *= s;
  // Where the device's kernels read 16-bit q, k, v and output gradient themselves (feature
  // "attention_16bit": CUDA's tensor-core kernels, head dims a multiple of 16 up to 128),
  // autocast keeps those operands 16-bit and the gradients come back 16-bit, as PyTorch's
  // flash attention does: no widened copies of q, k, v, dout or dq/dk/dv are written. The
  // packed output stays f32 either way.
  const bool half_operands = reduced_precision && (t == DType::BF16 || t == DType::F16) && D % 16 == 0 && D >= 16 &&
                             D <= 128 && B <= 65535 && fused_kernel_on(q0, "attention_16bit");
  if (autocast_dtype() && (t == DType::BF16 || t == DType::F16)) t = DType::F32;
  const DType operand_t = half_operands ? to_floating(promote(promote(q0.dtype(), k0.dtype()), v0.dtype())) : t;
  // The kernels read q, k and v through their strides, batch dims included (a [B, H, T, D]
  // view of a fused qkv projection is read in place, not copied); a rank-2 input gets a
  // batch dim of 1, the output's batch dims are flattened.
  auto operand = [&](const Tensor& x) {
    return r == 2 ? cast(x, operand_t, loc).unsqueeze(0, loc) : cast(x, operand_t, loc);
  };
  Tensor q, k, v, qkv_operand;
  if (qkv) {
    qkv_operand = cast(*qkv, operand_t, loc);
    auto part = [&](int64_t i) { return qkv_operand.select(2, i, loc).transpose(1, 2, loc); };
    q = part(0), k = part(1), v = part(2);
  } else {
    q = operand(q0), k = operand(k0), v = operand(v0);
  }

  Shape osh = lead;
  osh.insert(osh.end(), {T, D});
  // With 16-bit operands the node is 16-bit too, the logsumexps kept apart in f32
  // (AttentionParams::out_heads): the output is what PyTorch's flash attention returns, and
  // for q [b, H, T, D] its rows are stored [b, T, H, D], so that `y.transpose(1, 2)` is
  // the contiguous [b, T, C] the output projection reads in place. Otherwise the rows are
  // packed with their logsumexp in the node's (f32 under autocast) dtype.
  const int64_t out_heads = half_operands ? (r == 4 ? lead[1] : 1) : 0;
  const AttentionParams params{causal, scale, reduced_precision, out_heads};
  Tensor packed, out;
  if (out_heads) {
    packed = make_node(OpId::Attention, {B * T * (D + 2)}, operand_t, {alias(q), alias(k), alias(v)}, params, loc);
    Shape strides(osh.size());
    int64_t stride = 1;
    for (size_t i = osh.size(); i-- > 0;) strides[i] = stride, stride *= osh[i];
    if (r == 4) strides = {T * out_heads * D, D, out_heads * D, 1};
    out = make_view(packed, osh, strides, 0);
  } else {
    packed = make_node(OpId::Attention, {B, T, D + 1}, t, {alias(q), alias(k), alias(v)}, params, loc);
    out = make_view(packed, {B, T, D}, {T * (D + 1), D + 1, 1}, 0);
  }
  const bool grad = qkv ? needs_grad({&qkv_operand}) : needs_grad({&q, &k, &v});
  if (grad) {
    Tensor sq = alias(q), sk = alias(k), sv = alias(v), sfwd = alias(packed);
    const Shape qkv_shape = qkv ? qkv->shape() : Shape{};
    auto backward = [sq, sk, sv, sfwd, params, B, T, S, D, operand_t, qkv_shape, loc](const Tensor& g0) {
      // The 16-bit kernels read the output gradient through its strides (the view of the
      // projection's [b, T, C] gradient); the others want its rows contiguous.
      Tensor g = cast(g0, operand_t, loc);
      if (!params.out_heads) g = g.contiguous(loc);
      const int64_t M = std::max(T, S);
      // With 16-bit kernels, the packed projection's gradient is written in its own layout
      // (AttentionParams::grads_qkv): no copy puts the three pieces together.
      AttentionParams bparams = params;
      bparams.grads_qkv = params.out_heads && !qkv_shape.empty();
      const Shape grads_shape = bparams.grads_qkv ? qkv_shape : Shape{3, B, M, D};
      Tensor grads =
          make_node(OpId::AttentionBackward, grads_shape, operand_t, {sq, sk, sv, sfwd, alias(g)}, bparams, loc);
      // The backward kernel has no gradient of its own: under create_graph, differentiating
      // these gradients again is an error that says so, not a silent zero.
      grads = with_grad(grads, "scaled_dot_product_attention backward", {sq, sk, sv, g0},
                        [loc](const Tensor&) -> std::vector<Tensor> {
                          fail("scaled_dot_product_attention", loc,
                               "has no second derivative (double backward through fused attention is not "
                               "supported; compose attention from matmul and softmax for that)");
                        });
      if (bparams.grads_qkv) return std::vector<Tensor>{grads};
      if (!qkv_shape.empty()) {  // [3, B*H, T, D] -> [B, T, 3, H, D]: one view (T == S == M)
        const int64_t b = qkv_shape[0], h = qkv_shape[3];
        return std::vector<Tensor>{grads.reshape({3, b, h, T, D}, loc).permute({1, 3, 0, 2, 4}, loc)};
      }
      return std::vector<Tensor>{grads.select(0, 0).slice(1, 0, T).reshape(sq.shape(), loc),
                                 grads.select(0, 1).slice(1, 0, S).reshape(sk.shape(), loc),
                                 grads.select(0, 2).slice(1, 0, S).reshape(sv.shape(), loc)};
    };
    out = qkv ? with_grad(out, kOp, {qkv_operand}, backward) : with_grad(out, kOp, {q, k, v}, backward);
  }
  // Packed, the rows are f32 under autocast (a cast to 16 bits here would be a kernel of its
  // own: the caller's transpose of the rows cannot read through a cast; the next matmul's
  // cast reads the rows in place instead).
  return out_heads ? out : out.reshape(osh, loc);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                    Loc loc) {
  check_defined(q, kOp, loc);
  check_defined(k, kOp, loc);
  check_defined(v, kOp, loc);
  const int64_t r = q.dim();
  const int64_t H = r >= 3 ? q.shape()[r - 3] : 0, Hkv = r >= 3 && k.dim() == r ? k.shape()[r - 3] : 0;
  if (r >= 3 && k.dim() == r && v.dim() == r && Hkv != H && Hkv > 0 && H % Hkv == 0 && v.shape()[r - 3] == Hkv) {
    // Grouped-query: q's heads [..., H, T, D] viewed as [..., Hkv, G, T, D], k and v as
    // [..., Hkv, G, S, D] with stride 0 over G. Every backend's kernels read their batch dims
    // through strides, so the groups share one copy of k and v; expand's gradient sums the
    // G per-head gradients of k and v back into each key/value head.
    const int64_t G = H / Hkv;
    auto grouped = [&](const Tensor& x, bool expand) {
      Shape s(x.shape().begin(), x.shape().end() - 3);
      s.insert(s.end(), {Hkv, expand ? 1 : G, x.shape()[r - 2], x.shape()[r - 1]});
      Tensor y = x.reshape(s, loc);
      if (!expand) return y;
      s[static_cast<size_t>(r - 2)] = G;
      return y.expand(s, loc);
    };
    return attention(grouped(q, false), grouped(k, true), grouped(v, true), causal, scale, nullptr, loc)
        .reshape(q.shape(), loc);
  }
  return attention(q, k, v, causal, scale, nullptr, loc);
}

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Loc loc) {
  constexpr const char* op = "rotary_embedding";
  check_defined(x, op, loc);
  check_defined(positions, op, loc);
  check_defined(inv_freq, op, loc);
  const int64_t r = x.dim();
  check(r >= 3 && is_floating(x.dtype()), op, loc, "x must be floating [..., P, H, D], got ", dtype_name(x.dtype()),
        " ", to_string(x.shape()));
  const int64_t P = x.shape()[r - 3], D = x.shape()[r - 1], half = D / 2;
  check(D > 0 && D % 2 == 0, op, loc, "the head dim (last) must be even, got ", D);
  check(positions.dim() == 1 && positions.shape()[0] == P && !is_floating(positions.dtype()) &&
            positions.dtype() != DType::Bool,
        op, loc, "positions must be integer [", P, "] (x's dim -3), got ", dtype_name(positions.dtype()), " ",
        to_string(positions.shape()));
  check(inv_freq.dim() == 1 && inv_freq.shape()[0] == half && is_floating(inv_freq.dtype()), op, loc,
        "inv_freq must be floating [", half, "] (half the head dim), got ", dtype_name(inv_freq.dtype()), " ",
        to_string(inv_freq.shape()));
  check(&positions.device() == &x.device() && &inv_freq.device() == &x.device(), op, loc,
        "x, positions and inv_freq must be on one device");
  DeviceGuard on(x.device());
  // The halves x1, x2 of the last dim, each rotated with cos and sin [P, 1, half] broadcast over
  // the heads, then put side by side: two elementwise kernels reading x through its strides and
  // one concatenation (a reduction over x viewed [..., 2, 2, half] against the 2 x 2 rotations
  // did it in one kernel, but the CPU's generic reduction ran it 6x slower than PyTorch's
  // formula; bench/bench_llama_ops.cpp). The sums are transformers' in the same order, so f32
  // results are theirs bit for bit. Its gradient, by autodiff, is the inverse rotation.
  const int64_t last = r - 1;
  Tensor angle = mul(cast(positions, inv_freq.dtype(), loc).reshape({P, 1, 1}, loc),
                     inv_freq.reshape({1, 1, half}, loc), loc);  // [P, 1, half]
  Tensor c = cast(cos(angle, loc), x.dtype(), loc), s = cast(sin(angle, loc), x.dtype(), loc);
  Tensor x1 = x.slice(last, 0, half, 1, loc), x2 = x.slice(last, half, D, 1, loc);
  return cat({sub(mul(x1, c, loc), mul(x2, s, loc), loc), add(mul(x2, c, loc), mul(x1, s, loc), loc)}, last, loc);
}

Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, bool causal, Loc loc) {
  check_defined(qkv, kOp, loc);
  check(qkv.dim() == 5 && qkv.shape()[2] == 3, kOp, loc, "expected a packed projection [B, T, 3, H, D], got shape ",
        to_string(qkv.shape()));
  auto part = [&](int64_t i) { return qkv.select(2, i, loc).transpose(1, 2, loc); };
  return attention(part(0), part(1), part(2), causal, -1.0, &qkv, loc);
}

}  // namespace alk
