// The process group: who this process is (from mpirun's or torchrun-style environment),
// the engines (MPI for host memory, NCCL per CUDA device), the collectives on tensors, and
// the watchdog that ends the job when a collective waits longer than the timeout.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "dist/communicator.h"
#include "graph/graph.h"

#ifdef ALK_HAVE_CUDA
#include "alk/cuda.h"
#endif

namespace alk::dist {

[[noreturn]] void fail_collective(const std::string& engine, const std::string& call, const std::string& why) {
  throw Error("dist", engine + ": " + call + " failed: " + why, Loc::current());
}

void* cuda_stream_of(int device_index) {
#ifdef ALK_HAVE_CUDA
  return cuda::stream(device_index);
#else
  (void)device_index;
  return nullptr;
#endif
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  check(end && *end == '\0' && x >= 0 && x < (1 << 20), "dist", Loc::current(), "environment variable ", name, "='",
        v, "' is not a rank or size");
  return static_cast<int>(x);
}
std::string env_str(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

struct MpiExchange : IdExchange {
  explicit MpiExchange(Communicator& m) : mpi(m) {}
  void broadcast_from_rank0(void* bytes, size_t n) override { mpi.broadcast(bytes, n, DType::U8, 0); }
  Communicator& mpi;
};

struct Group {
  std::mutex mutex;
  bool ready = false;
  int rank = 0, world = 1, local_rank = 0;
  double timeout_s = 300;
  std::unique_ptr<Communicator> mpi;
  std::map<int, std::unique_ptr<Communicator>> nccl;  // by CUDA device index
  // The watchdog: when a collective started (ns since the clock's epoch; 0 = none running).
  std::atomic<int64_t> busy_since{0};
  std::atomic<const char*> busy_what{""};
  std::atomic<bool> stop{false};
  std::thread watchdog;

  void start_watchdog() {
    watchdog = std::thread([this] {
      while (!stop.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const int64_t since = busy_since.load();
        std::string why;
        for (auto& [dev, c] : nccl_snapshot())
          if (std::string e = c->async_error(); !e.empty()) why = "NCCL reported: " + e;
        if (why.empty() && since != 0) {
          const double waited = static_cast<double>(now_ns() - since) * 1e-9;
          if (waited > timeout_s)
            why = std::string(busy_what.load()) + " waited more than " + std::to_string(static_cast<int>(timeout_s)) +
                  " s for its peers (ALK_DIST_TIMEOUT)";
        }
        if (why.empty()) continue;
        std::cerr << "alk: dist error: rank " << rank << " of " << world << ": " << why
                  << ": a peer died or hangs; ending the job" << std::endl;
        for (auto& [dev, c] : nccl_snapshot()) c->abort();
        std::_Exit(3);  // the main thread is blocked inside the engine: nothing else can end it
      }
    });
  }
  std::vector<std::pair<int, Communicator*>> nccl_snapshot() {
    std::vector<std::pair<int, Communicator*>> out;
    std::unique_lock lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) return out;
    for (auto& [d, c] : nccl) out.push_back({d, c.get()});
    return out;
  }
};

Group& group() {
  static Group* g = new Group;  // lives to the end: the watchdog may still look at it
  return *g;
}

void init_locked(Group& g) {
  if (g.ready) return;
  if (const char* t = std::getenv("ALK_DIST_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    check(end && *end == '\0' && v > 0, "dist", Loc::current(), "ALK_DIST_TIMEOUT='", t, "' is not a positive number of seconds");
    g.timeout_s = v;
  }
  if (under_mpirun()) {
    g.mpi = open_mpi();
    g.rank = g.mpi->rank();
    g.world = g.mpi->size();
    g.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", g.rank);
  } else {
    g.world = env_int("WORLD_SIZE", 1);
    g.rank = env_int("RANK", 0);
    g.local_rank = env_int("LOCAL_RANK", g.rank);
    check(g.world >= 1 && g.rank < g.world, "dist", Loc::current(), "RANK=", g.rank, " is not below WORLD_SIZE=", g.world);
  }
  g.ready = true;
  if (g.world > 1) g.start_watchdog();
  if (g.world > 1 || g.mpi) std::atexit(finalize);  // MPI_Finalize, or mpirun reports a failure
}

// Marks a collective as running for the watchdog.
struct Busy {
  explicit Busy(const char* what) {
    group().busy_what = what;
    group().busy_since = now_ns();
  }
  ~Busy() { group().busy_since = 0; }
};

int cuda_index(const Device& d) {
  const std::string name = d.name();
  return name.rfind("cuda:", 0) == 0 ? std::atoi(name.c_str() + 5) : -1;
}

Communicator& nccl_for(Group& g, int device) {
  std::lock_guard lock(g.mutex);
  auto& c = g.nccl[device];
  if (!c) {
    Busy busy("NCCL initialization");  // a peer that never comes ends the job too
    if (g.mpi) {
      MpiExchange ex(*g.mpi);
      c = open_nccl(g.rank, g.world, device, ex);
    } else {
      TcpExchange ex(env_str("MASTER_ADDR", "127.0.0.1"), env_int("MASTER_PORT", 29500), g.rank, g.world, g.timeout_s);
      c = open_nccl(g.rank, g.world, device, ex);
    }
  }
  return *c;
}

// The engine for a tensor's memory; `device` receives the device collectives run on.
Communicator& engine_for(Group& g, const Tensor& t, Loc loc) {
  detail::wait_issued();  // MPI is called from one thread at a time (overlap.cpp)
  const int cuda = cuda_index(t.device());
  if (cuda >= 0) return nccl_for(g, cuda);
  check(g.mpi != nullptr, "dist", loc, "a collective over a ", t.device().name(),
        " tensor needs MPI (launch with mpirun) or a CUDA tensor (NCCL)");
  return *g.mpi;
}

void synchronize_device(Device& d) {
  if (cuda_index(d) >= 0) d.synchronize();
}

// Where a realized tensor's first element is, for the engines (a device pointer for NCCL).
void* data_of(const Tensor& c) {
  const Buffer& buffer = *c.impl()->node->buffer;
  return buffer.device->address(buffer, static_cast<size_t>(c.offset()) * dtype_size(c.dtype()));
}

// A fresh realized contiguous copy of t on its device, and its data pointer.
std::pair<Tensor, void*> fresh_copy(const Tensor& t, Shape shape) {
  const std::vector<unsigned char> bytes = host_bytes(t);
  Tensor c = tensor_from_host(bytes.data(), std::move(shape), t.dtype(), t.device());
  c.realize();
  return {c, data_of(c)};
}
Tensor zeros_on(Shape shape, DType dtype, Device& dev) {
  size_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  std::vector<unsigned char> bytes(n);
  Tensor c = tensor_from_host(bytes.data(), std::move(shape), dtype, dev);
  c.realize();
  return c;
}

// A CPU tensor in a job without MPI (an environment launch) goes through NCCL on the
// rank's GPU (cuda:LOCAL_RANK) and back.
bool staged(const Group& g, const Tensor& t) { return g.world > 1 && !g.mpi && cuda_index(t.device()) < 0; }
Device& rank_gpu(const Group& g) {
  const std::string name = "cuda:" + std::to_string(g.local_rank);
  for (Device* d : available_devices())
    if (d->name() == name) return *d;
  fail("dist", Loc::current(), "rank ", g.rank, ": a collective over a CPU tensor needs MPI (launch with mpirun, or ",
       "alk train --nproc with mpirun on PATH) or this rank's GPU ", name, " for NCCL, and neither is here");
}

}  // namespace

bool launched() {
  if (under_mpirun()) return env_int("OMPI_COMM_WORLD_SIZE", 1) > 1;
  return env_int("WORLD_SIZE", 1) > 1;
}

void init(Loc loc) {
  (void)loc;
  Group& g = group();
  std::lock_guard lock(g.mutex);
  init_locked(g);
}
int rank() { return init(), group().rank; }
int world_size() { return init(), group().world; }
int local_rank() { return init(), group().local_rank; }
double timeout_seconds() { return init(), group().timeout_s; }

void finalize() {
  Group& g = group();
  if (!g.ready) return;
  g.stop = true;
  if (g.watchdog.joinable()) g.watchdog.join();
  std::lock_guard lock(g.mutex);
  g.nccl.clear();
  g.mpi.reset();
}

void abort_job(int status) {
  Group& g = group();
  for (auto& [dev, c] : g.nccl_snapshot()) c->abort();
  std::cerr.flush();
  if (g.mpi) g.mpi->abort();  // MPI_Abort: mpirun ends every rank
  std::_Exit(status);
}

// An in-place collective on t (all_reduce, broadcast): through the rank's GPU when t's
// device has no engine (staged), else `run(engine, pointer)` on a fresh copy that then
// becomes t's value.
template <class Run>
void in_place(Group& g, Tensor& t, const char* what, Loc loc, const Run& run) {
  if (staged(g, t)) {
    Tensor d = t.to(rank_gpu(g), loc);
    in_place(g, d, what, loc, run);
    t.assign_(d.to(t.device(), loc), loc);
    return;
  }
  Communicator& c = engine_for(g, t, loc);
  auto [copy, ptr] = fresh_copy(t, t.shape());
  {
    Busy busy(what);
    run(c, ptr);
    synchronize_device(t.device());
  }
  t.assign_(copy, loc);
}

void all_reduce(Tensor& t, ReduceOp op, Loc loc) {
  check(t.defined(), "dist", loc, "all_reduce of an undefined tensor");
  init();
  Group& g = group();
  if (g.world == 1) return;
  in_place(g, t, "all_reduce", loc, [&](Communicator& c, void* ptr) {
    c.all_reduce(ptr, static_cast<size_t>(t.numel()), t.dtype(), op);
  });
}

void broadcast(Tensor& t, int root, Loc loc) {
  check(t.defined(), "dist", loc, "broadcast of an undefined tensor");
  init();
  Group& g = group();
  check(root >= 0 && root < g.world, "dist", loc, "broadcast root ", root, " is not a rank of a world of ", g.world);
  if (g.world == 1) return;
  in_place(g, t, "broadcast", loc, [&](Communicator& c, void* ptr) {
    c.broadcast(ptr, static_cast<size_t>(t.numel()), t.dtype(), root);
  });
}

Tensor all_gather(const Tensor& t, Loc loc) {
  check(t.defined(), "dist", loc, "all_gather of an undefined tensor");
  init();
  Group& g = group();
  if (g.world == 1) return t.unsqueeze(0, loc);
  if (staged(g, t)) return all_gather(t.to(rank_gpu(g), loc), loc).to(t.device(), loc);
  Communicator& c = engine_for(g, t, loc);
  auto [copy, ptr] = fresh_copy(t, t.shape());
  Shape out_shape = t.shape();
  out_shape.insert(out_shape.begin(), g.world);
  Tensor out = zeros_on(out_shape, t.dtype(), t.device());
  {
    Busy busy("all_gather");
    c.all_gather(ptr, data_of(out), static_cast<size_t>(t.numel()), t.dtype());
    synchronize_device(t.device());
  }
  return out;
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op, Loc loc) {
  check(t.defined(), "dist", loc, "reduce_scatter of an undefined tensor");
  init();
  Group& g = group();
  check(t.dim() >= 1 && t.size(0) % g.world == 0, "dist", loc, "reduce_scatter needs dim 0 (", to_string(t.shape()),
        ") divisible by the world size ", g.world);
  if (g.world == 1) return t;
  if (staged(g, t)) return reduce_scatter(t.to(rank_gpu(g), loc), op, loc).to(t.device(), loc);
  Communicator& c = engine_for(g, t, loc);
  auto [copy, ptr] = fresh_copy(t, t.shape());
  Shape out_shape = t.shape();
  out_shape[0] /= g.world;
  Tensor out = zeros_on(out_shape, t.dtype(), t.device());
  {
    Busy busy("reduce_scatter");
    c.reduce_scatter(ptr, data_of(out), static_cast<size_t>(out.numel()), t.dtype(), op);
    synchronize_device(t.device());
  }
  return out;
}

void barrier() {
  init();
  Group& g = group();
  if (g.world == 1) return;
  if (g.mpi) {
    detail::wait_issued();
    Busy busy("barrier");
    g.mpi->barrier();
    return;
  }
  Tensor one = zeros({1});  // through NCCL on the rank's GPU
  all_reduce(one);
}

namespace detail {
// For overlap.cpp: the communication thread marks its all-reduce for the watchdog, and runs
// on MPI only when MPI was initialized for it (else DataParallel does not overlap).
void mark_busy(const char* what) {
  group().busy_what = what;
  group().busy_since = now_ns();
}
void clear_busy() { group().busy_since = 0; }
Communicator* overlap_engine() {
  init();
  Group& g = group();
  return g.world > 1 && g.mpi && g.mpi->serialized_threads() ? g.mpi.get() : nullptr;
}
Communicator* overlap_engine_cuda(int device) {
  init();
  Group& g = group();
  const char* one = std::getenv("ALK_DIST_NCCL_WORLD_OF_ONE");
  if (g.world == 1 && !(one && std::string(one) == "1")) return nullptr;
  return &nccl_for(g, device);
}
}  // namespace detail

// For data_parallel.cpp: in-place averages of realized tensors of one device, all queued
// before one wait (NCCL runs them in order on the device's stream).
namespace detail {
void all_reduce_in_place(const std::vector<Tensor>& flats, ReduceOp op) {
  init();
  Group& g = group();
  if (g.world == 1 || flats.empty()) return;
  Busy busy("gradient all_reduce");
  for (const Tensor& flat : flats) {
    Communicator& c = engine_for(g, flat, Loc::current());
    c.all_reduce_sleeping(data_of(flat), static_cast<size_t>(flat.numel()), flat.dtype(), op, detail::mpi_sleep_us());
  }
  synchronize_device(flats.front().device());
}
void broadcast_in_place(const std::vector<Tensor>& ts, const std::vector<int>& roots) {
  init();
  Group& g = group();
  if (g.world == 1 || ts.empty()) return;
  Busy busy("parameter broadcast");
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i].realize();
    Communicator& c = engine_for(g, ts[i], Loc::current());
    c.broadcast(data_of(ts[i]), static_cast<size_t>(ts[i].numel()), ts[i].dtype(), roots[i]);
  }
  synchronize_device(ts.front().device());
}
}  // namespace detail

}  // namespace alk::dist
