// The kernels tests/golden/ holds, one file per target: their expressions and signatures
// (tests/expr/emit_test.cpp compares the emitted text with the files and rewrites them
// under ALK_UPDATE_GOLDEN=1; the files run as checked in: the C++ ones compiled by
// tests/backend/cpu/test_jit.cpp, the GLSL ones on the Vulkan device by
// tests/backend/vulkan/test_vulkan_map.cpp, the WGSL ones in Dawn by tests/webgpu/test_webgpu.cpp).
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "expr/emit.h"
#include "expr_eval.h"

#ifndef ALK_SOURCE_DIR
#error "ALK_SOURCE_DIR must name the repository root"
#endif

namespace alk::expr::testing {

inline const TableOp& find_op(std::string_view name) {
  for (const TableOp& op : table())
    if (op.name == name) return op;
  throw std::runtime_error("no op " + std::string(name));
}

// The table's forward expression with every operand of type t (the condition of a
// Select-rule op is bool).
inline Expr op_expr(std::string_view name, Type t) {
  const TableOp& op = find_op(name);
  std::vector<std::string> names = split(op.inputs);
  std::vector<Type> types;
  for (size_t k = 0; k < names.size(); ++k)
    types.push_back(std::string_view(op.rule) == "Select" && k == 0 ? Type::Bool : t);
  return parse(op.fwd, names, types, t);
}

inline Expr fused_gelu() {
  Builder b;
  std::string abc[] = {"a", "b", "c"};
  int in[] = {b.input(0, Type::F32), b.input(1, Type::F32), b.input(2, Type::F32)};
  int pre[] = {parse_into(b, "a * b + c", abc, in, Type::F32)};
  return b.finish(b.inline_expr(op_expr("gelu", Type::F32), pre));
}

struct Golden {
  std::string name;
  Expr expr;
  MapSignature sig;
  std::vector<bool> uniform_inputs = {};
};

inline std::vector<Golden> goldens() {
  using D = DType;
  auto sig = [](std::string n, std::vector<D> in, D out) { return MapSignature{"golden_" + n, std::move(in), out}; };
  std::string x[] = {"x"}, ab[] = {"a", "b"};
  Type i64[] = {Type::I64}, f32x2[] = {Type::F32, Type::F32};
  return {
      {"add", op_expr("add", Type::F32), sig("add", {D::F32, D::F32}, D::F32)},
      {"relu", op_expr("relu", Type::F32), sig("relu", {D::F32}, D::F32)},
      {"gelu", op_expr("gelu", Type::F32), sig("gelu", {D::F32}, D::F32)},
      {"where", op_expr("where", Type::F32), sig("where", {D::Bool, D::F32, D::F32}, D::F32)},
      {"fused_gelu", fused_gelu(), sig("fused_gelu", {D::F32, D::F32, D::F32}, D::F32)},
      {"lt_bool", op_expr("lt", Type::F32), sig("lt_bool", {D::F32, D::F32}, D::Bool)},
      {"mul_f16_bf16", op_expr("mul", Type::F32), sig("mul_f16_bf16", {D::F16, D::BF16}, D::F32)},
      {"sigmoid_bf16", op_expr("sigmoid", Type::F32), sig("sigmoid_bf16", {D::BF16}, D::BF16)},
      {"softplus_f64", op_expr("softplus", Type::F64), sig("softplus_f64", {D::F64}, D::F64)},
      {"sign_i32", parse("(x > 0) - (x < 0)", x, i64, Type::I64), sig("sign_i32", {D::I32}, D::I32)},
      {"expm1_u8", op_expr("expm1", Type::F32), sig("expm1_u8", {D::U8}, D::F32)},
      // b has one value for the launch (a learning rate's place): CUDA computes exp(b) once
      // per thread, the CPU's evaluator once for the kernel and hands it to the body.
      {"exp_uniform", parse("a * exp(b) - a", ab, f32x2, Type::F32), sig("exp_uniform", {D::F32, D::F32}, D::F32),
       {false, true}},
  };
}

inline std::string golden_extension(Target t) {
  switch (t) {
    case Target::Cpp: return "cpp";
    case Target::Cuda: return "cu";
    case Target::Glsl: return "glsl";
    case Target::Wgsl: return "wgsl";
  }
  return "";
}

inline std::filesystem::path golden_path(const std::string& name, Target t) {
  return std::filesystem::path(ALK_SOURCE_DIR) / "tests" / "golden" / (name + "." + golden_extension(t));
}

}  // namespace alk::expr::testing
