// Every user-facing error path raises alk::Error naming the op, the offending shapes or
// values, and the caller's file:line. Each EXPECT_ALK_ERROR sits on the same line as the
// failing call, so __LINE__ there is the line the error must report (tests/error_expect.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "error_expect.h"

namespace {

using alk::DType;
using alk::Shape;
using alk::Tensor;

std::vector<double> iota(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return v;
}

Tensor t23() { return alk::tensor(iota(6), {2, 3}); }

// ---------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------

TEST(ErrorsViews, Reshape) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.reshape({4}), "reshape", "[4]", "6");
  EXPECT_ALK_ERROR(a.reshape({-1, -1}), "reshape", "-1");
  EXPECT_ALK_ERROR(a.reshape({-1, 4}), "reshape", "[-1, 4]", "6");
  EXPECT_ALK_ERROR(a.flatten().reshape({2, 2}), "reshape", "[2, 2]", "6");
}

TEST(ErrorsViews, ViewImpossible) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.t().view({6}), "view", "[3, 2]", "[6]");
  EXPECT_ALK_ERROR(a.view({7}), "view", "[7]", "6");
}

TEST(ErrorsViews, Permute) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.permute({0}), "permute", "rank 2", "[2, 3]");
  EXPECT_ALK_ERROR(a.permute({0, 1, 2}), "permute", "rank 2");
  EXPECT_ALK_ERROR(a.permute({1, 1}), "permute", "[1, 1]", "repeated");
  EXPECT_ALK_ERROR(a.permute({0, -2}), "permute", "[0, -2]");
  EXPECT_ALK_ERROR(a.permute({0, 2}), "permute", "dim 2");
  EXPECT_ALK_ERROR(a.transpose(0, 2), "transpose", "dim 2");
  EXPECT_ALK_ERROR(alk::tensor(iota(3), {3}).t(), "t", "rank");
}

TEST(ErrorsViews, Slice) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.slice(2, 0, 1), "slice", "dim 2", "rank 2");
  EXPECT_ALK_ERROR(a.slice(-3, 0, 1), "slice", "dim -3");
  EXPECT_ALK_ERROR(a.slice(1, 0, 3, 0), "slice", "step", "0");
  EXPECT_ALK_ERROR(a.slice(1, 0, 3, -1), "slice", "step", "-1");
}

TEST(ErrorsViews, Select) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.select(1, 3), "select", "index 3", "size 3");
  EXPECT_ALK_ERROR(a.select(0, -3), "select", "index -3", "size 2");
  EXPECT_ALK_ERROR(a.select(2, 0), "select", "dim 2");
}

TEST(ErrorsViews, Expand) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.expand({2, 4}), "expand", "[2, 3]", "[2, 4]");
  EXPECT_ALK_ERROR(a.expand({3}), "expand", "[2, 3]", "[3]");
  EXPECT_ALK_ERROR(alk::broadcast_to(a, {3, 3}), "expand", "[2, 3]", "[3, 3]");
  EXPECT_ALK_ERROR(a.squeeze(2), "squeeze", "dim 2");
  EXPECT_ALK_ERROR(a.unsqueeze(4), "unsqueeze", "dim 4");
  EXPECT_ALK_ERROR(a.flatten(1, 0), "flatten", "1", "0");
  EXPECT_ALK_ERROR(a.size(2), "size", "dim 2");
}

// ---------------------------------------------------------------------------------------
// Elementwise, matmul
// ---------------------------------------------------------------------------------------

TEST(ErrorsElementwise, BroadcastMismatch) {
  Tensor a = t23(), b = alk::tensor(iota(8), {2, 4});
  EXPECT_ALK_ERROR(alk::add(a, b), "add", "[2, 3]", "[2, 4]");
  EXPECT_ALK_ERROR(a + b, "add", "[2, 3]", "[2, 4]");  // operators name the caller's line too
  EXPECT_ALK_ERROR(alk::mul(a, alk::zeros({3, 3})), "mul", "[2, 3]", "[3, 3]");
  EXPECT_ALK_ERROR(alk::where(alk::zeros({2, 3}) > 0, a, alk::zeros({5})), "where", "[5]");
  EXPECT_ALK_ERROR(a < alk::zeros({4}), "lt", "[2, 3]", "[4]");
}

// docs/dtypes.md: "The first operand is the condition and must be bool".
TEST(ErrorsElementwise, WhereConditionMustBeBool) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::where(a, a, 0.0), "where", "bool", "f64");
}

TEST(ErrorsMatmul, Shapes) {
  Tensor a = alk::zeros({2, 3}), b = alk::zeros({4, 5});
  EXPECT_ALK_ERROR(alk::matmul(a, b), "matmul", "[2, 3]", "[4, 5]");
  EXPECT_ALK_ERROR(alk::matmul(alk::zeros({3}), alk::zeros({4})), "matmul", "3", "4");
  EXPECT_ALK_ERROR(alk::matmul(alk::zeros({}), a), "matmul", "[]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::matmul(a, alk::scalar_tensor(1.0)), "matmul", "[2, 3]", "[]");
}

// The batch dims of matmul broadcast; a mismatch there is a matmul error (the user
// called matmul, not an internal "broadcast").
TEST(ErrorsMatmul, BatchMismatchNamesMatmul) {
  EXPECT_ALK_ERROR(alk::matmul(alk::zeros({2, 2, 3}), alk::zeros({3, 3, 4})), "matmul", "[2, 2, 3]", "[3, 3, 4]");
}

// ---------------------------------------------------------------------------------------
// Indexing: the kernels validate indices when the result is realized; the error names the
// line of the op that recorded the node.
// ---------------------------------------------------------------------------------------

TEST(ErrorsIndex, GatherOutOfRangeAtRealize) {
  Tensor x = t23();
  Tensor big = alk::tensor(std::vector<int64_t>{0, 3, 1, 0}, {2, 2});
  Tensor neg = alk::tensor(std::vector<int64_t>{0, -1, 1, 0}, {2, 2});
  EXPECT_ALK_ERROR(alk::gather(x, 1, big).realize(), "gather", "3", "size 3");
  EXPECT_ALK_ERROR(alk::gather(x, 1, neg).to_vector<double>(), "gather", "-1", "size 3");
  EXPECT_ALK_ERROR(alk::gather(x, 0, big).realize(), "gather", "3", "size 2");
  EXPECT_ALK_ERROR(alk::gather(x, 1, alk::tensor(std::vector<int64_t>{0}, {1})), "gather", "rank");
  EXPECT_ALK_ERROR(alk::gather(x, 1, alk::zeros({2, 2})), "gather", "f32");
}

TEST(ErrorsIndex, GatherErrorNamesTheGatherLineNotTheRealizeLine) {
  Tensor x = t23() + 0.0;  // lazy input
  Tensor bad = alk::tensor(std::vector<int32_t>{5, 0}, {1, 2});
  const unsigned gather_line = __LINE__; Tensor g = alk::gather(x, 1, bad);
  Tensor later = g * 2.0 + 1.0;  // a consumer on another line
  try {
    later.realize();
    FAIL() << "expected alk::Error";
  } catch (const alk::Error& e) {
    EXPECT_EQ(e.op(), "gather") << e.what();
    EXPECT_EQ(alk::testing::file_basename(e.file()), "test_errors.cpp") << e.what();
    EXPECT_EQ(e.line(), gather_line) << e.what();
    EXPECT_NE(std::string(e.what()).find("5"), std::string::npos) << e.what();
  }
  // realize(vector) and item() report the same place.
  try {
    alk::realize({later});
    FAIL() << "expected alk::Error";
  } catch (const alk::Error& e) {
    EXPECT_EQ(e.line(), gather_line) << e.what();
  }
}

TEST(ErrorsIndex, NothingCorruptedAfterAFailedRealize) {
  Tensor base = alk::tensor(iota(6), {2, 3});
  Tensor x = base * 2.0;  // lazy; computed in the failing schedule or not, it must stay right
  Tensor bad = alk::tensor(std::vector<int64_t>{0, 7, 1}, {1, 3});
  Tensor good = alk::tensor(std::vector<int64_t>{2, 0, 1}, {1, 3});
  Tensor g = alk::gather(x, 1, bad);
  Tensor side = x + 1.0;
  EXPECT_THROW(alk::realize({g, side}), alk::Error);
  // The inputs still read correctly.
  EXPECT_EQ(base.to_vector<double>(), iota(6));
  EXPECT_EQ(bad.to_vector<int64_t>(), (std::vector<int64_t>{0, 7, 1}));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(side.to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  // The failed tensor fails again, the same way, rather than yielding garbage.
  EXPECT_THROW(g.realize(), alk::Error);
  EXPECT_FALSE(g.is_realized());
  // A good gather over the same input works.
  EXPECT_EQ(alk::gather(x, 1, good).to_vector<double>(), (std::vector<double>{4, 0, 2}));
  EXPECT_EQ(alk::gather(base, 1, good).to_vector<double>(), (std::vector<double>{2, 0, 1}));
}

TEST(ErrorsIndex, EmbeddingIndexSelectOneHotScatterAdd) {
  Tensor w = alk::tensor(iota(8), {4, 2});
  Tensor ids = alk::tensor(std::vector<int64_t>{0, 4}, {2});
  EXPECT_ALK_ERROR(alk::embedding(alk::zeros({4}), ids), "embedding", "[4]");
  EXPECT_ALK_ERROR(alk::index_select(w, 0, ids).realize(), "index_select", "4", "size 4");
  EXPECT_ALK_ERROR(alk::index_select(w, 1, alk::tensor(std::vector<int64_t>{2}, {1})).to_vector<double>(),
                   "index_select", "2", "size 2");
  EXPECT_ALK_ERROR(alk::index_select(w, 2, ids), "index_select", "dim 2");
  EXPECT_ALK_ERROR(alk::one_hot(alk::tensor(std::vector<int64_t>{0, 3}, {2}), 3).realize(), "one_hot", "3");
  EXPECT_ALK_ERROR(alk::one_hot(alk::tensor(std::vector<int64_t>{-2}, {1}), 3).realize(), "one_hot", "-2");
  EXPECT_ALK_ERROR(alk::one_hot(ids, 0), "one_hot", "0");
  Tensor x = alk::zeros({3, 3});
  Tensor idx = alk::tensor(std::vector<int64_t>{0, 1, 2, 0}, {2, 2});
  EXPECT_ALK_ERROR(alk::scatter_add(x, 0, idx, alk::ones({2, 3})), "scatter_add", "[2, 2]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::scatter_add(x, 0, alk::tensor(std::vector<int64_t>{3, 0}, {1, 2}), alk::ones({1, 2})).realize(),
                   "scatter_add", "3");
}

// An id out of range in embedding() is reported as an embedding error (it is built on
// index_select, but the user called embedding).
TEST(ErrorsIndex, EmbeddingIdOutOfRangeNamesEmbedding) {
  Tensor w = alk::tensor(iota(8), {4, 2});
  EXPECT_ALK_ERROR(alk::embedding(w, alk::tensor(std::vector<int64_t>{0, 4}, {2})).realize(), "embedding", "4");
  EXPECT_ALK_ERROR(alk::embedding(w, alk::tensor(std::vector<int64_t>{-1}, {1})).to_vector<double>(), "embedding", "-1");
}

// ---------------------------------------------------------------------------------------
// Reductions, softmax, norms
// ---------------------------------------------------------------------------------------

TEST(ErrorsReduce, Axes) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::sum(a, {2}), "sum", "dim 2", "rank 2");
  EXPECT_ALK_ERROR(alk::sum(a, {-3}), "sum", "dim -3");
  EXPECT_ALK_ERROR(alk::mean(a, {5}), "mean", "dim 5");
  EXPECT_ALK_ERROR(alk::max(a, {0, 0}), "max", "repeated", "[0, 0]");
  EXPECT_ALK_ERROR(alk::sum(a, {1, -1}), "sum", "repeated", "[1, -1]");
  EXPECT_ALK_ERROR(alk::var(a, {0, 2}), "var", "dim 2");
  EXPECT_ALK_ERROR(alk::prod(a, {3}), "prod", "dim 3");
  EXPECT_ALK_ERROR(alk::argmax(a, 2), "argmax", "dim 2");
}

// logsumexp is built on max; a bad axis list must still be a logsumexp error.
TEST(ErrorsReduce, LogsumexpBadAxesNameLogsumexp) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::logsumexp(a, {1, 1}), "logsumexp", "repeated", "[1, 1]");
  EXPECT_ALK_ERROR(alk::logsumexp(a, {2}), "logsumexp", "dim 2");
}

TEST(ErrorsReduce, EmptyDim) {
  Tensor e = alk::zeros({2, 0});
  EXPECT_ALK_ERROR(alk::max(e, {1}), "max", "size 0", "[2, 0]");
  EXPECT_ALK_ERROR(alk::min(e), "min", "size 0", "[2, 0]");
  EXPECT_ALK_ERROR(alk::argmax(e, 1), "argmax", "empty");
  // Sums over an empty dim are fine: 0.
  EXPECT_EQ(alk::sum(e, {1}).to_vector<double>(), (std::vector<double>{0, 0}));
}

TEST(ErrorsNorm, SoftmaxLayerNorm) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::softmax(a, 2), "softmax", "dim 2");
  EXPECT_ALK_ERROR(alk::log_softmax(a, -3), "log_softmax", "dim -3");
  EXPECT_ALK_ERROR(alk::layer_norm(a, {2}), "layer_norm", "[2]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::layer_norm(a, {2, 3, 1}), "layer_norm", "[2, 3, 1]");
  EXPECT_ALK_ERROR(alk::layer_norm(a, {3}, alk::ones({2})), "layer_norm", "weight", "[2]", "[3]");
  EXPECT_ALK_ERROR(alk::layer_norm(a, {3}, alk::ones({3}), alk::zeros({3, 1})), "layer_norm", "bias", "[3, 1]");
  EXPECT_ALK_ERROR(alk::rms_norm(a, {4}), "rms_norm", "[4]", "[2, 3]");
}

// ---------------------------------------------------------------------------------------
// cat / stack / split
// ---------------------------------------------------------------------------------------

TEST(ErrorsJoin, CatStack) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::cat({a, alk::zeros({3})}), "cat", "rank 1", "rank 2");
  EXPECT_ALK_ERROR(alk::cat({a, alk::zeros({2, 4})}, 0), "cat", "[2, 4]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::cat({}), "cat", "at least one");
  EXPECT_ALK_ERROR(alk::cat({a, a}, 2), "cat", "dim 2");
  EXPECT_ALK_ERROR(alk::cat({alk::scalar_tensor(1.0), alk::scalar_tensor(2.0)}), "cat", "zero-dimensional");
  EXPECT_ALK_ERROR(alk::stack({a, alk::zeros({3, 2})}), "stack", "[3, 2]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::stack({}), "stack", "at least one");
  EXPECT_ALK_ERROR(alk::stack({a, a}, 3), "stack", "dim 3");
  EXPECT_ALK_ERROR(alk::split(a, 0), "split", "0");
  EXPECT_ALK_ERROR(alk::chunk(a, 0), "chunk", "0");
}

// ---------------------------------------------------------------------------------------
// Creation
// ---------------------------------------------------------------------------------------

TEST(ErrorsCreate, ShapesAndRanges) {
  EXPECT_ALK_ERROR(alk::tensor(std::vector<double>{1, 2, 3}, {2, 2}), "tensor", "[2, 2]", "4", "3");
  EXPECT_ALK_ERROR(alk::tensor(std::vector<int64_t>{1, 2}, {3}), "tensor", "[3]", "2");
  EXPECT_ALK_ERROR(alk::tensor(std::vector<double>{}, {-1}), "tensor", "-1");
  EXPECT_ALK_ERROR(alk::zeros({2, -3}), "full", "-3", "[2, -3]");  // zeros is full(0)
  EXPECT_ALK_ERROR(alk::ones({-1}), "full", "-1");
  EXPECT_ALK_ERROR(alk::full({-2, 2}, 1.0), "full", "-2");
  EXPECT_ALK_ERROR(alk::arange(0, 5, 0), "arange", "step=0");
  EXPECT_ALK_ERROR(alk::arange(5, 0, 1), "arange", "5", "0");
  EXPECT_ALK_ERROR(alk::linspace(0, 1, -1), "linspace", "-1");
  EXPECT_ALK_ERROR(alk::eye(-2), "eye", "-2");
  EXPECT_ALK_ERROR(alk::randint(5, 5, {2}), "randint", "[5, 5)");
  EXPECT_ALK_ERROR(alk::randint(3, 1, {2}), "randint", "3", "1");
  EXPECT_ALK_ERROR(alk::rand({2}, DType::I32), "rand", "i32");
  EXPECT_ALK_ERROR(alk::randn({-2}), "randn", "-2");
}

TEST(ErrorsCreate, Dropout) {
  Tensor x = alk::ones({4});
  EXPECT_ALK_ERROR(alk::dropout(x, 1.5), "dropout", "1.5");
  EXPECT_ALK_ERROR(alk::dropout(x, -0.1), "dropout", "-0.1");
  EXPECT_ALK_ERROR(alk::dropout_mask({4}, 2.0), "dropout", "2");
}

// PyTorch checks p even when not training: F.dropout(x, 1.5, training=False) raises.
TEST(ErrorsCreate, DropoutChecksPWhenNotTraining) {
  Tensor x = alk::ones({4});
  EXPECT_ALK_ERROR(alk::dropout(x, 1.5, false), "dropout", "1.5");
  EXPECT_ALK_ERROR(alk::dropout(x, -1.0, false), "dropout", "-1");
}

TEST(ErrorsCreate, Pad) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(alk::pad(a, {-2, -2}), "pad", "[-2, -2]", "[2, 3]");
  EXPECT_ALK_ERROR(alk::pad(a, {0, 0, -3, 0}), "pad", "[0, 0, -3, 0]");
  EXPECT_ALK_ERROR(alk::pad(a, {1}), "pad", "[1]");
  EXPECT_ALK_ERROR(alk::pad(a, {1, 1, 1, 1, 1, 1}), "pad", "[1, 1, 1, 1, 1, 1]");
  // Shrinking to exactly 0 is allowed.
  EXPECT_EQ(alk::pad(a, {-2, -1}).shape(), (Shape{2, 0}));
}

// ---------------------------------------------------------------------------------------
// Autograd and data out
// ---------------------------------------------------------------------------------------

TEST(ErrorsAutograd, RequiresGradAndBackward) {
  Tensor i = alk::tensor(std::vector<int64_t>{1, 2}, {2});
  EXPECT_ALK_ERROR(i.requires_grad_(), "requires_grad_", "i64");
  Tensor b = alk::tensor(std::vector<uint8_t>{1, 0}, {2}, DType::Bool);
  EXPECT_ALK_ERROR(b.requires_grad_(), "requires_grad_", "bool");

  Tensor w = alk::ones({2, 3});
  w.requires_grad_();
  Tensor y = w * 2.0;  // [2, 3]: not a scalar
  EXPECT_ALK_ERROR(y.backward(), "backward", "[2, 3]", "seed");
  EXPECT_ALK_ERROR(y.requires_grad_(false), "requires_grad_", "leaf");
  EXPECT_ALK_ERROR(y.backward(alk::ones({3, 2})), "backward", "[3, 2]", "[2, 3]");
  Tensor plain = alk::ones({1});
  EXPECT_ALK_ERROR(plain.backward(), "backward", "[1]", "grad");
  Tensor s = alk::sum(plain * 3.0);
  EXPECT_ALK_ERROR(s.backward(), "backward", "grad");
  {
    alk::NoGradGuard no_grad;
    Tensor z = alk::sum(w * 2.0);  // no graph recorded
    EXPECT_ALK_ERROR(z.backward(), "backward", "grad");
  }
  EXPECT_ALK_ERROR(alk::grad({alk::sum(y)}, {plain}), "grad", "input 0");
  // None of the failures left a gradient behind.
  EXPECT_FALSE(w.grad().defined());
  alk::sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(6, 2.0));
}

TEST(ErrorsData, ItemAndUndefined) {
  Tensor a = t23();
  EXPECT_ALK_ERROR(a.item(), "item", "[2, 3]");
  EXPECT_ALK_ERROR(alk::zeros({0}).item(), "item", "[0]");
  EXPECT_EQ(alk::tensor(std::vector<double>{2.5}, {1, 1}).item(), 2.5);
  Tensor undefined;
  EXPECT_ALK_ERROR(undefined.to_vector<double>(), "to_vector", "undefined");
  EXPECT_ALK_ERROR(undefined.reshape({1}), "reshape", "undefined");
}

// An undefined operand of an elementwise op is reported under the op's name.
TEST(ErrorsData, UndefinedOperandNamesTheOp) {
  Tensor undefined;
  EXPECT_ALK_ERROR(alk::add(undefined, 1.0), "add", "undefined");
  EXPECT_ALK_ERROR(alk::exp(undefined), "exp", "undefined");
}

// ---------------------------------------------------------------------------------------
// The public API beyond the core ops, as a table: each entry is one call with a bad shape,
// dtype or index, written on its own line (the line its error must name), the op the error
// must name and the offending values its message must contain.
// ---------------------------------------------------------------------------------------

struct ErrorCase {
  std::function<void()> call;
  unsigned line;
  std::string op;
  std::vector<std::string> values;
};
#define ALK_ERROR_CASE(expr, op, ...) \
  ErrorCase { [&] { (void)(expr); }, __LINE__, op, { __VA_ARGS__ } }

TEST(ErrorsPublicApi, EveryEntryNamesTheOpTheValuesAndTheCallersLine) {
  const Tensor img = alk::zeros({2, 3, 8, 8}), w = alk::zeros({4, 3, 3, 3}), q = alk::zeros({2, 2, 5, 4});
  const Tensor logits = alk::zeros({5, 4}), ids = alk::tensor(std::vector<int64_t>{0, 1, 2, 3, 1}, {5});
  const Tensor x23 = t23(), f_index = alk::zeros({2, 3});
  alk::nn::Linear linear(4, 3);
  alk::nn::Conv2d conv(3, 4, 3);
  alk::nn::LayerNorm norm(6);
  alk::nn::Embedding emb(7, 3);
  alk::nn::CausalSelfAttention attn(8, 2);
  const std::vector<ErrorCase> cases = {
      ALK_ERROR_CASE(alk::conv2d(img, alk::zeros({4, 2, 3, 3})), "conv2d", "[2, 3, 8, 8]", "[4, 2, 3, 3]"),
      ALK_ERROR_CASE(alk::conv2d(alk::zeros({3, 8, 8}), w), "conv2d", "[3, 8, 8]"),
      ALK_ERROR_CASE(alk::conv2d(img, w, alk::zeros({5})), "conv2d", "[5]"),
      ALK_ERROR_CASE(alk::conv2d(img, w, Tensor(), 0), "conv2d", "stride", "0"),
      ALK_ERROR_CASE(alk::conv2d(img, alk::zeros({4, 1, 3, 3}), Tensor(), 1, 0, 1, 2), "conv2d", "groups", "2"),
      ALK_ERROR_CASE(alk::max_pool2d(img, 0), "max_pool2d", "kernel", "0"),
      ALK_ERROR_CASE(alk::max_pool2d(alk::zeros({8, 8}), 2), "max_pool2d", "[8, 8]"),
      ALK_ERROR_CASE(alk::avg_pool2d(img, 3, 1, 2), "avg_pool2d", "padding", "2"),
      ALK_ERROR_CASE(alk::scaled_dot_product_attention(q, alk::zeros({2, 2, 5, 3}), q), "scaled_dot_product_attention", "[2, 2, 5, 3]"),
      ALK_ERROR_CASE(alk::scaled_dot_product_attention(q, q, alk::zeros({2, 2, 6, 4})), "scaled_dot_product_attention", "[2, 2, 6, 4]"),
      ALK_ERROR_CASE(alk::nn::cross_entropy(logits, alk::tensor(std::vector<int64_t>{1, 2}, {2})), "cross_entropy", "[2]", "[5]"),
      ALK_ERROR_CASE(alk::nn::cross_entropy(logits, alk::zeros({5})), "cross_entropy", "f32"),
      ALK_ERROR_CASE(alk::nn::cross_entropy(logits, ids, -100, 1.5), "cross_entropy", "1.5"),
      ALK_ERROR_CASE(alk::nn::cross_entropy(logits, alk::tensor(std::vector<int64_t>{0, 1, 7, 3, 1}, {5})).realize(), "cross_entropy", "7"),
      ALK_ERROR_CASE(alk::nn::mse_loss(x23, alk::zeros({3, 2})), "mse_loss", "[2, 3]", "[3, 2]"),
      ALK_ERROR_CASE(alk::nn::binary_cross_entropy_with_logits(x23, alk::zeros({4})), "binary_cross_entropy_with_logits", "[2, 3]", "[4]"),
      ALK_ERROR_CASE(linear(alk::zeros({2, 5})), "matmul", "[2, 5]", "[4, 3]"),
      ALK_ERROR_CASE(conv(alk::zeros({1, 2, 8, 8})), "conv2d", "[1, 2, 8, 8]", "[4, 3, 3, 3]"),
      ALK_ERROR_CASE(norm(alk::zeros({2, 5})), "layer_norm", "[6]", "[2, 5]"),
      ALK_ERROR_CASE(emb(alk::zeros({2})), "embedding", "f32"),
      ALK_ERROR_CASE(emb(alk::tensor(std::vector<int64_t>{3, 9}, {2})).realize(), "embedding", "9"),
      ALK_ERROR_CASE(attn(alk::zeros({2, 5, 6})), "CausalSelfAttention", "[2, 5, 6]", "8"),
      ALK_ERROR_CASE(linear.load_state_dict({{"weight", alk::zeros({3, 5})}, {"bias", alk::zeros({3})}}), "load_state_dict", "weight", "[3, 5]", "[3, 4]"),
      ALK_ERROR_CASE(alk::gather(x23, 1, f_index), "gather", "f32"),
      ALK_ERROR_CASE(alk::gather(x23, 3, alk::zeros({2, 3}, DType::I64)), "gather", "dim 3"),
      ALK_ERROR_CASE(alk::cumsum(x23, 2), "cumsum", "dim 2"),
      ALK_ERROR_CASE(alk::tril(alk::zeros({4})), "tril", "[4]"),
      ALK_ERROR_CASE(alk::randint(5, 5, {2}), "randint", "5"),
      ALK_ERROR_CASE(alk::arange(0, 5, 0), "arange", "step", "0"),
      ALK_ERROR_CASE(alk::full({2}, 1.5, DType::I64) + alk::zeros({3}, DType::I64), "add", "[2]", "[3]"),
      ALK_ERROR_CASE(alk::where(alk::zeros({2}, DType::I64), x23, x23), "where", "i64"),
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE("the entry at test_errors.cpp:" + std::to_string(c.line));
    alk::testing::expect_alk_error(c.call, __FILE__, c.line, c.op, c.values);
  }
}

}  // namespace
