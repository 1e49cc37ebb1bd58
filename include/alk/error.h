// alk::Error: every user-facing failure names the op, the values, what was
// expected, and the caller's file:line (taken by std::source_location defaults).
#pragma once
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace alk {

#if defined(__cpp_lib_source_location)
using Loc = std::source_location;
#else
// For compilers whose standard library has no std::source_location yet (clang 14 with
// GCC 12's libstdc++, which the fuzzing build uses): the same interface from the builtins
// both compilers have, which a default argument evaluates at the caller, as
// std::source_location::current() is.
class Loc {
 public:
  static constexpr Loc current(const char* file = __builtin_FILE(), const char* function = __builtin_FUNCTION(),
                               unsigned line = __builtin_LINE(), unsigned column = __builtin_COLUMN()) noexcept {
    Loc l;
    l.file_ = file;
    l.function_ = function;
    l.line_ = line;
    l.column_ = column;
    return l;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return column_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0, column_ = 0;
};
#endif

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
