// Shared by the Vulkan tests: the device under test (vulkan:0, or $ALK_TEST_VULKAN_DEVICE)
// or a skip that says why there is none.
#pragma once
#ifdef ALK_HAVE_VULKAN
#include "required.h"
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/vulkan/context.h"

namespace alk::vk::testing {

inline int device_under_test() {
  const char* d = std::getenv("ALK_TEST_VULKAN_DEVICE");
  return d && *d ? std::atoi(d) : 0;
}

// The context, or nullptr when the machine has no Vulkan device (the caller skips).
inline std::shared_ptr<Context> context_or_null(std::string& why) {
  if (devices().empty()) {
    why = "no Vulkan device: " + unavailable_reason();
    return nullptr;
  }
  return Context::get(device_under_test());
}

// Runs this test binary again in a child process with `env` (NAME=value ...) before it and
// `args` after it, stdout and stderr together into `out`: tests that need another setting
// fixed at start-up (a loader, a memory path, a profile). Returns pclose's status, or -1
// (out says why) when the binary cannot be found or started.
inline int run_this_binary(const std::string& env, const std::string& args, std::string& out) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    out = "cannot find this test binary";
    return -1;
  }
  self[n] = 0;
  const std::string cmd = env + " '" + self + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    out = "cannot start " + cmd;
    return -1;
  }
  out.clear();
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  return ::pclose(p);
}

}  // namespace alk::vk::testing

#define ALK_VULKAN_CONTEXT_OR_SKIP(ctx)                                 \
  std::string alk_skip_why_;                                            \
  std::shared_ptr<::alk::vk::Context> ctx = ::alk::vk::testing::context_or_null(alk_skip_why_); \
  if (!ctx) {                                                           \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", alk_skip_why_);                                      \
  }                                                                     \
  static_assert(true)

#endif
