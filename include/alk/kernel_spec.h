// A kernel from the user's source text (CuPy's RawKernel, webgpu-torch's KernelSpec): the
// spec says what goes in and out and how many times the body runs; the body is the user's,
// one per target language. alk writes everything around it (bindings, the index, sizes,
// attributes, the entry point and its grid-stride loop), as it does for its own template
// kernels, and runs it through the scheduler as the template op OpId::UserKernel.
//
// What a body sees, in every language (NAME: a tensor or attribute of the spec):
//   i               the invocation, 0 <= i < the grid's count
//                   (C++ int64_t, CUDA long long, GLSL uint, WGSL u32)
//   NAME[j]         element j of a tensor, row-major and contiguous; inputs are read-only
//   NAME_numel      the tensor's element count; NAME_size0, NAME_size1, ...: its dims
//                   (C++ int64_t, CUDA long long, GLSL uint, WGSL u32)
//   NAME            an attribute's value, in its dtype
// Element types: f32 float (WGSL f32), i32 int32_t / int / i32, and in C++ and CUDA also
// f64 double, i64 int64_t (long long), u8 uint8_t (unsigned char), bool. GLSL and WGSL bodies
// take f32 and i32 tensors and attributes (a u32 is an i32's bit pattern: uint(x), bitcast<u32>).
// C++ and CUDA bodies have the fixed-width integer names (uint32_t, int64_t, ...: alk declares
// them for NVRTC), so one text can serve both. Functions, constants and macros of the body's
// own go in `helpers` (text placed before the body's function, per target).
//
// The C++ body is required: the CPU runs it, and it is the reference the other targets are
// tested against. A device whose language has no body refuses the kernel (supports() is
// false; the error names the kernel and the device). The CPU compiles the C++ with the host
// compiler (the JIT's, alk/cpu.h's ALK_CXX), Vulkan the GLSL with shaderc, CUDA the CUDA C
// with NVRTC, each through its kernel cache; a body that does not compile raises alk::Error
// with the compiler's message at the body's own line numbers and the file:line where the
// kernel was called and defined.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "alk/dtype.h"
#include "alk/error.h"

namespace alk {

using Shape = std::vector<int64_t>;

enum class KernelTarget : uint8_t { Cpp, Cuda, Glsl, Wgsl };
inline constexpr int kNumKernelTargets = 4;
const char* kernel_target_name(KernelTarget t);  // "C++", "CUDA", "GLSL", "WGSL"

struct KernelTensor {
  std::string name;
  DType dtype = DType::F32;
  int rank = -1;  // inputs: the rank required (checked before the kernel is recorded), -1 any
};

struct KernelAttr {
  std::string name;
  DType dtype = DType::I32;  // i32, i64, f32 or f64
};

// The rules below see the inputs' shapes and the attributes' values (in the spec's order).
using KernelShapeRule = std::function<Shape(std::span<const Shape> inputs, std::span<const double> attrs)>;
using KernelCountRule = std::function<int64_t(std::span<const Shape> inputs, std::span<const double> attrs)>;

struct KernelSpec {
  std::string name;  // an identifier: errors, ALK_DEBUG=timing and `alk ops` show it
  std::vector<KernelTensor> inputs;
  KernelTensor output;
  KernelShapeRule output_shape;  // unset: the first input's shape
  std::vector<KernelAttr> attrs;
  // The grid: how many invocations run the body. Unset: one per output element.
  KernelCountRule invocations;
  int workgroup_size = 64;  // threads per CUDA block / GLSL and WGSL workgroup
  // Bodies by target, indexed by KernelTarget ("" where there is none); helpers likewise.
  std::string body[kNumKernelTargets];
  std::string helpers[kNumKernelTargets];
  Loc defined_at;  // where the kernel was defined (UserKernel's constructor sets it)

  const std::string& body_for(KernelTarget t) const { return body[static_cast<int>(t)]; }
};

// The source alk compiles for `spec` on target t, with tensors of the given ranks (inputs,
// then the output): the user's body inside alk's bindings and entry point. The entry point
// and its arguments, per target:
//   C++   extern "C" void alk_user_kernel(void* const* tensors, const int64_t* sizes,
//                                         const double* attrs, int64_t begin, int64_t end)
//         runs invocations [begin, end); sizes: each tensor's numel then its dims, in order
//   CUDA  extern "C" __global__ alk_user_kernel(tensors..., sizes..., attrs..., long long count)
//   GLSL  bindings 0..N-1 the tensors (element 0 at the binding's start), then the params
//         (uint words: each tensor's numel and dims, the attributes' bits, the count) in push
//         constants when they fit 128 bytes, else a storage buffer bound last
//   WGSL  @group(0) bindings 0..N-1 the tensors, binding N the params as array<u32>
// Raises alk::Error when the spec has no body for t.
std::string user_kernel_source(const KernelSpec& spec, KernelTarget t, std::span<const int> ranks);
// The number of params words of the GLSL/WGSL entry point for these ranks.
size_t user_kernel_param_words(const KernelSpec& spec, std::span<const int> ranks);
// The compiler's message about the body (lines "<name> body:LINE..." as the #line directives
// spell them) as an alk::Error naming the kernel, the target, its body's line and where it was
// called (`loc`) and defined.
[[noreturn]] void fail_user_kernel_compile(const KernelSpec& spec, KernelTarget t, const std::string& compiler_log,
                                           Loc loc);

}  // namespace alk
