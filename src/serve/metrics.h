// The server's counters for GET /metrics, in Prometheus's text exposition format. Every
// member is updated from several threads (HTTP handlers, the engine thread), so counters are
// atomics and histograms take a lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace alk::serve {

// Cumulative buckets (le = upper bound), a sum and a count, as Prometheus histograms are.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "# HELP", "# TYPE" and the _bucket/_sum/_count lines.
  std::string render(const std::string& name, const std::string& help) const;
  int64_t count() const;

 private:
  mutable std::mutex m_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  int64_t total_ = 0;
};

struct Metrics {
  Metrics();
  std::atomic<int64_t> requests_ok{0}, requests_client_error{0}, requests_server_error{0};
  std::atomic<int64_t> requests_rejected_queue_full{0}, requests_cancelled{0}, requests_timed_out{0};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<int64_t> queue_depth{0}, slots_busy{0}, slots_total{0};
  Histogram time_to_first_token, inter_token;  // seconds
  // The exposition text of everything above.
  std::string render() const;
};

}  // namespace alk::serve
