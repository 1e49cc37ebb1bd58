// ONNX nodes as alk Tensor ops. Each op type has one handler taking the node's inputs (undefined
// tensors for omitted optional ones) and returning its outputs; everything stays lazy except the
// small integer tensors that hold shapes, axes and counts, which are read back when a node needs
// them (so shape inference happens with the actual, possibly symbolic-in-the-file, input shapes).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "onnx/ops.h"

namespace alk::onnx {

namespace {

const HandlerTable& handlers() {
  static const HandlerTable table = [] {
    HandlerTable h;
    add_elementwise_ops(h);
    add_shape_ops(h);
    add_nn_ops(h);
    add_more_ops(h);
    return h;
  }();
  return table;
}

}  // namespace

bool is_supported_op(std::string_view op_type) { return handlers().count(std::string(op_type)) != 0; }

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (auto& [name, h] : handlers()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc) {
  std::unordered_map<std::string, Tensor> env;
  Device* device = nullptr;
  for (const auto& name : m.input_names) {
    auto it = inputs.find(name);
    check(it != inputs.end() && it->second.defined(), kOp, loc, "input '", name, "' is not given");
    if (!device) device = &it->second.device();
    env[name] = it->second;
  }
  for (const auto& [name, t] : inputs)
    check(env.count(name) || m.initializers.count(name), kOp, loc, "'", name, "' is not an input of the model");
  if (!device) device = &default_device();
  DeviceGuard on(*device);
  for (const auto& [name, t] : m.initializers) {
    auto it = inputs.find(name);  // an input may override an initializer's default
    env[name] = it != inputs.end() ? it->second : t.to(*device);
  }
  for (const auto& node : m.nodes) {
    if (!node.domain.empty()) fail(kUnsupported, loc, "node '", node.name, "': domain ", node.domain, " is not supported");
    auto h = handlers().find(node.op_type);
    if (h == handlers().end()) fail(kUnsupported, loc, "op ", node.op_type, " is not supported");
    Ctx c{node, m.info.opset, {}, loc};
    for (const auto& name : node.inputs) c.in.push_back(name.empty() ? Tensor() : env.at(name));
    Outs outs = h->second(c);
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (k >= outs.size() || !outs[k].defined()) c.unsupported("output ", k, " ('", node.outputs[k], "')");
      checked_numel(outs[k].shape(), c.label(), loc);
      // An empty result needs no kernel (and some backends have none for empty inputs).
      if (outs[k].numel() == 0 && !outs[k].is_realized())
        outs[k] = zeros(outs[k].shape(), outs[k].dtype()).contiguous();
      env[node.outputs[k]] = outs[k];
    }
  }
  std::map<std::string, Tensor> out;
  for (const auto& name : m.output_names) out[name] = env.at(name);
  return out;
}

// ---- Model -------------------------------------------------------------------------------

const ModelInfo& Model::info() const {
  static const ModelInfo empty;
  return impl_ ? impl_->info : empty;
}
std::vector<std::string> Model::input_names() const { return impl_ ? impl_->input_names : std::vector<std::string>{}; }
std::vector<std::string> Model::output_names() const { return impl_ ? impl_->output_names : std::vector<std::string>{}; }

std::map<std::string, Tensor> Model::run(const std::map<std::string, Tensor>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  return run_graph(*impl_, inputs, loc);
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  check(inputs.size() == impl_->input_names.size(), kOp, loc, "the model takes ", impl_->input_names.size(),
        " inputs, got ", inputs.size());
  std::map<std::string, Tensor> named;
  for (size_t k = 0; k < inputs.size(); ++k) named[impl_->input_names[k]] = inputs[k];
  std::map<std::string, Tensor> out = run_graph(*impl_, named, loc);
  std::vector<Tensor> result;
  for (const auto& name : impl_->output_names) result.push_back(out.at(name));
  return result;
}

}  // namespace alk::onnx
