// Calling the operations registry of a server (`alk serve --ops`) by name:
//
//     alk::remote::OpsClient peer("127.0.0.1:50051");   // token from ALK_REMOTE_TOKEN_FILE
//     Tensor c = peer.call("matmul", {a, b});          // runs on the peer's "cpu"
//     Tensor s = peer.call("softmax", {x}, R"({"dim": -1})", "cuda:0");
//
// The inputs travel to the peer, the op runs on the peer's device, the result comes back as a
// CPU tensor. For whole programs with buffers kept on the peer, use the remote:HOST:PORT/DEVICE
// device instead (remote_device.h).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alk/tensor.h"
#include "remote/remote_device.h"

namespace alk::remote {

class OpsClient {
 public:
  explicit OpsClient(std::string target, ClientOptions options = ClientOptions::from_environment());
  // `alk ops --json` of the peer.
  std::string list_ops(Loc loc = Loc::current()) const;
  // One op's JSON Schema.
  std::string describe(std::string_view op, Loc loc = Loc::current()) const;
  // op(inputs, attributes) on the peer's `device`; raises alk::Error with the peer's message.
  Tensor call(std::string_view op, const std::vector<Tensor>& inputs, std::string_view attributes_json = "",
              std::string_view device = "cpu", Loc loc = Loc::current()) const;

 private:
  std::string target_;
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Remote::Stub> stub_;
};

}  // namespace alk::remote
