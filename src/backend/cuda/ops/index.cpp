// Gather, index_select, scatter_add (atomic adds) and one_hot (kernels/index.cu). A bad index
// sets the context's index flag with this launch's id (Context::add_index_launch): the next
// synchronize() raises the error naming the op, the index and the caller's line.
#include "backend/cuda/ops/index.h"

#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

struct IndexLaunchParams {
  KView x, index, src;
  int64_t n;
  int32_t dim, rank;
  int64_t shape[8];
  int64_t out_strides[8];
  int64_t size;
  int64_t out_offset;
  uint64_t launch, one_bits;
};

bool has_atomic_add(DType t) { return t != DType::U8 && t != DType::Bool; }

}  // namespace

std::string index_source(DType value, DType index_dtype) {
  return kernel_source(defines({{"E", raw_type(value)},
                                {"T", storage(value)},
                                {"ACC", acc_type(value)},
                                {"IDX", storage(index_dtype)},
                                {"HAS_ATOMIC_ADD", has_atomic_add(value) ? "1" : "0"},
                                {"INTEGER_OUT", "0"}}),
                       sources::index);
}

void copy_view(Context& ctx, const Arg& src, const Arg& dst) {
  const int64_t n = numel(src.shape);
  if (n == 0) return;
  Args args;
  args.add(src.ptr).add(dst.ptr).add(src.view()).add(dst.view()).add(n);
  ctx.launch(ctx.function(index_source(src.dtype, DType::I64), "copy_view_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}

namespace {

Arg contiguous_out(const Arg& out) { return Arg{out.ptr, out.dtype, out.shape, contiguous_strides(out.shape), out.offset}; }

void fill_walk(IndexLaunchParams& ip, const Shape& shape) {
  ip.rank = static_cast<int32_t>(shape.size());
  const Shape st = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) ip.shape[d] = shape[d], ip.out_strides[d] = st[d];
}

void gather_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]);
  check_index_dtype(k, "gather", index.dtype);
  IndexLaunchParams ip{};
  ip.x = x.view(), ip.index = index.view(), ip.n = numel(out.shape), ip.dim = dim, ip.size = x.shape[static_cast<size_t>(dim)];
  ip.out_offset = out.offset;
  fill_walk(ip, out.shape);
  ip.launch = ctx.add_index_launch({op_name_of(k, "gather"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(x.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(x.dtype, index.dtype), "gather_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock, 0, args);
}

void index_select_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]);
  check_index_dtype(k, "index_select", index.dtype);
  IndexLaunchParams ip{};
  ip.x = x.view(), ip.index = index.view(), ip.n = numel(out.shape), ip.dim = dim, ip.size = x.shape[static_cast<size_t>(dim)];
  ip.out_offset = out.offset;
  fill_walk(ip, out.shape);
  ip.launch = ctx.add_index_launch({op_name_of(k, "index_select"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(x.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(x.dtype, index.dtype), "index_select_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock,
             0, args);
}

void scatter_add_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]), src = arg_of(k.inputs[2]);
  check_index_dtype(k, "scatter_add", index.dtype);
  copy_view(ctx, x, contiguous_out(out));
  IndexLaunchParams ip{};
  ip.index = index.view(), ip.src = src.view(), ip.n = numel(src.shape), ip.dim = dim;
  ip.size = out.shape[static_cast<size_t>(dim)], ip.out_offset = out.offset;
  fill_walk(ip, src.shape);
  const Shape ost = contiguous_strides(out.shape);
  for (size_t d = 0; d < out.shape.size(); ++d) ip.out_strides[d] = ost[d];
  ip.launch = ctx.add_index_launch({op_name_of(k, "scatter_add"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(src.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(out.dtype, index.dtype), "scatter_add_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock,
             0, args);
}

void one_hot_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg ids = arg_of(k.inputs[0]);
  if (ids.dtype != DType::I64 && ids.dtype != DType::I32)
    alk::fail(op_name_of(k, "one_hot"), k.node.loc, "ids must be i64 or i32, got " + std::string(dtype_name(ids.dtype)));
  IndexLaunchParams ip{};
  ip.index = ids.view(), ip.n = numel(out.shape), ip.size = std::get<OneHotParams>(k.node.params).num_classes;
  ip.out_offset = out.offset, ip.one_bits = bits_of(out.dtype, 1.0);
  ip.launch = ctx.add_index_launch(
      {op_name_of(k, "one_hot"), "class id", k.node.loc, ip.size, static_cast<int64_t>(ids.shape.size())});
  if (ip.size <= 0) return;
  Args args;
  args.add(ids.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(out.dtype, ids.dtype), "one_hot_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock, 0, args);
}

std::string scatter_add_unsupported(const Kernel& k) {
  return has_atomic_add(k.output.dtype) ? "" : "scatter_add into u8/bool (no atomics)";
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::Gather, kAllDTypes, {nullptr, gather_op}, "indices i64 or i32");
  ops.add(OpId::IndexSelect, kAllDTypes, {nullptr, index_select_op}, "indices i64 or i32");
  ops.add(OpId::ScatterAdd, kAllDTypes, {scatter_add_unsupported, scatter_add_op},
          "not into u8 or bool (no atomic add); indices i64 or i32");
  // The families of its input, the class ids (i64 or i32); it writes any dtype.
  ops.add(OpId::OneHot, kIntDType, {nullptr, one_hot_op}, "class ids i64 or i32, into any dtype");
  return true;
}();

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool})
    out.emplace_back("index " + std::string(dtype_name(t)), index_source(t, DType::I64));
  out.emplace_back("index i32 indices", index_source(DType::F32, DType::I32));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
