// The CPU's hand-written template-op kernels (everything that is not elementwise;
// elementwise work is the expression evaluator in eval.h). Conventions:
// - inputs are arbitrary strided Views (broadcast strides of 0 allowed), outputs are
//   contiguous Views of the given shape and dtype, already allocated;
// - floating dtypes f16/bf16/f32 compute in f32 (accumulating sums in f64 where cheap),
//   f64 in f64;
// - axes are already normalized (0 <= axis < rank);
// - index inputs are i64 or i32; an out-of-range index throws alk::Error(op, ..., loc)
//   before anything is written to `out`.
#pragma once
#include <cstdint>
#include <span>

#include "alk/error.h"
#include "alk/kernel.h"  // RandomDistribution
#include "backend/cpu/view.h"

namespace alk::cpu {

// a [..., m, k] x b [..., k, n] -> out [..., m, n]; a, b and out have the same batch dims.
// out = a b (batched over leading dims), then + addends[0] + addends[1] ... in that order
// (each addend has out's shape, f32, unit column stride: a bias row broadcast over rows, a
// residual): the fused form of a bias/residual epilogue, added to each tile in registers on
// the f32 path before it is stored.
void matmul(const View& a, const View& b, const View& out, std::span<const View> addends = {});
// out has x's shape with dim `axis` = 1; i64 index of the first max (min) along axis.
void argreduce(const View& x, int axis, bool is_max, const View& out);
void softmax(const View& x, int axis, bool log, const View& out);
// Normalizes each run of `inner` trailing elements; weight/bias (may be null) have `inner` elements.
void layer_norm(const View& x, const View* weight, const View* bias, int64_t inner, double eps, const View& out);
void rms_norm(const View& x, const View* weight, int64_t inner, double eps, const View& out);
// The gradients of layer_norm in one pass: out [rows + 2, inner] holds dx (rows of x), then
// dweight, then dbias (the sums over rows), given x, weight and the output gradient g.
void layer_norm_backward(const View& x, const View& weight, const View& g, int64_t inner, double eps,
                         const View& out);
// Softmax cross-entropy over the rows of x [N, C]: out [N, 2] = (nll, logsumexp) per row,
// nll 0 where the target is ignore_index (ops.h cross_entropy_rows); and its backward,
// out [N, C] = (g_nll + g_lse) softmax(x) - g_nll one_hot(target) from the forward's packed
// output and its gradient g [N, 2]. Targets outside [0, C) other than ignore_index raise.
void cross_entropy(const View& x, const View& targets, int64_t ignore_index, const View& out, Loc loc);
void cross_entropy_backward(const View& x, const View& targets, const View& packed, const View& g, int64_t ignore_index,
                            const View& out, Loc loc);
// torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] for dim 0; out has index's shape.
void gather(const View& x, int dim, const View& index, const View& out, Loc loc);
// out = x with dim `dim` replaced by the entries of the 1-D index.
void index_select(const View& x, int dim, const View& index, const View& out, Loc loc);
// out = x; out[index[i][j][k]][j][k] += src[i][j][k] for dim 0 (index and src same shape).
void scatter_add(const View& x, int dim, const View& index, const View& src, const View& out, Loc loc);
// out [..., num_classes] (any dtype) = 1 where the class is ids[...], else 0.
void one_hot(const View& ids, int64_t num_classes, const View& out, Loc loc);
// Keeps x[..., i, j] where j - i <= k (tril) or j - i >= k (triu); zeros elsewhere.
void tri(const View& x, int64_t k, bool upper, const View& out);
// Inclusive running sum along axis; reverse sums from the end (the backward of cumsum).
void cumsum(const View& x, int axis, bool reverse, const View& out);
// pads has 2*rank entries (before0, after0, before1, after1, ...) in dim order; negative crops.
void pad(const View& x, std::span<const int64_t> pads, double value, const View& out);
void concat(std::span<const View> xs, int dim, const View& out);
// out = zeros; out.slice(dim, start, start + step * g.shape[dim], step) = g.
void slice_scatter(const View& g, int dim, int64_t start, int64_t step, const View& out);

// q [B, T, D], k and v [B, S, D] (batch dims flattened) -> out [B, T, D + 1]: the attention
// output in [..., :D] and each row's logsumexp of the scaled (masked) scores in [..., D].
// Causal: query t sees keys s <= t + (S - T).
void attention_forward(const View& q, const View& k, const View& v, bool causal, double scale, const View& out);
// Gradients of the above: d_out [B, T, D], fwd = the forward's [B, T, D + 1] output;
// out [3, B, max(T, S), D] packs dq (rows < T), dk and dv (rows < S).
void attention_backward(const View& q, const View& k, const View& v, const View& fwd, const View& d_out, bool causal,
                        double scale, const View& out);
// x [N, C, H, W] -> out [N, C*kh*kw, L]; fold: cols [N, C*kh*kw, L] -> out [N, C, h, w] (summing).
void unfold2d(const View& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
              int64_t dw, double pad_value, const View& out);
void fold2d(const View& cols, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, const View& out);

// x [N, C, H, W], w [O, C/groups, kh, kw], bias [O] or null -> out [N, O, OH, OW], groups = C /
// w's dim 1, zeros outside the image. Depthwise layers (groups == C == O) run a direct loop vectorised over the
// output width (conv_impl.inc); the others unfold one block of output columns at a time into a
// cache-sized buffer and multiply it (matmul), never the whole unfolded input.
void conv2d(const View& x, const View& w, const View* bias, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
            int64_t dw, const View& out);

using Distribution = RandomDistribution;  // alk/kernel.h: RandomParams::dist
// Element i of out is drawn from Philox4x32-10 (core/philox.h) with key `seed` and counter
// offset + i (normal: Box-Muller over pairs); Uniform in [low, high), Integer in [low, high).
void random(Distribution dist, uint64_t seed, uint64_t offset, double low, double high, const View& out);

}  // namespace alk::cpu
