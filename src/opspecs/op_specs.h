// The operations registry: every op of the op table with a machine-readable spec (inputs with
// their dtypes and ranks, attributes with types and defaults, differentiability, a doc line,
// the backends that run it), and the ops callable by name on tensors, locally or on a server
// (src/remote's CallOp). Elementwise specs come from include/alk/elementwise.def, template ops from the
// template-op list (alk/op_table.h), which backend runs what from the op registry's coverage
// rows (alk/op_registry.h): nothing here restates the table. The callable front-end functions
// of the template ops (matmul, softmax, ...) are listed once, in op_specs.cpp, each naming
// the template op it records; a test fails when a differentiable template op has none.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "alk/tensor.h"
#include "io/json.h"

namespace alk::opspecs {

struct InputSpec {
  std::string name;
  std::string dtypes = "any";  // "any", "float", "integer", "bool"
  int min_rank = 0, max_rank = -1;  // -1: any rank
  bool optional = false;  // may be left out (only at the end)
  bool variadic = false;  // one or more tensors (only last): cat's inputs
};

struct AttributeSpec {
  std::string name;
  std::string type;  // "integer", "number", "boolean", "integer[]", "string"
  bool required = false;
  json::Value default_value;  // when not required (null: "none", as argmax's dim)
  std::string doc;
};

struct OpSpec {
  std::string name;
  std::string kind;  // "elementwise", "template" (a front-end function over a template op)
  OpId op;           // the op-table entry its kernels are
  std::vector<InputSpec> inputs;
  std::vector<AttributeSpec> attributes;
  bool differentiable = false;
  std::string doc;
  std::function<Tensor(const std::vector<Tensor>& inputs, const json::Value& attributes, Loc loc)> call;
};

// Every callable op: the elementwise table's entries, then the template ops' functions.
const std::vector<OpSpec>& op_specs();
// Raises alk::Error listing near names when there is none.
const OpSpec& find_op_spec(std::string_view name, Loc loc = Loc::current());

// `alk ops --json`: {"ops": [every callable spec], "kernels": [every op-table entry with the
// backends that run it and the callable ops that record it]}.
std::string op_specs_json();
// `alk ops describe NAME`: the op's call as JSON Schema (2020-12): {"inputs": [...], "attributes": {...}}.
std::string op_schema_json(std::string_view name, Loc loc = Loc::current());

// Calls op `name` on `inputs` with attributes (a JSON object, "" = {}), checking the count,
// dtypes and ranks of the inputs and every attribute against the spec first.
Tensor call_op(std::string_view name, const std::vector<Tensor>& inputs, std::string_view attributes_json,
               Loc loc = Loc::current());

}  // namespace alk::opspecs
