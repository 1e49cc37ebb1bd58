// `alk train --nproc N`: this program again, N times, as the ranks of one job. With OpenMPI's
// mpirun on PATH the ranks are its processes (loopback only; MPI for CPU tensors, NCCL's id
// over MPI); without it they are forked with torchrun's variables (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT), for NCCL on one host. Either way the first rank
// to fail ends the others.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>

#include "alk/dist.h"

extern char** environ;

namespace alk::dist {

namespace {

// This process's arguments without `--nproc N` / `--nproc=N`.
std::vector<std::string> own_arguments_without_nproc() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t i = 0; i < all.size();) {
    const size_t end = all.find('\0', i);
    args.push_back(all.substr(i, end - i));
    i = end == std::string::npos ? all.size() : end + 1;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (size_t i = 0; i <= p.size();) {
    size_t end = p.find(':', i);
    if (end == std::string::npos) end = p.size();
    const std::string cand = p.substr(i, end - i) + "/" + name;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    i = end + 1;
  }
  return "";
}

int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  int port = 29500;
  if (s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    port = ntohs(sa.sin_port);
  if (s >= 0) close(s);
  return port;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
  const pid_t pid = fork();
  check(pid >= 0, "dist", Loc::current(), "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::cerr << "alk: cannot run " << argv[0] << ": " << std::strerror(errno) << "\n";
    std::_Exit(127);
  }
  return pid;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int launch_local(int nproc, Loc loc) {
  check(nproc >= 1 && nproc <= 1024, "dist", loc, "--nproc must be between 1 and 1024, got ", nproc);
  std::vector<std::string> args = own_arguments_without_nproc();
  check(!args.empty(), "dist", loc, "cannot read this program's arguments");
  args[0] = std::filesystem::read_symlink("/proc/self/exe").string();
  const char* how = std::getenv("ALK_LAUNCHER");  // "mpirun" or "env"; default: mpirun when found
  const std::string mpirun = how && std::string(how) == "env" ? "" : find_on_path("mpirun");
  check(!(how && std::string(how) == "mpirun" && mpirun.empty()), "dist", loc, "ALK_LAUNCHER=mpirun but no mpirun on PATH");
  if (!mpirun.empty()) {
    std::vector<std::string> argv{mpirun, "-np", std::to_string(nproc), "--oversubscribe", "--mca", "btl", "self,tcp",
                                  "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"};
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), args.begin(), args.end());
    int status = 0;
    const pid_t pid = spawn(argv, {});
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return exit_code(status);
  }
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < nproc; ++r)
    ranks.push_back(spawn(args, {{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)},
                                 {"WORLD_SIZE", std::to_string(nproc)}, {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                                 {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}}));
  // Polls the ranks; the first to fail has the others asked to stop (SIGTERM: they save and
  // exit), and those still there 10 s later are killed (one blocked in a collective with
  // the failed rank cannot stop by itself).
  int result = 0;
  std::vector<bool> done(ranks.size(), false);
  bool kill_pending = false;
  auto kill_at = std::chrono::steady_clock::now();
  for (size_t left = ranks.size(); left > 0;) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      const pid_t pid = waitpid(ranks[r], &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
      done[r] = true;
      --left;
      const int code = pid < 0 ? 1 : exit_code(status);
      if (code != 0 && result == 0) {
        result = code;
        std::cerr << ("alk: dist: rank " + std::to_string(r) + " of " + std::to_string(nproc) + " failed (exit status " +
                      std::to_string(code) + "); ending the other ranks\n");
        for (size_t o = 0; o < ranks.size(); ++o)
          if (!done[o]) kill(ranks[o], SIGTERM);
        kill_pending = true;
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      }
    }
    if (kill_pending && std::chrono::steady_clock::now() > kill_at) {
      for (size_t o = 0; o < ranks.size(); ++o)
        if (!done[o]) kill(ranks[o], SIGKILL);
      kill_pending = false;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace alk::dist
