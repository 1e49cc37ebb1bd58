#include "backend/vulkan/kernels/attention.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <variant>
#include <vector>

#include "backend/vulkan/context.h"
#include "backend/vulkan/loader.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"
#include "backend/vulkan/vulkan_device.h"
#include "alk/kernel.h"

namespace alk::vk {

namespace {

constexpr int kRows = 64;           // invocations per workgroup = rows (queries or keys) per block
constexpr int64_t kMaxHeadDim = 256;  // each invocation keeps 2-4 rows of D values in registers
// Shared memory per workgroup: the 16 KiB every Vulkan device offers.
constexpr int64_t kSharedBytes = 16384;

size_t acc_size(DType t) { return t == DType::F64 ? 8 : 4; }

// Rows of a [rows, D] tile pair (plus `extra` scalars per row) that fit the shared budget,
// at most 32 (each invocation keeps one score per row of a tile in registers).
int tile_rows(DType t, int64_t D, int64_t extra) {
  const int64_t per_row = (2 * std::max<int64_t>(D, 1) + extra) * static_cast<int64_t>(acc_size(t));
  return static_cast<int>(std::clamp<int64_t>(kSharedBytes / per_row, 1, 32));
}

std::string elem_type(DType t) {
  switch (t) {
    case DType::F16: return "float16_t";
    case DType::BF16: return "uint16_t";  // bit patterns: the high half of an f32
    case DType::F64: return "double";
    default: return "float";
  }
}

// The part every attention shader shares: storage, conversions, parameters and addressing.
// `tensors` are the read-only inputs in binding order; the output follows them, then the
// batch table. Push constants: the scale (f32 bits, or f64 bits as two words), sizes, the
// output's first element, row and column strides per input.
std::string prelude(DType t, int64_t D, int tile, const std::vector<std::string>& tensors) {
  const bool b16 = t == DType::F16 || t == DType::BF16;
  const std::string E = elem_type(t), A = t == DType::F64 ? "double" : "float";
  const int n = static_cast<int>(tensors.size());
  std::string s = "#version 450\n";
  if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  s += "#extension GL_EXT_control_flow_attributes : require\n";
  s += "// alk fused attention, " + std::string(dtype_name(t)) + ", head size " + std::to_string(D) + "\n";
  s += "layout(local_size_x = " + std::to_string(kRows) + ") in;\n\n";
  s += "#define ACC " + A + "\n";
  s += "const int D = " + std::to_string(D) + ";\n";
  s += "const int ROWS = " + std::to_string(kRows) + ";\n";
  s += "const int TILE = " + std::to_string(tile) + ";\n\n";
  for (int k = 0; k < n; ++k)
    s += "layout(std430, binding = " + std::to_string(k) + ") readonly buffer In" + std::to_string(k) + " { " + E +
         " " + tensors[static_cast<size_t>(k)] + "_data[]; };\n";
  s += "layout(std430, binding = " + std::to_string(n) + ") writeonly buffer Out { " + E + " out_data[]; };\n";
  s += "// Element of batch b's row 0, column 0 of input k (first element included) at [k * B + b].\n";
  s += "layout(std430, binding = " + std::to_string(n + 1) + ") readonly buffer Batches { int batch_first[]; };\n";
  s += "layout(push_constant) uniform Params {\n"
       "  uint scale_lo, scale_hi;  // f32 bits in lo, or f64 bits\n"
       "  int T, S, B, M, causal;\n"
       "  uint out_first;\n"
       "  int rs[" + std::to_string(n) + "], cs[" + std::to_string(n) + "];  // row and column strides per input\n"
       "} p;\n\n";
  // Conversions as macros: with 16-bit storage alone, 16-bit types cannot be function
  // parameters or results.
  switch (t) {
    case DType::F16: s += "#define ld(x) float(x)\n#define st(v) float16_t(v)\n"; break;
    case DType::BF16:
      s += "#define ld(x) uintBitsToFloat(uint(x) << 16)\n"
           "#define st(v) uint16_t(f32_to_bf16(v))\n"
           "// Round to nearest even; NaN stays a (quiet) NaN.\n"
           "uint f32_to_bf16(float v) {\n"
           "  uint b = floatBitsToUint(v);\n"
           "  if (isnan(v)) return (b >> 16) | 0x40u;\n"
           "  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;\n"
           "}\n";
      break;
    default: s += "#define ld(x) (x)\n#define st(v) (v)\n"; break;
  }
  if (t == DType::F64)
    s += "ACC ex(ACC x) { return ACC(exp(float(x))); }\n"
         "ACC lg(ACC x) { return ACC(log(float(x))); }\n"
         "ACC scale_value() { return packDouble2x32(uvec2(p.scale_lo, p.scale_hi)); }\n";
  else
    s += "ACC ex(ACC x) { return exp(x); }\n"
         "ACC lg(ACC x) { return log(x); }\n"
         "ACC scale_value() { return uintBitsToFloat(p.scale_lo); }\n";
  // f32 rows as vec4s (shared_vec4 kernels): 4 elements along a row of input k.
  if (t == DType::F32 && D % 4 == 0)
    for (int k = 0; k < n; ++k) {
      const std::string name = tensors[static_cast<size_t>(k)], ks = std::to_string(k);
      s += "vec4 " + name + "4(int b, int row, int col) {\n  const int a = batch_first[" + ks + " * p.B + b] + row * p.rs[" +
           ks + "] + col * p.cs[" + ks + "];\n  return vec4(" + name + "_data[a], " + name + "_data[a + p.cs[" + ks +
           "]], " + name + "_data[a + 2 * p.cs[" + ks + "]], " + name + "_data[a + 3 * p.cs[" + ks + "]]);\n}\n";
    }
  s += "ACC neg_inf() { return ACC(uintBitsToFloat(0xff800000u)); }\n"
       "// Element (row, col) of batch b of input k.\n"
       "int at(int k, int b, int row, int col) { return batch_first[k * p.B + b] + row * p.rs[k] + col * p.cs[k]; }\n"
       "// Keys [0, key_end(t)) are visible to query t (t + S - T: the causal alignment when S != T).\n"
       "int key_end(int t) { return p.causal != 0 ? clamp(t + p.S - p.T + 1, 0, p.S) : p.S; }\n\n";
  return s;
}

// Loops over the head size unroll on GPUs, so the rows an invocation holds live in
// registers; loops over rows and tiles never do (that only grows the code). CPU
// implementations (lavapipe) gain nothing from registers and take seconds to minutes to
// compile the unrolled loops, so there nothing unrolls.
std::string unroll_policy(std::string s, bool unroll) {
  if (unroll) return s;
  const std::string from = "[[unroll]]", to = "[[dont_unroll]]";
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// Head sizes up to 64 unroll on CPU implementations too: q and o then live in registers
// rather than in arrays read at computed indices (on lavapipe a scalar loop over the SIMD
// lanes per access); fwd + bwd at D 32 took 2/3 of the time (bench/vulkan/NOTES.md).
bool unroll_head_loops_cpu(int64_t D) { return D <= 64; }
bool unroll_head_loops(const Context& ctx, int64_t D) {
  return ctx.info().kind != DeviceInfo::Kind::Cpu || unroll_head_loops_cpu(D);
}

// The kernels' form on a device: CPU implementations take two rows an invocation with rows as
// vec4s (below), GPUs one row an invocation as vec4s (f32; two rows would hold 256 floats of
// q and o at D = 64 and spill: on the H200 GPT-2's attention backward ran 74.8 ms a step so,
// 34.8 with one row as vec4s, 41.7 element by element; the forward 10.2 / 7.7 / 14.0 ms:
// bench/vulkan/NOTES.md). ALK_VK_ATTENTION_FORM overrides for A/B runs: cpu (two rows,
// vec4), vec4 (one row, vec4), gpu (one row, element by element).
std::string attention_form(const Context& ctx) {
  const char* form = std::getenv("ALK_VK_ATTENTION_FORM");
  if (form && (std::string_view(form) == "cpu" || std::string_view(form) == "vec4" || std::string_view(form) == "gpu"))
    return form;
  return ctx.info().kind == DeviceInfo::Kind::Cpu ? "cpu" : "vec4";
}
int rows_per_invocation(const Context& ctx) { return attention_form(ctx) == "cpu" ? 2 : 1; }

// f32, D % 4 == 0 (both forms above but `gpu`): rows in shared memory and registers as
// vec4s. On lavapipe each shared-memory access is a loop over the SIMD lanes whatever its
// width (bench/vulkan/NOTES.md), and the inner loops read a shared row per key and query: a
// vec4 read moves 4 elements for the cost of one; on a GPU, a quarter of the shared-memory
// instructions. ALK_VK_ATTENTION_SCALAR=1: one element each.
bool shared_vec4(const Context& ctx, DType t, int64_t D) {
  return attention_form(ctx) != "gpu" && t == DType::F32 && D % 4 == 0 && D > 0 && !std::getenv("ALK_VK_ATTENTION_SCALAR");
}

// The kernels below hold and move rows in chunks: one element (RT = ACC), or four f32s (RT =
// vec4, shared_vec4). DR chunks per row (DRA as an array size: GLSL has no empty arrays);
// LDR loads chunk c of row `row` of input `name` (binding k); RDOT is a chunk pair's dot
// product; STR stores chunk c at element `at` of the output. One text, both widths.
std::string row_chunks(int64_t D, bool vec4_rows) {
  if (vec4_rows)
    return "#define RT vec4\n"
           "const int DR = D / 4, DRA = D / 4;\n"
           "#define RZERO vec4(0)\n"
           "#define RDOT(a, b) dot(a, b)\n"
           "#define LDR(name, k, b, row, c) name##4(b, row, 4 * (c))\n"
           "#define STR(at, c, x) { const vec4 chunk_ = (x); [[unroll]] for (int q_ = 0; q_ < 4; ++q_) "
           "out_data[(at) + uint(4 * (c) + q_)] = chunk_[q_]; }\n\n";
  return "#define RT ACC\n"
         "const int DR = D, DRA = " + std::to_string(std::max<int64_t>(D, 1)) + ";\n"
         "#define RZERO ACC(0)\n"
         "#define RDOT(a, b) ((a) * (b))\n"
         "#define LDR(name, k, b, row, c) ld(name##_data[at(k, b, row, c)])\n"
         "#define STR(at, c, x) out_data[(at) + uint(c)] = st(x)\n\n";
}

// Forward: workgroup (query block, batch), one invocation per query row.
// Tile-loop pieces every attention kernel variant shares (spliced into their text). The
// workgroup's next key tile, rows [s0, s0 + nj) of k and v, into shared ks / vs:
constexpr const char* kStageKeyRows = R"(    barrier();
    [[dont_unroll]] for (int e = lid; e < TILE * DR; e += ROWS) {
      const int j = e / DR, c = e - j * DR;
      RT kx = RZERO, vx = RZERO;
      if (j < nj) {
        kx = LDR(k, 1, b, s0 + j, c);
        vx = LDR(v, 2, b, s0 + j, c);
      }
      ks[e] = kx;
      vs[e] = vx;
    }
    barrier();
)";
// The next query tile, rows [t0, t0 + ni) of q and dO into shared qs / gs, with each row's
// Di = rowsum(dO * O) and logsumexp:
constexpr const char* kStageQueryRows = R"(    barrier();
    [[dont_unroll]] for (int e = lid; e < TILE * DR; e += ROWS) {
      const int i = e / DR, c = e - i * DR;
      RT qx = RZERO, gx = RZERO;
      if (i < ni) {
        qx = LDR(q, 0, b, t0 + i, c);
        gx = LDR(g, 4, b, t0 + i, c);
      }
      qs[e] = qx;
      gs[e] = gx;
    }
    [[dont_unroll]] for (int i = lid; i < TILE; i += ROWS) {
      ACC di = ACC(0), lse = ACC(0);
      if (i < ni) {
        [[unroll]] for (int c = 0; c < DR; ++c) di += RDOT(LDR(g, 4, b, t0 + i, c), LDR(f, 3, b, t0 + i, c));
        lse = ld(f_data[at(3, b, t0 + i, D)]);
      }
      di_s[i] = di;
      lse_s[i] = lse;
    }
    barrier();
)";

// The forward on CPU implementations: QUERIES adjacent queries an invocation, each key's rows
// of k and v read out of shared memory once for all of them (see dkdv_keys_body).
std::string forward_queries_body(int queries) {
  return "const int QUERIES = " + std::to_string(queries) + ";\n" + R"(shared RT ks[TILE * DRA];
shared RT vs[TILE * DRA];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int t0 = int(gl_WorkGroupID.x) * ROWS * QUERIES;
  const int lid = int(gl_LocalInvocationID.x);
  const ACC scale = scale_value();
  int tq[QUERIES], vis[QUERIES];
  bool live[QUERIES];
  RT q[QUERIES][DRA], o[QUERIES][DRA];
  ACC m[QUERIES], l[QUERIES];
  [[unroll]] for (int i = 0; i < QUERIES; ++i) {
    tq[i] = t0 + lid * QUERIES + i;
    live[i] = tq[i] < p.T;
    vis[i] = live[i] ? key_end(tq[i]) : 0;
    m[i] = neg_inf();
    l[i] = ACC(0);
    [[unroll]] for (int c = 0; c < DR; ++c) {
      q[i][c] = RZERO;
      o[i][c] = RZERO;
      if (live[i]) q[i][c] = LDR(q, 0, b, tq[i], c) * scale;
    }
  }
  // Queries increase with i, and so do the keys they see: the last one's bound is the largest.
  const int last_vis = max(vis[0], vis[QUERIES - 1]);
  const int kend = key_end(min(t0 + ROWS * QUERIES, p.T) - 1);
  [[dont_unroll]] for (int s0 = 0; s0 < kend; s0 += TILE) {
    const int nj = min(TILE, kend - s0);
)" + std::string(kStageKeyRows) + R"(    [[dont_unroll]] for (int j = 0; j < TILE; ++j) {
      if (s0 + j >= last_vis) break;
      RT kr[DRA], vr[DRA];
      ACC sc[QUERIES];
      [[unroll]] for (int i = 0; i < QUERIES; ++i) sc[i] = ACC(0);
      [[unroll]] for (int c = 0; c < DR; ++c) {
        kr[c] = ks[j * DR + c];
        vr[c] = vs[j * DR + c];
        [[unroll]] for (int i = 0; i < QUERIES; ++i) sc[i] += RDOT(q[i][c], kr[c]);
      }
      [[unroll]] for (int i = 0; i < QUERIES; ++i) {
        if (s0 + j >= vis[i]) continue;
        if (sc[i] > m[i]) {
          const ACC alpha = m[i] == neg_inf() ? ACC(0) : ex(m[i] - sc[i]);
          l[i] *= alpha;
          [[unroll]] for (int c = 0; c < DR; ++c) o[i][c] *= alpha;
          m[i] = sc[i];
        }
        const ACC pj = ex(sc[i] - m[i]);
        l[i] += pj;
        [[unroll]] for (int c = 0; c < DR; ++c) o[i][c] += pj * vr[c];
      }
    }
  }
  [[unroll]] for (int i = 0; i < QUERIES; ++i) {
    if (!live[i]) continue;
    const uint row = p.out_first + (uint(b) * uint(p.T) + uint(tq[i])) * uint(D + 1);
    const bool seen = l[i] > ACC(0);
    const ACC inv = seen ? ACC(1) / l[i] : ACC(0);
    [[unroll]] for (int c = 0; c < DR; ++c) STR(row, c, o[i][c] * inv);
    out_data[row + uint(D)] = st(seen ? m[i] + lg(l[i]) : neg_inf());
  }
}
)";
}

std::string forward_source(DType t, int64_t D, bool unroll, bool vec4_rows, int queries) {
  const int tile = tile_rows(t, D, 0);
  std::string s = prelude(t, D, tile, {"q", "k", "v"}) + row_chunks(D, vec4_rows);
  if (queries > 1) return unroll_policy(s + forward_queries_body(queries), unroll);
  s += R"(shared RT ks[TILE * DRA];
shared RT vs[TILE * DRA];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int t0 = int(gl_WorkGroupID.x) * ROWS;
  const int lid = int(gl_LocalInvocationID.x);
  const int t = t0 + lid;
  const bool live = t < p.T;
  const ACC scale = scale_value();
  RT q[DRA], o[DRA];
  [[unroll]] for (int c = 0; c < DR; ++c) {
    q[c] = RZERO;
    o[c] = RZERO;
    if (live) q[c] = LDR(q, 0, b, t, c) * scale;
  }
  ACC m = neg_inf(), l = ACC(0);
  // Keys any row of the block sees (uniform over the workgroup), and this row's own.
  const int kend = key_end(min(t0 + ROWS, p.T) - 1);
  const int vis = live ? key_end(t) : 0;
  [[dont_unroll]] for (int s0 = 0; s0 < kend; s0 += TILE) {
    const int nj = min(TILE, kend - s0);
)" + std::string(kStageKeyRows) + R"(    // Online softmax key by key: the output and sum are rescaled only when the running
    // max grows (no per-tile score array: it would not stay in registers).
    [[dont_unroll]] for (int j = 0; j < TILE; ++j) {
      if (s0 + j >= vis) break;  // vis <= kend: a visible key is a loaded one
      ACC sc = ACC(0);
      [[unroll]] for (int c = 0; c < DR; ++c) sc += RDOT(q[c], ks[j * DR + c]);
      if (sc > m) {
        const ACC alpha = m == neg_inf() ? ACC(0) : ex(m - sc);
        l *= alpha;
        [[unroll]] for (int c = 0; c < DR; ++c) o[c] *= alpha;
        m = sc;
      }
      const ACC pj = ex(sc - m);
      l += pj;
      [[unroll]] for (int c = 0; c < DR; ++c) o[c] += pj * vs[j * DR + c];
    }
  }
  if (!live) return;
  const uint row = p.out_first + (uint(b) * uint(p.T) + uint(t)) * uint(D + 1);
  const bool seen = l > ACC(0);
  const ACC inv = seen ? ACC(1) / l : ACC(0);
  [[unroll]] for (int c = 0; c < DR; ++c) STR(row, c, o[c] * inv);
  out_data[row + uint(D)] = st(seen ? m + lg(l) : neg_inf());
}
)";
  return unroll_policy(s, unroll);
}

// Pass 1 on CPU implementations: KEYS adjacent keys an invocation. A query's row of q and dO
// comes out of shared memory once into the invocation's own arrays and serves all its keys:
// on lavapipe every shared-memory access is a loop over the SIMD lanes (bench/vulkan/NOTES.md),
// so the one-key kernel's two reads of each chunk per key and query were most of its time.
std::string dkdv_keys_body(int keys) {
  return "const int KEYS = " + std::to_string(keys) + ";\n" + R"(shared RT qs[TILE * DRA];
shared RT gs[TILE * DRA];
shared ACC lse_s[TILE];
shared ACC di_s[TILE];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int s_first = int(gl_WorkGroupID.x) * ROWS * KEYS;
  const int lid = int(gl_LocalInvocationID.x);
  const ACC scale = scale_value();
  int sk[KEYS];
  bool live[KEYS];
  RT kr[KEYS][DRA], vr[KEYS][DRA], dk[KEYS][DRA], dv[KEYS][DRA];
  [[unroll]] for (int j = 0; j < KEYS; ++j) {
    sk[j] = s_first + lid * KEYS + j;
    live[j] = sk[j] < p.S;
    [[unroll]] for (int c = 0; c < DR; ++c) {
      kr[j][c] = RZERO;
      vr[j][c] = RZERO;
      dk[j][c] = RZERO;
      dv[j][c] = RZERO;
      if (live[j]) {
        kr[j][c] = LDR(k, 1, b, sk[j], c);
        vr[j][c] = LDR(v, 2, b, sk[j], c);
      }
    }
  }
  const int off = p.S - p.T;
  const int tbegin = s_first >= p.S ? p.T : (p.causal != 0 ? clamp(s_first - off, 0, p.T) : 0);
  [[dont_unroll]] for (int t0 = tbegin; t0 < p.T; t0 += TILE) {
    const int ni = min(TILE, p.T - t0);
)" + std::string(kStageQueryRows) + R"(    [[dont_unroll]] for (int i = 0; i < ni; ++i) {
      // Keys increase with j: where the first is hidden from query t0 + i (or not live), all are.
      const int kend = key_end(t0 + i);
      if (!live[0] || sk[0] >= kend) continue;
      RT qr[DRA], gr[DRA];
      ACC dot_q[KEYS], dot_g[KEYS];
      [[unroll]] for (int j = 0; j < KEYS; ++j) {
        dot_q[j] = ACC(0);
        dot_g[j] = ACC(0);
      }
      [[unroll]] for (int c = 0; c < DR; ++c) {
        qr[c] = qs[i * DR + c];
        gr[c] = gs[i * DR + c];
        [[unroll]] for (int j = 0; j < KEYS; ++j) {
          dot_q[j] += RDOT(qr[c], kr[j][c]);
          dot_g[j] += RDOT(gr[c], vr[j][c]);
        }
      }
      const ACC lse = lse_s[i], di = di_s[i];
      [[unroll]] for (int j = 0; j < KEYS; ++j) {
        const ACC pr = live[j] && sk[j] < kend ? ex(dot_q[j] * scale - lse) : ACC(0);
        const ACC ds = pr * (dot_g[j] - di);
        [[unroll]] for (int c = 0; c < DR; ++c) {
          dv[j][c] += pr * gr[c];
          dk[j][c] += ds * qr[c];
        }
      }
    }
  }
  [[unroll]] for (int j = 0; j < KEYS; ++j) {
    const int s = sk[j];
    if (s >= p.M) continue;
    const uint dk_row = p.out_first + (uint(p.B + b) * uint(p.M) + uint(s)) * uint(D);
    const uint dv_row = p.out_first + (uint(2 * p.B + b) * uint(p.M) + uint(s)) * uint(D);
    [[unroll]] for (int c = 0; c < DR; ++c) {
      STR(dk_row, c, live[j] ? dk[j][c] * scale : RZERO);
      STR(dv_row, c, live[j] ? dv[j][c] : RZERO);
    }
  }
}
)";
}

// Backward pass 1: workgroup (key block, batch), one invocation per key row s; the query
// rows that can see the block stream through shared memory with their lse and
// Di = rowsum(dO * O). dV = sum_t P dO, dK = scale * sum_t dS q with dS = P (dO.v - Di).
// Writes rows [S, M) of dk and dv as zeros.
std::string dkdv_source(DType t, int64_t D, bool unroll, bool vec4_rows, int keys) {
  const int tile = tile_rows(t, D, 2);
  std::string s = prelude(t, D, tile, {"q", "k", "v", "f", "g"}) + row_chunks(D, vec4_rows);
  if (keys > 1) return unroll_policy(s + dkdv_keys_body(keys), unroll);
  s += R"(shared RT qs[TILE * DRA];
shared RT gs[TILE * DRA];
shared ACC lse_s[TILE];
shared ACC di_s[TILE];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int s_first = int(gl_WorkGroupID.x) * ROWS;
  const int lid = int(gl_LocalInvocationID.x);
  const int s = s_first + lid;
  const bool live = s < p.S;
  const ACC scale = scale_value();
  RT kr[DRA], vr[DRA], dk[DRA], dv[DRA];
  [[unroll]] for (int c = 0; c < DR; ++c) {
    kr[c] = RZERO;
    vr[c] = RZERO;
    dk[c] = RZERO;
    dv[c] = RZERO;
    if (live) {
      kr[c] = LDR(k, 1, b, s, c);
      vr[c] = LDR(v, 2, b, s, c);
    }
  }
  // The first query that sees key s is s - (S - T); the block's first key bounds the rows.
  const int off = p.S - p.T;
  const int tbegin = s_first >= p.S ? p.T : (p.causal != 0 ? clamp(s_first - off, 0, p.T) : 0);
  [[dont_unroll]] for (int t0 = tbegin; t0 < p.T; t0 += TILE) {
    const int ni = min(TILE, p.T - t0);
)" + std::string(kStageQueryRows) + R"(    [[dont_unroll]] for (int i = 0; i < ni; ++i) {
      // Hidden keys (and rows that see none, whose lse is -inf) contribute nothing.
      if (!live || s >= key_end(t0 + i)) continue;
      ACC dot_q = ACC(0), dot_g = ACC(0);
      [[unroll]] for (int c = 0; c < DR; ++c) {
        dot_q += RDOT(qs[i * DR + c], kr[c]);
        dot_g += RDOT(gs[i * DR + c], vr[c]);
      }
      const ACC pr = ex(dot_q * scale - lse_s[i]);
      const ACC ds = pr * (dot_g - di_s[i]);
      [[unroll]] for (int c = 0; c < DR; ++c) {
        dv[c] += pr * gs[i * DR + c];
        dk[c] += ds * qs[i * DR + c];
      }
    }
  }
  if (s >= p.M) return;
  const uint dk_row = p.out_first + (uint(p.B + b) * uint(p.M) + uint(s)) * uint(D);
  const uint dv_row = p.out_first + (uint(2 * p.B + b) * uint(p.M) + uint(s)) * uint(D);
  [[unroll]] for (int c = 0; c < DR; ++c) {
    STR(dk_row, c, live ? dk[c] * scale : RZERO);
    STR(dv_row, c, live ? dv[c] : RZERO);
  }
}
)";
  return unroll_policy(s, unroll);
}

// Pass 2 on CPU implementations: QUERIES adjacent queries an invocation, each key's rows of k
// and v read out of shared memory once for all of them (as dkdv_keys_body does for keys).
std::string dq_queries_body(int queries) {
  return "const int QUERIES = " + std::to_string(queries) + ";\n" + R"(shared RT ks[TILE * DRA];
shared RT vs[TILE * DRA];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int t0 = int(gl_WorkGroupID.x) * ROWS * QUERIES;
  const int lid = int(gl_LocalInvocationID.x);
  const ACC scale = scale_value();
  int tq[QUERIES], vis[QUERIES];
  bool live[QUERIES];
  RT qr[QUERIES][DRA], gr[QUERIES][DRA], dq[QUERIES][DRA];
  ACC di[QUERIES], lse[QUERIES];
  [[unroll]] for (int i = 0; i < QUERIES; ++i) {
    tq[i] = t0 + lid * QUERIES + i;
    live[i] = tq[i] < p.T;
    di[i] = ACC(0);
    lse[i] = ACC(0);
    [[unroll]] for (int c = 0; c < DR; ++c) {
      qr[i][c] = RZERO;
      gr[i][c] = RZERO;
      dq[i][c] = RZERO;
      if (live[i]) {
        qr[i][c] = LDR(q, 0, b, tq[i], c);
        gr[i][c] = LDR(g, 4, b, tq[i], c);
        di[i] += RDOT(gr[i][c], LDR(f, 3, b, tq[i], c));
      }
    }
    if (live[i]) lse[i] = ld(f_data[at(3, b, tq[i], D)]);
    vis[i] = live[i] ? key_end(tq[i]) : 0;
  }
  // Queries increase with i, and so do the keys they see: the last one's bound is the largest.
  const int last_vis = max(vis[0], vis[QUERIES - 1]);
  const int kend = t0 < p.T ? key_end(min(t0 + ROWS * QUERIES, p.T) - 1) : 0;
  [[dont_unroll]] for (int s0 = 0; s0 < kend; s0 += TILE) {
    const int nj = min(TILE, kend - s0);
)" + std::string(kStageKeyRows) + R"(    [[dont_unroll]] for (int j = 0; j < TILE; ++j) {
      if (s0 + j >= last_vis) break;
      RT kr[DRA], vr[DRA];
      ACC dot_q[QUERIES], dot_g[QUERIES];
      [[unroll]] for (int i = 0; i < QUERIES; ++i) {
        dot_q[i] = ACC(0);
        dot_g[i] = ACC(0);
      }
      [[unroll]] for (int c = 0; c < DR; ++c) {
        kr[c] = ks[j * DR + c];
        vr[c] = vs[j * DR + c];
        [[unroll]] for (int i = 0; i < QUERIES; ++i) {
          dot_q[i] += RDOT(qr[i][c], kr[c]);
          dot_g[i] += RDOT(gr[i][c], vr[c]);
        }
      }
      [[unroll]] for (int i = 0; i < QUERIES; ++i) {
        const ACC ds = s0 + j < vis[i] ? ex(dot_q[i] * scale - lse[i]) * (dot_g[i] - di[i]) : ACC(0);
        [[unroll]] for (int c = 0; c < DR; ++c) dq[i][c] += ds * kr[c];
      }
    }
  }
  [[unroll]] for (int i = 0; i < QUERIES; ++i) {
    if (tq[i] >= p.M) continue;
    const uint row = p.out_first + (uint(b) * uint(p.M) + uint(tq[i])) * uint(D);
    [[unroll]] for (int c = 0; c < DR; ++c) STR(row, c, live[i] ? dq[i][c] * scale : RZERO);
  }
}
)";
}

// Backward pass 2: workgroup (query block, batch), one invocation per query row t; keys
// stream through shared memory. dQ = scale * sum_s dS k. Writes rows [T, M) as zeros.
std::string dq_source(DType t, int64_t D, bool unroll, bool vec4_rows, int queries) {
  const int tile = tile_rows(t, D, 0);
  std::string s = prelude(t, D, tile, {"q", "k", "v", "f", "g"}) + row_chunks(D, vec4_rows);
  if (queries > 1) return unroll_policy(s + dq_queries_body(queries), unroll);
  s += R"(shared RT ks[TILE * DRA];
shared RT vs[TILE * DRA];

void main() {
  const int b = int(gl_WorkGroupID.y);
  const int t0 = int(gl_WorkGroupID.x) * ROWS;
  const int lid = int(gl_LocalInvocationID.x);
  const int t = t0 + lid;
  const bool live = t < p.T;
  const ACC scale = scale_value();
  RT qr[DRA], gr[DRA], dq[DRA];
  ACC di = ACC(0), lse = ACC(0);
  [[unroll]] for (int c = 0; c < DR; ++c) {
    qr[c] = RZERO;
    gr[c] = RZERO;
    dq[c] = RZERO;
    if (live) {
      qr[c] = LDR(q, 0, b, t, c);
      gr[c] = LDR(g, 4, b, t, c);
      di += RDOT(gr[c], LDR(f, 3, b, t, c));
    }
  }
  if (live) lse = ld(f_data[at(3, b, t, D)]);
  const int kend = t0 < p.T ? key_end(min(t0 + ROWS, p.T) - 1) : 0;
  const int vis = live ? key_end(t) : 0;
  [[dont_unroll]] for (int s0 = 0; s0 < kend; s0 += TILE) {
    const int nj = min(TILE, kend - s0);
)" + std::string(kStageKeyRows) + R"(    [[dont_unroll]] for (int j = 0; j < TILE; ++j) {
      if (s0 + j >= vis) break;
      ACC dot_q = ACC(0), dot_g = ACC(0);
      [[unroll]] for (int c = 0; c < DR; ++c) {
        dot_q += RDOT(qr[c], ks[j * DR + c]);
        dot_g += RDOT(gr[c], vs[j * DR + c]);
      }
      const ACC ds = ex(dot_q * scale - lse) * (dot_g - di);
      [[unroll]] for (int c = 0; c < DR; ++c) dq[c] += ds * ks[j * DR + c];
    }
  }
  if (t >= p.M) return;
  const uint row = p.out_first + (uint(b) * uint(p.M) + uint(t)) * uint(D);
  [[unroll]] for (int c = 0; c < DR; ++c) STR(row, c, live ? dq[c] * scale : RZERO);
}
)";
  return unroll_policy(s, unroll);
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t bytes[4];
  std::memcpy(bytes, &v, 4);
  out.insert(out.end(), bytes, bytes + 4);
}

int32_t to_i32(int64_t v, const char* what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    fail(std::string("attention: ") + what + " beyond 32 bits");
  return static_cast<int32_t>(v);
}

int64_t batch_count(const ViewArg& a) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < a.shape.size(); ++d) n *= a.shape[d];
  return n;
}

// An attention operand: [..., rows, D] with its batch count, bound for reading.
struct Operand {
  BoundView bound;
  int64_t rows = 0, cols = 0;
  const ViewArg* view = nullptr;
};

Operand operand(const Context& ctx, const ViewArg& a, DType dtype, int64_t B, const char* what) {
  if (a.dtype != dtype) fail(std::string("attention: ") + what + " is " + std::string(dtype_name(a.dtype)) + ", not " + std::string(dtype_name(dtype)));
  if (a.shape.size() < 2 || a.strides.size() != a.shape.size()) fail(std::string("attention: ") + what + " has rank < 2");
  if (batch_count(a) != B) fail(std::string("attention: ") + what + "'s batch dims do not match q's");
  Operand o;
  o.bound = bind_view(ctx, a, false);
  o.rows = a.shape[a.shape.size() - 2];
  o.cols = a.shape.back();
  o.view = &a;
  if (o.bound.binding.bytes / dtype_size(dtype) > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail(std::string("attention: ") + what + " spans more than 2^31 elements (32-bit indices)");
  return o;
}

void check_contiguous(const ViewArg& out, const Shape& shape) {
  if (out.shape != shape) fail("attention: the output has shape " + to_string(out.shape) + ", expected " + to_string(shape));
  int64_t expect = 1;
  for (size_t d = out.shape.size(); d-- > 0;) {
    if (out.shape[d] != 1 && out.strides[d] != expect) fail("attention: the output is not contiguous");
    expect *= out.shape[d];
  }
}

// Binds the inputs and the output, uploads the batch table and lays out the push
// constants; the bindings are the shaders' (inputs, output, table).
struct Launch {
  std::vector<Binding> bindings;
  std::vector<uint8_t> push;
};

Launch prepare_launch(Context& ctx, DType dtype, const std::vector<Operand>& in, const ViewArg& out, int64_t B,
                      int64_t T, int64_t S, int64_t M, bool causal, double scale) {
  Launch l;
  std::vector<int32_t> table(in.size() * static_cast<size_t>(B));
  for (size_t k = 0; k < in.size(); ++k) {
    const ViewArg& a = *in[k].view;
    l.bindings.push_back(in[k].bound.binding);
    const size_t r = a.shape.size();
    for (int64_t b = 0; b < B; ++b) {
      int64_t rem = b, off = static_cast<int64_t>(in[k].bound.first);
      for (size_t d = r - 2; d-- > 0;) {
        off += rem % a.shape[d] * a.strides[d];
        rem /= a.shape[d];
      }
      table[k * static_cast<size_t>(B) + static_cast<size_t>(b)] = to_i32(off, "an element offset");
    }
  }
  const BoundView ob = bind_view(ctx, out, true);
  l.bindings.push_back(ob.binding);
  const size_t table_bytes = std::max<size_t>(4, table.size() * 4);
  std::shared_ptr<Allocation> tbuf = ctx.pool().allocate(table_bytes);
  if (!table.empty()) ctx.stream().upload(tbuf, 0, table.data(), table.size() * 4);
  l.bindings.push_back(Binding{tbuf, 0, table_bytes, false});

  uint32_t lo = 0, hi = 0;
  if (dtype == DType::F64) {
    uint64_t bits;
    std::memcpy(&bits, &scale, 8);
    lo = static_cast<uint32_t>(bits), hi = static_cast<uint32_t>(bits >> 32);
  } else {
    const float f = static_cast<float>(scale);
    std::memcpy(&lo, &f, 4);
  }
  put32(l.push, lo);
  put32(l.push, hi);
  for (int64_t v : {T, S, B, M}) put32(l.push, static_cast<uint32_t>(to_i32(v, "a size")));
  put32(l.push, causal ? 1u : 0u);
  put32(l.push, ob.first);
  for (const Operand& o : in) put32(l.push, static_cast<uint32_t>(to_i32(o.view->strides[o.view->shape.size() - 2], "a stride")));
  for (const Operand& o : in) put32(l.push, static_cast<uint32_t>(to_i32(o.view->strides.back(), "a stride")));
  return l;
}

uint32_t push_bytes(size_t inputs) { return static_cast<uint32_t>(4 * (8 + 2 * inputs)); }

uint32_t blocks(int64_t rows) { return static_cast<uint32_t>((rows + kRows - 1) / kRows); }

void check_groups(const Context& ctx, int64_t rows, int64_t B) {
  const DeviceInfo& info = ctx.info();
  if (blocks(rows) > info.max_workgroup_count[0] || static_cast<uint64_t>(B) > info.max_workgroup_count[1])
    fail("attention: " + std::to_string(rows) + " rows x " + std::to_string(B) + " batches exceed the workgroup counts");
}

}  // namespace

std::string attention_unsupported_reason(const Context& ctx, DType dtype, int64_t head_dim) {
  const DeviceInfo& info = ctx.info();
  switch (dtype) {
    case DType::F32: break;
    case DType::F16: case DType::BF16:
      if (!info.storage16) return info.name + " has no 16-bit storage (f16/bf16 tensors)";
      break;
    case DType::F64:
      if (!info.float64) return info.name + " has no shaderFloat64";
      break;
    default: return "attention needs a floating dtype, got " + std::string(dtype_name(dtype));
  }
  if (head_dim > kMaxHeadDim)
    return "head size " + std::to_string(head_dim) + " > " + std::to_string(kMaxHeadDim) + " (the Vulkan kernel keeps rows in registers)";
  if (info.max_storage_buffers_per_stage < 7) return info.name + " offers fewer than 7 storage buffers per stage";
  return "";
}

AttentionForwardKernel::AttentionForwardKernel(Context& ctx, DType dtype, int64_t head_dim)
    : ctx_(ctx), dtype_(dtype), head_dim_(head_dim) {
  if (std::string why = attention_unsupported_reason(ctx, dtype, head_dim); !why.empty())
    fail("attention cannot run on vulkan:" + std::to_string(ctx.info().index) + ": " + why);
  queries_ = rows_per_invocation(ctx);  // forward_queries_body
  source_ = forward_source(dtype, head_dim, unroll_head_loops(ctx, head_dim), shared_vec4(ctx, dtype, head_dim), queries_);
  pipeline_ = &ctx.pipeline(source_, 5, push_bytes(3));
}

void AttentionForwardKernel::launch(Encoder& enc, const ViewArg& q, const ViewArg& k, const ViewArg& v,
                                    const ViewArg& out, bool causal, double scale) const {
  const int64_t B = batch_count(q);
  const Operand oq = operand(ctx_, q, dtype_, B, "q"), ok = operand(ctx_, k, dtype_, B, "k"),
                ov = operand(ctx_, v, dtype_, B, "v");
  const int64_t T = oq.rows, S = ok.rows, D = head_dim_;
  if (oq.cols != D || ok.cols != D || ov.cols != D || ov.rows != S) fail("attention: inconsistent q, k, v shapes");
  if (out.dtype != dtype_) fail("attention: the output has the wrong dtype");
  check_contiguous(out, {B, T, D + 1});
  if (B == 0 || T == 0) return;
  check_groups(ctx_, T, B);
  const Launch l = prepare_launch(ctx_, dtype_, {oq, ok, ov}, out, B, T, S, T, causal, scale);
  enc.dispatch(*pipeline_, l.bindings, l.push, Groups{blocks((T + queries_ - 1) / queries_), static_cast<uint32_t>(B), 1});
}

AttentionBackwardKernel::AttentionBackwardKernel(Context& ctx, DType dtype, int64_t head_dim)
    : ctx_(ctx), dtype_(dtype), head_dim_(head_dim) {
  if (std::string why = attention_unsupported_reason(ctx, dtype, head_dim); !why.empty())
    fail("attention backward cannot run on vulkan:" + std::to_string(ctx.info().index) + ": " + why);
  const bool v4 = shared_vec4(ctx, dtype, head_dim), unroll = unroll_head_loops(ctx, head_dim);
  // Two keys (queries) an invocation on CPU implementations (dkdv_keys_body, dq_queries_body);
  // GPUs keep one (registers).
  keys_ = rows_per_invocation(ctx);
  dkdv_ = &ctx.pipeline(dkdv_source(dtype, head_dim, unroll, v4, keys_), 7, push_bytes(5));
  dq_ = &ctx.pipeline(dq_source(dtype, head_dim, unroll, v4, keys_), 7, push_bytes(5));
}

void AttentionBackwardKernel::launch(Encoder& enc, const ViewArg& q, const ViewArg& k, const ViewArg& v,
                                     const ViewArg& fwd, const ViewArg& d_out, const ViewArg& out, bool causal,
                                     double scale) const {
  const int64_t B = batch_count(q);
  const Operand oq = operand(ctx_, q, dtype_, B, "q"), ok = operand(ctx_, k, dtype_, B, "k"),
                ov = operand(ctx_, v, dtype_, B, "v"), of = operand(ctx_, fwd, dtype_, B, "the forward output"),
                og = operand(ctx_, d_out, dtype_, B, "d_out");
  const int64_t T = oq.rows, S = ok.rows, D = head_dim_, M = std::max(T, S);
  if (oq.cols != D || ok.cols != D || ov.cols != D || ov.rows != S || of.rows != T || of.cols != D + 1 ||
      og.rows != T || og.cols != D)
    fail("attention backward: inconsistent shapes");
  if (out.dtype != dtype_) fail("attention backward: the output has the wrong dtype");
  check_contiguous(out, {3, B, M, D});
  if (B == 0 || M == 0) return;
  check_groups(ctx_, M, B);
  const Launch l = prepare_launch(ctx_, dtype_, {oq, ok, ov, of, og}, out, B, T, S, M, causal, scale);
  // The passes write disjoint rows of the output, but the stream tracks whole ranges and
  // may put a barrier between them; they share the bindings and the batch table.
  enc.dispatch(*dkdv_, l.bindings, l.push, Groups{blocks((M + keys_ - 1) / keys_), static_cast<uint32_t>(B), 1});
  enc.dispatch(*dq_, l.bindings, l.push, Groups{blocks((M + keys_ - 1) / keys_), static_cast<uint32_t>(B), 1});
}

namespace {

// One kernel object per (context, dtype, head size): building one generates the source
// and looks its pipeline up, which launches should not repeat.
template <class K>
const K& cached(Context& ctx, DType dtype, int64_t D) {
  static std::mutex mutex;
  static std::map<std::tuple<const Context*, DType, int64_t>, std::unique_ptr<K>> kernels;
  std::lock_guard lock(mutex);
  auto& slot = kernels[{&ctx, dtype, D}];
  if (!slot) slot = std::make_unique<K>(ctx, dtype, D);
  return *slot;
}

std::string unsupported(const Context& ctx, const Kernel& k) {
  const size_t want = k.op == OpId::Attention ? 3 : 5;
  if (k.inputs.size() != want) return "attention with " + std::to_string(k.inputs.size()) + " inputs";
  if (!std::holds_alternative<AttentionParams>(k.node.params)) return "attention without its parameters";
  if (std::get<AttentionParams>(k.node.params).out_heads)  // made only for devices with "attention_16bit"
    return "attention with its logsumexps apart";
  const KernelArg& q = k.inputs[0];
  if (q.shape.size() < 3) return "attention over q of rank " + std::to_string(q.shape.size()) + " (expected >= 3)";
  for (const KernelArg& a : k.inputs)
    if (a.dtype != q.dtype) return "attention inputs of mixed dtypes";
  if (k.output.dtype != q.dtype) return "attention output of another dtype than its inputs";
  int64_t expect = 1;
  for (size_t d = k.output.shape.size(); d-- > 0;) {
    if (d >= k.output.strides.size()) return "attention output without strides";
    if (k.output.shape[d] != 1 && k.output.strides[d] != expect) return "attention into a non-contiguous output";
    expect *= k.output.shape[d];
  }
  return attention_unsupported_reason(ctx, q.dtype, q.shape.back());
}

void launch_forward(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  const KernelArg& q = k.inputs[0];
  cached<AttentionForwardKernel>(ctx, q.dtype, q.shape.back())
      .launch(enc, view_arg(q), view_arg(k.inputs[1]), view_arg(k.inputs[2]), view_arg(k.output), p.causal, p.scale);
}

void launch_backward(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  const KernelArg& q = k.inputs[0];
  cached<AttentionBackwardKernel>(ctx, q.dtype, q.shape.back())
      .launch(enc, view_arg(q), view_arg(k.inputs[1]), view_arg(k.inputs[2]), view_arg(k.inputs[3]),
              view_arg(k.inputs[4]), view_arg(k.output), p.causal, p.scale);
}

const bool registered = [] {
  template_ops().add(OpId::Attention, kFloatDTypes, TemplateOp{unsupported, launch_forward}, "rows with their logsumexp packed (out_heads 0); f64 where the device has shaderFloat64");
  template_ops().add(OpId::AttentionBackward, kFloatDTypes, TemplateOp{unsupported, launch_backward}, "rows with their logsumexp packed (out_heads 0); f64 where the device has shaderFloat64");
  return true;
}();

}  // namespace

}  // namespace alk::vk
