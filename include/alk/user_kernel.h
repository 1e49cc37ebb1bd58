// alk::UserKernel: a kernel from the user's source text as a Tensor op (alk/kernel_spec.h
// says what a spec holds and what a body sees). Calling it records a lazy node like any op;
// the scheduler plans its output's memory, keeps fusion around it, records it in compiled
// programs and sends it to the device, which compiles the body for its language (cached).
//
//   alk::KernelSpec spec;
//   spec.name = "saxpy";
//   spec.inputs = {{"x", alk::DType::F32}, {"y", alk::DType::F32}};
//   spec.output = {"out", alk::DType::F32};
//   spec.attrs = {{"a", alk::DType::F32}};
//   spec.body[int(alk::KernelTarget::Cpp)] = "out[i] = a * x[i] + y[i];";
//   alk::UserKernel saxpy(spec);
//   alk::Tensor z = saxpy({x, y}, {2.0});
#pragma once
#include <memory>
#include <vector>

#include "alk/kernel_spec.h"
#include "alk/tensor.h"

namespace alk {

class UserKernel {
 public:
  // Checks the spec (names are identifiers and distinct, a C++ body, dtypes a body can take);
  // `loc` is where the kernel is defined, which compile errors name.
  explicit UserKernel(KernelSpec spec, Loc loc = Loc::current());
  // The kernel over `inputs` (on one device, of the spec's dtypes and ranks; made contiguous)
  // with the attributes' values in the spec's order. No gradient flows through it.
  Tensor operator()(const std::vector<Tensor>& inputs, const std::vector<double>& attrs = {},
                    Loc loc = Loc::current()) const;
  const KernelSpec& spec() const { return *spec_; }

 private:
  std::shared_ptr<const KernelSpec> spec_;
};

}  // namespace alk
