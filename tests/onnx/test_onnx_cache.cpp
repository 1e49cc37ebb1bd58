// Model::run's per-signature program cache (src/onnx/import.cpp run_cached): replayed calls give
// what the uncached import gives for new input values, per shape; outputs of earlier calls keep
// their values; a model whose host reads depend on the input data (a Reshape to dims given as an
// input, NonZero) follows the data on every call; a Model inside an alk::compile step works.
#ifdef ALK_HAVE_ONNX
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>

#include "alk/alk.h"
#include "alk/compile.h"
#include "alk/onnx.h"

namespace alk {
namespace {

struct Graph {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g = m.mutable_graph();
  Graph() {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
  }
  void input(const std::string& name, int type) {
    auto* in = g->add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
  void node(const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + out);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
  }
  void ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  onnx::Model load() {
    std::string bytes;
    m.SerializeToString(&bytes);
    return onnx::load_bytes(bytes, "");
  }
};

Tensor random_input(Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-4, 4);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return tensor(v, shape);
}

// x [N, 6] -> HardSwish -> Reshape to [-1, 3] (an initializer) -> y; z = x * Shape(x)[1] (a
// value computed from a shape: the same on every call with the shape).
onnx::Model shape_only_model() {
  Graph b;
  b.input("x", ::onnx::TensorProto::FLOAT);
  b.ints("to", {-1, 3});
  b.ints("one", {1});
  b.ints("two", {2});
  b.ints("zero", {0});
  b.node("HardSwish", {"x"}, "h");
  b.node("Reshape", {"h", "to"}, "y");
  b.node("Shape", {"x"}, "s");
  b.node("Slice", {"s", "one", "two", "zero"}, "s1");
  b.node("Reshape", {"x", "s"}, "x2");  // a host read of a shape-only value
  b.node("Cast", {"s1"}, "s1f");
  b.g->mutable_node(b.g->node_size() - 1)->add_attribute()->set_name("to");
  b.g->mutable_node(b.g->node_size() - 1)->mutable_attribute(0)->set_type(::onnx::AttributeProto::INT);
  b.g->mutable_node(b.g->node_size() - 1)->mutable_attribute(0)->set_i(::onnx::TensorProto::FLOAT);
  b.node("Mul", {"x2", "s1f"}, "z");
  b.g->add_output()->set_name("y");
  b.g->add_output()->set_name("z");
  return b.load();
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>()) << what;
}

TEST(OnnxProgramCache, ReplaysFollowNewValuesPerShape) {
  onnx::Model cached = shape_only_model();
  onnx::Model uncached = cached;
  uncached.set_replay(false);
  std::mt19937 rng(13);
  std::vector<std::pair<Tensor, std::vector<Tensor>>> kept;  // inputs and outputs of every call
  for (int call = 0; call < 7; ++call) {
    const Tensor x = random_input({call % 2 ? 4 : 2, 6}, rng);  // two signatures, interleaved
    std::vector<Tensor> got = cached({x});
    std::vector<Tensor> want = uncached({x});
    for (size_t k = 0; k < got.size(); ++k) expect_same(got[k], want[k], "call " + std::to_string(call));
    kept.push_back({x, got});
  }
  // Later replays rewrite the program's buffers, not the outputs handed out before.
  for (size_t call = 0; call < kept.size(); ++call) {
    std::vector<Tensor> want = uncached({kept[call].first});
    for (size_t k = 0; k < want.size(); ++k) expect_same(kept[call].second[k], want[k], "kept " + std::to_string(call));
  }
}

TEST(OnnxProgramCache, DataDependentHostReadsRunUncached) {
  // y = Reshape(x, dims) with dims an input; n = NonZero(x > 0).
  Graph b;
  b.input("x", ::onnx::TensorProto::FLOAT);
  b.input("dims", ::onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "dims"}, "y");
  b.g->add_output()->set_name("y");
  onnx::Model reshape = b.load();
  std::mt19937 rng(7);
  const std::vector<std::vector<int64_t>> dims = {{2, 6}, {3, 4}, {4, 3}, {6, 2}, {12, 1}};
  for (const auto& d : dims) {
    const Tensor x = random_input({12}, rng);
    const Tensor y = reshape({x, tensor(d, {2})})[0];
    EXPECT_EQ(y.shape(), Shape(d.begin(), d.end()));
    EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  }
  Graph nz;
  nz.input("x", ::onnx::TensorProto::FLOAT);
  nz.node("NonZero", {"x"}, "n");
  nz.g->add_output()->set_name("n");
  onnx::Model nonzero = nz.load();
  for (int call = 0; call < 5; ++call) {
    std::vector<float> v(8, 0.f);
    for (int k = 0; k <= call; ++k) v[static_cast<size_t>(k * 3 % 8)] = 1.f;
    const Tensor n = nonzero({tensor(v, {8})})[0];
    std::vector<int64_t> want;
    for (size_t k = 0; k < v.size(); ++k)
      if (v[k] != 0) want.push_back(static_cast<int64_t>(k));
    EXPECT_EQ(n.to_vector<int64_t>(), want) << "call " << call;
  }
}

TEST(OnnxProgramCache, InsideACompiledStep) {
  onnx::Model model = shape_only_model();
  onnx::Model uncached = model;
  uncached.set_replay(false);
  Program step([&](const std::vector<Tensor>& in) { capture("y", model({in[0]})[0] * 2.0); });
  std::mt19937 rng(3);
  for (int call = 0; call < 4; ++call) {
    const Tensor x = random_input({2, 6}, rng);
    step({x});
    expect_same(step.captured("y"), uncached({x})[0] * 2.0, "call " + std::to_string(call));
  }
}

}  // namespace
}  // namespace alk
#endif
