#include "remote/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "opspecs/op_specs.h"
#include "remote/tensor_message.h"
#include "remote/wire.h"

namespace alk::remote {

namespace {
void prepare_context(grpc::ClientContext& ctx, const ClientOptions& o) {
  ctx.AddMetadata("authorization", "Bearer " + o.token);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(
                       std::chrono::duration<double>(o.timeout_seconds)));
}
}  // namespace

OpsClient::OpsClient(std::string target, ClientOptions options)
    : target_(std::move(target)), options_(std::move(options)) {
  channel_ = make_channel(target_, options_, kDefaultMaxMessageBytes);
  stub_ = Remote::NewStub(channel_);
}

std::string OpsClient::list_ops(Loc loc) const { return describe("", loc); }

std::string OpsClient::describe(std::string_view op, Loc loc) const {
  grpc::ClientContext ctx;
  prepare_context(ctx, options_);
  ListOpsRequest req;
  req.set_name(std::string(op));
  ListOpsReply reply;
  const grpc::Status st = stub_->ListOps(&ctx, req, &reply);
  check(st.ok(), op.empty() ? "ops" : std::string(op), loc, "the peer ", target_, ": ", st.error_message());
  return reply.json();
}

Tensor OpsClient::call(std::string_view op, const std::vector<Tensor>& inputs, std::string_view attributes_json,
                       std::string_view device, Loc loc) const {
  CallOpRequest req;
  req.set_op(std::string(op));
  req.set_device(std::string(device));
  req.set_attributes_json(std::string(attributes_json));
  for (const Tensor& t : inputs) tensor_to_message(t, *req.add_inputs());
  grpc::ClientContext ctx;
  prepare_context(ctx, options_);
  CallOpReply reply;
  const grpc::Status st = stub_->CallOp(&ctx, req, &reply);
  check(st.ok(), std::string(op), loc, "on ", target_, "/", device, ": ", st.error_message());
  check(reply.outputs_size() == 1, std::string(op), loc, "the peer ", target_, " returned ", reply.outputs_size(),
        " tensors");
  DeviceGuard on_cpu(cpu_device());
  return tensor_from_message(reply.outputs(0), loc);
}

}  // namespace alk::remote
