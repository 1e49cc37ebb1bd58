// examples/mandelbrot (one body for C++, CUDA and GLSL): known points of the set on the real
// axis, and every GPU device's picture equal to the CPU's.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "required.h"

namespace alk {
namespace {

std::vector<std::string> picture(const std::string& device) {
  const std::string cmd = std::string(ALK_BINARY_DIR) + "/example_mandelbrot --device " + device + " 60 21 100";
  std::vector<std::string> rows;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return rows;
  }
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) rows.emplace_back(buf, std::string(buf).find('\n'));
  EXPECT_EQ(::pclose(p), 0) << cmd;
  return rows;
}

TEST(MandelbrotExample, KnownPointsAndEveryDeviceAgrees) {
  // 60 x 21 pixels over [-2.2, 0.8] x [-1.2, 1.2]: column x is c = -2.2 + 0.05 x; row 10 is
  // 0.014 i from the real axis (y = -1.2 + 2.4 * 10 / 21 ~ -0.057).
  const std::vector<std::string> cpu = picture("cpu");
  ASSERT_EQ(cpu.size(), 21u);
  const std::string& axis = cpu[10];
  ASSERT_EQ(axis.size(), 60u);
  EXPECT_EQ(axis[24], '@') << axis;  // c = -1: the period-2 bulb, bounded
  EXPECT_EQ(axis[44], '@') << axis;  // c = 0: the main cardioid
  EXPECT_EQ(axis[0], ' ') << axis;   // c = -2.2: |c| > 2, escapes at once
  EXPECT_NE(axis[59], '@') << axis;  // c = 0.75: right of the cusp at 0.25, escapes
  int devices = 0;
  for (Device* d : available_devices()) {
    if (d->info().type == "cpu") continue;
    ++devices;
    EXPECT_EQ(picture(d->name()), cpu) << d->name();
  }
  if (devices == 0) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no GPU device: only the CPU body was checked");
}

}  // namespace
}  // namespace alk
