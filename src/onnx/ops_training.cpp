// The optimizers of ONNX's training domain (ai.onnx.preview.training): Adagrad, Momentum and
// Adam, one update step of n tensors (X_1..X_n with their gradients and state) per node, as
// elementwise compositions. The learning rate R and the step count T stay tensors (no read to
// the host), so a training graph that feeds them replays as a recording.
#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// The node's inputs are R, T, then `groups` lists of n tensors each (X, G, and the states):
// n, with the counts checked against the node's outputs (X_new and the new states).
size_t tensors_per_group(const Ctx& c, size_t groups, size_t output_groups) {
  c.require(c.in.size() >= 2 && (c.in.size() - 2) % groups == 0, "takes R, T and ", groups,
            " lists of tensors of one length, got ", c.in.size(), " inputs");
  const size_t n = (c.in.size() - 2) / groups;
  c.require(c.node.outputs.size() == n * output_groups, "has ", c.node.outputs.size(), " outputs for ", n,
            " tensors (", output_groups, " per tensor)");
  for (size_t k = 2; k < c.in.size(); ++k) c.require(is_float(c.x(k)), "input ", k, " must be floating-point");
  return n;
}

// T as a float scalar (an int64 step count in the spec).
Tensor step_count(const Ctx& c) { return c.x(1).reshape({}).to(DType::F32); }

// Adagrad(R, T, X..., G..., H...) -> (X_new..., H_new...).
Outs adagrad(Ctx& c) {
  const size_t n = tensors_per_group(c, 3, 2);
  const double decay = c.f("decay_factor", 0.0), eps = c.f("epsilon", 1e-6), norm = c.f("norm_coefficient", 0.0);
  const Tensor r = c.x(0).reshape({}) / (step_count(c) * decay + 1.0);
  Outs xs, hs;
  for (size_t k = 0; k < n; ++k) {
    const Tensor &x = c.x(2 + k), &g = c.x(2 + n + k), &h = c.x(2 + 2 * n + k);
    const Tensor g_reg = x * norm + g;
    const Tensor h_new = h + g_reg * g_reg;
    xs.push_back(x - r * g_reg / (sqrt(h_new) + eps));
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

// Momentum(R, T, X..., G..., V...) -> (X_new..., V_new...), standard or Nesterov; the first
// step (T = 0) takes the whole gradient (beta 1).
Outs momentum(Ctx& c) {
  const size_t n = tensors_per_group(c, 3, 2);
  const double alpha = c.f("alpha", 0.0), beta = c.f("beta", 0.0), norm = c.f("norm_coefficient", 0.0);
  const std::string mode = c.s("mode", "standard");
  c.require(mode == "standard" || mode == "nesterov", "mode '", mode, "' is neither standard nor nesterov");
  const Tensor r = c.x(0).reshape({});
  const Tensor beta_now = where(step_count(c) > 0.0, full({}, beta, DType::F32), full({}, 1.0, DType::F32));
  Outs xs, vs;
  for (size_t k = 0; k < n; ++k) {
    const Tensor &x = c.x(2 + k), &g = c.x(2 + n + k), &v = c.x(2 + 2 * n + k);
    const Tensor g_reg = x * norm + g;
    const Tensor v_new = v * alpha + g_reg * beta_now;
    xs.push_back(mode == "standard" ? x - r * v_new : x - r * (g_reg + v_new * alpha));
    vs.push_back(v_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

// Adam(R, T, X..., G..., V..., H...) -> (X_new..., V_new..., H_new...), with the bias-corrected
// rate from the second step on (T > 0) and the decoupled decay norm_coefficient_post.
Outs adam(Ctx& c) {
  const size_t n = tensors_per_group(c, 4, 3);
  const double alpha = c.f("alpha", 0.9), beta = c.f("beta", 0.999), eps = c.f("epsilon", 1e-6);
  const double norm = c.f("norm_coefficient", 0.0), norm_post = c.f("norm_coefficient_post", 0.0);
  const Tensor r = c.x(0).reshape({}), t = step_count(c);
  const Tensor corrected = r * sqrt(1.0 - pow(full({}, beta, DType::F32), t)) / (1.0 - pow(full({}, alpha, DType::F32), t));
  const Tensor r_now = where(t > 0.0, corrected, r);
  Outs xs, vs, hs;
  for (size_t k = 0; k < n; ++k) {
    const Tensor &x = c.x(2 + k), &g = c.x(2 + n + k), &v = c.x(2 + 2 * n + k), &h = c.x(2 + 3 * n + k);
    const Tensor g_reg = x * norm + g;
    const Tensor v_new = v * alpha + g_reg * (1.0 - alpha);
    const Tensor h_new = h * beta + g_reg * g_reg * (1.0 - beta);
    xs.push_back((x - r_now * (v_new / (sqrt(h_new) + eps))) * (1.0 - norm_post));
    vs.push_back(v_new);
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

}  // namespace

void add_training_ops(HandlerTable& h) {
  h["ai.onnx.preview.training:Adagrad"] = adagrad;
  h["ai.onnx.preview.training:Momentum"] = momentum;
  h["ai.onnx.preview.training:Adam"] = adam;
}

}  // namespace alk::onnx
