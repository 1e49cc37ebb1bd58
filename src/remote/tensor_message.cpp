#include "remote/tensor_message.h"

#include <limits>

#include "graph/graph.h"
#include "opspecs/op_specs.h"

namespace alk::remote {

void tensor_to_message(const Tensor& t, TensorMsg& out) {
  out.set_dtype(static_cast<uint32_t>(t.dtype()));
  for (int64_t d : t.shape()) out.add_shape(d);
  const std::vector<unsigned char> bytes = host_bytes(t);
  out.set_data(bytes.data(), bytes.size());
}

Tensor tensor_from_message(const TensorMsg& m, Loc loc) {
  check(m.dtype() < static_cast<uint32_t>(kNumDTypes), "remote", loc, "a tensor of dtype ", m.dtype());
  check(m.shape_size() <= 16, "remote", loc, "a tensor of rank ", m.shape_size());
  const auto dtype = static_cast<DType>(m.dtype());
  Shape shape(m.shape().begin(), m.shape().end());
  uint64_t n = 1;
  for (int64_t d : shape) {
    check(d >= 0 && (d == 0 || n <= std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d)), "remote", loc,
          "a tensor of shape ", to_string(shape));
    n *= static_cast<uint64_t>(d);
  }
  check(n * dtype_size(dtype) == m.data().size(), "remote", loc, "a ", dtype_name(dtype), " tensor of shape ",
        to_string(shape), " needs ", n * dtype_size(dtype), " bytes, the message holds ", m.data().size());
  return from_bytes(m.data().data(), m.data().size(), shape, dtype, loc);
}

void call_op_message(const CallOpRequest& req, Device& device, uint64_t max_bytes, CallOpReply& reply) {
  uint64_t bytes = 0;
  for (const TensorMsg& t : req.inputs()) bytes += t.data().size();
  check(bytes <= max_bytes, req.op(), Loc::current(), "inputs of ", bytes, " bytes exceed this token's quota of ",
        max_bytes);
  check(req.attributes_json().size() <= 65536, req.op(), Loc::current(), "attributes of ", req.attributes_json().size(),
        " bytes");
  DeviceGuard on_cpu(cpu_device());
  std::vector<Tensor> inputs;
  for (const TensorMsg& t : req.inputs()) inputs.push_back(tensor_from_message(t).to(device));
  const Tensor out = opspecs::call_op(req.op(), inputs, req.attributes_json()).to(cpu_device());
  tensor_to_message(out, *reply.add_outputs());
}

}  // namespace alk::remote
