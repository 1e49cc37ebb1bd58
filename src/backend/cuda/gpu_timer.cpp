#include "backend/cuda/gpu_timer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace alk::cuda {

namespace {

bool gpu_timing_enabled() {
  static const bool on = [] {
    const char* d = std::getenv("ALK_DEBUG");
    const std::string v = d ? d : "";
    return v.find("timing") != std::string::npos || v.find("all") != std::string::npos;
  }();
  return on;
}

struct GpuTimes {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, double>> by_kernel;  // name -> (calls, ms)
  ~GpuTimes() {
    if (by_kernel.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [name, t] : by_kernel) rows.emplace_back(t.second, name), total += t.second;
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "[alk cuda timing] %.3f ms of GPU time in kernels\n", total);
    for (auto& [ms, name] : rows)
      std::fprintf(stderr, "[alk cuda timing] %9.3f ms %5.1f%% %7lld x %s\n", ms, 100 * ms / std::max(total, 1e-9),
                   static_cast<long long>(by_kernel[name].first), name.c_str());
  }
};
GpuTimes& gpu_times() {
  static GpuTimes* t = new GpuTimes;  // printed by an atexit handler, after every device is done
  static const bool registered = [] { return std::atexit([] { delete t; }) == 0; }();
  (void)registered;
  return *t;
}

}  // namespace

GpuTimer::GpuTimer(Context& c) {
  if (!gpu_timing_enabled()) return;
  check(driver()->cuEventCreate(&start_, 0), "cuEventCreate");
  check(driver()->cuEventCreate(&stop_, 0), "cuEventCreate");
  c.time_next_launch(start_);
}

GpuTimer::~GpuTimer() {
  if (start_) driver()->cuEventDestroy_v2(start_);
  if (stop_) driver()->cuEventDestroy_v2(stop_);
}

void GpuTimer::add(Context& c, const std::string& name, int64_t calls) {
  if (!start_) return;
  c.finish_timing();
  check(driver()->cuEventRecord(stop_, c.stream()), "cuEventRecord");
  check(driver()->cuEventSynchronize(stop_), "cuEventSynchronize");
  float ms = 0;
  driver()->cuEventElapsedTime(&ms, start_, stop_);
  std::lock_guard tl(gpu_times().mu);
  auto& t = gpu_times().by_kernel[name];
  t.first += calls;
  t.second += ms;
}

}  // namespace alk::cuda
