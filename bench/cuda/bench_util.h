// What the CUDA benchmarks share: medians of timed repetitions on a device, and PyTorch
// (the anchor) run in the same command, its answers read back from its output.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alk/alk.h"

namespace bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `f` over 10 runs after 3 warm-ups, each between device synchronizations.
inline double time_ms(alk::Device& dev, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    dev.synchronize();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

// Median milliseconds per run of `f` enqueued `batch` times between two device
// synchronizations (5 rounds after a warm-up one): the host's enqueueing overlaps the
// device's work, so a kernel's time is not charged the ~10-30 us of a synchronization and a
// launch (what time_ms adds to every product; PyTorch's side times each with GPU events).
inline double time_ms_batched(alk::Device& dev, const std::function<void()>& f, int batch = 10) {
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) {
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < batch; ++j) f();
    dev.synchronize();
    if (i >= 1) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / batch);
  }
  return median(ms);
}

// The standard output (and error) of a shell command.
inline std::string run(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  std::string out;
  if (!pipe) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, n);
  return out;
}

// A Python script run by python3 -c (the script must not contain double quotes).
inline std::string run_python(const std::string& script) { return run("python3 -c \"" + script + "\""); }

// The number after `key ` in a script's output (0 if absent).
inline double field(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  return at == std::string::npos ? 0 : std::atof(out.c_str() + at + key.size() + 1);
}

// The PyTorch timing helper the anchor scripts define: t(f) = median ms of f over 10 runs
// after 3 warm-ups, by CUDA events.
inline const char* kTorchTimer =
    "def t(f):\n"
    "  for _ in range(3): f()\n"
    "  ts=[]\n"
    "  for _ in range(10):\n"
    "    e0=torch.cuda.Event(enable_timing=True); e1=torch.cuda.Event(enable_timing=True)\n"
    "    e0.record(); f(); e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1))\n"
    "  ts.sort(); return ts[len(ts)//2]\n";

}  // namespace bench
