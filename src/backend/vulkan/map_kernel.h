// Fused elementwise (Map) kernels on Vulkan: the GLSL the expression emitter writes
// (src/expr/emit_glsl.cpp, contract in src/expr/emit.h), compiled once per source and
// dispatched over strided, offset, broadcast views.
//
// How a view binds: storage buffers bind only at multiples of the binding alignment
// (max(minStorageBufferOffsetAlignment, 64)), so each argument binds at the aligned byte
// offset at or below the first element it touches, over exactly the bytes up to the last
// one it touches, and the distance from the binding's start to its element 0 goes to the
// kernel as offset[k] (in elements). Strides may be negative or zero.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "alk/dtype.h"
#include "backend/vulkan/stream.h"
#include "expr/emit.h"

namespace alk::vk {

class Context;
struct Pipeline;

// A tensor argument as a kernel sees it: `shape` is the output's (broadcast dims have
// stride 0); element (c_0, ..) is at byte byte_offset + (offset + sum c_d * strides[d]) * size.
struct ViewArg {
  std::shared_ptr<Allocation> alloc;
  size_t byte_offset = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
};

// Where a view binds: `binding` covers the bytes it touches from an aligned offset, and
// `first` is its element 0 counted from the binding's start (the value a kernel adds to
// every index: Map kernels' offset[k], and template kernels' by the same convention).
// Throws alk::Error when the view leaves its allocation or a limit (32-bit offsets,
// maxStorageBufferRange) is exceeded.
struct BoundView {
  Binding binding;
  uint32_t first = 0;
};
BoundView bind_view(const Context& ctx, const ViewArg& a, bool write);

// Why device `info` cannot run this kernel source ("" when it can): f64/i64 arithmetic,
// 8/16-bit storage, the number of buffers.
std::string map_unsupported_reason(const Context& ctx, const std::string& glsl, size_t bindings);

class MapKernel {
 public:
  // Emits the GLSL and builds the pipeline (compiled once per source; see shader.h).
  // Throws alk::Error when the device cannot run it (map_unsupported_reason).
  MapKernel(Context& ctx, const expr::Expr& e, const expr::MapSignature& sig);
  // The same from GLSL the emitter wrote for `sig` earlier (the golden files' test runs them).
  MapKernel(Context& ctx, std::string glsl, const expr::MapSignature& sig);
  // Records out = e(inputs) into `enc` (the context's stream, or a Recording).
  void launch(Encoder& enc, std::span<const ViewArg> inputs, const ViewArg& out) const;
  const std::string& source() const { return source_; }
  bool push_constants() const { return push_; }
  // Whether the last launch ran the vector loop (tests: the layouts that must, and must not).
  bool last_launch_vectorized() const { return last_vectorized_; }

 private:
  Context& ctx_;
  expr::MapSignature sig_;
  std::string source_;
  bool push_ = true;
  // The source has the vector loop (all operands 32-bit); ALK_VK_MAP_SCALAR=1 never takes it.
  bool vector_path_ = false;
  mutable bool last_vectorized_ = false;
  const Pipeline* pipeline_ = nullptr;
};

}  // namespace alk::vk
