// Export then import: an alk model written as ONNX (opset 17) and read back by alk's importer
// gives the model's own outputs; plus .npy round trips and malformed-model errors.
#ifdef ALK_HAVE_ONNX
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "alk/alk.h"
#include "alk/npy.h"
#include "alk/onnx.h"
#include "alk/train.h"

namespace alk {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("alk_onnx_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double d = 0;
  for (size_t k = 0; k < x.size() && k < y.size(); ++k) d = std::max(d, std::fabs(x[k] - y[k]));
  return d;
}

TEST(OnnxExport, MnistCnnRoundTrip) {
  manual_seed(7);
  auto net = train::mnist_cnn();
  net->eval();
  const std::string path = temp_path("mnist.onnx");
  onnx::export_sequential(*net, {1, 1, 28, 28}, path);
  onnx::Model m = onnx::load(path);
  EXPECT_EQ(m.info().opset, 17);
  EXPECT_TRUE(m.info().unsupported.empty());
  ASSERT_EQ(m.input_names(), std::vector<std::string>{"input"});
  EXPECT_EQ(m.info().inputs[0].dims[0], "N");  // symbolic batch
  Tensor x = randn({3, 1, 28, 28});
  Tensor want = net->forward(x);
  Tensor got = m({x})[0];
  EXPECT_LT(max_abs_diff(got, want), 1e-4);
  std::filesystem::remove(path);
}

TEST(OnnxExport, GptRoundTrip) {
  manual_seed(11);
  nn::GPTConfig cfg;
  cfg.vocab = 50;
  cfg.ctx = 16;
  cfg.dim = 32;
  cfg.heads = 4;
  cfg.layers = 2;
  nn::GPT model(cfg);
  model.eval();
  const std::string path = temp_path("gpt.onnx");
  onnx::export_gpt(model, path);
  onnx::Model m = onnx::load(path);
  EXPECT_TRUE(m.info().unsupported.empty());
  for (int64_t t : {1, 5, 16}) {  // T is symbolic in the file
    Tensor ids = randint(0, cfg.vocab, {2, t});
    Tensor want = model.forward(ids);
    Tensor got = m.run({{"ids", ids}}).at("logits");
    EXPECT_LT(max_abs_diff(got, want), 1e-4) << "T = " << t;
  }
  std::filesystem::remove(path);
}

TEST(OnnxNpy, RoundTripKeepsDtypeAndShape) {
  const std::string path = temp_path("x.npy");
  for (DType dt : {DType::F32, DType::F64, DType::I64, DType::I32, DType::U8, DType::Bool, DType::F16}) {
    Tensor x = cast(arange(0, 12, 1, DType::F64).reshape({3, 4}) - 5, dt);
    save_npy(path, x);
    Tensor y = load_npy(path);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.shape(), (Shape{3, 4}));
    EXPECT_EQ(y.to_vector<double>(), x.to_vector<double>());
  }
  save_npy(path, full({}, 2.5, DType::F32));
  EXPECT_EQ(load_npy(path).shape(), Shape{});
  std::filesystem::remove(path);
}

TEST(OnnxNpy, MalformedIsAnError) {
  EXPECT_THROW(parse_npy("not npy at all", "t"), Error);
  std::string good = npy_bytes(tensor(std::vector<float>{1, 2, 3}, {3}));
  EXPECT_THROW(parse_npy(good.substr(0, good.size() - 1), "t"), Error);  // truncated data
  std::string huge = good;
  const size_t at = huge.find("(3,)");
  huge.replace(at, 4, "(99999999999,)");
  EXPECT_THROW(parse_npy(huge, "t"), Error);
}

TEST(OnnxLoad, MalformedModelsAreErrors) {
  EXPECT_THROW(onnx::load_bytes("\x08\x07garbage\xff\xff", ""), Error);
  EXPECT_THROW(onnx::load("/nonexistent/model.onnx"), Error);
  // A real model, truncated at every 7th byte: an error or a smaller valid model, never a crash.
  const std::string path = temp_path("mnist_t.onnx");
  manual_seed(3);
  auto net = train::mnist_cnn();
  net->eval();
  onnx::export_sequential(*net, {1, 1, 28, 28}, path);
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  int errors = 0;
  for (size_t n = 0; n < bytes.size(); n += bytes.size() / 97 + 1) {
    try {
      onnx::load_bytes(std::string_view(bytes).substr(0, n), "");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 50);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace alk
#endif
