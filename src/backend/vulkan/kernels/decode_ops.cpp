// The decode ops on Vulkan (include/alk/generate.h; the CPU's kernels_decode.cpp is the
// reference they are tested against):
//   - kv_cache_write: the slots' new rows written at their positions; when the scheduler did
//     not give the output the cache's memory, the cache is copied there first (one copy).
//     A position outside the cache is skipped and reported through IndexErrors, so it
//     raises the CPU's alk::Error at the next read.
//   - decode_attention: one workgroup per (slot, head) of up to 64 lanes (as many as 16 KiB of
//     shared memory holds partial states for); each lane runs an online softmax over the keys
//     t = lane (mod lanes) with its accumulators in registers (head dim
//     a shader constant, at most 256), then the partial states are combined through shared
//     memory. A slot of length 0 gives zeros. On GPUs the keys are also split into parts
//     (decode_parts: flash-decoding), each part's state stored as f32 and the parts combined
//     by a second pass.
//   - sample_tokens: one workgroup of 256 per row. The top-k threshold is the k-th largest
//     logit, found exactly by bisection on the floats' order-preserving bit keys (32
//     counting passes); top-p's threshold likewise on the probabilities' bits (32 mass
//     passes); the inverse CDF in vocabulary order comes from per-invocation chunk sums
//     scanned in shared memory. Probabilities are f32 here (the CPU's f64): a draw can
//     differ only when u lands within rounding of a boundary between two tokens.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/index_errors.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

using kernels::Launch;

std::string header(std::initializer_list<DType> dtypes) {
  std::string s = "#version 450\n";
  bool b16 = false;
  for (DType d : dtypes) b16 = b16 || dtype_size(d) == 2;
  if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  return s;
}

bool is_index(DType d) { return d == DType::I32 || d == DType::I64; }
const char* index_type(DType d) { return d == DType::I64 ? "uvec2" : "uint"; }
// GLSL reading index element `at` of buffer `name` as (lo, hi) words.
std::string read_index(DType d, const std::string& name, const std::string& at) {
  return d == DType::I64 ? name + "[" + at + "]" : "uvec2(" + name + "[" + at + "], int(" + name + "[" + at + "]) < 0 ? 0xffffffffu : 0u)";
}
// The element type a float tensor's buffer is declared with, so arithmetic_glsl's LOAD/STORE apply.
const char* float_type(DType d) {
  switch (d) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    default: return "uint16_t";
  }
}
bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16; }

// ---- kv_cache_write ----
std::string kv_write_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 3) return "kv_cache_write takes cache, rows, positions";
  if (!kernels::is_contiguous(k.inputs[0])) return "kv_cache_write of a strided cache view";
  if (k.inputs[1].dtype != k.output.dtype) return "kv_cache_write rows of another dtype than the cache";
  if (!is_index(k.inputs[2].dtype)) return "positions must be i64 or i32";
  return "";
}

void kv_write_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const ViewArg cache = view_arg(k.inputs[0]), rows = view_arg(k.inputs[1]), pos = view_arg(k.inputs[2]),
                out = view_arg(k.output);
  const int64_t S = cache.shape[0], T = cache.shape[1], Hkv = cache.shape[2], D = cache.shape[3];
  const size_t esize = dtype_size(out.dtype);
  const size_t cache_at = cache.byte_offset + static_cast<size_t>(cache.offset) * esize;
  const size_t out_at = out.byte_offset + static_cast<size_t>(out.offset) * esize;
  if (cache.alloc != out.alloc || cache_at != out_at)
    enc.copy(cache.alloc, cache_at, out.alloc, out_at, static_cast<size_t>(numel(cache.shape)) * esize);
  const int64_t n = S * Hkv * D;
  if (n == 0) return;
  Launch l(ctx);
  const uint32_t rf = l.bind(rows, false), pf = l.bind(pos, false), of = l.bind(out, true);
  l.bind_raw(IndexErrors::of(ctx).binding());
  const std::string op = k.node.name.empty() ? "kv_cache_write" : k.node.name;
  l.u(static_cast<uint64_t>(n));  // 0
  l.u(static_cast<uint64_t>(T));
  l.u(static_cast<uint64_t>(Hkv * D));
  l.u(static_cast<uint64_t>(D));
  l.u(IndexErrors::of(ctx).add(IndexLaunch{op, k.node.loc, T, 1, "position"}, enc));  // 4
  l.u(rf), l.u(pf), l.u(of);                                                          // 5 6 7
  l.i(rows.strides[0]), l.i(rows.strides[1]), l.i(rows.strides[2]), l.i(pos.strides[0]);  // 8..11
  std::string s = header({out.dtype}) + l.preamble();
  const char* st = kernels::storage_type(out.dtype);
  s += "layout(std430, binding = 0) readonly buffer Rows { " + std::string(st) + " rows_[]; };\n";
  s += "layout(std430, binding = 1) readonly buffer Pos { " + std::string(index_type(pos.dtype)) + " pos_[]; };\n";
  s += "layout(std430, binding = 2) buffer Out { " + std::string(st) + " out_[]; };\n";
  s += "layout(std430, binding = 3) buffer Flag { uint flag_[]; };\n";
  s += "void main() {\n  uint n = P(0), T = P(1), HD = P(2), D = P(3);\n  ";
  s += kernels::kLoop;
  s += " {\n"
       "    uint slot = i / HD, r = i % HD, h = r / D, d = r % D;\n"
       "    uvec2 p = " + read_index(pos.dtype, "pos_", "P(6) + uint(int(slot) * PI(11))") + ";\n"
       "    if (p.y != 0u || p.x >= T) {\n"
       "      if (r == 0u && atomicCompSwap(flag_[0], 0u, P(4)) == 0u) { flag_[1] = slot; flag_[2] = p.x; flag_[3] = p.y; }\n"
       "      continue;\n"
       "    }\n"
       "    out_[P(7) + (slot * T + p.x) * HD + r] = rows_[uint(int(P(5)) + int(slot) * PI(8) + int(h) * PI(9) + int(d) * PI(10))];\n"
       "  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

// ---- decode_attention ----
constexpr int64_t kMaxHeadDim = 256;

std::string decode_attention_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 4) return "decode_attention takes q, k_cache, v_cache, lengths";
  const DType t = k.inputs[1].dtype;
  if (!is_float(t) || k.inputs[0].dtype != t || k.inputs[2].dtype != t) return "q and the caches must share a float dtype";
  if (k.output.dtype != t && k.output.dtype != DType::F32) return "decode_attention's output must be f32 or the caches' dtype";
  if (t == DType::F64 && !ctx.info().float64) return ctx.info().name + " has no shaderFloat64";
  if (k.inputs[0].shape[2] > kMaxHeadDim) return "decode_attention with head dim > 256";
  if (!is_index(k.inputs[3].dtype)) return "lengths must be i64 or i32";
  if (!kernels::is_contiguous(k.output)) return "a strided output";
  return "";
}

// Parts each (slot, head)'s keys are split into (flash-decoding): on a GPU one workgroup per
// (slot, head) leaves most of the device idle at small batches (GPT-2 at batch 1: 12 groups on
// 132 SMs), so the cache's rows are cut into parts of at least 256, their partial softmax states
// combined by a second pass. Lengths live on the device (a recorded step replays with new
// ones), so the parts follow the cache's capacity, and a part past a slot's length is empty.
// CPU implementations (lavapipe) run one part. ALK_VK_DECODE_PARTS=n forces n (the tests).
int64_t decode_parts(const Context& ctx, int64_t T, DType t) {
  if (t == DType::F64) return 1;  // partial states are stored as f32
  if (const char* e = std::getenv("ALK_VK_DECODE_PARTS"); e && *e) return std::clamp<int64_t>(std::atoll(e), 1, 64);
  const auto kind = ctx.info().kind;
  if (kind != DeviceInfo::Kind::Discrete && kind != DeviceInfo::Kind::Integrated) return 1;
  return std::clamp<int64_t>(T / 256, 1, 16);
}

void decode_attention_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const ViewArg q = view_arg(k.inputs[0]), kc = view_arg(k.inputs[1]), vc = view_arg(k.inputs[2]),
                len = view_arg(k.inputs[3]), out = view_arg(k.output);
  const int64_t S = q.shape[0], H = q.shape[1], D = q.shape[2], T = kc.shape[1], Hkv = kc.shape[2];
  if (S * H == 0) return;
  const double scale = std::get<AttentionParams>(k.node.params).scale;
  Launch l(ctx);
  const uint32_t qf = l.bind(q, false), kf = l.bind(kc, false), vf = l.bind(vc, false), lf = l.bind(len, false),
                 of = l.bind(out, true);
  const int64_t parts = decode_parts(ctx, T, kc.dtype);
  // Split: each part's (max, sum, unnormalized row) as f32, [S * H * parts, D + 2].
  const size_t partial_bytes = static_cast<size_t>(S * H * parts * (D + 2)) * 4;
  std::shared_ptr<Allocation> partials;
  if (parts > 1) {
    partials = ctx.pool().allocate(partial_bytes);
    l.bind_raw(Binding{partials, 0, partial_bytes, true});
  }
  l.u(static_cast<uint64_t>(H)), l.u(static_cast<uint64_t>(T)), l.u(static_cast<uint64_t>(H / Hkv));  // 0 1 2
  l.u(qf), l.u(kf), l.u(vf), l.u(lf), l.u(of);                                                        // 3..7
  l.i(q.strides[0]), l.i(q.strides[1]), l.i(q.strides[2]);                                          // 8..10
  for (int d = 0; d < 4; ++d) l.i(kc.strides[static_cast<size_t>(d)]);                                // 11..14
  for (int d = 0; d < 4; ++d) l.i(vc.strides[static_cast<size_t>(d)]);                                // 15..18
  l.i(len.strides[0]);                                                                                // 19
  const DType t = kc.dtype;
  std::string s = header({t, out.dtype});
  if (t == DType::F64) s += "#extension GL_ARB_gpu_shader_fp64 : enable\n";
  // Lanes per (slot, head): as many as 16 KiB of shared memory holds partial accumulators for.
  const int64_t acc_bytes = t == DType::F64 ? 8 : 4;
  int64_t lanes = 64;
  while (lanes > 1 && lanes * std::max<int64_t>(D, 1) * acc_bytes > 16384) lanes /= 2;
  s += "layout(local_size_x = " + std::to_string(lanes) + ") in;\n";
  std::string pre = l.preamble();
  pre = pre.substr(pre.find('\n') + 1);  // its own workgroup size, not the preamble's
  s += pre + kernels::arithmetic_glsl(t);
  s += "#define DH " + std::to_string(std::max<int64_t>(D, 1)) + "\n#define NL " + std::to_string(lanes) + "u\n";
  s += "#define PARTS " + std::to_string(parts) + "u\n";
  if (parts > 1) s += "layout(std430, binding = 5) writeonly buffer Part { float part_[]; };\n";
  // The scale to the last bit (the CPU multiplies by it in its accumulation type).
  uint64_t bits = 0;
  std::memcpy(&bits, &scale, 8);
  const float scale_f = static_cast<float>(scale);
  uint32_t fbits = 0;
  std::memcpy(&fbits, &scale_f, 4);
  s += t == DType::F64 ? "#define SCALE packDouble2x32(uvec2(" + std::to_string(static_cast<uint32_t>(bits)) + "u, " +
                             std::to_string(static_cast<uint32_t>(bits >> 32)) + "u))\n"
                       : "#define SCALE uintBitsToFloat(" + std::to_string(fbits) + "u)\n";
  const std::string ft = float_type(t);
  s += "layout(std430, binding = 0) readonly buffer Q { " + ft + " q_[]; };\n";
  s += "layout(std430, binding = 1) readonly buffer K { " + ft + " k_[]; };\n";
  s += "layout(std430, binding = 2) readonly buffer V { " + ft + " v_[]; };\n";
  s += "layout(std430, binding = 3) readonly buffer L { " + std::string(index_type(len.dtype)) + " len_[]; };\n";
  s += "layout(std430, binding = 4) writeonly buffer O { " + std::string(float_type(out.dtype)) + " out_[]; };\n";
  s += "shared ACC sm_[NL], sl_[NL];\nshared ACC sacc_[NL][DH];\n";
  const std::string store = out.dtype == t ? "STORE(v)" : "float(v)";
  s += "void main() {\n"
       "  uint wg = gl_WorkGroupID.x, u = wg / PARTS, part = wg % PARTS, lane = gl_LocalInvocationID.x;\n"
       "  uint H = P(0), T = P(1), slot = u / H, h = u % H, g = h / P(2);\n"
       "  uvec2 lw = " + read_index(len.dtype, "len_", "P(6) + uint(int(slot) * PI(19))") + ";\n"
       "  uint len = lw.y != 0u ? 0u : min(lw.x, T);\n"
       "  uint chunk = (T + PARTS - 1u) / PARTS, first = min(part * chunk, len), end = min(first + chunk, len);\n"
       "  ACC q[DH], acc[DH];\n"
       "  int qo = int(P(3)) + int(slot) * PI(8) + int(h) * PI(9);\n"
       "  for (int d = 0; d < DH; ++d) { q[d] = LOAD(q_[qo + d * PI(10)]); acc[d] = ACC(0); }\n"
       "  ACC m = ACC(-1.0 / 0.0), l = ACC(0);\n"
       "  for (uint t = first + lane; t < end; t += NL) {\n"
       "    int ko = int(P(4)) + int(slot) * PI(11) + int(t) * PI(12) + int(g) * PI(13);\n"
       "    ACC dot = ACC(0);\n"
       "    for (int d = 0; d < DH; ++d) dot += q[d] * LOAD(k_[ko + d * PI(14)]);\n"
       "    ACC sc = dot * ACC(SCALE);\n"
       "    ACC mn = max(m, sc), a = exp(float(m - mn)), p = exp(float(sc - mn));\n"
       "    int vo = int(P(5)) + int(slot) * PI(15) + int(t) * PI(16) + int(g) * PI(17);\n"
       "    for (int d = 0; d < DH; ++d) acc[d] = acc[d] * a + p * LOAD(v_[vo + d * PI(18)]);\n"
       "    l = l * a + p;\n"
       "    m = mn;\n"
       "  }\n"
       "  sm_[lane] = m;\n"
       "  barrier();\n"
       "  ACC mall = ACC(-1.0 / 0.0);\n"
       "  for (uint j = 0u; j < NL; ++j) mall = max(mall, sm_[j]);\n"
       "  ACC w = l == ACC(0) ? ACC(0) : ACC(exp(float(m - mall)));\n"
       "  sl_[lane] = l * w;\n"
       "  for (int d = 0; d < DH; ++d) sacc_[lane][d] = acc[d] * w;\n"
       "  barrier();\n"
       "  ACC total = ACC(0);\n"
       "  for (uint j = 0u; j < NL; ++j) total += sl_[j];\n"
       "  for (uint d = lane; d < uint(DH); d += NL) {\n"
       "    ACC v = ACC(0);\n"
       "    for (uint j = 0u; j < NL; ++j) v += sacc_[j][d];\n";
  if (parts > 1) {
    s += "    part_[wg * uint(DH + 2) + 2u + d] = float(v);\n"
         "  }\n"
         "  if (lane == 0u) { part_[wg * uint(DH + 2)] = float(mall); part_[wg * uint(DH + 2) + 1u] = float(total); }\n"
         "}\n";
  } else {
    s += "    v = total > ACC(0) ? v / total : ACC(0);\n"
         "    out_[P(7) + u * uint(DH) + d] = " + store + ";\n"
         "  }\n}\n";
  }
  l.dispatch(enc, s, static_cast<uint32_t>(S * H * parts));
  if (parts == 1) return;
  // The parts of each (slot, head) combined: rescaled to their common maximum and summed.
  Launch c(ctx);
  c.bind_raw(Binding{partials, 0, partial_bytes, false});
  const uint32_t cf = c.bind(out, true);
  c.u(cf);
  std::string cs = header({out.dtype});
  cs += "layout(local_size_x = 64) in;\n";
  std::string cpre = c.preamble();
  cs += cpre.substr(cpre.find('\n') + 1) + kernels::arithmetic_glsl(t);
  cs += "#define DH " + std::to_string(D) + "u\n#define PARTS " + std::to_string(parts) + "u\n";
  cs += "layout(std430, binding = 0) readonly buffer Part { float part_[]; };\n";
  cs += "layout(std430, binding = 1) writeonly buffer O { " + std::string(float_type(out.dtype)) + " out_[]; };\n";
  cs += "void main() {\n"
        "  uint u = gl_WorkGroupID.x;\n"
        "  float mall = -1.0 / 0.0;\n"
        "  for (uint p = 0u; p < PARTS; ++p) { uint at = (u * PARTS + p) * (DH + 2u); if (part_[at + 1u] > 0.0) mall = max(mall, part_[at]); }\n"
        "  float total = 0.0;\n"
        "  for (uint p = 0u; p < PARTS; ++p) { uint at = (u * PARTS + p) * (DH + 2u); if (part_[at + 1u] > 0.0) total += part_[at + 1u] * exp(part_[at] - mall); }\n"
        "  for (uint d = gl_LocalInvocationID.x; d < DH; d += 64u) {\n"
        "    float v = 0.0;\n"
        "    for (uint p = 0u; p < PARTS; ++p) { uint at = (u * PARTS + p) * (DH + 2u); if (part_[at + 1u] > 0.0) v += part_[at + 2u + d] * exp(part_[at] - mall); }\n"
        "    v = total > 0.0 ? v / total : 0.0;\n"
        "    out_[P(0) + u * DH + d] = " + (out.dtype == t ? std::string("STORE(v)") : std::string("v")) + ";\n"
        "  }\n}\n";
  c.dispatch(enc, cs, static_cast<uint32_t>(S * H));
}

// ---- sample_tokens ----
std::string sample_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() != 4) return "sample_tokens takes logits, settings, seeds, counters";
  if (k.inputs[0].dtype != DType::F32) return "sample_tokens of non-f32 logits on Vulkan";
  if (k.inputs[1].dtype != DType::F32) return "settings must be f32";
  if (k.inputs[2].dtype != DType::I64 || !is_index(k.inputs[3].dtype)) return "seeds must be i64, counters i64 or i32";
  if (!kernels::is_contiguous(k.output)) return "a strided output";
  return "";
}

void sample_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const ViewArg x = view_arg(k.inputs[0]), st = view_arg(k.inputs[1]), seeds = view_arg(k.inputs[2]),
                ctr = view_arg(k.inputs[3]), out = view_arg(k.output);
  const int64_t S = x.shape[0], V = x.shape[1];
  if (S == 0) return;
  Launch l(ctx);
  const uint32_t xf = l.bind(x, false), sf = l.bind(st, false), kf = l.bind(seeds, false), cf = l.bind(ctr, false),
                 of = l.bind(out, true);
  l.u(static_cast<uint64_t>(V));                     // 0
  l.u(xf), l.u(sf), l.u(kf), l.u(cf), l.u(of);       // 1..5
  l.i(x.strides[0]), l.i(x.strides[1]);              // 6 7
  l.i(st.strides[0]), l.i(st.strides[1]);            // 8 9
  l.i(seeds.strides[0]), l.i(ctr.strides[0]);        // 10 11
  std::string s = header({}) + l.preamble();
  s += "layout(std430, binding = 0) readonly buffer X { float x_[]; };\n"
       "layout(std430, binding = 1) readonly buffer St { float st_[]; };\n"
       "layout(std430, binding = 2) readonly buffer Seeds { uvec2 seeds_[]; };\n"
       "layout(std430, binding = 3) readonly buffer Ctr { " + std::string(index_type(ctr.dtype)) + " ctr_[]; };\n"
       "layout(std430, binding = 4) writeonly buffer O { uvec2 out_[]; };\n"
       "shared float sf_[256];\nshared uint su_[256];\n"
       // core/philox.h's Philox4x32-10: word 0 of the block at `ctr` under key `key`.
       "uint philox0(uvec2 ctr, uvec2 key) {\n"
       "  uint c0 = ctr.x, c1 = ctr.y, c2 = 0u, c3 = 0u, k0 = key.x, k1 = key.y;\n"
       "  for (int r = 0; r < 10; ++r) {\n"
       "    uint hi0, lo0, hi1, lo1;\n"
       "    umulExtended(0xD2511F53u, c0, hi0, lo0);\n"
       "    umulExtended(0xCD9E8D57u, c2, hi1, lo1);\n"
       "    uint n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;\n"
       "    c0 = n0; c1 = n1; c2 = n2; c3 = n3;\n"
       "    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;\n"
       "  }\n"
       "  return c0;\n"
       "}\n"
       // Floats in order as unsigned keys (negative values flipped).
       "uint fkey(float f) { uint b = floatBitsToUint(f); return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u; }\n"
       "float funkey(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? k & 0x7fffffffu : ~k); }\n"
       "uint sum_u(uint v) {\n"
       "  uint tid = gl_LocalInvocationID.x;\n"
       "  barrier(); su_[tid] = v; barrier();\n"
       "  for (uint w = 128u; w > 0u; w >>= 1u) { if (tid < w) su_[tid] += su_[tid + w]; barrier(); }\n"
       "  return su_[0];\n"
       "}\n"
       "float sum_f(float v) {\n"
       "  uint tid = gl_LocalInvocationID.x;\n"
       "  barrier(); sf_[tid] = v; barrier();\n"
       "  for (uint w = 128u; w > 0u; w >>= 1u) { if (tid < w) sf_[tid] += sf_[tid + w]; barrier(); }\n"
       "  return sf_[0];\n"
       "}\n"
       "void main() {\n"
       "  uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, V = P(0);\n"
       "  int xo = int(P(1)) + int(row) * PI(6);\n"
       "  #define X(i) x_[xo + int(i) * PI(7)]\n"
       "  int so = int(P(2)) + int(row) * PI(8);\n"
       "  float temp = st_[so], topk = st_[so + PI(9)], topp = st_[so + 2 * PI(9)];\n"
       // The first maximum: (value, index) reduced with the smaller index on ties.
       "  float best = -1.0 / 0.0; uint bi = 0xffffffffu;\n"
       "  for (uint i = tid; i < V; i += 256u) { float v = X(i); if (v > best || bi == 0xffffffffu) { best = v; bi = i; } }\n"
       "  barrier(); sf_[tid] = best; su_[tid] = bi; barrier();\n"
       "  for (uint w = 128u; w > 0u; w >>= 1u) {\n"
       "    if (tid < w) {\n"
       "      float o = sf_[tid + w]; uint oi = su_[tid + w];\n"
       "      if (oi != 0xffffffffu && (su_[tid] == 0xffffffffu || o > sf_[tid] || (o == sf_[tid] && oi < su_[tid]))) { sf_[tid] = o; su_[tid] = oi; }\n"
       "    }\n"
       "    barrier();\n"
       "  }\n"
       "  best = sf_[0]; bi = su_[0];\n"
       "  if (!(temp > 0.0)) { if (tid == 0u) out_[P(5) + row] = uvec2(bi, 0u); return; }\n"
       // top-k: the largest key u with count(key >= u) >= k is the k-th largest logit's.
       "  uint k = uint(topk);\n"
       "  float kth = -1.0 / 0.0;\n"
       "  if (k > 0u && k < V) {\n"
       "    uint lo = 0u, hi = 0xffffffffu;\n"
       "    while (lo < hi) {\n"
       "      uint mid = lo + (hi - lo) / 2u + 1u, c = 0u;\n"
       "      for (uint i = tid; i < V; i += 256u) c += fkey(X(i)) >= mid ? 1u : 0u;\n"
       "      if (sum_u(c) >= k) lo = mid; else hi = mid - 1u;\n"
       "    }\n"
       "    kth = funkey(lo);\n"
       "  }\n"
       "  #define PR(i) (X(i) >= kth ? exp((X(i) - best) / temp) : 0.0)\n"
       "  float part = 0.0;\n"
       "  for (uint i = tid; i < V; i += 256u) part += PR(i);\n"
       "  float total = sum_f(part);\n"
       // top-p: the largest probability p* whose tokens (p >= p*) hold top_p of the mass.
       "  float thr = 0.0;\n"
       "  if (topp < 1.0) {\n"
       "    uint lo = 0u, hi = floatBitsToUint(1.0);\n"
       "    while (lo < hi) {\n"
       "      uint mid = lo + (hi - lo) / 2u + 1u; float m = 0.0;\n"
       "      for (uint i = tid; i < V; i += 256u) { float p = PR(i); m += floatBitsToUint(p) >= mid ? p : 0.0; }\n"
       "      if (sum_f(m) >= topp * total) lo = mid; else hi = mid - 1u;\n"
       "    }\n"
       "    thr = uintBitsToFloat(lo);\n"
       "    part = 0.0;\n"
       "    for (uint i = tid; i < V; i += 256u) { float p = PR(i); part += p >= thr ? p : 0.0; }\n"
       "    total = sum_f(part);\n"
       "  }\n"
       "  #define KEPT(i) (PR(i) >= thr ? PR(i) : 0.0)\n"
       // Each invocation's contiguous chunk, their sums scanned in order.
       "  uint chunk = (V + 255u) / 256u, b = min(tid * chunk, V), e = min(b + chunk, V);\n"
       "  float mine = 0.0; uint last = 0xffffffffu;\n"
       "  for (uint i = b; i < e; ++i) { float p = KEPT(i); mine += p; if (p > 0.0) last = i; }\n"
       "  barrier(); sf_[tid] = mine; su_[tid] = last; barrier();\n"
       "  if (tid == 0u) {\n"
       "    uvec2 key = seeds_[P(3) + uint(int(row) * PI(10))];\n"
       "    uvec2 c = " + read_index(ctr.dtype, "ctr_", "P(4) + uint(int(row) * PI(11))") + ";\n"
       "    float u = float(philox0(c, key) >> 8) * (1.0 / 16777216.0) * total;\n"
       "    uint pick = 0xffffffffu, lastall = 0u;\n"
       "    for (uint j = 0u; j < 256u; ++j) {\n"
       "      if (su_[j] != 0xffffffffu) lastall = su_[j];\n"
       "      if (pick == 0xffffffffu && su_[j] != 0xffffffffu && u < sf_[j]) {\n"
       "        uint jb = min(j * chunk, V), je = min(jb + chunk, V);\n"
       "        for (uint i = jb; i < je && pick == 0xffffffffu; ++i) {\n"
       "          float p = KEPT(i);\n"
       "          if (p <= 0.0) continue;\n"
       "          if (u < p) pick = i; else u -= p;\n"
       "        }\n"
       "      } else if (pick == 0xffffffffu) {\n"
       "        u -= sf_[j];\n"
       "      }\n"
       "    }\n"
       "    out_[P(5) + row] = uvec2(pick == 0xffffffffu ? lastall : pick, 0u);\n"
       "  }\n}\n";
  l.dispatch(enc, s, static_cast<uint32_t>(S));
}

const bool registered = [] {
  template_ops().add(OpId::KvCacheWrite, kFloatDTypes, TemplateOp{kv_write_unsupported, kv_write_launch},
                     "a contiguous cache (rows copied as raw bits)");
  template_ops().add(OpId::DecodeAttention, kFloatDTypes, TemplateOp{decode_attention_unsupported, decode_attention_launch},
                     "head dim <= 256; split over the cache's rows on GPUs; f64 where the device has shaderFloat64");
  template_ops().add(OpId::SampleTokens, kF32DType, TemplateOp{sample_unsupported, sample_launch}, "f32 logits; i64 ids");
  return true;
}();

}  // namespace
}  // namespace alk::vk
