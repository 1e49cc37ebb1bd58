#include "backend/cuda/launch.h"

#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "expr/emit.h"

namespace alk::cuda {

KView kview(const Shape& shape, const Shape& strides, int64_t offset) {
  KView v;
  v.offset = offset;
  v.rank = static_cast<int32_t>(shape.size());
  bool contiguous = true;
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    v.shape[d] = shape[d];
    v.strides[d] = strides[d];
    if (shape[d] != 1 && strides[d] != expect) contiguous = false;
    expect *= shape[d];
  }
  v.contiguous = contiguous;
  return v;
}

CUdeviceptr device_ptr(const Buffer& b) { return reinterpret_cast<CUdeviceptr>(b.handle); }

Arg arg_of(const KernelArg& a) {
  if (!a.buffer) fail("a kernel argument without a buffer");
  if (a.buffer->device->info().kind != "cuda") fail("a kernel argument on " + a.buffer->device->name() + ", not CUDA");
  return Arg{device_ptr(*a.buffer) + a.byte_offset, a.dtype, a.shape, a.strides, a.offset};
}

const char* acc_type(DType t) {
  switch (t) {
    case DType::F64: return "double";
    case DType::F16: case DType::BF16: case DType::F32: return "float";
    case DType::Bool: return "int";
    case DType::U8: case DType::I32: case DType::I64: return "long long";
  }
  return "?";
}

const char* raw_type(DType t) {
  switch (dtype_size(t)) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "unsigned long long";
  }
}

std::string storage(DType t) { return expr::cuda_storage_type(t); }

const char* compute_ctype(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: case DType::I32: case DType::I64: return "long long";
    case DType::F16: case DType::BF16: case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

std::string load_as_compute(DType t, const std::string& raw) {
  switch (t) {
    case DType::Bool: return "(" + raw + " != 0)";
    case DType::F16: return "__half2float(" + raw + ")";
    case DType::BF16: return "__bfloat162float(" + raw + ")";
    case DType::U8: case DType::I32: return "(long long)" + raw;
    case DType::I64: case DType::F32: case DType::F64: return raw;
  }
  return raw;
}

uint64_t bits_of(DType t, double value) {
  uint64_t bits = 0;
  switch (t) {
    case DType::F32: { float f = static_cast<float>(value); std::memcpy(&bits, &f, 4); break; }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::F16: bits = f32_to_f16(static_cast<float>(value)); break;
    case DType::BF16: bits = f32_to_bf16(static_cast<float>(value)); break;
    case DType::Bool: bits = value != 0; break;
    case DType::U8: bits = static_cast<uint8_t>(static_cast<int64_t>(value)); break;
    case DType::I32: { int32_t i = static_cast<int32_t>(value); std::memcpy(&bits, &i, 4); break; }
    case DType::I64: { int64_t i = static_cast<int64_t>(value); std::memcpy(&bits, &i, 8); break; }
  }
  return bits;
}

std::string defines(std::initializer_list<std::pair<const char*, std::string>> d) {
  std::string s;
  for (auto& [name, value] : d) s += std::string("#define ") + name + " " + value + "\n";
  return s;
}

std::string kernel_source(const std::string& defs, std::string_view body) {
  return defs + std::string(sources::common) + "\n" + std::string(body);
}

unsigned blocks_for(const Context& ctx, int64_t items, int64_t per_block) {
  const int64_t want = (items + per_block - 1) / per_block;
  // Enough blocks for many loads in flight per SM (grid-stride loops cover the rest).
  const int64_t cap = static_cast<int64_t>(std::max(1, ctx.props().multiprocessors)) * 256;
  return static_cast<unsigned>(std::clamp<int64_t>(want, 1, cap));
}

const std::string& op_name_of(const Kernel& k, const char* fallback) {
  static thread_local std::string s;
  s = k.node.name.empty() ? fallback : k.node.name;
  return s;
}

void check_index_dtype(const Kernel& k, const char* op, DType t) {
  if (t != DType::I64 && t != DType::I32)
    alk::fail(op_name_of(k, op), k.node.loc, std::string("index must be i64 or i32, got ") + std::string(dtype_name(t)));
}

}  // namespace alk::cuda
