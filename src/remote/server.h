// The remote server (`alk serve --ops`): the operations registry and this process's devices
// over gRPC, to clients holding a token. What it trusts and refuses: docs/remote.md.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace alk::remote {

// What one token may do: the devices it may open ("*": any) and the bytes its sessions may
// hold on the server together.
struct TokenGrant {
  std::string token;
  std::vector<std::string> devices{"*"};
  uint64_t max_bytes = 0;  // 0: the server's --max-bytes
};

// A token file: one grant a line, `TOKEN [devices=cpu,cuda:0] [max_bytes=N]`; blank lines and
// lines starting with '#' are skipped. Raises alk::Error naming the file and line of a bad one.
std::vector<TokenGrant> read_token_file(const std::string& path);
// The client's side: the first word of the file (ALK_REMOTE_TOKEN_FILE names it).
std::string read_client_token(const std::string& path);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free port (Server::port() tells which)
  std::vector<TokenGrant> tokens;  // at least one: the server refuses to run open to anyone
  uint64_t max_bytes = 1ull << 32;           // per token, unless its grant says otherwise
  uint64_t max_message_bytes = 64ull << 20;  // the largest request or reply
  double lease_seconds = 30;                 // a session its client stops calling is freed after this
  std::string tls_cert_file, tls_key_file;   // both: TLS; neither: plain TCP (loopback use)
};

class Server {
 public:
  explicit Server(ServerOptions options);  // listening when it returns; raises alk::Error if it cannot
  ~Server();                               // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  int port() const;
  // Stops taking requests, waits up to `grace_seconds` for those running, frees every session.
  void shutdown(double grace_seconds = 5);
  size_t open_sessions() const;
  uint64_t bytes_held() const;  // by every session together

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// `alk serve --ops`: runs a Server until SIGTERM or SIGINT, logging to `log`; writes the port to
// `port_file` when one is named (for scripts that start it on port 0). Returns the exit status.
int run_server(const ServerOptions& options, const std::string& port_file, std::ostream& log);

}  // namespace alk::remote
