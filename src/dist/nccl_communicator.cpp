// NCCL through libnccl.so.2, opened with dlopen (as the CUDA backend opens libcuda): alk
// builds without NCCL and reports why it cannot run where it is missing. The library is
// found at $ALK_NCCL_PATH, else by the loader's search, else inside PyTorch's pip packages
// (site-packages/nvidia/nccl/lib), where GPU machines usually have it. Collectives are
// queued on the CUDA backend's one stream, so they run in order with alk's kernels.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace alk::dist {

namespace {

using ncclComm_t = void*;
using ncclResult_t = int;
struct ncclUniqueId {
  char internal[128];
};
constexpr ncclResult_t kNcclSuccess = 0, kNcclInProgress = 7;
// ncclDataType_t and ncclRedOp_t values (nccl.h).
constexpr int kInt32 = 2, kUint8 = 1, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9;
constexpr int kSum = 0, kMax = 2, kMin = 3, kAvg = 4;

struct Nccl {
  void* lib = nullptr;
  std::string error, path;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, int, int, ncclComm_t, void*) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, int, ncclComm_t, void*) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, void*) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
};

// site-packages/nvidia/nccl/lib/libnccl.so.2 of the Python installations found.
std::vector<std::string> pip_candidates() {
  std::vector<std::string> out;
  namespace fs = std::filesystem;
  for (const char* base : {"/usr/local/lib", "/usr/lib", "/opt/conda/lib"}) {
    std::error_code ec;
    for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("python3", 0) != 0) continue;
      for (const char* sub : {"/site-packages/nvidia/nccl/lib/libnccl.so.2", "/dist-packages/nvidia/nccl/lib/libnccl.so.2"})
        if (fs::exists(it->path().string() + sub, ec)) out.push_back(it->path().string() + sub);
    }
  }
  return out;
}

// The library from the first of `tries` that loads, with every function bound.
Nccl load(const std::vector<std::string>& tries) {
  Nccl n;
  std::string errors;
  for (const std::string& p : tries) {
    n.lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n.lib) {
      n.path = p;
      break;
    }
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : p);
  }
  if (!n.lib) {
    n.error = "cannot load NCCL (" + errors + "): install it (pip's nvidia-nccl-cu12 or the nccl package) or set ALK_NCCL_PATH";
    return n;
  }
  auto bind = [&n](auto& f, const char* name) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(n.lib, name));
    if (!f && n.error.empty()) n.error = std::string(n.path) + " has no " + name;
  };
  bind(n.GetUniqueId, "ncclGetUniqueId");
  bind(n.CommInitRank, "ncclCommInitRank");
  bind(n.AllReduce, "ncclAllReduce");
  bind(n.Broadcast, "ncclBroadcast");
  bind(n.AllGather, "ncclAllGather");
  bind(n.ReduceScatter, "ncclReduceScatter");
  bind(n.CommDestroy, "ncclCommDestroy");
  bind(n.CommAbort, "ncclCommAbort");
  bind(n.CommGetAsyncError, "ncclCommGetAsyncError");
  bind(n.GetErrorString, "ncclGetErrorString");
  return n;
}

Nccl& nccl() {
  static Nccl n = [] {
    std::vector<std::string> tries;
    if (const char* env = std::getenv("ALK_NCCL_PATH"); env && *env) {
      tries.push_back(env);
    } else {
      tries.push_back("libnccl.so.2");
      for (const std::string& p : pip_candidates()) tries.push_back(p);
    }
    return load(tries);
  }();
  return n;
}

int nccl_type(DType d) {
  switch (d) {
    case DType::F32: return kFloat32;
    case DType::F64: return kFloat64;
    case DType::F16: return kFloat16;
    case DType::BF16: return kBfloat16;
    case DType::I32: return kInt32;
    case DType::I64: return kInt64;
    case DType::U8:
    case DType::Bool: return kUint8;
  }
  return kUint8;
}
int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return kSum;
    case ReduceOp::Avg: return kAvg;
    case ReduceOp::Max: return kMax;
    case ReduceOp::Min: return kMin;
  }
  return kSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, int device, IdExchange& exchange) : rank_(rank), size_(size), device_(device) {
    Nccl& n = nccl();
    if (!n.error.empty()) fail_collective("nccl", "open", n.error);
    stream_ = cuda_stream_of(device);  // also makes the device's context current
    if (!stream_) fail_collective("nccl", "open", "no CUDA device cuda:" + std::to_string(device));
    ncclUniqueId id{};
    if (rank == 0) call("ncclGetUniqueId", n.GetUniqueId(&id));
    exchange.broadcast_from_rank0(&id, sizeof id);
    call("ncclCommInitRank", n.CommInitRank(&comm_, size, id, rank));
  }
  ~NcclCommunicator() override {
    if (comm_) nccl().CommDestroy(comm_);
  }
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    call("ncclAllReduce", nccl().AllReduce(data, data, count, nccl_type(dtype), nccl_op(op), comm_, current()));
  }
  void all_reduce_on(void* data, size_t count, DType dtype, ReduceOp op, void* stream) override {
    (void)current();  // makes the device's context current on this thread
    call("ncclAllReduce", nccl().AllReduce(data, data, count, nccl_type(dtype), nccl_op(op), comm_, stream));
  }
  void broadcast(void* data, size_t count, DType dtype, int root) override {
    call("ncclBroadcast", nccl().Broadcast(data, data, count, nccl_type(dtype), root, comm_, current()));
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    call("ncclAllGather", nccl().AllGather(send, recv, count, nccl_type(dtype), comm_, current()));
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    call("ncclReduceScatter", nccl().ReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, current()));
  }
  void barrier() override { fail_collective("nccl", "barrier", "a NCCL barrier is an all-reduce of a device tensor"); }
  void abort() noexcept override {
    if (comm_) nccl().CommAbort(comm_);
    comm_ = nullptr;
  }
  std::string async_error() override {
    if (!comm_) return "";
    ncclResult_t r = kNcclSuccess;
    if (nccl().CommGetAsyncError(comm_, &r) != kNcclSuccess || r == kNcclSuccess || r == kNcclInProgress) return "";
    return nccl().GetErrorString(r);
  }

 private:
  int rank_, size_, device_;
  void* stream_ = nullptr;
  ncclComm_t comm_ = nullptr;

  // The stream, with the device's context made current on the calling thread.
  void* current() const { return cuda_stream_of(device_); }
  static void call(const char* what, ncclResult_t r) {
    if (r == kNcclSuccess || r == kNcclInProgress) return;
    fail_collective("nccl", what, nccl().GetErrorString ? nccl().GetErrorString(r) : std::to_string(r));
  }
};

}  // namespace

std::string nccl_unavailable_reason() { return nccl().error; }
std::string nccl_load_error(const std::string& path) { return load({path}).error; }

std::unique_ptr<Communicator> open_nccl(int rank, int size, int device_index, IdExchange& exchange) {
  return std::make_unique<NcclCommunicator>(rank, size, device_index, exchange);
}

}  // namespace alk::dist
