// Element types, their sizes, and the type promotion rule (docs/dtypes.md).
#pragma once
#include <cstdint>
#include <string_view>

namespace alk {

// Order matters: promotion picks the larger of two types within a category.
enum class DType : uint8_t { Bool, U8, I32, I64, F16, BF16, F32, F64 };
inline constexpr int kNumDTypes = 8;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
bool is_floating(DType t);
bool is_integral(DType t);  // u8 i32 i64 (not bool)

// The type arithmetic between a and b produces (PyTorch's rules for tensors of
// equal standing): bool < u8 < i32 < i64 < f16/bf16 < f32 < f64, with f16 and
// bf16 together promoting to f32.
DType promote(DType a, DType b);
// The float type a Float-rule op (exp, div, mean) produces: ints and bool give f32.
DType to_floating(DType t);

// How a value of type t is held while computing: f16/bf16 are computed in f32,
// every integer and bool type in i64 (stores wrap to the storage width).
enum class ComputeType : uint8_t { Bool, I64, F32, F64 };
ComputeType compute_type(DType t);
std::string_view compute_type_name(ComputeType t);

}  // namespace alk
