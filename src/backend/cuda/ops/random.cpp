// Random numbers (uniform, normal, integers: Philox4x32-10, element i from counter offset + i,
// as on the CPU) keyed by the node's seed and offset (kernels/index.cu's random_kernel), in every dtype.
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

std::string random_source(DType t) {
  const bool integer_out = !is_floating(t) && t != DType::Bool;
  return kernel_source(defines({{"E", raw_type(t)},
                                {"T", storage(t)},
                                {"ACC", acc_type(t)},
                                {"IDX", "long long"},
                                {"HAS_ATOMIC_ADD", "0"},
                                {"INTEGER_OUT", integer_out ? "1" : "0"}}),
                       sources::index);
}

void random_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<RandomParams>(k.node.params);
  const int64_t ilow = static_cast<int64_t>(p.low), ihigh = static_cast<int64_t>(p.high);
  if (p.dist == 2 && ihigh <= ilow)
    alk::fail("random", k.node.loc, "integer range [" + std::to_string(ilow) + ", " + std::to_string(ihigh) + ") is empty");
  const int64_t n = numel(out.shape);
  const std::string src = random_source(out.dtype);
  Args args;
  args.add(out.ptr).add(n).add(out.offset).add(p.dist).add(p.seed).add(p.offset).add(p.low).add(p.high).add(ilow).add(ihigh);
  ctx.launch(ctx.function(src, "random_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}

// A random node with inputs reads its seed and offset from a buffer; the kernel takes them as
// launch parameters (alk::compile launches such a node alone, with them patched in).
std::string random_unsupported(const Kernel& k) {
  return k.inputs.empty() ? "" : "random with its seed and offset in a buffer";
}

const bool registered = (template_ops().add(OpId::Random, kAllDTypes, {random_unsupported, random_op},
                                            "seed and offset as launch parameters, not read from a buffer"),
                         true);

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool})
    out.emplace_back("random " + std::string(dtype_name(t)), random_source(t));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
