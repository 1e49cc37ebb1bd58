// Sequences and optionals (Value::Kind::Sequence and None): a sequence is a host list of lazy
// tensors, so these ops build lists and never launch kernels, except ConcatFromSequence and
// SplitToSequence, which are Concat and Split over the list. Positions are read to the host.
#include "onnx/ops.h"

namespace alk::onnx {

namespace {

// Input k as a sequence (it must be one).
const std::vector<Tensor>& sequence_in(const Ctx& c, size_t k) {
  const Value* v = c.other(k);
  if (!v || v->kind != Value::Kind::Sequence)
    c.fail_with("input ", k, " must be a sequence, got ", v ? kind_name(v->kind) : c.has(k) ? "a tensor" : "nothing");
  return v->items;
}

// A position (input k) in [-n, n - 1], or [-n, n] where the end itself is allowed (insert).
size_t position(Ctx& c, size_t k, size_t n, bool end_allowed) {
  const auto p = static_cast<int64_t>(c.scalar(k));
  const auto len = static_cast<int64_t>(n);
  if (!(p >= -len && (end_allowed ? p <= len : p < len)))
    c.fail_with("position ", p, " is out of range for a sequence of ", n, " tensors");
  return static_cast<size_t>(p < 0 ? p + len : p);
}

Outs sequence_result(Ctx& c, std::vector<Tensor> items) { return outputs_of(c, {Value::sequence(std::move(items))}); }

void require_same_dtype(const Ctx& c, const std::vector<Tensor>& items, const Tensor& t) {
  if (!items.empty() && items[0].dtype() != t.dtype())
    c.fail_with("a ", dtype_name(t.dtype()), " tensor in a sequence of ", dtype_name(items[0].dtype()));
}

Outs sequence_empty(Ctx& c) { return sequence_result(c, {}); }

Outs sequence_construct(Ctx& c) {
  std::vector<Tensor> items;
  for (size_t k = 0; k < c.in.size(); ++k) {
    require_same_dtype(c, items, c.x(k));
    items.push_back(c.x(k));
  }
  return sequence_result(c, std::move(items));
}

Outs sequence_insert(Ctx& c) {
  std::vector<Tensor> items = sequence_in(c, 0);
  const Tensor& t = c.x(1);
  require_same_dtype(c, items, t);
  const size_t at = c.has(2) ? position(c, 2, items.size(), true) : items.size();
  items.insert(items.begin() + static_cast<std::ptrdiff_t>(at), t);
  return sequence_result(c, std::move(items));
}

Outs sequence_at(Ctx& c) {
  const std::vector<Tensor>& items = sequence_in(c, 0);
  return {items[position(c, 1, items.size(), false)]};
}

Outs sequence_erase(Ctx& c) {
  std::vector<Tensor> items = sequence_in(c, 0);
  c.require(!items.empty(), "the sequence is empty");
  const size_t at = c.has(1) ? position(c, 1, items.size(), false) : items.size() - 1;
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
  return sequence_result(c, std::move(items));
}

Outs sequence_length(Ctx& c) {
  return {full({}, static_cast<double>(sequence_in(c, 0).size()), DType::I64)};
}

// SplitToSequence(input, split?): pieces along axis: of size 1 (squeezed unless keepdims), of
// the size `split` holds (the last one shorter), or of the sizes a 1-D `split` lists.
Outs split_to_sequence(Ctx& c) {
  const Tensor& x = c.x(0);
  const int64_t axis = c.axis(c.i("axis", 0), x.dim());
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (!c.has(1)) {
    if (n > kMaxShapeValues) c.fail_with("splits into ", n, " pieces, more than ", kMaxShapeValues);
    sizes.assign(static_cast<size_t>(n), 1);
    squeeze = c.i("keepdims", 1) == 0;
  } else if (c.x(1).dim() == 0) {
    const int64_t each = c.values(1)[0];
    c.require(each > 0 && (n + each - 1) / each <= kMaxShapeValues, "split ", each, " must be positive and give at most ",
              kMaxShapeValues, " pieces of ", n);
    for (int64_t at = 0; at < n; at += each) sizes.push_back(std::min(each, n - at));
  } else {
    sizes = c.values(1);
    int64_t total = 0;
    for (int64_t s : sizes) c.require(s >= 0, "negative split size"), total += s;
    if (total != n) c.fail_with("split sizes ", to_string(sizes), " do not add up to ", n);
  }
  if (static_cast<int64_t>(sizes.size()) > kMaxShapeValues)
    c.fail_with("splits into ", sizes.size(), " pieces, more than ", kMaxShapeValues);
  std::vector<Tensor> items;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Tensor piece = x.slice(axis, at, at + s, 1, c.loc);
    items.push_back(squeeze ? piece.squeeze(axis, c.loc) : piece);
    at += s;
  }
  return sequence_result(c, std::move(items));
}

// ConcatFromSequence(seq): Concat along axis, or with new_axis=1 Stack along a new axis.
Outs concat_from_sequence(Ctx& c) {
  const std::vector<Tensor>& items = sequence_in(c, 0);
  c.require(!items.empty(), "the sequence is empty (the result's shape is unknown)");
  const bool new_axis = c.i("new_axis", 0) != 0;
  const int64_t rank = items[0].dim() + (new_axis ? 1 : 0);
  const int64_t axis = c.axis(c.i("axis", 0), rank);
  if (new_axis) return {stack(items, axis, c.loc)};
  if (items.size() == 1) return {items[0].contiguous()};
  return {cat(items, axis, c.loc)};
}

// Optional(input?): the input, or an empty optional when there is none.
Outs optional(Ctx& c) {
  if (c.other(0) || c.has(0)) return outputs_of(c, {c.value(0)});
  return outputs_of(c, {Value::none()});
}

Outs optional_has_element(Ctx& c) {
  const bool present = (c.other(0) && c.other(0)->kind != Value::Kind::None) || c.has(0);
  return {full({}, present ? 1.0 : 0.0, DType::Bool)};
}

Outs optional_get_element(Ctx& c) {
  if (const Value* v = c.other(0); v && v->kind == Value::Kind::None) c.fail_with("the optional is empty");
  return outputs_of(c, {c.value(0)});
}

// SequenceMap(seq, more...): the body once per element of seq, taking the element of each
// sequence input at that index and each tensor input whole; each body output gathered into a
// sequence.
Outs sequence_map(Ctx& c) {
  const Graph& body = graph_attr(c, "body");
  const size_t n = sequence_in(c, 0).size();
  c.require(body.input_names.size() == c.in.size(), "the body takes ", body.input_names.size(), " inputs, the node gives ",
            c.in.size());
  c.require(body.output_names.size() == c.node.outputs.size(), "the body gives ", body.output_names.size(),
            " outputs, the node has ", c.node.outputs.size());
  std::vector<std::vector<Tensor>> gathered(body.output_names.size());
  for (size_t i = 0; i < n; ++i) {
    std::vector<Value> in;
    for (size_t k = 0; k < c.in.size(); ++k) {
      const Value v = c.value(k);
      if (v.kind == Value::Kind::Sequence && v.items.size() != n)
        c.fail_with("sequence input ", k, " has ", v.items.size(), " tensors, input 0 has ", n);
      if (v.kind == Value::Kind::None) c.fail_with("input ", k, " is an empty optional");
      in.push_back(v.kind == Value::Kind::Sequence ? Value::of(v.items[i]) : v);
    }
    bool reads = false;
    std::vector<Value> out = run_subgraph(body, *c.scope, in, c.from_data, c.opset, c.loc, &reads);
    c.reads_data = c.reads_data || reads;
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].kind != Value::Kind::Tensor) c.fail_with("the body's output ", k, " is a ", kind_name(out[k].kind));
      gathered[k].push_back(out[k].tensor);
    }
  }
  std::vector<Value> outs;
  for (auto& list : gathered) outs.push_back(Value::sequence(std::move(list)));
  return outputs_of(c, std::move(outs));
}

}  // namespace

void add_sequence_ops(HandlerTable& h) {
  h["SequenceEmpty"] = sequence_empty;
  h["SequenceConstruct"] = sequence_construct;
  h["SequenceInsert"] = sequence_insert;
  h["SequenceAt"] = sequence_at;
  h["SequenceErase"] = sequence_erase;
  h["SequenceLength"] = sequence_length;
  h["SplitToSequence"] = split_to_sequence;
  h["ConcatFromSequence"] = concat_from_sequence;
  h["Optional"] = optional;
  h["OptionalHasElement"] = optional_has_element;
  h["OptionalGetElement"] = optional_get_element;
  h["SequenceMap"] = sequence_map;
}

}  // namespace alk::onnx
