#include "alk/error.h"

namespace alk {

namespace {
std::string format(const std::string& op, const std::string& message, const Loc& loc) {
  return "alk::" + op + ": " + message + " (at " + loc.file_name() + ":" + std::to_string(loc.line()) + ")";
}
}  // namespace

Error::Error(std::string op, const std::string& message, Loc loc)
    : std::runtime_error(format(op, message, loc)),
      op_(std::move(op)),
      detail_(message),
      file_(loc.file_name()),
      line_(loc.line()) {}

std::string to_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace alk
