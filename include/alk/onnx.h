// ONNX models in alk: alk::onnx::load reads a .onnx file (untrusted input: every size, type,
// reference and allocation the file asks for is checked; violations are alk::Error("onnx", ...))
// and gives a callable Model. Calling it builds alk's lazy graph from the model's nodes for the
// shapes of the inputs given (so symbolic dims such as a batch size are whatever the inputs
// say), on the device the inputs live on; fusion, memory planning and every backend apply.
// Available when alk is built with ALK_ONNX (libonnx-dev + libprotobuf-dev found by CMake).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alk/tensor.h"

namespace alk::nn {
class GPT;
class Sequential;
}  // namespace alk::nn

namespace alk::onnx {

// A graph input or output as the file declares it.
struct ValueInfo {
  // ONNX's value types: a tensor, a sequence of tensors, an optional (of a tensor or a
  // sequence); Other: the types alk does not run (maps, sparse tensors).
  enum class Kind : uint8_t { Tensor, Sequence, Optional, Other };
  std::string name;
  Kind kind = Kind::Tensor;
  std::string elem_type;           // "float", "int64", ... ("?" when not declared); "sequence(float)",
                                   // "optional(sequence(float))" for the other kinds
  std::vector<std::string> dims;   // "3", or the symbolic name ("N"), or "?"
  bool has_shape = false;
};

struct ModelInfo {
  int64_t ir_version = 0;
  int64_t opset = 0;  // of the default ("" / "ai.onnx") domain
  std::string producer;
  std::vector<ValueInfo> inputs, outputs;  // inputs exclude initializers
  std::map<std::string, int64_t> op_histogram;  // op type -> node count ("domain:op" off the default domain)
  std::vector<std::string> unsupported;  // op types (and why) alk cannot import
  int64_t initializers = 0, initializer_bytes = 0;
};

// A value of any type alk runs, for models whose inputs or outputs are sequences or optionals
// (Model::run_values): a tensor, a sequence of tensors (in order), or an empty optional. An
// optional that holds a value is that value: the ops that read optionals test for it or unwrap it.
struct Value {
  enum class Kind : uint8_t { Tensor, Sequence, None };
  Kind kind = Kind::Tensor;
  Tensor tensor;              // Kind::Tensor
  std::vector<Tensor> items;  // Kind::Sequence
  static Value of(Tensor t) { return Value{Kind::Tensor, std::move(t), {}}; }
  static Value sequence(std::vector<Tensor> items) { return Value{Kind::Sequence, Tensor(), std::move(items)}; }
  static Value none() { return Value{Kind::None, Tensor(), {}}; }
};
std::string_view kind_name(Value::Kind k);  // "tensor", "sequence", "empty optional"

struct ModelImpl;  // src/onnx/model.h

class Model {
 public:
  Model() = default;
  explicit Model(std::shared_ptr<const ModelImpl> impl) : impl_(std::move(impl)) {}
  const ModelInfo& info() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  // Outputs by name; inputs by name (every graph input without an initializer is required).
  // Calls are cached per input signature (names, dtypes, shapes, devices): the second call with
  // a signature records the kernels it runs (alk::compile), later ones replay them, with realized
  // outputs (copies, which later calls do not change). Uncached, with lazy outputs that fuse with
  // what follows: set_replay(false), the environment variable ALK_ONNX_EAGER=1, inputs that
  // require grad, calls inside an alk::compile step, and models whose host reads depend on the
  // input data (found on the first call).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs, Loc loc = Loc::current()) const;
  // Inputs and outputs of any kind (sequences, optionals); a model whose inputs and outputs
  // are all tensors runs as run() does, others uncached (lazy tensors in the outputs).
  std::map<std::string, Value> run_values(const std::map<std::string, Value>& inputs, Loc loc = Loc::current()) const;
  // Positional: inputs in input_names() order, outputs in output_names() order.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, Loc loc = Loc::current()) const;
  // Whether this handle's calls go through the per-signature program cache (default true).
  void set_replay(bool on) { replay_ = on; }
  bool replay() const { return replay_; }

 private:
  std::shared_ptr<const ModelImpl> impl_;
  bool replay_ = true;
};

// External data files are looked up next to the model file (never outside its directory).
Model load(const std::string& path, Loc loc = Loc::current());
// From bytes in memory; external data is looked up under base_dir ("" = none allowed).
Model load_bytes(std::string_view bytes, const std::string& base_dir, Loc loc = Loc::current());
// Whether the importer implements this op type: of the default domain, or "domain:op_type"
// ("ai.onnx.preview.training:Adam").
bool is_supported_op(std::string_view op_type);
std::vector<std::string> supported_ops();
// An ONNX TensorProto (the test data's input_0.pb) as a tensor.
Tensor load_tensor_pb(const std::string& path, Loc loc = Loc::current());
// The test data's value of the kind an input or output declares: a TensorProto, a
// SequenceProto of tensors, or an OptionalProto.
Value load_value_pb(const std::string& path, ValueInfo::Kind kind, Loc loc = Loc::current());

// ---- export (opset 17, written with the protobuf classes; src/onnx/export.cpp) ----
// The GPT's forward: input "ids" int64 [B, T] (B and T symbolic, T <= ctx), output "logits"
// float [B, T, vocab]. Attention is written out (MatMul, a causal mask, Softmax, MatMul).
void export_gpt(const nn::GPT& model, const std::string& path, Loc loc = Loc::current());
// A Sequential of Conv2d, Linear, Act, MaxPool2d, AvgPool2d, Flatten, BatchNorm2d (eval),
// LayerNorm and Dropout layers: input "input" float of `input_shape` with dim 0 symbolic ("N"),
// output "output". Other layer types are an alk::Error naming them.
void export_sequential(const nn::Sequential& model, const Shape& input_shape, const std::string& path,
                       Loc loc = Loc::current());

}  // namespace alk::onnx
