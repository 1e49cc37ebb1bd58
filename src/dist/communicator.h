// The engines alk::dist runs collectives on, behind one interface: MPI (OpenMPI, for host
// memory) and NCCL (for CUDA device memory). Both libraries are opened at run time with
// dlopen, so alk builds and starts on machines that have neither. Pointers are host
// pointers for MPI and device pointers (CUdeviceptr) for NCCL; every call is in place or
// between two buffers of the same kind. Errors are alk::Error("dist", ...).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "alk/dist.h"
#include "alk/dtype.h"
#include "alk/tensor.h"

namespace alk::dist {

[[noreturn]] void fail_collective(const std::string& engine, const std::string& call, const std::string& why);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[0..count) becomes the reduction over the ranks.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
  // recv holds size() * count elements: rank r's send at r * count.
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  // send holds size() * count elements; recv gets this rank's block of the reduction.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Ends the job's collectives at once (a peer died or hangs): what the watchdog calls.
  virtual void abort() noexcept = 0;
  // An error the engine met in work already queued (NCCL runs asynchronously), or "".
  virtual std::string async_error() { return ""; }
  // Whether another thread than the one that opened it may make the calls (one at a time):
  // MPI initialized with MPI_THREAD_SERIALIZED or more. The overlapped all-reduce needs it.
  virtual bool serialized_threads() const { return false; }
  // The all-reduce, waited for by testing every `sleep_us` microseconds and sleeping between
  // (MPI: MPI_Iallreduce + MPI_Test), not by the engine's own busy polling: the overlapped
  // all-reduce's thread then leaves the cores to the backward while it waits for its peers.
  virtual void all_reduce_sleeping(void* data, size_t count, DType dtype, ReduceOp op, int sleep_us) {
    (void)sleep_us;
    all_reduce(data, count, dtype, op);
  }
  // NCCL: the all-reduce queued on `stream` (a CUstream of the communicator's device) instead
  // of the CUDA backend's stream: the overlapped gradient all-reduce's communication stream.
  virtual void all_reduce_on(void* data, size_t count, DType dtype, ReduceOp op, void* stream) {
    (void)data, (void)count, (void)dtype, (void)op, (void)stream;
    fail_collective(name(), "all_reduce_on", "no stream-ordered all-reduce on this engine");
  }
};

// The gradient all-reduce overlapped with the backward (overlap.cpp; CPU tensors over MPI).
namespace detail {
// A HostCall node over `staged` (1-D f32): when the scheduler runs it, its output becomes a
// copy of `staged` whose all-reduce (average) starts at once on the communication thread.
Tensor issue_when_made(const Tensor& staged, int bucket);
// Waits for every all-reduce issued so far; throws the first one's error as alk::Error.
void wait_issued();
// ALK_DIST_MPI_SLEEP_US: how a gradient all-reduce over MPI waits (all_reduce_sleeping):
// default 50 us between tests; 0: MPI's blocking call, which spins a core while the peers
// are still computing (on a machine whose cores the ranks share, that slows them down).
int mpi_sleep_us();
// For tests: an ordered log of "issue <bucket>" (the HostCall ran), "reduced <bucket>" (the
// communication thread finished it) and whatever note_event adds (a kernel observer).
void set_event_log(std::vector<std::string>* log);  // null: off
void note_event(const std::string& event);
// process_group.cpp: the engine the communication thread calls (MPI initialized with
// MPI_THREAD_SERIALIZED, in a world of more than one), else null; and the watchdog's mark.
Communicator* overlap_engine();
// NCCL on CUDA device `device` in a world of more than one (or of one with
// ALK_DIST_NCCL_WORLD_OF_ONE=1: the single-GPU check of the stream-ordered path), else null.
Communicator* overlap_engine_cuda(int device);
void mark_busy(const char* what);
void clear_busy();
}  // namespace detail

// MPI_COMM_WORLD of an mpirun launch (OMPI_COMM_WORLD_* set); initializes MPI.
std::unique_ptr<Communicator> open_mpi();
// A NCCL communicator over the CUDA device `device_index`, of `size` ranks. The unique id
// is made by rank 0 and handed to the others through `exchange_id` (over MPI or the TCP
// rendezvous), which must broadcast its 128 bytes from rank 0.
struct IdExchange {
  virtual ~IdExchange() = default;
  virtual void broadcast_from_rank0(void* bytes, size_t n) = 0;
};
std::unique_ptr<Communicator> open_nccl(int rank, int size, int device_index, IdExchange& exchange);
// Why NCCL cannot be used here ("" when it can be loaded).
std::string nccl_unavailable_reason();
// Why the NCCL at `path` cannot be used ("" when it loads and has every function alk calls).
std::string nccl_load_error(const std::string& path);

// The TCP rendezvous of an environment launch (MASTER_ADDR:MASTER_PORT): rank 0 listens and
// sends the bytes to each peer. Only for the NCCL id; collectives never go over it.
class TcpExchange : public IdExchange {
 public:
  TcpExchange(std::string addr, int port, int rank, int size, double timeout_s);
  void broadcast_from_rank0(void* bytes, size_t n) override;

 private:
  std::string addr_;
  int port_, rank_, size_;
  double timeout_s_;
};

// Stream and pointer of the CUDA backend, for NCCL (src/backend/cuda); null without CUDA.
void* cuda_stream_of(int device_index);

// The engine's name for errors: "a peer died or hangs" hints.
[[noreturn]] void fail_collective(const std::string& engine, const std::string& call, const std::string& why);

}  // namespace alk::dist
