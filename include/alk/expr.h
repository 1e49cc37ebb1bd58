// The scalar expression IR: what every elementwise op computes, written once and
// emitted as C++ (CPU), CUDA C, GLSL and WGSL. An Expr is a small DAG stored in
// topological order; building it hash-conses nodes (so common subexpressions are
// shared) and simplifies (constant folding, x*1, x+0, x-0, x/1, --x, casts of casts).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "alk/dtype.h"

namespace alk::expr {

// The fixed vocabulary. Emitters switch over it; a static_assert on kFnCount in each
// emitter makes a forgotten case a build error.
#define ALK_EXPR_FNS(X)                                                                        \
  X(Input, 0) X(Const, 0)                                                                      \
  X(Neg, 1) X(Not, 1) X(Cast, 1) X(Exp, 1) X(Log, 1) X(Log1p, 1) X(Expm1, 1) X(Sqrt, 1)       \
  X(Rsqrt, 1) X(Sin, 1) X(Cos, 1) X(Tanh, 1) X(Erf, 1) X(Abs, 1) X(Floor, 1) X(Ceil, 1)        \
  X(Round, 1) X(RoundBf16, 1)                                                                  \
  X(Add, 2) X(Sub, 2) X(Mul, 2) X(Div, 2) X(Pow, 2) X(Max, 2) X(Min, 2)                        \
  X(Lt, 2) X(Le, 2) X(Gt, 2) X(Ge, 2) X(Eq, 2) X(Ne, 2) X(And, 2) X(Or, 2)                     \
  X(BitNot, 1) X(BitAnd, 2) X(BitOr, 2) X(BitXor, 2) X(Shl, 2) X(Shr, 2) X(Rotl, 2) X(Rotr, 2)     \
  X(Select, 3)

enum class Fn : uint8_t {
#define ALK_X(name, arity) name,
  ALK_EXPR_FNS(ALK_X)
#undef ALK_X
};
inline constexpr int kFnCount = 0
#define ALK_X(name, arity) +1
    ALK_EXPR_FNS(ALK_X)
#undef ALK_X
    ;
std::string_view fn_name(Fn f);
int fn_arity(Fn f);
bool is_comparison(Fn f);  // Lt..Ne: result Bool

using Type = ComputeType;

struct Node {
  Fn fn;
  Type type;          // the type of this node's value
  int32_t slot = -1;  // Input: which kernel input
  double value = 0;   // Const
  int32_t args[3] = {-1, -1, -1};
  bool operator==(const Node& o) const;
};

// A finished expression: nodes in topological order, the root last.
struct Expr {
  std::vector<Node> nodes;
  int root() const { return static_cast<int>(nodes.size()) - 1; }
  Type type() const { return nodes.back().type; }
  int num_inputs() const;               // 1 + the highest Input slot (0 when none)
  bool uses_input(int slot) const;
  std::string str() const;              // canonical text, e.g. "max(in0:f32, 0:f32)"; also the hash key
  uint64_t hash() const;
};

class Builder {
 public:
  int input(int slot, Type t);
  int constant(double v, Type t);
  int unary(Fn f, int a);
  // Mismatched operand types are promoted (Bool < I64 < F32 < F64) by inserting casts.
  int binary(Fn f, int a, int b);
  int select(int c, int a, int b);
  int cast(int a, Type t);
  Type type_of(int id) const { return nodes_[id].type; }
  // Copies e into this builder, replacing Input slot k with inputs[k]. Returns e's root.
  int inline_expr(const Expr& e, std::span<const int> inputs);
  Expr finish(int root) const;  // keeps only what root reaches
  // Several roots as one DAG, each shared node once (a kernel with several outputs): keeps
  // what any root reaches; at[j] is the index of roots[j] in the result.
  Expr finish(std::span<const int> roots, std::vector<int>& at) const;

 private:
  int intern(const Node& n);
  bool is_const(int id, double v) const;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, std::vector<int>> index_;
};

// Parses the op table's expression text. names[k] is the name of Input slot k and
// types[k] its type; literals get type `literal_type`; arithmetic on two Bool
// operands is done in `literal_type`.
Expr parse(std::string_view text, std::span<const std::string> names, std::span<const Type> types,
           Type literal_type);
// Builds into an existing builder (used to inline op expressions while fusing).
int parse_into(Builder& b, std::string_view text, std::span<const std::string> names,
               std::span<const int> inputs, Type literal_type);

// Evaluates e at one point in double precision (constant folding and tests use it).
double eval_scalar(Fn f, Type t, double a, double b = 0, double c = 0);

}  // namespace alk::expr
