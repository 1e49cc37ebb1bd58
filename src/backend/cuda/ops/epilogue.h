// A template op's epilogue fused into its kernel's store (a matmul's, a norm's): the expression
// over the op's value (rounded to the node's dtype first, as the separate pass would read it back) and
// up to four more tensors, each read through its batch view and its row/column strides.
// The GEMM (matmul.cpp) and the row-in-registers norms (norm.cpp) put this text before their kernels.
#pragma once
#include <string>
#include <vector>

#include "backend/cuda/launch.h"

namespace alk::cuda {

inline constexpr size_t kMaxEpilogueInputs = 4;
// The kernels' EpiParams, byte for byte.
struct EpiLaunch {
  uint64_t ptr[kMaxEpilogueInputs] = {};
  KView batch[kMaxEpilogueInputs];
  int64_t rs[kMaxEpilogueInputs] = {}, cs[kMaxEpilogueInputs] = {};
  uint64_t extra = 0;  // the extra output's element 0 (EPI_EXTRA: contiguous, the result's shape)
};

// node: the product's dtype (epilogue slot 0); inputs: the other slots' dtypes. extra: an extra
// output's expression over the same slots (Kernel::extra_outputs), stored as extra_dtype:
// epilogue_extra_apply(), and EPI_EXTRA / EPI_EXTRA_T for the kernel.
std::string epilogue_code(const expr::Expr& epilogue, DType node, const std::vector<DType>& inputs, DType out,
                          const expr::Expr* extra = nullptr, DType extra_dtype = DType::BF16);
// A fused kernel's epilogue text, for a result of dtype `out` (and its extra output, if any).
std::string epilogue_code(const Kernel& k, DType out);
std::vector<DType> epilogue_input_types(const Kernel& k);
EpiLaunch epilogue_params(const Kernel& k);

}  // namespace alk::cuda
