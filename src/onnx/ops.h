// What every ONNX op handler shares (src/onnx/ops_*.cpp): the node being imported with its
// inputs and attributes (Ctx), the handler type, and the helpers several op files use. import.cpp
// assembles the handlers into one table and runs the graph.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "onnx/model.h"

namespace alk::onnx {

inline constexpr const char* kOp = "onnx";

// One node being imported: its inputs (undefined tensors for omitted optional ones), typed
// attribute access with the spec's defaults, and errors that name the node.
struct Ctx {
  const Node& node;
  int64_t opset;
  std::vector<Tensor> in;
  Loc loc;
  // Which inputs carry values computed from the graph inputs' data (not only from their shapes
  // or the initializers), and whether a handler read one of those to the host: a model that
  // does cannot replay a recorded program (the read values may differ next call).
  std::vector<char> from_data = {};
  bool reads_data = false;
  const Scope* scope = nullptr;  // the names visible to the node's subgraphs (If, Loop, Scan)
  // The inputs that are sequences or empty optionals (nullptr where input k is a tensor or
  // omitted; `in` holds an undefined tensor there), and the handler's outputs of those kinds by
  // index (its Outs hold undefined tensors there).
  std::vector<const Value*> others = {};
  std::map<size_t, Value> other_outs = {};

  // Every host read of an input's values goes through here (values() and scalar() do).
  void note_read(size_t k) {
    if (k < from_data.size() && from_data[k]) reads_data = true;
  }

  std::string label() const { return "node '" + node.name + "' (" + node.op_type + ")"; }
  template <class... P>
  [[noreturn]] void unsupported(const P&... p) const {
    fail(kUnsupported, loc, label(), ": ", p...);
  }
  template <class... P>
  void require(bool ok, const P&... p) const {
    if (!ok) fail(kOp, loc, label(), ": ", p...);
  }
  // require's failure, for call sites that build costly message parts (shape strings) only
  // when the check fails: `if (!ok) c.fail_with(...)` (handlers run on every call).
  template <class... P>
  [[noreturn]] void fail_with(const P&... p) const {
    fail(kOp, loc, label(), ": ", p...);
  }
  bool has(size_t k) const { return k < in.size() && in[k].defined(); }
  const Value* other(size_t k) const { return k < others.size() ? others[k] : nullptr; }
  const Tensor& x(size_t k) const {
    if (const Value* v = other(k)) fail_with("input ", k, " is a ", kind_name(v->kind), ", this op takes a tensor");
    require(has(k), "input ", k, " is required");
    return in[k];
  }
  // Input k of any kind (a tensor, a sequence, an empty optional); it must be given.
  Value value(size_t k) const {
    if (const Value* v = other(k)) return *v;
    return Value::of(x(k));
  }
  const Attr* attr(const std::string& name) const {
    auto it = node.attrs.find(name);
    return it == node.attrs.end() ? nullptr : &it->second;
  }
  int64_t i(const std::string& name, int64_t def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Int, "attribute ", name, " is not an int");
    return a->i;
  }
  double f(const std::string& name, double def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Float || a->kind == Attr::Int, "attribute ", name, " is not a float");
    return a->kind == Attr::Float ? a->f : static_cast<double>(a->i);
  }
  std::string s(const std::string& name, const std::string& def) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::String, "attribute ", name, " is not a string");
    return a->s;
  }
  std::vector<int64_t> ints(const std::string& name, std::vector<int64_t> def = {}) const {
    const Attr* a = attr(name);
    if (!a) return def;
    require(a->kind == Attr::Ints, "attribute ", name, " is not a list of ints");
    return a->ints;
  }
  // An integer tensor's values (shapes, axes, repeats), read back to the host.
  std::vector<int64_t> values(size_t k) {
    note_read(k);
    const Tensor& t = x(k);
    require(is_integral(t.dtype()), "input ", k, " must be an integer tensor, got ", dtype_name(t.dtype()));
    require(t.numel() <= kMaxShapeValues, "input ", k, " holds ", t.numel(), " values, too many for a shape");
    return t.to_vector<int64_t>(loc);
  }
  double scalar(size_t k) {
    note_read(k);
    const Tensor& t = x(k);
    if (!(t.numel() == 1)) fail_with("input ", k, " must hold one value, has shape ", to_string(t.shape()));
    return t.to_vector<double>(loc)[0];
  }
  int64_t axis(int64_t a, int64_t rank) const {
    require(rank > 0 && a >= -rank && a < rank, "axis ", a, " is out of range for rank ", rank);
    return a < 0 ? a + rank : a;
  }
  Shape checked(Shape s) const {
    checked_numel(s, label(), loc);
    return s;
  }
};

// A graph-valued attribute (If's branches, the bodies of Loop, Scan and SequenceMap).
inline const Graph& graph_attr(const Ctx& c, const std::string& name) {
  const Attr* a = c.attr(name);
  c.require(a && a->kind == Attr::GraphValue && a->graph, "attribute ", name, " (a graph) is required");
  return *a->graph;
}

using Outs = std::vector<Tensor>;
using Handler = std::function<Outs(Ctx&)>;

// A handler's outputs of any kind: the tensors returned, the others put in c.other_outs.
inline Outs outputs_of(Ctx& c, std::vector<Value> values) {
  Outs outs(values.size());
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k].kind == Value::Kind::Tensor) outs[k] = std::move(values[k].tensor);
    else c.other_outs[k] = std::move(values[k]);
  }
  return outs;
}

inline bool is_float(const Tensor& t) { return is_floating(t.dtype()); }

// A one-element floating-point constant (a Constant node's or an initializer's: the 3 and 6 of
// a hardswish written out, an epsilon) as alk's lazy constant, which fusion writes into a kernel
// as a literal instead of reading a one-element buffer broadcast over the output.
inline Tensor scalar_as_constant(const Tensor& t) {
  if (!t.defined() || t.numel() != 1 || !is_float(t)) return t;
  return full(t.shape(), t.to_vector<double>()[0], t.dtype());
}

inline Tensor reverse(const Tensor& x, int64_t dim) {
  const int64_t n = x.shape()[static_cast<size_t>(dim)];
  if (n <= 1) return x;
  return index_select(x, dim, arange(static_cast<double>(n - 1), -1.0, -1.0, DType::I64));
}

// Integer division truncating toward zero (C, ONNX) of values computed in f64.
inline Tensor trunc_(const Tensor& v) { return where(v < 0, ceil(v), floor(v)); }

inline Tensor fix_negative_indices(const Tensor& idx, int64_t n) {
  Tensor i = idx.dtype() == DType::I64 ? idx : idx.to(DType::I64);
  return where(i < 0, i + n, i);
}

// By op type; ops of another domain than the default one as "domain:op_type".
using HandlerTable = std::unordered_map<std::string, Handler>;

// Elementwise handlers from a table op.
inline Handler unary(Tensor (*f)(const Operand&, Loc)) {
  return [f](Ctx& c) { return Outs{f(c.x(0), c.loc)}; };
}
inline Handler binary(Tensor (*f)(const Operand&, const Operand&, Loc)) {
  return [f](Ctx& c) { return Outs{f(c.x(0), c.x(1), c.loc)}; };
}
inline Handler unary_fn(std::function<Tensor(const Ctx&, const Tensor&)> f) {
  return [f](Ctx& c) {
    c.require(is_float(c.x(0)), "needs a floating-point input, got ", dtype_name(c.x(0).dtype()));
    return Outs{f(c, c.x(0))};
  };
}
inline Handler variadic(Tensor (*f)(const Operand&, const Operand&, Loc), bool mean) {
  return [f, mean](Ctx& c) {
    c.require(!c.in.empty(), "needs at least one input");
    Tensor acc = c.x(0);
    for (size_t k = 1; k < c.in.size(); ++k) acc = f(acc, c.x(k), c.loc);
    if (mean) acc = acc / static_cast<double>(c.in.size());
    if (c.in.size() == 1) acc = acc.contiguous();
    return Outs{acc};
  };
}

// Each ops_*.cpp adds its op types.
void add_elementwise_ops(HandlerTable& h);  // ops_elementwise.cpp: math, logic, matmul, einsum, reductions
void add_shape_ops(HandlerTable& h);        // ops_shape.cpp: reshaping, slicing, gathering, creating
void add_nn_ops(HandlerTable& h);           // ops_nn.cpp: normalization, convolution, pooling, losses
void add_more_ops(HandlerTable& h);         // ops_more.cpp: Resize, RNN/GRU/LSTM, scatter/gather, NMS, ...
void add_control_ops(HandlerTable& h);      // ops_control.cpp: If, Loop, Scan (subgraphs)
void add_signal_ops(HandlerTable& h);       // ops_signal.cpp: DFT, STFT
void add_quant_ops(HandlerTable& h);        // ops_quant.cpp: QuantizeLinear, QLinearConv, MatMulInteger, ...
void add_sequence_ops(HandlerTable& h);     // ops_sequence.cpp: Sequence*, SplitToSequence, Optional*
void add_training_ops(HandlerTable& h);     // ops_training.cpp: ai.onnx.preview.training's Adagrad, Momentum, Adam
void add_text_ops(HandlerTable& h);         // ops_text.cpp: TfIdfVectorizer
void add_sampling_ops(HandlerTable& h);     // ops_sampling.cpp: GridSample, RoiAlign

// Conv (ops_nn.cpp), which ConvInteger and QLinearConv run on zero-point-shifted values.
Outs op_conv(Ctx& c);

}  // namespace alk::onnx
