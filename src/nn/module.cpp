#include <map>
#include <set>

#include "alk/nn.h"
#include "graph/graph.h"

namespace alk::nn {

Tensor Module::forward(const Tensor&, Loc loc) {
  fail("Module::forward", loc, "this module has no single-input forward");
}

Tensor Module::register_parameter(std::string name, Tensor value) {
  if (is_floating(value.dtype()) && !value.requires_grad()) value.requires_grad_();
  params_.emplace_back(std::move(name), value);
  return value;
}

Tensor Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, false);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, true);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict, Loc loc) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::set<std::string> used;
  std::string missing;
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict()) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    const Tensor& v = it->second;
    check(v.shape() == t.shape(), "load_state_dict", loc, "'", name, "' has shape ", to_string(v.shape()),
          " in the state dict but ", to_string(t.shape()), " in the model");
    Tensor target = t;
    Tensor value = v.to(t.device(), loc);  // like copy_: moves and casts
    target.assign_(value.dtype() == t.dtype() ? value.contiguous() : value.to(t.dtype()), loc);
    used.insert(name);
  }
  if (!strict) return;
  check(missing.empty(), "load_state_dict", loc, "missing keys: ", missing);
  std::string unexpected;
  for (auto& [name, t] : given)
    if (!used.count(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
  check(unexpected.empty(), "load_state_dict", loc, "unexpected keys: ", unexpected);
}

Module& Module::to(Device& device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict()) {
    if (&t.device() == &device) continue;
    Tensor moved = t.detach().to(device).contiguous();
    moved.realize();
    TensorImpl* impl = t.impl();
    impl->node = moved.impl()->node;
    impl->strides = moved.impl()->strides;
    impl->offset = moved.impl()->offset;
    impl->grad.reset();
  }
  return *this;
}

Module& Module::to(std::string_view device, Loc loc) { return to(get_device(device, loc)); }

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x, Loc loc) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h, loc);
  return h;
}

}  // namespace alk::nn
