// The remote server's decoding of untrusted messages (src/remote/wire.cpp, tensor_message.cpp):
// the first byte picks the message, the rest is its protobuf bytes. A KernelMsg is decoded
// against two 256-byte CPU buffers (handles 1 and 2); every window of a kernel that decodes must
// lie inside its buffer. A TensorMsg must decode to its declared size or raise alk::Error.
// Without gRPC (ALK_HAVE_REMOTE unset) there is nothing to fuzz and every input passes.
#include <cstdint>
#include <cstdlib>
#include <memory>

#ifdef ALK_HAVE_REMOTE
#include "alk/device.h"
#include "remote/tensor_message.h"
#include "remote/wire.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#ifdef ALK_HAVE_REMOTE
  if (size < 1) return 0;
  static const std::shared_ptr<alk::Buffer> buffers[2] = {alk::cpu_device().allocate(256),
                                                           alk::cpu_device().allocate(256)};
  const alk::remote::BufferOf lookup = [](uint64_t handle) {
    alk::check(handle == 1 || handle == 2, "remote", alk::Loc::current(), "no buffer ", handle);
    return buffers[handle - 1];
  };
  if (data[0] % 2 == 0) {
    alk::remote::KernelMsg m;
    if (!m.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    alk::Kernel k;
    try {
      k = alk::remote::decode_kernel(m, lookup);
    } catch (const alk::Error&) {
      return 0;
    }
    auto inside = [](const alk::KernelArg& a) {
      const alk::remote::ByteSpan s = alk::remote::window_bytes(a);
      if (s.end > s.first && (!a.buffer || s.end > a.buffer->bytes)) std::abort();
    };
    inside(k.output);
    for (const alk::KernelArg& a : k.inputs) inside(a);
    for (const alk::KernelArg& a : k.epilogue_inputs) inside(a);
    for (const alk::ExtraOutput& e : k.extra_outputs) inside(e.arg);
  } else {
    alk::remote::TensorMsg m;
    if (!m.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    try {
      const alk::Tensor t = alk::remote::tensor_from_message(m);
      if (static_cast<size_t>(t.numel()) * alk::dtype_size(t.dtype()) != m.data().size()) std::abort();
    } catch (const alk::Error&) {
    }
  }
#else
  (void)data, (void)size;
#endif
  return 0;
}
