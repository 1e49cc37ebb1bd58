// Untrusted .onnx files: models built here with the protobuf classes, each broken in one way
// (external data outside the model's directory or past its file's end, a cycle, a missing
// input, absurd dims, a wrong attribute type), must give an alk::Error; external data that
// is right must load and give the same outputs as inline data. Small models built the same way
// also check what the node tests cover thinly: subgraphs reading the outer scope, Loop's scan
// outputs, DFT lengths that pad or truncate.
#ifdef ALK_HAVE_ONNX
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "alk/alk.h"
#include "alk/onnx.h"

namespace fs = std::filesystem;

namespace alk {
namespace {

// y = x + w (w an initializer [4]), optionally with w's data in an external file.
::onnx::ModelProto add_model() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(4);
  for (float v : {1.f, 2.f, 3.f, 4.f}) w->add_float_data(v);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

std::string bytes_of(const ::onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

class OnnxUntrusted : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("alk_onnx_untrusted_" + std::to_string(::getpid()));
    fs::create_directories(dir / "model");
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  // Moves w's data into model/weights.bin at `offset`, with these external_data entries.
  std::string with_external(const std::string& location, int64_t offset, int64_t length) {
    ::onnx::ModelProto m = add_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto add = [&](const std::string& k, const std::string& v) {
      auto* e = w->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    if (length >= 0) add("length", std::to_string(length));
    return bytes_of(m);
  }
  fs::path dir;
};

TEST_F(OnnxUntrusted, ExternalDataLoadsLikeInlineData) {
  const float w[4] = {1, 2, 3, 4};
  std::string blob(8, 'x');
  blob.append(reinterpret_cast<const char*>(w), sizeof(w));
  write(dir / "model" / "weights.bin", blob);
  write(dir / "model" / "m.onnx", with_external("weights.bin", 8, 16));
  onnx::Model m = onnx::load((dir / "model" / "m.onnx").string());
  Tensor y = m({tensor(std::vector<float>{10, 20, 30, 40}, {4})})[0];
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{11, 22, 33, 44}));
}

TEST_F(OnnxUntrusted, BadExternalDataIsAnError) {
  write(dir / "model" / "weights.bin", std::string(16, '\0'));
  write(dir / "secret.bin", std::string(16, '\0'));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"escape", with_external("../secret.bin", 0, 16)},
      {"absolute", with_external((dir / "secret.bin").string(), 0, 16)},
      {"past_end", with_external("weights.bin", 8, 16)},
      {"wrong_length", with_external("weights.bin", 0, 12)},
      {"missing_file", with_external("nope.bin", 0, 16)},
  };
  for (const auto& [name, bytes] : cases) {
    write(dir / "model" / (name + ".onnx"), bytes);
    EXPECT_THROW(onnx::load((dir / "model" / (name + ".onnx")).string()), Error) << name;
  }
  EXPECT_THROW(onnx::load_bytes(with_external("weights.bin", 0, 16), ""), Error);  // no directory: no external data
}

TEST_F(OnnxUntrusted, BrokenGraphsAreErrors) {
  {  // a cycle: the node reads its own output
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_node(0)->set_input(0, "y");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // an input nobody defines
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_node(0)->set_input(1, "ghost");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // an output never computed
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_output(0)->set_name("z");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // absurd dims, whose data is not there
    ::onnx::ModelProto m = add_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->set_dims(0, int64_t{1} << 40);
    w->add_dims(int64_t{1} << 40);
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
    w->set_dims(0, -3);
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // a type alk lacks
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_initializer(0)->set_data_type(::onnx::TensorProto::STRING);
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // a shape the data does not fill
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_initializer(0)->set_dims(0, 5);
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
}

TEST_F(OnnxUntrusted, BadNodesFailWhenRun) {
  {  // a wrong attribute type
    ::onnx::ModelProto m = add_model();
    auto* n = m.mutable_graph()->mutable_node(0);
    n->set_op_type("Softmax");
    n->mutable_input()->RemoveLast();
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s("zero");
    onnx::Model model = onnx::load_bytes(bytes_of(m), "");
    EXPECT_THROW(model({zeros({4})}), Error);
  }
  {  // a huge allocation asked for at run time (ConstantOfShape of [2^40, 2^40])
    ::onnx::ModelProto m = add_model();
    auto* shape = m.mutable_graph()->mutable_initializer(0);
    shape->set_data_type(::onnx::TensorProto::INT64);
    shape->clear_float_data();
    shape->set_dims(0, 2);
    shape->add_int64_data(int64_t{1} << 40);
    shape->add_int64_data(int64_t{1} << 40);
    auto* n = m.mutable_graph()->mutable_node(0);
    n->set_op_type("ConstantOfShape");
    n->clear_input();
    n->add_input("w");
    onnx::Model model = onnx::load_bytes(bytes_of(m), "");
    EXPECT_THROW(model({zeros({4})}), Error);
  }
  {  // an op alk does not implement: named in info() and an error when run
    ::onnx::ModelProto m = add_model();
    m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
    onnx::Model model = onnx::load_bytes(bytes_of(m), "");
    ASSERT_EQ(model.info().unsupported.size(), 1u);
    EXPECT_EQ(model.info().unsupported[0], "NoSuchOp");
    EXPECT_THROW(model({zeros({4})}), Error);
  }
}


// ---- subgraphs (If, Loop): values read from the outer scope, and broken nestings ----

void add_node(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> in, std::string out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (auto& i : in) n->add_input(i);
  n->add_output(out);
}
void add_value(google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto>* list, const std::string& name, int type) {
  auto* v = list->Add();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
}

// y = If(c, then: x + w, else: x - w), w an initializer of the outer graph.
::onnx::ModelProto if_model() {
  ::onnx::ModelProto m = add_model();
  auto* g = m.mutable_graph();
  g->clear_node();
  add_value(g->mutable_input(), "c", ::onnx::TensorProto::BOOL);
  auto* n = g->add_node();
  n->set_op_type("If");
  n->add_input("c");
  n->add_output("y");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(::onnx::AttributeProto::GRAPH);
    auto* sub = a->mutable_g();
    add_node(sub, branch[0] == 't' ? "Add" : "Sub", {"x", "w"}, "r");
    add_value(sub->mutable_output(), "r", ::onnx::TensorProto::FLOAT);
  }
  return m;
}

TEST_F(OnnxUntrusted, IfReadsTheOuterScopeAndFollowsItsConditionEveryCall) {
  onnx::Model model = onnx::load_bytes(bytes_of(if_model()), "");
  const Tensor x = tensor(std::vector<float>{10, 20, 30, 40}, {4});
  // Several calls of one input signature: the recorded program must not freeze the first branch.
  for (int call = 0; call < 4; ++call) {
    const bool c = call % 2 == 0;
    Tensor y = model.run({{"x", x}, {"c", full({}, c ? 1.0 : 0.0, DType::Bool)}}).at("y");
    EXPECT_EQ(y.to_vector<float>(), c ? (std::vector<float>{11, 22, 33, 44}) : (std::vector<float>{9, 18, 27, 36}))
        << "call " << call;
  }
}

TEST_F(OnnxUntrusted, LoopCarriesValuesAndStacksScanOutputs) {
  // Loop(M = 5): s <- s + i * x (x from the outer scope), scan output i * x.
  ::onnx::ModelProto m = add_model();
  auto* g = m.mutable_graph();
  g->clear_node();
  g->clear_output();
  auto* trips = g->add_initializer();
  trips->set_name("M");
  trips->set_data_type(::onnx::TensorProto::INT64);
  trips->add_int64_data(5);
  auto* n = g->add_node();
  n->set_op_type("Loop");
  n->add_input("M");
  n->add_input("");
  n->add_input("w");  // s starts as w
  n->add_output("s");
  n->add_output("scan");
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  add_value(body->mutable_input(), "i", ::onnx::TensorProto::INT64);
  add_value(body->mutable_input(), "cond_in", ::onnx::TensorProto::BOOL);
  add_value(body->mutable_input(), "s_in", ::onnx::TensorProto::FLOAT);
  add_node(body, "Cast", {"i"}, "fi");
  auto* to = body->mutable_node(0)->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto::INT);
  to->set_i(::onnx::TensorProto::FLOAT);
  add_node(body, "Mul", {"fi", "x"}, "ix");
  add_node(body, "Add", {"s_in", "ix"}, "s_out");
  add_node(body, "Identity", {"cond_in"}, "cond_out");
  for (const char* o : {"cond_out", "s_out", "ix"}) add_value(body->mutable_output(), o, ::onnx::TensorProto::FLOAT);
  g->add_output()->set_name("s");
  g->add_output()->set_name("scan");
  onnx::Model model = onnx::load_bytes(bytes_of(m), "");
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 2, 3, 4};
  auto out = model.run({{"x", tensor(x, {4})}});
  std::vector<float> s = w, scan;
  for (int i = 0; i < 5; ++i)
    for (size_t k = 0; k < 4; ++k) {
      s[k] += static_cast<float>(i) * x[k];
      scan.push_back(static_cast<float>(i) * x[k]);
    }
  EXPECT_EQ(out.at("s").to_vector<float>(), s);
  EXPECT_EQ(out.at("scan").shape(), (Shape{5, 4}));
  EXPECT_EQ(out.at("scan").to_vector<float>(), scan);
}

TEST_F(OnnxUntrusted, BrokenSubgraphsAreErrors) {
  {  // a branch reading a name defined nowhere
    ::onnx::ModelProto m = if_model();
    m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)->set_input(1, "ghost");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // a branch output never computed
    ::onnx::ModelProto m = if_model();
    m.mutable_graph()->mutable_node(0)->mutable_attribute(1)->mutable_g()->mutable_output(0)->set_name("nothing");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // Ifs nested deeper than the cap
    ::onnx::ModelProto m = if_model();
    ::onnx::GraphProto* g = m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
    for (int depth = 0; depth < 20; ++depth) {
      g->clear_node();
      auto* n = g->add_node();
      n->set_op_type("If");
      n->add_input("c");
      n->add_output("r");
      auto* a = n->add_attribute();
      a->set_name("then_branch");
      a->set_type(::onnx::AttributeProto::GRAPH);
      g = a->mutable_g();
      add_value(g->mutable_output(), "r", ::onnx::TensorProto::FLOAT);
    }
    add_node(g, "Add", {"x", "w"}, "r");
    EXPECT_THROW(onnx::load_bytes(bytes_of(m), ""), Error);
  }
  {  // a branch giving fewer outputs than the node has: an error when it runs
    ::onnx::ModelProto m = if_model();
    m.mutable_graph()->mutable_node(0)->add_output("y2");
    onnx::Model model = onnx::load_bytes(bytes_of(m), "");
    EXPECT_THROW(model.run({{"x", zeros({4})}, {"c", full({}, 1.0, DType::Bool)}}), Error);
  }
}

// DFT with a dft_length that pads or truncates the signal, one- and two-sided, against the sum
// written out in f64.
TEST_F(OnnxUntrusted, DftLengthPadsOrTruncatesAsTheDirectSum) {
  const int64_t n = 8;
  std::vector<float> x(static_cast<size_t>(2 * n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) + 0.1 * static_cast<double>(i));
  for (int64_t L : {5, 8, 12})
    for (int onesided : {0, 1}) {
      ::onnx::ModelProto m = add_model();
      auto* g = m.mutable_graph();
      g->clear_node();
      g->clear_initializer();
      auto* len = g->add_initializer();
      len->set_name("L");
      len->set_data_type(::onnx::TensorProto::INT64);
      len->add_int64_data(L);
      auto* node = g->add_node();
      node->set_op_type("DFT");
      node->add_input("x");
      node->add_input("L");
      node->add_output("y");
      auto* a = node->add_attribute();
      a->set_name("onesided");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(onesided);
      onnx::Model model = onnx::load_bytes(bytes_of(m), "");
      // Two signals [2, n, 1], the transform along axis 1 (the default).
      Tensor y = model.run({{"x", tensor(x, {2, n, 1})}}).at("y");
      const int64_t bins = onesided ? L / 2 + 1 : L;
      ASSERT_EQ(y.shape(), (Shape{2, bins, 2})) << "L " << L;
      const std::vector<float> got = y.to_vector<float>();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t k = 0; k < bins; ++k) {
          double re = 0, im = 0;
          for (int64_t j = 0; j < std::min(n, L); ++j) {
            const double v = x[static_cast<size_t>(b * n + j)], th = 2 * M_PI * static_cast<double>(k * j) / static_cast<double>(L);
            re += v * std::cos(th);
            im -= v * std::sin(th);
          }
          const size_t at = static_cast<size_t>((b * bins + k) * 2);
          EXPECT_NEAR(got[at], re, 1e-4) << "L " << L << " bin " << k;
          EXPECT_NEAR(got[at + 1], im, 1e-4) << "L " << L << " bin " << k;
        }
    }
}

}  // namespace
}  // namespace alk
#endif
