// Kernels and device answers in and out of the protocol's messages (remote.proto). Encoding
// trusts the Kernel (the client's scheduler made it); decoding trusts nothing: every enum,
// expression node, handle and strided window is checked before a device sees the kernel.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "alk/kernel.h"
#include "remote/remote.pb.h"

namespace alk::remote {

// The handle the peer knows a buffer by (0: none).
using HandleOf = std::function<uint64_t(const Buffer&)>;
// The buffer behind a handle on the server; throws alk::Error for a handle the session does not hold.
using BufferOf = std::function<std::shared_ptr<Buffer>(uint64_t handle)>;

void encode_kernel(const Kernel& k, const HandleOf& handle_of, KernelMsg& out);
// Raises alk::Error (op "remote") naming what is malformed: an op, dtype or expression node
// out of range, a window that reaches outside its buffer, a Map input not of the output's shape.
Kernel decode_kernel(const KernelMsg& m, const BufferOf& buffer_of);

// Bytes a strided window spans inside its buffer: [first, end) from the buffer's start;
// {0, 0} for an empty window. Raises alk::Error when the arithmetic overflows.
struct ByteSpan {
  uint64_t first = 0, end = 0;
};
ByteSpan window_bytes(const KernelArg& a);

// How many bytes a message may carry by default (both sides raise gRPC's 4 MiB limit to it).
inline constexpr uint64_t kDefaultMaxMessageBytes = 64ull << 20;

}  // namespace alk::remote
