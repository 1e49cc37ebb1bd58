// Internal helpers shared by the op implementations in src/ops/.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace alk {

// A Map node computing `text` (an expression over `names`) with operands brought to
// operand_dtypes, broadcast together, result stored as out_dtype.
Tensor map_expr(OpId op, std::string_view text, const std::vector<std::string>& names,
                const std::vector<Operand>& operands, const std::vector<DType>& operand_dtypes, DType literal_dtype,
                DType out_dtype, Loc loc);
Tensor apply_elementwise(OpId op, const std::vector<Operand>& operands, Loc loc);
Tensor apply_entry(const ElementwiseEntry& e, std::shared_ptr<const void> keep, const std::vector<Operand>& operands,
                   Loc loc);

// Wraps a possibly negative axis into [0, rank); errors name the op.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op, Loc loc);
// Whether t's device has the fused kernel that `feature` names in its DeviceInfo::features
// ("conv2d" on the CPU, "cross_entropy" on CUDA), outside a PortableOps scope: the one rule
// by which an op chooses its fused kernel over its portable composition.
bool fused_kernel_on(const Tensor& t, std::string_view feature);

// Fused softmax cross-entropy over the rows of logits [N, C] (any float dtype) with targets
// [N] (i64/i32): [N, 2] f32 of (-log softmax(x)[target], logsumexp(x)) per row, (0, lse) for
// rows whose target is ignore_index; other targets must lie in [0, C). One kernel reads the
// logits once; its backward writes d logits in their dtype (CrossEntropyBackward). Devices
// that have the kernels say so with the "cross_entropy" feature (nn::cross_entropy asks).
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Loc loc);

// Causal or full self-attention over a fused projection qkv [B, T, 3, H, D] (q, k, v the
// three slices of dim 2, heads in dim 3): the result [B, H, T, D] is
// scaled_dot_product_attention's, and the gradient of qkv comes back as one view of the
// backward kernel's output (a GPT's q/k/v split, without reassembling three gradients).
Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, bool causal, Loc loc);

std::vector<int> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op, Loc loc);
void check_defined(const Tensor& t, const char* op, Loc loc);
void check_floating(const Tensor& t, const char* op, Loc loc);

}  // namespace alk
