// Shared by the Vulkan tests: the device under test (vulkan:0, or $ALK_TEST_VULKAN_DEVICE)
// or a skip that says why there is none.
#pragma once
#ifdef ALK_HAVE_VULKAN
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

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

}  // namespace alk::vk::testing

#define ALK_VULKAN_CONTEXT_OR_SKIP(ctx)                                 \
  std::string alk_skip_why_;                                            \
  std::shared_ptr<::alk::vk::Context> ctx = ::alk::vk::testing::context_or_null(alk_skip_why_); \
  if (!ctx) {                                                           \
    GTEST_SKIP() << alk_skip_why_;                                      \
  }                                                                     \
  static_assert(true)

#endif
