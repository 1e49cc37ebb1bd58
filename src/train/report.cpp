#include "train/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "alk/io.h"
#include "io/json.h"

namespace alk::train {

namespace {

std::string duration(double seconds) {
  char buf[32];
  int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", s / 3600, s / 60 % 60);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  return buf;
}

std::string rate(double per_s) {
  char buf[32];
  if (per_s >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", per_s);
  return buf;
}

}  // namespace

Progress::Progress(std::ostream& out, int64_t total, int64_t first, std::string unit)
    : out_(out), total_(total), first_(first), unit_(std::move(unit)), tty_(&out == &std::cerr ? isatty(2) : (&out == &std::cout && isatty(1))),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(int64_t step, double loss, double lr, double tokens_per_s, int64_t every) {
  const int64_t done = step + 1;
  if (!tty_ && done % std::max<int64_t>(every, 1) != 0 && done != total_) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double per_step = elapsed / static_cast<double>(std::max<int64_t>(done - first_, 1));
  double eta = per_step * static_cast<double>(total_ - done);
  const int width = 24;
  int filled = total_ ? static_cast<int>(width * done / total_) : width;
  std::ostringstream line;
  line << "step " << std::setw(5) << done << "/" << total_ << " [" << std::string(static_cast<size_t>(filled), '=')
       << (filled < width ? ">" : "") << std::string(static_cast<size_t>(std::max(0, width - filled - 1)), ' ') << "] loss "
       << std::fixed << std::setprecision(4) << loss << " | lr " << std::scientific << std::setprecision(2) << lr
       << " | " << rate(tokens_per_s) << " " << unit_ << "/s | ETA " << duration(eta);
  if (tty_)
    out_ << "\r" << line.str() << "\033[K" << std::flush;
  else
    out_ << line.str() << "\n" << std::flush;
}

void Progress::note(const std::string& line) {
  if (tty_) out_ << "\r\033[K";
  out_ << line << "\n" << std::flush;
}

void Progress::finish() {
  if (tty_) out_ << "\n";
  out_ << std::flush;
}

void append_metric(const std::string& path, const MetricPoint& p) {
  json::Object o{{"step", p.step}, {"loss", p.loss}};
  if (p.val_loss) o.emplace_back("val_loss", *p.val_loss);
  o.emplace_back("lr", p.lr);
  o.emplace_back("tokens_per_s", p.tokens_per_s);
  std::ofstream f(path, std::ios::app);
  check(static_cast<bool>(f), "metrics", Loc::current(), "cannot append to ", path);
  f << json::dump(json::Value(std::move(o))) << "\n";
}

std::vector<MetricPoint> read_metrics(const std::string& path) {
  std::vector<MetricPoint> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    json::Value v;
    try {
      v = json::parse(line);
    } catch (const Error&) {
      continue;  // a line torn by a kill during its append
    }
    MetricPoint p{v.at("step").as_int(), v.at("loss").as_double(), std::nullopt, v.at("lr").as_double(),
                  v.at("tokens_per_s").as_double()};
    if (const json::Value* val = v.find("val_loss")) p.val_loss = val->as_double();
    out.push_back(p);
  }
  return out;
}

void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream f(path);
  if (!f) return;
  std::string kept;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    // A kill during an append can leave a torn last line: it is dropped, not fatal.
    try {
      if (json::parse(line).at("step").as_int() < step) kept += line + "\n";
    } catch (const Error&) {
    }
  }
  write_file_atomic(path, kept);
}

void write_loss_svg(const std::string& path, const std::vector<MetricPoint>& points, const std::string& title) {
  const double w = 720, h = 400, left = 60, right = 20, top = 40, bottom = 50;
  double max_step = 1, lo = INFINITY, hi = -INFINITY;
  for (const MetricPoint& p : points) {
    max_step = std::max(max_step, static_cast<double>(p.step));
    for (double v : {p.loss, p.val_loss.value_or(p.loss)}) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!(hi > lo)) {
    lo = std::isfinite(lo) ? lo - 1 : 0;
    hi = lo + 2;
  }
  auto x = [&](double step) { return left + (w - left - right) * step / max_step; };
  auto y = [&](double v) { return top + (h - top - bottom) * (hi - v) / (hi - lo); };
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << title << "</text>\n";
  for (int i = 0; i <= 4; ++i) {  // horizontal grid with loss labels
    double v = lo + (hi - lo) * i / 4;
    s << "<line x1=\"" << left << "\" x2=\"" << w - right << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
      << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << y(v) + 4 << "\" text-anchor=\"end\">"
      << std::setprecision(2) << v << std::setprecision(1) << "</text>\n";
  }
  s << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">step (last: "
    << static_cast<int64_t>(max_step) << ")</text>\n";
  s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (const MetricPoint& p : points) s << x(static_cast<double>(p.step)) << "," << y(p.loss) << " ";
  s << "\"/>\n<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"";
  for (const MetricPoint& p : points)
    if (p.val_loss) s << x(static_cast<double>(p.step)) << "," << y(*p.val_loss) << " ";
  s << "\"/>\n";
  s << "<text x=\"" << w - right - 150 << "\" y=\"" << top + 14 << "\" fill=\"#1f77b4\">train loss</text>\n";
  s << "<text x=\"" << w - right - 150 << "\" y=\"" << top + 30 << "\" fill=\"#d62728\">validation loss</text>\n";
  s << "</svg>\n";
  write_file_atomic(path, s.str());
}

}  // namespace alk::train
