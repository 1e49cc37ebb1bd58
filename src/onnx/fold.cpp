// Load-time rewrites of an inference graph (run once per model, not per call), as ONNX
// runtimes do: per-channel affine maps applied to a Conv's output are folded into that Conv's
// weights and bias when the Conv's output (and each map's) has that node as its only reader and
// every tensor involved is a constant:
//   BatchNormalization (inference mode): s = scale / sqrt(var + eps), y = x * s + (beta - mean * s)
//   Mul / Add by a constant that is a scalar or one value per channel (PaddleOCR's learnable
//   affine blocks after its convolutions).
// y = x * s + a on the Conv's output is W' = W * s (per output channel), B' = B * s + a. The Conv
// then writes the last map's output; Constant nodes left without readers are dropped.
#include <cmath>
#include <optional>
#include <unordered_map>

#include "onnx/model.h"

namespace alk::onnx {

namespace {

// The values known at load time: initializers and Constant nodes holding a tensor.
std::unordered_map<std::string, Tensor> constant_values(const ModelImpl& m) {
  std::unordered_map<std::string, Tensor> out(m.initializers.begin(), m.initializers.end());
  for (const Node& n : m.nodes) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1) continue;
    auto a = n.attrs.find("value");
    if (a != n.attrs.end() && a->second.kind == Attr::TensorValue && a->second.t.defined())
      out[n.outputs[0]] = a->second.t;
  }
  return out;
}

bool is_f32(const Tensor& t) { return t.defined() && t.dtype() == DType::F32; }

// A constant's values per output channel (M of them) when it broadcasts against a [N, M, ...]
// output of rank `rank` as one value per channel (or one value), else nullopt.
std::optional<std::vector<double>> per_channel(const Tensor& t, int64_t M, int64_t rank) {
  if (!is_f32(t) || t.dim() > rank) return std::nullopt;
  const int64_t lead = rank - t.dim();  // t's dim d lines up with the output's dim lead + d
  bool channels = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t n = t.shape()[static_cast<size_t>(d)];
    if (n == 1) continue;
    if (lead + d != 1 || n != M) return std::nullopt;
    channels = true;
  }
  std::vector<double> v = t.to_vector<double>();
  if (!channels) v.assign(static_cast<size_t>(M), v.empty() ? 0.0 : v[0]);
  return v;
}

struct Affine {
  std::vector<double> scale, shift;  // y = x * scale + shift, per channel
};

// The per-channel map node n applies to the Conv output `x` (rank `rank`, M channels), if any.
std::optional<Affine> affine_of(const Node& n, const std::string& x, int64_t M, int64_t rank,
                                const std::unordered_map<std::string, Tensor>& consts) {
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0].empty()) return std::nullopt;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (!n.outputs[k].empty()) return std::nullopt;
  auto value = [&](const std::string& name) {
    auto it = consts.find(name);
    return it == consts.end() ? Tensor() : it->second;
  };
  const size_t ones = static_cast<size_t>(M);
  if (n.op_type == "BatchNormalization") {
    auto training = n.attrs.find("training_mode");
    if (n.inputs.size() != 5 || n.inputs[0] != x || (training != n.attrs.end() && training->second.i != 0))
      return std::nullopt;
    std::vector<std::vector<double>> p;
    for (size_t k = 1; k < 5; ++k) {
      const Tensor t = value(n.inputs[k]);
      if (!is_f32(t) || t.numel() != M) return std::nullopt;
      p.push_back(t.to_vector<double>());
    }
    double eps = 1e-5;
    if (auto e = n.attrs.find("epsilon"); e != n.attrs.end()) eps = e->second.f;
    Affine a{std::vector<double>(ones), std::vector<double>(ones)};
    for (size_t m = 0; m < ones; ++m) {
      a.scale[m] = p[0][m] / std::sqrt(p[3][m] + eps);
      a.shift[m] = p[1][m] - p[2][m] * a.scale[m];
    }
    return a;
  }
  if ((n.op_type == "Mul" || n.op_type == "Add") && n.inputs.size() == 2 && (n.inputs[0] == x) != (n.inputs[1] == x)) {
    auto v = per_channel(value(n.inputs[0] == x ? n.inputs[1] : n.inputs[0]), M, rank);
    if (!v) return std::nullopt;
    if (n.op_type == "Mul") return Affine{*v, std::vector<double>(ones, 0.0)};
    return Affine{std::vector<double>(ones, 1.0), *v};
  }
  return std::nullopt;
}

}  // namespace

void fold_batch_norms(ModelImpl& m) {
  const std::unordered_map<std::string, Tensor> consts = constant_values(m);
  std::unordered_map<std::string, int> uses;
  for (const Node& n : m.nodes)
    for (const auto& in : n.inputs) ++uses[in];
  for (const auto& out : m.output_names) ++uses[out];
  // The reader of each value read exactly once.
  std::unordered_map<std::string, size_t> reader;
  for (size_t k = 0; k < m.nodes.size(); ++k)
    for (const auto& in : m.nodes[k].inputs)
      if (uses[in] == 1) reader[in] = k;
  std::vector<bool> dropped(m.nodes.size(), false);
  int folded = 0;
  for (Node& conv : m.nodes) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1 || conv.inputs.size() < 2) continue;
    auto cw = consts.find(conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    auto cb = has_bias ? consts.find(conv.inputs[2]) : consts.end();
    if (cw == consts.end() || !is_f32(cw->second) || cw->second.dim() < 3 ||
        (has_bias && (cb == consts.end() || !is_f32(cb->second))))
      continue;
    const Tensor& w = cw->second;
    const int64_t M = w.shape()[0], rank = w.dim();
    if (has_bias && cb->second.numel() != M) continue;
    std::vector<double> wv, bv;
    std::string out = conv.outputs[0];
    for (;;) {
      auto r = reader.find(out);
      if (r == reader.end() || dropped[r->second]) break;
      const Node& n = m.nodes[r->second];
      std::optional<Affine> a = affine_of(n, out, M, rank, consts);
      if (!a) break;
      if (wv.empty()) {
        wv = w.to_vector<double>();
        bv = has_bias ? cb->second.to_vector<double>() : std::vector<double>(static_cast<size_t>(M), 0.0);
      }
      const int64_t per = w.numel() / std::max<int64_t>(M, 1);
      for (int64_t o = 0; o < M; ++o) {
        const size_t u = static_cast<size_t>(o);
        for (int64_t e = 0; e < per; ++e) wv[static_cast<size_t>(o * per + e)] *= a->scale[u];
        bv[u] = bv[u] * a->scale[u] + a->shift[u];
      }
      for (const auto& in : n.inputs)
        if (in != out) --uses[in];
      dropped[r->second] = true;
      out = n.outputs[0];
    }
    if (wv.empty()) continue;
    const std::string wname = out + "::folded_weight", bname = out + "::folded_bias";
    if (m.initializers.count(wname) || m.initializers.count(bname) || consts.count(wname) || consts.count(bname))
      throw Error("onnx", "folding into '" + conv.name + "': the name " + wname + " is taken", Loc::current());
    m.initializers[wname] = tensor(std::vector<float>(wv.begin(), wv.end()), w.shape());
    m.initializers[bname] = tensor(std::vector<float>(bv.begin(), bv.end()), {M});
    --uses[conv.inputs[1]];
    if (has_bias) --uses[conv.inputs[2]];
    conv.inputs.resize(3);
    conv.inputs[1] = wname;
    conv.inputs[2] = bname;
    conv.outputs[0] = out;
    ++folded;
  }
  if (folded == 0) return;
  std::vector<Node> kept;
  for (size_t k = 0; k < m.nodes.size(); ++k) {
    Node& n = m.nodes[k];
    const bool dead_constant =
        n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1 && uses[n.outputs[0]] <= 0;
    if (!dropped[k] && !dead_constant) kept.push_back(std::move(n));
  }
  m.nodes = std::move(kept);
}

}  // namespace alk::onnx
