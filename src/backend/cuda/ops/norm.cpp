// Layer norm and RMS norm, forward (with an epilogue in its store) and layer norm's backward
// (adding the residual stream's gradient where autograd folds it in: norm_backward_adds):
// kernels/rows.cu. A row held in registers where it fits (RowPlan), else the older kernels.
#include <algorithm>
#include <optional>

#include "backend/cuda/ops/epilogue.h"
#include "backend/cuda/ops/rows.h"
#include "backend/cuda/template_ops.h"
#include "backend/cuda/tuning.h"
#include "expr/emit.h"

namespace alk::cuda {

namespace {

struct NormLaunchParams {
  KView x, w, b, g;
  int64_t rows, inner, out_offset;
  double eps;
};

// How the row-in-registers norm kernels (rows.cu, ROW_VEC) cover a row of `inner`: vectors
// of `vec` elements (16 bytes where every row tensor is contiguous and 16-byte aligned),
// `warps` warps per row, `items` vectors per lane. The fewest warps (no block barriers with
// one) such that a lane holds at most 24 elements (12 in f64): the backward then keeps x, g
// and two column sums per element in at most 128 registers, so 2 blocks fit an SM
// (ROW_MIN_BLOCKS; GPT-2's 768 columns: one warp, 24 elements in f32 or bf16); else 32
// elements (16 in f64) at one block per SM. None beyond that (inner > 8192; 4096 in f64):
// the older kernels run then.
struct RowPlan {
  int vec = 1, warps = 1;
  int64_t items = 1;
  int min_blocks = 1;  // blocks per SM the backward is compiled to fit
  std::string defines() const {
    return "#define ROW_VEC " + std::to_string(vec) + "\n#define ROW_WARPS " + std::to_string(warps) +
           "\n#define ROW_ITEMS " + std::to_string(items) + "\n#define ROW_MIN_BLOCKS " + std::to_string(min_blocks) +
           "\n";
  }
};
std::optional<RowPlan> row_plan(int64_t inner, DType t, std::initializer_list<const Arg*> rows) {
  const int size = static_cast<int>(dtype_size(t));
  int vec = 16 / size;
  bool aligned = inner % vec == 0;
  for (const Arg* a : rows)
    aligned = aligned && a->view().contiguous && a->offset % vec == 0 && a->ptr % 16 == 0;
  if (!aligned) vec = 1;
  const int small = size == 8 ? 12 : 24;
  for (int per_lane : {small, small * 4 / 3})
    for (int warps = 1; warps <= 8; warps *= 2) {
      const int64_t items = (inner + 32 * warps * vec - 1) / (32 * warps * vec);
      if (items * vec <= per_lane) return RowPlan{vec, warps, std::max<int64_t>(1, items), per_lane == small ? 2 : 1};
    }
  return std::nullopt;
}

// The row-in-registers norm of T = x's dtype storing TO = out's through `epilogue` (epilogue_code's text).
std::string norm_epilogue_source(const RowPlan& plan, DType x, DType out, const std::string& epilogue) {
  return plan.defines() + kernel_source(defines({{"T", storage(x)}, {"ACC", acc_type(x)}, {"FLOATING", "1"},
                                                  {"TO", storage(out)}, {"EPILOGUE", "1"}}),
                                        epilogue + std::string(sources::rows));
}

// The norm into out; with `fuse_epilogue`, k's epilogue applied in the store of the
// row-in-registers kernel (returns false, having launched nothing, where that kernel does
// not take it: the caller then runs the norm and the epilogue apart).
bool launch_norm(Context& ctx, const Kernel& k, const Arg& out, bool fuse_epilogue) {
  const auto& p = std::get<NormParams>(k.node.params);
  const bool rms = k.node.op == OpId::RmsNorm;
  const Arg x = arg_of(k.inputs[0]), w = arg_of(k.inputs[1]);
  const Arg b = rms ? w : arg_of(k.inputs[2]);
  NormLaunchParams np{x.view(), w.view(), b.view(), {}, numel(x.shape) / std::max<int64_t>(1, p.inner), p.inner,
                      out.offset, p.eps};
  Args args;
  args.add(x.ptr).add(w.ptr).add(b.ptr).add(out.ptr).add(np).add(static_cast<int>(rms));
  const std::optional<RowPlan> plan = tuning().layer_norm_forward_old ? std::nullopt : row_plan(p.inner, x.dtype, {&x, &out});
  // (The kernel keeps weight and bias in static shared memory: 2 x the span in T, <= 40 KB.)
  const auto affine_bytes = [&](const RowPlan& r) {
    return 2 * 32 * r.warps * r.vec * r.items * static_cast<int64_t>(dtype_size(x.dtype));
  };
  const bool fused = plan && np.rows > 0 && affine_bytes(*plan) <= 40 * 1024;
  std::string src;
  if (fuse_epilogue) {
    // The epilogue reads its inputs at (batch item, row, column) of the output seen as
    // [batch..., e_rows, inner]: the norm must run over the last dim alone, into a
    // contiguous output, with every input of the output's shape; its value is a float.
    auto half_or_f32 = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
    const Shape& shape = k.node.shape;
    bool takes = fused && half_or_f32(k.node.dtype) && half_or_f32(out.dtype) && shape.size() >= 2 &&
                 shape.back() == p.inner && out.shape == shape && out.strides == contiguous_strides(shape) &&
                 k.epilogue_inputs.size() <= kMaxEpilogueInputs;
    for (const KernelArg& a : k.epilogue_inputs) takes = takes && a.shape == shape;
    if (!takes) return false;
    std::vector<DType> types;
    for (const KernelArg& a : k.epilogue_inputs) types.push_back(a.dtype);
    src = norm_epilogue_source(*plan, x.dtype, out.dtype, epilogue_code(*k.epilogue, k.node.dtype, types, out.dtype));
    args.add(epilogue_params(k)).add(shape[shape.size() - 2]);
  } else if (fused) {
    src = plan->defines() + rows_source(x.dtype);
  } else {
    ctx.launch(ctx.function(rows_source(x.dtype), "layer_norm_rows"), blocks_for(ctx, np.rows, kBlock / 32), 1, 1, kBlock,
               0, args);
    return true;
  }
  // The row in registers: x read once with vector loads (a grid-stride loop over rows).
  const int64_t groups = 8 / plan->warps;
  const int64_t blocks = std::clamp<int64_t>((np.rows + groups - 1) / groups, 1, 8 * int64_t{ctx.props().multiprocessors});
  ctx.launch(ctx.function(src, "layer_norm_rows_fused"), static_cast<unsigned>(blocks), 1, 1, kBlock, 0, args);
  return true;
}

void norm_op(Context& ctx, const Kernel& k, const Arg& out) { launch_norm(ctx, k, out, false); }

void layer_norm_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<NormParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]), w = arg_of(k.inputs[1]), g = arg_of(k.inputs[2]);
  // A fourth input (CudaDevice::norm_backward_adds): a gradient of x's shape that dx adds,
  // read through the params' `b` view (the forward's bias, absent here); none: x stands in.
  const bool adds = k.inputs.size() > 3;
  const Arg sum = adds ? arg_of(k.inputs[3]) : x;
  NormLaunchParams np{x.view(), w.view(), sum.view(), g.view(), numel(x.shape) / std::max<int64_t>(1, p.inner), p.inner,
                      out.offset, p.eps};
  const CUdeviceptr sum_ptr = adds ? sum.ptr : 0;
  const size_t acc_bytes = x.dtype == DType::F64 ? 8 : 4;
  // A 16-bit gradient of an f32 norm (read as it is: CudaDevice::widens_input) is widened as it loads.
  const std::string tg(storage(g.dtype));
  const std::string rows_src = g.dtype == x.dtype ? (adds ? rows_source(x.dtype, {{"NORM_SUM", "1"}}) : rows_source(x.dtype))
                               : adds             ? rows_source(x.dtype, {{"TG", tg}, {"NORM_SUM", "1"}})
                                                  : rows_source(x.dtype, {{"TG", tg}});
  const std::optional<RowPlan> plan =
      tuning().layer_norm_backward_old ? std::nullopt : row_plan(p.inner, x.dtype, {&x, &g, &out, &sum});
  if (plan && np.rows > 0 && np.inner > 0) {
    // One pass (rows.cu layer_norm_backward_fused): x and g read once, dx written once, each
    // block's dweight/dbias column sums written once; then the blocks' sums in a fixed order.
    // As many blocks as fit the device at once (ROW_MIN_BLOCKS per SM), each looping over
    // rows: few partial sums (2 inner per block).
    const int64_t groups = 8 / plan->warps;
    const int64_t blocks = std::clamp<int64_t>((np.rows + groups - 1) / groups, 1,
                                               plan->min_blocks * int64_t{ctx.props().multiprocessors});
    const std::string src = plan->defines() + rows_src;
    const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(blocks * 2 * np.inner) * acc_bytes);
    Args a1;
    a1.add(x.ptr).add(w.ptr).add(g.ptr).add(sum_ptr).add(out.ptr).add(partial).add(np);
    ctx.launch(ctx.function(src, "layer_norm_backward_fused"), static_cast<unsigned>(blocks), 1, 1, kBlock, 0, a1);
    Args a2;
    a2.add(partial).add(out.ptr).add(np).add(blocks);
    ctx.launch(ctx.function(src, "layer_norm_backward_fused_finish"), static_cast<unsigned>((2 * np.inner + 31) / 32), 1,
               1, kBlock, 0, a2);
    return;
  }
  const std::string& src = rows_src;
  const CUdeviceptr stats = ctx.scratch(static_cast<size_t>(std::max<int64_t>(1, np.rows)) * 2 * acc_bytes);
  Args a1;
  a1.add(x.ptr).add(w.ptr).add(g.ptr).add(sum_ptr).add(out.ptr).add(stats).add(np);
  ctx.launch(ctx.function(src, "layer_norm_backward_rows"), blocks_for(ctx, np.rows, kBlock / 32), 1, 1, kBlock, 0, a1);
  // Column sums in chunks of rows (enough blocks to fill the device), then the chunks in order.
  const int64_t chunks = std::clamp<int64_t>(np.rows / 64, 1, 256);
  const int64_t rows_per_chunk = (np.rows + chunks - 1) / chunks;
  const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(chunks * 2 * std::max<int64_t>(1, np.inner)) * acc_bytes);
  Args a2;
  a2.add(x.ptr).add(g.ptr).add(stats).add(partial).add(np).add(rows_per_chunk);
  ctx.launch(ctx.function(src, "layer_norm_backward_columns"), static_cast<unsigned>((np.inner + kBlock - 1) / kBlock),
             static_cast<unsigned>(chunks), 1, kBlock, 0, a2);
  Args a3;
  a3.add(partial).add(out.ptr).add(np).add(chunks);
  ctx.launch(ctx.function(src, "layer_norm_backward_finish"), blocks_for(ctx, 2 * np.inner), 1, 1, kBlock, 0, a3);
}

bool norm_with_epilogue(Context& ctx, const Kernel& k, const Arg& out) {
  return k.extra_outputs.empty() && launch_norm(ctx, k, out, true);
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::LayerNorm, kFloatDTypes, {unless_floating, norm_op, norm_with_epilogue});
  ops.add(OpId::RmsNorm, kFloatDTypes, {unless_floating, norm_op, norm_with_epilogue});
  ops.add(OpId::LayerNormBackward, kFloatDTypes, {unless_floating, layer_norm_backward_op},
          "a 16-bit gradient of an f32 norm read as it is");
  return true;
}();

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    const std::string name(dtype_name(t));
    // The row-in-registers norms: 16-byte vectors, a warp per row, 8 rows per block (GPT-2's
    // 768 columns); scalar loads, 8 warps per row (block barriers in the row sums).
    const int vec = 16 / static_cast<int>(dtype_size(t)), per_lane = t == DType::F64 ? 12 : 24;
    out.emplace_back("rows " + name + " norms, vectors", RowPlan{vec, 1, per_lane / vec, 2}.defines() + rows_source(t));
    out.emplace_back("rows " + name + " norms, scalar 8 warps",
                     RowPlan{1, 8, per_lane * 4 / 3, 1}.defines() + rows_source(t));
    if (t == DType::F32) {
      // Under autocast: the forward storing bf16 through an epilogue (a cast and a residual),
      // the backward reading a bf16 gradient.
      const std::vector<std::string> names = {"a", "b"};
      const std::vector<expr::Type> types = {expr::Type::F32, expr::Type::F32};
      const expr::Expr residual = expr::parse("a * 0.5 + b", names, types, expr::Type::F32);
      for (const RowPlan& plan : {RowPlan{vec, 1, per_lane / vec, 2}, RowPlan{1, 8, per_lane * 4 / 3, 1}}) {
        const std::string shape = plan.vec > 1 ? "vectors" : "scalar 8 warps";
        out.emplace_back("rows f32 norms -> bf16 epilogue, " + shape,
                         norm_epilogue_source(plan, t, DType::BF16,
                                              epilogue_code(residual, t, {DType::BF16}, DType::BF16)));
        out.emplace_back("rows f32 norms, bf16 gradient, " + shape,
                         plan.defines() + rows_source(t, {{"TG", storage(DType::BF16)}}));
        out.emplace_back("rows f32 norms, bf16 gradient, residual sum, " + shape,
                         plan.defines() + rows_source(t, {{"TG", storage(DType::BF16)}, {"NORM_SUM", "1"}}));
      }
    }
  }
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
