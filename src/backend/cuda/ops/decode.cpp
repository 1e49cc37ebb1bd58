// The generation engine's ops on CUDA (kernels/decode.cu; include/alk/generate.h states each
// op's contract, the CPU's kernels_decode.cpp is the reference):
//   - kv_cache_write: the slots' new rows at their positions; when the scheduler did not give
//     the output the cache's memory, the cache is copied there first. A position outside the
//     cache is skipped and reported through the index flag (the CPU's alk::Error at the next
//     synchronize).
//   - decode_attention: a block per (slot, head, part) of 16 groups of 8 lanes, a key per group
//     at a time, the parts combined by a second kernel (flash-decoding) when one block per
//     (slot, head) would leave SMs idle. Lengths stay on the device (a recorded step replays
//     with new ones), so the parts follow the cache's capacity; a part past a slot's length is
//     empty.
//   - sample_tokens: a block of 256 per row, probabilities in double as on the CPU.
#include <algorithm>

#include "backend/cuda/ops/index.h"
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

bool is_index(DType t) { return t == DType::I64 || t == DType::I32; }
bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
// The kernels write their results row-major from the output's offset.
bool dense(const KernelArg& a) { return a.strides == contiguous_strides(a.shape); }

constexpr int64_t kMaxHeadDim = 256;
int64_t lane_elements(int64_t D) { return std::max<int64_t>(1, (D + 7) / 8); }

std::string decode_source(DType cache, DType out, DType index, int64_t D, int64_t parts) {
  return kernel_source(defines({{"T", storage(cache)},
                                {"ACC", cache == DType::F64 ? "double" : "float"},
                                {"OUT", storage(out)},
                                {"IDX", storage(index)},
                                {"DPL", std::to_string(lane_elements(D))},
                                {"PARTS", std::to_string(parts)}}),
                       sources::decode);
}

// ---- kv_cache_write ----

struct KvWriteParams {
  int64_t n, Tmax, Hkv, D;
  int64_t rows_offset, rs0, rs1, rs2;
  int64_t pos_offset, pos_stride;
  int64_t out_offset;
  uint64_t launch;
};

std::string kv_write_unsupported(const Kernel& k) {
  if (k.inputs.size() != 3) return "kv_cache_write takes cache, rows, positions";
  if (k.inputs[1].dtype != k.output.dtype) return "kv_cache_write rows of another dtype than the cache";
  if (!is_index(k.inputs[2].dtype)) return "positions must be i64 or i32";
  if (!dense(k.output)) return "a strided output";
  return "";
}

void kv_write_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg cache = arg_of(k.inputs[0]), rows = arg_of(k.inputs[1]), pos = arg_of(k.inputs[2]);
  const Arg whole{out.ptr, out.dtype, out.shape, contiguous_strides(out.shape), out.offset};
  const size_t esize = dtype_size(out.dtype);
  // In place when the output is the cache's memory: only the new rows are written.
  const bool in_place = cache.ptr + static_cast<size_t>(cache.offset) * esize == out.ptr + static_cast<size_t>(out.offset) * esize &&
                        cache.strides == whole.strides;
  if (!in_place) copy_view(ctx, cache, whole);
  KvWriteParams p{};
  p.Tmax = cache.shape[1], p.Hkv = cache.shape[2], p.D = cache.shape[3];
  p.n = cache.shape[0] * p.Hkv * p.D;
  p.rows_offset = rows.offset, p.rs0 = rows.strides[0], p.rs1 = rows.strides[1], p.rs2 = rows.strides[2];
  p.pos_offset = pos.offset, p.pos_stride = pos.strides[0];
  p.out_offset = out.offset;
  p.launch = ctx.add_index_launch({op_name_of(k, "kv_cache_write"), "position", k.node.loc, p.Tmax, 1});
  if (p.n == 0) return;
  Args args;
  args.add(rows.ptr).add(pos.ptr).add(out.ptr).add(ctx.index_flag()).add(p);
  ctx.launch(ctx.function(decode_source(out.dtype, out.dtype, pos.dtype, 1, 1), "kv_cache_write_kernel"),
             blocks_for(ctx, p.n), 1, 1, kBlock, 0, args);
}

// ---- decode_attention ----

template <class Acc>
struct DecodeParams {
  int64_t H, Tmax, group;
  int64_t q_offset, qs0, qs1, qs2;
  int64_t k_offset, ks0, ks1, ks2, ks3;
  int64_t v_offset, vs0, vs1, vs2, vs3;
  int64_t len_offset, len_stride;
  int64_t out_offset;
  int32_t D;
  Acc scale;
};

std::string decode_attention_unsupported(const Kernel& k) {
  if (k.inputs.size() != 4) return "decode_attention takes q, k_cache, v_cache, lengths";
  const DType t = k.inputs[1].dtype;
  if (!is_float(t) || k.inputs[0].dtype != t || k.inputs[2].dtype != t) return "q and the caches must share a float dtype";
  if (k.output.dtype != t && k.output.dtype != DType::F32) return "decode_attention's output must be f32 or the caches' dtype";
  if (k.inputs[0].shape[2] > kMaxHeadDim) return "decode_attention with head dim > 256";
  if (!is_index(k.inputs[3].dtype)) return "lengths must be i64 or i32";
  if (!dense(k.output)) return "a strided output";
  return "";
}

// Key ranges each (slot, head) is split into: enough blocks for two per SM, parts of at
// least 128 rows, at most 32 (the combine pass reads every part's row).
int64_t decode_parts(const Context& ctx, int64_t units, int64_t T, DType t) {
  if (t == DType::F64) return 1;  // parts are stored as f32
  const int64_t sms = std::max(1, ctx.props().multiprocessors);
  const int64_t want = (2 * sms + units - 1) / std::max<int64_t>(1, units);
  return std::clamp<int64_t>(std::min(want, T / 128), 1, 32);
}

template <class Acc>
void decode_attention_launch(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg q = arg_of(k.inputs[0]), kc = arg_of(k.inputs[1]), vc = arg_of(k.inputs[2]), len = arg_of(k.inputs[3]);
  const int64_t S = q.shape[0], H = q.shape[1], D = q.shape[2], T = kc.shape[1], Hkv = kc.shape[2];
  if (S * H == 0) return;
  DecodeParams<Acc> p{};
  p.H = H, p.Tmax = T, p.group = H / Hkv;
  p.q_offset = q.offset, p.qs0 = q.strides[0], p.qs1 = q.strides[1], p.qs2 = q.strides[2];
  p.k_offset = kc.offset, p.ks0 = kc.strides[0], p.ks1 = kc.strides[1], p.ks2 = kc.strides[2], p.ks3 = kc.strides[3];
  p.v_offset = vc.offset, p.vs0 = vc.strides[0], p.vs1 = vc.strides[1], p.vs2 = vc.strides[2], p.vs3 = vc.strides[3];
  p.len_offset = len.offset, p.len_stride = len.strides[0];
  p.out_offset = out.offset;
  p.D = static_cast<int32_t>(D);
  p.scale = static_cast<Acc>(std::get<AttentionParams>(k.node.params).scale);
  const int64_t parts = decode_parts(ctx, S * H, T, kc.dtype);
  const CUdeviceptr partials = parts > 1 ? ctx.scratch(static_cast<size_t>(S * H * parts * (D + 2)) * 4) : 0;
  const std::string src = decode_source(kc.dtype, out.dtype, len.dtype, D, parts);
  Args args;
  args.add(q.ptr).add(kc.ptr).add(vc.ptr).add(len.ptr).add(out.ptr).add(partials).add(p);
  ctx.launch(ctx.function(src, "decode_attention_kernel"), static_cast<unsigned>(S * H), static_cast<unsigned>(parts), 1,
             128, 0, args);
  if (parts == 1) return;
  Args combine;
  combine.add(partials).add(out.ptr).add(out.offset).add(static_cast<int32_t>(D));
  ctx.launch(ctx.function(src, "decode_combine_kernel"), static_cast<unsigned>(S * H), 1, 1, 64, 0, combine);
}

void decode_attention_op(Context& ctx, const Kernel& k, const Arg& out) {
  if (k.inputs[1].dtype == DType::F64)
    decode_attention_launch<double>(ctx, k, out);
  else
    decode_attention_launch<float>(ctx, k, out);
}

// ---- sample_tokens ----

struct SampleParams {
  int64_t V;
  int64_t x_offset, xs0, xs1;
  int64_t st_offset, sts0, sts1;
  int64_t seed_offset, seed_stride;
  int64_t ctr_offset, ctr_stride;
  int64_t out_offset;
};

std::string sample_unsupported(const Kernel& k) {
  if (k.inputs.size() != 4) return "sample_tokens takes logits, settings, seeds, counters";
  if (k.inputs[0].dtype != DType::F32) return "sample_tokens of non-f32 logits on CUDA";
  if (k.inputs[1].dtype != DType::F32) return "settings must be f32";
  if (k.inputs[2].dtype != DType::I64 || !is_index(k.inputs[3].dtype)) return "seeds must be i64, counters i64 or i32";
  if (!dense(k.output)) return "a strided output";
  return "";
}

void sample_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), st = arg_of(k.inputs[1]), seeds = arg_of(k.inputs[2]), ctr = arg_of(k.inputs[3]);
  const int64_t S = x.shape[0];
  if (S == 0) return;
  SampleParams p{};
  p.V = x.shape[1];
  p.x_offset = x.offset, p.xs0 = x.strides[0], p.xs1 = x.strides[1];
  p.st_offset = st.offset, p.sts0 = st.strides[0], p.sts1 = st.strides[1];
  p.seed_offset = seeds.offset, p.seed_stride = seeds.strides[0];
  p.ctr_offset = ctr.offset, p.ctr_stride = ctr.strides[0];
  p.out_offset = out.offset;
  Args args;
  args.add(x.ptr).add(st.ptr).add(seeds.ptr).add(ctr.ptr).add(out.ptr).add(p);
  ctx.launch(ctx.function(decode_source(DType::F32, DType::F32, ctr.dtype, 1, 1), "sample_tokens_kernel"),
             static_cast<unsigned>(S), 1, 1, 256, 0, args);
}

const bool registered = [] {
  TemplateOpTable<TemplateOp>& ops = template_ops();
  ops.add(OpId::KvCacheWrite, kFloatDTypes, {kv_write_unsupported, kv_write_op},
          "only the new rows are written when the result has the cache's memory");
  ops.add(OpId::DecodeAttention, kFloatDTypes, {decode_attention_unsupported, decode_attention_op},
          "head dim <= 256; split over the cache's rows when the slots' heads do not fill the SMs");
  ops.add(OpId::SampleTokens, kF32DType, {sample_unsupported, sample_op}, "f32 logits; i64 ids");
  return true;
}();

void samples(SampleSources& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    out.emplace_back("decode " + std::string(dtype_name(t)) + " (one part)", decode_source(t, t, DType::I64, 64, 1));
  out.emplace_back("decode bf16 -> f32, i32 lengths, split in 8 parts, head dim 128",
                   decode_source(DType::BF16, DType::F32, DType::I32, 128, 8));
  out.emplace_back("decode f16 head dim 256, 4 parts", decode_source(DType::F16, DType::F16, DType::I64, 256, 4));
}
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
