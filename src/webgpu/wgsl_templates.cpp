// WGSL for the template ops, one invocation per output element (or per row where a row is
// the unit of work: softmax, norms, attention). Every number a kernel needs is baked into
// its text (wgsl_templates.h says why). Results follow the CPU kernels' definitions
// (src/backend/cpu/kernels.h); sums run in f32 where the CPU uses f64, hence the parity
// suite's tolerances.
#include "webgpu/wgsl_templates.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "alk/kernel_spec.h"

#include "expr/emit.h"
#include "expr/wgsl_f16.h"

namespace alk::webgpu {

namespace {

constexpr uint32_t kGroup = 64;

[[noreturn]] void bad(const std::string& message) { fail("webgpu export", Loc::current(), message); }

bool is_packed(DType t) { return dtype_size(t) < 4; }
bool is_float(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
// f16 as array<f16> (expr/wgsl_f16.h): same bytes as the packed words.
bool native_f16(DType t) { return t == DType::F16 && expr::WgslNativeF16::active(); }

std::string storage_type(DType t) {
  if (native_f16(t)) return "f16";
  if (is_packed(t)) return "u32";
  return is_float(t) ? "f32" : "i32";
}
std::string wgsl_compute_type(DType t) {
  if (t == DType::Bool) return "bool";
  return is_float(t) ? "f32" : "i32";
}

std::string n(int64_t v) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    bad("a size, stride or offset beyond 32 bits (" + std::to_string(v) + ")");
  return std::to_string(v) + "i";
}
std::string u(int64_t v) {
  if (v < 0 || v > std::numeric_limits<uint32_t>::max())
    bad("a size beyond 32 bits (" + std::to_string(v) + ")");
  return std::to_string(v) + "u";
}
Shape contiguous(const Shape& s) { return contiguous_strides(s); }

// An f32 literal; inf and NaN come from the header's private variables (a constant one is a
// shader-creation error).
std::string f32_literal(double v) {
  if (std::isnan(v)) return "bitcast<f32>(alk_nan_bits)";
  if (std::isinf(v)) return v < 0 ? "(-bitcast<f32>(alk_inf_bits))" : "bitcast<f32>(alk_inf_bits)";
  const std::string t = expr::emit_detail::float_text(std::fabs(v), expr::Type::F32) + "f";
  return v < 0 ? "(-" + t + ")" : t;
}

// A binding declaration.
std::string decl(int b, const std::string& name, DType t, bool write) {
  return "@group(0) @binding(" + std::to_string(b) + ") var<storage, " + (write ? "read_write" : "read") + "> " +
         name + ": array<" + storage_type(t) + ">;\n";
}

// Element `idx` (an i32 expression) of buffer `name`, in its compute type.
std::string ld(const std::string& name, DType t, const std::string& idx) {
  const std::string at = "u32(" + idx + ")";
  if (native_f16(t)) return "f32(" + name + "[" + at + "])";
  switch (t) {
    case DType::F32: case DType::F64: case DType::I32: case DType::I64: return name + "[" + at + "]";
    case DType::Bool: return "(((" + name + "[" + at + " >> 2u] >> ((" + at + " & 3u) * 8u)) & 0xffu) != 0u)";
    case DType::U8: return "i32((" + name + "[" + at + " >> 2u] >> ((" + at + " & 3u) * 8u)) & 0xffu)";
    case DType::F16: return "unpack2x16float((" + name + "[" + at + " >> 1u] >> ((" + at + " & 1u) * 16u)) & 0xffffu).x";
    case DType::BF16: return "bitcast<f32>(((" + name + "[" + at + " >> 1u] >> ((" + at + " & 1u) * 16u)) & 0xffffu) << 16u)";
  }
  return "";
}

void check_output(const Kernel& k, DType t) {
  if (is_packed(t))
    fail(std::string(op_name(k.node.op)), k.node.loc,
         "webgpu export: the WGSL kernel writes 32-bit elements only, not " + std::string(dtype_name(t)));
}
std::string st(const std::string& name, const std::string& idx, const std::string& v) {
  return name + "[u32(" + idx + ")] = " + v + ";";
}

// i32 offset of a view at coordinates `c` (one expression per dim).
std::string off(const TView& v, const std::vector<std::string>& c) {
  std::string s = "(" + n(v.offset);
  for (size_t d = 0; d < c.size() && d < v.shape.size(); ++d)
    if (v.strides[d] != 0 && v.shape[d] != 1) s += " + i32(" + c[d] + ") * " + n(v.strides[d]);
  return s + ")";
}

// Statements unravelling the u32 `i` over `shape` into lets c0..c{R-1} (prefix p).
std::string unravel(const Shape& shape, const std::string& i, const std::string& p) {
  std::string s = "    var " + p + "r = " + i + ";\n";
  for (size_t k = shape.size(); k-- > 0;) {
    s += "    let " + p + std::to_string(k) + " = " + p + "r % " + u(std::max<int64_t>(shape[k], 1)) + "; " + p + "r = " + p +
         "r / " + u(std::max<int64_t>(shape[k], 1)) + ";\n";
  }
  s += "    _ = " + p + "r;\n";
  return s;
}
std::vector<std::string> coords(size_t rank, const std::string& p) {
  std::vector<std::string> c;
  for (size_t k = 0; k < rank; ++k) c.push_back(p + std::to_string(k));
  return c;
}

std::string grid(int64_t count, const std::string& body) {
  return "@compute @workgroup_size(" + std::to_string(kGroup) +
         ")\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
         "  for (var i = gid.x; i < " + u(count) + "; i += nwg.x * " + std::to_string(kGroup) + "u) {\n" + body +
         "  }\n}\n";
}
std::array<uint32_t, 3> groups(int64_t count) {
  const int64_t g = std::clamp<int64_t>((count + kGroup - 1) / kGroup, 1, 65535);
  return {static_cast<uint32_t>(g), 1, 1};
}

// Constant inf/NaN is a WGSL shader-creation error: kernels read them from private
// variables (as the WGSL emitter does), declared in the header of every template kernel.
std::string header(const Kernel& k) {
  return "// alk webgpu: " + std::string(op_name(k.node.op)) + (k.node.name.empty() ? "" : " (" + k.node.name + ")") +
         "\nvar<private> alk_inf_bits: u32 = 0x7f800000u;\nvar<private> alk_nan_bits: u32 = 0x7fc00000u;\n";
}

TemplatePlan one(const Kernel& k, std::string decls, int64_t count, const std::string& body, size_t inputs) {
  TemplatePlan p;
  Pass pass;
  pass.source = header(k) + decls + "\n" + grid(count, body);
  pass.groups = groups(count);
  for (size_t i = 0; i < inputs; ++i) pass.slots.push_back({Slot::Input, static_cast<int>(i)});
  pass.slots.push_back({Slot::Output, 0});
  p.passes.push_back(std::move(pass));
  return p;
}

std::string in_decls(const std::vector<TView>& in) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += decl(static_cast<int>(i), "in" + std::to_string(i), in[i].dtype, false);
  return s;
}

// ---- the op families ----

// A user kernel's WGSL body inside alk's bindings and entry point (alk/kernel_spec.h): the
// tensors from their binding's start, the sizes, attributes and count as params words.
TemplatePlan user_kernel(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<UserKernelParams>(k.node.params);
  const KernelSpec& spec = *p.spec;
  std::vector<const TView*> tensors;
  for (const TView& v : in) tensors.push_back(&v);
  tensors.push_back(&out);
  std::vector<int> ranks;
  Pass pass;
  for (size_t j = 0; j < tensors.size(); ++j) {
    const TView& v = *tensors[j];
    if (v.dtype != DType::F32 && v.dtype != DType::I32)
      fail("user kernel " + spec.name, k.node.loc, "webgpu export: WGSL bodies take f32 and i32 tensors, not ",
           dtype_name(v.dtype));
    if (v.offset != 0 || v.strides != contiguous(v.shape))
      fail("user kernel " + spec.name, k.node.loc, "webgpu export: a tensor that does not start its buffer (a view)");
    ranks.push_back(static_cast<int>(v.shape.size()));
    pass.slots.push_back({j + 1 == tensors.size() ? Slot::Output : Slot::Input, j + 1 == tensors.size() ? 0 : static_cast<int>(j)});
    (void)u(numel(v.shape));  // checks the size fits 32 bits
    pass.params.push_back(static_cast<uint32_t>(numel(v.shape)));
    for (int64_t d : v.shape) pass.params.push_back(static_cast<uint32_t>(d));
  }
  for (size_t j = 0; j < spec.attrs.size(); ++j) {
    if (spec.attrs[j].dtype == DType::F32) {
      const float f = static_cast<float>(p.attrs[j]);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      pass.params.push_back(bits);
    } else if (spec.attrs[j].dtype == DType::I32) {
      pass.params.push_back(static_cast<uint32_t>(static_cast<int32_t>(p.attrs[j])));
    } else {
      fail("user kernel " + spec.name, k.node.loc, "webgpu export: attribute ", spec.attrs[j].name,
           ": WGSL bodies take f32 and i32 attributes");
    }
  }
  (void)u(p.invocations);
  pass.params.push_back(static_cast<uint32_t>(p.invocations));
  pass.source = user_kernel_source(spec, KernelTarget::Wgsl, ranks);
  const int64_t wg = spec.workgroup_size;
  pass.groups = {static_cast<uint32_t>(std::clamp<int64_t>((p.invocations + wg - 1) / wg, 1, 65535)), 1, 1};
  TemplatePlan plan;
  plan.passes.push_back(std::move(pass));
  return plan;
}

TemplatePlan matmul(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const TView &a = in[0], &b = in[1];
  const size_t r = out.shape.size();
  if (r < 2 || a.shape.size() != r || b.shape.size() != r) fail("matmul", k.node.loc, "webgpu export: operand ranks differ");
  const int64_t kk = a.shape[r - 1];
  std::vector<std::string> c = coords(r, "c");
  std::vector<std::string> ca = c, cb = c;
  ca[r - 1] = "0u";
  cb[r - 2] = "0u";
  std::string body = unravel(out.shape, "i", "c");
  body += "    let ao = " + off(a, ca) + ";\n    let bo = " + off(b, cb) + ";\n";
  body += "    var acc = 0.0f;\n    for (var j = 0i; j < " + n(kk) + "; j++) {\n";
  body += "      acc += " + ld("in0", a.dtype, "ao + j * " + n(a.strides[r - 1])) + " * " +
          ld("in1", b.dtype, "bo + j * " + n(b.strides[r - 2])) + ";\n    }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "acc") + "\n";
  return one(k, in_decls(in) + decl(2, "out", out.dtype, true), numel(out.shape), body, 2);
}

// The GEMM: each invocation computes an 8x4 block of one batch entry (8 rows of A against a
// vec4 of B's columns) in registers named one by one, the k loop unrolled by 4. Software
// adapters (SwiftShader: a workgroup barrier costs a coroutine switch, private arrays live
// in memory) ran this 5x faster than 64x64 tiles through workgroup memory; B and the output
// are read/written as vec4 where their layout allows, else element by element.
TemplatePlan matmul_blocked(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  constexpr int64_t RM = 8, KU = 1;
  const TView &a = in[0], &b = in[1];
  const size_t r = out.shape.size();
  const int64_t M = out.shape[r - 2], N = out.shape[r - 1], K = a.shape[r - 1];
  const Shape batch(out.shape.begin(), out.shape.end() - 2);
  const int64_t rb = (M + RM - 1) / RM, cb = (N + 3) / 4, count = numel(batch) * rb * cb;
  const int64_t sa_m = a.strides[r - 2], sa_k = a.strides[r - 1], sb_k = b.strides[r - 2], sb_n = b.strides[r - 1];
  const bool b_half = native_f16(b.dtype);  // f16 rows of B as vec4<f16>, widened to f32
  bool b_vec = (b.dtype == DType::F32 || b_half) && sb_n == 1 && N % 4 == 0 && b.offset % 4 == 0 && sb_k % 4 == 0;
  for (size_t d = 0; d + 2 < r; ++d) b_vec = b_vec && b.strides[d] % 4 == 0;
  const bool o_vec = out.dtype == DType::F32 && N % 4 == 0 && out.offset % 4 == 0;
  std::vector<std::string> c = coords(r - 2, "c");
  c.push_back("0u");
  c.push_back("0u");
  TView o = out;
  o.strides = contiguous(out.shape);
  // One workgroup per (column blocks, row block, batch entry) where the grid allows: the row
  // block then comes from workgroup_id, so A's addresses are uniform across the workgroup and
  // lavapipe loads them once for all lanes instead of gathering lane by lane (2x on Mesa 25).
  // There a lane also takes two vec4 column blocks (lanes apart) when N allows: one A value
  // feeds 8 FMAs, and 16-lane workgroups of 8x8 blocks ran a 1024^3 GEMM 1.4x faster than
  // 64 lanes of 8x4. Lanes past the last column block compute a clamped block, store nothing.
  const int64_t nb = numel(batch);
  const bool grid3 = rb <= 65535 && nb <= 65535;
  const int64_t CV = grid3 && cb >= 16 ? 2 : 1;
  // Lanes per workgroup: the column blocks, at least 8 (lavapipe's SIMD width), at most 64 (16 with CV 2).
  int64_t lanes = 8;
  while (lanes * CV < cb && lanes < (CV == 2 ? 16 : static_cast<int64_t>(kGroup))) lanes *= 2;
  std::string body;
  if (grid3) {
    for (int64_t j = 0; j < CV; ++j) {
      const std::string js = std::to_string(j);
      body += "    let cbr" + js + " = wg.x * " + u(lanes * CV) + " + lid.x + " + u(j * lanes) + ";\n";
      body += "    let cbi" + js + " = min(cbr" + js + ", " + u(cb - 1) + ");\n";
    }
    body += "    let rbi = wg.y;\n    let bi = wg.z;\n" + unravel(batch, "bi", "c");
  } else {
    body = "    let cbi0 = i % " + u(cb) + ";\n    let rbi = (i / " + u(cb) + ") % " + u(rb) + ";\n";
    body += "    let bi = i / " + u(cb * rb) + ";\n" + unravel(batch, "bi", "c");
  }
  body += "    let ao = " + off(a, c) + ";\n    let bo = " + off(b, c) + ";\n    let oo = " + off(o, c) + ";\n";
  body += "    let r0 = rbi * " + u(RM) + ";\n";
  for (int64_t j = 0; j < CV; ++j)
    body += "    let col" + std::to_string(j) + " = cbi" + std::to_string(j) + " * 4u;\n";
  for (int64_t i = 0; i < RM; ++i) {
    const std::string is = std::to_string(i);
    body += "    let ar" + is + " = ao + i32(min(r0 + " + is + "u, " + u(M - 1) + ")) * " + n(sa_m) + ";\n";
    for (int64_t j = 0; j < CV; ++j) body += "    var acc" + is + "_" + std::to_string(j) + " = vec4<f32>();\n";
  }
  // B's row k as a vec4 (columns col..col+3 of block j, zero past N).
  auto brow = [&](const std::string& kk, const std::string& js) {
    const std::string cbi = "cbi" + js, col = "col" + js;
    if (b_vec) {
      const std::string row = "in1[u32(bo + i32(" + kk + ") * " + n(sb_k) + ") / 4u + " + cbi + "]";
      return b_half ? "vec4<f32>(" + row + ")" : row;
    }
    std::string v = "vec4<f32>(";
    for (int j = 0; j < 4; ++j) {
      const std::string cj = col + " + " + std::to_string(j) + "u";
      v += std::string(j ? ", " : "") + "select(0.0f, f32(" +
           ld("in1", b.dtype, "bo + i32(" + kk + ") * " + n(sb_k) + " + i32(min(" + cj + ", " + u(N - 1) + ")) * " + n(sb_n)) +
           "), " + cj + " < " + u(N) + ")";
    }
    return v + ")";
  };
  auto step = [&](const std::string& kk) {
    std::string s;
    for (int64_t j = 0; j < CV; ++j)
      s += "      let bq" + std::to_string(j) + " = " + brow(kk, std::to_string(j)) + ";\n";
    for (int64_t i = 0; i < RM; ++i) {
      const std::string is = std::to_string(i);
      s += "      let a" + is + " = f32(" + ld("in0", a.dtype, "ar" + is + " + i32(" + kk + ") * " + n(sa_k)) + ");\n";
      for (int64_t j = 0; j < CV; ++j)
        s += "      acc" + is + "_" + std::to_string(j) + " += a" + is + " * bq" + std::to_string(j) + ";\n";
    }
    return s;
  };
  const int64_t k4 = K / KU * KU;
  body += "    for (var k = 0u; k < " + u(k4) + "; k += " + u(KU) + ") {\n";
  for (int64_t q = 0; q < KU; ++q) body += "    {\n" + step("k + " + std::to_string(q) + "u") + "    }\n";
  body += "    }\n";
  if (k4 < K) body += "    for (var k = " + u(k4) + "; k < " + u(K) + "; k++) {\n" + step("k") + "    }\n";
  for (int64_t j = 0; j < CV; ++j) {
    const std::string js = std::to_string(j), cbi = "cbi" + js, col = "col" + js;
    if (grid3) body += "    if (cbr" + js + " < " + u(cb) + ") {\n";
    for (int64_t i = 0; i < RM; ++i) {
      const std::string is = std::to_string(i), row = "(r0 + " + is + "u)", acc = "acc" + is + "_" + js;
      body += "    if (" + row + " < " + u(M) + ") {\n";
      if (o_vec) {
        body += "      out[u32(oo + i32(" + row + ") * " + n(N) + ") / 4u + " + cbi + "] = " + acc + ";\n";
      } else {
        for (int q = 0; q < 4; ++q)
          body += "      if (" + col + " + " + std::to_string(q) + "u < " + u(N) + ") { out[u32(oo + i32(" + row +
                  ") * " + n(N) + " + i32(" + col + ") + " + std::to_string(q) + "i)] = " + acc + "[" +
                  std::to_string(q) + "]; }\n";
      }
      body += "    }\n";
    }
    if (grid3) body += "    }\n";
  }
  std::string decls = decl(0, "in0", a.dtype, false);
  decls += b_vec ? std::string("@group(0) @binding(1) var<storage, read> in1: array<vec4<") + (b_half ? "f16" : "f32") +
                       ">>;\n"
                 : decl(1, "in1", b.dtype, false);
  decls += o_vec ? "@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;\n" : decl(2, "out", out.dtype, true);
  if (!grid3) return one(k, decls, count, body, 2);
  TemplatePlan p;
  Pass pass;
  pass.source = header(k) + decls + "\n@compute @workgroup_size(" + std::to_string(lanes) +
                ")\nfn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {\n" +
                body + "}\n";
  pass.groups = {static_cast<uint32_t>((cb + lanes * CV - 1) / (lanes * CV)), static_cast<uint32_t>(rb),
                 static_cast<uint32_t>(nb)};
  pass.slots = {{Slot::Input, 0}, {Slot::Input, 1}, {Slot::Output, 0}};
  p.passes.push_back(std::move(pass));
  return p;
}

TemplatePlan reduce(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<ReduceParams>(k.node.params);
  const Shape& shape = k.node.in_shape;
  const size_t r = shape.size();
  std::vector<bool> reduced(r, false);
  for (int a : p.axes) reduced[static_cast<size_t>(a)] = true;
  Shape kept = shape, red;
  for (size_t d = 0; d < r; ++d)
    if (reduced[d]) {
      kept[d] = 1;
      red.push_back(shape[d]);
    }
  expr::MapSignature sig{"alk_prologue", {}, k.node.dtype};
  for (const TView& v : in) sig.inputs.push_back(v.dtype);
  if (!k.expr) fail("reduce", k.node.loc, "webgpu export: a reduction without its prologue expression");
  const std::string fn = expr::emit_function(*k.expr, sig, expr::Target::Wgsl);
  const std::string ct = wgsl_compute_type(k.node.dtype);
  std::string init, combine;
  const bool fl = ct == "f32";
  switch (p.op) {
    case ReduceOp::Sum: init = fl ? "0.0f" : "0i"; combine = "acc + v"; break;
    case ReduceOp::Prod: init = fl ? "1.0f" : "1i"; combine = "acc * v"; break;
    case ReduceOp::Max: init = fl ? "-bitcast<f32>(alk_inf_bits)" : "-2147483647i - 1i"; combine = "max(acc, v)"; break;
    case ReduceOp::Min: init = fl ? "bitcast<f32>(alk_inf_bits)" : "2147483647i"; combine = "min(acc, v)"; break;
  }
  if (ct == "bool") fail("reduce", k.node.loc, "webgpu export: a bool reduction");
  // NaN propagates through max/min on the CPU; WGSL's max/min may drop it.
  if (fl && (p.op == ReduceOp::Max || p.op == ReduceOp::Min)) combine = "select(" + combine + ", v, v != v)";
  std::string body = unravel(kept, "i", "c");
  body += "    var acc: " + ct + " = " + init + ";\n";
  body += "    for (var j = 0u; j < " + u(numel(red)) + "; j++) {\n";
  body += unravel(red, "j", "q").substr(0);  // q0.. over the reduced dims
  std::vector<std::string> c;
  size_t q = 0;
  for (size_t d = 0; d < r; ++d) c.push_back(reduced[d] ? "q" + std::to_string(q++) : "c" + std::to_string(d));
  std::string args;
  for (size_t i = 0; i < in.size(); ++i) {
    body += "      let a" + std::to_string(i) + " = " + ld("in" + std::to_string(i), in[i].dtype, off(in[i], c)) + ";\n";
    args += (i ? ", a" : "a") + std::to_string(i);
  }
  body += "      let v = alk_prologue(" + args + ");\n      acc = " + combine + ";\n    }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "acc") + "\n";
  const int ib = static_cast<int>(in.size());
  return one(k, in_decls(in) + decl(ib, "out", out.dtype, true) + "\n" + fn + "\n", numel(kept), body, in.size());
}

// Rows along `axis` of x: the invocation unravels its row over the other dims (prefix c)
// and gets `xo` (x's offset of element 0 of the row) and `oo` (the contiguous output's).
std::string row_start(const TView& x, const TView& out, int axis) {
  Shape rows = x.shape;
  rows[static_cast<size_t>(axis)] = 1;
  std::string s = unravel(rows, "i", "c");
  std::vector<std::string> c = coords(rows.size(), "c");
  c[static_cast<size_t>(axis)] = "0u";
  TView o = out;
  o.strides = contiguous(out.shape);
  s += "    let xo = " + off(x, c) + ";\n    let oo = " + off(o, c) + ";\n";
  return s;
}

TemplatePlan softmax(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const int axis = std::get<AxisParams>(k.node.params).axis;
  const TView& x = in[0];
  const int64_t len = x.shape[static_cast<size_t>(axis)], xs = x.strides[static_cast<size_t>(axis)];
  const int64_t os = contiguous(out.shape)[static_cast<size_t>(axis)];
  const bool log = k.node.op == OpId::LogSoftmax;
  std::string body = row_start(x, out, axis);
  auto X = [&](const std::string& j) { return ld("in0", x.dtype, "xo + " + j + " * " + n(xs)); };
  body += "    var m = -bitcast<f32>(alk_inf_bits);\n";
  body += "    for (var j = 0i; j < " + n(len) + "; j++) { m = max(m, " + X("j") + "); }\n";
  body += "    var s = 0.0f;\n";
  body += "    for (var j = 0i; j < " + n(len) + "; j++) { s += exp(" + X("j") + " - m); }\n";
  body += "    let ls = log(s);\n";
  body += "    for (var j = 0i; j < " + n(len) + "; j++) { " +
          st("out", "oo + j * " + n(os), log ? X("j") + " - m - ls" : "exp(" + X("j") + " - m) / s") + " }\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(x.shape) / std::max<int64_t>(len, 1), body, 1);
}

// An unravel function mapping a flat row-major index of v's shape to v's element offset.
std::string flat_fn(const std::string& name, const TView& v) {
  std::string s = "fn " + name + "(f: u32) -> i32 {\n" + unravel(v.shape, "f", "c");
  s += "    return " + off(v, coords(v.shape.size(), "c")) + ";\n}\n";
  return s;
}

TemplatePlan norm(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<NormParams>(k.node.params);
  const bool rms = k.node.op == OpId::RmsNorm;
  const int64_t inner = p.inner, rows = inner > 0 ? numel(in[0].shape) / inner : 0;
  std::string fns = flat_fn("xo", in[0]);
  const bool has_w = in.size() > 1, has_b = !rms && in.size() > 2;
  if (has_w) fns += flat_fn("wo", in[1]);
  if (has_b) fns += flat_fn("bo", in[2]);
  auto X = [&](const std::string& e) { return ld("in0", in[0].dtype, "xo(r0 + " + e + ")"); };
  std::string body = "    let r0 = i * " + u(inner) + ";\n";
  body += "    var s = 0.0f;\n";
  if (!rms) {
    body += "    for (var e = 0u; e < " + u(inner) + "; e++) { s += " + X("e") + "; }\n";
    body += "    let mean = s / f32(" + u(inner) + ");\n    var v = 0.0f;\n";
    body += "    for (var e = 0u; e < " + u(inner) + "; e++) { let d = " + X("e") + " - mean; v += d * d; }\n";
  } else {
    body += "    let mean = 0.0f;\n    var v = 0.0f;\n";
    body += "    for (var e = 0u; e < " + u(inner) + "; e++) { let d = " + X("e") + "; v += d * d; }\n";
  }
  body += "    let rstd = 1.0f / sqrt(v / f32(" + u(inner) + ") + " + expr::emit_detail::float_text(p.eps, expr::Type::F32) +
          "f);\n";
  body += "    for (var e = 0u; e < " + u(inner) + "; e++) {\n      var y = (" + X("e") + " - mean) * rstd;\n";
  if (has_w) body += "      y = y * " + ld("in1", in[1].dtype, "wo(e)") + ";\n";
  if (has_b) body += "      y = y + " + ld("in2", in[2].dtype, "bo(e)") + ";\n";
  body += "      " + st("out", n(out.offset) + " + i32(r0 + e)", "y") + "\n    }\n";
  return one(k, in_decls(in) + decl(static_cast<int>(in.size()), "out", out.dtype, true) + "\n" + fns, rows, body,
             in.size());
}

TemplatePlan layer_norm_backward(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<NormParams>(k.node.params);
  const int64_t inner = p.inner, rows = inner > 0 ? numel(in[0].shape) / inner : 0;
  const std::string fns = flat_fn("xo", in[0]) + flat_fn("wo", in[1]) + flat_fn("go", in[2]);
  const std::string I = u(inner);
  auto X = [&](const std::string& e) { return ld("in0", in[0].dtype, "xo(r0 + " + e + ")"); };
  auto W = [&](const std::string& e) { return ld("in1", in[1].dtype, "wo(" + e + ")"); };
  auto G = [&](const std::string& e) { return ld("in2", in[2].dtype, "go(r0 + " + e + ")"); };
  TemplatePlan plan;
  plan.temps.push_back({DType::F32, std::max<int64_t>(2 * rows, 1)});
  // Pass 1, per row: the statistics (kept for pass 2) and dx.
  std::string b1 = "    let r0 = i * " + I + ";\n    var s = 0.0f;\n";
  b1 += "    for (var e = 0u; e < " + I + "; e++) { s += " + X("e") + "; }\n";
  b1 += "    let mean = s / f32(" + I + ");\n    var v = 0.0f;\n";
  b1 += "    for (var e = 0u; e < " + I + "; e++) { let d = " + X("e") + " - mean; v += d * d; }\n";
  b1 += "    let rstd = 1.0f / sqrt(v / f32(" + I + ") + " + expr::emit_detail::float_text(p.eps, expr::Type::F32) + "f);\n";
  b1 += "    stats[2u * i] = mean;\n    stats[2u * i + 1u] = rstd;\n";
  b1 += "    var mg = 0.0f;\n    var mgx = 0.0f;\n";
  b1 += "    for (var e = 0u; e < " + I + "; e++) { let gx = " + G("e") + " * " + W("e") + "; mg += gx; mgx += gx * (" + X("e") +
        " - mean) * rstd; }\n";
  b1 += "    mg = mg / f32(" + I + ");\n    mgx = mgx / f32(" + I + ");\n";
  b1 += "    for (var e = 0u; e < " + I + "; e++) {\n      let xh = (" + X("e") + " - mean) * rstd;\n";
  b1 += "      " + st("out", n(out.offset) + " + i32(r0 + e)", "rstd * (" + G("e") + " * " + W("e") + " - mg - xh * mgx)") +
        "\n    }\n";
  Pass p1;
  p1.source = header(k) + in_decls(in) + decl(3, "stats", DType::F32, true) + decl(4, "out", out.dtype, true) + "\n" + fns +
              "\n" + grid(rows, b1);
  p1.groups = groups(rows);
  p1.slots = {{Slot::Input, 0}, {Slot::Input, 1}, {Slot::Input, 2}, {Slot::Temp, 0}, {Slot::Output, 0}};
  // Pass 2, per column: dweight and dbias summed over rows in order.
  std::string b2 = "    var dw = 0.0f;\n    var db = 0.0f;\n";
  b2 += "    for (var r = 0u; r < " + u(rows) + "; r++) {\n      let r0 = r * " + I + ";\n";
  b2 += "      let g = " + G("i") + ";\n      dw += g * (" + X("i") + " - stats[2u * r]) * stats[2u * r + 1u];\n      db += g;\n    }\n";
  b2 += "    " + st("out", n(out.offset) + " + i32(" + u(rows) + " * " + I + " + i)", "dw") + "\n";
  b2 += "    " + st("out", n(out.offset) + " + i32(" + u(rows + 1) + " * " + I + " + i)", "db") + "\n";
  Pass p2;
  std::string d2 = decl(0, "in0", in[0].dtype, false) + decl(2, "in2", in[2].dtype, false) +
                   "@group(0) @binding(3) var<storage, read> stats: array<f32>;\n" + decl(4, "out", out.dtype, true);
  // Binding 1 (the weight) is unused by pass 2: its slot list skips it.
  d2.replace(d2.find("@binding(2)"), 11, "@binding(1)");
  d2.replace(d2.find("@binding(3)"), 11, "@binding(2)");
  d2.replace(d2.find("@binding(4)"), 11, "@binding(3)");
  p2.source = header(k) + d2 + "\n" + flat_fn("xo", in[0]) + flat_fn("go", in[2]) + "\n" + grid(inner, b2);
  p2.groups = groups(inner);
  p2.slots = {{Slot::Input, 0}, {Slot::Input, 2}, {Slot::Temp, 0}, {Slot::Output, 0}};
  plan.passes = {std::move(p1), std::move(p2)};
  return plan;
}

TemplatePlan index_select(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const TView &x = in[0], &idx = in[1];
  const size_t r = out.shape.size(), d = static_cast<size_t>(dim);
  std::vector<std::string> c = coords(r, "c");
  std::string body = unravel(out.shape, "i", "c");
  body += "    let id = clamp(" + ld("in1", idx.dtype, off(idx, {c[d]})) + ", 0i, " + n(x.shape[d] - 1) + ");\n";
  c[d] = "u32(id)";
  body += "    " + st("out", n(out.offset) + " + i32(i)", ld("in0", x.dtype, off(x, c))) + "\n";
  return one(k, in_decls(in) + decl(2, "out", out.dtype, true), numel(out.shape), body, 2);
}

TemplatePlan gather(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const TView &x = in[0], &idx = in[1];
  const size_t r = out.shape.size(), d = static_cast<size_t>(dim);
  std::vector<std::string> c = coords(r, "c");
  std::string body = unravel(out.shape, "i", "c");
  body += "    let id = clamp(" + ld("in1", idx.dtype, off(idx, c)) + ", 0i, " + n(x.shape[d] - 1) + ");\n";
  c[d] = "u32(id)";
  body += "    " + st("out", n(out.offset) + " + i32(i)", ld("in0", x.dtype, off(x, c))) + "\n";
  return one(k, in_decls(in) + decl(2, "out", out.dtype, true), numel(out.shape), body, 2);
}

TemplatePlan scatter_add(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const TView &x = in[0], &idx = in[1], &src = in[2];
  const size_t r = out.shape.size(), d = static_cast<size_t>(dim);
  std::vector<std::string> c = coords(r, "c");
  std::string body = unravel(out.shape, "i", "c");
  body += "    var v = " + ld("in0", x.dtype, off(x, c)) + ";\n";
  std::string inside = "true";
  for (size_t e = 0; e < r; ++e)
    if (e != d) inside += " && c" + std::to_string(e) + " < " + u(idx.shape[e]);
  body += "    if (" + inside + ") {\n      for (var j = 0u; j < " + u(idx.shape[d]) + "; j++) {\n";
  std::vector<std::string> cj = c;
  cj[d] = "j";
  body += "        if (" + ld("in1", idx.dtype, off(idx, cj)) + " == i32(c" + std::to_string(d) + ")) { v += " +
          ld("in2", src.dtype, off(src, cj)) + "; }\n      }\n    }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(3, "out", out.dtype, true), numel(out.shape), body, 3);
}

TemplatePlan one_hot(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const size_t r = out.shape.size();
  std::string body = unravel(out.shape, "i", "c");
  std::vector<std::string> c = coords(r - 1, "c");
  const std::string ct = wgsl_compute_type(out.dtype);
  body += "    let hit = " + ld("in0", in[0].dtype, off(in[0], c)) + " == i32(c" + std::to_string(r - 1) + ");\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "select(" + ct + "(0), " + ct + "(1), hit)") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

TemplatePlan tri(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<TriParams>(k.node.params);
  const size_t r = out.shape.size();
  std::string body = unravel(out.shape, "i", "c");
  const std::string diff = "(i32(c" + std::to_string(r - 1) + ") - i32(c" + std::to_string(r - 2) + "))";
  const std::string keep = p.upper ? diff + " >= " + n(p.k) : diff + " <= " + n(p.k);
  const std::string ct = wgsl_compute_type(out.dtype);
  body += "    " + st("out", n(out.offset) + " + i32(i)",
                      "select(" + ct + "(0), " + ld("in0", in[0].dtype, off(in[0], coords(r, "c"))) + ", " + keep + ")") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

TemplatePlan cumsum(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const TView& x = in[0];
  const size_t a = static_cast<size_t>(p.axis);
  const int64_t len = x.shape[a];
  std::string body = row_start(x, out, p.axis);
  const std::string j = p.flag ? "(" + n(len - 1) + " - t)" : "t";
  body += "    var s: " + wgsl_compute_type(out.dtype) + " = " + wgsl_compute_type(out.dtype) + "(0);\n";
  body += "    for (var t = 0i; t < " + n(len) + "; t++) {\n      s += " + ld("in0", x.dtype, "xo + " + j + " * " + n(x.strides[a])) +
          ";\n      " + st("out", "oo + " + j + " * " + n(contiguous(out.shape)[a]), "s") + "\n    }\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(x.shape) / std::max<int64_t>(len, 1), body, 1);
}

TemplatePlan argreduce(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const TView& x = in[0];
  const size_t a = static_cast<size_t>(p.axis);
  const int64_t len = x.shape[a];
  std::string body = row_start(x, out, p.axis);
  auto X = [&](const std::string& j) { return ld("in0", x.dtype, "xo + " + j + " * " + n(x.strides[a])); };
  body += "    var best = " + X("0i") + ";\n    var at = 0i;\n";
  body += "    for (var t = 1i; t < " + n(len) + "; t++) {\n      let v = " + X("t") + ";\n";
  body += "      if (best == best && (v != v || v " + std::string(p.flag ? ">" : "<") + " best)) { best = v; at = t; }\n    }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "at") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(x.shape) / std::max<int64_t>(len, 1), body, 1);
}

TemplatePlan pad(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<PadParams>(k.node.params);
  const size_t r = out.shape.size();
  std::string body = unravel(out.shape, "i", "c");
  std::string inside = "true";
  std::vector<std::string> c;
  for (size_t d = 0; d < r; ++d) {
    const std::string s = "(i32(c" + std::to_string(d) + ") - " + n(p.pads[2 * d]) + ")";
    body += "    let s" + std::to_string(d) + " = " + s + ";\n";
    inside += " && s" + std::to_string(d) + " >= 0i && s" + std::to_string(d) + " < " + n(in[0].shape[d]);
    c.push_back("max(s" + std::to_string(d) + ", 0i)");
  }
  const std::string ct = wgsl_compute_type(out.dtype);
  const std::string value = ct == "f32" ? f32_literal(p.value) : "(" + std::to_string(static_cast<int64_t>(p.value)) + "i)";
  body += "    var v: " + ct + " = " + value + ";\n    if (" + inside + ") { v = " + ld("in0", in[0].dtype, off(in[0], c)) + "; }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

TemplatePlan concat(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const size_t d = static_cast<size_t>(std::get<IndexParams>(k.node.params).dim), r = out.shape.size();
  std::string body = unravel(out.shape, "i", "c");
  body += "    var v: " + wgsl_compute_type(out.dtype) + ";\n";
  int64_t start = 0;
  for (size_t j = 0; j < in.size(); ++j) {
    std::vector<std::string> c = coords(r, "c");
    c[d] = "(c" + std::to_string(d) + " - " + u(start) + ")";
    const int64_t end = start + in[j].shape[d];
    body += std::string(j ? "    else " : "    ") + "if (c" + std::to_string(d) + " < " + u(end) + ") { v = " +
            ld("in" + std::to_string(j), in[j].dtype, off(in[j], c)) + "; }\n";
    start = end;
  }
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(static_cast<int>(in.size()), "out", out.dtype, true), numel(out.shape), body, in.size());
}

TemplatePlan slice_scatter(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<SliceScatterParams>(k.node.params);
  const size_t d = static_cast<size_t>(p.dim), r = out.shape.size();
  std::string body = unravel(out.shape, "i", "c");
  body += "    let t = i32(c" + std::to_string(d) + ") - " + n(p.start) + ";\n";
  body += "    let hit = t >= 0i && t % " + n(p.step) + " == 0i && t / " + n(p.step) + " < " + n(in[0].shape[d]) + ";\n";
  std::vector<std::string> c = coords(r, "c");
  c[d] = "u32(max(t, 0i) / " + n(p.step) + ")";
  const std::string ct = wgsl_compute_type(out.dtype);
  body += "    var v: " + ct + " = " + ct + "(0);\n    if (hit) { v = " + ld("in0", in[0].dtype, off(in[0], c)) + "; }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

// Attention over flattened batch dims: q [B.., T, D], k/v [B.., S, D].
struct AttnShape {
  Shape batch;
  int64_t T, S, D;
};
AttnShape attn_shape(const std::vector<TView>& in) {
  const Shape& q = in[0].shape;
  const Shape& kk = in[1].shape;
  AttnShape s;
  s.batch.assign(q.begin(), q.end() - 2);
  s.T = q[q.size() - 2];
  s.D = q.back();
  s.S = kk[kk.size() - 2];
  return s;
}
// Offset of row `row` (an i32 expression) of view v in batch coordinates b0.. (q, k, v keep
// their batch dims; the packed forward output and the output gradient are [B, rows, D] with
// the batch flattened: batch index bi).
std::string attn_row(const TView& v, size_t nb, const std::string& row) {
  if (v.shape.size() != nb + 2) {
    TView w = v;
    return "(" + off(w, {"bi", "0u", "0u"}) + " + (" + row + ") * " + n(v.strides[1]) + ")";
  }
  std::vector<std::string> c = coords(nb, "b");
  c.push_back("0u");
  c.push_back("0u");
  return "(" + off(v, c) + " + (" + row + ") * " + n(v.strides[nb]) + ")";
}

TemplatePlan attention_forward(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  check(p.out_heads == 0, "scaled_dot_product_attention", k.node.loc, "the WGSL kernels pack each row's logsumexp");
  const AttnShape a = attn_shape(in);
  const size_t nb = a.batch.size();
  const std::string D = n(a.D);
  auto el = [&](int t, const std::string& base, const std::string& d) {
    return ld("in" + std::to_string(t), in[static_cast<size_t>(t)].dtype,
              base + " + " + d + " * " + n(in[static_cast<size_t>(t)].strides.back()));
  };
  std::string body = "    let bi = i / " + u(a.T) + ";\n    let t = i32(i % " + u(a.T) + ");\n" + unravel(a.batch, "bi", "b");
  body += "    let qo = " + attn_row(in[0], nb, "t") + ";\n";
  body += "    var q: array<f32, " + std::to_string(a.D) + ">;\n    var acc: array<f32, " + std::to_string(a.D) + ">;\n";
  body += "    for (var d = 0i; d < " + D + "; d++) { q[d] = " + el(0, "qo", "d") + "; acc[d] = 0.0f; }\n";
  body += "    var m = -3.0e38f;\n    var l = 0.0f;\n";
  const std::string last = p.causal ? "min(" + n(a.S) + ", t + " + n(a.S - a.T) + " + 1i)" : n(a.S);
  body += "    for (var s = 0i; s < " + last + "; s++) {\n";
  body += "      let ko = " + attn_row(in[1], nb, "s") + ";\n      let vo = " + attn_row(in[2], nb, "s") + ";\n";
  body += "      var dot = 0.0f;\n      for (var d = 0i; d < " + D + "; d++) { dot += q[d] * " + el(1, "ko", "d") + "; }\n";
  body += "      let sc = dot * " + expr::emit_detail::float_text(p.scale, expr::Type::F32) + "f;\n";
  body += "      let mn = max(m, sc);\n      let corr = exp(m - mn);\n      let w = exp(sc - mn);\n      l = l * corr + w;\n";
  body += "      for (var d = 0i; d < " + D + "; d++) { acc[d] = acc[d] * corr + w * " + el(2, "vo", "d") + "; }\n      m = mn;\n    }\n";
  body += "    let oo = " + n(out.offset) + " + i32(i) * " + n(a.D + 1) + ";\n";
  body += "    let inv = select(0.0f, 1.0f / l, l > 0.0f);\n";
  body += "    for (var d = 0i; d < " + D + "; d++) { out[u32(oo + d)] = acc[d] * inv; }\n";
  body += "    out[u32(oo + " + D + ")] = m + log(l);\n";
  return one(k, in_decls(in) + decl(3, "out", out.dtype, true), numel(a.batch) * a.T, body, 3);
}

TemplatePlan attention_backward(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  check(p.out_heads == 0, "scaled_dot_product_attention", k.node.loc, "the WGSL kernels pack each row's logsumexp");
  const AttnShape a = attn_shape(in);
  const size_t nb = a.batch.size();
  const int64_t R = std::max(a.T, a.S), B = numel(a.batch);
  const std::string D = n(a.D), scale = expr::emit_detail::float_text(p.scale, expr::Type::F32) + "f";
  auto el = [&](int t, const std::string& base, const std::string& d) {
    return ld("in" + std::to_string(t), in[static_cast<size_t>(t)].dtype,
              base + " + " + d + " * " + n(in[static_cast<size_t>(t)].strides.back()));
  };
  const std::string decls = in_decls(in) + decl(5, "out", out.dtype, true);
  // Row t of q, o (the forward's output) and do, and its lse and Di = do . o.
  auto row_t = [&](const std::string& t) {
    std::string s = "      let qo = " + attn_row(in[0], nb, t) + ";\n      let fo = " + attn_row(in[3], nb, t) + ";\n";
    s += "      let go = " + attn_row(in[4], nb, t) + ";\n";
    s += "      let lse = " + el(3, "fo", D) + ";\n";
    s += "      var di = 0.0f;\n      for (var d = 0i; d < " + D + "; d++) { di += " + el(4, "go", "d") + " * " + el(3, "fo", "d") + "; }\n";
    return s;
  };
  std::string head = "    let bi = i / " + u(R) + ";\n    let r = i32(i % " + u(R) + ");\n" + unravel(a.batch, "bi", "b");
  auto out_row = [&](int which) {
    return n(out.offset) + " + ((" + n(which) + " * " + n(B) + " + i32(bi)) * " + n(R) + " + r) * " + D;
  };
  // Pass 1: dq, one invocation per query row.
  std::string b1 = head + "    let oq = " + out_row(0) + ";\n    var dq: array<f32, " + std::to_string(a.D) + ">;\n";
  b1 += "    for (var d = 0i; d < " + D + "; d++) { dq[d] = 0.0f; }\n";
  b1 += "    if (r < " + n(a.T) + ") {\n      let t = r;\n" + row_t("t");
  const std::string last = p.causal ? "min(" + n(a.S) + ", t + " + n(a.S - a.T) + " + 1i)" : n(a.S);
  b1 += "      for (var s = 0i; s < " + last + "; s++) {\n";
  b1 += "        let ko = " + attn_row(in[1], nb, "s") + ";\n        let vo = " + attn_row(in[2], nb, "s") + ";\n";
  b1 += "        var sc = 0.0f;\n        var dp = 0.0f;\n";
  b1 += "        for (var d = 0i; d < " + D + "; d++) { sc += " + el(0, "qo", "d") + " * " + el(1, "ko", "d") + "; dp += " +
        el(4, "go", "d") + " * " + el(2, "vo", "d") + "; }\n";
  b1 += "        let pr = exp(sc * " + scale + " - lse);\n        let ds = pr * (dp - di);\n";
  b1 += "        for (var d = 0i; d < " + D + "; d++) { dq[d] += ds * " + el(1, "ko", "d") + "; }\n      }\n    }\n";
  b1 += "    for (var d = 0i; d < " + D + "; d++) { out[u32(oq + d)] = dq[d] * " + scale + "; }\n";
  // Pass 2: dk and dv, one invocation per key row.
  std::string b2 = head + "    let ok = " + out_row(1) + ";\n    let ov = " + out_row(2) + ";\n";
  b2 += "    var dk: array<f32, " + std::to_string(a.D) + ">;\n    var dv: array<f32, " + std::to_string(a.D) + ">;\n";
  b2 += "    for (var d = 0i; d < " + D + "; d++) { dk[d] = 0.0f; dv[d] = 0.0f; }\n";
  b2 += "    if (r < " + n(a.S) + ") {\n      let s = r;\n";
  b2 += "      let ko = " + attn_row(in[1], nb, "s") + ";\n      let vo = " + attn_row(in[2], nb, "s") + ";\n";
  const std::string first = p.causal ? "max(0i, s - " + n(a.S - a.T) + ")" : "0i";
  b2 += "      for (var t = " + first + "; t < " + n(a.T) + "; t++) {\n" + row_t("t");
  b2 += "        var sc = 0.0f;\n        var dp = 0.0f;\n";
  b2 += "        for (var d = 0i; d < " + D + "; d++) { sc += " + el(0, "qo", "d") + " * " + el(1, "ko", "d") + "; dp += " +
        el(4, "go", "d") + " * " + el(2, "vo", "d") + "; }\n";
  b2 += "        let pr = exp(sc * " + scale + " - lse);\n        let ds = pr * (dp - di);\n";
  b2 += "        for (var d = 0i; d < " + D + "; d++) { dv[d] += pr * " + el(4, "go", "d") + "; dk[d] += ds * " + el(0, "qo", "d") +
        "; }\n      }\n    }\n";
  b2 += "    for (var d = 0i; d < " + D + "; d++) { out[u32(ok + d)] = dk[d] * " + scale + "; out[u32(ov + d)] = dv[d]; }\n";
  TemplatePlan plan;
  for (const std::string* b : {&b1, &b2}) {
    Pass ps;
    ps.source = header(k) + decls + "\n" + grid(B * R, *b);
    ps.groups = groups(B * R);
    for (int i = 0; i < 5; ++i) ps.slots.push_back({Slot::Input, i});
    ps.slots.push_back({Slot::Output, 0});
    plan.passes.push_back(std::move(ps));
  }
  return plan;
}

// unfold: x [N, C, H, W] -> out [N, C*kh*kw, L], one invocation per output element;
// out-of-image taps read pad_value.
TemplatePlan unfold(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const TView& x = in[0];
  const int64_t H = x.shape[2], W = x.shape[3];
  const int64_t ow = (W + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  std::string body = unravel(out.shape, "i", "c");  // c0 = n, c1 = (ch * kh + ki) * kw + kj, c2 = l
  body += "    let kj = i32(c1 % " + u(p.kw) + ");\n    let ki = i32((c1 / " + u(p.kw) + ") % " + u(p.kh) + ");\n";
  body += "    let ch = c1 / " + u(p.kh * p.kw) + ";\n";
  body += "    let y = i32(c2 / " + u(ow) + ") * " + n(p.sh) + " - " + n(p.ph) + " + ki * " + n(p.dh) + ";\n";
  body += "    let xx = i32(c2 % " + u(ow) + ") * " + n(p.sw) + " - " + n(p.pw) + " + kj * " + n(p.dw) + ";\n";
  const std::string ct = wgsl_compute_type(out.dtype);
  const std::string pad = ct == "f32" ? f32_literal(p.pad_value) : "(" + std::to_string(static_cast<int64_t>(p.pad_value)) + "i)";
  body += "    var v: " + ct + " = " + pad + ";\n";
  body += "    if (y >= 0i && y < " + n(H) + " && xx >= 0i && xx < " + n(W) + ") { v = " +
          ld("in0", x.dtype, off(x, {"c0", "ch", "u32(y)", "u32(xx)"})) + "; }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

// fold: cols [N, C*kh*kw, L] -> out [N, C, h, w]: each output element sums the taps that
// read it, in (ki, kj) order.
TemplatePlan fold(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const TView& cols = in[0];
  const int64_t oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  const int64_t ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  std::string body = unravel(out.shape, "i", "c");  // n, ch, y, x
  const std::string ct = wgsl_compute_type(out.dtype);
  body += "    var v: " + ct + " = " + ct + "(0);\n";
  body += "    for (var ki = 0i; ki < " + n(p.kh) + "; ki++) {\n      for (var kj = 0i; kj < " + n(p.kw) + "; kj++) {\n";
  body += "        let ty = i32(c2) + " + n(p.ph) + " - ki * " + n(p.dh) + ";\n";
  body += "        let tx = i32(c3) + " + n(p.pw) + " - kj * " + n(p.dw) + ";\n";
  body += "        if (ty >= 0i && tx >= 0i && ty % " + n(p.sh) + " == 0i && tx % " + n(p.sw) + " == 0i && ty / " + n(p.sh) + " < " +
          n(oh) + " && tx / " + n(p.sw) + " < " + n(ow) + ") {\n";
  body += "          let row = c1 * " + u(p.kh * p.kw) + " + u32(ki * " + n(p.kw) + " + kj);\n";
  body += "          let l = u32((ty / " + n(p.sh) + ") * " + n(ow) + " + tx / " + n(p.sw) + ");\n";
  body += "          v += " + ld("in0", cols.dtype, off(cols, {"c0", "row", "l"})) + ";\n        }\n      }\n    }\n";
  body += "    " + st("out", n(out.offset) + " + i32(i)", "v") + "\n";
  return one(k, in_decls(in) + decl(1, "out", out.dtype, true), numel(out.shape), body, 1);
}

// random: Philox4x32-10 (core/philox.h) keyed by the seed, counter = offset + i; seed and
// offset come from a params buffer the runtime rewrites each step (the offset moves as the
// CPU's generator does), so every replay draws fresh numbers. Uniform and integer draws are
// the CPU's exactly; normal ones use f32 log/cos (the CPU: double): within 1e-3 on SwiftShader.
TemplatePlan random(const Kernel& k, const TView& out) {
  const auto& p = std::get<RandomParams>(k.node.params);
  const int64_t count = numel(out.shape);
  const std::string ct = wgsl_compute_type(out.dtype);
  std::string fns =
      "@group(0) @binding(1) var<storage, read> rp: array<u32>;  // seed lo, seed hi, offset lo, offset hi\n\n"
      "// The high and low words of a * b (WGSL has no 64-bit integers).\n"
      "fn mulhilo(a: u32, b: u32) -> vec2<u32> {\n"
      "  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;\n"
      "  let ll = al * bl; let hl = ah * bl; let lh = al * bh; let hh = ah * bh;\n"
      "  let mid = (ll >> 16u) + (hl & 0xffffu) + (lh & 0xffffu);\n"
      "  return vec2<u32>(hh + (hl >> 16u) + (lh >> 16u) + (mid >> 16u), a * b);\n"
      "}\n\n"
      "fn philox(c0_: u32, c1_: u32, k0_: u32, k1_: u32) -> vec4<u32> {\n"
      "  var c = vec4<u32>(c0_, c1_, 0u, 0u);\n  var k0 = k0_;\n  var k1 = k1_;\n"
      "  for (var r = 0; r < 10; r++) {\n"
      "    let p0 = mulhilo(0xD2511F53u, c.x);\n    let p1 = mulhilo(0xCD9E8D57u, c.z);\n"
      "    c = vec4<u32>(p1.x ^ c.y ^ k0, p1.y, p0.x ^ c.w ^ k1, p0.y);\n"
      "    k0 += 0x9E3779B9u;\n    k1 += 0xBB67AE85u;\n  }\n  return c;\n}\n\n";
  std::string body = "    let lo = rp[2] + i;\n    let hi = rp[3] + select(0u, 1u, lo < i);\n";
  body += "    let w = philox(lo, hi, rp[0], rp[1]);\n";
  std::string v;
  if (p.dist == 0) {
    body += "    let u = f32(w.x >> 8u) * (1.0f / 16777216.0f);\n";
    v = f32_literal(p.low) + " + " + f32_literal(p.high - p.low) + " * u";
  } else if (p.dist == 1) {
    body += "    let u0 = f32(w.x >> 8u) * (1.0f / 16777216.0f);\n    let u1 = f32(w.y >> 8u) * (1.0f / 16777216.0f);\n";
    body += "    let z = sqrt(-2.0f * log(1.0f - u0)) * cos(6.2831853071795862f * u1);\n";
    v = f32_literal(p.low) + " + " + f32_literal(p.high) + " * z";
  } else {
    const int64_t low = static_cast<int64_t>(p.low), m = static_cast<int64_t>(p.high) - low;
    if (m <= 0 || m >= 65536)
      fail("random", k.node.loc, "webgpu export: integer draws need 0 < high - low < 65536, got ", m);
    // (w.y * 2^32 + w.x) mod m, in 32-bit steps.
    body += "    let m = " + u(m) + ";\n    let r32 = (0xffffffffu % m + 1u) % m;\n";
    body += "    let r = ((w.y % m) * r32 + w.x % m) % m;\n";
    v = ct == "f32" ? "f32(" + n(low) + " + i32(r))" : n(low) + " + i32(r)";
  }
  if (ct != "f32" && p.dist != 2) v = ct + "(" + v + ")";
  body += "    " + st("out", n(out.offset) + " + i32(i)", v) + "\n";
  TemplatePlan plan = one(k, decl(0, "out", out.dtype, true) + fns, count, body, 0);
  plan.passes[0].params = {static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32), static_cast<uint32_t>(p.offset),
                           static_cast<uint32_t>(p.offset >> 32)};
  plan.passes[0].random = true;
  return plan;
}

}  // namespace

size_t gpu_bytes(DType t, int64_t count) {
  const size_t c = static_cast<size_t>(std::max<int64_t>(count, 0));
  const size_t bytes = is_packed(t) ? c * dtype_size(t) : c * 4;
  return std::max<size_t>((bytes + 3) / 4 * 4, 4);
}

namespace {
TemplatePlan matmul_either(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  const Shape& o = out.shape;
  const bool blocked = o.size() >= 2 && o[o.size() - 2] > 0 && o.back() > 0 && out.dtype == DType::F32;
  return blocked ? matmul_blocked(k, in, out) : matmul(k, in, out);
}

// WebGPU has no f64 and no 64-bit integers: the bundle narrows them (gpu_bytes).
constexpr const char* kNarrowed = "f64 runs as f32, i64 as i32";

[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.coverage().set_elementwise(kAllDTypes, kNarrowed);
  ops.add(OpId::Matmul, kFloatDTypes, matmul_either, kNarrowed);
  ops.add(OpId::Reduce, kAllDTypes, reduce, kNarrowed);
  ops.add(OpId::Softmax, kFloatDTypes, softmax, kNarrowed);
  ops.add(OpId::LogSoftmax, kFloatDTypes, softmax, kNarrowed);
  ops.add(OpId::LayerNorm, kFloatDTypes, norm, kNarrowed);
  ops.add(OpId::RmsNorm, kFloatDTypes, norm, kNarrowed);
  ops.add(OpId::LayerNormBackward, kFloatDTypes, layer_norm_backward, kNarrowed);
  ops.add(OpId::IndexSelect, kAllDTypes, index_select, kNarrowed);
  ops.add(OpId::Gather, kAllDTypes, gather, kNarrowed);
  ops.add(OpId::ScatterAdd, kFloatDTypes | kIntDType, scatter_add, kNarrowed);
  ops.add(OpId::OneHot, kIntDType, one_hot, kNarrowed);
  ops.add(OpId::Tri, kAllDTypes, tri, kNarrowed);
  ops.add(OpId::Cumsum, kAllDTypes, cumsum, kNarrowed);
  ops.add(OpId::ArgReduce, kAllDTypes, argreduce, kNarrowed);
  ops.add(OpId::Pad, kAllDTypes, pad, kNarrowed);
  ops.add(OpId::Concat, kAllDTypes, concat, kNarrowed);
  ops.add(OpId::SliceScatter, kAllDTypes, slice_scatter, kNarrowed);
  ops.add(OpId::Attention, kFloatDTypes, attention_forward, kNarrowed);
  ops.add(OpId::AttentionBackward, kFloatDTypes, attention_backward, kNarrowed);
  ops.add(OpId::Unfold, kAllDTypes, unfold, kNarrowed);
  ops.add(OpId::Fold, kFloatDTypes, fold, kNarrowed);
  ops.add(OpId::Random, kFloatDTypes | kIntDType, [](const Kernel& k, const std::vector<TView>&, const TView& out) {
    return random(k, out);
  }, kNarrowed);
  ops.add(OpId::UserKernel, kF32DType | kIntDType, user_kernel, "the WGSL body; f32 and i32 tensors");
  ops.refuse(OpId::HostCall, "a host function cannot run inside an exported bundle");
  ops.refuse(OpId::CrossEntropy, "no WGSL kernel: exported steps trace cross_entropy as log_softmax and gather");
  ops.refuse(OpId::CrossEntropyBackward, "no WGSL kernel: exported steps trace cross_entropy as log_softmax and gather");
  ops.refuse(OpId::Conv2d, "no WGSL kernel: exported steps trace conv2d as unfold and matmul");
  // Generation (include/alk/generate.h) is not exported: a bundle replays a training step or a forward.
  ops.refuse(OpId::KvCacheWrite, "no WGSL kernel: bundles do not export KV-cache generation");
  ops.refuse(OpId::DecodeAttention, "no WGSL kernel: bundles do not export KV-cache generation");
  ops.refuse(OpId::SampleTokens, "no WGSL kernel: bundles do not export KV-cache generation");
  return true;
}();

TemplatePlan passes_of(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  check_output(k, out.dtype);
  for (const TView& v : in)
    if (v.shape.size() != v.strides.size()) fail(std::string(op_name(k.node.op)), k.node.loc, "webgpu export: a view without strides");
  const TemplateLaunch* run = template_ops().find(k.node.op);
  if (!run) fail(std::string(op_name(k.node.op)), k.node.loc, "webgpu export: ", unsupported_reason(k.node.op));
  return (*run)(k, in, out);
}
}  // namespace

TemplateOpTable<TemplateLaunch>& template_ops() {
  static TemplateOpTable<TemplateLaunch> table("webgpu");
  return table;
}

std::string unsupported_reason(OpId op) {
  const OpSupport& s = template_ops().coverage().support(op);
  if (s.status == OpSupport::Status::Refused) return s.note;
  if (s.status == OpSupport::Status::Runs) return "";
  return "no WGSL kernel for " + std::string(op_name(op));
}

TemplatePlan template_passes(const Kernel& k, const std::vector<TView>& in, const TView& out) {
  TemplatePlan p = passes_of(k, in, out);
  if (expr::WgslNativeF16::active())
    for (Pass& pass : p.passes)
      if (pass.source.find("<f16>") != std::string::npos)
        pass.source = "enable f16;  // WebGPU's shader-f16: f16 buffers are array<f16>\n" + pass.source;
  return p;
}

}  // namespace alk::webgpu
