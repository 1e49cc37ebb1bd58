// The TCP rendezvous of an environment launch: rank 0 listens on MASTER_ADDR:MASTER_PORT
// and sends NCCL's unique id (128 bytes) to each peer that connects. Nothing else goes
// over it: the collectives themselves run on NCCL.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dist/communicator.h"

namespace alk::dist {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in resolve(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), nullptr, &hints, &res) != 0 || !res)
    fail_collective("tcp", "rendezvous", "cannot resolve MASTER_ADDR '" + addr + "'");
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return sa;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) fail_collective("tcp", "rendezvous", std::string("send: ") + std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace

TcpExchange::TcpExchange(std::string addr, int port, int rank, int size, double timeout_s)
    : addr_(std::move(addr)), port_(port), rank_(rank), size_(size), timeout_s_(timeout_s) {}

void TcpExchange::broadcast_from_rank0(void* bytes, size_t n) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  const std::string where = addr_ + ":" + std::to_string(port_);
  sockaddr_in sa = resolve(addr_, port_);
  if (rank_ == 0) {
    Fd server(socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(server.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(server.fd, size_) != 0)
      fail_collective("tcp", "rendezvous", "rank 0 cannot listen on " + where + ": " + std::strerror(errno));
    for (int peers = 1; peers < size_; ++peers) {
      pollfd p{server.fd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0)
        fail_collective("tcp", "rendezvous", "rank 0 waited " + std::to_string(timeout_s_) + " s on " + where +
                                                 " and only " + std::to_string(peers - 1) + " of " +
                                                 std::to_string(size_ - 1) + " peers came");
      Fd peer(accept(server.fd, nullptr, nullptr));
      if (peer.fd < 0) fail_collective("tcp", "rendezvous", std::string("accept: ") + std::strerror(errno));
      send_all(peer.fd, static_cast<const char*>(bytes), n);
    }
    return;
  }
  for (;;) {  // rank 0 may not listen yet: retry until the deadline
    Fd s(socket(AF_INET, SOCK_STREAM, 0));
    if (connect(s.fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      size_t got = 0;
      while (got < n) {
        pollfd p{s.fd, POLLIN, 0};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
        const ssize_t k = recv(s.fd, static_cast<char*>(bytes) + got, n - got, 0);
        if (k <= 0) break;
        got += static_cast<size_t>(k);
      }
      if (got == n) return;
    }
    if (Clock::now() > deadline)
      fail_collective("tcp", "rendezvous", "rank " + std::to_string(rank_) + " could not reach rank 0 at " + where +
                                               " within " + std::to_string(timeout_s_) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace alk::dist
