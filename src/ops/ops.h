// Internal helpers shared by the op implementations in src/ops/.
#pragma once
#include <string>
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
std::vector<int> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op, Loc loc);
void check_defined(const Tensor& t, const char* op, Loc loc);
void check_floating(const Tensor& t, const char* op, Loc loc);

}  // namespace alk
