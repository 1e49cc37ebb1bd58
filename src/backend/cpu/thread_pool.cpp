// A lazily started pool: num_threads() - 1 workers plus the calling thread, which
// always works on its own job too, so a job makes progress even when every worker
// is busy with another caller's job.
#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace alk::cpu {

namespace {

// Set on pool workers for their lifetime and on a caller while it runs chunks:
// a parallel_for issued from inside a chunk runs inline, so nesting cannot
// deadlock by waiting on workers that are themselves waiting.
thread_local bool t_inside_parallel = false;

// How long a thread that ran out of work keeps polling before it sleeps. Kernels come in
// quick succession (a training step launches ~1000); waking a sleeping thread costs tens of
// microseconds on a VM, about what a small kernel takes to run, and sometimes milliseconds
// (a halted vCPU): with 100 us the fused-chain benchmark's median was 13.7 ms, with 1 ms
// 11.4 ms (ten alternated runs), the test suite's time unchanged.
constexpr auto kSpin = std::chrono::microseconds(1000);

// Polls ready() with a pause instruction between polls, for at most kSpin; true when it
// became ready.
template <class Ready>
bool spin_until(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

struct Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0, chunks = 0;
  std::atomic<int64_t> next{0};  // next chunk to hand out
  std::atomic<int64_t> done{0};  // chunks finished
  std::atomic<bool> failed{false};
  std::exception_ptr error;      // first failure, guarded by mutex
  std::mutex mutex;
  std::condition_variable finished;

  int64_t chunk_begin(int64_t c) const { return n * c / chunks; }
  bool complete() const { return done.load(std::memory_order_acquire) == chunks; }

  // Runs chunks until none are left; returns once this thread can take no more.
  void work() {
    for (;;) {
      int64_t c = next.fetch_add(1);
      if (c >= chunks) return;
      if (!failed.load(std::memory_order_relaxed)) {  // after a failure the remaining chunks are pointless
        try {
          (*fn)(chunk_begin(c), chunk_begin(c + 1));
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!error) error = std::current_exception();
          failed = true;
        }
      }
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
        std::lock_guard lock(mutex);  // the waiter checks complete() under this lock: no lost wake-up
        finished.notify_all();
      }
    }
  }

  void wait() {
    if (spin_until([this] { return complete(); })) return;
    std::unique_lock lock(mutex);
    finished.wait(lock, [this] { return complete(); });
  }
};

int default_threads() {
  if (const char* env = std::getenv("ALK_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return static_cast<int>(std::min(v, 1024L));
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

class Pool {
 public:
  ~Pool() { stop(); }

  int threads() {
    std::lock_guard lock(mutex_);
    if (threads_ == 0) threads_ = default_threads();
    return threads_;
  }

  void set_threads(int n) {
    stop();
    std::lock_guard lock(mutex_);
    threads_ = std::max(1, n);
  }

  void run(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard lock(mutex_);
      start_locked();
      queue_.push_back(job);
      posted_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    {
      InsideGuard guard;
      job->work();
    }
    job->wait();
  }

 private:
  struct InsideGuard {
    bool saved = t_inside_parallel;
    InsideGuard() { t_inside_parallel = true; }
    ~InsideGuard() { t_inside_parallel = saved; }
  };

  void start_locked() {
    if (threads_ == 0) threads_ = default_threads();
    if (!workers_.empty()) return;
    stopping_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker(); });
  }

  void stop() {
    std::vector<std::thread> old;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      old.swap(workers_);
    }
    wake_.notify_all();
    for (auto& t : old) t.join();
  }

  void worker() {
    t_inside_parallel = true;
    std::unique_lock lock(mutex_);
    for (;;) {
      if (queue_.empty() && !stopping_) {  // poll a while before sleeping: the next job is likely close
        const uint64_t seen = posted_.load(std::memory_order_acquire);
        lock.unlock();
        spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      std::shared_ptr<Job> job = queue_.front();
      // Every chunk handed out means the queue entry is spent; drop it so idle
      // workers do not spin on a job with nothing left to take.
      if (job->next.load() >= job->chunks) {
        queue_.pop_front();
        continue;
      }
      lock.unlock();
      job->work();
      lock.lock();
      if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> posted_{0};  // jobs ever queued: what spinning workers watch
  int threads_ = 0;
  bool stopping_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int num_threads() { return pool().threads(); }

// Not meant to be called while another thread is inside parallel_for: the old
// workers are joined, which waits for the job they are on.
void set_num_threads(int n) { pool().set_threads(n); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int threads = t_inside_parallel ? 1 : num_threads();
  if (n <= grain || threads <= 1) {
    fn(0, n);
    return;
  }
  // A few chunks per thread evens out uneven chunk costs; chunks never drop below grain.
  int64_t chunks = std::min<int64_t>(n / grain, int64_t{4} * threads);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  job->chunks = chunks;
  pool().run(job);
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace alk::cpu
