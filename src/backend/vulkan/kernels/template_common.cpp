#include "backend/vulkan/kernels/template_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"

namespace alk::vk::kernels {

uint32_t Launch::bind(const ViewArg& v, bool write) {
  const BoundView b = bind_view(ctx_, v, write);
  bindings_.push_back(b.binding);
  return b.first;
}

void Launch::u(uint64_t v) {
  if (v > std::numeric_limits<uint32_t>::max()) fail("a kernel parameter " + std::to_string(v) + " beyond 32 bits");
  params_.push_back(static_cast<uint32_t>(v));
}

void Launch::i(int64_t v) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail("a kernel parameter " + std::to_string(v) + " beyond 32 bits");
  params_.push_back(static_cast<uint32_t>(static_cast<int32_t>(v)));
}

std::string Launch::preamble() const {
  std::string s = "layout(local_size_x = 256) in;\n";
  if (push()) {
    s += "layout(push_constant) uniform Params { uint p_[" + std::to_string(std::max<size_t>(1, params_.size())) +
         "]; };\n";
  } else {
    s += "layout(std430, binding = " + std::to_string(bindings_.size()) + ") readonly buffer Params { uint p_[]; };\n";
  }
  s += "#define P(k) p_[k]\n#define PI(k) int(p_[k])\n";
  return s;
}

void Launch::dispatch(Encoder& enc, const std::string& body, uint32_t groups) {
  const bool in_push = push();
  std::vector<Binding> bindings = bindings_;
  if (!in_push) {
    std::shared_ptr<Allocation> pbuf = ctx_.pool().allocate(params_.size() * 4);
    ctx_.stream().upload(pbuf, 0, params_.data(), params_.size() * 4);
    bindings.push_back(Binding{pbuf, 0, params_.size() * 4, false});
  }
  const uint32_t push_bytes = in_push ? static_cast<uint32_t>(std::max<size_t>(1, params_.size()) * 4) : 0;
  const Pipeline& pipeline = ctx_.pipeline(body, static_cast<uint32_t>(bindings.size()), push_bytes);
  std::vector<uint8_t> push(push_bytes, 0);
  if (in_push && !params_.empty()) std::memcpy(push.data(), params_.data(), params_.size() * 4);
  enc.dispatch(pipeline, bindings, push, Groups{groups, 1, 1});
}

uint32_t groups_for(int64_t n) {
  return static_cast<uint32_t>(std::clamp<int64_t>((n + kGroupSize - 1) / kGroupSize, 1, 65535));
}

const char* storage_type(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1: return "uint8_t";
    case 2: return "uint16_t";
    case 4: return "uint";
    default: return "uvec2";
  }
}

std::string storage_extensions(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1: return "#extension GL_EXT_shader_8bit_storage : require\n";
    case 2: return "#extension GL_EXT_shader_16bit_storage : require\n";
    default: return "";
  }
}

std::string storage_reason(const Context& ctx, DType dtype) {
  const DeviceInfo& info = ctx.info();
  if (dtype_size(dtype) == 1 && !info.storage8) return info.name + " has no 8-bit storage (bool/u8 tensors)";
  if (dtype_size(dtype) == 2 && !info.storage16) return info.name + " has no 16-bit storage (f16/bf16 tensors)";
  return "";
}

std::pair<uint32_t, uint32_t> constant_bits(DType dtype, double value) {
  uint64_t bits = 0;
  switch (dtype) {
    case DType::F32: {
      const float f = static_cast<float>(value);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      bits = b;
      break;
    }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    // The conversions the CPU's stores make (backend/cpu/view.h's store_double).
    case DType::F16: bits = f32_to_f16(static_cast<float>(value)); break;
    case DType::BF16: bits = f32_to_bf16(static_cast<float>(value)); break;
    case DType::Bool: bits = value != 0 ? 1 : 0; break;
    case DType::U8: bits = static_cast<uint8_t>(static_cast<int64_t>(value)); break;
    case DType::I32: bits = static_cast<uint32_t>(static_cast<int32_t>(static_cast<int64_t>(value))); break;
    case DType::I64: bits = static_cast<uint64_t>(static_cast<int64_t>(value)); break;
  }
  return {static_cast<uint32_t>(bits), static_cast<uint32_t>(bits >> 32)};
}

std::string constant_expr(DType dtype, const std::string& lo, const std::string& hi) {
  switch (dtype_size(dtype)) {
    case 1: return "uint8_t(" + lo + ")";
    case 2: return "uint16_t(" + lo + ")";
    case 4: return lo;
    default: return "uvec2(" + lo + ", " + hi + ")";
  }
}

std::string arithmetic_glsl(DType dtype) {
  switch (dtype) {
    case DType::F32: return "#define ACC float\n#define LOAD(x) (x)\n#define STORE(a) (a)\n#define ROUND(a) (a)\n";
    case DType::F64: return "#define ACC double\n#define LOAD(x) (x)\n#define STORE(a) (a)\n#define ROUND(a) (a)\n";
    case DType::I32: return "#define ACC int\n#define LOAD(x) (x)\n#define STORE(a) (a)\n#define ROUND(a) (a)\n";
    case DType::BF16:
      return "float alk_bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }\n"
             "uint alk_f32_to_bf16(float f) {\n"
             "  uint bits = floatBitsToUint(f);\n"
             "  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;  // quiet NaN\n"
             "  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;\n"
             "}\n"
             "#define ACC float\n#define LOAD(x) alk_bf16_to_f32(uint(x))\n"
             "#define STORE(a) uint16_t(alk_f32_to_bf16(a))\n#define ROUND(a) alk_bf16_to_f32(alk_f32_to_bf16(a))\n";
    case DType::F16:
      return "float alk_f16_to_f32(uint h) {\n"
             "  uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;\n"
             "  if (e == 0x1fu) bits = sign | 0x7f800000u | (mant << 13);\n"
             "  else if (e != 0u) bits = sign | ((e + 112u) << 23) | (mant << 13);\n"
             "  else if (mant == 0u) bits = sign;\n"
             "  else {  // subnormal: normalize\n"
             "    int k = -1;\n"
             "    do { ++k; mant <<= 1; } while ((mant & 0x400u) == 0u);\n"
             "    bits = sign | (uint(112 - k) << 23) | ((mant & 0x3ffu) << 13);\n"
             "  }\n"
             "  return uintBitsToFloat(bits);\n"
             "}\n"
             "uint alk_f32_to_f16(float f) {\n"
             "  uint bits = floatBitsToUint(f), sign = (bits >> 16) & 0x8000u, a = bits & 0x7fffffffu;\n"
             "  if (a > 0x7f800000u) return sign | 0x7e00u;\n"
             "  if (a >= 0x477ff000u) return sign | 0x7c00u;\n"
             "  if (a < 0x38800000u) {\n"
             "    if (a < 0x33000000u) return sign;\n"
             "    uint e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;\n"
             "    uint half_ = mant >> shift, rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);\n"
             "    if (rem > mid || (rem == mid && (half_ & 1u) != 0u)) ++half_;\n"
             "    return sign | half_;\n"
             "  }\n"
             "  return sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);\n"
             "}\n"
             "#define ACC float\n#define LOAD(x) alk_f16_to_f32(uint(x))\n"
             "#define STORE(a) uint16_t(alk_f32_to_f16(a))\n#define ROUND(a) alk_f16_to_f32(alk_f32_to_f16(a))\n";
    default:  // I64 as (lo, hi) words
      return "#define ACC uvec2\n#define LOAD(x) (x)\n#define STORE(a) (a)\n#define ROUND(a) (a)\n";
  }
}

std::string common_reason(const Context& ctx, const Kernel& k, size_t max_rank) {
  if (k.epilogue) return "no fused epilogue on Vulkan " + std::string(op_name(k.op)) + " kernels";
  if (k.output.shape.size() > max_rank)
    return "rank " + std::to_string(k.output.shape.size()) + " > " + std::to_string(max_rank);
  for (const KernelArg& a : k.inputs)
    if (a.shape.size() > max_rank) return "input rank " + std::to_string(a.shape.size()) + " > " + std::to_string(max_rank);
  if (numel(k.output.shape) > std::numeric_limits<int32_t>::max()) return "more than 2^31 elements (32-bit indices)";
  for (const KernelArg& a : k.inputs)
    if (std::string why = storage_reason(ctx, a.dtype); !why.empty()) return why;
  return storage_reason(ctx, k.output.dtype);
}

namespace {
bool contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) return false;
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}
}  // namespace

bool is_contiguous(const ViewArg& v) { return contiguous(v.shape, v.strides); }
bool is_contiguous(const KernelArg& a) { return contiguous(a.shape, a.strides); }

}  // namespace alk::vk::kernels
