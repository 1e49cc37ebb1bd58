// The evaluator's compiled tier (src/backend/cpu/jit.h) must compute what the interpreter
// computes, bit for bit, on every ISA path it compiles for: every op of the table, over
// f32, f64, i64 and bool, with NaN, infinities, signed zeros and denormals mixed in, with
// strided, broadcast and uniform inputs and a short last block; fused chains; reductions
// whose prologue is compiled. A machine without a compiler must keep working. What it
// compiles is the C++ emitter's text, the text ALK_DEBUG=kernels prints, and the golden
// C++ files are bodies that compile and compute their expressions.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "backend/cpu/isa.h"
#include "backend/cpu/jit.h"
#include "expr/emit.h"
#include "expr/golden_kernels.h"
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
      if (dtype == DType::Bool && e.rule != DTypeRule::Logical && e.rule != DTypeRule::Integer) continue;
      if (is_floating(dtype) && e.rule == DTypeRule::Integer) continue;  // bitwise ops refuse floats
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

TEST(Jit, NodesWithoutASpellingAreInterpreted) {
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  // exp of an int64 register (the Builder casts first; the interpreter would go through
  // double): no spelling in the body, so the tier leaves it to the interpreter.
  expr::Expr int_exp;
  int_exp.nodes.push_back(expr::Node{expr::Fn::Input, expr::Type::I64, 0, 0, {-1, -1, -1}});
  int_exp.nodes.push_back(expr::Node{expr::Fn::Exp, expr::Type::I64, -1, 0, {0, -1, -1}});
  EXPECT_THROW(expr::emit_cpu_block(int_exp), Error);
  const jit::Mode mode = jit::mode();
  jit::set_mode(jit::Mode::Sync);
  jit::set_thresholds(0, 1);
  const int64_t failed = jit::stats().failed;
  EXPECT_EQ(jit::block_body(int_exp, {false, false}, 1 << 20, cpu::Isa::Avx2), nullptr);
  EXPECT_EQ(jit::stats().failed, failed + 1);
  jit::set_thresholds(16384, 4);
  jit::set_mode(mode);
}

// Runs this test binary again for Jit.<test> in a child process with `env` before it
// (settings read once at start-up), ALK_JIT_TEST_CHILD=1 and ALK_ISA=avx2 (the compiled tier
// exists on that path: the caller may have forced generic); its stdout and stderr go to
// `out`. True when it exited with 0. Paths carry the process id: ctest runs these tests
// concurrently (IsaAs.* runs Jit.* again).
bool run_child(const std::string& test, const std::string& env, std::string& out) {
  char self[4096] = {};  // this binary (in the shell, /proc/self/exe would be the shell)
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
    out = "cannot find this test binary";
    return false;
  }
  const std::string log = ::testing::TempDir() + "/alk_jit_" + test + "_" + std::to_string(::getpid()) + ".log";
  const std::string command = "ALK_JIT_TEST_CHILD=1 ALK_ISA=avx2 " + env + " '" + self + "' --gtest_filter=Jit." + test +
                              " >'" + log + "' 2>&1";
  const int rc = std::system(command.c_str());
  out = try_read_file(log).value_or("");
  std::remove(log.c_str());
  return rc == 0;
}

std::string scratch_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/alk_jit_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// ---- the golden C++ kernels are bodies that compile and compute their expressions ----

// Element i of an input of type t: a spread over [-3, 3] with NaN, infinities and signed
// zeros among floats, -4..4 for integers (zero divisors included), 0 and 1 for bools.
double sample(expr::Type t, int slot, int i) {
  const int j = i * 7 + slot * 13;
  switch (t) {
    case expr::Type::Bool: return j % 3 == 0 ? 1 : 0;
    case expr::Type::I64: return j % 9 - 4;
    case expr::Type::F32: case expr::Type::F64: break;
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double special[] = {std::nan(""), inf, -inf, 0.0, -0.0};
  if (i % 50 == 7) return special[(i / 50) % 5];
  return -3.0 + 6.0 * ((j * 37) % 256) / 255.0;
}

TEST(Jit, GoldenBodiesCompileAndComputeTheirExpressions) {
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  constexpr int kN = expr::kCpuBlockElements;
  for (const expr::testing::Golden& g : expr::testing::goldens()) {
    SCOPED_TRACE(g.name);
    const std::string text = try_read_file(expr::testing::golden_path(g.name, expr::Target::Cpp).string()).value_or("");
    ASSERT_FALSE(text.empty());
    const expr::Expr& e = g.expr;
    // Every node's values in double (the IR's meaning, each rounded to its node's type),
    // and the same in the registers the evaluator would hand over: the body reads its
    // leaves (inputs, uniform values) among them. A uniform input has one value.
    std::vector<std::vector<double>> ref(e.nodes.size(), std::vector<double>(kN));
    for (int i = 0; i < kN; ++i) {
      std::vector<double> in(static_cast<size_t>(e.num_inputs()));
      for (const expr::Node& x : e.nodes) {
        if (x.fn != expr::Fn::Input) continue;
        const bool uniform = static_cast<size_t>(x.slot) < g.uniform_inputs.size() && g.uniform_inputs[static_cast<size_t>(x.slot)];
        in[static_cast<size_t>(x.slot)] = sample(x.type, x.slot, uniform ? 0 : i);
      }
      const std::vector<double> v = expr::testing::eval_nodes(e, in);
      for (size_t n = 0; n < v.size(); ++n) ref[n][static_cast<size_t>(i)] = v[n];
    }
    std::vector<std::vector<uint64_t>> regs(e.nodes.size(), std::vector<uint64_t>(kN));
    std::vector<const void*> leaves;
    for (size_t n = 0; n < e.nodes.size(); ++n) {
      for (int i = 0; i < kN; ++i) {
        const double r = ref[n][static_cast<size_t>(i)];
        void* at = &regs[n][static_cast<size_t>(i)];
        switch (e.nodes[n].type) {
          case expr::Type::F32: static_cast<float*>(static_cast<void*>(regs[n].data()))[i] = static_cast<float>(r); break;
          case expr::Type::F64: *static_cast<double*>(at) = r; break;
          case expr::Type::I64: case expr::Type::Bool: *static_cast<int64_t*>(at) = static_cast<int64_t>(r); break;
        }
      }
      leaves.push_back(regs[n].data());
    }
    for (cpu::Isa isa : {cpu::Isa::Avx2, cpu::Isa::Avx512}) {
      if (!cpu::isa_supported(isa)) continue;
      SCOPED_TRACE(cpu::isa_name(isa));
      const jit::BlockFn body = jit::compile(text, isa);
      ASSERT_NE(body, nullptr) << "the golden file did not compile (ALK_DEBUG=jit keeps it in the cache directory)";
      std::vector<uint64_t> out(kN, 0xdeadbeefdeadbeefull);
      body(leaves.data(), out.data());
      const expr::Type t = e.type();
      for (int i = 0; i < kN; ++i) {
        const double want = ref.back()[static_cast<size_t>(i)];
        double got = 0;
        switch (t) {
          case expr::Type::F32: got = static_cast<const float*>(static_cast<const void*>(out.data()))[i]; break;
          case expr::Type::F64: got = *static_cast<const double*>(static_cast<const void*>(&out[static_cast<size_t>(i)])); break;
          case expr::Type::I64: case expr::Type::Bool: got = static_cast<double>(static_cast<int64_t>(out[static_cast<size_t>(i)])); break;
        }
        if (std::isnan(want) || std::isinf(want) || t == expr::Type::I64 || t == expr::Type::Bool) {
          EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << "element " << i << ": " << got << ", want " << want;
        } else {
          // libmvec's f32 functions are within a few ulp; f64 ones within one or two.
          const double tol = (t == expr::Type::F32 ? 1e-6 : 1e-14) * std::max(1.0, std::fabs(want));
          EXPECT_NEAR(got, want, tol) << "element " << i;
        }
      }
    }
  }
}

// The text the tier compiles is the text ALK_DEBUG=kernels prints for the kernel: a child
// process realizes a chain with a uniform input (a learning rate's place) under
// ALK_DEBUG=kernels,jit, which keeps each compiled source beside its object.
TEST(Jit, CompilesTheTextKernelsDebugPrints) {
  if (std::getenv("ALK_JIT_TEST_CHILD")) {
    Tensor x = values(DType::F32, Domain::Any, 3), lr = tensor(std::vector<double>{0.25}, {}).to(DType::F32);
    realize({x, lr});
    jit::set_thresholds(0, 1);
    (x * lr - exp(x) * 0.5).realize();
    return;
  }
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  const std::string dir = scratch_dir("text");
  std::string out;
  ASSERT_TRUE(run_child("CompilesTheTextKernelsDebugPrints", "ALK_JIT=sync ALK_DEBUG=kernels,jit ALK_CACHE_DIR=" + dir, out))
      << out;
  // Each Map kernel as "[alk kernel <op> on cpu]\n<text>\n", the text ending with the
  // body's closing "}\n" (the inputs' casts are kernels too, interpreted).
  std::vector<std::string> printed;
  const std::string head = " on cpu]\n";
  for (size_t at = out.find(head); at != std::string::npos; at = out.find(head, at + 1)) {
    const size_t begin = at + head.size(), end = out.find("}\n\n", begin);
    ASSERT_NE(end, std::string::npos) << out;
    printed.push_back(out.substr(begin, end + 2 - begin));
  }
  std::vector<std::string> compiled;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/jit"))
    if (f.path().extension() == ".cpp") compiled.push_back(try_read_file(f.path().string()).value_or(""));
  ASSERT_EQ(compiled.size(), 1u) << out;
  EXPECT_NE(std::find(printed.begin(), printed.end(), compiled[0]), printed.end()) << compiled[0] << "\nwas not printed:\n" << out;
  EXPECT_NE(compiled[0].find(" = *static_cast<const float*>(leaves["), std::string::npos) << compiled[0];  // lr: one value
  std::filesystem::remove_all(dir);
}

// The disk cache: a second process loads the body the first built; an object whose entry
// beside it does not hold its source (a file-name collision, a damaged entry) is rebuilt.
TEST(Jit, DiskCacheServesOtherProcessesAndVerifiesItsEntries) {
  if (std::getenv("ALK_JIT_TEST_CHILD")) {
    Tensor x = values(DType::F32, Domain::Any, 5);
    realize({x});
    const jit::Stats before = jit::stats();
    jit::set_thresholds(0, 1);
    (tanh(x * 1.5) + x).realize();
    const jit::Stats after = jit::stats();
    std::printf("compiled %lld, from disk %lld\n", static_cast<long long>(after.compiled - before.compiled),
                static_cast<long long>(after.from_disk - before.from_disk));
    return;
  }
  if (!cpu::isa_supported(cpu::Isa::Avx2)) GTEST_SKIP() << "the compiled tier needs AVX2";
  const std::string dir = scratch_dir("disk");
  const std::string env = "ALK_JIT=sync ALK_CACHE_DIR=" + dir;
  std::string out;
  ASSERT_TRUE(run_child("DiskCacheServesOtherProcessesAndVerifiesItsEntries", env, out)) << out;
  EXPECT_NE(out.find("compiled 1, from disk 0"), std::string::npos) << out;
  ASSERT_TRUE(run_child("DiskCacheServesOtherProcessesAndVerifiesItsEntries", env, out)) << out;
  EXPECT_NE(out.find("compiled 0, from disk 1"), std::string::npos) << out;
  int damaged = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/jit"))
    if (f.path().extension() == ".key") {
      std::ofstream(f.path(), std::ios::binary | std::ios::trunc) << "ALKJIT01 not the key of this object";
      ++damaged;
    }
  EXPECT_EQ(damaged, 1);
  ASSERT_TRUE(run_child("DiskCacheServesOtherProcessesAndVerifiesItsEntries", env, out)) << out;
  EXPECT_NE(out.find("compiled 1, from disk 0"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
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
  const std::string dir = scratch_dir("no_compiler");
  std::string out;
  EXPECT_TRUE(run_child("NoCompilerMeansInterpreting", "ALK_JIT=sync ALK_CXX=/nonexistent/c++ ALK_CACHE_DIR=" + dir, out));
  std::filesystem::remove_all(dir);
  EXPECT_NE(out.find("alk jit: the compiler (/nonexistent/c++) failed"), std::string::npos) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

}  // namespace
}  // namespace alk
