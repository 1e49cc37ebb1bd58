// Data parallel: parameters broadcast from rank 0, gradients copied into flat f32 buckets
// inside the compiled backward, the buckets averaged in place by the engine (NCCL on the
// device's stream, MPI on host memory), and the parameters' grads set to views of the
// buckets inside the compiled update. Overlapped (CPU), each bucket is the output of its
// HostCall node (overlap.cpp), a stored tensor of the backward's schedule, captured so that a
// compiled step realizes it in its one schedule and every replay rewrites the same buffer.
// Not overlapped, the buckets are realized tensors that the backward program assign_s.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "alk/compile.h"
#include "alk/dist.h"
#include "dist/communicator.h"
#include "graph/autograd.h"
#include "graph/graph.h"

namespace alk::dist {

namespace detail {
void all_reduce_in_place(const std::vector<Tensor>& flats, ReduceOp op);  // process_group.cpp
}

std::pair<int64_t, int64_t> shard_rows(int64_t global_batch, int rank, int world, Loc loc) {
  check(world >= 1 && rank >= 0 && rank < world, "dist", loc, "rank ", rank, " is not in a world of ", world);
  check(global_batch > 0 && global_batch % world == 0, "dist", loc, "the global batch ", global_batch,
        " does not split evenly over ", world, " ranks: give a --batch that is a multiple of the world size");
  const int64_t per_rank = global_batch / world;
  return {per_rank * rank, per_rank};
}

DataParallel::DataParallel(const nn::NamedTensors& params, int64_t bucket_bytes, Loc loc) : params_(params) {
  check(!params_.empty(), "dist", loc, "DataParallel of no parameters");
  if (const char* b = std::getenv("ALK_DIST_BUCKET_BYTES"); b && *b) {
    char* end = nullptr;
    const long long v = std::strtoll(b, &end, 10);
    check(end && *end == '\0' && v > 0, "dist", loc, "ALK_DIST_BUCKET_BYTES='", b, "' is not a positive byte count");
    bucket_bytes = v;
  }
  check(bucket_bytes > 0, "dist", loc, "bucket_bytes must be positive, got ", bucket_bytes);
  Device& dev = params_.front().second.device();
  const char* overlap_env = std::getenv("ALK_DIST_OVERLAP");
  // The bucket's HostCall runs on the CPU (MPI on the communication thread) and on CUDA
  // (NCCL on a communication stream); in a world of one it only copies.
  const std::string kind = dev.info().kind;
  overlap_ = !(overlap_env && std::string(overlap_env) == "0") &&
             ((kind == "cpu" && (world_size() == 1 || detail::overlap_engine() != nullptr)) ||
              kind == "cuda");
  for (auto& [name, p] : params_) {
    check(p.dtype() == DType::F32, "dist", loc, "parameter '", name, "' is ", dtype_name(p.dtype()),
          ": data parallel keeps f32 parameters (use --dtype for mixed precision)");
    check(&p.device() == &dev, "dist", loc, "parameter '", name, "' is on ", p.device().name(), ", not ", dev.name());
    Tensor handle = p;  // shares the parameter: broadcast assign_s it in place
    broadcast(handle, 0, loc);
  }
  // Buckets in reverse order: the last layers' gradients are the first backward makes.
  Bucket current;
  int64_t elements = 0;
  auto close = [&] {
    if (current.params.empty()) return;
    std::vector<float> zeros(static_cast<size_t>(elements), 0.0f);
    current.flat = tensor(zeros, {elements}).to(dev);
    current.flat.realize();
    buckets_.push_back(std::move(current));
    current = Bucket{};
    elements = 0;
  };
  for (size_t i = params_.size(); i-- > 0;) {
    current.params.push_back(i);
    current.offsets.push_back(elements);
    elements += params_[i].second.numel();
    if (elements * 4 >= bucket_bytes) close();
  }
  close();
}

void DataParallel::stage_grads() {
  NoGradGuard no_grad;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    std::vector<Tensor> parts;
    for (size_t i : b.params) {
      const Tensor& p = params_[i].second;
      Tensor g = p.grad();
      parts.push_back(g.defined() ? g.to(DType::F32).reshape({p.numel()}) : zeros({p.numel()}).to(p.device()));
    }
    Tensor staged = parts.size() == 1 ? parts[0] : cat(parts, 0);
    if (!overlap_) {
      b.flat.assign_(staged);
      continue;
    }
    b.flat = detail::issue_when_made(staged, static_cast<int>(k));
    // Captured: a compiled step realizes its captures in one schedule, in name order, so
    // bucket 0 is reached first and its kernels run before the rest of the backward's.
    char name[48];
    std::snprintf(name, sizeof name, "dist.bucket.%05zu", k);
    capture(name, b.flat);
  }
}

void DataParallel::backward(const Tensor& loss, Loc loc) {
  if (!overlap_) {
    loss.backward(Tensor(), loc);
    stage_grads();
    return;
  }
  // The buckets are made once the gradients are set, and realized ahead of them in the
  // backward's one schedule.
  const BackwardTargets buckets = [this] {
    stage_grads();
    std::vector<Tensor> flats;
    for (const Bucket& b : buckets_) flats.push_back(b.flat);
    return flats;
  };
  WithBackwardTargets scope(buckets);
  loss.backward(Tensor(), loc);
}

void DataParallel::all_reduce() {
  std::vector<Tensor> flats;
  for (Bucket& b : buckets_) flats.push_back(b.flat);
  if (overlap_) {
    realize(flats);  // outside a compiled step: one schedule issues them in order; else a no-op
    detail::wait_issued();
    return;
  }
  for (Tensor& f : flats) f.realize();  // a no-op after the backward program's replay
  detail::all_reduce_in_place(flats, ReduceOp::Avg);
}

void DataParallel::load_grads() {
  for (Bucket& b : buckets_) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]].second;
      Tensor g = b.flat.slice(0, b.offsets[k], b.offsets[k] + p.numel()).reshape(p.shape());
      p.impl()->grad = g.impl_ptr();
    }
  }
}

}  // namespace alk::dist
