// How much one storage-buffer element costs on a Vulkan device, by load width: a rank-1
// copy out[i] = in[i] + 1 over N floats as (a) one float per invocation, (b) one vec4 per
// invocation (vec4-typed buffers), (c) four floats per invocation loaded one at a time
// (separates the per-invocation cost from the per-load cost). Prints the process CPU time
// (getrusage: lavapipe's worker threads count) and wall time per element, median of R runs.
//
//   bench_vulkan_load_width [--n N] [--iters R] [--device vulkan:I]
//
// Written for lavapipe (bench/vulkan/NOTES.md: "wide loads"): if a vec4 load is one
// per-lane loop iteration moving 16 bytes, (b) costs ~1/4 of (a) per element.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alk/error.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/stream.h"

namespace {

using namespace alk;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

const char* kHead =
    "#version 450\nlayout(local_size_x = 256) in;\n"
    "layout(push_constant) uniform Params { uint n; } p;\n";

std::string kernel(const std::string& form) {
  std::string s = kHead;
  if (form == "float") {
    s += "layout(std430, binding = 0) readonly buffer In { float a[]; };\n"
         "layout(std430, binding = 1) writeonly buffer Out { float b[]; };\n"
         "void main() { uint step = gl_NumWorkGroups.x * 256u;\n"
         "  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += step) b[i] = a[i] + 1.0; }\n";
  } else if (form == "vec4") {
    s += "layout(std430, binding = 0) readonly buffer In { vec4 a[]; };\n"
         "layout(std430, binding = 1) writeonly buffer Out { vec4 b[]; };\n"
         "void main() { uint step = gl_NumWorkGroups.x * 256u;\n"
         "  for (uint i = gl_GlobalInvocationID.x; i < p.n / 4u; i += step) b[i] = a[i] + 1.0; }\n";
  } else {  // float4: four scalar loads per invocation
    s += "layout(std430, binding = 0) readonly buffer In { float a[]; };\n"
         "layout(std430, binding = 1) writeonly buffer Out { float b[]; };\n"
         "void main() { uint step = gl_NumWorkGroups.x * 256u;\n"
         "  for (uint i = gl_GlobalInvocationID.x; i < p.n / 4u; i += step) {\n"
         "    uint j = 4u * i; float x0 = a[j], x1 = a[j + 1u], x2 = a[j + 2u], x3 = a[j + 3u];\n"
         "    b[j] = x0 + 1.0; b[j + 1u] = x1 + 1.0; b[j + 2u] = x2 + 1.0; b[j + 3u] = x3 + 1.0; } }\n";
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 1 << 20;
  int iters = 9, device = -1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc) n = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = vk::parse_device_name(argv[++i]);
    else { std::fprintf(stderr, "usage: bench_vulkan_load_width [--n N] [--iters R] [--device vulkan:I]\n"); return 2; }
  }
  try {
    const auto& devs = vk::devices();
    if (devs.empty()) { std::printf("SKIP no Vulkan device: %s\n", vk::unavailable_reason().c_str()); return 0; }
    if (device < 0) device = static_cast<int>(devs.size()) - 1;  // lavapipe comes last
    auto ctx = vk::Context::get(device);
    n = n / 4 * 4;
    const size_t bytes = static_cast<size_t>(n) * 4;
    std::vector<float> host(static_cast<size_t>(n), 1.5f);
    auto in = ctx->pool().allocate(bytes), out = ctx->pool().allocate(bytes);
    ctx->stream().upload(in, 0, host.data(), bytes);
    std::printf("device %s, n %lld floats\n", ctx->info().name.c_str(), static_cast<long long>(n));
    for (const char* form : {"float", "vec4", "float4"}) {
      const vk::Pipeline& pipe = ctx->pipeline(kernel(form), 2, 4);
      const uint32_t push = static_cast<uint32_t>(n);
      std::vector<uint8_t> pc(4);
      std::memcpy(pc.data(), &push, 4);
      const vk::Binding b[2] = {{in, 0, bytes, false}, {out, 0, bytes, true}};
      const int64_t invocations = std::string(form) == "float" ? n : n / 4;
      const uint32_t groups = static_cast<uint32_t>(std::min<int64_t>((invocations + 255) / 256, 65535));
      std::vector<double> cpu, wall;
      for (int r = 0; r <= iters; ++r) {
        const double c0 = cpu_seconds();
        const auto w0 = std::chrono::steady_clock::now();
        ctx->stream().dispatch(pipe, b, pc, vk::Groups{groups, 1, 1});
        ctx->stream().synchronize();
        const double c1 = cpu_seconds();
        const auto w1 = std::chrono::steady_clock::now();
        if (r == 0) continue;  // the first carries the pipeline build
        cpu.push_back(c1 - c0);
        wall.push_back(std::chrono::duration<double>(w1 - w0).count());
      }
      std::sort(cpu.begin(), cpu.end());
      std::sort(wall.begin(), wall.end());
      std::vector<float> back(static_cast<size_t>(n));
      ctx->stream().download(out, 0, back.data(), bytes);
      ctx->stream().synchronize();
      const bool ok = std::all_of(back.begin(), back.end(), [](float v) { return v == 2.5f; });
      std::printf("LOADWIDTH %-6s cpu %.2f ns/elem  wall %.2f ns/elem  %s\n", form, 1e9 * cpu[cpu.size() / 2] / n,
                  1e9 * wall[wall.size() / 2] / n, ok ? "ok" : "WRONG");
    }
  } catch (const alk::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
