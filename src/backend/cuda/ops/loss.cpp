// Fused cross-entropy (kernels/loss.cu): the forward's per-row logsumexp and loss, packed for
// the backward, and the backward's softmax minus one-hot, a block per row of logits.
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

struct CrossEntropyLaunchParams {
  KView x, targets, packed, grad;
  int64_t rows, classes, ignore_index, out_offset;
  uint64_t launch;
};

std::string loss_source(DType logits, DType targets, DType packed, bool vec) {
  return kernel_source(defines({{"T", storage(logits)},
                                {"ACC", logits == DType::F64 ? "double" : "float"},
                                {"IDX", storage(targets)},
                                {"P", storage(packed)},
                                {"VEC", vec ? "1" : "0"}}),
                       sources::loss);
}

// Rows of whole 16-byte vectors: contiguous, C a multiple of the vector, every row aligned.
bool rows_are_vectors(const Arg& x, int64_t classes) {
  const int64_t per_vector = 16 / static_cast<int64_t>(dtype_size(x.dtype));
  return x.strides[1] == 1 && x.strides[0] == classes && classes % per_vector == 0 && x.offset % per_vector == 0 &&
         x.ptr % 16 == 0;
}

// in: logits, targets[, packed, grad]; the index-error launch names the op and its call site.
CrossEntropyLaunchParams cross_entropy_params(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]);
  check_index_dtype(k, "cross_entropy", t.dtype);
  CrossEntropyLaunchParams p{};
  p.x = x.view(), p.targets = t.view();
  if (k.inputs.size() == 4) p.packed = arg_of(k.inputs[2]).view(), p.grad = arg_of(k.inputs[3]).view();
  p.rows = x.shape[0], p.classes = x.shape[1];
  p.ignore_index = std::get<CrossEntropyParams>(k.node.params).ignore_index;
  p.out_offset = out.offset;
  p.launch = ctx.add_index_launch({op_name_of(k, "cross_entropy"), "target", k.node.loc, p.classes, 1});
  return p;
}

void cross_entropy_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]);
  const CrossEntropyLaunchParams p = cross_entropy_params(ctx, k, out);
  if (p.rows == 0) return;
  const std::string src = loss_source(x.dtype, t.dtype, out.dtype, rows_are_vectors(x, p.classes));
  Args args;
  args.add(x.ptr).add(t.ptr).add(out.ptr).add(ctx.index_flag()).add(p);
  ctx.launch(ctx.function(src, "cross_entropy_rows"), static_cast<unsigned>(std::min<int64_t>(p.rows, 1 << 20)), 1, 1,
             kBlock, 0, args);
}

void cross_entropy_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]), packed = arg_of(k.inputs[2]), g = arg_of(k.inputs[3]);
  const CrossEntropyLaunchParams p = cross_entropy_params(ctx, k, out);
  if (p.rows == 0) return;
  const bool vec = rows_are_vectors(x, p.classes) && out.offset % (16 / static_cast<int64_t>(dtype_size(out.dtype))) == 0 &&
                   out.ptr % 16 == 0;
  const std::string src = loss_source(x.dtype, t.dtype, packed.dtype, vec);
  Args args;
  args.add(x.ptr).add(t.ptr).add(packed.ptr).add(g.ptr).add(out.ptr).add(ctx.index_flag()).add(p);
  ctx.launch(ctx.function(src, "cross_entropy_backward_rows"), static_cast<unsigned>(std::min<int64_t>(p.rows, 1 << 20)),
             1, 1, kBlock, 0, args);
}

std::string cross_entropy_unsupported(const Kernel& k) {
  const KernelArg& logits = k.inputs[0];
  return logits.shape.size() == 2 && is_floating(logits.dtype) ? "" : "cross_entropy of non-float or non-2-D logits";
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::CrossEntropy, kFloatDTypes, {cross_entropy_unsupported, cross_entropy_op},
          "2-D logits; targets i64 or i32");
  ops.add(OpId::CrossEntropyBackward, kFloatDTypes, {cross_entropy_unsupported, cross_entropy_backward_op},
          "2-D logits; targets i64 or i32");
  return true;
}();

void samples(SampleSources& out) {
  out.emplace_back("cross_entropy bf16 rows of vectors", loss_source(DType::BF16, DType::I64, DType::F32, true));
  out.emplace_back("cross_entropy f32 strided", loss_source(DType::F32, DType::I32, DType::F32, false));
  out.emplace_back("cross_entropy f64 rows of vectors", loss_source(DType::F64, DType::I64, DType::F64, true));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
