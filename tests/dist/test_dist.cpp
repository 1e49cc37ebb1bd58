// alk::dist on CPU with OpenMPI, loopback only: collectives against computed values, a
// killed and a stopped rank ending the job with an error within the timeout, and the GPT
// job's losses on 2 ranks (mpirun, alk train --nproc 2) equal to 1 rank with the same
// global batch, also across a resume onto another world size.
//
// The ranks are this test binary again under mpirun, running one DistWorker.* test
// (selected by ALK_DIST_WORKER; outside a launch those tests skip).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include <functional>
#include <thread>

#include "alk/compile.h"
#include "backend/cpu/kernel_observer.h"
#include "alk/dist.h"
#include "dist/communicator.h"
#include "io/temp_dir.h"
#include "required.h"
#include "testing.h"
#include "train/report.h"

namespace alk {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

bool worker(const char* mode) {
  const char* w = std::getenv("ALK_DIST_WORKER");
  return w && std::string(w) == mode && dist::launched();
}

// ---- the ranks ----

// ALK_DIST_WORKER_DEVICE=cuda puts the worker's tensors on cuda:LOCAL_RANK (NCCL; run by
// bench/dist/run_device.sh on a GPU machine), else they stay on the CPU (MPI).
Tensor on_device(const Tensor& t) {
  const char* d = std::getenv("ALK_DIST_WORKER_DEVICE");
  if (!d || std::string(d) != "cuda") return t;
  return t.to("cuda:" + std::to_string(dist::local_rank()));
}

TEST(DistWorker, Collectives) {
  if (!worker("collectives")) GTEST_SKIP() << "a rank of Dist.CollectivesOverMpi";
  const int r = dist::rank(), w = dist::world_size();
  ASSERT_EQ(w, 2);
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * static_cast<int>(i));
  Tensor t = on_device(tensor(v, {10, 100}));
  // Separate tensors: copies of a Tensor handle share it, and the collectives are in place.
  Tensor sum_t = on_device(tensor(v, {10, 100})), avg_t = on_device(tensor(v, {10, 100})),
         max_t = on_device(tensor(v, {10, 100}));
  dist::all_reduce(sum_t);
  dist::all_reduce(avg_t, dist::ReduceOp::Avg);
  dist::all_reduce(max_t, dist::ReduceOp::Max);
  const auto s = sum_t.to_vector<float>(), a = avg_t.to_vector<float>(), m = max_t.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(s[i], 3.0f * static_cast<float>(i));
    ASSERT_EQ(a[i], 1.5f * static_cast<float>(i));
    ASSERT_EQ(m[i], 2.0f * static_cast<float>(i));
  }
  EXPECT_EQ(t.to_vector<float>(), v);  // other tensors are untouched
  Tensor b = on_device(tensor(std::vector<int64_t>{r * 10 + 1, r * 10 + 2}, {2}));
  dist::broadcast(b, 1);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{11, 12}));
  Tensor g = dist::all_gather(on_device(tensor(std::vector<double>{double(r), double(r) + 0.5}, {2})));
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 0.5, 1, 1.5}));
  Tensor rs = dist::reduce_scatter(on_device(tensor(std::vector<float>{1.f + r, 2.f + r, 3.f + r, 4.f + r}, {4})));
  EXPECT_EQ(rs.to_vector<float>(), r == 0 ? (std::vector<float>{3, 5}) : (std::vector<float>{7, 9}));
  EXPECT_EQ(dist::shard_rows(8, r, w), (std::pair<int64_t, int64_t>{4 * r, 4}));
  dist::barrier();
}

// Rank 1 dies (SIGKILL) or stops (SIGSTOP) after the first all-reduce; rank 0 goes on.
void die_or_stop(int sig) {
  Tensor t = ones({4});
  dist::all_reduce(t);
  if (dist::rank() == 1) raise(sig);
  for (int i = 0; i < 1000; ++i) {
    dist::all_reduce(t);
    usleep(10000);
  }
  ADD_FAILURE() << "rank " << dist::rank() << " was not stopped";
}
TEST(DistWorker, Killed) {
  if (!worker("kill")) GTEST_SKIP() << "a rank of Dist.KilledRankEndsTheJob";
  die_or_stop(SIGKILL);
}
TEST(DistWorker, Stopped) {
  if (!worker("stop")) GTEST_SKIP() << "a rank of Dist.StoppedRankEndsTheJobAfterTheTimeout";
  die_or_stop(SIGSTOP);
}

// ---- the overlapped gradient all-reduce ----

// The dist event log ("issue k", "reduced k") with every CPU kernel interleaved ("ran Op"),
// for the scope of one object.
struct OverlapLog {
  std::vector<std::string> events;
  cpu::KernelObserver observer = [](const Kernel& k) { dist::detail::note_event("ran " + std::string(op_name(k.op))); };
  OverlapLog() {
    dist::detail::set_event_log(&events);
    cpu::set_kernel_observer(&observer);
  }
  ~OverlapLog() {
    cpu::set_kernel_observer(nullptr);
    dist::detail::set_event_log(nullptr);
  }
  std::vector<std::string> take() { return std::exchange(events, {}); }
};

int index_of(const std::vector<std::string>& ev, const std::string& what, size_t from = 0) {
  for (size_t i = from; i < ev.size(); ++i)
    if (ev[i] == what) return static_cast<int>(i);
  return -1;
}

// ORDER, not time: within one backward, bucket 0's all-reduce was issued (its HostCall ran)
// before the backward's last kernels: a Matmul (an earlier layer's weight gradient) runs
// after it, and the buckets are issued in order 0, 1, 2, ...
void expect_bucket_zero_issued_mid_backward(const std::vector<std::string>& ev, size_t buckets, const std::string& call) {
  const int first = index_of(ev, "issue 0");
  ASSERT_GE(first, 0) << call;
  if (std::getenv("ALK_TEST_SHOW_EVENTS"))
    for (const std::string& e : ev) std::cout << e << "\n";
  EXPECT_GE(index_of(ev, "ran Matmul", static_cast<size_t>(first)), 0)
      << call << ": no matmul of the backward ran after bucket 0 was issued";
  int at = first;
  for (size_t k = 1; k < buckets; ++k) {
    const int next = index_of(ev, "issue " + std::to_string(k));
    EXPECT_GT(next, at) << call << ": bucket " << k << " issued out of order";
    at = next;
  }
}

struct TinyDataParallel {
  bool seeded = (manual_seed(5), true);  // first: the model is made from seed 5 on every rank
  nn::GPT model{{.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 2}};
  dist::DataParallel dp;
  Program backward;
  explicit TinyDataParallel(int64_t bucket_bytes)
      : dp(model.named_parameters(), bucket_bytes),
        backward(compile([this](const std::vector<Tensor>& in) {
          Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
          capture("loss", loss);
          dp.backward(loss);
        })) {}
  // One step's backward: the compiled program, or (uncompiled) the same code run directly.
  void step(const Tensor& x, const Tensor& y, bool compiled) {
    if (compiled) return backward({x, y});
    dp.backward(nn::cross_entropy(model(x), y));
  }
  // This rank's batch of a step: different rows on every rank.
  std::pair<Tensor, Tensor> batch(int step) {
    manual_seed(static_cast<uint64_t>(100 + step * 10 + dist::rank()));
    return {randint(0, 64, {4, 8}), randint(0, 64, {4, 8})};
  }
};

// Two ranks: the overlapped step's averaged gradients equal each rank's own gradients
// averaged by a plain all_reduce, in the eager call, the traced call and replays; and the
// order proof above holds in each.
TEST(DistWorker, Overlap) {
  if (!worker("overlap")) GTEST_SKIP() << "a rank of Dist.OverlappedAllReduceOnTwoRanks";
  ASSERT_EQ(dist::world_size(), 2);
  TinyDataParallel t(4096);
  ASSERT_TRUE(t.dp.overlapped());
  ASSERT_GT(t.dp.buckets(), 2u);
  manual_seed(5);
  nn::GPT reference({.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 2});
  OverlapLog log;
  for (int step = 0; step < 5; ++step) {
    const std::string call = step == 0 ? "eager call"
                             : step == 1 ? "traced call"
                             : step == 4 ? "uncompiled step"
                                         : "replay " + std::to_string(step - 1);
    auto [x, y] = t.batch(step);
    log.take();
    t.step(x, y, step != 4);
    t.dp.all_reduce();
    const std::vector<std::string> ev = log.take();
    expect_bucket_zero_issued_mid_backward(ev, t.dp.buckets(), call);
    for (size_t k = 0; k < t.dp.buckets(); ++k)
      EXPECT_GE(index_of(ev, "reduced " + std::to_string(k)), 0) << call << ": bucket " << k;
    t.dp.load_grads();
    // The reference: the same weights, the plain backward, then each gradient all-reduced.
    for (auto& [name, p] : reference.named_parameters()) p.zero_grad();
    nn::cross_entropy(reference(x), y).backward();
    const nn::NamedTensors mine = t.model.named_parameters(), ref = reference.named_parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      Tensor expected = tensor(ref[i].second.grad().to_vector<float>(), ref[i].second.shape());
      dist::all_reduce(expected, dist::ReduceOp::Avg);
      const std::vector<float> got = mine[i].second.grad().to_vector<float>(), want = expected.to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j)
        ASSERT_NEAR(got[j], want[j], 1e-5f * std::max(1.0f, std::abs(want[j]))) << call << " " << mine[i].first << "[" << j << "]";
    }
    for (auto& [name, p] : t.model.named_parameters()) p.zero_grad();
  }
}

// Rank 1 dies (SIGKILL) or stops (SIGSTOP) inside a compiled backward, right after handing
// bucket 0 to its communication thread: rank 0's overlapped all-reduce of bucket 0 is then
// waiting for a peer that will never come.
void die_or_stop_during_overlap(int sig) {
  TinyDataParallel t(4096);
  EXPECT_TRUE(t.dp.overlapped());
  int step = 0;
  bool issued = false;  // the observer runs before each kernel: the one after the first HostCall
  cpu::KernelObserver killer = [&](const Kernel& k) {
    if (step != 2 || dist::rank() != 1) return;
    if (k.op == OpId::HostCall) issued = true;
    else if (issued) raise(sig);
  };
  cpu::set_kernel_observer(&killer);
  try {
    for (step = 0; step < 200; ++step) {
      auto [x, y] = t.batch(step);
      t.backward({x, y});
      t.dp.all_reduce();
    }
  } catch (const Error& e) {
    std::cerr << "alk " << e.what() << " (rank " << dist::rank() << "; ending the job)" << std::endl;
    dist::abort_job(1);
  }
  cpu::set_kernel_observer(nullptr);
  ADD_FAILURE() << "rank " << dist::rank() << " was not stopped";
}
TEST(DistWorker, KilledDuringOverlap) {
  if (!worker("kill-overlap")) GTEST_SKIP() << "a rank of Dist.KilledRankDuringAnOverlappedAllReduceEndsTheJob";
  die_or_stop_during_overlap(SIGKILL);
}
TEST(DistWorker, StoppedDuringOverlap) {
  if (!worker("stop-overlap")) GTEST_SKIP() << "a rank of Dist.StoppedRankDuringAnOverlappedAllReduceEndsTheJob";
  die_or_stop_during_overlap(SIGSTOP);
}

// ---- the launches ----

struct Ran {
  int status = -1;
  std::string output;
};

// Runs a shell command (stderr too) under a hard time limit.
Ran run(const std::string& cmd, int limit_s = 240) {
  Ran r;
  // timeout's status 124 says the limit ended it.
  FILE* p = popen(("timeout -k 10 " + std::to_string(limit_s) + " " + cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string mpi_env() {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp "
         "OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1 ";
}

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

#define SKIP_WITHOUT_MPI()                                                                   \
  if (kSanitized) GTEST_SKIP() << "OpenMPI's own allocations trip the leak checker";         \
  if (!have_mpirun()) ALK_SKIP_OR_FAIL_IF_REQUIRED("mpi", "no mpirun (apt-get install openmpi-bin libopenmpi-dev)")

Ran run_workers(const std::string& mode, const std::string& extra_env = "") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter = mode == "collectives"    ? "DistWorker.Collectives"
                             : mode == "kill"         ? "DistWorker.Killed"
                             : mode == "stop"         ? "DistWorker.Stopped"
                             : mode == "overlap"      ? "DistWorker.Overlap"
                             : mode == "kill-overlap" ? "DistWorker.KilledDuringOverlap"
                                                      : "DistWorker.StoppedDuringOverlap";
  return run(mpi_env() + "ALK_DIST_WORKER=" + mode + " " + extra_env + " mpirun -np 2 " + self +
             " --gtest_color=no --gtest_brief=1 --gtest_filter=" + filter);
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

int free_loopback_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len);
  close(s);
  return ntohs(sa.sin_port);
}

// The data-parallel step (backward program, bucket all-reduce, update program) against the
// one-program step, on one rank: the staging of gradients into buckets and back must not
// change a bit of training, on the CPU and on every GPU device (recorded replays).
// staged: loss.backward() then dp.stage_grads() (the buckets made after the backward's
// schedule: captured, so a compiled step still realizes them) instead of dp.backward(loss).
std::vector<double> tiny_gpt_losses(Device& dev, bool data_parallel, bool staged = false) {
  manual_seed(5);
  nn::GPT model({.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 2});
  model.to(dev);
  optim::AdamW opt(model.named_parameters(), 0.02, {.weight_decay = 0.1});
  // Small buckets: several of them, and a parameter alone in one.
  dist::DataParallel dp(model.named_parameters(), 4096);
  EXPECT_GT(dp.buckets(), 2u);
  EXPECT_EQ(dp.overlapped(), dev.info().kind == "cpu" || dev.info().kind == "cuda") << dev.name();
  auto forward = [&](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
    capture("loss", loss);
    loss.backward();
  };
  Program plain = compile([&](const std::vector<Tensor>& in) {
    forward(in);
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  });
  Program backward = compile([&](const std::vector<Tensor>& in) {
    Tensor loss = nn::cross_entropy(model(in[0]), in[1]);
    capture("loss", loss);
    if (staged) {
      loss.backward();
      dp.stage_grads();
    } else {
      dp.backward(loss);
    }
  });
  Program update = compile([&](const std::vector<Tensor>&) {
    dp.load_grads();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  });
  std::vector<double> out;
  for (int step = 0; step < 5; ++step) {
    Tensor x = randint(0, 64, {4, 8}).to(dev), y = randint(0, 64, {4, 8}).to(dev);
    if (data_parallel) {
      backward({x, y});
      dp.all_reduce();
      update({});
      out.push_back(backward.captured("loss").item());
    } else {
      plain({x, y});
      out.push_back(plain.captured("loss").item());
    }
  }
  return out;
}

TEST(Dist, DataParallelStepOnOneRankTrainsLikeThePlainStep) {
  if (dist::launched()) GTEST_SKIP() << "inside a launch";
  std::vector<Device*> devices{&cpu_device()};
  for (Device* d : available_devices())
    if (d->info().type != "cpu") devices.push_back(d);
  for (Device* d : devices) {
    const std::vector<double> plain = tiny_gpt_losses(*d, false), dp = tiny_gpt_losses(*d, true),
                              staged = tiny_gpt_losses(*d, true, true);
    ASSERT_EQ(plain.size(), dp.size());
    ASSERT_EQ(plain.size(), staged.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_NEAR(plain[i], dp[i], 1e-5) << d->name() << " step " << i + 1;
      EXPECT_NEAR(plain[i], staged[i], 1e-5) << d->name() << " step " << i + 1 << " (stage_grads)";
    }
    EXPECT_LT(dp.back(), dp.front()) << d->name() << ": it learns";
  }
}

// On one GPU, the overlapped step through NCCL: a world of one with
// ALK_DIST_NCCL_WORLD_OF_ONE=1, so every bucket goes through the copy on the backend's stream,
// ncclAllReduce on the communication stream and the events between them, in the eager call,
// the traced call and replays. It trains like the plain step. Skipped without a CUDA device
// or NCCL. On a GPU machine:
//   build/alk_tests --gtest_filter='Dist.NcclOverlapOnOneGpuTrainsLikeThePlainStep:Dist.DataParallelStep*'
TEST(Dist, NcclOverlapOnOneGpuTrainsLikeThePlainStep) {
  if (dist::launched()) GTEST_SKIP() << "inside a launch";
  Device* gpu = nullptr;
  for (Device* d : available_devices())
    if (d->name() == "cuda:0") gpu = d;
  if (!gpu) GTEST_SKIP() << "no cuda:0";
  if (const std::string why = dist::nccl_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  setenv("ALK_DIST_NCCL_WORLD_OF_ONE", "1", 1);
  if (!std::getenv("MASTER_PORT")) setenv("MASTER_PORT", std::to_string(free_loopback_port()).c_str(), 1);
  const std::vector<double> plain = tiny_gpt_losses(*gpu, false), dp = tiny_gpt_losses(*gpu, true);
  unsetenv("ALK_DIST_NCCL_WORLD_OF_ONE");
  ASSERT_EQ(plain.size(), dp.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(plain[i], dp[i], 1e-4) << "step " << i + 1;
  EXPECT_LT(dp.back(), dp.front()) << "it learns";
}

TEST(Dist, WorldOfOneIsTheIdentity) {
  if (dist::launched()) GTEST_SKIP() << "inside a launch";
  Tensor t = tensor(std::vector<float>{1, 2, 3}, {3});
  dist::all_reduce(t);
  dist::broadcast(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(dist::all_gather(t).shape(), (Shape{1, 3}));
  EXPECT_EQ(dist::world_size(), 1);
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_THROW(dist::shard_rows(7, 0, 2), Error);  // 7 rows do not split over 2 ranks
}


// NCCL's unique id goes from rank 0 to every peer over MASTER_ADDR:MASTER_PORT (loopback).
TEST(Dist, TcpRendezvousHandsRankZerosBytesToEveryPeer) {
  const int port = free_loopback_port(), world = 3;
  std::vector<std::vector<unsigned char>> got(world, std::vector<unsigned char>(128, 0));
  for (size_t i = 0; i < 128; ++i) got[0][i] = static_cast<unsigned char>(i * 7 + 1);
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int r = world - 1; r >= 0; --r)  // peers first: they retry until rank 0 listens
    ranks.emplace_back([&, r] {
      try {
        dist::TcpExchange ex("127.0.0.1", port, r, world, 30);
        ex.broadcast_from_rank0(got[r].data(), got[r].size());
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(got[r], got[0]) << "rank " << r;
  }
}

TEST(Dist, TcpRendezvousWithoutRankZeroIsAnErrorAfterTheTimeout) {
  dist::TcpExchange ex("127.0.0.1", free_loopback_port(), 1, 2, 0.3);
  unsigned char id[128] = {};
  try {
    ex.broadcast_from_rank0(id, sizeof id);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1:"), std::string::npos) << e.what();
  }
}

// A missing NCCL is refused with the reason, not a crash; an installed one has every
// function alk declares (the names and the library are checked, not the calls: no GPU).
TEST(Dist, NcclIsLoadedOrRefusedWithTheReason) {
  const std::string why = dist::nccl_load_error("/nonexistent/libnccl.so.2");
  EXPECT_NE(why.find("cannot load NCCL"), std::string::npos) << why;
  EXPECT_NE(why.find("ALK_NCCL_PATH"), std::string::npos) << why;
  if (kSanitized) return;  // NCCL's own start-up allocations are no business of the leak checker
  const std::string installed = dist::nccl_load_error("libnccl.so.2");
  if (installed.find("cannot load") != std::string::npos) GTEST_SKIP() << "no libnccl.so.2 here: " << installed;
  EXPECT_EQ(installed, "");
}

TEST(Dist, CollectivesOverMpi) {
  SKIP_WITHOUT_MPI();
  const Ran r = run_workers("collectives");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "[  PASSED  ] 1 test"), 2) << r.output;  // both ranks ran it
}

TEST(Dist, KilledRankEndsTheJob) {
  SKIP_WITHOUT_MPI();
  const Ran r = run_workers("kill", "ALK_DIST_TIMEOUT=20");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the time limit ended it, not alk or mpirun: " << r.output;
  // mpirun sees the death, or the survivor's MPI call fails, or the watchdog fires.
  const bool told = r.output.find("signal 9") != std::string::npos || r.output.find("alk: dist error") != std::string::npos ||
                    r.output.find("dist: mpi: MPI_Allreduce failed") != std::string::npos;
  EXPECT_TRUE(told) << r.output;
}

TEST(Dist, StoppedRankEndsTheJobAfterTheTimeout) {
  SKIP_WITHOUT_MPI();
  const Ran r = run_workers("stop", "ALK_DIST_TIMEOUT=3");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the time limit ended it, not the watchdog: " << r.output;
  EXPECT_NE(r.output.find("alk: dist error: rank 0 of 2: all_reduce waited more than 3 s"), std::string::npos)
      << r.output;
}

TEST(Dist, OverlappedAllReduceOnTwoRanks) {
  SKIP_WITHOUT_MPI();
  // The communication thread's two ways of waiting: MPI_Test with sleeps (the default) and
  // MPI's blocking call.
  for (const std::string wait : {"", "ALK_DIST_MPI_SLEEP_US=0"}) {
    const Ran r = run_workers("overlap", wait);
    EXPECT_EQ(r.status, 0) << wait << "\n" << r.output;
    EXPECT_EQ(count(r.output, "[  PASSED  ] 1 test"), 2) << wait << "\n" << r.output;
  }
}

TEST(Dist, KilledRankDuringAnOverlappedAllReduceEndsTheJob) {
  SKIP_WITHOUT_MPI();
  const Ran r = run_workers("kill-overlap", "ALK_DIST_TIMEOUT=20");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the time limit ended it, not alk or mpirun: " << r.output;
  const bool told = r.output.find("signal 9") != std::string::npos || r.output.find("alk: dist error") != std::string::npos ||
                    r.output.find("dist: mpi: MPI_Allreduce failed") != std::string::npos;
  EXPECT_TRUE(told) << r.output;
  EXPECT_EQ(r.output.find("was not stopped"), std::string::npos) << r.output;
}

TEST(Dist, StoppedRankDuringAnOverlappedAllReduceEndsTheJob) {
  SKIP_WITHOUT_MPI();
  const Ran r = run_workers("stop-overlap", "ALK_DIST_TIMEOUT=3");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the time limit ended it, not the watchdog: " << r.output;
  EXPECT_NE(r.output.find("alk: dist error: rank 0 of 2: gradient all_reduce (overlapped with the backward) waited "
                          "more than 3 s"),
            std::string::npos)
      << r.output;
}

// One process (a world of one: the HostCall only copies): the order proof on the eager
// call, the traced call and a replay of the compiled backward.
TEST(Dist, BucketZeroIsIssuedBeforeTheBackwardEnds) {
  if (dist::launched()) GTEST_SKIP() << "inside a launch";
  TinyDataParallel t(4096);
  ASSERT_TRUE(t.dp.overlapped());
  ASSERT_GT(t.dp.buckets(), 2u);
  OverlapLog log;
  for (int step = 0; step < 4; ++step) {  // eager call, traced call, replay, uncompiled step
    auto [x, y] = t.batch(step);
    log.take();
    t.step(x, y, step != 3);
    t.dp.all_reduce();
    const std::vector<std::string> ev = log.take();
    expect_bucket_zero_issued_mid_backward(ev, t.dp.buckets(), "call " + std::to_string(step + 1));
    if (step == 2) {
      EXPECT_GE(index_of(ev, "ran Concat"), 0) << "a replay runs the buckets' copies";
    }
    t.dp.load_grads();
    for (auto& [name, p] : t.model.named_parameters()) p.zero_grad();
  }
}

// ---- data-parallel training through the CLI ----

#ifdef ALK_CLI_PATH
std::string corpus_text() {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "old", "tree", "by", "river"};
  std::string s;
  uint64_t x = 7;
  while (s.size() < 12000) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s += words[(x >> 33) % 14];
    s += (x >> 20) % 9 == 0 ? ".\n" : " ";
  }
  return s;
}

std::string train_cmd(const testing::TempDir& dir, const std::string& out, const std::string& extra) {
  return mpi_env() + std::string(ALK_CLI_PATH) + " train --device cpu --corpus " + (dir / "corpus.txt") + " --out " +
         (dir / out) + " --ctx 16 --dim 32 --layers 1 --heads 2 --vocab-size 300 --eval-every 3" +
         " --sample-tokens 0 --log-every 1 --ckpt-every 0 --lr 1 " + extra;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  // Training losses, and the validation losses after them (every 3 steps: sharded too).
  for (const train::MetricPoint& p : train::read_metrics(metrics)) out.push_back(p.loss);
  for (const train::MetricPoint& p : train::read_metrics(metrics))
    if (p.val_loss) out.push_back(*p.val_loss);
  return out;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 5e-4 * std::max(1.0, std::abs(a[i]))) << what << " step " << i + 1;
}

TEST(Dist, TwoRanksTrainLikeOneWithTheSameGlobalBatch) {
  SKIP_WITHOUT_MPI();
  testing::TempDir dir;
  std::ofstream(dir / "corpus.txt") << corpus_text();
  const Ran one = run(train_cmd(dir, "one", "--steps 6 --batch 4"));
  ASSERT_EQ(one.status, 0) << one.output;
  // The same global batch (4) as 2 x 2 rows, spawned by --nproc (mpirun underneath).
  const Ran two = run(train_cmd(dir, "two", "--steps 6 --batch 4 --nproc 2"));
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("data parallel over 2 ranks, 2 rows each"), std::string::npos) << two.output;
  EXPECT_EQ(count(two.output, "model: GPT"), 1) << "only rank 0 logs: " << two.output;
  const std::vector<double> ref = losses(dir / "one/metrics.jsonl");
  ASSERT_EQ(ref.size(), 8u);  // 6 steps, 2 validations
  expect_close(losses(dir / "two/metrics.jsonl"), ref, "2 ranks vs 1");
  // The same without the overlap (every bucket all-reduced after the backward), launched by
  // the README's line: mpirun -np 2 alk train ...
  std::string sync_cmd = train_cmd(dir, "sync", "--steps 6 --batch 4");
  sync_cmd.replace(sync_cmd.find(ALK_CLI_PATH), std::string(ALK_CLI_PATH).size(), "mpirun -np 2 " + std::string(ALK_CLI_PATH));
  const Ran sync = run("env ALK_DIST_OVERLAP=0 " + sync_cmd);
  ASSERT_EQ(sync.status, 0) << sync.output;
  expect_close(losses(dir / "sync/metrics.jsonl"), ref, "2 ranks without overlap vs 1");
  // Resume onto another world size: 3 steps on 2 ranks, then on to step 6 on 1 rank (the
  // learning rate is in its warmup, so the shorter run's schedule is the same).
  ASSERT_EQ(run(train_cmd(dir, "resumed", "--steps 3 --batch 4 --nproc 2")).status, 0);
  const Ran resumed = run(mpi_env() + std::string(ALK_CLI_PATH) + " train --resume " + (dir / "resumed") + " --steps 6");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_close(losses(dir / "resumed/metrics.jsonl"), ref, "2 ranks, then resumed on 1");
  // And the other way: 3 steps on 1 rank, then on to step 6 on 2 ranks with ZeRO-1 (each
  // rank loads its share of the optimizer state).
  ASSERT_EQ(run(train_cmd(dir, "grown", "--steps 3 --batch 4")).status, 0);
  const Ran grown = run(mpi_env() + std::string(ALK_CLI_PATH) + " train --resume " + (dir / "grown") +
                        " --steps 6 --nproc 2 --zero 1");
  ASSERT_EQ(grown.status, 0) << grown.output;
  EXPECT_NE(grown.output.find("ZeRO-1"), std::string::npos) << grown.output;
  expect_close(losses(dir / "grown/metrics.jsonl"), ref, "1 rank, then resumed on 2 with ZeRO-1");
}

// ZeRO-1: the same losses as plain data parallel, and its checkpoint (the optimizer state
// gathered from the ranks that own it) resumes on one rank to the same losses.
TEST(Dist, ZeroOneTrainsLikePlainDataParallelAndItsCheckpointResumes) {
  SKIP_WITHOUT_MPI();
  testing::TempDir dir;
  std::ofstream(dir / "corpus.txt") << corpus_text();
  const Ran one = run(train_cmd(dir, "one", "--steps 6 --batch 4"));
  ASSERT_EQ(one.status, 0) << one.output;
  const Ran zero = run(train_cmd(dir, "zero", "--steps 3 --batch 4 --nproc 2 --zero 1"));
  ASSERT_EQ(zero.status, 0) << zero.output;
  EXPECT_NE(zero.output.find("ZeRO-1 (this rank's optimizer: "), std::string::npos) << zero.output;
  const Ran resumed = run(mpi_env() + std::string(ALK_CLI_PATH) + " train --resume " + (dir / "zero") + " --steps 6 --zero 0");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_close(losses(dir / "zero/metrics.jsonl"), losses(dir / "one/metrics.jsonl"), "ZeRO-1 on 2 ranks, then 1 rank");
}

// torchrun-style ranks (no mpirun) have NCCL only: CPU training there is a clear error.
TEST(Dist, EnvironmentLaunchOnTheCpuNeedsMpi) {
  if (kSanitized) GTEST_SKIP() << "runs the CLI";
  testing::TempDir dir;
  std::ofstream(dir / "corpus.txt") << corpus_text();
  const Ran r = run("env ALK_LAUNCHER=env " + train_cmd(dir, "env", "--steps 1 --batch 4 --nproc 2"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, 124) << r.output;
  EXPECT_NE(r.output.find("needs MPI (launch with mpirun"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failed (exit status"), std::string::npos) << r.output;
}

TEST(Dist, BatchThatDoesNotSplitIsAnError) {
  SKIP_WITHOUT_MPI();
  testing::TempDir dir;
  std::ofstream(dir / "corpus.txt") << corpus_text();
  const Ran r = run(train_cmd(dir, "odd", "--steps 1 --batch 3 --nproc 2"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("does not split evenly over 2 ranks"), std::string::npos) << r.output;
}
#endif

}  // namespace
}  // namespace alk
