// Gradient all-reduce overlapped with the backward (CPU tensors, MPI). Each gradient bucket
// is a HostCall node over its staged gradients: the scheduler runs it in graph order, so it
// runs as soon as the backward has made the bucket's gradients (buckets are in reverse
// parameter order, the order backward makes them, and the scheduler walks the step's
// targets depth first: bucket 0's kernels come before the rest of the backward's). It
// copies the gradients into the bucket's own buffer and hands that buffer to the
// communication thread, which all-reduces the buckets one after the other while the
// backward goes on. DataParallel::all_reduce() waits for them before the update.
//
// MPI is called from one thread at a time (MPI_THREAD_SERIALIZED): the communication
// thread during the step, the main thread only after waiting for it (every synchronous
// collective first drains the queue: wait_issued).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "dist/communicator.h"
#include "graph/graph.h"

#ifdef ALK_HAVE_CUDA
#include "alk/cuda.h"
#endif

namespace alk::dist {

namespace {

std::mutex g_log_mutex;
std::vector<std::string>* g_log = nullptr;

class CommThread {
 public:
  static CommThread& get() {
    static CommThread* t = new CommThread;  // never destroyed: the thread may outlive statics
    return *t;
  }

  void issue(Communicator& engine, int bucket, float* data, size_t count) {
    std::lock_guard lock(mutex_);
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
    jobs_.push_back({&engine, bucket, data, count});
    ++pending_;
    wake_.notify_all();
  }

  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    if (!error_.empty()) {
      const std::string e = std::exchange(error_, std::string());
      throw Error("dist", e, Loc::current());
    }
  }

 private:
  struct Job {
    Communicator* engine;
    int bucket;
    float* data;
    size_t count;
  };

  void loop() {
    for (;;) {
      Job job;
      bool failed_before = false;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return !jobs_.empty(); });
        job = jobs_.front();
        jobs_.pop_front();
        failed_before = !error_.empty();
      }
      std::string failed;
      // After a failure the rest of the step's buckets are dropped: the job is ending.
      if (!failed_before) {
        detail::mark_busy("gradient all_reduce (overlapped with the backward)");
        try {
          job.engine->all_reduce_sleeping(job.data, job.count, DType::F32, ReduceOp::Avg, detail::mpi_sleep_us());
        } catch (const Error& e) {
          failed = e.detail();
        }
        detail::clear_busy();
        detail::note_event("reduced " + std::to_string(job.bucket));
      }
      std::lock_guard lock(mutex_);
      if (!failed.empty() && error_.empty()) error_ = failed;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  int pending_ = 0;  // issued and not yet finished
  std::string error_;
  std::thread worker_;
};

#ifdef ALK_HAVE_CUDA
// CUDA tensors (NCCL): the HostCall runs on the host where its kernel would be queued, and
// queues, in stream order: the copy into the bucket on the backend's stream, the side stream's
// wait for it, the bucket's all-reduce on the side stream (alk/cuda.h), and, in wait_issued
// (before the update reads the buckets), the backend's stream's wait for the side stream. The
// host never blocks; NCCL's asynchronous errors reach the watchdog.
std::mutex g_cuda_mutex;
std::map<int, bool> g_cuda_pending;  // by device: all-reduces queued on its side stream, not yet waited for

void issue_cuda(const Kernel& k, int device, int bucket) {
  const KernelArg &in = k.inputs.at(0), &out = k.output;
  check(in.strides.at(0) == 1, "dist", Loc::current(), "a gradient bucket's staged gradients must be contiguous");
  const size_t n = static_cast<size_t>(out.shape.at(0));
  auto byte_offset = [](const KernelArg& a) { return a.byte_offset + static_cast<size_t>(a.offset) * sizeof(float); };
  out.buffer->device->copy(*in.buffer, byte_offset(in), *out.buffer, byte_offset(out), n * sizeof(float));
  detail::note_event("issue " + std::to_string(bucket));
  Communicator* engine = detail::overlap_engine_cuda(device);
  if (!engine) return;
  std::lock_guard lock(g_cuda_mutex);
  cuda::side_stream_waits_for_alk(device);
  engine->all_reduce_on(out.buffer->device->address(*out.buffer, byte_offset(out)), n, DType::F32, ReduceOp::Avg,
                        cuda::side_stream(device));
  g_cuda_pending[device] = true;
}

void wait_cuda() {
  std::lock_guard lock(g_cuda_mutex);
  for (auto& [device, pending] : g_cuda_pending) {
    if (!pending) continue;
    cuda::alk_waits_for_side_stream(device);
    pending = false;
  }
}

int cuda_device_of(const KernelArg& a) {
  const std::string name = a.buffer->device->name();
  return name.rfind("cuda:", 0) == 0 ? std::atoi(name.c_str() + 5) : -1;
}
#endif

// The HostCall of bucket `bucket`: output := the staged gradients (input 0, 1-D f32), then
// the output's memory goes to the communication thread (nothing more in a world of one).
struct IssueBucket final : HostFunction {
  int bucket;
  explicit IssueBucket(int b) : bucket(b) {}
  static char* address(const KernelArg& a) {
    return static_cast<char*>(a.buffer->device->address(*a.buffer, a.byte_offset + static_cast<size_t>(a.offset) * sizeof(float)));
  }
  void run(const Kernel& k) const override {
#ifdef ALK_HAVE_CUDA
    if (const int device = cuda_device_of(k.output); device >= 0) return issue_cuda(k, device, bucket);
#endif
    const KernelArg &in = k.inputs.at(0), &out = k.output;
    const size_t n = static_cast<size_t>(out.shape.at(0));
    auto* dst = reinterpret_cast<float*>(address(out));
    const auto* src = reinterpret_cast<const float*>(address(in));
    const int64_t stride = in.strides.at(0);
    if (stride == 1) {
      std::memcpy(dst, src, n * sizeof(float));
    } else {
      for (size_t i = 0; i < n; ++i) dst[i] = src[static_cast<int64_t>(i) * stride];
    }
    detail::note_event("issue " + std::to_string(bucket));
    if (Communicator* engine = detail::overlap_engine()) CommThread::get().issue(*engine, bucket, dst, n);
  }
};

}  // namespace

namespace detail {

void set_event_log(std::vector<std::string>* log) {
  std::lock_guard lock(g_log_mutex);
  g_log = log;
}
void note_event(const std::string& event) {
  std::lock_guard lock(g_log_mutex);
  if (g_log) g_log->push_back(event);
}

Tensor issue_when_made(const Tensor& staged, int bucket) {
  check(staged.dtype() == DType::F32 && staged.dim() == 1, "dist", Loc::current(), "a gradient bucket is 1-D f32");
  return make_node(OpId::HostCall, staged.shape(), DType::F32, {staged}, HostCallParams{std::make_shared<IssueBucket>(bucket)},
                   Loc::current());
}

int mpi_sleep_us() {
  static const int us = [] {
    const char* v = std::getenv("ALK_DIST_MPI_SLEEP_US");
    return v && *v ? std::max(0, std::atoi(v)) : 50;
  }();
  return us;
}

void wait_issued() {
  CommThread::get().wait();
#ifdef ALK_HAVE_CUDA
  wait_cuda();
#endif
}

}  // namespace detail

}  // namespace alk::dist
