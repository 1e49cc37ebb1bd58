#include "remote/remote_device.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "alk/op_registry.h"
#include "remote/server.h"
#include "remote/wire.h"
#include "runtime/device.h"

namespace alk::remote {

namespace {

std::chrono::system_clock::time_point deadline_in(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(seconds));
}

std::string status_text(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "no answer in time (" + st.error_message() + ")";
    case grpc::StatusCode::UNAVAILABLE: return "unreachable (" + st.error_message() + ")";
    case grpc::StatusCode::UNAUTHENTICATED: return "refused the token: " + st.error_message();
    default: return st.error_message() + " (gRPC status " + std::to_string(static_cast<int>(st.error_code())) + ")";
  }
}

const char* command_name(const Command& c) {
  switch (c.command_case()) {
    case Command::kAllocate: return "allocate";
    case Command::kFree: return "free";
    case Command::kUpload: return "upload";
    case Command::kDownload: return "download";
    case Command::kCopy: return "copy";
    case Command::kLaunch: return "launch";
    case Command::kRecord: return "record";
    case Command::kReplay: return "replay";
    case Command::kReleaseRecording: return "release_recording";
    case Command::kSynchronize: return "synchronize";
    case Command::COMMAND_NOT_SET: break;
  }
  return "command";
}

}  // namespace

std::string RemoteAddress::target() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string RemoteAddress::name() const { return "remote:" + target() + "/" + device; }

RemoteAddress parse_remote_name(std::string_view name, Loc loc) {
  check(name.rfind("remote:", 0) == 0, "device", loc, "'", name, "' is not a remote device name (remote:HOST:PORT/DEVICE)");
  std::string_view rest = name.substr(7);
  RemoteAddress a;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    a.device = std::string(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
    check(!a.device.empty(), "device", loc, "'", name, "' names no device after '/'");
  }
  std::string_view port;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    check(close != std::string_view::npos, "device", loc, "'", name, "': an IPv6 host without its ']'");
    a.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      check(rest[0] == ':', "device", loc, "'", name, "': expected ':PORT' after the host");
      port = rest.substr(1);
    }
  } else {
    const size_t colon = rest.find(':');
    a.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  check(!a.host.empty(), "device", loc, "'", name, "' names no host (remote:HOST:PORT/DEVICE)");
  if (!port.empty()) {
    int p = 0;
    for (char c : port) {
      check(c >= '0' && c <= '9' && p <= 65535, "device", loc, "'", name, "': the port '", port, "' is not a number in [1, 65535]");
      p = p * 10 + (c - '0');
    }
    check(p >= 1 && p <= 65535, "device", loc, "'", name, "': the port ", p, " is not in [1, 65535]");
    a.port = p;
  }
  return a;
}

ClientOptions ClientOptions::from_environment(Loc loc) {
  ClientOptions o;
  const char* token_file = std::getenv("ALK_REMOTE_TOKEN_FILE");
  check(token_file && *token_file, "remote", loc,
        "a remote device needs a token: set ALK_REMOTE_TOKEN_FILE to the file holding it");
  o.token = read_client_token(token_file);
  if (const char* t = std::getenv("ALK_REMOTE_TIMEOUT"); t && *t) {
    char* end = nullptr;
    o.timeout_seconds = std::strtod(t, &end);
    check(end && *end == '\0' && o.timeout_seconds > 0, "remote", loc, "ALK_REMOTE_TIMEOUT must be seconds > 0, got '", t, "'");
  }
  if (const char* ca = std::getenv("ALK_REMOTE_TLS_CA"); ca && *ca) {
    std::ifstream in(ca);
    check(in.good(), "remote", loc, "cannot read ALK_REMOTE_TLS_CA=", ca);
    o.tls_ca_pem.assign(std::istreambuf_iterator<char>(in), {});
  }
  return o;
}

std::shared_ptr<grpc::Channel> make_channel(const std::string& target, const ClientOptions& options,
                                            uint64_t max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes + (1 << 20)));
  args.SetMaxSendMessageSize(static_cast<int>(max_message_bytes + (1 << 20)));
  // A peer that went away is found by the next call's deadline; between calls the connection
  // is re-established at once rather than after gRPC's growing back-off.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Bulk uploads and downloads: a flow-control window that lets a chunk stream without waiting
  // for window updates (gRPC's default starts at 64 KiB and grows by probing).
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls_ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

// The kernels of a recording keep their buffers alive here as the peer's recording keeps its own.
struct RemoteRecording final : Recording {
  RemoteDevice* device = nullptr;
  uint64_t id = 0;
  std::vector<Kernel> kernels;
  ~RemoteRecording() override {
    Command c;
    c.mutable_release_recording()->set_recording(id);
    std::lock_guard lock(device->mutex_);
    *device->pending_.add_commands() = std::move(c);
    device->pending_locs_.push_back(Loc::current());
  }
};

RemoteDevice::RemoteDevice(const RemoteAddress& address, ClientOptions options, Loc loc)
    : target_(address.target()), options_(std::move(options)) {
  channel_ = make_channel(target_, options_, kDefaultMaxMessageBytes);
  stub_ = Remote::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(deadline_in(options_.timeout_seconds));
  OpenRequest req;
  req.set_device(address.device);
  OpenReply reply;
  const grpc::Status st = stub_->Open(&ctx, req, &reply);
  check(st.ok(), "remote", loc, "cannot open ", address.device, " on ", target_, ": ", status_text(st));
  check(reply.op_count() == static_cast<uint32_t>(kNumOps) && reply.support_size() == kNumOps &&
            reply.fuses_epilogue_size() == kNumOps && reply.extra_outputs_size() == kNumOps &&
            reply.widens_input_slots_size() == kNumOps,
        "remote", loc, "the server at ", target_, " has an op table of ", reply.op_count(), " ops, this client ", kNumOps,
        ": client and server must be the same alk");
  session_ = reply.session();
  max_message_bytes_ = reply.max_message_bytes();
  if (max_message_bytes_ != kDefaultMaxMessageBytes) {
    channel_ = make_channel(target_, options_, max_message_bytes_);
    stub_ = Remote::NewStub(channel_);
  }
  info_.name = address.name();
  info_.kind = "remote";
  info_.description = reply.name() + " on " + target_ + " (" + reply.description() + ")";
  info_.type = reply.type();
  info_.driver = "alk remote over gRPC; the peer's " + reply.driver();
  info_.memory_bytes = std::min<int64_t>(reply.memory_bytes(), static_cast<int64_t>(reply.max_bytes()));
  info_.alignment = reply.alignment();
  info_.max_allocation = std::min<uint64_t>(reply.max_allocation(), reply.max_bytes());
  info_.features.assign(reply.features().begin(), reply.features().end());
  support_.assign(reply.support().begin(), reply.support().end());
  fuses_epilogue_.assign(reply.fuses_epilogue().begin(), reply.fuses_epilogue().end());
  extra_outputs_.assign(reply.extra_outputs().begin(), reply.extra_outputs().end());
  widens_input_.assign(reply.widens_input_slots().begin(), reply.widens_input_slots().end());
  norm_backward_adds_ = reply.norm_backward_adds();
  lease_seconds_ = reply.lease_seconds();
  pending_.set_session(session_);
  lease_thread_ = std::thread([this] { keep_lease(); });
}

RemoteDevice::~RemoteDevice() {
  {
    std::lock_guard lock(lease_mutex_);
    closing_ = true;
  }
  lease_wake_.notify_all();
  lease_thread_.join();
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(deadline_in(std::min(options_.timeout_seconds, 5.0)));
  SessionRef ref;
  ref.set_session(session_);
  PingReply reply;
  (void)stub_->Close(&ctx, ref, &reply);  // a peer already gone frees the session by its lease
}

void RemoteDevice::keep_lease() {
  std::unique_lock lock(lease_mutex_);
  const auto every = std::chrono::duration<double>(std::max(lease_seconds_ / 3, 0.05));
  while (!lease_wake_.wait_for(lock, every, [this] { return closing_; })) {
    lock.unlock();
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + options_.token);
    ctx.set_deadline(deadline_in(std::min(options_.timeout_seconds, lease_seconds_)));
    SessionRef ref;
    ref.set_session(session_);
    PingReply reply;
    (void)stub_->Ping(&ctx, ref, &reply);  // a failure shows at the next real call
    lock.lock();
  }
}

uint64_t RemoteDevice::handle_of(const Buffer& b) const {
  check(b.device == this, "remote", Loc::current(), "a buffer of ", b.device->name(), " given to ", name());
  return reinterpret_cast<uintptr_t>(b.handle);
}

void RemoteDevice::queue_locked(Command&& c, Loc loc) {
  pending_bytes_ += c.ByteSizeLong();
  *pending_.add_commands() = std::move(c);
  pending_locs_.push_back(loc);
  if (pending_bytes_ > max_message_bytes_ / 2 || pending_.commands_size() >= 65536) flush_locked(nullptr, loc);
}

std::vector<std::string> RemoteDevice::flush_locked(Command* last, Loc loc) {
  if (last) {
    *pending_.add_commands() = std::move(*last);
    pending_locs_.push_back(loc);
  }
  if (pending_.commands_size() == 0) return {};
  Batch batch;
  batch.Swap(&pending_);
  pending_.set_session(session_);
  std::vector<Loc> locs;
  locs.swap(pending_locs_);
  pending_bytes_ = 0;
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + options_.token);
  ctx.set_deadline(deadline_in(options_.timeout_seconds));
  BatchReply reply;
  const grpc::Status st = stub_->Execute(&ctx, batch, &reply);
  ++round_trips_;
  if (!st.ok()) {
    // Name the work that was lost: the batch's last kernel, else its last command.
    std::string what = command_name(batch.commands(batch.commands_size() - 1));
    for (int i = batch.commands_size(); i-- > 0;)
      if (batch.commands(i).has_launch()) {
        what = "launch of " + std::string(op_name(static_cast<OpId>(batch.commands(i).launch().kernel().op())));
        break;
      }
    fail("remote", loc, name(), ": the peer ", target_, " is ", status_text(st), "; ", batch.commands_size(),
         " commands (the last: ", what, ") may not have run, and this device's state there is unknown");
  }
  if (reply.failed_command() >= 0) {
    const int64_t i = reply.failed_command();
    const Loc at = i < static_cast<int64_t>(locs.size()) ? locs[i] : loc;
    throw Error(reply.error_op().empty() ? "remote" : reply.error_op(),
                name() + ": " + reply.error() + " (" + command_name(batch.commands(static_cast<int>(std::min<int64_t>(i, batch.commands_size() - 1)))) +
                    " on the peer)",
                at);
  }
  return {reply.downloads().begin(), reply.downloads().end()};
}

std::shared_ptr<Buffer> RemoteDevice::allocate(size_t bytes) {
  check(bytes <= info_.max_allocation, "remote", Loc::current(), name(), " cannot hold ", bytes,
        " bytes: the peer allows at most ", info_.max_allocation, " for this token");
  std::lock_guard lock(mutex_);
  const uint64_t handle = ++next_handle_;
  Command c;
  c.mutable_allocate()->set_buffer(handle);
  c.mutable_allocate()->set_bytes(bytes);
  queue_locked(std::move(c), Loc::current());
  return std::make_shared<Buffer>(this, reinterpret_cast<void*>(static_cast<uintptr_t>(handle)), bytes);
}

void RemoteDevice::free(void* handle, size_t) noexcept {
  try {
    Command c;
    c.mutable_free()->set_buffer(reinterpret_cast<uintptr_t>(handle));
    std::lock_guard lock(mutex_);
    *pending_.add_commands() = std::move(c);  // never sends: freeing must not throw
    pending_locs_.push_back(Loc::current());
  } catch (...) {
    // Out of memory for the message: the session's lease frees the buffer when it ends.
  }
}

void RemoteDevice::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  const size_t chunk = max_message_bytes_ / 4;
  const uint64_t handle = handle_of(dst);
  std::lock_guard lock(mutex_);
  for (size_t done = 0; done < bytes; done += chunk) {
    const size_t n = std::min(chunk, bytes - done);
    Command c;
    Upload* u = c.mutable_upload();
    u->set_buffer(handle);
    u->set_offset(offset + done);
    u->set_data(static_cast<const char*>(src) + done, n);
    queue_locked(std::move(c), Loc::current());
  }
}

bool RemoteDevice::read_pending_upload_locked(uint64_t handle, size_t offset, void* dst, size_t bytes) const {
  for (int i = pending_.commands_size(); i-- > 0;) {
    const Command& c = pending_.commands(i);
    if (c.has_upload() && c.upload().buffer() == handle) {
      const Upload& u = c.upload();
      if (offset < u.offset() || offset + bytes > u.offset() + u.data().size()) return false;
      std::memcpy(dst, u.data().data() + (offset - u.offset()), bytes);
      return true;
    }
    const bool elsewhere = (c.has_upload() && c.upload().buffer() != handle) ||
                           (c.has_allocate() && c.allocate().buffer() != handle) ||
                           (c.has_free() && c.free().buffer() != handle);
    if (!elsewhere) return false;  // a kernel, copy or replay may have written it since
  }
  return false;
}

void RemoteDevice::download(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  const size_t chunk = max_message_bytes_ / 2;
  std::lock_guard lock(mutex_);
  // Bytes this client uploaded and nothing queued since can have changed are already here
  // (Program::captured's copy of a loss, read back by item()): no round trip.
  if (bytes > 0 && read_pending_upload_locked(handle_of(src), offset, dst, bytes)) return;
  for (size_t done = 0; done < bytes; done += chunk) {
    const size_t n = std::min(chunk, bytes - done);
    Command c;
    Download* d = c.mutable_download();
    d->set_buffer(handle_of(src));
    d->set_offset(offset + done);
    d->set_bytes(n);
    std::vector<std::string> got = flush_locked(&c, Loc::current());
    check(got.size() == 1 && got[0].size() == n, "remote", Loc::current(), name(), ": the peer returned ",
          got.empty() ? 0 : got.back().size(), " bytes for a download of ", n);
    std::memcpy(static_cast<char*>(dst) + done, got[0].data(), n);
  }
}

void RemoteDevice::copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) {
  std::lock_guard lock(mutex_);
  Command c;
  Copy* cp = c.mutable_copy();
  cp->set_src(handle_of(src));
  cp->set_src_offset(src_offset);
  cp->set_dst(handle_of(dst));
  cp->set_dst_offset(dst_offset);
  cp->set_bytes(bytes);
  queue_locked(std::move(c), Loc::current());
}

void RemoteDevice::synchronize() {
  std::lock_guard lock(mutex_);
  Command c;
  c.mutable_synchronize();
  flush_locked(&c, Loc::current());
}

bool RemoteDevice::supports(const Kernel& k) const {
  if (k.op == OpId::Map) return true;
  if (k.op == OpId::HostCall) return false;  // a host function of this process cannot run on the peer
  if (k.op == OpId::UserKernel) return false;  // its source would be compiled and run by the peer (wire.cpp)
  const size_t i = static_cast<size_t>(k.op);
  return i < support_.size() && support_[i].status() == static_cast<uint32_t>(OpSupport::Status::Runs);
}

bool RemoteDevice::fuses_epilogue(OpId core) const { return fuses_epilogue_[static_cast<size_t>(core)]; }

bool RemoteDevice::widens_input(OpId op, size_t slot) const {
  return slot < 32 && (widens_input_[static_cast<size_t>(op)] >> slot & 1u);
}

bool RemoteDevice::norm_backward_adds() const { return norm_backward_adds_; }

Device::ExtraOutputs RemoteDevice::extra_outputs(OpId core) const {
  return static_cast<ExtraOutputs>(extra_outputs_[static_cast<size_t>(core)]);
}

std::shared_ptr<PreparedKernel> RemoteDevice::prepare(const Kernel&) {
  // The peer compiles a kernel when it first runs it (its backend caches it by source).
  static const auto sent_as_data = std::make_shared<PreparedKernel>();
  return sent_as_data;
}

void RemoteDevice::launch(PreparedKernel&, const Kernel& k) {
  Command c;
  encode_kernel(k, [this](const Buffer& b) { return handle_of(b); }, *c.mutable_launch()->mutable_kernel());
  std::lock_guard lock(mutex_);
  queue_locked(std::move(c), k.node.loc);
}

std::unique_ptr<Recording> RemoteDevice::record(const std::vector<Kernel>& kernels) {
  // Encoded before taking the lock: a recording (and the buffers it holds) destroyed by an
  // exception must be able to queue its release.
  Command c;
  for (const Kernel& k : kernels)
    encode_kernel(k, [this](const Buffer& b) { return handle_of(b); }, *c.mutable_record()->add_kernels());
  auto r = std::make_unique<RemoteRecording>();
  r->device = this;
  r->kernels = kernels;
  std::lock_guard lock(mutex_);
  r->id = ++next_handle_;
  c.mutable_record()->set_recording(r->id);
  queue_locked(std::move(c), kernels.empty() ? Loc::current() : kernels.front().node.loc);
  return r;
}

void RemoteDevice::replay(Recording& recording) {
  auto* r = dynamic_cast<RemoteRecording*>(&recording);
  check(r && r->device == this, "remote", Loc::current(), "a recording of another device replayed on ", name());
  std::lock_guard lock(mutex_);
  Command c;
  c.mutable_replay()->set_recording(r->id);
  queue_locked(std::move(c), r->kernels.empty() ? Loc::current() : r->kernels.front().node.loc);
}

namespace {
const DeviceFactoryRegistration kRemoteDevices("remote", [](std::string_view name, Loc loc) -> std::unique_ptr<Device> {
  return std::make_unique<RemoteDevice>(parse_remote_name(name, loc), ClientOptions::from_environment(loc), loc);
});
}  // namespace

}  // namespace alk::remote
