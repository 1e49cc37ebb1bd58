#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "backend/cpu/view.h"

namespace alk::cpu {
namespace {

// Restores the pool size a test changed.
struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

void expect_covers_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<bool> short_chunk{false};
  std::atomic<int> chunks{0};
  parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
    ++chunks;
    if (hi - lo < std::max<int64_t>(grain, 1) && hi != n) short_chunk = true;
    for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i)];
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
  EXPECT_FALSE(short_chunk) << "n " << n << " grain " << grain;
  if (n > 0 && n <= grain) {
    EXPECT_EQ(chunks.load(), 1);
  }
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 4, 7}) {
    ThreadCount tc(threads);
    for (int64_t n : {0, 1, 2, 3, 17, 100, 1000, 12345}) {
      for (int64_t grain : {0, 1, 3, 64, 5000}) expect_covers_once(n, grain);
    }
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadCount tc(4);
  std::atomic<int> distinct{0};
  std::mutex m;
  std::vector<std::thread::id> seen;
  parallel_for(64, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(m);
    if (std::find(seen.begin(), seen.end(), std::this_thread::get_id()) == seen.end()) {
      seen.push_back(std::this_thread::get_id());
      ++distinct;
    }
  });
  EXPECT_GT(distinct.load(), 1);
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadCount tc(1);
  EXPECT_EQ(num_threads(), 1);
  auto caller = std::this_thread::get_id();
  std::atomic<bool> elsewhere{false};
  parallel_for(100000, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) elsewhere = true;
  });
  EXPECT_FALSE(elsewhere);
}

TEST(ThreadPool, NestedCallsWork) {
  ThreadCount tc(4);
  constexpr int64_t kOuter = 37, kInner = 101;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  parallel_for(kOuter, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o)
      parallel_for(kInner, 1, [&](int64_t ilo, int64_t ihi) {
        for (int64_t i = ilo; i < ihi; ++i) ++hits[static_cast<size_t>(o * kInner + i)];
      });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionsPropagateToCaller) {
  for (int threads : {1, 3}) {
    ThreadCount tc(threads);
    EXPECT_THROW(parallel_for(1000, 1,
                              [](int64_t lo, int64_t hi) {
                                if (lo <= 500 && 500 < hi) throw std::runtime_error("chunk 500 failed");
                              }),
                 std::runtime_error);
    // The pool still works afterwards.
    expect_covers_once(1000, 7);
  }
  ThreadCount tc(2);
  try {
    parallel_for(10, 1, [](int64_t, int64_t) { throw std::logic_error("boom"); });
    FAIL() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "boom");
  }
}

TEST(ThreadPool, ConcurrentCallers) {
  ThreadCount tc(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        parallel_for(1000, 10, [&](int64_t lo, int64_t hi) { total += hi - lo; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 1000);
}

TEST(View, ContiguityAndOffsets) {
  View v;
  v.shape = {2, 3, 4};
  v.strides = {12, 4, 1};
  EXPECT_TRUE(v.is_contiguous());
  v.offset = 7;
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.offset_of(0), 7);
  EXPECT_EQ(v.offset_of(13), 7 + 13);
  v.strides = {1, 8, 2};  // a permuted layout
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.offset_of(1 * 12 + 2 * 4 + 3), 7 + 1 * 1 + 2 * 8 + 3 * 2);
  v.shape = {2, 1, 4};
  v.strides = {4, 99, 1};  // size-1 dims may have any stride
  EXPECT_TRUE(v.is_contiguous());
  v.strides = {0, 0, 1};  // broadcast
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.offset_of(5), 7 + 1);
  View scalar;
  EXPECT_TRUE(scalar.is_contiguous());
  EXPECT_EQ(scalar.offset_of(0), 0);
}

}  // namespace
}  // namespace alk::cpu
