#include <cmath>
#include <map>

#include "alk/optim.h"
#include "graph/graph.h"

namespace alk::optim {

// Everything a step computes lives in tensors (the learning rate, each parameter's step
// count, hence the bias corrections): nothing on the host changes the kernels a step runs,
// so a traced step (alk::compile) replays exactly, and changing the rate never recompiles.
Optimizer::Optimizer(NamedTensors params, double lr) : params_(std::move(params)), state_(params_.size()), lr_(lr) {
  for (auto& [name, p] : params_)
    check(p.defined() && p.requires_grad() && p.is_leaf(), "optimizer", Loc::current(), "parameter '", name,
          "' must be a leaf tensor that requires grad");
  lr_t_ = scalar(lr);
}

void Optimizer::set_lr(double lr) {
  lr_ = lr;
  // In place, so a compiled step reads the new rate from the same buffer.
  write_host(lr_t_, &lr, sizeof lr);
}

Tensor Optimizer::lr_in(DType t) {
  for (auto& [dtype, lr] : lr_casts_)
    if (dtype == t) return lr;
  lr_casts_.emplace_back(t, lr_t_.to(t));
  return lr_casts_.back().second;
}

// f64, whatever the parameters' dtype: update rules cast the coefficients they derive.
Tensor Optimizer::scalar(double v) const {
  // On the parameters' device, with the state the update rules combine it with.
  return tensor_from_host(&v, {}, DType::F64, params_.empty() ? default_device() : params_[0].second.device());
}

Tensor Optimizer::state(size_t i, const std::string& slot) {
  for (auto& [name, t] : state_[i])
    if (name == slot) return t;
  const Tensor& p = params_[i].second;
  Tensor z = slot == "step" ? scalar(0) : zeros_like(p).contiguous();
  z.realize();
  state_[i].emplace_back(slot, z);
  return state_[i].back().second;
}

int64_t Optimizer::param_steps(size_t i) const {
  for (auto& [name, t] : state_[i])
    if (name == "step") return static_cast<int64_t>(t.item());
  return 0;
}

int64_t Optimizer::steps() const {
  int64_t most = 0;
  for (size_t i = 0; i < params_.size(); ++i) most = std::max(most, param_steps(i));
  return most;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  std::vector<Tensor> targets;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor t = state(i, "step");
    t.assign_(t + 1.0);
    Tensor next = update(i, p, g, t);
    p.assign_(next);
    targets.push_back(p);
    for (auto& [slot, st] : state_[i]) targets.push_back(st);
  }
  lr_casts_.clear();  // held no longer than the step's graph needs them
  // Every parameter and state update in one schedule.
  realize(targets);
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  const int64_t count = steps();
  out.emplace_back("step", tensor_from_host(&count, {}, DType::I64, cpu_device()));
  for (size_t i = 0; i < params_.size(); ++i)
    for (auto& [slot, t] : state_[i]) out.emplace_back(params_[i].first + "." + slot, t);
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state, Loc loc) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  auto step = given.find("step");
  check(step != given.end() && step->second.numel() == 1, "optimizer.load_state_dict", loc,
        "the state has no scalar 'step'");
  given.erase(step);
  for (size_t i = 0; i < params_.size(); ++i) state_[i].clear();
  for (auto& [key, t] : given) {
    size_t found = params_.size();
    std::string slot;
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      if (key.size() > name.size() + 1 && key.compare(0, name.size(), name) == 0 && key[name.size()] == '.' &&
          key.find('.', name.size() + 1) == std::string::npos) {
        found = i;
        slot = key.substr(name.size() + 1);
      }
    }
    check(found < params_.size(), "optimizer.load_state_dict", loc, "state '", key, "' matches no parameter");
    const Tensor& p = params_[found].second;
    const bool scalar_slot = slot == "step";
    check(scalar_slot ? t.numel() == 1 : t.shape() == p.shape(), "optimizer.load_state_dict", loc, "state '", key,
          "' has shape ", to_string(t.shape()), " but expected ", scalar_slot ? "a scalar" : to_string(p.shape()));
    // A handle of our own: assign_ on it must never reach the caller's tensor.
    Tensor on_device = t.to(p.device(), loc);  // state lives with its parameter
    Tensor v = alias(scalar_slot ? on_device.reshape({}).to(DType::F64).contiguous() : on_device.to(p.dtype()).contiguous());
    v.realize();
    state_[found].emplace_back(slot, v);
  }
}

SGD::SGD(NamedTensors params, double lr, SGDOptions o) : Optimizer(std::move(params), lr), o_(o) {}

Tensor SGD::update(size_t i, const Tensor& p, const Tensor& g0, const Tensor& t) {
  Tensor g = o_.weight_decay != 0 ? g0 + p * o_.weight_decay : g0;
  if (o_.momentum != 0) {
    Tensor buf = state(i, "momentum_buffer");
    // PyTorch: a parameter's first step takes the gradient itself as the buffer.
    Tensor next = where(eq(t, 1.0), g, buf * o_.momentum + g * (1 - o_.dampening));
    buf.assign_(next);
    g = o_.nesterov ? g + buf * o_.momentum : buf;
  }
  return p - lr_in(p.dtype()) * g;
}

Adam::Adam(NamedTensors params, double lr, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params), lr), o_(std::move(o)), decoupled_(decoupled) {
  if (!o_.decay) o_.decay = [](const std::string&, const Tensor& p) { return p.dim() >= 2; };
}

Tensor Adam::update(size_t i, const Tensor& p, const Tensor& g0, const Tensor& t) {
  const bool decays = o_.weight_decay != 0 && (!decoupled_ || o_.decay(params()[i].first, p));
  Tensor g = decays && !decoupled_ ? g0 + p * o_.weight_decay : g0;
  Tensor m = state(i, "exp_avg");
  Tensor v = state(i, "exp_avg_sq");
  m.assign_(m * o_.beta1 + g * (1 - o_.beta1));
  v.assign_(v * o_.beta2 + g * g * (1 - o_.beta2));
  // Bias corrections from this parameter's own step count, computed in the step's kernels.
  Tensor c1 = (1.0 / (1.0 - pow(o_.beta1, t))).to(p.dtype()), c2 = (1.0 / (1.0 - pow(o_.beta2, t))).to(p.dtype());
  Tensor lr = lr_in(p.dtype());
  Tensor base = decays && decoupled_ ? p - lr * o_.weight_decay * p : p;
  return base - lr * (m * c1) / (sqrt(v * c2) + o_.eps);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  Tensor total;
  std::vector<Tensor> grads;
  // The norm is summed in f64 when any gradient is f64 (an f32 sum would round it), else
  // in f32 (f16/bf16 gradients are widened, as PyTorch's foreach norm does).
  DType acc = DType::F32;
  for (const Tensor& p : params)
    if (p.grad().defined() && p.grad().dtype() == DType::F64) acc = DType::F64;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor s = sum(square(g.to(acc)));
    total = total.defined() ? total + s : s;
    grads.push_back(g);
  }
  if (!total.defined()) return 0;
  Tensor norm = sqrt(total);
  // Scale by min(1, max_norm / norm) as a tensor: no value-dependent kernel text.
  Tensor coef = minimum(max_norm / (norm + 1e-6), 1.0);
  // Only the norm is realized: each clipped gradient stays a lazy product that the
  // optimizer's update fuses, so no second copy of the gradients is stored.
  norm.realize();
  for (Tensor g : grads) g.assign_((g * coef).to(g.dtype()));
  return norm.item();
}

Schedule constant_lr(double lr) {
  return [lr](int64_t) { return lr; };
}
Schedule linear_lr(double from, double to, int64_t steps) {
  return [=](int64_t s) {
    double f = steps > 0 ? std::min<double>(static_cast<double>(s) / static_cast<double>(steps), 1.0) : 1.0;
    return from + (to - from) * f;
  };
}
Schedule cosine_lr(double lr, int64_t steps, double min_lr) {
  return [=](int64_t s) {
    double f = steps > 0 ? std::min<double>(static_cast<double>(s) / static_cast<double>(steps), 1.0) : 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(M_PI * f));
  };
}
Schedule step_lr(double lr, int64_t step_size, double gamma) {
  return [=](int64_t s) { return lr * std::pow(gamma, static_cast<double>(s / std::max<int64_t>(step_size, 1))); };
}
Schedule warmup(int64_t n, Schedule then) {
  return [n, then](int64_t s) {
    if (s < n) return then(0) * static_cast<double>(s + 1) / static_cast<double>(n);
    return then(s - n);
  };
}

}  // namespace alk::optim
