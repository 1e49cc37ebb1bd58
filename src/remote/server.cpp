#include "remote/server.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "alk/device.h"
#include "alk/op_registry.h"
#include "opspecs/op_specs.h"
#include "remote/tensor_message.h"
#include "remote/remote.grpc.pb.h"
#include "remote/wire.h"

namespace alk::remote {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxBuffersPerSession = 1 << 20;
constexpr size_t kMaxRecordingsPerSession = 1 << 12;
constexpr size_t kMaxSessionsPerToken = 64;

// Equal strings in time that depends on their lengths only, not on where they first differ.
bool same_secret(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

struct Session {
  uint64_t id = 0;
  size_t grant = 0;
  Device* device = nullptr;
  std::mutex mutex;  // one batch at a time
  std::unordered_map<uint64_t, std::shared_ptr<Buffer>> buffers;
  std::unordered_map<uint64_t, std::unique_ptr<Recording>> recordings;
  uint64_t bytes = 0;
  std::atomic<int64_t> last_seen_ns{0};
  void touch() { last_seen_ns = Clock::now().time_since_epoch().count(); }
};

grpc::Status refuse(grpc::StatusCode code, const std::string& message) { return grpc::Status(code, message); }

}  // namespace

struct Server::State final : Remote::Service {
  ServerOptions options;
  uint64_t instance = std::random_device{}() * 0x100000001ull + std::random_device{}();
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  mutable std::mutex sessions_mutex;
  std::map<uint64_t, std::shared_ptr<Session>> sessions;
  std::vector<uint64_t> bytes_per_grant;  // guarded by sessions_mutex
  std::mt19937_64 session_ids{std::random_device{}()};
  std::mutex device_mutex;  // the devices run one batch at a time
  std::mutex reaper_mutex;
  std::condition_variable reaper_wake;
  bool stopping = false;
  std::thread reaper;
  std::atomic<bool> shut{false};

  // The grant whose token the request carries (`authorization: Bearer TOKEN`), checked against
  // every grant so the time taken does not tell which one came close.
  std::optional<size_t> authenticate(const grpc::ServerContext* ctx) const {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) return std::nullopt;
    const std::string value(it->second.data(), it->second.size());
    const std::string prefix = "Bearer ";
    if (value.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    const std::string token = value.substr(prefix.size());
    std::optional<size_t> found;
    for (size_t i = 0; i < options.tokens.size(); ++i)
      if (same_secret(token, options.tokens[i].token) && !found) found = i;
    return found;
  }

  uint64_t quota(size_t grant) const {
    return options.tokens[grant].max_bytes ? options.tokens[grant].max_bytes : options.max_bytes;
  }

  // The caller's session, if it is the caller's.
  grpc::Status find_session(grpc::ServerContext* ctx, uint64_t id, std::shared_ptr<Session>& out) {
    auto grant = authenticate(ctx);
    if (!grant) return refuse(grpc::StatusCode::UNAUTHENTICATED, "no valid token (authorization: Bearer TOKEN)");
    std::lock_guard lock(sessions_mutex);
    auto it = sessions.find(id);
    // Another token's session reads as absent: a client learns nothing of other clients' ids.
    if (it == sessions.end() || it->second->grant != *grant)
      return refuse(grpc::StatusCode::NOT_FOUND, "no session " + std::to_string(id) +
                                                     " on this server (it restarted, or the lease expired and the "
                                                     "session's memory was freed)");
    out = it->second;
    out->touch();
    return grpc::Status::OK;
  }

  void close_session(const std::shared_ptr<Session>& s) {
    // Frees what it held (its last reference may be a request still running: then that frees it).
    std::lock_guard lock(s->mutex);
    std::lock_guard device_lock(device_mutex);
    s->recordings.clear();
    s->buffers.clear();
    std::lock_guard sessions_lock(sessions_mutex);
    bytes_per_grant[s->grant] -= s->bytes;
    s->bytes = 0;
  }

  // A device of this process by the client's name. Never one made from its name (a remote:
  // name would have this server connect wherever a client says): only what the probes found.
  static Device* local_device(const std::string& name) {
    const std::string spec = name.empty() ? "cpu" : name;
    if (spec == "auto") return &get_device("auto");
    for (Device* d : available_devices())
      if (d->info().kind != "remote" && (d->name() == spec || d->name() == spec + ":0")) return d;
    return nullptr;
  }

  grpc::Status Open(grpc::ServerContext* ctx, const OpenRequest* req, OpenReply* reply) override {
    auto grant = authenticate(ctx);
    if (!grant) return refuse(grpc::StatusCode::UNAUTHENTICATED, "no valid token (authorization: Bearer TOKEN)");
    Device* device = local_device(req->device());
    if (!device) return refuse(grpc::StatusCode::NOT_FOUND, "no device '" + req->device().substr(0, 64) + "' on this server");
    const auto& allowed = options.tokens[*grant].devices;
    bool ok = false;
    for (const std::string& d : allowed) ok = ok || d == "*" || d == device->name() || d == req->device();
    if (!ok) return refuse(grpc::StatusCode::PERMISSION_DENIED, "this token may not use device " + device->name());
    auto s = std::make_shared<Session>();
    s->grant = *grant;
    s->device = device;
    s->touch();
    {
      std::lock_guard lock(sessions_mutex);
      size_t mine = 0;
      for (auto& [id, other] : sessions) mine += other->grant == *grant;
      if (mine >= kMaxSessionsPerToken)
        return refuse(grpc::StatusCode::RESOURCE_EXHAUSTED, "this token holds " + std::to_string(mine) + " sessions already");
      do s->id = session_ids();
      while (s->id == 0 || sessions.count(s->id));
      sessions[s->id] = s;
    }
    const DeviceInfo& info = device->info();
    reply->set_session(s->id);
    reply->set_server_instance(instance);
    reply->set_name(info.name);
    reply->set_kind(info.kind);
    reply->set_description(info.description);
    reply->set_type(info.type);
    reply->set_driver(info.driver);
    reply->set_memory_bytes(info.memory_bytes);
    reply->set_alignment(info.alignment);
    reply->set_max_allocation(info.max_allocation);
    for (const std::string& f : info.features) reply->add_features(f);
    const OpCoverage* coverage = find_op_coverage(info.kind);
    for (int i = 0; i < kNumOps; ++i) {
      const auto op = static_cast<OpId>(i);
      OpSupportMsg* support = reply->add_support();
      if (coverage) {
        support->set_status(static_cast<uint32_t>(coverage->support(op).status));
        support->set_dtypes(coverage->support(op).dtypes);
      }
      reply->add_fuses_epilogue(device->fuses_epilogue(op));
      reply->add_extra_outputs(static_cast<uint32_t>(device->extra_outputs(op)));
      uint32_t widens = 0;
      for (size_t slot = 0; slot < 32; ++slot) widens |= device->widens_input(op, slot) ? 1u << slot : 0u;
      reply->add_widens_input_slots(widens);
    }
    reply->set_norm_backward_adds(device->norm_backward_adds());
    reply->set_max_bytes(quota(*grant));
    reply->set_max_message_bytes(options.max_message_bytes);
    reply->set_lease_seconds(options.lease_seconds);
    reply->set_op_count(kNumOps);
    return grpc::Status::OK;
  }

  grpc::Status Ping(grpc::ServerContext* ctx, const SessionRef* req, PingReply*) override {
    std::shared_ptr<Session> s;
    return find_session(ctx, req->session(), s);
  }

  grpc::Status Close(grpc::ServerContext* ctx, const SessionRef* req, PingReply*) override {
    std::shared_ptr<Session> s;
    grpc::Status st = find_session(ctx, req->session(), s);
    if (!st.ok()) return st;
    {
      std::lock_guard lock(sessions_mutex);
      sessions.erase(s->id);
    }
    close_session(s);
    return grpc::Status::OK;
  }

  std::shared_ptr<Buffer> buffer_of(Session& s, uint64_t handle) const {
    auto it = s.buffers.find(handle);
    check(it != s.buffers.end(), "remote", Loc::current(), "no buffer ", handle, " in this session");
    return it->second;
  }

  static void check_range(const Buffer& b, uint64_t offset, uint64_t bytes, const char* what) {
    check(offset <= b.bytes && bytes <= b.bytes - offset, "remote", Loc::current(), what, " of ", bytes,
          " bytes at offset ", offset, " of a ", b.bytes, "-byte buffer");
  }

  void run_command(Session& s, const Command& c, BatchReply* reply) {
    const BufferOf lookup = [this, &s](uint64_t h) { return buffer_of(s, h); };
    switch (c.command_case()) {
      case Command::kAllocate: {
        const uint64_t h = c.allocate().buffer(), bytes = c.allocate().bytes();
        check(h != 0 && !s.buffers.count(h), "remote", Loc::current(), "buffer handle ", h, " is in use or 0");
        check(s.buffers.size() < kMaxBuffersPerSession, "remote", Loc::current(), "more than ",
              kMaxBuffersPerSession, " buffers in one session");
        check(bytes <= s.device->info().max_allocation, "remote", Loc::current(), "an allocation of ", bytes,
              " bytes is larger than ", s.device->name(), " allows (", s.device->info().max_allocation, ")");
        {
          std::lock_guard lock(sessions_mutex);
          const uint64_t held = bytes_per_grant[s.grant];
          check(bytes <= quota(s.grant) && held <= quota(s.grant) - bytes, "remote", Loc::current(),
                "an allocation of ", bytes, " bytes would exceed this token's quota of ", quota(s.grant),
                " bytes (", held, " held)");
          bytes_per_grant[s.grant] += bytes;
        }
        try {
          s.buffers[h] = s.device->allocate(bytes);
        } catch (...) {
          std::lock_guard lock(sessions_mutex);
          bytes_per_grant[s.grant] -= bytes;
          throw;
        }
        s.bytes += bytes;
        return;
      }
      case Command::kFree: {
        auto it = s.buffers.find(c.free().buffer());
        check(it != s.buffers.end(), "remote", Loc::current(), "free of buffer ", c.free().buffer(),
              ", which this session does not hold");
        const uint64_t bytes = it->second->bytes;
        s.buffers.erase(it);
        s.bytes -= bytes;
        std::lock_guard lock(sessions_mutex);
        bytes_per_grant[s.grant] -= bytes;
        return;
      }
      case Command::kUpload: {
        auto b = buffer_of(s, c.upload().buffer());
        check_range(*b, c.upload().offset(), c.upload().data().size(), "an upload");
        s.device->upload(*b, c.upload().offset(), c.upload().data().data(), c.upload().data().size());
        return;
      }
      case Command::kDownload: {
        std::string* out = reply->add_downloads();
        auto b = buffer_of(s, c.download().buffer());
        check_range(*b, c.download().offset(), c.download().bytes(), "a download");
        out->resize(c.download().bytes());
        s.device->download(*b, c.download().offset(), out->data(), out->size());
        return;
      }
      case Command::kCopy: {
        const Copy& cp = c.copy();
        auto src = buffer_of(s, cp.src());
        auto dst = buffer_of(s, cp.dst());
        check_range(*src, cp.src_offset(), cp.bytes(), "a copy's source");
        check_range(*dst, cp.dst_offset(), cp.bytes(), "a copy's destination");
        s.device->copy(*src, cp.src_offset(), *dst, cp.dst_offset(), cp.bytes());
        return;
      }
      case Command::kLaunch: {
        const Kernel k = decode_kernel(c.launch().kernel(), lookup);
        check(s.device->supports(k), "remote", Loc::current(), s.device->name(), " cannot run this kernel (",
              op_name(k.op), ")");
        s.device->run(k);
        return;
      }
      case Command::kRecord: {
        const uint64_t id = c.record().recording();
        check(id != 0 && !s.recordings.count(id), "remote", Loc::current(), "recording id ", id, " is in use or 0");
        check(s.recordings.size() < kMaxRecordingsPerSession, "remote", Loc::current(), "more than ",
              kMaxRecordingsPerSession, " recordings in one session");
        std::vector<Kernel> kernels;
        for (const KernelMsg& m : c.record().kernels()) {
          kernels.push_back(decode_kernel(m, lookup));
          check(s.device->supports(kernels.back()), "remote", Loc::current(), s.device->name(),
                " cannot run this kernel (", op_name(kernels.back().op), ")");
        }
        s.recordings[id] = s.device->record(kernels);
        return;
      }
      case Command::kReplay: {
        auto it = s.recordings.find(c.replay().recording());
        check(it != s.recordings.end(), "remote", Loc::current(), "no recording ", c.replay().recording(), " in this session");
        s.device->replay(*it->second);
        return;
      }
      case Command::kReleaseRecording:
        check(s.recordings.erase(c.release_recording().recording()) == 1, "remote", Loc::current(), "no recording ",
              c.release_recording().recording(), " in this session");
        return;
      case Command::kSynchronize: s.device->synchronize(); return;
      case Command::COMMAND_NOT_SET: fail("remote", Loc::current(), "an empty command");
    }
    fail("remote", Loc::current(), "an unknown command ", static_cast<int>(c.command_case()));
  }

  grpc::Status Execute(grpc::ServerContext* ctx, const Batch* req, BatchReply* reply) override {
    std::shared_ptr<Session> s;
    grpc::Status st = find_session(ctx, req->session(), s);
    if (!st.ok()) return st;
    uint64_t download_bytes = 0;
    for (const Command& c : req->commands())
      if (c.has_download()) download_bytes += std::min<uint64_t>(c.download().bytes(), options.max_message_bytes + 1);
    if (download_bytes > options.max_message_bytes)
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, "a batch downloading " + std::to_string(download_bytes) +
                                                            " bytes, more than one message may carry (" +
                                                            std::to_string(options.max_message_bytes) + ")");
    std::lock_guard lock(s->mutex);
    std::lock_guard device_lock(device_mutex);
    reply->set_failed_command(-1);
    for (int i = 0; i < req->commands_size(); ++i) {
      const size_t downloads = reply->downloads_size();
      try {
        run_command(*s, req->commands(i), reply);
      } catch (const std::exception& e) {
        // A Download that failed still holds its place, so the others stay where the client looks.
        if (req->commands(i).has_download() && static_cast<size_t>(reply->downloads_size()) == downloads)
          reply->add_downloads();
        if (reply->failed_command() < 0) {
          reply->set_failed_command(i);
          const auto* err = dynamic_cast<const Error*>(&e);
          reply->set_error_op(err ? err->op() : "remote");
          reply->set_error(err ? err->detail() : e.what());
        }
      }
    }
    s->touch();
    return grpc::Status::OK;
  }

  grpc::Status ListOps(grpc::ServerContext* ctx, const ListOpsRequest* req, ListOpsReply* reply) override {
    if (!authenticate(ctx)) return refuse(grpc::StatusCode::UNAUTHENTICATED, "no valid token (authorization: Bearer TOKEN)");
    try {
      reply->set_json(req->name().empty() ? opspecs::op_specs_json() : opspecs::op_schema_json(req->name()));
    } catch (const Error& e) {
      return refuse(grpc::StatusCode::NOT_FOUND, e.detail());
    }
    return grpc::Status::OK;
  }

  grpc::Status CallOp(grpc::ServerContext* ctx, const CallOpRequest* req, CallOpReply* reply) override {
    auto grant = authenticate(ctx);
    if (!grant) return refuse(grpc::StatusCode::UNAUTHENTICATED, "no valid token (authorization: Bearer TOKEN)");
    try {
      Device* found = local_device(req->device());
      if (!found) return refuse(grpc::StatusCode::NOT_FOUND, "no device '" + req->device().substr(0, 64) + "' on this server");
      Device& device = *found;
      bool ok = false;
      for (const std::string& d : options.tokens[*grant].devices) ok = ok || d == "*" || d == device.name();
      if (!ok) return refuse(grpc::StatusCode::PERMISSION_DENIED, "this token may not use device " + device.name());
      std::lock_guard device_lock(device_mutex);
      call_op_message(*req, device, quota(*grant), *reply);
    } catch (const Error& e) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, e.op() + ": " + e.detail());
    } catch (const std::exception& e) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, e.what());
    }
    return grpc::Status::OK;
  }

  void reap_expired() {
    std::unique_lock lock(reaper_mutex);
    while (!stopping) {
      reaper_wake.wait_for(lock, std::chrono::milliseconds(200));
      const int64_t now = Clock::now().time_since_epoch().count();
      const auto lease = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.lease_seconds));
      std::vector<std::shared_ptr<Session>> expired;
      {
        std::lock_guard sl(sessions_mutex);
        for (auto it = sessions.begin(); it != sessions.end();) {
          if (now - it->second->last_seen_ns.load() > lease.count()) {
            expired.push_back(it->second);
            it = sessions.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto& s : expired) close_session(s);
    }
  }
};

std::vector<TokenGrant> read_token_file(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "serve", Loc::current(), "cannot read the token file ", path);
  std::vector<TokenGrant> grants;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    TokenGrant g;
    if (!(words >> g.token) || g.token[0] == '#') continue;
    check(g.token.size() >= 16, "serve", Loc::current(), path, ":", n, ": a token of ", g.token.size(),
          " characters (at least 16)");
    for (std::string w; words >> w;) {
      if (w.rfind("devices=", 0) == 0) {
        g.devices.clear();
        std::istringstream list(w.substr(8));
        for (std::string d; std::getline(list, d, ',');)
          if (!d.empty()) g.devices.push_back(d);
      } else if (w.rfind("max_bytes=", 0) == 0) {
        try {
          g.max_bytes = std::stoull(w.substr(10));
        } catch (const std::exception&) {
          fail("serve", Loc::current(), path, ":", n, ": max_bytes is not a number: ", w);
        }
      } else {
        fail("serve", Loc::current(), path, ":", n, ": unknown field '", w, "' (devices=..., max_bytes=N)");
      }
    }
    grants.push_back(std::move(g));
  }
  check(!grants.empty(), "serve", Loc::current(), "the token file ", path, " holds no token");
  return grants;
}

std::string read_client_token(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "remote", Loc::current(), "cannot read the token file ", path, " (ALK_REMOTE_TOKEN_FILE)");
  std::string token;
  in >> token;
  check(!token.empty(), "remote", Loc::current(), "the token file ", path, " is empty");
  return token;
}

namespace {
std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "serve", Loc::current(), "cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

Server::Server(ServerOptions options) : state_(std::make_unique<State>()) {
  check(!options.tokens.empty(), "serve", Loc::current(), "a server needs at least one token (--token-file)");
  check(options.max_message_bytes >= (1 << 20) && options.max_message_bytes <= (1ull << 30), "serve", Loc::current(),
        "--max-message must be between 1 MiB and 1 GiB, got ", options.max_message_bytes);
  check(options.lease_seconds > 0, "serve", Loc::current(), "--lease must be > 0");
  state_->options = std::move(options);
  const ServerOptions& o = state_->options;
  state_->bytes_per_grant.assign(o.tokens.size(), 0);
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!o.tls_cert_file.empty() || !o.tls_key_file.empty()) {
    check(!o.tls_cert_file.empty() && !o.tls_key_file.empty(), "serve", Loc::current(),
          "TLS needs both --tls-cert and --tls-key");
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({read_file_text(o.tls_key_file), read_file_text(o.tls_cert_file)});
    credentials = grpc::SslServerCredentials(ssl);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.host + ":" + std::to_string(o.port), credentials, &state_->port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes + (1 << 20)));
  builder.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes + (1 << 20)));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20);  // as the client's (remote_device.cpp)
  builder.RegisterService(state_.get());
  state_->server = builder.BuildAndStart();
  check(state_->server != nullptr && state_->port > 0, "serve", Loc::current(), "cannot listen on ", o.host, ":",
        o.port);
  state_->reaper = std::thread([s = state_.get()] { s->reap_expired(); });
}

Server::~Server() { shutdown(); }

int Server::port() const { return state_->port; }

void Server::shutdown(double grace_seconds) {
  if (state_->shut.exchange(true)) return;
  state_->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               std::chrono::duration<double>(grace_seconds)));
  state_->server->Wait();
  {
    std::lock_guard lock(state_->reaper_mutex);
    state_->stopping = true;
  }
  state_->reaper_wake.notify_all();
  state_->reaper.join();
  std::map<uint64_t, std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(state_->sessions_mutex);
    sessions.swap(state_->sessions);
  }
  for (auto& [id, s] : sessions) state_->close_session(s);
}

size_t Server::open_sessions() const {
  std::lock_guard lock(state_->sessions_mutex);
  return state_->sessions.size();
}

uint64_t Server::bytes_held() const {
  std::lock_guard lock(state_->sessions_mutex);
  uint64_t n = 0;
  for (uint64_t b : state_->bytes_per_grant) n += b;
  return n;
}

int run_server(const ServerOptions& options, const std::string& port_file, std::ostream& log) {
  // SIGTERM and SIGINT are taken by this thread alone (sigwait), blocked before gRPC starts its own.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  Server server(options);
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  log << "alk serve --ops: listening on " << options.host << ":" << server.port() << " ("
      << (options.tls_cert_file.empty() ? "plain TCP" : "TLS") << ", " << options.tokens.size() << " token"
      << (options.tokens.size() == 1 ? "" : "s") << ")" << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  log << "alk serve --ops: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down ("
      << server.open_sessions() << " sessions open)" << std::endl;
  server.shutdown();
  return 0;
}

}  // namespace alk::remote
