// Load-time rewrites of an inference graph (run once per model, not per call), as ONNX
// runtimes do: a BatchNormalization in inference mode whose input is a Conv's only use, with
// constant weights and statistics, is folded into that Conv's weights and bias:
//   s = scale / sqrt(var + eps),  W' = W * s (per output channel),  B' = (B - mean) * s + beta.
// The Conv then writes the BatchNormalization's output; Constant nodes left without readers
// are dropped.
#include <cmath>
#include <unordered_map>
#include <unordered_set>

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

}  // namespace

void fold_batch_norms(ModelImpl& m) {
  std::unordered_map<std::string, Tensor> consts = constant_values(m);
  std::unordered_map<std::string, int> uses;
  for (const Node& n : m.nodes)
    for (const auto& in : n.inputs) ++uses[in];
  for (const auto& out : m.output_names) ++uses[out];
  // The single reader of each value read once.
  std::unordered_map<std::string, size_t> reader;
  for (size_t k = 0; k < m.nodes.size(); ++k)
    for (const auto& in : m.nodes[k].inputs)
      if (uses[in] == 1) reader[in] = k;
  std::vector<bool> dropped(m.nodes.size(), false);
  int folded = 0;
  for (Node& conv : m.nodes) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1 || conv.inputs.size() < 2) continue;
    auto r = reader.find(conv.outputs[0]);
    if (r == reader.end()) continue;
    const Node& bn = m.nodes[r->second];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5 || bn.inputs[0] != conv.outputs[0])
      continue;
    bool extra_outputs = false;
    for (size_t k = 1; k < bn.outputs.size(); ++k) extra_outputs = extra_outputs || !bn.outputs[k].empty();
    auto training = bn.attrs.find("training_mode");
    if (extra_outputs || (training != bn.attrs.end() && training->second.i != 0)) continue;
    auto value = [&](const std::string& name) { auto it = consts.find(name); return it == consts.end() ? Tensor() : it->second; };
    const Tensor w = value(conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    const Tensor b = has_bias ? value(conv.inputs[2]) : Tensor();
    const Tensor scale = value(bn.inputs[1]), beta = value(bn.inputs[2]), mean = value(bn.inputs[3]), var = value(bn.inputs[4]);
    if (!is_f32(w) || w.dim() < 3 || (has_bias && !is_f32(b)) || !is_f32(scale) || !is_f32(beta) || !is_f32(mean) ||
        !is_f32(var))
      continue;
    const int64_t M = w.shape()[0];
    bool fits = true;
    for (const Tensor* t : {&scale, &beta, &mean, &var}) fits = fits && t->numel() == M;
    if (!fits || (has_bias && b.numel() != M)) continue;
    double eps = 1e-5;
    if (auto e = bn.attrs.find("epsilon"); e != bn.attrs.end()) eps = e->second.f;
    const std::vector<double> wv = w.to_vector<double>(), sv = scale.to_vector<double>(), bev = beta.to_vector<double>(),
                              mv = mean.to_vector<double>(), vv = var.to_vector<double>();
    const std::vector<double> bv = has_bias ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(M), 0.0);
    const int64_t per = w.numel() / std::max<int64_t>(M, 1);
    std::vector<float> w2(wv.size()), b2(static_cast<size_t>(M));
    for (int64_t o = 0; o < M; ++o) {
      const size_t u = static_cast<size_t>(o);
      const double s = sv[u] / std::sqrt(vv[u] + eps);
      for (int64_t e = 0; e < per; ++e) w2[static_cast<size_t>(o * per + e)] = static_cast<float>(wv[static_cast<size_t>(o * per + e)] * s);
      b2[u] = static_cast<float>((bv[u] - mv[u]) * s + bev[u]);
    }
    const std::string wname = bn.outputs[0] + "::folded_weight", bname = bn.outputs[0] + "::folded_bias";
    if (m.initializers.count(wname) || m.initializers.count(bname) || consts.count(wname) || consts.count(bname)) continue;
    m.initializers[wname] = tensor(w2, w.shape());
    m.initializers[bname] = tensor(b2, {M});
    for (const std::string& in : {conv.inputs[1], has_bias ? conv.inputs[2] : std::string()}) if (!in.empty()) --uses[in];
    for (size_t k = 1; k < bn.inputs.size(); ++k) --uses[bn.inputs[k]];
    conv.inputs.resize(3);
    conv.inputs[1] = wname;
    conv.inputs[2] = bname;
    conv.outputs[0] = bn.outputs[0];
    dropped[r->second] = true;
    ++folded;
  }
  if (folded == 0) return;
  std::vector<Node> kept;
  for (size_t k = 0; k < m.nodes.size(); ++k) {
    Node& n = m.nodes[k];
    const bool dead_constant = n.op_type == "Constant" && n.domain.empty() && n.outputs.size() == 1 && uses[n.outputs[0]] <= 0;
    if (!dropped[k] && !dead_constant) kept.push_back(std::move(n));
  }
  m.nodes = std::move(kept);
}

}  // namespace alk::onnx
