// PyTorch parity: every case of tests/fixtures/torch_parity.json (PyTorch 1.13's float64
// answers, written by scripts/gen_torch_parity.py from the op table and a list of template
// ops, losses and layers) is run through alk and compared: forward values and the gradients
// for the same seed gradient, NaN matching NaN and infinities exactly. Edge values (NaN,
// +-inf, zeros, ties, empty tensors) are part of every elementwise op's grid. Every op of
// the elementwise table must have cases, so an op added without them fails here. Where alk
// deliberately differs (docs/pytorch.md), the case says so and marks the elements.
// If PyTorch is installed, FixtureIsCurrent regenerates the file and compares.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "alk/nn.h"
#include "io/json.h"
#include "io/temp_dir.h"
#include "alk/op_table.h"
#include "ops/ops.h"
#include "required.h"
#include "testing.h"

namespace alk {
namespace {

using json::Value;

const std::string kFixture = std::string(ALK_SOURCE_DIR) + "/tests/fixtures/torch_parity.json";

double num(const Value& v) {
  if (v.is_string()) {
    const std::string& s = v.as_string();
    return s == "nan" ? NAN : s == "inf" ? INFINITY : -INFINITY;
  }
  return v.as_double();
}

std::vector<double> numbers(const Value& arr) {
  std::vector<double> out;
  for (const Value& v : arr.as_array()) out.push_back(num(v));
  return out;
}

Shape shape_of(const Value& t) {
  Shape s;
  for (const Value& d : t.at("shape").as_array()) s.push_back(d.as_int());
  return s;
}

Tensor make(const Value& t) {
  const std::string dt = t.at("dtype").as_string();
  const Shape s = shape_of(t);
  const std::vector<double> v = numbers(t.at("data"));
  Tensor x;
  if (dt == "i64") {
    std::vector<int64_t> iv(v.begin(), v.end());
    x = tensor(iv, s);
  } else {
    x = tensor(v, s);
    if (dt == "bool") x = cast(x, DType::Bool);
    if (dt == "f32") x = cast(x, DType::F32);
  }
  x = x.contiguous();
  x.realize();
  if (t.at("grad").as_bool()) x.requires_grad_();
  return x;
}

int64_t pint(const Value& params, const char* key, int64_t dflt) {
  const Value* v = params.find(key);
  return v ? v->as_int() : dflt;
}
double pnum(const Value& params, const char* key, double dflt) {
  const Value* v = params.find(key);
  return v ? v->as_double() : dflt;
}
std::vector<int64_t> pints(const Value& params, const char* key) {
  std::vector<int64_t> out;
  if (const Value* v = params.find(key))
    for (const Value& x : v->as_array()) out.push_back(x.as_int());
  return out;
}

// Runs one case's op in alk.
Tensor run_op(const std::string& op, const Value& p, const std::vector<Tensor>& in) {
  if (op.rfind("ew:", 0) == 0) {
    const ElementwiseEntry* e = find_elementwise(op.substr(3));
    if (e == nullptr) throw std::runtime_error("no elementwise op " + op);
    std::vector<Operand> operands(in.begin(), in.end());
    return apply_elementwise(e->op, operands, Loc::current());
  }
  const std::vector<int64_t> axes = pints(p, "axes");
  const bool keepdim = p.find("keepdim") && p.at("keepdim").as_bool();
  if (op == "sum") return sum(in[0], axes, keepdim);
  if (op == "mean") return mean(in[0], axes, keepdim);
  if (op == "prod") return prod(in[0], axes, keepdim);
  if (op == "max") return max(in[0], axes, keepdim);
  if (op == "min") return min(in[0], axes, keepdim);
  if (op == "var") return var(in[0], axes, pint(p, "correction", 1), keepdim);
  if (op == "std") return alk::std(in[0], axes, pint(p, "correction", 1), keepdim);
  if (op == "logsumexp") return logsumexp(in[0], axes, keepdim);
  if (op == "argmax") return argmax(in[0], pint(p, "dim", 0));
  if (op == "argmin") return argmin(in[0], pint(p, "dim", 0));
  if (op == "cumsum") return cumsum(in[0], pint(p, "dim", 0));
  if (op == "matmul") return matmul(in[0], in[1]);
  if (op == "softmax") return softmax(in[0], pint(p, "dim", -1));
  if (op == "log_softmax") return log_softmax(in[0], pint(p, "dim", -1));
  if (op == "layer_norm") return layer_norm(in[0], {in[0].shape().back()}, in[1], in[2], pnum(p, "eps", 1e-5));
  if (op == "rms_norm") return rms_norm(in[0], {in[0].shape().back()}, in[1], pnum(p, "eps", 1e-6));
  if (op == "gather") return gather(in[0], pint(p, "dim", 0), in[1]);
  if (op == "index_select") return index_select(in[0], pint(p, "dim", 0), in[1]);
  if (op == "embedding") return embedding(in[0], in[1]);
  if (op == "scatter_add") return scatter_add(in[0], pint(p, "dim", 0), in[1], in[2]);
  if (op == "one_hot") return one_hot(in[0], pint(p, "n", 0));
  if (op == "tril") return tril(in[0], pint(p, "k", 0));
  if (op == "triu") return triu(in[0], pint(p, "k", 0));
  if (op == "pad") return pad(in[0], pints(p, "pads"), pnum(p, "value", 0));
  if (op == "cat") return cat(in, pint(p, "dim", 0));
  if (op == "stack") return stack(in, pint(p, "dim", 0));
  if (op == "attention") return scaled_dot_product_attention(in[0], in[1], in[2], p.at("causal").as_bool());
  if (op == "conv2d")
    return conv2d(in[0], in[1], in[2], pint(p, "stride", 1), pint(p, "padding", 0), pint(p, "dilation", 1),
                  pint(p, "groups", 1));
  if (op == "max_pool2d") return max_pool2d(in[0], pint(p, "kernel", 2), pint(p, "stride", -1), pint(p, "padding", 0));
  if (op == "avg_pool2d") return avg_pool2d(in[0], pint(p, "kernel", 2), pint(p, "stride", -1), pint(p, "padding", 0));
  if (op == "cross_entropy")
    return nn::cross_entropy(in[0], in[1], pint(p, "ignore_index", -100), pnum(p, "label_smoothing", 0));
  if (op == "mse_loss") return nn::mse_loss(in[0], in[1]);
  if (op == "bce_logits") return nn::binary_cross_entropy_with_logits(in[0], in[1]);
  if (op == "linear") return matmul(in[0], in[1].t()) + in[2];
  if (op == "batch_norm") {
    const int64_t c = in[1].shape()[0];
    Tensor mu = mean(in[0], {0, 2, 3}, true), var_b = mean(square(in[0] - mu), {0, 2, 3}, true);
    // nn::BatchNorm2d's training-mode formula, over the given weight and bias.
    return (in[0] - mu) * rsqrt(var_b + pnum(p, "eps", 1e-5)) * in[1].reshape({1, c, 1, 1}) +
           in[2].reshape({1, c, 1, 1});
  }
  throw std::runtime_error("no alk op for case op '" + op + "'");
}

// got ~ want: NaN == NaN, infinities exact, finite within rtol (float64 math libraries differ
// in the last bits of transcendental functions).
bool close(double got, double want, double rtol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-12 + rtol * std::abs(want);
}

struct Mismatch {
  int count = 0;
  std::string first;
};

void compare(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
             const std::vector<double>& inputs_hint, const std::vector<int64_t>* skip, Mismatch& m) {
  if (got.size() != want.size()) {
    ++m.count;
    if (m.first.empty()) m.first = what + ": " + std::to_string(got.size()) + " values, want " + std::to_string(want.size());
    return;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (skip && i < skip->size() && (*skip)[i]) continue;
    if (!close(got[i], want[i], 1e-9)) {
      if (++m.count <= 8) {  // the first few, each with its element's first input
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s[%zu]: alk %.17g, torch %.17g", what.c_str(), i, got[i], want[i]);
        m.first += (m.first.empty() ? "" : "; ") + std::string(buf);
        if (i < inputs_hint.size()) m.first += " (input " + std::to_string(inputs_hint[i]) + ")";
      }
    }
  }
}

const Value& fixture() {
  static const Value v = json::parse(testing::read_file(kFixture));
  return v;
}

TEST(TorchParity, EveryCaseMatches) {
  const json::Array& cases = fixture().at("cases").as_array();
  ASSERT_GT(cases.size(), 100u);
  int failed = 0, compared_values = 0;
  for (const Value& c : cases) {
    const std::string name = c.at("name").as_string();
    SCOPED_TRACE(name);
    std::vector<Tensor> in;
    for (const Value& t : c.at("inputs").as_array()) in.push_back(make(t));
    Mismatch m;
    try {
      Tensor out = run_op(c.at("op").as_string(), c.at("params"), in);
      const Value& want = c.at("out");
      EXPECT_EQ(out.shape(), shape_of(want));
      const std::vector<double> hint = in.empty() ? std::vector<double>{} : in[0].to_vector<double>();
      std::vector<double> got = out.to_vector<double>(), expect = numbers(want.at("data"));
      compare("forward", got, expect, hint, nullptr, m);
      compared_values += static_cast<int>(expect.size());
      if (const Value* grads = c.find("grads")) {
        Tensor seed = tensor(numbers(c.at("seed")), out.shape()).to(out.dtype());
        std::vector<Tensor> wrt;
        for (const Tensor& t : in)
          if (t.requires_grad()) wrt.push_back(t);
        std::vector<Tensor> g = grad({out}, wrt, {seed});
        std::vector<int64_t> skip;
        if (const Value* s = c.find("grad_skip"))
          for (const Value& x : s->as_array()) skip.push_back(x.as_int());
        size_t k = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          const Value& gw = grads->as_array()[i];
          if (gw.is_null()) continue;
          std::vector<double> gg = g[k++].to_vector<double>(), ge = numbers(gw);
          compare("grad" + std::to_string(i), gg, ge, hint, skip.empty() ? nullptr : &skip, m);
          compared_values += static_cast<int>(ge.size());
        }
      }
    } catch (const std::exception& e) {
      ++m.count;
      m.first = std::string("threw: ") + e.what();
    }
    if (m.count > 0) {
      ++failed;
      ADD_FAILURE() << name << ": " << m.count << " mismatches: " << m.first;
    }
  }
  std::printf("[ parity   ] %zu cases, %d values compared with PyTorch %s, %d cases differ\n", cases.size(),
              compared_values, fixture().at("torch").as_string().c_str(), failed);
}

// Every op of the elementwise table has cases (with gradients where it has any), and every
// case names an op alk has.
TEST(TorchParity, CoversTheOpTable) {
  std::map<std::string, int> with_grads, any;
  for (const Value& c : fixture().at("cases").as_array()) {
    const std::string op = c.at("op").as_string();
    ++any[op];
    if (c.find("grads")) ++with_grads[op];
  }
  for (const ElementwiseEntry& e : elementwise_table()) {
    const std::string key = "ew:" + std::string(e.name);
    EXPECT_GT(any[key], 0) << e.name << " has no PyTorch parity case (scripts/gen_torch_parity.py)";
    if (e.differentiable()) {
      EXPECT_GT(with_grads[key], 0) << e.name << " has no gradient parity case";
    }
  }
  for (const char* op : {"sum", "mean", "prod", "max", "min", "var", "std", "logsumexp", "argmax", "cumsum",
                         "matmul", "softmax", "log_softmax", "layer_norm", "rms_norm", "gather", "index_select",
                         "embedding", "scatter_add", "one_hot", "tril", "triu", "pad", "cat", "stack", "attention",
                         "conv2d", "max_pool2d", "avg_pool2d", "cross_entropy", "mse_loss", "bce_logits"})
    EXPECT_GT(any[op], 0) << op;
}

// Where two JSON values differ beyond float64 rounding: "" if nowhere. Doubles may differ in
// their last bits (PyTorch's float64 gradients go through BLAS kernels chosen per CPU);
// everything else (the cases, their shapes, ints, strings) must be equal.
std::string json_difference(const Value& a, const Value& b, const std::string& path) {
  if (a.is_number() && b.is_number() && (a.kind() == json::Kind::Double || b.kind() == json::Kind::Double)) {
    const double x = a.as_double(), y = b.as_double();
    const bool same = x == y || (std::isnan(x) && std::isnan(y)) || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
    return same ? "" : path + ": " + std::to_string(x) + " vs " + std::to_string(y);
  }
  if (a.kind() != b.kind()) return path + ": " + std::string(json::kind_name(a.kind())) + " vs " + std::string(json::kind_name(b.kind()));
  if (a.is_array()) {
    const json::Array &x = a.as_array(), &y = b.as_array();
    if (x.size() != y.size()) return path + ": " + std::to_string(x.size()) + " vs " + std::to_string(y.size()) + " items";
    for (size_t i = 0; i < x.size(); ++i)
      if (std::string d = json_difference(x[i], y[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
    return "";
  }
  if (a.is_object()) {
    const json::Object &x = a.as_object(), &y = b.as_object();
    if (x.size() != y.size()) return path + ": " + std::to_string(x.size()) + " vs " + std::to_string(y.size()) + " members";
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].first != y[i].first) return path + ": member " + x[i].first + " vs " + y[i].first;
      if (std::string d = json_difference(x[i].second, y[i].second, path + "." + x[i].first); !d.empty()) return d;
    }
    return "";
  }
  return a == b ? "" : path + ": differs";
}

// The fixture is what the script writes today (when PyTorch is installed here), up to the
// last bits of float64 values.
TEST(TorchParity, FixtureIsCurrent) {
  if (std::system("OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    ALK_SKIP_OR_FAIL_IF_REQUIRED("torch", "python3-torch is not installed");
  testing::TempDir dir;
  const std::string out = dir / "parity.json";
  const std::string cmd = "cd " + std::string(ALK_SOURCE_DIR) +
                          " && OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 /usr/bin/python3 scripts/gen_torch_parity.py " +
                          out + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string difference = json_difference(json::parse(testing::read_file(out)), fixture(), "");
  EXPECT_EQ(difference, "") << "tests/fixtures/torch_parity.json is stale: run scripts/gen_torch_parity.py";
}

}  // namespace
}  // namespace alk
