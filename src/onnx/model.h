// The model as alk keeps it after reading (reader.cpp): plain structs, no protobuf types, so
// only the reader depends on the generated ONNX classes. import.cpp turns nodes into Tensor ops.
#pragma once
#include <map>
#include <string>
#include <vector>

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

struct ModelImpl {
  ModelInfo info;
  std::vector<std::string> input_names, output_names;
  std::map<std::string, Tensor> initializers;  // on the CPU
  std::vector<Node> nodes;                      // topologically sorted (checked)
};

// Maps an ONNX TensorProto data type to alk's; false for types alk lacks.
bool dtype_from_onnx(int onnx_type, DType* out);
int dtype_to_onnx(DType t);
std::string onnx_type_name(int onnx_type);

// Folds inference-mode BatchNormalization and per-channel Mul/Add by constants into the Conv
// before them (fold.cpp); called once at load.
void fold_batch_norms(ModelImpl& m);
// Runs the nodes over the inputs (import.cpp): lazy outputs by graph output name.
std::map<std::string, Tensor> run_graph(const ModelImpl& m, const std::map<std::string, Tensor>& inputs, Loc loc);
// The product of dims with overflow and kMaxElements checks (a zero dim gives 0 elements).
int64_t checked_numel(const Shape& shape, const std::string& what, Loc loc);

}  // namespace alk::onnx
