#include "serve/metrics.h"

#include <cmath>
#include <sstream>

namespace alk::serve {

namespace {
std::string number(double v) {
  if (std::isinf(v)) return "+Inf";
  std::ostringstream o;
  o.precision(10);
  o << v;
  return o.str();
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(m_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++total_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(m_);
  return total_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(m_);
  std::ostringstream o;
  o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    o << name << "_bucket{le=\"" << number(i < bounds_.size() ? bounds_[i] : INFINITY) << "\"} " << cumulative << "\n";
  }
  o << name << "_sum " << number(sum_) << "\n" << name << "_count " << total_ << "\n";
  return o.str();
}

Metrics::Metrics()
    : time_to_first_token({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      inter_token({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

std::string Metrics::render() const {
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, int64_t v, const char* labels = "") {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << labels << " " << v << "\n";
  };
  o << "# HELP alk_requests_total Requests answered, by outcome.\n# TYPE alk_requests_total counter\n"
    << "alk_requests_total{outcome=\"ok\"} " << requests_ok << "\n"
    << "alk_requests_total{outcome=\"client_error\"} " << requests_client_error << "\n"
    << "alk_requests_total{outcome=\"server_error\"} " << requests_server_error << "\n"
    << "alk_requests_total{outcome=\"queue_full\"} " << requests_rejected_queue_full << "\n";
  metric("alk_requests_cancelled_total", "counter", "Generations ended because the client disconnected.",
         requests_cancelled);
  metric("alk_requests_timed_out_total", "counter", "Generations ended by --timeout.", requests_timed_out);
  metric("alk_prompt_tokens_total", "counter", "Prompt tokens prefilled.", prompt_tokens);
  metric("alk_generation_tokens_total", "counter", "Tokens generated.", generation_tokens);
  metric("alk_queue_depth", "gauge", "Requests waiting for a slot.", queue_depth);
  metric("alk_slots_busy", "gauge", "Slots running a request.", slots_busy);
  metric("alk_slots_total", "gauge", "Slots (requests decoded at once).", slots_total);
  o << time_to_first_token.render("alk_time_to_first_token_seconds", "From a request's arrival to its first token.");
  o << inter_token.render("alk_inter_token_seconds", "Between a request's consecutive tokens.");
  return o.str();
}

}  // namespace alk::serve
