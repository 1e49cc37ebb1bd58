// The CUDA backend's kernels compile: every template kernel source (for each dtype family
// it serves) and the Map kernels of every elementwise table entry, through NVRTC for
// Hopper (sm_90a) -- NVRTC needs no GPU, so CI checks every CUDA kernel the backend can
// build. Skips only where the CUDA toolkit's NVRTC is absent.
#ifdef ALK_HAVE_CUDA
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "../../../examples/sha256/sha256_kernel.h"
#include "alk/alk.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/template_ops.h"
#include "backend/cuda/tuning.h"
#include "expr/emit.h"
#include "graph/schedule.h"
#include "alk/op_table.h"
#include "ops/ops.h"

namespace alk::cuda {
namespace {

#define ALK_NEED_NVRTC() \
  if (!nvrtc()) GTEST_SKIP() << nvrtc_unavailable_reason()

TEST(CudaCompile, EveryTemplateKernelSourceCompiles) {
  ALK_NEED_NVRTC();
  const auto sources = template_sources();
  EXPECT_GE(sources.size(), 30u);
  // ALK_CUDA_DUMP_DIR=dir: each source is also written there, to inspect with
  // `nvcc -cubin -arch=sm_90a -Xptxas -v` (registers, spills; wgmma serialization is checked below).
  const char* dump = std::getenv("ALK_CUDA_DUMP_DIR");
  int index = 0;
  for (const auto& [what, src] : sources) {
    SCOPED_TRACE(what);
    if (dump) {
      std::string name = what;
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      std::ofstream(std::string(dump) + "/" + std::to_string(index++) + "_" + name + ".cu") << src;
    }
    std::string cubin;
    EXPECT_NO_THROW(cubin = compile_cubin(src, "sm_90a"));
    // A cubin is an ELF file.
    ASSERT_GE(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF"));
  }
}

// ptxas does not serialize the warpgroup (wgmma) instructions of any kernel that has them.
// It does, silently but for an advisory (C7520), when it must insert warpgroup
// synchronization on a path it cannot prove warpgroup-uniform: the wgmma attention forward
// ran no faster than mma.sync until a copy loop with a thread-dependent trip count was made
// fixed-trip (bench/cuda/NOTES.md, tenth session). Likewise C7514/C7515 (instructions that
// read or write an in-flight accumulator): the attention backward's bulk reduce-add issued
// under a one-thread branch serialized all its products (thirteenth session).
TEST(CudaCompile, WarpgroupKernelsAreNotSerialized) {
  ALK_NEED_NVRTC();
  int checked = 0;
  for (const auto& [what, src] : template_sources()) {
    if (src.find("wgmma.mma_async") == std::string::npos) continue;
    SCOPED_TRACE(what);
    std::string report;
    EXPECT_NO_THROW(report = ptxas_report(src, "sm_90a"));
    EXPECT_NE(report.find("Used"), std::string::npos) << "no ptxas report:\n" << report;
    // C7514, C7515, C7520: ptxas serialized the wgmma of the kernel (a branch around a wgmma, or
    // other instructions touching an in-flight accumulator), each product waited for.
    EXPECT_EQ(report.find("serialized"), std::string::npos) << report;
    EXPECT_EQ(report.find("C7520"), std::string::npos) << report;
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

// The row-in-registers norms with 16-byte vectors (GPT-2's rows) hold a lane's share of a row
// and its column sums in registers, two blocks per SM (128 registers): none may spill (a spill
// is a local-memory round trip per element, what the registers were for). (ptxas takes ~10 s a
// source: the scalar 8-warp plans, one block per SM, are left out.) Measured and dropped
// (thirteenth session): two rows a warp with the weights in registers at one block per SM,
// 254 registers: the GPT-2 backward's kernel 50.8 -> 82.1 us.
TEST(CudaCompile, RowNormsDoNotSpill) {
  ALK_NEED_NVRTC();
  int checked = 0;
  for (const auto& [what, src] : template_sources()) {
    // f64 (two registers an element) spills 32 bytes in the backward at this budget: not a fast path.
    if (what.rfind("rows", 0) != 0 || what.find("norms") == std::string::npos || what.find("vectors") == std::string::npos ||
        what.find("f64") != std::string::npos)
      continue;
    SCOPED_TRACE(what);
    std::string report;
    EXPECT_NO_THROW(report = ptxas_report(src, "sm_90a"));
    EXPECT_NE(report.find("spill stores"), std::string::npos) << "no ptxas report:\n" << report;
    for (size_t at = report.find(" bytes spill stores"); at != std::string::npos;
         at = report.find(" bytes spill stores", at + 1)) {
      const size_t begin = report.rfind(' ', at - 1) + 1;
      EXPECT_EQ(report.substr(begin, at - begin), "0") << report;
    }
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The split-K count of the bulk-copy GEMM (no GPU needed: a model of the time). GPT-2's
// weight gradients on the H200's 132 SMs: fc dW (72 tiles of 128 x 256, K = 16384) takes 3
// slices, 216 blocks in two nearly full waves, not 2 (144 blocks: a second wave of 12 as
// long as the first); proj dW (18 tiles) 7 slices in one wave; a product that fills the SMs
// is not split; slices keep >= 8 steps and none is empty; the count never passes 16.
TEST(CudaCompile, SplitKFillsWholeWaves) {
  EXPECT_EQ(split_k_slices(72, 16384, 256, 3072 * 768, 132), 3);
  EXPECT_EQ(split_k_slices(54, 16384, 256, 2304 * 768, 132), 2);
  EXPECT_EQ(split_k_slices(18, 16384, 256, 768 * 768, 132), 7);
  EXPECT_EQ(split_k_slices(1182, 16384, 256, 768 * 50304, 132), 1);  // the LM head's dW
  EXPECT_EQ(split_k_slices(4, 768, 256, 256 * 512, 132), 1);          // 12 steps: no two slices of 8
  for (int64_t k : {1024, 8384, 8392, 100000, 1 << 20})
    for (int64_t tiles : {1, 4, 72, 131, 133}) {
      const int s = split_k_slices(tiles, k, 256, tiles * 128 * 256, 132);
      const int64_t steps = (k + 63) / 64, per_slice = (steps + s - 1) / s;
      EXPECT_TRUE(s >= 1 && s <= 16) << k << " " << tiles;
      EXPECT_TRUE(s == 1 || (per_slice >= 8 && per_slice * (s - 1) < steps)) << k << " " << tiles << " " << s;
    }
}

// Which weight gradients run as K slices filling one wave, on which tiles (no GPU needed):
// GPT-2's on the H200's 132 SMs, the device test's shapes, and products that stay stream-K.
TEST(CudaCompile, WeightGradientsFillOneWaveOfKSlices) {
  auto plan = [](int64_t m, int64_t n, int64_t k) {
    const WaveSlices w = wave_slices(m, n, k, 132);
    return std::to_string(w.bm) + "x" + std::to_string(w.bn) + " x " + std::to_string(w.slices);
  };
  EXPECT_EQ(plan(3072, 768, 16384), "192x192 x 2");  // fc dW: 64 tiles, 128 blocks
  EXPECT_EQ(plan(768, 3072, 16384), "192x192 x 2");  // fc2 dW
  EXPECT_EQ(plan(2304, 768, 16384), "128x256 x 2");  // qkv dW: 54 tiles, 108 blocks (192: 96, 73%)
  EXPECT_EQ(plan(768, 768, 16384), "192x192 x 8");   // proj dW
  EXPECT_EQ(plan(768, 768, 8192), "192x192 x 8");    // CudaDevice.MatmulsBatchedTransposed...'s shapes
  EXPECT_EQ(plan(712, 520, 8192), "192x192 x 11");
  EXPECT_EQ(plan(2304, 256, 8192), "128x256 x 7");
  EXPECT_EQ(plan(256, 512, 8384), "0x0 x 0");        // 6 tiles: too few steps a slice to fill the SMs
  EXPECT_EQ(plan(100, 1000, 16384), "0x0 x 0");      // M under a tile
  for (int64_t k : {64, 1024, 16384, 1 << 20})
    for (int64_t m : {192, 768, 3072, 50304}) {
      const WaveSlices w = wave_slices(m, 768, k, 132);
      if (!w.slices) continue;
      const int64_t blocks = ((m + w.bm - 1) / w.bm) * ((768 + w.bn - 1) / w.bn) * w.slices;
      EXPECT_TRUE(blocks <= 132 && blocks * 5 >= 132 * 4 && (k + 63) / 64 / w.slices >= 8) << m << " " << k;
    }
}

// The CUDA table (template_ops.h) answers for every template op the scheduler sends to a
// device: it runs it, for dtype families it names, or refuses it with the reason; Map kernels
// run every elementwise op. Each kernel family's file registered itself (linked whole).
TEST(CudaCompile, EveryTemplateOpIsRunOrRefused) {
  const OpCoverage* coverage = find_op_coverage("cuda");
  ASSERT_NE(coverage, nullptr);
  EXPECT_EQ(coverage, &template_ops().coverage());
  int runs = 0;
#define ALK_X(name, differentiable, writes_over_input0)                                                  \
  if (op_needs_backend_kernel(OpId::name)) {                                                               \
    SCOPED_TRACE(#name);                                                                                   \
    const OpSupport& s = coverage->support(OpId::name);                                                    \
    ASSERT_NE(s.status, OpSupport::Status::Missing);                                                       \
    if (s.status == OpSupport::Status::Runs) {                                                             \
      EXPECT_NE(s.dtypes, 0);                                                                              \
      ASSERT_NE(template_ops().find(OpId::name), nullptr);                                                 \
      EXPECT_NE(template_ops().find(OpId::name)->launch, nullptr);                                         \
      ++runs;                                                                                              \
    } else {                                                                                               \
      EXPECT_FALSE(s.note.empty());                                                                        \
      EXPECT_EQ(template_ops().find(OpId::name), nullptr);                                                 \
    }                                                                                                      \
  }
  ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
  EXPECT_GE(runs, 25);
  EXPECT_EQ(coverage->support(OpId::Conv2d).status, OpSupport::Status::Refused);
  EXPECT_EQ(coverage->support(OpId::Softmax).dtypes, kFloatDTypes);
  EXPECT_EQ(coverage->support(OpId::Gather).dtypes, kAllDTypes);
  for (const ElementwiseEntry& e : elementwise_table()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_EQ(coverage->support(e.op).status, OpSupport::Status::Runs);
    // The Integer rule's ops (bitwise, shifts, rotations) take integers and bools only.
    EXPECT_EQ(coverage->support(e.op).dtypes, e.rule == DTypeRule::Integer ? DTypeFamilies{kIntDType} : kAllDTypes);
  }
}

// Every kernel family's sample sources are in the catalogue the compile tests walk (its file
// registered them), with no NVRTC needed to list them.
TEST(CudaCompile, TemplateSourcesComeFromEveryFamily) {
  std::map<std::string, int> by_family;
  for (const auto& [what, src] : template_sources()) {
    by_family[what.substr(0, what.find_first_of(" _"))]++;
    EXPECT_NE(src.find("extern \"C\" __global__"), std::string::npos) << what;
  }
  for (const char* family : {"index", "random", "rows", "reduce", "cross", "matmul", "attention"})
    EXPECT_GT(by_family[family], 0) << family;
}

// The ALK_CUDA_* comparisons are read into cuda::Tuning in one place: each known value, and an
// unknown one refused with an alk::Error naming the variable (a typo must not silently run
// the default kernels in an A/B benchmark).
TEST(CudaCompile, TuningReadsTheEnvironment) {
  const char* variables[] = {"ALK_CUDA_GEMM", "ALK_CUDA_SPLIT_K", "ALK_CUDA_ATTENTION_FORWARD",
                             "ALK_CUDA_ATTENTION_BACKWARD", "ALK_CUDA_LN_FORWARD", "ALK_CUDA_LN_BACKWARD"};
  for (const char* v : variables) unsetenv(v);
  const Tuning defaults = Tuning::from_environment();
  EXPECT_EQ(defaults.gemm, GemmKernel::Auto);
  EXPECT_FALSE(defaults.split_k_slices || defaults.attention_forward_mma || defaults.attention_backward_mma ||
               defaults.layer_norm_forward_old || defaults.layer_norm_backward_old);
  setenv("ALK_CUDA_GEMM", "wgmmatmapp", 1);
  setenv("ALK_CUDA_SPLIT_K", "slices", 1);
  setenv("ALK_CUDA_ATTENTION_BACKWARD", "mma", 1);
  setenv("ALK_CUDA_LN_FORWARD", "old", 1);
  const Tuning set = Tuning::from_environment();
  EXPECT_EQ(set.gemm, GemmKernel::WgmmaTmaPingpong);
  EXPECT_TRUE(set.split_k_slices && set.attention_backward_mma && set.layer_norm_forward_old);
  EXPECT_FALSE(set.attention_forward_mma || set.layer_norm_backward_old);
  setenv("ALK_CUDA_GEMM", "wgmma-typo", 1);
  try {
    Tuning::from_environment();
    ADD_FAILURE() << "an unknown ALK_CUDA_GEMM was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "ALK_CUDA_GEMM");
    EXPECT_NE(std::string(e.what()).find("wgmma-typo"), std::string::npos) << e.what();
  }
  for (const char* v : variables) unsetenv(v);
}

TEST(CudaCompile, MapKernelsOfEveryTableEntryCompile) {
  ALK_NEED_NVRTC();
  int compiled = 0;
  for (const ElementwiseEntry& e : elementwise_table()) {
    for (DType t : {DType::F32, DType::BF16, DType::I64}) {
      SCOPED_TRACE(std::string(e.name) + " " + std::string(dtype_name(t)));
      std::vector<Operand> operands;
      for (int k = 0; k < e.arity; ++k)
        operands.emplace_back(ones({2, 3}, e.rule == DTypeRule::Select && k == 0 ? DType::Bool : t));
      std::optional<std::pair<expr::Expr, expr::MapSignature>> kernel;
      try {
        kernel = fused_map_kernel(apply_elementwise(e.op, operands, Loc::current()).impl());
      } catch (const Error&) {
        continue;  // the entry's dtype rule refuses this dtype
      }
      ASSERT_TRUE(kernel.has_value());
      expr::MapSignature sig = kernel->second;
      sig.name = "map";  // as the backend names it (an op name like "tanh" would clash with the math library)
      const std::string src = expr::emit_map_kernel(kernel->first, sig, expr::Target::Cuda);
      EXPECT_NO_THROW(compile_cubin(src, "sm_90a")) << src;
      // As launches compile it: for a known rank, with 32-bit index math.
      if (t == DType::F32) {
        EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 3\n#define ALK_INDEX32 1\n" + src, "sm_90a"));
      }
      // Contiguous operands: the vector loop (16 bytes per operand; 8 bf16 or 2 i64).
      const std::string vec = t == DType::BF16 ? "8" : t == DType::I64 ? "2" : "4";
      EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 1\n#define ALK_INDEX32 1\n#define ALK_VEC " + vec + "\n" + src, "sm_90a"));
      if (t == DType::BF16) {  // rows of a rank-4 view, contiguous along the innermost dim
        EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 4\n#define ALK_VEC 8\n" + src, "sm_90a"));
        // ... with the first operand constant along each row.
        EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 4\n#define ALK_VEC 8\n#define ALK_VEC_BCAST_0 1\n" + src, "sm_90a"));
      }
      ++compiled;
    }
  }
  EXPECT_GT(compiled, 100);
}

// Uniform inputs (every stride 0): their loads and what they alone decide come before the
// grid-stride loop, once per thread (AdamW's bias corrections, pow in f64, were computed per
// element); the kernel still compiles, and without the flags it is the plain kernel.
TEST(CudaCompile, UniformSubexpressionsAreHoistedOutOfTheLoop) {
  ALK_NEED_NVRTC();
  expr::Builder b;
  const int p = b.input(0, expr::Type::F32), t = b.input(1, expr::Type::F64), lr = b.input(2, expr::Type::F32);
  const int corr = b.cast(b.binary(expr::Fn::Div, b.constant(1, expr::Type::F64),
                                   b.binary(expr::Fn::Sub, b.constant(1, expr::Type::F64),
                                            b.binary(expr::Fn::Pow, b.constant(0.9, expr::Type::F64), t))),
                          expr::Type::F32);
  const expr::Expr e = b.finish(b.binary(expr::Fn::Sub, p, b.binary(expr::Fn::Mul, lr, b.binary(expr::Fn::Mul, corr, p))));
  const expr::MapSignature sig{"map", {DType::F32, DType::F64, DType::F32}, DType::F32};
  const std::string hoisted = expr::emit_map_kernel(e, sig, expr::Target::Cuda, {false, true, true});
  const size_t loop = hoisted.find("for (long long i");
  ASSERT_NE(loop, std::string::npos) << hoisted;
  EXPECT_LT(hoisted.find(" = pow("), loop) << hoisted;
  EXPECT_LT(hoisted.find("in1_data[p.offset[1]]"), loop) << hoisted;
  EXPECT_GT(hoisted.find("in0_data["), loop) << hoisted;  // the per-element input stays inside
  EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 1\n" + hoisted, "sm_90a")) << hoisted;
  const std::string plain = expr::emit_map_kernel(e, sig, expr::Target::Cuda);
  EXPECT_GT(plain.find(" = pow("), plain.find("for (long long i")) << plain;
  EXPECT_EQ(plain, expr::emit_map_kernel(e, sig, expr::Target::Cuda, {false, false, false}));
}

// The multi-tensor form of a Map kernel (a run of optimizer updates as one launch): the body
// becomes a device function the group kernel calls per member; it compiles with and without
// the vector loop, for kernels with inputs (uniform ones among them) and without.
TEST(CudaCompile, MapGroupKernelsCompile) {
  ALK_NEED_NVRTC();
  expr::Builder b;
  const int p = b.input(0, expr::Type::F32), t = b.input(1, expr::Type::F64), g = b.input(2, expr::Type::F32);  // bf16 storage, f32 arithmetic
  const int corr = b.cast(b.binary(expr::Fn::Pow, b.constant(0.9, expr::Type::F64), t), expr::Type::F32);
  const expr::Expr e = b.finish(b.binary(expr::Fn::Sub, p, b.binary(expr::Fn::Mul, corr, g)));
  const expr::MapSignature sig{"map", {DType::F32, DType::F64, DType::BF16}, DType::F32};
  const std::vector<bool> uniform{false, true, false};
  const std::string src = expr::emit_map_kernel(e, sig, expr::Target::Cuda, uniform) + expr::cuda_map_group_entry(sig, uniform);
  EXPECT_NE(src.find("map_group(const alk_group g)"), std::string::npos) << src;
  EXPECT_NE(src.find("p.strides[1][d] = 0;"), std::string::npos) << src;  // the uniform input
  const std::string group = "#define ALK_RANK 1\n#define ALK_INDEX32 1\n#define ALK_GROUP 48\n";
  EXPECT_NO_THROW(compile_cubin(group + src, "sm_90a"));
  EXPECT_NO_THROW(compile_cubin(group + "#define ALK_VEC 4\n" + src, "sm_90a"));
  EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 1\n" + src.substr(0, src.find("\n// One launch for a group")), "sm_90a"));
  expr::Builder c;
  const expr::Expr zero = c.finish(c.constant(0, expr::Type::F32));
  const expr::MapSignature none{"map", {}, DType::F32};
  EXPECT_NO_THROW(compile_cubin(group + expr::emit_map_kernel(zero, none, expr::Target::Cuda) +
                                    expr::cuda_map_group_entry(none, {}),
                                "sm_90a"));
}

// A Map kernel with extra outputs (Kernel::extra_outputs): an f32 sum stored with its bf16
// cast and a function of it; the shared value is computed once; with and without the vector loop.
TEST(CudaCompile, MapKernelsWithExtraOutputsCompile) {
  ALK_NEED_NVRTC();
  expr::Builder b;
  const int sum = b.binary(expr::Fn::Add, b.input(0, expr::Type::F32), b.input(1, expr::Type::F32));
  const expr::Expr e = b.finish(sum);
  const expr::Expr half = b.finish(b.cast(sum, expr::Type::F32));  // stored as bf16
  const expr::Expr gelu_like = b.finish(b.binary(expr::Fn::Mul, sum, b.unary(expr::Fn::Tanh, sum)));
  // f32 operands: the bf16 output alone must bring cuda_bf16.h in.
  const expr::MapSignature sig{"map", {DType::F32, DType::F32}, DType::F32, {DType::BF16, DType::F32}};
  const std::string src = expr::emit_map_kernel(e, sig, expr::Target::Cuda, {}, {half, gelu_like});
  EXPECT_NE(src.find("__nv_bfloat16* __restrict__ out1_data, float* __restrict__ out2_data"), std::string::npos) << src;
  EXPECT_NE(src.find("out1_data[o1] = __float2bfloat16_rn("), std::string::npos) << src;
  EXPECT_NE(src.find("long long offset[5]"), std::string::npos) << src;
  // The sum once per element in each loop (scalar and vector), not once per output.
  size_t adds = 0;
  for (size_t at = src.find("(in0 + in1)"); at != std::string::npos; at = src.find("(in0 + in1)", at + 1)) ++adds;
  EXPECT_EQ(adds, 2u) << src;
  EXPECT_EQ(src.find("tanh.approx"), std::string::npos) << "an f32 output keeps tanhf";
  EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 1\n" + src, "sm_90a")) << src;
  EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 1\n#define ALK_INDEX32 1\n#define ALK_VEC 4\n" + src, "sm_90a")) << src;
  EXPECT_NO_THROW(compile_cubin("#define ALK_RANK 3\n" + src, "sm_90a")) << src;
  // Other languages and the multi-tensor group have one output.
  EXPECT_THROW(expr::emit_map_kernel(e, sig, expr::Target::Glsl, {}, {half, gelu_like}), Error);
  EXPECT_THROW(expr::cuda_map_group_entry(sig, {}), Error);
  EXPECT_THROW(expr::emit_map_kernel(e, sig, expr::Target::Cuda, {}, {half}), Error);  // two dtypes, one expression
}

TEST(CudaCompile, DivisionByMagicNumbersIsExact) {
  // What the Map kernels compute per dim, emulated on the host (umulhi = high half of the
  // 64-bit product), against plain division, over divisors and dividends up to 2^31.
  std::vector<int64_t> divisors = {1, 2, 3, 5, 7, 12, 64, 768, 1000, 3072, 50304, 65535, 65536, 1 << 20,
                                   (int64_t{1} << 31) - 1, int64_t{1} << 31};
  for (int64_t d = 1; d < 300; ++d) divisors.push_back(d);
  std::vector<uint32_t> dividends = {0, 1, 2, 767, 768, 769, 65535, 65536, 1000000, 0x7fffffffu, 0x7ffffffeu, 0x40000000u};
  for (uint32_t i = 0; i < 4096; ++i) dividends.push_back(i * 524287u % 0x80000000u);
  for (int64_t d : divisors) {
    const auto [magic, shift] = expr::cuda_division_magic(d);
    for (uint32_t i : dividends) {
      const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(i) * magic) >> 32);
      const uint32_t q = static_cast<uint32_t>((static_cast<uint64_t>(hi) + i) >> shift);
      ASSERT_EQ(q, static_cast<uint64_t>(i) / static_cast<uint64_t>(d)) << i << " / " << d;
    }
  }
}

TEST(CudaCompile, ACompileErrorNamesTheLogAndSource) {
  ALK_NEED_NVRTC();
  try {
    compile_cubin("extern \"C\" __global__ void broken() { undefined_name(); }", "sm_90a");
    FAIL() << "compiled a broken kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("undefined_name"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sm_90a"), std::string::npos) << e.what();
  }
}

TEST(CudaCompile, CubinsAreCachedByFullSource) {
  ALK_NEED_NVRTC();
  const std::string src = "extern \"C\" __global__ void cached_kernel(float* x) { x[threadIdx.x] += 1.0f; }";
  const CompileStats before = compile_stats();
  const std::string a = compile_cubin(src, "sm_90a");
  const std::string b = compile_cubin(src, "sm_90a");
  const CompileStats after = compile_stats();
  EXPECT_EQ(a, b);
  EXPECT_GE(after.memory_hits, before.memory_hits + 1);
  // A different source is a different entry, never the cached one.
  const std::string c = compile_cubin(src + "\n// another kernel text\n", "sm_90a");
  EXPECT_GE(compile_stats().memory_hits, after.memory_hits);
  EXPECT_FALSE(c.empty());
}

TEST(CudaDevices, ProbingWithoutADriverFindsNothingAndSaysWhy) {
  // On machines without a GPU the registry lists no cuda device and the reason is given;
  // with one, every listed device is a "cuda" kind with a name and memory.
  if (!driver()) {
    EXPECT_FALSE(driver_unavailable_reason().empty());
    EXPECT_TRUE(devices().empty());
    EXPECT_THROW(get_device("cuda:0"), Error);
    return;
  }
  for (const DeviceProps& p : devices()) {
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.memory_bytes, 0u);
  }
}

// The CUDA body of examples/sha256 inside alk's generated entry point (what cuda:N compiles).
TEST(CudaCompile, Sha256ExampleBodyCompiles) {
  ALK_NEED_NVRTC();
  const int ranks[] = {2, 1, 2};
  const std::string src = user_kernel_source(sha256::kernel().spec(), KernelTarget::Cuda, ranks);
  std::string cubin;
  EXPECT_NO_THROW(cubin = compile_cubin(src, "sm_90a")) << src;
  EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF"));
}

// NVRTC's message about a user kernel's body, at the body's own line ("name body(LINE)").
TEST(CudaCompile, UserKernelErrorsPointAtTheBodysLine) {
  ALK_NEED_NVRTC();
  KernelSpec s;
  s.name = "broken_cuda";
  s.inputs = {{"x", DType::F32}};
  s.output = {"res", DType::F32};
  s.body[static_cast<int>(KernelTarget::Cuda)] = "float twice = 2.0f * x[i];\nres[i] = twice + not_declared;\n";
  const int ranks[] = {1, 1};
  std::string log;
  try {
    compile_cubin(user_kernel_source(s, KernelTarget::Cuda, ranks), "sm_90a");
  } catch (const Error& e) {
    log = e.what();
  }
  ASSERT_FALSE(log.empty()) << "the broken body compiled";
  std::string what;
  try {
    fail_user_kernel_compile(s, KernelTarget::Cuda, log, Loc::current());
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("CUDA body does not compile"), std::string::npos) << what;
  EXPECT_NE(what.find("body line 2:"), std::string::npos) << what << "\nNVRTC said:\n" << log;
  EXPECT_NE(what.find("not_declared"), std::string::npos) << what;
}

}  // namespace
}  // namespace alk::cuda
#endif
