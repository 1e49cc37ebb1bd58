// The ceiling under the f16 GEMM (issue 8: half precision on the H200 at >= 50% of cuBLAS):
// how fast VK_NV_cooperative_matrix runs through GLSL on this device when nothing else
// limits it, step by step toward what the GEMM's inner loop does. Every workgroup's
// subgroups each own TM x TN 16x16 f32 accumulators and run `iters` k steps of 16:
//
//   mma   fragments loaded from shared memory once, then only coopMatMulAddNV (the tensor
//         cores' rate as the driver compiles NV cooperative matrices: mma.sync on Hopper)
//   lds   each k step loads its TM A and TN B fragments from shared memory first (the
//         GEMM's inner loop: As[m][k], Bs[k][n], rows padded by 8 halfs), 4 k steps cycling
//         over a 64-deep slice so the loads cannot be hoisted
//   bar   lds with a barrier() every 1 (or BAR_EVERY) k steps (a 16-deep slice per barrier:
//         the GEMM's double-buffered 128x256x16 tiles)
//
//   bench_vulkan_coop_peak [--device vulkan:I] [--iters N] [--compile-only]
//
// --compile-only: every form's shader through shaderc, no device needed (checks the text here).
//
// Prints one line per form and shape: TFLOP/s (2 x 16^3 per product, every subgroup of
// every workgroup), median of 5 timed dispatches after a quarter second of warm-up; under ALK_VK_PIPELINE_STATS=1
// also what the driver says it compiled each to (registers, spills). Needs
// VK_NV_cooperative_matrix (prints SKIP otherwise). bench/vulkan/NOTES.md has the H200's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "alk/error.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"

namespace {

using namespace alk;

struct Form {
  std::string mode;  // mma | lds | bar
  unsigned tm, tn, subgroups, bar_every;
};

// The shader for one form: every subgroup reads the same 16 TM rows of As and 16 TN columns
// of Bs (both 64 deep; bank conflicts arise only within one subgroup's access, and the
// 48 KiB NVIDIA offers would not hold a slice per subgroup).
std::string shader(const Form& f) {
  const unsigned bm = 16 * f.tm, bn = 16 * f.tn;
  std::string s =
      "#version 450\n#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n"
      "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
      "#extension GL_EXT_control_flow_attributes : require\n";
  s += "layout(local_size_x = " + std::to_string(32 * f.subgroups) + ") in;\n";
  s += "#define TM " + std::to_string(f.tm) + "u\n#define TN " + std::to_string(f.tn) + "u\n#define BM " + std::to_string(bm) +
       "u\n#define BN " + std::to_string(bn) + "u\n#define WG " + std::to_string(32 * f.subgroups) + "u\n";
  s += R"(#define AS_STRIDE (64u + 8u)
#define BS_STRIDE (BN + 8u)
layout(std430, binding = 0) readonly buffer In { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Params { uint iters; } p;
shared uvec4 As[BM * AS_STRIDE / 8u];
shared uvec4 Bs[64u * BS_STRIDE / 8u];
void main() {
  const uint tid = gl_LocalInvocationID.x, sg = tid / 32u;
  for (uint i = tid; i < BM * AS_STRIDE / 8u; i += WG) As[i] = src[i % 4096u];
  for (uint i = tid; i < 64u * BS_STRIDE / 8u; i += WG) Bs[i] = src[(i + 7u) % 4096u];
  barrier();
)";
  auto each = [&](auto&& body) {
    std::string x;
    for (unsigned i = 0; i < f.tm; ++i)
      for (unsigned j = 0; j < f.tn; ++j) x += body(std::to_string(i), std::to_string(j));
    return x;
  };
  s += each([](const std::string& i, const std::string& j) {
    return "  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc" + i + j + " = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);\n";
  });
  for (unsigned i = 0; i < f.tm; ++i) s += "  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa" + std::to_string(i) + ";\n";
  for (unsigned j = 0; j < f.tn; ++j) s += "  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb" + std::to_string(j) + ";\n";
  auto loads = [&](const std::string& kk) {
    std::string x;
    for (unsigned i = 0; i < f.tm; ++i)
      x += "    coopMatLoadNV(fa" + std::to_string(i) + ", As, ((" + std::to_string(16 * i) +
           "u) * AS_STRIDE + " + kk + ") / 8u, AS_STRIDE / 8u, false);\n";
    for (unsigned j = 0; j < f.tn; ++j)
      x += "    coopMatLoadNV(fb" + std::to_string(j) + ", Bs, (" + kk + " * BS_STRIDE + " + std::to_string(16 * j) +
           "u) / 8u, BS_STRIDE / 8u, false);\n";
    return x;
  };
  const std::string products = each([](const std::string& i, const std::string& j) {
    return "    acc" + i + j + " = coopMatMulAddNV(fa" + i + ", fb" + j + ", acc" + i + j + ");\n";
  });
  if (f.mode == "mma") {
    s += loads("0u") + "  for (uint it = 0u; it < p.iters; ++it) {\n" + products + "  }\n";
  } else {
    s += "  for (uint it = 0u; it < p.iters; ++it) {\n    const uint kk = (it & 3u) * 16u;\n" + loads("kk") + products;
    if (f.mode == "bar") s += "    if ((it % " + std::to_string(f.bar_every) + "u) == 0u) barrier();\n";
    s += "  }\n";
  }
  // Every accumulator stored (else the compiler drops the work), each subgroup its own place.
  s += "  const uint base = (gl_WorkGroupID.x * WG / 32u + sg) * TM * TN * 256u;\n";
  unsigned n = 0;
  for (unsigned i = 0; i < f.tm; ++i)
    for (unsigned j = 0; j < f.tn; ++j, ++n)
      s += "  coopMatStoreNV(acc" + std::to_string(i) + std::to_string(j) + ", dst, base + " + std::to_string(256 * n) +
           "u, 16u, false);\n";
  return s + "}\n";
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  uint32_t iters = 2048;
  bool compile_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = vk::parse_device_name(argv[++i]);
    else if (!std::strcmp(argv[i], "--compile-only")) compile_only = true;
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = static_cast<uint32_t>(std::atoi(argv[++i]));
    else { std::fprintf(stderr, "usage: bench_vulkan_coop_peak [--device vulkan:I] [--iters N] [--compile-only]\n"); return 2; }
  }
  const std::vector<Form> forms = {
      {"mma", 4, 4, 8, 1}, {"mma", 2, 4, 8, 1}, {"mma", 4, 4, 4, 1}, {"mma", 2, 2, 8, 1},
      {"lds", 4, 4, 8, 1}, {"lds", 2, 4, 8, 1}, {"lds", 4, 4, 4, 1}, {"lds", 2, 4, 16, 1},
      {"bar", 4, 4, 8, 1}, {"bar", 4, 4, 8, 2}, {"bar", 2, 4, 8, 1}, {"bar", 4, 4, 4, 1}, {"bar", 4, 4, 4, 2}};
  try {
    if (compile_only) {
      for (const Form& f : forms) vk::compile_glsl(shader(f), "coop_peak.comp");
      std::printf("compiled %zu forms\n", forms.size());
      return 0;
    }
    const auto& devs = vk::devices();
    if (devs.empty()) { std::printf("SKIP no Vulkan device: %s\n", vk::unavailable_reason().c_str()); return 0; }
    auto ctx = vk::Context::get(device);
    if (!ctx->info().cooperative_matrix_nv) {
      std::printf("SKIP %s offers no VK_NV_cooperative_matrix\n", ctx->info().name.c_str());
      return 0;
    }
    const uint32_t groups = 132 * 8;  // several waves of every SM's worth
    const size_t src_bytes = 4096 * 16;
    std::vector<uint8_t> host(src_bytes);
    for (size_t i = 0; i < src_bytes; i += 2) host[i + 1] = 0x3c, host[i] = static_cast<uint8_t>(i);  // halfs near 1
    auto src = ctx->pool().allocate(src_bytes);
    ctx->stream().upload(src, 0, host.data(), src_bytes);
    std::printf("device %s, %u workgroups, %u k steps of 16 per subgroup\n", ctx->info().name.c_str(), groups, iters);
    for (const Form& f : forms) {
      const size_t dst_bytes = size_t(groups) * f.subgroups * f.tm * f.tn * 256 * 4;
      auto dst = ctx->pool().allocate(dst_bytes);
      const vk::Pipeline& pipe = ctx->pipeline(shader(f), 2, 4);
      std::vector<uint8_t> pc(4);
      std::memcpy(pc.data(), &iters, 4);
      const vk::Binding b[2] = {{src, 0, src_bytes, false}, {dst, 0, dst_bytes, true}};
      // A quarter second of the same work first, so the GPU is at its clocks (bench_gemm.cpp).
      for (const auto warm = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - warm < std::chrono::milliseconds(250);) {
        ctx->stream().dispatch(pipe, b, pc, vk::Groups{groups, 1, 1});
        ctx->stream().synchronize();
      }
      std::vector<double> ms;
      for (int r = 0; r <= 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        ctx->stream().dispatch(pipe, b, pc, vk::Groups{groups, 1, 1});
        ctx->stream().synchronize();
        if (r) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double flop = 2.0 * 4096 * groups * f.subgroups * f.tm * f.tn * double(iters);
      const std::string stats = ctx->pipeline_statistics(pipe);
      std::printf("COOPPEAK %-3s frags %ux%u subgroups %2u%s: %.3f ms, %.1f TFLOP/s%s%s\n", f.mode.c_str(), f.tm, f.tn,
                  f.subgroups, f.mode == "bar" ? (" barrier every " + std::to_string(f.bar_every)).c_str() : "",
                  ms[ms.size() / 2], flop / (ms[ms.size() / 2] * 1e9), stats.empty() ? "" : "\n  driver: ", stats.c_str());
      std::fflush(stdout);
    }
  } catch (const alk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
