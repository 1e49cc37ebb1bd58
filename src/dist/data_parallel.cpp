// Data parallel: parameters broadcast from rank 0, gradients copied into flat f32 buckets
// inside the compiled backward, the buckets averaged in place by the engine (NCCL on the
// device's stream, MPI on host memory), and the parameters' grads set to views of the
// buckets inside the compiled update. The buckets are realized tensors that the backward
// program assign_s, so every replay leaves the new gradients in the same buffers.
#include "alk/dist.h"
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
  check(bucket_bytes > 0, "dist", loc, "bucket_bytes must be positive, got ", bucket_bytes);
  Device& dev = params_.front().second.device();
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
  for (Bucket& b : buckets_) {
    std::vector<Tensor> parts;
    for (size_t i : b.params) {
      const Tensor& p = params_[i].second;
      Tensor g = p.grad();
      parts.push_back(g.defined() ? g.to(DType::F32).reshape({p.numel()}) : zeros({p.numel()}).to(p.device()));
    }
    b.flat.assign_(parts.size() == 1 ? parts[0] : cat(parts, 0));
  }
}

void DataParallel::all_reduce() {
  std::vector<Tensor> flats;
  for (Bucket& b : buckets_) {
    b.flat.realize();  // a no-op after the backward program's replay
    flats.push_back(b.flat);
  }
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
