// Softmax, log-softmax, argmax/argmin and cumsum: one row of the reduced axis a warp or a
// thread (kernels/rows.cu).
#include "backend/cuda/ops/rows.h"

#include "backend/cuda/template_ops.h"

namespace alk::cuda {

std::string rows_source(DType t, std::initializer_list<std::pair<const char*, std::string>> extra) {
  std::string d = defines({{"T", storage(t)}, {"ACC", acc_type(t)}, {"FLOATING", is_floating(t) ? "1" : "0"}});
  for (auto& [name, value] : extra) d += std::string("#define ") + name + " " + value + "\n";
  return kernel_source(d, sources::rows);
}

std::string unless_floating(const Kernel& k) {
  return is_floating(k.output.dtype) ? "" : std::string(op_name(k.op)) + " of a non-float dtype";
}

namespace {

struct AxisRowsParams {
  KView outer, out_outer;
  int64_t rows, len, stride, out_stride;
};
AxisRowsParams axis_rows(const Arg& x, int axis, const Arg& out) {
  AxisRowsParams p;
  Shape os, ost, oos, oost;
  const Shape out_strides = contiguous_strides(out.shape);
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (static_cast<int>(d) != axis) {
      os.push_back(x.shape[d]), ost.push_back(x.strides[d]);
      oos.push_back(out.shape[d]), oost.push_back(out_strides[d]);
    }
  p.outer = kview(os, ost, x.offset);
  p.out_outer = kview(oos, oost, out.offset);
  p.rows = numel(os);
  p.len = x.shape.empty() ? 1 : x.shape[static_cast<size_t>(axis)];
  p.stride = x.shape.empty() ? 0 : x.strides[static_cast<size_t>(axis)];
  p.out_stride = x.shape.empty() ? 0 : out_strides[static_cast<size_t>(axis)];
  return p;
}

void softmax_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  CUfunction f = ctx.function(rows_source(x.dtype), "softmax_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp).add(static_cast<int>(k.node.op == OpId::LogSoftmax));
  ctx.launch(f, blocks_for(ctx, rp.rows, kBlock / 32), 1, 1, kBlock, 0, args);
}

void argreduce_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  if (rp.rows > 0 && rp.len == 0)
    alk::fail(p.flag ? "argmax" : "argmin", k.node.loc, "cannot reduce an empty dim " + std::to_string(p.axis));
  CUfunction f = ctx.function(rows_source(x.dtype, {{"IS_MAX", p.flag ? "1" : "0"}}), "argreduce_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp);
  ctx.launch(f, blocks_for(ctx, rp.rows), 1, 1, kBlock, 0, args);
}

void cumsum_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  CUfunction f = ctx.function(rows_source(x.dtype), "cumsum_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp).add(static_cast<int>(p.flag));
  ctx.launch(f, blocks_for(ctx, rp.rows), 1, 1, kBlock, 0, args);
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::Softmax, kFloatDTypes, {unless_floating, softmax_op});
  ops.add(OpId::LogSoftmax, kFloatDTypes, {unless_floating, softmax_op});
  ops.add(OpId::ArgReduce, kAllDTypes, {nullptr, argreduce_op});
  ops.add(OpId::Cumsum, kAllDTypes, {nullptr, cumsum_op});
  return true;
}();

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    out.emplace_back("rows " + std::string(dtype_name(t)), rows_source(t, {{"IS_MAX", "1"}}));
  out.emplace_back("rows i64 (argmax, cumsum)", rows_source(DType::I64, {{"IS_MAX", "0"}}));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
