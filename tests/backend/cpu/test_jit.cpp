// The evaluator's compiled tier (src/backend/cpu/jit.h) must compute what the interpreter
// computes, bit for bit, on every ISA path it compiles for: every op of the table, over
// f32, f64, i64 and bool, with NaN, infinities, signed zeros and denormals mixed in, with
// strided, broadcast and uniform inputs and a short last block; fused chains; reductions
// whose prologue is compiled. A machine without a compiler must keep working.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cpu/isa.h"
#include "backend/cpu/jit.h"
#include "ops/ops.h"
#include "testing.h"

namespace alk {
namespace {

namespace jit = cpu::jit;

// The bytes of t's values (to compare NaNs and signed zeros exactly).
std::vector<unsigned char> raw(const Tensor& t) {
  std::vector<unsigned char> out;
  auto append = [&](const auto& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(v[0]));
  };
  switch (t.dtype()) {
    case DType::F64: append(t.to_vector<double>()); break;
    case DType::I64: append(t.to_vector<int64_t>()); break;
    case DType::Bool: append(t.to_vector<uint8_t>()); break;
    default: append(t.to_vector<float>()); break;
  }
  return out;
}

// Runs f interpreted and compiled (every expression, however small) under each ISA the
// processor has besides generic, and expects the same bytes (NaNs: see below).
void expect_same_bits(const std::function<Tensor()>& f) {
  const cpu::Isa original = cpu::isa();
  const jit::Mode mode = jit::mode();
  for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512}) {
    if (!cpu::isa_supported(isa)) continue;
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::set_isa(isa);
    jit::set_mode(jit::Mode::Off);
    const Tensor a = f();
    const std::vector<unsigned char> interpreted = raw(a);
    jit::set_mode(jit::Mode::Sync);
    jit::set_thresholds(0, 1);
    const Tensor b = f();
    const std::vector<unsigned char> compiled = raw(b);
    jit::set_thresholds(16384, 4);
    ASSERT_EQ(interpreted.size(), compiled.size());
    const size_t width = dtype_size(a.dtype());
    const std::vector<double> ia = a.flatten().to(DType::F64).to_vector<double>();
    const std::vector<double> cb = b.flatten().to(DType::F64).to_vector<double>();
    for (size_t at = 0; at < interpreted.size(); at += width)
      // NaN against NaN passes whatever the sign and payload: IEEE leaves which operand's
      // NaN an operation returns open, and the compiler may swap a + b to b + a.
      if (std::memcmp(&interpreted[at], &compiled[at], width) != 0 && !(std::isnan(ia[at / width]) && std::isnan(cb[at / width]))) {
        ADD_FAILURE() << "element " << at / width << ": interpreted " << ia[at / width] << ", compiled " << cb[at / width];
        break;
      }
  }
  jit::set_mode(mode);
  cpu::set_isa(original);
}

// [37, 65] values (2405: the last block is short) with special values mixed in.
Tensor values(DType dtype, Domain domain, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v = testing::sample(domain, 37 * 65, rng);
  if (dtype == DType::I64 || dtype == DType::Bool) {
    for (double& x : v) x = std::round(x * 2);  // -4..4, zeros included
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    const double special[] = {std::nan(""), inf, -inf, 0.0, -0.0, 1e-40, 1e30, -1e30, 0.5, -2.5, 3.5};
    for (size_t i = 0; i < std::size(special); ++i) v[i * 211] = special[i];
  }
  return cast(tensor(v, {37, 65}), dtype);
}

TEST(Jit, EveryTableOpMatchesTheInterpreterBitForBit) {
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  const jit::Stats before = jit::stats();
  for (const ElementwiseEntry& e : elementwise_table()) {
    for (DType dtype : {DType::F32, DType::F64, DType::I64, DType::Bool}) {
      if (dtype == DType::Bool && e.rule != DTypeRule::Logical) continue;
      SCOPED_TRACE(std::string(e.name) + " " + std::string(dtype_name(dtype)));
      expect_same_bits([&] {
        // Operand 0 is [37, 65]; operand 1 a broadcast row; operand 2 a transposed view
        // (strided); the condition of where is bool.
        std::vector<Operand> in;
        for (int k = 0; k < e.arity; ++k) {
          Tensor x = values(dtype, e.domain, 11 + static_cast<uint32_t>(k));
          if (k == 1) x = x.slice(0, 3, 4);
          if (k == 2) x = values(dtype, e.domain, 29).reshape({65, 37}).t();
          if (e.rule == DTypeRule::Select && k == 0) x = values(DType::F32, Domain::Any, 5) > 0.0;
          in.push_back(x);
        }
        return apply_elementwise(e.op, in, Loc::current());
      });
    }
  }
  const jit::Stats after = jit::stats();
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_GT(after.compiled + after.from_disk, before.compiled + before.from_disk);
}

TEST(Jit, FusedChainsUniformNodesAndReductionsMatchBitForBit) {
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  manual_seed(4);
  Tensor x = randn({300, 129}), y = randn({300, 129}), w = randn({129}), b = randn({129});
  Tensor step = tensor(std::vector<double>{7}, {}), lr = tensor(std::vector<float>{0.01f}, {});
  Tensor i = cast(values(DType::I64, Domain::Any, 3), DType::I64);
  realize({x, y, w, b, step, lr, i});
  expect_same_bits([&] { return gelu(x * w + b) * y; });
  // A uniform subexpression (Adam's bias correction): computed once, handed to the body.
  expect_same_bits([&] { return x - lr * y / (1.0 - pow(cast(step, DType::F32) * 0.0 + 0.9, cast(step, DType::F32))); });
  expect_same_bits([&] { return where(x > y, exp(x) * w, tanh(y) - b).to(DType::F64) / 3.0; });
  expect_same_bits([&] { return sum(exp(x * 0.5) * w + erf(y), {1}); });        // row reduction prologue
  expect_same_bits([&] { return sum(sigmoid(x) * y - softplus(x), {0}); });     // column reduction prologue
  expect_same_bits([&] { return ((i * 3 - 7) / (i + 1) + abs(-i) * i).to(DType::F32) + x.slice(0, 0, 37).slice(1, 0, 65).t().contiguous().t(); });
  expect_same_bits([&] { return (x.to(DType::BF16) * 2.0).to(DType::F32) + sqrt(abs(y)) * rsqrt(abs(x) + 1.0); });
}

TEST(Jit, AsyncCompileSwitchesInWithoutChangingResults) {
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  const jit::Mode mode = jit::mode();
  jit::set_mode(jit::Mode::Async);
  manual_seed(9);
  Tensor x = randn({200, 200}), y = randn({200, 200});
  realize({x, y});
  auto f = [&] { return raw(silu(x * 1.7 + y) * gelu_tanh(y - 0.3) + log1p(abs(x))); };
  const std::vector<unsigned char> first = f();  // interpreted while the compiler runs
  jit::wait_idle();
  const jit::Stats before = jit::stats();
  const std::vector<unsigned char> second = f();  // compiled
  EXPECT_EQ(first, second);
  EXPECT_EQ(jit::stats().failed, before.failed);
  jit::set_mode(mode);
}

TEST(Jit, SourceIsEmptyForWhatTheTierDoesNotCompile) {
  // exp of an int64 register (the Builder casts first; the interpreter would go through
  // double): not compiled.
  expr::Expr int_exp;
  int_exp.nodes.push_back(expr::Node{expr::Fn::Input, expr::Type::I64, 0, 0, {-1, -1, -1}});
  int_exp.nodes.push_back(expr::Node{expr::Fn::Exp, expr::Type::I64, -1, 0, {0, -1, -1}});
  EXPECT_EQ(jit::block_source(int_exp, {false, false}, cpu::Isa::Avx2), "");
  EXPECT_EQ(jit::block_source(int_exp, {false, false}, cpu::Isa::Generic), "");
  expr::Builder c;
  const int y = c.input(0, expr::Type::F32);
  const expr::Expr gelu_like = c.finish(c.binary(expr::Fn::Mul, y, c.unary(expr::Fn::Erf, y)));
  const std::string src = jit::block_source(gelu_like, {false, false, false}, cpu::Isa::Avx512);
  EXPECT_NE(src.find("_ZGVeN16v_erff"), std::string::npos) << src;
  EXPECT_NE(src.find("alk_block"), std::string::npos);
}

// Runs this test binary again with a compiler that does not exist: the kernel is
// interpreted, the result is right, one line says why.
TEST(Jit, NoCompilerMeansInterpreting) {
  if (std::getenv("ALK_JIT_TEST_CHILD")) {
    Tensor x = tensor(std::vector<double>{0.5, -1.0, 2.0}, {3}).to(DType::F32);
    jit::set_thresholds(0, 1);
    const std::vector<double> got = (gelu(x * 2.0 + 1.0) - 0.0).to(DType::F64).to_vector<double>();
    const double want[] = {0.5 * 2 * (1 + std::erf(2 / std::sqrt(2.0))), 0.5 * -1 * (1 + std::erf(-1 / std::sqrt(2.0))),
                           0.5 * 5 * (1 + std::erf(5 / std::sqrt(2.0)))};
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(got[static_cast<size_t>(k)], want[k], 1e-6);
    EXPECT_GE(jit::stats().failed, 1);
    return;
  }
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  const std::string log = ::testing::TempDir() + "/alk_jit_child.log";
  char self[4096] = {};  // this binary (in the shell, /proc/self/exe would be the shell)
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  // ALK_ISA=avx2: the compiled tier exists on that path (the caller may have forced generic).
  const std::string command = "ALK_JIT_TEST_CHILD=1 ALK_ISA=avx2 ALK_JIT=sync ALK_CXX=/nonexistent/c++ ALK_CACHE_DIR=" +
                              ::testing::TempDir() + "/alk_jit_child_cache " + self +
                              " --gtest_filter=Jit.NoCompilerMeansInterpreting >" + log + " 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << "see " << log;
  const std::string out = try_read_file(log).value_or("");
  EXPECT_NE(out.find("alk jit: the compiler (/nonexistent/c++) failed"), std::string::npos) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

}  // namespace
}  // namespace alk
