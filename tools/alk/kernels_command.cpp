// `alk kernels OP --target T`: the kernels one op generates, forward and backward,
// exactly as the scheduler would hand them to a backend (one op, no fusion). For cpp this
// is the text the CPU's compiled tier builds for the kernel (the block body, emit_cpp.cpp),
// the text ALK_DEBUG=kernels prints.
#include <iostream>
#include <optional>

#include "expr/emit.h"
#include "graph/graph.h"
#include "ops/ops.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

void print_map(const Tensor& t, std::string_view op, const std::string& title, expr::Target target) {
  const Node& n = *t.impl()->node;
  const auto* p = std::get_if<MapParams>(&n.params);
  if (!p) {
    std::cout << "// " << title << ": " << op_name(n.op) << " (template op)\n\n";
    return;
  }
  expr::MapSignature sig{std::string(op) + "_" + title, {}, n.dtype};
  for (auto& in : n.inputs) sig.inputs.push_back(in->dtype);
  std::cout << "// " << title << "\n" << expr::emit_map_kernel(p->expr, sig, target) << "\n";
}

int run_kernels(const std::string& name, const std::string& target_name, const std::string& dtype_name_) {
  const std::optional<expr::Target> parsed = expr::parse_target(target_name);
  if (!parsed) {
    std::cerr << "unknown target '" << target_name << "' (expected cpp, cuda, glsl or wgsl)\n";
    return 2;
  }
  const expr::Target target = *parsed;
  DType dtype = DType::F32;
  bool found_dtype = false;
  for (int i = 0; i < kNumDTypes; ++i)
    if (alk::dtype_name(static_cast<DType>(i)) == dtype_name_) {
      dtype = static_cast<DType>(i);
      found_dtype = true;
    }
  if (!found_dtype) {
    std::cerr << "unknown dtype '" << dtype_name_ << "'\n";
    return 2;
  }
  const ElementwiseEntry* e = find_elementwise(name);
  if (!e) {
    for (int i = kNumElementwiseOps; i < kNumOps; ++i)
      if (op_name(static_cast<OpId>(i)) == name || (name == "matmul" && static_cast<OpId>(i) == OpId::Matmul)) {
        std::cout << "// " << name << " is a template op: each backend has a hand-written kernel for it\n"
                  << "// (src/backend/cpu/kernels.h for the CPU); the expression IR supplies its fused\n"
                  << "// prologues and epilogues, which ALK_DEBUG=kernels prints as they are scheduled.\n";
        return 0;
      }
    std::cerr << "unknown op '" << name << "'; elementwise ops:";
    for (auto& entry : elementwise_table()) std::cerr << " " << entry.name;
    std::cerr << "\n";
    return 2;
  }
  // Placeholder operands of the dtypes the op's rule expects (the shape does not matter).
  std::vector<Tensor> inputs;
  for (int k = 0; k < e->arity; ++k) {
    DType t = e->rule == DTypeRule::Logical || (e->rule == DTypeRule::Select && k == 0) ? DType::Bool : dtype;
    Tensor x = full({4}, 1, t).contiguous();
    if (is_floating(t) && e->differentiable()) x = x.detach().requires_grad_();
    inputs.push_back(x);
  }
  Tensor y = apply_elementwise(e->op, std::vector<Operand>(inputs.begin(), inputs.end()), Loc::current());
  print_map(y, e->name, "forward", target);
  if (y.impl()->grad_fn) {
    const Tensor seed = full({4}, 1, y.dtype()).contiguous();
    std::vector<Tensor> grads = y.impl()->grad_fn->backward(seed);
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) continue;
      if (grads[k].impl()->node == seed.impl()->node)  // a gradient expression that is just g
        std::cout << "// backward_" << e->inputs[k] << ": the incoming gradient itself (no kernel)\n\n";
      else
        print_map(grads[k], e->name, "backward_" + e->inputs[k], target);
    }
  }
  return 0;
}

}  // namespace

void add_kernels_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("kernels", "print the kernels an op generates (forward and backward)");
  static std::string op, target = "cpp", dtype = "f32";
  cmd->add_option("op", op, "op name, e.g. add, gelu, where (see include/alk/elementwise.def)")->required();
  cmd->add_option("--target,-t", target, "cpp (the CPU's compiled block body), cuda, glsl or wgsl")->capture_default_str();
  cmd->add_option("--dtype", dtype, "input dtype: f32 f64 f16 bf16 i32 i64 u8 bool")->capture_default_str();
  cmd->callback([] {
    int rc = run_kernels(op, target, dtype);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace alk::cli
