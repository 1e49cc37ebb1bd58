// What the ONNX node tests (libonnx-testdata 1.12) cover thinly, in small models built with the
// protobuf classes: the sequence ops they lack (SplitToSequence, SequenceErase, SequenceAt,
// ConcatFromSequence), sequence values through Model::run_values and their errors, Einsum's
// ellipsis and diagonals, 3-D pooling and transposed convolution, TfIdfVectorizer's weights,
// bicubic GridSample's padding, RoiAlign's adaptive grids, scatter reductions over duplicates,
// MaxUnpool of overlapping windows, and the quantized ops' exactness where it is hardest: ties
// rounding to even, saturation, and an integer product long enough (K = 300) to leave f32's exact
// range, on every device.
#ifdef ALK_HAVE_ONNX
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "alk/alk.h"
#include "alk/onnx.h"

namespace alk {
namespace {

struct Builder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;
  Builder() : g(m.mutable_graph()) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
  }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return n;
  }
  static void int_attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void tensor_input(const std::string& name, int type) {
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
  void ints(const std::string& name, std::vector<int64_t> values, bool scalar = false) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  void output(const std::string& name, bool sequence = false) {
    auto* v = g->add_output();
    v->set_name(name);
    if (sequence) v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(1);
    else v->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  }
  onnx::Model load() const {
    std::string bytes;
    m.SerializeToString(&bytes);
    return onnx::load_bytes(bytes, "");
  }
};

std::vector<float> iota_f(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(OnnxValues, SplitEraseAtConcatFromSequence) {
  // x [6, 2] split into rows [0], [1, 2], [3, 4, 5]; the middle piece erased (position -2).
  Builder b;
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.ints("sizes", {1, 2, 3});
  b.ints("minus_two", {-2}, true);
  b.ints("last", {-1}, true);
  b.node("SplitToSequence", {"x", "sizes"}, {"pieces"});
  b.node("SequenceErase", {"pieces", "minus_two"}, {"kept"});
  b.node("SequenceLength", {"kept"}, {"n"});
  b.node("SequenceAt", {"kept", "last"}, {"tail"});
  b.node("ConcatFromSequence", {"kept"}, {"joined"});
  // Rows one by one (keepdims 0: [2] each), stacked along a new axis 1: x transposed.
  auto* rows = b.node("SplitToSequence", {"x"}, {"rows"});
  Builder::int_attr(rows, "keepdims", 0);
  auto* stacked = b.node("ConcatFromSequence", {"rows"}, {"transposed"});
  Builder::int_attr(stacked, "new_axis", 1);
  Builder::int_attr(stacked, "axis", 1);
  for (const char* o : {"n", "tail", "joined", "transposed"}) b.output(o);
  b.output("kept", true);
  onnx::Model model = b.load();
  EXPECT_TRUE(model.info().unsupported.empty());
  const std::vector<float> x = iota_f(12);
  auto out = model.run_values({{"x", onnx::Value::of(tensor(x, {6, 2}))}});
  EXPECT_EQ(out.at("n").tensor.to_vector<int64_t>(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.at("tail").tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(out.at("tail").tensor.to_vector<float>(), (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(out.at("joined").tensor.to_vector<float>(), (std::vector<float>{0, 1, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(out.at("transposed").tensor.shape(), (Shape{2, 6}));
  EXPECT_EQ(out.at("transposed").tensor.to_vector<float>(), (std::vector<float>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
  ASSERT_EQ(out.at("kept").kind, onnx::Value::Kind::Sequence);
  ASSERT_EQ(out.at("kept").items.size(), 2u);
  EXPECT_EQ(out.at("kept").items[0].shape(), (Shape{1, 2}));
  // A sequence output through the tensor-only entry point is an error that names the other one.
  try {
    model.run({{"x", tensor(x, {6, 2})}});
    ADD_FAILURE() << "run() gave a sequence output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run_values"), std::string::npos) << e.what();
  }
}

TEST(OnnxValues, BadPositionsAndEmptyOptionalsAreErrors) {
  {  // SequenceAt past the end
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    b.ints("three", {3}, true);
    b.node("SequenceConstruct", {"x", "x"}, {"s"});
    b.node("SequenceAt", {"s", "three"}, {"y"});
    b.output("y");
    EXPECT_THROW(b.load().run({{"x", zeros({2})}}), Error);
  }
  {  // a tensor where a sequence is expected
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    b.node("SequenceLength", {"x"}, {"y"});
    b.output("y");
    EXPECT_THROW(b.load().run({{"x", zeros({2})}}), Error);
  }
  {  // the element of an empty optional
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    auto* opt = b.node("Optional", {}, {"none"});
    auto* type = opt->add_attribute();
    type->set_name("type");
    type->set_type(::onnx::AttributeProto::TYPE_PROTO);
    type->mutable_tp()->mutable_tensor_type()->set_elem_type(1);
    b.node("OptionalHasElement", {"none"}, {"has"});
    b.node("OptionalGetElement", {"none"}, {"y"});
    b.output("y");
    EXPECT_THROW(b.load().run({{"x", zeros({2})}}), Error);
  }
}

TEST(OnnxValues, EinsumEllipsisAndDiagonals) {
  auto einsum = [](const std::string& equation, const std::vector<Tensor>& xs) {
    Builder b;
    std::vector<std::string> names;
    for (size_t k = 0; k < xs.size(); ++k) {
      names.push_back("x" + std::to_string(k));
      b.tensor_input(names.back(), ::onnx::TensorProto::FLOAT);
    }
    auto* n = b.node("Einsum", names, {"y"});
    auto* a = n->add_attribute();
    a->set_name("equation");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(equation);
    b.output("y");
    std::map<std::string, Tensor> in;
    for (size_t k = 0; k < xs.size(); ++k) in[names[k]] = xs[k];
    return b.load().run(in).at("y");
  };
  const Tensor a = tensor(iota_f(24), {2, 3, 4}), m = tensor(iota_f(20), {4, 5}), sq = tensor(iota_f(9), {3, 3});
  // Implicit output with an ellipsis: the broadcast dims, then i and k: a batched product.
  Tensor y = einsum("...ij,...jk", {a, m});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(y.to_vector<float>(), matmul(a, m).to_vector<float>());
  EXPECT_EQ(einsum("ii->i", {sq}).to_vector<float>(), (std::vector<float>{0, 4, 8}));
  EXPECT_EQ(einsum("ii", {sq}).to_vector<float>(), (std::vector<float>{12}));  // the trace
  // A diagonal under an ellipsis, and the ellipsis standing for no dims.
  EXPECT_EQ(einsum("...ii->...i", {tensor(iota_f(18), {2, 3, 3})}).to_vector<float>(),
            (std::vector<float>{0, 4, 8, 9, 13, 17}));
  EXPECT_EQ(einsum("...ij->...ji", {sq}).to_vector<float>(), sq.t().contiguous().to_vector<float>());
  EXPECT_THROW(einsum("...iii->...i", {tensor(iota_f(6), {2, 3})}), Error);  // more letters than dims
}

// 3-D pooling (two 2-D poolings in the importer) against the windows written out: pads,
// strides, a dilation, ceil_mode, and averages that exclude the pads.
TEST(OnnxValues, Pool3dMatchesTheWindowsWrittenOut) {
  const Shape in{1, 2, 4, 5, 6};
  const std::vector<int64_t> k = {2, 3, 2}, st = {2, 1, 2}, dil = {1, 2, 1}, pb = {1, 0, 1}, pe = {0, 1, 1};
  std::vector<float> x(static_cast<size_t>(2 * 4 * 5 * 6));
  std::mt19937 rng(3);
  for (auto& v : x) v = static_cast<float>(rng() % 1000) / 100.f - 5.f;
  std::vector<int64_t> out(3);
  for (size_t a = 0; a < 3; ++a) {  // ceil_mode: the last window may start in the end pads, not past them
    const int64_t span = in[2 + a] + pb[a] + pe[a], eff = (k[a] - 1) * dil[a] + 1;
    out[a] = (span - eff + st[a] - 1) / st[a] + 1;
    if ((out[a] - 1) * st[a] >= in[2 + a] + pb[a]) --out[a];
  }
  for (bool is_max : {true, false}) {
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    auto* n = b.node(is_max ? "MaxPool" : "AveragePool", {"x"}, {"y"});
    for (auto [name, v] : {std::pair{"kernel_shape", k}, {"strides", st}, {"dilations", dil}}) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::INTS);
      for (int64_t e : v) a->add_ints(e);
    }
    auto* pads = n->add_attribute();
    pads->set_name("pads");
    pads->set_type(::onnx::AttributeProto::INTS);
    for (int64_t e : pb) pads->add_ints(e);
    for (int64_t e : pe) pads->add_ints(e);
    Builder::int_attr(n, "ceil_mode", 1);
    b.output("y");
    b.m.mutable_opset_import(0)->set_version(19);  // dilations for AveragePool
    const Tensor y = b.load().run({{"x", tensor(x, in)}}).at("y");
    ASSERT_EQ(y.shape(), (Shape{1, 2, out[0], out[1], out[2]})) << (is_max ? "max" : "average");
    const std::vector<float> got = y.to_vector<float>();
    size_t at = 0;
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2, ++at) {
            double best = -1e30, total = 0;
            int count = 0;
            for (int64_t k0 = 0; k0 < k[0]; ++k0)
              for (int64_t k1 = 0; k1 < k[1]; ++k1)
                for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                  const int64_t i0 = o0 * st[0] + k0 * dil[0] - pb[0], i1 = o1 * st[1] + k1 * dil[1] - pb[1],
                                i2 = o2 * st[2] + k2 * dil[2] - pb[2];
                  if (i0 < 0 || i0 >= in[2] || i1 < 0 || i1 >= in[3] || i2 < 0 || i2 >= in[4]) continue;
                  const double v = x[static_cast<size_t>(((ch * in[2] + i0) * in[3] + i1) * in[4] + i2)];
                  best = std::max(best, v);
                  total += v;
                  ++count;
                }
            const double want = is_max ? best : total / count;
            EXPECT_NEAR(got[at], want, 1e-5) << (is_max ? "max" : "average") << " at " << o0 << "," << o1 << "," << o2;
          }
  }
}

// 3-D ConvTranspose (a sum of 2-D ones over depth taps in the importer) against the sum
// written out: strides, a dilation, pads and output_padding on every axis.
TEST(OnnxValues, ConvTranspose3dMatchesTheSumWrittenOut) {
  const int64_t N = 1, C = 2, M = 3;
  const std::vector<int64_t> in = {3, 2, 3}, k = {2, 3, 2}, st = {2, 1, 2}, dil = {1, 2, 1}, pb = {1, 0, 0},
                             pe = {0, 1, 1}, op = {1, 0, 1};
  std::mt19937 rng(5);
  auto draw = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& e : v) e = static_cast<float>(rng() % 200) / 50.f - 2.f;
    return v;
  };
  const std::vector<float> x = draw(static_cast<size_t>(N * C * in[0] * in[1] * in[2]));
  const std::vector<float> w = draw(static_cast<size_t>(C * M * k[0] * k[1] * k[2]));
  std::vector<int64_t> out(3);
  for (size_t a = 0; a < 3; ++a) out[a] = (in[a] - 1) * st[a] + (k[a] - 1) * dil[a] + 1 + op[a] - pb[a] - pe[a];
  std::vector<double> want(static_cast<size_t>(M * out[0] * out[1] * out[2]), 0.0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t d = 0; d < in[0]; ++d)
        for (int64_t h = 0; h < in[1]; ++h)
          for (int64_t ww = 0; ww < in[2]; ++ww)
            for (int64_t a = 0; a < k[0]; ++a)
              for (int64_t b = 0; b < k[1]; ++b)
                for (int64_t e = 0; e < k[2]; ++e) {
                  const int64_t od = d * st[0] + a * dil[0] - pb[0], oh = h * st[1] + b * dil[1] - pb[1],
                                ow = ww * st[2] + e * dil[2] - pb[2];
                  if (od < 0 || od >= out[0] || oh < 0 || oh >= out[1] || ow < 0 || ow >= out[2]) continue;
                  want[static_cast<size_t>(((m * out[0] + od) * out[1] + oh) * out[2] + ow)] +=
                      x[static_cast<size_t>(((c * in[0] + d) * in[1] + h) * in[2] + ww)] *
                      w[static_cast<size_t>((((c * M + m) * k[0] + a) * k[1] + b) * k[2] + e)];
                }
  Builder b;
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.tensor_input("w", ::onnx::TensorProto::FLOAT);
  auto* n = b.node("ConvTranspose", {"x", "w"}, {"y"});
  std::vector<int64_t> pads = pb;
  pads.insert(pads.end(), pe.begin(), pe.end());
  for (auto [name, v] : {std::pair{"strides", st}, {"dilations", dil}, {"pads", pads}, {"output_padding", op}}) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t e : v) a->add_ints(e);
  }
  b.output("y");
  const Tensor y = b.load().run({{"x", tensor(x, {N, C, in[0], in[1], in[2]})}, {"w", tensor(w, {C, M, k[0], k[1], k[2]})}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{N, M, out[0], out[1], out[2]}));
  const std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

// MaxPool's indices into MaxUnpool where the windows overlap: every window of this image picks
// its center, which must come back once (not summed four times), here and with an output_shape
// that extends the unpooled 3 x 3 with zeros at the end.
TEST(OnnxValues, MaxUnpoolOfOverlappingWindows) {
  for (bool with_shape : {false, true}) {
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    auto ints = [](::onnx::NodeProto* n, const char* name, std::vector<int64_t> v) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::INTS);
      for (int64_t e : v) a->add_ints(e);
    };
    ints(b.node("MaxPool", {"x"}, {"pooled", "where"}), "kernel_shape", {2, 2});
    std::vector<std::string> in = {"pooled", "where"};
    if (with_shape) {
      b.ints("shape", {1, 1, 4, 5});
      in.push_back("shape");
    }
    ints(b.node("MaxUnpool", in, {"y"}), "kernel_shape", {2, 2});
    b.output("y");
    const Tensor y = b.load().run({{"x", tensor(std::vector<float>{1, 2, 3, 4, 9, 5, 6, 7, 8}, {1, 1, 3, 3})}}).at("y");
    std::vector<float> want(with_shape ? 20 : 9, 0.f);
    want[with_shape ? 6 : 4] = 9;  // row 1, column 1
    EXPECT_EQ(y.shape(), with_shape ? (Shape{1, 1, 4, 5}) : (Shape{1, 1, 3, 3}));
    EXPECT_EQ(y.to_vector<float>(), want) << (with_shape ? "with" : "without") << " output_shape";
  }
}

// TfIdfVectorizer's weighted modes (the node tests have TF only).
TEST(OnnxValues, TfIdfWeightsCountsOrPresence) {
  for (const std::string mode : {"IDF", "TFIDF"}) {
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::INT64);
    auto* n = b.node("TfIdfVectorizer", {"x"}, {"y"});
    auto ints = [&](const char* name, std::vector<int64_t> v) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::INTS);
      for (int64_t e : v) a->add_ints(e);
    };
    ints("ngram_counts", {0, 2});
    ints("ngram_indexes", {1, 0, 2});  // unigrams 7 -> column 1, 9 -> column 0; bigram (7, 9) -> 2
    ints("pool_int64s", {7, 9, 7, 9});
    Builder::int_attr(n, "min_gram_length", 1);
    Builder::int_attr(n, "max_gram_length", 2);
    auto* m = n->add_attribute();
    m->set_name("mode");
    m->set_type(::onnx::AttributeProto::STRING);
    m->set_s(mode);
    auto* w = n->add_attribute();
    w->set_name("weights");
    w->set_type(::onnx::AttributeProto::FLOATS);
    for (float v : {0.5f, 2.f, 3.f}) w->add_floats(v);
    b.output("y");
    // Row 0: 7 twice, 9 once, (7, 9) once; row 1: 9 twice, no 7.
    const Tensor x = tensor(std::vector<int64_t>{7, 9, 7, 1, 9, 9, 1, 1}, {2, 4});
    const Tensor y = b.load().run({{"x", x}}).at("y");
    ASSERT_EQ(y.shape(), (Shape{2, 3}));
    // Weights go by output column (as onnxruntime reads them): column 0 (token 9) 0.5,
    // column 1 (token 7) 2, column 2 (the bigram) 3.
    const std::vector<float> want = mode == "IDF" ? std::vector<float>{0.5f, 2, 3, 0.5f, 0, 0}
                                                  : std::vector<float>{0.5f, 4, 3, 1, 0, 0};
    EXPECT_EQ(y.to_vector<float>(), want) << mode;
  }
}

// Bicubic GridSample pads each tap: on a constant image, border and reflection padding give the
// constant everywhere (the 16 weights sum to 1), zeros padding less near the edges; away from
// the edges the three agree.
TEST(OnnxValues, BicubicGridSamplePadsEachTap) {
  auto sample = [](const std::string& padding, const Tensor& x, const Tensor& grid) {
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    b.tensor_input("grid", ::onnx::TensorProto::FLOAT);
    auto* n = b.node("GridSample", {"x", "grid"}, {"y"});
    for (auto [name, value] : {std::pair<std::string, std::string>{"mode", "bicubic"}, {"padding_mode", padding}}) {
      auto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s(value);
    }
    b.output("y");
    b.m.mutable_opset_import(0)->set_version(16);
    return b.load().run({{"x", x}, {"grid", grid}}).at("y").to_vector<float>();
  };
  // Points near the corners and edges, then two in the middle of a 6 x 7 image.
  const Tensor edges = tensor(std::vector<float>{-1.1f, -0.95f, 0.97f, 1.02f, -0.2f, 0.99f, 1.0f, -1.0f}, {1, 1, 4, 2});
  const Tensor middle = tensor(std::vector<float>{-0.1f, 0.15f, 0.2f, -0.3f}, {1, 1, 2, 2});
  const Tensor flat = full({1, 1, 6, 7}, 3.0, DType::F32);
  for (const std::string padding : {"border", "reflection"})
    for (float v : sample(padding, flat, edges)) EXPECT_NEAR(v, 3.0f, 1e-5) << padding;
  for (float v : sample("zeros", flat, edges)) EXPECT_LT(v, 2.9f);
  const Tensor ramp = tensor(iota_f(42), {1, 1, 6, 7});
  const std::vector<float> zeros_pad = sample("zeros", ramp, middle);
  for (const std::string padding : {"border", "reflection"}) {
    const std::vector<float> got = sample(padding, ramp, middle);
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], zeros_pad[k], 1e-4) << padding;
  }
}

// RoiAlign with adaptive sampling (sampling_ratio 0: rois of different sizes get different
// grids) over a batch of two constant images: each bin averages its roi's own image, so it is
// that image's constant wherever the samples lie inside it.
TEST(OnnxValues, RoiAlignAdaptiveGridsPickTheirImage) {
  Builder b;
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.tensor_input("rois", ::onnx::TensorProto::FLOAT);
  b.tensor_input("batch", ::onnx::TensorProto::INT64);
  auto* n = b.node("RoiAlign", {"x", "rois", "batch"}, {"y"});
  Builder::int_attr(n, "output_height", 2);
  Builder::int_attr(n, "output_width", 3);
  b.output("y");
  b.m.mutable_opset_import(0)->set_version(16);
  std::vector<float> x(2 * 1 * 10 * 10, 1.f);
  std::fill(x.begin() + 100, x.end(), 2.f);
  const std::vector<float> rois = {1, 1, 3, 2, 0.5f, 2, 9, 8.5f, 2, 2, 8, 8};  // 2x1, 8.5x6.5, 6x6 pixels
  const Tensor y = b.load().run({{"x", tensor(x, {2, 1, 10, 10})}, {"rois", tensor(rois, {3, 4})},
                                 {"batch", tensor(std::vector<int64_t>{1, 0, 1}, {3})}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{3, 1, 2, 3}));
  const std::vector<float> got = y.to_vector<float>();
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], k / 6 == 1 ? 1.f : 2.f, 1e-6) << k;
}

// ScatterElements' reductions other than add over duplicate indices (opset 18), each update
// combined in turn.
TEST(OnnxValues, ScatterReductionsCombineDuplicates) {
  for (const std::string reduction : {"mul", "max", "min"}) {
    Builder b;
    b.tensor_input("data", ::onnx::TensorProto::FLOAT);
    b.tensor_input("updates", ::onnx::TensorProto::FLOAT);
    b.ints("indices", {1, 1, 3, 1});
    auto* n = b.node("ScatterElements", {"data", "indices", "updates"}, {"y"});
    auto* a = n->add_attribute();
    a->set_name("reduction");
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(reduction);
    b.output("y");
    b.m.mutable_opset_import(0)->set_version(18);
    const Tensor y = b.load().run({{"data", tensor(std::vector<float>{1, 2, 3, 4}, {4})},
                                   {"updates", tensor(std::vector<float>{2, 3, 5, 0.5f}, {4})}}).at("y");
    const std::vector<float> want = reduction == "mul"   ? std::vector<float>{1, 6, 3, 20}
                                    : reduction == "max" ? std::vector<float>{1, 3, 3, 5}
                                                         : std::vector<float>{1, 0.5f, 3, 4};
    EXPECT_EQ(y.to_vector<float>(), want) << reduction;
  }
}

std::vector<Device*> devices() {
  std::vector<Device*> out;
  for (Device* d : available_devices())
    if (d->info().kind == "cpu" || d->info().kind == "vulkan") out.push_back(d);
  return out;
}

TEST(OnnxValues, QuantizeLinearRoundsTiesToEvenAndSaturates) {
  Builder b;
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.tensor_input("scale", ::onnx::TensorProto::FLOAT);
  b.tensor_input("zp", ::onnx::TensorProto::UINT8);
  b.node("QuantizeLinear", {"x", "scale", "zp"}, {"y"});
  b.output("y");
  onnx::Model model = b.load();
  const std::vector<float> x = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300.f, -300.f, 3.49f};
  for (Device* d : devices()) {
    for (uint8_t zp : {uint8_t{0}, uint8_t{128}}) {
      auto out = model.run({{"x", tensor(x, {8}).to(*d)},
                            {"scale", full({}, 1.0, DType::F32).to(*d)},
                            {"zp", tensor(std::vector<uint8_t>{zp}, {}).to(*d)}});
      const std::vector<int64_t> want = zp == 0 ? std::vector<int64_t>{0, 2, 2, 0, 0, 255, 0, 3}
                                                : std::vector<int64_t>{128, 130, 130, 128, 126, 255, 0, 131};
      EXPECT_EQ(out.at("y").dtype(), DType::U8);
      EXPECT_EQ(out.at("y").to_vector<int64_t>(), want) << d->name() << " zero point " << int{zp};
    }
  }
}

TEST(OnnxValues, DynamicQuantizeLinearOfZerosIsZeros) {
  Builder b;
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.node("DynamicQuantizeLinear", {"x"}, {"y", "scale", "zp"});
  for (const char* o : {"y", "scale", "zp"}) b.output(o);
  auto out = b.load().run({{"x", zeros({5})}});
  EXPECT_EQ(out.at("y").to_vector<int64_t>(), std::vector<int64_t>(5, 0));
  EXPECT_EQ(out.at("scale").to_vector<float>(), (std::vector<float>{0}));
  EXPECT_EQ(out.at("zp").to_vector<int64_t>(), (std::vector<int64_t>{0}));
}

// com.microsoft's QLinearMul and QLinearAdd on a [4, 6] A and a [6] B broadcast over its rows.
// QLinearMul's expected values are onnxruntime-node 1.30's (bench/onnx/quant_check, seed 1);
// QLinearAdd's are the spec's formula in f64 here: onnxruntime's x86 kernel rounds the scale
// ratios to fixed point and differs from it by 1 in about 2% of elements.
TEST(OnnxValues, QLinearMulMatchesOnnxruntimeAndQLinearAddTheFormula) {
  auto run = [](const std::string& op, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, double cs) {
    Builder g;
    g.m.add_opset_import()->set_domain("com.microsoft");
    g.m.mutable_opset_import(1)->set_version(1);
    for (const char* name : {"a", "b", "az", "bz", "cz"}) g.tensor_input(name, ::onnx::TensorProto::UINT8);
    for (const char* name : {"as", "bs", "cs"}) g.tensor_input(name, ::onnx::TensorProto::FLOAT);
    g.node(op, {"a", "as", "az", "b", "bs", "bz", "cs", "cz"}, {"c"})->set_domain("com.microsoft");
    g.output("c");
    auto u8 = [](std::vector<uint8_t> v, Shape s) { return tensor(v, s); };
    return g.load()
        .run({{"a", u8(a, {4, 6})}, {"b", u8(b, {6})}, {"az", u8({120}, {})}, {"bz", u8({9}, {})}, {"cz", u8({127}, {})},
              {"as", full({}, 0.031)}, {"bs", full({}, 0.017)}, {"cs", full({}, cs)}})
        .at("c")
        .to_vector<int64_t>();
  };
  const std::vector<uint8_t> a = {140, 138, 126, 210, 75, 66, 131, 99, 208, 29, 76, 211, 138, 143, 245, 156, 136, 251,
                                  109, 255, 188, 240, 123, 173};
  const std::vector<uint8_t> b = {90, 92, 230, 76, 29, 166};
  EXPECT_EQ(run("QLinearMul", a, b, 0.02),
            (std::vector<int64_t>{170, 166, 162, 255, 103, 0, 150, 81, 255, 0, 104, 255, 165, 177, 255, 191, 135, 255,
                                  104, 255, 255, 255, 129, 255}));
  const std::vector<int64_t> sum = run("QLinearAdd", a, b, 0.05);
  for (size_t k = 0; k < a.size(); ++k) {
    const double v = (0.031 * (a[k] - 120.0) + 0.017 * (b[k % 6] - 9.0)) / 0.05;
    EXPECT_EQ(sum[k], std::clamp<int64_t>(static_cast<int64_t>(std::nearbyint(v)) + 127, 0, 255)) << k;
  }
}

// Blocked quantization (opset 21): each scale covers block_size elements along the axis.
TEST(OnnxValues, BlockedQuantizeAndDequantize) {
  Builder b;
  b.m.mutable_opset_import(0)->set_version(21);
  b.tensor_input("x", ::onnx::TensorProto::FLOAT);
  b.tensor_input("scale", ::onnx::TensorProto::FLOAT);
  for (auto [op, in, out] : {std::tuple{"QuantizeLinear", "x", "q"}, {"DequantizeLinear", "q", "back"}}) {
    auto* n = b.node(op, {in, "scale"}, {out});
    Builder::int_attr(n, "axis", 1);
    Builder::int_attr(n, "block_size", 2);
  }
  b.output("q");
  b.output("back");
  auto out = b.load().run({{"x", tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})},
                           {"scale", tensor(std::vector<float>{1, 2, 0.5f, 4}, {2, 2})}});
  // x / scale: 1 2 1.5 2 | 10 12 1.75 2, rounded half to even.
  EXPECT_EQ(out.at("q").to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 2, 2, 10, 12, 2, 2}));
  EXPECT_EQ(out.at("back").to_vector<float>(), (std::vector<float>{1, 2, 4, 4, 5, 6, 8, 8}));
}

TEST(OnnxValues, MalformedQuantizedNodesAreErrors) {
  {  // a per-axis scale whose length is not the axis's
    Builder b;
    b.tensor_input("x", ::onnx::TensorProto::FLOAT);
    b.tensor_input("scale", ::onnx::TensorProto::FLOAT);
    b.node("QuantizeLinear", {"x", "scale"}, {"y"});
    b.output("y");
    EXPECT_THROW(b.load().run({{"x", zeros({2, 4})}, {"scale", full({3}, 1.0)}}), Error);
  }
  {  // MatMulInteger on floats
    Builder b;
    b.tensor_input("a", ::onnx::TensorProto::FLOAT);
    b.tensor_input("b", ::onnx::TensorProto::FLOAT);
    b.node("MatMulInteger", {"a", "b"}, {"y"});
    b.output("y");
    EXPECT_THROW(b.load().run({{"a", zeros({2, 2})}, {"b", zeros({2, 2})}}), Error);
  }
  {  // a zero point per row of a 1-D A
    Builder b;
    b.tensor_input("a", ::onnx::TensorProto::UINT8);
    b.tensor_input("b", ::onnx::TensorProto::UINT8);
    b.tensor_input("azp", ::onnx::TensorProto::UINT8);
    b.node("MatMulInteger", {"a", "b", "azp"}, {"y"});
    b.output("y");
    const Tensor u8 = tensor(std::vector<uint8_t>{1, 2, 3}, {3});
    EXPECT_THROW(b.load().run({{"a", u8}, {"b", tensor(std::vector<uint8_t>(6, 1), {3, 2})}, {"azp", u8}}), Error);
  }
}

TEST(OnnxValues, MatMulIntegerIsExactPastFloat32sRange) {
  // K = 300: sums reach 300 * 255^2 (~19.5M), past 2^24, so f32 accumulation would round.
  const int64_t M = 3, K = 300, N = 4;
  std::mt19937 rng(7);
  std::vector<uint8_t> a(static_cast<size_t>(M * K)), bm(static_cast<size_t>(K * N));
  // a near 255 and b near 0 with b's zero point 255: products near -65025, sums near -19.5M,
  // where f32 holds only even integers.
  for (auto& v : a) v = static_cast<uint8_t>(250 + rng() % 6);
  for (auto& v : bm) v = static_cast<uint8_t>(rng() % 4);
  const int64_t azp = 0, bzp = 255;
  std::vector<int64_t> want(static_cast<size_t>(M * N), 0);
  int odd = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k)
        want[static_cast<size_t>(i * N + j)] +=
            (a[static_cast<size_t>(i * K + k)] - azp) * (bm[static_cast<size_t>(k * N + j)] - bzp);
  for (int64_t v : want) odd += v % 2 != 0;
  ASSERT_GT(odd, 0) << "no sum that f32 cannot hold";
  ASSERT_LT(want[0], -(int64_t{1} << 24));
  Builder b;
  b.tensor_input("a", ::onnx::TensorProto::UINT8);
  b.tensor_input("b", ::onnx::TensorProto::UINT8);
  b.tensor_input("bzp", ::onnx::TensorProto::UINT8);
  b.node("MatMulInteger", {"a", "b", "", "bzp"}, {"y"});
  b.output("y");
  onnx::Model model = b.load();
  for (Device* d : devices()) {
    auto out = model.run({{"a", tensor(a, {M, K}).to(*d)},
                          {"b", tensor(bm, {K, N}).to(*d)},
                          {"bzp", tensor(std::vector<uint8_t>{static_cast<uint8_t>(bzp)}, {}).to(*d)}});
    EXPECT_EQ(out.at("y").dtype(), DType::I32);
    EXPECT_EQ(out.at("y").to_vector<int64_t>(), want) << d->name();
  }
}

}  // namespace
}  // namespace alk
#endif
