#include "opspecs/op_specs.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "alk/nn.h"
#include "alk/op_registry.h"
#include "alk/op_table.h"

namespace alk::opspecs {

namespace {

using json::Value;

// ---- attribute access, checked against the spec before an op runs ----
int64_t int_attr(const Value& a, const char* name) { return a.at(name).as_int(); }
double num_attr(const Value& a, const char* name) { return a.at(name).as_double(); }
bool bool_attr(const Value& a, const char* name) { return a.at(name).as_bool(); }
std::vector<int64_t> ints_attr(const Value& a, const char* name) {
  std::vector<int64_t> out;
  for (const Value& v : a.at(name).as_array()) out.push_back(v.as_int());
  return out;
}
const Tensor& opt(const std::vector<Tensor>& in, size_t i) {
  static const Tensor none;
  return i < in.size() ? in[i] : none;
}

AttributeSpec required(std::string name, std::string type, std::string doc) {
  return {std::move(name), std::move(type), true, Value(), std::move(doc)};
}
AttributeSpec with_default(std::string name, std::string type, Value v, std::string doc) {
  return {std::move(name), std::move(type), false, std::move(v), std::move(doc)};
}
InputSpec tensor_in(std::string name, std::string dtypes = "any", int min_rank = 0, int max_rank = -1) {
  return {std::move(name), std::move(dtypes), min_rank, max_rank};
}
InputSpec optional_in(std::string name, std::string dtypes = "float") {
  InputSpec s{std::move(name), std::move(dtypes)};
  s.optional = true;
  return s;
}

std::string dtype_rule_text(DTypeRule r) {
  switch (r) {
    case DTypeRule::Same: return "operands promoted together; the result has that dtype";
    case DTypeRule::Float: return "operands promoted together, integer and bool results as f32";
    case DTypeRule::Compare: return "operands promoted together; the result is bool";
    case DTypeRule::Logical: return "operands as bool; the result is bool";
    case DTypeRule::Select: return "the first operand bool, the others promoted together";
    case DTypeRule::Integer: return "integer or bool operands promoted together; the result has that dtype";
  }
  return "";
}

OpSpec elementwise_spec(const ElementwiseEntry& e, std::function<Tensor(const std::vector<Tensor>&)> fn) {
  OpSpec s;
  s.name = std::string(e.name);
  s.kind = "elementwise";
  s.op = e.op;
  for (int k = 0; k < e.arity; ++k)
    s.inputs.push_back(tensor_in(e.inputs[static_cast<size_t>(k)], e.rule == DTypeRule::Select && k == 0 ? "bool" : "any"));
  s.differentiable = e.differentiable();
  s.doc = std::string(e.forward) + " elementwise, with broadcasting (" + dtype_rule_text(e.rule) + ")";
  s.call = [fn](const std::vector<Tensor>& in, const Value&, Loc) { return fn(in); };
  return s;
}

// The front-end functions of the template ops, each with the op-table entry it records.
std::vector<OpSpec> template_op_specs() {
  std::vector<OpSpec> v;
  auto add = [&v](std::string name, OpId op, std::vector<InputSpec> inputs, std::vector<AttributeSpec> attrs,
                  std::string doc, std::function<Tensor(const std::vector<Tensor>&, const Value&, Loc)> call) {
    OpSpec s;
    s.name = std::move(name);
    s.kind = "template";
    s.op = op;
    s.inputs = std::move(inputs);
    s.attributes = std::move(attrs);
    s.differentiable = op_differentiable(op);
    s.doc = std::move(doc);
    s.call = std::move(call);
    v.push_back(std::move(s));
  };
  const AttributeSpec axes = with_default("axes", "integer[]", Value(json::Array{}), "dims reduced (empty: all)");
  const AttributeSpec keepdim = with_default("keepdim", "boolean", Value(false), "keep reduced dims as 1");
  using Reduction = Tensor (*)(const Tensor&, std::vector<int64_t>, bool, Loc);
  const std::pair<const char*, Reduction> reductions[] = {
      {"sum", &alk::sum}, {"mean", &alk::mean}, {"max", &alk::max}, {"min", &alk::min}, {"prod", &alk::prod},
      {"logsumexp", &alk::logsumexp}};
  for (const auto& reduction : reductions) {
    const char* name = reduction.first;  // (clang 14 cannot capture a structured binding)
    const Reduction fn = reduction.second;
    add(name, OpId::Reduce, {tensor_in("x")}, {axes, keepdim}, std::string(name) + " over axes",
        [fn](const std::vector<Tensor>& in, const Value& a, Loc loc) {
          return fn(in[0], ints_attr(a, "axes"), bool_attr(a, "keepdim"), loc);
        });
  }
  for (bool is_max : {true, false})
    add(is_max ? "argmax" : "argmin", OpId::ArgReduce, {tensor_in("x")},
        {with_default("dim", "integer", Value(), "the dim (none: over the flattened tensor)"), keepdim},
        std::string("index of the ") + (is_max ? "largest" : "smallest") + " element along dim (i64)",
        [is_max](const std::vector<Tensor>& in, const Value& a, Loc loc) {
          std::optional<int64_t> dim;
          if (!a.at("dim").is_null()) dim = a.at("dim").as_int();
          return is_max ? argmax(in[0], dim, bool_attr(a, "keepdim"), loc) : argmin(in[0], dim, bool_attr(a, "keepdim"), loc);
        });
  add("matmul", OpId::Matmul, {tensor_in("a", "any", 1), tensor_in("b", "any", 1)}, {},
      "matrix product with NumPy's rules (batch dims broadcast, 1-D operands as vectors)",
      [](const std::vector<Tensor>& in, const Value&, Loc loc) { return matmul(in[0], in[1], loc); });
  const AttributeSpec dim = required("dim", "integer", "the dim (negative: from the end)");
  add("softmax", OpId::Softmax, {tensor_in("x", "float", 1)}, {dim}, "exp(x) / sum(exp(x)) along dim",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return softmax(in[0], int_attr(a, "dim"), loc); });
  add("log_softmax", OpId::LogSoftmax, {tensor_in("x", "float", 1)}, {dim}, "log of softmax along dim",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return log_softmax(in[0], int_attr(a, "dim"), loc); });
  add("layer_norm", OpId::LayerNorm, {tensor_in("x", "float", 1), optional_in("weight"), optional_in("bias")},
      {required("normalized_shape", "integer[]", "the trailing dims normalized"),
       with_default("eps", "number", Value(1e-5), "added to the variance")},
      "(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return layer_norm(in[0], ints_attr(a, "normalized_shape"), opt(in, 1), opt(in, 2), num_attr(a, "eps"), loc);
      });
  add("rms_norm", OpId::RmsNorm, {tensor_in("x", "float", 1), optional_in("weight")},
      {required("normalized_shape", "integer[]", "the trailing dims normalized"),
       with_default("eps", "number", Value(1e-6), "added to the mean square")},
      "x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return rms_norm(in[0], ints_attr(a, "normalized_shape"), opt(in, 1), num_attr(a, "eps"), loc);
      });
  add("gather", OpId::Gather, {tensor_in("x"), tensor_in("index", "integer")}, {dim},
      "out[i][j] = x[index[i][j]][j] along dim (torch.gather)",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return gather(in[0], int_attr(a, "dim"), in[1], loc); });
  add("index_select", OpId::IndexSelect, {tensor_in("x", "any", 1), tensor_in("index", "integer", 1, 1)}, {dim},
      "the slices of x at index along dim",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return index_select(in[0], int_attr(a, "dim"), in[1], loc);
      });
  add("embedding", OpId::IndexSelect, {tensor_in("weight", "any", 2, 2), tensor_in("ids", "integer")}, {},
      "the rows of weight at ids",
      [](const std::vector<Tensor>& in, const Value&, Loc loc) { return embedding(in[0], in[1], loc); });
  add("scatter_add", OpId::ScatterAdd, {tensor_in("x"), tensor_in("index", "integer"), tensor_in("src")}, {dim},
      "x with src added at index along dim (repeated indices add up)",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return scatter_add(in[0], int_attr(a, "dim"), in[1], in[2], loc);
      });
  add("one_hot", OpId::OneHot, {tensor_in("ids", "integer")}, {required("num_classes", "integer", "classes")},
      "i64 one-hot rows of num_classes",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return one_hot(in[0], int_attr(a, "num_classes"), loc); });
  for (bool upper : {false, true})
    add(upper ? "triu" : "tril", OpId::Tri, {tensor_in("x", "any", 2)},
        {with_default("k", "integer", Value(int64_t{0}), "the diagonal (positive: above)")},
        std::string("the ") + (upper ? "upper" : "lower") + " triangle of the last two dims, the rest 0",
        [upper](const std::vector<Tensor>& in, const Value& a, Loc loc) {
          return upper ? triu(in[0], int_attr(a, "k"), loc) : tril(in[0], int_attr(a, "k"), loc);
        });
  add("cumsum", OpId::Cumsum, {tensor_in("x", "any", 1)}, {dim}, "running sums along dim",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return cumsum(in[0], int_attr(a, "dim"), loc); });
  add("pad", OpId::Pad, {tensor_in("x")},
      {required("pads", "integer[]", "before/after per dim, last dim first (torch.nn.functional.pad)"),
       with_default("value", "number", Value(0.0), "the fill")},
      "x surrounded by value",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return pad(in[0], ints_attr(a, "pads"), num_attr(a, "value"), loc);
      });
  {
    InputSpec xs = tensor_in("tensors");
    xs.variadic = true;
    add("cat", OpId::Concat, {xs}, {with_default("dim", "integer", Value(int64_t{0}), "the dim joined along")},
        "the tensors joined along dim",
        [](const std::vector<Tensor>& in, const Value& a, Loc loc) { return cat(in, int_attr(a, "dim"), loc); });
  }
  add("scaled_dot_product_attention", OpId::Attention,
      {tensor_in("q", "float", 2), tensor_in("k", "float", 2), tensor_in("v", "float", 2)},
      {with_default("causal", "boolean", Value(true), "mask keys after the query's position"),
       with_default("scale", "number", Value(-1.0), "the logits' scale (negative: 1/sqrt(head dim))")},
      "softmax(q k^T * scale) v, fused",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return scaled_dot_product_attention(in[0], in[1], in[2], bool_attr(a, "causal"), num_attr(a, "scale"), loc);
      });
  add("cross_entropy", OpId::CrossEntropy, {tensor_in("logits", "float", 1), tensor_in("targets", "integer")},
      {with_default("ignore_index", "integer", Value(int64_t{-100}), "targets that count for nothing"),
       with_default("label_smoothing", "number", Value(0.0), "mass spread over all classes")},
      "mean negative log-likelihood of targets under log_softmax(logits), fused",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return nn::cross_entropy(in[0], in[1], int_attr(a, "ignore_index"), num_attr(a, "label_smoothing"), loc);
      });
  add("conv2d", OpId::Conv2d, {tensor_in("x", "float", 4, 4), tensor_in("weight", "float", 4, 4), optional_in("bias")},
      {with_default("stride", "integer", Value(int64_t{1}), ""), with_default("padding", "integer", Value(int64_t{0}), ""),
       with_default("dilation", "integer", Value(int64_t{1}), ""), with_default("groups", "integer", Value(int64_t{1}), "")},
      "2-D convolution of [N, C, H, W] by [O, C / groups, kh, kw]",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        return conv2d(in[0], in[1], opt(in, 2), int_attr(a, "stride"), int_attr(a, "padding"), int_attr(a, "dilation"),
                      int_attr(a, "groups"), loc);
      });
  add("cast", OpId::Cast, {tensor_in("x")}, {required("dtype", "string", "f32 f64 f16 bf16 i64 i32 u8 bool")},
      "x converted to dtype",
      [](const std::vector<Tensor>& in, const Value& a, Loc loc) {
        const std::string& want = a.at("dtype").as_string();
        for (int t = 0; t < kNumDTypes; ++t)
          if (dtype_name(static_cast<DType>(t)) == want) return cast(in[0], static_cast<DType>(t), loc);
        fail("cast", loc, "unknown dtype '", want, "'");
      });
  return v;
}

bool dtype_fits(const std::string& family, DType t) {
  if (family == "any") return true;
  if (family == "float") return is_floating(t);
  if (family == "integer") return is_integral(t);
  if (family == "bool") return t == DType::Bool;
  return false;
}

// attributes with every default filled in, after checking names and types.
Value checked_attributes(const OpSpec& spec, std::string_view text, Loc loc) {
  Value given = text.empty() ? Value(json::Object{}) : json::parse(text, 8, loc);
  check(given.is_object(), spec.name, loc, "attributes must be a JSON object, got ", json::dump(given));
  for (const auto& entry : given.as_object()) {
    const std::string& key = entry.first;  // (not a structured binding: clang 14 cannot capture one)
    const Value& v = entry.second;
    const auto it = std::find_if(spec.attributes.begin(), spec.attributes.end(), [&](auto& a) { return a.name == key; });
    if (it == spec.attributes.end()) {
      std::string known;
      for (const AttributeSpec& a : spec.attributes) known += (known.empty() ? "" : ", ") + a.name;
      fail(spec.name, loc, "no attribute '", key, "' (it takes: ", known.empty() ? "none" : known, ")");
    }
    bool ok = (it->type == "integer" && (v.is_int() || (v.is_null() && !it->required))) ||
              (it->type == "number" && v.is_number()) || (it->type == "boolean" && v.is_bool()) ||
              (it->type == "string" && v.is_string());
    if (it->type == "integer[]" && v.is_array()) {
      ok = v.as_array().size() <= 64;
      for (const Value& x : v.as_array()) ok = ok && x.is_int();
    }
    check(ok, spec.name, loc, "attribute '", key, "' must be ", it->type, ", got ", json::dump(v));
  }
  Value full(json::Object{});
  for (const AttributeSpec& a : spec.attributes) {
    const Value* v = given.find(a.name);
    check(v || !a.required, spec.name, loc, "the attribute '", a.name, "' (", a.type, ") is required");
    full.set(a.name, v ? *v : a.default_value);
  }
  return full;
}

std::vector<std::string> backends_running(OpId op) {
  std::vector<std::string> out;
  for (const OpCoverage* c : op_coverages())
    if (c->support(op).status == OpSupport::Status::Runs) out.push_back(c->backend());
  return out;
}

Value input_json(const InputSpec& in) {
  json::Object o{{"name", Value(in.name)}, {"dtypes", Value(in.dtypes)}, {"min_rank", Value(in.min_rank)}};
  if (in.max_rank >= 0) o.emplace_back("max_rank", Value(in.max_rank));
  if (in.optional) o.emplace_back("optional", Value(true));
  if (in.variadic) o.emplace_back("variadic", Value(true));
  return Value(std::move(o));
}

Value spec_json(const OpSpec& s) {
  json::Array inputs, attrs, devices;
  for (const InputSpec& in : s.inputs) inputs.push_back(input_json(in));
  for (const AttributeSpec& a : s.attributes) {
    json::Object o{{"name", Value(a.name)}, {"type", Value(a.type)}, {"required", Value(a.required)}};
    if (!a.required) o.emplace_back("default", a.default_value);
    if (!a.doc.empty()) o.emplace_back("doc", Value(a.doc));
    attrs.push_back(Value(std::move(o)));
  }
  for (const std::string& b : backends_running(s.op)) devices.push_back(Value(b));
  return Value(json::Object{{"name", Value(s.name)},
                            {"kind", Value(s.kind)},
                            {"kernel", Value(op_name(s.op))},
                            {"inputs", Value(std::move(inputs))},
                            {"attributes", Value(std::move(attrs))},
                            {"outputs", Value(json::Array{Value("y")})},
                            {"differentiable", Value(s.differentiable)},
                            {"doc", Value(s.doc)},
                            {"backends", Value(std::move(devices))}});
}

Value attribute_schema(const AttributeSpec& a) {
  json::Object o;
  if (a.type == "integer[]") {
    o.emplace_back("type", Value("array"));
    o.emplace_back("items", Value(json::Object{{"type", Value("integer")}}));
  } else if (a.type == "integer" && !a.required && a.default_value.is_null()) {
    o.emplace_back("type", Value(json::Array{Value("integer"), Value("null")}));
  } else {
    o.emplace_back("type", Value(a.type));
  }
  if (!a.required) o.emplace_back("default", a.default_value);
  if (!a.doc.empty()) o.emplace_back("description", Value(a.doc));
  return Value(std::move(o));
}

}  // namespace

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = [] {
    std::vector<OpSpec> v;
    // The elementwise table's entries, each bound to its generated front-end function.
#define ALK_CALL_1(name) [](const std::vector<Tensor>& in) { return alk::name(in[0]); }
#define ALK_CALL_2(name) [](const std::vector<Tensor>& in) { return alk::name(in[0], in[1]); }
#define ALK_CALL_3(name) [](const std::vector<Tensor>& in) { return alk::name(in[0], in[1], in[2]); }
#define ALK_EW(name, arity, ...) v.push_back(elementwise_spec(*find_elementwise(#name), ALK_CALL_##arity(name)));
#include "alk/elementwise.def"
#undef ALK_EW
#undef ALK_CALL_1
#undef ALK_CALL_2
#undef ALK_CALL_3
    for (OpSpec& s : template_op_specs()) v.push_back(std::move(s));
    return v;
  }();
  return specs;
}

const OpSpec& find_op_spec(std::string_view name, Loc loc) {
  for (const OpSpec& s : op_specs())
    if (s.name == name) return s;
  std::string near;
  for (const OpSpec& s : op_specs())
    if (s.name.find(name.substr(0, 3)) != std::string::npos) near += (near.empty() ? "" : ", ") + s.name;
  fail("ops", loc, "no op '", name, "' in the registry", near.empty() ? "" : " (near: " + near + ")",
       "; `alk ops --json` lists them");
}

std::string op_specs_json() {
  json::Array ops, kernels;
  for (const OpSpec& s : op_specs()) ops.push_back(spec_json(s));
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    json::Array callers, devices;
    for (const OpSpec& s : op_specs())
      if (s.op == op) callers.push_back(Value(s.name));
    for (const std::string& b : backends_running(op)) devices.push_back(Value(b));
    kernels.push_back(Value(json::Object{{"name", Value(op_name(op))},
                                         {"kind", Value(is_elementwise(op) ? "elementwise" : "template")},
                                         {"differentiable", Value(op_differentiable(op))},
                                         {"needs_backend_kernel", Value(is_elementwise(op) || op_needs_backend_kernel(op))},
                                         {"called_by", Value(std::move(callers))},
                                         {"backends", Value(std::move(devices))}}));
  }
  return json::dump(Value(json::Object{{"ops", Value(std::move(ops))}, {"kernels", Value(std::move(kernels))}}), 1);
}

std::string op_schema_json(std::string_view name, Loc loc) {
  const OpSpec& s = find_op_spec(name, loc);
  json::Array items;
  for (const InputSpec& in : s.inputs) {
    json::Object item{{"$ref", Value("#/$defs/tensor")}, {"title", Value(in.name)}};
    std::string d = "dtypes: " + in.dtypes + ", rank >= " + std::to_string(in.min_rank);
    if (in.max_rank >= 0) d += ", rank <= " + std::to_string(in.max_rank);
    if (in.optional) d += ", optional";
    if (in.variadic) d += ", one or more";
    item.emplace_back("description", Value(d));
    items.push_back(Value(std::move(item)));
  }
  size_t required_inputs = 0;
  for (const InputSpec& in : s.inputs) required_inputs += !in.optional;
  json::Object input_schema{{"type", Value("array")}, {"prefixItems", Value(items)},
                            {"minItems", Value(static_cast<int64_t>(required_inputs))}};
  if (s.inputs.empty() || !s.inputs.back().variadic)
    input_schema.emplace_back("maxItems", Value(static_cast<int64_t>(s.inputs.size())));
  else
    input_schema.emplace_back("items", Value(json::Object{{"$ref", Value("#/$defs/tensor")}}));
  json::Object props;
  json::Array required_attrs;
  for (const AttributeSpec& a : s.attributes) {
    props.emplace_back(a.name, attribute_schema(a));
    if (a.required) required_attrs.push_back(Value(a.name));
  }
  json::Array dtypes;
  for (int t = 0; t < kNumDTypes; ++t) dtypes.push_back(Value(dtype_name(static_cast<DType>(t))));
  Value tensor(json::Object{
      {"type", Value("object")},
      {"properties", Value(json::Object{{"dtype", Value(json::Object{{"enum", Value(std::move(dtypes))}})},
                                        {"shape", Value(json::Object{{"type", Value("array")},
                                                                     {"items", Value(json::Object{{"type", Value("integer")},
                                                                                                  {"minimum", Value(0)}})}})}})},
      {"required", Value(json::Array{Value("dtype"), Value("shape")})}});
  return json::dump(
      Value(json::Object{
          {"$schema", Value("https://json-schema.org/draft/2020-12/schema")},
          {"$id", Value("alk:op/" + s.name)},
          {"title", Value(s.name)},
          {"description", Value(s.doc)},
          {"type", Value("object")},
          {"properties",
           Value(json::Object{{"inputs", Value(std::move(input_schema))},
                              {"attributes", Value(json::Object{{"type", Value("object")},
                                                                {"properties", Value(std::move(props))},
                                                                {"required", Value(std::move(required_attrs))},
                                                                {"additionalProperties", Value(false)}})}})},
          {"required", Value(json::Array{Value("inputs")})},
          {"$defs", Value(json::Object{{"tensor", std::move(tensor)}})},
          {"x-alk", spec_json(s)}}),
      1);
}

Tensor call_op(std::string_view name, const std::vector<Tensor>& inputs, std::string_view attributes_json, Loc loc) {
  const OpSpec& s = find_op_spec(name, loc);
  size_t required_inputs = 0;
  for (const InputSpec& in : s.inputs) required_inputs += !in.optional;
  const bool variadic = !s.inputs.empty() && s.inputs.back().variadic;
  check(inputs.size() >= required_inputs && (variadic || inputs.size() <= s.inputs.size()), s.name, loc, "takes ",
        required_inputs, variadic ? " or more" : (required_inputs == s.inputs.size() ? "" : " to " + std::to_string(s.inputs.size())),
        " tensors, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputSpec& in = s.inputs[std::min(i, s.inputs.size() - 1)];
    check(inputs[i].defined(), s.name, loc, "input ", i, " (", in.name, ") is undefined");
    check(dtype_fits(in.dtypes, inputs[i].dtype()), s.name, loc, "input ", i, " (", in.name, ") must be ", in.dtypes,
          ", got ", dtype_name(inputs[i].dtype()));
    const int64_t rank = inputs[i].dim();
    check(rank >= in.min_rank && (in.max_rank < 0 || rank <= in.max_rank), s.name, loc, "input ", i, " (", in.name,
          ") must have rank >= ", in.min_rank, in.max_rank >= 0 ? " and <= " + std::to_string(in.max_rank) : "",
          ", got shape ", to_string(inputs[i].shape()));
  }
  return s.call(inputs, checked_attributes(s, attributes_json, loc), loc);
}

}  // namespace alk::opspecs
