// The model as alk keeps it after reading (reader.cpp): plain structs, no protobuf types, so
// only the reader depends on the generated ONNX classes. import.cpp turns nodes into Tensor ops.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "alk/compile.h"
#include "alk/onnx.h"

namespace alk::onnx {

// Limits on what a file may ask for, checked before anything is allocated.
inline constexpr int kMaxRank = 32;
inline constexpr int64_t kMaxElements = int64_t{1} << 31;  // per tensor, read or computed
inline constexpr int64_t kMaxShapeValues = 1 << 20;        // ints read back from a tensor (shapes, axes)

// The op of errors that mean "alk does not implement this" (conformance counts them apart).
inline constexpr const char* kUnsupported = "onnx.unsupported";

struct Attr {
  enum Kind { Float, Int, String, TensorValue, Floats, Ints, Strings, Other } kind = Other;
  double f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string op_type, domain, name;
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input/output
  std::map<std::string, Attr> attrs;
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
std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc,
                                        bool* reads_data);
// run_graph through m.programs (realized outputs; a replay when the signature was seen twice).
std::map<std::string, Tensor> run_cached(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc);
// The product of dims with overflow and kMaxElements checks (a zero dim gives 0 elements).
int64_t checked_numel(const Shape& shape, const std::string& what, Loc loc);

}  // namespace alk::onnx
