// The `remote:HOST:PORT/DEVICE` device: the runtime Device interface forwarded to a server
// (`alk serve --ops`) over gRPC. Buffers live on the peer's device; kernels are sent as data
// and compiled there for its backend; launches, copies, uploads and frees queue here and go
// as one batch when the host waits (a download, synchronize) or the batch grows large, so a
// compiled step's replay and the read of its loss are one round trip. Errors of the peer come
// back as alk::Error with its message, at the wait that sent them, within ALK_REMOTE_TIMEOUT.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "alk/device.h"
#include "alk/kernel.h"
#include "remote/remote.grpc.pb.h"

namespace alk::remote {

// Where a remote device is: "remote:HOST[:PORT][/DEVICE]" (PORT 50051, DEVICE "cpu" if left
// out; an IPv6 HOST in brackets).
struct RemoteAddress {
  std::string host;
  int port = 50051;
  std::string device = "cpu";
  std::string target() const;  // "HOST:PORT" for gRPC
  std::string name() const;    // the device's canonical name
};
RemoteAddress parse_remote_name(std::string_view name, Loc loc = Loc::current());

// How the client connects: the token (ALK_REMOTE_TOKEN_FILE names its file), the seconds a call
// may take (ALK_REMOTE_TIMEOUT, default 60), TLS roots (ALK_REMOTE_TLS_CA: a PEM file; unset:
// plain TCP).
struct ClientOptions {
  std::string token;
  double timeout_seconds = 60;
  std::string tls_ca_pem;
  static ClientOptions from_environment(Loc loc = Loc::current());
};

std::shared_ptr<grpc::Channel> make_channel(const std::string& target, const ClientOptions& options,
                                            uint64_t max_message_bytes);

class RemoteDevice final : public Device {
 public:
  RemoteDevice(const RemoteAddress& address, ClientOptions options, Loc loc = Loc::current());
  ~RemoteDevice() override;  // closes the session (the server frees what it held)
  const DeviceInfo& info() const override { return info_; }

  std::shared_ptr<Buffer> allocate(size_t bytes) override;
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) override;
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes) override;
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) override;
  void synchronize() override;

  bool supports(const Kernel& k) const override;
  bool fuses_epilogue(OpId core) const override;
  bool widens_input(OpId op, size_t slot) const override;
  bool norm_backward_adds() const override;
  ExtraOutputs extra_outputs(OpId core) const override;
  std::shared_ptr<PreparedKernel> prepare(const Kernel& k) override;
  void launch(PreparedKernel& prepared, const Kernel& k) override;
  std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels) override;
  void replay(Recording& recording) override;

  // Round trips to the server since this device was made (a test and the bench count them).
  int64_t round_trips() const { return round_trips_.load(); }
  const std::string& peer() const { return target_; }

 protected:
  void free(void* handle, size_t bytes) noexcept override;

 private:
  friend struct RemoteRecording;
  uint64_t handle_of(const Buffer& b) const;
  // Sends what is queued plus `last` (if any); returns the reply's downloads. Raises the first
  // error the peer reports, or one naming the peer when it does not answer in time.
  std::vector<std::string> flush_locked(Command* last = nullptr, Loc loc = Loc::current());
  void queue_locked(Command&& c, Loc loc);
  // Copies [offset, offset + bytes) of the buffer from a queued upload that no queued command
  // after it may overwrite; false when there is none (the bytes must come from the peer).
  bool read_pending_upload_locked(uint64_t handle, size_t offset, void* dst, size_t bytes) const;
  void keep_lease();

  DeviceInfo info_;
  std::string target_;
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Remote::Stub> stub_;
  uint64_t session_ = 0;
  uint64_t max_message_bytes_ = 0;
  std::vector<OpSupportMsg> support_;
  std::vector<bool> fuses_epilogue_;
  std::vector<uint32_t> extra_outputs_, widens_input_;
  bool norm_backward_adds_ = false;

  std::mutex mutex_;
  Batch pending_;
  std::vector<Loc> pending_locs_;  // where each queued command came from (a kernel's op's caller)
  uint64_t pending_bytes_ = 0;
  uint64_t next_handle_ = 0;
  std::atomic<int64_t> round_trips_{0};

  std::mutex lease_mutex_;
  std::condition_variable lease_wake_;
  bool closing_ = false;
  double lease_seconds_ = 30;
  std::thread lease_thread_;
};

}  // namespace alk::remote
