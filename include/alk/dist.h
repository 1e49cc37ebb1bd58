// alk::dist: data-parallel training over several processes, on engines users already run:
// NCCL between GPUs (CUDA tensors) and MPI between hosts (CPU tensors). No protocol of
// alk's own carries data: a small TCP rendezvous only hands NCCL its unique id.
//
// Launch, either
//   mpirun -np 2 alk train --batch 16 ...            (OpenMPI: OMPI_COMM_WORLD_* set)
//   alk train --nproc 2 --batch 16 ...               (spawns the local ranks: mpirun when
//                                                      present, else RANK/WORLD_SIZE/LOCAL_RANK/
//                                                      MASTER_ADDR/MASTER_PORT, as torchrun)
// A process started without either is a world of one: every collective is the identity.
// A peer that dies or hangs ends the job with an error within ALK_DIST_TIMEOUT seconds
// (default 300): a watchdog thread aborts the collectives and exits with status 3.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/tensor.h"

namespace alk::dist {

enum class ReduceOp { Sum, Avg, Max, Min };

// From the environment: whether this process is one of several ranks.
bool launched();
// Initializes the process group (idempotent): MPI under mpirun; NCCL is opened on the first
// collective over a CUDA tensor. rank()/world_size() initialize on first use too.
void init(Loc loc = Loc::current());
int rank();
int world_size();
int local_rank();
// Seconds a collective may wait for its peers before the job is ended (ALK_DIST_TIMEOUT).
double timeout_seconds();
// Ends collectives (NCCL's communicators, MPI) in order at exit; called by an atexit hook.
void finalize();
// Ends the whole job now (a rank failed: the others would wait for it): aborts the engines
// (MPI_Abort takes the other ranks down; NCCL's communicators are aborted) and exits.
[[noreturn]] void abort_job(int status);

// Collectives on tensors of any device. CUDA tensors go through NCCL, CPU tensors through
// MPI (or NCCL over a staging copy when the job has no MPI). Every rank must call them in
// the same order with tensors of the same shape and dtype.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum, Loc loc = Loc::current());  // in place
void broadcast(Tensor& t, int root = 0, Loc loc = Loc::current());                 // in place
Tensor all_gather(const Tensor& t, Loc loc = Loc::current());  // the ranks' tensors stacked on a new dim 0
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum, Loc loc = Loc::current());  // dim 0 split
void barrier();

// `alk train --nproc N`: runs this program's command line (without --nproc) as N local
// ranks (mpirun when on PATH, else the environment variables above; ALK_LAUNCHER=env|mpirun
// chooses) and returns the job's exit status: 0, or the first failing rank's.
int launch_local(int nproc, Loc loc = Loc::current());

// ---- data parallel ----

// The distributed sampler: rank r's rows [first, first + count) of a global batch, so the
// ranks' rows are disjoint and together the batch. Batches are a function of the step
// (TokenDataset::batch), so a run resumes at any step and on any world size.
std::pair<int64_t, int64_t> shard_rows(int64_t global_batch, int rank, int world, Loc loc = Loc::current());

// Gradients of a model averaged over the ranks, in buckets of about bucket_bytes
// (ALK_DIST_BUCKET_BYTES overrides it; default 25 MiB). The training step is two compiled
// programs around one wait:
//   backward = compile(... dp.backward(loss); ...)   // = loss.backward(); dp.stage_grads();
//   dp.all_reduce();                                 // the averages are in the buckets
//   update = compile(... dp.load_grads(); opt.step(); opt.zero_grad(); ...)
// The all-reduce overlaps the backward (CPU tensors over MPI, CUDA tensors over NCCL): each bucket is a HostCall node
// realized in the backward's own schedule, which the scheduler runs as soon as the backward
// has made the bucket's gradients (buckets are in reverse parameter order, the order
// backward makes them); it hands the bucket to a communication thread, and all_reduce()
// only waits for the last ones. On CUDA tensors (NCCL) the same runs on a communication
// stream, ordered by events. ALK_DIST_OVERLAP=0 (and Vulkan) all-reduces every bucket in
// all_reduce(), after the backward (so does loss.backward(); stage_grads()).
// The constructor broadcasts the parameters from rank 0, so every rank starts equal.
class DataParallel {
 public:
  explicit DataParallel(const nn::NamedTensors& params, int64_t bucket_bytes = 25 << 20, Loc loc = Loc::current());
  void backward(const Tensor& loss, Loc loc = Loc::current());  // loss.backward() + stage_grads(), overlapped
  void stage_grads();  // inside the backward program: each bucket := its parameters' grads
  void all_reduce();   // the buckets averaged over the ranks (in place, on the buckets' device)
  void load_grads();   // inside the update program: each parameter's grad := its slice of a bucket
  size_t buckets() const { return buckets_.size(); }
  bool overlapped() const { return overlap_; }  // all-reduce issued during the backward

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    Tensor flat;  // f32 [elements], realized on the parameters' device
  };
  nn::NamedTensors params_;
  std::vector<Bucket> buckets_;
  bool overlap_ = false;
};

// ZeRO-1 (--zero 1): the optimizer state sharded over the ranks. Each parameter has one
// owner rank (largest first to the least loaded); a rank's optimizer holds state only for
// the parameters it owns and updates only those, then every parameter is broadcast from
// its owner. Gradients are averaged as in DataParallel, so the losses equal plain data
// parallel; only the optimizer's memory is divided by the world size.
//   dist::Zero1 zero(model.named_parameters());
//   optim::AdamW opt(zero.owned(), lr);   // in the update program: dp.load_grads(); clip; opt.step()
//   ... update({}); zero.sync_params();
class Zero1 {
 public:
  explicit Zero1(const nn::NamedTensors& params, Loc loc = Loc::current());
  nn::NamedTensors owned() const;  // this rank's parameters, in model order
  int owner(size_t i) const { return owner_[i]; }
  void sync_params();  // each parameter from its owner, in place
  // Checkpoints: the whole optimizer state (every rank calls it; every rank gets it) from
  // each rank's `opt`, and the part of a whole state that this rank's optimizer loads.
  nn::NamedTensors gather_state(const optim::Optimizer& opt);
  nn::NamedTensors own_state(const nn::NamedTensors& full) const;

 private:
  nn::NamedTensors params_;
  std::vector<int> owner_;
  int rank_ = 0;
};

}  // namespace alk::dist
