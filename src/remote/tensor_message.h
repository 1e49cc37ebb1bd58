// Tensors in and out of the protocol's messages (contiguous little-endian bytes, checked against
// dtype and shape before anything is allocated), and the server's CallOp over the registry.
#pragma once
#include <cstdint>

#include "alk/tensor.h"
#include "remote/remote.pb.h"

namespace alk::remote {

void tensor_to_message(const Tensor& t, TensorMsg& out);
Tensor tensor_from_message(const TensorMsg& m, Loc loc = Loc::current());
// The server's CallOp: inputs (at most `max_bytes` together) onto `device`, the op, the result back.
void call_op_message(const CallOpRequest& req, Device& device, uint64_t max_bytes, CallOpReply& reply);

}  // namespace alk::remote
