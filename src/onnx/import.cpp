// ONNX nodes as alk Tensor ops. Each op type has one handler taking the node's inputs (undefined
// tensors for omitted optional ones) and returning its outputs; everything stays lazy except the
// small integer tensors that hold shapes, axes and counts, which are read back when a node needs
// them (so shape inference happens with the actual, possibly symbolic-in-the-file, input shapes).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "alk/compile.h"
#include "graph/graph.h"
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
    add_control_ops(h);
    add_signal_ops(h);
    add_quant_ops(h);
    add_sequence_ops(h);
    add_training_ops(h);
    add_text_ops(h);
    add_sampling_ops(h);
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

namespace {

// Runs `nodes` in scope `env` (their outputs are added to it). `outputs`: the graph's outputs,
// counted as readers.
void run_nodes(const std::vector<Node>& nodes, const std::vector<std::string>& outputs, Scope& env, int64_t opset,
               Loc loc, bool* reads_data) {
  // A Conv (group 1) reading x * s, s one value per input channel ([1, C, 1, 1], batch 1): the
  // squeeze-excitation blocks of MobileNetV3/PP-LCNet. conv(x * s, W) == conv(x, W * s), and W
  // * s ([O, C, kh, kw]) is a fraction of x's size, so when the product has no other reader the
  // Conv runs on x with scaled weights and the product is never computed (cls: 9 of these,
  // each a broadcast multiply over a whole feature map through the evaluator's strided path).
  std::unordered_map<std::string, const Node*> producer;
  std::unordered_map<std::string, int> readers;
  for (const auto& node : nodes) {
    for (const auto& name : node.outputs) producer[name] = &node;
    for (const auto& name : node.inputs) ++readers[name];
    for (const auto& name : node.outer_names) ++readers[name];
  }
  for (const auto& name : outputs) ++readers[name];
  auto channel_scaled = [&](const Node& conv, Tensor* x, Tensor* w) {
    if (conv.op_type != "Conv" || conv.inputs.size() < 2 || readers[conv.inputs[0]] != 1) return false;
    auto g = conv.attrs.find("group");
    if (g != conv.attrs.end() && !(g->second.kind == Attr::Int && g->second.i == 1)) return false;
    auto p = producer.find(conv.inputs[0]);
    if (p == producer.end() || p->second->op_type != "Mul" || p->second->inputs.size() != 2) return false;
    const Tensor& a = env.at(p->second->inputs[0]);
    const Tensor& b = env.at(p->second->inputs[1]);
    const Tensor& wt = env.at(conv.inputs[1]);
    if (wt.dim() != 4 || !is_floating(wt.dtype())) return false;
    const int64_t C = wt.shape()[1];
    const Shape per_channel{1, C, 1, 1};
    for (int side = 0; side < 2; ++side) {
      const Tensor& v = side == 0 ? a : b;
      const Tensor& sc = side == 0 ? b : a;
      if (sc.shape() != per_channel || v.dim() != 4 || v.shape()[0] != 1 || v.shape()[1] != C ||
          v.dtype() != wt.dtype() || sc.dtype() != wt.dtype())
        continue;
      *x = v;
      *w = wt * sc;
      return true;
    }
    return false;
  };
  for (const auto& node : nodes) {
    auto h = handlers().find(node.domain.empty() ? node.op_type : node.domain + ":" + node.op_type);
    if (h == handlers().end()) {
      if (node.domain.empty()) fail(kUnsupported, loc, "op ", node.op_type, " is not supported");
      fail(kUnsupported, loc, "node '", node.name, "': op ", node.op_type, " of domain ", node.domain, " is not supported");
    }
    Ctx c{node, opset, {}, loc};
    c.scope = &env;
    bool any_from_data = false;
    for (const auto& name : node.inputs) {
      const Value* other = name.empty() ? nullptr : env.other(name);
      c.others.push_back(other);
      c.in.push_back(name.empty() || other ? Tensor() : env.at(name));
      c.from_data.push_back(!name.empty() && env.is_from_data(name));
      any_from_data = any_from_data || c.from_data.back();
    }
    for (const auto& name : node.outer_names) any_from_data = any_from_data || env.is_from_data(name);
    Tensor unscaled, scaled_w;
    if (channel_scaled(node, &unscaled, &scaled_w)) {
      c.in[0] = unscaled;
      c.in[1] = scaled_w;
      c.from_data[1] = c.from_data[1] || c.from_data[0];  // the weights now carry the scale
    }
    Outs outs = h->second(c);
    if (reads_data && c.reads_data) *reads_data = true;
    const bool shape_only = node.op_type == "Shape" || node.op_type == "Size";
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k].empty()) continue;
      if (auto it = c.other_outs.find(k); it != c.other_outs.end()) {
        env.set(node.outputs[k], std::move(it->second));
        if (any_from_data) env.from_data.insert(node.outputs[k]);
        continue;
      }
      if (k >= outs.size() || !outs[k].defined()) c.unsupported("output ", k, " ('", node.outputs[k], "')");
      checked_numel(outs[k].shape(), c.label(), loc);
      // An empty result needs no kernel (and some backends have none for empty inputs).
      if (outs[k].numel() == 0 && !outs[k].is_realized())
        outs[k] = zeros(outs[k].shape(), outs[k].dtype()).contiguous();
      env.values[node.outputs[k]] = outs[k];
      if (any_from_data && !shape_only) env.from_data.insert(node.outputs[k]);
    }
  }
}

}  // namespace

std::string_view kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Tensor: return "tensor";
    case Value::Kind::Sequence: return "sequence";
    case Value::Kind::None: return "empty optional";
  }
  return "?";
}

std::map<std::string, Value> run_graph_values(const ModelImpl& m, const std::map<std::string, Value>& inputs, Loc loc,
                                              bool* reads_data) {
  Scope env;
  // Names whose values depend on the inputs' data (see Ctx::from_data): the inputs, and what
  // is computed from them, except Shape and Size, whose results depend on shapes only.
  Device* device = nullptr;
  for (const auto& name : m.input_names) {
    auto it = inputs.find(name);
    check(it != inputs.end() && (it->second.kind != Value::Kind::Tensor || it->second.tensor.defined()), kOp, loc,
          "input '", name, "' is not given");
    const Value& v = it->second;
    if (!device && v.kind == Value::Kind::Tensor) device = &v.tensor.device();
    if (!device && v.kind == Value::Kind::Sequence && !v.items.empty()) device = &v.items[0].device();
    for (const Tensor& t : v.items) check(t.defined(), kOp, loc, "input '", name, "' holds an undefined tensor");
    env.set(name, v);
  }
  for (const auto& [name, v] : inputs) {
    check(env.values.count(name) || env.others.count(name) || m.initializers.count(name), kOp, loc, "'", name,
          "' is not an input of the model");
    env.from_data.insert(name);
  }
  if (!device) device = &default_device();
  DeviceGuard on(*device);
  for (const auto& [name, t] : m.initializers) {
    auto it = inputs.find(name);  // an input may override an initializer's default
    if (it == inputs.end()) env.values[name] = scalar_as_constant(t).to(*device);
    else env.set(name, it->second);
  }
  if (reads_data) *reads_data = false;
  run_nodes(m.nodes, m.output_names, env, m.info.opset, loc, reads_data);
  std::map<std::string, Value> out;
  for (const auto& name : m.output_names) out[name] = env.value(name);
  return out;
}

std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc,
                                        bool* reads_data) {
  std::map<std::string, Value> given;
  for (const auto& [name, t] : inputs) given[name] = Value::of(t);
  std::map<std::string, Tensor> out;
  for (auto& [name, v] : run_graph_values(m, given, loc, reads_data)) {
    check(v.kind == Value::Kind::Tensor, kOp, loc, "output '", name, "' is a ", kind_name(v.kind),
          " (Model::run_values gives outputs of every kind)");
    out[name] = v.tensor;
  }
  return out;
}

std::vector<Value> run_subgraph(const Graph& g, const Scope& outer, const std::vector<Value>& inputs,
                                const std::vector<char>& inputs_from_data, int64_t opset, Loc loc, bool* reads_data) {
  check(inputs.size() == g.input_names.size(), kOp, loc, "a subgraph with ", g.input_names.size(), " inputs was given ",
        inputs.size());
  Scope env;
  env.parent = &outer;
  for (const auto& [name, t] : g.initializers) env.values[name] = scalar_as_constant(t).to(default_device());
  for (size_t k = 0; k < inputs.size(); ++k) {
    env.set(g.input_names[k], inputs[k]);
    if (k < inputs_from_data.size() && inputs_from_data[k]) env.from_data.insert(g.input_names[k]);
  }
  bool reads = false;
  run_nodes(g.nodes, g.output_names, env, opset, loc, &reads);
  if (reads_data && reads) *reads_data = true;
  std::vector<Value> out;
  for (const auto& name : g.output_names) out.push_back(env.value(name));
  return out;
}

namespace {

bool replay_disabled_by_env() {
  static const bool off = [] {
    const char* v = std::getenv("ALK_ONNX_EAGER");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return off;
}

// The cache key: each given input's name, dtype, shape and device.
std::string signature(const std::map<std::string, Tensor>& inputs) {
  std::string key;
  for (const auto& [name, t] : inputs) {
    key += name;
    key += '\0';
    key += std::to_string(static_cast<int>(t.dtype()));
    for (int64_t d : t.shape()) key += ',' + std::to_string(d);
    key += '@' + std::to_string(reinterpret_cast<uintptr_t>(&t.device()));
    key += '\n';
  }
  return key;
}

// A private copy of an input for the traced call: the program keeps the buffers it traced
// with and each replay copies its new inputs into them, which must not be the caller's.
Tensor private_copy(const Tensor& t) {
  const std::vector<unsigned char> bytes = host_bytes(t);
  return tensor_from_host(bytes.data(), t.shape(), t.dtype(), t.device());
}

}  // namespace

std::map<std::string, Tensor> run_cached(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc) {
  bool eligible = !replay_disabled_by_env() && !inside_compiled_step();
  for (const auto& [name, t] : inputs) eligible = eligible && t.defined() && !(t.requires_grad() && is_grad_enabled());
  ProgramCache& cache = m.programs;
  std::unique_lock lock(cache.mutex, std::try_to_lock);  // busy (another thread's call): run uncached
  if (!eligible || !lock.owns_lock()) return run_graph(m, inputs, loc, nullptr);
  const std::string key = signature(inputs);
  auto it = cache.entries.find(key);
  if (it == cache.entries.end()) {
    if (cache.entries.size() >= ProgramCache::kMaxEntries) {
      auto oldest = std::min_element(cache.entries.begin(), cache.entries.end(),
                                     [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
      cache.entries.erase(oldest);
    }
    it = cache.entries.emplace(key, ProgramCache::Entry{}).first;
  }
  ProgramCache::Entry& e = it->second;
  e.last_use = ++cache.uses;
  if (e.data_dependent) return run_graph(m, inputs, loc, nullptr);
  if (!e.program) {
    // The names of the inputs, in the map's (sorted) order, for the step's positional inputs.
    auto names = std::make_shared<std::vector<std::string>>();
    for (const auto& [name, t] : inputs) names->push_back(name);
    bool* data_dependent = &e.data_dependent;
    e.program = std::make_unique<Program>([&m, names, data_dependent, loc](const std::vector<Tensor>& in) {
      std::map<std::string, Tensor> named;
      for (size_t k = 0; k < in.size(); ++k) named[(*names)[k]] = in[k];
      bool reads = false;
      for (auto& [name, t] : run_graph(m, named, loc, &reads)) capture(name, t);
      *data_dependent = *data_dependent || reads;
    });
  }
  std::vector<Tensor> positional;
  for (const auto& [name, t] : inputs) positional.push_back(e.calls == 1 ? private_copy(t) : t);
  (*e.program)(positional, loc);
  ++e.calls;
  std::map<std::string, Tensor> out;
  for (const auto& name : m.output_names) out[name] = e.program->captured(name, loc);
  if (e.data_dependent) e.program.reset();  // found on the warm-up call: every later call runs uncached
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
  return replay_ ? run_cached(*impl_, inputs, loc) : run_graph(*impl_, inputs, loc, nullptr);
}

std::map<std::string, Value> Model::run_values(const std::map<std::string, Value>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  bool all_tensors = true;
  for (const auto& v : impl_->info.outputs) all_tensors = all_tensors && v.kind == ValueInfo::Kind::Tensor;
  for (const auto& [name, v] : inputs) all_tensors = all_tensors && v.kind == Value::Kind::Tensor;
  if (!all_tensors) return run_graph_values(*impl_, inputs, loc, nullptr);
  std::map<std::string, Tensor> given;
  for (const auto& [name, v] : inputs) given[name] = v.tensor;
  std::map<std::string, Value> out;
  for (auto& [name, t] : run(given, loc)) out[name] = Value::of(t);
  return out;
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs, Loc loc) const {
  check(impl_ != nullptr, kOp, loc, "empty model (not loaded)");
  check(inputs.size() == impl_->input_names.size(), kOp, loc, "the model takes ", impl_->input_names.size(),
        " inputs, got ", inputs.size());
  std::map<std::string, Tensor> named;
  for (size_t k = 0; k < inputs.size(); ++k) named[impl_->input_names[k]] = inputs[k];
  std::map<std::string, Tensor> out = run(named, loc);
  std::vector<Tensor> result;
  for (const auto& name : impl_->output_names) result.push_back(out.at(name));
  return result;
}

}  // namespace alk::onnx
