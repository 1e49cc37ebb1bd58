// The load-time folding of per-channel affine maps into the Conv before them (src/onnx/fold.cpp):
// Conv -> BatchNormalization -> Mul -> Add (weights as Constant nodes, as paddle2onnx writes
// them, or initializers; grouped and depthwise) must give what the unfolded graph computes, here
// a float64 reference built from alk's conv2d; a Conv output with a second reader is not folded
// and still right. Also the run-time rewrite of a per-channel scale before a Conv into scaled
// weights (import.cpp run_graph).
#ifdef ALK_HAVE_ONNX
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <random>

#include "alk/alk.h"
#include "alk/onnx.h"

namespace alk {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void set_tensor(::onnx::TensorProto* t, const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<float>& v) {
  t->set_name(name);
  t->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_float_data(x);
}

struct Builder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g = m.mutable_graph();
  bool as_constants;
  explicit Builder(bool constants) : as_constants(constants) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
  }
  void value(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    if (!as_constants) return set_tensor(g->add_initializer(), name, dims, v);
    auto* n = g->add_node();
    n->set_op_type("Constant");
    n->add_output(name);
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    set_tensor(a->mutable_t(), name, dims, v);
  }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + out);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
};

void int_attr(::onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v, bool list = true) {
  auto* a = n->add_attribute();
  a->set_name(name);
  if (!list) {
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v[0]);
    return;
  }
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// x [1, C, 7, 9] -> Conv (3x3, pads 1, `groups`) -> BatchNormalization -> Mul [1, M, 1, 1] ->
// Add [1] -> y; with `second_reader`, y2 = Relu(conv) is an output too.
void check(int64_t C, int64_t M, int64_t groups, bool constants, bool second_reader) {
  SCOPED_TRACE("C " + std::to_string(C) + " M " + std::to_string(M) + " groups " + std::to_string(groups) +
               (constants ? " constants" : " initializers") + (second_reader ? " second reader" : ""));
  std::mt19937 rng(static_cast<unsigned>(C * 100 + M * 10 + groups));
  const int64_t H = 7, W = 9;
  const std::vector<float> w = random_floats(static_cast<size_t>(M * (C / groups) * 9), rng);
  const std::vector<float> b = random_floats(static_cast<size_t>(M), rng);
  const std::vector<float> scale = random_floats(static_cast<size_t>(M), rng, 0.5f, 2.f);
  const std::vector<float> beta = random_floats(static_cast<size_t>(M), rng);
  const std::vector<float> mean = random_floats(static_cast<size_t>(M), rng);
  const std::vector<float> var = random_floats(static_cast<size_t>(M), rng, 0.1f, 1.f);
  const std::vector<float> mul = random_floats(static_cast<size_t>(M), rng);
  const std::vector<float> add = random_floats(1, rng);
  const double eps = 1e-3;
  Builder bld(constants);
  auto* in = bld.g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  bld.value("w", {M, C / groups, 3, 3}, w);
  bld.value("b", {M}, b);
  bld.value("scale", {M}, scale);
  bld.value("beta", {M}, beta);
  bld.value("mean", {M}, mean);
  bld.value("var", {M}, var);
  bld.value("mul", {1, M, 1, 1}, mul);
  bld.value("add", {1}, add);
  auto* conv = bld.node("Conv", {"x", "w", "b"}, "c");
  int_attr(conv, "pads", {1, 1, 1, 1});
  int_attr(conv, "group", {groups}, false);
  auto* bn = bld.node("BatchNormalization", {"c", "scale", "beta", "mean", "var"}, "n");
  auto* e = bn->add_attribute();
  e->set_name("epsilon");
  e->set_type(::onnx::AttributeProto::FLOAT);
  e->set_f(static_cast<float>(eps));
  bld.node("Mul", {"n", "mul"}, "s");
  bld.node("Add", {"add", "s"}, "y");
  bld.g->add_output()->set_name("y");
  if (second_reader) {
    bld.node("Relu", {"c"}, "y2");
    bld.g->add_output()->set_name("y2");
  }
  std::string bytes;
  bld.m.SerializeToString(&bytes);
  onnx::Model model = onnx::load_bytes(bytes, "");
  const std::vector<float> xv = random_floats(static_cast<size_t>(C * H * W), rng);
  std::map<std::string, Tensor> out = model.run({{"x", tensor(xv, {1, C, H, W})}});

  // The reference in float64, map by map.
  auto t64 = [](const std::vector<float>& v, Shape s) { return tensor(std::vector<double>(v.begin(), v.end()), s); };
  Tensor c = conv2d(t64(xv, {1, C, H, W}), t64(w, {M, C / groups, 3, 3}), t64(b, {M}), 1, 1, 1, groups);
  auto ch = [&](const std::vector<float>& v) { return t64(v, {1, M, 1, 1}); };
  Tensor n = (c - ch(mean)) * (ch(scale) / sqrt(ch(var) + eps)) + ch(beta);
  Tensor y = n * ch(mul) + add[0];
  const std::vector<double> want = y.to_vector<double>(), got = out.at("y").to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  if (second_reader) {
    const std::vector<double> want2 = relu(c).to_vector<double>(), got2 = out.at("y2").to_vector<double>();
    for (size_t i = 0; i < got2.size(); ++i) ASSERT_NEAR(got2[i], want2[i], 1e-4 * (1 + std::abs(want2[i]))) << i;
  }
}

TEST(OnnxFold, ConvAffineChainsMatchTheUnfoldedGraph) {
  for (bool constants : {true, false}) {
    check(3, 4, 1, constants, false);  // a plain convolution
    check(6, 4, 2, constants, false);  // grouped
    check(5, 5, 5, constants, false);  // depthwise
  }
  check(3, 4, 1, true, true);  // the Conv output has two readers: nothing folds
}

// x * s -> Conv with s one value per input channel (a squeeze-excitation block; import.cpp runs
// the Conv on x with its weights scaled instead): the product's operands either way round, 1x1
// and 3x3 kernels; not rewritten (and still right) when the product has a second reader, for a
// batch of 2 and for a grouped Conv. Against conv2d(x * s) in float64.
void check_channel_scale(int64_t k, bool scale_first, bool second_reader, int64_t N, int64_t groups) {
  SCOPED_TRACE("k " + std::to_string(k) + (scale_first ? " s*x" : " x*s") + (second_reader ? " second reader" : "") +
               " N " + std::to_string(N) + " groups " + std::to_string(groups));
  std::mt19937 rng(static_cast<unsigned>(k * 10 + N + (scale_first ? 100 : 0) + groups * 1000));
  const int64_t C = 6, M = 4, H = 4, W = 7, pad = k / 2;
  const std::vector<float> w = random_floats(static_cast<size_t>(M * (C / groups) * k * k), rng);
  const std::vector<float> b = random_floats(static_cast<size_t>(M), rng);
  Builder bld(false);
  for (const char* name : {"x", "s"}) {
    auto* in = bld.g->add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  }
  bld.value("w", {M, C / groups, k, k}, w);
  bld.value("b", {M}, b);
  bld.node("Mul", scale_first ? std::vector<std::string>{"s", "x"} : std::vector<std::string>{"x", "s"}, "p");
  auto* conv = bld.node("Conv", {"p", "w", "b"}, "y");
  int_attr(conv, "pads", {pad, pad, pad, pad});
  int_attr(conv, "group", {groups}, false);
  bld.g->add_output()->set_name("y");
  if (second_reader) {
    bld.node("Relu", {"p"}, "y2");
    bld.g->add_output()->set_name("y2");
  }
  std::string bytes;
  bld.m.SerializeToString(&bytes);
  onnx::Model model = onnx::load_bytes(bytes, "");
  const std::vector<float> xv = random_floats(static_cast<size_t>(N * C * H * W), rng);
  const std::vector<float> sv = random_floats(static_cast<size_t>(N * C), rng, 0.f, 1.f);
  for (int call = 0; call < 3; ++call) {  // eager, traced, replayed (the per-shape program cache)
    std::map<std::string, Tensor> out = model.run({{"x", tensor(xv, {N, C, H, W})}, {"s", tensor(sv, {N, C, 1, 1})}});
    auto t64 = [](const std::vector<float>& v, Shape sh) { return tensor(std::vector<double>(v.begin(), v.end()), sh); };
    Tensor prod = t64(xv, {N, C, H, W}) * t64(sv, {N, C, 1, 1});
    Tensor y = conv2d(prod, t64(w, {M, C / groups, k, k}), t64(b, {M}), 1, pad, 1, groups);
    const std::vector<double> want = y.to_vector<double>(), got = out.at("y").to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
    if (second_reader) {
      const std::vector<double> want2 = relu(prod).to_vector<double>(), got2 = out.at("y2").to_vector<double>();
      for (size_t i = 0; i < got2.size(); ++i) ASSERT_NEAR(got2[i], want2[i], 1e-6) << i;
    }
  }
}

TEST(OnnxFold, ChannelScaleBeforeConvMatchesTheProduct) {
  for (int64_t k : {1, 3})
    for (bool scale_first : {false, true}) check_channel_scale(k, scale_first, false, 1, 1);
  check_channel_scale(1, false, true, 1, 1);  // the product has a second reader
  check_channel_scale(3, false, false, 2, 1);  // a batch: one scale per image
  check_channel_scale(3, true, false, 1, 2);   // grouped
}

}  // namespace
}  // namespace alk
#endif  // ALK_HAVE_ONNX
