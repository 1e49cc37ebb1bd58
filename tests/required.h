// What the run requires: ALK_REQUIRE names the devices and packages this machine must have
// (a comma or space list; `make test` and .ci/run set it, see the Makefile's ALK_REQUIRE).
// A test that would skip for lack of a required one fails instead, so CI cannot stay green
// with a backend gone missing; on a developer's machine without ALK_REQUIRE it skips, saying why.
//   vulkan       a Vulkan device (lavapipe in CI) in a build with the Vulkan backend
//   webgpu       node + npm `webgpu` (Dawn) + Chromium's SwiftShader ICD
//   webgpu-f16   Mesa 25 lavapipe (make mesa25): WebGPU's shader-f16 adapter
//   torch        /usr/bin/python3 with PyTorch (python3-torch), the reference of the parity fixture
//   onnx-testdata  the ONNX backend node tests (libonnx-testdata)
//   onnx-npm     onnxruntime-node and the PaddleOCR models (make onnx-npm; bench/onnx/run.sh, a ctest)
//   mpi          mpirun (openmpi-bin), the data-parallel tests' launcher
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

namespace alk::testing {

inline std::string required_list() {
  const char* env = std::getenv("ALK_REQUIRE");
  return env ? env : "";
}

inline bool required(std::string_view what) {
  std::string list = required_list();
  for (char& c : list)
    if (c == ',') c = ' ';
  std::istringstream words(list);
  for (std::string w; words >> w;)
    if (w == what) return true;
  return false;
}

}  // namespace alk::testing

// Skips with `why` (a string expression), or fails when `what` is in ALK_REQUIRE.
#define ALK_SKIP_OR_FAIL_IF_REQUIRED(what, why)                                                          \
  do {                                                                                                 \
    const std::string alk_missing_why_ = (why);                                                        \
    if (::alk::testing::required(what))                                                                \
      GTEST_FAIL() << (what) << " is required here (ALK_REQUIRE=" << ::alk::testing::required_list() \
                   << ") but missing: " << alk_missing_why_;                                           \
    GTEST_SKIP() << alk_missing_why_;                                                                  \
  } while (0)
