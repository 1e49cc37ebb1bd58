// User kernels on CUDA (alk/kernel_spec.h): the CUDA C body inside alk's entry point
// (src/expr/user_kernel_source.cpp), compiled by NVRTC through the context's cubin cache and
// launched over the count with a grid-stride loop.
#include <string>

#include "alk/kernel_spec.h"
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

std::string user_unsupported(const Kernel& k) {
  const KernelSpec& spec = *std::get<UserKernelParams>(k.node.params).spec;
  if (spec.body_for(KernelTarget::Cuda).empty()) return "user kernel " + spec.name + " has no CUDA body";
  if (k.output.dtype == DType::F16 || k.output.dtype == DType::BF16) return "16-bit tensors in a user kernel";
  return "";
}

// Bodies index elements from 0, row-major: the front end passes contiguous tensors.
CUdeviceptr first_element(const Kernel& k, const Arg& a) {
  if (!a.view().contiguous)
    alk::fail("user kernel " + std::get<UserKernelParams>(k.node.params).spec->name, k.node.loc, "a tensor is not contiguous");
  return a.ptr + static_cast<CUdeviceptr>(a.offset) * dtype_size(a.dtype);
}

void user_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<UserKernelParams>(k.node.params);
  const KernelSpec& spec = *p.spec;
  std::vector<Arg> tensors;
  for (const KernelArg& a : k.inputs) tensors.push_back(arg_of(a));
  tensors.push_back(out);
  std::vector<int> ranks;
  Args args;
  for (const Arg& a : tensors) {
    ranks.push_back(static_cast<int>(a.shape.size()));
    args.add(first_element(k, a));
  }
  for (const Arg& a : tensors) {
    args.add(static_cast<long long>(numel(a.shape)));
    for (int64_t d : a.shape) args.add(static_cast<long long>(d));
  }
  for (size_t j = 0; j < spec.attrs.size(); ++j) {
    const double v = p.attrs[j];
    switch (spec.attrs[j].dtype) {
      case DType::I32: args.add(static_cast<int>(v)); break;
      case DType::I64: args.add(static_cast<long long>(v)); break;
      case DType::F32: args.add(static_cast<float>(v)); break;
      default: args.add(v); break;
    }
  }
  args.add(static_cast<long long>(p.invocations));
  if (p.invocations == 0) return;
  const std::string source = user_kernel_source(spec, KernelTarget::Cuda, ranks);
  CUfunction f = nullptr;
  try {
    f = ctx.function(source, "alk_user_kernel");
  } catch (const Error& e) {
    fail_user_kernel_compile(spec, KernelTarget::Cuda, e.what(), k.node.loc);
  }
  const unsigned block = static_cast<unsigned>(spec.workgroup_size);
  ctx.launch(f, blocks_for(ctx, p.invocations, block), 1, 1, block, 0, args);
}

const bool registered = (template_ops().add(OpId::UserKernel, kAllDTypes, {user_unsupported, user_op},
                                            "the CUDA body, compiled by NVRTC"),
                         true);

// A small kernel of every element type through the generated entry point, so the wrapper's
// text is compiled by the NVRTC tests (CudaCompile.*) on machines without a GPU.
void samples(SampleSources& out) {
  KernelSpec spec;
  spec.name = "axpy_sample";
  spec.inputs = {{"x", DType::F32}, {"n", DType::I64}, {"b", DType::U8}, {"d", DType::F64}, {"t", DType::Bool}};
  spec.output = {"out", DType::I32};
  spec.attrs = {{"a", DType::F32}, {"k", DType::I64}};
  spec.body[static_cast<int>(KernelTarget::Cuda)] =
      "if (i >= out_numel) return;\n"
      "out[i] = static_cast<int>(a * x[i] + n[i] * k + b[i] + d[i] + (t[i] ? out_size0 : 0));";
  const int ranks[] = {1, 1, 1, 1, 1, 1};
  out.emplace_back("user kernel (CUDA body)", user_kernel_source(spec, KernelTarget::Cuda, ranks));
}
const bool sampled = add_sample_sources(samples);

}  // namespace
}  // namespace alk::cuda
