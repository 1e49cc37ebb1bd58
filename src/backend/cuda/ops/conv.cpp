// Unfold and fold (im2col and its adjoint, kernels/index.cu), from which the front end composes
// conv2d off the CPU.
#include "backend/cuda/ops/index.h"
#include "backend/cuda/ops/rows.h"
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

struct ConvLaunchParams {
  KView x;
  int64_t n, out_offset;
  int64_t channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  uint64_t pad_bits;
};
ConvLaunchParams conv_params(const UnfoldParams& p, const Arg& x, const Arg& out, int64_t channels) {
  ConvLaunchParams c{};
  c.x = x.view(), c.n = numel(out.shape), c.out_offset = out.offset, c.channels = channels;
  c.h = p.h, c.w = p.w, c.kh = p.kh, c.kw = p.kw, c.sh = p.sh, c.sw = p.sw, c.ph = p.ph, c.pw = p.pw, c.dh = p.dh, c.dw = p.dw;
  c.oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  c.ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  c.pad_bits = bits_of(out.dtype, p.pad_value);
  return c;
}
void unfold_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  ConvLaunchParams c = conv_params(p, x, out, x.shape[1]);
  Args args;
  args.add(x.ptr).add(out.ptr).add(c);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "unfold_kernel"), blocks_for(ctx, c.n), 1, 1, kBlock, 0, args);
}
void fold_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const Arg cols = arg_of(k.inputs[0]);
  ConvLaunchParams c = conv_params(p, cols, out, out.shape[1]);
  Args args;
  args.add(cols.ptr).add(out.ptr).add(c);
  ctx.launch(ctx.function(index_source(cols.dtype, DType::I64), "fold_kernel"), blocks_for(ctx, c.n), 1, 1, kBlock, 0, args);
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::Unfold, kAllDTypes, {nullptr, unfold_op});
  ops.add(OpId::Fold, kFloatDTypes, {unless_floating, fold_op});
  ops.refuse(OpId::Conv2d, "no CUDA kernel: conv2d runs as unfold and matmul (the front end composes it off the CPU)");
  return true;
}();

}  // namespace

}  // namespace alk::cuda
