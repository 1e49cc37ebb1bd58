// alk::Error: every user-facing failure names the op, the values, what was
// expected, and the caller's file:line (taken by std::source_location defaults).
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace alk {

using Loc = std::source_location;

class Error : public std::runtime_error {
 public:
  Error(std::string op, const std::string& message, Loc loc);
  const std::string& op() const { return op_; }
  const std::string& detail() const { return detail_; }
  const char* file() const { return file_; }
  unsigned line() const { return line_; }

 private:
  std::string op_, detail_;
  const char* file_;
  unsigned line_;
};

// Builds a message from any streamable pieces: fail("reshape", loc, "cannot view ", shape, " as ", other).
template <class... Parts>
[[noreturn]] void fail(const std::string& op, Loc loc, const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  throw Error(op, s.str(), loc);
}

template <class... Parts>
void check(bool ok, const std::string& op, Loc loc, const Parts&... parts) {
  if (!ok) fail(op, loc, parts...);
}

// Printing helpers used in messages: [2, 3, 4].
std::string to_string(const std::vector<int64_t>& v);

}  // namespace alk
