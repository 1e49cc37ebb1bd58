// f16 in the WGSL the emitters write (the Map emitter here, src/webgpu's template kernels).
// By default an f16 buffer is an array of u32 words holding two halves each, unpacked to f32
// and stored with atomics on the shared word: every WebGPU adapter runs that. While a
// WgslNativeF16 scope lives on this thread, f16 buffers are array<f16> under "enable f16;"
// (WebGPU's optional shader-f16 feature): plain loads and stores. The bytes are the same, so
// one buffer plan serves both variants (src/webgpu/plan.cpp emits both; the runtime picks).
#pragma once

namespace alk::expr {

class WgslNativeF16 {
 public:
  WgslNativeF16();
  ~WgslNativeF16();
  WgslNativeF16(const WgslNativeF16&) = delete;
  WgslNativeF16& operator=(const WgslNativeF16&) = delete;
  static bool active();  // on this thread

 private:
  bool previous_;
};

}  // namespace alk::expr
