// The model as alk keeps it after reading (reader.cpp): plain structs, no protobuf types, so
// only the reader depends on the generated ONNX classes. import.cpp turns nodes into Tensor ops.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alk/compile.h"
#include "alk/onnx.h"

namespace alk::onnx {

// Limits on what a file may ask for, checked before anything is allocated.
inline constexpr int kMaxRank = 32;
inline constexpr int64_t kMaxElements = int64_t{1} << 31;  // per tensor, read or computed
inline constexpr int64_t kMaxShapeValues = 1 << 20;        // ints read back from a tensor (shapes, axes)
inline constexpr int kMaxGraphDepth = 16;                   // subgraphs inside subgraphs (If in Loop in ...)
inline constexpr int64_t kMaxLoopIterations = 1 << 20;     // a Loop whose trip count and condition never stop it

// The op of errors that mean "alk does not implement this" (conformance counts them apart).
inline constexpr const char* kUnsupported = "onnx.unsupported";

struct Graph;

struct Attr {
  enum Kind { Float, Int, String, TensorValue, Floats, Ints, Strings, GraphValue, Other } kind = Other;
  double f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::shared_ptr<const Graph> graph;  // GraphValue: If's branches, Loop's and Scan's bodies
};

struct Node {
  std::string op_type, domain, name;
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input/output
  std::map<std::string, Attr> attrs;
  // Names the node's subgraphs read from the scopes around them (ONNX's outer-scope values):
  // inputs of the node in all but name, for ordering checks and for counting readers.
  std::vector<std::string> outer_names;
};

// A subgraph (a graph-valued attribute): its inputs are bound by the op running it (Loop's
// iteration number, condition and carried values; Scan's states and slices; none for If), its
// nodes may also read every name defined before the node that holds it.
struct Graph {
  std::vector<std::string> input_names, output_names;
  std::map<std::string, Tensor> initializers;  // on the CPU
  std::vector<Node> nodes;                     // topologically sorted (checked)
};

// The values of names while a graph runs; a subgraph's scope also sees its enclosing scopes'.
// Tensors are in `values`, sequences and empty optionals in `others`.
// from_data: the names whose values were computed from the model inputs' data (Ctx::from_data).
struct Scope {
  const Scope* parent = nullptr;
  std::unordered_map<std::string, Tensor> values;
  std::unordered_map<std::string, Value> others;
  std::unordered_set<std::string> from_data;
  const Tensor& at(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (auto it = s->values.find(name); it != s->values.end()) return it->second;
      if (auto it = s->others.find(name); it != s->others.end())
        fail("onnx", Loc::current(), "'", name, "' is a ", kind_name(it->second.kind), ", not a tensor");
    }
    fail("onnx", Loc::current(), "'", name, "' has no value in this scope");
  }
  // The sequence or empty optional named so; nullptr when the name holds a tensor.
  const Value* other(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (s->values.count(name)) return nullptr;
      if (auto it = s->others.find(name); it != s->others.end()) return &it->second;
    }
    return nullptr;
  }
  Value value(const std::string& name) const {
    const Value* v = other(name);
    return v ? *v : Value::of(at(name));
  }
  void set(const std::string& name, Value v) {
    if (v.kind == Value::Kind::Tensor) values[name] = std::move(v.tensor);
    else others[name] = std::move(v);
  }
  bool is_from_data(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (s->values.count(name) || s->others.count(name)) return s->from_data.count(name) != 0;
    return false;
  }
};

// Model::run's programs, one per input signature (names, dtypes, shapes, devices): a first call
// with a signature runs eagerly, the second is traced, later ones replay its kernels (no import,
// schedule or allocation per call), as an onnxruntime session optimizes once at creation. A model
// whose handlers read data-dependent values to the host (NonZero, a Reshape to computed dims)
// is found on the first call and runs uncached for that signature.
struct ProgramCache {
  static constexpr size_t kMaxEntries = 8;  // the least recently used goes first
  struct Entry {
    std::unique_ptr<Program> program;
    int calls = 0;
    bool data_dependent = false;
    uint64_t last_use = 0;
  };
  std::mutex mutex;
  std::map<std::string, Entry> entries;
  uint64_t uses = 0;
};

struct ModelImpl {
  ModelInfo info;
  std::vector<std::string> input_names, output_names;
  std::map<std::string, Tensor> initializers;  // on the CPU
  std::vector<Node> nodes;                      // topologically sorted (checked)
  mutable ProgramCache programs;
};

// Maps an ONNX TensorProto data type to alk's; false for types alk lacks.
bool dtype_from_onnx(int onnx_type, DType* out);
int dtype_to_onnx(DType t);
std::string onnx_type_name(int onnx_type);

// Folds inference-mode BatchNormalization and per-channel Mul/Add by constants into the Conv
// before them (fold.cpp); called once at load.
void fold_batch_norms(ModelImpl& m);
// Runs the nodes over the inputs (import.cpp): lazy outputs by graph output name. reads_data
// (optional) is set when a handler read values computed from the inputs' data to the host.
std::map<std::string, Value> run_graph_values(const ModelImpl& m, const std::map<std::string, Value>& inputs, Loc loc,
                                              bool* reads_data);
// The same for a model whose inputs and outputs are tensors (a sequence output is an error).
std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc,
                                        bool* reads_data);
// Runs subgraph g in a scope inside `outer`, its inputs bound to `inputs` (inputs_from_data:
// which of them carry values from the model inputs' data): its outputs in order. reads_data is
// set when a node inside read data-dependent values to the host.
std::vector<Value> run_subgraph(const Graph& g, const Scope& outer, const std::vector<Value>& inputs,
                                const std::vector<char>& inputs_from_data, int64_t opset, Loc loc, bool* reads_data);
// run_graph through m.programs (realized outputs; a replay when the signature was seen twice).
std::map<std::string, Tensor> run_cached(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc);
// The product of dims with overflow and kMaxElements checks (a zero dim gives 0 elements).
int64_t checked_numel(const Shape& shape, const std::string& what, Loc loc);

}  // namespace alk::onnx
