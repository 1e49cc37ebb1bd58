// The example backend's own tests: it is found through the registry, its memory is its own, it
// runs what the CPU runs with the CPU's results bit for bit, and it counts its launches. The
// op-table parity suite (alk's tests/backend/test_device_parity.cpp, built into the same
// program) then runs every elementwise entry and template op on it against the CPU; at the
// end the launches per op are printed.
#include <gtest/gtest.h>

#include <iostream>

#include "alk/alk.h"
#include "forward_device.h"

namespace forward_backend {
namespace {

using alk::OpId;
using alk::Tensor;

TEST(ForwardDevice, IsFoundThroughTheRegistry) {
  ForwardDevice& dev = forward_device();
  EXPECT_EQ(&alk::get_device("forward"), &dev);
  EXPECT_EQ(&alk::get_device("forward:0"), &dev);
  bool listed = false;
  for (alk::Device* d : alk::available_devices()) listed = listed || d == &dev;
  EXPECT_TRUE(listed);
  EXPECT_NE(&alk::get_device("auto"), static_cast<alk::Device*>(&dev)) << "a CPU-type device is never 'auto'";
}

TEST(ForwardDevice, RunsTheCpuKernelsOnItsOwnMemoryAndCountsThem) {
  ForwardDevice& dev = forward_device();
  const Tensor a = alk::randn({33, 17}), b = alk::randn({17, 9}), bias = alk::randn({9});
  auto program = [](const Tensor& x, const Tensor& w, const Tensor& c) {
    return alk::softmax(alk::gelu(alk::matmul(x, w) + c), 1) * 2.0;
  };
  const Tensor want = program(a, b, bias);
  const int64_t matmuls = dev.launches(OpId::Matmul), softmaxes = dev.launches(OpId::Softmax);
  const int64_t all = dev.launches();
  const Tensor got = program(a.to(dev), b.to(dev), bias.to(dev));
  EXPECT_EQ(&got.device(), static_cast<alk::Device*>(&dev));
  // The same kernels over the same inputs: the same bits.
  EXPECT_EQ(got.to(alk::cpu_device()).to_vector<float>(), want.to_vector<float>());
  EXPECT_EQ(dev.launches(OpId::Matmul), matmuls + 1);
  EXPECT_EQ(dev.launches(OpId::Softmax), softmaxes + 1);
  EXPECT_GT(dev.launches(), all + 1);
}

TEST(ForwardDevice, GradientsAndCompiledStepsRunOnIt) {
  ForwardDevice& dev = forward_device();
  const Tensor w0 = alk::randn({8, 4});
  auto grad_on = [&](alk::Device& d) {
    Tensor w = w0.to(d).detach().requires_grad_();
    alk::sum(alk::tanh(w) * w).backward();
    return w.grad().to(alk::cpu_device()).to_vector<float>();
  };
  EXPECT_EQ(grad_on(dev), grad_on(alk::cpu_device()));
}

TEST(ForwardDevice, BuffersAreFreedWithTheirTensors) {
  ForwardDevice& dev = forward_device();
  const size_t before = dev.live_buffers();
  {
    Tensor t = alk::randn({1000}).to(dev);
    t.realize();
    EXPECT_GT(dev.live_buffers(), before);
  }
  EXPECT_EQ(dev.live_buffers(), before);
}

// Prints the launches per op when the program ends (after the parity suite).
class LaunchReport : public ::testing::Environment {
 public:
  void TearDown() override {
    ForwardDevice& dev = forward_device();
    std::cout << "[forward:0] " << dev.launches() << " launches:";
    for (int i = 0; i < alk::kNumOps; ++i)
      if (const int64_t n = dev.launches(static_cast<OpId>(i))) std::cout << " " << alk::op_name(static_cast<OpId>(i)) << " " << n;
    std::cout << "\n";
  }
};
const auto* const kLaunchReport = ::testing::AddGlobalTestEnvironment(new LaunchReport);

}  // namespace
}  // namespace forward_backend
