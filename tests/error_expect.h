// Checking an alk::Error, not only its type: the op it names, the offending values its
// message must contain, and the caller's file:line, which is the test's own line (the failing
// call sits on the line of the EXPECT_ALK_ERROR that holds it). docs/testing.md, "Known answers".
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "alk/error.h"

namespace alk::testing {

inline std::string file_basename(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

// Runs fn, which must throw alk::Error for op `op` at `file`:`line`, with every needle in what().
inline void expect_alk_error(const std::function<void()>& fn, const char* file, unsigned line, const std::string& op,
                             const std::vector<std::string>& needles) {
  const std::string here = file_basename(file);
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.op(), op) << what;
    EXPECT_NE(what.find(op), std::string::npos) << "what() does not name the op: " << what;
    EXPECT_EQ(file_basename(e.file()), here) << "file " << e.file() << " in: " << what;
    EXPECT_EQ(e.line(), line) << what;
    EXPECT_NE(what.find(here + ":" + std::to_string(line)), std::string::npos) << what;
    for (const std::string& n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-alk exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected alk::Error from " << op << " (" << here << ":" << line << ")";
}

}  // namespace alk::testing

#define EXPECT_ALK_ERROR(expr, op, ...) \
  ::alk::testing::expect_alk_error([&] { (void)(expr); }, __FILE__, __LINE__, op, {__VA_ARGS__})
