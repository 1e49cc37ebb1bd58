// Reductions and row-wise ops on Vulkan (src/backend/vulkan/kernels/reduce.cpp) against the
// CPU backend's kernels: the same Kernel (same bytes, same views) run on both devices.
//
// Tolerances (relative to max(|cpu|, scale), scale given per case as the size of the terms):
// the CPU accumulates floating sums in f64, the GPU in f32 (f64 for f64 tensors), in a
// different order, so f32 results agree to a few ulps of the terms' magnitude (1e-5); f16
// and bf16 results may round the other way: 1 ulp of the output (2e-3, 1.6e-2). f64 results
// agree to 1e-12 (softmax: 1e-13, with exp and log on double written out in the shader as
// GLSL has none). Integers, argmax/argmin,
// max and min are exact, NaN matches NaN and infinities match exactly.
#include "required.h"
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "alk/device.h"
#include "alk/tensor.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_device.h"
#include "core/half.h"
#include "alk/expr.h"
#include "runtime/device.h"

namespace alk {
namespace {

Device* vulkan_or_null() {
  if (vk::devices().empty()) return nullptr;
  return &get_device("vulkan");
}

#define ALK_VULKAN_DEVICE_OR_SKIP(dev)                                \
  Device* dev = vulkan_or_null();                                     \
  if (!dev) {                                                         \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + vk::unavailable_reason()); \
  }                                                                   \
  static_assert(true)

std::vector<uint8_t> encode(DType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * dtype_size(t);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (t) {
      case DType::F32:
        put(static_cast<float>(v[i]));
        break;
      case DType::F64:
        put(v[i]);
        break;
      case DType::F16:
        put(f32_to_f16(static_cast<float>(v[i])));
        break;
      case DType::BF16:
        put(f32_to_bf16(static_cast<float>(v[i])));
        break;
      case DType::I64:
        put(static_cast<int64_t>(v[i]));
        break;
      case DType::I32:
        put(static_cast<int32_t>(v[i]));
        break;
      case DType::U8:
      case DType::Bool:
        put(static_cast<uint8_t>(v[i]));
        break;
    }
  }
  return out;
}

std::vector<double> decode(DType t, const std::vector<uint8_t>& b) {
  std::vector<double> out(b.size() / dtype_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = b.data() + i * dtype_size(t);
    auto get = [p](auto x) {
      std::memcpy(&x, p, sizeof x);
      return x;
    };
    switch (t) {
      case DType::F32:
        out[i] = get(0.0f);
        break;
      case DType::F64:
        out[i] = get(0.0);
        break;
      case DType::F16:
        out[i] = f16_to_f32(get(uint16_t{}));
        break;
      case DType::BF16:
        out[i] = bf16_to_f32(get(uint16_t{}));
        break;
      case DType::I64:
        out[i] = static_cast<double>(get(int64_t{}));
        break;
      case DType::I32:
        out[i] = get(int32_t{});
        break;
      case DType::U8:
      case DType::Bool:
        out[i] = get(uint8_t{});
        break;
    }
  }
  return out;
}

// One kernel built twice: arguments on the CPU and the same bytes on the Vulkan device.
struct Twin {
  Device* vk;
  Kernel cpu, gpu;
  size_t out_elems = 0;

  Twin(Device* dev, OpId op, Params params, DType node_dtype) : vk(dev) {
    for (Kernel* k : {&cpu, &gpu}) {
      k->op = k->node.op = op;
      k->node.params = params;
      k->node.dtype = node_dtype;
    }
  }

  // A view (shape, strides, offset) on storage holding `values`; every binding starts 3
  // elements into its buffer so offsets are exercised.
  std::pair<KernelArg, KernelArg> arg(DType t, const std::vector<double>& values, Shape shape, Shape strides,
                                      int64_t offset) {
    const std::vector<uint8_t> bytes = encode(t, values);
    const size_t at = 3 * dtype_size(t);
    auto c = cpu_device().allocate(bytes.size() + at + 8), g = vk->allocate(bytes.size() + at + 8);
    if (!bytes.empty()) {
      cpu_device().upload(*c, at, bytes.data(), bytes.size());
      vk->upload(*g, at, bytes.data(), bytes.size());
    }
    return {KernelArg{c, 0, t, shape, strides, offset + 3}, KernelArg{g, 0, t, shape, strides, offset + 3}};
  }
  void input(DType t, const std::vector<double>& values, Shape shape, Shape strides = {}, int64_t offset = 0) {
    if (strides.empty()) strides = contiguous_strides(shape);
    auto [c, g] = arg(t, values, shape, strides, offset);
    cpu.inputs.push_back(c), gpu.inputs.push_back(g);
  }
  void epilogue_input(DType t, const std::vector<double>& values, Shape shape, Shape strides = {}) {
    if (strides.empty()) strides = contiguous_strides(shape);
    auto [c, g] = arg(t, values, shape, strides, 0);
    cpu.epilogue_inputs.push_back(c), gpu.epilogue_inputs.push_back(g);
  }
  void output(DType t, Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out_elems = static_cast<size_t>(n);
    // Garbage in the output: every element must be written.
    auto [c, g] = arg(t, std::vector<double>(out_elems, 77), shape, contiguous_strides(shape), 0);
    cpu.output = c, gpu.output = g;
    cpu.node.shape = gpu.node.shape = shape;
  }

  static std::vector<double> read(Device& d, const KernelArg& a, size_t n) {
    std::vector<uint8_t> b(n * dtype_size(a.dtype));
    d.download(*a.buffer, static_cast<size_t>(a.offset) * dtype_size(a.dtype), b.data(), b.size());
    return decode(a.dtype, b);
  }
  std::vector<double> run_cpu() {
    cpu_device().run(cpu);
    return read(cpu_device(), cpu.output, out_elems);
  }
  std::vector<double> run_gpu() {
    EXPECT_TRUE(vk->supports(gpu)) << vk::unsupported_reason(0, gpu);
    vk->run(gpu);
    return read(*vk, gpu.output, out_elems);
  }
};

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double scale = 1,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::fabs(g - w) <= rtol * std::max(std::fabs(w), scale);
    if (!ok) {
      ADD_FAILURE() << what << " element " << i << ": vulkan " << g << ", cpu " << w;
      ++bad;
    }
  }
}

double rtol_of(DType t) {
  switch (t) {
    case DType::F16:
      return 2e-3;
    case DType::BF16:
      return 1.6e-2;
    case DType::F64:
      return 1e-12;
    default:
      return 1e-5;
  }
}

std::vector<double> randn(size_t n, uint32_t seed, double scale = 1) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(gen);
  return v;
}
std::vector<double> randint(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(gen);
  return v;
}

// Whether the device computes in dtype t (f64 needs shaderFloat64).
bool runs(Device* dev, DType t) {
  const auto& f = dev->info().features;
  return t != DType::F64 || std::find(f.begin(), f.end(), "f64") != f.end();
}

expr::Expr identity_expr(DType t) {
  expr::Builder b;
  return b.finish(b.input(0, compute_type(t)));
}

// ---- Reduce -----------------------------------------------------------------------------

struct ReduceCase {
  Shape base;            // the storage's shape
  Shape shape, strides;  // the view reduced (empty: base, contiguous)
  int64_t offset;
  std::vector<int> axes;
};

std::vector<ReduceCase> reduce_cases() {
  return {
      {{37, 19}, {}, {}, 0, {1}},
      {{37, 19}, {}, {}, 0, {0}},
      {{37, 19}, {}, {}, 0, {0, 1}},
      {{3, 5, 7}, {}, {}, 0, {0, 2}},
      {{3, 5, 7}, {}, {}, 0, {1}},
      {{2, 3, 4, 5}, {}, {}, 0, {1, 3}},
      {{19, 37}, {37, 19}, {1, 37}, 0, {1}},     // transposed
      {{11, 40}, {11, 13}, {40, 3}, 2, {0, 1}},  // strided with an offset
      {{5, 1, 33}, {}, {}, 0, {2}},
      {{1}, {}, {}, 0, {0}},
  };
}

void run_reduce(Device* dev, DType t, ReduceOp op, const ReduceCase& c, const std::vector<double>& values,
                double scale) {
  Shape shape = c.shape.empty() ? c.base : c.shape;
  Shape strides = c.strides.empty() ? contiguous_strides(shape) : c.strides;
  Shape keep = shape;
  for (int a : c.axes) keep[static_cast<size_t>(a)] = 1;
  const DType out_t = is_floating(t) ? t : DType::I64;
  Twin tw(dev, OpId::Reduce, ReduceParams{op, c.axes}, out_t);
  tw.input(t, values, shape, strides, c.offset);
  tw.cpu.node.in_shape = tw.gpu.node.in_shape = shape;
  tw.cpu.expr = tw.gpu.expr = identity_expr(t);
  tw.output(out_t, keep);
  const std::string what = std::string(dtype_name(t)) + " op " + std::to_string(static_cast<int>(op)) + " shape " +
                           to_string(shape) + " axes " + std::to_string(c.axes.size());
  const double rtol = op == ReduceOp::Max || op == ReduceOp::Min || !is_floating(t) ? 0 : rtol_of(t);
  expect_close(tw.run_gpu(), tw.run_cpu(), rtol, scale, what);
}

TEST(VulkanReduce, SumMaxMinProdOverAxesAndViews) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  uint32_t seed = 1;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32}) {
    if (!runs(dev, t)) continue;
    for (const ReduceCase& c : reduce_cases()) {
      int64_t n = 1;
      for (int64_t d : c.base) n *= d;
      const auto values =
          is_floating(t) ? randn(static_cast<size_t>(n), seed++) : randint(static_cast<size_t>(n), seed++, -50, 50);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
        run_reduce(dev, t, op, c, values, is_floating(t) ? 8 : 1);
      // Products of values near 1 stay finite.
      std::vector<double> near1(values.size());
      for (size_t i = 0; i < near1.size(); ++i)
        near1[i] = is_floating(t) ? 1 + 0.05 * values[i] : (i % 3 == 0 ? -1 : 1);
      run_reduce(dev, t, ReduceOp::Prod, c, near1, 1);
    }
  }
}

TEST(VulkanReduce, NanAndInfinitiesLikeTheCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const ReduceCase c{{6, 9}, {}, {}, 0, {1}};
  std::vector<double> v = randn(54, 7);
  v[3] = NAN;                                                           // row 0: NaN
  v[9 + 2] = INFINITY;                                                  // row 1: +inf
  v[18 + 4] = -INFINITY;                                                // row 2: -inf
  v[27 + 1] = INFINITY, v[27 + 5] = -INFINITY;                          // row 3: inf - inf
  for (int i = 36; i < 45; ++i) v[static_cast<size_t>(i)] = -INFINITY;  // row 4: all -inf
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod}) {
    run_reduce(dev, DType::F32, op, c, v, 8);
    run_reduce(dev, DType::F16, op, c, v, 8);
  }
}

// A row long enough to be split into parts (two passes), and a full reduction: the same
// bits on every launch, within f32 rounding of the CPU's f64 sum.
TEST(VulkanReduce, LongRowsSplitDeterministically) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t n = 100003;
  const auto v = randn(static_cast<size_t>(n), 11);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    Twin tw(dev, OpId::Reduce, ReduceParams{op, {0}}, DType::F32);
    tw.input(DType::F32, v, {n});
    tw.cpu.node.in_shape = tw.gpu.node.in_shape = {n};
    tw.cpu.expr = tw.gpu.expr = identity_expr(DType::F32);
    tw.output(DType::F32, {1});
    const auto want = tw.run_cpu();
    const auto first = tw.run_gpu();
    expect_close(first, want, op == ReduceOp::Sum ? 1e-5 : 0, 300);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tw.run_gpu(), first);
    // Recorded once (scratch and params kept by the recording), replayed: the same bits.
    auto rec = dev->record({tw.gpu});
    for (int i = 0; i < 2; ++i) {
      const float garbage = 77;
      dev->upload(*tw.gpu.output.buffer, static_cast<size_t>(tw.gpu.output.offset) * 4, &garbage, 4);
      dev->replay(*rec);
      EXPECT_EQ(Twin::read(*dev, tw.gpu.output, 1), first);
    }
  }
  // Two long rows, and many columns (a gradient summed over a batch: one invocation each).
  run_reduce(dev, DType::F32, ReduceOp::Sum, {{2, 40000}, {}, {}, 0, {1}}, randn(80000, 12), 200);
  run_reduce(dev, DType::F32, ReduceOp::Sum, {{300, 1100}, {}, {}, 0, {0}}, randn(330000, 13), 20);
  run_reduce(dev, DType::BF16, ReduceOp::Sum, {{64, 1030}, {}, {}, 0, {0}}, randn(64 * 1030, 14), 8);
}

// Columns (rows of a strided reduction, a bias gradient's shape) split into parts, one
// invocation each, and combined by a second pass: what GPUs run; forced here with
// ALK_VK_COLUMN_PARTS=1 so lavapipe runs it too. Uneven chunks (empty last parts), integer
// sums, bf16, many rows with short columns.
TEST(VulkanReduce, ColumnsSplitIntoParts) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const char* before = std::getenv("ALK_VK_COLUMN_PARTS");
  const std::string saved = before ? before : "";
  ::setenv("ALK_VK_COLUMN_PARTS", "1", 1);
  run_reduce(dev, DType::F32, ReduceOp::Sum, {{4096, 96}, {}, {}, 0, {0}}, randn(4096 * 96, 21), 70);
  run_reduce(dev, DType::F32, ReduceOp::Max, {{3, 700, 65}, {}, {}, 0, {0, 1}}, randn(3 * 700 * 65, 22), 1);
  run_reduce(dev, DType::I32, ReduceOp::Sum, {{1500, 70}, {}, {}, 0, {0}}, randint(1500 * 70, 23, -50, 50), 1);
  run_reduce(dev, DType::BF16, ReduceOp::Sum, {{2048, 200}, {}, {}, 0, {0}}, randn(2048 * 200, 24), 50);
  run_reduce(dev, DType::F32, ReduceOp::Min, {{40, 1500}, {}, {}, 0, {0}}, randn(40 * 1500, 25), 1);
  if (before) ::setenv("ALK_VK_COLUMN_PARTS", saved.c_str(), 1);
  else ::unsetenv("ALK_VK_COLUMN_PARTS");
}

TEST(VulkanReduce, EmptyReductionIsTheIdentity) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Prod})
    run_reduce(dev, DType::F32, op, {{3, 0}, {}, {}, 0, {1}}, {}, 1);
}

// The fused form the scheduler sends: a prologue over two inputs (one broadcast), and an
// epilogue over the reduced value and a third tensor, into another dtype.
TEST(VulkanReduce, PrologueAndEpilogue) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  using expr::Fn;
  using expr::Type;
  for (DType t : {DType::F32, DType::F16}) {
    Twin tw(dev, OpId::Reduce, ReduceParams{ReduceOp::Sum, {1}}, t);
    expr::Builder b;
    const int x = b.input(0, Type::F32), y = b.input(1, Type::F32);
    tw.cpu.expr = tw.gpu.expr = b.finish(b.binary(Fn::Mul, b.unary(Fn::Exp, x), y));
    expr::Builder e;
    const int v = e.input(0, Type::F32), z = e.input(1, Type::F32);
    tw.cpu.epilogue = tw.gpu.epilogue =
        e.finish(e.binary(Fn::Add, e.unary(Fn::Log, v), e.binary(Fn::Mul, z, e.constant(0.5, Type::F32))));
    tw.input(t, randn(9 * 21, 3), {9, 21});
    // y: a broadcast row of positive values, so the sum stays positive for the log.
    std::vector<double> pos(21);
    for (size_t i = 0; i < 21; ++i) pos[i] = 0.5 + 0.01 * static_cast<double>(i);
    tw.input(DType::F32, pos, {9, 21}, {0, 1});
    tw.cpu.node.in_shape = tw.gpu.node.in_shape = {9, 21};
    tw.epilogue_input(DType::F32, randn(9, 5), {9, 1});
    tw.output(DType::F32, {9, 1});
    expect_close(tw.run_gpu(), tw.run_cpu(), rtol_of(t), 1, std::string(dtype_name(t)));
  }
}

// Rank 6 with no dims to merge and three inputs: the params (36 words) exceed the 128 bytes
// of push constants and go in a storage buffer.
TEST(VulkanReduce, ParamsInAStorageBufferForHighRanks) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  using expr::Fn;
  using expr::Type;
  const Shape shape{2, 3, 2, 3, 2, 3};
  Shape reversed = contiguous_strides({3, 2, 3, 2, 3, 2});
  std::reverse(reversed.begin(), reversed.end());  // a permuted view: no two dims merge
  Twin tw(dev, OpId::Reduce, ReduceParams{ReduceOp::Sum, {1, 3, 5}}, DType::F32);
  expr::Builder b;
  const int x = b.input(0, Type::F32), y = b.input(1, Type::F32), z = b.input(2, Type::F32);
  tw.cpu.expr = tw.gpu.expr = b.finish(b.binary(Fn::Add, b.binary(Fn::Mul, x, y), z));
  tw.input(DType::F32, randn(216, 41), shape, reversed);
  tw.input(DType::F32, randn(216, 42), shape);
  tw.input(DType::F32, randn(9, 43), shape, {0, 0, 0, 1, 0, 3});
  tw.cpu.node.in_shape = tw.gpu.node.in_shape = shape;
  tw.output(DType::F32, {2, 1, 2, 1, 2, 1});
  expect_close(tw.run_gpu(), tw.run_cpu(), 1e-5, 8);
}

// A count: the prologue is a comparison (bool), summed in i64 like the CPU's integer path.
TEST(VulkanReduce, CountOfABoolPrologue) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  using expr::Fn;
  using expr::Type;
  Twin tw(dev, OpId::Reduce, ReduceParams{ReduceOp::Sum, {0}}, DType::I64);
  expr::Builder b;
  tw.cpu.expr = tw.gpu.expr = b.finish(b.binary(Fn::Gt, b.input(0, Type::F32), b.constant(0.25, Type::F32)));
  tw.input(DType::BF16, randn(23 * 7, 61), {23, 7});
  tw.cpu.node.in_shape = tw.gpu.node.in_shape = {23, 7};
  tw.output(DType::I64, {1, 7});
  expect_close(tw.run_gpu(), tw.run_cpu(), 0);
}

// ---- ArgReduce ------------------------------------------------------------------------

TEST(VulkanArgReduce, FirstExtremumTiesAndNan) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32}) {
    if (!runs(dev, t)) continue;
    for (bool is_max : {true, false}) {
      for (int axis : {0, 1}) {
        Shape shape{13, 600};
        std::vector<double> v = randint(13 * 600, 5 + axis, -4, 4);  // many ties
        if (is_floating(t)) {
          v[5] = NAN, v[600 * 3 + 7] = NAN, v[600 * 3 + 9] = NAN;
          v[600 * 4 + 2] = INFINITY, v[600 * 5 + 2] = -INFINITY;
        }
        Twin tw(dev, OpId::ArgReduce, AxisParams{axis, is_max}, DType::I64);
        tw.input(t, v, shape);
        Shape out = shape;
        out[static_cast<size_t>(axis)] = 1;
        tw.output(DType::I64, out);
        expect_close(tw.run_gpu(), tw.run_cpu(), 0, 1,
                     std::string(dtype_name(t)) + (is_max ? " argmax" : " argmin") + " axis " + std::to_string(axis));
      }
    }
  }
  // A transposed view.
  Twin tw(dev, OpId::ArgReduce, AxisParams{1, true}, DType::I64);
  tw.input(DType::F32, randn(30 * 17, 9), {17, 30}, {1, 17});
  tw.output(DType::I64, {17, 1});
  expect_close(tw.run_gpu(), tw.run_cpu(), 0);
}

// ---- Softmax / LogSoftmax -----------------------------------------------------------------

void run_softmax(Device* dev, bool log, DType t, const std::vector<double>& v, Shape shape, Shape strides, int axis,
                 double rtol) {
  Twin tw(dev, log ? OpId::LogSoftmax : OpId::Softmax, AxisParams{axis, log}, t);
  tw.input(t, v, shape, strides);
  tw.output(t, shape);
  expect_close(tw.run_gpu(), tw.run_cpu(), rtol, log ? 8 : 1e-3,
               std::string(log ? "log_softmax " : "softmax ") + std::string(dtype_name(t)) + " " + to_string(shape) +
                   " axis " + std::to_string(axis));
}

TEST(VulkanSoftmax, AxesDtypesAndViews) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (bool log : {false, true})
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
      if (!runs(dev, t)) continue;
      const double rtol = t == DType::F64 ? 1e-13 : rtol_of(t) * 2;
      run_softmax(dev, log, t, randn(7 * 45, 1, 3), {7, 45}, {}, 1, rtol);
      run_softmax(dev, log, t, randn(7 * 45, 2, 3), {7, 45}, {}, 0, rtol);
      run_softmax(dev, log, t, randn(3 * 5 * 11, 3, 3), {3, 5, 11}, {}, 1, rtol);
      run_softmax(dev, log, t, randn(45 * 7, 4, 3), {7, 45}, {1, 7}, 1, rtol);  // transposed
    }
}

TEST(VulkanSoftmax, MaskedRowsNanAndInfinity) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  std::vector<double> v = randn(5 * 10, 6);
  for (int i = 0; i < 10; ++i) v[static_cast<size_t>(i)] = -INFINITY;      // fully masked
  for (int i = 10; i < 20; i += 2) v[static_cast<size_t>(i)] = -INFINITY;  // half masked
  v[23] = NAN;
  v[35] = INFINITY;
  for (bool log : {false, true}) run_softmax(dev, log, DType::F32, v, {5, 10}, {}, 1, 1e-5);
}

// A GPT-2 vocabulary row: 50257 logits.
TEST(VulkanSoftmax, VocabularyWideRows) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  const int64_t vocab = 50257;
  const auto v = randn(static_cast<size_t>(2 * vocab), 8, 4);
  for (bool log : {false, true}) run_softmax(dev, log, DType::F32, v, {2, vocab}, {}, 1, 1e-4);
}

// Milliseconds per launch of k on dev (after a warm-up launch), for the log.
// ---- norms --------------------------------------------------------------------------------

void run_norm(Device* dev, OpId op, DType t, Shape shape, Shape strides, int64_t inner, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Shape wshape(shape.end() - (inner == shape.back() ? 1 : 2), shape.end());
  Twin tw(dev, op, NormParams{inner, 1e-5}, t);
  tw.input(t, randn(static_cast<size_t>(n), seed, 2), shape, strides);
  tw.input(t, randn(static_cast<size_t>(inner), seed + 1), wshape);
  if (op == OpId::LayerNorm) tw.input(t, randn(static_cast<size_t>(inner), seed + 2), wshape);
  tw.output(t, shape);
  expect_close(tw.run_gpu(), tw.run_cpu(), rtol_of(t) * 4, 1,
               std::string(op_name(op)) + " " + std::string(dtype_name(t)) + " " + to_string(shape));
}

// Norm rows go an invocation each on CPU implementations and a workgroup each on GPUs
// (reduce.cpp's row_spread): both shaders run here, whichever the device picks by itself.
class VulkanNormRows : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { setenv("ALK_VK_NORM_ROWS", GetParam(), 1); }
  void TearDown() override { unsetenv("ALK_VK_NORM_ROWS"); }
};
INSTANTIATE_TEST_SUITE_P(Spread, VulkanNormRows, ::testing::Values("invocation", "group"));

TEST_P(VulkanNormRows, LayerNormAndRmsNorm) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (OpId op : {OpId::LayerNorm, OpId::RmsNorm})
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
      if (!runs(dev, t)) continue;
      run_norm(dev, op, t, {5, 3, 37}, {}, 37, 1);
      run_norm(dev, op, t, {5, 3, 37}, {}, 111, 2);
      run_norm(dev, op, t, {6, 37}, {1, 6}, 37, 3);  // transposed x
      run_norm(dev, op, t, {2, 1000}, {}, 1000, 4);
    }
}

TEST_P(VulkanNormRows, LayerNormBackwardPacked) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : {DType::F32, DType::F64, DType::BF16}) {
    if (!runs(dev, t)) continue;
    for (auto [shape, inner] :
         std::vector<std::pair<Shape, int64_t>>{{{7, 33}, 33},
                                                {{2, 3, 4, 5}, 20},
                                                {{1, 9}, 9},
                                                {{70, 300}, 300},
                                                // dweight/dbias over chunks of rows: 15 and 20 chunks, the last one short
                                                {{1000, 24}, 24},
                                                {{10, 130, 16}, 16}}) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      const int64_t rows = n / inner;
      Shape wshape(shape.end() - (inner == shape.back() ? 1 : 2), shape.end());
      Twin tw(dev, OpId::LayerNormBackward, NormParams{inner, 1e-5}, t);
      tw.input(t, randn(static_cast<size_t>(n), 21, 2), shape);
      tw.input(t, randn(static_cast<size_t>(inner), 22), wshape);
      tw.input(t, randn(static_cast<size_t>(n), 23), shape);
      tw.output(t, {rows + 2, inner});
      // dweight and dbias sum `rows` terms of size ~1.
      expect_close(tw.run_gpu(), tw.run_cpu(), rtol_of(t) * 4, std::sqrt(static_cast<double>(rows)),
                   "layer_norm_backward " + std::string(dtype_name(t)) + " " + to_string(shape));
    }
  }
}

// ---- Cumsum -------------------------------------------------------------------------------

TEST(VulkanCumsum, AxesReverseDtypesAndLongRows) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  for (DType t : {DType::F32, DType::F64, DType::I64, DType::F16, DType::BF16})
    if (runs(dev, t))
      for (bool reverse : {false, true})
        for (auto [shape, strides, axis] : std::vector<std::tuple<Shape, Shape, int>>{
                 {{7, 45}, {}, 1}, {{7, 45}, {}, 0}, {{3, 5, 11}, {}, 1}, {{45, 7}, {1, 45}, 1}, {{2, 3000}, {}, 1}}) {
          int64_t n = 1;
          for (int64_t d : shape) n *= d;
          const auto v =
              is_floating(t) ? randn(static_cast<size_t>(n), 31) : randint(static_cast<size_t>(n), 31, -1000, 1000);
          Twin tw(dev, OpId::Cumsum, AxisParams{axis, reverse}, t);
          tw.input(t, v, shape, strides);
          tw.output(t, shape);
          const double scale = std::sqrt(static_cast<double>(shape[static_cast<size_t>(axis)]));
          expect_close(
              tw.run_gpu(), tw.run_cpu(), is_floating(t) ? rtol_of(t) * 4 : 0, scale,
              "cumsum " + std::string(dtype_name(t)) + " " + to_string(shape) + " axis " + std::to_string(axis));
        }
}

// Without subgroups (ALK_VK_NO_SUBGROUPS=1): f32 workgroup reductions through the shared
// memory tree, the path of devices without subgroup shuffles.
TEST(VulkanRowOps, SharedMemoryTreeWithoutSubgroups) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  ::setenv("ALK_VK_NO_SUBGROUPS", "1", 1);
  run_reduce(dev, DType::F32, ReduceOp::Sum, {{37, 19}, {}, {}, 0, {0, 1}}, randn(703, 51), 8);
  run_reduce(dev, DType::F32, ReduceOp::Max, {{5, 300}, {}, {}, 0, {1}}, randn(1500, 52), 8);
  run_reduce(dev, DType::F32, ReduceOp::Sum, {{2, 40000}, {}, {}, 0, {1}}, randn(80000, 53), 200);
  run_softmax(dev, true, DType::F32, randn(7 * 45, 54, 3), {7, 45}, {}, 1, 1e-5);
  run_norm(dev, OpId::LayerNorm, DType::F16, {5, 3, 37}, {}, 111, 55);
  ::unsetenv("ALK_VK_NO_SUBGROUPS");
}

// ---- end to end: tensors on the Vulkan device, forward and gradients --------------------

TEST(VulkanRowOps, TensorsForwardAndBackwardMatchTheCpu) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  manual_seed(5);
  const Tensor x0 = alk::randn(Shape{6, 37}), w0 = alk::randn(Shape{37}), b0 = alk::randn(Shape{37}),
               c0 = alk::randn(Shape{6, 37});
  struct Result {
    std::vector<std::vector<float>> values;
  };
  auto run = [&](Device& d) {
    Tensor x = x0.to(d).detach(), w = w0.to(d).detach(), b = b0.to(d).detach(), c = c0.to(d);
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
    Tensor y = layer_norm(x, {37}, w, b);
    Tensor loss = sum(softmax(y, -1) * c) + mean(log_softmax(y * 2.0, 0) * c) + sum(max(rms_norm(x, {37}, w), {1})) +
                  sum(cumsum(x, 1) * c) * 0.01 + sum(sum(x * x, {0}, true) * 0.5);
    loss.backward();
    Result r;
    for (const Tensor& t :
         std::vector<Tensor>{y, loss, x.grad(), w.grad(), b.grad(), argmax(x * c, 1).to(DType::F32), mean(x, {0, 1})})
      r.values.push_back(t.to(cpu_device()).to_vector<float>());
    return r;
  };
  const Result want = run(cpu_device()), got = run(*dev);
  const char* names[] = {"layer_norm", "loss", "dx", "dweight", "dbias", "argmax", "mean"};
  for (size_t i = 0; i < want.values.size(); ++i) {
    std::vector<double> g(got.values[i].begin(), got.values[i].end()), w(want.values[i].begin(), want.values[i].end());
    expect_close(g, w, 1e-4, 1, names[i]);
  }
}

}  // namespace
}  // namespace alk
#endif
