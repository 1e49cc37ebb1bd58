// Every elementwise entry of the op table (include/alk/elementwise.def) as a Vulkan Map
// kernel, over every dtype the entry accepts that the device can run, with broadcast,
// transposed and offset inputs, against the CPU backend's evaluator on the same layout.
//
// The kernel is the one the scheduler builds: the entry is applied to realized CPU
// tensors through the Tensor API and fused_map_kernel() returns its expression and
// signature. Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), per output dtype:
//   bool, integers           exact; integer pow: 2 f32 ulp (GLSL computes it in f32, rounded,
//                            so results below ~2^22 are exact)
//   f32, f64 arithmetic      rtol 1e-6 (f32) / 1e-12 (f64), atol the same
//   f32 transcendentals      rtol 2e-5, atol 2e-5 -- GLSL's exp/log/sin/cos/tanh/pow are
//                            only specified to a few ULP (sin/cos to 2^-11 absolute) and
//                            erf/log1p/expm1 are the IR's expansions (erf |err| <= 1.5e-7)
//   f64 transcendentals      as f32: GLSL has no double exp/log/..., they run in f32
//   f16 / bf16               one unit in the last place of the output (2^-10 / 2^-7
//                            relative), on top of the f32 tolerance: rounding the same
//                            value computed slightly differently may land one step away
// Measured on lavapipe (Mesa 22.3, LLVM 15): f32 transcendental max relative error ~3e-7.
// The golden GLSL files (tests/golden) run here too, as checked in, with the same tolerances.
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "alk/error.h"
#include "backend/cpu/eval.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/map_kernel.h"
#include "backend/vulkan/stream.h"
#include "core/half.h"
#include "expr/golden_kernels.h"
#include "alk/io.h"
#include "graph/schedule.h"
#include "alk/op_table.h"
#include "ops/ops.h"
#include "vulkan_test_util.h"

namespace alk::vk {
namespace {

const DType kDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool};

bool has_transcendental(const expr::Expr& e) {
  using expr::Fn;
  for (const expr::Node& n : e.nodes)
    switch (n.fn) {
      case Fn::Exp: case Fn::Log: case Fn::Log1p: case Fn::Expm1: case Fn::Sin: case Fn::Cos: case Fn::Tanh:
      case Fn::Erf: case Fn::Pow: case Fn::Sqrt: case Fn::Rsqrt: return true;
      default: break;
    }
  return false;
}

// Values an entry is sampled at, as the dtype stores them.
double sample(Domain d, DType t, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  if (t == DType::Bool) return static_cast<double>(rng() % 2);
  if (!is_floating(t)) {
    const int64_t lo = t == DType::U8 ? 0 : -5;
    int64_t v = lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(10 - lo));
    if (d == Domain::Positive) return static_cast<double>(1 + rng() % 5);  // pow stays below 2^22: 5^5
    if (d == Domain::NonZero && v == 0) v = 1;
    return static_cast<double>(v);
  }
  double x = u(rng);
  switch (d) {
    case Domain::Any: break;
    case Domain::Positive: x = 0.2 + std::fabs(x); break;
    case Domain::NonZero: x = (x < 0 ? -0.3 : 0.3) + x * 0.8; break;
    case Domain::Frac: x = std::floor(x * 2) + 0.5 * (rng() % 2) + 0.25 * (rng() % 2); break;  // halves too
  }
  return x;
}

void store(std::vector<uint8_t>& buf, DType t, int64_t at, double v) {
  cpu::store_double(buf.data(), t, at, v);
}

// One operand: host bytes and the layout both devices read it through.
struct Operand {
  DType dtype;
  std::vector<uint8_t> host;
  std::vector<int64_t> strides;
  int64_t offset;
};

// Output [3, 5]. Operand 0: full, stored transposed at element offset 7. Operand 1: a
// row [5] broadcast over rows, at offset 3. Operand 2: a column [3, 1] broadcast over
// columns, stored with stride 2 at offset 1.
const std::vector<int64_t> kShape = {3, 5};

Operand make_operand(int k, DType t, Domain d, std::mt19937& rng) {
  Operand o{t, {}, {}, 0};
  int64_t elements = 0;
  std::vector<std::pair<int64_t, int64_t>> cells;  // (row, col) -> stored at offset + r*s0 + c*s1
  switch (k % 3) {
    case 0: o.strides = {1, 3}, o.offset = 7, elements = 7 + 15; break;
    case 1: o.strides = {0, 1}, o.offset = 3, elements = 3 + 5; break;
    default: o.strides = {2, 0}, o.offset = 1, elements = 1 + 5; break;
  }
  o.host.assign(static_cast<size_t>(elements + 1) * dtype_size(t), 0xAB);  // padding: garbage
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) store(o.host, t, o.offset + r * o.strides[0] + c * o.strides[1], sample(d, t, rng));
  return o;
}

// The operand as a realized CPU tensor of dtype t (for the Tensor API to build the kernel).
Tensor cpu_tensor(const Operand& o) {
  std::vector<double> v(15);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c)
      v[static_cast<size_t>(r * 5 + c)] =
          cpu::load_as_double(o.host.data(), o.dtype, o.offset + r * o.strides[0] + c * o.strides[1]);
  Tensor t = cast(tensor(v, kShape), o.dtype);
  t.realize();
  return t;
}

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance(DType out, bool transcendental) {
  switch (out) {
    case DType::Bool: case DType::U8: case DType::I32: case DType::I64:
      // Integer pow runs in f32 in GLSL and is rounded: exact below ~2^22, else 2 f32 ulp.
      return transcendental ? Tolerance{2.5e-7, 0} : Tolerance{0, 0};
    case DType::F64: return transcendental ? Tolerance{2e-5, 2e-5} : Tolerance{1e-12, 1e-12};
    case DType::F32: return transcendental ? Tolerance{2e-5, 2e-5} : Tolerance{1e-6, 1e-6};
    case DType::F16: return {std::ldexp(1.0, -10) + 2e-5, 2e-5};
    case DType::BF16: return {std::ldexp(1.0, -7) + 2e-5, 2e-5};
  }
  return {0, 0};
}

struct Coverage {
  int ran = 0, unsupported_by_device = 0, rejected_by_op = 0;
  double worst_f32_transcendental = 0;  // max |gpu - cpu| / (1 + |cpu|), for the header's numbers
};

void check_entry(Context& ctx, const ElementwiseEntry& e, DType t, std::mt19937& rng, Coverage& cov) {
  std::vector<Operand> ops;
  std::vector<Tensor> tensors;
  for (int k = 0; k < e.arity; ++k) {
    const DType dt = e.rule == DTypeRule::Select && k == 0 ? DType::Bool : t;
    ops.push_back(make_operand(k, dt, e.domain, rng));
    tensors.push_back(cpu_tensor(ops.back()));
  }
  std::optional<std::pair<expr::Expr, expr::MapSignature>> kernel;
  try {
    Tensor y = apply_elementwise(e.op, std::vector<alk::Operand>(tensors.begin(), tensors.end()), Loc::current());
    kernel = fused_map_kernel(y.impl());
  } catch (const Error&) {
    ++cov.rejected_by_op;  // the entry's dtype rule refuses this dtype (e.g. logical ops are fine, neg of bool is not)
    return;
  }
  ASSERT_TRUE(kernel.has_value());
  const auto& [ex, sig] = *kernel;
  ASSERT_EQ(sig.inputs.size(), ops.size());
  const std::string glsl = expr::emit_map_kernel(ex, sig, expr::Target::Glsl);
  if (!map_unsupported_reason(ctx, glsl, sig.inputs.size() + 2).empty()) {
    ++cov.unsupported_by_device;
    return;
  }
  std::optional<MapKernel> made;
  try {
    made.emplace(ctx, ex, sig);
  } catch (const Error& err) {
    ADD_FAILURE() << e.name << " " << dtype_name(t) << ": " << err.what();
    return;
  }
  const MapKernel& mk = *made;

  // CPU reference: the evaluator over the same strided, offset host bytes.
  std::vector<cpu::View> views;
  for (Operand& o : ops) views.push_back(cpu::View{o.host.data(), o.dtype, kShape, o.strides, o.offset});
  const int64_t out_offset = 5;  // the output also starts mid-buffer
  std::vector<uint8_t> want(static_cast<size_t>(15 + out_offset) * dtype_size(sig.output), 0);
  cpu::eval_map(ex, views, cpu::View{want.data() + out_offset * dtype_size(sig.output), sig.output, kShape, {5, 1}, 0});

  // GPU: each operand in its own allocation, uploaded whole; output at an element offset.
  std::vector<ViewArg> args;
  for (Operand& o : ops) {
    auto a = ctx.pool().allocate(o.host.size());
    ctx.stream().upload(a, 0, o.host.data(), o.host.size());
    args.push_back(ViewArg{a, 0, o.dtype, kShape, o.strides, o.offset});
  }
  auto out = ctx.pool().allocate(want.size());
  std::vector<uint8_t> got(want.size(), 0);
  ctx.stream().upload(out, 0, got.data(), got.size());
  mk.launch(ctx.stream(), args, ViewArg{out, 0, sig.output, kShape, {5, 1}, out_offset});
  ctx.stream().download(out, 0, got.data(), got.size());

  const Tolerance tol = tolerance(sig.output, has_transcendental(ex));
  for (int64_t i = 0; i < 15 + out_offset; ++i) {
    const double w = cpu::load_as_double(want.data(), sig.output, i), g = cpu::load_as_double(got.data(), sig.output, i);
    if (i < out_offset) {
      ASSERT_EQ(g, 0.0) << "wrote before its output";
      continue;
    }
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (sig.output == DType::F32 && has_transcendental(ex))
      cov.worst_f32_transcendental = std::max(cov.worst_f32_transcendental, std::fabs(g - w) / (1 + std::fabs(w)));
    if (!(std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w))) {
      ADD_FAILURE() << e.name << " " << dtype_name(t) << " -> " << dtype_name(sig.output) << " element "
                    << i - out_offset << ": gpu " << g << " cpu " << w << " (tolerance " << tol.atol << " + "
                    << tol.rtol << " relative)\n"
                    << glsl;
      return;
    }
  }
  ++cov.ran;
}

TEST(VulkanMap, EveryElementwiseEntryEveryDtype) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  std::mt19937 rng(11);
  Coverage cov;
  for (const ElementwiseEntry& e : elementwise_table()) {
    int ran_before = cov.ran;
    for (DType t : kDTypes) {
      SCOPED_TRACE(std::string(e.name) + " " + std::string(dtype_name(t)));
      check_entry(*ctx, e, t, rng, cov);
    }
    EXPECT_GT(cov.ran, ran_before) << e.name << " ran on no dtype";
  }
  std::cout << "Map parity: " << cov.ran << " kernels ran, " << cov.unsupported_by_device
            << " not supported by the device, " << cov.rejected_by_op << " dtypes refused by the op; worst f32 "
            << "transcendental error " << cov.worst_f32_transcendental << " (relative to 1 + |cpu|)\n";
}

TEST(VulkanMap, LargeAndParamsInABuffer) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // Three inputs: the params block (152 bytes) no longer fits push constants.
  const ElementwiseEntry* clamp = find_elementwise("clamp");
  ASSERT_NE(clamp, nullptr);
  const int64_t n = 300001;  // more than one grid-stride pass per thread on small devices
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 1000) / 250.0f - 2.0f;
  Tensor tx = tensor(x, {n}), lo = tensor(std::vector<float>{-1.0f}, {1}), hi = tensor(std::vector<float>{1.5f}, {1});
  Tensor y = apply_elementwise(clamp->op, {tx, lo, hi}, Loc::current());
  auto k = fused_map_kernel(y.impl());
  ASSERT_TRUE(k.has_value());
  MapKernel mk(*ctx, k->first, k->second);
  EXPECT_FALSE(mk.push_constants());
  auto ax = ctx->pool().allocate(n * 4), alo = ctx->pool().allocate(4), ahi = ctx->pool().allocate(4),
       out = ctx->pool().allocate(n * 4);
  ctx->stream().upload(ax, 0, x.data(), n * 4);
  const float l = -1.0f, h = 1.5f;
  ctx->stream().upload(alo, 0, &l, 4);
  ctx->stream().upload(ahi, 0, &h, 4);
  std::vector<ViewArg> args{{ax, 0, DType::F32, {n}, {1}, 0}, {alo, 0, DType::F32, {n}, {0}, 0},
                            {ahi, 0, DType::F32, {n}, {0}, 0}};
  mk.launch(ctx->stream(), args, ViewArg{out, 0, DType::F32, {n}, {1}, 0});
  std::vector<float> got(n);
  ctx->stream().download(out, 0, got.data(), n * 4);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], std::min(std::max(x[static_cast<size_t>(i)], l), h)) << i;
}

TEST(VulkanMap, ArenaSlicesAtUnalignedOffsets) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // Two tensors inside one "arena" allocation at byte offsets that are not binding-aligned.
  const ElementwiseEntry* add = find_elementwise("add");
  Tensor a = tensor(std::vector<float>(10, 1.0f), {10}), b = tensor(std::vector<float>(10, 2.0f), {10});
  auto k = fused_map_kernel(apply_elementwise(add->op, {a, b}, Loc::current()).impl());
  MapKernel mk(*ctx, k->first, k->second);
  EXPECT_TRUE(mk.push_constants());
  auto arena = ctx->pool().allocate(4096);
  std::vector<float> host(1024);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  ctx->stream().upload(arena, 0, host.data(), 4096);
  // in0 at byte 12 (+ element offset 1), in1 at byte 1000, out at byte 2052.
  std::vector<ViewArg> args{{arena, 12, DType::F32, {10}, {1}, 1}, {arena, 1000, DType::F32, {10}, {1}, 0}};
  mk.launch(ctx->stream(), args, ViewArg{arena, 2052, DType::F32, {10}, {1}, 0});
  std::vector<float> got(1024);
  ctx->stream().download(arena, 0, got.data(), 4096);
  for (size_t i = 0; i < 10; ++i) ASSERT_EQ(got[513 + i], host[4 + i] + host[250 + i]) << i;
  EXPECT_EQ(got[512], host[512]);  // untouched around the output
  EXPECT_EQ(got[523], host[523]);
  // A view reaching past its allocation is refused, not read.
  std::vector<ViewArg> bad{{arena, 4080, DType::F32, {10}, {1}, 0}, args[1]};
  EXPECT_THROW(mk.launch(ctx->stream(), bad, ViewArg{arena, 2052, DType::F32, {10}, {1}, 0}), Error);
}

// The vector loop (4 elements per iteration, 16-byte loads; emit_glsl.cpp, map_kernel.cpp)
// against the CPU evaluator, over layouts that must take it (aligned contiguous operands,
// a bias broadcast over rows, a per-row value, an f64 scalar, tails of 1-3 elements) and
// layouts that must not (an input or the output starting off a 16-byte boundary, a
// transposed input, rows of a length not a multiple of 4). Values are distinct per
// element, so a vector read from the wrong place, a lane mixed up or a tail element
// skipped shows.
TEST(VulkanMap, VectorPathOddSizesOffsetsAndBroadcasts) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  struct In {
    DType dtype;
    std::vector<int64_t> strides;  // over the output shape
    int64_t offset;                // in elements
  };
  struct Case {
    const char* what;
    std::vector<int64_t> shape;
    std::vector<In> ins;  // a, b, c of a * b + cast(c)
    int64_t out_offset;
    bool vectorized;
  };
  const DType f = DType::F32, d = DType::F64, i = DType::I32;
  const std::vector<Case> cases = {
      {"contiguous, n % 4 == 3", {1027}, {{f, {1}, 0}, {f, {1}, 4}, {f, {1}, 8}}, 0, true},
      {"contiguous, n % 4 == 1, output at 4", {13}, {{f, {1}, 0}, {f, {1}, 0}, {f, {1}, 0}}, 4, true},
      {"f64 scalar and f32 scalar splats", {1030}, {{f, {1}, 0}, {f, {0}, 3}, {d, {0}, 1}}, 0, true},
      {"i32 operand", {258}, {{f, {1}, 0}, {i, {1}, 0}, {f, {1}, 0}}, 0, true},
      {"bool scalar, bf16 per row", {6, 16}, {{f, {16, 1}, 0}, {DType::Bool, {0, 0}, 2}, {DType::BF16, {1, 0}, 3}}, 0, true},
      {"u8 and f16 per row", {5, 8}, {{f, {8, 1}, 4}, {DType::U8, {1, 0}, 1}, {DType::F16, {2, 0}, 1}}, 0, true},
      {"f16 per element", {64}, {{f, {1}, 0}, {f, {1}, 0}, {DType::F16, {1}, 0}}, 0, false},
      {"bias over rows, per-row value", {6, 12}, {{f, {12, 1}, 0}, {f, {0, 1}, 4}, {f, {1, 0}, 1}}, 0, true},
      {"input at element 1", {1027}, {{f, {1}, 1}, {f, {1}, 0}, {f, {1}, 0}}, 0, false},
      {"output at element 2", {1027}, {{f, {1}, 0}, {f, {1}, 0}, {f, {1}, 0}}, 2, false},
      {"transposed input", {8, 12}, {{f, {1, 8}, 0}, {f, {12, 1}, 0}, {f, {12, 1}, 0}}, 0, false},
      {"rows of 10", {6, 10}, {{f, {10, 1}, 0}, {f, {0, 1}, 0}, {f, {10, 1}, 0}}, 0, false},
      {"row stride not a multiple of 4", {6, 8}, {{f, {10, 1}, 0}, {f, {8, 1}, 0}, {f, {8, 1}, 0}}, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    int64_t n = 1;
    for (int64_t s : c.shape) n *= s;
    std::vector<Tensor> symbolic;
    std::vector<std::vector<uint8_t>> host;
    std::vector<cpu::View> views;
    std::vector<ViewArg> args;
    for (size_t k = 0; k < c.ins.size(); ++k) {
      const In& in = c.ins[k];
      int64_t last = in.offset;
      for (size_t dim = 0; dim < c.shape.size(); ++dim) last += (c.shape[dim] - 1) * in.strides[dim];
      std::vector<uint8_t> bytes(static_cast<size_t>(last + 1) * dtype_size(in.dtype));
      for (int64_t e = 0; e <= last; ++e)
        store(bytes, in.dtype, e, static_cast<double>((e * 7 + static_cast<int64_t>(k) * 13) % 97) - 40.0);
      host.push_back(std::move(bytes));
      symbolic.push_back(cast(zeros(c.shape), in.dtype));
    }
    for (Tensor& t : symbolic) t.realize();
    Tensor y = symbolic[0] * cast(symbolic[1], f) + cast(symbolic[2], f);
    auto kernel = fused_map_kernel(y.impl());
    ASSERT_TRUE(kernel.has_value());
    const auto& [ex, sig] = *kernel;
    ASSERT_EQ(sig.inputs.size(), 3u);
    MapKernel mk(*ctx, ex, sig);
    for (size_t k = 0; k < c.ins.size(); ++k) {
      views.push_back(cpu::View{host[k].data(), c.ins[k].dtype, c.shape, c.ins[k].strides, c.ins[k].offset});
      auto a = ctx->pool().allocate(host[k].size());
      ctx->stream().upload(a, 0, host[k].data(), host[k].size());
      args.push_back(ViewArg{a, 0, c.ins[k].dtype, c.shape, c.ins[k].strides, c.ins[k].offset});
    }
    std::vector<int64_t> out_strides(c.shape.size(), 1);
    for (size_t dim = c.shape.size() - 1; dim-- > 0;) out_strides[dim] = out_strides[dim + 1] * c.shape[dim + 1];
    const size_t total = static_cast<size_t>(n + c.out_offset + 3);  // and 3 past the end, untouched
    std::vector<float> want(total, -999.0f), got(total, -999.0f);
    cpu::eval_map(ex, views, cpu::View{want.data() + c.out_offset, f, c.shape, out_strides, 0});
    auto out = ctx->pool().allocate(total * 4);
    ctx->stream().upload(out, 0, got.data(), total * 4);
    mk.launch(ctx->stream(), args, ViewArg{out, 0, f, c.shape, out_strides, c.out_offset});
    ctx->stream().download(out, 0, got.data(), total * 4);
    EXPECT_EQ(mk.last_launch_vectorized(), c.vectorized && !std::getenv("ALK_VK_MAP_SCALAR"));
    for (size_t e = 0; e < total; ++e) ASSERT_EQ(got[e], want[e]) << "element " << static_cast<int64_t>(e) - c.out_offset;
  }
}


// The golden GLSL files (tests/golden/*.glsl) run as checked in: ExprEmit.GoldenKernels keeps
// each equal to what the emitter writes, and here it is compiled, launched on the device and
// compared with the CPU's evaluator of the same expression over the same bytes, for two
// layouts: a contiguous run of 1027 elements (the vector loop where the kernel has one, and a
// scalar tail) and the strided, broadcast [3, 5] operands of make_operand. An input the
// golden marks uniform (one value per launch) is one element, read through stride 0.
void run_golden(Context& ctx, const expr::testing::Golden& g, const std::string& glsl, bool contiguous,
                std::mt19937& rng) {
  const std::vector<int64_t> shape = contiguous ? std::vector<int64_t>{1027} : kShape;
  const int64_t n = contiguous ? 1027 : 15;
  std::vector<Operand> ops;
  for (size_t k = 0; k < g.sig.inputs.size(); ++k) {
    const DType t = g.sig.inputs[k];
    const bool uniform = k < g.uniform_inputs.size() && g.uniform_inputs[k];
    if (uniform || contiguous) {
      const int64_t stored = uniform ? 1 : n;
      Operand o{t, std::vector<uint8_t>(static_cast<size_t>(stored) * dtype_size(t)),
                std::vector<int64_t>(shape.size(), uniform ? 0 : 1), 0};
      for (int64_t i = 0; i < stored; ++i) store(o.host, t, i, sample(Domain::Any, t, rng));
      ops.push_back(std::move(o));
    } else {
      ops.push_back(make_operand(static_cast<int>(k), t, Domain::Any, rng));
    }
  }
  std::vector<cpu::View> views;
  std::vector<ViewArg> args;
  for (Operand& o : ops) {
    views.push_back(cpu::View{o.host.data(), o.dtype, shape, o.strides, o.offset});
    auto a = ctx.pool().allocate(o.host.size());
    ctx.stream().upload(a, 0, o.host.data(), o.host.size());
    args.push_back(ViewArg{a, 0, o.dtype, shape, o.strides, o.offset});
  }
  const std::vector<int64_t> out_strides = contiguous ? std::vector<int64_t>{1} : std::vector<int64_t>{5, 1};
  const size_t bytes = static_cast<size_t>(n) * dtype_size(g.sig.output);
  std::vector<uint8_t> want(bytes, 0), got(bytes, 0xAB);
  cpu::eval_map(g.expr, views, cpu::View{want.data(), g.sig.output, shape, out_strides, 0});
  const MapKernel mk(ctx, glsl, g.sig);
  auto out = ctx.pool().allocate(bytes);
  ctx.stream().upload(out, 0, got.data(), bytes);
  mk.launch(ctx.stream(), args, ViewArg{out, 0, g.sig.output, shape, out_strides, 0});
  ctx.stream().download(out, 0, got.data(), bytes);
  const Tolerance tol = tolerance(g.sig.output, has_transcendental(g.expr));
  for (int64_t i = 0; i < n; ++i) {
    const double w = cpu::load_as_double(want.data(), g.sig.output, i), v = cpu::load_as_double(got.data(), g.sig.output, i);
    if ((std::isnan(w) && std::isnan(v)) || (std::isinf(w) && v == w)) continue;
    ASSERT_LE(std::fabs(v - w), tol.atol + tol.rtol * std::fabs(w))
        << "element " << i << ": gpu " << v << ", cpu " << w << (contiguous ? " (contiguous)" : " (strided)");
  }
}

TEST(VulkanMap, GoldenGlslFilesRunAndMatchTheCpu) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const DeviceInfo& info = ctx->info();
  const bool every_feature = info.float64 && info.int64 && info.storage16 && info.storage8;
  std::mt19937 rng(29);
  int ran = 0;
  for (const expr::testing::Golden& g : expr::testing::goldens()) {
    SCOPED_TRACE(g.name);
    const std::string path = expr::testing::golden_path(g.name, expr::Target::Glsl).string();
    const std::string glsl = try_read_file(path).value_or("");
    ASSERT_FALSE(glsl.empty()) << path;
    const bool push = expr::glsl_params_in_push_constants(g.sig.inputs.size());
    const std::string why = map_unsupported_reason(*ctx, glsl, g.sig.inputs.size() + 1 + (push ? 0 : 1));
    if (!why.empty()) {
      // Lavapipe (CI's device) has every feature the goldens use: there each must run.
      EXPECT_FALSE(every_feature) << why;
      std::cout << "golden " << g.name << " cannot run on " << info.name << ": " << why << "\n";
      continue;
    }
    run_golden(*ctx, g, glsl, true, rng);
    run_golden(*ctx, g, glsl, false, rng);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace alk::vk
#endif
