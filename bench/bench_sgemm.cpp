// SGEMM throughput of alk::cpu::matmul (per micro-kernel ISA path) against OpenBLAS.
//
//   bench_sgemm [runs] [isa...]      runs: timed repetitions per shape (median reported)
//   ALK_BENCH_FILTER=<text>           only the shapes whose name contains <text>
//   ALK_BENCH_CPU_TIME=1              time each call by its thread's CPU time and report the
//                                     fastest (with ALK_NUM_THREADS=1: OpenBLAS then runs one
//                                     thread too); on a loaded machine the time a thread waits
//                                     for a core is not counted, so the ratio holds still
//
// For each shape prints a GFLOP/s line per alk ISA path, OpenBLAS's GFLOP/s (when the bench
// was linked against it) and one line
//   RATIO sgemm_<M>x<N>x<K>_<alk's path> alk=<ms>ms anchor=<ms>ms ratio=<alk/anchor>
// for alk's default (best) path; ratio < 1 means alk is faster. OpenBLAS runs with as many
// threads as alk (ALK_NUM_THREADS, default: all cores). On machines that preset
// OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, unset them so OpenBLAS picks its best kernel:
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./bench_sgemm
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"

#ifdef ALK_BENCH_OPENBLAS
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int n);
}
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
#endif

namespace {

using alk::cpu::View;

struct Shape {
  int64_t m, n, k;
  bool ta, tb;  // A stored k x m (transposed view), B stored n x k
};

// A [m, k] view over storage; transposed: the storage is [k, m] row-major.
View matrix(std::vector<float>& s, int64_t rows, int64_t cols, bool transposed) {
  View v;
  v.data = s.data();
  v.dtype = alk::DType::F32;
  v.shape = {rows, cols};
  v.strides = transposed ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{cols, 1};
  return v;
}

// Lets the other library's threads go idle before timing: OpenBLAS's workers busy-wait for
// a while after each call (and alk's poll for 100 us), which would slow whoever runs next.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// Appends the times (ms) of `runs` calls to t, after settle() and a 50 ms warm-up (pool
// start, page faults, and a vCPU that slept during settle()).
const bool kCpuTime = std::getenv("ALK_BENCH_CPU_TIME") != nullptr;

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

template <class Fn>
void time_runs(int runs, Fn&& fn, std::vector<double>& t) {
  settle();
  for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50); std::chrono::steady_clock::now() < end;)
    fn();
  for (int r = 0; r < runs; ++r) {
    if (kCpuTime) {
      const double c0 = thread_cpu_ms();
      fn();
      t.push_back(thread_cpu_ms() - c0);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
}

// The median; with ALK_BENCH_CPU_TIME the fastest (a thread's CPU time only grows with
// interference: cache and memory shared with other processes).
double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return kCpuTime ? t.front() : t[t.size() / 2];
}

template <class Fn>
double median_ms(int runs, Fn&& fn) {
  std::vector<double> t;
  time_runs(runs, fn, t);
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  std::vector<std::string> isas;
  for (int i = 2; i < argc; ++i) isas.emplace_back(argv[i]);
  if (isas.empty()) isas = alk::cpu::gemm_supported_isas();
  std::string best = alk::cpu::gemm_supported_isas().front();
  int threads = alk::cpu::num_threads();
#ifdef ALK_BENCH_OPENBLAS
  openblas_set_num_threads(threads);
#endif
  std::printf("threads=%d runs=%d timing=%s\n", threads, runs, kCpuTime ? "thread CPU time, fastest" : "wall, median");

  std::vector<Shape> shapes = {{256, 256, 256, false, false}, {1024, 1024, 1024, false, false},
                               {2048, 2048, 2048, false, false}};
  // The tiny GPT (1024 tokens): forward y = x W  [M, K] x [K, N], and its backward
  // dx = dy W^T ([M, N] x [N, K], B transposed) and dW = x^T dy ([K, M] x [M, N], A transposed).
  const int64_t gpt[][2] = {{128, 384}, {128, 128}, {128, 512}, {512, 128}, {128, 256}};
  for (auto [kdim, ndim] : gpt) {
    shapes.push_back({1024, ndim, kdim, false, false});
    shapes.push_back({1024, kdim, ndim, false, true});
    shapes.push_back({kdim, ndim, 1024, true, false});
  }

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const char* filter = std::getenv("ALK_BENCH_FILTER");  // run only shapes whose name contains this
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    View va = matrix(a, s.m, s.k, s.ta), vb = matrix(b, s.k, s.n, s.tb), vc = matrix(c, s.m, s.n, false);
    double gflop = 2.0 * static_cast<double>(s.m * s.n * s.k) * 1e-9;
    char name[96];
    std::snprintf(name, sizeof name, "sgemm_%lldx%lldx%lld%s%s", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), s.ta ? "_At" : "", s.tb ? "_Bt" : "");
    if (filter != nullptr && std::string(name).find(filter) == std::string::npos) continue;
    double best_ms = 0;
    for (const std::string& isa : isas) {
      if (!alk::cpu::set_gemm_isa(isa)) continue;
      double ms = median_ms(runs, [&] { alk::cpu::matmul(va, vb, vc); });
      if (isa == best) best_ms = ms;
      std::printf("%-28s alk-%-8s %9.3f ms %8.1f GFLOP/s\n", name, isa.c_str(), ms, gflop / ms * 1e3);
    }
    alk::cpu::set_gemm_isa("auto");  // the process-wide choice: the CPU's best, or ALK_ISA
    const std::string path = alk::cpu::gemm_isa();
    auto run_alk = [&] { alk::cpu::matmul(va, vb, vc); };
#ifdef ALK_BENCH_OPENBLAS
    int lda = static_cast<int>(s.ta ? s.m : s.k), ldb = static_cast<int>(s.tb ? s.k : s.n);
    auto run_blas = [&] {
      cblas_sgemm(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, static_cast<int>(s.m),
                  static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
                  static_cast<int>(s.n));
    };
    // The RATIO's two medians come from alternating rounds (alk, OpenBLAS, alk, ...), so a
    // burst of load on the shared machine slows both sides, not whichever ran then.
    std::vector<double> alk_t, blas_t;
    for (int round = 0; round < 3; ++round) {
      time_runs(std::max(1, runs / 3), run_alk, alk_t);
      time_runs(std::max(1, runs / 3), run_blas, blas_t);
    }
    best_ms = median(alk_t);
    const double blas_ms = median(blas_t);
    std::printf("%-28s openblas     %9.3f ms %8.1f GFLOP/s\n", name, blas_ms, gflop / blas_ms * 1e3);
    // The line names alk's path; the matched anchor is the caller's to set (make bench-cpu runs
    // ALK_ISA=avx2 beside OPENBLAS_CORETYPE=Haswell, and the AVX-512 path beside OpenBLAS's own choice).
    std::printf("RATIO %s_%s alk=%.3fms anchor=%.3fms ratio=%.3f\n", name, path.c_str(), best_ms, blas_ms,
                best_ms / blas_ms);
#else
    if (best_ms == 0) best_ms = median_ms(runs, run_alk);
    std::printf("RATIO %s_%s alk=%.3fms (OpenBLAS not linked: no anchor)\n", name, path.c_str(), best_ms);
#endif
    std::fflush(stdout);
  }
  return 0;
}
