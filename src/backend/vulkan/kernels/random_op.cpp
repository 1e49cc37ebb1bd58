// random() on Vulkan: the same numbers as the CPU, bit for bit (core/philox.h fixes the
// counter -> value mapping; backend/cpu/kernels_random.cpp the conversions).
//
// Philox4x32-10 needs 32x32->64-bit products: umulExtended, no shaderInt64. The 64-bit
// counter offset + i is added with a carry. The integer distribution's 64-bit modulo is
// shaderInt64's where the device has it, else a shift-and-subtract division on two 32-bit
// words (a 64-step loop per element), so no path needs int64.
//
// The CPU computes in double: low + (high - low) * u, sqrt(-2 log(1 - u0)) * cos(2 pi u1)
// and then rounds to the output dtype. GLSL has double + - * (correctly rounded, and kept
// unfused with `precise`), but no double log or cos, and Vulkan only promises float
// precision for double division and sqrt; so this file brings its own:
//   - reciprocal and sqrt: a float estimate refined by Newton steps with fma;
//   - log(x), x in [2^-24, 1]: x = m 2^e (m in [sqrt(1/2), sqrt(2))), log m = 2 atanh(s),
//     s = (m - 1) / (m + 1), by its series to s^23 (|s| < 0.172: the next term < 2^-60),
//     plus e ln 2 with ln 2 split in two so e * ln2_hi is exact;
//   - cos(t), t in [0, 2 pi): t - k pi/2 with pi/2 in three parts (the first two of 33
//     bits, so their multiples by k <= 4 are exact and the subtractions cancel exactly),
//     then the Taylor series of sin or cos on [-pi/4, pi/4] to r^19 / r^18.
// These are within a few units of the last place of double, and the value is then
// rounded to float (philox_normal returns float): it can differ from the CPU's only when
// the exact result lies within a few double ulps of the midpoint between two floats, a
// chance of about 2^-28 per element. The tests draw tens of thousands of elements at
// several seeds and offsets and find every one identical.
//
// Outputs: f32, f64, f16, bf16 (stored through float with the CPU's conversions), and i32/i64
// for the integer distribution. Devices without shaderFloat64 run the integer distribution
// into integers and uniform draws with low = 0, high = 1 (u itself, exact in float); the
// rest needs f64.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/template_common.h"
#include "backend/vulkan/vulkan_device.h"

namespace alk::vk {
namespace {

using kernels::Launch;

enum Dist { kUniform = 0, kNormal = 1, kInteger = 2 };  // cpu::Distribution's order

bool plain_uniform(const RandomParams& p) { return p.low == 0.0 && p.high == 1.0; }

// The device's native 64-bit integers, unless ALK_VK_EMULATE_INT64=1 asks for the 32-bit
// path every device has (the tests run both).
bool native_int64(const Context& ctx) {
  const char* e = std::getenv("ALK_VK_EMULATE_INT64");
  return ctx.info().int64 && !(e && std::string(e) == "1");
}

bool float_out(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

std::string random_unsupported(const Context& ctx, const Kernel& k) {
  if (std::string why = kernels::common_reason(ctx, k); !why.empty()) return why;
  if (k.inputs.size() > 1) return "random takes no inputs, or its seed and offset";
  if (k.inputs.size() == 1 && (k.inputs[0].dtype != DType::I64 || numel(k.inputs[0].shape) != 2 ||
                               !kernels::is_contiguous(k.inputs[0])))
    return "random's seed and offset must be a contiguous i64 [2]";
  const auto& p = std::get<RandomParams>(k.node.params);
  const DType t = k.output.dtype;
  if (p.dist == kInteger && (t == DType::I64 || t == DType::I32)) return "";
  if (!float_out(t)) return "random " + std::string(dtype_name(t)) + " on Vulkan";
  const bool needs_f64 = t == DType::F64 || !(p.dist == kUniform && plain_uniform(p));
  if (needs_f64 && !ctx.info().float64)
    return ctx.info().name + " has no shaderFloat64 (random computes in double, as the CPU does)";
  return "";
}

// GLSL storing the double `d` (or, with from_float, the float `d`) as the CPU's
// Elem<t>::store does: through float for f32/f16/bf16.
std::string store(DType t, const std::string& d, bool from_float = false) {
  const std::string f = from_float ? d : "float(" + d + ")";
  switch (t) {
    case DType::F64: return "    out_[P(1) + i] = unpackDouble2x32(" + d + ");\n";
    case DType::F32: return "    out_[P(1) + i] = floatBitsToUint(" + f + ");\n";
    default: return "    out_[P(1) + i] = STORE(" + f + ");\n";
  }
}

std::string dbl(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // a floating literal
  return s + "LF";
}

// Horner coefficients of a series in x2 = x*x: c[0] + x2 (c[1] + x2 (...)).
std::string horner(const std::vector<double>& c, const std::string& x2) {
  std::string s = dbl(c.back());
  for (size_t i = c.size() - 1; i-- > 0;) s = dbl(c[i]) + " + " + x2 + " * (" + s + ")";
  return s;
}

std::string double_math() {
  // atanh series: 1, 1/3, 1/5, ... (2 atanh(s) = 2 s (1 + s^2/3 + ...)).
  std::vector<double> atanh_c;
  for (int j = 0; j <= 11; ++j) atanh_c.push_back(1.0 / (2 * j + 1));
  // sin r = r (1 - r^2/3! + ...), cos r = 1 - r^2/2! + ...
  std::vector<double> sin_c, cos_c;
  double f = 1;
  for (int n = 1; n <= 19; ++n) {
    f *= n;
    const double term = ((n / 2) % 2 ? -1.0 : 1.0) / f;
    (n % 2 ? sin_c : cos_c).push_back(term);
  }
  cos_c.insert(cos_c.begin(), 1.0);
  std::string s;
  s += "double rcp_d(double d) {\n"
       "  precise double y = double(1.0 / float(d));\n"
       "  for (int k = 0; k < 3; ++k) { precise double e = fma(-d, y, 1.0LF); y = fma(y, e, y); }\n"
       "  return y;\n}\n";
  s += "double sqrt_d(double x) {\n"
       "  if (x == 0.0LF) return x;\n"
       "  precise double y = double(sqrt(float(x)));\n"
       "  for (int k = 0; k < 3; ++k) { precise double r = fma(-y, y, x); y = fma(r, 0.5LF * rcp_d(y), y); }\n"
       "  return y;\n}\n";
  s += "// x in [2^-24, 1] (a positive normal double)\n"
       "double log_d(double x) {\n"
       "  uvec2 b = unpackDouble2x32(x);\n"
       "  int e = int((b.y >> 20) & 0x7ffu) - 1022;\n"
       "  precise double m = packDouble2x32(uvec2(b.x, (b.y & 0x800fffffu) | (1022u << 20)));  // [0.5, 1)\n"
       "  if (m < 0.70710678118654752LF) { m = m * 2.0LF; e -= 1; }\n"
       "  precise double num = m - 1.0LF, den = m + 1.0LF;\n"
       "  precise double inv = rcp_d(den);\n"
       "  precise double q = num * inv;\n"
       "  q = fma(fma(-q, den, num), inv, q);  // one correction: q = num / den to the last bit or so\n"
       "  precise double q2 = q * q;\n"
       "  precise double logm = 2.0LF * q * (" + horner(atanh_c, "q2") + ");\n"
       "  precise double fe = double(e);\n"
       "  return fe * " + dbl(6.93147180369123816490e-01) + " + (fe * " + dbl(1.90821492927058770002e-10) +
       " + logm);\n}\n";
  s += "// t in [0, 2 pi)\n"
       "double cos_d(double t) {\n"
       "  int k = int(floor(t * " + dbl(2.0 / M_PI) + " + 0.5LF));\n"
       "  precise double fk = double(k);\n"
       "  precise double r = t - fk * " + dbl(1.57079632673412561417e+00) + ";\n"
       "  r = r - fk * " + dbl(6.07710050630396597660e-11) + ";\n"
       "  r = r - fk * " + dbl(2.02226624879595063154e-21) + ";\n"
       "  precise double r2 = r * r;\n"
       "  precise double c = " + horner(cos_c, "r2") + ";\n"
       "  precise double sn = r * (" + horner(sin_c, "r2") + ");\n"
       "  switch (k & 3) { case 0: return c; case 1: return -sn; case 2: return -c; default: return sn; }\n"
       "}\n";
  return s;
}

void random_launch(Context& ctx, Encoder& enc, const Kernel& k) {
  const auto& p = std::get<RandomParams>(k.node.params);
  const ViewArg out = view_arg(k.output);
  const int64_t n = numel(out.shape);
  if (p.dist == kInteger && static_cast<int64_t>(p.high) <= static_cast<int64_t>(p.low))
    alk::fail("random", Loc::current(), "integer range [", static_cast<int64_t>(p.low), ", ",
              static_cast<int64_t>(p.high), ") is empty");
  if (n == 0) return;
  if (!kernels::is_contiguous(out)) fail("random: a non-contiguous output");
  const DType t = out.dtype;
  Launch l(ctx);
  const uint32_t of = l.bind(out, true);
  // A compiled step's draw (alk::compile): the seed and the base offset are read from an
  // i64 [2] buffer the replay rewrites, and p.offset is relative to that base, so the
  // recorded dispatch never changes.
  const bool state_in_buffer = !k.inputs.empty();
  const uint32_t state_of = state_in_buffer ? l.bind(view_arg(k.inputs[0]), false) : 0;
  l.u(static_cast<uint64_t>(n)), l.u(of);
  const uint64_t seed = state_in_buffer ? 0 : p.seed;  // with the state buffer, p.seed is unused
  l.u(static_cast<uint32_t>(seed)), l.u(static_cast<uint32_t>(seed >> 32));
  l.u(static_cast<uint32_t>(p.offset)), l.u(static_cast<uint32_t>(p.offset >> 32));
  auto put64 = [&](uint64_t bits) { l.u(static_cast<uint32_t>(bits)), l.u(static_cast<uint32_t>(bits >> 32)); };
  auto bits_of = [](double v) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  };
  if (p.dist == kInteger) {
    const int64_t lo = static_cast<int64_t>(p.low), hi = static_cast<int64_t>(p.high);
    put64(static_cast<uint64_t>(lo));
    put64(static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo));
  } else if (p.dist == kUniform) {
    put64(bits_of(p.low));
    put64(bits_of(p.high - p.low));  // as the CPU evaluates it
  } else {
    put64(bits_of(p.low));
    put64(bits_of(p.high));
  }
  l.u(state_of);  // P(10)
  const bool f64 = ctx.info().float64;
  std::string s = "#version 450\n" + kernels::storage_extensions(t) +
                  (p.dist == kInteger && native_int64(ctx)
                       ? "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n"
                       : "") +
                  "#define DIST " + std::to_string(p.dist) + "\n" +
                  "#define STATE_IN_BUFFER " + (state_in_buffer ? "1" : "0") + "\n" +
                  l.preamble();
  if (t == DType::F16 || t == DType::BF16) s += kernels::arithmetic_glsl(t);
  s += "layout(std430, binding = 0) writeonly buffer O { " + std::string(kernels::storage_type(t)) + " out_[]; };\n";
  if (state_in_buffer) s += "layout(std430, binding = 1) readonly buffer S { uvec2 state_[]; };\n";
  s += "uvec4 philox(uint c0, uint c1, uint k0, uint k1) {\n"
       "  uint c2 = 0u, c3 = 0u;\n"
       "  for (int round = 0; round < 10; ++round) {\n"
       "    uint hi0, lo0, hi1, lo1;\n"
       "    umulExtended(0xD2511F53u, c0, hi0, lo0);\n"
       "    umulExtended(0xCD9E8D57u, c2, hi1, lo1);\n"
       "    uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;\n"
       "    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;\n"
       "    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;\n"
       "  }\n"
       "  return uvec4(c0, c1, c2, c3);\n}\n";
  s += "// a mod m on 64-bit values as (lo, hi) words, m > 0: long division by shift and subtract.\n"
       "uvec2 mod64(uvec2 a, uvec2 m) {\n"
       "  uvec2 r = uvec2(0u);\n"
       "  for (int bit = 63; bit >= 0; --bit) {\n"
       "    bool top = (r.y >> 31) != 0u;  // r << 1 overflows 64 bits: then it exceeds m\n"
       "    r = uvec2(r.x << 1, (r.y << 1) | (r.x >> 31));\n"
       "    r.x |= ((bit >= 32 ? a.y : a.x) >> uint(bit & 31)) & 1u;\n"
       "    if (top || r.y > m.y || (r.y == m.y && r.x >= m.x)) {\n"
       "      uint borrow; r.x = usubBorrow(r.x, m.x, borrow); r.y = r.y - m.y - borrow;\n"
       "    }\n"
       "  }\n"
       "  return r;\n}\n";
  if (f64) s += double_math();
  s += "void main() {\n  uint n = P(0);\n"
       "#if STATE_IN_BUFFER\n"
       "  uvec2 key = state_[P(10)], base = state_[P(10) + 1u];\n"
       "  uint base_carry;\n"
       "  base.x = uaddCarry(base.x, P(4), base_carry);\n"
       "  base.y = base.y + P(5) + base_carry;\n"
       "#else\n"
       "  uvec2 key = uvec2(P(2), P(3)), base = uvec2(P(4), P(5));\n"
       "#endif\n"
       "  " + std::string(kernels::kLoop) +
       " {\n"
       "    uint carry;\n"
       "    uint c0 = uaddCarry(base.x, i, carry);\n"
       "    uvec4 w = philox(c0, base.y + carry, key.x, key.y);\n";
  // shaderInt64's native 64-bit modulo where the device has it (much faster than the
  // shift-and-subtract loop, which the rest of the devices run).
  s += "#if DIST == 2\n";
  s += native_int64(ctx) ? "    uvec2 r = unpackUint2x32(packUint2x32(w.xy) % packUint2x32(uvec2(P(8), P(9))));\n"
                        : "    uvec2 r = mod64(w.xy, uvec2(P(8), P(9)));\n";
  s += ""
       "    uvec2 v; v.x = uaddCarry(P(6), r.x, carry); v.y = P(7) + r.y + carry;\n";
  switch (t) {
    case DType::I64: s += "    out_[P(1) + i] = v;\n"; break;
    case DType::I32: s += "    out_[P(1) + i] = v.x;\n"; break;
    default:
      if (f64) s += "    precise double d = double(int(v.y)) * 4294967296.0LF + double(v.x);\n" + store(t, "d");
  }
  s += "#elif DIST == 0\n"
       "    float u = float(w.x >> 8) * (1.0 / 16777216.0);\n";
  if (f64) {
    s += "    precise double d = packDouble2x32(uvec2(P(6), P(7))) + packDouble2x32(uvec2(P(8), P(9))) * double(u);\n";
    s += store(t, "d");
  } else {
    s += store(t, "u", true);  // low = 0, high = 1 (random_unsupported)
  }
  s += "#else\n";
  if (f64) {
    s += "    double u0 = double(w.x >> 8) * (1.0LF / 16777216.0LF), u1 = double(w.y >> 8) * (1.0LF / 16777216.0LF);\n"
         "    precise double z = sqrt_d(-2.0LF * log_d(1.0LF - u0)) * cos_d(6.283185307179586LF * u1);\n"
         "    precise double d = packDouble2x32(uvec2(P(6), P(7))) + packDouble2x32(uvec2(P(8), P(9))) * double(float(z));\n";
    s += store(t, "d");
  }
  s += "#endif\n  }\n}\n";
  l.dispatch(enc, s, kernels::groups_for(n));
}

const bool registered = [] {
  template_ops().add(OpId::Random, kFloatDTypes | kIntDType, TemplateOp{random_unsupported, random_launch}, "f64 where the device has shaderFloat64 (and for every distribution but plain uniform)");
  return true;
}();

}  // namespace
}  // namespace alk::vk
