#include "alk/dtype.h"

#include <algorithm>

namespace alk {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: return 1;
    case DType::F16: case DType::BF16: return 2;
    case DType::I32: case DType::F32: return 4;
    case DType::I64: case DType::F64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
  }
  return "?";
}

bool is_floating(DType t) { return t >= DType::F16; }
bool is_integral(DType t) { return t == DType::U8 || t == DType::I32 || t == DType::I64; }

DType promote(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no common 16-bit type: both fit in f32.
  if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16)) return DType::F32;
  return std::max(a, b);
}

DType to_floating(DType t) { return is_floating(t) ? t : DType::F32; }

ComputeType compute_type(DType t) {
  switch (t) {
    case DType::Bool: return ComputeType::Bool;
    case DType::U8: case DType::I32: case DType::I64: return ComputeType::I64;
    case DType::F16: case DType::BF16: case DType::F32: return ComputeType::F32;
    case DType::F64: return ComputeType::F64;
  }
  return ComputeType::F32;
}

std::string_view compute_type_name(ComputeType t) {
  switch (t) {
    case ComputeType::Bool: return "bool";
    case ComputeType::I64: return "i64";
    case ComputeType::F32: return "f32";
    case ComputeType::F64: return "f64";
  }
  return "?";
}

}  // namespace alk
