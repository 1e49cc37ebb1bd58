// Matrix products: planning (which kernel, block shape, K slices) and launches. Tensor cores
// for 16-bit operands (and f32 under TF32): on Hopper (sm_90a) the wgmma kernels of
// kernels/matmul_wgmma.cu, fed by bulk tensor copies (TMA) where a product fits their boxes,
// persistent for short K, split-K or stream-K for weight gradients; elsewhere mma.sync
// (kernels/matmul_tc.cu, matmul_mma.cu). Any other product, any dtype, on the CUDA cores
// (kernels/matmul.cu). An epilogue is applied in the store where the kernel takes it.
#include <algorithm>
#include <optional>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/ops/epilogue.h"
#include "backend/cuda/ops/hopper.h"
#include "backend/cuda/template_ops.h"
#include "backend/cuda/tuning.h"
#include "expr/emit.h"

namespace alk::cuda {

namespace {

struct MatmulLaunchParams {
  KView a_batch, b_batch;
  int64_t a_rs, a_cs, b_rs, b_cs;
  int64_t M, N, K, batch, out_offset;
  int32_t batch_rank;
};

std::string matmul_source(DType a, DType b, DType out) {
  return kernel_source(
      defines({{"TA", storage(a)}, {"TB", storage(b)}, {"TO", storage(out)}, {"ACC", acc_type(out)}}), sources::matmul);
}

// The tensor-core kernel's operand type ("bf16", "f16", "tf32"), or nullptr for the CUDA-core
// kernel: 16-bit float operands of one dtype, or f32 when TF32 is allowed
// (float32_matmul_precision() "high", as torch.backends.cuda.matmul.allow_tf32).
const char* mma_kind(const Arg& a, const Arg& b, DType out) {
  if (a.dtype != b.dtype || !is_floating(out)) return nullptr;
  if (a.dtype == DType::BF16) return "bf16";
  if (a.dtype == DType::F16) return "f16";
  if (a.dtype == DType::F32 && float32_matmul_precision() == "high") return "tf32";
  return nullptr;
}

// The tensor-core GEMM's kernel and block shape. On sm_90a: kernels/matmul_wgmma.cu,
// 128 x bn blocks (bn 256, or 128 for narrow N) and a `stages`-deep ring. Elsewhere
// kernels/matmul_tc.cu (mma.sync): wn m16n8 tiles per warp along N (block width 32 wn);
// wide blocks halve the shared-memory reads per mma, narrow ones keep more blocks for small
// N. tuning().gemm (ALK_CUDA_GEMM) forces one (benchmarks; wgmma only on sm_90a; the
// bulk-copy kernels only where tma_fits() holds, else the cp.async one of the same width).
struct TcShape {
  int wn, stages;  // wn: the block's width in 32-column units (mma.sync: m16n8 tiles per warp)
  bool wgmma = false;
  int wait_depth = 1, min_blocks = 1;  // wgmma: groups in flight per K step, blocks per SM
  bool tma = false;                    // wgmma fed by the bulk tensor copies (matmul_wgmma_tma)
  bool persistent = false;             // tma: one block per SM looping over tiles (16-bit results, no split-K)
  bool pingpong = false;               // persistent: each consumer warpgroup owns whole tiles, in turn
  int consumers = 2;                   // tma, per tile: consumer warpgroups, 64 rows each (2 or 3)
  int bn() const { return 32 * wn; }
  int bm() const { return 64 * consumers; }
};
constexpr TcShape kWgmmaWide{8, 4, true, 1, 1}, kWgmmaNarrow{4, 3, true, 0, 2}, kWgmmaTma{8, 4, true, 1, 1, true},
                  kWgmmaTmaPair{4, 3, true, 1, 2, true},  // 128 x 128 tiles, two blocks per SM
                  kWgmmaTmaPersistent{8, 3, true, 1, 1, true, true},
                  kWgmmaTmaPingpong{4, 4, true, 1, 1, true, true, true};  // 128 x 128 tiles, one per warpgroup
// 192 x 192 tiles (three consumer warpgroups) for the weight gradients' K slices (wave_slices).
constexpr TcShape kWgmmaTma192{6, 4, true, 1, 1, true, false, false, 3};
TcShape tc_shape(const Context& ctx, int64_t N, int64_t K) {
  const GemmKernel forced = tuning().gemm;
  const bool mma_sync_forced = forced == GemmKernel::Wide || forced == GemmKernel::Narrow;
  const DeviceProps& d = ctx.props();
  if (d.cc_major == 9 && d.cc_minor == 0 && !mma_sync_forced) {
    switch (forced) {
      case GemmKernel::Wgmma256: return kWgmmaWide;
      case GemmKernel::Wgmma128: return kWgmmaNarrow;
      case GemmKernel::WgmmaTma: return kWgmmaTma;
      case GemmKernel::WgmmaTmaPair: return kWgmmaTmaPair;
      case GemmKernel::WgmmaTmaPersistent: return kWgmmaTmaPersistent;
      case GemmKernel::WgmmaTmaPingpong: return kWgmmaTmaPingpong;
      case GemmKernel::WgmmaTma192: return kWgmmaTma192;
      default: break;
    }
    if (N <= 128) return kWgmmaNarrow;
    // Short K (GPT-2's K = 768 products: 12 steps of 64 per tile): a tile's pipeline fill and
    // epilogue are a large share of its time. Two 128 x 128 blocks per SM overlap one's
    // epilogue with the other's main loop (in the GPT-2 step: the fc products 309 -> 248 us);
    // very wide N (the LM head) does better persistent (its ring keeps streaming across
    // tiles: 2.77 -> 2.38 ms). Long K keeps the 128 x 256 per-tile kernel. (bench/cuda/NOTES.md, v19.)
    // The persistent ping-pong kernel (each consumer warpgroup owns whole 128 x 128 tiles, one
    // storing while the other multiplies) does better still where its epilogue is arithmetic
    // on shared memory (inputs by TMA or in registers, results out by TMA; NOTES.md, tenth
    // session: the step 42.7 -> 40.6 ms against the two-block kernel).
    if (K <= 1024) return N > 4096 ? kWgmmaTmaPersistent : kWgmmaTmaPingpong;
    return kWgmmaTma;
  }
  const bool wide = mma_sync_forced ? forced == GemmKernel::Wide : N > 128;
  return wide ? TcShape{8, 4} : TcShape{4, 3};
}

// `epilogue`: empty, or the text epilogue_code() writes (EpiParams and epilogue_at()).
// stream_k: the source of matmul_wgmma_tma_stream_k and matmul_stream_k_sum (stream_k_matmul).
std::string matmul_tc_source(DType t, DType out, const char* kind, int a_kmajor, int b_kmajor, TcShape shape,
                             const std::string& epilogue = {}, bool stream_k = false) {
  const std::string defs = defines({{"TA", storage(t)},
                                     {"TO", storage(out)},
                                     {"MMA_TYPE", std::string("\"") + kind + "\""},
                                     {"A_KMAJOR", std::to_string(a_kmajor)},
                                     {"B_KMAJOR", std::to_string(b_kmajor)},
                                     {"WN", std::to_string(shape.wn)},
                                     {"BN", std::to_string(shape.bn())},
                                     {"STAGES", std::to_string(shape.stages)},
                                     {"WAIT_DEPTH", std::to_string(shape.wait_depth)},
                                     {"MIN_BLOCKS", std::to_string(shape.min_blocks)},
                                     {"TMA", shape.tma ? "1" : "0"},
                                     {"PERSIST", shape.persistent ? "1" : "0"},
                                     {"PINGPONG", shape.pingpong ? "1" : "0"},
                                     {"STREAMK", stream_k ? "1" : "0"},
                                     {"CONSUMERS", std::to_string(shape.consumers)},
                                     {"EPILOGUE", epilogue.empty() ? "0" : "1"}});
  std::string body = epilogue + std::string(sources::matmul_shared);
  if (shape.wgmma) body += wgmma_tile_code(shape.bn(), kind, a_kmajor, b_kmajor) + std::string(sources::matmul_wgmma);
  else body += std::string(sources::matmul_tc);
  return kernel_source(defs, body);
}
const char* tc_entry(TcShape shape) {
  return shape.persistent ? "matmul_wgmma_tma_persistent" : shape.tma ? "matmul_wgmma_tma" : shape.wgmma ? "matmul_wgmma" : "matmul_tc";
}

// The ring's bytes. mma.sync: BM = 128, BN = 32 WN, BK = 32, rows padded by 8 elements;
// wgmma: BM = 128, BK = 64, unpadded (swizzled) rows, plus 1 KiB to align the ring.
int matmul_tc_shared_bytes(int a_kmajor, int b_kmajor, TcShape shape) {
  const int bn = shape.bn();
  // The persistent kernel: the ring, its barriers (in a 1 KiB slot, so the staging tiles after
  // them stay aligned) and the staging tiles of 16-bit results (one per warpgroup in ping-pong).
  if (shape.persistent)
    return shape.stages * (128 + bn) * 64 * 2 + 2048 + (shape.pingpong ? 2 : 1) * 128 * bn * 2;
  if (shape.wgmma) return shape.stages * (shape.bm() + bn) * 64 * 2 + 1024;
  const int a = a_kmajor ? 128 * (32 + 8) : 32 * (128 + 8), b = b_kmajor ? bn * (32 + 8) : 32 * (bn + 8);
  return shape.stages * (a + b) * 2;
}

// matmul_wgmma_tma's tensor map of one operand (kernels/matmul_wgmma.cu), `x`'s element 0 first.
TensorMap operand_map(const Arg& x, uint64_t inner, uint64_t rows, int64_t row_stride, unsigned box_rows) {
  return tensor_map(x.dtype, x.ptr + static_cast<uint64_t>(x.offset) * 2, inner, rows, row_stride, box_rows);
}
// Whether matmul_wgmma_tma takes a product: one matrix at least one box in each dimension
// (smaller ones go to matmul_wgmma). Its split-K slices are whole 64-wide K steps, the last
// one zero-filled past K by the copies (split_k_matmul).
bool tma_fits(const MatmulLaunchParams& mp, TcShape shape) {
  return mp.batch == 1 && mp.M >= shape.bm() && mp.N >= shape.bn() && mp.K >= 64;
}
// The bulk-copy kernels' first two arguments: the tensor maps of A and B (boxes as
// kernels/matmul_wgmma.cu's tma_load_stage reads them), `k_extent` long in K.
void add_operand_maps(Args& args, const Arg& a, const Arg& b, const MatmulLaunchParams& mp, int la, int lb, int64_t bn,
                      int64_t k_extent, unsigned bm = 128) {
  const uint64_t k_total = static_cast<uint64_t>(k_extent);
  args.add(la ? operand_map(a, k_total, mp.M, mp.a_rs, bm) : operand_map(a, mp.M, k_total, mp.a_cs, 64));
  args.add(lb ? operand_map(b, k_total, mp.N, mp.b_cs, static_cast<unsigned>(bn)) : operand_map(b, mp.N, k_total, mp.b_rs, 64));
}
// Whether the persistent kernel can store a product's result: 16-bit, one matrix (bulk
// copies out of the staging tile: rows of whole 16-byte vectors from a 16-byte boundary).
bool persistent_fits(const Arg& out, const MatmulLaunchParams& mp) {
  return dtype_size(out.dtype) == 2 && mp.batch == 1 && mp.N % 8 == 0 && (out.ptr + static_cast<uint64_t>(mp.out_offset) * 2) % 16 == 0;
}
// Launches matmul_wgmma_tma over `slices` K slices of mp.K each (1: the whole product) of
// operands `k_extent` long in K (reads past it are zeros). The persistent kernel also takes
// the tensor maps of the result and of the epilogue input `tile_input` (EpiRoles::tile).
void launch_tma(Context& ctx, const Arg& a, const Arg& b, CUdeviceptr out, DType out_dtype, const MatmulLaunchParams& mp,
                int la, int lb, TcShape shape, int slices, int64_t k_extent, const std::string& src, const Kernel* epilogue,
                int tile_input = -1) {
  const int64_t bn = shape.bn();
  const EpiLaunch epi = epilogue ? epilogue_params(*epilogue) : EpiLaunch{};
  Args args;
  add_operand_maps(args, a, b, mp, la, lb, bn, k_extent, static_cast<unsigned>(shape.bm()));
  if (shape.persistent) {
    const uint64_t m = static_cast<uint64_t>(mp.M), n = static_cast<uint64_t>(mp.N);
    const TensorMap tout = tensor_map(out_dtype, out + static_cast<uint64_t>(mp.out_offset) * 2, n, m, mp.N, 128);
    TensorMap tin = tout;  // unread without a tile input
    if (tile_input >= 0) {
      const size_t i = static_cast<size_t>(tile_input);
      tin = tensor_map(epilogue->epilogue_inputs[i].dtype, epi.ptr[i] + static_cast<uint64_t>(epi.batch[i].offset) * 2, n,
                       m, epi.rs[i], 128);
    }
    args.add(tout).add(tin);
    if (epilogue && !epilogue->extra_outputs.empty()) {  // the extra output's map (EPI_EXTRA), as the result's
      const KernelArg& x = epilogue->extra_outputs.at(0).arg;
      args.add(tensor_map(x.dtype, epi.extra, n, m, mp.N, 128));
    }
    args.add(mp);
    if (epilogue) args.add(epi);
    const int shared = matmul_tc_shared_bytes(la, lb, shape);
    const int64_t tiles = ((mp.M + 127) / 128) * ((mp.N + bn - 1) / bn);
    ctx.launch(ctx.function(src, tc_entry(shape), shared),
               static_cast<unsigned>(std::min<int64_t>(tiles, std::max(1, ctx.props().multiprocessors))), 1, 1, 384,
               static_cast<unsigned>(shared), args);
    return;
  }
  args.add(out).add(mp);
  if (epilogue) args.add(epi);
  const int shared = matmul_tc_shared_bytes(la, lb, shape) + 2 * shape.stages * 8;  // + the ring's barriers
  ctx.launch(ctx.function(src, tc_entry(shape), shared), static_cast<unsigned>((mp.N + bn - 1) / bn),
             static_cast<unsigned>((mp.M + shape.bm() - 1) / shape.bm()), static_cast<unsigned>(slices),
             shape.min_blocks > 1 ? 288 : 128 * (shape.consumers + 1),
             static_cast<unsigned>(shared),
             args);
}

// the first 16-bit input of the result's shape whose rows bulk copies can read (16-byte
// aligned, contiguous), comes into the staging tile by TMA under the main loop; `cols`
// (bit i: input i), the inputs constant along rows (a bias), into registers before it; the
// `rest` from memory in the epilogue. The kernel's source carries them as defines.
struct EpiRoles {
  int tile = -1, cols = 0, rest = 0;
  std::string defines(const std::vector<DType>& types) const {
    std::string d = "#define EPI_TILE " + std::to_string(tile) + "\n#define EPI_COLS " + std::to_string(cols) +
                    "\n#define EPI_REST " + std::to_string(rest) + "\n";
    if (tile >= 0)
      d += "#define EPI_TILE_FIELD x" + std::to_string(tile + 1) + "\n#define EPI_TILE_T " +
           storage(types[static_cast<size_t>(tile)]) + "\n";
    return d;
  }
};
EpiRoles epilogue_roles(const EpiLaunch& e, const std::vector<DType>& types) {
  EpiRoles r;
  for (size_t i = 0; i < types.size(); ++i) {
    const int bit = 1 << i;
    const bool half = types[i] == DType::BF16 || types[i] == DType::F16;
    if (e.rs[i] == 0) r.cols |= bit;
    else if (r.tile < 0 && half && e.cs[i] == 1 && e.rs[i] % 8 == 0 && (e.ptr[i] + e.batch[i].offset * 2) % 16 == 0)
      r.tile = static_cast<int>(i);
    else r.rest |= bit;
  }
  return r;
}

}  // namespace

WaveSlices wave_slices(int64_t m, int64_t n, int64_t k, int64_t sms) {
  const int64_t steps = (k + 63) / 64;
  WaveSlices best;
  int64_t best_work = 0;
  for (const auto& [bm, bn] : {std::pair<int64_t, int64_t>{192, 192}, {128, 256}}) {
    if (m < bm || n < bn || k < 64) continue;
    const int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
    for (int64_t s = 1; tiles * s <= sms; ++s) {
      const int64_t work = (steps + s - 1) / s * bm * bn;
      if (tiles * s * 5 < sms * 4 || steps / s < 8 || (best.slices && work >= best_work)) continue;
      best = WaveSlices{static_cast<int>(bm), static_cast<int>(bn), static_cast<int>(s)}, best_work = work;
    }
  }
  return best;
}

int split_k_slices(int64_t tiles, int64_t k, int64_t bn, int64_t mn, int64_t sms) {
  const int64_t steps = (k + 63) / 64;
  // A 128 x BN x 64 step at ~80% of an SM's ~7 TFLOP/s; ~5 us to fill a block and store its
  // f32 slice; ~3 TB/s for the slices' bytes; ~4 us for the summing launch.
  const double step_us = 128.0 * static_cast<double>(bn) * 64 * 2 / 5.7e6, block_us = 5;
  const double mn_bytes = static_cast<double>(mn) * 4;
  auto estimate = [&](int s) {
    const int64_t per_slice = (steps + s - 1) / s, waves = (tiles * s + sms - 1) / sms;
    const double sum_us = s > 1 ? 2 * s * mn_bytes / 3e6 + 4 : 0;
    return static_cast<double>(waves) * (static_cast<double>(per_slice) * step_us + block_us) + sum_us;
  };
  int best = 1;
  for (int s = 2; s <= 16; ++s) {
    const int64_t per_slice = (steps + s - 1) / s;
    if (per_slice < 8 || per_slice * (s - 1) >= steps) continue;  // short slices; an empty last slice
    if (estimate(s) < estimate(best)) best = s;
  }
  return best;
}

namespace {

// Split-K for products with few output tiles and a long K (the weight gradients dY^T x of a
// training step: [768, 16384] x [16384, 768] fills 18 blocks of 132 SMs): K is cut into
// `splits` equal slices run as a batch of products into an f32 workspace, then summed.
//
// On the bulk-copy kernel (one block per SM, any number of slices of whole K steps) the count
// comes from a model of the time, since wave quantization decides it: GPT-2's dW products
// ([768, 16384] x [16384, 3072]: 72 tiles) took 2 slices, 144 blocks, two waves of which the
// second held 12 blocks. Time ~ waves x (steps per slice x a step's time + a block's fill
// and f32 store) + the slices' round trip through memory (written, then read by the sum).
int split_k(const Context& ctx, const MatmulLaunchParams& mp, TcShape shape) {
  if (mp.batch != 1 || shape.pingpong) return 1;  // ping-pong: short K (tc_shape), not worth slicing
  const int64_t tiles = ((mp.M + shape.bm() - 1) / shape.bm()) * ((mp.N + shape.bn() - 1) / shape.bn());
  const int64_t sms = std::max(1, ctx.props().multiprocessors);
  if (shape.tma && shape.min_blocks == 1 && tma_fits(mp, shape))
    return split_k_slices(tiles, mp.K, shape.bn(), mp.M * mp.N, sms);
  int splits = 1;
  // Double while the grid is short of one block per SM and each slice keeps >= 1024 of K in
  // whole 16-byte vectors.
  while (tiles * splits < sms && mp.K % (splits * 2 * 8) == 0 && mp.K / (splits * 2) >= 1024) splits *= 2;
  return splits;
}

// Stream-K on the bulk-copy kernel (kernels/matmul_wgmma.cu): the tiles' K steps in equal
// ranges, one block per SM, each range's (at most two) pieces into an f32 workspace, then
// summed per tile. Unlike equal slices per tile it leaves no partial last wave (GPT-2's fc
// dW: 72 tiles x 256 steps = 139.6 steps a block on 132 SMs, against 3 slices of 85 steps
// in 1.6 waves). With `epilogue` the sum applies it (a weight gradient's cast to f32 then
// costs no pass of its own). False where it does not apply: the caller slices K evenly.
bool stream_k_matmul(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& mp,
                     const char* kind, int la, int lb, TcShape shape, const Kernel* epilogue = nullptr) {
  if (tuning().split_k_slices) return false;  // equal slices per tile (a comparison)
  if (!shape.tma || shape.persistent || shape.min_blocks != 1 || shape.consumers != 2 || !tma_fits(mp, shape) ||
      mp.N % 8 != 0)
    return false;
  const int64_t bn = shape.bn(), tiles = ((mp.M + 127) / 128) * ((mp.N + bn - 1) / bn), ktiles = (mp.K + 63) / 64;
  const int64_t steps = tiles * ktiles;
  // At least 8 steps a block; no range longer than a tile's K (so at most two pieces a block).
  const int64_t blocks = std::min<int64_t>(std::max(1, ctx.props().multiprocessors), steps / 8);
  if (blocks < tiles || (steps + blocks - 1) / blocks > ktiles) return false;
  const CUdeviceptr ws = ctx.scratch(static_cast<size_t>(2 * blocks * 128 * bn) * 4);
  const std::string src = matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape, {}, true);
  Args args;
  add_operand_maps(args, a, b, mp, la, lb, bn, mp.K);
  args.add(ws).add(mp);
  const int shared = matmul_tc_shared_bytes(la, lb, shape) + 2 * shape.stages * 8;  // + the ring's barriers
  ctx.launch(ctx.function(src, "matmul_wgmma_tma_stream_k", shared), static_cast<unsigned>(blocks), 1, 1, 384,
             static_cast<unsigned>(shared), args);
  // The sum's own source carries the epilogue: the products' kernel is the same with or without one.
  std::string sum_src = src;
  Args sum;
  sum.add(ws).add(out.ptr).add(mp).add(static_cast<int32_t>(blocks));
  if (epilogue) {
    sum_src = matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape, epilogue_code(*epilogue, out.dtype), true);
    sum.add(epilogue_params(*epilogue));
  }
  ctx.launch(ctx.function(sum_src, "matmul_stream_k_sum"), blocks_for(ctx, mp.M * mp.N / 4), 1, 1, kBlock, 0, sum);
  return true;
}

// With `epilogue` the sum applies it; `even`: slices even where stream-K would apply (wave_slices).
void split_k_matmul(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& whole,
                    const char* kind, int la, int lb, TcShape shape, int splits, bool even,
                    const Kernel* epilogue = nullptr) {
  if (!even && stream_k_matmul(ctx, a, b, out, whole, kind, la, lb, shape, epilogue)) return;
  // Whole 64-wide steps a slice on the bulk-copy kernel (the last slice's overrun reads
  // zeros); K / splits elsewhere (split_k divides K evenly there).
  const int64_t slice = shape.tma ? ((whole.K + 63) / 64 + splits - 1) / splits * 64 : whole.K / splits;
  const int64_t mn = whole.M * whole.N;
  MatmulLaunchParams mp = whole;
  mp.K = slice, mp.batch = splits, mp.batch_rank = 1, mp.out_offset = 0;
  mp.a_batch = kview({splits}, {slice * whole.a_cs}, a.offset);  // slice s starts at column s * slice of a
  mp.b_batch = kview({splits}, {slice * whole.b_rs}, b.offset);  // and at row s * slice of b
  const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(splits * mn) * 4);
  const std::string src = matmul_tc_source(a.dtype, DType::F32, kind, la, lb, shape);
  if (shape.tma) {
    launch_tma(ctx, a, b, partial, DType::F32, mp, la, lb, shape, splits, whole.K, src, nullptr);
  } else {
    const int shared = matmul_tc_shared_bytes(la, lb, shape);
    const int64_t bn = shape.bn();
    Args args;
    args.add(a.ptr).add(b.ptr).add(partial).add(mp);
    ctx.launch(ctx.function(src, tc_entry(shape), shared), static_cast<unsigned>((whole.N + bn - 1) / bn),
               static_cast<unsigned>((whole.M + 127) / 128), static_cast<unsigned>(splits), kBlock,
               static_cast<unsigned>(shared), args);
  }
  Args sum;
  sum.add(partial).add(out.ptr).add(mn).add(static_cast<int64_t>(splits)).add(whole.out_offset).add(whole.N);
  if (epilogue) sum.add(epilogue_params(*epilogue));
  ctx.launch(ctx.function(matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape,
                                           epilogue ? epilogue_code(*epilogue, out.dtype) : std::string()),
                          "matmul_split_sum"),
             blocks_for(ctx, mn), 1, 1, kBlock, 0, sum);
}

MatmulLaunchParams matmul_params(const Arg& a, const Arg& b, const Arg& out) {
  const size_t r = a.shape.size();
  MatmulLaunchParams mp{};
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  mp.a_batch = kview(batch, Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
  mp.b_batch = kview(batch, Shape(b.strides.begin(), b.strides.end() - 2), b.offset);
  mp.a_rs = a.strides[r - 2], mp.a_cs = a.strides[r - 1], mp.b_rs = b.strides[r - 2], mp.b_cs = b.strides[r - 1];
  mp.M = a.shape[r - 2], mp.K = a.shape[r - 1], mp.N = b.shape[r - 1], mp.batch = numel(batch);
  mp.out_offset = out.offset, mp.batch_rank = static_cast<int32_t>(batch.size());
  return mp;
}

// Whether batch item z of a view starts `step` elements after item z - 1, for every z
// (size-1 dims aside): the items' rows then continue one another.
bool batch_steps_by(const KView& v, int64_t step) {
  int64_t expect = step;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] == 1) continue;
    if (v.strides[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}
// A batched product whose B is one matrix for every item (a weight broadcast over [B, T, .]
// activations) and whose A rows continue from item to item is one product of batch * M
// rows: one launch with M tiles to spare instead of a loop over items. The caller checks
// that the epilogue's inputs fold the same way.
bool fold_batch_into_rows(MatmulLaunchParams& mp) {
  if (mp.batch <= 1 || mp.a_cs != 1 || !batch_steps_by(mp.a_batch, mp.M * mp.a_rs) || !batch_steps_by(mp.b_batch, 0))
    return false;
  mp.M *= mp.batch;
  mp.batch = 1, mp.batch_rank = 0;
  mp.a_batch = kview({}, {}, mp.a_batch.offset);
  mp.b_batch = kview({}, {}, mp.b_batch.offset);
  return true;
}

// How the pipelined tensor-core kernel (kernels/matmul_tc.cu) runs a product, when its
// 16-bit operands are 16-byte-vector readable.
struct TcPlan {
  const char* kind;
  int la, lb;  // each operand: 1 contiguous along K, 0 along M (N)
  TcShape shape;
  int splits;
  bool even_slices = false;  // wave_slices chose the slices: no stream-K
};
std::optional<TcPlan> plan_tc(const Context& ctx, const Arg& a, const Arg& b, const MatmulLaunchParams& mp, DType out) {
  const char* kind = mma_kind(a, b, out);
  if (!kind || a.dtype == DType::F32) return std::nullopt;
  auto aligned = [&](const Arg& x, const KView& batch) {
    bool ok = x.offset % 8 == 0 && x.ptr % 16 == 0;
    for (int d = 0; d < batch.rank; ++d) ok = ok && batch.strides[d] % 8 == 0;
    return ok;
  };
  // 1: contiguous along K; 0: along M (N); -1: neither (the general kernel reads it).
  auto layout = [](int64_t k_stride, int64_t other_stride, int64_t K, int64_t other) {
    if (k_stride == 1 && other_stride % 8 == 0 && K % 8 == 0) return 1;
    if (other_stride == 1 && k_stride % 8 == 0 && other % 8 == 0) return 0;
    return -1;
  };
  const int la = aligned(a, mp.a_batch) ? layout(mp.a_cs, mp.a_rs, mp.K, mp.M) : -1;
  const int lb = aligned(b, mp.b_batch) ? layout(mp.b_rs, mp.b_cs, mp.K, mp.N) : -1;
  if (la < 0 || lb < 0) return std::nullopt;
  TcShape shape = tc_shape(ctx, mp.N, mp.K);
  int splits = split_k(ctx, mp, shape);
  if (shape.tma && !tma_fits(mp, shape)) shape = shape.bn() == 256 ? kWgmmaWide : kWgmmaNarrow;  // same block shape, same splits
  // The persistent kernel stages 16-bit results; split-K slices and f32 results take the
  // per-tile kernel of the same block shape.
  if (shape.persistent && (splits > 1 || dtype_size(out) != 2)) shape = shape.pingpong ? kWgmmaTmaPair : kWgmmaTma;
  if (splits > 1 && shape.tma && !shape.persistent && shape.min_blocks == 1) {
    const WaveSlices w = wave_slices(mp.M, mp.N, mp.K, std::max(1, ctx.props().multiprocessors));
    if (w.slices) return TcPlan{kind, la, lb, w.bm == 192 ? kWgmmaTma192 : kWgmmaTma, w.slices, true};
  }
  return TcPlan{kind, la, lb, shape, splits};
}

// One launch of matmul_tc into out; with `epilogue`, its expression is applied in the store.
void launch_tc(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& mp, TcPlan plan,
               const Kernel* epilogue) {
  if (plan.shape.persistent && !persistent_fits(out, mp)) plan.shape = plan.shape.pingpong ? kWgmmaTmaPair : kWgmmaTma;
  std::string epi;
  EpiRoles roles;
  if (epilogue) {
    const std::vector<DType> types = epilogue_input_types(*epilogue);
    epi = epilogue_code(*epilogue, out.dtype);
    if (plan.shape.persistent) {
      roles = epilogue_roles(epilogue_params(*epilogue), types);
      epi += roles.defines(types);
    }
  }
  const std::string src = matmul_tc_source(a.dtype, out.dtype, plan.kind, plan.la, plan.lb, plan.shape, epi);
  if (plan.shape.tma)
    return launch_tma(ctx, a, b, out.ptr, out.dtype, mp, plan.la, plan.lb, plan.shape, 1, mp.K, src, epilogue, roles.tile);
  const int shared = matmul_tc_shared_bytes(plan.la, plan.lb, plan.shape);
  const int64_t bn = plan.shape.bn();
  Args args;
  args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
  if (epilogue) args.add(epilogue_params(*epilogue));
  ctx.launch(ctx.function(src, tc_entry(plan.shape), shared), static_cast<unsigned>((mp.N + bn - 1) / bn),
             static_cast<unsigned>((mp.M + 127) / 128), static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock,
             static_cast<unsigned>(shared), args);
}

// A Matmul with an epilogue, both in one tensor-core kernel where that kernel takes the
// product (floating result and output, at most four more epilogue inputs; with split-K
// the sum of the slices applies it).
// False: the caller runs the product and then the epilogue as a Map kernel.
bool matmul_with_epilogue(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg a = arg_of(k.inputs[0]), b = arg_of(k.inputs[1]);
  auto half_or_f32 = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  if (!half_or_f32(k.node.dtype) || !half_or_f32(out.dtype) || k.epilogue_inputs.size() > kMaxEpilogueInputs) return false;
  // The kernel stores row-major at out.offset and reads each input by its last two strides.
  if (out.shape != k.node.shape || out.strides != contiguous_strides(out.shape)) return false;
  for (const KernelArg& x : k.epilogue_inputs)
    if (arg_of(x).shape != out.shape) return false;
  MatmulLaunchParams mp = matmul_params(a, b, out);
  if (mp.M == 0 || mp.N == 0 || mp.batch == 0 || mp.K == 0) return false;
  MatmulLaunchParams folded = mp;
  if (fold_batch_into_rows(folded)) {
    const EpiLaunch e = epilogue_params(k);
    bool inputs_fold = true;
    for (size_t i = 0; i < k.epilogue_inputs.size(); ++i) inputs_fold = inputs_fold && batch_steps_by(e.batch[i], mp.M * e.rs[i]);
    if (inputs_fold) mp = folded;
  }
  const std::optional<TcPlan> plan = plan_tc(ctx, a, b, mp, k.node.dtype);
  if (!plan) return false;
  // An extra output: the persistent ping-pong kernel stores one, 16-bit, of the result's shape
  // and contiguous (the GELU of fc's product beside it); elsewhere the product is stored and
  // the caller's Map pass computes the epilogue and the extra output.
  if (!k.extra_outputs.empty()) {
    const Arg x = arg_of(k.extra_outputs[0].arg);
    if (k.extra_outputs.size() != 1 || dtype_size(x.dtype) != 2 || x.shape != out.shape ||
        x.strides != contiguous_strides(x.shape) || plan->splits > 1 || !plan->shape.pingpong ||
        !persistent_fits(out, mp) || (x.ptr + static_cast<uint64_t>(x.offset) * 2) % 16 != 0)
      return false;
  }
  // Split K: the sum of the slices applies the epilogue.
  if (plan->splits > 1)
    split_k_matmul(ctx, a, b, out, mp, plan->kind, plan->la, plan->lb, plan->shape, plan->splits, plan->even_slices, &k);
  else launch_tc(ctx, a, b, out, mp, *plan, &k);
  return true;
}

void matmul_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg a = arg_of(k.inputs[0]), b = arg_of(k.inputs[1]);
  MatmulLaunchParams mp = matmul_params(a, b, out);
  if (mp.M == 0 || mp.N == 0 || mp.batch == 0) return;
  fold_batch_into_rows(mp);
  if (const std::optional<TcPlan> plan = plan_tc(ctx, a, b, mp, out.dtype)) {
    if (plan->splits > 1)
      split_k_matmul(ctx, a, b, out, mp, plan->kind, plan->la, plan->lb, plan->shape, plan->splits, plan->even_slices);
    else launch_tc(ctx, a, b, out, mp, *plan, nullptr);
    return;
  }
  if (const char* kind = mma_kind(a, b, out.dtype)) {
    // Tensor cores: how each operand's tiles are read (kernels/matmul_mma.cu).
    const int64_t esize = static_cast<int64_t>(dtype_size(a.dtype));
    auto mode = [&](const Arg& x, int64_t k_stride, int64_t other_stride, const KView& batch) {
      bool aligned = k_stride == 1 && mp.K % 8 == 0 && other_stride % 8 == 0 && x.offset % 8 == 0 &&
                     (x.ptr % 16) == 0;
      for (int d = 0; d < batch.rank; ++d) aligned = aligned && batch.strides[d] % 8 == 0;
      (void)esize;
      return aligned ? 0 : k_stride == 1 ? 1 : other_stride == 1 ? 2 : 1;
    };
    const int a_mode = mode(a, mp.a_cs, mp.a_rs, mp.a_batch), b_mode = mode(b, mp.b_rs, mp.b_cs, mp.b_batch);
    const std::string src = kernel_source(
        defines({{"TA", storage(a.dtype)},
                 {"TO", storage(out.dtype)},
                 {"MMA_TF32", a.dtype == DType::F32 ? "1" : "0"},
                 {"MMA_TYPE", std::string("\"") + kind + "\""},
                 {"A_MODE", std::to_string(a_mode)},
                 {"B_MODE", std::to_string(b_mode)}}),
        sources::matmul_mma);
    Args args;
    args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
    ctx.launch(ctx.function(src, "matmul_mma"), static_cast<unsigned>((mp.N + 127) / 128),
               static_cast<unsigned>((mp.M + 127) / 128), static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock,
               0, args);
    return;
  }
  const std::string src = matmul_source(a.dtype, b.dtype, out.dtype);
  Args args;
  args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
  ctx.launch(ctx.function(src, "matmul_simt"), static_cast<unsigned>((mp.N + 63) / 64), static_cast<unsigned>((mp.M + 63) / 64),
             static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock, 0, args);
}

std::string matmul_unsupported(const Kernel& k) {
  if (k.inputs[0].shape.size() < 2 || k.inputs[0].shape.size() != k.inputs[1].shape.size())
    return "matmul operands of different ranks";
  return "";
}

const bool registered = (template_ops().add(OpId::Matmul, kAllDTypes,
                                            {matmul_unsupported, matmul_op, matmul_with_epilogue},
                                            "tensor cores for 16-bit operands (f32 under TF32); the rest on CUDA cores"),
                         true);

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    out.emplace_back("matmul " + std::string(dtype_name(t)), matmul_source(t, t, t));
  out.emplace_back("matmul i64", matmul_source(DType::I64, DType::I64, DType::I64));
  out.emplace_back("matmul bf16 x bf16 -> f32", matmul_source(DType::BF16, DType::BF16, DType::F32));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb)
      out.emplace_back("matmul_tc bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, TcShape{8, 4}));
  out.emplace_back("matmul_tc f16 -> f32 narrow", matmul_tc_source(DType::F16, DType::F32, "f16", 1, 1, TcShape{4, 3}));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb)
      out.emplace_back("matmul_wgmma bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaWide));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb) {
      out.emplace_back("matmul_wgmma_tma bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTma));
      out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPair));
      out.emplace_back("matmul_wgmma_tma persistent, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPersistent));
      out.emplace_back("matmul_wgmma_tma ping-pong, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPingpong));
      out.emplace_back("matmul_wgmma_tma stream-K, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTma, {}, true));
      out.emplace_back("matmul_wgmma_tma 192 x 192, three consumer warpgroups, f32, layouts " + std::to_string(la) +
                           std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::F32, "bf16", la, lb, kWgmmaTma192));
    }
  out.emplace_back("matmul_wgmma f16 -> f32 narrow",
                   matmul_tc_source(DType::F16, DType::F32, "f16", 1, 0, kWgmmaNarrow));
  {
    // A fused epilogue: a bf16 product plus an f32 bias, then tanh-GELU, stored as bf16.
    const std::vector<std::string> names = {"a", "b"};
    const std::vector<expr::Type> types = {expr::Type::F32, expr::Type::F32};
    const expr::Expr gelu_bias = expr::parse("0.5 * (a + b) * (1 + tanh(0.79788456 * (a + b)))", names, types,
                                             expr::Type::F32);
    out.emplace_back("matmul_tc bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, TcShape{8, 4},
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 0, 0, kWgmmaWide,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    const std::vector<std::string> names5 = {"a", "b", "c", "d", "e"};
    const std::vector<expr::Type> types5(5, expr::Type::F32);
    const expr::Expr sum4 = expr::parse("a + b + c + d + e", names5, types5, expr::Type::F32);
    out.emplace_back("matmul_wgmma_tma bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTma,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma persistent + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPersistent,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma persistent f16 + 4-input epilogue",
                     matmul_tc_source(DType::F16, DType::F16, "f16", 0, 0, kWgmmaTmaPersistent,
                                      epilogue_code(sum4, DType::F16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::F16)));
    out.emplace_back("matmul_wgmma_tma ping-pong + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPingpong,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::BF16)));
    // The persistent kernel's epilogue roles (EpiRoles): a staged tile input, row-constant
    // inputs and the rest, in both schedules.
    const std::vector<DType> four = {DType::F32, DType::BF16, DType::F32, DType::F16};
    for (const auto& [name, shape] : {std::pair{"ping-pong", kWgmmaTmaPingpong}, std::pair{"persistent", kWgmmaTmaPersistent}}) {
      EpiRoles tile_and_cols;
      tile_and_cols.tile = 1, tile_and_cols.cols = 1 | 4, tile_and_cols.rest = 8;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + staged, row-constant and loaded epilogue inputs",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, shape,
                                        epilogue_code(sum4, DType::BF16, four, DType::BF16) + tile_and_cols.defines(four)));
      EpiRoles bias;
      bias.cols = 1;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + a bias",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, shape,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16) +
                                            bias.defines({DType::F32})));
      EpiRoles staged;
      staged.tile = 0;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + a staged input",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, shape,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::BF16}, DType::BF16) +
                                            staged.defines({DType::BF16})));
    }
    {
      // An extra output (Kernel::extra_outputs, ping-pong only): fc1's GELU beside its biased
      // product; fc2's input gradient with the GELU of its staged epilogue input beside it.
      const expr::Expr plus_bias = expr::parse("a + b", names, types, expr::Type::F32);
      EpiRoles bias;
      bias.cols = 1;
      out.emplace_back("matmul_wgmma_tma ping-pong + a bias and an extra output",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, kWgmmaTmaPingpong,
                                        epilogue_code(plus_bias, DType::BF16, {DType::F32}, DType::BF16, &gelu_bias) +
                                            bias.defines({DType::F32})));
      const expr::Expr input_gelu = expr::parse("0.5 * b * (1 + tanh(0.79788456 * b))", names, types, expr::Type::F32);
      EpiRoles staged;
      staged.tile = 0;
      out.emplace_back("matmul_wgmma_tma ping-pong + a staged input and an extra output",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPingpong,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::BF16}, DType::BF16, &input_gelu) +
                                            staged.defines({DType::BF16})));
    }
    out.emplace_back("matmul_wgmma_tma 192 x 192 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTma192,
                                      epilogue_code(sum4, DType::BF16, four, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma stream-K + epilogue in the sum",
                     matmul_tc_source(DType::BF16, DType::F32, "bf16", 0, 0, kWgmmaTma,
                                      epilogue_code(sum4, DType::BF16, four, DType::F32), true));
    out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPair,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 0, 0, kWgmmaTmaPair,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::BF16)));
    out.emplace_back("matmul_wgmma narrow + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::F32, "bf16", 1, 0, kWgmmaNarrow,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::F32)));
  }
  for (const char* kind : {"bf16", "f16", "tf32"})
    for (auto [a_mode, b_mode] : {std::pair{0, 0}, std::pair{1, 2}, std::pair{2, 1}}) {
        const DType t = kind[0] == 'b' ? DType::BF16 : kind[0] == 'f' && kind[1] == '1' ? DType::F16 : DType::F32;
        out.emplace_back(std::string("matmul_mma ") + kind + " modes " + std::to_string(a_mode) + std::to_string(b_mode),
                         kernel_source(defines({{"TA", storage(t)},
                                                {"TO", storage(t)},
                                                {"MMA_TF32", t == DType::F32 ? "1" : "0"},
                                                {"MMA_TYPE", std::string("\"") + kind + "\""},
                                                {"A_MODE", std::to_string(a_mode)},
                                                {"B_MODE", std::to_string(b_mode)}}),
                                       sources::matmul_mma));
    }
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
