// What the hand-written template kernels in this directory share: a params block (uint
// words, in push constants when they fit 128 bytes, else a storage buffer bound last),
// GLSL for element storage by size, and a dispatch helper with a grid-stride loop.
//
// Shader convention (vulkan_device.h): bindings 0..N-1 are the kernel's tensors, each
// bound through bind_view() with its element offset in the params; the params follow.
// Every shader here starts with template_preamble(), which declares P(i) (params word i)
// and the loop bound/stride helpers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/vulkan/map_kernel.h"
#include "alk/kernel.h"

namespace alk::vk {

class Context;

namespace kernels {

constexpr uint32_t kGroupSize = 256;
constexpr size_t kPushWords = 32;  // 128 bytes: what every device offers

// Params and bindings of one dispatch, built in the order the shader expects.
class Launch {
 public:
  explicit Launch(Context& ctx) : ctx_(ctx) {}
  // Binds a tensor (the next binding) and returns its element offset in the binding.
  uint32_t bind(const ViewArg& v, bool write);
  void bind_raw(Binding b) { bindings_.push_back(std::move(b)); }
  void u(uint64_t v);  // fails beyond 32 bits
  void i(int64_t v);   // fails beyond 32 bits (signed)
  size_t words() const { return params_.size(); }
  size_t bindings() const { return bindings_.size(); }
  bool push() const { return params_.size() <= kPushWords; }
  // The preamble for a shader with this launch's bindings and params (call after every
  // bind()/u()/i(): the params' size picks push constants or a buffer).
  std::string preamble() const;
  // Compiles `body` (after the preamble) once and records it over `groups` groups.
  void dispatch(Encoder& enc, const std::string& body, uint32_t groups);

 private:
  Context& ctx_;
  std::vector<Binding> bindings_;
  std::vector<uint32_t> params_;
};

// Enough groups of kGroupSize to cover n with a grid-stride loop, at most 65535.
uint32_t groups_for(int64_t n);

// GLSL type holding one element of `dtype` as raw bits (uint8_t, uint16_t, uint, uvec2),
// and the #extension lines it needs.
const char* storage_type(DType dtype);
std::string storage_extensions(DType dtype);
// "" when the device can bind tensors of dtype, else why not.
std::string storage_reason(const Context& ctx, DType dtype);
// The raw bits of `value` stored as dtype (a pad value, one_hot's 1), as uvec2 words
// (lo, hi); elements narrower than 8 bytes use the low bits of lo.
std::pair<uint32_t, uint32_t> constant_bits(DType dtype, double value);
// GLSL expression for a constant element of dtype from params words lo_word, hi_word.
std::string constant_expr(DType dtype, const std::string& lo, const std::string& hi);

// Arithmetic on a float dtype's elements: GLSL defining ACC (the type sums run in), LOAD(x)
// (a stored element -> ACC), STORE(a) (ACC -> a stored element), and ROUND(a) (a value as
// the dtype holds it: what the CPU's store-then-load of an f16/bf16 sum gives). f16/bf16
// compute in float with the CPU's own conversions (core/half.h: round to nearest even,
// subnormals kept), so results match it bit for bit; f32/f64 are themselves.
// Supported: F32, F64, F16, BF16, I32, I64 (integers wrap: ROUND is the identity).
std::string arithmetic_glsl(DType dtype);

// Common checks of a template kernel: no epilogue, rank, numel in 32 bits.
std::string common_reason(const Context& ctx, const Kernel& k, size_t max_rank = 8);

// Views of contiguous shape `shape` over a tensor (for outputs written in element order).
bool is_contiguous(const ViewArg& v);
bool is_contiguous(const KernelArg& a);  // the same, without touching its buffer (supports())

// Every GLSL loop of these kernels: for (uint i = first(); i < n; i += step()).
inline const char* kLoop = "for (uint i = gl_GlobalInvocationID.x; i < n; i += gl_NumWorkGroups.x * 256u)";

}  // namespace kernels
}  // namespace alk::vk
