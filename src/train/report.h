// What a run shows and leaves behind: the progress line, metrics.jsonl and the loss curve.
#pragma once
#include <chrono>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace alk::train {

class Progress {
 public:
  Progress(std::ostream& out, int64_t total_steps, int64_t first_step, std::string unit = "tok");
  // Redraws the line (a TTY) or prints a line every `every` steps (a log file or pipe).
  void update(int64_t step, double loss, double lr, double tokens_per_s, int64_t every);
  void note(const std::string& line);  // a line of its own (validation, checkpoints)
  void finish();

 private:
  std::ostream& out_;
  int64_t total_, first_;
  std::string unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

struct MetricPoint {
  int64_t step;
  double loss;
  std::optional<double> val_loss;
  double lr, tokens_per_s;
};

// Appends one JSON object per line; rewrite_metrics keeps only the lines before `step`
// (a resumed run continues the file instead of repeating steps).
void append_metric(const std::string& path, const MetricPoint& p);
void truncate_metrics(const std::string& path, int64_t step);
std::vector<MetricPoint> read_metrics(const std::string& path);
// The training and validation loss curves as an SVG image.
void write_loss_svg(const std::string& path, const std::vector<MetricPoint>& points, const std::string& title);

}  // namespace alk::train
