// Printing like PyTorch: tensor([[1.0000, 2.0000], ...], dtype=f64, requires_grad=True).
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "graph/graph.h"

namespace alk {

namespace {

struct Format {
  bool floating = false, integral_values = true, scientific = false;
  int width = 1;
  std::string operator()(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof buf, "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    } else if (scientific) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (integral_values) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }
};

constexpr int64_t kSummarizeAbove = 1000, kEdge = 3;

void print_dim(std::ostream& os, const std::vector<double>& v, const Shape& shape, size_t d, int64_t base,
               const Format& fmt, int indent, bool summarize, DType t) {
  if (shape.empty()) {
    os << (t == DType::Bool ? (v[0] != 0 ? "True" : "False") : fmt(v[0]));
    return;
  }
  int64_t stride = 1;
  for (size_t k = d + 1; k < shape.size(); ++k) stride *= shape[k];
  os << "[";
  const int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - kEdge - 1;
      continue;
    }
    if (d + 1 == shape.size()) {
      std::string s = t == DType::Bool ? (v[static_cast<size_t>(base + i)] != 0 ? "True" : "False")
                                       : fmt(v[static_cast<size_t>(base + i)]);
      os << std::string(static_cast<size_t>(std::max<int>(0, fmt.width - static_cast<int>(s.size()))), ' ') << s;
    } else {
      print_dim(os, v, shape, d + 1, base + i * stride, fmt, indent + 1, summarize, t);
    }
    if (i + 1 < n) {
      os << ",";
      if (d + 1 == shape.size())
        os << " ";
      else
        os << std::string(shape.size() - d - 1, '\n') << std::string(static_cast<size_t>(indent + 1), ' ');
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v = to_vector<double>();
  Format fmt;
  fmt.floating = is_floating(dtype());
  double max_abs = 0, min_abs = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    if (x != std::floor(x)) fmt.integral_values = false;
    max_abs = std::max(max_abs, std::fabs(x));
    if (x != 0) min_abs = std::min(min_abs, std::fabs(x));
  }
  if (fmt.floating && (max_abs >= 1e8 || (!fmt.integral_values && min_abs < 1e-4))) fmt.scientific = true;
  for (double x : v) fmt.width = std::max<int>(fmt.width, static_cast<int>(fmt(x).size()));
  std::ostringstream os;
  os << "tensor(";
  print_dim(os, v, shape(), 0, 0, fmt, 7, numel() > kSummarizeAbove, dtype());
  if (dtype() != DType::F32 && dtype() != DType::I64 && dtype() != DType::Bool) os << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << (impl()->grad_fn ? ", grad_fn=<" + impl()->grad_fn->name + ">" : ", requires_grad=True");
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace alk
