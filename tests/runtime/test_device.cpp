// The runtime layer with a second device: "testdev", host memory of its own and the CPU's
// kernels, registered only in this test binary. It proves what a GPU backend relies on
// without a GPU: tensors know their device, data crosses only through upload/download/copy,
// mixing devices is an error naming both, to(device) is a differentiable copy, modules and
// compiled steps run where their tensors are.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "alk/alk.h"
#include "error_expect.h"
#include "graph/graph.h"
#include "runtime/device.h"

namespace alk {
namespace {

class TestDevice final : public Device {
 public:
  const DeviceInfo& info() const override {
    static const DeviceInfo info = [] {
      DeviceInfo i;
      i.name = "testdev:0";
      i.kind = "testdev";
      i.type = "cpu";  // never chosen by "auto"
      i.description = "host memory, CPU kernels (tests only)";
      i.alignment = 256;
      return i;
    }();
    return info;
  }
  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    ++allocations;
    return std::make_shared<Buffer>(this, std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256), bytes);
  }
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    ++uploads;
    ASSERT_EQ(dst.device, this);
    ASSERT_LE(offset + bytes, dst.bytes);
    std::memcpy(static_cast<char*>(dst.handle) + offset, src, bytes);
  }
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    ++downloads;
    ASSERT_EQ(src.device, this);
    ASSERT_LE(offset + bytes, src.bytes);
    std::memcpy(dst, static_cast<const char*>(src.handle) + offset, bytes);
  }
  void copy(const Buffer& src, size_t so, const Buffer& dst, size_t d, size_t bytes) override {
    ASSERT_EQ(src.device, this);
    ASSERT_EQ(dst.device, this);
    std::memmove(static_cast<char*>(dst.handle) + d, static_cast<const char*>(src.handle) + so, bytes);
  }
  void synchronize() override {}
  bool supports(const Kernel& k) const override { return k.op != OpId::Cumsum; }  // one op it "lacks"
  std::shared_ptr<PreparedKernel> prepare(const Kernel& k) override { return cpu_device().prepare(k); }
  void launch(PreparedKernel& p, const Kernel& k) override {
    ++launches;
    // Every argument must be memory of this device: the scheduler planned it here.
    EXPECT_EQ(k.output.buffer->device, this);
    for (const KernelArg& a : k.inputs) EXPECT_EQ(a.buffer->device, this);
    EXPECT_EQ(k.output.byte_offset % 256, 0u) << "arena slices honour the device's alignment";
    cpu_device().launch(p, k);
  }
  int64_t allocations = 0, uploads = 0, downloads = 0, launches = 0;

 protected:
  void free(void* handle, size_t) noexcept override { std::free(handle); }
};

TestDevice* g_test_device = nullptr;
const DeviceRegistration kRegisterTestDevice("testdev", 0, [] {
  std::vector<std::unique_ptr<Device>> found;
  auto d = std::make_unique<TestDevice>();
  g_test_device = d.get();
  found.push_back(std::move(d));
  return found;
});

TestDevice& testdev() {
  get_device("testdev");
  return *g_test_device;
}

TEST(Devices, RegistryFindsTheCpuAndRegisteredBackends) {
  std::vector<Device*> all = available_devices();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0], &cpu_device());
  EXPECT_EQ(cpu_device().name(), "cpu");
  EXPECT_EQ(&get_device("cpu"), &cpu_device());
  EXPECT_EQ(&get_device("testdev"), &get_device("testdev:0"));
  EXPECT_NE(&get_device("auto"), static_cast<Device*>(&testdev())) << "a CPU-type device is never 'auto'";
  EXPECT_GT(cpu_device().info().memory_bytes, 0);
  EXPECT_EQ(&default_device(), std::getenv("ALK_DEVICE") ? &get_device(std::getenv("ALK_DEVICE")) : &cpu_device());
}

TEST(Devices, UnknownDeviceNamesWhatExists) {
  try {
    get_device("testdev:7");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("testdev:7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("testdev:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_device.cpp"), std::string::npos) << msg;
  }
}

TEST(Devices, TensorsAreCreatedComputedAndReadThroughTheirDevice) {
  TestDevice& dev = testdev();
  const int64_t uploads = dev.uploads, downloads = dev.downloads, launches = dev.launches;
  Tensor a, b;
  {
    DeviceGuard on(dev);
    a = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
    b = arange(0, 4, 1, DType::F32).reshape({2, 2});
  }
  EXPECT_EQ(&a.device(), &dev);
  EXPECT_EQ(dev.uploads, uploads + 2);
  Tensor c = relu(matmul(a, b) - 5.0) + a.t();  // a view of a realized tensor, a template op, a fused chain
  EXPECT_EQ(&c.device(), &dev);
  std::vector<float> got = c.to_vector<float>();
  // matmul([[1,2],[3,4]], [[0,1],[2,3]]) = [[4,7],[8,15]]; relu(-5) + a^T
  EXPECT_EQ(got, (std::vector<float>{0 + 1, 2 + 3, 3 + 2, 10 + 4}));
  EXPECT_GT(dev.launches, launches);
  EXPECT_GT(dev.downloads, downloads);
  EXPECT_EQ(&cpu_device(), &Tensor(tensor(std::vector<float>{1}, {1})).device());
}

TEST(Devices, MixingDevicesIsAnErrorNamingBoth) {
  Tensor on_cpu = tensor(std::vector<float>{1, 2}, {2});
  Tensor on_test;
  {
    DeviceGuard on(testdev());
    on_test = tensor(std::vector<float>{3, 4}, {2});
  }
  try {
    Tensor bad = on_cpu + on_test;
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("testdev:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_device.cpp"), std::string::npos) << msg;
  }
  EXPECT_ALK_ERROR(matmul(on_cpu.reshape({1, 2}), on_test.reshape({2, 1})), "Matmul", "cpu", "testdev:0");
  Tensor target = on_cpu.detach();
  EXPECT_ALK_ERROR(target.assign_(on_test), "assign_", "testdev:0", "cpu");
  // A value computed from constants alone stays where they were made (an optimizer's moments).
  Tensor moments = zeros_like(on_test).contiguous();
  EXPECT_EQ(&moments.device(), &testdev());
  // A constant is a number, not memory: it joins any device.
  Tensor sum = on_test + full({2}, 10.0);
  EXPECT_EQ(&sum.device(), &testdev());
  EXPECT_EQ(sum.to_vector<float>(), (std::vector<float>{13, 14}));
}

TEST(Devices, ToDeviceCopiesBothWaysAndCarriesGradients) {
  Tensor x = tensor(std::vector<double>{1, -2, 3, -4, 5, -6}, {2, 3});
  x.requires_grad_();
  EXPECT_EQ(x.to(cpu_device()).impl(), x.impl()) << "already there: the tensor itself";
  Tensor y = x.t().to(testdev());  // a strided view crosses as its elements in order
  EXPECT_EQ(&y.device(), &testdev());
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, -4, -2, 5, 3, -6}));
  Tensor loss = sum(y * y * y).to("cpu");  // d/dx x^3 = 3x^2
  EXPECT_EQ(&loss.device(), &cpu_device());
  loss.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(&x.grad().device(), &cpu_device());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 12, 27, 48, 75, 108}));
}

TEST(Devices, KernelsADeviceLacksAreRefusedClearly) {
  Tensor x;
  {
    DeviceGuard on(testdev());
    x = tensor(std::vector<float>{1, 2, 3}, {3});
  }
  try {
    cumsum(x, 0).realize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("testdev:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot run"), std::string::npos) << msg;
  }
  EXPECT_EQ(cumsum(x.to(cpu_device()), 0).to_vector<float>(), (std::vector<float>{1, 3, 6}));
}

// Device::address: the CPU's memory is where the tensor's values are (what NumPy views and MPI
// reads in place); a device that keeps its memory to itself (the default) refuses, naming
// itself and the caller.
TEST(Devices, AddressesAreTheCpuMemoryAndRefusedElsewhere) {
  Tensor x = arange(0, 12, 1, DType::F32).reshape({3, 4}).select(0, 1);  // a view at element 4
  x.realize();
  const Buffer& cpu_buffer = *x.impl()->node->buffer;
  const auto* values = static_cast<const float*>(
      cpu_device().address(cpu_buffer, static_cast<size_t>(x.offset()) * sizeof(float)));
  EXPECT_EQ(std::vector<float>(values, values + 4), x.to_vector<float>());

  std::shared_ptr<Buffer> on_test = testdev().allocate(64);
  try {
    testdev().address(*on_test, 16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("testdev:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no address"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_device.cpp"), std::string::npos) << msg;
  }
}

TEST(Devices, ModulesAndCompiledStepsRunOnTheirDevice) {
  manual_seed(3);
  nn::Linear on_cpu(4, 3), moved(4, 3);
  moved.load_state_dict(on_cpu.state_dict());
  moved.to("testdev");
  for (auto& [name, p] : moved.named_parameters()) {
    EXPECT_EQ(&p.device(), &testdev()) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
  EXPECT_EQ(&moved.weight.device(), &testdev()) << "the module's own handles moved";
  Tensor x = randn({5, 4});
  optim::SGD opt_cpu(on_cpu.named_parameters(), 0.1), opt_dev(moved.named_parameters(), 0.1);
  auto step = [](nn::Linear& m, optim::SGD& opt) {
    return [&m, &opt](const std::vector<Tensor>& in) {
      opt.zero_grad();
      Tensor loss = mean(m(in[0]) * m(in[0]));
      loss.backward();
      opt.step();
      capture("loss", loss);
    };
  };
  Program run_cpu = compile(step(on_cpu, opt_cpu)), run_dev = compile(step(moved, opt_dev));
  Tensor x_dev = x.to(testdev());
  x_dev.realize();
  for (int i = 0; i < 4; ++i) {  // eager, traced, then two replays
    run_cpu({x});
    run_dev({x_dev});
    EXPECT_NEAR(run_dev.captured("loss").item(), run_cpu.captured("loss").item(), 1e-6) << "step " << i;
  }
  EXPECT_EQ(&run_dev.captured("loss").device(), &testdev());
  // Loaded back into a CPU model, the state is the same.
  nn::Linear back(4, 3);
  back.load_state_dict(moved.state_dict());
  EXPECT_EQ(back.weight.to_vector<float>(), on_cpu.weight.to_vector<float>());
}

}  // namespace
}  // namespace alk
