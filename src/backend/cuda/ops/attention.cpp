// Scaled dot-product attention, forward and backward, in four forms by what the device and
// the op allow: on Hopper's warpgroup instructions (sm_90a, bf16, head dim 64), on mma.sync
// tensor cores (reduced precision, head dims multiples of 16 up to 128), tiled through shared
// memory (head dims up to 128), and a warp per row (up to 256). kernels/attention*.cu.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cuda/ops/hopper.h"
#include "backend/cuda/template_ops.h"
#include "backend/cuda/tuning.h"

namespace alk::cuda {

namespace {

struct AttnLaunchParams {
  KView q, k, v, o, dout;
  int64_t q_rs, q_cs, k_rs, k_cs, v_rs, v_cs, o_rs, o_cs, d_rs, d_cs;
  int64_t B, Tq, S, D, out_offset, rows_out, lse_at = -1;
  int64_t g_plane, g_bs, g_hs, g_rs, g_heads;
  int32_t batch_rank, causal;
};

// The batch part of a [..., rows, D] view, with its row and column strides.
void attn_view(const Arg& a, KView& v, int64_t& rs, int64_t& cs) {
  const size_t r = a.shape.size();
  v = kview(Shape(a.shape.begin(), a.shape.end() - 2), Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
  rs = a.strides[r - 2], cs = a.strides[r - 1];
}

std::string attention_source(DType t, int64_t D, bool tiled = false) {
  return kernel_source(defines({{"T", storage(t)},
                                {"ACC", acc_type(t)},
                                {"DPL", std::to_string((D + 31) / 32)},
                                {"VEC4", t == DType::F64 ? "0" : "1"}}),
                       std::string(sources::attention_shared) + std::string(tiled ? sources::attention_tiled : sources::attention));
}

// The tensor-core kernels (kernels/attention_mma.cu): bf16 products, for ops that allow
// them (AttentionParams::reduced_precision), head dims a multiple of 16 up to 128. t: the
// storage of q, k, v and dout; fwd: the packed forward output's; grads: the gradients'
// (under autocast q, k, v may be bf16 while the packed output is f32).
// kwarps: the one-pass backward's warps per block (4, or 8 where D % 32 == 0).
std::string attention_mma_source(DType t, DType fwd, DType grads, int64_t D, int kwarps = 4) {
  return kernel_source(defines({{"T", storage(t)},
                                {"TF", storage(fwd)},
                                {"TG", storage(grads)},
                                {"T_BF16", t == DType::BF16 ? "1" : "0"},
                                {"ACC", "float"},
                                {"HD", std::to_string(D)},
                                {"KWARPS", std::to_string(kwarps)}}),
                       std::string(sources::attention_shared) + std::string(sources::attention_mma));
}
// The kernels on Hopper's warpgroup instructions (kernels/attention_mma.cu, ATTN_WGMMA): bf16
// q, k, v (and dout), head dim 64; fwd: the forward output's storage, grads: the gradients'.
// wgmma_tile for n = 64 (K-major operands: the scores) and n = 32 (both transposed: the
// backward's dq halves), wgmma_tile_ra for n = 64 (B transposed: P V, P^T dO, dS^T Q).
std::string attention_wgmma_source(DType fwd, DType grads) {
  return kernel_source(defines({{"T", storage(DType::BF16)},
                                {"TF", storage(fwd)},
                                {"TG", storage(grads)},
                                {"T_BF16", "1"},
                                {"ACC", "float"},
                                {"HD", "64"},
                                {"KWARPS", "4"},
                                {"ATTN_WGMMA", "1"}}),
                       std::string(sources::attention_shared) + wgmma_tile_code(64, "bf16", 1, 1) +
                           wgmma_tile_code(32, "bf16", 0, 0) + wgmma_tile_ra_code(64, "bf16", 0) +
                           std::string(sources::attention_mma));
}
// Whether the warpgroup kernels take an attention op: sm_90a, bf16 rows of 64 that 16-byte
// copies read from every batch item (q, k, v and, for the backward, dout), where their tensor
// maps can be encoded too (attention_maps); unless the mma.sync kernels are asked for
// (tuning(): ALK_CUDA_ATTENTION_FORWARD=mma, ALK_CUDA_ATTENTION_BACKWARD=mma). In GPT-2's step they take 0.161 ms a layer forward (mma.sync 0.198) and 0.417
// backward (0.553), bench/cuda/NOTES.md, eleventh session.
bool attention_wgmma_ok(const Context& ctx, const AttnLaunchParams& ap, DType t, bool backward) {
  if ((backward ? tuning().attention_backward_mma : tuning().attention_forward_mma) || ctx.props().cc_major != 9 || ctx.props().cc_minor != 0 || t != DType::BF16 || ap.D != 64)
    return false;
  auto rows_16byte = [](const KView& v, int64_t rs, int64_t cs) {
    bool ok = cs == 1 && rs % 8 == 0 && v.offset % 8 == 0;
    for (int d = 0; d < v.rank; ++d) ok = ok && v.strides[d] % 8 == 0;
    return ok;
  };
  return rows_16byte(ap.q, ap.q_rs, ap.q_cs) && rows_16byte(ap.k, ap.k_rs, ap.k_cs) &&
         rows_16byte(ap.v, ap.v_rs, ap.v_cs) && (!backward || rows_16byte(ap.dout, ap.d_rs, ap.d_cs));
}
// The warpgroup kernels' tensor maps (kernels/attention_mma.cu): q, k, v (and the backward's
// dout) as rank-5 maps of [64, rows, batch dims fastest first] (missing batch dims of extent
// 1), boxes of a forward block's 128 queries and 64 keys, or a backward block's 128 keys and 64
// queries; the backward's per-query statistics ([2][B][Tq] f32: delta, then the log2-domain
// logsumexp) as a rank-3 map, boxes of 64 queries of both planes; and the two batch extents
// that unravel a block's batch item. nullopt where a bulk copy cannot address the views (more
// than three batch dims, batch shapes that differ, strides off 16 bytes or zero, Tq not a
// multiple of 4 for the statistics): the mma.sync kernels take those.
struct AttentionMaps {
  TensorMap q, k, v, dout, stats;
  unsigned batch_fast = 1, batch_mid = 1;
};
std::optional<AttentionMaps> attention_maps(const AttnLaunchParams& ap, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                                            CUdeviceptr dout = 0, CUdeviceptr stats = 0) {
  const bool backward = dout != 0;
  const int r = ap.q.rank;
  if (r > 3 || ap.k.rank != r || ap.v.rank != r || (backward && ap.dout.rank != r)) return std::nullopt;
  for (int d = 0; d < r; ++d)
    if (ap.k.shape[d] != ap.q.shape[d] || ap.v.shape[d] != ap.q.shape[d] || (backward && ap.dout.shape[d] != ap.q.shape[d]))
      return std::nullopt;
  auto encode = [&](CUdeviceptr ptr, const KView& view, int64_t rows, int64_t rs, unsigned box_rows) -> std::optional<TensorMap> {
    const uint64_t first = ptr + static_cast<uint64_t>(view.offset) * 2;
    uint64_t dims[5] = {64, static_cast<uint64_t>(rows), 1, 1, 1}, strides[4];
    strides[0] = static_cast<uint64_t>(rs) * 2;
    for (int i = 0; i < 3; ++i) {  // batch dim r - 1 - i (fastest first)
      const int d = r - 1 - i;
      dims[2 + i] = d >= 0 ? static_cast<uint64_t>(view.shape[d]) : 1;
      strides[1 + i] = d >= 0 && view.shape[d] > 1 ? static_cast<uint64_t>(view.strides[d]) * 2 : 16;
    }
    if (first % 16 != 0 || rows <= 0 || rows > (int64_t{1} << 31)) return std::nullopt;
    for (uint64_t st : strides)
      if (st == 0 || st % 16 != 0 || st >= (uint64_t{1} << 40)) return std::nullopt;
    TensorMap map{};
    const unsigned box[5] = {64, box_rows, 1, 1, 1}, element_strides[5] = {1, 1, 1, 1, 1};
    constexpr int kBf16 = 9, kInterleaveNone = 0, kSwizzle128 = 3, kL2Promote128 = 2, kFillZero = 0;
    if (driver()->cuTensorMapEncodeTiled(&map, kBf16, 5, reinterpret_cast<void*>(first), dims, strides, box,
                                         element_strides, kInterleaveNone, kSwizzle128, kL2Promote128, kFillZero) != 0)
      return std::nullopt;
    return map;
  };
  const unsigned query_box = backward ? 64 : 128, key_box = backward ? 128 : 64;
  const auto mq = encode(q, ap.q, ap.Tq, ap.q_rs, query_box), mk = encode(k, ap.k, ap.S, ap.k_rs, key_box),
             mv = encode(v, ap.v, ap.S, ap.v_rs, key_box);
  if (!mq || !mk || !mv) return std::nullopt;
  AttentionMaps maps{*mq, *mk, *mv, {}, {}};
  if (backward) {
    const auto md = encode(dout, ap.dout, ap.Tq, ap.d_rs, 64);
    if (!md || ap.Tq % 4 != 0 || stats % 16 != 0) return std::nullopt;
    maps.dout = *md;
    const uint64_t dims[3] = {static_cast<uint64_t>(ap.Tq), static_cast<uint64_t>(ap.B), 2},
                   strides[2] = {static_cast<uint64_t>(ap.Tq) * 4, static_cast<uint64_t>(ap.B * ap.Tq) * 4};
    const unsigned box[3] = {64, 1, 2}, element_strides[3] = {1, 1, 1};
    constexpr int kF32 = 7, kInterleaveNone = 0, kSwizzleNone = 0, kL2Promote128 = 2, kFillZero = 0;
    if (driver()->cuTensorMapEncodeTiled(&maps.stats, kF32, 3, reinterpret_cast<void*>(stats), dims, strides, box,
                                         element_strides, kInterleaveNone, kSwizzleNone, kL2Promote128, kFillZero) != 0)
      return std::nullopt;
  }
  if (r >= 1) maps.batch_fast = static_cast<unsigned>(ap.q.shape[r - 1]);
  if (r >= 2) maps.batch_mid = static_cast<unsigned>(ap.q.shape[r - 2]);
  return maps;
}
bool attention_mma_ok(const Kernel& k, DType t, int64_t D, int64_t B) {
  return std::get<AttentionParams>(k.node.params).reduced_precision && t != DType::F64 && D % 16 == 0 && D >= 16 &&
         D <= 128 && B <= 65535;
}
// Shared memory in bytes: bf16 rows of D + 8 elements. Forward: 128 queries and two
// stages of 64 keys and 64 values; backward: 16 kwarps keys and as many values,
// two stages of 64 queries and 64 output gradients, the keys x 64 dS^T tile (rows of 64 + 8),
// and two stages of per-query f32 statistics.
int attention_mma_shared(int64_t D, bool backward, int kwarps = 4) {
  const int64_t row = (D + 8) * 2, keys = 16 * kwarps;
  if (!backward) return static_cast<int>(384 * row);
  return static_cast<int>((2 * keys + 256) * row + keys * (64 + 8) * 2 + 4 * 64 * 4);
}

// The tiled kernels (kernels/attention_tiled.cu) take head dims up to 128; their shared
// memory, in bytes, per kernel (the layouts at the top of each).
bool attention_tiled_ok(const AttnLaunchParams& ap) { return ap.D >= 1 && ap.D <= 128 && ap.B <= 65535; }
int attention_tiled_shared(DType t, int64_t D, int which) {
  const int64_t acc = t == DType::F64 ? 8 : 4, p = 4 * 32 * 17;
  const int64_t n = which == 0   ? D * 64 + 32 * (D + 1) + 32 * D + p
                    : which == 1 ? 2 * D * 64 + 2 * 32 * (D + 1) + p + 128
                                 : 2 * D * 32 + 2 * 32 * (D + 1) + p + 64;
  return static_cast<int>(n * acc);
}

// The forward's output rows and logsumexps in its 16-bit node (AttentionParams::out_heads
// n >= 1): rows [B / n, Tq, n, D] from the node's first element, then f32 logsumexps. Only
// the tensor-core kernels know this layout.
void lse_apart_views(const Kernel& k, DType t, AttnLaunchParams& ap, int64_t out_heads, int64_t node_offset) {
  alk::check(attention_mma_ok(k, t, ap.D, ap.B), "scaled_dot_product_attention", k.node.loc,
             "a 16-bit output with its logsumexps apart needs the tensor-core kernel (head dim ", ap.D, ")");
  const int64_t n = out_heads;
  ap.o = kview({ap.B / n, n}, {ap.Tq * n * ap.D, ap.D}, node_offset);
  ap.o_rs = n * ap.D, ap.o_cs = 1;
  ap.lse_at = node_offset + ap.B * ap.Tq * ap.D;
}

AttnLaunchParams attention_params(const Kernel& k, const Arg& q, const Arg& kk, const Arg& v) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  AttnLaunchParams ap{};
  attn_view(q, ap.q, ap.q_rs, ap.q_cs);
  attn_view(kk, ap.k, ap.k_rs, ap.k_cs);
  attn_view(v, ap.v, ap.v_rs, ap.v_cs);
  const size_t r = q.shape.size();
  ap.B = numel(Shape(q.shape.begin(), q.shape.end() - 2));
  ap.Tq = q.shape[r - 2], ap.S = kk.shape[r - 2], ap.D = q.shape[r - 1];
  ap.rows_out = std::max(ap.Tq, ap.S);
  ap.g_plane = ap.B * ap.rows_out * ap.D, ap.g_bs = ap.rows_out * ap.D, ap.g_hs = 0, ap.g_rs = ap.D, ap.g_heads = 1;
  ap.batch_rank = static_cast<int32_t>(r - 2), ap.causal = p.causal;
  return ap;
}

template <class Scale>
void add_attention_params(Args& args, const AttnLaunchParams& ap, DType t, double scale) {
  // The kernel's struct ends with `ACC scale` (float or double): appended in that type.
  std::vector<char> bytes(sizeof(ap));
  std::memcpy(bytes.data(), &ap, sizeof(ap));
  const Scale s = static_cast<Scale>(scale);
  const size_t align = alignof(Scale);
  bytes.resize((bytes.size() + align - 1) / align * align);
  const size_t at = bytes.size();
  bytes.resize(at + sizeof(Scale));
  std::memcpy(bytes.data() + at, &s, sizeof(Scale));
  bytes.resize((bytes.size() + 7) / 8 * 8);  // the struct's alignment (it holds i64)
  (void)t;
  args.add_bytes(bytes.data(), bytes.size());
}
void add_attention(Args& args, const AttnLaunchParams& ap, DType t, double scale) {
  if (t == DType::F64) add_attention_params<double>(args, ap, t, scale);
  else add_attention_params<float>(args, ap, t, scale);
}

// The tensor-core kernels' grid is (batch, tile), so that blocks start heaviest first under a
// causal mask (LPT in kernels/attention_mma.cu); y holds at most 65535 tiles.
unsigned attention_tiles(const Kernel& k, int64_t rows, int64_t per_block) {
  const int64_t tiles = (rows + per_block - 1) / per_block;
  alk::check(tiles <= 65535, "scaled_dot_product_attention", k.node.loc,
             "sequence length " + std::to_string(rows) + " needs " + std::to_string(tiles) +
                 " tiles of " + std::to_string(per_block) + " rows; the CUDA kernels take at most 65535");
  return static_cast<unsigned>(tiles);
}

void attention_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg q = arg_of(k.inputs[0]), kk = arg_of(k.inputs[1]), v = arg_of(k.inputs[2]);
  AttnLaunchParams ap = attention_params(k, q, kk, v);
  ap.out_offset = out.offset;
  const auto& params = std::get<AttentionParams>(k.node.params);
  if (params.out_heads) lse_apart_views(k, q.dtype, ap, params.out_heads, out.offset);
  Args args;
  args.add(q.ptr).add(kk.ptr).add(v.ptr).add(out.ptr);
  add_attention(args, ap, q.dtype, params.scale);
  const std::optional<AttentionMaps> maps = attention_mma_ok(k, q.dtype, ap.D, ap.B) &&
                                                    attention_wgmma_ok(ctx, ap, q.dtype, false)
                                                ? attention_maps(ap, q.ptr, kk.ptr, v.ptr)
                                                : std::nullopt;
  if (maps) {
    // Q, four stages of K and V (128-byte rows), 1 KiB to align them, the ring's barriers.
    const int shared = (128 + 8 * 64) * 128 + 1024 + 64;
    Args wargs;
    wargs.add(maps->q).add(maps->k).add(maps->v).add(out.ptr);
    add_attention(wargs, ap, q.dtype, params.scale);
    wargs.add(maps->batch_fast).add(maps->batch_mid);
    ctx.launch(ctx.function(attention_wgmma_source(out.dtype, out.dtype), "attention_forward_wgmma", shared),
               static_cast<unsigned>(ap.B), attention_tiles(k, ap.Tq, 128), 1, 256, static_cast<unsigned>(shared), wargs);
    return;
  }
  if (attention_mma_ok(k, q.dtype, ap.D, ap.B)) {
    const int shared = attention_mma_shared(ap.D, false);
    ctx.launch(ctx.function(attention_mma_source(q.dtype, out.dtype, out.dtype, ap.D), "attention_forward_mma", shared),
               static_cast<unsigned>(ap.B), attention_tiles(k, ap.Tq, 128), 1, 256, static_cast<unsigned>(shared), args);
    return;
  }
  if (attention_tiled_ok(ap)) {
    const int shared = attention_tiled_shared(q.dtype, ap.D, 0);
    ctx.launch(ctx.function(attention_source(q.dtype, ap.D, true), "attention_forward_tiled", shared),
               static_cast<unsigned>((ap.Tq + 63) / 64), static_cast<unsigned>(ap.B), 1, 128, static_cast<unsigned>(shared),
               args);
    return;
  }
  ctx.launch(ctx.function(attention_source(q.dtype, ap.D), "attention_forward"), blocks_for(ctx, ap.B * ap.Tq, kBlock / 32),
             1, 1, kBlock, 0, args);
}

void attention_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg q = arg_of(k.inputs[0]), kk = arg_of(k.inputs[1]), v = arg_of(k.inputs[2]);
  const Arg fwd = arg_of(k.inputs[3]), dout = arg_of(k.inputs[4]);
  AttnLaunchParams ap = attention_params(k, q, kk, v);
  const auto& params = std::get<AttentionParams>(k.node.params);
  if (params.out_heads) lse_apart_views(k, q.dtype, ap, params.out_heads, fwd.offset);
  else attn_view(fwd, ap.o, ap.o_rs, ap.o_cs);
  if (params.grads_qkv) {  // [b, T, 3, H, D]
    const int64_t h = params.out_heads;
    alk::check(h > 0 && ap.Tq == ap.S && ap.B % h == 0, "scaled_dot_product_attention", k.node.loc,
               "the packed projection's gradient layout needs T == S and the heads' layout");
    ap.g_heads = h, ap.g_plane = h * ap.D, ap.g_hs = ap.D, ap.g_rs = 3 * h * ap.D, ap.g_bs = ap.Tq * ap.g_rs;
  }
  attn_view(dout, ap.dout, ap.d_rs, ap.d_cs);
  ap.out_offset = out.offset;
  const double scale = params.scale;
  const size_t esize = dtype_size(out.dtype);
  if (ap.Tq != ap.S)  // rows past T (dq) or S (dk, dv) are zero
    ctx.memset0(out.ptr + static_cast<CUdeviceptr>(out.offset) * esize, static_cast<size_t>(numel(out.shape)) * esize);
  const size_t query_rows = static_cast<size_t>(std::max<int64_t>(1, ap.B * ap.Tq));
  // The tiled and per-row variants run two kernels with the same arguments: dq (which also
  // writes delta), then dk/dv (which reads it).
  CUdeviceptr delta = 0;  // theirs, allocated below (the tensor-core path keeps its own statistics)
  auto pass = [&](const std::string& src, const char* name, int shared, unsigned grid_x, unsigned grid_y, unsigned block) {
    Args args;
    args.add(q.ptr).add(kk.ptr).add(v.ptr).add(fwd.ptr).add(dout.ptr).add(out.ptr).add(delta);
    add_attention(args, ap, q.dtype, scale);
    ctx.launch(ctx.function(src, name, shared), grid_x, grid_y, 1, block, static_cast<unsigned>(shared), args);
  };
  auto tiles = [](int64_t rows, int64_t per_block) { return static_cast<unsigned>((rows + per_block - 1) / per_block); };
  const auto batch = static_cast<unsigned>(ap.B);
  if (attention_mma_ok(k, q.dtype, ap.D, ap.B)) {
    // stats: each query row's delta, then its logsumexp in the log2 domain (f32 each).
    const CUdeviceptr stats = ctx.scratch(2 * query_rows * 4);
    const std::optional<AttentionMaps> maps = attention_wgmma_ok(ctx, ap, q.dtype, true)
                                                  ? attention_maps(ap, q.ptr, kk.ptr, v.ptr, dout.ptr, stats)
                                                  : std::nullopt;
    const bool wgmma = maps.has_value();
    // 8 warps (128 keys) per block halve the q/dout tile loads and dq atomics per key.
    const int kwarps = ap.D % 32 == 0 ? 8 : 4;
    const std::string src = wgmma ? attention_wgmma_source(fwd.dtype, out.dtype)
                                  : attention_mma_source(q.dtype, fwd.dtype, out.dtype, ap.D, kwarps);
    // One pass over the key blocks; dq gathered in f32 by atomic adds (mma.sync) or bulk
    // reduce-adds of whole tiles (wgmma), then scaled and stored.
    // The warpgroup kernel's dq_acc is whole tiles of 64 queries (DQ_CHUNK in
    // kernels/attention_mma.cu); prep zeroes the first B * Tq * D floats, all of it when Tq is
    // a multiple of 64, else it is cleared here first.
    const int64_t dq_rows = wgmma ? ap.B * ((ap.Tq + 63) / 64 * 64) : ap.B * ap.Tq;
    const size_t dq_bytes = static_cast<size_t>(std::max<int64_t>(1, dq_rows * ap.D)) * 4;
    const CUdeviceptr dq_acc = ctx.scratch(dq_bytes);
    if (dq_rows != ap.B * ap.Tq) ctx.memset0(dq_acc, dq_bytes);
    Args prep;
    prep.add(fwd.ptr).add(dout.ptr).add(stats).add(dq_acc);
    add_attention(prep, ap, q.dtype, scale);
    // HD / 8 lanes per row: 8 warps cover 256 * 8 / HD rows a pass.
    ctx.launch(ctx.function(src, "attention_backward_prep"), blocks_for(ctx, ap.B * ap.Tq, kBlock * 8 / ap.D), 1, 1,
               kBlock, 0, prep);
    if (wgmma) {
      // K, V (128 rows each), two stages of q and dout (64 rows), two dS^T buffers (128 rows):
      // 128-byte rows; two stages of two f32 statistics per query; 1 KiB to align.
      // Then two dq buffers a warpgroup (64 x 32 f32), then the copies' barriers.
      const int shared = (128 * 4 + 4 * 64) * 128 + 2 * 2 * 64 * 4 + 4 * 64 * 32 * 4 + 1024 + 64;
      Args main;
      main.add(maps->q).add(maps->k).add(maps->v).add(maps->dout).add(maps->stats).add(out.ptr).add(dq_acc);
      add_attention(main, ap, q.dtype, scale);
      main.add(maps->batch_fast).add(maps->batch_mid);
      ctx.launch(ctx.function(src, "attention_backward_wgmma", shared), batch, attention_tiles(k, ap.S, 128), 1, 256,
                 static_cast<unsigned>(shared), main);
    } else {
      Args main;
      main.add(q.ptr).add(kk.ptr).add(v.ptr).add(stats).add(dout.ptr).add(out.ptr).add(dq_acc);
      add_attention(main, ap, q.dtype, scale);
      const int shared = attention_mma_shared(ap.D, true, kwarps);
      ctx.launch(ctx.function(src, "attention_backward_mma", shared), batch, attention_tiles(k, ap.S, 16 * kwarps), 1,
                 static_cast<unsigned>(32 * kwarps), static_cast<unsigned>(shared), main);
    }
    Args finish;
    finish.add(dq_acc).add(out.ptr);
    add_attention(finish, ap, q.dtype, scale);
    // Four elements a thread, or (wgmma) 16 of a 64-query tile's chunk.
    ctx.launch(ctx.function(src, "attention_backward_dq_finish"), blocks_for(ctx, dq_rows * ap.D / (wgmma ? 16 : 4)), 1, 1,
               kBlock, 0, finish);
    return;
  }
  delta = ctx.scratch(query_rows * (q.dtype == DType::F64 ? 8 : 4));
  if (attention_tiled_ok(ap)) {
    const std::string src = attention_source(q.dtype, ap.D, true);
    pass(src, "attention_backward_dq_tiled", attention_tiled_shared(q.dtype, ap.D, 1), tiles(ap.Tq, 64), batch, 128);
    pass(src, "attention_backward_dkdv_tiled", attention_tiled_shared(q.dtype, ap.D, 2), tiles(ap.S, 32), batch, 128);
    return;
  }
  const std::string src = attention_source(q.dtype, ap.D);  // a warp per row, grid-stride over every batch
  pass(src, "attention_backward_dq", 0, blocks_for(ctx, ap.B * ap.Tq, kBlock / 32), 1, kBlock);
  pass(src, "attention_backward_dkdv", 0, blocks_for(ctx, ap.B * ap.S, kBlock / 32), 1, kBlock);
}

std::string attention_unsupported(const Kernel& k) {
  if (k.inputs[0].shape.size() < 2 || k.inputs[0].shape.back() > 256) return "attention with head dim > 256";
  return "";
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  const char* note = "head dim <= 256; tensor cores (bf16 products) under reduced precision for head dims of 16 to 128";
  ops.add(OpId::Attention, kFloatDTypes, {attention_unsupported, attention_op}, note);
  ops.add(OpId::AttentionBackward, kFloatDTypes, {attention_unsupported, attention_backward_op}, note);
  return true;
}();

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    const std::string name(dtype_name(t));
    out.emplace_back("attention " + name + " D=64", attention_source(t, 64));
    out.emplace_back("attention (tiled) " + name + " D=64", attention_source(t, 64, true));
    if (t != DType::F64) {
      out.emplace_back("attention (tensor cores) " + name + " D=64", attention_mma_source(t, t, t, 64));
      out.emplace_back("attention (tensor cores) " + name + " D=128", attention_mma_source(t, t, t, 128));
      if (t != DType::F32)  // autocast's 16-bit operands with the f32 packed output
        out.emplace_back("attention (tensor cores) " + name + " in, f32 out, D=64",
                         attention_mma_source(t, DType::F32, t, 64, 8));
    }
  }
  out.emplace_back("attention wgmma, packed f32 output", attention_wgmma_source(DType::F32, DType::F32));
  out.emplace_back("attention wgmma, bf16 output and gradients", attention_wgmma_source(DType::BF16, DType::BF16));
  out.emplace_back("attention wgmma, packed f32 output, bf16 gradients", attention_wgmma_source(DType::F32, DType::BF16));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
