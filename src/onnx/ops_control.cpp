// Control flow: If, Loop and Scan, whose bodies are subgraphs (Attr::graph) run in a scope
// inside the node's (run_subgraph), so they read the outer graph's values by name. If and
// Loop decide on the host: the condition and the trip count are read back (a model whose
// branch or trip count comes from its inputs' data is marked data-dependent and is not
// replayed from a recording); Scan's length is a shape, so it stays lazy.
#include "onnx/ops.h"

namespace alk::onnx {

namespace {

bool truth(Ctx& c, size_t k) { return c.scalar(k) != 0; }

// A subgraph's outputs must be the node's: each defined, as many as the node has.
void check_outputs(const Ctx& c, const std::vector<Value>& outs, size_t want, const char* what) {
  if (outs.size() != want) c.fail_with(what, " gives ", outs.size(), " outputs, the node has ", want);
  for (size_t k = 0; k < outs.size(); ++k)
    if (outs[k].kind == Value::Kind::Tensor && !outs[k].tensor.defined()) c.fail_with(what, "'s output ", k, " is undefined");
}

const Tensor& tensor_output(const Ctx& c, const Value& v, size_t k, const char* what) {
  if (v.kind != Value::Kind::Tensor) c.fail_with(what, "'s output ", k, " is a ", kind_name(v.kind), ", not a tensor");
  return v.tensor;
}

Outs if_op(Ctx& c) {
  const Graph& branch = graph_attr(c, truth(c, 0) ? "then_branch" : "else_branch");
  bool reads = false;
  std::vector<Value> outs = run_subgraph(branch, *c.scope, {}, {}, c.opset, c.loc, &reads);
  c.reads_data = c.reads_data || reads;
  check_outputs(c, outs, c.node.outputs.size(), "the branch");
  return outputs_of(c, std::move(outs));
}

// Loop(M, cond, v...) with body(i, cond, v...) -> (cond, v..., scan...): runs while i < M and
// cond (either may be omitted), each scan output stacked along a new first axis.
Outs loop_op(Ctx& c) {
  const Graph& body = graph_attr(c, "body");
  const size_t carried = c.in.size() >= 2 ? c.in.size() - 2 : 0;
  c.require(body.input_names.size() == carried + 2, "the body takes ", body.input_names.size(),
            " inputs, the loop carries ", carried, " values (+ iteration number and condition)");
  c.require(body.output_names.size() >= carried + 1, "the body gives ", body.output_names.size(),
            " outputs, fewer than the condition and ", carried, " carried values");
  const size_t scans = body.output_names.size() - 1 - carried;
  c.require(c.node.outputs.size() == carried + scans, "the node has ", c.node.outputs.size(), " outputs, the body ",
            carried, " carried + ", scans, " scan");
  const int64_t trips = c.has(0) ? static_cast<int64_t>(c.scalar(0)) : -1;
  bool cond = c.has(1) ? truth(c, 1) : true;
  std::vector<Value> values;
  for (size_t k = 0; k < carried; ++k) values.push_back(c.value(2 + k));
  std::vector<char> values_from_data(carried, 0);
  for (size_t k = 0; k < carried; ++k) values_from_data[k] = c.from_data[2 + k];
  std::vector<std::vector<Tensor>> scanned(scans);
  bool cond_from_data = c.has(1) && c.from_data[1];
  for (int64_t i = 0; (trips < 0 || i < trips) && cond; ++i) {
    if (i >= kMaxLoopIterations) c.fail_with("ran ", kMaxLoopIterations, " iterations without stopping");
    std::vector<Value> in = {Value::of(full({}, static_cast<double>(i), DType::I64)), Value::of(full({}, 1.0, DType::Bool))};
    in.insert(in.end(), values.begin(), values.end());
    std::vector<char> in_from_data(2 + carried, 0);
    in_from_data[1] = cond_from_data;
    for (size_t k = 0; k < carried; ++k) in_from_data[2 + k] = values_from_data[k];
    bool reads = false;
    std::vector<Value> out = run_subgraph(body, *c.scope, in, in_from_data, c.opset, c.loc, &reads);
    c.reads_data = c.reads_data || reads;
    check_outputs(c, out, body.output_names.size(), "the body");
    for (size_t k = 0; k < carried; ++k) {
      values[k] = out[1 + k];
      if (values[k].kind == Value::Kind::Tensor) values[k].tensor = values[k].tensor.contiguous();
    }
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(tensor_output(c, out[1 + carried + k], 1 + carried + k, "the body"));
    // The next condition: read back; whether it depends on the data is not tracked through the
    // body, so a loop that stops on a computed condition is taken as data-dependent.
    c.reads_data = true;
    cond = tensor_output(c, out[0], 0, "the body").to_vector<double>(c.loc).at(0) != 0;
    cond_from_data = true;
  }
  if (c.has(0) && c.from_data[0]) c.reads_data = true;
  if (c.has(1) && c.from_data[1]) c.reads_data = true;
  std::vector<Value> outs = values;
  for (auto& list : scanned)
    // No iteration: an empty tensor (the element shape is unknown without one).
    outs.push_back(Value::of(list.empty() ? zeros({0}, DType::F32) : stack(list, 0, c.loc)));
  return outputs_of(c, std::move(outs));
}

// Scan(states..., inputs...) with body(states..., slices...) -> (states..., outputs...): one
// iteration per slice of the scan inputs along their axes (forward or reversed), the outputs'
// slices stacked along theirs. Opset 8's form has a batch axis first on every input and output
// (and an optional sequence_lens input before them): each batch item is scanned alone.
Outs scan_items(Ctx& c, const Graph& body, std::vector<Tensor> states, const std::vector<Tensor>& xs,
                const std::vector<char>& from_data, const std::vector<int64_t>& in_axes,
                const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes,
                const std::vector<int64_t>& out_dirs) {
  const size_t n_state = states.size(), n_scan = xs.size(), n_out = body.output_names.size() - n_state;
  int64_t length = -1;
  std::vector<int64_t> axes(n_scan);
  for (size_t j = 0; j < n_scan; ++j) {
    axes[j] = c.axis(in_axes[j], xs[j].dim());
    const int64_t len = xs[j].shape()[static_cast<size_t>(axes[j])];
    if (length >= 0 && len != length) c.fail_with("scan input ", j, " has ", len, " steps, input 0 has ", length);
    length = len;
  }
  if (length > kMaxLoopIterations) c.fail_with("scans ", length, " steps, more than ", kMaxLoopIterations);
  std::vector<std::vector<Tensor>> scanned(n_out);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Value> in;
    for (const Tensor& s : states) in.push_back(Value::of(s));
    for (size_t j = 0; j < n_scan; ++j) in.push_back(Value::of(xs[j].select(axes[j], in_dirs[j] ? length - 1 - t : t)));
    bool reads = false;
    std::vector<Value> out = run_subgraph(body, *c.scope, in, from_data, c.opset, c.loc, &reads);
    c.reads_data = c.reads_data || reads;
    check_outputs(c, out, body.output_names.size(), "the body");
    for (size_t k = 0; k < n_state; ++k) states[k] = tensor_output(c, out[k], k, "the body");
    for (size_t k = 0; k < n_out; ++k) scanned[k].push_back(tensor_output(c, out[n_state + k], n_state + k, "the body"));
  }
  Outs outs = states;
  for (size_t k = 0; k < n_out; ++k) {
    c.require(length > 0, "a scan of 0 steps (its outputs' shapes are unknown)");
    std::vector<Tensor>& list = scanned[k];
    if (out_dirs[k]) std::reverse(list.begin(), list.end());
    const int64_t rank = list[0].dim() + 1;
    outs.push_back(stack(list, c.axis(out_axes[k], rank), c.loc));
  }
  return outs;
}

Outs scan_op(Ctx& c) {
  const Graph& body = graph_attr(c, "body");
  const bool batched = c.opset < 9;
  const size_t first = batched ? 1 : 0;  // opset 8: sequence_lens, then the states
  c.require(c.in.size() > first, "needs inputs");
  const int64_t m = c.i("num_scan_inputs", -1);
  const size_t given = c.in.size() - first;
  c.require(m >= 1 && m <= static_cast<int64_t>(given), "num_scan_inputs ", m, " must be in [1, ", given, "]");
  const size_t n_scan = static_cast<size_t>(m), n_state = given - n_scan;
  c.require(body.input_names.size() == given, "the body takes ", body.input_names.size(), " inputs, the node gives ",
            given);
  c.require(body.output_names.size() >= n_state, "the body gives fewer outputs than the ", n_state, " states");
  const size_t n_out = body.output_names.size() - n_state;
  c.require(c.node.outputs.size() == body.output_names.size(), "the node has ", c.node.outputs.size(),
            " outputs, the body ", body.output_names.size());
  const std::vector<int64_t> in_axes = c.ints("scan_input_axes", std::vector<int64_t>(n_scan, 0));
  const std::vector<int64_t> in_dirs =
      c.ints(batched ? "directions" : "scan_input_directions", std::vector<int64_t>(n_scan, 0));
  const std::vector<int64_t> out_axes = c.ints("scan_output_axes", std::vector<int64_t>(n_out, 0));
  const std::vector<int64_t> out_dirs = c.ints("scan_output_directions", std::vector<int64_t>(n_out, 0));
  c.require(in_axes.size() == n_scan && in_dirs.size() == n_scan, "scan input axes/directions need ", n_scan, " values");
  c.require(out_axes.size() == n_out && out_dirs.size() == n_out, "scan output axes/directions need ", n_out, " values");
  std::vector<Tensor> states, xs;
  for (size_t k = 0; k < n_state; ++k) states.push_back(c.x(first + k));
  for (size_t j = 0; j < n_scan; ++j) xs.push_back(c.x(first + n_state + j));
  const std::vector<char> from_data(c.from_data.begin() + static_cast<long>(first), c.from_data.end());
  if (!batched) return scan_items(c, body, states, xs, from_data, in_axes, in_dirs, out_axes, out_dirs);
  // Opset 8: every input has the batch first; the scan axis is the next one.
  if (c.has(0)) c.unsupported("Scan with sequence_lens (opset 8)");
  for (const Tensor& t : states) c.require(t.dim() >= 1, "a batched state needs a batch axis");
  for (const Tensor& t : xs) c.require(t.dim() >= 2, "a batched scan input needs batch and scan axes");
  const int64_t batch = xs[0].shape()[0];
  std::vector<std::vector<Tensor>> per_output(body.output_names.size());
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> sb, xb;
    for (const Tensor& t : states) sb.push_back(t.select(0, b));
    for (const Tensor& t : xs) xb.push_back(t.select(0, b));
    Outs o = scan_items(c, body, sb, xb, from_data, std::vector<int64_t>(n_scan, 0), in_dirs,
                        std::vector<int64_t>(n_out, 0), out_dirs);
    for (size_t k = 0; k < o.size(); ++k) per_output[k].push_back(o[k]);
  }
  Outs outs;
  for (auto& list : per_output) outs.push_back(stack(list, 0, c.loc));
  return outs;
}

}  // namespace

void add_control_ops(HandlerTable& h) {
  h["If"] = if_op;
  h["Loop"] = loop_op;
  h["Scan"] = scan_op;
}

}  // namespace alk::onnx
