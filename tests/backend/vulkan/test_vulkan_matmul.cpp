// Matmul on Vulkan (src/backend/vulkan/kernels/matmul.cpp) against the CPU backend's
// cpu::matmul on the same bytes and layouts: odd shapes (not multiples of the tiles),
// transposed / strided / offset / reversed operands read in place, broadcast batch dims
// (merged, unmerged, more than the kernel's 3), both tile shapes, f32/f16/bf16 (and f64
// where the device has it), and fused epilogues (bias + gelu, a residual, the unfused
// fallback, the params-in-a-buffer path); then end to end through Tensors on the device,
// forward and gradients.
//
// Tolerance per output element (|gpu - cpu| <= tol): both sides accumulate in f32 (f64
// for f64) in different orders, so each may be off by about k * eps * sum_p |a_ip b_pj|;
// then both round to the output dtype, which can land one unit apart:
//   tol = (k + 4) * eps_acc * sum_p |a_ip * b_pj| + ulp_rel(out) * |cpu| + 1e-6 (f16 subnormals)
//   eps_acc 2^-23 (f32 accumulation) / 2^-51 (f64); ulp_rel 2^-23 f32, 2^-10 f16, 2^-7 bf16, 2^-52 f64.
// Epilogues add the GLSL erf expansion's 1.5e-7 (x 0.5|x|) and one output unit more.
#include "required.h"
#include <gtest/gtest.h>

#ifdef ALK_HAVE_VULKAN
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include "alk/device.h"
#include "alk/tensor.h"
#include "backend/cpu/eval.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/view.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/matmul.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"
#include "alk/expr.h"
#include "runtime/device.h"
#include "vulkan_test_util.h"

namespace alk::vk {
namespace {

int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// One operand as both devices see it: host bytes and a view into them.
struct Operand {
  DType dtype = DType::F32;
  std::vector<uint8_t> host;
  Shape shape, strides;
  int64_t offset = 0;

  double at(const Shape& idx) const {
    int64_t e = offset;
    for (size_t d = 0; d < idx.size(); ++d) e += idx[d] * strides[d];
    return cpu::load_as_double(host.data(), dtype, e);
  }
  cpu::View view() { return cpu::View{host.data(), dtype, shape, strides, offset}; }
};

struct Layout {
  bool transposed = false;  // stored [.., cols, rows] (column-major), read through swapped strides
  int64_t pad = 0;          // extra elements after each stored row
  int64_t offset = 0;       // leading elements before the first
  bool reversed = false;    // rows read last to first (a negative row stride)
};

// An operand of logical shape batch + [rows, cols] whose storage holds `stored` batch
// dims (1 where broadcast: stride 0), random values in [-1, 1] of dtype t (padding too).
Operand make_operand(DType t, const Shape& batch, const Shape& stored, int64_t rows, int64_t cols, Layout l,
                     std::mt19937& rng) {
  Operand o;
  o.dtype = t;
  o.shape = batch;
  o.shape.insert(o.shape.end(), {rows, cols});
  const int64_t inner = l.transposed ? rows : cols, outer = l.transposed ? cols : rows;
  const int64_t matrix = outer * (inner + l.pad);
  int64_t rs = l.transposed ? 1 : inner + l.pad, cs = l.transposed ? inner + l.pad : 1;
  o.offset = l.offset;
  if (l.reversed) {
    o.offset += (rows - 1) * rs;
    rs = -rs;
  }
  o.strides.assign(batch.size(), 0);
  int64_t step = matrix;
  for (size_t d = batch.size(); d-- > 0;) {
    o.strides[d] = stored[d] == 1 ? 0 : step;
    step *= stored[d];
  }
  o.strides.insert(o.strides.end(), {rs, cs});
  const int64_t elements = l.offset + step + 1;
  o.host.assign(static_cast<size_t>(elements) * dtype_size(t), 0);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) cpu::store_double(o.host.data(), t, i, u(rng));
  return o;
}

std::shared_ptr<Allocation> upload(Context& ctx, const std::vector<uint8_t>& bytes) {
  auto a = ctx.pool().allocate(bytes.size());
  ctx.stream().upload(a, 0, bytes.data(), bytes.size());
  return a;
}

ViewArg on_device(Context& ctx, const Operand& o) {
  return ViewArg{upload(ctx, o.host), 0, o.dtype, o.shape, o.strides, o.offset};
}

std::vector<double> download(Context& ctx, const ViewArg& v) {
  std::vector<uint8_t> bytes(static_cast<size_t>(v.offset + count(v.shape)) * dtype_size(v.dtype));
  ctx.stream().download(v.alloc, v.byte_offset, bytes.data(), bytes.size());
  std::vector<double> out(static_cast<size_t>(count(v.shape)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = cpu::load_as_double(bytes.data(), v.dtype, static_cast<int64_t>(v.offset) + static_cast<int64_t>(i));
  return out;
}

double ulp_rel(DType t) {
  switch (t) {
    case DType::F16: return std::ldexp(1.0, -10);
    case DType::BF16: return std::ldexp(1.0, -7);
    case DType::F64: return std::ldexp(1.0, -52);
    default: return std::ldexp(1.0, -23);
  }
}

// sum_p |a_ip b_pj| for every output element (row-major over batch + [m, n]).
std::vector<double> abs_sums(const Operand& a, const Operand& b) {
  const size_t R = a.shape.size();
  const int64_t m = a.shape[R - 2], k = a.shape[R - 1], n = b.shape[R - 1];
  Shape batch(a.shape.begin(), a.shape.end() - 2);
  std::vector<double> s;
  for (int64_t bi = 0; bi < count(batch); ++bi) {
    Shape idx(R, 0);
    for (int64_t rem = bi, d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = rem % batch[static_cast<size_t>(d)];
      rem /= batch[static_cast<size_t>(d)];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          Shape ia = idx, ib = idx;
          ia[R - 2] = i, ia[R - 1] = p, ib[R - 2] = p, ib[R - 1] = j;
          acc += std::fabs(a.at(ia) * b.at(ib));
        }
        s.push_back(acc);
      }
  }
  return s;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& sums,
                  int64_t k, DType acc, DType out, double extra_atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double eps = acc == DType::F64 ? std::ldexp(1.0, -51) : std::ldexp(1.0, -23);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = static_cast<double>(k + 4) * eps * sums[i] + ulp_rel(out) * std::fabs(want[i]) + 1e-6 + extra_atol;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " gpu " << got[i] << " cpu " << want[i] << " tol " << tol;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

struct Case {
  Shape batch, a_stored, b_stored;
  int64_t m, k, n;
  Layout la, lb;
};

std::string describe(const Case& c, DType t) {
  std::string s = std::string(dtype_name(t)) + " [";
  for (int64_t d : c.batch) s += std::to_string(d) + ",";
  s += "] " + std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
  if (c.la.transposed) s += " A^T";
  if (c.lb.transposed) s += " B^T";
  if (c.la.reversed) s += " A reversed";
  if (c.la.pad || c.lb.pad || c.la.offset || c.lb.offset) s += " padded/offset";
  return s;
}

// Runs one case on the device and on the CPU and compares.
void check(Context& ctx, MatmulKernel& kernel, const Case& c, DType t, uint32_t seed) {
  std::mt19937 rng(seed);
  Operand a = make_operand(t, c.batch, c.a_stored, c.m, c.k, c.la, rng);
  Operand b = make_operand(t, c.batch, c.b_stored, c.k, c.n, c.lb, rng);
  Shape osh = c.batch;
  osh.insert(osh.end(), {c.m, c.n});
  std::vector<uint8_t> cpu_out(static_cast<size_t>(count(osh)) * dtype_size(t));
  cpu::matmul(a.view(), b.view(), cpu::View{cpu_out.data(), t, osh, contiguous_strides(osh), 0});
  std::vector<double> want(static_cast<size_t>(count(osh)));
  for (size_t i = 0; i < want.size(); ++i) want[i] = cpu::load_as_double(cpu_out.data(), t, static_cast<int64_t>(i));

  // The output at an element offset inside a larger buffer (an arena slice).
  const int64_t out_offset = 5;
  ViewArg out{ctx.pool().allocate(static_cast<size_t>(count(osh) + out_offset) * dtype_size(t)), 0, t, osh,
              contiguous_strides(osh), out_offset};
  kernel.launch(ctx.stream(), on_device(ctx, a), on_device(ctx, b), out);
  expect_close(download(ctx, out), want, abs_sums(a, b), c.k, t, t, 0, describe(c, t));
}

std::vector<DType> float_dtypes(const Context& ctx) {
  std::vector<DType> ts{DType::F32};
  if (ctx.info().storage16) ts.push_back(DType::F16), ts.push_back(DType::BF16);
  if (ctx.info().float64) ts.push_back(DType::F64);
  return ts;
}

MatmulKernel& kernel(Context& ctx, DType t) {
  static std::map<std::pair<Context*, DType>, std::unique_ptr<MatmulKernel>> kernels;
  auto& k = kernels[{&ctx, t}];
  if (!k) k = std::make_unique<MatmulKernel>(ctx, MatmulSignature{t, t, t, std::nullopt, {}});
  k->force_tiles(std::nullopt);
  return *k;
}

TEST(VulkanMatmul, OddShapes) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {128, 64, 96}, {3, 0, 4}};
  for (DType t : float_dtypes(*ctx))
    for (auto& s : shapes) check(*ctx, kernel(*ctx, t), Case{{}, {}, {}, s[0], s[1], s[2], {}, {}}, t, 1);
}

TEST(VulkanMatmul, TransposedStridedOffsetOperandsInPlace) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Layout plain, tr{true, 0, 0, false}, tr_pad{true, 3, 7, false}, pad{false, 5, 2, false}, rev{false, 1, 3, true};
  const Layout layouts[][2] = {{tr, plain}, {plain, tr}, {tr_pad, tr_pad}, {pad, tr}, {rev, pad}, {tr, rev}};
  for (DType t : float_dtypes(*ctx)) {
    if (t == DType::F64) continue;
    for (auto& l : layouts) {
      check(*ctx, kernel(*ctx, t), Case{{}, {}, {}, 33, 65, 17, l[0], l[1]}, t, 2);
      check(*ctx, kernel(*ctx, t), Case{{}, {}, {}, 7, 13, 5, l[0], l[1]}, t, 3);
    }
  }
}

TEST(VulkanMatmul, BatchedWithBroadcast) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Layout plain, tr{true, 2, 1, false};
  const Case cases[] = {
      {{2, 3}, {2, 3}, {2, 3}, 9, 11, 6, plain, plain},            // batch dims merge into one
      {{2, 3}, {2, 3}, {1, 3}, 9, 11, 6, tr, plain},               // B broadcast over the outer dim
      {{2, 3}, {2, 1}, {2, 3}, 5, 7, 10, plain, tr},               // A broadcast over the inner dim
      {{4}, {4}, {1}, 17, 9, 13, plain, plain},                    // a shared weight: batch folded into rows
      {{2, 2, 2, 2}, {2, 1, 2, 1}, {1, 2, 1, 2}, 3, 4, 5, plain, tr},  // 4 unmergeable batch dims: one host loop
  };
  for (DType t : {DType::F32, DType::BF16}) {
    if (t == DType::BF16 && !ctx->info().storage16) continue;
    for (const Case& c : cases) check(*ctx, kernel(*ctx, t), c, t, 4);
  }
}

TEST(VulkanMatmul, BothTileShapes) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Layout plain, tr{true, 0, 0, false};
  // kMatmulCpu and its narrow variants: the register-block tiles CPU implementations run.
  for (const MatmulTiles& tiles : {kMatmulLarge, kMatmulSmall, kMatmulCpu, MatmulTiles{32, 128, 4, 4, 16, false, true},
                                   MatmulTiles{32, 32, 4, 4, 4, false, true}}) {
    MatmulKernel& k = kernel(*ctx, DType::F32);
    k.force_tiles(tiles);
    check(*ctx, k, Case{{}, {}, {}, 130, 40, 129, tr, plain}, DType::F32, 5);
    check(*ctx, k, Case{{2}, {2}, {2}, 20, 33, 140, plain, tr}, DType::F32, 6);
    k.force_tiles(std::nullopt);
  }
}

// The GPU tiles (shared memory, vec4 reads, double-buffered where the slices fit) that
// discrete and integrated GPUs run, here on whatever device is under test: every float dtype,
// both load orders of each operand, padded and offset views, batches, odd edges.
TEST(VulkanMatmul, GpuTilesEveryDtypeAndLayout) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Layout plain, tr{true, 0, 0, false}, tr_pad{true, 3, 7, false}, pad{false, 5, 2, false};
  const Layout layouts[][2] = {{plain, plain}, {tr, plain}, {plain, tr}, {tr_pad, pad}};
  for (const MatmulTiles& tiles : {kMatmulLarge, kMatmulSmall}) {
    for (DType t : float_dtypes(*ctx)) {
      // f64 128x128 slices need 33 KiB of shared memory even single-buffered.
      if (t == DType::F64 && tiles.bk * (tiles.bm + tiles.bn + 8) * 8 > ctx->info().max_shared_memory) continue;
      MatmulKernel& k = kernel(*ctx, t);
      k.force_tiles(tiles);
      for (auto& l : layouts)  // every load order in f32; the 16-bit and f64 loads differ only in the element read
        if (t == DType::F32 || &l == &layouts[0] || &l == &layouts[3])
          check(*ctx, k, Case{{}, {}, {}, 130, 40, 129, l[0], l[1]}, t, 8);
      check(*ctx, k, Case{{}, {}, {}, 5, 3, 7, plain, plain}, t, 9);          // one partial tile, k < BK
      check(*ctx, k, Case{{3}, {3}, {1}, 70, 50, 66, plain, tr}, t, 10);     // a shared weight, odd k slices
      check(*ctx, k, Case{{2, 2}, {2, 2}, {2, 2}, 33, 17, 65, tr, plain}, t, 11);  // batch matrices in one dispatch
      k.force_tiles(std::nullopt);
    }
  }
}

// The register-block tiles of CPU implementations read f32 operands a vec4 at a time where
// every vector starts 16-byte aligned (A along k or along m, B along n or along k); else
// scalar. Each layout against the CPU, with the path it must take: aligned, transposed,
// padded rows (pad 4: aligned, pad 3: not), offsets of 4 (aligned) and 1 (not), sizes that
// are not multiples of 4 (the k tail; N or M % 4 != 0 keeps B along n / A along m scalar).
TEST(VulkanMatmul, CpuTilesVectorLoadsEveryLayout) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  const Layout plain, tr{true, 0, 0, false}, pad4{false, 4, 4, false}, pad3{false, 3, 0, false},
      off1{false, 0, 1, false}, tr_pad4{true, 4, 8, false}, tr_off1{true, 0, 1, false};
  struct VecCase {
    Case c;
    bool vec_a, vec_b;
  };
  const VecCase cases[] = {
      {{{}, {}, {}, 36, 44, 132, plain, plain}, true, true},
      {{{}, {}, {}, 37, 43, 131, plain, plain}, false, false},  // rows of 43 and 131: misaligned
      {{{}, {}, {}, 36, 43, 20, pad4, pad4}, false, true},      // A rows of 47
      {{{}, {}, {}, 36, 41, 20, tr, tr}, true, false},          // A^T: M % 4 == 0; B^T rows of 41
      {{{}, {}, {}, 36, 40, 20, tr, tr}, true, true},           // B^T along k
      {{{}, {}, {}, 34, 40, 20, tr, plain}, false, true},       // A^T with M % 4 != 0
      {{{}, {}, {}, 36, 41, 30, plain, plain}, false, false},   // k rows of 41; N % 4 != 0
      {{{}, {}, {}, 36, 45, 24, pad3, pad4}, true, true},       // rows of 48 and 28, k tail of 1
      {{{}, {}, {}, 36, 44, 24, off1, tr_off1}, false, false},  // element 0 off a 16-byte boundary
      {{{}, {}, {}, 36, 44, 24, tr_pad4, pad4}, true, true},
      {{{3}, {3}, {1}, 20, 48, 36, plain, plain}, true, true},  // a shared weight, batches in rows
      {{{2, 3}, {2, 3}, {2, 3}, 12, 40, 28, plain, tr}, true, true},
      {{{2}, {2}, {2}, 12, 41, 28, plain, plain}, false, true},  // A rows of 41; B: rows of 28, batch stride 41 * 28
  };
  // The automatic CPU tiles (4 x 16, 4 x 8, 4 x 4 per invocation) and kMatmulCpu (8 x 8:
  // A along m needs blocks 4 rows tall, so A^T stays scalar there).
  const MatmulTiles variants[] = {MatmulTiles{32, 128, 4, 4, 16, false, true}, MatmulTiles{32, 64, 4, 4, 8, false, true},
                                  MatmulTiles{32, 32, 4, 4, 4, false, true}, kMatmulCpu};
  const bool scalar = std::getenv("ALK_VK_GEMM_SCALAR") != nullptr;
  for (const MatmulTiles& tiles : variants) {
    MatmulKernel& k = kernel(*ctx, DType::F32);
    k.force_tiles(tiles);
    for (const VecCase& v : cases) {
      check(*ctx, k, v.c, DType::F32, 12);
      const bool vec_a = v.vec_a && (!v.c.la.transposed || tiles.tm == 4);
      EXPECT_EQ(k.last_vector_loads(), std::make_pair(vec_a && !scalar, v.vec_b && !scalar))
          << describe(v.c, DType::F32) << " tiles " << tiles.tn;
    }
    k.force_tiles(std::nullopt);
  }
}

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)), as the op table spells it.
int build_gelu(expr::Builder& b, int x) {
  using expr::Fn;
  const auto f = expr::Type::F32;
  int e = b.unary(Fn::Erf, b.binary(Fn::Mul, x, b.constant(0.7071067811865476, f)));
  return b.binary(Fn::Mul, b.binary(Fn::Mul, b.constant(0.5, f), x), b.binary(Fn::Add, b.constant(1, f), e));
}

// out = epilogue(a @ b, extra...) on the device vs cpu::matmul then cpu::eval_map of the
// same epilogue (what the CPU backend runs for a Matmul kernel with an epilogue).
void check_epilogue(Context& ctx, const MatmulSignature& sig, const Case& c, const Shape& out_shape,
                    std::vector<Operand> extra, const std::string& what) {
  std::mt19937 rng(7);
  Operand a = make_operand(sig.input, c.batch, c.a_stored, c.m, c.k, c.la, rng);
  Operand b = make_operand(sig.input, c.batch, c.b_stored, c.k, c.n, c.lb, rng);
  Shape prod = c.batch;
  prod.insert(prod.end(), {c.m, c.n});
  std::vector<uint8_t> value(static_cast<size_t>(count(prod)) * dtype_size(sig.value));
  cpu::matmul(a.view(), b.view(), cpu::View{value.data(), sig.value, prod, contiguous_strides(prod), 0});
  std::vector<cpu::View> in{cpu::View{value.data(), sig.value, out_shape, contiguous_strides(out_shape), 0}};
  for (Operand& e : extra) in.push_back(e.view());
  std::vector<uint8_t> cpu_out(static_cast<size_t>(count(out_shape)) * dtype_size(sig.output));
  cpu::eval_map(*sig.epilogue, in, cpu::View{cpu_out.data(), sig.output, out_shape, contiguous_strides(out_shape), 0});
  std::vector<double> want(static_cast<size_t>(count(out_shape)));
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = cpu::load_as_double(cpu_out.data(), sig.output, static_cast<int64_t>(i));

  MatmulKernel kernel(ctx, sig);
  std::vector<ViewArg> eps;
  for (const Operand& e : extra) eps.push_back(on_device(ctx, e));
  ViewArg out{ctx.pool().allocate(static_cast<size_t>(count(out_shape)) * dtype_size(sig.output)), 0, sig.output,
              out_shape, contiguous_strides(out_shape), 0};
  kernel.launch(ctx.stream(), on_device(ctx, a), on_device(ctx, b), out, eps);
  // gelu's slope is at most ~1.13, so the product's error passes through about unchanged;
  // on top: erf's expansion, and one unit of the product's dtype when it is rounded to it.
  std::vector<double> sums = abs_sums(a, b);
  for (double& s : sums) s *= 1.2;
  const double extra_atol = 1e-6 + 2 * ulp_rel(sig.value) * 4;
  expect_close(download(ctx, out), want, sums, c.k, sig.input, sig.output, extra_atol, what);
}

TEST(VulkanMatmul, EpilogueBiasGelu) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  for (DType t : float_dtypes(*ctx)) {
    if (t == DType::F64) continue;
    // gelu(product + bias): bias [n] broadcast over batch and rows, stored as t.
    expr::Builder eb;
    int root = build_gelu(eb, eb.binary(expr::Fn::Add, eb.input(0, expr::Type::F32), eb.input(1, expr::Type::F32)));
    MatmulSignature sig{t, t, t, eb.finish(eb.cast(root, expr::Type::F32)), {t}};
    std::mt19937 rng(8);
    const Case c{{2}, {2}, {1}, 33, 20, 17, Layout{true, 0, 0, false}, Layout{}};
    Operand bias = make_operand(t, {2, 33}, {1, 1}, 1, 17, Layout{}, rng);
    bias.shape = {2, 33, 17};
    bias.strides = {0, 0, 1};
    check_epilogue(*ctx, sig, c, {2, 33, 17}, {bias}, "bias+gelu " + std::string(dtype_name(t)));
  }
  // bf16 operands, an f32 output: gelu(product + bias) + residual (residual transposed, f32).
  if (ctx->info().storage16) {
    expr::Builder eb;
    int g = build_gelu(eb, eb.binary(expr::Fn::Add, eb.input(0, expr::Type::F32), eb.input(1, expr::Type::F32)));
    MatmulSignature sig{DType::BF16, DType::BF16, DType::F32,
                        eb.finish(eb.binary(expr::Fn::Add, g, eb.input(2, expr::Type::F32))), {DType::BF16, DType::F32}};
    std::mt19937 rng(9);
    Operand bias = make_operand(DType::BF16, {}, {}, 1, 17, Layout{}, rng);
    bias.shape = {40, 17};
    bias.strides = {0, 1};
    Operand residual = make_operand(DType::F32, {}, {}, 40, 17, Layout{true, 1, 2, false}, rng);
    check_epilogue(*ctx, sig, Case{{}, {}, {}, 40, 70, 17, {}, {}}, {40, 17}, {bias, residual}, "bf16 -> f32 epilogue");
  }
}

TEST(VulkanMatmul, EpilogueWithParamsInABuffer) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // Three epilogue inputs: the params block outgrows push constants.
  expr::Builder eb;
  auto in = [&](int k) { return eb.input(k, expr::Type::F32); };
  int root = eb.binary(expr::Fn::Sub, eb.binary(expr::Fn::Mul, eb.binary(expr::Fn::Add, in(0), in(1)), in(2)), in(3));
  MatmulSignature sig{DType::F32, DType::F32, DType::F32, eb.finish(root), {DType::F32, DType::F32, DType::F32}};
  std::mt19937 rng(10);
  std::vector<Operand> extra;
  for (int e = 0; e < 3; ++e) extra.push_back(make_operand(DType::F32, {3}, {3}, 6, 9, Layout{e == 1, 1, 1, false}, rng));
  check_epilogue(*ctx, sig, Case{{3}, {3}, {3}, 6, 5, 9, {}, {}}, {3, 6, 9}, extra, "3 epilogue inputs");
}

TEST(VulkanMatmul, EpilogueOverAnotherShapeRunsUnfused) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // The product [3, 4] read in order as [2, 6] (the Map's shape), plus a [6, 2] matrix
  // seen transposed: no strides describe it over [3, 4], so the epilogue runs as a Map.
  expr::Builder eb;
  MatmulSignature sig{DType::F32, DType::F32, DType::F32,
                      eb.finish(eb.binary(expr::Fn::Mul, eb.input(0, expr::Type::F32), eb.input(1, expr::Type::F32))),
                      {DType::F32}};
  std::mt19937 rng(11);
  Operand t = make_operand(DType::F32, {}, {}, 2, 6, Layout{true, 0, 0, false}, rng);
  check_epilogue(*ctx, sig, Case{{}, {}, {}, 3, 8, 4, {}, {}}, {2, 6}, {t}, "unfused epilogue");
  // The same product read as [12]: a contiguous input restrides, so this one fuses.
  Operand flat = make_operand(DType::F32, {}, {}, 1, 12, Layout{}, rng);
  flat.shape = {12};
  flat.strides = {1};
  check_epilogue(*ctx, sig, Case{{}, {}, {}, 3, 8, 4, {}, {}}, {12}, {flat}, "restrided epilogue");
}

TEST(VulkanMatmul, UnsupportedReasons) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  EXPECT_NE(matmul_unsupported_reason(*ctx, MatmulSignature{DType::I32, DType::I32, DType::I32, std::nullopt, {}}), "");
  if (!ctx->info().float64) {
    EXPECT_NE(matmul_unsupported_reason(*ctx, MatmulSignature{DType::F64, DType::F64, DType::F64, std::nullopt, {}})
                  .find("Float64"),
              std::string::npos);
  }
  EXPECT_EQ(matmul_unsupported_reason(*ctx, MatmulSignature{}), "");
}

TEST(VulkanMatmul, CooperativeMatrixSourceCompiles) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  // Compiled to SPIR-V on any machine (only devices with VK_NV_cooperative_matrix run it),
  // with a fused epilogue so its store path is compiled too.
  if (!ctx->info().storage16) GTEST_SKIP() << "no 16-bit storage";
  expr::Builder eb;
  MatmulSignature sig{DType::F16, DType::F16, DType::F16,
                      eb.finish(eb.binary(expr::Fn::Add, eb.input(0, expr::Type::F32), eb.input(1, expr::Type::F32))),
                      {DType::F16}};
  MatmulKernel k(*ctx, sig);
  // Every variant the H200 benchmark measures, single- (32 KiB) and double-buffered (the
  // limit of the largest variant), each operand layout, with and without the epilogue.
  int compiled = 0;
  for (const MatmulTiles& t : kMatmulCoopVariants)
    for (uint32_t limit : {coop_shared_bytes(t, 1), coop_shared_bytes(t, 2)}) {
      const std::string one = k.source(t, true, true, false, true, true, limit);
      if (!t.direct) {
        EXPECT_NE(one.find(limit == coop_shared_bytes(t, 2) ? "#define NBUF 2u" : "#define NBUF 1u"), std::string::npos);
      }
      for (bool a_k : {false, true})
        for (bool b_n : {false, true})
          for (bool fused : {false, true})
            for (bool vec : {false, true}) {
              if (t.direct && !(vec && a_k && b_n)) continue;  // direct loads need both operands 16-byte loadable
              SCOPED_TRACE(std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + ":" +
                           std::to_string(t.tm) + "x" + std::to_string(t.tn) + " limit " + std::to_string(limit) +
                           " a_k " + std::to_string(a_k) + " b_n " + std::to_string(b_n) + " fused " +
                           std::to_string(fused) + " vec " + std::to_string(vec));
              EXPECT_FALSE(compile_glsl(k.source(t, a_k, b_n, fused, vec, vec, limit)).empty());
              ++compiled;
              if (limit == coop_shared_bytes(t, 2) && !t.direct && a_k && fused) {  // two register sets too
                setenv("ALK_VK_COOP_PREFETCH", "2", 1);
                EXPECT_FALSE(compile_glsl(k.source(t, a_k, b_n, fused, vec, vec, limit)).empty());
                unsetenv("ALK_VK_COOP_PREFETCH");
              }
            }
    }
  int direct = 0;
  for (const MatmulTiles& t : kMatmulCoopVariants) direct += t.direct;
  EXPECT_GT(direct, 0);
  EXPECT_EQ(compiled, (static_cast<int>(std::size(kMatmulCoopVariants)) - direct) * 2 * 16 + direct * 2 * 2);
}

// The automatic choice puts large f16 products on the tensor cores' largest tiles where the
// device offers VK_NV_cooperative_matrix (it used to pick the 4-subgroup tiles, 11.8x
// cuBLAS on the H200 against 7.3x for the best forced ones), and never on devices without.
TEST(VulkanMatmul, AutomaticTilesUseCooperativeMatricesForLargeHalfProducts) {
  DeviceInfo gpu;
  gpu.kind = DeviceInfo::Kind::Discrete;
  gpu.cooperative_matrix_nv = true;
  gpu.max_shared_memory = 48 * 1024;
  gpu.max_workgroup_invocations = 1024;
  auto same = [](const MatmulTiles& a, const MatmulTiles& b) {
    return a.bm == b.bm && a.bn == b.bn && a.bk == b.bk && a.tm == b.tm && a.tn == b.tn && a.coop == b.coop && a.cpu == b.cpu;
  };
  // 48 KiB (NVIDIA): the 16-subgroup 256x128 tiles (one 32-deep slice); a product too short
  // for them: the 128x256 tiles with 16-deep slices, double-buffered; 64 KiB: 32-deep.
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 4096, 4096, 4096, 1), kMatmulCoopTall));
  EXPECT_LE(coop_shared_bytes(kMatmulCoopTall, 1), 48u * 1024);
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 128, 32768, 4096, 1), kMatmulCoopLargeK16));
  gpu.max_shared_memory = 64 * 1024;
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 128, 32768, 4096, 1), kMatmulCoopLarge));
  // 256 invocations at most: not the 512 of the tall tiles.
  gpu.max_workgroup_invocations = 256;
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 4096, 4096, 4096, 1), kMatmulCoopLarge));
  gpu.max_workgroup_invocations = 1024;
  gpu.max_shared_memory = 48 * 1024;
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 1024, 1024, 1024, 1), kMatmulCoop));
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 100, 70, 130, 1), kMatmulCoopSmall));
  EXPECT_TRUE(choose_matmul_tiles(gpu, DType::F16, 8, 8, 8, 1).coop == false);
  EXPECT_FALSE(choose_matmul_tiles(gpu, DType::BF16, 4096, 4096, 4096, 1).coop);
  EXPECT_FALSE(choose_matmul_tiles(gpu, DType::F32, 4096, 4096, 4096, 1).coop);
  // The large tiles fit 48 KiB (K16 double-buffered); a device with 32 KiB gets the 128x128 ones.
  EXPECT_LE(coop_shared_bytes(kMatmulCoopLargeK16, 2), 48u * 1024);
  gpu.max_shared_memory = 32 * 1024;
  EXPECT_TRUE(same(choose_matmul_tiles(gpu, DType::F16, 4096, 4096, 4096, 1), kMatmulCoop));
  gpu.cooperative_matrix_nv = false;
  EXPECT_FALSE(choose_matmul_tiles(gpu, DType::F16, 4096, 4096, 4096, 1).coop);
}

TEST(VulkanMatmul, CooperativeMatrixF16) {
  ALK_VULKAN_CONTEXT_OR_SKIP(ctx);
  if (!ctx->info().cooperative_matrix_nv) GTEST_SKIP() << ctx->info().name << " has no VK_NV_cooperative_matrix (16x16x16 f16)";
  const Layout plain, tr{true, 0, 0, false}, tr_pad{true, 3, 7, false}, rev{false, 1, 3, true};
  MatmulKernel& k = kernel(*ctx, DType::F16);
  k.force_tiles(kMatmulCoop);
  const Case cases[] = {{{}, {}, {}, 1, 1, 1, plain, plain},        {{}, {}, {}, 7, 13, 5, plain, plain},
                        {{}, {}, {}, 33, 65, 17, tr, plain},        {{}, {}, {}, 128, 64, 96, plain, tr},
                        {{}, {}, {}, 200, 100, 150, tr_pad, rev},   {{2, 3}, {2, 1}, {1, 3}, 70, 40, 130, plain, plain},
                        {{}, {}, {}, 3, 0, 4, plain, plain}};
  for (const Case& c : cases) check(*ctx, k, c, DType::F16, 12);
  // 16-byte loads: rows aligned (k, n multiples of 8), with edge tiles and a batch.
  const Case aligned[] = {{{}, {}, {}, 136, 72, 200, plain, plain}, {{3}, {3}, {1}, 40, 48, 24, plain, plain},
                          {{}, {}, {}, 130, 40, 136, plain, tr}};
  for (const Case& c : aligned) check(*ctx, k, c, DType::F16, 15);
  // Every benchmarked variant the device can hold, on an aligned product with edge tiles.
  for (const MatmulTiles& t : kMatmulCoopVariants) {
    if (coop_shared_bytes(t, 1) > ctx->info().max_shared_memory) continue;
    k.force_tiles(t);
    SCOPED_TRACE(std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + (t.direct ? " direct" : ""));
    if (t.direct) {  // M, N, K multiples of 16, row-major operands; partial workgroup tiles and a batch
      check(*ctx, k, Case{{}, {}, {}, 272, 208, 144, plain, plain}, DType::F16, 16);
      check(*ctx, k, Case{{2}, {2}, {2}, 48, 48, 304, plain, plain}, DType::F16, 17);
      continue;
    }
    check(*ctx, k, Case{{}, {}, {}, 272, 264, 200, plain, plain}, DType::F16, 16);
    check(*ctx, k, Case{{}, {}, {}, 130, 70, 96, tr, plain}, DType::F16, 17);
  }
  {  // two register sets before the shared buffers (the default holds one)
    setenv("ALK_VK_COOP_PREFETCH", "2", 1);
    MatmulKernel one_set(*ctx, MatmulSignature{DType::F16, DType::F16, DType::F16, std::nullopt, {}});
    one_set.force_tiles(kMatmulCoop);
    check(*ctx, one_set, Case{{}, {}, {}, 272, 264, 200, plain, plain}, DType::F16, 18);
    check(*ctx, one_set, Case{{}, {}, {}, 130, 70, 96, tr, plain}, DType::F16, 19);
    unsetenv("ALK_VK_COOP_PREFETCH");
  }
  k.force_tiles(std::nullopt);
  // Chosen by shape for large f16 products.
  check(*ctx, k, Case{{}, {}, {}, 256, 128, 192, tr, plain}, DType::F16, 13);
  expr::Builder eb;
  int root = build_gelu(eb, eb.binary(expr::Fn::Add, eb.input(0, expr::Type::F32), eb.input(1, expr::Type::F32)));
  MatmulSignature sig{DType::F16, DType::F16, DType::F16, eb.finish(root), {DType::F16}};
  std::mt19937 rng(14);
  Operand bias = make_operand(DType::F16, {}, {}, 1, 130, Layout{}, rng);
  bias.shape = {100, 130};
  bias.strides = {0, 1};
  check_epilogue(*ctx, sig, Case{{}, {}, {}, 100, 70, 130, {}, {}}, {100, 130}, {bias}, "coop bias+gelu f16");
}

// ---- through the runtime device ----

Device* vulkan_or_null() { return devices().empty() ? nullptr : &get_device("vulkan"); }

#define ALK_VULKAN_DEVICE_OR_SKIP(dev)                                \
  Device* dev = vulkan_or_null();                                     \
  if (!dev) {                                                         \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no Vulkan device: " + unavailable_reason());     \
  }                                                                   \
  static_assert(true)

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << ": element " << i;
}

TEST(VulkanMatmulDevice, LinearGeluForwardAndGradients) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  manual_seed(5);
  Tensor x = randn({2, 9, 13}), w = randn({13, 7}), bias = randn({7}), seed = randn({2, 9, 7});
  auto run = [&](Device& d) {
    Tensor xd = x.to(d).detach(), wd = w.to(d).detach(), bd = bias.to(d);
    xd.requires_grad_();
    wd.requires_grad_();
    Tensor y = gelu(matmul(xd, wd) + bd);  // the epilogue fuses into the matmul kernel
    EXPECT_EQ(&y.device(), &d);
    y.backward(seed.to(d));  // dx = g @ w^T, dw = x^T @ g: transposed operands read in place
    return std::vector<std::vector<float>>{y.to_vector<float>(), xd.grad().to_vector<float>(),
                                           wd.grad().to_vector<float>()};
  };
  const auto want = run(cpu_device());
  const auto got = run(*dev);
  expect_near(got[0], want[0], 2e-5f, "y");
  expect_near(got[1], want[1], 2e-5f, "dx");
  expect_near(got[2], want[2], 2e-5f, "dw");
}

TEST(VulkanMatmulDevice, Bf16BatchedBroadcast) {
  ALK_VULKAN_DEVICE_OR_SKIP(dev);
  if (!vk::devices()[0].storage16) GTEST_SKIP() << "no 16-bit storage";
  manual_seed(6);
  Tensor a = cast(randn({3, 1, 5, 8}), DType::BF16), b = cast(randn({4, 8, 6}), DType::BF16);
  const std::vector<float> want = cast(matmul(a, b), DType::F32).to_vector<float>();
  Tensor y = matmul(a.to(*dev), b.to(*dev).transpose(-1, -2).contiguous().transpose(-1, -2));
  EXPECT_EQ(y.dtype(), DType::BF16);
  expect_near(cast(y, DType::F32).to_vector<float>(), want, 1.6e-2f, "bf16 [3,1,5,8] @ [4,8,6]");
}

}  // namespace
}  // namespace alk::vk
#endif
