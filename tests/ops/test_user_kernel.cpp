// alk::UserKernel (alk/user_kernel.h): known answers of C++ bodies on the CPU, the kernel
// among lazy ops (fused neighbours, planned memory) and in compiled programs, the checks made
// before a node is recorded, compile errors mapped to the body's line and the caller's, and
// a device without a body for its language refusing the kernel by name. The GPU bodies are
// compared with the C++ body by DeviceParity.UserKernels and tests/examples/test_sha256.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/user_kernel.h"
#include "required.h"

namespace alk {
namespace {

constexpr int kCpp = static_cast<int>(KernelTarget::Cpp);
constexpr int kGlsl = static_cast<int>(KernelTarget::Glsl);

KernelSpec axpy_spec() {
  KernelSpec s;
  s.name = "axpy";
  s.inputs = {{"x", DType::F32}, {"y", DType::F32}};
  s.output = {"res", DType::F32};
  s.attrs = {{"a", DType::F32}};
  s.body[kCpp] = "res[i] = a * x[i] + y[i];";
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(UserKernel, CppBodyKnownAnswerAmongLazyOps) {
  const UserKernel axpy(axpy_spec());
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  std::vector<float> x(5000), y(5000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = d(rng), y[i] = d(rng);
  const Tensor tx = tensor(x, {50, 100}), ty = tensor(y, {50, 100});
  // Inputs computed by fused Map kernels and the result read by another: the kernel's node is
  // planned like any template op's.
  const Tensor out = axpy({tx * 2.0, ty.t().contiguous().t()}, {0.5}) + 1.0;
  EXPECT_EQ(out.shape(), (Shape{50, 100}));
  const std::vector<float> got = out.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(0.5f * (x[i] * 2.0f) + y[i]) + 1.0f;
    ASSERT_EQ(got[i], want) << i;
  }
}

// Its own grid and output shape: one invocation per row writes the row's running sum in i64.
TEST(UserKernel, CountRuleAndShapeRule) {
  KernelSpec s;
  s.name = "row_prefix";
  s.inputs = {{"x", DType::I32, 2}};
  s.output = {"res", DType::I64, 2};
  s.attrs = {{"start", DType::I64}};
  s.output_shape = [](std::span<const Shape> in, std::span<const double>) { return Shape{in[0][0], in[0][1] + 1}; };
  s.invocations = [](std::span<const Shape> in, std::span<const double>) { return in[0][0]; };
  s.body[kCpp] = R"(
int64_t acc = start;
res[i * res_size1] = acc;
for (int64_t c = 0; c < x_size1; ++c) {
  acc += x[i * x_size1 + c];
  res[i * res_size1 + c + 1] = acc;
})";
  const UserKernel k(s);
  const Tensor x = tensor(std::vector<int32_t>{1, 2, 3, -4, 5, 6}, {2, 3});
  const Tensor out = k({x}, {100});
  EXPECT_EQ(out.dtype(), DType::I64);
  EXPECT_EQ(out.to_vector<int64_t>(), (std::vector<int64_t>{100, 101, 103, 106, 100, 96, 101, 107}));
}

// Replayed by alk::compile (first call eager, second traced, then replays): new input values
// each call reach the recorded kernel.
TEST(UserKernel, RunsInsideCompiledPrograms) {
  const UserKernel axpy(axpy_spec());
  Program step = compile([&](const std::vector<Tensor>& in) { capture("out", axpy({in[0], in[1]}, {3.0})); });
  const Tensor y = tensor(std::vector<float>{10, 20, 30}, {3});
  for (int call = 0; call < 4; ++call) {
    const float v = static_cast<float>(call);
    step({tensor(std::vector<float>{v, v + 1, -v}, {3}), y});
    EXPECT_EQ(step.captured("out").to_vector<float>(), (std::vector<float>{3 * v + 10, 3 * (v + 1) + 20, -3 * v + 30}))
        << "call " << call;
  }
  EXPECT_TRUE(step.traced());
}

TEST(UserKernel, SpecAndCallErrorsNameTheKernelAndTheLine) {
  KernelSpec no_cpp = axpy_spec();
  no_cpp.body[kCpp].clear();
  int line = __LINE__ + 1;
  std::string what = error_of([&] { UserKernel k(no_cpp); });
  EXPECT_NE(what.find("axpy"), std::string::npos) << what;
  EXPECT_NE(what.find("C++ body"), std::string::npos) << what;
  EXPECT_NE(what.find("test_user_kernel.cpp:" + std::to_string(line)), std::string::npos) << what;

  KernelSpec bad_name = axpy_spec();
  bad_name.inputs[1].name = "x";
  EXPECT_NE(error_of([&] { UserKernel k(bad_name); }).find("used twice"), std::string::npos);
  KernelSpec keyword = axpy_spec();
  keyword.output.name = "out";  // GLSL's
  EXPECT_NE(error_of([&] { UserKernel k(keyword); }).find("'out' is a reserved word"), std::string::npos);

  const UserKernel axpy(axpy_spec());
  const Tensor f = ones({4}), i = tensor(std::vector<int32_t>{1, 2, 3, 4}, {4});
  line = __LINE__ + 1;
  what = error_of([&] { (void)axpy({f, i}, {1.0}); });
  EXPECT_NE(what.find("input y must be f32, got i32"), std::string::npos) << what;
  EXPECT_NE(what.find("test_user_kernel.cpp:" + std::to_string(line)), std::string::npos) << what;
  EXPECT_NE(error_of([&] { (void)axpy({f, f}, {}); }).find("takes 1 attributes, got 0"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)axpy({f}, {1.0}); }).find("takes 2 inputs, got 1"), std::string::npos);
  KernelSpec ranked = axpy_spec();
  ranked.inputs[0].rank = 2;
  EXPECT_NE(error_of([&] { (void)UserKernel(ranked)({f, f}, {1.0}); }).find("must have rank 2"), std::string::npos);
  KernelSpec int_attr = axpy_spec();
  int_attr.attrs[0].dtype = DType::I32;
  EXPECT_NE(error_of([&] { (void)UserKernel(int_attr)({f, f}, {1.5}); }).find("must be an i32 value, got 1.5"),
            std::string::npos);
}

// The compiler's message, at the line of the body (counted from 1) and with the caller's line.
TEST(UserKernel, CompileErrorsPointAtTheBodysLine) {
  KernelSpec s = axpy_spec();
  s.name = "broken";
  s.body[kCpp] = "const float twice = 2 * a;\nres[i] = twice * x[i] + y[i];\nres[i] += not_declared;\n";
  const UserKernel k(s);
  const Tensor f = ones({4});
  const int line = __LINE__ + 1;
  const std::string what = error_of([&] { (void)k({f, f}, {1.0}).to_vector<float>(); });
  EXPECT_NE(what.find("user kernel broken"), std::string::npos) << what;
  EXPECT_NE(what.find("C++ body does not compile"), std::string::npos) << what;
  EXPECT_NE(what.find("body line 3:"), std::string::npos) << what;
  EXPECT_NE(what.find("not_declared"), std::string::npos) << what;
  EXPECT_NE(what.find("test_user_kernel.cpp:" + std::to_string(line)), std::string::npos) << what;
}

Device* vulkan_or_null() {
  for (Device* d : available_devices())
    if (d->info().kind == "vulkan") return d;
  return nullptr;
}

TEST(UserKernel, ADeviceWithoutABodyRefusesItByName) {
  Device* vk = vulkan_or_null();
  if (!vk) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device");
  const UserKernel cpp_only(axpy_spec());
  const Tensor f = ones({4}).to(*vk);
  const int line = __LINE__ + 1;
  const std::string what = error_of([&] { (void)cpp_only({f, f}, {1.0}).to_vector<float>(); });
  EXPECT_NE(what.find("user kernel axpy"), std::string::npos) << what;
  EXPECT_NE(what.find(vk->name()), std::string::npos) << what;
  EXPECT_NE(what.find("cannot run it"), std::string::npos) << what;
  EXPECT_NE(what.find("test_user_kernel.cpp:" + std::to_string(line)), std::string::npos) << what;
}

TEST(UserKernel, GlslCompileErrorsPointAtTheBodysLine) {
  Device* vk = vulkan_or_null();
  if (!vk) ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device");
  KernelSpec s = axpy_spec();
  s.name = "broken_glsl";
  s.body[kGlsl] = "float twice = 2.0 * a;\nres[i] = twice * x[i] + y[i] + missing_name;\n";
  const UserKernel k(s);
  const Tensor f = ones({4}).to(*vk);
  const std::string what = error_of([&] { (void)k({f, f}, {1.0}).to_vector<float>(); });
  EXPECT_NE(what.find("GLSL body does not compile"), std::string::npos) << what;
  EXPECT_NE(what.find("body line 2:"), std::string::npos) << what;
  EXPECT_NE(what.find("missing_name"), std::string::npos) << what;
}

// The text alk writes around a body: every target names the same things.
TEST(UserKernel, GeneratedSourcesDeclareTheBodysNames) {
  KernelSpec s = axpy_spec();
  for (int t = 0; t < kNumKernelTargets; ++t) s.body[t] = "/*body*/";
  const int ranks[] = {2, 2, 2};
  for (int t = 0; t < kNumKernelTargets; ++t) {
    const std::string src = user_kernel_source(s, static_cast<KernelTarget>(t), ranks);
    SCOPED_TRACE(src);
    for (const char* name : {"x", "y", "res", "x_numel", "x_size0", "x_size1", "res_size1", "a", "/*body*/"})
      EXPECT_NE(src.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(user_kernel_param_words(s, ranks), 3u * 3u + 1u + 1u);
}

}  // namespace
}  // namespace alk
