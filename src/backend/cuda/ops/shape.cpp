// Tri, pad, concat and slice_scatter: raw copies and fills through views (kernels/index.cu),
// for every dtype.
#include "backend/cuda/ops/index.h"
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

void tri_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<TriParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  const size_t r = x.shape.size();
  const int64_t n = numel(out.shape), rows = r >= 2 ? x.shape[r - 2] : 1, cols = r >= 1 ? x.shape[r - 1] : 1;
  Args args;
  args.add(x.ptr).add(out.ptr).add(x.view()).add(n).add(rows).add(cols).add(p.k).add(static_cast<int>(p.upper)).add(out.offset);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "tri_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}

struct PadLaunchParams {
  KView x;
  int64_t n, out_offset;
  int32_t rank;
  int64_t out_shape[8], before[8];
  uint64_t value_bits;
};
void pad_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<PadParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  PadLaunchParams pp{};
  pp.x = x.view(), pp.n = numel(out.shape), pp.out_offset = out.offset, pp.rank = static_cast<int32_t>(out.shape.size());
  for (size_t d = 0; d < out.shape.size(); ++d) pp.out_shape[d] = out.shape[d], pp.before[d] = p.pads[2 * d];
  pp.value_bits = bits_of(out.dtype, p.value);
  Args args;
  args.add(x.ptr).add(out.ptr).add(pp);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "pad_kernel"), blocks_for(ctx, pp.n), 1, 1, kBlock, 0, args);
}

void concat_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Shape ost = contiguous_strides(out.shape);
  int64_t at = 0;
  for (const KernelArg& ka : k.inputs) {
    const Arg x = arg_of(ka);
    copy_view(ctx, x, Arg{out.ptr, out.dtype, x.shape, ost, out.offset + at * ost[static_cast<size_t>(dim)]});
    at += x.shape[static_cast<size_t>(dim)];
  }
}

void slice_scatter_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<SliceScatterParams>(k.node.params);
  const Arg g = arg_of(k.inputs[0]);
  const size_t esize = dtype_size(out.dtype);
  ctx.memset0(out.ptr + static_cast<CUdeviceptr>(out.offset) * esize, static_cast<size_t>(numel(out.shape)) * esize);
  Shape st = contiguous_strides(out.shape);
  const int64_t start_off = p.start * st[static_cast<size_t>(p.dim)];
  st[static_cast<size_t>(p.dim)] *= p.step;
  copy_view(ctx, g, Arg{out.ptr, out.dtype, g.shape, st, out.offset + start_off});
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::Tri, kAllDTypes, {nullptr, tri_op});
  ops.add(OpId::Pad, kAllDTypes, {nullptr, pad_op});
  ops.add(OpId::Concat, kAllDTypes, {nullptr, concat_op});
  ops.add(OpId::SliceScatter, kAllDTypes, {nullptr, slice_scatter_op});
  return true;
}();

}  // namespace

}  // namespace alk::cuda
