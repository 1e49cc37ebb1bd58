// Optimizers, gradient clipping and learning-rate schedules. Updates are ordinary lazy
// ops whose results are assigned into the parameters (Tensor::assign_); one step()
// realizes every update in one schedule. The learning rate and bias corrections enter
// the kernels as 0-d tensors, not literals, so changing them never changes a kernel.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "alk/nn.h"

namespace alk::optim {

using nn::NamedTensors;

class Optimizer {
 public:
  Optimizer(NamedTensors params, double lr);
  virtual ~Optimizer() = default;
  // One update from the parameters' .grad (parameters without a grad are skipped).
  void step();
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t steps() const;  // the most steps any parameter has had
  // Updates parameter i has had (PyTorch keeps a step per parameter: one that first gets a
  // gradient late starts its bias correction then). Kept in the tensor state slot "step".
  int64_t param_steps(size_t i) const;
  // Per-parameter state as "<param name>.<slot>" (with "<param name>.step") plus "step".
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state, Loc loc = Loc::current());
  const NamedTensors& params() const { return params_; }
  // The 0-d f32 buffer set_lr writes (a compiled step reads it; exporters name it).
  Tensor lr_tensor() const { return lr_t_; }

 protected:
  // Returns the new value of parameter i given its gradient and its (already incremented)
  // step count t, a 0-d tensor; may assign_ state slots.
  virtual Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& t) = 0;
  // Creates (zeros) or returns state slot `slot` of parameter i.
  Tensor state(size_t i, const std::string& slot);  // a handle: assign_ on it updates the slot
  Tensor scalar(double v) const;  // a realized 0-d f64 tensor: a kernel input, not a literal
  // The learning rate in dtype t: one cast per step, shared by every parameter of that dtype
  // (one one-element kernel instead of one per parameter).
  Tensor lr_in(DType t);

 private:
  NamedTensors params_;
  std::vector<std::vector<std::pair<std::string, Tensor>>> state_;
  double lr_;
  Tensor lr_t_;  // one buffer for the whole run: set_lr writes it in place
  std::vector<std::pair<DType, Tensor>> lr_casts_;  // this step's lr_in values
};

struct SGDOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(NamedTensors params, double lr, SGDOptions o = {});

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& t) override;
  SGDOptions o_;
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  // AdamW only: which parameters decay. Default: tensors of rank >= 2 (weights, not
  // biases or norm gains), the usual GPT recipe.
  std::function<bool(const std::string& name, const Tensor& p)> decay = nullptr;
};
// Adam: weight_decay is L2 added to the gradient. AdamW: decoupled decay p -= lr * wd * p.
class Adam : public Optimizer {
 public:
  Adam(NamedTensors params, double lr, AdamOptions o = {}, bool decoupled = false);

 protected:
  Tensor update(size_t i, const Tensor& p, const Tensor& g, const Tensor& t) override;
  AdamOptions o_;
  bool decoupled_;
};
class AdamW : public Adam {
 public:
  AdamW(NamedTensors params, double lr, AdamOptions o = {}) : Adam(std::move(params), lr, std::move(o), true) {}
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm
// before clipping (realizes it).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Learning-rate schedules: lr as a function of the step (0-based). Plain functions, so
// changing the rate never recompiles anything.
using Schedule = std::function<double(int64_t step)>;
Schedule constant_lr(double lr);
Schedule linear_lr(double from, double to, int64_t steps);
Schedule cosine_lr(double lr, int64_t steps, double min_lr = 0);
Schedule step_lr(double lr, int64_t step_size, double gamma);
Schedule warmup(int64_t warmup_steps, Schedule then);  // linear ramp from 0, then `then(step - warmup)`

}  // namespace alk::optim
