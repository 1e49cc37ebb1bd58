// Emitted kernels: golden files per op and target (ALK_UPDATE_GOLDEN=1 rewrites
// them), and, where the tools are installed, the emitted text is compiled/validated.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "alk/error.h"
#include "expr/emit.h"
#include "golden_kernels.h"
#include "io/temp_dir.h"

namespace alk::expr {
namespace {

namespace fs = std::filesystem;
using testing::goldens;
using testing::Golden;
using testing::op_expr;

const Target kTargets[] = {Target::Cpp, Target::Cuda, Target::Glsl, Target::Wgsl};

std::string ext(Target t) { return testing::golden_extension(t); }

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ExprEmit, GoldenKernels) {
  const char* update = std::getenv("ALK_UPDATE_GOLDEN");
  bool rewrite = update && std::string_view(update) == "1";
  for (const Golden& g : goldens()) {
    for (Target t : kTargets) {
      SCOPED_TRACE(g.name + "." + ext(t));
      std::string text = emit_map_kernel(g.expr, g.sig, t, g.uniform_inputs);
      fs::path p = testing::golden_path(g.name, t);
      if (rewrite) {
        std::ofstream(p, std::ios::binary) << text;
        continue;
      }
      ASSERT_TRUE(fs::exists(p)) << p << " is missing; run with ALK_UPDATE_GOLDEN=1";
      EXPECT_EQ(text, read(p)) << "kernel text changed; if intended, rerun with ALK_UPDATE_GOLDEN=1 and review the diff";
    }
  }
}

TEST(ExprEmit, TargetNames) {
  for (Target t : kTargets) EXPECT_EQ(parse_target(target_name(t)), t);
  EXPECT_FALSE(parse_target("metal").has_value());
}

TEST(ExprEmit, LanguageGapsAreRewrittenNotSpelled) {
  MapSignature sig{"k", {DType::F64}, DType::F64};
  Expr e = op_expr("gelu", Type::F64);
  std::string glsl = emit_map_kernel(e, sig, Target::Glsl), wgsl = emit_map_kernel(e, sig, Target::Wgsl);
  // The header comment quotes the original IR; the kernel body must not call erf.
  EXPECT_EQ(glsl.find("erf(", glsl.find("void main")), std::string::npos);
  EXPECT_EQ(wgsl.find("erf(", wgsl.find("@compute")), std::string::npos);
  EXPECT_EQ(wgsl.find("f64", wgsl.find("struct Params")), std::string::npos);
  EXPECT_NE(wgsl.find("narrowed"), std::string::npos);
  EXPECT_NE(emit_map_kernel(e, sig, Target::Cuda).find("erf("), std::string::npos);
  EXPECT_NE(emit_map_kernel(op_expr("round", Type::F32), {"r", {DType::F32}, DType::F32}, Target::Glsl)
                .find("roundEven("),
            std::string::npos);
}

// The expression as a function (a template kernel's prologue/epilogue): parameters in the
// inputs' compute types, the result in the output's, the same walk (and rewrites) as a map.
TEST(ExprEmit, FunctionOverNamedInputs) {
  MapSignature sig{"alk_epilogue", {DType::F16, DType::I32}, DType::BF16};
  Expr e = op_expr("add", Type::F32);
  const std::string glsl = emit_function(e, sig, Target::Glsl);
  EXPECT_EQ(glsl.rfind("float alk_epilogue(float in0, int64_t in1) {", 0), 0u) << glsl;
  EXPECT_NE(glsl.find("return "), std::string::npos);
  EXPECT_EQ(emit_function(e, sig, Target::Wgsl).rfind("fn alk_epilogue(in0: f32, in1: i32) -> f32 {", 0), 0u)
      << emit_function(e, sig, Target::Wgsl);
  EXPECT_EQ(emit_function(e, sig, Target::Cuda).rfind("__device__ inline float alk_epilogue(", 0), 0u);
  // GLSL has no erf: the function body is rewritten like a map kernel's.
  const std::string gelu = emit_function(op_expr("gelu", Type::F32), {"g", {DType::F32}, DType::F32}, Target::Glsl);
  EXPECT_EQ(gelu.find("erf("), std::string::npos);
  // An expression that is just its input.
  Builder b;
  const Expr id = b.finish(b.input(0, Type::F32));
  EXPECT_NE(emit_function(id, {"p", {DType::F32}, DType::F32}, Target::Glsl).find("return in0;"), std::string::npos);
}

TEST(ExprEmit, RejectsTooFewInputs) {
  for (Target t : kTargets)
    EXPECT_THROW(emit_map_kernel(op_expr("add", Type::F32), {"k", {DType::F32}, DType::F32}, t), Error) << ext(t);
}

// The CPU's body is the expression's arithmetic alone: the evaluator converts storage dtypes
// as it loads and stores, so they do not change the text, and neither does the kernel's name.
TEST(ExprEmit, CppBodyDependsOnTheExpressionAndUniformInputsOnly) {
  const Expr e = op_expr("mul", Type::F32);
  const std::string f32 = emit_map_kernel(e, {"a", {DType::F32, DType::F32}, DType::F32}, Target::Cpp);
  EXPECT_EQ(emit_map_kernel(e, {"b", {DType::F16, DType::BF16}, DType::BF16}, Target::Cpp), f32);
  EXPECT_EQ(emit_cpu_block(e), f32);
  // A uniform input is one value the body reads, not a block.
  const std::string uniform = emit_map_kernel(e, {"a", {DType::F32, DType::F32}, DType::F32}, Target::Cpp, {false, true});
  EXPECT_NE(uniform, f32);
  EXPECT_NE(uniform.find("const float in1 = *static_cast<const float*>(leaves[1]);"), std::string::npos) << uniform;
  EXPECT_NE(f32.find("const float* in1 = static_cast<const float*>(leaves[1]);"), std::string::npos) << f32;
  // No C++ function form: the CPU evaluates prologues and epilogues from the IR.
  EXPECT_THROW(emit_function(e, {"f", {DType::F32, DType::F32}, DType::F32}, Target::Cpp), Error);
}

// ---- external validators (skipped when not installed) ----------------------------------

bool have(const char* tool) { return std::system(("command -v " + std::string(tool) + " >/dev/null 2>&1").c_str()) == 0; }

// Writes every golden kernel for target t into a scratch folder and runs `cmd` on each.
void check_with(Target t, const std::string& suffix, const std::string& cmd) {
  const alk::testing::TempDir scratch;
  const fs::path dir = scratch.path();
  for (const Golden& g : goldens()) {
    fs::path p = dir / (g.name + suffix);
    std::ofstream(p, std::ios::binary) << emit_map_kernel(g.expr, g.sig, t, g.uniform_inputs);
    std::string log = (dir / (g.name + ".log")).string();
    int rc = std::system((cmd + " " + p.string() + " >" + log + " 2>&1").c_str());
    EXPECT_EQ(rc, 0) << g.name << ": " << cmd << " failed:\n" << read(log);
  }
}

TEST(ExprEmitValidate, GlslCompiles) {
  if (!have("glslangValidator")) GTEST_SKIP() << "glslangValidator not installed";
  check_with(Target::Glsl, ".comp", "glslangValidator -V --target-env vulkan1.2 -o /dev/null");
}

// CUDA spells tanh as the hardware approximation (__tanhf, 2^-10.99 relative) only where the
// kernel's stored result is bf16, whose rounding (2^-9) hides it; f32 and f16 results keep
// tanhf, and so does every other language.
TEST(ExprEmit, CudaApproximatesTanhOnlyForBf16Results) {
  const Expr e = op_expr("tanh", Type::F32);
  auto cuda = [&](DType in, DType out) { return emit_map_kernel(e, MapSignature{"k", {in}, out}, Target::Cuda); };
  EXPECT_NE(cuda(DType::BF16, DType::BF16).find("__tanhf("), std::string::npos);
  EXPECT_NE(cuda(DType::F32, DType::BF16).find("__tanhf("), std::string::npos);
  for (DType out : {DType::F32, DType::F16}) {
    const std::string src = cuda(DType::BF16, out);
    EXPECT_EQ(src.find("__tanhf("), std::string::npos) << dtype_name(out);
    EXPECT_NE(src.find("tanhf("), std::string::npos) << dtype_name(out);
  }
  const std::string epilogue = emit_function(e, MapSignature{"epilogue", {DType::F32}, DType::BF16}, Target::Cuda);
  EXPECT_NE(epilogue.find("__tanhf("), std::string::npos) << epilogue;
  EXPECT_EQ(emit_map_kernel(e, MapSignature{"k", {DType::BF16}, DType::BF16}, Target::Cpp).find("__tanhf"),
            std::string::npos);
}

TEST(ExprEmitValidate, WgslValidates) {
  if (!have("naga")) GTEST_SKIP() << "naga not installed";
  check_with(Target::Wgsl, ".wgsl", "naga");
}

// For both instruction sets (the text picks its lanes by the -m flags), warning-free; the
// CPU tests compile the golden files for real and run them (GoldenBodies*).
TEST(ExprEmitValidate, CppCompiles) {
  if (!have("c++")) GTEST_SKIP() << "no host C++ compiler";
  check_with(Target::Cpp, ".cpp", "c++ -x c++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -mavx2 -mfma");
  check_with(Target::Cpp, ".cpp", "c++ -x c++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -mavx512f -mavx512bw -mavx2 -mfma");
}

TEST(ExprEmitValidate, CudaCompiles) {
  if (!have("nvcc")) GTEST_SKIP() << "nvcc not installed";
  check_with(Target::Cuda, ".cu", "nvcc --ptx -o /dev/null");  // front end + PTX: enough to catch spelling
}

}  // namespace
}  // namespace alk::expr
