// The test binary's process-wide setup (nothing here is a test):
// - every process of alk_tests works under its own fresh temporary directory: TMPDIR and
//   TEST_TMPDIR (what ::testing::TempDir() and alk::testing::TempDir use) point into it, so two
//   tests run at once by `ctest -j2` never share a path; it is removed when the process ends;
// - skipped tests are appended to $ALK_SKIP_LOG (one line each: binary, test, reason), so
//   `make test` can list every skip with its reason at the end (scripts/list_skips.py).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct ProcessTempDir {
  ProcessTempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/alk_tests_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) return;  // the tests that need a directory will say so
    path = buf.data();
    owner = ::getpid();
    ::setenv("TMPDIR", path.c_str(), 1);
    ::setenv("TEST_TMPDIR", path.c_str(), 1);
  }
  ~ProcessTempDir() {
    // A forked child (tests/train/test_crash_safety.cpp) exits through here too: only the
    // process that made the directory removes it.
    if (path.empty() || ::getpid() != owner) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
  pid_t owner = 0;
};
const ProcessTempDir process_temp_dir;

class SkipLog : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* log = std::getenv("ALK_SKIP_LOG");
    if (!log || !*log) return;
    const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
    const char* label = std::getenv("ALK_TEST_RUN");  // which run of the binary (make test-asan names its own)
    const std::string run = label && *label ? label : "alk_tests";
    std::string lines;
    for (int s = 0; s < unit.total_test_suite_count(); ++s) {
      const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
      for (int t = 0; t < suite.total_test_count(); ++t) {
        const ::testing::TestInfo& info = *suite.GetTestInfo(t);
        if (!info.should_run() || !info.result()->Skipped()) continue;
        std::string why;
        for (int p = 0; p < info.result()->total_part_count(); ++p)
          if (info.result()->GetTestPartResult(p).skipped()) why = info.result()->GetTestPartResult(p).message();
        for (char& c : why)
          if (c == '\n' || c == '\t') c = ' ';
        lines += run + "\t" + suite.name() + "." + info.name() + "\t" + why + "\n";
      }
    }
    if (lines.empty()) return;
    // One write of the whole block in append mode: processes run by ctest -j2 do not interleave.
    const int fd = ::open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    if (::write(fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) std::perror(log);
    ::close(fd);
  }
};
::testing::Environment* const skip_log = ::testing::AddGlobalTestEnvironment(new SkipLog);

}  // namespace
